//! The upsert operator in a bare single-thread timely worker stepped by the test: the two
//! regression scenarios of the original (reference notes 4.5) with their exact consolidated
//! output, partial emission and provisional values, and errors reported on the health stream.
#![cfg(not(target_arch = "wasm32"))]

use differential_dataflow::consolidation::consolidate_updates;
use persist_playground::persist::codec::{Datum, Row};
use persist_playground::upsert::core::CoreObserver;
use persist_playground::upsert::types::{HealthStatusUpdate, UpsertKey, UpsertValue};
use persist_playground::upsert::worker::{OutputUpdate, UpsertWorker, UpsertWorkerConfig};
use timely::progress::Antichain;

fn key(k: i64) -> UpsertKey {
    UpsertKey::from_key(&Row::new([Datum::Int(k)]))
}

fn row(k: i64, v: i64) -> Row {
    Row::new([Datum::Int(k), Datum::Int(v)])
}

fn worker(resume: u64) -> UpsertWorker {
    UpsertWorker::new(
        UpsertWorkerConfig::new("test", Antichain::from_elem(resume)),
        CoreObserver::new("test"),
    )
}

fn msg(
    k: i64,
    v: Option<i64>,
    offset: u64,
    ts: u64,
) -> ((UpsertKey, Option<UpsertValue>, u64), u64, i64) {
    ((key(k), v.map(|v| Ok(row(k, v))), offset), ts, 1)
}

fn consolidated(mut out: Vec<OutputUpdate>) -> Vec<OutputUpdate> {
    consolidate_updates(&mut out);
    out
}

/// gh_9160: two keys; another replica wins the range [1, 3) with no data. Updates at time 3
/// that arrived under different capabilities (one batch with capability 2 holding msg2 at 2 and
/// msg3 at 3, then msg4 at 3) must be deduplicated together: the old bug drained msg3 and msg4
/// separately and retracted v0 twice.
#[test]
fn gh_9160_repro() {
    let mut w = worker(0);
    // 1. msg1 (key0 = v0, offset 1) at 0; the source advances to 2.
    w.send_source(vec![msg(0, Some(0), 1, 0)]).unwrap();
    w.advance_source(2);
    w.step(64);
    // This worker's write of (v0, 0, +1) is fed back; persist advances to 1.
    w.send_persist(vec![(Ok(row(0, 0)), 0, 1)]).unwrap();
    w.advance_persist(1);
    w.step(64);
    // 2. One batch under capability 2: msg2 (delete key1) at 2 and msg3 (key0 = v1) at 3.
    w.send_source(vec![msg(1, None, 2, 2), msg(0, Some(1), 3, 3)])
        .unwrap();
    w.advance_source(3);
    // Then msg4 (key0 = v2) at 3; the source advances to 4.
    w.send_source(vec![msg(0, Some(2), 4, 3)]).unwrap();
    w.advance_source(4);
    w.step(64);
    // 3. Another replica won [1, 3) with no data: persist advances to 3.
    w.advance_persist(3);
    w.step(64);

    let out = consolidated(w.take_output());
    assert_eq!(
        out,
        vec![
            (Ok(row(0, 0)), 0, 1),
            (Ok(row(0, 0)), 3, -1),
            (Ok(row(0, 2)), 3, 1),
        ]
    );
    let c = w.counters();
    assert_eq!(
        c.stash_discarded, 1,
        "msg2 at 2 lies below the persist upper 3: {c:?}"
    );
    assert_eq!(
        c.stash_superseded, 1,
        "msg3 loses to msg4 at (3, key0): {c:?}"
    );
    assert_eq!(w.health(), vec![]);
}

/// gh_9540: at one time, a delete (offset 4) arrives before an insert (offset 3) of the same
/// key: the highest offset wins, and deleting an absent key emits nothing.
fn gh_9540(separate_steps: bool) -> (Vec<OutputUpdate>, UpsertWorker) {
    let mut w = worker(0);
    w.send_source(vec![msg(0, Some(0), 1, 0)]).unwrap();
    w.advance_source(1);
    w.step(64);
    w.send_persist(vec![(Ok(row(0, 0)), 0, 1)]).unwrap();
    w.advance_persist(1);
    w.step(64);
    w.send_source(vec![msg(0, None, 2, 1)]).unwrap();
    w.advance_source(2);
    w.step(64);
    w.send_persist(vec![(Ok(row(0, 0)), 1, -1)]).unwrap();
    w.advance_persist(2);
    w.step(64);
    if separate_steps {
        // Each arrives on its own, exactly at the input frontier: partial drains.
        w.send_source(vec![msg(0, None, 4, 2)]).unwrap();
        w.step(64);
        w.send_source(vec![msg(0, Some(3), 3, 2)]).unwrap();
        w.step(64);
    } else {
        w.send_source(vec![msg(0, None, 4, 2), msg(0, Some(3), 3, 2)])
            .unwrap();
    }
    w.advance_source(3);
    w.step(64);
    (consolidated(w.take_output()), w)
}

