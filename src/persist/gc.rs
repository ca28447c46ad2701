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

use std::collections::BTreeSet;
use std::ops::ControlFlow::{Break, Continue};

use bytes::Bytes;
use serde::Serialize;

use super::background::MaintenanceIds;
use super::encoding::{decode_diff, decode_gc_ticket, decode_rollup, encode_gc_ticket};
use super::events::PersistEvent;
use super::machine::Machine;
use super::rollup::{settle_rollup, write_rollup_blob};
use super::state::{maintenance_output_seqno, part_writer, HollowRollup, State, WriterId};
use super::{PersistClient, ShardId};
use crate::location::{
    BlobMetadata, BrokenAt, PermanentError, PermanentKind, SeqNo, VersionedData, SCAN_ALL,
};

/// A request to collect garbage below `new_seqno_since`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GcReq {
    /// `last_gc_req` before this request (shown in events; the collector works from a scan).
    pub old_seqno_since: SeqNo,
    /// No live reader or version needs the versions below this one.
    pub new_seqno_since: SeqNo,
}

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

/// The blobs under the shard's prefix that no live state version refers to (as a rollup it
/// lists or a part of a batch it holds), with their sizes. At quiescence these are exactly the
/// leaks the module docs list; while commands run, a part written but not yet committed shows
/// here too.
pub async fn leaked_blobs(
    client: &PersistClient,
    shard_id: &ShardId,
) -> Result<Vec<BlobMetadata>, PermanentError> {
    let machine = client.machine(shard_id, "leak-check".into());
    let referenced = live_references(&machine).await?;
    let listed = list_retrying(&machine, "").await?;
    Ok(listed
        .into_iter()
        .filter(|m| !referenced.contains(&m.key))
        .collect())
}

/// Every Blob key some live version refers to: replays every live version from the rollup at
/// the earliest one. Retries while collectors move the earliest version under it.
pub async fn live_references(machine: &Machine) -> Result<BTreeSet<String>, PermanentError> {
    live_references_with(machine, &[], false).await
}

/// [`live_references`] starting from states the caller has (`known`: the one at the earliest
/// live version saves reading its rollup) and, with `from_memo`, from this process's memo of
/// what each version inserted (saves decoding them); either falls back to storage.
async fn live_references_with(
    machine: &Machine,
    known: &[&State],
    mut from_memo: bool,
) -> Result<BTreeSet<String>, PermanentError> {
    let mut last = String::new();
    for _ in 0..MAX_RESCANS {
        let versions = scan_all_retrying(machine).await?;
        let (Some(earliest), Some(head)) = (versions.first(), versions.last()) else {
            return Ok(BTreeSet::new());
        };
        let (earliest, head) = (earliest.seqno, head.seqno);
        if earliest == head {
            machine.fetch_and_update_state_retrying().await?;
            let state = machine.state();
            if state.seqno == head {
                return Ok(references(&state).collect());
            }
            last = format!("the head moved past {head}");
        } else {
            match walk(machine, &versions, head, known, from_memo).await? {
                Walk::Walked {
                    state_at_new,
                    mut referenced_below_new,
                    ..
                } => {
                    referenced_below_new.extend(references(&state_at_new));
                    return Ok(referenced_below_new);
                }
                Walk::Rescan(reason) if from_memo => {
                    // From storage, at once.
                    from_memo = false;
                    last = reason;
                    continue;
                }
                Walk::Done(reason) | Walk::Rescan(reason) => last = reason,
            }
        }
        machine.cfg.backoff().wait(&machine.runtime).await;
    }
    Err(machine.permanent(
        BrokenAt::Store,
        PermanentKind::Inconsistent,
        format!("the live versions kept moving after {MAX_RESCANS} scans: {last}"),
    ))
}

/// What scanning and replaying the live versions found.
enum Walk {
    /// Nothing (more) to do: the reason.
    Done(String),
    /// Another collector moved on under us: scan again.
    Rescan(String),
    /// The live versions up to `new`.
    Walked {
        earliest: SeqNo,
        state_at_new: Box<State>,
        referenced_below_new: BTreeSet<String>,
    },
}

async fn scan_all_retrying(machine: &Machine) -> Result<Vec<VersionedData>, PermanentError> {
    scan_retrying(machine, SCAN_ALL).await
}

