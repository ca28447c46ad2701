//! Breaking a protocol rule on purpose: for each rule, one seeded scenario with the faults or
//! replicas that make its absence visible, run twice, with the rule off and on. With it off the
//! anomaly the rule prevents happens, and the test proves it from the run's own data (duplicated
//! acknowledged values in the shard, oracle timestamps going back across a restart, upsert
//! output differing from the reference model, a shard not equal to a write task's desired
//! collection); with it on, in the very same scenario, it does not.
//!
//! Every fault comes from the scenario's seeded fault knobs or from its commands (crashes,
//! restarts, pushes at one instant), never from wall-clock timing: each run is one deterministic
//! simulation.

#![cfg(not(target_arch = "wasm32"))]

use persist_playground::playground::actor::ActorDetail;
use persist_playground::playground::actor::OracleView;
use persist_playground::playground::command::{
    ActorSpec, Command, FaultKnobs, OracleSpec, ReplicaSpec, Service, TaskOp, TaskSpec, WriteMode,
    WriterSpec,
};
use persist_playground::playground::rules::Rule;
use persist_playground::playground::{Applied, Scenario, Snapshot};

fn apply(s: &mut Scenario, c: Command) -> Applied {
    s.apply(c.clone())
        .unwrap_or_else(|e| panic!("{c:?} applies: {e}"))
}

fn add(s: &mut Scenario, spec: ActorSpec) -> (String, String) {
    let a = apply(
        s,
        Command::AddActor {
            spec,
            process: None,
        },
    );
    (a.actor.unwrap(), a.process.unwrap())
}

fn set_rule(s: &mut Scenario, rule: Rule, on: bool) {
    apply(s, Command::SetRule { rule, on });
}

fn consensus_faults(s: &mut Scenario, timeout_rate: f64) {
    apply(
        s,
        Command::SetFaults {
            service: Service::Consensus,
            knobs: FaultKnobs {
                timeout_rate,
                ..FaultKnobs::default()
            },
        },
    );
}

/// The history check's violations in `snap`, as (rule id, message).
fn flagged(snap: &Snapshot) -> Vec<(String, String)> {
    snap.check
        .violations
        .iter()
        .map(|v| (v.rule.clone(), v.message.clone()))
        .collect()
}

/// Asserts the history check flagged `rule` (and no rule outside `allowed`), by its per-rule
/// counts (the kept violations are only the newest).
fn assert_flags(snap: &Snapshot, rule: &str, allowed: &[&str]) {
    let broken: Vec<&str> = (snap.check.rules.iter())
        .filter(|r| r.violations > 0)
        .map(|r| r.rule.as_str())
        .collect();
    assert!(
        broken.contains(&rule),
        "the check flags {rule}: {broken:?}, {:?}",
        flagged(snap)
    );
    for r in broken {
        assert!(allowed.contains(&r), "unexpected {r}: {:?}", flagged(snap));
    }
}

/// Asserts the history check found nothing, having checked `rule` at least `min` times.
fn assert_clean(snap: &Snapshot, rule: &str, min: u64) {
    assert_eq!(flagged(snap), Vec::<(String, String)>::new());
    let r = snap.check.rules.iter().find(|r| r.rule == rule).unwrap();
    assert!(r.checks >= min, "{rule} was checked: {r:?}");
}

fn actor_variant(snap: &Snapshot, id: &str) -> Option<Rule> {
    snap.actors.iter().find(|a| a.id == id).unwrap().variant
}

