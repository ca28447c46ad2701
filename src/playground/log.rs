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
//! Storage and numbering are the crate's shared [`crate::event_log::EventLog`].

use serde::{Deserialize, Serialize};

use super::fact::Fact;
use crate::event_log::EventLog;

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
    /// What the event records, as data (for the history check); see [`Fact`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fact: Option<Fact>,
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
    /// See [`PlayEvent::fact`].
    pub fact: Option<Fact>,
}

/// The merged, bounded log. See the module docs. It keeps its events in the crate's shared
/// [`EventLog`], which numbers them.
#[derive(Debug)]
pub struct MergedLog {
    pending: Vec<Pending>,
    events: EventLog<PlayEvent>,
}

impl Default for MergedLog {
    fn default() -> Self {
        MergedLog::new()
    }
}

impl MergedLog {
    /// An empty log.
    pub fn new() -> Self {
        MergedLog {
            pending: Vec::new(),
            events: EventLog::with_capacity(LOG_CAPACITY),
        }
    }

    /// Records an event; it gets its sequence number at the next [`MergedLog::pump`].
    pub fn record(&mut self, event: Pending) {
        self.pending.push(event);
    }

    /// Moves every pending event into the log, oldest first. Returns how many were added.
    pub fn pump(&mut self) -> usize {
        self.pump_with(|_| {})
    }

    /// As [`MergedLog::pump`], showing each event to `seen` as it is logged (the history check
    /// reads every event this way, so the log's bound does not limit it).
    pub fn pump_with(&mut self, mut seen: impl FnMut(&PlayEvent)) -> usize {
        let mut pending = std::mem::take(&mut self.pending);
        crate::sort::sort_by_key(&mut pending, |e| e.at_ms); // stable: same-time events keep their order
        let added = pending.len();
        for p in pending {
            let Pending {
                at_ms,
                actor,
                process,
                component,
                kind,
                outcome,
                detail,
                fact,
            } = p;
            // The log's numbering is its own (not shared), so the next number is known.
            let seq = self.events.last_seq() + 1;
            let event = PlayEvent {
                seq,
                at_ms,
                actor,
                process,
                component: component.to_string(),
                kind,
                outcome,
                detail,
                fact,
            };
            seen(&event);
            let given = self.events.record(|| event);
            debug_assert_eq!(given, Some(seq), "the merged log numbers its own events");
        }
        added
    }

    /// Up to `limit` events with a sequence number above `cursor`, oldest first.
    pub fn after(&self, cursor: u64, limit: usize) -> Vec<PlayEvent> {
        let after = self.events.events_after(cursor);
        after
            .events
            .into_iter()
            .take(limit)
            .map(|l| l.event)
            .collect()
    }

    /// The sequence number of the newest event (0 if none).
    pub fn last_seq(&self) -> u64 {
        self.events.last_seq()
    }

    /// How many events were dropped for capacity.
    pub fn dropped(&self) -> u64 {
        self.events.dropped()
    }
}

/// `1 update`, `2 updates`, `2 entries`: a count in an event's line.
pub fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        return format!("1 {noun}");
    }
    match noun.strip_suffix('y') {
        Some(stem) if !stem.ends_with(['a', 'e', 'i', 'o', 'u']) => format!("{n} {stem}ies"),
        _ => format!("{n} {noun}s"),
    }
}

/// Formats an `Option<u64>` frontier for an event's line (`None` is empty, "finished").
pub fn fmt_frontier(f: Option<u64>) -> String {
    f.map_or_else(|| "[] (finished)".to_string(), |t| t.to_string())
}
