//! The upsert pipeline's plain data as JavaScript sees it: its events, counters and checker
//! report, with camelCase fields, `type` naming an event's kind, and times as numbers. Every
//! field is destructured, so a field the core adds fails to compile here until the view shows it.

use serde::Serialize;
use tsify::Tsify;

use super::convert::{ms, opt_ms};
use super::errors::LibResult;
use crate::persist::codec::Timestamp;
use crate::upsert::observe::{DrainKind, UpsertCounters, UpsertEvent, UpsertEventKind};
use crate::upsert::reference::CheckerReport;

/// Counters of every replica of a pipeline, added.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
#[allow(missing_docs)]
pub struct UpsertCountersView {
    pub source_staged: f64,
    pub source_dropped_before_resume: f64,
    pub persist_ingested: f64,
    pub drains_to_upper: f64,
    pub drains_at_time: f64,
    pub partial_emissions: f64,
    pub drains_skipped: f64,
    pub stash_discarded: f64,
    pub stash_superseded: f64,
    pub skipped_by_order: f64,
    pub emitted: f64,
    pub provisional_written: f64,
    pub provisional_overwritten: f64,
    pub health_errors: f64,
    pub fed_back: f64,
    /// Successful compare_and_appends of the sinks.
    pub sink_appends: f64,
    /// Upper mismatches of the sinks: a peer replica won the range.
    pub sink_mismatches: f64,
    pub sink_dropped: f64,
    pub restarts: f64,
}

impl From<UpsertCounters> for UpsertCountersView {
    fn from(c: UpsertCounters) -> Self {
        let UpsertCounters {
            source_staged,
            source_dropped_before_resume,
            persist_ingested,
            drains_to_upper,
            drains_at_time,
            partial_emissions,
            drains_skipped,
            stash_discarded,
            stash_superseded,
            skipped_by_order,
            emitted,
            provisional_written,
            provisional_overwritten,
            health_errors,
            fed_back,
            sink_appends,
            sink_mismatches,
            sink_dropped,
            restarts,
        } = c;
        let n = |v: u64| v as f64;
        UpsertCountersView {
            source_staged: n(source_staged),
            source_dropped_before_resume: n(source_dropped_before_resume),
            persist_ingested: n(persist_ingested),
            drains_to_upper: n(drains_to_upper),
            drains_at_time: n(drains_at_time),
            partial_emissions: n(partial_emissions),
            drains_skipped: n(drains_skipped),
            stash_discarded: n(stash_discarded),
            stash_superseded: n(stash_superseded),
            skipped_by_order: n(skipped_by_order),
            emitted: n(emitted),
            provisional_written: n(provisional_written),
            provisional_overwritten: n(provisional_overwritten),
            health_errors: n(health_errors),
            fed_back: n(fed_back),
            sink_appends: n(sink_appends),
            sink_mismatches: n(sink_mismatches),
            sink_dropped: n(sink_dropped),
            restarts: n(restarts),
        }
    }
}

/// What the pipeline's checker found: it compares the shard with the reference model (per key,
/// the upsert with the highest offset wins) at every upper the shard reaches.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct CheckerReportView {
    /// Uppers at which the shard was compared with the model.
    pub checks: f64,
    /// The last upper checked.
    pub upper: Option<f64>,
    /// Every difference found (empty: the shard always matched the model).
    pub violations: Vec<String>,
}

impl CheckerReportView {
    /// The view of `r`.
    pub fn new(r: CheckerReport) -> LibResult<Self> {
        let CheckerReport {
            checks,
            upper,
            violations,
            registered: _,
        } = r;
        Ok(CheckerReportView {
            checks: checks as f64,
            upper: opt_ms(upper, "the checker's upper")?,
            violations,
        })
    }
}

/// Which drain of the stash ran: complete times at the persist upper, or the input frontier
/// (partial emission).
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
#[allow(missing_docs)]
pub enum DrainKindView {
    ToUpper,
    AtTime,
}

