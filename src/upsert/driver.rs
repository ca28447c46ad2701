//! Runs a [`Replica`] on the runtime: its worker, sink and persist source driven together.
//!
//! [`start_replica`] opens a writer on the shard, takes the shard's current upper as the resume
//! upper, spawns the persist source (snapshot at `resume_upper - 1`, then listen) and the driver
//! loop, and returns a [`RunningReplica`]. The loop:
//!
//! ```text
//! loop {
//!     step the replica: feedback -> persist input, source -> source input, worker.step() until
//!                       quiet, output -> sink
//!     if the sink has a complete range: compare_and_append it (bounded by caa_timeout_ms)
//!         committed -> the sink moves on;  UpperMismatch -> drop what lies below the new upper
//!         timed out -> back off (crate::retry::Backoff) and offer the same range again: a
//!                      timeout can heal; if the write landed, the retry loses with an
//!                      UpperMismatch and the sink drops what it wrote
//!         permanent error -> the replica halts (nothing more is written)
//!     else sleep tick_ms
//! }
//! ```
//!
//! Dropping a [`RunningReplica`] is a crash: both tasks are aborted, the replica is gone, and a
//! new one restarts from whatever upper the shard then has. [`RunningReplica::stop`] is the clean
//! way out: the driver finishes the compare_and_append in flight, expires its writer and ends
//! with [`ReplicaExit::Stopped`]; the persist source leaves its pending listen step and expires
//! its reader's lease.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures::channel::{mpsc, oneshot};
use serde::Serialize;

use super::error::ReplicaStartError;
use super::observe::UpsertLog;
use super::operator::ShutdownButton;
use super::persist_source::run_persist_source;
use super::replica::{Replica, ReplicaConfig};
use super::sink::{append, SinkWrite};
use super::source::SourceLog;
use super::types::SourceData;
use crate::persist::codec::Timestamp;
use crate::persist::write::WriteHandle;
use crate::persist::{PersistClient, ShardId};
use crate::retry::Backoff;
use crate::runtime::{JoinHandle, Runtime};

/// How a driver loop ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum ReplicaExit {
    /// The replica halted (an operator health error or a persist error).
    Halted(String),
    /// [`RunningReplica::stop`] asked it to stop; its writer's and reader's leases are expired.
    Stopped,
}

/// A started replica: the shared [`Replica`] and its two tasks. Dropping it aborts both.
pub struct RunningReplica {
    /// Its sink's persist writer id (the playground names it by the replica's actor id).
    pub writer_id: String,
    /// The replica, for snapshots and checks (borrow it only between runtime steps).
    pub replica: Rc<RefCell<Replica>>,
    driver: JoinHandle<ReplicaExit>,
    _persist_source: JoinHandle<()>,
    stop: Rc<Cell<bool>>,
    stop_source: oneshot::Sender<()>,
}

impl RunningReplica {
    /// Waits for the driver loop to end.
    pub async fn join(self) -> ReplicaExit {
        let RunningReplica {
            driver,
            _persist_source,
            ..
        } = self;
        driver.await
    }

    /// Stops it cleanly: the driver ends after the compare_and_append in flight (if any) and
    /// expires its writer, then the persist source ends its listen and expires its reader.
    /// Returns how the driver ended (a replica that had already halted says why).
    pub async fn stop(self) -> ReplicaExit {
        let RunningReplica {
            replica,
            driver,
            writer_id: _,
            _persist_source,
            stop,
            stop_source,
        } = self;
        stop.set(true);
        let exit = driver.await;
        let _ = stop_source.send(());
        _persist_source.await;
        drop(replica);
        exit
    }
}

