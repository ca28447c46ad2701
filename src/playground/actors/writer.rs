//! A writer: generates `rate_per_s` updates a second over its key range and writes whatever is
//! pending in one batch at its cached upper, `[upper, max(now, upper) + 1)`.
//!
//! One turn of its loop is three steps: [`generate`] what is due (dropping beyond
//! [`MAX_PENDING`]), [`attempt`] one write of everything pending, and [`record`] how it ended
//! ([`Attempt`]) into the pending updates, the acknowledged values, the panel and the log.
//! Invariants: an update leaves `pending` only when its write committed (into [`Acked`]) or may
//! have committed (indeterminate, with a token: it must not be written twice); a lost race keeps
//! it pending for the next attempt at the upper the writer just learned.
//!
//! With a `tripwire` (the [`Rule::IdempotencyToken`](crate::playground::rules::Rule) variant, see
//! [`crate::playground::variants::writer`]) an attempt that meets an indeterminate
//! compare_and_set is abandoned, and its updates stay pending for the next attempt, at the
//! shard's new upper.

use std::cell::RefCell;
use std::rc::Rc;

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use timely::progress::Antichain;

use crate::persist::error::{InvalidUsage, PersistError};
use crate::persist::events::frontier;
use crate::persist::write::WriteHandle;
use crate::playground::actor::{
    Acked, ActorCtx, InFlight, LastAttempt, LostRace, TimedOutWrite, ATTEMPT_TIMEOUT_MS, MAX_ACKED,
    MAX_PENDING,
};
use crate::playground::command::{WriteMode, WriterSpec};
use crate::playground::fact::{digest, AttemptOutcome, Fact};
use crate::playground::log::{fmt_frontier, plural, Outcome};
use crate::playground::variants::writer::{unless_tripped, Tripped, Tripwire};
use crate::runtime::Runtime;

/// How one write attempt ended.
#[derive(Debug)]
pub enum Attempt {
    /// It committed.
    Committed,
    /// Another writer moved the upper first: the shard is at `current`.
    Mismatch {
        /// The shard's upper, as the mismatch reported it.
        current: Option<u64>,
    },
    /// The tripwire abandoned it at an indeterminate compare_and_set (no token): whether it
    /// landed cannot be told, and its updates stay pending.
    Abandoned {
        /// The indeterminate error.
        why: String,
        /// The shard's upper fetched afterwards, if it answered in time.
        upper: Option<u64>,
    },
    /// persist could not tell whether it committed.
    Indeterminate,
    /// No answer within [`ATTEMPT_TIMEOUT_MS`]: it may have committed.
    TimedOut {
        /// What the timeout said.
        elapsed: String,
    },
}

/// The writer's state between turns.
struct Gen {
    rng: Xoshiro256PlusPlus,
    period_ms: u64,
    next_gen_ms: u64,
    n: u64,
    pending: Vec<(String, String)>,
}

/// Runs the writer (see the module docs) until its process ends or it fails.
pub async fn run_writer(
    ctx: Rc<ActorCtx>,
    spec: WriterSpec,
    acked: Rc<RefCell<Acked>>,
    tripwire: Option<Rc<Tripwire>>,
) {
    let Some(shard) = ctx.shard("scenario", &spec.shard) else {
        return;
    };
    let mut write = match ctx.client.open_writer::<String, String>(&shard).await {
        Ok(w) => w,
        Err(e) => return ctx.fail("writer", "open_writer", e),
    };
    let writer_id = write.writer_id().0.clone();
    ctx.register(&writer_id);
    ctx.event(
        "writer",
        "open",
        Outcome::Info,
        format!("opened its writer on {shard} (handle id {writer_id})"),
    );
    let rt = ctx.runtime.clone();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(ctx.seed);
    let period_ms = (1_000 / u64::from(spec.rate_per_s.max(1))).max(1);
    // A seeded phase, so that writers of one rate do not all fire at the same instants.
    let next_gen_ms = rt.now_ms() + rng.next_u64() % period_ms;
    let mut gen = Gen {
        rng,
        period_ms,
        next_gen_ms,
        n: 0,
        pending: Vec::new(),
    };
    loop {
        let now = rt.now_ms();
        generate(&ctx, &spec, &writer_id, &mut gen, now);
        if gen.pending.is_empty() {
            rt.sleep_until(gen.next_gen_ms).await;
            continue;
        }
        let Some(lo) = frontier(write.upper()) else {
            return ctx.fail(
                "writer",
                "write",
                "the shard is finished (its upper is empty)",
            );
        };
        let ts = now.max(lo);
        let count = gen.pending.len() as u64;
        ctx.writer_view(|w| {
            w.in_flight = Some(InFlight {
                lower: Some(lo),
                upper: Some(ts + 1),
                updates: count,
                since_ms: now,
                retrying: false,
                timeouts: 0,
            })
        });
        let result = attempt(&rt, &mut write, &spec, &gen.pending, (lo, ts), &tripwire).await;
        let result = match result {
            Ok(result) => result,
            Err(e) => return ctx.fail("writer", op_name(spec.mode), e),
        };
        let outcome = record(
            &ctx,
            &spec,
            &write,
            &acked,
            &mut gen.pending,
            (lo, ts),
            result,
        );
        if !matches!(outcome, Outcome::Committed | Outcome::Mismatch) {
            // Storage is in trouble: give it a moment. (A lost race retries at once, at the
            // upper it just learned.)
            rt.sleep(period_ms.min(50)).await;
        }
    }
}

