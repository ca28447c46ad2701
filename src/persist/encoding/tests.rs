//! The encodings' unit tests: round trips, canonical bytes, and arbitrary or mutated bytes that
//! must decode to an error, never a panic.

use super::*;
use crate::location::SeqNo;
use crate::persist::state::{
    BatchPart, Description, IdempotencyToken, LeasedReaderId, StateCollections,
};
use crate::persist::state::{HollowBatch, HollowRollup, State, WriterId};
use crate::persist::ShardId;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;
use std::ops::ControlFlow::Continue;
use std::rc::Rc;
use timely::progress::Antichain;

fn f(t: u64) -> Antichain<u64> {
    Antichain::from_elem(t)
}

/// Parts are written with byte strings and read without the re-encoding check: the bytes are
/// the generic encoding's, and anything that decodes is canonical.
#[test]
fn parts_are_the_generic_encoding_and_every_decodable_payload_is_canonical() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(5);
    for n in 0..40usize {
        let updates: Vec<EncodedUpdate> = (0..n)
            .map(|i| {
                let len = (rng.next_u64() % 9) as usize;
                let k: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                (
                    (k, vec![i as u8; i % 3]),
                    rng.next_u64(),
                    rng.next_u64() as i64,
                )
            })
            .collect();
        let bytes = encode_part(&updates);
        assert_eq!(bytes, encode_framed(MAGIC_PART, &updates));
        assert_eq!(decode_part(&bytes).unwrap(), updates);
        // Flip one payload byte and fix the checksum: whatever still decodes re-encodes to
        // exactly those bytes.
        if bytes.len() > HEADER_BYTES {
            let mut bad = bytes.clone();
            let at = HEADER_BYTES + (rng.next_u64() as usize) % (bytes.len() - HEADER_BYTES);
            bad[at] ^= 1 << (rng.next_u64() % 8);
            let crc = checksum::crc32(&bad[HEADER_BYTES..]);
            bad[4..8].copy_from_slice(&crc.to_le_bytes());
            if let Ok(decoded) = decode_part(&bad) {
                assert_eq!(encode_part(&decoded), bad);
            }
        }
    }
}

/// A sequence of states made by real transitions: writers, readers, inline and hollow parts.
fn states() -> Vec<State> {
    let mut state = State::uninitialized(ShardId("s-prop".into()));
    state.seqno = SeqNo(1);
    state.walltime_ms = 1;
    state.collections.rollups.insert(
        SeqNo(1),
        HollowRollup {
            key: "s-prop/rollup/1".into(),
            encoded_size_bytes: 10,
        },
    );
    let mut out = vec![state.clone()];
    for i in 0..12u64 {
        let Continue(((), next)) = state.clone_apply(10 + i, &mut |_, c: &mut StateCollections| {
            let parts = if i % 2 == 0 {
                vec![BatchPart::Inline {
                    encoded: encode_part(&[((vec![i as u8], vec![]), i, 1)]),
                }]
            } else {
                vec![BatchPart::Hollow {
                    key: format!("s-prop/w/p{i}"),
                    encoded_size_bytes: 100 + i,
                }]
            };
            let batch = HollowBatch {
                desc: Description::new(f(i), f(i + 1)),
                len: 1,
                parts,
            };
            let _ =
                c.register_leased_reader(&LeasedReaderId(format!("r{}", i % 3)), SeqNo(i), 100, i);
            c.compare_and_append(
                &batch,
                &WriterId(format!("w{}", i % 2)),
                i,
                100,
                &IdempotencyToken(format!("i{i}")),
            )
            .map_break(|_| ())
        }) else {
            panic!("transition {i} broke")
        };
        out.push(next.clone());
        state = next;
    }
    out
}

fn encodings() -> Vec<Vec<u8>> {
    let states = states();
    let mut out = Vec::new();
    for w in states.windows(2) {
        out.push(encode_diff(&StateDiff::from_diff(&w[0], &w[1])));
    }
    for s in &states {
        out.push(encode_rollup(s));
    }
    out.push(encode_part(&[
        ((b"k".to_vec(), b"v".to_vec()), 3, -2),
        ((vec![], vec![0; 40]), u64::MAX, i64::MIN),
    ]));
    out.push(encode_part(&[]));
    out
}

