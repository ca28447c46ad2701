//! Conformance suites that make the [`Blob`] and [`Consensus`] contracts executable. Every
//! implementation's tests call them: natively for the in-memory backends and the decorator set to
//! always available, in headless Chrome for IndexedDB.
//!
//! Each suite takes a function that opens a *new handle onto the same store* (a clone sharing
//! memory, or a new IndexedDB connection), starts from an empty store, and checks that data written
//! through one handle is seen through another. [`blob_conformance`] and
//! [`consensus_conformance`] return a broken contract as [`ConformanceError::Broken`], naming the
//! case and what was seen (the npm package's `runLocationConformance` reports it to JavaScript);
//! [`blob_impl_test`] and [`consensus_impl_test`] panic with it instead, which is how a Rust test
//! fails. An unexpected storage error is returned by both.
//!
//! The suites live in a public module so that downstream backends can run them; they cost nothing
//! in the `.wasm` unless something exported calls them.

//!
//! Files: this one holds the error, the checks and the panicking wrappers; `blob.rs` and
//! `consensus.rs` hold each suite: one function per case, run in order by a table (a case runs
//! on the store as the cases before it left it).

use std::future::Future;
use std::rc::Rc;

use bytes::Bytes;

use super::{Blob, BlobMetadata, Consensus, ExternalError, SeqNo, VersionedData};
/// Why a conformance suite did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConformanceError {
    /// The implementation broke its contract: the case, and what it returned.
    Broken(String),
    /// A storage call failed where the contract says it succeeds.
    Storage(ExternalError),
}

impl From<ExternalError> for ConformanceError {
    fn from(e: ExternalError) -> Self {
        ConformanceError::Storage(e)
    }
}

impl std::fmt::Display for ConformanceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConformanceError::Broken(case) => write!(f, "contract broken: {case}"),
            ConformanceError::Storage(e) => write!(f, "unexpected storage error: {e}"),
        }
    }
}

/// `assert_eq!` that returns [`ConformanceError::Broken`] instead of panicking.
macro_rules! check_eq {
    ($left:expr, $right:expr $(,)?) => {
        check_eq!($left, $right, "{}", stringify!($left))
    };
    ($left:expr, $right:expr, $($msg:tt)+) => {{
        let (left, right) = (&$left, &$right);
        if left != right {
            return Err(ConformanceError::Broken(format!(
                "{} (line {}): got {:?}, expected {:?}",
                format!($($msg)+),
                line!(),
                left,
                right
            )));
        }
    }};
}

/// `assert!` that returns [`ConformanceError::Broken`] instead of panicking.
macro_rules! check {
    ($cond:expr $(,)?) => {
        check!($cond, "{}", stringify!($cond))
    };
    ($cond:expr, $($msg:tt)+) => {{
        if !$cond {
            return Err(ConformanceError::Broken(format!(
                "{} (line {})",
                format!($($msg)+),
                line!()
            )));
        }
    }};
}

/// Panics on a broken contract (a Rust test fails), returns a storage error.
fn or_panic(r: Result<(), ConformanceError>) -> Result<(), ExternalError> {
    match r {
        Ok(()) => Ok(()),
        Err(ConformanceError::Storage(e)) => Err(e),
        Err(ConformanceError::Broken(case)) => panic!("{case}"),
    }
}

fn vd(seqno: u64, data: &str) -> VersionedData {
    VersionedData {
        seqno: SeqNo(seqno),
        data: Bytes::copy_from_slice(data.as_bytes()),
    }
}

async fn list(blob: &dyn Blob, prefix: &str) -> Result<Vec<BlobMetadata>, ExternalError> {
    let mut out = Vec::new();
    blob.list_keys_and_metadata(prefix, &mut |m| out.push(m))
        .await?;
    crate::sort::sort_by(&mut out, |a, b| a.key.cmp(&b.key));
    Ok(out)
}

