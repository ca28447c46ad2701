//! [`ReadHandle`]: the capability to read a shard at times at or beyond its since.
//!
//! - [`ReadHandle::snapshot_and_fetch`]`(as_of)`: the collection accumulated to `as_of`, with
//!   times advanced to `as_of` and consolidated. An `as_of` before the since is an error; at or
//!   beyond the upper it waits until the upper passes it, as the original does.
//! - [`ReadHandle::listen`]`(as_of)`: every update at a time beyond `as_of`, batch by batch,
//!   each followed by `Progress(upper)`; updates a compacted batch would re-deliver are filtered
//!   out (only times at or beyond the listen's frontier pass).
//! - [`ReadHandle::downgrade_since`] lets compaction advance; the reader's lease is kept alive by
//!   downgrades and [`ReadHandle::heartbeat`], and runs out on the runtime's clock otherwise, after
//!   which every call answers `InvalidUsage::Expired` (the original panics).
//!
//! A reader also holds a seqno: GC keeps every blob that a state version at or after the hold
//! references, so parts it is still fetching cannot disappear.

use std::marker::PhantomData;
use std::ops::ControlFlow::{Break, Continue};
use std::rc::Rc;

use differential_dataflow::lattice::Lattice;
use timely::progress::Antichain;
use timely::PartialOrder;

use super::codec::{Codec, CodecError, Diff, Timestamp};
use super::encoding::decode_part;
use super::error::{BrokenAt, InvalidUsage, PermanentKind, PersistError};
use super::machine::Machine;
use super::state::{BatchPart, HollowBatch, LeasedReaderId, SchemaId, SnapshotErr};
use super::{PersistClient, ShardId};
use crate::location::SeqNo;
use crate::vec_map::VecMap;

/// One update, decoded.
pub type Update<K, V> = ((K, V), Timestamp, Diff);

/// What a [`Listen`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenEvent<K, V> {
    /// Updates at times in the last interval (unordered, not consolidated).
    Updates(Vec<Update<K, V>>),
    /// Every update before this frontier has been delivered.
    Progress(Antichain<Timestamp>),
}

/// A leased reader. See the module docs.
///
/// Only decoding the updates depends on `K` and `V`; everything else is in `Reader`, compiled
/// once rather than once per key and value type.
pub struct ReadHandle<K: Codec, V: Codec> {
    r: Reader,
    _codecs: PhantomData<(K, V)>,
}

/// The state and the work of a [`ReadHandle`], without its key and value types.
struct Reader {
    client: PersistClient,
    machine: Machine,
    reader_id: LeasedReaderId,
    schema_id: SchemaId,
    since: Antichain<Timestamp>,
    /// Seqnos whose batches are being fetched, with counts: the hold may not pass them.
    leased_seqnos: VecMap<SeqNo, usize>,
    expired: bool,
}

impl<K: Codec, V: Codec> ReadHandle<K, V> {
    pub(crate) fn new(
        client: PersistClient,
        machine: Machine,
        reader_id: LeasedReaderId,
        schema_id: SchemaId,
        since: Antichain<Timestamp>,
    ) -> Self {
        ReadHandle {
            r: Reader {
                client,
                machine,
                reader_id,
                schema_id,
                since,
                leased_seqnos: VecMap::new(),
                expired: false,
            },
            _codecs: PhantomData,
        }
    }

    pub(crate) fn client(&self) -> &PersistClient {
        &self.r.client
    }

    /// The shard.
    pub fn shard_id(&self) -> &ShardId {
        &self.r.machine.shard_id
    }

    /// The reader's id.
    pub fn reader_id(&self) -> &LeasedReaderId {
        &self.r.reader_id
    }

    /// The schema this reader registered.
    pub fn schema_id(&self) -> SchemaId {
        self.r.schema_id
    }

    /// This reader's since: it may read at any time at or beyond it.
    pub fn since(&self) -> &Antichain<Timestamp> {
        &self.r.since
    }

    /// Moves this reader's since forward to `new_since` (a since behind the current one changes
    /// nothing) and heartbeats its lease. The shard's since becomes the meet of all readers'.
    pub async fn downgrade_since(
        &mut self,
        new_since: &Antichain<Timestamp>,
    ) -> Result<(), PersistError> {
        self.r.downgrade_since(new_since).await
    }

