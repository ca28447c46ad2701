//! A write task's actor: a differential write task on its own shard, fed by the page's
//! [`TaskOp`]s, each answered into the log.
//!
//! A write task's panel data comes from its own event log: the scenario's pump reads each event
//! ([`apply_task_event`]) into the task's [`TaskView`], so the view shows exactly what the task
//! reported, in order; [`task_record`] is the event's line in the merged log and its [`Fact`].

use std::collections::VecDeque;
use std::rc::Rc;

use futures::channel::{mpsc, oneshot};
use futures::future::LocalBoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};

use crate::persist::codec::{Datum, Row};
use crate::playground::actor::{
    ActorCtx, ActorDetail, ActorView, InFlight, LastAttempt, LostRace, Resync, TaskView, WriterView,
};
use crate::playground::command::{TaskOp, TaskSpec};
use crate::playground::fact::{mask, Fact};
use crate::playground::log::{fmt_frontier, plural, Outcome};
use crate::playground::variants;
use crate::runtime::JoinHandle;
use crate::write_task::{
    now_fn, CommandSender, DifferentialIntrospectionConfig, DifferentialWriteTask, InitialDesired,
    ReadHandleFuture, RetryPolicy, SignedRows, StorageWriteOp, WriteTaskConfig, WriteTaskError,
    WriteTaskEvent, WriteTaskEventKind, WriteTaskLog,
};

/// Reads one write-task event into the task's view. Returns the event's outcome for the log.
pub fn apply_task_event(view: &mut ActorView, e: &WriteTaskEvent) -> Outcome {
    let ActorDetail::Task(t) = &mut view.detail else {
        return Outcome::Info;
    };
    let w = &mut t.writer;
    use WriteTaskEventKind as K;
    match &e.kind {
        K::Spawned {
            read_only,
            upper_tick_interval_ms,
        } => {
            t.read_only = *read_only;
            t.tick_interval_ms = *upper_tick_interval_ms;
            Outcome::Info
        }
        K::Prepared {
            desired_rows,
            to_write_rows,
            ..
        } => {
            t.desired_rows = *desired_rows;
            w.pending = *to_write_rows;
            // What `prepare` does not keep in desired, it retracts.
            t.to_write = SignedRows::retracting(*to_write_rows);
            Outcome::Info
        }
        K::CommandReceived { error, .. } => {
            error.as_ref().map_or(Outcome::Info, |_| Outcome::Error)
        }
        K::ReadOnlyRejected { responders } => {
            t.refused += *responders;
            Outcome::Error
        }
        K::Ticked { pending, .. } => {
            w.pending = *pending;
            Outcome::Info
        }
        K::WriteAttempted {
            expected_upper,
            new_upper,
            updates,
            rows,
            ..
        } => {
            t.to_write = rows.clone();
            w.in_flight = Some(started(*expected_upper, *new_upper, *updates, e.at_ms));
            Outcome::Info
        }
        K::Committed {
            expected_upper,
            new_upper,
            updates,
            desired_rows,
            ..
        } => {
            t.desired_rows = *desired_rows;
            t.last_written = Some(std::mem::take(&mut t.to_write));
            on_committed(w, e, (*expected_upper, *new_upper, *updates))
        }
        K::Mismatch {
            expected_upper,
            current_upper,
        } => on_lost(w, e, *expected_upper, *current_upper),
        K::Resynced {
            upper,
            desired_rows,
            to_write_rows,
            snapshot_rows,
            to_write,
            ..
        } => {
            on_resynced(
                t,
                Resync {
                    at_ms: e.at_ms,
                    upper: *upper,
                    shard_rows: *snapshot_rows,
                    desired_rows: *desired_rows,
                    to_write_rows: *to_write_rows,
                    to_write: to_write.clone(),
                },
            );
            Outcome::Info
        }
        K::ResyncFailed { .. } => Outcome::Retrying,
        K::AttemptTimedOut { expected_upper, .. } => {
            w.indeterminate += 1;
            let detail = "the attempt timed out: it may or may not have committed";
            let attempt = (*expected_upper, None, 0);
            finish(w, e, Outcome::Indeterminate, attempt, detail.into())
        }
        K::GaveUp { .. } => {
            t.refused += 1;
            Outcome::Error
        }
        K::ShutDown { .. } | K::Ended { .. } => Outcome::Info,
    }
}

/// The write in flight from `since_ms`: `updates` over `[lower, upper)`.
fn started(lower: Option<u64>, upper: Option<u64>, updates: u64, since_ms: u64) -> InFlight {
    InFlight {
        lower,
        upper,
        updates,
        since_ms,
        retrying: false,
        timeouts: 0,
    }
}

