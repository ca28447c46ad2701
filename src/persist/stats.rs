//! Cost counters: what persist's commands and maintenance spend, for benchmarks and the profile of
//! one compare_and_append (see `examples/persist_bench.rs`).
//!
//! Two sources:
//! - [`CountingLocation`]: a Blob and Consensus decorator that counts every call and the bytes it
//!   moves (reads and writes), so the storage cost of a command is measured where it is paid;
//! - [`PersistStats`]: per-thread counters of work the core does that storage does not see: state
//!   encodes and decodes (diffs and rollups, with their bytes), rollups written, merges run and
//!   the bytes each merge reads and writes, and blobs swept by GC. [`stats`] reads them,
//!   [`reset_stats`] zeroes them. Natively only: on wasm32 they stay zero.
//!
//! Counting never changes behaviour: the counters are plain cells beside the work, read by no
//! code path of persist itself. One thread runs everything (the browser's model), so per-thread
//! cells are the process's counters.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use async_trait::async_trait;
use bytes::Bytes;
use serde::Serialize;

use crate::location::{
    Blob, BlobMetadata, CaSResult, Consensus, ExternalError, Location, SeqNo, VersionedData,
};

/// Work the core did, counted since the last [`reset_stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PersistStats {
    /// State diffs encoded (one per compare_and_set attempt).
    pub diff_encodes: u64,
    /// Their bytes.
    pub diff_encode_bytes: u64,
    /// State diffs decoded (fetches, GC walks).
    pub diff_decodes: u64,
    /// Their bytes.
    pub diff_decode_bytes: u64,
    /// Whole states encoded (rollups).
    pub rollup_encodes: u64,
    /// Their bytes.
    pub rollup_encode_bytes: u64,
    /// Whole states decoded (rollups read back).
    pub rollup_decodes: u64,
    /// Their bytes.
    pub rollup_decode_bytes: u64,
    /// Merges run by compaction (inputs read and consolidated).
    pub merges: u64,
    /// Encoded bytes the merges read (inline and Blob parts).
    pub merge_read_bytes: u64,
    /// Encoded bytes the merges wrote.
    pub merge_write_bytes: u64,
    /// Blobs deleted by a sweep (unreferenced, and no write in flight can commit them).
    pub swept_blobs: u64,
    /// Times an append waited under the spine back-pressure (`trace/mod.rs`).
    pub spine_backpressure_waits: u64,
}

thread_local! {
    static STATS: Cell<PersistStats> = Cell::new(PersistStats::default());
}

/// The counters since the last [`reset_stats`].
pub fn stats() -> PersistStats {
    STATS.with(Cell::get)
}

/// Zeroes the counters.
pub fn reset_stats() {
    STATS.with(|s| s.set(PersistStats::default()));
}

/// Adds to the counters. On wasm32 it counts nothing (the page's `.wasm` has a size budget, and
/// the benchmarks that read the counters run natively): [`stats`] stays zero there.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn count(f: impl FnOnce(&mut PersistStats)) {
    STATS.with(|s| {
        let mut v = s.get();
        f(&mut v);
        s.set(v);
    });
}

/// See the native `count`.
#[cfg(target_arch = "wasm32")]
pub(crate) fn count(_f: impl FnOnce(&mut PersistStats)) {}

/// Storage calls and bytes, as a [`CountingLocation`] saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LocationCounts {
    /// Consensus `head` calls.
    pub consensus_heads: u64,
    /// Consensus `compare_and_set` calls.
    pub consensus_cas: u64,
    /// Consensus `scan` calls.
    pub consensus_scans: u64,
    /// Consensus `truncate` calls.
    pub consensus_truncates: u64,
    /// Bytes Consensus returned (heads and scans).
    pub consensus_read_bytes: u64,
    /// Bytes written to Consensus (compare_and_sets).
    pub consensus_write_bytes: u64,
    /// Blob `get` calls.
    pub blob_gets: u64,
    /// Blob `set` calls.
    pub blob_sets: u64,
    /// Blob `delete` calls.
    pub blob_deletes: u64,
    /// Blob `list_keys_and_metadata` calls.
    pub blob_lists: u64,
    /// Bytes read from Blob.
    pub blob_read_bytes: u64,
    /// Bytes written to Blob.
    pub blob_write_bytes: u64,
}

