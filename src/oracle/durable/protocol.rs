//! The oracle's storage protocol: every Consensus call it makes (the start, allocations,
//! reconciling with the head, truncation) and the rules for retrying them, as the
//! [`super`] module docs describe. The in-memory serving of timestamps is in the parent module.

use super::{covers, DurableTimestampOracle, FlagGuard};
use crate::location::{CaSResult, SeqNo, VersionedData};
use crate::oracle::config::{CLOCK_GUARD_INTERVALS, CLOCK_GUARD_STEP_MS};
use crate::oracle::events::OracleEventKind;
use crate::oracle::{DurableRecord, OracleError, TimestampState};
use crate::retry::Backoff;

impl DurableTimestampOracle {
    pub(super) async fn start(&self, initially: u64) -> Result<(), OracleError> {
        let interval = self.config.persist_interval_ms;
        let mut backoff = self.backoff();
        let mut guarded = false;
        loop {
            let head = self.read_head(&mut backoff).await?;
            let (expected, previous) = match head {
                Some((seqno, record)) => (Some(seqno), Some(record)),
                None => (None, None),
            };
            if let (false, Some(previous)) = (guarded, previous) {
                self.clock_guard(previous.upper).await;
            }
            guarded = true;
            let start_ts = previous.map_or(initially, |p| p.upper.max(initially));
            let epoch = match previous {
                None => 1,
                Some(p) => p.epoch.checked_add(1).ok_or_else(|| {
                    self.inconsistent(format!("epoch {} cannot be bumped", p.epoch))
                })?,
            };
            let record = DurableRecord {
                epoch,
                upper: start_ts.saturating_add(interval),
            };
            let seqno = self.next_seqno(expected)?;
            let new = VersionedData {
                seqno,
                data: record.encode(),
            };
            self.count(|s| s.cas_attempts += 1);
            match self
                .consensus
                .compare_and_set(&self.key, expected, new)
                .await
            {
                Ok(CaSResult::Committed) => {
                    {
                        let mut inst = self.instance.borrow_mut();
                        inst.timestamps = TimestampState::new(start_ts);
                        inst.epoch = epoch;
                        inst.seqno = seqno;
                        inst.durable_upper = record.upper;
                        debug_assert!(covers(record.upper, start_ts));
                    }
                    self.count(|s| s.durable_writes += 1);
                    self.record(OracleEventKind::Opened {
                        resumed_from: previous.map(|p| p.upper),
                        start_ts,
                        durable_upper: record.upper,
                        seqno: seqno.0,
                    });
                    self.truncate(seqno).await;
                    return Ok(());
                }
                Ok(CaSResult::ExpectationMismatch) => {
                    // Another instance wrote in between: read again and bump above it.
                    self.record(OracleEventKind::OpenConflict {
                        expected_seqno: expected.map(|s| s.0),
                    });
                }
                Err(err) => {
                    // SUBTLE: an indeterminate error may hide a commit of `epoch`. We never take
                    // that epoch: the next attempt reads it and bumps above it, fencing the ghost.
                    self.retry_wait("compare_and_set", &err, &mut backoff)
                        .await?;
                }
            }
        }
    }

    /// While the stored upper is more than two intervals ahead of the clock, waits (bounded).
    pub(super) async fn clock_guard(&self, stored_upper: u64) {
        let ahead_ms = self
            .config
            .persist_interval_ms
            .saturating_mul(CLOCK_GUARD_INTERVALS);
        let max_wait_ms = self.config.clock_guard_max_wait_ms;
        let started_ms = self.runtime.now_ms();
        loop {
            let now_ms = self.now.now();
            let bound = now_ms.saturating_add(ahead_ms);
            if stored_upper <= bound {
                return;
            }
            let waited_ms = self.runtime.now_ms().saturating_sub(started_ms);
            if waited_ms >= max_wait_ms {
                self.record(OracleEventKind::ClockGuardGaveUp {
                    stored_upper,
                    now_ms,
                    waited_ms,
                });
                return;
            }
            let wait_ms = (stored_upper - bound)
                .min(CLOCK_GUARD_STEP_MS)
                .min(max_wait_ms - waited_ms);
            self.count(|s| s.clock_guard_waits += 1);
            self.record(OracleEventKind::ClockGuardWait {
                stored_upper,
                now_ms,
                wait_ms,
            });
            self.runtime.sleep(wait_ms).await;
        }
    }
    /// Makes the durable upper cover `needed`, allocating a window if it does not.
    pub(super) async fn allocate(&self, needed: u64) -> Result<(), OracleError> {
        let _one_at_a_time = self.allocation.lock().await;
        let _allocating = FlagGuard::set(&self.allocating);
        let interval = self.config.persist_interval_ms;
        let mut backoff = self.backoff();
        loop {
            let (epoch, seqno, durable_upper) = {
                let inst = self.instance.borrow();
                (inst.epoch, inst.seqno, inst.durable_upper)
            };
            self.check_usable()?;
            if covers(durable_upper, needed) {
                return Ok(());
            }
            let record = DurableRecord {
                epoch,
                upper: needed.saturating_add(interval),
            };
            debug_assert!(record.upper > durable_upper, "allocations only go up");
            let next = self.next_seqno(Some(seqno))?;
            let new = VersionedData {
                seqno: next,
                data: record.encode(),
            };
            self.count(|s| s.cas_attempts += 1);
            match self
                .consensus
                .compare_and_set(&self.key, Some(seqno), new)
                .await
            {
                Ok(CaSResult::Committed) => {
                    // A concurrent leadership check may have read and adopted it already.
                    self.advance_durable(next, record.upper)?;
                    self.count(|s| s.durable_writes += 1);
                    self.record(OracleEventKind::Allocated {
                        for_ts: needed,
                        durable_upper: record.upper,
                        seqno: next.0,
                    });
                    self.truncate(next).await;
                    return Ok(());
                }
                Ok(CaSResult::ExpectationMismatch) => {
                    // Someone wrote after our last known version: another instance, or an
                    // earlier write of ours that we never heard back from.
                    self.reconcile(&mut backoff).await?;
                }
                Err(err) if err.is_indeterminate() => {
                    // SUBTLE: it may have happened. Read and decide (see the module docs).
                    self.retry_wait("compare_and_set", &err, &mut backoff)
                        .await?;
                    self.reconcile(&mut backoff).await?;
                }
                Err(err) => {
                    // It did not happen: try again as is.
                    self.retry_wait("compare_and_set", &err, &mut backoff)
                        .await?;
                }
            }
        }
    }

