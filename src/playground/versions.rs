//! The store's observer as a witness: it reads every new version of an observed shard straight
//! from Consensus (raw location: no faults, no gate) and logs what each says as
//! [`Fact::ShardVersions`], with the digest of every update each append adds. The history check
//! rebuilds the chain of appends from these alone, independently of what the writers claim.
//!
//! The observer starts from a [`Fact::ShardBaseline`] (the state it read first). It then scans
//! from the seqno after the last one it read. If GC truncated versions it had not read yet
//! (the earliest stored seqno is past the one it needs), it starts again from a new baseline
//! and says so; a missing version with earlier ones still stored is reported as it is (the
//! next version's `seqno_from` tells the check).
//!
//! For shards whose contents it keeps (write-task shards, see [`VersionWitness::set_keep_contents`])
//! it also folds every appended update into a consolidated collection of rows and reports its
//! fingerprint after each version, which is what the task's commits are checked against.

use std::cell::RefCell;

use super::fact::{mask, BatchFact, Fact, HandleFact, VersionFact, MAX_ITEMIZED};
use super::journal::Journal;
use super::log::{Outcome, Pending};
use crate::location::{Location, SeqNo};
use crate::persist::codec::{Codec, Row};
use crate::persist::encoding::{decode_diff, decode_part, StateDiff};
use crate::persist::events::frontier;
use crate::persist::state::{BatchPart, HollowBatch, State};
use crate::write_task::ops::{consolidate, fingerprint};

/// How many versions one pass reads at most.
const SCAN_LIMIT: usize = 256;
/// How long a version waits before the observer says another tab wrote it: this page records
/// its own compare_and_set when the call returns, which may be after the version is readable.
const CLAIM_AFTER_MS: u64 = 1_000;
/// The most rows a kept collection may hold; beyond it the observer stops keeping it.
const MAX_KEPT_ROWS: usize = 50_000;

/// What the observer of one shard knows between passes.
#[derive(Default)]
pub struct VersionWitness {
    keep_contents: bool,
    seqno: Option<u64>,
    upper: Option<u64>,
    since: Option<u64>,
    contents: Option<Vec<(Row, i64)>>,
    // Versions read but not yet found to be this page's: (seqno, bytes, when read).
    unclaimed: std::collections::VecDeque<(u64, u64, u64)>,
}

fn is_beyond(upper: Option<u64>, than: Option<u64>) -> bool {
    match (upper, than) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(u), Some(t)) => u > t,
    }
}

/// An update as the observer reads it from a batch: encoded key, encoded value, time, diff.
pub(super) type ReadUpdate = (Vec<u8>, Vec<u8>, u64, i64);

/// Every update of `batch` inside its interval, or `None` if a part is gone or does not decode.
pub(super) async fn read_batch(
    location: &Location,
    batch: &HollowBatch,
) -> Option<Vec<ReadUpdate>> {
    let (lo, hi) = (frontier(&batch.desc.lower), frontier(&batch.desc.upper));
    let mut out = Vec::new();
    for part in &batch.parts {
        let bytes = match part {
            BatchPart::Inline { encoded } => encoded.clone(),
            BatchPart::Hollow { key, .. } => location.blob.get(key).await.ok()??.to_vec(),
        };
        for ((k, v), t, d) in decode_part(&bytes).ok()? {
            let inside = lo.is_some_and(|l| t >= l) && hi.is_none_or(|h| t < h);
            if inside {
                out.push((k, v, t, d));
            }
        }
    }
    Some(out)
}

/// Logs a fact of the store's observer.
fn record(journal: &RefCell<Journal>, at_ms: u64, fact: Fact, detail: String) {
    journal.borrow_mut().log.record(Pending {
        at_ms,
        actor: None,
        process: None,
        component: "store",
        kind: "version".into(),
        outcome: Outcome::Info,
        detail,
        fact: Some(fact),
    });
}

/// The digest and diff of every update.
fn itemize(updates: &[ReadUpdate]) -> Vec<(u64, i64)> {
    updates
        .iter()
        .map(|(k, v, _, d)| (super::fact::digest(k, v), *d))
        .collect()
}

fn handles(writers: Vec<HandleFact>, readers: Vec<HandleFact>) -> Vec<HandleFact> {
    writers.into_iter().chain(readers).collect()
}

impl VersionWitness {
    /// Starts or stops keeping the contents; starting takes a new baseline (to read them).
    pub fn set_keep_contents(&mut self, keep: bool) {
        if keep && !self.keep_contents {
            self.seqno = None;
        }
        self.keep_contents = keep;
    }

