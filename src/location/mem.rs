//! In-memory [`Blob`] and [`Consensus`].
//!
//! Clones share their data, the way two connections share one database. Each operation happens
//! atomically at one instant; with a [`Latency`], the call first waits a seeded virtual delay on
//! the runtime, performs the operation, then waits again before reporting, so that under the
//! simulator concurrent commands interleave and race (an operation can have happened while its
//! caller has not heard yet), as they would against real storage.
//!
//! `MemBlob::delete` keeps the value aside so that `restore` can bring it back, as the original's
//! in-memory blob does.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use async_trait::async_trait;
use bytes::Bytes;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::{
    validate_compare_and_set, Blob, BlobMetadata, CaSResult, Consensus, ExternalError, SeqNo,
    VersionedData,
};
use crate::runtime::Runtime;
use crate::vec_map::VecMap;

/// A seeded virtual latency: each call waits a uniform draw from `[min_ms, max_ms]` before it
/// happens and another after.
#[derive(Clone)]
pub struct Latency {
    runtime: Runtime,
    rng: Rc<RefCell<Xoshiro256PlusPlus>>,
    min_ms: u64,
    max_ms: u64,
}

impl Latency {
    /// A latency on `runtime` drawn from `seed`, between `min_ms` and `max_ms` per half-call.
    pub fn new(runtime: Runtime, seed: u64, min_ms: u64, max_ms: u64) -> Self {
        Latency {
            runtime,
            rng: Rc::new(RefCell::new(Xoshiro256PlusPlus::seed_from_u64(seed))),
            min_ms: min_ms.min(max_ms),
            max_ms: max_ms.max(min_ms),
        }
    }

    async fn wait(&self) {
        let span = self.max_ms - self.min_ms + 1;
        let ms = self.min_ms + self.rng.borrow_mut().next_u64() % span;
        if ms == 0 {
            self.runtime.yield_now().await;
        } else {
            self.runtime.sleep(ms).await;
        }
    }
}

async fn with_latency<R>(latency: &Option<Latency>, op: impl FnOnce() -> R) -> R {
    if let Some(latency) = latency {
        latency.wait().await;
    }
    let result = op();
    if let Some(latency) = latency {
        latency.wait().await;
    }
    result
}

#[derive(Default)]
struct BlobEntry {
    value: Bytes,
    deleted: bool,
}

/// An in-memory [`Blob`]. See the module docs.
#[derive(Clone, Default)]
pub struct MemBlob {
    entries: Rc<RefCell<BTreeMap<String, BlobEntry>>>,
    latency: Option<Latency>,
}

impl MemBlob {
    /// An empty blob with no latency.
    pub fn new() -> Self {
        Self::default()
    }

    /// A handle onto the same data that waits `latency` around each call.
    pub fn with_latency(&self, latency: Latency) -> Self {
        MemBlob {
            entries: Rc::clone(&self.entries),
            latency: Some(latency),
        }
    }
}

#[async_trait(?Send)]
impl Blob for MemBlob {
    async fn get(&self, key: &str) -> Result<Option<Bytes>, ExternalError> {
        Ok(with_latency(&self.latency, || {
            self.entries
                .borrow()
                .get(key)
                .filter(|e| !e.deleted)
                .map(|e| e.value.clone())
        })
        .await)
    }

