//! Plain records of everything persist does, for the playground to render and tests to assert
//! on: every command attempt and its compare_and_set outcome, every batch written, every state
//! fetch. Frontiers appear as `Option<u64>` (`None` is the empty frontier: "finished").

use serde::Serialize;
use timely::progress::Antichain;

use super::codec::Timestamp;
use crate::location::SeqNo;

/// A frontier of a totally ordered time as plain data: `None` is the empty frontier.
pub fn frontier(f: &Antichain<Timestamp>) -> Option<Timestamp> {
    f.as_option().copied()
}

/// What came of one attempt to commit a command. As data: `{ kind, message }`, `kind` in
/// camelCase, `message` (the error or reason) for every kind but committed and mismatch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "message", rename_all = "camelCase")]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null, rename = "CasOutcomeView")
)]
pub enum CasOutcome {
    /// The new version is the head.
    Committed,
    /// Another command took the seqno first: re-read state and re-apply.
    Mismatch,
    /// The compare_and_set may or may not have happened.
    Indeterminate(String),
    /// The compare_and_set definitely did not happen; retried after a back-off.
    Determinate(String),
    /// A failure that will not heal (see `location::PermanentError`): the command gave up and
    /// nothing more is written.
    Permanent(String),
    /// The transition broke: nothing to commit, no seqno spent.
    Skipped(String),
}

