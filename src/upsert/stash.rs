//! The stash of source updates and the two ways of draining it.
//!
//! Source updates wait in the stash as `(time, key, Reverse(from_time), value)` until they may be
//! processed. A drain takes the *eligible* entries out:
//! - [`DrainStyle::ToUpper`]: `!(input_upper <= ts)` (the source has finished `ts`) and
//!   `!(persist_upper < ts)` (the output shard, hence the state, has caught up to `ts`);
//! - [`DrainStyle::AtTime`] (partial emission): `ts <= time` and `!(persist_upper < ts)`.
//!
//! Eligible entries with `ts < persist_upper` are **discarded**: a peer already wrote those
//! times, the state reflects only `persist_upper`, and the sink would refuse them anyway. The
//! rest are sorted by `(ts, key, Reverse(from_time), value)` and deduplicated per `(ts, key)`,
//! so the highest FromTime wins whatever the arrival order. Each surviving command reads its
//! key's cell (one `multi_get` for all), skips if a provisional value at `ts` has an order at
//! least its own, and emits the retraction of the previous value (provisional at `ts`, else
//! finalized) and the addition of the new one (none for a delete).
//!
//! Only `AtTime` writes the state (provisional values, one `multi_put`); `ToUpper` never does,
//! so `ToUpper` must not run twice at one persist upper (the second would read stale state),
//! while `AtTime` may: it remembers what it emitted through the provisional values.
//!
//! The [`Stash`] keeps its entries by time. Both eligibility rules depend only on an entry's
//! time and, for totally ordered times, hold for a prefix of the times (if `ts` is eligible, so
//! is every earlier time): a drain takes that prefix and never scans the rest, so a stash that
//! runs far ahead of the persist upper costs nothing per drain. (The original keeps a vector and
//! filters all of it; its stash stays short because its source is backpressured.)

use crate::vec_map::VecMap;
use std::cmp::Reverse;

use timely::order::TotalOrder;
use timely::progress::Antichain;
use timely::PartialOrder;

use super::consolidate::UpsertState;
use super::error::NonPositiveDiff;
use super::state::{PutValue, StateError, StateValue, UpsertStateBackend, UpsertValueAndSize};
use super::types::{UpsertKey, UpsertValue};
use crate::persist::codec::Diff;

/// One stashed source update.
pub type StashEntry<T, F> = (T, UpsertKey, Reverse<F>, Option<UpsertValue>);

/// Updates of the source input: `((key, value or delete, from_time), time, diff)`.
pub type SourceBatch<T, F> = Vec<((UpsertKey, Option<UpsertValue>, F), T, Diff)>;

type Staged<F> = (UpsertKey, Reverse<F>, Option<UpsertValue>);

/// Stashed source updates, by time. See the module docs.
#[derive(Debug, Clone)]
pub struct Stash<T, F> {
    by_time: VecMap<T, Vec<Staged<F>>>,
    // Invariant: the number of entries in `by_time`.
    len: usize,
}

impl<T: Ord + Clone, F> Default for Stash<T, F> {
    fn default() -> Self {
        Stash {
            by_time: VecMap::new(),
            len: 0,
        }
    }
}

impl<T: Ord + Clone, F> Stash<T, F> {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The least time held.
    pub fn min_time(&self) -> Option<&T> {
        self.by_time.first_key_value().map(|(t, _)| t)
    }

    /// Adds one entry.
    pub fn push(&mut self, (time, key, order, value): StashEntry<T, F>) {
        self.by_time
            .get_or_insert_with(time, Vec::new)
            .push((key, order, value));
        self.len += 1;
    }

    /// Every entry, by time.
    pub fn iter(&self) -> impl Iterator<Item = (&T, &Staged<F>)> {
        self.by_time
            .iter()
            .flat_map(|(t, entries)| entries.iter().map(move |e| (t, e)))
    }

