//! Plain records of what persist did and what a shard holds, as JavaScript sees them: the
//! core's [`PersistEvent`] and [`State`] with camelCase fields, a `type` tag on every event,
//! times as numbers, seqnos as bigints. Each conversion destructures every field, so a field the
//! core adds fails to compile here until the view shows it.

use serde::Serialize;
use tsify::Tsify;

use super::convert::{frontier_out, ms, opt_ms};
use super::errors::LibResult;
use crate::persist::events::{CasOutcome, PersistEvent};
use crate::persist::state::State;

/// `(before, after)` of a frontier, `null` for the empty frontier.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct FrontierChange {
    /// Before the command.
    pub before: Option<f64>,
    /// After it.
    pub after: Option<f64>,
}

fn change(pair: (Option<u64>, Option<u64>), what: &str) -> LibResult<FrontierChange> {
    Ok(FrontierChange {
        before: opt_ms(pair.0, what)?,
        after: opt_ms(pair.1, what)?,
    })
}

/// What came of one attempt to commit a command: `"committed"`, `"mismatch"` (another command
/// took the seqno), `"indeterminate"` / `"determinate"` (a storage error, with its message), or
/// `"permanent"` (a failure that will not heal: the command gave up), or `"skipped"` (nothing to
/// commit).
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct CasOutcomeView {
    /// The kind.
    #[tsify(
        type = "\"committed\" | \"mismatch\" | \"indeterminate\" | \"determinate\" | \"permanent\" | \"skipped\""
    )]
    pub kind: String,
    /// The error or reason, for every kind but committed and mismatch.
    pub message: Option<String>,
}

impl From<&CasOutcome> for CasOutcomeView {
    fn from(o: &CasOutcome) -> Self {
        let (kind, message) = match o {
            CasOutcome::Committed => ("committed", None),
            CasOutcome::Mismatch => ("mismatch", None),
            CasOutcome::Indeterminate(m) => ("indeterminate", Some(m.clone())),
            CasOutcome::Determinate(m) => ("determinate", Some(m.clone())),
            CasOutcome::Permanent(m) => ("permanent", Some(m.clone())),
            CasOutcome::Skipped(m) => ("skipped", Some(m.clone())),
        };
        CasOutcomeView {
            kind: kind.into(),
            message,
        }
    }
}

/// One thing persist did (see the crate's `persist::events`). `who` is the handle or task,
/// `shard` the shard id, `atMs` the runtime's clock.
#[derive(Serialize, Tsify)]
#[serde(tag = "type", rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
#[allow(missing_docs)]
pub enum PersistEventView {
    /// One attempt at a command and its compare_and_set outcome.
    #[serde(rename_all = "camelCase")]
    Command {
        who: String,
        shard: String,
        cmd: String,
        expected_seqno: u64,
        reached_seqno: u64,
        outcome: CasOutcomeView,
        upper: FrontierChange,
        since: FrontierChange,
        at_ms: f64,
    },
    /// A batch part or rollup written to Blob (`key` null: a part kept inline in state).
    #[serde(rename_all = "camelCase")]
    BlobWritten {
        who: String,
        shard: String,
        key: Option<String>,
        kind: String,
        bytes: f64,
        at_ms: f64,
    },
    /// State read from Consensus.
    #[serde(rename_all = "camelCase")]
    StateFetched {
        who: String,
        shard: String,
        seqno: u64,
        from_rollup: bool,
        at_ms: f64,
    },
    /// A compactor took up a merge of `inputs` batches over `[lower, upper)`.
    #[serde(rename_all = "camelCase")]
    CompactionRequested {
        who: String,
        shard: String,
        lower: Option<f64>,
        upper: Option<f64>,
        since: Option<f64>,
        inputs: f64,
        input_updates: f64,
        at_ms: f64,
    },
    /// A compaction's output replaced its inputs.
    #[serde(rename_all = "camelCase")]
    CompactionApplied {
        who: String,
        shard: String,
        lower: Option<f64>,
        upper: Option<f64>,
        result: String,
        output_updates: f64,
        output_blob_parts: f64,
        seqno: u64,
        at_ms: f64,
    },
    /// A compaction's output was not applied.
    #[serde(rename_all = "camelCase")]
    CompactionNotApplied {
        who: String,
        shard: String,
        lower: Option<f64>,
        upper: Option<f64>,
        reason: String,
        at_ms: f64,
    },
    /// A rollup of the state at `seqno` was offered to state.
    #[serde(rename_all = "camelCase")]
    RollupAdded {
        who: String,
        shard: String,
        seqno: u64,
        key: String,
        added: bool,
        reason: String,
        at_ms: f64,
    },
    /// Garbage collection up to `newSeqnoSince` is due.
    #[serde(rename_all = "camelCase")]
    GcRequested {
        who: String,
        shard: String,
        old_seqno_since: u64,
        new_seqno_since: u64,
        at_ms: f64,
    },
    /// A garbage collection found nothing to do, or stopped early.
    #[serde(rename_all = "camelCase")]
    GcSkipped {
        who: String,
        shard: String,
        new_seqno_since: u64,
        reason: String,
        at_ms: f64,
    },
    /// Blobs no live state needs were deleted.
    #[serde(rename_all = "camelCase")]
    BlobsDeleted {
        who: String,
        shard: String,
        kind: String,
        keys: Vec<String>,
        at_ms: f64,
    },
    /// Consensus was truncated below `seqno`.
    #[serde(rename_all = "camelCase")]
    ConsensusTruncated {
        who: String,
        shard: String,
        seqno: u64,
        deleted: f64,
        at_ms: f64,
    },
    /// GC unlisted the rollups below `below` (but the newest).
    #[serde(rename_all = "camelCase")]
    RollupsUnlisted {
        who: String,
        shard: String,
        below: u64,
        count: f64,
        at_ms: f64,
    },
    /// The shard was found broken for good: this process writes nothing more to it.
    #[serde(rename_all = "camelCase")]
    ShardBroken {
        who: String,
        shard: String,
        error: String,
        at_ms: f64,
    },
}

