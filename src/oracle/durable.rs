//! [`DurableTimestampOracle`]: the oracle made durable across restarts by pre-allocating windows
//! of timestamps, with epochs that fence an instance another one has taken over from.
//!
//! # Windows
//!
//! The oracle keeps a [`TimestampState`] in memory and one number in a Consensus key, the
//! *durable upper*: every timestamp the timeline has ever handed out (write or read) is below it.
//! Timestamps below the durable upper are served from memory, with no I/O. Before handing out a
//! timestamp `ts` at or beyond it, the oracle *allocates* a new window: it writes
//! `ts + persist_interval_ms` with one compare_and_set, and only then hands `ts` out. With a
//! clock-tracking timeline that is about one durable write per `persist_interval_ms` of
//! timestamps, whatever the request rate. `apply_write(t)` allocates the same way before raising
//! the read timestamp to `t`, so that a read timestamp is also always below the durable upper,
//! even if the call is cancelled half-way.
//!
//! A durable upper of `u64::MAX` is *saturated*: it covers every timestamp up to and including
//! `u64::MAX` (a window that would pass the maximum is cut there).
//!
//! # The stored record
//!
//! One Consensus key per timeline, [`DurableTimestampOracle::consensus_key`], holds versions of a
//! [`DurableRecord`](super::DurableRecord) `{epoch, upper}` (a small versioned binary format; bad bytes are an
//! [`OracleError::Decode`] error). Each allocation writes the next seqno with compare_and_set on
//! the seqno this instance last wrote, then truncates every older version, so the key holds one
//! version (a few if truncations failed; the next successful one removes them all) instead of
//! growing by one per window.
//!
//! # Start and restart
//!
//! [`DurableTimestampOracle::open`] reads the head, and writes `{epoch + 1, start +
//! persist_interval_ms}` where `start = max(initially, stored upper)`, on the head's seqno. Its
//! read and write timestamps both start at `start`. Every timestamp handed out before was below
//! the stored upper, so every write timestamp after the restart is above all of them, and reads
//! never go back. The unused rest of the previous window is skipped.
//!
//! # Epochs and fencing
//!
//! Each start bumps the epoch; an instance takes its epoch only once its compare_and_set
//! *determinately* committed, so no two instances ever believe in the same epoch. An
//! allocation writes on the seqno the instance last wrote; if the head moved, the instance
//! re-reads it:
//! - the head carries a larger epoch: another instance started since. This one is *fenced*: the
//!   call, and every later call, is an [`OracleError::Fenced`] error;
//! - the head carries this instance's own epoch: it is this instance's own write that landed
//!   unheard (a compare_and_set that timed out, or a cancelled call). The oracle adopts it (its
//!   upper is durable) and goes on.
//!
//! Between allocations a fenced instance does not look at the store, so it may go on serving
//! timestamps from its window. Those are below everything the new instance hands out: a write
//! timestamp from the old instance can be *below* one the new instance handed out earlier, and a
//! read timestamp from it can miss the new instance's applied writes. That is the anomaly the
//! original avoids by having a single leader that confirms its leadership.
//!
//! # `confirm_leadership`
//!
//! With [`DurableOracleConfig::confirm_leadership`] on, `write_ts` and `read_ts` first read the
//! head (one Consensus read) and fail as fenced if the epoch moved. A call then serves its
//! timestamp only if, at the instant of that read, no other instance had started; any instance
//! that starts later resumes above this one's whole window, so no timestamp from either instance
//! is ever below one the other handed out in a call that completed earlier. (`apply_write` needs
//! no check: it hands nothing out, and anything it can raise reads to is below the next
//! instance's start. `peek_write_ts` is a local view and does not check either.)
//!
//! The trade-off: this gives up most of the in-memory speed. Pre-allocation still saves the
//! *writes* (one compare_and_set per window), but every read and write timestamp now costs a
//! Consensus round trip, exactly what the windows were there to avoid. Measured in headless
//! Chromium over IndexedDB (debug build, `tests/browser_oracle.rs`): about 0.5 µs per call from
//! memory, 0.45 to 0.65 ms per call with the check, a thousand times slower and hardly faster
//! than an oracle that stored every timestamp. Without it, fencing is only noticed at the next
//! allocation. Choose it when several instances (browser tabs) may serve one timeline at once.
//!
//! # Storage errors
//!
//! The oracle retries every storage error, with exponential back-off on the runtime clock
//! ([`DurableOracleConfig::initial_backoff_ms`] doubling up to
//! [`DurableOracleConfig::max_backoff_ms`]), for as long as it takes; its futures cancel on drop,
//! and callers bound a call with the runtime's `timeout`. Precisely:
//! - a failed *read* (`head`), determinate or not, is retried as is: reads change nothing;
//! - a *determinate* compare_and_set error did not happen: it is retried as is after the back-off;
//! - an *indeterminate* compare_and_set error may have happened. SUBTLE: the oracle waits the
//!   back-off, re-reads the head and decides: the head at the seqno it wrote, with its own epoch,
//!   means it happened (adopt it, as above); the old head means it did not (retry); a larger
//!   epoch means fenced. Since a compare_and_set on an old seqno can never land after a newer
//!   one, a late landing of the lost attempt is harmless too.
//! - at start, an indeterminate compare_and_set is simply tried again from a fresh read: if it
//!   did happen, the new attempt bumps the epoch above it and so fences the instance's own ghost,
//!   which nobody believes in (an epoch is taken only on a determinate commit).
//! - truncation is best-effort: a failed one is recorded and left to the next allocation.
//!
//! # Broken records
//!
//! What cannot heal is never retried. A head whose bytes do not decode is an
//! [`OracleError::Decode`] naming the timeline and the seqno; a record that decodes but
//! contradicts this instance (the record vanished, the epoch went back, a later version of its
//! own epoch lowers the upper, no epoch or seqno is left) is an [`OracleError::Inconsistent`].
//! Every number read from the store is handled with checked or saturating arithmetic, so extreme
//! values are one of these errors (or a saturated timeline), never a panic or a wrap. Either error
//! *breaks* the instance ([`OracleError::is_permanent`], [`DurableTimestampOracle::broken`]): it
//! answers every later call with the same error at once,
//! without touching the store, so nothing is ever written after the corruption is found. A new
//! instance opened over the broken record fails the same way at its start.
//!
//! # The clock guard
//!
//! At start, if the stored upper is more than two intervals ahead of the clock (the clock went
//! back, or a previous instance ran far ahead), the oracle waits for the clock to catch up, at
//! most one second per step and at most [`DurableOracleConfig::clock_guard_max_wait_ms`] in all
//! (on the runtime clock), recording an [`OracleEventKind::ClockGuardWait`] for each step. If the
//! clock is still behind at the bound, it records [`OracleEventKind::ClockGuardGaveUp`] and
//! starts anyway: correctness does not depend on the clock, only the timestamps' distance from it.
//!
//! # Events and snapshots
//!
//! The oracle records what it does ([`OracleEvent`]: opened, allocated, adopted its own write,
//! truncated, retried, fenced, waited for the clock) in a bounded log, and describes itself as a
//! plain [`OracleSnapshot`]: the playground's data contract.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;

