//! [`WriteHandle`]: the capability to append updates to a shard at times at or beyond its upper.
//!
//! All async methods retry storage errors for as long as they are able; their futures cancel on
//! drop, so callers bound them with the runtime's `timeout`. Errors are
//! `Result<Result<(), UpperMismatch>, PersistError>` (see [`super::error`]).
//!
//! - [`WriteHandle::compare_and_append`] linearizes writes from every writer: it commits iff the
//!   shard's upper is exactly `expected_upper`, at most once even if acknowledgements are lost.
//! - [`WriteHandle::append`] is for replicas writing identical (definite) data: on a mismatch it
//!   trims its batch from below and tries again, succeeds as a no-op when the shard is already past
//!   its upper, and fails only on a gap.
//!
//! Batches: parts are written to Blob before the state change that references them; a batch whose
//! encoding is small stays inline in state (one Consensus write for a small append), up to a cap
//! over the whole state, beyond which the parts are flushed to Blob and the append retried.
//! [`Batch`] and [`BatchBuilder`] live in `batch.rs`.

use std::marker::PhantomData;

use bytes::Bytes;
use timely::progress::Antichain;
use timely::PartialOrder;

use super::codec::{Codec, Diff, Timestamp};
use super::encoding::{encode_part, EncodedUpdate};
use super::error::{InvalidUsage, PermanentError, PersistError, UpperMismatch};
use super::events::PersistEvent;
use super::machine::{upper_mismatch, CaaOutcome, Machine};
use super::state::{BatchPart, Description, HollowBatch, IdempotencyToken, SchemaId, WriterId};
use super::{PersistClient, ShardId};

mod batch;

use batch::{delete_parts, TransmittableBatch};
pub use batch::{Batch, BatchBuilder};

/// A handle that may append to one shard. See the module docs.
///
/// Only encoding the updates depends on `K` and `V`; everything else is in `Writer`, compiled
/// once rather than once per key and value type.
pub struct WriteHandle<K: Codec, V: Codec> {
    w: Writer,
    _codecs: PhantomData<(K, V)>,
}

/// The state and the work of a [`WriteHandle`], without its key and value types.
struct Writer {
    client: PersistClient,
    machine: Machine,
    writer_id: WriterId,
    schema_id: SchemaId,
    upper: Antichain<Timestamp>,
    expired: bool,
}

impl<K: Codec, V: Codec> WriteHandle<K, V> {
    pub(crate) fn new(
        client: PersistClient,
        machine: Machine,
        writer_id: WriterId,
        schema_id: SchemaId,
        upper: Antichain<Timestamp>,
    ) -> Self {
        WriteHandle {
            w: Writer {
                client,
                machine,
                writer_id,
                schema_id,
                upper,
                expired: false,
            },
            _codecs: PhantomData,
        }
    }

    /// A writer on the same shard as `read`.
    pub async fn from_read(read: &super::read::ReadHandle<K, V>) -> Result<Self, PersistError> {
        read.client().open_writer(read.shard_id()).await
    }

    /// The shard.
    pub fn shard_id(&self) -> &ShardId {
        &self.w.machine.shard_id
    }

    /// The writer's id.
    pub fn writer_id(&self) -> &WriterId {
        &self.w.writer_id
    }

    /// The schema this writer registered.
    pub fn schema_id(&self) -> Option<SchemaId> {
        Some(self.w.schema_id)
    }

    /// The most recent upper this handle discovered (lock-free; at most the shard's upper).
    pub fn upper(&self) -> &Antichain<Timestamp> {
        &self.w.upper
    }

    /// The most recent upper this process knows for the shard, shared by all its handles (at
    /// most the shard's upper, and at least as fresh as [`WriteHandle::upper`]).
    pub fn shared_upper(&self) -> Antichain<Timestamp> {
        self.w.machine.upper()
    }

