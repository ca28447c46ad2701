//! The compactor: performs a [`FueledMergeReq`] from the spine (`trace.rs`) and commits the result.
//!
//! Compaction is physical (many batches become one, so reads touch fewer parts and state holds
//! fewer batches) and logical (times before the since advance to it, then updates that cancel or
//! repeat are consolidated). It never changes what the shard holds at a time at or beyond the
//! since. Steps:
//! 0. check the request: its inputs are consecutive, span exactly its interval, and its since is
//!    not before any input's ([`validate_merge`]); anything else is rejected, not merged;
//! 1. fetch every part of every input (inline ones are in the request already); a part missing
//!    from Blob means a newer state replaced these inputs and GC deleted them: give up (if the
//!    newest state still lists it, the shard is broken: a permanent error);
//! 2. keep each input's updates inside its own `[lower, upper)` (an appended batch may have been
//!    truncated), advance every time to the request's since ([`advance_to`]), consolidate;
//! 3. write the output as one batch over the request's description: inline if every input was
//!    inline and it is small (so compaction never moves inline bytes the other way), otherwise
//!    as Blob parts of at most `part_max_updates` updates, written before the state names them;
//! 4. commit `apply_merge_res` (the `merge_res` command), which replaces the inputs only if they
//!    still line up (see `trace.rs`); meanwhile the output is a pending merge that this process's
//!    appends carry (`maintenance.rs`), so a merge that loses its compare_and_set to an append
//!    lands with that append; the compactor waits until every append that carried it knows its
//!    outcome. Before its own command it waits up to `compaction_carry_wait_ms` for an append
//!    to carry it, so that beside a busy writer a merge costs no compare_and_set at all. A routine merge's output is named after the commit that assigned it
//!    (`<shard>/<who>/pm<seqno>x<n>`) and refused once that seqno is older than the oldest listed
//!    rollup, after which GC's sweep may delete it (`gc.rs`);
//! 5. if it was not applied, delete the output's parts: nothing references them. SUBTLE: if some
//!    attempt's compare_and_set was indeterminate, that attempt may have committed the output,
//!    so it is kept (see `Machine::apply_maintenance_cmd`).
//!
//! Who runs it: after a compare_and_append that appended a batch, the writer's process takes the
//! spine's request that includes the new batch and compacts in a detached background task (see
//! `maintenance.rs`; off with `PersistConfig::compaction_enabled = false`). [`compact_now`] runs
//! every outstanding request by hand (tests, the playground's "compact" button).
//!
//! Limits of the teaching version: a merge holds all its inputs in memory (the original streams
//! runs in chunks under a memory bound), and there is no size heuristic to skip small requests.

use std::cell::{Cell, RefCell};
use std::ops::ControlFlow::{self, Break, Continue};
use std::rc::Rc;

use bytes::Bytes;

use super::background::MaintenanceIds;
use super::encoding::{decode_part, encode_part, EncodedUpdate};
use super::events::{frontier, PersistEvent};
use super::machine::{Machine, PendingMerge};
use super::state::trace::{ApplyMergeResult, FueledMergeReq};
use super::state::{BatchPart, Description, HollowBatch};
use super::{PersistClient, ShardId};
use crate::location::{BrokenAt, PermanentError, PermanentKind, SeqNo};

// The pure core of a merge lives in `merge.rs`; its API is the compactor's.
pub use super::merge::{advance_to, merge_updates, validate_merge, MergeError};

/// What came of one compaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompactionOutcome {
    /// The output replaced the inputs.
    Applied(ApplyMergeResult),
    /// An attempt's compare_and_set was indeterminate and the output is not in the newest state:
    /// it may have been committed (and since merged away), so its blobs were kept.
    MaybeApplied,
    /// Not applied (the reason); the output's blobs were deleted.
    NotApplied(String),
    /// The request itself was wrong ([`MergeError`]); nothing was read or written.
    Rejected(MergeError),
}

