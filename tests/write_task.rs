//! The differential write task in the deterministic simulator, over fault-injecting locations.
//!
//! Families of tests, and how each works:
//!
//! - **One task, a disturbing writer** (`one_task_converges_after_disturbance`, many seeds): a
//!   writable task and a read-only task receive the same random commands; another writer (the
//!   disturber) appends random rows to the same shard; the store is partially available, then
//!   perhaps totally unavailable, then available. A reference model (a `BTreeMap` of rows) applies
//!   every command. Checked: two tick intervals after the disturber stopped and the store came
//!   back, the shard at its upper equals the model (and still does later); from then on the upper
//!   stays within two tick intervals of the clock (sampled every 97 ms); every responder gets an
//!   answer (never `Canceled`); the read-only task answers `ReadOnly`, never attempts a write,
//!   never ticks, and its writer never runs a `compare_and_append`; every commit made the shard
//!   equal the task's `desired` at that moment ([`audit_commits`] replays the shard's history);
//!   each task's events follow the loop's grammar. Across the seeds, disturbances, mismatches,
//!   re-syncs and injected faults must all have happened.
//! - **Tasks racing** (`tasks_race_on_one_shard`, many seeds): two or three writable tasks with
//!   different desired collections share a shard, under partial availability. Checked: after
//!   every commit (with data or not) the shard equals the committing task's `desired`; every seed
//!   has mismatches and re-syncs, and the events show each mismatch followed by its re-sync.
//! - **Edges**, one seed each: abort answers every responder; shutdown answers queued commands;
//!   a write whose retries are spent answers an error and the tick writes the pending delta later;
//!   a finished shard ends the task; prepare seeds `desired` from the shard; bad configuration is
//!   an error; one seed replays to the same events.
//!
//! `WRITE_TASK_SEEDS=N` runs N seeds per randomized test (default 200); `WRITE_TASK_SEED=S`
//! replays one seed.
#![cfg(not(target_arch = "wasm32"))]

#[path = "support/closable.rs"]
mod closable;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use futures::channel::oneshot;
use persist_playground::location::mem::{Latency, MemBlob, MemConsensus};
use persist_playground::location::unreliable::{
    UnreliableBlob, UnreliableConsensus, UnreliableHandle,
};
use persist_playground::location::Location;
use persist_playground::persist::codec::{Datum, Diff, Row};
use persist_playground::persist::events::PersistEvent;
use persist_playground::persist::read::ReadHandle;
use persist_playground::persist::write::WriteHandle;
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::sim::Simulator;
use persist_playground::runtime::Runtime;
use persist_playground::write_task::audit::audit_commits;
use persist_playground::write_task::*;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use timely::progress::Antichain;

const TICK_MS: u64 = 1_000;
const SHARD: &str = "mz_differential";

type Answer = oneshot::Receiver<Result<(), WriteTaskError>>;

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("WRITE_TASK_SEED") {
        return vec![s.parse().expect("WRITE_TASK_SEED is a u64")];
    }
    let n = std::env::var("WRITE_TASK_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200u64);
    (0..n).collect()
}

// ---------------------------------------------------------------------------------------------
// The world: one in-memory store, seen raw (by checkers) and through latency and faults (by
// everyone else).

struct World {
    sim: Simulator,
    rt: Runtime,
    fault: UnreliableHandle,
    faulty: Location,
    raw: Location,
    shard: ShardId,
}

impl World {
    fn new(seed: u64) -> World {
        let sim = Simulator::new(seed);
        sim.set_record_trace(false);
        let rt = sim.runtime();
        let (blob, consensus) = (MemBlob::new(), MemConsensus::new());
        let latency = Latency::new(rt.clone(), seed.wrapping_mul(31).wrapping_add(7), 0, 12);
        let fault = UnreliableHandle::new(seed.wrapping_mul(17).wrapping_add(3), 1.0, 0.0);
        let faulty = Location {
            blob: Rc::new(UnreliableBlob::new(
                Rc::new(blob.with_latency(latency.clone())),
                fault.clone(),
            )),
            consensus: Rc::new(UnreliableConsensus::new(
                Rc::new(consensus.with_latency(latency)),
                fault.clone(),
            )),
        };
        let raw = Location {
            blob: Rc::new(blob),
            consensus: Rc::new(consensus),
        };
        World {
            sim,
            rt,
            fault,
            faulty,
            raw,
            shard: ShardId::new(SHARD).unwrap(),
        }
    }

    fn persist_cfg() -> PersistConfig {
        PersistConfig {
            backoff_max_ms: 200,
            ..PersistConfig::default()
        }
    }

    /// A client through latency and faults: another process.
    fn client(&self, seed: u64) -> PersistClient {
        PersistClient::new(
            self.faulty.clone(),
            self.rt.clone(),
            Self::persist_cfg(),
            seed,
        )
    }

    /// A client on the raw store, whose reader holds the since at 0 for the whole run.
    fn checker(&self, seed: u64) -> PersistClient {
        let cfg = PersistConfig {
            reader_lease_duration_ms: 24 * 3_600_000,
            ..Self::persist_cfg()
        };
        PersistClient::new(self.raw.clone(), self.rt.clone(), cfg, seed)
    }

    fn open_writer(&self, client: &PersistClient) -> WriteHandle<Row, ()> {
        let (c, s) = (client.clone(), self.shard.clone());
        self.sim
            .block_on(async move { c.open_writer::<Row, ()>(&s).await })
            .unwrap()
            .unwrap()
    }

    fn open_reader(&self, client: &PersistClient) -> ReadHandle<Row, ()> {
        let (c, s) = (client.clone(), self.shard.clone());
        self.sim
            .block_on(async move { c.open_leased_reader::<Row, ()>(&s).await })
            .unwrap()
            .unwrap()
    }

    fn task_cfg(&self, log: &WriteTaskLog) -> WriteTaskConfig {
        WriteTaskConfig {
            runtime: self.rt.clone(),
            upper_tick_interval_ms: TICK_MS,
            batch_duration_ms: 100,
            retry: RetryPolicy {
                initial_backoff_ms: 20,
                factor_percent: 125,
                clamp_backoff_ms: 200,
                max_tries: 20,
            },
            attempt_timeout_ms: 3 * TICK_MS,
            log: log.clone(),
        }
    }