    /// Reads the head and brings this instance in line with it: fenced if a larger epoch is
    /// there, adopting the head if it carries this instance's epoch.
    pub(super) async fn reconcile(&self, backoff: &mut Backoff) -> Result<(), OracleError> {
        // SUBTLE: what this instance knows is taken *before* the read. A concurrent allocation of
        // this instance may commit (and advance `seqno`) while the read is in flight, and the
        // read may have seen the store before that commit; only a head below what was known
        // before the read started would be a contradiction.
        let (epoch, known) = {
            let inst = self.instance.borrow();
            (inst.epoch, inst.seqno)
        };
        let head = self.read_head(backoff).await?;
        let Some((seqno, record)) = head else {
            return Err(self.inconsistent(format!(
                "the record vanished (this instance wrote {known} with epoch {epoch})"
            )));
        };
        if record.epoch > epoch {
            self.instance.borrow_mut().fenced_by = Some(record.epoch);
            self.record(OracleEventKind::Fenced {
                current_epoch: record.epoch,
            });
            return Err(self.fenced(record.epoch));
        }
        if record.epoch < epoch || seqno < known {
            return Err(self.inconsistent(format!(
                "went back to epoch {} at {seqno} after this instance wrote epoch {epoch} at {known}",
                record.epoch
            )));
        }
        // Only this instance writes with its epoch: a newer version is its own write, landed
        // unheard (unless a concurrent call of this instance has recorded it meanwhile).
        if seqno > known && self.advance_durable(seqno, record.upper)? {
            self.count(|s| s.adopted_own_writes += 1);
            self.record(OracleEventKind::AdoptedOwnWrite {
                seqno: seqno.0,
                durable_upper: record.upper,
            });
        }
        Ok(())
    }

    /// Records that this instance's version `seqno` with `upper` is durable. Returns whether it
    /// was news (newer than the latest version known). A newer version of this instance's own
    /// epoch with a lower upper cannot have been written by it: the store is inconsistent.
    pub(super) fn advance_durable(&self, seqno: SeqNo, upper: u64) -> Result<bool, OracleError> {
        let mut inst = self.instance.borrow_mut();
        if seqno <= inst.seqno {
            // Already known, or older than what is: the latest version's upper is the larger.
            return Ok(false);
        }
        if upper < inst.durable_upper {
            let reason = format!(
                "version {seqno} of this instance's epoch {} lowers the upper to {upper}, below \
                 {} at {}",
                inst.epoch, inst.durable_upper, inst.seqno
            );
            drop(inst);
            return Err(self.inconsistent(reason));
        }
        inst.seqno = seqno;
        inst.durable_upper = upper;
        Ok(true)
    }

    /// Deletes every version below `seqno`, best-effort (a permanent failure still breaks the
    /// instance, for its next call).
    pub(super) async fn truncate(&self, seqno: SeqNo) {
        match self.consensus.truncate(&self.key, seqno).await {
            Ok(0) => {}
            Ok(deleted) => {
                let deleted = deleted as u64;
                self.count(|s| s.truncated_versions += deleted);
                self.record(OracleEventKind::Truncated {
                    below_seqno: seqno.0,
                    deleted,
                });
            }
            Err(err) => {
                self.record(OracleEventKind::TruncateFailed {
                    error: err.to_string(),
                });
                if let Some(permanent) = err.as_permanent() {
                    // The window just written stands; the store is gone for the next call.
                    let _ = self.note::<()>(Err(self.storage_broken(permanent)));
                }
            }
        }
    }

    /// The head, decoded; storage errors are retried (a read changes nothing).
    pub(super) async fn read_head(
        &self,
        backoff: &mut Backoff,
    ) -> Result<Option<(SeqNo, DurableRecord)>, OracleError> {
        loop {
            match self.consensus.head(&self.key).await {
                Ok(None) => return Ok(None),
                Ok(Some(v)) => {
                    let record =
                        DurableRecord::decode(&v.data).map_err(|source| OracleError::Decode {
                            timeline: self.config.timeline.clone(),
                            seqno: v.seqno.0,
                            source,
                        })?;
                    return Ok(Some((v.seqno, record)));
                }
                Err(err) => self.retry_wait("head", &err, backoff).await?,
            }
        }
    }
}
