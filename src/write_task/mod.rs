//! The differential write task: a background task that makes a shard's contents equal a
//! `desired` collection it keeps in memory, and keeps the shard's upper near "now".
//!
//! This is how the storage controller maintains its *differential* storage-managed collections
//! (introspection tables that mirror in-memory state). Whoever drives the task sends
//! [`StorageWriteOp`]s; each changes `desired` and the pending delta `to_write`, and the task
//! writes the delta with `compare_and_append`. Other writers may write the same shard (another
//! process after a restart, a stale leader): the task notices through an upper mismatch and
//! *re-syncs*, deriving `to_write = desired - snapshot` afresh, so its next successful write makes
//! the shard equal `desired` whatever the others did. Self-correction, not coordination.
//!
//! ```text
//!  commands ──► apply_write_op ──► desired, to_write ──► write_to_persist
//!                                                          │ compare_and_append(to_write @ current_upper,
//!                                                          │                    [current_upper, max(now, current_upper+1)))
//!                                       ┌── UpperMismatch ─┘
//!                                       ▼
//!                        sync_to_persist: adopt the shard's upper,
//!                        to_write = desired - snapshot(upper - 1)
//! ```
//!
//! The run loop ([`DifferentialWriteTask::spawn`]) prefers, in order: the shutdown signal, then
//! commands (every queued one is drained into a single write), then the upper tick.
//!
//! - **Writes** go at `current_upper`, the upper the task believes the shard has, with new upper
//!   `max(now, current_upper + 1)`. A write retries a bounded number of times with back-off
//!   ([`RetryPolicy`]); when they are spent its responders get [`WriteTaskError::InvalidUppers`]
//!   and `to_write` stays pending for a later write. Each attempt is bounded by
//!   [`WriteTaskConfig::attempt_timeout_ms`] (persist's handles retry storage errors for as long
//!   as they are awaited; the caller bounds them).
//! - **The upper tick** ([`WriteTaskConfig::upper_tick_interval_ms`]): with no commands, an empty
//!   batch moves the upper to now, so the collection stays readable at recent times. On a mismatch
//!   it re-syncs. *Improvement on the original:* where a re-sync left `to_write` pending, the tick
//!   writes it (right after the re-sync, and on later ticks) instead of an empty batch, so the
//!   shard converges back to `desired` without waiting for the next command; and after a re-sync
//!   the tick retries (as a write does) until the upper has moved. The original's tick stops at
//!   the re-sync, leaving the shard wrong until the next command and the upper a tick behind.
//! - **Read-only** (a new version waiting to take over, 0dt): `desired` and `to_write` are still
//!   maintained, but nothing is ever written and the upper never ticks; every command's responder
//!   gets [`WriteTaskError::ReadOnly`] (the original drops the responders).
//! - **Shutdown** (the shutdown sender sends, or is dropped): every queued command is answered
//!   with [`WriteTaskError::ShuttingDown`] and the task ends. It also ends when every command
//!   sender is gone, when the shard is finished (its upper is the empty frontier), or on an error
//!   the original would panic on (a persist usage error, a snapshot before the since), which it
//!   reports instead.
//! - **A broken shard** (persist answers a permanent error: state that does not decode, a blob
//!   that is gone, a store closed for good): never retried. The task ends at once, answering the
//!   write in flight and every queued command with [`WriteTaskError::ShardBroken`], which names
//!   what is broken, and writes nothing more (persist, too, refuses every later command on that
//!   shard in this process).
//! - **No responder is ever dropped unanswered**, even when the task is aborted by dropping its
//!   [`JoinHandle`]: the task's destructor answers [`WriteTaskError::Aborted`].
//!
//! Everything the task does is recorded as [`WriteTaskEvent`]s in a [`WriteTaskLog`].
//!
//! Invariant (the heart of it): *if the shard's upper is `current_upper`, then the shard's
//! contents at `current_upper - 1`, plus `to_write`, equal `desired`.* A commit makes
//! `to_write` empty and the shard equal to `desired`; a command changes `desired` and `to_write`
//! alike; a re-sync re-establishes it for a new upper. [`audit::audit_commits`] checks its
//! consequence against a shard's history.
//!
//! Memory: the task holds all of `desired` (the original's doc calls this clunky). See
//! `examples/write_task_bench.rs` for the measured cost and a leaner design.
//!
//! ```
//! use persist_playground::location::{Location, mem::{MemBlob, MemConsensus}};
//! use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
//! use persist_playground::persist::codec::{Datum, Row};
//! use persist_playground::runtime::sim::Simulator;
//! use persist_playground::write_task::*;
//! use std::rc::Rc;
//!
//! let sim = Simulator::new(1);
//! let location = Location { blob: Rc::new(MemBlob::new()), consensus: Rc::new(MemConsensus::new()) };
//! let client = PersistClient::new(location, sim.runtime(), PersistConfig::default(), 7);
//! let shard = ShardId::new("mz_example").unwrap();
//! let (c, s) = (client.clone(), shard.clone());
//! let write = sim.block_on(async move { c.open_writer::<Row, ()>(&s).await }).unwrap().unwrap();
//! let (c, s) = (client.clone(), shard.clone());
//! let read_handle_fn = move || -> ReadHandleFuture {
//!     let (c, s) = (c.clone(), s.clone());
//!     Box::pin(async move { c.open_leased_reader::<Row, ()>(&s).await })
//! };
//! let cfg = WriteTaskConfig::new(sim.runtime());
//! let log = cfg.log.clone();
//! let (tx, task, _shutdown) = DifferentialWriteTask::spawn(
//!     "mz_example", write, read_handle_fn, false, now_fn(&sim.runtime()),
//!     DifferentialIntrospectionConfig::default(), cfg,
//! ).unwrap();
//! let (resp_tx, resp_rx) = futures::channel::oneshot::channel();
//! let row = Row::new([Datum::String("hello".into())]);
//! tx.unbounded_send((StorageWriteOp::Append { updates: vec![(row, 1)] }, resp_tx)).unwrap();
//! let answer = sim.block_on(resp_rx).unwrap();
//! assert_eq!(answer, Ok(Ok(())));
//! assert!(log.events().iter().any(|e| matches!(e.kind, WriteTaskEventKind::Committed { updates: 1, .. })));
//! drop(task);
//! ```

