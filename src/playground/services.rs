//! The actors that wrap whole components: a differential write task and a durable timestamp
//! oracle instance. (Writers and readers are in [`super::actors`].)
//!
//! A write task's panel data comes from its own event log: the scenario's pump reads each event
//! ([`apply_task_event`]) into the task's [`TaskView`], so the view shows exactly what the task
//! reported, in order.

use std::collections::VecDeque;
use std::rc::Rc;

use futures::channel::mpsc;
use futures::future::LocalBoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use serde::Serialize;

use super::actors::{fmt_frontier, ActorCtx, ActorDetail, ActorView, LastAttempt, WriterView};
use super::command::{OracleSpec, TaskOp, TaskSpec};
use super::fact::{mask, Fact};
use super::log::Outcome;
use super::variants::{self, oracle::UnboundedOracle};
use crate::location::Consensus;
use crate::oracle::{
    DurableOracleConfig, DurableTimestampOracle, NowFn, OracleError, OracleEventKind,
    TimestampOracle,
};
use crate::persist::codec::{Datum, Row};
use crate::persist::ShardId;
use crate::write_task::{
    now_fn, DifferentialIntrospectionConfig, DifferentialWriteTask, InitialDesired,
    ReadHandleFuture, RetryPolicy, StorageWriteOp, WriteTaskConfig, WriteTaskError, WriteTaskEvent,
    WriteTaskEventKind, WriteTaskLog,
};

/// How many window allocations an oracle view keeps.
const WINDOWS_KEPT: usize = 24;

/// A write task's panel data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    /// Its writer's side, as for a writer: `cachedUpper` is the task's `current_upper`,
    /// `pending` its `to_write`.
    pub writer: WriterView,
    /// Read-only?
    pub read_only: bool,
    /// The upper tick's period.
    pub tick_interval_ms: u64,
    /// Rows in `desired`, as last reported.
    pub desired_rows: u64,
    /// Re-syncs after a mismatch.
    pub resyncs: u64,
    /// Commands answered with an error (read-only, gave up, ...).
    pub refused: u64,
}

/// Reads one write-task event into the task's view. Returns the event's outcome for the log.
pub fn apply_task_event(view: &mut ActorView, e: &WriteTaskEvent) -> Outcome {
    let ActorDetail::Task(t) = &mut view.detail else {
        return Outcome::Info;
    };
    let w = &mut t.writer;
    match &e.kind {
        WriteTaskEventKind::Spawned {
            read_only,
            upper_tick_interval_ms,
        } => {
            t.read_only = *read_only;
            t.tick_interval_ms = *upper_tick_interval_ms;
            Outcome::Info
        }
        WriteTaskEventKind::Prepared {
            desired_rows,
            to_write_rows,
            ..
        } => {
            t.desired_rows = *desired_rows;
            w.pending = *to_write_rows;
            Outcome::Info
        }
        WriteTaskEventKind::CommandReceived { error, .. } => {
            if error.is_some() {
                Outcome::Error
            } else {
                Outcome::Info
            }
        }
        WriteTaskEventKind::ReadOnlyRejected { responders } => {
            t.refused += *responders;
            Outcome::Error
        }
        WriteTaskEventKind::Ticked { pending, .. } => {
            w.pending = *pending;
            Outcome::Info
        }
        WriteTaskEventKind::WriteAttempted {
            expected_upper,
            new_upper,
            updates,
            ..
        } => {
            w.in_flight = Some(super::actors::InFlight {
                lower: *expected_upper,
                upper: *new_upper,
                updates: *updates,
                since_ms: e.at_ms,
                retrying: false,
            });
            Outcome::Info
        }
        WriteTaskEventKind::Committed {
            expected_upper,
            new_upper,
            updates,
            desired_rows,
            ..
        } => {
            w.in_flight = None;
            w.committed += 1;
            w.acked_updates += *updates;
            w.pending = 0;
            w.cached_upper = *new_upper;
            w.shared_upper = *new_upper;
            t.desired_rows = *desired_rows;
            w.last = Some(last(
                Outcome::Committed,
                *expected_upper,
                *new_upper,
                *updates,
                e,
                format!(
                    "{}, upper now {}",
                    super::actors::plural(*updates, "update"),
                    fmt_frontier(*new_upper)
                ),
            ));
            Outcome::Committed
        }
        WriteTaskEventKind::Mismatch {
            expected_upper,
            current_upper,
        } => {
            w.in_flight = None;
            w.mismatches += 1;
            w.last = Some(last(Outcome::Mismatch, *expected_upper, None, 0, e, {
                format!(
                    "UpperMismatch: expected {}, shard at {}",
                    fmt_frontier(*expected_upper),
                    fmt_frontier(*current_upper)
                )
            }));
            Outcome::Mismatch
        }
        WriteTaskEventKind::Resynced {
            upper,
            desired_rows,
            to_write_rows,
            ..
        } => {
            t.resyncs += 1;
            w.cached_upper = *upper;
            w.pending = *to_write_rows;
            t.desired_rows = *desired_rows;
            Outcome::Info
        }
        WriteTaskEventKind::ResyncFailed { .. } => Outcome::Retrying,
        WriteTaskEventKind::AttemptTimedOut { expected_upper, .. } => {
            w.in_flight = None;
            w.indeterminate += 1;
            w.last = Some(last(
                Outcome::Indeterminate,
                *expected_upper,
                None,
                0,
                e,
                "the attempt timed out: it may or may not have committed".into(),
            ));
            Outcome::Indeterminate
        }
        WriteTaskEventKind::GaveUp { .. } => {
            t.refused += 1;
            Outcome::Error
        }
        WriteTaskEventKind::ShutDown { .. } | WriteTaskEventKind::Ended { .. } => Outcome::Info,
    }
}

