//! The only `#[wasm_bindgen]` surface of the crate (wasm32 only). Thin by design: each exported
//! call checks its JS input, calls the core, and hands back plain data (serde structs as JSON
//! text through `JSON.parse`) or a JS `Error` with a message. Nothing here holds protocol state.
//!
//! - [`Playground`]: the facade of the playground engine ([`crate::playground::Scenario`]).
//! - `BenchWriter` (Cargo feature `bench`, module `bench`): a writer for the browser benchmark
//!   page (`www/bench.html`).
//! - The library's JavaScript API (Cargo feature `library`, module `library`): what the npm
//!   package exports.
//!
//! The page's build (`scripts/build.sh`) has neither feature, which keeps its `.wasm` small.
//!
//! Seeds are `u64` and may exceed 2^53, so they cross the boundary as decimal strings (a safe
//! integer number is accepted too). Live-mode seeds are drawn here, once per page, with
//! `crypto.getRandomValues`: two tabs on one database never draw the same writer ids.

// A writer for the IndexedDB benchmark page; only its build (`scripts/build.sh --bench`) has it.
#[cfg(feature = "bench")]
pub mod bench;
// The library's JavaScript API (issue 12): one child module per component. The npm package
// (`scripts/package.sh`) is built with it; the page is not.
#[cfg(feature = "library")]
pub mod library;

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::Promise;
use serde::Serialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use crate::location::idb::IdbLocation;
use crate::playground::value::{DecodeError, Value};
use crate::playground::{decode, Replay, Scenario, Stamp};
use crate::runtime::browser::BrowserRuntime;

/// The longest database name the page accepts.
const MAX_DB_CHARS: usize = 128;
/// The most events one `eventsAfter` call returns.
const MAX_EVENTS: u32 = 5_000;
/// The most virtual time one `runFor` call may cover.
const MAX_RUN_MS: f64 = 600_000.0;
/// The most simulator steps one `step` call may take.
const MAX_STEPS: u32 = 1_000_000;

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
/** A command: see src/playground/command.rs (`{ type: "addActor", spec: { kind: "writer", ... } }`). */
export type PlaygroundCommand = { type: string; [field: string]: unknown };
/** What an applied command reports. */
export interface Applied { actor: string | null; process: string | null; message: string }
/** An actor's spec (src/playground/command.rs `ActorSpec`): `{ kind: "writer", shard: "data", ... }`. */
export type ActorSpec = { kind: string; [field: string]: unknown };
/** A rule the page may turn off (src/playground/rules.rs). */
export interface RuleInfo { id: string; key: string; name: string; badge: string; text: string }
/** The page's fixed facts (src/playground/table.rs): rules, default specs, the default scenario. */
export interface PageTable {
  rules: RuleInfo[];
  defaults: { writer: ActorSpec; reader: ActorSpec; task: ActorSpec; oracle: ActorSpec; replica: ActorSpec };
  defaultActors: ActorSpec[];
}
/** When a command applied, in seed mode: simulator steps taken before it, and its virtual time. */
export interface Stamp { step: number; atMs: number }
/** A command with its stamp: a seed-mode run is a function of its seed and these. */
export interface StampedCommand { stamp: Stamp; command: PlaygroundCommand }
/**
 * Everything the page draws (src/playground/snapshot.rs). The top level is typed here; the
 * panels' views are plain objects whose fields the Rust docs of each view describe.
 */
export interface PlaygroundSnapshot {
    mode: "seed" | "live"; seed: string; nowMs: number; steps: number; lastSeq: number;
    commands: number;
    processes: Record<string, unknown>[]; actors: Record<string, unknown>[];
    shards: Record<string, unknown>[]; timelines: Record<string, unknown>[];
    consensus: Record<string, unknown>[]; faults: Record<string, unknown>;
    verify: Record<string, unknown> | null; notices: Record<string, unknown>[];
    upsert: Record<string, unknown> | null;
    /** Protocol rules (src/playground/rules.rs): false = off, new actors run the variant. */
    rules: { idempotencyToken: boolean; oracleDurableBound: boolean; upsertFeedback: boolean; taskResync: boolean };
    check: CheckReport;
}
/** The live check of the history (src/playground/check/): checks and breaks per rule. */
export interface CheckReport {
    events: number; facts: number; violationsTotal: number;
    rules: { rule: string; title: string; checks: number; violations: number; unverified: number }[];
    /** The newest violations, oldest first: the events that broke the rule, and faults beside them. */
    violations: { rule: string; message: string; atMs: number; seqs: number[]; faults: number[] }[];
}
/** One event of the merged log. `fact`: its structured payload (src/playground/fact.rs). */
export interface PlayEvent {
    seq: number; atMs: number; actor: string | null; process: string | null;
    component: string; kind: string; outcome: string; detail: string;
    fact?: { type: string; [field: string]: unknown };
}
"#;

