//! An oracle instance without its durable bound.
//!
//! [`DurableTimestampOracle`] hands out no timestamp at or beyond its durable upper before it has
//! made a new window durable; that is what lets a restarted instance resume above everything
//! ever handed out. This variant opens a durable instance as usual (bumping the epoch and making
//! its first window durable), then serves every timestamp from memory, past that window, and
//! never allocates again. After a crash, the next instance resumes at the one window that was
//! stored: below the timestamps this one handed out once the timeline ran ahead of the clock.

use crate::oracle::{DurableTimestampOracle, InMemoryTimestampOracle, NowFn};

/// Takes over from `opened` (just opened): an oracle in memory from its start, on `now`, that
/// the actor serves from instead (see the module docs).
pub fn unbounded(opened: &DurableTimestampOracle, now: NowFn) -> InMemoryTimestampOracle {
    let s = opened.snapshot();
    InMemoryTimestampOracle::new(s.write_ts.max(s.read_ts), now)
}
