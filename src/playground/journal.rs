//! The records every component of a scenario shares ([`Journal`]): the merged event log and
//! the live check it feeds, the Consensus panel's compare_and_set attempts ([`CasAttempt`]),
//! which persist handle belongs to which actor, each shard's merges and GCs ([`ShardNotes`]),
//! and messages for the page ([`Notice`]).
//!
//! Below every actor, the location's process gate and the observers, which write into it, and
//! below the snapshot, which reads it: it imports only the log, the facts and the check.
//! Invariant: every list it keeps is bounded (the `*_KEPT` constants), oldest dropped first.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::check::HistoryCheck;
use super::fact::Fact;
use super::log::{MergedLog, Outcome, Pending};
use crate::vec_map::VecMap;

/// How many compare_and_set attempts the Consensus panel keeps.
pub const CAS_KEPT: usize = 200;
/// How many notices (messages for the page) are kept.
pub const NOTICES_KEPT: usize = 20;

/// Records every component shares: the merged log, the Consensus attempts, which persist handle
/// belongs to which actor, maintenance per shard and messages for the page.
#[derive(Debug, Default)]
pub struct Journal {
    /// The merged event log.
    pub log: MergedLog,
    /// Recent compare_and_set attempts, oldest first.
    pub cas: VecDeque<CasAttempt>,
    /// Persist handle id (or oracle epoch) -> actor id.
    pub ids: VecMap<String, String>,
    /// Merges and GCs per shard.
    pub shards: VecMap<String, ShardNotes>,
    /// Messages for the page, oldest first.
    pub notices: VecDeque<Notice>,
    /// Write tasks' commits, with their shard, for
    /// [`Scenario::audit_tasks`](super::Scenario::audit_tasks) (the newest [`COMMITS_KEPT`];
    /// native builds only: the page has the live check's `task-desired`).
    pub task_commits: VecDeque<(String, crate::write_task::WriteTaskEvent)>,
    /// The live check of the history, fed every event as it is logged.
    pub check: HistoryCheck,
    /// `(key, seqno)` of this page's recent compare_and_sets that committed or may have.
    pub own_versions: VecDeque<(String, u64)>,
    /// Live mode: other tabs may write the shards, and the Consensus panel lists their versions.
    pub live: bool,
    /// Who wrote each recent version of a shard: `(key, seqno)` → the command and its handle,
    /// so a lost compare_and_set can name what took its seqno ([`Journal::taken_by`]).
    pub writers_of: VecDeque<VersionWriter>,
}

/// A version of a shard and the persist command that wrote it (from its `Command` event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionWriter {
    /// The Consensus key (the shard).
    pub key: String,
    /// The version it wrote.
    pub seqno: u64,
    /// The process whose handle ran it.
    pub process: String,
    /// The handle (a writer's or reader's id) that ran it.
    pub who: String,
    /// The command's name (`compare_and_append`, `merge_res`, ...).
    pub cmd: String,
}

/// How many versions [`Journal::writers_of`] remembers.
pub const VERSION_WRITERS_KEPT: usize = 4_096;

/// How many of this page's compare_and_sets [`Journal::own_versions`] keeps.
pub const OWN_VERSIONS_KEPT: usize = 4_096;
/// The process the Consensus panel names for a version another tab wrote.
pub const FOREIGN_PROCESS: &str = "another tab";

/// How many write-task commits the journal keeps for audits.
pub const COMMITS_KEPT: usize = 5_000;

impl Journal {
    /// Moves pending events into the log, showing each to the history check.
    pub fn pump(&mut self) {
        let Journal { log, check, .. } = self;
        log.pump_with(|e| check.observe(e));
    }

    pub(super) fn new() -> Self {
        Journal {
            log: MergedLog::new(),
            ..Journal::default()
        }
    }

    /// Records a compare_and_set attempt (panel and log).
    pub fn record_cas(&mut self, attempt: CasAttempt) {
        if matches!(attempt.outcome, Outcome::Committed | Outcome::Indeterminate) {
            // It may have written this version: the store's observer does not claim it for
            // another tab.
            if self.own_versions.len() == OWN_VERSIONS_KEPT {
                self.own_versions.pop_front();
            }
            self.own_versions
                .push_back((attempt.key.clone(), attempt.new_seqno));
        }
        self.push_cas(attempt);
    }

