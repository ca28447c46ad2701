//! The sweep (see the module docs of `gc`): deletes the shard's blobs that no live version
//! refers to and no write in flight can still commit, and finishes the tickets of collectors
//! that stopped after their truncate.
//!
//! Invariant: it lists the blobs *before* it reads the state and the live versions, so a blob
//! committed after the listing is seen as referenced; it deletes only what can never become
//! referenced again (keys are written once, writer ids never reused, the oldest listed rollup
//! never goes back).

use super::super::encoding::decode_gc_ticket;
use super::super::machine::Machine;
use super::super::state::{maintenance_output_seqno, part_writer, State, WriterId};
use super::leak::live_references_with;
use super::walk::list_retrying;
use super::{GcReport, FINISHED_FOR_DEAD_COLLECTOR, SWEPT_OUTPUTS, SWEPT_PARTS, SWEPT_ROLLUPS};
use crate::location::{PermanentError, SeqNo};

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

/// Deletes `keys` and records those that were still there (only those: these deletes clean up
/// after others, who may have deleted some already) as `kind`. Returns how many.
async fn delete_counted(
    machine: &Machine,
    keys: &[String],
    kind: &str,
) -> Result<usize, PermanentError> {
    Ok(machine.delete_blobs_found(keys, kind, true).await?.len())
}
/// The sweep: deletes the shard's blobs that no live version refers to and that no write in
/// flight can still commit (see the module docs): parts of writers that are no longer
/// registered, and rollups older than the oldest listed one.
///
/// It also finishes every ticket at or below `earliest` (a live version's seqno at or below the
/// earliest): its collection truncated, or a later one did, so no live version refers to what
/// it lists, and no later version ever will (keys are written once). It deletes them, then the
/// ticket.
pub(super) async fn sweep(
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
    super::super::stats::count(|s| s.swept_blobs += found as u64);
    report.swept.extend(parts);
    report.swept.extend(outputs);
    report.swept.extend(rollups);
    Ok(())
}
