//! Two upsert replicas racing to write one shard over IndexedDB in headless Chrome, with the
//! browser runtime's real timers (`wasm-pack test --headless --chrome`).
//!
//! Each replica has its own IndexedDB connection and persist client (two processes sharing one
//! database), its own timely worker (stepped from the event loop by its driver task, never
//! blocking it), sink and persist source. The source produces 1,000 upserts per timestamp. A
//! checker follows the shard and compares it with the reference model at every upper.
//!
//! Checked: the shard matches the model at every upper it reaches and catches up with the
//! source; both replicas wrote; their state cells decode; no health errors. Measured (printed,
//! never asserted): the longest single replica step, with `performance.now()`.
#![cfg(target_arch = "wasm32")]

use persist_playground::location::idb::IdbLocation;
use persist_playground::persist::{PersistConfig, ShardId};
use persist_playground::runtime::browser::BrowserRuntime;
use persist_playground::upsert::pipeline::UpsertPipeline;
use persist_playground::upsert::replica::ReplicaConfig;
use persist_playground::upsert::source::{GeneratorConfig, SourceGenerator};
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// `performance.now()`, for measuring only.
fn performance_now() -> f64 {
    let global = js_sys::global();
    let perf = js_sys::Reflect::get(&global, &"performance".into()).unwrap();
    let now = js_sys::Reflect::get(&perf, &"now".into()).unwrap();
    now.unchecked_into::<js_sys::Function>()
        .call0(&perf)
        .unwrap()
        .as_f64()
        .unwrap_or(0.0)
}

