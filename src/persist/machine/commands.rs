//! The typed front of [`Machine`]'s command loop.
//!
//! A command is a transition `FnMut(seqno, now_ms, &mut StateCollections) -> ControlFlow<B, R>`:
//! it breaks with a reason `B` (nothing to commit) or continues with a result `R`. The loop that
//! applies it, compare_and_sets the new version and retries (`Machine::apply_erased`, and the two
//! retry policies below) is large, and there are some twenty commands; so the loop sees only an
//! erased transition, [`ErasedWork`], which says whether it broke (with `B`'s debug text for the
//! event log), and each typed entry point here keeps the transition's last result and returns
//! it. The loop returns right after the attempt whose outcome it reports, so that result is the
//! one the loop acted on. One copy of the loop is compiled instead of one per command.

use std::fmt::Debug;
use std::ops::ControlFlow::{self, Break, Continue};

use super::super::state::StateCollections;
use super::{ErasedWork, Machine};
use crate::location::{BrokenAt, ExternalError, PermanentError, PermanentKind, SeqNo};

/// A typed transition and its last result.
struct Typed<'w, W, B, R> {
    work: &'w mut W,
    last: Option<ControlFlow<B, R>>,
}

impl<'w, W, B, R> Typed<'w, W, B, R>
where
    W: FnMut(SeqNo, u64, &mut StateCollections) -> ControlFlow<B, R>,
    B: Debug,
{
    fn new(work: &'w mut W) -> Self {
        Typed { work, last: None }
    }

    /// The erased view the loop calls; each call's typed result is kept.
    fn erased(
        &mut self,
    ) -> impl FnMut(SeqNo, u64, &mut StateCollections) -> ControlFlow<String, ()> + '_ {
        |seqno, now, c| {
            let result = (self.work)(seqno, now, c);
            let erased = match &result {
                Break(b) => Break(format!("{b:?}")),
                Continue(_) => Continue(()),
            };
            self.last = Some(result);
            erased
        }
    }

    /// The result of the attempt the loop returned after (at `seqno`). The loop returns only
    /// after applying the transition in that same attempt, so the error is unreachable; it stands
    /// where a panic would otherwise be.
    fn last(self, machine: &Machine, seqno: SeqNo) -> Result<ControlFlow<B, R>, PermanentError> {
        self.last.ok_or_else(|| {
            let detail = "the command loop returned without applying the command";
            machine.permanent(
                BrokenAt::Version(seqno),
                PermanentKind::Inconsistent,
                detail,
            )
        })
    }
}

impl Machine {
    /// One command (see `Machine::apply_erased`): the seqno reached and the transition's result;
    /// an indeterminate error is returned for the caller to resolve.
    pub(crate) async fn apply_unbatched_cmd<R, B: Debug>(
        &self,
        cmd: &str,
        work: &mut impl FnMut(SeqNo, u64, &mut StateCollections) -> ControlFlow<B, R>,
    ) -> Result<(SeqNo, ControlFlow<B, R>), ExternalError> {
        let mut typed = Typed::new(work);
        let (seqno, _) = self.apply_erased(cmd, &mut typed.erased()).await?;
        Ok((seqno, typed.last(self, seqno)?))
    }

    /// An idempotent command: indeterminate errors are retried by re-reading state and applying
    /// again (harmless for commands whose second application changes nothing more). A permanent
    /// error ends it.
    pub(crate) async fn apply_idempotent<R, B: Debug>(
        &self,
        cmd: &str,
        mut work: impl FnMut(SeqNo, u64, &mut StateCollections) -> ControlFlow<B, R>,
    ) -> Result<(SeqNo, ControlFlow<B, R>), PermanentError> {
        let mut typed = Typed::new(&mut work);
        let seqno = self
            .apply_idempotent_erased(cmd, &mut typed.erased())
            .await?;
        Ok((seqno, typed.last(self, seqno)?))
    }

    async fn apply_idempotent_erased(
        &self,
        cmd: &str,
        work: &mut ErasedWork<'_>,
    ) -> Result<SeqNo, PermanentError> {
        let mut backoff = self.cfg.backoff();
        loop {
            match self.apply_erased(cmd, work).await {
                Ok((seqno, _)) => return Ok(seqno),
                Err(ExternalError::Permanent(e)) => return Err(*e),
                Err(_indeterminate) => {
                    backoff.wait(&self.runtime).await;
                    if let Err(err) = self.fetch_and_update_state().await {
                        self.transient(err)?;
                    }
                }
            }
        }
    }

    /// Runs an idempotent command in a detached task: a handle's best-effort expiry on drop (if
    /// the task never runs, the lease runs out instead).
    pub(crate) fn spawn_idempotent<B: Debug + 'static, R: 'static>(
        &self,
        cmd: &'static str,
        work: impl FnMut(SeqNo, u64, &mut StateCollections) -> ControlFlow<B, R> + 'static,
    ) {
        let machine = self.clone();
        self.runtime
            .spawn(cmd, async move {
                let _ = machine.apply_idempotent(cmd, work).await;
            })
            .detach();
    }

    /// An idempotent maintenance command. Like `apply_idempotent`, it retries indeterminate
    /// errors by applying again to fresher state; it also reports whether some attempt's
    /// compare_and_set was indeterminate after its transition had applied.
    ///
    /// SUBTLE: such an attempt may really have committed, and a later attempt can then find
    /// nothing left to do (its own output already in place, or since merged away) and break. The
    /// caller must then treat its blobs as referenced: deleting them could leave a state version
    /// pointing at nothing. Leaking them is the safe side (as with a crashed process).
    pub(crate) async fn apply_maintenance_cmd<R, B: Debug>(
        &self,
        cmd: &str,
        mut work: impl FnMut(&mut StateCollections) -> ControlFlow<B, R>,
    ) -> Result<(SeqNo, ControlFlow<B, R>, bool), PermanentError> {
        let mut work = |_: SeqNo, _: u64, c: &mut StateCollections| work(c);
        let mut typed = Typed::new(&mut work);
        let (seqno, maybe_committed) = self
            .apply_maintenance_erased(cmd, &mut typed.erased())
            .await?;
        Ok((seqno, typed.last(self, seqno)?, maybe_committed))
    }

    async fn apply_maintenance_erased(
        &self,
        cmd: &str,
        work: &mut ErasedWork<'_>,
    ) -> Result<(SeqNo, bool), PermanentError> {
        let mut backoff = self.cfg.backoff();
        let mut maybe_committed = false;
        loop {
            match self.apply_erased(cmd, work).await {
                Ok((seqno, _)) => return Ok((seqno, maybe_committed)),
                Err(ExternalError::Permanent(e)) => return Err(*e),
                Err(_indeterminate) => {
                    // An error comes only from a compare_and_set, which follows a transition
                    // that applied.
                    maybe_committed = true;
                    backoff.wait(&self.runtime).await;
                    if let Err(err) = self.fetch_and_update_state().await {
                        self.transient(err)?;
                    }
                }
            }
        }
    }
}
