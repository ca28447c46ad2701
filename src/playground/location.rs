//! The storage a scenario stands on, in three layers:
//!
//! ```text
//!  process gate (one per process)   crashed: every call hangs; records each compare_and_set
//!        │
//!  faults (one per scenario)        latency, then location::unreliable's seeded failures/timeouts
//!        │
//!  raw location                     memory (seed mode) or IndexedDB (live mode)
//! ```
//!
//! A crashed process's calls never return, the way a dead machine never answers: whatever it had
//! in flight may or may not have reached storage, and nothing it starts later does. The raw
//! location (no faults, no gate) is what the panels read, so they show the truth even during an
//! outage.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::command::{FaultKnobs, Service};
use super::fact::Fact;
use super::journal::{CasAttempt, Journal};
use super::log::{Outcome, Pending};
use crate::location::unreliable::{
    FaultCounts, UnreliableBlob, UnreliableConsensus, UnreliableHandle,
};
use crate::location::{
    Blob, BlobMetadata, CaSResult, Consensus, ExternalError, Location, SeqNo, VersionedData,
};
use crate::runtime::Runtime;

/// The fault knobs of both services, and the handles that apply them.
pub struct Faults {
    blob: ServiceFaults,
    consensus: ServiceFaults,
}

struct ServiceFaults {
    knobs: FaultKnobs,
    handle: UnreliableHandle,
    latency_ms: Rc<Cell<u64>>,
}

impl ServiceFaults {
    fn new(seed: u64) -> Self {
        ServiceFaults {
            knobs: FaultKnobs::default(),
            handle: UnreliableHandle::new(seed, 1.0, 0.0),
            latency_ms: Rc::new(Cell::new(0)),
        }
    }

    fn set(&mut self, knobs: FaultKnobs) {
        self.knobs = knobs;
        self.latency_ms.set(knobs.latency_ms);
        if knobs.outage {
            self.handle.totally_unavailable();
        } else {
            self.handle
                .partially_available(1.0 - knobs.fail_rate, knobs.timeout_rate);
        }
    }
}

/// What the faults panel shows for one service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceFaultsView {
    /// The knobs in force.
    pub knobs: FaultKnobs,
    /// Calls passed through.
    pub ok: u64,
    /// Calls failed without happening.
    pub failed: u64,
    /// Calls that timed out without happening.
    pub timed_out: u64,
    /// Calls that happened, then timed out.
    pub happened_then_timed_out: u64,
}

impl From<(&FaultKnobs, FaultCounts)> for ServiceFaultsView {
    fn from((knobs, c): (&FaultKnobs, FaultCounts)) -> Self {
        ServiceFaultsView {
            knobs: *knobs,
            ok: c.ok,
            failed: c.failed,
            timed_out: c.timed_out_without_happening,
            happened_then_timed_out: c.happened_then_timed_out,
        }
    }
}

/// Both services' views.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultsView {
    /// Blob.
    pub blob: ServiceFaultsView,
    /// Consensus.
    pub consensus: ServiceFaultsView,
}

impl Faults {
    /// Faults off, drawing from `seed` once they are on.
    pub fn new(seed: u64) -> Self {
        Faults {
            blob: ServiceFaults::new(seed ^ 0xb10b),
            consensus: ServiceFaults::new(seed ^ 0xc0c0),
        }
    }

    /// Sets one service's knobs.
    pub fn set(&mut self, service: Service, knobs: FaultKnobs) {
        match service {
            Service::Blob => self.blob.set(knobs),
            Service::Consensus => self.consensus.set(knobs),
        }
    }

    /// `raw` behind these faults.
    pub fn wrap(&self, raw: &Location, runtime: &Runtime) -> Location {
        let blob = Delayed {
            inner: Rc::new(UnreliableBlob::new(
                Rc::clone(&raw.blob),
                self.blob.handle.clone(),
            )),
            latency_ms: Rc::clone(&self.blob.latency_ms),
            runtime: runtime.clone(),
        };
        let consensus = Delayed {
            inner: Rc::new(UnreliableConsensus::new(
                Rc::clone(&raw.consensus),
                self.consensus.handle.clone(),
            )),
            latency_ms: Rc::clone(&self.consensus.latency_ms),
            runtime: runtime.clone(),
        };
        Location {
            blob: Rc::new(blob),
            consensus: Rc::new(consensus),
        }
    }

