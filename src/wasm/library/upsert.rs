//! `UpsertPipeline` in JS: upsert with continual feedback, with replicas that race to write
//! one shard, and a checker that compares the shard with the reference model at every upper.
//!
//! `UpsertPipeline.create(location, options)` makes the pipeline (one slot per entry of
//! `options.replicas`) and starts its checker; `start(i)` (re)starts replica `i` from the
//! shard's upper, `crash(i)` drops it. The source is a log the page writes: `push(key, value,
//! time)` (a `null` value deletes the key), `pushError`, `seal(upper)`, or `generate(...)` for
//! seeded bursts. Each replica reads the source at its own speed, keeps its key-value state only
//! from what it reads back from the shard, and writes with compare_and_append; a replica that
//! loses a range to a peer drops what lies below the new upper. `report()` says whether the
//! shard ever disagreed with the model; `contents()` reads what the shard holds.
//!
//! Keys are integers (a key column), values strings: a value `v` of key `k` is the row `[k, v]`.

use std::cell::RefCell;
use std::rc::Rc;

use futures::lock::Mutex;
use js_sys::Promise;
use wasm_bindgen::prelude::*;

use super::convert::{self, Options};
use super::ctx::contents_now;
use super::errors::{LibError, LibResult};
use super::location::{JsPersistLocation, LocationShared};
use super::shard::shard_id;
use super::upsert_views::{PipelineSnapshotView, UpsertContentsView, UpsertRowView};
use crate::persist::codec::{Datum, Row, Timestamp};
use crate::persist::{PersistClient, PersistConfig, ShardId};
use crate::runtime::browser::BrowserRuntime;
use crate::runtime::Runtime;
use crate::upsert::observe::UpsertLog;
use crate::upsert::pipeline::UpsertPipeline;
use crate::upsert::replica::ReplicaConfig;
use crate::upsert::source::{GeneratorConfig, SourceGenerator, SourceLog};
use crate::upsert::types::{kv_row, SourceData, UpsertError};

#[wasm_bindgen(typescript_custom_section)]
const TS_UPSERT: &'static str = r#"
/** One event of the pipeline (the core's `UpsertEvent` at the library's time type). */
export type UpsertEventView = UpsertEvent<Timestamp>;
/** One replica of an upsert pipeline: how fast it reads and how it writes. */
export interface ReplicaOptions {
    /** Its name in events. Default "r<i>". */
    name?: string;
    /** Source messages it reads per step: its speed. Default 4. */
    readBatch?: number;
    /** Milliseconds between its steps when idle. Default 5. */
    tickMs?: number;
    /** The longest a compare_and_append may take before the replica crashes. Default 2000. */
    caaTimeoutMs?: number;
    /** Messages before its resume upper it re-reads on start. Default 2. */
    replay?: number;
    /** Seeds its reader's shuffles. Default: the pipeline's seed plus its slot. */
    seed?: number | bigint;
    /** Allow partial emission at the input frontier. Default true. */
    preventSnapshotBuffering?: boolean;
    /** The most worker steps per replica step. Default 64. */
    stepBudget?: number;
}
/** Options of `UpsertPipeline.create`. */
export interface UpsertPipelineOptions {
    /** The output shard. */
    shardId: string;
    /** One entry per replica slot (at least one). */
    replicas: ReplicaOptions[];
    /**
     * Seeds the shuffles, and the ids (writers, readers, tokens) over an in-memory location.
     * Over IndexedDB and locations JavaScript supplies (and in memory without a seed), ids come
     * from the platform's CSPRNG (`crypto.getRandomValues`) whatever the seed. Default 0.
     */
    seed?: number | bigint;
    /** Background compaction of the shard. Default true. */
    compaction?: boolean;
    /** Bound `create`, `start` and `contents`, in ms (rejects with code "Timeout"). */
    callTimeoutMs?: number;
}
/** Options of `UpsertPipeline.generate`: seeded bursts of upserts over `keys` integer keys. */
export interface GenerateOptions {
    /** How many bursts (each at one time, then the log is sealed past it). */
    bursts: number;
    seed?: number | bigint;
    keys?: number;
    deletePercent?: number;
    errorPercent?: number;
    burstMax?: number;
    tsStepMax?: number;
}
"#;

