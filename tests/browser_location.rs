//! Browser tests of the location layer over IndexedDB, in headless Chrome
//! (`wasm-pack test --headless --chrome`). Each test uses its own database, deleted first.
//!
//! - the Blob and Consensus conformance suites, every call of the suite on a new connection;
//! - data written through one connection, found after closing it and opening another;
//! - foreign or corrupted records give determinate errors with messages, never a panic;
//! - a connection closed by its owner fails every call at once, for good;
//! - a connection steps aside on `versionchange` (another connection deletes, resets or
//!   upgrades the database) and reopens once if the database still exists: after a deletion it
//!   is closed for good, after a reset it reopens into the new database, after an upgrade by
//!   newer code it is closed for good;
//! - several compare_and_set chains racing on one key through separate connections;
//! - the browser runtime's timers, timeouts and abort-on-drop, and the simulator under wasm32.
#![cfg(target_arch = "wasm32")]

use std::cell::Cell;
use std::rc::Rc;

use bytes::Bytes;
use js_sys::{Array, Uint8Array};
use persist_playground::location::conformance::{blob_impl_test, consensus_impl_test};
use persist_playground::location::idb::IdbLocation;
use persist_playground::location::{
    BrokenAt, CaSResult, ExternalError, PermanentKind, SeqNo, VersionedData, SCAN_ALL,
};
use persist_playground::runtime::browser::BrowserRuntime;
use persist_playground::runtime::sim::Simulator;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

async fn fresh(name: &str) -> IdbLocation {
    IdbLocation::delete_database(name).await.unwrap();
    IdbLocation::open(name).await.unwrap()
}

fn vd(seqno: u64, data: &str) -> VersionedData {
    VersionedData {
        seqno: SeqNo(seqno),
        data: Bytes::copy_from_slice(data.as_bytes()),
    }
}

#[wasm_bindgen_test]
async fn idb_blob_conformance() {
    let name = "test-blob-conformance";
    drop(fresh(name).await);
    let opened = Rc::new(Cell::new(0));
    let opened2 = Rc::clone(&opened);
    blob_impl_test(move || {
        opened2.set(opened2.get() + 1);
        async move { Ok(IdbLocation::open(name).await?.blob()) }
    })
    .await
    .unwrap();
    assert!(opened.get() >= 2, "the suite used more than one connection");
}

#[wasm_bindgen_test]
async fn idb_consensus_conformance() {
    let name = "test-consensus-conformance";
    drop(fresh(name).await);
    consensus_impl_test(move || async move { Ok(IdbLocation::open(name).await?.consensus()) })
        .await
        .unwrap();
}

#[wasm_bindgen_test]
async fn idb_data_survives_closing_and_reopening() {
    let name = "test-reopen";
    let first = fresh(name).await;
    let consensus = first.consensus();
    for s in 1..=5 {
        let expected = (s > 1).then(|| SeqNo(s - 1));
        let r = consensus
            .compare_and_set("shard", expected, vd(s, &format!("state {s}")))
            .await
            .unwrap();
        assert_eq!(r, CaSResult::Committed);
    }
    first
        .blob()
        .set("shard/part", Bytes::from_static(b"abc"))
        .await
        .unwrap();
    first.close();
    assert!(first.is_closed());
    let err = first.consensus().head("shard").await.unwrap_err();
    assert!(err.to_string().contains("closed"), "{err}");

    let second = IdbLocation::open(name).await.unwrap();
    assert_eq!(
        second.consensus().head("shard").await.unwrap(),
        Some(vd(5, "state 5"))
    );
    let all = second
        .consensus()
        .scan("shard", SeqNo(0), SCAN_ALL)
        .await
        .unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(
        second.blob().get("shard/part").await.unwrap(),
        Some(Bytes::from_static(b"abc"))
    );
}