    #[allow(clippy::type_complexity)]
    fn spawn_task(
        &self,
        id: &str,
        client: &PersistClient,
        read_only: bool,
        introspection: DifferentialIntrospectionConfig,
        cfg: WriteTaskConfig,
    ) -> (
        CommandSender,
        persist_playground::runtime::JoinHandle<()>,
        oneshot::Sender<()>,
        String,
    ) {
        let write = self.open_writer(client);
        let writer_id = write.writer_id().0.clone();
        let (c, s) = (client.clone(), self.shard.clone());
        let read_handle_fn = move || -> ReadHandleFuture {
            let (c, s) = (c.clone(), s.clone());
            Box::pin(async move { c.open_leased_reader::<Row, ()>(&s).await })
        };
        let (tx, handle, shutdown) = DifferentialWriteTask::spawn(
            id,
            write,
            read_handle_fn,
            read_only,
            now_fn(&self.rt),
            introspection,
            cfg,
        )
        .unwrap();
        (tx, handle, shutdown, writer_id)
    }

    /// The shard's upper and its contents there, read instantly from the raw store.
    fn contents(
        &self,
        checker: &PersistClient,
        reader: &Rc<RefCell<Option<ReadHandle<Row, ()>>>>,
    ) -> (u64, Vec<(Row, Diff)>) {
        let (c, s, r) = (checker.clone(), self.shard.clone(), Rc::clone(reader));
        self.sim
            .block_on(async move {
                let upper = *c
                    .inspect_state(&s)
                    .await
                    .unwrap()
                    .upper()
                    .as_option()
                    .unwrap();
                // Take the reader out for the read: no RefCell borrow across an await.
                let mut read = r.borrow_mut().take().unwrap();
                let snapshot = if upper == 0 {
                    Vec::new()
                } else {
                    read.snapshot_and_fetch(Antichain::from_elem(upper - 1))
                        .await
                        .unwrap()
                };
                *r.borrow_mut() = Some(read);
                let rows = snapshot.into_iter().map(|((r, ()), _, d)| (r, d)).collect();
                (upper, rows)
            })
            .unwrap()
    }
}

fn row(k: i64, v: u64) -> Row {
    Row::new([Datum::Int(k), Datum::String(format!("v{v}"))])
}

fn key_of(row: &Row) -> i64 {
    match row.0.first() {
        Some(Datum::Int(k)) => *k,
        _ => -1,
    }
}

/// A command as data, so that it can be sent to several tasks and applied to the model.
#[derive(Debug, Clone)]
enum Cmd {
    Append(Vec<(Row, Diff)>),
    /// Delete rows whose key is `rem` modulo `modulus`.
    Delete {
        modulus: i64,
        rem: i64,
    },
}

impl Cmd {
    fn random(rng: &mut Xoshiro256PlusPlus, key_base: i64, model: &BTreeMap<Row, i128>) -> Cmd {
        match rng.next_u64() % 10 {
            0 | 1 => Cmd::Delete {
                modulus: 2 + (rng.next_u64() % 4) as i64,
                rem: (rng.next_u64() % 2) as i64,
            },
            2 if !model.is_empty() => {
                // Retract a row the model has.
                let nth = (rng.next_u64() % model.len() as u64) as usize;
                let r = model.keys().nth(nth).unwrap().clone();
                Cmd::Append(vec![(r, -1)])
            }
            _ => {
                let n = 1 + rng.next_u64() % 4;
                let updates = (0..n)
                    .map(|_| {
                        let k = key_base + (rng.next_u64() % 16) as i64;
                        (row(k, rng.next_u64() % 3), 1 + (rng.next_u64() % 2) as i64)
                    })
                    .collect();
                Cmd::Append(updates)
            }
        }
    }

    fn op(&self) -> StorageWriteOp {
        match self {
            Cmd::Append(updates) => StorageWriteOp::Append {
                updates: updates.clone(),
            },
            Cmd::Delete { modulus, rem } => {
                let (m, r) = (*modulus, *rem);
                StorageWriteOp::Delete {
                    filter: Box::new(move |row| key_of(row).rem_euclid(m) == r),
                }
            }
        }
    }

    fn apply(&self, model: &mut BTreeMap<Row, i128>) {
        match self {
            Cmd::Append(updates) => {
                for (r, d) in updates {
                    *model.entry(r.clone()).or_default() += i128::from(*d);
                }
                model.retain(|_, d| *d != 0);
            }
            Cmd::Delete { modulus, rem } => {
                model.retain(|r, _| key_of(r).rem_euclid(*modulus) != *rem);
            }
        }
    }
}

fn consolidated(model: &BTreeMap<Row, i128>) -> Vec<(Row, Diff)> {
    model
        .iter()
        .map(|(r, d)| (r.clone(), Diff::try_from(*d).unwrap()))
        .collect()
}

fn send(tx: &CommandSender, cmd: &Cmd, answers: &Rc<RefCell<Vec<Answer>>>) {
    let (resp_tx, resp_rx) = oneshot::channel();
    tx.unbounded_send((cmd.op(), resp_tx))
        .expect("the task is running");
    answers.borrow_mut().push(resp_rx);
}

/// Every answer arrived (none `Canceled`); returns them.
fn collect_answers(answers: &Rc<RefCell<Vec<Answer>>>) -> Vec<Result<(), WriteTaskError>> {
    answers
        .borrow_mut()
        .iter_mut()
        .map(|rx| match rx.try_recv() {
            Ok(Some(answer)) => answer,
            Ok(None) => panic!("a responder was never answered"),
            Err(oneshot::Canceled) => panic!("a responder was dropped unanswered"),
        })
        .collect()
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    seeds: u64,
    disturbances: u64,
    mismatches: u64,
    resyncs: u64,
    faults: u64,
    outages: u64,
    commits_with_data: u64,
    tick_pending_writes: u64,
    gave_up: u64,
    ok_answers: u64,
    max_converge_ms: u64,
    max_lag_ms: u64,
}

fn count_kind(events: &[WriteTaskEvent], f: impl Fn(&WriteTaskEventKind) -> bool) -> u64 {
    events.iter().filter(|e| f(&e.kind)).count() as u64
}

// ---------------------------------------------------------------------------------------------
// One task, a disturbing writer.

