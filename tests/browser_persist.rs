//! Persist over IndexedDB in headless Chrome, with the browser runtime (real timers).
//!
//! Every coverage claim here is forced by how the test is built, never hoped for from timing
//! (a fresh machine's first Chromium start is slow, and real timers race differently there):
//! - **races**: in every round all writers fetch the shard's upper (joined, so all hold the same
//!   one), then issue their compare_and_appends at it together (joined): exactly one wins each
//!   round and every other one answers `UpperMismatch`, behind seeded faults;
//! - **caller timeouts and crashes**: with the store made totally unavailable, a write under a
//!   caller's timeout cannot finish, so it times out; the writer is abandoned (a crash) and a new
//!   one opened once the store is back. The write must not be there;
//! - **a lost acknowledgement**: a compare_and_set that committed answers a timeout (scripted by
//!   [`LostAckConsensus`], armed for exactly one commit); the writer's retry finds its own
//!   idempotency token and reports success, and the write is there exactly once;
//! - a free-running phase of racing writers with random caller timeouts and crashes, checked only
//!   against the model of acknowledged and unreported writes (as in the native `persist_sim.rs`);
//! - then every handle and the connection are dropped, the database reopened through a new
//!   connection and a new client, and the shard is found intact.
#![cfg(target_arch = "wasm32")]

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use persist_playground::location::idb::IdbLocation;
use persist_playground::location::unreliable::{
    LostAckConsensus, UnreliableBlob, UnreliableConsensus, UnreliableHandle,
};
use persist_playground::location::{CaSResult, Location, PermanentKind};
use persist_playground::persist::error::PersistError;
use persist_playground::persist::read::ListenEvent;
use persist_playground::persist::write::WriteHandle;
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::browser::BrowserRuntime;
use persist_playground::runtime::Runtime;
use timely::progress::Antichain;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn f(t: u64) -> Antichain<u64> {
    Antichain::from_elem(t)
}

/// What the test knows about every write it issued.
#[derive(Default)]
struct Model {
    /// Acknowledged: present exactly once, at this time.
    acked: BTreeMap<String, u64>,
    /// Unreported (the caller gave up): present at most once.
    unknown: BTreeMap<String, u64>,
    /// Known never to have happened (every storage call failed): absent.
    absent: BTreeSet<String>,
    mismatches: u64,
}

fn cfg() -> PersistConfig {
    PersistConfig {
        backoff_min_ms: 1,
        backoff_max_ms: 20,
        ..PersistConfig::default()
    }
}

/// Checks a snapshot at `as_of` against the model: acked writes exactly once, unreported ones
/// at most once, absent ones never, nothing else. Returns how many unreported ones are present.
fn check(model: &Model, as_of: u64, snapshot: &[((String, ()), u64, i64)]) -> u64 {
    let mut seen: BTreeMap<&str, i64> = BTreeMap::new();
    for ((k, ()), _, d) in snapshot {
        *seen.entry(k).or_default() += d;
    }
    for (k, t) in &model.acked {
        let expected = i64::from(*t <= as_of);
        assert_eq!(
            seen.get(k.as_str()).copied().unwrap_or(0),
            expected,
            "acked {k}@{t}"
        );
    }
    let mut unknown_present = 0;
    for (k, d) in &seen {
        if model.acked.contains_key(*k) {
            continue;
        }
        assert!(
            !model.absent.contains(*k),
            "{k} never happened, yet is there"
        );
        assert!(model.unknown.contains_key(*k), "{k} was never written");
        assert_eq!(*d, 1, "{k} at most once");
        unknown_present += 1;
    }
    unknown_present
}

/// The lower of the next write of `handle` (its upper as it knows it).
fn lower(handle: &WriteHandle<String, ()>) -> u64 {
    *handle.upper().elements().first().unwrap()
}

/// One write of `key` at the handle's upper, bounded by `patience_ms`; recorded in the model.
/// Returns whether the caller gave up.
async fn write_one(
    rt: &Runtime,
    model: &RefCell<Model>,
    handle: &mut WriteHandle<String, ()>,
    key: String,
    patience_ms: u64,
) -> bool {
    let lo = lower(handle);
    let updates = vec![((key.clone(), ()), lo, 1i64)];
    let r = rt
        .timeout(
            patience_ms,
            handle.compare_and_append(&updates, f(lo), f(lo + 1)),
        )
        .await;
    let mut m = model.borrow_mut();
    match r {
        Ok(Ok(Ok(()))) => {
            m.acked.insert(key, lo);
            false
        }
        Ok(Ok(Err(_))) => {
            m.mismatches += 1;
            false
        }
        Ok(Err(e)) => panic!("{key}: {e}"),
        Err(_) => {
            m.unknown.insert(key, lo);
            true
        }
    }
}

