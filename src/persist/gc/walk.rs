//! Steps 1 and 2 of the collector (see the module docs of `gc`), shared with the sweep and the
//! leak check: scan the live versions, read the state at the earliest from the rollup listed
//! there, and collect every blob a version below the target refers to, from the diffs after the
//! earliest (or this process's memo of what each inserted); and the listing of the shard's
//! blobs. Reads only; never writes.
//!
//! Invariant relied on: a rollup is listed, and present in Blob, at exactly the earliest live
//! seqno; when it is not, another collector moved the earliest version under us (a rescan), or
//! the shard is broken (a permanent error that marks it so).

use std::collections::BTreeSet;

use super::super::encoding::{decode_diff, decode_rollup, StateDiff};
use super::super::machine::Machine;
use super::super::state::State;
use crate::location::{
    BlobMetadata, BrokenAt, PermanentError, PermanentKind, SeqNo, VersionedData, SCAN_ALL,
};

/// What scanning and replaying the live versions found.
pub(super) enum Walk {
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

pub(super) async fn scan_all_retrying(
    machine: &Machine,
) -> Result<Vec<VersionedData>, PermanentError> {
    scan_retrying(machine, SCAN_ALL).await
}

pub(super) async fn scan_retrying(
    machine: &Machine,
    limit: usize,
) -> Result<Vec<VersionedData>, PermanentError> {
    let consensus = &machine.location.consensus;
    machine
        .retrying(|| consensus.scan(&machine.shard_id.0, SeqNo(0), limit))
        .await
}

/// The blobs one state refers to: its batches' parts and its listed rollups.
pub(super) fn references(state: &State) -> impl Iterator<Item = String> + '_ {
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
pub(super) async fn walk(
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
    // Every blob some version in [earliest, new) refers to was referred to by the state at
    // `earliest` or was inserted by one of the diffs after it: no need to rebuild each version.
    // Inserted one by one: `collect` into a BTreeSet sorts first, a sort compiled for `String`
    // alone.
    let mut referenced_below_new = BTreeSet::new();
    for key in references(&state) {
        referenced_below_new.insert(key);
    }
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
    let versions = if from_memo { &[][..] } else { versions };
    let diffs = read_diffs(machine, versions, new, replay, &mut referenced_below_new)?;
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

/// The diffs of `versions` after the first, up to `new` (all of them if the state at `new` must
/// be replayed, else none at `new`), adding what those below `new` inserted to `referenced`;
/// a version this process's memo knows is taken from it instead of decoded, unless replaying.
/// A version that does not decode, or holds another seqno's diff, marks the shard broken.
fn read_diffs(
    machine: &Machine,
    versions: &[VersionedData],
    new: SeqNo,
    replay: bool,
    referenced: &mut BTreeSet<String>,
) -> Result<Vec<StateDiff>, PermanentError> {
    let mut diffs = Vec::new();
    for version in versions.iter().skip(1).take_while(|v| v.seqno <= new) {
        let below = version.seqno < new;
        if !replay {
            if !below {
                break;
            }
            if let Some(inserted) = machine.seen.borrow().get(&version.seqno) {
                referenced.extend(inserted.iter().cloned());
                continue;
            }
        }
        let at = BrokenAt::Version(version.seqno);
        let diff = decode_diff(&version.data).map_err(|e| {
            machine.mark_broken(machine.permanent(
                at.clone(),
                PermanentKind::Undecodable,
                e.to_string(),
            ))
        })?;
        if diff.seqno_to != version.seqno {
            return Err(machine.mark_broken(machine.permanent(
                at,
                PermanentKind::Inconsistent,
                format!("holds the diff to {}", diff.seqno_to),
            )));
        }
        if below {
            referenced.extend(diff.inserted_blobs());
        }
        diffs.push(diff);
    }
    Ok(diffs)
}

/// The shard's blobs under `<shard>/<sub>`.
pub(super) async fn list_retrying(
    machine: &Machine,
    sub: &str,
) -> Result<Vec<BlobMetadata>, PermanentError> {
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
