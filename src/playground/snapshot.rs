//! What the page draws: [`Snapshot`], plain serde data built from the scenario's records, and the
//! pump that moves every component's own log into the merged log first.
//!
//! A snapshot holds no handles and no references: the page may keep as many as it likes (its
//! history for scrubbing) and compare them. [`Snapshot::digest`] is a stable fingerprint of one,
//! for the determinism check (same seed and stamped commands, same digest).

use std::cell::RefCell;
use std::rc::Rc;

use serde::Serialize;

use super::actor::{Acked, ActorDetail, ActorView};
use super::actors::task::{apply_task_event, task_record};
use super::command::{ActorSpec, WriteMode};
use super::journal::{CasAttempt, Notice, COMMITS_KEPT};
use super::location::FaultsView;
use super::log::Pending;
use super::observe::{shard_view, ShardView, TimelineView};
use super::persist_log::persist_event;
use super::rules::Rule;
use super::Scenario;
use crate::persist::events::{CasOutcome, PersistEvent};
use crate::persist::ShardId;
use timely::progress::Antichain;

/// How many compare_and_set attempts a snapshot carries (the panel shows the newest 16 and counts
/// these; fewer fields serialized per frame).
pub const CAS_IN_SNAPSHOT: usize = 32;

/// One writer's part of a check of acknowledged writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyWriter {
    /// The writer.
    pub actor: String,
    /// Its acknowledged compare_and_append updates (as of the check's `seqno`).
    pub acked: u64,
    /// How many of them the shard holds.
    pub found: u64,
    /// The writes (compare_and_appends) it had won by then, which carried them: the Writers
    /// row's "won" at the same moment. A restart starts the row over: these are its current
    /// process's.
    pub writes: u64,
    /// Of `acked`, those acknowledged to its earlier processes (before a restart): not carried
    /// by `writes`.
    pub earlier: u64,
}

/// The result of [`super::Command::Verify`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyView {
    /// When the check read the shard.
    pub at_ms: u64,
    /// The shard.
    pub shard: String,
    /// The state version it checked: every update acknowledged by then (and only those) is
    /// checked, with the writers' counts of that moment.
    pub seqno: Option<u64>,
    /// The time it read at (`upper - 1`).
    pub as_of: Option<u64>,
    /// Rows (with multiplicity) in the shard at `as_of`.
    pub rows: u64,
    /// Rows written by handles this page does not know (another tab's).
    pub foreign_rows: u64,
    /// Acknowledged updates checked.
    pub acked: u64,
    /// Acknowledged updates missing from the shard: must be 0.
    pub lost: u64,
    /// Acknowledged updates the shard holds more than once: must be 0 (each write is unique).
    pub duplicated: u64,
    /// Some of the duplicated values.
    pub duplicated_examples: Vec<String>,
    /// Some of the missing values.
    pub lost_examples: Vec<String>,
    /// Per writer.
    pub writers: Vec<VerifyWriter>,
    /// Writers in append mode, not checked: append trims what a peer already wrote, by design.
    pub unchecked_append_writers: Vec<String>,
    /// Why the check could not run, if it could not.
    pub error: Option<String>,
}

/// A process as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessView {
    /// `P1`, ...
    pub id: String,
    /// Running (or crashed).
    pub alive: bool,
    /// Its id seed (decimal: it may exceed 2^53).
    pub seed: String,
    /// Actors in it now.
    pub actors: Vec<String>,
    /// The process it restarted.
    pub restart_of: Option<String>,
    /// The process that restarted it.
    pub restarted_as: Option<String>,
    /// When it started.
    pub started_ms: u64,
    /// When it crashed.
    pub crashed_ms: Option<u64>,
}

/// Everything the page draws. See the module docs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// `seed` or `live`.
    pub mode: String,
    /// The scenario's seed (decimal).
    pub seed: String,
    /// The clock.
    pub now_ms: u64,
    /// Simulator steps (0 in live mode).
    pub steps: u64,
    /// The newest event's sequence number.
    pub last_seq: u64,
    /// Commands applied.
    pub commands: u64,
    /// Processes, oldest first.
    pub processes: Vec<ProcessView>,
    /// Actors, in the order they were added.
    pub actors: Vec<ActorView>,
    /// Shards, by name.
    pub shards: Vec<ShardView>,
    /// Oracle timelines, by name.
    pub timelines: Vec<TimelineView>,
    /// Recent compare_and_set attempts, oldest first.
    pub consensus: Vec<CasAttempt>,
    /// Fault knobs and counts.
    pub faults: FaultsView,
    /// The latest check of acknowledged writes.
    pub verify: Option<VerifyView>,
    /// Messages, oldest first.
    pub notices: Vec<Notice>,
    /// The upsert source and checker, once there is a replica.
    pub upsert: Option<super::actors::replica::UpsertView>,
    /// Which protocol rules are on (actors added while one is off run without it).
    pub rules: super::rules::Rules,
    /// The live check of the history: checks and violations per rule (bounded).
    pub check: super::check::CheckReport,
}

