//! Garbage collection: truncating Consensus below the versions anyone still needs, then deleting
//! the blobs only the truncated versions referred to.
//!
//! A state version refers to batch parts and rollups in Blob. Once every reader has moved its
//! seqno hold past a version (the shard's **seqno since** is `min(seqno, every reader's hold)`),
//! nothing will read that version again, and a blob only versions below the seqno since refer to
//! can go (epoch-based reclamation: logically dropped at seqno X, physically deleted once every
//! hold and some rollup are above X).
//!
//! **Trigger** (`StateCollections::maybe_gc`, run on every version before it is committed): when
//! the seqno since has moved `max(1, ceil(log2(seqno)))` past `last_gc_req` and the command is a
//! write (or the shard has no writers), `last_gc_req` moves up and the committer gets a
//! [`GcReq`]`{old_seqno_since, new_seqno_since}` to run in the background (`maintenance.rs`).
//!
//! **The collector** ([`gc_and_truncate`]), for `new = new_seqno_since`:
//! 1. scan every live version from the earliest, `E`; if `E >= new`, someone already collected
//!    this far: done (by hand, it still finishes tickets, unlists and sweeps: below). A routine
//!    collection reads only `E` and takes what the versions after it inserted from its process's
//!    memo of the versions it committed or fetched, scanning them all only if the memo lacks
//!    one (so a collection reads one version, not all of them again);
//! 2. read the state at `E` from the rollup listed at exactly `E` (there always is one, see the
//!    invariant below); the blobs of every version below `new` are those of the state at `E`
//!    (parts and listed rollups) plus those the diffs after it insert; the deletable ones are
//!    those not referenced at `new` (a blob dropped from state never returns: keys are written
//!    once, so no later version refers to it either). The state at `new` comes from whoever
//!    committed it (the routine trigger keeps it), from the cache, or else from the diffs;
//! 3. if parts are deletable, write a **ticket** listing them (`<shard>/gc/<new>/…`), before the
//!    truncate makes them garbage: a collector that stops after its truncate leaves its deletes
//!    to whoever reads the ticket next (rollups need none: the sweep finds them);
//! 4. **one command, one seqno** (`add_and_remove_rollups`): list a rollup at exactly `new`
//!    (reuse a listed one, or write the state at `new` to Blob first; if another rollup won the
//!    seqno, ours is deleted and theirs is used) and unlist the rollups below `E` (Consensus is
//!    truncated below `E`, so none of them is the earliest's), so the listed rollups stay bounded
//!    however long the shard lives. No command at all when there is nothing to list or unlist.
//!    The unlisted rollups' blobs are still referenced by live versions, so a later collection
//!    deletes them (step 2 finds them referenced below its target and not at it);
//! 5. `consensus.truncate(shard, new)`: `new` becomes the earliest live version;
//! 6. only now delete the deletable blobs (no live version refers to them any more), then the
//!    ticket;
//! 7. every [`SWEEP_INTERVAL_SEQNOS`] seqnos (and always by hand; and on its own, without a
//!    collection, by whoever commits a version whose lease expiry removed a writer, so that a
//!    crashed writer's parts go as soon as its lease has run out): **sweep**, which also finishes
//!    every ticket at or below the earliest version (its collection truncated, or a later one
//!    did: what it lists is garbage for good).
//!
//! **The sweep** deletes what no live version refers to and no write in flight can still commit,
//! whatever crashed: it lists the shard's blobs, *then* reads the state and the live versions
//! (so a blob listed and committed since is seen as referenced), and deletes, of those no live
//! version refers to: parts of writers no longer registered (a writer's key names it,
//! `state::part_writer`; `compare_and_append` refuses a part of an unregistered writer, so an
//! expired writer's parts never become referenced); merge outputs assigned before the oldest
//! listed rollup (`state::maintenance_output_seqno`; `apply_merge_res` refuses them); rollups
//! older than the oldest listed one or at a seqno another rollup holds (`add_rollup` refuses
//! them). The oldest listed rollup never goes back, and writer ids are never reused, so each of
//! these is garbage for good. This covers the three ways blobs used to leak: a writer that
//! stopped between writing a part and committing it (swept once its lease expired), a collector
//! that died between its truncate and its deletes (its ticket), and maintenance output whose
//! commit was indeterminate and then merged away (swept once stale). Storage is bounded by the
//! live data.
//!
//! **Routine collections** (the background work a commit assigns, `maintenance.rs`) collect up
//! to the newest *listed rollup* at or below the request's target instead of the target itself:
//! that rollup is already in Blob and listed, so step 4 writes nothing, and routine rollups set
//! the pace. They also start from the state at their process's previous target, when that is
//! still the earliest live version, rather than reading its rollup back. A collection by hand ([`gc_now`]) goes to exactly its target.
//!
//! **Invariants**: no live version refers to a deleted blob (deletes come after the truncate
//! that made every referring version dead, and sweeps delete only what no live version refers
//! to); no part of a write that can still commit is deleted (the fences above); a rollup exists
//! in Blob, listed in state, at exactly the earliest live seqno (step 4 lists it before step 5
//! makes it the earliest, and unlists only rollups below a seqno already truncated to).
//!
//! **Concurrency and crashes**: two collectors may run at once, in any order, with different
//! targets, and any of them may stop at any await (its future dropped). Every step tolerates
//! that: deletes of missing blobs succeed, a repeated or overtaken truncate deletes nothing, a
//! collector whose rollup at `E` vanished (someone else collected past `E`) scans again, a
//! collector that died before its truncate leaves work that the next one redoes, and one that
//! died after it leaves a ticket. [`leaked_blobs`] lists what no live version refers to: at
//! quiescence, after collections by hand to a fixed point, nothing.
//!
//! A permanent error (a version or rollup that does not decode, the rollup at the earliest
//! version gone while state still lists it) ends the collection and marks the shard broken.

