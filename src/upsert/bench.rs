//! The upsert benchmark's workload and runners, shared by the native example
//! (`examples/upsert_bench.rs`) and the browser measurement (`tests/browser_upsert.rs`). It
//! measures; it asserts nothing about time.
//!
//! Workload: `updates` upserts over `keys` keys, a tenth of them deletes, `per_ts` per time
//! (the issue's: 200,000 over 20,000 keys, 1,000 per time), drawn from a seed. Three runners, each
//! timed with the caller's clock (milliseconds; `Instant` natively, `performance.now()` in a page):
//! - [`run_operator`]: the operator alone in its bare worker, its output fed straight back as
//!   its persist input (the feedback a perfect shard would give);
//! - [`run_pipeline`]: one replica of the whole pipeline over in-memory persist on the
//!   simulator: sink `compare_and_append`, listen, feedback;
//! - [`run_differential`]: differential-dataflow's `arrange_from_upsert` on the same upserts.
//!
//! Differential breaks ties at one time by the greatest value, this operator by the highest
//! FromTime, so their output counts differ slightly (by the keys upserted twice at one time).
//!
//! Measured on 2026-12-01 on the project's 2-core machine while ~5 agents shared it (load 5-15:
//! figures move by 2x between runs; compare ratios within one run), median of 3:
//!
//! | `cargo run --release --example upsert_bench 3` | upserts/s | vs differential | peak heap per 10k keys |
//! | --- | --- | --- | --- |
//! | differential `arrange_from_upsert` | 289k | 1 | 13.2 MB |
//! | upsert operator alone | 329k | 1.14x | 23.8 MB |
//! | whole pipeline, in-memory persist (defaults) | 43k | 0.15x | 48.5 MB |
//! | whole pipeline, compaction/GC/rollups off | 120k | 0.41x | 28.5 MB |
//!
//! That is the crate's release profile (`opt-level = "z"`). With `CARGO_PROFILE_RELEASE_OPT_LEVEL=3`
//! (and the full native suite running beside it): differential 368k/s, operator 0.74x, pipeline
//! 0.34x (0.81x without compaction/GC). Peak heap includes the generated workload (8.9 MB per 10k
//! keys on its own). In the pipeline, most time goes to persist itself: byte comparisons and
//! byte-at-a-time bincode in encoding, consolidating and compacting parts (perf); compaction and
//! GC cost it about 3x. In Chromium (`wasm-pack test --release ... --test browser_upsert --
//! --nocapture`, before the stash kept times in order): differential 181k/s warm, operator 169k/s
//! (0.93x), pipeline 28k/s (0.16x).

use std::cell::RefCell;
use std::rc::Rc;

use differential_dataflow::operators::arrange::upsert::arrange_from_upsert;
use differential_dataflow::trace::implementations::{ValBuilder, ValSpine};
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use timely::communication::allocator::thread::Thread;
use timely::communication::Allocator;
use timely::dataflow::operators::core::Input;
use timely::dataflow::operators::core::Inspect;
use timely::dataflow::operators::Probe;
use timely::progress::Antichain;
use timely::worker::Worker;
use timely::WorkerConfig;

use super::core::CoreObserver;
use super::observe::UpsertLog;
use super::pipeline::UpsertPipeline;
use super::replica::ReplicaConfig;
use super::source::SourceLog;
use super::types::{kv_row, UpsertKey};
use super::worker::{SourceUpdate, UpsertWorker, UpsertWorkerConfig};
use crate::location::mem::{MemBlob, MemConsensus};
use crate::location::Location;
use crate::persist::codec::{Datum, Row, Timestamp};
use crate::persist::events::EventLog;
use crate::persist::{PersistConfig, ShardId};
use crate::runtime::sim::Simulator;

/// The shape of the workload.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Workload {
    /// Upserts in all.
    pub updates: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Upserts per time.
    pub per_ts: u64,
    /// Seeds the draws.
    pub seed: u64,
}

impl Workload {
    /// The issue's workload: 200,000 upserts over 20,000 keys, 1,000 per time.
    pub fn issue() -> Self {
        Workload {
            updates: 200_000,
            keys: 20_000,
            per_ts: 1_000,
            seed: 42,
        }
    }

    /// The upserts: `(key, value or None, time)`, offsets in order; a tenth are deletes.
    pub fn upserts(&self) -> Vec<(i64, Option<Row>, Timestamp)> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(self.seed);
        (0..self.updates)
            .map(|i| {
                let key = (rng.next_u64() % self.keys.max(1)) as i64;
                let value = (rng.next_u64() % 10 != 0).then(|| kv_row(key, &format!("v{i}")));
                (key, value, i / self.per_ts.max(1))
            })
            .collect()
    }
}

/// What one runner measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchResult {
    /// Which runner.
    pub name: String,
    /// Upserts processed.
    pub updates: u64,
    /// Wall time, ms.
    pub elapsed_ms: f64,
    /// Upserts per second.
    pub per_second: f64,
    /// Output updates produced (a sanity check: every runner must agree on the result).
    pub output_updates: u64,
}

fn result(name: &str, updates: u64, elapsed_ms: f64, output_updates: u64) -> BenchResult {
    BenchResult {
        name: name.to_string(),
        updates,
        elapsed_ms,
        per_second: updates as f64 / (elapsed_ms.max(1e-6) / 1000.0),
        output_updates,
    }
}

