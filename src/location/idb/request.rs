//! The request plumbing of the IndexedDB location: IndexedDB's event callbacks turned into
//! futures, and JS errors turned into [`ExternalError`]s.
//!
//! Every wait removes its handlers when it returns or is dropped, so a cancelled wait never
//! leaves a dangling Rust closure behind.

use std::cell::RefCell;
use std::rc::Rc;

use futures::channel::oneshot;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{DomException, Event, IdbFactory, IdbRequest, IdbTransaction};

use crate::location::ExternalError;

pub(super) fn js_err(context: &str, err: JsValue) -> ExternalError {
    let detail = if let Some(dom) = err.dyn_ref::<DomException>() {
        format!("{}: {}", dom.name(), dom.message())
    } else if let Some(e) = err.dyn_ref::<js_sys::Error>() {
        String::from(e.message())
    } else if err.is_null() || err.is_undefined() {
        "no error object".to_string()
    } else {
        format!("{err:?}")
    };
    ExternalError::determinate(format!("indexeddb {context}: {detail}"))
}

pub(super) fn factory() -> Result<IdbFactory, ExternalError> {
    let global = js_sys::global();
    let factory = if let Some(window) = global.dyn_ref::<web_sys::Window>() {
        window.indexed_db()
    } else if let Some(worker) = global.dyn_ref::<web_sys::WorkerGlobalScope>() {
        worker.indexed_db()
    } else {
        return Err(ExternalError::determinate(
            "indexeddb is not available here (no window or worker global)",
        ));
    };
    factory
        .map_err(|e| js_err("open factory", e))?
        .ok_or_else(|| ExternalError::determinate("indexeddb is not available in this browser"))
}

/// Waits for one `success` or `error` event of `req`. The handlers are removed when this returns
/// or is dropped, so a cancelled wait never leaves a dangling Rust closure behind.
pub(super) async fn await_request(
    req: &IdbRequest,
    context: &str,
) -> Result<JsValue, ExternalError> {
    let (tx, rx) = oneshot::channel::<Result<JsValue, JsValue>>();
    let tx = Rc::new(RefCell::new(Some(tx)));
    let (req_ok, tx_ok) = (req.clone(), Rc::clone(&tx));
    let on_success = Closure::<dyn FnMut(Event)>::new(move |_e: Event| {
        if let Some(tx) = tx_ok.borrow_mut().take() {
            let _ = tx.send(req_ok.result());
        }
    });
    let (req_err, tx_err) = (req.clone(), Rc::clone(&tx));
    let on_error = Closure::<dyn FnMut(Event)>::new(move |_e: Event| {
        if let Some(tx) = tx_err.borrow_mut().take() {
            let err = match req_err.error() {
                Ok(Some(dom)) => dom.into(),
                Ok(None) => JsValue::NULL,
                Err(e) => e,
            };
            let _ = tx.send(Err(err));
        }
    });
    req.set_onsuccess(Some(on_success.as_ref().unchecked_ref()));
    req.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    let _guard = HandlerGuard(Box::new({
        let req = req.clone();
        move || {
            req.set_onsuccess(None);
            req.set_onerror(None);
        }
    }));
    let result = rx.await;
    drop((on_success, on_error));
    match result {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(js_err(context, err)),
        Err(_canceled) => Err(ExternalError::indeterminate(format!(
            "indexeddb {context}: request dropped without an answer"
        ))),
    }
}

/// Runs its closure on drop (detaches JS event handlers before their Rust closures go away).
pub(super) struct HandlerGuard(Box<dyn Fn()>);

impl Drop for HandlerGuard {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// Commits `tx` and waits for `complete` (success) or `abort`/`error` (nothing was written).
pub(super) async fn commit(tx: &IdbTransaction, context: &str) -> Result<(), ExternalError> {
    let (send, recv) = oneshot::channel::<Result<(), JsValue>>();
    let send = Rc::new(RefCell::new(Some(send)));
    let s1 = Rc::clone(&send);
    let on_complete = Closure::<dyn FnMut(Event)>::new(move |_e: Event| {
        if let Some(s) = s1.borrow_mut().take() {
            let _ = s.send(Ok(()));
        }
    });
    let (s2, tx2) = (Rc::clone(&send), tx.clone());
    let on_abort = Closure::<dyn FnMut(Event)>::new(move |_e: Event| {
        if let Some(s) = s2.borrow_mut().take() {
            let err = tx2.error().map(JsValue::from).unwrap_or(JsValue::NULL);
            let _ = s.send(Err(err));
        }
    });
    tx.set_oncomplete(Some(on_complete.as_ref().unchecked_ref()));
    tx.set_onabort(Some(on_abort.as_ref().unchecked_ref()));
    tx.set_onerror(Some(on_abort.as_ref().unchecked_ref()));
    let _guard = HandlerGuard(Box::new({
        let tx = tx.clone();
        move || {
            tx.set_oncomplete(None);
            tx.set_onabort(None);
            tx.set_onerror(None);
        }
    }));
    // commit() throws if the transaction already finished; its outcome still arrives as an event.
    // (web-sys marks `commit` deprecated, but it is standard IndexedDB and supported by Chromium.)
    #[allow(deprecated)]
    let _ = tx.commit();
    let result = recv.await;
    drop((on_complete, on_abort));
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(js_err(&format!("{context}: transaction aborted"), err)),
        Err(_canceled) => Err(ExternalError::indeterminate(format!(
            "indexeddb {context}: transaction outcome unknown"
        ))),
    }
}
