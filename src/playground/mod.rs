//! The playground's engine: a [`Scenario`] that runs the real components (persist shards, write
//! tasks, timestamp oracle instances; upsert replicas next) and hands the page plain data.
//!
//! A scenario owns
//! - a **runtime**: the deterministic [`Simulator`] in *seed mode*, or the browser's runtime (real
//!   timers) in *live mode*;
//! - a **location**: in memory (seed mode) or IndexedDB (live mode, given by the caller), behind
//!   the fault knobs ([`location::Faults`]) and, per process, a gate that a crash closes
//!   ([`location::ProcessGate`]);
//! - **actors grouped into processes**: writers, readers, write tasks, oracle instances and upsert
//!   replicas ([`actors`], one file per kind; what they share is in [`actor`]). Each process has its own [`PersistClient`] (its own state caches and
//!   its own id seed, drawn from the scenario's seed), as a separate machine would. Crashing a
//!   process stops its actors mid-command; restarting it starts them again in a new process with
//!   a fresh client. Actor ids (`W1`, `R1`, `T1`, `O1`) and colours outlive restarts.
//! - **observers** that read the raw location for the panels ([`observe`]), and as witnesses of
//!   every shard and timeline version for the history check ([`versions`]);
//! - the **live check of the history** ([`check`]), fed every event of the merged log as it is
//!   logged; events carry structured payloads ([`fact`]) for it.
//!
//! The page drives it with [`Command`]s (one serde enum, checked before it applies), reads a
//! [`snapshot::Snapshot`] (plain serde data), and reads the merged event log ([`log`]) after a
//! cursor. In seed mode every applied command is stamped with the simulator's step count and
//! time, and a run is a function of `(seed, stamped commands)`: a [`Replay`] rebuilds it to any
//! point, which is how the page scrubs past its kept snapshots, forks, and opens share links.
//! In live mode nothing is replayable.
//!
//! Ids are drawn from per-process seeds. In live mode the caller draws the scenario's seed once
//! (the page does it with `crypto.getRandomValues`), so two tabs on one database never draw the
//! same writer id.

use std::cell::RefCell;
use std::rc::Rc;

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

pub mod actor;
pub mod actors;
mod apply;
pub mod check;
pub mod clock;
pub mod command;
pub mod decode;
pub mod fact;
pub mod journal;
pub mod json;
mod lifecycle;
pub mod location;
pub mod log;
pub mod observe;
mod persist_log;
pub mod replay;
pub mod rows;
pub mod rules;
pub mod snapshot;
pub mod table;
pub mod upsert_source;
pub mod value;
pub mod variants;
pub mod versions;
pub mod walk;

pub use apply::Applied;
pub use command::{Command, CommandError, Stamp, Stamped};
pub use journal::{
    Journal, CAS_KEPT, COMMITS_KEPT, FOREIGN_PROCESS, NOTICES_KEPT, OWN_VERSIONS_KEPT,
};
pub use replay::Replay;
pub use snapshot::Snapshot;

use crate::location::mem::{Latency, MemBlob, MemConsensus};
use crate::location::Location;
use crate::persist::events::EventLog;
use crate::persist::{PersistClient, PersistConfig, ShardId};
use crate::runtime::sim::Simulator;
use crate::runtime::{JoinHandle, Runtime};
use crate::vec_map::VecMap;
use crate::write_task::WriteTaskLog;
use actor::{Acked, ActorView};
use location::{AliveFlag, Faults};
use observe::Observers;

/// The shard writers and readers use unless told otherwise; observed from the start.
pub const DEFAULT_SHARD: &str = "data";

/// The two ways a scenario runs.
pub enum Mode {
    /// The simulator: virtual time, stepped by the caller.
    Seed(Simulator),
    /// Real timers: the runtime runs tasks on its own.
    Live,
}

/// One process: a client and a gate, and the actors that run in it.
pub(crate) struct Process {
    pub(crate) id: String,
    pub(crate) seed: u64,
    pub(crate) alive: AliveFlag,
    pub(crate) client: PersistClient,
    pub(crate) location: Location,
    pub(crate) task_log: WriteTaskLog,
    pub(crate) restart_of: Option<String>,
    pub(crate) restarted_as: Option<String>,
    pub(crate) started_ms: u64,
    pub(crate) crashed_ms: Option<u64>,
}

