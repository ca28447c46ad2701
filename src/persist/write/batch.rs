//! Batches: updates written to Blob (or kept inline) before the state change that appends them,
//! and the builder that collects them. A batch is appended by its [`super::WriteHandle`], or
//! handed to another process as bytes and appended there.
//!
//! Invariant: a batch's parts are in Blob before any state version refers to them; a batch that
//! is never appended is deleted by its owner ([`Batch::delete`]) or, if the owner crashes, swept
//! once its writer's lease has run out (`gc.rs`): a leak at worst, never a dangling reference.

use std::marker::PhantomData;

use serde::{Deserialize, Serialize};
use timely::progress::Antichain;

use super::super::codec::{Codec, Diff, Timestamp};
use super::super::encoding::EncodedUpdate;
use super::super::error::InvalidUsage;
use super::super::state::{Description, HollowBatch};
use super::super::{PersistClient, ShardId};
use crate::retry::retry_transient;

/// A batch of updates written (or kept inline) but not yet appended to the shard.
#[derive(Debug)]
pub struct Batch<K, V> {
    pub(super) shard_id: ShardId,
    pub(super) batch: HollowBatch,
    pub(super) _codecs: PhantomData<(K, V)>,
}

/// A [`Batch`] as bytes, to hand to another process ([`WriteHandle::batch_from_transmittable_batch`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct TransmittableBatch {
    pub(super) shard_id: ShardId,
    pub(super) batch: HollowBatch,
}

impl<K: Codec, V: Codec> Batch<K, V> {
    /// The shard this batch was written for.
    pub fn shard_id(&self) -> &ShardId {
        &self.shard_id
    }

    /// The batch's bounds and since.
    pub fn desc(&self) -> &Description {
        &self.batch.desc
    }

    /// The number of updates.
    pub fn len(&self) -> u64 {
        self.batch.len
    }

    /// Whether it has no updates.
    pub fn is_empty(&self) -> bool {
        self.batch.len == 0
    }

    /// The batch as bytes (its metadata; the parts stay where they are).
    pub fn into_transmittable_batch(self) -> Vec<u8> {
        let t = TransmittableBatch {
            shard_id: self.shard_id,
            batch: self.batch,
        };
        bincode::serialize(&t).expect("serializing plain data into a Vec")
    }

    /// Deletes the batch's Blob parts (after a failed append the caller no longer needs it),
    /// retrying transient errors. A permanent error leaves a part behind: a leak, which
    /// `gc::leaked_blobs` lists, never a dangling reference.
    pub async fn delete(self, client: &PersistClient) {
        delete_parts(client, &self.batch).await
    }
}

/// Builds a [`Batch`] from updates at times `>= lower`.
pub struct BatchBuilder<K, V> {
    pub(super) lower: Antichain<Timestamp>,
    pub(super) updates: Vec<EncodedUpdate>,
    pub(super) _codecs: PhantomData<(K, V)>,
}

impl<K: Codec, V: Codec> BatchBuilder<K, V> {
    /// Adds one update. Its time must be at or beyond the lower.
    pub fn add(
        &mut self,
        key: &K,
        val: &V,
        ts: &Timestamp,
        diff: &Diff,
    ) -> Result<(), InvalidUsage> {
        if !self.lower.less_equal(ts) {
            return Err(InvalidUsage::UpdateNotBeyondLower {
                ts: *ts,
                lower: self.lower.clone(),
            });
        }
        let (mut k, mut v) = (Vec::new(), Vec::new());
        key.encode(&mut k);
        val.encode(&mut v);
        self.updates.push(((k, v), *ts, *diff));
        Ok(())
    }
}

/// Deletes `batch`'s Blob parts, retrying transient errors (see [`Batch::delete`]).
pub(super) async fn delete_parts(client: &PersistClient, batch: &HollowBatch) {
    let blob = &client.location().blob;
    for key in batch.part_keys() {
        let mut backoff = client.cfg().backoff();
        let delete = || blob.delete(key);
        let _ = retry_transient(client.runtime(), &mut backoff, delete, |_, _| {}).await;
    }
}
