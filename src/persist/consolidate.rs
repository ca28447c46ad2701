//! Consolidation with checked arithmetic: sort updates by `(data, time)`, sum the diffs of equal
//! pairs, drop zeros. Differential's `consolidate_updates` adds diffs in place, which panics on
//! overflow in debug builds and wraps in release; a shard's diffs come from any writer, so here an
//! overflow is an error that names the update, and the input is left sorted but otherwise whole.

use super::codec::Diff;

/// The diffs of one `(data, time)` pair sum outside the 64-bit range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the diffs of one update at time {time} sum to {sum}, outside the 64-bit range")]
pub struct DiffOverflow {
    /// The time of the update whose diffs overflow.
    pub time: u64,
    /// Their exact sum.
    pub sum: i128,
}

/// Consolidates `updates` in place. See the module docs.
pub fn consolidate_checked<D: Ord>(updates: &mut Vec<(D, u64, Diff)>) -> Result<(), DiffOverflow> {
    updates.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let run_end = |v: &[(D, u64, Diff)], start: usize| -> (i128, usize) {
        let mut sum = 0i128;
        let mut end = start;
        while end < v.len() && v[end].0 == v[start].0 && v[end].1 == v[start].1 {
            sum += i128::from(v[end].2);
            end += 1;
        }
        (sum, end)
    };
    // First pass: every sum must fit, so that an error leaves the input whole.
    let mut i = 0;
    while i < updates.len() {
        let (sum, end) = run_end(updates, i);
        if Diff::try_from(sum).is_err() {
            return Err(DiffOverflow {
                time: updates[i].1,
                sum,
            });
        }
        i = end;
    }
    // Second pass: each run collapses into one slot (moved, never cloned); zeros vanish.
    let (mut read, mut write) = (0, 0);
    while read < updates.len() {
        let (sum, end) = run_end(updates, read);
        if sum != 0 {
            updates.swap(write, read);
            updates[write].2 = Diff::try_from(sum).expect("checked in the first pass");
            write += 1;
        }
        read = end;
    }
    updates.truncate(write);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consolidates_like_differential_and_reports_overflow() {
        let mut v = vec![
            ("b", 1, 2),
            ("a", 1, 1),
            ("b", 1, -2),
            ("a", 0, 3),
            ("a", 1, 4),
        ];
        consolidate_checked(&mut v).unwrap();
        assert_eq!(v, vec![("a", 0, 3), ("a", 1, 5)]);
        let mut over = vec![("k", 0, i64::MAX), ("k", 0, 1), ("j", 0, 1)];
        let err = consolidate_checked(&mut over).unwrap_err();
        assert_eq!(err.sum, i128::from(i64::MAX) + 1);
        assert_eq!(over.len(), 3, "the input stays whole");
        // Opposite extremes cancel without overflowing.
        let mut ok = vec![("k", 0, i64::MAX), ("k", 0, i64::MIN), ("k", 0, 1)];
        consolidate_checked(&mut ok).unwrap();
        assert!(ok.is_empty());
    }
}
