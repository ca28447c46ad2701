//! The stored record of a durable oracle: its epoch and its durable upper, as a small versioned
//! binary format.
//!
//! Layout of format version 1 (19 bytes, integers big-endian):
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..2 | the magic `b"to"` (timestamp oracle), so that a foreign record is told apart |
//! | 2 | the format version, `1` |
//! | 3..11 | `epoch`, a `u64`, at least 1 |
//! | 11..19 | `upper`, a `u64` |
//!
//! Decoding never panics: anything else is a [`DecodeError`] saying what is wrong.

use bytes::Bytes;
use serde::Serialize;

const MAGIC: &[u8; 2] = b"to";
const VERSION_1: u8 = 1;
const LEN_V1: usize = 19;

/// What one Consensus version of an oracle's key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DurableRecord {
    /// The epoch of the instance that wrote it. Each starting instance bumps it; epochs never go
    /// back. Always at least 1.
    pub epoch: u64,
    /// The durable upper: every timestamp any instance has handed out is below it, or it is
    /// `u64::MAX` (saturated: timestamps up to and including `u64::MAX` may have been handed out).
    pub upper: u64,
}

/// Why bytes are not a [`DurableRecord`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Too short to hold the magic and the version.
    #[error("{len} bytes are too short for an oracle record")]
    TooShort {
        /// The length found.
        len: usize,
    },
    /// The record does not start with the oracle's magic: it is not an oracle record.
    #[error("not an oracle record (magic {found:?}, expected {:?})", MAGIC)]
    BadMagic {
        /// The first two bytes.
        found: [u8; 2],
    },
    /// A format version this code does not know (written by a newer version, or corrupted).
    #[error("unsupported oracle record format version {0}")]
    UnsupportedVersion(u8),
    /// The length does not match the version's layout.
    #[error("an oracle record of format version {version} is {expected} bytes, not {len}")]
    WrongLength {
        /// The format version.
        version: u8,
        /// The length the version requires.
        expected: usize,
        /// The length found.
        len: usize,
    },
    /// Epoch 0 is never written (the first instance takes epoch 1).
    #[error("an oracle record never has epoch 0")]
    ZeroEpoch,
}

impl DurableRecord {
    /// The record as bytes, in the current format version.
    pub fn encode(&self) -> Bytes {
        let DurableRecord { epoch, upper } = *self;
        let mut out = Vec::with_capacity(LEN_V1);
        out.extend_from_slice(MAGIC);
        out.push(VERSION_1);
        out.extend_from_slice(&epoch.to_be_bytes());
        out.extend_from_slice(&upper.to_be_bytes());
        debug_assert_eq!(out.len(), LEN_V1);
        Bytes::from(out)
    }

    /// Reads a record written by [`DurableRecord::encode`].
    pub fn decode(bytes: &[u8]) -> Result<DurableRecord, DecodeError> {
        let len = bytes.len();
        let [m0, m1, version, rest @ ..] = bytes else {
            return Err(DecodeError::TooShort { len });
        };
        if [*m0, *m1] != *MAGIC {
            return Err(DecodeError::BadMagic { found: [*m0, *m1] });
        }
        if *version != VERSION_1 {
            return Err(DecodeError::UnsupportedVersion(*version));
        }
        let (Some(epoch), Some(upper), true) = (
            rest.get(0..8).and_then(be_u64),
            rest.get(8..16).and_then(be_u64),
            len == LEN_V1,
        ) else {
            return Err(DecodeError::WrongLength {
                version: VERSION_1,
                expected: LEN_V1,
                len,
            });
        };
        if epoch == 0 {
            return Err(DecodeError::ZeroEpoch);
        }
        Ok(DurableRecord { epoch, upper })
    }
}

fn be_u64(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for (epoch, upper) in [(1, 0), (7, 12_345), (u64::MAX, u64::MAX)] {
            let r = DurableRecord { epoch, upper };
            let bytes = r.encode();
            assert_eq!(bytes.len(), LEN_V1);
            assert_eq!(DurableRecord::decode(&bytes), Ok(r));
        }
    }

    #[test]
    fn the_layout_is_stable() {
        let bytes = DurableRecord {
            epoch: 2,
            upper: 0x0102,
        }
        .encode();
        let mut expected = b"to\x01".to_vec();
        expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 2]);
        expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(&bytes[..], &expected[..]);
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        let good = DurableRecord { epoch: 3, upper: 9 }.encode().to_vec();
        // Every truncation.
        for len in 0..good.len() {
            assert!(DurableRecord::decode(&good[..len]).is_err(), "len {len}");
        }
        // An extra byte.
        let mut long = good.clone();
        long.push(0);
        assert_eq!(
            DurableRecord::decode(&long),
            Err(DecodeError::WrongLength {
                version: 1,
                expected: 19,
                len: 20
            })
        );
        // Every single-byte corruption of the header, and epoch 0.
        let mut bad = good.clone();
        bad[0] = b'x';
        assert!(matches!(
            DurableRecord::decode(&bad),
            Err(DecodeError::BadMagic { .. })
        ));
        let mut bad = good.clone();
        bad[2] = 9;
        assert_eq!(
            DurableRecord::decode(&bad),
            Err(DecodeError::UnsupportedVersion(9))
        );
        let zero = DurableRecord { epoch: 0, upper: 1 }.encode();
        assert_eq!(DurableRecord::decode(&zero), Err(DecodeError::ZeroEpoch));
        // Foreign data and every short prefix of arbitrary bytes.
        assert!(DurableRecord::decode(b"{\"seqno\": 3}").is_err());
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..64 {
            let junk: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = DurableRecord::decode(&junk);
        }
        assert!(DecodeError::TooShort { len: 1 }
            .to_string()
            .contains("too short"));
    }
}
