//! [`UpsertPipeline`]: a source, one shard, and replicas that race to write it, with a checker.
//!
//! Each replica is its own process: its own [`PersistClient`] (its own state cache) over the
//! shared location, its own timely worker, sink and persist source ([`start_replica`]). They
//! read the same [`SourceLog`] at their own speeds. [`UpsertPipeline::crash`] drops a running
//! replica (aborting its tasks); [`UpsertPipeline::start`] (re)starts one from the shard's
//! current upper. A checker ([`run_checker`]) follows the shard and compares it with the
//! reference model at every upper. [`UpsertPipeline::snapshot`] renders everything as plain data.

use std::cell::RefCell;
use std::rc::Rc;

use serde::Serialize;

use super::driver::{start_replica, RunningReplica};
use super::error::{CellsError, ReplicaStartError};
use super::observe::{UpsertCounters, UpsertLog};
use super::reference::{run_checker, CheckerReport};
use super::replica::{ReplicaConfig, ReplicaSnapshot};
use super::source::SourceLog;
use super::types::UpsertKey;
use crate::location::Location;
use crate::persist::codec::{Datum, Row, Timestamp};
use crate::persist::{PersistClient, PersistConfig, ShardId};
use crate::runtime::{JoinHandle, Runtime};

/// The whole pipeline as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PipelineSnapshot {
    /// The source log's upper.
    pub source_upper: Timestamp,
    /// Messages in the source log.
    pub source_messages: u64,
    /// Each replica slot: its latest snapshot, or `None` while it is down.
    pub replicas: Vec<Option<ReplicaSnapshot>>,
    /// What the checker found.
    pub checker: CheckerReport,
    /// Keys as the operator shows them (short hex) and their key column.
    pub keys: Vec<(String, i64)>,
}

/// See the module docs.
pub struct UpsertPipeline {
    location: Location,
    replica_locations: Vec<Option<Location>>,
    runtime: Runtime,
    persist_cfg: PersistConfig,
    shard: ShardId,
    source: Rc<RefCell<SourceLog>>,
    configs: Vec<ReplicaConfig>,
    running: Vec<Option<RunningReplica>>,
    generations: Vec<u64>,
    seed: u64,
    log: UpsertLog<Timestamp>,
    report: Rc<RefCell<CheckerReport>>,
    checker: Option<JoinHandle<()>>,
    retired: UpsertCounters,
    persist_events: Option<crate::persist::events::EventLog>,
    #[cfg(any(feature = "library", not(target_arch = "wasm32")))]
    entropy: Option<crate::persist::Entropy>,
}

impl UpsertPipeline {
    /// A pipeline writing `shard` on `location`, with one slot per replica config (none
    /// started). Ids and shuffles are drawn from `seed`.
    pub fn new(
        location: Location,
        runtime: Runtime,
        persist_cfg: PersistConfig,
        shard: ShardId,
        configs: Vec<ReplicaConfig>,
        seed: u64,
    ) -> Self {
        let n = configs.len();
        UpsertPipeline {
            location,
            replica_locations: vec![None; n],
            runtime,
            persist_cfg,
            shard,
            source: Rc::new(RefCell::new(SourceLog::new())),
            configs,
            running: (0..n).map(|_| None).collect(),
            generations: vec![0; n],
            seed,
            log: UpsertLog::new(),
            report: Rc::default(),
            checker: None,
            retired: UpsertCounters::default(),
            persist_events: None,
            #[cfg(any(feature = "library", not(target_arch = "wasm32")))]
            entropy: None,
        }
    }

    /// Every replica's and the checker's client draws its ids from `fill` (a CSPRNG) instead
    /// of the seed: for a durable or shared location (see [`crate::persist::Entropy`]). The
    /// seed still drives the shuffles.
    #[cfg(any(feature = "library", not(target_arch = "wasm32")))]
    pub fn with_entropy(mut self, fill: crate::persist::Entropy) -> Self {
        self.entropy = Some(fill);
        self
    }

    /// Replaces the event log (for example with a disabled one).
    pub fn with_log(mut self, log: UpsertLog<Timestamp>) -> Self {
        self.log = log;
        self
    }

    /// Replaces every replica client's persist event log (for example with a disabled one).
    pub fn with_persist_events(mut self, events: crate::persist::events::EventLog) -> Self {
        self.persist_events = Some(events);
        self
    }

    /// The shared source log.
    pub fn source(&self) -> Rc<RefCell<SourceLog>> {
        Rc::clone(&self.source)
    }

    /// The event log of every replica.
    pub fn log(&self) -> &UpsertLog<Timestamp> {
        &self.log
    }

