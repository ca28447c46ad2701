//! Upsert with continual feedback: a timely operator that turns a stream of upserts
//! `(key, Option<value>, from_time)` into a differential collection, learning its key-value
//! state only from its own output read back from the output shard.
//!
//! Several replicas of one ingestion may run at once, see the source at different speeds, and
//! race to `compare_and_append` the same shard. Each computes retractions from what the *shard*
//! holds (the state changes only from the persist input), so whatever range a replica wins is
//! consistent with what every replica builds from the shard. The loop closes through the shard,
//! not through a timely cycle:
//!
//! ```text
//!   SourceLog ──► SourceReader ──► source input ─┐
//!                                                ├─► upsert_inner ──► output ──► PersistSink ──► shard
//!   shard ──► persist source (snapshot + listen) ─► persist input ─┘        compare_and_append │
//!     ▲                                                                                        │
//!     └────────────────────────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! Semantics (see [`core`] for where each rule is enforced, [`stash`] for the drains):
//! - Source updates are stashed until the source frontier has passed their time and the persist
//!   upper has caught up to it. Eligible entries below the persist upper are discarded: a peer
//!   already wrote those times.
//! - Per `(time, key)` the highest FromTime wins, whatever the arrival order. A delete of an
//!   absent key emits nothing; a delete of a present key retracts it.
//! - The state changes only from the persist input, except for the provisional values that a
//!   partial drain at the input frontier writes (`prevent_snapshot_buffering`), which feedback
//!   later overwrites. The drain is skipped while the persist input is mid-timestamp.
//! - The operator rehydrates from the shard's snapshot at `resume_upper - 1` on start; source
//!   updates and progress before `resume_upper` are ignored.
//! - The operator holds a capability only while its stash is non-empty.
//! - A state cell that does not decode (diff sum not 0 or 1, a bad checksum) is reported on the
//!   health stream and stops the operator: never a panic.
//!
//! Files, one concept each:
//! - [`types`]: keys (a stable hash of the key columns), values, errors, health, the shard codec;
//! - [`state`]: state cells (consolidating and decoded, provisional values) and the backend trait;
//!   [`memory`]: the in-memory backend; [`consolidate`]: `consolidate_chunk`, `multi_get/put`;
//! - [`stash`]: staging and the two drains; [`core`]: the operator's state and rules, without
//!   timely; [`operator`]: `upsert_inner`, the timely operator; [`worker`]: one operator in a bare
//!   single-thread timely worker stepped by the host;
//! - [`source`]: the source log, its generator and per-replica readers; [`sink`]: the persist
//!   sink; [`persist_source`]: the feedback reader; [`replica`]: one replica with explicit steps;
//!   [`driver`]: a replica's loop on the runtime; [`pipeline`]: racing replicas plus a checker;
//!   [`reference`](mod@reference): the reference model and the checker;
//! - [`observe`]: counters, events and snapshots as plain serde data.
//!
//! ```
//! use persist_playground::persist::codec::{Datum, Row};
//! use persist_playground::upsert::core::CoreObserver;
//! use persist_playground::upsert::types::UpsertKey;
//! use persist_playground::upsert::worker::{UpsertWorker, UpsertWorkerConfig};
//! use timely::progress::Antichain;
//!
//! let row = |v: i64| Row::new([Datum::Int(1), Datum::Int(v)]);
//! let key = UpsertKey::from_key(&Row::new([Datum::Int(1)]));
//! let mut w = UpsertWorker::new(
//!     UpsertWorkerConfig::new("doc", Antichain::from_elem(0)),
//!     CoreObserver::new("doc"),
//! );
//! // An upsert at time 0 (offset 1); the source finishes time 0.
//! w.send_source(vec![((key, Some(Ok(row(7))), 1), 0, 1)]).unwrap();
//! w.advance_source(1);
//! w.step(64);
//! assert_eq!(w.take_output(), vec![(Ok(row(7)), 0, 1)]);
//! // Feed the output back as the shard would; then a new value at 1 retracts the old one.
//! w.send_persist(vec![(Ok(row(7)), 0, 1)]).unwrap();
//! w.advance_persist(1);
//! w.send_source(vec![((key, Some(Ok(row(8))), 2), 1, 1)]).unwrap();
//! w.advance_source(2);
//! w.step(64);
//! let mut out = w.take_output();
//! out.sort();
//! assert_eq!(out, vec![(Ok(row(7)), 1, -1), (Ok(row(8)), 1, 1)]);
//! ```

pub mod bench;
pub mod consolidate;
pub mod core;
pub mod driver;
pub mod error;
pub mod memory;
pub mod observe;
pub mod operator;
pub mod persist_source;
pub mod pipeline;
pub mod reference;
pub mod replica;
pub mod sink;
pub mod source;
pub mod stash;
pub mod state;
pub mod types;
pub mod worker;
