//! Time in the playground engine, natively: a [`Replay`] rebuilds a seed-mode run to any point
//! of it (between commands, right after one, in slices of any size) with the snapshot digest the
//! run had there; a fork replays to a point and goes on with other commands, and agrees with the
//! original up to the fork point and only there; malformed replays are refused with a message.

#![cfg(not(target_arch = "wasm32"))]

use persist_playground::playground::command::{
    ActorSpec, Command, FaultKnobs, ReaderSpec, Service, Stamp, Stamped, WriteMode, WriterSpec,
};
use persist_playground::playground::{Replay, Scenario};

fn writer(rate: u32) -> Command {
    Command::AddActor {
        spec: ActorSpec::Writer(WriterSpec {
            rate_per_s: rate,
            key_lo: 0,
            key_hi: 100,
            mode: WriteMode::CompareAndAppend,
            ..WriterSpec::default()
        }),
        process: None,
    }
}

/// A point of a run: where it was, how many commands it had applied, and its digest there.
#[derive(Debug, Clone)]
struct Point {
    at: Stamp,
    commands: usize,
    digest: String,
}

fn point(s: &mut Scenario) -> Point {
    let snap = s.snapshot();
    Point {
        at: Stamp {
            step: snap.steps,
            at_ms: snap.now_ms,
        },
        commands: s.stamped().len(),
        digest: snap.digest(),
    }
}

/// A run with writers racing, a reader, Consensus faults, a crash and a restart, recording a
/// point after every command and every stretch of running (by steps and by virtual time).
fn original(seed: u64) -> (Scenario, Vec<Point>) {
    let mut s = Scenario::seeded(seed);
    let mut points = vec![point(&mut s)];
    s.apply(writer(30)).unwrap();
    points.push(point(&mut s));
    s.apply(writer(30)).unwrap();
    s.run_for(400).unwrap();
    points.push(point(&mut s));
    s.apply(Command::AddActor {
        spec: ActorSpec::Reader(ReaderSpec::default()),
        process: None,
    })
    .unwrap();
    points.push(point(&mut s));
    s.step(53).unwrap();
    points.push(point(&mut s));
    s.apply(Command::SetFaults {
        service: Service::Consensus,
        knobs: FaultKnobs {
            fail_rate: 0.2,
            timeout_rate: 0.1,
            ..FaultKnobs::default()
        },
    })
    .unwrap();
    for _ in 0..3 {
        s.run_for(150).unwrap();
        points.push(point(&mut s));
    }
    s.apply(Command::CrashProcess {
        process: "P1".into(),
    })
    .unwrap();
    points.push(point(&mut s));
    s.step(200).unwrap();
    s.apply(Command::RestartProcess {
        process: "P1".into(),
    })
    .unwrap();
    s.run_for(600).unwrap();
    points.push(point(&mut s));
    (s, points)
}

fn rebuild(seed: u64, stamped: &[Stamped], p: &Point, slice: u64) -> Scenario {
    let mut r = Replay::new(seed, stamped[..p.commands].to_vec(), p.at).expect("a good replay");
    let mut slices = 0;
    while !r.advance(slice).expect("the replay runs") {
        slices += 1;
        // Snapshots on the way (the page draws its progress) change nothing.
        if slices % 7 == 0 {
            r.scenario().snapshot();
        }
    }
    r.finish().expect("finished at its target")
}

#[test]
fn a_replay_reaches_every_point_of_the_run_with_its_digest_in_slices_of_any_size() {
    let (run, points) = original(21);
    let stamped = run.stamped().to_vec();
    assert_eq!(stamped.len(), 6);
    let digests: std::collections::BTreeSet<_> = points.iter().map(|p| &p.digest).collect();
    assert!(
        digests.len() > points.len() - 2,
        "the run moves between points"
    );
    for (i, p) in points.iter().enumerate() {
        for slice in [1, 64, u64::MAX] {
            if slice == 1 && i % 3 != 0 {
                continue; // one step at a time is slow; a third of the points is plenty
            }
            let mut r = rebuild(21, &stamped, p, slice);
            let got = point(&mut r);
            assert_eq!(got.at, p.at, "point {i} reached exactly (slice {slice})");
            assert_eq!(
                got.digest, p.digest,
                "point {i}: same digest (slice {slice})"
            );
        }
    }
    // A point between recorded ones, by step alone: after `step(53)` the clock is wherever
    // those steps left it, and a replay to that step reaches the same snapshot.
    let p = &points[4];
    let mut r = Replay::to_step(21, stamped[..p.commands].to_vec(), p.at.step).unwrap();
    while !r.advance(100).unwrap() {}
    let mut r = r.finish().unwrap();
    assert_eq!(point(&mut r).at, p.at);
    assert_eq!(point(&mut r).digest, p.digest, "a replay to a step");
    // The one-shot helper stops right after the last command.
    let last = stamped.last().unwrap().stamp;
    let mut r = Scenario::replay(21, &stamped).unwrap();
    assert_eq!((r.steps(), r.now_ms()), (last.step, last.at_ms));
    assert_eq!(r.stamped(), &stamped[..]);
    assert_eq!(point(&mut r).commands, 6);
}

