//! Upsert throughput and memory, natively: the operator alone, the whole pipeline over
//! in-memory persist, and differential-dataflow's `arrange_from_upsert`, on one workload
//! (200,000 upserts over 20,000 keys, a tenth deletes, 1,000 per timestamp).
//!
//! ```sh
//! cargo run --release --example upsert_bench [runs]
//! ```
//!
//! Prints, per runner, the median of `runs` (default 5) runs in upserts per second, the ratios
//! the issue asks for, and the peak heap above the start of each run, per 10,000 keys (a
//! counting global allocator). A benchmark: it measures and asserts nothing.
// clippy.toml disallows the std sorts to keep them out of the page's .wasm; a native
// benchmark is not in it.
#![allow(clippy::disallowed_methods)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use persist_playground::upsert::bench::{
    run_differential, run_operator, run_pipeline, run_pipeline_write_path, BenchResult, Workload,
};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let grow = new_size - layout.size();
                let live = LIVE.fetch_add(grow, Ordering::Relaxed) + grow;
                PEAK.fetch_max(live, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn measure(
    runs: usize,
    w: &Workload,
    f: fn(&Workload, &dyn Fn() -> f64) -> BenchResult,
) -> (BenchResult, f64) {
    let t0 = Instant::now();
    let now = move || t0.elapsed().as_secs_f64() * 1000.0;
    let mut results = Vec::new();
    let mut peak_bytes = 0usize;
    for _ in 0..runs {
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let r = f(w, &now);
        peak_bytes = peak_bytes.max(PEAK.load(Ordering::Relaxed).saturating_sub(base));
        results.push(r);
    }
    results.sort_by(|a, b| a.per_second.total_cmp(&b.per_second));
    let median = results[results.len() / 2].clone();
    let per_10k_keys = peak_bytes as f64 / (w.keys as f64 / 10_000.0);
    (median, per_10k_keys)
}

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
        .max(1);
    let w = Workload::issue();
    println!(
        "upsert bench: {} upserts over {} keys, {} per timestamp, median of {runs} runs",
        w.updates, w.keys, w.per_ts
    );
    if std::env::var("UPSERT_BENCH_ONLY").as_deref() == Ok("pipeline") {
        for f in [run_pipeline, run_pipeline_write_path] {
            let (pipe, _) = measure(runs, &w, f);
            println!("  {} {:.0}/s", pipe.name, pipe.per_second);
        }
        return;
    }
    // The runners generate the workload inside the measured run: its own peak, for reference.
    let (_, wl_mem) = measure(1, &w, |w, _| {
        let n = w.upserts().len() as u64;
        BenchResult {
            name: "workload".into(),
            updates: n,
            elapsed_ms: 1.0,
            per_second: 0.0,
            output_updates: 0,
        }
    });
    println!(
        "  (the generated workload alone peaks at {:.2} MB per 10k keys; the figures below include it)",
        wl_mem / 1e6
    );
    let (dd, dd_mem) = measure(runs, &w, run_differential);
    let (op, op_mem) = measure(runs, &w, run_operator);
    let (pipe, pipe_mem) = measure(runs, &w, run_pipeline);
    let (wp, wp_mem) = measure(runs, &w, run_pipeline_write_path);
    for (r, mem) in [
        (&dd, dd_mem),
        (&op, op_mem),
        (&pipe, pipe_mem),
        (&wp, wp_mem),
    ] {
        println!(
            "  {:<40} {:>10.0} upserts/s  ({:>8.1} ms, {:>7} output updates, peak heap {:>6.2} MB per 10k keys)",
            r.name,
            r.per_second,
            r.elapsed_ms,
            r.output_updates,
            mem / 1e6
        );
    }
    println!(
        "  ratios: operator / differential = {:.2}x, pipeline / differential = {:.2}x (without compaction/GC {:.2}x)",
        op.per_second / dd.per_second,
        pipe.per_second / dd.per_second,
        wp.per_second / dd.per_second
    );
}
