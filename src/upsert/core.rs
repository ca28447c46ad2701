//! [`UpsertCore`]: everything the upsert operator knows and decides, without timely.
//!
//! The timely operator (the `operator` module, built on this one) only translates its inputs
//! into calls here and the results into output and capabilities; the playground and the tests
//! look at the same value through [`UpsertCore::snapshot`]. The rules, each enforced in one method:
//!
//! - **The state changes only from the persist input** ([`UpsertCore::on_persist`], through
//!   `consolidate_chunk`), except for provisional values written by partial drains.
//! - **Rehydration**: while `hydrating`, the persist input is the shard's snapshot at the resume
//!   upper; the chunk that brings the persist upper to `resume_upper` completes it. Source updates
//!   before `resume_upper` are dropped while the input is not past it, and source progress before
//!   it is ignored ([`UpsertCore::on_source_data`], [`UpsertCore::on_source_progress`]).
//! - **Skip while mid-timestamp**: if the persist upper has not passed the largest time seen on
//!   the persist input, some key may be half-consolidated; nothing drains ([`UpsertCore::drain`]).
//! - **Drains**: after every event, `ToUpper` (complete times at the persist upper), then, if
//!   data arrived exactly at the input frontier and `prevent_snapshot_buffering` is on, `AtTime`
//!   at that time (see [`super::stash`]).
//! - **Errors stop the operator**: a cell that does not decode, a feedback row without its key
//!   columns, a non-positive source diff: the core records the error, reports it once for the
//!   health stream and is *halted* from then on (it ignores everything; the operator keeps the
//!   capabilities it holds, so its output frontier cannot move past what it had not finished).

use std::cmp::Reverse;
use std::fmt::Debug;

use serde::Serialize;
use timely::order::TotalOrder;
use timely::progress::Antichain;
use timely::PartialOrder;

use super::consolidate::UpsertState;
use super::observe::{
    DrainKind, OperatorSnapshot, StashEntryView, StateCellView, UpsertCounters, UpsertEvent,
    UpsertEventKind, UpsertLog,
};
use super::stash::{drain_staged_input, stage_input, DrainStats, DrainStyle, SourceBatch, Stash};
use super::state::{StateValue, UpsertStateBackend, UpsertValueAndSize, Value};
use super::types::{DataflowError, EnvelopeError, UpsertKey, UpsertValue};
use crate::persist::codec::{Diff, Row};
use crate::runtime::Runtime;

/// Where an operator's events go and how they are stamped.
#[derive(Clone)]
pub struct CoreObserver<T> {
    /// The name stamped on events.
    pub who: String,
    /// The log.
    pub log: UpsertLog<T>,
    /// The clock for `at_ms` (none: 0).
    pub clock: Option<Runtime>,
}

impl<T> CoreObserver<T> {
    /// An observer named `who` with a fresh log and no clock.
    pub fn new(who: &str) -> Self {
        CoreObserver {
            who: who.to_string(),
            log: UpsertLog::new(),
            clock: None,
        }
    }

    fn record(&self, kind: UpsertEventKind<T>) {
        self.log.record(|| UpsertEvent {
            who: self.who.clone(),
            at_ms: self.clock.as_ref().map_or(0, |c| c.now_ms()),
            kind,
        });
    }
}

/// What the operator must do after a call: whether the stash is empty (drop its capability)
/// or its least remaining time (downgrade to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StashFrontier<T> {
    /// The least time left in the stash, if any.
    pub min_time: Option<T>,
}

/// The operator's state and rules. See the module docs.
pub struct UpsertCore<T, F, S> {
    key_indices: Vec<usize>,
    resume_upper: Antichain<T>,
    prevent_snapshot_buffering: bool,
    state: UpsertState<S, T, Option<F>>,
    stash: Stash<T, F>,
    stash_cap: Option<T>,
    input_upper: Antichain<T>,
    persist_upper: Antichain<T>,
    largest_seen_persist_ts: Option<T>,
    hydrating: bool,
    partial_drain_time: Option<T>,
    persist_stash: Vec<(UpsertKey, UpsertValue, Diff)>,
    keys: Vec<UpsertKey>,
    slots: Vec<UpsertValueAndSize<T, Option<F>>>,
    counters: UpsertCounters,
    observer: CoreObserver<T>,
    halted: Option<String>,
    unreported_error: Option<String>,
    finished: bool,
    activations: u64,
}

fn opt<T: Clone>(f: &Antichain<T>) -> Option<T> {
    f.elements().first().cloned()
}