#[wasm_bindgen(start)]
fn start() {
    console_error_panic_hook::set_once();
}

fn js_error(err: impl std::fmt::Display) -> JsValue {
    js_sys::Error::new(&err.to_string()).into()
}

/// `value` as a plain JS object: JSON text ([`crate::playground::json`]) through `JSON.parse`,
/// one string across the boundary rather than one call per field.
fn to_js<T: Serialize>(value: &T) -> Result<JsValue, JsValue> {
    let text = crate::playground::json::to_json(value).map_err(js_error)?;
    js_sys::JSON::parse(&text)
}

/// The page's table of fixed facts: the rules (id, key, name, badge, text), each kind's default
/// spec and the default scenario (`src/playground/table.rs`). The page reads it once.
#[wasm_bindgen(js_name = pageTable, unchecked_return_type = "PageTable")]
pub fn page_table() -> Result<JsValue, JsValue> {
    to_js(&crate::playground::table::PageTable::default())
}

/// How deep a command's objects may nest (a command nests 3 deep; this also stops a cyclic object).
const MAX_DEPTH: u32 = 16;

/// Plain data from a JS value, as `JSON.stringify` would see it (properties that are `undefined`
/// are left out); the core decodes commands from it ([`decode`]).
fn value_of(js: &JsValue, depth: u32) -> Result<Value, DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError::new(format!(
            "objects nested more than {MAX_DEPTH} deep"
        )));
    }
    if js.is_null() || js.is_undefined() {
        Ok(Value::Null)
    } else if let Some(b) = js.as_bool() {
        Ok(Value::Bool(b))
    } else if let Some(n) = js.as_f64() {
        Ok(Value::number(n))
    } else if let Some(s) = js.as_string() {
        Ok(Value::Str(s))
    } else if js_sys::Array::is_array(js) {
        let items: &js_sys::Array = js.unchecked_ref();
        items
            .iter()
            .map(|v| value_of(&v, depth + 1))
            .collect::<Result<_, _>>()
            .map(Value::Array)
    } else if js.is_object() && !js.is_function() {
        let mut entries = Vec::new();
        for entry in js_sys::Object::entries(js.unchecked_ref()).iter() {
            let entry: js_sys::Array = entry.unchecked_into();
            let value = entry.get(1);
            if !value.is_undefined() {
                let key = entry.get(0).as_string().unwrap_or_default();
                entries.push((key, value_of(&value, depth + 1)?));
            }
        }
        Ok(Value::Object(entries))
    } else {
        let kind = js.js_typeof().as_string().unwrap_or_default();
        Err(DecodeError::new(format!(
            "invalid type: {kind}, expected plain data"
        )))
    }
}

fn check_db_name(name: &str) -> Result<(), JsValue> {
    if name.is_empty() || name.chars().count() > MAX_DB_CHARS {
        return Err(js_error(format!(
            "the database name must be 1 to {MAX_DB_CHARS} characters"
        )));
    }
    Ok(())
}

/// A seed from a decimal string or a safe non-negative integer.
fn parse_seed(seed: &JsValue) -> Result<u64, JsValue> {
    if let Some(s) = seed.as_string() {
        return s.trim().parse::<u64>().map_err(|_| {
            js_error(format!(
                "seed {s:?} is not a whole number between 0 and 18446744073709551615"
            ))
        });
    }
    if let Some(n) = seed.as_f64() {
        if n.fract() == 0.0 && (0.0..=9_007_199_254_740_991.0).contains(&n) {
            return Ok(n as u64);
        }
        return Err(js_error(format!(
            "seed {n} is not a whole number between 0 and 2^53 (pass larger seeds as strings)"
        )));
    }
    Err(js_error("the seed must be a number or a decimal string"))
}

/// 64 bits from `crypto.getRandomValues`: the one place real randomness enters.
fn random_seed() -> Result<u64, JsValue> {
    let crypto = js_sys::Reflect::get(&js_sys::global(), &"crypto".into())?;
    let get: js_sys::Function = js_sys::Reflect::get(&crypto, &"getRandomValues".into())?
        .dyn_into()
        .map_err(|_| js_error("crypto.getRandomValues is not available"))?;
    let words = js_sys::Uint32Array::new_with_length(2);
    get.call1(&crypto, &words)?;
    Ok((u64::from(words.get_index(0)) << 32) | u64::from(words.get_index(1)))
}

/// A whole number of steps or ms from 0 to 2^53.
fn whole(what: &str, n: f64) -> Result<u64, JsValue> {
    if n.fract() == 0.0 && (0.0..=9_007_199_254_740_991.0).contains(&n) {
        Ok(n as u64)
    } else {
        Err(js_error(format!(
            "{what} must be a whole number >= 0, not {n}"
        )))
    }
}

