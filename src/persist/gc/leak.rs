//! The leak check and the set of live references: every Blob key some live state version
//! refers to, replayed from the rollup at the earliest live version. At quiescence, after
//! collections by hand to a fixed point, [`leaked_blobs`] is empty (the invariant the module
//! docs of `gc` state). Reads only.

use std::collections::BTreeSet;

use super::super::machine::Machine;
use super::super::state::State;
use super::super::{PersistClient, ShardId};
use super::walk::{list_retrying, references, scan_all_retrying, walk, Walk};
use super::MAX_RESCANS;
use crate::location::{BlobMetadata, BrokenAt, PermanentError, PermanentKind};

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
pub(super) async fn live_references_with(
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
