//! [`UpsertWorker`]: one upsert operator in a bare, single-thread timely worker that the host
//! steps.
//!
//! The worker is made with `Worker::new(WorkerConfig::default(), Thread allocator, None)`: no
//! `Instant` (which panics on wasm32), never `timely::execute`. The host owns both inputs:
//! [`UpsertWorker::send_source`] / [`UpsertWorker::advance_source`] for the source, and
//! [`UpsertWorker::send_persist`] / [`UpsertWorker::advance_persist`] for the feedback, and
//! reads the output back (captured: updates plus the output frontier) with
//! [`UpsertWorker::take_output`]. Nothing happens until [`UpsertWorker::step`], which runs
//! `worker.step()` until the dataflow is quiet (or a step budget is spent): the host decides when
//! work happens, which is what lets the page step it and a test force an interleaving.
//!
//! Times are `u64` (the shards' time), FromTime is `u64` (an offset), the state is in memory.

use std::cell::RefCell;
use std::rc::Rc;

use timely::communication::allocator::thread::Thread;
use timely::communication::Allocator;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::capture::{Event, EventPusher};
use timely::dataflow::operators::core::input::Handle as InputHandle;
use timely::dataflow::operators::core::Input;
use timely::dataflow::operators::Capture;
use timely::progress::frontier::MutableAntichain;
use timely::progress::Antichain;
use timely::worker::Worker;
use timely::WorkerConfig;

use differential_dataflow::AsCollection;

use super::core::CoreObserver;
use super::error::{BeforeInputTime, CellsError};
use super::memory::InMemoryHashMap;
use super::observe::{OperatorSnapshot, UpsertCounters};
use super::operator::{upsert_inner, ShutdownButton, SourceConfig, UpsertConfig, UpsertMetrics};
use super::types::{DataflowError, HealthStatusUpdate, UpsertKey, UpsertValue};
use crate::persist::codec::{Diff, Row, Timestamp};

/// One source update: `((key, value or delete, from_time), time, diff)`.
pub type SourceUpdate = ((UpsertKey, Option<UpsertValue>, u64), Timestamp, Diff);
/// One output (or feedback) update.
pub type OutputUpdate = (Result<Row, DataflowError>, Timestamp, Diff);

type SourceHandle = InputHandle<Timestamp, CapacityContainerBuilder<Vec<SourceUpdate>>>;
type PersistHandle = InputHandle<Timestamp, CapacityContainerBuilder<Vec<OutputUpdate>>>;

/// What the capture of a stream saw: its updates and its frontier.
struct Captured<D> {
    data: Vec<D>,
    frontier: MutableAntichain<Timestamp>,
    events: u64,
}

struct CapturePusher<D>(Rc<RefCell<Captured<D>>>);

impl<D> EventPusher<Timestamp, Vec<D>> for CapturePusher<D> {
    fn push(&mut self, event: Event<Timestamp, Vec<D>>) {
        let mut c = self.0.borrow_mut();
        c.events += 1;
        match event {
            Event::Progress(changes) => {
                c.frontier.update_iter(changes);
            }
            Event::Messages(_, mut data) => c.data.append(&mut data),
        }
    }
}

fn captured<D>() -> Rc<RefCell<Captured<D>>> {
    let mut frontier = MutableAntichain::new();
    // A captured stream starts at the minimum; its progress events move it from there.
    let _ = frontier.update_iter([(0, 1)]);
    Rc::new(RefCell::new(Captured {
        data: Vec::new(),
        frontier,
        events: 0,
    }))
}

/// Settings of one operator instance.
#[derive(Debug, Clone)]
pub struct UpsertWorkerConfig {
    /// The name on its events.
    pub name: String,
    /// Where the key columns are in an output row.
    pub key_indices: Vec<usize>,
    /// The output shard's upper when it starts.
    pub resume_upper: Antichain<Timestamp>,
    /// Allow partial emission at the input frontier.
    pub prevent_snapshot_buffering: bool,
    /// At most this many source messages per activation.
    pub snapshot_buffering_max: Option<usize>,
    /// The most `worker.step()`s one [`UpsertWorker::step`] may take.
    pub step_budget: u32,
}