impl<T, F, S> UpsertCore<T, F, S>
where
    T: timely::progress::Timestamp + TotalOrder,
    F: Ord + Clone + Debug,
    S: UpsertStateBackend<T, Option<F>>,
{
    /// A core over `backend`, resuming at `resume_upper`.
    pub fn new(
        backend: S,
        key_indices: Vec<usize>,
        resume_upper: Antichain<T>,
        prevent_snapshot_buffering: bool,
        observer: CoreObserver<T>,
    ) -> Self {
        UpsertCore {
            key_indices,
            resume_upper,
            prevent_snapshot_buffering,
            state: UpsertState::new(backend),
            stash: Stash::default(),
            stash_cap: None,
            input_upper: Antichain::from_elem(T::minimum()),
            persist_upper: Antichain::from_elem(T::minimum()),
            largest_seen_persist_ts: None,
            hydrating: true,
            partial_drain_time: None,
            persist_stash: Vec::new(),
            keys: Vec::new(),
            slots: Vec::new(),
            counters: UpsertCounters::default(),
            observer,
            halted: None,
            unreported_error: None,
            finished: false,
            activations: 0,
        }
    }

    /// Whether the core stopped on an error (the error).
    pub fn halted(&self) -> Option<&str> {
        self.halted.as_deref()
    }

    /// Whether the source input finished (its upper is empty): the operator is done.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Whether rehydration is still going on.
    pub fn hydrating(&self) -> bool {
        self.hydrating
    }

    /// The persist upper as last seen.
    pub fn persist_upper(&self) -> &Antichain<T> {
        &self.persist_upper
    }

    /// The input upper as last seen.
    pub fn input_upper(&self) -> &Antichain<T> {
        &self.input_upper
    }

    /// Counts one activation of the operator (the host uses the count to tell a quiet worker).
    pub fn note_activation(&mut self) {
        self.activations += 1;
    }

    /// Activations so far.
    pub fn activations(&self) -> u64 {
        self.activations
    }

    /// Whether the persist input is mid-timestamp: updates at a time the persist upper has not
    /// passed have arrived, so some cells may hold part of that time's updates (and need not
    /// decode until the rest arrives).
    pub fn mid_timestamp(&self) -> bool {
        self.largest_seen_persist_ts
            .as_ref()
            .is_some_and(|l| self.persist_upper.less_equal(l))
    }

    /// The counters.
    pub fn counters(&self) -> UpsertCounters {
        let mut c = self.counters;
        c.provisional_overwritten = self.state.stats().provisional_overwritten;
        c
    }

    /// The state.
    pub fn state(&self) -> &UpsertState<S, T, Option<F>> {
        &self.state
    }

    /// The number of stashed entries.
    pub fn stash_len(&self) -> usize {
        self.stash.len()
    }

    /// The error to put on the health stream, once.
    pub fn take_health_error(&mut self) -> Option<String> {
        self.unreported_error.take()
    }

    /// Records that the operator holds (or no longer holds) a stash capability at `time`.
    pub fn set_stash_cap(&mut self, time: Option<T>) {
        self.stash_cap = time;
    }

    /// Stops the core with `error` (reported once on the health stream).
    pub fn fail(&mut self, error: String) {
        self.halt(error)
    }

    fn halt(&mut self, error: String) {
        if self.halted.is_none() {
            self.counters.health_errors += 1;
            self.observer.record(UpsertEventKind::HealthError {
                error: error.clone(),
            });
            self.halted = Some(error.clone());
            self.unreported_error = Some(error);
        }
    }

    /// Feedback: updates of the output shard (any order, not necessarily consolidated) and,
    /// if it moved, the persist input's new upper. Folds them into the state.
    pub fn on_persist(
        &mut self,
        data: impl IntoIterator<Item = (Result<Row, DataflowError>, T, Diff)>,
        upper: Option<Antichain<T>>,
    ) {
        if self.halted.is_some() {
            return;
        }
        for (result, ts, diff) in data {
            // Only errors that belong to a key come back into the state; others are dropped.
            let value = match result {
                Ok(row) => Ok(row),
                Err(DataflowError::EnvelopeError(EnvelopeError::Upsert(e))) => Err(e),
                Err(_) => continue,
            };
            let key = match UpsertKey::from_value(value.as_ref(), &self.key_indices) {
                Ok(k) => k,
                Err(e) => return self.halt(format!("persist input: {e}")),
            };
            if self
                .largest_seen_persist_ts
                .as_ref()
                .is_none_or(|l| *l < ts)
            {
                self.largest_seen_persist_ts = Some(ts);
            }
            self.persist_stash.push((key, value, diff));
        }
        if let Some(upper) = upper {
            self.persist_upper = upper;
        }
        let last =
            self.hydrating && PartialOrder::less_equal(&self.resume_upper, &self.persist_upper);
        let updates = self.persist_stash.len() as u64;
        let chunk = std::mem::take(&mut self.persist_stash);
        if let Err(e) = self.state.consolidate_chunk(chunk, last) {
            return self.halt(format!("failed to rehydrate state: {e}"));
        }
        self.counters.persist_ingested += updates;
        if last {
            self.hydrating = false;
        }
        self.observer.record(UpsertEventKind::PersistIngested {
            updates,
            persist_upper: opt(&self.persist_upper),
            last_rehydration_chunk: last,
        });
    }

    /// Source data at `time` (its message's capability). Stashes it; returns whether the stash
    /// is non-empty (the operator then keeps the lesser of its stash capability and this one).
    pub fn on_source_data(&mut self, time: &T, data: &mut SourceBatch<T, F>) -> bool {
        if self.halted.is_some() {
            data.clear();
            return !self.stash.is_empty();
        }
        let n = data.len() as u64;
        // The messages' own least time, which the stash shows: a batch's capability can be
        // earlier (a replica held back reads messages of later times at its old frontier).
        let least = data.iter().map(|(_, t, _)| t).min().cloned();
        match stage_input(&mut self.stash, data, &self.input_upper, &self.resume_upper) {
            Ok(dropped) => {
                self.counters.source_staged += n - dropped;
                self.counters.source_dropped_before_resume += dropped;
                let partial = self.prevent_snapshot_buffering
                    && opt(&self.input_upper).as_ref() == Some(time);
                if partial {
                    self.partial_drain_time = Some(time.clone());
                }
                self.observer.record(UpsertEventKind::SourceStaged {
                    time: least.unwrap_or_else(|| time.clone()),
                    staged: n - dropped,
                    dropped_before_resume: dropped,
                    partial_drain_allowed: partial,
                });
            }
            Err(e) => self.halt(e.to_string()),
        }
        !self.stash.is_empty()
    }

    /// The source frontier moved to `upper`.
    pub fn on_source_progress(&mut self, upper: Antichain<T>) {
        if self.halted.is_some() {
            return;
        }
        // Progress before the resume upper (our first capability after rehydration) is ignored.
        let ignored = PartialOrder::less_than(&upper, &self.resume_upper);
        if !ignored {
            // This progress covers the partial drain time; data exactly at the new frontier
            // may allow it again.
            self.partial_drain_time = None;
            self.input_upper = upper.clone();
        }
        self.observer.record(UpsertEventKind::SourceProgress {
            input_upper: opt(&upper),
            ignored,
        });
    }

    /// Drains what may be drained (see the module docs) into `output`, and returns the stash's
    /// least remaining time for the capability.
    pub fn drain(&mut self, output: &mut Vec<(UpsertValue, T, Diff)>) -> StashFrontier<T> {
        let frontier = |stash: &Stash<T, F>| StashFrontier {
            min_time: stash.min_time().cloned(),
        };
        if self.halted.is_some() || self.finished {
            return frontier(&self.stash);
        }
        if let Some(largest) = &self.largest_seen_persist_ts {
            if self.mid_timestamp() {
                self.counters.drains_skipped += 1;
                self.observer.record(UpsertEventKind::DrainSkipped {
                    persist_upper: opt(&self.persist_upper),
                    largest_seen_persist_ts: largest.clone(),
                });
                return frontier(&self.stash);
            }
        }
        if !self.stash.is_empty() && self.run_drain(None, output).is_err() {
            return frontier(&self.stash);
        }
        if self.input_upper.is_empty() {
            self.finished = true;
            return frontier(&self.stash);
        }
        if let Some(time) = self.partial_drain_time.clone() {
            if !self.stash.is_empty() {
                let _ = self.run_drain(Some(time), output);
            }
        }
        frontier(&self.stash)
    }

    /// Runs `ToUpper` (no time) or `AtTime(time)`.
    fn run_drain(
        &mut self,
        at_time: Option<T>,
        output: &mut Vec<(UpsertValue, T, Diff)>,
    ) -> Result<(), ()> {
        let kind = if at_time.is_some() {
            DrainKind::AtTime
        } else {
            DrainKind::ToUpper
        };
        let time = at_time.clone();
        let style = match at_time {
            None => DrainStyle::ToUpper {
                input_upper: &self.input_upper,
                persist_upper: &self.persist_upper,
            },
            Some(time) => DrainStyle::AtTime {
                time,
                persist_upper: &self.persist_upper,
            },
        };
        let result = drain_staged_input(
            &mut self.stash,
            &mut self.keys,
            &mut self.slots,
            output,
            style,
            &mut self.state,
        );
        match result {
            Ok(stats) => {
                self.count_drain(kind, &stats);
                self.observer.record(UpsertEventKind::Drained {
                    drain: kind,
                    time,
                    eligible: stats.eligible,
                    discarded: stats.discarded,
                    superseded: stats.superseded,
                    skipped_by_order: stats.skipped_by_order,
                    emitted: stats.emitted,
                    provisional_written: stats.provisional_written,
                    remaining: self.stash.len() as u64,
                });
                Ok(())
            }
            Err(e) => {
                self.halt(format!("failed to drain the stash: {e}"));
                Err(())
            }
        }
    }

    fn count_drain(&mut self, kind: DrainKind, s: &DrainStats) {
        let c = &mut self.counters;
        match kind {
            DrainKind::ToUpper => c.drains_to_upper += 1,
            DrainKind::AtTime => {
                c.drains_at_time += 1;
                if s.emitted > 0 {
                    c.partial_emissions += 1;
                }
            }
        }
        c.stash_discarded += s.discarded;
        c.stash_superseded += s.superseded;
        c.skipped_by_order += s.skipped_by_order;
        c.emitted += s.emitted;
        c.provisional_written += s.provisional_written;
    }
}

