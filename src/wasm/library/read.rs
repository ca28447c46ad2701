//! `ReadHandle` and `Listen` in JS: reading a shard.
//!
//! - `snapshot(asOf)`: the contents at `asOf` (every update at a time `<= asOf`, its time
//!   advanced to `asOf`, consolidated). `asOf` before the reader's since rejects with code
//!   `"SinceViolation"`; at or beyond the upper it waits until the upper passes it.
//! - `listen(asOf)`: every update at a time beyond `asOf`, batch by batch, each batch followed by
//!   its progress. The reader moves into the listen: later calls on the reader reject with code
//!   `"Expired"`.
//! - `subscribe(asOf)`: a snapshot at `asOf`, then a listen from `asOf`.
//!
//! A `Listen` is also an async iterator (`for await (const events of listen)`), added by the
//! package's entry point.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::Promise;
use serde::Serialize;
use timely::progress::Antichain;
use timely::PartialOrder;
use tsify::Tsify;
use wasm_bindgen::prelude::*;

use super::convert;
use super::ctx::{self, ClientCtx, Slot};
use super::errors::LibResult;
use crate::persist::codec::Timestamp;
use crate::persist::error::InvalidUsage;
use crate::persist::read::{Listen, ListenEvent, ReadHandle, Update};

#[wasm_bindgen(typescript_custom_section)]
const TS_READ: &'static str = r#"
/** What `ReadHandle.subscribe` resolves to. */
export interface Subscription {
    snapshot: UpdateView[];
    listen: Listen;
}
"#;

/// One update read from a shard.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct UpdateView {
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
    /// The time (for a snapshot: the as-of).
    pub time: f64,
    /// The diff (a bigint: diffs are 64-bit).
    pub diff: i64,
}

/// What a listen delivers: updates of the next batch, then that batch's progress.
#[derive(Serialize, Tsify)]
#[serde(tag = "type", rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub enum ListenEventView {
    /// Updates at times in the last interval (unordered, not consolidated).
    Updates {
        /// The updates.
        updates: Vec<UpdateView>,
    },
    /// Every update before `frontier` has been delivered.
    Progress {
        /// The new frontier (`null`: the shard is finished).
        frontier: Option<f64>,
    },
}

fn update_views(updates: Vec<Update<String, String>>) -> LibResult<Vec<UpdateView>> {
    updates
        .into_iter()
        .map(|((key, value), t, diff)| {
            Ok(UpdateView {
                key,
                value,
                time: convert::ms(t, "an update's time")?,
                diff,
            })
        })
        .collect()
}

fn updates_js(updates: Vec<Update<String, String>>) -> LibResult<JsValue> {
    let out = js_sys::Array::new();
    for u in update_views(updates)? {
        out.push(&convert::to_js(&u)?);
    }
    Ok(out.into())
}

fn check_since(since: &Antichain<Timestamp>, as_of: &Antichain<Timestamp>) -> LibResult<()> {
    if !PartialOrder::less_equal(since, as_of) {
        return Err(InvalidUsage::SinceViolation {
            as_of: as_of.clone(),
            since: since.clone(),
        }
        .into());
    }
    Ok(())
}

/// A leased reader of one shard. See the module docs.
#[wasm_bindgen(js_name = ReadHandle)]
pub struct JsReadHandle {
    ctx: ClientCtx,
    slot: Rc<Slot<ReadHandle<String, String>>>,
    shard: String,
    since: Rc<RefCell<Antichain<Timestamp>>>,
}

impl JsReadHandle {
    pub(crate) fn new(ctx: ClientCtx, handle: ReadHandle<String, String>) -> Self {
        JsReadHandle {
            shard: handle.shard_id().0.clone(),
            since: Rc::new(RefCell::new(handle.since().clone())),
            slot: Slot::new("reader", handle.reader_id().0.clone(), handle),
            ctx,
        }
    }

