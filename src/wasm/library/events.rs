//! What a shard holds, as JavaScript sees it: a view of the core's [`State`] with camelCase
//! fields, times as numbers, seqnos as bigints. (What persist did is the core's own
//! [`crate::persist::events::PersistEvent`], serialized: its serde attributes and
//! [`crate::numbers`] give it the same conventions, and its tsify derive the type
//! `PersistEventView`.)

use serde::Serialize;
use tsify::Tsify;

use super::convert::frontier_out;
use super::errors::LibResult;
use crate::persist::state::State;

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
