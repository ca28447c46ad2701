//! The per-shard part of the check: the chain of versions and the tiling of batches
//! (`append-chain`), shard, handle, writer and task frontiers (`frontier-regress`), acknowledged
//! values (`ack-lost`, `ack-duplicate`) and write-task commits (`task-desired`).
//!
//! Values are known by their digests from the store observer's appended batches. A value table
//! and its queue of pending acknowledgements are bounded ([`MAX_VALUES`], [`MAX_PENDING`]): what
//! is dropped raises `forgotten_to`, and an acknowledgement at or below it that finds no value is
//! counted unverified, not lost.

use std::collections::{BTreeMap, VecDeque};

use super::{at_or_beyond, show, At, CheckRule, Findings, Tally as Value, VecMap};
use crate::playground::fact::{AttemptOutcome, BatchFact, Fact, HandleFact, VersionFact};

/// The most values a shard's table keeps.
pub const MAX_VALUES: usize = 20_000;
/// The most acknowledgements waiting for the observer.
pub const MAX_PENDING: usize = 10_000;
/// The most batches the tiling check scans per version (beyond, it counts unverified until
/// compaction brings the trace back under).
pub const MAX_TILED: usize = 2_000;
/// The most batches followed per shard at all.
pub const MAX_BATCHES: usize = 100_000;
/// The most handles followed per shard.
const MAX_HANDLES: usize = 1_000;
/// Recent versions' contents fingerprints kept, and task commits waiting for one.
const CONTENTS_KEPT: usize = 64;

#[derive(Debug)]
struct PendingAck {
    digest: u64,
    upper: u64,
    at: At,
    actor: String,
}

#[derive(Debug)]
struct TaskCommit {
    actor: String,
    upper: Option<u64>,
    desired: u64,
    at: At,
}

/// What the check knows of one shard.
#[derive(Debug, Default)]
pub(crate) struct ShardTrack {
    name: String,
    known: bool,
    seqno: u64,
    upper: Option<u64>,
    since: Option<u64>,
    last: At,
    batches: VecMap<u64, Option<u64>>,
    tiling: bool,
    handles: VecMap<String, Option<u64>>,
    values: BTreeMap<u64, Value>,
    order: VecDeque<(u64, Option<u64>)>,
    forgotten_to: Option<u64>,
    pending: VecDeque<PendingAck>,
    writers: VecMap<String, (u64, At)>,
    tasks: VecMap<String, (Option<u64>, At)>,
    contents: VecDeque<(Option<u64>, u64, At)>,
    commits: VecDeque<TaskCommit>,
}

fn forget_up_to(to: &mut Option<u64>, upper: Option<u64>) {
    if to.is_none() || at_or_beyond(upper, *to) {
        *to = upper.or(Some(u64::MAX));
    }
}

impl ShardTrack {
    fn forgotten(&self, upper: u64) -> bool {
        self.forgotten_to.is_some_and(|f| upper <= f)
    }

    /// A baseline: the observer's (re)starting point.
    pub(crate) fn baseline(&mut self, fact: &Fact, at: At, f: &mut Findings) {
        let Fact::ShardBaseline {
            shard,
            seqno,
            upper,
            since,
            batches,
            handles,
            ..
        } = fact
        else {
            return;
        };
        self.name.clone_from(shard);
        let again = self.known;
        if again {
            let prev = [self.last, at];
            f.expect(CheckRule::AppendChain, *seqno >= self.seqno, &prev, || {
                format!(
                    "{shard}: the observer restarted at seqno {seqno}, below version {} it had read",
                    self.seqno
                )
            });
            self.frontiers(*upper, *since, at, f);
        }
        self.known = true;
        self.seqno = *seqno;
        self.upper = *upper;
        self.since = *since;
        self.last = at;
        self.batches.clear();
        for b in batches {
            self.batches.insert(b.lower, b.upper);
        }
        self.tiling = true;
        self.tile(at, f);
        self.handles.clear();
        for h in handles.iter().take(MAX_HANDLES) {
            self.handles.insert(h.id.clone(), h.frontier);
        }
        // Values appended before this baseline are known only if every batch was itemized.
        if !batches.iter().all(|b| b.updates.is_some()) {
            forget_up_to(&mut self.forgotten_to, *upper);
        } else if again {
            self.rebase(batches, at, f);
        } else {
            for b in batches {
                self.fold(b, at, f);
            }
        }
        self.commits.clear();
        self.contents.clear();
        self.resolve_acks(f);
    }

