//! The pure core of a merge (no I/O): checking that a request merges consecutive batches,
//! advancing times to the request's since, and merging the inputs' updates into one
//! consolidated run. The compactor (`compact.rs`) fetches the inputs and commits the output.
//!
//! Every batch persist writes is consolidated, so each input arrives sorted by `(data, time)`;
//! advancing its times to one frontier keeps it sorted, so the inputs are merged run by run (a
//! linear pass per level of a balanced merge) rather than sorted again as a whole. An input that
//! is not sorted falls back to the sort.

use differential_dataflow::lattice::Lattice;
use timely::progress::Antichain;
use timely::PartialOrder;

use super::codec::Timestamp;
use super::consolidate::DiffOverflow;
use super::encoding::EncodedUpdate;
use super::state::Description;

/// Why a merge was refused: a request that does not describe a merge of consecutive batches.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// A merge needs inputs.
    #[error("a merge request without inputs")]
    NoInputs,
    /// Input `index` does not start where the one before it ends.
    #[error(
        "input {index} starts at {lower:?}, not at the previous input's upper {previous_upper:?}"
    )]
    NotConsecutive {
        /// The input.
        index: usize,
        /// Its lower.
        lower: Antichain<Timestamp>,
        /// The previous input's upper.
        previous_upper: Antichain<Timestamp>,
    },
    /// The inputs span `[lower, upper)`, which is not the request's interval.
    #[error("the inputs span [{lower:?}, {upper:?}), the request [{req_lower:?}, {req_upper:?})")]
    BoundsMismatch {
        /// Where the inputs start.
        lower: Antichain<Timestamp>,
        /// Where they end.
        upper: Antichain<Timestamp>,
        /// The request's lower.
        req_lower: Antichain<Timestamp>,
        /// The request's upper.
        req_upper: Antichain<Timestamp>,
    },
    /// The output since would be before input `index`'s since: compaction only moves forward.
    #[error("output since {since:?} is before input {index}'s since {input_since:?}")]
    SinceBeforeInput {
        /// The input.
        index: usize,
        /// Its since.
        input_since: Antichain<Timestamp>,
        /// The request's since.
        since: Antichain<Timestamp>,
    },
    /// The diffs of one update sum outside the 64-bit range.
    #[error("{0}")]
    DiffOverflow(#[from] DiffOverflow),
}

/// Checks that `inputs` are consecutive, that together they span exactly `desc`'s interval, and
/// that `desc.since` is not before any input's since.
pub fn validate_merge<'a>(
    desc: &Description,
    inputs: impl IntoIterator<Item = &'a Description>,
) -> Result<(), MergeError> {
    let mut span: Option<(&Antichain<Timestamp>, &Antichain<Timestamp>)> = None;
    for (index, input) in inputs.into_iter().enumerate() {
        if let Some((_, previous_upper)) = span {
            if &input.lower != previous_upper {
                return Err(MergeError::NotConsecutive {
                    index,
                    lower: input.lower.clone(),
                    previous_upper: previous_upper.clone(),
                });
            }
        }
        if !PartialOrder::less_equal(&input.since, &desc.since) {
            return Err(MergeError::SinceBeforeInput {
                index,
                input_since: input.since.clone(),
                since: desc.since.clone(),
            });
        }
        span = Some((span.map_or(&input.lower, |(lower, _)| lower), &input.upper));
    }
    let Some((lower, upper)) = span else {
        return Err(MergeError::NoInputs);
    };
    if lower != &desc.lower || upper != &desc.upper {
        return Err(MergeError::BoundsMismatch {
            lower: lower.clone(),
            upper: upper.clone(),
            req_lower: desc.lower.clone(),
            req_upper: desc.upper.clone(),
        });
    }
    Ok(())
}

/// The time every earlier update advances to when compacting to `desc`: the since, but never
/// past the interval's last time (`upper - 1`). When the since is beyond the batch, all its
/// updates collapse onto that last time: at every time at or beyond the since they accumulate
/// exactly as before, and they stay inside `[lower, upper)`, where readers look for them. `None`:
/// no advancing (both frontiers empty).
pub fn advance_to(desc: &Description) -> Option<Timestamp> {
    let since = desc.since.as_option().copied();
    let last = desc.upper.as_option().map(|u| u.saturating_sub(1));
    match (since, last) {
        (Some(s), Some(l)) => Some(s.min(l)),
        (s, l) => s.or(l),
    }
}