    /// Notes that `cmd`, run by handle `who` of `process`, wrote version `seqno` of `key`.
    pub fn note_version_writer(
        &mut self,
        key: &str,
        seqno: u64,
        process: &str,
        who: &str,
        cmd: &str,
    ) {
        if self.writers_of.len() == VERSION_WRITERS_KEPT {
            self.writers_of.pop_front();
        }
        self.writers_of.push_back(VersionWriter {
            key: key.to_string(),
            seqno,
            process: process.to_string(),
            who: who.to_string(),
            cmd: cmd.to_string(),
        });
    }

    /// What took version `expected + 1` of the attempt's key, for a lost compare_and_set, in
    /// words: "W1's compaction (merge_res), in this same process", "W2's write
    /// (compare_and_append), in another process", an earlier attempt that timed out but had
    /// landed, or another tab (`None`: the attempt did not lose, or nothing remembered wrote it).
    pub fn taken_by(&self, a: &CasAttempt) -> Option<String> {
        if a.outcome != Outcome::Mismatch {
            return None;
        }
        let seqno = a.expected.map_or(1, |s| s + 1);
        let same = |process: &str| {
            if process == a.process {
                "in this same process"
            } else {
                "in another process"
            }
        };
        // An attempt at that version that timed out: it landed after all (nothing else wrote it).
        let timed_out = self.cas.iter().rev().find(|c| {
            c.key == a.key && c.new_seqno == seqno && c.outcome == Outcome::Indeterminate
        });
        let landed = |p: &str| {
            format!(
                "an earlier attempt that timed out but had landed, {}",
                same(p)
            )
        };
        if let Some(w) = self
            .writers_of
            .iter()
            .rev()
            .find(|w| w.seqno == seqno && w.key == a.key)
        {
            let who = self
                .ids
                .get(&w.who)
                .cloned()
                .unwrap_or_else(|| w.who.clone());
            let what = format!("{who}'s {} ({})", command_words(&w.cmd), w.cmd);
            return Some(match timed_out.filter(|c| c.process == w.process) {
                Some(_) => format!("{what}: {}", landed(&w.process)),
                None => format!("{what}, {}", same(&w.process)),
            });
        }
        let committed =
            self.cas.iter().rev().find(|c| {
                c.key == a.key && c.new_seqno == seqno && c.outcome == Outcome::Committed
            });
        match (committed, timed_out) {
            (Some(c), _) if c.process == FOREIGN_PROCESS => Some(FOREIGN_PROCESS.to_string()),
            (Some(c), _) => Some(format!("a command of {}, {}", c.process, same(&c.process))),
            (None, Some(c)) => Some(format!(
                "an earlier attempt of {} that timed out but had landed, {}",
                c.process,
                same(&c.process)
            )),
            (None, None) => None,
        }
    }

    /// Whether a compare_and_set of this page may have written version `seqno` of `key`.
    pub fn is_own_version(&self, key: &str, seqno: u64) -> bool {
        self.own_versions
            .iter()
            .any(|(k, s)| *s == seqno && k == key)
    }

    /// Adds a version another tab wrote, as the store's observer found it, to the panel's list,
    /// stamped `at_ms`: when this page found that it was not its own (the list stays in time
    /// order, and the newest entries, which the panel shows, include the other tab's).
    pub fn record_foreign_version(&mut self, key: &str, seqno: u64, bytes: u64, at_ms: u64) {
        self.push_cas(CasAttempt {
            at_ms,
            process: FOREIGN_PROCESS.into(),
            key: key.to_string(),
            expected: seqno.checked_sub(1),
            new_seqno: seqno,
            bytes,
            outcome: Outcome::Committed,
            error: None,
            taken_by: None,
        });
    }

    fn push_cas(&mut self, attempt: CasAttempt) {
        self.log.record(cas_event(&attempt));
        if self.cas.len() == CAS_KEPT {
            self.cas.pop_front();
        }
        self.cas.push_back(attempt);
    }

    /// Shows a message on the page (and logs it).
    pub fn notice(&mut self, at_ms: u64, error: bool, text: String) {
        self.log.record(Pending {
            at_ms,
            actor: None,
            process: None,
            component: "scenario",
            kind: "notice".into(),
            outcome: if error { Outcome::Error } else { Outcome::Info },
            detail: text.clone(),
            fact: None,
        });
        if self.notices.len() == NOTICES_KEPT {
            self.notices.pop_front();
        }
        self.notices.push_back(Notice { at_ms, error, text });
    }
}

