//! Randomized runs of persist in the deterministic simulator: several writers and readers on one
//! shard, the locations behind the fault-injecting decorator (with outages), callers whose
//! timeouts fire mid-command, writers and readers that crash and reopen.
//!
//! Method: an observer sits under the fault injector, so it sees every compare_and_set that
//! really committed (including those whose caller heard a timeout). It replays each committed
//! state version and checks, after every step: the version decodes and applies to the previous
//! one; seqno grows by one; upper, since, writers' uppers and readers' seqno holds never go back;
//! since is the meet of the readers' sinces; every blob the state refers to exists. It also keeps
//! what every live version (not yet truncated) refers to, and checks that no blob is deleted
//! while a live version refers to it (the observer sits under the Blob fault injector too), and
//! that the rollups listed below the earliest live version stay bounded. Every write
//! carries unique keys, so presence is binary: at the end, every snapshot any reader took at
//! `as_of` must hold every acknowledged write at a time `<= as_of` exactly once, every write whose
//! outcome was never reported at most once, and nothing else. The uppers of every committed
//! version form a chain from 0 without gaps or overlaps, and every acknowledged
//! compare_and_append is a link of it.
//!
//! A writer that crashes (its caller gave up mid-command) comes back as a new process: a fresh
//! `PersistClient` with a cold state cache and its own maintenance.
//!
//! At the end, after a final GC at quiescence, the leak check ([`leaked_blobs`]) must list
//! exactly the blobs no live version refers to (by the observer's own replay), and each leak must
//! come from a documented path: a part of a write cancelled after it wrote it, or the output of
//! maintenance whose commit was indeterminate.
//!
//! The suite also counts what it exercised across seeds (faults, mismatches, indeterminate writes
//! that had in fact committed, crashes mid-command, compactions, GCs, rollups unlisted, leaks
//! found) and asserts each is > 0.
//!
//! `PERSIST_SIM_SEEDS=N` runs N seeds (default 1000); `PERSIST_SIM_SEED=S` replays one seed.
#![cfg(not(target_arch = "wasm32"))]

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use async_trait::async_trait;
use futures::FutureExt;
use persist_playground::location::mem::{Latency, MemBlob, MemConsensus};
use persist_playground::location::unreliable::{
    UnreliableBlob, UnreliableConsensus, UnreliableHandle,
};
use persist_playground::location::{
    Blob, BlobMetadata, BrokenAt, CaSResult, Consensus, ExternalError, Location, PermanentError,
    PermanentKind, SeqNo, VersionedData,
};
use persist_playground::persist::encoding::decode_diff;
use persist_playground::persist::error::{InvalidUsage, PersistError};
use persist_playground::persist::events::{CasOutcome, PersistEvent};
use persist_playground::persist::gc::{gc_now, leaked_blobs};
use persist_playground::persist::state::State;
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::sim::Simulator;
use persist_playground::runtime::Runtime;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use timely::progress::Antichain;

const SHARD: &str = "s-sim";

/// The most rollups the observer may see listed below the earliest live version: those a
/// collection unlists only after its truncate, for the collections running at once.
const MAX_ROLLUPS_BELOW_EARLIEST: usize = 8;

/// Sees every committed version, replays it, and checks the invariants after each.
struct Observer {
    blob: MemBlob,
    state: RefCell<Option<State>>,
    versions: Cell<u64>,
    violations: RefCell<Vec<String>>,
    /// What every live (not truncated) version refers to.
    live: RefCell<BTreeMap<SeqNo, BTreeSet<String>>>,
    /// Every committed change of the upper: (from, to).
    uppers: RefCell<Vec<(u64, u64)>>,
    /// The most rollups listed below the earliest live version, over the run.
    max_rollups_below_earliest: Cell<usize>,
}

impl Observer {
    fn new(blob: MemBlob) -> Self {
        Observer {
            blob,
            state: RefCell::new(None),
            versions: Cell::new(0),
            violations: RefCell::new(Vec::new()),
            live: RefCell::new(BTreeMap::new()),
            uppers: RefCell::new(Vec::new()),
            max_rollups_below_earliest: Cell::new(0),
        }
    }

