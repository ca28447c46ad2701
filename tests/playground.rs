//! The playground engine, natively: determinism and replay, writers racing under faults and
//! crashes with no acknowledged write lost, readers holding the since, write tasks, oracle
//! instances fencing each other and resuming after restarts, the Shard panel's rows, corruption
//! shown as a message, and bad commands refused without changing anything.
//!
//! Every scenario runs in seed mode (the simulator), so each test is one deterministic run.

#![cfg(not(target_arch = "wasm32"))]

use persist_playground::playground::actor::{ActorDetail, ActorState};
use persist_playground::playground::command::{
    ActorSpec, Command, FaultKnobs, OracleSpec, ReaderSpec, Service, TaskOp, TaskSpec, WriteMode,
    WriterSpec,
};
use persist_playground::playground::log::Outcome;
use persist_playground::playground::{Scenario, Snapshot};

fn writer(rate: u32, mode: WriteMode) -> Command {
    Command::AddActor {
        spec: ActorSpec::Writer(WriterSpec {
            rate_per_s: rate,
            key_lo: 0,
            key_hi: 1_000,
            mode,
            ..WriterSpec::default()
        }),
        process: None,
    }
}

fn add(s: &mut Scenario, c: Command) -> String {
    s.apply(c)
        .expect("command applies")
        .actor
        .expect("an actor")
}

fn verify(s: &mut Scenario) -> persist_playground::playground::snapshot::VerifyView {
    s.apply(Command::Verify).unwrap();
    s.run_for(2_000).unwrap();
    s.snapshot().verify.expect("the check finished")
}

fn shard<'a>(
    snap: &'a Snapshot,
    name: &str,
) -> &'a persist_playground::playground::observe::ShardView {
    snap.shards
        .iter()
        .find(|s| s.name == name)
        .expect("shard observed")
}

fn writer_view(snap: &Snapshot, id: &str) -> persist_playground::playground::actor::WriterView {
    let a = snap.actors.iter().find(|a| a.id == id).unwrap();
    match &a.detail {
        ActorDetail::Writer(w) => w.clone(),
        other => panic!("{id} is not a writer: {other:?}"),
    }
}

/// A fixed script of commands with runs in between; returns the digest after each run.
fn scripted(seed: u64) -> (Vec<String>, Scenario) {
    let mut s = Scenario::seeded(seed);
    let mut digests = Vec::new();
    add(&mut s, writer(20, WriteMode::CompareAndAppend));
    add(&mut s, writer(20, WriteMode::CompareAndAppend));
    s.run_for(700).unwrap();
    digests.push(s.snapshot().digest());
    add(
        &mut s,
        Command::AddActor {
            spec: ActorSpec::Reader(ReaderSpec::default()),
            process: None,
        },
    );
    s.apply(Command::SetFaults {
        service: Service::Consensus,
        knobs: FaultKnobs {
            fail_rate: 0.1,
            timeout_rate: 0.1,
            ..FaultKnobs::default()
        },
    })
    .unwrap();
    s.step(37).unwrap();
    digests.push(s.snapshot().digest());
    s.apply(Command::CrashProcess {
        process: "P1".into(),
    })
    .unwrap();
    s.run_for(500).unwrap();
    s.apply(Command::RestartProcess {
        process: "P1".into(),
    })
    .unwrap();
    s.run_for(1_500).unwrap();
    digests.push(s.snapshot().digest());
    (digests, s)
}

#[test]
fn same_seed_and_commands_give_the_same_snapshots_and_replay_reproduces_them() {
    let (a, run) = scripted(7);
    let (b, _) = scripted(7);
    assert_eq!(a, b, "two runs of one seed and script");
    let (c, _) = scripted(8);
    assert_ne!(a.last(), c.last(), "another seed gives another run");

    // Replay from the stamped commands reaches the state right after the last command.
    let stamped = run.stamped().to_vec();
    assert_eq!(stamped.len(), 6);
    let mut replayed = Scenario::replay(7, &stamped).unwrap();
    replayed.run_for(1_500).unwrap();
    let mut original = run;
    assert_eq!(replayed.snapshot().digest(), original.snapshot().digest());
}

