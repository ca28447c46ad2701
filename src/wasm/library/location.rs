//! [`JsPersistLocation`] (`PersistLocation` in JS): the Blob and Consensus that shards, oracles
//! and write tasks stand on.
//!
//! - `PersistLocation.inMemory(options?)`: both services in memory. Works anywhere (Node, a
//!   browser, a worker). Clients opened on one location share its data, the way several
//!   processes share one database.
//! - `PersistLocation.indexedDb(name, options?)`: both services in one IndexedDB database
//!   (browsers and workers); under Node it rejects with code `"Unavailable"`.
//! - Either may sit behind the seeded fault decorator (`options.faults`): each storage call then
//!   fails, times out without happening, or happens and then times out, as its seeded coins say.
//!   Persist retries such errors for as long as a call runs, so pair faults with the client's
//!   `callTimeoutMs`.
//!
//! - `PersistLocation.custom({ blob, consensus })`: both services are JS objects of async
//!   functions (see [`super::custom`]); `runLocationConformance(location)` runs the crate's
//!   conformance suites against any location and reports what held.
//!
//! Clients over IndexedDB or a custom location draw their ids from the platform's CSPRNG
//! whatever their seed; only in memory does a seed fix them (see [`super::ids`]).
//!
//! `close()` is final: every call in flight on any object over this location rejects with code
//! `"Closed"`, every later call too, and write tasks over it stop.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::rc::Rc;

use futures::future::{AbortHandle, Abortable, Aborted, LocalBoxFuture};
use js_sys::Promise;
use serde::Serialize;
use tsify::Tsify;
use wasm_bindgen::prelude::*;

use super::convert::{self, Options};
use super::custom::{JsBlob, JsConsensus};
use super::errors::{LibError, LibResult};
use crate::location::idb::IdbLocation;
use crate::location::mem::{MemBlob, MemConsensus};
use crate::location::unreliable::{UnreliableBlob, UnreliableConsensus, UnreliableHandle};
use crate::location::{ExternalError, Location};
use crate::runtime::Runtime;

#[wasm_bindgen(typescript_custom_section)]
const TS_LOCATION: &'static str = r#"
/** The seeded fault decorator: each storage call happens with probability `shouldHappen` and
 *  reports a timeout with probability `shouldTimeout` (both in [0, 1]). */
export interface FaultOptions {
    /** Seeds the coins (a safe-integer number or a bigint below 2^64). Default 0. */
    seed?: number | bigint;
    shouldHappen: number;
    shouldTimeout: number;
}
/** Options of `PersistLocation.inMemory` and `PersistLocation.indexedDb`. */
export interface LocationOptions {
    /** Put the location behind the fault decorator. */
    faults?: FaultOptions;
}
/** New probabilities for a location's fault decorator. */
export interface FaultSettings {
    shouldHappen: number;
    shouldTimeout: number;
}
"#;

/// What the decorator injected so far (counts of storage calls).
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct FaultCounts {
    /// Calls passed through with their real result.
    pub ok: f64,
    /// Calls that failed without running.
    pub failed: f64,
    /// Calls that reported a timeout without running.
    pub timed_out_without_happening: f64,
    /// Calls that ran, then reported a timeout.
    pub happened_then_timed_out: f64,
}

/// Calls in flight that can be cancelled together (by closing a location, or by taking a
/// handle). A cancelled call's future ends with `Err(Aborted)` at its next poll.
#[derive(Default)]
pub(crate) struct CallSet {
    next: Cell<u64>,
    calls: RefCell<BTreeMap<u64, AbortHandle>>,
}

/// Forgets a call when it ends, however it ends (dropped futures included).
struct Forget<'a>(&'a CallSet, u64);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.calls.borrow_mut().remove(&self.1);
    }
}

impl CallSet {
    /// Runs `fut` until it ends or the set is cancelled. (The future is boxed so that this is
    /// compiled once per output type, not once per call site.)
    pub async fn run<T>(&self, fut: LocalBoxFuture<'_, T>) -> Result<T, Aborted> {
        let (abort, registration) = AbortHandle::new_pair();
        let id = self.next.get();
        self.next.set(id + 1);
        self.calls.borrow_mut().insert(id, abort);
        let _forget = Forget(self, id);
        Abortable::new(fut, registration).await
    }

