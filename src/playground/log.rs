//! The playground's merged event log: one bounded sequence of events from every component
//! (actors, persist, write tasks, oracle instances, Consensus, faults, the scenario itself).
//!
//! Components record into a *pending* buffer as things happen; [`MergedLog::pump`] sorts what is
//! pending by time (stably, so same-time events keep their recording order), gives each a global
//! sequence number and appends it to the log. The page reads the log with
//! [`MergedLog::after`]`(cursor)`, so a slow page never misses or repeats an event as long as it
//! keeps up with the bound.
//!
//! Invariants: sequence numbers start at 1 and go up by one per event, in log order; times never
//! go back within one pump (across pumps, a component may report an event with an earlier time
//! than one already logged: it is logged with its own time, after it).
//!
//! This log stands alone so that it can be swapped for a crate-wide bounded event log later.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// How many events the log keeps before it drops the oldest.
pub const LOG_CAPACITY: usize = 20_000;

/// What came of the thing an event records. Each outcome has one mark on the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// A write or compare_and_set committed.
    Committed,
    /// Lost a race: an upper or a seqno was not what the caller expected.
    Mismatch,
    /// It may or may not have happened (a timeout).
    Indeterminate,
    /// It definitely did not happen; the caller retries.
    Retrying,
    /// It failed for good: a usage error, a corrupted record, a fenced oracle.
    Error,
    /// Anything else worth showing: a start, a crash, a fault knob changed.
    Info,
}

/// One event of the merged log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlayEvent {
    /// The global sequence number (1, 2, ...).
    pub seq: u64,
    /// When, on the scenario's clock (ms).
    pub at_ms: u64,
    /// The actor it belongs to (`W1`, `T2`, ...), if any.
    pub actor: Option<String>,
    /// The process, if any (`P1`, ...).
    pub process: Option<String>,
    /// Which component recorded it: `writer`, `reader`, `task`, `oracle`, `persist`,
    /// `consensus`, `faults`, `scenario`.
    pub component: String,
    /// A short name of what happened (`compare_and_append`, `crash`, ...).
    pub kind: String,
    /// The outcome.
    pub outcome: Outcome,
    /// A line of text for the log view.
    pub detail: String,
}

/// An event before it has a sequence number.
#[derive(Debug, Clone)]
pub struct Pending {
    /// See [`PlayEvent::at_ms`].
    pub at_ms: u64,
    /// See [`PlayEvent::actor`].
    pub actor: Option<String>,
    /// See [`PlayEvent::process`].
    pub process: Option<String>,
    /// See [`PlayEvent::component`].
    pub component: &'static str,
    /// See [`PlayEvent::kind`].
    pub kind: String,
    /// See [`PlayEvent::outcome`].
    pub outcome: Outcome,
    /// See [`PlayEvent::detail`].
    pub detail: String,
}

/// The merged, bounded log. See the module docs.
#[derive(Debug, Default)]
pub struct MergedLog {
    pending: Vec<Pending>,
    events: VecDeque<PlayEvent>,
    next_seq: u64,
    dropped: u64,
}

impl MergedLog {
    /// An empty log.
    pub fn new() -> Self {
        MergedLog {
            next_seq: 1,
            ..MergedLog::default()
        }
    }

    /// Records an event; it gets its sequence number at the next [`MergedLog::pump`].
    pub fn record(&mut self, event: Pending) {
        self.pending.push(event);
    }

    /// Moves every pending event into the log, oldest first. Returns how many were added.
    pub fn pump(&mut self) -> usize {
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_by_key(|e| e.at_ms); // stable: same-time events keep their order
        let added = pending.len();
        for p in pending {
            if self.events.len() == LOG_CAPACITY {
                self.events.pop_front();
                self.dropped += 1;
            }
            let Pending {
                at_ms,
                actor,
                process,
                component,
                kind,
                outcome,
                detail,
            } = p;
            self.events.push_back(PlayEvent {
                seq: self.next_seq,
                at_ms,
                actor,
                process,
                component: component.to_string(),
                kind,
                outcome,
                detail,
            });
            self.next_seq += 1;
        }
        added
    }

    /// Up to `limit` events with a sequence number above `cursor`, oldest first.
    pub fn after(&self, cursor: u64, limit: usize) -> Vec<PlayEvent> {
        // Sequence numbers are consecutive, so the first wanted event's index is computable.
        let first_kept = self.events.front().map_or(self.next_seq, |e| e.seq);
        let skip = cursor.saturating_add(1).saturating_sub(first_kept) as usize;
        self.events.iter().skip(skip).take(limit).cloned().collect()
    }

    /// The sequence number of the newest event (0 if none).
    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// How many events were dropped for capacity.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Every event kept, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &PlayEvent> {
        self.events.iter()
    }
}
