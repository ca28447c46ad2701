#![allow(dead_code)] // each test target uses a part of it
//! A store that can be closed for good, natively: the simulator's stand-in for an IndexedDB
//! connection closed under a running component (`idb.rs` answers the same permanent error).
//! Until [`Closable::close`], every call passes through; afterwards every call fails at once with
//! [`ExternalError::Permanent`] (kind `Closed`, at the store), and nothing reaches the inner
//! store. It counts the calls that reached the inner store, so a test can show that a component
//! stopped touching it.

use std::cell::Cell;
use std::rc::Rc;

use async_trait::async_trait;
use bytes::Bytes;
use persist_playground::location::{
    Blob, BlobMetadata, BrokenAt, CaSResult, Consensus, ExternalError, Location, PermanentKind,
    SeqNo, VersionedData,
};

/// The switch and the counter shared by a [`ClosableBlob`] and a [`ClosableConsensus`].
#[derive(Clone, Default)]
pub struct Closable {
    closed: Rc<Cell<bool>>,
    calls: Rc<Cell<u64>>,
}

impl Closable {
    /// Closes the store for good.
    pub fn close(&self) {
        self.closed.set(true);
    }

    /// Calls that reached the inner store so far.
    pub fn calls(&self) -> u64 {
        self.calls.get()
    }

    /// `location` behind this switch.
    pub fn wrap(&self, location: Location) -> Location {
        Location {
            blob: Rc::new(ClosableBlob {
                inner: location.blob,
                switch: self.clone(),
            }),
            consensus: self.wrap_consensus(location.consensus),
        }
    }

    /// `consensus` behind this switch.
    pub fn wrap_consensus(&self, consensus: Rc<dyn Consensus>) -> Rc<dyn Consensus> {
        Rc::new(ClosableConsensus {
            inner: consensus,
            switch: self.clone(),
        })
    }

    fn pass(&self) -> Result<(), ExternalError> {
        if self.closed.get() {
            return Err(ExternalError::permanent(
                "test store",
                BrokenAt::Store,
                PermanentKind::Closed,
                "connection closed for good: closed by the test",
            ));
        }
        self.calls.set(self.calls.get() + 1);
        Ok(())
    }
}

/// A [`Blob`] behind a [`Closable`].
pub struct ClosableBlob {
    inner: Rc<dyn Blob>,
    switch: Closable,
}

#[async_trait(?Send)]
impl Blob for ClosableBlob {
    async fn get(&self, key: &str) -> Result<Option<Bytes>, ExternalError> {
        self.switch.pass()?;
        self.inner.get(key).await
    }
    async fn list_keys_and_metadata(
        &self,
        key_prefix: &str,
        f: &mut (dyn FnMut(BlobMetadata) + '_),
    ) -> Result<(), ExternalError> {
        self.switch.pass()?;
        self.inner.list_keys_and_metadata(key_prefix, f).await
    }
    async fn set(&self, key: &str, value: Bytes) -> Result<(), ExternalError> {
        self.switch.pass()?;
        self.inner.set(key, value).await
    }
    async fn delete(&self, key: &str) -> Result<Option<usize>, ExternalError> {
        self.switch.pass()?;
        self.inner.delete(key).await
    }
    async fn restore(&self, key: &str) -> Result<(), ExternalError> {
        self.switch.pass()?;
        self.inner.restore(key).await
    }
}

/// A [`Consensus`] behind a [`Closable`].
pub struct ClosableConsensus {
    inner: Rc<dyn Consensus>,
    switch: Closable,
}

#[async_trait(?Send)]
impl Consensus for ClosableConsensus {
    async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
        self.switch.pass()?;
        self.inner.head(key).await
    }
    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: VersionedData,
    ) -> Result<CaSResult, ExternalError> {
        self.switch.pass()?;
        self.inner.compare_and_set(key, expected, new).await
    }
    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<Vec<VersionedData>, ExternalError> {
        self.switch.pass()?;
        self.inner.scan(key, from, limit).await
    }
    async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
        self.switch.pass()?;
        self.inner.truncate(key, seqno).await
    }
    async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
        self.switch.pass()?;
        self.inner.list_keys().await
    }
}