/// One writer under Consensus timeouts; `Verify` at the end.
fn idempotency_scenario(
    seed: u64,
    on: bool,
) -> (
    Snapshot,
    persist_playground::playground::snapshot::VerifyView,
) {
    let mut s = Scenario::seeded(seed);
    set_rule(&mut s, Rule::IdempotencyToken, on);
    consensus_faults(&mut s, 0.3);
    let (w, _) = add(
        &mut s,
        ActorSpec::Writer(WriterSpec {
            rate_per_s: 20,
            key_lo: 0,
            key_hi: 1_000,
            mode: WriteMode::CompareAndAppend,
            ..WriterSpec::default()
        }),
    );
    s.run_for(4_000).unwrap();
    consensus_faults(&mut s, 0.0);
    s.run_for(1_000).unwrap();
    apply(&mut s, Command::Verify);
    s.run_for(2_000).unwrap();
    let snap = s.snapshot();
    let expected = (!on).then_some(Rule::IdempotencyToken);
    assert_eq!(actor_variant(&snap, &w), expected);
    let v = snap.verify.clone().expect("the check finished");
    assert_eq!(v.error, None);
    (snap, v)
}

#[test]
fn without_the_idempotency_token_an_acknowledged_write_lands_twice() {
    let (snap, off) = idempotency_scenario(41, false);
    let lost_acks = snap.faults.consensus.happened_then_timed_out;
    assert!(
        lost_acks > 0,
        "the scenario loses acknowledgements: {:?}",
        snap.faults
    );
    assert!(off.acked > 20, "{off:?}");
    assert!(
        off.duplicated > 0,
        "an acknowledged value is in the shard twice: {off:?}"
    );
    assert_flags(&snap, "ack-duplicate", &["ack-duplicate"]);

    let (snap, on) = idempotency_scenario(41, true);
    assert!(
        snap.faults.consensus.happened_then_timed_out > 0,
        "same faults with the rule on"
    );
    assert!(on.acked > 20, "{on:?}");
    assert_eq!(
        on.duplicated, 0,
        "the token keeps every write at most once: {on:?}"
    );
    assert_eq!(on.lost, 0, "{on:?}");
    assert_clean(&snap, "ack-duplicate", 20);
}

fn oracle_view(snap: &Snapshot, id: &str) -> OracleView {
    match &snap.actors.iter().find(|a| a.id == id).unwrap().detail {
        ActorDetail::Oracle(o) => o.clone(),
        other => panic!("{id} is not an oracle: {other:?}"),
    }
}

/// An oracle whose timeline runs ahead of the clock (a burst of 500 a tick), crashed and
/// restarted. Returns (the old instance's view before the crash, the new one's after).
fn oracle_scenario(seed: u64, on: bool) -> (OracleView, OracleView, Snapshot) {
    let mut s = Scenario::seeded(seed);
    set_rule(&mut s, Rule::OracleDurableBound, on);
    let (o, p) = add(
        &mut s,
        ActorSpec::Oracle(OracleSpec {
            rate_per_s: 4,
            burst: 500,
            ..OracleSpec::default()
        }),
    );
    s.run_for(3_000).unwrap();
    let before = oracle_view(&s.snapshot(), &o);
    apply(&mut s, Command::CrashProcess { process: p.clone() });
    s.run_for(100).unwrap();
    apply(&mut s, Command::RestartProcess { process: p });
    // Long enough for the correct instance's clock guard (it waits, up to 2 s, for a clock
    // that is far behind the stored upper).
    s.run_for(3_000).unwrap();
    let snap = s.snapshot();
    let after = oracle_view(&snap, &o);
    assert!(
        after.epoch > before.epoch,
        "a new instance: {before:?} {after:?}"
    );
    (before, after, snap)
}

