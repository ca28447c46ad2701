//! Native tests of the timestamp oracle under the deterministic simulator:
//! - the conformance suite against the in-memory and the durable oracle (plain, with virtual
//!   latency and with injected faults);
//! - randomized restarts over many seeds: instances crash at random points (mid-open, mid-
//!   allocation, with writes landed but unheard), calls are cancelled by timeouts, storage fails
//!   and times out, and a history checker verifies every timestamp handed out;
//! - two instances taking over from each other, with and without `confirm_leadership`;
//! - fencing, the clock guard, lost acknowledgements, unavailable storage, foreign records and
//!   store growth, each shown on its own.
//!
//! Seeds: `ORACLE_SEEDS=n` runs `n` seeds per randomized suite (default 300 and 200);
//! `ORACLE_SEED=s` runs just seed `s`. A failing seed prints itself.
#![cfg(not(target_arch = "wasm32"))]

#[path = "support/closable.rs"]
mod closable;

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::rc::Rc;

use bytes::Bytes;
use futures::FutureExt;
use persist_playground::location::mem::{Latency, MemConsensus};
use persist_playground::location::unreliable::{
    LostAckConsensus, UnreliableConsensus, UnreliableHandle,
};
use persist_playground::location::{Consensus, SeqNo, VersionedData, SCAN_ALL};
use persist_playground::oracle::conformance::{
    check_history, timestamp_oracle_impl_test, Call, History, Violation,
};
use persist_playground::oracle::{
    DurableOracleConfig, DurableRecord, DurableTimestampOracle, InMemoryTimestampOracle, NowFn,
    OracleError, OracleEventKind, TimestampOracle,
};
use persist_playground::runtime::sim::Simulator;
use persist_playground::runtime::Runtime;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

// ---------------------------------------------------------------------------------------------
// Seeds, randomness, history.

/// Below this many seeds (a rerun of one seed), a suite does not assert what its seeds covered.
const MIN_SEEDS_FOR_COVERAGE: usize = 50;

