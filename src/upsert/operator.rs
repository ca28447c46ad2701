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
use timely::progress::Antichain;

use super::core::{CoreObserver, UpsertCore};
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

/// Renders the operator. See the module docs and [`super::core`] for what it does.
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
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
) -> (
    VecCollection<'scope, T, Result<Row, DataflowError>, Diff>,
    StreamVec<'scope, T, (usize, HealthStatusUpdate)>,
    StreamVec<'scope, T, Infallible>,
    ShutdownButton,
)
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
    let (output, output_stream) =
        builder.new_output::<Vec<(Result<Row, DataflowError>, T, Diff)>>();
    let (_snapshot_output, snapshot_stream) = builder.new_output::<Vec<Infallible>>();
    let (health_output, health_stream) = builder.new_output::<Vec<(usize, HealthStatusUpdate)>>();
    let mut output = OutputBuilder::from(output);
    let mut health_output = OutputBuilder::from(health_output);

    // The source input is connected to the data output only; the persist input to nothing.
    let mut source = builder.new_input_connection(
        input.inner,
        Exchange::new(|((key, _, _), _, _): &((UpsertKey, _, _), T, Diff)| key.hashed()),
        [(0, Antichain::from_elem(Default::default()))],
    );
    let mut persist = builder.new_input_connection(
        persist_input.inner,
        Exchange::new(
            move |(value, _, _): &(Result<Row, DataflowError>, T, Diff)| {
                // Route a key's feedback where its source updates go (rows without their key
                // columns go anywhere: the core reports them).
                let value = match value {
                    Ok(row) => Ok(row),
                    Err(DataflowError::EnvelopeError(super::types::EnvelopeError::Upsert(e))) => {
                        Err(e)
                    }
                    Err(_) => return 0,
                };
                UpsertKey::from_value(value, &route_indices).map_or(0, |k| k.hashed())
            },
        ),
        std::iter::empty::<(
            usize,
            Antichain<<T as timely::progress::Timestamp>::Summary>,
        )>(),
    );

    let mut observer = upsert_metrics.observer.clone();
    if observer.who.is_empty() {
        observer.who = format!("{}/{}", source_config.id, source_config.worker_id);
    }
    let core = Rc::new(RefCell::new(UpsertCore::<T, FromTime, US>::new(
        state_fn(),
        key_indices,
        resume_upper,
        prevent_snapshot_buffering,
        observer,
    )));
    let inspect: Rc<RefCell<dyn InspectCore<T>>> = core.clone();
    *upsert_metrics.core.borrow_mut() = Some(inspect);

    let (button, token) = ShutdownButton::new();

    builder.build(move |caps| {
        let mut caps = caps.into_iter();
        // The initial data capability is dropped: capabilities come from stashed input.
        drop(caps.next());
        let mut snapshot_cap = CapabilitySet::from_elem(caps.next().expect("three outputs"));
        let mut health_cap = caps.next();
        let mut persist_token = persist_token;
        let mut stash_cap: Option<Capability<T>> = None;
        let mut pending: VecDeque<(Option<Capability<T>>, SourceMessage<T, FromTime>)> =
            VecDeque::new();
        let mut seen_input = Antichain::from_elem(T::minimum());
        let mut seen_persist = Antichain::from_elem(T::minimum());
        let mut started = false;
        let mut out: Vec<(UpsertValue, T, Diff)> = Vec::new();

        move |frontiers| {
            core.borrow_mut().note_activation();
            if token.is_pressed() {
                // Shut down: release everything, swallow whatever arrives.
                stash_cap = None;
                pending.clear();
                snapshot_cap.downgrade(&[] as &[T]);
                health_cap = None;
                drop(persist_token.take());
                source.for_each(|_, _| {});
                persist.for_each(|_, _| {});
                return;
            }
            let mut core = core.borrow_mut();

            // The persist input: data, then its frontier.
            let mut persist_data = Vec::new();
            persist.for_each(|_, data| persist_data.append(data));
            let pf = frontiers[1].frontier().to_owned();
            let progress = (pf != seen_persist).then(|| {
                seen_persist = pf.clone();
                pf
            });
            if !started || !persist_data.is_empty() || progress.is_some() {
                core.on_persist(persist_data, progress);
                if core.halted().is_some() {
                    // Let the persist source shut down.
                    drop(persist_token.take());
                    snapshot_cap.downgrade(&[] as &[T]);
                } else if core.hydrating() {
                    let _ = snapshot_cap.try_downgrade(core.persist_upper().iter());
                } else {
                    snapshot_cap.downgrade(&[] as &[T]);
                }
            }
            started = true;

            // The source input: data (at most `snapshot_buffering_max` messages), then progress.
            source.for_each(|cap, data| {
                pending.push_back((cap.retain_least(0), std::mem::take(data)))
            });
            let mut processed = 0usize;
            let mut deferred = false;
            while let Some((cap, mut data)) = pending.pop_front() {
                if snapshot_buffering_max.is_some_and(|max| processed >= max) {
                    pending.push_front((cap, data));
                    deferred = true;
                    break;
                }
                processed += 1;
                // A message under no capability carries no updates.
                let Some(cap) = cap else { continue };
                let time = cap.time().clone();
                if core.on_source_data(&time, &mut data) {
                    stash_cap = match stash_cap.take() {
                        Some(held) if held.time() <= cap.time() => Some(held),
                        _ => Some(cap),
                    };
                }
            }
            if deferred {
                activator.activate();
            } else {
                let f = frontiers[0].frontier().to_owned();
                if f != seen_input {
                    seen_input = f.clone();
                    core.on_source_progress(f);
                }
            }

            // Drain, emit under the stash cap, then downgrade or drop it.
            out.clear();
            let remaining = core.drain(&mut out);
            if !out.is_empty() {
                match stash_cap.as_ref() {
                    Some(cap) => {
                        let mut handle = output.activate();
                        let mut session = handle.session(cap);
                        for (value, ts, diff) in out.drain(..) {
                            session.give((value.map_err(DataflowError::from), ts, diff));
                        }
                    }
                    // Drains only emit what the stash held, under its capability.
                    None => core.fail("output without a stash capability".into()),
                }
            }
            if core.halted().is_none() {
                match remaining.min_time {
                    Some(t) => {
                        if let Some(cap) = stash_cap.as_mut() {
                            cap.downgrade(&t);
                        }
                    }
                    None => stash_cap = None,
                }
                if core.finished() {
                    stash_cap = None;
                    pending.clear();
                }
            }
            core.set_stash_cap(stash_cap.as_ref().map(|c| c.time().clone()));
            if let Some(error) = core.take_health_error() {
                if let Some(cap) = health_cap.as_ref() {
                    let mut handle = health_output.activate();
                    handle.session(cap).give((
                        0usize,
                        HealthStatusUpdate::Stalled {
                            error,
                            hint: None,
                            should_halt: true,
                        },
                    ));
                }
            }
            if upsert_config.shrink_upsert_unused_buffers_by_ratio > 0 {
                let ratio = upsert_config.shrink_upsert_unused_buffers_by_ratio;
                if out.capacity() > ratio * out.len().max(1) {
                    out.shrink_to(out.len());
                }
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