#[test]
fn racing_writers_commit_lose_races_and_lose_no_acknowledged_write() {
    let mut s = Scenario::seeded(11);
    let ids: Vec<String> = (0..3)
        .map(|_| add(&mut s, writer(50, WriteMode::CompareAndAppend)))
        .collect();
    s.run_for(3_000).unwrap();
    let snap = s.snapshot();
    let mut mismatches = 0;
    for id in &ids {
        let w = writer_view(&snap, id);
        assert!(w.committed > 5, "{id} committed: {w:?}");
        mismatches += w.mismatches;
    }
    assert!(mismatches > 0, "three writers on one shard lose races");
    let data = shard(&snap, "data");
    assert!(
        data.upper.unwrap() > 2_000,
        "the upper follows the clock: {:?}",
        data.upper
    );
    assert_eq!(data.writers.len(), 3, "three writers registered");
    assert!(
        data.writers.iter().all(|w| w.actor.is_some()),
        "each mapped to its actor"
    );
    // Every committed attempt shows up in the consensus panel and the log.
    assert!(snap
        .consensus
        .iter()
        .any(|c| c.outcome == Outcome::Committed));
    assert!(snap
        .consensus
        .iter()
        .any(|c| c.outcome == Outcome::Mismatch));
    let v = verify(&mut s);
    assert_eq!(v.error, None);
    assert!(v.acked > 100, "{v:?}");
    assert_eq!(v.lost, 0, "no acknowledged write lost: {v:?}");
    assert_eq!(v.foreign_rows, 0, "one page, no foreign writers");
}

#[test]
fn faults_and_crashes_leave_acknowledged_writes_in_place() {
    let mut s = Scenario::seeded(23);
    let w1 = add(&mut s, writer(40, WriteMode::CompareAndAppend));
    let w2 = add(&mut s, writer(40, WriteMode::CompareAndAppend));
    for service in [Service::Consensus, Service::Blob] {
        s.apply(Command::SetFaults {
            service,
            knobs: FaultKnobs {
                fail_rate: 0.15,
                timeout_rate: 0.15,
                latency_ms: 3,
                outage: false,
            },
        })
        .unwrap();
    }
    let cursor = s.snapshot().last_seq;
    let mut crashes = 0;
    for round in 0..6 {
        s.run_for(700).unwrap();
        let snap = s.snapshot();
        let p = &snap
            .processes
            .iter()
            .filter(|p| p.alive)
            .nth(round % 2)
            .unwrap()
            .id
            .clone();
        s.apply(Command::CrashProcess { process: p.clone() })
            .unwrap();
        crashes += 1;
        s.run_for(100).unwrap();
        let restarted = s
            .apply(Command::RestartProcess { process: p.clone() })
            .unwrap();
        assert_ne!(
            restarted.process.as_deref(),
            Some(p.as_str()),
            "a restart is a new process"
        );
    }
    s.run_for(1_000).unwrap();
    let snap = s.snapshot();
    let (a, b) = (writer_view(&snap, &w1), writer_view(&snap, &w2));
    // Timeouts made some compare_and_sets indeterminate; persist resolved them (its idempotency
    // token) inside the writers' calls.
    let events = s.events_after(cursor, usize::MAX);
    assert!(events
        .iter()
        .any(|e| e.component == "persist" && e.outcome == Outcome::Indeterminate));
    assert!(events
        .iter()
        .any(|e| e.component == "consensus" && e.outcome == Outcome::Indeterminate));
    assert!(a.committed > 0 && b.committed > 0);
    assert!(snap.faults.consensus.happened_then_timed_out > 0);
    assert_eq!(snap.processes.len(), 2 + crashes);
    // A restarted actor holds a new writer id in its new process.
    let a1 = snap.actors.iter().find(|x| x.id == w1).unwrap();
    assert_eq!(a1.state, ActorState::Running);
    assert!(snap
        .processes
        .iter()
        .any(|p| p.id == a1.process && p.restart_of.is_some()));
    // Faults off, then the check (it reads the raw location and would see them anyway).
    let v = verify(&mut s);
    assert_eq!(v.error, None);
    assert!(v.acked > 20, "{v:?}");
    assert_eq!(v.lost, 0, "{v:?}");
}

