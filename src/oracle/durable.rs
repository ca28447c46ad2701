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
//! [`DurableRecord`] `{epoch, upper}` (a small versioned binary format; bad bytes are an
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
use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;

use async_trait::async_trait;
use serde::Serialize;

use super::{DurableRecord, NowFn, OracleError, TimestampOracle, TimestampState, WriteTimestamp};
use crate::location::{CaSResult, Consensus, ExternalError, SeqNo, VersionedData};
use crate::runtime::Runtime;

/// The original's allocation interval: 5 s of timestamps per durable write.
pub const DEFAULT_PERSIST_INTERVAL_MS: u64 = 5_000;
/// The clock guard waits while the stored upper is more than this many intervals ahead of now.
pub const CLOCK_GUARD_INTERVALS: u64 = 2;
/// The longest single wait of the clock guard.
pub const CLOCK_GUARD_STEP_MS: u64 = 1_000;
/// The prefix of every oracle key in Consensus.
pub const KEY_PREFIX: &str = "timestamp_oracle/";

/// How a [`DurableTimestampOracle`] behaves. Build one with [`DurableOracleConfig::new`] and the
/// setters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DurableOracleConfig {
    /// The timeline; its record lives at [`DurableTimestampOracle::consensus_key`].
    pub timeline: String,
    /// The size of a window of timestamps served from memory per durable write. At least 1.
    pub persist_interval_ms: u64,
    /// Check the epoch (one Consensus read) before every `write_ts` and `read_ts`.
    pub confirm_leadership: bool,
    /// The clock guard's total bound at start; 0 never waits (the event is still recorded).
    pub clock_guard_max_wait_ms: u64,
    /// The first back-off after a storage error.
    pub initial_backoff_ms: u64,
    /// The longest back-off.
    pub max_backoff_ms: u64,
    /// How many events the log keeps (the oldest are dropped first).
    pub event_capacity: usize,
}

impl DurableOracleConfig {
    /// The defaults for `timeline`: a 5 s interval, no leadership check, a 10 s clock guard and
    /// back-off from 4 ms to 1 s.
    pub fn new(timeline: impl Into<String>) -> Self {
        DurableOracleConfig {
            timeline: timeline.into(),
            persist_interval_ms: DEFAULT_PERSIST_INTERVAL_MS,
            confirm_leadership: false,
            clock_guard_max_wait_ms: 10_000,
            initial_backoff_ms: 4,
            max_backoff_ms: 1_000,
            event_capacity: 256,
        }
    }

    /// Sets [`DurableOracleConfig::persist_interval_ms`].
    pub fn persist_interval_ms(mut self, ms: u64) -> Self {
        self.persist_interval_ms = ms;
        self
    }

    /// Sets [`DurableOracleConfig::confirm_leadership`].
    pub fn confirm_leadership(mut self, on: bool) -> Self {
        self.confirm_leadership = on;
        self
    }

    /// Sets [`DurableOracleConfig::clock_guard_max_wait_ms`].
    pub fn clock_guard_max_wait_ms(mut self, ms: u64) -> Self {
        self.clock_guard_max_wait_ms = ms;
        self
    }

    /// Sets the back-off bounds.
    pub fn backoff_ms(mut self, initial_ms: u64, max_ms: u64) -> Self {
        self.initial_backoff_ms = initial_ms;
        self.max_backoff_ms = max_ms;
        self
    }

    fn validate(&self) -> Result<(), OracleError> {
        if self.persist_interval_ms == 0 {
            return Err(OracleError::InvalidConfig(
                "persist_interval_ms must be at least 1".into(),
            ));
        }
        if self.initial_backoff_ms == 0 || self.max_backoff_ms < self.initial_backoff_ms {
            return Err(OracleError::InvalidConfig(format!(
                "back-off must satisfy 1 <= initial ({}) <= max ({})",
                self.initial_backoff_ms, self.max_backoff_ms
            )));
        }
        Ok(())
    }
}

/// One thing a [`DurableTimestampOracle`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OracleEvent {
    /// The runtime's clock when it happened.
    pub at_ms: u64,
    /// The timeline.
    pub timeline: String,
    /// The instance's epoch (0 while it is still opening).
    pub epoch: u64,
    /// What happened.
    pub kind: OracleEventKind,
}

