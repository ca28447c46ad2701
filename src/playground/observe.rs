//! Observers: tasks that read the *raw* location (no faults, no process gate) and keep the latest
//! state of each shard and each oracle timeline for the panels. They change nothing in storage.
//!
//! Before reading a shard's state an observer decodes the head version itself, so a corrupted
//! record shows as a clear message ("state version 17 of shard data does not decode: ...") rather
//! than as a reader retrying forever.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use serde::Serialize;

use super::journal::{Journal, MaintenanceView, SweepView};
use super::rows::{shard_rows, RowsView};
use super::versions::ReadUpdate;
use crate::location::Consensus;
use crate::oracle::{DurableRecord, DurableTimestampOracle};
use crate::persist::encoding::decode_diff;
use crate::persist::events::frontier;
use crate::persist::state::{BatchPart, HollowBatch, State, StateCollections};
use crate::persist::{PersistClient, ShardId};
use crate::runtime::Runtime;

/// The latest observation of one shard.
#[derive(Default)]
pub struct ShardObservation {
    /// Its state, if it exists and decodes.
    pub state: Option<State>,
    /// Why the latest read failed.
    pub error: Option<String>,
    /// Whether the observer keeps the shard's contents (a write task writes it): see
    /// [`super::versions`].
    pub keep_contents: bool,
    /// Each batch's updates, by the batch's lower, upper and length (a batch is immutable: read
    /// once, kept while the trace holds it).
    pub read: BTreeMap<BatchId, BatchRead>,
    /// The shard's rows at an upper, from `read` (`None`: not every batch is read).
    pub rows: Option<RowsView>,
    /// When `rows` was listed (the runtime's ms).
    rows_at_ms: u64,
    /// The batches changed since `rows` was listed (a big shard's change waits for
    /// [`ROWS_EVERY_MS`]; it must not be forgotten when no other change follows it).
    rows_due: bool,
}

/// A batch as the observer read it.
#[derive(Clone)]
pub struct BatchRead {
    /// Its updates that add (diff > 0) and that retract.
    pub signs: (u64, u64),
    /// Its updates (`None` beyond [`ROWS_MAX_UPDATES`]: too many to keep for the rows).
    updates: Option<Rc<[ReadUpdate]>>,
}

/// The most updates a batch may have for the observer to keep them (and list the shard's rows).
const ROWS_MAX_UPDATES: usize = 20_000;
/// A shard of up to this many updates has its rows listed at each change of its batches; a
/// bigger one at most every [`ROWS_EVERY_MS`] (listing sorts every update: eight writers over a
/// thousand keys made the page's simulation ~1.7 times as slow, `scripts/bench-page.mjs`). The
/// rows say the upper they were listed at.
const ROWS_EVERY_CHANGE_UPDATES: usize = 2_000;
/// How often (runtime ms) the rows of a bigger shard are listed again.
const ROWS_EVERY_MS: u64 = 1_000;

/// A batch of a shard's trace, as the observer tells batches apart: lower, upper, length.
pub type BatchId = (Option<u64>, Option<u64>, u64);

fn batch_id(b: &HollowBatch) -> BatchId {
    (frontier(&b.desc.lower), frontier(&b.desc.upper), b.len)
}

/// Reads the updates of every batch of `state` not yet in `known` and counts their signs;
/// forgets batches the trace no longer holds. A part that cannot be read leaves its batch out.
async fn read_batches(
    location: &crate::location::Location,
    state: &State,
    known: BTreeMap<BatchId, BatchRead>,
) -> BTreeMap<BatchId, BatchRead> {
    let mut out = BTreeMap::new();
    for b in state.collections.trace.batches() {
        let id = batch_id(b);
        if let Some(known) = known.get(&id) {
            out.insert(id, known.clone());
        } else if let Some(updates) = super::versions::read_batch(location, b).await {
            let adds = updates.iter().filter(|u| u.3 > 0).count() as u64;
            let signs = (adds, updates.len() as u64 - adds);
            let updates = (updates.len() <= ROWS_MAX_UPDATES).then(|| updates.into());
            out.insert(id, BatchRead { signs, updates });
        }
    }
    out
}

