//! Everything persist stores, as bytes, in one place.
//!
//! - A **state version** (one Consensus version of a shard) is a [`StateDiff`]: the changes from
//!   seqno N-1 to N, field by field, plus the key of the newest rollup, so that a reader can start
//!   from that rollup and apply the diffs after it.
//! - A **rollup** (a Blob) is a whole [`State`] at one seqno.
//! - A **batch part** (a Blob, or inline in state) is a list of `((key, value), time, diff)` with
//!   keys and values already encoded by their codecs.
//!
//! Framing: 4 bytes of magic naming the kind and format version (`PPd1`, `PPr1`, `PPp1`), a CRC-32
//! of the payload (little-endian), then the payload in bincode (fixed-width integers, no trailing
//! bytes). Decoding checks the magic, the checksum, that the payload is exactly the canonical
//! encoding of what it decoded to (so a successful decode always re-encodes to the input), and
//! the semantic invariants of what it decoded. Bad bytes are an error, never a panic.

use std::rc::Rc;

use bincode::Options;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use timely::progress::Antichain;

use super::checksum;
use super::codec::{Diff, Timestamp};
use super::state::{
    CriticalReaderId, CriticalReaderState, HollowBatch, HollowRollup, LeasedReaderId,
    LeasedReaderState, Schema, SchemaId, State, WriterId, WriterState,
};
use super::trace::Trace;
use super::ShardId;
use crate::location::SeqNo;
use crate::vec_map::VecMap;

const MAGIC_DIFF: [u8; 4] = *b"PPd1";
const MAGIC_ROLLUP: [u8; 4] = *b"PPr1";
const MAGIC_PART: [u8; 4] = *b"PPp1";
const MAGIC_GC_TICKET: [u8; 4] = *b"PPg1";
const HEADER_BYTES: usize = 8;

/// Why bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode {what}: {message}")]
pub struct DecodeError {
    /// What was being decoded.
    pub what: &'static str,
    /// What was wrong.
    pub message: String,
}

fn options() -> impl Options {
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_little_endian()
        .reject_trailing_bytes()
}

fn encode_framed<T: Serialize>(magic: [u8; 4], value: &T) -> Vec<u8> {
    // Serializing plain data structs into a Vec cannot fail.
    let payload = options()
        .serialize(value)
        .expect("bincode serialization of plain data into a Vec");
    frame(magic, &payload)
}

