//! # persist-playground
//!
//! A teaching-sized re-implementation of Materialize's storage layer ("persist"), in Rust,
//! compiled to WebAssembly and durable in the browser through IndexedDB.
//!
//! ## Architecture
//!
//! ```text
//!  www/ + index.html   the page: renders snapshots, sends commands; holds no protocol state
//!  src/wasm.rs         the only #[wasm_bindgen] surface (wasm32 only)
//!  src/playground/     the scenario engine the page drives: actors, processes, faults, snapshots
//!  src/upsert/         upsert with continual feedback: a stepped timely operator, its persist
//!                      sink and source, racing replicas, a reference-model checker
//!  src/write_task/     the differential write task: keeps a shard equal to a desired collection
//!  src/oracle/         the timestamp oracle, in memory and durable (pre-allocated windows)
//!  src/persist/        shards: state machine, command loop, handles, compaction, GC, encodings
//!  src/location/       Blob + Consensus: traits, in-memory, IndexedDB, fault injection, conformance
//!  src/runtime/        clock, timers, tasks: the browser's and a deterministic simulator
//! ```
//!
//! Shared plumbing used by every layer: [`retry`] (the one back-off, and which storage errors
//! are worth retrying), [`event_log`] (the one bounded, numbered event log) and [`sort`] (the
//! one sort, compiled once) and [`vec_map`] (the small ordered map of a shard's state).
//!
//! Each layer uses only the ones below it; see `DESIGN.md` in the shared notes.
//!
//! ## Glossary
//! - **shard**: a durable, time-varying collection of `((key, value), time, diff)` updates.
//! - **seqno**: the version number of a Consensus key; every state change of a shard takes the
//!   next one.
//! - **upper**: a frontier; every time not beyond it is complete (no more writes there).
//! - **since**: a frontier; history before it may be compacted.
//! - **Blob**: a key-to-bytes store with atomic writes (batch parts, rollups).
//! - **Consensus**: a linearizable, versioned register per key (a shard's state versions).
//! - **lease**: how long a reader or writer may be idle before others may expire it.
//! - **batch**: updates in `[lower, upper)` appended at once; its parts live in Blob or inline.
//! - **rollup**: the whole state of a shard at one seqno, in Blob, where readers start.
//!
//! ## House rules
//! Model code never reads a clock or OS randomness directly: time comes from [`runtime::Runtime`]
//! and randomness from seeds the caller passes. Bad input gets an error, never a panic.

#![warn(missing_docs)]

pub mod event_log;
pub mod location;
pub mod numbers;
pub mod oracle;
pub mod persist;
pub mod playground;
pub mod retry;
pub mod runtime;
pub mod sort;
pub mod upsert;
pub mod vec_map;
pub mod write_task;

#[cfg(target_arch = "wasm32")]
pub mod wasm;
