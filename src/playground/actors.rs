//! The actors' loops: writers and readers (write tasks and oracle instances are in
//! [`super::services`]). Each actor runs as one task on the scenario's runtime, inside a process:
//! it uses that process's client and storage gate, and publishes what it is doing into its
//! [`ActorView`], which snapshots copy. Its id (`W1`, `R2`) outlives restarts; the persist handle
//! it opens is new in every process.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;
use timely::progress::Antichain;

use super::command::{ActorSpec, ReaderSpec, WriteMode, WriterSpec};
use super::fact::{digest, AttemptOutcome, Fact};
use super::log::{Outcome, Pending};
use super::variants::writer::{unless_tripped, Tripwire};
use super::Journal;
use crate::persist::error::{InvalidUsage, PersistError};
use crate::persist::events::frontier;
use crate::persist::read::ListenEvent;
use crate::persist::{PersistClient, ShardId};
use crate::runtime::Runtime;

/// How long one write may take before the writer calls it indeterminate and moves on.
pub const ATTEMPT_TIMEOUT_MS: u64 = 5_000;
/// The most updates a writer keeps pending (a writer that cannot write drops what it generates
/// beyond this, and counts it).
pub const MAX_PENDING: usize = 2_000;
/// The most acknowledged values an actor remembers for [`super::Scenario`]'s verify.
pub const MAX_ACKED: usize = 200_000;

/// Where an actor is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ActorState {
    /// Opening its handles.
    Starting,
    /// Working.
    Running,
    /// Its process crashed; restart the process to bring it back.
    Crashed,
    /// It stopped on an error (see `error`).
    Failed,
}

/// The outcome of an actor's latest attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LastAttempt {
    /// What came of it.
    pub outcome: Outcome,
    /// Its lower (a writer's expected upper).
    pub lower: Option<u64>,
    /// Its new upper.
    pub upper: Option<u64>,
    /// Updates carried.
    pub updates: u64,
    /// When it ended.
    pub at_ms: u64,
    /// A line of text.
    pub detail: String,
}

/// A write in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InFlight {
    /// Its lower.
    pub lower: Option<u64>,
    /// Its new upper.
    pub upper: Option<u64>,
    /// Updates carried.
    pub updates: u64,
    /// When it started.
    pub since_ms: u64,
    /// Whether persist reported a storage error and is retrying it.
    pub retrying: bool,
}

/// A writer's or write task's panel data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriterView {
    /// The handle's cached upper.
    pub cached_upper: Option<u64>,
    /// The process-wide shared upper of the shard.
    pub shared_upper: Option<u64>,
    /// Updates waiting to be written (`to_write`).
    pub pending: u64,
    /// The write in flight.
    pub in_flight: Option<InFlight>,
    /// The latest finished attempt.
    pub last: Option<LastAttempt>,
    /// Attempts that committed.
    pub committed: u64,
    /// Attempts that lost to another writer.
    pub mismatches: u64,
    /// Attempts whose outcome is unknown.
    pub indeterminate: u64,
    /// Updates acknowledged (committed).
    pub acked_updates: u64,
    /// Updates generated but dropped because the writer could not keep up.
    pub dropped_updates: u64,
}

/// A reader's panel data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReaderView {
    /// Its since.
    pub since: Option<u64>,
    /// Its listen's frontier: every update before it has been delivered.
    pub frontier: Option<u64>,
    /// Updates delivered so far (snapshot included).
    pub updates_seen: u64,
    /// Whether it holds its since.
    pub hold: bool,
}

/// What an actor of each kind shows beyond its state.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ActorDetail {
    /// Nothing yet.
    None,
    /// A writer.
    Writer(WriterView),
    /// A reader.
    Reader(ReaderView),
    /// A write task.
    Task(super::services::TaskView),
    /// An oracle instance.
    Oracle(super::services::OracleView),
    /// An upsert replica (its own snapshot: operator, stash, state, sink, counters).
    Replica(Box<crate::upsert::replica::ReplicaSnapshot>),
}