    /// A later baseline (the observer missed truncated versions): its batches hold the whole
    /// truth, so every known value takes its multiplicity from them (values appended in the
    /// versions it missed come in as appended once), and acknowledged ones are checked again.
    fn rebase(&mut self, batches: &[BatchFact], at: At, f: &mut Findings) {
        let mut now: Vec<(u64, i64)> = batches
            .iter()
            .flat_map(|b| b.updates.iter().flatten().copied())
            .collect();
        crate::sort::sort(&mut now);
        now.dedup_by(|b, a| {
            let same = a.0 == b.0;
            if same {
                a.1 += b.1;
            }
            same
        });
        let name = &self.name;
        for (digest, v) in self.values.iter_mut() {
            let net = now
                .binary_search_by(|(d, _)| d.cmp(digest))
                .map_or(0, |i| now[i].1);
            if net == v.net {
                continue;
            }
            v.net = net;
            if let Some(acked) = v.acked {
                f.expect(CheckRule::AckLost, net >= 1, &[acked, at], || {
                    format!("{name}: an acknowledged value has multiplicity {net} in the shard")
                });
                f.expect(
                    CheckRule::AckDuplicate,
                    net <= 1,
                    &[v.first, acked, at],
                    || {
                        format!(
                            "{name}: an acknowledged value is in the shard with multiplicity {net}"
                        )
                    },
                );
            }
        }
        for &(digest, net) in &now {
            if net != 0 && !self.values.contains_key(&digest) {
                let b = BatchFact {
                    lower: 0,
                    upper: self.upper,
                    len: 1,
                    updates: Some(vec![(digest, net)]),
                };
                self.fold(&b, at, f);
            }
        }
    }

    fn frontiers(&mut self, upper: Option<u64>, since: Option<u64>, at: At, f: &mut Findings) {
        let cited = [self.last, at];
        let name = &self.name;
        f.expect(
            CheckRule::FrontierRegress,
            at_or_beyond(upper, self.upper),
            &cited,
            || {
                format!(
                    "{name}: the upper went back from {} to {}",
                    show(self.upper),
                    show(upper)
                )
            },
        );
        f.expect(
            CheckRule::FrontierRegress,
            at_or_beyond(since, self.since),
            &cited,
            || {
                format!(
                    "{name}: the since went back from {} to {}",
                    show(self.since),
                    show(since)
                )
            },
        );
    }

    /// Checks that the batches tile time from 0 to the upper.
    fn tile(&mut self, at: At, f: &mut Findings) {
        if !self.tiling || self.batches.len() > MAX_TILED {
            f.unverified(CheckRule::AppendChain);
            return;
        }
        let name = &self.name;
        let mut expect_lower = 0u64;
        let mut end: Option<u64> = Some(0);
        let mut broken = None;
        for (&lower, &upper) in self.batches.iter() {
            if broken.is_none() && lower != expect_lower {
                broken = Some(if lower > expect_lower {
                    format!("{name}: no batch covers [{expect_lower}, {lower}): a gap in the chain of appends")
                } else {
                    format!("{name}: a batch starts at {lower}, inside the previous one (which ends at {expect_lower}): an overlap")
                });
            }
            end = upper;
            match upper {
                Some(u) => expect_lower = u,
                None => break,
            }
        }
        if broken.is_none() && end != self.upper {
            broken = Some(format!(
                "{name}: the batches end at {} but the upper is {}",
                show(end),
                show(self.upper)
            ));
        }
        let cited = [self.last, at];
        f.expect(CheckRule::AppendChain, broken.is_none(), &cited, || {
            broken.unwrap_or_default()
        });
    }

