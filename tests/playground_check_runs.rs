//! The live check of the history (src/playground/check/) over real seeded runs: the page's default
//! scenario with faults, crashes and restarts runs clean while every rule is checked; GC truncating
//! behind the store observer does not confuse it; and a break written straight into Consensus is
//! found at once, so the path scenario -> facts -> check can fail.

#![cfg(not(target_arch = "wasm32"))]

use persist_playground::playground::check::CheckReport;
use persist_playground::playground::command::{
    ActorSpec, Command, FaultKnobs, OracleSpec, Service, TaskOp, WriterSpec,
};
use persist_playground::playground::fact::Fact;
use persist_playground::playground::table::default_actors;
use persist_playground::playground::Scenario;

fn add(s: &mut Scenario, spec: ActorSpec) -> String {
    s.apply(Command::AddActor {
        spec,
        process: None,
    })
    .expect("command applies")
    .actor
    .expect("an actor")
}

/// The page's default actors (`table::default_actors`, the page's `defaultActors`), with the
/// generator on.
fn default_scenario(seed: u64) -> Scenario {
    let mut s = Scenario::seeded(seed);
    for spec in default_actors() {
        add(&mut s, spec);
    }
    s.apply(Command::SetGenerator { on: true }).unwrap();
    s
}

fn counts(r: &CheckReport) -> String {
    r.rules
        .iter()
        .map(|r| format!("{} {}/{}/{}", r.rule, r.checks, r.violations, r.unverified))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Polls a future of the in-memory store once: its calls finish without waiting.
fn now<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("the raw in-memory store answers at once"),
    }
}

fn faulty(s: &mut Scenario, rate: f64) {
    let knobs = FaultKnobs {
        fail_rate: rate,
        timeout_rate: rate,
        ..FaultKnobs::default()
    };
    for service in [Service::Blob, Service::Consensus] {
        s.apply(Command::SetFaults { service, knobs }).unwrap();
    }
}

fn process_of(s: &mut Scenario, actor: &str) -> String {
    let snap = s.snapshot();
    snap.actors
        .iter()
        .find(|a| a.id == actor)
        .unwrap()
        .process
        .clone()
}

#[test]
fn default_runs_with_faults_and_crashes_break_no_rule_and_check_every_rule() {
    // Goal: on real runs of the page's default scenario, with faults on and processes crashing
    // and restarting (a writer, the oracle, a replica), a second oracle fencing the first and the
    // reader holding its since a while, the check finds no break, and every rule
    // is checked, many times. Method: two seeds, 30 s of virtual time each, in 250 ms slices
    // with a pump after each (as the page's frames do).
    for seed in [1, 2] {
        let mut s = default_scenario(seed);
        faulty(&mut s, 0.05);
        for i in 0..120u32 {
            s.run_for(250).unwrap();
            if i % 8 == 0 {
                s.apply(Command::TaskPush {
                    actor: "T1".into(),
                    op: TaskOp::Append { rows: 2 },
                })
                .unwrap();
            }
            if i % 20 == 10 {
                s.apply(Command::TaskPush {
                    actor: "T1".into(),
                    op: TaskOp::DeleteOldest,
                })
                .unwrap();
            }
            if i == 45 {
                // A second oracle instance on the timeline fences the first.
                add(&mut s, ActorSpec::Oracle(OracleSpec::default()));
            }
            if i == 20 || i == 70 {
                let hold = i == 20;
                s.apply(Command::SetReaderHold {
                    actor: "R1".into(),
                    hold,
                })
                .unwrap();
            }
            for (at, actor) in [(30, "W1"), (60, "O1"), (90, "U1")] {
                if i == at {
                    let p = process_of(&mut s, actor);
                    s.apply(Command::CrashProcess { process: p.clone() })
                        .unwrap();
                    s.run_for(1_000).unwrap();
                    s.apply(Command::RestartProcess { process: p }).unwrap();
                }
            }
            s.pump();
        }
        assert!(s.steps() > 10_000, "thousands of steps: {}", s.steps());
        let r = s.snapshot().check;
        eprintln!("seed {seed}, {} steps: {}", s.steps(), counts(&r));
        assert_eq!(r.violations_total, 0, "seed {seed}: {:?}", r.violations);
        for rule in &r.rules {
            let least = match rule.rule.as_str() {
                "task-desired" => 5,
                "oracle-duplicate" | "oracle-bound" => 50,
                _ => 100,
            };
            assert!(
                rule.checks >= least,
                "seed {seed}: {} checked {} times ({})",
                rule.rule,
                rule.checks,
                counts(&r)
            );
        }
        // The log dropped nothing here, but the check does not depend on it: it read every event.
        assert_eq!(r.events, s.snapshot().last_seq);
    }
}