impl Snapshot {
    /// A stable fingerprint (FNV-1a over the snapshot's JSON text, [`super::json`]: the text the
    /// page reads), as 16 hex digits.
    pub fn digest(&self) -> String {
        // Only a refusing Serialize impl fails, and no snapshot type has one; an error would
        // still give a (constant) digest rather than a panic.
        let text = super::json::to_json(self).unwrap_or_default();
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in text.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}")
    }
}

impl Scenario {
    /// Moves what every component logged since the last pump into the merged log, and updates the
    /// views that are derived from component events. Seed mode pumps after every simulator step,
    /// so what it folds (the log's order, maintenance notes, retrying marks) does not depend on
    /// where the page paused or took snapshots: a replay reaches the same snapshot.
    pub fn pump(&self) {
        let mut journal = self.journal.borrow_mut();
        for p in &self.processes {
            for e in p.client.events().take() {
                // A storage error inside a command: the writer's attempt is now retrying.
                // Only the write's own command (compare_and_append) is the write's: the handle's
                // upkeep (heartbeats, compaction, rollups) retries its own timeouts.
                if let PersistEvent::Command {
                    who,
                    cmd,
                    outcome: outcome @ (CasOutcome::Indeterminate(_) | CasOutcome::Determinate(_)),
                    ..
                } = &e
                {
                    let timed_out = matches!(outcome, CasOutcome::Indeterminate(_));
                    let write = cmd == "compare_and_append";
                    let actor = journal.ids.get(who).cloned();
                    if let Some(a) = actor.and_then(|id| self.actors.iter().find(|a| a.id == id)) {
                        let mut view = a.view.borrow_mut();
                        // Without its token the writer abandons the write in flight at the first
                        // timeout of any of its commands (variants/writer.rs `Tripwire`): that
                        // timeout is the write's.
                        let trips = view.variant == Some(Rule::IdempotencyToken);
                        if let ActorDetail::Writer(w) = &mut view.detail {
                            let write = write || (trips && w.in_flight.is_some());
                            if !write {
                                w.other_timeouts += u64::from(timed_out);
                            } else {
                                w.timeouts += u64::from(timed_out);
                                if let Some(f) = &mut w.in_flight {
                                    f.retrying = true;
                                    f.timeouts += u32::from(timed_out);
                                }
                            }
                        }
                    }
                }
                // A version this command wrote: a compare_and_set that loses it can name it.
                if let PersistEvent::Command {
                    who,
                    shard,
                    cmd,
                    reached,
                    outcome: CasOutcome::Committed,
                    ..
                } = &e
                {
                    journal.note_version_writer(shard, reached.0, &p.id, who, cmd);
                }
                if let Some(pending) = persist_event(&mut journal, &p.id, e) {
                    journal.log.record(pending);
                }
            }
            for e in p.task_log.take() {
                let Some(a) = self.actors.iter().find(|a| a.id == e.task) else {
                    continue;
                };
                let outcome = apply_task_event(&mut a.view.borrow_mut(), &e);
                let shard = match &a.spec {
                    ActorSpec::Task(t) => t.shard.as_str(),
                    _ => "",
                };
                if matches!(
                    e.kind,
                    crate::write_task::WriteTaskEventKind::Committed { .. }
                ) {
                    if journal.task_commits.len() == COMMITS_KEPT {
                        journal.task_commits.pop_front();
                    }
                    journal
                        .task_commits
                        .push_back((shard.to_string(), e.clone()));
                }
                let (detail, fact) = task_record(&e, shard);
                journal.log.record(Pending {
                    at_ms: e.at_ms,
                    actor: Some(e.task.clone()),
                    process: Some(p.id.clone()),
                    component: "task",
                    kind: "write task".into(),
                    outcome,
                    detail,
                    fact,
                });
            }
        }
        if let Some(hub) = &self.upsert {
            hub.pump_into(&mut journal.log);
        }
        journal.pump();
    }