async fn scan_retrying(
    machine: &Machine,
    limit: usize,
) -> Result<Vec<VersionedData>, PermanentError> {
    let consensus = &machine.location.consensus;
    machine
        .retrying(|| consensus.scan(&machine.shard_id.0, SeqNo(0), limit))
        .await
}

/// The blobs one state refers to: its batches' parts and its listed rollups.
fn references(state: &State) -> impl Iterator<Item = String> + '_ {
    state
        .part_keys()
        .map(String::from)
        .chain(state.collections.rollups.values().map(|r| r.key.clone()))
}

/// The state at `earliest`, from the rollup `current` lists there; `Err(rescan)` if none is
/// listed or it is gone because someone collected past `earliest` meanwhile.
async fn read_rollup_at(
    machine: &Machine,
    current: &State,
    earliest: SeqNo,
) -> Result<Result<State, Walk>, PermanentError> {
    let Some(rollup) = current.collections.rollups.get(&earliest).cloned() else {
        return Ok(Err(Walk::Rescan(format!(
            "no rollup is listed at the earliest version {earliest}"
        ))));
    };
    let blob = &machine.location.blob;
    let at_rollup = BrokenAt::BlobKey(rollup.key.clone());
    let Some(bytes) = machine.retrying(|| blob.get(&rollup.key)).await? else {
        // Gone: fine if someone collected past `earliest` meanwhile, broken if not.
        let again = scan_all_retrying(machine).await?;
        if again.first().map(|v| v.seqno) != Some(earliest) {
            return Ok(Err(Walk::Rescan(format!(
                "the rollup at {earliest} is gone"
            ))));
        }
        let err = machine.permanent(
            at_rollup,
            PermanentKind::Missing,
            format!("the rollup at the earliest live version {earliest} is gone"),
        );
        return Err(machine.mark_broken(err));
    };
    let state = decode_rollup(&bytes).map_err(|e| {
        machine.mark_broken(machine.permanent(
            at_rollup.clone(),
            PermanentKind::Undecodable,
            e.to_string(),
        ))
    })?;
    if state.shard_id != machine.shard_id || state.seqno != earliest {
        return Err(machine.mark_broken(machine.permanent(
            at_rollup,
            PermanentKind::Inconsistent,
            format!(
                "holds {} at {}, not {} at {earliest}",
                state.shard_id, state.seqno, machine.shard_id
            ),
        )));
    }
    Ok(Ok(state))
}

