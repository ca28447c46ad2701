//! Unit tests of the handles' transitions: each called directly on a `StateCollections`, no storage.

use super::*;
use crate::persist::state::{
    BatchPart, CompareAndAppendBreak, CriticalReaderId, CriticalReaderState, Description,
    HollowBatch, HollowRollup, IdempotencyToken, LeasedReaderId, ReaderExpired, Schema, SchemaId,
    State, StateCollections, WriterId, INLINE_WRITES_TOTAL_MAX_BYTES,
};
use crate::persist::ShardId;

use crate::persist::state::trace::tests::{batch, f};

fn w(id: &str) -> WriterId {
    WriterId(id.into())
}

fn tok(id: &str) -> IdempotencyToken {
    IdempotencyToken(id.into())
}

fn caa(
    s: &mut StateCollections,
    b: &HollowBatch,
    writer: &str,
    token: &str,
) -> ControlFlow<CompareAndAppendBreak, ()> {
    s.compare_and_append(b, &w(writer), 0, 1_000, &tok(token))
}

#[test]
fn compare_and_append_ordinary_and_mismatch() {
    let mut s = StateCollections::new();
    assert_eq!(caa(&mut s, &batch(0, 5, 2), "w1", "t1"), Continue(()));
    assert_eq!(s.trace.upper(), &f(5));
    assert_eq!(s.writers[&w("w1")].most_recent_write_upper, f(5));
    // A batch whose lower is not the upper.
    assert_eq!(
        caa(&mut s, &batch(3, 8, 1), "w2", "t2"),
        Break(CompareAndAppendBreak::Upper {
            shard_upper: f(5),
            writer_upper: f(0)
        })
    );
    // Contiguous append.
    assert_eq!(caa(&mut s, &batch(5, 9, 1), "w2", "t3"), Continue(()));
    assert_eq!(s.trace.batches().len(), 2);
    s.trace.validate().unwrap();
}

#[test]
fn compare_and_append_errors() {
    let mut s = StateCollections::new();
    let mut inverted = batch(0, 5, 0);
    inverted.desc = Description::new(f(5), f(3));
    assert!(matches!(
        caa(&mut s, &inverted, "w", "t"),
        Break(CompareAndAppendBreak::InvalidUsage(
            InvalidUsage::InvalidBounds { .. }
        ))
    ));
    let mut empty_with_data = batch(0, 5, 1);
    empty_with_data.desc = Description::new(f(0), f(0));
    assert!(matches!(
        caa(&mut s, &empty_with_data, "w", "t"),
        Break(CompareAndAppendBreak::InvalidUsage(
            InvalidUsage::InvalidEmptyTimeInterval { .. }
        ))
    ));
    assert_eq!(s.trace.upper(), &f(0), "errors change nothing visible");
}

#[test]
fn empty_interval_is_a_heartbeat_and_tokens_are_idempotent() {
    let mut s = StateCollections::new();
    // [0, 0) with no data: heartbeat, trace unchanged.
    assert_eq!(caa(&mut s, &batch(0, 0, 0), "w", "t0"), Continue(()));
    assert!(s.trace.batches().is_empty());
    assert_eq!(caa(&mut s, &batch(0, 4, 1), "w", "t1"), Continue(()));
    // The same token again: already committed.
    assert_eq!(
        caa(&mut s, &batch(0, 4, 1), "w", "t1"),
        Break(CompareAndAppendBreak::AlreadyCommitted)
    );
    // An empty batch advancing the upper is pushed (it carries progress).
    assert_eq!(caa(&mut s, &batch(4, 10, 0), "w", "t2"), Continue(()));
    assert_eq!(s.trace.upper(), &f(10));
    // Finishing the shard: upper = [].
    let mut fin = batch(10, 10, 0);
    fin.desc.upper = Antichain::new();
    assert_eq!(caa(&mut s, &fin, "w", "t3"), Continue(()));
    assert!(s.trace.upper().is_empty());
    assert!(matches!(
        caa(&mut s, &batch(10, 11, 0), "w", "t4"),
        Break(CompareAndAppendBreak::Upper { shard_upper, .. }) if shard_upper.is_empty()
    ));
}

#[test]
fn inline_backpressure() {
    let mut s = StateCollections::new();
    let mut big = batch(0, 1, 1);
    big.parts = vec![BatchPart::Inline {
        encoded: vec![0; INLINE_WRITES_TOTAL_MAX_BYTES as usize],
    }];
    assert_eq!(caa(&mut s, &big, "w", "t1"), Continue(()));
    let mut more = batch(1, 2, 1);
    more.parts = vec![BatchPart::Inline {
        encoded: vec![0; 1],
    }];
    assert_eq!(
        caa(&mut s, &more, "w", "t2"),
        Break(CompareAndAppendBreak::InlineBackpressure)
    );
}

