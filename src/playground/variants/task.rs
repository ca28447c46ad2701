//! A write task that does not re-sync after an UpperMismatch.
//!
//! [`DifferentialWriteTask`](crate::write_task::DifferentialWriteTask) answers a mismatch with
//! `sync_to_persist`: it reads the shard at the new upper and sets `to_write = desired -
//! snapshot`, so its next commit makes the shard equal `desired` whatever the other writer did.
//! This variant keeps everything else (commands into `desired` and `to_write` with the same
//! [`apply_write_op`], writes at `current_upper` up to `max(now, current_upper + 1)`, the upper
//! tick, bounded retries, the same [`WriteTaskEvent`]s into the same log) but on a mismatch it
//! only adopts the shard's upper and writes its old `to_write` again there, on top of what the
//! other writer wrote. Its `Committed` events still claim the shard equals `desired` (they carry
//! `desired`'s fingerprint): [`crate::write_task::audit::audit_commits`] shows they are wrong.

use futures::channel::{mpsc, oneshot};
use futures::{FutureExt, StreamExt};
use timely::progress::Antichain;

use crate::persist::codec::{Diff, Row, Timestamp};
use crate::persist::error::PersistError;
use crate::persist::write::WriteHandle;
use crate::runtime::{Interval, JoinHandle, Runtime};
use crate::write_task::ops::consolidate;
use crate::write_task::{
    apply_write_op, fingerprint, CommandSender, NowFn, ReadHandleFuture, Responder, RetryPolicy,
    StorageWriteOp, WriteCause, WriteTaskConfig, WriteTaskError, WriteTaskEvent,
    WriteTaskEventKind, WriteTaskLog,
};

/// The task's state. See the module docs.
struct NoResync<R> {
    id: String,
    write: WriteHandle<Row, ()>,
    read_handle_fn: R,
    read_only: bool,
    now: NowFn,
    runtime: Runtime,
    tick_ms: u64,
    retry: RetryPolicy,
    attempt_timeout_ms: u64,
    log: WriteTaskLog,
    desired: Vec<(Row, Diff)>,
    to_write: Vec<(Row, Diff)>,
    current_upper: Timestamp,
    in_flight: Vec<Responder>,
}

/// Spawns the variant on `cfg.runtime`, seeding `desired` from the shard (as the playground's
/// tasks do). Returns the command sender, the task (dropping it aborts it) and the shutdown
/// sender, like [`crate::write_task::DifferentialWriteTask::spawn`].
pub fn spawn<R>(
    id: &str,
    write: WriteHandle<Row, ()>,
    read_handle_fn: R,
    read_only: bool,
    now: NowFn,
    cfg: WriteTaskConfig,
) -> (CommandSender, JoinHandle<()>, oneshot::Sender<()>)
where
    R: FnMut() -> ReadHandleFuture + 'static,
{
    let (cmd_tx, cmd_rx) = mpsc::unbounded();
    let (shutdown_tx, shutdown_rx) = oneshot::channel();
    let task = NoResync {
        id: id.to_string(),
        write,
        read_handle_fn,
        read_only,
        now,
        runtime: cfg.runtime.clone(),
        tick_ms: cfg.upper_tick_interval_ms.max(1),
        retry: cfg.retry,
        attempt_timeout_ms: cfg.attempt_timeout_ms.max(1),
        log: cfg.log,
        desired: Vec::new(),
        to_write: Vec::new(),
        current_upper: 0,
        in_flight: Vec::new(),
    };
    let handle = cfg.runtime.spawn(
        &format!("write task {id} (no re-sync)"),
        task.run(cmd_rx, shutdown_rx),
    );
    (cmd_tx, handle, shutdown_tx)
}

type Commands = mpsc::UnboundedReceiver<(StorageWriteOp, Responder)>;