#[test]
fn a_held_reader_pins_the_since_and_releasing_it_lets_the_since_move() {
    let mut s = Scenario::seeded(5);
    add(&mut s, writer(20, WriteMode::CompareAndAppend));
    let r = add(
        &mut s,
        Command::AddActor {
            spec: ActorSpec::Reader(ReaderSpec {
                hold: false,
                ..ReaderSpec::default()
            }),
            process: None,
        },
    );
    s.run_for(1_000).unwrap();
    s.apply(Command::SetReaderHold {
        actor: r.clone(),
        hold: true,
    })
    .unwrap();
    s.run_for(300).unwrap();
    let held = shard(&s.snapshot(), "data").since;
    s.run_for(2_000).unwrap();
    let snap = s.snapshot();
    assert_eq!(
        shard(&snap, "data").since,
        held,
        "a held reader pins the since"
    );
    assert!(shard(&snap, "data").upper > held);
    s.apply(Command::SetReaderHold {
        actor: r,
        hold: false,
    })
    .unwrap();
    s.run_for(1_000).unwrap();
    let since = shard(&s.snapshot(), "data").since;
    assert!(
        since > held,
        "released: the since moves on ({since:?} > {held:?})"
    );
}

#[test]
fn write_tasks_commit_desired_state_and_read_only_refuses() {
    let mut s = Scenario::seeded(3);
    let t = add(
        &mut s,
        Command::AddActor {
            spec: ActorSpec::Task(TaskSpec {
                tick_interval_ms: 100,
                ..TaskSpec::default()
            }),
            process: None,
        },
    );
    s.run_for(300).unwrap();
    s.apply(Command::TaskPush {
        actor: t.clone(),
        op: TaskOp::Append { rows: 5 },
    })
    .unwrap();
    s.run_for(1_000).unwrap();
    let snap = s.snapshot();
    let task = snap.actors.iter().find(|a| a.id == t).unwrap();
    let ActorDetail::Task(view) = &task.detail else {
        panic!("{task:?}")
    };
    assert_eq!(view.desired_rows, 5, "{view:?}");
    assert!(
        view.writer.committed > 2,
        "commands and ticks commit: {view:?}"
    );
    let upper = shard(&snap, "mz_task").upper.unwrap();
    assert!(upper > 1_000, "ticks keep the upper near now: {upper}");

    s.apply(Command::SetTask {
        actor: t.clone(),
        tick_interval_ms: 100,
        read_only: true,
    })
    .unwrap();
    s.run_for(200).unwrap();
    let cursor = s.snapshot().last_seq;
    s.apply(Command::TaskPush {
        actor: t.clone(),
        op: TaskOp::Append { rows: 1 },
    })
    .unwrap();
    s.run_for(500).unwrap();
    let events = s.events_after(cursor, 1_000);
    assert!(
        events.iter().any(|e| e.actor.as_deref() == Some(&t)
            && e.outcome == Outcome::Error
            && e.detail.contains("read-only")),
        "read-only refuses: {events:#?}"
    );
    let frozen = shard(&s.snapshot(), "mz_task").upper;
    s.run_for(1_000).unwrap();
    assert_eq!(
        shard(&s.snapshot(), "mz_task").upper,
        frozen,
        "read-only: the upper no longer ticks"
    );
}

