//! Benchmark (not a test): the differential write task's memory, and what a re-sync costs, against
//! the size of `desired` (1k, 10k, 100k rows).
//!
//!     cargo run --release --example write_task_bench [runs]
//!
//! Each run, for each size N, on the simulator with in-memory locations (no virtual latency, no
//! compaction or GC, every event log off, the upper tick too slow to fire):
//! 1. spawns a task and appends N rows (`(Int(i), String("row-0000000i"))`, diff 1) in one command;
//! 2. *plain write*: one more one-row command, which commits at once;
//! 3. another writer appends one row, so the task's upper is stale;
//! 4. *re-sync write*: a one-row command, which mismatches, re-syncs (opens a reader, fetches and
//!    decodes the N-row snapshot, derives `desired - snapshot`) and commits;
//! 5. shuts the task down: the bytes freed when it ends are the task's resident memory;
//! 6. times a snapshot alone (what a re-sync reads) through a fresh reader;
//! 7. times the pure `derive_to_write` of N rows against an N-row snapshot.
//!
//! Measured by a counting global allocator: live bytes, the peak above the starting point, and
//! bytes allocated; times are wall-clock (`std::time::Instant`, in this benchmark only, never in
//! the crate's code). Prints each run and the medians.
//!
//! ## What it found (medians of 7 runs, release build, a shared machine: times vary by ~20%)
//!
//! ```text
//!    rows | task KiB  desired KiB | plain write ms  KiB alloc | re-sync write ms  KiB alloc  KiB peak | snapshot ms | derive ms
//!    1000 |      131           90 |          0.033        70 |            0.78         474       267 |       0.72  |    0.007
//!   10000 |     1221          899 |          0.17        633 |            9.5         4453      1791 |       8.3   |    0.095
//!  100000 |    12120         8985 |          6.3        6266 |          149          41191     15758 |     134     |    2.9
//! ```
//!
//! - The task's memory is linear in `desired`: about 124 bytes a row here, 1.35 times the rows'
//!   own heap (the vector keeps headroom for growth). Nothing else it holds grows with N.
//! - A re-sync is linear too, and it is almost all the snapshot: reading, decoding and
//!   consolidating every row of the shard (about 90% of the re-sync write at 100k rows), with a
//!   transient peak of about 1.75 times `desired`. The delta itself (`derive_to_write`, a merge
//!   that clones only rows that differ) is 2% of it and allocates nothing when little differs. A
//!   single disturbance of one row costs a full read of the shard.
//! - A one-row command costs a binary search and an insert (a memmove of the vector; the 6 MiB
//!   allocated at 100k rows is the vector doubling its capacity once, amortized over later
//!   commands).
//!
//! ## A leaner design
//!
//! The shard already stores `desired` whenever the task's last write succeeded; the copy in memory
//! only serves re-syncs and deletes. A task could keep just `to_write` (the pending delta) and
//! `current_upper`, and on an upper mismatch read *only what the other writers wrote* between
//! `current_upper` and the new upper (a listen from `current_upper`, or the batches the state
//! names in that interval), setting `to_write = to_write - foreign`: by the task's invariant
//! (shard at `current_upper - 1` plus `to_write` is `desired`), that is exactly
//! `desired - snapshot(new_upper - 1)`. Memory becomes O(pending delta) and a re-sync
//! O(size of the disturbance), not O(N). Two things are needed: a reader (a critical reader, which
//! persist has) holding the since at `current_upper`, so compaction cannot advance the foreign
//! updates' times before the task reads them; and a `Delete { filter }` evaluated by streaming the
//! snapshot part by part (O(part) memory) instead of scanning an in-memory copy. A read-only task
//! keeps its delta relative to the upper it last read, and applies the same rule at promotion.
// clippy.toml disallows the std sorts to keep them out of the page's .wasm; a native
// benchmark is not in it.
#![allow(clippy::disallowed_methods)]
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use futures::channel::oneshot;
use persist_playground::location::mem::{MemBlob, MemConsensus};
use persist_playground::location::Location;
use persist_playground::persist::codec::{Datum, Diff, Row};
use persist_playground::persist::events::EventLog;
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::sim::Simulator;
use persist_playground::write_task::*;
use timely::progress::Antichain;

/// Counts live and peak heap bytes, and bytes ever allocated.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static TOTAL: AtomicUsize = AtomicUsize::new(0);

