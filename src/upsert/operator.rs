//! [`upsert_inner`]: the upsert operator with continual feedback, as a timely operator.
//!
//! It has two inputs and three outputs:
//! - the **source input** of upserts `(key, Option<value>, from_time)` (diff +1), connected to
//!   the data output: an output time can only be as early as a stashed source time;
//! - the **persist input**, the operator's own output read back from its shard, *disconnected*:
//!   it holds no capability on the output (the loop closes through the shard, not through a
//!   timely cycle);
//! - the **data output**, `Result<Row, DataflowError>`; a **health** stream that carries a
//!   `Stalled` update when the operator stops on an error; a **snapshot progress** stream whose
//!   frontier follows the persist upper until rehydration ends, then is empty.
//!
//! The operator drops its initial output capability. It holds a capability only while its stash
//! is non-empty, at the stash's least time ("stash cap"), and emits every drained update under
//! it. All decisions are [`UpsertCore`]'s (see [`super::core`]); this file is the translation
//! between timely and the core.
//!
//! `snapshot_buffering_max` bounds how many source messages one activation processes; the rest
//! wait (with their capabilities) for the next activation, which the operator requests itself.
//!
//! Differences from the original, by design: the state function is synchronous (no RocksDB
//! here); an error stops the operator with a health update instead of a panic; the host reaches
//! the operator's insides through [`UpsertMetrics::inspect`] for snapshots.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt::Debug;
use std::rc::Rc;

use differential_dataflow::{AsCollection, VecCollection};
use serde::Serialize;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::{Capability, CapabilitySet};
use timely::dataflow::StreamVec;
use timely::order::TotalOrder;
use timely::progress::frontier::MutableAntichain;
use timely::progress::Antichain;

use super::core::{CoreObserver, StashFrontier, UpsertCore};
use super::error::CellsError;
use super::observe::{OperatorSnapshot, UpsertCounters};
use super::state::UpsertStateBackend;
use super::types::{DataflowError, HealthStatusUpdate, UpsertKey, UpsertValue};
use crate::persist::codec::{Diff, Row};

/// Pressing it (or dropping it) tells whoever holds the matching [`ShutdownToken`] to stop.
#[derive(Debug)]
pub struct ShutdownButton {
    pressed: Rc<Cell<bool>>,
}

/// The other side of a [`ShutdownButton`].
#[derive(Debug, Clone)]
pub struct ShutdownToken {
    pressed: Rc<Cell<bool>>,
}

impl ShutdownButton {
    /// A new button and its token.
    pub fn new() -> (ShutdownButton, ShutdownToken) {
        let pressed = Rc::new(Cell::new(false));
        (
            ShutdownButton {
                pressed: Rc::clone(&pressed),
            },
            ShutdownToken { pressed },
        )
    }

    /// Presses it now.
    pub fn press(&self) {
        self.pressed.set(true);
    }
}

impl Drop for ShutdownButton {
    fn drop(&mut self) {
        self.pressed.set(true);
    }
}

impl ShutdownToken {
    /// Whether the button was pressed (or dropped).
    pub fn is_pressed(&self) -> bool {
        self.pressed.get()
    }
}

/// What a host may ask of a running operator's core.
pub trait InspectCore<T> {
    /// The operator's insides as plain data.
    fn snapshot(&self) -> OperatorSnapshot<T>;
    /// Its counters.
    fn counters(&self) -> UpsertCounters;
    /// Checks that every state cell decodes; the number of cells, or `None` while the persist
    /// input is mid-timestamp (cells may then hold part of a time's updates).
    fn check_cells(&self) -> Result<Option<usize>, CellsError>;
    /// Entries in the stash.
    fn stash_len(&self) -> usize;
    /// The error it stopped on, if any.
    fn halted(&self) -> Option<String>;
    /// Whether it is rehydrating.
    fn hydrating(&self) -> bool;
    /// How many times the operator has run.
    fn activations(&self) -> u64;
}