    fn observe(&self, new: &VersionedData) {
        let mut violations = self.violations.borrow_mut();
        let diff = match decode_diff(&new.data) {
            Ok(d) => d,
            Err(e) => return violations.push(format!("{}: undecodable: {e}", new.seqno)),
        };
        let mut slot = self.state.borrow_mut();
        let mut state = slot
            .take()
            .unwrap_or_else(|| State::uninitialized(ShardId(SHARD.into())));
        let prev = state.clone();
        if let Err(e) = diff.apply(&mut state) {
            violations.push(format!("{}: does not apply: {e}", new.seqno));
        }
        if state.seqno != new.seqno {
            violations.push(format!("version {} holds state {}", new.seqno, state.seqno));
        }
        if prev.seqno > SeqNo(0) {
            if let Err(e) = state.validate(Some(&prev)) {
                violations.push(format!("{}: {e}", new.seqno));
            }
        }
        if prev.upper() != state.upper() {
            let t = |a: &Antichain<u64>| a.elements().first().copied().unwrap_or(u64::MAX);
            self.uppers
                .borrow_mut()
                .push((t(prev.upper()), t(state.upper())));
        }
        // Every blob the state refers to exists (write parts first, then reference them).
        let exists = |key: &str| {
            self.blob
                .get(key)
                .now_or_never()
                .and_then(|r| r.ok())
                .flatten()
                .is_some()
        };
        let refs: BTreeSet<String> = state
            .part_keys()
            .map(String::from)
            .chain(state.collections.rollups.values().map(|r| r.key.clone()))
            .collect();
        for key in &refs {
            if !exists(key) {
                violations.push(format!("{}: {key} is referenced but missing", new.seqno));
            }
        }
        let mut live = self.live.borrow_mut();
        live.insert(state.seqno, refs);
        // Bounded rollups: those listed below the earliest live version.
        let earliest = live.keys().next().copied().unwrap_or(state.seqno);
        let below = state.collections.rollups.range(..earliest).count();
        let max = self.max_rollups_below_earliest.get().max(below);
        self.max_rollups_below_earliest.set(max);
        self.versions.set(self.versions.get() + 1);
        *slot = Some(state);
    }

    /// Consensus was truncated below `seqno`: those versions are no longer live.
    fn truncated(&self, seqno: SeqNo) {
        self.live.borrow_mut().retain(|s, _| *s >= seqno);
    }

    /// A blob is about to be deleted: no live version may refer to it.
    fn deleting(&self, key: &str) {
        for (seqno, refs) in self.live.borrow().iter() {
            if refs.contains(key) {
                self.violations.borrow_mut().push(format!(
                    "{key} deleted while live version {seqno} refers to it"
                ));
            }
        }
    }

    /// Every blob some live version refers to.
    fn live_references(&self) -> BTreeSet<String> {
        self.live.borrow().values().flatten().cloned().collect()
    }
}

/// A Blob that tells the observer about every delete before it happens.
struct ObservedBlob {
    inner: Rc<dyn Blob>,
    observer: Rc<Observer>,
}

#[async_trait(?Send)]
impl Blob for ObservedBlob {
    async fn get(&self, key: &str) -> Result<Option<bytes::Bytes>, ExternalError> {
        self.inner.get(key).await
    }
    async fn list_keys_and_metadata(
        &self,
        key_prefix: &str,
        f: &mut (dyn FnMut(BlobMetadata) + '_),
    ) -> Result<(), ExternalError> {
        self.inner.list_keys_and_metadata(key_prefix, f).await
    }
    async fn set(&self, key: &str, value: bytes::Bytes) -> Result<(), ExternalError> {
        self.inner.set(key, value).await
    }
    async fn delete(&self, key: &str) -> Result<Option<usize>, ExternalError> {
        self.observer.deleting(key);
        self.inner.delete(key).await
    }
    async fn restore(&self, key: &str) -> Result<(), ExternalError> {
        self.inner.restore(key).await
    }
}

/// A Consensus that reports every committed compare_and_set to the observer at the instant it
/// commits. It adds its own seeded latency around the (instant) in-memory operation, so a caller
/// can still time out after its write happened, and the observer never misses a commit.
struct ObservedConsensus {
    inner: MemConsensus,
    observer: Rc<Observer>,
    runtime: Runtime,
    rng: RefCell<Xoshiro256PlusPlus>,
}

impl ObservedConsensus {
    async fn latency(&self) {
        let ms = self.rng.borrow_mut().next_u64() % 4;
        if ms > 0 {
            self.runtime.sleep(ms).await;
        }
    }