impl BatchRead {
    /// How many updates it has.
    fn len(&self) -> usize {
        (self.signs.0 + self.signs.1) as usize
    }
}

/// Whether to list a shard's rows anew: `changed`, its batches changed since the rows were
/// listed (`listed`, at that runtime ms; `None`: never, or not every batch was read then). Rows
/// change only when the batches do (a batch is immutable). A shard of over
/// [`ROWS_EVERY_CHANGE_UPDATES`] `updates` is listed at most every [`ROWS_EVERY_MS`]; a change
/// held back by that stays due until it is listed.
fn rows_due(changed: bool, listed: Option<u64>, updates: usize, now: u64) -> bool {
    match listed {
        None => true,
        Some(at) => changed && (updates <= ROWS_EVERY_CHANGE_UPDATES || now >= at + ROWS_EVERY_MS),
    }
}

/// The rows of `state` at its upper, if every batch of it is read (and kept).
fn rows_of(state: &State, read: &BTreeMap<BatchId, BatchRead>) -> Option<RowsView> {
    let c = &state.collections;
    let mut batches = Vec::new();
    for b in c.trace.batches() {
        // A batch compaction has not touched keeps its writes' own times (its since is 0).
        let own_times = frontier(&b.desc.since) == Some(0);
        batches.push((read.get(&batch_id(b))?.updates.as_deref()?, own_times));
    }
    let mut rows = shard_rows(c.schemas.values().next(), batches);
    rows.upper = frontier(state.upper());
    Some(rows)
}

/// The latest observation of one oracle timeline's durable record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineView {
    /// The timeline.
    pub timeline: String,
    /// The stored epoch (the newest instance's).
    pub epoch: Option<u64>,
    /// The stored durable upper: every timestamp ever handed out is below it.
    pub durable_upper: Option<u64>,
    /// The seqno of the stored record.
    pub seqno: Option<u64>,
    /// Why the record could not be read.
    pub error: Option<String>,
}

/// Keeps `cell` up to date with `shard`'s state every `period_ms`.
pub async fn observe_shard(
    client: PersistClient,
    shard: ShardId,
    cell: Rc<RefCell<ShardObservation>>,
    period_ms: u64,
    journal: Rc<RefCell<Journal>>,
) {
    let consensus = Rc::clone(&client.location().consensus);
    let rt = client.runtime().clone();
    let mut witness = super::versions::VersionWitness::default();
    loop {
        let keep = cell.borrow().keep_contents;
        witness.set_keep_contents(keep);
        let error = match consensus.head(&shard.0).await {
            Ok(Some(head)) => decode_diff(&head.data).err().map(|e| {
                format!(
                    "state version {} of shard {shard} does not decode: {e}. Every handle on it \
                     now fails to read it; reset the database to start over",
                    head.seqno
                )
            }),
            Ok(None) => None,
            Err(e) => Some(format!("could not read shard {shard}: {e}")),
        };
        let (error, state) = match error {
            None => match client.inspect_state(&shard).await {
                Ok(state) => (None, Some(state)),
                Err(e) => (Some(format!("shard {shard} is broken: {e}")), None),
            },
            Some(e) => (Some(e), None),
        };
        // The witness reads the versions even when persist cannot make a state of them: that
        // is when the check has the most to say.
        let now = rt.now_ms();
        witness
            .pass(client.location(), &shard.0, state.as_ref(), &journal, now)
            .await;
        let read = match &state {
            Some(state) => {
                let known = cell.borrow().read.clone();
                Some(read_batches(client.location(), state, known).await)
            }
            None => None,
        };
        {
            let mut obs = cell.borrow_mut();
            if let (Some(state), Some(read)) = (state, read) {
                obs.rows_due |= !obs.read.keys().eq(read.keys());
                let updates = read.values().map(|r| r.len()).sum::<usize>();
                let listed = obs.rows.is_some().then_some(obs.rows_at_ms);
                if rows_due(obs.rows_due, listed, updates, now) {
                    obs.rows = rows_of(&state, &read);
                    obs.rows_at_ms = now;
                    obs.rows_due = obs.rows.is_none();
                }
                obs.read = read;
                obs.state = Some(state);
            }
            obs.error = error;
        }
        rt.sleep(period_ms).await;
    }
}

