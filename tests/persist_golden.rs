//! Pinned formats: the bytes of a state diff, a rollup and a batch part, built from fixed values,
//! must equal the golden files in `tests/golden/`, and the golden bytes must decode back to those
//! values. Any change to a stored format shows up here as a diff of a golden file (and needs a
//! new magic, so that stored bytes of the old format are refused rather than misread).
//!
//! `PERSIST_BLESS=1 cargo test --test native persist_golden::` rewrites the files after a deliberate
//! format change; without it a missing or different file fails the test.
#![cfg(not(target_arch = "wasm32"))]

use std::ops::ControlFlow::Continue;
use std::path::PathBuf;

use persist_playground::location::SeqNo;
use persist_playground::persist::encoding::{
    decode_diff, decode_part, decode_rollup, encode_diff, encode_part, encode_rollup,
    EncodedUpdate, StateDiff,
};
use persist_playground::persist::state::{
    BatchPart, CriticalReaderId, Description, HollowBatch, HollowRollup, IdempotencyToken,
    LeasedReaderId, Schema, State, StateCollections, WriterId,
};
use persist_playground::persist::ShardId;
use timely::progress::Antichain;

fn f(t: u64) -> Antichain<u64> {
    Antichain::from_elem(t)
}

fn part() -> Vec<EncodedUpdate> {
    vec![
        ((b"key".to_vec(), b"value".to_vec()), 3, 1),
        ((Vec::new(), vec![0xff; 3]), u64::MAX, i64::MIN),
        ((vec![0], Vec::new()), 0, -1),
    ]
}

/// Two consecutive states made by real transitions, with every kind of field filled in.
fn states() -> (State, State) {
    let mut state = State::uninitialized(ShardId::new("s-golden").unwrap());
    state.seqno = SeqNo(1);
    state.walltime_ms = 1_000;
    state.collections.rollups.insert(
        SeqNo(1),
        HollowRollup {
            key: "s-golden/rollup/00000000000000000001/0".into(),
            encoded_size_bytes: 123,
        },
    );
    let step = |state: &State, now: u64, work: &mut dyn FnMut(SeqNo, &mut StateCollections)| {
        let Continue(((), next)) = state.clone_apply(now, &mut |s, c| {
            work(s, c);
            Continue::<(), ()>(())
        }) else {
            unreachable!("the closure always continues")
        };
        next
    };
    let state = step(&state, 1_001, &mut |seqno, c| {
        let schema = Schema {
            key_codec: "String".into(),
            val_codec: "()".into(),
        };
        let _ = c.register_schema(&schema);
        let _ = c.register_writer(&WriterId("w-1".into()), 60_000, 1_001);
        let _ = c.register_leased_reader(&LeasedReaderId("r-1".into()), seqno, 60_000, 1_001);
        let _ = c.register_critical_reader(&CriticalReaderId("c-1".into()), 7);
        let inline = HollowBatch {
            desc: Description::new(f(0), f(3)),
            len: 3,
            parts: vec![BatchPart::Inline {
                encoded: encode_part(&part()),
            }],
        };
        let _ = c.compare_and_append(
            &inline,
            &WriterId("w-1".into()),
            1_001,
            60_000,
            &IdempotencyToken("i-1".into()),
        );
    });
    let next = step(&state, 1_002, &mut |seqno, c| {
        let hollow = HollowBatch {
            desc: Description::new(f(3), f(7)),
            len: 10,
            parts: vec![BatchPart::Hollow {
                key: "s-golden/w-1/p-1".into(),
                encoded_size_bytes: 456,
            }],
        };
        let _ = c.compare_and_append(
            &hollow,
            &WriterId("w-1".into()),
            1_002,
            60_000,
            &IdempotencyToken("i-2".into()),
        );
        let _ = c.downgrade_since(&LeasedReaderId("r-1".into()), seqno, &f(2), 1_002);
        let _ = c.compare_and_downgrade_since(&CriticalReaderId("c-1".into()), 7, 8, &f(2));
        let _ = c.add_rollup(
            SeqNo(2),
            &HollowRollup {
                key: "s-golden/rollup/00000000000000000002/w-1-m2x0".into(),
                encoded_size_bytes: 789,
            },
        );
    });
    (state, next)
}

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// Bytes as hex, 32 per line.
fn to_hex(bytes: &[u8]) -> String {
    let mut out = String::new();
    for line in bytes.chunks(32) {
        for b in line {
            out.push_str(&format!("{b:02x}"));
        }
        out.push('\n');
    }
    out
}

fn from_hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// Compares `bytes` with the golden file `name` (or writes it when blessing); returns the
/// golden bytes.
fn check_golden(name: &str, bytes: &[u8]) -> Vec<u8> {
    let path = golden_path(name);
    if std::env::var("PERSIST_BLESS").is_ok() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, to_hex(bytes)).unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "golden file {}: {e} (bless with PERSIST_BLESS=1)",
            path.display()
        )
    });
    let golden = from_hex(&text);
    assert_eq!(
        to_hex(bytes),
        to_hex(&golden),
        "{name}: the stored format changed; if on purpose, bump its magic and re-bless"
    );
    golden
}

#[test]
fn state_diff_encoding_is_pinned() {
    let (old, new) = states();
    let diff = StateDiff::from_diff(&old, &new);
    let golden = check_golden("state_diff.hex", &encode_diff(&diff));
    let decoded = decode_diff(&golden).unwrap();
    assert_eq!(decoded, diff);
    let mut rebuilt = old.clone();
    decoded.apply(&mut rebuilt).unwrap();
    assert_eq!(rebuilt, new, "the golden diff still rebuilds the state");
}

#[test]
fn rollup_encoding_is_pinned() {
    let (_, state) = states();
    let golden = check_golden("rollup.hex", &encode_rollup(&state));
    assert_eq!(decode_rollup(&golden).unwrap(), state);
}

#[test]
fn part_encoding_is_pinned() {
    let golden = check_golden("part.hex", &encode_part(&part()));
    assert_eq!(decode_part(&golden).unwrap(), part());
}
