//! A recorded history of oracle calls across instances and restarts, and its checker: the
//! oracle's linearizability check for randomized runs (see the module docs of `conformance`).

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;

use super::super::{OracleError, TimestampOracle, WriteTimestamp};

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
