//! The only `#[wasm_bindgen]` surface of the crate (wasm32 only). Thin by design: each exported
//! call checks its JS input, calls the core, and hands back plain data (serde structs through
//! serde-wasm-bindgen) or a JS `Error` with a message. Nothing here holds protocol state.
//!
//! Numbers: seqnos are `u64` and may exceed 2^53, so they cross the boundary as decimal strings.

// The library's JavaScript API (issue 12): one child module per component.
pub mod library;

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use futures::FutureExt;
use js_sys::Promise;
use serde::Serialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use crate::location::idb::IdbLocation;
use crate::location::{BlobMetadata, CaSResult, ExternalError, SeqNo, VersionedData, SCAN_ALL};
use crate::persist::write::WriteHandle;
use crate::persist::{PersistClient, PersistConfig, ShardId};
use crate::runtime::browser::BrowserRuntime;

/// The longest key the page accepts.
const MAX_KEY_CHARS: usize = 256;
/// The largest value the page accepts, in bytes.
const MAX_VALUE_BYTES: usize = 1 << 20;
/// How much of a value a snapshot shows.
const PREVIEW_BYTES: usize = 64;

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
/** One Consensus key: its head seqno (a decimal string: seqnos may exceed 2^53), live versions, bytes. */
export interface ConsensusKeyView {
    key: string;
    headSeqno: string;
    versions: number;
    bytes: number;
    headPreview: string;
}
/** A Blob key and the size of its value. */
export interface BlobView {
    key: string;
    sizeInBytes: number;
}
/** What an IndexedDB location holds, keys sorted. */
export interface LocationView {
    dbName: string;
    consensus: ConsensusKeyView[];
    blobs: BlobView[];
}
/** The outcome of writeVersion: committed is false if another writer took that seqno first. */
export interface WriteOutcome {
    key: string;
    seqno: string;
    committed: boolean;
}
"#;

#[wasm_bindgen(start)]
fn start() {
    console_error_panic_hook::set_once();
}

fn js_error(err: impl std::fmt::Display) -> JsValue {
    js_sys::Error::new(&err.to_string()).into()
}

fn to_js<T: Serialize>(value: &T) -> Result<JsValue, JsValue> {
    value
        .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(js_error)
}

fn check_key(what: &str, key: &str) -> Result<(), JsValue> {
    if key.is_empty() {
        return Err(js_error(format!("{what} key must not be empty")));
    }
    if key.chars().count() > MAX_KEY_CHARS {
        return Err(js_error(format!(
            "{what} key is longer than {MAX_KEY_CHARS} characters"
        )));
    }
    Ok(())
}

fn check_value(value: &str) -> Result<(), JsValue> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(js_error(format!(
            "value is larger than {MAX_VALUE_BYTES} bytes"
        )));
    }
    Ok(())
}

/// The start of `data` as text: at most [`PREVIEW_BYTES`] bytes, cut at a character boundary
/// when the data is UTF-8 (bytes that are not UTF-8 show as U+FFFD).
fn preview(data: &[u8]) -> String {
    let text = String::from_utf8_lossy(data);
    let mut end = text.len().min(PREVIEW_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut s = text[..end].to_string();
    if end < text.len() {
        s.push('…');
    }
    s
}

/// One Consensus key as the page shows it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ConsensusKeyView {
    key: String,
    /// The head seqno, as a decimal string (exact for every u64).
    head_seqno: String,
    /// Live versions (after truncation).
    versions: usize,
    /// Bytes over all live versions.
    bytes: usize,
    /// The start of the head version's data, as text.
    head_preview: String,
}

/// One Blob key as the page shows it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BlobView {
    key: String,
    size_in_bytes: u64,
}

impl From<BlobMetadata> for BlobView {
    fn from(m: BlobMetadata) -> Self {
        let BlobMetadata { key, size_in_bytes } = m;
        BlobView { key, size_in_bytes }
    }
}

/// What an IndexedDB location holds, as the page shows it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LocationView {
    db_name: String,
    consensus: Vec<ConsensusKeyView>,
    blobs: Vec<BlobView>,
}

/// The result of [`LocationInspector::write_version`].
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WriteOutcome {
    key: String,
    /// The seqno the write tried to take, as a decimal string.
    seqno: String,
    /// Whether it committed (false: another writer took that seqno first).
    committed: bool,
}

/// Opens an IndexedDB location and shows what it holds: the first page's window onto storage.
#[wasm_bindgen]
pub struct LocationInspector {
    location: Rc<IdbLocation>,
}

#[wasm_bindgen]
impl LocationInspector {
    /// Opens (creating if needed) the IndexedDB database `dbName`.
    /// Resolves to a `LocationInspector`.
    #[wasm_bindgen(unchecked_return_type = "Promise<LocationInspector>")]
    pub fn open(#[wasm_bindgen(js_name = dbName)] db_name: String) -> Promise {
        future_to_promise(async move {
            check_key("database", &db_name)?;
            let location = IdbLocation::open(&db_name).await.map_err(js_error)?;
            Ok(LocationInspector {
                location: Rc::new(location),
            }
            .into())
        })
    }

