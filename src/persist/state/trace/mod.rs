//! The trace of a shard: its `since`, its `upper`, and the contiguous batches that cover
//! `[min, upper)`, plus the spine that decides which adjacent batches compaction should merge.
//!
//! Invariants (checked by [`Trace::validate`]):
//! - batches are contiguous: the first starts at the minimum time, each next batch's lower is the
//!   previous batch's upper, and the last batch's upper is the trace's upper;
//! - no batch is an empty interval (`lower == upper`);
//! - every batch's since is `<=` the trace's since.
//! - upper and since never go back (checked by the callers that change them).
//!
//! # The spine
//!
//! Compaction keeps the number of batches logarithmic in the number of updates, the way a binary
//! counter keeps few digits. A batch's **level** is the bit length of its update count (an empty
//! batch is level 0, 1 update is level 1, 2..=3 updates level 2, 4..=7 level 3, ...). The trace is
//! *tidy* when, read from the oldest batch to the newest, levels strictly decrease: then it holds at
//! most 65 batches whatever its size, and every update has been rewritten about log2(n) times.
//!
//! The merge plan ([`Trace::merge_reqs`]) walks the batches from oldest to newest, keeping a stack
//! of groups; each batch starts a group of its own, and while the group below the top is not of a
//! higher level than the top (by the sum of their update counts), the two fuse. Every group of two
//! or more batches is a [`FueledMergeReq`]. This is the teaching-sized analogue of the original's
//! fueled spine (notes 1.8): batches are filed by `log2(next_pow2(len))`, a full level merges into
//! the next, and smaller levels roll up into a big batch inserted above them. Differences: the
//! original allows two batches per level and merges with fuel while inserting; here merging is
//! all-or-nothing and asynchronous, so the plan is recomputed from the batches alone and the spine
//! keeps no state of its own beyond them (nothing more to store, encode or diff).
//!
//! Requests come from writes: after a compare_and_append the writer asks for
//! [`Trace::newest_merge_req`], the group that contains the batch it just appended, which is where a
//! carry happens (the original's `push_batch` likewise returns the merges that the insert
//! completed). A request that is lost (its compactor crashed, or lost a race) is picked up again
//! when a later carry reaches its batches, or by anyone who asks for [`Trace::merge_reqs`].
//!
//! [`spine_bound`] is the most batches the trace holds: two per level, as in differential's
//! spine, up to the level of all the updates together.
//!
//! # The spine bound, by construction
//!
//! Merges are asynchronous, and a merge whose inputs are in Blob takes round trips; a writer
//! committing in a tight loop appends batches all the while. Left alone, the count grows with
//! the merge's duration times the write rate: with the default thresholds the tail of one-update
//! batches is requested only at 8 inputs, and then as a carry through every level below it (a
//! merge of thousands of updates, in Blob), while the compactor, busy with it, merges nothing
//! newer. Whether the bound held depended on the latencies. So appends are back-pressured:
//! - a trace that is *tidy* holds at most `level(n) + 1` batches (`n` its updates): each batch
//!   holds at most `n` updates, so its level is in `0..=level(n)`, and the levels strictly
//!   decrease;
//! - a trace that is not tidy has a planned group of two or more batches (the plan fuses groups
//!   until their levels strictly decrease; if every group is one batch, the batches themselves
//!   strictly decrease). So a trace over the bound (`spine_bound(n) = 2 * (level(n) + 1)`) always
//!   has a merge to do, and every merge that applies removes at least one batch;
//! - only a compare_and_append adds a batch. It commits only a state within the bound
//!   ([`Trace::within_spine_bound`]), counting the merges its process has waiting to be carried
//!   (`machine/plan.rs`, `Machine::spine_backpressure`); otherwise it breaks with
//!   `SpineBackpressure` before any compare_and_set, and the writer waits for its process's
//!   compactor, which then merges every planned group whatever the thresholds, and tries again;
//! - merges, since downgrades and every other command never add batches.
//!
//! Hence every version an append commits holds at most `spine_bound(n)` batches, whatever the
//! write rate, the latencies or the schedule (asserted in debug builds where the append
//! commits). A merge that consolidates updates away can lower `n`, and so the bound, faster
//! than it removes batches; then the next append waits until the merges catch up (the trace is
//! over the bound, so not tidy, so there is a merge to do). The check costs one pass over the
//! batches (`O(log n)`), and it waits only at the bound: compaction keeping up leaves the trace
//! near `level(n)` batches, half the bound.
//!
//! Consecutive empty batches (a writer moving the upper without data) are fused when appended: an
//! empty batch carries no parts, so extending the previous one is free and needs no compaction.
//!
//! Applying a result ([`Trace::apply_merge_res`]) replaces batches only if they still line up:
//! - `AppliedExact`: the batches between the request's lower and upper are exactly its inputs;
//! - `AppliedSubset`: the request's lower and upper are still batch boundaries, but the batches
//!   between them changed (another merge or a fuse inside the range applied first). The output
//!   holds the same updates, consolidated to a since no later than the trace's, so it may replace
//!   them: at every time at or beyond the since the contents are the same;
//! - `NotAppliedNoMatch`: the bounds are no longer batch boundaries (a larger merge applied first),
//!   or a single batch already covers exactly the range (the same merge applied first);
//! - `NotAppliedInvalidSince`: the output was compacted to a since beyond the trace's, which would
//!   lose history a reader may still read;
//! - `NotAppliedTooManyUpdates`: the output has more updates than the inputs (a broken compactor);
//! - `NotAppliedStale` (checked by `StateCollections::apply_merge_res`): a routine merge's output
//!   assigned before the oldest listed rollup, which GC's sweep may have deleted.
//!
//! In no case does applying a result change the trace's contents at a time at or beyond the since:
//! only the compactor touches updates, and it only advances times below the since (see
//! `compact.rs`).

