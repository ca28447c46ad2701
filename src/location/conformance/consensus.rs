//! The [`Consensus`] suite: its cases, in order, each on the store as the cases before it left
//! it.

use std::future::Future;
use std::rc::Rc;

use futures::future::LocalBoxFuture;

use super::super::{CaSResult, Consensus, SeqNo, VersionedData, SCAN_ALL};
use super::{vd, ConformanceError};
use crate::location::ExternalError;

/// The [`Consensus`] contract, returning the first broken case.
pub async fn consensus_conformance<'a, F, Fut>(open: F) -> Result<(), ConformanceError>
where
    F: Fn() -> Fut + 'a,
    Fut: Future<Output = Result<Rc<dyn Consensus>, ExternalError>> + 'a,
{
    let open: Box<OpenConsensus<'a>> = Box::new(move || Box::pin(open()) as LocalBoxFuture<'a, _>);
    let consensus = open().await?;
    let mut suite = ConsensusSuite { open, consensus };
    for case in CONSENSUS_CASES {
        case(&mut suite).await?;
    }
    Ok(())
}

/// Opens a new handle onto the store under test.
type OpenConsensus<'a> =
    dyn Fn() -> LocalBoxFuture<'a, Result<Rc<dyn Consensus>, ExternalError>> + 'a;

/// What every case of the Consensus suite gets: the opener and the first handle.
struct ConsensusSuite<'a> {
    open: Box<OpenConsensus<'a>>,
    consensus: Rc<dyn Consensus>,
}

/// The key most cases write, and the one at the top of the seqno range.
const KEY: &str = "s00000000-0000-0000-0000-000000000000";
const KEY3: &str = "s-max";

/// The seqnos of `versions`, in order.
fn seqnos(versions: Vec<VersionedData>) -> Vec<u64> {
    versions.into_iter().map(|v| v.seqno.0).collect()
}

/// One case of the Consensus suite: it runs on the store as the cases before it left it.
type ConsensusCase =
    for<'x, 'a> fn(&'x mut ConsensusSuite<'a>) -> LocalBoxFuture<'x, Result<(), ConformanceError>>;

/// The Consensus suite's cases, in the order they run.
const CONSENSUS_CASES: [ConsensusCase; 10] = [
    consensus_absent_key,
    consensus_first_write,
    consensus_mismatches,
    consensus_seqno_range_checks,
    consensus_successors,
    consensus_scan,
    consensus_truncate,
    consensus_second_key,
    consensus_full_seqno_range,
    consensus_new_handle,
];

/// An absent key.
fn consensus_absent_key<'x, 'a>(
    s: &'x mut ConsensusSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let consensus = Rc::clone(&s.consensus);
        let key = KEY;
        check_eq!(consensus.head(key).await?, None, "head of an absent key");
        check_eq!(consensus.scan(key, SeqNo(0), SCAN_ALL).await?, vec![]);
        check_eq!(consensus.list_keys().await?, Vec::<String>::new());
        check!(
            consensus.truncate(key, SeqNo(0)).await.is_err(),
            "truncate of a key with no versions is an error"
        );
        Ok(())
    })
}

/// The first write needs `expected = None`.
fn consensus_first_write<'x, 'a>(
    s: &'x mut ConsensusSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let consensus = Rc::clone(&s.consensus);
        let key = KEY;
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
        Ok(())
    })
}

/// A mismatch whether the expectation is behind or ahead of the head.
fn consensus_mismatches<'x, 'a>(
    s: &'x mut ConsensusSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let consensus = Rc::clone(&s.consensus);
        let key = KEY;
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
        Ok(())
    })
}

/// The new seqno must be above the expected one and within [0, i64::MAX], even if the
/// expectation would match.
fn consensus_seqno_range_checks<'x, 'a>(
    s: &'x mut ConsensusSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let consensus = Rc::clone(&s.consensus);
        let key = KEY;
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
        Ok(())
    })
}

/// Successors, including a jump (the contract needs only "greater"; persist always adds 1).
fn consensus_successors<'x, 'a>(
    s: &'x mut ConsensusSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let consensus = Rc::clone(&s.consensus);
        let key = KEY;
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
        Ok(())
    })
}

/// scan: ascending in numeric order (10 after 6), bounded by from and limit.
fn consensus_scan<'x, 'a>(
    s: &'x mut ConsensusSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let consensus = Rc::clone(&s.consensus);
        let key = KEY;
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
        Ok(())
    })
}

/// truncate: errors beyond the head, deletes below the seqno, is idempotent.
fn consensus_truncate<'x, 'a>(
    s: &'x mut ConsensusSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let consensus = Rc::clone(&s.consensus);
        let key = KEY;
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
        Ok(())
    })
}

/// A second key is independent; list_keys lists both.
fn consensus_second_key<'x, 'a>(
    s: &'x mut ConsensusSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let consensus = Rc::clone(&s.consensus);
        let key = KEY;
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
        Ok(())
    })
}

/// The full seqno range keeps numeric order (no float or string-order surprises).
fn consensus_full_seqno_range<'x, 'a>(
    s: &'x mut ConsensusSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let consensus = Rc::clone(&s.consensus);
        let key3 = KEY3;
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
        Ok(())
    })
}

/// A new handle sees every committed version.
fn consensus_new_handle<'x, 'a>(
    s: &'x mut ConsensusSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let consensus = Rc::clone(&s.consensus);
        let key = KEY;
        let key3 = KEY3;
        let other = (s.open)().await?;
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
    })
}