fn one_task_run(seed: u64) -> Counts {
    let w = World::new(seed);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x00de_fec8);
    let log = WriteTaskLog::new();
    let checker = w.checker(seed.wrapping_mul(8) + 1);
    // The audit reader opens first, so it holds the since at 0 for the whole run.
    let audit_reader = Rc::new(RefCell::new(Some(w.open_reader(&checker))));
    let task_client = w.client(seed.wrapping_mul(8) + 2);
    let ro_client = w.client(seed.wrapping_mul(8) + 3);
    let disturber_client = w.client(seed.wrapping_mul(8) + 4);
    let (tx, _task, shutdown, _) = w.spawn_task(
        "task",
        &task_client,
        false,
        DifferentialIntrospectionConfig::default(),
        w.task_cfg(&log),
    );
    let (ro_tx, _ro_task, ro_shutdown, ro_writer) = w.spawn_task(
        "read-only",
        &ro_client,
        true,
        DifferentialIntrospectionConfig::default(),
        w.task_cfg(&log),
    );
    let mut disturber_write = w.open_writer(&disturber_client);
    let t0 = w.sim.now_ms();

    // The schedule of this seed.
    let commands_end = t0 + 4_000 + rng.next_u64() % 4_000;
    let (outage_start, outage_end) = if rng.next_u64() % 2 == 0 {
        let start = commands_end - 2_000 + rng.next_u64() % 2_500;
        (Some(start), start + 300 + rng.next_u64() % 4_000)
    } else {
        (None, commands_end)
    };
    let disturber_stop = commands_end - 1_000 + rng.next_u64() % 4_000;
    let happen = 0.85 + (rng.next_u64() % 16) as f64 / 100.0;
    let timeout = (rng.next_u64() % 12) as f64 / 100.0;
    w.fault.partially_available(happen, timeout);

    // The disturber: random rows at the shard's upper, every 100 to 1500 ms, until stopped.
    let disturbances = Rc::new(Cell::new(0u64));
    let (rt, d, mut drng) = (
        w.rt.clone(),
        Rc::clone(&disturbances),
        Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xd157),
    );
    let disturber = w.rt.spawn("disturber", async move {
        loop {
            rt.sleep(100 + drng.next_u64() % 1_400).await;
            let lower = *disturber_write
                .fetch_recent_upper()
                .await
                .unwrap()
                .as_option()
                .unwrap();
            let updates: Vec<((Row, ()), u64, i64)> = (0..1 + drng.next_u64() % 3)
                .map(|_| {
                    let k = (drng.next_u64() % 24) as i64;
                    let diff = if drng.next_u64() % 3 == 0 { -1 } else { 1 };
                    ((row(k, drng.next_u64() % 3), ()), lower, diff)
                })
                .collect();
            let new_upper = rt.now_ms().max(lower + 1);
            let result = disturber_write
                .compare_and_append(
                    &updates,
                    Antichain::from_elem(lower),
                    Antichain::from_elem(new_upper),
                )
                .await;
            if matches!(result, Ok(Ok(()))) {
                d.set(d.get() + 1);
            }
        }
    });

    // The commands, to both tasks; the model applies them in the same order.
    let model: Rc<RefCell<BTreeMap<Row, i128>>> = Rc::default();
    let answers: Rc<RefCell<Vec<Answer>>> = Rc::default();
    let ro_answers: Rc<RefCell<Vec<Answer>>> = Rc::default();
    let (rt, m, a, ra) = (
        w.rt.clone(),
        Rc::clone(&model),
        Rc::clone(&answers),
        Rc::clone(&ro_answers),
    );
    let mut crng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xc0de);
    // The tasks end when every command sender is gone: keep one of each.
    let (_tx_keep, _ro_tx_keep) = (tx.clone(), ro_tx.clone());
    w.rt.spawn("commands", async move {
        loop {
            rt.sleep(50 + crng.next_u64() % 900).await;
            if rt.now_ms() >= commands_end {
                return;
            }
            let cmd = Cmd::random(&mut crng, 0, &m.borrow());
            cmd.apply(&mut m.borrow_mut());
            send(&tx, &cmd, &a);
            send(&ro_tx, &cmd, &ra);
        }
    })
    .detach();

    // Sampled every 97 ms from the raw store: the upper's lag behind the clock, once the store has
    // been available a while; and, once quiet, since when the shard has equalled desired.
    let lag_violations: Rc<RefCell<Vec<String>>> = Rc::default();
    let max_lag = Rc::new(Cell::new(0u64));
    let converged_since: Rc<Cell<Option<u64>>> = Rc::default();
    let available_at = outage_end.max(commands_end);
    let quiet_at = available_at.max(disturber_stop);
    let lag_from = available_at + 2 * TICK_MS;
    let sample_reader = w.open_reader(&checker);
    let (rt, c, s, lv, ml, cs, m) = (
        w.rt.clone(),
        checker.clone(),
        w.shard.clone(),
        Rc::clone(&lag_violations),
        Rc::clone(&max_lag),
        Rc::clone(&converged_since),
        Rc::clone(&model),
    );
    let sampler = w.rt.spawn("sampler", async move {
        let mut reader = sample_reader;
        rt.sleep_until(lag_from.min(quiet_at)).await;
        loop {
            let upper = *c
                .inspect_state(&s)
                .await
                .unwrap()
                .upper()
                .as_option()
                .unwrap();
            let now = rt.now_ms();
            if now >= lag_from {
                let lag = now.saturating_sub(upper);
                ml.set(ml.get().max(lag));
                if lag > 2 * TICK_MS {
                    lv.borrow_mut()
                        .push(format!("at {now} the upper was {upper}"));
                }
            }
            if now >= quiet_at {
                let have: Vec<(Row, Diff)> = reader
                    .snapshot_and_fetch(Antichain::from_elem(upper - 1))
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|((r, ()), _, d)| (r, d))
                    .collect();
                if have == consolidated(&m.borrow()) {
                    cs.set(Some(cs.get().unwrap_or(now)));
                } else {
                    cs.set(None);
                }
            }
            rt.sleep(97).await;
        }
    });

    // Phases: faults, maybe an outage, then available; the disturber stops.
    let mut phases = vec![(disturber_stop, "stop disturber")];
    if let Some(start) = outage_start {
        phases.push((start, "outage"));
    }
    phases.push((outage_end.max(commands_end), "available"));
    phases.sort();
    let mut disturber = Some(disturber);
    for (at, what) in phases {
        w.sim.run_until(at).unwrap();
        match what {
            "stop disturber" => drop(disturber.take()),
            "outage" => w.fault.totally_unavailable(),
            _ => w.fault.totally_available(),
        }
    }
    // Convergence: within two ticks of the disturber stopping and the store being available.
    let deadline = quiet_at + 2 * TICK_MS;
    w.sim.run_until(deadline).unwrap();
    let want = consolidated(&model.borrow());
    let (upper, have) = w.contents(&checker, &audit_reader);
    assert_eq!(
        have, want,
        "seed {seed}: at {deadline} (upper {upper}) the shard does not equal desired"
    );
    w.sim.run_for(3 * TICK_MS).unwrap();
    let (_, have) = w.contents(&checker, &audit_reader);
    assert_eq!(have, want, "seed {seed}: the shard stays equal to desired");
    drop(sampler);
    assert!(
        lag_violations.borrow().is_empty(),
        "seed {seed}: the upper lagged the clock by more than two ticks: {:?}",
        lag_violations.borrow()
    );

    // Shut both down; every responder has its answer.
    shutdown.send(()).unwrap();
    ro_shutdown.send(()).unwrap();
    let l = log.clone();
    w.sim
        .run_until_pred(
            || {
                count_kind(&l.events(), |k| {
                    matches!(k, WriteTaskEventKind::Ended { .. })
                }) == 2
            },
            10_000_000,
        )
        .unwrap();
    let results = collect_answers(&answers);
    for r in &results {
        assert!(
            matches!(r, Ok(()) | Err(WriteTaskError::InvalidUppers { .. })),
            "seed {seed}: unexpected answer {r:?}"
        );
    }
    for r in collect_answers(&ro_answers) {
        assert!(
            matches!(r, Err(WriteTaskError::ReadOnly { .. })),
            "seed {seed}: a read-only task answered {r:?}"
        );
    }

    // Read-only wrote nothing and never ticked.
    let ro_events = events_of(&log, "read-only");
    assert_eq!(
        count_kind(&ro_events, |k| matches!(
            k,
            WriteTaskEventKind::WriteAttempted { .. }
                | WriteTaskEventKind::Ticked { .. }
                | WriteTaskEventKind::Committed { .. }
                | WriteTaskEventKind::Resynced { .. }
        )),
        0,
        "seed {seed}: read-only events {ro_events:?}"
    );
    assert_eq!(
        count_kind(&ro_events, |k| matches!(
            k,
            WriteTaskEventKind::CommandReceived { .. }
        )),
        ro_answers.borrow().len() as u64
    );
    let ro_caas = ro_client
        .events()
        .events()
        .into_iter()
        .filter(|e| matches!(e, PersistEvent::Command { who, cmd, .. } if *who == ro_writer && cmd == "compare_and_append"))
        .count();
    assert_eq!(
        ro_caas, 0,
        "seed {seed}: the read-only writer ran compare_and_append"
    );

    // Every commit made the shard equal desired; the events follow the grammar.
    let events = events_of(&log, "task");
    if std::env::var("WRITE_TASK_DUMP").is_ok() {
        println!("quiet at {quiet_at}, available at {available_at}, outage {outage_start:?}");
        for e in &events {
            println!("{e:?}");
        }
    }
    check_event_order(&events, true).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    check_event_order(&ro_events, true).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let reader = audit_reader.borrow_mut().take().unwrap();
    let events = events_of(&log, "task");
    let report = w
        .sim
        .block_on(async move { audit_commits(reader, &events).await })
        .unwrap()
        .unwrap();
    assert!(
        report.failures.is_empty(),
        "seed {seed}: {:#?}",
        report.failures
    );
    assert!(report.commits > 0);

    let events = events_of(&log, "task");
    Counts {
        seeds: 1,
        disturbances: disturbances.get(),
        mismatches: count_kind(&events, |k| {
            matches!(k, WriteTaskEventKind::Mismatch { .. })
        }),
        resyncs: count_kind(&events, |k| {
            matches!(k, WriteTaskEventKind::Resynced { .. })
        }),
        faults: w.fault.counts().faults(),
        outages: outage_start.is_some() as u64,
        commits_with_data: report.commits_with_data,
        tick_pending_writes: count_kind(&events, |k| {
            matches!(
                k,
                WriteTaskEventKind::Committed {
                    cause: WriteCause::TickPending,
                    ..
                }
            )
        }),
        gave_up: count_kind(&events, |k| matches!(k, WriteTaskEventKind::GaveUp { .. })),
        ok_answers: results.iter().filter(|r| r.is_ok()).count() as u64,
        max_converge_ms: converged_since
            .get()
            .map_or(u64::MAX, |t| t.saturating_sub(quiet_at)),
        max_lag_ms: max_lag.get(),
    }
}

