//! Compaction keeps up with a writer committing as fast as it can, over IndexedDB in headless
//! Chrome with the browser runtime (real timers): one page's writer appends one-update batches by
//! `compare_and_append` in a tight loop for 10,000 commits, with its own background maintenance
//! (compaction, rollups, GC) racing every commit for the next seqno. After every commit, the
//! number of batches in the state it committed stays within the spine bound
//! ([`spine_bound`]: logarithmic in the updates), and at the end the contents are exactly the
//! writes. (The native twin, over the simulator, is `tests/persist_spine.rs`.)
#![cfg(target_arch = "wasm32")]

use persist_playground::location::idb::IdbLocation;
use persist_playground::location::Location;
use persist_playground::persist::events::EventLog;
use persist_playground::persist::trace::spine_bound;
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::browser::BrowserRuntime;
use timely::progress::Antichain;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

const COMMITS: u64 = 10_000;

#[wasm_bindgen_test]
async fn a_tight_loop_writer_over_indexeddb_stays_within_the_spine_bound() {
    let name = "test-persist-spine";
    IdbLocation::delete_database(name).await.unwrap();
    let idb = IdbLocation::open(name).await.unwrap();
    let location = Location {
        blob: idb.blob(),
        consensus: idb.consensus(),
    };
    let rt = BrowserRuntime::runtime();
    let client = PersistClient::new(location, rt, PersistConfig::default(), 23)
        .with_events(EventLog::disabled());
    let shard = ShardId::new("s-spine").unwrap();
    let (mut w, mut r) = client.open::<String, ()>(&shard).await.unwrap();
    let f = Antichain::from_elem;
    let mut max_batches = 0;
    for t in 0..COMMITS {
        let u = [((format!("k{t}"), ()), t, 1i64)];
        w.compare_and_append(&u, f(t), f(t + 1))
            .await
            .unwrap()
            .unwrap();
        let batches = client
            .cached_state(&shard)
            .expect("the writer committed")
            .collections
            .trace
            .batches()
            .len();
        let bound = spine_bound(t + 1);
        max_batches = max_batches.max(batches);
        assert!(
            batches <= bound,
            "after {} commits: {batches} batches, bound {bound}",
            t + 1
        );
        if t % 100 == 99 {
            r.downgrade_since(&f(t - 50)).await.unwrap();
        }
    }
    let contents = r.snapshot_and_fetch(f(COMMITS - 1)).await.unwrap();
    assert_eq!(contents.len() as u64, COMMITS);
    web_sys::console::log_1(
        &format!("{COMMITS} commits over IndexedDB: at most {max_batches} batches").into(),
    );
    w.expire().await;
    r.expire().await;
}