use async_trait::async_trait;

use super::config::KEY_PREFIX;
use super::{
    DurableOracleConfig, NowFn, OracleError, OracleEvent, OracleEventKind, OracleSnapshot,
    OracleStats, TimestampOracle, TimestampState, WriteTimestamp,
};
use crate::event_log::EventLog;
use crate::location::{Consensus, ExternalError, PermanentError, SeqNo};
use crate::retry::Backoff;
use crate::runtime::Runtime;

mod protocol;

/// Whether the durable upper `upper` covers `ts` (see the module docs on saturation).
fn covers(upper: u64, ts: u64) -> bool {
    ts < upper || upper == u64::MAX
}

/// The in-memory half of an instance.
#[derive(Debug)]
struct Instance {
    // Invariant: covers(durable_upper, timestamps.peek_write_ts()), and hence the read timestamp
    // too: nothing is handed out beyond the durable upper.
    timestamps: TimestampState,
    // Invariant: once opened, at least 1; never changes.
    epoch: u64,
    // The seqno of the latest version this instance knows it wrote. Only goes up.
    seqno: SeqNo,
    // Invariant: <= the upper stored at `seqno` or later (never claim more than is durable).
    // Only goes up.
    durable_upper: u64,
    // Once set, every call fails as fenced.
    fenced_by: Option<u64>,
    // Once set (a permanent error: the stored record is broken), every call fails with it and
    // nothing touches the store again.
    broken: Option<OracleError>,
}

