//! The maintenance plan: what work a version assigns to the process that commits it, and the
//! queue that work waits in. The command loop (`apply.rs`) calls two hooks of this file:
//! [`Machine::maintenance_for`] before the compare_and_set (it runs the GC trigger in the new
//! version and returns the plan) and [`Machine::start_maintenance`] once that version has
//! committed (it queues the plan and asks for the workers). The workers themselves are in
//! `maintenance.rs`, above the command loop: the client installs their starter in every
//! [`Machine`] it makes ([`StartWorkers`]), so this layer imports none of the work it starts.
//!
//! Invariants: a plan is queued only for a version that committed (a failed attempt drops it);
//! queued work coalesces (only the newest rollup is kept, GC requests merge to the lowest old
//! and the highest new seqno since); a [`PendingMerge`] is carried by an append only while no
//! other command carried it, and every carrying attempt that does not learn its outcome leaves
//! it maybe committed (so its output is never deleted).
//!
//! The spine back-pressure lives here too, beside the merges it counts on: compare_and_append
//! (`apply.rs`) runs [`Machine::spine_backpressure`] after its transition, and on a break
//! [`Machine::await_spine_relief`] before trying again; see `state/trace/mod.rs` for why that
//! bounds the batches whatever the write rate.

use std::rc::Rc;

use super::super::background::MaintenanceIds;
use super::super::events::PersistEvent;
use super::super::state::trace::FueledMergeReq;
use super::super::state::{CompareAndAppendBreak, GcReq, State, StateCollections};
use super::Machine;
use crate::location::SeqNo;

/// Starts the workers the queue asks for: the maintenance worker (rollups, GC, sweeps) and the
/// compaction worker, each if its flag is set and it is idle. Installed by the client
/// (`maintenance::start_workers`).
pub(crate) type StartWorkers = fn(&Machine, bool, bool);

/// The name of the one non-idempotent command, whose commits assign compaction and GC work.
const COMPARE_AND_APPEND: &str = "compare_and_append";

/// What a commit assigned to the process that made it.
#[derive(Debug, Clone)]
pub(crate) struct RoutineMaintenance {
    /// The commit.
    pub(crate) seqno: SeqNo,
    /// The committed state, kept (one clone) only if the work needs it: a rollup of it, or a GC
    /// up to exactly it (which then needs no replay to know the state at its target).
    pub(crate) state: Option<Rc<State>>,
    /// A rollup of this state is due.
    pub(crate) rollup: bool,
    /// A GC is due.
    pub(crate) gc: Option<GcReq>,
    /// The merge of the batch just appended with its neighbours.
    pub(crate) compaction: Option<FueledMergeReq>,
    /// A sweep is due: this version expired a writer whose lease ran out, and the parts it
    /// wrote but never committed are garbage now.
    pub(crate) sweep: bool,
}

/// A merge whose output is written and waits to be committed (see `compact.rs`): while it
/// waits, every compare_and_append of this process on the shard carries it (applies it on top
/// of its own append, if it still applies), so a merge that loses the race for the next seqno
/// to a writer of its own process lands with that writer's commit instead of losing forever.
#[derive(Debug)]
pub(crate) struct PendingMerge {
    pub(crate) req: FueledMergeReq,
    pub(crate) output: super::super::state::HollowBatch,
    /// The seqno of the command that committed it on top of its own change.
    pub(crate) carried: std::cell::Cell<Option<SeqNo>>,
    /// A command that carried it had an indeterminate compare_and_set, or was dropped during
    /// it (it may be committed).
    pub(crate) maybe_carried: std::cell::Cell<bool>,
    /// Commands carrying it whose compare_and_set has not returned yet.
    pub(crate) in_flight: std::cell::Cell<u32>,
    /// Told when a command that carried it committed (the compactor waits on it for a while
    /// before running a command of its own).
    pub(crate) on_carried: std::cell::RefCell<Option<futures::channel::oneshot::Sender<()>>>,
}

