//! A seeded fault-injecting decorator for [`Blob`] and [`Consensus`].
//!
//! For every call, an [`UnreliableHandle`] draws two coins from its seeded PRNG:
//! `happen` (with probability `should_happen`) and `timeout` (with probability `should_timeout`).
//!
//! | happen | timeout | what the caller sees |
//! | --- | --- | --- |
//! | yes | no | the real result |
//! | yes | yes | the operation ran, then an [`ExternalError::Indeterminate`] timeout |
//! | no | yes | an [`ExternalError::Indeterminate`] timeout; the operation did not run |
//! | no | no | an [`ExternalError::Determinate`] error; the operation did not run |
//!
//! The "happened, then timed out" row is the hard case for persist: a compare_and_set that really
//! committed but whose caller cannot know it.
//!
//! Handles are shared (clones see the same PRNG and knobs), so one handle can flip a whole
//! location between [`UnreliableHandle::totally_available`], [`UnreliableHandle::partially_available`]
//! and [`UnreliableHandle::totally_unavailable`], and counts what it injected.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;

use async_trait::async_trait;
use bytes::Bytes;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::{Blob, BlobMetadata, CaSResult, Consensus, ExternalError, SeqNo, VersionedData};

/// How many of each outcome a handle has produced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FaultCounts {
    /// Calls passed through with their real result.
    pub ok: u64,
    /// Calls that failed determinately without running.
    pub failed: u64,
    /// Calls that reported a timeout without running.
    pub timed_out_without_happening: u64,
    /// Calls that ran and then reported a timeout.
    pub happened_then_timed_out: u64,
}

impl FaultCounts {
    /// Every call that did not simply pass through.
    pub fn faults(&self) -> u64 {
        self.failed + self.timed_out_without_happening + self.happened_then_timed_out
    }
}

struct HandleState {
    rng: Xoshiro256PlusPlus,
    should_happen: f64,
    should_timeout: f64,
    counts: FaultCounts,
}

/// The shared, seeded source of faults. See the module docs.
#[derive(Clone)]
pub struct UnreliableHandle {
    state: Rc<RefCell<HandleState>>,
}

/// The outcome drawn for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Draw {
    Run,
    Fail,
    TimeoutWithoutRunning,
    RunThenTimeout,
}

impl UnreliableHandle {
    /// A handle whose calls happen with probability `should_happen` and report a timeout with
    /// probability `should_timeout` (both clamped to `[0, 1]`).
    pub fn new(seed: u64, should_happen: f64, should_timeout: f64) -> Self {
        UnreliableHandle {
            state: Rc::new(RefCell::new(HandleState {
                rng: Xoshiro256PlusPlus::seed_from_u64(seed),
                should_happen: clamp01(should_happen),
                should_timeout: clamp01(should_timeout),
                counts: FaultCounts::default(),
            })),
        }
    }

    /// The original's default: 95% happen, 5% time out.
    pub fn partially_available_default(seed: u64) -> Self {
        Self::new(seed, 0.95, 0.05)
    }

    /// Changes the probabilities.
    pub fn partially_available(&self, should_happen: f64, should_timeout: f64) {
        let mut state = self.state.borrow_mut();
        state.should_happen = clamp01(should_happen);
        state.should_timeout = clamp01(should_timeout);
    }

    /// Every call passes through.
    pub fn totally_available(&self) {
        self.partially_available(1.0, 0.0);
    }

    /// Every call fails (determinately) without running.
    pub fn totally_unavailable(&self) {
        self.partially_available(0.0, 0.0);
    }

    /// What this handle has injected so far.
    pub fn counts(&self) -> FaultCounts {
        self.state.borrow().counts
    }

    fn draw(&self) -> Draw {
        let mut state = self.state.borrow_mut();
        let happen = unit(&mut state.rng) < state.should_happen;
        let timeout = unit(&mut state.rng) < state.should_timeout;
        let draw = match (happen, timeout) {
            (true, false) => Draw::Run,
            (true, true) => Draw::RunThenTimeout,
            (false, true) => Draw::TimeoutWithoutRunning,
            (false, false) => Draw::Fail,
        };
        let counts = &mut state.counts;
        match draw {
            Draw::Run => counts.ok += 1,
            Draw::Fail => counts.failed += 1,
            Draw::TimeoutWithoutRunning => counts.timed_out_without_happening += 1,
            Draw::RunThenTimeout => counts.happened_then_timed_out += 1,
        }
        draw
    }

    async fn run_op<R, F>(&self, name: &str, op: F) -> Result<R, ExternalError>
    where
        F: Future<Output = Result<R, ExternalError>>,
    {
        match self.draw() {
            Draw::Run => op.await,
            Draw::Fail => Err(ExternalError::determinate(format!(
                "unreliable: {name} failed"
            ))),
            Draw::TimeoutWithoutRunning => Err(ExternalError::indeterminate(format!(
                "unreliable: {name} timeout"
            ))),
            Draw::RunThenTimeout => {
                // The result is thrown away: the caller cannot know that the call happened.
                let _ = op.await;
                Err(ExternalError::indeterminate(format!(
                    "unreliable: {name} timeout"
                )))
            }
        }
    }
}