impl PersistEventView {
    /// The view of `e`.
    pub fn new(e: &PersistEvent) -> LibResult<Self> {
        use PersistEventView as V;
        let t = |t: u64| ms(t, "an event time");
        let o = |t: Option<u64>| opt_ms(t, "a frontier in an event");
        Ok(match e.clone() {
            PersistEvent::Command {
                who,
                shard,
                cmd,
                expected,
                reached,
                outcome,
                upper,
                since,
                at_ms,
            } => V::Command {
                who,
                shard,
                cmd,
                expected_seqno: expected.0,
                reached_seqno: reached.0,
                outcome: CasOutcomeView::from(&outcome),
                upper: change(upper, "an upper in an event")?,
                since: change(since, "a since in an event")?,
                at_ms: t(at_ms)?,
            },
            PersistEvent::BlobWritten {
                who,
                shard,
                key,
                kind,
                bytes,
                at_ms,
            } => V::BlobWritten {
                who,
                shard,
                key,
                kind,
                bytes: bytes as f64,
                at_ms: t(at_ms)?,
            },
            PersistEvent::StateFetched {
                who,
                shard,
                seqno,
                from_rollup,
                at_ms,
            } => V::StateFetched {
                who,
                shard,
                seqno: seqno.0,
                from_rollup,
                at_ms: t(at_ms)?,
            },
            PersistEvent::CompactionRequested {
                who,
                shard,
                lower,
                upper,
                since,
                inputs,
                input_updates,
                at_ms,
            } => V::CompactionRequested {
                who,
                shard,
                lower: o(lower)?,
                upper: o(upper)?,
                since: o(since)?,
                inputs: inputs as f64,
                input_updates: input_updates as f64,
                at_ms: t(at_ms)?,
            },
            PersistEvent::CompactionApplied {
                who,
                shard,
                lower,
                upper,
                result,
                output_updates,
                output_blob_parts,
                seqno,
                at_ms,
            } => V::CompactionApplied {
                who,
                shard,
                lower: o(lower)?,
                upper: o(upper)?,
                result,
                output_updates: output_updates as f64,
                output_blob_parts: output_blob_parts as f64,
                seqno: seqno.0,
                at_ms: t(at_ms)?,
            },
            PersistEvent::CompactionNotApplied {
                who,
                shard,
                lower,
                upper,
                reason,
                at_ms,
            } => V::CompactionNotApplied {
                who,
                shard,
                lower: o(lower)?,
                upper: o(upper)?,
                reason,
                at_ms: t(at_ms)?,
            },
            PersistEvent::RollupAdded {
                who,
                shard,
                seqno,
                key,
                added,
                reason,
                at_ms,
            } => V::RollupAdded {
                who,
                shard,
                seqno: seqno.0,
                key,
                added,
                reason,
                at_ms: t(at_ms)?,
            },
            PersistEvent::GcRequested {
                who,
                shard,
                old_seqno_since,
                new_seqno_since,
                at_ms,
            } => V::GcRequested {
                who,
                shard,
                old_seqno_since: old_seqno_since.0,
                new_seqno_since: new_seqno_since.0,
                at_ms: t(at_ms)?,
            },
            PersistEvent::GcSkipped {
                who,
                shard,
                new_seqno_since,
                reason,
                at_ms,
            } => V::GcSkipped {
                who,
                shard,
                new_seqno_since: new_seqno_since.0,
                reason,
                at_ms: t(at_ms)?,
            },
            PersistEvent::BlobsDeleted {
                who,
                shard,
                kind,
                keys,
                at_ms,
            } => V::BlobsDeleted {
                who,
                shard,
                kind,
                keys,
                at_ms: t(at_ms)?,
            },
            PersistEvent::ConsensusTruncated {
                who,
                shard,
                seqno,
                deleted,
                at_ms,
            } => V::ConsensusTruncated {
                who,
                shard,
                seqno: seqno.0,
                deleted: deleted as f64,
                at_ms: t(at_ms)?,
            },
            PersistEvent::RollupsUnlisted {
                who,
                shard,
                below,
                count,
                at_ms,
            } => V::RollupsUnlisted {
                who,
                shard,
                below: below.0,
                count: count as f64,
                at_ms: t(at_ms)?,
            },
            PersistEvent::ShardBroken {
                who,
                shard,
                error,
                at_ms,
            } => V::ShardBroken {
                who,
                shard,
                error: error.to_string(),
                at_ms: t(at_ms)?,
            },
        })
    }
}