    /// Fetches a recent upper from Consensus, linearized with writes. Fails only if the shard
    /// is broken for good.
    pub async fn fetch_recent_upper(&mut self) -> Result<&Antichain<Timestamp>, PermanentError> {
        self.w.fetch_recent_upper().await
    }

    /// A builder for a batch of updates at times `>= lower`.
    pub fn builder(&self, lower: Antichain<Timestamp>) -> BatchBuilder<K, V> {
        BatchBuilder {
            lower,
            updates: Vec::new(),
            _codecs: PhantomData,
        }
    }

    /// Finishes a builder into a batch `[lower, upper)`: consolidates, then keeps small batches
    /// inline and writes larger ones to Blob parts.
    pub async fn finish(
        &self,
        builder: BatchBuilder<K, V>,
        upper: Antichain<Timestamp>,
    ) -> Result<Batch<K, V>, PersistError> {
        let BatchBuilder { lower, updates, .. } = builder;
        let batch = self.w.finish(lower, updates, upper).await?;
        Ok(self.wrap(batch))
    }

    fn wrap(&self, batch: HollowBatch) -> Batch<K, V> {
        Batch {
            shard_id: self.w.machine.shard_id.clone(),
            batch,
            _codecs: PhantomData,
        }
    }

    /// Builds a batch `[lower, upper)` of `updates`.
    pub async fn batch<'a, I>(
        &self,
        updates: I,
        lower: Antichain<Timestamp>,
        upper: Antichain<Timestamp>,
    ) -> Result<Batch<K, V>, PersistError>
    where
        I: IntoIterator<Item = &'a ((K, V), Timestamp, Diff)>,
    {
        let mut builder = self.builder(lower);
        for ((k, v), t, d) in updates {
            builder.add(k, v, t, d)?;
        }
        self.finish(builder, upper).await
    }

    /// Rebuilds a batch from [`Batch::into_transmittable_batch`] bytes.
    pub fn batch_from_transmittable_batch(
        &self,
        bytes: &[u8],
    ) -> Result<Batch<K, V>, InvalidUsage> {
        let t: TransmittableBatch = bincode::deserialize(bytes)
            .map_err(|e| InvalidUsage::Corrupted(format!("transmittable batch: {e}")))?;
        Ok(Batch {
            shard_id: t.shard_id,
            batch: t.batch,
            _codecs: PhantomData,
        })
    }

    /// Applies `updates` and moves the upper from `expected_upper` to `new_upper`, iff the shard's
    /// upper is exactly `expected_upper`. Every update's time must be in
    /// `[expected_upper, new_upper)`. An empty `new_upper` finishes the shard; empty `updates`
    /// just move the upper (or, with `new_upper == expected_upper`, heartbeat the writer).
    pub async fn compare_and_append<'a, I>(
        &mut self,
        updates: I,
        expected_upper: Antichain<Timestamp>,
        new_upper: Antichain<Timestamp>,
    ) -> Result<Result<(), UpperMismatch>, PersistError>
    where
        I: IntoIterator<Item = &'a ((K, V), Timestamp, Diff)>,
    {
        self.w.check_live()?;
        let batch = self
            .batch(updates, expected_upper.clone(), new_upper.clone())
            .await?;
        self.w
            .compare_and_append_new(batch.batch, expected_upper, new_upper)
            .await
    }

    /// [`WriteHandle::compare_and_append`] for batches built earlier. Each batch may be truncated
    /// to `[expected_upper, new_upper)`, never extended. On failure the caller keeps the batches.
    pub async fn compare_and_append_batch(
        &mut self,
        batches: &mut [&mut Batch<K, V>],
        expected_upper: Antichain<Timestamp>,
        new_upper: Antichain<Timestamp>,
    ) -> Result<Result<(), UpperMismatch>, PersistError> {
        let batches: Vec<(&ShardId, &HollowBatch)> =
            batches.iter().map(|b| (&b.shard_id, &b.batch)).collect();
        self.w
            .compare_and_append_batches(&batches, expected_upper, new_upper)
            .await
    }

    /// Applies `updates` at `[lower, upper)` for replicated writers of identical data: on a
    /// mismatch it trims the batch from below to the shard's upper and retries, succeeds as a no-op
    /// once the shard is at or past `upper`, and returns the mismatch only on a gap (the shard's
    /// upper is before `lower`).
    pub async fn append<'a, I>(
        &mut self,
        updates: I,
        lower: Antichain<Timestamp>,
        upper: Antichain<Timestamp>,
    ) -> Result<Result<(), UpperMismatch>, PersistError>
    where
        I: IntoIterator<Item = &'a ((K, V), Timestamp, Diff)>,
    {
        self.w.check_live()?;
        let batch = self.batch(updates, lower.clone(), upper.clone()).await?;
        self.append_batch(batch, lower, upper).await
    }

    /// [`WriteHandle::append`] for a batch built earlier.
    pub async fn append_batch(
        &mut self,
        batch: Batch<K, V>,
        lower: Antichain<Timestamp>,
        upper: Antichain<Timestamp>,
    ) -> Result<Result<(), UpperMismatch>, PersistError> {
        self.w
            .append_batch(&batch.shard_id, batch.batch, lower, upper)
            .await
    }

    /// Waits until the shard's upper is beyond `frontier`, polling Consensus with back-off.
    /// Fails only if the shard is broken for good.
    pub async fn wait_for_upper_past(
        &mut self,
        frontier: &Antichain<Timestamp>,
    ) -> Result<(), PermanentError> {
        self.w.wait_for_upper_past(frontier).await
    }

    /// Heartbeats this writer's lease. An expired writer gets `InvalidUsage::Expired`.
    pub async fn heartbeat(&mut self) -> Result<(), PersistError> {
        self.w.heartbeat().await
    }

    /// Drops the handle without expiring it, as a crashed process would: its lease runs out later.
    pub fn abandon(mut self) {
        self.w.expired = true;
    }

    /// Removes this writer from the shard's state.
    pub async fn expire(mut self) {
        self.w.expire().await;
    }
}

