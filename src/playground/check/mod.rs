//! The live check of the history: [`HistoryCheck`] reads every event of the merged log as it is
//! logged (the scenario's pump feeds it, so the log's bound does not limit it) and finds at once
//! any break of what the components promise. It reads only the events' [`Fact`]s: it is pure, has
//! no runtime and no storage, and is tested on hand-made histories.
//!
//! The rules (stable ids, see [`CheckRule`]):
//! - `append-chain`: every shard version read from Consensus follows the previous one (seqno + 1)
//!   and its batches tile time without a gap or an overlap, ending at the shard's upper;
//! - `frontier-regress`: no upper or since goes back: a shard's, a writer's or reader's handle's, a
//!   writer's attempts, a write task's upper;
//! - `ack-lost`: an acknowledged compare_and_append value is in the shard once the shard's upper
//!   has passed it (and stays: a retraction of it is a loss too);
//! - `ack-duplicate`: an acknowledged value is in the shard once: not with multiplicity 2, not in
//!   two appended batches;
//! - `task-desired`: after a write task's commit at upper `u`, the shard's contents at `u` equal the
//!   task's desired collection;
//! - `oracle-regress`: an oracle timeline's timestamps only go up, across instances and restarts:
//!   within an epoch, and every epoch above every earlier one; its stored record's epoch and
//!   durable upper never go back; a read timestamp is at least the write applied before it;
//! - `oracle-duplicate`: no write timestamp is handed out twice;
//! - `oracle-bound`: an instance hands out only timestamps below the durable upper it allocated;
//! - `upsert-model`: at every upper of the upsert output shard, its contents equal the reference
//!   model over the source log (per key the latest message before the upper; see
//!   [`crate::upsert::reference`]).
//!
//! Each violation names its rule, says what broke in words, cites the sequence numbers of the
//! events that broke it, and those of the fault events (injected faults, crashes, restarts,
//! corruption) in the ten seconds before. A run with no break reports how often each rule was
//! checked.
//!
//! Memory is bounded: every table has a cap (see the constants of each part). What falls out of
//! a table can no longer be checked, and is counted as `unverified` rather than reported.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::fact::Fact;
use super::log::PlayEvent;
pub(crate) use crate::vec_map::VecMap;

mod oracle;
mod shard;
mod upsert;

/// One rule of the check (see the module docs), in JSON and on the page by its stable id
/// ([`CheckRule::id`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CheckRule {
    /// `append-chain`.
    AppendChain,
    /// `frontier-regress`.
    FrontierRegress,
    /// `ack-lost`.
    AckLost,
    /// `ack-duplicate`.
    AckDuplicate,
    /// `task-desired`.
    TaskDesired,
    /// `oracle-regress`.
    OracleRegress,
    /// `oracle-duplicate`.
    OracleDuplicate,
    /// `oracle-bound`.
    OracleBound,
    /// `upsert-model`.
    UpsertModel,
}

impl CheckRule {
    /// Every rule, in the report's order.
    pub const ALL: [CheckRule; 9] = [
        CheckRule::AppendChain,
        CheckRule::FrontierRegress,
        CheckRule::AckLost,
        CheckRule::AckDuplicate,
        CheckRule::TaskDesired,
        CheckRule::OracleRegress,
        CheckRule::OracleDuplicate,
        CheckRule::OracleBound,
        CheckRule::UpsertModel,
    ];

    /// Its stable id.
    pub fn id(self) -> &'static str {
        match self {
            CheckRule::AppendChain => "append-chain",
            CheckRule::FrontierRegress => "frontier-regress",
            CheckRule::AckLost => "ack-lost",
            CheckRule::AckDuplicate => "ack-duplicate",
            CheckRule::TaskDesired => "task-desired",
            CheckRule::OracleRegress => "oracle-regress",
            CheckRule::OracleDuplicate => "oracle-duplicate",
            CheckRule::OracleBound => "oracle-bound",
            CheckRule::UpsertModel => "upsert-model",
        }
    }

    /// The line the page shows for it: what it promises.
    pub fn title(self) -> &'static str {
        match self {
            CheckRule::AppendChain => "each shard version follows the last, its batches tile time",
            CheckRule::FrontierRegress => "no upper or since goes back",
            CheckRule::AckLost => "an acknowledged write is in the shard",
            CheckRule::AckDuplicate => "an acknowledged write is in the shard once",
            CheckRule::TaskDesired => {
                "a write task's shard equals its desired state at each commit"
            }
            CheckRule::OracleRegress => "oracle timestamps only go up, across restarts",
            CheckRule::OracleDuplicate => "no oracle timestamp is handed out twice",
            CheckRule::OracleBound => "an oracle serves only below its durable bound",
            CheckRule::UpsertModel => "upsert output equals the reference model",
        }
    }

    /// The rule of id `id`, if there is one.
    pub fn from_id(id: &str) -> Option<CheckRule> {
        CheckRule::ALL.into_iter().find(|r| r.id() == id)
    }

    /// Its place in [`CheckRule::ALL`] (the report's order).
    fn index(self) -> usize {
        self as usize
    }
}