/// One compare_and_set as the Consensus panel shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CasAttempt {
    /// When it returned.
    pub at_ms: u64,
    /// The process that made it.
    pub process: String,
    /// The Consensus key (a shard, or an oracle timeline).
    pub key: String,
    /// The seqno it expected at the head (`None`: the key is new).
    pub expected: Option<u64>,
    /// The seqno it tried to write.
    pub new_seqno: u64,
    /// Its size.
    pub bytes: u64,
    /// What came of it.
    pub outcome: Outcome,
    /// The error, if any.
    pub error: Option<String>,
    /// A lost attempt (`mismatch`): what took the seqno it expected to write, in words, filled in
    /// by the snapshot ([`Journal::taken_by`]): with one writer, its own process's maintenance.
    #[serde(default)]
    pub taken_by: Option<String>,
}

/// A persist command's name as a learner reads it.
pub fn command_words(cmd: &str) -> &'static str {
    match cmd {
        "compare_and_append" => "write",
        "merge_res" => "compaction",
        "add_rollup" => "rollup",
        "add_and_remove_rollups" => "garbage collection",
        "downgrade_since" | "compare_and_downgrade_since" => "since downgrade",
        "heartbeat_leased_reader" | "heartbeat_writer" => "lease heartbeat",
        "register_writer" | "register_leased_reader" | "register_critical_reader" => "registration",
        "register_schema" => "schema registration",
        "expire_writer" | "expire_leased_reader" | "expire_critical_reader" => "expiry",
        "finalize_shard" => "finalization",
        _ => "command",
    }
}

/// The merged log's event of a compare_and_set attempt.
pub fn cas_event(a: &CasAttempt) -> Pending {
    Pending {
        at_ms: a.at_ms,
        actor: None,
        process: Some(a.process.clone()),
        component: "consensus",
        kind: "compare_and_set".into(),
        outcome: a.outcome,
        detail: format!(
            "{} expected {} → {}{}",
            a.key,
            a.expected.map_or("none".to_string(), |s| s.to_string()),
            a.new_seqno,
            a.error.as_ref().map_or(String::new(), |e| format!(": {e}"))
        ),
        fact: a.error.as_ref().map(|e| Fact::FaultFired {
            service: "consensus".into(),
            op: "compare_and_set".into(),
            error: e.clone(),
            indeterminate: a.outcome == Outcome::Indeterminate,
        }),
    }
}

/// A merge compaction applied, or what GC deleted (a collection, or a sweep).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceView {
    /// When.
    pub at_ms: u64,
    /// `merge`, `gc <what>` (a collection's deletes), `truncate`, or `sweep: <what>` (a sweep's
    /// deletes of blobs no write can commit: a crashed writer's parts, stale outputs).
    pub kind: String,
    /// The merged interval's lower (merges).
    pub lower: Option<u64>,
    /// The merged interval's upper (merges).
    pub upper: Option<u64>,
    /// Updates out (merges), blobs deleted (gc), versions deleted (truncate).
    pub count: u64,
    /// The seqno (merges: of the merge_res; truncate: the new earliest).
    pub seqno: Option<u64>,
}

/// The latest sweep of a shard's Blob: what it deleted, and whose parts (kept apart from the
/// recent maintenance, which merges push out of the panel's list within seconds, so that a
/// crashed writer's garbage can be watched going).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepView {
    /// When.
    pub at_ms: u64,
    /// What it deleted (`sweep: parts of expired writers`, `... stale merge outputs`, ...).
    pub kind: String,
    /// How many blobs.
    pub count: u64,
    /// Whose parts: the actors that wrote them (their writer ids if unknown), sorted, once each.
    pub writers: Vec<String>,
}

/// Merges and GCs of one shard, most recent last.
#[derive(Debug, Default)]
pub struct ShardNotes {
    /// Bounded.
    pub maintenance: std::collections::VecDeque<MaintenanceView>,
    /// The latest sweep that deleted something.
    pub last_sweep: Option<SweepView>,
    /// The earliest live seqno after the latest truncation.
    pub earliest_seqno: Option<u64>,
}

/// How many maintenance records a shard keeps.
pub const MAINTENANCE_KEPT: usize = 40;

/// A message for the page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Notice {
    /// When.
    pub at_ms: u64,
    /// An error (shown in red) or information.
    pub error: bool,
    /// The text.
    pub text: String,
}