#[test]
fn gh_9540_repro() {
    let expected = vec![(Ok(row(0, 0)), 0, 1), (Ok(row(0, 0)), 1, -1)];
    let (out, w) = gh_9540(false);
    assert_eq!(out, expected);
    assert_eq!(w.counters().stash_superseded, 1);
    // The same with the two updates in separate steps: the delete is drained partially and
    // leaves a provisional tombstone with order 4, so the insert (order 3) is skipped.
    let (out, w) = gh_9540(true);
    assert_eq!(out, expected);
    let c = w.counters();
    assert_eq!(c.skipped_by_order, 1, "{c:?}");
    assert!(c.drains_at_time >= 2, "{c:?}");
    // Every update that arrived exactly at the input frontier was drained partially and
    // wrote a provisional value: v0 at 0, the delete at 1, the delete at 2.
    assert_eq!(c.provisional_written, 3, "{c:?}");
    assert_eq!(c.provisional_overwritten, 2, "feedback for 0 and 1: {c:?}");
}

/// Partial emission: updates at the input frontier are emitted before the time is complete,
/// provisional values mark them in the state, later updates at that time retract them, and the
/// feedback of the final value overwrites the provisional one.
#[test]
fn partial_emission_is_retracted_and_overwritten_by_feedback() {
    let mut w = worker(0);
    w.advance_source(5);
    w.advance_persist(5);
    w.step(64);
    w.send_source(vec![msg(1, Some(10), 1, 5)]).unwrap();
    w.step(64);
    // Emitted already, though the source has not finished time 5.
    assert_eq!(consolidated(w.take_output()), vec![(Ok(row(1, 10)), 5, 1)]);
    let snap = w.snapshot().unwrap();
    assert_eq!(snap.state.len(), 1);
    assert_eq!(snap.state[0].mode, "provisional");
    assert_eq!(snap.state[0].provisional_time, Some(5));
    w.send_source(vec![msg(1, Some(11), 2, 5), msg(2, Some(20), 3, 5)])
        .unwrap();
    w.step(64);
    assert_eq!(
        consolidated(w.take_output()),
        vec![
            (Ok(row(1, 10)), 5, -1),
            (Ok(row(1, 11)), 5, 1),
            (Ok(row(2, 20)), 5, 1)
        ]
    );
    // The output frontier is held at 5 by the input.
    assert_eq!(w.output_frontier(), Antichain::from_elem(5));
    w.advance_source(6);
    w.step(64);
    assert_eq!(w.output_frontier(), Antichain::from_elem(6));
    // The consolidated feedback of time 5 arrives: it overwrites both provisional values.
    w.send_persist(vec![(Ok(row(1, 11)), 5, 1), (Ok(row(2, 20)), 5, 1)])
        .unwrap();
    w.advance_persist(6);
    w.step(64);
    let snap = w.snapshot().unwrap();
    assert!(snap
        .state
        .iter()
        .all(|c| c.mode == "consolidating" && c.decode_error.is_none()));
    assert_eq!(w.counters().provisional_overwritten, 2);
    assert_eq!(w.check_cells(), Ok(Some(2)));
}

/// The stash's capability is held only while the stash is non-empty, and updates wait for both
/// the source frontier and the persist upper.
#[test]
fn stashed_updates_wait_for_both_frontiers() {
    let mut w = worker(0);
    w.send_source(vec![msg(1, Some(1), 1, 3)]).unwrap();
    w.advance_source(4);
    w.step(64);
    // The persist upper is 0 < 3: nothing drains; the stash holds a capability.
    assert!(w.take_output().is_empty());
    assert_eq!(w.stash_len(), 1);
    let cap = w.snapshot().unwrap().stash_cap;
    assert!(matches!(cap, Some(t) if t <= 3), "{cap:?}");
    w.advance_persist(3);
    w.step(64);
    assert_eq!(consolidated(w.take_output()), vec![(Ok(row(1, 1)), 3, 1)]);
    assert_eq!(w.stash_len(), 0);
    assert_eq!(w.snapshot().unwrap().stash_cap, None);
    assert_eq!(w.output_frontier(), Antichain::from_elem(4));
}