use std::ops::ControlFlow::{self, Break, Continue};
use std::rc::Rc;

use futures::channel::{mpsc, oneshot};
use futures::future::{FutureExt, LocalBoxFuture};
use futures::StreamExt;
use timely::progress::Antichain;

use crate::location::PermanentError;
use crate::persist::codec::{Diff, Row, Timestamp};
use crate::persist::error::PersistError;
use crate::persist::read::ReadHandle;
use crate::persist::write::WriteHandle;
use crate::runtime::{Interval, JoinHandle, Runtime};

pub mod audit;
pub mod config;
pub mod error;
pub mod events;
pub mod ops;
mod sync;

pub use config::{DifferentialIntrospectionConfig, InitialDesired, RetryPolicy, WriteTaskConfig};
pub use error::WriteTaskError;

pub use events::{
    check_event_order, events_of, EventOrderError, SignedRows, WriteCause, WriteTaskEvent,
    WriteTaskEventKind, WriteTaskLog,
};
pub use ops::{apply_write_op, derive_to_write, fingerprint, DiffOverflow, StorageWriteOp};

/// Answers one command: `Ok` once its change is durable, or why not.
pub type Responder = oneshot::Sender<Result<(), WriteTaskError>>;
/// Sends commands to a task.
pub type CommandSender = mpsc::UnboundedSender<(StorageWriteOp, Responder)>;
type CommandReceiver = mpsc::UnboundedReceiver<(StorageWriteOp, Responder)>;
/// The task's clock: milliseconds, never decreasing. New uppers are `max(now, upper + 1)`.
pub type NowFn = Rc<dyn Fn() -> Timestamp>;
/// What a `read_handle_fn` returns: a fresh reader of the task's shard.
pub type ReadHandleFuture = LocalBoxFuture<'static, Result<ReadHandle<Row, ()>, PersistError>>;

/// The runtime's clock as a [`NowFn`].
pub fn now_fn(runtime: &Runtime) -> NowFn {
    let runtime = runtime.clone();
    Rc::new(move || runtime.now_ms())
}

fn opt(f: &Antichain<Timestamp>) -> Option<Timestamp> {
    f.as_option().copied()
}

/// Why the task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum EndReason {
    Shutdown,
    SendersDropped,
    ShardFinished,
    /// Persist answered a permanent error while the task was doing `during`: the shard (or its
    /// store) is broken for good, so the task writes nothing more.
    Broken {
        during: &'static str,
        error: PermanentError,
    },
    Failed(String),
}