impl UpsertWorkerConfig {
    /// Defaults: key in column 0, partial emission on, no buffering limit.
    pub fn new(name: &str, resume_upper: Antichain<Timestamp>) -> Self {
        UpsertWorkerConfig {
            name: name.to_string(),
            key_indices: vec![0],
            resume_upper,
            prevent_snapshot_buffering: true,
            snapshot_buffering_max: None,
            step_budget: 64,
        }
    }
}

/// See the module docs.
pub struct UpsertWorker {
    worker: Worker,
    source: SourceHandle,
    persist: PersistHandle,
    output: Rc<RefCell<Captured<OutputUpdate>>>,
    health: Rc<RefCell<Captured<(usize, HealthStatusUpdate)>>>,
    snapshot_progress: Rc<RefCell<Captured<std::convert::Infallible>>>,
    metrics: UpsertMetrics<Timestamp>,
    shutdown: ShutdownButton,
    steps: u64,
}

impl UpsertWorker {
    /// Builds the worker and its dataflow: two inputs, the operator, two captures.
    pub fn new(cfg: UpsertWorkerConfig, observer: CoreObserver<Timestamp>) -> Self {
        let alloc = Allocator::Thread(Thread::default());
        let mut worker = Worker::new(WorkerConfig::default(), alloc, None);
        let metrics = UpsertMetrics::new(observer);
        let output = captured();
        let health = captured();
        let snapshot_progress = captured();
        let (m, o, h) = (metrics.clone(), Rc::clone(&output), Rc::clone(&health));
        let sp = Rc::clone(&snapshot_progress);
        let (source, persist, shutdown) = worker.dataflow::<Timestamp, _, _>(move |scope| {
            let (source, source_stream) = scope.new_input::<Vec<SourceUpdate>>();
            let (persist, persist_stream) = scope.new_input::<Vec<OutputUpdate>>();
            let (out, health_stream, snapshot_stream, shutdown) = upsert_inner(
                source_stream.as_collection(),
                cfg.key_indices.clone(),
                cfg.resume_upper.clone(),
                persist_stream.as_collection(),
                None,
                m,
                SourceConfig {
                    id: cfg.name.clone(),
                    worker_id: 0,
                },
                InMemoryHashMap::<Timestamp, Option<u64>>::default,
                UpsertConfig::default(),
                cfg.prevent_snapshot_buffering,
                cfg.snapshot_buffering_max,
            );
            out.inner.capture_into(CapturePusher(o));
            health_stream.capture_into(CapturePusher(h));
            snapshot_stream.capture_into(CapturePusher(sp));
            (source, persist, shutdown)
        });
        UpsertWorker {
            worker,
            source,
            persist,
            output,
            health,
            snapshot_progress,
            metrics,
            shutdown,
            steps: 0,
        }
    }

    /// The source input's time: updates must be at or beyond it.
    pub fn source_time(&self) -> Timestamp {
        *self.source.time()
    }

    /// The persist input's time.
    pub fn persist_time(&self) -> Timestamp {
        *self.persist.time()
    }

    /// Sends source updates under the input's current time. An update before it is an error.
    pub fn send_source(&mut self, updates: Vec<SourceUpdate>) -> Result<(), BeforeInputTime> {
        let now = self.source_time();
        if let Some((_, t, _)) = updates.iter().find(|(_, t, _)| *t < now) {
            return Err(BeforeInputTime {
                input: "source",
                time: *t,
                now,
            });
        }
        let mut batch = updates;
        self.source.send_batch(&mut batch);
        Ok(())
    }

    /// Moves the source input's frontier to `upper` (it never goes back).
    pub fn advance_source(&mut self, upper: Timestamp) {
        if upper > self.source_time() {
            self.source.advance_to(upper);
        }
        self.source.flush();
    }