#[wasm_bindgen_test]
async fn persist_over_indexeddb_races_faults_and_reopening() {
    let name = "test-persist-scenario";
    IdbLocation::delete_database(name).await.unwrap();
    let rt = BrowserRuntime::runtime();
    let shard = ShardId::new("s-browser").unwrap();
    let model = Rc::new(RefCell::new(Model::default()));
    let faults = UnreliableHandle::new(17, 0.9, 0.1);
    let final_as_of;
    {
        let idb = IdbLocation::open(name).await.unwrap();
        let location = Location {
            blob: Rc::new(UnreliableBlob::new(idb.blob(), faults.clone())),
            consensus: Rc::new(UnreliableConsensus::new(idb.consensus(), faults.clone())),
        };
        let client = PersistClient::new(location, rt.clone(), cfg(), 17);
        const WRITERS: usize = 3;
        let mut handles = Vec::new();
        for _ in 0..WRITERS {
            handles.push(client.open_writer::<String, ()>(&shard).await.unwrap());
        }

        // 1. Races, forced: same upper for all, compare_and_appends issued together.
        const ROUNDS: usize = 8;
        for round in 0..ROUNDS {
            let uppers = futures::future::join_all(
                handles
                    .iter_mut()
                    .map(|h| async move { h.fetch_recent_upper().await.clone() }),
            )
            .await;
            assert!(
                uppers.windows(2).all(|w| w[0] == w[1]),
                "round {round}: every writer holds the same upper {uppers:?}"
            );
            let acked_before = model.borrow().acked.len();
            let (rt, model) = (&rt, &model);
            futures::future::join_all(handles.iter_mut().enumerate().map(|(w, h)| async move {
                write_one(rt, model, h, format!("race{round}-w{w}"), 600_000).await
            }))
            .await;
            assert_eq!(
                model.borrow().acked.len(),
                acked_before + 1,
                "round {round}: exactly one writer won"
            );
        }
        assert_eq!(
            model.borrow().mismatches,
            ((WRITERS - 1) * ROUNDS) as u64,
            "every other writer of every round saw an upper mismatch"
        );

        // 2. A caller's timeout and a crash, forced: nothing can succeed while every storage call
        // fails, so the write times out; it never happened.
        faults.totally_unavailable();
        let faults_before = faults.counts().faults();
        let mut crashed = handles.pop().unwrap();
        let gave_up = write_one(&rt, &model, &mut crashed, "timed-out".into(), 50).await;
        assert!(
            gave_up,
            "the caller gave up on a write the store could not take"
        );
        assert!(faults.counts().faults() > faults_before, "faults fired");
        {
            let mut m = model.borrow_mut();
            m.unknown.remove("timed-out");
            m.absent.insert("timed-out".into());
        }
        crashed.abandon();
        faults.totally_available();
        handles.push(client.open_writer::<String, ()>(&shard).await.unwrap());

        // 3. A lost acknowledgement, forced: the commit happens, its caller hears a timeout,
        // and the retry with the same idempotency token finds it. A client of its own, with
        // maintenance off, so that the one compare_and_set armed to lose its acknowledgement is
        // the write's own.
        let lose_next = Rc::new(Cell::new(false));
        let lose = Rc::clone(&lose_next);
        let lost_ack = Rc::new(LostAckConsensus::new(idb.consensus(), move |_, result| {
            let hit = lose.get() && *result == Ok(CaSResult::Committed);
            if hit {
                lose.set(false);
            }
            hit
        }));
        let quiet = PersistConfig {
            compaction_enabled: false,
            rollup_threshold: 0,
            gc_enabled: false,
            ..cfg()
        };
        let lost_ack_location = Location {
            blob: idb.blob(),
            consensus: lost_ack.clone(),
        };
        let lost_ack_client = PersistClient::new(lost_ack_location, rt.clone(), quiet, 19);
        let mut h = lost_ack_client
            .open_writer::<String, ()>(&shard)
            .await
            .unwrap();
        lose_next.set(true);
        let gave_up = write_one(&rt, &model, &mut h, "lost-ack".into(), 600_000).await;
        assert!(!gave_up);
        assert_eq!(lost_ack.lost(), 1, "one acknowledgement was lost");
        assert!(
            model.borrow().acked.contains_key("lost-ack"),
            "the retry recognised its own commit"
        );
        h.expire().await;

        // 4. Free-running: racing writers, faults, impatient callers and crashes at random;
        // checked only against the model.
        faults.partially_available(0.9, 0.1);
        let mut tasks = Vec::new();
        for (w, mut handle) in handles.into_iter().enumerate() {
            let (client, rt, model, shard) =
                (client.clone(), rt.clone(), Rc::clone(&model), shard.clone());
            tasks.push(async move {
                for i in 0..8u64 {
                    // Every fifth call the caller gives up after a few milliseconds.
                    let patience = if (w as u64 + i) % 5 == 0 { 2 } else { 60_000 };
                    let key = format!("free-w{w}-{i}");
                    if write_one(&rt, &model, &mut handle, key, patience).await {
                        // Crash and reopen.
                        handle.abandon();
                        handle = client.open_writer(&shard).await.unwrap();
                    }
                }
                handle.expire().await;
            });
        }
        futures::future::join_all(tasks).await;
        faults.totally_available();
        let mut reader = client
            .open_leased_reader::<String, ()>(&shard)
            .await
            .unwrap();
        let upper = *client
            .inspect_state(&shard)
            .await
            .unwrap()
            .upper()
            .elements()
            .first()
            .unwrap();
        final_as_of = upper - 1;
        let snap = reader.snapshot_and_fetch(f(final_as_of)).await.unwrap();
        let m = model.borrow();
        let unknown_present = check(&m, final_as_of, &snap);
        console_log!(
            "persist over IndexedDB: {} acked, {} unreported ({unknown_present} of them landed), \
             {} mismatches, faults {:?}",
            m.acked.len(),
            m.unknown.len(),
            m.mismatches,
            faults.counts()
        );
        reader.expire().await;
        idb.close();
    }
    // Everything above is dropped: a new connection and a new client find the shard intact.
    let idb = IdbLocation::open(name).await.unwrap();
    let client = PersistClient::new(idb.location(), rt.clone(), cfg(), 18);
    let mut reader = client
        .open_leased_reader::<String, ()>(&shard)
        .await
        .unwrap();
    let snap = reader.snapshot_and_fetch(f(final_as_of)).await.unwrap();
    check(&model.borrow(), final_as_of, &snap);
    // And the shard still takes writes and serves listens.
    let mut writer = client.open_writer::<String, ()>(&shard).await.unwrap();
    let upper = *writer
        .fetch_recent_upper()
        .await
        .unwrap()
        .elements()
        .first()
        .unwrap();
    let listen_reader = client
        .open_leased_reader::<String, ()>(&shard)
        .await
        .unwrap();
    let mut listen = listen_reader.listen(f(upper - 1)).await.unwrap();
    writer
        .compare_and_append(
            &[(("after-reopen".to_string(), ()), upper, 1)],
            f(upper),
            f(upper + 1),
        )
        .await
        .unwrap()
        .unwrap();
    let mut got = Vec::new();
    while listen.frontier() != &f(upper + 1) {
        for e in listen.next().await.unwrap() {
            if let ListenEvent::Updates(u) = e {
                got.extend(u);
            }
        }
    }
    assert_eq!(got, vec![(("after-reopen".to_string(), ()), upper, 1)]);
}

