//! The maintenance transitions: compaction's merge results, rollups and GC's bookkeeping (the
//! spine is in `trace.rs`; the work that uses these is in `compact.rs`, `gc.rs`, `rollup.rs` and
//! `maintenance.rs`; the unit tests of rollups and the GC trigger are below, those of merges in
//! `compact.rs`). Pure, like the rest of the state.

use std::ops::ControlFlow::{self, Break, Continue};

use super::{HollowBatch, HollowRollup, StateCollections};
use serde::Serialize;

use crate::location::SeqNo;

/// After this many multiples of the rollup threshold without a rollup (the process assigned to
/// write one failed), every commit is assigned one until one lands.
pub const ROLLUP_FALLBACK_MULTIPLE: u64 = 3;

/// What a state version (the diff of one small command) is taken to weigh, for the rollup
/// cadence ([`StateCollections::need_rollup`]).
pub const DIFF_BYTES_ESTIMATE: u64 = 512;

/// A request to collect garbage below `new_seqno_since` (made by [`StateCollections::maybe_gc`],
/// served by `gc.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GcReq {
    /// `last_gc_req` before this request (shown in events; the collector works from a scan).
    pub old_seqno_since: SeqNo,
    /// No live reader or version needs the versions below this one.
    pub new_seqno_since: SeqNo,
}

impl StateCollections {
    /// Replaces the batches of a merge request by its output if they still line up (see
    /// `trace.rs` for each outcome). `Break` when not applied: there is nothing to commit.
    pub fn apply_merge_res(
        &mut self,
        req: &crate::persist::state::trace::FueledMergeReq,
        output: &HollowBatch,
    ) -> ControlFlow<
        crate::persist::state::trace::ApplyMergeResult,
        crate::persist::state::trace::ApplyMergeResult,
    > {
        // SUBTLE: an output of routine maintenance assigned before the oldest listed rollup may
        // have been swept by GC (see `maintenance_output_seqno`): it must not be committed.
        let oldest = self.oldest_rollup();
        let stale = output
            .part_keys()
            .filter_map(super::maintenance_output_seqno)
            .any(|s| oldest.is_some_and(|oldest| s < oldest));
        if stale {
            return Break(crate::persist::state::trace::ApplyMergeResult::NotAppliedStale);
        }
        let result = self.trace.apply_merge_res(req, output);
        if result.applied() {
            Continue(result)
        } else {
            Break(result)
        }
    }

    /// Adds the rollup `(seqno, rollup)`. It applies iff no rollup is listed at `seqno` and
    /// `seqno` is not older than every listed rollup (such a rollup helps no one: readers start
    /// from the newest, GC from the one at the earliest live version, which is listed).
    ///
    /// `Continue(true)`: added. `Break(true)`: this very rollup is already listed (an earlier
    /// attempt committed). `Break(false)`: refused, so the caller deletes its blob.
    pub fn add_rollup(&mut self, seqno: SeqNo, rollup: &HollowRollup) -> ControlFlow<bool, bool> {
        match self.try_add_rollup(seqno, rollup) {
            AddRollup::Added => Continue(true),
            AddRollup::AlreadyListed => Break(true),
            AddRollup::Refused => Break(false),
        }
    }

    /// GC's last command: unlists every rollup below `seqno`, keeping at least the newest
    /// one. The caller has truncated Consensus to `seqno`, so none of them is at the earliest
    /// live version (see `gc.rs`). Returns how many it unlisted; `Break(0)` when none.
    pub fn remove_rollups_below(&mut self, seqno: SeqNo) -> ControlFlow<usize, usize> {
        let newest = self.rollups.keys().next_back().copied();
        let below: Vec<SeqNo> = self
            .rollups
            .range(..seqno)
            .map(|(s, _)| *s)
            .filter(|s| Some(*s) != newest)
            .collect();
        for s in &below {
            self.rollups.remove(s);
        }
        if below.is_empty() {
            Break(0)
        } else {
            Continue(below.len())
        }
    }

    /// A collection's one command (see `gc.rs`): lists `add` (the collector's rollup at its
    /// target, if it wrote one; the same rules as [`StateCollections::add_rollup`]) and unlists
    /// every rollup below `remove_below` (the earliest live version, which the collector scanned:
    /// Consensus is truncated below it, so none of them is the rollup at the earliest), keeping at
    /// least the newest. One state transition, one seqno.
    ///
    /// `Continue((listed, unlisted))` when it changed something; `Break(listed)` when there is
    /// nothing to commit. `listed`: the rollup `add` names is listed (by this command or an
    /// earlier attempt of it); `false` when refused (the caller deletes its blob) or not given.
    pub fn add_and_remove_rollups(
        &mut self,
        add: Option<(SeqNo, &HollowRollup)>,
        remove_below: SeqNo,
    ) -> ControlFlow<bool, (bool, usize)> {
        let (added, listed) = match add {
            None => (false, false),
            Some((seqno, rollup)) => match self.try_add_rollup(seqno, rollup) {
                AddRollup::Added => (true, true),
                AddRollup::AlreadyListed => (false, true),
                AddRollup::Refused => (false, false),
            },
        };
        let unlisted = match self.remove_rollups_below(remove_below) {
            Continue(n) | Break(n) => n,
        };
        if added || unlisted > 0 {
            Continue((listed, unlisted))
        } else {
            Break(listed)
        }
    }

