//! The state of one shard, and the pure transitions on it.
//!
//! Every command on a shard is a transition `fn(&mut StateCollections, ...) -> ControlFlow<B, R>`
//! with no I/O, no clock and no randomness (time and ids come in as arguments). `Continue(r)` means
//! "commit the new state at seqno + 1"; `Break(b)` means "commit nothing and spend no seqno" (not
//! linearized). Commands that change nothing visible (a heartbeat, a downgrade to the same since)
//! still `Continue`, so that they are linearized, as in the original.
//!
//! Invariants (asserted by [`State::validate`] after every transition in debug builds and tests):
//! - `trace.since == meet(every reader's since)` whenever there is a reader (recomputed on every
//!   registration, downgrade and expiry, including lease expiry: an improvement on the original,
//!   which does not recompute on expiry);
//! - seqno grows by one per committed version; `walltime_ms` strictly increases;
//! - upper, since, every writer's most recent upper, every reader's seqno hold and `last_gc_req`
//!   never go back;
//! - `rollups` is never empty once the shard is initialized;
//! - every writer's most recent upper is at most the shard's upper; every reader's seqno hold
//!   and every listed rollup is at most the state's seqno; the seqno is at most
//!   `SeqNo::maximum()`; every frontier has at most one element (times are totally ordered).
//!
//! [`State::validate`] checks each of these on every decoded rollup and applied diff, so that
//! stored bytes that break one are an error before any transition (and its asserts) sees them.
//!
//! The transitions live in two child modules: [`commands`] (what handles ask for) and
//! [`upkeep`] (compaction, rollups, GC).

use crate::vec_map::VecMap;
use std::ops::ControlFlow::{self, Continue};

use serde::{Deserialize, Serialize};
use timely::progress::Antichain;
use timely::PartialOrder;

use super::codec::Timestamp;
use super::error::InvalidUsage;
use super::ShardId;
use crate::location::SeqNo;

pub mod commands;
pub mod trace;
pub mod upkeep;

use trace::Trace;

pub use upkeep::{GcReq, ROLLUP_FALLBACK_MULTIPLE};

macro_rules! string_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub struct $name(pub String);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

string_id!(
    /// A writer (`w…`).
    WriterId
);
string_id!(
    /// A leased reader (`r…`).
    LeasedReaderId
);
string_id!(
    /// A critical reader (`c…`).
    CriticalReaderId
);
string_id!(
    /// A token that makes one compare_and_append at-most-once across retries (`i…`).
    IdempotencyToken
);

impl IdempotencyToken {
    /// The token writers start with; no real write uses it.
    pub fn sentinel() -> Self {
        IdempotencyToken("i-sentinel".to_string())
    }
}

/// The id of a registered schema (a pair of codec names).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
pub struct SchemaId(pub u64);

/// The codecs of a shard's keys and values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schema {
    /// The key codec's name.
    pub key_codec: String,
    /// The value codec's name.
    pub val_codec: String,
}

/// The time interval a batch covers, and the since its contents were compacted to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Description {
    /// Every update is at a time `>= lower`.
    pub lower: Antichain<Timestamp>,
    /// Every update is at a time `< upper` (not beyond it).
    pub upper: Antichain<Timestamp>,
    /// Times were advanced to this frontier (the minimum for freshly written batches).
    pub since: Antichain<Timestamp>,
}

impl Description {
    /// A description with since = the minimum.
    pub fn new(lower: Antichain<Timestamp>, upper: Antichain<Timestamp>) -> Self {
        Description {
            lower,
            upper,
            since: Antichain::from_elem(Timestamp::MIN),
        }
    }
}

/// One part of a batch: in Blob under a key, or inline in the state itself (small batches, so a
/// small compare_and_append costs one Consensus write).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BatchPart {
    /// Stored in Blob.
    Hollow {
        /// The Blob key.
        key: String,
        /// The encoded size.
        encoded_size_bytes: u64,
    },
    /// Stored in state: an encoded part.
    Inline {
        /// The encoded part (see `encoding::encode_part`). Written as one byte string, not a
        /// sequence of numbers: the same bincode layout, copied in bulk.
        #[serde(with = "serde_bytes")]
        encoded: Vec<u8>,
    },
}

impl BatchPart {
    /// Bytes this part takes in state (0 for a hollow part).
    pub fn inline_bytes(&self) -> u64 {
        match self {
            BatchPart::Hollow { .. } => 0,
            BatchPart::Inline { encoded } => encoded.len() as u64,
        }
    }
}

/// A batch as state holds it: its description and where its updates live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HollowBatch {
    /// The interval and since.
    pub desc: Description,
    /// The number of updates.
    pub len: u64,
    /// The parts.
    pub parts: Vec<BatchPart>,
}

