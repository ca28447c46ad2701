//! Live mode's one clock: milliseconds since the database was created. The database keeps its
//! creation time (a wall-clock reading, in ms since the Unix epoch) in Consensus under
//! [`CLOCK_KEY`], written once by the first page that opens it; every later page, after a reload
//! or in another tab, reads it back and measures time from it. So every time a page shows (an
//! upper, a since, a lease, a timestamp) is on the same clock before and after a reload, in every
//! tab, and none is negative or a raw epoch number.
//!
//! The record is 8 bytes, the creation time as a big-endian `u64`; anything else is a typed
//! error, never a panic. Two pages opening a new database at once race with compare_and_set: one
//! writes, the other reads what it wrote, so both agree.

use crate::location::{CaSResult, Consensus, ExternalError, SeqNo, VersionedData};

/// The Consensus key of the record.
pub const CLOCK_KEY: &str = "playground_clock";

/// Why the database's clock could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockError {
    /// The store failed.
    #[error("the database's clock record could not be read or written: {0}")]
    Store(#[from] ExternalError),
    /// The record is not 8 bytes.
    #[error("the database's clock record ({CLOCK_KEY}) is {0} bytes, not 8: reset the database")]
    Corrupt(usize),
}

/// The database's creation time (ms since the Unix epoch): read, or written as `wall_now_ms` by
/// the first page. Live pages measure time as `wall clock - this`.
pub async fn database_epoch(
    consensus: &dyn Consensus,
    wall_now_ms: u64,
) -> Result<u64, ClockError> {
    for _ in 0..3 {
        if let Some(v) = consensus.head(CLOCK_KEY).await? {
            let bytes: [u8; 8] = v
                .data
                .as_ref()
                .try_into()
                .map_err(|_| ClockError::Corrupt(v.data.len()))?;
            return Ok(u64::from_be_bytes(bytes));
        }
        let new = VersionedData {
            seqno: SeqNo(0),
            data: bytes::Bytes::copy_from_slice(&wall_now_ms.to_be_bytes()),
        };
        if consensus.compare_and_set(CLOCK_KEY, None, new).await? == CaSResult::Committed {
            return Ok(wall_now_ms);
        }
        // Another page wrote it first: read theirs.
    }
    Err(ClockError::Store(ExternalError::determinate(
        "the clock record kept changing",
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::location::mem::MemConsensus;
    use crate::runtime::sim::Simulator;

    #[test]
    fn the_first_page_writes_the_epoch_and_every_later_page_reads_it() {
        let sim = Simulator::new(1);
        let c = MemConsensus::new();
        let out = sim
            .block_on(async move {
                let first = database_epoch(&c, 1_796_150_000_000).await;
                // A reload, later on the wall clock: the same epoch.
                let reload = database_epoch(&c, 1_796_150_060_000).await;
                c.compare_and_set(
                    "other",
                    None,
                    VersionedData {
                        seqno: SeqNo(0),
                        data: bytes::Bytes::from_static(b"short"),
                    },
                )
                .await
                .unwrap();
                let c2 = MemConsensus::new();
                c2.compare_and_set(
                    CLOCK_KEY,
                    None,
                    VersionedData {
                        seqno: SeqNo(0),
                        data: bytes::Bytes::from_static(b"short"),
                    },
                )
                .await
                .unwrap();
                let corrupt = database_epoch(&c2, 5).await;
                (first, reload, corrupt)
            })
            .unwrap();
        assert_eq!(out.0, Ok(1_796_150_000_000));
        assert_eq!(out.1, Ok(1_796_150_000_000), "a reload keeps the clock");
        assert_eq!(out.2, Err(ClockError::Corrupt(5)));
    }
}