impl<R> NoResync<R>
where
    R: FnMut() -> ReadHandleFuture + 'static,
{
    fn record(&self, kind: WriteTaskEventKind) {
        self.log.record(|| WriteTaskEvent {
            task: self.id.clone(),
            at_ms: self.runtime.now_ms(),
            kind,
        });
    }

    async fn run(mut self, mut commands: Commands, mut shutdown: oneshot::Receiver<()>) {
        self.record(WriteTaskEventKind::Spawned {
            read_only: self.read_only,
            upper_tick_interval_ms: self.tick_ms,
        });
        let mut ended = if self.read_only {
            Ok(())
        } else {
            self.prepare().await
        };
        let mut tick: Interval = self.runtime.interval(self.tick_ms);
        while ended.is_ok() {
            let wake = {
                let ticked = async {
                    if self.read_only {
                        futures::future::pending::<()>().await;
                    }
                    tick.tick().await;
                }
                .fuse();
                futures::pin_mut!(ticked);
                futures::select_biased! {
                    _ = shutdown => None,
                    cmd = commands.next() => Some(cmd),
                    () = ticked => Some(None),
                }
            };
            ended = match wake {
                None => Err("shut down".to_string()),
                Some(Some(first)) => {
                    let mut batch = vec![first];
                    while let Ok(cmd) = commands.try_recv() {
                        batch.push(cmd);
                    }
                    self.commands(batch).await
                }
                Some(None) => self.tick().await,
            };
        }
        let reason = ended.err().unwrap_or_default();
        for responder in self.in_flight.drain(..) {
            let _ = responder.send(Err(WriteTaskError::TaskEnded {
                id: self.id.clone(),
                reason: reason.clone(),
            }));
        }
        self.record(WriteTaskEventKind::Ended { reason });
    }

    /// `desired` from the shard, at its upper; retried until it can be read.
    async fn prepare(&mut self) -> Result<(), String> {
        let mut backoff = self.retry.backoff();
        loop {
            let read = async {
                let upper = self.write.fetch_recent_upper().await?.clone();
                let upper = upper.as_option().copied();
                let mut snapshot = Vec::new();
                if let Some(as_of) = upper.and_then(|u| u.checked_sub(1)) {
                    let mut read = (self.read_handle_fn)().await?;
                    let fetched = read.snapshot_and_fetch(Antichain::from_elem(as_of)).await?;
                    snapshot = fetched.into_iter().map(|((r, ()), _, d)| (r, d)).collect();
                }
                Ok::<_, PersistError>((upper, snapshot))
            };
            match self.runtime.timeout(self.attempt_timeout_ms, read).await {
                Ok(Ok((None, _))) => return Err("the shard is finished".into()),
                Ok(Ok((Some(upper), mut snapshot))) => {
                    consolidate(&mut snapshot).map_err(|e| format!("prepare: {e}"))?;
                    self.record(WriteTaskEventKind::Prepared {
                        upper: Some(upper),
                        shard_rows: snapshot.len() as u64,
                        desired_rows: snapshot.len() as u64,
                        to_write_rows: 0,
                    });
                    self.desired = snapshot;
                    self.current_upper = upper;
                    return Ok(());
                }
                Ok(Err(e)) => return Err(format!("prepare: {e}")),
                Err(_elapsed) => {
                    backoff.wait(&self.runtime).await;
                }
            }
        }
    }

    async fn commands(&mut self, batch: Vec<(StorageWriteOp, Responder)>) -> Result<(), String> {
        for (op, responder) in batch {
            let kind = op.kind();
            let error = match apply_write_op(&mut self.desired, &mut self.to_write, op) {
                Ok(applied) => {
                    self.record(WriteTaskEventKind::CommandReceived {
                        op: kind.into(),
                        rows: applied.rows,
                        error: None,
                    });
                    self.in_flight.push(responder);
                    continue;
                }
                Err(e) => WriteTaskError::InvalidCommand {
                    id: self.id.clone(),
                    message: e.to_string(),
                },
            };
            self.record(WriteTaskEventKind::CommandReceived {
                op: kind.into(),
                rows: 0,
                error: Some(error.to_string()),
            });
            let _ = responder.send(Err(error));
        }
        if self.read_only {
            let responders = self.in_flight.len() as u64;
            for responder in self.in_flight.drain(..) {
                let _ = responder.send(Err(WriteTaskError::ReadOnly {
                    id: self.id.clone(),
                }));
            }
            self.record(WriteTaskEventKind::ReadOnlyRejected { responders });
            return Ok(());
        }
        self.write_to_persist(WriteCause::Commands).await
    }

    async fn tick(&mut self) -> Result<(), String> {
        let now = (self.now)();
        if self.to_write.is_empty() && now <= self.current_upper {
            return Ok(());
        }
        self.record(WriteTaskEventKind::Ticked {
            current_upper: Some(self.current_upper),
            now_ms: now,
            pending: self.to_write.len() as u64,
        });
        let cause = if self.to_write.is_empty() {
            WriteCause::Tick
        } else {
            WriteCause::TickPending
        };
        self.write_to_persist(cause).await
    }

    /// Writes `to_write` at `current_upper`, with bounded retries. THE BROKEN RULE: a mismatch
    /// adopts the shard's upper and keeps `to_write` as it was.
    async fn write_to_persist(&mut self, cause: WriteCause) -> Result<(), String> {
        let mut backoff = self.retry.backoff();
        for attempt in 1..=self.retry.max_tries.max(1) {
            let expected = self.current_upper;
            let new_upper = (self.now)().max(expected.saturating_add(1));
            let updates: Vec<((Row, ()), Timestamp, Diff)> = self
                .to_write
                .iter()
                .map(|(row, d)| ((row.clone(), ()), expected, *d))
                .collect();
            self.record(WriteTaskEventKind::WriteAttempted {
                cause,
                attempt,
                expected_upper: Some(expected),
                new_upper: Some(new_upper),
                updates: updates.len() as u64,
                responders: self.in_flight.len() as u64,
            });
            let (lower, upper) = (
                Antichain::from_elem(expected),
                Antichain::from_elem(new_upper),
            );
            let call = self.write.compare_and_append(&updates, lower, upper);
            match self.runtime.timeout(self.attempt_timeout_ms, call).await {
                Ok(Ok(Ok(()))) => {
                    self.current_upper = new_upper;
                    self.to_write.clear();
                    let responders = self.in_flight.len() as u64;
                    for responder in self.in_flight.drain(..) {
                        let _ = responder.send(Ok(()));
                    }
                    self.record(WriteTaskEventKind::Committed {
                        cause,
                        expected_upper: Some(expected),
                        new_upper: Some(new_upper),
                        updates: updates.len() as u64,
                        responders,
                        desired_rows: self.desired.len() as u64,
                        desired_fingerprint: fingerprint(&self.desired),
                    });
                    return Ok(());
                }
                Ok(Ok(Err(mismatch))) => {
                    let current = mismatch.current.as_option().copied();
                    self.record(WriteTaskEventKind::Mismatch {
                        expected_upper: Some(expected),
                        current_upper: current,
                    });
                    let Some(current) = current else {
                        return Err("the shard is finished".into());
                    };
                    // No sync_to_persist: the old diff goes again at the new upper.
                    self.current_upper = self.current_upper.max(current);
                }
                Ok(Err(e)) => return Err(format!("write: {e}")),
                Err(elapsed) => self.record(WriteTaskEventKind::AttemptTimedOut {
                    expected_upper: Some(expected),
                    after_ms: elapsed.after_ms,
                }),
            }
            backoff.wait(&self.runtime).await;
        }
        let responders = self.in_flight.len() as u64;
        for responder in self.in_flight.drain(..) {
            let _ = responder.send(Err(WriteTaskError::InvalidUppers {
                id: self.id.clone(),
                attempts: self.retry.max_tries,
                current_upper: Some(self.current_upper),
            }));
        }
        self.record(WriteTaskEventKind::GaveUp {
            attempts: self.retry.max_tries,
            responders,
        });
        Ok(())
    }
}