/// The pure core of a merge: checks the request ([`validate_merge`]), then each input's updates
/// (with the input's own description) filtered to that input's `[lower, upper)`, advanced to
/// `desc` ([`advance_to`]) and consolidated. An update whose diffs would sum outside the 64-bit
/// range is an error (the merge is not done).
pub fn merge_updates(
    desc: &Description,
    inputs: Vec<(Description, Vec<EncodedUpdate>)>,
) -> Result<Vec<EncodedUpdate>, MergeError> {
    validate_merge(desc, inputs.iter().map(|(d, _)| d))?;
    let advance = advance_to(desc).map(Antichain::from_elem);
    let mut runs = Vec::with_capacity(inputs.len());
    for (input, updates) in inputs {
        let mut run = Vec::with_capacity(updates.len());
        for (kv, mut t, d) in updates {
            if !input.lower.less_equal(&t) || input.upper.less_equal(&t) {
                continue;
            }
            if let Some(frontier) = &advance {
                t.advance_by(frontier.borrow());
            }
            run.push((kv, t, d));
        }
        runs.push(run);
    }
    // Every batch persist writes is consolidated, so each input is sorted by (data, time), and
    // advancing times to one frontier (a join, monotone) keeps it so: merging the runs costs a
    // linear pass per level of a balanced merge instead of a sort of everything. An input that
    // is not sorted (bytes from an older or foreign writer) falls back to the sort.
    let sorted = runs.iter().all(|run| is_sorted(run));
    let mut out = merge_sorted_runs(runs);
    if sorted {
        super::consolidate::consolidate_sorted_checked(&mut out)?;
    } else {
        super::consolidate::consolidate_checked(&mut out)?;
    }
    Ok(out)
}

fn update_cmp(a: &EncodedUpdate, b: &EncodedUpdate) -> std::cmp::Ordering {
    (&a.0, a.1).cmp(&(&b.0, b.1))
}

fn is_sorted(run: &[EncodedUpdate]) -> bool {
    run.windows(2).all(|w| update_cmp(&w[0], &w[1]).is_le())
}

/// Merges sorted runs into one sorted run, pairwise (a balanced tree: each update is moved
/// `log2(runs)` times). Unsorted runs give a concatenation in some order, which the caller sorts.
fn merge_sorted_runs(mut runs: Vec<Vec<EncodedUpdate>>) -> Vec<EncodedUpdate> {
    while runs.len() > 1 {
        let mut next = Vec::with_capacity(runs.len().div_ceil(2));
        let mut pairs = runs.into_iter();
        while let Some(a) = pairs.next() {
            match pairs.next() {
                Some(b) => next.push(merge_two(a, b)),
                None => next.push(a),
            }
        }
        runs = next;
    }
    runs.pop().unwrap_or_default()
}