/// Sets a flag for as long as it lives, also when its future is dropped.
struct FlagGuard<'a>(&'a Cell<bool>);

impl<'a> FlagGuard<'a> {
    fn set(flag: &'a Cell<bool>) -> Self {
        flag.set(true);
        FlagGuard(flag)
    }
}

impl Drop for FlagGuard<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// The durable, pre-allocating oracle. See the module docs.
pub struct DurableTimestampOracle {
    consensus: Rc<dyn Consensus>,
    runtime: Runtime,
    now: NowFn,
    config: DurableOracleConfig,
    key: String,
    instance: RefCell<Instance>,
    // Allocations run one at a time; a waiter re-checks whether the window it needed is there.
    allocation: futures::lock::Mutex<()>,
    allocating: Cell<bool>,
    stats: Cell<OracleStats>,
    events: EventLog<OracleEvent>,
}

impl fmt::Debug for DurableTimestampOracle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DurableTimestampOracle")
            .field("key", &self.key)
            .field("instance", &*self.instance.borrow())
            .finish_non_exhaustive()
    }
}

impl DurableTimestampOracle {
    /// The Consensus key holding `timeline`'s record.
    pub fn consensus_key(timeline: &str) -> String {
        format!("{KEY_PREFIX}{timeline}")
    }

    /// Starts an instance on `config.timeline`: waits for the clock guard, bumps the epoch
    /// (fencing any instance running on the timeline) and makes its first window durable. A new
    /// timeline starts at `initially`; an existing one at `max(initially, stored upper)`.
    ///
    /// Storage errors are retried for as long as it takes; bound the call with the runtime's
    /// `timeout`. Bad configuration and a foreign record at the key are errors.
    pub async fn open(
        consensus: Rc<dyn Consensus>,
        runtime: Runtime,
        now: NowFn,
        initially: u64,
        config: DurableOracleConfig,
    ) -> Result<Self, OracleError> {
        config.validate()?;
        let key = Self::consensus_key(&config.timeline);
        let events = match config.event_capacity {
            0 => EventLog::disabled(),
            capacity => EventLog::with_capacity(capacity),
        };
        let this = DurableTimestampOracle {
            consensus,
            runtime,
            now,
            key,
            instance: RefCell::new(Instance {
                timestamps: TimestampState::new(initially),
                epoch: 0,
                seqno: SeqNo(0),
                durable_upper: 0,
                fenced_by: None,
                broken: None,
            }),
            config,
            allocation: futures::lock::Mutex::new(()),
            allocating: Cell::new(false),
            stats: Cell::new(OracleStats::default()),
            events,
        };
        this.start(initially).await?;
        Ok(this)
    }

    /// Reads the head and checks that this instance still owns the timeline (one Consensus read,
    /// retried on errors). An unheard write of this instance found there is adopted.
    pub async fn confirm_leadership(&self) -> Result<(), OracleError> {
        self.check_usable()?;
        self.count(|s| s.leadership_checks += 1);
        let mut backoff = self.backoff();
        let result = self.reconcile(&mut backoff).await;
        self.note(result)
    }

    /// The current state, as plain data.
    pub fn snapshot(&self) -> OracleSnapshot {
        let inst = self.instance.borrow();
        let Instance {
            timestamps,
            epoch,
            seqno,
            durable_upper,
            fenced_by,
            broken: _,
        } = &*inst;
        OracleSnapshot {
            timeline: self.config.timeline.clone(),
            epoch: *epoch,
            seqno: seqno.0,
            read_ts: timestamps.read_ts(),
            write_ts: timestamps.peek_write_ts(),
            durable_upper: *durable_upper,
            persist_interval_ms: self.config.persist_interval_ms,
            confirm_leadership: self.config.confirm_leadership,
            fenced_by: *fenced_by,
            allocating: self.allocating.get(),
            stats: self.stats.get(),
        }
    }

    /// The permanent error that broke this instance, if one did (see the module docs): every
    /// call answers it.
    pub fn broken(&self) -> Option<OracleError> {
        self.instance.borrow().broken.clone()
    }

    /// The counters.
    pub fn stats(&self) -> OracleStats {
        self.stats.get()
    }

