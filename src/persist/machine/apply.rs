//! The loop of one command (`Machine::apply_erased`) and compare_and_append's retry policy on
//! top of it; see the module docs of `machine` for the steps of one attempt.
//!
//! Invariants: this is the only caller of `Consensus::compare_and_set` on shard state; a
//! version is installed in the cache, and its maintenance started, only once it committed; a
//! `Break` of the transition commits nothing and spends no seqno; a tombstone commits nothing.
//! compare_and_append carries one idempotency token across its retries, so a retry that finds
//! its own token committed succeeds instead of writing twice.

use std::ops::ControlFlow::{self, Break, Continue};

use bytes::Bytes;
use timely::PartialOrder;

use super::super::encoding::{encode_diff, StateDiff};
use super::super::error::{InvalidUsage, PersistError};
use super::super::events::CasOutcome;
use super::super::state::{
    CompareAndAppendBreak, HollowBatch, IdempotencyToken, State, StateCollections, WriterId,
};
use super::{frontiers, retry_outcome, CaaOutcome, Carry, Frontiers, Machine, RoutineMaintenance};
use crate::location::{BrokenAt, CaSResult, ExternalError, PermanentKind, SeqNo, VersionedData};

/// A transition as the command loop sees it: `Break` carries the reason's debug text (see
/// `commands.rs`, which erases typed transitions into this).
pub(crate) type ErasedWork<'a> =
    dyn FnMut(SeqNo, u64, &mut StateCollections) -> ControlFlow<String, ()> + 'a;

/// What one attempt computed before its compare_and_set (see `Machine::compute_attempt`).
struct Attempt {
    new: State,
    diff: StateDiff,
    old_seqno: SeqNo,
    before: Frontiers,
    maintenance: RoutineMaintenance,
    carried: Vec<Carry>,
}

/// The outcome of computing an attempt.
// Ready is ~760 bytes and Done ~10, but a Computed is returned by compute_attempt and consumed
// at once by the loop, never stored: boxing Ready would add an allocation per attempt for no
// memory saved.
#[allow(clippy::large_enum_variant)]
enum Computed {
    /// Nothing to commit: the loop answers this at once (a `Break`, or a tombstone's answer).
    Done(SeqNo, ControlFlow<(), ()>),
    /// A new version to compare_and_set.
    Ready(Attempt),
}

impl Machine {
    /// One command: apply, compare_and_set, and on a mismatch or a determinate error fetch and
    /// apply again. Returns the seqno reached and whether the last transition broke (with its
    /// debug text); an indeterminate error is returned for the caller to resolve. Not generic:
    /// the typed front is `apply_unbatched_cmd` (commands.rs).
    pub(crate) async fn apply_erased(
        &self,
        cmd: &str,
        work: &mut ErasedWork<'_>,
    ) -> Result<(SeqNo, ControlFlow<(), ()>), ExternalError> {
        let mut backoff = self.cfg.backoff();
        loop {
            // With `command_turns`, one attempt at a time per shard in this process (`turns.rs`):
            // it computes on the outcome of the one before instead of racing it. Released before
            // any back-off.
            let mut turn = match self.cfg.command_turns {
                true => Some(self.turns.take().await),
                false => None,
            };
            self.check_broken()?;
            let now = self.runtime.now_ms();
            let attempt = match self.compute_attempt(cmd, work, now)? {
                Computed::Done(seqno, flow) => return Ok((seqno, flow)),
                Computed::Ready(attempt) => attempt,
            };
            let data = Bytes::from(encode_diff(&attempt.diff));
            let result = self
                .location
                .consensus
                .compare_and_set(
                    &self.shard_id.0,
                    Some(attempt.old_seqno),
                    VersionedData {
                        seqno: attempt.new.seqno,
                        data,
                    },
                )
                .await;
            if let Some(done) = self
                .settle_attempt(cmd, attempt, result, &mut backoff, &mut turn)
                .await?
            {
                return Ok(done);
            }
        }
    }

