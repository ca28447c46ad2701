//! Persist: durable, definite, time-varying collections ("shards") of `((K, V), T, D)` updates on
//! a Blob and a Consensus.
//!
//! A shard has an **upper** (every time not beyond it is complete: no more writes there) and a
//! **since** (history before it may be compacted; reads at times beyond it are exact). Its state is
//! a chain of versions in Consensus, one per command (seqno + 1 each), each the diff from the
//! previous version; rollups of the whole state and batch parts live in Blob (small batches live
//! inline in state, so a small write costs one Consensus write).
//!
//! Layers, each with one job, listed bottom-up: a module imports only modules listed above it
//! (`codec`, `error`, `events`, `stats`, `consolidate` and `checksum` sit below all of these;
//! this file, the root, defines the plain types all of them share, `ShardId` and
//! `PersistConfig`, and the `PersistClient` that wires them together):
//! - [`state`]: the pure transitions (`ControlFlow`, no I/O, no clock) and the invariants; its
//!   [`trace`] holds the batches of a shard and their contiguity;
//! - [`encoding`]: every stored byte, versioned and checksummed;
//! - [`machine`]: the command loop, the only caller of `compare_and_set` on shard state; it
//!   tells transient storage errors (retried) from permanent ones (the shard is broken: a typed
//!   [`error::PersistError::Permanent`], and nothing more is written). It also plans the
//!   maintenance each commit assigns and queues it, and starts its workers through a starter
//!   the client installs (so it imports none of the work);
//! - [`read`], [`critical`], [`write`](mod@write) and [`contents`]: the handles a user holds;
//! - the work: [`compact`] (its pure core in [`merge`]), `rollup.rs`, and [`gc`] (which also
//!   has the leak check, [`gc::leaked_blobs`]), with ids from `background.rs`;
//! - [`maintenance`]: the workers that run what a commit assigned, when it runs.
//!
//! A shard whose upper and since are both empty is a tombstone
//! ([`PersistClient::finalize_shard`], [`PersistClient::is_finalized`]): every later command on
//! it is a no-op that spends no seqno.
//!
//! ```
//! use persist_playground::location::{Location, mem::{MemBlob, MemConsensus}};
//! use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
//! use persist_playground::runtime::sim::Simulator;
//! use std::rc::Rc;
//! use timely::progress::Antichain;
//!
//! let sim = Simulator::new(1);
//! let location = Location { blob: Rc::new(MemBlob::new()), consensus: Rc::new(MemConsensus::new()) };
//! let client = PersistClient::new(location, sim.runtime(), PersistConfig::default(), 7);
//! let contents = sim.block_on(async move {
//!     let shard = ShardId::new("s-example").unwrap();
//!     let (mut write, mut read) = client.open::<String, ()>(&shard).await.unwrap();
//!     let updates = vec![(("hello".to_string(), ()), 0u64, 1i64)];
//!     write
//!         .compare_and_append(&updates, Antichain::from_elem(0), Antichain::from_elem(1))
//!         .await
//!         .unwrap()
//!         .unwrap();
//!     read.snapshot_and_fetch(Antichain::from_elem(0)).await.unwrap()
//! }).unwrap();
//! assert_eq!(contents, vec![(("hello".to_string(), ()), 0, 1)]);
//! ```

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};
use timely::progress::Antichain;

pub(crate) mod background;
pub mod checksum;
pub mod codec;
pub mod compact;
pub mod consolidate;
pub mod contents;
pub mod critical;
pub mod encoding;
pub mod error;
pub mod events;
pub mod gc;
pub mod machine;
pub mod maintenance;
pub mod merge;
pub mod read;
pub(crate) mod rollup;
pub mod state;
pub mod stats;
pub use config::PersistConfig;
/// The trace lives in `state/` (it is part of the state); re-exported at its old path.
pub use state::trace;
mod config;
pub(crate) mod turns;
pub mod write;

