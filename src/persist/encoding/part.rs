//! Batch parts and GC tickets: two layouts written by hand (little-endian `u64` counts and
//! lengths), each framed like every other record (see the module docs of `encoding`).
//!
//! Invariant: every payload that decodes is the canonical encoding of what it decodes to, so no
//! re-encoding check is needed; a count or length beyond the bytes left is an error, never an
//! allocation of that size.

use super::super::codec::{Diff, Timestamp};
use super::{frame, unframe, DecodeError, MAGIC_GC_TICKET, MAGIC_PART};

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