/// A writer on its own database that has committed `n` batches. Its client runs no maintenance,
/// so the writer's own calls are the only ones its connection serves (a test decides when they
/// happen).
async fn writer_with_commits(
    name: &str,
    rt: &Runtime,
    n: u64,
) -> (IdbLocation, PersistClient, WriteHandle<String, ()>) {
    IdbLocation::delete_database(name).await.unwrap();
    let idb = IdbLocation::open(name).await.unwrap();
    let quiet = PersistConfig {
        compaction_enabled: false,
        rollup_threshold: 0,
        gc_enabled: false,
        ..cfg()
    };
    let client = PersistClient::new(idb.location(), rt.clone(), quiet, 23);
    let shard = ShardId::new("s-closing").unwrap();
    let mut writer = client.open_writer::<String, ()>(&shard).await.unwrap();
    for i in 0..n {
        let lo = lower(&writer);
        let updates = vec![((format!("k{i}"), ()), lo, 1i64)];
        writer
            .compare_and_append(&updates, f(lo), f(lo + 1))
            .await
            .unwrap()
            .unwrap();
    }
    (idb, client, writer)
}

/// The next write of `writer`, bounded by `bound_ms`: `None` if it did not answer in time.
async fn next_write(
    rt: &Runtime,
    writer: &mut WriteHandle<String, ()>,
    bound_ms: u64,
) -> Option<Result<(), PersistError>> {
    let lo = lower(writer);
    let updates = vec![(("next".to_string(), ()), lo, 1i64)];
    let r = rt
        .timeout(
            bound_ms,
            writer.compare_and_append(&updates, f(lo), f(lo + 1)),
        )
        .await
        .ok()?;
    Some(match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(mismatch)) => panic!("an upper mismatch: {mismatch:?}"),
        Err(e) => Err(e),
    })
}