/// Merges two sorted runs (stable: on a tie, `a`'s update comes first).
fn merge_two(a: Vec<EncodedUpdate>, b: Vec<EncodedUpdate>) -> Vec<EncodedUpdate> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => update_cmp(x, y).is_le(),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return out,
        };
        out.extend(if take_a { a.next() } else { b.next() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(t: u64) -> Antichain<u64> {
        Antichain::from_elem(t)
    }

    fn desc(lower: u64, upper: u64, since: u64) -> Description {
        Description {
            lower: f(lower),
            upper: f(upper),
            since: f(since),
        }
    }

    fn u(k: &str, t: u64, d: i64) -> EncodedUpdate {
        ((k.as_bytes().to_vec(), Vec::new()), t, d)
    }

    #[test]
    fn advance_to_is_the_since_clamped_to_the_last_time() {
        assert_eq!(advance_to(&desc(0, 10, 4)), Some(4));
        assert_eq!(
            advance_to(&desc(0, 10, 50)),
            Some(9),
            "since beyond the batch"
        );
        let mut open = desc(0, 10, 4);
        open.upper = Antichain::new();
        assert_eq!(advance_to(&open), Some(4), "a finished shard's last batch");
        let mut all = open.clone();
        all.since = Antichain::new();
        assert_eq!(advance_to(&all), None);
    }

    #[test]
    fn merge_filters_advances_and_consolidates() {
        // Two inputs; the first was truncated to [0, 5) (its part also holds t = 7).
        let a = (
            desc(0, 5, 0),
            vec![u("x", 1, 1), u("y", 2, 1), u("z", 7, 1)],
        );
        let b = (desc(5, 10, 0), vec![u("x", 6, -1), u("y", 8, 1)]);
        let out = merge_updates(&desc(0, 10, 6), vec![a, b]).unwrap();
        // x: +1 at 1 -> 6, -1 at 6: cancels. y: +1 at 2 -> 6, +1 at 8. z is outside its input.
        assert_eq!(out, vec![u("y", 6, 1), u("y", 8, 1)]);
        // Contents at every time >= since are unchanged: at 6, y=1; at 8, y=2.
    }

    #[test]
    fn merge_requests_that_are_not_merges_of_consecutive_batches_are_errors() {
        let x = |d: Description| (d, vec![u("x", 1, 1)]);
        // Not consecutive: a gap between [0, 5) and [6, 10).
        let gap = merge_updates(&desc(0, 10, 0), vec![x(desc(0, 5, 0)), x(desc(6, 10, 0))]);
        assert!(
            matches!(gap, Err(MergeError::NotConsecutive { index: 1, .. })),
            "{gap:?}"
        );
        // Out of order (an overlap).
        let back = merge_updates(&desc(0, 10, 0), vec![x(desc(5, 10, 0)), x(desc(0, 5, 0))]);
        assert!(
            matches!(back, Err(MergeError::NotConsecutive { .. })),
            "{back:?}"
        );
        // Bounds that do not match the request, on either side.
        for req in [desc(0, 12, 0), desc(1, 10, 0)] {
            let out = merge_updates(&req, vec![x(desc(0, 5, 0)), x(desc(5, 10, 0))]);
            assert!(
                matches!(out, Err(MergeError::BoundsMismatch { .. })),
                "{out:?}"
            );
        }
        // An output since before an input's since.
        let since = merge_updates(&desc(0, 10, 2), vec![x(desc(0, 5, 0)), x(desc(5, 10, 4))]);
        assert!(
            matches!(since, Err(MergeError::SinceBeforeInput { index: 1, .. })),
            "{since:?}"
        );
        assert_eq!(
            merge_updates(&desc(0, 10, 0), vec![]),
            Err(MergeError::NoInputs)
        );
        // The pure check is the one compaction runs before reading anything.
        assert!(validate_merge(&desc(0, 10, 4), [&desc(0, 5, 0), &desc(5, 10, 4)]).is_ok());
    }

    #[test]
    fn merging_sorted_runs_equals_sorting_everything() {
        // Seeded inputs over few keys and times (many equal updates across inputs), each input
        // consolidated as persist writes them, or left unsorted (the fallback): the merge must
        // equal the consolidation of everything, advanced, in one sort.
        let mut rng = 7u64;
        let mut next = |m: u64| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 33) % m
        };
        for case in 0..200 {
            let n_inputs = 1 + next(6);
            let since = next(12);
            let mut inputs = Vec::new();
            for i in 0..n_inputs {
                let d = desc(i * 2, i * 2 + 2, 0);
                let mut ups: Vec<EncodedUpdate> = (0..next(30))
                    .map(|_| {
                        let k = format!("k{}", next(5));
                        u(&k, i * 2 + next(2), next(5) as i64 - 2)
                    })
                    .collect();
                if case % 5 != 0 {
                    crate::persist::consolidate::consolidate_checked(&mut ups).unwrap();
                }
                inputs.push((d, ups));
            }
            let req = desc(0, n_inputs * 2, since);
            let mut expected: Vec<EncodedUpdate> = inputs
                .iter()
                .flat_map(|(_, ups)| ups.iter().cloned())
                .map(|(kv, t, d)| (kv, t.max(since.min(n_inputs * 2 - 1)), d))
                .collect();
            crate::persist::consolidate::consolidate_checked(&mut expected).unwrap();
            assert_eq!(
                merge_updates(&req, inputs).unwrap(),
                expected,
                "case {case}"
            );
        }
    }

    #[test]
    fn merge_beyond_the_batch_collapses_onto_its_last_time() {
        let a = (desc(0, 5, 0), vec![u("x", 1, 1), u("x", 3, 1)]);
        let b = (desc(5, 10, 0), vec![u("x", 6, -1)]);
        let out = merge_updates(&desc(0, 10, 100), vec![a, b]).unwrap();
        assert_eq!(
            out,
            vec![u("x", 9, 1)],
            "inside [lower, upper), accumulated"
        );
    }
}