/// What a [`OracleEvent`] records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type")]
pub enum OracleEventKind {
    /// The instance started: it took its epoch and its first window.
    Opened {
        /// The stored upper it resumed at, if the timeline existed.
        resumed_from: Option<u64>,
        /// Its first read and write timestamp.
        start_ts: u64,
        /// Its first durable upper.
        durable_upper: u64,
        /// The seqno it wrote.
        seqno: u64,
    },
    /// Another instance wrote between this one's read and its compare_and_set at start.
    OpenConflict {
        /// The seqno this instance expected.
        expected_seqno: Option<u64>,
    },
    /// A new window was made durable.
    Allocated {
        /// The timestamp the window was needed for.
        for_ts: u64,
        /// The new durable upper.
        durable_upper: u64,
        /// The seqno written.
        seqno: u64,
    },
    /// A write of this instance that it had not heard about (a timed-out or cancelled
    /// compare_and_set that landed) was found in the store and adopted.
    AdoptedOwnWrite {
        /// Its seqno.
        seqno: u64,
        /// Its durable upper.
        durable_upper: u64,
    },
    /// Old versions of the key were deleted.
    Truncated {
        /// Every version below this seqno is gone.
        below_seqno: u64,
        /// How many were deleted.
        deleted: u64,
    },
    /// A truncation failed; the next allocation tries again.
    TruncateFailed {
        /// The error.
        error: String,
    },
    /// A storage call failed and will be retried after a back-off.
    StorageRetry {
        /// The call (`head`, `compare_and_set`).
        op: String,
        /// The error.
        error: String,
        /// Whether the call may have happened.
        indeterminate: bool,
        /// The back-off before the retry.
        backoff_ms: u64,
    },
    /// Another instance took over: this one hands out nothing more.
    Fenced {
        /// The epoch found in the store.
        current_epoch: u64,
    },
    /// The stored upper is more than two intervals ahead of the clock: waiting.
    ClockGuardWait {
        /// The stored upper.
        stored_upper: u64,
        /// The oracle's clock.
        now_ms: u64,
        /// This wait.
        wait_ms: u64,
    },
    /// The clock guard reached its bound with the clock still far behind; starting anyway.
    ClockGuardGaveUp {
        /// The stored upper.
        stored_upper: u64,
        /// The oracle's clock.
        now_ms: u64,
        /// The total wait.
        waited_ms: u64,
    },
}

/// Counters of what an instance did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OracleStats {
    /// Write timestamps handed out.
    pub write_timestamps: u64,
    /// compare_and_sets this instance saw commit (its start included).
    pub durable_writes: u64,
    /// compare_and_sets attempted.
    pub cas_attempts: u64,
    /// Unheard own writes found and adopted.
    pub adopted_own_writes: u64,
    /// Storage errors retried.
    pub storage_retries: u64,
    /// Leadership checks (Consensus reads) made by `write_ts`, `read_ts` or on request.
    pub leadership_checks: u64,
    /// Old versions deleted.
    pub truncated_versions: u64,
    /// Clock guard waits.
    pub clock_guard_waits: u64,
}

/// A plain description of an instance, for display.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OracleSnapshot {
    /// The timeline.
    pub timeline: String,
    /// This instance's epoch.
    pub epoch: u64,
    /// The seqno of the latest version this instance knows it wrote.
    pub seqno: u64,
    /// The read timestamp.
    pub read_ts: u64,
    /// The latest write timestamp.
    pub write_ts: u64,
    /// The durable upper this instance knows of.
    pub durable_upper: u64,
    /// The window size.
    pub persist_interval_ms: u64,
    /// Whether calls check the epoch first.
    pub confirm_leadership: bool,
    /// The epoch that fenced this instance, once it knows.
    pub fenced_by: Option<u64>,
    /// Whether an allocation is in flight.
    pub allocating: bool,
    /// The counters.
    pub stats: OracleStats,
}

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
}

struct Backoff {
    next_ms: u64,
    max_ms: u64,
}