impl<T, F, S> UpsertCore<T, F, S>
where
    T: timely::progress::Timestamp + TotalOrder + Serialize,
    F: Ord + Clone + Debug,
    S: UpsertStateBackend<T, Option<F>>,
{
    /// The operator's insides as plain data.
    pub fn snapshot(&self) -> OperatorSnapshot<T> {
        let render = |v: &UpsertValue| match v {
            Ok(row) => row.to_string(),
            Err(e) => format!("error: {e}"),
        };
        let mut stash: Vec<_> = self.stash.iter().collect();
        crate::sort::sort(&mut stash);
        let stash = stash
            .into_iter()
            .map(|(time, (key, Reverse(from), value))| StashEntryView {
                time: time.clone(),
                key: key.short(),
                from_time: format!("{from:?}"),
                value: value.as_ref().map(render),
            })
            .collect();
        let state = self
            .state
            .backend()
            .cells()
            .into_iter()
            .map(|(key, cell)| {
                let mut view = StateCellView {
                    key: key.short(),
                    mode: String::new(),
                    value: None,
                    provisional_value: None,
                    provisional_time: None,
                    provisional_order: None,
                    diff_sum: None,
                    decode_error: None,
                };
                match cell {
                    StateValue::Consolidating(c) => {
                        view.mode = "consolidating".into();
                        view.diff_sum = Some(c.diff_sum.0);
                        match c.decode(&key) {
                            Ok(v) => view.value = v.as_ref().map(render),
                            Err(e) => view.decode_error = Some(e.to_string()),
                        }
                    }
                    StateValue::Value(Value::FinalizedValue(v, _)) => {
                        view.mode = "value".into();
                        view.value = Some(render(v));
                    }
                    StateValue::Value(Value::Tombstone(_)) => view.mode = "tombstone".into(),
                    StateValue::Value(Value::ProvisionalValue {
                        finalized_value,
                        provisional_value: (pv, pts, po),
                    }) => {
                        view.mode = "provisional".into();
                        view.value = finalized_value.as_ref().map(|b| render(&b.0));
                        view.provisional_value = pv.as_ref().map(render);
                        view.provisional_time = Some(pts.clone());
                        view.provisional_order = Some(format!("{po:?}"));
                    }
                }
                view
            })
            .collect();
        OperatorSnapshot {
            resume_upper: opt(&self.resume_upper),
            input_upper: opt(&self.input_upper),
            persist_upper: opt(&self.persist_upper),
            largest_seen_persist_ts: self.largest_seen_persist_ts.clone(),
            hydrating: self.hydrating,
            partial_drain_time: self.partial_drain_time.clone(),
            stash_cap: self.stash_cap.clone(),
            stash,
            state,
            halted: self.halted.clone(),
            counters: self.counters(),
        }
    }
}