    /// One version read from Consensus.
    pub(crate) fn version(&mut self, v: &VersionFact, at: At, f: &mut Findings) {
        if !self.known {
            f.unverified(CheckRule::AppendChain);
            return;
        }
        let name = self.name.clone();
        let cited = [self.last, at];
        let next = self.seqno + 1;
        f.expect(
            CheckRule::AppendChain,
            v.seqno_from == self.seqno && v.seqno == next,
            &cited,
            || {
                format!(
                    "{name}: version {} follows version {}, but the last version read was {}",
                    v.seqno, v.seqno_from, self.seqno
                )
            },
        );
        self.frontiers(v.upper, v.since, at, f);
        let before = self.upper;
        for lower in &v.removed {
            self.batches.remove(lower);
        }
        for b in &v.batches {
            self.batches.insert(b.lower, b.upper);
            let appended = !at_or_beyond(before, b.upper);
            if appended {
                self.fold(b, at, f);
            }
        }
        if self.batches.len() > MAX_BATCHES {
            self.tiling = false;
        }
        self.seqno = v.seqno;
        self.upper = v.upper;
        self.since = v.since;
        if !v.batches.is_empty() || !v.removed.is_empty() || v.upper != before {
            self.tile(at, f);
        }
        self.last = at;
        for h in &v.handles {
            self.handle(h, at, f);
        }
        if let Some(fp) = v.contents {
            if self.contents.len() == CONTENTS_KEPT {
                self.contents.pop_front();
            }
            self.contents.push_back((v.upper, fp, at));
            self.resolve_commits(f);
        }
        self.resolve_acks(f);
    }

    fn handle(&mut self, h: &HandleFact, at: At, f: &mut Findings) {
        if h.removed {
            self.handles.remove(&h.id);
            return;
        }
        if let Some(old) = self.handles.get(&h.id) {
            let old = *old;
            let name = &self.name;
            f.expect(
                CheckRule::FrontierRegress,
                at_or_beyond(h.frontier, old),
                &[self.last, at],
                || {
                    format!(
                        "{name}: handle {} went back from {} to {}",
                        h.id,
                        show(old),
                        show(h.frontier)
                    )
                },
            );
        }
        if self.handles.len() < MAX_HANDLES || self.handles.contains_key(&h.id) {
            self.handles.insert(h.id.clone(), h.frontier);
        }
    }

    /// Folds an appended batch's updates into the value table.
    fn fold(&mut self, b: &BatchFact, at: At, f: &mut Findings) {
        let Some(updates) = &b.updates else {
            forget_up_to(&mut self.forgotten_to, b.upper);
            return;
        };
        for &(digest, diff) in updates {
            if !self.values.contains_key(&digest) {
                self.order.push_back((digest, b.upper));
                if self.order.len() > MAX_VALUES {
                    if let Some((old, upper)) = self.order.pop_front() {
                        self.values.remove(&old);
                        forget_up_to(&mut self.forgotten_to, upper);
                    }
                }
            }
            let v = self.values.entry(digest).or_insert(Value::new(at));
            v.net += diff;
            if diff > 0 {
                v.appends += 1;
            }
            if let Some(acked) = v.acked {
                let name = &self.name;
                let (net, appends, first) = (v.net, v.appends, v.first);
                if diff > 0 {
                    f.expect(
                        CheckRule::AckDuplicate,
                        net <= 1 && appends <= 1,
                        &[first, acked, at],
                        || format!("{name}: an acknowledged value was written again (now {appends} times, multiplicity {net})"),
                    );
                } else {
                    f.expect(CheckRule::AckLost, net >= 1, &[acked, at], || {
                        format!("{name}: an acknowledged value was retracted (multiplicity {net})")
                    });
                }
            }
        }
    }

