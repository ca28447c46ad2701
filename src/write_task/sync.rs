//! Every persist call of a write task: `prepare`, the writes with their bounded retries, and the
//! re-syncs that re-derive `to_write` after an upper mismatch (see the module docs of
//! [`super`]). The run loop that decides when to call them is in the parent module.

use std::ops::ControlFlow::{self, Break, Continue};

use timely::progress::Antichain;

use super::{
    derive_to_write, fingerprint, ops, opt, Attempt, DifferentialIntrospectionConfig,
    DifferentialWriteTask, EndReason, InitialDesired, ReadHandleFuture, Resync, SignedRows,
    WriteCause, WriteTaskError, WriteTaskEventKind,
};
use crate::persist::codec::{Diff, Row, Timestamp};
use crate::persist::error::{InvalidUsage, PersistError};

impl<R> DifferentialWriteTask<R>
where
    R: FnMut() -> ReadHandleFuture + 'static,
{
    /// `prepare`: seeds `desired` from the shard when asked to. Retries until it can read the
    /// shard (starting without it would retract what the shard holds), watching for shutdown.
    pub(super) async fn prepare(
        &mut self,
        introspection_config: DifferentialIntrospectionConfig,
    ) -> ControlFlow<EndReason> {
        let retain = match introspection_config.initial_desired {
            InitialDesired::Empty => return Continue(()),
            InitialDesired::FromShard { retain } => retain,
        };
        let mut backoff = self.retry.backoff();
        loop {
            let (write_handle, read_handle_fn) = (&mut self.write_handle, &mut self.read_handle_fn);
            let read = self.runtime.timeout(self.attempt_timeout_ms, async move {
                let upper = write_handle.fetch_recent_upper().await?.clone();
                let Some(upper_ts) = opt(&upper) else {
                    return Ok(None);
                };
                let (_, snapshot) = read_snapshot(read_handle_fn, upper_ts).await?;
                Ok::<_, PersistError>(Some((upper, snapshot)))
            });
            match read.await {
                Ok(Ok(None)) => return Break(EndReason::ShardFinished),
                Ok(Ok(Some((upper, snapshot)))) => {
                    let shard_rows = snapshot.len() as u64;
                    let desired: Vec<(Row, Diff)> = snapshot
                        .iter()
                        .filter(|(r, _)| retain(r))
                        .cloned()
                        .collect();
                    let to_write = match derive_to_write(&desired, &snapshot) {
                        Ok(w) => w,
                        Err(e) => return Break(EndReason::Failed(format!("prepare: {e}"))),
                    };
                    self.desired = desired;
                    self.to_write = to_write;
                    self.current_upper = upper;
                    self.record(|t| WriteTaskEventKind::Prepared {
                        upper: opt(&t.current_upper),
                        shard_rows,
                        desired_rows: t.desired.len() as u64,
                        to_write_rows: t.to_write.len() as u64,
                    });
                    return Continue(());
                }
                Ok(Err(e)) => return Break(EndReason::persist_failed("prepare", e)),
                Err(_elapsed) => {}
            }
            // A send or a dropped sender both mean shut down.
            if !matches!(self.shutdown_rx.try_recv(), Ok(None)) {
                self.handle_shutdown();
                return Break(EndReason::Shutdown);
            }
            backoff.wait(&self.runtime).await;
        }
    }

    /// Writes `to_write` for the responders in flight, re-syncing on mismatches, with bounded
    /// retries. When they are spent, the responders get an error and `to_write` stays pending.
    pub(super) async fn write_to_persist(&mut self, cause: WriteCause) -> ControlFlow<EndReason> {
        debug_assert!(!self.read_only, "read-only tasks never write");
        let mut backoff = self.retry.backoff();
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mismatch = match self.attempt_write(cause, attempt).await? {
                Attempt::Committed => return Continue(()),
                Attempt::Mismatch(current) => Some(current),
                Attempt::TimedOut => None,
            };
            if attempt >= self.retry.max_tries {
                let responders = self.in_flight.len() as u64;
                let current_upper = opt(&self.current_upper);
                self.answer_in_flight(|id| WriteTaskError::InvalidUppers {
                    id,
                    attempts: attempt,
                    current_upper,
                });
                self.record(|_| WriteTaskEventKind::GaveUp {
                    attempts: attempt,
                    responders,
                });
                return Continue(());
            }
            if let Some(current) = mismatch {
                self.sync_to_persist(current).await?;
            }
            backoff.wait(&self.runtime).await;
        }
    }

    /// One `compare_and_append` of `to_write` at `current_upper`, up to
    /// `max(now, current_upper + 1)`. A commit answers the responders in flight.
    pub(super) async fn attempt_write(
        &mut self,
        cause: WriteCause,
        attempt: u32,
    ) -> ControlFlow<EndReason, Attempt> {
        let Some(&expected) = self.current_upper.as_option() else {
            return Break(EndReason::ShardFinished);
        };
        let Some(next) = expected.checked_add(1) else {
            return Break(EndReason::Failed(
                "the shard's upper reached the last timestamp".into(),
            ));
        };
        let new_upper = (self.now)().max(next);
        // Every update goes at `expected`, the lower of the batch.
        let updates: Vec<((Row, ()), Timestamp, Diff)> = self
            .to_write
            .iter()
            .map(|(row, diff)| ((row.clone(), ()), expected, *diff))
            .collect();
        self.record(|t| WriteTaskEventKind::WriteAttempted {
            cause,
            attempt,
            expected_upper: Some(expected),
            new_upper: Some(new_upper),
            updates: updates.len() as u64,
            responders: t.in_flight.len() as u64,
            rows: SignedRows::of(&t.to_write),
        });
        let result = self
            .runtime
            .timeout(
                self.attempt_timeout_ms,
                self.write_handle.compare_and_append(
                    &updates,
                    Antichain::from_elem(expected),
                    Antichain::from_elem(new_upper),
                ),
            )
            .await;
        drop(updates);
        match result {
            Ok(Ok(Ok(()))) => {
                self.current_upper = Antichain::from_elem(new_upper);
                let updates = self.to_write.len() as u64;
                self.to_write.clear();
                let responders = self.in_flight.len() as u64;
                for responder in self.in_flight.drain(..) {
                    let _ = responder.send(Ok(()));
                }
                self.record(|t| WriteTaskEventKind::Committed {
                    cause,
                    expected_upper: Some(expected),
                    new_upper: Some(new_upper),
                    updates,
                    responders,
                    desired_rows: t.desired.len() as u64,
                    desired_fingerprint: fingerprint(&t.desired),
                });
                Continue(Attempt::Committed)
            }
            Ok(Ok(Err(mismatch))) => {
                self.record(|_| WriteTaskEventKind::Mismatch {
                    expected_upper: Some(expected),
                    current_upper: opt(&mismatch.current),
                });
                if mismatch.current.is_empty() {
                    return Break(EndReason::ShardFinished);
                }
                Continue(Attempt::Mismatch(mismatch.current))
            }
            Ok(Err(e)) => Break(EndReason::persist_failed("write", e)),
            Err(elapsed) => {
                self.record(|_| WriteTaskEventKind::AttemptTimedOut {
                    expected_upper: Some(expected),
                    after_ms: elapsed.after_ms,
                });
                Continue(Attempt::TimedOut)
            }
        }
    }

    /// `sync_to_persist`: adopts the shard's upper `upper` and re-derives
    /// `to_write = desired - snapshot(upper - 1)`. If the snapshot cannot be read in time, the
    /// task keeps its old upper, so the next attempt mismatches and re-syncs again.
    pub(super) async fn sync_to_persist(
        &mut self,
        upper: Antichain<Timestamp>,
    ) -> ControlFlow<EndReason> {
        let Some(&upper_ts) = upper.as_option() else {
            return Break(EndReason::ShardFinished);
        };
        if self.resync == Resync::KeepToWrite {
            // The variant without the rule: adopt the upper, keep the old diff.
            if timely::PartialOrder::less_than(&self.current_upper, &upper) {
                self.current_upper = upper;
            }
            return Continue(());
        }
        let read = self.runtime.timeout(
            self.attempt_timeout_ms,
            read_snapshot(&mut self.read_handle_fn, upper_ts),
        );
        let (as_of, snapshot) = match read.await {
            Ok(Ok(read)) => read,
            Ok(Err(e)) => {
                // The original panics here (a since violation, say); we end the task and say why.
                return Break(EndReason::persist_failed("re-sync", e));
            }
            Err(elapsed) => {
                self.record(|_| WriteTaskEventKind::ResyncFailed {
                    reason: elapsed.to_string(),
                });
                return Continue(());
            }
        };
        let to_write = match derive_to_write(&self.desired, &snapshot) {
            Ok(w) => w,
            Err(e) => return Break(EndReason::Failed(format!("re-sync: {e}"))),
        };
        debug_assert!(
            timely::PartialOrder::less_equal(&self.current_upper, &upper),
            "current_upper never regresses"
        );
        self.current_upper = upper;
        self.to_write = to_write;
        let snapshot_rows = snapshot.len() as u64;
        self.record(|t| WriteTaskEventKind::Resynced {
            upper: Some(upper_ts),
            as_of,
            snapshot_rows,
            desired_rows: t.desired.len() as u64,
            to_write_rows: t.to_write.len() as u64,
            to_write: SignedRows::of(&t.to_write),
        });
        Continue(())
    }
}