#[wasm_bindgen_test]
async fn idb_foreign_or_corrupted_records_are_errors_not_panics() {
    let name = "test-corrupted";
    let loc = fresh(name).await;
    // A value that is not bytes, under a well-formed consensus key.
    let key: JsValue = Array::of2(&"shard".into(), &"00000000000000000001".into()).into();
    loc.put_raw("consensus", &key, &JsValue::from_str("not bytes"))
        .await
        .unwrap();
    let err = loc.consensus().head("shard").await.unwrap_err();
    assert!(matches!(err, ExternalError::Determinate(_)), "{err:?}");
    assert!(err.to_string().contains("not bytes"), "{err}");
    let err = loc
        .consensus()
        .scan("shard", SeqNo(0), SCAN_ALL)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not bytes"), "{err}");
    // compare_and_set reads only the head's seqno (data is opaque to Consensus), so it can write
    // past a corrupted version; the new head then reads fine, and a scan still reports v1.
    let r = loc
        .consensus()
        .compare_and_set("shard", Some(SeqNo(1)), vd(2, "x"))
        .await
        .unwrap();
    assert_eq!(r, CaSResult::Committed);
    assert_eq!(
        loc.consensus().head("shard").await.unwrap(),
        Some(vd(2, "x"))
    );
    assert!(loc
        .consensus()
        .scan("shard", SeqNo(0), SCAN_ALL)
        .await
        .is_err());

    // A key of the wrong shape (a seqno that is not 20 digits) in the consensus store.
    let bad_key: JsValue = Array::of2(&"other".into(), &"12".into()).into();
    loc.put_raw("consensus", &bad_key, &Uint8Array::from(&b"x"[..]).into())
        .await
        .unwrap();
    let err = loc.consensus().list_keys().await.unwrap_err();
    assert!(err.to_string().contains("wrong shape"), "{err}");
    // A key that is not even an array.
    loc.put_raw(
        "consensus",
        &JsValue::from_f64(7.0),
        &Uint8Array::from(&b"x"[..]).into(),
    )
    .await
    .unwrap();
    assert!(loc.consensus().list_keys().await.is_err());

    // A blob that is a number rather than bytes.
    loc.put_raw("blob", &"shard/part".into(), &JsValue::from_f64(42.0))
        .await
        .unwrap();
    let err = loc.blob().get("shard/part").await.unwrap_err();
    assert!(err.to_string().contains("not bytes"), "{err}");
    let mut listed = 0;
    assert!(loc
        .blob()
        .list_keys_and_metadata("", &mut |_| listed += 1)
        .await
        .is_err());
    // An ArrayBuffer (as another program might store) is accepted as bytes.
    let buf = Uint8Array::from(&b"raw"[..]).buffer();
    loc.put_raw("blob", &"shard/buf".into(), &buf.into())
        .await
        .unwrap();
    assert_eq!(
        loc.blob().get("shard/buf").await.unwrap(),
        Some(Bytes::from_static(b"raw"))
    );
    // Unknown store names are refused.
    assert!(loc.put_raw("nope", &"k".into(), &"v".into()).await.is_err());
}

/// Whether `err` is the permanent error of a connection closed for good, naming the store.
fn closed_for_good(err: &ExternalError) -> bool {
    matches!(
        err.as_permanent(),
        Some(p) if p.kind == PermanentKind::Closed
            && p.at == BrokenAt::Store
            && p.shard.starts_with("indexeddb ")
            && p.detail.contains("connection closed for good")
    )
}

/// Opens `name` at `version` through the raw factory, as newer code of the page would, and
/// returns the connection once the open succeeded.
async fn open_raw(name: &str, version: u32) -> web_sys::IdbDatabase {
    let factory = web_sys::window().unwrap().indexed_db().unwrap().unwrap();
    let req = factory.open_with_u32(name, version).unwrap();
    let done = js_sys::Promise::new(&mut |resolve, reject| {
        req.set_onsuccess(Some(&resolve));
        req.set_onerror(Some(&reject));
    });
    wasm_bindgen_futures::JsFuture::from(done).await.unwrap();
    req.result().unwrap().unchecked_into()
}

#[wasm_bindgen_test]
async fn idb_a_connection_closed_by_its_owner_fails_at_once_for_good() {
    let name = "test-closed-for-good";
    let loc = fresh(name).await;
    loc.blob().set("k", Bytes::from_static(b"v")).await.unwrap();
    let (blob, consensus) = (loc.blob(), loc.consensus());
    loc.close();
    assert!(loc.is_closed() && loc.is_closed_for_good());
    // Every call of every service made from it fails, at once, with the same permanent error.
    let errors = [
        blob.get("k").await.unwrap_err(),
        blob.set("k", Bytes::new()).await.unwrap_err(),
        consensus.head("s").await.unwrap_err(),
        consensus
            .compare_and_set("s", None, vd(1, "x"))
            .await
            .unwrap_err(),
        consensus.list_keys().await.unwrap_err(),
    ];
    for err in &errors {
        assert!(closed_for_good(err), "{err}");
        assert!(err.to_string().contains(name), "names the database: {err}");
        assert!(err.to_string().contains("closed by its owner"), "{err}");
    }
    assert_eq!(
        loc.reopens(),
        0,
        "a connection closed for good never reopens"
    );
}

