//! [`Replica`]: one ingestion replica as a value with explicit steps: an [`UpsertWorker`], its
//! [`PersistSink`], its cursor into the source, and the receiving end of its persist source.
//!
//! Nothing here is async and nothing happens on its own: [`Replica::step`] moves available
//! feedback into the operator's persist input, reads the next source messages at this replica's
//! pace, steps the worker until it is quiet, and hands the output to the sink; the host then
//! asks [`Replica::next_write`] for a range to `compare_and_append` and reports the outcome
//! ([`Replica::write_committed`], [`Replica::write_mismatch`]). The async loop that does that on
//! the runtime is in the `driver` module (built on this one); the playground may call the same
//! methods itself to step a replica one phase at a time, and draws [`Replica::snapshot`].
//!
//! There is no timely cycle: the loop closes through the shard. A replica learns its state only
//! from what the shard holds, which is why racing replicas stay consistent.

use futures::channel::mpsc::UnboundedReceiver;
use serde::Serialize;
use timely::progress::Antichain;

use super::core::CoreObserver;
use super::error::CellsError;
use super::observe::{OperatorSnapshot, UpsertCounters, UpsertEventKind, UpsertLog};
use super::operator::ShutdownButton;
use super::persist_source::FeedbackEvent;
use super::sink::{PersistSink, SinkSnapshot, SinkWrite};
use super::source::{SourceLog, SourceReader};
use super::worker::{UpsertWorker, UpsertWorkerConfig};
use crate::persist::codec::Timestamp;
use crate::runtime::Runtime;

#[path = "replica_manual.rs"]
mod manual;
pub use manual::Manual;

/// How one replica behaves.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaConfig {
    /// Its name (events carry `name#generation`).
    pub name: String,
    /// Source messages it reads per step: its speed.
    pub read_batch: usize,
    /// Milliseconds its driver waits between steps with nothing to write.
    pub tick_ms: u64,
    /// How long one compare_and_append may take before the driver stops waiting for it: a
    /// timeout can heal, so the driver backs off ([`crate::retry::Backoff`]) and offers the same
    /// range again (if the timed-out write landed, the retry loses with an `UpperMismatch` and
    /// the sink drops what it wrote, as it would for a peer).
    pub caa_timeout_ms: u64,
    /// Messages before the resume upper it re-reads on start (the operator drops them).
    pub replay: usize,
    /// Seeds its reader's shuffles.
    pub seed: u64,
    /// Allow partial emission.
    pub prevent_snapshot_buffering: bool,
    /// Source messages per operator activation, if bounded.
    pub snapshot_buffering_max: Option<usize>,
    /// The most `worker.step()`s per step.
    pub step_budget: u32,
}

impl ReplicaConfig {
    /// Defaults for a replica named `name`.
    pub fn new(name: &str, seed: u64) -> Self {
        ReplicaConfig {
            name: name.to_string(),
            read_batch: 4,
            tick_ms: 5,
            caa_timeout_ms: 2_000,
            replay: 2,
            seed,
            prevent_snapshot_buffering: true,
            snapshot_buffering_max: None,
            step_budget: 64,
        }
    }
}

/// What one [`Replica::step`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StepReport {
    /// Feedback updates moved into the operator.
    pub fed_back: u64,
    /// Source messages read.
    pub read: u64,
    /// `worker.step()`s taken.
    pub worker_steps: u32,
    /// Output updates handed to the sink.
    pub output: u64,
}

