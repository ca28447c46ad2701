//! The pure core of the write task: write operations, consolidation, and the re-sync delta.
//!
//! Nothing here does I/O, reads a clock or awaits: every function takes collections and returns
//! collections, so each step of the task can be unit-tested and shown as before/after.
//!
//! Collections are `Vec<(Row, Diff)>`. A *consolidated* collection is sorted by row, has one entry
//! per row and no zero diffs. Consolidation here sums in `i128` and reports a diff that does not
//! fit an `i64` as a [`DiffOverflow`] error: diffs come from callers (and from other writers of
//! the shard), and bad input must be an error, never a panic (differential's
//! `consolidate_updates` adds in place and would panic on overflow in debug builds).

use std::fmt;

use crate::persist::codec::{Codec, Diff, Row};
use crate::persist::consolidate::consolidate_by;

/// A change to a differential collection, sent to its write task.
pub enum StorageWriteOp {
    /// Adds `updates` (diffs may be negative) to the desired collection.
    Append {
        /// `(row, diff)` pairs.
        updates: Vec<(Row, Diff)>,
    },
    /// Removes every row the filter accepts from the desired collection, whatever its
    /// multiplicity.
    Delete {
        /// Which rows to remove.
        filter: Box<dyn Fn(&Row) -> bool>,
    },
}

impl StorageWriteOp {
    /// Whether this is an append of nothing (callers drop those before sending, as the original
    /// does; the task accepts them anyway).
    pub fn is_empty_append(&self) -> bool {
        matches!(self, StorageWriteOp::Append { updates } if updates.is_empty())
    }

    /// "append" or "delete", for events.
    pub fn kind(&self) -> &'static str {
        match self {
            StorageWriteOp::Append { .. } => "append",
            StorageWriteOp::Delete { .. } => "delete",
        }
    }
}

impl fmt::Debug for StorageWriteOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageWriteOp::Append { updates } => f
                .debug_struct("Append")
                .field("updates", &updates.len())
                .finish(),
            StorageWriteOp::Delete { .. } => f.debug_struct("Delete").finish_non_exhaustive(),
        }
    }
}

/// A sum of diffs for one row left the range of [`Diff`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the diffs of row {row} sum to {sum}, outside the 64-bit range")]
pub struct DiffOverflow {
    /// The row.
    pub row: Row,
    /// The exact sum.
    pub sum: i128,
}

/// Sorts `updates` by row, sums the diffs of equal rows and drops zeros, in place (the crate's
/// one checked consolidation, [`consolidate_by`]). On error `updates` is left sorted but
/// otherwise unchanged.
pub fn consolidate(updates: &mut Vec<(Row, Diff)>) -> Result<(), DiffOverflow> {
    if is_consolidated(updates) {
        // The common case for snapshots, which persist consolidates already: nothing to do.
        return Ok(());
    }
    consolidate_by(updates, |a, b| a.0.cmp(&b.0), |u| &mut u.1).map_err(|o| DiffOverflow {
        row: updates[o.index].0.clone(),
        sum: o.sum,
    })
}

/// Whether `updates` is consolidated: sorted by row, one entry per row, no zero diffs.
pub fn is_consolidated(updates: &[(Row, Diff)]) -> bool {
    updates.iter().all(|(_, d)| *d != 0) && updates.windows(2).all(|w| w[0].0 < w[1].0)
}

fn narrow(row: &Row, sum: i128) -> Result<Diff, DiffOverflow> {
    Diff::try_from(sum).map_err(|_| DiffOverflow {
        row: row.clone(),
        sum,
    })
}

/// Checks that `a + sign * b` fits for every row of `b` (both consolidated), without changing
/// anything: `O(|b| log |a|)`.
fn check_add(a: &[(Row, Diff)], b: &[(Row, Diff)], sign: i128) -> Result<(), DiffOverflow> {
    for (row, d) in b {
        let base = a
            .binary_search_by(|(r, _)| r.cmp(row))
            .map_or(0, |i| i128::from(a[i].1));
        narrow(row, base + sign * i128::from(*d))?;
    }
    Ok(())
}

/// Above this many updates, [`add_into`] merges into a new vector rather than editing in place.
const IN_PLACE_MAX: usize = 64;