impl EndReason {
    /// The end for a persist call that failed while the task was doing `during`.
    fn persist_failed(during: &'static str, error: PersistError) -> EndReason {
        match error {
            PersistError::Permanent(error) => EndReason::Broken { during, error },
            PersistError::InvalidUsage(usage) => {
                EndReason::Failed(format!("{during}: persist refused: {usage}"))
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            EndReason::Shutdown => "shut down".into(),
            EndReason::SendersDropped => "every command sender was dropped".into(),
            EndReason::ShardFinished => "the shard is finished (its upper is empty)".into(),
            EndReason::Broken { during, error } => {
                format!("{during}: the shard is broken for good: {error}")
            }
            EndReason::Failed(why) => why.clone(),
        }
    }
}

/// What woke the run loop.
enum Wake {
    Shutdown,
    Command(Option<(StorageWriteOp, Responder)>),
    Tick,
}

/// The outcome of one write attempt.
enum Attempt {
    Committed,
    Mismatch(Antichain<Timestamp>),
    TimedOut,
}

/// The task. See the module docs; [`DifferentialWriteTask::spawn`] is the way in.
pub struct DifferentialWriteTask<R>
where
    R: FnMut() -> ReadHandleFuture + 'static,
{
    /// The collection, in events and errors.
    id: String,
    write_handle: WriteHandle<Row, ()>,
    /// Opens a fresh reader for each re-sync.
    read_handle_fn: R,
    read_only: bool,
    now: NowFn,
    runtime: Runtime,
    upper_tick_interval_ms: u64,
    batch_duration_ms: u64,
    retry: RetryPolicy,
    attempt_timeout_ms: u64,
    log: WriteTaskLog,
    upper_tick_interval: Interval,
    cmd_rx: CommandReceiver,
    shutdown_rx: oneshot::Receiver<()>,
    /// What the shard should contain. Invariant: consolidated.
    desired: Vec<(Row, Diff)>,
    /// What the next write must add. Invariant: consolidated; and if the shard's upper is
    /// `current_upper`, the shard at `current_upper - 1` plus `to_write` equals `desired`.
    to_write: Vec<(Row, Diff)>,
    /// The upper the task believes the shard has. Starts at the minimum (so the first write or
    /// tick on a used shard mismatches and re-syncs). Invariant: never regresses, never empty
    /// (an empty upper ends the task), at most the shard's upper.
    current_upper: Antichain<Timestamp>,
    /// Responders of the write in flight. Whoever finishes the write answers them; if the task is
    /// aborted mid-write, `Drop` does.
    in_flight: Vec<Responder>,
    /// What a mismatch does besides adopting the shard's upper (see [`Resync`]).
    resync: Resync,
}

/// What the task does after an UpperMismatch, besides adopting the shard's upper. The task
/// itself always re-syncs ([`DifferentialWriteTask::spawn`]); the other choice exists only for
/// the playground's variant without the rule (`src/playground/variants/task.rs`), so that the
/// variant is this task with one step replaced, not a copy of its loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resync {
    /// `sync_to_persist`: re-derive `to_write = desired - snapshot(upper - 1)`.
    Snapshot,
    /// Keep `to_write` as it was and write it again at the new upper: the broken rule. The
    /// shard then holds what the other writer wrote plus the old diff, and the task's next
    /// `Committed` claims the shard equals `desired` when it does not.
    KeepToWrite,
}

