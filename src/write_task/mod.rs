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
use serde::{Deserialize, Serialize};
use timely::progress::Antichain;

use crate::persist::codec::{Diff, Row, Timestamp};
use crate::persist::error::{InvalidUsage, PersistError};
use crate::persist::read::ReadHandle;
use crate::persist::write::WriteHandle;
use crate::runtime::{Interval, JoinHandle, Runtime};

pub mod audit;
pub mod events;
pub mod ops;

pub use events::{check_event_order, WriteCause, WriteTaskEvent, WriteTaskEventKind, WriteTaskLog};
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

/// Why a command was not (known to be) made durable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[non_exhaustive]
pub enum WriteTaskError {
    /// The task is read-only: `desired` took the change, but nothing is written.
    #[error(
        "collection {id} is read-only: the change is kept in its desired state but not written"
    )]
    ReadOnly {
        /// The collection.
        id: String,
    },
    /// The task is shutting down (the original's `IdentifierInvalid`): the change was not applied.
    #[error("collection {id} is shutting down: the change was not applied")]
    ShuttingDown {
        /// The collection.
        id: String,
    },
    /// The write's retries were spent on upper mismatches or timeouts. The change is in
    /// `desired` and a later write (a command or the upper tick) will carry it.
    #[error("collection {id}: not durable after {attempts} attempts (last known upper {current_upper:?}); the change stays in the desired state for a later write")]
    InvalidUppers {
        /// The collection.
        id: String,
        /// Attempts made.
        attempts: u32,
        /// The shard's upper as last seen.
        current_upper: Option<Timestamp>,
    },
    /// The shard is finished (its upper is the empty frontier): nothing more can be written.
    #[error("collection {id}: the shard is finished; nothing more can be written")]
    ShardFinished {
        /// The collection.
        id: String,
    },
    /// The task ended for another reason before the change was durable.
    #[error("collection {id}: the write task ended ({reason}); the change was not written")]
    TaskEnded {
        /// The collection.
        id: String,
        /// Why it ended.
        reason: String,
    },
    /// The task was aborted (its handle dropped) before the change was known durable.
    #[error("collection {id}: the write task was aborted; the change may or may not be durable")]
    Aborted {
        /// The collection.
        id: String,
    },
    /// The command itself is invalid (a diff overflow); nothing changed.
    #[error("collection {id}: command rejected: {message}")]
    InvalidCommand {
        /// The collection.
        id: String,
        /// What was wrong.
        message: String,
    },
    /// [`DifferentialWriteTask::spawn`] was given a bad configuration.
    #[error("invalid write task configuration: {0}")]
    InvalidConfig(String),
}

/// How a write retries (the original: 1 s initial back-off, factor 1.25, clamp 3 s, 20 tries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// The back-off before the second attempt.
    pub initial_backoff_ms: u64,
    /// Each back-off is the previous one times this, in percent.
    pub factor_percent: u64,
    /// The longest back-off.
    pub clamp_backoff_ms: u64,
    /// Attempts per write, at least 1.
    pub max_tries: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial_backoff_ms: 1_000,
            factor_percent: 125,
            clamp_backoff_ms: 3_000,
            max_tries: 20,
        }
    }
}

/// Knobs and the environment of a task.
#[derive(Clone)]
pub struct WriteTaskConfig {
    /// Timers and spawning.
    pub runtime: Runtime,
    /// The upper tick's period (the original: 1 s).
    pub upper_tick_interval_ms: u64,
    /// After a write for commands, the task waits until this long after it started, so that
    /// commands arriving meanwhile batch into one write (the original's
    /// `STORAGE_MANAGED_COLLECTIONS_BATCH_DURATION_DEFAULT`).
    pub batch_duration_ms: u64,
    /// Retries of one write.
    pub retry: RetryPolicy,
    /// The bound on one attempt (a `compare_and_append`, or the snapshot of a re-sync).
    pub attempt_timeout_ms: u64,
    /// Where events go. Several tasks may share one log.
    pub log: WriteTaskLog,
}