fn replica_config(v: &JsValue, i: usize, pipeline_seed: u64) -> LibResult<ReplicaConfig> {
    let what = format!("options.replicas[{i}]");
    let o = Options::required(
        v,
        &what,
        &[
            "name",
            "readBatch",
            "tickMs",
            "caaTimeoutMs",
            "replay",
            "seed",
            "preventSnapshotBuffering",
            "stepBudget",
        ],
    )?;
    let d = ReplicaConfig::new(&format!("r{i}"), pipeline_seed.wrapping_add(i as u64));
    let count = |v: &JsValue, what: &str| match convert::time(v, what)? {
        0 => Err(LibError::range(format!("{what} must be at least 1"))),
        n => Ok(n),
    };
    let small = |n: u64, what: &str| {
        u32::try_from(n).map_err(|_| LibError::range(format!("{what} must be at most 4294967295")))
    };
    Ok(ReplicaConfig {
        name: o.parse_or("name", d.name.clone(), convert::string)?,
        read_batch: small(
            o.parse_or("readBatch", d.read_batch as u64, count)?,
            "readBatch",
        )? as usize,
        tick_ms: o.parse_or("tickMs", d.tick_ms, count)?,
        caa_timeout_ms: o.parse_or("caaTimeoutMs", d.caa_timeout_ms, count)?,
        replay: small(
            o.parse_or("replay", d.replay as u64, convert::time)?,
            "replay",
        )? as usize,
        seed: o.parse_or("seed", d.seed, convert::uint64)?,
        prevent_snapshot_buffering: o.parse_or(
            "preventSnapshotBuffering",
            d.prevent_snapshot_buffering,
            convert::boolean,
        )?,
        snapshot_buffering_max: d.snapshot_buffering_max,
        step_budget: small(
            o.parse_or("stepBudget", d.step_budget as u64, count)?,
            "stepBudget",
        )?,
    })
}

fn shut_down(op: &str) -> LibError {
    LibError::expired(format!(
        "{op}: the upsert pipeline was shut down; create a new one"
    ))
}

fn key(v: &JsValue) -> LibResult<i64> {
    convert::int64(v, "key")
}

/// An upsert pipeline. See the module docs.
#[wasm_bindgen(js_name = UpsertPipeline)]
pub struct JsUpsertPipeline {
    // `None` once shut down (dropping the pipeline aborts its replicas and its checker).
    pipeline: Rc<Mutex<Option<UpsertPipeline>>>,
    source: Rc<RefCell<SourceLog>>,
    log: UpsertLog<Timestamp>,
    location: Rc<LocationShared>,
    client: PersistClient,
    shard: ShardId,
    runtime: Runtime,
    call_timeout_ms: Option<u64>,
}

impl JsUpsertPipeline {
    /// Runs `f` on the pipeline as a call on the location, after earlier calls.
    fn call<T: 'static>(
        &self,
        op: &'static str,
        f: impl AsyncFnOnce(&mut UpsertPipeline) -> LibResult<T> + 'static,
        out: impl FnOnce(T) -> LibResult<JsValue> + 'static,
    ) -> Promise {
        let (pipeline, location) = (Rc::clone(&self.pipeline), Rc::clone(&self.location));
        let (runtime, timeout) = (self.runtime.clone(), self.call_timeout_ms);
        convert::promise(async move {
            let value = location
                .run(op, timeout.map(|ms| (&runtime, ms)), async move {
                    let mut guard = pipeline.lock().await;
                    match guard.as_mut() {
                        Some(p) => f(p).await,
                        None => Err(shut_down(op)),
                    }
                })
                .await?;
            Ok(out(value)?)
        })
    }

    fn slot(&self, v: &JsValue, what: &str) -> LibResult<usize> {
        let i = convert::time(v, what)?;
        let n = self
            .pipeline
            .try_lock()
            .map(|p| p.as_ref().map_or(0, UpsertPipeline::replicas))
            .unwrap_or(usize::MAX);
        if i as usize >= n {
            return Err(LibError::range(format!(
                "{what} must be a replica slot below {n}, got {i}"
            )));
        }
        Ok(i as usize)
    }

    /// The source log, to append to. The replicas read it only within their steps, so it is
    /// free whenever JS runs; if it ever is not, the call fails instead of trapping.
    fn source_mut(&self, op: &str) -> LibResult<std::cell::RefMut<'_, SourceLog>> {
        self.source.try_borrow_mut().map_err(|_| {
            LibError::new(
                "InvalidUsage",
                format!("{op}: the source log is being read; try again"),
            )
        })
    }

    fn push_value(
        &self,
        key: i64,
        value: Option<Result<Row, UpsertError>>,
        time: &JsValue,
    ) -> LibResult<f64> {
        let ts = convert::time(time, "time")?;
        let offset = self
            .source_mut("push")?
            .push(key, value, ts)
            .map_err(|e| LibError::range(format!("push: {e}")))?;
        convert::ms(offset, "the offset")
    }
}

