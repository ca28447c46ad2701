//! [`VecMap`]: an ordered map kept as one sorted `Vec` of `(key, value)` pairs, for the small
//! maps of a shard's state (its writers, readers, schemas and rollups: a handful of entries each),
//! of the simulator (its tasks, ready set and timers: tens to hundreds), of in-memory Consensus
//! (one key per shard) and of what a machine saw each recent seqno insert (up to 4096, in seqno
//! order, so an insert appends and evicting the oldest is one `memmove`).
//!
//! It has the parts of `BTreeMap`'s API those maps use, with the same semantics: iteration in key
//! order, `insert` replaces and returns the old value, `Index` panics on a missing key (tests
//! only). It serializes as a map, so its encodings (bincode, JSON) are byte for byte a
//! `BTreeMap`'s, and deserializing keeps the last value of a repeated key as a `BTreeMap` does.
//!
//! Why not `BTreeMap`: each `BTreeMap<K, V>` compiles its node code (insert with splits, remove
//! with merges and steals) anew for every key and value type, 5-7 KB of wasm each; a sorted `Vec`
//! needs a binary search and `Vec::insert`/`Vec::remove`. Lookups and updates are `O(log n)` and
//! `O(n)`, which for maps of a few entries is no worse.
//!
//! Invariant: the keys in `entries` are strictly increasing.

use std::borrow::Borrow;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, Index, RangeBounds};

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, Serializer};

/// See the module docs.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct VecMap<K, V> {
    entries: Vec<(K, V)>,
}

/// An iterator over a [`VecMap`]'s entries, in key order.
pub type Iter<'a, K, V> =
    std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        VecMap {
            entries: Vec::new(),
        }
    }
}

impl<K: Ord, V> VecMap<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// `Ok(index)` of `key`, or `Err(index)` where it would go.
    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.entries.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    /// The value of `key`.
    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &self.entries[i].1)
    }

    /// The value of `key`, to change.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &mut self.entries[i].1)
    }

    /// Whether `key` has a value.
    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    /// The map of `entries` in any order, a repeated key keeping its last value (as inserting
    /// them one by one would): `O(n)` if the keys are already strictly increasing, one stable
    /// sort and one pass (`O(n log n)`) if not; never the `O(n²)` of `n` inserts.
    fn from_entries(mut entries: Vec<(K, V)>) -> Self {
        if !entries.windows(2).all(|w| w[0].0 < w[1].0) {
            // Stable: entries of one key keep their order of arrival, the last one last.
            crate::sort::sort_by(&mut entries, |a, b| a.0.cmp(&b.0));
            // `later` is the entry after `kept`: a repeated key moves its value into the kept one.
            entries.dedup_by(|later, kept| {
                let same = later.0 == kept.0;
                if same {
                    std::mem::swap(&mut later.1, &mut kept.1);
                }
                same
            });
        }
        VecMap { entries }
    }

    /// Sets the value of `key`, returning the one it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    /// The value of `key`, inserting `make()` first if it has none (`BTreeMap`'s
    /// `entry(key).or_insert_with(make)`).
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(&key) {
            Ok(i) => i,
            Err(i) => {
                self.entries.insert(i, (key, make()));
                i
            }
        };
        &mut self.entries[i].1
    }

    /// Removes `key`, returning its value.
    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| self.entries.remove(i).1)
    }

    /// Keeps only the entries for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.entries.retain_mut(|(k, v)| keep(k, v));
    }

    /// The entries, in key order.
    pub fn iter(&self) -> Iter<'_, K, V> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    /// The entries with their values to change, in key order.
    pub fn iter_mut(
        &mut self,
    ) -> impl DoubleEndedIterator<Item = (&K, &mut V)> + ExactSizeIterator {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator {
        self.entries.iter().map(|(k, _)| k)
    }

    /// The values, in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator {
        self.entries.iter().map(|(_, v)| v)
    }

    /// The values to change, in key order.
    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut V> + ExactSizeIterator {
        self.entries.iter_mut().map(|(_, v)| v)
    }

    /// The entry with the smallest key.
    pub fn first_key_value(&self) -> Option<(&K, &V)> {
        self.entries.first().map(|(k, v)| (k, v))
    }

    /// Removes and returns the entry with the smallest key.
    pub fn pop_first(&mut self) -> Option<(K, V)> {
        (!self.entries.is_empty()).then(|| self.entries.remove(0))
    }

    /// The entry with the largest key.
    pub fn last_key_value(&self) -> Option<(&K, &V)> {
        self.entries.last().map(|(k, v)| (k, v))
    }

    /// The entries whose keys are in `range`, in key order.
    pub fn range(&self, range: impl RangeBounds<K>) -> Iter<'_, K, V> {
        let start = match range.start_bound() {
            Bound::Included(s) => self.entries.partition_point(|(k, _)| k < s),
            Bound::Excluded(s) => self.entries.partition_point(|(k, _)| k <= s),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(e) => self.entries.partition_point(|(k, _)| k <= e),
            Bound::Excluded(e) => self.entries.partition_point(|(k, _)| k < e),
            Bound::Unbounded => self.entries.len(),
        };
        self.entries[start..end.max(start)]
            .iter()
            .map(|(k, v)| (k, v))
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for VecMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = VecMap::new();
        map.extend(iter);
        map
    }
}