#[wasm_bindgen_test]
async fn idb_connection_steps_aside_on_versionchange() {
    // A deletion from elsewhere: the connection steps aside (else the deletion would stay
    // blocked for ever), and its next call finds the database gone: closed for good, without
    // creating an empty database in its place.
    let name = "test-versionchange";
    let loc = fresh(name).await;
    loc.blob().set("k", Bytes::from_static(b"v")).await.unwrap();
    IdbLocation::delete_database(name).await.unwrap();
    assert!(loc.is_closed());
    assert!(!loc.is_closed_for_good(), "stepped aside, not yet given up");
    let err = loc.blob().get("k").await.unwrap_err();
    assert!(closed_for_good(&err), "{err}");
    assert!(err.to_string().contains("deleted the database"), "{err}");
    assert!(err.to_string().contains("no longer exists"), "{err}");
    assert!(loc.is_closed_for_good());
    assert_eq!(loc.reopens(), 0);
    // Later calls fail at once, the same way.
    assert!(closed_for_good(
        &loc.consensus().head("s").await.unwrap_err()
    ));
    // The database was not created again: opening it anew runs its creation (it is empty).
    let again = IdbLocation::open(name).await.unwrap();
    assert_eq!(again.blob().get("k").await.unwrap(), None);
}

#[wasm_bindgen_test]
async fn idb_a_reset_database_is_reopened_once() {
    // Another connection resets the database (deletes it and creates it again, as a page's
    // reset button does): this connection steps aside, and its next call reopens it once, into
    // the new, empty database.
    let name = "test-reset-reopen";
    let loc = fresh(name).await;
    loc.blob()
        .set("old", Bytes::from_static(b"v"))
        .await
        .unwrap();
    IdbLocation::delete_database(name).await.unwrap();
    let other = IdbLocation::open(name).await.unwrap();
    other
        .blob()
        .set("new", Bytes::from_static(b"w"))
        .await
        .unwrap();
    assert!(loc.is_closed() && !loc.is_closed_for_good());
    assert_eq!(
        loc.blob().get("old").await.unwrap(),
        None,
        "the old data is gone"
    );
    assert_eq!(loc.reopens(), 1);
    assert!(!loc.is_closed());
    assert_eq!(
        loc.blob().get("new").await.unwrap(),
        Some(Bytes::from_static(b"w")),
        "the reopened connection reads the new database"
    );
    // And both connections write and read each other's data.
    loc.blob()
        .set("mine", Bytes::from_static(b"x"))
        .await
        .unwrap();
    assert_eq!(
        other.blob().get("mine").await.unwrap(),
        Some(Bytes::from_static(b"x"))
    );
    assert_eq!(loc.reopens(), 1, "one reopen per stepping aside");
}

#[wasm_bindgen_test]
async fn idb_an_upgrade_by_newer_code_closes_the_connection_for_good() {
    // Newer code opens the database at a higher schema version: this connection steps aside so
    // the upgrade is not blocked; its one reopen, at this code's version, fails, and the
    // connection is closed for good with a message saying so.
    let name = "test-upgrade-by-newer";
    let loc = fresh(name).await;
    loc.blob().set("k", Bytes::from_static(b"v")).await.unwrap();
    let newer = open_raw(name, persist_playground::location::idb::DB_VERSION + 1).await;
    assert!(loc.is_closed());
    let err = loc.blob().get("k").await.unwrap_err();
    assert!(closed_for_good(&err), "{err}");
    assert!(
        err.to_string()
            .contains("upgraded the database to version 2"),
        "{err}"
    );
    assert!(err.to_string().contains("newer schema version"), "{err}");
    assert!(loc.is_closed_for_good());
    newer.close();
}

