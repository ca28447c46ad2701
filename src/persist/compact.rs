//! The compactor: performs a [`FueledMergeReq`] from the spine (`trace.rs`) and commits the result.
//!
//! Compaction is physical (many batches become one, so reads touch fewer parts and state holds
//! fewer batches) and logical (times before the since advance to it, then updates that cancel or
//! repeat are consolidated). It never changes what the shard holds at a time at or beyond the
//! since. Steps:
//! 1. fetch every part of every input (inline ones are in the request already); a part missing
//!    from Blob means a newer state replaced these inputs and GC deleted them: give up;
//! 2. keep each input's updates inside its own `[lower, upper)` (an appended batch may have been
//!    truncated), advance every time to the request's since ([`advance_to`]), consolidate;
//! 3. write the output as one batch over the request's description: inline if every input was
//!    inline and it is small (so compaction never moves inline bytes the other way), otherwise
//!    as Blob parts of at most `part_max_updates` updates, written before the state names them;
//! 4. commit `apply_merge_res` (the `merge_res` command), which replaces the inputs only if they
//!    still line up (see `trace.rs`);
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

use std::ops::ControlFlow::{Break, Continue};

use bytes::Bytes;
use differential_dataflow::lattice::Lattice;
use timely::progress::Antichain;

use super::codec::Timestamp;
use super::encoding::{decode_part, encode_part, EncodedUpdate};
use super::events::{frontier, PersistEvent};
use super::machine::Machine;
use super::maintenance::MaintenanceIds;
use super::state::{BatchPart, Description, HollowBatch};
use super::trace::{ApplyMergeResult, FueledMergeReq};
use super::{PersistClient, ShardId};

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
}

/// The time every earlier update advances to when compacting to `desc`: the since, but never
/// past the interval's last time (`upper - 1`). When the since is beyond the batch, all its
/// updates collapse onto that last time: at every time at or beyond the since they accumulate
/// exactly as before, and they stay inside `[lower, upper)`, where readers look for them. `None`:
/// no advancing (both frontiers empty).
pub fn advance_to(desc: &Description) -> Option<Timestamp> {
    let since = desc.since.elements().first().copied();
    let last = desc.upper.elements().first().map(|u| u.saturating_sub(1));
    match (since, last) {
        (Some(s), Some(l)) => Some(s.min(l)),
        (s, l) => s.or(l),
    }
}

/// The pure core of a merge: each input's updates (with the input's own description) filtered to
/// that input's `[lower, upper)`, advanced to `desc` ([`advance_to`]) and consolidated. An
/// update whose diffs would sum outside the 64-bit range is an error (the merge is not done).
pub fn merge_updates(
    desc: &Description,
    inputs: Vec<(Description, Vec<EncodedUpdate>)>,
) -> Result<Vec<EncodedUpdate>, super::consolidate::DiffOverflow> {
    let advance = advance_to(desc).map(Antichain::from_elem);
    let mut out = Vec::new();
    for (input, updates) in inputs {
        for (kv, mut t, d) in updates {
            if !input.lower.less_equal(&t) || input.upper.less_equal(&t) {
                continue;
            }
            if let Some(frontier) = &advance {
                t.advance_by(frontier.borrow());
            }
            out.push((kv, t, d));
        }
    }
    super::consolidate::consolidate_checked(&mut out)?;
    Ok(out)
}

/// Reads a batch's updates: `Ok(None)` if one of its parts is missing from Blob.
async fn fetch_updates(
    machine: &Machine,
    batch: &HollowBatch,
) -> Result<Option<Vec<EncodedUpdate>>, String> {
    let mut updates = Vec::new();
    for part in &batch.parts {
        let decoded = match part {
            BatchPart::Inline { encoded } => decode_part(encoded),
            BatchPart::Hollow { key, .. } => {
                let mut backoff = machine.cfg.backoff();
                let bytes = loop {
                    match machine.location.blob.get(key).await {
                        Ok(Some(bytes)) => break bytes,
                        Ok(None) => return Ok(None),
                        Err(_) => {
                            backoff.wait(&machine.runtime).await;
                        }
                    }
                };
                decode_part(&bytes)
            }
        };
        updates.extend(decoded.map_err(|e| e.to_string())?);
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
) -> HollowBatch {
    let len = updates.len() as u64;
    if updates.is_empty() {
        return HollowBatch {
            desc: desc.clone(),
            len: 0,
            parts: Vec::new(),
        };
    }
    let encoded = encode_part(&updates);
    if inputs_all_inline && encoded.len() as u64 <= machine.cfg.inline_writes_single_max_bytes {
        return HollowBatch {
            desc: desc.clone(),
            len,
            parts: vec![BatchPart::Inline { encoded }],
        };
    }
    let mut parts = Vec::new();
    for chunk in updates.chunks(machine.cfg.part_max_updates.max(1)) {
        let key = format!("{}/{}/p{}", machine.shard_id.0, machine.who, ids.next());
        let bytes = Bytes::from(encode_part(chunk));
        machine
            .write_blob_retrying(&key, bytes.clone(), "compaction part")
            .await;
        parts.push(BatchPart::Hollow {
            key,
            encoded_size_bytes: bytes.len() as u64,
        });
    }
    HollowBatch {
        desc: desc.clone(),
        len,
        parts,
    }
}

fn hollow_keys(batch: &HollowBatch) -> Vec<String> {
    batch.part_keys().map(String::from).collect()
}

/// Performs `req` and commits the result (see the module docs). Never panics on bad data: an
/// undecodable input makes the compaction give up.
pub(crate) async fn compact_and_apply(
    machine: &Machine,
    req: FueledMergeReq,
    ids: &MaintenanceIds,
) -> CompactionOutcome {
    let desc = req.desc.clone();
    let (lower, upper) = (frontier(&desc.lower), frontier(&desc.upper));
    machine.events.record(|| PersistEvent::CompactionRequested {
        who: machine.who.clone(),
        shard: machine.shard_id.0.clone(),
        lower,
        upper,
        since: frontier(&desc.since),
        inputs: req.inputs.len(),
        input_updates: req.inputs.iter().map(|b| b.len).sum(),
        at_ms: machine.runtime.now_ms(),
    });
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

    // 1 and 2: fetch, filter, advance, consolidate.
    let mut inputs = Vec::with_capacity(req.inputs.len());
    for batch in &req.inputs {
        match fetch_updates(machine, batch).await {
            Ok(Some(updates)) => inputs.push((batch.desc.clone(), updates)),
            Ok(None) => {
                return not_applied("an input part is gone (the inputs were replaced)".into())
            }
            Err(e) => return not_applied(format!("an input does not decode: {e}")),
        }
    }
    let inputs_all_inline = req.inputs.iter().all(|b| {
        b.parts
            .iter()
            .all(|p| matches!(p, BatchPart::Inline { .. }))
    });
    let updates = match merge_updates(&desc, inputs) {
        Ok(updates) => updates,
        Err(e) => return not_applied(format!("cannot merge: {e}")),
    };

    // 3: the output, in Blob before state names it.
    let output = write_output(machine, ids, &desc, updates, inputs_all_inline).await;

    // 4: commit, if the inputs still line up.
    let (seqno, result, maybe_committed) = machine
        .apply_maintenance_cmd("merge_res", |c| c.apply_merge_res(&req, &output))
        .await;
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
    match result {
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
                .await;
            not_applied(format!("{result:?}"))
        }
    }
}

