//! Browser tests of the durable timestamp oracle over IndexedDB, in headless Chrome
//! (`wasm-pack test --headless --chrome`), with real timers. Each test uses its own database,
//! deleted first, and every oracle instance its own connection (`IdbLocation::open` again):
//! - the conformance suite;
//! - restarts: instances crashed (dropped) after random work in the middle of an allocation,
//!   half of them with the allocation landed unheard (forced with a scripted lost
//!   acknowledgement, not by timing), then restarted over the same database; every timestamp
//!   checked, the key truncated, every durable write raising the upper by an interval;
//! - a second instance fences the first at its next allocation;
//! - two instances with `confirm_leadership` taking over from each other, passing a baton so
//!   that every takeover happens while the old instance is calling: no timestamp from either is
//!   ever below one the other handed out earlier;
//! - a connection closed under a running oracle, and another connection's reset of the
//!   database: typed permanent errors at the next call, the instance broken for good;
//! - what `confirm_leadership` costs per call (logged, not asserted: tests never assert on
//!   wall-clock time).
#![cfg(target_arch = "wasm32")]

use std::cell::Cell;
use std::rc::Rc;

use futures::StreamExt;
use persist_playground::location::idb::IdbLocation;
use persist_playground::location::unreliable::LostAckConsensus;
use persist_playground::location::{CaSResult, PermanentKind, SeqNo, SCAN_ALL};
use persist_playground::oracle::conformance::{timestamp_oracle_impl_test, History};
use persist_playground::oracle::{
    DurableOracleConfig, DurableRecord, DurableTimestampOracle, NowFn, OracleError,
    OracleEventKind, TimestampOracle,
};
use persist_playground::runtime::browser::BrowserRuntime;
use persist_playground::runtime::Runtime;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

const TIMELINE: &str = "epoch_ms";

fn key() -> String {
    DurableTimestampOracle::consensus_key(TIMELINE)
}

/// Opens an instance on a new connection to `db`.
async fn open_instance(
    db: &str,
    rt: &Runtime,
    config: &DurableOracleConfig,
) -> Result<(IdbLocation, DurableTimestampOracle), OracleError> {
    let loc = IdbLocation::open(db).await.expect("open the database");
    let oracle = DurableTimestampOracle::open(
        loc.consensus(),
        rt.clone(),
        NowFn::from_runtime(rt),
        0,
        config.clone(),
    )
    .await?;
    Ok((loc, oracle))
}

/// The stored head, through a connection of its own.
async fn stored(db: &str) -> (SeqNo, DurableRecord, usize) {
    let loc = IdbLocation::open(db).await.unwrap();
    let consensus = loc.consensus();
    let head = consensus
        .head(&key())
        .await
        .unwrap()
        .expect("the timeline exists");
    let versions = consensus
        .scan(&key(), SeqNo(0), SCAN_ALL)
        .await
        .unwrap()
        .len();
    loc.close();
    (
        head.seqno,
        DurableRecord::decode(&head.data).unwrap(),
        versions,
    )
}

struct Rng(Xoshiro256PlusPlus);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n.max(1)
    }
}

#[wasm_bindgen_test]
async fn idb_oracle_conformance() {
    let db = "test-oracle-conformance";
    IdbLocation::delete_database(db).await.unwrap();
    let rt = BrowserRuntime::runtime();
    let opened = Rc::new(Cell::new(0u32));
    let opened2 = Rc::clone(&opened);
    timestamp_oracle_impl_test(move |timeline, now, initially| {
        opened2.set(opened2.get() + 1);
        let rt = rt.clone();
        async move {
            let loc = IdbLocation::open(db).await.expect("open the database");
            let config = DurableOracleConfig::new(timeline).persist_interval_ms(2);
            let oracle =
                DurableTimestampOracle::open(loc.consensus(), rt, now, initially, config).await?;
            Ok(Rc::new(oracle) as Rc<dyn TimestampOracle>)
        }
    })
    .await
    .unwrap();
    assert!(opened.get() >= 10, "one connection per scenario");
}

/// The (seqno, durable upper) of every version an instance knows it wrote, from its events.
fn known_writes(oracle: &DurableTimestampOracle) -> Vec<(u64, u64)> {
    oracle
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            OracleEventKind::Opened {
                seqno,
                durable_upper,
                ..
            }
            | OracleEventKind::Allocated {
                seqno,
                durable_upper,
                ..
            }
            | OracleEventKind::AdoptedOwnWrite {
                seqno,
                durable_upper,
            } => Some((seqno, durable_upper)),
            _ => None,
        })
        .collect()
}

