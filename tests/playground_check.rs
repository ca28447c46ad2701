//! The live check of the history (src/playground/check/) on hand-made histories, good and bad,
//! one or more per rule: a good history gives no violation and counts its checks; a bad one names
//! the rule it breaks and cites the events that broke it. Real runs are in
//! tests/playground_check_runs.rs.

#![cfg(not(target_arch = "wasm32"))]

use persist_playground::playground::check::{CheckReport, HistoryCheck};
use persist_playground::playground::fact::{
    AttemptOutcome, BatchFact, Fact, HandleFact, MessageFact, VersionFact,
};
use persist_playground::playground::log::{Outcome, PlayEvent};

// Each test feeds a `HistoryCheck` a few events built by hand: a good
// history must give no violation and count its checks; a bad one must name the rule it breaks
// and cite the events that broke it.

/// Builds histories: each fact becomes the next event, `step_ms` after the previous one.
struct History {
    check: HistoryCheck,
    seq: u64,
    at_ms: u64,
}

impl History {
    fn new() -> Self {
        History {
            check: HistoryCheck::new(),
            seq: 0,
            at_ms: 0,
        }
    }
    fn at(&mut self, at_ms: u64) -> &mut Self {
        self.at_ms = at_ms;
        self
    }
    fn by(&mut self, actor: Option<&str>, fact: Fact) -> u64 {
        self.seq += 1;
        self.at_ms += 1;
        self.check.observe(&PlayEvent {
            seq: self.seq,
            at_ms: self.at_ms,
            actor: actor.map(str::to_string),
            process: None,
            component: "test".into(),
            kind: "test".into(),
            outcome: Outcome::Info,
            detail: String::new(),
            fact: Some(fact),
        });
        self.seq
    }
    fn fact(&mut self, fact: Fact) -> u64 {
        self.by(None, fact)
    }
    fn report(&self) -> CheckReport {
        self.check.report()
    }
    fn rule(&self, rule: &str) -> (u64, u64, u64) {
        let r = self.report();
        let r = r.rules.iter().find(|r| r.rule == rule).expect("a rule");
        (r.checks, r.violations, r.unverified)
    }
    /// The only violation's rule and cited events.
    fn broken(&self) -> (String, Vec<u64>, String) {
        let r = self.report();
        assert_eq!(
            r.violations.len(),
            1,
            "exactly one violation: {:?}",
            r.violations
        );
        let v = &r.violations[0];
        (v.rule.clone(), v.seqs.clone(), v.message.clone())
    }
    fn clean(&self) {
        let r = self.report();
        assert!(r.violations.is_empty(), "no violation: {:?}", r.violations);
    }
}

fn d(s: &str) -> u64 {
    persist_playground::playground::fact::digest(s.as_bytes(), b"v")
}

fn baseline(shard: &str, seqno: u64, upper: u64, batches: Vec<BatchFact>) -> Fact {
    Fact::ShardBaseline {
        shard: shard.into(),
        seqno,
        upper: Some(upper),
        since: Some(0),
        batches,
        handles: vec![],
        contents: None,
    }
}

fn batch(lower: u64, upper: u64, updates: &[(u64, i64)]) -> BatchFact {
    BatchFact {
        lower,
        upper: Some(upper),
        len: updates.len() as u64,
        updates: Some(updates.to_vec()),
    }
}

fn version(seqno: u64, upper: u64, batches: Vec<BatchFact>) -> VersionFact {
    VersionFact {
        seqno,
        seqno_from: seqno - 1,
        upper: Some(upper),
        since: Some(0),
        batches,
        removed: vec![],
        handles: vec![],
        contents: None,
    }
}

fn versions(shard: &str, versions: Vec<VersionFact>) -> Fact {
    Fact::ShardVersions {
        shard: shard.into(),
        versions,
    }
}

fn ack(shard: &str, lower: u64, upper: u64, acked: Vec<u64>) -> Fact {
    Fact::Append {
        shard: shard.into(),
        writer: "w1".into(),
        mode: "compareAndAppend".into(),
        lower,
        upper,
        outcome: AttemptOutcome::Committed,
        updates: acked.len() as u64,
        acked,
        current: None,
    }
}