/// Runs every outstanding merge request of the shard's trace now, in this task, until the spine
/// asks for nothing more (or a merge does not apply). For tests and the playground; writers do
/// this on their own in the background.
pub async fn compact_now(client: &PersistClient, shard_id: &ShardId) -> Vec<CompactionOutcome> {
    let machine = client.machine(shard_id, "compactor".into());
    let ids = MaintenanceIds::from_client(client);
    let mut outcomes = Vec::new();
    // Every applied round removes batches, so this ends; the bound is only a guard.
    for _ in 0..64 {
        machine.fetch_and_update_state_retrying().await;
        let reqs = machine.state().collections.trace.merge_reqs();
        if reqs.is_empty() {
            break;
        }
        let mut all_applied = true;
        for req in reqs {
            let outcome = compact_and_apply(&machine, req, &ids).await;
            all_applied &= matches!(outcome, CompactionOutcome::Applied(_));
            outcomes.push(outcome);
        }
        if !all_applied {
            break;
        }
    }
    outcomes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::state::{HollowBatch, StateCollections};
    use std::ops::ControlFlow;

    fn f(t: u64) -> Antichain<u64> {
        Antichain::from_elem(t)
    }

    fn desc(lower: u64, upper: u64, since: u64) -> Description {
        Description {
            lower: f(lower),
            upper: f(upper),
            since: f(since),
        }
    }

    fn u(k: &str, t: u64, d: i64) -> EncodedUpdate {
        ((k.as_bytes().to_vec(), Vec::new()), t, d)
    }

    #[test]
    fn advance_to_is_the_since_clamped_to_the_last_time() {
        assert_eq!(advance_to(&desc(0, 10, 4)), Some(4));
        assert_eq!(
            advance_to(&desc(0, 10, 50)),
            Some(9),
            "since beyond the batch"
        );
        let mut open = desc(0, 10, 4);
        open.upper = Antichain::new();
        assert_eq!(advance_to(&open), Some(4), "a finished shard's last batch");
        let mut all = open.clone();
        all.since = Antichain::new();
        assert_eq!(advance_to(&all), None);
    }

    #[test]
    fn merge_filters_advances_and_consolidates() {
        // Two inputs; the first was truncated to [0, 5) (its part also holds t = 7).
        let a = (
            desc(0, 5, 0),
            vec![u("x", 1, 1), u("y", 2, 1), u("z", 7, 1)],
        );
        let b = (desc(5, 10, 0), vec![u("x", 6, -1), u("y", 8, 1)]);
        let out = merge_updates(&desc(0, 10, 6), vec![a, b]).unwrap();
        // x: +1 at 1 -> 6, -1 at 6: cancels. y: +1 at 2 -> 6, +1 at 8. z is outside its input.
        assert_eq!(out, vec![u("y", 6, 1), u("y", 8, 1)]);
        // Contents at every time >= since are unchanged: at 6, y=1; at 8, y=2.
    }

    #[test]
    fn merge_beyond_the_batch_collapses_onto_its_last_time() {
        let a = (desc(0, 5, 0), vec![u("x", 1, 1), u("x", 3, 1)]);
        let b = (desc(5, 10, 0), vec![u("x", 6, -1)]);
        let out = merge_updates(&desc(0, 10, 100), vec![a, b]).unwrap();
        assert_eq!(
            out,
            vec![u("x", 9, 1)],
            "inside [lower, upper), accumulated"
        );
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
