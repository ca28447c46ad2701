//! [`SinceHandle`]: a critical reader. It holds back the shard's since like a leased reader but
//! has no lease (it never expires on its own) and holds no seqno. Its since moves only through
//! [`SinceHandle::compare_and_downgrade_since`], fenced by an opaque token: of several processes
//! racing with the same expected token, exactly one wins, and the others learn the token that won.

use std::marker::PhantomData;
use std::ops::ControlFlow::{Break, Continue};

use timely::progress::Antichain;

use super::codec::{Codec, Timestamp};
use super::error::{InvalidUsage, PersistError};
use super::machine::Machine;
use super::state::CriticalReaderId;
use super::ShardId;

/// A critical reader. See the module docs.
pub struct SinceHandle<K: Codec, V: Codec> {
    machine: Machine,
    reader_id: CriticalReaderId,
    since: Antichain<Timestamp>,
    opaque: u64,
    _codecs: PhantomData<(K, V)>,
}

impl<K: Codec, V: Codec> SinceHandle<K, V> {
    pub(crate) fn new(
        machine: Machine,
        reader_id: CriticalReaderId,
        since: Antichain<Timestamp>,
        opaque: u64,
    ) -> Self {
        SinceHandle {
            machine,
            reader_id,
            since,
            opaque,
            _codecs: PhantomData,
        }
    }

    /// The shard.
    pub fn shard_id(&self) -> &ShardId {
        &self.machine.shard_id
    }

    /// The reader's id (chosen by the caller, stable across restarts).
    pub fn reader_id(&self) -> &CriticalReaderId {
        &self.reader_id
    }

    /// The since this handle last saw.
    pub fn since(&self) -> &Antichain<Timestamp> {
        &self.since
    }

    /// The opaque token this handle last saw.
    pub fn opaque(&self) -> u64 {
        self.opaque
    }

    /// Moves the since to `new_since` and the token to `new_opaque` iff the stored token is
    /// `expected_opaque`. `Ok(since)`: the since now (a `new_since` behind it changes nothing).
    /// `Err(stored)`: fenced; the stored token is returned (and remembered by this handle).
    pub async fn compare_and_downgrade_since(
        &mut self,
        expected_opaque: u64,
        (new_opaque, new_since): (u64, &Antichain<Timestamp>),
    ) -> Result<Result<Antichain<Timestamp>, u64>, PersistError> {
        let id = self.reader_id.clone();
        let (_, r) = self
            .machine
            .apply_idempotent("compare_and_downgrade_since", |_, _, c| {
                c.compare_and_downgrade_since(&id, expected_opaque, new_opaque, new_since)
            })
            .await?;
        match r {
            Continue(Ok(since)) => {
                self.since = since.clone();
                self.opaque = new_opaque;
                Ok(Ok(since))
            }
            Continue(Err((stored, since))) => {
                self.since = since;
                self.opaque = stored;
                Ok(Err(stored))
            }
            Break(_) => Err(InvalidUsage::Expired {
                what: "critical reader",
                id: self.reader_id.0.clone(),
            }
            .into()),
        }
    }

    /// Removes this critical reader, releasing its hold on the since.
    pub async fn expire(self) {
        let id = self.reader_id.clone();
        let _ = self
            .machine
            .apply_idempotent("expire_critical_reader", |_, _, c| {
                c.expire_critical_reader(&id)
            })
            .await;
    }
}