fn meta(key: &str, size: u64) -> BlobMetadata {
    BlobMetadata {
        key: key.to_string(),
        size_in_bytes: size,
    }
}

mod blob;
mod consensus;

pub use blob::blob_conformance;
pub use consensus::consensus_conformance;

/// The [`Blob`] contract. `open` returns a new handle onto one initially empty store. Panics
/// on a broken contract (see [`blob_conformance`]).
pub async fn blob_impl_test<F, Fut>(open: F) -> Result<(), ExternalError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Rc<dyn Blob>, ExternalError>>,
{
    or_panic(blob_conformance(open).await)
}

/// The [`Consensus`] contract. `open` returns a new handle onto one initially empty store.
/// Panics on a broken contract (see [`consensus_conformance`]).
pub async fn consensus_impl_test<F, Fut>(open: F) -> Result<(), ExternalError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Rc<dyn Consensus>, ExternalError>>,
{
    or_panic(consensus_conformance(open).await)
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use async_trait::async_trait;

    use super::*;
    use crate::location::mem::{MemBlob, MemConsensus};
    use crate::location::CaSResult;
    use crate::runtime::sim::Simulator;

    /// A Consensus that writes whatever the head: it breaks compare_and_set's contract.
    struct IgnoresExpected(MemConsensus);

    #[async_trait(?Send)]
    impl Consensus for IgnoresExpected {
        async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
            self.0.head(key).await
        }
        async fn compare_and_set(
            &self,
            key: &str,
            _expected: Option<SeqNo>,
            new: VersionedData,
        ) -> Result<CaSResult, ExternalError> {
            let head = self.0.head(key).await?.map(|v| v.seqno);
            self.0.compare_and_set(key, head, new).await
        }
        async fn scan(
            &self,
            key: &str,
            from: SeqNo,
            limit: usize,
        ) -> Result<Vec<VersionedData>, ExternalError> {
            self.0.scan(key, from, limit).await
        }
        async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
            self.0.truncate(key, seqno).await
        }
        async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
            self.0.list_keys().await
        }
    }

    #[test]
    fn a_broken_contract_is_returned_with_its_case() {
        let sim = Simulator::new(0);
        let consensus = MemConsensus::new();
        let out = sim
            .block_on(consensus_conformance(move || {
                let c = IgnoresExpected(consensus.clone());
                async move { Ok(Rc::new(c) as Rc<dyn Consensus>) }
            }))
            .unwrap();
        match out {
            Err(ConformanceError::Broken(case)) => {
                assert!(
                    case.starts_with("expecting a version of an absent key"),
                    "{case}"
                );
                assert!(
                    case.contains("got Committed, expected ExpectationMismatch"),
                    "{case}"
                );
            }
            other => panic!("expected a broken case, got {other:?}"),
        }
    }

    #[test]
    fn the_built_in_backends_pass_the_returning_suites() {
        let sim = Simulator::new(0);
        let (blob, consensus) = (MemBlob::new(), MemConsensus::new());
        let out = sim
            .block_on(async move {
                let b = blob_conformance(|| {
                    let blob = blob.clone();
                    async move { Ok(Rc::new(blob) as Rc<dyn Blob>) }
                })
                .await;
                let c = consensus_conformance(|| {
                    let consensus = consensus.clone();
                    async move { Ok(Rc::new(consensus) as Rc<dyn Consensus>) }
                })
                .await;
                (b, c)
            })
            .unwrap();
        assert_eq!(out, (Ok(()), Ok(())));
    }

    #[test]
    #[should_panic(expected = "expecting a version of an absent key")]
    fn the_panicking_suite_still_panics_with_the_case() {
        let sim = Simulator::new(0);
        let consensus = MemConsensus::new();
        let _ = sim.block_on(consensus_impl_test(move || {
            let c = IgnoresExpected(consensus.clone());
            async move { Ok(Rc::new(c) as Rc<dyn Consensus>) }
        }));
    }
}
