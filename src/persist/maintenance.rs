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
//!   live version needs and truncates Consensus.
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
use super::gc::{gc_and_truncate_with, GcHints, GcReq};
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
}

/// The work queued for one process's maintenance worker on one shard (see
/// [`Machine::start_maintenance`]).
#[derive(Debug, Default)]
pub(crate) struct MaintenanceQueue {
    /// Whether a worker is running (it drains the queue until it is empty).
    running: bool,
    /// The newest commit that assigned queued work (names the blobs the work writes).
    seqno: SeqNo,
    /// The newest state a rollup was assigned for.
    rollup: Option<Rc<State>>,
    /// The coalesced GC request, with the state at its target if a commit handed it over.
    gc: Option<(GcReq, Option<Rc<State>>)>,
    /// Whether some append asked for a merge.
    compaction: bool,
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
        q.compaction = false;
    }
}

async fn maintenance_rounds(machine: &Machine) -> Result<(), PermanentError> {
    loop {
        let (seqno, rollup, gc, compaction) = {
            let mut q = machine.maintenance.borrow_mut();
            if q.rollup.is_none() && q.gc.is_none() && !q.compaction {
                return Ok(());
            }
            (
                q.seqno,
                q.rollup.take(),
                q.gc.take(),
                std::mem::take(&mut q.compaction),
            )
        };
        let ids = MaintenanceIds::for_commit(seqno);
        if let Some(state) = &rollup {
            if write_and_add_rollup(machine, state, &ids, "routine").await? {
                machine.maintenance.borrow_mut().rolled = Some(Rc::clone(state));
            }
        }
        if compaction {
            // Re-plan from the newest state this process knows: requests made against older
            // states may have been merged away since.
            let reqs = machine.state().collections.trace.merge_reqs();
            for req in reqs {
                super::compact::compact_and_apply(machine, req, &ids).await?;
            }
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
            };
            let (_, at_target) = gc_and_truncate_with(machine, req, &ids, hints).await?;
            if let Some(state) = at_target {
                machine.maintenance.borrow_mut().collected = Some(Rc::new(state));
            }
        }
    }
}

impl Machine {
    /// The hook on a version about to be committed (after the transition and lease expiry,
    /// before validation and the compare_and_set): runs the GC trigger, which moves
    /// `last_gc_req` in `new`, and returns the work this version assigns to us if it commits.
    pub(crate) fn maintenance_for(
        &self,
        cmd: &str,
        old: &State,
        new: &mut State,
    ) -> RoutineMaintenance {
        let gc = if self.cfg.gc_enabled {
            new.collections
                .maybe_gc(cmd == COMPARE_AND_APPEND, new.seqno)
        } else {
            None
        };
        let rollup = new
            .collections
            .need_rollup(new.seqno, self.cfg.rollup_threshold)
            .is_some();
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
        } = work;
        if !rollup && gc.is_none() && compaction.is_none() {
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
        let start_worker = {
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
            q.compaction |= compaction.is_some();
            !std::mem::replace(&mut q.running, true)
        };
        if start_worker && machine_is_usable(self) {
            let machine = self.clone();
            self.runtime
                .spawn("persist: maintenance", async move {
                    maintenance_worker(&machine).await;
                })
                .detach();
        }
    }
}

/// Whether maintenance may run: not on a shard this process found broken.
fn machine_is_usable(machine: &Machine) -> bool {
    if machine.broken().is_some() {
        machine.maintenance.borrow_mut().running = false;
        return false;
    }
    true
}