/// The magic, the payload's checksum, the payload.
fn frame(magic: [u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    out.extend_from_slice(&magic);
    out.extend_from_slice(&checksum::crc32(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

fn decode_framed<T: Serialize + DeserializeOwned>(
    what: &'static str,
    magic: [u8; 4],
    bytes: &[u8],
) -> Result<T, DecodeError> {
    let value: T = decode_framed_unchecked(what, magic, bytes)?;
    let payload = &bytes[HEADER_BYTES..];
    let again = options().serialize(&value).map_err(|e| DecodeError {
        what,
        message: format!("cannot re-encode: {e}"),
    })?;
    if again != payload {
        return Err(DecodeError {
            what,
            message: "payload is not in canonical form".into(),
        });
    }
    Ok(value)
}

/// [`decode_framed`] without the check that the payload re-encodes to itself.
fn decode_framed_unchecked<T: DeserializeOwned>(
    what: &'static str,
    magic: [u8; 4],
    bytes: &[u8],
) -> Result<T, DecodeError> {
    let payload = unframe(what, magic, bytes)?;
    options()
        .with_limit(payload.len() as u64)
        .deserialize(payload)
        .map_err(|e| DecodeError {
            what,
            message: format!("bad payload: {e}"),
        })
}

/// Checks the header (length, magic, checksum) and returns the payload.
fn unframe<'a>(
    what: &'static str,
    magic: [u8; 4],
    bytes: &'a [u8],
) -> Result<&'a [u8], DecodeError> {
    let err = |message: String| DecodeError { what, message };
    if bytes.len() < HEADER_BYTES {
        return Err(err(format!(
            "{} bytes is shorter than the header",
            bytes.len()
        )));
    }
    let (header, payload) = bytes.split_at(HEADER_BYTES);
    if header[..4] != magic {
        return Err(err(format!(
            "magic {:?} is not {:?} (another kind of record, or another format version)",
            String::from_utf8_lossy(&header[..4]),
            String::from_utf8_lossy(&magic)
        )));
    }
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if crc != checksum::crc32(payload) {
        return Err(err("checksum mismatch (corrupted)".into()));
    }
    Ok(payload)
}

/// One update with its key and value encoded by their codecs.
pub type EncodedUpdate = ((Vec<u8>, Vec<u8>), Timestamp, Diff);

/// Encodes a batch part: the bincode layout of `Vec<EncodedUpdate>` (a `u64` count, then per
/// update the key and the value each as a `u64` length and its bytes, the time as a `u64` and
/// the diff as an `i64`, all little-endian), written by hand: parts are most of the bytes
/// persist moves, and bincode's generic code goes one `u8` at a time (and would be compiled
/// once more into the page's `.wasm`). A test checks it against bincode's.
pub fn encode_part(updates: &[EncodedUpdate]) -> Vec<u8> {
    let size: usize = updates
        .iter()
        .map(|((k, v), _, _)| 32 + k.len() + v.len())
        .sum();
    let mut payload = Vec::with_capacity(8 + size);
    payload.extend_from_slice(&(updates.len() as u64).to_le_bytes());
    for ((k, v), t, d) in updates {
        payload.extend_from_slice(&(k.len() as u64).to_le_bytes());
        payload.extend_from_slice(k);
        payload.extend_from_slice(&(v.len() as u64).to_le_bytes());
        payload.extend_from_slice(v);
        payload.extend_from_slice(&t.to_le_bytes());
        payload.extend_from_slice(&d.to_le_bytes());
    }
    frame(MAGIC_PART, &payload)
}

/// Decodes a batch part (see [`encode_part`]). Every payload that decodes is the canonical
/// encoding of what it decodes to (lengths, bytes and fixed-width integers, nothing trailing), so
/// no re-encoding check is needed.
pub fn decode_part(bytes: &[u8]) -> Result<Vec<EncodedUpdate>, DecodeError> {
    let what = "batch part";
    let mut payload = unframe(what, MAGIC_PART, bytes)?;
    let err = |m: &str| DecodeError {
        what,
        message: format!("bad payload: {m}"),
    };
    let u64_of = |p: &mut &[u8]| -> Result<u64, DecodeError> {
        let (head, rest) = p.split_first_chunk::<8>().ok_or_else(|| err("truncated"))?;
        *p = rest;
        Ok(u64::from_le_bytes(*head))
    };
    let count = u64_of(&mut payload)?;
    // Each update takes at least 32 bytes: a count beyond that is not a part.
    if count > (payload.len() / 32) as u64 {
        return Err(err("more updates than bytes"));
    }
    let mut updates = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let bytes_of = |p: &mut &[u8]| -> Result<Vec<u8>, DecodeError> {
            let len = u64_of(p)?;
            if len > p.len() as u64 {
                return Err(err("a length beyond the payload"));
            }
            let (b, rest) = p.split_at(len as usize);
            *p = rest;
            Ok(b.to_vec())
        };
        let k = bytes_of(&mut payload)?;
        let v = bytes_of(&mut payload)?;
        let t = u64_of(&mut payload)?;
        let d = u64_of(&mut payload)? as i64;
        updates.push(((k, v), t, d));
    }
    if !payload.is_empty() {
        return Err(err("trailing bytes"));
    }
    Ok(updates)
}

/// Encodes a GC ticket: the Blob keys a collection will delete once its truncate is done (see
/// `gc.rs`), as a `u64` count and each key as a `u64` length and its bytes, little-endian.
pub fn encode_gc_ticket(keys: &[String]) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&(keys.len() as u64).to_le_bytes());
    for key in keys {
        payload.extend_from_slice(&(key.len() as u64).to_le_bytes());
        payload.extend_from_slice(key.as_bytes());
    }
    frame(MAGIC_GC_TICKET, &payload)
}

