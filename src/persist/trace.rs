//! The trace of a shard: its `since`, its `upper`, and the contiguous batches that cover
//! `[min, upper)`.
//!
//! Invariants (checked by [`Trace::validate`]):
//! - batches are contiguous: the first starts at the minimum time, each next batch's lower is the
//!   previous batch's upper, and the last batch's upper is the trace's upper;
//! - no batch is an empty interval (`lower == upper`);
//! - every batch's since is `<=` the trace's since.
//! - upper and since never go back (checked by the callers that change them).
//!
//! Compaction merges adjacent batches (see `compact.rs`); this module only appends and replaces.

use serde::{Deserialize, Serialize};
use timely::progress::Antichain;
use timely::PartialOrder;

use super::codec::Timestamp;
use super::state::HollowBatch;

/// See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    since: Antichain<Timestamp>,
    upper: Antichain<Timestamp>,
    batches: Vec<HollowBatch>,
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
        batches: Vec<HollowBatch>,
    ) -> Result<Self, String> {
        let trace = Trace {
            since,
            upper,
            batches,
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
    pub fn batches(&self) -> &[HollowBatch] {
        &self.batches
    }

    /// Appends a batch at the upper. The caller checked `batch.lower == upper` and that the
    /// interval is not empty.
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
        self.batches.push(batch);
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
        self.batches.splice(first..=last, std::iter::once(merged));
        true
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