impl Backoff {
    fn next(&mut self) -> u64 {
        let ms = self.next_ms;
        self.next_ms = ms.saturating_mul(2).min(self.max_ms);
        ms
    }
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
    events: RefCell<VecDeque<OracleEvent>>,
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
        let event_capacity = config.event_capacity;
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
            }),
            config,
            allocation: futures::lock::Mutex::new(()),
            allocating: Cell::new(false),
            stats: Cell::new(OracleStats::default()),
            events: RefCell::new(VecDeque::with_capacity(event_capacity.min(1024))),
        };
        this.start(initially).await?;
        Ok(this)
    }

    async fn start(&self, initially: u64) -> Result<(), OracleError> {
        let interval = self.config.persist_interval_ms;
        let mut backoff = self.backoff();
        let mut guarded = false;
        loop {
            let head = self.read_head(&mut backoff).await?;
            let (expected, previous) = match head {
                Some((seqno, record)) => (Some(seqno), Some(record)),
                None => (None, None),
            };
            if let (false, Some(previous)) = (guarded, previous) {
                self.clock_guard(previous.upper).await;
            }
            guarded = true;
            let start_ts = previous.map_or(initially, |p| p.upper.max(initially));
            let epoch = match previous {
                None => 1,
                Some(p) => p.epoch.checked_add(1).ok_or_else(|| {
                    self.inconsistent(format!("epoch {} cannot be bumped", p.epoch))
                })?,
            };
            let record = DurableRecord {
                epoch,
                upper: start_ts.saturating_add(interval),
            };
            let seqno = self.next_seqno(expected)?;
            let new = VersionedData {
                seqno,
                data: record.encode(),
            };
            self.count(|s| s.cas_attempts += 1);
            match self
                .consensus
                .compare_and_set(&self.key, expected, new)
                .await
            {
                Ok(CaSResult::Committed) => {
                    {
                        let mut inst = self.instance.borrow_mut();
                        inst.timestamps = TimestampState::new(start_ts);
                        inst.epoch = epoch;
                        inst.seqno = seqno;
                        inst.durable_upper = record.upper;
                        debug_assert!(covers(record.upper, start_ts));
                    }
                    self.count(|s| s.durable_writes += 1);
                    self.record(OracleEventKind::Opened {
                        resumed_from: previous.map(|p| p.upper),
                        start_ts,
                        durable_upper: record.upper,
                        seqno: seqno.0,
                    });
                    self.truncate(seqno).await;
                    return Ok(());
                }
                Ok(CaSResult::ExpectationMismatch) => {
                    // Another instance wrote in between: read again and bump above it.
                    self.record(OracleEventKind::OpenConflict {
                        expected_seqno: expected.map(|s| s.0),
                    });
                }
                Err(err) => {
                    // SUBTLE: an indeterminate error may hide a commit of `epoch`. We never take
                    // that epoch: the next attempt reads it and bumps above it, fencing the ghost.
                    self.retry_wait("compare_and_set", &err, &mut backoff).await;
                }
            }
        }
    }

    /// While the stored upper is more than two intervals ahead of the clock, waits (bounded).
    async fn clock_guard(&self, stored_upper: u64) {
        let ahead_ms = self
            .config
            .persist_interval_ms
            .saturating_mul(CLOCK_GUARD_INTERVALS);
        let max_wait_ms = self.config.clock_guard_max_wait_ms;
        let started_ms = self.runtime.now_ms();
        loop {
            let now_ms = self.now.now();
            let bound = now_ms.saturating_add(ahead_ms);
            if stored_upper <= bound {
                return;
            }
            let waited_ms = self.runtime.now_ms().saturating_sub(started_ms);
            if waited_ms >= max_wait_ms {
                self.record(OracleEventKind::ClockGuardGaveUp {
                    stored_upper,
                    now_ms,
                    waited_ms,
                });
                return;
            }
            let wait_ms = (stored_upper - bound)
                .min(CLOCK_GUARD_STEP_MS)
                .min(max_wait_ms - waited_ms);
            self.count(|s| s.clock_guard_waits += 1);
            self.record(OracleEventKind::ClockGuardWait {
                stored_upper,
                now_ms,
                wait_ms,
            });
            self.runtime.sleep(wait_ms).await;
        }
    }

    /// Reads the head and checks that this instance still owns the timeline (one Consensus read,
    /// retried on errors). An unheard write of this instance found there is adopted.
    pub async fn confirm_leadership(&self) -> Result<(), OracleError> {
        self.check_fenced()?;
        self.count(|s| s.leadership_checks += 1);
        let mut backoff = self.backoff();
        self.reconcile(&mut backoff).await
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
        self.events.borrow().iter().cloned().collect()
    }

    /// Takes the recorded events, oldest first, emptying the log.
    pub fn take_events(&self) -> Vec<OracleEvent> {
        self.events.borrow_mut().drain(..).collect()
    }

    /// Makes the durable upper cover `needed`, allocating a window if it does not.
    async fn allocate(&self, needed: u64) -> Result<(), OracleError> {
        let _one_at_a_time = self.allocation.lock().await;
        let _allocating = FlagGuard::set(&self.allocating);
        let interval = self.config.persist_interval_ms;
        let mut backoff = self.backoff();
        loop {
            let (epoch, seqno, durable_upper) = {
                let inst = self.instance.borrow();
                (inst.epoch, inst.seqno, inst.durable_upper)
            };
            self.check_fenced()?;
            if covers(durable_upper, needed) {
                return Ok(());
            }
            let record = DurableRecord {
                epoch,
                upper: needed.saturating_add(interval),
            };
            debug_assert!(record.upper > durable_upper, "allocations only go up");
            let next = self.next_seqno(Some(seqno))?;
            let new = VersionedData {
                seqno: next,
                data: record.encode(),
            };
            self.count(|s| s.cas_attempts += 1);
            match self
                .consensus
                .compare_and_set(&self.key, Some(seqno), new)
                .await
            {
                Ok(CaSResult::Committed) => {
                    // A concurrent leadership check may have read and adopted it already.
                    let _ = self.advance_durable(next, record.upper);
                    self.count(|s| s.durable_writes += 1);
                    self.record(OracleEventKind::Allocated {
                        for_ts: needed,
                        durable_upper: record.upper,
                        seqno: next.0,
                    });
                    self.truncate(next).await;
                    return Ok(());
                }
                Ok(CaSResult::ExpectationMismatch) => {
                    // Someone wrote after our last known version: another instance, or an
                    // earlier write of ours that we never heard back from.
                    self.reconcile(&mut backoff).await?;
                }
                Err(err) if err.is_indeterminate() => {
                    // SUBTLE: it may have happened. Read and decide (see the module docs).
                    self.retry_wait("compare_and_set", &err, &mut backoff).await;
                    self.reconcile(&mut backoff).await?;
                }
                Err(err) => {
                    // It did not happen: try again as is.
                    self.retry_wait("compare_and_set", &err, &mut backoff).await;
                }
            }
        }
    }

    /// Reads the head and brings this instance in line with it: fenced if a larger epoch is
    /// there, adopting the head if it carries this instance's epoch.
    async fn reconcile(&self, backoff: &mut Backoff) -> Result<(), OracleError> {
        // SUBTLE: what this instance knows is taken *before* the read. A concurrent allocation of
        // this instance may commit (and advance `seqno`) while the read is in flight, and the
        // read may have seen the store before that commit; only a head below what was known
        // before the read started would be a contradiction.
        let (epoch, known) = {
            let inst = self.instance.borrow();
            (inst.epoch, inst.seqno)
        };
        let head = self.read_head(backoff).await?;
        let Some((seqno, record)) = head else {
            return Err(self.inconsistent(format!(
                "the record vanished (this instance wrote {known} with epoch {epoch})"
            )));
        };
        if record.epoch > epoch {
            self.instance.borrow_mut().fenced_by = Some(record.epoch);
            self.record(OracleEventKind::Fenced {
                current_epoch: record.epoch,
            });
            return Err(self.fenced(record.epoch));
        }
        if record.epoch < epoch || seqno < known {
            return Err(self.inconsistent(format!(
                "went back to epoch {} at {seqno} after this instance wrote epoch {epoch} at {known}",
                record.epoch
            )));
        }
        // Only this instance writes with its epoch: a newer version is its own write, landed
        // unheard (unless a concurrent call of this instance has recorded it meanwhile).
        if seqno > known && self.advance_durable(seqno, record.upper) {
            self.count(|s| s.adopted_own_writes += 1);
            self.record(OracleEventKind::AdoptedOwnWrite {
                seqno: seqno.0,
                durable_upper: record.upper,
            });
        }
        Ok(())
    }

    /// Records that this instance's version `seqno` with `upper` is durable. Returns whether it
    /// was news (newer than the latest version known).
    fn advance_durable(&self, seqno: SeqNo, upper: u64) -> bool {
        let mut inst = self.instance.borrow_mut();
        if seqno <= inst.seqno {
            // Already known, or older than what is: the latest version's upper is the larger.
            return false;
        }
        assert!(
            upper >= inst.durable_upper,
            "a later version of this instance lowered the upper: {} at {seqno} after {} at {}",
            upper,
            inst.durable_upper,
            inst.seqno
        );
        inst.seqno = seqno;
        inst.durable_upper = upper;
        true
    }

    /// Deletes every version below `seqno`, best-effort.
    async fn truncate(&self, seqno: SeqNo) {
        match self.consensus.truncate(&self.key, seqno).await {
            Ok(0) => {}
            Ok(deleted) => {
                let deleted = deleted as u64;
                self.count(|s| s.truncated_versions += deleted);
                self.record(OracleEventKind::Truncated {
                    below_seqno: seqno.0,
                    deleted,
                });
            }
            Err(err) => self.record(OracleEventKind::TruncateFailed {
                error: err.to_string(),
            }),
        }
    }

    /// The head, decoded; storage errors are retried (a read changes nothing).
    async fn read_head(
        &self,
        backoff: &mut Backoff,
    ) -> Result<Option<(SeqNo, DurableRecord)>, OracleError> {
        loop {
            match self.consensus.head(&self.key).await {
                Ok(None) => return Ok(None),
                Ok(Some(v)) => {
                    let record =
                        DurableRecord::decode(&v.data).map_err(|source| OracleError::Decode {
                            timeline: self.config.timeline.clone(),
                            source,
                        })?;
                    return Ok(Some((v.seqno, record)));
                }
                Err(err) => self.retry_wait("head", &err, backoff).await,
            }
        }
    }

    async fn retry_wait(&self, op: &str, err: &ExternalError, backoff: &mut Backoff) {
        let backoff_ms = backoff.next();
        self.count(|s| s.storage_retries += 1);
        self.record(OracleEventKind::StorageRetry {
            op: op.to_string(),
            error: err.to_string(),
            indeterminate: err.is_indeterminate(),
            backoff_ms,
        });
        self.runtime.sleep(backoff_ms).await;
    }

    fn backoff(&self) -> Backoff {
        Backoff {
            next_ms: self.config.initial_backoff_ms,
            max_ms: self.config.max_backoff_ms,
        }
    }

    fn next_seqno(&self, expected: Option<SeqNo>) -> Result<SeqNo, OracleError> {
        let next = expected.map_or(SeqNo(1), SeqNo::next);
        if next > SeqNo::maximum() {
            return Err(self.inconsistent(format!("no seqno is left after {next}")));
        }
        Ok(next)
    }

    fn check_fenced(&self) -> Result<(), OracleError> {
        match self.instance.borrow().fenced_by {
            Some(current_epoch) => Err(self.fenced(current_epoch)),
            None => Ok(()),
        }
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
        let capacity = self.config.event_capacity;
        if capacity == 0 {
            return;
        }
        let event = OracleEvent {
            at_ms: self.runtime.now_ms(),
            timeline: self.config.timeline.clone(),
            epoch: self.instance.borrow().epoch,
            kind,
        };
        let mut events = self.events.borrow_mut();
        while events.len() >= capacity {
            events.pop_front();
        }
        events.push_back(event);
    }
}

#[async_trait(?Send)]
impl TimestampOracle for DurableTimestampOracle {
    async fn write_ts(&self) -> Result<WriteTimestamp, OracleError> {
        self.check_fenced()?;
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

    async fn peek_write_ts(&self) -> Result<u64, OracleError> {
        self.check_fenced()?;
        Ok(self.instance.borrow().timestamps.peek_write_ts())
    }

    async fn read_ts(&self) -> Result<u64, OracleError> {
        self.check_fenced()?;
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

    async fn apply_write(&self, lower_bound: u64) -> Result<(), OracleError> {
        self.check_fenced()?;
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