    /// Cancels every call running now.
    pub fn cancel_all(&self) {
        let calls = std::mem::take(&mut *self.calls.borrow_mut());
        for abort in calls.into_values() {
            abort.abort();
        }
    }
}

/// The state every object over one location shares: the services, whether it is closed, and
/// the calls in flight (aborted on close).
pub struct LocationShared {
    kind: &'static str,
    name: String,
    location: Location,
    faults: Option<UnreliableHandle>,
    idb: Option<IdbLocation>,
    closed: Cell<bool>,
    calls: CallSet,
    on_close: RefCell<Vec<Box<dyn FnOnce()>>>,
}

impl LocationShared {
    /// The services.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// `"memory"`, `"indexeddb"` or `"custom"`.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// An error if the location is closed.
    pub fn check_open(&self, what: &str) -> LibResult<()> {
        if self.closed.get() || self.idb.as_ref().is_some_and(|i| i.is_closed()) {
            return Err(LibError::closed(what));
        }
        Ok(())
    }

    /// Runs `fut` as a call on this location: refused if it is closed, aborted (with a `Closed`
    /// error) if it closes meanwhile, and bounded by `timeout` (`Some((runtime, ms))`).
    pub async fn run<T>(
        &self,
        what: &str,
        timeout: Option<(&Runtime, u64)>,
        fut: impl Future<Output = LibResult<T>>,
    ) -> LibResult<T> {
        self.run_boxed(what, timeout, Box::pin(fut)).await
    }

    /// [`LocationShared::run`] on a boxed future: compiled once per output type.
    async fn run_boxed<T>(
        &self,
        what: &str,
        timeout: Option<(&Runtime, u64)>,
        fut: LocalBoxFuture<'_, LibResult<T>>,
    ) -> LibResult<T> {
        self.check_open(what)?;
        let out = match timeout {
            Some((runtime, ms)) => runtime.timeout(ms, self.calls.run(fut)).await?,
            None => self.calls.run(fut).await,
        };
        out.map_err(|_aborted| LibError::closed(what))?
    }

    /// Registers `f` to run when the location closes (write tasks stop this way).
    pub fn on_close(&self, f: impl FnOnce() + 'static) {
        if self.closed.get() {
            f();
        } else {
            self.on_close.borrow_mut().push(Box::new(f));
        }
    }

    fn close(&self) {
        if self.closed.replace(true) {
            return;
        }
        self.calls.cancel_all();
        let hooks = std::mem::take(&mut *self.on_close.borrow_mut());
        for hook in hooks {
            hook();
        }
        if let Some(idb) = &self.idb {
            idb.close();
        }
    }
}

fn fault_handle(options: &Options) -> LibResult<Option<UnreliableHandle>> {
    let Some(v) = options.get("faults") else {
        return Ok(None);
    };
    let faults = Options::required(
        &v,
        &options.name("faults"),
        &["seed", "shouldHappen", "shouldTimeout"],
    )?;
    let seed = faults.parse_or("seed", 0, convert::uint64)?;
    let happen = faults.parse_required("shouldHappen", convert::probability)?;
    let timeout = faults.parse_required("shouldTimeout", convert::probability)?;
    Ok(Some(UnreliableHandle::new(seed, happen, timeout)))
}

fn decorate(location: Location, faults: &Option<UnreliableHandle>) -> Location {
    match faults {
        None => location,
        Some(handle) => Location {
            blob: Rc::new(UnreliableBlob::new(location.blob, handle.clone())),
            consensus: Rc::new(UnreliableConsensus::new(location.consensus, handle.clone())),
        },
    }
}

fn unavailable(e: ExternalError) -> LibError {
    LibError::new("Unavailable", format!("cannot open IndexedDB: {e}"))
}

/// A location: Blob and Consensus. See the module docs.
#[wasm_bindgen(js_name = PersistLocation)]
pub struct JsPersistLocation {
    pub(crate) shared: Rc<LocationShared>,
}

