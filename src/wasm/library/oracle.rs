//! `TimestampOracle` in JS: monotone read and write timestamps for one timeline.
//!
//! - `TimestampOracle.inMemory(options?)`: in memory; nothing survives.
//! - `TimestampOracle.open(location, options)`: durable on the location's Consensus, with
//!   pre-allocated windows (`persistIntervalMs`): a restart (a new `open` on the same timeline)
//!   resumes above every timestamp ever handed out, and fences the instance it took over from
//!   (its calls reject with code `"Fenced"`).
//!
//! The contract: `writeTs()` is above every earlier read or write timestamp (and tracks the wall
//! clock unless `clock: "none"`), `readTs()` is at least every applied write, and
//! `applyWrite(t)` raises both to `t`. Timestamps are milliseconds, as numbers.

use std::rc::Rc;

use js_sys::Promise;
use wasm_bindgen::prelude::*;

use super::convert::{self, ms, Options};
use super::errors::{LibError, LibResult};
use super::location::{JsPersistLocation, LocationShared};
use crate::oracle::{
    DurableOracleConfig, DurableTimestampOracle, InMemoryTimestampOracle, NowFn, TimestampOracle,
};
use crate::runtime::browser::BrowserRuntime;
use crate::runtime::Runtime;

#[wasm_bindgen(typescript_custom_section)]
const TS_ORACLE: &'static str = r#"
/** Options of `TimestampOracle.inMemory`. */
export interface InMemoryOracleOptions {
    /** Where the timeline starts (both timestamps). Default 0. */
    initially?: Time;
    /** "wall": write timestamps track Date.now(); "none": only monotonicity. Default "wall". */
    clock?: "wall" | "none";
}
/** Options of `TimestampOracle.open`. */
export interface DurableOracleOptions extends InMemoryOracleOptions {
    /** The timeline (its record's Consensus key is derived from it). */
    timeline: string;
    /** Timestamps served from memory per durable write. Default 5000. */
    persistIntervalMs?: number;
    /** Check the epoch (one Consensus read) before every writeTs and readTs. Default false. */
    confirmLeadership?: boolean;
    /** Bound every call, in ms (rejects with code "Timeout"). */
    callTimeoutMs?: number;
}
"#;

fn clock(o: &Options, runtime: &Runtime) -> LibResult<NowFn> {
    match o.get("clock") {
        None => Ok(NowFn::from_runtime(runtime)),
        Some(v) => match convert::string(&v, &o.name("clock"))?.as_str() {
            "wall" => Ok(NowFn::from_runtime(runtime)),
            "none" => Ok(NowFn::constant(0)),
            other => Err(LibError::type_error(format!(
                "{} must be \"wall\" or \"none\", got {other:?}",
                o.name("clock")
            ))),
        },
    }
}

/// A timestamp oracle. See the module docs.
#[wasm_bindgen(js_name = TimestampOracle)]
pub struct JsTimestampOracle {
    oracle: Rc<dyn TimestampOracle>,
    durable: Option<Rc<DurableTimestampOracle>>,
    location: Option<Rc<LocationShared>>,
    runtime: Runtime,
    call_timeout_ms: Option<u64>,
}

impl JsTimestampOracle {
    /// Runs one oracle call: on the location (if durable) and within the call bound.
    fn call<T: 'static>(
        &self,
        op: &'static str,
        f: impl AsyncFnOnce(Rc<dyn TimestampOracle>) -> LibResult<T> + 'static,
        out: impl FnOnce(T) -> LibResult<JsValue> + 'static,
    ) -> Promise {
        let (oracle, location) = (Rc::clone(&self.oracle), self.location.clone());
        let (runtime, timeout) = (self.runtime.clone(), self.call_timeout_ms);
        convert::promise(async move {
            let value = match &location {
                Some(l) => {
                    l.run(op, timeout.map(|ms| (&runtime, ms)), f(oracle))
                        .await?
                }
                None => f(oracle).await?,
            };
            Ok(out(value)?)
        })
    }
}

#[wasm_bindgen(js_class = TimestampOracle)]
impl JsTimestampOracle {
    /// An oracle in memory.
    #[wasm_bindgen(js_name = inMemory)]
    pub fn in_memory(
        #[wasm_bindgen(unchecked_optional_param_type = "InMemoryOracleOptions")] options: JsValue,
    ) -> Result<JsTimestampOracle, JsValue> {
        let o = Options::new(&options, "options", &["initially", "clock"])?;
        let initially = o.parse_or("initially", 0, convert::time)?;
        let runtime = BrowserRuntime::runtime();
        let now = clock(&o, &runtime)?;
        Ok(JsTimestampOracle {
            oracle: Rc::new(InMemoryTimestampOracle::new(initially, now)),
            durable: None,
            location: None,
            runtime,
            call_timeout_ms: None,
        })
    }

