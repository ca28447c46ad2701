//! `PersistClient` and `WriteHandle` in JS: opening shards and writing to them.
//!
//! A shard here holds `((key, value), time, diff)` updates with string keys and values, times
//! in milliseconds (numbers) and diffs as `bigint` (a `number` is accepted on input). Every
//! handle method is `async` and runs as a call on the client's location (refused, or aborted,
//! once it is closed; bounded by the client's `callTimeoutMs` if set). Calls on one handle run
//! one at a time, in the order they were made.
//!
//! Writes return `{ committed, upper }`: `committed` is false on an upper mismatch (another
//! writer moved the upper first; nothing was written), and `upper` is the shard's upper as the
//! handle now knows it. Misuse (bad bounds, an expired handle) rejects with an Error.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::Promise;
use serde::Serialize;
use timely::progress::Antichain;
use tsify::Tsify;
use wasm_bindgen::prelude::*;

use super::convert::{self, Options};
use super::ctx::{self, ClientCtx, Slot};
use super::errors::{LibError, LibResult};
use super::events::ShardStateView;
use super::location::JsPersistLocation;
use super::read::JsReadHandle;
use crate::persist::codec::Timestamp;
use crate::persist::error::UpperMismatch;
use crate::persist::read::Update;
use crate::persist::write::WriteHandle;
use crate::persist::{PersistClient, PersistConfig, ShardId};
use crate::runtime::browser::BrowserRuntime;

#[wasm_bindgen(typescript_custom_section)]
const TS_SHARD: &'static str = r#"
/** A time in milliseconds (an integer in [0, Number.MAX_SAFE_INTEGER]). */
export type Time = number;
/** The core's time type (`u64` milliseconds) as the events declare it: a `Time`. */
export type Timestamp = Time;
/** A frontier of times: every time before it is complete; `null` is the empty frontier. */
export type Frontier = Time | null;
/** One update to write: `diff` defaults to 1 (a safe-integer number or a bigint). */
export interface UpdateInput {
    key: string;
    value: string;
    time: Time;
    diff?: number | bigint;
}
/** Options of `new PersistClient(location, options)`. */
export interface PersistClientOptions {
    /**
     * Seeds the ids the client draws (writer and reader ids, idempotency tokens, part keys)
     * over an **in-memory** location, so that a run gives the same ids and events every time.
     * Over IndexedDB and every location JavaScript supplies (and in memory without a seed), ids
     * come from the platform's CSPRNG (`crypto.getRandomValues`) whatever the seed: two tabs,
     * two visits or two processes never share a writer id or a token. Two clients on one
     * in-memory location need different seeds (or none).
     */
    seed?: number | bigint;
    /** Bound every call of this client's handles, in ms (rejects with code "Timeout"). */
    callTimeoutMs?: number;
    writerLeaseDurationMs?: number;
    readerLeaseDurationMs?: number;
    /** Background compaction after appends. Default true. */
    compaction?: boolean;
    /** Garbage collection of unused blobs and versions. Default true. */
    gc?: boolean;
    /** A rollup every this many seqnos (0: none routinely). Default 16. */
    rollupThreshold?: number;
    /** Record persist events (`takeEvents`). Default true. */
    events?: boolean;
}
"#;

/// The result of a write.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct AppendOutcome {
    /// Whether the updates are now in the shard (false: an upper mismatch; nothing written).
    pub committed: bool,
    /// The shard's upper as the handle now knows it (`null`: finished).
    pub upper: Option<f64>,
}

pub(crate) fn shard_id(v: &JsValue) -> LibResult<ShardId> {
    let name = convert::string(v, "shardId")?;
    ShardId::new(&name).map_err(LibError::range)
}

/// Parses `updates` (an array of `UpdateInput`).
pub(crate) fn updates(v: &JsValue) -> LibResult<Vec<Update<String, String>>> {
    convert::array(v, "updates")?
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let what = format!("updates[{i}]");
            let o = Options::required(u, &what, &["key", "value", "time", "diff"])?;
            let key = o.parse_required("key", convert::string)?;
            let value = o.parse_required("value", convert::string)?;
            let time = o.parse_required("time", convert::time)?;
            let diff = o.parse_or("diff", 1, convert::int64)?;
            Ok(((key, value), time, diff))
        })
        .collect()
}

