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
//! Prints each round and the median, then the profile of one compare_and_append of one update in
//! steady state (1,000 appends after 1,000 more, averaged), maintenance off and on (compaction,
//! rollups and GC at their defaults): Consensus and Blob calls and bytes
//! (`persist::stats::CountingLocation`), state encodes and decodes, rollups and merges
//! (`persist::stats::stats`).
//!
//!     cargo run --release --example persist_bench
//!     cargo run --release --example persist_bench -- profile   # the profile only
//!     cargo run --release --example persist_bench -- on 200   # one configuration, 200 rounds
//!                                                             # (off | on), e.g. under perf
// clippy.toml disallows the std sorts to keep them out of the page's .wasm; a native
// benchmark is not in it.
#![allow(clippy::disallowed_methods)]
use std::rc::Rc;
use std::time::Instant;

use persist_playground::location::mem::{MemBlob, MemConsensus};
use persist_playground::location::Location;
use persist_playground::persist::events::EventLog;
use persist_playground::persist::stats::{reset_stats, stats, CountingLocation};
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

/// Per-append costs of `appends` one-update compare_and_appends after `warmup` more.
fn profile(maintenance: bool, warmup: u64, appends: u64) -> Vec<(&'static str, f64)> {
    let sim = Simulator::new(1);
    sim.set_record_trace(false);
    let (location, counting) = CountingLocation::wrap(Location {
        blob: Rc::new(MemBlob::new()),
        consensus: Rc::new(MemConsensus::new()),
    });
    let cfg = if maintenance {
        PersistConfig::default()
    } else {
        PersistConfig {
            compaction_enabled: false,
            rollup_threshold: 0,
            gc_enabled: false,
            ..PersistConfig::default()
        }
    };
    let rt = sim.runtime();
    let client =
        PersistClient::new(location, sim.runtime(), cfg, 1).with_events(EventLog::disabled());
    let c2 = counting.clone();
    let (loc, core, batches) = sim
        .block_on(async move {
            let shard = ShardId::new("s-profile").unwrap();
            let mut w = client.open_writer::<String, ()>(&shard).await.unwrap();
            let f = Antichain::from_elem;
            let mut t = 0;
            for phase in 0..2 {
                if phase == 1 {
                    c2.reset();
                    reset_stats();
                }
                let n = if phase == 0 { warmup } else { appends };
                for _ in 0..n {
                    let u = [((format!("k{t}"), ()), t, 1i64)];
                    w.compare_and_append(&u, f(t), f(t + 1))
                        .await
                        .unwrap()
                        .unwrap();
                    rt.yield_now().await;
                    t += 1;
                }
            }
            let batches = client
                .inspect_state(&shard)
                .await
                .unwrap()
                .collections
                .trace
                .batches()
                .len();
            (c2.counts(), stats(), batches)
        })
        .unwrap();
    let n = appends as f64;
    let per = |x: u64| x as f64 / n;
    vec![
        ("Consensus calls", per(loc.consensus_calls())),
        ("  compare_and_set", per(loc.consensus_cas)),
        (
            "  head + scan",
            per(loc.consensus_heads + loc.consensus_scans),
        ),
        ("  truncate", per(loc.consensus_truncates)),
        ("Consensus bytes written", per(loc.consensus_write_bytes)),
        ("Consensus bytes read", per(loc.consensus_read_bytes)),
        ("Blob reads", per(loc.blob_gets)),
        ("Blob writes", per(loc.blob_sets)),
        (
            "Blob deletes + lists",
            per(loc.blob_deletes + loc.blob_lists),
        ),
        ("Blob bytes read", per(loc.blob_read_bytes)),
        ("Blob bytes written", per(loc.blob_write_bytes)),
        ("state diffs encoded", per(core.diff_encodes)),
        ("  bytes", per(core.diff_encode_bytes)),
        ("state diffs decoded", per(core.diff_decodes)),
        ("  bytes", per(core.diff_decode_bytes)),
        ("whole states encoded (rollups)", per(core.rollup_encodes)),
        ("  bytes", per(core.rollup_encode_bytes)),
        ("whole states decoded (rollups)", per(core.rollup_decodes)),
        ("  bytes", per(core.rollup_decode_bytes)),
        ("merges run", per(core.merges)),
        ("  bytes read", per(core.merge_read_bytes)),
        ("  bytes written", per(core.merge_write_bytes)),
        ("blobs swept", per(core.swept_blobs)),
        ("batches in the trace at the end", batches as f64),
    ]
}

fn print_profile() {
    let off = profile(false, 1_000, 1_000);
    let on = profile(true, 1_000, 1_000);
    println!("profile: per compare_and_append of one update, steady state (1,000 after 1,000)");
    println!("| cost | maintenance off | maintenance on |");
    println!("| --- | ---: | ---: |");
    for ((name, a), (_, b)) in off.iter().zip(on.iter()) {
        println!("| {name} | {a:.3} | {b:.3} |");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("profile") {
        print_profile();
        return;
    }
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
    if args.is_empty() {
        print_profile();
    }
}