impl PendingMerge {
    /// Records that the command committed at `seqno` carried it.
    pub(crate) fn set_carried(&self, seqno: SeqNo) {
        self.carried.set(Some(seqno));
        if let Some(tx) = self.on_carried.borrow_mut().take() {
            let _ = tx.send(());
        }
    }
}

/// One attempt's carry of a [`PendingMerge`]: counted in flight until the attempt learns its
/// outcome; an attempt dropped before that (or indeterminate) leaves it maybe committed.
pub(crate) struct Carry {
    pub(crate) merge: Rc<PendingMerge>,
    pub(crate) resolved: bool,
}

impl Carry {
    pub(crate) fn new(merge: Rc<PendingMerge>) -> Self {
        merge.in_flight.set(merge.in_flight.get() + 1);
        Carry {
            merge,
            resolved: false,
        }
    }
}

impl Drop for Carry {
    fn drop(&mut self) {
        self.merge
            .in_flight
            .set(self.merge.in_flight.get().saturating_sub(1));
        if !self.resolved {
            self.merge.maybe_carried.set(true);
        }
    }
}

/// The work queued for one process's maintenance worker on one shard (see
/// [`Machine::start_maintenance`]).
#[derive(Debug, Default)]
pub(crate) struct MaintenanceQueue {
    /// Whether a worker is running (it drains the queue until it is empty).
    pub(crate) running: bool,
    /// Whether the compaction worker is running: merges go on beside rollups and GC, so that a
    /// slow collection never holds back the merges a fast writer needs (and the reverse).
    pub(crate) compacting: bool,
    /// The newest commit that asked for a merge (names the blobs merges write).
    pub(crate) compaction_seqno: SeqNo,
    /// The newest commit that assigned queued work (names the blobs the work writes).
    pub(crate) seqno: SeqNo,
    /// The newest state a rollup was assigned for.
    pub(crate) rollup: Option<Rc<State>>,
    /// The coalesced GC request, with the state at its target if a commit handed it over.
    pub(crate) gc: Option<(GcReq, Option<Rc<State>>)>,
    /// Whether some append asked for a merge.
    pub(crate) compaction: bool,
    /// Whether a commit that expired a writer asked for a sweep.
    pub(crate) sweep: bool,
    /// Merges waiting to be committed, which this process's appends carry.
    pub(crate) pending_merges: Vec<Rc<PendingMerge>>,
    /// The ids the compaction worker names its outputs with, and the commit they derive from:
    /// kept across the worker's rounds (and workers), so that rounds started by the spine
    /// back-pressure without a newer commit never reuse a key.
    pub(crate) compaction_ids: Option<(SeqNo, Rc<MaintenanceIds>)>,
    /// Appends waiting under the spine back-pressure: woken whenever a merge becomes pending,
    /// stops pending, or the compaction worker ends (see [`Machine::await_spine_relief`]).
    pub(crate) spine_waiters: Vec<futures::channel::oneshot::Sender<()>>,
    /// The state at the target of this process's last collection: the earliest live version
    /// after it, where the next collection starts (saves reading that rollup back).
    pub(crate) collected: Option<Rc<State>>,
    /// The state of the last rollup this process listed: routine collections go up to the
    /// newest listed rollup, often this one, and then need no replay to know the state there.
    pub(crate) rolled: Option<Rc<State>>,
}

impl MaintenanceQueue {
    /// Wakes the appends waiting under the spine back-pressure: something that may relieve it
    /// happened (they check again, and wait again if it did not).
    pub(crate) fn wake_spine_waiters(&mut self) {
        for waiter in self.spine_waiters.drain(..) {
            let _ = waiter.send(());
        }
    }

