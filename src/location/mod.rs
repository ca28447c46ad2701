//! The two external services persist stands on: [`Blob`] (a key-to-bytes map with atomic
//! writes) and [`Consensus`] (a linearizable, versioned register per key).
//!
//! Implementations:
//! - [`mem::MemBlob`] and [`mem::MemConsensus`]: in memory; optionally they take a seeded virtual
//!   latency on the runtime they are given, so that under the simulator concurrent commands
//!   interleave and race as they would against real storage;
//! - `idb::IdbLocation` (wasm32 only): both services in one IndexedDB database;
//! - [`unreliable::UnreliableBlob`] and [`unreliable::UnreliableConsensus`]: a seeded
//!   fault-injecting decorator over any of them;
//! - natively only: `postgres::PostgresConsensus` (a PostgreSQL table),
//!   `object_store::ObjectStoreBlob` (a local directory or S3), and `url`, which opens either
//!   from a URL (`mem://`, `postgres://…`, `file://…`, `s3://…`).
//!
//! Every implementation must pass [`conformance::blob_impl_test`] and
//! [`conformance::consensus_impl_test`], which make the contracts below executable.
//!
//! Errors split by what the caller can do next: a [`ExternalError::Determinate`] error means the
//! operation definitely did not happen (safe to retry as is); an [`ExternalError::Indeterminate`]
//! error means it may or may not have happened (a timeout), so a retry must be idempotent. Both
//! are *transient*: they may heal, and callers retry them with back-off ([`crate::retry`]). An
//! [`ExternalError::Permanent`] error will not heal (bytes that do not decode, a referenced blob
//! that is gone, a connection closed for good): retrying cannot help, so it goes to the caller,
//! and it names the shard (or Consensus key), the seqno or Blob key, and what is wrong. A
//! component that meets one writes nothing more to what it concerns.

use std::fmt;
use std::rc::Rc;

use async_trait::async_trait;
use bytes::Bytes;

pub mod conformance;
pub mod idb_keys;
pub mod mem;
pub mod unreliable;

#[cfg(target_arch = "wasm32")]
pub mod idb;

#[cfg(not(target_arch = "wasm32"))]
pub mod object_store;
#[cfg(not(target_arch = "wasm32"))]
pub mod open_error;
#[cfg(not(target_arch = "wasm32"))]
pub mod open_retry;
#[cfg(not(target_arch = "wasm32"))]
pub mod postgres;
#[cfg(not(target_arch = "wasm32"))]
pub mod url;

/// A version number of a Consensus key, shown as `v<n>`. Consensus accepts only seqnos in
/// `[0, i64::MAX]`; persist starts a shard at `SeqNo(1)` and adds one per command.
#[derive(
    Debug,
    Default,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct SeqNo(pub u64);

impl SeqNo {
    /// The smallest seqno.
    pub const fn minimum() -> SeqNo {
        SeqNo(0)
    }

    /// The largest seqno Consensus accepts (`i64::MAX`, the limit of SQL-backed implementations).
    pub const fn maximum() -> SeqNo {
        SeqNo(i64::MAX as u64)
    }

    /// The next seqno, or `None` past the largest one Consensus accepts ([`SeqNo::maximum`]).
    /// Seqnos come from stored bytes, so this never overflows or wraps.
    pub fn checked_next(self) -> Option<SeqNo> {
        (self < SeqNo::maximum()).then(|| SeqNo(self.0 + 1))
    }

    /// The next seqno, saturating at `u64::MAX` (which no Consensus accepts, so a version
    /// written there is refused rather than wrapping onto an old one). Code holding a seqno that
    /// came from stored bytes uses [`SeqNo::checked_next`] and turns `None` into an error.
    pub fn next(self) -> SeqNo {
        SeqNo(self.0.saturating_add(1))
    }
}

impl fmt::Display for SeqNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// `limit` for [`Consensus::scan`] meaning "all of them".
pub const SCAN_ALL: usize = i64::MAX as usize;

/// One version of a Consensus key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedData {
    /// The version number.
    pub seqno: SeqNo,
    /// The opaque payload.
    pub data: Bytes,
}

/// The outcome of a [`Consensus::compare_and_set`] that ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CaSResult {
    /// The new version is now the head.
    Committed,
    /// The head was not the expected one; nothing was written.
    ExpectationMismatch,
}

