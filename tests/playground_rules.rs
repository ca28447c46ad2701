//! Breaking a protocol rule on purpose: for each rule, its seeded scenario with the faults or
//! replicas that make its absence visible, run twice, with the rule off and on. With it off the
//! anomaly the rule prevents happens, and the test proves it from the run's own data (duplicated
//! acknowledged values in the shard, oracle timestamps going back across a restart, upsert
//! output differing from the reference model, a shard not equal to a write task's desired
//! collection); with it on, in the very same scenario, it does not.
//!
//! The scenarios are the rules' tours, `www/tours/rule-RULE.json`, the one place each is written
//! (the page plays the same JSON, and `tests/tours.rs` checks what every step says): the run
//! without the rule is the tour's steps before it starts over (`reset`), the run with it the steps
//! from there on. Every fault comes from the tour's seeded fault knobs or from its commands
//! (crashes, restarts, pushes at one instant), never from wall-clock timing: each run is one
//! deterministic simulation.

#![cfg(not(target_arch = "wasm32"))]

use std::path::PathBuf;

use persist_playground::playground::actor::ActorDetail;
use persist_playground::playground::actor::OracleView;
use persist_playground::playground::command::{ActorSpec, Command, TaskSpec};
use persist_playground::playground::rules::Rule;
use persist_playground::playground::{Applied, Scenario, Snapshot};
use serde_json::Value;

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

/// `www/tours/rule-RULE.json`, parsed.
fn tour(rule: Rule) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("www/tours")
        .join(format!("rule-{}.json", rule.id()));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// The tour's own seed.
fn tour_seed(rule: Rule) -> u64 {
    tour(rule)["seed"].as_u64().expect("a whole-number seed")
}

/// One half of a rule's tour, run on `seed`: the scenario at its end, and the snapshot at the end
/// of each of its steps.
struct Run {
    s: Scenario,
    ends: Vec<Snapshot>,
}