    fn now<T>(fut: impl std::future::Future<Output = T>) -> T {
        fut.now_or_never()
            .expect("MemConsensus without latency is ready at once")
    }
}

#[async_trait(?Send)]
impl Consensus for ObservedConsensus {
    async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
        self.latency().await;
        let r = Self::now(self.inner.head(key));
        self.latency().await;
        r
    }
    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: VersionedData,
    ) -> Result<CaSResult, ExternalError> {
        self.latency().await;
        let copy = new.clone();
        let r = Self::now(self.inner.compare_and_set(key, expected, new));
        if r == Ok(CaSResult::Committed) {
            self.observer.observe(&copy);
        }
        self.latency().await;
        r
    }
    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<Vec<VersionedData>, ExternalError> {
        self.latency().await;
        let r = Self::now(self.inner.scan(key, from, limit));
        self.latency().await;
        r
    }
    async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
        self.latency().await;
        let r = Self::now(self.inner.truncate(key, seqno));
        if r.is_ok() {
            self.observer.truncated(seqno);
        }
        self.latency().await;
        r
    }
    async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
        Self::now(self.inner.list_keys())
    }
}

/// One OS process's view of the shared locations: when the process crashes, every storage call
/// it makes from then on (and every call in flight, once it returns) fails for good, so each of
/// its tasks (the command in flight, its background maintenance) stops at whatever await it had
/// reached: between a part's write and its commit, between a truncate and its deletes, between
/// a merge's output and its commit.
#[derive(Clone)]
struct Process {
    dead: Rc<Cell<bool>>,
}

impl Process {
    fn new() -> Self {
        Process {
            dead: Rc::new(Cell::new(false)),
        }
    }

    fn location(&self, base: &Location) -> Location {
        Location {
            blob: Rc::new(ProcessBlob {
                inner: Rc::clone(&base.blob),
                process: self.clone(),
            }),
            consensus: Rc::new(ProcessConsensus {
                inner: Rc::clone(&base.consensus),
                process: self.clone(),
            }),
        }
    }

    fn crash(&self) {
        self.dead.set(true);
    }

    fn check(&self) -> Result<(), ExternalError> {
        if self.dead.get() {
            return Err(ExternalError::Permanent(Box::new(PermanentError::new(
                SHARD,
                BrokenAt::Store,
                PermanentKind::Closed,
                "the process crashed",
            ))));
        }
        Ok(())
    }

    /// Runs `op` unless the process is dead, and fails if it died meanwhile (the effect may have
    /// happened, but nobody in this process learns of it).
    async fn call<T>(
        &self,
        op: impl std::future::Future<Output = Result<T, ExternalError>>,
    ) -> Result<T, ExternalError> {
        self.check()?;
        let r = op.await;
        self.check()?;
        r
    }
}

struct ProcessBlob {
    inner: Rc<dyn Blob>,
    process: Process,
}

#[async_trait(?Send)]
impl Blob for ProcessBlob {
    async fn get(&self, key: &str) -> Result<Option<bytes::Bytes>, ExternalError> {
        self.process.call(self.inner.get(key)).await
    }
    async fn list_keys_and_metadata(
        &self,
        key_prefix: &str,
        f: &mut (dyn FnMut(BlobMetadata) + '_),
    ) -> Result<(), ExternalError> {
        self.process
            .call(self.inner.list_keys_and_metadata(key_prefix, f))
            .await
    }
    async fn set(&self, key: &str, value: bytes::Bytes) -> Result<(), ExternalError> {
        self.process.call(self.inner.set(key, value)).await
    }
    async fn delete(&self, key: &str) -> Result<Option<usize>, ExternalError> {
        self.process.call(self.inner.delete(key)).await
    }
    async fn restore(&self, key: &str) -> Result<(), ExternalError> {
        self.process.call(self.inner.restore(key)).await
    }
}

struct ProcessConsensus {
    inner: Rc<dyn Consensus>,
    process: Process,
}

#[async_trait(?Send)]
impl Consensus for ProcessConsensus {
    async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
        self.process.call(self.inner.head(key)).await
    }
    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: VersionedData,
    ) -> Result<CaSResult, ExternalError> {
        self.process
            .call(self.inner.compare_and_set(key, expected, new))
            .await
    }
    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<Vec<VersionedData>, ExternalError> {
        self.process.call(self.inner.scan(key, from, limit)).await
    }
    async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
        self.process.call(self.inner.truncate(key, seqno)).await
    }
    async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
        self.process.call(self.inner.list_keys()).await
    }
}

