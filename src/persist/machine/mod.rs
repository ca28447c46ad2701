//! The command loop: the only caller of `Consensus::compare_and_set` for shards.
//!
//! One attempt at a command (`apply_once`):
//! 1. clone the cached state and apply the pure transition at seqno + 1 (a `Break` commits
//!    nothing);
//! 2. run maintenance on the new state (expire lapsed leases);
//! 3. encode the diff from the old state and `compare_and_set(shard, old.seqno, new)`;
//! 4. `Committed`: install the new state in the cache (never going back); `ExpectationMismatch`:
//!    fetch the newer versions and go to 1; a determinate error: back off and go to 1; an
//!    indeterminate error: hand it to the caller, who decides.
//!
//! Idempotent commands (registration, heartbeats, downgrades, expiry) retry indeterminate errors
//! by simply applying again to fresher state. compare_and_append is not idempotent: it carries one
//! [`IdempotencyToken`] across its retries, so a retry that finds its own token committed succeeds
//! rather than writing twice (at-most-once under indeterminate errors).
//!
//! Transient storage errors are retried with back-off for as long as the caller waits; every
//! future here cancels on drop, so callers bound them with the runtime's `timeout`. Permanent
//! ones are not: a version that does not decode or does not follow its predecessor, a rollup that
//! does not decode or is gone while the head still names it, a store closed for good. The first
//! one found marks the shard **broken** in this process's cache (shared by all its handles and
//! its maintenance) and every later command answers it at once, so nothing more is written.
//!
//! A shard whose upper and since are both empty is a **tombstone** (`state.rs`): a command on it
//! runs its transition on a scratch copy and commits nothing, spending no seqno; it answers what
//! the transition answered.
//!
//! Files: this one holds [`Machine`] (the cache, the broken flag, the retry of one storage
//! call, the event records); `init.rs` creates a shard; `fetch.rs` brings the cache up to the
//! head; `apply.rs` is the loop of one command (`apply_erased`, over an [`ErasedWork`]) and
//! compare_and_append's retry policy; `commands.rs` the typed fronts of the loop and the
//! retry policies of idempotent and maintenance commands; `plan.rs` the maintenance a commit
//! assigns and the queue it waits in (the workers are in `maintenance.rs`, above); `blob.rs`
//! the Blob writes and deletes of background work.

use std::cell::RefCell;
use std::rc::Rc;

use timely::progress::Antichain;

use super::codec::Timestamp;
use super::encoding::StateDiff;
use super::error::UpperMismatch;
use super::events::{frontier, CasOutcome, EventLog, PersistEvent};
use super::state::State;
use super::{PersistConfig, ShardId};
use crate::location::{BrokenAt, ExternalError, Location, PermanentError, PermanentKind, SeqNo};
use crate::retry::retry_transient;
use crate::runtime::Runtime;
use crate::vec_map::VecMap;

mod apply;
mod blob;
mod commands;
mod fetch;
mod init;
mod plan;

pub(crate) use apply::ErasedWork;
pub(crate) use plan::{Carry, MaintenanceQueue, PendingMerge, RoutineMaintenance, StartWorkers};

/// The outcome of a compare_and_append at the machine level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CaaOutcome {
    /// Committed (or found already committed).
    Committed,
    /// The shard's upper is not the batch's lower.
    UpperMismatch(Antichain<Timestamp>),
    /// The inline budget is exhausted: write the parts to Blob and retry.
    InlineBackpressure,
}

/// A shard's command loop, for one handle. Clones share the process-wide state cache.
#[derive(Clone)]
pub struct Machine {
    pub(crate) shard_id: ShardId,
    pub(crate) location: Location,
    pub(crate) runtime: Runtime,
    pub(crate) cfg: PersistConfig,
    pub(crate) events: EventLog,
    pub(crate) who: String,
    /// The newest state this process has seen of the shard. Never goes back.
    pub(crate) cache: Rc<RefCell<State>>,
    /// This process's maintenance queue for the shard (see `maintenance.rs`).
    pub(crate) maintenance: Rc<RefCell<MaintenanceQueue>>,
    /// Starts this process's maintenance workers for the shard (`maintenance::start_workers`,
    /// installed by the client: see `plan.rs`).
    pub(crate) start_workers: StartWorkers,
    /// The first permanent error this process found on the shard. Once set, every command and
    /// fetch answers it and nothing more is written.
    pub(crate) broken: Rc<RefCell<Option<PermanentError>>>,
    /// What each version this process committed or decoded inserts into Blob, by seqno (see
    /// `gc.rs`): forgotten below each truncate, and bounded by [`SEEN_CAPACITY`].
    pub(crate) seen: Rc<RefCell<VecMap<SeqNo, Vec<String>>>>,
    /// This process's commands on the shard take their compare_and_sets in turns (`turns.rs`).
    pub(crate) turns: crate::persist::turns::Turns,
}

/// How many versions `Machine::seen` remembers at most (the oldest are forgotten first: a
/// collector then decodes them again).
pub const SEEN_CAPACITY: usize = 4096;

impl Machine {
    /// The cached state's seqno.
    pub fn seqno(&self) -> SeqNo {
        self.cache.borrow().seqno
    }

    /// The cached state's upper.
    pub fn upper(&self) -> Antichain<Timestamp> {
        self.cache.borrow().upper().clone()
    }

