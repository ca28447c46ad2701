//! The timestamp oracle: a monotone source of timestamps for reads and writes, and its durable,
//! pre-allocating wrapper.
//!
//! # The contract
//!
//! A timeline has a read timestamp and a write timestamp (`T = u64`, milliseconds on the clock
//! the oracle is given). Every [`TimestampOracle`] promises, for calls that do not overlap in
//! time (calls that do may be ordered either way):
//! - [`TimestampOracle::write_ts`] hands out a timestamp strictly above every earlier read and
//!   write timestamp. On a wall-clock timeline it tracks the clock: `max(previous + 1, now)`. It
//!   comes with `advance_to = timestamp + 1`, the upper a writer advances its shard to.
//! - [`TimestampOracle::peek_write_ts`] returns the latest write timestamp without advancing it.
//! - [`TimestampOracle::read_ts`] is at least every completed `apply_write`, and strictly below
//!   every later `write_ts`. Reads never go back.
//! - [`TimestampOracle::apply_write`]`(t)` marks a write at `t` complete: afterwards `read_ts >=
//!   t` and `write_ts >= t`.
//!
//! This is how group commit uses it: take a `write_ts`, append at `timestamp` with upper
//! `advance_to`, then `apply_write(timestamp)` before acknowledging, so that a strict-serializable
//! read at `read_ts` sees the write. [`conformance::timestamp_oracle_impl_test`] makes the
//! contract executable; every implementation runs it.
//!
//! `u64::MAX` is a valid read timestamp but never a write timestamp (its `advance_to` would not
//! fit): once a timeline's write timestamp is `u64::MAX - 1` or more, `write_ts` answers
//! [`OracleError::Exhausted`].
//!
//! # The implementations
//!
//! - [`InMemoryTimestampOracle`]: the two timestamps in memory ([`TimestampState`], pure
//!   transitions with `now` as an argument). Nothing survives a restart.
//! - [`DurableTimestampOracle`]: the same state, made durable across restarts by pre-allocation
//!   (the Percolator recovery scheme). It stores only an upper bound `durable` in a
//!   [`Consensus`](crate::location::Consensus) key, one key per timeline, and serves every
//!   timestamp below it from memory. Before it hands out a timestamp at or beyond `durable` it
//!   allocates a new window, `durable = ts + persist_interval_ms`, with one compare_and_set.
//!   On start it resumes *at* the stored bound, so every timestamp it hands out is above every
//!   timestamp handed out before the restart, at the cost of skipping the unused rest of the old
//!   window. See the [`durable`] module docs for epochs, fencing, `confirm_leadership`, storage
//!   errors and the clock guard.
//!
//! The clock is a [`NowFn`], normally [`NowFn::from_runtime`] (the injected
//! [`Runtime`]'s `now_ms`); a non-wall-clock timeline uses [`NowFn::constant`]`(0)`, so that only
//! monotonicity applies.
//!
//! # Example
//!
//! ```
//! use std::rc::Rc;
//! use persist_playground::location::mem::MemConsensus;
//! use persist_playground::oracle::{
//!     DurableOracleConfig, DurableTimestampOracle, NowFn, TimestampOracle,
//! };
//! use persist_playground::runtime::sim::Simulator;
//!
//! let sim = Simulator::new(42);
//! let rt = sim.runtime();
//! let consensus = Rc::new(MemConsensus::new());
//! let (ts, resumed) = sim
//!     .block_on(async move {
//!         let config = DurableOracleConfig::new("epoch_ms").persist_interval_ms(1_000);
//!         let now = NowFn::from_runtime(&rt);
//!         let open = || {
//!             DurableTimestampOracle::open(consensus.clone(), rt.clone(), now.clone(), 0, config.clone())
//!         };
//!         let oracle = open().await.unwrap();
//!         rt.sleep(250).await;
//!         let w = oracle.write_ts().await.unwrap(); // 250, served from the window [0, 1000)
//!         oracle.apply_write(w.timestamp).await.unwrap();
//!         drop(oracle); // a crash: nothing is flushed
//!         let restarted = open().await.unwrap();
//!         (w.timestamp, restarted.read_ts().await.unwrap())
//!     })
//!     .unwrap();
//! assert_eq!(ts, 250);
//! assert_eq!(resumed, 1_000, "a restart resumes at the stored upper bound");
//! ```