/// Decodes `bytes` as every kind; any success must re-encode to exactly `bytes`.
fn check(bytes: &[u8]) -> usize {
    let mut ok = 0;
    if let Ok(d) = decode_diff(bytes) {
        assert_eq!(encode_diff(&d), bytes);
        ok += 1;
    }
    if let Ok(s) = decode_rollup(bytes) {
        assert_eq!(encode_rollup(&s), bytes);
        ok += 1;
    }
    if let Ok(p) = decode_part(bytes) {
        assert_eq!(encode_part(&p), bytes);
        ok += 1;
    }
    ok
}

fn reframe(bytes: &mut [u8]) {
    // Recompute the checksum so that a mutation reaches the payload decoder.
    if bytes.len() >= HEADER_BYTES {
        let crc = checksum::crc32(&bytes[HEADER_BYTES..]);
        bytes[4..8].copy_from_slice(&crc.to_le_bytes());
    }
}

#[test]
fn encodings_round_trip_and_diffs_rebuild_states() {
    let states = states();
    for w in states.windows(2) {
        let diff = decode_diff(&encode_diff(&StateDiff::from_diff(&w[0], &w[1]))).unwrap();
        let mut rebuilt = w[0].clone();
        diff.apply(&mut rebuilt).unwrap();
        assert_eq!(rebuilt, w[1]);
        // A diff applies only to its own base.
        assert!(diff.apply(&mut w[1].clone()).is_err());
    }
    for s in &states {
        assert_eq!(&decode_rollup(&encode_rollup(s)).unwrap(), s);
    }
    for e in encodings() {
        assert_eq!(
            check(&e),
            1,
            "each encoding decodes as exactly its own kind"
        );
    }
}

/// Frames `value` with `magic` exactly as the encoders do, whatever it holds.
fn framed<T: Serialize>(magic: [u8; 4], value: &T) -> Vec<u8> {
    encode_framed(magic, value)
}