#[test]
fn a_second_oracle_fences_the_first_and_a_restart_resumes_above_everything() {
    let mut s = Scenario::seeded(9);
    let spec = || {
        ActorSpec::Oracle(OracleSpec {
            persist_interval_ms: 500,
            rate_per_s: 20,
            ..OracleSpec::default()
        })
    };
    let o1 = add(
        &mut s,
        Command::AddActor {
            spec: spec(),
            process: None,
        },
    );
    s.run_for(2_000).unwrap();
    let snap = s.snapshot();
    let ActorDetail::Oracle(first) = &snap.actors[0].detail else {
        panic!()
    };
    assert!(
        first.windows.len() >= 3,
        "windows allocated as time goes: {first:?}"
    );
    let timeline = &snap.timelines[0];
    assert!(
        timeline.durable_upper.unwrap() > first.write_ts,
        "nothing handed out at or beyond the durable upper"
    );
    let o2 = add(
        &mut s,
        Command::AddActor {
            spec: spec(),
            process: None,
        },
    );
    s.run_for(1_000).unwrap();
    let snap = s.snapshot();
    let a1 = snap.actors.iter().find(|a| a.id == o1).unwrap();
    assert_eq!(a1.state, ActorState::Failed, "fenced: {a1:?}");
    assert!(a1.error.as_deref().unwrap().contains("fenced"));
    let ActorDetail::Oracle(second) = &snap.actors.iter().find(|a| a.id == o2).unwrap().detail
    else {
        panic!()
    };
    let before = second.write_ts;
    let p = snap
        .actors
        .iter()
        .find(|a| a.id == o2)
        .unwrap()
        .process
        .clone();
    s.apply(Command::CrashProcess { process: p.clone() })
        .unwrap();
    s.apply(Command::RestartProcess { process: p }).unwrap();
    s.run_for(500).unwrap();
    let snap = s.snapshot();
    let ActorDetail::Oracle(third) = &snap.actors.iter().find(|a| a.id == o2).unwrap().detail
    else {
        panic!()
    };
    assert!(
        third.first_ts.unwrap() > before,
        "resumes above every timestamp: {third:?} vs {before}"
    );
    assert!(third.epoch > second.epoch);
}

#[test]
fn a_corrupted_record_is_a_message_and_bad_commands_change_nothing() {
    let mut s = Scenario::seeded(4);
    add(&mut s, writer(10, WriteMode::CompareAndAppend));
    let o = add(
        &mut s,
        Command::AddActor {
            spec: ActorSpec::Oracle(OracleSpec::default()),
            process: None,
        },
    );
    s.run_for(1_000).unwrap();

    // Bad values are refused with a message, and the run is exactly as before.
    let before = s.snapshot().digest();
    let bad = [
        writer(0, WriteMode::CompareAndAppend),
        Command::SetFaults {
            service: Service::Blob,
            knobs: FaultKnobs {
                fail_rate: 1.5,
                ..FaultKnobs::default()
            },
        },
        Command::CrashProcess {
            process: "P9".into(),
        },
        Command::RemoveActor { actor: "W7".into() },
        Command::SetTask {
            actor: o.clone(),
            tick_interval_ms: 100,
            read_only: false,
        },
        Command::RestartProcess {
            process: "P1".into(),
        },
    ];
    for c in bad {
        let err = s.apply(c.clone()).expect_err(&format!("{c:?} is refused"));
        assert!(!err.0.is_empty());
    }
    assert_eq!(
        s.snapshot().digest(),
        before,
        "refused commands change nothing"
    );
    assert_eq!(s.stamped().len(), 2);

    s.apply(Command::CorruptRecord { key: "data".into() })
        .unwrap();
    s.run_for(1_000).unwrap();
    let snap = s.snapshot();
    let err = shard(&snap, "data")
        .error
        .clone()
        .expect("the shard shows the corruption");
    assert!(err.contains("does not decode"), "{err}");
    assert!(snap
        .notices
        .iter()
        .any(|n| n.error && n.text.contains("garbage")));
    // The rest of the scenario runs on: the oracle keeps handing out timestamps.
    let ActorDetail::Oracle(before) = &snap.actors[1].detail else {
        panic!()
    };
    s.run_for(1_000).unwrap();
    let snap = s.snapshot();
    let ActorDetail::Oracle(after) = &snap.actors[1].detail else {
        panic!()
    };
    assert!(after.handed_out > before.handed_out);
}

