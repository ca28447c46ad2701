//! Rollups: a whole [`State`] at one seqno, in bincode inside the common frame.
//!
//! Invariant: a rollup that decodes is a valid state (`State::validate`), and re-encodes to the
//! same bytes (the framing's canonical check).

use super::super::state::State;
use super::{decode_framed, encode_framed, DecodeError, MAGIC_ROLLUP};

/// Encodes a rollup (a whole state).
pub fn encode_rollup(state: &State) -> Vec<u8> {
    let out = encode_framed(MAGIC_ROLLUP, state);
    super::super::stats::count(|s| {
        s.rollup_encodes += 1;
        s.rollup_encode_bytes += out.len() as u64;
    });
    out
}

/// Decodes a rollup and checks the state's invariants.
pub fn decode_rollup(bytes: &[u8]) -> Result<State, DecodeError> {
    super::super::stats::count(|s| {
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
