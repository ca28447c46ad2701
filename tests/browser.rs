//! The browser tests (`wasm-pack test --headless --chrome -- --test browser`), as one test binary:
//! each `tests/browser_NAME.rs` is a module here, so wasm-pack links, runs wasm-bindgen on and
//! opens in Chromium one .wasm instead of one per file. Natively this binary is empty.
//! A new `tests/browser_*.rs` file must be listed here (scripts/test.sh checks it).
#![cfg(target_arch = "wasm32")]

#[path = "browser_location.rs"]
mod browser_location;
#[path = "browser_oracle.rs"]
mod browser_oracle;
#[path = "browser_persist.rs"]
mod browser_persist;
#[path = "browser_spine.rs"]
mod browser_spine;
#[path = "browser_upsert.rs"]
mod browser_upsert;
#[path = "browser_write_task.rs"]
mod browser_write_task;
