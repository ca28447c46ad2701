//! Garbage collection: deleting the blobs no live state version needs, then truncating Consensus.
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
//!    this far: done;
//! 2. read the state at `E` from the rollup listed at exactly `E` (there always is one, see the
//!    invariant below); the parts of every version below `new` are those of the state at `E` plus
//!    those of the batches the diffs after it insert; the deletable parts are those not
//!    referenced at `new` (a part dropped from state never returns: keys are written once, so no
//!    later version refers to it either). The state at `new` comes from whoever committed it (the
//!    routine trigger keeps it), from the cache, or else from replaying the diffs;
//! 3. make sure a rollup at exactly `new` exists: reuse a listed one, or write the rebuilt state
//!    at `new` to Blob; then one `add_and_remove_rollups` command lists it and unlists the rollups
//!    below `E` (if another rollup won the seqno, ours is deleted);
//! 4. delete the deletable parts, then the unlisted rollups;
//! 5. **last**, `consensus.truncate(shard, new)`: the truncate "commits" the collection. Until then
//!    a later collector scanning from `E` finds the same garbage and deletes it again.
//!
//! **Invariant**: a rollup exists in Blob, listed in state, at exactly the earliest live seqno
//! (readers start from the newest rollup, which is never older; collectors start from the one
//! at the earliest). Step 3 lists the rollup at `new` before step 5 makes `new` the earliest.
//! SUBTLE: rollups between `E` and `new` become garbage only once the truncate lands, so a
//! collector only drops rollups below the earliest it scanned, `E`: a rollup lingers one
//! collection longer (the original does the same with `old_seqno_since`), and no collector ever
//! deletes the rollup at a seqno someone may still truncate to. Deleting the rollups below `new`
//! right away would break the invariant for a moment, and for good if the collector died before
//! its truncate.
//!
//! **Concurrency and crashes**: two collectors may run at once, in any order, with different
//! targets, and any of them may stop at any await (its future dropped). Every step tolerates
//! that: deletes of missing blobs succeed, a repeated or overtaken truncate deletes nothing, a
//! collector whose rollup at `E` vanished (someone else collected past `E`) scans again, and a
//! collector that died before its truncate leaves work that the next one redoes. Blobs may leak
//! (a collector that unlisted rollups and died before deleting them; a writer that crashed
//! between writing a part and committing it), never dangle: a leak costs space, a dangling
//! reference loses data.

use std::collections::BTreeSet;
use std::ops::ControlFlow::{Break, Continue};

use serde::Serialize;

use super::encoding::{decode_diff, decode_rollup};
use super::events::PersistEvent;
use super::machine::Machine;
use super::maintenance::{write_rollup_blob, MaintenanceIds};
use super::state::{BatchPart, HollowRollup, State};
use super::{PersistClient, ShardId};
use crate::location::{SeqNo, VersionedData, SCAN_ALL};

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
    /// Versions the truncate deleted (`None`: it stopped before truncating).
    pub versions_truncated: Option<usize>,
    /// Why it stopped early or did nothing.
    pub skipped: Option<String>,
}

/// How many times a collector scans again after finding that another one moved on under it.
const MAX_RESCANS: usize = 16;

/// Runs a collection up to the shard's current seqno since, now, in this task (for tests and
/// the playground; writers do this on their own in the background).
pub async fn gc_now(client: &PersistClient, shard_id: &ShardId) -> GcReport {
    let machine = client.machine(shard_id, "gc".into());
    machine.fetch_and_update_state_retrying().await;
    let state = machine.state();
    let req = GcReq {
        old_seqno_since: state.collections.last_gc_req,
        new_seqno_since: state.collections.seqno_since(state.seqno),
    };
    gc_and_truncate_with(&machine, req, &MaintenanceIds::from_client(client), None).await
}