fn grow(n: usize) {
    let live = LIVE.fetch_add(n, Relaxed) + n;
    PEAK.fetch_max(live, Relaxed);
    TOTAL.fetch_add(n, Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Relaxed);
            grow(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// A measured span: wall time, bytes allocated, and the peak of live bytes above its start.
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    ms: f64,
    allocated: usize,
    peak_above: usize,
}

fn measure<R>(f: impl FnOnce() -> R) -> (R, Span) {
    let live0 = LIVE.load(Relaxed);
    PEAK.store(live0, Relaxed);
    let total0 = TOTAL.load(Relaxed);
    let start = Instant::now();
    let out = f();
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let span = Span {
        ms,
        allocated: TOTAL.load(Relaxed) - total0,
        peak_above: PEAK.load(Relaxed).saturating_sub(live0),
    };
    (out, span)
}

fn row(i: u64) -> Row {
    Row::new([Datum::Int(i as i64), Datum::String(format!("row-{i:08}"))])
}

#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    /// Bytes freed when the task ended: its resident memory.
    task_bytes: usize,
    /// The heap of `desired` alone, computed from its rows.
    desired_bytes: usize,
    first: Span,
    plain: Span,
    resync: Span,
    snapshot: Span,
    derive: Span,
}

/// The heap bytes of a consolidated collection of rows: the vector plus each row's datums.
fn heap_bytes(rows: &[(Row, Diff)]) -> usize {
    let datum = std::mem::size_of::<Datum>();
    std::mem::size_of_val(rows)
        + rows
            .iter()
            .map(|(r, _)| {
                r.0.len() * datum
                    + r.0
                        .iter()
                        .map(|d| match d {
                            Datum::String(s) => s.len(),
                            _ => 0,
                        })
                        .sum::<usize>()
            })
            .sum::<usize>()
}