use std::fmt;
use std::rc::Rc;

use async_trait::async_trait;
use serde::Serialize;

use crate::location::PermanentError;
use crate::runtime::Runtime;

pub mod config;
pub mod conformance;
pub mod durable;
pub mod encoding;
pub mod events;
pub mod state;

pub use config::DurableOracleConfig;
pub use durable::DurableTimestampOracle;
pub use encoding::{DecodeError, DurableRecord};
pub use events::{OracleEvent, OracleEventKind, OracleSnapshot, OracleStats};
pub use state::TimestampState;

/// A write timestamp and the upper to advance to after writing at it. As data: camelCase
/// fields, times as numbers (see [`crate::numbers`]); the library names it `WriteTimestampView`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null, rename = "WriteTimestampView")
)]
pub struct WriteTimestamp {
    /// The timestamp the write takes place at.
    #[serde(serialize_with = "crate::numbers::time")]
    pub timestamp: u64,
    /// The upper to advance the written shard to: `timestamp + 1`.
    #[serde(serialize_with = "crate::numbers::time")]
    pub advance_to: u64,
}

/// Why an oracle call failed. Transient storage errors are not here: the durable oracle retries
/// them (see [`durable`]), and callers bound a call with the runtime's timeout; a permanent one
/// is [`OracleError::Storage`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OracleError {
    /// Another instance started on this timeline after this one, taking over its epoch. This
    /// instance hands out nothing more; open a new one to take over again.
    #[error(
        "the timestamp oracle of timeline {timeline:?} is fenced: its epoch {epoch} was taken \
         over by epoch {current_epoch}"
    )]
    Fenced {
        /// The timeline.
        timeline: String,
        /// This instance's epoch.
        epoch: u64,
        /// The epoch found in the store.
        current_epoch: u64,
    },
    /// No write timestamp is left: the next one would be `u64::MAX`, whose `advance_to` does not
    /// fit.
    #[error(
        "the timeline is exhausted: no write timestamp above {write_ts} leaves room for advance_to"
    )]
    Exhausted {
        /// The latest write timestamp.
        write_ts: u64,
    },
    /// The timeline's Consensus key holds bytes that are not an oracle record. Permanent: see
    /// [`OracleError::is_permanent`].
    #[error(
        "the stored record of timeline {timeline:?} at v{seqno} is not an oracle record: {source}"
    )]
    Decode {
        /// The timeline.
        timeline: String,
        /// The seqno of the version that does not decode.
        seqno: u64,
        /// What is wrong with the bytes.
        #[source]
        source: DecodeError,
    },
    /// The store contradicts what this instance wrote (its record vanished, the epoch went
    /// back, a later version of its own lowered the upper, no seqno is left): someone else wrote
    /// to or deleted the timeline's key. Permanent: see [`OracleError::is_permanent`].
    #[error("the stored record of timeline {timeline:?} is inconsistent: {reason}")]
    Inconsistent {
        /// The timeline.
        timeline: String,
        /// What was found.
        reason: String,
    },
    /// The store failed for good (a connection closed for good, say): retrying cannot help.
    /// Permanent: see [`OracleError::is_permanent`].
    #[error("the store of timeline {timeline:?} failed for good: {source}")]
    Storage {
        /// The timeline.
        timeline: String,
        /// What the store said, naming what is broken.
        #[source]
        source: PermanentError,
    },
    /// A configuration that cannot work (for example a zero persist interval).
    #[error("invalid timestamp oracle configuration: {0}")]
    InvalidConfig(String),
}

impl OracleError {
    /// Whether this error will not heal: the timeline's stored record is broken ([`Decode`],
    /// [`Inconsistent`]), or the store failed for good ([`Storage`]). A durable instance that meets one is *broken*: it answers every later
    /// call with the same error, without touching the store, so nothing is written after the
    /// corruption is found. (Fencing is not a failure of the store and has its own variant.)
    ///
    /// [`Decode`]: OracleError::Decode
    /// [`Inconsistent`]: OracleError::Inconsistent
    /// [`Storage`]: OracleError::Storage
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            OracleError::Decode { .. }
                | OracleError::Inconsistent { .. }
                | OracleError::Storage { .. }
        )
    }
}

