//! A write task's events as JavaScript sees them: the core's [`WriteTaskEvent`] with camelCase
//! fields, `type` naming the kind, times as numbers. Every field is destructured, so a field
//! the core adds fails to compile here until the view shows it.

use serde::Serialize;
use tsify::Tsify;

use super::convert::{ms, opt_ms};
use super::errors::LibResult;
use crate::write_task::{WriteCause, WriteTaskEvent, WriteTaskEventKind};

/// Why a write was attempted: commands changed the desired collection, the upper tick moved the
/// upper, or the tick wrote what a re-sync left pending.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
#[allow(missing_docs)]
pub enum WriteCauseView {
    Commands,
    Tick,
    TickPending,
}

impl From<WriteCause> for WriteCauseView {
    fn from(c: WriteCause) -> Self {
        match c {
            WriteCause::Commands => WriteCauseView::Commands,
            WriteCause::Tick => WriteCauseView::Tick,
            WriteCause::TickPending => WriteCauseView::TickPending,
        }
    }
}

/// What a write task did (`type` names the kind; the rest depends on it). Frontiers are
/// `number | null` (`null`: the empty frontier).
#[derive(Serialize, Tsify)]
#[serde(tag = "type", rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
#[allow(missing_docs)]
pub enum WriteTaskEventKindView {
    #[serde(rename_all = "camelCase")]
    Spawned {
        read_only: bool,
        upper_tick_interval_ms: f64,
    },
    #[serde(rename_all = "camelCase")]
    Prepared {
        upper: Option<f64>,
        shard_rows: f64,
        desired_rows: f64,
        to_write_rows: f64,
    },
    #[serde(rename_all = "camelCase")]
    CommandReceived {
        op: String,
        rows: f64,
        error: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ReadOnlyRejected { responders: f64 },
    #[serde(rename_all = "camelCase")]
    Ticked {
        current_upper: Option<f64>,
        now_ms: f64,
        pending: f64,
    },
    #[serde(rename_all = "camelCase")]
    WriteAttempted {
        cause: WriteCauseView,
        attempt: f64,
        expected_upper: Option<f64>,
        new_upper: Option<f64>,
        updates: f64,
        responders: f64,
    },
    #[serde(rename_all = "camelCase")]
    Committed {
        cause: WriteCauseView,
        expected_upper: Option<f64>,
        new_upper: Option<f64>,
        updates: f64,
        responders: f64,
        desired_rows: f64,
        /// A fingerprint of the desired collection (64 bits: a bigint).
        desired_fingerprint: u64,
    },
    #[serde(rename_all = "camelCase")]
    Mismatch {
        expected_upper: Option<f64>,
        current_upper: Option<f64>,
    },
    #[serde(rename_all = "camelCase")]
    Resynced {
        upper: Option<f64>,
        as_of: Option<f64>,
        snapshot_rows: f64,
        desired_rows: f64,
        to_write_rows: f64,
    },
    #[serde(rename_all = "camelCase")]
    ResyncFailed { reason: String },
    #[serde(rename_all = "camelCase")]
    AttemptTimedOut {
        expected_upper: Option<f64>,
        after_ms: f64,
    },
    #[serde(rename_all = "camelCase")]
    GaveUp { attempts: f64, responders: f64 },
    #[serde(rename_all = "camelCase")]
    ShutDown { answered: f64 },
    #[serde(rename_all = "camelCase")]
    Ended { reason: String },
}

/// One thing a write task did.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct WriteTaskEventView {
    /// The collection the task writes.
    pub task: String,
    /// When, on the runtime's clock.
    pub at_ms: f64,
    /// What happened.
    pub event: WriteTaskEventKindView,
}

/// The view of `e`.
pub fn event_view(e: WriteTaskEvent) -> LibResult<WriteTaskEventView> {
    use WriteTaskEventKindView as V;
    let WriteTaskEvent { task, at_ms, kind } = e;
    let t = |t: u64| ms(t, "a time in a write task event");
    let f = |t: Option<u64>| opt_ms(t, "a frontier in a write task event");
    let n = |n: u64| n as f64;
    let event = match kind {
        WriteTaskEventKind::Spawned {
            read_only,
            upper_tick_interval_ms,
        } => V::Spawned {
            read_only,
            upper_tick_interval_ms: t(upper_tick_interval_ms)?,
        },
        WriteTaskEventKind::Prepared {
            upper,
            shard_rows,
            desired_rows,
            to_write_rows,
        } => V::Prepared {
            upper: f(upper)?,
            shard_rows: n(shard_rows),
            desired_rows: n(desired_rows),
            to_write_rows: n(to_write_rows),
        },
        WriteTaskEventKind::CommandReceived { op, rows, error } => V::CommandReceived {
            op,
            rows: n(rows),
            error,
        },
        WriteTaskEventKind::ReadOnlyRejected { responders } => V::ReadOnlyRejected {
            responders: n(responders),
        },
        WriteTaskEventKind::Ticked {
            current_upper,
            now_ms,
            pending,
        } => V::Ticked {
            current_upper: f(current_upper)?,
            now_ms: t(now_ms)?,
            pending: n(pending),
        },
        WriteTaskEventKind::WriteAttempted {
            cause,
            attempt,
            expected_upper,
            new_upper,
            updates,
            responders,
        } => V::WriteAttempted {
            cause: cause.into(),
            attempt: attempt as f64,
            expected_upper: f(expected_upper)?,
            new_upper: f(new_upper)?,
            updates: n(updates),
            responders: n(responders),
        },
        WriteTaskEventKind::Committed {
            cause,
            expected_upper,
            new_upper,
            updates,
            responders,
            desired_rows,
            desired_fingerprint,
        } => V::Committed {
            cause: cause.into(),
            expected_upper: f(expected_upper)?,
            new_upper: f(new_upper)?,
            updates: n(updates),
            responders: n(responders),
            desired_rows: n(desired_rows),
            desired_fingerprint,
        },
        WriteTaskEventKind::Mismatch {
            expected_upper,
            current_upper,
        } => V::Mismatch {
            expected_upper: f(expected_upper)?,
            current_upper: f(current_upper)?,
        },
        WriteTaskEventKind::Resynced {
            upper,
            as_of,
            snapshot_rows,
            desired_rows,
            to_write_rows,
        } => V::Resynced {
            upper: f(upper)?,
            as_of: f(as_of)?,
            snapshot_rows: n(snapshot_rows),
            desired_rows: n(desired_rows),
            to_write_rows: n(to_write_rows),
        },
        WriteTaskEventKind::ResyncFailed { reason } => V::ResyncFailed { reason },
        WriteTaskEventKind::AttemptTimedOut {
            expected_upper,
            after_ms,
        } => V::AttemptTimedOut {
            expected_upper: f(expected_upper)?,
            after_ms: t(after_ms)?,
        },
        WriteTaskEventKind::GaveUp {
            attempts,
            responders,
        } => V::GaveUp {
            attempts: attempts as f64,
            responders: n(responders),
        },
        WriteTaskEventKind::ShutDown { answered } => V::ShutDown {
            answered: n(answered),
        },
        WriteTaskEventKind::Ended { reason } => V::Ended { reason },
    };
    Ok(WriteTaskEventView {
        task,
        at_ms: t(at_ms)?,
        event,
    })
}