impl WriteTaskConfig {
    /// The original's settings on `runtime`, with a new, enabled log.
    pub fn new(runtime: Runtime) -> Self {
        WriteTaskConfig {
            runtime,
            upper_tick_interval_ms: 1_000,
            batch_duration_ms: 1_000,
            retry: RetryPolicy::default(),
            attempt_timeout_ms: 30_000,
            log: WriteTaskLog::new(),
        }
    }

    fn validate(&self) -> Result<(), WriteTaskError> {
        let bad = |m: &str| Err(WriteTaskError::InvalidConfig(m.to_string()));
        if self.upper_tick_interval_ms == 0 {
            return bad("upper_tick_interval_ms must be at least 1");
        }
        if self.attempt_timeout_ms == 0 {
            return bad("attempt_timeout_ms must be at least 1");
        }
        if self.retry.max_tries == 0 {
            return bad("retry.max_tries must be at least 1");
        }
        if self.retry.factor_percent < 100 {
            return bad("retry.factor_percent must be at least 100 (back-off never shrinks)");
        }
        Ok(())
    }
}

/// What `desired` starts as, before the task writes (the original's per-introspection-type
/// `prepare`).
#[derive(Default)]
pub enum InitialDesired {
    /// Empty: the first write retracts whatever the shard holds, and the driver sends the full
    /// desired state as commands (most differential introspection collections).
    #[default]
    Empty,
    /// The shard's current contents, consolidated, keeping the rows `retain` accepts (collections
    /// whose state carries over a restart, like the original's statistics, which seed their
    /// scrapers from the shard). Rows not kept are retracted by the first write.
    FromShard {
        /// Which rows to keep.
        retain: Box<dyn Fn(&Row) -> bool>,
    },
}

/// What `prepare` does before the first write (never in read-only mode).
#[derive(Default)]
pub struct DifferentialIntrospectionConfig {
    /// The initial `desired`.
    pub initial_desired: InitialDesired,
}

/// Why the task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum EndReason {
    Shutdown,
    SendersDropped,
    ShardFinished,
    Failed(String),
}