//!
//! Files: this one holds the requests, the report and the entry points; `walk.rs` the scan and
//! replay of the live versions that the other three share; `collect.rs` the collector (steps 1
//! to 7); `sweep.rs` the sweep; `leak.rs` the leak check ([`leaked_blobs`]).

use serde::Serialize;

use super::background::MaintenanceIds;
use super::machine::Machine;
use super::state::State;
use super::{PersistClient, ShardId};
use crate::location::{PermanentError, SeqNo};

mod collect;
mod leak;
mod sweep;
mod walk;

/// The request type lives with the trigger that makes it (`state/upkeep.rs`).
pub use super::state::GcReq;
pub use leak::{leaked_blobs, live_references};
pub(crate) use sweep::sweep_now;

/// What one collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    /// The target.
    pub new_seqno_since: SeqNo,
    /// Batch parts deleted.
    pub parts_deleted: Vec<String>,
    /// Rollups deleted.
    pub rollups_deleted: Vec<String>,
    /// Rollups unlisted from state (below the new earliest version).
    pub rollups_unlisted: usize,
    /// Versions the truncate deleted (`None`: it stopped before truncating).
    pub versions_truncated: Option<usize>,
    /// Why it stopped early or did nothing.
    pub skipped: Option<String>,
    /// Blobs deleted for collectors that stopped after their truncate (their tickets).
    pub unfinished_deleted: usize,
    /// Blobs the sweep deleted: unreferenced, and no write in flight can commit them.
    pub swept: Vec<String>,
}

/// How many times a collector scans again after finding that another one moved on under it.
const MAX_RESCANS: usize = 16;

/// Runs a collection up to the shard's current seqno since, now, in this task (for tests and
/// the playground; writers do this on their own in the background).
pub async fn gc_now(
    client: &PersistClient,
    shard_id: &ShardId,
) -> Result<GcReport, PermanentError> {
    let machine = client.machine(shard_id, "gc".into());
    machine.fetch_and_update_state_retrying().await?;
    let state = machine.state();
    let req = GcReq {
        old_seqno_since: state.collections.last_gc_req,
        new_seqno_since: state.collections.seqno_since(state.seqno),
    };
    let ids = MaintenanceIds::from_client(client);
    let (report, _) = gc_and_truncate_with(&machine, req, &ids, GcHints::default()).await?;
    Ok(report)
}

/// Runs the collector for `req` (see the module docs). Its future may be dropped at any point.
pub async fn gc_and_truncate(
    client: &PersistClient,
    shard_id: &ShardId,
    req: GcReq,
) -> Result<GcReport, PermanentError> {
    let machine = client.machine(shard_id, "gc".into());
    let ids = MaintenanceIds::from_client(client);
    let (report, _) = gc_and_truncate_with(&machine, req, &ids, GcHints::default()).await?;
    Ok(report)
}
/// What a collector may start from, besides storage.
#[derive(Default)]
pub(crate) struct GcHints<'a> {
    /// States this process already has (the one at the target saves replaying diffs; the one at
    /// the earliest live version saves reading and decoding its rollup).
    pub(crate) states: Vec<&'a State>,
    /// Collect only up to the newest listed rollup at or below the request's target (no rollup
    /// to write, no command to list it), and skip if that rollup is already the earliest listed
    /// one. Otherwise (`false`), collect up to exactly the target, writing a rollup there if none
    /// is listed: by hand, and for a routine rollup that a collection lists itself (see
    /// `maintenance.rs`: one command instead of two).
    pub(crate) at_latest_rollup: bool,
    /// Routine work a commit assigned (`false`: by hand, which always sweeps and, when the shard
    /// is already collected, still finishes the bookkeeping).
    pub(crate) routine: bool,
}

/// The collector (see the module docs), with ids for the rollup it may write. On success it
/// also returns the state at its target: the earliest live version after its truncate, which
/// the next collection of this process starts from.
pub(crate) async fn gc_and_truncate_with(
    machine: &Machine,
    req: GcReq,
    ids: &MaintenanceIds,
    hints: GcHints<'_>,
) -> Result<(GcReport, Option<State>), PermanentError> {
    // One copy of the collector in the `.wasm`, however many callers await it (a boxed future
    // is not inlined into each).
    let collector: futures::future::LocalBoxFuture<'_, _> =
        Box::pin(collect::collect(machine, req, ids, hints));
    collector.await
}
/// The `kind` of the [`PersistEvent::BlobsDeleted`] of a sweep's deletes of parts of writers that
/// are no longer registered (a crashed writer's uncommitted parts, among others).
pub const SWEPT_PARTS: &str = "sweep: parts of expired writers";
/// ... of merge outputs assigned before the oldest listed rollup that no version refers to.
pub const SWEPT_OUTPUTS: &str = "sweep: stale merge outputs";
/// ... of rollups that can never be listed (older than the oldest listed, or their seqno taken).
pub const SWEPT_ROLLUPS: &str = "sweep: unlisted rollups";
/// The `kind` of the deletes a collection finished for one that stopped after its truncate.
pub const FINISHED_FOR_DEAD_COLLECTOR: &str = "unfinished gc";

/// A routine collection sweeps when its target crosses a multiple of this many seqnos (one by
/// hand always sweeps): a sweep lists every blob of the shard and replays the live versions.
pub const SWEEP_INTERVAL_SEQNOS: u64 = 64;