#[wasm_bindgen(js_class = PersistLocation)]
impl JsPersistLocation {
    /// A location in memory: works in Node and in browsers. `options.faults` puts it behind the
    /// fault decorator. Clients on it given a `seed` draw their ids from it (a run replays);
    /// without one, from the platform's CSPRNG.
    #[wasm_bindgen(js_name = inMemory)]
    pub fn in_memory(
        #[wasm_bindgen(unchecked_optional_param_type = "LocationOptions")] options: JsValue,
    ) -> Result<JsPersistLocation, JsValue> {
        let options = Options::new(&options, "options", &["faults"])?;
        let faults = fault_handle(&options)?;
        let location = Location {
            blob: Rc::new(MemBlob::new()),
            consensus: Rc::new(MemConsensus::new()),
        };
        Ok(Self::build(
            "memory",
            "memory".into(),
            location,
            faults,
            None,
        ))
    }

    /// A location in the IndexedDB database `name` (created if needed). Browsers and workers
    /// only: elsewhere it rejects with code `"Unavailable"`. The data outlives the page and is
    /// shared by its tabs, so clients on it draw their ids (writers, readers, idempotency
    /// tokens) from the platform's CSPRNG (`crypto.getRandomValues`) whatever their `seed`.
    #[wasm_bindgen(js_name = indexedDb, unchecked_return_type = "Promise<PersistLocation>")]
    pub fn indexed_db(
        #[wasm_bindgen(unchecked_param_type = "string")] name: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "LocationOptions")] options: JsValue,
    ) -> Promise {
        convert::promise(async move {
            let name = convert::string(&name, "name")?;
            if name.is_empty() || name.chars().count() > 256 {
                return Err(LibError::range("name must be 1 to 256 characters").into());
            }
            let options = Options::new(&options, "options", &["faults"])?;
            let faults = fault_handle(&options)?;
            let idb = IdbLocation::open(&name).await.map_err(unavailable)?;
            let location = idb.location();
            Ok(Self::build("indexeddb", name, location, faults, Some(idb)).into())
        })
    }