use crate::location::Location;
use crate::runtime::Runtime;
use crate::vec_map::VecMap;
use codec::{Codec, Timestamp};
use critical::SinceHandle;
use error::{PermanentError, PersistError};
use events::EventLog;
use machine::Machine;
use read::ReadHandle;
use state::{CriticalReaderId, LeasedReaderId, Schema, State, WriterId};
use write::WriteHandle;

/// The id of a shard: its key in Consensus and the prefix of its keys in Blob.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ShardId(pub String);

impl ShardId {
    /// A shard id from a name: non-empty, at most 128 characters, no `/` (it prefixes Blob keys).
    pub fn new(name: &str) -> Result<ShardId, String> {
        if name.is_empty() || name.chars().count() > 128 || name.contains('/') {
            return Err(format!(
                "invalid shard id {name:?}: it must be 1 to 128 characters without '/'"
            ));
        }
        Ok(ShardId(name.to_string()))
    }
}

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Opens handles onto shards of one location. Clones share the process-wide state caches, the
/// event log and the id generator.
#[derive(Clone)]
pub struct PersistClient {
    location: Location,
    runtime: Runtime,
    cfg: PersistConfig,
    events: EventLog,
    ids: Ids,
    caches: Rc<RefCell<VecMap<ShardId, ShardCache>>>,
}

/// Fills a buffer with bytes from a cryptographically secure generator: the platform's CSPRNG
/// (`crypto.getRandomValues` in browsers, workers and Node). The core reads no OS randomness
/// itself; the caller injects this, as it injects the runtime (see [`PersistClient::with_entropy`]).
///
/// Compiled natively and into the library's build, not into the page's (which never draws from
/// a CSPRNG: its runs replay by seed).
#[cfg(any(feature = "library", not(target_arch = "wasm32")))]
pub type Entropy = Rc<dyn Fn(&mut [u8])>;

/// Where a client draws its ids (writers, leased readers, idempotency tokens, part keys,
/// maintenance work) from.
///
/// Invariant: two processes over one shared or durable location never draw the same id. A
/// seeded generator keeps that only while every process has its own seed (the simulator and
/// in-memory runs, where the seed makes the run replay); over a location that outlives the
/// process (IndexedDB, a database, files), or that processes share without agreeing on seeds,
/// the ids come from [`Entropy`] instead.
#[derive(Clone)]
enum Ids {
    /// A seeded PRNG with a stable algorithm: the same seed gives the same ids.
    Seeded(Rc<RefCell<Xoshiro256PlusPlus>>),
    /// Bytes from a CSPRNG: unique per process whatever the seed.
    #[cfg(any(feature = "library", not(target_arch = "wasm32")))]
    Entropy(Entropy),
}

/// What one process shares between all its handles on one shard.
#[derive(Clone)]
struct ShardCache {
    state: Rc<RefCell<State>>,
    maintenance: Rc<RefCell<machine::MaintenanceQueue>>,
    broken: Rc<RefCell<Option<crate::location::PermanentError>>>,
    seen: Rc<RefCell<VecMap<crate::location::SeqNo, Vec<String>>>>,
    turns: turns::Turns,
}

impl PersistClient {
    /// A client over `location`, on `runtime`. Ids (writers, readers, tokens, part keys) are drawn
    /// from `seed`, so runs replay; [`PersistClient::with_entropy`] draws them from a CSPRNG.
    pub fn new(location: Location, runtime: Runtime, cfg: PersistConfig, seed: u64) -> Self {
        PersistClient {
            location,
            runtime,
            cfg,
            events: EventLog::new(),
            ids: Ids::Seeded(Rc::new(RefCell::new(Xoshiro256PlusPlus::seed_from_u64(
                seed,
            )))),
            caches: Rc::default(),
        }
    }