impl EndReason {
    fn describe(&self) -> String {
        match self {
            EndReason::Shutdown => "shut down".into(),
            EndReason::SendersDropped => "every command sender was dropped".into(),
            EndReason::ShardFinished => "the shard is finished (its upper is empty)".into(),
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

    /// `prepare`: seeds `desired` from the shard when asked to. Retries until it can read the
    /// shard (starting without it would retract what the shard holds), watching for shutdown.
    async fn prepare(
        &mut self,
        introspection_config: DifferentialIntrospectionConfig,
    ) -> ControlFlow<EndReason> {
        let retain = match introspection_config.initial_desired {
            InitialDesired::Empty => return Continue(()),
            InitialDesired::FromShard { retain } => retain,
        };
        let mut backoff_ms = self.retry.initial_backoff_ms;
        loop {
            let (write_handle, read_handle_fn) = (&mut self.write_handle, &mut self.read_handle_fn);
            let read = self.runtime.timeout(self.attempt_timeout_ms, async move {
                let upper = write_handle.fetch_recent_upper().await?.clone();
                let Some(upper_ts) = opt(&upper) else {
                    return Ok(None);
                };
                let snapshot = read_snapshot(read_handle_fn, upper_ts).await?;
                Ok::<_, PersistError>(Some((upper, snapshot)))
            });
            match read.await {
                Ok(Ok(None)) => return Break(EndReason::ShardFinished),
                Ok(Ok(Some((upper, snapshot)))) => {
                    let shard_rows = snapshot.len() as u64;
                    let desired: Vec<(Row, Diff)> = snapshot
                        .iter()
                        .filter(|(r, _)| retain(r))
                        .cloned()
                        .collect();
                    let to_write = match derive_to_write(&desired, &snapshot) {
                        Ok(w) => w,
                        Err(e) => return Break(EndReason::Failed(format!("prepare: {e}"))),
                    };
                    self.desired = desired;
                    self.to_write = to_write;
                    self.current_upper = upper;
                    self.record(|t| WriteTaskEventKind::Prepared {
                        upper: opt(&t.current_upper),
                        shard_rows,
                        desired_rows: t.desired.len() as u64,
                        to_write_rows: t.to_write.len() as u64,
                    });
                    return Continue(());
                }
                Ok(Err(e)) => {
                    return Break(EndReason::Failed(format!(
                        "prepare could not read the shard: {e}"
                    )))
                }
                Err(_elapsed) => {}
            }
            // A send or a dropped sender both mean shut down.
            if !matches!(self.shutdown_rx.try_recv(), Ok(None)) {
                self.handle_shutdown();
                return Break(EndReason::Shutdown);
            }
            self.runtime.sleep(backoff_ms).await;
            backoff_ms = self.next_backoff(backoff_ms);
        }
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

    /// Writes `to_write` for the responders in flight, re-syncing on mismatches, with bounded
    /// retries. When they are spent, the responders get an error and `to_write` stays pending.
    async fn write_to_persist(&mut self, cause: WriteCause) -> ControlFlow<EndReason> {
        debug_assert!(!self.read_only, "read-only tasks never write");
        let mut backoff_ms = self.retry.initial_backoff_ms;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mismatch = match self.attempt_write(cause, attempt).await? {
                Attempt::Committed => return Continue(()),
                Attempt::Mismatch(current) => Some(current),
                Attempt::TimedOut => None,
            };
            if attempt >= self.retry.max_tries {
                let responders = self.in_flight.len() as u64;
                let current_upper = opt(&self.current_upper);
                self.answer_in_flight(|id| WriteTaskError::InvalidUppers {
                    id,
                    attempts: attempt,
                    current_upper,
                });
                self.record(|_| WriteTaskEventKind::GaveUp {
                    attempts: attempt,
                    responders,
                });
                return Continue(());
            }
            if let Some(current) = mismatch {
                self.sync_to_persist(current).await?;
            }
            self.runtime.sleep(backoff_ms).await;
            backoff_ms = self.next_backoff(backoff_ms);
        }
    }

    fn next_backoff(&self, backoff_ms: u64) -> u64 {
        (backoff_ms.saturating_mul(self.retry.factor_percent) / 100)
            .max(backoff_ms)
            .min(
                self.retry
                    .clamp_backoff_ms
                    .max(self.retry.initial_backoff_ms),
            )
    }

    /// One `compare_and_append` of `to_write` at `current_upper`, up to
    /// `max(now, current_upper + 1)`. A commit answers the responders in flight.
    async fn attempt_write(
        &mut self,
        cause: WriteCause,
        attempt: u32,
    ) -> ControlFlow<EndReason, Attempt> {
        let Some(&expected) = self.current_upper.as_option() else {
            return Break(EndReason::ShardFinished);
        };
        let Some(next) = expected.checked_add(1) else {
            return Break(EndReason::Failed(
                "the shard's upper reached the last timestamp".into(),
            ));
        };
        let new_upper = (self.now)().max(next);
        // Every update goes at `expected`, the lower of the batch.
        let updates: Vec<((Row, ()), Timestamp, Diff)> = self
            .to_write
            .iter()
            .map(|(row, diff)| ((row.clone(), ()), expected, *diff))
            .collect();
        self.record(|t| WriteTaskEventKind::WriteAttempted {
            cause,
            attempt,
            expected_upper: Some(expected),
            new_upper: Some(new_upper),
            updates: updates.len() as u64,
            responders: t.in_flight.len() as u64,
        });
        let result = self
            .runtime
            .timeout(
                self.attempt_timeout_ms,
                self.write_handle.compare_and_append(
                    &updates,
                    Antichain::from_elem(expected),
                    Antichain::from_elem(new_upper),
                ),
            )
            .await;
        drop(updates);
        match result {
            Ok(Ok(Ok(()))) => {
                self.current_upper = Antichain::from_elem(new_upper);
                let updates = self.to_write.len() as u64;
                self.to_write.clear();
                let responders = self.in_flight.len() as u64;
                for responder in self.in_flight.drain(..) {
                    let _ = responder.send(Ok(()));
                }
                self.record(|t| WriteTaskEventKind::Committed {
                    cause,
                    expected_upper: Some(expected),
                    new_upper: Some(new_upper),
                    updates,
                    responders,
                    desired_rows: t.desired.len() as u64,
                    desired_fingerprint: fingerprint(&t.desired),
                });
                Continue(Attempt::Committed)
            }
            Ok(Ok(Err(mismatch))) => {
                self.record(|_| WriteTaskEventKind::Mismatch {
                    expected_upper: Some(expected),
                    current_upper: opt(&mismatch.current),
                });
                if mismatch.current.is_empty() {
                    return Break(EndReason::ShardFinished);
                }
                Continue(Attempt::Mismatch(mismatch.current))
            }
            Ok(Err(usage)) => Break(EndReason::Failed(format!(
                "persist refused the write: {usage}"
            ))),
            Err(elapsed) => {
                self.record(|_| WriteTaskEventKind::AttemptTimedOut {
                    expected_upper: Some(expected),
                    after_ms: elapsed.after_ms,
                });
                Continue(Attempt::TimedOut)
            }
        }
    }

    /// `sync_to_persist`: adopts the shard's upper `upper` and re-derives
    /// `to_write = desired - snapshot(upper - 1)`. If the snapshot cannot be read in time, the
    /// task keeps its old upper, so the next attempt mismatches and re-syncs again.
    async fn sync_to_persist(&mut self, upper: Antichain<Timestamp>) -> ControlFlow<EndReason> {
        let Some(&upper_ts) = upper.as_option() else {
            return Break(EndReason::ShardFinished);
        };
        let read = self.runtime.timeout(
            self.attempt_timeout_ms,
            read_snapshot(&mut self.read_handle_fn, upper_ts),
        );
        let snapshot = match read.await {
            Ok(Ok(snapshot)) => snapshot,
            Ok(Err(e)) => {
                // The original panics here (a since violation, say); we end the task and say why.
                return Break(EndReason::Failed(format!(
                    "re-sync could not read the shard: {e}"
                )));
            }
            Err(elapsed) => {
                self.record(|_| WriteTaskEventKind::ResyncFailed {
                    reason: elapsed.to_string(),
                });
                return Continue(());
            }
        };
        let to_write = match derive_to_write(&self.desired, &snapshot) {
            Ok(w) => w,
            Err(e) => return Break(EndReason::Failed(format!("re-sync: {e}"))),
        };
        debug_assert!(
            timely::PartialOrder::less_equal(&self.current_upper, &upper),
            "current_upper never regresses"
        );
        self.current_upper = upper;
        self.to_write = to_write;
        let snapshot_rows = snapshot.len() as u64;
        self.record(|t| WriteTaskEventKind::Resynced {
            upper: Some(upper_ts),
            as_of: upper_ts.checked_sub(1),
            snapshot_rows,
            desired_rows: t.desired.len() as u64,
            to_write_rows: t.to_write.len() as u64,
        });
        Continue(())
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

/// The shard's contents at `upper - 1`, consolidated, through a fresh reader (which expires in
/// the background when dropped, as the original's does). Nothing can be there below time 0.
async fn read_snapshot<R>(
    read_handle_fn: &mut R,
    upper: Timestamp,
) -> Result<Vec<(Row, Diff)>, PersistError>
where
    R: FnMut() -> ReadHandleFuture,
{
    let Some(as_of) = upper.checked_sub(1) else {
        return Ok(Vec::new());
    };
    let mut read = read_handle_fn().await?;
    let fetched = read.snapshot_and_fetch(Antichain::from_elem(as_of)).await?;
    drop(read);
    let mut snapshot: Vec<(Row, Diff)> = fetched
        .into_iter()
        .map(|((row, ()), _, diff)| (row, diff))
        .collect();
    // Persist consolidates already; this is cheap on sorted input and guards the invariant.
    ops::consolidate(&mut snapshot)
        .map_err(|e| PersistError::from(InvalidUsage::Corrupted(format!("snapshot: {e}"))))?;
    Ok(snapshot)
}