impl<T, F, S> InspectCore<T> for UpsertCore<T, F, S>
where
    T: timely::progress::Timestamp + TotalOrder + Serialize,
    F: Ord + Clone + Debug,
    S: UpsertStateBackend<T, Option<F>>,
{
    fn snapshot(&self) -> OperatorSnapshot<T> {
        UpsertCore::snapshot(self)
    }
    fn counters(&self) -> UpsertCounters {
        UpsertCore::counters(self)
    }
    fn check_cells(&self) -> Result<Option<usize>, CellsError> {
        if self.mid_timestamp() {
            return Ok(None);
        }
        Ok(Some(self.state().check_cells()?))
    }
    fn stash_len(&self) -> usize {
        UpsertCore::stash_len(self)
    }
    fn halted(&self) -> Option<String> {
        UpsertCore::halted(self).map(str::to_string)
    }
    fn hydrating(&self) -> bool {
        UpsertCore::hydrating(self)
    }
    fn activations(&self) -> u64 {
        UpsertCore::activations(self)
    }
}

/// Where a built operator leaves a handle to its core.
type CoreSlot<T> = Rc<RefCell<Option<Rc<RefCell<dyn InspectCore<T>>>>>>;

/// The operator's observability: where its events go, and (once built) a handle to its core.
#[derive(Clone)]
pub struct UpsertMetrics<T> {
    /// Events and their stamp.
    pub observer: CoreObserver<T>,
    core: CoreSlot<T>,
}

impl<T> UpsertMetrics<T> {
    /// Metrics reporting through `observer`.
    pub fn new(observer: CoreObserver<T>) -> Self {
        UpsertMetrics {
            observer,
            core: Rc::new(RefCell::new(None)),
        }
    }

    /// Runs `f` on the operator's core, once the operator is built (and while the dataflow
    /// lives). Must not be called from inside the operator (the core is borrowed there).
    pub fn inspect<R>(&self, f: impl FnOnce(&dyn InspectCore<T>) -> R) -> Option<R> {
        let slot = self.core.borrow();
        let core = slot.as_ref()?;
        let core = core.try_borrow().ok()?;
        Some(f(&*core))
    }
}

/// Names the operator instance (for events).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceConfig {
    /// The source (and shard) this operator feeds.
    pub id: String,
    /// The worker it runs on.
    pub worker_id: usize,
}

/// Tuning knobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpsertConfig {
    /// When non-zero, scratch buffers whose capacity exceeds this many times their use are
    /// shrunk after a drain.
    pub shrink_upsert_unused_buffers_by_ratio: usize,
}

type SourceMessage<T, F> = Vec<((UpsertKey, Option<UpsertValue>, F), T, Diff)>;

/// A source message not processed yet, with its capability.
type Pending<T, F> = (Option<Capability<T>>, SourceMessage<T, F>);

/// What [`upsert_inner`] returns: the data output, the health stream, the snapshot progress
/// stream (see the module docs) and the button that shuts the operator down.
pub type UpsertOutputs<'scope, T> = (
    VecCollection<'scope, T, Result<Row, DataflowError>, Diff>,
    StreamVec<'scope, T, (usize, HealthStatusUpdate)>,
    StreamVec<'scope, T, Infallible>,
    ShutdownButton,
);

