//! The trace's unit tests, and helpers (`f`, `batch`) other modules' tests build batches with.

use super::*;
use crate::persist::state::BatchPart;

pub(crate) fn f(t: u64) -> Antichain<u64> {
    Antichain::from_elem(t)
}

/// A batch over `[lower, upper)` with `len` updates in one hollow part (none if empty).
pub(crate) fn batch(lower: u64, upper: u64, len: u64) -> HollowBatch {
    HollowBatch {
        desc: Description::new(f(lower), f(upper)),
        len,
        parts: if len > 0 {
            vec![BatchPart::Hollow {
                key: format!("p{lower}-{upper}"),
                encoded_size_bytes: len,
            }]
        } else {
            vec![]
        },
    }
}

/// A trace of batches `[0, 1), [1, 2), ...` with these lengths.
fn trace(lens: &[u64]) -> Trace {
    let mut t = Trace::default();
    for (i, len) in lens.iter().enumerate() {
        t.push_batch(batch(i as u64, i as u64 + 1, *len));
    }
    t.validate().unwrap();
    t
}

/// The output a compactor would produce for `req` (no consolidation, a fresh part).
fn output(req: &FueledMergeReq) -> HollowBatch {
    let len = req.inputs.iter().map(|b| b.len).sum();
    HollowBatch {
        desc: req.desc.clone(),
        len,
        parts: vec![BatchPart::Hollow {
            key: format!("merged-{:?}", req.desc.lower),
            encoded_size_bytes: len,
        }],
    }
}

fn bounds(reqs: &[FueledMergeReq]) -> Vec<(u64, u64)> {
    reqs.iter()
        .map(|r| (r.desc.lower[0], r.desc.upper[0]))
        .collect()
}

#[test]
fn levels_are_bit_lengths() {
    let levels: Vec<u32> = [0, 1, 2, 3, 4, 7, 8, 1023, 1024]
        .iter()
        .map(|n| level(*n))
        .collect();
    assert_eq!(levels, [0, 1, 2, 2, 3, 3, 4, 10, 11]);
    assert_eq!(level(u64::MAX), 64);
}

#[test]
fn consecutive_empty_batches_fuse() {
    let mut t = trace(&[3, 0]);
    t.push_batch(batch(2, 5, 0));
    t.push_batch(HollowBatch::empty(Description::new(f(5), Antichain::new())));
    assert_eq!(t.batches().len(), 2, "[2, 5) and [5, []) extended [1, 2)");
    assert_eq!(t.batches()[1].desc.lower, f(1));
    assert!(t.batches()[1].desc.upper.is_empty());
    assert!(t.upper().is_empty());
    t.validate().unwrap();
    // A batch with data after an empty one is appended as usual.
    let mut t = trace(&[0, 0, 2]);
    assert_eq!(t.batches().len(), 2);
    t.push_batch(batch(3, 4, 0));
    assert_eq!(t.batches().len(), 3);
}

#[test]
fn the_plan_merges_until_levels_strictly_decrease() {
    // 8 (level 4) stays; 1 and 1 (level 1 each) merge into level 2.
    assert_eq!(bounds(&trace(&[8, 1, 1]).merge_reqs()), [(1, 3)]);
    // A big batch after small ones rolls them up.
    assert_eq!(bounds(&trace(&[1, 8]).merge_reqs()), [(0, 2)]);
    // An empty batch merges into the next one, not into an older one.
    assert_eq!(bounds(&trace(&[5, 0, 3]).merge_reqs()), [(1, 3)]);
    assert_eq!(trace(&[5, 0]).merge_reqs(), vec![]);
    // Already tidy: nothing to do.
    assert_eq!(trace(&[100, 20, 5, 1]).merge_reqs(), vec![]);
    // Two disjoint groups, oldest first; the newest is the one a writer asks for.
    // Levels 7, 1, 1, 6, 3, 3: 1+1 rolls up into 40 (level 6 < 7); 4+4 merge (level 4 < 6).
    let t = trace(&[64, 1, 1, 40, 4, 4]);
    assert_eq!(bounds(&t.merge_reqs()), [(1, 4), (4, 6)]);
    assert_eq!(bounds(&[t.newest_merge_req().unwrap()]), [(4, 6)]);
    assert_eq!(trace(&[4, 1]).newest_merge_req(), None);
    assert_eq!(trace(&[]).merge_reqs(), vec![]);
    // Requests carry the inputs and the trace's since.
    let mut t = trace(&[1, 1]);
    t.downgrade_since(&f(7));
    let req = t.newest_merge_req().unwrap();
    assert_eq!(req.desc.since, f(7));
    assert_eq!(req.inputs, t.batches().to_vec());
}

#[test]
fn a_writer_merging_its_newest_request_keeps_the_trace_logarithmic() {
    // 1,000 one-update appends, each followed by the merge that includes it: the trace stays
    // tidy (levels strictly decrease), so it never holds more than log2(1000) + 1 batches.
    let mut t = Trace::default();
    let mut merges = 0;
    for i in 0..1_000u64 {
        t.push_batch(batch(i, i + 1, 1));
        if let Some(req) = t.newest_merge_req() {
            assert!(t.apply_merge_res(&req, &output(&req)).applied());
            merges += 1;
        }
        t.validate().unwrap();
        assert!(t.merge_reqs().is_empty(), "tidy after each carry");
        assert!(t.batches().len() <= 11);
    }
    // Like a binary counter: 1000 = 0b1111101000 has six one bits.
    assert_eq!(t.batches().len(), 6);
    // Every second append carries (one request, however many batches the carry spans).
    assert_eq!(merges, 500);
}

