//! The number policy of the plain data the library hands to JavaScript (the core's events),
//! as `serialize_with` helpers, so that one serde derive serves every reader:
//!
//! - **times** (`u64` milliseconds) are numbers: [`time`] and [`opt_time`] refuse a time beyond
//!   [`MAX_SAFE_INTEGER`] with an error that says so, instead of letting JavaScript round it;
//! - **seqnos** and other 64-bit quantities whose range does not fit a number (a fingerprint)
//!   are `bigint`s: [`seqno`] and [`bigint`] serialize them as `u128`, which serde-wasm-bindgen
//!   always makes a `BigInt` and a JSON writer a plain integer;
//! - counts stay `u64`: the library's serializer writes them as numbers, and refuses one beyond
//!   [`MAX_SAFE_INTEGER`] itself.
//!
//! The TypeScript side (tsify, behind the `library` feature) follows the Rust types, except for
//! fields these helpers change, which say `bigint` or name [`FrontierChange`].

use std::fmt::Display;

use serde::ser::{Error as _, Serializer};
use serde::Serialize;

use crate::location::SeqNo;

/// `Number.MAX_SAFE_INTEGER`: the largest integer a JavaScript number holds with every smaller one.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// A time as a number; an error beyond [`MAX_SAFE_INTEGER`]. (Generic over the time type, for
/// the components generic over it; every one the crate runs is `u64`.)
pub fn time<T: Copy + Into<u64>, S: Serializer>(t: &T, s: S) -> Result<S::Ok, S::Error> {
    let t: u64 = (*t).into();
    if t > MAX_SAFE_INTEGER {
        return Err(S::Error::custom(format_args!(
            "the time {t} is beyond Number.MAX_SAFE_INTEGER: it cannot be a number"
        )));
    }
    s.serialize_u64(t)
}

/// An optional time (a frontier: `None` is the empty frontier) as a number or null.
pub fn opt_time<T: Copy + Into<u64>, S: Serializer>(
    t: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => time(t, s),
        None => s.serialize_none(),
    }
}

/// A seqno as a `bigint`.
pub fn seqno<S: Serializer>(n: &SeqNo, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u128(u128::from(n.0))
}

/// A 64-bit quantity whose range does not fit a number (a fingerprint) as a `bigint`.
pub fn bigint<S: Serializer>(n: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u128(u128::from(*n))
}

/// An optional 64-bit quantity as a `bigint` or null.
pub fn opt_bigint<S: Serializer>(n: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match n {
        Some(n) => bigint(n, s),
        None => s.serialize_none(),
    }
}

/// A value by its `Display` text (an error type).
pub fn display<T: Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// A frontier before and after a command, `(before, after)`, as `{ before, after }`.
pub fn frontier_change<S: Serializer>(
    pair: &(Option<u64>, Option<u64>),
    s: S,
) -> Result<S::Ok, S::Error> {
    FrontierChange {
        before: pair.0,
        after: pair.1,
    }
    .serialize(s)
}

/// `(before, after)` of a frontier, `null` for the empty frontier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null)
)]
pub struct FrontierChange {
    /// Before the command.
    #[serde(serialize_with = "opt_time")]
    pub before: Option<u64>,
    /// After it.
    #[serde(serialize_with = "opt_time")]
    pub after: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct T {
        #[serde(serialize_with = "time")]
        t: u64,
        #[serde(serialize_with = "seqno")]
        n: SeqNo,
        #[serde(serialize_with = "frontier_change")]
        c: (Option<u64>, Option<u64>),
    }

    #[test]
    fn times_are_checked_numbers_seqnos_are_wide() {
        let ok = T {
            t: MAX_SAFE_INTEGER,
            n: SeqNo(u64::MAX),
            c: (Some(3), None),
        };
        assert_eq!(
            serde_json::to_string(&ok).unwrap(),
            format!(
                "{{\"t\":{MAX_SAFE_INTEGER},\"n\":{},\"c\":{{\"before\":3,\"after\":null}}}}",
                u64::MAX
            )
        );
        let far = T {
            t: MAX_SAFE_INTEGER + 1,
            ..ok
        };
        let e = serde_json::to_string(&far).unwrap_err().to_string();
        assert!(e.contains("beyond Number.MAX_SAFE_INTEGER"), "{e}");
    }
}