/// Decodes a GC ticket.
pub fn decode_gc_ticket(bytes: &[u8]) -> Result<Vec<String>, DecodeError> {
    let what = "gc ticket";
    let mut payload = unframe(what, MAGIC_GC_TICKET, bytes)?;
    let bad = || DecodeError {
        what,
        message: "bad payload".into(),
    };
    let next = |p: &mut &[u8]| -> Result<u64, DecodeError> {
        let (head, rest) = p.split_first_chunk::<8>().ok_or_else(bad)?;
        *p = rest;
        Ok(u64::from_le_bytes(*head))
    };
    let count = next(&mut payload)?;
    if count > (payload.len() / 8) as u64 {
        return Err(bad());
    }
    let mut keys = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = next(&mut payload)?;
        if len > payload.len() as u64 {
            return Err(bad());
        }
        let (key, rest) = payload.split_at(len as usize);
        payload = rest;
        keys.push(String::from_utf8(key.to_vec()).map_err(|_| bad())?);
    }
    if !payload.is_empty() {
        return Err(bad());
    }
    Ok(keys)
}

/// Encodes a rollup (a whole state).
pub fn encode_rollup(state: &State) -> Vec<u8> {
    let out = encode_framed(MAGIC_ROLLUP, state);
    super::stats::count(|s| {
        s.rollup_encodes += 1;
        s.rollup_encode_bytes += out.len() as u64;
    });
    out
}

/// Decodes a rollup and checks the state's invariants.
pub fn decode_rollup(bytes: &[u8]) -> Result<State, DecodeError> {
    super::stats::count(|s| {
        s.rollup_decodes += 1;
        s.rollup_decode_bytes += bytes.len() as u64;
    });
    let state: State = decode_framed("rollup", MAGIC_ROLLUP, bytes)?;
    state.validate(None).map_err(|message| DecodeError {
        what: "rollup",
        message,
    })?;
    Ok(state)
}

/// Encodes a state version.
pub fn encode_diff(diff: &StateDiff) -> Vec<u8> {
    let out = encode_framed(MAGIC_DIFF, diff);
    super::stats::count(|s| {
        s.diff_encodes += 1;
        s.diff_encode_bytes += out.len() as u64;
    });
    out
}

/// Decodes a state version.
pub fn decode_diff(bytes: &[u8]) -> Result<StateDiff, DecodeError> {
    super::stats::count(|s| {
        s.diff_decodes += 1;
        s.diff_decode_bytes += bytes.len() as u64;
    });
    let diff: StateDiff = decode_framed("state version", MAGIC_DIFF, bytes)?;
    // Checked: a stored `seqno_from` of `u64::MAX` (or past Consensus's maximum) has no next.
    if diff.seqno_from.checked_next() != Some(diff.seqno_to) {
        return Err(DecodeError {
            what: "state version",
            message: format!("goes from {} to {}", diff.seqno_from, diff.seqno_to),
        });
    }
    Ok(diff)
}

/// The changes to one keyed collection: `(key, None)` removes, `(key, Some(v))` inserts or
/// replaces.
pub type MapDiff<K, V> = Vec<(K, Option<V>)>;

/// The changes from one state version to the next, field by field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateDiff {
    /// The shard.
    pub shard_id: ShardId,
    /// The version this diff applies to.
    pub seqno_from: SeqNo,
    /// The version it makes (`seqno_from + 1`).
    pub seqno_to: SeqNo,
    /// The new walltime.
    pub walltime_ms: u64,
    /// The newest rollup at `seqno_to`: where a reader starts.
    pub latest_rollup: Option<(SeqNo, HollowRollup)>,
    /// Schema changes.
    pub schemas: MapDiff<SchemaId, Schema>,
    /// The new `last_gc_req`, if it changed.
    pub last_gc_req: Option<SeqNo>,
    /// Rollup changes.
    pub rollups: MapDiff<SeqNo, HollowRollup>,
    /// Leased reader changes.
    pub leased_readers: MapDiff<LeasedReaderId, LeasedReaderState>,
    /// Critical reader changes.
    pub critical_readers: MapDiff<CriticalReaderId, CriticalReaderState>,
    /// Writer changes.
    pub writers: MapDiff<WriterId, WriterState>,
    /// The new since, if it changed.
    pub since: Option<Antichain<Timestamp>>,
    /// The new upper, if it changed.
    pub upper: Option<Antichain<Timestamp>>,
    /// Batch changes, keyed by each batch's lower.
    pub batches: MapDiff<Timestamp, Rc<HollowBatch>>,
}

