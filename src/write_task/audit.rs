//! Checks a write task's central claim against a shard's history: after every commit, the shard
//! equals the committing task's `desired`.
//!
//! Every [`WriteTaskEventKind::Committed`] event carries the commit's new upper and the
//! fingerprint of the task's `desired` at that moment. [`audit_commits`] reads the shard's whole
//! history once (a snapshot at the reader's since, then a listen, which delivers every update at
//! its exact time), replays it in time order and compares, at each commit's `new_upper - 1`, the
//! fingerprint of the accumulated contents with the event's. Several tasks may write the shard;
//! each commit is checked against its own task's `desired`.

use std::collections::BTreeMap;

use serde::Serialize;
use timely::progress::Antichain;

use super::events::{WriteTaskEvent, WriteTaskEventKind};
use super::ops::fingerprint;
use crate::persist::codec::{Diff, Row, Timestamp};
use crate::persist::error::PersistError;
use crate::persist::read::{ListenEvent, ReadHandle};

/// Why [`audit_commits`] could not check the commits (a commit that does not match is no error:
/// it is a line of [`AuditReport::failures`]).
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The reader's since is the empty frontier: nothing can be read.
    #[error("the reader's since is empty: nothing can be read")]
    EmptySince,
    /// The reader's since is not below the first commit's new upper: the history before it is
    /// compacted, so the contents after that commit cannot be told.
    #[error("the reader's since {since} is not below the commit at {commit} (task {task})")]
    SinceNotBelowCommit {
        /// The reader's since.
        since: Timestamp,
        /// The first commit's new upper.
        commit: Timestamp,
        /// Its task.
        task: String,
    },
    /// Persist failed while the audit read the shard.
    #[error("{step}: {source}")]
    Persist {
        /// The read: "open reader", "subscribe" or "listen".
        step: &'static str,
        /// What persist said.
        source: Box<PersistError>,
    },
    /// The listen took [`AUDIT_MAX_LISTEN_STEPS`] steps and had not reached the last commit.
    #[error("the listen did not reach the last commit (new upper {last_upper})")]
    ListenStalled {
        /// The last commit's new upper.
        last_upper: Timestamp,
    },
    /// A row's diffs sum beyond 64 bits.
    #[error("row {row} sums to {sum}, beyond 64 bits")]
    DiffOverflow {
        /// The row.
        row: String,
        /// Its sum.
        sum: i128,
    },
}

impl AuditError {
    /// Persist failed at `step`.
    pub fn persist(step: &'static str, e: PersistError) -> Self {
        AuditError::Persist {
            step,
            source: Box::new(e),
        }
    }
}

/// What [`audit_commits`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AuditReport {
    /// Commits checked.
    pub commits: u64,
    /// Of those, commits that carried updates.
    pub commits_with_data: u64,
    /// One line per commit after which the shard did not equal the task's `desired`.
    pub failures: Vec<String>,
}

/// The most listen steps an audit takes (one per batch), so a broken shard cannot loop it forever.
pub const AUDIT_MAX_LISTEN_STEPS: u64 = 10_000_000;

/// Checks every `Committed` event in `events` against the shard `reader` reads. The reader's
/// since must be below every commit's new upper (hold it at the minimum while the tasks run);
/// the shard's upper must have reached every commit (it has, if the events are real).
pub async fn audit_commits(
    reader: ReadHandle<Row, ()>,
    events: &[WriteTaskEvent],
) -> Result<AuditReport, AuditError> {
    let mut commits: Vec<(Timestamp, &WriteTaskEvent, u64, u64)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            WriteTaskEventKind::Committed {
                new_upper: Some(upper),
                desired_fingerprint,
                updates,
                ..
            } => Some((*upper, e, *desired_fingerprint, *updates)),
            _ => None,
        })
        .collect();
    crate::sort::sort_by_key(&mut commits, |(upper, ..)| *upper);
    let Some(&(last_upper, ..)) = commits.last() else {
        return Ok(AuditReport::default());
    };
    let as_of = reader.since().clone();
    let Some(&as_of_ts) = as_of.as_option() else {
        return Err(AuditError::EmptySince);
    };
    if let Some((first, e, ..)) = commits.first() {
        if *first <= as_of_ts {
            return Err(AuditError::SinceNotBelowCommit {
                since: as_of_ts,
                commit: *first,
                task: e.task.clone(),
            });
        }
    }
    // The whole history: the snapshot at the since, then every later update at its exact time.
    let (snapshot, mut listen) = reader
        .subscribe(Antichain::from_elem(as_of_ts))
        .await
        .map_err(|e| AuditError::persist("subscribe", e))?;
    let mut updates: Vec<(Timestamp, Row, Diff)> = snapshot
        .into_iter()
        .map(|((row, ()), t, d)| (t, row, d))
        .collect();
    let mut steps = 0u64;
    while listen
        .frontier()
        .as_option()
        .is_some_and(|f| *f < last_upper)
    {
        steps += 1;
        if steps > AUDIT_MAX_LISTEN_STEPS {
            return Err(AuditError::ListenStalled { last_upper });
        }
        for event in listen
            .next()
            .await
            .map_err(|e| AuditError::persist("listen", e))?
        {
            if let ListenEvent::Updates(batch) = event {
                updates.extend(batch.into_iter().map(|((row, ()), t, d)| (t, row, d)));
            }
        }
    }
    listen.expire().await;
    crate::sort::sort_by_key(&mut updates, |u| u.0);
    replay(commits, &updates)
}

/// Replays `updates` (in time order) against `commits` (by new upper): at each commit, the
/// contents are every update before its new upper, and their fingerprint must be the event's.
fn replay(
    commits: Vec<(Timestamp, &WriteTaskEvent, u64, u64)>,
    updates: &[(Timestamp, Row, Diff)],
) -> Result<AuditReport, AuditError> {
    let mut report = AuditReport::default();
    // Replay in time order; at each commit, the contents are every update before its new upper.
    let mut contents: BTreeMap<Row, i128> = BTreeMap::new();
    let mut next = 0;
    for (upper, event, expected, carried) in commits {
        while next < updates.len() && updates[next].0 < upper {
            let (_, row, diff) = &updates[next];
            *contents.entry(row.clone()).or_default() += i128::from(*diff);
            next += 1;
        }
        let mut consolidated = Vec::with_capacity(contents.len());
        for (row, sum) in &contents {
            if *sum != 0 {
                let diff = Diff::try_from(*sum).map_err(|_| AuditError::DiffOverflow {
                    row: row.to_string(),
                    sum: *sum,
                })?;
                consolidated.push((row.clone(), diff));
            }
        }
        report.commits += 1;
        if carried > 0 {
            report.commits_with_data += 1;
        }
        let found = fingerprint(&consolidated);
        if found != expected {
            report.failures.push(format!(
                "after the commit of task {} at {} (new upper {upper}, {carried} updates) the shard \
                 holds {} rows (fingerprint {found:016x}), not the task's desired \
                 (fingerprint {expected:016x})",
                event.task,
                event.at_ms,
                consolidated.len()
            ));
        }
    }
    Ok(report)
}