    async fn list_keys_and_metadata(
        &self,
        key_prefix: &str,
        f: &mut (dyn FnMut(BlobMetadata) + '_),
    ) -> Result<(), ExternalError> {
        let listed: Vec<BlobMetadata> = with_latency(&self.latency, || {
            self.entries
                .borrow()
                .range(key_prefix.to_string()..)
                .take_while(|(k, _)| k.starts_with(key_prefix))
                .filter(|(_, e)| !e.deleted)
                .map(|(k, e)| BlobMetadata {
                    key: k.clone(),
                    size_in_bytes: e.value.len() as u64,
                })
                .collect()
        })
        .await;
        listed.into_iter().for_each(f);
        Ok(())
    }

    async fn set(&self, key: &str, value: Bytes) -> Result<(), ExternalError> {
        with_latency(&self.latency, || {
            self.entries.borrow_mut().insert(
                key.to_string(),
                BlobEntry {
                    value,
                    deleted: false,
                },
            );
        })
        .await;
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<Option<usize>, ExternalError> {
        Ok(with_latency(&self.latency, || {
            let mut entries = self.entries.borrow_mut();
            match entries.get_mut(key) {
                Some(entry) if !entry.deleted => {
                    entry.deleted = true;
                    Some(entry.value.len())
                }
                _ => None,
            }
        })
        .await)
    }

    async fn restore(&self, key: &str) -> Result<(), ExternalError> {
        with_latency(&self.latency, || {
            let mut entries = self.entries.borrow_mut();
            match entries.get_mut(key) {
                Some(entry) => {
                    entry.deleted = false;
                    Ok(())
                }
                None => Err(ExternalError::determinate(format!(
                    "unable to restore {key}: it was never written"
                ))),
            }
        })
        .await
    }
}

/// An in-memory [`Consensus`]. See the module docs.
#[derive(Clone, Default)]
pub struct MemConsensus {
    // Invariant: each key's versions are sorted by seqno, strictly ascending, and non-empty.
    // A sorted Vec map: a handful of keys (one per shard and oracle).
    data: Rc<RefCell<VecMap<String, Vec<VersionedData>>>>,
    latency: Option<Latency>,
}

impl MemConsensus {
    /// An empty consensus with no latency.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the bytes stored at `seqno` of `key`, as a broken disk or a learner editing a
    /// record would (for tests and the playground's "corrupt" button). Returns whether that
    /// version exists. Seqnos and order are untouched.
    pub fn tamper(&self, key: &str, seqno: SeqNo, data: Bytes) -> bool {
        let mut all = self.data.borrow_mut();
        let Some(version) = all
            .get_mut(key)
            .and_then(|versions| versions.iter_mut().find(|v| v.seqno == seqno))
        else {
            return false;
        };
        version.data = data;
        true
    }

    /// A handle onto the same data that waits `latency` around each call.
    pub fn with_latency(&self, latency: Latency) -> Self {
        MemConsensus {
            data: Rc::clone(&self.data),
            latency: Some(latency),
        }
    }
}

#[async_trait(?Send)]
impl Consensus for MemConsensus {
    async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
        Ok(with_latency(&self.latency, || {
            self.data.borrow().get(key).and_then(|v| v.last().cloned())
        })
        .await)
    }

    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: VersionedData,
    ) -> Result<CaSResult, ExternalError> {
        validate_compare_and_set(expected, &new)?;
        Ok(with_latency(&self.latency, || {
            let mut data = self.data.borrow_mut();
            let versions = data.get_or_insert_with(key.to_string(), Vec::new);
            let current = versions.last().map(|v| v.seqno);
            if current != expected {
                if versions.is_empty() {
                    data.remove(key);
                }
                return CaSResult::ExpectationMismatch;
            }
            debug_assert!(current.is_none_or(|c| c < new.seqno));
            versions.push(new);
            CaSResult::Committed
        })
        .await)
    }

    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<Vec<VersionedData>, ExternalError> {
        Ok(with_latency(&self.latency, || {
            self.data
                .borrow()
                .get(key)
                .map_or_else(Vec::new, |versions| {
                    versions
                        .iter()
                        .filter(|v| v.seqno >= from)
                        .take(limit)
                        .cloned()
                        .collect()
                })
        })
        .await)
    }