/// What one seed exercised.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    faults: u64,
    mismatches: u64,
    indeterminate_committed: u64,
    crashes_mid_command: u64,
    reader_crashes: u64,
    snapshots: u64,
    acked_writes: u64,
    compactions: u64,
    gcs: u64,
    rollups_unlisted: u64,
    /// Parts of writers that crashed with a write in flight, swept.
    swept_crashed_writer_parts: u64,
    /// Blobs a collection that stopped after its truncate left, deleted by a later one.
    finished_for_dead_collectors: u64,
    /// Maintenance outputs (merges, rollups) no version refers to, swept.
    swept_maintenance_outputs: u64,
    writer_restarts: u64,
    /// The most rollups seen listed below the earliest live version (a maximum, not a sum).
    max_rollups_below_earliest: u64,
}

#[derive(Default)]
struct Model {
    /// Key -> time, for writes whose compare_and_append returned Ok.
    acked: BTreeMap<String, u64>,
    /// Key -> time, for writes whose outcome the caller never learned.
    unknown: BTreeMap<String, u64>,
    /// Intervals of successful compare_and_appends.
    chain: Vec<(u64, u64)>,
    /// (as_of, contents) of every snapshot taken.
    snapshots: Vec<(u64, Vec<(String, i64)>)>,
    mismatches: u64,
    crashes_mid_command: u64,
    reader_crashes: u64,
    /// Writer ids whose process crashed with a write in flight (their parts may leak).
    crashed_writers: BTreeSet<String>,
}

/// Odd seeds merge whatever the spine plans (every two batches: many compactions racing the
/// writers); even seeds wait for the default number of inputs.
fn cfg(seed: u64) -> PersistConfig {
    PersistConfig {
        compaction_min_inputs: if seed % 2 == 1 {
            2
        } else {
            PersistConfig::default().compaction_min_inputs
        },
        reader_lease_duration_ms: 3_000,
        writer_lease_duration_ms: 3_000,
        backoff_min_ms: 2,
        backoff_max_ms: 64,
        // Most batches go to Blob parts, so cancelled writes can leak them.
        inline_writes_single_max_bytes: 48,
        // Rollup and collection cycles every 16 seqnos (the default is 128): short runs go
        // through many of them, and the faults and crashes land inside them.
        rollup_threshold: 16,
        ..PersistConfig::default()
    }
}

fn f(t: u64) -> Antichain<u64> {
    Antichain::from_elem(t)
}