/// Steps 1 and 2 of the module docs over `versions` (a scan of every live version). `known` are
/// states the caller has (see [`GcHints`]). With `from_memo`, `versions` holds only the earliest
/// live version, and what each version below `new` inserted comes from this process's memo
/// (`Machine::seen`): a rescan if the memo lacks one, or if the state at `new` is not known.
async fn walk(
    machine: &Machine,
    versions: &[VersionedData],
    new: SeqNo,
    known: &[&State],
    from_memo: bool,
) -> Result<Walk, PermanentError> {
    let Some(first) = versions.first() else {
        return Ok(Walk::Done("the shard has no versions".into()));
    };
    let earliest = first.seqno;
    if earliest >= new {
        return Ok(Walk::Done(format!(
            "already collected: the earliest version is {earliest}"
        )));
    }
    if versions
        .iter()
        .map(|v| v.seqno)
        .ne((earliest.0..).map(SeqNo).take(versions.len()))
    {
        return Ok(Walk::Rescan(
            "the scanned versions are not contiguous".into(),
        ));
    }
    let known_at = |seqno: SeqNo| known.iter().find(|s| s.seqno == seqno).copied();
    let (state, current) = match known_at(earliest) {
        // This process collected up to `earliest` itself: it has the state there.
        Some(state) => (state.clone(), machine.state()),
        None => {
            // The state's rollup list, at least as new as the scan.
            machine.fetch_and_update_state_retrying().await?;
            let current = machine.state();
            match read_rollup_at(machine, &current, earliest).await? {
                Ok(state) => (state, current),
                Err(rescan) => return Ok(rescan),
            }
        }
    };
    let inconsistent = |at: BrokenAt, e: String| {
        machine.mark_broken(machine.permanent(at, PermanentKind::Inconsistent, e))
    };
    let undecodable = |at: BrokenAt, e: String| {
        machine.mark_broken(machine.permanent(at, PermanentKind::Undecodable, e))
    };
    // Every blob some version in [earliest, new) refers to was referred to by the state at
    // `earliest` or was inserted by one of the diffs after it: no need to rebuild each version.
    let mut referenced_below_new: BTreeSet<String> = references(&state).collect();
    // SUBTLE: what a version inserts is read from this process's memo of the versions it
    // committed or decoded (`Machine::seen`) when it is there, so that routine collections do
    // not decode every diff again; the diffs themselves are decoded only to replay to `new`.
    let replay = known_at(new).is_none() && current.seqno != new;
    if from_memo {
        if replay {
            return Ok(Walk::Rescan(format!("the state at {new} is not known")));
        }
        let seen = machine.seen.borrow();
        for seqno in (earliest.0 + 1..new.0).map(SeqNo) {
            let Some(inserted) = seen.get(&seqno) else {
                return Ok(Walk::Rescan(format!("no memo of what {seqno} inserted")));
            };
            referenced_below_new.extend(inserted.iter().cloned());
        }
    }
    let mut diffs = Vec::new();
    let versions = if from_memo { &[][..] } else { versions };
    for version in versions.iter().skip(1).take_while(|v| v.seqno <= new) {
        let below = version.seqno < new;
        if !replay {
            if !below {
                break;
            }
            if let Some(inserted) = machine.seen.borrow().get(&version.seqno) {
                referenced_below_new.extend(inserted.iter().cloned());
                continue;
            }
        }
        let at = BrokenAt::Version(version.seqno);
        let diff =
            decode_diff(&version.data).map_err(|e| undecodable(at.clone(), e.to_string()))?;
        if diff.seqno_to != version.seqno {
            return Err(inconsistent(
                at,
                format!("holds the diff to {}", diff.seqno_to),
            ));
        }
        if below {
            referenced_below_new.extend(diff.inserted_blobs());
        }
        diffs.push(diff);
    }
    // The state at `new`: the caller's, the cache if it is there, or the diffs replayed.
    let state_at_new = match (known_at(new), current.seqno == new) {
        (Some(known), _) => known.clone(),
        (_, true) => current,
        _ => {
            let mut state = state;
            for diff in &diffs {
                diff.apply(&mut state)
                    .map_err(|e| inconsistent(BrokenAt::Version(diff.seqno_to), e))?;
            }
            state
        }
    };
    if state_at_new.seqno != new {
        return Ok(Walk::Done(format!(
            "the live versions end at {}, before {new}",
            state_at_new.seqno
        )));
    }
    Ok(Walk::Walked {
        earliest,
        state_at_new: Box::new(state_at_new),
        referenced_below_new,
    })
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
        Box::pin(collect(machine, req, ids, hints));
    collector.await
}