#[wasm_bindgen_test]
async fn idb_restarts_resume_above_every_timestamp() {
    // Goal: over IndexedDB and the browser's clock, no timestamp is handed out twice or below
    // an earlier one across restarts, reads never go back, the key does not grow, and every
    // durable write raises the stored upper by at least an interval. Method: eight instances one
    // after the other, each on a new connection, doing random calls; each is then crashed in the
    // middle of an allocation (an apply_write far ahead), forced rather than timed:
    // - even instances: the allocation is polled once (it starts its compare_and_set) and
    //   dropped;
    // - odd instances: the allocation's compare_and_set commits and its acknowledgement is lost
    //   (a scripted LostAckConsensus); the instance is dropped while it waits to re-read, so
    //   its write has landed unheard.
    let db = "test-oracle-restarts";
    IdbLocation::delete_database(db).await.unwrap();
    let rt = BrowserRuntime::runtime();
    let interval_ms = 20;
    let config = DurableOracleConfig::new(TIMELINE).persist_interval_ms(interval_ms);
    let history = History::new();
    let mut rng = Rng(Xoshiro256PlusPlus::seed_from_u64(4));
    let (mut cancelled, mut landed_unheard, mut opens) = (0, 0, 0u64);
    let mut writes: Vec<(u64, u64)> = Vec::new();
    let first_ms = rt.now_ms();
    for instance in 0..8u64 {
        let loc = IdbLocation::open(db).await.expect("open the database");
        // Armed only for the crash below; until then every acknowledgement arrives.
        let (lost_tx, lost_rx) = futures::channel::oneshot::channel::<()>();
        let lost_tx = Rc::new(Cell::new(Some(lost_tx)));
        let arm = Rc::new(Cell::new(false));
        let (arm2, lost_tx2) = (Rc::clone(&arm), Rc::clone(&lost_tx));
        let consensus = Rc::new(LostAckConsensus::new(loc.consensus(), move |_, result| {
            let hit = arm2.get() && *result == Ok(CaSResult::Committed);
            if hit {
                arm2.set(false);
                if let Some(tx) = lost_tx2.take() {
                    let _ = tx.send(());
                }
            }
            hit
        }));
        let oracle = DurableTimestampOracle::open(
            consensus.clone(),
            rt.clone(),
            NowFn::from_runtime(&rt),
            0,
            config.clone(),
        )
        .await
        .unwrap();
        opens += 1;
        for _ in 0..20 + rng.below(20) {
            match rng.below(4) {
                0 | 1 => {
                    let w = history.write_ts(instance, &oracle).await.unwrap();
                    history
                        .apply_write(instance, &oracle, w.timestamp)
                        .await
                        .unwrap();
                }
                2 => {
                    history.read_ts(instance, &oracle).await.unwrap();
                }
                _ => rt.sleep(rng.below(6)).await,
            }
        }
        // Crash in the middle of an allocation.
        let ahead = rt.now_ms() + 5 * interval_ms;
        let before = oracle.snapshot().seqno;
        let mut allocation = Box::pin(oracle.apply_write(ahead));
        if instance % 2 == 0 {
            assert!(
                futures::poll!(allocation.as_mut()).is_pending(),
                "an allocation waits for IndexedDB"
            );
        } else {
            arm.set(true);
            // SUBTLE: `select` polls the allocation first; once its compare_and_set has committed
            // and the acknowledgement is lost, the oracle waits out a back-off (at least 1 ms)
            // before re-reading, so the same poll finds `lost_rx` ready and the allocation is
            // dropped unheard.
            match futures::future::select(allocation.as_mut(), lost_rx).await {
                futures::future::Either::Right((Ok(()), _)) => {}
                _ => panic!("the allocation finished before its acknowledgement was lost"),
            }
            assert_eq!(consensus.lost(), 1);
        }
        drop(allocation);
        cancelled += 1;
        writes.extend(known_writes(&oracle));
        let (seqno, record, _) = stored(db).await;
        writes.push((seqno.0, record.upper));
        if seqno.0 > before {
            landed_unheard += 1;
        }
        drop(oracle);
        if instance % 2 == 0 {
            loc.close();
        }
    }
    let max_ts = history.max_handed_out().unwrap();
    let (seqno, record, _) = stored(db).await;
    assert!(max_ts < record.upper, "{max_ts} below the stored upper");

    // A last instance resumes above everything; the key holds one version.
    let (_loc, last) = open_instance(db, &rt, &config).await.unwrap();
    let read = history.read_ts(100, &last).await.unwrap();
    assert!(read >= max_ts);
    let w = history.write_ts(100, &last).await.unwrap();
    assert!(w.timestamp > max_ts);
    let violations = history.violations();
    assert!(violations.is_empty(), "{violations:#?}");
    let (_, _, versions) = stored(db).await;
    assert_eq!(versions, 1, "old versions were truncated");

    // Each durable write raises the stored upper by at least an interval: between two known
    // versions `g` seqnos apart, the upper rose by at least `g` intervals.
    writes.sort();
    writes.dedup();
    for pair in writes.windows(2) {
        let ((s0, u0), (s1, u1)) = (pair[0], pair[1]);
        assert!(s1 > s0, "one upper per seqno: {pair:?}");
        assert!(
            u1 - u0 >= (s1 - s0) * interval_ms,
            "versions {s0}..{s1} raised the upper by {} < {} intervals",
            u1 - u0,
            s1 - s0
        );
    }
    assert_eq!(writes.last().map(|w| w.0), Some(seqno.0));
    let durable_writes = seqno.0;
    let intervals = (max_ts - first_ms) / interval_ms + 1;
    web_sys::console::log_1(
        &format!(
            "oracle restarts over IndexedDB: {} calls, {durable_writes} durable writes for \
             {intervals} intervals of timestamps and {opens} starts; {cancelled} allocations \
             cancelled, {landed_unheard} of them landed unheard",
            history.calls().len()
        )
        .into(),
    );
    assert_eq!(cancelled, 8, "every instance crashed mid-allocation");
    assert!(
        landed_unheard >= 4,
        "every odd instance's allocation landed unheard: {landed_unheard}"
    );
}

