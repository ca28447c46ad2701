//! The life of one IndexedDB connection: opening (creating or upgrading the database), stepping
//! aside on `versionchange`, reopening once, and closing for good.
//!
//! A connection is in one of three states:
//! - **open**: it serves transactions;
//! - **stepped aside**: another connection (another tab, or this page's own reset) is deleting
//!   or upgrading the database, which fires `versionchange` here; or the browser closed the
//!   connection (`close`, as when site data is cleared). The connection closes itself at once, so
//!   that it never blocks the other one. Its next call **reopens it once**, if the database still
//!   exists;
//! - **closed for good**: closed by its owner ([`super::IdbLocation::close`]), the database gone,
//!   upgraded past [`DB_VERSION`] by newer code, or the one reopen failed. Every call then fails
//!   at once with a permanent error that names the database and says why: nothing is retried,
//!   so no caller spins at its back-off cap against a connection that will never come back.
//!
//! "Still exists" is decided by the reopen itself, without a race: it opens at [`DB_VERSION`],
//! and an `upgradeneeded` from version 0 (the database is not there) aborts the upgrade, so the
//! open fails and no empty database is created where the deleted one was. A database that was
//! deleted and created again (a reset) exists: the reopen succeeds, and the callers find
//! whatever the new database holds (persist and the oracle then notice that their state is gone).
//!
//! Each stepping aside allows one reopen, and a call reopens at most once, so every call ends in
//! bounded time.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use js_sys::Array;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{
    DomException, Event, IdbDatabase, IdbOpenDbRequest, IdbTransaction, IdbTransactionMode,
    IdbVersionChangeEvent,
};

use super::request::{await_request, factory, js_err};
use crate::location::{BrokenAt, ExternalError, PermanentKind};

/// The schema version of the database. Bump it (and extend `upgrade`) to change the layout.
pub const DB_VERSION: u32 = 1;
pub(super) const BLOB: &str = "blob";
pub(super) const BLOB_TRASH: &str = "blob_trash";
pub(super) const CONSENSUS: &str = "consensus";

/// The error of every call on a connection closed for good: permanent, it will not heal. It
/// names the database (as the store) and says why.
pub(super) fn closed_for_good(name: &str, why: &str) -> ExternalError {
    ExternalError::permanent(
        format!("indexeddb {name}"),
        BrokenAt::Store,
        PermanentKind::Closed,
        format!("connection closed for good: {why}"),
    )
}

/// A connection and the handlers that make it step aside.
struct OpenDb {
    db: IdbDatabase,
    /// Set (with the reason) by the handlers, which only ever close their own `db`; the state
    /// machine reads it at the next call, outside any handler.
    stepped_aside: Rc<RefCell<Option<String>>>,
    _on_versionchange: Closure<dyn FnMut(Event)>,
    _on_close: Closure<dyn FnMut(Event)>,
}

impl Drop for OpenDb {
    fn drop(&mut self) {
        self.db.set_onversionchange(None);
        self.db.set_onclose(None);
        self.db.close();
    }
}

enum ConnState {
    Open(OpenDb),
    SteppedAside { why: String },
    Closed { why: String },
}

/// One connection to the database `name`, through the states in the module docs.
pub(super) struct Connection {
    name: String,
    state: RefCell<ConnState>,
    // Reopens run one at a time; a waiter finds the state already changed.
    reopening: futures::lock::Mutex<()>,
    reopens: Cell<u64>,
}

/// Why an open failed.
enum OpenFailure {
    /// Only an existing database was to be opened, and there is none.
    Gone,
    /// The database is at a newer schema version than this code knows.
    TooNew(String),
    /// Anything else.
    Failed(ExternalError),
}