fn diff_map<K: Ord + Clone, V: PartialEq + Clone>(
    old: &VecMap<K, V>,
    new: &VecMap<K, V>,
) -> MapDiff<K, V> {
    let mut out = Vec::new();
    for k in old.keys() {
        if !new.contains_key(k) {
            out.push((k.clone(), None));
        }
    }
    for (k, v) in new {
        if old.get(k) != Some(v) {
            out.push((k.clone(), Some(v.clone())));
        }
    }
    out
}

fn apply_map<K: Ord + Clone + std::fmt::Debug, V: Clone>(
    map: &mut VecMap<K, V>,
    diff: &MapDiff<K, V>,
    field: &str,
) -> Result<(), String> {
    for (k, v) in diff {
        match v {
            Some(v) => {
                map.insert(k.clone(), v.clone());
            }
            None => {
                if map.remove(k).is_none() {
                    return Err(format!("{field}: removes {k:?}, which is absent"));
                }
            }
        }
    }
    Ok(())
}

/// The batch changes between two traces, by a merge walk over their (sorted) batches: only the
/// batches that differ are cloned, so a command that appends one batch costs O(batches) compares
/// and one clone.
fn diff_batches(
    old: &[Rc<HollowBatch>],
    new: &[Rc<HollowBatch>],
) -> MapDiff<Timestamp, Rc<HollowBatch>> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        let ko = old.get(i).map(|b| batch_key(b));
        let kn = new.get(j).map(|b| batch_key(b));
        match (ko, kn) {
            (Some(a), Some(b)) if a == b => {
                // Unchanged batches are shared between versions: a pointer check suffices.
                if !Rc::ptr_eq(&old[i], &new[j]) && old[i] != new[j] {
                    out.push((b, Some(new[j].clone())));
                }
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a < b => {
                out.push((a, None));
                i += 1;
            }
            (Some(a), None) => {
                out.push((a, None));
                i += 1;
            }
            (_, Some(b)) => {
                out.push((b, Some(new[j].clone())));
                j += 1;
            }
            (None, None) => unreachable!("the loop condition"),
        }
    }
    // Canonical order, as `diff_map` makes it: removals first, then insertions, each by key.
    let (mut removed, mut inserted): (Vec<_>, Vec<_>) =
        out.into_iter().partition(|(_, v)| v.is_none());
    crate::sort::sort_by_key(&mut removed, |(k, _)| *k);
    crate::sort::sort_by_key(&mut inserted, |(k, _)| *k);
    removed.extend(inserted);
    removed
}

fn batch_key(b: &HollowBatch) -> Timestamp {
    // A batch in the trace never has an empty lower (its interval is not empty).
    b.desc
        .lower
        .elements()
        .first()
        .copied()
        .unwrap_or(Timestamp::MAX)
}

/// Applies batch changes to a trace's batches, which are sorted by lower (the trace's own
/// invariant), with the same meaning as [`apply_map`] on a map keyed by lower: a binary search
/// per change instead of rebuilding a map, so a command that appends one batch costs one search.
fn apply_batches(
    batches: &[Rc<HollowBatch>],
    diff: &MapDiff<Timestamp, Rc<HollowBatch>>,
) -> Result<Vec<Rc<HollowBatch>>, String> {
    let mut out = batches.to_vec();
    for (key, change) in diff {
        let found = out.binary_search_by_key(key, |b| batch_key(b));
        match (found, change) {
            (Ok(i), Some(b)) => out[i] = Rc::clone(b),
            (Err(i), Some(b)) => out.insert(i, Rc::clone(b)),
            (Ok(i), None) => {
                out.remove(i);
            }
            (Err(_), None) => return Err(format!("batches: removes {key:?}, which is absent")),
        }
    }
    Ok(out)
}