    /// A writer's or a write task's own account.
    pub(crate) fn actor_fact(&mut self, actor: &str, fact: &Fact, at: At, f: &mut Findings) {
        match fact {
            Fact::Append {
                shard,
                writer,
                mode,
                lower,
                upper,
                outcome,
                acked,
                ..
            } => {
                self.name.clone_from(shard);
                if let Some((prev, prev_at)) = self.writers.get(writer).copied() {
                    f.expect(CheckRule::FrontierRegress, *lower >= prev, &[prev_at, at], || {
                        format!("{shard}: {actor}'s writer {writer} wrote at {lower}, below its earlier upper {prev}")
                    });
                }
                if self.writers.len() < MAX_HANDLES || self.writers.contains_key(writer) {
                    self.writers.insert(writer.clone(), (*lower, at));
                }
                if *outcome == AttemptOutcome::Committed && mode == "compareAndAppend" {
                    for &digest in acked {
                        self.ack(digest, *upper, actor, at, f);
                    }
                }
            }
            Fact::TaskWrite {
                shard,
                upper,
                what,
                desired,
                ..
            } => {
                self.name.clone_from(shard);
                if what == "committed" || what == "resynced" {
                    if let Some((prev, prev_at)) = self.tasks.get(actor).copied() {
                        f.expect(
                            CheckRule::FrontierRegress,
                            at_or_beyond(*upper, prev),
                            &[prev_at, at],
                            || {
                                format!(
                                    "{shard}: write task {actor}'s upper went back from {} to {}",
                                    show(prev),
                                    show(*upper)
                                )
                            },
                        );
                    }
                    if self.tasks.len() < MAX_HANDLES || self.tasks.contains_key(actor) {
                        self.tasks.insert(actor.to_string(), (*upper, at));
                    }
                }
                if let (true, Some(desired)) = (what == "committed", desired) {
                    if self.commits.len() == CONTENTS_KEPT {
                        self.commits.pop_front();
                        f.unverified(CheckRule::TaskDesired);
                    }
                    self.commits.push_back(TaskCommit {
                        actor: actor.to_string(),
                        upper: *upper,
                        desired: *desired,
                        at,
                    });
                    self.resolve_commits(f);
                }
            }
            _ => {}
        }
    }

    fn ack(&mut self, digest: u64, upper: u64, actor: &str, at: At, f: &mut Findings) {
        if self.values.contains_key(&digest) {
            return self.check_ack(digest, upper, actor, at, f);
        }
        if self.pending.len() == MAX_PENDING {
            f.unverified(CheckRule::AckLost);
            return;
        }
        self.pending.push_back(PendingAck {
            digest,
            upper,
            at,
            actor: actor.to_string(),
        });
        self.resolve_acks(f);
    }

    /// Checks an acknowledged value once the shard's upper has passed it.
    fn check_ack(&mut self, digest: u64, upper: u64, actor: &str, at: At, f: &mut Findings) {
        let name = &self.name;
        let Some(v) = self.values.get_mut(&digest) else {
            if self.forgotten(upper) {
                f.unverified(CheckRule::AckLost);
                return;
            }
            let cited = [at, self.last];
            let shard_upper = show(self.upper);
            f.expect(CheckRule::AckLost, false, &cited, || {
                format!("{name}: {actor}'s acknowledged write at [.., {upper}) is not in the shard, whose upper is {shard_upper}")
            });
            return;
        };
        v.acked = Some(at);
        let (net, appends, first) = (v.net, v.appends, v.first);
        f.expect(CheckRule::AckLost, net >= 1, &[first, at], || {
            format!("{name}: {actor}'s acknowledged write has multiplicity {net} in the shard")
        });
        f.expect(CheckRule::AckDuplicate, net <= 1 && appends <= 1, &[first, at], || {
            format!("{name}: {actor}'s acknowledged write is in the shard {appends} times (multiplicity {net}): written twice")
        });
    }

    fn resolve_acks(&mut self, f: &mut Findings) {
        let mut i = 0;
        while i < self.pending.len() {
            if at_or_beyond(self.upper, Some(self.pending[i].upper)) {
                if let Some(p) = self.pending.remove(i) {
                    self.check_ack(p.digest, p.upper, &p.actor, p.at, f);
                }
            } else {
                i += 1;
            }
        }
    }

    fn resolve_commits(&mut self, f: &mut Findings) {
        let name = self.name.clone();
        let newest = self.contents.back().map(|c| c.0);
        let mut keep = VecDeque::new();
        while let Some(c) = self.commits.pop_front() {
            match self.contents.iter().find(|(u, ..)| *u == c.upper) {
                Some(&(_, fp, seen)) => {
                    f.expect(CheckRule::TaskDesired, fp == c.desired, &[c.at, seen], || {
                        format!("{name}: after {}'s commit at upper {}, the shard does not hold the task's desired collection", c.actor, show(c.upper))
                    });
                }
                None if newest.is_some_and(|n| at_or_beyond(n, c.upper)) => {
                    f.unverified(CheckRule::TaskDesired);
                }
                None => keep.push_back(c),
            }
        }
        self.commits = keep;
    }
}