    /// Takes the handle into a listen at `as_of`, checking the since first so that a bad
    /// `as_of` leaves the reader usable.
    async fn into_listen(
        ctx: &ClientCtx,
        slot: &Slot<ReadHandle<String, String>>,
        op: &str,
        as_of: Antichain<Timestamp>,
    ) -> LibResult<JsListen> {
        slot.with(op, async |h| check_since(h.since(), &as_of))
            .await?;
        let handle = slot.take(op, "was moved into a listen").await?;
        let listen = ctx
            .call(op, async move { Ok(handle.listen(as_of).await?) })
            .await?;
        Ok(JsListen::new(ctx.clone(), listen, slot.id().to_string()))
    }
}

#[wasm_bindgen(js_class = ReadHandle)]
impl JsReadHandle {
    /// The reader's id.
    #[wasm_bindgen(getter, js_name = readerId)]
    pub fn reader_id(&self) -> String {
        self.slot.id().to_string()
    }

    /// The shard.
    #[wasm_bindgen(getter, js_name = shardId)]
    pub fn shard_id(&self) -> String {
        self.shard.clone()
    }

    /// This reader's since: it may read at any time at or beyond it.
    #[wasm_bindgen(getter, unchecked_return_type = "Frontier")]
    pub fn since(&self) -> Result<JsValue, JsValue> {
        let since = convert::frontier_out(&self.since.borrow(), "the since")?;
        Ok(since.map_or(JsValue::NULL, JsValue::from_f64))
    }

    /// Whether the reader expired or moved into a listen.
    #[wasm_bindgen(getter)]
    pub fn expired(&self) -> bool {
        self.slot.is_gone()
    }

    /// The contents at `asOf`; see the module docs.
    #[wasm_bindgen(unchecked_return_type = "Promise<UpdateView[]>")]
    pub fn snapshot(
        &self,
        #[wasm_bindgen(js_name = asOf, unchecked_param_type = "Time")] as_of: JsValue,
    ) -> Promise {
        let (ctx, slot) = (self.ctx.clone(), Rc::clone(&self.slot));
        convert::promise(async move {
            let as_of = convert::frontier(&as_of, "asOf", false)?;
            let op = "snapshot";
            let updates = ctx
                .call(
                    op,
                    slot.with(op, async |h| Ok(h.snapshot_and_fetch(as_of).await?)),
                )
                .await?;
            Ok(updates_js(updates)?)
        })
    }

