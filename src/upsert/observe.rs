//! What the upsert operator and its replicas let others see, as plain serde data: counters
//! ([`UpsertCounters`]), one event per internal step ([`UpsertEvent`], in a bounded
//! [`UpsertLog`]), and snapshots of the operator's insides ([`OperatorSnapshot`]).
//!
//! Frontiers appear as `Option<T>` (`None` is the empty frontier: "finished"), as elsewhere in
//! the project. The order of one operator's events follows its loop:
//!
//! ```text
//! ( PersistIngested | SourceStaged | SourceProgress )+
//!   ( DrainSkipped | [Drained{to_upper}] [Drained{at_time}] )
//! ```
//! and a replica adds `Started`, `FedBack`, `SinkAppended`, `SinkMismatch`, `SinkTimedOut`, `Crashed`, `Halted`.

use serde::Serialize;

/// Counts of what an operator (or a replica) did. Summed over replicas and seeds by the tests.
/// As data: camelCase fields, counts as numbers (see [`crate::numbers`]); the page reads them
/// in the snapshot, the library as `UpsertCountersView`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null, rename = "UpsertCountersView")
)]
pub struct UpsertCounters {
    /// Source updates put into the stash.
    pub source_staged: u64,
    /// Source updates dropped on arrival: before the resume upper while rehydrating.
    pub source_dropped_before_resume: u64,
    /// Feedback updates folded into the state.
    pub persist_ingested: u64,
    /// Drains of complete times (`ToUpper`).
    pub drains_to_upper: u64,
    /// Drains at the input frontier (`AtTime`, partial emission).
    pub drains_at_time: u64,
    /// `AtTime` drains that emitted something: partial emissions.
    pub partial_emissions: u64,
    /// Drains skipped because the persist input was mid-timestamp.
    pub drains_skipped: u64,
    /// Eligible stash entries discarded because they lie below the persist upper.
    pub stash_discarded: u64,
    /// Stash entries superseded by a higher FromTime for the same time and key.
    pub stash_superseded: u64,
    /// Commands skipped because a provisional value with a higher or equal order was there.
    pub skipped_by_order: u64,
    /// Output updates emitted.
    pub emitted: u64,
    /// Provisional values (and tombstones) written by partial drains.
    pub provisional_written: u64,
    /// Provisional values overwritten by feedback.
    pub provisional_overwritten: u64,
    /// Errors reported on the health stream.
    pub health_errors: u64,
    /// Feedback updates a replica moved into its operator's persist input.
    pub fed_back: u64,
    /// Successful compare_and_appends of a replica's sink.
    pub sink_appends: u64,
    /// Upper mismatches of a replica's sink (a peer won the range).
    pub sink_mismatches: u64,
    /// Updates a sink dropped because they lay below the shard's upper.
    pub sink_dropped: u64,
    /// Replica starts after the first (restarts from the shard's upper).
    pub restarts: u64,
}

impl UpsertCounters {
    /// Adds `other` into `self`, field by field.
    pub fn add(&mut self, other: &UpsertCounters) {
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
        } = other;
        self.source_staged += source_staged;
        self.source_dropped_before_resume += source_dropped_before_resume;
        self.persist_ingested += persist_ingested;
        self.drains_to_upper += drains_to_upper;
        self.drains_at_time += drains_at_time;
        self.partial_emissions += partial_emissions;
        self.drains_skipped += drains_skipped;
        self.stash_discarded += stash_discarded;
        self.stash_superseded += stash_superseded;
        self.skipped_by_order += skipped_by_order;
        self.emitted += emitted;
        self.provisional_written += provisional_written;
        self.provisional_overwritten += provisional_overwritten;
        self.health_errors += health_errors;
        self.fed_back += fed_back;
        self.sink_appends += sink_appends;
        self.sink_mismatches += sink_mismatches;
        self.sink_dropped += sink_dropped;
        self.restarts += restarts;
    }
}

/// Which drain ran (as data: its name in camelCase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null, rename = "DrainKindView")
)]
pub enum DrainKind {
    /// Entries of complete times at the persist upper.
    ToUpper,
    /// Entries at the input frontier (partial emission, writing provisional values).
    AtTime,
}

