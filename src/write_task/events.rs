//! Plain records of everything a write task does, for the playground to render and tests to
//! assert on. Frontiers appear as `Option<u64>` (`None` is the empty frontier: "finished").
//!
//! The order of events of one task follows its loop:
//!
//! ```text
//! Spawned [Prepared]
//! ( CommandReceived+ (ReadOnlyRejected | write)
//! | Ticked write
//! )* [ShutDown] Ended
//!
//! write   = ( WriteAttempted ( Committed
//!                            | Mismatch [Resynced | ResyncFailed]
//!                            | AttemptTimedOut ) )+ [GaveUp]
//! ```
//!
//! A write stops at the first `Committed`, at `GaveUp` once its retries are spent, or when the
//! task ends. Every `Mismatch` that does not end the task is followed by a re-sync attempt. An
//! attempt whose persist call fails for good (the shard is broken, or persist refused it) is
//! followed directly by `Ended`, which says why.

use serde::Serialize;

use crate::event_log::EventLog;

use crate::persist::codec::Timestamp;

/// Why a write was attempted (as data: its name in camelCase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null, rename = "WriteCauseView")
)]
pub enum WriteCause {
    /// Commands changed `desired`.
    Commands,
    /// The upper tick (with nothing pending: an empty batch that only moves the upper).
    Tick,
    /// The upper tick found `to_write` pending after a re-sync and writes it (an improvement on
    /// the original, whose tick only ever writes an empty batch).
    TickPending,
}

/// A list of updates `(row, diff)` told in signed rows, for a reader who wants to see what a
/// write adds and what it retracts: `adds` updates with a positive diff, `retractions` with a
/// negative one (`adds + retractions` is the number of updates), and the first
/// [`SignedRows::SHOWN`] of them as `"+1 (row)"` / `"-1 (row)"`, in `to_write`'s order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null, rename = "SignedRowsView")
)]
pub struct SignedRows {
    /// Updates with a positive diff.
    pub adds: u64,
    /// Updates with a negative diff.
    pub retractions: u64,
    /// The first few updates, each as its signed diff and its row.
    pub shown: Vec<String>,
}

impl SignedRows {
    /// How many updates are written out in `shown`.
    pub const SHOWN: usize = 4;

    /// `n` retractions, none shown.
    pub fn retracting(n: u64) -> Self {
        SignedRows {
            retractions: n,
            ..SignedRows::default()
        }
    }

    /// `updates` in signed rows.
    pub fn of<R: std::fmt::Display>(updates: &[(R, i64)]) -> Self {
        let adds = updates.iter().filter(|(_, d)| *d > 0).count() as u64;
        let retractions = updates.iter().filter(|(_, d)| *d < 0).count() as u64;
        let shown = updates
            .iter()
            .take(Self::SHOWN)
            .map(|(row, d)| format!("{d:+} {row}"))
            .collect();
        SignedRows {
            adds,
            retractions,
            shown,
        }
    }
}

