//! [`UpsertState`]: a backend plus the three operations the operator uses, with statistics.
//!
//! - [`UpsertState::consolidate_chunk`] folds feedback updates (from the persist input, in any
//!   order, possibly unconsolidated, possibly over provisional values) into the cells of their
//!   keys: one `multi_get` and one `multi_put` per chunk, the keys of a chunk consolidated in
//!   between ("upsert all the way down"). Cells that cancel to nothing are deleted.
//! - [`UpsertState::multi_get`] and [`UpsertState::multi_put`] read and write decoded cells for
//!   the drain.
//!
//! Once every chunk of a time is in, every touched cell must decode; the drain checks each cell
//! it reads ([`StateValue::ensure_decoded`]), and [`UpsertState::check_cells`] checks them all.

use super::state::{
    PutValue, StateError, StateValue, UpsertStateBackend, UpsertValueAndSize, Value,
};
use super::types::{UpsertKey, UpsertValue};
use crate::persist::codec::Diff;

/// Statistics of the feedback folded in so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConsolidateStats {
    /// Updates folded in.
    pub updates: u64,
    /// Of which with a positive diff.
    pub inserts: u64,
    /// Of which with a negative diff.
    pub deletes: u64,
    /// Sum of their diffs (the change in the number of present keys, once consolidated).
    pub values_diff: i64,
    /// Cells that held a provisional value when feedback arrived for their key.
    pub provisional_overwritten: u64,
    /// Chunks folded in.
    pub chunks: u64,
}

/// A backend with the operations of the operator. See the module docs.
pub struct UpsertState<S, T, O> {
    inner: S,
    stats: ConsolidateStats,
    snapshot_completed: bool,
    buf: Vec<u8>,
    scratch: Vec<(UpsertKey, UpsertValue, Diff)>,
    keys: Vec<UpsertKey>,
    slots: Vec<UpsertValueAndSize<T, O>>,
}

