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

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::rc::Rc;

use serde::Serialize;

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

/// Which call a [`Call`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CallKind {
    /// [`TimestampOracle::write_ts`].
    WriteTs,
    /// [`TimestampOracle::read_ts`].
    ReadTs,
    /// [`TimestampOracle::apply_write`].
    ApplyWrite,
}

/// One call in a [`History`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Call {
    /// Which oracle instance served it (any label the caller chooses).
    pub instance: u64,
    /// The call.
    pub kind: CallKind,
    /// Its position in the history when it was invoked.
    pub invoked: u64,
    /// Its position when it returned successfully; `None` if it failed or was cancelled.
    pub responded: Option<u64>,
    /// The timestamp handed out (`write_ts`, `read_ts`), or the argument (`apply_write`).
    pub value: u64,
}

/// A broken promise found by [`check_history`]. "Earlier" means: returned before the call in
/// question was invoked; overlapping calls may be ordered either way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Violation {
    /// A write timestamp not above a timestamp handed out earlier.
    WriteNotAbove {
        /// The instance that handed it out.
        instance: u64,
        /// The write timestamp.
        write_ts: u64,
        /// The largest timestamp handed out earlier.
        earlier: u64,
    },
    /// A read timestamp below an earlier read timestamp.
    ReadWentBack {
        /// The instance.
        instance: u64,
        /// The read timestamp.
        read_ts: u64,
        /// The largest earlier read timestamp.
        earlier: u64,
    },
    /// A read timestamp below a write applied earlier.
    ReadMissedApply {
        /// The instance.
        instance: u64,
        /// The read timestamp.
        read_ts: u64,
        /// The largest write applied earlier.
        applied: u64,
    },
    /// A write timestamp handed out twice.
    Duplicate {
        /// The timestamp.
        write_ts: u64,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::WriteNotAbove {
                instance,
                write_ts,
                earlier,
            } => write!(
                f,
                "write_ts {write_ts} (instance {instance}) is not above {earlier}, handed out earlier"
            ),
            Violation::ReadWentBack {
                instance,
                read_ts,
                earlier,
            } => write!(
                f,
                "read_ts {read_ts} (instance {instance}) went back below the earlier read {earlier}"
            ),
            Violation::ReadMissedApply {
                instance,
                read_ts,
                applied,
            } => write!(
                f,
                "read_ts {read_ts} (instance {instance}) is below {applied}, applied earlier"
            ),
            Violation::Duplicate { write_ts } => {
                write!(f, "write_ts {write_ts} was handed out twice")
            }
        }
    }
}

/// Records calls made through it, for [`check_history`]. One logical counter orders invocations
/// and responses, so "returned before it was invoked" is exact even within one millisecond.
#[derive(Debug, Default)]
pub struct History {
    clock: Cell<u64>,
    calls: RefCell<Vec<Call>>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    fn tick(&self) -> u64 {
        let t = self.clock.get() + 1;
        self.clock.set(t);
        t
    }

    fn invoke(&self, instance: u64, kind: CallKind, value: u64) -> usize {
        let invoked = self.tick();
        let mut calls = self.calls.borrow_mut();
        calls.push(Call {
            instance,
            kind,
            invoked,
            responded: None,
            value,
        });
        calls.len() - 1
    }

    fn respond(&self, idx: usize, value: u64) {
        let responded = self.tick();
        let mut calls = self.calls.borrow_mut();
        calls[idx].responded = Some(responded);
        calls[idx].value = value;
    }

    /// `oracle.write_ts()`, recorded.
    pub async fn write_ts(
        &self,
        instance: u64,
        oracle: &dyn TimestampOracle,
    ) -> Result<WriteTimestamp, OracleError> {
        let idx = self.invoke(instance, CallKind::WriteTs, 0);
        let w = oracle.write_ts().await?;
        self.respond(idx, w.timestamp);
        Ok(w)
    }