/// Generates every update due by `now` into `gen.pending` (beyond [`MAX_PENDING`] it drops them,
/// and counts them), and shows the pending count.
fn generate(ctx: &ActorCtx, spec: &WriterSpec, writer_id: &str, gen: &mut Gen, now: u64) {
    let span = u64::from(spec.key_hi - spec.key_lo);
    let mut dropped = 0u64;
    while gen.next_gen_ms <= now {
        if gen.pending.len() >= MAX_PENDING {
            dropped += 1;
        } else {
            let key = u64::from(spec.key_lo) + gen.rng.next_u64() % span;
            gen.n += 1;
            gen.pending.push((
                format!("k{key:04}"),
                format!("{}:{writer_id}#{}", ctx.id, gen.n),
            ));
        }
        gen.next_gen_ms += gen.period_ms;
    }
    let pending = gen.pending.len() as u64;
    ctx.writer_view(|w| {
        w.pending = pending;
        w.dropped_updates += dropped;
    });
}

/// Writes `pending` at `ts` over `[lo, ts + 1)`, bounded by [`ATTEMPT_TIMEOUT_MS`] (and by the
/// tripwire, if any), and tells how it ended, or the permanent error it met. After an abandoned or timed-out attempt it asks
/// for the shard's recent upper (bounded too), so the next attempt starts from it.
async fn attempt(
    rt: &Runtime,
    write: &mut WriteHandle<String, String>,
    spec: &WriterSpec,
    pending: &[(String, String)],
    (lo, ts): (u64, u64),
    tripwire: &Option<Rc<Tripwire>>,
) -> Result<Attempt, PersistError> {
    let (lower, upper) = (Antichain::from_elem(lo), Antichain::from_elem(ts + 1));
    let updates: Vec<((String, String), u64, i64)> = pending
        .iter()
        .map(|(k, v)| ((k.clone(), v.clone()), ts, 1))
        .collect();
    let write_fut = rt.timeout(ATTEMPT_TIMEOUT_MS, async {
        match spec.mode {
            WriteMode::CompareAndAppend => write.compare_and_append(&updates, lower, upper).await,
            WriteMode::Append => write.append(&updates, lower, upper).await,
        }
    });
    let result = match tripwire.as_ref().map(|t| t.arm()) {
        None => Ok(write_fut.await),
        Some(tripped) => unless_tripped(write_fut, tripped).await,
    };
    let timed_out = match result {
        Err(Tripped(why)) => {
            let upper = rt
                .timeout(ATTEMPT_TIMEOUT_MS, write.fetch_recent_upper())
                .await
                .ok()
                .and_then(|u| u.ok().and_then(frontier));
            return Ok(Attempt::Abandoned { why, upper });
        }
        Ok(Ok(Ok(Ok(())))) => return Ok(Attempt::Committed),
        Ok(Ok(Ok(Err(mismatch)))) => {
            return Ok(Attempt::Mismatch {
                current: frontier(&mismatch.current),
            })
        }
        Ok(Ok(Err(PersistError::InvalidUsage(InvalidUsage::IndeterminateOutcome { .. })))) => {
            return Ok(Attempt::Indeterminate)
        }
        Ok(Ok(Err(e))) => return Err(e),
        Ok(Err(elapsed)) => elapsed.to_string(),
    };
    let _ = rt
        .timeout(ATTEMPT_TIMEOUT_MS, write.fetch_recent_upper())
        .await;
    Ok(Attempt::TimedOut { elapsed: timed_out })
}

/// The operation's name in the log.
fn op_name(mode: WriteMode) -> &'static str {
    match mode {
        WriteMode::CompareAndAppend => "compare_and_append",
        WriteMode::Append => "append",
    }
}

/// How an attempt was settled: its outcome and line, the digests it acknowledged and the upper
/// a mismatch reported.
struct Settled {
    outcome: Outcome,
    detail: String,
    acked: Vec<u64>,
    current: Option<u64>,
}

