//! The [`TimestampOracle`] contract as an executable suite, run against every implementation:
//! natively for the in-memory oracle and the durable one over in-memory (and fault-injecting)
//! Consensus, in headless Chrome for the durable one over IndexedDB.
//!
//! `open(timeline, now, initially)` must return a new oracle for a timeline that has never been
//! used, tracking the clock `now`, whose read and write timestamps start at `initially`. Each
//! scenario uses a fresh timeline. A broken contract panics naming the scenario; an unexpected
//! oracle error is returned.

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;

use super::{NowFn, OracleError, TimestampOracle, WriteTimestamp};

/// Runs every scenario against the oracles `open` returns.
///
/// Scenarios (the first six follow the original's suite):
/// 1. initially `0`: read and peek give `0`;
/// 2. initially `u64::MAX`: read and peek give `u64::MAX`, and `write_ts` is an
///    [`OracleError::Exhausted`] error that changes nothing;
/// 3. a clock at `u64::MAX - 1`: `write_ts` gives `u64::MAX - 1` (advance_to `u64::MAX`) while
///    the read timestamp stays, and the next `write_ts` is exhausted;
/// 4. successive `write_ts` give 1, 2 (clock at 0), with `advance_to = timestamp + 1`;
/// 5. `peek_write_ts` does not advance;
/// 6. `apply_write(x)` with `x <= read <= write` changes nothing; with `read <= x <= write` sets
///    read to `x`; with `write <= x` sets both to `x`;
/// 7. `write_ts` tracks a moving clock as `max(previous + 1, now)`, also when the clock goes
///    back;
/// 8. reads stay below every later write and at or above every applied write, and never go back.
pub async fn timestamp_oracle_impl_test<F, Fut>(mut open: F) -> Result<(), OracleError>
where
    F: FnMut(String, NowFn, u64) -> Fut,
    Fut: Future<Output = Result<Rc<dyn TimestampOracle>, OracleError>>,
{
    let mut timelines = 0u32;
    let mut fresh = move || {
        timelines += 1;
        format!("conformance-{timelines}")
    };
    let zero = || NowFn::constant(0);

    // 1. Initially the minimum.
    let oracle = open(fresh(), zero(), 0).await?;
    assert_eq!(oracle.read_ts().await?, 0, "1: read_ts of a new timeline");
    assert_eq!(
        oracle.peek_write_ts().await?,
        0,
        "1: peek of a new timeline"
    );

    // 2. Initially the maximum.
    let oracle = open(fresh(), zero(), u64::MAX).await?;
    assert_eq!(oracle.read_ts().await?, u64::MAX, "2: read_ts");
    assert_eq!(oracle.peek_write_ts().await?, u64::MAX, "2: peek");
    assert_eq!(
        oracle.write_ts().await,
        Err(OracleError::Exhausted { write_ts: u64::MAX }),
        "2: no write timestamp above the maximum"
    );
    assert_eq!(oracle.peek_write_ts().await?, u64::MAX, "2: unchanged");
    assert_eq!(oracle.read_ts().await?, u64::MAX, "2: unchanged");

    // 3. A clock at the maximum minus one.
    let oracle = open(fresh(), NowFn::constant(u64::MAX - 1), 0).await?;
    assert_eq!(oracle.read_ts().await?, 0, "3: read_ts before any write");
    assert_eq!(oracle.peek_write_ts().await?, 0, "3: peek before any write");
    assert_eq!(
        oracle.write_ts().await?,
        WriteTimestamp {
            timestamp: u64::MAX - 1,
            advance_to: u64::MAX
        },
        "3: write_ts jumps to the clock"
    );
    assert_eq!(oracle.read_ts().await?, 0, "3: read_ts stays");
    assert_eq!(oracle.peek_write_ts().await?, u64::MAX - 1, "3: peek moved");
    assert!(
        matches!(oracle.write_ts().await, Err(OracleError::Exhausted { .. })),
        "3: nothing is left above u64::MAX - 1"
    );

    // 4. Successive write timestamps.
    let oracle = open(fresh(), zero(), 0).await?;
    for expected in 1..=2 {
        let w = oracle.write_ts().await?;
        assert_eq!(w.timestamp, expected, "4: successive write_ts");
        assert_eq!(w.advance_to, expected + 1, "4: advance_to");
    }

    // 5. Peeking does not advance.
    let oracle = open(fresh(), zero(), 0).await?;
    assert_eq!(oracle.peek_write_ts().await?, 0, "5: peek");
    assert_eq!(oracle.peek_write_ts().await?, 0, "5: peek again");

    // 6. apply_write, case by case.
    let oracle = open(fresh(), zero(), 10).await?;
    oracle.apply_write(5).await?;
    assert_eq!(oracle.peek_write_ts().await?, 10, "6a: input <= r <= w");
    assert_eq!(oracle.read_ts().await?, 10, "6a: input <= r <= w");

    let oracle = open(fresh(), zero(), 0).await?;
    for expected in 1..=4 {
        assert_eq!(oracle.write_ts().await?.timestamp, expected, "6b: setup");
    }
    oracle.apply_write(2).await?;
    assert_eq!(oracle.peek_write_ts().await?, 4, "6b: r <= input <= w");
    assert_eq!(oracle.read_ts().await?, 2, "6b: r <= input <= w");

    let oracle = open(fresh(), zero(), 0).await?;
    oracle.apply_write(2).await?;
    assert_eq!(oracle.peek_write_ts().await?, 2, "6c: w <= input");
    assert_eq!(oracle.read_ts().await?, 2, "6c: w <= input");
    oracle.apply_write(4).await?;
    assert_eq!(oracle.peek_write_ts().await?, 4, "6c: w <= input");
    assert_eq!(oracle.read_ts().await?, 4, "6c: w <= input");

    // 7. Tracking a clock that moves, also backwards.
    let clock = Rc::new(Cell::new(100u64));
    let c = Rc::clone(&clock);
    let oracle = open(fresh(), NowFn::new(move || c.get()), 0).await?;
    assert_eq!(oracle.write_ts().await?.timestamp, 100, "7: the clock");
    assert_eq!(oracle.write_ts().await?.timestamp, 101, "7: previous + 1");
    clock.set(50);
    assert_eq!(
        oracle.write_ts().await?.timestamp,
        102,
        "7: clock went back"
    );
    clock.set(5_000);
    assert_eq!(oracle.write_ts().await?.timestamp, 5_000, "7: clock jumped");
    assert_eq!(
        oracle.read_ts().await?,
        0,
        "7: unapplied writes are not read"
    );

    // 8. Reads between writes.
    let oracle = open(fresh(), zero(), 0).await?;
    let mut last_read = oracle.read_ts().await?;
    for round in 0..5 {
        let w = oracle.write_ts().await?;
        assert!(
            w.timestamp > last_read,
            "8.{round}: write above earlier reads"
        );
        let r = oracle.read_ts().await?;
        assert!(r >= last_read, "8.{round}: reads never go back");
        assert!(
            r < w.timestamp,
            "8.{round}: a read before apply is below the write"
        );
        oracle.apply_write(w.timestamp).await?;
        let r = oracle.read_ts().await?;
        assert_eq!(r, w.timestamp, "8.{round}: a read sees the applied write");
        let next = oracle.write_ts().await?;
        assert!(next.timestamp > r, "8.{round}: write above the read");
        last_read = r;
    }

    Ok(())
}