/// One thing persist did. As data (the library's `PersistEventView`): `type` names the variant
/// in camelCase, fields are camelCase, times and frontiers numbers (`null`: the empty frontier),
/// seqnos `bigint`s (see [`crate::numbers`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null, rename = "PersistEventView")
)]
pub enum PersistEvent {
    /// One attempt at a command.
    #[serde(rename_all = "camelCase")]
    Command {
        /// The handle or task that ran it.
        who: String,
        /// The shard.
        shard: String,
        /// The command's name.
        cmd: String,
        /// The seqno the attempt expected to be the head.
        #[serde(rename = "expectedSeqno", serialize_with = "crate::numbers::seqno")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint")
        )]
        expected: SeqNo,
        /// The seqno the shard is known to be at after the attempt.
        #[serde(rename = "reachedSeqno", serialize_with = "crate::numbers::seqno")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint")
        )]
        reached: SeqNo,
        /// The outcome.
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "CasOutcomeView")
        )]
        outcome: CasOutcome,
        /// Upper before and after.
        #[serde(serialize_with = "crate::numbers::frontier_change")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "FrontierChange")
        )]
        upper: (Option<Timestamp>, Option<Timestamp>),
        /// Since before and after.
        #[serde(serialize_with = "crate::numbers::frontier_change")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "FrontierChange")
        )]
        since: (Option<Timestamp>, Option<Timestamp>),
        /// When (runtime clock).
        #[serde(serialize_with = "crate::numbers::time")]
        at_ms: u64,
    },
    /// A batch part or rollup was written to Blob, or a batch kept inline.
    #[serde(rename_all = "camelCase")]
    BlobWritten {
        /// The writer.
        who: String,
        /// The shard.
        shard: String,
        /// The Blob key (`None` for an inline part).
        key: Option<String>,
        /// What it is: "part", "inline part", "rollup".
        kind: String,
        /// Size in bytes.
        bytes: u64,
        /// When.
        #[serde(serialize_with = "crate::numbers::time")]
        at_ms: u64,
    },
    /// State was read from Consensus (and maybe a rollup).
    #[serde(rename_all = "camelCase")]
    StateFetched {
        /// Who fetched.
        who: String,
        /// The shard.
        shard: String,
        /// The seqno reached.
        #[serde(serialize_with = "crate::numbers::seqno")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint")
        )]
        seqno: SeqNo,
        /// Whether it started from a rollup (rather than the cached state).
        from_rollup: bool,
        /// When.
        #[serde(serialize_with = "crate::numbers::time")]
        at_ms: u64,
    },
    /// A merge of adjacent batches was requested (after a write) and a compactor took it up.
    #[serde(rename_all = "camelCase")]
    CompactionRequested {
        /// The compactor (the writer whose append produced the request).
        who: String,
        /// The shard.
        shard: String,
        /// The interval merged: lower and upper.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        lower: Option<Timestamp>,
        /// See `lower`.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        upper: Option<Timestamp>,
        /// The since the output is compacted to.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        since: Option<Timestamp>,
        /// How many batches are merged.
        inputs: usize,
        /// Their updates, in total.
        input_updates: u64,
        /// When.
        #[serde(serialize_with = "crate::numbers::time")]
        at_ms: u64,
    },
    /// A compaction's output replaced its inputs in state.
    #[serde(rename_all = "camelCase")]
    CompactionApplied {
        /// The compactor.
        who: String,
        /// The shard.
        shard: String,
        /// The interval merged.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        lower: Option<Timestamp>,
        /// See `lower`.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        upper: Option<Timestamp>,
        /// "AppliedExact" or "AppliedSubset".
        result: String,
        /// The output's updates (after consolidation).
        output_updates: u64,
        /// The output's parts in Blob (0: inline or empty).
        output_blob_parts: usize,
        /// The seqno of the merge_res command.
        #[serde(serialize_with = "crate::numbers::seqno")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint")
        )]
        seqno: SeqNo,
        /// When.
        #[serde(serialize_with = "crate::numbers::time")]
        at_ms: u64,
    },
    /// A compaction's output was not applied (its inputs no longer line up, or they could not be
    /// read); its Blob parts were deleted.
    #[serde(rename_all = "camelCase")]
    CompactionNotApplied {
        /// The compactor.
        who: String,
        /// The shard.
        shard: String,
        /// The interval merged.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        lower: Option<Timestamp>,
        /// See `lower`.
        #[serde(serialize_with = "crate::numbers::opt_time")]
        upper: Option<Timestamp>,
        /// Why: an `ApplyMergeResult` name, or what failed.
        reason: String,
        /// When.
        #[serde(serialize_with = "crate::numbers::time")]
        at_ms: u64,
    },
    /// A rollup (the whole state at `seqno`) was offered to state after its blob was written.
    #[serde(rename_all = "camelCase")]
    RollupAdded {
        /// Who wrote it.
        who: String,
        /// The shard.
        shard: String,
        /// The seqno whose state it holds.
        #[serde(serialize_with = "crate::numbers::seqno")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint")
        )]
        seqno: SeqNo,
        /// Its Blob key.
        key: String,
        /// Whether state lists it (false: another rollup had the seqno, so the blob was deleted).
        added: bool,
        /// "routine" (every rollup threshold seqnos) or "gc" (at the new seqno since).
        reason: String,
        /// When.
        #[serde(serialize_with = "crate::numbers::time")]
        at_ms: u64,
    },
    /// A commit moved `last_gc_req`: garbage collection up to `new_seqno_since` is due.
    #[serde(rename_all = "camelCase")]
    GcRequested {
        /// Who committed the version that requested it (and runs the GC).
        who: String,
        /// The shard.
        shard: String,
        /// `last_gc_req` before.
        #[serde(serialize_with = "crate::numbers::seqno")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint")
        )]
        old_seqno_since: SeqNo,
        /// The seqno below which versions are no longer needed.
        #[serde(serialize_with = "crate::numbers::seqno")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint")
        )]
        new_seqno_since: SeqNo,
        /// When.
        #[serde(serialize_with = "crate::numbers::time")]
        at_ms: u64,
    },
    /// A garbage collection found nothing to do, or stopped early (and will be redone by the next).
    #[serde(rename_all = "camelCase")]
    GcSkipped {
        /// The collector.
        who: String,
        /// The shard.
        shard: String,
        /// The seqno since it was asked to reach.
        #[serde(serialize_with = "crate::numbers::seqno")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint")
        )]
        new_seqno_since: SeqNo,
        /// Why.
        reason: String,
        /// When.
        #[serde(serialize_with = "crate::numbers::time")]
        at_ms: u64,
    },
    /// Blobs no live state version needs were deleted (by GC, or by a compactor or rollup writer
    /// whose output was not applied).
    #[serde(rename_all = "camelCase")]
    BlobsDeleted {
        /// Who deleted them.
        who: String,
        /// The shard.
        shard: String,
        /// "part", "rollup", "compaction output" or "unused rollup".
        kind: String,
        /// The keys (missing ones included: deletes are idempotent).
        keys: Vec<String>,
        /// When.
        #[serde(serialize_with = "crate::numbers::time")]
        at_ms: u64,
    },
    /// GC truncated Consensus below `seqno` (the last step of a GC, which "commits" it).
    #[serde(rename_all = "camelCase")]
    ConsensusTruncated {
        /// The collector.
        who: String,
        /// The shard.
        shard: String,
        /// The new earliest live seqno.
        #[serde(serialize_with = "crate::numbers::seqno")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint")
        )]
        seqno: SeqNo,
        /// How many versions were deleted (0 when another collector got there first).
        deleted: usize,
        /// When.
        #[serde(serialize_with = "crate::numbers::time")]
        at_ms: u64,
    },
    /// GC unlisted the rollups below the new earliest version.
    #[serde(rename_all = "camelCase")]
    RollupsUnlisted {
        /// The collector.
        who: String,
        /// The shard.
        shard: String,
        /// Every rollup below this seqno (but the newest) was unlisted.
        #[serde(serialize_with = "crate::numbers::seqno")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "bigint")
        )]
        below: SeqNo,
        /// How many.
        count: usize,
        /// When.
        #[serde(serialize_with = "crate::numbers::time")]
        at_ms: u64,
    },
    /// The shard was found broken for good (see `machine.rs`): nothing more is written to it
    /// by this process.
    #[serde(rename_all = "camelCase")]
    ShardBroken {
        /// Who found it.
        who: String,
        /// The shard.
        shard: String,
        /// What is wrong.
        #[serde(serialize_with = "crate::numbers::display")]
        #[cfg_attr(
            all(feature = "library", target_arch = "wasm32"),
            tsify(type = "string")
        )]
        error: crate::location::PermanentError,
        /// When.
        #[serde(serialize_with = "crate::numbers::time")]
        at_ms: u64,
    },
}

/// A shared, bounded log of persist events (the crate's one event log, [`crate::event_log`]).
/// Clones share it.
pub type EventLog = crate::event_log::EventLog<PersistEvent>;

/// How many events a log keeps before it drops the oldest.
pub const EVENT_LOG_CAPACITY: usize = crate::event_log::DEFAULT_CAPACITY;