    /// What the page draws now.
    pub fn snapshot(&mut self) -> Snapshot {
        self.pump();
        // Replicas show their own snapshot, taken now (between runtime steps, so no borrow of
        // a replica is held by its tasks).
        if let Some(hub) = &self.upsert {
            for a in &self.actors {
                if let Some(snap) = hub.replica_snapshot(&a.replica) {
                    a.view.borrow_mut().detail = ActorDetail::Replica(Box::new(snap));
                }
            }
        }
        let journal = self.journal.borrow();
        let processes = self
            .processes
            .iter()
            .enumerate()
            .map(|(i, p)| ProcessView {
                id: p.id.clone(),
                alive: p.alive.get(),
                seed: p.seed.to_string(),
                actors: self
                    .actors
                    .iter()
                    .filter(|a| a.process == i)
                    .map(|a| a.id.clone())
                    .collect(),
                restart_of: p.restart_of.clone(),
                restarted_as: p.restarted_as.clone(),
                started_ms: p.started_ms,
                crashed_ms: p.crashed_ms,
            })
            .collect();
        let shards = self
            .observers
            .shards
            .iter()
            .map(|(name, (obs, _))| shard_view(name, &obs.borrow(), &journal))
            .collect();
        let timelines = self
            .observers
            .timelines
            .values()
            .map(|(t, _)| t.borrow().clone())
            .collect();
        let skip = journal.cas.len().saturating_sub(CAS_IN_SNAPSHOT);
        Snapshot {
            mode: if self.is_seeded() { "seed" } else { "live" }.into(),
            seed: self.seed.to_string(),
            now_ms: self.now_ms(),
            steps: self.steps(),
            last_seq: journal.log.last_seq(),
            commands: self.stamped.len() as u64,
            processes,
            actors: self
                .actors
                .iter()
                .map(|a| a.view.borrow().clone())
                .collect(),
            shards,
            timelines,
            consensus: journal
                .cas
                .iter()
                .skip(skip)
                .map(|c| CasAttempt {
                    taken_by: journal.taken_by(c),
                    ..c.clone()
                })
                .collect(),
            faults: self.faults.view(),
            verify: self.verify.borrow().clone(),
            notices: journal.notices.iter().cloned().collect(),
            upsert: self.upsert.as_ref().map(|h| {
                let mut v = h.view();
                v.walk = self.walk.as_ref().map(|w| w.view());
                v.walk_done = self.walk_done.clone();
                v.press = self.press.clone();
                v
            }),
            rules: self.rules,
            check: journal.check.report(),
        }
    }

    /// Starts a check of acknowledged writes on the default shard: reads it at `upper - 1` with
    /// a fresh reader on the raw location and looks for every acknowledged compare_and_append
    /// value. The result lands in the snapshot's `verify`.
    pub(crate) fn start_verify(&mut self) {
        let shard_name = super::DEFAULT_SHARD.to_string();
        let mut writers: Vec<CheckedWriter> = Vec::new();
        let mut unchecked = Vec::new();
        for a in &self.actors {
            if let ActorSpec::Writer(w) = &a.spec {
                if w.shard != shard_name {
                    continue;
                }
                if w.mode == WriteMode::Append {
                    unchecked.push(a.id.clone());
                } else {
                    writers.push((a.id.clone(), Rc::clone(&a.acked), Rc::clone(&a.view)));
                }
            }
        }
        let known: Vec<String> = self.journal.borrow().ids.keys().cloned().collect();
        let client = self.observer_client.clone();
        let cell = Rc::clone(&self.verify);
        let rt = self.runtime.clone();
        self.runtime
            .spawn("verify", async move {
                let mut view = VerifyView {
                    at_ms: rt.now_ms(),
                    shard: shard_name.clone(),
                    seqno: None,
                    as_of: None,
                    rows: 0,
                    foreign_rows: 0,
                    acked: 0,
                    lost: 0,
                    lost_examples: Vec::new(),
                    duplicated: 0,
                    duplicated_examples: Vec::new(),
                    writers: Vec::new(),
                    unchecked_append_writers: unchecked,
                    error: None,
                };
                if let Err(e) = verify(&client, &shard_name, &writers, &known, &mut view).await {
                    view.error = Some(e.to_string());
                    view.at_ms = rt.now_ms();
                }
                *cell.borrow_mut() = Some(view);
            })
            .detach();
    }
}