async fn collect(
    machine: &Machine,
    req: GcReq,
    ids: &MaintenanceIds,
    hints: GcHints<'_>,
) -> Result<(GcReport, Option<State>), PermanentError> {
    let by_hand = !hints.routine;
    let mut new = req.new_seqno_since;
    if hints.at_latest_rollup && machine.cfg.rollup_threshold > 0 {
        let state = machine.state();
        let rollups = &state.collections.rollups;
        let first = rollups.keys().next().copied();
        match rollups.range(..=new).next_back().map(|(s, _)| *s) {
            Some(latest) if Some(latest) != first => new = latest,
            _ => {
                let report = GcReport {
                    new_seqno_since: new,
                    skipped: Some("no rollup above the earliest one yet".into()),
                    ..GcReport::default()
                };
                return Ok((report, None));
            }
        }
    }
    let mut report = GcReport {
        new_seqno_since: new,
        ..GcReport::default()
    };
    let skip = |mut report: GcReport, reason: String| {
        machine.events.record(|| PersistEvent::GcSkipped {
            who: machine.who.clone(),
            shard: machine.shard_id.0.clone(),
            new_seqno_since: new,
            reason: reason.clone(),
            at_ms: machine.runtime.now_ms(),
        });
        report.skipped = Some(reason);
        Ok((report, None))
    };

    // 1 and 2: the live versions and what they refer to.
    let mut backoff = machine.cfg.backoff();
    let mut walked = None;
    let mut last_reason = String::new();
    // SUBTLE: a routine collection first reads only the earliest live version, and takes what
    // the versions after it inserted from this process's memo (it committed or fetched them);
    // only if the memo lacks one does it read every live version again.
    let mut from_memo = hints.routine;
    for _ in 0..MAX_RESCANS {
        let versions = if from_memo {
            scan_retrying(machine, 1).await?
        } else {
            scan_all_retrying(machine).await?
        };
        match walk(machine, &versions, new, &hints.states, from_memo).await? {
            Walk::Done(reason) => {
                // Already collected this far (or nothing to collect): finish what collectors
                // that stopped after their truncate left, and, by hand, the bookkeeping.
                if let (Some(earliest), true) = (versions.first().map(|v| v.seqno), by_hand) {
                    unlist_rollups(machine, None, earliest, &mut report).await?;
                    sweep(machine, earliest, &mut report, None).await?;
                }
                return skip(report, reason);
            }
            Walk::Rescan(reason) if from_memo => {
                // The full scan follows at once.
                from_memo = false;
                last_reason = reason;
            }
            Walk::Rescan(reason) => {
                last_reason = reason;
                backoff.wait(&machine.runtime).await;
            }
            Walk::Walked {
                earliest,
                state_at_new,
                referenced_below_new,
            } => {
                walked = Some((earliest, state_at_new, referenced_below_new));
                break;
            }
        }
    }
    let Some((earliest, state_at_new, mut deletable)) = walked else {
        return skip(
            report,
            format!("gave up after {MAX_RESCANS} scans: {last_reason}"),
        );
    };
    for key in references(&state_at_new) {
        deletable.remove(&key);
    }
    let deletable: Vec<String> = deletable.into_iter().collect();

    // 3: the ticket: what this collection deletes, in Blob before the truncate makes it garbage,
    // so that whoever collects next finishes the deletes if this collector stops after it.
    // Rollups need no ticket: once unlisted and below the oldest listed one, the sweep finds
    // them anyway.
    let ticket = ticket_key(machine, new, ids);
    let ticketed = deletable.iter().any(|k| !k.contains("/rollup/"));
    if ticketed {
        let bytes = Bytes::from(encode_gc_ticket(&deletable));
        machine
            .write_blob_retrying(&ticket, bytes, "gc ticket")
            .await?;
    }

    // 4: a rollup at exactly `new`, listed, and the rollups below the earliest live version
    // unlisted: one command, one seqno (none if there is nothing to change).
    let rollup = if machine.state().collections.rollups.contains_key(&new) {
        None
    } else {
        Some(write_rollup_blob(machine, &state_at_new, ids).await?)
    };
    let listed = unlist_rollups(
        machine,
        rollup.as_ref().map(|r| (new, r)),
        earliest,
        &mut report,
    )
    .await?;
    if let (Some(rollup), Some((listed, maybe_committed))) = (&rollup, listed) {
        settle_rollup(machine, (new, rollup), listed, maybe_committed, "gc").await?;
    }
    if !machine.state().collections.rollups.contains_key(&new) {
        // Only a rollup older than every listed one is refused: others collected past `new`
        // (and the ticket, if any, is theirs to finish: its seqno is below the earliest).
        return skip(
            report,
            format!("no rollup can be listed at {new}: the shard was collected past it"),
        );
    }

    // 5: truncate. A collector that got further first makes this a no-op.
    let consensus = &machine.location.consensus;
    let deleted = machine
        .retrying(|| consensus.truncate(&machine.shard_id.0, new))
        .await?;
    machine.events.record(|| PersistEvent::ConsensusTruncated {
        who: machine.who.clone(),
        shard: machine.shard_id.0.clone(),
        seqno: new,
        deleted,
        at_ms: machine.runtime.now_ms(),
    });
    report.versions_truncated = Some(deleted);
    machine.forget_below(new);

    // 6: delete what only dead versions referred to, then the ticket; then finish the tickets
    // of collectors that stopped after their truncate.
    let (rollups, parts): (Vec<String>, Vec<String>) =
        deletable.into_iter().partition(|k| k.contains("/rollup/"));
    machine.delete_blobs_retrying(&parts, "part").await?;
    machine.delete_blobs_retrying(&rollups, "rollup").await?;
    report.parts_deleted = parts;
    report.rollups_deleted = rollups;
    if ticketed {
        machine
            .delete_blobs_retrying(std::slice::from_ref(&ticket), "gc ticket")
            .await?;
    }

    // 7: now and then (always by hand), finish the tickets of collectors that stopped after
    // their truncate, and sweep.
    if by_hand || earliest.0 / SWEEP_INTERVAL_SEQNOS != new.0 / SWEEP_INTERVAL_SEQNOS {
        sweep(machine, new, &mut report, Some(&state_at_new)).await?;
    }
    Ok((report, Some(*state_at_new)))
}