/// A committed write of `updates` over `(lower, upper)` on the task's writer side: the shard
/// equals desired, nothing is pending, and the task's upper is `upper`.
fn on_committed(
    w: &mut WriterView,
    e: &WriteTaskEvent,
    (lower, upper, updates): (Option<u64>, Option<u64>, u64),
) -> Outcome {
    w.committed += 1;
    w.acked_updates += updates;
    w.pending = 0;
    w.cached_upper = upper;
    w.shared_upper = upper;
    let detail = format!(
        "{}, upper now {}",
        plural(updates, "update"),
        fmt_frontier(upper)
    );
    finish(w, e, Outcome::Committed, (lower, upper, updates), detail)
}

/// A write that lost the race: it expected `expected`, the shard was at `current`. The task
/// re-syncs next (its [`Resync`] comes as an event of its own).
fn on_lost(
    w: &mut WriterView,
    e: &WriteTaskEvent,
    expected: Option<u64>,
    current: Option<u64>,
) -> Outcome {
    w.mismatches += 1;
    w.last_lost = Some(LostRace {
        at_ms: e.at_ms,
        expected: expected.unwrap_or(0),
        actual: current,
    });
    let detail = format!(
        "UpperMismatch: expected {}, shard at {}",
        fmt_frontier(expected),
        fmt_frontier(current)
    );
    finish(w, e, Outcome::Mismatch, (expected, None, 0), detail)
}

/// A re-sync after a lost race: the task adopted the shard's upper and re-derived what it
/// still has to write from what the shard holds.
fn on_resynced(t: &mut TaskView, resync: Resync) {
    t.resyncs += 1;
    t.to_write = resync.to_write.clone();
    t.writer.cached_upper = resync.upper;
    t.writer.pending = resync.to_write_rows;
    t.desired_rows = resync.desired_rows;
    t.last_resync = Some(resync);
}

/// A line for the log view and the [`Fact`] of one write-task event (on task shard `shard`).
pub fn task_record(e: &WriteTaskEvent, shard: &str) -> (String, Option<Fact>) {
    (task_line(e, shard), task_fact(e, shard))
}

/// The [`Fact`] of a write-task event: its writes (committed, lost, re-synced, timed out).
fn task_fact(e: &WriteTaskEvent, shard: &str) -> Option<Fact> {
    use WriteTaskEventKind as K;
    let write = |expected_upper: Option<u64>, upper: Option<u64>, what: &str| Fact::TaskWrite {
        shard: shard.to_string(),
        expected_upper,
        upper,
        what: what.into(),
        updates: 0,
        desired: None,
    };
    match &e.kind {
        K::Committed {
            expected_upper,
            new_upper,
            updates,
            desired_fingerprint,
            ..
        } => Some(Fact::TaskWrite {
            shard: shard.to_string(),
            expected_upper: *expected_upper,
            upper: *new_upper,
            what: "committed".into(),
            updates: *updates,
            desired: Some(mask(*desired_fingerprint)),
        }),
        K::Mismatch {
            expected_upper,
            current_upper,
        } => Some(write(*expected_upper, *current_upper, "mismatch")),
        K::Resynced { upper, .. } => Some(write(None, *upper, "resynced")),
        K::AttemptTimedOut { expected_upper, .. } => {
            Some(write(*expected_upper, None, "indeterminate"))
        }
        K::Spawned { .. }
        | K::Prepared { .. }
        | K::CommandReceived { .. }
        | K::ReadOnlyRejected { .. }
        | K::Ticked { .. }
        | K::WriteAttempted { .. }
        | K::ResyncFailed { .. }
        | K::GaveUp { .. }
        | K::ShutDown { .. }
        | K::Ended { .. } => None,
    }
}