    fn fingerprint(&self) -> Option<u64> {
        self.contents.as_deref().map(|c| mask(fingerprint(c)))
    }

    /// Folds updates into the kept contents (consolidated, as the write task keeps `desired`).
    fn fold(&mut self, updates: &[ReadUpdate]) {
        let Some(contents) = &mut self.contents else {
            return;
        };
        for (k, _, _, d) in updates {
            match Row::decode(k) {
                Ok(row) => contents.push((row, *d)),
                Err(_) => {
                    self.contents = None; // not a row shard: nothing to keep
                    return;
                }
            }
        }
        if consolidate(contents).is_err() || contents.len() > MAX_KEPT_ROWS {
            self.contents = None;
        }
    }

    /// The baseline fact of `state` (and the contents, if kept, read from its batches).
    async fn baseline(&mut self, location: &Location, name: &str, state: &State) -> Fact {
        let c = &state.collections;
        self.seqno = Some(state.seqno.0);
        self.upper = frontier(state.upper());
        self.since = frontier(state.since());
        self.contents = None;
        if self.keep_contents {
            self.contents = Some(Vec::new());
            for b in c.trace.batches() {
                match read_batch(location, b).await {
                    Some(u) => self.fold(&u),
                    None => self.contents = None,
                }
            }
        }
        // Small traces are itemized too, so the check knows every value from the start.
        let total: u64 = c.trace.batches().iter().map(|b| b.len).sum();
        let mut batches = Vec::new();
        for b in c.trace.batches() {
            let updates = if total <= MAX_ITEMIZED as u64 {
                read_batch(location, b).await.as_deref().map(itemize)
            } else {
                None
            };
            batches.push(BatchFact {
                lower: frontier(&b.desc.lower).unwrap_or(0),
                upper: frontier(&b.desc.upper),
                len: b.len,
                updates,
            });
        }
        let writers = c.writers.iter().map(|(id, w)| HandleFact {
            id: id.0.clone(),
            frontier: frontier(&w.most_recent_write_upper),
            removed: false,
        });
        let readers = c.leased_readers.iter().map(|(id, r)| HandleFact {
            id: id.0.clone(),
            frontier: frontier(&r.since),
            removed: false,
        });
        Fact::ShardBaseline {
            shard: name.to_string(),
            seqno: state.seqno.0,
            upper: self.upper,
            since: self.since,
            batches,
            handles: handles(writers.collect(), readers.collect()),
            contents: self.fingerprint(),
        }
    }

    async fn version(&mut self, location: &Location, diff: &StateDiff) -> VersionFact {
        let before = self.upper;
        if let Some(u) = &diff.upper {
            self.upper = frontier(u);
        }
        if let Some(s) = &diff.since {
            self.since = frontier(s);
        }
        let mut batches = Vec::new();
        let mut removed = Vec::new();
        for (lower, b) in &diff.batches {
            let Some(b) = b else {
                removed.push(*lower);
                continue;
            };
            let upper = frontier(&b.desc.upper);
            // An append (or a fused empty batch) extends the upper; a merge stays below it.
            let updates = if is_beyond(upper, before) {
                let read = read_batch(location, b).await;
                if let Some(u) = &read {
                    self.fold(u);
                } else {
                    self.contents = None;
                }
                read.filter(|u| u.len() <= MAX_ITEMIZED)
                    .as_deref()
                    .map(itemize)
            } else {
                None
            };
            batches.push(BatchFact {
                lower: *lower,
                upper,
                len: b.len,
                updates,
            });
        }
        let writers = diff.writers.iter().map(|(id, w)| HandleFact {
            id: id.0.clone(),
            frontier: w
                .as_ref()
                .and_then(|w| frontier(&w.most_recent_write_upper)),
            removed: w.is_none(),
        });
        let readers = diff.leased_readers.iter().map(|(id, r)| HandleFact {
            id: id.0.clone(),
            frontier: r.as_ref().and_then(|r| frontier(&r.since)),
            removed: r.is_none(),
        });
        self.seqno = Some(diff.seqno_to.0);
        VersionFact {
            seqno: diff.seqno_to.0,
            seqno_from: diff.seqno_from.0,
            upper: self.upper,
            since: self.since,
            batches,
            removed,
            handles: handles(writers.collect(), readers.collect()),
            contents: self.fingerprint(),
        }
    }

