//! The typed errors of the upsert pipeline, the state cells' own ([`StateError`]) among them
//! (besides `UpsertError` in the `types` module, the errors that take a key's place in the
//! output). The bottom of the upsert modules: it imports none of them.
//! Each names what was wrong with the numbers that show it; their messages are the lines the
//! playground and the tests show.

use serde::Serialize;

use crate::persist::error::{PermanentError, PersistError};

/// A cell that does not decode, or a backend that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
pub enum StateError {
    /// The accumulated updates of a key are not a single value or nothing.
    #[error("invalid upsert state for key {key}: {reason}")]
    InvalidState {
        /// The key (short hex), or "?" where it is not known.
        key: String,
        /// What was wrong (the diff sum, a checksum, bytes).
        reason: String,
    },
    /// A method that needs a decoded value found a consolidating one.
    #[error("upsert state for key {key} was used before it was decoded")]
    NotDecoded {
        /// The key (short hex), or "?".
        key: String,
    },
    /// The backend failed.
    #[error("upsert state backend: {0}")]
    Backend(String),
}

/// A row too short for the key columns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("row {row} has no key column {index} (it has {columns} columns)")]
pub struct KeyColumnMissing {
    /// The row, as text.
    pub row: String,
    /// The missing column.
    pub index: usize,
    /// How many columns the row has.
    pub columns: usize,
}

/// An update sent to one of the worker's inputs before that input's time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input} update at {time} is before the input's time {now}")]
pub struct BeforeInputTime {
    /// `source` or `feedback`.
    pub input: &'static str,
    /// The update's time.
    pub time: u64,
    /// The input's time.
    pub now: u64,
}

/// A source update with a diff that is not positive (a source must only add).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid upsert input: diff {diff} at {time} (source updates must have positive diffs)")]
pub struct NonPositiveDiff {
    /// The diff.
    pub diff: i64,
    /// The update's time, as text.
    pub time: String,
}

/// An append to the source log behind its upper or its last message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot append at {ts}: the log is sealed to {upper} and its last message is at {last}")]
pub struct SourceSealed {
    /// The time asked for.
    pub ts: u64,
    /// The log's upper.
    pub upper: u64,
    /// The time of its last message.
    pub last: u64,
}

/// The output shard's contents differ from the reference model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at upper {upper}: the shard holds {actual:?}, the model {expected:?}")]
pub struct ContentsDiffer {
    /// The upper the contents were read at.
    pub upper: u64,
    /// What the shard holds (`row x diff`).
    pub actual: Vec<String>,
    /// What the model holds.
    pub expected: Vec<String>,
}

/// A value's bytes that do not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueDecodeError {
    /// The row's encoding.
    #[error("{0}")]
    Row(String),
    /// The error's encoding.
    #[error("bad error encoding: {0}")]
    Error(String),
    /// A tag other than 0 (a row) and 1 (an error).
    #[error("unknown value tag {0}")]
    UnknownTag(u8),
    /// No bytes at all.
    #[error("empty value")]
    Empty,
}

/// Why the state cells could not be checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CellsError {
    /// A cell does not decode.
    #[error(transparent)]
    State(#[from] StateError),
    /// The operator is gone (its dataflow ended).
    #[error("the operator is gone")]
    OperatorGone,
}

/// Why a replica did not start.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReplicaStartError {
    /// There is no such replica.
    #[error("no replica slot {0}")]
    NoSlot(usize),
    /// Opening its writer or reading the shard's upper failed.
    #[error("{0}")]
    Persist(#[from] PersistError),
    /// Reading the shard's upper met a permanent error.
    #[error("{0}")]
    Permanent(#[from] PermanentError),
}