async fn writer_task(
    id: u64,
    shared: PersistClient,
    rt: Runtime,
    model: Rc<RefCell<Model>>,
    mut rng: Xoshiro256PlusPlus,
    ops: u64,
) {
    let shard = ShardId(SHARD.into());
    // Each writer is its own process, with its own client over the shared locations.
    let base = shared.location().clone();
    let new_process = |rng: &mut Xoshiro256PlusPlus| {
        let process = Process::new();
        let client = PersistClient::new(
            process.location(&base),
            rt.clone(),
            shared.cfg().clone(),
            rng.next_u64(),
        )
        .with_events(shared.events().clone());
        (process, client)
    };
    let (mut process, mut client) = new_process(&mut rng);
    let mut handle = client.open_writer::<String, ()>(&shard).await.unwrap();
    let mut counter = 0u64;
    for _ in 0..ops {
        let lower = handle.upper().clone();
        let Some(&lo) = lower.elements().first() else {
            return;
        };
        let hi = lo + 1 + rng.next_u64() % 4;
        let n = rng.next_u64() % 4;
        let updates: Vec<((String, ()), u64, i64)> = (0..n)
            .map(|i| {
                counter += 1;
                ((format!("w{id}-{counter}"), ()), lo + i % (hi - lo), 1)
            })
            .collect();
        // Sometimes the caller gives up early: the command is dropped mid-flight.
        let patience_ms = if rng.next_u64() % 5 == 0 {
            rng.next_u64() % 6
        } else {
            100_000
        };
        let result = rt
            .timeout(
                patience_ms,
                handle.compare_and_append(&updates, f(lo), f(hi)),
            )
            .await;
        let crashed = {
            let mut m = model.borrow_mut();
            match result {
                Ok(Ok(Ok(()))) => {
                    for ((k, ()), t, _) in &updates {
                        m.acked.insert(k.clone(), *t);
                    }
                    m.chain.push((lo, hi));
                    false
                }
                Ok(Ok(Err(_mismatch))) => {
                    m.mismatches += 1;
                    false
                }
                Ok(Err(e)) => panic!("writer {id}: invalid usage {e}"),
                Err(_elapsed) => {
                    for ((k, ()), t, _) in &updates {
                        m.unknown.insert(k.clone(), *t);
                    }
                    m.crashes_mid_command += 1;
                    true
                }
            }
        };
        if crashed {
            // The process crashes: its handle is abandoned (no expiry), and it comes back as a
            // new process (fresh client: cold cache, its own maintenance, new ids) that reopens.
            model
                .borrow_mut()
                .crashed_writers
                .insert(handle.writer_id().0.clone());
            process.crash();
            handle.abandon();
            (process, client) = new_process(&mut rng);
            handle = client.open_writer::<String, ()>(&shard).await.unwrap();
            let _ = handle.fetch_recent_upper().await.unwrap();
            continue;
        }
        if rng.next_u64() % 3 == 0 {
            // Learn about other writers' progress now and then.
            let _ = handle.fetch_recent_upper().await.unwrap();
        }
    }
    handle.expire().await;
}

async fn reader_task(
    client: PersistClient,
    rt: Runtime,
    model: Rc<RefCell<Model>>,
    mut rng: Xoshiro256PlusPlus,
    done: Rc<Cell<bool>>,
) {
    let shard = ShardId(SHARD.into());
    let mut handle = client
        .open_leased_reader::<String, ()>(&shard)
        .await
        .unwrap();
    while !done.get() {
        rt.sleep(1 + rng.next_u64() % 20).await;
        let state = client.inspect_state(&shard).await.unwrap();
        let (Some(&upper), Some(&since)) = (
            state.upper().elements().first(),
            handle.since().elements().first(),
        ) else {
            break;
        };
        match rng.next_u64() % 4 {
            0 | 1 if upper > since => {
                let as_of = since + rng.next_u64() % (upper - since);
                match handle.snapshot_and_fetch(f(as_of)).await {
                    Ok(snap) => {
                        let contents = snap.into_iter().map(|((k, ()), _, d)| (k, d)).collect();
                        model.borrow_mut().snapshots.push((as_of, contents));
                    }
                    Err(PersistError::InvalidUsage(InvalidUsage::Expired { .. })) => {
                        handle = client.open_leased_reader(&shard).await.unwrap();
                    }
                    Err(e) => panic!("snapshot at {as_of}: {e}"),
                }
            }
            2 if upper > since => {
                let new_since = since + rng.next_u64() % (upper - since);
                if handle.downgrade_since(&f(new_since)).await.is_err() {
                    handle = client.open_leased_reader(&shard).await.unwrap();
                }
            }
            3 if rng.next_u64() % 8 == 0 => {
                // Crash: the lease will run out on its own.
                model.borrow_mut().reader_crashes += 1;
                handle.abandon();
                handle = client.open_leased_reader(&shard).await.unwrap();
            }
            _ => {
                if handle.heartbeat().await.is_err() {
                    handle = client.open_leased_reader(&shard).await.unwrap();
                }
            }
        }
    }
    handle.expire().await;
}

