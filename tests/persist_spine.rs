//! Compaction keeps up with a writer committing as fast as it can, over the in-memory locations
//! with seeded latency in the simulator: the shared body ([`spine::tight_loop_writer`], also run
//! in Chromium over IndexedDB by `tests/browser_spine.rs`) appends one-update batches in a tight
//! loop, checks the spine bound after every commit and the contents at the end.
//!
//! The bound holds by construction (the write path's spine back-pressure, `trace/mod.rs`), not
//! by luck of the interleaving, so the test runs over many seeds: each varies the simulator's
//! schedule and the Blob and Consensus latencies, and every second drawn seed has a slow Blob
//! (up to 40 ms per half-call against Consensus's 3), where each merge of Blob parts spans many
//! commits. Without the back-pressure, 2 of 64 seeds ended 1 batch over the bound at 10,000
//! commits (14 of 64 at 20,000), and the slow-Blob seeds held 110 to 141 batches against a
//! bound of 30. `cargo test` runs [`DEFAULT_SEEDS`] seeds (first the ones an earlier design
//! overshot with) at [`DEFAULT_COMMITS`] commits; `PERSIST_SPINE_SEEDS=N` runs N seeds and
//! `PERSIST_SPINE_COMMITS=M` M commits each (a long mode: `PERSIST_SPINE_SEEDS=500
//! PERSIST_SPINE_COMMITS=20000 cargo test --release --test native persist_spine::`).
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
const DEFAULT_SEEDS: u64 = 24;
/// Commits per seed per `cargo test` (about 0.3 s each in the dev profile): past 8,192
/// updates, where the earlier design overshot.
const DEFAULT_COMMITS: u64 = 10_000;

/// One run's seeds: the simulator's, and the Blob and Consensus latencies'; and whether Blob is
/// slow (up to [`SLOW_BLOB_MS`] per half-call instead of 3 ms, as Consensus): every merge whose
/// inputs are in Blob then takes many commits' time.
#[derive(Debug, Clone, Copy)]
struct Seeds {
    sim: u64,
    blob_latency: u64,
    consensus_latency: u64,
    slow_blob: bool,
}

/// A slow Blob's latency per half-call, at most.
const SLOW_BLOB_MS: u64 = 40;

/// Seeds that came close to, or over, the bound before the back-pressure: the test's original
/// seed; the latency seeds 4 with 16 and 19, with which an earlier session found 31 batches
/// against a bound of 30 at 8,205 commits (read both ways: its set-up is not recorded); and
/// the two of 64 drawn seeds (with a fast Blob) that went over here.
const KNOWN: [Seeds; 7] = [
    Seeds {
        sim: 17,
        blob_latency: 1,
        consensus_latency: 2,
        slow_blob: false,
    },
    Seeds {
        sim: 17,
        blob_latency: 4,
        consensus_latency: 16,
        slow_blob: false,
    },
    Seeds {
        sim: 17,
        blob_latency: 4,
        consensus_latency: 19,
        slow_blob: false,
    },
    Seeds {
        sim: 4,
        blob_latency: 16,
        consensus_latency: 16,
        slow_blob: false,
    },
    Seeds {
        sim: 4,
        blob_latency: 19,
        consensus_latency: 19,
        slow_blob: false,
    },
    // 29 batches against a bound of 28 at 6,156 commits.
    Seeds {
        sim: 1017,
        blob_latency: 122,
        consensus_latency: 192,
        slow_blob: false,
    },
    // 29 against 28, between 4,096 and 8,192 commits.
    Seeds {
        sim: 1039,
        blob_latency: 276,
        consensus_latency: 434,
        slow_blob: false,
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
        slow_blob: i % 2 == 1,
    });
    known.chain(drawn).take(n as usize)
}

/// One run: what the body saw, how often the writer waited under the spine back-pressure, and
/// the simulated time it took.
fn run(seeds: Seeds, commits: u64) -> (spine::SpineRun, u64, u64) {
    let sim = Simulator::new(seeds.sim);
    sim.set_record_trace(false);
    let rt = sim.runtime();
    let blob_max_ms = if seeds.slow_blob { SLOW_BLOB_MS } else { 3 };
    let blob_latency = Latency::new(rt.clone(), seeds.blob_latency, 0, blob_max_ms);
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