impl Writer {
    async fn fetch_recent_upper(&mut self) -> Result<&Antichain<Timestamp>, PermanentError> {
        self.machine.fetch_and_update_state_retrying().await?;
        self.upper = self.machine.upper();
        Ok(&self.upper)
    }

    fn check_live(&self) -> Result<(), InvalidUsage> {
        if self.expired {
            return Err(InvalidUsage::Expired {
                what: "writer",
                id: self.writer_id.0.clone(),
            });
        }
        Ok(())
    }

    /// [`WriteHandle::finish`] over encoded updates.
    async fn finish(
        &self,
        lower: Antichain<Timestamp>,
        mut updates: Vec<EncodedUpdate>,
        upper: Antichain<Timestamp>,
    ) -> Result<HollowBatch, PersistError> {
        if !PartialOrder::less_equal(&lower, &upper) {
            return Err(InvalidUsage::InvalidBounds { lower, upper }.into());
        }
        if let Some((_, ts, _)) = updates.iter().find(|(_, ts, _)| upper.less_equal(ts)) {
            return Err(InvalidUsage::UpdateBeyondUpper {
                ts: *ts,
                upper: upper.clone(),
            }
            .into());
        }
        super::consolidate::consolidate_checked(&mut updates)?;
        let desc = Description::new(lower, upper);
        let len = updates.len() as u64;
        if updates.is_empty() {
            // An empty batch writes nothing.
            return Ok(HollowBatch::empty(desc));
        }
        let encoded = encode_part(&updates);
        let parts = if encoded.len() as u64 <= self.client.cfg().inline_writes_single_max_bytes {
            self.record_blob(None, "inline part", encoded.len() as u64);
            vec![BatchPart::Inline { encoded }]
        } else {
            let mut parts = Vec::new();
            for chunk in updates.chunks(self.client.cfg().part_max_updates.max(1)) {
                parts.push(self.write_part(encode_part(chunk)).await?);
            }
            parts
        };
        Ok(HollowBatch { desc, len, parts })
    }