/// One thing a write task did. As data: `type` names the variant in camelCase, fields are
/// camelCase, times and frontiers numbers (`null`: the empty frontier), the fingerprint a
/// `bigint` (see [`crate::numbers`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null, rename = "WriteTaskEventKindView")
)]
pub enum WriteTaskEventKind {
    /// The task started.
    #[serde(rename_all = "camelCase")]
    Spawned {
        /// Whether it is read-only.
        read_only: bool,
        /// The upper tick's period.
        #[serde(serialize_with = "crate::numbers::time")]
        upper_tick_interval_ms: u64,
    },
    /// `prepare` seeded `desired` from what the shard holds.
    #[serde(rename_all = "camelCase")]
    Prepared {
        /// The shard's upper when it was read.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        upper: Option<Timestamp>,
        /// Rows in the shard's snapshot (consolidated).
        shard_rows: u64,
        /// Rows kept in `desired`.
        desired_rows: u64,
        /// Updates left in `to_write` (retractions of rows not kept).
        to_write_rows: u64,
    },
    /// A command arrived and was applied to `desired` (or refused, with `error`).
    #[serde(rename_all = "camelCase")]
    CommandReceived {
        /// "append" or "delete".
        op: String,
        /// Updates appended or rows deleted.
        rows: u64,
        /// Why it was refused, if it was.
        error: Option<String>,
    },
    /// Read-only: the commands changed `desired` but nothing is written; their responders got a
    /// read-only error.
    #[serde(rename_all = "camelCase")]
    ReadOnlyRejected {
        /// How many responders were answered.
        responders: u64,
    },
    /// The upper tick fired with work to do.
    #[serde(rename_all = "camelCase")]
    Ticked {
        /// The upper the task believes the shard has.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        current_upper: Option<Timestamp>,
        /// The clock.
        #[serde(serialize_with = "crate::numbers::time")]
        now_ms: u64,
        /// Updates pending in `to_write`.
        pending: u64,
    },
    /// One `compare_and_append` of `to_write` at `[expected_upper, new_upper)`.
    #[serde(rename_all = "camelCase")]
    WriteAttempted {
        /// Why.
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "WriteCauseView")
        )]
        cause: WriteCause,
        /// 1 for the first attempt of this write.
        attempt: u32,
        /// The upper the task expects (its `current_upper`); every update is written at this time.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        expected_upper: Option<Timestamp>,
        /// `max(now, current_upper + 1)`.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        new_upper: Option<Timestamp>,
        /// Updates carried.
        updates: u64,
        /// Responders waiting on this write.
        responders: u64,
        /// The updates carried, in signed rows: how many add a row and how many retract one,
        /// with the first few rows (see [`SignedRows`]).
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "SignedRowsView")
        )]
        rows: SignedRows,
    },
    /// The attempt committed: the shard at `new_upper - 1` equals `desired`.
    #[serde(rename_all = "camelCase")]
    Committed {
        /// Why the write was made.
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "WriteCauseView")
        )]
        cause: WriteCause,
        /// Its lower.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        expected_upper: Option<Timestamp>,
        /// Its upper, now the shard's.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        new_upper: Option<Timestamp>,
        /// Updates carried.
        updates: u64,
        /// Responders answered `Ok`.
        responders: u64,
        /// Rows in `desired`.
        desired_rows: u64,
        /// [`super::ops::fingerprint`] of `desired`, which the shard now equals.
        #[serde(serialize_with = "crate::numbers::bigint")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint")
        )]
        desired_fingerprint: u64,
    },
    /// Someone else moved the shard's upper: the attempt wrote nothing.
    #[serde(rename_all = "camelCase")]
    Mismatch {
        /// The upper the task expected.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        expected_upper: Option<Timestamp>,
        /// The shard's upper.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        current_upper: Option<Timestamp>,
    },
    /// `sync_to_persist`: the task adopted `upper` and set `to_write = desired - snapshot`.
    #[serde(rename_all = "camelCase")]
    Resynced {
        /// The adopted upper.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        upper: Option<Timestamp>,
        /// The snapshot's time: `upper - 1`, or the shard's since once that has passed it (see
        /// `persist::contents`); `None` when the upper is 0 and nothing can be there.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        as_of: Option<Timestamp>,
        /// Rows in the snapshot.
        snapshot_rows: u64,
        /// Rows in `desired`.
        desired_rows: u64,
        /// Updates in the new `to_write`.
        to_write_rows: u64,
        /// The new `to_write` in signed rows (see [`SignedRows`]).
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "SignedRowsView")
        )]
        to_write: SignedRows,
    },
    /// A re-sync could not read the shard in time; the task keeps its old upper (so the next
    /// attempt mismatches again and re-syncs again).
    #[serde(rename_all = "camelCase")]
    ResyncFailed {
        /// Why.
        reason: String,
    },
    /// An attempt did not finish within the attempt timeout and was cancelled (it may or may
    /// not have committed; the next attempt finds out through the upper).
    #[serde(rename_all = "camelCase")]
    AttemptTimedOut {
        /// The attempt's lower.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        expected_upper: Option<Timestamp>,
        /// The timeout.
        #[serde(serialize_with = "crate::numbers::time")]
        after_ms: u64,
    },
    /// The write's retries are spent: its responders got an error, and `to_write` stays pending
    /// for a later write (a command or the tick).
    #[serde(rename_all = "camelCase")]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// Responders answered with the error.
        responders: u64,
    },
    /// The shutdown signal arrived; every queued command was answered with an error.
    #[serde(rename_all = "camelCase")]
    ShutDown {
        /// Queued commands answered.
        answered: u64,
    },
    /// The task ended.
    #[serde(rename_all = "camelCase")]
    Ended {
        /// Why.
        reason: String,
    },
}

/// An event with its task and time (as data: `{ task, atMs, event }`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null, rename = "WriteTaskEventView")
)]
pub struct WriteTaskEvent {
    /// The collection the task writes.
    pub task: String,
    /// When it happened, on the runtime's clock.
    #[serde(serialize_with = "crate::numbers::time")]
    pub at_ms: u64,
    /// What happened.
    #[serde(rename = "event")]
    #[cfg_attr(
        all(feature = "library", target_arch = "wasm32"),
        tsify(type = "WriteTaskEventKindView")
    )]
    pub kind: WriteTaskEventKind,
}