/// Renders the operator. See the module docs and [`super::core`] for what it does.
#[allow(clippy::too_many_arguments)]
pub fn upsert_inner<'scope, T, FromTime, SF, US>(
    input: VecCollection<'scope, T, (UpsertKey, Option<UpsertValue>, FromTime), Diff>,
    key_indices: Vec<usize>,
    resume_upper: Antichain<T>,
    persist_input: VecCollection<'scope, T, Result<Row, DataflowError>, Diff>,
    persist_token: Option<Vec<ShutdownButton>>,
    upsert_metrics: UpsertMetrics<T>,
    source_config: SourceConfig,
    state_fn: SF,
    upsert_config: UpsertConfig,
    prevent_snapshot_buffering: bool,
    snapshot_buffering_max: Option<usize>,
) -> UpsertOutputs<'scope, T>
where
    T: timely::progress::Timestamp + TotalOrder + Serialize,
    FromTime: timely::ExchangeData + Ord + Clone + Debug,
    SF: FnOnce() -> US,
    US: UpsertStateBackend<T, Option<FromTime>> + 'static,
{
    let scope = input.inner.scope();
    let route_indices = key_indices.clone();
    let mut builder = OperatorBuilder::new(format!("Upsert({})", source_config.id), scope);
    let info = builder.operator_info();
    let activator = scope.activator_for(Rc::clone(&info.address));

    // Outputs first: inputs are connected to the outputs that exist when they are added.
    let (output, output_stream) = builder.new_output::<Vec<Feedback<T>>>();
    let (_snapshot_output, snapshot_stream) = builder.new_output::<Vec<Infallible>>();
    let (health_output, health_stream) = builder.new_output::<Vec<(usize, HealthStatusUpdate)>>();
    let mut output = OutputBuilder::from(output);
    let mut health_output = OutputBuilder::from(health_output);

    // The source input is connected to the data output only; the persist input to nothing.
    // Both inputs route a key to one worker: the source by its key, the feedback by the key
    // columns of the row.
    let mut source = builder.new_input_connection(
        input.inner,
        Exchange::new(source_route::<T, FromTime>),
        [(0, Antichain::from_elem(Default::default()))],
    );
    let mut persist = builder.new_input_connection(
        persist_input.inner,
        Exchange::new(move |update: &Feedback<T>| feedback_route(&update.0, &route_indices)),
        no_connection::<T>(),
    );

    let core = new_core(
        &upsert_metrics,
        &source_config,
        state_fn(),
        key_indices,
        resume_upper,
        prevent_snapshot_buffering,
    );

    let (button, token) = ShutdownButton::new();

    builder.build(move |caps| {
        let mut st = OperatorState::<T, FromTime>::new(caps, persist_token);

        move |frontiers| {
            core.borrow_mut().note_activation();
            if token.is_pressed() {
                // Shut down: release everything, swallow whatever arrives.
                st.shut_down();
                source.for_each(|_, _| {});
                persist.for_each(|_, _| {});
                return;
            }
            let mut core = core.borrow_mut();
            let mut persist_data = Vec::new();
            persist.for_each(|_, data| persist_data.append(data));
            source.for_each(|cap, data| {
                st.pending
                    .push_back((cap.retain_least(0), std::mem::take(data)))
            });
            let again = st.step(
                &mut core,
                persist_data,
                frontiers,
                (snapshot_buffering_max, upsert_config),
                |cap, out| output.activate().session(cap).give_iterator(as_output(out)),
                |cap, error| health_output.activate().session(cap).give(stalled(error)),
            );
            if again {
                activator.activate();
            }
        }
    });

    (
        output_stream.as_collection(),
        health_stream,
        snapshot_stream,
        button,
    )
}

/// The operator's core, named for its events, reachable through `upsert_metrics`.
fn new_core<T, F, US>(
    upsert_metrics: &UpsertMetrics<T>,
    source_config: &SourceConfig,
    state: US,
    key_indices: Vec<usize>,
    resume_upper: Antichain<T>,
    prevent_snapshot_buffering: bool,
) -> Rc<RefCell<UpsertCore<T, F, US>>>
where
    T: timely::progress::Timestamp + TotalOrder + Serialize,
    F: Ord + Clone + Debug + 'static,
    US: UpsertStateBackend<T, Option<F>> + 'static,
{
    let mut observer = upsert_metrics.observer.clone();
    if observer.who.is_empty() {
        observer.who = format!("{}/{}", source_config.id, source_config.worker_id);
    }
    let core = Rc::new(RefCell::new(UpsertCore::<T, F, US>::new(
        state,
        key_indices,
        resume_upper,
        prevent_snapshot_buffering,
        observer,
    )));
    let inspect: Rc<RefCell<dyn InspectCore<T>>> = core.clone();
    *upsert_metrics.core.borrow_mut() = Some(inspect);
    core
}

/// The connection of an input to no output (the persist input: the loop closes through the
/// shard, not through a timely cycle).
fn no_connection<T: timely::progress::Timestamp>() -> std::iter::Empty<(
    usize,
    Antichain<<T as timely::progress::Timestamp>::Summary>,
)> {
    std::iter::empty()
}

/// The health update of an operator that stopped on `error`.
fn stalled(error: String) -> (usize, HealthStatusUpdate) {
    let update = HealthStatusUpdate::Stalled {
        error,
        hint: None,
        should_halt: true,
    };
    (0, update)
}

