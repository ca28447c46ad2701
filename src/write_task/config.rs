//! How a write task behaves: its retry policy, timers and log, and what `desired` starts as.

use serde::{Deserialize, Serialize};

use super::{Row, WriteTaskError, WriteTaskLog};
use crate::retry::Backoff;
use crate::runtime::Runtime;

/// How a write retries (the original: 1 s initial back-off, factor 1.25, clamp 3 s, 20 tries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// The back-off before the second attempt.
    pub initial_backoff_ms: u64,
    /// Each back-off is the previous one times this, in percent.
    pub factor_percent: u64,
    /// The longest back-off.
    pub clamp_backoff_ms: u64,
    /// Attempts per write, at least 1.
    pub max_tries: u32,
}

impl RetryPolicy {
    /// The policy's waits as the crate's one back-off: `initial_backoff_ms`, then each the
    /// previous times `factor_percent / 100`, at most `clamp_backoff_ms`.
    pub fn backoff(&self) -> Backoff {
        Backoff::new(self.initial_backoff_ms, self.clamp_backoff_ms)
            .with_factor_percent(self.factor_percent)
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial_backoff_ms: 1_000,
            factor_percent: 125,
            clamp_backoff_ms: 3_000,
            max_tries: 20,
        }
    }
}

/// Knobs and the environment of a task.
#[derive(Clone)]
pub struct WriteTaskConfig {
    /// Timers and spawning.
    pub runtime: Runtime,
    /// The upper tick's period (the original: 1 s).
    pub upper_tick_interval_ms: u64,
    /// After a write for commands, the task waits until this long after it started, so that
    /// commands arriving meanwhile batch into one write (the original's
    /// `STORAGE_MANAGED_COLLECTIONS_BATCH_DURATION_DEFAULT`).
    pub batch_duration_ms: u64,
    /// Retries of one write.
    pub retry: RetryPolicy,
    /// The bound on one attempt (a `compare_and_append`, or the snapshot of a re-sync).
    pub attempt_timeout_ms: u64,
    /// Where events go. Several tasks may share one log.
    pub log: WriteTaskLog,
}

impl WriteTaskConfig {
    /// The original's settings on `runtime`, with a new, enabled log.
    pub fn new(runtime: Runtime) -> Self {
        WriteTaskConfig {
            runtime,
            upper_tick_interval_ms: 1_000,
            batch_duration_ms: 1_000,
            retry: RetryPolicy::default(),
            attempt_timeout_ms: 30_000,
            log: WriteTaskLog::new(),
        }
    }

    pub(super) fn validate(&self) -> Result<(), WriteTaskError> {
        let bad = |m: &str| Err(WriteTaskError::InvalidConfig(m.to_string()));
        if self.upper_tick_interval_ms == 0 {
            return bad("upper_tick_interval_ms must be at least 1");
        }
        if self.attempt_timeout_ms == 0 {
            return bad("attempt_timeout_ms must be at least 1");
        }
        if self.retry.max_tries == 0 {
            return bad("retry.max_tries must be at least 1");
        }
        if self.retry.factor_percent < 100 {
            return bad("retry.factor_percent must be at least 100 (back-off never shrinks)");
        }
        Ok(())
    }
}

/// What `desired` starts as, before the task writes (the original's per-introspection-type
/// `prepare`).
#[derive(Default)]
pub enum InitialDesired {
    /// Empty: the first write retracts whatever the shard holds, and the driver sends the full
    /// desired state as commands (most differential introspection collections).
    #[default]
    Empty,
    /// The shard's current contents, consolidated, keeping the rows `retain` accepts (collections
    /// whose state carries over a restart, like the original's statistics, which seed their
    /// scrapers from the shard). Rows not kept are retracted by the first write.
    FromShard {
        /// Which rows to keep.
        retain: Box<dyn Fn(&Row) -> bool>,
    },
}

/// What `prepare` does before the first write (never in read-only mode).
#[derive(Default)]
pub struct DifferentialIntrospectionConfig {
    /// The initial `desired`.
    pub initial_desired: InitialDesired,
}
