//! The persist events of every process, as lines of the merged log: each command's
//! compare_and_set, Blob writes, compaction, rollups, GC and broken shards ([`persist_event`]),
//! with merges, deletions and truncations kept in the shard's maintenance notes for the panel.
//!
//! Invariant: the maintenance notes do not depend on the order the pump reads processes in
//! ([`maintenance`] keeps them sorted and bounded); events too frequent to log (state fetches,
//! requests) give no line.

use super::command::UPSERT_SHARD;
use super::journal::{Journal, MaintenanceView, SweepView, MAINTENANCE_KEPT};
use super::log::{fmt_frontier, plural, Outcome, Pending};
use crate::persist::events::{CasOutcome, PersistEvent};

/// A log line of a persist event: who, when, its kind, its outcome and its text.
type Line = (String, u64, String, Outcome, String);

fn cas_outcome(o: &CasOutcome) -> Outcome {
    match o {
        CasOutcome::Committed => Outcome::Committed,
        CasOutcome::Mismatch => Outcome::Mismatch,
        CasOutcome::Indeterminate(_) => Outcome::Indeterminate,
        CasOutcome::Determinate(_) => Outcome::Retrying,
        CasOutcome::Permanent(_) => Outcome::Error,
        CasOutcome::Skipped(_) => Outcome::Info,
    }
}

fn cas_text(o: &CasOutcome) -> String {
    match o {
        CasOutcome::Committed => "committed".into(),
        CasOutcome::Mismatch => "seqno taken, re-reading".into(),
        CasOutcome::Indeterminate(e) => format!("may have happened ({e})"),
        CasOutcome::Determinate(e) => format!("failed, retrying ({e})"),
        CasOutcome::Permanent(e) => format!("failed for good ({e})"),
        CasOutcome::Skipped(e) => format!("nothing to commit ({e})"),
    }
}

/// Records a merge or GC in the shard's notes. The notes must not depend on when the page pulls
/// (a pump takes each process's events in turn, so two processes' events arrive in pump order):
/// they are kept sorted by time (then by every other field), and the bound keeps the newest, so
/// any order of arrival gives the same notes.
fn maintenance(journal: &mut Journal, shard: &str, m: MaintenanceView) {
    let notes = journal
        .shards
        .get_or_insert_with(shard.to_string(), Default::default);
    if m.kind == "truncate" {
        notes.earliest_seqno = notes.earliest_seqno.max(m.seqno);
    }
    let key = |v: &MaintenanceView| (v.at_ms, v.seqno, v.kind.clone(), v.lower, v.upper, v.count);
    let at = notes.maintenance.partition_point(|x| key(x) <= key(&m));
    notes.maintenance.insert(at, m);
    if notes.maintenance.len() > MAINTENANCE_KEPT {
        notes.maintenance.pop_front();
    }
}

/// Keeps a sweep's deletes as the shard's last sweep (the newest by time, then by its other
/// fields, so that the order the pump reads processes in does not matter).
fn note_sweep(journal: &mut Journal, e: &PersistEvent) {
    let PersistEvent::BlobsDeleted {
        shard,
        kind,
        keys,
        at_ms,
        ..
    } = e
    else {
        return;
    };
    if !kind.starts_with("sweep") || keys.is_empty() {
        return;
    }
    let mut writers: Vec<String> = keys
        .iter()
        .filter_map(|k| crate::persist::state::part_writer(k))
        .map(|w| journal.ids.get(w).cloned().unwrap_or_else(|| w.to_string()))
        .collect();
    crate::sort::sort(&mut writers);
    writers.dedup();
    let sweep = SweepView {
        at_ms: *at_ms,
        kind: kind.clone(),
        count: keys.len() as u64,
        writers,
    };
    let notes = journal
        .shards
        .get_or_insert_with(shard.to_string(), Default::default);
    let key = |v: &SweepView| (v.at_ms, v.kind.clone(), v.count, v.writers.clone());
    if notes
        .last_sweep
        .as_ref()
        .is_none_or(|old| key(old) < key(&sweep))
    {
        notes.last_sweep = Some(sweep);
    }
}

