//! The transitions handles ask for: registration, compare_and_append, heartbeats, downgrades,
//! expiry, tombstones and the reads' batch selection. Pure: no I/O, no clock (time comes in as
//! an argument), no randomness. See the parent module for the invariants.

use std::convert::Infallible;
use std::ops::ControlFlow::{self, Break, Continue};
use std::rc::Rc;

use differential_dataflow::lattice::Lattice;
use timely::progress::Antichain;
use timely::PartialOrder;

use super::*;
use crate::location::SeqNo;
use crate::persist::codec::Timestamp;
use crate::persist::error::InvalidUsage;

impl StateCollections {
    /// An empty, uninitialized collection set.
    pub fn new() -> Self {
        StateCollections {
            schemas: VecMap::new(),
            last_gc_req: SeqNo::minimum(),
            rollups: VecMap::new(),
            leased_readers: VecMap::new(),
            critical_readers: VecMap::new(),
            writers: VecMap::new(),
            trace: Trace::default(),
        }
    }

    /// Registers (or finds) the schema with these codecs. A shard with another schema refuses.
    pub fn register_schema(&mut self, schema: &Schema) -> ControlFlow<InvalidUsage, SchemaId> {
        match self.schemas.iter().next() {
            Some((id, existing)) if existing == schema => Continue(*id),
            Some((_, existing)) => Break(InvalidUsage::CodecMismatch {
                stored: format!("({}, {})", existing.key_codec, existing.val_codec),
                requested: format!("({}, {})", schema.key_codec, schema.val_codec),
            }),
            None => {
                self.schemas.insert(SchemaId(0), schema.clone());
                Continue(SchemaId(0))
            }
        }
    }

    /// Registers a writer (or heartbeats it if it exists) and returns the shard's upper.
    pub fn register_writer(
        &mut self,
        writer_id: &WriterId,
        lease_duration_ms: u64,
        now_ms: u64,
    ) -> ControlFlow<Infallible, Antichain<Timestamp>> {
        let writer = self
            .writers
            .get_or_insert_with(writer_id.clone(), || WriterState {
                last_heartbeat_ms: now_ms,
                lease_duration_ms,
                most_recent_write_token: IdempotencyToken::sentinel(),
                most_recent_write_upper: Antichain::from_elem(Timestamp::MIN),
            });
        writer.last_heartbeat_ms = writer.last_heartbeat_ms.max(now_ms);
        Continue(self.trace.upper().clone())
    }

    /// Registers a leased reader at `seqno` with since = the shard's since.
    pub fn register_leased_reader(
        &mut self,
        reader_id: &LeasedReaderId,
        seqno: SeqNo,
        lease_duration_ms: u64,
        now_ms: u64,
    ) -> ControlFlow<Infallible, LeasedReaderState> {
        // A new reader holds the shard's current since; a re-registration keeps its own.
        let since = self.trace.since().clone();
        let reader = self
            .leased_readers
            .get_or_insert_with(reader_id.clone(), || LeasedReaderState {
                seqno,
                since,
                last_heartbeat_ms: now_ms,
                lease_duration_ms,
            });
        reader.last_heartbeat_ms = reader.last_heartbeat_ms.max(now_ms);
        let out = reader.clone();
        self.update_since();
        Continue(out)
    }

    /// Registers a critical reader (keeping the existing registration if there is one).
    pub fn register_critical_reader(
        &mut self,
        reader_id: &CriticalReaderId,
        initial_opaque: u64,
    ) -> ControlFlow<Infallible, CriticalReaderState> {
        let since = self.trace.since().clone();
        let out = self
            .critical_readers
            .get_or_insert_with(reader_id.clone(), || CriticalReaderState {
                since,
                opaque: initial_opaque,
            })
            .clone();
        self.update_since();
        Continue(out)
    }

