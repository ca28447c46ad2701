//! `WriteTask` in JS: the differential write task, which keeps a shard equal to a desired
//! collection of rows and its upper near the wall clock.
//!
//! `WriteTask.spawn(client, shardId, options?)` opens a writer (rows: arrays of datums, no value)
//! and starts the task on the client's location. `append(updates)` and `deleteWhere(predicate)`
//! change the desired collection and resolve once the change is durable in the shard (or reject
//! with code `"WriteTaskError"`, saying why: read-only, shutting down, retries spent). The task
//! re-syncs by itself when another writer moved the shard. `shutdown()` stops it; so does
//! closing the location.
//!
//! Rows are arrays of datums: `null`, booleans, integers (a safe-integer `number` or a `bigint`
//! on input, always a `bigint` on output) and strings.

use std::cell::RefCell;
use std::rc::Rc;

use futures::channel::oneshot;
use js_sys::Promise;
use serde::Serialize;
use tsify::Tsify;
use wasm_bindgen::prelude::*;

use super::convert::{self, Options};
use super::ctx::{self, ClientCtx};
use super::errors::{LibError, LibResult};
use super::shard::{shard_id, JsPersistClient};
use crate::persist::codec::{Datum, Diff, Row};
use crate::persist::ShardId;
use crate::runtime::JoinHandle;
use crate::write_task::{
    now_fn, CommandSender, DifferentialIntrospectionConfig, DifferentialWriteTask, InitialDesired,
    ReadHandleFuture, RetryPolicy, StorageWriteOp, WriteTaskConfig, WriteTaskLog,
};

#[wasm_bindgen(typescript_custom_section)]
const TS_WRITE_TASK: &'static str = r#"
/** One value in a row to write: integers may be safe-integer numbers or bigints. */
export type DatumInput = null | boolean | number | bigint | string;
/** A row and its diff to add to the desired collection (`diff` defaults to 1). */
export interface RowUpdateInput {
    row: DatumInput[];
    diff?: number | bigint;
}
/** Options of `WriteTask.spawn`. */
export interface WriteTaskOptions {
    /** Keep the desired collection but never write (every command rejects). Default false. */
    readOnly?: boolean;
    /** Move the upper to the clock this often when idle, in ms. Default 1000. */
    upperTickIntervalMs?: number;
    /** Gather commands for this long into one write, in ms. Default 1000. */
    batchDurationMs?: number;
    /** Bound one write attempt, in ms. Default 30000. */
    attemptTimeoutMs?: number;
    /** Attempts per write before its commands reject. Default 20. */
    maxTries?: number;
    /** The back-off before the second attempt, in ms. Default 1000. */
    initialBackoffMs?: number;
    /** "empty" (default): the first write retracts what the shard holds; "fromShard": keep it. */
    initialDesired?: "empty" | "fromShard";
}
"#;

/// One value of a row: `null`, a boolean, an integer (a bigint: integers are 64-bit) or a string.
#[derive(Serialize, Tsify)]
#[serde(untagged)]
#[tsify(missing_as_null, large_number_types_as_bigints)]
#[allow(missing_docs)]
pub enum DatumView {
    Null,
    Bool(bool),
    Int(i64),
    String(String),
}

/// One row of a shard and its diff.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct RowUpdateView {
    /// The row.
    pub row: Vec<DatumView>,
    /// Its multiplicity.
    pub diff: i64,
}

impl RowUpdateView {
    fn new(row: Row, diff: Diff) -> Self {
        RowUpdateView {
            row: datum_views(row),
            diff,
        }
    }
}

/// A row's datums as plain data.
pub fn datum_views(row: Row) -> Vec<DatumView> {
    row.0
        .into_iter()
        .map(|d| match d {
            Datum::Null => DatumView::Null,
            Datum::Bool(b) => DatumView::Bool(b),
            Datum::Int(i) => DatumView::Int(i),
            Datum::String(s) => DatumView::String(s),
        })
        .collect()
}

/// What the task's shard holds.
#[derive(Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
#[tsify(missing_as_null, large_number_types_as_bigints)]
pub struct WriteTaskSnapshot {
    /// The shard's upper when it was read (`null`: finished).
    pub upper: Option<f64>,
    /// The time read at: `upper - 1`, or the since once a reader has held it past that (the
    /// read then waited for the upper to pass it); `null` when nothing can be there yet.
    pub as_of: Option<f64>,
    /// The rows, consolidated, with their diffs.
    pub rows: Vec<RowUpdateView>,
}