#[test]
fn the_merged_log_is_sequenced_and_read_after_a_cursor() {
    let mut s = Scenario::seeded(2);
    add(&mut s, writer(30, WriteMode::CompareAndAppend));
    add(&mut s, writer(30, WriteMode::Append));
    s.run_for(1_000).unwrap();
    let all = s.events_after(0, usize::MAX);
    assert!(all.len() > 20);
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1, "consecutive sequence numbers");
    }
    let tail = s.events_after(10, 5);
    assert_eq!(
        tail.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![11, 12, 13, 14, 15]
    );
    let components: std::collections::BTreeSet<&str> =
        all.iter().map(|e| e.component.as_str()).collect();
    for c in ["writer", "persist", "consensus", "scenario"] {
        assert!(components.contains(c), "{c} in {components:?}");
    }
    // Live-mode-only errors: stepping a live scenario is refused (checked natively by message).
    let v = verify(&mut s);
    assert_eq!(v.unchecked_append_writers, vec!["W2".to_string()]);
    assert_eq!(v.lost, 0);
}

#[test]
fn upsert_replicas_race_through_crashes_and_match_the_reference_model() {
    use persist_playground::playground::command::{ReplicaSpec, UPSERT_SHARD};
    let mut s = Scenario::seeded(12);
    let replica = || Command::AddActor {
        spec: ActorSpec::Replica(ReplicaSpec::default()),
        process: None,
    };
    let u1 = add(&mut s, replica());
    let u2 = add(&mut s, replica());
    s.apply(Command::SetGenerator { on: true }).unwrap();
    s.apply(Command::PushUpsert {
        key: 3,
        value: Some("by hand".into()),
    })
    .unwrap();
    s.run_for(3_000).unwrap();
    let snap = s.snapshot();
    let up = snap.upsert.clone().expect("the pipeline shows");
    // A snapshot with replicas encodes, as serde_json writes it, with the pipeline's numbers.
    let json = persist_playground::playground::json::to_json(&snap).expect("snapshots encode");
    let page: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        page["upsert"]["shard"], UPSERT_SHARD,
        "the page names the shard from here"
    );
    assert!(snap.shards.iter().any(|sh| sh.name == UPSERT_SHARD));
    assert_eq!(page["upsert"]["sourceMessages"], up.source_messages);
    assert_eq!(page["upsert"]["sourceUpper"], up.source_upper);
    let recent = page["upsert"]["recent"].as_array().map(Vec::len);
    assert_eq!(recent, Some(up.recent.len()));
    let replicas = page["actors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["detail"]["kind"] == "replica")
        .count();
    assert_eq!(replicas, 2, "both replicas show their own snapshot");
    assert!(up.source_messages > 10, "{up:?}");
    // The panel's recent messages are the newest of the log (consecutive offsets), in time
    // order, below its upper.
    assert_eq!(up.recent.len() as u64, up.source_messages.min(10), "{up:?}");
    assert!(up
        .recent
        .windows(2)
        .all(|w| w[1].offset == w[0].offset + 1 && w[0].ts <= w[1].ts));
    assert!(up.recent.iter().all(|m| m.ts < up.source_upper), "{up:?}");
    assert!(
        up.checker.checks > 0,
        "the checker compared the shard: {up:?}"
    );
    assert!(
        up.checker.violations.is_empty(),
        "{:?}",
        up.checker.violations
    );
    for id in [&u1, &u2] {
        let a = snap.actors.iter().find(|a| &a.id == id).unwrap();
        let ActorDetail::Replica(r) = &a.detail else {
            panic!("{a:?}")
        };
        assert!(
            r.counters.emitted > 0 || r.counters.fed_back > 0,
            "{id} worked: {:?}",
            r.counters
        );
    }
    assert!(shard(&snap, "upsert_out").upper.unwrap() > 1);
    // Crash one replica's process mid-run and restart it: it resumes from the shard's upper.
    let p = snap
        .actors
        .iter()
        .find(|a| a.id == u1)
        .unwrap()
        .process
        .clone();
    s.apply(Command::CrashProcess { process: p.clone() })
        .unwrap();
    s.run_for(1_000).unwrap();
    s.apply(Command::RestartProcess { process: p }).unwrap();
    s.run_for(2_000).unwrap();
    let snap = s.snapshot();
    let up = snap.upsert.clone().unwrap();
    assert!(
        up.checker.violations.is_empty(),
        "{:?}",
        up.checker.violations
    );
    let ActorDetail::Replica(r) = &snap.actors.iter().find(|a| a.id == u1).unwrap().detail else {
        panic!()
    };
    assert_eq!(r.generation, 1, "a new generation after the restart");
    // By hand: with the generator off and the run paused, one manual step moves a replica.
    s.apply(Command::SetGenerator { on: false }).unwrap();
    s.apply(Command::PushUpsert {
        key: 7,
        value: None,
    })
    .unwrap();
    let stepped = s.apply(Command::StepReplicas).unwrap();
    assert!(stepped.message.contains("read"), "{}", stepped.message);
    assert!(s
        .apply(Command::PushUpsert {
            key: 5000,
            value: None
        })
        .is_err());
}