/// The log view's line for a write-task event (on task shard `shard`).
fn task_line(e: &WriteTaskEvent, shard: &str) -> String {
    use WriteTaskEventKind as K;
    let f = fmt_frontier;
    match &e.kind {
        K::Spawned {
            read_only,
            upper_tick_interval_ms,
        } => format!(
            "started on {shard}{}, ticking every {upper_tick_interval_ms} ms",
            if *read_only { " read-only" } else { "" }
        ),
        K::Prepared {
            upper,
            shard_rows,
            desired_rows,
            ..
        } => format!(
            "read {} at upper {}: desired starts with {desired_rows}",
            plural(*shard_rows, "row"),
            f(*upper)
        ),
        K::CommandReceived { op, rows, error } => match error {
            Some(err) => format!("{op} of {rows} refused: {err}"),
            None => format!("{op}: {} into desired", plural(*rows, "row")),
        },
        K::ReadOnlyRejected { responders } => {
            format!(
                "read-only: {} answered with an error",
                plural(*responders, "command")
            )
        }
        k @ (K::Ticked { .. }
        | K::WriteAttempted { .. }
        | K::Committed { .. }
        | K::Mismatch { .. }
        | K::Resynced { .. }
        | K::AttemptTimedOut { .. }) => write_line(k),
        K::ResyncFailed { reason } => format!("re-sync failed: {reason}"),
        K::GaveUp {
            attempts,
            responders,
        } => format!("gave up after {attempts} attempts; {responders} commands got an error"),
        K::ShutDown { answered } => format!("shut down; {answered} queued commands answered"),
        K::Ended { reason } => format!("ended: {reason}"),
    }
}

/// [`task_line`]'s line for the kinds about the task's writes: ticks, attempts, their outcomes
/// and re-syncs (`task_line` routes only those kinds here).
fn write_line(kind: &WriteTaskEventKind) -> String {
    use WriteTaskEventKind as K;
    let f = fmt_frontier;
    match kind {
        K::Ticked {
            current_upper,
            pending,
            ..
        } => format!(
            "tick at upper {}, {} pending",
            f(*current_upper),
            plural(*pending, "update")
        ),
        K::WriteAttempted {
            attempt,
            expected_upper,
            new_upper,
            updates,
            ..
        } => format!(
            "attempt {attempt}: {} at [{}, {})",
            plural(*updates, "update"),
            f(*expected_upper),
            f(*new_upper)
        ),
        K::Committed {
            expected_upper,
            new_upper,
            updates,
            desired_rows,
            ..
        } => format!(
            "committed {} at [{}, {}): the shard equals desired ({})",
            plural(*updates, "update"),
            f(*expected_upper),
            f(*new_upper),
            plural(*desired_rows, "row")
        ),
        K::Mismatch {
            expected_upper,
            current_upper,
        } => format!(
            "UpperMismatch: expected {}, the shard is at {}",
            f(*expected_upper),
            f(*current_upper)
        ),
        K::Resynced {
            upper,
            snapshot_rows,
            desired_rows,
            to_write,
            ..
        } => format!(
            "re-synced at upper {}: the shard holds {snapshot_rows} rows, desired {desired_rows}, to_write +{} −{} rows",
            f(*upper),
            to_write.adds,
            to_write.retractions
        ),
        K::AttemptTimedOut {
            expected_upper,
            after_ms,
        } => format!(
            "the attempt at {} timed out after {after_ms} ms: it may have committed",
            f(*expected_upper)
        ),
        _ => String::new(),
    }
}

/// Ends the write in flight on `w` with its latest attempt: `outcome` over `(lower, upper,
/// updates)`, at the event's time. Returns `outcome`.
fn finish(
    w: &mut WriterView,
    e: &WriteTaskEvent,
    outcome: Outcome,
    (lower, upper, updates): (Option<u64>, Option<u64>, u64),
    detail: String,
) -> Outcome {
    w.in_flight = None;
    w.last = Some(LastAttempt {
        outcome,
        lower,
        upper,
        updates,
        at_ms: e.at_ms,
        detail,
    });
    outcome
}

/// A write task on `spec.shard`, fed by `ops`. Its desired collection starts as what the shard
/// holds (so a restarted task keeps the rows), and every push is answered into the log. With
/// `no_resync` it is the variant that does not re-sync ([`crate::playground::variants::task`]).
pub async fn run_task(
    ctx: Rc<ActorCtx>,
    spec: TaskSpec,
    log: WriteTaskLog,
    mut ops: mpsc::UnboundedReceiver<TaskOp>,
    no_resync: bool,
) {
    // Both handles live as long as this future: dropping it (a crash, a removal) ends the task.
    let Some((tx, _task, _shutdown)) = start(&ctx, &spec, log, no_resync).await else {
        return;
    };
    let mut rows = Rows::default();
    type Answer = LocalBoxFuture<'static, (String, Result<(), WriteTaskError>)>;
    let mut answers: FuturesUnordered<Answer> = FuturesUnordered::new();
    loop {
        futures::select! {
            op = ops.next() => {
                let Some(op) = op else { return };
                let Some((what, write_op)) = rows.write_op(&ctx, op) else { continue };
                let (resp_tx, resp_rx) = oneshot::channel();
                if tx.unbounded_send((write_op, resp_tx)).is_err() {
                    return ctx.fail("task", "send", "the write task has ended");
                }
                let id = ctx.id.clone();
                answers.push(async move {
                    let answer = resp_rx.await.unwrap_or(Err(WriteTaskError::Aborted { id }));
                    (what, answer)
                }.boxed_local());
            }
            answer = answers.select_next_some() => {
                let (what, result) = answer;
                match result {
                    Ok(()) => ctx.event("task", "command", Outcome::Committed, format!("{what}: durable")),
                    Err(e) => ctx.event("task", "command", Outcome::Error, format!("{what}: {e}")),
                }
            }
        }
    }
}

