//! Creating a shard: an initial rollup in Blob, then `compare_and_set(None, v1)`. Losing the
//! race is fine (someone else created it); a write that may have happened is resolved by reading
//! what is there, and our rollup is deleted unless the state found references it.
//!
//! Invariant: on success the cache holds the shard's state as of now, and a rollup is listed at
//! seqno 1 of a shard this process created (the earliest live version always has one).

use bytes::Bytes;

use super::super::encoding::{encode_diff, encode_rollup, StateDiff};
use super::super::events::{CasOutcome, PersistEvent};
use super::super::state::{HollowRollup, State};
use super::{retry_outcome, Machine};
use crate::location::{CaSResult, ExternalError, PermanentError, SeqNo, VersionedData};

impl Machine {
    /// Creates the shard if Consensus has no version of it yet: an initial rollup in Blob, then
    /// `compare_and_set(None, v1)`. Losing the race is fine (someone else created it). On return
    /// the cache holds the shard's state as of now (the new one, or the one found).
    pub(crate) async fn maybe_init_shard(&self) -> Result<(), PermanentError> {
        let mut backoff = self.cfg.backoff();
        loop {
            self.check_broken()?;
            match self.try_init_shard().await {
                Ok(()) => return Ok(()),
                Err(err) => {
                    self.record_command("init", SeqNo(0), SeqNo(0), retry_outcome(&err), None);
                    self.transient(err)?;
                    backoff.wait(&self.runtime).await;
                }
            }
        }
    }

    async fn try_init_shard(&self) -> Result<(), ExternalError> {
        let head = self.location.consensus.head(&self.shard_id.0).await?;
        if head.is_some() {
            return self.fetch_and_update_state().await;
        }
        let empty = State::uninitialized(self.shard_id.clone());
        let mut initial = empty.clone();
        initial.seqno = SeqNo(1);
        initial.walltime_ms = self.runtime.now_ms().max(1);
        let rollup_key = self.rollup_key(SeqNo(1));
        initial.collections.rollups.insert(
            SeqNo(1),
            HollowRollup {
                key: rollup_key.clone(),
                encoded_size_bytes: 0,
            },
        );
        let bytes = encode_rollup(&initial);
        // The rollup's recorded size cannot include itself; it records the size without it.
        self.location
            .blob
            .set(&rollup_key, Bytes::from(bytes.clone()))
            .await?;
        self.events.record(|| PersistEvent::BlobWritten {
            who: self.who.clone(),
            shard: self.shard_id.0.clone(),
            key: Some(rollup_key.clone()),
            kind: "rollup".into(),
            bytes: bytes.len() as u64,
            at_ms: self.runtime.now_ms(),
        });
        let diff = encode_diff(&StateDiff::from_diff(&empty, &initial));
        let result = self
            .location
            .consensus
            .compare_and_set(
                &self.shard_id.0,
                None,
                VersionedData {
                    seqno: SeqNo(1),
                    data: Bytes::from(diff),
                },
            )
            .await;
        match result {
            Ok(CaSResult::Committed) => {
                self.record_command("init", SeqNo(0), SeqNo(1), CasOutcome::Committed, None);
                self.install(initial);
                Ok(())
            }
            Ok(CaSResult::ExpectationMismatch) | Err(_) => {
                // Someone else created it, or our write may have happened: read what is there,
                // and delete our rollup unless the state we find references it.
                self.fetch_and_update_state().await?;
                let referenced = self
                    .cache
                    .borrow()
                    .collections
                    .rollups
                    .values()
                    .any(|r| r.key == rollup_key);
                if !referenced {
                    let _ = self.location.blob.delete(&rollup_key).await;
                }
                match result {
                    Err(err) if !referenced => Err(err),
                    _ => Ok(()),
                }
            }
        }
    }

    fn rollup_key(&self, seqno: SeqNo) -> String {
        format!(
            "{}/rollup/{:020}/{}",
            self.shard_id.0,
            seqno.0,
            self.runtime.now_ms()
        )
    }
}