#[test]
fn append_chain_holds_for_appends_and_merges() {
    let mut h = History::new();
    h.fact(baseline("data", 1, 0, vec![]));
    h.fact(versions(
        "data",
        vec![
            version(2, 10, vec![batch(0, 10, &[])]),
            version(3, 20, vec![batch(10, 20, &[])]),
        ],
    ));
    // A merge replaces [0, 10) and [10, 20) by [0, 20), keyed by its lower.
    let mut merge = version(4, 20, vec![batch(0, 20, &[])]);
    merge.removed = vec![10];
    h.fact(versions("data", vec![merge]));
    h.clean();
    assert!(h.rule("append-chain").0 >= 4);
}

#[test]
fn append_chain_finds_a_gap_an_overlap_and_a_skipped_seqno() {
    let mut h = History::new();
    h.fact(baseline("data", 1, 10, vec![batch(0, 10, &[])]));
    let gap = h.fact(versions(
        "data",
        vec![version(2, 20, vec![batch(15, 20, &[])])],
    ));
    let (rule, seqs, msg) = h.broken();
    assert_eq!(rule, "append-chain");
    assert!(seqs.contains(&gap));
    assert!(msg.contains("gap") && msg.contains("[10, 15)"), "{msg}");

    let mut h = History::new();
    h.fact(baseline("data", 1, 10, vec![batch(0, 10, &[])]));
    h.fact(versions(
        "data",
        vec![version(2, 20, vec![batch(5, 20, &[])])],
    ));
    assert!(h.broken().2.contains("overlap"));

    let mut h = History::new();
    h.fact(baseline("data", 1, 10, vec![batch(0, 10, &[])]));
    let mut skipped = version(4, 20, vec![batch(10, 20, &[])]);
    skipped.seqno_from = 3;
    h.fact(versions("data", vec![skipped]));
    let (rule, _, msg) = h.broken();
    assert_eq!(rule, "append-chain");
    assert!(msg.contains("last version read was 1"), "{msg}");

    // An upper moved with no batch to carry it.
    let mut h = History::new();
    h.fact(baseline("data", 1, 10, vec![batch(0, 10, &[])]));
    h.fact(versions("data", vec![version(2, 20, vec![])]));
    assert!(h
        .broken()
        .2
        .contains("the batches end at 10 but the upper is 20"));
}

#[test]
fn frontiers_that_go_back_are_found_for_shards_handles_writers_and_tasks() {
    // The shard's since.
    let mut h = History::new();
    h.fact(baseline("data", 1, 10, vec![batch(0, 10, &[])]));
    let mut v = version(2, 10, vec![]);
    v.since = Some(5);
    let mut back = version(3, 10, vec![]);
    back.since = Some(3);
    h.fact(versions("data", vec![v, back]));
    let (rule, _, msg) = h.broken();
    assert_eq!(
        (rule.as_str(), msg.contains("since went back from 5 to 3")),
        ("frontier-regress", true),
        "{msg}"
    );

    // A handle.
    let mut h = History::new();
    h.fact(baseline("data", 1, 10, vec![batch(0, 10, &[])]));
    let handle = |f| HandleFact {
        id: "r1".into(),
        frontier: Some(f),
        removed: false,
    };
    let mut a = version(2, 10, vec![]);
    a.handles = vec![handle(8)];
    let mut b = version(3, 10, vec![]);
    b.handles = vec![handle(4)];
    h.fact(versions("data", vec![a, b]));
    assert!(h.broken().2.contains("handle r1 went back from 8 to 4"));

    // A writer's attempts, and a write task's upper.
    let mut h = History::new();
    h.by(Some("W1"), ack("data", 20, 30, vec![]));
    h.by(Some("W1"), ack("data", 10, 30, vec![]));
    assert!(h.broken().2.contains("below its earlier upper 20"));
    let task = |what: &str, upper| Fact::TaskWrite {
        shard: "mz_task".into(),
        expected_upper: None,
        upper: Some(upper),
        what: what.into(),
        updates: 0,
        desired: None,
    };
    let mut h = History::new();
    h.by(Some("T1"), task("committed", 30));
    h.by(Some("T1"), task("resynced", 40));
    h.clean();
    h.by(Some("T1"), task("resynced", 35));
    assert!(h
        .broken()
        .2
        .contains("write task T1's upper went back from 40 to 35"));
}