impl HollowBatch {
    /// An empty batch over `desc`.
    pub fn empty(desc: Description) -> Self {
        HollowBatch {
            desc,
            len: 0,
            parts: Vec::new(),
        }
    }

    /// The first writer that owns one of this batch's parts ([`part_writer`]) and is not
    /// registered in `writers`.
    pub fn unregistered_owner<V>(&self, writers: &VecMap<WriterId, V>) -> Option<String> {
        self.part_keys()
            .filter_map(part_writer)
            .find(|w| writers.get(&WriterId((*w).to_string())).is_none())
            .map(String::from)
    }

    /// The Blob keys of this batch's hollow parts.
    pub fn part_keys(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            BatchPart::Hollow { key, .. } => Some(key.as_str()),
            BatchPart::Inline { .. } => None,
        })
    }

    /// Bytes this batch takes in state.
    pub fn inline_bytes(&self) -> u64 {
        self.parts.iter().map(BatchPart::inline_bytes).sum()
    }
}

/// The writer a batch part belongs to, from its Blob key `<shard>/<writer id>/p<id>`: `None` for
/// any other key (rollups, GC tickets, the outputs of maintenance). Only a registered writer's
/// parts may be committed (`compare_and_append`), so once a writer is expired, its parts that no
/// live version refers to are garbage for good (GC's sweep, `gc.rs`).
pub fn part_writer(key: &str) -> Option<&str> {
    let mut segments = key.splitn(3, '/');
    let (_shard, owner, rest) = (segments.next()?, segments.next()?, segments.next()?);
    let writer_id = owner.len() == 25
        && owner.starts_with('w')
        && owner[1..].bytes().all(|b| b.is_ascii_hexdigit());
    let id = rest.strip_prefix('p')?;
    (writer_id && !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(owner)
}

/// The seqno of the commit that assigned the routine maintenance which wrote this part, from its
/// Blob key `<shard>/<who>/pm<seqno>x<n>` (a compaction's output): `None` for any other key.
/// Such an output may be committed only while that seqno is not older than the oldest listed
/// rollup (`apply_merge_res`), which never goes back; so once it is older, an output no live
/// version refers to is garbage for good (GC's sweep, `gc.rs`).
pub fn maintenance_output_seqno(key: &str) -> Option<SeqNo> {
    let mut segments = key.splitn(3, '/');
    let (_shard, _who, rest) = (segments.next()?, segments.next()?, segments.next()?);
    let (seqno, n) = rest.strip_prefix("pm")?.split_once('x')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    seqno.parse().ok().map(SeqNo)
}

/// A rollup: the whole state at some seqno, in Blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HollowRollup {
    /// The Blob key.
    pub key: String,
    /// The encoded size.
    pub encoded_size_bytes: u64,
}

/// A registered writer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriterState {
    /// The last time it showed signs of life.
    pub last_heartbeat_ms: u64,
    /// How long it may stay silent before others may expire it.
    pub lease_duration_ms: u64,
    /// The token of its most recent successful compare_and_append.
    pub most_recent_write_token: IdempotencyToken,
    /// The upper of its most recent successful compare_and_append. Never goes back.
    pub most_recent_write_upper: Antichain<Timestamp>,
}

/// A registered leased reader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasedReaderState {
    /// The oldest seqno it may still read from (holds back GC). Never goes back.
    pub seqno: SeqNo,
    /// Its since: it may still read at any time at or beyond it. Never goes back.
    pub since: Antichain<Timestamp>,
    /// The last time it showed signs of life.
    pub last_heartbeat_ms: u64,
    /// How long it may stay silent before others may expire it.
    pub lease_duration_ms: u64,
}

/// A registered critical reader: no lease, fenced by an opaque token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriticalReaderState {
    /// Its since.
    pub since: Antichain<Timestamp>,
    /// The token a downgrade must present.
    pub opaque: u64,
}

/// Everything about a shard that commands change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateCollections {
    /// Registered schemas. Invariant: at most one (codec changes are not supported).
    pub schemas: VecMap<SchemaId, Schema>,
    /// The seqno below which GC was last requested. Never goes back.
    pub last_gc_req: SeqNo,
    /// Rollups by seqno. Invariant: never empty once initialized.
    pub rollups: VecMap<SeqNo, HollowRollup>,
    /// Leased readers.
    pub leased_readers: VecMap<LeasedReaderId, LeasedReaderState>,
    /// Critical readers.
    pub critical_readers: VecMap<CriticalReaderId, CriticalReaderState>,
    /// Writers.
    pub writers: VecMap<WriterId, WriterState>,
    /// The trace. Invariant: `trace.since == meet(readers' sinces)` whenever there are readers.
    pub trace: Trace,
}