    /// Sends feedback updates under the persist input's current time.
    pub fn send_persist(&mut self, updates: Vec<OutputUpdate>) -> Result<(), BeforeInputTime> {
        let now = self.persist_time();
        if let Some((_, t, _)) = updates.iter().find(|(_, t, _)| *t < now) {
            return Err(BeforeInputTime {
                input: "feedback",
                time: *t,
                now,
            });
        }
        let mut batch = updates;
        self.persist.send_batch(&mut batch);
        Ok(())
    }

    /// Moves the persist input's frontier to `upper`.
    pub fn advance_persist(&mut self, upper: Timestamp) {
        if upper > self.persist_time() {
            self.persist.advance_to(upper);
        }
        self.persist.flush();
    }

    fn signature(&self) -> (u64, u64, u64) {
        let acts = self
            .metrics
            .inspect(|c| {
                c.counters().source_staged + c.counters().persist_ingested + c.stash_len() as u64
            })
            .unwrap_or(0);
        (
            self.output.borrow().events,
            self.health.borrow().events,
            acts,
        )
    }

    /// Steps the worker until two steps in a row change nothing it can see (or the budget is
    /// spent). Returns how many `worker.step()`s it took.
    pub fn step(&mut self, budget: u32) -> u32 {
        self.source.flush();
        self.persist.flush();
        let mut taken = 0;
        let mut quiet = 0;
        while taken < budget.max(3) && quiet < 3 {
            let before = self.signature();
            self.worker.step();
            taken += 1;
            quiet = if self.signature() == before {
                quiet + 1
            } else {
                0
            };
        }
        self.steps += u64::from(taken);
        taken
    }

    /// Exactly one `worker.step()` (after flushing both inputs), for a host that shows a step at a
    /// time. Returns whether it changed anything the worker can see.
    pub fn step_once(&mut self) -> bool {
        self.source.flush();
        self.persist.flush();
        let before = self.signature();
        self.worker.step();
        self.steps += 1;
        self.signature() != before
    }

    /// Presses the operator's shutdown button: it releases its capabilities and ignores every
    /// input from then on (as when the button is dropped).
    pub fn shutdown(&mut self) {
        self.shutdown.press();
    }

    /// Total `worker.step()`s so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Removes and returns the output updates captured so far.
    pub fn take_output(&mut self) -> Vec<OutputUpdate> {
        std::mem::take(&mut self.output.borrow_mut().data)
    }

    /// The output's frontier: every output update before it has been captured.
    pub fn output_frontier(&self) -> Antichain<Timestamp> {
        self.output.borrow().frontier.frontier().to_owned()
    }

    /// The snapshot-progress stream's frontier: the persist upper while rehydrating, then empty.
    pub fn snapshot_frontier(&self) -> Antichain<Timestamp> {
        self.snapshot_progress
            .borrow()
            .frontier
            .frontier()
            .to_owned()
    }

    /// Health updates reported so far.
    pub fn health(&self) -> Vec<(usize, HealthStatusUpdate)> {
        self.health.borrow().data.clone()
    }

    /// The operator's counters.
    pub fn counters(&self) -> UpsertCounters {
        self.metrics.inspect(|c| c.counters()).unwrap_or_default()
    }

    /// The operator's insides.
    pub fn snapshot(&self) -> Option<OperatorSnapshot<Timestamp>> {
        self.metrics.inspect(|c| c.snapshot())
    }

    /// Checks every state cell decodes; the number of cells (`None` while the persist input is
    /// mid-timestamp, when cells need not decode).
    pub fn check_cells(&self) -> Result<Option<usize>, CellsError> {
        self.metrics
            .inspect(|c| c.check_cells())
            .unwrap_or(Err(CellsError::OperatorGone))
    }

    /// The error the operator stopped on, if any.
    pub fn halted(&self) -> Option<String> {
        self.metrics.inspect(|c| c.halted()).flatten()
    }

    /// Entries in the operator's stash.
    pub fn stash_len(&self) -> usize {
        self.metrics.inspect(|c| c.stash_len()).unwrap_or(0)
    }
}