    /// A copy of the cached state.
    pub fn state(&self) -> State {
        self.cache.borrow().clone()
    }

    /// Reads the cached state without cloning it.
    pub(crate) fn state_ref<R>(&self, read: impl FnOnce(&State) -> R) -> R {
        read(&self.cache.borrow())
    }

    fn install(&self, state: State) {
        let mut cache = self.cache.borrow_mut();
        // Never regress: a slower fetch may finish after a newer commit was installed.
        if state.seqno > cache.seqno {
            *cache = state;
        }
    }

    fn remember(&self, seqno: SeqNo, diff: &StateDiff) {
        if !self.cfg.gc_enabled {
            // No routine collector in this process reads it (one by hand decodes instead).
            return;
        }
        let mut seen = self.seen.borrow_mut();
        seen.insert(seqno, diff.inserted_blobs());
        while seen.len() > SEEN_CAPACITY {
            seen.pop_first();
        }
    }

    /// Forgets what versions below `seqno` inserted (they were truncated).
    pub(crate) fn forget_below(&self, seqno: SeqNo) {
        let mut seen = self.seen.borrow_mut();
        seen.retain(|s, _| *s >= seqno);
    }

    /// The permanent error this process found on the shard, if any.
    pub fn broken(&self) -> Option<PermanentError> {
        self.broken.borrow().clone()
    }

    fn check_broken(&self) -> Result<(), PermanentError> {
        match &*self.broken.borrow() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Marks the shard broken with `err` (the first one found wins) and returns `err`.
    pub(crate) fn mark_broken(&self, err: PermanentError) -> PermanentError {
        let first = {
            let mut broken = self.broken.borrow_mut();
            let first = broken.is_none();
            if first {
                *broken = Some(err.clone());
            }
            first
        };
        if first {
            self.events.record(|| PersistEvent::ShardBroken {
                who: self.who.clone(),
                shard: self.shard_id.0.clone(),
                error: err.clone(),
                at_ms: self.runtime.now_ms(),
            });
        }
        err
    }

    /// A permanent error about this shard.
    pub(crate) fn permanent(
        &self,
        at: BrokenAt,
        kind: PermanentKind,
        detail: impl Into<String>,
    ) -> PermanentError {
        PermanentError::new(self.shard_id.0.clone(), at, kind, detail)
    }

    /// Splits a storage error: a transient one is handed back to retry; a permanent one marks
    /// the shard broken.
    pub(crate) fn transient(&self, err: ExternalError) -> Result<ExternalError, PermanentError> {
        match err {
            ExternalError::Permanent(e) => Err(self.mark_broken(*e)),
            other => Ok(other),
        }
    }

    /// Runs one storage call until it succeeds, retrying transient errors with back-off; a
    /// permanent error marks the shard broken and is returned.
    pub(crate) async fn retrying<T, Fut>(
        &self,
        op: impl FnMut() -> Fut,
    ) -> Result<T, PermanentError>
    where
        Fut: std::future::Future<Output = Result<T, ExternalError>>,
    {
        self.check_broken()?;
        let mut backoff = self.cfg.backoff();
        retry_transient(&self.runtime, &mut backoff, op, |_, _| {})
            .await
            .map_err(|e| self.mark_broken(e))
    }

    fn record_fetch(&self, seqno: SeqNo, from_rollup: bool) {
        self.events.record(|| PersistEvent::StateFetched {
            who: self.who.clone(),
            shard: self.shard_id.0.clone(),
            seqno,
            from_rollup,
            at_ms: self.runtime.now_ms(),
        });
    }

    fn record_command(
        &self,
        cmd: &str,
        expected: SeqNo,
        reached: SeqNo,
        outcome: CasOutcome,
        states: Option<(Frontiers, Frontiers)>,
    ) {
        self.events.record(|| {
            let (upper, since) = match states {
                Some((a, b)) => ((a.0, b.0), (a.1, b.1)),
                None => {
                    let c = self.cache.borrow();
                    let (u, s) = (frontier(c.upper()), frontier(c.since()));
                    ((u, u), (s, s))
                }
            };
            PersistEvent::Command {
                who: self.who.clone(),
                shard: self.shard_id.0.clone(),
                cmd: cmd.to_string(),
                expected,
                reached,
                outcome,
                upper,
                since,
                at_ms: self.runtime.now_ms(),
            }
        });
    }
}

/// A state's (upper, since), as events show them.
type Frontiers = (Option<Timestamp>, Option<Timestamp>);

fn frontiers(state: &State) -> Frontiers {
    (frontier(state.upper()), frontier(state.since()))
}

fn retry_outcome(err: &ExternalError) -> CasOutcome {
    match err {
        ExternalError::Determinate(m) => CasOutcome::Determinate(m.clone()),
        ExternalError::Indeterminate(m) => CasOutcome::Indeterminate(m.clone()),
        ExternalError::Permanent(e) => CasOutcome::Permanent(e.to_string()),
    }
}

/// Maps a machine-level outcome to the handle API's nested result.
pub(crate) fn upper_mismatch(
    expected: &Antichain<Timestamp>,
    current: Antichain<Timestamp>,
) -> UpperMismatch {
    UpperMismatch {
        expected: expected.clone(),
        current,
    }
}