    /// Opens a durable instance on `location`: bumps the timeline's epoch (fencing the previous
    /// instance) and resumes above every timestamp handed out before.
    #[wasm_bindgen(unchecked_return_type = "Promise<TimestampOracle>")]
    pub fn open(
        location: &JsPersistLocation,
        #[wasm_bindgen(unchecked_param_type = "DurableOracleOptions")] options: JsValue,
    ) -> Promise {
        let shared = Rc::clone(&location.shared);
        convert::promise(async move {
            let o = Options::required(
                &options,
                "options",
                &[
                    "timeline",
                    "initially",
                    "clock",
                    "persistIntervalMs",
                    "confirmLeadership",
                    "callTimeoutMs",
                ],
            )?;
            let timeline = o.parse_required("timeline", convert::string)?;
            if timeline.is_empty() {
                return Err(LibError::range("options.timeline must not be empty").into());
            }
            let initially = o.parse_or("initially", 0, convert::time)?;
            let interval = o.parse_or("persistIntervalMs", 5_000, convert::time)?;
            let confirm = o.parse_or("confirmLeadership", false, convert::boolean)?;
            let timeout = o
                .get("callTimeoutMs")
                .map(|v| convert::time(&v, &o.name("callTimeoutMs")))
                .transpose()?;
            let runtime = BrowserRuntime::runtime();
            let now = clock(&o, &runtime)?;
            let config = DurableOracleConfig::new(timeline)
                .persist_interval_ms(interval)
                .confirm_leadership(confirm);
            let consensus = Rc::clone(&shared.location().consensus);
            let rt = runtime.clone();
            let durable = shared
                .run(
                    "TimestampOracle.open",
                    timeout.map(|ms| (&runtime, ms)),
                    async move {
                        Ok(
                            DurableTimestampOracle::open(consensus, rt, now, initially, config)
                                .await?,
                        )
                    },
                )
                .await?;
            let durable = Rc::new(durable);
            Ok(JsTimestampOracle {
                oracle: Rc::clone(&durable) as Rc<dyn TimestampOracle>,
                durable: Some(durable),
                location: Some(shared),
                runtime,
                call_timeout_ms: timeout,
            }
            .into())
        })
    }

    /// Whether this instance is durable (opened with `open`).
    #[wasm_bindgen(getter)]
    pub fn durable(&self) -> bool {
        self.durable.is_some()
    }

    /// A new write timestamp, above every earlier read and write timestamp.
    #[wasm_bindgen(js_name = writeTs, unchecked_return_type = "Promise<WriteTimestampView>")]
    pub fn write_ts(&self) -> Promise {
        self.call(
            "writeTs",
            async |o| Ok(o.write_ts().await?),
            |w| convert::to_js(&w),
        )
    }

    /// The latest write timestamp, not advanced.
    #[wasm_bindgen(js_name = peekWriteTs, unchecked_return_type = "Promise<number>")]
    pub fn peek_write_ts(&self) -> Promise {
        self.call(
            "peekWriteTs",
            async |o| Ok(o.peek_write_ts().await?),
            |t| Ok(JsValue::from_f64(ms(t, "the write timestamp")?)),
        )
    }

    /// A read timestamp: at least every applied write.
    #[wasm_bindgen(js_name = readTs, unchecked_return_type = "Promise<number>")]
    pub fn read_ts(&self) -> Promise {
        self.call(
            "readTs",
            async |o| Ok(o.read_ts().await?),
            |t| Ok(JsValue::from_f64(ms(t, "the read timestamp")?)),
        )
    }

    /// Marks a write at `timestamp` complete: afterwards `readTs() >= timestamp`.
    #[wasm_bindgen(js_name = applyWrite, unchecked_return_type = "Promise<void>")]
    pub fn apply_write(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Time")] timestamp: JsValue,
    ) -> Promise {
        match convert::time(&timestamp, "timestamp") {
            Ok(t) => self.call(
                "applyWrite",
                async move |o| Ok(o.apply_write(t).await?),
                |()| Ok(JsValue::UNDEFINED),
            ),
            Err(e) => Promise::reject(&e.into()),
        }
    }

    /// Durable only: checks (one Consensus read) that no other instance took over.
    #[wasm_bindgen(js_name = confirmLeadership, unchecked_return_type = "Promise<void>")]
    pub fn confirm_leadership(&self) -> Promise {
        let Some(durable) = self.durable.clone() else {
            let e = LibError::new(
                "OracleError",
                "confirmLeadership: an in-memory oracle has no leadership to confirm",
            );
            return Promise::reject(&e.into());
        };
        self.call(
            "confirmLeadership",
            async move |_| Ok(durable.confirm_leadership().await?),
            |()| Ok(JsValue::UNDEFINED),
        )
    }

    /// Durable only: the instance as plain data (`null` for an in-memory oracle).
    #[wasm_bindgen(unchecked_return_type = "OracleSnapshotView | null")]
    pub fn snapshot(&self) -> Result<JsValue, JsValue> {
        match &self.durable {
            Some(d) => Ok(convert::to_js(&d.snapshot())?),
            None => Ok(JsValue::NULL),
        }
    }

    /// Durable only: takes the recorded events, oldest first (`[]` for an in-memory oracle).
    #[wasm_bindgen(js_name = takeEvents, unchecked_return_type = "OracleEventView[]")]
    pub fn take_events(&self) -> Result<JsValue, JsValue> {
        let out = js_sys::Array::new();
        if let Some(d) = &self.durable {
            for e in d.take_events() {
                out.push(&convert::to_js(&e)?);
            }
        }
        Ok(out.into())
    }
}