    /// Writes one part to a fresh Blob key, retrying transient errors until it is stored. Safe to
    /// retry: the key is new and written once.
    async fn write_part(&self, encoded: Vec<u8>) -> Result<BatchPart, PermanentError> {
        let key = format!(
            "{}/{}/p{}",
            self.machine.shard_id.0,
            self.writer_id.0,
            self.client.new_id("")
        );
        let bytes = Bytes::from(encoded);
        let blob = &self.client.location().blob;
        self.machine
            .retrying(|| blob.set(&key, bytes.clone()))
            .await?;
        self.record_blob(Some(key.clone()), "part", bytes.len() as u64);
        Ok(BatchPart::Hollow {
            key,
            encoded_size_bytes: bytes.len() as u64,
        })
    }

    fn record_blob(&self, key: Option<String>, kind: &str, bytes: u64) {
        self.client.events().record(|| PersistEvent::BlobWritten {
            who: self.writer_id.0.clone(),
            shard: self.machine.shard_id.0.clone(),
            key,
            kind: kind.to_string(),
            bytes,
            at_ms: self.client.runtime().now_ms(),
        });
    }

    /// [`WriteHandle::compare_and_append`] of a batch it just built: on a definite failure the
    /// batch's parts are garbage, and are deleted.
    async fn compare_and_append_new(
        &mut self,
        batch: HollowBatch,
        expected_upper: Antichain<Timestamp>,
        new_upper: Antichain<Timestamp>,
    ) -> Result<Result<(), UpperMismatch>, PersistError> {
        let shard_id = self.machine.shard_id.clone();
        let result = self
            .compare_and_append_batches(&[(&shard_id, &batch)], expected_upper, new_upper)
            .await;
        match &result {
            Ok(Ok(())) => {}
            // SUBTLE: the write may have committed, and state may reference these parts.
            Err(PersistError::InvalidUsage(InvalidUsage::IndeterminateOutcome { .. })) => {}
            // Broken for good: write nothing more, delete nothing either.
            Err(PersistError::Permanent(_)) => {}
            // Definitely not committed: the parts are garbage.
            Ok(Err(_)) | Err(_) => delete_parts(&self.client, &batch).await,
        }
        result
    }

    /// [`WriteHandle::compare_and_append_batch`] over each batch's shard and contents.
    async fn compare_and_append_batches(
        &mut self,
        batches: &[(&ShardId, &HollowBatch)],
        expected_upper: Antichain<Timestamp>,
        new_upper: Antichain<Timestamp>,
    ) -> Result<Result<(), UpperMismatch>, PersistError> {
        self.check_live()?;
        let mut combined =
            HollowBatch::empty(Description::new(expected_upper.clone(), new_upper.clone()));
        for (shard_id, b) in batches {
            if **shard_id != self.machine.shard_id {
                return Err(InvalidUsage::BatchNotFromThisShard {
                    batch_shard: (*shard_id).clone(),
                    handle_shard: self.machine.shard_id.clone(),
                }
                .into());
            }
            let d = &b.desc;
            if !PartialOrder::less_equal(&d.lower, &expected_upper)
                || !PartialOrder::less_equal(&new_upper, &d.upper)
            {
                return Err(InvalidUsage::InvalidBatchBounds {
                    batch_lower: d.lower.clone(),
                    batch_upper: d.upper.clone(),
                    append_lower: expected_upper.clone(),
                    append_upper: new_upper.clone(),
                }
                .into());
            }
            combined.len += b.len;
            combined.parts.extend(b.parts.iter().cloned());
        }
        if !PartialOrder::less_equal(&expected_upper, &new_upper) {
            return Err(InvalidUsage::InvalidBounds {
                lower: expected_upper,
                upper: new_upper,
            }
            .into());
        }
        // One token for every retry of this call: the at-most-once guarantee.
        let token = IdempotencyToken(self.client.new_id("i"));
        loop {
            match self
                .machine
                .compare_and_append(&combined, &self.writer_id, &token)
                .await?
            {
                CaaOutcome::Committed => {
                    self.upper = new_upper;
                    return Ok(Ok(()));
                }
                CaaOutcome::UpperMismatch(current) => {
                    self.upper = current.clone();
                    return Ok(Err(upper_mismatch(&expected_upper, current)));
                }
                CaaOutcome::InlineBackpressure => {
                    // Flush the inline parts to Blob and try again.
                    let mut parts = Vec::new();
                    for part in std::mem::take(&mut combined.parts) {
                        match part {
                            BatchPart::Inline { encoded } => {
                                parts.push(self.write_part(encoded).await?)
                            }
                            hollow => parts.push(hollow),
                        }
                    }
                    combined.parts = parts;
                }
            }
        }
    }