#[test]
fn a_fork_agrees_with_the_original_up_to_the_fork_point_and_diverges_after_it() {
    let (mut run, points) = original(5);
    let stamped = run.stamped().to_vec();
    // Fork at the point after the reader was added, before the faults.
    let at = &points[4];
    assert_eq!(at.commands, 3);
    let mut fork = rebuild(5, &stamped, at, 500);
    assert_eq!(
        point(&mut fork).digest,
        at.digest,
        "the fork starts where the original was"
    );
    // The original went on with faults; the fork goes on with a third writer instead.
    fork.apply(writer(10)).unwrap();
    let later: Vec<&Point> = points.iter().filter(|p| p.at.step > at.at.step).collect();
    let first_later = later[0];
    fork.advance_to(first_later.at).unwrap();
    assert_ne!(
        point(&mut fork).digest,
        first_later.digest,
        "the fork differs from the original after the fork point"
    );
    fork.run_for(2_000).unwrap();
    run.run_for(fork.now_ms() - run.now_ms()).unwrap();
    assert_ne!(point(&mut fork).digest, point(&mut run).digest);
    // The fork's own history: its commands up to the fork point are the original's, and
    // replaying the fork to any earlier point gives the original's digests there.
    let forked = fork.stamped().to_vec();
    assert_eq!(&forked[..3], &stamped[..3]);
    assert_ne!(forked[3], stamped[3], "the fork's next command is its own");
    for p in points.iter().filter(|p| p.at.step <= at.at.step) {
        let mut r = rebuild(5, &forked, p, u64::MAX);
        assert_eq!(
            point(&mut r).digest,
            p.digest,
            "before the fork point: same run"
        );
    }
}

fn stamped_at(step: u64, at_ms: u64, command: Command) -> Stamped {
    Stamped {
        stamp: Stamp { step, at_ms },
        command,
    }
}

fn refused(seed: u64, commands: Vec<Stamped>, target: Stamp) -> String {
    let run = |mut r: Replay| -> Result<Scenario, String> {
        r.advance(u64::MAX).map_err(|e| e.0)?;
        r.finish().map_err(|e| e.0)
    };
    match Replay::new(seed, commands, target) {
        Err(e) => e.0,
        Ok(r) => match run(r) {
            Err(e) => e,
            Ok(_) => panic!("the replay should have been refused"),
        },
    }
}

#[test]
fn malformed_replays_are_refused_with_a_message_naming_the_command() {
    let at = |step, at_ms| Stamp { step, at_ms };
    let good = stamped_at(0, 0, writer(5));
    // A bad field.
    let e = refused(
        1,
        vec![good.clone(), stamped_at(3, 0, writer(0))],
        at(10, 0),
    );
    assert!(e.contains("command 2") && e.contains("rate"), "{e}");
    // Stamps that go back.
    let e = refused(
        1,
        vec![stamped_at(9, 50, writer(5)), good.clone()],
        at(10, 50),
    );
    assert!(
        e.contains("command 2") && e.contains("never go back"),
        "{e}"
    );
    // A target before the last command.
    let e = refused(1, vec![stamped_at(9, 50, writer(5))], at(4, 50));
    assert!(e.contains("before its last command"), "{e}");
    // A command the scenario refuses (no such actor), at a point the run does reach.
    let mut s = Scenario::seeded(1);
    s.apply(writer(5)).unwrap();
    s.run_for(100).unwrap();
    let (step, now) = (s.steps(), s.now_ms());
    let remove = Command::RemoveActor { actor: "W9".into() };
    let e = refused(
        1,
        vec![good.clone(), stamped_at(step, now, remove)],
        at(step, now),
    );
    assert!(
        e.contains("command 2 was refused") && e.contains("W9"),
        "{e}"
    );
    // A stamp this engine could not have recorded: far in virtual time with too few steps.
    let e = refused(
        1,
        vec![good.clone(), stamped_at(2, 90_000, writer(5))],
        at(2, 90_000),
    );
    assert!(e.contains("diverged before command 2"), "{e}");
    // The live-mode cap on commands.
    let many = vec![good; persist_playground::playground::replay::MAX_REPLAY_COMMANDS + 1];
    let e = refused(1, many, at(0, 0));
    assert!(e.contains("at most"), "{e}");
}