fn row_updates(v: &JsValue) -> LibResult<Vec<(Row, Diff)>> {
    convert::array(v, "updates")?
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let what = format!("updates[{i}]");
            let o = Options::required(u, &what, &["row", "diff"])?;
            let row = o.parse_required("row", convert::row)?;
            let diff = o.parse_or("diff", 1, convert::int64)?;
            Ok((row, diff))
        })
        .collect()
}

/// A running write task. See the module docs.
#[wasm_bindgen(js_name = WriteTask)]
pub struct JsWriteTask {
    id: String,
    ctx: ClientCtx,
    shard: ShardId,
    commands: CommandSender,
    shutdown: Rc<RefCell<Option<oneshot::Sender<()>>>>,
    task: Rc<RefCell<Option<JoinHandle<()>>>>,
    log: WriteTaskLog,
}

impl JsWriteTask {
    fn send(&self, op: &'static str, cmd: LibResult<StorageWriteOp>) -> Promise {
        let (ctx, commands, id) = (self.ctx.clone(), self.commands.clone(), self.id.clone());
        convert::promise(async move {
            let cmd = cmd?;
            let (tx, rx) = oneshot::channel();
            ctx.location.check_open(op)?;
            commands.unbounded_send((cmd, tx)).map_err(|_| {
                LibError::new(
                    "WriteTaskError",
                    format!("{op}: write task {id} has ended; spawn a new one"),
                )
            })?;
            let answer = ctx
                .call(op, async move {
                    rx.await.map_err(|_| {
                        LibError::new(
                            "WriteTaskError",
                            format!("{op}: write task {id} ended before answering"),
                        )
                    })
                })
                .await?;
            answer.map_err(LibError::from)?;
            Ok(JsValue::UNDEFINED)
        })
    }
}

#[wasm_bindgen(js_class = WriteTask)]
impl JsWriteTask {
    /// Opens a writer on `shardId` through `client` and starts a write task on it.
    #[wasm_bindgen(unchecked_return_type = "Promise<WriteTask>")]
    pub fn spawn(
        client: &JsPersistClient,
        #[wasm_bindgen(js_name = shardId, unchecked_param_type = "string")] shard: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "WriteTaskOptions")] options: JsValue,
    ) -> Promise {
        let ctx = client.ctx().clone();
        convert::promise(async move {
            let shard = shard_id(&shard)?;
            let o = Options::new(
                &options,
                "options",
                &[
                    "readOnly",
                    "upperTickIntervalMs",
                    "batchDurationMs",
                    "attemptTimeoutMs",
                    "maxTries",
                    "initialBackoffMs",
                    "initialDesired",
                ],
            )?;
            let mut cfg = WriteTaskConfig::new(ctx.runtime.clone());
            let positive = |v: &JsValue, what: &str| match convert::time(v, what)? {
                0 => Err(LibError::range(format!("{what} must be at least 1"))),
                ms => Ok(ms),
            };
            cfg.upper_tick_interval_ms =
                o.parse_or("upperTickIntervalMs", cfg.upper_tick_interval_ms, positive)?;
            cfg.batch_duration_ms =
                o.parse_or("batchDurationMs", cfg.batch_duration_ms, convert::time)?;
            cfg.attempt_timeout_ms =
                o.parse_or("attemptTimeoutMs", cfg.attempt_timeout_ms, positive)?;
            let max_tries = o.parse_or("maxTries", cfg.retry.max_tries as u64, positive)?;
            cfg.retry = RetryPolicy {
                max_tries: u32::try_from(max_tries)
                    .map_err(|_| LibError::range("options.maxTries must be at most 4294967295"))?,
                initial_backoff_ms: o.parse_or(
                    "initialBackoffMs",
                    cfg.retry.initial_backoff_ms,
                    convert::time,
                )?,
                ..cfg.retry
            };
            let read_only = o.parse_or("readOnly", false, convert::boolean)?;
            let initial_desired = match o.get("initialDesired") {
                None => InitialDesired::Empty,
                Some(v) => match convert::string(&v, "options.initialDesired")?.as_str() {
                    "empty" => InitialDesired::Empty,
                    "fromShard" => InitialDesired::FromShard {
                        retain: Box::new(|_| true),
                    },
                    other => {
                        return Err(LibError::type_error(format!(
                        "options.initialDesired must be \"empty\" or \"fromShard\", got {other:?}"
                    ))
                        .into())
                    }
                },
            };
            let client = ctx.client.clone();
            let s = shard.clone();
            let writer = ctx
                .call("WriteTask.spawn", async move {
                    Ok(client.open_writer::<Row, ()>(&s).await?)
                })
                .await?;
            let (client, s) = (ctx.client.clone(), shard.clone());
            let read_handle_fn = move || -> ReadHandleFuture {
                let (c, s) = (client.clone(), s.clone());
                Box::pin(async move { c.open_leased_reader::<Row, ()>(&s).await })
            };
            let log = cfg.log.clone();
            let id = shard.0.clone();
            let (commands, task, shutdown) = DifferentialWriteTask::spawn(
                id.clone(),
                writer,
                read_handle_fn,
                read_only,
                now_fn(&ctx.runtime),
                DifferentialIntrospectionConfig { initial_desired },
                cfg,
            )
            .map_err(LibError::from)?;
            let task = Rc::new(RefCell::new(Some(task)));
            let on_close = Rc::clone(&task);
            // Closing the location aborts the task: its queued commands are answered.
            ctx.location
                .on_close(move || drop(on_close.borrow_mut().take()));
            Ok(JsWriteTask {
                id,
                ctx,
                shard,
                commands,
                shutdown: Rc::new(RefCell::new(Some(shutdown))),
                task,
                log,
            }
            .into())
        })
    }

