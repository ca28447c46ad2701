//! The data the upsert operator reads and writes: keys, values, errors, health, and the output
//! shard's codec.
//!
//! - [`UpsertKey`] is a stable 128-bit hash of the key columns (two seeded seahash passes over the
//!   key's canonical [`Row`] encoding). No process-seeded hasher is involved, so a key hashes the
//!   same on wasm32 and natively, in every process and every run: replicas agree on keys without
//!   talking to each other. (The original uses SHA-256; a teaching shard of thousands of keys
//!   needs no cryptographic strength, only stability and a negligible collision chance.)
//! - [`UpsertValue`] is `Result<Row, UpsertError>`: a decoded value, or an error that belongs to
//!   a key and so can be retracted when the key gets a good value again.
//! - [`SourceData`] is what the output shard stores, `Result<Row, DataflowError>`, with a
//!   versioned binary encoding; decoding bad bytes is an error, never a panic.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::KeyColumnMissing;
use crate::persist::codec::{Codec, CodecError, Datum, Row};

/// A stable hash of the key columns of a row. See the module docs.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct UpsertKey(pub [u8; 16]);

// Two fixed seed quadruples: the hash is a pure function of the bytes, on every platform.
const KEY_SEEDS_HI: (u64, u64, u64, u64) = (
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
);
const KEY_SEEDS_LO: (u64, u64, u64, u64) = (
    0x4528_21e6_38d0_1377,
    0xbe54_66cf_34e9_0c6c,
    0xc0ac_29b7_c97c_50dd,
    0x3f84_d5b5_b547_0917,
);

impl UpsertKey {
    /// The key of a key row (the key columns alone, in order).
    pub fn from_key(key: &Row) -> UpsertKey {
        let mut buf = Vec::with_capacity(16);
        key.encode(&mut buf);
        Self::from_encoded(&buf)
    }

    /// The key of the canonical encoding of a key row.
    pub fn from_encoded(bytes: &[u8]) -> UpsertKey {
        let (a, b, c, d) = KEY_SEEDS_HI;
        let hi = seahash::hash_seeded(bytes, a, b, c, d);
        let (a, b, c, d) = KEY_SEEDS_LO;
        let lo = seahash::hash_seeded(bytes, a, b, c, d);
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&hi.to_be_bytes());
        out[8..].copy_from_slice(&lo.to_be_bytes());
        UpsertKey(out)
    }

    /// The key of a value as it appears in the output: the key columns of a good row (at
    /// `key_indices`), or the key an error belongs to. A row too short for `key_indices` is an
    /// error naming the missing column.
    pub fn from_value(
        value: Result<&Row, &UpsertError>,
        key_indices: &[usize],
    ) -> Result<UpsertKey, KeyColumnMissing> {
        match value {
            Ok(row) => {
                let key = key_of_row(row, key_indices)?;
                Ok(Self::from_key(&key))
            }
            Err(UpsertError::Value { for_key, .. }) => Ok(Self::from_key(for_key)),
        }
    }

    /// The first eight bytes, for routing (timely's exchange) and in-memory hash maps.
    pub fn hashed(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(b)
    }

    /// A short hex form for display (the first six bytes).
    pub fn short(&self) -> String {
        self.0[..6].iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Debug for UpsertKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UpsertKey({})", self.short())
    }
}

/// The key columns of `row` at `key_indices`, in that order.
pub fn key_of_row(row: &Row, key_indices: &[usize]) -> Result<Row, KeyColumnMissing> {
    let mut datums = Vec::with_capacity(key_indices.len());
    for &i in key_indices {
        match row.0.get(i) {
            Some(d) => datums.push(d.clone()),
            None => {
                return Err(KeyColumnMissing {
                    row: row.to_string(),
                    index: i,
                    columns: row.0.len(),
                })
            }
        }
    }
    Ok(Row(datums))
}

/// An error that belongs to a key: it takes the key's place in the output until the key gets a
/// good value (or is deleted), when it is retracted like any value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum UpsertError {
    /// The value for `for_key` could not be decoded.
    Value {
        /// The key columns the value belonged to.
        for_key: Row,
        /// What was wrong.
        message: String,
    },
}

impl fmt::Display for UpsertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpsertError::Value { for_key, message } => {
                write!(f, "value for key {for_key}: {message}")
            }
        }
    }
}

/// A value on the source input or in the state: a row, or an error for its key.
pub type UpsertValue = Result<Row, UpsertError>;

/// Errors of the envelope stage, of which only [`EnvelopeError::Upsert`] belongs to a key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EnvelopeError {
    /// An upsert error (retractable: it has a key).
    Upsert(UpsertError),
    /// Any other envelope error (not keyed: the upsert operator ignores it on feedback).
    Flat(String),
}