/// A line for the log view and the [`Fact`] of one write-task event (on task shard `shard`).
pub fn task_record(e: &WriteTaskEvent, shard: &str) -> (String, Option<Fact>) {
    use WriteTaskEventKind as K;
    let f = fmt_frontier;
    let write = |expected_upper: &Option<u64>, upper: Option<u64>, what: &str| Fact::TaskWrite {
        shard: shard.to_string(),
        expected_upper: *expected_upper,
        upper,
        what: what.into(),
        updates: 0,
        desired: None,
    };
    match &e.kind {
        K::Spawned {
            read_only,
            upper_tick_interval_ms,
        } => (
            format!(
                "started on {shard}{}, ticking every {upper_tick_interval_ms} ms",
                if *read_only { " read-only" } else { "" }
            ),
            None,
        ),
        K::Prepared {
            upper,
            shard_rows,
            desired_rows,
            ..
        } => (
            format!(
                "read {shard_rows} rows at upper {}: desired starts with {desired_rows}",
                f(*upper)
            ),
            None,
        ),
        K::CommandReceived { op, rows, error } => (
            match error {
                Some(err) => format!("{op} of {rows} refused: {err}"),
                None => format!("{op}: {rows} rows into desired"),
            },
            None,
        ),
        K::ReadOnlyRejected { responders } => (
            format!("read-only: {responders} commands answered with an error"),
            None,
        ),
        K::Ticked {
            current_upper,
            pending,
            ..
        } => (
            format!(
                "tick at upper {}, {pending} updates pending",
                f(*current_upper)
            ),
            None,
        ),
        K::WriteAttempted {
            attempt,
            expected_upper,
            new_upper,
            updates,
            ..
        } => (
            format!(
                "attempt {attempt}: {} at [{}, {})",
                super::actors::plural(*updates, "update"),
                f(*expected_upper),
                f(*new_upper)
            ),
            None,
        ),
        K::Committed {
            expected_upper,
            new_upper,
            updates,
            desired_rows,
            desired_fingerprint,
            ..
        } => (
            format!(
                "committed {} at [{}, {}): the shard equals desired ({desired_rows} rows)",
                super::actors::plural(*updates, "update"),
                f(*expected_upper),
                f(*new_upper)
            ),
            Some(Fact::TaskWrite {
                shard: shard.to_string(),
                expected_upper: *expected_upper,
                upper: *new_upper,
                what: "committed".into(),
                updates: *updates,
                desired: Some(mask(*desired_fingerprint)),
            }),
        ),
        K::Mismatch {
            expected_upper,
            current_upper,
        } => (
            format!(
                "UpperMismatch: expected {}, the shard is at {}",
                f(*expected_upper),
                f(*current_upper)
            ),
            Some(write(expected_upper, *current_upper, "mismatch")),
        ),
        K::Resynced {
            upper,
            snapshot_rows,
            desired_rows,
            to_write_rows,
            ..
        } => (
            format!(
                "re-synced at upper {}: the shard holds {snapshot_rows} rows, desired                  {desired_rows}, {to_write_rows} updates to write",
                f(*upper)
            ),
            Some(write(&None, *upper, "resynced")),
        ),
        K::ResyncFailed { reason } => (format!("re-sync failed: {reason}"), None),
        K::AttemptTimedOut {
            expected_upper,
            after_ms,
        } => (
            format!(
                "the attempt at {} timed out after {after_ms} ms: it may have committed",
                f(*expected_upper)
            ),
            Some(write(expected_upper, None, "indeterminate")),
        ),
        K::GaveUp {
            attempts,
            responders,
        } => (
            format!("gave up after {attempts} attempts; {responders} commands got an error"),
            None,
        ),
        K::ShutDown { answered } => (
            format!("shut down; {answered} queued commands answered"),
            None,
        ),
        K::Ended { reason } => (format!("ended: {reason}"), None),
    }
}