    /// The shard.
    pub fn shard(&self) -> &ShardId {
        &self.shard
    }

    /// The number of replica slots.
    pub fn replicas(&self) -> usize {
        self.configs.len()
    }

    /// The running replica in slot `i`, if it is up.
    pub fn replica(&self, i: usize) -> Option<&RunningReplica> {
        self.running.get(i).and_then(Option::as_ref)
    }

    /// Gives replica `i` its own connection to the location (another process would have one).
    pub fn set_replica_location(&mut self, i: usize, location: Location) {
        if let Some(slot) = self.replica_locations.get_mut(i) {
            *slot = Some(location);
        }
    }

    fn client(&self, salt: u64) -> PersistClient {
        self.client_on(self.location.clone(), salt)
    }

    fn client_on(&self, location: Location, salt: u64) -> PersistClient {
        let client = PersistClient::new(
            location,
            self.runtime.clone(),
            self.persist_cfg.clone(),
            self.seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        );
        #[cfg(any(feature = "library", not(target_arch = "wasm32")))]
        let client = match &self.entropy {
            Some(fill) => client.with_entropy(Rc::clone(fill)),
            None => client,
        };
        match &self.persist_events {
            Some(events) => client.with_events(events.clone()),
            None => client,
        }
    }

    /// Starts the checker (before any replica, so its reader holds the since at 0).
    pub async fn start_checker(&mut self) {
        let client = self.client(u64::MAX);
        let fut = run_checker(
            client,
            self.shard.clone(),
            Rc::clone(&self.source),
            Rc::clone(&self.report),
        );
        self.checker = Some(self.runtime.spawn("checker", fut));
        // Wait until its reader holds the since (or it failed trying).
        loop {
            let r = self.report.borrow().clone();
            if r.registered || !r.violations.is_empty() {
                break;
            }
            self.runtime.sleep(1).await;
        }
    }

    /// What the checker found so far.
    pub fn report(&self) -> CheckerReport {
        self.report.borrow().clone()
    }

    /// (Re)starts replica `i` from the shard's current upper. A running one is crashed first.
    pub async fn start(&mut self, i: usize) -> Result<(), ReplicaStartError> {
        let cfg = self
            .configs
            .get(i)
            .cloned()
            .ok_or(ReplicaStartError::NoSlot(i))?;
        self.crash(i);
        let generation = self.generations[i];
        let location = self.replica_locations[i]
            .clone()
            .unwrap_or_else(|| self.location.clone());
        let client = self.client_on(location, i as u64 * 1000 + generation);
        let running = start_replica(
            client,
            self.shard.clone(),
            Rc::clone(&self.source),
            cfg,
            generation,
            self.log.clone(),
        )
        .await?;
        self.generations[i] += 1;
        self.running[i] = Some(running);
        Ok(())
    }

    /// Crashes replica `i` (drops it, aborting its tasks). Returns whether it was up.
    pub fn crash(&mut self, i: usize) -> bool {
        match self.running.get_mut(i).and_then(Option::take) {
            Some(r) => {
                self.retired.add(&r.replica.borrow().counters());
                true
            }
            None => false,
        }
    }

    /// Counters of every replica, running or crashed, added.
    pub fn counters(&self) -> UpsertCounters {
        let mut c = self.retired;
        for r in self.running.iter().flatten() {
            c.add(&r.replica.borrow().counters());
        }
        c
    }

    /// Checks that every running replica's state cells decode (a replica whose persist input is
    /// mid-timestamp is skipped: its cells need not decode until the time is complete).
    /// Returns how many replicas were checked.
    pub fn check_cells(&self) -> Result<u64, CellsError> {
        let mut checked = 0;
        for r in self.running.iter().flatten() {
            if r.replica.borrow().check_cells()?.is_some() {
                checked += 1;
            }
        }
        Ok(checked)
    }

    /// Everything as plain data.
    pub fn snapshot(&self) -> PipelineSnapshot {
        let source = self.source.borrow();
        let mut keys: Vec<i64> = source.messages().iter().map(|m| m.key).collect();
        crate::sort::sort(&mut keys);
        keys.dedup();
        PipelineSnapshot {
            source_upper: source.upper(),
            source_messages: source.messages().len() as u64,
            replicas: self
                .running
                .iter()
                .map(|r| r.as_ref().map(|r| r.replica.borrow().snapshot(&source)))
                .collect(),
            checker: self.report(),
            keys: keys
                .into_iter()
                .map(|k| (UpsertKey::from_key(&Row::new([Datum::Int(k)])).short(), k))
                .collect(),
        }
    }
}