/// How many violations the report keeps (the newest).
pub const VIOLATIONS_KEPT: usize = 50;
/// How many recent fault events are kept to annotate violations.
const FAULTS_KEPT: usize = 256;
/// Fault events this long before a violation's earliest cited event are cited beside it.
pub const FAULT_WINDOW_MS: u64 = 10_000;
/// The most fault events one violation cites.
const FAULTS_CITED: usize = 8;

/// How often a digest was seen: its multiplicity, in how many appended batches, first where,
/// acknowledged where. The one value type of the check's `BTreeMap`s (each key/value type of a
/// `BTreeMap` costs the page wasm).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tally {
    pub(crate) net: i64,
    pub(crate) appends: u32,
    pub(crate) first: At,
    pub(crate) acked: Option<At>,
}

impl Tally {
    pub(crate) fn new(first: At) -> Tally {
        Tally {
            net: 0,
            appends: 0,
            first,
            acked: None,
        }
    }
}

/// An event, by its sequence number and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct At {
    pub(crate) seq: u64,
    pub(crate) at_ms: u64,
}

impl At {
    fn of(e: &PlayEvent) -> At {
        At {
            seq: e.seq,
            at_ms: e.at_ms,
        }
    }
}

/// One break of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Violation {
    /// The rule's id (see [`CheckRule`]).
    pub rule: String,
    /// What broke, in words.
    pub message: String,
    /// When it was found (the time of the event that completed it).
    pub at_ms: u64,
    /// The events that broke it, oldest first.
    pub seqs: Vec<u64>,
    /// Fault events in the [`FAULT_WINDOW_MS`] before the earliest of them, oldest first.
    pub faults: Vec<u64>,
}

/// How often one rule was checked and broken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleReport {
    /// The rule's id.
    pub rule: String,
    /// What it promises.
    pub title: String,
    /// Times it was checked.
    pub checks: u64,
    /// Times it was broken.
    pub violations: u64,
    /// Checks that could not be made (the evidence fell out of a bounded table, or the store's
    /// observer started after it).
    pub unverified: u64,
}

/// What the check found so far: the snapshot's `check` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    /// Events read.
    pub events: u64,
    /// Events that carried a fact.
    pub facts: u64,
    /// Per rule, in [`CheckRule::ALL`] order.
    pub rules: Vec<RuleReport>,
    /// Violations found in all.
    pub violations_total: u64,
    /// The newest violations (at most [`VIOLATIONS_KEPT`]), oldest first.
    pub violations: Vec<Violation>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    checks: u64,
    violations: u64,
    unverified: u64,
}

/// Counters and found violations, shared by the parts of the check.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    counts: [Counts; CheckRule::ALL.len()],
    violations: VecDeque<Violation>,
    total: u64,
    faults: VecDeque<At>,
}

impl Findings {
    /// Counts one check of `rule`.
    pub(crate) fn checked(&mut self, rule: CheckRule) {
        self.counts[rule.index()].checks += 1;
    }

    /// Counts one check of `rule` that could not be made.
    pub(crate) fn unverified(&mut self, rule: CheckRule) {
        self.counts[rule.index()].unverified += 1;
    }

    /// Checks `ok`; if it fails, records a violation of `rule` citing `events`.
    pub(crate) fn expect(
        &mut self,
        rule: CheckRule,
        ok: bool,
        events: &[At],
        message: impl FnOnce() -> String,
    ) {
        self.checked(rule);
        if !ok {
            self.violate(rule, events, message());
        }
    }

    /// Records a violation of `rule` (counted as a check too if not counted yet by the caller).
    pub(crate) fn violate(&mut self, rule: CheckRule, events: &[At], message: String) {
        self.counts[rule.index()].violations += 1;
        self.total += 1;
        let mut seqs: Vec<u64> = events.iter().map(|a| a.seq).collect();
        crate::sort::sort(&mut seqs);
        seqs.dedup();
        let from = events.iter().map(|a| a.at_ms).min().unwrap_or(0);
        let to = events.iter().map(|a| a.at_ms).max().unwrap_or(0);
        let last = events.iter().map(|a| a.seq).max().unwrap_or(0);
        let near: Vec<u64> = self
            .faults
            .iter()
            .filter(|f| f.seq <= last && f.at_ms + FAULT_WINDOW_MS >= from && f.at_ms <= to)
            .map(|f| f.seq)
            .collect();
        let faults = near[near.len().saturating_sub(FAULTS_CITED)..].to_vec();
        if self.violations.len() == VIOLATIONS_KEPT {
            self.violations.pop_front();
        }
        self.violations.push_back(Violation {
            rule: rule.id().to_string(),
            message,
            at_ms: to,
            seqs,
            faults,
        });
    }