fn run_seed(seed: u64) -> Counts {
    let sim = Simulator::new(seed);
    sim.set_record_trace(false);
    let rt = sim.runtime();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mem_blob = MemBlob::new();
    let observer = Rc::new(Observer::new(mem_blob.clone()));
    let faults = UnreliableHandle::new(seed, 1.0, 0.0);
    let raw_consensus = MemConsensus::new();
    let consensus = ObservedConsensus {
        inner: raw_consensus.clone(),
        observer: Rc::clone(&observer),
        runtime: rt.clone(),
        rng: RefCell::new(Xoshiro256PlusPlus::seed_from_u64(seed ^ 1)),
    };
    let location = Location {
        blob: Rc::new(UnreliableBlob::new(
            Rc::new(ObservedBlob {
                inner: Rc::new(mem_blob.with_latency(Latency::new(rt.clone(), seed ^ 2, 0, 3))),
                observer: Rc::clone(&observer),
            }),
            faults.clone(),
        )),
        consensus: Rc::new(UnreliableConsensus::new(Rc::new(consensus), faults.clone())),
    };
    let client = PersistClient::new(location, rt.clone(), cfg(seed), seed);
    let model = Rc::new(RefCell::new(Model::default()));
    let done = Rc::new(Cell::new(false));

    // Chaos: flip availability now and then.
    let (rt2, faults2, done2) = (rt.clone(), faults.clone(), Rc::clone(&done));
    let mut chaos_rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xc4a05);
    rt.spawn("chaos", async move {
        while !done2.get() {
            rt2.sleep(20 + chaos_rng.next_u64() % 80).await;
            match chaos_rng.next_u64() % 4 {
                0 => faults2.totally_unavailable(),
                1 => faults2.totally_available(),
                _ => faults2.partially_available(0.85, 0.15),
            }
        }
        faults2.totally_available();
    })
    .detach();

    let writers: Vec<_> = (0..3u64)
        .map(|id| {
            let r = Xoshiro256PlusPlus::seed_from_u64(rng.next_u64());
            rt.spawn(
                &format!("writer{id}"),
                writer_task(id, client.clone(), rt.clone(), Rc::clone(&model), r, 12),
            )
        })
        .collect();
    let readers: Vec<_> = (0..2u64)
        .map(|id| {
            let r = Xoshiro256PlusPlus::seed_from_u64(rng.next_u64());
            rt.spawn(
                &format!("reader{id}"),
                reader_task(
                    client.clone(),
                    rt.clone(),
                    Rc::clone(&model),
                    r,
                    Rc::clone(&done),
                ),
            )
        })
        .collect();
    let done3 = Rc::clone(&done);
    let client2 = client.clone();
    let final_snapshot = sim
        .block_on(async move {
            futures::future::join_all(writers).await;
            done3.set(true);
            futures::future::join_all(readers).await;
            // A final reader on a fresh client: the whole shard, from storage.
            let fresh = PersistClient::new(
                client2.location().clone(),
                client2.runtime().clone(),
                cfg(seed),
                !0,
            );
            let shard = ShardId(SHARD.into());
            let state = fresh.inspect_state(&shard).await.unwrap();
            let upper = *state.upper().elements().first().expect("not finished");
            let mut r = fresh
                .open_leased_reader::<String, ()>(&shard)
                .await
                .unwrap();
            let since = *r.since().elements().first().unwrap();
            let as_of = since.max(upper.saturating_sub(1));
            let snap = if upper > since {
                r.snapshot_and_fetch(f(as_of)).await.unwrap()
            } else {
                Vec::new()
            };
            r.expire().await;
            (
                as_of,
                snap.into_iter()
                    .map(|((k, ()), _, d)| (k, d))
                    .collect::<Vec<_>>(),
            )
        })
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    // Quiescence: every writer and reader is done. Let background work finish, collect up to
    // the head, let the maintenance that collection's commits assigned finish too, and only
    // then ask the leak check (which commits nothing).
    let quiet = |sim: &Simulator| sim.run_for(30_000).unwrap();
    quiet(&sim);
    let checker = PersistClient::new(client.location().clone(), rt.clone(), cfg(seed), !1)
        .with_events(client.events().clone());
    // Maintenance to a fixed point: each collection by hand lists a rollup at the head, unlists
    // those below the earliest version, truncates, finishes the tickets of collectors that died
    // after their truncate, and sweeps; the second makes the first one's earliest rollup the
    // oldest listed, below which every unlisted rollup goes.
    let mut leaks = Vec::new();
    for _ in 0..4 {
        let c = checker.clone();
        sim.block_on(async move { gc_now(&c, &ShardId(SHARD.into())).await.unwrap() })
            .unwrap();
        quiet(&sim);
        let c = checker.clone();
        leaks = sim
            .block_on(async move { leaked_blobs(&c, &ShardId(SHARD.into())).await.unwrap() })
            .unwrap();
        if leaks.is_empty() {
            break;
        }
    }

    let violations = observer.violations.borrow();
    assert!(
        violations.is_empty(),
        "seed {seed}: invariant violations: {violations:#?}"
    );
    let mut m = model.borrow_mut();
    m.snapshots.push(final_snapshot);
    // The committed uppers form one chain from 0, without gaps or overlaps, and every
    // acknowledged compare_and_append is one of its links.
    let mut uppers = observer.uppers.borrow().clone();
    uppers.sort();
    assert_eq!(
        uppers.first().map(|u| u.0),
        Some(0),
        "seed {seed}: the chain starts at 0"
    );
    for w in uppers.windows(2) {
        assert_eq!(
            w[0].1, w[1].0,
            "seed {seed}: committed uppers {:?} and {:?} leave a gap or overlap",
            w[0], w[1]
        );
    }
    let links: BTreeSet<(u64, u64)> = uppers.iter().copied().collect();
    for acked in &m.chain {
        assert!(
            links.contains(acked),
            "seed {seed}: acked append {acked:?} is not a committed link"
        );
    }
    // The leak check lists exactly what no live version refers to, and each leak has a
    // documented cause.
    let live_refs = observer.live_references();
    let mut unreferenced = BTreeSet::new();
    mem_blob
        .list_keys_and_metadata(&format!("{SHARD}/"), &mut |b| {
            if !live_refs.contains(&b.key) {
                unreferenced.insert(b.key);
            }
        })
        .now_or_never()
        .unwrap()
        .unwrap();
    let leaked: BTreeSet<String> = leaks.iter().map(|b| b.key.clone()).collect();
    assert!(
        leaked.is_empty() && unreferenced.is_empty(),
        "seed {seed}: leaked at quiescence: {leaked:?} (the observer finds {unreferenced:?})"
    );
    // What each cleanup deleted, by the path that left it.
    let (mut crashed_parts, mut unfinished, mut maintenance_outputs) = (0u64, 0u64, 0u64);
    for e in client.events().events() {
        let PersistEvent::BlobsDeleted { kind, keys, .. } = e else {
            continue;
        };
        for key in keys {
            match kind.as_str() {
                "unfinished gc" => unfinished += 1,
                k if k.starts_with("sweep") => {
                    let crashed = m
                        .crashed_writers
                        .iter()
                        .any(|w| key.starts_with(&format!("{SHARD}/{w}/p")));
                    if crashed {
                        crashed_parts += 1;
                    } else if key.contains("/pm") || key.contains("/rollup/") {
                        maintenance_outputs += 1;
                    }
                }
                _ => {}
            }
        }
    }
    let max_below = observer.max_rollups_below_earliest.get();
    assert!(
        max_below <= MAX_ROLLUPS_BELOW_EARLIEST,
        "seed {seed}: {max_below} rollups listed below the earliest live version"
    );
    let mut indeterminate_committed = BTreeSet::new();
    for (as_of, contents) in &m.snapshots {
        let mut seen = BTreeMap::new();
        for (k, d) in contents {
            *seen.entry(k.clone()).or_insert(0i64) += d;
        }
        for (k, t) in &m.acked {
            let expected = i64::from(*t <= *as_of);
            assert_eq!(
                seen.get(k).copied().unwrap_or(0),
                expected,
                "seed {seed}: acked write {k}@{t} in snapshot at {as_of}"
            );
        }
        for (k, d) in &seen {
            if m.acked.contains_key(k) {
                continue;
            }
            match m.unknown.get(k) {
                Some(t) => {
                    assert!(
                        *d == 1 && *t <= *as_of,
                        "seed {seed}: in-flight {k} has diff {d}"
                    );
                    indeterminate_committed.insert(k.clone());
                }
                None => panic!("seed {seed}: {k} is in the snapshot but was never written"),
            }
        }
    }
    let events = client.events().events();
    let mismatches = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                PersistEvent::Command {
                    outcome: CasOutcome::Mismatch,
                    ..
                }
            )
        })
        .count() as u64;
    let compactions = events
        .iter()
        .filter(|e| matches!(e, PersistEvent::CompactionApplied { .. }))
        .count() as u64;
    let gcs = events
        .iter()
        .filter(|e| matches!(e, PersistEvent::ConsensusTruncated { deleted, .. } if *deleted > 0))
        .count() as u64;
    let rollups_unlisted = events
        .iter()
        .map(|e| match e {
            PersistEvent::RollupsUnlisted { count, .. } => *count as u64,
            _ => 0,
        })
        .sum();
    Counts {
        rollups_unlisted,
        swept_crashed_writer_parts: crashed_parts,
        finished_for_dead_collectors: unfinished,
        swept_maintenance_outputs: maintenance_outputs,
        writer_restarts: m.crashed_writers.len() as u64,
        max_rollups_below_earliest: max_below as u64,
        faults: faults.counts().faults(),
        mismatches: mismatches + m.mismatches,
        indeterminate_committed: indeterminate_committed.len() as u64,
        crashes_mid_command: m.crashes_mid_command,
        reader_crashes: m.reader_crashes,
        snapshots: m.snapshots.len() as u64,
        acked_writes: m.acked.len() as u64,
        compactions,
        gcs,
    }
}