/// Turns one persist event into a log entry (and maintenance notes); `None` for events too
/// frequent to log (state fetches).
pub(super) fn persist_event(
    journal: &mut Journal,
    process: &str,
    e: PersistEvent,
) -> Option<Pending> {
    if let Some((shard, m)) = maintenance_note(&e) {
        maintenance(journal, shard, m);
    }
    note_sweep(journal, &e);
    name_replica_reader(journal, process, &e);
    let (who, at_ms, kind, outcome, detail) = persist_line(e)?;
    let actor = journal.ids.get(&who).cloned();
    Some(Pending {
        at_ms,
        actor,
        process: Some(process.to_string()),
        component: "persist",
        kind,
        outcome,
        detail,
        fact: None,
    })
}

/// An upsert replica's persist source opens its reader after the replica's sink has opened its
/// writer, in the same process: the reader goes by the actor id of the newest named handle that
/// wrote the upsert shard from that process, so the Consensus log names U1, not `r…`.
fn name_replica_reader(journal: &mut Journal, process: &str, e: &PersistEvent) {
    let PersistEvent::Command {
        who, shard, cmd, ..
    } = e
    else {
        return;
    };
    if cmd != "register_leased_reader" || shard != UPSERT_SHARD || journal.ids.get(who).is_some() {
        return;
    }
    let owner = journal
        .writers_of
        .iter()
        .rev()
        .filter(|w| w.key == *shard && w.process == process)
        .find_map(|w| journal.ids.get(&w.who))
        .cloned();
    if let Some(actor) = owner {
        journal.ids.insert(who.clone(), actor);
    }
}

/// The line of a command, a Blob write or a broken shard; maintenance goes to
/// [`maintenance_line`].
fn persist_line(e: PersistEvent) -> Option<Line> {
    let line = match e {
        PersistEvent::Command {
            who,
            shard,
            cmd,
            expected,
            reached,
            outcome,
            upper,
            at_ms,
            ..
        } => {
            let mark = cas_outcome(&outcome);
            let detail = format!(
                "{shard}: {cmd} expected seqno {expected}, reached {reached}, upper {} → {}: {}",
                fmt_frontier(upper.0),
                fmt_frontier(upper.1),
                cas_text(&outcome)
            );
            (who, at_ms, cmd, mark, detail)
        }
        PersistEvent::BlobWritten {
            who,
            shard,
            key,
            kind,
            bytes,
            at_ms,
        } => {
            key.as_ref()?; // inline parts are not Blob writes
            let detail = format!("{shard}: wrote {kind} of {bytes} bytes");
            (who, at_ms, "blob write".into(), Outcome::Committed, detail)
        }
        PersistEvent::StateFetched { .. } | PersistEvent::CompactionRequested { .. } => {
            return None
        }
        PersistEvent::GcRequested { .. } | PersistEvent::GcSkipped { .. } => return None,
        PersistEvent::ShardBroken {
            who,
            shard,
            error,
            at_ms,
        } => {
            let detail = format!("{shard} is broken for good: {error}");
            (who, at_ms, "broken".into(), Outcome::Error, detail)
        }
        e @ (PersistEvent::CompactionApplied { .. }
        | PersistEvent::CompactionNotApplied { .. }
        | PersistEvent::RollupAdded { .. }
        | PersistEvent::BlobsDeleted { .. }
        | PersistEvent::ConsensusTruncated { .. }
        | PersistEvent::RollupsUnlisted { .. }) => return maintenance_line(e),
    };
    Some(line)
}