/// Keeps `cell` up to date with `timeline`'s stored record every `period_ms`.
pub async fn observe_timeline(
    consensus: Rc<dyn Consensus>,
    runtime: Runtime,
    timeline: String,
    cell: Rc<RefCell<TimelineView>>,
    period_ms: u64,
    journal: Rc<RefCell<Journal>>,
) {
    let key = DurableTimestampOracle::consensus_key(&timeline);
    let mut last = None;
    loop {
        let now = runtime.now_ms();
        last =
            super::versions::timeline_pass(&*consensus, &key, &timeline, last, &journal, now).await;
        let mut view = TimelineView {
            timeline: timeline.clone(),
            ..TimelineView::default()
        };
        match consensus.head(&key).await {
            Ok(Some(head)) => {
                view.seqno = Some(head.seqno.0);
                match DurableRecord::decode(&head.data) {
                    Ok(r) => {
                        view.epoch = Some(r.epoch);
                        view.durable_upper = Some(r.upper);
                    }
                    Err(e) => {
                        view.error = Some(format!(
                            "the record of timeline {timeline} (seqno {}) does not decode: {e}",
                            head.seqno
                        ))
                    }
                }
            }
            Ok(None) => {}
            Err(e) => view.error = Some(format!("could not read {key}: {e}")),
        }
        *cell.borrow_mut() = view;
        runtime.sleep(period_ms).await;
    }
}

/// A blob part or an inline part of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartView {
    /// The Blob key (`None`: inline in state).
    pub key: Option<String>,
    /// Its size.
    pub bytes: u64,
}

/// A batch of a shard's trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchView {
    /// Its lower.
    pub lower: Option<u64>,
    /// Its upper.
    pub upper: Option<u64>,
    /// Its since (the times of its updates are advanced to it).
    pub since: Option<u64>,
    /// Its updates.
    pub len: u64,
    /// How many of them add (diff > 0), once the observer has read them.
    pub adds: Option<u64>,
    /// How many retract (diff < 0), once the observer has read them.
    pub retractions: Option<u64>,
    /// Its parts.
    pub parts: Vec<PartView>,
}

/// A writer or reader registered in a shard's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HandleView {
    /// The persist id.
    pub id: String,
    /// The actor holding it, if this page knows it (another tab's handles have none).
    pub actor: Option<String>,
    /// A writer's most recent upper, or a reader's since.
    pub frontier: Option<u64>,
    /// Its last heartbeat.
    pub heartbeat_ms: u64,
    /// Its lease: how long it may stay silent before others may expire it (`None`: a critical
    /// reader, which has no lease).
    pub lease_ms: Option<u64>,
    /// When its lease runs out unless it heartbeats (`heartbeat_ms + lease_ms`).
    pub expires_ms: Option<u64>,
}

/// What holds a shard's since: every reader whose since is the shard's (the since is the meet
/// of all readers' sinces, so these are the ones keeping it there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SinceHold {
    /// `leased` or `critical`.
    pub kind: &'static str,
    /// The reader.
    pub handle: HandleView,
}

/// A rollup in state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RollupView {
    /// The seqno whose state it holds.
    pub seqno: u64,
    /// Its size.
    pub bytes: u64,
}