    /// Moves this reader's since forward to `since` (`null`: done reading) and heartbeats its
    /// lease; a since behind the current one changes nothing.
    #[wasm_bindgen(js_name = downgradeSince, unchecked_return_type = "Promise<void>")]
    pub fn downgrade_since(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Frontier")] since: JsValue,
    ) -> Promise {
        let (ctx, slot, known) = (
            self.ctx.clone(),
            Rc::clone(&self.slot),
            Rc::clone(&self.since),
        );
        convert::promise(async move {
            let since = convert::frontier(&since, "since", true)?;
            let op = "downgradeSince";
            ctx.call(
                op,
                slot.with(op, async |h| {
                    h.downgrade_since(&since).await?;
                    *known.borrow_mut() = h.since().clone();
                    Ok(())
                }),
            )
            .await?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// A listen over every update beyond `asOf`; the reader moves into it.
    #[wasm_bindgen(unchecked_return_type = "Promise<Listen>")]
    pub fn listen(
        &self,
        #[wasm_bindgen(js_name = asOf, unchecked_param_type = "Time")] as_of: JsValue,
    ) -> Promise {
        let (ctx, slot) = (self.ctx.clone(), Rc::clone(&self.slot));
        convert::promise(async move {
            let as_of = convert::frontier(&as_of, "asOf", false)?;
            Ok(Self::into_listen(&ctx, &slot, "listen", as_of)
                .await?
                .into())
        })
    }

    /// A snapshot at `asOf`, then a listen from `asOf`; the reader moves into the listen.
    #[wasm_bindgen(unchecked_return_type = "Promise<Subscription>")]
    pub fn subscribe(
        &self,
        #[wasm_bindgen(js_name = asOf, unchecked_param_type = "Time")] as_of: JsValue,
    ) -> Promise {
        let (ctx, slot) = (self.ctx.clone(), Rc::clone(&self.slot));
        convert::promise(async move {
            let as_of = convert::frontier(&as_of, "asOf", false)?;
            let op = "subscribe";
            let a = as_of.clone();
            let snapshot = ctx
                .call(
                    op,
                    slot.with(op, async |h| Ok(h.snapshot_and_fetch(a).await?)),
                )
                .await?;
            let listen = Self::into_listen(&ctx, &slot, op, as_of).await?;
            let out = js_sys::Object::new();
            let set = |k: &str, v: &JsValue| js_sys::Reflect::set(&out, &k.into(), v);
            set("snapshot", &updates_js(snapshot)?)?;
            set("listen", &listen.into())?;
            Ok(out.into())
        })
    }

    /// Keeps the reader's lease alive; an expired reader rejects with code `"Expired"`.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn heartbeat(&self) -> Promise {
        ctx::heartbeat(&self.ctx, &self.slot, async |h| Ok(h.heartbeat().await?))
    }

    /// Removes the reader, releasing its hold on the since.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn expire(&self) -> Promise {
        ctx::expire(&self.ctx, &self.slot, ReadHandle::expire)
    }
}

/// An ongoing listen. See the module docs.
#[wasm_bindgen(js_name = Listen)]
pub struct JsListen {
    ctx: ClientCtx,
    slot: Rc<Slot<Listen<String, String>>>,
    frontier: Rc<RefCell<Antichain<Timestamp>>>,
}

impl JsListen {
    fn new(ctx: ClientCtx, listen: Listen<String, String>, reader_id: String) -> Self {
        JsListen {
            frontier: Rc::new(RefCell::new(listen.frontier().clone())),
            slot: Slot::new("listen of reader", reader_id, listen),
            ctx,
        }
    }
}

#[wasm_bindgen(js_class = Listen)]
impl JsListen {
    /// Every update before this frontier has been delivered (`null`: the shard is finished).
    #[wasm_bindgen(getter, unchecked_return_type = "Frontier")]
    pub fn frontier(&self) -> Result<JsValue, JsValue> {
        let f = convert::frontier_out(&self.frontier.borrow(), "the frontier")?;
        Ok(f.map_or(JsValue::NULL, JsValue::from_f64))
    }

    /// Waits for the next batch: resolves to its updates (if any), then its progress. Once the
    /// shard is finished it resolves to `[]`.
    #[wasm_bindgen(unchecked_return_type = "Promise<ListenEventView[]>")]
    pub fn next(&self) -> Promise {
        let (ctx, slot, known) = (
            self.ctx.clone(),
            Rc::clone(&self.slot),
            Rc::clone(&self.frontier),
        );
        convert::promise(async move {
            let op = "next";
            let events = ctx
                .call(
                    op,
                    slot.with(op, async |l| {
                        let events = l.next().await?;
                        *known.borrow_mut() = l.frontier().clone();
                        Ok(events)
                    }),
                )
                .await?;
            let out = js_sys::Array::new();
            for e in events {
                let view = match e {
                    ListenEvent::Updates(u) => ListenEventView::Updates {
                        updates: update_views(u)?,
                    },
                    ListenEvent::Progress(f) => ListenEventView::Progress {
                        frontier: convert::frontier_out(&f, "a listen's frontier")?,
                    },
                };
                out.push(&convert::to_js(&view)?);
            }
            Ok(out.into())
        })
    }

    /// Ends the listen, expiring its reader. Later calls reject with code `"Expired"`.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn expire(&self) -> Promise {
        ctx::expire(&self.ctx, &self.slot, Listen::expire)
    }
}