impl LocationCounts {
    /// Every Consensus call.
    pub fn consensus_calls(&self) -> u64 {
        self.consensus_heads + self.consensus_cas + self.consensus_scans + self.consensus_truncates
    }

    /// Every Blob call.
    pub fn blob_calls(&self) -> u64 {
        self.blob_gets + self.blob_sets + self.blob_deletes + self.blob_lists
    }
}

/// A location whose Blob and Consensus count every call (see the module docs).
#[derive(Clone)]
pub struct CountingLocation {
    counts: Rc<RefCell<LocationCounts>>,
}

impl CountingLocation {
    /// Wraps `inner`: returns the counting location and the handle that reads its counts.
    pub fn wrap(inner: Location) -> (Location, CountingLocation) {
        let counts = Rc::new(RefCell::new(LocationCounts::default()));
        let location = Location {
            blob: Rc::new(CountingBlob {
                inner: inner.blob,
                counts: Rc::clone(&counts),
            }),
            consensus: Rc::new(CountingConsensus {
                inner: inner.consensus,
                counts: Rc::clone(&counts),
            }),
        };
        (location, CountingLocation { counts })
    }

    /// The counts so far.
    pub fn counts(&self) -> LocationCounts {
        *self.counts.borrow()
    }

    /// Zeroes the counts.
    pub fn reset(&self) {
        *self.counts.borrow_mut() = LocationCounts::default();
    }
}

struct CountingBlob {
    inner: Rc<dyn Blob>,
    counts: Rc<RefCell<LocationCounts>>,
}

#[async_trait(?Send)]
impl Blob for CountingBlob {
    async fn get(&self, key: &str) -> Result<Option<Bytes>, ExternalError> {
        let r = self.inner.get(key).await;
        let mut c = self.counts.borrow_mut();
        c.blob_gets += 1;
        if let Ok(Some(b)) = &r {
            c.blob_read_bytes += b.len() as u64;
        }
        r
    }
    async fn list_keys_and_metadata(
        &self,
        key_prefix: &str,
        f: &mut (dyn FnMut(BlobMetadata) + '_),
    ) -> Result<(), ExternalError> {
        self.counts.borrow_mut().blob_lists += 1;
        self.inner.list_keys_and_metadata(key_prefix, f).await
    }
    async fn set(&self, key: &str, value: Bytes) -> Result<(), ExternalError> {
        {
            let mut c = self.counts.borrow_mut();
            c.blob_sets += 1;
            c.blob_write_bytes += value.len() as u64;
        }
        self.inner.set(key, value).await
    }
    async fn delete(&self, key: &str) -> Result<Option<usize>, ExternalError> {
        self.counts.borrow_mut().blob_deletes += 1;
        self.inner.delete(key).await
    }
    async fn restore(&self, key: &str) -> Result<(), ExternalError> {
        self.inner.restore(key).await
    }
}

struct CountingConsensus {
    inner: Rc<dyn Consensus>,
    counts: Rc<RefCell<LocationCounts>>,
}

#[async_trait(?Send)]
impl Consensus for CountingConsensus {
    async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
        let r = self.inner.head(key).await;
        let mut c = self.counts.borrow_mut();
        c.consensus_heads += 1;
        if let Ok(Some(v)) = &r {
            c.consensus_read_bytes += v.data.len() as u64;
        }
        r
    }
    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: VersionedData,
    ) -> Result<CaSResult, ExternalError> {
        {
            let mut c = self.counts.borrow_mut();
            c.consensus_cas += 1;
            c.consensus_write_bytes += new.data.len() as u64;
        }
        self.inner.compare_and_set(key, expected, new).await
    }
    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<Vec<VersionedData>, ExternalError> {
        let r = self.inner.scan(key, from, limit).await;
        let mut c = self.counts.borrow_mut();
        c.consensus_scans += 1;
        if let Ok(vs) = &r {
            c.consensus_read_bytes += vs.iter().map(|v| v.data.len() as u64).sum::<u64>();
        }
        r
    }
    async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
        self.counts.borrow_mut().consensus_truncates += 1;
        self.inner.truncate(key, seqno).await
    }
    async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
        self.inner.list_keys().await
    }
}