    /// Removes and returns the entries of the leading times for which `eligible` holds (it must
    /// hold for a prefix of the times: see the module docs).
    fn take_prefix(&mut self, mut eligible: impl FnMut(&T) -> bool) -> Vec<StashEntry<T, F>> {
        let mut out = Vec::new();
        while let Some((time, _)) = self.by_time.first_key_value() {
            if !eligible(time) {
                break;
            }
            let Some((time, entries)) = self.by_time.pop_first() else {
                break;
            };
            self.len -= entries.len();
            out.extend(
                entries
                    .into_iter()
                    .map(|(key, order, value)| (time.clone(), key, order, value)),
            );
        }
        out
    }
}

/// Which entries a drain takes. See the module docs.
#[derive(Debug, Clone, Copy)]
pub enum DrainStyle<'a, T> {
    /// Complete times at the persist upper.
    ToUpper {
        /// The source input's upper.
        input_upper: &'a Antichain<T>,
        /// The persist input's upper.
        persist_upper: &'a Antichain<T>,
    },
    /// Times up to `time` (the input frontier) at the persist upper.
    AtTime {
        /// The partial drain time.
        time: T,
        /// The persist input's upper.
        persist_upper: &'a Antichain<T>,
    },
}

/// What one drain did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainStats {
    /// Entries eligible.
    pub eligible: u64,
    /// Of which discarded below the persist upper.
    pub discarded: u64,
    /// Of which superseded by a higher FromTime at the same time and key.
    pub superseded: u64,
    /// Commands skipped by order.
    pub skipped_by_order: u64,
    /// Output updates emitted.
    pub emitted: u64,
    /// Provisional values written.
    pub provisional_written: u64,
}

/// Stashes `data`, dropping updates before `resume_upper` while the input has not reached it.
/// Returns how many were dropped. A non-positive diff is an error (a source must only add).
pub fn stage_input<T, F>(
    stash: &mut Stash<T, F>,
    data: &mut SourceBatch<T, F>,
    input_upper: &Antichain<T>,
    resume_upper: &Antichain<T>,
) -> Result<u64, NonPositiveDiff>
where
    T: timely::progress::Timestamp,
{
    let before = data.len();
    if PartialOrder::less_equal(input_upper, resume_upper) {
        data.retain(|(_, ts, _)| resume_upper.less_equal(ts));
    }
    let dropped = (before - data.len()) as u64;
    if let Some((_, ts, diff)) = data.iter().find(|(_, _, d)| *d <= 0) {
        return Err(NonPositiveDiff {
            diff: *diff,
            time: format!("{ts:?}"),
        });
    }
    for ((key, value, order), time, _) in data.drain(..) {
        stash.push((time, key, Reverse(order), value));
    }
    Ok(dropped)
}

