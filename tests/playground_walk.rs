//! **Step replicas** walks the learner's own push (src/playground/walk.rs), as a learner found it
//! in free play: the generator ran, was turned off with a burst still queued, and an upsert was
//! pushed by hand. The walk must follow that push (not the queued message that sorts last in the
//! batch), name the queued messages that go along, end on a done line whose key and value are of
//! one message, say after the walk that the push went through (not "push an upsert"), leave an
//! upsert pushed during a walk for a walk of its own, and keep every press's message in the
//! snapshot for the page to show beside the button, with the generator named when it is on.

use persist_playground::playground::actor::ActorDetail;
use persist_playground::playground::command::{ActorSpec, Command, ReplicaSpec};
use persist_playground::playground::walk::PressView;
use persist_playground::playground::walk::PRESS_BUDGET_MS;
use persist_playground::playground::Scenario;
use persist_playground::playground::PLAYGROUND_LEASE_MS;

fn two_replicas(seed: u64) -> Scenario {
    let mut s = Scenario::seeded(seed);
    for read_batch in [4, 2] {
        s.apply(Command::AddActor {
            spec: ActorSpec::Replica(ReplicaSpec { read_batch }),
            process: None,
        })
        .unwrap();
    }
    s
}

fn push(s: &mut Scenario, key: i64, value: &str) {
    s.apply(Command::PushUpsert {
        key,
        value: Some(value.into()),
    })
    .unwrap();
}

fn press(s: &mut Scenario) -> String {
    s.apply(Command::StepReplicas).unwrap().message
}

fn press_view(s: &mut Scenario) -> Option<PressView> {
    s.snapshot().upsert.and_then(|u| u.press)
}

/// The generator runs until a burst of its is queued for the source, then is turned off: the
/// burst is still queued when the learner pushes. Returns how many were queued.
fn generator_burst_left_queued(s: &mut Scenario) -> u64 {
    s.apply(Command::SetGenerator { on: true }).unwrap();
    s.run_for(600).unwrap();
    let mut queued = 0;
    for _ in 0..2_000 {
        s.step(1).unwrap();
        queued = s.snapshot().upsert.unwrap().queued;
        if queued >= 2 {
            break;
        }
    }
    s.apply(Command::SetGenerator { on: false }).unwrap();
    queued
}

#[test]
fn the_walk_follows_the_learners_push_past_a_queued_generator_burst() {
    let mut s = two_replicas(3);
    let queued = generator_burst_left_queued(&mut s);
    assert!(queued >= 2, "a generator burst is queued: {queued}");
    // Key 0 sorts first in the batch the source writer makes of the queue: the old walk took the
    // batch's last message, a generator message, and looked its cell up by time alone.
    push(&mut s, 0, "pear");
    let first = press(&mut s);
    assert!(
        first.starts_with(
            "stage 1/7, source: your push, key 0 = (0, \"pear\"), is in the source log"
        ),
        "the walk follows the push: {first}"
    );
    let walk = s.snapshot().upsert.unwrap().walk.expect("a walk");
    assert!(walk.by_hand && walk.key == Some(0), "{walk:?}");
    assert_eq!(walk.value.as_deref(), Some("(0, \"pear\")"));
    // The queued generator messages go along, and the first press names each.
    assert!(
        !walk.along.is_empty() && walk.along.iter().all(|a| !a.by_hand),
        "{walk:?}"
    );
    for a in &walk.along {
        assert!(first.contains(&a.text), "press 1 names {}: {first}", a.text);
    }
    assert!(first.contains("(the generator's)"), "{first}");
    let mut fifth = String::new();
    for n in 2..=7 {
        let m = press(&mut s);
        assert!(m.starts_with(&format!("stage {n}/7, ")), "press {n}: {m}");
        if n == 5 {
            fifth = m;
            // Stage 5 points at the Shard panel's rows, and they hold the pushed key's row,
            // marked as the newest write's, at the upper the press names.
            let snap = s.snapshot();
            let shard = snap.shards.iter().find(|v| v.name == "upsert_out").unwrap();
            let rows = shard
                .rows
                .as_ref()
                .expect("the observer has read the shard's rows");
            let row = rows.shown.iter().find(|r| r.row.starts_with("(0, "));
            assert!(
                row.is_some_and(|r| r.newest && r.count == 1),
                "key 0's row is in the shard, the newest write's: {rows:?}"
            );
            assert!(
                fifth.contains(&format!("its upper is {}", shard.upper.unwrap())),
                "the rows are at the upper the press names: {fifth} {shard:?}"
            );
        }
    }
    // The done line: the key walked and the value the state holds for that same key.
    let done = s.snapshot().upsert.unwrap().walk_done.expect("a done line");
    assert_eq!((done.key, done.by_hand), (Some(0), true), "{done:?}");
    if done.overtaken_by.is_none() {
        assert!(
            fifth.ends_with(
                "; see the Shard panel's rows: key 0 = (0, \"pear\") (next: feedback read)"
            ),
            "{fifth}"
        );
    }
    let value = done.value.clone().unwrap_or_default();
    assert!(
        value.starts_with("(0, "),
        "the value is key 0's (its row starts with its key): {done:?}"
    );
    if done.overtaken_by.is_none() {
        assert_eq!(value, "(0, \"pear\")", "{done:?}");
    }
    // Press 8: nothing left, and it says the push went through (not "push an upsert").
    let eighth = press(&mut s);
    assert!(
        eighth.starts_with(
            "nothing new to walk: your push, key 0 = (0, \"pear\"), went through all seven stages"
        ),
        "{eighth}"
    );
    assert!(eighth.contains("stepped U1: fed back"), "{eighth}");
    let shown = press_view(&mut s).expect("press 8 is kept for the page");
    assert_eq!(
        (shown.text.as_str(), shown.generator_on),
        (eighth.as_str(), false)
    );
}

