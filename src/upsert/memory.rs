//! [`InMemoryHashMap`]: the in-memory [`UpsertStateBackend`].
//!
//! Keys are already stable hashes, so the map hashes them with a pass-through hasher (the first
//! eight bytes): nothing process-seeded, and no iteration order leaks out ([`cells`] sorts).
//!
//! [`cells`]: UpsertStateBackend::cells

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::state::{
    GetStats, PutStats, PutValue, StateError, StateValue, UpsertStateBackend, UpsertValueAndSize,
    ValueMetadata,
};
use super::types::UpsertKey;

/// Hashes an [`UpsertKey`] to its first eight bytes (it is a hash already).
#[derive(Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // `UpsertKey` hashes as one 16-byte array (with a length prefix first): keep the first
        // eight bytes of the longest write.
        if bytes.len() >= 8 {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[..8]);
            self.0 = u64::from_be_bytes(b);
        } else {
            for &b in bytes {
                self.0 = self.0.rotate_left(8) ^ u64::from(b);
            }
        }
    }
}

/// The in-memory backend. See the module docs.
#[derive(Debug, Clone)]
pub struct InMemoryHashMap<T, O> {
    map: HashMap<UpsertKey, StateValue<T, O>, BuildHasherDefault<KeyHasher>>,
}

impl<T, O> Default for InMemoryHashMap<T, O> {
    fn default() -> Self {
        InMemoryHashMap {
            map: HashMap::default(),
        }
    }
}

impl<T: Eq + Clone, O: Default + Clone> UpsertStateBackend<T, O> for InMemoryHashMap<T, O> {
    fn multi_put<P>(&mut self, puts: P) -> Result<PutStats, StateError>
    where
        P: IntoIterator<Item = (UpsertKey, PutValue<StateValue<T, O>>)>,
    {
        let mut stats = PutStats::default();
        for (key, put) in puts {
            let size = put.value.as_ref().map(StateValue::memory_size);
            stats.adjust(put.value.as_ref(), size, &put.previous_value_metadata);
            match put.value {
                Some(v) => {
                    self.map.insert(key, v);
                }
                None => {
                    self.map.remove(&key);
                }
            }
        }
        Ok(stats)
    }

    fn multi_get<'r, G, R>(&mut self, gets: G, results_out: R) -> Result<GetStats, StateError>
    where
        G: IntoIterator<Item = UpsertKey>,
        R: IntoIterator<Item = &'r mut UpsertValueAndSize<T, O>>,
        T: 'r,
        O: 'r,
    {
        let mut stats = GetStats::default();
        let mut out = results_out.into_iter();
        for key in gets {
            let slot = out.next().ok_or_else(|| {
                StateError::Backend("multi_get: fewer result slots than keys".into())
            })?;
            stats.processed_gets += 1;
            match self.map.get(&key) {
                Some(v) => {
                    let size = v.memory_size();
                    stats.returned_gets += 1;
                    stats.processed_gets_size += size;
                    slot.metadata = Some(ValueMetadata {
                        size,
                        is_tombstone: v.is_tombstone(),
                    });
                    slot.value = Some(v.clone());
                }
                None => {
                    slot.value = None;
                    slot.metadata = None;
                }
            }
        }
        Ok(stats)
    }

    fn cells(&self) -> Vec<(UpsertKey, &StateValue<T, O>)> {
        let mut cells: Vec<_> = self.map.iter().map(|(k, v)| (*k, v)).collect();
        crate::sort::sort_by_key(&mut cells, |(k, _)| *k);
        cells
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::codec::{Datum, Row};
    use crate::upsert::types::kv_row;

    #[test]
    fn puts_gets_and_deletes_with_stats() {
        let mut m = InMemoryHashMap::<u64, Option<u64>>::default();
        let k = |i: i64| UpsertKey::from_key(&Row::new([Datum::Int(i)]));
        let put = |v: Option<StateValue<u64, Option<u64>>>| PutValue {
            value: v,
            previous_value_metadata: None,
        };
        let stats = m
            .multi_put([
                (
                    k(1),
                    put(Some(StateValue::finalized_value(Ok(kv_row(1, "a")), None))),
                ),
                (k(2), put(Some(StateValue::tombstone(None)))),
            ])
            .unwrap();
        assert_eq!(
            (stats.inserts, stats.values_diff, stats.tombstones_diff),
            (2, 1, 1)
        );
        let mut out = vec![UpsertValueAndSize::default(); 3];
        let stats = m.multi_get([k(1), k(2), k(3)], out.iter_mut()).unwrap();
        assert_eq!((stats.processed_gets, stats.returned_gets), (3, 2));
        assert!(out[0].value.is_some() && out[2].value.is_none());
        assert_eq!(out[1].metadata.map(|m| m.is_tombstone), Some(true));
        let prev = out[0].metadata;
        let stats = m
            .multi_put([(
                k(1),
                PutValue {
                    value: None,
                    previous_value_metadata: prev,
                },
            )])
            .unwrap();
        assert_eq!((stats.deletes, stats.values_diff), (1, -1));
        assert_eq!(m.len(), 1);
        // Fewer slots than keys is an error, not a panic.
        let mut one = vec![UpsertValueAndSize::default(); 1];
        assert!(m.multi_get([k(1), k(2)], one.iter_mut()).is_err());
    }
}
