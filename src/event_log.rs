//! The one bounded event log, generic over the event type (persist, the oracle and the write
//! task each keep their own events in one).
//!
//! Semantics:
//! - An [`EventLog`] keeps at most `capacity` events, oldest first; recording one more drops the
//!   oldest and counts it in [`EventLog::dropped`].
//! - Every recorded event gets a **sequence number** from the log's [`SeqSource`], starting at 1
//!   and strictly increasing. Logs made with [`EventLog::sharing_seq`] draw from one source, so
//!   the events of several components (a persist client, an oracle, a write task) can be merged
//!   into one history by sequence number: "global" within whatever shares the source. Numbers
//!   are deterministic (no clock, no randomness), so a simulated run of a seed gives the same ones.
//! - [`EventLog::events_after`]`(seq)` is a cursor read: everything kept with a larger number,
//!   oldest first, and whether some of those were already dropped for capacity (the reader fell
//!   behind). A poller keeps the last number it saw and asks for what came after.
//! - A disabled log ([`EventLog::disabled`]) records nothing, spends no sequence numbers, and
//!   never builds the event: [`EventLog::record`] takes a closure, so a disabled log costs a
//!   branch.
//! - Clones share the log.
//!
//! ```
//! use persist_playground::event_log::EventLog;
//! let a: EventLog<&str> = EventLog::new();
//! let b: EventLog<&str> = EventLog::with_capacity(2).sharing_seq(&a);
//! a.record(|| "a1");
//! b.record(|| "b1");
//! b.record(|| "b2");
//! b.record(|| "b3"); // drops b1
//! let page = b.events_after(1);
//! assert_eq!(page.events.iter().map(|e| (e.seq, e.event)).collect::<Vec<_>>(), [(3, "b2"), (4, "b3")]);
//! assert!(page.missed, "b1 (seq 2) was dropped before it was read");
//! assert_eq!(b.events_after(3).events.len(), 1);
//! ```

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use serde::Serialize;

/// How many events a log keeps by default before it drops the oldest.
pub const DEFAULT_CAPACITY: usize = 100_000;

/// Where sequence numbers come from; logs that share one are numbered as one history.
#[derive(Debug, Clone, Default)]
pub struct SeqSource(Rc<Cell<u64>>);

impl SeqSource {
    /// A fresh source (the first number is 1).
    pub fn new() -> Self {
        Self::default()
    }

    /// The last number handed out (0 before the first).
    pub fn last(&self) -> u64 {
        self.0.get()
    }

    fn next(&self) -> u64 {
        let n = self.0.get().saturating_add(1);
        self.0.set(n);
        n
    }
}

/// An event with its sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Logged<E> {
    /// Its number (see the module docs).
    pub seq: u64,
    /// The event.
    pub event: E,
}

/// What [`EventLog::events_after`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventsAfter<E> {
    /// The kept events after the cursor, oldest first.
    pub events: Vec<Logged<E>>,
    /// Whether some events after the cursor were dropped for capacity before this read.
    pub missed: bool,
}

struct Inner<E> {
    events: VecDeque<Logged<E>>,
    capacity: usize,
    dropped: u64,
    /// The number of the newest dropped event (0: none dropped).
    last_dropped_seq: u64,
    enabled: bool,
}

/// A shared, bounded log of events. See the module docs.
pub struct EventLog<E> {
    inner: Rc<RefCell<Inner<E>>>,
    seq: SeqSource,
}

impl<E> Clone for EventLog<E> {
    fn clone(&self) -> Self {
        EventLog {
            inner: Rc::clone(&self.inner),
            seq: self.seq.clone(),
        }
    }
}

impl<E> Default for EventLog<E> {
    /// A disabled log (as [`EventLog::disabled`]).
    fn default() -> Self {
        Self::make(DEFAULT_CAPACITY, false)
    }
}

impl<E> std::fmt::Debug for EventLog<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.borrow();
        f.debug_struct("EventLog")
            .field("len", &inner.events.len())
            .field("capacity", &inner.capacity)
            .field("dropped", &inner.dropped)
            .field("enabled", &inner.enabled)
            .finish()
    }
}

impl<E> EventLog<E> {
    fn make(capacity: usize, enabled: bool) -> Self {
        EventLog {
            inner: Rc::new(RefCell::new(Inner {
                events: VecDeque::new(),
                capacity: capacity.max(1),
                dropped: 0,
                last_dropped_seq: 0,
                enabled,
            })),
            seq: SeqSource::new(),
        }
    }

    /// A log that records, keeping [`DEFAULT_CAPACITY`] events.
    pub fn new() -> Self {
        Self::make(DEFAULT_CAPACITY, true)
    }

    /// A log that records, keeping `capacity` events (at least 1).
    pub fn with_capacity(capacity: usize) -> Self {
        Self::make(capacity, true)
    }