/// An update of the data output, and (read back from the shard) of the persist input.
type Feedback<T> = (Result<Row, DataflowError>, T, Diff);

/// Where a source update goes: the worker its key hashes to.
fn source_route<T, F>(((key, _, _), _, _): &((UpsertKey, Option<UpsertValue>, F), T, Diff)) -> u64 {
    key.hashed()
}

/// Drains a core's output into the data output's shape (an upsert error is a dataflow error).
fn as_output<T>(
    out: &mut Vec<(UpsertValue, T, Diff)>,
) -> impl Iterator<Item = (Result<Row, DataflowError>, T, Diff)> + '_ {
    out.drain(..)
        .map(|(v, t, d)| (v.map_err(DataflowError::from), t, d))
}

/// Where a key's feedback goes: the worker its source updates go to (rows without their key
/// columns go anywhere: the core reports them).
fn feedback_route(value: &Result<Row, DataflowError>, route_indices: &[usize]) -> u64 {
    let value = match value {
        Ok(row) => Ok(row),
        Err(DataflowError::EnvelopeError(super::types::EnvelopeError::Upsert(e))) => Err(e),
        Err(_) => return 0,
    };
    UpsertKey::from_value(value, route_indices).map_or(0, |k| k.hashed())
}

/// What the operator keeps between activations besides its core: its capabilities (snapshot
/// progress, health, and the stash cap at the stash's least time), the source messages it has
/// not processed yet, and the input frontiers it has seen.
struct OperatorState<T: timely::progress::Timestamp, F> {
    snapshot_cap: CapabilitySet<T>,
    health_cap: Option<Capability<T>>,
    persist_token: Option<Vec<ShutdownButton>>,
    stash_cap: Option<Capability<T>>,
    pending: VecDeque<Pending<T, F>>,
    seen_input: Antichain<T>,
    seen_persist: Antichain<T>,
    started: bool,
    out: Vec<(UpsertValue, T, Diff)>,
}