fn last(
    outcome: Outcome,
    lower: Option<u64>,
    upper: Option<u64>,
    updates: u64,
    e: &WriteTaskEvent,
    detail: String,
) -> LastAttempt {
    LastAttempt {
        outcome,
        lower,
        upper,
        updates,
        at_ms: e.at_ms,
        detail,
    }
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
    let shard = match ShardId::new(&spec.shard) {
        Ok(s) => s,
        Err(e) => return ctx.fail("task", "bad shard", e),
    };
    let write = match ctx.client.open_writer::<Row, ()>(&shard).await {
        Ok(w) => w,
        Err(e) => return ctx.fail("task", "open_writer", e),
    };
    ctx.register(&write.writer_id().0);
    {
        let mut view = ctx.view.borrow_mut();
        view.detail = ActorDetail::Task(TaskView {
            read_only: spec.read_only,
            tick_interval_ms: spec.tick_interval_ms,
            ..TaskView::default()
        });
    }
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
    let introspection = DifferentialIntrospectionConfig {
        initial_desired: InitialDesired::FromShard {
            retain: Box::new(|_| true),
        },
    };
    let spawned = if no_resync {
        Ok(variants::task::spawn(
            &ctx.id,
            write,
            read_handle_fn,
            spec.read_only,
            now_fn(&rt),
            cfg,
        ))
    } else {
        DifferentialWriteTask::spawn(
            ctx.id.clone(),
            write,
            read_handle_fn,
            spec.read_only,
            now_fn(&rt),
            introspection,
            cfg,
        )
    };
    // Both handles live as long as this future: dropping it (a crash, a removal) ends the task.
    let (tx, _task, _shutdown) = match spawned {
        Ok(x) => x,
        Err(e) => return ctx.fail("task", "spawn", e),
    };
    let mut rows: VecDeque<Row> = VecDeque::new();
    let mut n = 0u64;
    type Answer = LocalBoxFuture<'static, (String, Result<(), WriteTaskError>)>;
    let mut answers: FuturesUnordered<Answer> = FuturesUnordered::new();
    loop {
        futures::select! {
            op = ops.next() => {
                let Some(op) = op else { return };
                let (what, write_op) = match op {
                    TaskOp::Append { rows: count } => {
                        let mut updates = Vec::new();
                        for _ in 0..count {
                            n += 1;
                            let row = Row::new([
                                Datum::String(format!("{}-{}-{n}", ctx.id, ctx.process)),
                                Datum::Int(n as i64),
                            ]);
                            rows.push_back(row.clone());
                            updates.push((row, 1));
                        }
                        (format!("append {count} rows"), StorageWriteOp::Append { updates })
                    }
                    TaskOp::DeleteOldest => {
                        let Some(row) = rows.pop_front() else {
                            ctx.event("task", "delete", Outcome::Error,
                                "no row this task added is left to delete".into());
                            continue;
                        };
                        let what = format!("delete {row}");
                        (what, StorageWriteOp::Delete { filter: Box::new(move |r| *r == row) })
                    }
                };
                let (resp_tx, resp_rx) = futures::channel::oneshot::channel();
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

/// One window of timestamps made durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Window {
    /// When.
    pub at_ms: u64,
    /// The timestamp that needed it.
    pub for_ts: u64,
    /// The new durable upper.
    pub durable_upper: u64,
}

/// An oracle instance's panel data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OracleView {
    /// The instance's epoch.
    pub epoch: u64,
    /// The read timestamp.
    pub read_ts: u64,
    /// The latest write timestamp.
    pub write_ts: u64,
    /// The durable upper it knows of: nothing at or beyond it is handed out before allocating.
    pub durable_upper: u64,
    /// The window size.
    pub persist_interval_ms: u64,
    /// The epoch that fenced it, once it knows.
    pub fenced_by: Option<u64>,
    /// Write timestamps handed out.
    pub handed_out: u64,
    /// Recent window allocations, oldest first.
    pub windows: Vec<Window>,
    /// The first timestamp it handed out (after a restart: above every earlier one).
    pub first_ts: Option<u64>,
}

fn oracle_view(ctx: &ActorCtx, f: impl FnOnce(&mut OracleView)) {
    let mut view = ctx.view.borrow_mut();
    if !matches!(view.detail, ActorDetail::Oracle(_)) {
        view.detail = ActorDetail::Oracle(OracleView::default());
    }
    if let ActorDetail::Oracle(o) = &mut view.detail {
        f(o);
    }
}

fn sync_oracle(
    ctx: &ActorCtx,
    timeline: &str,
    oracle: &DurableTimestampOracle,
    unbounded: Option<&UnboundedOracle>,
) {
    for e in oracle.take_events() {
        let mut fact = None;
        let (outcome, detail) = match &e.kind {
            OracleEventKind::Opened {
                resumed_from,
                start_ts,
                durable_upper,
                ..
            } => {
                fact = Some(Fact::OracleOpened {
                    timeline: timeline.to_string(),
                    epoch: e.epoch,
                    start_ts: *start_ts,
                    durable_upper: *durable_upper,
                });
                (
                    Outcome::Committed,
                    format!(
                        "epoch {} opened: resumed from {}, starts at {start_ts}, durable upper {durable_upper}",
                        e.epoch,
                        resumed_from.map_or("nothing (new timeline)".into(), |r| r.to_string())
                    ),
                )
            }
            OracleEventKind::Allocated {
                for_ts,
                durable_upper,
                ..
            } => {
                let w = Window {
                    at_ms: e.at_ms,
                    for_ts: *for_ts,
                    durable_upper: *durable_upper,
                };
                oracle_view(ctx, |o| {
                    o.windows.push(w);
                    if o.windows.len() > WINDOWS_KEPT {
                        o.windows.remove(0);
                    }
                });
                fact = Some(Fact::OracleWindow {
                    timeline: timeline.to_string(),
                    epoch: e.epoch,
                    for_ts: Some(*for_ts),
                    durable_upper: *durable_upper,
                });
                (
                    Outcome::Committed,
                    format!("allocated a window for {for_ts}: durable upper {durable_upper}"),
                )
            }
            OracleEventKind::Fenced { current_epoch } => (
                Outcome::Error,
                format!("fenced: epoch {current_epoch} took over"),
            ),
            OracleEventKind::OpenConflict { expected_seqno } => (
                Outcome::Mismatch,
                format!(
                    "another instance wrote first (expected seqno {}): opening again",
                    expected_seqno.map_or("none".into(), |s| s.to_string())
                ),
            ),
            OracleEventKind::StorageRetry {
                op,
                error,
                indeterminate,
                backoff_ms,
            } => (
                if *indeterminate {
                    Outcome::Indeterminate
                } else {
                    Outcome::Retrying
                },
                format!("{op} failed ({error}); retrying in {backoff_ms} ms"),
            ),
            OracleEventKind::AdoptedOwnWrite {
                seqno,
                durable_upper,
            } => {
                fact = Some(Fact::OracleWindow {
                    timeline: timeline.to_string(),
                    epoch: e.epoch,
                    for_ts: None,
                    durable_upper: *durable_upper,
                });
                (
                Outcome::Committed,
                    format!("found its own timed-out write at seqno {seqno}: durable upper {durable_upper}"),
                )
            }
            OracleEventKind::Truncated {
                below_seqno,
                deleted,
            } => (
                Outcome::Info,
                format!("truncated {deleted} versions below seqno {below_seqno}"),
            ),
            OracleEventKind::TruncateFailed { error } => {
                (Outcome::Retrying, format!("truncate failed: {error}"))
            }
            OracleEventKind::ClockGuardWait {
                stored_upper,
                now_ms,
                wait_ms,
            } => (
                Outcome::Info,
                format!("stored upper {stored_upper} is far ahead of the clock ({now_ms}): waiting {wait_ms} ms"),
            ),
            OracleEventKind::ClockGuardGaveUp {
                stored_upper,
                now_ms,
                waited_ms,
            } => (
                Outcome::Info,
                format!("waited {waited_ms} ms for the clock ({now_ms}) to near {stored_upper}: starting anyway"),
            ),
        };
        ctx.event_fact("oracle", "oracle", outcome, detail, fact);
    }
    let s = oracle.snapshot();
    oracle_view(ctx, |o| {
        o.epoch = s.epoch;
        o.read_ts = s.read_ts;
        o.write_ts = s.write_ts;
        o.durable_upper = s.durable_upper;
        o.persist_interval_ms = s.persist_interval_ms;
        o.fenced_by = s.fenced_by;
        o.handed_out = s.stats.write_timestamps;
        // Without the durable bound the timestamps are the variant's, served from memory.
        if let Some(u) = unbounded {
            let t = u.state();
            o.read_ts = t.read_ts();
            o.write_ts = t.peek_write_ts();
            o.handed_out = u.handed_out();
        }
    });
}

/// An oracle instance: opens (fencing any earlier instance on the timeline), then `rate_per_s`
/// times a second takes `burst` write timestamps, applying each, and a read timestamp.
/// `unbounded` runs it without its durable bound ([`crate::playground::variants::oracle`]).
pub async fn run_oracle(
    ctx: Rc<ActorCtx>,
    spec: OracleSpec,
    consensus: Rc<dyn Consensus>,
    unbounded: bool,
) {
    let rt = ctx.runtime.clone();
    let config = DurableOracleConfig::new(spec.timeline.clone())
        .persist_interval_ms(spec.persist_interval_ms)
        .clock_guard_max_wait_ms(2_000);
    let open =
        DurableTimestampOracle::open(consensus, rt.clone(), NowFn::from_runtime(&rt), 0, config);
    let oracle = match rt.timeout(30_000, open).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => return ctx.fail("oracle", "open", e),
        Err(e) => return ctx.fail("oracle", "open", e),
    };
    let variant = unbounded.then(|| UnboundedOracle::new(&oracle, NowFn::from_runtime(&rt)));
    let serving: &dyn TimestampOracle = match &variant {
        Some(v) => v,
        None => &oracle,
    };
    sync_oracle(&ctx, &spec.timeline, &oracle, variant.as_ref());
    let epoch = oracle.snapshot().epoch;
    ctx.register(&format!("oracle epoch {epoch}"));
    let period_ms = (1_000 / u64::from(spec.rate_per_s.max(1))).max(1);
    loop {
        rt.sleep(period_ms).await;
        let result = rt
            .timeout(5_000, async {
                let mut range: Option<(u64, u64)> = None;
                for _ in 0..spec.burst.max(1) {
                    let w = serving.write_ts().await?;
                    serving.apply_write(w.timestamp).await?;
                    let first = range.map_or(w.timestamp, |r| r.0);
                    range = Some((first, w.timestamp));
                }
                serving.read_ts().await.map(|r| (range, r))
            })
            .await;
        match result {
            Ok(Ok((range, read_ts))) => {
                let Some((first, last)) = range else { continue };
                // The window it took for `ts` is logged first: the check reads them in order.
                sync_oracle(&ctx, &spec.timeline, &oracle, variant.as_ref());
                oracle_view(&ctx, |o| {
                    o.first_ts.get_or_insert(first);
                });
                // A burst's facts are its first and its last timestamp (one if they are one):
                // every timestamp between them was handed out, in order, by this instance.
                let ends = if first == last {
                    vec![first]
                } else {
                    vec![first, last]
                };
                for ts in ends {
                    let fact = Fact::OracleTs {
                        timeline: spec.timeline.clone(),
                        epoch,
                        write_ts: ts,
                        read_ts,
                    };
                    let detail = if first == last {
                        format!("write ts {ts}, read ts {read_ts}")
                    } else {
                        format!("write ts {ts} (burst {first} to {last}), read ts {read_ts}")
                    };
                    ctx.event_fact("oracle", "timestamp", Outcome::Info, detail, Some(fact));
                }
            }
            Ok(Err(e @ OracleError::Fenced { .. })) => {
                sync_oracle(&ctx, &spec.timeline, &oracle, variant.as_ref());
                return ctx.fail("oracle", "write_ts", e);
            }
            Ok(Err(e)) => {
                sync_oracle(&ctx, &spec.timeline, &oracle, variant.as_ref());
                return ctx.fail("oracle", "write_ts", e);
            }
            Err(e) => ctx.event(
                "oracle",
                "write_ts",
                Outcome::Indeterminate,
                format!("no timestamp within {e}: storage is slow or down"),
            ),
        }
        sync_oracle(&ctx, &spec.timeline, &oracle, variant.as_ref());
    }
}
