//! What the library's handles share: [`ClientCtx`] (a client, its location and its call bound)
//! and [`Slot`] (one handle, its calls queued one at a time and cancelled when it is taken).
//! A leaf of the library: it knows the location and the errors, no JS class.
//!
//! Invariant: once a slot is taken, every call on it, running, queued or later, rejects with
//! code `"Expired"` and says why.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;

use super::errors::{LibError, LibResult};
use super::location::{CallSet, LocationShared};
use crate::persist::PersistClient;
use crate::runtime::Runtime;

/// What the handles of one client share: the core client, its location and its call bound.
#[derive(Clone)]
pub(crate) struct ClientCtx {
    pub client: PersistClient,
    pub location: Rc<LocationShared>,
    pub runtime: Runtime,
    pub call_timeout_ms: Option<u64>,
}

impl ClientCtx {
    /// Runs `fut` as a call on the location (see [`LocationShared::run`]).
    pub async fn call<T>(
        &self,
        what: &str,
        fut: impl Future<Output = LibResult<T>>,
    ) -> LibResult<T> {
        let timeout = self.call_timeout_ms.map(|ms| (&self.runtime, ms));
        self.location.run(what, timeout, fut).await
    }
}

/// A handle that is taken by the calls that consume it (expire, listen) and queued otherwise.
/// Taking it cancels the calls still running or queued on it (they reject with code
/// `"Expired"`), so that `expire()` never waits behind a `next()` that waits for data.
pub(crate) struct Slot<H> {
    what: &'static str,
    id: String,
    handle: futures::lock::Mutex<Option<H>>,
    gone: RefCell<&'static str>,
    calls: CallSet,
}

impl<H> Slot<H> {
    pub fn new(what: &'static str, id: String, handle: H) -> Rc<Self> {
        Rc::new(Slot {
            what,
            id,
            handle: futures::lock::Mutex::new(Some(handle)),
            gone: RefCell::new(""),
            calls: CallSet::default(),
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    fn gone_error(&self, op: &str) -> LibError {
        LibError::expired(format!(
            "{op}: {} {} {}; open a new one",
            self.what,
            self.id,
            self.gone.borrow()
        ))
    }

    /// Whether the handle was taken.
    pub fn is_gone(&self) -> bool {
        !self.gone.borrow().is_empty()
    }

    /// Runs `f` on the handle once earlier calls are done.
    pub async fn with<T>(
        &self,
        op: &str,
        f: impl AsyncFnOnce(&mut H) -> LibResult<T>,
    ) -> LibResult<T> {
        let call = self
            .calls
            .run(Box::pin(async {
                let mut guard = self.handle.lock().await;
                match guard.as_mut() {
                    Some(h) => f(h).await,
                    None => Err(self.gone_error(op)),
                }
            }))
            .await;
        call.unwrap_or_else(|_aborted| Err(self.gone_error(op)))
    }

    /// Takes the handle, cancelling the calls on it; later calls fail saying `why`.
    pub async fn take(&self, op: &str, why: &'static str) -> LibResult<H> {
        // Set before cancelling, so that the cancelled calls say why.
        if self.gone.borrow().is_empty() {
            *self.gone.borrow_mut() = why;
        }
        self.calls.cancel_all();
        let mut guard = self.handle.lock().await;
        guard.take().ok_or_else(|| self.gone_error(op))
    }
}