    /// The ids for a compaction round assigned by the commit of `seqno`: the same ones (the
    /// counter going on) while `seqno` is the same.
    pub(crate) fn compaction_ids(&mut self, seqno: SeqNo) -> Rc<MaintenanceIds> {
        match &self.compaction_ids {
            Some((at, ids)) if *at == seqno => Rc::clone(ids),
            _ => {
                let ids = Rc::new(MaintenanceIds::for_commit(seqno));
                self.compaction_ids = Some((seqno, Rc::clone(&ids)));
                ids
            }
        }
    }
}

/// How long an append under the spine back-pressure waits for a wake-up before it looks again
/// anyway (a guard: every change that may relieve it wakes it).
const SPINE_RECHECK_MS: u64 = 100;

impl Machine {
    /// The spine back-pressure on an append's new collections `c` (see `trace/mod.rs`): breaks
    /// if the trace would hold more batches than the spine bound, even with this process's
    /// waiting merges carried along as the attempt will carry them (`apply.rs`). Cheap when
    /// within the bound (one pass over the batches); a scratch copy is made only beyond it.
    pub(crate) fn spine_backpressure(
        &self,
        c: &StateCollections,
    ) -> std::ops::ControlFlow<CompareAndAppendBreak, ()> {
        use std::ops::ControlFlow::{Break, Continue};
        if !self.cfg.compaction_enabled || c.trace.within_spine_bound() {
            return Continue(());
        }
        let pending = self.maintenance.borrow().pending_merges.clone();
        let mut carried = c.clone();
        for merge in pending.iter().filter(|m| m.carried.get().is_none()) {
            let _ = carried.apply_merge_res(&merge.req, &merge.output);
        }
        if carried.trace.within_spine_bound() {
            Continue(())
        } else {
            Break(CompareAndAppendBreak::SpineBackpressure)
        }
    }

    /// Waits until something may relieve the spine back-pressure: asks this process's
    /// compaction worker to merge every planned group now (starting it if idle; its outputs
    /// named after the newest seqno known, so none is refused as stale), and waits until a
    /// merge becomes pending (the retried append carries it), a merge is done, or the worker
    /// ends. The caller then tries its append again.
    pub(crate) async fn await_spine_relief(&self) {
        let (start, woken) = {
            let mut q = self.maintenance.borrow_mut();
            q.compaction = true;
            q.compaction_seqno = q.compaction_seqno.max(self.seqno());
            let start = !q.compacting;
            q.compacting = true;
            let (tx, rx) = futures::channel::oneshot::channel();
            q.spine_waiters.push(tx);
            (start, rx)
        };
        super::super::stats::count(|s| s.spine_backpressure_waits += 1);
        if start {
            (self.start_workers)(self, false, true);
        }
        let _ = self.runtime.timeout(SPINE_RECHECK_MS, woken).await;
    }

    /// The hook on a version about to be committed (after the transition and lease expiry,
    /// before validation and the compare_and_set): runs the GC trigger, which moves
    /// `last_gc_req` in `new`, and returns the work this version assigns to us if it commits
    /// (`expired_writers`: the lease expiry removed a writer).
    pub(crate) fn maintenance_for(
        &self,
        cmd: &str,
        old: &State,
        new: &mut State,
        expired_writers: bool,
    ) -> RoutineMaintenance {
        let rollup = new
            .collections
            .need_rollup(new.seqno, self.cfg.rollup_threshold)
            .is_some();
        let is_write = cmd == COMPARE_AND_APPEND;
        let gc = match (self.cfg.gc_enabled, rollup) {
            (false, _) => None,
            // A collection up to the rollup due here lists it in its one command.
            (true, true) => new.collections.maybe_gc_with_rollup(is_write, new.seqno),
            (true, false) => new.collections.maybe_gc(is_write, new.seqno),
        };
        let appended = cmd == COMPARE_AND_APPEND && old.upper() != new.upper();
        let compaction = if self.cfg.compaction_enabled && appended {
            new.collections.trace.newest_merge_req().filter(|req| {
                let updates = req
                    .inputs
                    .iter()
                    .map(|b| b.len)
                    .fold(0, u64::saturating_add);
                req.inputs.len() >= self.cfg.compaction_min_inputs
                    || updates >= self.cfg.compaction_min_updates
            })
        } else {
            None
        };
        // Routine GC goes up to the newest rollup (`gc.rs`), so the state at the request's
        // target helps it only when there are no routine rollups.
        let gc_to_here = self.cfg.rollup_threshold == 0
            && gc.is_some_and(|req| req.new_seqno_since == new.seqno);
        let state = (rollup || gc_to_here).then(|| Rc::new(new.clone()));
        RoutineMaintenance {
            seqno: new.seqno,
            state,
            rollup,
            gc,
            compaction,
            // A writer whose lease ran out in this version will never commit the parts it
            // wrote: the committer sweeps them (`gc.rs`, the sweep).
            sweep: expired_writers && self.cfg.gc_enabled,
        }
    }