/// One batch of a shard's trace: updates at times in `[lower, upper)`, compacted to `since`.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct BatchView {
    /// The lower bound.
    pub lower: Option<f64>,
    /// The upper bound.
    pub upper: Option<f64>,
    /// Times before this were advanced to it.
    pub since: Option<f64>,
    /// Updates in the batch.
    pub updates: f64,
    /// Parts (inline in state or in Blob).
    pub parts: f64,
}

/// A leased reader of a shard: its since and the seqno it holds for GC.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct ReaderView {
    /// The reader's id.
    pub id: String,
    /// Its since.
    pub since: Option<f64>,
    /// The seqno it holds.
    pub seqno: u64,
}

/// A shard's state at one seqno, as plain data.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct ShardStateView {
    /// The shard.
    pub shard_id: String,
    /// The seqno of this state (0: the shard does not exist yet).
    pub seqno: u64,
    /// Every time before the upper is complete (`null`: finished).
    pub upper: Option<f64>,
    /// History before the since may be compacted.
    pub since: Option<f64>,
    /// The trace's batches, oldest first.
    pub batches: Vec<BatchView>,
    /// Registered writers' ids.
    pub writers: Vec<String>,
    /// Registered leased readers.
    pub readers: Vec<ReaderView>,
    /// Rollups listed in state.
    pub rollups: f64,
}

impl ShardStateView {
    /// The view of `state`.
    pub fn new(state: &State) -> LibResult<Self> {
        let f = |a, what| frontier_out(a, what);
        let c = &state.collections;
        let batches = c
            .trace
            .batches()
            .iter()
            .map(|b| {
                Ok(BatchView {
                    lower: f(&b.desc.lower, "a batch lower")?,
                    upper: f(&b.desc.upper, "a batch upper")?,
                    since: f(&b.desc.since, "a batch since")?,
                    updates: b.len as f64,
                    parts: b.parts.len() as f64,
                })
            })
            .collect::<LibResult<Vec<_>>>()?;
        let readers = c
            .leased_readers
            .iter()
            .map(|(id, r)| {
                Ok(ReaderView {
                    id: id.0.clone(),
                    since: f(&r.since, "a reader's since")?,
                    seqno: r.seqno.0,
                })
            })
            .collect::<LibResult<Vec<_>>>()?;
        Ok(ShardStateView {
            shard_id: state.shard_id.0.clone(),
            seqno: state.seqno.0,
            upper: f(state.upper(), "the upper")?,
            since: f(state.since(), "the since")?,
            batches,
            writers: c.writers.keys().map(|w| w.0.clone()).collect(),
            readers,
            rollups: c.rollups.len() as f64,
        })
    }
}
