//! Two differential write tasks racing on one shard, over IndexedDB in headless Chrome, with the
//! browser runtime's real timers (`wasm-pack test --headless --chrome`).
//!
//! Method: each task has its own IndexedDB connection and persist client (two processes sharing
//! one database) and its own desired collection; both tick every 100 ms, so each one's tick finds
//! the upper the other moved, re-syncs and writes its own desired back. Commands keep arriving
//! while they race. Checked: every responder is answered; each task's events follow the loop's
//! grammar; mismatches and re-syncs happened; and, replaying the shard's history from IndexedDB
//! ([`audit_commits`]), after every commit the shard equalled the committing task's desired.
//!
//! The race is forced by construction, not by the timers: both tasks start believing the
//! shard's upper is 0 and each gets a command before it runs, so each one's first write is a
//! compare_and_append at 0 carrying its rows. Exactly one of them can commit at 0; the other
//! answers an upper mismatch and re-syncs. Later rounds race as the real timers make them.
#![cfg(target_arch = "wasm32")]

use futures::channel::oneshot;
use persist_playground::location::idb::IdbLocation;
use persist_playground::location::PermanentKind;
use persist_playground::persist::codec::{Datum, Row};
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::browser::BrowserRuntime;
use persist_playground::runtime::Runtime;
use persist_playground::write_task::audit::audit_commits;
use persist_playground::write_task::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

type Answer = oneshot::Receiver<Result<(), WriteTaskError>>;

fn row(k: i64) -> Row {
    Row::new([Datum::Int(k), Datum::String(format!("row {k}"))])
}

fn persist_cfg() -> PersistConfig {
    PersistConfig {
        backoff_min_ms: 1,
        backoff_max_ms: 20,
        reader_lease_duration_ms: 3_600_000,
        ..PersistConfig::default()
    }
}

fn task_cfg(rt: &Runtime, log: &WriteTaskLog) -> WriteTaskConfig {
    WriteTaskConfig {
        runtime: rt.clone(),
        upper_tick_interval_ms: 100,
        batch_duration_ms: 20,
        retry: RetryPolicy {
            initial_backoff_ms: 5,
            factor_percent: 125,
            clamp_backoff_ms: 50,
            max_tries: 20,
        },
        attempt_timeout_ms: 5_000,
        log: log.clone(),
    }
}

fn send(tx: &CommandSender, op: StorageWriteOp, answers: &mut Vec<Answer>) {
    let (resp_tx, resp_rx) = oneshot::channel();
    tx.unbounded_send((op, resp_tx)).expect("the task runs");
    answers.push(resp_rx);
}

/// A task `id` on its own connection to the database `name` and its own persist client (a
/// process of its own), writing `shard`. Returns the connection too.
async fn spawn_task(
    rt: &Runtime,
    name: &str,
    shard: &ShardId,
    id: &str,
    seed: u64,
    log: &WriteTaskLog,
) -> (
    IdbLocation,
    CommandSender,
    persist_playground::runtime::JoinHandle<()>,
    oneshot::Sender<()>,
) {
    let db = IdbLocation::open(name).await.unwrap();
    let client = PersistClient::new(db.location(), rt.clone(), persist_cfg(), seed);
    let write = client.open_writer::<Row, ()>(shard).await.unwrap();
    let (c, s) = (client.clone(), shard.clone());
    let read_handle_fn = move || -> ReadHandleFuture {
        let (c, s) = (c.clone(), s.clone());
        Box::pin(async move { c.open_leased_reader::<Row, ()>(&s).await })
    };
    let (tx, handle, shutdown) = DifferentialWriteTask::spawn(
        id,
        write,
        read_handle_fn,
        false,
        now_fn(rt),
        DifferentialIntrospectionConfig::default(),
        task_cfg(rt, log),
    )
    .unwrap();
    (db, tx, handle, shutdown)
}