    /// A log that records nothing (benchmarks).
    pub fn disabled() -> Self {
        Self::make(DEFAULT_CAPACITY, false)
    }

    /// This log, numbering its events from `other`'s source (call before recording).
    pub fn sharing_seq<F>(mut self, other: &EventLog<F>) -> Self {
        self.seq = other.seq.clone();
        self
    }

    /// This log, numbering its events from `source`.
    pub fn with_seq_source(mut self, source: SeqSource) -> Self {
        self.seq = source;
        self
    }

    /// The source this log numbers its events from.
    pub fn seq_source(&self) -> SeqSource {
        self.seq.clone()
    }

    /// Whether this log records.
    pub fn is_enabled(&self) -> bool {
        self.inner.borrow().enabled
    }

    /// Records the event `make` builds, if the log is enabled, and returns its number.
    pub fn record(&self, make: impl FnOnce() -> E) -> Option<u64> {
        if !self.is_enabled() {
            return None;
        }
        // Built before the log is borrowed: `make` may read other state freely.
        Some(self.push(make()))
    }

    /// Appends `event` with the next number, dropping the oldest beyond the capacity. Not generic
    /// in the caller's closure: one copy per event type, however many call sites record.
    fn push(&self, event: E) -> u64 {
        let seq = self.seq.next();
        let mut inner = self.inner.borrow_mut();
        while inner.events.len() >= inner.capacity {
            if let Some(old) = inner.events.pop_front() {
                inner.dropped += 1;
                inner.last_dropped_seq = old.seq;
            }
        }
        inner.events.push_back(Logged { seq, event });
        seq
    }

    /// How many events are kept.
    pub fn len(&self) -> usize {
        self.inner.borrow().events.len()
    }

    /// Whether no event is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many events were dropped for capacity.
    pub fn dropped(&self) -> u64 {
        self.inner.borrow().dropped
    }

    /// The number of the newest kept event (0 if none).
    pub fn last_seq(&self) -> u64 {
        self.inner.borrow().events.back().map_or(0, |e| e.seq)
    }
}

impl<E: Clone> EventLog<E> {
    /// Everything kept, oldest first.
    pub fn events(&self) -> Vec<E> {
        self.inner
            .borrow()
            .events
            .iter()
            .map(|e| e.event.clone())
            .collect()
    }

    /// Everything kept that `keep` accepts, oldest first.
    pub fn events_where(&self, mut keep: impl FnMut(&E) -> bool) -> Vec<E> {
        self.inner
            .borrow()
            .events
            .iter()
            .filter(|e| keep(&e.event))
            .map(|e| e.event.clone())
            .collect()
    }

    /// The cursor read: every kept event numbered above `seq`, oldest first (see the module docs).
    pub fn events_after(&self, seq: u64) -> EventsAfter<E> {
        let inner = self.inner.borrow();
        // Numbers increase along the deque: find the first above `seq` by bisection.
        let start = inner.events.partition_point(|e| e.seq <= seq);
        EventsAfter {
            events: inner.events.range(start..).cloned().collect(),
            missed: inner.last_dropped_seq > seq,
        }
    }

    /// Takes everything kept, oldest first, emptying the log (numbers keep counting).
    pub fn take(&self) -> Vec<E> {
        self.inner
            .borrow_mut()
            .events
            .drain(..)
            .map(|e| e.event)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_numbered_and_read_by_cursor() {
        let log: EventLog<u32> = EventLog::with_capacity(3);
        for i in 0..5 {
            assert_eq!(log.record(|| i), Some(u64::from(i) + 1));
        }
        assert_eq!(log.events(), vec![2, 3, 4]);
        assert_eq!((log.dropped(), log.len(), log.last_seq()), (2, 3, 5));
        let page = log.events_after(0);
        assert!(page.missed);
        assert_eq!(page.events.first().map(|e| e.seq), Some(3));
        let page = log.events_after(2);
        assert!(!page.missed, "everything after 2 is still kept");
        assert_eq!(page.events.len(), 3);
        assert!(log.events_after(5).events.is_empty());
        assert_eq!(log.events_where(|e| e % 2 == 0), vec![2, 4]);
        assert_eq!(log.take(), vec![2, 3, 4]);
        assert_eq!(
            log.record(|| 9),
            Some(6),
            "numbers keep counting after take"
        );
    }

    #[test]
    fn disabled_logs_build_nothing_and_spend_no_numbers() {
        let on: EventLog<u8> = EventLog::new();
        let off: EventLog<u8> = EventLog::disabled().sharing_seq(&on);
        assert_eq!(off.record(|| panic!("never built")), None);
        assert_eq!(on.record(|| 1), Some(1));
        assert!(off.is_empty() && !off.is_enabled());
        let shared: EventLog<&str> = EventLog::new().sharing_seq(&on);
        assert_eq!(
            shared.record(|| "x"),
            Some(2),
            "one history across event types"
        );
        assert_eq!(on.seq_source().last(), 2);
    }
}