/// One internal step of an operator or replica. As data: `type` names the variant in
/// camelCase, fields are camelCase, times and frontiers numbers (`null`: the empty frontier;
/// see [`crate::numbers`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    bound(serialize = "T: Copy + Into<u64>")
)]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null)
)]
pub enum UpsertEventKind<T> {
    /// Feedback updates were folded into the state, and the persist upper was noted.
    #[serde(rename_all = "camelCase")]
    PersistIngested {
        /// Updates folded in.
        updates: u64,
        /// The persist upper after this event.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        persist_upper: Option<T>,
        /// Whether this was the last chunk of rehydration.
        last_rehydration_chunk: bool,
    },
    /// Source updates arrived at `time` and were stashed.
    #[serde(rename_all = "camelCase")]
    SourceStaged {
        /// The least time of the messages (each is stashed at its own time).
        #[serde(serialize_with = "crate::numbers::time")]
        time: T,
        /// Updates stashed.
        staged: u64,
        /// Updates dropped as before the resume upper.
        dropped_before_resume: u64,
        /// Whether they arrived exactly at the input frontier (a partial drain is allowed).
        partial_drain_allowed: bool,
    },
    /// The source frontier moved.
    #[serde(rename_all = "camelCase")]
    SourceProgress {
        /// The new input upper.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        input_upper: Option<T>,
        /// Whether it was ignored (before the resume upper).
        ignored: bool,
    },
    /// The drain was skipped: the persist input is mid-timestamp.
    #[serde(rename_all = "camelCase")]
    DrainSkipped {
        /// The persist upper.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        persist_upper: Option<T>,
        /// The largest time seen on the persist input.
        #[serde(serialize_with = "crate::numbers::time")]
        largest_seen_persist_ts: T,
    },
    /// A drain ran.
    #[serde(rename_all = "camelCase")]
    Drained {
        /// Which.
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "DrainKindView")
        )]
        drain: DrainKind,
        /// For `AtTime`, the time drained.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        time: Option<T>,
        /// Stash entries eligible.
        eligible: u64,
        /// Of which discarded (below the persist upper).
        discarded: u64,
        /// Of which superseded by a higher FromTime.
        superseded: u64,
        /// Commands skipped by order.
        skipped_by_order: u64,
        /// Output updates emitted.
        emitted: u64,
        /// Provisional values written.
        provisional_written: u64,
        /// Entries left in the stash.
        remaining: u64,
    },
    /// The operator reported an error on its health stream and stopped.
    #[serde(rename_all = "camelCase")]
    HealthError {
        /// The error.
        error: String,
    },
    /// A replica (re)started from the shard's upper.
    #[serde(rename_all = "camelCase")]
    Started {
        /// The resume upper.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        resume_upper: Option<T>,
        /// Which start of this replica (0 first).
        generation: u64,
    },
    /// A replica moved feedback into its operator.
    #[serde(rename_all = "camelCase")]
    FedBack {
        /// Updates moved.
        updates: u64,
        /// The persist input's new upper, if it moved.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        upper: Option<T>,
    },
    /// A replica's sink appended `[lower, upper)`.
    #[serde(rename_all = "camelCase")]
    SinkAppended {
        /// Lower.
        #[serde(serialize_with = "crate::numbers::time")]
        lower: T,
        /// Upper.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        upper: Option<T>,
        /// Updates written.
        updates: u64,
    },
    /// A replica's sink lost the range to a peer.
    #[serde(rename_all = "camelCase")]
    SinkMismatch {
        /// The upper it expected.
        #[serde(serialize_with = "crate::numbers::time")]
        expected: T,
        /// The shard's upper.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        current: Option<T>,
        /// Updates it dropped as below the new upper.
        dropped: u64,
    },
    /// A replica's sink write timed out (it may or may not have landed); the sink retries the
    /// range after a back-off.
    #[serde(rename_all = "camelCase")]
    SinkTimedOut {
        /// The range's lower.
        #[serde(serialize_with = "crate::numbers::time")]
        lower: T,
        /// How long the attempt ran.
        #[serde(serialize_with = "crate::numbers::time")]
        after_ms: u64,
        /// The back-off before the retry.
        #[serde(serialize_with = "crate::numbers::time")]
        retry_in_ms: u64,
    },
    /// A replica crashed (or was stopped by its host); it may be restarted.
    #[serde(rename_all = "camelCase")]
    Crashed {
        /// Why.
        reason: String,
    },
}

/// One event, stamped with its replica and the runtime's clock (0 for a bare operator).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", bound(serialize = "T: Copy + Into<u64>"))]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null)
)]
pub struct UpsertEvent<T> {
    /// The replica (or operator) name.
    pub who: String,
    /// When (runtime clock, ms).
    #[serde(serialize_with = "crate::numbers::time")]
    pub at_ms: u64,
    /// What happened.
    #[serde(rename = "event")]
    pub kind: UpsertEventKind<T>,
}

/// A shared, bounded log of [`UpsertEvent`]s: the project's one event log
/// ([`crate::event_log::EventLog`]), so upsert events number and merge with those of persist and
/// the other components. Clones share the log; a disabled one records nothing (benchmarks).
pub type UpsertLog<T> = crate::event_log::EventLog<UpsertEvent<T>>;

/// One stash entry as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StashEntryView<T> {
    /// Its time.
    pub time: T,
    /// Its key (short hex).
    pub key: String,
    /// Its FromTime, rendered.
    pub from_time: String,
    /// Its value, rendered (`None` for a delete).
    pub value: Option<String>,
}

/// One state cell as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StateCellView<T> {
    /// The key (short hex).
    pub key: String,
    /// "consolidating", "value", "tombstone" or "provisional".
    pub mode: String,
    /// The finalized value, rendered, if there is one (for a consolidating cell, what it decodes
    /// to).
    pub value: Option<String>,
    /// For a provisional cell: the provisional value (`None` for a provisional tombstone).
    pub provisional_value: Option<String>,
    /// For a provisional cell: its time.
    pub provisional_time: Option<T>,
    /// For a provisional cell: its order, rendered.
    pub provisional_order: Option<String>,
    /// For a consolidating cell: its diff sum.
    pub diff_sum: Option<i64>,
    /// Whether the cell decodes; the error if not.
    pub decode_error: Option<String>,
}

/// The insides of one upsert operator, as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OperatorSnapshot<T> {
    /// The shard's upper when the operator started.
    pub resume_upper: Option<T>,
    /// The source input's upper as the operator last saw it.
    pub input_upper: Option<T>,
    /// The persist input's upper as the operator last saw it.
    pub persist_upper: Option<T>,
    /// The largest time seen on the persist input.
    pub largest_seen_persist_ts: Option<T>,
    /// Whether it is still rehydrating.
    pub hydrating: bool,
    /// The time a partial drain is allowed at, if any.
    pub partial_drain_time: Option<T>,
    /// The time of the stash's capability (held only while the stash is non-empty).
    pub stash_cap: Option<T>,
    /// The stash, sorted.
    pub stash: Vec<StashEntryView<T>>,
    /// The state, by key.
    pub state: Vec<StateCellView<T>>,
    /// Whether the operator stopped on an error (or was shut down).
    pub halted: Option<String>,
    /// Its counters.
    pub counters: UpsertCounters,
}