#[wasm_bindgen_test]
async fn idb_second_instance_fences_the_first() {
    let db = "test-oracle-fencing";
    IdbLocation::delete_database(db).await.unwrap();
    let rt = BrowserRuntime::runtime();
    let config = DurableOracleConfig::new(TIMELINE).persist_interval_ms(1_000);
    let (_a_loc, a) = open_instance(db, &rt, &config).await.unwrap();
    let a1 = a.write_ts().await.unwrap().timestamp;
    let (_b_loc, b) = open_instance(db, &rt, &config).await.unwrap();
    assert_eq!((a.snapshot().epoch, b.snapshot().epoch), (1, 2));
    let b1 = b.write_ts().await.unwrap().timestamp;
    assert!(b1 > a1);
    // a's next allocation fails as fenced, and so does everything after it.
    let far = rt.now_ms() + 10_000;
    let err = a.apply_write(far).await.unwrap_err();
    assert!(
        matches!(
            err,
            OracleError::Fenced {
                epoch: 1,
                current_epoch: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(matches!(
        a.write_ts().await,
        Err(OracleError::Fenced { .. })
    ));
    assert!(matches!(a.read_ts().await, Err(OracleError::Fenced { .. })));
    assert!(b.write_ts().await.unwrap().timestamp > b1);

    // With confirm_leadership, an instance learns at its next call, window or not.
    let confirm = config.clone().confirm_leadership(true);
    let (_c_loc, c) = open_instance(db, &rt, &confirm).await.unwrap();
    c.write_ts().await.unwrap();
    let (_d_loc, d) = open_instance(db, &rt, &confirm).await.unwrap();
    d.write_ts().await.unwrap();
    assert!(matches!(
        c.write_ts().await,
        Err(OracleError::Fenced { .. })
    ));
    assert!(matches!(c.read_ts().await, Err(OracleError::Fenced { .. })));
    // b (no leadership check) still serves its window, and is fenced at its next allocation.
    assert!(b.write_ts().await.is_ok());
    let far = rt.now_ms() + 10_000;
    assert!(matches!(
        b.apply_write(far).await,
        Err(OracleError::Fenced { .. })
    ));
}

#[wasm_bindgen_test]
async fn idb_two_instances_with_confirm_leadership_never_go_below_each_other() {
    // Goal: two "tabs" keep taking a timeline over from each other through separate
    // connections; with confirm_leadership no timestamp from either is below one the other
    // handed out in a call that completed earlier. Method, forced by construction: the two
    // processes pass a baton. A process holding it opens an instance (fencing the other's),
    // completes CALLS calls, passes the baton on, and keeps calling until the other's next
    // instance fences it. So every takeover happens while the old instance is still calling,
    // every instance but the last is fenced, and each completes at least CALLS calls.
    const ROUNDS: u64 = 4;
    const CALLS: u64 = 15;
    let db = "test-oracle-takeovers";
    IdbLocation::delete_database(db).await.unwrap();
    let rt = BrowserRuntime::runtime();
    let config = DurableOracleConfig::new(TIMELINE)
        .persist_interval_ms(10)
        .confirm_leadership(true);
    let history = History::new();
    let (opens, fenced, completed) = (Cell::new(0u64), Cell::new(0u64), Cell::new(0u64));
    let (to_0, from_1) = futures::channel::mpsc::unbounded::<()>();
    let (to_1, from_0) = futures::channel::mpsc::unbounded::<()>();

    let process = |p: u64,
                   mut baton: futures::channel::mpsc::UnboundedReceiver<()>,
                   pass: futures::channel::mpsc::UnboundedSender<()>| {
        let (rt, config, history, opens, fenced, completed) =
            (&rt, &config, &history, &opens, &fenced, &completed);
        async move {
            let mut rng = Rng(Xoshiro256PlusPlus::seed_from_u64(p));
            for round in 0..ROUNDS {
                if (p, round) != (0, 0) {
                    baton
                        .next()
                        .await
                        .expect("the other process passes the baton");
                }
                let (_loc, oracle) = open_instance(db, rt, config).await.unwrap();
                opens.set(opens.get() + 1);
                let instance = opens.get();
                let last = (p, round) == (1, ROUNDS - 1);
                let mut calls = 0u64;
                loop {
                    let result = match rng.below(3) {
                        0 => history.read_ts(instance, &oracle).await.map(|_| ()),
                        _ => match history.write_ts(instance, &oracle).await {
                            Ok(w) => history.apply_write(instance, &oracle, w.timestamp).await,
                            Err(err) => Err(err),
                        },
                    };
                    match result {
                        Ok(()) => {
                            calls += 1;
                            completed.set(completed.get() + 1);
                            if calls == CALLS {
                                if last {
                                    break;
                                }
                                pass.unbounded_send(()).unwrap();
                            }
                        }
                        Err(OracleError::Fenced { .. }) => {
                            assert!(calls >= CALLS, "fenced only after passing the baton");
                            fenced.set(fenced.get() + 1);
                            break;
                        }
                        Err(err) => panic!("process {p}: {err}"),
                    }
                    if rng.below(4) == 0 {
                        rt.sleep(rng.below(3)).await;
                    }
                }
            }
        }
    };
    futures::join!(process(0, from_1, to_1), process(1, from_0, to_0));

    let violations = history.violations();
    assert!(violations.is_empty(), "{violations:#?}");
    web_sys::console::log_1(
        &format!(
            "oracle takeovers over IndexedDB: {} starts, {} fenced, {} calls completed",
            opens.get(),
            fenced.get(),
            completed.get()
        )
        .into(),
    );
    assert_eq!(opens.get(), 2 * ROUNDS, "takeovers happened");
    assert_eq!(
        fenced.get(),
        2 * ROUNDS - 1,
        "every instance but the last was fenced"
    );
    assert!(completed.get() >= 2 * ROUNDS * CALLS);
}

#[wasm_bindgen_test]
async fn idb_confirm_leadership_cost_is_one_read_per_call() {
    // Goal: show the trade-off in the module docs. Method: write_ts + read_ts pairs with and
    // without the leadership check, in one window (no allocation); count the Consensus reads and
    // log the time per call.
    let db = "test-oracle-confirm-cost";
    IdbLocation::delete_database(db).await.unwrap();
    let rt = BrowserRuntime::runtime();
    let mut per_call_ms = Vec::new();
    for confirm in [false, true] {
        // Date.now() counts whole milliseconds: many more calls from memory.
        let calls: u64 = if confirm { 500 } else { 50_000 };
        let config = DurableOracleConfig::new(TIMELINE)
            .persist_interval_ms(3_600_000)
            .confirm_leadership(confirm);
        let (_loc, oracle) = open_instance(db, &rt, &config).await.unwrap();
        // A new timeline starts at `initially` (0): its first write_ts at the browser's clock
        // needs a window of its own. Take it before measuring.
        oracle.write_ts().await.unwrap();
        let before = oracle.stats();
        let start = js_sys::Date::now();
        for _ in 0..calls {
            oracle.write_ts().await.unwrap();
            oracle.read_ts().await.unwrap();
        }
        per_call_ms.push((js_sys::Date::now() - start) / (2 * calls) as f64);
        let stats = oracle.stats();
        assert_eq!(
            stats.durable_writes, before.durable_writes,
            "one window served every call"
        );
        assert_eq!(
            stats.leadership_checks - before.leadership_checks,
            if confirm { 2 * calls } else { 0 },
            "one Consensus read per call with the check, none without"
        );
    }
    web_sys::console::log_1(
        &format!(
            "oracle over IndexedDB, per write_ts/read_ts call: {:.2} us from memory, {:.3} ms \
             with confirm_leadership",
            per_call_ms[0] * 1_000.0,
            per_call_ms[1]
        )
        .into(),
    );
}

#[wasm_bindgen_test]
async fn idb_a_connection_closed_under_a_running_oracle_is_a_permanent_error_at_once() {
    // Goal: an oracle whose connection is closed for good while it allocates windows answers
    // OracleError::Storage (kind Closed) in bounded time, never retrying at its back-off cap,
    // and is broken from then on. Method: a loop of write_ts and apply_write with a 1 ms window,
    // so that nearly every call allocates; after ten calls the connection is closed under it.
    let db = "test-oracle-closed-under";
    IdbLocation::delete_database(db).await.unwrap();
    let rt = BrowserRuntime::runtime();
    let config = DurableOracleConfig::new(TIMELINE).persist_interval_ms(1);
    let (loc, oracle) = open_instance(db, &rt, &config).await.unwrap();
    let mut calls = 0;
    let err = loop {
        if calls == 10 {
            loc.close();
        }
        let call = async {
            let w = oracle.write_ts().await?;
            oracle.apply_write(w.timestamp).await
        };
        match rt.timeout(10_000, call).await {
            Ok(Ok(())) => calls += 1,
            Ok(Err(err)) => break err,
            Err(elapsed) => panic!("no answer in bounded time: {elapsed}"),
        }
        assert!(calls <= 10, "a call after the close succeeded");
    };
    assert!(
        matches!(&err, OracleError::Storage { source, .. } if source.kind == PermanentKind::Closed),
        "{err:?}"
    );
    assert!(err.is_permanent());
    assert_eq!(oracle.broken(), Some(err.clone()));
    assert_eq!(oracle.read_ts().await.unwrap_err(), err, "broken for good");
    assert_eq!(oracle.stats().storage_retries, 0, "nothing was retried");
}

#[wasm_bindgen_test]
async fn idb_another_connections_reset_of_the_database_breaks_the_oracle() {
    // Goal: another connection resets the database under a running oracle (with the leadership
    // check, so its next call reads the store). Deleted and created again: the connection
    // reopens once into the new database, where the oracle's record is gone: Inconsistent
    // ("vanished"). Deleted only: the reopen finds nothing: Storage (kind Closed). Either is a
    // typed, permanent error at the next call.
    let rt = BrowserRuntime::runtime();
    for recreate in [true, false] {
        let db = if recreate {
            "test-oracle-reset-recreated"
        } else {
            "test-oracle-reset-deleted"
        };
        IdbLocation::delete_database(db).await.unwrap();
        let config = DurableOracleConfig::new(TIMELINE).confirm_leadership(true);
        let (loc, oracle) = open_instance(db, &rt, &config).await.unwrap();
        oracle.write_ts().await.unwrap();
        IdbLocation::delete_database(db).await.unwrap();
        let other = if recreate {
            Some(IdbLocation::open(db).await.unwrap())
        } else {
            None
        };
        let err = rt
            .timeout(10_000, oracle.read_ts())
            .await
            .expect("an answer in bounded time")
            .unwrap_err();
        assert!(err.is_permanent(), "{err:?}");
        if recreate {
            assert_eq!(loc.reopens(), 1);
            assert!(
                matches!(&err, OracleError::Inconsistent { reason, .. } if reason.contains("vanished")),
                "{err:?}"
            );
            let keys = other.unwrap().consensus().list_keys().await.unwrap();
            assert!(
                keys.is_empty(),
                "nothing written to the new database: {keys:?}"
            );
        } else {
            assert!(loc.is_closed_for_good());
            assert!(
                matches!(&err, OracleError::Storage { source, .. } if source.kind == PermanentKind::Closed),
                "{err:?}"
            );
        }
        assert_eq!(oracle.write_ts().await.unwrap_err(), err, "broken for good");
    }
}
