//! An oracle instance's actor: a durable timestamp oracle on its timeline, taking bursts of
//! write timestamps and a read timestamp on a timer.
//!
//! Invariants: every oracle event is logged (with its [`Fact`]) before the timestamps it made
//! possible, so the check reads a window before the timestamps served from it; the panel's
//! numbers are the instance's own snapshot, or, in the variant without the durable bound
//! ([`crate::playground::variants::oracle`]), the variant's in-memory oracle.

use std::rc::Rc;

use crate::location::Consensus;
use crate::oracle::{
    DurableOracleConfig, DurableTimestampOracle, InMemoryTimestampOracle, NowFn, OracleError,
    OracleEvent, OracleEventKind, TimestampOracle,
};
use crate::playground::actor::{ActorCtx, Window, WINDOWS_KEPT};
use crate::playground::command::OracleSpec;
use crate::playground::fact::Fact;
use crate::playground::log::{plural, Outcome};
use crate::playground::variants;

/// Logs the events `oracle` reported since the last call ([`oracle_event`]), and shows its
/// snapshot (or, with `unbounded`, the variant's timestamps and count) on the panel.
fn sync_oracle(
    ctx: &ActorCtx,
    timeline: &str,
    oracle: &DurableTimestampOracle,
    unbounded: Option<(&InMemoryTimestampOracle, u64)>,
) {
    for e in oracle.take_events() {
        let (outcome, detail, fact) = oracle_event(ctx, timeline, &e);
        ctx.event_fact("oracle", "oracle", outcome, detail, fact);
    }
    let s = oracle.snapshot();
    ctx.oracle_view(|o| {
        o.epoch = s.epoch;
        o.read_ts = s.read_ts;
        o.write_ts = s.write_ts;
        o.durable_upper = s.durable_upper;
        o.persist_interval_ms = s.persist_interval_ms;
        o.fenced_by = s.fenced_by;
        o.handed_out = s.stats.write_timestamps;
        o.unbounded = unbounded.is_some();
        // Without the durable bound the timestamps are the variant's, served from memory.
        if let Some((memory, handed_out)) = unbounded {
            let t = memory.state();
            o.read_ts = t.read_ts();
            o.write_ts = t.peek_write_ts();
            o.handed_out = handed_out;
        }
    });
}

/// One oracle event's outcome, line and [`Fact`]; a window made durable (the first one, written
/// with the epoch when the instance opened, or a later allocation) also goes on the panel, so
/// it draws one window per Consensus write of the timeline.
fn oracle_event(
    ctx: &ActorCtx,
    timeline: &str,
    e: &OracleEvent,
) -> (Outcome, String, Option<Fact>) {
    let made_durable = match &e.kind {
        OracleEventKind::Allocated {
            for_ts,
            durable_upper,
            ..
        } => Some((*for_ts, *durable_upper)),
        OracleEventKind::Opened {
            start_ts,
            durable_upper,
            ..
        } => Some((*start_ts, *durable_upper)),
        _ => None,
    };
    if let OracleEventKind::Opened {
        resumed_from: Some(from),
        ..
    } = &e.kind
    {
        ctx.oracle_view(|o| o.resumed_from = Some(*from));
    }
    if let Some((for_ts, durable_upper)) = made_durable {
        let w = Window {
            at_ms: e.at_ms,
            for_ts,
            durable_upper,
        };
        ctx.oracle_view(|o| {
            o.windows.push(w);
            if o.windows.len() > WINDOWS_KEPT {
                o.windows.remove(0);
            }
        });
    }
    let (outcome, detail) = oracle_line(e);
    (outcome, detail, oracle_fact(timeline, e))
}

/// The [`Fact`] of an oracle event: an opened epoch or a durable window.
fn oracle_fact(timeline: &str, e: &OracleEvent) -> Option<Fact> {
    let window = |for_ts: Option<u64>, durable_upper: u64| Fact::OracleWindow {
        timeline: timeline.to_string(),
        epoch: e.epoch,
        for_ts,
        durable_upper,
    };
    match &e.kind {
        OracleEventKind::Opened {
            start_ts,
            durable_upper,
            ..
        } => Some(Fact::OracleOpened {
            timeline: timeline.to_string(),
            epoch: e.epoch,
            start_ts: *start_ts,
            durable_upper: *durable_upper,
        }),
        OracleEventKind::Allocated {
            for_ts,
            durable_upper,
            ..
        } => Some(window(Some(*for_ts), *durable_upper)),
        OracleEventKind::AdoptedOwnWrite { durable_upper, .. } => {
            Some(window(None, *durable_upper))
        }
        OracleEventKind::Fenced { .. }
        | OracleEventKind::OpenConflict { .. }
        | OracleEventKind::StorageRetry { .. }
        | OracleEventKind::Truncated { .. }
        | OracleEventKind::TruncateFailed { .. }
        | OracleEventKind::ClockGuardWait { .. }
        | OracleEventKind::ClockGuardGaveUp { .. } => None,
    }
}