    /// Draws every later id from `fill` (a CSPRNG) instead of the seed: what a client over a
    /// durable or shared location does, so that processes never share a writer id or an
    /// idempotency token (see [`Entropy`]). Ids keep their shape: a prefix and 24 hex digits.
    #[cfg(any(feature = "library", not(target_arch = "wasm32")))]
    pub fn with_entropy(mut self, fill: Entropy) -> Self {
        self.ids = Ids::Entropy(fill);
        self
    }

    /// Replaces the event log (for example with [`EventLog::disabled`] in benchmarks).
    pub fn with_events(mut self, events: EventLog) -> Self {
        self.events = events;
        self
    }

    /// The event log.
    pub fn events(&self) -> &EventLog {
        &self.events
    }

    /// The runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The location.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// The configuration.
    pub fn cfg(&self) -> &PersistConfig {
        &self.cfg
    }

    pub(crate) fn new_id(&self, prefix: &str) -> String {
        match &self.ids {
            Ids::Seeded(rng) => {
                let mut rng = rng.borrow_mut();
                format!(
                    "{prefix}{:016x}{:08x}",
                    rng.next_u64(),
                    rng.next_u64() as u32
                )
            }
            #[cfg(any(feature = "library", not(target_arch = "wasm32")))]
            Ids::Entropy(fill) => {
                let mut bytes = [0u8; 12];
                fill(&mut bytes);
                let mut id = String::with_capacity(prefix.len() + 24);
                id.push_str(prefix);
                for b in bytes {
                    id.push_str(&format!("{b:02x}"));
                }
                id
            }
        }
    }

    pub(crate) fn machine(&self, shard_id: &ShardId, who: String) -> Machine {
        let shared = self
            .caches
            .borrow_mut()
            .get_or_insert_with(shard_id.clone(), || ShardCache {
                state: Rc::new(RefCell::new(State::uninitialized(shard_id.clone()))),
                maintenance: Rc::default(),
                broken: Rc::default(),
                seen: Rc::default(),
                turns: turns::Turns::default(),
            })
            .clone();
        Machine {
            shard_id: shard_id.clone(),
            location: self.location.clone(),
            runtime: self.runtime.clone(),
            cfg: self.cfg.clone(),
            events: self.events.clone(),
            who,
            cache: shared.state,
            maintenance: shared.maintenance,
            start_workers: maintenance::start_workers,
            broken: shared.broken,
            seen: shared.seen,
            turns: shared.turns,
        }
    }

    /// The schema of a shard of `K` keys and `V` values.
    fn schema_of<K: Codec, V: Codec>() -> Schema {
        Schema {
            key_codec: K::codec_name().to_string(),
            val_codec: V::codec_name().to_string(),
        }
    }

    // The `open_*` methods are generic only in the handle they return: the work is in the
    // non-generic `register_*` below, compiled once rather than once per key and value type.

    async fn register_schema(
        &self,
        machine: &Machine,
        schema: Schema,
    ) -> Result<state::SchemaId, PersistError> {
        // A shard that already has this schema needs no command.
        if let Some((id, s)) = machine.state().collections.schemas.iter().next() {
            if *s == schema {
                return Ok(*id);
            }
        }
        let (_, result) = machine
            .apply_idempotent("register_schema", |_, _, c| c.register_schema(&schema))
            .await?;
        match result {
            std::ops::ControlFlow::Continue(id) => Ok(id),
            std::ops::ControlFlow::Break(e) => Err(e.into()),
        }
    }

    /// Opens a writer on `shard_id`, creating the shard if it does not exist.
    pub async fn open_writer<K: Codec, V: Codec>(
        &self,
        shard_id: &ShardId,
    ) -> Result<WriteHandle<K, V>, PersistError> {
        let (machine, writer_id, schema_id, upper) = self
            .register_writer(shard_id, Self::schema_of::<K, V>())
            .await?;
        Ok(WriteHandle::new(
            self.clone(),
            machine,
            writer_id,
            schema_id,
            upper,
        ))
    }