#[test]
fn an_upsert_pushed_during_a_walk_waits_for_a_walk_of_its_own() {
    let mut s = two_replicas(5);
    s.run_for(800).unwrap();
    push(&mut s, 3, "hello");
    for n in 1..=2 {
        assert!(press(&mut s).starts_with(&format!("stage {n}/7")));
    }
    // Pushed while the walk is at the stash: the walk goes on with key 3.
    push(&mut s, 4, "late");
    for n in 3..=7 {
        let m = press(&mut s);
        assert!(m.starts_with(&format!("stage {n}/7")), "{m}");
    }
    let done = s.snapshot().upsert.unwrap().walk_done.unwrap();
    assert_eq!(
        (done.key, done.value.as_deref()),
        (Some(3), Some("(3, \"hello\")"))
    );
    // The old sink stage read everything unread, key 4 included, and the next press said
    // "push an upsert". Now the next press walks key 4.
    let next = press(&mut s);
    assert!(
        next.starts_with("stage 1/7, source: your push, key 4 = (4, \"late\")"),
        "{next}"
    );
    for n in 2..=7 {
        assert!(press(&mut s).starts_with(&format!("stage {n}/7")));
    }
    let done = s.snapshot().upsert.unwrap().walk_done.unwrap();
    assert_eq!(
        (done.key, done.value.as_deref()),
        (Some(4), Some("(4, \"late\")"))
    );
    let up = {
        s.run_for(1_000).unwrap();
        s.snapshot().upsert.unwrap()
    };
    assert!(
        up.checker.checks > 0 && up.checker.violations.is_empty(),
        "{:?}",
        up.checker
    );
}

#[test]
fn with_the_generator_on_a_press_says_so_and_the_line_stays_for_the_page() {
    let mut s = two_replicas(7);
    s.apply(Command::SetGenerator { on: true }).unwrap();
    s.run_for(600).unwrap();
    push(&mut s, 2, "kiwi");
    // The push is still queued: the press names it as what a press walks once the generator is
    // off.
    let m = press(&mut s);
    assert!(
        m.starts_with("the generator is on, so there is no one upsert to walk stage by stage: turn it off, then press again to walk your push, key 2 = (2, \"kiwi\"). Instead, one worker step of every replica"),
        "{m}"
    );
    let shown = press_view(&mut s).expect("kept for the page");
    assert!(
        shown.generator_on && !shown.refused && shown.text == m,
        "{shown:?}"
    );
    // Another command, or the run moving on, takes the line away.
    s.run_for(1_000).unwrap();
    assert_eq!(press_view(&mut s), None, "the run moved on");
    // The replicas read the push as the run went on: no promise to walk it any more.
    let m = press(&mut s);
    assert!(
        m.starts_with("the generator is on, so there is no one upsert to walk stage by stage: turn it off, push an upsert, then press again."),
        "{m}"
    );
    assert!(press_view(&mut s).is_some());
    s.apply(Command::SetGenerator { on: false }).unwrap();
    assert_eq!(press_view(&mut s), None, "another command ran");
    // The push made while the generator ran is walked once it is off (if the replicas have not
    // read it yet), or the press says they did.
    let m = press(&mut s);
    assert!(
        m.starts_with("stage 1/7, source: ")
            || m.starts_with("nothing to walk: your push, key 2 = (2, \"kiwi\"), was read by U1"),
        "{m}"
    );
}