    /// Keeps this reader's lease alive.
    pub async fn heartbeat(&mut self) -> Result<(), PersistError> {
        self.r.heartbeat().await
    }

    /// The contents at `as_of`: every update at a time `<= as_of`, its time advanced to `as_of`,
    /// consolidated. See the module docs for when it errs or waits.
    pub async fn snapshot_and_fetch(
        &mut self,
        as_of: Antichain<Timestamp>,
    ) -> Result<Vec<Update<K, V>>, PersistError> {
        let mut out = Vec::new();
        self.r
            .snapshot_and_fetch(&as_of, &mut |k, v, t, d| {
                out.push(((K::decode(k)?, V::decode(v)?), t, d));
                Ok(())
            })
            .await?;
        // Every update at a time not beyond `as_of`, its time advanced to `as_of` (differential's
        // `advance_by`: the least time at or beyond `as_of` that accumulates the same).
        let mut updates: Vec<Update<K, V>> = out
            .into_iter()
            .filter(|(_, t, _)| !as_of.less_than(t))
            .map(|(kv, mut t, d)| {
                t.advance_by(as_of.borrow());
                (kv, t, d)
            })
            .collect();
        super::consolidate::consolidate_checked(&mut updates)?;
        Ok(updates)
    }

    /// A listen over every update at a time beyond `as_of`. The handle moves into the listen,
    /// which downgrades its since as it goes.
    pub async fn listen(
        mut self,
        as_of: Antichain<Timestamp>,
    ) -> Result<Listen<K, V>, PersistError> {
        self.r.start_listen(&as_of).await?;
        Ok(Listen {
            frontier: as_of.clone(),
            as_of,
            handle: self,
        })
    }

    /// A snapshot at `as_of`, then a listen from `as_of`.
    pub async fn subscribe(
        mut self,
        as_of: Antichain<Timestamp>,
    ) -> Result<(Vec<Update<K, V>>, Listen<K, V>), PersistError> {
        let snapshot = self.snapshot_and_fetch(as_of.clone()).await?;
        let listen = self.listen(as_of).await?;
        Ok((snapshot, listen))
    }

    /// Removes this reader, releasing its hold on the since.
    pub async fn expire(mut self) {
        self.r.expire().await;
    }

    /// Drops the handle without expiring it, as a crashed process would: its lease runs out later.
    pub fn abandon(mut self) {
        self.r.expired = true;
    }
}

/// Decodes one update's key and value and keeps the update (the generic part of a read).
type Decode<'a> = dyn FnMut(&[u8], &[u8], Timestamp, Diff) -> Result<(), CodecError> + 'a;

impl Reader {
    fn check_live(&self) -> Result<(), InvalidUsage> {
        if self.expired {
            return Err(InvalidUsage::Expired {
                what: "reader",
                id: self.reader_id.0.clone(),
            });
        }
        Ok(())
    }

    fn outstanding_seqno(&self) -> SeqNo {
        self.leased_seqnos
            .keys()
            .next()
            .copied()
            .unwrap_or_else(|| self.machine.seqno())
    }

    async fn downgrade_since(
        &mut self,
        new_since: &Antichain<Timestamp>,
    ) -> Result<(), PersistError> {
        self.check_live()?;
        let (id, outstanding) = (self.reader_id.clone(), self.outstanding_seqno());
        let (_, r) = self
            .machine
            .apply_idempotent("downgrade_since", |_, now, c| {
                c.downgrade_since(&id, outstanding, new_since, now)
            })
            .await?;
        match r {
            Continue(since) => {
                self.since = since;
                Ok(())
            }
            Break(_) => {
                self.expired = true;
                Ok(self.check_live()?)
            }
        }
    }

    async fn heartbeat(&mut self) -> Result<(), PersistError> {
        self.check_live()?;
        let id = self.reader_id.clone();
        let (_, r) = self
            .machine
            .apply_idempotent("heartbeat_leased_reader", |_, now, c| {
                c.heartbeat_leased_reader(&id, now)
            })
            .await?;
        if r.is_break() {
            self.expired = true;
        }
        Ok(self.check_live()?)
    }