fn replay_of(
    seed: &JsValue,
    commands: JsValue,
    step: f64,
    at_ms: Option<f64>,
) -> Result<Replay, JsValue> {
    let seed = parse_seed(seed)?;
    let commands = value_of(&commands, 0)
        .and_then(|v| decode::stamped_list(&v))
        .map_err(|e| js_error(format!("bad stamped command list: {e}")))?;
    let step = whole("the step", step)?;
    match at_ms {
        Some(ms) => {
            let at_ms = whole("the time", ms)?;
            Replay::new(seed, commands, Stamp { step, at_ms })
        }
        None => Replay::to_step(seed, commands, step),
    }
    .map_err(js_error)
}

/// A rebuild of a seed-mode run to a point, a slice of steps at a time (see
/// `src/playground/replay.rs`): how the page forks, scrubs past its kept snapshots and opens
/// share links and imported runs without freezing.
#[wasm_bindgen]
pub struct PlaygroundReplay {
    replay: RefCell<Option<Replay>>,
}

#[wasm_bindgen]
impl PlaygroundReplay {
    /// A replay of `commands` (`StampedCommand[]`) on a fresh scenario of `seed`, to stop at
    /// simulator step `step` and virtual time `atMs` (a recorded point), or without `atMs`
    /// right after step `step` (a point between recorded ones). Throws if the input is malformed.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_param_type = "number | string")] seed: JsValue,
        #[wasm_bindgen(unchecked_param_type = "StampedCommand[]")] commands: JsValue,
        step: f64,
        #[wasm_bindgen(js_name = atMs)] at_ms: Option<f64>,
    ) -> Result<PlaygroundReplay, JsValue> {
        Ok(PlaygroundReplay {
            replay: RefCell::new(Some(replay_of(&seed, commands, step, at_ms)?)),
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut Replay) -> R) -> Result<R, JsValue> {
        let mut r = self
            .replay
            .try_borrow_mut()
            .map_err(|_| js_error("the replay is busy"))?;
        let r = r
            .as_mut()
            .ok_or_else(|| js_error("the replay has finished"))?;
        Ok(f(r))
    }

    /// Takes at most `steps` simulator steps; returns whether the target is reached.
    pub fn advance(&self, steps: u32) -> Result<bool, JsValue> {
        self.with(|r| r.advance(u64::from(steps)))?
            .map_err(js_error)
    }

    /// Simulator steps taken so far.
    #[wasm_bindgen(getter)]
    pub fn steps(&self) -> Result<f64, JsValue> {
        self.with(|r| r.steps() as f64)
    }

    /// The snapshot of the scenario so far.
    #[wasm_bindgen(unchecked_return_type = "PlaygroundSnapshot")]
    pub fn snapshot(&self) -> Result<JsValue, JsValue> {
        let snap = self.with(|r| r.scenario().snapshot())?;
        to_js(&snap)
    }

    /// The rebuilt playground, once `advance` returned true (this replay is then used up).
    pub fn finish(&self) -> Result<Playground, JsValue> {
        let r = self
            .replay
            .try_borrow_mut()
            .map_err(|_| js_error("the replay is busy"))?
            .take()
            .ok_or_else(|| js_error("the replay has finished"))?;
        Ok(Playground {
            scenario: RefCell::new(r.finish().map_err(js_error)?),
            db: None,
        })
    }
}

/// The playground engine, for the page. See `src/playground/`.
#[wasm_bindgen]
pub struct Playground {
    scenario: RefCell<Scenario>,
    db: Option<Rc<IdbLocation>>,
}

#[wasm_bindgen]
impl Playground {
    /// A seed-mode scenario (the simulator over memory): a function of its seed and commands.
    pub fn seeded(
        #[wasm_bindgen(unchecked_param_type = "number | string")] seed: JsValue,
    ) -> Result<Playground, JsValue> {
        let seed = parse_seed(&seed)?;
        Ok(Playground {
            scenario: RefCell::new(Scenario::seeded(seed)),
            db: None,
        })
    }