#[test]
fn acknowledged_writes_are_found_in_the_shard_whichever_comes_first() {
    let mut h = History::new();
    h.fact(baseline("data", 1, 0, vec![]));
    // The store first, then the ack.
    h.fact(versions(
        "data",
        vec![version(2, 10, vec![batch(0, 10, &[(d("a"), 1)])])],
    ));
    h.by(Some("W1"), ack("data", 0, 10, vec![d("a")]));
    // The ack first (the observer lags), then the store.
    h.by(Some("W1"), ack("data", 10, 20, vec![d("b"), d("c")]));
    h.fact(versions(
        "data",
        vec![version(
            3,
            20,
            vec![batch(10, 20, &[(d("b"), 1), (d("c"), 1)])],
        )],
    ));
    h.clean();
    assert_eq!(h.rule("ack-lost").0, 3);
    assert_eq!(h.rule("ack-duplicate").0, 3);
}

#[test]
fn an_acknowledged_write_missing_or_retracted_is_lost() {
    let mut h = History::new();
    h.fact(baseline("data", 1, 0, vec![]));
    let acked = h.by(Some("W1"), ack("data", 0, 10, vec![d("a")]));
    let store = h.fact(versions(
        "data",
        vec![version(2, 10, vec![batch(0, 10, &[(d("x"), 1)])])],
    ));
    let (rule, seqs, msg) = h.broken();
    assert_eq!(rule, "ack-lost");
    assert_eq!(seqs, vec![acked, store]);
    assert!(
        msg.contains("W1's acknowledged write at [.., 10) is not in the shard"),
        "{msg}"
    );

    let mut h = History::new();
    h.fact(baseline("data", 1, 0, vec![]));
    h.fact(versions(
        "data",
        vec![version(2, 10, vec![batch(0, 10, &[(d("a"), 1)])])],
    ));
    h.by(Some("W1"), ack("data", 0, 10, vec![d("a")]));
    h.fact(versions(
        "data",
        vec![version(3, 20, vec![batch(10, 20, &[(d("a"), -1)])])],
    ));
    assert!(h.broken().2.contains("retracted"));
}

#[test]
fn an_acknowledged_write_in_two_batches_or_twice_in_one_is_a_duplicate() {
    // Written twice: once unacknowledged (an indeterminate attempt that landed), once acked.
    let mut h = History::new();
    h.fact(baseline("data", 1, 0, vec![]));
    h.fact(versions(
        "data",
        vec![version(2, 10, vec![batch(0, 10, &[(d("a"), 1)])])],
    ));
    h.fact(versions(
        "data",
        vec![version(3, 20, vec![batch(10, 20, &[(d("a"), 1)])])],
    ));
    h.by(Some("W1"), ack("data", 10, 20, vec![d("a")]));
    let (rule, _, msg) = h.broken();
    assert_eq!(rule, "ack-duplicate");
    assert!(msg.contains("2 times"), "{msg}");

    let mut h = History::new();
    h.fact(baseline("data", 1, 0, vec![]));
    h.by(Some("W1"), ack("data", 0, 10, vec![d("a")]));
    h.fact(versions(
        "data",
        vec![version(2, 10, vec![batch(0, 10, &[(d("a"), 2)])])],
    ));
    assert!(h.broken().2.contains("multiplicity 2"));

    // Acked first, then written again later.
    let mut h = History::new();
    h.fact(baseline("data", 1, 0, vec![]));
    h.fact(versions(
        "data",
        vec![version(2, 10, vec![batch(0, 10, &[(d("a"), 1)])])],
    ));
    h.by(Some("W1"), ack("data", 0, 10, vec![d("a")]));
    h.fact(versions(
        "data",
        vec![version(3, 20, vec![batch(10, 20, &[(d("a"), 1)])])],
    ));
    assert!(h.broken().2.contains("written again"));
}