    /// The batches a snapshot at `as_of` needs, waiting until the upper passes `as_of`.
    async fn snapshot_batches(
        &mut self,
        as_of: &Antichain<Timestamp>,
    ) -> Result<(SeqNo, Vec<Rc<HollowBatch>>), PersistError> {
        self.check_live()?;
        if as_of.is_empty() {
            // Nothing is ever complete through the empty frontier.
            return Err(InvalidUsage::InvalidBounds {
                lower: as_of.clone(),
                upper: self.machine.upper(),
            }
            .into());
        }
        if !PartialOrder::less_equal(&self.since, as_of) {
            return Err(InvalidUsage::SinceViolation {
                as_of: as_of.clone(),
                since: self.since.clone(),
            }
            .into());
        }
        let mut backoff = self.client.cfg().backoff();
        loop {
            let state = self.machine.state();
            if !state
                .collections
                .leased_readers
                .contains_key(&self.reader_id)
                && state.seqno > SeqNo(0)
            {
                self.expired = true;
                self.check_live()?;
            }
            match state.collections.snapshot(state.seqno, as_of) {
                Ok(batches) => return Ok((state.seqno, batches)),
                Err(SnapshotErr::AsOfHistoricalDistinctionsLost(since)) => {
                    return Err(InvalidUsage::SinceViolation {
                        as_of: as_of.clone(),
                        since,
                    }
                    .into())
                }
                Err(SnapshotErr::AsOfNotYetAvailable(..)) => {
                    backoff.wait(self.client.runtime()).await;
                    self.machine.fetch_and_update_state_retrying().await?;
                }
            }
        }
    }

    /// Hands every update a snapshot at `as_of` needs to `decode` (times not yet advanced).
    async fn snapshot_and_fetch(
        &mut self,
        as_of: &Antichain<Timestamp>,
        decode: &mut Decode<'_>,
    ) -> Result<(), PersistError> {
        let (seqno, batches) = self.snapshot_batches(as_of).await?;
        *self.leased_seqnos.get_or_insert_with(seqno, || 0) += 1;
        let mut result = Ok(());
        for batch in &batches {
            if let Err(e) = fetch_batch(&self.machine, batch, decode).await {
                result = Err(e);
                break;
            }
        }
        release(&mut self.leased_seqnos, seqno);
        result
    }

    /// Checks that a listen may start at `as_of`, and holds the since there.
    async fn start_listen(&mut self, as_of: &Antichain<Timestamp>) -> Result<(), PersistError> {
        self.check_live()?;
        let since = self.machine.state().since().clone();
        if !PartialOrder::less_equal(&since, as_of) || !PartialOrder::less_equal(&self.since, as_of)
        {
            return Err(InvalidUsage::SinceViolation {
                as_of: as_of.clone(),
                since: self.since.clone(),
            }
            .into());
        }
        self.downgrade_since(as_of).await
    }

    /// Waits for the batch that starts at `frontier`, then hands its updates to `decode`.
    async fn fetch_listen_batch(
        &mut self,
        frontier: &Antichain<Timestamp>,
        decode: &mut Decode<'_>,
    ) -> Result<Rc<HollowBatch>, PersistError> {
        let mut backoff = self.client.cfg().backoff();
        let (seqno, batch) = loop {
            let state = self.machine.state();
            if let Some(batch) = state.collections.next_listen_batch(frontier) {
                break (state.seqno, batch);
            }
            backoff.wait(self.client.runtime()).await;
            self.machine.fetch_and_update_state_retrying().await?;
        };
        *self.leased_seqnos.get_or_insert_with(seqno, || 0) += 1;
        let result = fetch_batch(&self.machine, &batch, decode).await;
        release(&mut self.leased_seqnos, seqno);
        result?;
        Ok(batch)
    }

    async fn expire(&mut self) {
        if self.expired {
            return;
        }
        self.expired = true;
        let id = self.reader_id.clone();
        let _ = self
            .machine
            .apply_idempotent("expire_leased_reader", |_, _, c| {
                c.expire_leased_reader(&id)
            })
            .await;
    }
}

impl Drop for Reader {
    /// Best-effort expiry: a detached task removes the reader; if it never runs, the lease runs out.
    fn drop(&mut self) {
        if self.expired {
            return;
        }
        let id = self.reader_id.clone();
        self.machine
            .spawn_idempotent("expire_leased_reader", move |_, _, c| {
                c.expire_leased_reader(&id)
            });
    }
}

