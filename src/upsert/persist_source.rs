//! The persist source of one replica: the output shard read back, as the operator's feedback.
//!
//! It snapshots the shard at `resume_upper - 1`, or at the since if that has passed it
//! (consolidated: the state to rehydrate), then
//! listens from there, sending every batch's updates and then its upper. A shard whose upper is
//! 0 has nothing before it: the source then waits for the first write and snapshots at 0 (with
//! times advanced to 0, which is exact for data at 0), then listens past 0.
//!
//! Events go over an unbounded channel the replica drains when it steps ([`FeedbackEvent`]).
//! The task ends when the channel's receiver is gone, when its [`ShutdownToken`] is pressed, when
//! `stop` fires (at once, even inside a pending listen step; the reader's lease is expired), or
//! on a persist error, which it sends as [`FeedbackEvent::Error`] (the replica then halts).

use futures::channel::mpsc::UnboundedSender;
use futures::channel::oneshot;
use timely::progress::Antichain;

use super::operator::ShutdownToken;
use super::types::SourceData;
use super::worker::OutputUpdate;
use crate::persist::codec::Timestamp;
use crate::persist::error::PersistError;
use crate::persist::read::ListenEvent;
use crate::persist::{PersistClient, ShardId};

/// What the persist source sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedbackEvent {
    /// Updates of the shard.
    Updates(Vec<OutputUpdate>),
    /// Every update before this upper has been sent.
    Progress(Antichain<Timestamp>),
    /// Reading failed; nothing more will come.
    Error(PersistError),
}

fn unwrap_update(((data, ()), t, d): ((SourceData, ()), Timestamp, i64)) -> OutputUpdate {
    (data.0, t, d)
}

/// Reads `shard` from `resume_upper` into `tx`. See the module docs.
pub async fn run_persist_source(
    client: PersistClient,
    shard: ShardId,
    resume_upper: Antichain<Timestamp>,
    tx: UnboundedSender<FeedbackEvent>,
    token: ShutdownToken,
    mut stop: oneshot::Receiver<()>,
) {
    let result: Result<(), PersistError> = async {
        let read = client.open_leased_reader::<SourceData, ()>(&shard).await?;
        let Some(&resume) = resume_upper.elements().first() else {
            // A finished shard: nothing will ever come after it.
            return Ok(());
        };
        // A peer's reader may have let the since pass `resume - 1` (a restarted replica whose
        // old lease expired): the read is then at the since, which accumulates the same updates
        // and more; the sink drops what the shard already holds beyond its upper.
        let since = read.since().as_option().copied().unwrap_or(0);
        let as_of = resume.saturating_sub(1).max(since);
        let (snapshot, mut listen) = read.subscribe(Antichain::from_elem(as_of)).await?;
        let snapshot = snapshot.into_iter().map(unwrap_update).collect();
        if tx.unbounded_send(FeedbackEvent::Updates(snapshot)).is_err()
            || tx
                .unbounded_send(FeedbackEvent::Progress(Antichain::from_elem(as_of + 1)))
                .is_err()
        {
            return Ok(());
        }
        loop {
            if token.is_pressed() {
                listen.expire().await;
                return Ok(());
            }
            // A stop request also ends a pending listen step (which may wait long for a write
            // that never comes). A stop sender dropped unused (a crash) is no request.
            let events = {
                let next = listen.next();
                let requested = async {
                    if (&mut stop).await.is_err() {
                        futures::future::pending::<()>().await;
                    }
                };
                futures::pin_mut!(next, requested);
                match futures::future::select(next, requested).await {
                    futures::future::Either::Left((r, _)) => Some(r?),
                    futures::future::Either::Right(_) => None,
                }
            };
            let Some(events) = events else {
                listen.expire().await;
                return Ok(());
            };
            for event in events {
                let event = match event {
                    ListenEvent::Updates(u) => {
                        FeedbackEvent::Updates(u.into_iter().map(unwrap_update).collect())
                    }
                    ListenEvent::Progress(p) => FeedbackEvent::Progress(p),
                };
                if tx.unbounded_send(event).is_err() {
                    return Ok(());
                }
            }
            if listen.frontier().is_empty() {
                return Ok(());
            }
        }
    }
    .await;
    if let Err(e) = result {
        let _ = tx.unbounded_send(FeedbackEvent::Error(e));
    }
}