    /// The knobs and counts.
    pub fn view(&self) -> FaultsView {
        FaultsView {
            blob: (&self.blob.knobs, self.blob.handle.counts()).into(),
            consensus: (&self.consensus.knobs, self.consensus.handle.counts()).into(),
        }
    }
}

/// Waits the current latency knob before each call.
struct Delayed<S: ?Sized> {
    inner: Rc<S>,
    latency_ms: Rc<Cell<u64>>,
    runtime: Runtime,
}

impl<S: ?Sized> Delayed<S> {
    async fn delay(&self) {
        let ms = self.latency_ms.get();
        if ms > 0 {
            self.runtime.sleep(ms).await;
        }
    }
}

#[async_trait(?Send)]
impl<S: Blob + ?Sized> Blob for Delayed<S> {
    async fn get(&self, key: &str) -> Result<Option<Bytes>, ExternalError> {
        self.delay().await;
        self.inner.get(key).await
    }
    async fn list_keys_and_metadata(
        &self,
        key_prefix: &str,
        f: &mut (dyn FnMut(BlobMetadata) + '_),
    ) -> Result<(), ExternalError> {
        self.delay().await;
        self.inner.list_keys_and_metadata(key_prefix, f).await
    }
    async fn set(&self, key: &str, value: Bytes) -> Result<(), ExternalError> {
        self.delay().await;
        self.inner.set(key, value).await
    }
    async fn delete(&self, key: &str) -> Result<Option<usize>, ExternalError> {
        self.delay().await;
        self.inner.delete(key).await
    }
    async fn restore(&self, key: &str) -> Result<(), ExternalError> {
        self.delay().await;
        self.inner.restore(key).await
    }
}

#[async_trait(?Send)]
impl<S: Consensus + ?Sized> Consensus for Delayed<S> {
    async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
        self.delay().await;
        self.inner.head(key).await
    }
    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: VersionedData,
    ) -> Result<CaSResult, ExternalError> {
        self.delay().await;
        self.inner.compare_and_set(key, expected, new).await
    }
    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<Vec<VersionedData>, ExternalError> {
        self.delay().await;
        self.inner.scan(key, from, limit).await
    }
    async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
        self.delay().await;
        self.inner.truncate(key, seqno).await
    }
    async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
        self.delay().await;
        self.inner.list_keys().await
    }
}

/// Whether a process is alive; shared by its gate and the scenario.
pub type AliveFlag = Rc<Cell<bool>>;

/// One process's view of storage. See the module docs.
pub struct ProcessGate {
    process: String,
    alive: AliveFlag,
    inner: Location,
    journal: Rc<RefCell<Journal>>,
    runtime: Runtime,
}

impl ProcessGate {
    /// The location process `process` uses while `alive` holds.
    pub fn location(
        process: &str,
        alive: AliveFlag,
        inner: Location,
        journal: Rc<RefCell<Journal>>,
        runtime: Runtime,
    ) -> Location {
        let gate = Rc::new(ProcessGate {
            process: process.to_string(),
            alive,
            inner,
            journal,
            runtime,
        });
        Location {
            blob: Rc::clone(&gate) as Rc<dyn Blob>,
            consensus: gate as Rc<dyn Consensus>,
        }
    }

    async fn pass(&self) {
        if !self.alive.get() {
            // A dead process never hears back.
            futures::future::pending::<()>().await;
        }
    }

    /// Logs a failed call as a fault (compare_and_set has its own record, [`cas_event`]).
    fn seen<T>(
        &self,
        service: &'static str,
        op: &str,
        key: &str,
        r: Result<T, ExternalError>,
    ) -> Result<T, ExternalError> {
        if let Err(e) = &r {
            let fact = Fact::FaultFired {
                service: service.into(),
                op: op.into(),
                error: e.to_string(),
                indeterminate: e.is_indeterminate(),
            };
            self.journal.borrow_mut().log.record(Pending {
                at_ms: self.runtime.now_ms(),
                actor: None,
                process: Some(self.process.clone()),
                component: service,
                kind: op.into(),
                outcome: if e.is_indeterminate() {
                    Outcome::Indeterminate
                } else {
                    Outcome::Retrying
                },
                detail: format!("{op} {key}: {e}"),
                fact: Some(fact),
            });
        }
        r
    }
}