#[test]
fn a_snapshot_digest_is_the_hash_of_its_encoding() {
    let mut s = Scenario::seeded(1);
    s.apply(writer(10, WriteMode::CompareAndAppend)).unwrap();
    s.run_for(500).unwrap();
    let snap = s.snapshot();
    // The digest is FNV-1a (64 bits) over the snapshot's JSON: computed here from the encoding,
    // it must be the digest (a digest that fell back to an empty encoding would not be).
    let json = persist_playground::playground::json::to_json(&snap).expect("snapshots encode");
    assert!(json.len() > 100, "{json}");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in json.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    assert_eq!(snap.digest(), format!("{h:016x}"));
    s.run_for(500).unwrap();
    assert_ne!(s.snapshot().digest(), snap.digest());
}

#[test]
fn the_upsert_source_round_trips_through_its_rows() {
    use persist_playground::persist::codec::{Datum, Row};
    use persist_playground::playground::upsert_source::{decode, encode};
    use persist_playground::upsert::types::{kv_row, UpsertError};
    let cases = [
        (3, None),
        (4, Some(Ok(kv_row(4, "v1")))),
        (
            5,
            Some(Err(UpsertError::Value {
                for_key: Row::new([Datum::Int(5)]),
                message: "bad".into(),
            })),
        ),
    ];
    for (key, value) in cases {
        let row = encode(key, &value, 77);
        assert_eq!(decode(&row), Some((77, key, value)));
    }
    assert_eq!(
        decode(&Row::new([Datum::String("no".into())])),
        None,
        "a foreign row is refused"
    );
}

/// Pages in live mode, natively: `Scenario::live` on the simulator's runtime over one shared
/// in-memory location, stepped through the simulator the test holds.
#[test]
fn the_upsert_source_survives_a_reload_and_two_pages_share_it() {
    use persist_playground::location::mem::{MemBlob, MemConsensus};
    use persist_playground::location::Location;
    use persist_playground::playground::command::ReplicaSpec;
    use persist_playground::runtime::sim::Simulator;
    use std::rc::Rc;
    let sim = Simulator::new(31);
    let location = Location {
        blob: Rc::new(MemBlob::new()),
        consensus: Rc::new(MemConsensus::new()),
    };
    let replica = || Command::AddActor {
        spec: ActorSpec::Replica(ReplicaSpec::default()),
        process: None,
    };
    let page = |seed| {
        let mut p = Scenario::live(sim.runtime(), location.clone(), seed);
        p.apply(replica()).unwrap();
        p.apply(Command::SetGenerator { on: true }).unwrap();
        p
    };
    let mut first = page(1);
    sim.run_for(3_000).unwrap();
    let before = first.snapshot().upsert.unwrap();
    assert!(before.source_messages > 10, "{before:?}");
    assert!(
        before.checker.violations.is_empty(),
        "{:?}",
        before.checker.violations
    );
    drop(first); // the reload

    let mut second = page(2);
    let mut third = page(3); // another tab on the same database
    sim.run_for(3_000).unwrap();
    let (b, c) = (
        second.snapshot().upsert.unwrap(),
        third.snapshot().upsert.unwrap(),
    );
    assert!(
        b.source_messages > before.source_messages,
        "the source came back and grew: {b:?}"
    );
    assert!(b.checker.checks > 0 && c.checker.checks > 0);
    assert!(
        b.checker.violations.is_empty(),
        "{:?}",
        b.checker.violations
    );
    assert!(
        c.checker.violations.is_empty(),
        "{:?}",
        c.checker.violations
    );
    // Both tabs fold the same rows in the same order: the same messages at the same offsets.
    let (n, m) = (
        b.source_messages.min(c.source_messages),
        b.recent.len().min(c.recent.len()),
    );
    assert!(n > 0 && m > 0);
    if b.source_messages == c.source_messages {
        assert_eq!(b.recent, c.recent, "two tabs, one source");
    }
}