/// The page's own start (its default actors, the generator on, then off and a push): the
/// partial emission (stage 3) once ran the clock 6 s (two stage budgets) after the sink's empty
/// range had already moved the shard's upper to the upsert's time, asking the sink for a write
/// it did not have. A stage runs only as long as its write or read takes.
#[test]
fn the_partial_emission_does_not_run_the_clock_for_seconds() {
    let mut s = Scenario::seeded(1);
    for spec in persist_playground::playground::table::default_actors() {
        s.apply(Command::AddActor {
            spec,
            process: None,
        })
        .unwrap();
    }
    s.apply(Command::SetGenerator { on: true }).unwrap();
    s.run_for(3_900).unwrap();
    s.apply(Command::SetGenerator { on: false }).unwrap();
    push(&mut s, 3, "hello");
    let mut said = Vec::new();
    for _ in 0..7 {
        let before = s.now_ms();
        let m = press(&mut s);
        said.push((s.now_ms() - before, m));
    }
    let (ran, third) = &said[2];
    assert!(
        third.starts_with("stage 3/7, partial emission: U1 drained"),
        "{third}"
    );
    assert!(*ran < 1_000, "stage 3 ran the clock {ran} ms: {third}");
    for (_, m) in &said {
        assert!(!m.contains(" 1 updates"), "{m}");
    }
}

/// Free play as a learner meets it: the default actors, the generator on from the start, paused
/// at some moment, the generator turned off, one push, then Step replicas until the walk is done.
/// Whenever the learner pauses, the walk ends with the pushed value in state, no replica fails,
/// and no press runs the clock long enough for a lease to run out.
#[test]
fn a_push_walked_from_any_pause_reaches_state_without_a_failure() {
    let pauses = [150, 560, 1_000, 2_500, 3_900];
    for (seed, pause_at) in [1, 2, 3].into_iter().flat_map(|s| pauses.map(|p| (s, p))) {
        let mut s = Scenario::seeded(seed);
        for spec in persist_playground::playground::table::default_actors() {
            s.apply(Command::AddActor {
                spec,
                process: None,
            })
            .unwrap();
        }
        s.apply(Command::SetGenerator { on: true }).unwrap();
        s.run_for(pause_at).unwrap();
        s.apply(Command::SetGenerator { on: false }).unwrap();
        push(&mut s, 1, "hello");
        let mut said = Vec::new();
        for _ in 0..7 {
            let before = s.now_ms();
            let m = match s.apply(Command::StepReplicas) {
                Ok(a) => a.message,
                Err(e) => panic!("press failed: {e}; seed {seed}, paused at {pause_at}: {said:#?}"),
            };
            said.push((s.now_ms() - before, m));
        }
        let log = format!("seed {seed}, paused at {pause_at}: {said:#?}");
        // Half a lease per press, and the whole walk within one lease: every reader's lease
        // stays alive (a held replica's listen heartbeats only when a batch arrives).
        for (ran, _) in &said {
            assert!(
                *ran <= PRESS_BUDGET_MS,
                "a press ran the clock {ran} ms; {log}"
            );
        }
        let total: u64 = said.iter().map(|(ran, _)| ran).sum();
        assert!(
            total < PLAYGROUND_LEASE_MS,
            "the walk ran the clock {total} ms; {log}"
        );
        assert!(said[6].1.starts_with("stage 7/7, state: "), "{log}");
        let snap = s.snapshot();
        let done = snap.upsert.as_ref().and_then(|u| u.walk_done.clone());
        let done = done.unwrap_or_else(|| panic!("no finished walk; {log}"));
        assert_eq!(done.key, Some(1), "{log}");
        assert!(
            done.value.as_deref().is_some_and(|v| v.contains("hello")),
            "{done:?}; {log}"
        );
        let failed: Vec<_> = snap
            .actors
            .iter()
            .filter(|a| a.error.is_some())
            .map(|a| (a.id.clone(), a.error.clone()))
            .collect();
        assert!(failed.is_empty(), "failed actors {failed:?}; {log}");
    }
}