    /// The oldest rollup listed. It never goes back: [`StateCollections::add_rollup`] refuses a
    /// rollup older than it, and only older ones are ever unlisted. So a rollup blob below it
    /// that no live version refers to can never be listed again (GC's sweep deletes it).
    pub fn oldest_rollup(&self) -> Option<SeqNo> {
        self.rollups.keys().next().copied()
    }

    fn try_add_rollup(&mut self, seqno: SeqNo, rollup: &HollowRollup) -> AddRollup {
        if let Some(existing) = self.rollups.get(&seqno) {
            return if existing.key == rollup.key {
                AddRollup::AlreadyListed
            } else {
                AddRollup::Refused
            };
        }
        if self
            .rollups
            .keys()
            .next()
            .is_some_and(|oldest| seqno < *oldest)
        {
            return AddRollup::Refused;
        }
        self.rollups.insert(seqno, rollup.clone());
        AddRollup::Added
    }

    /// Whether the process that commits `seqno` should write a rollup of it: every `threshold`
    /// seqnos after the newest rollup (exact multiples, so one process is assigned each), and, as a
    /// fallback when the assigned one failed, every seqno once the newest rollup is more than
    /// [`ROLLUP_FALLBACK_MULTIPLE`] thresholds old. A threshold of 0 assigns none.
    ///
    /// The threshold stretches with the state's size: a rollup is worth writing once the diffs a
    /// cold reader would replay since the last one weigh about as much as it does, so the
    /// effective threshold is `threshold` times `ceil(latest rollup size / (threshold *`
    /// [`DIFF_BYTES_ESTIMATE`]`))` (at least `threshold`). It is read from the latest rollup's
    /// recorded size, which every process sees alike, so one process is still assigned each.
    pub fn need_rollup(&self, seqno: SeqNo, threshold: u64) -> Option<SeqNo> {
        if threshold == 0 {
            return None;
        }
        let (latest, rollup) = self.rollups.last_key_value()?;
        let per_threshold = threshold.saturating_mul(DIFF_BYTES_ESTIMATE).max(1);
        let stretch = rollup.encoded_size_bytes.div_ceil(per_threshold).max(1);
        let threshold = threshold.saturating_mul(stretch);
        let behind = seqno.0.checked_sub(latest.0)?;
        let due = behind > 0
            && (behind % threshold == 0
                || behind > threshold.saturating_mul(ROLLUP_FALLBACK_MULTIPLE));
        due.then_some(seqno)
    }

    /// The GC trigger, run on every new version before it is committed: if the seqno since
    /// moved at least `max(1, ceil(log2(seqno)))` past `last_gc_req`, and this command is a
    /// write (GC work goes to writers) or there are no writers, it moves `last_gc_req` up to the
    /// seqno since and returns the request for whoever commits this version.
    pub fn maybe_gc(&mut self, is_write: bool, seqno: SeqNo) -> Option<GcReq> {
        let threshold = u64::from(seqno.0.next_power_of_two().trailing_zeros()).max(1);
        self.request_gc(is_write, seqno, threshold)
    }

    /// [`StateCollections::maybe_gc`] for a version that is also due a rollup: fires as soon as
    /// the seqno since moved at all, so that the collection can list that rollup in its own
    /// command (`maintenance.rs`).
    pub fn maybe_gc_with_rollup(&mut self, is_write: bool, seqno: SeqNo) -> Option<GcReq> {
        self.request_gc(is_write, seqno, 1)
    }