#[test]
fn extreme_numbers_are_errors_never_panics() {
    let states = states();
    let (old, new) = (&states[3], &states[4]);
    let base = StateDiff::from_diff(old, new);
    // Seqnos at and past the ends: no next seqno, wrapping, or beyond Consensus's maximum.
    for (from, to) in [
        (u64::MAX, 0),
        (u64::MAX, u64::MAX),
        (i64::MAX as u64, i64::MAX as u64 + 1),
        (i64::MAX as u64 + 5, i64::MAX as u64 + 6),
        (0, 0),
    ] {
        let mut d = base.clone();
        d.seqno_from = SeqNo(from);
        d.seqno_to = SeqNo(to);
        let decoded = decode_diff(&encode_diff(&d));
        if let Ok(d) = decoded {
            // Decodes only when `to` follows `from`; it then applies to nothing here.
            assert!(d.apply(&mut old.clone()).is_err());
        }
    }
    // Times, walltimes, lengths and counts at their extremes inside a diff: it decodes or
    // not, and applying it is an error or a valid state, never a panic.
    let extremes = [u64::MAX, i64::MAX as u64, 0];
    for x in extremes {
        let mut d = base.clone();
        d.walltime_ms = x;
        d.upper = Some(Antichain::from_elem(x));
        d.last_gc_req = Some(SeqNo(x));
        for (_, w) in d.writers.iter_mut() {
            if let Some(w) = w {
                w.most_recent_write_upper = Antichain::from_elem(x);
                w.last_heartbeat_ms = x;
                w.lease_duration_ms = x;
            }
        }
        for (_, b) in d.batches.iter_mut() {
            if let Some(b) = b {
                let b = Rc::make_mut(b);
                b.len = x;
                b.desc.upper = Antichain::from_elem(x);
            }
        }
        if let Ok(d) = decode_diff(&encode_diff(&d)) {
            let mut state = old.clone();
            if d.apply(&mut state).is_ok() {
                state.validate(None).unwrap();
            }
        }
    }
    // A rollup whose numbers break a cross-field invariant is refused at decode.
    let mut s = states.last().unwrap().clone();
    s.seqno = SeqNo(u64::MAX);
    assert!(
        decode_rollup(&encode_rollup(&s)).is_err(),
        "seqno past the maximum"
    );
    let mut s = states.last().unwrap().clone();
    let w = s.collections.writers.values_mut().next().unwrap();
    w.most_recent_write_upper = Antichain::from_elem(u64::MAX);
    let err = decode_rollup(&encode_rollup(&s)).unwrap_err();
    assert!(err.message.contains("beyond the shard upper"), "{err}");
    let mut s = states.last().unwrap().clone();
    s.collections
        .leased_readers
        .values_mut()
        .next()
        .unwrap()
        .seqno = SeqNo(u64::MAX);
    assert!(
        decode_rollup(&encode_rollup(&s)).is_err(),
        "a hold past the state"
    );
    // Parts: extreme times and diffs round-trip; lengths past the buffer are errors.
    let extreme_part = vec![
        ((vec![], vec![]), u64::MAX, i64::MIN),
        ((vec![0xff; 3], vec![]), 0, i64::MAX),
    ];
    assert_eq!(
        decode_part(&encode_part(&extreme_part)).unwrap(),
        extreme_part
    );
    for len in [u64::MAX, i64::MAX as u64, 1 << 40, 3] {
        // A vector length prefix that claims more than the buffer holds.
        let mut payload = len.to_le_bytes().to_vec();
        payload.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 7]);
        let mut bytes = MAGIC_PART.to_vec();
        bytes.extend_from_slice(&checksum::crc32(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
        assert!(decode_part(&bytes).is_err(), "length {len}");
        let mut as_diff = bytes.clone();
        as_diff[..4].copy_from_slice(&MAGIC_DIFF);
        assert!(decode_diff(&as_diff).is_err());
        as_diff[..4].copy_from_slice(&MAGIC_ROLLUP);
        assert!(decode_rollup(&as_diff).is_err());
    }
    // Well-framed values of another type entirely.
    assert!(decode_diff(&framed(MAGIC_DIFF, &(u64::MAX, i64::MIN))).is_err());
    assert!(decode_rollup(&framed(MAGIC_ROLLUP, &vec![u64::MAX; 9])).is_err());
    assert!(decode_part(&framed(MAGIC_PART, &(u64::MAX,))).is_err());
}

#[test]
fn arbitrary_and_mutated_bytes_never_panic() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0xdec0de);
    let mut accepted_mutations = 0u64;
    // Random bytes, some with a valid magic and checksum.
    for len in 0..200usize {
        for magic in [None, Some(MAGIC_DIFF), Some(MAGIC_ROLLUP), Some(MAGIC_PART)] {
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if let (Some(m), true) = (magic, len >= HEADER_BYTES) {
                bytes[..4].copy_from_slice(&m);
                reframe(&mut bytes);
            }
            check(&bytes);
        }
    }
    // Mutations of real encodings: bit flips, byte sets, truncations, insertions; with the
    // checksum left alone (always rejected) and recomputed (the payload decoder is tested).
    for base in encodings() {
        for _ in 0..300 {
            let mut bytes = base.clone();
            match rng.next_u64() % 4 {
                0 => {
                    let i = (rng.next_u64() as usize) % bytes.len();
                    bytes[i] ^= 1 << (rng.next_u64() % 8);
                }
                1 => {
                    let i = (rng.next_u64() as usize) % bytes.len();
                    bytes[i] = rng.next_u64() as u8;
                }
                2 => {
                    let n = (rng.next_u64() as usize) % bytes.len();
                    bytes.truncate(n);
                }
                _ => {
                    let i = (rng.next_u64() as usize) % (bytes.len() + 1);
                    bytes.insert(i, rng.next_u64() as u8);
                }
            }
            if bytes != base {
                assert_eq!(check(&bytes), 0, "the checksum rejects a mutation");
            }
            reframe(&mut bytes);
            accepted_mutations += check(&bytes) as u64;
        }
    }
    // Some re-framed mutations decode (e.g. a changed digit in a key); all re-encoded exactly.
    assert!(accepted_mutations > 0);
}
