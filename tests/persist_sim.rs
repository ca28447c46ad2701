//! Randomized runs of persist in the deterministic simulator: several writers and readers on one
//! shard, the locations behind the fault-injecting decorator (with outages), callers whose
//! timeouts fire mid-command, writers and readers that crash and reopen.
//!
//! Method: an observer sits under the fault injector, so it sees every compare_and_set that
//! really committed (including those whose caller heard a timeout). It replays each committed
//! state version and checks, after every step: the version decodes and applies to the previous
//! one; seqno grows by one; upper, since, writers' uppers and readers' seqno holds never go back;
//! since is the meet of the readers' sinces; every blob the state refers to exists. Every write
//! carries unique keys, so presence is binary: at the end, every snapshot any reader took at
//! `as_of` must hold every acknowledged write at a time `<= as_of` exactly once, every write whose
//! outcome was never reported at most once, and nothing else. Successful compare_and_appends must
//! form a chain without gaps or overlaps.
//!
//! The suite also counts what it exercised across seeds (faults, mismatches, indeterminate writes
//! that had in fact committed, crashes mid-command, compactions, GCs) and asserts each is > 0.
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
    Blob, CaSResult, Consensus, ExternalError, Location, SeqNo, VersionedData,
};
use persist_playground::persist::encoding::decode_diff;
use persist_playground::persist::error::{InvalidUsage, PersistError};
use persist_playground::persist::events::{CasOutcome, PersistEvent};
use persist_playground::persist::state::State;
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::sim::Simulator;
use persist_playground::runtime::Runtime;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use timely::progress::Antichain;

const SHARD: &str = "s-sim";

/// Sees every committed version, replays it, and checks the invariants after each.
struct Observer {
    blob: MemBlob,
    state: RefCell<Option<State>>,
    versions: Cell<u64>,
    violations: RefCell<Vec<String>>,
}

impl Observer {
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
        // Every blob the state refers to exists (write parts first, then reference them).
        let exists = |key: &str| {
            self.blob
                .get(key)
                .now_or_never()
                .and_then(|r| r.ok())
                .flatten()
                .is_some()
        };
        for key in state.part_keys() {
            if !exists(key) {
                violations.push(format!("{}: part {key} is missing", new.seqno));
            }
        }
        for r in state.collections.rollups.values() {
            if !exists(&r.key) {
                violations.push(format!("{}: rollup {} is missing", new.seqno, r.key));
            }
        }
        self.versions.set(self.versions.get() + 1);
        *slot = Some(state);
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
        self.latency().await;
        r
    }
    async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
        Self::now(self.inner.list_keys())
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
}

fn cfg() -> PersistConfig {
    PersistConfig {
        reader_lease_duration_ms: 3_000,
        writer_lease_duration_ms: 3_000,
        backoff_min_ms: 2,
        backoff_max_ms: 64,
        ..PersistConfig::default()
    }
}

fn f(t: u64) -> Antichain<u64> {
    Antichain::from_elem(t)
}

async fn writer_task(
    id: u64,
    client: PersistClient,
    rt: Runtime,
    model: Rc<RefCell<Model>>,
    mut rng: Xoshiro256PlusPlus,
    ops: u64,
) {
    let shard = ShardId(SHARD.into());
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
            // The process "crashes": its handle is abandoned (no expiry) and it reopens.
            handle.abandon();
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
    let observer = Rc::new(Observer {
        blob: mem_blob.clone(),
        state: RefCell::new(None),
        versions: Cell::new(0),
        violations: RefCell::new(Vec::new()),
    });
    let faults = UnreliableHandle::new(seed, 1.0, 0.0);
    let consensus = ObservedConsensus {
        inner: MemConsensus::new(),
        observer: Rc::clone(&observer),
        runtime: rt.clone(),
        rng: RefCell::new(Xoshiro256PlusPlus::seed_from_u64(seed ^ 1)),
    };
    let location = Location {
        blob: Rc::new(UnreliableBlob::new(
            Rc::new(mem_blob.with_latency(Latency::new(rt.clone(), seed ^ 2, 0, 3))),
            faults.clone(),
        )),
        consensus: Rc::new(UnreliableConsensus::new(Rc::new(consensus), faults.clone())),
    };
    let client = PersistClient::new(location, rt.clone(), cfg(), seed);
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
                cfg(),
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

    let violations = observer.violations.borrow();
    assert!(
        violations.is_empty(),
        "seed {seed}: invariant violations: {violations:#?}"
    );
    let mut m = model.borrow_mut();
    m.snapshots.push(final_snapshot);
    // Successful compare_and_appends form a chain: sorted by lower, each starts where the last
    // ended (gaps may only be filled by writes whose outcome was never reported).
    m.chain.sort();
    for w in m.chain.windows(2) {
        assert!(
            w[0].1 <= w[1].0,
            "seed {seed}: overlapping appends {:?} and {:?}",
            w[0],
            w[1]
        );
    }
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
    Counts {
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
            panic!("seed {seed} failed; replay it with PERSIST_SIM_SEED={seed} cargo test --test persist_sim")
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
}