fn seeds(default_count: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var("ORACLE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![seed];
    }
    let count = std::env::var("ORACLE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_count);
    (0..count).collect()
}

/// Runs `f` for every seed; a panic names its seed before it propagates.
fn for_each_seed<R>(suite: &str, default_count: u64, f: impl Fn(u64) -> R) -> Vec<R> {
    seeds(default_count)
        .into_iter()
        .map(|seed| match catch_unwind(AssertUnwindSafe(|| f(seed))) {
            Ok(r) => r,
            Err(panic) => {
                eprintln!("{suite}: FAILING SEED {seed} (rerun with ORACLE_SEED={seed})");
                resume_unwind(panic)
            }
        })
        .collect()
}

struct Rng(Xoshiro256PlusPlus);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(Xoshiro256PlusPlus::seed_from_u64(seed))
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.0.next_u64() % n
        }
    }
    fn chance(&mut self, p: f64) -> bool {
        ((self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
    fn fork(&mut self) -> Rng {
        Rng::new(self.0.next_u64())
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers.

const TIMELINE: &str = "epoch_ms";

fn key() -> String {
    DurableTimestampOracle::consensus_key(TIMELINE)
}

fn head_now(mem: &MemConsensus) -> Option<VersionedData> {
    mem.head(&key())
        .now_or_never()
        .expect("no latency: the call is immediate")
        .expect("MemConsensus does not fail")
}

fn versions_now(mem: &MemConsensus) -> usize {
    mem.scan(&key(), SeqNo(0), SCAN_ALL)
        .now_or_never()
        .expect("immediate")
        .expect("no failure")
        .len()
}

fn stored(mem: &MemConsensus) -> (SeqNo, DurableRecord) {
    let head = head_now(mem).expect("the timeline exists");
    (head.seqno, DurableRecord::decode(&head.data).unwrap())
}

async fn open(
    consensus: Rc<dyn Consensus>,
    rt: &Runtime,
    config: DurableOracleConfig,
) -> Result<DurableTimestampOracle, OracleError> {
    DurableTimestampOracle::open(consensus, rt.clone(), NowFn::from_runtime(rt), 0, config).await
}

fn config(interval_ms: u64) -> DurableOracleConfig {
    DurableOracleConfig::new(TIMELINE).persist_interval_ms(interval_ms)
}

// ---------------------------------------------------------------------------------------------
// Conformance.

#[test]
fn conformance_in_memory() {
    let sim = Simulator::new(0);
    sim.block_on(timestamp_oracle_impl_test(|_, now, initially| async move {
        Ok(Rc::new(InMemoryTimestampOracle::new(initially, now)) as Rc<dyn TimestampOracle>)
    }))
    .unwrap()
    .unwrap();
}

#[test]
fn conformance_durable_plain_with_latency_and_with_faults() {
    // Goal: the durable oracle keeps the contract whatever its storage does. Method: run the
    // suite over MemConsensus as is, with virtual latency, and behind injected determinate
    // faults (which the oracle must retry through), for a few seeds and intervals.
    //
    // NB: the suite checks exact values, so its faults are determinate only. A start whose
    // compare_and_set happened but timed out resumes above its own unheard window (by design: see
    // the durable module docs), which is safe but no longer starts at `initially`; the randomized
    // suites below cover that case.
    for seed in 0..8u64 {
        for interval_ms in [1, 2, 1_000] {
            let sim = Simulator::new(seed);
            let rt = sim.runtime();
            let mem = MemConsensus::new();
            let faults = UnreliableHandle::new(seed, 0.8, 0.0);
            let mode = seed % 3;
            let (rt2, faults2) = (rt.clone(), faults.clone());
            let opened = Rc::new(Cell::new(0u64));
            sim.block_on(timestamp_oracle_impl_test(
                move |timeline, now, initially| {
                    opened.set(opened.get() + 1);
                    let latency = Latency::new(rt2.clone(), seed * 1_000 + opened.get(), 0, 3);
                    let consensus: Rc<dyn Consensus> = match mode {
                        0 => Rc::new(mem.clone()),
                        1 => Rc::new(mem.with_latency(latency)),
                        _ => Rc::new(UnreliableConsensus::new(
                            Rc::new(mem.with_latency(latency)),
                            faults2.clone(),
                        )),
                    };
                    let config =
                        DurableOracleConfig::new(timeline).persist_interval_ms(interval_ms);
                    let rt = rt2.clone();
                    async move {
                        let oracle =
                            DurableTimestampOracle::open(consensus, rt, now, initially, config)
                                .await?;
                        Ok(Rc::new(oracle) as Rc<dyn TimestampOracle>)
                    }
                },
            ))
            .unwrap()
            .unwrap();
            if mode == 2 {
                assert!(faults.counts().faults() > 0, "faults were injected");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Randomized restarts.

#[derive(Debug, Default, Clone, Copy)]
struct RestartCounts {
    open_attempts: u64,
    opens: u64,
    crashes_mid_open: u64,
    crashes_mid_allocation: u64,
    crashes_with_unheard_write: u64,
    cancelled_calls: u64,
    adopted_own_writes: u64,
    storage_retries: u64,
    clock_guard_waits: u64,
    faults: u64,
    happened_then_timed_out: u64,
    write_timestamps: u64,
    durable_writes: u64,
    cas_attempts: u64,
    /// Sum over seeds of (largest timestamp handed out) / persist_interval.
    intervals_of_timestamps: f64,
}

impl RestartCounts {
    fn add(&mut self, o: &RestartCounts) {
        self.open_attempts += o.open_attempts;
        self.opens += o.opens;
        self.crashes_mid_open += o.crashes_mid_open;
        self.crashes_mid_allocation += o.crashes_mid_allocation;
        self.crashes_with_unheard_write += o.crashes_with_unheard_write;
        self.cancelled_calls += o.cancelled_calls;
        self.adopted_own_writes += o.adopted_own_writes;
        self.storage_retries += o.storage_retries;
        self.clock_guard_waits += o.clock_guard_waits;
        self.faults += o.faults;
        self.happened_then_timed_out += o.happened_then_timed_out;
        self.write_timestamps += o.write_timestamps;
        self.durable_writes += o.durable_writes;
        self.cas_attempts += o.cas_attempts;
        self.intervals_of_timestamps += o.intervals_of_timestamps;
    }
}

/// What the workers of one run share.
#[derive(Clone)]
struct Shared {
    rt: Runtime,
    history: Rc<History>,
    interval_ms: u64,
    cancelled: Rc<Cell<u64>>,
    /// Unexpected errors. A spawned task's panic is lost when its handle is dropped (aborted),
    /// so workers report here and the run checks it.
    failures: Rc<RefCell<Vec<String>>>,
}

/// One worker: random calls against one instance until it is aborted, or until the instance is
/// fenced (which is a failure unless `fencing_expected`). Some calls are cancelled by a short
/// timeout.
async fn worker(
    shared: Shared,
    oracle: Rc<DurableTimestampOracle>,
    instance: u64,
    rng: Rng,
    fencing_expected: bool,
) -> Result<(), OracleError> {
    let failures = Rc::clone(&shared.failures);
    let run = worker_loop(shared, oracle, instance, rng, fencing_expected);
    match AssertUnwindSafe(run).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures
                .borrow_mut()
                .push(format!("instance {instance}: panicked: {msg}"));
            std::future::pending().await
        }
    }
}

async fn worker_loop(
    shared: Shared,
    oracle: Rc<DurableTimestampOracle>,
    instance: u64,
    mut rng: Rng,
    fencing_expected: bool,
) -> Result<(), OracleError> {
    let Shared {
        rt,
        history,
        interval_ms,
        cancelled,
        failures,
    } = shared;
    loop {
        let roll = rng.below(100);
        let ahead = rng.below(2 * interval_ms + 1);
        let apply_after = rng.chance(0.8);
        let (h, o) = (Rc::clone(&history), Rc::clone(&oracle));
        let now = rt.now_ms();
        let call = async move {
            let o: &dyn TimestampOracle = &*o;
            match roll {
                0..=49 => {
                    let ts = h.write_ts(instance, o).await?.timestamp;
                    if apply_after {
                        h.apply_write(instance, o, ts).await?;
                    }
                }
                50..=74 => {
                    h.read_ts(instance, o).await?;
                }
                75..=84 => h.apply_write(instance, o, now + ahead).await?,
                _ => {
                    o.peek_write_ts().await?;
                }
            }
            Ok::<(), OracleError>(())
        };
        let result = if rng.chance(0.15) {
            match rt.timeout(rng.below(8), call).await {
                Ok(r) => r,
                Err(_) => {
                    cancelled.set(cancelled.get() + 1);
                    Ok(())
                }
            }
        } else {
            call.await
        };
        match result {
            Ok(()) => {}
            Err(OracleError::Fenced { .. }) if fencing_expected => return result,
            Err(err) => {
                failures.borrow_mut().push(format!(
                    "instance {instance}: unexpected oracle error: {err}"
                ));
                return Err(err);
            }
        }
        rt.sleep(rng.below(4)).await;
    }
}

fn restart_run(seed: u64) -> (RestartCounts, Vec<Call>) {
    let mut rng = Rng::new(seed ^ 0x05ee_d0f0_ac1e);
    let interval_ms = [5, 10, 20, 40][rng.below(4) as usize];
    let confirm = rng.chance(0.3);
    let (happen, timeout) = (
        0.85 + 0.15 * (rng.below(4) as f64 / 3.0),
        0.15 * (rng.below(4) as f64 / 3.0),
    );
    let rounds = 3 + rng.below(5);
    let config = config(interval_ms)
        .confirm_leadership(confirm)
        .backoff_ms(1, 64);

    let sim = Simulator::new(seed);
    sim.set_record_trace(false);
    let rt = sim.runtime();
    let mem = MemConsensus::new();
    let faults = UnreliableHandle::new(seed.wrapping_mul(0x9e37_79b9) ^ 3, happen, timeout);
    let shared = Shared {
        rt: rt.clone(),
        history: Rc::new(History::default()),
        interval_ms,
        cancelled: Rc::new(Cell::new(0)),
        failures: Rc::default(),
    };

    let (rt2, mem2, faults2, shared2) = (rt.clone(), mem.clone(), faults.clone(), shared.clone());
    let mut counts = sim
        .block_on(async move {
            let (rt, mem, shared) = (rt2, mem2, shared2);
            let history = Rc::clone(&shared.history);
            let mut counts = RestartCounts::default();
            let mut instance = 0u64;
            for round in 0..rounds {
                let latency = Latency::new(rt.clone(), seed ^ (round << 40), 0, 3);
                let consensus: Rc<dyn Consensus> = Rc::new(UnreliableConsensus::new(
                    Rc::new(mem.with_latency(latency)),
                    faults2.clone(),
                ));
                counts.open_attempts += 1;
                let opening = open(consensus, &rt, config.clone());
                // Some starts crash part-way: before, during or after their compare_and_set.
                let limit_ms = if rng.chance(0.25) {
                    rng.below(12)
                } else {
                    600_000
                };
                let oracle = match rt.timeout(limit_ms, opening).await {
                    Ok(opened) => Rc::new(opened.expect("open succeeds")),
                    Err(_) => {
                        assert!(limit_ms < 600_000, "open hung");
                        counts.crashes_mid_open += 1;
                        continue;
                    }
                };
                counts.opens += 1;
                instance += 1;
                let workers: Vec<_> = (0..1 + rng.below(3))
                    .map(|w| {
                        rt.spawn(
                            &format!("worker{instance}.{w}"),
                            worker(
                                shared.clone(),
                                Rc::clone(&oracle),
                                instance,
                                rng.fork(),
                                false,
                            ),
                        )
                    })
                    .collect();
                rt.sleep(rng.below(250)).await;

                // Crash: abort the workers wherever they are, and drop the instance.
                let snap = oracle.snapshot();
                if snap.allocating {
                    counts.crashes_mid_allocation += 1;
                }
                if stored(&mem).0 .0 > snap.seqno && stored(&mem).1.epoch == snap.epoch {
                    counts.crashes_with_unheard_write += 1;
                }
                drop(workers);
                let stats = oracle.stats();
                counts.adopted_own_writes += stats.adopted_own_writes;
                counts.storage_retries += stats.storage_retries;
                counts.clock_guard_waits += stats.clock_guard_waits;
                counts.write_timestamps += stats.write_timestamps;
                counts.cas_attempts += stats.cas_attempts;
                drop(oracle);
                rt.sleep(rng.below(20)).await;
            }

            // Every store version ever committed took one seqno. (Every start of a seed may
            // have crashed before its compare_and_set: then nothing is stored.)
            let max_ts = history.max_handed_out();
            if let Some(head) = head_now(&mem) {
                let record = DurableRecord::decode(&head.data).unwrap();
                counts.durable_writes = head.seqno.0;
                assert!(
                    head.seqno.0 * interval_ms <= record.upper,
                    "each durable write raised the upper by at least one interval: {} writes, \
                     upper {}",
                    head.seqno.0,
                    record.upper
                );
                assert!(
                    max_ts.is_none_or(|ts| ts < record.upper),
                    "every timestamp handed out ({max_ts:?}) is below the stored upper {}",
                    record.upper
                );
            } else {
                assert_eq!(max_ts, None, "nothing stored, nothing handed out");
            }
            let max_ts = max_ts.unwrap_or(0);

            // A last start on a healthy store: above everything, and the key holds one version.
            faults2.totally_available();
            let last = open(Rc::new(mem.clone()), &rt, config.clone())
                .await
                .expect("a healthy start");
            let last = Rc::new(last);
            instance += 1;
            let read = history.read_ts(instance, &*last).await.unwrap();
            assert!(
                read >= max_ts,
                "after every restart reads resume above {max_ts}"
            );
            let w = history.write_ts(instance, &*last).await.unwrap().timestamp;
            assert!(w > max_ts);
            assert_eq!(versions_now(&mem), 1, "old versions were truncated");
            counts
        })
        .unwrap_or_else(|err| panic!("seed {seed}: {err}"));

    let failures = shared.failures.borrow().clone();
    assert!(failures.is_empty(), "seed {seed}: {failures:#?}");
    let history = &shared.history;
    counts.cancelled_calls = shared.cancelled.get();
    let f = faults.counts();
    counts.faults = f.faults();
    counts.happened_then_timed_out = f.happened_then_timed_out;
    let ops = history.calls();
    counts.intervals_of_timestamps =
        history.max_handed_out().unwrap_or(0) as f64 / interval_ms as f64;
    let bad = check_history(&ops);
    assert!(bad.is_empty(), "seed {seed}: {bad:#?}");
    let bound = (counts.intervals_of_timestamps.ceil() as u64) + 2 * counts.open_attempts + 2;
    assert!(
        counts.durable_writes <= bound,
        "seed {seed}: {} durable writes for {:.1} intervals of timestamps and {} starts",
        counts.durable_writes,
        counts.intervals_of_timestamps,
        counts.open_attempts
    );
    (counts, ops)
}

#[test]
fn randomized_restarts_never_repeat_or_go_back() {
    // Goal: across crashes at random points, restarts over the same store, cancelled calls,
    // virtual latency and injected faults, no timestamp is handed out twice or below an earlier
    // one, reads never go back, and durable writes stay near one per interval of timestamps.
    // Method: per seed, several instances one after the other over one MemConsensus; each runs
    // random workers and is then crashed (its tasks aborted mid-call); the history checker and
    // the stored record are checked at the end. The hard cases must actually have happened.
    let results = for_each_seed("restarts", 500, |seed| restart_run(seed).0);
    let mut total = RestartCounts::default();
    results.iter().for_each(|c| total.add(c));
    let ratio = total.durable_writes as f64 / total.intervals_of_timestamps;
    eprintln!(
        "restarts over {} seeds: {total:#?}\n durable writes per interval of timestamps: {ratio:.3} \
         ({} durable writes for {} write timestamps)",
        results.len(),
        total.durable_writes,
        total.write_timestamps
    );
    // What the seeds exercised (not meaningful for a single rerun seed).
    if results.len() >= MIN_SEEDS_FOR_COVERAGE {
        assert!(total.crashes_mid_open > 0, "{total:?}");
        assert!(total.crashes_mid_allocation > 0, "{total:?}");
        assert!(total.crashes_with_unheard_write > 0, "{total:?}");
        assert!(total.cancelled_calls > 0, "{total:?}");
        assert!(total.adopted_own_writes > 0, "{total:?}");
        assert!(
            total.faults > 0 && total.happened_then_timed_out > 0,
            "{total:?}"
        );
        assert!(total.storage_retries > 0, "{total:?}");
        assert!(
            ratio < 2.0,
            "about one durable write per interval of timestamps, not {ratio:.3}"
        );
    }
}

#[test]
fn a_seed_replays_exactly() {
    let (a, ops_a) = restart_run(7);
    let (b, ops_b) = restart_run(7);
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert_eq!(format!("{ops_a:?}"), format!("{ops_b:?}"));
    assert!(ops_a.len() > 20);
}

// ---------------------------------------------------------------------------------------------
// Two instances taking over from each other.

#[derive(Debug, Default, Clone, Copy)]
struct TakeoverCounts {
    opens: u64,
    fenced_calls: u64,
    completed_calls: u64,
    violations: u64,
    faults: u64,
}

/// Two "processes" on one store, each with its own connection. A process opens an instance
/// (fencing the other's), runs workers until they are fenced, waits a little, and takes over
/// again. Returns the counts and the history.
fn takeover_run(seed: u64, confirm: bool) -> (TakeoverCounts, Vec<Call>) {
    let mut rng = Rng::new(seed ^ 0x7a6e_0be2);
    let interval_ms = [5, 10, 20][rng.below(3) as usize];
    let config = config(interval_ms)
        .confirm_leadership(confirm)
        .backoff_ms(1, 32);
    let faulty = rng.chance(0.5);

    let sim = Simulator::new(seed);
    sim.set_record_trace(false);
    let rt = sim.runtime();
    let mem = MemConsensus::new();
    let faults = UnreliableHandle::new(
        seed ^ 11,
        if faulty { 0.9 } else { 1.0 },
        if faulty { 0.1 } else { 0.0 },
    );
    let shared = Shared {
        rt: rt.clone(),
        history: Rc::new(History::default()),
        interval_ms,
        cancelled: Rc::new(Cell::new(0)),
        failures: Rc::default(),
    };
    let opens = Rc::new(Cell::new(0u64));
    let fenced = Rc::new(Cell::new(0u64));
    let instances = Rc::new(Cell::new(0u64));

    let processes: Vec<_> = (0..2u64)
        .map(|p| {
            let (rt, mem, faults, shared) =
                (rt.clone(), mem.clone(), faults.clone(), shared.clone());
            let (opens, fenced, instances) =
                (Rc::clone(&opens), Rc::clone(&fenced), Rc::clone(&instances));
            let (config, mut rng) = (config.clone(), rng.fork());
            rt.clone().spawn(&format!("process{p}"), async move {
                rt.sleep(rng.below(30)).await;
                loop {
                    let latency = Latency::new(rt.clone(), rng.0.next_u64(), 0, 2);
                    let consensus: Rc<dyn Consensus> = Rc::new(UnreliableConsensus::new(
                        Rc::new(mem.with_latency(latency)),
                        faults.clone(),
                    ));
                    let oracle = match open(consensus, &rt, config.clone()).await {
                        Ok(oracle) => Rc::new(oracle),
                        Err(err) => {
                            shared.failures.borrow_mut().push(format!("open: {err}"));
                            return;
                        }
                    };
                    opens.set(opens.get() + 1);
                    instances.set(instances.get() + 1);
                    let instance = instances.get();
                    let workers: Vec<_> = (0..1 + rng.below(2))
                        .map(|w| {
                            rt.spawn(
                                &format!("p{p}.worker{w}"),
                                worker(
                                    shared.clone(),
                                    Rc::clone(&oracle),
                                    instance,
                                    rng.fork(),
                                    true,
                                ),
                            )
                        })
                        .collect();
                    // Workers stop only when fenced (anything else is recorded as a failure).
                    for result in futures::future::join_all(workers).await {
                        if matches!(result, Err(OracleError::Fenced { .. })) {
                            fenced.set(fenced.get() + 1);
                        } else {
                            return;
                        }
                    }
                    if oracle.snapshot().fenced_by.is_none() {
                        shared
                            .failures
                            .borrow_mut()
                            .push(format!("instance {instance} was not marked fenced"));
                        return;
                    }
                    rt.sleep(rng.below(60)).await;
                }
            })
        })
        .collect();
    sim.run_until(400 + rng.below(400))
        .unwrap_or_else(|err| panic!("seed {seed}: {err}"));
    drop(processes);
    let failures = shared.failures.borrow().clone();
    assert!(failures.is_empty(), "seed {seed}: {failures:#?}");
    let history = &shared.history;
    let ops = history.calls();
    let bad = check_history(&ops);
    let counts = TakeoverCounts {
        opens: opens.get(),
        fenced_calls: fenced.get(),
        completed_calls: ops.iter().filter(|o| o.responded.is_some()).count() as u64,
        violations: bad.len() as u64,
        faults: faults.counts().faults(),
    };
    if confirm {
        assert!(bad.is_empty(), "seed {seed}: {bad:#?}");
    } else {
        // Without the check a fenced instance may go back in time, but it never hands out a
        // timestamp twice: its window lies below the new instance's start.
        assert!(
            bad.iter()
                .all(|v| !matches!(v, Violation::Duplicate { .. })),
            "seed {seed}: {bad:#?}"
        );
    }
    (counts, ops)
}

fn sum_takeovers(results: &[TakeoverCounts]) -> TakeoverCounts {
    results
        .iter()
        .fold(TakeoverCounts::default(), |a, c| TakeoverCounts {
            opens: a.opens + c.opens,
            fenced_calls: a.fenced_calls + c.fenced_calls,
            completed_calls: a.completed_calls + c.completed_calls,
            violations: a.violations + c.violations,
            faults: a.faults + c.faults,
        })
}

#[test]
fn two_instances_with_confirm_leadership_never_go_below_each_other() {
    // Goal: with confirm_leadership, no timestamp from either instance is ever below one the
    // other handed out in a call that completed earlier (and reads see the other's applied
    // writes). Method: two processes keep taking over one timeline from each other over seeds,
    // with latency and faults; the history checker runs over both instances' calls.
    let results = for_each_seed("takeover-confirm", 300, |seed| takeover_run(seed, true).0);
    let total = sum_takeovers(&results);
    eprintln!(
        "two instances with confirm_leadership, {} seeds: {total:?}",
        results.len()
    );
    assert_eq!(total.violations, 0);
    if results.len() >= MIN_SEEDS_FOR_COVERAGE {
        assert!(total.opens > 2 * results.len() as u64, "{total:?}");
        assert!(total.fenced_calls > 0, "{total:?}");
        assert!(total.faults > 0, "{total:?}");
    }
}

#[test]
fn two_instances_without_confirm_leadership_stay_unique_but_can_go_back() {
    // Goal: show why confirm_leadership exists. Without it a fenced instance serves stale
    // timestamps from its window until its next allocation: never a duplicate, but below what
    // the new instance handed out earlier. Method: the same takeovers; count the violations.
    let results = for_each_seed("takeover-no-confirm", 150, |seed| {
        takeover_run(seed, false).0
    });
    let total = sum_takeovers(&results);
    eprintln!(
        "two instances without confirm_leadership, {} seeds: {total:?}",
        results.len()
    );
    if results.len() >= MIN_SEEDS_FOR_COVERAGE {
        assert!(total.fenced_calls > 0, "{total:?}");
        assert!(total.violations > 0, "the anomaly shows up: {total:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Deterministic scenarios.

#[test]
fn second_instance_fences_the_first_at_its_next_allocation() {
    let sim = Simulator::new(3);
    let rt = sim.runtime();
    let mem = MemConsensus::new();
    let (rt2, mem2) = (rt.clone(), mem.clone());
    sim.block_on(async move {
        let (rt, mem) = (rt2, mem2);
        let a = open(Rc::new(mem.clone()), &rt, config(100)).await.unwrap();
        let a1 = a.write_ts().await.unwrap().timestamp;
        rt.sleep(10).await;
        let b = open(Rc::new(mem.clone()), &rt, config(100)).await.unwrap();
        assert_eq!((a.snapshot().epoch, b.snapshot().epoch), (1, 2));
        let b1 = b.write_ts().await.unwrap().timestamp;
        assert!(b1 > 100, "b starts above a's whole window: {b1}");
        // a does not know yet: it serves a stale timestamp from its window (the anomaly).
        let a2 = a.write_ts().await.unwrap().timestamp;
        assert!(a1 < a2 && a2 < b1);
        // a's next allocation fails as fenced, and so does everything after it.
        rt.sleep(100).await;
        let err = a.write_ts().await.unwrap_err();
        assert_eq!(
            err,
            OracleError::Fenced {
                timeline: TIMELINE.into(),
                epoch: 1,
                current_epoch: 2
            }
        );
        assert!(err.to_string().contains("fenced"), "{err}");
        assert!(matches!(a.read_ts().await, Err(OracleError::Fenced { .. })));
        assert!(matches!(
            a.apply_write(1).await,
            Err(OracleError::Fenced { .. })
        ));
        assert_eq!(a.snapshot().fenced_by, Some(2));
        assert!(a
            .events()
            .iter()
            .any(|e| e.kind == OracleEventKind::Fenced { current_epoch: 2 }));
        // b is unaffected, and its store holds one version.
        assert!(b.write_ts().await.unwrap().timestamp > b1);
        assert_eq!(versions_now(&mem), 1);
    })
    .unwrap();
}

#[test]
fn confirm_leadership_fences_at_once_and_costs_a_read_per_call() {
    let sim = Simulator::new(4);
    let rt = sim.runtime();
    let mem = MemConsensus::new();
    let (rt2, mem2) = (rt.clone(), mem.clone());
    sim.block_on(async move {
        let (rt, mem) = (rt2, mem2);
        let cfg = config(1_000).confirm_leadership(true);
        let a = open(Rc::new(mem.clone()), &rt, cfg.clone()).await.unwrap();
        for _ in 0..5 {
            a.write_ts().await.unwrap();
            a.read_ts().await.unwrap();
        }
        let stats = a.stats();
        assert_eq!(stats.leadership_checks, 10, "one check per call");
        assert_eq!(
            stats.durable_writes, 1,
            "but still one durable write per window"
        );
        let b = open(Rc::new(mem.clone()), &rt, cfg).await.unwrap();
        let b1 = b.write_ts().await.unwrap().timestamp;
        // The window still has room, but a learns at once that it lost its epoch.
        assert!(matches!(
            a.write_ts().await,
            Err(OracleError::Fenced { .. })
        ));
        assert!(matches!(a.read_ts().await, Err(OracleError::Fenced { .. })));
        assert!(b.read_ts().await.unwrap() < b1);
    })
    .unwrap();
}

#[test]
fn restart_resumes_above_everything_and_the_store_does_not_grow() {
    let sim = Simulator::new(5);
    let rt = sim.runtime();
    let mem = MemConsensus::new();
    let (rt2, mem2) = (rt.clone(), mem.clone());
    sim.block_on(async move {
        let (rt, mem) = (rt2, mem2);
        let a = open(Rc::new(mem.clone()), &rt, config(10)).await.unwrap();
        let mut last = 0;
        for _ in 0..300 {
            rt.sleep(1).await;
            let w = a.write_ts().await.unwrap();
            assert_eq!(w.timestamp, rt.now_ms(), "tracks the clock");
            a.apply_write(w.timestamp).await.unwrap();
            last = w.timestamp;
        }
        let stats = a.stats();
        // 300 ms of timestamps in windows of 10 ms, plus the start.
        assert_eq!(stats.durable_writes, 31, "{stats:?}");
        assert_eq!(
            versions_now(&mem),
            1,
            "one version, not {}",
            stats.durable_writes
        );
        assert_eq!(stats.truncated_versions, 30);
        drop(a);
        let b = open(Rc::new(mem.clone()), &rt, config(10)).await.unwrap();
        let (_, record) = stored(&mem);
        let r = b.read_ts().await.unwrap();
        assert!(r > last && r == 310, "resumes at the stored upper: {r}");
        assert!(b.write_ts().await.unwrap().timestamp > r);
        assert_eq!(record.epoch, 2);
        assert_eq!(versions_now(&mem), 1);
    })
    .unwrap();
}

#[test]
fn clock_guard_waits_for_the_clock_and_records_it() {
    // The stored upper is 8 s ahead of a clock at 0, with 1 s intervals: the start waits until
    // the clock is within two intervals (6 s), one second at a time.
    let sim = Simulator::new(6);
    let rt = sim.runtime();
    let mem = MemConsensus::new();
    let record = DurableRecord {
        epoch: 4,
        upper: 8_000,
    };
    let (rt2, mem2) = (rt.clone(), mem.clone());
    let (opened_at, first_write, events) = sim
        .block_on(async move {
            let (rt, mem) = (rt2, mem2);
            let planted = VersionedData {
                seqno: SeqNo(9),
                data: record.encode(),
            };
            mem.compare_and_set(&key(), None, planted).await.unwrap();
            let a = open(Rc::new(mem.clone()), &rt, config(1_000))
                .await
                .unwrap();
            let opened_at = rt.now_ms();
            let w = a.write_ts().await.unwrap().timestamp;
            (opened_at, w, a.events())
        })
        .unwrap();
    assert_eq!(opened_at, 6_000, "waited until within two intervals");
    assert_eq!(first_write, 8_001, "and resumed above the stored upper");
    let waits: Vec<_> = events
        .iter()
        .filter_map(|e| match e.kind {
            OracleEventKind::ClockGuardWait {
                stored_upper,
                wait_ms,
                ..
            } => Some((stored_upper, wait_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(waits, vec![(8_000, 1_000); 6], "{events:#?}");
    assert!(events.iter().any(|e| matches!(
        e.kind,
        OracleEventKind::Opened {
            resumed_from: Some(8_000),
            start_ts: 8_000,
            ..
        }
    )));
}

#[test]
fn clock_guard_is_bounded() {
    let sim = Simulator::new(7);
    let rt = sim.runtime();
    let mem = MemConsensus::new();
    let (rt2, mem2) = (rt.clone(), mem.clone());
    let (opened_at, events, w) = sim
        .block_on(async move {
            let (rt, mem) = (rt2, mem2);
            let planted = VersionedData {
                seqno: SeqNo(1),
                data: DurableRecord {
                    epoch: 1,
                    upper: 1_000_000_000,
                }
                .encode(),
            };
            mem.compare_and_set(&key(), None, planted).await.unwrap();
            let cfg = config(1_000).clock_guard_max_wait_ms(2_500);
            let a = open(Rc::new(mem.clone()), &rt, cfg).await.unwrap();
            let at = rt.now_ms();
            (at, a.events(), a.write_ts().await.unwrap().timestamp)
        })
        .unwrap();
    assert_eq!(opened_at, 2_500);
    let kinds: Vec<_> = events.iter().map(|e| &e.kind).collect();
    assert!(
        matches!(
            kinds[..],
            [
                OracleEventKind::ClockGuardWait { wait_ms: 1_000, .. },
                OracleEventKind::ClockGuardWait { wait_ms: 1_000, .. },
                OracleEventKind::ClockGuardWait { wait_ms: 500, .. },
                OracleEventKind::ClockGuardGaveUp {
                    waited_ms: 2_500,
                    ..
                },
                OracleEventKind::Opened { .. },
                ..
            ]
        ),
        "{kinds:#?}"
    );
    assert_eq!(w, 1_000_000_001, "correct regardless of the clock");
}

/// A Consensus that loses the acknowledgement of the next `n` compare_and_sets (set through the
/// returned counter): they happen, then the caller hears an indeterminate timeout.
fn lose_acks(inner: MemConsensus) -> (Rc<LostAckConsensus>, Rc<Cell<u32>>) {
    let lose = Rc::new(Cell::new(0u32));
    let counter = Rc::clone(&lose);
    let lossy = LostAckConsensus::new(Rc::new(inner), move |_, _| {
        let n = counter.get();
        counter.set(n.saturating_sub(1));
        n > 0
    });
    (Rc::new(lossy), lose)
}

#[test]
fn a_write_that_happened_but_timed_out_is_adopted_not_repeated() {
    let sim = Simulator::new(8);
    let rt = sim.runtime();
    let mem = MemConsensus::new();
    let (lossy, lose) = lose_acks(mem.clone());
    let (rt2, mem2) = (rt.clone(), mem.clone());
    sim.block_on(async move {
        let (rt, mem) = (rt2, mem2);
        let a = open(lossy.clone(), &rt, config(10)).await.unwrap();
        rt.sleep(15).await;
        lose.set(1);
        let w = a.write_ts().await.unwrap();
        assert_eq!(w.timestamp, 15);
        let stats = a.stats();
        assert_eq!(stats.adopted_own_writes, 1);
        assert_eq!(
            stats.cas_attempts, 2,
            "the start and one allocation: no retry"
        );
        let (seqno, record) = stored(&mem);
        assert_eq!((seqno, record.upper), (SeqNo(2), 25));
        assert_eq!(a.snapshot().durable_upper, 25);
        assert!(a.events().iter().any(|e| matches!(
            e.kind,
            OracleEventKind::AdoptedOwnWrite {
                seqno: 2,
                durable_upper: 25
            }
        )));
        // A lost acknowledgement at start costs one more epoch, never a shared one.
        lose.set(1);
        let b = open(lossy.clone(), &rt, config(10)).await.unwrap();
        assert_eq!(
            b.snapshot().epoch,
            3,
            "epoch 2 was written unheard and skipped"
        );
        assert!(b.write_ts().await.unwrap().timestamp >= 25);
    })
    .unwrap();
}

#[test]
fn a_cancelled_allocation_that_landed_is_adopted() {
    // A write_ts cancelled after its compare_and_set happened (while waiting for the reply):
    // the next call finds the write under its own epoch and adopts it.
    let sim = Simulator::new(9);
    let rt = sim.runtime();
    let mem = MemConsensus::new();
    let (rt2, mem2) = (rt.clone(), mem.clone());
    sim.block_on(async move {
        let (rt, mem) = (rt2, mem2);
        let slow = mem.with_latency(Latency::new(rt.clone(), 1, 10, 10));
        let a = open(Rc::new(slow), &rt, config(10)).await.unwrap();
        rt.sleep(30).await;
        // The compare_and_set happens at +10 ms; the reply would come at +20 ms.
        assert!(rt.timeout(15, a.write_ts()).await.is_err());
        assert_eq!(stored(&mem).0, SeqNo(2), "it landed");
        assert_eq!(a.snapshot().seqno, 1, "unheard");
        let w = a.write_ts().await.unwrap().timestamp;
        assert_eq!(a.stats().adopted_own_writes, 1);
        assert!(w >= 30);
    })
    .unwrap();
}

#[test]
fn an_unavailable_store_is_retried_with_backoff_until_the_caller_gives_up() {
    let sim = Simulator::new(10);
    let rt = sim.runtime();
    let mem = MemConsensus::new();
    let faults = UnreliableHandle::new(10, 1.0, 0.0);
    let consensus = Rc::new(UnreliableConsensus::new(
        Rc::new(mem.clone()),
        faults.clone(),
    ));
    let (rt2, faults2) = (rt.clone(), faults.clone());
    sim.block_on(async move {
        let (rt, faults) = (rt2, faults2);
        let a = Rc::new(open(consensus, &rt, config(10)).await.unwrap());
        a.take_events();
        faults.totally_unavailable();
        rt.sleep(50).await;
        // Within the window: served from memory, no storage needed.
        assert!(rt.timeout(1, a.read_ts()).await.unwrap().is_ok());
        // Beyond it: retried until the caller's timeout.
        assert!(rt.timeout(500, a.write_ts()).await.is_err());
        let backoffs: Vec<u64> = a
            .events()
            .iter()
            .filter_map(|e| match &e.kind {
                OracleEventKind::StorageRetry {
                    backoff_ms,
                    indeterminate: false,
                    ..
                } => Some(*backoff_ms),
                _ => None,
            })
            .collect();
        assert_eq!(
            backoffs,
            vec![4, 8, 16, 32, 64, 128, 256],
            "doubling, in 500 ms"
        );
        // The store comes back: the next call goes through.
        faults.totally_available();
        assert!(a.write_ts().await.unwrap().timestamp >= 550);
    })
    .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Broken records: permanent errors, in bounded virtual time, and nothing written after.

/// Plants `data` as the next version of the timeline's key (after `after`, or as the first).
fn plant(mem: &MemConsensus, after: Option<SeqNo>, data: Bytes) -> SeqNo {
    let seqno = after.map_or(SeqNo(1), |s| SeqNo(s.0 + 1));
    let r = mem
        .compare_and_set(&key(), after, VersionedData { seqno, data })
        .now_or_never()
        .expect("immediate")
        .expect("no failure");
    assert_eq!(r, persist_playground::location::CaSResult::Committed);
    seqno
}

/// How many Consensus calls went through `handle` so far.
fn calls_through(handle: &UnreliableHandle) -> u64 {
    handle.counts().ok
}

#[test]
fn a_foreign_record_is_a_decode_error() {
    // A fresh open over a head that is not an oracle record: a Decode error naming the timeline
    // and the seqno, at once (no retry, no virtual time spent), and nothing written.
    let sim = Simulator::new(11);
    let rt = sim.runtime();
    let mem = MemConsensus::new();
    plant(&mem, None, Bytes::from_static(b"{\"not\": \"an oracle\"}"));
    let (rt2, mem2) = (rt.clone(), mem.clone());
    let err = sim
        .block_on(async move { open(Rc::new(mem2), &rt2, config(10)).await.unwrap_err() })
        .unwrap();
    assert!(
        matches!(&err, OracleError::Decode { timeline, seqno: 1, .. } if timeline == TIMELINE),
        "{err:?}"
    );
    assert!(err.is_permanent());
    assert!(err.to_string().contains("not an oracle record"), "{err}");
    assert!(err.to_string().contains("v1"), "names the seqno: {err}");
    assert_eq!(rt.now_ms(), 0, "answered at once");
    assert_eq!(versions_now(&mem), 1, "nothing was written");
    // Empty bytes, the same.
    let mem = MemConsensus::new();
    plant(&mem, None, Bytes::new());
    let (rt2, mem2) = (rt.clone(), mem.clone());
    let err = sim
        .block_on(async move { open(Rc::new(mem2), &rt2, config(10)).await.unwrap_err() })
        .unwrap();
    assert!(
        matches!(err, OracleError::Decode { seqno: 1, .. }),
        "{err:?}"
    );
}

#[test]
fn a_warm_instance_that_finds_a_broken_record_is_broken_for_good() {
    // Goal: a running instance whose next allocation meets a head that does not decode answers a
    // Decode error in bounded virtual time, writes nothing then or later, and answers every later
    // call with the same error without touching the store. Method: garbage is planted as the next
    // version under a running instance (another program's write); calls are counted through a
    // pass-through decorator.
    for confirm in [false, true] {
        let sim = Simulator::new(40);
        let rt = sim.runtime();
        let mem = MemConsensus::new();
        let through = UnreliableHandle::new(40, 1.0, 0.0);
        let consensus = Rc::new(UnreliableConsensus::new(
            Rc::new(mem.clone()),
            through.clone(),
        ));
        let (rt2, mem2, through2) = (rt.clone(), mem.clone(), through.clone());
        sim.block_on(async move {
            let (rt, mem, through) = (rt2, mem2, through2);
            let a = open(consensus, &rt, config(10).confirm_leadership(confirm))
                .await
                .unwrap();
            let w = a.write_ts().await.unwrap();
            a.apply_write(w.timestamp).await.unwrap();
            let (seqno, _) = stored(&mem);
            let garbage = plant(&mem, Some(seqno), Bytes::from_static(b"\xff\x00garbage"));
            rt.sleep(50).await;
            let started_ms = rt.now_ms();
            // With the check, read_ts reads the head; without it, the next allocation does.
            let err = if confirm {
                a.read_ts().await.unwrap_err()
            } else {
                a.write_ts().await.unwrap_err()
            };
            assert_eq!(rt.now_ms(), started_ms, "no back-off, no retry");
            assert!(
                matches!(err, OracleError::Decode { seqno, .. } if seqno == garbage.0),
                "{err:?}"
            );
            assert_eq!(a.broken(), Some(err.clone()));
            let calls = calls_through(&through);
            for _ in 0..3 {
                assert_eq!(a.write_ts().await.unwrap_err(), err);
                assert_eq!(a.read_ts().await.unwrap_err(), err);
                assert_eq!(a.apply_write(u64::MAX).await.unwrap_err(), err);
                assert_eq!(a.peek_write_ts().await.unwrap_err(), err);
                assert_eq!(a.confirm_leadership().await.unwrap_err(), err);
            }
            assert_eq!(
                calls_through(&through),
                calls,
                "the store is never touched again"
            );
            assert_eq!(
                head_now(&mem).unwrap().seqno,
                garbage,
                "nothing was written"
            );
        })
        .unwrap();
    }
}

#[test]
fn a_store_closed_for_good_is_a_permanent_error_not_a_spin() {
    // Goal: a store that will not come back (an IndexedDB connection closed for good) reaches
    // the caller as OracleError::Storage naming it, at once, for a fresh open and for a warm
    // instance (with and without the leadership check), and the instance never calls the store
    // again. Before, the oracle retried it at the back-off cap for as long as it was awaited.
    let sim = Simulator::new(42);
    let rt = sim.runtime();
    let switch = closable::Closable::default();
    let consensus = switch.wrap_consensus(Rc::new(MemConsensus::new()));
    let (rt2, switch2) = (rt.clone(), switch.clone());
    sim.block_on(async move {
        let (rt, switch) = (rt2, switch2);
        let warm = open(consensus.clone(), &rt, config(10)).await.unwrap();
        let checked = open(consensus.clone(), &rt, config(10).confirm_leadership(true))
            .await
            .unwrap();
        checked.write_ts().await.unwrap();
        rt.sleep(100).await;
        switch.close();
        let calls = switch.calls();
        let started_ms = rt.now_ms();
        let is_closed = |err: &OracleError| {
            matches!(err, OracleError::Storage { timeline, source }
                if timeline == TIMELINE
                    && source.kind == persist_playground::location::PermanentKind::Closed)
        };
        // Fresh.
        let err = open(consensus.clone(), &rt, config(10)).await.unwrap_err();
        assert!(is_closed(&err) && err.is_permanent(), "{err:?}");
        // Warm, at its next allocation; and with the check, at once.
        let err = warm.write_ts().await.unwrap_err();
        assert!(is_closed(&err), "{err:?}");
        let err2 = checked.read_ts().await.unwrap_err();
        assert!(is_closed(&err2), "{err2:?}");
        assert_eq!(rt.now_ms(), started_ms, "no back-off, no retry");
        for _ in 0..3 {
            assert_eq!(warm.read_ts().await.unwrap_err(), err, "broken for good");
            assert_eq!(warm.apply_write(1).await.unwrap_err(), err);
            assert_eq!(checked.write_ts().await.unwrap_err(), err2);
        }
        assert_eq!(warm.broken(), Some(err));
        assert_eq!(
            switch.calls(),
            calls,
            "nothing reached the store after it closed"
        );
        assert!(!warm
            .events()
            .iter()
            .any(|e| matches!(e.kind, OracleEventKind::StorageRetry { .. })));
    })
    .unwrap();
}

#[test]
fn stored_extremes_are_errors_or_saturation_never_panics() {
    // Goal: records that decode but carry extreme numbers (u64::MAX, i64::MIN's bits, a head at
    // the last seqno) never panic or wrap: each is a typed error, or a saturated timeline.
    // Method: plant each record, open over it on the simulator, and call everything.
    let records: Vec<(SeqNo, DurableRecord)> = vec![
        (
            SeqNo(1),
            DurableRecord {
                epoch: u64::MAX,
                upper: 5,
            },
        ),
        (
            SeqNo(1),
            DurableRecord {
                epoch: 1,
                upper: u64::MAX,
            },
        ),
        (
            SeqNo(1),
            DurableRecord {
                epoch: 1,
                upper: u64::MAX - 1,
            },
        ),
        (
            SeqNo(1),
            DurableRecord {
                epoch: 1,
                upper: i64::MIN as u64,
            },
        ),
        (
            SeqNo(1),
            DurableRecord {
                epoch: i64::MIN as u64,
                upper: 0,
            },
        ),
        (SeqNo::maximum(), DurableRecord { epoch: 1, upper: 5 }),
    ];
    for (i, (seqno, record)) in records.into_iter().enumerate() {
        let sim = Simulator::new(50 + i as u64);
        let rt = sim.runtime();
        let mem = MemConsensus::new();
        let r = mem
            .compare_and_set(
                &key(),
                None,
                VersionedData {
                    seqno,
                    data: record.encode(),
                },
            )
            .now_or_never()
            .unwrap()
            .unwrap();
        assert_eq!(r, persist_playground::location::CaSResult::Committed);
        let (rt2, mem2) = (rt.clone(), mem.clone());
        let outcome = sim
            .block_on(async move {
                let config = config(10).clock_guard_max_wait_ms(0);
                let a = match open(Rc::new(mem2), &rt2, config).await {
                    Ok(a) => a,
                    Err(err) => return Err(err),
                };
                let read = a.read_ts().await;
                let write = a.write_ts().await;
                let apply = a.apply_write(u64::MAX).await;
                Ok((read, write, apply))
            })
            .unwrap();
        match (i, outcome) {
            // The epoch cannot be bumped; no seqno is left after the maximum.
            (0 | 5, Err(err)) => {
                assert!(
                    matches!(err, OracleError::Inconsistent { .. }),
                    "{i}: {err:?}"
                );
                assert!(err.is_permanent());
                assert_eq!(versions_now(&mem), 1, "{i}: nothing was written");
            }
            // Saturated: reads at the top, no write timestamp left, nothing wrapped.
            (1 | 2, Ok((read, write, apply))) => {
                assert_eq!(read, Ok(u64::MAX - u64::from(i == 2)), "{i}");
                assert!(
                    matches!(write, Err(OracleError::Exhausted { .. })),
                    "{i}: {write:?}"
                );
                assert_eq!(apply, Ok(()), "{i}");
            }
            // Large but ordinary numbers work as any others.
            (3 | 4, Ok((read, write, apply))) => {
                let (read, write) = (read.unwrap(), write.unwrap().timestamp);
                assert!(write > read, "{i}");
                assert!(
                    matches!(apply, Ok(()) | Err(OracleError::Exhausted { .. })),
                    "{i}"
                );
            }
            (i, outcome) => panic!("record {i}: unexpected {outcome:?}"),
        }
    }
}

#[test]
fn a_later_version_of_its_own_epoch_that_lowers_the_upper_is_inconsistent() {
    // Before: an assert (a panic, which kills a wasm page). Now a typed error, and the instance
    // is broken. Method: a record with the instance's own epoch but a lower upper is planted as
    // the next version (a forger, or a restored backup); the next leadership check reads it.
    let sim = Simulator::new(41);
    let rt = sim.runtime();
    let mem = MemConsensus::new();
    let (rt2, mem2) = (rt.clone(), mem.clone());
    sim.block_on(async move {
        let (rt, mem) = (rt2, mem2);
        let a = open(Rc::new(mem.clone()), &rt, config(100)).await.unwrap();
        let (seqno, record) = stored(&mem);
        let forged = DurableRecord {
            epoch: record.epoch,
            upper: record.upper - 50,
        };
        plant(&mem, Some(seqno), forged.encode());
        let err = a.confirm_leadership().await.unwrap_err();
        assert!(matches!(err, OracleError::Inconsistent { .. }), "{err:?}");
        assert!(err.to_string().contains("lowers the upper"), "{err}");
        assert_eq!(a.write_ts().await.unwrap_err(), err, "broken for good");
        assert_eq!(versions_now(&mem), 2, "nothing written");
    })
    .unwrap();
}

#[test]
fn the_record_decoder_never_panics_on_random_or_extreme_bytes() {
    // Property: for any bytes, decode answers Ok or an error, never a panic; an Ok re-encodes to
    // the same bytes. Inputs: random bytes of every length up to 64 (4,000 seeds), and the valid
    // header followed by extreme numbers (u64::MAX, i64::MIN, 0, 1), truncated or extended past
    // the layout's 19 bytes.
    let mut rng = Rng::new(77);
    let check = |bytes: &[u8]| match DurableRecord::decode(bytes) {
        Ok(record) => {
            assert_eq!(
                &record.encode()[..],
                bytes,
                "a decoded record re-encodes as read"
            );
            assert!(record.epoch >= 1);
        }
        Err(err) => assert!(!err.to_string().is_empty()),
    };
    let mut ok = 0;
    for _ in 0..4_000 {
        let len = rng.below(65) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
        // Half of them with the right header, so that the numbers are reached.
        if rng.below(2) == 0 && len >= 3 {
            bytes[..3].copy_from_slice(b"to\x01");
        }
        check(&bytes);
        ok += DurableRecord::decode(&bytes).is_ok() as u32;
    }
    let extremes = [u64::MAX, i64::MIN as u64, 0, 1, i64::MAX as u64];
    for epoch in extremes {
        for upper in extremes {
            let mut bytes = b"to\x01".to_vec();
            bytes.extend_from_slice(&epoch.to_be_bytes());
            bytes.extend_from_slice(&upper.to_be_bytes());
            assert_eq!(
                DurableRecord::decode(&bytes).is_ok(),
                epoch != 0,
                "{epoch} {upper}"
            );
            ok += 1;
            for len in 0..bytes.len() + 16 {
                let mut b = bytes.clone();
                b.resize(len, 0xff);
                check(&b);
            }
        }
    }
    assert!(ok > 20, "some inputs decoded: {ok}");
}

#[test]
fn concurrent_calls_on_one_instance_share_allocations() {
    // Many tasks calling write_ts at once on one instance: one allocation per window, every
    // timestamp distinct.
    let sim = Simulator::new(12);
    let rt = sim.runtime();
    let mem = MemConsensus::new();
    let (rt2, mem2) = (rt.clone(), mem.clone());
    let (ts, durable_writes) = sim
        .block_on(async move {
            let slow = mem2.with_latency(Latency::new(rt2.clone(), 2, 1, 3));
            let a = Rc::new(open(Rc::new(slow), &rt2, config(1_000)).await.unwrap());
            let calls = (0..50).map(|_| {
                let a = Rc::clone(&a);
                async move { a.write_ts().await.unwrap().timestamp }
            });
            let ts = futures::future::join_all(calls).await;
            (ts, a.stats().durable_writes)
        })
        .unwrap();
    let distinct: BTreeSet<_> = ts.iter().collect();
    assert_eq!(distinct.len(), 50);
    assert_eq!(durable_writes, 1, "the first window covers them all");
}