/// A walk cut short keeps the push the learner's: crash the walked replica's process midway,
/// and the next press walks the same push through the other replica, as "your push", never as
/// "the generator's" (issue 16, the free-play walk looked at on the page).
#[test]
fn a_walk_cut_short_by_a_crash_walks_the_same_push_as_yours_next() {
    let mut s = two_replicas(10);
    s.run_for(500).unwrap();
    push(&mut s, 3, "hello");
    for _ in 0..3 {
        press(&mut s);
    }
    s.apply(Command::CrashProcess {
        process: "P1".into(),
    })
    .unwrap();
    let next = press(&mut s);
    assert!(
        next.starts_with("stage 1/7, source: your push, key 3 = (3, \"hello\")"),
        "{next}"
    );
    assert!(!next.contains("the generator's"), "{next}");
}

/// Two replicas on `seed`; `key 3 = hello` pushed and walked `cut` stages through U1, then U1's
/// process (P1) crashed: the next press walks the push on through U2.
fn walk_cut_by_a_crash(seed: u64, cut: usize) -> Scenario {
    let mut s = two_replicas(seed);
    s.run_for(500).unwrap();
    push(&mut s, 3, "hello");
    for _ in 0..cut {
        press(&mut s);
    }
    s.apply(Command::CrashProcess {
        process: "P1".into(),
    })
    .unwrap();
    s
}

/// The walk cut short after U1's partial emission (stage 3 moved the shard's upper to the
/// upsert's time with an empty range) goes on through U2, whose persist source has that upper
/// waiting: fed at the stash, the operator drained the message in the step that stashed it, and
/// the walk stopped with "key 3 is not in the stash" while U2's state showed ◌ key 3 = hello.
/// Now each press runs one stage: the message waits in the stash at stage 2, ◌ comes at stage 3.
#[test]
fn a_walk_through_a_replica_whose_shard_is_at_the_upserts_time_stashes_before_it_drains() {
    for (seed, cut) in [3, 4, 5].into_iter().flat_map(|s| [3, 4].map(|c| (s, c))) {
        let mut s = walk_cut_by_a_crash(seed, cut);
        let mut said = Vec::new();
        for n in 1..=7 {
            let m = press(&mut s);
            let log = format!("seed {seed}, cut after stage {cut}: {said:#?}\n{m}");
            assert!(m.starts_with(&format!("stage {n}/7, ")), "{log}");
            assert!(!m.contains("unfinished"), "{log}");
            if n == 2 || n == 3 {
                let snap = s.snapshot();
                let u2 = snap.actors.iter().find(|a| a.id == "U2").map(|a| &a.detail);
                let Some(ActorDetail::Replica(r)) = u2 else {
                    panic!("U2 runs; {log}")
                };
                let op = r.operator.clone().expect("U2's operator");
                let provisional = op.state.iter().any(|c| c.mode == "provisional");
                assert_eq!(provisional, n == 3, "◌ only from stage 3; {log}");
                assert_eq!(op.stash.len(), usize::from(n == 2), "{log}");
            }
            said.push(m);
        }
    }
}

fn walk_all(s: &mut Scenario) -> Vec<String> {
    let mut said = Vec::new();
    for _ in 0..7 {
        let m = press(s);
        let end = ["the walk is done", "unfinished", "the walk ends here"]
            .iter()
            .any(|e| m.contains(e));
        said.push(m);
        if end {
            break;
        }
    }
    said
}