    async fn register_writer(
        &self,
        shard_id: &ShardId,
        schema: Schema,
    ) -> Result<(Machine, WriterId, state::SchemaId, Antichain<Timestamp>), PersistError> {
        let writer_id = WriterId(self.new_id("w"));
        let machine = self.machine(shard_id, writer_id.0.clone());
        // Creates the shard, or reads its current state into the cache.
        machine.maybe_init_shard().await?;
        let schema_id = self.register_schema(&machine, schema).await?;
        let lease = self.cfg.writer_lease_duration_ms;
        let (_, upper) = machine
            .apply_idempotent("register_writer", |_, now, c| {
                c.register_writer(&writer_id, lease, now)
            })
            .await?;
        let std::ops::ControlFlow::Continue(upper) = upper;
        Ok((machine, writer_id, schema_id, upper))
    }

    /// Opens a leased reader on `shard_id`, creating the shard if it does not exist. Its since
    /// starts at the shard's since.
    pub async fn open_leased_reader<K: Codec, V: Codec>(
        &self,
        shard_id: &ShardId,
    ) -> Result<ReadHandle<K, V>, PersistError> {
        let (machine, reader_id, schema_id, since) = self
            .register_leased_reader(shard_id, Self::schema_of::<K, V>())
            .await?;
        Ok(ReadHandle::new(
            self.clone(),
            machine,
            reader_id,
            schema_id,
            since,
        ))
    }

    async fn register_leased_reader(
        &self,
        shard_id: &ShardId,
        schema: Schema,
    ) -> Result<
        (
            Machine,
            LeasedReaderId,
            state::SchemaId,
            Antichain<Timestamp>,
        ),
        PersistError,
    > {
        let reader_id = LeasedReaderId(self.new_id("r"));
        let machine = self.machine(shard_id, reader_id.0.clone());
        // Creates the shard, or reads its current state into the cache.
        machine.maybe_init_shard().await?;
        let schema_id = self.register_schema(&machine, schema).await?;
        let lease = self.cfg.reader_lease_duration_ms;
        let (_, reader) = machine
            .apply_idempotent("register_leased_reader", |seqno, now, c| {
                c.register_leased_reader(&reader_id, seqno, lease, now)
            })
            .await?;
        let std::ops::ControlFlow::Continue(reader) = reader;
        Ok((machine, reader_id, schema_id, reader.since))
    }

    /// Opens (or re-opens) the critical reader `reader_id`, registering it with `initial_opaque`
    /// if it is new. Its since starts at the shard's since.
    pub async fn open_critical_since<K: Codec, V: Codec>(
        &self,
        shard_id: &ShardId,
        reader_id: CriticalReaderId,
        initial_opaque: u64,
    ) -> Result<SinceHandle<K, V>, PersistError> {
        let (machine, state) = self
            .register_critical_reader(
                shard_id,
                &reader_id,
                initial_opaque,
                Self::schema_of::<K, V>(),
            )
            .await?;
        Ok(SinceHandle::new(
            machine,
            reader_id,
            state.since,
            state.opaque,
        ))
    }

    async fn register_critical_reader(
        &self,
        shard_id: &ShardId,
        reader_id: &CriticalReaderId,
        initial_opaque: u64,
        schema: Schema,
    ) -> Result<(Machine, state::CriticalReaderState), PersistError> {
        let machine = self.machine(shard_id, reader_id.0.clone());
        // Creates the shard, or reads its current state into the cache.
        machine.maybe_init_shard().await?;
        self.register_schema(&machine, schema).await?;
        let (_, r) = machine
            .apply_idempotent("register_critical_reader", |_, _, c| {
                c.register_critical_reader(reader_id, initial_opaque)
            })
            .await?;
        let std::ops::ControlFlow::Continue(state) = r;
        Ok((machine, state))
    }

    /// Opens a writer and a leased reader.
    pub async fn open<K: Codec, V: Codec>(
        &self,
        shard_id: &ShardId,
    ) -> Result<(WriteHandle<K, V>, ReadHandle<K, V>), PersistError> {
        let write = self.open_writer(shard_id).await?;
        let read = self.open_leased_reader(shard_id).await?;
        Ok((write, read))
    }