impl Connection {
    /// Opens (creating or upgrading as needed) the database `name`.
    pub(super) async fn open(name: &str) -> Result<Connection, ExternalError> {
        let db = match open_db(name, false).await {
            Ok(db) => db,
            Err(OpenFailure::TooNew(detail)) => return Err(closed_for_good(name, &detail)),
            Err(OpenFailure::Failed(err)) => return Err(err),
            Err(OpenFailure::Gone) => {
                return Err(ExternalError::determinate(format!(
                    "indexeddb {name}: the database vanished while it was being created"
                )))
            }
        };
        Ok(Connection {
            name: name.to_string(),
            state: RefCell::new(ConnState::Open(db)),
            reopening: futures::lock::Mutex::new(()),
            reopens: Cell::new(0),
        })
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Whether the connection is not open now (stepped aside, or closed for good).
    pub(super) fn is_closed(&self) -> bool {
        match &*self.state.borrow() {
            ConnState::Open(open) => open.stepped_aside.borrow().is_some(),
            ConnState::SteppedAside { .. } | ConnState::Closed { .. } => true,
        }
    }

    /// Whether the connection is closed for good.
    pub(super) fn is_closed_for_good(&self) -> bool {
        matches!(&*self.state.borrow(), ConnState::Closed { .. })
    }

    /// How many times the connection reopened after stepping aside.
    pub(super) fn reopens(&self) -> u64 {
        self.reopens.get()
    }

    /// Closes the connection for good.
    pub(super) fn close(&self, why: &str) {
        // Drops the open connection (closing it) here, outside any handler.
        let old = self.state.replace(ConnState::Closed {
            why: why.to_string(),
        });
        drop(old);
    }

    /// Begins a transaction, reopening the connection once if it stepped aside.
    pub(super) async fn transaction(
        &self,
        stores: &[&str],
        mode: IdbTransactionMode,
    ) -> Result<IdbTransaction, ExternalError> {
        let names: Array = stores.iter().map(|s| JsValue::from_str(s)).collect();
        let mut reopened = false;
        loop {
            if let Some(tx) = self.try_begin(&names, mode)? {
                return Ok(tx);
            }
            if reopened {
                // Stepped aside again right after its reopen: this call does not chase it.
                return Err(ExternalError::determinate(format!(
                    "indexeddb {}: the connection stepped aside again right after reopening",
                    self.name
                )));
            }
            self.reopen().await;
            reopened = true;
        }
    }

    /// A transaction on the open connection; `None` if it has stepped aside (now noted).
    fn try_begin(
        &self,
        names: &Array,
        mode: IdbTransactionMode,
    ) -> Result<Option<IdbTransaction>, ExternalError> {
        let mut state = self.state.borrow_mut();
        let began = match &*state {
            ConnState::Closed { why } => return Err(closed_for_good(&self.name, why)),
            ConnState::SteppedAside { .. } => return Ok(None),
            ConnState::Open(open) => {
                let stepped_aside = open.stepped_aside.borrow().clone();
                match stepped_aside {
                    Some(why) => Err(why),
                    None => Ok(open.db.transaction_with_str_sequence_and_mode(names, mode)),
                }
            }
        };
        let why = match began {
            Ok(Ok(tx)) => return Ok(Some(tx)),
            // The browser closed the connection before its `close` event arrived.
            Ok(Err(e)) if dom_name(&e).as_deref() == Some("InvalidStateError") => {
                format!(
                    "the connection was closed under this call ({})",
                    js_err("", e)
                )
            }
            Ok(Err(e)) => return Err(js_err("begin transaction", e)),
            Err(why) => why,
        };
        // Drops the old connection here, outside its handlers.
        *state = ConnState::SteppedAside { why };
        Ok(None)
    }

    /// Reopens a connection that stepped aside, once; afterwards it is open or closed for good.
    async fn reopen(&self) {
        let _one_at_a_time = self.reopening.lock().await;
        let why = match &*self.state.borrow() {
            ConnState::SteppedAside { why } => why.clone(),
            // Another call reopened or closed it meanwhile.
            ConnState::Open(_) | ConnState::Closed { .. } => return,
        };
        let next = match open_db(&self.name, true).await {
            Ok(db) => {
                self.reopens.set(self.reopens.get() + 1);
                web_sys::console::info_1(&JsValue::from_str(&format!(
                    "indexeddb {}: reopened after {why}",
                    self.name
                )));
                ConnState::Open(db)
            }
            Err(OpenFailure::Gone) => ConnState::Closed {
                why: format!("{why}, and the database no longer exists"),
            },
            Err(OpenFailure::TooNew(detail)) => ConnState::Closed {
                why: format!("{why}, and {detail}"),
            },
            Err(OpenFailure::Failed(err)) => ConnState::Closed {
                why: format!("{why}, and reopening failed: {err}"),
            },
        };
        // The owner may have closed it for good while the reopen ran: that stands.
        let mut state = self.state.borrow_mut();
        if matches!(&*state, ConnState::SteppedAside { .. }) {
            *state = next;
        }
    }
}

fn dom_name(err: &JsValue) -> Option<String> {
    err.dyn_ref::<DomException>().map(|d| d.name())
}

/// Opens the database `name` at [`DB_VERSION`]. With `existing_only`, a database that is not
/// there is not created: the open fails as [`OpenFailure::Gone`].
async fn open_db(name: &str, existing_only: bool) -> Result<OpenDb, OpenFailure> {
    let open_req: IdbOpenDbRequest = factory()
        .map_err(OpenFailure::Failed)?
        .open_with_u32(name, DB_VERSION)
        .map_err(|e| OpenFailure::Failed(js_err("open", e)))?;
    let upgrade_req = open_req.clone();
    let upgrade_error: Rc<RefCell<Option<ExternalError>>> = Rc::new(RefCell::new(None));
    let gone = Rc::new(Cell::new(false));
    let (upgrade_error2, gone2) = (Rc::clone(&upgrade_error), Rc::clone(&gone));
    let on_upgrade = Closure::<dyn FnMut(Event)>::new(move |e: Event| {
        let from_version = e
            .dyn_ref::<IdbVersionChangeEvent>()
            .map_or(0.0, |v| v.old_version());
        if existing_only && from_version == 0.0 {
            // The database is not there: abort its creation, so the open fails.
            gone2.set(true);
            if let Some(tx) = upgrade_req.transaction() {
                let _ = tx.abort();
            }
            return;
        }
        if let Err(err) = upgrade(&upgrade_req) {
            *upgrade_error2.borrow_mut() = Some(err);
        }
    });
    let db_name = name.to_string();
    let on_blocked = Closure::<dyn FnMut(Event)>::new(move |_e: Event| {
        web_sys::console::warn_1(&JsValue::from_str(&format!(
            "indexeddb {db_name}: open is blocked by another connection; waiting for it to close"
        )));
    });
    open_req.set_onupgradeneeded(Some(on_upgrade.as_ref().unchecked_ref()));
    open_req.set_onblocked(Some(on_blocked.as_ref().unchecked_ref()));
    let result = await_request(&open_req, "open").await;
    open_req.set_onupgradeneeded(None);
    open_req.set_onblocked(None);
    drop((on_upgrade, on_blocked));
    if gone.get() {
        return Err(OpenFailure::Gone);
    }
    if let Some(err) = upgrade_error.borrow_mut().take() {
        return Err(OpenFailure::Failed(err));
    }
    let db: IdbDatabase = match result {
        Ok(db) => db
            .dyn_into()
            .map_err(|v| OpenFailure::Failed(js_err("open: not a database", v)))?,
        Err(err) if err.to_string().contains("VersionError") => {
            return Err(OpenFailure::TooNew(format!(
                "the database is at a newer schema version than this code's {DB_VERSION} \
                 ({err})"
            )))
        }
        Err(err) => return Err(OpenFailure::Failed(err)),
    };
    Ok(watch(db))
}

/// Installs the handlers that make `db` step aside.
fn watch(db: IdbDatabase) -> OpenDb {
    let stepped_aside: Rc<RefCell<Option<String>>> = Rc::new(RefCell::new(None));
    let (db2, flag) = (db.clone(), Rc::clone(&stepped_aside));
    let on_versionchange = Closure::<dyn FnMut(Event)>::new(move |e: Event| {
        // Step aside at once, so the other connection's upgrade or deletion is not blocked.
        db2.close();
        let why = match e
            .dyn_ref::<IdbVersionChangeEvent>()
            .and_then(|v| v.new_version())
        {
            None => "another connection deleted the database".to_string(),
            Some(v) => format!("another connection upgraded the database to version {v}"),
        };
        flag.borrow_mut().get_or_insert(why);
    });
    let flag = Rc::clone(&stepped_aside);
    let on_close = Closure::<dyn FnMut(Event)>::new(move |_e: Event| {
        flag.borrow_mut()
            .get_or_insert_with(|| "the browser closed the connection".to_string());
    });
    db.set_onversionchange(Some(on_versionchange.as_ref().unchecked_ref()));
    db.set_onclose(Some(on_close.as_ref().unchecked_ref()));
    OpenDb {
        db,
        stepped_aside,
        _on_versionchange: on_versionchange,
        _on_close: on_close,
    }
}

/// Creates whatever object stores version [`DB_VERSION`] needs and the database lacks.
fn upgrade(req: &IdbOpenDbRequest) -> Result<(), ExternalError> {
    let db: IdbDatabase = req
        .result()
        .map_err(|e| js_err("upgrade", e))?
        .dyn_into()
        .map_err(|v| js_err("upgrade: not a database", v))?;
    let existing = db.object_store_names();
    for name in [BLOB, BLOB_TRASH, CONSENSUS] {
        if !existing.contains(name) {
            db.create_object_store(name)
                .map_err(|e| js_err("create object store", e))?;
        }
    }
    Ok(())
}