#[wasm_bindgen_test]
async fn two_write_tasks_race_over_indexeddb() {
    let name = "test-write-task-race";
    IdbLocation::delete_database(name).await.unwrap();
    let rt = BrowserRuntime::runtime();
    let shard = ShardId::new("mz_race").unwrap();
    let log = WriteTaskLog::new();

    // The checker's reader opens first and holds the since at 0 for the audit.
    let checker_db = IdbLocation::open(name).await.unwrap();
    let checker = PersistClient::new(checker_db.location(), rt.clone(), persist_cfg(), 100);
    let audit_reader = checker.open_leased_reader::<Row, ()>(&shard).await.unwrap();

    let mut tasks = Vec::new();
    let mut answers = Vec::new();
    let mut dbs = Vec::new();
    for i in 0..2i64 {
        let id = format!("task{i}");
        let (db, tx, handle, shutdown) =
            spawn_task(&rt, name, &shard, &id, 1 + i as u64, &log).await;
        dbs.push(db);
        // Different desired collections: each task its own rows.
        let updates = (0..4).map(|j| (row(100 * i + j), 1)).collect();
        send(&tx, StorageWriteOp::Append { updates }, &mut answers);
        tasks.push((tx, handle, shutdown));
    }

    // They race; commands keep coming.
    for round in 0..6i64 {
        rt.sleep(250).await;
        let (tx, _, _) = &tasks[(round % 2) as usize];
        let k = 100 * (round % 2) + 10 + round;
        send(
            tx,
            StorageWriteOp::Append {
                updates: vec![(row(k), 1)],
            },
            &mut answers,
        );
        if round == 3 {
            send(
                tx,
                StorageWriteOp::Delete {
                    filter: Box::new(
                        |r| matches!(r.0.first(), Some(Datum::Int(k)) if k % 100 == 0),
                    ),
                },
                &mut answers,
            );
        }
    }
    rt.sleep(500).await;

    // Shut both down and wait for them to end.
    let mut keep = Vec::new();
    for (tx, handle, shutdown) in tasks {
        shutdown.send(()).unwrap();
        keep.push((tx, handle));
    }
    let ended = |log: &WriteTaskLog| {
        log.events()
            .iter()
            .filter(|e| matches!(e.kind, WriteTaskEventKind::Ended { .. }))
            .count()
    };
    rt.timeout(10_000, async {
        while ended(&log) < 2 {
            rt.sleep(20).await;
        }
    })
    .await
    .expect("both tasks end after shutdown");

    for mut rx in answers {
        match rx.try_recv() {
            Ok(Some(Ok(()))) | Ok(Some(Err(WriteTaskError::InvalidUppers { .. }))) => {}
            other => panic!("unexpected answer {other:?}"),
        }
    }
    let (mut mismatches, mut resyncs) = (0, 0);
    for i in 0..2 {
        let events = events_of(&log, &format!("task{i}"));
        check_event_order(&events, true).unwrap();
        mismatches += events
            .iter()
            .filter(|e| matches!(e.kind, WriteTaskEventKind::Mismatch { .. }))
            .count();
        resyncs += events
            .iter()
            .filter(|e| matches!(e.kind, WriteTaskEventKind::Resynced { .. }))
            .count();
    }
    assert!(mismatches > 0, "the tasks raced");
    assert!(resyncs > 0, "and re-synced");
    // The forced part of the race: one commit at 0, and at least one write at 0 lost.
    let events = log.events();
    let committed_at_0 = events
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                WriteTaskEventKind::Committed {
                    expected_upper: Some(0),
                    updates: 1..,
                    ..
                }
            )
        })
        .count();
    let mismatched_at_0 = events
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                WriteTaskEventKind::Mismatch {
                    expected_upper: Some(0),
                    ..
                }
            )
        })
        .count();
    assert_eq!(
        committed_at_0, 1,
        "exactly one first write, with its rows, won at 0"
    );
    assert!(mismatched_at_0 >= 1, "the other first write lost at 0");

    let report = audit_commits(audit_reader, &log.events()).await.unwrap();
    assert!(report.failures.is_empty(), "{:#?}", report.failures);
    assert!(report.commits_with_data >= 1, "{report:?}");
    web_sys::console::log_1(
        &format!(
            "write task race over IndexedDB: {} commits ({} with data), {mismatches} mismatches, {resyncs} re-syncs",
            report.commits, report.commits_with_data
        )
        .into(),
    );
    drop(keep);
    drop(dbs);
    checker_db.close();
}

#[wasm_bindgen_test]
async fn a_connection_closed_under_a_running_write_task_ends_it_with_a_typed_error() {
    // Goal: a write task whose IndexedDB connection is closed for good while it runs answers
    // the command in flight, and every queued one, with ShardBroken (kind Closed) in bounded
    // time, ends, and writes nothing more. Method: the task commits a first command; the
    // connection is closed; two more commands follow.
    let name = "test-write-task-closed";
    IdbLocation::delete_database(name).await.unwrap();
    let rt = BrowserRuntime::runtime();
    let shard = ShardId::new("mz_closed").unwrap();
    let log = WriteTaskLog::new();
    let (db, tx, _handle, _shutdown) = spawn_task(&rt, name, &shard, "closed", 5, &log).await;
    let mut first = Vec::new();
    send(
        &tx,
        StorageWriteOp::Append {
            updates: vec![(row(1), 1)],
        },
        &mut first,
    );
    let answer = rt.timeout(10_000, first.pop().unwrap()).await;
    assert_eq!(answer, Ok(Ok(Ok(()))), "the first command committed");
    db.close();
    let mut answers = Vec::new();
    for k in 2..4 {
        send(
            &tx,
            StorageWriteOp::Append {
                updates: vec![(row(k), 1)],
            },
            &mut answers,
        );
    }
    for rx in answers {
        let answer = rt
            .timeout(10_000, rx)
            .await
            .expect("an answer in bounded time")
            .expect("answered, not dropped");
        assert!(
            matches!(&answer, Err(WriteTaskError::ShardBroken { error, .. }) if error.kind == PermanentKind::Closed),
            "{answer:?}"
        );
    }
    let events = events_of(&log, "closed");
    check_event_order(&events, true).unwrap();
    assert!(
        matches!(&events.last().unwrap().kind, WriteTaskEventKind::Ended { reason } if reason.contains("broken for good")),
        "{:?}",
        events.last()
    );
    let commits = |events: &[WriteTaskEvent]| {
        events
            .iter()
            .filter(|e| matches!(e.kind, WriteTaskEventKind::Committed { .. }))
            .count()
    };
    let before = commits(&events);
    rt.sleep(300).await;
    assert_eq!(commits(&events_of(&log, "closed")), before, "nothing more");
}