#[test]
fn apply_merge_res_exact() {
    let mut t = trace(&[8, 1, 1]);
    let req = t.merge_reqs().remove(0);
    let out = output(&req);
    assert_eq!(
        t.apply_merge_res(&req, &out),
        ApplyMergeResult::AppliedExact
    );
    assert_eq!(t.batches().len(), 2);
    assert_eq!(*t.batches()[1], out);
    t.validate().unwrap();
    // The same result again: one batch already covers the range.
    assert_eq!(
        t.apply_merge_res(&req, &out),
        ApplyMergeResult::NotAppliedNoMatch
    );
}

#[test]
fn apply_merge_res_subset_when_an_inner_merge_won() {
    // [4, 1, 1, 2]: the whole range merges; before it lands, [1, 1] merged on its own.
    let mut t = trace(&[4, 1, 1, 2]);
    let outer = t.merge_reqs().remove(0);
    assert_eq!(bounds(std::slice::from_ref(&outer)), [(0, 4)]);
    let inner = FueledMergeReq {
        desc: Description {
            lower: f(1),
            upper: f(3),
            since: t.since().clone(),
        },
        inputs: t.batches()[1..3].to_vec(),
    };
    assert_eq!(
        t.apply_merge_res(&inner, &output(&inner)),
        ApplyMergeResult::AppliedExact
    );
    let before = t.clone();
    let out = output(&outer);
    assert_eq!(
        t.apply_merge_res(&outer, &out),
        ApplyMergeResult::AppliedSubset
    );
    assert_eq!(t.batches(), &[Rc::new(out)][..]);
    assert_eq!((t.since(), t.upper()), (before.since(), before.upper()));
    t.validate().unwrap();
}

#[test]
fn apply_merge_res_no_match_when_a_larger_merge_won() {
    let mut t = trace(&[4, 1, 1, 2]);
    let outer = t.merge_reqs().remove(0);
    let inner = FueledMergeReq {
        desc: Description {
            lower: f(1),
            upper: f(3),
            since: t.since().clone(),
        },
        inputs: t.batches()[1..3].to_vec(),
    };
    assert!(t.apply_merge_res(&outer, &output(&outer)).applied());
    let before = t.clone();
    assert_eq!(
        t.apply_merge_res(&inner, &output(&inner)),
        ApplyMergeResult::NotAppliedNoMatch,
        "[1, 3) is no longer a pair of batch boundaries"
    );
    assert_eq!(t, before, "nothing changed");
    // An output whose description is not the request's never applies.
    let mut t = trace(&[1, 1]);
    let req = t.merge_reqs().remove(0);
    let mut out = output(&req);
    out.desc.upper = f(1);
    assert_eq!(
        t.apply_merge_res(&req, &out),
        ApplyMergeResult::NotAppliedNoMatch
    );
}

#[test]
fn apply_merge_res_invalid_since_and_too_many_updates() {
    let mut t = trace(&[1, 1]);
    t.downgrade_since(&f(1));
    let mut req = t.merge_reqs().remove(0);
    // A request compacted beyond the trace's since would lose history readers may read.
    req.desc.since = f(2);
    let before = t.clone();
    assert_eq!(
        t.apply_merge_res(&req, &output(&req)),
        ApplyMergeResult::NotAppliedInvalidSince
    );
    req.desc.since = f(1);
    let mut out = output(&req);
    out.len = 3;
    assert_eq!(
        t.apply_merge_res(&req, &out),
        ApplyMergeResult::NotAppliedTooManyUpdates
    );
    assert_eq!(t, before);
    assert_eq!(
        t.apply_merge_res(&req, &output(&req)),
        ApplyMergeResult::AppliedExact,
        "an output compacted to an earlier since than the trace's is fine"
    );
    t.validate().unwrap();
}

#[test]
fn validate_catches_broken_traces() {
    let t = trace(&[1, 1]);
    let mut gap = t.batches().to_vec();
    Rc::make_mut(&mut gap[1]).desc.lower = f(2);
    assert!(Trace::from_parts(f(0), f(2), gap).is_err());
    let mut late = t.batches().to_vec();
    Rc::make_mut(&mut late[0]).desc.since = f(5);
    assert!(
        Trace::from_parts(f(0), f(2), late).is_err(),
        "batch since beyond trace since"
    );
    assert!(
        Trace::from_parts(f(0), f(3), t.batches().to_vec()).is_err(),
        "upper"
    );
}

/// The premises of the spine back-pressure (module docs), over many seeded traces: a tidy trace
/// is within the bound with room to spare, a trace the plan merges nothing of is tidy, so one
/// over the bound always has a merge to do; and merging its whole plan makes it tidy.
#[test]
fn a_trace_over_the_spine_bound_always_has_a_merge_to_do() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |m: u64| {
        // xorshift64: deterministic, no dependency.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut over = 0;
    for _ in 0..2_000 {
        let n = 1 + next(60) as usize;
        // Mostly small batches, some empty, a few big ones.
        let lens: Vec<u64> = (0..n)
            .map(|_| match next(10) {
                0 => 0,
                1 => next(5_000),
                _ => 1 + next(4),
            })
            .collect();
        let mut t = trace(&lens);
        let tidy_cap = level(t.updates()) as usize + 1;
        assert_eq!(t.is_tidy(), t.merge_reqs().is_empty(), "{lens:?}");
        if t.is_tidy() {
            assert!(t.batches().len() <= tidy_cap, "{lens:?}");
            assert!(t.within_spine_bound());
        }
        if !t.within_spine_bound() {
            over += 1;
            assert!(!t.merge_reqs().is_empty(), "{lens:?}");
        }
        for req in t.merge_reqs() {
            assert!(t.apply_merge_res(&req, &output(&req)).applied());
        }
        assert!(t.is_tidy() && t.within_spine_bound(), "{lens:?}");
    }
    assert!(over > 100, "the draw reaches over the bound: {over}");
}