/// What the shard panel shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardView {
    /// The shard.
    pub name: String,
    /// Its seqno.
    pub seqno: u64,
    /// Its upper.
    pub upper: Option<u64>,
    /// Its since.
    pub since: Option<u64>,
    /// The wall time of its latest version.
    pub walltime_ms: u64,
    /// The earliest live seqno (after GC's truncation), if known.
    pub earliest_seqno: Option<u64>,
    /// GC was last requested below this seqno.
    pub seqno_since: u64,
    /// The batches, oldest first.
    pub batches: Vec<BatchView>,
    /// The rollups.
    pub rollups: Vec<RollupView>,
    /// Registered writers.
    pub writers: Vec<HandleView>,
    /// Registered leased readers.
    pub readers: Vec<HandleView>,
    /// Registered critical readers (no lease: they hold the since until they move it).
    pub critical_readers: Vec<HandleView>,
    /// The readers holding the since where it is (empty without readers: then nothing holds it
    /// and it follows compaction's choice).
    pub since_held_by: Vec<SinceHold>,
    /// Updates over all batches.
    pub updates: u64,
    /// Bytes of inline parts.
    pub inline_bytes: u64,
    /// Bytes of Blob parts.
    pub blob_bytes: u64,
    /// Recent merges and GCs.
    pub maintenance: Vec<MaintenanceView>,
    /// The latest sweep that deleted something (kept however much maintenance follows it).
    pub last_sweep: Option<SweepView>,
    /// Its rows at its upper (the first few), once the observer has read every batch.
    pub rows: Option<RowsView>,
    /// Why the shard could not be read, if it could not.
    pub error: Option<String>,
}

/// The shard panel's data for `name`.
pub fn shard_view(name: &str, obs: &ShardObservation, journal: &Journal) -> ShardView {
    let notes = journal.shards.get(name);
    let mut view = ShardView {
        name: name.to_string(),
        seqno: 0,
        upper: Some(0),
        since: Some(0),
        walltime_ms: 0,
        earliest_seqno: notes.and_then(|n| n.earliest_seqno),
        seqno_since: 0,
        batches: Vec::new(),
        rollups: Vec::new(),
        writers: Vec::new(),
        readers: Vec::new(),
        critical_readers: Vec::new(),
        since_held_by: Vec::new(),
        updates: 0,
        inline_bytes: 0,
        blob_bytes: 0,
        maintenance: notes.map_or_else(Vec::new, |n| n.maintenance.iter().cloned().collect()),
        last_sweep: notes.and_then(|n| n.last_sweep.clone()),
        rows: obs.rows.clone(),
        error: obs.error.clone(),
    };
    let Some(state) = &obs.state else {
        return view;
    };
    let c = &state.collections;
    view.seqno = state.seqno.0;
    view.walltime_ms = state.walltime_ms;
    view.upper = frontier(state.upper());
    view.since = frontier(state.since());
    view.seqno_since = c.last_gc_req.0;
    view.batches = c
        .trace
        .batches()
        .iter()
        .map(|b| batch_view(b, obs.read.get(&batch_id(b)).map(|r| &r.signs)))
        .collect();
    for b in &view.batches {
        view.updates += b.len;
        for p in &b.parts {
            if p.key.is_some() {
                view.blob_bytes += p.bytes;
            } else {
                view.inline_bytes += p.bytes;
            }
        }
    }
    view.rollups = c
        .rollups
        .iter()
        .map(|(s, r)| RollupView {
            seqno: s.0,
            bytes: r.encoded_size_bytes,
        })
        .collect();
    [view.writers, view.readers, view.critical_readers] = handle_views(c, journal);
    view.since_held_by = since_holds(view.since, &view.readers, &view.critical_readers);
    view
}

/// A batch of the trace, with its parts (a Blob key and its size, or inline bytes).
fn batch_view(b: &HollowBatch, signs: Option<&(u64, u64)>) -> BatchView {
    let parts = b
        .parts
        .iter()
        .map(|p| match p {
            BatchPart::Hollow {
                key,
                encoded_size_bytes,
            } => PartView {
                key: Some(key.clone()),
                bytes: *encoded_size_bytes,
            },
            BatchPart::Inline { encoded } => PartView {
                key: None,
                bytes: encoded.len() as u64,
            },
        })
        .collect();
    BatchView {
        lower: frontier(&b.desc.lower),
        upper: frontier(&b.desc.upper),
        since: frontier(&b.desc.since),
        len: b.len,
        adds: signs.map(|s| s.0),
        retractions: signs.map(|s| s.1),
        parts,
    }
}

