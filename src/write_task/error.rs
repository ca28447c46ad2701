//! What a command's responder hears when its change was not (known to be) made durable.

use serde::Serialize;

use crate::location::PermanentError;
use crate::persist::codec::Timestamp;

/// Why a command was not (known to be) made durable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[non_exhaustive]
pub enum WriteTaskError {
    /// The task is read-only: `desired` took the change, but nothing is written.
    #[error(
        "collection {id} is read-only: the change is kept in its desired state but not written"
    )]
    ReadOnly {
        /// The collection.
        id: String,
    },
    /// The task is shutting down (the original's `IdentifierInvalid`): the change was not applied.
    #[error("collection {id} is shutting down: the change was not applied")]
    ShuttingDown {
        /// The collection.
        id: String,
    },
    /// The write's retries were spent on upper mismatches or timeouts. The change is in
    /// `desired` and a later write (a command or the upper tick) will carry it.
    #[error("collection {id}: not durable after {attempts} attempts (last known upper {current_upper:?}); the change stays in the desired state for a later write")]
    InvalidUppers {
        /// The collection.
        id: String,
        /// Attempts made.
        attempts: u32,
        /// The shard's upper as last seen.
        current_upper: Option<Timestamp>,
    },
    /// The shard is finished (its upper is the empty frontier): nothing more can be written.
    #[error("collection {id}: the shard is finished; nothing more can be written")]
    ShardFinished {
        /// The collection.
        id: String,
    },
    /// The shard, or its store, is broken for good (state that does not decode, a blob that
    /// is gone, a connection closed for good): persist answered a permanent error, which names
    /// what is broken. The task ended at once and writes nothing more; the change was not
    /// written.
    #[error("collection {id}: the shard is broken for good ({error}); the change was not written")]
    ShardBroken {
        /// The collection.
        id: String,
        /// What persist found broken.
        error: PermanentError,
    },
    /// The task ended for another reason before the change was durable.
    #[error("collection {id}: the write task ended ({reason}); the change was not written")]
    TaskEnded {
        /// The collection.
        id: String,
        /// Why it ended.
        reason: String,
    },
    /// The task was aborted (its handle dropped) before the change was known durable.
    #[error("collection {id}: the write task was aborted; the change may or may not be durable")]
    Aborted {
        /// The collection.
        id: String,
    },
    /// The command itself is invalid (a diff overflow); nothing changed.
    #[error("collection {id}: command rejected: {message}")]
    InvalidCommand {
        /// The collection.
        id: String,
        /// What was wrong.
        message: String,
    },
    /// [`DifferentialWriteTask::spawn`](super::DifferentialWriteTask::spawn) was given a bad configuration.
    #[error("invalid write task configuration: {0}")]
    InvalidConfig(String),
}