#[wasm_bindgen(js_class = UpsertPipeline)]
impl JsUpsertPipeline {
    /// Makes a pipeline writing `options.shardId` on `location` and starts its checker. No
    /// replica runs until `start(i)`.
    #[wasm_bindgen(unchecked_return_type = "Promise<UpsertPipeline>")]
    pub fn create(
        location: &JsPersistLocation,
        #[wasm_bindgen(unchecked_param_type = "UpsertPipelineOptions")] options: JsValue,
    ) -> Promise {
        let shared = Rc::clone(&location.shared);
        convert::promise(async move {
            let o = Options::required(
                &options,
                "options",
                &["shardId", "replicas", "seed", "compaction", "callTimeoutMs"],
            )?;
            let shard = o.parse_required("shardId", |v, _| shard_id(v))?;
            let seed = o.parse_or("seed", 0, convert::uint64)?;
            let replicas = o.parse_required("replicas", convert::array)?;
            if replicas.is_empty() {
                return Err(
                    LibError::range("options.replicas must name at least one replica").into(),
                );
            }
            let configs = replicas
                .iter()
                .enumerate()
                .map(|(i, r)| replica_config(r, i, seed))
                .collect::<LibResult<Vec<_>>>()?;
            let cfg = PersistConfig {
                compaction_enabled: o.parse_or("compaction", true, convert::boolean)?,
                ..PersistConfig::default()
            };
            let timeout = o
                .get("callTimeoutMs")
                .map(|v| convert::time(&v, &o.name("callTimeoutMs")))
                .transpose()?;
            let entropy = super::ids::for_location(shared.kind(), o.get("seed").is_some())?;
            let runtime = BrowserRuntime::runtime();
            let mut pipeline = UpsertPipeline::new(
                shared.location().clone(),
                runtime.clone(),
                cfg.clone(),
                shard.clone(),
                configs,
                seed,
            );
            if let Some(fill) = &entropy {
                pipeline = pipeline.with_entropy(Rc::clone(fill));
            }
            shared
                .run(
                    "UpsertPipeline.create",
                    timeout.map(|ms| (&runtime, ms)),
                    async {
                        pipeline.start_checker().await;
                        Ok(())
                    },
                )
                .await?;
            let mut client = PersistClient::new(
                shared.location().clone(),
                runtime.clone(),
                cfg,
                seed ^ 0x5eed,
            );
            if let Some(fill) = entropy {
                client = client.with_entropy(fill);
            }
            let (source, log) = (pipeline.source(), pipeline.log().clone());
            let pipeline = Rc::new(Mutex::new(Some(pipeline)));
            // Closing the location stops the replicas and the checker (once a running call,
            // which the close aborts, has let go of the pipeline).
            let on_close = Rc::clone(&pipeline);
            shared.on_close(move || {
                wasm_bindgen_futures::spawn_local(async move { drop(on_close.lock().await.take()) })
            });
            Ok(JsUpsertPipeline {
                source,
                log,
                pipeline,
                location: shared,
                client,
                shard,
                runtime,
                call_timeout_ms: timeout,
            }
            .into())
        })
    }