    /// Deletes the IndexedDB database `name` (browsers only). Open locations on it close first.
    #[wasm_bindgen(js_name = deleteIndexedDb, unchecked_return_type = "Promise<void>")]
    pub fn delete_indexed_db(
        #[wasm_bindgen(unchecked_param_type = "string")] name: JsValue,
    ) -> Promise {
        convert::promise(async move {
            let name = convert::string(&name, "name")?;
            IdbLocation::delete_database(&name)
                .await
                .map_err(unavailable)?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// A location JavaScript supplies: `options.blob` and `options.consensus` are objects of
    /// (async) functions (see `CustomBlob`, `CustomConsensus` and the `custom` module). Ids of
    /// clients on it come from the platform's CSPRNG, whatever their seed.
    pub fn custom(
        #[wasm_bindgen(unchecked_param_type = "CustomLocationOptions")] options: JsValue,
    ) -> Result<JsPersistLocation, JsValue> {
        let options = Options::required(
            &options,
            "options",
            &["blob", "consensus", "name", "faults"],
        )?;
        let name = options.parse_or("name", "custom".to_string(), convert::string)?;
        let closed = Rc::new(Cell::new(false));
        let blob = options.parse_required("blob", |v, _| JsBlob::new(v, &name, &closed))?;
        let consensus =
            options.parse_required("consensus", |v, _| JsConsensus::new(v, &name, &closed))?;
        let faults = fault_handle(&options)?;
        let location = Location {
            blob: Rc::new(blob),
            consensus: Rc::new(consensus),
        };
        let built = Self::build("custom", name, location, faults, None);
        built.shared.on_close(move || closed.set(true));
        Ok(built)
    }

    fn build(
        kind: &'static str,
        name: String,
        location: Location,
        faults: Option<UnreliableHandle>,
        idb: Option<IdbLocation>,
    ) -> JsPersistLocation {
        JsPersistLocation {
            shared: Rc::new(LocationShared {
                kind,
                name,
                location: decorate(location, &faults),
                faults,
                idb,
                closed: Cell::new(false),
                calls: CallSet::default(),
                on_close: RefCell::default(),
            }),
        }
    }

    /// `"memory"`, `"indexeddb"` or `"custom"`.
    #[wasm_bindgen(
        getter,
        unchecked_return_type = "\"memory\" | \"indexeddb\" | \"custom\""
    )]
    pub fn kind(&self) -> String {
        self.shared.kind.to_string()
    }

    /// The database name (`"memory"` for an in-memory location).
    #[wasm_bindgen(getter)]
    pub fn name(&self) -> String {
        self.shared.name.clone()
    }

    /// Whether the location is closed (by `close()`, or because another tab deleted the
    /// IndexedDB database).
    #[wasm_bindgen(getter)]
    pub fn closed(&self) -> bool {
        self.shared.check_open("").is_err()
    }

    /// Whether the location sits behind the fault decorator.
    #[wasm_bindgen(getter, js_name = hasFaults)]
    pub fn has_faults(&self) -> bool {
        self.shared.faults.is_some()
    }

    /// Changes the decorator's probabilities (a location opened without `faults` refuses).
    #[wasm_bindgen(js_name = setFaults)]
    pub fn set_faults(
        &self,
        #[wasm_bindgen(unchecked_param_type = "FaultSettings")] settings: JsValue,
    ) -> Result<(), JsValue> {
        self.shared.check_open("setFaults")?;
        let settings =
            Options::required(&settings, "settings", &["shouldHappen", "shouldTimeout"])?;
        let happen = settings.parse_required("shouldHappen", convert::probability)?;
        let timeout = settings.parse_required("shouldTimeout", convert::probability)?;
        let Some(handle) = &self.shared.faults else {
            return Err(LibError::new(
                "InvalidUsage",
                "setFaults: this location was opened without the fault decorator (pass options.faults)",
            )
            .into());
        };
        handle.partially_available(happen, timeout);
        Ok(())
    }

    /// What the decorator injected so far, or `null` without one.
    #[wasm_bindgen(js_name = faultCounts, unchecked_return_type = "FaultCounts | null")]
    pub fn fault_counts(&self) -> Result<JsValue, JsValue> {
        let Some(handle) = &self.shared.faults else {
            return Ok(JsValue::NULL);
        };
        let c = handle.counts();
        Ok(convert::to_js(&FaultCounts {
            ok: c.ok as f64,
            failed: c.failed as f64,
            timed_out_without_happening: c.timed_out_without_happening as f64,
            happened_then_timed_out: c.happened_then_timed_out as f64,
        })?)
    }

    /// Closes the location for good: calls in flight reject with code `"Closed"`, later calls
    /// too, write tasks stop, and an IndexedDB connection closes.
    pub fn close(&self) {
        self.shared.close();
    }
}

/// What `runLocationConformance` found for one service.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null)]
pub struct SuiteReport {
    /// Whether every case of the suite held.
    pub passed: bool,
    /// The first case that broke (with what the store returned), or the unexpected storage
    /// error; `null` if it passed.
    pub failure: Option<String>,
}

/// What `runLocationConformance` found.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null)]
pub struct ConformanceReport {
    /// Both suites passed.
    pub passed: bool,
    /// The Blob suite.
    pub blob: SuiteReport,
    /// The Consensus suite.
    pub consensus: SuiteReport,
}

fn suite(r: Result<(), crate::location::conformance::ConformanceError>) -> SuiteReport {
    SuiteReport {
        passed: r.is_ok(),
        failure: r.err().map(|e| e.to_string()),
    }
}

/// Runs the crate's Blob and Consensus conformance suites (`src/location/conformance.rs`, the
/// ones every built-in backend passes) against `location`, and reports what held. Run it on an
/// **empty** store: the suites expect to start from nothing, and write and delete keys
/// (`shard/part0`, `s00000000-…`, `s-max`, …). A broken case or a storage error is reported,
/// not thrown; the promise rejects only if the location is closed.
#[wasm_bindgen(js_name = runLocationConformance, unchecked_return_type = "Promise<ConformanceReport>")]
pub fn run_location_conformance(location: &JsPersistLocation) -> Promise {
    let shared = Rc::clone(&location.shared);
    convert::promise(async move {
        let loc = shared.location().clone();
        let (blob, consensus) = (loc.blob.clone(), loc.consensus.clone());
        let report = shared
            .run("runLocationConformance", None, async move {
                let b = crate::location::conformance::blob_conformance(|| {
                    let blob = Rc::clone(&blob);
                    async move { Ok(blob) }
                })
                .await;
                let c = crate::location::conformance::consensus_conformance(|| {
                    let consensus = Rc::clone(&consensus);
                    async move { Ok(consensus) }
                })
                .await;
                Ok((suite(b), suite(c)))
            })
            .await?;
        let (blob, consensus) = report;
        Ok(convert::to_js(&ConformanceReport {
            passed: blob.passed && consensus.passed,
            blob,
            consensus,
        })?)
    })
}
