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
//!   spine's merge request that includes it (`trace.rs`), done by `compact.rs`;
//! - **rollups** (`rollup_threshold`): every `rollup_threshold` seqnos the whole state is written to
//!   Blob, then an `add_rollup` command lists it (if another rollup already holds that seqno, ours
//!   is deleted); readers that start cold begin from the newest rollup;
//! - **GC** (`gc_enabled`): when the seqno since has moved far enough, `gc.rs` deletes the blobs no
//!   live version needs and truncates Consensus.
//!
//! Keys for the blobs this work writes are derived from the commit that assigned it (the committer's
//! id and the seqno, unique because a seqno is committed once), so the command loop needs no source
//! of randomness; work started by hand ([`super::compact::compact_now`], [`super::gc::gc_now`])
//! draws its ids from the client's seeded generator instead.

use std::cell::Cell;
use std::ops::ControlFlow::{self, Break, Continue};
use std::rc::Rc;

use bytes::Bytes;

use super::encoding::encode_rollup;
use super::events::PersistEvent;
use super::gc::GcReq;
use super::machine::Machine;
use super::state::{HollowRollup, State, StateCollections};
use super::trace::FueledMergeReq;
use super::PersistClient;
use crate::location::SeqNo;

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
}

/// Resets the queue's `running` flag however the worker ends (done, or dropped mid-work).
struct WorkerGuard<'a>(&'a Machine);

impl Drop for WorkerGuard<'_> {
    fn drop(&mut self) {
        self.0.maintenance.borrow_mut().running = false;
    }
}

/// Drains the shard's maintenance queue: each round takes everything queued so far and does it,
/// rollup first (a fresh rollup lets GC truncate further), then merges, then GC.
async fn maintenance_worker(machine: &Machine) {
    let _guard = WorkerGuard(machine);
    loop {
        let (seqno, rollup, gc, compaction) = {
            let mut q = machine.maintenance.borrow_mut();
            if q.rollup.is_none() && q.gc.is_none() && !q.compaction {
                return;
            }
            (
                q.seqno,
                q.rollup.take(),
                q.gc.take(),
                std::mem::take(&mut q.compaction),
            )
        };
        let ids = MaintenanceIds::for_commit(seqno);
        if let Some(state) = rollup {
            write_and_add_rollup(machine, &state, &ids, "routine").await;
        }
        if compaction {
            // Re-plan from the newest state this process knows: requests made against older
            // states may have been merged away since.
            let reqs = machine.state().collections.trace.merge_reqs();
            for req in reqs {
                super::compact::compact_and_apply(machine, req, &ids).await;
            }
        }
        if let Some((req, known)) = gc {
            super::gc::gc_and_truncate_with(machine, req, &ids, known.as_deref()).await;
        }
    }
}

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
        self.next.set(n + 1);
        format!("{}x{}", self.prefix, n)
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
            new.collections.trace.newest_merge_req()
        } else {
            None
        };
        let gc_to_here = gc.is_some_and(|req| req.new_seqno_since == new.seqno);
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
        if start_worker {
            let machine = self.clone();
            self.runtime
                .spawn("persist: maintenance", async move {
                    maintenance_worker(&machine).await;
                })
                .detach();
        }
    }

    /// An idempotent maintenance command. Like `apply_idempotent`, it retries indeterminate
    /// errors by applying again to fresher state; it also reports whether some attempt's
    /// compare_and_set was indeterminate after its transition had applied.
    ///
    /// SUBTLE: such an attempt may really have committed, and a later attempt can then find
    /// nothing left to do (its own output already in place, or since merged away) and break. The
    /// caller must then treat its blobs as referenced: deleting them could leave a state version
    /// pointing at nothing. Leaking them is the safe side (as with a crashed process).
    pub(crate) async fn apply_maintenance_cmd<R, B: std::fmt::Debug>(
        &self,
        cmd: &str,
        mut work: impl FnMut(&mut StateCollections) -> ControlFlow<B, R>,
    ) -> (SeqNo, ControlFlow<B, R>, bool) {
        let mut backoff = self.cfg.backoff();
        let mut maybe_committed = false;
        loop {
            match self.apply_unbatched_cmd(cmd, &mut |_, _, c| work(c)).await {
                Ok((seqno, result)) => return (seqno, result, maybe_committed),
                Err(_indeterminate) => {
                    // An error comes only from a compare_and_set, which follows a transition
                    // that applied.
                    maybe_committed = true;
                    backoff.wait(&self.runtime).await;
                    let _ = self.fetch_and_update_state().await;
                }
            }
        }
    }

    /// Sets `key` to `bytes` in Blob, retrying until it is stored (a fresh key, so retrying is
    /// safe), and records the write.
    pub(crate) async fn write_blob_retrying(&self, key: &str, bytes: Bytes, kind: &str) {
        let mut backoff = self.cfg.backoff();
        while self.location.blob.set(key, bytes.clone()).await.is_err() {
            backoff.wait(&self.runtime).await;
        }
        self.events.record(|| PersistEvent::BlobWritten {
            who: self.who.clone(),
            shard: self.shard_id.0.clone(),
            key: Some(key.to_string()),
            kind: kind.to_string(),
            bytes: bytes.len() as u64,
            at_ms: self.runtime.now_ms(),
        });
    }

    /// Deletes `keys` from Blob, retrying errors (a missing key is fine: deletes are idempotent),
    /// and records it.
    pub(crate) async fn delete_blobs_retrying(&self, keys: &[String], kind: &str) {
        if keys.is_empty() {
            return;
        }
        for key in keys {
            let mut backoff = self.cfg.backoff();
            while self.location.blob.delete(key).await.is_err() {
                backoff.wait(&self.runtime).await;
            }
        }
        self.events.record(|| PersistEvent::BlobsDeleted {
            who: self.who.clone(),
            shard: self.shard_id.0.clone(),
            kind: kind.to_string(),
            keys: keys.to_vec(),
            at_ms: self.runtime.now_ms(),
        });
    }

    /// The Blob key of a rollup of `seqno`.
    pub(crate) fn maintenance_rollup_key(&self, seqno: SeqNo, ids: &MaintenanceIds) -> String {
        format!(
            "{}/rollup/{:020}/{}-{}",
            self.shard_id.0,
            seqno.0,
            self.who,
            ids.next()
        )
    }
}