use std::rc::Rc;

use serde::{Deserialize, Serialize};
use timely::progress::Antichain;
use timely::PartialOrder;

use super::{Description, HollowBatch};
use crate::persist::codec::Timestamp;

/// A request to merge adjacent batches into one, compacted to `desc.since`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FueledMergeReq {
    /// The interval the output covers (the inputs' lower and upper) and the since to compact to
    /// (the trace's since when the request was made).
    pub desc: Description,
    /// The batches to merge, oldest first, as the trace held them.
    pub inputs: Vec<Rc<HollowBatch>>,
}

/// What came of applying a merge result; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ApplyMergeResult {
    /// The inputs were still there, exactly: replaced by the output.
    AppliedExact,
    /// The bounds still lined up but the batches between them had changed: replaced.
    AppliedSubset,
    /// The inputs no longer line up: nothing changed.
    NotAppliedNoMatch,
    /// The output's since is beyond the trace's: nothing changed.
    NotAppliedInvalidSince,
    /// The output has more updates than the inputs: nothing changed.
    NotAppliedTooManyUpdates,
    /// The output was assigned at a seqno older than the oldest listed rollup (its parts may
    /// have been swept: see `gc.rs`): nothing changed.
    NotAppliedStale,
}

impl ApplyMergeResult {
    /// Whether the output replaced batches.
    pub fn applied(self) -> bool {
        matches!(
            self,
            ApplyMergeResult::AppliedExact | ApplyMergeResult::AppliedSubset
        )
    }
}

/// A batch's level in the spine: the bit length of its update count (0 for an empty batch).
pub fn level(len: u64) -> u32 {
    u64::BITS - len.leading_zeros()
}

/// The most batches a trace of `updates` updates holds (see the module docs): two per level, as
/// in differential's spine, over the levels up to the one of all the updates together. Twice
/// what a tidy trace can hold.
pub fn spine_bound(updates: u64) -> usize {
    2 * (level(updates) as usize + 1)
}

/// See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    since: Antichain<Timestamp>,
    upper: Antichain<Timestamp>,
    // Batches are shared between state versions (a command clones the state; the batches it does
    // not touch are not copied).
    batches: Vec<Rc<HollowBatch>>,
}

impl Default for Trace {
    fn default() -> Self {
        Trace {
            since: Antichain::from_elem(Timestamp::MIN),
            upper: Antichain::from_elem(Timestamp::MIN),
            batches: Vec::new(),
        }
    }
}

impl Trace {
    /// A trace from its parts (a decoded rollup or a rebuilt diff); checked by [`Trace::validate`].
    pub fn from_parts(
        since: Antichain<Timestamp>,
        upper: Antichain<Timestamp>,
        batches: impl IntoIterator<Item = impl Into<Rc<HollowBatch>>>,
    ) -> Result<Self, String> {
        let trace = Trace {
            since,
            upper,
            batches: batches.into_iter().map(Into::into).collect(),
        };
        trace.validate()?;
        Ok(trace)
    }