/// A shard's state at one seqno.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// The shard.
    pub shard_id: ShardId,
    /// The version. Invariant: +1 per committed command.
    pub seqno: SeqNo,
    /// The wall time of the command that made this version. Invariant: strictly increasing.
    pub walltime_ms: u64,
    /// The collections.
    pub collections: StateCollections,
}

/// Why a compare_and_append did not commit.
#[derive(Clone, PartialEq, Eq)]
pub enum CompareAndAppendBreak {
    /// The shard's upper is not the batch's lower.
    Upper {
        /// The shard's upper.
        shard_upper: Antichain<Timestamp>,
        /// This writer's most recent upper.
        writer_upper: Antichain<Timestamp>,
    },
    /// The idempotency token already committed: this is a retry of a write that succeeded.
    AlreadyCommitted,
    /// The state's inline budget would be exceeded: write the parts to Blob and retry.
    InlineBackpressure,
    /// The state would hold more batches than the spine bound allows, even with the merges
    /// this process has waiting carried along (`trace/mod.rs`, the spine back-pressure): wait
    /// for compaction and retry. Never seen by the state transition itself: the command loop's
    /// compare_and_append adds it after the transition (`machine/plan.rs`).
    SpineBackpressure,
    /// A misuse.
    InvalidUsage(InvalidUsage),
    /// The stored state contradicts this retry (its token committed with another upper): the
    /// state is not what it must be.
    Inconsistent(String),
}

impl std::fmt::Debug for CompareAndAppendBreak {
    /// Short, because events show it: `Upper(shard [1], writer [0])`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompareAndAppendBreak::Upper {
                shard_upper,
                writer_upper,
            } => write!(
                f,
                "Upper(shard {:?}, writer {:?})",
                shard_upper.elements(),
                writer_upper.elements()
            ),
            CompareAndAppendBreak::AlreadyCommitted => write!(f, "AlreadyCommitted"),
            CompareAndAppendBreak::InlineBackpressure => write!(f, "InlineBackpressure"),
            CompareAndAppendBreak::SpineBackpressure => write!(f, "SpineBackpressure"),
            CompareAndAppendBreak::InvalidUsage(e) => write!(f, "InvalidUsage({e})"),
            CompareAndAppendBreak::Inconsistent(e) => write!(f, "Inconsistent({e})"),
        }
    }
}

/// Why a snapshot cannot be served (yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotErr {
    /// `as_of` is not yet complete: wait for the upper to pass it.
    AsOfNotYetAvailable(SeqNo, Antichain<Timestamp>),
    /// `as_of` is before the since.
    AsOfHistoricalDistinctionsLost(Antichain<Timestamp>),
}

/// A reader command on a reader that is no longer registered (its lease expired or it expired
/// itself). The original panics; we return this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaderExpired;

/// A writer command on a writer that is no longer registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterExpired;

/// The outcome of a critical reader's compare_and_downgrade_since that ran: `Ok(since)`, or
/// `Err((stored opaque, since))` when the expected opaque token was fenced.
pub type CaDSResult = Result<Antichain<Timestamp>, (u64, Antichain<Timestamp>)>;

/// The cap on inline bytes over all batches in state.
pub const INLINE_WRITES_TOTAL_MAX_BYTES: u64 = 64 * 1024;

impl Default for StateCollections {
    fn default() -> Self {
        Self::new()
    }
}

impl State {
    /// The invariants between fields of one state (see the module docs).
    fn validate_cross_fields(&self) -> Result<(), String> {
        let c = &self.collections;
        if self.seqno > SeqNo::maximum() {
            return Err(format!(
                "seqno {} is beyond {}",
                self.seqno,
                SeqNo::maximum()
            ));
        }
        let upper = self.upper();
        let one = |f: &Antichain<Timestamp>| f.len() <= 1;
        for (id, w) in &c.writers {
            if !one(&w.most_recent_write_upper) {
                return Err(format!("writer {id} has an upper with several elements"));
            }
            if !PartialOrder::less_equal(&w.most_recent_write_upper, upper) {
                return Err(format!(
                    "writer {id} upper {:?} is beyond the shard upper {upper:?}",
                    w.most_recent_write_upper
                ));
            }
        }
        for (id, r) in &c.leased_readers {
            if !one(&r.since) || r.seqno > self.seqno {
                return Err(format!(
                    "reader {id} holds {} (state {}) with since {:?}",
                    r.seqno, self.seqno, r.since
                ));
            }
        }
        if c.critical_readers.values().any(|r| !one(&r.since)) {
            return Err("a critical reader's since has several elements".into());
        }
        if let Some((seqno, _)) = c.rollups.last_key_value() {
            if *seqno > self.seqno {
                return Err(format!(
                    "rollup at {seqno} is beyond the state's {}",
                    self.seqno
                ));
            }
        }
        if c.last_gc_req > self.seqno {
            return Err(format!(
                "last_gc_req {} is beyond {}",
                c.last_gc_req, self.seqno
            ));
        }
        for b in c.trace.batches() {
            if b.parts.is_empty() != (b.len == 0) {
                return Err(format!(
                    "batch at {:?} has {} updates in {} parts",
                    b.desc.lower,
                    b.len,
                    b.parts.len()
                ));
            }
        }
        Ok(())
    }

