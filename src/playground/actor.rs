//! What every actor shares: its place in its life ([`ActorState`]), the panel data the page
//! shows for it ([`ActorView`], with one [`ActorDetail`] per kind), and the context its task works
//! with ([`ActorCtx`]: its process's client, the runtime, the shared journal). The actors' loops,
//! one file per kind, are in the `actors` module above it; this module imports none of them, so every kind
//! and every reader of the views (the snapshot, the scenario) can depend on it.
//!
//! Invariants: an actor's id (`W1`, `R2`, `T1`, `O1`, `U1`) and colour outlive restarts; the
//! handle id it shows is the one it holds in its current process; `detail` is of the actor's
//! kind once the actor has started (the `*_view` helpers make it so before they change it).

use std::cell::RefCell;
use std::rc::Rc;

use serde::Serialize;

use super::command::ActorSpec;
use super::fact::Fact;
use super::journal::Journal;
use super::log::{Outcome, Pending};
use super::rules::Rule;
use crate::persist::{PersistClient, ShardId};
use crate::runtime::Runtime;

/// How many window allocations an oracle view keeps.
pub const WINDOWS_KEPT: usize = 24;

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
    /// Storage timeouts (indeterminate compare_and_sets) its command met so far.
    pub timeouts: u32,
}

/// A lost race, as the Writers row keeps it until the next one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LostRace {
    /// When.
    pub at_ms: u64,
    /// The upper the writer expected (its attempt's lower).
    pub expected: u64,
    /// The shard's actual upper, as the mismatch reported it.
    pub actual: Option<u64>,
}

/// A write whose compare_and_set timed out at least once, kept until the next such write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimedOutWrite {
    /// When the attempt ended.
    pub at_ms: u64,
    /// Its lower.
    pub lower: Option<u64>,
    /// Storage timeouts it met.
    pub timeouts: u32,
    /// How it ended: committed (persist's idempotency token told it that its own write landed,
    /// or its retry did), lost the race, or still unknown.
    pub outcome: Outcome,
    /// Whether the idempotency token resolved it (it committed after a timeout).
    pub resolved_by_token: bool,
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
    /// The latest lost race, kept until the next one.
    pub last_lost: Option<LostRace>,
    /// The latest write that met a storage timeout, kept until the next one.
    pub last_timed_out: Option<TimedOutWrite>,
    /// Storage timeouts its writes met (each an indeterminate compare_and_set of a
    /// compare_and_append); one write may meet several.
    pub timeouts: u64,
    /// Writes that met at least one timeout: their outcome was unknown (`?`) until persist read
    /// the state back and looked for the write's idempotency token. Each then ended as
    /// committed (`resolved_by_token`), lost the race (`timed_out_then_lost`) or, without a
    /// token, stayed unknown (counted in `indeterminate`).
    pub timed_out_writes: u64,
    /// Writes that met a timeout, found their token absent, retried and lost the race.
    pub timed_out_then_lost: u64,
    /// Storage timeouts its handle's other commands met (heartbeats, compaction, rollups: the
    /// process's upkeep, which retries them itself); not writes.
    pub other_timeouts: u64,
    /// Attempts that met a timeout and then committed: the idempotency token resolved them.
    pub resolved_by_token: u64,
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
    /// The latest re-sync, kept until the next one.
    pub last_resync: Option<Resync>,
    /// `to_write` in signed rows, as last reported (by a re-sync or a write attempt; empty
    /// once a write committed).
    pub to_write: crate::write_task::SignedRows,
    /// What the latest committed write carried, in signed rows, kept until the next one.
    pub last_written: Option<crate::write_task::SignedRows>,
}

/// A write task's re-sync: `to_write = desired - snapshot(upper - 1)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resync {
    /// When.
    pub at_ms: u64,
    /// The shard's upper it adopted.
    pub upper: Option<u64>,
    /// Rows the shard held at `upper - 1`.
    pub shard_rows: u64,
    /// Rows in `desired`.
    pub desired_rows: u64,
    /// Rows of the difference it will write (`to_write`).
    pub to_write_rows: u64,
    /// That difference in signed rows: what it adds and what it retracts.
    pub to_write: crate::write_task::SignedRows,
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
    /// The durable upper an earlier instance had stored, which this one resumed above (none
    /// on a new timeline).
    pub resumed_from: Option<u64>,
    /// It runs without the durable bound (the variant): it hands out timestamps past its durable
    /// upper, so its instances' timestamps need not be below the upper a restart resumes above.
    pub unbounded: bool,
}

/// What an actor of each kind shows beyond its state.
// Task (~530 bytes) is the largest, Writer (~320) next: boxing Task would save ~200 bytes per
// actor view of a snapshot, not worth the indirection at every place that builds or reads one
// (the serialized form is the same either way). The replica's snapshot, far larger, is boxed.
#[allow(clippy::large_enum_variant)]
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
    Task(TaskView),
    /// An oracle instance.
    Oracle(OracleView),
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
    pub variant: Option<Rule>,
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

    /// Changes its writer panel data (making it a writer's first).
    pub(crate) fn writer_view(&self, f: impl FnOnce(&mut WriterView)) {
        self.detail(
            ActorDetail::Writer,
            |d| match d {
                ActorDetail::Writer(w) => Some(w),
                _ => None,
            },
            f,
        )
    }

    /// Changes its reader panel data (making it a reader's first).
    pub(crate) fn reader_view(&self, f: impl FnOnce(&mut ReaderView)) {
        self.detail(
            ActorDetail::Reader,
            |d| match d {
                ActorDetail::Reader(r) => Some(r),
                _ => None,
            },
            f,
        )
    }

    /// Changes its oracle panel data (making it an oracle's first).
    pub(crate) fn oracle_view(&self, f: impl FnOnce(&mut OracleView)) {
        self.detail(
            ActorDetail::Oracle,
            |d| match d {
                ActorDetail::Oracle(o) => Some(o),
                _ => None,
            },
            f,
        )
    }

    /// Applies `f` to the detail of kind `V` (`wrap` makes one, `get` finds one), starting from
    /// `V::default()` if the detail is of another kind.
    fn detail<V: Default>(
        &self,
        wrap: fn(V) -> ActorDetail,
        get: fn(&mut ActorDetail) -> Option<&mut V>,
        f: impl FnOnce(&mut V),
    ) {
        let mut view = self.view.borrow_mut();
        if get(&mut view.detail).is_none() {
            view.detail = wrap(V::default());
        }
        if let Some(v) = get(&mut view.detail) {
            f(v);
        }
    }

    /// The shard named `name`, or `None` after marking the actor failed (a bad name).
    pub(crate) fn shard(&self, component: &'static str, name: &str) -> Option<ShardId> {
        match ShardId::new(name) {
            Ok(s) => Some(s),
            Err(e) => {
                self.fail(component, "bad shard", e);
                None
            }
        }
    }
}
