//! The upsert part of the check (`upsert-model`): at every upper `u` the output shard reaches, its
//! contents must equal the reference model of [`crate::upsert::reference::expected_at`]: per key,
//! the message with the highest offset among those at times before `u` decides (a value is there
//! once, a delete means the key is absent), and nothing else is there.
//!
//! Both sides are known by digests: the output's from the store observer's appended batches, the
//! model's from [`Fact::UpsertSource`] (each message carries the digest of the output update it
//! stands for). A check waits until the source log's upper has reached `u` (every message before
//! `u` is then known). Messages are folded into the per-key model once every later check is past
//! their time, so the model holds one entry per key plus the messages not yet folded (bounded by
//! [`MAX_MESSAGES`]).

use std::collections::{BTreeMap, VecDeque};

use super::{at_or_beyond, At, CheckRule, Findings, Tally, VecMap};
use crate::playground::fact::{Fact, MessageFact, VersionFact};

/// The most source messages waiting to be folded into the model.
pub const MAX_MESSAGES: usize = 100_000;
/// The most checks waiting for the source log to catch up.
const DEFERRED_KEPT: usize = 16;

/// Output digest -> multiplicity (`Tally::net`; no entry for 0).
type Multiset = BTreeMap<u64, Tally>;

/// What the check knows of the upsert output and its source.
#[derive(Debug, Default)]
pub(crate) struct UpsertTrack {
    known: bool,
    actual: Multiset,
    upper: Option<u64>,
    source_upper: u64,
    next_offset: u64,
    /// Messages not folded yet: (ts, offset, key, output), sorted by (ts, offset).
    messages: Vec<(u64, u64, i64, Option<u64>)>,
    /// Per key, the folded message that decides: (offset, output).
    latest: VecMap<i64, (u64, Option<u64>)>,
    deferred: VecDeque<(u64, Multiset, At)>,
    model_broken: bool,
}

fn add(set: &mut Multiset, digest: u64, diff: i64) {
    let e = set.entry(digest).or_insert(Tally::new(At::default()));
    e.net += diff;
    if e.net == 0 {
        set.remove(&digest);
    }
}

fn same(a: &Multiset, b: &Multiset) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((x, t), (y, u))| x == y && t.net == u.net)
}

impl UpsertTrack {
    /// The observer's (re)starting point for the output shard.
    pub(crate) fn baseline(&mut self, fact: &Fact) {
        let Fact::ShardBaseline { upper, batches, .. } = fact else {
            return;
        };
        self.upper = *upper;
        self.deferred.clear();
        self.actual.clear();
        self.known = batches.iter().all(|b| b.updates.is_some());
        for b in batches {
            for &(d, diff) in b.updates.iter().flatten() {
                add(&mut self.actual, d, diff);
            }
        }
    }

    /// One version of the output shard.
    pub(crate) fn version(&mut self, v: &VersionFact, at: At, f: &mut Findings) {
        let before = self.upper;
        self.upper = v.upper;
        for b in v.batches.iter().filter(|b| !at_or_beyond(before, b.upper)) {
            match &b.updates {
                Some(u) => u
                    .iter()
                    .for_each(|&(d, diff)| add(&mut self.actual, d, diff)),
                None => self.known = false,
            }
        }
        let Some(u) = v.upper.filter(|_| v.upper != before) else {
            return;
        };
        if !self.known || self.model_broken {
            return f.unverified(CheckRule::UpsertModel);
        }
        if self.deferred.len() == DEFERRED_KEPT {
            self.deferred.pop_front();
            f.unverified(CheckRule::UpsertModel);
        }
        self.deferred.push_back((u, self.actual.clone(), at));
        self.run_deferred(f);
    }

    /// The source log grew.
    pub(crate) fn source(&mut self, upper: u64, messages: &[MessageFact], f: &mut Findings) {
        for m in messages {
            if m.offset < self.next_offset {
                continue;
            }
            self.next_offset = m.offset + 1;
            let at = self
                .messages
                .partition_point(|&(ts, offset, ..)| (ts, offset) < (m.ts, m.offset));
            self.messages.insert(at, (m.ts, m.offset, m.key, m.output));
        }
        if self.messages.len() > MAX_MESSAGES {
            self.model_broken = true;
            self.messages.clear();
        }
        self.source_upper = self.source_upper.max(upper);
        self.run_deferred(f);
    }

    fn run_deferred(&mut self, f: &mut Findings) {
        while let Some((u, _, _)) = self.deferred.front() {
            if *u > self.source_upper {
                return;
            }
            let Some((u, actual, at)) = self.deferred.pop_front() else {
                return;
            };
            self.compare(u, &actual, at, f);
        }
    }

    /// Folds every message before `u` into the per-key model and compares.
    fn compare(&mut self, u: u64, actual: &Multiset, at: At, f: &mut Findings) {
        let due = self.messages.partition_point(|&(ts, ..)| ts < u);
        for (_, offset, key, output) in self.messages.drain(..due) {
            match self.latest.get(&key) {
                Some((o, _)) if *o > offset => {}
                _ => {
                    self.latest.insert(key, (offset, output));
                }
            }
        }
        let mut expected = Multiset::new();
        for (_, (_, d)) in self.latest.iter() {
            if let Some(d) = d {
                add(&mut expected, *d, 1);
            }
        }
        let ok = same(&expected, actual);
        f.expect(CheckRule::UpsertModel, ok, &[at], || {
            let extra = actual
                .iter()
                .filter(|(d, n)| expected.get(d).map(|e| e.net) != Some(n.net))
                .count();
            let missing: Vec<String> = self
                .latest
                .iter()
                .filter(|(_, (_, d))| d.is_some_and(|d| actual.get(&d).map(|t| t.net) != Some(1)))
                .map(|(k, _)| k.to_string())
                .take(5)
                .collect();
            format!(
                "at upper {u} the upsert output differs from the reference model: {extra} rows the model does not have, {} rows it expects missing{}",
                missing.len(),
                if missing.is_empty() { String::new() } else { format!(" (keys {})", missing.join(", ")) }
            )
        });
    }
}