impl StateDiff {
    /// The Blob keys this diff starts referring to: the parts of the batches it inserts and the
    /// rollups it lists.
    pub fn inserted_blobs(&self) -> Vec<String> {
        let parts = self
            .batches
            .iter()
            .filter_map(|(_, b)| b.as_ref())
            .flat_map(|b| b.part_keys().map(String::from));
        let rollups = self
            .rollups
            .iter()
            .filter_map(|(_, r)| r.as_ref().map(|r| r.key.clone()));
        parts.chain(rollups).collect()
    }

    /// The diff that turns `old` into `new` (`new.seqno == old.seqno + 1`).
    pub fn from_diff(old: &State, new: &State) -> StateDiff {
        assert_eq!(new.seqno, old.seqno.next(), "diffs go one seqno at a time");
        let (o, n) = (&old.collections, &new.collections);
        StateDiff {
            shard_id: new.shard_id.clone(),
            seqno_from: old.seqno,
            seqno_to: new.seqno,
            walltime_ms: new.walltime_ms,
            latest_rollup: new.latest_rollup().map(|(s, r)| (s, r.clone())),
            schemas: diff_map(&o.schemas, &n.schemas),
            last_gc_req: (o.last_gc_req != n.last_gc_req).then_some(n.last_gc_req),
            rollups: diff_map(&o.rollups, &n.rollups),
            leased_readers: diff_map(&o.leased_readers, &n.leased_readers),
            critical_readers: diff_map(&o.critical_readers, &n.critical_readers),
            writers: diff_map(&o.writers, &n.writers),
            since: (o.trace.since() != n.trace.since()).then(|| n.trace.since().clone()),
            upper: (o.trace.upper() != n.trace.upper()).then(|| n.trace.upper().clone()),
            batches: diff_batches(o.trace.batches(), n.trace.batches()),
        }
    }

    /// Applies this diff to `state`, which must be at `seqno_from`. On error `state` is unchanged.
    pub fn apply(&self, state: &mut State) -> Result<(), String> {
        if state.shard_id != self.shard_id {
            return Err(format!(
                "diff of shard {} applied to shard {}",
                self.shard_id, state.shard_id
            ));
        }
        if state.seqno != self.seqno_from {
            return Err(format!(
                "diff from {} applied to state at {}",
                self.seqno_from, state.seqno
            ));
        }
        let mut next = state.clone();
        let c = &mut next.collections;
        next.seqno = self.seqno_to;
        next.walltime_ms = self.walltime_ms;
        apply_map(&mut c.schemas, &self.schemas, "schemas")?;
        if let Some(s) = self.last_gc_req {
            c.last_gc_req = s;
        }
        apply_map(&mut c.rollups, &self.rollups, "rollups")?;
        apply_map(
            &mut c.leased_readers,
            &self.leased_readers,
            "leased readers",
        )?;
        apply_map(
            &mut c.critical_readers,
            &self.critical_readers,
            "critical readers",
        )?;
        apply_map(&mut c.writers, &self.writers, "writers")?;
        let batches = apply_batches(c.trace.batches(), &self.batches)?;
        let since = self
            .since
            .clone()
            .unwrap_or_else(|| c.trace.since().clone());
        let upper = self
            .upper
            .clone()
            .unwrap_or_else(|| c.trace.upper().clone());
        // `from_parts` checks the trace; the rest of the state is checked once, here.
        c.trace = Trace::from_parts(since, upper, batches)?;
        next.validate_given_trace(Some(state))?;
        *state = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::state::{
        BatchPart, Description, IdempotencyToken, LeasedReaderId, StateCollections,
    };
    use rand_core::{RngCore, SeedableRng};
    use rand_xoshiro::Xoshiro256PlusPlus;
    use std::ops::ControlFlow::Continue;

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
            let Continue(((), next)) =
                state.clone_apply(10 + i, &mut |_, c: &mut StateCollections| {
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
                    let _ = c.register_leased_reader(
                        &LeasedReaderId(format!("r{}", i % 3)),
                        SeqNo(i),
                        100,
                        i,
                    );
                    c.compare_and_append(
                        &batch,
                        &WriterId(format!("w{}", i % 2)),
                        i,
                        100,
                        &IdempotencyToken(format!("i{i}")),
                    )
                    .map_break(|_| ())
                })
            else {
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
}
