//! Browser tests of the durable timestamp oracle over IndexedDB, in headless Chrome
//! (`wasm-pack test --headless --chrome`), with real timers. Each test uses its own database,
//! deleted first, and every oracle instance its own connection (`IdbLocation::open` again):
//! - the conformance suite;
//! - restarts: instances crashed (dropped) after random work, some in the middle of an
//!   allocation, then restarted over the same database; every timestamp checked, the key
//!   truncated, durable writes bounded;
//! - a second instance fences the first at its next allocation;
//! - two instances with `confirm_leadership` taking over from each other: no timestamp from
//!   either is ever below one the other handed out earlier;
//! - what `confirm_leadership` costs per call (logged, not asserted: tests never assert on
//!   wall-clock time).
#![cfg(target_arch = "wasm32")]

use std::cell::Cell;
use std::rc::Rc;

use persist_playground::location::idb::IdbLocation;
use persist_playground::location::{SeqNo, SCAN_ALL};
use persist_playground::oracle::conformance::{timestamp_oracle_impl_test, History};
use persist_playground::oracle::{
    DurableOracleConfig, DurableRecord, DurableTimestampOracle, NowFn, OracleError, TimestampOracle,
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

#[wasm_bindgen_test]
async fn idb_restarts_resume_above_every_timestamp() {
    // Goal: over IndexedDB and the browser's clock, no timestamp is handed out twice or below
    // an earlier one across restarts, reads never go back, the key does not grow, and durable
    // writes stay about one per interval. Method: eight instances one after the other, each on a
    // new connection, doing random calls; most are dropped in the middle of an allocation (an
    // apply_write far ahead, cancelled by a short timeout), some with their write landed.
    let db = "test-oracle-restarts";
    IdbLocation::delete_database(db).await.unwrap();
    let rt = BrowserRuntime::runtime();
    let interval_ms = 20;
    let config = DurableOracleConfig::new(TIMELINE).persist_interval_ms(interval_ms);
    let history = History::new();
    let mut rng = Rng(Xoshiro256PlusPlus::seed_from_u64(4));
    let (mut cancelled, mut landed_unheard, mut opens) = (0, 0, 0u64);
    let first_ms = rt.now_ms();
    for instance in 0..8u64 {
        let (loc, oracle) = open_instance(db, &rt, &config).await.unwrap();
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
        if rt
            .timeout(rng.below(3), oracle.apply_write(ahead))
            .await
            .is_err()
        {
            cancelled += 1;
            let (seqno, _, _) = stored(db).await;
            if seqno.0 > before {
                landed_unheard += 1;
            }
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

    // Each durable write raises the stored upper by at least an interval; and with the clock
    // driving timestamps, there are about as many as intervals elapsed, plus one per start.
    let durable_writes = seqno.0;
    let intervals = (max_ts - first_ms) / interval_ms + 1;
    assert!(
        durable_writes <= intervals + 2 * opens + 2,
        "{durable_writes} durable writes for {intervals} intervals and {opens} starts"
    );
    web_sys::console::log_1(
        &format!(
            "oracle restarts over IndexedDB: {} calls, {durable_writes} durable writes for \
             {intervals} intervals of timestamps and {opens} starts; {cancelled} allocations \
             cancelled, {landed_unheard} of them landed unheard",
            history.calls().len()
        )
        .into(),
    );
    assert!(cancelled > 0, "allocations were cancelled mid-way");
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
    // handed out in a call that completed earlier. Method: two processes run concurrently for
    // about 1.5 s; each opens an instance, calls it until fenced, pauses, and takes over again.
    let db = "test-oracle-takeovers";
    IdbLocation::delete_database(db).await.unwrap();
    let rt = BrowserRuntime::runtime();
    let config = DurableOracleConfig::new(TIMELINE)
        .persist_interval_ms(10)
        .confirm_leadership(true);
    let history = History::new();
    let deadline = rt.now_ms() + 1_500;
    let (opens, fenced) = (Cell::new(0u64), Cell::new(0u64));

    let process = |p: u64| {
        let (rt, config, history, opens, fenced) = (&rt, &config, &history, &opens, &fenced);
        async move {
            let mut rng = Rng(Xoshiro256PlusPlus::seed_from_u64(p));
            rt.sleep(rng.below(20)).await;
            while rt.now_ms() < deadline {
                let (_loc, oracle) = open_instance(db, rt, config).await.unwrap();
                opens.set(opens.get() + 1);
                let instance = opens.get();
                loop {
                    if rt.now_ms() >= deadline {
                        return;
                    }
                    let result = match rng.below(3) {
                        0 => history.read_ts(instance, &oracle).await.map(|_| ()),
                        _ => match history.write_ts(instance, &oracle).await {
                            Ok(w) => history.apply_write(instance, &oracle, w.timestamp).await,
                            Err(err) => Err(err),
                        },
                    };
                    match result {
                        Ok(()) => {}
                        Err(OracleError::Fenced { .. }) => {
                            fenced.set(fenced.get() + 1);
                            break;
                        }
                        Err(err) => panic!("process {p}: {err}"),
                    }
                    if rng.below(4) == 0 {
                        rt.sleep(rng.below(3)).await;
                    }
                }
                rt.sleep(20 + rng.below(60)).await;
            }
        }
    };
    futures::join!(process(0), process(1));

    let violations = history.violations();
    assert!(violations.is_empty(), "{violations:#?}");
    let calls = history.calls();
    let completed = calls.iter().filter(|c| c.responded.is_some()).count();
    web_sys::console::log_1(
        &format!(
            "oracle takeovers over IndexedDB: {} starts, {} fenced, {completed} calls completed",
            opens.get(),
            fenced.get()
        )
        .into(),
    );
    assert!(opens.get() > 4, "takeovers happened: {}", opens.get());
    assert!(fenced.get() > 2, "instances were fenced: {}", fenced.get());
    assert!(completed > 100);
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
