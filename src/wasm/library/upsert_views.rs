//! The upsert pipeline's plain data as JavaScript sees it: its snapshot (replicas, checker
//! report) and the output shard's contents, with camelCase fields and times as numbers. (Its
//! events, its counters and its checker's report are the core's own
//! [`crate::upsert::observe::UpsertEvent`], [`UpsertCounters`] and [`CheckerReport`],
//! serialized: their serde attributes and [`crate::numbers`] give them the same conventions,
//! and their tsify derives the types `UpsertEventView`, `UpsertCountersView` and
//! `CheckerReportView`.)

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

/// One replica slot of a pipeline snapshot.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null)]
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
    /// Its counters (counts as numbers).
    #[tsify(type = "UpsertCountersView")]
    pub counters: UpsertCounters,
    /// Why it stopped, if it did.
    pub halted: Option<String>,
}

/// A pipeline as plain data.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null)]
pub struct PipelineSnapshotView {
    /// Every source message before this time is in the log.
    pub source_upper: f64,
    /// Messages in the source log.
    pub source_messages: f64,
    /// Each slot: its replica, or `null` while it is down.
    pub replicas: Vec<Option<ReplicaView>>,
    /// What the checker found: it compares the shard with the reference model (per key, the
    /// upsert with the highest offset wins) at every upper the shard reaches.
    #[tsify(type = "CheckerReportView")]
    pub checker: CheckerReport,
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
                        counters: r.counters,
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
            checker: s.checker,
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
