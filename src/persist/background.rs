//! The building blocks every piece of background work (compaction, rollups, GC) is made of:
//! unique ids for the blobs it writes, and Blob writes and deletes that retry transient errors
//! (its idempotent commands, `apply_maintenance_cmd`, are in `machine/commands.rs`). `maintenance.rs`
//! decides what runs and when; this module only provides the steps, and imports none of the
//! work it serves.
//!
//! Every step answers a permanent error (see `machine.rs`) instead of retrying it, after which
//! the shard is broken in this process and the work stops.

use std::cell::Cell;

use bytes::Bytes;

use super::events::PersistEvent;
use super::machine::Machine;
use super::PersistClient;
use crate::location::{PermanentError, SeqNo};

/// Unique names for the blobs one piece of maintenance writes.
#[derive(Debug)]
pub(crate) struct MaintenanceIds {
    prefix: String,
    next: Cell<u64>,
}

impl MaintenanceIds {
    /// Ids for the work the commit of `seqno` assigned (unique: a seqno is committed once).
    pub(crate) fn for_commit(seqno: SeqNo) -> Self {
        MaintenanceIds {
            prefix: format!("m{}", seqno.0),
            next: Cell::new(0),
        }
    }

    /// Ids drawn from the client's seeded generator, for work started by hand.
    pub(crate) fn from_client(client: &PersistClient) -> Self {
        MaintenanceIds {
            prefix: client.new_id("m"),
            next: Cell::new(0),
        }
    }

    /// The next id.
    pub(crate) fn next(&self) -> String {
        let n = self.next.get();
        self.next.set(n.saturating_add(1));
        format!("{}x{}", self.prefix, n)
    }
}

impl Machine {
    /// Sets `key` to `bytes` in Blob, retrying transient errors until it is stored (a fresh key,
    /// so retrying is safe), and records the write.
    pub(crate) async fn write_blob_retrying(
        &self,
        key: &str,
        bytes: Bytes,
        kind: &str,
    ) -> Result<(), PermanentError> {
        let blob = &self.location.blob;
        self.retrying(|| blob.set(key, bytes.clone())).await?;
        self.events.record(|| PersistEvent::BlobWritten {
            who: self.who.clone(),
            shard: self.shard_id.0.clone(),
            key: Some(key.to_string()),
            kind: kind.to_string(),
            bytes: bytes.len() as u64,
            at_ms: self.runtime.now_ms(),
        });
        Ok(())
    }

    /// Deletes `keys` from Blob, retrying transient errors (a missing key is fine: deletes are
    /// idempotent), and records it.
    pub(crate) async fn delete_blobs_retrying(
        &self,
        keys: &[String],
        kind: &str,
    ) -> Result<(), PermanentError> {
        self.delete_blobs_found(keys, kind, false).await.map(|_| ())
    }

    /// Deletes `keys` like [`Machine::delete_blobs_retrying`] and returns those that were still
    /// there; with `only_found`, the event names only those (and there is none if none was).
    pub(crate) async fn delete_blobs_found(
        &self,
        keys: &[String],
        kind: &str,
        only_found: bool,
    ) -> Result<Vec<String>, PermanentError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let blob = &self.location.blob;
        let mut found = Vec::new();
        for key in keys {
            if self.retrying(|| blob.delete(key)).await?.is_some() {
                found.push(key.clone());
            }
        }
        let recorded = if only_found { &found[..] } else { keys };
        if !recorded.is_empty() {
            self.events.record(|| PersistEvent::BlobsDeleted {
                who: self.who.clone(),
                shard: self.shard_id.0.clone(),
                kind: kind.to_string(),
                keys: recorded.to_vec(),
                at_ms: self.runtime.now_ms(),
            });
        }
        Ok(found)
    }
}
