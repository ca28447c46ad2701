//! The library's JavaScript API: the components themselves, for people who import the package
//! to build their own demos and tests of these protocols (the playground's facade lives beside
//! it in `wasm.rs`).
//!
//! | JS class | what it is | module |
//! | --- | --- | --- |
//! | `PersistLocation` | Blob + Consensus: in memory, IndexedDB, or JS functions (`custom`), optionally behind seeded faults; `runLocationConformance` | [`location`], [`custom`] |
//! | `PersistClient`, `WriteHandle` | opening shards; append, compareAndAppend | [`shard`] (what handles share: [`ctx`]) |
//! | `ReadHandle`, `Listen` | snapshot, listen, subscribe | [`read`] |
//! | `WriteTask` | the differential write task | [`write_task`] |
//! | `TimestampOracle` | the timestamp oracle, in memory or durable | [`oracle`] |
//! | `UpsertPipeline` | upsert with continual feedback: racing replicas, a checker | [`upsert`] |
//!
//! Conventions (see [`convert`] and [`errors`]): camelCase names; times are plain numbers
//! (integers up to `Number.MAX_SAFE_INTEGER`), diffs and seqnos `bigint`; every bad argument
//! is a `TypeError` or `RangeError`, every refused call an `Error`, each with a message and a
//! `code`; async calls return typed Promises; results are plain data, never live handles, except
//! the handles themselves.
//!
//! Everything runs on the browser runtime (`Date.now` and `setTimeout`), which works the same
//! under Node: `js_sys::Date`, gloo-timers' global `setTimeout` and `spawn_local`'s microtask
//! queue are all available there. IndexedDB is not, and says so.

pub mod convert;
pub mod ctx;
pub mod custom;
pub mod errors;
pub mod events;
pub mod ids;
pub mod location;
pub mod oracle;
pub mod read;
pub mod shard;
pub mod upsert;
pub mod upsert_views;
pub mod write_task;