/// Runs rule `rule`'s tour on `seed`: with `on` false its steps before the first `reset` (the
/// run without the rule), with `on` true its steps from there on (the same run with it). Each
/// step's commands go through `Command`'s JSON, as the page sends them; then its `runMs`.
fn run_tour(rule: Rule, seed: u64, on: bool) -> Run {
    let tour = tour(rule);
    let steps = tour["steps"].as_array().expect("steps");
    let reset = (1..steps.len())
        .find(|&i| steps[i]["reset"] == true)
        .unwrap_or_else(|| panic!("tour rule-{} starts over with the rule on", rule.id()));
    let half = if on { reset..steps.len() } else { 0..reset };
    let mut s = Scenario::seeded(seed);
    let mut ends = Vec::new();
    for i in half {
        let step = &steps[i];
        for c in step["commands"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            let command: Command = serde_json::from_value(c.clone())
                .unwrap_or_else(|e| panic!("rule-{} step {}: {e}: {c}", rule.id(), i + 1));
            apply(&mut s, command);
        }
        s.run_for(step["runMs"].as_u64().unwrap_or(0)).unwrap();
        ends.push(s.snapshot());
    }
    assert_eq!(
        ends.last().unwrap().rules.is_on(rule),
        on,
        "the tour's run {} the rule",
        if on { "keeps" } else { "breaks" }
    );
    Run { s, ends }
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

/// One writer under Consensus timeouts; faults off and `Verify` at the end (the tour).
fn idempotency_scenario(
    seed: u64,
    on: bool,
) -> (
    Snapshot,
    persist_playground::playground::snapshot::VerifyView,
) {
    let mut run = run_tour(Rule::IdempotencyToken, seed, on);
    let snap = run.s.snapshot();
    let w = (snap.actors.iter())
        .find(|a| matches!(a.spec, ActorSpec::Writer(_)))
        .expect("the tour adds a writer")
        .id
        .clone();
    let expected = (!on).then_some(Rule::IdempotencyToken);
    assert_eq!(actor_variant(&snap, &w), expected);
    let v = snap.verify.clone().expect("the check finished");
    assert_eq!(v.error, None);
    (snap, v)
}

#[test]
fn without_the_idempotency_token_an_acknowledged_write_lands_twice() {
    let seed = tour_seed(Rule::IdempotencyToken);
    let (snap, off) = idempotency_scenario(seed, false);
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

    let (snap, on) = idempotency_scenario(seed, true);
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
/// restarted (the tour). Returns (the old instance's view before the crash, the new one's after).
fn oracle_scenario(seed: u64, on: bool) -> (OracleView, OracleView, Snapshot) {
    let run = run_tour(Rule::OracleDurableBound, seed, on);
    let [first, last] = run.ends.as_slice() else {
        panic!("the oracle tour's run is two steps: {}", run.ends.len())
    };
    let o = (first.actors.iter())
        .find(|a| matches!(a.spec, ActorSpec::Oracle(_)))
        .expect("the tour adds an oracle")
        .id
        .clone();
    let before = oracle_view(first, &o);
    let after = oracle_view(last, &o);
    assert!(
        after.epoch > before.epoch,
        "a new instance: {before:?} {after:?}"
    );
    (before, after, last.clone())
}

#[test]
fn without_the_durable_bound_a_restarted_oracle_hands_out_timestamps_again() {
    let seed = tour_seed(Rule::OracleDurableBound);
    let (before, after, snap) = oracle_scenario(seed, false);
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
    // The panel is told, so it promises nothing a restart of this instance does not keep.
    assert!(before.unbounded && after.unbounded, "{before:?} {after:?}");
    let oracle_rules = ["oracle-regress", "oracle-duplicate", "oracle-bound"];
    assert_flags(&snap, "oracle-regress", &oracle_rules);
    assert_flags(&snap, "oracle-bound", &oracle_rules);

    let (before, after, snap) = oracle_scenario(seed, true);
    assert!(
        before.write_ts < before.durable_upper,
        "with the rule every timestamp is below the durable upper: {before:?}"
    );
    assert!(
        !before.unbounded && !after.unbounded,
        "{before:?} {after:?}"
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

/// One replica writes for a while; then a second replica joins (the rule is set just before:
/// the tour).
fn upsert_scenario(seed: u64, on: bool) -> Snapshot {
    let snap = run_tour(Rule::UpsertFeedback, seed, on).s.snapshot();
    let replicas: Vec<&str> = (snap.actors.iter())
        .filter(|a| matches!(a.spec, ActorSpec::Replica(_)))
        .map(|a| a.id.as_str())
        .collect();
    let [u1, u2] = replicas.as_slice() else {
        panic!("the tour adds two replicas: {replicas:?}")
    };
    assert_eq!(actor_variant(&snap, u1), None);
    assert_eq!(
        actor_variant(&snap, u2),
        (!on).then_some(Rule::UpsertFeedback)
    );
    snap
}

#[test]
fn without_feedback_from_the_shard_upsert_output_diverges_from_the_model() {
    let seed = tour_seed(Rule::UpsertFeedback);
    let snap = upsert_scenario(seed, false);
    let checker = &snap.upsert.as_ref().unwrap().checker;
    assert!(checker.checks > 10, "{checker:?}");
    assert!(
        !checker.violations.is_empty(),
        "the output differs from the reference model: {checker:?}"
    );
    assert_flags(&snap, "upsert-model", &["upsert-model"]);

    let snap = upsert_scenario(seed, true);
    let checker = &snap.upsert.as_ref().unwrap().checker;
    assert!(checker.checks > 10, "{checker:?}");
    assert_eq!(checker.violations, Vec::<String>::new());
    assert_clean(&snap, "upsert-model", 10);
}

/// Two write tasks on one shard, each pushed rows at the same instant, so one of them loses the
/// race (the tour: one round of pushes, so each task commits data once). (No reader ever
/// downgrades the shard's since: the audit reads its whole history.)
fn task_scenario(
    seed: u64,
    on: bool,
) -> (persist_playground::write_task::audit::AuditReport, Snapshot) {
    let mut run = run_tour(Rule::TaskResync, seed, on);
    let report = run.s.audit_tasks("mz_task").expect("the audit runs");
    assert!(
        report.commits_with_data >= 2,
        "both tasks' pushes committed: {report:?}"
    );
    (report, run.s.snapshot())
}

#[test]
fn without_a_resync_the_shard_stops_equalling_the_tasks_desired() {
    let seed = tour_seed(Rule::TaskResync);
    let (off, snap) = task_scenario(seed, false);
    assert!(
        !off.failures.is_empty(),
        "a commit left the shard unequal to its task's desired: {off:?}"
    );
    assert_flags(&snap, "task-desired", &["task-desired"]);
    let (on, snap) = task_scenario(seed, true);
    assert_eq!(on.failures, Vec::<String>::new(), "{on:?}");
    // Every commit of the run was checked.
    assert_clean(&snap, "task-desired", on.commits);
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
    let err = serde_json::from_str::<Command>(r#"{"type":"setRule","rule":"nope","on":false}"#)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "unknown rule \"nope\": one of idempotency-token, oracle-durable-bound, \
             upsert-feedback, task-resync"
        ),
        "{err}"
    );
    let replayed = Scenario::replay(45, s.stamped()).unwrap().snapshot();
    assert_eq!(actor_variant(&replayed, &t1), Some(Rule::TaskResync));
}

#[test]
fn the_page_table_names_every_rule_and_its_default_specs_apply_as_sent() {
    use persist_playground::playground::table::PageTable;
    let table = serde_json::to_value(PageTable::default()).unwrap();
    // Rules: every one, in the page's order, keyed as the snapshot's `rules` is.
    let rules = table["rules"].as_array().unwrap();
    let ids: Vec<&str> = rules.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, Rule::ALL.map(Rule::id).to_vec());
    let mut s = Scenario::seeded(46);
    set_rule(&mut s, Rule::UpsertFeedback, false);
    let switches = serde_json::to_value(s.snapshot().rules).unwrap();
    for (r, rule) in rules.iter().zip(Rule::ALL) {
        let key = r["key"].as_str().unwrap();
        assert_eq!(
            switches[key],
            rule != Rule::UpsertFeedback,
            "{key} is the snapshot's switch of {}: {switches}",
            rule.id()
        );
        for field in ["name", "badge", "text"] {
            assert!(r[field].as_str().is_some_and(|t| !t.is_empty()), "{r}");
        }
    }
    let distinct = |field: &str| {
        let mut v: Vec<&str> = rules.iter().map(|r| r[field].as_str().unwrap()).collect();
        v.sort_unstable();
        v.dedup();
        v.len()
    };
    assert_eq!((distinct("name"), distinct("badge")), (4, 4));
    // Defaults: each kind's spec, sent as JSON the way the Add buttons send it, adds that kind.
    set_rule(&mut s, Rule::UpsertFeedback, true);
    for kind in ["writer", "reader", "task", "oracle", "replica"] {
        let spec = &table["defaults"][kind];
        assert_eq!(spec["kind"], kind, "{spec}");
        let c: Command =
            serde_json::from_value(serde_json::json!({ "type": "addActor", "spec": spec }))
                .unwrap_or_else(|e| panic!("{kind}: {e}"));
        let id = apply(&mut s, c).actor.unwrap();
        let snap = serde_json::to_value(s.snapshot()).unwrap();
        let actor = (snap["actors"].as_array().unwrap().iter())
            .find(|a| a["id"] == id.as_str())
            .unwrap();
        assert_eq!(&actor["spec"], spec, "{kind} runs the spec it was sent");
    }
    // The default scenario: two writers racing on one shard, and one actor of every other kind.
    let kinds: Vec<&str> = (table["defaultActors"].as_array().unwrap().iter())
        .map(|a| a["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["writer", "writer", "reader", "task", "oracle", "replica", "replica"]
    );
}