#[test]
fn randomized_shard_with_faults_crashes_and_races() {
    if let Ok(seed) = std::env::var("PERSIST_SIM_SEED") {
        let seed: u64 = seed.parse().expect("PERSIST_SIM_SEED is a number");
        println!("{:?}", run_seed(seed));
        return;
    }
    let seeds: u64 = std::env::var("PERSIST_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let mut total = Counts::default();
    for seed in 0..seeds {
        let counts = std::panic::catch_unwind(|| run_seed(seed)).unwrap_or_else(|_| {
            panic!("seed {seed} failed; replay it with PERSIST_SIM_SEED={seed} cargo test --test native persist_sim::")
        });
        total.faults += counts.faults;
        total.mismatches += counts.mismatches;
        total.indeterminate_committed += counts.indeterminate_committed;
        total.crashes_mid_command += counts.crashes_mid_command;
        total.reader_crashes += counts.reader_crashes;
        total.snapshots += counts.snapshots;
        total.acked_writes += counts.acked_writes;
        total.compactions += counts.compactions;
        total.gcs += counts.gcs;
        total.rollups_unlisted += counts.rollups_unlisted;
        total.swept_crashed_writer_parts += counts.swept_crashed_writer_parts;
        total.finished_for_dead_collectors += counts.finished_for_dead_collectors;
        total.swept_maintenance_outputs += counts.swept_maintenance_outputs;
        total.writer_restarts += counts.writer_restarts;
        total.max_rollups_below_earliest = total
            .max_rollups_below_earliest
            .max(counts.max_rollups_below_earliest);
    }
    println!("{seeds} seeds exercised: {total:?}");
    assert!(total.faults > 0, "faults fired");
    assert!(total.mismatches > 0, "mismatches happened");
    assert!(
        total.indeterminate_committed > 0,
        "some unreported writes had committed"
    );
    assert!(total.crashes_mid_command > 0, "writers crashed mid-command");
    assert!(total.reader_crashes > 0, "readers crashed");
    assert!(total.snapshots > seeds, "readers read");
    assert!(total.acked_writes > seeds, "writers wrote");
    assert!(total.compactions > 0, "compaction ran");
    assert!(total.gcs > 0, "GC truncated Consensus");
    assert!(
        total.rollups_unlisted > 0,
        "GC unlisted rollups below the earliest version"
    );
    assert!(
        total.swept_crashed_writer_parts > 0,
        "crashed writers' parts were swept"
    );
    assert!(
        total.finished_for_dead_collectors > 0,
        "collectors that died after their truncate had their deletes finished"
    );
    assert!(
        total.swept_maintenance_outputs > 0,
        "maintenance outputs no version refers to were swept"
    );
    assert!(
        total.writer_restarts > 0,
        "crashed writers came back as new processes"
    );
}