#[test]
fn one_task_converges_after_disturbance() {
    let mut total = Counts::default();
    for seed in seeds() {
        let c = one_task_run(seed);
        total.seeds += c.seeds;
        total.disturbances += c.disturbances;
        total.mismatches += c.mismatches;
        total.resyncs += c.resyncs;
        total.faults += c.faults;
        total.outages += c.outages;
        total.commits_with_data += c.commits_with_data;
        total.tick_pending_writes += c.tick_pending_writes;
        total.gave_up += c.gave_up;
        total.ok_answers += c.ok_answers;
        if c.max_converge_ms > total.max_converge_ms {
            println!("seed {seed}: converged {} ms after the disturber stopped and the store was available", c.max_converge_ms);
        }
        total.max_converge_ms = total.max_converge_ms.max(c.max_converge_ms);
        total.max_lag_ms = total.max_lag_ms.max(c.max_lag_ms);
    }
    println!("one task, {total:?}");
    if total.seeds >= 20 {
        assert!(total.disturbances > 0, "{total:?}");
        assert!(total.mismatches > 0, "{total:?}");
        assert!(total.resyncs > 0, "{total:?}");
        assert!(total.faults > 0, "{total:?}");
        assert!(total.outages > 0, "{total:?}");
        assert!(total.tick_pending_writes > 0, "{total:?}");
        assert!(total.ok_answers > 0, "{total:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Tasks racing on one shard.

fn race_run(seed: u64) -> Counts {
    let w = World::new(seed);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xbace);
    let log = WriteTaskLog::new();
    let checker = w.checker(seed.wrapping_mul(8) + 1);
    let audit_reader = w.open_reader(&checker);
    let tasks = 2 + (rng.next_u64() % 2) as usize;
    let mut senders = Vec::new();
    let answers: Rc<RefCell<Vec<Answer>>> = Rc::default();
    for i in 0..tasks {
        let client = w.client(seed.wrapping_mul(8) + 2 + i as u64);
        let (tx, handle, shutdown, _) = w.spawn_task(
            &format!("task{i}"),
            &client,
            false,
            DifferentialIntrospectionConfig::default(),
            w.task_cfg(&log),
        );
        // Each task's desired differs: its own key range.
        let mut model = BTreeMap::new();
        let initial = Cmd::Append(
            (0..3 + rng.next_u64() % 4)
                .map(|j| (row(1_000 * i as i64 + j as i64, 0), 1))
                .collect(),
        );
        initial.apply(&mut model);
        send(&tx, &initial, &answers);
        senders.push((tx, handle, shutdown, model));
    }
    w.fault.partially_available(
        0.9 + (rng.next_u64() % 11) as f64 / 100.0,
        (rng.next_u64() % 8) as f64 / 100.0,
    );
    // A few more commands while they race.
    let end = w.sim.now_ms() + 6_000;
    while w.sim.now_ms() + 1_000 < end {
        w.sim.run_for(200 + rng.next_u64() % 900).unwrap();
        let i = (rng.next_u64() % tasks as u64) as usize;
        let (tx, _, _, model) = &mut senders[i];
        let cmd = Cmd::random(&mut rng, 1_000 * i as i64, model);
        cmd.apply(model);
        send(tx, &cmd, &answers);
    }
    w.sim.run_until(end).unwrap();
    w.fault.totally_available();
    w.sim.run_for(2 * TICK_MS).unwrap();
    let mut handles = Vec::new();
    for (tx, handle, shutdown, _) in senders {
        shutdown.send(()).unwrap();
        handles.push((tx, handle));
    }
    let l = log.clone();
    w.sim
        .run_until_pred(
            || {
                count_kind(&l.events(), |k| {
                    matches!(k, WriteTaskEventKind::Ended { .. })
                }) == tasks as u64
            },
            10_000_000,
        )
        .unwrap();
    let results = collect_answers(&answers);
    for r in &results {
        assert!(
            matches!(r, Ok(()) | Err(WriteTaskError::InvalidUppers { .. })),
            "seed {seed}: unexpected answer {r:?}"
        );
    }

    let all = log.events();
    let report = w
        .sim
        .block_on(async move { audit_commits(audit_reader, &all).await })
        .unwrap()
        .unwrap();
    assert!(
        report.failures.is_empty(),
        "seed {seed}: {:#?}",
        report.failures
    );
    assert!(
        report.commits_with_data >= tasks as u64,
        "seed {seed}: {report:?}"
    );

    let mut counts = Counts {
        seeds: 1,
        faults: w.fault.counts().faults(),
        commits_with_data: report.commits_with_data,
        ok_answers: results.iter().filter(|r| r.is_ok()).count() as u64,
        ..Counts::default()
    };
    for i in 0..tasks {
        let events = events_of(&log, &format!("task{i}"));
        check_event_order(&events, true).unwrap_or_else(|e| panic!("seed {seed} task{i}: {e}"));
        counts.mismatches += count_kind(&events, |k| {
            matches!(k, WriteTaskEventKind::Mismatch { .. })
        });
        counts.resyncs += count_kind(&events, |k| {
            matches!(k, WriteTaskEventKind::Resynced { .. })
        });
        counts.gave_up += count_kind(&events, |k| matches!(k, WriteTaskEventKind::GaveUp { .. }));
    }
    assert!(
        counts.mismatches > 0 && counts.resyncs > 0,
        "seed {seed}: {counts:?}"
    );
    counts
}

#[test]
fn tasks_race_on_one_shard() {
    let mut total = Counts::default();
    for seed in seeds() {
        let c = race_run(seed);
        total.seeds += 1;
        total.mismatches += c.mismatches;
        total.resyncs += c.resyncs;
        total.faults += c.faults;
        total.commits_with_data += c.commits_with_data;
        total.gave_up += c.gave_up;
        total.ok_answers += c.ok_answers;
    }
    println!("race, {total:?}");
    if total.seeds >= 20 {
        assert!(total.faults > 0, "{total:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Edges.

fn one_row_cmd(k: i64) -> Cmd {
    Cmd::Append(vec![(row(k, 0), 1)])
}

#[test]
fn abort_answers_every_responder() {
    // Goal: dropping the task's handle mid-write answers the write's responders and the queued
    // ones with `Aborted`, never a dropped sender. Method: a store that is down, so the first
    // write hangs in its retries; more commands queue behind it; then drop the handle.
    let w = World::new(1);
    let log = WriteTaskLog::new();
    let client = w.client(11);
    let (tx, task, _shutdown, _) = w.spawn_task(
        "task",
        &client,
        false,
        DifferentialIntrospectionConfig::default(),
        w.task_cfg(&log),
    );
    w.fault.totally_unavailable();
    let answers: Rc<RefCell<Vec<Answer>>> = Rc::default();
    send(&tx, &one_row_cmd(1), &answers);
    w.sim.run_for(500).unwrap();
    send(&tx, &one_row_cmd(2), &answers);
    send(&tx, &one_row_cmd(3), &answers);
    w.sim.run_for(500).unwrap();
    assert!(events_of(&log, "task").iter().any(|e| matches!(
        e.kind,
        WriteTaskEventKind::WriteAttempted { responders: 1, .. }
    )));
    drop(task);
    w.sim.run_for(10).unwrap();
    let results = collect_answers(&answers);
    assert_eq!(results.len(), 3);
    for r in results {
        assert!(matches!(r, Err(WriteTaskError::Aborted { .. })), "{r:?}");
    }
}

#[test]
fn shutdown_answers_queued_commands() {
    // Goal: on shutdown every queued command is answered with an error, and the write in flight
    // is answered too (here its retries run out while the store is down).
    let w = World::new(2);
    let log = WriteTaskLog::new();
    let client = w.client(21);
    let mut cfg = w.task_cfg(&log);
    cfg.retry.max_tries = 3;
    cfg.attempt_timeout_ms = 300;
    let (tx, _task, shutdown, _) = w.spawn_task(
        "task",
        &client,
        false,
        DifferentialIntrospectionConfig::default(),
        cfg,
    );
    w.fault.totally_unavailable();
    let answers: Rc<RefCell<Vec<Answer>>> = Rc::default();
    send(&tx, &one_row_cmd(1), &answers);
    w.sim.run_for(50).unwrap();
    send(&tx, &one_row_cmd(2), &answers);
    shutdown.send(()).unwrap();
    w.sim.run_for(5_000).unwrap();
    let results = collect_answers(&answers);
    assert!(
        matches!(
            results[0],
            Err(WriteTaskError::InvalidUppers { attempts: 3, .. })
        ),
        "{results:?}"
    );
    assert!(
        matches!(results[1], Err(WriteTaskError::ShuttingDown { .. })),
        "{results:?}"
    );
    let events = events_of(&log, "task");
    assert!(events
        .iter()
        .any(|e| matches!(e.kind, WriteTaskEventKind::ShutDown { answered: 1 })));
    check_event_order(&events, true).unwrap();
    // A command sent after the end is refused by the channel, not lost.
    let (resp_tx, _resp_rx) = oneshot::channel();
    assert!(tx.unbounded_send((one_row_cmd(3).op(), resp_tx)).is_err());
}

#[test]
fn spent_retries_leave_the_delta_for_the_tick() {
    // Goal: a write whose retries are spent answers `InvalidUppers`, keeps the change in desired,
    // and the upper tick writes it once the store is back (the improvement on the original,
    // where it would wait for the next command).
    let w = World::new(3);
    let log = WriteTaskLog::new();
    let checker = w.checker(31);
    let reader = Rc::new(RefCell::new(Some(w.open_reader(&checker))));
    let client = w.client(32);
    let mut cfg = w.task_cfg(&log);
    cfg.retry.max_tries = 2;
    cfg.attempt_timeout_ms = 200;
    let (tx, _task, _shutdown, _) = w.spawn_task(
        "task",
        &client,
        false,
        DifferentialIntrospectionConfig::default(),
        cfg,
    );
    w.sim.run_for(1_500).unwrap();
    w.fault.totally_unavailable();
    let answers: Rc<RefCell<Vec<Answer>>> = Rc::default();
    send(&tx, &one_row_cmd(7), &answers);
    w.sim.run_for(1_000).unwrap();
    assert!(matches!(
        collect_answers(&answers)[0],
        Err(WriteTaskError::InvalidUppers { attempts: 2, .. })
    ));
    w.fault.totally_available();
    w.sim.run_for(2 * TICK_MS).unwrap();
    let (_, have) = w.contents(&checker, &reader);
    assert_eq!(have, vec![(row(7, 0), 1)]);
    let events = events_of(&log, "task");
    assert!(events.iter().any(|e| matches!(
        e.kind,
        WriteTaskEventKind::Committed {
            cause: WriteCause::TickPending,
            updates: 1,
            ..
        }
    )));
    check_event_order(&events, false).unwrap();
}

#[test]
fn a_finished_shard_ends_the_task() {
    // Goal: when another writer finishes the shard (upper = []), the task's next write sees the
    // empty upper, ends, and answers queued commands with `ShardFinished`.
    let w = World::new(4);
    let log = WriteTaskLog::new();
    let client = w.client(41);
    let (tx, _task, _shutdown, _) = w.spawn_task(
        "task",
        &client,
        false,
        DifferentialIntrospectionConfig::default(),
        w.task_cfg(&log),
    );
    w.sim.run_for(1_500).unwrap();
    let mut other = w.open_writer(&w.client(42));
    w.sim
        .block_on(async move {
            let upper = other.fetch_recent_upper().await.unwrap().clone();
            let none: Vec<((Row, ()), u64, i64)> = Vec::new();
            other
                .compare_and_append(&none, upper, Antichain::new())
                .await
                .unwrap()
                .unwrap();
        })
        .unwrap();
    let answers: Rc<RefCell<Vec<Answer>>> = Rc::default();
    send(&tx, &one_row_cmd(1), &answers);
    w.sim.run_for(3 * TICK_MS).unwrap();
    assert!(matches!(
        collect_answers(&answers)[0],
        Err(WriteTaskError::ShardFinished { .. })
    ));
    let events = events_of(&log, "task");
    assert!(matches!(
        &events.last().unwrap().kind,
        WriteTaskEventKind::Ended { reason } if reason.contains("finished")
    ));
    check_event_order(&events, true).unwrap();
}

#[test]
fn prepare_seeds_desired_from_the_shard() {
    // Goal: `InitialDesired::FromShard` keeps what the shard holds (minus rows the filter
    // rejects, which the first write retracts), instead of wiping it.
    let w = World::new(5);
    let log = WriteTaskLog::new();
    let checker = w.checker(51);
    let reader = Rc::new(RefCell::new(Some(w.open_reader(&checker))));
    let mut seed_writer = w.open_writer(&w.client(52));
    w.sim
        .block_on(async move {
            let updates: Vec<((Row, ()), u64, i64)> =
                (0..6).map(|k| ((row(k, 0), ()), 0, 1)).collect();
            seed_writer
                .compare_and_append(&updates, Antichain::from_elem(0), Antichain::from_elem(5))
                .await
                .unwrap()
                .unwrap();
        })
        .unwrap();
    let introspection = DifferentialIntrospectionConfig {
        initial_desired: InitialDesired::FromShard {
            retain: Box::new(|r| key_of(r) % 2 == 0),
        },
    };
    let (_tx, _task, _shutdown, _) = w.spawn_task(
        "task",
        &w.client(53),
        false,
        introspection,
        w.task_cfg(&log),
    );
    w.sim.run_for(2 * TICK_MS).unwrap();
    let (_, have) = w.contents(&checker, &reader);
    assert_eq!(have, vec![(row(0, 0), 1), (row(2, 0), 1), (row(4, 0), 1)]);
    let events = events_of(&log, "task");
    assert!(events.iter().any(|e| matches!(
        e.kind,
        WriteTaskEventKind::Prepared {
            upper: Some(5),
            shard_rows: 6,
            desired_rows: 3,
            to_write_rows: 3
        }
    )));
}

#[test]
fn a_resync_reads_at_the_since_once_it_has_passed_upper_minus_one() {
    // Goal: the re-sync reads "the contents at the upper" through persist's one reader
    // (`ReadHandle::contents_at_upper`), clamped to the since. A reader holds the shard's since
    // at U + 20 while another writer has moved the upper to U + 10: the task's write mismatches,
    // and its re-sync cannot read at upper - 1 = U + 9 (below the since; read as written, that
    // was a since violation that ended the task). It reads at the since once the upper passes
    // it, and its next write makes the shard equal `desired`, the foreign row retracted.
    let w = World::new(6);
    let log = WriteTaskLog::new();
    let checker = w.checker(61);
    let mut holder = w.open_reader(&checker);
    let (tx, _task, _shutdown, _) = w.spawn_task(
        "task",
        &w.client(62),
        false,
        DifferentialIntrospectionConfig::default(),
        w.task_cfg(&log),
    );
    w.sim.run_for(1_500).unwrap();
    let other = Rc::new(RefCell::new(Some(w.open_writer(&w.client(63)))));
    let o = Rc::clone(&other);
    let u = w
        .sim
        .block_on(async move {
            let mut other = o.borrow_mut().take().unwrap();
            let u = *other
                .fetch_recent_upper()
                .await
                .unwrap()
                .as_option()
                .unwrap();
            let foreign = vec![((row(99, 0), ()), u, 1)];
            let to = Antichain::from_elem(u + 10);
            other
                .compare_and_append(&foreign, Antichain::from_elem(u), to)
                .await
                .unwrap()
                .unwrap();
            holder
                .downgrade_since(&Antichain::from_elem(u + 20))
                .await
                .unwrap();
            *o.borrow_mut() = Some(other);
            (u, holder)
        })
        .unwrap();
    let (u, holder) = u;
    let answers: Rc<RefCell<Vec<Answer>>> = Rc::default();
    send(&tx, &one_row_cmd(7), &answers);
    // While the re-sync waits for the upper to pass the since, the other writer moves it.
    let o = Rc::clone(&other);
    w.rt.spawn("other", {
        let rt = w.rt.clone();
        async move {
            rt.sleep(300).await;
            let mut other = o.borrow_mut().take().unwrap();
            let none: Vec<((Row, ()), u64, i64)> = Vec::new();
            let (from, to) = (Antichain::from_elem(u + 10), Antichain::from_elem(u + 30));
            other
                .compare_and_append(&none, from, to)
                .await
                .unwrap()
                .unwrap();
        }
    })
    .detach();
    w.sim.run_for(3 * TICK_MS).unwrap();
    assert!(matches!(collect_answers(&answers)[0], Ok(())));
    let events = events_of(&log, "task");
    check_event_order(&events, false).unwrap();
    assert!(
        events.iter().any(|e| matches!(
            e.kind,
            WriteTaskEventKind::Resynced { upper: Some(up), as_of: Some(a), .. }
                if up == u + 10 && a == u + 20
        )),
        "a re-sync read at the since, past upper - 1: {events:#?}"
    );
    let reader = Rc::new(RefCell::new(Some(holder)));
    let (_, have) = w.contents(&checker, &reader);
    assert_eq!(have, vec![(row(7, 0), 1)], "the foreign row is retracted");
}

#[test]
fn bad_configuration_is_an_error() {
    let w = World::new(6);
    let client = w.client(61);
    let write = w.open_writer(&client);
    let read_handle_fn = || -> ReadHandleFuture { unreachable!("never called") };
    let mut cfg = w.task_cfg(&WriteTaskLog::new());
    cfg.upper_tick_interval_ms = 0;
    let err = DifferentialWriteTask::spawn(
        "task",
        write,
        read_handle_fn,
        false,
        now_fn(&w.rt),
        DifferentialIntrospectionConfig::default(),
        cfg,
    )
    .err()
    .unwrap();
    assert!(matches!(err, WriteTaskError::InvalidConfig(_)), "{err}");
    assert!(err.to_string().contains("upper_tick_interval_ms"));
}

#[test]
fn an_overflowing_command_is_refused_and_changes_nothing() {
    let w = World::new(7);
    let log = WriteTaskLog::new();
    let (tx, _task, _shutdown, _) = w.spawn_task(
        "task",
        &w.client(71),
        false,
        DifferentialIntrospectionConfig::default(),
        w.task_cfg(&log),
    );
    let answers: Rc<RefCell<Vec<Answer>>> = Rc::default();
    send(&tx, &Cmd::Append(vec![(row(1, 0), Diff::MAX)]), &answers);
    send(&tx, &Cmd::Append(vec![(row(1, 0), 1)]), &answers);
    w.sim.run_for(TICK_MS).unwrap();
    let results = collect_answers(&answers);
    assert_eq!(results[0], Ok(()));
    assert!(
        matches!(&results[1], Err(WriteTaskError::InvalidCommand { message, .. }) if message.contains("64-bit"))
    );
}

#[test]
fn one_seed_replays_to_the_same_events() {
    let events = |seed| {
        let w = World::new(seed);
        let log = WriteTaskLog::new();
        let (tx, _task, _shutdown, _) = w.spawn_task(
            "task",
            &w.client(seed),
            false,
            DifferentialIntrospectionConfig::default(),
            w.task_cfg(&log),
        );
        w.fault.partially_available(0.9, 0.05);
        let answers: Rc<RefCell<Vec<Answer>>> = Rc::default();
        for k in 0..5 {
            send(&tx, &one_row_cmd(k), &answers);
            w.sim.run_for(700).unwrap();
        }
        log.events()
    };
    let a = events(9);
    assert!(a.len() > 10);
    assert_eq!(a, events(9));
}

// ---------------------------------------------------------------------------------------------
// A broken shard or store: a typed error at once, and nothing written after.

/// One task over an in-memory store behind a [`closable::Closable`] switch; the damage is placed
/// by hand (no latency, no maintenance).
struct Broken {
    sim: Simulator,
    consensus: MemConsensus,
    switch: closable::Closable,
    client: PersistClient,
    shard: ShardId,
}

/// What a test can break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Breakage {
    /// Another program wrote a version that does not decode on top of the shard's head.
    GarbageHead,
    /// The store's connection closed for good.
    StoreClosed,
}

impl Broken {
    fn new(seed: u64) -> Broken {
        let sim = Simulator::new(seed);
        let (blob, consensus) = (MemBlob::new(), MemConsensus::new());
        let switch = closable::Closable::default();
        let location = switch.wrap(Location {
            blob: Rc::new(blob),
            consensus: Rc::new(consensus.clone()),
        });
        let cfg = PersistConfig {
            compaction_enabled: false,
            gc_enabled: false,
            rollup_threshold: 0,
            ..PersistConfig::default()
        };
        let client = PersistClient::new(location, sim.runtime(), cfg, seed);
        Broken {
            sim,
            consensus,
            switch,
            client,
            shard: ShardId::new(SHARD).unwrap(),
        }
    }

    fn head(&self) -> persist_playground::location::VersionedData {
        use futures::FutureExt;
        use persist_playground::location::Consensus;
        self.consensus
            .head(SHARD)
            .now_or_never()
            .unwrap()
            .unwrap()
            .unwrap()
    }

    fn break_it(&self, how: Breakage) {
        use futures::FutureExt;
        use persist_playground::location::{CaSResult, Consensus, SeqNo, VersionedData};
        match how {
            Breakage::GarbageHead => {
                let head = self.head().seqno;
                let garbage = VersionedData {
                    seqno: SeqNo(head.0 + 1),
                    data: bytes::Bytes::from_static(b"\xffnot a state version"),
                };
                let r = self
                    .consensus
                    .compare_and_set(SHARD, Some(head), garbage)
                    .now_or_never()
                    .unwrap()
                    .unwrap();
                assert_eq!(r, CaSResult::Committed);
            }
            Breakage::StoreClosed => self.switch.close(),
        }
    }

    #[allow(clippy::type_complexity)]
    fn spawn(
        &self,
        introspection: DifferentialIntrospectionConfig,
        log: &WriteTaskLog,
    ) -> (
        CommandSender,
        persist_playground::runtime::JoinHandle<()>,
        oneshot::Sender<()>,
    ) {
        let (c, s) = (self.client.clone(), self.shard.clone());
        let write = self
            .sim
            .block_on(async move { c.open_writer::<Row, ()>(&s).await })
            .unwrap()
            .unwrap();
        let (c, s) = (self.client.clone(), self.shard.clone());
        let read_handle_fn = move || -> ReadHandleFuture {
            let (c, s) = (c.clone(), s.clone());
            Box::pin(async move { c.open_leased_reader::<Row, ()>(&s).await })
        };
        let cfg = WriteTaskConfig {
            upper_tick_interval_ms: TICK_MS,
            batch_duration_ms: 10,
            log: log.clone(),
            ..WriteTaskConfig::new(self.sim.runtime())
        };
        DifferentialWriteTask::spawn(
            "task",
            write,
            read_handle_fn,
            false,
            now_fn(&self.sim.runtime()),
            introspection,
            cfg,
        )
        .unwrap()
    }
}

/// The answer is the typed error naming what is broken, and the task's last event says so.
fn assert_broken(how: Breakage, answer: &Result<(), WriteTaskError>, log: &WriteTaskLog) {
    use persist_playground::location::PermanentKind;
    let Err(WriteTaskError::ShardBroken { id, error }) = answer else {
        panic!("{how:?}: expected ShardBroken, got {answer:?}");
    };
    assert_eq!(id, "task");
    match how {
        Breakage::GarbageHead => {
            assert_eq!(error.shard, SHARD, "{error}");
            assert_eq!(error.kind, PermanentKind::Undecodable, "{error}");
        }
        Breakage::StoreClosed => assert_eq!(error.kind, PermanentKind::Closed, "{error}"),
    }
    let events = events_of(log, "task");
    check_event_order(&events, true).unwrap();
    assert!(
        matches!(&events.last().unwrap().kind, WriteTaskEventKind::Ended { reason } if reason.contains("broken for good")),
        "{:?}",
        events.last()
    );
}

#[test]
fn a_broken_shard_or_store_ends_the_task_with_a_typed_error_and_nothing_more_is_written() {
    // Goal: a permanent failure under a running task (a head that does not decode, a store
    // closed for good) answers the command in flight and every queued one with ShardBroken,
    // naming what is broken, in bounded virtual time; the task ends, and nothing is written to
    // the shard after, however long the clock runs (its tick would otherwise write every
    // second). Method: a warm task commits a command; the damage is placed by hand; the next
    // commands meet it.
    for how in [Breakage::GarbageHead, Breakage::StoreClosed] {
        let b = Broken::new(81);
        let log = WriteTaskLog::new();
        let (tx, task, _shutdown) = b.spawn(DifferentialIntrospectionConfig::default(), &log);
        let answers: Rc<RefCell<Vec<Answer>>> = Rc::default();
        send(&tx, &one_row_cmd(1), &answers);
        b.sim.run_for(100).unwrap();
        assert_eq!(collect_answers(&answers), vec![Ok(())], "{how:?}: warm");
        b.break_it(how);
        let head = b.head();
        let calls = b.switch.calls();
        let started_ms = b.sim.runtime().now_ms();
        answers.borrow_mut().clear();
        send(&tx, &one_row_cmd(2), &answers);
        send(&tx, &one_row_cmd(3), &answers);
        // Well inside one attempt timeout (30 s) or one tick: no retry loop ran.
        b.sim.run_for(500).unwrap();
        let results = collect_answers(&answers);
        assert_eq!(results.len(), 2);
        for answer in &results {
            assert_broken(how, answer, &log);
        }
        let ended_ms = events_of(&log, "task").last().unwrap().at_ms;
        assert!(
            ended_ms - started_ms <= 100,
            "{how:?}: ended after {} ms",
            ended_ms - started_ms
        );
        // A command sent after the end is answered too (the channel is closed: the send fails).
        let (resp_tx, _resp_rx) = oneshot::channel();
        assert!(tx.unbounded_send((one_row_cmd(4).op(), resp_tx)).is_err());
        b.sim.run_for(20 * TICK_MS).unwrap();
        assert_eq!(b.head(), head, "{how:?}: nothing was written after");
        if how == Breakage::StoreClosed {
            assert_eq!(b.switch.calls(), calls, "nothing reached the closed store");
        }
        drop(task);
    }
}

#[test]
fn a_broken_shard_found_by_prepare_or_by_the_tick_ends_the_task() {
    // The same without a command: `prepare` (seeding desired from the shard) meets the damage
    // first, or, with nothing to do, the upper tick does. Either way the task ends with the
    // typed error, at once, and writes nothing.
    for (how, from_shard) in [
        (Breakage::GarbageHead, true),
        (Breakage::StoreClosed, true),
        (Breakage::GarbageHead, false),
        (Breakage::StoreClosed, false),
    ] {
        let b = Broken::new(82);
        let log = WriteTaskLog::new();
        // The shard exists and the writer is open before the damage.
        let (c, s) = (b.client.clone(), b.shard.clone());
        b.sim
            .block_on(async move { c.open_writer::<Row, ()>(&s).await.map(|w| w.abandon()) })
            .unwrap()
            .unwrap();
        let introspection = if from_shard {
            DifferentialIntrospectionConfig {
                initial_desired: InitialDesired::FromShard {
                    retain: Box::new(|_| true),
                },
            }
        } else {
            DifferentialIntrospectionConfig::default()
        };
        let (tx, task, _shutdown) = b.spawn(introspection, &log);
        b.break_it(how);
        let head = b.head();
        let answers: Rc<RefCell<Vec<Answer>>> = Rc::default();
        if from_shard {
            // Queued behind prepare; answered when it fails.
            send(&tx, &one_row_cmd(1), &answers);
        }
        b.sim.run_for(TICK_MS + 500).unwrap();
        let events = events_of(&log, "task");
        let ended = events
            .iter()
            .any(|e| matches!(&e.kind, WriteTaskEventKind::Ended { reason } if reason.contains(if from_shard { "prepare" } else { "write" }) && reason.contains("broken for good")));
        assert!(ended, "{how:?} from_shard={from_shard}: {events:#?}");
        for answer in collect_answers(&answers) {
            assert_broken(how, &answer, &log);
        }
        b.sim.run_for(10 * TICK_MS).unwrap();
        assert_eq!(b.head(), head, "{how:?}: nothing was written after");
        drop((tx, task));
    }
}