#[test]
fn without_the_durable_bound_a_restarted_oracle_hands_out_timestamps_again() {
    let (before, after, snap) = oracle_scenario(42, false);
    assert!(
        before.write_ts > before.durable_upper,
        "the old instance served past its durable upper: {before:?}"
    );
    let first = after
        .first_ts
        .expect("the new instance handed out timestamps");
    assert!(
        first <= before.write_ts,
        "the new instance starts at or below a timestamp already handed out: first {first}, \
         old instance reached {}",
        before.write_ts
    );
    let oracle_rules = ["oracle-regress", "oracle-duplicate", "oracle-bound"];
    assert_flags(&snap, "oracle-regress", &oracle_rules);
    assert_flags(&snap, "oracle-bound", &oracle_rules);

    let (before, after, snap) = oracle_scenario(42, true);
    assert!(
        before.write_ts < before.durable_upper,
        "with the rule every timestamp is below the durable upper: {before:?}"
    );
    let first = after
        .first_ts
        .expect("the new instance handed out timestamps");
    assert!(
        first > before.write_ts,
        "the restarted instance resumes above every earlier timestamp: {first} vs {}",
        before.write_ts
    );
    assert_clean(&snap, "oracle-regress", 10);
}

/// One replica writes for a while; then a second replica joins (the rule is set just before).
fn upsert_scenario(seed: u64, on: bool) -> Snapshot {
    let mut s = Scenario::seeded(seed);
    add(&mut s, ActorSpec::Replica(ReplicaSpec { read_batch: 4 }));
    apply(&mut s, Command::SetGenerator { on: true });
    s.run_for(2_000).unwrap();
    set_rule(&mut s, Rule::UpsertFeedback, on);
    let (u2, _) = add(&mut s, ActorSpec::Replica(ReplicaSpec { read_batch: 8 }));
    s.run_for(3_000).unwrap();
    apply(&mut s, Command::SetGenerator { on: false });
    s.run_for(2_000).unwrap();
    let snap = s.snapshot();
    assert_eq!(actor_variant(&snap, "U1"), None);
    assert_eq!(
        actor_variant(&snap, &u2),
        (!on).then_some(Rule::UpsertFeedback)
    );
    snap
}

#[test]
fn without_feedback_from_the_shard_upsert_output_diverges_from_the_model() {
    let snap = upsert_scenario(43, false);
    let checker = &snap.upsert.as_ref().unwrap().checker;
    assert!(checker.checks > 10, "{checker:?}");
    assert!(
        !checker.violations.is_empty(),
        "the output differs from the reference model: {checker:?}"
    );
    assert_flags(&snap, "upsert-model", &["upsert-model"]);

    let snap = upsert_scenario(43, true);
    let checker = &snap.upsert.as_ref().unwrap().checker;
    assert!(checker.checks > 10, "{checker:?}");
    assert_eq!(checker.violations, Vec::<String>::new());
    assert_clean(&snap, "upsert-model", 10);
}

/// Two write tasks on one shard, each pushed rows at the same instant, so one of them loses the
/// race. (No reader ever downgrades the shard's since: the audit reads its whole history.)
fn task_scenario(
    seed: u64,
    on: bool,
) -> (persist_playground::write_task::audit::AuditReport, Snapshot) {
    let mut s = Scenario::seeded(seed);
    set_rule(&mut s, Rule::TaskResync, on);
    let task = || {
        ActorSpec::Task(TaskSpec {
            tick_interval_ms: 1_000,
            ..TaskSpec::default()
        })
    };
    let (t1, _) = add(&mut s, task());
    let (t2, _) = add(&mut s, task());
    s.run_for(500).unwrap();

    for round in 0..3 {
        for t in [&t1, &t2] {
            apply(
                &mut s,
                Command::TaskPush {
                    actor: t.clone(),
                    op: TaskOp::Append { rows: 2 + round },
                },
            );
        }
        s.run_for(1_500).unwrap();
    }
    let report = s.audit_tasks("mz_task").expect("the audit runs");
    assert!(report.commits_with_data >= 3, "{report:?}");
    (report, s.snapshot())
}

#[test]
fn without_a_resync_the_shard_stops_equalling_the_tasks_desired() {
    let (off, snap) = task_scenario(44, false);
    assert!(
        !off.failures.is_empty(),
        "a commit left the shard unequal to its task's desired: {off:?}"
    );
    assert_flags(&snap, "task-desired", &["task-desired"]);
    let (on, snap) = task_scenario(44, true);
    assert_eq!(on.failures, Vec::<String>::new(), "{on:?}");
    assert_clean(&snap, "task-desired", 5);
}