/// Settles `pending` after the attempt at `[lo, ts + 1)` (acknowledged values go to `acked`)
/// and counts it on the panel.
fn settle(
    ctx: &ActorCtx,
    acked: &RefCell<Acked>,
    pending: &mut Vec<(String, String)>,
    (lo, ts): (u64, u64),
    result: Attempt,
) -> Settled {
    let count = pending.len() as u64;
    let range = format!("[{lo}, {})", ts + 1);
    let mut fact_acked = Vec::new();
    let mut fact_current = None;
    let (outcome, detail) = match result {
        Attempt::Abandoned { why, upper } => {
            ctx.writer_view(|w| w.indeterminate += 1);
            let (them, they) = if count == 1 {
                ("it", "it")
            } else {
                ("them", "they")
            };
            let detail = format!(
                "{} at {range}: {why}. Without a token it cannot tell whether \
                 {they} landed: it writes {them} again at the shard's upper {}",
                plural(count, "update"),
                fmt_frontier(upper)
            );
            (Outcome::Indeterminate, detail)
        }
        Attempt::Committed => {
            fact_acked = pending
                .iter()
                .map(|(k, v)| digest(k.as_bytes(), v.as_bytes()))
                .collect();
            let mut a = acked.borrow_mut();
            for (_, v) in pending.drain(..) {
                if a.values.len() < MAX_ACKED {
                    a.values.push(v);
                } else {
                    a.forgotten += 1;
                }
            }
            drop(a);
            ctx.writer_view(|w| {
                w.committed += 1;
                w.acked_updates += count;
            });
            let detail = format!("{} at {range}", plural(count, "update"));
            (Outcome::Committed, detail)
        }
        Attempt::Mismatch { current } => {
            ctx.writer_view(|w| w.mismatches += 1);
            fact_current = current;
            let detail = format!(
                "UpperMismatch: expected {lo}, shard at {}; {} {} pending",
                fmt_frontier(current),
                plural(count, "update"),
                if count == 1 { "stays" } else { "stay" }
            );
            (Outcome::Mismatch, detail)
        }
        Attempt::Indeterminate => {
            pending.clear();
            ctx.writer_view(|w| w.indeterminate += 1);
            let detail = format!(
                "{} at {range} may or may not have committed",
                plural(count, "update")
            );
            (Outcome::Indeterminate, detail)
        }
        Attempt::TimedOut { elapsed } => {
            pending.clear();
            ctx.writer_view(|w| w.indeterminate += 1);
            let detail = format!(
                "{} at {range}: no answer ({elapsed}); may have committed",
                plural(count, "update")
            );
            (Outcome::Indeterminate, detail)
        }
    };
    Settled {
        outcome,
        detail,
        acked: fact_acked,
        current: fact_current,
    }
}

/// Records how the attempt at `[lo, ts + 1)` ended ([`settle`]), updates the panel and logs the
/// attempt with its [`Fact::Append`]. Returns the attempt's outcome.
fn record(
    ctx: &ActorCtx,
    spec: &WriterSpec,
    write: &WriteHandle<String, String>,
    acked: &RefCell<Acked>,
    pending: &mut Vec<(String, String)>,
    (lo, ts): (u64, u64),
    result: Attempt,
) -> Outcome {
    let count = pending.len() as u64;
    let Settled {
        outcome,
        detail,
        acked: fact_acked,
        current: fact_current,
    } = settle(ctx, acked, pending, (lo, ts), result);
    let (cached, shared) = (frontier(write.upper()), frontier(&write.shared_upper()));
    let at_ms = ctx.runtime.now_ms();
    let left = pending.len() as u64;
    let mut detail = detail;
    ctx.writer_view(|w| {
        let timeouts = w.in_flight.as_ref().map_or(0, |f| f.timeouts);
        if outcome == Outcome::Mismatch {
            w.last_lost = Some(LostRace {
                at_ms,
                expected: lo,
                actual: fact_current,
            });
        }
        // A write whose outcome was unknown for a while: a timeout in its compare_and_append,
        // or (without a token) an attempt that ended unknown.
        let timeouts = if outcome == Outcome::Indeterminate {
            timeouts.max(1)
        } else {
            timeouts
        };
        if timeouts > 0 {
            let resolved = outcome == Outcome::Committed;
            w.timed_out_writes += 1;
            w.timed_out_then_lost += u64::from(outcome == Outcome::Mismatch);
            if resolved {
                w.resolved_by_token += 1;
                detail.push_str(&format!(
                    "; {} on the way, resolved by the idempotency token",
                    plural(u64::from(timeouts), "timeout")
                ));
            }
            w.last_timed_out = Some(TimedOutWrite {
                at_ms,
                lower: Some(lo),
                timeouts,
                outcome,
                resolved_by_token: resolved,
            });
        }
        w.in_flight = None;
        w.pending = left;
        w.cached_upper = cached;
        w.shared_upper = shared;
        w.last = Some(LastAttempt {
            outcome,
            lower: Some(lo),
            upper: Some(ts + 1),
            updates: count,
            at_ms,
            detail: detail.clone(),
        });
    });
    let fact = Fact::Append {
        shard: spec.shard.clone(),
        writer: write.writer_id().0.clone(),
        mode: match spec.mode {
            WriteMode::CompareAndAppend => "compareAndAppend",
            WriteMode::Append => "append",
        }
        .into(),
        lower: lo,
        upper: ts + 1,
        outcome: match outcome {
            Outcome::Committed => AttemptOutcome::Committed,
            Outcome::Mismatch => AttemptOutcome::Mismatch,
            _ => AttemptOutcome::Indeterminate,
        },
        updates: count,
        acked: fact_acked,
        current: fact_current,
    };
    ctx.event_fact("writer", op_name(spec.mode), outcome, detail, Some(fact));
    outcome
}
