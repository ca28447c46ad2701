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

use std::cell::RefCell;
use std::ops::ControlFlow::{self, Break, Continue};
use std::rc::Rc;

use bytes::Bytes;
use timely::progress::Antichain;
use timely::PartialOrder;

use super::apply::ErasedWork;
use super::codec::Timestamp;
use super::encoding::{decode_diff, decode_rollup, encode_diff, encode_rollup, StateDiff};
use super::error::{InvalidUsage, PersistError, UpperMismatch};
use super::events::{frontier, CasOutcome, EventLog, PersistEvent};
use super::state::{
    CompareAndAppendBreak, HollowBatch, HollowRollup, IdempotencyToken, State, WriterId,
};
use super::{PersistConfig, ShardId};
use crate::location::{
    BrokenAt, CaSResult, ExternalError, Location, PermanentError, PermanentKind, SeqNo,
    VersionedData, SCAN_ALL,
};
use crate::retry::retry_transient;
use crate::runtime::Runtime;
use crate::vec_map::VecMap;

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
    pub(crate) maintenance: Rc<RefCell<super::maintenance::MaintenanceQueue>>,
    /// The first permanent error this process found on the shard. Once set, every command and
    /// fetch answers it and nothing more is written.
    pub(crate) broken: Rc<RefCell<Option<PermanentError>>>,
    /// What each version this process committed or decoded inserts into Blob, by seqno (see
    /// `gc.rs`): forgotten below each truncate, and bounded by [`SEEN_CAPACITY`].
    pub(crate) seen: Rc<RefCell<VecMap<SeqNo, Vec<String>>>>,
    /// This process's commands on the shard take their compare_and_sets in turns (`turns.rs`).
    pub(crate) turns: super::turns::Turns,
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

    /// Creates the shard if Consensus has no version of it yet: an initial rollup in Blob, then
    /// `compare_and_set(None, v1)`. Losing the race is fine (someone else created it). On return
    /// the cache holds the shard's state as of now (the new one, or the one found).
    pub(crate) async fn maybe_init_shard(&self) -> Result<(), PermanentError> {
        let mut backoff = self.cfg.backoff();
        loop {
            self.check_broken()?;
            match self.try_init_shard().await {
                Ok(()) => return Ok(()),
                Err(err) => {
                    self.record_command("init", SeqNo(0), SeqNo(0), retry_outcome(&err), None);
                    self.transient(err)?;
                    backoff.wait(&self.runtime).await;
                }
            }
        }
    }

    async fn try_init_shard(&self) -> Result<(), ExternalError> {
        let head = self.location.consensus.head(&self.shard_id.0).await?;
        if head.is_some() {
            return self.fetch_and_update_state().await;
        }
        let empty = State::uninitialized(self.shard_id.clone());
        let mut initial = empty.clone();
        initial.seqno = SeqNo(1);
        initial.walltime_ms = self.runtime.now_ms().max(1);
        let rollup_key = self.rollup_key(SeqNo(1));
        initial.collections.rollups.insert(
            SeqNo(1),
            HollowRollup {
                key: rollup_key.clone(),
                encoded_size_bytes: 0,
            },
        );
        let bytes = encode_rollup(&initial);
        // The rollup's recorded size cannot include itself; it records the size without it.
        self.location
            .blob
            .set(&rollup_key, Bytes::from(bytes.clone()))
            .await?;
        self.events.record(|| PersistEvent::BlobWritten {
            who: self.who.clone(),
            shard: self.shard_id.0.clone(),
            key: Some(rollup_key.clone()),
            kind: "rollup".into(),
            bytes: bytes.len() as u64,
            at_ms: self.runtime.now_ms(),
        });
        let diff = encode_diff(&StateDiff::from_diff(&empty, &initial));
        let result = self
            .location
            .consensus
            .compare_and_set(
                &self.shard_id.0,
                None,
                VersionedData {
                    seqno: SeqNo(1),
                    data: Bytes::from(diff),
                },
            )
            .await;
        match result {
            Ok(CaSResult::Committed) => {
                self.record_command("init", SeqNo(0), SeqNo(1), CasOutcome::Committed, None);
                self.install(initial);
                Ok(())
            }
            Ok(CaSResult::ExpectationMismatch) | Err(_) => {
                // Someone else created it, or our write may have happened: read what is there,
                // and delete our rollup unless the state we find references it.
                self.fetch_and_update_state().await?;
                let referenced = self
                    .cache
                    .borrow()
                    .collections
                    .rollups
                    .values()
                    .any(|r| r.key == rollup_key);
                if !referenced {
                    let _ = self.location.blob.delete(&rollup_key).await;
                }
                match result {
                    Err(err) if !referenced => Err(err),
                    _ => Ok(()),
                }
            }
        }
    }

    fn rollup_key(&self, seqno: SeqNo) -> String {
        format!(
            "{}/rollup/{:020}/{}",
            self.shard_id.0,
            seqno.0,
            self.runtime.now_ms()
        )
    }

    /// Brings the cache up to the head of Consensus: applies the newer diffs to the cached state,
    /// or, if they were truncated away, starts over from the newest rollup. A permanent error
    /// (see the module docs) marks the shard broken.
    pub async fn fetch_and_update_state(&self) -> Result<(), ExternalError> {
        self.check_broken()?;
        match self.fetch_inner().await {
            Err(ExternalError::Permanent(e)) => Err(self.mark_broken(*e).into()),
            other => other,
        }
    }

    async fn fetch_inner(&self) -> Result<(), ExternalError> {
        let consensus = &self.location.consensus;
        let shard = &self.shard_id.0;
        let cached_seqno = self.seqno();
        if cached_seqno > SeqNo(0) {
            // Scan from the cached version itself: finding it proves the cache is still valid.
            let versions = consensus.scan(shard, cached_seqno, SCAN_ALL).await?;
            match versions.first() {
                Some(first) if first.seqno == cached_seqno => {
                    let diffs = &versions[1..];
                    if diffs.is_empty() {
                        return Ok(());
                    }
                    let mut state = self.state();
                    if state.seqno == cached_seqno {
                        self.apply_versions(&mut state, diffs)?;
                        self.record_fetch(state.seqno, false);
                        self.install(state);
                    }
                    return Ok(());
                }
                // The cached version was truncated and newer ones exist: start from a rollup.
                Some(_) => {}
                // Nothing at or after the cached version: unless the head moved past us, the
                // chain we knew is gone (the store was reset or truncated past the cache).
                None => match consensus.head(shard).await? {
                    Some(head) if head.seqno > cached_seqno => {}
                    head => {
                        return Err(self
                            .permanent(
                                BrokenAt::Version(cached_seqno),
                                PermanentKind::Inconsistent,
                                format!(
                                    "the shard's state vanished: this process knew seqno {}, \
                                     Consensus now holds {} (the store was reset or truncated \
                                     past it)",
                                    cached_seqno.0,
                                    head.map_or("no version".to_string(), |h| format!(
                                        "only up to seqno {}",
                                        h.seqno.0
                                    ))
                                ),
                            )
                            .into());
                    }
                },
            }
        }
        self.fetch_from_rollup().await
    }

    /// Applies stored versions to `state` in order. A version that does not decode, or does not
    /// follow the one before, is a permanent error naming it.
    fn apply_versions(
        &self,
        state: &mut State,
        versions: &[VersionedData],
    ) -> Result<(), PermanentError> {
        for v in versions {
            let at = BrokenAt::Version(v.seqno);
            let diff = decode_diff(&v.data).map_err(|e| {
                self.permanent(at.clone(), PermanentKind::Undecodable, e.to_string())
            })?;
            if diff.seqno_to != v.seqno {
                return Err(self.permanent(
                    at,
                    PermanentKind::Inconsistent,
                    format!("the version holds the diff to {}", diff.seqno_to),
                ));
            }
            diff.apply(state)
                .map_err(|e| self.permanent(at, PermanentKind::Inconsistent, e))?;
            self.remember(v.seqno, &diff);
        }
        Ok(())
    }

    async fn fetch_from_rollup(&self) -> Result<(), ExternalError> {
        let consensus = &self.location.consensus;
        let shard = &self.shard_id.0;
        let mut backoff = self.cfg.backoff();
        // The head seqno at which the last attempt found its rollup gone or its diffs truncated:
        // finding the same again at the same head means nothing moved on, so it will not heal.
        let mut stuck_at: Option<SeqNo> = None;
        loop {
            let Some(head) = consensus.head(shard).await? else {
                return Ok(());
            };
            let at_head = BrokenAt::Version(head.seqno);
            let diff = decode_diff(&head.data).map_err(|e| {
                self.permanent(at_head.clone(), PermanentKind::Undecodable, e.to_string())
            })?;
            let Some((rollup_seqno, rollup)) = diff.latest_rollup else {
                return Err(self
                    .permanent(at_head, PermanentKind::Inconsistent, "names no rollup")
                    .into());
            };
            let at_rollup = BrokenAt::BlobKey(rollup.key.clone());
            let Some(bytes) = self.location.blob.get(&rollup.key).await? else {
                if stuck_at == Some(head.seqno) {
                    return Err(self
                        .permanent(
                            at_rollup,
                            PermanentKind::Missing,
                            format!(
                                "the rollup of {rollup_seqno} that head version {} names is gone",
                                head.seqno
                            ),
                        )
                        .into());
                }
                // GC may have removed it after state moved on since we read the head: read again.
                stuck_at = Some(head.seqno);
                backoff.wait(&self.runtime).await;
                continue;
            };
            let mut state = decode_rollup(&bytes).map_err(|e| {
                self.permanent(at_rollup.clone(), PermanentKind::Undecodable, e.to_string())
            })?;
            if state.shard_id != self.shard_id || state.seqno != rollup_seqno {
                return Err(self
                    .permanent(
                        at_rollup,
                        PermanentKind::Inconsistent,
                        format!(
                            "holds shard {} at {}, expected {} at {}",
                            state.shard_id, state.seqno, self.shard_id, rollup_seqno
                        ),
                    )
                    .into());
            }
            let Some(from) = rollup_seqno.checked_next() else {
                return Err(self
                    .permanent(
                        at_rollup,
                        PermanentKind::Inconsistent,
                        "no seqno follows it",
                    )
                    .into());
            };
            let diffs = consensus.scan(shard, from, SCAN_ALL).await?;
            let reaches_head = diffs.last().map_or(rollup_seqno, |d| d.seqno) >= head.seqno;
            if diffs.first().is_some_and(|d| d.seqno != from) || !reaches_head {
                if stuck_at == Some(head.seqno) {
                    return Err(self
                        .permanent(
                            BrokenAt::Version(from),
                            PermanentKind::Missing,
                            format!(
                                "the versions from the rollup at {rollup_seqno} to the head {} \
                                 are not all there",
                                head.seqno
                            ),
                        )
                        .into());
                }
                stuck_at = Some(head.seqno);
                backoff.wait(&self.runtime).await;
                continue;
            }
            self.apply_versions(&mut state, &diffs)?;
            self.record_fetch(state.seqno, true);
            self.install(state);
            return Ok(());
        }
    }

    /// [`Machine::fetch_and_update_state`], retrying transient errors until it succeeds.
    pub async fn fetch_and_update_state_retrying(&self) -> Result<(), PermanentError> {
        self.retrying(|| self.fetch_and_update_state()).await
    }

    /// One command: apply, compare_and_set, and on a mismatch or a determinate error fetch and
    /// apply again. Returns the seqno reached and whether the last transition broke (with its
    /// debug text); an indeterminate error is returned for the caller to resolve. Not generic:
    /// the typed front is `apply_unbatched_cmd` (apply.rs).
    pub(crate) async fn apply_erased(
        &self,
        cmd: &str,
        work: &mut ErasedWork<'_>,
    ) -> Result<(SeqNo, ControlFlow<(), ()>), ExternalError> {
        let mut backoff = self.cfg.backoff();
        loop {
            // With `command_turns`, one attempt at a time per shard in this process (`turns.rs`):
            // it computes on the outcome of the one before instead of racing it. Released before
            // any back-off.
            let turn = match self.cfg.command_turns {
                true => Some(self.turns.take().await),
                false => None,
            };
            self.check_broken()?;
            let now = self.runtime.now_ms();
            // Compute under a borrow of the cache: one clone of the state per attempt.
            let computed = {
                let old = self.cache.borrow();
                let before = frontiers(&old);
                if old.seqno.checked_next().is_none() || old.walltime_ms == u64::MAX {
                    let at = BrokenAt::Version(old.seqno);
                    drop(old);
                    return Err(self
                        .mark_broken(self.permanent(
                            at,
                            PermanentKind::Inconsistent,
                            "no seqno or walltime is left after this version",
                        ))
                        .into());
                }
                if old.collections.is_tombstone() {
                    // A tombstone commits nothing: the transition answers from a scratch copy.
                    let result = old
                        .clone_apply(now, &mut |s, c| work(s, now, c))
                        .map_continue(|(r, _)| r)
                        .map_break(|_| ());
                    let seqno = old.seqno;
                    drop(old);
                    let why = CasOutcome::Skipped("tombstone".into());
                    self.record_command(cmd, seqno, seqno, why, Some((before, before)));
                    return Ok((seqno, result));
                }
                match old.clone_apply(now, &mut |s, c| work(s, now, c)) {
                    Break(b) => Err((old.seqno, before, b)),
                    Continue((r, mut new)) => {
                        // Maintenance rides along with every command.
                        let (_, expired_writers) = new.collections.expire_at(now);
                        // Both frontiers closed: the shard drops every handle.
                        new.collections.maybe_become_tombstone();
                        // An append carries the merges that wait to be committed (see
                        // `maintenance.rs`, `PendingMerge`).
                        let carried = self.carry_pending_merges(cmd, &mut new);
                        // Maintenance hook (maintenance.rs): the GC trigger, and the background
                        // work this version assigns to us if it commits.
                        let maintenance =
                            self.maintenance_for(cmd, &old, &mut new, !expired_writers.is_empty());
                        if cfg!(debug_assertions) {
                            if let Err(e) = new.validate(Some(&old)) {
                                panic!("{cmd} broke a state invariant: {e}");
                            }
                        }
                        let diff = StateDiff::from_diff(&old, &new);
                        if cfg!(debug_assertions) {
                            let mut check = old.clone();
                            diff.apply(&mut check)
                                .expect("a diff applies to its own base");
                            assert_eq!(check, new, "a diff must round-trip");
                        }
                        Ok((r, new, diff, old.seqno, before, maintenance, carried))
                    }
                }
            };
            let (r, new, diff, old_seqno, before, maintenance, mut carried) = match computed {
                Ok(x) => x,
                Err((seqno, before, b)) => {
                    self.record_command(
                        cmd,
                        seqno,
                        seqno,
                        CasOutcome::Skipped(b),
                        Some((before, before)),
                    );
                    return Ok((seqno, Break(())));
                }
            };
            let data = Bytes::from(encode_diff(&diff));
            let result = self
                .location
                .consensus
                .compare_and_set(
                    &self.shard_id.0,
                    Some(old_seqno),
                    VersionedData {
                        seqno: new.seqno,
                        data,
                    },
                )
                .await;
            match result {
                Ok(CaSResult::Committed) => {
                    self.record_command(
                        cmd,
                        old_seqno,
                        new.seqno,
                        CasOutcome::Committed,
                        Some((before, frontiers(&new))),
                    );
                    let seqno = new.seqno;
                    for carry in &mut carried {
                        carry.merge.set_carried(seqno);
                        carry.resolved = true;
                    }
                    self.remember(seqno, &diff);
                    self.install(new);
                    // Maintenance hook (maintenance.rs): start the assigned work.
                    self.start_maintenance(maintenance);
                    return Ok((seqno, Continue(r)));
                }
                Ok(CaSResult::ExpectationMismatch) => {
                    for carry in &mut carried {
                        carry.resolved = true;
                    }
                    drop(carried);
                    // Someone else committed first: read their versions and re-apply.
                    let fetched = self.fetch_and_update_state().await;
                    let reached = self.seqno();
                    // Before: what the attempt assumed; after: what the re-read found.
                    let after = frontiers(&self.cache.borrow());
                    self.record_command(
                        cmd,
                        old_seqno,
                        reached,
                        CasOutcome::Mismatch,
                        Some((before, after)),
                    );
                    if let Err(err) = fetched {
                        self.transient(err)?;
                        drop(turn);
                        backoff.wait(&self.runtime).await;
                    }
                }
                Err(err @ ExternalError::Determinate(_)) => {
                    for carry in &mut carried {
                        carry.resolved = true;
                    }
                    drop(carried);
                    self.record_command(cmd, old_seqno, old_seqno, retry_outcome(&err), None);
                    drop(turn);
                    backoff.wait(&self.runtime).await;
                }
                Err(err) => {
                    // Unresolved carries (dropped below) leave their merges maybe committed.
                    self.record_command(cmd, old_seqno, old_seqno, retry_outcome(&err), None);
                    return Err(self.transient(err)?);
                }
            }
        }
    }

    /// Applies to `new` every pending merge of this process that still applies, if `cmd` is an
    /// append; returns those it applied (committed with `new`, if it commits).
    fn carry_pending_merges(&self, cmd: &str, new: &mut State) -> Vec<super::maintenance::Carry> {
        if cmd != "compare_and_append" {
            return Vec::new();
        }
        let pending = self.maintenance.borrow().pending_merges.clone();
        pending
            .into_iter()
            .filter(|m| m.carried.get().is_none())
            .filter(|m| {
                new.collections
                    .apply_merge_res(&m.req, &m.output)
                    .is_continue()
            })
            .map(super::maintenance::Carry::new)
            .collect()
    }

    /// Appends `batch` iff the shard's upper is `batch.desc.lower`, at most once. See the notes,
    /// section 1.4.
    pub(crate) async fn compare_and_append(
        &self,
        batch: &HollowBatch,
        writer_id: &WriterId,
        token: &IdempotencyToken,
    ) -> Result<CaaOutcome, PersistError> {
        let lease = self.cfg.writer_lease_duration_ms;
        let mut indeterminate_seen: Option<ExternalError> = None;
        let mut backoff = self.cfg.backoff();
        loop {
            let result = self
                .apply_unbatched_cmd("compare_and_append", &mut |_, now, c| {
                    c.compare_and_append(batch, writer_id, now, lease, token)
                })
                .await;
            match result {
                Ok((_, Continue(()))) => return Ok(CaaOutcome::Committed),
                Ok((_, Break(CompareAndAppendBreak::AlreadyCommitted))) => {
                    // Only a retry after a lost acknowledgement can find its own token.
                    debug_assert!(indeterminate_seen.is_some());
                    return Ok(CaaOutcome::Committed);
                }
                Ok((_, Break(CompareAndAppendBreak::InlineBackpressure))) => {
                    return Ok(CaaOutcome::InlineBackpressure)
                }
                Ok((_, Break(CompareAndAppendBreak::InvalidUsage(e)))) => {
                    if indeterminate_seen.is_some() {
                        // SUBTLE: an earlier attempt may have committed before this writer was
                        // expired; its parts may be referenced, so they must not be deleted.
                        return Err(InvalidUsage::IndeterminateOutcome {
                            lower: batch.desc.lower.clone(),
                            upper: batch.desc.upper.clone(),
                        }
                        .into());
                    }
                    return Err(e.into());
                }
                Ok((seqno, Break(CompareAndAppendBreak::Inconsistent(detail)))) => {
                    let err = self.permanent(
                        BrokenAt::Version(seqno),
                        PermanentKind::Inconsistent,
                        detail,
                    );
                    return Err(self.mark_broken(err).into());
                }
                Ok((_, Break(CompareAndAppendBreak::Upper { .. }))) => {
                    // Our cached state may just be stale: fetch and look again.
                    self.fetch_and_update_state_retrying().await?;
                    let state = self.state();
                    let shard_upper = state.upper().clone();
                    if shard_upper == batch.desc.lower && !state.collections.is_tombstone() {
                        continue;
                    }
                    let writer = state.collections.writers.get(writer_id);
                    if let (Some(_), Some(writer)) = (&indeterminate_seen, writer) {
                        if PartialOrder::less_equal(
                            &batch.desc.upper,
                            &writer.most_recent_write_upper,
                        ) && writer.most_recent_write_token != *token
                        {
                            // SUBTLE: an acknowledgement was lost, and this writer has since
                            // moved its own upper past this batch by another write: whether this
                            // one committed can no longer be told from state. The original
                            // panics here.
                            return Err(InvalidUsage::IndeterminateOutcome {
                                lower: batch.desc.lower.clone(),
                                upper: batch.desc.upper.clone(),
                            }
                            .into());
                        }
                    }
                    return Ok(CaaOutcome::UpperMismatch(shard_upper));
                }
                Err(ExternalError::Permanent(e)) => return Err((*e).into()),
                Err(err) => {
                    // The compare_and_set may have happened: retry with the same token, which
                    // tells a committed write apart from one that never happened.
                    indeterminate_seen = Some(err);
                    backoff.wait(&self.runtime).await;
                    if let Err(err) = self.fetch_and_update_state().await {
                        self.transient(err)?;
                    }
                }
            }
        }
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