fn clamp01(p: f64) -> f64 {
    if p.is_nan() {
        0.0
    } else {
        p.clamp(0.0, 1.0)
    }
}

/// A uniform draw in `[0, 1)` with 53 bits of precision.
fn unit(rng: &mut Xoshiro256PlusPlus) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A [`Blob`] whose calls fail as its [`UnreliableHandle`] decides.
#[derive(Clone)]
pub struct UnreliableBlob {
    blob: Rc<dyn Blob>,
    handle: UnreliableHandle,
}

impl UnreliableBlob {
    /// Wraps `blob`.
    pub fn new(blob: Rc<dyn Blob>, handle: UnreliableHandle) -> Self {
        UnreliableBlob { blob, handle }
    }
}

#[async_trait(?Send)]
impl Blob for UnreliableBlob {
    async fn get(&self, key: &str) -> Result<Option<Bytes>, ExternalError> {
        self.handle.run_op("get", self.blob.get(key)).await
    }

    async fn list_keys_and_metadata(
        &self,
        key_prefix: &str,
        f: &mut (dyn FnMut(BlobMetadata) + '_),
    ) -> Result<(), ExternalError> {
        self.handle
            .run_op("list_keys", self.blob.list_keys_and_metadata(key_prefix, f))
            .await
    }

    async fn set(&self, key: &str, value: Bytes) -> Result<(), ExternalError> {
        self.handle.run_op("set", self.blob.set(key, value)).await
    }

    async fn delete(&self, key: &str) -> Result<Option<usize>, ExternalError> {
        self.handle.run_op("delete", self.blob.delete(key)).await
    }

    async fn restore(&self, key: &str) -> Result<(), ExternalError> {
        self.handle.run_op("restore", self.blob.restore(key)).await
    }
}

/// A [`Consensus`] whose calls fail as its [`UnreliableHandle`] decides.
#[derive(Clone)]
pub struct UnreliableConsensus {
    consensus: Rc<dyn Consensus>,
    handle: UnreliableHandle,
}

impl UnreliableConsensus {
    /// Wraps `consensus`.
    pub fn new(consensus: Rc<dyn Consensus>, handle: UnreliableHandle) -> Self {
        UnreliableConsensus { consensus, handle }
    }
}

#[async_trait(?Send)]
impl Consensus for UnreliableConsensus {
    async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
        self.handle.run_op("head", self.consensus.head(key)).await
    }

    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: VersionedData,
    ) -> Result<CaSResult, ExternalError> {
        self.handle
            .run_op(
                "compare_and_set",
                self.consensus.compare_and_set(key, expected, new),
            )
            .await
    }

    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<Vec<VersionedData>, ExternalError> {
        self.handle
            .run_op("scan", self.consensus.scan(key, from, limit))
            .await
    }

    async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
        self.handle
            .run_op("truncate", self.consensus.truncate(key, seqno))
            .await
    }

    async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
        self.handle
            .run_op("list_keys", self.consensus.list_keys())
            .await
    }
}

/// Decides, for each compare_and_set that ran, whether its caller hears a timeout instead.
pub type LoseAck = Box<dyn FnMut(&VersionedData, &Result<CaSResult, ExternalError>) -> bool>;

/// A [`Consensus`] that scripts lost acknowledgements: every compare_and_set runs, then `lose`
/// decides whether the caller hears an [`ExternalError::Indeterminate`] timeout instead of the
/// result. This is the hard case for persist and the oracle (a write that happened, unknown to
/// its writer) made deterministic, for tests that need it at a chosen moment rather than by
/// chance as [`UnreliableConsensus`] gives it. Every other call passes through.
pub struct LostAckConsensus {
    consensus: Rc<dyn Consensus>,
    lose: RefCell<LoseAck>,
    lost: std::cell::Cell<u64>,
}

impl LostAckConsensus {
    /// Wraps `consensus`; `lose` sees each compare_and_set's new version and real result.
    pub fn new(
        consensus: Rc<dyn Consensus>,
        lose: impl FnMut(&VersionedData, &Result<CaSResult, ExternalError>) -> bool + 'static,
    ) -> Self {
        LostAckConsensus {
            consensus,
            lose: RefCell::new(Box::new(lose)),
            lost: std::cell::Cell::new(0),
        }
    }

    /// How many acknowledgements were lost so far.
    pub fn lost(&self) -> u64 {
        self.lost.get()
    }
}