#[wasm_bindgen_test]
async fn a_connection_closed_under_a_running_writer_is_a_permanent_error_at_once() {
    // Goal: a writer whose IndexedDB connection is closed for good while it runs answers a
    // typed permanent error in bounded time, never a spin at the back-off cap, and keeps
    // answering it at once. Method: a writer loop runs; once it has committed three batches,
    // the connection is closed under it (between two of its writes or during one: IndexedDB lets
    // a transaction in flight finish).
    let rt = BrowserRuntime::runtime();
    let (idb, _client, writer) = writer_with_commits("test-closed-under-writer", &rt, 1).await;
    let committed = Rc::new(Cell::new(0u32));
    let writer = Rc::new(RefCell::new(Some(writer)));
    let running = {
        let (rt, committed, writer) = (rt.clone(), Rc::clone(&committed), Rc::clone(&writer));
        async move {
            let mut w = writer.borrow_mut().take().unwrap();
            for _ in 0..1_000 {
                match next_write(&rt, &mut w, 30_000).await {
                    Some(Ok(())) => committed.set(committed.get() + 1),
                    other => {
                        *writer.borrow_mut() = Some(w);
                        return other;
                    }
                }
            }
            panic!("the writer never noticed the closed connection");
        }
    };
    let closer = {
        let (rt, committed, idb) = (rt.clone(), Rc::clone(&committed), idb.clone());
        async move {
            while committed.get() < 3 {
                rt.sleep(1).await;
            }
            idb.close();
        }
    };
    let (outcome, ()) = futures::join!(running, closer);
    let err = match outcome {
        Some(Err(e)) => e,
        other => panic!("expected a permanent error in bounded time, got {other:?}"),
    };
    let permanent = err.as_permanent().expect("a permanent error");
    assert_eq!(permanent.kind, PermanentKind::Closed, "{err}");
    assert!(err.to_string().contains("closed for good"), "{err}");
    // And at once from then on.
    let mut w = writer.borrow_mut().take().unwrap();
    for _ in 0..3 {
        match next_write(&rt, &mut w, 1_000).await {
            Some(Err(again)) => assert_eq!(again.as_permanent(), Some(permanent)),
            other => panic!("expected the same permanent error at once, got {other:?}"),
        }
    }
    console_log!(
        "closed under a running writer after {} commits: {err}",
        committed.get()
    );
}

#[wasm_bindgen_test]
async fn another_connections_reset_of_the_database_is_a_typed_error_in_bounded_time() {
    // Goal: another connection resets the database under a writer. Method, both ways a reset
    // goes, forced by the order of the calls (the writer's client runs no background work, so
    // the writer's own next call is the first its connection serves after the reset):
    // (1) the database is deleted and not created again: the connection steps aside, its one
    //     reopen finds nothing, and it is closed for good; the writer answers that permanent
    //     error at once;
    // (2) the database is deleted and created again: the connection reopens once into the new,
    //     empty database. Nothing from the writer's stale state may land there.
    //
    //     Persist then finds that the version its cache knew is gone and answers a permanent
    //     `Inconsistent` error ("the shard's state vanished") instead of writing a new chain.
    let rt = BrowserRuntime::runtime();
    for recreate in [false, true] {
        let name = if recreate {
            "test-reset-recreated"
        } else {
            "test-reset-deleted"
        };
        let (idb, _client, mut writer) = writer_with_commits(name, &rt, 3).await;
        IdbLocation::delete_database(name).await.unwrap();
        let other = if recreate {
            Some(IdbLocation::open(name).await.unwrap())
        } else {
            None
        };
        assert!(idb.is_closed(), "stepped aside for the deletion");
        let outcome = next_write(&rt, &mut writer, 5_000).await;
        match other {
            None => {
                let err = match outcome {
                    Some(Err(e)) => e,
                    other => panic!("expected a permanent error at once, got {other:?}"),
                };
                let permanent = err.as_permanent().expect("a permanent error");
                assert_eq!(idb.reopens(), 0);
                assert!(idb.is_closed_for_good());
                assert_eq!(permanent.kind, PermanentKind::Closed, "{err}");
                assert!(err.to_string().contains("no longer exists"), "{err}");
                console_log!("reset (deleted): {err}");
            }
            Some(other) => {
                assert_eq!(idb.reopens(), 1, "reopened into the new database");
                assert!(!idb.is_closed_for_good());
                assert_eq!(
                    other.consensus().list_keys().await.unwrap(),
                    Vec::<String>::new(),
                    "nothing from the stale state landed in the new database"
                );
                match outcome {
                    Some(Err(err)) => {
                        let permanent = err.as_permanent().expect("a permanent error");
                        assert_eq!(permanent.kind, PermanentKind::Inconsistent, "{err}");
                        assert!(err.to_string().contains("vanished"), "{err}");
                        console_log!("reset (recreated): {err}");
                    }
                    None => panic!(
                        "over the reset database the write kept retrying for 5 s instead of \
                         answering that the shard's state vanished"
                    ),
                    Some(Ok(())) => panic!("a write from stale state landed in the new database"),
                }
            }
        }
    }
}
