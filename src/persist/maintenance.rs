//! Routine maintenance: the work a commit assigns to the process that made it, done in the
//! background, off the command's critical path (notes 1.7).
//!
//! The command loop (`machine.rs`) calls two hooks:
//! 1. before the compare_and_set, `Machine::maintenance_for` runs the GC trigger
//!    (`StateCollections::maybe_gc`), which moves `last_gc_req` in the version being committed,
//!    and notes what else the version assigns (a rollup of it, a merge of the batch just
//!    appended);
//! 2. once that version has committed, `Machine::start_maintenance` spawns the work as detached
//!    tasks on the runtime (if the compare_and_set fails, the plan is dropped with the attempt).
//!
//! Exactly one process commits each seqno, so each piece of routine work is assigned once; the
//! work itself is idempotent and safe to run concurrently with any other, or to abandon half-way
//! (a crashed process), because every step re-reads state and applies only if it still fits.
//!
//! What runs (each knob in [`super::PersistConfig`]):
//! - **compaction** (`compaction_enabled`): after a compare_and_append that appended a batch, the
//!   spine's merge request that includes it (`trace.rs`), done by `compact.rs`, once it is big
//!   enough (`compaction_min_inputs` inputs or `compaction_min_updates` updates);
//! - **rollups** (`rollup_threshold`): every `rollup_threshold` seqnos the whole state is written to
//!   Blob, then an `add_rollup` command lists it (if another rollup already holds that seqno, ours
//!   is deleted); readers that start cold begin from the newest rollup;
//! - **GC** (`gc_enabled`): when the seqno since has moved far enough, `gc.rs` deletes the blobs no
//!   live version needs and truncates Consensus. A rollup due at a seqno the queued collection
//!   reaches is written and listed by that collection's one command (one seqno per cycle, not
//!   two). A version whose lease expiry removed a writer also assigns a sweep, which deletes the
//!   parts that writer wrote and never committed.
//!
//! Two workers per shard and process: one for merges, one for rollups and GC, so that a slow
//! collection never holds back the merges a fast writer needs. And a merge must not lose the
//! race for the next seqno forever to a writer that commits in a tight loop: while its output
//! waits to be committed ([`PendingMerge`]), every compare_and_append of the same process applies
//! it on top of its own append (if it still applies) and commits both in one version. Together
//! these keep the trace within the spine bound (`trace::spine_bound`) however fast one writer
//! commits (`tests/persist_spine.rs`, `tests/browser_spine.rs`).
//!
//! This module is the dispatcher only: the steps live in `background.rs` (ids, maintenance
//! commands, Blob writes and deletes) and `rollup.rs`, the work in `compact.rs` and `gc.rs`;
//! none of those imports this one.
//!
//! Keys for the blobs this work writes are derived from the commit that assigned it (the committer's
//! id and the seqno, unique because a seqno is committed once), so the command loop needs no source
//! of randomness; work started by hand ([`super::compact::compact_now`], [`super::gc::gc_now`])
//! draws its ids from the client's seeded generator instead.
//!
//! A permanent error in any step ends the worker: the shard is broken in this process, and no
//! later commit starts a worker for it.

use std::rc::Rc;

use super::background::MaintenanceIds;
use super::events::PersistEvent;
use super::gc::{gc_and_truncate_with, sweep_now, GcHints, GcReq};
use super::machine::Machine;
use super::rollup::write_and_add_rollup;
use super::state::State;
use super::trace::FueledMergeReq;
use crate::location::{PermanentError, SeqNo};

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
    pub(crate) output: super::state::HollowBatch,
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
    running: bool,
    /// Whether the compaction worker is running: merges go on beside rollups and GC, so that a
    /// slow collection never holds back the merges a fast writer needs (and the reverse).
    compacting: bool,
    /// The newest commit that asked for a merge (names the blobs merges write).
    compaction_seqno: SeqNo,
    /// The newest commit that assigned queued work (names the blobs the work writes).
    seqno: SeqNo,
    /// The newest state a rollup was assigned for.
    rollup: Option<Rc<State>>,
    /// The coalesced GC request, with the state at its target if a commit handed it over.
    gc: Option<(GcReq, Option<Rc<State>>)>,
    /// Whether some append asked for a merge.
    compaction: bool,
    /// Whether a commit that expired a writer asked for a sweep.
    sweep: bool,
    /// Merges waiting to be committed, which this process's appends carry.
    pub(crate) pending_merges: Vec<Rc<PendingMerge>>,
    /// The state at the target of this process's last collection: the earliest live version
    /// after it, where the next collection starts (saves reading that rollup back).
    collected: Option<Rc<State>>,
    /// The state of the last rollup this process listed: routine collections go up to the
    /// newest listed rollup, often this one, and then need no replay to know the state there.
    rolled: Option<Rc<State>>,
}

