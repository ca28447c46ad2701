//! The oracle's pure state: a read timestamp and a write timestamp, and the transitions on them.
//!
//! No clock, no I/O: `now` is an argument. Both oracles ([`super::InMemoryTimestampOracle`] and
//! [`super::DurableTimestampOracle`]) keep one of these and differ only in what they do around it.

use serde::Serialize;

use super::{OracleError, WriteTimestamp};

/// The read and write timestamps of one timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TimestampState {
    // Invariant: read_ts <= write_ts. Both only ever go up.
    read_ts: u64,
    write_ts: u64,
}

impl TimestampState {
    /// A timeline whose read and write timestamps both start at `initially`.
    pub fn new(initially: u64) -> Self {
        TimestampState {
            read_ts: initially,
            write_ts: initially,
        }
    }

    /// The current read timestamp: at least every applied write, below every later write
    /// timestamp.
    pub fn read_ts(&self) -> u64 {
        self.read_ts
    }

    /// The latest write timestamp, not advanced.
    pub fn peek_write_ts(&self) -> u64 {
        self.write_ts
    }

    /// The timestamp [`TimestampState::write_ts`] would hand out at `now`, without handing it
    /// out: `max(write_ts + 1, now)`.
    ///
    /// It is an [`OracleError::Exhausted`] error if that timestamp would be `u64::MAX`, which
    /// leaves no room for its `advance_to`.
    pub fn next_write_ts(&self, now: u64) -> Result<u64, OracleError> {
        let exhausted = OracleError::Exhausted {
            write_ts: self.write_ts,
        };
        let next = self.write_ts.checked_add(1).ok_or(exhausted.clone())?;
        let next = next.max(now);
        if next == u64::MAX {
            return Err(exhausted);
        }
        Ok(next)
    }

    /// Hands out the next write timestamp at `now` (see [`TimestampState::next_write_ts`]).
    /// On error nothing changes.
    pub fn write_ts(&mut self, now: u64) -> Result<WriteTimestamp, OracleError> {
        let timestamp = self.next_write_ts(now)?;
        assert!(
            self.read_ts < timestamp && self.write_ts < timestamp,
            "a write timestamp must be above every earlier read and write timestamp: \
             read {} write {} new {timestamp}",
            self.read_ts,
            self.write_ts
        );
        self.write_ts = timestamp;
        Ok(WriteTimestamp {
            timestamp,
            // `next_write_ts` never returns u64::MAX.
            advance_to: timestamp + 1,
        })
    }

    /// Marks a write at `lower_bound` complete: afterwards `read_ts >= lower_bound` and
    /// `write_ts >= lower_bound`. Lower values change nothing.
    pub fn apply_write(&mut self, lower_bound: u64) {
        if self.read_ts < lower_bound {
            self.read_ts = lower_bound;
            self.write_ts = self.write_ts.max(lower_bound);
        }
        debug_assert!(self.read_ts <= self.write_ts, "read_ts <= write_ts");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_ts_tracks_the_clock_and_never_repeats() {
        let mut s = TimestampState::new(0);
        assert_eq!(s.write_ts(100).unwrap().timestamp, 100);
        assert_eq!(s.write_ts(100).unwrap().timestamp, 101);
        // The clock went back: timestamps still go up by one.
        let w = s.write_ts(50).unwrap();
        assert_eq!((w.timestamp, w.advance_to), (102, 103));
        assert_eq!(s.write_ts(500).unwrap().timestamp, 500);
        assert_eq!(s.read_ts(), 0, "write_ts alone does not move reads");
        assert_eq!(s.peek_write_ts(), 500);
    }

    #[test]
    fn apply_write_raises_both() {
        let mut s = TimestampState::new(10);
        s.apply_write(5);
        assert_eq!((s.read_ts(), s.peek_write_ts()), (10, 10));
        s.write_ts(0).unwrap();
        s.write_ts(0).unwrap();
        s.apply_write(11);
        assert_eq!((s.read_ts(), s.peek_write_ts()), (11, 12));
        s.apply_write(20);
        assert_eq!((s.read_ts(), s.peek_write_ts()), (20, 20));
        assert_eq!(s.write_ts(0).unwrap().timestamp, 21);
    }

    #[test]
    fn exhaustion_is_an_error_not_a_panic() {
        let mut s = TimestampState::new(u64::MAX);
        assert_eq!(
            s.write_ts(0),
            Err(OracleError::Exhausted { write_ts: u64::MAX })
        );
        let mut s = TimestampState::new(0);
        assert_eq!(
            s.write_ts(u64::MAX).unwrap_err(),
            OracleError::Exhausted { write_ts: 0 }
        );
        let w = s.write_ts(u64::MAX - 1).unwrap();
        assert_eq!((w.timestamp, w.advance_to), (u64::MAX - 1, u64::MAX));
        assert!(s.write_ts(0).is_err());
        assert_eq!(
            s.peek_write_ts(),
            u64::MAX - 1,
            "a failed write_ts changes nothing"
        );
        s.apply_write(u64::MAX);
        assert_eq!((s.read_ts(), s.peek_write_ts()), (u64::MAX, u64::MAX));
    }
}
