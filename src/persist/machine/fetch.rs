//! Fetching: brings the cache up to the head of Consensus, by applying the newer diffs to the
//! cached state, or, when they were truncated away, by starting over from the newest rollup
//! the head names.
//!
//! Invariants: the cache never goes back (`Machine::install` keeps the newer state); a version
//! that does not decode or does not follow its predecessor, a rollup that does not decode or
//! holds another shard or seqno, a chain of versions that vanished, and a rollup or diffs still
//! missing at an unchanged head are permanent errors that mark the shard broken; a rollup or
//! diffs missing while the head moves on are a race with GC, and are read again.

use super::super::encoding::{decode_diff, decode_rollup};
use super::super::state::State;
use super::Machine;
use crate::location::{
    BrokenAt, ExternalError, PermanentError, PermanentKind, SeqNo, VersionedData, SCAN_ALL,
};

impl Machine {
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
}