    /// The state before initialization: seqno 0, nothing registered.
    pub fn uninitialized(shard_id: ShardId) -> Self {
        State {
            shard_id,
            seqno: SeqNo::minimum(),
            walltime_ms: 0,
            collections: StateCollections::new(),
        }
    }

    /// The shard's upper.
    pub fn upper(&self) -> &Antichain<Timestamp> {
        self.collections.trace.upper()
    }

    /// The shard's since.
    pub fn since(&self) -> &Antichain<Timestamp> {
        self.collections.trace.since()
    }

    /// The Blob keys of every batch part this state refers to.
    pub fn part_keys(&self) -> impl Iterator<Item = &str> {
        self.collections
            .trace
            .batches()
            .iter()
            .flat_map(|b| b.part_keys())
    }

    /// The newest rollup.
    pub fn latest_rollup(&self) -> Option<(SeqNo, &HollowRollup)> {
        self.collections
            .rollups
            .iter()
            .next_back()
            .map(|(s, r)| (*s, r))
    }

    /// Clones this state and applies `work` to the clone at seqno + 1, with a strictly
    /// increasing walltime. `Break` leaves nothing behind.
    pub fn clone_apply<R, B>(
        &self,
        now_ms: u64,
        work: &mut impl FnMut(SeqNo, &mut StateCollections) -> ControlFlow<B, R>,
    ) -> ControlFlow<B, (R, State)> {
        let mut new = self.clone();
        new.seqno = self.seqno.next();
        new.walltime_ms = now_ms.max(self.walltime_ms.saturating_add(1));
        let r = work(new.seqno, &mut new.collections)?;
        Continue((r, new))
    }

    /// Checks the invariants that one state can check on its own, and those between `self` and
    /// the previous version `prev`.
    pub fn validate(&self, prev: Option<&State>) -> Result<(), String> {
        self.collections.trace.validate()?;
        self.validate_given_trace(prev)
    }

    /// [`State::validate`] for a state whose trace was just checked (by `Trace::from_parts`).
    pub(crate) fn validate_given_trace(&self, prev: Option<&State>) -> Result<(), String> {
        self.validate_cross_fields()?;
        if let Some(since) = self.collections.readers_since() {
            if &since != self.since() {
                return Err(format!(
                    "since {:?} is not the meet of the readers' sinces {:?}",
                    self.since(),
                    since
                ));
            }
        }
        if self.seqno > SeqNo::minimum() && self.collections.rollups.is_empty() {
            return Err("an initialized shard has no rollup".into());
        }
        if self.collections.schemas.len() > 1 {
            return Err("more than one schema".into());
        }
        if let Some(prev) = prev {
            if self.seqno != prev.seqno.next() {
                return Err(format!(
                    "seqno {} does not follow {}",
                    self.seqno, prev.seqno
                ));
            }
            if self.walltime_ms <= prev.walltime_ms && prev.seqno > SeqNo::minimum() {
                return Err("walltime did not increase".into());
            }
            if !PartialOrder::less_equal(prev.upper(), self.upper()) {
                return Err("upper regressed".into());
            }
            if !PartialOrder::less_equal(prev.since(), self.since()) {
                return Err("since regressed".into());
            }
            if self.collections.last_gc_req < prev.collections.last_gc_req {
                return Err("last_gc_req regressed".into());
            }
            for (id, w) in &self.collections.writers {
                if let Some(p) = prev.collections.writers.get(id) {
                    if !PartialOrder::less_equal(
                        &p.most_recent_write_upper,
                        &w.most_recent_write_upper,
                    ) {
                        return Err(format!("writer {id} upper regressed"));
                    }
                }
            }
            for (id, r) in &self.collections.leased_readers {
                if let Some(p) = prev.collections.leased_readers.get(id) {
                    if r.seqno < p.seqno {
                        return Err(format!("reader {id} seqno hold regressed"));
                    }
                    if !PartialOrder::less_equal(&p.since, &r.since) {
                        return Err(format!("reader {id} since regressed"));
                    }
                }
            }
        }
        Ok(())
    }
}