/// An error from a Blob or Consensus call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExternalError {
    /// The operation definitely did not happen. Safe to retry; may heal.
    #[error("determinate: {0}")]
    Determinate(String),
    /// The operation may or may not have happened (for example, a timeout). May heal.
    #[error("indeterminate: {0}")]
    Indeterminate(String),
    /// Will not heal: see [`PermanentError`]. Never retried.
    #[error("{0}")]
    Permanent(Box<PermanentError>),
}

/// Where a [`PermanentError`] was found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum BrokenAt {
    /// A Consensus version of the shard's key.
    Version(SeqNo),
    /// A Blob key.
    BlobKey(String),
    /// The store as a whole (a connection closed for good, a database deleted).
    Store,
}

impl fmt::Display for BrokenAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BrokenAt::Version(seqno) => write!(f, "version {seqno}"),
            BrokenAt::BlobKey(key) => write!(f, "blob {key}"),
            BrokenAt::Store => f.write_str("the store"),
        }
    }
}

/// What kind of thing is wrong, for callers that branch on it (the message says more).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum PermanentKind {
    /// Stored bytes do not decode (garbage, truncated, empty, a foreign format).
    Undecodable,
    /// Bytes that decode but contradict what they must be (a seqno chain with a gap, a
    /// rollup of another shard, numbers out of range).
    Inconsistent,
    /// Something a live record refers to is gone (a rollup or batch part blob).
    Missing,
    /// The connection to the store is closed for good.
    Closed,
}

/// A failure that will not heal: the caller hears it once, with what it concerns, and nothing
/// more is written to what it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize)]
#[error("shard {shard}, {at}: {kind:?}: {detail} (permanent: will not heal)")]
pub struct PermanentError {
    /// The shard (its Consensus key); below persist, the Consensus key or the store's name.
    pub shard: String,
    /// The seqno or Blob key.
    pub at: BrokenAt,
    /// The kind of problem.
    pub kind: PermanentKind,
    /// What is wrong, in words.
    pub detail: String,
}

impl PermanentError {
    /// A permanent error.
    pub fn new(
        shard: impl Into<String>,
        at: BrokenAt,
        kind: PermanentKind,
        detail: impl Into<String>,
    ) -> Self {
        PermanentError {
            shard: shard.into(),
            at,
            kind,
            detail: detail.into(),
        }
    }
}

impl From<PermanentError> for ExternalError {
    fn from(e: PermanentError) -> Self {
        ExternalError::Permanent(Box::new(e))
    }
}

impl ExternalError {
    /// A determinate error with a message.
    pub fn determinate(msg: impl Into<String>) -> Self {
        ExternalError::Determinate(msg.into())
    }

    /// An indeterminate error with a message.
    pub fn indeterminate(msg: impl Into<String>) -> Self {
        ExternalError::Indeterminate(msg.into())
    }

    /// A permanent error (see [`PermanentError`]).
    pub fn permanent(
        shard: impl Into<String>,
        at: BrokenAt,
        kind: PermanentKind,
        detail: impl Into<String>,
    ) -> Self {
        PermanentError::new(shard, at, kind, detail).into()
    }

    /// Whether this error says the outcome is unknown.
    pub fn is_indeterminate(&self) -> bool {
        matches!(self, ExternalError::Indeterminate(_))
    }

    /// Whether this error may heal (and so is worth retrying with back-off).
    pub fn is_transient(&self) -> bool {
        !self.is_permanent()
    }

    /// Whether this error will not heal.
    pub fn is_permanent(&self) -> bool {
        matches!(self, ExternalError::Permanent(_))
    }

    /// The permanent error, if this is one.
    pub fn as_permanent(&self) -> Option<&PermanentError> {
        match self {
            ExternalError::Permanent(e) => Some(e),
            _ => None,
        }
    }

    /// Whether this is a timeout (its message says "timeout", as in the original).
    pub fn is_timeout(&self) -> bool {
        match self {
            ExternalError::Determinate(m) | ExternalError::Indeterminate(m) => {
                m.contains("timeout")
            }
            ExternalError::Permanent(_) => false,
        }
    }
}

/// A Blob key and the size of its value, as listed by [`Blob::list_keys_and_metadata`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlobMetadata {
    /// The key.
    pub key: String,
    /// The size of its value in bytes.
    pub size_in_bytes: u64,
}