#[test]
fn a_bounded_value_table_counts_what_it_forgot_as_unverified_not_lost() {
    let mut h = History::new();
    h.fact(baseline("data", 1, 0, vec![]));
    let n = 25_000u64;
    for i in 0..n {
        let value = d(&format!("v{i}"));
        h.fact(versions(
            "data",
            vec![version(i + 2, i + 1, vec![batch(i, i + 1, &[(value, 1)])])],
        ));
    }
    h.by(Some("W1"), ack("data", 0, 1, vec![d("v0")]));
    h.by(
        Some("W1"),
        ack("data", n - 1, n, vec![d(&format!("v{}", n - 1))]),
    );
    h.clean();
    assert_eq!(
        h.rule("ack-lost"),
        (1, 0, 1),
        "the newest checked, the oldest forgotten"
    );
}

fn task_commit(upper: u64, desired: u64) -> Fact {
    Fact::TaskWrite {
        shard: "mz_task".into(),
        expected_upper: Some(upper - 10),
        upper: Some(upper),
        what: "committed".into(),
        updates: 1,
        desired: Some(desired),
    }
}

fn task_version(seqno: u64, upper: u64, contents: u64) -> Fact {
    let mut v = version(seqno, upper, vec![batch(upper - 10, upper, &[])]);
    v.contents = Some(contents);
    versions("mz_task", vec![v])
}

#[test]
fn a_write_task_commit_must_leave_the_shard_equal_to_desired() {
    let mut h = History::new();
    h.fact(baseline("mz_task", 1, 0, vec![]));
    h.fact(task_version(2, 10, 77));
    h.by(Some("T1"), task_commit(10, 77));
    h.by(Some("T1"), task_commit(20, 88)); // before the observer sees it
    h.fact(task_version(3, 20, 88));
    h.clean();
    assert_eq!(h.rule("task-desired").0, 2);

    let mut h = History::new();
    h.fact(baseline("mz_task", 1, 0, vec![]));
    let commit = h.by(Some("T1"), task_commit(10, 77));
    let seen = h.fact(task_version(2, 10, 78));
    let (rule, seqs, msg) = h.broken();
    assert_eq!((rule.as_str(), seqs), ("task-desired", vec![commit, seen]));
    assert!(msg.contains("T1's commit at upper 10"), "{msg}");
}

fn ts(epoch: u64, w: u64, r: u64) -> Fact {
    Fact::OracleTs {
        timeline: "t".into(),
        epoch,
        write_ts: w,
        read_ts: r,
    }
}

fn opened(epoch: u64, start_ts: u64, durable_upper: u64) -> Fact {
    Fact::OracleOpened {
        timeline: "t".into(),
        epoch,
        start_ts,
        durable_upper,
    }
}

#[test]
fn oracle_timestamps_go_up_across_epochs_and_stay_below_the_bound() {
    let mut h = History::new();
    h.fact(opened(1, 1, 100));
    h.by(Some("O1"), ts(1, 1, 1));
    h.by(Some("O1"), ts(1, 50, 50));
    h.fact(Fact::OracleWindow {
        timeline: "t".into(),
        epoch: 1,
        for_ts: Some(100),
        durable_upper: 200,
    });
    h.by(Some("O1"), ts(1, 150, 150));
    h.fact(opened(2, 200, 300));
    h.by(Some("O2"), ts(2, 201, 201));
    h.fact(Fact::TimelineVersion {
        timeline: "t".into(),
        seqno: 1,
        epoch: 1,
        durable_upper: 200,
    });
    h.fact(Fact::TimelineVersion {
        timeline: "t".into(),
        seqno: 2,
        epoch: 2,
        durable_upper: 300,
    });
    h.clean();
    for rule in ["oracle-regress", "oracle-duplicate", "oracle-bound"] {
        assert!(h.rule(rule).0 > 0, "{rule} checked");
    }
}

