//! State versions: the [`StateDiff`] from seqno N-1 to N, field by field, as stored in one
//! Consensus version, and the two halves of its contract: [`StateDiff::from_diff`] computes it
//! from two states, and [`StateDiff::apply`] rebuilds the second from the first.
//!
//! Invariants: `apply(from_diff(old, new))` on `old` gives exactly `new`; a diff applies only to
//! the state at its `seqno_from`, and a stored diff's `seqno_to` is `seqno_from + 1`; applying
//! checks that each removal and replacement finds what it expects (a mismatch is an error
//! naming the field, never a panic).

use std::rc::Rc;

use serde::{Deserialize, Serialize};
use timely::progress::Antichain;

use super::super::codec::Timestamp;
use super::super::state::trace::Trace;
use super::super::state::{
    CriticalReaderId, CriticalReaderState, HollowBatch, HollowRollup, LeasedReaderId,
    LeasedReaderState, Schema, SchemaId, State, WriterId, WriterState,
};
use super::super::ShardId;
use super::{decode_framed, encode_framed, DecodeError, MAGIC_DIFF};
use crate::location::SeqNo;
use crate::vec_map::VecMap;

/// Encodes a state version.
pub fn encode_diff(diff: &StateDiff) -> Vec<u8> {
    let out = encode_framed(MAGIC_DIFF, diff);
    super::super::stats::count(|s| {
        s.diff_encodes += 1;
        s.diff_encode_bytes += out.len() as u64;
    });
    out
}

/// Decodes a state version.
pub fn decode_diff(bytes: &[u8]) -> Result<StateDiff, DecodeError> {
    super::super::stats::count(|s| {
        s.diff_decodes += 1;
        s.diff_decode_bytes += bytes.len() as u64;
    });
    let diff: StateDiff = decode_framed("state version", MAGIC_DIFF, bytes)?;
    // Checked: a stored `seqno_from` of `u64::MAX` (or past Consensus's maximum) has no next.
    if diff.seqno_from.checked_next() != Some(diff.seqno_to) {
        return Err(DecodeError {
            what: "state version",
            message: format!("goes from {} to {}", diff.seqno_from, diff.seqno_to),
        });
    }
    Ok(diff)
}

/// The changes to one keyed collection: `(key, None)` removes, `(key, Some(v))` inserts or
/// replaces.
pub type MapDiff<K, V> = Vec<(K, Option<V>)>;

/// The changes from one state version to the next, field by field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateDiff {
    /// The shard.
    pub shard_id: ShardId,
    /// The version this diff applies to.
    pub seqno_from: SeqNo,
    /// The version it makes (`seqno_from + 1`).
    pub seqno_to: SeqNo,
    /// The new walltime.
    pub walltime_ms: u64,
    /// The newest rollup at `seqno_to`: where a reader starts.
    pub latest_rollup: Option<(SeqNo, HollowRollup)>,
    /// Schema changes.
    pub schemas: MapDiff<SchemaId, Schema>,
    /// The new `last_gc_req`, if it changed.
    pub last_gc_req: Option<SeqNo>,
    /// Rollup changes.
    pub rollups: MapDiff<SeqNo, HollowRollup>,
    /// Leased reader changes.
    pub leased_readers: MapDiff<LeasedReaderId, LeasedReaderState>,
    /// Critical reader changes.
    pub critical_readers: MapDiff<CriticalReaderId, CriticalReaderState>,
    /// Writer changes.
    pub writers: MapDiff<WriterId, WriterState>,
    /// The new since, if it changed.
    pub since: Option<Antichain<Timestamp>>,
    /// The new upper, if it changed.
    pub upper: Option<Antichain<Timestamp>>,
    /// Batch changes, keyed by each batch's lower.
    pub batches: MapDiff<Timestamp, Rc<HollowBatch>>,
}

fn diff_map<K: Ord + Clone, V: PartialEq + Clone>(
    old: &VecMap<K, V>,
    new: &VecMap<K, V>,
) -> MapDiff<K, V> {
    let mut out = Vec::new();
    for k in old.keys() {
        if !new.contains_key(k) {
            out.push((k.clone(), None));
        }
    }
    for (k, v) in new {
        if old.get(k) != Some(v) {
            out.push((k.clone(), Some(v.clone())));
        }
    }
    out
}

fn apply_map<K: Ord + Clone + std::fmt::Debug, V: Clone>(
    map: &mut VecMap<K, V>,
    diff: &MapDiff<K, V>,
    field: &str,
) -> Result<(), String> {
    for (k, v) in diff {
        match v {
            Some(v) => {
                map.insert(k.clone(), v.clone());
            }
            None => {
                if map.remove(k).is_none() {
                    return Err(format!("{field}: removes {k:?}, which is absent"));
                }
            }
        }
    }
    Ok(())
}

