//! The collector: steps 1 to 7 of the module docs of `gc`, in that order, for one target.
//!
//! Order is the invariant: the ticket (3) is in Blob before the truncate (5) makes what it lists
//! garbage, the rollup at the target is listed (4) before the truncate makes it the earliest,
//! and deletes (6) come only after the truncate. The future may be dropped at any await.

use std::collections::BTreeSet;
use std::ops::ControlFlow::{Break, Continue};

use bytes::Bytes;

use super::super::background::MaintenanceIds;
use super::super::encoding::encode_gc_ticket;
use super::super::events::PersistEvent;
use super::super::machine::Machine;
use super::super::rollup::{settle_rollup, write_rollup_blob};
use super::super::state::{HollowRollup, State};
use super::sweep::sweep;
use super::walk::{references, scan_all_retrying, scan_retrying, walk, Walk};
use super::{GcHints, GcReport, GcReq, MAX_RESCANS, SWEEP_INTERVAL_SEQNOS};
use crate::location::{PermanentError, SeqNo};

pub(super) async fn collect(
    machine: &Machine,
    req: GcReq,
    ids: &MaintenanceIds,
    hints: GcHints<'_>,
) -> Result<(GcReport, Option<State>), PermanentError> {
    let by_hand = !hints.routine;
    let mut new = req.new_seqno_since;
    if hints.at_latest_rollup && machine.cfg.rollup_threshold > 0 {
        match latest_rollup_target(machine, new) {
            Some(latest) => new = latest,
            None => {
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
    // See `truncated_past`: a routine request this process already collected needs no scan.
    if let (true, Some(at)) = (hints.routine, truncated_past(machine, new)) {
        return skip(
            report,
            format!("already collected: this process truncated to {at}"),
        );
    }

    // 1 and 2: the live versions and what they refer to.
    let (earliest, state_at_new, mut deletable) =
        match walk_to(machine, new, &hints, &mut report).await? {
            Ok(walked) => walked,
            Err(reason) => return skip(report, reason),
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
    if !list_rollup_at(machine, new, &state_at_new, earliest, ids, &mut report).await? {
        // Only a rollup older than every listed one is refused: others collected past `new`
        // (and the ticket, if any, is theirs to finish: its seqno is below the earliest).
        return skip(
            report,
            format!("no rollup can be listed at {new}: the shard was collected past it"),
        );
    }

    // 5 and 6.
    let ticket = ticketed.then_some(ticket);
    truncate_and_delete(machine, new, deletable, ticket, &mut report).await?;

    // 7: now and then (always by hand), finish the tickets of collectors that stopped after
    // their truncate, and sweep.
    if by_hand || earliest.0 / SWEEP_INTERVAL_SEQNOS != new.0 / SWEEP_INTERVAL_SEQNOS {
        sweep(machine, new, &mut report, Some(&state_at_new)).await?;
    }
    Ok((report, Some(*state_at_new)))
}

/// Where this process truncated the shard's versions to, if at `new` or past it: a routine
/// collection up to `new` then has nothing to do. The earliest live version never goes back,
/// so the walk would scan it and stop, already collected. Between two rollups every routine
/// request comes to that (about one commit in ten with the defaults), and each such scan went
/// out on the connection the writer's next compare_and_set waits behind.
fn truncated_past(machine: &Machine, new: SeqNo) -> Option<SeqNo> {
    let q = machine.maintenance.borrow();
    q.collected
        .as_ref()
        .map(|s| s.seqno)
        .filter(|at| *at >= new)
}

/// Steps 5 and 6: truncates Consensus below `new` (a collector that got further first makes
/// this a no-op), then deletes what only the dead versions referred to, then the ticket.
async fn truncate_and_delete(
    machine: &Machine,
    new: SeqNo,
    deletable: Vec<String>,
    ticket: Option<String>,
    report: &mut GcReport,
) -> Result<(), PermanentError> {
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
    let (rollups, parts): (Vec<String>, Vec<String>) =
        deletable.into_iter().partition(|k| k.contains("/rollup/"));
    machine.delete_blobs_retrying(&parts, "part").await?;
    machine.delete_blobs_retrying(&rollups, "rollup").await?;
    report.parts_deleted = parts;
    report.rollups_deleted = rollups;
    if let Some(ticket) = ticket {
        machine
            .delete_blobs_retrying(std::slice::from_ref(&ticket), "gc ticket")
            .await?;
    }
    Ok(())
}

/// A routine collection's target: the newest listed rollup at or below `new`, unless that is
/// the earliest listed one (`None`: nothing to collect yet).
fn latest_rollup_target(machine: &Machine, new: SeqNo) -> Option<SeqNo> {
    let state = machine.state();
    let rollups = &state.collections.rollups;
    let first = rollups.keys().next().copied();
    match rollups.range(..=new).next_back().map(|(s, _)| *s) {
        Some(latest) if Some(latest) != first => Some(latest),
        _ => None,
    }
}

/// Steps 1 and 2, scanning again while other collectors move the earliest version under us:
/// the earliest live version, the state at `new` and every blob referenced below `new`; `Err`
/// with the reason to skip (already collected, or given up after [`MAX_RESCANS`] scans). When
/// the shard is already collected this far, by hand, it still unlists and sweeps.
async fn walk_to(
    machine: &Machine,
    new: SeqNo,
    hints: &GcHints<'_>,
    report: &mut GcReport,
) -> Result<Result<(SeqNo, Box<State>, BTreeSet<String>), String>, PermanentError> {
    let by_hand = !hints.routine;
    let mut backoff = machine.cfg.backoff();
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
                    unlist_rollups(machine, None, earliest, report).await?;
                    sweep(machine, earliest, report, None).await?;
                }
                return Ok(Err(reason));
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
            } => return Ok(Ok((earliest, state_at_new, referenced_below_new))),
        }
    }
    Ok(Err(format!(
        "gave up after {MAX_RESCANS} scans: {last_reason}"
    )))
}

/// Step 4: lists a rollup at exactly `new` (reusing a listed one, or writing `state_at_new` to
/// Blob first) and unlists the rollups below `earliest`, in one command. Returns whether a
/// rollup is listed at `new` afterwards.
async fn list_rollup_at(
    machine: &Machine,
    new: SeqNo,
    state_at_new: &State,
    earliest: SeqNo,
    ids: &MaintenanceIds,
    report: &mut GcReport,
) -> Result<bool, PermanentError> {
    let rollup = if machine.state().collections.rollups.contains_key(&new) {
        None
    } else {
        Some(write_rollup_blob(machine, state_at_new, ids).await?)
    };
    let listed =
        unlist_rollups(machine, rollup.as_ref().map(|r| (new, r)), earliest, report).await?;
    if let (Some(rollup), Some((listed, maybe_committed))) = (&rollup, listed) {
        settle_rollup(machine, (new, rollup), listed, maybe_committed, "gc").await?;
    }
    Ok(machine.state().collections.rollups.contains_key(&new))
}

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
