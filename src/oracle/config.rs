//! How a [`DurableTimestampOracle`](super::DurableTimestampOracle) behaves: its configuration
//! and the constants of the window protocol and the clock guard (see the `durable`
//! module docs).

use serde::Serialize;

use super::OracleError;

/// The original's allocation interval: 5 s of timestamps per durable write.
pub const DEFAULT_PERSIST_INTERVAL_MS: u64 = 5_000;
/// The clock guard waits while the stored upper is more than this many intervals ahead of now.
pub const CLOCK_GUARD_INTERVALS: u64 = 2;
/// The longest single wait of the clock guard.
pub const CLOCK_GUARD_STEP_MS: u64 = 1_000;
/// The prefix of every oracle key in Consensus.
pub const KEY_PREFIX: &str = "timestamp_oracle/";

/// How a [`DurableTimestampOracle`](super::DurableTimestampOracle) behaves. Build one with [`DurableOracleConfig::new`] and the
/// setters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DurableOracleConfig {
    /// The timeline; its record lives at [`DurableTimestampOracle::consensus_key`](super::DurableTimestampOracle::consensus_key).
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

    pub(super) fn validate(&self) -> Result<(), OracleError> {
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