/// Resets the queue's `running` flag however the worker ends (done, or dropped mid-work).
struct WorkerGuard<'a>(&'a Machine);

impl Drop for WorkerGuard<'_> {
    fn drop(&mut self) {
        self.0.maintenance.borrow_mut().running = false;
    }
}

/// Resets the queue's `compacting` flag however the compaction worker ends.
struct CompactionGuard<'a>(&'a Machine);

impl Drop for CompactionGuard<'_> {
    fn drop(&mut self) {
        self.0.maintenance.borrow_mut().compacting = false;
    }
}

/// Runs the merges the spine plans, re-planning from the newest state this process knows (requests
/// made against older states may have been merged away since), until no append asked for more.
async fn compaction_worker(machine: &Machine) {
    let _guard = CompactionGuard(machine);
    loop {
        let seqno = {
            let mut q = machine.maintenance.borrow_mut();
            if !std::mem::take(&mut q.compaction) {
                return;
            }
            q.compaction_seqno
        };
        let ids = MaintenanceIds::for_commit(seqno);
        let mut reqs = machine.state_ref(|s| s.collections.trace.merge_reqs());
        // The smallest first: each merge removes all but one of its inputs from the trace, and
        // small ones are quick, so the batch count falls fastest this way (a big merge in
        // progress does not hold back the small ones behind it).
        crate::sort::sort_by_key(&mut reqs, |r| {
            r.inputs.iter().map(|b| b.len).fold(0, u64::saturating_add)
        });
        let last = reqs.len().saturating_sub(1);
        for (i, req) in reqs.into_iter().enumerate() {
            // Wait for an append to carry the merge only when no more merge work is queued: a
            // worker that waits while merges pile up lets the trace grow past the spine bound.
            let more = i < last || machine.maintenance.borrow().compaction;
            let wait_ms = if more {
                0
            } else {
                machine.cfg.compaction_carry_wait_ms
            };
            if super::compact::compact_and_apply(machine, req, &ids, wait_ms)
                .await
                .is_err()
            {
                machine.maintenance.borrow_mut().compaction = false;
                return;
            }
        }
    }
}

/// Drains the shard's maintenance queue: each round takes everything queued so far and does it,
/// rollup first (a fresh rollup lets GC truncate further), then merges, then GC. A permanent
/// error ends it (the shard is broken in this process: nothing more is written) and drops what
/// is queued.
async fn maintenance_worker(machine: &Machine) {
    let _guard = WorkerGuard(machine);
    if maintenance_rounds(machine).await.is_err() {
        let mut q = machine.maintenance.borrow_mut();
        q.rollup = None;
        q.gc = None;
        q.sweep = false;
    }
}