/// A shared, bounded, numbered log of write-task events (the crate's one event log). Clones
/// share it; several tasks may share one, and it can share its numbering with a persist client's
/// or an oracle's log ([`EventLog::sharing_seq`]).
pub type WriteTaskLog = EventLog<WriteTaskEvent>;

/// The events of the task `task` in `log`, oldest first.
pub fn events_of(log: &WriteTaskLog, task: &str) -> Vec<WriteTaskEvent> {
    log.events_where(|e| e.task == task)
}

/// An event that breaks the grammar in the module docs (see [`check_event_order`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event {index} ({event}): {rule}")]
pub struct EventOrderError {
    /// Its index in the events checked.
    pub index: usize,
    /// The event, as `Debug` shows it (`None` past the end).
    pub event: String,
    /// The rule it breaks.
    pub rule: &'static str,
}

/// Checks that one task's events follow the grammar in the module docs, and that commits advance
/// the upper. A task still running (`ended == false`) may stop anywhere. For tests and the
/// playground's consistency checks.
pub fn check_event_order(events: &[WriteTaskEvent], ended: bool) -> Result<(), EventOrderError> {
    use WriteTaskEventKind as K;
    let fail = |index: usize, rule: &'static str| {
        Err(EventOrderError {
            index,
            event: format!("{:?}", events.get(index)),
            rule,
        })
    };
    if !matches!(events.first().map(|e| &e.kind), Some(K::Spawned { .. })) {
        return fail(0, "a task starts with Spawned");
    }
    if ended && !matches!(events.last().map(|e| &e.kind), Some(K::Ended { .. })) {
        return fail(events.len().saturating_sub(1), "a task ends with Ended");
    }
    let mut last_upper: Option<u64> = None;
    for (i, e) in events.iter().enumerate() {
        if i > 0 && e.at_ms < events[i - 1].at_ms {
            return fail(i, "time went back");
        }
        let next = events.get(i + 1).map(|n| &n.kind);
        if next.is_none() && !ended {
            break;
        }
        match &e.kind {
            K::WriteAttempted { expected_upper, .. } => match next {
                Some(K::Committed {
                    expected_upper: c,
                    new_upper,
                    ..
                }) => {
                    if c != expected_upper {
                        return fail(i, "the commit is not of the attempted interval");
                    }
                    if new_upper <= &last_upper {
                        return fail(i, "a commit's new upper did not advance");
                    }
                    last_upper = *new_upper;
                }
                Some(K::Mismatch {
                    expected_upper: m, ..
                }) if m == expected_upper => {}
                Some(K::AttemptTimedOut { .. }) => {}
                // Persist failed for good: the task ended at once.
                Some(K::Ended { .. }) => {}
                _ => return fail(i, "an attempt is followed by its outcome"),
            },
            K::Mismatch {
                expected_upper,
                current_upper,
            } => {
                if current_upper <= expected_upper && current_upper.is_some() {
                    return fail(i, "a mismatch reports an upper beyond the expected one");
                }
                if !matches!(
                    next,
                    Some(
                        K::Resynced { .. }
                            | K::ResyncFailed { .. }
                            | K::GaveUp { .. }
                            | K::Ended { .. }
                    )
                ) {
                    return fail(
                        i,
                        "a mismatch is followed by its re-sync (or the end of the write)",
                    );
                }
            }
            K::Resynced { upper, as_of, .. } => {
                if !matches!(events.get(i.wrapping_sub(1)).map(|p| &p.kind), Some(K::Mismatch { current_upper, .. }) if current_upper == upper)
                {
                    return fail(i, "a re-sync adopts the upper its mismatch reported");
                }
                // At upper - 1, or at a since that has passed it.
                let below = upper.and_then(|u| u.checked_sub(1));
                if below.is_some() != as_of.is_some() || *as_of < below {
                    return fail(i, "a re-sync reads at upper - 1 (or the since past it)");
                }
            }
            K::Ticked { .. } if !matches!(next, Some(K::WriteAttempted { .. })) => {
                return fail(i, "a tick with work writes");
            }
            K::ShutDown { .. } if !matches!(next, Some(K::Ended { .. })) => {
                return fail(i, "shutdown ends the task");
            }
            K::Ended { .. } if i + 1 != events.len() => {
                return fail(i, "nothing follows Ended");
            }
            _ => {}
        }
    }
    Ok(())
}
