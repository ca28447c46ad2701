//! A writer for the browser benchmark page (`www/bench.html`, driven by
//! `scripts/bench-browser.mjs`): timed compare_and_appends and raw Consensus writes over
//! IndexedDB. Only the bench build has it (Cargo feature `bench`, `scripts/build.sh --bench`,
//! into `pkg-bench/`): the page's `.wasm` stays without it.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::Promise;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use super::{check_db_name, js_error, random_seed};
use crate::location::idb::IdbLocation;
use crate::persist::write::WriteHandle;
use crate::persist::{PersistClient, PersistConfig, ShardId};
use crate::runtime::browser::BrowserRuntime;

/// A writer for the browser benchmark (`www/bench.html`): small compare_and_appends over
/// IndexedDB, timed by the page around [`BenchWriter::append_many`].
#[wasm_bindgen]
pub struct BenchWriter {
    writer: Rc<RefCell<WriteHandle<String, ()>>>,
    location: Rc<IdbLocation>,
}

#[wasm_bindgen]
impl BenchWriter {
    /// Opens a writer on shard `shard` of IndexedDB database `dbName` (the event log is off).
    /// With `maintenance` false, compaction, rollups and GC are off: the write path alone.
    /// Its ids come from a seed drawn with `crypto.getRandomValues`.
    #[wasm_bindgen(unchecked_return_type = "Promise<BenchWriter>")]
    pub fn open(
        #[wasm_bindgen(js_name = dbName)] db_name: String,
        shard: String,
        maintenance: bool,
    ) -> Promise {
        BenchWriter::open_parts(db_name, shard, maintenance, maintenance)
    }

    /// [`BenchWriter::open`] with compaction and rollups+GC switched apart (to tell which part
    /// of maintenance costs what): each at its default when on.
    #[wasm_bindgen(js_name = openParts, unchecked_return_type = "Promise<BenchWriter>")]
    pub fn open_parts(
        #[wasm_bindgen(js_name = dbName)] db_name: String,
        shard: String,
        compaction: bool,
        #[wasm_bindgen(js_name = rollupsAndGc)] rollups_and_gc: bool,
    ) -> Promise {
        future_to_promise(async move {
            check_db_name(&db_name)?;
            let shard = ShardId::new(&shard).map_err(js_error)?;
            let location = IdbLocation::open(&db_name).await.map_err(js_error)?;
            let d = PersistConfig::default();
            let cfg = PersistConfig {
                compaction_enabled: compaction,
                rollup_threshold: if rollups_and_gc {
                    d.rollup_threshold
                } else {
                    0
                },
                gc_enabled: rollups_and_gc,
                ..d
            };
            let seed = random_seed()?;
            let client =
                PersistClient::new(location.location(), BrowserRuntime::runtime(), cfg, seed)
                    .with_events(crate::persist::events::EventLog::disabled());
            let writer = client
                .open_writer::<String, ()>(&shard)
                .await
                .map_err(js_error)?;
            Ok(BenchWriter {
                writer: Rc::new(RefCell::new(writer)),
                location: Rc::new(location),
            }
            .into())
        })
    }

    /// Makes `n` sequential Consensus compare_and_sets of ~200 bytes on key `key` (no persist
    /// state machine): the storage cost alone, from Rust.
    #[wasm_bindgen(js_name = casMany, unchecked_return_type = "Promise<void>")]
    pub fn cas_many(&self, key: String, n: u32) -> Promise {
        use crate::location::{CaSResult, SeqNo, VersionedData};
        let consensus = self.location.consensus();
        future_to_promise(async move {
            let mut head = consensus
                .head(&key)
                .await
                .map_err(js_error)?
                .map(|v| v.seqno);
            for _ in 0..n {
                let next = head.map_or(SeqNo(1), SeqNo::next);
                let new = VersionedData {
                    seqno: next,
                    data: bytes::Bytes::from(vec![0u8; 200]),
                };
                match consensus
                    .compare_and_set(&key, head, new)
                    .await
                    .map_err(js_error)?
                {
                    CaSResult::Committed => head = Some(next),
                    CaSResult::ExpectationMismatch => return Err(js_error("lost a race")),
                }
            }
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Makes `n` sequential compare_and_appends of one small update each, at the writer's upper.
    #[wasm_bindgen(js_name = appendMany, unchecked_return_type = "Promise<void>")]
    pub fn append_many(&self, n: u32) -> Promise {
        let writer = Rc::clone(&self.writer);
        future_to_promise(async move {
            let mut writer = writer
                .try_borrow_mut()
                .map_err(|_| js_error("appendMany is already running on this writer"))?;
            for _ in 0..n {
                let Some(&lo) = writer.upper().elements().first() else {
                    return Err(js_error("the shard is finished"));
                };
                let update = [((format!("k{lo}"), ()), lo, 1i64)];
                let f = timely::progress::Antichain::from_elem;
                writer
                    .compare_and_append(&update, f(lo), f(lo + 1))
                    .await
                    .map_err(js_error)?
                    .map_err(js_error)?;
            }
            Ok(JsValue::UNDEFINED)
        })
    }
}
