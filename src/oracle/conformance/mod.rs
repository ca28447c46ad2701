//! The [`TimestampOracle`] contract as an executable suite, run against every implementation:
//! natively for the in-memory oracle and the durable one over in-memory (and fault-injecting)
//! Consensus, in headless Chrome for the durable one over IndexedDB.
//!
//! `open(timeline, now, initially)` must return a new oracle for a timeline that has never been
//! used, tracking the clock `now`, whose read and write timestamps start at `initially`. Each
//! scenario uses a fresh timeline. A broken contract panics naming the scenario; an unexpected
//! oracle error is returned.
//!
//! For randomized runs, [`History`] records every call made through it (with invocation and
//! response order) and [`check_history`] checks the contract over a whole history, across
//! instances and restarts: the oracle's linearizability checker.
//!
//! Files: this one holds the suite (one function per scenario, run in order by a table);
//! `history.rs` the recorded history and its checker.

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;

use futures::future::LocalBoxFuture;

use super::{NowFn, OracleError, TimestampOracle, WriteTimestamp};

mod history;

pub use history::{check_history, Call, CallKind, History, Violation};

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
pub async fn timestamp_oracle_impl_test<'a, F, Fut>(mut open: F) -> Result<(), OracleError>
where
    F: FnMut(String, NowFn, u64) -> Fut + 'a,
    Fut: Future<Output = Result<Rc<dyn TimestampOracle>, OracleError>> + 'a,
{
    let mut suite = Suite {
        open: Box::new(move |timeline, now, initially| Box::pin(open(timeline, now, initially))),
        timelines: 0,
    };
    for case in CASES {
        case(&mut suite).await?;
    }
    Ok(())
}

/// Opens a new oracle: `(timeline, now, initially)`, as the suite's caller passed it.
type Open<'a> = dyn FnMut(String, NowFn, u64) -> LocalBoxFuture<'a, OpenResult> + 'a;

/// What [`Open`] gives.
type OpenResult = Result<Rc<dyn TimestampOracle>, OracleError>;
/// What every case gets: the opener, and a count of the timelines used so far (each oracle a
/// case opens gets a fresh one).
struct Suite<'a> {
    open: Box<Open<'a>>,
    timelines: u32,
}

impl Suite<'_> {
    /// A new oracle on a fresh timeline.
    async fn open(
        &mut self,
        now: NowFn,
        initially: u64,
    ) -> Result<Rc<dyn TimestampOracle>, OracleError> {
        self.timelines += 1;
        (self.open)(format!("conformance-{}", self.timelines), now, initially).await
    }
}

/// One scenario of the suite.
type Case = for<'x, 'a> fn(&'x mut Suite<'a>) -> LocalBoxFuture<'x, Result<(), OracleError>>;

/// The scenarios, in the order they run (the numbers of [`timestamp_oracle_impl_test`]'s list).
const CASES: [Case; 8] = [
    initially_minimum,
    initially_maximum,
    clock_at_the_maximum,
    successive_write_timestamps,
    peek_does_not_advance,
    apply_write_case_by_case,
    tracking_a_moving_clock,
    reads_between_writes,
];

/// 1. Initially the minimum.
fn initially_minimum<'x, 'a>(s: &'x mut Suite<'a>) -> LocalBoxFuture<'x, Result<(), OracleError>> {
    Box::pin(async move {
        let oracle = s.open(NowFn::constant(0), 0).await?;
        assert_eq!(oracle.read_ts().await?, 0, "1: read_ts of a new timeline");
        assert_eq!(
            oracle.peek_write_ts().await?,
            0,
            "1: peek of a new timeline"
        );
        Ok(())
    })
}