/// Whether the history check found a break of `rule`.
fn broke(snap: &Snapshot, rule: &str) -> bool {
    snap.check
        .rules
        .iter()
        .any(|r| r.rule == rule && r.violations > 0)
}

#[test]
fn the_anomalies_do_not_hang_on_one_seed() {
    // Goal: each scenario shows its anomaly because of how it is built (the faults, the second
    // replica, the pushes at one instant), not because of a lucky seed. Method: eight seeds
    // per scenario, each run with the rule off (the check flags it) and on (it flags nothing).
    for seed in 1..=8 {
        let (snap, _) = idempotency_scenario(seed, false);
        assert!(
            broke(&snap, "ack-duplicate"),
            "seed {seed}: {:?}",
            flagged(&snap)
        );
        let (snap, _) = idempotency_scenario(seed, true);
        assert_eq!(
            snap.check.violations_total,
            0,
            "seed {seed}: {:?}",
            flagged(&snap)
        );

        let (_, _, snap) = oracle_scenario(seed, false);
        assert!(
            broke(&snap, "oracle-regress"),
            "seed {seed}: {:?}",
            flagged(&snap)
        );
        let (_, _, snap) = oracle_scenario(seed, true);
        assert_eq!(
            snap.check.violations_total,
            0,
            "seed {seed}: {:?}",
            flagged(&snap)
        );

        let snap = upsert_scenario(seed, false);
        assert!(
            broke(&snap, "upsert-model"),
            "seed {seed}: {:?}",
            flagged(&snap)
        );
        let snap = upsert_scenario(seed, true);
        assert_eq!(
            snap.check.violations_total,
            0,
            "seed {seed}: {:?}",
            flagged(&snap)
        );

        let (_, snap) = task_scenario(seed, false);
        assert!(
            broke(&snap, "task-desired"),
            "seed {seed}: {:?}",
            flagged(&snap)
        );
        let (_, snap) = task_scenario(seed, true);
        assert_eq!(
            snap.check.violations_total,
            0,
            "seed {seed}: {:?}",
            flagged(&snap)
        );
    }
}

#[test]
fn set_rule_is_a_logged_command_in_the_snapshot_and_replays() {
    let mut s = Scenario::seeded(45);
    assert!(s.snapshot().rules.task_resync);
    let a = apply(
        &mut s,
        Command::SetRule {
            rule: Rule::TaskResync,
            on: false,
        },
    );
    assert!(a.message.contains("task-resync off"), "{}", a.message);
    let (t1, _) = add(&mut s, ActorSpec::Task(TaskSpec::default()));
    set_rule(&mut s, Rule::TaskResync, true);
    let (t2, _) = add(&mut s, ActorSpec::Task(TaskSpec::default()));
    s.run_for(300).unwrap();
    let snap = s.snapshot();
    assert!(snap.rules.task_resync);
    assert_eq!(actor_variant(&snap, &t1), Some(Rule::TaskResync));
    assert_eq!(actor_variant(&snap, &t2), None);
    let events = s.events_after(0, 10_000);
    assert!(events
        .iter()
        .any(|e| e.kind == "command" && e.detail.contains("task-resync off")));
    // The command is JSON like the others, and a run with it replays.
    let json = r#"{"type":"setRule","rule":"upsert-feedback","on":false}"#;
    let c: Command = serde_json::from_str(json).unwrap();
    assert_eq!(
        c,
        Command::SetRule {
            rule: Rule::UpsertFeedback,
            on: false
        }
    );
    assert!(
        serde_json::from_str::<Command>(r#"{"type":"setRule","rule":"nope","on":false}"#).is_err()
    );
    let replayed = Scenario::replay(45, s.stamped()).unwrap().snapshot();
    assert_eq!(actor_variant(&replayed, &t1), Some(Rule::TaskResync));
}