    async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
        with_latency(&self.latency, || {
            let mut data = self.data.borrow_mut();
            let Some(versions) = data.get_mut(key) else {
                return Err(ExternalError::determinate(format!(
                    "cannot truncate {key} to {seqno}: the key has no versions"
                )));
            };
            let head = versions.last().map(|v| v.seqno).unwrap_or_default();
            if seqno > head {
                return Err(ExternalError::determinate(format!(
                    "cannot truncate {key} to {seqno}: beyond the head {head}"
                )));
            }
            let before = versions.len();
            versions.retain(|v| v.seqno >= seqno);
            Ok(before - versions.len())
        })
        .await
    }

    async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
        Ok(with_latency(&self.latency, || {
            self.data.borrow().keys().cloned().collect()
        })
        .await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::location::conformance::{blob_impl_test, consensus_impl_test};
    use crate::runtime::sim::Simulator;

    #[test]
    fn mem_blob_conformance() {
        let sim = Simulator::new(0);
        let blob = MemBlob::new();
        sim.block_on(blob_impl_test(move || {
            let blob = blob.clone();
            async move { Ok(Rc::new(blob) as Rc<dyn Blob>) }
        }))
        .unwrap()
        .unwrap();
    }

    #[test]
    fn mem_consensus_conformance() {
        let sim = Simulator::new(0);
        let consensus = MemConsensus::new();
        sim.block_on(consensus_impl_test(move || {
            let consensus = consensus.clone();
            async move { Ok(Rc::new(consensus) as Rc<dyn Consensus>) }
        }))
        .unwrap()
        .unwrap();
    }

    #[test]
    fn mem_conformance_with_virtual_latency() {
        // Goal: latency changes timing, never results. Every handle draws its own delays.
        for seed in 0..20 {
            let sim = Simulator::new(seed);
            let rt = sim.runtime();
            let (blob, consensus) = (MemBlob::new(), MemConsensus::new());
            let opened = Rc::new(std::cell::Cell::new(0u64));
            let (rt2, opened2) = (rt.clone(), Rc::clone(&opened));
            sim.block_on(blob_impl_test(move || {
                opened2.set(opened2.get() + 1);
                let blob = blob.with_latency(Latency::new(rt2.clone(), seed ^ opened2.get(), 0, 5));
                async move { Ok(Rc::new(blob) as Rc<dyn Blob>) }
            }))
            .unwrap()
            .unwrap();
            let t_blob = sim.now_ms();
            assert!(t_blob > 0, "latency moved virtual time");
            sim.block_on(consensus_impl_test(move || {
                let c = consensus.with_latency(Latency::new(rt.clone(), seed, 1, 3));
                async move { Ok(Rc::new(c) as Rc<dyn Consensus>) }
            }))
            .unwrap()
            .unwrap();
            assert!(sim.now_ms() > t_blob);
        }
    }

    #[test]
    fn racing_compare_and_sets_have_one_winner_per_seqno() {
        // Goal: under virtual latency, chains that race on one key interleave, lose, and still
        // produce exactly one winner per seqno.
        let sim = Simulator::new(42);
        let rt = sim.runtime();
        let base = MemConsensus::new();
        let wins = Rc::new(RefCell::new(Vec::new()));
        let losses = Rc::new(std::cell::Cell::new(0u64));
        let mut handles = Vec::new();
        for chain in 0..4u64 {
            let c = base.with_latency(Latency::new(rt.clone(), chain, 0, 4));
            let (wins, losses) = (Rc::clone(&wins), Rc::clone(&losses));
            handles.push(rt.spawn(&format!("chain{chain}"), async move {
                for _ in 0..25 {
                    let head = c.head("k").await.unwrap().map(|v| v.seqno);
                    let next = head.map_or(SeqNo(1), SeqNo::next);
                    let new = VersionedData {
                        seqno: next,
                        data: Bytes::from(format!("chain{chain}")),
                    };
                    match c.compare_and_set("k", head, new).await.unwrap() {
                        CaSResult::Committed => wins.borrow_mut().push(next.0),
                        CaSResult::ExpectationMismatch => losses.set(losses.get() + 1),
                    }
                }
            }));
        }
        sim.block_on(futures::future::join_all(handles)).unwrap();
        let mut wins = wins.borrow().clone();
        let n = wins.len() as u64;
        crate::sort::sort(&mut wins);
        wins.dedup();
        assert_eq!(wins.len() as u64, n, "no seqno was won twice");
        assert_eq!(wins, (1..=n).collect::<Vec<_>>(), "winners form 1..=n");
        assert!(losses.get() > 0, "the chains actually raced");
        assert_eq!(n + losses.get(), 100);
        let head = sim
            .block_on(async move { base.head("k").await })
            .unwrap()
            .unwrap();
        assert_eq!(head.map(|v| v.seqno), Some(SeqNo(n)));
    }
}