    /// Queues the assigned work for this process's maintenance worker on the shard, starting the
    /// worker if it is idle. Nothing waits for it, and a crash (dropping the runtime's tasks) at
    /// any point leaves the shard consistent.
    ///
    /// One worker per shard and process, and coalesced work: a writer that commits faster than
    /// maintenance runs would otherwise start a task per commit, each planning from a state that
    /// is stale by the time it runs, all racing each other (and the writer) for the next seqno.
    /// Instead, while the worker is busy, work accumulates: only the newest rollup is kept, GC
    /// requests merge (the lowest old and the highest new seqno since, as the original
    /// coalesces them), and requested merges are re-planned from the state current when the
    /// worker gets to them.
    pub(crate) fn start_maintenance(&self, work: RoutineMaintenance) {
        let RoutineMaintenance {
            seqno,
            state,
            rollup,
            gc,
            compaction,
            sweep,
        } = work;
        if !rollup && gc.is_none() && compaction.is_none() && !sweep {
            return;
        }
        if let Some(req) = &gc {
            self.events.record(|| PersistEvent::GcRequested {
                who: self.who.clone(),
                shard: self.shard_id.0.clone(),
                old_seqno_since: req.old_seqno_since,
                new_seqno_since: req.new_seqno_since,
                at_ms: self.runtime.now_ms(),
            });
        }
        let (start_worker, start_compaction) = {
            let mut q = self.maintenance.borrow_mut();
            q.seqno = q.seqno.max(seqno);
            if let (true, Some(state)) = (rollup, &state) {
                if q.rollup.as_ref().is_none_or(|r| r.seqno < state.seqno) {
                    q.rollup = Some(Rc::clone(state));
                }
            }
            if let Some(req) = gc {
                let gc_state = state.filter(|s| s.seqno == req.new_seqno_since);
                q.gc = Some(match q.gc.take() {
                    None => (req, gc_state),
                    Some((queued, queued_state)) => {
                        let merged = GcReq {
                            old_seqno_since: queued.old_seqno_since.min(req.old_seqno_since),
                            new_seqno_since: queued.new_seqno_since.max(req.new_seqno_since),
                        };
                        // Keep a state only if it is the one at the merged target.
                        let known = [gc_state, queued_state]
                            .into_iter()
                            .flatten()
                            .find(|s| s.seqno == merged.new_seqno_since);
                        (merged, known)
                    }
                });
            }
            let start_compaction = compaction.is_some() && !q.compacting;
            if compaction.is_some() {
                q.compaction = true;
                q.compaction_seqno = q.compaction_seqno.max(seqno);
                q.compacting = true;
            }
            q.sweep |= sweep;
            let other_work = rollup || q.gc.is_some() || q.sweep;
            let start_worker = other_work && !q.running;
            q.running |= start_worker;
            (start_worker, start_compaction)
        };
        (self.start_workers)(self, start_worker, start_compaction);
    }
}