    /// [`WriteHandle::append_batch`] of `batch`, a batch for `shard_id`.
    async fn append_batch(
        &mut self,
        shard_id: &ShardId,
        batch: HollowBatch,
        mut lower: Antichain<Timestamp>,
        upper: Antichain<Timestamp>,
    ) -> Result<Result<(), UpperMismatch>, PersistError> {
        self.check_live()?;
        loop {
            match self
                .compare_and_append_batches(&[(shard_id, &batch)], lower.clone(), upper.clone())
                .await?
            {
                Ok(()) => return Ok(Ok(())),
                Err(mismatch) => {
                    let current = mismatch.current.clone();
                    if PartialOrder::less_than(&current, &lower) {
                        // A gap: the shard is behind this batch.
                        delete_parts(&self.client, &batch).await;
                        return Ok(Err(mismatch));
                    }
                    if PartialOrder::less_equal(&upper, &current) {
                        // Someone already wrote through our upper (identical data): done.
                        delete_parts(&self.client, &batch).await;
                        return Ok(Ok(()));
                    }
                    // Trim from below: the shard already has [lower, current).
                    lower = current;
                }
            }
        }
    }

    async fn wait_for_upper_past(
        &mut self,
        frontier: &Antichain<Timestamp>,
    ) -> Result<(), PermanentError> {
        let mut backoff = self.client.cfg().backoff();
        loop {
            self.upper = self.machine.upper();
            if PartialOrder::less_than(frontier, &self.upper) {
                return Ok(());
            }
            backoff.wait(self.client.runtime()).await;
            self.machine.fetch_and_update_state_retrying().await?;
        }
    }

    async fn heartbeat(&mut self) -> Result<(), PersistError> {
        self.check_live()?;
        let id = self.writer_id.clone();
        let (_, r) = self
            .machine
            .apply_idempotent("heartbeat_writer", |_, now, c| c.heartbeat_writer(&id, now))
            .await?;
        if r.is_break() {
            self.expired = true;
            self.check_live()?;
        }
        Ok(())
    }

    async fn expire(&mut self) {
        if self.expired {
            return;
        }
        self.expired = true;
        let id = self.writer_id.clone();
        // Best effort: a broken shard keeps the writer until its lease runs out.
        let _ = self
            .machine
            .apply_idempotent("expire_writer", |_, _, c| c.expire_writer(&id))
            .await;
    }
}

impl Drop for Writer {
    /// Best-effort expiry: a detached task removes the writer; if it never runs, the lease runs out.
    fn drop(&mut self) {
        if self.expired {
            return;
        }
        let id = self.writer_id.clone();
        self.machine
            .spawn_idempotent("expire_writer", move |_, _, c| c.expire_writer(&id));
    }
}