fn release(leased: &mut VecMap<SeqNo, usize>, seqno: SeqNo) {
    if let Some(n) = leased.get_mut(&seqno) {
        *n -= 1;
        if *n == 0 {
            leased.remove(&seqno);
        }
    }
}

/// Fetches every update of `batch` inside its description's `[lower, upper)` (a batch may have
/// been truncated when it was appended) and hands each to `decode`. The reader's seqno hold keeps
/// every part of `batch` in Blob, so a part that is gone, or bytes that do not decode, are
/// permanent: the shard is marked broken.
async fn fetch_batch(
    machine: &Machine,
    batch: &HollowBatch,
    decode: &mut Decode<'_>,
) -> Result<(), PersistError> {
    let desc = &batch.desc;
    for part in &batch.parts {
        let (encoded, at) = match part {
            BatchPart::Inline { encoded } => (encoded.clone(), BrokenAt::Version(machine.seqno())),
            BatchPart::Hollow { key, .. } => {
                let blob = &machine.location.blob;
                let at = BrokenAt::BlobKey(key.clone());
                match machine.retrying(|| blob.get(key)).await? {
                    Some(bytes) => (bytes.to_vec(), at),
                    None => {
                        let err = machine.permanent(
                            at,
                            PermanentKind::Missing,
                            "a batch part the state lists is gone from Blob",
                        );
                        return Err(machine.mark_broken(err).into());
                    }
                }
            }
        };
        let undecodable = |e: String| {
            machine.mark_broken(machine.permanent(at.clone(), PermanentKind::Undecodable, e))
        };
        let updates = decode_part(&encoded).map_err(|e| undecodable(e.to_string()))?;
        for ((k, v), t, d) in updates {
            if !desc.lower.less_equal(&t) || desc.upper.less_equal(&t) {
                continue;
            }
            decode(&k, &v, t, d).map_err(|e| undecodable(e.to_string()))?;
        }
    }
    Ok(())
}

/// An ongoing listen; see [`ReadHandle::listen`].
pub struct Listen<K: Codec, V: Codec> {
    handle: ReadHandle<K, V>,
    as_of: Antichain<Timestamp>,
    frontier: Antichain<Timestamp>,
}

impl<K: Codec, V: Codec> Listen<K, V> {
    /// Every update before this frontier has been delivered.
    pub fn frontier(&self) -> &Antichain<Timestamp> {
        &self.frontier
    }

    /// Waits for the next batch and returns its updates, then its progress. Once the shard is
    /// finished (the frontier is empty) it returns nothing.
    pub async fn next(&mut self) -> Result<Vec<ListenEvent<K, V>>, PersistError> {
        if self.frontier.is_empty() {
            return Ok(Vec::new());
        }
        let mut fetched = Vec::new();
        // Only times beyond as_of and at or beyond our frontier: a compacted batch may re-deliver
        // updates we already emitted. Checked before decoding: a listen that fell behind a merge
        // gets the merged batch, most of which it has already emitted.
        let (as_of, frontier) = (&self.as_of, &self.frontier);
        let batch = self
            .handle
            .r
            .fetch_listen_batch(frontier, &mut |k, v, t, d| {
                if frontier.less_equal(&t) && as_of.less_than(&t) {
                    fetched.push(((K::decode(k)?, V::decode(v)?), t, d));
                }
                Ok(())
            })
            .await?;
        let emitted_from = std::mem::replace(&mut self.frontier, batch.desc.upper.clone());
        let progress = self.frontier.clone();
        // SUBTLE: the since stays at the frontier we emitted from, strictly below the new one (as
        // in the original). A merge may advance emitted updates to the since; at the new
        // frontier they would pass the filter above and be delivered twice.
        self.handle.downgrade_since(&emitted_from).await?;
        let mut events = Vec::new();
        if !fetched.is_empty() {
            events.push(ListenEvent::Updates(fetched));
        }
        events.push(ListenEvent::Progress(progress));
        Ok(events)
    }

    /// Heartbeats the listen's reader without moving its since: a listen that is not being
    /// consumed (its since held) keeps its lease this way.
    pub async fn heartbeat(&mut self) -> Result<(), PersistError> {
        self.handle.heartbeat().await
    }

    /// Ends the listen, expiring its reader.
    pub async fn expire(self) {
        self.handle.expire().await;
    }
}
