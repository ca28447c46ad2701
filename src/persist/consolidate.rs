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

/// The diffs of the run starting at `index` (after sorting) sum to `sum`, outside the 64-bit
/// range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunOverflow {
    /// The first update of the run, in the sorted input.
    pub index: usize,
    /// The exact sum.
    pub sum: i128,
}

/// The one checked consolidation, for any shape of update: sorts `updates` by `cmp`, sums the
/// diffs (reached through `diff`) of each run of equal updates, and drops the runs that sum to
/// zero. If a run's sum does not fit in a [`Diff`], nothing is summed: the input is left sorted
/// but whole, and the error names the run.
///
/// Persist's updates use [`consolidate_checked`]; a collection of `(row, diff)` pairs uses
/// `consolidate_by(v, |a, b| a.0.cmp(&b.0), |u| &mut u.1)`.
pub fn consolidate_by<U>(
    updates: &mut Vec<U>,
    cmp: impl Fn(&U, &U) -> std::cmp::Ordering,
    diff: impl Fn(&mut U) -> &mut Diff,
) -> Result<(), RunOverflow> {
    crate::sort::sort_by(updates, &cmp);
    consolidate_sorted_by(updates, cmp, diff)
}

/// [`consolidate_by`] of updates already sorted by `cmp` (runs of equal updates adjacent): sums
/// each run's diffs and drops the runs that sum to zero, in one linear pass (two, counting the
/// overflow check). Unsorted input is not an error, but equal updates that are not adjacent stay
/// apart.
pub fn consolidate_sorted_by<U>(
    updates: &mut Vec<U>,
    cmp: impl Fn(&U, &U) -> std::cmp::Ordering,
    diff: impl Fn(&mut U) -> &mut Diff,
) -> Result<(), RunOverflow> {
    let run_end = |v: &mut [U], start: usize| -> (i128, usize) {
        let mut sum = 0i128;
        let mut end = start;
        while end < v.len() && cmp(&v[end], &v[start]).is_eq() {
            sum += i128::from(*diff(&mut v[end]));
            end += 1;
        }
        (sum, end)
    };
    // First pass: every sum must fit, so that an error leaves the input whole.
    let mut i = 0;
    while i < updates.len() {
        let (sum, end) = run_end(updates, i);
        if Diff::try_from(sum).is_err() {
            return Err(RunOverflow { index: i, sum });
        }
        i = end;
    }
    // Second pass: each run collapses into one slot (moved, never cloned); zeros vanish.
    let (mut read, mut write) = (0, 0);
    while read < updates.len() {
        let (sum, end) = run_end(updates, read);
        if let (false, Ok(sum)) = (sum == 0, Diff::try_from(sum)) {
            updates.swap(write, read);
            *diff(&mut updates[write]) = sum;
            write += 1;
        }
        read = end;
    }
    updates.truncate(write);
    Ok(())
}

/// [`consolidate_checked`] of updates already sorted by `(data, time)`: no sort, one linear pass.
pub fn consolidate_sorted_checked<D: Ord>(
    updates: &mut Vec<(D, u64, Diff)>,
) -> Result<(), DiffOverflow> {
    consolidate_sorted_by(updates, |a, b| (&a.0, a.1).cmp(&(&b.0, b.1)), |u| &mut u.2).map_err(
        |o| DiffOverflow {
            time: updates[o.index].1,
            sum: o.sum,
        },
    )
}

/// Consolidates persist's `(data, time, diff)` updates in place. See the module docs.
pub fn consolidate_checked<D: Ord>(updates: &mut Vec<(D, u64, Diff)>) -> Result<(), DiffOverflow> {
    consolidate_by(updates, |a, b| (&a.0, a.1).cmp(&(&b.0, b.1)), |u| &mut u.2).map_err(|o| {
        DiffOverflow {
            time: updates[o.index].1,
            sum: o.sum,
        }
    })
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
        // The same core for pairs without times.
        let mut pairs = vec![("y", 2), ("x", 1), ("y", -2), ("x", 1)];
        consolidate_by(&mut pairs, |a, b| a.0.cmp(b.0), |u| &mut u.1).unwrap();
        assert_eq!(pairs, vec![("x", 2)]);
        let mut over = vec![("x", i64::MIN), ("x", -1)];
        let err = consolidate_by(&mut over, |a, b| a.0.cmp(b.0), |u| &mut u.1).unwrap_err();
        assert_eq!(
            err,
            RunOverflow {
                index: 0,
                sum: i128::from(i64::MIN) - 1
            }
        );
    }
}