/// The operator alone; see the module docs.
pub fn run_operator(w: &Workload, now: &dyn Fn() -> f64) -> BenchResult {
    let upserts = w.upserts();
    let by_ts: Vec<Vec<SourceUpdate>> = upserts
        .chunks(w.per_ts.max(1) as usize)
        .enumerate()
        .map(|(offset_base, chunk)| {
            chunk
                .iter()
                .enumerate()
                .map(|(i, (k, v, t))| {
                    let key = UpsertKey::from_key(&Row::new([Datum::Int(*k)]));
                    let offset = (offset_base as u64) * w.per_ts + i as u64 + 1;
                    ((key, v.clone().map(Ok), offset), *t, 1)
                })
                .collect()
        })
        .collect();
    let mut observer = CoreObserver::new("bench");
    observer.log = UpsertLog::disabled();
    let mut worker = UpsertWorker::new(
        UpsertWorkerConfig::new("bench", Antichain::from_elem(0)),
        observer,
    );
    let mut outputs = 0u64;
    let start = now();
    for (ts, batch) in by_ts.into_iter().enumerate() {
        let ts = ts as u64;
        let _ = worker.send_source(batch);
        worker.advance_source(ts + 1);
        worker.step(64);
        let out = worker.take_output();
        outputs += out.len() as u64;
        let _ = worker.send_persist(out);
        worker.advance_persist(ts + 1);
        worker.step(64);
    }
    result("upsert operator alone", w.updates, now() - start, outputs)
}

/// The whole pipeline, one replica, with persist's default configuration; see the module docs.
pub fn run_pipeline(w: &Workload, now: &dyn Fn() -> f64) -> BenchResult {
    run_pipeline_with(w, PersistConfig::default(), now)
}

/// [`run_pipeline`] with compaction, rollups and GC off: the write and feedback path alone.
pub fn run_pipeline_write_path(w: &Workload, now: &dyn Fn() -> f64) -> BenchResult {
    let cfg = PersistConfig {
        compaction_enabled: false,
        gc_enabled: false,
        rollup_threshold: 0,
        ..PersistConfig::default()
    };
    let mut r = run_pipeline_with(w, cfg, now);
    r.name = "whole pipeline, no compaction/GC".into();
    r
}

/// [`run_pipeline`] over persist configured as `persist`.
pub fn run_pipeline_with(
    w: &Workload,
    persist: PersistConfig,
    now: &dyn Fn() -> f64,
) -> BenchResult {
    let mut log = SourceLog::new();
    for (k, v, t) in w.upserts() {
        let _ = log.push(k, v.map(Ok), t);
    }
    let last_ts = w.updates.saturating_sub(1) / w.per_ts.max(1);
    log.seal(last_ts + 1);
    let sim = Simulator::new(w.seed);
    sim.set_record_trace(false);
    let location = Location {
        blob: Rc::new(MemBlob::new()),
        consensus: Rc::new(MemConsensus::new()),
    };
    let mut cfg = ReplicaConfig::new("bench", w.seed);
    cfg.read_batch = w.per_ts as usize;
    cfg.tick_ms = 1;
    cfg.caa_timeout_ms = u64::MAX / 4;
    let mut pipeline = UpsertPipeline::new(
        location,
        sim.runtime(),
        persist,
        ShardId("upsert-bench".into()),
        vec![cfg],
        w.seed,
    )
    .with_log(UpsertLog::disabled())
    .with_persist_events(EventLog::disabled());
    *pipeline.source().borrow_mut() = log;
    let target = last_ts + 1;
    let start = now();
    let rt = sim.runtime();
    let done = sim.block_on(async move {
        pipeline.start(0).await.expect("start");
        loop {
            let upper = pipeline
                .replica(0)
                .and_then(|r| r.replica.borrow().sink_upper());
            if upper >= Some(target) {
                break;
            }
            rt.sleep(1).await;
        }
        let emitted = pipeline.counters().emitted;
        pipeline.crash(0);
        emitted
    });
    let elapsed = now() - start;
    result(
        "whole pipeline (in-memory persist)",
        w.updates,
        elapsed,
        done.unwrap_or(0),
    )
}

/// differential-dataflow's `arrange_from_upsert`; see the module docs.
pub fn run_differential(w: &Workload, now: &dyn Fn() -> f64) -> BenchResult {
    type Key = i64;
    type Val = Row;
    let upserts = w.upserts();
    let alloc = Allocator::Thread(Thread::default());
    let mut worker = Worker::new(WorkerConfig::default(), alloc, None);
    let outputs = Rc::new(RefCell::new(0u64));
    let o = Rc::clone(&outputs);
    let (mut input, probe) = worker.dataflow::<Timestamp, _, _>(move |scope| {
        let (input, stream) = scope.new_input::<Vec<(Key, Option<Val>, Timestamp)>>();
        let arranged = arrange_from_upsert::<
            ValBuilder<Key, Val, Timestamp, isize>,
            ValSpine<Key, Val, Timestamp, isize>,
            Key,
            Val,
        >(stream, "upsert");
        let (probe, _) = arranged
            .as_collection(|k, v| (*k, v.clone()))
            .inner
            .inspect_core(move |c| {
                if let Ok((_, data)) = c {
                    *o.borrow_mut() += data.len() as u64;
                }
            })
            .probe();
        (input, probe)
    });
    let start = now();
    for chunk in upserts.chunks(w.per_ts.max(1) as usize) {
        let ts = chunk[0].2;
        for (k, v, t) in chunk {
            input.send((*k, v.clone(), *t));
        }
        input.advance_to(ts + 1);
        input.flush();
        while probe.less_than(&(ts + 1)) {
            worker.step();
        }
    }
    let elapsed = now() - start;
    let out = *outputs.borrow();
    result("differential arrange_from_upsert", w.updates, elapsed, out)
}
