//! The events of one fixed scenario, pinned, so that the playground can rely on them: two writers
//! (in two processes, so their caches differ), one compare_and_set mismatch, one retry at the new
//! upper, and one compaction.
#![cfg(not(target_arch = "wasm32"))]

use std::rc::Rc;

use persist_playground::location::mem::{MemBlob, MemConsensus};
use persist_playground::location::{Location, SeqNo};
use persist_playground::persist::events::{CasOutcome, PersistEvent};
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::sim::Simulator;
use timely::progress::Antichain;

fn f(t: u64) -> Antichain<u64> {
    Antichain::from_elem(t)
}

/// One line per event: who (a role name), what, and the seqnos and frontiers it shows.
fn describe(e: &PersistEvent, roles: &[(String, &str)]) -> Option<String> {
    let role = |who: &str| {
        roles
            .iter()
            .find(|(id, _)| id == who)
            .map_or(who.to_string(), |(_, r)| r.to_string())
    };
    let outcome = |o: &CasOutcome| match o {
        CasOutcome::Committed => "committed".to_string(),
        CasOutcome::Mismatch => "mismatch".to_string(),
        CasOutcome::Skipped(why) => format!("skipped {why}"),
        CasOutcome::Indeterminate(_) => "indeterminate".to_string(),
        CasOutcome::Determinate(_) => "determinate".to_string(),
        CasOutcome::Permanent(_) => "permanent".to_string(),
    };
    Some(match e {
        PersistEvent::Command {
            who,
            cmd,
            expected,
            reached,
            outcome: o,
            upper,
            ..
        } => format!(
            "{} {cmd} v{}->v{} {} upper {:?}->{:?}",
            role(who),
            expected.0,
            reached.0,
            outcome(o),
            upper.0,
            upper.1
        ),
        PersistEvent::CompactionRequested {
            who,
            lower,
            upper,
            inputs,
            ..
        } => format!(
            "{} compaction requested [{lower:?}, {upper:?}) of {inputs}",
            role(who)
        ),
        PersistEvent::CompactionApplied {
            who,
            result,
            output_updates,
            ..
        } => format!(
            "{} compaction {result} ({output_updates} updates)",
            role(who)
        ),
        _ => return None,
    })
}

#[test]
fn two_writers_one_mismatch_one_retry_one_compaction() {
    let sim = Simulator::new(0);
    let rt = sim.runtime();
    let location = Location {
        blob: Rc::new(MemBlob::new()),
        consensus: Rc::new(MemConsensus::new()),
    };
    let cfg = PersistConfig {
        gc_enabled: false,
        rollup_threshold: 0,
        // Merge whatever the spine plans, so that two batches make the one compaction.
        compaction_min_inputs: 2,
        ..PersistConfig::default()
    };
    // Two processes: separate clients, separate caches, one event log each.
    let a = PersistClient::new(location.clone(), rt.clone(), cfg.clone(), 1);
    let b = PersistClient::new(location, rt.clone(), cfg, 2);
    let shard = ShardId::new("s-events").unwrap();
    let (a2, b2, shard2, rt2) = (a.clone(), b.clone(), shard.clone(), rt.clone());
    let (roles, a_events, b_events) = sim
        .block_on(async move {
            let mut wa = a2.open_writer::<String, ()>(&shard2).await.unwrap();
            let mut wb = b2.open_writer::<String, ()>(&shard2).await.unwrap();
            // A learns that B registered (so A's cache is current); then only the scenario counts.
            wa.fetch_recent_upper().await.unwrap();
            a2.events().take();
            b2.events().take();
            // A appends [0, 1).
            wa.compare_and_append(&[(("x".to_string(), ()), 0, 1)], f(0), f(1))
                .await
                .unwrap()
                .unwrap();
            // B, whose cache still says upper 0, tries the same interval: its compare_and_set
            // mismatches, it re-reads, and the re-applied transition reports the upper mismatch.
            let err = wb
                .compare_and_append(&[(("y".to_string(), ()), 0, 1)], f(0), f(1))
                .await
                .unwrap()
                .unwrap_err();
            assert_eq!(err.current, f(1));
            // B retries at the new upper; two one-update batches make the spine merge them.
            wb.compare_and_append(&[(("y".to_string(), ()), 1, 1)], f(1), f(2))
                .await
                .unwrap()
                .unwrap();
            // Let the background compaction finish.
            rt2.sleep(1_000).await;
            let (a_events, b_events) = (a2.events().events(), b2.events().events());
            let roles = vec![
                (wa.writer_id().0.clone(), "A"),
                (wb.writer_id().0.clone(), "B"),
            ];
            wa.expire().await;
            wb.expire().await;
            (roles, a_events, b_events)
        })
        .unwrap();
    let describe_all = |events: &[PersistEvent]| -> Vec<String> {
        events.iter().filter_map(|e| describe(e, &roles)).collect()
    };
    assert_eq!(
        describe_all(&a_events),
        vec!["A compare_and_append v4->v5 committed upper Some(0)->Some(1)"]
    );
    let b_events_raw = b_events;
    let b_events = describe_all(&b_events_raw);
    let expected = [
        "B compare_and_append v4->v5 mismatch upper Some(0)->Some(1)",
        "B compare_and_append v5->v5 skipped Upper(shard [1], writer [0]) upper Some(1)->Some(1)",
        "B compare_and_append v5->v6 committed upper Some(1)->Some(2)",
        "B compaction requested [Some(0), Some(2)) of 2",
        "B merge_res v6->v7 committed upper Some(2)->Some(2)",
        "B compaction AppliedExact (2 updates)",
    ];
    assert_eq!(b_events, expected, "B's events, in order");
    // The seqnos of committed commands across both processes form one chain.
    let mut committed: Vec<(SeqNo, SeqNo)> = a_events
        .iter()
        .chain(b_events_raw.iter())
        .filter_map(|e| match e {
            PersistEvent::Command {
                expected,
                reached,
                outcome: CasOutcome::Committed,
                ..
            } => Some((*expected, *reached)),
            _ => None,
        })
        .collect();
    committed.sort();
    for w in committed.windows(2) {
        assert_eq!(
            w[0].1, w[1].0,
            "each commit starts where the previous ended"
        );
    }
}