/// A writer the check looks at: its id, its acknowledged values and its panel data (read when
/// the check reads the shard's state, so its figures are of that moment).
type CheckedWriter = (String, Rc<RefCell<Acked>>, Rc<RefCell<ActorView>>);

/// Each writer's acknowledged values, and its current process's won writes and acknowledged
/// updates, now.
fn acked_now(writers: &[CheckedWriter]) -> Vec<(String, Vec<String>, (u64, u64))> {
    writers
        .iter()
        .map(|(id, acked, view)| {
            let this_process = match &view.borrow().detail {
                ActorDetail::Writer(w) => (w.committed, w.acked_updates),
                _ => (0, 0),
            };
            (id.clone(), acked.borrow().values.clone(), this_process)
        })
        .collect()
}

/// Why the acknowledged-writes check could not read the shard.
#[derive(Debug, Clone, thiserror::Error)]
enum VerifyError {
    /// The shard's name is not a shard id.
    #[error("{0}")]
    BadShard(String),
    /// The shard's upper is empty.
    #[error("the shard is finished")]
    Finished,
    /// Nothing to read at `upper - 1`.
    #[error("nothing is written yet (the upper is 0)")]
    NothingWritten,
    /// persist failed.
    #[error("{0}")]
    Persist(#[from] crate::persist::error::PersistError),
    /// Reading the shard's state met a permanent error.
    #[error("{0}")]
    Permanent(#[from] crate::persist::error::PermanentError),
}

async fn verify(
    client: &crate::persist::PersistClient,
    shard: &str,
    writers: &[CheckedWriter],
    known: &[String],
    view: &mut VerifyView,
) -> Result<(), VerifyError> {
    let shard = ShardId::new(shard).map_err(VerifyError::BadShard)?;
    let state = client.inspect_state(&shard).await?;
    // What the writers were told had committed by now is in this state (or an older one): the
    // check and the Writers panel count as of this moment.
    let acked = acked_now(writers);
    view.seqno = Some(state.seqno.0);
    view.at_ms = client.runtime().now_ms();
    let Some(upper) = crate::persist::events::frontier(state.upper()) else {
        return Err(VerifyError::Finished);
    };
    if upper == 0 {
        return Err(VerifyError::NothingWritten);
    }
    let mut reader = client.open_leased_reader::<String, String>(&shard).await?;
    let contents = match reader.contents_at_upper(&Antichain::from_elem(upper)) {
        Some((as_of, read)) => {
            view.as_of = Some(as_of);
            read.await
        }
        None => Ok(Vec::new()),
    };
    reader.expire().await;
    let contents = contents?;
    // Copies of each value: sorted (value, diff) pairs, summed per value (the shard may hold
    // thousands of values; one sort, no map).
    let mut held: Vec<(&str, i64)> = Vec::with_capacity(contents.len());
    for ((_, v), _, d) in &contents {
        held.push((v.as_str(), *d));
        view.rows += (*d).max(0) as u64;
        // Values are "actor:writer_id#n": a writer id this page never registered is a foreign one.
        let writer = v.split(':').nth(1).and_then(|s| s.split('#').next());
        if !writer.is_some_and(|w| known.iter().any(|k| k == w)) {
            view.foreign_rows += (*d).max(0) as u64;
        }
    }
    crate::sort::sort_by(&mut held, |a, b| a.0.cmp(b.0));
    held.dedup_by(|b, a| {
        let same = a.0 == b.0;
        if same {
            a.1 += b.1;
        }
        same
    });
    for (actor, values, (writes, this_process)) in &acked {
        let mut w = VerifyWriter {
            actor: actor.clone(),
            acked: values.len() as u64,
            found: 0,
            writes: *writes,
            earlier: (values.len() as u64).saturating_sub(*this_process),
        };
        for v in values {
            let copies = held
                .binary_search_by(|(h, _)| (*h).cmp(v.as_str()))
                .map_or(0, |i| held[i].1);
            if copies > 0 {
                w.found += 1;
            } else if view.lost_examples.len() < 5 {
                view.lost_examples.push(v.clone());
            }
            if copies > 1 {
                view.duplicated += 1;
                if view.duplicated_examples.len() < 5 {
                    view.duplicated_examples.push(format!("{v} x{copies}"));
                }
            }
        }
        view.acked += w.acked;
        view.lost += w.acked - w.found;
        view.writers.push(w);
    }
    Ok(())
}