/// Per-actor controls that outlive one incarnation of its task.
pub(crate) struct Actor {
    pub(crate) id: String,
    pub(crate) process: usize,
    pub(crate) spec: command::ActorSpec,
    pub(crate) view: Rc<RefCell<ActorView>>,
    pub(crate) acked: Rc<RefCell<Acked>>,
    pub(crate) hold: Rc<std::cell::Cell<bool>>,
    pub(crate) ops: Option<futures::channel::mpsc::UnboundedSender<command::TaskOp>>,
    pub(crate) task: Option<JoinHandle<()>>,
    pub(crate) incarnation: u64,
    pub(crate) replica: actors::replica::ReplicaSlot,
    /// The rule it runs without, fixed when it was added ([`rules`]).
    pub(crate) variant: Option<rules::Rule>,
}

/// A running scenario. See the module docs.
pub struct Scenario {
    mode: Mode,
    runtime: Runtime,
    seed: u64,
    rng: Xoshiro256PlusPlus,
    /// The same data without latency, faults or gates: what observers and checks read.
    truth: Location,
    faults: Faults,
    faulty: Location,
    journal: Rc<RefCell<Journal>>,
    processes: Vec<Process>,
    actors: Vec<Actor>,
    next_actor: VecMap<char, u32>,
    colours: u32,
    observers: Observers,
    observer_client: PersistClient,
    stamped: Vec<Stamped>,
    verify: Rc<RefCell<Option<snapshot::VerifyView>>>,
    cfg: PersistConfig,
    upsert: Option<actors::replica::UpsertHub>,
    rules: rules::Rules,
    /// The stage-by-stage walk of the replicas in progress ([`walk`]).
    walk: Option<walk::Walk>,
    /// The walk that finished last, until the run moves on or another command runs.
    walk_done: Option<walk::WalkDoneView>,
    /// What the last **Step replicas** press did, until another command or the run moves on.
    press: Option<walk::PressView>,
}

/// The writer and reader lease of every playground process: a crashed one's handles expire,
/// and what they wrote and never committed is swept, this long after their last heartbeat.
pub const PLAYGROUND_LEASE_MS: u64 = 10_000;

/// The largest batch part a playground process keeps inline in the state; bigger ones go to Blob.
pub const PLAYGROUND_INLINE_MAX_BYTES: u64 = 384;

/// The configuration every playground process uses.
pub fn persist_config() -> PersistConfig {
    PersistConfig {
        // Short leases (the default is 60 s), so that a crashed process's writers and readers
        // expire within seconds and the learner sees the sweep delete what they left behind.
        // Running actors keep theirs: writers commit at least once a second, listens downgrade
        // their since as they go, and a held reader heartbeats (`actors/reader.rs`). An outage
        // longer than this expires them, as it would in the original.
        writer_lease_duration_ms: PLAYGROUND_LEASE_MS,
        reader_lease_duration_ms: PLAYGROUND_LEASE_MS,
        // Every merge commits as its own version (none waits for an append to carry it), so
        // that the page shows each one, and the tours' races keep their timing.
        compaction_carry_wait_ms: 0,
        // A rollup and a collection every 16 seqnos (not the default 128), so that a learner
        // sees GC cycles within seconds.
        rollup_threshold: 16,
        // Parts up to 384 bytes stay inline in the state (the default keeps up to 4 KiB there,
        // which in the playground would be every batch): a writer's write of a few updates is
        // inline, a bigger one and compaction's merges go to Blob under a key of their own, so
        // the Shard panel shows both stores at work.
        inline_writes_single_max_bytes: PLAYGROUND_INLINE_MAX_BYTES,
        ..PersistConfig::default()
    }
}

impl Scenario {
    /// A seed-mode scenario: the simulator and an in-memory location with seeded latency.
    pub fn seeded(seed: u64) -> Scenario {
        let sim = Simulator::new(seed);
        sim.set_record_trace(false);
        let runtime = sim.runtime();
        let (blob, consensus) = (MemBlob::new(), MemConsensus::new());
        let truth = Location {
            blob: Rc::new(blob.clone()),
            consensus: Rc::new(consensus.clone()),
        };
        let raw = Location {
            blob: Rc::new(blob.with_latency(Latency::new(runtime.clone(), seed ^ 0xb1, 1, 4))),
            consensus: Rc::new(consensus.with_latency(Latency::new(
                runtime.clone(),
                seed ^ 0xc1,
                1,
                4,
            ))),
        };
        Scenario::build(Mode::Seed(sim), runtime, raw, truth, seed)
    }

    /// A live-mode scenario on `runtime` over `location` (IndexedDB in the browser). `seed` must
    /// differ between pages sharing the location; draw it from real randomness once.
    pub fn live(runtime: Runtime, location: Location, seed: u64) -> Scenario {
        Scenario::build(Mode::Live, runtime, location.clone(), location, seed)
    }