/// A source of timestamps for reads and writes on one timeline. See the module docs for the
/// contract; [`conformance::timestamp_oracle_impl_test`] checks it.
///
/// Methods take `&self` and may be called concurrently from several tasks (the oracle is shared
/// through an `Rc`); every implementation keeps the contract under such interleavings.
#[async_trait(?Send)]
pub trait TimestampOracle {
    /// A new timestamp for writing: strictly above every earlier `read_ts` and `write_ts`, and
    /// `max(previous + 1, now)` on a clock.
    async fn write_ts(&self) -> Result<WriteTimestamp, OracleError>;

    /// The latest write timestamp, not advanced.
    async fn peek_write_ts(&self) -> Result<u64, OracleError>;

    /// A timestamp for reading: at least every completed `apply_write`, strictly below every
    /// later `write_ts`.
    async fn read_ts(&self) -> Result<u64, OracleError>;

    /// Marks a write at `lower_bound` complete: afterwards `read_ts >= lower_bound` and
    /// `write_ts >= lower_bound`.
    async fn apply_write(&self, lower_bound: u64) -> Result<(), OracleError>;
}

/// The clock an oracle tracks: a function returning milliseconds.
#[derive(Clone)]
pub struct NowFn(Rc<dyn Fn() -> u64>);

impl NowFn {
    /// A clock from any function (tests use a settable cell).
    pub fn new(f: impl Fn() -> u64 + 'static) -> Self {
        NowFn(Rc::new(f))
    }

    /// The runtime's clock (virtual under the simulator): the normal choice.
    pub fn from_runtime(runtime: &Runtime) -> Self {
        let runtime = runtime.clone();
        NowFn::new(move || runtime.now_ms())
    }

    /// A clock that always reads `t`: for timelines that are not wall-clock time.
    pub fn constant(t: u64) -> Self {
        NowFn::new(move || t)
    }

    /// Reads the clock.
    pub fn now(&self) -> u64 {
        (self.0)()
    }
}

impl fmt::Debug for NowFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NowFn").field("now", &self.now()).finish()
    }
}

/// The oracle in memory: a [`TimestampState`] and a clock. Nothing survives a restart.
#[derive(Debug)]
pub struct InMemoryTimestampOracle {
    state: std::cell::RefCell<TimestampState>,
    now: NowFn,
}

impl InMemoryTimestampOracle {
    /// A timeline starting at `initially` (both timestamps), tracking `now`.
    pub fn new(initially: u64, now: NowFn) -> Self {
        InMemoryTimestampOracle {
            state: std::cell::RefCell::new(TimestampState::new(initially)),
            now,
        }
    }

    /// The current state.
    pub fn state(&self) -> TimestampState {
        *self.state.borrow()
    }
}

#[async_trait(?Send)]
impl TimestampOracle for InMemoryTimestampOracle {
    async fn write_ts(&self) -> Result<WriteTimestamp, OracleError> {
        let now = self.now.now();
        self.state.borrow_mut().write_ts(now)
    }

    async fn peek_write_ts(&self) -> Result<u64, OracleError> {
        Ok(self.state.borrow().peek_write_ts())
    }

    async fn read_ts(&self) -> Result<u64, OracleError> {
        Ok(self.state.borrow().read_ts())
    }

    async fn apply_write(&self, lower_bound: u64) -> Result<(), OracleError> {
        self.state.borrow_mut().apply_write(lower_bound);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::sim::Simulator;

    #[test]
    fn in_memory_conformance() {
        let sim = Simulator::new(0);
        sim.block_on(conformance::timestamp_oracle_impl_test(
            |_timeline, now, initially| async move {
                Ok(Rc::new(InMemoryTimestampOracle::new(initially, now))
                    as Rc<dyn TimestampOracle>)
            },
        ))
        .unwrap()
        .unwrap();
    }
}