/// Opens handles onto shards of one location; see the module docs.
#[wasm_bindgen(js_name = PersistClient)]
pub struct JsPersistClient {
    ctx: ClientCtx,
}

#[wasm_bindgen(js_class = PersistClient)]
impl JsPersistClient {
    /// A client over `location`. Clients on one location share its data, like processes.
    #[wasm_bindgen(constructor)]
    pub fn new(
        location: &JsPersistLocation,
        #[wasm_bindgen(unchecked_optional_param_type = "PersistClientOptions")] options: JsValue,
    ) -> Result<JsPersistClient, JsValue> {
        let o = Options::new(
            &options,
            "options",
            &[
                "seed",
                "callTimeoutMs",
                "writerLeaseDurationMs",
                "readerLeaseDurationMs",
                "compaction",
                "gc",
                "rollupThreshold",
                "events",
            ],
        )?;
        let d = PersistConfig::default();
        let positive = |v: &JsValue, what: &str| match convert::time(v, what)? {
            0 => Err(LibError::range(format!("{what} must be at least 1"))),
            ms => Ok(ms),
        };
        let cfg = PersistConfig {
            writer_lease_duration_ms: o.parse_or(
                "writerLeaseDurationMs",
                d.writer_lease_duration_ms,
                positive,
            )?,
            reader_lease_duration_ms: o.parse_or(
                "readerLeaseDurationMs",
                d.reader_lease_duration_ms,
                positive,
            )?,
            compaction_enabled: o.parse_or("compaction", d.compaction_enabled, convert::boolean)?,
            gc_enabled: o.parse_or("gc", d.gc_enabled, convert::boolean)?,
            rollup_threshold: o.parse_or("rollupThreshold", d.rollup_threshold, convert::time)?,
            ..d
        };
        let seed = o.parse_or("seed", 0, convert::uint64)?;
        let entropy = super::ids::for_location(location.shared.kind(), o.get("seed").is_some())?;
        let call_timeout_ms = o
            .get("callTimeoutMs")
            .map(|v| positive(&v, &o.name("callTimeoutMs")))
            .transpose()?;
        let events = o.parse_or("events", true, convert::boolean)?;
        location.shared.check_open("new PersistClient")?;
        let runtime = BrowserRuntime::runtime();
        let mut client = PersistClient::new(
            location.shared.location().clone(),
            runtime.clone(),
            cfg,
            seed,
        );
        if let Some(fill) = entropy {
            client = client.with_entropy(fill);
        }
        if !events {
            client = client.with_events(crate::persist::events::EventLog::disabled());
        }
        Ok(JsPersistClient {
            ctx: ClientCtx {
                client,
                location: Rc::clone(&location.shared),
                runtime,
                call_timeout_ms,
            },
        })
    }

    /// Opens a writer on `shardId` (1 to 128 characters, no `/`), creating the shard if needed.
    #[wasm_bindgen(js_name = openWriter, unchecked_return_type = "Promise<WriteHandle>")]
    pub fn open_writer(
        &self,
        #[wasm_bindgen(js_name = shardId, unchecked_param_type = "string")] shard: JsValue,
    ) -> Promise {
        self.on_shard(
            "openWriter",
            shard,
            async |c, s| c.open_writer::<String, String>(&s).await,
            |ctx, handle| Ok(JsWriteHandle::new(ctx, handle).into()),
        )
    }

    /// Opens a leased reader on `shardId`, creating the shard if needed. Its since starts at the
    /// shard's since.
    #[wasm_bindgen(js_name = openReader, unchecked_return_type = "Promise<ReadHandle>")]
    pub fn open_reader(
        &self,
        #[wasm_bindgen(js_name = shardId, unchecked_param_type = "string")] shard: JsValue,
    ) -> Promise {
        self.on_shard(
            "openReader",
            shard,
            async |c, s| c.open_leased_reader::<String, String>(&s).await,
            |ctx, handle| Ok(JsReadHandle::new(ctx, handle).into()),
        )
    }