#[wasm_bindgen_test]
async fn two_upsert_replicas_race_over_indexeddb() {
    // Keys hash the same here as natively (the native unit test pins the same value).
    let key = persist_playground::upsert::types::UpsertKey::from_key(
        &persist_playground::persist::codec::Row::new([
            persist_playground::persist::codec::Datum::Int(42),
        ]),
    );
    assert_eq!(key.short(), "fa03d4a33fb9");
    let name = "test-upsert-race";
    IdbLocation::delete_database(name).await.unwrap();
    let rt = BrowserRuntime::runtime();
    let shared = IdbLocation::open(name).await.unwrap();
    let persist_cfg = PersistConfig {
        backoff_min_ms: 1,
        backoff_max_ms: 16,
        reader_lease_duration_ms: 3_600_000,
        writer_lease_duration_ms: 3_600_000,
        ..PersistConfig::default()
    };
    let configs: Vec<ReplicaConfig> = (0..2)
        .map(|i| {
            let mut c = ReplicaConfig::new(&format!("r{i}"), 7 + i);
            // Different speeds: 100 or 40 messages per step (and feedback in slices of 250, set
            // below), so that no single step does much.
            c.read_batch = if i == 0 { 100 } else { 40 };
            c.tick_ms = 2 + 3 * i;
            c.caa_timeout_ms = 60_000;
            c
        })
        .collect();
    let mut pipeline = UpsertPipeline::new(
        shared.location(),
        rt.clone(),
        persist_cfg,
        ShardId::new("upsert").unwrap(),
        configs,
        11,
    );
    let mut dbs = Vec::new();
    for i in 0..2 {
        let db = IdbLocation::open(name).await.unwrap();
        pipeline.set_replica_location(i, db.location());
        dbs.push(db);
    }
    pipeline.start_checker().await;
    for i in 0..2 {
        pipeline.start(i).await.unwrap();
        let r = &pipeline.replica(i).unwrap().replica;
        r.borrow_mut().set_step_clock(Box::new(performance_now));
        r.borrow_mut().set_feed_budget(250);
    }
    let source = pipeline.source();
    let gen_cfg = GeneratorConfig {
        keys: 2_000,
        delete_percent: 10,
        error_percent: 1,
        burst_max: 1_000,
        ts_step_max: 1,
    };
    let mut gen = SourceGenerator::new(5, gen_cfg, 1).with_burst_min(1_000);
    let timestamps = 12;
    for _ in 0..timestamps {
        gen.burst(&mut source.borrow_mut());
        rt.sleep(40).await;
    }
    let target = source.borrow().upper();
    rt.timeout(110_000, async {
        while pipeline.report().upper < Some(target) {
            rt.sleep(50).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the shard never caught up: {:?}", pipeline.report()));

    let report = pipeline.report();
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert!(report.checks > 1, "{report:?}");
    // Once neither replica is mid-timestamp (their last feedback is in), both are checked.
    rt.timeout(30_000, async {
        while pipeline.check_cells().unwrap() < 2 {
            rt.sleep(20).await;
        }
    })
    .await
    .expect("both replicas finish their last timestamp");
    let c = pipeline.counters();
    assert_eq!(c.health_errors, 0, "{c:?}");
    assert!(c.sink_appends > 0, "{c:?}");
    let mut lines = Vec::new();
    for i in 0..2 {
        let r = pipeline.replica(i).unwrap().replica.borrow();
        let s = r.step_stats();
        assert!(s.steps > 0);
        lines.push(format!(
            "r{i}: {} steps, longest {:.2} ms, mean {:.2} ms, at most {} messages per step",
            s.steps,
            s.max_step_ms,
            s.total_step_ms / s.steps as f64,
            s.max_read
        ));
    }
    web_sys::console::log_1(
        &format!(
            "upsert race over IndexedDB, {timestamps} timestamps x 1,000 upserts: {} checks, {} appends, {} mismatches, {} discarded, {} partial emissions; {}",
            report.checks,
            c.sink_appends,
            c.sink_mismatches,
            c.stash_discarded,
            c.partial_emissions,
            lines.join("; ")
        )
        .into(),
    );
    for i in 0..2 {
        pipeline.crash(i);
    }
    drop(pipeline);
    drop(dbs);
    shared.close();
}

/// The upsert benchmark in the page (measures and prints; asserts nothing about time): the
/// operator alone, the whole pipeline over in-memory persist, and differential's
/// `arrange_from_upsert`, each run twice, the second ("warm") run reported. The issue's full
/// workload (200,000 upserts) runs in release builds
/// (`wasm-pack test --release ... --test browser -- --nocapture browser_upsert::`); a debug build runs a
/// tenth of it, to keep the test suite quick.
#[wasm_bindgen_test]
async fn upsert_benchmark_in_the_browser() {
    use persist_playground::upsert::bench::{
        run_differential, run_operator, run_pipeline, Workload,
    };
    let mut w = Workload::issue();
    if cfg!(debug_assertions) {
        w.updates /= 10;
        w.keys /= 10;
    }
    let mut lines = Vec::new();
    let mut rates = Vec::new();
    type Runner = fn(&Workload, &dyn Fn() -> f64) -> persist_playground::upsert::bench::BenchResult;
    for run in [run_differential as Runner, run_operator, run_pipeline] {
        let cold = run(&w, &performance_now);
        let warm = run(&w, &performance_now);
        assert_eq!(
            cold.output_updates, warm.output_updates,
            "a run is deterministic"
        );
        assert!(warm.output_updates > 0);
        rates.push(warm.per_second);
        lines.push(format!(
            "{}: cold {:.0}/s, warm {:.0}/s",
            warm.name, cold.per_second, warm.per_second
        ));
    }
    web_sys::console::log_1(
        &format!(
            "upsert bench in the page ({} upserts over {} keys, {} per timestamp, {} build): {}; warm ratios operator/differential {:.2}x, pipeline/differential {:.2}x",
            w.updates,
            w.keys,
            w.per_ts,
            if cfg!(debug_assertions) { "debug" } else { "release" },
            lines.join("; "),
            rates[1] / rates[0],
            rates[2] / rates[0]
        )
        .into(),
    );
}