impl<R> DifferentialWriteTask<R>
where
    R: FnMut() -> ReadHandleFuture + 'static,
{
    /// Spawns a task that keeps the shard of `write_handle` equal to the desired collection its
    /// commands build, on `cfg.runtime`. Returns the command sender, the task's handle (dropping
    /// it aborts the task) and the shutdown sender (sending on it, or dropping it, shuts the task
    /// down).
    ///
    /// `read_handle_fn` opens a fresh reader of the same shard for each re-sync; `now` gives the
    /// timestamps of new uppers; `introspection_config` says what `desired` starts as.
    #[allow(clippy::type_complexity)]
    pub fn spawn(
        id: impl Into<String>,
        write_handle: WriteHandle<Row, ()>,
        read_handle_fn: R,
        read_only: bool,
        now: NowFn,
        introspection_config: DifferentialIntrospectionConfig,
        cfg: WriteTaskConfig,
    ) -> Result<(CommandSender, JoinHandle<()>, oneshot::Sender<()>), WriteTaskError> {
        let task = (id, write_handle, read_handle_fn, read_only, now);
        Self::spawn_with_resync(task, introspection_config, cfg, Resync::Snapshot)
    }

    /// [`DifferentialWriteTask::spawn`] with the step after a mismatch chosen by `resync`
    /// (`task`: the id, the write handle, the reader opener, read-only, the clock).
    #[allow(clippy::type_complexity)]
    pub fn spawn_with_resync(
        (id, write_handle, read_handle_fn, read_only, now): (
            impl Into<String>,
            WriteHandle<Row, ()>,
            R,
            bool,
            NowFn,
        ),
        introspection_config: DifferentialIntrospectionConfig,
        cfg: WriteTaskConfig,
        resync: Resync,
    ) -> Result<(CommandSender, JoinHandle<()>, oneshot::Sender<()>), WriteTaskError> {
        let id = id.into();
        if id.is_empty() {
            return Err(WriteTaskError::InvalidConfig(
                "the collection id must not be empty".into(),
            ));
        }
        cfg.validate()?;
        let (cmd_tx, cmd_rx) = mpsc::unbounded();
        let (shutdown_tx, shutdown_rx) = oneshot::channel();
        let task = DifferentialWriteTask {
            id: id.clone(),
            write_handle,
            read_handle_fn,
            read_only,
            now,
            upper_tick_interval: cfg.runtime.interval(cfg.upper_tick_interval_ms),
            runtime: cfg.runtime.clone(),
            upper_tick_interval_ms: cfg.upper_tick_interval_ms,
            batch_duration_ms: cfg.batch_duration_ms,
            retry: cfg.retry,
            attempt_timeout_ms: cfg.attempt_timeout_ms,
            log: cfg.log,
            cmd_rx,
            shutdown_rx,
            desired: Vec::new(),
            to_write: Vec::new(),
            current_upper: Antichain::from_elem(Timestamp::MIN),
            in_flight: Vec::new(),
            resync,
        };
        let handle = cfg.runtime.spawn(&format!("write task {id}"), async move {
            task.run(introspection_config).await;
        });
        Ok((cmd_tx, handle, shutdown_tx))
    }

    fn record(&self, kind: impl FnOnce(&Self) -> WriteTaskEventKind) {
        self.log.record(|| WriteTaskEvent {
            task: self.id.clone(),
            at_ms: self.runtime.now_ms(),
            kind: kind(self),
        });
    }

    async fn run(mut self, introspection_config: DifferentialIntrospectionConfig) {
        self.record(|t| WriteTaskEventKind::Spawned {
            read_only: t.read_only,
            upper_tick_interval_ms: t.upper_tick_interval_ms,
        });
        // Read-only tasks skip prepare: they must not write, and seeding is for writers.
        if !self.read_only {
            if let Break(reason) = self.prepare(introspection_config).await {
                self.end(reason);
                return;
            }
        }
        let reason = loop {
            let step = match self.next_wake().await {
                Wake::Shutdown => {
                    self.handle_shutdown();
                    Break(EndReason::Shutdown)
                }
                Wake::Command(None) => Break(EndReason::SendersDropped),
                Wake::Command(Some(first)) => {
                    let batch = self.recv_all_commands(first);
                    self.handle_updates(batch).await
                }
                Wake::Tick => self.tick_upper().await,
            };
            if let Break(reason) = step {
                break reason;
            }
        };
        self.end(reason);
    }

    /// Waits for the next thing to do, preferring shutdown, then commands, then the tick.
    async fn next_wake(&mut self) -> Wake {
        let read_only = self.read_only;
        let interval = &mut self.upper_tick_interval;
        let tick = async move {
            if read_only {
                // Read-only never ticks.
                futures::future::pending::<()>().await;
            } else {
                interval.tick().await;
            }
        }
        .fuse();
        futures::pin_mut!(tick);
        let mut shutdown = &mut self.shutdown_rx;
        let commands = &mut self.cmd_rx;
        futures::select_biased! {
            // A send or a dropped sender alike mean shut down, as in the original.
            _ = shutdown => Wake::Shutdown,
            cmd = commands.next() => Wake::Command(cmd),
            () = tick => Wake::Tick,
        }
    }

    /// The first command plus every one already queued behind it.
    fn recv_all_commands(
        &mut self,
        first: (StorageWriteOp, Responder),
    ) -> Vec<(StorageWriteOp, Responder)> {
        let mut batch = vec![first];
        // Stops at an empty queue, or a closed one (noticed at the next wake).
        while let Ok(cmd) = self.cmd_rx.try_recv() {
            batch.push(cmd);
        }
        batch
    }

    /// Applies a batch of commands, then writes them all in one write.
    async fn handle_updates(
        &mut self,
        batch: Vec<(StorageWriteOp, Responder)>,
    ) -> ControlFlow<EndReason> {
        let start_ms = self.runtime.now_ms();
        for (op, responder) in batch {
            let kind = op.kind();
            match apply_write_op(&mut self.desired, &mut self.to_write, op) {
                Ok(applied) => {
                    self.record(|_| WriteTaskEventKind::CommandReceived {
                        op: kind.into(),
                        rows: applied.rows,
                        error: None,
                    });
                    self.in_flight.push(responder);
                }
                Err(e) => {
                    let error = WriteTaskError::InvalidCommand {
                        id: self.id.clone(),
                        message: e.to_string(),
                    };
                    self.record(|_| WriteTaskEventKind::CommandReceived {
                        op: kind.into(),
                        rows: 0,
                        error: Some(error.to_string()),
                    });
                    let _ = responder.send(Err(error));
                }
            }
        }
        if self.read_only {
            let responders = self.in_flight.len() as u64;
            self.answer_in_flight(|id| WriteTaskError::ReadOnly { id });
            self.record(|_| WriteTaskEventKind::ReadOnlyRejected { responders });
        } else if !self.in_flight.is_empty() {
            // The write moves the upper too: restart the tick's period.
            self.upper_tick_interval = self.runtime.interval(self.upper_tick_interval_ms);
            self.write_to_persist(WriteCause::Commands).await?;
        }
        self.runtime
            .sleep_until(start_ms.saturating_add(self.batch_duration_ms))
            .await;
        Continue(())
    }

    /// The upper tick: with nothing pending, move the upper to now with an empty batch; with
    /// `to_write` pending (a re-sync found the shard changed), write it.
    async fn tick_upper(&mut self) -> ControlFlow<EndReason> {
        debug_assert!(!self.read_only, "read-only tasks never tick");
        let now = (self.now)();
        let current = opt(&self.current_upper).unwrap_or(Timestamp::MAX);
        if self.to_write.is_empty() && now <= current {
            return Continue(());
        }
        self.record(|t| WriteTaskEventKind::Ticked {
            current_upper: opt(&t.current_upper),
            now_ms: now,
            pending: t.to_write.len() as u64,
        });
        if !self.to_write.is_empty() {
            // Improvement on the original: write what a re-sync left pending.
            return self.write_to_persist(WriteCause::TickPending).await;
        }
        match self.attempt_write(WriteCause::Tick, 1).await? {
            Attempt::Committed | Attempt::TimedOut => Continue(()),
            Attempt::Mismatch(current) => {
                self.sync_to_persist(current).await?;
                // Improvement on the original, which stops here: the tick goes on until it has
                // moved the upper to now, writing what the re-sync left pending (the shard differs
                // from desired) or, if nothing, an empty batch at the adopted upper. So the shard
                // converges at once, and the upper never lags a disturbance by two ticks.
                let cause = if self.to_write.is_empty() {
                    WriteCause::Tick
                } else {
                    WriteCause::TickPending
                };
                self.write_to_persist(cause).await
            }
        }
    }

    /// Closes the command channel and answers every queued command with an error.
    fn handle_shutdown(&mut self) {
        let answered = self.drain_queue(|id| WriteTaskError::ShuttingDown { id });
        self.record(|_| WriteTaskEventKind::ShutDown { answered });
    }

    fn drain_queue(&mut self, error: impl Fn(String) -> WriteTaskError) -> u64 {
        self.cmd_rx.close();
        let mut answered = 0;
        while let Ok((_, responder)) = self.cmd_rx.try_recv() {
            let _ = responder.send(Err(error(self.id.clone())));
            answered += 1;
        }
        answered
    }

    fn answer_in_flight(&mut self, error: impl Fn(String) -> WriteTaskError) {
        for responder in std::mem::take(&mut self.in_flight) {
            let _ = responder.send(Err(error(self.id.clone())));
        }
    }

    /// Answers everything still waiting, and records why the task ended.
    fn end(&mut self, reason: EndReason) {
        let error = |id: String| match &reason {
            EndReason::ShardFinished => WriteTaskError::ShardFinished { id },
            EndReason::Shutdown => WriteTaskError::ShuttingDown { id },
            EndReason::Broken { error, .. } => WriteTaskError::ShardBroken {
                id,
                error: error.clone(),
            },
            other => WriteTaskError::TaskEnded {
                id,
                reason: other.describe(),
            },
        };
        self.answer_in_flight(error);
        self.drain_queue(error);
        self.record(|_| WriteTaskEventKind::Ended {
            reason: reason.describe(),
        });
    }
}

impl<R> Drop for DifferentialWriteTask<R>
where
    R: FnMut() -> ReadHandleFuture + 'static,
{
    /// An aborted task still answers every responder: none ever sees its sender dropped.
    fn drop(&mut self) {
        self.answer_in_flight(|id| WriteTaskError::Aborted { id });
        self.drain_queue(|id| WriteTaskError::Aborted { id });
    }
}