    /// The shard's state, freshly read from Consensus.
    #[wasm_bindgen(js_name = inspectState, unchecked_return_type = "Promise<ShardStateView>")]
    pub fn inspect_state(
        &self,
        #[wasm_bindgen(js_name = shardId, unchecked_param_type = "string")] shard: JsValue,
    ) -> Promise {
        self.on_shard(
            "inspectState",
            shard,
            async |c, s| c.inspect_state(&s).await,
            |_, state| Ok(convert::to_js(&ShardStateView::new(&state)?)?),
        )
    }

    /// Takes every persist event recorded since the last call (oldest first).
    #[wasm_bindgen(js_name = takeEvents, unchecked_return_type = "PersistEventView[]")]
    pub fn take_events(&self) -> Result<JsValue, JsValue> {
        let events = self.ctx.client.events().take();
        let out = js_sys::Array::new();
        for e in &events {
            out.push(&convert::to_js(e)?);
        }
        Ok(out.into())
    }

    /// How many events were dropped because the log was full (it keeps 100,000).
    #[wasm_bindgen(getter, js_name = droppedEvents)]
    pub fn dropped_events(&self) -> f64 {
        self.ctx.client.events().dropped() as f64
    }
}

impl JsPersistClient {
    pub(crate) fn ctx(&self) -> &ClientCtx {
        &self.ctx
    }

    /// A call `op` on shard `shard` (a JS value, checked first): `f` with the client, as a call
    /// on the location, then `out` with the context and its result.
    fn on_shard<T: 'static, E>(
        &self,
        op: &'static str,
        shard: JsValue,
        f: impl AsyncFnOnce(PersistClient, ShardId) -> Result<T, E> + 'static,
        out: impl FnOnce(ClientCtx, T) -> LibResult<JsValue> + 'static,
    ) -> Promise
    where
        LibError: From<E>,
    {
        let ctx = self.ctx.clone();
        convert::promise(async move {
            let shard = shard_id(&shard)?;
            let client = ctx.client.clone();
            let t = ctx
                .call(op, async move { Ok(f(client, shard).await?) })
                .await?;
            Ok(out(ctx, t)?)
        })
    }
}

/// A writer of one shard. See the module docs.
#[wasm_bindgen(js_name = WriteHandle)]
pub struct JsWriteHandle {
    ctx: ClientCtx,
    slot: Rc<Slot<WriteHandle<String, String>>>,
    shard: String,
    upper: Rc<RefCell<Antichain<Timestamp>>>,
}

type WriteFn = fn(
    &mut WriteHandle<String, String>,
    Vec<Update<String, String>>,
    Antichain<Timestamp>,
    Antichain<Timestamp>,
) -> futures::future::LocalBoxFuture<
    '_,
    Result<Result<(), UpperMismatch>, crate::persist::error::PersistError>,
>;

impl JsWriteHandle {
    fn new(ctx: ClientCtx, handle: WriteHandle<String, String>) -> Self {
        let upper = Rc::new(RefCell::new(handle.upper().clone()));
        JsWriteHandle {
            shard: handle.shard_id().0.clone(),
            slot: Slot::new("writer", handle.writer_id().0.clone(), handle),
            ctx,
            upper,
        }
    }

    fn write(
        &self,
        op: &'static str,
        names: [&'static str; 2],
        updates: JsValue,
        lower: JsValue,
        upper: JsValue,
        f: WriteFn,
    ) -> Promise {
        let (ctx, slot, known) = (
            self.ctx.clone(),
            Rc::clone(&self.slot),
            Rc::clone(&self.upper),
        );
        convert::promise(async move {
            let updates = self::updates(&updates)?;
            let lower = convert::frontier(&lower, names[0], false)?;
            let upper = convert::frontier(&upper, names[1], true)?;
            let result = ctx
                .call(
                    op,
                    slot.with(op, async |h| {
                        let r = f(h, updates, lower, upper).await;
                        *known.borrow_mut() = h.upper().clone();
                        Ok(r?)
                    }),
                )
                .await?;
            let upper = convert::frontier_out(&known.borrow(), "the upper")?;
            Ok(convert::to_js(&AppendOutcome {
                committed: result.is_ok(),
                upper,
            })?)
        })
    }
}

#[wasm_bindgen(js_class = WriteHandle)]
impl JsWriteHandle {
    /// The writer's id.
    #[wasm_bindgen(getter, js_name = writerId)]
    pub fn writer_id(&self) -> String {
        self.slot.id().to_string()
    }