#[test]
fn an_oracle_timestamp_going_back_or_twice_or_past_the_bound_is_found() {
    let mut h = History::new();
    h.fact(opened(1, 1, 100));
    h.by(Some("O1"), ts(1, 50, 50));
    h.by(Some("O1"), ts(1, 40, 50));
    assert_eq!(h.broken().0, "oracle-regress");

    // Across a restart: the new epoch hands out what the old one did.
    let mut h = History::new();
    h.fact(opened(1, 1, 100));
    let first = h.by(Some("O1"), ts(1, 50, 50));
    h.fact(opened(2, 60, 200));
    let again = h.by(Some("O1"), ts(2, 50, 60));
    let report = h.report();
    let dup = report
        .violations
        .iter()
        .find(|v| v.rule == "oracle-duplicate")
        .expect("a duplicate");
    assert_eq!(dup.seqs, vec![first, again]);

    // The new epoch starts below what the old one handed out.
    let mut h = History::new();
    h.fact(opened(1, 1, 100));
    h.by(Some("O1"), ts(1, 90, 90));
    h.fact(opened(2, 80, 180));
    let (rule, _, msg) = h.broken();
    assert_eq!(rule, "oracle-regress");
    assert!(msg.contains("starts at 80, not above 90"), "{msg}");

    // Serving at or past the durable bound.
    let mut h = History::new();
    h.fact(opened(1, 1, 100));
    h.by(Some("O1"), ts(1, 100, 100));
    assert_eq!(h.broken().0, "oracle-bound");

    // The stored record going back.
    let mut h = History::new();
    h.fact(Fact::TimelineVersion {
        timeline: "t".into(),
        seqno: 1,
        epoch: 2,
        durable_upper: 300,
    });
    h.fact(Fact::TimelineVersion {
        timeline: "t".into(),
        seqno: 2,
        epoch: 2,
        durable_upper: 200,
    });
    assert_eq!(h.broken().0, "oracle-regress");
}

const OUT: &str = "upsert_out";

fn message(offset: u64, key: i64, ts: u64, value: Option<&str>) -> MessageFact {
    MessageFact {
        offset,
        key,
        ts,
        output: value.map(|v| d(&format!("{key}={v}"))),
    }
}

#[test]
fn upsert_output_is_checked_against_the_model_once_the_source_caught_up() {
    let mut h = History::new();
    h.fact(baseline(OUT, 1, 0, vec![]));
    h.fact(Fact::UpsertSource {
        upper: 10,
        messages: vec![message(0, 1, 5, Some("a")), message(1, 2, 6, Some("b"))],
    });
    h.fact(versions(
        OUT,
        vec![version(
            2,
            10,
            vec![batch(0, 10, &[(d("1=a"), 1), (d("2=b"), 1)])],
        )],
    ));
    // The output runs ahead of what the source has told the check: the check waits.
    h.fact(versions(
        OUT,
        vec![version(
            3,
            20,
            vec![batch(
                10,
                20,
                &[(d("1=a"), -1), (d("1=c"), 1), (d("2=b"), -1)],
            )],
        )],
    ));
    assert_eq!(h.rule("upsert-model").0, 1);
    h.fact(Fact::UpsertSource {
        upper: 20,
        messages: vec![message(2, 1, 12, Some("c")), message(3, 2, 15, None)],
    });
    h.clean();
    assert_eq!(h.rule("upsert-model").0, 2);

    let mut h = History::new();
    h.fact(baseline(OUT, 1, 0, vec![]));
    h.fact(Fact::UpsertSource {
        upper: 10,
        messages: vec![message(0, 1, 5, Some("a")), message(1, 1, 7, Some("b"))],
    });
    // A replica that kept the older value.
    let out = h.fact(versions(
        OUT,
        vec![version(2, 10, vec![batch(0, 10, &[(d("1=a"), 1)])])],
    ));
    let (rule, seqs, msg) = h.broken();
    assert_eq!((rule.as_str(), seqs), ("upsert-model", vec![out]));
    assert!(
        msg.contains("1 rows the model does not have, 1 rows it expects missing (keys 1)"),
        "{msg}"
    );
}

