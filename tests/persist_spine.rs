//! Compaction keeps up with a writer committing as fast as it can, over the in-memory locations
//! with seeded latency in the simulator: the shared body ([`spine::tight_loop_writer`], also run
//! in Chromium over IndexedDB by `tests/browser_spine.rs`) appends one-update batches in a tight
//! loop, checks the spine bound after every commit and the contents at the end.
//!
//! The bound holds by construction (the write path's spine back-pressure, `trace/mod.rs`), not
//! by luck of the interleaving, so the test runs over many seeds: each varies the simulator's
//! schedule and the Blob and Consensus latencies. `cargo test` runs [`DEFAULT_SEEDS`] seeds
//! (among them the latency seeds an earlier design overshot with) at [`DEFAULT_COMMITS`]
//! commits; `PERSIST_SPINE_SEEDS=N` runs N seeds and `PERSIST_SPINE_COMMITS=M` M commits each
//! (the long mode: `PERSIST_SPINE_SEEDS=200 PERSIST_SPINE_COMMITS=10000 cargo test --release
//! --test native persist_spine::`).
#![cfg(not(target_arch = "wasm32"))]

#[path = "support/spine.rs"]
mod spine;

use std::rc::Rc;

use persist_playground::location::mem::{Latency, MemBlob, MemConsensus};
use persist_playground::location::Location;
use persist_playground::persist::events::EventLog;
use persist_playground::persist::stats;
use persist_playground::persist::{PersistClient, PersistConfig};
use persist_playground::runtime::sim::Simulator;

/// Seeds per `cargo test`.
const DEFAULT_SEEDS: u64 = 32;
/// Commits per seed per `cargo test` (about 0.3 s each in the dev profile): past 8,192
/// updates, where the earlier design overshot.
const DEFAULT_COMMITS: u64 = 10_000;

/// One run's seeds: the simulator's, and the Blob and Consensus latencies'.
#[derive(Debug, Clone, Copy)]
struct Seeds {
    sim: u64,
    blob_latency: u64,
    consensus_latency: u64,
}

/// The seeds with which the spine overshot before the back-pressure: the test's original seed,
/// and latency seeds 4 with 16 and 19 (31 batches against a bound of 30 at 8,205 commits).
const KNOWN: [Seeds; 5] = [
    Seeds {
        sim: 17,
        blob_latency: 1,
        consensus_latency: 2,
    },
    Seeds {
        sim: 17,
        blob_latency: 4,
        consensus_latency: 16,
    },
    Seeds {
        sim: 17,
        blob_latency: 4,
        consensus_latency: 19,
    },
    Seeds {
        sim: 4,
        blob_latency: 16,
        consensus_latency: 16,
    },
    Seeds {
        sim: 4,
        blob_latency: 19,
        consensus_latency: 19,
    },
];

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The known seeds first, then seeds drawn from the index.
fn seeds(n: u64) -> impl Iterator<Item = Seeds> {
    let known = KNOWN.into_iter();
    let drawn = (0u64..).map(|i| Seeds {
        sim: 1000 + i,
        blob_latency: 7 * i + 3,
        consensus_latency: 11 * i + 5,
    });
    known.chain(drawn).take(n as usize)
}

/// One run: what the body saw, how often the writer waited under the spine back-pressure, and
/// the simulated time it took.
fn run(seeds: Seeds, commits: u64) -> (spine::SpineRun, u64, u64) {
    let sim = Simulator::new(seeds.sim);
    sim.set_record_trace(false);
    let rt = sim.runtime();
    let blob_latency = Latency::new(rt.clone(), seeds.blob_latency, 0, 3);
    let consensus_latency = Latency::new(rt.clone(), seeds.consensus_latency, 0, 3);
    let location = Location {
        blob: Rc::new(MemBlob::new().with_latency(blob_latency)),
        consensus: Rc::new(MemConsensus::new().with_latency(consensus_latency)),
    };
    let client = PersistClient::new(location, rt, PersistConfig::default(), seeds.sim)
        .with_events(EventLog::disabled());
    stats::reset_stats();
    let run = sim
        .block_on(spine::tight_loop_writer(client, commits))
        .unwrap();
    (run, stats::stats().spine_backpressure_waits, sim.now_ms())
}

#[test]
fn a_tight_loop_writer_stays_within_the_spine_bound() {
    let n = env_u64("PERSIST_SPINE_SEEDS", DEFAULT_SEEDS);
    let commits = env_u64("PERSIST_SPINE_COMMITS", DEFAULT_COMMITS);
    let mut closest = i64::MIN;
    for s in seeds(n) {
        // Printed first: a run over the bound panics in the body, after this line.
        println!("{s:?}: {commits} commits");
        let (run, waits, ms) = run(s, commits);
        println!(
            "  at most {} batches ({} from the bound), {waits} back-pressure waits, {ms} ms",
            run.max_batches, run.max_excess
        );
        closest = closest.max(run.max_excess);
    }
    println!("{n} seeds: the closest any run came to the bound was {closest}");
}
