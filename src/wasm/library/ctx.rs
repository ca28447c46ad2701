//! What the library's handles share: [`ClientCtx`] (a client, its location and its call bound)
//! and [`Slot`] (one handle, its calls queued one at a time and cancelled when it is taken),
//! with the two calls every handle class makes the same way ([`heartbeat`], [`expire`]) and the
//! read of a shard's contents now ([`contents_now`]).
//! A leaf of the library: it knows the location, the conversions and the errors, no JS class.
//!
//! Invariant: once a slot is taken, every call on it, running, queued or later, rejects with
//! code `"Expired"` and says why.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;

use js_sys::Promise;
use timely::progress::Antichain;
use wasm_bindgen::JsValue;

use super::convert;
use super::errors::{LibError, LibResult};
use super::location::{CallSet, LocationShared};
use crate::persist::codec::{Codec, Timestamp};
use crate::persist::read::Update;
use crate::persist::{PersistClient, ShardId};
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

/// A handle class's `heartbeat()`: `beat` on the handle in `slot`, as a call on the location.
/// A taken (expired) handle rejects with code `"Expired"`.
pub(crate) fn heartbeat<H: 'static>(
    ctx: &ClientCtx,
    slot: &Rc<Slot<H>>,
    beat: impl AsyncFnOnce(&mut H) -> LibResult<()> + 'static,
) -> Promise {
    let (ctx, slot) = (ctx.clone(), Rc::clone(slot));
    convert::promise(async move {
        let op = "heartbeat";
        ctx.call(op, slot.with(op, beat)).await?;
        Ok(JsValue::UNDEFINED)
    })
}

/// A handle class's `expire()`: takes the handle from `slot` (cancelling the calls on it) and
/// runs `expire` on it as a call on the location. Every later call rejects with code
/// `"Expired"`.
pub(crate) fn expire<H: 'static>(
    ctx: &ClientCtx,
    slot: &Rc<Slot<H>>,
    expire: impl AsyncFnOnce(H) + 'static,
) -> Promise {
    let (ctx, slot) = (ctx.clone(), Rc::clone(slot));
    convert::promise(async move {
        let handle = slot.take("expire", "has expired").await?;
        ctx.call("expire", async move {
            expire(handle).await;
            Ok(())
        })
        .await?;
        Ok(JsValue::UNDEFINED)
    })
}

/// What `shard` holds now, read by a fresh leased reader (expired after): the shard's upper, the
/// time read at (`upper - 1`, or the since once that has passed it: `persist::contents`; `None`:
/// nothing can be there yet) and the updates there.
#[allow(clippy::type_complexity)]
pub(crate) async fn contents_now<K: Codec, V: Codec>(
    client: &PersistClient,
    shard: &ShardId,
) -> LibResult<(Antichain<Timestamp>, Option<Timestamp>, Vec<Update<K, V>>)> {
    let upper = client.inspect_state(shard).await?.upper().clone();
    let mut reader = client.open_leased_reader::<K, V>(shard).await?;
    let (as_of, rows) = match reader.contents_at_upper(&upper) {
        Some((as_of, read)) => (Some(as_of), read.await),
        None => (None, Ok(Vec::new())),
    };
    reader.expire().await;
    Ok((upper, as_of, rows?))
}