    /// Appends `batch` iff the shard's upper equals `batch.desc.lower`. See the notes, section 1.4,
    /// for the order of the checks.
    pub fn compare_and_append(
        &mut self,
        batch: &HollowBatch,
        writer_id: &WriterId,
        now_ms: u64,
        lease_duration_ms: u64,
        token: &IdempotencyToken,
    ) -> ControlFlow<CompareAndAppendBreak, ()> {
        let desc = &batch.desc;
        if self.is_tombstone() {
            // A finished shard: nothing is ever appended again.
            return Break(CompareAndAppendBreak::Upper {
                shard_upper: Antichain::new(),
                writer_upper: Antichain::new(),
            });
        }
        // SUBTLE: only a registered writer's parts may be committed. Once a writer is expired,
        // GC's sweep may delete its parts that no live version refers to (`gc.rs`); a write of
        // them now would refer to deleted blobs. A writer with no parts in Blob (inline or empty
        // batches) may still come back, registering itself again below.
        if let Some(id) = batch.unregistered_owner(&self.writers) {
            return Break(CompareAndAppendBreak::InvalidUsage(InvalidUsage::Expired {
                what: "writer",
                id,
            }));
        }
        // Writers register themselves on their first write.
        let writer = self
            .writers
            .get_or_insert_with(writer_id.clone(), || WriterState {
                last_heartbeat_ms: now_ms,
                lease_duration_ms,
                most_recent_write_token: IdempotencyToken::sentinel(),
                most_recent_write_upper: Antichain::from_elem(Timestamp::MIN),
            });
        if !PartialOrder::less_equal(&desc.lower, &desc.upper) {
            return Break(CompareAndAppendBreak::InvalidUsage(
                InvalidUsage::InvalidBounds {
                    lower: desc.lower.clone(),
                    upper: desc.upper.clone(),
                },
            ));
        }
        if desc.lower == desc.upper && batch.len > 0 {
            return Break(CompareAndAppendBreak::InvalidUsage(
                InvalidUsage::InvalidEmptyTimeInterval {
                    lower: desc.lower.clone(),
                    upper: desc.upper.clone(),
                },
            ));
        }
        if *token == writer.most_recent_write_token {
            // SUBTLE: a retry of a write that did commit (its acknowledgement was lost). Its
            // upper is the one committed with the token (validate: at most the shard's upper).
            if writer.most_recent_write_upper != desc.upper {
                // Tokens are fresh per write and a retry keeps its upper: the same token with
                // another upper means a second process holds this writer id (and draws the
                // same tokens), which is the user's to fix, not something a retry heals.
                return Break(CompareAndAppendBreak::Inconsistent(format!(
                    "another process uses writer {writer_id} (token {token} committed with \
                     upper {:?}, not {:?}): open a new writer",
                    writer.most_recent_write_upper, desc.upper
                )));
            }
            return Break(CompareAndAppendBreak::AlreadyCommitted);
        }
        if self.trace.upper() != &desc.lower {
            return Break(CompareAndAppendBreak::Upper {
                shard_upper: self.trace.upper().clone(),
                writer_upper: writer.most_recent_write_upper.clone(),
            });
        }
        let inline_now: u64 = self.trace.batches().iter().map(|b| b.inline_bytes()).sum();
        let inline_new = batch.inline_bytes();
        if inline_new > 0 && inline_now + inline_new > INLINE_WRITES_TOTAL_MAX_BYTES {
            return Break(CompareAndAppendBreak::InlineBackpressure);
        }
        if desc.lower != desc.upper {
            self.trace.push_batch(batch.clone());
        }
        // Registered at the top of this transition. A writer's upper never goes back: it is at
        // most the shard's upper (validate), which is this batch's lower.
        if let Some(writer) = self.writers.get_mut(writer_id) {
            debug_assert!(PartialOrder::less_equal(
                &writer.most_recent_write_upper,
                &desc.upper
            ));
            writer.most_recent_write_token = token.clone();
            writer.most_recent_write_upper = desc.upper.clone();
            writer.last_heartbeat_ms = writer.last_heartbeat_ms.max(now_ms);
        }
        Continue(())
    }

    /// Heartbeats a writer. Breaks if it is no longer registered.
    pub fn heartbeat_writer(
        &mut self,
        writer_id: &WriterId,
        now_ms: u64,
    ) -> ControlFlow<WriterExpired, ()> {
        let tombstone = self.is_tombstone();
        let found = self
            .writers
            .get_mut(writer_id)
            .map(|w| &mut w.last_heartbeat_ms);
        heartbeat(tombstone, found, now_ms).map_break(|()| WriterExpired)
    }

    /// Heartbeats a leased reader. Breaks if it is no longer registered.
    pub fn heartbeat_leased_reader(
        &mut self,
        reader_id: &LeasedReaderId,
        now_ms: u64,
    ) -> ControlFlow<ReaderExpired, ()> {
        let tombstone = self.is_tombstone();
        let found = self
            .leased_readers
            .get_mut(reader_id)
            .map(|r| &mut r.last_heartbeat_ms);
        heartbeat(tombstone, found, now_ms).map_break(|()| ReaderExpired)
    }