impl<K: Ord, V> Extend<(K, V)> for VecMap<K, V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

impl<'a, K: Ord, V> IntoIterator for &'a VecMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K, V> IntoIterator for VecMap<K, V> {
    type Item = (K, V);
    type IntoIter = std::vec::IntoIter<(K, V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<K: Ord, V> Index<&K> for VecMap<K, V> {
    type Output = V;
    fn index(&self, key: &K) -> &V {
        self.get(key).expect("no entry for the key in VecMap")
    }
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for VecMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.entries.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

impl<K: Serialize, V: Serialize> Serialize for VecMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.entries.iter().map(|(k, v)| (k, v)))
    }
}

impl<'de, K: Ord + Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for VecMap<K, V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor<K, V>(PhantomData<(K, V)>);
        impl<'de, K: Ord + Deserialize<'de>, V: Deserialize<'de>> Visitor<'de> for MapVisitor<K, V> {
            type Value = VecMap<K, V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                // Read every entry as it comes (the size hint is the reader's, so it is
                // capped), then restore the invariant: nothing to do for keys in order (what
                // our own encodings hold), one stable sort and one pass otherwise.
                let cap = access.size_hint().unwrap_or(0).min(4096);
                let mut entries: Vec<(K, V)> = Vec::with_capacity(cap);
                while let Some(entry) = access.next_entry()? {
                    entries.push(entry);
                }
                Ok(VecMap::from_entries(entries))
            }
        }
        deserializer.deserialize_map(MapVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::VecMap;

    #[test]
    fn behaves_like_a_btree_map() {
        let mut ours = VecMap::new();
        let mut std = BTreeMap::new();
        let mut state = 11u64;
        for _ in 0..2_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = (state >> 60) as u8;
            let value = (state >> 32) as u32;
            match (state >> 58) & 3 {
                0 | 1 => assert_eq!(ours.insert(key, value), std.insert(key, value)),
                2 => assert_eq!(ours.remove(&key), std.remove(&key)),
                _ => {
                    *ours.get_or_insert_with(key, || value) += 1;
                    *std.entry(key).or_insert_with(|| value) += 1;
                }
            }
            assert!(ours.iter().eq(std.iter()));
            assert_eq!(ours.len(), std.len());
            assert_eq!(ours.get(&3), std.get(&3));
            assert!(ours.range(4..=9).eq(std.range(4..=9)));
            assert!(ours.range(..5).rev().eq(std.range(..5).rev()));
            assert_eq!(ours.last_key_value(), std.last_key_value());
        }
        while let Some(first) = std.pop_first() {
            assert_eq!(ours.pop_first(), Some(first));
        }
        assert!(ours.is_empty());
    }

    #[test]
    fn encodes_exactly_as_a_btree_map() {
        let std: BTreeMap<String, u64> = [("b".into(), 2), ("a".into(), 1)].into_iter().collect();
        let ours: VecMap<String, u64> = std.clone().into_iter().collect();
        assert_eq!(
            bincode::serialize(&ours).unwrap(),
            bincode::serialize(&std).unwrap()
        );
        assert_eq!(
            serde_json::to_string(&ours).unwrap(),
            serde_json::to_string(&std).unwrap()
        );
        assert_eq!(format!("{ours:?}"), format!("{std:?}"));
        // A repeated key keeps its last value, as a BTreeMap does.
        let back: VecMap<String, u64> = serde_json::from_str(r#"{"b":2,"a":1,"b":3}"#).unwrap();
        let std_back: BTreeMap<String, u64> =
            serde_json::from_str(r#"{"b":2,"a":1,"b":3}"#).unwrap();
        assert!(back.iter().eq(std_back.iter()));
    }

    #[test]
    fn deserializes_any_order_of_many_keys_as_a_btree_map_does() {
        // Unsorted, with repeats: 20,000 entries over 5,000 keys, in a scrambled order.
        let mut json = String::from("{");
        let mut state = 7u64;
        for i in 0..20_000u64 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = (state >> 33) % 5_000;
            if i > 0 {
                json.push(',');
            }
            json.push_str(&format!("\"{key}\":{i}"));
        }
        json.push('}');
        let ours: VecMap<u64, u64> = serde_json::from_str(&json).unwrap();
        let std: BTreeMap<u64, u64> = serde_json::from_str(&json).unwrap();
        assert!(ours.iter().eq(std.iter()));
        assert!(ours.entries.windows(2).all(|w| w[0].0 < w[1].0));
        // In order, through bincode as the state encodings use it.
        let bytes = bincode::serialize(&std).unwrap();
        let back: VecMap<u64, u64> = bincode::deserialize(&bytes).unwrap();
        assert!(back.iter().eq(std.iter()));
    }
}