#[test]
fn a_version_written_behind_persist_s_back_with_a_gap_is_found_at_once() {
    // Goal: the whole path (store -> observer -> facts -> pump -> check) can fail. Method: in a
    // default run, write a well-formed state version straight into Consensus whose only batch
    // starts 500 ms past the shard's upper (a gap), then run on: the check must name
    // append-chain and cite the observer's event of that version.
    use persist_playground::location::{CaSResult, SeqNo, VersionedData};
    use persist_playground::persist::encoding::{decode_diff, encode_diff, StateDiff};
    use persist_playground::persist::state::{Description, HollowBatch};
    use std::rc::Rc;
    use timely::progress::Antichain;
    let mut s = default_scenario(3);
    s.run_for(3_000).unwrap();
    assert_eq!(s.snapshot().check.violations_total, 0);
    let store = s.store();
    let mut written = None;
    for _ in 0..1_000 {
        let snap = s.snapshot();
        let view = snap.shards.iter().find(|v| v.name == "data").unwrap();
        let head = now(store.consensus.head("data")).unwrap().unwrap();
        if head.seqno.0 != view.seqno {
            s.run_for(3).unwrap();
            continue;
        }
        let upper = view.upper.unwrap();
        let prev = decode_diff(&head.data).unwrap();
        let f = Antichain::from_elem;
        let gap = Rc::new(HollowBatch::empty(Description::new(
            f(upper + 500),
            f(upper + 1_000),
        )));
        let diff = StateDiff {
            seqno_from: head.seqno,
            seqno_to: head.seqno.next(),
            upper: Some(f(upper + 1_000)),
            since: None,
            batches: vec![(upper + 500, Some(gap))],
            schemas: vec![],
            last_gc_req: None,
            rollups: vec![],
            leased_readers: vec![],
            critical_readers: vec![],
            writers: vec![],
            ..prev
        };
        let new = VersionedData {
            seqno: head.seqno.next(),
            data: encode_diff(&diff).into(),
        };
        let cas = now(store
            .consensus
            .compare_and_set("data", Some(head.seqno), new))
        .unwrap();
        assert_eq!(cas, CaSResult::Committed);
        written = Some(head.seqno.next());
        break;
    }
    let seqno: SeqNo = written.expect("caught the head in view");
    s.run_for(500).unwrap();
    let r = s.snapshot().check;
    let v = r
        .violations
        .iter()
        .find(|v| v.rule == "append-chain")
        .unwrap_or_else(|| panic!("found: {:?}", r.violations));
    assert!(v.message.contains("data: no batch covers"), "{}", v.message);
    let cited = s.events_after(v.seqs[0] - 1, 10_000);
    let version = cited.iter().find(|e| {
        v.seqs.contains(&e.seq)
            && matches!(&e.fact, Some(Fact::ShardVersions { shard, versions })
                if shard == "data" && versions.iter().any(|x| x.seqno == seqno.0))
    });
    assert!(
        version.is_some(),
        "the cited events include the version's: {v:?} {:?}",
        cited
            .iter()
            .filter(|e| v.seqs.contains(&e.seq))
            .collect::<Vec<_>>()
    );
}

#[test]
fn with_no_reader_gc_truncates_behind_the_observer_and_the_check_stays_right() {
    // Goal: with no reader holding a seqno, GC truncates Consensus right behind the head, so the
    // store observer often finds the versions it needs gone and starts again from a baseline; the
    // check must neither count a value twice nor lose one across those restarts. Method: two
    // fast writers and nothing else, faults on, for 20 s. (50 appends/s each: GC truncates up to
    // the newest rollup, which must outrun the observer's 50 ms passes; since a collection
    // spends at most one seqno and merges ride on appends, 25/s no longer did.)
    let mut s = Scenario::seeded(5);
    for _ in 0..2 {
        add(
            &mut s,
            ActorSpec::Writer(WriterSpec {
                rate_per_s: 50,
                ..WriterSpec::default()
            }),
        );
    }
    faulty(&mut s, 0.05);
    let mut baselines = 0;
    let mut cursor = 0;
    for _ in 0..80 {
        s.run_for(250).unwrap();
        for e in s.events_after(cursor, usize::MAX) {
            cursor = e.seq;
            baselines += usize::from(matches!(e.fact, Some(Fact::ShardBaseline { .. })));
        }
    }
    let r = s.snapshot().check;
    assert!(
        baselines > 1,
        "the observer started again after truncation ({baselines} baselines)"
    );
    assert_eq!(r.violations_total, 0, "{:?}", r.violations);
    let acks = r.rules.iter().find(|x| x.rule == "ack-lost").unwrap();
    assert!(acks.checks > 200, "{}", counts(&r));
}