/// Reads a batch's updates: `Ok(None)` if one of its parts is missing from Blob because a newer
/// state replaced the batch (GC may then delete it). A part that is missing while the newest
/// state still lists the batch, or that does not decode, is permanent.
async fn fetch_updates(
    machine: &Machine,
    batch: &HollowBatch,
) -> Result<Option<Vec<EncodedUpdate>>, PermanentError> {
    // Every Blob part at once: the reads overlap (one round trip, not one per part).
    let blob = &machine.location.blob;
    let fetched = futures::future::join_all(batch.parts.iter().map(|part| async move {
        match part {
            BatchPart::Inline { .. } => Ok(None),
            BatchPart::Hollow { key, .. } => machine.retrying(|| blob.get(key)).await.map(Some),
        }
    }))
    .await;
    let mut updates = Vec::new();
    for (part, fetched) in batch.parts.iter().zip(fetched) {
        let fetched = fetched?;
        let (decoded, at) = match part {
            BatchPart::Inline { encoded } => {
                super::stats::count(|s| s.merge_read_bytes += encoded.len() as u64);
                (decode_part(encoded), BrokenAt::Version(machine.seqno()))
            }
            BatchPart::Hollow { key, .. } => {
                let Some(bytes) = fetched.flatten() else {
                    machine.fetch_and_update_state_retrying().await?;
                    let listed = machine.state().part_keys().any(|k| k == key);
                    if !listed {
                        return Ok(None);
                    }
                    let detail = "a batch part the newest state lists is gone from Blob";
                    let err = machine.permanent(
                        BrokenAt::BlobKey(key.clone()),
                        PermanentKind::Missing,
                        detail,
                    );
                    return Err(machine.mark_broken(err));
                };
                super::stats::count(|s| s.merge_read_bytes += bytes.len() as u64);
                (decode_part(&bytes), BrokenAt::BlobKey(key.clone()))
            }
        };
        match decoded {
            Ok(decoded) => updates.extend(decoded),
            Err(e) => {
                let err = machine.permanent(at, PermanentKind::Undecodable, e.to_string());
                return Err(machine.mark_broken(err));
            }
        }
    }
    Ok(Some(updates))
}

/// Writes the merged updates as one batch over `desc` (see the module docs for inline vs Blob).
async fn write_output(
    machine: &Machine,
    ids: &MaintenanceIds,
    desc: &Description,
    updates: Vec<EncodedUpdate>,
    inputs_all_inline: bool,
) -> Result<HollowBatch, PermanentError> {
    let len = updates.len() as u64;
    if updates.is_empty() {
        return Ok(HollowBatch::empty(desc.clone()));
    }
    if inputs_all_inline {
        let encoded = encode_part(&updates);
        if encoded.len() as u64 <= machine.cfg.inline_writes_single_max_bytes {
            super::stats::count(|s| s.merge_write_bytes += encoded.len() as u64);
            return Ok(HollowBatch {
                desc: desc.clone(),
                len,
                parts: vec![BatchPart::Inline { encoded }],
            });
        }
    }
    let mut parts = Vec::new();
    let mut writes = Vec::new();
    for chunk in updates.chunks(machine.cfg.part_max_updates.max(1)) {
        let key = format!("{}/{}/p{}", machine.shard_id.0, machine.who, ids.next());
        let bytes = Bytes::from(encode_part(chunk));
        super::stats::count(|s| s.merge_write_bytes += bytes.len() as u64);
        parts.push(BatchPart::Hollow {
            key: key.clone(),
            encoded_size_bytes: bytes.len() as u64,
        });
        writes.push((key, bytes));
    }
    // The parts' writes overlap: a big merge takes one Blob round trip to write, not one per
    // part (while it runs, the appends it races pile up).
    let written =
        futures::future::join_all(writes.iter().map(|(key, bytes)| {
            machine.write_blob_retrying(key, bytes.clone(), "compaction part")
        }))
        .await;
    for result in written {
        result?;
    }
    Ok(HollowBatch {
        desc: desc.clone(),
        len,
        parts,
    })
}

/// Lists a pending merge for this process's appends to carry while the compactor commits it, and
/// unlists it however the compactor ends (done, or dropped mid-way).
struct PendingGuard<'a> {
    machine: &'a Machine,
    merge: Rc<PendingMerge>,
}

impl<'a> PendingGuard<'a> {
    fn new(machine: &'a Machine, merge: &Rc<PendingMerge>) -> Self {
        let mut q = machine.maintenance.borrow_mut();
        q.pending_merges.push(Rc::clone(merge));
        // An append waiting under the spine back-pressure may now carry it.
        q.wake_spine_waiters();
        drop(q);
        PendingGuard {
            machine,
            merge: Rc::clone(merge),
        }
    }
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        let mut q = self.machine.maintenance.borrow_mut();
        q.pending_merges.retain(|m| !Rc::ptr_eq(m, &self.merge));
        // Committed (or given up): a waiting append looks at the state again.
        q.wake_spine_waiters();
    }
}

fn hollow_keys(batch: &HollowBatch) -> Vec<String> {
    batch.part_keys().map(String::from).collect()
}

/// Performs `req` and commits the result (see the module docs). Never panics on bad data: a
/// request that is not a merge of consecutive batches is rejected, and stored bytes that do not
/// decode, or a part the state still lists that is gone, are a permanent error.
pub(crate) async fn compact_and_apply(
    machine: &Machine,
    req: FueledMergeReq,
    ids: &MaintenanceIds,
    carry_wait_ms: u64,
) -> Result<CompactionOutcome, PermanentError> {
    // One copy of the compactor in the `.wasm`, however many callers await it.
    let compactor: futures::future::LocalBoxFuture<'_, _> =
        Box::pin(compact(machine, req, ids, carry_wait_ms));
    compactor.await
}

