//! Routine maintenance: the work a commit assigns to the process that made it, done in the
//! background, off the command's critical path (notes 1.7).
//!
//! The command loop (`machine/`) calls two hooks, both in `machine/plan.rs` (the plan and its
//! queue, below the loop):
//! 1. before the compare_and_set, `Machine::maintenance_for` runs the GC trigger
//!    (`StateCollections::maybe_gc`), which moves `last_gc_req` in the version being committed,
//!    and notes what else the version assigns (a rollup of it, a merge of the batch just
//!    appended);
//! 2. once that version has committed, `Machine::start_maintenance` queues the work and calls
//!    the starter the client installed in the machine, [`start_workers`] (this file), which
//!    spawns the idle workers as detached tasks on the runtime (if the compare_and_set fails,
//!    the plan is dropped with the attempt). The loop thus starts work it does not import.
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
//! waits to be committed (`PendingMerge`, in `machine/plan.rs`), every compare_and_append of the same process applies
//! it on top of its own append (if it still applies) and commits both in one version.
//!
//! That keeps up with a writer most of the time, but not by construction: while a merge of
//! Blob parts runs, the appends behind it pile up in proportion to its duration. So the bound
//! (`trace::spine_bound`) is enforced by the write path instead (the argument is in
//! `state/trace/mod.rs`): an append that would commit a state over it, even with the pending
//! merges carried, breaks before its compare_and_set and waits (`Machine::await_spine_relief`,
//! `machine/plan.rs`), setting this worker to merge every planned group now. The worker wakes
//! it whenever a merge becomes pending (the retried append carries it), is done, or the worker
//! ends. Each round's output keys continue the counter of the commit they are named after
//! (`MaintenanceQueue::compaction_ids`), since a round the back-pressure starts may have no
//! newer commit to be named after (`tests/persist_spine.rs`, `tests/browser_spine.rs`).
//!
//! This module is the workers only: the plan and the queue live in `machine/plan.rs`, the steps
//! in `background.rs` (ids, Blob writes and deletes) and `rollup.rs`, the work in `compact.rs`
//! and `gc.rs`; none of those imports this one.
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
use super::gc::{gc_and_truncate_with, sweep_now, GcHints};
use super::machine::Machine;
use super::rollup::write_and_add_rollup;
use super::state::{GcReq, State};
use crate::location::{PermanentError, SeqNo};

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
        let mut q = self.0.maintenance.borrow_mut();
        q.compacting = false;
        // An append waiting under the spine back-pressure looks again (and restarts the worker
        // if the trace is still over the bound).
        q.wake_spine_waiters();
    }
}

/// Runs the merges the spine plans, re-planning from the newest state this process knows (requests
/// made against older states may have been merged away since), until no append asked for more.
async fn compaction_worker(machine: &Machine) {
    let _guard = CompactionGuard(machine);
    loop {
        let ids = {
            let mut q = machine.maintenance.borrow_mut();
            if !std::mem::take(&mut q.compaction) {
                return;
            }
            let seqno = q.compaction_seqno;
            q.compaction_ids(seqno)
        };
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

/// Starts the workers the queue asks for (see `machine/plan.rs`, [`StartWorkers`]): the client
/// installs this in every machine it makes.
pub(crate) fn start_workers(machine: &Machine, start_worker: bool, start_compaction: bool) {
    if start_compaction && machine_is_usable(machine) {
        let worker_machine = machine.clone();
        // Boxed, as the other worker is: one spawned task type for both in the `.wasm`.
        let worker: futures::future::LocalBoxFuture<'static, ()> = Box::pin(async move {
            compaction_worker(&worker_machine).await;
        });
        machine
            .runtime
            .spawn("persist: compaction", worker)
            .detach();
    }
    if start_worker && machine_is_usable(machine) {
        let worker_machine = machine.clone();
        let worker: futures::future::LocalBoxFuture<'static, ()> = Box::pin(async move {
            maintenance_worker(&worker_machine).await;
        });
        machine
            .runtime
            .spawn("persist: maintenance", worker)
            .detach();
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