#[async_trait(?Send)]
impl Blob for ProcessGate {
    async fn get(&self, key: &str) -> Result<Option<Bytes>, ExternalError> {
        self.pass().await;
        let r = self.inner.blob.get(key).await;
        self.seen("blob", "get", key, r)
    }
    async fn list_keys_and_metadata(
        &self,
        key_prefix: &str,
        f: &mut (dyn FnMut(BlobMetadata) + '_),
    ) -> Result<(), ExternalError> {
        self.pass().await;
        let r = self.inner.blob.list_keys_and_metadata(key_prefix, f).await;
        self.seen("blob", "list", key_prefix, r)
    }
    async fn set(&self, key: &str, value: Bytes) -> Result<(), ExternalError> {
        self.pass().await;
        let r = self.inner.blob.set(key, value).await;
        self.seen("blob", "set", key, r)
    }
    async fn delete(&self, key: &str) -> Result<Option<usize>, ExternalError> {
        self.pass().await;
        let r = self.inner.blob.delete(key).await;
        self.seen("blob", "delete", key, r)
    }
    async fn restore(&self, key: &str) -> Result<(), ExternalError> {
        self.pass().await;
        let r = self.inner.blob.restore(key).await;
        self.seen("blob", "restore", key, r)
    }
}

#[async_trait(?Send)]
impl Consensus for ProcessGate {
    async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
        self.pass().await;
        let r = self.inner.consensus.head(key).await;
        self.seen("consensus", "head", key, r)
    }
    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: VersionedData,
    ) -> Result<CaSResult, ExternalError> {
        self.pass().await;
        let (new_seqno, bytes) = (new.seqno.0, new.data.len() as u64);
        let result = self
            .inner
            .consensus
            .compare_and_set(key, expected, new)
            .await;
        let (outcome, error) = match &result {
            Ok(CaSResult::Committed) => (Outcome::Committed, None),
            Ok(CaSResult::ExpectationMismatch) => (Outcome::Mismatch, None),
            Err(e) if e.is_permanent() => (Outcome::Error, Some(e.to_string())),
            Err(e) if e.is_indeterminate() => (Outcome::Indeterminate, Some(e.to_string())),
            Err(e) => (Outcome::Retrying, Some(e.to_string())),
        };
        let attempt = CasAttempt {
            at_ms: self.runtime.now_ms(),
            process: self.process.clone(),
            key: key.to_string(),
            expected: expected.map(|s| s.0),
            new_seqno,
            bytes,
            outcome,
            error,
            taken_by: None,
        };
        self.journal.borrow_mut().record_cas(attempt);
        result
    }
    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<Vec<VersionedData>, ExternalError> {
        self.pass().await;
        let r = self.inner.consensus.scan(key, from, limit).await;
        self.seen("consensus", "scan", key, r)
    }
    async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
        self.pass().await;
        let r = self.inner.consensus.truncate(key, seqno).await;
        self.seen("consensus", "truncate", key, r)
    }
    async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
        self.pass().await;
        let r = self.inner.consensus.list_keys().await;
        self.seen("consensus", "list_keys", "", r)
    }
}

/// The bytes [`super::command::Command::CorruptRecord`] writes: not a valid state version.
pub const GARBAGE: &[u8] = b"\xffthis is not a persist state version\xff";

/// Writes [`GARBAGE`] as the next version of `key` on the raw Consensus. Returns its seqno.
pub async fn corrupt(consensus: &dyn Consensus, key: &str) -> Result<u64, CorruptError> {
    let head = consensus
        .head(key)
        .await
        .map_err(|e| CorruptError::Read(key.to_string(), e.to_string()))?;
    let Some(head) = head else {
        return Err(CorruptError::NoKey(key.to_string()));
    };
    let new = VersionedData {
        seqno: head.seqno.next(),
        data: Bytes::from_static(GARBAGE),
    };
    match consensus.compare_and_set(key, Some(head.seqno), new).await {
        Ok(CaSResult::Committed) => Ok(head.seqno.next().0),
        Ok(CaSResult::ExpectationMismatch) => Err(CorruptError::MovedOn(key.to_string())),
        Err(e) => Err(CorruptError::Write(key.to_string(), e.to_string())),
    }
}

/// Why [`corrupt`] wrote nothing (each names the key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CorruptError {
    /// Reading the key's head failed.
    #[error("could not read {0}: {1}")]
    Read(String, String),
    /// The key has no version.
    #[error("there is no Consensus key {0:?} to corrupt")]
    NoKey(String),
    /// Another writer wrote a version first.
    #[error("{0} moved on while it was being corrupted; try again")]
    MovedOn(String),
    /// The compare_and_set failed.
    #[error("could not corrupt {0}: {1}")]
    Write(String, String),
}