    /// The since frontier.
    pub fn since(&self) -> &Antichain<Timestamp> {
        &self.since
    }

    /// The upper frontier.
    pub fn upper(&self) -> &Antichain<Timestamp> {
        &self.upper
    }

    /// The batches, in time order.
    pub fn batches(&self) -> &[Rc<HollowBatch>] {
        &self.batches
    }

    /// The number of updates in the batches.
    pub fn updates(&self) -> u64 {
        self.batches
            .iter()
            .map(|b| b.len)
            .fold(0, u64::saturating_add)
    }

    /// Whether the trace holds at most [`spine_bound`] of its updates' batches: what every
    /// version an append commits satisfies (see the module docs).
    pub fn within_spine_bound(&self) -> bool {
        self.batches.len() <= spine_bound(self.updates())
    }

    /// Whether the trace is tidy: read oldest to newest, the batches' levels strictly decrease
    /// (the plan merges nothing). A tidy trace is within [`spine_bound`] with room to spare.
    pub fn is_tidy(&self) -> bool {
        self.batches
            .windows(2)
            .all(|w| level(w[0].len) > level(w[1].len))
    }

    /// Appends a batch at the upper. The caller checked `batch.lower == upper` and that the
    /// interval is not empty. An empty batch after an empty batch extends it instead (see the
    /// module docs).
    pub fn push_batch(&mut self, batch: HollowBatch) {
        assert_eq!(
            batch.desc.lower, self.upper,
            "push_batch: batch lower must equal the trace upper"
        );
        assert_ne!(
            batch.desc.lower, batch.desc.upper,
            "push_batch: empty intervals are heartbeats, not batches"
        );
        assert!(PartialOrder::less_equal(&self.upper, &batch.desc.upper));
        self.upper = batch.desc.upper.clone();
        match self.batches.last_mut() {
            Some(last) if is_empty_batch(last) && is_empty_batch(&batch) => {
                Rc::make_mut(last).desc.upper = batch.desc.upper;
            }
            _ => self.batches.push(Rc::new(batch)),
        }
    }

    /// Drops every batch of a finished trace (upper empty) for one empty batch over all time:
    /// nothing can be read from a tombstone, so nothing needs its parts.
    pub fn finish(&mut self) {
        debug_assert!(self.upper.is_empty());
        let mut all_time =
            Description::new(Antichain::from_elem(Timestamp::MIN), self.upper.clone());
        all_time.since = self.since.clone();
        self.batches = vec![Rc::new(HollowBatch::empty(all_time))];
    }

    /// Sets the since. It never goes back.
    pub fn downgrade_since(&mut self, since: &Antichain<Timestamp>) {
        assert!(
            PartialOrder::less_equal(&self.since, since),
            "since regressed: {:?} -> {:?}",
            self.since,
            since
        );
        self.since = since.clone();
    }

    /// Replaces the batches `[first, last]` (inclusive) by `merged`, which must cover exactly the
    /// same interval. Returns false (changing nothing) if they don't line up.
    pub fn replace_range(&mut self, first: usize, last: usize, merged: HollowBatch) -> bool {
        if first > last || last >= self.batches.len() {
            return false;
        }
        if self.batches[first].desc.lower != merged.desc.lower
            || self.batches[last].desc.upper != merged.desc.upper
        {
            return false;
        }
        self.batches
            .splice(first..=last, std::iter::once(Rc::new(merged)));
        true
    }

    /// The merge plan: every group of two or more adjacent batches that the spine would merge,
    /// oldest first, each compacted to the current since. The groups are disjoint. See the module
    /// docs.
    pub fn merge_reqs(&self) -> Vec<FueledMergeReq> {
        self.plan()
            .into_iter()
            .filter(|(first, last)| first < last)
            .map(|(first, last)| self.merge_req(first, last))
            .collect()
    }

    /// The planned merge that includes the newest batch, if the plan merges it with anything:
    /// what a writer asks for after appending.
    pub fn newest_merge_req(&self) -> Option<FueledMergeReq> {
        let (first, last) = *self.plan().last()?;
        (first < last).then(|| self.merge_req(first, last))
    }

