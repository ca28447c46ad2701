//! Benchmark (not a test): compare_and_append over the in-memory locations, natively.
//!
//! Each round opens a fresh shard, fills its trace with 100 batches, then times 100 small
//! compare_and_appends (one update each, kept inline) by one writer, on the simulator with no
//! virtual latency and the event log off; so the trace holds 100 to 200 batches while timed.
//! Compaction is off (the trace must keep its batches). Two configurations:
//! - "write path": rollups and GC off too;
//! - "with maintenance": routine rollups and GC on, the writer yielding after each append so that
//!   their background tasks run, as they would beside a real writer.
//!
//! Prints each round and the median.
//!
//!     cargo run --release --example persist_bench
//!     cargo run --release --example persist_bench -- on 200   # one configuration, 200 rounds
//!                                                             # (off | on), e.g. under perf
use std::rc::Rc;
use std::time::Instant;

use persist_playground::location::mem::{MemBlob, MemConsensus};
use persist_playground::location::Location;
use persist_playground::persist::events::EventLog;
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::sim::Simulator;
use timely::progress::Antichain;

const PREFILL_BATCHES: u64 = 100;
const TIMED_APPENDS: u64 = 100;
const ROUNDS: usize = 7;

fn round(seed: u64, maintenance: bool) -> (f64, usize) {
    let sim = Simulator::new(seed);
    sim.set_record_trace(false);
    let location = Location {
        blob: Rc::new(MemBlob::new()),
        consensus: Rc::new(MemConsensus::new()),
    };
    let cfg = PersistConfig {
        compaction_enabled: false,
        rollup_threshold: if maintenance { 16 } else { 0 },
        gc_enabled: maintenance,
        ..PersistConfig::default()
    };
    let rt = sim.runtime();
    let client =
        PersistClient::new(location, sim.runtime(), cfg, seed).with_events(EventLog::disabled());
    sim.block_on(async move {
        let shard = ShardId::new("s-bench").unwrap();
        let mut w = client.open_writer::<String, ()>(&shard).await.unwrap();
        let f = Antichain::from_elem;
        for t in 0..PREFILL_BATCHES {
            let u = [((format!("k{t}"), ()), t, 1i64)];
            w.compare_and_append(&u, f(t), f(t + 1))
                .await
                .unwrap()
                .unwrap();
        }
        // The benchmark's own timing: wall-clock, outside the crate's code paths.
        let start = Instant::now();
        for t in PREFILL_BATCHES..PREFILL_BATCHES + TIMED_APPENDS {
            let u = [((format!("k{t}"), ()), t, 1i64)];
            w.compare_and_append(&u, f(t), f(t + 1))
                .await
                .unwrap()
                .unwrap();
            if maintenance {
                rt.yield_now().await;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let batches = client
            .inspect_state(&shard)
            .await
            .expect("the shard is not broken")
            .collections
            .trace
            .batches()
            .len();
        (TIMED_APPENDS as f64 / secs, batches)
    })
    .unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let configs: Vec<bool> = match args.first().map(String::as_str) {
        Some("on") => vec![true],
        Some("off") => vec![false],
        _ => vec![false, true],
    };
    let rounds: usize = args
        .get(1)
        .and_then(|r| r.parse().ok())
        .unwrap_or(ROUNDS)
        .max(1);
    for maintenance in configs {
        let label = if maintenance {
            "with maintenance"
        } else {
            "write path"
        };
        let mut rates = Vec::new();
        for r in 0..rounds {
            let (rate, batches) = round(r as u64, maintenance);
            if rounds <= ROUNDS {
                println!("{label} round {r}: {rate:.0} compare_and_appends/s (trace ends with {batches} batches)");
            }
            rates.push(rate);
        }
        rates.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "{label}: median {:.0} compare_and_appends/s over {rounds} rounds",
            rates[rounds / 2]
        );
    }
}