/// Drains the eligible entries of `stash` into `output` (see the module docs). `keys` and
/// `slots` are scratch space.
#[allow(clippy::too_many_arguments)]
pub fn drain_staged_input<T, F, S>(
    stash: &mut Stash<T, F>,
    keys: &mut Vec<UpsertKey>,
    slots: &mut Vec<UpsertValueAndSize<T, Option<F>>>,
    output: &mut Vec<(UpsertValue, T, Diff)>,
    style: DrainStyle<'_, T>,
    state: &mut UpsertState<S, T, Option<F>>,
) -> Result<DrainStats, StateError>
where
    T: timely::progress::Timestamp + TotalOrder,
    F: Ord + Clone,
    S: UpsertStateBackend<T, Option<F>>,
{
    let mut stats = DrainStats::default();
    let persist_upper = match style {
        DrainStyle::ToUpper { persist_upper, .. } | DrainStyle::AtTime { persist_upper, .. } => {
            persist_upper
        }
    };
    let eligible_now = |ts: &T| match &style {
        DrainStyle::ToUpper { input_upper, .. } => {
            !input_upper.less_equal(ts) && !persist_upper.less_than(ts)
        }
        DrainStyle::AtTime { time, .. } => ts <= time && !persist_upper.less_than(ts),
    };
    // Take the eligible entries out: a prefix of the stash's times.
    let mut eligible = stash.take_prefix(eligible_now);
    stats.eligible = eligible.len() as u64;
    eligible.retain(|(ts, ..)| persist_upper.less_equal(ts));
    stats.discarded = stats.eligible - eligible.len() as u64;
    if eligible.is_empty() {
        return Ok(stats);
    }
    crate::sort::sort_by(&mut eligible, |a, b| {
        (&a.0, &a.1, &a.2, &a.3).cmp(&(&b.0, &b.1, &b.2, &b.3))
    });
    let before = eligible.len();
    eligible.dedup_by(|later, first| later.0 == first.0 && later.1 == first.1);
    stats.superseded = (before - eligible.len()) as u64;

    keys.clear();
    keys.extend(eligible.iter().map(|e| e.1));
    crate::sort::sort(keys);
    keys.dedup();
    slots.clear();
    slots.resize_with(keys.len(), UpsertValueAndSize::default);
    state.multi_get(keys.iter().copied(), slots.iter_mut())?;

    let at_time = matches!(style, DrainStyle::AtTime { .. });
    for (ts, key, Reverse(from_time), value) in eligible {
        let slot = keys
            .binary_search(&key)
            .map_err(|_| StateError::Backend("a drained key is missing from multi_get".into()))?;
        let cell = &mut slots[slot].value;
        if let Some(c) = cell.as_mut() {
            c.ensure_decoded(&key)?;
        }
        let order = Some(from_time);
        let existing_order = match cell.as_ref() {
            Some(c) => c.provisional_order(&ts)?,
            None => None,
        };
        // A provisional value at `ts` with an order at least ours wins; a finalized value's
        // order (`None`) is below every source update.
        if existing_order.is_some_and(|o| *o >= order) {
            stats.skipped_by_order += 1;
            continue;
        }
        if let Some(c) = cell.as_ref() {
            if let Some(old) = c.provisional_value_ref(&ts)? {
                output.push((old.clone(), ts.clone(), -1));
                stats.emitted += 1;
            }
        }
        if at_time {
            let new = match cell.take() {
                Some(c) => c.into_provisional(value.clone(), ts.clone(), order)?,
                None => match value.clone() {
                    Some(v) => StateValue::new_provisional_value(v, ts.clone(), order),
                    None => StateValue::new_provisional_tombstone(ts.clone(), order),
                },
            };
            *cell = Some(new);
            stats.provisional_written += 1;
        }
        if let Some(v) = value {
            output.push((v, ts, 1));
            stats.emitted += 1;
        }
    }

    if at_time {
        put_drained(state, keys, slots)?;
    }
    Ok(stats)
}

/// Writes the provisional cells of a drain at a time back to the state: every cell of `keys`
/// (decoded by then: a consolidating one is an error), each with the metadata it was read with.
fn put_drained<T, F, S>(
    state: &mut UpsertState<S, T, Option<F>>,
    keys: &[UpsertKey],
    slots: &mut Vec<UpsertValueAndSize<T, Option<F>>>,
) -> Result<(), StateError>
where
    T: timely::progress::Timestamp + TotalOrder,
    F: Ord + Clone,
    S: UpsertStateBackend<T, Option<F>>,
{
    let mut puts = Vec::with_capacity(keys.len());
    for (key, slot) in keys.iter().zip(slots.drain(..)) {
        let value = match slot.value {
            Some(StateValue::Value(v)) => Some(v),
            Some(StateValue::Consolidating(_)) => {
                return Err(StateError::NotDecoded { key: key.short() })
            }
            None => None,
        };
        puts.push((
            *key,
            PutValue {
                value,
                previous_value_metadata: slot.metadata,
            },
        ));
    }
    state.multi_put(puts)
}
