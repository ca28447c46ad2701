//! An oracle instance without its durable bound.
//!
//! [`DurableTimestampOracle`] hands out no timestamp at or beyond its durable upper before it has
//! made a new window durable; that is what lets a restarted instance resume above everything
//! ever handed out. This variant opens a durable instance as usual (bumping the epoch and making
//! its first window durable), then serves every timestamp from memory, past that window, and
//! never allocates again. After a crash, the next instance resumes at the one window that was
//! stored: below the timestamps this one handed out once the timeline ran ahead of the clock.

use std::cell::Cell;

use async_trait::async_trait;

use crate::oracle::{
    DurableTimestampOracle, InMemoryTimestampOracle, NowFn, OracleError, TimestampOracle,
    TimestampState, WriteTimestamp,
};

/// See the module docs.
pub struct UnboundedOracle {
    memory: InMemoryTimestampOracle,
    handed_out: Cell<u64>,
}

impl UnboundedOracle {
    /// Takes over from `opened` (just opened): serves from its start, from memory, on `now`.
    pub fn new(opened: &DurableTimestampOracle, now: NowFn) -> Self {
        let s = opened.snapshot();
        UnboundedOracle {
            memory: InMemoryTimestampOracle::new(s.write_ts.max(s.read_ts), now),
            handed_out: Cell::new(0),
        }
    }

    /// What it has handed out.
    pub fn state(&self) -> TimestampState {
        self.memory.state()
    }

    /// Write timestamps handed out.
    pub fn handed_out(&self) -> u64 {
        self.handed_out.get()
    }
}

#[async_trait(?Send)]
impl TimestampOracle for UnboundedOracle {
    async fn write_ts(&self) -> Result<WriteTimestamp, OracleError> {
        let w = self.memory.write_ts().await?;
        self.handed_out.set(self.handed_out.get() + 1);
        Ok(w)
    }

    async fn peek_write_ts(&self) -> Result<u64, OracleError> {
        self.memory.peek_write_ts().await
    }

    async fn read_ts(&self) -> Result<u64, OracleError> {
        self.memory.read_ts().await
    }

    async fn apply_write(&self, lower_bound: u64) -> Result<(), OracleError> {
        self.memory.apply_write(lower_bound).await
    }
}