async fn maintenance_rounds(machine: &Machine) -> Result<(), PermanentError> {
    loop {
        let (seqno, rollup, gc, sweep) = {
            let mut q = machine.maintenance.borrow_mut();
            if q.rollup.is_none() && q.gc.is_none() && !q.sweep {
                return Ok(());
            }
            let sweep = std::mem::take(&mut q.sweep);
            (q.seqno, q.rollup.take(), q.gc.take(), sweep)
        };
        if sweep {
            // Tickets at or below the earliest version this process knows of are finished too
            // (a lower bound of the real one: at worst some wait for the next sweep).
            let collected = machine.maintenance.borrow().collected.clone();
            let earliest = collected.as_ref().map_or(SeqNo(0), |s| s.seqno);
            sweep_now(machine, earliest, collected.as_deref()).await?;
        }
        let ids = MaintenanceIds::for_commit(seqno);
        // A rollup due at a seqno the queued collection may reach: the collection writes and
        // lists it in its one command (and unlists the old ones), instead of a command to list
        // it and another to unlist (one seqno, one compare_and_set, per cycle).
        let fused = match (&rollup, &gc) {
            (Some(state), Some((req, _))) => state.seqno <= req.new_seqno_since,
            _ => false,
        };
        if let (true, Some(state), Some((req, _))) = (fused, &rollup, &gc) {
            let req = GcReq {
                old_seqno_since: req.old_seqno_since,
                new_seqno_since: state.seqno,
            };
            let (listed, truncated) = collect_with_rollup(machine, req, state, &ids).await?;
            if listed || truncated {
                continue;
            }
            // Not listed (someone else collected past it first): list the rollup on its own.
        }
        if let Some(state) = &rollup {
            if write_and_add_rollup(machine, state, &ids, "routine").await? {
                machine.maintenance.borrow_mut().rolled = Some(Rc::clone(state));
            }
        }
        if fused {
            continue;
        }
        if let Some((req, known)) = gc {
            let (collected, rolled) = {
                let q = machine.maintenance.borrow();
                (q.collected.clone(), q.rolled.clone())
            };
            let hints = GcHints {
                states: [known.as_deref(), rolled.as_deref(), collected.as_deref()]
                    .into_iter()
                    .flatten()
                    .collect(),
                at_latest_rollup: true,
                routine: true,
            };
            let (_, at_target) = gc_and_truncate_with(machine, req, &ids, hints).await?;
            if let Some(state) = at_target {
                machine.maintenance.borrow_mut().collected = Some(Rc::new(state));
            }
        }
    }
}

/// A routine collection up to `state` (a rollup due at `req.new_seqno_since`) that writes and
/// lists the rollup in its own command. Returns whether the rollup is listed, and whether
/// Consensus was truncated to it.
async fn collect_with_rollup(
    machine: &Machine,
    req: GcReq,
    state: &Rc<State>,
    ids: &MaintenanceIds,
) -> Result<(bool, bool), PermanentError> {
    let (collected, rolled) = {
        let q = machine.maintenance.borrow();
        (q.collected.clone(), q.rolled.clone())
    };
    let hints = GcHints {
        states: [Some(&**state), rolled.as_deref(), collected.as_deref()]
            .into_iter()
            .flatten()
            .collect(),
        at_latest_rollup: false,
        routine: true,
    };
    let (report, at_target) = gc_and_truncate_with(machine, req, ids, hints).await?;
    let listed = machine.state_ref(|s| s.collections.rollups.contains_key(&state.seqno));
    let mut q = machine.maintenance.borrow_mut();
    if listed {
        q.rolled = Some(Rc::clone(state));
    }
    if let Some(at) = at_target {
        q.collected = Some(Rc::new(at));
    }
    Ok((listed, report.versions_truncated.is_some()))
}

impl Machine {
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
        if start_compaction && machine_is_usable(self) {
            let machine = self.clone();
            // Boxed, as the other worker is: one spawned task type for both in the `.wasm`.
            let worker: futures::future::LocalBoxFuture<'static, ()> = Box::pin(async move {
                compaction_worker(&machine).await;
            });
            self.runtime.spawn("persist: compaction", worker).detach();
        }
        if start_worker && machine_is_usable(self) {
            let machine = self.clone();
            let worker: futures::future::LocalBoxFuture<'static, ()> = Box::pin(async move {
                maintenance_worker(&machine).await;
            });
            self.runtime.spawn("persist: maintenance", worker).detach();
        }
    }
}

/// Whether maintenance may run: not on a shard this process found broken.
fn machine_is_usable(machine: &Machine) -> bool {
    if machine.broken().is_some() {
        let mut q = machine.maintenance.borrow_mut();
        q.running = false;
        q.compacting = false;
        return false;
    }
    true
}