/// Everything the page shows about an actor.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActorView {
    /// `W1`, `R1`, `T1`, `O1`.
    pub id: String,
    /// Its colour index, stable for its life.
    pub colour: u32,
    /// Its process (the latest one, after restarts).
    pub process: String,
    /// What it is.
    pub spec: ActorSpec,
    /// Where it is in its life.
    pub state: ActorState,
    /// The persist handle id (or oracle epoch) it holds in its current process.
    pub handle_id: Option<String>,
    /// Why it failed, or the latest error it reported.
    pub error: Option<String>,
    /// Kind-specific data.
    pub detail: ActorDetail,
    /// The rule it runs without (its variant, chosen when it was added), if any.
    pub variant: Option<super::rules::Rule>,
}

/// The values a writer had acknowledged, kept across its restarts.
#[derive(Debug, Default)]
pub struct Acked {
    /// The values (unique per write).
    pub values: Vec<String>,
    /// Acknowledged values not kept (beyond [`MAX_ACKED`]).
    pub forgotten: u64,
}

/// What an actor's task works with.
pub struct ActorCtx {
    /// The actor id.
    pub id: String,
    /// The process id.
    pub process: String,
    /// The runtime.
    pub runtime: Runtime,
    /// The process's client.
    pub client: PersistClient,
    /// The seed of this incarnation.
    pub seed: u64,
    /// Shared records.
    pub journal: Rc<RefCell<Journal>>,
    /// What the page shows.
    pub view: Rc<RefCell<ActorView>>,
}

impl ActorCtx {
    /// Records an event of this actor.
    pub fn event(&self, component: &'static str, kind: &str, outcome: Outcome, detail: String) {
        self.event_fact(component, kind, outcome, detail, None);
    }

    /// Records an event of this actor with its [`Fact`].
    pub fn event_fact(
        &self,
        component: &'static str,
        kind: &str,
        outcome: Outcome,
        detail: String,
        fact: Option<Fact>,
    ) {
        self.journal.borrow_mut().log.record(Pending {
            at_ms: self.runtime.now_ms(),
            actor: Some(self.id.clone()),
            process: Some(self.process.clone()),
            component,
            kind: kind.to_string(),
            outcome,
            detail,
            fact,
        });
    }

    /// Notes that persist handle `handle` belongs to this actor, and shows it.
    pub fn register(&self, handle: &str) {
        self.journal
            .borrow_mut()
            .ids
            .insert(handle.to_string(), self.id.clone());
        let mut view = self.view.borrow_mut();
        view.handle_id = Some(handle.to_string());
        view.state = ActorState::Running;
        view.error = None;
    }

    /// Marks the actor failed.
    pub fn fail(&self, component: &'static str, what: &str, err: impl std::fmt::Display) {
        let msg = format!("{what}: {err}");
        self.event(component, what, Outcome::Error, msg.clone());
        let mut view = self.view.borrow_mut();
        view.state = ActorState::Failed;
        view.error = Some(msg);
    }

    fn writer_view(&self, f: impl FnOnce(&mut WriterView)) {
        let mut view = self.view.borrow_mut();
        if !matches!(view.detail, ActorDetail::Writer(_)) {
            view.detail = ActorDetail::Writer(WriterView::default());
        }
        if let ActorDetail::Writer(w) = &mut view.detail {
            f(w);
        }
    }

    fn reader_view(&self, f: impl FnOnce(&mut ReaderView)) {
        let mut view = self.view.borrow_mut();
        if !matches!(view.detail, ActorDetail::Reader(_)) {
            view.detail = ActorDetail::Reader(ReaderView::default());
        }
        if let ActorDetail::Reader(r) = &mut view.detail {
            f(r);
        }
    }
}

fn shard_id(ctx: &ActorCtx, name: &str) -> Option<ShardId> {
    match ShardId::new(name) {
        Ok(s) => Some(s),
        Err(e) => {
            ctx.fail("scenario", "bad shard", e);
            None
        }
    }
}