/// An oracle event's outcome and line in the log.
fn oracle_line(e: &OracleEvent) -> (Outcome, String) {
    match &e.kind {
        OracleEventKind::Opened {
            resumed_from,
            start_ts,
            durable_upper,
            ..
        } => (
            Outcome::Committed,
            format!(
                "epoch {} opened: resumed from {}, hands out write timestamps above {start_ts}, durable upper {durable_upper}",
                e.epoch,
                resumed_from.map_or("nothing (new timeline)".into(), |r| r.to_string())
            ),
        ),
        OracleEventKind::Allocated {
            for_ts,
            durable_upper,
            ..
        } => (
            Outcome::Committed,
            format!("allocated a window for {for_ts}: durable upper {durable_upper}"),
        ),
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
        } => (
            Outcome::Committed,
            format!("found its own timed-out write at seqno {seqno}: durable upper {durable_upper}"),
        ),
        OracleEventKind::Truncated {
            below_seqno,
            deleted,
        } => (
            Outcome::Info,
            format!(
                "truncated {} below seqno {below_seqno}",
                plural(*deleted, "version")
            ),
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
            format!(
                "stored upper {stored_upper} is {} ms ahead of the clock ({now_ms}), more than the two persist intervals allowed: waiting {wait_ms} ms (at most 1 s a wait) to close the gap to that",
                stored_upper.saturating_sub(*now_ms)
            ),
        ),
        OracleEventKind::ClockGuardGaveUp {
            stored_upper,
            now_ms,
            waited_ms,
        } => (
            Outcome::Info,
            format!("waited {waited_ms} ms for the clock ({now_ms}) to near {stored_upper}: starting anyway"),
        ),
    }
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
    // Opening retries storage errors for as long as it runs; a timeout can heal, so a slow or
    // unavailable store only delays it (with back-off). Only an error of its own stops it.
    let mut backoff = crate::retry::Backoff::new(500, 5_000);
    let oracle = loop {
        let now = NowFn::from_runtime(&rt);
        let open =
            DurableTimestampOracle::open(Rc::clone(&consensus), rt.clone(), now, 0, config.clone());
        match rt.timeout(30_000, open).await {
            Ok(Ok(o)) => break o,
            Ok(Err(e)) => return ctx.fail("oracle", "open", e),
            Err(e) => {
                let wait = backoff.peek_ms();
                let why = format!("open: no answer within {e}: retrying in {wait} ms");
                ctx.event("oracle", "open", Outcome::Retrying, why);
                backoff.wait(&rt).await;
            }
        }
    };
    let variant = unbounded.then(|| variants::oracle::unbounded(&oracle, NowFn::from_runtime(&rt)));
    // The variant's count of timestamps handed out (the durable instance no longer serves).
    let mut served = 0u64;
    let serving: &dyn TimestampOracle = match &variant {
        Some(v) => v,
        None => &oracle,
    };
    let sync = |served: u64| {
        let unbounded = variant.as_ref().map(|v| (v, served));
        sync_oracle(&ctx, &spec.timeline, &oracle, unbounded)
    };
    sync(served);
    let epoch = oracle.snapshot().epoch;
    ctx.register(&format!("oracle epoch {epoch}"));
    let period_ms = (1_000 / u64::from(spec.rate_per_s.max(1))).max(1);
    let burst = spec.burst.max(1);
    loop {
        rt.sleep(period_ms).await;
        let result = rt.timeout(5_000, take_burst(serving, burst)).await;
        match result {
            Ok(Ok((range, read_ts))) => {
                let Some((first, last)) = range else { continue };
                served += u64::from(burst);
                // The window it took for `ts` is logged first: the check reads them in order.
                sync(served);
                ctx.oracle_view(|o| {
                    o.first_ts.get_or_insert(first);
                });
                log_burst(&ctx, &spec.timeline, epoch, (first, last), read_ts);
            }
            Ok(Err(e)) => {
                sync(served);
                return ctx.fail("oracle", "write_ts", e);
            }
            Err(e) => ctx.event(
                "oracle",
                "write_ts",
                Outcome::Indeterminate,
                format!("no timestamp within {e}: storage is slow or down"),
            ),
        }
        sync(served);
    }
}

/// Takes `burst` write timestamps from `serving`, applying each, then a read timestamp: the
/// first and last write timestamp (`None` for an empty burst) and the read timestamp.
async fn take_burst(
    serving: &dyn TimestampOracle,
    burst: u32,
) -> Result<(Option<(u64, u64)>, u64), OracleError> {
    let mut range: Option<(u64, u64)> = None;
    for _ in 0..burst {
        let w = serving.write_ts().await?;
        serving.apply_write(w.timestamp).await?;
        let first = range.map_or(w.timestamp, |r| r.0);
        range = Some((first, w.timestamp));
    }
    serving.read_ts().await.map(|r| (range, r))
}

/// Logs a burst `first..=last` by its facts, its first and its last timestamp (one if they are
/// one): every timestamp between them was handed out, in order, by this instance.
fn log_burst(ctx: &ActorCtx, timeline: &str, epoch: u64, (first, last): (u64, u64), read_ts: u64) {
    let ends = if first == last {
        vec![first]
    } else {
        vec![first, last]
    };
    for ts in ends {
        let fact = Fact::OracleTs {
            timeline: timeline.to_string(),
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