/// One internal step of a replica or its operator (`type` names it).
#[derive(Serialize, Tsify)]
#[serde(tag = "type", rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
#[allow(missing_docs)]
pub enum UpsertEventKindView {
    #[serde(rename_all = "camelCase")]
    PersistIngested {
        updates: f64,
        persist_upper: Option<f64>,
        last_rehydration_chunk: bool,
    },
    #[serde(rename_all = "camelCase")]
    SourceStaged {
        time: f64,
        staged: f64,
        dropped_before_resume: f64,
        partial_drain_allowed: bool,
    },
    #[serde(rename_all = "camelCase")]
    SourceProgress {
        input_upper: Option<f64>,
        ignored: bool,
    },
    #[serde(rename_all = "camelCase")]
    DrainSkipped {
        persist_upper: Option<f64>,
        largest_seen_persist_ts: f64,
    },
    #[serde(rename_all = "camelCase")]
    Drained {
        drain: DrainKindView,
        time: Option<f64>,
        eligible: f64,
        discarded: f64,
        superseded: f64,
        skipped_by_order: f64,
        emitted: f64,
        provisional_written: f64,
        remaining: f64,
    },
    #[serde(rename_all = "camelCase")]
    HealthError { error: String },
    #[serde(rename_all = "camelCase")]
    Started {
        resume_upper: Option<f64>,
        generation: f64,
    },
    #[serde(rename_all = "camelCase")]
    FedBack { updates: f64, upper: Option<f64> },
    #[serde(rename_all = "camelCase")]
    SinkAppended {
        lower: f64,
        upper: Option<f64>,
        updates: f64,
    },
    #[serde(rename_all = "camelCase")]
    SinkMismatch {
        expected: f64,
        current: Option<f64>,
        dropped: f64,
    },
    #[serde(rename_all = "camelCase")]
    SinkTimedOut {
        lower: f64,
        after_ms: f64,
        retry_in_ms: f64,
    },
    #[serde(rename_all = "camelCase")]
    Crashed { reason: String },
}

/// One event of the pipeline, with its replica (`name#generation`) and time.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct UpsertEventView {
    /// The replica.
    pub who: String,
    /// When, on the runtime's clock.
    pub at_ms: f64,
    /// What happened.
    pub event: UpsertEventKindView,
}

/// The view of `e`.
pub fn event_view(e: UpsertEvent<Timestamp>) -> LibResult<UpsertEventView> {
    use UpsertEventKindView as V;
    let UpsertEvent { who, at_ms, kind } = e;
    let t = |t: u64| ms(t, "a time in an upsert event");
    let f = |t: Option<u64>| opt_ms(t, "a frontier in an upsert event");
    let n = |n: u64| n as f64;
    let event = match kind {
        UpsertEventKind::PersistIngested {
            updates,
            persist_upper,
            last_rehydration_chunk,
        } => V::PersistIngested {
            updates: n(updates),
            persist_upper: f(persist_upper)?,
            last_rehydration_chunk,
        },
        UpsertEventKind::SourceStaged {
            time,
            staged,
            dropped_before_resume,
            partial_drain_allowed,
        } => V::SourceStaged {
            time: t(time)?,
            staged: n(staged),
            dropped_before_resume: n(dropped_before_resume),
            partial_drain_allowed,
        },
        UpsertEventKind::SourceProgress {
            input_upper,
            ignored,
        } => V::SourceProgress {
            input_upper: f(input_upper)?,
            ignored,
        },
        UpsertEventKind::DrainSkipped {
            persist_upper,
            largest_seen_persist_ts,
        } => V::DrainSkipped {
            persist_upper: f(persist_upper)?,
            largest_seen_persist_ts: t(largest_seen_persist_ts)?,
        },
        UpsertEventKind::Drained {
            drain,
            time,
            eligible,
            discarded,
            superseded,
            skipped_by_order,
            emitted,
            provisional_written,
            remaining,
        } => V::Drained {
            drain: match drain {
                DrainKind::ToUpper => DrainKindView::ToUpper,
                DrainKind::AtTime => DrainKindView::AtTime,
            },
            time: f(time)?,
            eligible: n(eligible),
            discarded: n(discarded),
            superseded: n(superseded),
            skipped_by_order: n(skipped_by_order),
            emitted: n(emitted),
            provisional_written: n(provisional_written),
            remaining: n(remaining),
        },
        UpsertEventKind::HealthError { error } => V::HealthError { error },
        UpsertEventKind::Started {
            resume_upper,
            generation,
        } => V::Started {
            resume_upper: f(resume_upper)?,
            generation: n(generation),
        },
        UpsertEventKind::FedBack { updates, upper } => V::FedBack {
            updates: n(updates),
            upper: f(upper)?,
        },
        UpsertEventKind::SinkAppended {
            lower,
            upper,
            updates,
        } => V::SinkAppended {
            lower: t(lower)?,
            upper: f(upper)?,
            updates: n(updates),
        },
        UpsertEventKind::SinkMismatch {
            expected,
            current,
            dropped,
        } => V::SinkMismatch {
            expected: t(expected)?,
            current: f(current)?,
            dropped: n(dropped),
        },
        UpsertEventKind::SinkTimedOut {
            lower,
            after_ms,
            retry_in_ms,
        } => V::SinkTimedOut {
            lower: t(lower)?,
            after_ms: t(after_ms)?,
            retry_in_ms: t(retry_in_ms)?,
        },
        UpsertEventKind::Crashed { reason } => V::Crashed { reason },
    };
    Ok(UpsertEventView {
        who,
        at_ms: t(at_ms)?,
        event,
    })
}