/// Every error a dataflow may put into its output.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum DataflowError {
    /// An error of the envelope stage.
    EnvelopeError(EnvelopeError),
    /// A decoding error upstream of the envelope (not keyed).
    DecodeError(String),
}

impl From<UpsertError> for DataflowError {
    fn from(e: UpsertError) -> Self {
        DataflowError::EnvelopeError(EnvelopeError::Upsert(e))
    }
}

impl fmt::Display for DataflowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataflowError::EnvelopeError(EnvelopeError::Upsert(e)) => write!(f, "upsert: {e}"),
            DataflowError::EnvelopeError(EnvelopeError::Flat(s)) => write!(f, "envelope: {s}"),
            DataflowError::DecodeError(s) => write!(f, "decode: {s}"),
        }
    }
}

/// The health of an operator, reported on its health stream.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HealthStatusUpdate {
    /// All is well.
    Running,
    /// The operator stopped: `error` says why; `should_halt` asks the host to stop the replica.
    Stalled {
        /// What went wrong.
        error: String,
        /// A hint for the user, if any.
        hint: Option<String>,
        /// Whether the replica should halt (and be restarted by its host).
        should_halt: bool,
    },
}

/// One update of the output shard: a row, or an error.
///
/// Encoding (version 1): one tag byte, `0` followed by the [`Row`] encoding, or `1` followed by
/// the bincode encoding of the [`DataflowError`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SourceData(pub Result<Row, DataflowError>);

impl Codec for SourceData {
    fn codec_name() -> &'static str {
        "SourceData.v1"
    }
    fn encode(&self, buf: &mut Vec<u8>) {
        match &self.0 {
            Ok(row) => {
                buf.push(0);
                row.encode(buf);
            }
            Err(e) => {
                buf.push(1);
                // Plain data into a Vec: bincode cannot fail here.
                bincode::serialize_into(&mut *buf, e).expect("bincode into a Vec");
            }
        }
    }
    fn decode(buf: &[u8]) -> Result<Self, CodecError> {
        let err = |message: String| CodecError {
            codec: "SourceData.v1",
            message,
        };
        match buf.split_first() {
            Some((0, rest)) => Ok(SourceData(Ok(Row::decode(rest)?))),
            Some((1, rest)) => bincode::deserialize(rest)
                .map(|e| SourceData(Err(e)))
                .map_err(|e| err(format!("bad error encoding: {e}"))),
            Some((tag, _)) => Err(err(format!("unknown tag {tag}"))),
            None => Err(err("empty".into())),
        }
    }
}

/// A row of an integer key and a string value: the shape the generator and the tests use
/// (`key_indices = [0]`).
pub fn kv_row(key: i64, value: &str) -> Row {
    Row::new([Datum::Int(key), Datum::String(value.to_string())])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_distinct() {
        let k = |i: i64| UpsertKey::from_key(&Row::new([Datum::Int(i)]));
        // Pinned: the hash must never change between platforms or versions.
        assert_eq!(k(0), k(0));
        assert_ne!(k(0), k(1));
        assert_eq!(k(42).short(), "fa03d4a33fb9");
        let all: std::collections::BTreeSet<_> = (0..10_000).map(k).collect();
        assert_eq!(all.len(), 10_000);
    }

    #[test]
    fn value_keys_match_key_rows_and_errors() {
        let row = kv_row(7, "x");
        let key = UpsertKey::from_key(&Row::new([Datum::Int(7)]));
        assert_eq!(UpsertKey::from_value(Ok(&row), &[0]), Ok(key));
        let e = UpsertError::Value {
            for_key: Row::new([Datum::Int(7)]),
            message: "bad".into(),
        };
        assert_eq!(UpsertKey::from_value(Err(&e), &[0]), Ok(key));
        assert!(UpsertKey::from_value(Ok(&row), &[5]).is_err());
    }

    #[test]
    fn source_data_round_trips_and_rejects_garbage() {
        for d in [
            SourceData(Ok(kv_row(1, "a"))),
            SourceData(Err(UpsertError::Value {
                for_key: Row::new([Datum::Int(1)]),
                message: "m".into(),
            }
            .into())),
            SourceData(Err(DataflowError::DecodeError("d".into()))),
        ] {
            let mut buf = Vec::new();
            d.encode(&mut buf);
            assert_eq!(SourceData::decode(&buf).unwrap(), d);
        }
        assert!(SourceData::decode(&[]).is_err());
        assert!(SourceData::decode(&[9]).is_err());
        assert!(SourceData::decode(&[1, 200, 200]).is_err());
    }
}