impl<T, F> OperatorState<T, F>
where
    T: timely::progress::Timestamp + TotalOrder,
    F: Ord + Clone + Debug,
{
    /// The state at the first activation, from the operator's initial capabilities (data,
    /// snapshot progress, health). The data capability is dropped: capabilities come from
    /// stashed input.
    fn new(caps: Vec<Capability<T>>, persist_token: Option<Vec<ShutdownButton>>) -> Self {
        let mut caps = caps.into_iter();
        drop(caps.next());
        OperatorState {
            snapshot_cap: CapabilitySet::from_elem(caps.next().expect("three outputs")),
            health_cap: caps.next(),
            persist_token,
            stash_cap: None,
            pending: VecDeque::new(),
            seen_input: Antichain::from_elem(T::minimum()),
            seen_persist: Antichain::from_elem(T::minimum()),
            started: false,
            out: Vec::new(),
        }
    }

    /// One activation after the inputs were read (`persist_data`, and the source's messages
    /// into `pending`): feedback into the core, then the source (its progress only once every
    /// pending message is in), a drain emitted under the stash cap (`emit`), a health update on
    /// an error (`health`). `frontiers` are the source's and the persist input's. Whether the
    /// operator must activate again (messages were deferred).
    fn step<US: UpsertStateBackend<T, Option<F>>>(
        &mut self,
        core: &mut UpsertCore<T, F, US>,
        persist_data: Vec<(Result<Row, DataflowError>, T, Diff)>,
        frontiers: &[MutableAntichain<T>],
        (max, config): (Option<usize>, UpsertConfig),
        emit: impl FnOnce(&Capability<T>, &mut Vec<(UpsertValue, T, Diff)>),
        health: impl FnOnce(&Capability<T>, String),
    ) -> bool {
        // Inputs in the order they were added: the source, then the persist input.
        let source_frontier = frontiers[0].frontier().to_owned();
        let persist_frontier = frontiers[1].frontier().to_owned();
        self.feed_persist(core, persist_data, persist_frontier);
        let deferred = self.feed_source(core, max);
        if !deferred {
            self.source_progress(core, source_frontier);
        }
        self.out.clear();
        let remaining = core.drain(&mut self.out);
        if !self.out.is_empty() {
            match self.stash_cap.as_ref() {
                Some(cap) => emit(cap, &mut self.out),
                // Drains only emit what the stash held, under its capability.
                None => core.fail("output without a stash capability".into()),
            }
        }
        self.after_drain(core, remaining);
        if let Some(error) = core.take_health_error() {
            if let Some(cap) = self.health_cap.as_ref() {
                health(cap, error);
            }
        }
        self.shrink(config.shrink_upsert_unused_buffers_by_ratio);
        deferred
    }

    /// Releases every capability and the persist source, and forgets pending messages.
    fn shut_down(&mut self) {
        self.stash_cap = None;
        self.pending.clear();
        self.snapshot_cap.downgrade(&[] as &[T]);
        self.health_cap = None;
        drop(self.persist_token.take());
    }

    /// The persist input's data and (if it moved) frontier into the core. The snapshot progress
    /// follows the persist upper while the core rehydrates, and is empty after (or on a halt,
    /// which also lets the persist source shut down).
    fn feed_persist<US: UpsertStateBackend<T, Option<F>>>(
        &mut self,
        core: &mut UpsertCore<T, F, US>,
        data: Vec<(Result<Row, DataflowError>, T, Diff)>,
        frontier: Antichain<T>,
    ) {
        let progress = (frontier != self.seen_persist).then(|| {
            self.seen_persist = frontier.clone();
            frontier
        });
        if !self.started || !data.is_empty() || progress.is_some() {
            core.on_persist(data, progress);
            if core.halted().is_some() {
                drop(self.persist_token.take());
                self.snapshot_cap.downgrade(&[] as &[T]);
            } else if core.hydrating() {
                let _ = self.snapshot_cap.try_downgrade(core.persist_upper().iter());
            } else {
                self.snapshot_cap.downgrade(&[] as &[T]);
            }
        }
        self.started = true;
    }

    /// Pending source messages into the core, at most `max` of them; the stash cap becomes the
    /// least capability of a message the core stashed. Whether some were deferred.
    fn feed_source<US: UpsertStateBackend<T, Option<F>>>(
        &mut self,
        core: &mut UpsertCore<T, F, US>,
        max: Option<usize>,
    ) -> bool {
        let mut processed = 0usize;
        while let Some((cap, mut data)) = self.pending.pop_front() {
            if max.is_some_and(|max| processed >= max) {
                self.pending.push_front((cap, data));
                return true;
            }
            processed += 1;
            // A message under no capability carries no updates.
            let Some(cap) = cap else { continue };
            let time = cap.time().clone();
            if core.on_source_data(&time, &mut data) {
                self.stash_cap = match self.stash_cap.take() {
                    Some(held) if held.time() <= cap.time() => Some(held),
                    _ => Some(cap),
                };
            }
        }
        false
    }

    /// The source frontier, if it moved, into the core.
    fn source_progress<US: UpsertStateBackend<T, Option<F>>>(
        &mut self,
        core: &mut UpsertCore<T, F, US>,
        frontier: Antichain<T>,
    ) {
        if frontier != self.seen_input {
            self.seen_input = frontier.clone();
            core.on_source_progress(frontier);
        }
    }

    /// Shrinks the output buffer when its capacity exceeds `ratio` times its use (0: never).
    fn shrink(&mut self, ratio: usize) {
        if ratio > 0 && self.out.capacity() > ratio * self.out.len().max(1) {
            self.out.shrink_to(self.out.len());
        }
    }

    /// After a drain: the stash cap goes down to the stash's least time, or away with the
    /// stash (and everything goes once the core is finished).
    fn after_drain<US: UpsertStateBackend<T, Option<F>>>(
        &mut self,
        core: &mut UpsertCore<T, F, US>,
        remaining: StashFrontier<T>,
    ) {
        if core.halted().is_none() {
            match remaining.min_time {
                Some(t) => {
                    if let Some(cap) = self.stash_cap.as_mut() {
                        cap.downgrade(&t);
                    }
                }
                None => self.stash_cap = None,
            }
            if core.finished() {
                self.stash_cap = None;
                self.pending.clear();
            }
        }
        core.set_stash_cap(self.stash_cap.as_ref().map(|c| c.time().clone()));
    }
}
