//! The persist sink of one replica: writes each completed range of the operator's output to the
//! shard with `compare_and_append`.
//!
//! [`PersistSink`] is the sink's state, as pure transitions; the write itself is
//! [`append`]. The sink knows an `upper` (the shard's, as far as it knows: the resume upper at
//! first) and the operator's output frontier. Whenever the frontier is beyond the upper, the
//! range `[upper, frontier)` is complete: [`PersistSink::next_write`] offers it (with every
//! buffered update in it, consolidated; possibly none, which still moves the shard's upper, and
//! the feedback loop needs that). Then:
//! - **committed**: the upper becomes the range's upper and those updates are gone;
//! - **upper mismatch**: a peer won. The sink adopts the shard's upper and drops every update
//!   below it: whatever the peer wrote there is consistent with the state every replica learns
//!   from the shard, and the sink must not write there again.
//!
//! Invariant: every buffered update is at or beyond `upper`.

use serde::Serialize;
use timely::progress::Antichain;
use timely::PartialOrder;

use super::types::SourceData;
use super::worker::OutputUpdate;
use crate::persist::codec::Timestamp;
use crate::persist::error::{PersistError, UpperMismatch};
use crate::persist::write::WriteHandle;

/// One write the sink wants: `updates` in `[lower, upper)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkWrite {
    /// The expected upper of the shard.
    pub lower: Antichain<Timestamp>,
    /// The new upper.
    pub upper: Antichain<Timestamp>,
    /// The updates, consolidated.
    pub updates: Vec<((SourceData, ()), Timestamp, i64)>,
}

/// The sink's state as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SinkSnapshot {
    /// The shard's upper as the sink knows it.
    pub upper: Option<Timestamp>,
    /// The operator's output frontier.
    pub frontier: Option<Timestamp>,
    /// Updates waiting.
    pub buffered: u64,
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct PersistSink {
    upper: Antichain<Timestamp>,
    frontier: Antichain<Timestamp>,
    // Invariant: every update is at or beyond `upper`.
    buffer: Vec<OutputUpdate>,
}

impl PersistSink {
    /// A sink that starts at the shard's `resume_upper`.
    pub fn new(resume_upper: Antichain<Timestamp>) -> Self {
        PersistSink {
            frontier: resume_upper.clone(),
            upper: resume_upper,
            buffer: Vec::new(),
        }
    }

    /// The shard's upper as the sink knows it.
    pub fn upper(&self) -> &Antichain<Timestamp> {
        &self.upper
    }

    /// Takes the operator's new output and frontier. Returns how many updates were dropped as
    /// below the upper (already written, by us or by a peer).
    pub fn ingest(&mut self, updates: Vec<OutputUpdate>, frontier: Antichain<Timestamp>) -> u64 {
        let (before, held) = (updates.len(), self.buffer.len());
        let upper = &self.upper;
        self.buffer
            .extend(updates.into_iter().filter(|(_, t, _)| upper.less_equal(t)));
        self.frontier = frontier;
        (before - (self.buffer.len() - held)) as u64
    }

    /// The complete range to write next, if the frontier is beyond the upper.
    pub fn next_write(&mut self) -> Option<SinkWrite> {
        if !PartialOrder::less_than(&self.upper, &self.frontier) {
            return None;
        }
        // The crate's one consolidation (its sort compiled once), not differential's, whose
        // unstable sort was a copy of its own for this update type. A run whose diffs overflow
        // (never, with the +1/-1 diffs of upsert) is left unsummed rather than wrapped.
        let _ = crate::persist::consolidate::consolidate_by(
            &mut self.buffer,
            |a, b| (&a.0, a.1).cmp(&(&b.0, b.1)),
            |u| &mut u.2,
        );
        let frontier = &self.frontier;
        let updates = self
            .buffer
            .iter()
            .filter(|(_, t, _)| !frontier.less_equal(t))
            .map(|(d, t, r)| ((SourceData(d.clone()), ()), *t, *r))
            .collect();
        Some(SinkWrite {
            lower: self.upper.clone(),
            upper: self.frontier.clone(),
            updates,
        })
    }

    /// The write committed: the shard's upper is now `upper`.
    pub fn committed(&mut self, upper: &Antichain<Timestamp>) {
        self.advance(upper.clone());
    }

    /// The shard's upper was `current`: a peer won. Returns how many updates were dropped.
    pub fn mismatch(&mut self, current: &Antichain<Timestamp>) -> u64 {
        let before = self.buffer.len();
        if PartialOrder::less_than(&self.upper, current) {
            self.advance(current.clone());
        }
        (before - self.buffer.len()) as u64
    }

    fn advance(&mut self, upper: Antichain<Timestamp>) {
        self.upper = upper;
        let upper = &self.upper;
        self.buffer.retain(|(_, t, _)| upper.less_equal(t));
    }

    /// As plain data.
    pub fn snapshot(&self) -> SinkSnapshot {
        SinkSnapshot {
            upper: self.upper.elements().first().copied(),
            frontier: self.frontier.elements().first().copied(),
            buffered: self.buffer.len() as u64,
        }
    }
}

/// Writes `write` with `compare_and_append`.
pub async fn append(
    handle: &mut WriteHandle<SourceData, ()>,
    write: &SinkWrite,
) -> Result<Result<(), UpperMismatch>, PersistError> {
    handle
        .compare_and_append(&write.updates, write.lower.clone(), write.upper.clone())
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upsert::types::kv_row;

    fn f(t: u64) -> Antichain<u64> {
        Antichain::from_elem(t)
    }

    #[test]
    fn writes_complete_ranges_and_drops_what_a_peer_won() {
        let mut s = PersistSink::new(f(2));
        assert_eq!(s.next_write(), None);
        s.ingest(
            vec![
                (Ok(kv_row(1, "a")), 2, 1),
                (Ok(kv_row(1, "a")), 4, -1),
                (Ok(kv_row(2, "b")), 5, 1),
            ],
            f(5),
        );
        let w = s.next_write().unwrap();
        assert_eq!(
            (w.lower.clone(), w.upper.clone(), w.updates.len()),
            (f(2), f(5), 2)
        );
        // A peer wrote up to 4: what lies below is dropped, [4, 5) is written next.
        assert_eq!(s.mismatch(&f(4)), 1);
        let w = s.next_write().unwrap();
        assert_eq!(
            (w.lower.clone(), w.upper.clone(), w.updates.len()),
            (f(4), f(5), 1)
        );
        s.committed(&f(5));
        assert_eq!(s.next_write(), None);
        assert_eq!(s.snapshot().buffered, 1, "the update at 5 waits");
        // Output below the upper (already written) is dropped on arrival.
        assert_eq!(s.ingest(vec![(Ok(kv_row(3, "c")), 4, 1)], f(7)), 1);
        let w = s.next_write().unwrap();
        assert_eq!((w.lower, w.upper, w.updates.len()), (f(5), f(7), 1));
        s.committed(&f(7));
        // A range with no updates is still written: it moves the shard's upper.
        s.ingest(Vec::new(), f(9));
        let w = s.next_write().unwrap();
        assert_eq!((w.lower, w.upper, w.updates.len()), (f(7), f(9), 0));
    }
}