async fn compact(
    machine: &Machine,
    req: FueledMergeReq,
    ids: &MaintenanceIds,
    carry_wait_ms: u64,
) -> Result<CompactionOutcome, PermanentError> {
    let desc = req.desc.clone();
    let (lower, upper) = (frontier(&desc.lower), frontier(&desc.upper));
    record_requested(machine, &req);
    let not_applied = |reason: String| {
        machine
            .events
            .record(|| PersistEvent::CompactionNotApplied {
                who: machine.who.clone(),
                shard: machine.shard_id.0.clone(),
                lower,
                upper,
                reason: reason.clone(),
                at_ms: machine.runtime.now_ms(),
            });
        CompactionOutcome::NotApplied(reason)
    };
    if let Err(e) = validate_merge(&desc, req.inputs.iter().map(|b| &b.desc)) {
        not_applied(format!("rejected: {e}"));
        return Ok(CompactionOutcome::Rejected(e));
    }

    // 1 and 2: fetch, filter, advance, consolidate.
    let updates = match fetch_and_merge(machine, &req).await? {
        Ok(updates) => updates,
        Err(reason) => return Ok(not_applied(reason)),
    };
    let inputs_all_inline = req.inputs.iter().all(|b| {
        b.parts
            .iter()
            .all(|p| matches!(p, BatchPart::Inline { .. }))
    });

    // 3: the output, in Blob before state names it.
    let output = write_output(machine, ids, &desc, updates, inputs_all_inline).await?;

    // 4: commit, if the inputs still line up; meanwhile this process's appends carry it.
    let (seqno, result, maybe_committed) =
        commit_output(machine, &req, &output, carry_wait_ms).await?;
    let applied = |result: ApplyMergeResult| {
        machine.events.record(|| PersistEvent::CompactionApplied {
            who: machine.who.clone(),
            shard: machine.shard_id.0.clone(),
            lower,
            upper,
            result: format!("{result:?}"),
            output_updates: output.len,
            output_blob_parts: hollow_keys(&output).len(),
            seqno,
            at_ms: machine.runtime.now_ms(),
        });
        CompactionOutcome::Applied(result)
    };
    Ok(match result {
        Continue(result) => applied(result),
        Break(_) if maybe_committed => {
            // SUBTLE: see the module docs, step 5.
            let in_state = machine
                .state()
                .collections
                .trace
                .batches()
                .iter()
                .any(|b| **b == output);
            if in_state {
                applied(ApplyMergeResult::AppliedExact)
            } else {
                not_applied("an indeterminate attempt may have committed: output kept".into());
                CompactionOutcome::MaybeApplied
            }
        }
        Break(result) => {
            // 5: nothing references the output.
            machine
                .delete_blobs_retrying(&hollow_keys(&output), "compaction output")
                .await?;
            not_applied(format!("{result:?}"))
        }
    })
}

/// Records that a merge of `req` starts.
fn record_requested(machine: &Machine, req: &FueledMergeReq) {
    let desc = &req.desc;
    machine.events.record(|| PersistEvent::CompactionRequested {
        who: machine.who.clone(),
        shard: machine.shard_id.0.clone(),
        lower: frontier(&desc.lower),
        upper: frontier(&desc.upper),
        since: frontier(&desc.since),
        inputs: req.inputs.len(),
        input_updates: req
            .inputs
            .iter()
            .map(|b| b.len)
            .fold(0, u64::saturating_add),
        at_ms: machine.runtime.now_ms(),
    });
}

/// Steps 1 and 2: the inputs' updates, fetched, filtered, advanced and consolidated; `Err`
/// with the reason when the merge cannot go on (an input part is gone, or they do not merge).
async fn fetch_and_merge(
    machine: &Machine,
    req: &FueledMergeReq,
) -> Result<Result<Vec<EncodedUpdate>, String>, PermanentError> {
    let mut inputs = Vec::with_capacity(req.inputs.len());
    for batch in &req.inputs {
        match fetch_updates(machine, batch).await? {
            Some(updates) => inputs.push((batch.desc.clone(), updates)),
            None => {
                return Ok(Err(
                    "an input part is gone (the inputs were replaced)".into()
                ))
            }
        }
    }
    super::stats::count(|s| s.merges += 1);
    Ok(merge_updates(&req.desc, inputs).map_err(|e| format!("cannot merge: {e}")))
}