/// Rehydration from the resume upper: updates before it are dropped, the snapshot at
/// resume - 1 seeds the state, and the first update after it retracts the rehydrated value.
#[test]
fn rehydrates_from_resume_upper() {
    let mut w = worker(10);
    // Feedback: the shard's snapshot at 9 (unconsolidated: v1 then v2).
    w.send_persist(vec![
        (Ok(row(1, 1)), 9, 1),
        (Ok(row(1, 1)), 9, -1),
        (Ok(row(1, 2)), 9, 1),
    ])
    .unwrap();
    // The source replays from earlier: updates before 10 are dropped.
    w.send_source(vec![msg(1, Some(1), 1, 4), msg(1, Some(2), 2, 8)])
        .unwrap();
    w.advance_source(10);
    w.send_source(vec![msg(1, Some(3), 3, 10)]).unwrap();
    w.advance_source(11);
    w.step(64);
    assert!(w.take_output().is_empty(), "not rehydrated yet");
    w.advance_persist(10);
    w.step(64);
    assert_eq!(
        consolidated(w.take_output()),
        vec![(Ok(row(1, 2)), 10, -1), (Ok(row(1, 3)), 10, 1)]
    );
    assert_eq!(w.counters().source_dropped_before_resume, 2);
    assert!(!w.snapshot().unwrap().hydrating);
    // The snapshot-progress stream is done once rehydration is.
    assert!(w.snapshot_frontier().is_empty());
}

/// While rehydrating, the snapshot-progress frontier follows the persist upper.
#[test]
fn snapshot_progress_follows_the_persist_upper_until_rehydrated() {
    let mut w = worker(10);
    w.advance_persist(4);
    w.step(64);
    assert_eq!(w.snapshot_frontier(), Antichain::from_elem(4));
    assert!(w.snapshot().unwrap().hydrating);
    w.advance_persist(10);
    w.step(64);
    assert!(w.snapshot_frontier().is_empty());
}

/// Feedback that does not decode (two values for one key) is reported on the health stream
/// and stops the operator; nothing panics, and the output frontier stops where it was.
#[test]
fn a_state_that_does_not_decode_is_a_health_error() {
    let mut w = worker(0);
    w.send_persist(vec![(Ok(row(1, 1)), 0, 1), (Ok(row(1, 2)), 0, 1)])
        .unwrap();
    w.advance_persist(1);
    w.send_source(vec![msg(1, Some(3), 1, 1)]).unwrap();
    w.advance_source(2);
    w.step(64);
    let health = w.health();
    assert_eq!(health.len(), 1, "{health:?}");
    match &health[0].1 {
        HealthStatusUpdate::Stalled {
            error, should_halt, ..
        } => {
            assert!(error.contains("diff_sum is 2"), "{error}");
            assert!(should_halt);
        }
        other => panic!("expected Stalled, got {other:?}"),
    }
    assert!(w.halted().is_some());
    assert!(w.take_output().is_empty());
    assert_eq!(
        w.output_frontier(),
        Antichain::from_elem(1),
        "the stash cap stays held"
    );
    // More input changes nothing and reports nothing more.
    w.send_source(vec![msg(2, Some(1), 2, 2)]).unwrap();
    w.advance_source(3);
    w.step(64);
    assert_eq!(w.health().len(), 1);
    assert!(w.take_output().is_empty());
}

/// A feedback row without its key column is an error too, and a source diff that is not
/// positive.
#[test]
fn malformed_inputs_are_health_errors() {
    let mut w = worker(0);
    w.send_persist(vec![(Ok(Row::default()), 0, 1)]).unwrap();
    w.advance_persist(1);
    w.step(64);
    assert!(w.halted().unwrap().contains("no key column"));

    let mut w = worker(0);
    w.send_source(vec![((key(1), None, 1), 0, -1)]).unwrap();
    w.advance_source(1);
    w.step(64);
    assert!(w.halted().unwrap().contains("positive diffs"));
    assert!(
        w.send_source(vec![msg(1, None, 1, 0)]).is_err(),
        "before the input's time"
    );
}

/// `snapshot_buffering_max` spreads source messages over activations; the result is the same.
#[test]
fn snapshot_buffering_max_spreads_work_without_changing_the_output() {
    let run = |max: Option<usize>| {
        let mut cfg = UpsertWorkerConfig::new("b", Antichain::from_elem(0));
        cfg.snapshot_buffering_max = max;
        let mut w = UpsertWorker::new(cfg, CoreObserver::new("b"));
        for i in 0..20 {
            w.send_source(vec![msg(i % 3, Some(i), i as u64 + 1, 0)])
                .unwrap();
        }
        w.advance_source(1);
        w.step(200);
        consolidated(w.take_output())
    };
    let all = run(None);
    assert_eq!(all.len(), 3);
    assert_eq!(run(Some(2)), all);
}

/// The shutdown button stops the operator: it releases its stash capability and emits nothing
/// more.
#[test]
fn the_shutdown_button_stops_the_operator() {
    let mut w = worker(0);
    w.send_source(vec![msg(1, Some(1), 1, 3)]).unwrap();
    w.advance_source(4);
    w.step(64);
    assert_eq!(w.stash_len(), 1);
    assert!(w.output_frontier().less_equal(&3));
    w.shutdown();
    w.advance_persist(3);
    w.step(64);
    assert!(w.take_output().is_empty());
    assert_eq!(
        w.output_frontier(),
        Antichain::from_elem(4),
        "the stash cap is released"
    );
}
