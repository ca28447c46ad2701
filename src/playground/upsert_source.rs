//! The upsert source, made durable: every upsert is a row of the `upsert_src` shard, and each
//! page rebuilds its [`SourceLog`] from that shard. So the source survives a reload (the replicas
//! go on from where the output shard is, over the same messages), and two tabs on one database
//! share one source (two producers to one topic), each folding the same rows in the same order.
//!
//! A row is `[ts, key, kind, value...]`: `kind` 0 is a delete, 1 a value (the value row's datums
//! follow), 2 an error for the key (its message follows). The time is written into the row, so
//! compaction (which advances times to the since) cannot change a message's time; rows are folded
//! in `(ts, row)` order, so every page assigns the same offsets. The source lives on the raw
//! location: it is the outside world, not subject to persist's fault knobs or process crashes.

use std::cell::RefCell;
use std::rc::Rc;

use timely::progress::Antichain;

use crate::persist::codec::{Datum, Row, Timestamp};
use crate::persist::error::PersistError;
use crate::persist::events::frontier;
use crate::persist::read::ListenEvent;
use crate::persist::{PersistClient, ShardId};
use crate::upsert::error::SourceSealed;
use crate::upsert::source::SourceLog;
use crate::upsert::types::{UpsertError, UpsertValue};

/// The shard holding the source's messages.
pub const SOURCE_SHARD: &str = "upsert_src";

/// Upserts waiting to be written to the source shard.
pub type SourceQueue = Rc<RefCell<Vec<(i64, Option<UpsertValue>)>>>;

/// The row of one message.
pub fn encode(key: i64, value: &Option<UpsertValue>, ts: Timestamp) -> Row {
    let ts = i64::try_from(ts).unwrap_or(i64::MAX);
    let mut datums = vec![Datum::Int(ts), Datum::Int(key)];
    match value {
        None => datums.push(Datum::Int(0)),
        Some(Ok(row)) => {
            datums.push(Datum::Int(1));
            datums.extend(row.0.iter().cloned());
        }
        Some(Err(UpsertError::Value { message, .. })) => {
            datums.push(Datum::Int(2));
            datums.push(Datum::String(message.clone()));
        }
    }
    Row(datums)
}

/// A message back from its row, or `None` for a row that is not one.
pub fn decode(row: &Row) -> Option<(Timestamp, i64, Option<UpsertValue>)> {
    let (Datum::Int(ts), Datum::Int(key), Datum::Int(kind)) =
        (row.0.first()?, row.0.get(1)?, row.0.get(2)?)
    else {
        return None;
    };
    let ts = u64::try_from(*ts).ok()?;
    let value = match kind {
        0 => None,
        1 => Some(Ok(Row(row.0[3..].to_vec()))),
        2 => match row.0.get(3)? {
            Datum::String(message) => Some(Err(UpsertError::Value {
                for_key: Row::new([Datum::Int(*key)]),
                message: message.clone(),
            })),
            _ => return None,
        },
        _ => return None,
    };
    Some((ts, *key, value))
}

/// Why the source's writer or reader stopped.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SourceError {
    /// The source shard holds a row that does not decode as an upsert (the row, as text).
    #[error("the source shard holds a row that is not an upsert: {0}")]
    NotAnUpsert(String),
    /// The local log refused a message (it is behind the log's upper).
    #[error(transparent)]
    Sealed(#[from] SourceSealed),
    /// The source shard's upper is empty: nothing more can be written.
    #[error("the source shard is finished")]
    Finished,
    /// persist failed.
    #[error("{0}")]
    Persist(#[from] PersistError),
}

/// Appends rows to the local log in `(ts, row)` order, each as often as its diff says.
fn fold(log: &RefCell<SourceLog>, mut rows: Vec<(Row, i64)>) -> Result<(), SourceError> {
    crate::sort::sort(&mut rows);
    let mut decoded: Vec<(Timestamp, Row, i64)> = Vec::new();
    for (row, diff) in rows {
        let Some((ts, _, _)) = decode(&row) else {
            return Err(SourceError::NotAnUpsert(row.to_string()));
        };
        decoded.push((ts, row, diff));
    }
    crate::sort::sort(&mut decoded);
    let mut log = log.borrow_mut();
    for (_, row, diff) in decoded {
        let Some((ts, key, value)) = decode(&row) else {
            continue;
        };
        for _ in 0..diff.max(0) {
            log.push(key, value.clone(), ts)?;
        }
    }
    Ok(())
}

/// Writes whatever is queued to the source shard, one batch at a time, at the writer's upper.
pub async fn run_source_writer(
    client: PersistClient,
    queue: SourceQueue,
) -> Result<(), SourceError> {
    let shard = ShardId(SOURCE_SHARD.to_string());
    let mut write = client.open_writer::<Row, ()>(&shard).await?;
    let rt = client.runtime().clone();
    loop {
        let batch = queue.borrow().clone();
        if batch.is_empty() {
            rt.sleep(10).await;
            continue;
        }
        let Some(lo) = frontier(write.upper()) else {
            return Err(SourceError::Finished);
        };
        let ts = rt.now_ms().max(lo);
        let updates: Vec<((Row, ()), Timestamp, i64)> = batch
            .iter()
            .map(|(k, v)| ((encode(*k, v, ts), ()), ts, 1))
            .collect();
        let (lower, upper) = (Antichain::from_elem(lo), Antichain::from_elem(ts + 1));
        match write.compare_and_append(&updates, lower, upper).await {
            Ok(Ok(())) => {
                queue.borrow_mut().drain(..batch.len());
            }
            // Another tab wrote first: the handle knows the new upper; go again.
            Ok(Err(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Folds the source shard into `log`: its contents first, then every batch as it comes, sealing
/// the log at the shard's upper.
pub async fn run_source_reader(
    client: PersistClient,
    log: Rc<RefCell<SourceLog>>,
) -> Result<(), SourceError> {
    let shard = ShardId(SOURCE_SHARD.to_string());
    let read = client.open_leased_reader::<Row, ()>(&shard).await?;
    let as_of = read.since().clone();
    let (snapshot, mut listen) = read.subscribe(as_of.clone()).await?;
    fold(
        &log,
        snapshot.into_iter().map(|((r, ()), _, d)| (r, d)).collect(),
    )?;
    if let Some(t) = frontier(&as_of) {
        log.borrow_mut().seal(t + 1);
    }
    loop {
        for event in listen.next().await? {
            match event {
                ListenEvent::Updates(u) => {
                    fold(&log, u.into_iter().map(|((r, ()), _, d)| (r, d)).collect())?
                }
                ListenEvent::Progress(p) => {
                    if let Some(t) = frontier(&p) {
                        log.borrow_mut().seal(t);
                    }
                }
            }
        }
    }
}
