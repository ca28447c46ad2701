//! Compaction keeps up with a writer committing as fast as it can, over IndexedDB in headless
//! Chrome with the browser runtime (real timers): the shared body
//! ([`spine::tight_loop_writer`], also run natively on the simulator by `tests/persist_spine.rs`)
//! appends 10,000 one-update batches in a tight loop, checks the spine bound after every commit
//! and the contents at the end.
#![cfg(target_arch = "wasm32")]

#[path = "support/spine.rs"]
mod spine;

use persist_playground::location::idb::IdbLocation;
use persist_playground::location::Location;
use persist_playground::persist::events::EventLog;
use persist_playground::persist::{PersistClient, PersistConfig};
use persist_playground::runtime::browser::BrowserRuntime;
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
    let client = PersistClient::new(
        location,
        BrowserRuntime::runtime(),
        PersistConfig::default(),
        23,
    )
    .with_events(EventLog::disabled());
    let run = spine::tight_loop_writer(client, COMMITS).await;
    web_sys::console::log_1(
        &format!(
            "{COMMITS} commits over IndexedDB: at most {} batches ({} from the bound)",
            run.max_batches, run.max_excess
        )
        .into(),
    );
}
