//! What a [`DurableTimestampOracle`](super::DurableTimestampOracle) records and shows: its
//! events (a bounded log), its counters and its snapshot, all plain data (the playground's data
//! contract).

use serde::Serialize;

/// One thing a [`DurableTimestampOracle`](super::DurableTimestampOracle) did. As data:
/// `{ atMs, timeline, epoch, event }`, the event's `type` and fields in camelCase, timestamps
/// numbers and seqnos `bigint`s (see [`crate::numbers`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null, rename = "OracleEventView")
)]
pub struct OracleEvent {
    /// The runtime's clock when it happened.
    #[serde(serialize_with = "crate::numbers::time")]
    pub at_ms: u64,
    /// The timeline.
    pub timeline: String,
    /// The instance's epoch (0 while it is still opening).
    pub epoch: u64,
    /// What happened.
    #[serde(rename = "event")]
    #[cfg_attr(
        all(feature = "library", target_arch = "wasm32"),
        tsify(type = "OracleEventKindView")
    )]
    pub kind: OracleEventKind,
}

/// What a [`OracleEvent`] records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null, rename = "OracleEventKindView")
)]
pub enum OracleEventKind {
    /// The instance started: it took its epoch and its first window.
    #[serde(rename_all = "camelCase")]
    Opened {
        /// The stored upper it resumed at, if the timeline existed.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        resumed_from: Option<u64>,
        /// Its first read and write timestamp.
        #[serde(serialize_with = "crate::numbers::time")]
        start_ts: u64,
        /// Its first durable upper.
        #[serde(serialize_with = "crate::numbers::time")]
        durable_upper: u64,
        /// The seqno it wrote.
        #[serde(serialize_with = "crate::numbers::bigint")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint")
        )]
        seqno: u64,
    },
    /// Another instance wrote between this one's read and its compare_and_set at start.
    #[serde(rename_all = "camelCase")]
    OpenConflict {
        /// The seqno this instance expected.
        #[serde(serialize_with = "crate::numbers::opt_bigint")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint | null")
        )]
        expected_seqno: Option<u64>,
    },
    /// A new window was made durable.
    #[serde(rename_all = "camelCase")]
    Allocated {
        /// The timestamp the window was needed for.
        #[serde(serialize_with = "crate::numbers::time")]
        for_ts: u64,
        /// The new durable upper.
        #[serde(serialize_with = "crate::numbers::time")]
        durable_upper: u64,
        /// The seqno written.
        #[serde(serialize_with = "crate::numbers::bigint")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint")
        )]
        seqno: u64,
    },
    /// A write of this instance that it had not heard about (a timed-out or cancelled
    /// compare_and_set that landed) was found in the store and adopted.
    #[serde(rename_all = "camelCase")]
    AdoptedOwnWrite {
        /// Its seqno.
        #[serde(serialize_with = "crate::numbers::bigint")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint")
        )]
        seqno: u64,
        /// Its durable upper.
        #[serde(serialize_with = "crate::numbers::time")]
        durable_upper: u64,
    },
    /// Old versions of the key were deleted.
    #[serde(rename_all = "camelCase")]
    Truncated {
        /// Every version below this seqno is gone.
        #[serde(serialize_with = "crate::numbers::bigint")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint")
        )]
        below_seqno: u64,
        /// How many were deleted.
        deleted: u64,
    },
    /// A truncation failed; the next allocation tries again.
    #[serde(rename_all = "camelCase")]
    TruncateFailed {
        /// The error.
        error: String,
    },
    /// A storage call failed and will be retried after a back-off.
    #[serde(rename_all = "camelCase")]
    StorageRetry {
        /// The call (`head`, `compare_and_set`).
        op: String,
        /// The error.
        error: String,
        /// Whether the call may have happened.
        indeterminate: bool,
        /// The back-off before the retry.
        #[serde(serialize_with = "crate::numbers::time")]
        backoff_ms: u64,
    },
    /// Another instance took over: this one hands out nothing more.
    #[serde(rename_all = "camelCase")]
    Fenced {
        /// The epoch found in the store.
        current_epoch: u64,
    },
    /// The stored upper is more than two intervals ahead of the clock: waiting.
    #[serde(rename_all = "camelCase")]
    ClockGuardWait {
        /// The stored upper.
        #[serde(serialize_with = "crate::numbers::time")]
        stored_upper: u64,
        /// The oracle's clock.
        #[serde(serialize_with = "crate::numbers::time")]
        now_ms: u64,
        /// This wait.
        #[serde(serialize_with = "crate::numbers::time")]
        wait_ms: u64,
    },
    /// The clock guard reached its bound with the clock still far behind; starting anyway.
    #[serde(rename_all = "camelCase")]
    ClockGuardGaveUp {
        /// The stored upper.
        #[serde(serialize_with = "crate::numbers::time")]
        stored_upper: u64,
        /// The oracle's clock.
        #[serde(serialize_with = "crate::numbers::time")]
        now_ms: u64,
        /// The total wait.
        #[serde(serialize_with = "crate::numbers::time")]
        waited_ms: u64,
    },
}

/// Counters of what an instance did (as data: camelCase numbers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null, rename = "OracleStatsView")
)]
pub struct OracleStats {
    /// Write timestamps handed out.
    pub write_timestamps: u64,
    /// compare_and_sets this instance saw commit (its start included).
    pub durable_writes: u64,
    /// compare_and_sets attempted.
    pub cas_attempts: u64,
    /// Unheard own writes found and adopted.
    pub adopted_own_writes: u64,
    /// Storage errors retried.
    pub storage_retries: u64,
    /// Leadership checks (Consensus reads) made by `write_ts`, `read_ts` or on request.
    pub leadership_checks: u64,
    /// Old versions deleted.
    pub truncated_versions: u64,
    /// Clock guard waits.
    pub clock_guard_waits: u64,
}

/// A plain description of an instance, for display.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null, rename = "OracleSnapshotView")
)]
pub struct OracleSnapshot {
    /// The timeline.
    pub timeline: String,
    /// This instance's epoch.
    pub epoch: u64,
    /// The seqno of the latest version this instance knows it wrote.
    #[serde(serialize_with = "crate::numbers::bigint")]
    #[cfg_attr(
        all(feature = "library", target_arch = "wasm32"),
        tsify(type = "bigint")
    )]
    pub seqno: u64,
    /// The read timestamp.
    #[serde(serialize_with = "crate::numbers::time")]
    pub read_ts: u64,
    /// The latest write timestamp.
    #[serde(serialize_with = "crate::numbers::time")]
    pub write_ts: u64,
    /// The durable upper this instance knows of.
    #[serde(serialize_with = "crate::numbers::time")]
    pub durable_upper: u64,
    /// The window size.
    #[serde(serialize_with = "crate::numbers::time")]
    pub persist_interval_ms: u64,
    /// Whether calls check the epoch first.
    pub confirm_leadership: bool,
    /// The epoch that fenced this instance, once it knows.
    pub fenced_by: Option<u64>,
    /// Whether an allocation is in flight.
    pub allocating: bool,
    /// The counters.
    #[cfg_attr(
        all(feature = "library", target_arch = "wasm32"),
        tsify(type = "OracleStatsView")
    )]
    pub stats: OracleStats,
}