/// Writes `state` as a rollup blob (without listing it anywhere yet).
pub(crate) async fn write_rollup_blob(
    machine: &Machine,
    state: &State,
    ids: &MaintenanceIds,
) -> HollowRollup {
    let key = machine.maintenance_rollup_key(state.seqno, ids);
    let bytes = Bytes::from(encode_rollup(state));
    machine
        .write_blob_retrying(&key, bytes.clone(), "rollup")
        .await;
    HollowRollup {
        key,
        encoded_size_bytes: bytes.len() as u64,
    }
}

/// A routine rollup: write the state at its seqno to Blob, then list it with `add_rollup`; if
/// another rollup holds the seqno (or ours is too old to be useful), delete ours. Returns whether
/// it is listed.
pub(crate) async fn write_and_add_rollup(
    machine: &Machine,
    state: &State,
    ids: &MaintenanceIds,
    reason: &str,
) -> bool {
    let seqno = state.seqno;
    let rollup = write_rollup_blob(machine, state, ids).await;
    let (_, result, maybe_committed) = machine
        .apply_maintenance_cmd("add_rollup", |c| c.add_rollup(seqno, &rollup))
        .await;
    let added = matches!(result, Continue(true) | Break(true));
    machine.events.record(|| PersistEvent::RollupAdded {
        who: machine.who.clone(),
        shard: machine.shard_id.0.clone(),
        seqno,
        key: rollup.key.clone(),
        added,
        reason: reason.to_string(),
        at_ms: machine.runtime.now_ms(),
    });
    if !added && !maybe_committed {
        machine
            .delete_blobs_retrying(std::slice::from_ref(&rollup.key), "unused rollup")
            .await;
    }
    added
}