    /// The newest state of the shard this process has seen, without reading storage (`None`
    /// if no handle of this client has touched the shard).
    pub fn cached_state(&self, shard_id: &ShardId) -> Option<State> {
        let caches = self.caches.borrow();
        let state = caches.get(shard_id)?.state.borrow();
        (state.seqno > crate::location::SeqNo(0)).then(|| state.clone())
    }

    /// The shard's state as a plain snapshot, freshly read from Consensus.
    pub async fn inspect_state(&self, shard_id: &ShardId) -> Result<State, PermanentError> {
        let machine = self.machine(shard_id, "inspect".into());
        machine.fetch_and_update_state_retrying().await?;
        Ok(machine.state())
    }

    /// Finishes the shard for good, making it a tombstone (see
    /// [`state::StateCollections::finalize_shard`]): its upper must be empty, and its since
    /// too unless no reader holds it. Every handle is dropped; every later command on the shard
    /// is a no-op that spends no seqno. Finalizing a tombstone again succeeds.
    pub async fn finalize_shard(&self, shard_id: &ShardId) -> Result<(), PersistError> {
        let machine = self.machine(shard_id, "finalize".into());
        machine.maybe_init_shard().await?;
        let (_, r) = machine
            .apply_idempotent("finalize_shard", |_, _, c| c.finalize_shard())
            .await?;
        match r {
            std::ops::ControlFlow::Continue(()) => Ok(()),
            std::ops::ControlFlow::Break(e) => Err(e.into()),
        }
    }

    /// Whether the shard is a tombstone (finalized, or both its frontiers closed), freshly read.
    pub async fn is_finalized(&self, shard_id: &ShardId) -> Result<bool, PermanentError> {
        Ok(self
            .inspect_state(shard_id)
            .await?
            .collections
            .is_tombstone())
    }
}

#[cfg(test)]
mod id_tests {
    #[cfg(any(feature = "library", not(target_arch = "wasm32")))]
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;
    use crate::location::mem::{MemBlob, MemConsensus};
    use crate::runtime::sim::Simulator;

    fn client(seed: u64) -> PersistClient {
        let location = Location {
            blob: Rc::new(MemBlob::new()),
            consensus: Rc::new(MemConsensus::new()),
        };
        PersistClient::new(
            location,
            Simulator::new(1).runtime(),
            PersistConfig::default(),
            seed,
        )
    }

    #[test]
    fn seeded_ids_replay_and_differ_by_seed() {
        let (a, b, c) = (client(7), client(7), client(8));
        let ids = |c: &PersistClient| (0..3).map(|_| c.new_id("w")).collect::<Vec<_>>();
        let (ia, ib, ic) = (ids(&a), ids(&b), ids(&c));
        assert_eq!(ia, ib);
        assert_ne!(ia, ic);
        assert!(
            ia.iter().all(|id| id.len() == 25 && id.starts_with('w')),
            "{ia:?}"
        );
    }

    #[test]
    #[cfg(any(feature = "library", not(target_arch = "wasm32")))]
    fn with_entropy_ids_come_from_the_entropy_whatever_the_seed() {
        let next = Rc::new(Cell::new(0u8));
        let counter = Rc::clone(&next);
        let fill: Entropy = Rc::new(move |buf: &mut [u8]| {
            for b in buf.iter_mut() {
                *b = counter.get();
                counter.set(counter.get().wrapping_add(1));
            }
        });
        let c = client(7).with_entropy(fill);
        assert_eq!(c.new_id("w"), "w000102030405060708090a0b");
        assert_eq!(c.new_id("i"), "i0c0d0e0f1011121314151617");
        // Clones share the source: a handle's ids and its client's never repeat.
        assert_eq!(c.clone().new_id(""), "18191a1b1c1d1e1f20212223");
        assert_eq!(next.get(), 36);
    }
}