/// 2. Initially the maximum.
fn initially_maximum<'x, 'a>(s: &'x mut Suite<'a>) -> LocalBoxFuture<'x, Result<(), OracleError>> {
    Box::pin(async move {
        let oracle = s.open(NowFn::constant(0), u64::MAX).await?;
        assert_eq!(oracle.read_ts().await?, u64::MAX, "2: read_ts");
        assert_eq!(oracle.peek_write_ts().await?, u64::MAX, "2: peek");
        assert_eq!(
            oracle.write_ts().await,
            Err(OracleError::Exhausted { write_ts: u64::MAX }),
            "2: no write timestamp above the maximum"
        );
        assert_eq!(oracle.peek_write_ts().await?, u64::MAX, "2: unchanged");
        assert_eq!(oracle.read_ts().await?, u64::MAX, "2: unchanged");
        Ok(())
    })
}

/// 3. A clock at the maximum minus one.
fn clock_at_the_maximum<'x, 'a>(
    s: &'x mut Suite<'a>,
) -> LocalBoxFuture<'x, Result<(), OracleError>> {
    Box::pin(async move {
        let oracle = s.open(NowFn::constant(u64::MAX - 1), 0).await?;
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
        Ok(())
    })
}

/// 4. Successive write timestamps.
fn successive_write_timestamps<'x, 'a>(
    s: &'x mut Suite<'a>,
) -> LocalBoxFuture<'x, Result<(), OracleError>> {
    Box::pin(async move {
        let oracle = s.open(NowFn::constant(0), 0).await?;
        for expected in 1..=2 {
            let w = oracle.write_ts().await?;
            assert_eq!(w.timestamp, expected, "4: successive write_ts");
            assert_eq!(w.advance_to, expected + 1, "4: advance_to");
        }
        Ok(())
    })
}

/// 5. Peeking does not advance.
fn peek_does_not_advance<'x, 'a>(
    s: &'x mut Suite<'a>,
) -> LocalBoxFuture<'x, Result<(), OracleError>> {
    Box::pin(async move {
        let oracle = s.open(NowFn::constant(0), 0).await?;
        assert_eq!(oracle.peek_write_ts().await?, 0, "5: peek");
        assert_eq!(oracle.peek_write_ts().await?, 0, "5: peek again");
        Ok(())
    })
}

/// 6. apply_write, case by case.
fn apply_write_case_by_case<'x, 'a>(
    s: &'x mut Suite<'a>,
) -> LocalBoxFuture<'x, Result<(), OracleError>> {
    Box::pin(async move {
        let oracle = s.open(NowFn::constant(0), 10).await?;
        oracle.apply_write(5).await?;
        assert_eq!(oracle.peek_write_ts().await?, 10, "6a: input <= r <= w");
        assert_eq!(oracle.read_ts().await?, 10, "6a: input <= r <= w");

        let oracle = s.open(NowFn::constant(0), 0).await?;
        for expected in 1..=4 {
            assert_eq!(oracle.write_ts().await?.timestamp, expected, "6b: setup");
        }
        oracle.apply_write(2).await?;
        assert_eq!(oracle.peek_write_ts().await?, 4, "6b: r <= input <= w");
        assert_eq!(oracle.read_ts().await?, 2, "6b: r <= input <= w");

        let oracle = s.open(NowFn::constant(0), 0).await?;
        oracle.apply_write(2).await?;
        assert_eq!(oracle.peek_write_ts().await?, 2, "6c: w <= input");
        assert_eq!(oracle.read_ts().await?, 2, "6c: w <= input");
        oracle.apply_write(4).await?;
        assert_eq!(oracle.peek_write_ts().await?, 4, "6c: w <= input");
        assert_eq!(oracle.read_ts().await?, 4, "6c: w <= input");
        Ok(())
    })
}

/// 7. Tracking a clock that moves, also backwards.
fn tracking_a_moving_clock<'x, 'a>(
    s: &'x mut Suite<'a>,
) -> LocalBoxFuture<'x, Result<(), OracleError>> {
    Box::pin(async move {
        let clock = Rc::new(Cell::new(100u64));
        let c = Rc::clone(&clock);
        let oracle = s.open(NowFn::new(move || c.get()), 0).await?;
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
        Ok(())
    })
}