/// A writer: generates `rate_per_s` updates a second over its key range and writes whatever is
/// pending in one batch at its cached upper, `[upper, max(now, upper) + 1)`.
///
/// With a `tripwire` (the [`Rule::IdempotencyToken`](super::rules::Rule) variant, see
/// [`super::variants::writer`]) an attempt that meets an indeterminate compare_and_set is
/// abandoned, and its updates stay pending for the next attempt, at the shard's new upper.
pub async fn run_writer(
    ctx: Rc<ActorCtx>,
    spec: WriterSpec,
    acked: Rc<RefCell<Acked>>,
    tripwire: Option<Rc<Tripwire>>,
) {
    let Some(shard) = shard_id(&ctx, &spec.shard) else {
        return;
    };
    let mut write = match ctx.client.open_writer::<String, String>(&shard).await {
        Ok(w) => w,
        Err(e) => return ctx.fail("writer", "open_writer", e),
    };
    ctx.register(&write.writer_id().0);
    ctx.event(
        "writer",
        "open",
        Outcome::Info,
        format!("opened {} on {shard}", write.writer_id().0),
    );
    let rt = ctx.runtime.clone();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(ctx.seed);
    let period_ms = (1_000 / u64::from(spec.rate_per_s.max(1))).max(1);
    let span = u64::from(spec.key_hi - spec.key_lo);
    let mut pending: Vec<(String, String)> = Vec::new();
    // A seeded phase, so that writers of one rate do not all fire at the same instants.
    let mut next_gen_ms = rt.now_ms() + rng.next_u64() % period_ms;
    let mut n = 0u64;
    let writer_id = write.writer_id().0.clone();
    loop {
        let now = rt.now_ms();
        let mut dropped = 0u64;
        while next_gen_ms <= now {
            if pending.len() >= MAX_PENDING {
                dropped += 1;
            } else {
                let key = u64::from(spec.key_lo) + rng.next_u64() % span;
                n += 1;
                pending.push((format!("k{key:04}"), format!("{}:{writer_id}#{n}", ctx.id)));
            }
            next_gen_ms += period_ms;
        }
        ctx.writer_view(|w| {
            w.pending = pending.len() as u64;
            w.dropped_updates += dropped;
        });
        if pending.is_empty() {
            rt.sleep_until(next_gen_ms).await;
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
        let (lower, upper) = (Antichain::from_elem(lo), Antichain::from_elem(ts + 1));
        let updates: Vec<((String, String), u64, i64)> = pending
            .iter()
            .map(|(k, v)| ((k.clone(), v.clone()), ts, 1))
            .collect();
        let count = updates.len() as u64;
        ctx.writer_view(|w| {
            w.in_flight = Some(InFlight {
                lower: Some(lo),
                upper: Some(ts + 1),
                updates: count,
                since_ms: now,
                retrying: false,
            })
        });
        let attempt = rt.timeout(ATTEMPT_TIMEOUT_MS, async {
            match spec.mode {
                WriteMode::CompareAndAppend => {
                    write.compare_and_append(&updates, lower, upper).await
                }
                WriteMode::Append => write.append(&updates, lower, upper).await,
            }
        });
        let result = match tripwire.as_ref().map(|t| t.arm()) {
            None => Ok(attempt.await),
            Some(tripped) => unless_tripped(attempt, tripped).await,
        };
        let op = match spec.mode {
            WriteMode::CompareAndAppend => "compare_and_append",
            WriteMode::Append => "append",
        };
        let range = format!("[{lo}, {})", ts + 1);
        let mut fact_acked = Vec::new();
        let mut fact_current = None;
        let (outcome, detail) = match result {
            Err(why) => {
                // No token: whether the batch landed cannot be told, so it stays pending.
                ctx.writer_view(|w| w.indeterminate += 1);
                let upper = rt
                    .timeout(ATTEMPT_TIMEOUT_MS, write.fetch_recent_upper())
                    .await
                    .ok()
                    .and_then(|u| u.ok().and_then(frontier));
                (
                    Outcome::Indeterminate,
                    format!(
                        "{count} updates at {range}: {why}. Without a token it cannot tell \
                         whether they landed: it writes them again at the shard's upper {}",
                        fmt_frontier(upper)
                    ),
                )
            }
            Ok(Ok(Ok(Ok(())))) => {
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
                (
                    Outcome::Committed,
                    format!("{} at {range}", plural(count, "update")),
                )
            }
            Ok(Ok(Ok(Err(mismatch)))) => {
                ctx.writer_view(|w| w.mismatches += 1);
                fact_current = frontier(&mismatch.current);
                (
                    Outcome::Mismatch,
                    format!(
                        "UpperMismatch: expected {lo}, shard at {}; {count} updates stay pending",
                        fmt_frontier(frontier(&mismatch.current))
                    ),
                )
            }
            Ok(Ok(Err(PersistError::InvalidUsage(InvalidUsage::IndeterminateOutcome {
                ..
            })))) => {
                pending.clear();
                ctx.writer_view(|w| w.indeterminate += 1);
                (
                    Outcome::Indeterminate,
                    format!("{count} updates at {range} may or may not have committed"),
                )
            }
            Ok(Ok(Err(e))) => return ctx.fail("writer", op, e),
            Ok(Err(elapsed)) => {
                pending.clear();
                ctx.writer_view(|w| w.indeterminate += 1);
                let _ = rt
                    .timeout(ATTEMPT_TIMEOUT_MS, write.fetch_recent_upper())
                    .await;
                (
                    Outcome::Indeterminate,
                    format!(
                        "{count} updates at {range}: no answer ({elapsed}); may have committed"
                    ),
                )
            }
        };
        let (cached, shared) = (frontier(write.upper()), frontier(&write.shared_upper()));
        let at_ms = rt.now_ms();
        ctx.writer_view(|w| {
            w.in_flight = None;
            w.pending = pending.len() as u64;
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
            writer: writer_id.clone(),
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
        ctx.event_fact("writer", op, outcome, detail, Some(fact));
        if !matches!(outcome, Outcome::Committed | Outcome::Mismatch) {
            // Storage is in trouble: give it a moment. (A lost race retries at once, at the
            // upper it just learned.)
            rt.sleep(period_ms.min(50)).await;
        }
    }
}

/// `1 update`, `2 updates`.
pub fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Formats an `Option<u64>` frontier (`None` is empty, "finished").
pub fn fmt_frontier(f: Option<u64>) -> String {
    f.map_or_else(|| "[] (finished)".to_string(), |t| t.to_string())
}

/// A reader: opens a leased reader, subscribes from its since and consumes the listen, unless
/// told to hold, when it stops consuming and its since stays where it is.
pub async fn run_reader(ctx: Rc<ActorCtx>, spec: ReaderSpec, hold: Rc<Cell<bool>>) {
    let Some(shard) = shard_id(&ctx, &spec.shard) else {
        return;
    };
    let read = match ctx
        .client
        .open_leased_reader::<String, String>(&shard)
        .await
    {
        Ok(r) => r,
        Err(e) => return ctx.fail("reader", "open_leased_reader", e),
    };
    ctx.register(&read.reader_id().0);
    let as_of = read.since().clone();
    let start = frontier(&as_of);
    ctx.reader_view(|r| {
        r.since = start;
        r.hold = hold.get();
    });
    ctx.event(
        "reader",
        "open",
        Outcome::Info,
        format!(
            "opened {} on {shard} with since {}",
            read.reader_id().0,
            fmt_frontier(start)
        ),
    );
    let (snapshot, mut listen) = match read.subscribe(as_of).await {
        Ok(s) => s,
        Err(e) => return ctx.fail("reader", "subscribe", e),
    };
    let rt = ctx.runtime.clone();
    let mut seen = snapshot.len() as u64;
    ctx.reader_view(|r| {
        r.updates_seen = seen;
        r.frontier = frontier(listen.frontier());
    });
    loop {
        let holding = hold.get();
        ctx.reader_view(|r| r.hold = holding);
        if holding {
            rt.sleep(100).await;
            continue;
        }
        let emitted_from = frontier(listen.frontier());
        let events = match listen.next().await {
            Ok(e) => e,
            Err(e) => return ctx.fail("reader", "listen", e),
        };
        for event in events {
            match event {
                ListenEvent::Updates(u) => seen += u.len() as u64,
                ListenEvent::Progress(p) => {
                    let f = frontier(&p);
                    // The listen holds its since at the frontier it emitted from.
                    ctx.reader_view(|r| {
                        r.frontier = f;
                        r.since = emitted_from;
                        r.updates_seen = seen;
                    });
                }
            }
        }
    }
}
