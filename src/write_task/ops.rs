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

/// Sorts `updates` by row, sums the diffs of equal rows and drops zeros. On error `updates` is
/// left sorted but otherwise unchanged.
pub fn consolidate(updates: &mut Vec<(Row, Diff)>) -> Result<(), DiffOverflow> {
    // A stable sort keeps runs that are already sorted (desired, typically) cheap.
    updates.sort_by(|a, b| a.0.cmp(&b.0));
    // Check every sum first, so that an error leaves the input whole.
    let mut i = 0;
    while i < updates.len() {
        let mut sum: i128 = 0;
        let mut j = i;
        while j < updates.len() && updates[j].0 == updates[i].0 {
            sum += i128::from(updates[j].1);
            j += 1;
        }
        if Diff::try_from(sum).is_err() {
            return Err(DiffOverflow {
                row: updates[i].0.clone(),
                sum,
            });
        }
        i = j;
    }
    let mut out: Vec<(Row, Diff)> = Vec::with_capacity(updates.len());
    let mut pending: Option<(Row, i128)> = None;
    for (row, diff) in updates.drain(..) {
        match &mut pending {
            Some((r, sum)) if *r == row => *sum += i128::from(diff),
            _ => {
                if let Some((r, sum)) = pending.take() {
                    push_sum(&mut out, r, sum)?;
                }
                pending = Some((row, i128::from(diff)));
            }
        }
    }
    if let Some((r, sum)) = pending {
        push_sum(&mut out, r, sum)?;
    }
    *updates = out;
    Ok(())
}

fn push_sum(out: &mut Vec<(Row, Diff)>, row: Row, sum: i128) -> Result<(), DiffOverflow> {
    match Diff::try_from(sum) {
        Ok(0) => Ok(()),
        Ok(d) => {
            out.push((row, d));
            Ok(())
        }
        Err(_) => Err(DiffOverflow { row, sum }),
    }
}

/// Whether `updates` is consolidated: sorted by row, one entry per row, no zero diffs.
pub fn is_consolidated(updates: &[(Row, Diff)]) -> bool {
    updates.iter().all(|(_, d)| *d != 0) && updates.windows(2).all(|w| w[0].0 < w[1].0)
}

/// `a + sign * b` for consolidated `a` and `b` (`sign` is 1 or -1), consolidated: one linear
/// merge, no sort.
fn merge(
    a: &[(Row, Diff)],
    b: &[(Row, Diff)],
    sign: i128,
) -> Result<Vec<(Row, Diff)>, DiffOverflow> {
    use std::cmp::Ordering;
    debug_assert!(is_consolidated(a) && is_consolidated(b));
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    loop {
        let ord = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => x.0.cmp(&y.0),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => break,
        };
        match ord {
            Ordering::Less => {
                out.push(a[i].clone());
                i += 1;
            }
            Ordering::Greater => {
                push_sum(&mut out, b[j].0.clone(), sign * i128::from(b[j].1))?;
                j += 1;
            }
            Ordering::Equal => {
                let sum = i128::from(a[i].1) + sign * i128::from(b[j].1);
                push_sum(&mut out, a[i].0.clone(), sum)?;
                i += 1;
                j += 1;
            }
        }
    }
    Ok(out)
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
            let new_desired = merge(desired, &updates, 1)?;
            let new_to_write = merge(to_write, &updates, 1)?;
            *desired = new_desired;
            *to_write = new_to_write;
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
            let new_to_write = merge(to_write, &removed, -1)?;
            let mut keep = matches.iter().map(|m| !m);
            desired.retain(|_| keep.next().unwrap_or(true));
            *to_write = new_to_write;
            Applied {
                rows: removed.len() as u64,
            }
        }
    };
    debug_assert!(is_consolidated(desired) && is_consolidated(to_write));
    Ok(applied)
}

/// The re-sync delta `desired - snapshot`, consolidated. Both inputs must be consolidated.
pub fn derive_to_write(
    desired: &[(Row, Diff)],
    snapshot: &[(Row, Diff)],
) -> Result<Vec<(Row, Diff)>, DiffOverflow> {
    merge(desired, snapshot, -1)
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
}