/// 8. Reads between writes.
fn reads_between_writes<'x, 'a>(
    s: &'x mut Suite<'a>,
) -> LocalBoxFuture<'x, Result<(), OracleError>> {
    Box::pin(async move {
        let oracle = s.open(NowFn::constant(0), 0).await?;
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(kind: CallKind, invoked: u64, responded: u64, value: u64) -> Call {
        Call {
            instance: 0,
            kind,
            invoked,
            responded: Some(responded),
            value,
        }
    }

    #[test]
    fn the_checker_catches_what_it_should() {
        use CallKind::*;
        let fine = [
            call(WriteTs, 1, 2, 5),
            call(ApplyWrite, 3, 4, 5),
            call(ReadTs, 5, 6, 5),
            call(WriteTs, 7, 8, 6),
        ];
        assert_eq!(check_history(&fine), vec![]);
        // Overlapping calls may be ordered either way; failed calls count for nothing.
        let overlap = [call(WriteTs, 1, 4, 9), call(WriteTs, 2, 3, 8)];
        assert_eq!(check_history(&overlap), vec![]);
        let mut failed = call(WriteTs, 1, 2, 9);
        failed.responded = None;
        assert_eq!(check_history(&[failed, call(WriteTs, 3, 4, 1)]), vec![]);
        // Each rule.
        let v = check_history(&[call(WriteTs, 1, 2, 9), call(WriteTs, 3, 4, 8)]);
        assert!(matches!(
            v[..],
            [Violation::WriteNotAbove {
                write_ts: 8,
                earlier: 9,
                ..
            }]
        ));
        let v = check_history(&[call(ReadTs, 1, 2, 9), call(WriteTs, 3, 4, 9)]);
        assert!(
            matches!(v[..], [Violation::WriteNotAbove { .. }]),
            "above reads too"
        );
        let v = check_history(&[call(ApplyWrite, 1, 2, 9), call(ReadTs, 3, 4, 8)]);
        assert!(matches!(
            v[..],
            [Violation::ReadMissedApply { applied: 9, .. }]
        ));
        let v = check_history(&[call(ReadTs, 1, 2, 9), call(ReadTs, 3, 4, 8)]);
        assert!(matches!(v[..], [Violation::ReadWentBack { .. }]));
        let v = check_history(&[call(WriteTs, 1, 4, 9), call(WriteTs, 2, 3, 9)]);
        assert_eq!(
            v,
            vec![Violation::Duplicate { write_ts: 9 }],
            "even when overlapping"
        );
        assert!(v[0].to_string().contains("twice"));
        // A read below an earlier, unapplied write is fine (it is not visible yet).
        assert_eq!(
            check_history(&[call(WriteTs, 1, 2, 9), call(ReadTs, 3, 4, 0)]),
            vec![]
        );
    }

    #[test]
    fn history_records_calls_in_order() {
        let sim = crate::runtime::sim::Simulator::new(0);
        let calls = sim
            .block_on(async {
                let history = History::new();
                let oracle = crate::oracle::InMemoryTimestampOracle::new(0, NowFn::constant(0));
                let w = history.write_ts(1, &oracle).await.unwrap();
                history.apply_write(1, &oracle, w.timestamp).await.unwrap();
                history.read_ts(1, &oracle).await.unwrap();
                assert_eq!(history.max_handed_out(), Some(1));
                assert_eq!(history.violations(), vec![]);
                history.calls()
            })
            .unwrap();
        let order: Vec<_> = calls
            .iter()
            .map(|c| (c.kind, c.invoked, c.responded))
            .collect();
        assert_eq!(
            order,
            vec![
                (CallKind::WriteTs, 1, Some(2)),
                (CallKind::ApplyWrite, 3, Some(4)),
                (CallKind::ReadTs, 5, Some(6)),
            ]
        );
    }
}