/// Step 4: commits `output` with a `merge_res` command of its own, unless one of this process's
/// appends carries it first (it waits up to `carry_wait_ms` for one). Returns the seqno it
/// landed at, the result, and whether some attempt may have committed it unseen.
async fn commit_output(
    machine: &Machine,
    req: &FueledMergeReq,
    output: &HollowBatch,
    carry_wait_ms: u64,
) -> Result<(SeqNo, ControlFlow<ApplyMergeResult, ApplyMergeResult>, bool), PermanentError> {
    let pending = Rc::new(PendingMerge {
        req: req.clone(),
        output: output.clone(),
        carried: Cell::new(None),
        maybe_carried: Cell::new(false),
        in_flight: Cell::new(0),
        on_carried: RefCell::new(None),
    });
    let _pending = PendingGuard::new(machine, &pending);
    // Give this process's next append the chance to carry it: then the merge costs no
    // compare_and_set of its own (a writer in a tight loop appends well within the wait).
    if carry_wait_ms > 0 {
        let (tx, rx) = futures::channel::oneshot::channel();
        *pending.on_carried.borrow_mut() = Some(tx);
        let _ = machine.runtime.timeout(carry_wait_ms, rx).await;
    }
    let (seqno, result, maybe_committed) = machine
        .apply_maintenance_cmd("merge_res", |c| {
            if pending.carried.get().is_some() {
                // An append committed it: nothing left to do.
                return Break(ApplyMergeResult::NotAppliedNoMatch);
            }
            c.apply_merge_res(req, output)
        })
        .await?;
    // SUBTLE: an append that carries it may have committed it without having heard so yet (its
    // compare_and_set has not returned): wait until every carrying attempt knows its outcome.
    while pending.in_flight.get() > 0 {
        machine.runtime.sleep(1).await;
    }
    let (seqno, result) = match pending.carried.get() {
        Some(carried) => (carried, Continue(ApplyMergeResult::AppliedExact)),
        None => (seqno, result),
    };
    Ok((
        seqno,
        result,
        maybe_committed || pending.maybe_carried.get(),
    ))
}

/// Runs every outstanding merge request of the shard's trace now, in this task, until the spine
/// asks for nothing more (or a merge does not apply). For tests and the playground; writers do
/// this on their own in the background.
pub async fn compact_now(
    client: &PersistClient,
    shard_id: &ShardId,
) -> Result<Vec<CompactionOutcome>, PermanentError> {
    let machine = client.machine(shard_id, "compactor".into());
    let ids = MaintenanceIds::from_client(client);
    let mut outcomes = Vec::new();
    // Every applied round removes batches, so this ends; the bound is only a guard.
    for _ in 0..64 {
        machine.fetch_and_update_state_retrying().await?;
        let reqs = machine.state().collections.trace.merge_reqs();
        if reqs.is_empty() {
            break;
        }
        let mut all_applied = true;
        for req in reqs {
            // By hand: no append is coming to carry it.
            let outcome = compact_and_apply(&machine, req, &ids, 0).await?;
            all_applied &= matches!(outcome, CompactionOutcome::Applied(_));
            outcomes.push(outcome);
        }
        if !all_applied {
            break;
        }
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::state::{HollowBatch, StateCollections};
    use std::ops::ControlFlow;
    use timely::progress::Antichain;

    fn f(t: u64) -> Antichain<u64> {
        Antichain::from_elem(t)
    }

    #[test]
    fn merge_res_transition_breaks_when_not_applied() {
        let mut s = StateCollections::new();
        let w = crate::persist::state::WriterId("w".into());
        for (i, lower) in [0u64, 1, 2].iter().enumerate() {
            let b = HollowBatch {
                desc: Description::new(f(*lower), f(lower + 1)),
                len: 1,
                parts: vec![],
            };
            let token = crate::persist::state::IdempotencyToken(format!("t{i}"));
            assert!(s.compare_and_append(&b, &w, 0, 100, &token).is_continue());
        }
        // Levels 1, 1, 1: the first two merge (level 2), the third stays on its own.
        assert_eq!(s.trace.newest_merge_req(), None);
        let req = s.trace.merge_reqs().remove(0);
        assert_eq!(
            (req.desc.lower.clone(), req.desc.upper.clone()),
            (f(0), f(2))
        );
        let output = HollowBatch::empty(req.desc.clone());
        assert_eq!(
            s.apply_merge_res(&req, &output),
            ControlFlow::Continue(ApplyMergeResult::AppliedExact)
        );
        assert_eq!(s.trace.batches().len(), 2);
        assert_eq!(
            s.apply_merge_res(&req, &output),
            ControlFlow::Break(ApplyMergeResult::NotAppliedNoMatch),
            "applying twice finds the range already merged"
        );
    }
}