    /// The groups of the plan as inclusive index ranges, oldest first.
    fn plan(&self) -> Vec<(usize, usize)> {
        // Each entry: (first index, last index, total updates).
        let mut stack: Vec<(usize, usize, u64)> = Vec::new();
        for (i, b) in self.batches.iter().enumerate() {
            stack.push((i, i, b.len));
            while let [.., older, newer] = stack.as_slice() {
                if level(older.2) > level(newer.2) {
                    break;
                }
                let merged = (older.0, newer.1, older.2.saturating_add(newer.2));
                stack.truncate(stack.len() - 2);
                stack.push(merged);
            }
        }
        // Invariant: read oldest to newest, the groups' levels strictly decrease.
        debug_assert!(stack.windows(2).all(|w| level(w[0].2) > level(w[1].2)));
        stack.into_iter().map(|(f, l, _)| (f, l)).collect()
    }

    fn merge_req(&self, first: usize, last: usize) -> FueledMergeReq {
        let inputs = self.batches[first..=last].to_vec();
        FueledMergeReq {
            desc: Description {
                lower: inputs[0].desc.lower.clone(),
                upper: inputs[inputs.len() - 1].desc.upper.clone(),
                since: self.since.clone(),
            },
            inputs,
        }
    }

    /// Replaces the batches of `req` by `output` if they still line up (see the module docs for
    /// each outcome). `output` must cover exactly `req.desc`.
    pub fn apply_merge_res(
        &mut self,
        req: &FueledMergeReq,
        output: &HollowBatch,
    ) -> ApplyMergeResult {
        if output.desc != req.desc {
            return ApplyMergeResult::NotAppliedNoMatch;
        }
        if !PartialOrder::less_equal(&output.desc.since, &self.since) {
            return ApplyMergeResult::NotAppliedInvalidSince;
        }
        let inputs_len = req
            .inputs
            .iter()
            .map(|b| b.len)
            .fold(0, u64::saturating_add);
        if output.len > inputs_len {
            return ApplyMergeResult::NotAppliedTooManyUpdates;
        }
        let first = self
            .batches
            .iter()
            .position(|b| b.desc.lower == req.desc.lower);
        let last = self
            .batches
            .iter()
            .position(|b| b.desc.upper == req.desc.upper);
        let (Some(first), Some(last)) = (first, last) else {
            return ApplyMergeResult::NotAppliedNoMatch;
        };
        if first >= last {
            // Inverted (cannot happen with contiguous batches and lower < upper), or one batch
            // already covers exactly this range: the same merge applied first.
            return ApplyMergeResult::NotAppliedNoMatch;
        }
        let result = if self.batches[first..=last] == req.inputs[..] {
            ApplyMergeResult::AppliedExact
        } else {
            ApplyMergeResult::AppliedSubset
        };
        self.batches
            .splice(first..=last, std::iter::once(Rc::new(output.clone())));
        result
    }

    /// Checks the invariants in the module docs.
    pub fn validate(&self) -> Result<(), String> {
        let mut expected_lower = Antichain::from_elem(Timestamp::MIN);
        for (i, b) in self.batches.iter().enumerate() {
            if b.desc.lower.len() > 1 || b.desc.upper.len() > 1 || b.desc.since.len() > 1 {
                return Err(format!(
                    "batch {i} has a frontier with more than one element"
                ));
            }
            if b.desc.lower != expected_lower {
                return Err(format!(
                    "batch {i} has lower {:?}, expected {:?}",
                    b.desc.lower, expected_lower
                ));
            }
            if b.desc.lower == b.desc.upper {
                return Err(format!("batch {i} is an empty interval"));
            }
            if !PartialOrder::less_equal(&b.desc.lower, &b.desc.upper) {
                return Err(format!("batch {i} has lower beyond upper"));
            }
            if !PartialOrder::less_equal(&b.desc.since, &self.since) {
                return Err(format!("batch {i} since is beyond the trace since"));
            }
            expected_lower = b.desc.upper.clone();
        }
        if expected_lower != self.upper {
            return Err(format!(
                "the batches end at {:?} but the upper is {:?}",
                expected_lower, self.upper
            ));
        }
        for f in [&self.since, &self.upper] {
            if f.len() > 1 {
                return Err(format!("frontier {f:?} has more than one element"));
            }
        }
        Ok(())
    }
}

/// An empty batch: no updates and no parts.
fn is_empty_batch(b: &HollowBatch) -> bool {
    b.len == 0 && b.parts.is_empty()
}

#[cfg(test)]
pub(crate) mod tests;
