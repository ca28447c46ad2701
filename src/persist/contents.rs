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
//! upper (a finished shard): both give no `as_of` and no updates, without a read.

use timely::progress::Antichain;

use super::codec::{Codec, Timestamp};
use super::error::PersistError;
use super::read::{ReadHandle, Update};

/// A shard's contents at an upper: consolidated updates, each at time `as_of`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentsAtUpper<K, V> {
    /// The time read: `max(upper - 1, since)`; `None` when the upper is 0 or empty (no read).
    pub as_of: Option<Timestamp>,
    /// Every `(key, value)` with its time (`as_of`) and accumulated diff, none zero (what
    /// [`ReadHandle::snapshot_and_fetch`] returns, as it returns it).
    pub updates: Vec<Update<K, V>>,
}

/// The time [`ReadHandle::contents_at_upper`] reads at, for `upper` and a reader's `since`.
pub fn contents_as_of(
    upper: &Antichain<Timestamp>,
    since: &Antichain<Timestamp>,
) -> Option<Timestamp> {
    let below = upper.as_option()?.checked_sub(1)?;
    Some(since.as_option().map_or(below, |&s| below.max(s)))
}

impl<K: Codec, V: Codec> ReadHandle<K, V> {
    /// The shard's contents at `upper` (a known upper of the shard, usually its current one):
    /// see the module docs.
    pub async fn contents_at_upper(
        &mut self,
        upper: &Antichain<Timestamp>,
    ) -> Result<ContentsAtUpper<K, V>, PersistError> {
        let Some(as_of) = contents_as_of(upper, self.since()) else {
            return Ok(ContentsAtUpper {
                as_of: None,
                updates: Vec::new(),
            });
        };
        let updates = self.snapshot_and_fetch(Antichain::from_elem(as_of)).await?;
        Ok(ContentsAtUpper {
            as_of: Some(as_of),
            updates,
        })
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