    /// Downgrades a leased reader's since (and its seqno hold to `outstanding_seqno`), then
    /// recomputes the shard's since. A downgrade to an older since changes nothing but still
    /// commits (it heartbeats). Returns the reader's since.
    pub fn downgrade_since(
        &mut self,
        reader_id: &LeasedReaderId,
        outstanding_seqno: SeqNo,
        new_since: &Antichain<Timestamp>,
        now_ms: u64,
    ) -> ControlFlow<ReaderExpired, Antichain<Timestamp>> {
        if self.is_tombstone() {
            return Continue(Antichain::new());
        }
        let Some(reader) = self.leased_readers.get_mut(reader_id) else {
            return Break(ReaderExpired);
        };
        reader.last_heartbeat_ms = reader.last_heartbeat_ms.max(now_ms);
        // The seqno hold only moves forward.
        reader.seqno = reader.seqno.max(outstanding_seqno);
        if PartialOrder::less_than(&reader.since, new_since) {
            reader.since = new_since.clone();
        }
        let since = reader.since.clone();
        self.update_since();
        Continue(since)
    }

    /// Downgrades a critical reader's since iff `expected_opaque` matches the stored token.
    /// Always commits. `Err((stored_opaque, since))` on a fenced token.
    pub fn compare_and_downgrade_since(
        &mut self,
        reader_id: &CriticalReaderId,
        expected_opaque: u64,
        new_opaque: u64,
        new_since: &Antichain<Timestamp>,
    ) -> ControlFlow<ReaderExpired, CaDSResult> {
        if self.is_tombstone() {
            return Continue(Ok(Antichain::new()));
        }
        let Some(reader) = self.critical_readers.get_mut(reader_id) else {
            return Break(ReaderExpired);
        };
        if reader.opaque != expected_opaque {
            return Continue(Err((reader.opaque, reader.since.clone())));
        }
        reader.opaque = new_opaque;
        if PartialOrder::less_equal(&reader.since, new_since) {
            reader.since = new_since.clone();
        }
        let since = reader.since.clone();
        self.update_since();
        Continue(Ok(since))
    }

    /// Whether the shard is a tombstone: upper and since both empty, and no handle registered.
    /// Nothing can be written or read there ever again; commands on it commit nothing
    /// (`machine.rs`).
    pub fn is_tombstone(&self) -> bool {
        self.trace.upper().is_empty()
            && self.trace.since().is_empty()
            && self.writers.is_empty()
            && self.leased_readers.is_empty()
            && self.critical_readers.is_empty()
    }

    /// Once upper and since are both empty, drops every handle and every batch (nothing can be
    /// read at any time, so GC may delete their parts): the shard becomes a tombstone. Runs on
    /// every new version. Returns whether it did.
    pub fn maybe_become_tombstone(&mut self) -> bool {
        if !self.trace.upper().is_empty() || !self.trace.since().is_empty() || self.is_tombstone() {
            return false;
        }
        self.writers.clear();
        self.leased_readers.clear();
        self.critical_readers.clear();
        self.trace.finish();
        true
    }

    /// Finishes the shard for good: its upper must be empty already (every writer finished it);
    /// its since is closed too if no reader holds it (else every reader must have downgraded to
    /// the empty since). Then it becomes a tombstone. A tombstone finalizes again as a no-op.
    pub fn finalize_shard(&mut self) -> ControlFlow<InvalidUsage, ()> {
        if self.is_tombstone() {
            return Continue(());
        }
        let has_readers = !self.leased_readers.is_empty() || !self.critical_readers.is_empty();
        if !self.trace.upper().is_empty() || (has_readers && !self.trace.since().is_empty()) {
            return Break(InvalidUsage::NotFinalizable {
                upper: self.trace.upper().clone(),
                since: self.trace.since().clone(),
            });
        }
        if !self.trace.since().is_empty() {
            self.trace.downgrade_since(&Antichain::new());
        }
        self.maybe_become_tombstone();
        Continue(())
    }

    /// Removes a writer. Returns whether it existed.
    pub fn expire_writer(&mut self, writer_id: &WriterId) -> ControlFlow<Infallible, bool> {
        Continue(self.writers.remove(writer_id).is_some())
    }

    /// Removes a leased reader and recomputes the since. Returns whether it existed.
    pub fn expire_leased_reader(
        &mut self,
        reader_id: &LeasedReaderId,
    ) -> ControlFlow<Infallible, bool> {
        let existed = self.leased_readers.remove(reader_id).is_some();
        self.update_since();
        Continue(existed)
    }

