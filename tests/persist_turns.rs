//! `PersistConfig::command_turns`: a process's commands on one shard take their
//! compare_and_sets in turns instead of racing each other (`src/persist/turns.rs`).
//!
//! One writer appends back to back, with its background maintenance (rollups, merges, GC) on,
//! in the simulator over in-memory locations with seeded latency, so the background commands
//! overlap the appends. Over the same seeds:
//! - with turns off (the original's way) the process's own commands race: some compare_and_sets
//!   come back mismatched (this is the case the turns remove, so it must occur);
//! - with turns on, not one of this process's compare_and_sets mismatches (nobody else writes the
//!   shard), fewer compare_and_sets and scans are spent per append, and the shard holds every
//!   acknowledged write exactly once.
#![cfg(not(target_arch = "wasm32"))]

use std::rc::Rc;

use persist_playground::location::mem::{Latency, MemBlob, MemConsensus};
use persist_playground::location::Location;
use persist_playground::persist::events::{CasOutcome, PersistEvent};
use persist_playground::persist::stats::CountingLocation;
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::sim::Simulator;
use timely::progress::Antichain;

const APPENDS: u64 = 300;

struct Run {
    mismatches: usize,
    cas: u64,
    scans: u64,
    contents: Vec<((String, ()), u64, i64)>,
}

fn run(seed: u64, turns: bool) -> Run {
    let sim = Simulator::new(seed);
    let rt = sim.runtime();
    let location = Location {
        blob: Rc::new(MemBlob::new().with_latency(Latency::new(rt.clone(), seed ^ 0xb1, 0, 3))),
        consensus: Rc::new(MemConsensus::new().with_latency(Latency::new(
            rt.clone(),
            seed ^ 0xc0,
            1,
            3,
        ))),
    };
    let (location, counter) = CountingLocation::wrap(location);
    let cfg = PersistConfig {
        command_turns: turns,
        // Frequent maintenance, so background commands overlap appends often.
        rollup_threshold: 8,
        compaction_min_inputs: 2,
        ..PersistConfig::default()
    };
    let client = PersistClient::new(location, rt.clone(), cfg, seed);
    let c = client.clone();
    let contents = sim
        .block_on(async move {
            let shard = ShardId::new("s-turns").unwrap();
            let mut w = c.open_writer::<String, ()>(&shard).await.unwrap();
            let f = Antichain::from_elem;
            for t in 0..APPENDS {
                let u = [((format!("k{t}"), ()), t, 1i64)];
                w.compare_and_append(&u, f(t), f(t + 1))
                    .await
                    .expect("no invalid usage")
                    .expect("nobody else writes the shard");
            }
            let mut r = c.open_leased_reader::<String, ()>(&shard).await.unwrap();
            let mut snap = r
                .snapshot_and_fetch(f(APPENDS - 1))
                .await
                .expect("readable");
            snap.sort();
            w.expire().await;
            r.expire().await;
            snap
        })
        .expect("the run does not deadlock");
    let counts = counter.counts();
    let mismatches = client
        .events()
        .events()
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
        .count();
    Run {
        mismatches,
        cas: counts.consensus_cas,
        scans: counts.consensus_scans,
        contents,
    }
}

fn expected() -> Vec<((String, ()), u64, i64)> {
    let mut want: Vec<_> = (0..APPENDS)
        .map(|t| ((format!("k{t}"), ()), APPENDS - 1, 1i64))
        .collect();
    want.sort();
    want
}

#[test]
fn a_processs_commands_take_turns_instead_of_racing() {
    let seeds = 0..8u64;
    let (mut raced, mut turned) = (Vec::new(), Vec::new());
    for seed in seeds {
        let off = run(seed, false);
        let on = run(seed, true);
        assert_eq!(off.contents, expected(), "seed {seed}, turns off");
        assert_eq!(on.contents, expected(), "seed {seed}, turns on");
        assert_eq!(
            on.mismatches, 0,
            "seed {seed}: with turns, this process's commands never race each other"
        );
        raced.push(off);
        turned.push(on);
    }
    let sum = |v: &[Run], f: fn(&Run) -> u64| v.iter().map(f).sum::<u64>();
    assert!(
        raced.iter().any(|r| r.mismatches > 0),
        "without turns the writer's own maintenance raced it at least once (else this proves nothing)"
    );
    assert!(
        sum(&turned, |r| r.cas) < sum(&raced, |r| r.cas),
        "turns spend fewer compare_and_sets: {} vs {}",
        sum(&turned, |r| r.cas),
        sum(&raced, |r| r.cas)
    );
    assert!(
        sum(&turned, |r| r.scans) < sum(&raced, |r| r.scans),
        "turns spend fewer scans: {} vs {}",
        sum(&turned, |r| r.scans),
        sum(&raced, |r| r.scans)
    );
}
