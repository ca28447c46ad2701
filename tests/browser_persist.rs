//! Persist over IndexedDB in headless Chrome, with the browser runtime (real timers).
//!
//! - racing writers, readers, caller timeouts and crashes behind the fault injector, checked
//!   against a model of acknowledged and unreported writes (as in the native `persist_sim.rs`);
//! - then every handle and the connection are dropped, the database reopened through a new
//!   connection and a new client, and the shard is found intact.
#![cfg(target_arch = "wasm32")]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use persist_playground::location::idb::IdbLocation;
use persist_playground::location::unreliable::{
    UnreliableBlob, UnreliableConsensus, UnreliableHandle,
};
use persist_playground::location::Location;
use persist_playground::persist::read::ListenEvent;
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::browser::BrowserRuntime;
use timely::progress::Antichain;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn f(t: u64) -> Antichain<u64> {
    Antichain::from_elem(t)
}

#[derive(Default)]
struct Model {
    acked: BTreeMap<String, u64>,
    unknown: BTreeMap<String, u64>,
    mismatches: u64,
    timeouts: u64,
}

fn cfg() -> PersistConfig {
    PersistConfig {
        backoff_min_ms: 1,
        backoff_max_ms: 20,
        ..PersistConfig::default()
    }
}

/// Checks a snapshot at `as_of` against the model: acked writes exactly once, unreported ones
/// at most once, nothing else.
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
        assert!(model.unknown.contains_key(*k), "{k} was never written");
        assert_eq!(*d, 1, "{k} at most once");
        unknown_present += 1;
    }
    unknown_present
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
        let mut tasks = Vec::new();
        for w in 0..3u64 {
            let (client, rt, model, shard) =
                (client.clone(), rt.clone(), Rc::clone(&model), shard.clone());
            tasks.push(async move {
                let mut handle = client.open_writer::<String, ()>(&shard).await.unwrap();
                for i in 0..12u64 {
                    let lo = *handle.upper().elements().first().unwrap();
                    let updates = vec![((format!("w{w}-{i}"), ()), lo, 1i64)];
                    // Every fifth call the caller gives up after a few milliseconds.
                    let patience = if (w + i) % 5 == 0 { 2 } else { 60_000 };
                    let r = rt
                        .timeout(
                            patience,
                            handle.compare_and_append(&updates, f(lo), f(lo + 1)),
                        )
                        .await;
                    let mut m = model.borrow_mut();
                    match r {
                        Ok(Ok(Ok(()))) => {
                            m.acked.insert(format!("w{w}-{i}"), lo);
                        }
                        Ok(Ok(Err(_))) => m.mismatches += 1,
                        Ok(Err(e)) => panic!("{e}"),
                        Err(_) => {
                            m.unknown.insert(format!("w{w}-{i}"), lo);
                            m.timeouts += 1;
                            drop(m);
                            // Crash and reopen.
                            handle.abandon();
                            handle = client.open_writer(&shard).await.unwrap();
                        }
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
        check(&m, final_as_of, &snap);
        assert!(m.acked.len() >= 10, "writes landed: {}", m.acked.len());
        assert!(m.mismatches > 0, "the writers raced");
        assert!(faults.counts().faults() > 0, "faults fired");
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