/// Starts a replica of `shard` over `source`. See the module docs.
pub async fn start_replica(
    client: PersistClient,
    shard: ShardId,
    source: Rc<RefCell<SourceLog>>,
    cfg: ReplicaConfig,
    generation: u64,
    log: UpsertLog<Timestamp>,
) -> Result<RunningReplica, ReplicaStartError> {
    let runtime = client.runtime().clone();
    let mut write = client.open_writer::<SourceData, ()>(&shard).await?;
    let writer_id = write.writer_id().0.clone();
    let resume_upper = write.fetch_recent_upper().await?.clone();
    let (tx, rx) = mpsc::unbounded();
    let (button, token) = ShutdownButton::new();
    let (stop_source, stop_source_rx) = oneshot::channel();
    let name = format!("{}#{generation}", cfg.name);
    let persist_source = runtime.spawn(
        &format!("{name}/persist_source"),
        run_persist_source(
            client.clone(),
            shard,
            resume_upper.clone(),
            tx,
            token,
            stop_source_rx,
        ),
    );
    let replica = Rc::new(RefCell::new(Replica::new(
        cfg,
        generation,
        resume_upper,
        &source.borrow(),
        rx,
        Some(button),
        log,
        Some(runtime.clone()),
    )));
    let stop = Rc::new(Cell::new(false));
    let driver = runtime.spawn(
        &format!("{name}/driver"),
        drive(
            Rc::clone(&replica),
            write,
            source,
            runtime.clone(),
            Rc::clone(&stop),
        ),
    );
    Ok(RunningReplica {
        writer_id,
        replica,
        driver,
        _persist_source: persist_source,
        stop,
        stop_source,
    })
}

async fn drive(
    replica: Rc<RefCell<Replica>>,
    mut write: WriteHandle<SourceData, ()>,
    source: Rc<RefCell<SourceLog>>,
    runtime: Runtime,
    stop: Rc<Cell<bool>>,
) -> ReplicaExit {
    let (tick_ms, caa_timeout_ms) = {
        let r = replica.borrow();
        (r.config().tick_ms, r.config().caa_timeout_ms)
    };
    let mut backoff = sink_backoff();
    loop {
        if stop.get() {
            write.expire().await;
            return ReplicaExit::Stopped;
        }
        let w = match turn(&replica, &source) {
            Turn::Halted(e) => return ReplicaExit::Halted(e),
            Turn::Idle => {
                runtime.sleep(tick_ms).await;
                continue;
            }
            Turn::Write(w) => w,
        };
        match runtime
            .timeout(caa_timeout_ms, append(&mut write, &w))
            .await
        {
            Ok(Ok(Ok(()))) => {
                backoff.reset();
                replica.borrow_mut().write_committed(&w)
            }
            Ok(Ok(Err(mismatch))) => {
                backoff.reset();
                replica.borrow_mut().write_mismatch(&w, &mismatch.current)
            }
            Ok(Err(e)) => {
                let reason = format!("persist sink: {e}");
                replica.borrow_mut().halt(reason.clone());
                return ReplicaExit::Halted(reason);
            }
            Err(_) => sink_timed_out(&replica, &w, caa_timeout_ms, &mut backoff, &runtime).await,
        }
    }
}

/// What one turn of a replica's driver found to do.
pub(crate) enum Turn {
    /// The replica stopped on this error.
    Halted(String),
    /// Nothing to write now: wait a tick.
    Idle,
    /// A range to `compare_and_append`.
    Write(SinkWrite),
}

/// One turn of a replica's driver, with no await in it (SUBTLE: so no borrow of the replica or
/// the source is held across one): steps the replica if its turn says so, then takes the write
/// its sink offers.
pub(crate) fn turn(replica: &RefCell<Replica>, source: &RefCell<SourceLog>) -> Turn {
    let mut r = replica.borrow_mut();
    if let Some(e) = r.halted() {
        return Turn::Halted(e);
    }
    let (step, write) = r.driver_turn();
    if step {
        r.step(&source.borrow());
    }
    match write.then(|| r.next_write()).flatten() {
        Some(w) => Turn::Write(w),
        None => Turn::Idle,
    }
}

/// The back-off of a sink whose write timed out: 50 ms doubling to 1 s, so a replica is
/// writing again within about a second of the fault ending.
pub(crate) fn sink_backoff() -> Backoff {
    Backoff::new(50, 1_000)
}

/// A sink write timed out: records it and waits the back-off. The sink keeps the range, so the
/// driver's next turn offers it again (see the module docs).
pub(crate) async fn sink_timed_out(
    replica: &RefCell<Replica>,
    w: &SinkWrite,
    after_ms: u64,
    backoff: &mut Backoff,
    runtime: &Runtime,
) {
    let attempts = backoff.attempts() + 1;
    replica
        .borrow_mut()
        .write_timed_out(w, after_ms, backoff.peek_ms(), attempts);
    backoff.wait(runtime).await;
}