/// The batch changes between two traces, by a merge walk over their (sorted) batches: only the
/// batches that differ are cloned, so a command that appends one batch costs O(batches) compares
/// and one clone.
fn diff_batches(
    old: &[Rc<HollowBatch>],
    new: &[Rc<HollowBatch>],
) -> MapDiff<Timestamp, Rc<HollowBatch>> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        let ko = old.get(i).map(|b| batch_key(b));
        let kn = new.get(j).map(|b| batch_key(b));
        match (ko, kn) {
            (Some(a), Some(b)) if a == b => {
                // Unchanged batches are shared between versions: a pointer check suffices.
                if !Rc::ptr_eq(&old[i], &new[j]) && old[i] != new[j] {
                    out.push((b, Some(new[j].clone())));
                }
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a < b => {
                out.push((a, None));
                i += 1;
            }
            (Some(a), None) => {
                out.push((a, None));
                i += 1;
            }
            (_, Some(b)) => {
                out.push((b, Some(new[j].clone())));
                j += 1;
            }
            (None, None) => unreachable!("the loop condition"),
        }
    }
    // Canonical order, as `diff_map` makes it: removals first, then insertions, each by key.
    let (mut removed, mut inserted): (Vec<_>, Vec<_>) =
        out.into_iter().partition(|(_, v)| v.is_none());
    crate::sort::sort_by_key(&mut removed, |(k, _)| *k);
    crate::sort::sort_by_key(&mut inserted, |(k, _)| *k);
    removed.extend(inserted);
    removed
}

fn batch_key(b: &HollowBatch) -> Timestamp {
    // A batch in the trace never has an empty lower (its interval is not empty).
    b.desc
        .lower
        .elements()
        .first()
        .copied()
        .unwrap_or(Timestamp::MAX)
}

/// Applies batch changes to a trace's batches, which are sorted by lower (the trace's own
/// invariant), with the same meaning as [`apply_map`] on a map keyed by lower: a binary search
/// per change instead of rebuilding a map, so a command that appends one batch costs one search.
fn apply_batches(
    batches: &[Rc<HollowBatch>],
    diff: &MapDiff<Timestamp, Rc<HollowBatch>>,
) -> Result<Vec<Rc<HollowBatch>>, String> {
    let mut out = batches.to_vec();
    for (key, change) in diff {
        let found = out.binary_search_by_key(key, |b| batch_key(b));
        match (found, change) {
            (Ok(i), Some(b)) => out[i] = Rc::clone(b),
            (Err(i), Some(b)) => out.insert(i, Rc::clone(b)),
            (Ok(i), None) => {
                out.remove(i);
            }
            (Err(_), None) => return Err(format!("batches: removes {key:?}, which is absent")),
        }
    }
    Ok(out)
}

impl StateDiff {
    /// The Blob keys this diff starts referring to: the parts of the batches it inserts and the
    /// rollups it lists.
    pub fn inserted_blobs(&self) -> Vec<String> {
        let parts = self
            .batches
            .iter()
            .filter_map(|(_, b)| b.as_ref())
            .flat_map(|b| b.part_keys().map(String::from));
        let rollups = self
            .rollups
            .iter()
            .filter_map(|(_, r)| r.as_ref().map(|r| r.key.clone()));
        parts.chain(rollups).collect()
    }

    /// The diff that turns `old` into `new` (`new.seqno == old.seqno + 1`).
    pub fn from_diff(old: &State, new: &State) -> StateDiff {
        assert_eq!(new.seqno, old.seqno.next(), "diffs go one seqno at a time");
        let (o, n) = (&old.collections, &new.collections);
        StateDiff {
            shard_id: new.shard_id.clone(),
            seqno_from: old.seqno,
            seqno_to: new.seqno,
            walltime_ms: new.walltime_ms,
            latest_rollup: new.latest_rollup().map(|(s, r)| (s, r.clone())),
            schemas: diff_map(&o.schemas, &n.schemas),
            last_gc_req: (o.last_gc_req != n.last_gc_req).then_some(n.last_gc_req),
            rollups: diff_map(&o.rollups, &n.rollups),
            leased_readers: diff_map(&o.leased_readers, &n.leased_readers),
            critical_readers: diff_map(&o.critical_readers, &n.critical_readers),
            writers: diff_map(&o.writers, &n.writers),
            since: (o.trace.since() != n.trace.since()).then(|| n.trace.since().clone()),
            upper: (o.trace.upper() != n.trace.upper()).then(|| n.trace.upper().clone()),
            batches: diff_batches(o.trace.batches(), n.trace.batches()),
        }
    }

    /// Applies this diff to `state`, which must be at `seqno_from`. On error `state` is unchanged.
    pub fn apply(&self, state: &mut State) -> Result<(), String> {
        if state.shard_id != self.shard_id {
            return Err(format!(
                "diff of shard {} applied to shard {}",
                self.shard_id, state.shard_id
            ));
        }
        if state.seqno != self.seqno_from {
            return Err(format!(
                "diff from {} applied to state at {}",
                self.seqno_from, state.seqno
            ));
        }
        let mut next = state.clone();
        let c = &mut next.collections;
        next.seqno = self.seqno_to;
        next.walltime_ms = self.walltime_ms;
        apply_map(&mut c.schemas, &self.schemas, "schemas")?;
        if let Some(s) = self.last_gc_req {
            c.last_gc_req = s;
        }
        apply_map(&mut c.rollups, &self.rollups, "rollups")?;
        apply_map(
            &mut c.leased_readers,
            &self.leased_readers,
            "leased readers",
        )?;
        apply_map(
            &mut c.critical_readers,
            &self.critical_readers,
            "critical readers",
        )?;
        apply_map(&mut c.writers, &self.writers, "writers")?;
        let batches = apply_batches(c.trace.batches(), &self.batches)?;
        let since = self
            .since
            .clone()
            .unwrap_or_else(|| c.trace.since().clone());
        let upper = self
            .upper
            .clone()
            .unwrap_or_else(|| c.trace.upper().clone());
        // `from_parts` checks the trace; the rest of the state is checked once, here.
        c.trace = Trace::from_parts(since, upper, batches)?;
        next.validate_given_trace(Some(state))?;
        *state = next;
        Ok(())
    }
}
