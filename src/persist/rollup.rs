//! Rollups: the whole state of a shard at one seqno, written to Blob and then listed in state,
//! where readers that start cold begin (see `encoding.rs` for the bytes and
//! `StateCollections::add_rollup` for when a listing applies).

use std::ops::ControlFlow::{Break, Continue};

use bytes::Bytes;

use super::background::MaintenanceIds;
use super::encoding::encode_rollup;
use super::events::PersistEvent;
use super::machine::Machine;
use super::state::{HollowRollup, State};
use crate::location::{PermanentError, SeqNo};

/// The Blob key of a rollup of `seqno` written by `machine`'s maintenance.
fn rollup_key(machine: &Machine, seqno: SeqNo, ids: &MaintenanceIds) -> String {
    format!(
        "{}/rollup/{:020}/{}-{}",
        machine.shard_id.0,
        seqno.0,
        machine.who,
        ids.next()
    )
}

/// Writes `state` as a rollup blob (without listing it anywhere yet).
pub(crate) async fn write_rollup_blob(
    machine: &Machine,
    state: &State,
    ids: &MaintenanceIds,
) -> Result<HollowRollup, PermanentError> {
    let key = rollup_key(machine, state.seqno, ids);
    let bytes = Bytes::from(encode_rollup(state));
    machine
        .write_blob_retrying(&key, bytes.clone(), "rollup")
        .await?;
    Ok(HollowRollup {
        key,
        encoded_size_bytes: bytes.len() as u64,
    })
}

/// Records whether a rollup this process wrote is listed, and deletes it if it is certainly not
/// (no attempt's compare_and_set was indeterminate: see `apply_maintenance_cmd`).
pub(crate) async fn settle_rollup(
    machine: &Machine,
    (seqno, rollup): (SeqNo, &HollowRollup),
    listed: bool,
    maybe_committed: bool,
    reason: &str,
) -> Result<(), PermanentError> {
    machine.events.record(|| PersistEvent::RollupAdded {
        who: machine.who.clone(),
        shard: machine.shard_id.0.clone(),
        seqno,
        key: rollup.key.clone(),
        added: listed,
        reason: reason.to_string(),
        at_ms: machine.runtime.now_ms(),
    });
    if !listed && !maybe_committed {
        machine
            .delete_blobs_retrying(std::slice::from_ref(&rollup.key), "unused rollup")
            .await?;
    }
    Ok(())
}

/// A routine rollup: write the state at its seqno to Blob, then list it with `add_rollup`; if
/// another rollup holds the seqno (or ours is too old to be useful), delete ours. Returns whether
/// it is listed.
pub(crate) async fn write_and_add_rollup(
    machine: &Machine,
    state: &State,
    ids: &MaintenanceIds,
    reason: &str,
) -> Result<bool, PermanentError> {
    let seqno = state.seqno;
    let rollup = write_rollup_blob(machine, state, ids).await?;
    let (_, result, maybe_committed) = machine
        .apply_maintenance_cmd("add_rollup", |c| c.add_rollup(seqno, &rollup))
        .await?;
    let added = matches!(result, Continue(true) | Break(true));
    settle_rollup(machine, (seqno, &rollup), added, maybe_committed, reason).await?;
    Ok(added)
}