/// The handles of a started write task: its command sender, its task and its shutdown.
type Started = (CommandSender, JoinHandle<()>, oneshot::Sender<()>);

/// Opens the task's writer and spawns the write task (the variant without re-sync if
/// `no_resync`), or marks the actor failed and returns `None`.
async fn start(
    ctx: &ActorCtx,
    spec: &TaskSpec,
    log: WriteTaskLog,
    no_resync: bool,
) -> Option<Started> {
    let shard = ctx.shard("task", &spec.shard)?;
    let write = match ctx.client.open_writer::<Row, ()>(&shard).await {
        Ok(w) => w,
        Err(e) => {
            ctx.fail("task", "open_writer", e);
            return None;
        }
    };
    ctx.register(&write.writer_id().0);
    ctx.view.borrow_mut().detail = ActorDetail::Task(TaskView {
        read_only: spec.read_only,
        tick_interval_ms: spec.tick_interval_ms,
        ..TaskView::default()
    });
    let (client, s) = (ctx.client.clone(), shard.clone());
    let read_handle_fn = move || -> ReadHandleFuture {
        let (c, s) = (client.clone(), s.clone());
        Box::pin(async move { c.open_leased_reader::<Row, ()>(&s).await })
    };
    let rt = ctx.runtime.clone();
    let cfg = WriteTaskConfig {
        runtime: rt.clone(),
        upper_tick_interval_ms: spec.tick_interval_ms,
        batch_duration_ms: 100,
        retry: RetryPolicy {
            initial_backoff_ms: 100,
            factor_percent: 150,
            clamp_backoff_ms: 2_000,
            max_tries: 10,
        },
        attempt_timeout_ms: 5_000,
        log,
    };
    let (id, read_only) = (ctx.id.clone(), spec.read_only);
    let spawned = if no_resync {
        variants::task::spawn(&id, write, read_handle_fn, read_only, now_fn(&rt), cfg)
    } else {
        let introspection = DifferentialIntrospectionConfig {
            initial_desired: InitialDesired::FromShard {
                retain: Box::new(|_| true),
            },
        };
        let now = now_fn(&rt);
        DifferentialWriteTask::spawn(
            id,
            write,
            read_handle_fn,
            read_only,
            now,
            introspection,
            cfg,
        )
    };
    match spawned {
        Ok(started) => Some(started),
        Err(e) => {
            ctx.fail("task", "spawn", e);
            None
        }
    }
}

/// The rows this task added, oldest first, and how many it has made.
#[derive(Default)]
struct Rows {
    rows: VecDeque<Row>,
    n: u64,
}

impl Rows {
    /// The write-task command for `op`, with its text: new rows for an append, the oldest row
    /// this task added for a delete (`None` after logging an error, if none is left).
    fn write_op(&mut self, ctx: &ActorCtx, op: TaskOp) -> Option<(String, StorageWriteOp)> {
        match op {
            TaskOp::Append { rows: count } => {
                let mut updates = Vec::new();
                for _ in 0..count {
                    self.n += 1;
                    let row = Row::new([
                        Datum::String(format!("{}-{}-{}", ctx.id, ctx.process, self.n)),
                        Datum::Int(self.n as i64),
                    ]);
                    self.rows.push_back(row.clone());
                    updates.push((row, 1));
                }
                let what = format!("append {}", plural(u64::from(count), "row"));
                Some((what, StorageWriteOp::Append { updates }))
            }
            TaskOp::DeleteOldest => {
                let Some(row) = self.rows.pop_front() else {
                    let why = "no row this task added is left to delete".into();
                    ctx.event("task", "delete", Outcome::Error, why);
                    return None;
                };
                let what = format!("delete {row}");
                let filter = Box::new(move |r: &Row| *r == row);
                Some((what, StorageWriteOp::Delete { filter }))
            }
        }
    }
}
