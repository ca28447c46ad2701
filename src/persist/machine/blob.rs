//! Blob writes and deletes for background work: each retries transient errors (a fresh key or
//! an idempotent delete makes the retry safe) and records an event; a permanent error marks the
//! shard broken and is returned (see the module docs of `machine`).

use bytes::Bytes;

use super::super::events::PersistEvent;
use super::Machine;
use crate::location::PermanentError;

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