    /// Removes a critical reader and recomputes the since. Returns whether it existed.
    pub fn expire_critical_reader(
        &mut self,
        reader_id: &CriticalReaderId,
    ) -> ControlFlow<Infallible, bool> {
        let existed = self.critical_readers.remove(reader_id).is_some();
        self.update_since();
        Continue(existed)
    }

    /// Expires every leased reader and writer whose lease ran out by `now_ms`, then recomputes
    /// the since. Runs as maintenance on every command. Returns what it expired.
    pub fn expire_at(&mut self, now_ms: u64) -> (Vec<LeasedReaderId>, Vec<WriterId>) {
        let expired = |hb: u64, lease: u64| hb.saturating_add(lease) < now_ms;
        let readers: Vec<_> = self
            .leased_readers
            .iter()
            .filter(|(_, r)| expired(r.last_heartbeat_ms, r.lease_duration_ms))
            .map(|(id, _)| id.clone())
            .collect();
        let writers: Vec<_> = self
            .writers
            .iter()
            .filter(|(_, w)| expired(w.last_heartbeat_ms, w.lease_duration_ms))
            .map(|(id, _)| id.clone())
            .collect();
        for r in &readers {
            self.leased_readers.remove(r);
        }
        for w in &writers {
            self.writers.remove(w);
        }
        self.update_since();
        (readers, writers)
    }

    /// The meet of every reader's since, if there are readers.
    pub fn readers_since(&self) -> Option<Antichain<Timestamp>> {
        let sinces = self
            .leased_readers
            .values()
            .map(|r| &r.since)
            .chain(self.critical_readers.values().map(|r| &r.since));
        sinces.fold(None, |meet: Option<Antichain<Timestamp>>, s| {
            Some(meet.map_or_else(|| s.clone(), |m| m.meet(s)))
        })
    }

    /// Sets the shard's since to the meet of the readers' sinces; with no readers it stays.
    fn update_since(&mut self) {
        if let Some(since) = self.readers_since() {
            // The meet can only rise: every reader's since starts at the shard's since and only
            // moves forward. Assert it where it could break.
            assert!(
                PartialOrder::less_equal(self.trace.since(), &since),
                "since would regress: {:?} -> {:?}",
                self.trace.since(),
                since
            );
            if &since != self.trace.since() {
                self.trace.downgrade_since(&since);
            }
        }
    }

    /// The seqno below which no live reader needs state: `min(seqno, every reader's hold)`.
    pub fn seqno_since(&self, seqno: SeqNo) -> SeqNo {
        self.leased_readers
            .values()
            .map(|r| r.seqno)
            .fold(seqno, SeqNo::min)
    }

    /// The batches a snapshot at `as_of` needs.
    pub fn snapshot(
        &self,
        seqno: SeqNo,
        as_of: &Antichain<Timestamp>,
    ) -> Result<Vec<Rc<HollowBatch>>, SnapshotErr> {
        if PartialOrder::less_than(as_of, self.trace.since()) {
            return Err(SnapshotErr::AsOfHistoricalDistinctionsLost(
                self.trace.since().clone(),
            ));
        }
        if PartialOrder::less_equal(self.trace.upper(), as_of) {
            return Err(SnapshotErr::AsOfNotYetAvailable(
                seqno,
                self.trace.upper().clone(),
            ));
        }
        Ok(self
            .trace
            .batches()
            .iter()
            .filter(|b| PartialOrder::less_equal(&b.desc.lower, as_of))
            .cloned()
            .collect())
    }

    /// The batch with `lower <= frontier < upper`, if the shard has one yet.
    pub fn next_listen_batch(&self, frontier: &Antichain<Timestamp>) -> Option<Rc<HollowBatch>> {
        self.trace
            .batches()
            .iter()
            .find(|b| {
                PartialOrder::less_equal(&b.desc.lower, frontier)
                    && PartialOrder::less_than(frontier, &b.desc.upper)
            })
            .cloned()
    }
}

/// A heartbeat: moves a registered handle's last heartbeat up to `now_ms`; on a tombstone it is
/// a no-op that succeeds; `Break` if the handle is not registered.
fn heartbeat(tombstone: bool, last_ms: Option<&mut u64>, now_ms: u64) -> ControlFlow<(), ()> {
    match (tombstone, last_ms) {
        (true, _) => Continue(()),
        (false, Some(last)) => {
            *last = (*last).max(now_ms);
            Continue(())
        }
        (false, None) => Break(()),
    }
}

#[cfg(test)]
mod tests;