/// A key-to-bytes map with atomic writes.
///
/// Contract (checked by [`conformance::blob_impl_test`]):
/// - `set` is atomic: a concurrent or later `get` sees all of the value or none of it; it may
///   overwrite an existing key (persist only ever writes fresh, unique keys).
/// - `get` of an absent key is `Ok(None)`.
/// - `delete` returns `Some(size)` if the key existed and `None` if not; both are success.
/// - `restore` brings a deleted key back if the implementation can: it succeeds iff the key exists
///   afterwards, and is idempotent. A key never written cannot be restored (an error).
/// - `list_keys_and_metadata(prefix, f)` calls `f` once for every existing key that starts with
///   `prefix`, in no particular order.
/// - Implementations are linearizable.
#[async_trait(?Send)]
pub trait Blob {
    /// The value at `key`, if any.
    async fn get(&self, key: &str) -> Result<Option<Bytes>, ExternalError>;
    /// Calls `f` for each key with `key_prefix`.
    async fn list_keys_and_metadata(
        &self,
        key_prefix: &str,
        f: &mut (dyn FnMut(BlobMetadata) + '_),
    ) -> Result<(), ExternalError>;
    /// Atomically sets `key` to `value`.
    async fn set(&self, key: &str, value: Bytes) -> Result<(), ExternalError>;
    /// Deletes `key`, returning the size of what was there.
    async fn delete(&self, key: &str) -> Result<Option<usize>, ExternalError>;
    /// Un-deletes `key` if possible; succeeds iff the key exists afterwards.
    async fn restore(&self, key: &str) -> Result<(), ExternalError>;
}

/// A linearizable, versioned register per key, with history.
///
/// Contract (checked by [`conformance::consensus_impl_test`]):
/// - `head(key)` is the version with the greatest seqno, or `None` if the key was never written
///   (or every version was truncated away, which persist never does).
/// - `compare_and_set(key, expected, new)` writes `new` iff the head's seqno is exactly `expected`
///   (`None`: the key has no versions). Any other head, including one *behind* `expected`, gives
///   [`CaSResult::ExpectationMismatch`]. `new.seqno <= expected`, or `new.seqno > i64::MAX`, is an
///   error whatever the head (checked before anything is read).
/// - `scan(key, from, limit)` returns up to `limit` versions with seqno `>= from`, ascending; it is
///   empty if the key is absent or `from` is beyond the head.
/// - `truncate(key, seqno)` deletes every version below `seqno` and returns how many it deleted. It
///   errors if `seqno` is beyond the head or the key has no versions. It is idempotent: a repeat
///   deletes nothing and returns 0.
/// - `list_keys` lists every key with versions (for inspection only).
#[async_trait(?Send)]
pub trait Consensus {
    /// The latest version of `key`.
    async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError>;
    /// Writes `new` iff the head's seqno is `expected`.
    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: VersionedData,
    ) -> Result<CaSResult, ExternalError>;
    /// Versions with seqno `>= from`, ascending, at most `limit`.
    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<Vec<VersionedData>, ExternalError>;
    /// Deletes versions below `seqno`, returning how many were deleted.
    async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError>;
    /// Every key with versions.
    async fn list_keys(&self) -> Result<Vec<String>, ExternalError>;
}

/// The argument checks every [`Consensus::compare_and_set`] makes before touching storage.
pub fn validate_compare_and_set(
    expected: Option<SeqNo>,
    new: &VersionedData,
) -> Result<(), ExternalError> {
    if new.seqno > SeqNo::maximum() {
        return Err(ExternalError::determinate(format!(
            "new seqno {} is beyond the maximum {}",
            new.seqno,
            SeqNo::maximum()
        )));
    }
    if let Some(expected) = expected {
        if new.seqno <= expected {
            return Err(ExternalError::determinate(format!(
                "new seqno must be strictly greater than expected: {} <= {}",
                new.seqno, expected
            )));
        }
    }
    Ok(())
}

/// A Blob and a Consensus that live together (one database, one memory, one decorator).
#[derive(Clone)]
pub struct Location {
    /// The Blob service.
    pub blob: Rc<dyn Blob>,
    /// The Consensus service.
    pub consensus: Rc<dyn Consensus>,
}

impl fmt::Debug for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Location").finish_non_exhaustive()
    }
}
