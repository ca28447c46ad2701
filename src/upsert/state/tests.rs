//! Unit tests of the cells: consolidation in any order, decoding, and the errors of cells that
//! do not decode.

use super::*;
use crate::persist::codec::Datum;
use crate::upsert::types::kv_row;

type Cell = StateValue<u64, Option<u64>>;

fn key() -> UpsertKey {
    UpsertKey::from_key(&Row::new([Datum::Int(1)]))
}

fn decoded(cell: &mut Cell) -> Option<UpsertValue> {
    cell.ensure_decoded(&key()).unwrap();
    cell.provisional_value_ref(&0).unwrap().cloned()
}

#[test]
fn consolidating_values_in_any_order() {
    let (a, b, c) = (Ok(kv_row(1, "a")), Ok(kv_row(1, "bb")), Ok(kv_row(1, "")));
    // A history a, then b, then c: (a,+1) (a,-1) (b,+1) (b,-1) (c,+1), in every order.
    let updates = [(&a, 1), (&a, -1), (&b, 1), (&b, -1), (&c, 1)];
    let mut perm: Vec<usize> = (0..updates.len()).collect();
    let mut seen = 0;
    // Heap's algorithm over all 120 orders.
    let mut stack = vec![0usize; perm.len()];
    let mut check = |perm: &[usize]| {
        let mut cell = Cell::default();
        let mut buf = Vec::new();
        for &i in perm {
            cell.merge_update(updates[i].0, updates[i].1, &mut buf);
        }
        assert_eq!(decoded(&mut cell), Some(c.clone()), "order {perm:?}");
        seen += 1;
    };
    check(&perm);
    let mut i = 0;
    while i < perm.len() {
        if stack[i] < i {
            let j = if i % 2 == 0 { 0 } else { stack[i] };
            perm.swap(j, i);
            check(&perm);
            stack[i] += 1;
            i = 0;
        } else {
            stack[i] = 0;
            i += 1;
        }
    }
    assert_eq!(seen, 120);
}

#[test]
fn a_deleted_key_decodes_to_a_tombstone_and_a_longer_retraction_is_fine() {
    let mut cell = Cell::default();
    let mut buf = Vec::new();
    let short = Ok(Row::default());
    let long = Ok(kv_row(1, "a longer value"));
    cell.merge_update(&short, 1, &mut buf);
    cell.merge_update(&long, -1, &mut buf);
    cell.merge_update(&long, 1, &mut buf);
    assert_eq!(decoded(&mut cell), Some(short.clone()));
    let mut gone = Cell::default();
    assert!(!gone.merge_update(&long, 1, &mut buf));
    assert!(gone.merge_update(&long, -1, &mut buf));
    gone.ensure_decoded(&key()).unwrap();
    assert!(gone.is_tombstone());
}

#[test]
fn cells_that_do_not_decode_are_errors() {
    let mut buf = Vec::new();
    let (a, b) = (Ok(kv_row(1, "a")), Ok(kv_row(1, "b")));
    // Two values at once: diff_sum 2.
    let mut two = Cell::default();
    two.merge_update(&a, 1, &mut buf);
    two.merge_update(&b, 1, &mut buf);
    let e = two.ensure_decoded(&key()).unwrap_err();
    assert!(
        matches!(e, StateError::InvalidState { ref reason, .. } if reason.contains("diff_sum is 2")),
        "{e}"
    );
    // A retraction of a value that was never there: diff_sum 0 but non-zero bytes.
    let mut ghost = Cell::default();
    ghost.merge_update(&a, 1, &mut buf);
    ghost.merge_update(&b, -1, &mut buf);
    assert!(ghost.ensure_decoded(&key()).is_err());
    // diff_sum 1, but the bytes are two values xored: the checksum catches it.
    let mut mixed = Cell::default();
    mixed.merge_update(&a, 1, &mut buf);
    mixed.merge_update(&b, 1, &mut buf);
    mixed.merge_update(&Ok(kv_row(1, "c")), -1, &mut buf);
    assert!(mixed.check_decodes(&key()).is_err());
    assert!(mixed.provisional_value_ref(&0).is_err(), "not decoded yet");
}

#[test]
fn provisional_values_are_overwritten_by_feedback() {
    let mut buf = Vec::new();
    let (old, new) = (Ok(kv_row(1, "old")), Ok(kv_row(1, "new")));
    let mut cell = Cell::finalized_value(old.clone(), None);
    let cell2 = cell
        .clone()
        .into_provisional(Some(new.clone()), 5, Some(9))
        .unwrap();
    // At time 5 the provisional value and its order count; at other times the finalized.
    assert_eq!(cell2.provisional_value_ref(&5).unwrap(), Some(&new));
    assert_eq!(cell2.provisional_order(&5).unwrap(), Some(&Some(9)));
    assert_eq!(cell2.provisional_value_ref(&6).unwrap(), Some(&old));
    assert_eq!(cell2.provisional_order(&6).unwrap(), Some(&None));
    // Feedback for time 5 (old -1, new +1) lands on the finalized value only.
    cell = cell2;
    cell.merge_update(&old, -1, &mut buf);
    cell.merge_update(&new, 1, &mut buf);
    assert_eq!(decoded(&mut cell), Some(new.clone()));
    assert!(!cell.is_provisional());
    // A provisional tombstone over nothing, then feedback inserting a value.
    let mut tomb = Cell::new_provisional_tombstone(3, Some(1));
    assert_eq!(tomb.provisional_value_ref(&3).unwrap(), None);
    tomb.merge_update(&new, 1, &mut buf);
    assert_eq!(decoded(&mut tomb), Some(new));
}
