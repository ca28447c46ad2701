//! The upsert pipeline's plain data as JavaScript sees it: its snapshot (replicas, counters,
//! checker report) and the output shard's contents, with camelCase fields and times as numbers.
//! Every field of the counters and the report is destructured, so a field the core adds fails
//! to compile here until the view shows it. (Its events are the core's own
//! [`crate::upsert::observe::UpsertEvent`], serialized: its serde attributes and
//! [`crate::numbers`] give it the same conventions, and its tsify derive the type
//! `UpsertEventView`.)

use serde::Serialize;
use tsify::Tsify;

use super::convert::{self, opt_ms};
use super::errors::LibResult;
use super::write_task::{datum_views, DatumView};
use crate::persist::codec::Row;
use crate::upsert::observe::UpsertCounters;
use crate::upsert::pipeline::PipelineSnapshot;
use crate::upsert::reference::CheckerReport;
use crate::upsert::types::DataflowError;

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

/// One replica slot of a pipeline snapshot.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct ReplicaView {
    /// Its name.
    pub name: String,
    /// Which start this is (0 first).
    pub generation: f64,
    /// The shard's upper it started from.
    pub resume_upper: Option<f64>,
    /// How far its source input has advanced.
    pub source_frontier: f64,
    /// Source messages it has not read yet.
    pub source_unread: f64,
    /// The operator's output frontier.
    pub output_frontier: Option<f64>,
    /// The shard's upper as its sink knows it.
    pub sink_upper: Option<f64>,
    /// Updates its sink holds back.
    pub sink_buffered: f64,
    /// Its counters.
    pub counters: UpsertCountersView,
    /// Why it stopped, if it did.
    pub halted: Option<String>,
}

/// A pipeline as plain data.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct PipelineSnapshotView {
    /// Every source message before this time is in the log.
    pub source_upper: f64,
    /// Messages in the source log.
    pub source_messages: f64,
    /// Each slot: its replica, or `null` while it is down.
    pub replicas: Vec<Option<ReplicaView>>,
    /// What the checker found.
    pub checker: CheckerReportView,
}

/// One row of the output shard, or an error that took its key's place.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct UpsertRowView {
    /// The row `[key, value]`, or `null` for an error.
    pub row: Option<Vec<DatumView>>,
    /// The error, or `null` for a row.
    pub error: Option<String>,
    /// Its multiplicity (1 in a correct upsert collection).
    pub diff: i64,
}

/// What the output shard holds at its upper minus one.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct UpsertContentsView {
    /// The shard's upper when it was read.
    pub upper: Option<f64>,
    /// The time read at: `upper - 1`, or the since once a reader has held it past that (the
    /// read then waited for the upper to pass it); `null`: nothing written yet.
    pub as_of: Option<f64>,
    /// The rows and errors, consolidated.
    pub rows: Vec<UpsertRowView>,
}

impl PipelineSnapshotView {
    /// The view of `s`.
    pub fn new(s: PipelineSnapshot) -> LibResult<Self> {
        let replicas = s
            .replicas
            .into_iter()
            .map(|r| {
                r.map(|r| {
                    Ok(ReplicaView {
                        name: r.name,
                        generation: r.generation as f64,
                        resume_upper: opt_ms(r.resume_upper, "a resume upper")?,
                        source_frontier: convert::ms(r.source_frontier, "a source frontier")?,
                        source_unread: r.source_unread as f64,
                        output_frontier: opt_ms(r.output_frontier, "a frontier")?,
                        sink_upper: opt_ms(r.sink.upper, "a sink's upper")?,
                        sink_buffered: r.sink.buffered as f64,
                        counters: r.counters.into(),
                        halted: r.halted,
                    })
                })
                .transpose()
            })
            .collect::<LibResult<Vec<_>>>()?;
        Ok(PipelineSnapshotView {
            source_upper: convert::ms(s.source_upper, "the source's upper")?,
            source_messages: s.source_messages as f64,
            replicas,
            checker: CheckerReportView::new(s.checker)?,
        })
    }
}

impl UpsertRowView {
    /// A row of the output shard (or the error in its key's place) with its diff.
    pub fn new(data: Result<Row, DataflowError>, diff: i64) -> Self {
        match data {
            Ok(row) => UpsertRowView {
                row: Some(datum_views(row)),
                error: None,
                diff,
            },
            Err(e) => UpsertRowView {
                row: None,
                error: Some(e.to_string()),
                diff,
            },
        }
    }
}
