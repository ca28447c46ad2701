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
//!
//! Files: this one holds the framing and [`DecodeError`]; `part.rs` batch parts and GC tickets
//! (hand-written layouts), `rollup.rs` rollups, `diff.rs` state versions ([`StateDiff`]: how one
//! is computed from two states and applied to the first). Every public item is re-exported here,
//! so `encoding::X` names it whatever file it lives in.

use bincode::Options;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::checksum;

mod diff;
mod part;
mod rollup;

pub use diff::{decode_diff, encode_diff, MapDiff, StateDiff};
pub use part::{decode_gc_ticket, decode_part, encode_gc_ticket, encode_part, EncodedUpdate};
pub use rollup::{decode_rollup, encode_rollup};

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

#[cfg(test)]
mod tests;