    fn build(mode: Mode, runtime: Runtime, raw: Location, truth: Location, seed: u64) -> Scenario {
        let faults = Faults::new(seed);
        let faulty = faults.wrap(&raw, &runtime);
        let cfg = persist_config();
        let observer_client =
            PersistClient::new(truth.clone(), runtime.clone(), cfg.clone(), seed ^ 0x0b5e)
                .with_events(EventLog::disabled());
        let mut scenario = Scenario {
            mode,
            runtime,
            seed,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            truth,
            faults,
            faulty,
            journal: Rc::new(RefCell::new(Journal::new())),
            processes: Vec::new(),
            actors: Vec::new(),
            next_actor: VecMap::new(),
            colours: 0,
            observers: Observers::default(),
            observer_client,
            stamped: Vec::new(),
            verify: Rc::default(),
            cfg,
            upsert: None,
            rules: rules::Rules::default(),
            walk: None,
            walk_done: None,
            press: None,
        };
        scenario.journal.borrow_mut().live = !scenario.is_seeded();
        scenario.observe_shard(DEFAULT_SHARD);
        let now = scenario.runtime.now_ms();
        let mode = if scenario.is_seeded() { "seed" } else { "live" };
        scenario
            .journal
            .borrow_mut()
            .notice(now, false, format!("{mode} mode, seed {seed}"));
        scenario
    }

    /// Rebuilds a seed-mode run from its seed and stamped commands, stopping right after the
    /// last command applied. See [`replay::Replay`] for a rebuild to any point, in slices.
    pub fn replay(seed: u64, commands: &[Stamped]) -> Result<Scenario, CommandError> {
        let at = commands
            .last()
            .map_or(Stamp { step: 0, at_ms: 0 }, |c| c.stamp);
        let mut r = replay::Replay::new(seed, commands.to_vec(), at)?;
        r.advance(u64::MAX)?;
        r.finish()
    }

    /// Steps the simulator until it has taken `stamp.step` steps, then lets virtual time reach
    /// `stamp.at_ms` (which takes no steps when the stamp came from a run that stopped there).
    pub fn advance_to(&mut self, stamp: Stamp) -> Result<(), CommandError> {
        let Mode::Seed(sim) = &self.mode else {
            return Err(live_only_error());
        };
        if stamp.step < sim.steps() || stamp.at_ms < sim.now_ms() {
            return Err(CommandError(format!(
                "stamp {stamp:?} is in the past of this run (step {}, {} ms)",
                sim.steps(),
                sim.now_ms()
            )));
        }
        if stamp.step > sim.steps() || stamp.at_ms > sim.now_ms() {
            // The run goes on: a stage-by-stage walk of the replicas ends ([`walk`]).
            self.end_walk();
        }
        let Mode::Seed(sim) = &self.mode else {
            return Err(live_only_error());
        };
        while sim.steps() < stamp.step {
            sim.step().map_err(sim_error)?;
            self.pump();
        }
        if sim.now_ms() < stamp.at_ms {
            sim.run_until_then(stamp.at_ms, || self.pump())
                .map_err(sim_error)?;
        }
        Ok(())
    }

    /// Whether this is a seed-mode scenario.
    pub fn is_seeded(&self) -> bool {
        matches!(self.mode, Mode::Seed(_))
    }