#[test]
fn step_replicas_walks_a_pushed_upsert_one_stage_at_a_time() {
    // Goal: with the generator off, **Step replicas** moves a hand-pushed upsert one stage per
    // command, and each command names the stage it ran: source, stash, the partial emission (a
    // provisional value in state), the sink's write, the shard, the feedback read, then state.
    // Method: two replicas run for a while, the generator stays off, one upsert is pushed, and
    // nothing runs the scenario but the seven commands (each runs it only as long as its stage
    // needs). The replica's state shows the provisional value after the third and only then;
    // after the seventh it is a value, the replicas are back with their drivers, and the shard
    // still equals the reference model.
    use persist_playground::playground::command::ReplicaSpec;
    let mut s = Scenario::seeded(3);
    for read_batch in [4, 2] {
        s.apply(Command::AddActor {
            spec: ActorSpec::Replica(ReplicaSpec { read_batch }),
            process: None,
        })
        .unwrap();
    }
    s.run_for(800).unwrap();
    s.apply(Command::PushUpsert {
        key: 3,
        value: Some("hello".into()),
    })
    .unwrap();
    let provisional = |s: &mut Scenario| match &s.snapshot().actors[0].detail {
        ActorDetail::Replica(r) => r.operator.as_ref().map_or(0, |o| {
            o.state.iter().filter(|c| c.mode == "provisional").count()
        }),
        other => panic!("U1 is a replica: {other:?}"),
    };
    let stages = [
        "source",
        "stash",
        "partial emission",
        "sink",
        "shard",
        "feedback read",
        "state",
    ];
    let mut said = Vec::new();
    for (i, stage) in stages.iter().enumerate() {
        let before = s.now_ms();
        let m = s.apply(Command::StepReplicas).unwrap().message;
        assert!(
            m.starts_with(&format!("stage {}/7, {stage}: ", i + 1)),
            "press {} ran {m}",
            i + 1
        );
        said.push(m.clone());
        let walk = s.snapshot().upsert.unwrap().walk;
        match stages.get(i + 1) {
            Some(next) => assert_eq!(walk.map(|w| w.next_name), Some(*next), "{m}"),
            None => assert_eq!(walk, None, "the walk ends with state"),
        }
        let p = provisional(&mut s);
        match *stage {
            "partial emission" | "sink" | "shard" | "feedback read" => {
                assert_eq!(p, 1, "◌ in state at {stage}: {m}")
            }
            _ => assert_eq!(p, 0, "no provisional value at {stage}: {m}"),
        }
        if *stage == "stash" || *stage == "state" {
            assert_eq!(s.now_ms(), before, "{stage} needs no run time");
        }
    }
    assert!(said[0].contains("key 3 = "), "{}", said[0]);
    assert!(said[2].contains("provisional value ◌"), "{}", said[2]);
    assert!(said[4].contains("committed"), "{}", said[4]);
    // The panel keeps a line for the finished walk: the key, confirmed, with its value.
    let done = s.snapshot().upsert.unwrap().walk_done.expect("a done line");
    assert_eq!((done.replica.as_str(), done.key), ("U1", Some(3)));
    assert!(
        done.value.as_deref().is_some_and(|v| v.contains("hello")),
        "{done:?}"
    );
    // A press with nothing left to walk says what it did instead, and keeps the line.
    let next = s.apply(Command::StepReplicas).unwrap().message;
    assert!(
        next.starts_with(
            "nothing new to walk: your push, key 3 = (3, \"hello\"), went through all seven stages"
        ) && next.contains("stepped U1: fed back"),
        "{next}"
    );
    assert!(s.snapshot().upsert.unwrap().walk_done.is_some());
    // Back with their drivers: the pipeline goes on by itself and matches the model.
    s.run_for(1_000).unwrap();
    assert_eq!(
        s.snapshot().upsert.unwrap().walk_done,
        None,
        "the run moved on"
    );
    let up = s.snapshot().upsert.unwrap();
    assert!(
        up.checker.checks > 0 && up.checker.violations.is_empty(),
        "{up:?}"
    );
    let more = s.apply(Command::StepReplicas).unwrap().message;
    assert!(
        more.starts_with("nothing to walk: push an upsert") && more.contains("stepped U1"),
        "nothing left to walk: {more}"
    );
}

