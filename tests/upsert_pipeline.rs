//! The whole pipeline on the deterministic simulator over in-memory persist: replicas (each
//! its own worker, sink and persist source) write one shard from one source; the checker
//! compares the shard with the reference model at every upper.
#![cfg(not(target_arch = "wasm32"))]

use std::rc::Rc;

use persist_playground::location::mem::{MemBlob, MemConsensus};
use persist_playground::location::Location;
use persist_playground::persist::{PersistConfig, ShardId};
use persist_playground::runtime::sim::Simulator;
use persist_playground::upsert::pipeline::UpsertPipeline;
use persist_playground::upsert::replica::ReplicaConfig;
use persist_playground::upsert::source::{GeneratorConfig, SourceGenerator};

fn run(seed: u64, speeds: &[usize], bursts: u64) -> UpsertPipeline {
    let sim = Simulator::new(seed);
    sim.set_record_trace(false);
    let rt = sim.runtime();
    let location = Location {
        blob: Rc::new(MemBlob::new()),
        consensus: Rc::new(MemConsensus::new()),
    };
    let configs = speeds
        .iter()
        .enumerate()
        .map(|(i, &speed)| {
            let mut c = ReplicaConfig::new(&format!("r{i}"), seed + i as u64);
            c.read_batch = speed;
            c.tick_ms = 2 + 3 * i as u64;
            c
        })
        .collect();
    let mut pipeline = UpsertPipeline::new(
        location,
        rt.clone(),
        PersistConfig::default(),
        ShardId::new("upsert").unwrap(),
        configs,
        seed,
    );
    sim.block_on(async move {
        pipeline.start_checker().await;
        for i in 0..pipeline.replicas() {
            pipeline.start(i).await.unwrap();
        }
        let source = pipeline.source();
        let mut gen = SourceGenerator::new(seed, GeneratorConfig::default(), 1);
        for _ in 0..bursts {
            gen.burst(&mut source.borrow_mut());
            rt.sleep(7).await;
        }
        let target = source.borrow().upper();
        while pipeline.report().upper < Some(target) {
            rt.sleep(10).await;
        }
        pipeline
    })
    .unwrap()
}

#[test]
fn one_replica_matches_the_model_at_every_upper() {
    let p = run(1, &[3], 30);
    let report = p.report();
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert!(report.checks > 10, "{report:?}");
    let c = p.counters();
    assert!(c.sink_appends > 0 && c.emitted > 0, "{c:?}");
    assert!(p.check_cells().unwrap() > 0);
    let snap = p.snapshot();
    let r = snap.replicas[0].as_ref().unwrap();
    assert!(!r.operator.as_ref().unwrap().state.is_empty());
    // The snapshot is plain serde data: its JSON carries what the struct holds.
    let json: serde_json::Value = serde_json::to_value(&snap).unwrap();
    assert_eq!(json["source_messages"], snap.source_messages);
    assert_eq!(json["source_upper"], snap.source_upper);
    assert_eq!(
        json["replicas"].as_array().map(Vec::len),
        Some(snap.replicas.len())
    );
    assert!(
        json["replicas"][0].is_object(),
        "the running replica's snapshot: {json}"
    );
    assert_eq!(json["keys"].as_array().map(Vec::len), Some(snap.keys.len()));
    // Every step is an event, tagged by its type, stamped with its replica and the runtime's
    // clock: `{ who, atMs, event: { type, ... } }`, the data the library hands to JavaScript.
    let events = p.log().events();
    let json: serde_json::Value = serde_json::to_value(&events).unwrap();
    let json = json.as_array().unwrap();
    assert_eq!(json.len(), events.len());
    for (v, e) in json.iter().zip(&events) {
        assert_eq!(v["who"], e.who.as_str());
        assert_eq!(v["atMs"], e.at_ms);
    }
    for kind in [
        "started",
        "persistIngested",
        "sourceStaged",
        "sourceProgress",
        "drained",
        "fedBack",
        "sinkAppended",
    ] {
        assert!(
            json.iter().any(|v| v["event"]["type"] == kind),
            "no {kind} event"
        );
    }
    let staged = json
        .iter()
        .find(|v| v["event"]["type"] == "sourceStaged")
        .unwrap();
    assert!(
        staged["event"]["time"].is_u64(),
        "a time is a number: {staged}"
    );
    assert!(
        staged["event"]["partialDrainAllowed"].is_boolean(),
        "{staged}"
    );
    assert!(events.iter().all(|e| e.who == "r0#0"));
    assert!(
        events.windows(2).all(|w| w[0].at_ms <= w[1].at_ms),
        "time never goes back"
    );
}

#[test]
fn two_replicas_at_different_speeds_agree_with_the_model() {
    let p = run(2, &[1, 5], 30);
    let report = p.report();
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    let c = p.counters();
    assert!(c.sink_mismatches > 0, "the replicas raced: {c:?}");
    assert!(p.check_cells().unwrap() > 0);
}