/// A replica as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplicaSnapshot {
    /// Its name.
    pub name: String,
    /// Which start this is (0 first).
    pub generation: u64,
    /// The shard's upper it started from.
    pub resume_upper: Option<Timestamp>,
    /// How far its source input has advanced.
    pub source_frontier: Timestamp,
    /// Source messages it has not read yet.
    pub source_unread: u64,
    /// The persist input's upper it has fed to the operator.
    pub persist_fed_upper: Option<Timestamp>,
    /// The operator's output frontier.
    pub output_frontier: Option<Timestamp>,
    /// The operator.
    pub operator: Option<OperatorSnapshot<Timestamp>>,
    /// The sink.
    pub sink: SinkSnapshot,
    /// Replica and operator counters, added.
    pub counters: UpsertCounters,
    /// Why it stopped, if it did.
    pub halted: Option<String>,
    /// `worker.step()`s taken so far.
    pub worker_steps: u64,
    /// Sink writes that timed out (each is retried after a back-off).
    pub sink_timeouts: u64,
    /// While the sink backs off after a timeout: what timed out and when it retries.
    pub retrying: Option<SinkRetry>,
    /// The latest output the operator handed to the sink (none yet: `None`).
    pub last_emitted: Option<Emitted>,
    /// Updates its persist source has read back from the shard that wait at the operator's
    /// persist input (a host that steps the replica by hand sees them between the read and the
    /// fold; a running replica feeds them at once).
    pub feedback_waiting: u64,
}

/// One hand-over of output updates to the sink, as signed rows: what the operator emitted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Emitted {
    /// Updates with a positive diff.
    pub adds: u64,
    /// Updates with a negative diff (retractions).
    pub retractions: u64,
    /// The first [`Emitted::SHOWN`] updates, each as `+1 (1, "banana") at t5`.
    pub shown: Vec<String>,
}

impl Emitted {
    /// How many updates are written out in `shown`.
    pub const SHOWN: usize = 4;

    fn of(out: &[super::worker::OutputUpdate]) -> Self {
        let shown = out
            .iter()
            .take(Self::SHOWN)
            .map(|(data, t, d)| match data {
                Ok(row) => format!("{d:+} {row} at t{t}"),
                Err(e) => format!("{d:+} error ({e}) at t{t}"),
            })
            .collect();
        Emitted {
            adds: out.iter().filter(|u| u.2 > 0).count() as u64,
            retractions: out.iter().filter(|u| u.2 < 0).count() as u64,
            shown,
        }
    }
}

/// A sink write that timed out and waits for its retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SinkRetry {
    /// The range's lower (the upper the sink expected).
    pub lower: Timestamp,
    /// How long the attempt ran.
    pub after_ms: u64,
    /// The back-off before the next attempt.
    pub retry_in_ms: u64,
    /// Timeouts in a row.
    pub attempts: u32,
}

/// See the module docs.
pub struct Replica {
    cfg: ReplicaConfig,
    generation: u64,
    resume_upper: Antichain<Timestamp>,
    worker: UpsertWorker,
    sink: PersistSink,
    reader: SourceReader,
    source_frontier: Timestamp,
    feedback: UnboundedReceiver<FeedbackEvent>,
    // Feedback received but not yet moved into the operator (over the feed budget).
    feedback_queue: std::collections::VecDeque<FeedbackEvent>,
    persist_fed: Antichain<Timestamp>,
    observer: CoreObserver<Timestamp>,
    counters: UpsertCounters,
    halted: Option<String>,
    sink_timeouts: u64,
    retrying: Option<SinkRetry>,
    last_emitted: Option<Emitted>,
    manual: Manual,
    _persist_source: Option<ShutdownButton>,
    step_clock: Option<StepClock>,
    step_stats: StepStats,
    feed_budget: usize,
}

/// A clock in milliseconds (fractional) used only to measure how long steps take, never to
/// decide anything: for example `performance.now()` in a browser.
pub type StepClock = Box<dyn Fn() -> f64>;

/// How long steps took, by the step clock (zero without one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct StepStats {
    /// Steps measured.
    pub steps: u64,
    /// The longest single step, ms.
    pub max_step_ms: f64,
    /// All steps, ms.
    pub total_step_ms: f64,
    /// The most source messages a single step read.
    pub max_read: u64,
}

