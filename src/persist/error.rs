//! The errors of the persist API.
//!
//! Writes return `Result<Result<(), UpperMismatch>, PersistError>`: the inner error is an
//! expected race the caller handles (the shard's upper was not what it expected); the outer one
//! is either a misuse the caller must fix ([`InvalidUsage`], never retried) or a shard that is
//! broken for good ([`PermanentError`]: bytes that do not decode, a referenced blob that is
//! gone, a store closed for good). Transient storage errors never reach the caller: handles retry
//! them with back-off for as long as the caller waits (bound the future with the runtime's
//! `timeout`). A permanent one reaches the caller at once, and from then on this process writes
//! nothing more to the shard: every later command on it answers the same error.

use timely::progress::Antichain;

use super::codec::Timestamp;
use super::ShardId;
pub use crate::location::{BrokenAt, PermanentError, PermanentKind};

/// Why a handle call failed. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PersistError {
    /// The caller's misuse.
    #[error(transparent)]
    InvalidUsage(#[from] InvalidUsage),
    /// The shard is broken for good (not the caller's fault): it names the shard, the seqno or
    /// Blob key, and what is wrong.
    #[error(transparent)]
    Permanent(#[from] PermanentError),
}

impl PersistError {
    /// The permanent error, if this is one.
    pub fn as_permanent(&self) -> Option<&PermanentError> {
        match self {
            PersistError::Permanent(e) => Some(e),
            PersistError::InvalidUsage(_) => None,
        }
    }

    /// The misuse, if this is one.
    pub fn as_invalid_usage(&self) -> Option<&InvalidUsage> {
        match self {
            PersistError::InvalidUsage(e) => Some(e),
            PersistError::Permanent(_) => None,
        }
    }
}

impl From<super::consolidate::DiffOverflow> for PersistError {
    fn from(e: super::consolidate::DiffOverflow) -> Self {
        PersistError::InvalidUsage(e.into())
    }
}

/// The shard's upper was not the expected one; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("upper mismatch: expected {expected:?}, current {current:?}")]
pub struct UpperMismatch {
    /// The upper the caller expected.
    pub expected: Antichain<Timestamp>,
    /// The shard's upper as last seen.
    pub current: Antichain<Timestamp>,
}

/// A misuse of the API, or a state the protocol cannot resolve. Never retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidUsage {
    /// An update's time is not at or beyond the batch's lower.
    #[error("update at {ts} is not beyond the batch lower {lower:?}")]
    UpdateNotBeyondLower {
        /// The update's time.
        ts: Timestamp,
        /// The batch's lower.
        lower: Antichain<Timestamp>,
    },
    /// An update's time is at or beyond the batch's upper.
    #[error("update at {ts} is beyond the batch upper {upper:?}")]
    UpdateBeyondUpper {
        /// The update's time.
        ts: Timestamp,
        /// The batch's upper.
        upper: Antichain<Timestamp>,
    },
    /// `upper < lower`.
    #[error("invalid bounds: lower {lower:?} is beyond upper {upper:?}")]
    InvalidBounds {
        /// The lower.
        lower: Antichain<Timestamp>,
        /// The upper.
        upper: Antichain<Timestamp>,
    },
    /// `upper == lower` with updates in the batch.
    #[error("invalid empty time interval [{lower:?}, {upper:?}) with updates")]
    InvalidEmptyTimeInterval {
        /// The lower.
        lower: Antichain<Timestamp>,
        /// The upper.
        upper: Antichain<Timestamp>,
    },
    /// A batch's bounds do not cover the requested interval (`batch.lower <= expected` and
    /// `new <= batch.upper` must hold: a batch may be truncated, never extended).
    #[error("batch bounds [{batch_lower:?}, {batch_upper:?}) do not cover [{append_lower:?}, {append_upper:?})")]
    InvalidBatchBounds {
        /// The batch's lower.
        batch_lower: Antichain<Timestamp>,
        /// The batch's upper.
        batch_upper: Antichain<Timestamp>,
        /// The interval's lower.
        append_lower: Antichain<Timestamp>,
        /// The interval's upper.
        append_upper: Antichain<Timestamp>,
    },
    /// The batch was written for another shard.
    #[error("batch of shard {batch_shard} cannot be appended to shard {handle_shard}")]
    BatchNotFromThisShard {
        /// The batch's shard.
        batch_shard: ShardId,
        /// The handle's shard.
        handle_shard: ShardId,
    },
    /// The shard was created with other codecs.
    #[error("codec mismatch: the shard stores {stored}, this handle uses {requested}")]
    CodecMismatch {
        /// The codecs the shard was created with.
        stored: String,
        /// The codecs this handle asked for.
        requested: String,
    },
    /// The handle's lease expired (or it was expired explicitly): open a new one.
    #[error("{what} {id} has expired (lease ran out, or expire() was called)")]
    Expired {
        /// "reader" or "writer".
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// A compare_and_append whose outcome cannot be told: a lost acknowledgement plus a writer
    /// whose own upper is already past this batch. The original panics here; we report it.
    #[error("cannot tell whether compare_and_append of [{lower:?}, {upper:?}) committed")]
    IndeterminateOutcome {
        /// The batch's lower.
        lower: Antichain<Timestamp>,
        /// The batch's upper.
        upper: Antichain<Timestamp>,
    },
    /// The requested read is before the shard's since: its history was compacted away.
    #[error("as_of {as_of:?} is before the since {since:?}")]
    SinceViolation {
        /// The requested time.
        as_of: Antichain<Timestamp>,
        /// The shard's (or handle's) since.
        since: Antichain<Timestamp>,
    },
    /// The diffs of one update sum outside the 64-bit range (in a batch being written, or in
    /// what the shard holds at a read).
    #[error("{0}")]
    DiffOverflow(#[from] super::consolidate::DiffOverflow),
    /// `finalize_shard` on a shard whose upper is not empty, or whose since is held by readers.
    #[error("shard cannot be finalized: upper {upper:?} and since {since:?} must both be empty (the since may stay open only with no readers)")]
    NotFinalizable {
        /// The shard's upper.
        upper: Antichain<Timestamp>,
        /// The shard's since.
        since: Antichain<Timestamp>,
    },
    /// Bytes the caller handed in could not be decoded (a transmittable batch). Stored bytes
    /// that do not decode are a [`PermanentError`] instead.
    #[error("corrupted data: {0}")]
    Corrupted(String),
}