    /// The raw location (no latency, faults or gates): what the observers read. Tests use it to
    /// break the store on purpose.
    pub fn store(&self) -> Location {
        self.truth.clone()
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The clock.
    pub fn now_ms(&self) -> u64 {
        self.runtime.now_ms()
    }

    /// The commands applied so far, with their stamps (seed mode; live-mode stamps carry only
    /// the time).
    pub fn stamped(&self) -> &[Stamped] {
        &self.stamped
    }

    /// Takes `n` simulator steps (seed mode only).
    pub fn step(&mut self, n: u64) -> Result<(), CommandError> {
        if n > 0 {
            self.end_walk();
        }
        let Mode::Seed(sim) = &self.mode else {
            return Err(live_only_error());
        };
        for _ in 0..n {
            sim.step().map_err(sim_error)?;
            self.pump();
        }
        Ok(())
    }

    /// Runs `ms` of virtual time (seed mode only).
    pub fn run_for(&mut self, ms: u64) -> Result<(), CommandError> {
        if ms > 0 {
            self.end_walk();
        }
        let Mode::Seed(sim) = &self.mode else {
            return Err(live_only_error());
        };
        let deadline = sim.now_ms().saturating_add(ms);
        sim.run_until_then(deadline, || self.pump())
            .map_err(sim_error)
    }

    /// Simulator steps taken so far (0 in live mode).
    pub fn steps(&self) -> u64 {
        match &self.mode {
            Mode::Seed(sim) => sim.steps(),
            Mode::Live => 0,
        }
    }

    /// Up to `limit` events after `cursor` (pumps pending events first).
    pub fn events_after(&mut self, cursor: u64, limit: usize) -> Vec<log::PlayEvent> {
        self.pump();
        self.journal.borrow().log.after(cursor, limit)
    }

    fn observe_shard(&mut self, name: &str) {
        if self.observers.shards.contains_key(name) {
            return;
        }
        let Ok(shard) = ShardId::new(name) else {
            return;
        };
        let cell = Rc::default();
        let period = self.observe_period_ms();
        let task = self.runtime.spawn(
            &format!("observe {name}"),
            observe::observe_shard(
                self.observer_client.clone(),
                shard,
                Rc::clone(&cell),
                period,
                Rc::clone(&self.journal),
            ),
        );
        self.observers.shards.insert(name.to_string(), (cell, task));
    }

    fn observe_timeline(&mut self, timeline: &str) {
        if self.observers.timelines.contains_key(timeline) {
            return;
        }
        let cell = Rc::default();
        let task = self.runtime.spawn(
            &format!("observe oracle {timeline}"),
            observe::observe_timeline(
                Rc::clone(&self.truth.consensus),
                self.runtime.clone(),
                timeline.to_string(),
                Rc::clone(&cell),
                self.observe_period_ms(),
                Rc::clone(&self.journal),
            ),
        );
        self.observers
            .timelines
            .insert(timeline.to_string(), (cell, task));
    }

    fn observe_period_ms(&self) -> u64 {
        if self.is_seeded() {
            50
        } else {
            200
        }
    }

    /// The upsert source, generator and checker, started with the first replica.
    fn upsert_hub(&mut self) -> &actors::replica::UpsertHub {
        if self.upsert.is_none() {
            let seed = self.next_seed();
            let client = PersistClient::new(
                self.truth.clone(),
                self.runtime.clone(),
                self.cfg.clone(),
                seed,
            )
            .with_events(EventLog::disabled());
            let hub = actors::replica::UpsertHub::start(
                &self.runtime,
                client,
                Rc::clone(&self.journal),
                seed,
            );
            self.upsert = Some(hub);
            self.observe_shard(upsert_source::SOURCE_SHARD);
            self.observe_shard(command::UPSERT_SHARD);
        }
        self.upsert.as_ref().expect("just set")
    }

    /// Audits every write-task commit on `shard` the journal keeps against the shard's history
    /// ([`crate::write_task::audit::audit_commits`]): after each commit, the shard must equal the
    /// committing task's desired collection. The shard's since must still be below the first
    /// commit (a holding reader keeps it there). Seed mode: steps the simulator until the audit
    /// is done, at most 10 s of virtual time. Native builds only (tests).
    pub fn audit_tasks(
        &mut self,
        shard: &str,
    ) -> Result<crate::write_task::audit::AuditReport, CommandError> {
        if !self.is_seeded() {
            return Err(live_only_error());
        }
        self.pump();
        let events: Vec<_> = (self.journal.borrow().task_commits.iter())
            .filter(|(s, _)| s == shard)
            .map(|(_, e)| e.clone())
            .collect();
        let shard = ShardId::new(shard).map_err(CommandError)?;
        let client = self.observer_client.clone();
        use crate::write_task::audit::{AuditError, AuditReport};
        type Cell = Rc<RefCell<Option<Result<AuditReport, AuditError>>>>;
        let cell: Cell = Rc::default();
        let out = Rc::clone(&cell);
        let task = self.runtime.spawn("audit tasks", async move {
            let reader = client.open_leased_reader::<crate::persist::codec::Row, ()>(&shard);
            let result = match reader.await {
                Ok(r) => crate::write_task::audit::audit_commits(r, &events).await,
                Err(e) => Err(AuditError::persist("open reader", e)),
            };
            *out.borrow_mut() = Some(result);
        });
        let deadline = self.now_ms() + 10_000;
        while cell.borrow().is_none() && self.now_ms() < deadline {
            self.step(1)?;
        }
        drop(task);
        let result = cell.borrow_mut().take();
        let result = result.ok_or_else(|| CommandError("the audit did not finish".into()))?;
        result.map_err(|e| CommandError(format!("the audit failed: {e}")))
    }

    fn next_seed(&mut self) -> u64 {
        self.rng.next_u64()
    }
}

fn live_only_error() -> CommandError {
    CommandError("live mode runs on real time: there is nothing to step".into())
}

fn sim_error(e: crate::runtime::sim::SimError) -> CommandError {
    CommandError(format!("the simulation stopped: {e}"))
}