/// Every number as an f64: our JSON writes a whole float without `.0`, as JavaScript reads it.
fn numbers_as_f64(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        J::Number(n) => serde_json::json!(n.as_f64().unwrap()),
        J::Array(items) => J::Array(items.into_iter().map(numbers_as_f64).collect()),
        J::Object(map) => J::Object(
            map.into_iter()
                .map(|(k, v)| (k, numbers_as_f64(v)))
                .collect(),
        ),
        other => other,
    }
}

#[test]
fn the_page_reads_the_same_json_serde_json_writes_for_snapshots_and_events() {
    use persist_playground::playground::command::ReplicaSpec;
    use persist_playground::playground::json::to_json;
    let mut s = Scenario::seeded(5);
    s.apply(writer(10, WriteMode::CompareAndAppend)).unwrap();
    for spec in [
        ActorSpec::Task(TaskSpec::default()),
        ActorSpec::Oracle(OracleSpec::default()),
        ActorSpec::Replica(ReplicaSpec::default()),
    ] {
        add(
            &mut s,
            Command::AddActor {
                spec,
                process: None,
            },
        );
    }
    s.apply(Command::SetGenerator { on: true }).unwrap();
    s.run_for(2_000).unwrap();
    s.apply(Command::Verify).unwrap();
    s.run_for(1_000).unwrap();
    let snap = s.snapshot();
    assert!(snap.upsert.is_some() && snap.verify.is_some());
    let ours: serde_json::Value = serde_json::from_str(&to_json(&snap).unwrap()).unwrap();
    assert_eq!(
        numbers_as_f64(ours),
        numbers_as_f64(serde_json::to_value(&snap).unwrap())
    );
    let events = s.events_after(0, 10_000);
    assert!(events.iter().any(|e| e.fact.is_some()));
    let ours: serde_json::Value = serde_json::from_str(&to_json(&events).unwrap()).unwrap();
    assert_eq!(
        numbers_as_f64(ours),
        numbers_as_f64(serde_json::to_value(&events).unwrap())
    );
    let stamped = s.stamped().to_vec();
    let back: Vec<persist_playground::playground::Stamped> =
        serde_json::from_str(&to_json(&stamped).unwrap()).unwrap();
    assert_eq!(back, stamped);
}

#[test]
fn a_big_shard_lists_its_rows_at_most_every_second_and_catches_up_when_writes_stop() {
    let mut s = Scenario::seeded(23);
    let ids: Vec<String> = (0..4)
        .map(|_| add(&mut s, writer(400, WriteMode::CompareAndAppend)))
        .collect();
    let (mut small_seen, mut trailing_seen) = (0, 0);
    for _ in 0..40 {
        s.run_for(100).unwrap();
        let snap = s.snapshot();
        let data = shard(&snap, "data");
        let Some(rows) = &data.rows else { continue };
        if data.updates < 1_500 {
            // A small shard's rows are listed at each change of its batches.
            assert_eq!(rows.upper, data.upper, "{} updates", data.updates);
            small_seen += 1;
        } else if data.updates > 2_500 && rows.upper < data.upper {
            trailing_seen += 1;
        }
    }
    assert!(small_seen > 0, "the shard was small for a while");
    assert!(
        trailing_seen > 0,
        "a big shard's rows trail its upper between listings"
    );
    for id in ids {
        s.apply(Command::RemoveActor { actor: id }).unwrap();
    }
    s.run_for(2_500).unwrap();
    let snap = s.snapshot();
    let data = shard(&snap, "data");
    assert!(data.updates > 2_000, "{} updates", data.updates);
    let rows = data.rows.as_ref().expect("rows listed");
    assert_eq!(
        rows.upper, data.upper,
        "with the writes stopped, the rows catch up with the shard's upper"
    );
}