    fn fault(&mut self, at: At) {
        if self.faults.len() == FAULTS_KEPT {
            self.faults.pop_front();
        }
        self.faults.push_back(at);
    }
}

/// The incremental history check. See the module docs.
#[derive(Debug, Default)]
pub struct HistoryCheck {
    findings: Findings,
    events: u64,
    facts: u64,
    shards: VecMap<String, shard::ShardTrack>,
    oracles: VecMap<String, oracle::TimelineTrack>,
    upsert: upsert::UpsertTrack,
}

/// The most shards, and the most oracle timelines, the check follows.
const MAX_TRACKED: usize = 64;

fn track<'a, T: Default>(map: &'a mut VecMap<String, T>, name: &str) -> Option<&'a mut T> {
    if !map.contains_key(name) && map.len() >= MAX_TRACKED {
        return None;
    }
    Some(map.get_or_insert_with(name.to_string(), T::default))
}

impl HistoryCheck {
    /// A check that has read nothing.
    pub fn new() -> Self {
        HistoryCheck::default()
    }

    /// Reads one event (in log order).
    pub fn observe(&mut self, e: &PlayEvent) {
        self.events += 1;
        let Some(fact) = &e.fact else { return };
        self.facts += 1;
        let at = At::of(e);
        if fact.is_fault() {
            self.findings.fault(at);
        }
        let f = &mut self.findings;
        match fact {
            Fact::ShardBaseline { shard, .. } => {
                if let Some(t) = track(&mut self.shards, shard) {
                    t.baseline(fact, at, f);
                }
                if shard == super::command::UPSERT_SHARD {
                    self.upsert.baseline(fact);
                }
            }
            Fact::ShardVersions { shard, versions } => {
                if let Some(t) = track(&mut self.shards, shard) {
                    for v in versions {
                        t.version(v, at, f);
                    }
                }
                if shard == super::command::UPSERT_SHARD {
                    for v in versions {
                        self.upsert.version(v, at, f);
                    }
                }
            }
            Fact::Append { shard, .. } | Fact::TaskWrite { shard, .. } => {
                let actor = e.actor.as_deref().unwrap_or("?");
                if let Some(t) = track(&mut self.shards, shard) {
                    t.actor_fact(actor, fact, at, f);
                }
            }
            Fact::TimelineVersion { timeline, .. }
            | Fact::OracleOpened { timeline, .. }
            | Fact::OracleWindow { timeline, .. }
            | Fact::OracleTs { timeline, .. } => {
                if let Some(t) = track(&mut self.oracles, timeline) {
                    t.fact(e.actor.as_deref().unwrap_or("?"), fact, at, f);
                }
            }
            Fact::UpsertSource { upper, messages } => {
                self.upsert.source(*upper, messages, f);
            }
            Fact::Faults { .. }
            | Fact::FaultFired { .. }
            | Fact::Crash { .. }
            | Fact::Restart { .. }
            | Fact::Corrupt { .. } => {}
        }
    }

    /// What the check found so far.
    pub fn report(&self) -> CheckReport {
        let rules = CheckRule::ALL
            .iter()
            .zip(self.findings.counts.iter())
            .map(|(r, c)| RuleReport {
                rule: r.id().to_string(),
                title: r.title().to_string(),
                checks: c.checks,
                violations: c.violations,
                unverified: c.unverified,
            })
            .collect();
        CheckReport {
            events: self.events,
            facts: self.facts,
            rules,
            violations_total: self.findings.total,
            violations: self.findings.violations.iter().cloned().collect(),
        }
    }
}

/// `5`, or `[] (finished)` for the empty frontier.
pub(crate) fn show(f: Option<u64>) -> String {
    super::log::fmt_frontier(f)
}

/// Whether frontier `a` is at or beyond `b` (`None`, the empty frontier, is beyond everything).
pub(crate) fn at_or_beyond(a: Option<u64>, b: Option<u64>) -> bool {
    match (a, b) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(a), Some(b)) => a >= b,
    }
}

#[cfg(test)]
mod rule_tests {
    use super::*;

    #[test]
    fn every_rule_is_found_by_its_id_at_its_place_and_an_unknown_id_is_none() {
        for (i, r) in CheckRule::ALL.into_iter().enumerate() {
            assert_eq!(r.index(), i, "{r:?} is not at its place in ALL");
            assert_eq!(CheckRule::from_id(r.id()), Some(r));
            assert!(!r.title().is_empty());
        }
        assert_eq!(CheckRule::from_id("no-such-rule"), None);
        let report = HistoryCheck::default().report();
        let ids: Vec<&str> = report.rules.iter().map(|r| r.rule.as_str()).collect();
        assert_eq!(ids, CheckRule::ALL.map(CheckRule::id));
    }
}