impl<S, T, O> UpsertState<S, T, O>
where
    S: UpsertStateBackend<T, O>,
    T: Eq + Clone,
    O: Default + Clone,
{
    /// Wraps a backend.
    pub fn new(inner: S) -> Self {
        UpsertState {
            inner,
            stats: ConsolidateStats::default(),
            snapshot_completed: false,
            buf: Vec::new(),
            scratch: Vec::new(),
            keys: Vec::new(),
            slots: Vec::new(),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &S {
        &self.inner
    }

    /// What has been folded in so far.
    pub fn stats(&self) -> ConsolidateStats {
        self.stats
    }

    /// Whether the rehydration snapshot has been completed.
    pub fn snapshot_completed(&self) -> bool {
        self.snapshot_completed
    }

    /// Folds `updates` into the state. `completed` says this is the last chunk of the
    /// rehydration snapshot (completing it twice is an error).
    pub fn consolidate_chunk<U>(&mut self, updates: U, completed: bool) -> Result<(), StateError>
    where
        U: IntoIterator<Item = (UpsertKey, UpsertValue, Diff)>,
    {
        if completed && self.snapshot_completed {
            return Err(StateError::Backend(
                "the rehydration snapshot was completed twice".into(),
            ));
        }
        self.scratch.clear();
        self.scratch.extend(updates);
        if !self.scratch.is_empty() {
            self.stats.chunks += 1;
            // Group by key; the order within a key does not matter to the accumulators.
            crate::sort::sort_by_key(&mut self.scratch, |u| u.0);
            self.keys.clear();
            self.keys.extend(self.scratch.iter().map(|(k, _, _)| *k));
            self.keys.dedup();
            self.slots.clear();
            self.slots
                .resize_with(self.keys.len(), UpsertValueAndSize::default);
            self.inner
                .multi_get(self.keys.iter().copied(), self.slots.iter_mut())?;
            let mut slot = 0;
            for (i, (key, value, diff)) in self.scratch.iter().enumerate() {
                if i > 0 && self.scratch[i - 1].0 != *key {
                    slot += 1;
                }
                self.stats.updates += 1;
                self.stats.values_diff += diff;
                if *diff > 0 {
                    self.stats.inserts += 1;
                } else if *diff < 0 {
                    self.stats.deletes += 1;
                }
                let cell = self.slots[slot].value.get_or_insert_with(Default::default);
                if matches!(cell, StateValue::Value(Value::ProvisionalValue { .. })) {
                    self.stats.provisional_overwritten += 1;
                }
                cell.merge_update(value, *diff, &mut self.buf);
            }
            let puts = self.keys.iter().zip(self.slots.drain(..)).map(|(k, s)| {
                // A cell that cancelled to nothing is deleted.
                let value = s.value.filter(|v| match v {
                    StateValue::Consolidating(c) => !c.is_zero(),
                    StateValue::Value(_) => true,
                });
                (
                    *k,
                    PutValue {
                        value,
                        previous_value_metadata: s.metadata,
                    },
                )
            });
            self.inner.multi_put(puts)?;
        }
        if completed {
            self.snapshot_completed = true;
        }
        Ok(())
    }

    /// Reads the cells of `keys` (unique) into `out`.
    pub fn multi_get<'r, G, R>(&mut self, keys: G, out: R) -> Result<(), StateError>
    where
        G: IntoIterator<Item = UpsertKey>,
        R: IntoIterator<Item = &'r mut UpsertValueAndSize<T, O>>,
        T: 'r,
        O: 'r,
    {
        self.inner.multi_get(keys, out).map(|_| ())
    }

    /// Writes decoded cells (`None` deletes).
    pub fn multi_put<P>(&mut self, puts: P) -> Result<(), StateError>
    where
        P: IntoIterator<Item = (UpsertKey, PutValue<Value<T, O>>)>,
    {
        self.inner
            .multi_put(puts.into_iter().map(|(k, p)| {
                (
                    k,
                    PutValue {
                        value: p.value.map(StateValue::Value),
                        previous_value_metadata: p.previous_value_metadata,
                    },
                )
            }))
            .map(|_| ())
    }

    /// Checks that every cell decodes; returns how many there are, or the first that does not.
    pub fn check_cells(&self) -> Result<usize, StateError> {
        let cells = self.inner.cells();
        for (key, cell) in &cells {
            cell.check_decodes(key)?;
        }
        Ok(cells.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::codec::{Datum, Row};
    use crate::upsert::memory::InMemoryHashMap;
    use crate::upsert::types::kv_row;

    type State = UpsertState<InMemoryHashMap<u64, Option<u64>>, u64, Option<u64>>;

    fn k(i: i64) -> UpsertKey {
        UpsertKey::from_key(&Row::new([Datum::Int(i)]))
    }

    fn get(state: &mut State, key: UpsertKey) -> Option<UpsertValue> {
        let mut out = vec![UpsertValueAndSize::default()];
        state.multi_get([key], out.iter_mut()).unwrap();
        let mut cell = out.pop().unwrap().value?;
        cell.ensure_decoded(&key).unwrap();
        cell.provisional_value_ref(&0).unwrap().cloned()
    }

    #[test]
    fn chunks_consolidate_across_calls_and_cancelled_keys_are_deleted() {
        let mut s = State::new(InMemoryHashMap::default());
        let (a, b) = (Ok(kv_row(1, "a")), Ok(kv_row(1, "b")));
        s.consolidate_chunk(
            [(k(1), b.clone(), -1), (k(2), Ok(kv_row(2, "x")), 1)],
            false,
        )
        .unwrap();
        s.consolidate_chunk([(k(1), a.clone(), 1), (k(1), b.clone(), 1)], true)
            .unwrap();
        assert_eq!(get(&mut s, k(1)), Some(a.clone()));
        assert_eq!(s.check_cells(), Ok(2));
        s.consolidate_chunk([(k(2), Ok(kv_row(2, "x")), -1)], false)
            .unwrap();
        assert_eq!(s.backend().len(), 1, "a cancelled key is deleted");
        assert!(s.consolidate_chunk(std::iter::empty(), true).is_err());
        assert_eq!(s.stats().values_diff, 1);
    }

    #[test]
    fn feedback_over_a_provisional_value_counts_and_lands_on_the_finalized_value() {
        let mut s = State::new(InMemoryHashMap::default());
        let (a, b) = (Ok(kv_row(1, "a")), Ok(kv_row(1, "b")));
        s.consolidate_chunk([(k(1), a.clone(), 1)], true).unwrap();
        let prov = StateValue::finalized_value(a.clone(), None)
            .into_provisional(Some(b.clone()), 3, Some(7))
            .unwrap();
        let StateValue::Value(v) = prov else {
            unreachable!()
        };
        s.multi_put([(
            k(1),
            PutValue {
                value: Some(v),
                previous_value_metadata: None,
            },
        )])
        .unwrap();
        s.consolidate_chunk([(k(1), a, -1), (k(1), b.clone(), 1)], false)
            .unwrap();
        assert_eq!(s.stats().provisional_overwritten, 1);
        assert_eq!(get(&mut s, k(1)), Some(b));
    }

    #[test]
    fn a_corrupt_chunk_is_found_by_check_cells() {
        let mut s = State::new(InMemoryHashMap::default());
        s.consolidate_chunk(
            [(k(1), Ok(kv_row(1, "a")), 1), (k(1), Ok(kv_row(1, "b")), 1)],
            true,
        )
        .unwrap();
        assert!(matches!(
            s.check_cells(),
            Err(StateError::InvalidState { .. })
        ));
    }
}