    /// The database name.
    #[wasm_bindgen(getter, js_name = dbName)]
    pub fn db_name(&self) -> String {
        self.location.name().to_string()
    }

    /// Whether the connection has closed (for example because another tab deleted the
    /// database); every later call then fails, and the page should open a new inspector.
    #[wasm_bindgen(getter)]
    pub fn closed(&self) -> bool {
        self.location.is_closed()
    }

    /// Resolves to `{ dbName, consensus: [{ key, headSeqno, versions, bytes, headPreview }],
    /// blobs: [{ key, sizeInBytes }] }`, keys sorted.
    #[wasm_bindgen(unchecked_return_type = "Promise<LocationView>")]
    pub fn snapshot(&self) -> Promise {
        let location = Rc::clone(&self.location);
        future_to_promise(async move { to_js(&snapshot(&location).await.map_err(js_error)?) })
    }

    /// Writes `data` as the next version of Consensus key `key` (reads the head, then
    /// compare_and_set at head + 1). Resolves to `{ key, seqno, committed }`; `committed` is false
    /// if another writer took that seqno in between.
    #[wasm_bindgen(js_name = writeVersion, unchecked_return_type = "Promise<WriteOutcome>")]
    pub fn write_version(&self, key: String, data: String) -> Promise {
        let location = Rc::clone(&self.location);
        future_to_promise(
            async move {
                check_key("consensus", &key)?;
                check_value(&data)?;
                let consensus = location.consensus();
                let head = consensus.head(&key).await.map_err(js_error)?;
                let expected = head.map(|v| v.seqno);
                let next = expected.map_or(SeqNo(1), SeqNo::next);
                let new = VersionedData {
                    seqno: next,
                    data: Bytes::from(data.into_bytes()),
                };
                let result = consensus
                    .compare_and_set(&key, expected, new)
                    .await
                    .map_err(js_error)?;
                to_js(&WriteOutcome {
                    key,
                    seqno: next.0.to_string(),
                    committed: result == CaSResult::Committed,
                })
            }
            .boxed_local(),
        )
    }

    /// Sets Blob key `key` to `data`.
    #[wasm_bindgen(js_name = writeBlob, unchecked_return_type = "Promise<void>")]
    pub fn write_blob(&self, key: String, data: String) -> Promise {
        let location = Rc::clone(&self.location);
        future_to_promise(async move {
            check_key("blob", &key)?;
            check_value(&data)?;
            location
                .blob()
                .set(&key, Bytes::from(data.into_bytes()))
                .await
                .map_err(js_error)?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Closes this connection and deletes the whole database. The inspector is unusable after.
    #[wasm_bindgen(js_name = deleteDatabase, unchecked_return_type = "Promise<void>")]
    pub fn delete_database(&self) -> Promise {
        let location = Rc::clone(&self.location);
        future_to_promise(async move {
            location.close();
            IdbLocation::delete_database(location.name())
                .await
                .map_err(js_error)?;
            Ok(JsValue::UNDEFINED)
        })
    }
}

async fn snapshot(location: &IdbLocation) -> Result<LocationView, ExternalError> {
    let consensus = location.consensus();
    let mut keys = Vec::new();
    for key in consensus.list_keys().await? {
        let versions = consensus.scan(&key, SeqNo::minimum(), SCAN_ALL).await?;
        let Some(head) = versions.last() else {
            continue;
        };
        keys.push(ConsensusKeyView {
            head_seqno: head.seqno.0.to_string(),
            versions: versions.len(),
            bytes: versions.iter().map(|v| v.data.len()).sum(),
            head_preview: preview(&head.data),
            key,
        });
    }
    let mut blobs = Vec::new();
    location
        .blob()
        .list_keys_and_metadata("", &mut |m| blobs.push(BlobView::from(m)))
        .await?;
    blobs.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(LocationView {
        db_name: location.name().to_string(),
        consensus: keys,
        blobs,
    })
}

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
    #[wasm_bindgen(unchecked_return_type = "Promise<BenchWriter>")]
    pub fn open(
        #[wasm_bindgen(js_name = dbName)] db_name: String,
        shard: String,
        maintenance: bool,
    ) -> Promise {
        future_to_promise(async move {
            check_key("database", &db_name)?;
            let shard = ShardId::new(&shard).map_err(js_error)?;
            let location = IdbLocation::open(&db_name).await.map_err(js_error)?;
            let cfg = if maintenance {
                PersistConfig::default()
            } else {
                PersistConfig {
                    compaction_enabled: false,
                    rollup_threshold: 0,
                    gc_enabled: false,
                    ..PersistConfig::default()
                }
            };
            let client = PersistClient::new(location.location(), BrowserRuntime::runtime(), cfg, 1)
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
                    data: Bytes::from(vec![0u8; 200]),
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