    /// The collection (the shard id).
    #[wasm_bindgen(getter)]
    pub fn id(&self) -> String {
        self.id.clone()
    }

    /// Adds `updates` (rows with diffs, which may be negative) to the desired collection;
    /// resolves once the shard holds the change.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn append(
        &self,
        #[wasm_bindgen(unchecked_param_type = "RowUpdateInput[]")] updates: JsValue,
    ) -> Promise {
        self.send(
            "append",
            row_updates(&updates).map(|updates| StorageWriteOp::Append { updates }),
        )
    }

    /// Removes every row `predicate` returns `true` for (whatever its multiplicity); resolves
    /// once the shard holds the change. A predicate that throws, or returns anything but `true`,
    /// keeps the row.
    #[wasm_bindgen(js_name = deleteWhere, unchecked_return_type = "Promise<void>")]
    pub fn delete_where(
        &self,
        #[wasm_bindgen(unchecked_param_type = "(row: DatumView[]) => boolean")] predicate: JsValue,
    ) -> Promise {
        let cmd = match predicate.dyn_into::<js_sys::Function>() {
            Ok(f) => Ok(StorageWriteOp::Delete {
                filter: Box::new(move |row: &Row| {
                    f.call1(&JsValue::NULL, &convert::row_to_js(row))
                        .is_ok_and(|v| v.as_bool() == Some(true))
                }),
            }),
            Err(v) => Err(LibError::type_error(format!(
                "predicate must be a function, got {}",
                convert::describe(&v)
            ))),
        };
        self.send("deleteWhere", cmd)
    }

    /// Reads what the shard holds now: a fresh reader at the shard's upper minus one (or at the
    /// since, once that has passed it: `persist::contents`).
    #[wasm_bindgen(unchecked_return_type = "Promise<WriteTaskSnapshot>")]
    pub fn snapshot(&self) -> Promise {
        let (ctx, shard) = (self.ctx.clone(), self.shard.clone());
        convert::promise(async move {
            let client = ctx.client.clone();
            let (upper, as_of, rows) = ctx
                .call("snapshot", ctx::contents_now::<Row, ()>(&client, &shard))
                .await?;
            let view = WriteTaskSnapshot {
                upper: convert::frontier_out(&upper, "the upper")?,
                as_of: convert::opt_ms(as_of, "the as-of")?,
                rows: rows
                    .into_iter()
                    .map(|((row, ()), _, diff)| RowUpdateView::new(row, diff))
                    .collect(),
            };
            Ok(convert::to_js(&view)?)
        })
    }

    /// Stops the task: queued commands reject, and later ones too.
    pub fn shutdown(&self) {
        if let Some(tx) = self.shutdown.borrow_mut().take() {
            let _ = tx.send(());
        }
    }

    /// Whether the task still runs (not shut down, not aborted by closing the location).
    #[wasm_bindgen(getter)]
    pub fn running(&self) -> bool {
        self.shutdown.borrow().is_some()
            && self.task.borrow().is_some()
            && !self.commands.is_closed()
    }

    /// Takes the events recorded since the last call, oldest first.
    #[wasm_bindgen(js_name = takeEvents, unchecked_return_type = "WriteTaskEventView[]")]
    pub fn take_events(&self) -> Result<JsValue, JsValue> {
        let out = js_sys::Array::new();
        for e in self.log.take() {
            out.push(&convert::to_js(&e)?);
        }
        Ok(out.into())
    }
}