    /// The configuration.
    pub fn config(&self) -> &DurableOracleConfig {
        &self.config
    }

    /// The recorded events, oldest first (at most `event_capacity`).
    pub fn events(&self) -> Vec<OracleEvent> {
        self.events.events()
    }

    /// Takes the recorded events, oldest first, emptying the log.
    pub fn take_events(&self) -> Vec<OracleEvent> {
        self.events.take()
    }

    /// The event log itself (numbered; share its numbering with other logs through
    /// [`EventLog::sharing_seq`] on theirs).
    pub fn event_log(&self) -> &EventLog<OracleEvent> {
        &self.events
    }

    /// Waits out the back-off after a transient storage error (recorded and counted). A
    /// permanent one is not retried: it comes back as [`OracleError::Storage`].
    async fn retry_wait(
        &self,
        op: &str,
        err: &ExternalError,
        backoff: &mut Backoff,
    ) -> Result<(), OracleError> {
        if let Some(permanent) = err.as_permanent() {
            return Err(self.storage_broken(permanent));
        }
        self.count(|s| s.storage_retries += 1);
        self.record(OracleEventKind::StorageRetry {
            op: op.to_string(),
            error: err.to_string(),
            indeterminate: err.is_indeterminate(),
            backoff_ms: backoff.peek_ms(),
        });
        backoff.wait(&self.runtime).await;
        Ok(())
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(self.config.initial_backoff_ms, self.config.max_backoff_ms)
    }

    fn storage_broken(&self, source: &PermanentError) -> OracleError {
        OracleError::Storage {
            timeline: self.config.timeline.clone(),
            source: source.clone(),
        }
    }

    /// The seqno after `expected` (which came from the store), checked: none is left past
    /// [`SeqNo::maximum`].
    fn next_seqno(&self, expected: Option<SeqNo>) -> Result<SeqNo, OracleError> {
        let next = match expected {
            None => Some(SeqNo(1)),
            Some(seqno) => seqno.0.checked_add(1).map(SeqNo),
        };
        match next {
            Some(next) if next <= SeqNo::maximum() => Ok(next),
            _ => Err(self.inconsistent(format!(
                "no seqno is left after {}",
                expected.unwrap_or_default()
            ))),
        }
    }

    /// Fails if this instance is broken (a permanent error was found) or fenced.
    fn check_usable(&self) -> Result<(), OracleError> {
        let inst = self.instance.borrow();
        if let Some(err) = &inst.broken {
            return Err(err.clone());
        }
        match inst.fenced_by {
            Some(current_epoch) => {
                drop(inst);
                Err(self.fenced(current_epoch))
            }
            None => Ok(()),
        }
    }

    /// Passes `result` on; a permanent error breaks the instance for good, so that no later call
    /// touches the store.
    fn note<T>(&self, result: Result<T, OracleError>) -> Result<T, OracleError> {
        if let Err(err) = &result {
            if err.is_permanent() {
                self.instance
                    .borrow_mut()
                    .broken
                    .get_or_insert_with(|| err.clone());
            }
        }
        result
    }

    fn fenced(&self, current_epoch: u64) -> OracleError {
        OracleError::Fenced {
            timeline: self.config.timeline.clone(),
            epoch: self.instance.borrow().epoch,
            current_epoch,
        }
    }

    fn inconsistent(&self, reason: String) -> OracleError {
        OracleError::Inconsistent {
            timeline: self.config.timeline.clone(),
            reason,
        }
    }

    fn count(&self, f: impl FnOnce(&mut OracleStats)) {
        let mut stats = self.stats.get();
        f(&mut stats);
        self.stats.set(stats);
    }

    fn record(&self, kind: OracleEventKind) {
        self.events.record(|| OracleEvent {
            at_ms: self.runtime.now_ms(),
            timeline: self.config.timeline.clone(),
            epoch: self.instance.borrow().epoch,
            kind,
        });
    }
}

#[async_trait(?Send)]
impl TimestampOracle for DurableTimestampOracle {
    async fn write_ts(&self) -> Result<WriteTimestamp, OracleError> {
        let result = self.serve_write_ts().await;
        self.note(result)
    }

    async fn peek_write_ts(&self) -> Result<u64, OracleError> {
        self.check_usable()?;
        Ok(self.instance.borrow().timestamps.peek_write_ts())
    }