/// The same value pushed twice: the second upsert changes nothing, so the sink writes no update
/// (only the shard's upper moves past its time). The walk once waited at stage 6 for an update
/// read back that never comes and stopped there; it says at the sink that the value is unchanged
/// and finishes with a feedback read of 0 updates. A delete of an absent key walks the same way.
#[test]
fn an_upsert_that_changes_nothing_walks_to_the_end_and_says_so() {
    for seed in [3, 5, 8] {
        let mut s = two_replicas(seed);
        s.run_for(500).unwrap();
        push(&mut s, 3, "hello");
        let first = walk_all(&mut s);
        assert!(
            first.len() == 7 && first[6].starts_with("stage 7/7"),
            "{first:#?}"
        );
        push(&mut s, 3, "hello");
        let again = walk_all(&mut s);
        let log = format!("seed {seed}: {again:#?}");
        assert_eq!(again.len(), 7, "{log}");
        assert!(again.iter().all(|m| !m.contains("unfinished")), "{log}");
        assert!(
            again[3].starts_with("stage 4/7, sink: ") && again[3].contains("unchanged"),
            "{log}"
        );
        assert!(again[5].contains("0 updates"), "{log}");
        let done = s.snapshot().upsert.unwrap().walk_done.expect("done");
        assert_eq!(done.value.as_deref(), Some("(3, \"hello\")"), "{log}");
        let snap = s.snapshot();
        let walked = snap.actors.iter().find(|a| a.id == done.replica);
        let Some(ActorDetail::Replica(r)) = walked.map(|a| &a.detail) else {
            panic!("{} runs; {log}", done.replica)
        };
        // No feedback came for the key: the ◌ entry is not replaced, and the last press says so
        // rather than "no longer provisional".
        let op = r.operator.clone().expect("an operator");
        let left = op.state.iter().any(|c| c.mode == "provisional");
        assert!(!again[6].contains("no longer provisional"), "{log}");
        assert_eq!(again[6].contains("◌ entry"), left, "{op:?}; {log}");
        // A delete of a key no one wrote.
        s.apply(Command::PushUpsert {
            key: 41,
            value: None,
        })
        .unwrap();
        let del = walk_all(&mut s);
        let log = format!("seed {seed}: {del:#?}");
        assert_eq!(del.len(), 7, "{log}");
        assert!(del.iter().all(|m| !m.contains("unfinished")), "{log}");
        assert!(del[3].contains("holds nothing already"), "{log}");
        let done = s.snapshot().upsert.unwrap().walk_done.expect("done");
        assert_eq!((done.key, done.value.as_deref()), (Some(41), None), "{log}");
    }
}

/// A walk cut short after U1's write committed (stage 5 or 6), then continued through U2: the
/// shard already holds the upsert, so U2 reads the message at a time its persist input has
/// passed and never stashes it. The walk stopped with a stage error ("made no partial emission",
/// "not in the stash"); it ends with one line that says the shard holds it, written by U1.
#[test]
fn a_walk_cut_short_after_the_write_committed_ends_saying_the_shard_holds_it() {
    for (seed, cut) in (1..=12).flat_map(|s| [5, 6].map(|c| (s, c))) {
        let mut s = walk_cut_by_a_crash(seed, cut);
        let said = walk_all(&mut s);
        let log = format!("seed {seed}, cut after stage {cut}: {said:#?}");
        assert!(said.iter().all(|m| !m.contains("unfinished")), "{log}");
        let last = said.last().unwrap();
        assert!(
            last.starts_with("stage 7/7") || last.contains("already holds"),
            "{log}"
        );
        assert!(s.snapshot().upsert.unwrap().walk.is_none(), "{log}");
        // U2, on its own again, learns the value from the shard.
        s.run_for(1_000).unwrap();
        let snap = s.snapshot();
        let u2 = snap.actors.iter().find(|a| a.id == "U2").map(|a| &a.detail);
        let Some(ActorDetail::Replica(r)) = u2 else {
            panic!("U2 runs; {log}")
        };
        let op = r.operator.clone().expect("U2's operator");
        assert!(
            op.state
                .iter()
                .any(|c| c.value.as_deref() == Some("(3, \"hello\")")),
            "{:?}; {log}",
            op.state
        );
        let up = snap.upsert.unwrap();
        assert!(up.checker.violations.is_empty(), "{:?}; {log}", up.checker);
    }
}
