//! The native integration tests, as one test binary (Cargo.toml: `autotests = false` and one
//! `[[test]]` per binary): each `tests/NAME.rs` is a module here, so the suite links the crate
//! once instead of once per file, and its tests run in parallel in one process. Run one file's
//! tests with `cargo test --test native NAME::` (for example `cargo test --test native tours::`).
//!
//! The `native_*` modules (PostgreSQL, object_store, OS processes) are `#[ignore]`d: the native
//! backends layer of `scripts/test.sh` runs them with `cargo test --test native -- --ignored`
//! after starting the services. A new `tests/*.rs` file must be listed here or in `browser.rs`
//! (scripts/test.sh fails otherwise: with `autotests = false` it would not be built at all).
#![cfg(not(target_arch = "wasm32"))]
// clippy.toml disallows the std sorts to keep them out of the page's .wasm; no test reaches
// the .wasm. Each module names its support files by `#[path]`, so several load one file.
#![allow(clippy::disallowed_methods, clippy::duplicate_mod)]

#[path = "native_backends.rs"]
mod native_backends;
#[path = "native_bad_input.rs"]
mod native_bad_input;
#[path = "native_open.rs"]
mod native_open;
#[path = "native_race.rs"]
mod native_race;
#[path = "oracle.rs"]
mod oracle;
#[path = "persist_corruption.rs"]
mod persist_corruption;
#[path = "persist_events.rs"]
mod persist_events;
#[path = "persist_golden.rs"]
mod persist_golden;
#[path = "persist_handles.rs"]
mod persist_handles;
#[path = "persist_maintenance.rs"]
mod persist_maintenance;
#[path = "persist_sim.rs"]
mod persist_sim;
#[path = "persist_spine.rs"]
mod persist_spine;
#[path = "persist_tombstone.rs"]
mod persist_tombstone;
#[path = "persist_turns.rs"]
mod persist_turns;
#[path = "playground.rs"]
mod playground;
#[path = "playground_check.rs"]
mod playground_check;
#[path = "playground_check_runs.rs"]
mod playground_check_runs;
#[path = "playground_heal.rs"]
mod playground_heal;
#[path = "playground_rules.rs"]
mod playground_rules;
#[path = "playground_sweep.rs"]
mod playground_sweep;
#[path = "playground_tabs.rs"]
mod playground_tabs;
#[path = "playground_time.rs"]
mod playground_time;
#[path = "playground_walk.rs"]
mod playground_walk;
#[path = "runtime.rs"]
mod runtime;
#[path = "runtime_tokio.rs"]
mod runtime_tokio;
#[path = "tours.rs"]
mod tours;
#[path = "upsert_operator.rs"]
mod upsert_operator;
#[path = "upsert_pipeline.rs"]
mod upsert_pipeline;
#[path = "upsert_sim.rs"]
mod upsert_sim;
#[path = "write_task.rs"]
mod write_task;