#[test]
fn the_upsert_model_agrees_with_the_reference_model() {
    // Goal: the check's bounded per-key model says what `upsert::reference::expected_at` says.
    // Method: random messages (repeated keys, deletes, equal times); at each upper, output
    // exactly the reference's rows (digested as the fact emitter does) and expect no violation;
    // then drop one row and expect one.
    use persist_playground::persist::codec::Codec;
    use persist_playground::upsert::reference::expected_at;
    use persist_playground::upsert::source::SourceMessage;
    use persist_playground::upsert::types::kv_row;
    let mut x: u64 = 0x9e37_79b9;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut msgs = Vec::new();
    let mut t = 0;
    for offset in 0..300 {
        t += next(3);
        let key = next(6) as i64;
        let value = (next(5) > 0).then(|| Ok(kv_row(key, &format!("v{offset}"))));
        msgs.push(SourceMessage {
            key,
            value,
            offset,
            ts: t,
        });
    }
    let digest_of = |rows: &[(persist_playground::upsert::types::SourceData, i64)]| -> std::collections::BTreeMap<u64, i64> {
        let mut m = std::collections::BTreeMap::new();
        for (r, n) in rows {
            let mut buf = Vec::new();
            r.encode(&mut buf);
            *m.entry(persist_playground::playground::fact::digest(&buf, &[])).or_insert(0) += n;
        }
        m
    };
    // The facts the scenario's upsert hub would log for these messages.
    let facts: Vec<MessageFact> = msgs
        .iter()
        .map(persist_playground::playground::actors::replica::message_fact)
        .collect();
    for broken in [false, true] {
        let mut h = History::new();
        h.fact(baseline(OUT, 1, 0, vec![]));
        h.fact(Fact::UpsertSource {
            upper: t + 1,
            messages: facts.clone(),
        });
        let mut held = std::collections::BTreeMap::new();
        let mut upper = 0;
        let mut seqno = 1;
        while upper <= t {
            let new_upper = upper + 1 + next(10);
            let want = digest_of(&expected_at(&msgs, new_upper));
            let mut updates = Vec::new();
            for (k, n) in &want {
                let have = held.get(k).copied().unwrap_or(0);
                if have != *n {
                    updates.push((*k, n - have));
                }
            }
            for (k, n) in &held {
                if !want.contains_key(k) {
                    updates.push((*k, -n));
                }
            }
            if broken && new_upper > t / 2 && !updates.is_empty() {
                updates.pop();
            }
            held = want;
            seqno += 1;
            h.fact(versions(
                OUT,
                vec![version(
                    seqno,
                    new_upper,
                    vec![batch(upper, new_upper, &updates)],
                )],
            ));
            upper = new_upper;
            if broken && upper > t / 2 {
                break;
            }
        }
        let r = h.rule("upsert-model");
        if broken {
            assert!(r.1 >= 1, "a dropped row is found: {r:?}");
        } else {
            assert_eq!(r.1, 0, "{:?}", h.report().violations);
            assert!(r.0 > 20, "checked at every upper: {r:?}");
        }
    }
}

#[test]
fn violations_cite_the_fault_events_beside_them() {
    let mut h = History::new();
    let long_ago = h.fact(Fact::Crash {
        process: "P1".into(),
    });
    h.at(30_000);
    h.fact(baseline("data", 1, 0, vec![]));
    let near = h.fact(Fact::FaultFired {
        service: "consensus".into(),
        op: "compare_and_set".into(),
        error: "timeout".into(),
        indeterminate: true,
    });
    h.by(Some("W1"), ack("data", 0, 10, vec![d("a")]));
    h.fact(versions(
        "data",
        vec![version(2, 10, vec![batch(0, 10, &[])])],
    ));
    let r = h.report();
    assert_eq!(r.violations.len(), 1);
    assert_eq!(r.violations[0].faults, vec![near]);
    assert!(!r.violations[0].faults.contains(&long_ago));
}

#[test]
fn the_report_keeps_a_bounded_number_of_violations_and_counts_all() {
    let mut h = History::new();
    h.fact(opened(1, 1, 100));
    for i in 0..200 {
        h.by(Some("O1"), ts(1, 500 + i, 1_000));
    }
    let r = h.report();
    assert_eq!(r.violations_total, 200);
    assert_eq!(
        r.violations.len(),
        persist_playground::playground::check::VIOLATIONS_KEPT
    );
    assert_eq!(r.violations.last().unwrap().seqs, vec![201]);
}