fn run(n: u64, seed: u64) -> Sample {
    let sim = Simulator::new(seed);
    sim.set_record_trace(false);
    let rt = sim.runtime();
    let location = Location {
        blob: Rc::new(MemBlob::new()),
        consensus: Rc::new(MemConsensus::new()),
    };
    let cfg = PersistConfig {
        compaction_enabled: false,
        gc_enabled: false,
        ..PersistConfig::default()
    };
    let client = PersistClient::new(location.clone(), rt.clone(), cfg.clone(), seed)
        .with_events(EventLog::disabled());
    let other =
        PersistClient::new(location, rt.clone(), cfg, seed + 1).with_events(EventLog::disabled());
    let shard = ShardId::new("mz_bench").unwrap();
    let (c, s) = (client.clone(), shard.clone());
    let write = sim
        .block_on(async move { c.open_writer::<Row, ()>(&s).await })
        .unwrap()
        .unwrap();
    let (c, s) = (other.clone(), shard.clone());
    let mut other_write = sim
        .block_on(async move { c.open_writer::<Row, ()>(&s).await })
        .unwrap()
        .unwrap();
    let (c, s) = (client.clone(), shard.clone());
    let read_handle_fn = move || -> ReadHandleFuture {
        let (c, s) = (c.clone(), s.clone());
        Box::pin(async move { c.open_leased_reader::<Row, ()>(&s).await })
    };
    let task_cfg = WriteTaskConfig {
        runtime: rt.clone(),
        upper_tick_interval_ms: 1 << 40,
        batch_duration_ms: 0,
        retry: RetryPolicy {
            initial_backoff_ms: 1,
            ..RetryPolicy::default()
        },
        attempt_timeout_ms: 1 << 40,
        log: WriteTaskLog::disabled(),
    };
    let (tx, task, shutdown) = DifferentialWriteTask::spawn(
        "mz_bench",
        write,
        read_handle_fn,
        false,
        now_fn(&rt),
        DifferentialIntrospectionConfig::default(),
        task_cfg,
    )
    .unwrap();
    let command = |updates: Vec<(Row, Diff)>| {
        let (resp_tx, mut resp_rx) = oneshot::channel();
        tx.unbounded_send((StorageWriteOp::Append { updates }, resp_tx))
            .unwrap();
        let answered = Rc::new(Cell::new(false));
        sim.run_until_pred(
            || match resp_rx.try_recv() {
                Ok(Some(answer)) => {
                    answer.unwrap();
                    answered.set(true);
                    true
                }
                _ => answered.get(),
            },
            u64::MAX,
        )
        .unwrap();
    };

    let rows: Vec<(Row, Diff)> = (0..n).map(|i| (row(i), 1)).collect();
    let desired_bytes = heap_bytes(&rows) + heap_bytes(&[(row(n), 1), (row(n + 1), 1)]);
    let ((), first) = measure(|| command(rows));
    let ((), plain) = measure(|| command(vec![(row(n), 1)]));
    // Another writer moves the upper: the task's next write mismatches and re-syncs.
    sim.block_on(async move {
        let upper = *other_write
            .fetch_recent_upper()
            .await
            .unwrap()
            .as_option()
            .unwrap();
        let updates = [((row(u64::MAX / 2), ()), upper, 1)];
        other_write
            .compare_and_append(
                &updates,
                Antichain::from_elem(upper),
                Antichain::from_elem(upper + 1),
            )
            .await
            .unwrap()
            .unwrap();
    })
    .unwrap();
    let ((), resync) = measure(|| command(vec![(row(n + 1), 1)]));

    // The task's resident memory: what is freed when it ends.
    let live_before = LIVE.load(Relaxed);
    shutdown.send(()).unwrap();
    sim.block_on(task).unwrap();
    drop(tx);
    sim.run_for(10).unwrap();
    let task_bytes = live_before.saturating_sub(LIVE.load(Relaxed));

    // A snapshot alone (what a re-sync reads), through a fresh reader.
    let (c, s) = (client.clone(), shard.clone());
    let mut reader = sim
        .block_on(async move { c.open_leased_reader::<Row, ()>(&s).await })
        .unwrap()
        .unwrap();
    let upper = *sim
        .block_on({
            let (c, s) = (client.clone(), shard.clone());
            async move { c.inspect_state(&s).await.unwrap().upper().clone() }
        })
        .unwrap()
        .as_option()
        .unwrap();
    let (rows_read, snapshot_span) = measure(|| {
        sim.block_on(async move {
            let rows = reader
                .snapshot_and_fetch(Antichain::from_elem(upper - 1))
                .await
                .unwrap();
            rows.len()
        })
        .unwrap()
    });
    assert_eq!(rows_read as u64, n + 2, "the shard equals desired");

    // The pure re-sync delta, for comparison with the whole re-sync write.
    let desired: Vec<(Row, Diff)> = (0..n).map(|i| (row(i), 1)).collect();
    let mut snapshot = desired.clone();
    snapshot.push((row(u64::MAX / 2), 1));
    let (to_write, derive) = measure(|| derive_to_write(&desired, &snapshot).unwrap());
    assert_eq!(to_write.len(), 1);
    Sample {
        task_bytes,
        desired_bytes,
        first,
        plain,
        resync,
        snapshot: snapshot_span,
        derive,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let runs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    println!(
        "{:>7} | {:>10} {:>10} | {:>9} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} | {:>9} {:>9} | {:>9} {:>9}",
        "rows",
        "task KiB",
        "desired",
        "first ms",
        "plain ms",
        "alloc KiB",
        "peak KiB",
        "resync ms",
        "alloc KiB",
        "peak KiB",
        "snap ms",
        "peak KiB",
        "derive ms",
        "alloc KiB"
    );
    for n in [1_000u64, 10_000, 100_000] {
        let samples: Vec<Sample> = (0..runs).map(|r| run(n, 1 + r)).collect();
        for (r, s) in samples.iter().enumerate() {
            println!("  run {r}: {s:?}");
        }
        let med = |f: &dyn Fn(&Sample) -> f64| median(samples.iter().map(f).collect());
        let kib = |b: usize| b as f64 / 1024.0;
        println!(
            "{:>7} | {:>10.0} {:>10.0} | {:>9.2} | {:>9.3} {:>9.0} {:>9.0} | {:>9.3} {:>9.0} {:>9.0} | {:>9.3} {:>9.0} | {:>9.3} {:>9.0}",
            n,
            med(&|s| kib(s.task_bytes)),
            med(&|s| kib(s.desired_bytes)),
            med(&|s| s.first.ms),
            med(&|s| s.plain.ms),
            med(&|s| kib(s.plain.allocated)),
            med(&|s| kib(s.plain.peak_above)),
            med(&|s| s.resync.ms),
            med(&|s| kib(s.resync.allocated)),
            med(&|s| kib(s.resync.peak_above)),
            med(&|s| s.snapshot.ms),
            med(&|s| kib(s.snapshot.peak_above)),
            med(&|s| s.derive.ms),
            med(&|s| kib(s.derive.allocated)),
        );
    }
}
