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

use std::future::Future;
use std::rc::Rc;

use bytes::Bytes;

use super::{
    Blob, BlobMetadata, CaSResult, Consensus, ExternalError, SeqNo, VersionedData, SCAN_ALL,
};

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

/// The [`Blob`] contract. `open` returns a new handle onto one initially empty store. Panics
/// on a broken contract (see [`blob_conformance`]).
pub async fn blob_impl_test<F, Fut>(open: F) -> Result<(), ExternalError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Rc<dyn Blob>, ExternalError>>,
{
    or_panic(blob_conformance(open).await)
}

/// The [`Blob`] contract, returning the first broken case.
pub async fn blob_conformance<F, Fut>(open: F) -> Result<(), ConformanceError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Rc<dyn Blob>, ExternalError>>,
{
    let blob = open().await?;
    let (k0, k1, k2) = ("shard/part0", "shard/part1", "other/part2");
    let (v0, v1) = (Bytes::from_static(b"hello"), Bytes::from_static(b"world!"));

    // An empty store.
    check_eq!(blob.get(k0).await?, None, "get of an absent key");
    check_eq!(
        list(&*blob, "").await?,
        vec![],
        "an empty store lists nothing"
    );
    check_eq!(blob.delete(k0).await?, None, "delete of an absent key");

    // set, get, overwrite.
    blob.set(k0, v0.clone()).await?;
    check_eq!(blob.get(k0).await?, Some(v0.clone()));
    blob.set(k0, v1.clone()).await?;
    check_eq!(blob.get(k0).await?, Some(v1.clone()), "set overwrites");
    blob.set(k0, v0.clone()).await?;
    blob.set(k1, Bytes::new()).await?;
    check_eq!(
        blob.get(k1).await?,
        Some(Bytes::new()),
        "an empty value is a value"
    );
    blob.set(k2, v1.clone()).await?;

    // Listing by prefix, with sizes.
    check_eq!(
        list(&*blob, "").await?,
        vec![meta(k2, 6), meta(k0, 5), meta(k1, 0)]
    );
    check_eq!(
        list(&*blob, "shard/").await?,
        vec![meta(k0, 5), meta(k1, 0)]
    );
    check_eq!(list(&*blob, "shard/part1").await?, vec![meta(k1, 0)]);
    check_eq!(list(&*blob, "nothing").await?, vec![]);

    // A new handle sees the same data.
    let other = open().await?;
    check_eq!(
        other.get(k0).await?,
        Some(v0.clone()),
        "a new handle sees the data"
    );

    // delete reports whether the key existed; deleted keys are gone from get and list.
    check_eq!(blob.delete(k0).await?, Some(5), "delete returns the size");
    check_eq!(
        blob.delete(k0).await?,
        None,
        "a second delete finds nothing"
    );
    check_eq!(blob.get(k0).await?, None);
    check_eq!(
        other.get(k0).await?,
        None,
        "delete is visible to other handles"
    );
    check_eq!(list(&*blob, "shard/").await?, vec![meta(k1, 0)]);
    check_eq!(
        blob.delete(k1).await?,
        Some(0),
        "an empty value's size is 0"
    );

    // restore brings a deleted key back; it is idempotent; a never-written key cannot be restored.
    blob.restore(k0).await?;
    check_eq!(
        blob.get(k0).await?,
        Some(v0.clone()),
        "restore brings the value back"
    );
    blob.restore(k0).await?;
    blob.restore(k2).await?;
    check_eq!(
        blob.get(k2).await?,
        Some(v1.clone()),
        "restore of a live key changes nothing"
    );
    check!(
        blob.restore("shard/never-written").await.is_err(),
        "restoring a key that was never written is an error"
    );
    check_eq!(blob.get("shard/never-written").await?, None);

    // A deleted key can be written again.
    blob.set(k1, v1.clone()).await?;
    check_eq!(blob.get(k1).await?, Some(v1.clone()));
    check_eq!(
        list(&*other, "").await?,
        vec![meta(k2, 6), meta(k0, 5), meta(k1, 6)]
    );
    Ok(())
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

/// The [`Consensus`] contract, returning the first broken case.
pub async fn consensus_conformance<F, Fut>(open: F) -> Result<(), ConformanceError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Rc<dyn Consensus>, ExternalError>>,
{
    let consensus = open().await?;
    let key = "s00000000-0000-0000-0000-000000000000";
    let seqnos = |versions: Vec<VersionedData>| -> Vec<u64> {
        versions.into_iter().map(|v| v.seqno.0).collect()
    };

    // An absent key.
    check_eq!(consensus.head(key).await?, None, "head of an absent key");
    check_eq!(consensus.scan(key, SeqNo(0), SCAN_ALL).await?, vec![]);
    check_eq!(consensus.list_keys().await?, Vec::<String>::new());
    check!(
        consensus.truncate(key, SeqNo(0)).await.is_err(),
        "truncate of a key with no versions is an error"
    );

    // The first write needs `expected = None`.
    check_eq!(
        consensus
            .compare_and_set(key, Some(SeqNo(0)), vd(5, "x"))
            .await?,
        CaSResult::ExpectationMismatch,
        "expecting a version of an absent key"
    );
    check_eq!(
        consensus.head(key).await?,
        None,
        "a mismatch writes nothing"
    );
    check_eq!(
        consensus.compare_and_set(key, None, vd(5, "v5")).await?,
        CaSResult::Committed
    );
    check_eq!(consensus.head(key).await?, Some(vd(5, "v5")));
    check_eq!(
        consensus.compare_and_set(key, None, vd(6, "x")).await?,
        CaSResult::ExpectationMismatch,
        "expecting absence of a present key"
    );

    // A mismatch whether the expectation is behind or ahead of the head.
    check_eq!(
        consensus
            .compare_and_set(key, Some(SeqNo(4)), vd(6, "x"))
            .await?,
        CaSResult::ExpectationMismatch,
        "expected behind the head"
    );
    check_eq!(
        consensus
            .compare_and_set(key, Some(SeqNo(7)), vd(8, "x"))
            .await?,
        CaSResult::ExpectationMismatch,
        "expected ahead of the head"
    );
    check_eq!(consensus.head(key).await?, Some(vd(5, "v5")));

    // The new seqno must be above the expected one and within [0, i64::MAX], even if the
    // expectation would match.
    check!(consensus
        .compare_and_set(key, Some(SeqNo(5)), vd(5, "x"))
        .await
        .is_err());
    check!(consensus
        .compare_and_set(key, Some(SeqNo(5)), vd(3, "x"))
        .await
        .is_err());
    let too_big = SeqNo::maximum().0 + 1;
    check!(consensus
        .compare_and_set(key, Some(SeqNo(5)), vd(too_big, "x"))
        .await
        .is_err());
    check!(
        consensus
            .compare_and_set("fresh", None, vd(too_big, "x"))
            .await
            .is_err(),
        "the range check applies with expected = None too"
    );
    check_eq!(
        consensus.head(key).await?,
        Some(vd(5, "v5")),
        "errors write nothing"
    );
    check_eq!(consensus.head("fresh").await?, None);

    // Successors, including a jump (the contract needs only "greater"; persist always adds 1).
    check_eq!(
        consensus
            .compare_and_set(key, Some(SeqNo(5)), vd(6, "v6"))
            .await?,
        CaSResult::Committed
    );
    check_eq!(
        consensus
            .compare_and_set(key, Some(SeqNo(6)), vd(10, "v10"))
            .await?,
        CaSResult::Committed
    );
    check_eq!(consensus.head(key).await?, Some(vd(10, "v10")));

    // scan: ascending in numeric order (10 after 6), bounded by from and limit.
    check_eq!(
        seqnos(consensus.scan(key, SeqNo(0), SCAN_ALL).await?),
        vec![5, 6, 10]
    );
    check_eq!(
        consensus.scan(key, SeqNo(6), 1).await?,
        vec![vd(6, "v6")],
        "scan honours from and limit"
    );
    check_eq!(
        seqnos(consensus.scan(key, SeqNo(7), SCAN_ALL).await?),
        vec![10]
    );
    check_eq!(
        consensus.scan(key, SeqNo(11), SCAN_ALL).await?,
        vec![],
        "scan beyond the head"
    );
    check_eq!(
        consensus.scan(key, SeqNo(0), 0).await?,
        vec![],
        "a zero limit"
    );

    // truncate: errors beyond the head, deletes below the seqno, is idempotent.
    check!(
        consensus.truncate(key, SeqNo(11)).await.is_err(),
        "truncate beyond the head"
    );
    check_eq!(consensus.truncate(key, SeqNo(6)).await?, 1);
    check_eq!(
        consensus.truncate(key, SeqNo(6)).await?,
        0,
        "a repeat deletes nothing"
    );
    check_eq!(
        seqnos(consensus.scan(key, SeqNo(0), SCAN_ALL).await?),
        vec![6, 10]
    );
    check_eq!(
        consensus.truncate(key, SeqNo(10)).await?,
        1,
        "truncate to the head"
    );
    check_eq!(
        consensus.head(key).await?,
        Some(vd(10, "v10")),
        "the head survives"
    );
    check_eq!(
        seqnos(consensus.scan(key, SeqNo(0), SCAN_ALL).await?),
        vec![10]
    );

    // A second key is independent; list_keys lists both.
    let key2 = "s11111111-1111-1111-1111-111111111111";
    check_eq!(consensus.head(key2).await?, None);
    check_eq!(
        consensus.compare_and_set(key2, None, vd(1, "")).await?,
        CaSResult::Committed
    );
    check_eq!(
        consensus.head(key2).await?,
        Some(vd(1, "")),
        "empty data round-trips"
    );
    check_eq!(consensus.head(key).await?, Some(vd(10, "v10")));
    let mut keys = consensus.list_keys().await?;
    crate::sort::sort(&mut keys);
    check_eq!(keys, vec![key.to_string(), key2.to_string()]);

    // The full seqno range keeps numeric order (no float or string-order surprises).
    let key3 = "s-max";
    let near_max = SeqNo::maximum().0 - 1;
    check_eq!(
        consensus
            .compare_and_set(key3, None, vd(near_max, "a"))
            .await?,
        CaSResult::Committed
    );
    check_eq!(
        consensus
            .compare_and_set(key3, Some(SeqNo(near_max)), vd(SeqNo::maximum().0, "b"))
            .await?,
        CaSResult::Committed
    );
    check_eq!(
        seqnos(consensus.scan(key3, SeqNo(0), SCAN_ALL).await?),
        vec![near_max, SeqNo::maximum().0]
    );

    // A new handle sees every committed version.
    let other = open().await?;
    check_eq!(
        other.head(key).await?,
        Some(vd(10, "v10")),
        "a new handle sees the head"
    );
    check_eq!(
        other.head(key3).await?.map(|v| v.seqno),
        Some(SeqNo::maximum())
    );
    check_eq!(
        other
            .compare_and_set(key, Some(SeqNo(10)), vd(11, "v11"))
            .await?,
        CaSResult::Committed
    );
    check_eq!(
        consensus.head(key).await?,
        Some(vd(11, "v11")),
        "and vice versa"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use async_trait::async_trait;

    use super::*;
    use crate::location::mem::{MemBlob, MemConsensus};
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