    /// The shard.
    #[wasm_bindgen(getter, js_name = shardId)]
    pub fn shard_id(&self) -> String {
        self.shard.clone()
    }

    /// The most recent upper this handle knows (`null`: the shard is finished).
    #[wasm_bindgen(getter, unchecked_return_type = "Frontier")]
    pub fn upper(&self) -> Result<JsValue, JsValue> {
        let upper = convert::frontier_out(&self.upper.borrow(), "the upper")?;
        Ok(upper.map_or(JsValue::NULL, JsValue::from_f64))
    }

    /// Whether `expire()` was called.
    #[wasm_bindgen(getter)]
    pub fn expired(&self) -> bool {
        self.slot.is_gone()
    }

    /// Writes `updates` and moves the upper from `expectedUpper` to `newUpper` (`null` finishes
    /// the shard), iff the shard's upper is exactly `expectedUpper`. Every update's time must be
    /// in `[expectedUpper, newUpper)`. Linearized with every other writer, at most once.
    #[wasm_bindgen(js_name = compareAndAppend, unchecked_return_type = "Promise<AppendOutcome>")]
    pub fn compare_and_append(
        &self,
        #[wasm_bindgen(unchecked_param_type = "UpdateInput[]")] updates: JsValue,
        #[wasm_bindgen(js_name = expectedUpper, unchecked_param_type = "Time")]
        expected_upper: JsValue,
        #[wasm_bindgen(js_name = newUpper, unchecked_param_type = "Frontier")] new_upper: JsValue,
    ) -> Promise {
        self.write(
            "compareAndAppend",
            ["expectedUpper", "newUpper"],
            updates,
            expected_upper,
            new_upper,
            |h, u, l, r| Box::pin(async move { h.compare_and_append(&u, l, r).await }),
        )
    }

    /// Writes `updates` at `[lower, upper)` for replicas writing identical data: a shard already
    /// past `lower` is no mismatch (the batch is trimmed, or the call is a no-op once the shard
    /// reaches `upper`); only a gap (the shard's upper is before `lower`) gives `committed: false`.
    #[wasm_bindgen(unchecked_return_type = "Promise<AppendOutcome>")]
    pub fn append(
        &self,
        #[wasm_bindgen(unchecked_param_type = "UpdateInput[]")] updates: JsValue,
        #[wasm_bindgen(unchecked_param_type = "Time")] lower: JsValue,
        #[wasm_bindgen(unchecked_param_type = "Frontier")] upper: JsValue,
    ) -> Promise {
        self.write(
            "append",
            ["lower", "upper"],
            updates,
            lower,
            upper,
            |h, u, l, r| Box::pin(async move { h.append(&u, l, r).await }),
        )
    }

    /// Reads the shard's current upper from Consensus.
    #[wasm_bindgen(js_name = fetchRecentUpper, unchecked_return_type = "Promise<Frontier>")]
    pub fn fetch_recent_upper(&self) -> Promise {
        let (ctx, slot, known) = (
            self.ctx.clone(),
            Rc::clone(&self.slot),
            Rc::clone(&self.upper),
        );
        convert::promise(async move {
            let op = "fetchRecentUpper";
            let upper = ctx
                .call(
                    op,
                    slot.with(op, async |h| Ok(h.fetch_recent_upper().await?.clone())),
                )
                .await?;
            *known.borrow_mut() = upper.clone();
            let upper = convert::frontier_out(&upper, "the upper")?;
            Ok(upper.map_or(JsValue::NULL, JsValue::from_f64))
        })
    }

    /// Keeps the writer's lease alive; an expired writer rejects with code `"Expired"`.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn heartbeat(&self) -> Promise {
        ctx::heartbeat(&self.ctx, &self.slot, async |h| Ok(h.heartbeat().await?))
    }

    /// Removes the writer from the shard. Every later call rejects with code `"Expired"`.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn expire(&self) -> Promise {
        ctx::expire(&self.ctx, &self.slot, WriteHandle::expire)
    }
}