#[test]
fn since_is_the_meet_of_readers_and_recomputed_on_expiry() {
    let mut s = StateCollections::new();
    let (r1, r2) = (LeasedReaderId("r1".into()), LeasedReaderId("r2".into()));
    let _ = s.register_leased_reader(&r1, SeqNo(1), 100, 0);
    let _ = s.register_leased_reader(&r2, SeqNo(1), 100, 0);
    assert_eq!(s.downgrade_since(&r1, SeqNo(2), &f(10), 1), Continue(f(10)));
    assert_eq!(s.trace.since(), &f(0), "r2 still holds 0");
    assert_eq!(s.downgrade_since(&r2, SeqNo(2), &f(5), 1), Continue(f(5)));
    assert_eq!(s.trace.since(), &f(5));
    // A downgrade backwards changes nothing but still commits.
    assert_eq!(s.downgrade_since(&r1, SeqNo(2), &f(3), 2), Continue(f(10)));
    // Expiring r2 lets the since rise to r1's.
    assert_eq!(s.expire_leased_reader(&r2), Continue(true));
    assert_eq!(s.trace.since(), &f(10));
    // Lease expiry does the same.
    let c = CriticalReaderId("c".into());
    let _ = s.register_critical_reader(&c, 0);
    let (readers, _) = s.expire_at(1_000);
    assert_eq!(readers, vec![r1.clone()]);
    assert_eq!(s.trace.since(), &f(10), "the critical reader holds 10");
    assert_eq!(
        s.downgrade_since(&r1, SeqNo(3), &f(20), 3),
        Break(ReaderExpired)
    );
}

#[test]
fn critical_reader_is_fenced_by_its_opaque_token() {
    let mut s = StateCollections::new();
    let c = CriticalReaderId("c".into());
    assert_eq!(
        s.register_critical_reader(&c, 7),
        Continue(CriticalReaderState {
            since: f(0),
            opaque: 7
        })
    );
    assert_eq!(
        s.compare_and_downgrade_since(&c, 7, 8, &f(4)),
        Continue(Ok(f(4)))
    );
    assert_eq!(
        s.compare_and_downgrade_since(&c, 7, 9, &f(6)),
        Continue(Err((8, f(4)))),
        "the old token is fenced"
    );
    assert_eq!(
        s.compare_and_downgrade_since(&c, 8, 9, &f(2)),
        Continue(Ok(f(4))),
        "a lower since returns the larger one"
    );
    assert_eq!(s.trace.since(), &f(4));
}

#[test]
fn schemas_register_once() {
    let mut s = StateCollections::new();
    let a = Schema {
        key_codec: "String".into(),
        val_codec: "()".into(),
    };
    let b = Schema {
        key_codec: "Row".into(),
        val_codec: "()".into(),
    };
    assert_eq!(s.register_schema(&a), Continue(SchemaId(0)));
    assert_eq!(s.register_schema(&a), Continue(SchemaId(0)));
    assert!(matches!(
        s.register_schema(&b),
        Break(InvalidUsage::CodecMismatch { .. })
    ));
}

#[test]
fn snapshot_and_listen_batches() {
    let mut s = StateCollections::new();
    let _ = caa(&mut s, &batch(0, 5, 1), "w", "t1");
    let _ = caa(&mut s, &batch(5, 9, 1), "w", "t2");
    assert_eq!(s.snapshot(SeqNo(3), &f(4)).unwrap().len(), 1);
    assert_eq!(s.snapshot(SeqNo(3), &f(5)).unwrap().len(), 2);
    assert_eq!(
        s.snapshot(SeqNo(3), &f(9)),
        Err(SnapshotErr::AsOfNotYetAvailable(SeqNo(3), f(9)))
    );
    let r = LeasedReaderId("r".into());
    let _ = s.register_leased_reader(&r, SeqNo(1), 100, 0);
    let _ = s.downgrade_since(&r, SeqNo(1), &f(3), 0);
    assert_eq!(
        s.snapshot(SeqNo(3), &f(2)),
        Err(SnapshotErr::AsOfHistoricalDistinctionsLost(f(3)))
    );
    assert_eq!(s.next_listen_batch(&f(5)).unwrap().desc.lower, f(5));
    assert_eq!(s.next_listen_batch(&f(9)), None);
}

#[test]
fn clone_apply_breaks_leave_nothing_and_validate_catches_regressions() {
    let mut state = State::uninitialized(ShardId("s".into()));
    state.collections.rollups.insert(
        SeqNo(1),
        HollowRollup {
            key: "r".into(),
            encoded_size_bytes: 1,
        },
    );
    state.seqno = SeqNo(1);
    let out: ControlFlow<&str, ((), State)> = state.clone_apply(5, &mut |_, _| Break("no"));
    assert_eq!(out, Break("no"));
    let Continue(((), next)) = state.clone_apply(5, &mut |_, c: &mut StateCollections| {
        c.compare_and_append(&batch(0, 3, 1), &w("w"), 5, 10, &tok("t"))
    }) else {
        panic!("expected Continue")
    };
    next.validate(Some(&state)).unwrap();
    assert_eq!(next.seqno, SeqNo(2));
    assert!(state.validate(Some(&next)).is_err(), "going back is caught");
}
