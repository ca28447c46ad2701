//! The upsert pipeline's counters and checker report as JavaScript sees them, with camelCase
//! fields and times as numbers. Every field is destructured, so a field the core adds fails to
//! compile here until the view shows it. (Its events are the core's own
//! [`crate::upsert::observe::UpsertEvent`], serialized: its serde attributes and
//! [`crate::numbers`] give it the same conventions, and its tsify derive the type
//! `UpsertEventView`.)

use serde::Serialize;
use tsify::Tsify;

use super::convert::opt_ms;
use super::errors::LibResult;
use crate::upsert::observe::UpsertCounters;
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