    /// Steps 1 and 2 of one attempt, under a borrow of the cache (one clone of the state per
    /// attempt): the transition and the maintenance riding along, or what the loop answers at
    /// once (a `Break`, a tombstone's answer; an error when no seqno is left).
    fn compute_attempt(
        &self,
        cmd: &str,
        work: &mut ErasedWork<'_>,
        now: u64,
    ) -> Result<Computed, ExternalError> {
        let old = self.cache.borrow();
        let before = frontiers(&old);
        if old.seqno.checked_next().is_none() || old.walltime_ms == u64::MAX {
            let at = BrokenAt::Version(old.seqno);
            drop(old);
            return Err(self
                .mark_broken(self.permanent(
                    at,
                    PermanentKind::Inconsistent,
                    "no seqno or walltime is left after this version",
                ))
                .into());
        }
        if old.collections.is_tombstone() {
            // A tombstone commits nothing: the transition answers from a scratch copy.
            let result = old
                .clone_apply(now, &mut |s, c| work(s, now, c))
                .map_continue(|(r, _)| r)
                .map_break(|_| ());
            let seqno = old.seqno;
            drop(old);
            let why = CasOutcome::Skipped("tombstone".into());
            self.record_command(cmd, seqno, seqno, why, Some((before, before)));
            return Ok(Computed::Done(seqno, result));
        }
        match old.clone_apply(now, &mut |s, c| work(s, now, c)) {
            Break(b) => {
                let seqno = old.seqno;
                drop(old);
                let why = CasOutcome::Skipped(b);
                self.record_command(cmd, seqno, seqno, why, Some((before, before)));
                Ok(Computed::Done(seqno, Break(())))
            }
            Continue(((), mut new)) => {
                // Maintenance rides along with every command.
                let (_, expired_writers) = new.collections.expire_at(now);
                // Both frontiers closed: the shard drops every handle.
                new.collections.maybe_become_tombstone();
                // An append carries the merges that wait to be committed (see
                // `maintenance.rs`, `PendingMerge`).
                let carried = self.carry_pending_merges(cmd, &mut new);
                // The spine back-pressure let this append through with these carries.
                debug_assert!(
                    cmd != "compare_and_append"
                        || !self.cfg.compaction_enabled
                        || new.collections.trace.within_spine_bound()
                        || new.collections.is_tombstone(),
                    "an append would commit {} batches, over the spine bound",
                    new.collections.trace.batches().len()
                );
                // Maintenance hook (plan.rs): the GC trigger, and the background
                // work this version assigns to us if it commits.
                let maintenance =
                    self.maintenance_for(cmd, &old, &mut new, !expired_writers.is_empty());
                if cfg!(debug_assertions) {
                    if let Err(e) = new.validate(Some(&old)) {
                        panic!("{cmd} broke a state invariant: {e}");
                    }
                }
                let diff = StateDiff::from_diff(&old, &new);
                if cfg!(debug_assertions) {
                    let mut check = old.clone();
                    diff.apply(&mut check)
                        .expect("a diff applies to its own base");
                    assert_eq!(check, new, "a diff must round-trip");
                }
                Ok(Computed::Ready(Attempt {
                    new,
                    diff,
                    old_seqno: old.seqno,
                    before,
                    maintenance,
                    carried,
                }))
            }
        }
    }

    /// Step 4 of one attempt: what its compare_and_set's `result` means. `Some`: the loop
    /// returns it (committed); `None`: go again (after a fetch or a back-off); an indeterminate
    /// or permanent error is handed to the caller.
    async fn settle_attempt(
        &self,
        cmd: &str,
        attempt: Attempt,
        result: Result<CaSResult, ExternalError>,
        backoff: &mut crate::retry::Backoff,
        turn: &mut Option<crate::persist::turns::Turn>,
    ) -> Result<Option<(SeqNo, ControlFlow<(), ()>)>, ExternalError> {
        let Attempt {
            new,
            diff,
            old_seqno,
            before,
            maintenance,
            mut carried,
        } = attempt;
        match result {
            Ok(CaSResult::Committed) => {
                self.record_command(
                    cmd,
                    old_seqno,
                    new.seqno,
                    CasOutcome::Committed,
                    Some((before, frontiers(&new))),
                );
                let seqno = new.seqno;
                for carry in &mut carried {
                    carry.merge.set_carried(seqno);
                    carry.resolved = true;
                }
                self.remember(seqno, &diff);
                self.install(new);
                // Maintenance hook (plan.rs): start the assigned work.
                self.start_maintenance(maintenance);
                Ok(Some((seqno, Continue(()))))
            }
            Ok(CaSResult::ExpectationMismatch) => {
                for carry in &mut carried {
                    carry.resolved = true;
                }
                drop(carried);
                // Someone else committed first: read their versions and re-apply.
                let fetched = self.fetch_and_update_state().await;
                let reached = self.seqno();
                // Before: what the attempt assumed; after: what the re-read found.
                let after = frontiers(&self.cache.borrow());
                self.record_command(
                    cmd,
                    old_seqno,
                    reached,
                    CasOutcome::Mismatch,
                    Some((before, after)),
                );
                if let Err(err) = fetched {
                    self.transient(err)?;
                    drop(turn.take());
                    backoff.wait(&self.runtime).await;
                }
                Ok(None)
            }
            Err(err @ ExternalError::Determinate(_)) => {
                for carry in &mut carried {
                    carry.resolved = true;
                }
                drop(carried);
                self.record_command(cmd, old_seqno, old_seqno, retry_outcome(&err), None);
                drop(turn.take());
                backoff.wait(&self.runtime).await;
                Ok(None)
            }
            Err(err) => {
                // Unresolved carries (dropped below) leave their merges maybe committed.
                self.record_command(cmd, old_seqno, old_seqno, retry_outcome(&err), None);
                Err(self.transient(err)?)
            }
        }
    }