#[wasm_bindgen_test]
async fn idb_racing_compare_and_set_chains_have_one_winner_per_seqno() {
    // Goal: chains on separate connections race, and the store gives exactly one winner per
    // seqno. Method, forced by construction rather than hoped for from timing: in every round,
    // every chain first reads the head (all reads joined), so all of them hold the same head;
    // then all of them issue compare_and_set(head, head + 1) together (joined). Exactly one can
    // win each round, whatever order IndexedDB runs them in: the others lose.
    let name = "test-race";
    drop(fresh(name).await);
    const CHAINS: usize = 6;
    const ROUNDS: usize = 20;
    let mut connections = Vec::new();
    for _ in 0..CHAINS {
        connections.push(IdbLocation::open(name).await.unwrap().consensus());
    }
    let mut wins: Vec<(usize, u64)> = Vec::new();
    let mut losses = 0u64;
    let mut winners_per_round = Vec::new();
    for round in 0..ROUNDS {
        let heads = futures::future::join_all(
            connections
                .iter()
                .map(|c| async move { c.head("k").await.unwrap().map(|v| v.seqno) }),
        )
        .await;
        assert!(
            heads.windows(2).all(|w| w[0] == w[1]),
            "round {round}: every chain read the same head {heads:?}"
        );
        let results = futures::future::join_all(connections.iter().zip(&heads).enumerate().map(
            |(chain, (consensus, head))| async move {
                let next = head.map_or(SeqNo(1), SeqNo::next);
                let new = vd(next.0, &format!("chain {chain}"));
                let r = consensus.compare_and_set("k", *head, new).await.unwrap();
                (chain, next.0, r)
            },
        ))
        .await;
        let mut round_winners = 0;
        for (chain, seqno, r) in results {
            match r {
                CaSResult::Committed => {
                    wins.push((chain, seqno));
                    round_winners += 1;
                }
                CaSResult::ExpectationMismatch => losses += 1,
            }
        }
        winners_per_round.push(round_winners);
    }
    assert_eq!(
        winners_per_round,
        vec![1; ROUNDS],
        "exactly one winner per round"
    );
    assert_eq!(
        losses,
        ((CHAINS - 1) * ROUNDS) as u64,
        "every other chain lost"
    );
    let n = wins.len() as u64;
    let mut seqnos: Vec<u64> = wins.iter().map(|(_, s)| *s).collect();
    seqnos.sort();
    assert_eq!(
        seqnos,
        (1..=n).collect::<Vec<_>>(),
        "one winner per seqno, no gaps"
    );
    let winners: std::collections::BTreeSet<usize> = wins.iter().map(|(c, _)| *c).collect();
    // Which chain wins a round is up to IndexedDB's scheduling; the contract is only about seqnos.
    console_log!("race: {n} commits, {losses} losses, winners {winners:?}");
    let check = IdbLocation::open(name).await.unwrap().consensus();
    let head = check.head("k").await.unwrap().unwrap();
    assert_eq!(
        head.seqno,
        SeqNo(n),
        "the head equals the number of commits"
    );
    // Each stored version holds the data of the chain that won it.
    let versions = check.scan("k", SeqNo(0), SCAN_ALL).await.unwrap();
    for (chain, seqno) in wins {
        let v = &versions[(seqno - 1) as usize];
        assert_eq!(v.seqno, SeqNo(seqno));
        assert_eq!(v.data, Bytes::from(format!("chain {chain}")));
    }
}

#[wasm_bindgen_test]
async fn browser_runtime_timers_timeouts_and_abort() {
    let rt = BrowserRuntime::runtime();
    let t0 = rt.now_ms();
    rt.sleep(30).await;
    assert!(rt.now_ms() >= t0 + 30);

    assert_eq!(rt.timeout(1_000, async { 7 }).await, Ok(7));
    let never = futures::future::pending::<()>();
    let err = rt.timeout(20, never).await.unwrap_err();
    assert_eq!(err.after_ms, 20);

    // A spawned task runs; dropping its handle aborts it before it finishes.
    let ran = Rc::new(Cell::new(0));
    let r = Rc::clone(&ran);
    let rt2 = rt.clone();
    let handle = rt.spawn("counter", async move {
        loop {
            r.set(r.get() + 1);
            rt2.sleep(5).await;
        }
    });
    rt.sleep(40).await;
    drop(handle);
    let at_abort = ran.get();
    assert!(at_abort > 0, "the task ran");
    rt.sleep(40).await;
    assert_eq!(
        ran.get(),
        at_abort,
        "the task stopped when its handle was dropped"
    );

    // Join handles deliver outputs.
    let out = rt.spawn("answer", async { 42 }).await;
    assert_eq!(out, 42);
}

#[wasm_bindgen_test]
fn simulator_is_deterministic_under_wasm32() {
    fn run(seed: u64) -> persist_playground::runtime::sim::Trace {
        let sim = Simulator::new(seed);
        let rt = sim.runtime();
        for i in 0..4u64 {
            let rt2 = rt.clone();
            rt.spawn(&format!("t{i}"), async move {
                for j in 0..5 {
                    rt2.sleep((i * 3 + j) % 4).await;
                    rt2.yield_now().await;
                }
            })
            .detach();
        }
        sim.run_until(1_000).unwrap();
        sim.trace()
    }
    assert_eq!(run(9), run(9));
    assert_ne!(run(9), run(10));
}
