//! An upsert replica without the feedback edge: it learns its state from its own output.
//!
//! The real replica ([`crate::upsert::driver::start_replica`]) feeds its operator's persist input
//! from a persist source on the output shard: the shard's contents at its resume upper, then
//! every batch any replica writes. This variant builds the same [`Replica`] but feeds that input
//! itself, from its own writes:
//! - at start, nothing below the resume upper (it believes the shard is empty there);
//! - after a commit, the updates it wrote and the new upper;
//! - after an UpperMismatch, the updates it tried to write below the shard's new upper, as if
//!   they had landed, and that upper (without the upper its stash would wait forever).
//!
//! So a replica that starts over a non-empty shard inserts new values without retracting the
//! old ones, and a peer's writes never reach its state.

use std::cell::RefCell;
use std::rc::Rc;

use futures::channel::mpsc::{self, UnboundedSender};
use timely::progress::Antichain;

use crate::persist::codec::Timestamp;
use crate::persist::write::WriteHandle;
use crate::persist::{PersistClient, ShardId};
use crate::runtime::{JoinHandle, Runtime};
use crate::upsert::driver;
use crate::upsert::error::ReplicaStartError;
use crate::upsert::observe::UpsertLog;
use crate::upsert::persist_source::FeedbackEvent;
use crate::upsert::replica::{Replica, ReplicaConfig};
use crate::upsert::sink::{append, SinkWrite};
use crate::upsert::source::SourceLog;
use crate::upsert::types::SourceData;

/// A started replica fed by its own output; dropping it aborts its driver.
pub struct OwnFeedbackReplica {
    /// Its sink's persist writer id.
    pub writer_id: String,
    /// The replica, for snapshots and manual steps.
    pub replica: Rc<RefCell<Replica>>,
    _driver: JoinHandle<()>,
}

/// Starts a replica of `shard` over `source` that learns from its own output. See the module
/// docs.
pub async fn start_own_feedback(
    client: PersistClient,
    shard: ShardId,
    source: Rc<RefCell<SourceLog>>,
    cfg: ReplicaConfig,
    generation: u64,
    log: UpsertLog<Timestamp>,
) -> Result<OwnFeedbackReplica, ReplicaStartError> {
    let runtime = client.runtime().clone();
    let mut write = client.open_writer::<SourceData, ()>(&shard).await?;
    let writer_id = write.writer_id().0.clone();
    let resume_upper = write.fetch_recent_upper().await?.clone();
    let (tx, rx) = mpsc::unbounded();
    // The broken rule: no snapshot of the shard, just "nothing before the resume upper".
    let _ = tx.unbounded_send(FeedbackEvent::Progress(resume_upper.clone()));
    let name = format!("{}#{generation}/own-feedback driver", cfg.name);
    let replica = Rc::new(RefCell::new(Replica::new(
        cfg,
        generation,
        resume_upper,
        &source.borrow(),
        rx,
        None,
        log,
        Some(runtime.clone()),
    )));
    let driver = runtime.spawn(
        &name,
        drive(Rc::clone(&replica), write, source, runtime.clone(), tx),
    );
    Ok(OwnFeedbackReplica {
        writer_id,
        replica,
        _driver: driver,
    })
}

/// Sends `write`'s updates below `upper` and then `upper` as the replica's feedback.
fn feed_own(tx: &UnboundedSender<FeedbackEvent>, write: &SinkWrite, upper: &Antichain<Timestamp>) {
    let updates = write
        .updates
        .iter()
        .filter(|(_, t, _)| !upper.less_equal(t))
        .map(|((data, ()), t, d)| (data.0.clone(), *t, *d))
        .collect();
    let _ = tx.unbounded_send(FeedbackEvent::Updates(updates));
    let _ = tx.unbounded_send(FeedbackEvent::Progress(upper.clone()));
}

/// The driver loop of [`crate::upsert::driver`], with the feedback taken from the writes.
async fn drive(
    replica: Rc<RefCell<Replica>>,
    mut write: WriteHandle<SourceData, ()>,
    source: Rc<RefCell<SourceLog>>,
    runtime: Runtime,
    tx: UnboundedSender<FeedbackEvent>,
) {
    let (tick_ms, caa_timeout_ms) = {
        let r = replica.borrow();
        (r.config().tick_ms, r.config().caa_timeout_ms)
    };
    let mut backoff = driver::sink_backoff();
    loop {
        let w = match driver::turn(&replica, &source) {
            driver::Turn::Halted(_) => return,
            driver::Turn::Idle => {
                runtime.sleep(tick_ms).await;
                continue;
            }
            driver::Turn::Write(w) => w,
        };
        let result = match runtime
            .timeout(caa_timeout_ms, append(&mut write, &w))
            .await
        {
            Ok(result) => result,
            Err(_) => {
                let rt = &runtime;
                driver::sink_timed_out(&replica, &w, caa_timeout_ms, &mut backoff, rt).await;
                continue;
            }
        };
        backoff.reset();
        let mut r = replica.borrow_mut();
        match result {
            Ok(Ok(())) => {
                r.write_committed(&w);
                feed_own(&tx, &w, &w.upper);
            }
            Ok(Err(mismatch)) => {
                r.write_mismatch(&w, &mismatch.current);
                feed_own(&tx, &w, &mismatch.current);
            }
            Err(e) => return r.halt(format!("persist sink: {e}")),
        }
    }
}