/// The maintenance note of a merge, a Blob deletion or a Consensus truncation, with its shard.
fn maintenance_note(e: &PersistEvent) -> Option<(&str, MaintenanceView)> {
    let (shard, note) = match e {
        PersistEvent::CompactionApplied {
            shard,
            lower,
            upper,
            output_updates,
            seqno,
            at_ms,
            ..
        } => (
            shard,
            MaintenanceView {
                at_ms: *at_ms,
                kind: "merge".into(),
                lower: *lower,
                upper: *upper,
                count: *output_updates,
                seqno: Some(seqno.0),
            },
        ),
        PersistEvent::BlobsDeleted {
            shard,
            kind,
            keys,
            at_ms,
            ..
        } => (
            shard,
            MaintenanceView {
                at_ms: *at_ms,
                // Sweeps get their own line: what no write can commit any more (a crashed
                // writer's parts, stale outputs), found by listing Blob rather than by a
                // collection's walk.
                kind: if kind.starts_with("sweep") {
                    kind.clone()
                } else {
                    format!("gc {kind}")
                },
                lower: None,
                upper: None,
                count: keys.len() as u64,
                seqno: None,
            },
        ),
        PersistEvent::ConsensusTruncated {
            shard,
            seqno,
            deleted,
            at_ms,
            ..
        } => (
            shard,
            MaintenanceView {
                at_ms: *at_ms,
                kind: "truncate".into(),
                lower: None,
                upper: None,
                count: *deleted as u64,
                seqno: Some(seqno.0),
            },
        ),
        PersistEvent::Command { .. }
        | PersistEvent::BlobWritten { .. }
        | PersistEvent::StateFetched { .. }
        | PersistEvent::CompactionRequested { .. }
        | PersistEvent::CompactionNotApplied { .. }
        | PersistEvent::RollupAdded { .. }
        | PersistEvent::GcRequested { .. }
        | PersistEvent::GcSkipped { .. }
        | PersistEvent::RollupsUnlisted { .. }
        | PersistEvent::ShardBroken { .. } => return None,
    };
    Some((shard.as_str(), note))
}

/// The line of a maintenance event (compaction, rollups, GC), noting merges, deletions and
/// truncations in the shard's maintenance notes.
fn maintenance_line(e: PersistEvent) -> Option<Line> {
    let line = match e {
        PersistEvent::CompactionApplied {
            who,
            shard,
            lower,
            upper,
            output_updates,
            at_ms,
            ..
        } => {
            let detail = format!(
                "{shard}: merged [{}, {}) into {}",
                fmt_frontier(lower),
                fmt_frontier(upper),
                plural(output_updates, "update")
            );
            (who, at_ms, "compaction".into(), Outcome::Committed, detail)
        }
        PersistEvent::CompactionNotApplied {
            who,
            shard,
            reason,
            at_ms,
            ..
        } => {
            let detail = format!("{shard}: {reason}");
            (who, at_ms, "compaction".into(), Outcome::Mismatch, detail)
        }
        PersistEvent::RollupAdded {
            who,
            shard,
            seqno,
            added,
            at_ms,
            ..
        } => {
            let mark = match added {
                true => Outcome::Committed,
                false => Outcome::Mismatch,
            };
            let detail = format!("{shard}: rollup at seqno {seqno}");
            (who, at_ms, "rollup".into(), mark, detail)
        }
        PersistEvent::BlobsDeleted {
            who,
            shard,
            kind,
            keys,
            at_ms,
        } => {
            let n = keys.len() as u64;
            let detail = match kind.strip_prefix("sweep: ") {
                Some(what) => format!("{shard}: swept {}: {what}", plural(n, "blob")),
                None => format!("{shard}: deleted {}", plural(n, &format!("{kind} blob"))),
            };
            (who, at_ms, "gc".into(), Outcome::Info, detail)
        }
        PersistEvent::ConsensusTruncated {
            who,
            shard,
            seqno,
            deleted,
            at_ms,
        } => {
            let detail = format!(
                "{shard}: truncated {} below seqno {seqno}",
                plural(deleted as u64, "version")
            );
            (who, at_ms, "gc".into(), Outcome::Info, detail)
        }
        PersistEvent::RollupsUnlisted {
            who,
            shard,
            below,
            count,
            at_ms,
        } => {
            let detail = format!(
                "{shard}: unlisted {} below seqno {below}",
                plural(count as u64, "rollup")
            );
            (who, at_ms, "gc".into(), Outcome::Info, detail)
        }
        PersistEvent::Command { .. }
        | PersistEvent::BlobWritten { .. }
        | PersistEvent::StateFetched { .. }
        | PersistEvent::CompactionRequested { .. }
        | PersistEvent::GcRequested { .. }
        | PersistEvent::GcSkipped { .. }
        | PersistEvent::ShardBroken { .. } => return None,
    };
    Some(line)
}