    /// (Re)starts replica `replica` from the shard's current upper (a running one crashes first).
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn start(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] replica: JsValue,
    ) -> Promise {
        match self.slot(&replica, "replica") {
            Ok(i) => self.call(
                "start",
                async move |p| {
                    p.start(i)
                        .await
                        .map_err(|e| LibError::new("InvalidUsage", e.to_string()))
                },
                |()| Ok(JsValue::UNDEFINED),
            ),
            Err(e) => Promise::reject(&e.into()),
        }
    }

    /// Crashes replica `replica` (drops it, aborting its tasks); resolves to whether it was up.
    #[wasm_bindgen(unchecked_return_type = "Promise<boolean>")]
    pub fn crash(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] replica: JsValue,
    ) -> Promise {
        match self.slot(&replica, "replica") {
            Ok(i) => self.call(
                "crash",
                async move |p| Ok(p.crash(i)),
                |up| Ok(JsValue::from_bool(up)),
            ),
            Err(e) => Promise::reject(&e.into()),
        }
    }

    /// Appends an upsert of `key` to the source at `time` (at or beyond the source's upper and
    /// its last message); `value` `null` deletes the key. Returns its offset.
    pub fn push(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number | bigint")] key: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string | null")] value: JsValue,
        #[wasm_bindgen(unchecked_param_type = "Time")] time: JsValue,
    ) -> Result<f64, JsValue> {
        let k = self::key(&key)?;
        let value = if value.is_null() {
            None
        } else {
            Some(Ok(kv_row(
                k,
                &convert::string(&value, "value (a string, or null to delete)")?,
            )))
        };
        Ok(self.push_value(k, value, &time)?)
    }

    /// Appends an error for `key` (a value that could not be decoded): it takes the key's place
    /// in the output until the key gets a good value. Returns its offset.
    #[wasm_bindgen(js_name = pushError)]
    pub fn push_error(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number | bigint")] key: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] message: JsValue,
        #[wasm_bindgen(unchecked_param_type = "Time")] time: JsValue,
    ) -> Result<f64, JsValue> {
        let k = self::key(&key)?;
        let message = convert::string(&message, "message")?;
        let error = UpsertError::Value {
            for_key: Row::new([Datum::Int(k)]),
            message,
        };
        Ok(self.push_value(k, Some(Err(error)), &time)?)
    }

    /// Moves the source's upper to `upper` (never back): every message before it is in.
    pub fn seal(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Time")] upper: JsValue,
    ) -> Result<(), JsValue> {
        let upper = convert::time(&upper, "upper")?;
        self.source_mut("seal")?.seal(upper);
        Ok(())
    }

    /// Appends `options.bursts` seeded bursts of upserts (each at one time, then sealed past
    /// it) and returns the source's new upper.
    pub fn generate(
        &self,
        #[wasm_bindgen(unchecked_param_type = "GenerateOptions")] options: JsValue,
    ) -> Result<f64, JsValue> {
        let o = Options::required(
            &options,
            "options",
            &[
                "bursts",
                "seed",
                "keys",
                "deletePercent",
                "errorPercent",
                "burstMax",
                "tsStepMax",
            ],
        )?;
        let bursts = o.parse_required("bursts", convert::time)?;
        if bursts > 100_000 {
            return Err(LibError::range("options.bursts must be at most 100000").into());
        }
        let d = GeneratorConfig::default();
        let percent = |v: &JsValue, what: &str| match convert::time(v, what)? {
            p if p <= 100 => Ok(p),
            p => Err(LibError::range(format!(
                "{what} must be at most 100, got {p}"
            ))),
        };
        let cfg = GeneratorConfig {
            keys: o.parse_or("keys", d.keys, convert::time)?.max(1),
            delete_percent: o.parse_or("deletePercent", d.delete_percent, percent)?,
            error_percent: o.parse_or("errorPercent", d.error_percent, percent)?,
            burst_max: o.parse_or("burstMax", d.burst_max, convert::time)?.max(1),
            ts_step_max: o
                .parse_or("tsStepMax", d.ts_step_max, convert::time)?
                .max(1),
        };
        let seed = o.parse_or("seed", 0, convert::uint64)?;
        let mut source = self.source_mut("generate")?;
        let mut generator = SourceGenerator::new(seed, cfg, source.upper().max(1));
        for _ in 0..bursts {
            generator.burst(&mut source);
        }
        Ok(convert::ms(source.upper(), "the source's upper")?)
    }

    /// Every source message before this time is in the log.
    #[wasm_bindgen(getter, js_name = sourceUpper)]
    pub fn source_upper(&self) -> Result<f64, JsValue> {
        let source = self.source_mut("sourceUpper")?;
        Ok(convert::ms(source.upper(), "the source's upper")?)
    }

    /// What the checker found so far.
    #[wasm_bindgen(unchecked_return_type = "Promise<CheckerReportView>")]
    pub fn report(&self) -> Promise {
        self.call("report", async |p| Ok(p.report()), |r| convert::to_js(&r))
    }

    /// Resolves with the checker's report once it has checked the shard at `upper` (or later);
    /// bound it with the pipeline's `callTimeoutMs`.
    #[wasm_bindgen(js_name = waitForChecker, unchecked_return_type = "Promise<CheckerReportView>")]
    pub fn wait_for_checker(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Time")] upper: JsValue,
    ) -> Promise {
        let target = match convert::time(&upper, "upper") {
            Ok(t) => t,
            Err(e) => return Promise::reject(&e.into()),
        };
        let (pipeline, location) = (Rc::clone(&self.pipeline), Rc::clone(&self.location));
        let (runtime, timeout) = (self.runtime.clone(), self.call_timeout_ms);
        convert::promise(async move {
            let rt = runtime.clone();
            let report = location
                .run(
                    "waitForChecker",
                    timeout.map(|ms| (&runtime, ms)),
                    async move {
                        loop {
                            let report = match pipeline.lock().await.as_ref() {
                                Some(p) => p.report(),
                                None => return Err(shut_down("waitForChecker")),
                            };
                            if report.upper.is_some_and(|u| u >= target) {
                                return Ok(report);
                            }
                            rt.sleep(5).await;
                        }
                    },
                )
                .await?;
            Ok(convert::to_js(&report)?)
        })
    }

    /// Counters of every replica, running or crashed, added.
    #[wasm_bindgen(unchecked_return_type = "Promise<UpsertCountersView>")]
    pub fn counters(&self) -> Promise {
        self.call(
            "counters",
            async |p| Ok(p.counters()),
            |c| convert::to_js(&c),
        )
    }

    /// The source, the replicas and the checker as plain data.
    #[wasm_bindgen(unchecked_return_type = "Promise<PipelineSnapshotView>")]
    pub fn snapshot(&self) -> Promise {
        self.call(
            "snapshot",
            async |p| Ok(p.snapshot()),
            |s| convert::to_js(&PipelineSnapshotView::new(s)?),
        )
    }

    /// Reads what the output shard holds now (at its upper minus one, or at the since once that
    /// has passed it: `persist::contents`).
    #[wasm_bindgen(unchecked_return_type = "Promise<UpsertContentsView>")]
    pub fn contents(&self) -> Promise {
        let (client, shard, location) = (
            self.client.clone(),
            self.shard.clone(),
            Rc::clone(&self.location),
        );
        let (runtime, timeout) = (self.runtime.clone(), self.call_timeout_ms);
        convert::promise(async move {
            let (upper, as_of, rows) = location
                .run("contents", timeout.map(|ms| (&runtime, ms)), async move {
                    contents_now::<SourceData, ()>(&client, &shard).await
                })
                .await?;
            let rows = rows
                .into_iter()
                .map(|((SourceData(data), ()), _, diff)| UpsertRowView::new(data, diff))
                .collect();
            Ok(convert::to_js(&UpsertContentsView {
                upper: convert::frontier_out(&upper, "the upper")?,
                as_of: convert::opt_ms(as_of, "the as-of")?,
                rows,
            })?)
        })
    }

    /// Takes the events of every replica recorded since the last call, oldest first.
    #[wasm_bindgen(js_name = takeEvents, unchecked_return_type = "UpsertEventView[]")]
    pub fn take_events(&self) -> Result<JsValue, JsValue> {
        let out = js_sys::Array::new();
        for e in self.log.take() {
            out.push(&convert::to_js(&e)?);
        }
        Ok(out.into())
    }

    /// Stops the pipeline: its replicas crash and its checker ends. Later calls reject with
    /// code `"Expired"`; the shard stays as it is.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn shutdown(&self) -> Promise {
        let pipeline = Rc::clone(&self.pipeline);
        convert::promise(async move {
            drop(pipeline.lock().await.take());
            Ok(JsValue::UNDEFINED)
        })
    }
}