#[async_trait(?Send)]
impl Consensus for LostAckConsensus {
    async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
        self.consensus.head(key).await
    }

    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: VersionedData,
    ) -> Result<CaSResult, ExternalError> {
        let copy = new.clone();
        let result = self.consensus.compare_and_set(key, expected, new).await;
        if (self.lose.borrow_mut())(&copy, &result) {
            self.lost.set(self.lost.get() + 1);
            return Err(ExternalError::indeterminate(
                "lost acknowledgement: timeout after the call ran",
            ));
        }
        result
    }

    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<Vec<VersionedData>, ExternalError> {
        self.consensus.scan(key, from, limit).await
    }

    async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
        self.consensus.truncate(key, seqno).await
    }

    async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
        self.consensus.list_keys().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::location::conformance::{blob_impl_test, consensus_impl_test};
    use crate::location::mem::{MemBlob, MemConsensus};
    use crate::runtime::sim::Simulator;

    #[test]
    fn totally_available_passes_conformance() {
        let sim = Simulator::new(3);
        let handle = UnreliableHandle::new(3, 1.0, 0.0);
        let (blob, consensus) = (MemBlob::new(), MemConsensus::new());
        let h = handle.clone();
        sim.block_on(blob_impl_test(move || {
            let b = UnreliableBlob::new(Rc::new(blob.clone()), h.clone());
            async move { Ok(Rc::new(b) as Rc<dyn Blob>) }
        }))
        .unwrap()
        .unwrap();
        let h = handle.clone();
        sim.block_on(consensus_impl_test(move || {
            let c = UnreliableConsensus::new(Rc::new(consensus.clone()), h.clone());
            async move { Ok(Rc::new(c) as Rc<dyn Consensus>) }
        }))
        .unwrap()
        .unwrap();
        let counts = handle.counts();
        assert!(counts.ok > 50);
        assert_eq!(counts.faults(), 0);
    }

    #[test]
    fn every_outcome_occurs_and_means_what_it_says() {
        // Goal: over a fixed seed, each of the four outcomes happens, and whether the operation
        // ran matches the outcome. Method: each call appends the next seqno; compare the store's
        // head after each call with the outcome the handle recorded.
        let sim = Simulator::new(11);
        let handle = UnreliableHandle::new(11, 0.5, 0.5);
        let mem = MemConsensus::new();
        let consensus = UnreliableConsensus::new(Rc::new(mem.clone()), handle.clone());
        let (h, m) = (handle.clone(), mem.clone());
        let seen = sim
            .block_on(async move {
                let mut seen = [0u64; 4];
                for _ in 0..200 {
                    let before = m.head("k").await.unwrap().map(|v| v.seqno);
                    let next = before.map_or(SeqNo(1), SeqNo::next);
                    let new = VersionedData {
                        seqno: next,
                        data: Bytes::new(),
                    };
                    let counts_before = h.counts();
                    let result = consensus.compare_and_set("k", before, new).await;
                    let after = m.head("k").await.unwrap().map(|v| v.seqno);
                    let c = h.counts();
                    let happened = after == Some(next);
                    if c.ok > counts_before.ok {
                        assert_eq!(result, Ok(CaSResult::Committed));
                        assert!(happened);
                        seen[0] += 1;
                    } else if c.failed > counts_before.failed {
                        assert!(matches!(result, Err(ExternalError::Determinate(_))));
                        assert!(!happened, "a determinate error did not happen");
                        seen[1] += 1;
                    } else if c.timed_out_without_happening
                        > counts_before.timed_out_without_happening
                    {
                        let err = result.unwrap_err();
                        assert!(err.is_indeterminate() && err.is_timeout());
                        assert!(!happened);
                        seen[2] += 1;
                    } else {
                        let err = result.unwrap_err();
                        assert!(err.is_indeterminate() && err.is_timeout());
                        assert!(happened, "this timeout hid a write that happened");
                        seen[3] += 1;
                    }
                }
                seen
            })
            .unwrap();
        assert!(
            seen.iter().all(|&n| n > 0),
            "every outcome occurred: {seen:?}"
        );
        assert_eq!(seen.iter().sum::<u64>(), 200);
    }

    #[test]
    fn default_availability_and_total_unavailability() {
        let sim = Simulator::new(5);
        let handle = UnreliableHandle::partially_available_default(5);
        let blob = UnreliableBlob::new(Rc::new(MemBlob::new()), handle.clone());
        let h = handle.clone();
        let (ok_default, ok_down, ok_up) = sim
            .block_on(async move {
                let mut ok_default = 0;
                for i in 0..100 {
                    ok_default += blob.set(&format!("k{i}"), Bytes::new()).await.is_ok() as u32;
                }
                h.totally_unavailable();
                let mut ok_down = 0;
                for i in 0..100 {
                    ok_down += blob.get(&format!("k{i}")).await.is_ok() as u32;
                }
                h.totally_available();
                let mut ok_up = 0;
                for i in 0..100 {
                    ok_up += blob.get(&format!("k{i}")).await.is_ok() as u32;
                }
                (ok_default, ok_down, ok_up)
            })
            .unwrap();
        assert!(
            (50..100).contains(&ok_default),
            "{ok_default} of 100 succeeded"
        );
        assert_eq!(ok_down, 0);
        assert_eq!(ok_up, 100);
    }
}