    /// One pass: a baseline from `state` if there is none yet, then every version after the
    /// last one read. Logs the facts into `journal`.
    pub async fn pass(
        &mut self,
        location: &Location,
        name: &str,
        state: Option<&State>,
        journal: &RefCell<Journal>,
        now_ms: u64,
    ) {
        let record = |fact: Fact, detail: String| record(journal, now_ms, fact, detail);
        let Some(last) = self.seqno else {
            let Some(state) = state else { return };
            let fact = self.baseline(location, name, state).await;
            let detail = format!(
                "{name}: observing from seqno {}, upper {}",
                state.seqno,
                super::log::fmt_frontier(self.upper)
            );
            return record(fact, detail);
        };
        let consensus = &location.consensus;
        let Ok(found) = consensus.scan(name, SeqNo(last + 1), SCAN_LIMIT).await else {
            return;
        };
        if found.first().is_some_and(|v| v.seqno.0 > last + 1) {
            let earliest = consensus.scan(name, SeqNo(0), 1).await.ok();
            let truncated = earliest
                .and_then(|e| e.first().map(|v| v.seqno.0))
                .is_some_and(|e| e > last + 1);
            if truncated {
                // GC truncated versions this observer had not read: start again.
                self.seqno = None;
                return;
            }
        }
        let mut versions = Vec::new();
        for v in &found {
            let diff = match decode_diff(&v.data) {
                Ok(d) => d,
                // A version that does not decode: the panel says so; the scan waits here.
                Err(_) => break,
            };
            versions.push(self.version(location, &diff).await);
            self.unclaimed
                .push_back((v.seqno.0, v.data.len() as u64, now_ms));
        }
        self.claim_foreign(journal, name, now_ms);
        if versions.is_empty() {
            return;
        }
        let (first, last) = (versions[0].seqno, versions[versions.len() - 1].seqno);
        let detail = if first == last {
            format!("{name}: version {first}")
        } else {
            format!("{name}: versions {first} to {last}")
        } + &format!(
            ", upper {}, since {}",
            super::log::fmt_frontier(self.upper),
            super::log::fmt_frontier(self.since)
        );
        record(
            Fact::ShardVersions {
                shard: name.to_string(),
                versions,
            },
            detail,
        );
    }
}

impl VersionWitness {
    /// Every version read at least [`CLAIM_AFTER_MS`] ago that no compare_and_set of this page
    /// may have written goes to the Consensus panel as another tab's.
    ///
    /// Live mode only (in seed mode there is no other tab), and not for the upsert shards, whose
    /// source writer and checker work on the raw location, outside every process.
    fn claim_foreign(&mut self, journal: &RefCell<Journal>, name: &str, now_ms: u64) {
        let mut j = journal.borrow_mut();
        let upsert = [
            super::command::UPSERT_SHARD,
            super::upsert_source::SOURCE_SHARD,
        ];
        if !j.live || upsert.contains(&name) {
            self.unclaimed.clear();
            return;
        }
        while let Some(&(seqno, bytes, seen)) = self.unclaimed.front() {
            if now_ms.saturating_sub(seen) < CLAIM_AFTER_MS {
                break;
            }
            self.unclaimed.pop_front();
            if !j.is_own_version(name, seqno) {
                j.record_foreign_version(name, seqno, bytes, now_ms);
            }
        }
    }
}

/// Logs every new version of an oracle timeline's record after `last` (a fact each), returning
/// the newest seqno read.
pub async fn timeline_pass(
    location_consensus: &dyn crate::location::Consensus,
    key: &str,
    timeline: &str,
    last: Option<u64>,
    journal: &RefCell<Journal>,
    now_ms: u64,
) -> Option<u64> {
    let from = match last {
        Some(l) => SeqNo(l + 1),
        None => match location_consensus.head(key).await {
            Ok(Some(head)) => head.seqno,
            _ => return None,
        },
    };
    let Ok(found) = location_consensus.scan(key, from, SCAN_LIMIT).await else {
        return last;
    };
    let mut newest = last;
    for v in found {
        let Ok(r) = crate::oracle::DurableRecord::decode(&v.data) else {
            break;
        };
        newest = Some(v.seqno.0);
        record(
            journal,
            now_ms,
            Fact::TimelineVersion {
                timeline: timeline.to_string(),
                seqno: v.seqno.0,
                epoch: r.epoch,
                durable_upper: r.upper,
            },
            format!(
                "oracle {timeline}: version {}, epoch {}, durable upper {}",
                v.seqno, r.epoch, r.upper
            ),
        );
    }
    newest
}
