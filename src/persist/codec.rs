//! Codecs: how keys and values become bytes in batch parts, and back.
//!
//! A shard records the names of the codecs it was created with (its schema); opening it with other
//! codecs is an `InvalidUsage::CodecMismatch`. Times are `u64` and diffs `i64` (the 64-bit codecs),
//! written as fixed-width little-endian integers inside parts.
//!
//! Decoding never panics: bytes that are not a valid encoding give a [`CodecError`].

use std::fmt;

use serde::{Deserialize, Serialize};

/// The time type of every shard: milliseconds on the playground clock.
pub type Timestamp = u64;
/// The diff type of every shard.
pub type Diff = i64;

/// A decoding failure, with a message saying what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("codec {codec}: {message}")]
pub struct CodecError {
    /// The codec that failed.
    pub codec: &'static str,
    /// What was wrong.
    pub message: String,
}

/// A type that can be stored as a key or value of a shard.
pub trait Codec: Sized + Clone + Ord + fmt::Debug + 'static {
    /// The name recorded in the shard's schema.
    fn codec_name() -> &'static str;
    /// Appends the encoding of `self` to `buf`.
    fn encode(&self, buf: &mut Vec<u8>);
    /// Decodes a value from exactly `buf`.
    fn decode(buf: &[u8]) -> Result<Self, CodecError>;
}

impl Codec for String {
    fn codec_name() -> &'static str {
        "String"
    }
    fn encode(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(self.as_bytes());
    }
    fn decode(buf: &[u8]) -> Result<Self, CodecError> {
        String::from_utf8(buf.to_vec()).map_err(|e| CodecError {
            codec: "String",
            message: format!("not UTF-8: {e}"),
        })
    }
}

impl Codec for Vec<u8> {
    fn codec_name() -> &'static str {
        "Bytes"
    }
    fn encode(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(self);
    }
    fn decode(buf: &[u8]) -> Result<Self, CodecError> {
        Ok(buf.to_vec())
    }
}

impl Codec for () {
    fn codec_name() -> &'static str {
        "()"
    }
    fn encode(&self, _buf: &mut Vec<u8>) {}
    fn decode(buf: &[u8]) -> Result<Self, CodecError> {
        if buf.is_empty() {
            Ok(())
        } else {
            Err(CodecError {
                codec: "()",
                message: format!("expected no bytes, found {}", buf.len()),
            })
        }
    }
}

/// One value of a [`Row`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Datum {
    /// SQL NULL.
    Null,
    /// A boolean.
    Bool(bool),
    /// A 64-bit integer.
    Int(i64),
    /// A string.
    String(String),
}

impl fmt::Display for Datum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Datum::Null => write!(f, "null"),
            Datum::Bool(b) => write!(f, "{b}"),
            Datum::Int(i) => write!(f, "{i}"),
            Datum::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// A small row of datums, shared by the write task and the upsert operator.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Row(pub Vec<Datum>);

impl Row {
    /// A row of these datums.
    pub fn new(datums: impl IntoIterator<Item = Datum>) -> Self {
        Row(datums.into_iter().collect())
    }
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, ")")
    }
}

// Row encoding: a sequence of (tag, payload). Tags: 0 null, 1 false, 2 true, 3 int (8 bytes LE),
// 4 string (u32 LE length, then UTF-8). Canonical: every row has exactly one encoding.
impl Codec for Row {
    fn codec_name() -> &'static str {
        "Row"
    }
    fn encode(&self, buf: &mut Vec<u8>) {
        for d in &self.0 {
            match d {
                Datum::Null => buf.push(0),
                Datum::Bool(false) => buf.push(1),
                Datum::Bool(true) => buf.push(2),
                Datum::Int(i) => {
                    buf.push(3);
                    buf.extend_from_slice(&i.to_le_bytes());
                }
                Datum::String(s) => {
                    buf.push(4);
                    // A string over 4 GiB cannot be in a row: parts are far smaller.
                    let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
                    buf.extend_from_slice(&len.to_le_bytes());
                    buf.extend_from_slice(s.as_bytes());
                }
            }
        }
    }
    fn decode(mut buf: &[u8]) -> Result<Self, CodecError> {
        let err = |message: String| CodecError {
            codec: "Row",
            message,
        };
        let mut datums = Vec::new();
        while let Some((&tag, rest)) = buf.split_first() {
            buf = rest;
            let datum = match tag {
                0 => Datum::Null,
                1 => Datum::Bool(false),
                2 => Datum::Bool(true),
                3 => {
                    let (n, rest) = split(buf, 8).ok_or_else(|| err("truncated int".into()))?;
                    buf = rest;
                    Datum::Int(i64::from_le_bytes(n.try_into().expect("8 bytes")))
                }
                4 => {
                    let (n, rest) = split(buf, 4).ok_or_else(|| err("truncated length".into()))?;
                    let len = u32::from_le_bytes(n.try_into().expect("4 bytes")) as usize;
                    let (s, rest) =
                        split(rest, len).ok_or_else(|| err("truncated string".into()))?;
                    buf = rest;
                    Datum::String(
                        String::from_utf8(s.to_vec())
                            .map_err(|e| err(format!("string not UTF-8: {e}")))?,
                    )
                }
                other => return Err(err(format!("unknown datum tag {other}"))),
            };
            datums.push(datum);
        }
        Ok(Row(datums))
    }
}

fn split(buf: &[u8], n: usize) -> Option<(&[u8], &[u8])> {
    (buf.len() >= n).then(|| buf.split_at(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<C: Codec + PartialEq>(value: C) {
        let mut buf = Vec::new();
        value.encode(&mut buf);
        assert_eq!(C::decode(&buf).unwrap(), value);
    }

    #[test]
    fn codecs_round_trip() {
        round_trip("héllo".to_string());
        round_trip(vec![0u8, 255, 7]);
        round_trip(());
        round_trip(Row::new([
            Datum::Null,
            Datum::Bool(true),
            Datum::Bool(false),
            Datum::Int(i64::MIN),
            Datum::String("a\u{0}b".into()),
        ]));
        round_trip(Row::default());
    }

    #[test]
    fn bad_bytes_are_errors() {
        assert!(String::decode(&[0xff, 0xfe]).is_err());
        assert!(<()>::decode(&[1]).is_err());
        assert!(Row::decode(&[9]).is_err());
        assert!(Row::decode(&[3, 1, 2]).is_err());
        assert!(Row::decode(&[4, 5, 0, 0, 0, b'a']).is_err());
        assert!(Row::decode(&[4, 1, 0, 0, 0, 0xff]).is_err());
    }

    #[test]
    fn row_decode_of_arbitrary_bytes_never_panics_and_is_canonical() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..64usize {
            for _ in 0..200 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        (x % 6) as u8
                    })
                    .collect();
                if let Ok(row) = Row::decode(&bytes) {
                    let mut again = Vec::new();
                    row.encode(&mut again);
                    assert_eq!(again, bytes);
                }
            }
        }
    }
}
