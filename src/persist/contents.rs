//! "What the shard holds at its upper": the one read of a shard's contents at a known upper,
//! which the write task's re-sync, the library's `snapshot()`/`contents()` and the playground's
//! verify all make ([`ReadHandle::contents_at_upper`]).
//!
//! Every time before the upper is complete, so the contents at the upper are the updates at
//! times `<= upper - 1`, accumulated. The read is at `as_of = max(upper - 1, since)` (the
//! reader's since): a since that has passed `upper - 1` cannot be read below, and reading at it
//! gives the same accumulation, because nothing is written at or beyond the upper yet. A since
//! at or beyond the upper leaves the readable window `[since, upper)` empty: the read then waits,
//! as [`ReadHandle::snapshot_and_fetch`] does, until the upper passes the since.
//!
//! There is no `upper - 1` at upper 0 (nothing can be written below time 0) nor at the empty
//! upper (a finished shard): both give `None`, and no read.

use std::future::Future;

use timely::progress::Antichain;

use super::codec::{Codec, Timestamp};
use super::error::PersistError;
use super::read::{ReadHandle, Update};

/// The time [`ReadHandle::contents_at_upper`] reads at, for `upper` and a reader's `since`:
/// `max(upper - 1, since)`, or `None` at upper 0 or the empty upper.
pub fn contents_as_of(
    upper: &Antichain<Timestamp>,
    since: &Antichain<Timestamp>,
) -> Option<Timestamp> {
    let below = upper.as_option()?.checked_sub(1)?;
    Some(since.as_option().map_or(below, |&s| below.max(s)))
}

impl<K: Codec, V: Codec> ReadHandle<K, V> {
    /// The shard's contents at `upper` (a known upper of the shard, usually its current one):
    /// the time read and the read itself (consolidated updates, each at that time, as
    /// [`ReadHandle::snapshot_and_fetch`] returns them), or `None` when nothing can be there
    /// (see the module docs).
    ///
    /// It hands back the snapshot's own future rather than being an `async fn`: no second
    /// state machine per key and value type (the page's .wasm counts them).
    #[allow(clippy::type_complexity)]
    pub fn contents_at_upper(
        &mut self,
        upper: &Antichain<Timestamp>,
    ) -> Option<(
        Timestamp,
        impl Future<Output = Result<Vec<Update<K, V>>, PersistError>> + '_,
    )> {
        let as_of = contents_as_of(upper, self.since())?;
        Some((as_of, self.snapshot_and_fetch(Antichain::from_elem(as_of))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(t: Option<u64>) -> Antichain<u64> {
        t.map_or_else(Antichain::new, Antichain::from_elem)
    }

    #[test]
    fn as_of_is_upper_minus_one_clamped_to_the_since() {
        assert_eq!(contents_as_of(&f(Some(10)), &f(Some(3))), Some(9));
        assert_eq!(contents_as_of(&f(Some(10)), &f(Some(9))), Some(9));
        // The since has passed upper - 1: read at the since.
        assert_eq!(contents_as_of(&f(Some(10)), &f(Some(10))), Some(10));
        assert_eq!(contents_as_of(&f(Some(10)), &f(Some(25))), Some(25));
        // Nothing below time 0, no upper - 1 of a finished shard.
        assert_eq!(contents_as_of(&f(Some(0)), &f(Some(0))), None);
        assert_eq!(contents_as_of(&f(None), &f(Some(4))), None);
        // An empty since (a finalized shard's) leaves the as-of at upper - 1.
        assert_eq!(contents_as_of(&f(Some(7)), &f(None)), Some(6));
    }
}