/// The shard's contents at `upper` ([`ReadHandle::contents_at_upper`]: at `upper - 1`, or at
/// the reader's since once it has passed that), consolidated, with the time read (`None` at
/// upper 0, where nothing can be), through a fresh reader (which expires in the background when
/// dropped, as the original's does).
///
/// [`ReadHandle::contents_at_upper`]: crate::persist::read::ReadHandle::contents_at_upper
async fn read_snapshot<R>(
    read_handle_fn: &mut R,
    upper: Timestamp,
) -> Result<(Option<Timestamp>, Vec<(Row, Diff)>), PersistError>
where
    R: FnMut() -> ReadHandleFuture,
{
    if upper == 0 {
        return Ok((None, Vec::new()));
    }
    let mut read = read_handle_fn().await?;
    let Some((as_of, contents)) = read.contents_at_upper(&Antichain::from_elem(upper)) else {
        return Ok((None, Vec::new()));
    };
    let fetched = contents.await?;
    drop(read);
    let mut snapshot: Vec<(Row, Diff)> = fetched
        .into_iter()
        .map(|((row, ()), _, diff)| (row, diff))
        .collect();
    // Persist consolidates already; this is cheap on sorted input and guards the invariant.
    ops::consolidate(&mut snapshot)
        .map_err(|e| PersistError::from(InvalidUsage::Corrupted(format!("snapshot: {e}"))))?;
    Ok((Some(as_of), snapshot))
}