/// Runs the collector for `req` (see the module docs). Its future may be dropped at any point.
pub async fn gc_and_truncate(client: &PersistClient, shard_id: &ShardId, req: GcReq) -> GcReport {
    let machine = client.machine(shard_id, "gc".into());
    gc_and_truncate_with(&machine, req, &MaintenanceIds::from_client(client), None).await
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

async fn scan_all_retrying(machine: &Machine) -> Vec<VersionedData> {
    let mut backoff = machine.cfg.backoff();
    loop {
        match machine
            .location
            .consensus
            .scan(&machine.shard_id.0, SeqNo(0), SCAN_ALL)
            .await
        {
            Ok(versions) => return versions,
            Err(_) => {
                backoff.wait(&machine.runtime).await;
            }
        }
    }
}

/// Steps 1 and 2 of the module docs. `known` is the state at `new`, if the caller has it.
async fn walk(machine: &Machine, new: SeqNo, known: Option<&State>) -> Walk {
    let versions = scan_all_retrying(machine).await;
    let Some(first) = versions.first() else {
        return Walk::Done("the shard has no versions".into());
    };
    let earliest = first.seqno;
    if earliest >= new {
        return Walk::Done(format!(
            "already collected: the earliest version is {earliest}"
        ));
    }
    if versions
        .iter()
        .map(|v| v.seqno)
        .ne((earliest.0..).map(SeqNo).take(versions.len()))
    {
        return Walk::Rescan("the scanned versions are not contiguous".into());
    }
    // The state's rollup list, at least as new as the scan.
    machine.fetch_and_update_state_retrying().await;
    let current = machine.state();
    let Some(rollup) = current.collections.rollups.get(&earliest).cloned() else {
        return Walk::Rescan(format!(
            "no rollup is listed at the earliest version {earliest}"
        ));
    };
    let mut backoff = machine.cfg.backoff();
    let bytes = loop {
        match machine.location.blob.get(&rollup.key).await {
            Ok(Some(bytes)) => break bytes,
            Ok(None) => {
                return Walk::Rescan(format!("the rollup at {earliest} is gone"));
            }
            Err(_) => {
                backoff.wait(&machine.runtime).await;
            }
        }
    };
    let state = match decode_rollup(&bytes) {
        Ok(state) => state,
        Err(e) => return Walk::Done(format!("the rollup at {earliest}: {e}")),
    };
    if state.shard_id != machine.shard_id || state.seqno != earliest {
        return Walk::Done(format!(
            "the rollup {} holds {} at {}, not {} at {earliest}",
            rollup.key, state.shard_id, state.seqno, machine.shard_id
        ));
    }
    // Every batch some version in [earliest, new) holds was in the state at `earliest` or was
    // inserted by one of the diffs after it: no need to rebuild each version.
    let mut referenced_below_new: BTreeSet<String> = state.part_keys().map(String::from).collect();
    let mut diffs = Vec::new();
    for version in versions.iter().skip(1).take_while(|v| v.seqno <= new) {
        let diff = match decode_diff(&version.data) {
            Ok(diff) if diff.seqno_to == version.seqno => diff,
            Ok(diff) => {
                return Walk::Done(format!("version {} holds {}", version.seqno, diff.seqno_to))
            }
            Err(e) => return Walk::Done(format!("version {}: {e}", version.seqno)),
        };
        if version.seqno < new {
            let inserted = diff.batches.iter().filter_map(|(_, b)| b.as_ref());
            referenced_below_new.extend(inserted.flat_map(|b| b.parts.iter()).filter_map(
                |p| match p {
                    BatchPart::Hollow { key, .. } => Some(key.clone()),
                    BatchPart::Inline { .. } => None,
                },
            ));
        }
        diffs.push(diff);
    }
    // The state at `new`: the caller's, the cache if it is there, or the diffs replayed.
    let state_at_new = match (known, current.seqno == new) {
        (Some(known), _) if known.seqno == new => known.clone(),
        (_, true) => current,
        _ => {
            let mut state = state;
            for diff in &diffs {
                if let Err(e) = diff.apply(&mut state) {
                    return Walk::Done(format!("version {}: {e}", diff.seqno_to));
                }
            }
            state
        }
    };
    if state_at_new.seqno != new {
        return Walk::Done(format!(
            "the live versions end at {}, before {new}",
            state_at_new.seqno
        ));
    }
    Walk::Walked {
        earliest,
        state_at_new: Box::new(state_at_new),
        referenced_below_new,
    }
}

/// The collector (see the module docs), with ids for the rollup it may write.
pub(crate) async fn gc_and_truncate_with(
    machine: &Machine,
    req: GcReq,
    ids: &MaintenanceIds,
    known: Option<&State>,
) -> GcReport {
    let new = req.new_seqno_since;
    let mut report = GcReport {
        new_seqno_since: new,
        ..GcReport::default()
    };
    let skip = |report: &mut GcReport, reason: String| {
        machine.events.record(|| PersistEvent::GcSkipped {
            who: machine.who.clone(),
            shard: machine.shard_id.0.clone(),
            new_seqno_since: new,
            reason: reason.clone(),
            at_ms: machine.runtime.now_ms(),
        });
        report.skipped = Some(reason);
    };

    // 1 and 2: the live versions and what they refer to.
    let mut backoff = machine.cfg.backoff();
    let mut walked = None;
    let mut last_reason = String::new();
    for _ in 0..MAX_RESCANS {
        match walk(machine, new, known).await {
            Walk::Done(reason) => {
                skip(&mut report, reason);
                return report;
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
    let Some((earliest, state_at_new, mut deletable_parts)) = walked else {
        skip(
            &mut report,
            format!("gave up after {MAX_RESCANS} scans: {last_reason}"),
        );
        return report;
    };
    for key in state_at_new.part_keys() {
        deletable_parts.remove(key);
    }

    // 3: a rollup at exactly `new`, listed; the rollups below the earliest, unlisted.
    let current = machine.state();
    let remove: Vec<(SeqNo, HollowRollup)> = current
        .collections
        .rollups
        .range(..earliest)
        .map(|(s, r)| (*s, r.clone()))
        .collect();
    let (rollup, wrote) = match current.collections.rollups.get(&new) {
        Some(listed) => (listed.clone(), false),
        None => (write_rollup_blob(machine, &state_at_new, ids).await, true),
    };
    let (_, result, maybe_committed) = machine
        .apply_maintenance_cmd("add_and_remove_rollups", |c| {
            c.add_and_remove_rollups((new, &rollup), &remove)
        })
        .await;
    if wrote {
        let listed = matches!(result, Continue(true) | Break(true));
        machine.events.record(|| PersistEvent::RollupAdded {
            who: machine.who.clone(),
            shard: machine.shard_id.0.clone(),
            seqno: new,
            key: rollup.key.clone(),
            added: listed,
            reason: "gc".into(),
            at_ms: machine.runtime.now_ms(),
        });
        if !listed && !maybe_committed {
            machine
                .delete_blobs_retrying(std::slice::from_ref(&rollup.key), "unused rollup")
                .await;
        }
    }
    let after = machine.state();
    if !after.collections.rollups.contains_key(&new) {
        // Only a rollup older than every listed one is refused: others collected past `new`.
        skip(
            &mut report,
            format!("no rollup can be listed at {new}: the shard was collected past it"),
        );
        return report;
    }

    // 4: delete what no live version needs.
    report.parts_deleted = deletable_parts.into_iter().collect();
    machine
        .delete_blobs_retrying(&report.parts_deleted, "part")
        .await;
    report.rollups_deleted = remove
        .iter()
        .filter(|(s, r)| after.collections.rollups.get(s) != Some(r))
        .map(|(_, r)| r.key.clone())
        .collect();
    machine
        .delete_blobs_retrying(&report.rollups_deleted, "rollup")
        .await;

    // 5, last: truncate. A collector that got further first makes this a no-op.
    let mut backoff = machine.cfg.backoff();
    let deleted = loop {
        match machine
            .location
            .consensus
            .truncate(&machine.shard_id.0, new)
            .await
        {
            Ok(deleted) => break deleted,
            Err(_) => {
                backoff.wait(&machine.runtime).await;
            }
        }
    };
    machine.events.record(|| PersistEvent::ConsensusTruncated {
        who: machine.who.clone(),
        shard: machine.shard_id.0.clone(),
        seqno: new,
        deleted,
        at_ms: machine.runtime.now_ms(),
    });
    report.versions_truncated = Some(deleted);
    report
}

#[cfg(test)]
mod tests {
    //! The pure transitions GC and rollups rely on (in `state.rs`'s maintenance section).
    use super::*;
    use crate::persist::state::{StateCollections, WriterId};
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
    fn add_and_remove_rollups() {
        let mut s = with_rollups(&[1, 4, 8]);
        let remove = vec![(SeqNo(1), rollup("r1")), (SeqNo(4), rollup("other"))];
        assert_eq!(
            s.add_and_remove_rollups((SeqNo(10), &rollup("g")), &remove),
            ControlFlow::Continue(true)
        );
        assert_eq!(
            s.rollups.keys().map(|s| s.0).collect::<Vec<_>>(),
            [4, 8, 10],
            "r1 removed; 4 is listed with another key, so kept"
        );
        // Again: nothing changes, and the rollup is listed.
        assert_eq!(
            s.add_and_remove_rollups((SeqNo(10), &rollup("g")), &remove),
            ControlFlow::Break(true)
        );
        // Someone else's rollup at the seqno: ours is not listed, removals still happen.
        let remove = vec![(SeqNo(4), rollup("r4"))];
        assert_eq!(
            s.add_and_remove_rollups((SeqNo(10), &rollup("h")), &remove),
            ControlFlow::Continue(false)
        );
        assert_eq!(s.rollups.keys().map(|s| s.0).collect::<Vec<_>>(), [8, 10]);
        // The last rollup is never removed.
        let mut one = with_rollups(&[3]);
        assert_eq!(
            one.add_and_remove_rollups((SeqNo(2), &rollup("x")), &[(SeqNo(3), rollup("r3"))]),
            ControlFlow::Break(false)
        );
        assert_eq!(one.rollups.len(), 1);
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