/// A sweep on its own (see the module docs), for a commit that expired a writer whose lease ran
/// out: what it wrote and never committed goes at once, not at the next collection's sweep.
/// Tickets at or below `earliest` (at most the earliest live version) are finished too.
pub(crate) async fn sweep_now(
    machine: &Machine,
    earliest: SeqNo,
    known: Option<&State>,
) -> Result<GcReport, PermanentError> {
    let mut report = GcReport::default();
    let sweeper: futures::future::LocalBoxFuture<'_, _> =
        Box::pin(sweep(machine, earliest, &mut report, known));
    sweeper.await?;
    Ok(report)
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

/// The Blob key of a ticket of a collection up to `new`: `<shard>/gc/<new>/<collector>-<id>`.
fn ticket_key(machine: &Machine, new: SeqNo, ids: &MaintenanceIds) -> String {
    format!(
        "{}/gc/{:020}/{}-{}",
        machine.shard_id.0,
        new.0,
        machine.who,
        ids.next()
    )
}

/// The seqno a ticket key names.
fn ticket_seqno(key: &str) -> Option<SeqNo> {
    let mut segments = key.splitn(4, '/');
    let (_shard, gc, seqno) = (segments.next()?, segments.next()?, segments.next()?);
    (gc == "gc").then_some(())?;
    seqno.parse().ok().map(SeqNo)
}

/// The seqno a rollup key names (`<shard>/rollup/<seqno>/<id>`).
fn rollup_seqno(key: &str) -> Option<SeqNo> {
    let mut segments = key.splitn(4, '/');
    let (_shard, rollup, seqno) = (segments.next()?, segments.next()?, segments.next()?);
    (rollup == "rollup").then_some(())?;
    seqno.parse().ok().map(SeqNo)
}

/// The shard's blobs under `<shard>/<sub>`.
async fn list_retrying(machine: &Machine, sub: &str) -> Result<Vec<BlobMetadata>, PermanentError> {
    let blob = &machine.location.blob;
    let prefix = format!("{}/{sub}", machine.shard_id.0);
    machine
        .retrying(|| async {
            let mut listed = Vec::new();
            blob.list_keys_and_metadata(&prefix, &mut |m| listed.push(m))
                .await
                .map(|()| listed)
        })
        .await
}

/// Deletes `keys` and records those that were still there (only those: these deletes clean up
/// after others, who may have deleted some already) as `kind`. Returns how many.
async fn delete_counted(
    machine: &Machine,
    keys: &[String],
    kind: &str,
) -> Result<usize, PermanentError> {
    Ok(machine.delete_blobs_found(keys, kind, true).await?.len())
}

/// The collection's one command: lists `add` (its rollup at its target, if it wrote one) and
/// unlists the rollups below `earliest`. Returns whether `add` is listed and whether an attempt
/// was indeterminate (`None` if there was no command to run).
async fn unlist_rollups(
    machine: &Machine,
    add: Option<(SeqNo, &HollowRollup)>,
    earliest: SeqNo,
    report: &mut GcReport,
) -> Result<Option<(bool, bool)>, PermanentError> {
    let below = machine
        .state()
        .collections
        .rollups
        .range(..earliest)
        .count();
    if add.is_none() && below == 0 {
        // Nothing to list or unlist: no command. (The rollup at `earliest` is listed and is
        // not below it, so every rollup below it may go.)
        return Ok(None);
    }
    let (_, result, maybe_committed) = machine
        .apply_maintenance_cmd("add_and_remove_rollups", |c| {
            c.add_and_remove_rollups(add, earliest)
        })
        .await?;
    let listed = match result {
        Continue((listed, removed)) => {
            if removed > 0 {
                report.rollups_unlisted += removed;
                machine.events.record(|| PersistEvent::RollupsUnlisted {
                    who: machine.who.clone(),
                    shard: machine.shard_id.0.clone(),
                    below: earliest,
                    count: removed,
                    at_ms: machine.runtime.now_ms(),
                });
            }
            listed
        }
        Break(listed) => listed,
    };
    Ok(Some((listed, maybe_committed)))
}

/// The sweep: deletes the shard's blobs that no live version refers to and that no write in
/// flight can still commit (see the module docs): parts of writers that are no longer
/// registered, and rollups older than the oldest listed one.
///
/// It also finishes every ticket at or below `earliest` (a live version's seqno at or below the
/// earliest): its collection truncated, or a later one did, so no live version refers to what
/// it lists, and no later version ever will (keys are written once). It deletes them, then the
/// ticket.
async fn sweep(
    machine: &Machine,
    earliest: SeqNo,
    report: &mut GcReport,
    known: Option<&State>,
) -> Result<(), PermanentError> {
    // SUBTLE: list first, then read the state and the live versions: every blob listed was
    // written before both, so a part committed after the listing is in a version the replay
    // sees, and a writer missing from the state read after the listing never commits again.
    let listed = list_retrying(machine, "").await?;
    machine.fetch_and_update_state_retrying().await?;
    let head = machine.state();
    // A routine sweep starts from the state its collection ended at (the earliest live
    // version) and this process's memo; by hand, from storage.
    let known: Vec<&State> = known.into_iter().collect();
    let referenced = live_references_with(machine, &known, !known.is_empty()).await?;
    let oldest_rollup = head.collections.oldest_rollup();
    let (mut parts, mut outputs, mut rollups) = (Vec::new(), Vec::new(), Vec::new());
    let blob = &machine.location.blob;
    for m in listed {
        if ticket_seqno(&m.key).is_some_and(|s| s <= earliest) {
            if let Some(bytes) = machine.retrying(|| blob.get(&m.key)).await? {
                // A ticket that does not decode lists nothing we can trust: only it goes.
                let keys = decode_gc_ticket(&bytes).unwrap_or_default();
                report.unfinished_deleted +=
                    delete_counted(machine, &keys, FINISHED_FOR_DEAD_COLLECTOR).await?;
                delete_counted(machine, std::slice::from_ref(&m.key), "gc ticket").await?;
            }
            continue;
        }
        if referenced.contains(&m.key) {
            continue;
        }
        if let Some(writer) = part_writer(&m.key) {
            if head
                .collections
                .writers
                .get(&WriterId(writer.to_string()))
                .is_none()
            {
                parts.push(m.key);
            }
        } else if let Some(seqno) = maintenance_output_seqno(&m.key) {
            if oldest_rollup.is_some_and(|oldest| seqno < oldest) {
                outputs.push(m.key);
            }
        } else if let Some(seqno) = rollup_seqno(&m.key) {
            // `add_rollup` refuses it for good if it is older than the oldest listed rollup, or
            // if another rollup holds its seqno (that one is unlisted only with every rollup
            // below it, after which this one is older than the oldest).
            let taken = head
                .collections
                .rollups
                .get(&seqno)
                .is_some_and(|r| r.key != m.key);
            if taken || oldest_rollup.is_some_and(|oldest| seqno < oldest) {
                rollups.push(m.key);
            }
        }
    }
    let found = delete_counted(machine, &parts, SWEPT_PARTS).await?
        + delete_counted(machine, &outputs, SWEPT_OUTPUTS).await?
        + delete_counted(machine, &rollups, SWEPT_ROLLUPS).await?;
    super::stats::count(|s| s.swept_blobs += found as u64);
    report.swept.extend(parts);
    report.swept.extend(outputs);
    report.swept.extend(rollups);
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The pure transitions GC and rollups rely on (in `state.rs`'s maintenance section).
    use super::*;
    use crate::persist::state::{HollowRollup, StateCollections, WriterId};
    use std::ops::ControlFlow;

    fn rollup(key: &str) -> HollowRollup {
        HollowRollup {
            key: key.into(),
            encoded_size_bytes: 1,
        }
    }

    fn with_rollups(seqnos: &[u64]) -> StateCollections {
        let mut s = StateCollections::new();
        for n in seqnos {
            s.rollups.insert(SeqNo(*n), rollup(&format!("r{n}")));
        }
        s
    }

    #[test]
    fn add_rollup_applies_iff_the_seqno_is_free_and_not_too_old() {
        let mut s = with_rollups(&[4]);
        assert_eq!(
            s.add_rollup(SeqNo(8), &rollup("a")),
            ControlFlow::Continue(true)
        );
        assert_eq!(
            s.add_rollup(SeqNo(8), &rollup("a")),
            ControlFlow::Break(true),
            "the same rollup again (a retry whose first attempt committed)"
        );
        assert_eq!(
            s.add_rollup(SeqNo(8), &rollup("b")),
            ControlFlow::Break(false),
            "another rollup holds the seqno"
        );
        assert_eq!(
            s.add_rollup(SeqNo(2), &rollup("c")),
            ControlFlow::Break(false),
            "older than every listed rollup"
        );
        assert_eq!(
            s.add_rollup(SeqNo(6), &rollup("d")),
            ControlFlow::Continue(true)
        );
        assert_eq!(s.rollups.keys().map(|s| s.0).collect::<Vec<_>>(), [4, 6, 8]);
    }

    #[test]
    fn remove_rollups_below_keeps_the_rest_and_never_the_last() {
        let mut s = with_rollups(&[1, 4, 8]);
        assert_eq!(s.remove_rollups_below(SeqNo(5)), ControlFlow::Continue(2));
        assert_eq!(s.rollups.keys().map(|s| s.0).collect::<Vec<_>>(), [8]);
        assert_eq!(
            s.remove_rollups_below(SeqNo(5)),
            ControlFlow::Break(0),
            "nothing left below: no command"
        );
        assert_eq!(
            s.remove_rollups_below(SeqNo(100)),
            ControlFlow::Break(0),
            "the last rollup is never removed"
        );
        assert_eq!(s.rollups.len(), 1);
    }

    #[test]
    fn need_rollup_every_threshold_seqnos_with_a_fallback() {
        let s = with_rollups(&[1]);
        let due: Vec<u64> = (1..=60)
            .filter(|n| s.need_rollup(SeqNo(*n), 16).is_some())
            .collect();
        // 17 and 33 are exact multiples past the rollup at 1; past 1 + 3 * 16 every seqno is due.
        assert_eq!(
            due,
            [17, 33, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60]
        );
        assert_eq!(s.need_rollup(SeqNo(17), 0), None, "threshold 0: never");
        // A big state stretches the cadence: 20,000 bytes over 16 * 512 is 3 thresholds.
        let mut big = with_rollups(&[1]);
        big.rollups.insert(
            SeqNo(1),
            HollowRollup {
                key: "r1".into(),
                encoded_size_bytes: 20_000,
            },
        );
        let due: Vec<u64> = (1..=150)
            .filter(|n| big.need_rollup(SeqNo(*n), 16).is_some())
            .collect();
        assert_eq!(&due[..3], [49, 97, 145]);
        assert_eq!(StateCollections::new().need_rollup(SeqNo(17), 16), None);
    }

    #[test]
    fn maybe_gc_fires_on_writes_once_the_seqno_since_moved_far_enough() {
        let mut s = StateCollections::new();
        let _ = s.register_writer(&WriterId("w".into()), 1_000, 0);
        // seqno 3: threshold ceil(log2 3) = 2, seqno since 3 - 0 >= 2.
        assert_eq!(
            s.maybe_gc(false, SeqNo(3)),
            None,
            "not a write, and a writer exists"
        );
        assert_eq!(
            s.maybe_gc(true, SeqNo(3)),
            Some(GcReq {
                old_seqno_since: SeqNo(0),
                new_seqno_since: SeqNo(3)
            })
        );
        assert_eq!(s.last_gc_req, SeqNo(3));
        // seqno 5: threshold ceil(log2 5) = 3, but the seqno since moved only 2.
        assert_eq!(s.maybe_gc(true, SeqNo(5)), None);
        assert_eq!(s.last_gc_req, SeqNo(3), "unchanged when it does not fire");
        assert_eq!(
            s.maybe_gc(true, SeqNo(6)),
            Some(GcReq {
                old_seqno_since: SeqNo(3),
                new_seqno_since: SeqNo(6)
            })
        );
        // A reader holding seqno 7 holds the seqno since back, however far the shard goes.
        let r = crate::persist::state::LeasedReaderId("r".into());
        let _ = s.register_leased_reader(&r, SeqNo(7), 1_000, 0);
        assert_eq!(s.maybe_gc(true, SeqNo(100)), None, "7 - 6 < threshold 7");
        // Without writers, any command may fire it.
        let _ = s.expire_writer(&WriterId("w".into()));
        let _ = s.expire_leased_reader(&r);
        assert_eq!(
            s.maybe_gc(false, SeqNo(100)).map(|r| r.new_seqno_since),
            Some(SeqNo(100))
        );
    }
}