    /// Applies to `new` every pending merge of this process that still applies, if `cmd` is an
    /// append; returns those it applied (committed with `new`, if it commits).
    fn carry_pending_merges(&self, cmd: &str, new: &mut State) -> Vec<Carry> {
        if cmd != "compare_and_append" {
            return Vec::new();
        }
        let pending = self.maintenance.borrow().pending_merges.clone();
        pending
            .into_iter()
            .filter(|m| m.carried.get().is_none())
            .filter(|m| {
                new.collections
                    .apply_merge_res(&m.req, &m.output)
                    .is_continue()
            })
            .map(Carry::new)
            .collect()
    }

    /// Appends `batch` iff the shard's upper is `batch.desc.lower`, at most once. See the notes,
    /// section 1.4.
    pub(crate) async fn compare_and_append(
        &self,
        batch: &HollowBatch,
        writer_id: &WriterId,
        token: &IdempotencyToken,
    ) -> Result<CaaOutcome, PersistError> {
        let lease = self.cfg.writer_lease_duration_ms;
        let mut indeterminate_seen: Option<ExternalError> = None;
        let mut backoff = self.cfg.backoff();
        loop {
            let result = self
                .apply_unbatched_cmd("compare_and_append", &mut |_, now, c| {
                    c.compare_and_append(batch, writer_id, now, lease, token)?;
                    // The spine back-pressure (`trace/mod.rs`): commit only within the bound.
                    self.spine_backpressure(c)
                })
                .await;
            match result {
                Ok((_, Continue(()))) => return Ok(CaaOutcome::Committed),
                Ok((_, Break(CompareAndAppendBreak::AlreadyCommitted))) => {
                    // Only a retry after a lost acknowledgement can find its own token.
                    debug_assert!(indeterminate_seen.is_some());
                    return Ok(CaaOutcome::Committed);
                }
                Ok((_, Break(CompareAndAppendBreak::InlineBackpressure))) => {
                    return Ok(CaaOutcome::InlineBackpressure)
                }
                Ok((_, Break(CompareAndAppendBreak::SpineBackpressure))) => {
                    // Nothing committed: wait for this process's compactor, then try again
                    // (same token: an earlier indeterminate attempt is still told apart).
                    self.await_spine_relief().await;
                }
                Ok((_, Break(CompareAndAppendBreak::InvalidUsage(e)))) => {
                    if indeterminate_seen.is_some() {
                        // SUBTLE: an earlier attempt may have committed before this writer was
                        // expired; its parts may be referenced, so they must not be deleted.
                        return Err(InvalidUsage::IndeterminateOutcome {
                            lower: batch.desc.lower.clone(),
                            upper: batch.desc.upper.clone(),
                        }
                        .into());
                    }
                    return Err(e.into());
                }
                Ok((seqno, Break(CompareAndAppendBreak::Inconsistent(detail)))) => {
                    let err = self.permanent(
                        BrokenAt::Version(seqno),
                        PermanentKind::Inconsistent,
                        detail,
                    );
                    return Err(self.mark_broken(err).into());
                }
                Ok((_, Break(CompareAndAppendBreak::Upper { .. }))) => {
                    // Our cached state may just be stale: fetch and look again.
                    self.fetch_and_update_state_retrying().await?;
                    let state = self.state();
                    let shard_upper = state.upper().clone();
                    if shard_upper == batch.desc.lower && !state.collections.is_tombstone() {
                        continue;
                    }
                    let writer = state.collections.writers.get(writer_id);
                    if let (Some(_), Some(writer)) = (&indeterminate_seen, writer) {
                        if PartialOrder::less_equal(
                            &batch.desc.upper,
                            &writer.most_recent_write_upper,
                        ) && writer.most_recent_write_token != *token
                        {
                            // SUBTLE: an acknowledgement was lost, and this writer has since
                            // moved its own upper past this batch by another write: whether this
                            // one committed can no longer be told from state. The original
                            // panics here.
                            return Err(InvalidUsage::IndeterminateOutcome {
                                lower: batch.desc.lower.clone(),
                                upper: batch.desc.upper.clone(),
                            }
                            .into());
                        }
                    }
                    return Ok(CaaOutcome::UpperMismatch(shard_upper));
                }
                Err(ExternalError::Permanent(e)) => return Err((*e).into()),
                Err(err) => {
                    // The compare_and_set may have happened: retry with the same token, which
                    // tells a committed write apart from one that never happened.
                    indeterminate_seen = Some(err);
                    backoff.wait(&self.runtime).await;
                    if let Err(err) = self.fetch_and_update_state().await {
                        self.transient(err)?;
                    }
                }
            }
        }
    }
}