/// The handles registered in the state: writers, leased readers and critical readers (these
/// have no lease), each named by the actor holding it when the journal knows it.
fn handle_views(c: &StateCollections, journal: &Journal) -> [Vec<HandleView>; 3] {
    let actor = |id: &str| journal.ids.get(id).cloned();
    let writers = c
        .writers
        .iter()
        .map(|(id, w)| HandleView {
            id: id.0.clone(),
            actor: actor(&id.0),
            frontier: frontier(&w.most_recent_write_upper),
            heartbeat_ms: w.last_heartbeat_ms,
            lease_ms: Some(w.lease_duration_ms),
            expires_ms: Some(w.last_heartbeat_ms.saturating_add(w.lease_duration_ms)),
        })
        .collect();
    let readers = c
        .leased_readers
        .iter()
        .map(|(id, r)| HandleView {
            id: id.0.clone(),
            actor: actor(&id.0),
            frontier: frontier(&r.since),
            heartbeat_ms: r.last_heartbeat_ms,
            lease_ms: Some(r.lease_duration_ms),
            expires_ms: Some(r.last_heartbeat_ms.saturating_add(r.lease_duration_ms)),
        })
        .collect();
    let critical_readers = c
        .critical_readers
        .iter()
        .map(|(id, r)| HandleView {
            id: id.0.clone(),
            actor: actor(&id.0),
            frontier: frontier(&r.since),
            heartbeat_ms: 0,
            lease_ms: None,
            expires_ms: None,
        })
        .collect();
    [writers, readers, critical_readers]
}

/// The readers whose since is the shard's `since` (leased first, then critical): they hold it.
fn since_holds(
    since: Option<u64>,
    readers: &[HandleView],
    critical_readers: &[HandleView],
) -> Vec<SinceHold> {
    let holds = |kind: &'static str, hs: &[HandleView]| {
        hs.iter()
            .filter(|h| h.frontier == since)
            .map(|h| SinceHold {
                kind,
                handle: h.clone(),
            })
            .collect::<Vec<_>>()
    };
    let mut held_by = holds("leased", readers);
    held_by.extend(holds("critical", critical_readers));
    held_by
}

/// Observers by shard or timeline name, and what they saw.
#[derive(Default)]
pub struct Observers {
    /// Shards.
    pub shards: crate::vec_map::VecMap<
        String,
        (
            Rc<RefCell<ShardObservation>>,
            crate::runtime::JoinHandle<()>,
        ),
    >,
    /// Oracle timelines.
    pub timelines:
        crate::vec_map::VecMap<String, (Rc<RefCell<TimelineView>>, crate::runtime::JoinHandle<()>)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_shard_lists_its_rows_at_each_change_and_a_big_one_at_most_every_second() {
        let small = ROWS_EVERY_CHANGE_UPDATES;
        let big = ROWS_EVERY_CHANGE_UPDATES + 1;
        // Never listed (or not every batch read): list now, whatever the size.
        assert!(rows_due(false, None, big, 0));
        // Nothing changed: nothing to list, however long ago.
        assert!(!rows_due(false, Some(0), small, 10_000));
        assert!(!rows_due(false, Some(0), big, 10_000));
        // A change of a small shard: at once.
        assert!(rows_due(true, Some(500), small, 501));
        // A change of a big shard: held back until ROWS_EVERY_MS after the last listing...
        assert!(!rows_due(true, Some(500), big, 500 + ROWS_EVERY_MS - 1));
        // ...and then listed, even with no further change (the caller keeps it due).
        assert!(rows_due(true, Some(500), big, 500 + ROWS_EVERY_MS));
    }
}