    fn request_gc(&mut self, is_write: bool, seqno: SeqNo, threshold: u64) -> Option<GcReq> {
        let seqno_since = self.seqno_since(seqno);
        let moved = seqno_since.0.saturating_sub(self.last_gc_req.0);
        if moved < threshold || !(is_write || self.writers.is_empty()) {
            return None;
        }
        let old_seqno_since = self.last_gc_req;
        self.last_gc_req = seqno_since;
        Some(GcReq {
            old_seqno_since,
            new_seqno_since: seqno_since,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AddRollup {
    Added,
    AlreadyListed,
    Refused,
}

#[cfg(test)]
mod tests {
    //! The pure transitions GC and rollups rely on (moved here from `gc.rs`).
    use super::*;
    use crate::persist::state::WriterId;

    fn rollup(key: &str) -> HollowRollup {
        HollowRollup {
            key: key.into(),
            encoded_size_bytes: 1,
        }
    }

    fn with_rollups(seqnos: &[u64]) -> StateCollections {
        let mut s = StateCollections::new();
        for n in seqnos {
            s.rollups.insert(SeqNo(*n), rollup(&format!("r{n}")));
        }
        s
    }

    #[test]
    fn add_rollup_applies_iff_the_seqno_is_free_and_not_too_old() {
        let mut s = with_rollups(&[4]);
        assert_eq!(
            s.add_rollup(SeqNo(8), &rollup("a")),
            ControlFlow::Continue(true)
        );
        assert_eq!(
            s.add_rollup(SeqNo(8), &rollup("a")),
            ControlFlow::Break(true),
            "the same rollup again (a retry whose first attempt committed)"
        );
        assert_eq!(
            s.add_rollup(SeqNo(8), &rollup("b")),
            ControlFlow::Break(false),
            "another rollup holds the seqno"
        );
        assert_eq!(
            s.add_rollup(SeqNo(2), &rollup("c")),
            ControlFlow::Break(false),
            "older than every listed rollup"
        );
        assert_eq!(
            s.add_rollup(SeqNo(6), &rollup("d")),
            ControlFlow::Continue(true)
        );
        assert_eq!(s.rollups.keys().map(|s| s.0).collect::<Vec<_>>(), [4, 6, 8]);
    }

    #[test]
    fn remove_rollups_below_keeps_the_rest_and_never_the_last() {
        let mut s = with_rollups(&[1, 4, 8]);
        assert_eq!(s.remove_rollups_below(SeqNo(5)), ControlFlow::Continue(2));
        assert_eq!(s.rollups.keys().map(|s| s.0).collect::<Vec<_>>(), [8]);
        assert_eq!(
            s.remove_rollups_below(SeqNo(5)),
            ControlFlow::Break(0),
            "nothing left below: no command"
        );
        assert_eq!(
            s.remove_rollups_below(SeqNo(100)),
            ControlFlow::Break(0),
            "the last rollup is never removed"
        );
        assert_eq!(s.rollups.len(), 1);
    }

    #[test]
    fn need_rollup_every_threshold_seqnos_with_a_fallback() {
        let s = with_rollups(&[1]);
        let due: Vec<u64> = (1..=60)
            .filter(|n| s.need_rollup(SeqNo(*n), 16).is_some())
            .collect();
        // 17 and 33 are exact multiples past the rollup at 1; past 1 + 3 * 16 every seqno is due.
        assert_eq!(
            due,
            [17, 33, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60]
        );
        assert_eq!(s.need_rollup(SeqNo(17), 0), None, "threshold 0: never");
        // A big state stretches the cadence: 20,000 bytes over 16 * 512 is 3 thresholds.
        let mut big = with_rollups(&[1]);
        big.rollups.insert(
            SeqNo(1),
            HollowRollup {
                key: "r1".into(),
                encoded_size_bytes: 20_000,
            },
        );
        let due: Vec<u64> = (1..=150)
            .filter(|n| big.need_rollup(SeqNo(*n), 16).is_some())
            .collect();
        assert_eq!(&due[..3], [49, 97, 145]);
        assert_eq!(StateCollections::new().need_rollup(SeqNo(17), 16), None);
    }

    #[test]
    fn maybe_gc_fires_on_writes_once_the_seqno_since_moved_far_enough() {
        let mut s = StateCollections::new();
        let _ = s.register_writer(&WriterId("w".into()), 1_000, 0);
        // seqno 3: threshold ceil(log2 3) = 2, seqno since 3 - 0 >= 2.
        assert_eq!(
            s.maybe_gc(false, SeqNo(3)),
            None,
            "not a write, and a writer exists"
        );
        assert_eq!(
            s.maybe_gc(true, SeqNo(3)),
            Some(GcReq {
                old_seqno_since: SeqNo(0),
                new_seqno_since: SeqNo(3)
            })
        );
        assert_eq!(s.last_gc_req, SeqNo(3));
        // seqno 5: threshold ceil(log2 5) = 3, but the seqno since moved only 2.
        assert_eq!(s.maybe_gc(true, SeqNo(5)), None);
        assert_eq!(s.last_gc_req, SeqNo(3), "unchanged when it does not fire");
        assert_eq!(
            s.maybe_gc(true, SeqNo(6)),
            Some(GcReq {
                old_seqno_since: SeqNo(3),
                new_seqno_since: SeqNo(6)
            })
        );
        // A reader holding seqno 7 holds the seqno since back, however far the shard goes.
        let r = crate::persist::state::LeasedReaderId("r".into());
        let _ = s.register_leased_reader(&r, SeqNo(7), 1_000, 0);
        assert_eq!(s.maybe_gc(true, SeqNo(100)), None, "7 - 6 < threshold 7");
        // Without writers, any command may fire it.
        let _ = s.expire_writer(&WriterId("w".into()));
        let _ = s.expire_leased_reader(&r);
        assert_eq!(
            s.maybe_gc(false, SeqNo(100)).map(|r| r.new_seqno_since),
            Some(SeqNo(100))
        );
    }
}