    /// A live-mode scenario over IndexedDB database `dbName`, on real timers, with a seed drawn
    /// from `crypto.getRandomValues`. Resolves to a `Playground`.
    #[wasm_bindgen(unchecked_return_type = "Promise<Playground>")]
    pub fn live(#[wasm_bindgen(js_name = dbName)] db_name: String) -> Promise {
        future_to_promise(async move {
            check_db_name(&db_name)?;
            let seed = random_seed()?;
            let db = IdbLocation::open(&db_name).await.map_err(js_error)?;
            // One clock for every page of the database, across reloads: ms since it was made.
            let location = db.location();
            let wall = BrowserRuntime::wall_now_ms();
            let epoch = crate::playground::clock::database_epoch(&*location.consensus, wall)
                .await
                .map_err(js_error)?;
            let runtime = BrowserRuntime::runtime_since(epoch);
            let scenario = Scenario::live(runtime, location, seed);
            Ok(Playground {
                scenario: RefCell::new(scenario),
                db: Some(Rc::new(db)),
            }
            .into())
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut Scenario) -> R) -> Result<R, JsValue> {
        let mut s = self
            .scenario
            .try_borrow_mut()
            .map_err(|_| js_error("the playground is busy (a call is already running)"))?;
        Ok(f(&mut s))
    }

    /// Applies a command (plain object, see `PlaygroundCommand`). Returns `Applied`, or throws an
    /// `Error` saying why it was refused (then nothing changed).
    #[wasm_bindgen(unchecked_return_type = "Applied")]
    pub fn send(
        &self,
        #[wasm_bindgen(unchecked_param_type = "PlaygroundCommand")] command: JsValue,
    ) -> Result<JsValue, JsValue> {
        let command = value_of(&command, 0)
            .and_then(|v| decode::command(&v))
            .map_err(|e| js_error(format!("bad command: {e}")))?;
        let applied = self.with(|s| s.apply(command))?.map_err(js_error)?;
        to_js(&applied)
    }

    /// Takes `steps` simulator steps (seed mode).
    pub fn step(&self, steps: u32) -> Result<(), JsValue> {
        if steps > MAX_STEPS {
            return Err(js_error(format!("at most {MAX_STEPS} steps at a time")));
        }
        self.with(|s| s.step(u64::from(steps)))?.map_err(js_error)
    }

    /// Runs `ms` milliseconds of virtual time (seed mode).
    #[wasm_bindgen(js_name = runFor)]
    pub fn run_for(&self, ms: f64) -> Result<(), JsValue> {
        if !(0.0..=MAX_RUN_MS).contains(&ms) || ms.fract() != 0.0 {
            return Err(js_error(format!(
                "runFor takes a whole number of ms from 0 to {MAX_RUN_MS}"
            )));
        }
        self.with(|s| s.run_for(ms as u64))?.map_err(js_error)
    }

    /// The snapshot the page draws (plain data; see `src/playground/snapshot.rs`).
    #[wasm_bindgen(unchecked_return_type = "PlaygroundSnapshot")]
    pub fn snapshot(&self) -> Result<JsValue, JsValue> {
        let snap = self.with(|s| s.snapshot())?;
        to_js(&snap)
    }

    /// A fingerprint of the current snapshot (16 hex digits).
    pub fn digest(&self) -> Result<String, JsValue> {
        self.with(|s| s.snapshot().digest())
    }

    /// Up to `limit` events with a sequence number above `cursor`, oldest first.
    #[wasm_bindgen(js_name = eventsAfter, unchecked_return_type = "PlayEvent[]")]
    pub fn events_after(&self, cursor: f64, limit: u32) -> Result<JsValue, JsValue> {
        if !(cursor >= 0.0 && cursor.fract() == 0.0) {
            return Err(js_error("the cursor must be a whole number >= 0"));
        }
        let events =
            self.with(|s| s.events_after(cursor as u64, limit.min(MAX_EVENTS) as usize))?;
        to_js(&events)
    }

    /// The commands applied so far with their stamps (in seed mode, a run is a function of the
    /// seed and these).
    #[wasm_bindgen(js_name = stampedCommands, unchecked_return_type = "StampedCommand[]")]
    pub fn stamped_commands(&self) -> Result<JsValue, JsValue> {
        let stamped = self.with(|s| s.stamped().to_vec())?;
        to_js(&stamped)
    }

    /// `seed` or `live`.
    #[wasm_bindgen(getter)]
    pub fn mode(&self) -> String {
        if self.db.is_some() { "live" } else { "seed" }.into()
    }

    /// The seed, as a decimal string.
    #[wasm_bindgen(getter)]
    pub fn seed(&self) -> Result<String, JsValue> {
        self.with(|s| s.seed().to_string())
    }

    /// Live mode: stops this page's actors, closes the connection and deletes the database.
    /// The playground is unusable after; create a new one.
    #[wasm_bindgen(js_name = deleteDatabase, unchecked_return_type = "Promise<void>")]
    pub fn delete_database(&self) -> Promise {
        let db = self.db.clone();
        // Stop every actor now: a fresh, empty scenario replaces this one.
        let stopped = self.with(|s| {
            let seed = s.seed();
            *s = Scenario::seeded(seed);
        });
        future_to_promise(async move {
            stopped?;
            let Some(db) = db else {
                return Err(js_error(
                    "seed mode has no database (create a new playground)",
                ));
            };
            db.close();
            IdbLocation::delete_database(db.name())
                .await
                .map_err(js_error)?;
            Ok(JsValue::UNDEFINED)
        })
    }
}