/// `a += sign * b` for consolidated `a` and `b`, keeping `a` consolidated. On error `a` is
/// unchanged. Rows of `a` are moved, never cloned: a small `b` (a command's few rows) edits `a` in
/// place by binary search; a large one merges into a new vector in one pass.
fn add_into(a: &mut Vec<(Row, Diff)>, b: &[(Row, Diff)], sign: i128) -> Result<(), DiffOverflow> {
    use std::cmp::Ordering;
    debug_assert!(is_consolidated(a) && is_consolidated(b));
    check_add(a, b, sign)?;
    if b.len() <= IN_PLACE_MAX {
        for (row, d) in b {
            let delta = sign * i128::from(*d);
            match a.binary_search_by(|(r, _)| r.cmp(row)) {
                Ok(i) => {
                    let sum = i128::from(a[i].1) + delta;
                    if sum == 0 {
                        a.remove(i);
                    } else {
                        a[i].1 = narrow(row, sum)?;
                    }
                }
                Err(i) => a.insert(i, (row.clone(), narrow(row, delta)?)),
            }
        }
        return Ok(());
    }
    let old = std::mem::take(a);
    let mut out = Vec::with_capacity(old.len() + b.len());
    let mut b = b.iter().peekable();
    for (row, d) in old {
        while let Some((brow, bd)) = b.next_if(|(brow, _)| *brow < row) {
            out.push((brow.clone(), narrow(brow, sign * i128::from(*bd))?));
        }
        match b.peek() {
            Some((brow, bd)) if brow.cmp(&row) == Ordering::Equal => {
                let sum = i128::from(d) + sign * i128::from(*bd);
                b.next();
                if sum != 0 {
                    out.push((row, narrow(brow, sum)?));
                }
            }
            _ => out.push((row, d)),
        }
    }
    for (brow, bd) in b {
        out.push((brow.clone(), narrow(brow, sign * i128::from(*bd))?));
    }
    *a = out;
    Ok(())
}

/// What applying one op did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// Updates the op carried (append) or rows it removed (delete).
    pub rows: u64,
}

/// Applies `op` to the consolidated `desired` and `to_write`, keeping both consolidated.
///
/// Append adds its updates to both; Delete takes every row the filter accepts out of `desired`
/// (calling the filter once per row) and adds its negation to `to_write`. On error (a diff
/// overflow) neither collection changes.
pub fn apply_write_op(
    desired: &mut Vec<(Row, Diff)>,
    to_write: &mut Vec<(Row, Diff)>,
    op: StorageWriteOp,
) -> Result<Applied, DiffOverflow> {
    debug_assert!(is_consolidated(desired), "desired is kept consolidated");
    debug_assert!(is_consolidated(to_write), "to_write is kept consolidated");
    let applied = match op {
        StorageWriteOp::Append { mut updates } => {
            let rows = updates.len() as u64;
            consolidate(&mut updates)?;
            // Check both before changing either.
            check_add(desired, &updates, 1)?;
            check_add(to_write, &updates, 1)?;
            add_into(desired, &updates, 1)?;
            add_into(to_write, &updates, 1)?;
            Applied { rows }
        }
        StorageWriteOp::Delete { filter } => {
            let matches: Vec<bool> = desired.iter().map(|(r, _)| filter(r)).collect();
            let removed: Vec<(Row, Diff)> = desired
                .iter()
                .zip(&matches)
                .filter(|(_, m)| **m)
                .map(|(u, _)| u.clone())
                .collect();
            add_into(to_write, &removed, -1)?;
            let mut keep = matches.iter().map(|m| !m);
            desired.retain(|_| keep.next().unwrap_or(true));
            Applied {
                rows: removed.len() as u64,
            }
        }
    };
    debug_assert!(is_consolidated(desired) && is_consolidated(to_write));
    Ok(applied)
}