impl Replica {
    /// A replica starting at the shard's `resume_upper`, fed by `feedback` (from
    /// [`super::persist_source::run_persist_source`], whose button it holds: dropping the replica
    /// stops its persist source).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: ReplicaConfig,
        generation: u64,
        resume_upper: Antichain<Timestamp>,
        source: &SourceLog,
        feedback: UnboundedReceiver<FeedbackEvent>,
        persist_source: Option<ShutdownButton>,
        log: UpsertLog<Timestamp>,
        clock: Option<Runtime>,
    ) -> Self {
        let who = format!("{}#{generation}", cfg.name);
        let observer = CoreObserver {
            who: who.clone(),
            log,
            clock,
        };
        let mut wcfg = UpsertWorkerConfig::new(&who, resume_upper.clone());
        wcfg.prevent_snapshot_buffering = cfg.prevent_snapshot_buffering;
        wcfg.snapshot_buffering_max = cfg.snapshot_buffering_max;
        wcfg.step_budget = cfg.step_budget;
        let worker = UpsertWorker::new(wcfg, observer.clone());
        let resume = resume_upper.elements().first().copied().unwrap_or(0);
        let reader = SourceReader::new(
            source,
            resume,
            cfg.replay,
            cfg.seed ^ generation.wrapping_mul(0x9e37_79b9),
        );
        let mut counters = UpsertCounters::default();
        if generation > 0 {
            counters.restarts = 1;
        }
        observer.log.record(|| super::observe::UpsertEvent {
            who: observer.who.clone(),
            at_ms: observer.clock.as_ref().map_or(0, |c| c.now_ms()),
            kind: UpsertEventKind::Started {
                resume_upper: resume_upper.elements().first().copied(),
                generation,
            },
        });
        Replica {
            sink: PersistSink::new(resume_upper.clone()),
            cfg,
            generation,
            resume_upper,
            worker,
            reader,
            source_frontier: 0,
            feedback,
            feedback_queue: Default::default(),
            persist_fed: Antichain::from_elem(0),
            observer,
            counters,
            halted: None,
            sink_timeouts: 0,
            retrying: None,
            last_emitted: None,
            manual: Manual::Auto,
            _persist_source: persist_source,
            step_clock: None,
            step_stats: StepStats::default(),
            feed_budget: usize::MAX,
        }
    }

    /// Moves at most `n` feedback updates into the operator per step (the rest wait for the
    /// next step, and the persist input's progress waits behind them), bounding one step's work.
    /// Unbounded by default.
    pub fn set_feed_budget(&mut self, n: usize) {
        self.feed_budget = n.max(1);
    }

    /// Measures every [`Replica::step`] with `clock`.
    pub fn set_step_clock(&mut self, clock: StepClock) {
        self.step_clock = Some(clock);
    }

    /// How long steps took so far.
    pub fn step_stats(&self) -> StepStats {
        self.step_stats
    }

    fn record(&self, kind: UpsertEventKind<Timestamp>) {
        self.observer.log.record(|| super::observe::UpsertEvent {
            who: self.observer.who.clone(),
            at_ms: self.observer.clock.as_ref().map_or(0, |c| c.now_ms()),
            kind,
        });
    }

    /// Its configuration.
    pub fn config(&self) -> &ReplicaConfig {
        &self.cfg
    }

    /// Why it stopped (an operator health error, a persist error), if it did.
    pub fn halted(&self) -> Option<String> {
        self.halted.clone().or_else(|| self.worker.halted())
    }

    /// Stops it with `reason` (it will do nothing more).
    pub fn halt(&mut self, reason: String) {
        if self.halted.is_none() {
            self.record(UpsertEventKind::Crashed {
                reason: reason.clone(),
            });
            self.halted = Some(reason);
        }
    }

    /// Moves the feedback that has arrived into the operator's persist input, at most the feed
    /// budget's worth of updates ([`Replica::set_feed_budget`]; progress stays behind the
    /// updates it follows).
    pub fn feed(&mut self) -> u64 {
        self.feed_below(None)
    }

    /// [`Replica::feed`], but a progress at or past `cap` (and all after it) stays queued.
    pub fn feed_below(&mut self, cap: Option<Timestamp>) -> u64 {
        while let Ok(event) = self.feedback.try_recv() {
            self.feedback_queue.push_back(event);
        }
        let mut moved = 0;
        let mut upper = None;
        let budget = self.feed_budget as u64;
        while let Some(mut event) = self.feedback_queue.pop_front() {
            let held = matches!(&event, FeedbackEvent::Progress(p)
                if cap.is_some_and(|c| p.elements().first().is_none_or(|t| *t >= c)));
            if moved >= budget || held {
                self.feedback_queue.push_front(event);
                break;
            }
            if let FeedbackEvent::Updates(updates) = &mut event {
                let room = (budget - moved) as usize;
                if updates.len() > room {
                    let rest = updates.split_off(room);
                    self.feedback_queue.push_front(FeedbackEvent::Updates(rest));
                }
            }
            match event {
                FeedbackEvent::Updates(updates) => {
                    moved += updates.len() as u64;
                    if let Err(e) = self.worker.send_persist(updates) {
                        self.halt(format!("persist source: {e}"));
                        return moved;
                    }
                }
                FeedbackEvent::Progress(p) => {
                    if let Some(&t) = p.elements().first() {
                        self.worker.advance_persist(t);
                    }
                    upper = Some(p.clone());
                    self.persist_fed = p;
                }
                FeedbackEvent::Error(e) => {
                    self.halt(format!("persist source: {e}"));
                    return moved;
                }
            }
        }
        if moved > 0 || upper.is_some() {
            self.counters.fed_back += moved;
            self.record(UpsertEventKind::FedBack {
                updates: moved,
                upper: upper.and_then(|u| u.elements().first().copied()),
            });
        }
        moved
    }

    /// Reads up to `read_batch` source messages into the operator and advances its source
    /// frontier as far as the reader allows.
    pub fn read_source(&mut self, source: &SourceLog) -> u64 {
        let (updates, frontier) = self.reader.read(source, self.cfg.read_batch);
        let n = updates.len() as u64;
        if let Err(e) = self.worker.send_source(updates) {
            self.halt(format!("source: {e}"));
            return n;
        }
        if frontier > self.source_frontier {
            self.source_frontier = frontier;
            self.worker.advance_source(frontier);
        }
        n
    }

    /// Steps the worker until it is quiet, then hands its output to the sink.
    pub fn step_worker(&mut self) -> (u32, u64) {
        let steps = self.worker.step(self.cfg.step_budget);
        (steps, self.collect())
    }

    /// One timely step, for a host that shows them one at a time: feed, read, exactly one
    /// `worker.step()`, collect. Does nothing once halted. (`worker_steps` is 1, or 0 when halted.)
    pub fn step_timely(&mut self, source: &SourceLog) -> StepReport {
        if self.halted().is_some() {
            return StepReport::default();
        }
        let fed_back = self.feed();
        let read = if self.halted.is_none() {
            self.read_source(source)
        } else {
            0
        };
        self.worker.step_once();
        let output = self.collect();
        StepReport {
            fed_back,
            read,
            worker_steps: 1,
            output,
        }
    }

    /// Hands the worker's output so far to the sink; returns how many updates.
    fn collect(&mut self) -> u64 {
        let out = self.worker.take_output();
        let n = out.len() as u64;
        if n > 0 {
            self.last_emitted = Some(Emitted::of(&out));
        }
        let dropped = self.sink.ingest(out, self.worker.output_frontier());
        self.counters.sink_dropped += dropped;
        n
    }

    /// One step: feed, read, step the worker, collect. Does nothing once halted.
    pub fn step(&mut self, source: &SourceLog) -> StepReport {
        if self.halted().is_some() {
            return StepReport::default();
        }
        let started = self.step_clock.as_ref().map(|c| c());
        let report = self.step_inner(source);
        if let (Some(clock), Some(started)) = (self.step_clock.as_ref(), started) {
            let ms = clock() - started;
            let s = &mut self.step_stats;
            s.steps += 1;
            s.total_step_ms += ms;
            s.max_step_ms = s.max_step_ms.max(ms);
            s.max_read = s.max_read.max(report.read);
        }
        report
    }

    fn step_inner(&mut self, source: &SourceLog) -> StepReport {
        let fed_back = self.feed();
        let read = if self.halted.is_none() {
            self.read_source(source)
        } else {
            0
        };
        let (worker_steps, output) = self.step_worker();
        StepReport {
            fed_back,
            read,
            worker_steps,
            output,
        }
    }

    /// The complete range the sink would write now, if any (none once halted).
    pub fn next_write(&mut self) -> Option<SinkWrite> {
        if self.halted().is_some() {
            return None;
        }
        self.sink.next_write()
    }

    /// `write` committed.
    pub fn write_committed(&mut self, write: &SinkWrite) {
        self.retrying = None;
        self.sink.committed(&write.upper);
        self.counters.sink_appends += 1;
        self.record(UpsertEventKind::SinkAppended {
            lower: write.lower.elements().first().copied().unwrap_or(0),
            upper: write.upper.elements().first().copied(),
            updates: write.updates.len() as u64,
        });
    }

    /// `write` lost: the shard's upper was `current`.
    pub fn write_mismatch(&mut self, write: &SinkWrite, current: &Antichain<Timestamp>) {
        self.retrying = None;
        let dropped = self.sink.mismatch(current);
        self.counters.sink_mismatches += 1;
        self.counters.sink_dropped += dropped;
        self.record(UpsertEventKind::SinkMismatch {
            expected: write.lower.elements().first().copied().unwrap_or(0),
            current: current.elements().first().copied(),
            dropped,
        });
    }

    /// `write` did not finish within `after_ms`: it may or may not have landed. The sink keeps
    /// the range and offers it again after `retry_in_ms` (the `attempts`-th timeout in a row).
    pub fn write_timed_out(
        &mut self,
        write: &SinkWrite,
        after_ms: u64,
        retry_in_ms: u64,
        attempts: u32,
    ) {
        let lower = write.lower.elements().first().copied().unwrap_or(0);
        self.sink_timeouts += 1;
        self.retrying = Some(SinkRetry {
            lower,
            after_ms,
            retry_in_ms,
            attempts,
        });
        self.record(UpsertEventKind::SinkTimedOut {
            lower,
            after_ms,
            retry_in_ms,
        });
    }

    /// How far the feedback fed into the operator reaches (its persist upper).
    pub fn persist_fed_upper(&self) -> Option<Timestamp> {
        self.persist_fed.elements().first().copied()
    }

    /// The shard's upper as the sink knows it.
    pub fn sink_upper(&self) -> Option<Timestamp> {
        self.sink.upper().elements().first().copied()
    }

    /// Checks that every state cell decodes (`None`: mid-timestamp, not checkable now).
    pub fn check_cells(&self) -> Result<Option<usize>, CellsError> {
        self.worker.check_cells()
    }

    /// Replica and operator counters, added.
    pub fn counters(&self) -> UpsertCounters {
        let mut c = self.worker.counters();
        c.add(&self.counters);
        c
    }

    /// As plain data.
    pub fn snapshot(&self, source: &SourceLog) -> ReplicaSnapshot {
        ReplicaSnapshot {
            name: self.cfg.name.clone(),
            generation: self.generation,
            resume_upper: self.resume_upper.elements().first().copied(),
            source_frontier: self.source_frontier,
            source_unread: self.reader.unread(source) as u64,
            persist_fed_upper: self.persist_fed.elements().first().copied(),
            output_frontier: self.worker.output_frontier().elements().first().copied(),
            operator: self.worker.snapshot(),
            sink: self.sink.snapshot(),
            counters: self.counters(),
            halted: self.halted(),
            worker_steps: self.worker.steps(),
            sink_timeouts: self.sink_timeouts,
            retrying: self.retrying.clone(),
            last_emitted: self.last_emitted.clone(),
            feedback_waiting: self
                .feedback_queue
                .iter()
                .map(|e| match e {
                    FeedbackEvent::Updates(u) => u.len() as u64,
                    _ => 0,
                })
                .sum(),
        }
    }
}