    async fn read_ts(&self) -> Result<u64, OracleError> {
        let result = self.serve_read_ts().await;
        self.note(result)
    }

    async fn apply_write(&self, lower_bound: u64) -> Result<(), OracleError> {
        let result = self.serve_apply_write(lower_bound).await;
        self.note(result)
    }
}

impl DurableTimestampOracle {
    async fn serve_write_ts(&self) -> Result<WriteTimestamp, OracleError> {
        self.check_usable()?;
        if self.config.confirm_leadership {
            self.confirm_leadership().await?;
        }
        // SUBTLE: the clock is read once. Re-reading it after an allocation could ask for a new
        // window every time if allocations took longer than an interval; a reading taken during
        // the call is as good as any for `max(previous + 1, now)`.
        let now = self.now.now();
        loop {
            let needed = {
                let mut inst = self.instance.borrow_mut();
                let next = inst.timestamps.next_write_ts(now)?;
                if covers(inst.durable_upper, next) {
                    let w = inst.timestamps.write_ts(now)?;
                    assert!(
                        covers(inst.durable_upper, w.timestamp),
                        "a write timestamp {} beyond the durable upper {}",
                        w.timestamp,
                        inst.durable_upper
                    );
                    drop(inst);
                    self.count(|s| s.write_timestamps += 1);
                    return Ok(w);
                }
                next
            };
            self.allocate(needed).await?;
        }
    }

    async fn serve_read_ts(&self) -> Result<u64, OracleError> {
        self.check_usable()?;
        if self.config.confirm_leadership {
            self.confirm_leadership().await?;
        }
        let inst = self.instance.borrow();
        let read_ts = inst.timestamps.read_ts();
        assert!(
            covers(inst.durable_upper, read_ts) && read_ts <= inst.timestamps.peek_write_ts(),
            "read_ts {read_ts} must be <= write_ts {} < durable upper {}",
            inst.timestamps.peek_write_ts(),
            inst.durable_upper
        );
        Ok(read_ts)
    }

    async fn serve_apply_write(&self, lower_bound: u64) -> Result<(), OracleError> {
        self.check_usable()?;
        loop {
            {
                let mut inst = self.instance.borrow_mut();
                // SUBTLE: the window is made durable *before* the read timestamp moves, so a
                // call cancelled in between leaves nothing handed out beyond the durable upper.
                if covers(inst.durable_upper, lower_bound) {
                    inst.timestamps.apply_write(lower_bound);
                    return Ok(());
                }
            }
            self.allocate(lower_bound).await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::location::mem::MemConsensus;
    use crate::oracle::conformance::timestamp_oracle_impl_test;
    use crate::runtime::sim::Simulator;

    #[test]
    fn durable_conformance_over_mem() {
        let sim = Simulator::new(1);
        let rt = sim.runtime();
        let consensus = MemConsensus::new();
        sim.block_on(timestamp_oracle_impl_test(
            move |timeline, now, initially| {
                let (consensus, rt) = (consensus.clone(), rt.clone());
                async move {
                    let config = DurableOracleConfig::new(timeline).persist_interval_ms(3);
                    let oracle = DurableTimestampOracle::open(
                        Rc::new(consensus),
                        rt,
                        now,
                        initially,
                        config,
                    )
                    .await?;
                    Ok(Rc::new(oracle) as Rc<dyn TimestampOracle>)
                }
            },
        ))
        .unwrap()
        .unwrap();
    }

    #[test]
    fn covers_saturates() {
        assert!(covers(10, 9));
        assert!(!covers(10, 10));
        assert!(covers(u64::MAX, u64::MAX));
    }

    #[test]
    fn bad_config_is_an_error() {
        let sim = Simulator::new(2);
        let rt = sim.runtime();
        let err = sim
            .block_on(async move {
                let config = DurableOracleConfig::new("t").persist_interval_ms(0);
                DurableTimestampOracle::open(
                    Rc::new(MemConsensus::new()),
                    rt.clone(),
                    NowFn::from_runtime(&rt),
                    0,
                    config,
                )
                .await
                .unwrap_err()
            })
            .unwrap();
        assert!(matches!(err, OracleError::InvalidConfig(_)), "{err}");
    }
}