/// The re-sync delta `desired - snapshot`, consolidated. Both inputs must be consolidated. One
/// linear pass; only rows that differ are cloned.
pub fn derive_to_write(
    desired: &[(Row, Diff)],
    snapshot: &[(Row, Diff)],
) -> Result<Vec<(Row, Diff)>, DiffOverflow> {
    use std::cmp::Ordering;
    debug_assert!(is_consolidated(desired) && is_consolidated(snapshot));
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    loop {
        let ord = match (desired.get(i), snapshot.get(j)) {
            (Some(x), Some(y)) => x.0.cmp(&y.0),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => break,
        };
        match ord {
            Ordering::Less => {
                out.push(desired[i].clone());
                i += 1;
            }
            Ordering::Greater => {
                let (row, d) = &snapshot[j];
                out.push((row.clone(), narrow(row, -i128::from(*d))?));
                j += 1;
            }
            Ordering::Equal => {
                let (row, d) = &desired[i];
                let sum = i128::from(*d) - i128::from(snapshot[j].1);
                if sum != 0 {
                    out.push((row.clone(), narrow(row, sum)?));
                }
                i += 1;
                j += 1;
            }
        }
    }
    Ok(out)
}

/// A stable 64-bit fingerprint (FNV-1a over the row encoding and the diff) of a consolidated
/// collection: equal collections have equal fingerprints on every platform, so events can say
/// "the shard now equals desired" without carrying the rows.
pub fn fingerprint(updates: &[(Row, Diff)]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    let mut buf = Vec::new();
    for (row, diff) in updates {
        buf.clear();
        row.encode(&mut buf);
        eat(&(buf.len() as u64).to_le_bytes());
        eat(&buf);
        eat(&diff.to_le_bytes());
    }
    eat(&(updates.len() as u64).to_le_bytes());
    hash
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::codec::Datum;

    fn r(i: i64) -> Row {
        Row::new([Datum::Int(i)])
    }

    #[test]
    fn consolidate_sums_sorts_and_drops_zeros() {
        let mut v = vec![(r(3), 1), (r(1), 2), (r(3), -1), (r(2), 5), (r(1), 1)];
        consolidate(&mut v).unwrap();
        assert_eq!(v, vec![(r(1), 3), (r(2), 5)]);
        assert!(is_consolidated(&v));
    }

    #[test]
    fn overflow_is_an_error_and_leaves_collections_whole() {
        let mut v = vec![(r(1), Diff::MAX), (r(1), 1)];
        let err = consolidate(&mut v).unwrap_err();
        assert_eq!(err.sum, i128::from(Diff::MAX) + 1);
        assert_eq!(v.len(), 2);
        // Partial sums may leave the range while the total does not.
        let mut v = vec![(r(1), Diff::MAX), (r(1), 1), (r(1), -2)];
        consolidate(&mut v).unwrap();
        assert_eq!(v, vec![(r(1), Diff::MAX - 1)]);

        let mut desired = vec![(r(1), Diff::MAX)];
        let mut to_write = vec![(r(1), 1)];
        let op = StorageWriteOp::Append {
            updates: vec![(r(1), 1)],
        };
        assert!(apply_write_op(&mut desired, &mut to_write, op).is_err());
        assert_eq!(desired, vec![(r(1), Diff::MAX)]);
        assert_eq!(to_write, vec![(r(1), 1)]);

        let mut desired = vec![(r(1), Diff::MAX)];
        let mut to_write = vec![(r(1), Diff::MIN)];
        let op = StorageWriteOp::Delete {
            filter: Box::new(|_| true),
        };
        assert!(apply_write_op(&mut desired, &mut to_write, op).is_err());
        assert_eq!(desired, vec![(r(1), Diff::MAX)]);
        assert_eq!(to_write, vec![(r(1), Diff::MIN)]);
        assert!(derive_to_write(&[], &[(r(1), Diff::MIN)]).is_err());
    }

    #[test]
    fn append_and_delete_move_desired_and_to_write_together() {
        let (mut desired, mut to_write) = (Vec::new(), Vec::new());
        let op = StorageWriteOp::Append {
            updates: vec![(r(1), 1), (r(2), 2), (r(3), 1), (r(2), -1)],
        };
        assert_eq!(
            apply_write_op(&mut desired, &mut to_write, op).unwrap(),
            Applied { rows: 4 }
        );
        assert_eq!(desired, vec![(r(1), 1), (r(2), 1), (r(3), 1)]);
        assert_eq!(to_write, desired);
        to_write.clear(); // as after a commit
        let op = StorageWriteOp::Delete {
            filter: Box::new(|row| row.0[0] != Datum::Int(2)),
        };
        assert_eq!(
            apply_write_op(&mut desired, &mut to_write, op).unwrap(),
            Applied { rows: 2 }
        );
        assert_eq!(desired, vec![(r(2), 1)]);
        assert_eq!(to_write, vec![(r(1), -1), (r(3), -1)]);
        let op = StorageWriteOp::Append {
            updates: vec![(r(1), 1)],
        };
        apply_write_op(&mut desired, &mut to_write, op).unwrap();
        assert_eq!(
            to_write,
            vec![(r(3), -1)],
            "a re-append cancels its retraction"
        );
    }

    #[test]
    fn derive_to_write_is_desired_minus_snapshot() {
        let desired = vec![(r(1), 1), (r(2), 2), (r(4), 1)];
        let snapshot = vec![(r(0), 1), (r(2), 1), (r(4), 1), (r(5), -1)];
        let to_write = derive_to_write(&desired, &snapshot).unwrap();
        assert_eq!(to_write, vec![(r(0), -1), (r(1), 1), (r(2), 1), (r(5), 1)]);
        assert!(derive_to_write(&desired, &desired).unwrap().is_empty());
    }

    #[test]
    fn fingerprints_tell_collections_apart() {
        let a = vec![(r(1), 1), (r(2), 1)];
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
        assert_ne!(fingerprint(&a), fingerprint(&[(r(1), 1)]));
        assert_ne!(fingerprint(&a), fingerprint(&[(r(1), 1), (r(2), 2)]));
        assert_ne!(fingerprint(&[]), fingerprint(&[(Row::default(), 1)]));
        // Pinned, so a change of the encoding or the hash shows up.
        assert_eq!(fingerprint(&[]), 0xa8c7_f832_281a_39c5);
    }

    #[test]
    fn random_ops_match_a_map_model() {
        // Goal: the in-place and the merging paths of `add_into`, `consolidate` and
        // `derive_to_write` agree with a BTreeMap. Method: random appends (small and large),
        // deletes and re-syncs over a small key space, checked after every op.
        use std::collections::BTreeMap;
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (mut desired, mut to_write) = (Vec::new(), Vec::new());
        let mut model: BTreeMap<Row, i64> = BTreeMap::new();
        let mut pending: BTreeMap<Row, i64> = BTreeMap::new();
        for _ in 0..2_000 {
            match next(10) {
                0 => {
                    let m = 2 + next(3) as i64;
                    let op = StorageWriteOp::Delete {
                        filter: Box::new(
                            move |row| matches!(row.0[0], Datum::Int(k) if k % m == 0),
                        ),
                    };
                    apply_write_op(&mut desired, &mut to_write, op).unwrap();
                    model.retain(|row, d| {
                        let gone = matches!(row.0[0], Datum::Int(k) if k % m == 0);
                        if gone {
                            *pending.entry(row.clone()).or_default() -= *d;
                        }
                        !gone
                    });
                }
                1 => {
                    // A re-sync against an arbitrary "snapshot".
                    let mut snapshot: Vec<(Row, Diff)> = (0..next(40))
                        .map(|_| (r(next(200) as i64), next(5) as i64 - 2))
                        .collect();
                    consolidate(&mut snapshot).unwrap();
                    to_write = derive_to_write(&desired, &snapshot).unwrap();
                    pending = model.clone();
                    for (row, d) in &snapshot {
                        *pending.entry(row.clone()).or_default() -= d;
                    }
                }
                _ => {
                    let n = if next(4) == 0 {
                        70 + next(200)
                    } else {
                        next(6)
                    };
                    let updates: Vec<(Row, Diff)> = (0..n)
                        .map(|_| (r(next(200) as i64), next(7) as i64 - 3))
                        .collect();
                    for (row, d) in &updates {
                        *model.entry(row.clone()).or_default() += d;
                        *pending.entry(row.clone()).or_default() += d;
                    }
                    apply_write_op(
                        &mut desired,
                        &mut to_write,
                        StorageWriteOp::Append { updates },
                    )
                    .unwrap();
                }
            }
            model.retain(|_, d| *d != 0);
            pending.retain(|_, d| *d != 0);
            let want: Vec<(Row, Diff)> = model.iter().map(|(r, d)| (r.clone(), *d)).collect();
            let want_pending: Vec<(Row, Diff)> =
                pending.iter().map(|(r, d)| (r.clone(), *d)).collect();
            assert_eq!(desired, want);
            assert_eq!(to_write, want_pending);
        }
    }
}