    /// `oracle.read_ts()`, recorded.
    pub async fn read_ts(
        &self,
        instance: u64,
        oracle: &dyn TimestampOracle,
    ) -> Result<u64, OracleError> {
        let idx = self.invoke(instance, CallKind::ReadTs, 0);
        let r = oracle.read_ts().await?;
        self.respond(idx, r);
        Ok(r)
    }

    /// `oracle.apply_write(lower_bound)`, recorded.
    pub async fn apply_write(
        &self,
        instance: u64,
        oracle: &dyn TimestampOracle,
        lower_bound: u64,
    ) -> Result<(), OracleError> {
        let idx = self.invoke(instance, CallKind::ApplyWrite, lower_bound);
        oracle.apply_write(lower_bound).await?;
        self.respond(idx, lower_bound);
        Ok(())
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.borrow().clone()
    }

    /// The largest timestamp handed out (by `write_ts` or `read_ts`) so far.
    pub fn max_handed_out(&self) -> Option<u64> {
        self.calls
            .borrow()
            .iter()
            .filter(|c| c.responded.is_some() && c.kind != CallKind::ApplyWrite)
            .map(|c| c.value)
            .max()
    }

    /// [`check_history`] over this history.
    pub fn violations(&self) -> Vec<Violation> {
        check_history(&self.calls.borrow())
    }
}

/// Checks the contract over a history of calls, across all instances (failed and cancelled
/// calls handed nothing out and are ignored):
/// - a write timestamp is above every timestamp (write or read) handed out by a call that
///   returned before it was invoked, and no write timestamp is handed out twice;
/// - a read timestamp is at least every read timestamp handed out, and every `apply_write`
///   argument, of calls that returned before it was invoked.
///
/// One pass over the invocations and responses in order: O(n log n).
pub fn check_history(calls: &[Call]) -> Vec<Violation> {
    #[derive(Clone, Copy, Default)]
    struct Floor {
        handed: Option<u64>,
        read: Option<u64>,
        applied: Option<u64>,
    }
    let mut points: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * calls.len());
    for (i, call) in calls.iter().enumerate() {
        points.push((call.invoked, false, i));
        if let Some(r) = call.responded {
            points.push((r, true, i));
        }
    }
    crate::sort::sort(&mut points);
    let mut floors = vec![Floor::default(); calls.len()];
    let mut now = Floor::default();
    let mut out = Vec::new();
    for (_, responded, i) in points {
        let call = &calls[i];
        if !responded {
            floors[i] = now;
            continue;
        }
        let (floor, v, instance) = (floors[i], call.value, call.instance);
        match call.kind {
            CallKind::WriteTs => {
                if let Some(earlier) = floor.handed.filter(|&h| v <= h) {
                    out.push(Violation::WriteNotAbove {
                        instance,
                        write_ts: v,
                        earlier,
                    });
                }
            }
            CallKind::ReadTs => {
                if let Some(earlier) = floor.read.filter(|&r| v < r) {
                    out.push(Violation::ReadWentBack {
                        instance,
                        read_ts: v,
                        earlier,
                    });
                }
                if let Some(applied) = floor.applied.filter(|&a| v < a) {
                    out.push(Violation::ReadMissedApply {
                        instance,
                        read_ts: v,
                        applied,
                    });
                }
            }
            CallKind::ApplyWrite => {}
        }
        let raise = |slot: &mut Option<u64>| *slot = Some(slot.map_or(v, |s| s.max(v)));
        match call.kind {
            CallKind::WriteTs => raise(&mut now.handed),
            CallKind::ReadTs => {
                raise(&mut now.handed);
                raise(&mut now.read);
            }
            CallKind::ApplyWrite => raise(&mut now.applied),
        }
    }
    let mut writes = BTreeSet::new();
    for call in calls
        .iter()
        .filter(|c| c.kind == CallKind::WriteTs && c.responded.is_some())
    {
        if !writes.insert(call.value) {
            out.push(Violation::Duplicate {
                write_ts: call.value,
            });
        }
    }
    out
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
