//! The crate's one sort. `slice::sort_by` is compiled anew for every element type and
//! comparator it is called with, and each copy of the standard sorts is several kilobytes of
//! wasm; with a dozen element types that was ~60 KB of the page's `.wasm`. Here the sort
//! algorithm is compiled once, over indices ([`permutation`]), and only the small step that
//! moves elements into place ([`apply`]) is generic.
//!
//! Semantics are `slice::sort_by`'s: stable (equal elements keep their order), `O(n log n)`
//! comparisons, never panics. The price is one `Vec<usize>` of scratch and an indirect call per
//! comparison; none of the crate's sorts is on a path where that matters.

use std::cmp::Ordering;

/// Sorts `v` stably by `cmp`.
pub fn sort_by<T>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> Ordering) {
    if v.len() < 2 {
        return;
    }
    let order = permutation(v.len(), &mut |a, b| cmp(&v[a], &v[b]));
    apply(v, order);
}

/// Sorts `v` stably by the key `key` extracts.
pub fn sort_by_key<T, K: Ord>(v: &mut [T], mut key: impl FnMut(&T) -> K) {
    sort_by(v, |a, b| key(a).cmp(&key(b)));
}

/// Sorts `v` stably in its `Ord` order.
pub fn sort<T: Ord>(v: &mut [T]) {
    sort_by(v, T::cmp);
}

/// The order of `0..len` that sorts the elements `cmp` compares by index: entry `i` is the index
/// of the element that belongs at position `i`. Not generic: compiled once.
fn permutation(len: usize, cmp: &mut dyn FnMut(usize, usize) -> Ordering) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    // The one std sort of the crate (clippy.toml disallows them elsewhere): here it is
    // compiled once, for `usize` indices and one `dyn` comparator.
    #[allow(clippy::disallowed_methods)]
    order.sort_by(|&a, &b| cmp(a, b));
    order
}

/// Moves `v[order[i]]` to position `i` for every `i`, by following each cycle of the
/// permutation with swaps; a finished position is marked by `order[i] == i`.
fn apply<T>(v: &mut [T], mut order: Vec<usize>) {
    for start in 0..v.len() {
        let mut at = start;
        while order[at] != start {
            let from = order[at];
            v.swap(at, from);
            order[at] = at;
            at = from;
        }
        order[at] = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_like_the_standard_stable_sort() {
        let mut state = 7u64;
        for len in 0..200usize {
            // Pairs whose first field repeats, so stability is visible in the second.
            let items: Vec<(u8, usize)> = (0..len)
                .map(|i| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                    ((state >> 59) as u8, i)
                })
                .collect();
            let mut ours = items.clone();
            sort_by_key(&mut ours, |p| p.0);
            let mut std = items.clone();
            // The reference this sort must match.
            #[allow(clippy::disallowed_methods)]
            std.sort_by_key(|p| p.0);
            assert_eq!(ours, std, "length {len}");
            let mut full = items;
            sort(&mut full);
            assert!(full.windows(2).all(|w| w[0] <= w[1]));
        }
    }

    #[test]
    fn sorts_owned_values_without_losing_any() {
        let mut v: Vec<String> = ["pear", "apple", "fig", "apple", "kiwi"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        sort(&mut v);
        assert_eq!(v, ["apple", "apple", "fig", "kiwi", "pear"]);
    }
}
