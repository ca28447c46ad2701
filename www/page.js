// The page as one object: the playground it runs, the state and view the panels draw, the
// commands it sends and the frame loop. main.js starts it; controls.js, time.js and the tours
// reach the engine only through it. It holds no protocol state: every frame draws the engine's
// latest snapshot.

import { renderAll, renderMode, renderRunbar, renderStatus, viewChanged, whenViewChanges } from "./render/index.js";
import { resetLog, setLogFilter, showNewest } from "./render/log.js";
import { makeSteady } from "./render/steady.js";
import { makeState } from "./state.js";
import { makeTime } from "./time.js";
import { startTours } from "./tours/controller.js";
import { tourParams } from "./tours/engine.js";

const SPEEDS = ["0.25", "1", "4", "16", "max"];
/** Virtual time one Step advances. */
const STEP_MS = 100;
/** The most virtual time one frame may cover at a fixed speed (a slow frame does not jump). */
const MAX_FRAME_VIRTUAL_MS = 250;
/**
 * At full speed the simulator gets what is left of a frame's script budget once the snapshot and
 * the render are paid for (their cost over the last three frames: panels take turns between frames),
 * between a floor and a ceiling, in slices of a few steps (a slice overshoots by at most one).
 */
const FRAME_SCRIPT_TARGET_MS = 7;
const FULL_SPEED_MIN_MS = 1;
const FULL_SPEED_MAX_MS = 4;
const FULL_SPEED_SLICE_STEPS = 5;
/**
 * Live mode: the actors run on real timers whatever the page does, and the page follows them.
 * It pulls when the engine logged an event since the last pull, at most once per LIVE_PULL_MS
 * (the period at which live mode's observers read the shards, src/playground/mod.rs
 * `observe_period_ms`: the Shard panel changes no faster), and at least once per
 * LIVE_REFRESH_MS (the clock; what an observer read without an event of this tab). In between
 * it sleeps on a timer, with no animation frame.
 */
const LIVE_PULL_MS = 200;
const LIVE_REFRESH_MS = 1000;
/** Live mode reads at most this many events a pull; further behind (after a pause), it skips to the newest. */
const LIVE_EVENTS_PER_PULL = 500;
const LIVE_EVENTS_KEPT = 400;
/**
 * The actors' components keep their events until the engine folds them into its merged log
 * (src/playground/snapshot.rs `pump`, on a pull), each up to 100,000 before it drops the oldest.
 * Without a pull for this long (paused, or a hidden tab: no animation frame), the page has the
 * engine fold them (no snapshot, no draw): nothing is dropped, and Play meets no backlog.
 */
const LIVE_FOLD_MS = 1000;

/**
 * Input that may change the run or what the page shows (a button, a select, a key, a panel
 * opened or closed, the window resized, the history moved): the next frame draws. Listened to
 * on the window, before any handler, so no control has to remember to say so.
 */
const CHANGE_EVENTS = ["click", "input", "change", "submit", "keydown", "toggle", "resize", "popstate"];

const layoutKey = (db) => `persist-playground:layout:${db}`;

/**
 * A press held on a control (a button, a link, a checkbox): until it ends, a running page draws
 * no panel. A redraw can move the control (the Shard panel alone varies by ~70 px while a run
 * plays), and a press released over another place is no click: a Crash pressed on a running page
 * was lost so. The press ends with its release, its cancel (a touch turned scroll, a drag, a
 * context menu), the pointer leaving the control (a release there would be no click anyway) or the
 * page losing focus. Nothing else ends it: a slow machine may take its time between a press and
 * its release. PRESS_FREEZE_MS is only a valve, in case none of those events ever reaches the page.
 */
const PRESS_FREEZE_MS = 10_000;
const PRESSABLE = "button, a, summary, label, input[type=checkbox], input[type=radio], input[type=submit], [data-action]";
let pressed = null; // { control, at }
addEventListener("pointerdown", (e) => {
  const control = e.isPrimary && e.button === 0 && e.target instanceof Element ? e.target.closest(PRESSABLE) : null;
  pressed = control ? { control, at: performance.now() } : null;
}, { capture: true, passive: true });
const letGo = () => { pressed = null; };
for (const type of ["pointerup", "pointercancel", "contextmenu", "dragstart"]) addEventListener(type, letGo, { capture: true, passive: true });
addEventListener("blur", (e) => { if (e.target === window) letGo(); }); // the window's, not a control's
addEventListener("visibilitychange", letGo);
addEventListener("pointerout", (e) => {
  const into = e.relatedTarget instanceof Node ? e.relatedTarget : null;
  if (pressed && e.isPrimary && !(into && pressed.control.contains(into))) letGo();
}, { capture: true, passive: true });
const pressHeld = () => pressed !== null && performance.now() - pressed.at < PRESS_FREEZE_MS;

/**
 * The pointer come onto a control (a button, a field): from its arrival, for at most
 * HOVER_FREEZE_MS (the time to aim and press), a running page draws no panel either. A panel
 * above can grow and push the control down between the pointer's arrival and the press (a
 * learner walk lost a Push so: 85 px in a 150 ms pause); render/steady.js stops them shrinking,
 * not growing. The pointer leaving the control, or the window, ends it; a pointer resting on a
 * control longer is no longer aiming, and the panels go on. Not while a tour is open: a tour
 * steps its run by the card's buttons, under the pointer, and its panels must draw meanwhile.
 */
const HOVER_FREEZE_MS = 1500;
const AIMABLE = `${PRESSABLE}, input, select, textarea`;
let hovered = null; // { control, at }
addEventListener("pointerover", (e) => {
  if (e.pointerType === "touch") return; // a touch has no hover: its press is all there is
  const control = e.target instanceof Element ? e.target.closest(AIMABLE) : null;
  if (control !== hovered?.control) hovered = control ? { control, at: performance.now() } : null;
}, { capture: true, passive: true });
addEventListener("pointerout", (e) => { if (!(e.relatedTarget instanceof Node)) hovered = null; }, { capture: true, passive: true });
const aimHeld = () => hovered !== null && hovered.control.isConnected && performance.now() - hovered.at < HOVER_FREEZE_MS;

/** The actors of a snapshot as a restorable layout: specs, grouped by process. */
function layoutOf(snap) {
  return snap.actors.map((a) => ({ spec: a.spec, group: a.process }));
}

/** The page over `dom`, for the URL parameters `params` (main.js's `readParams`). */
export function makePage(dom, params) {
  const state = makeState();
  const view = { t0: 0, playing: false, speed: "1", digest: null, db: params.db, frameMs: [], parts: [], otherMs: [0, 0, 0], busy: false };
  dom.seed.value = params.seed;
  renderMode(dom, params.mode, params.db);
  let wasm;
  let pg;
  let time;
  let lastFrame = performance.now();
  // Guided tours: set once the page is ready. A tour's playground replaces the default run.
  let tours = null;
  const touring = tourParams(window.location.search) !== null;
  /**
   * Something may have changed since the frame loop last drew: a snapshot pulled (a command, a
   * step, a tour, a fork), or input (CHANGE_EVENTS). A paused seed run changes only so: until
   * then the frame loop sleeps (requests no frame), and the tab idles; a change wakes it.
   */
  let dirty = true;
  /**
   * Input since the last draw (CHANGE_EVENTS): in live mode the next draw draws every panel, as
   * input may change what a panel shows without changing the data it is drawn from (a log
   * filter, a break picked in the Check panel).
   */
  let touched = true;
  let sleeping = false;
  /** Live mode sleeps on a timer until its next pull may be due (`sleep`). */
  let timer = null;
  /** When the page last pulled a snapshot (performance.now()). */
  let pulledAt = -Infinity;
  function wake() {
    if (!sleeping) return;
    sleeping = false;
    clearTimeout(timer);
    timer = null;
    requestAnimationFrame(frame);
  }
  /** The frame loop stops requesting frames: until `ms` from now, or (null) until a wake. */
  function sleep(ms = null) {
    sleeping = true;
    if (ms !== null) timer = setTimeout(wake, ms);
  }
  const markDirty = () => {
    dirty = true;
    wake();
  };
  // A panel above the pointer never shrinks (render/steady.js): what the pointer is on stays put.
  const steady = makeSteady();
  /** Whether the panels wait, and for what: "press" (a press held), "aim" (a pointer come onto a control) or null. */
  const panelsWait = () => (pressHeld() ? "press" : !tours?.current() && aimHeld() ? "aim" : null);
  const markTouched = () => {
    touched = true;
    markDirty();
  };

  const report = (status) => renderStatus(dom, status);
  // The event log panel reads the engine's bounded log for a filter or a citation (render/log.js).
  view.eventsAfter = (cursor, limit) => pg.eventsAfter(cursor, limit);
  const errorText = (err) => (err instanceof Error ? err.message : String(err));

  /** Forgets the old run's page state: its snapshots and events, and the log's choices. */
  function forgetRun() {
    state.clear();
    resetLog();
    report({ kind: "busy", text: "a new run replaced the old one" });
  }

  function refreshDigest() {
    // The digest is the present's: hidden while the page shows the past.
    view.digest = pg.mode === "seed" && !view.playing && !view.past ? pg.digest() : null;
  }

  function pull() {
    markDirty();
    pulledAt = performance.now();
    const snap = pg.snapshot();
    state.push(snap);
    // Live mode, far behind (the page was paused): the newest events, not a backlog to catch up on.
    const behind = pg.mode === "live" && snap.lastSeq - state.cursor() > LIVE_EVENTS_PER_PULL;
    state.addEvents(pg.eventsAfter(behind ? snap.lastSeq - LIVE_EVENTS_KEPT : state.cursor(), LIVE_EVENTS_PER_PULL));
    time?.record(snap);
    return snap;
  }

  /** Live mode, every LIVE_FOLD_MS: the engine folds its actors' events if no pull did. */
  function foldEvents() {
    setTimeout(foldEvents, LIVE_FOLD_MS);
    if (view.busy || pg?.mode !== "live" || performance.now() - pulledAt < LIVE_FOLD_MS) return;
    try {
      pg.eventsAfter(Number.MAX_SAFE_INTEGER, 0); // reads (and copies) none: the fold is what it is for
    } catch {
      // (busy in another call: the next fold or pull does it)
    }
  }

  /** Whether the engine logged an event since the last pull (cheap: reads at most one). */
  function news() {
    return pg.eventsAfter(state.cursor(), 1).length > 0;
  }

  /** After a command or a step: draw at once, so the page never shows the state before it. */
  function redraw() {
    refreshDigest();
    steady.update(!tours?.current());
    renderAll(dom, time ? time.shown(state) : state, view, true);
    time?.render();
  }

  /** Time (www/time.js): swaps in a replayed playground (a fork, an import), paused. */
  function replacePg(next) {
    tours?.beforeManual(); // a fork or an import leaves a guided tour
    pg.free();
    pg = next;
    forgetRun();
    const snap = pull();
    state.addEvents(pg.eventsAfter(Math.max(0, snap.lastSeq - 400), 400));
    view.playing = false;
    view.t0 = 0;
    redraw();
  }

  function saveLayout() {
    if (pg.mode !== "live") return;
    const snap = state.latest();
    if (snap) sessionStorage.setItem(layoutKey(params.db), JSON.stringify(layoutOf(snap)));
  }

  /** Sends one command; returns what it reported, or throws an Error with the engine's message. */
  function send(command, okText) {
    tours?.beforeManual();
    let applied;
    try {
      time?.guard();
      applied = pg.send(command);
    } catch (err) {
      report({ kind: "error", text: errorText(err) });
      throw err;
    }
    pull();
    saveLayout();
    redraw();
    report({ kind: "ok", text: okText ?? applied.message });
    return applied;
  }

  /** Adds `layout` (specs grouped by process): the first actor of a group starts its process. */
  function addLayout(layout) {
    const processOf = new Map();
    for (const { spec, group } of layout) {
      const applied = pg.send({ type: "addActor", spec, process: processOf.get(group) ?? null });
      if (!processOf.has(group)) processOf.set(group, applied.process);
    }
    pull();
    saveLayout();
  }

  // The scenario a newcomer meets comes from the engine (`pageTable().defaultActors`).
  const defaultLayout = () => (params.empty || touring ? [] : view.table.defaultActors.map((spec, i) => ({ spec, group: `g${i}` })));

  /** Creates the playground and starts `layout` (default: this tab's saved one, or the default). */
  async function create(layout = null) {
    if (params.mode === "live") {
      pg = await wasm.Playground.live(params.db);
      const saved = sessionStorage.getItem(layoutKey(params.db));
      addLayout(layout ?? (saved ? JSON.parse(saved) : defaultLayout()));
    } else if (params.run && !layout) {
      // A share link: replay its run to its step, paused; a damaged link starts the default run.
      try {
        const opened = await time.openLink(params.run);
        pg = opened.pg;
        pull();
        view.t0 = 0;
        view.linkText = `ready: opened the share link: seed ${pg.seed}, ${opened.doc.commands.length} commands, replayed to step ${opened.doc.at.step}`;
        return;
      } catch (err) {
        view.linkError = err;
        pg = wasm.Playground.seeded(params.seed);
        addLayout(defaultLayout());
      }
    } else {
      pg = wasm.Playground.seeded(params.seed);
      addLayout(layout ?? defaultLayout());
    }
    // With replicas, the source starts generating upserts (the newcomer sees the feedback loop).
    if (state.latest().actors.some((a) => a.spec.kind === "replica")) {
      pg.send({ type: "setGenerator", on: true });
      pull();
    }
    // Live mode's clock counts from the database's creation (src/playground/clock.rs): no offset.
    view.t0 = 0;
  }

  const app = {
    send,
    report,
    /** The event log's filters ("" for all): a view choice, the run is not touched. */
    setLogFilter(filter) {
      setLogFilter(filter);
      redraw();
    },
    /** The event log back to its newest rows (after showing a citation's events). */
    showNewestEvents() {
      showNewest();
      redraw();
    },
    latest: () => state.latest(),
    /** Whether a seed-mode run is playing (live mode runs on real timers: only its page pauses). */
    playing: () => pg.mode === "seed" && view.playing,
    /** The engine's table of fixed facts (src/playground/table.rs): rules, default specs. */
    table: () => view.table,
    /**
     * Seed mode: plays or pauses the run. Live mode: the actors run on real timers whatever the
     * page does; paused, the page stops pulling and drawing (it idles), and Play follows the
     * actors again.
     */
    togglePlay() {
      time.guard();
      tours?.beforeManual();
      view.playing = !view.playing;
      lastFrame = performance.now();
      redraw();
      const live = pg.mode === "live";
      report({ kind: "ok", text: view.playing ? "playing" : live ? "paused: this page stops following the actors, which run on (real timers)" : "paused" });
    },
    step() {
      if (pg.mode === "live") throw new Error("live mode runs on real timers: there is nothing to step");
      if (view.playing) throw new Error("pause first (space), then step");
      time.guard();
      tours?.beforeManual();
      pg.runFor(STEP_MS);
      pull();
      redraw();
      report({ kind: "ok", text: `stepped ${STEP_MS} ms` });
    },
    setSpeed(value) {
      if (!SPEEDS.includes(value)) throw new Error(`unknown speed ${value}`);
      view.speed = value;
      dom.speed.value = value;
    },
    faster(dir) {
      const i = Math.min(Math.max(SPEEDS.indexOf(view.speed) + dir, 0), SPEEDS.length - 1);
      app.setSpeed(SPEEDS[i]);
    },
    newRun(seedText) {
      const seed = String(seedText).trim();
      if (!/^\d{1,20}$/.test(seed)) throw new Error(`the seed must be a whole number, not ${JSON.stringify(seed)}`);
      const next = new URLSearchParams({ seed });
      if (!view.playing) next.set("autoplay", "0");
      window.location.search = next.toString();
    },
    switchMode() {
      window.location.search = pg.mode === "live" ? `seed=${encodeURIComponent(params.seed)}` : `mode=live&db=${encodeURIComponent(params.db)}`;
    },
    presetBusy() {
      tours?.beforeManual();
      const layout = [];
      for (let i = 0; i < 8; i++) {
        layout.push({ spec: { ...view.table.defaults.writer, ratePerS: 50, keyLo: 0, keyHi: 1000 }, group: `busy${i}` });
      }
      addLayout(layout);
      report({ kind: "ok", text: "added eight writers over a thousand keys" });
    },
    async resetDatabase() {
      tours?.beforeManual();
      const layout = state.latest() ? layoutOf(state.latest()) : [];
      view.busy = true;
      try {
        if (pg.mode === "live") await pg.deleteDatabase();
        pg.free();
        forgetRun();
        await create(layout);
        report({ kind: "ok", text: pg.mode === "live" ? `reset: deleted ${params.db} and started again, empty` : "reset: a fresh in-memory location" });
      } catch (err) {
        report({ kind: "error", text: `reset failed: ${errorText(err)}` });
      } finally {
        view.busy = false;
      }
    },
  };

  function frame(now) {
    const start = performance.now();
    // Time: while the past is shown or a replay runs, nothing is simulated or pulled.
    const still = time && (time.inPast() || time.busy());
    // (While busy, a reset may have freed the playground: it is not touched.)
    if (!view.busy && pg && pg.mode === "live") {
      liveFrame(start);
      lastFrame = now;
      return;
    }
    if (!view.busy && pg) {
      steady.update(!tours?.current());
      // A paused seed run that nothing touched since the last draw (and no replay under way): the
      // loop sleeps until markDirty or a change of the view (a scroll, a resize) wakes it.
      const paused = pg.mode === "seed" && !view.playing;
      if (paused && !dirty && !time.busy() && !viewChanged()) {
        sleeping = true;
        lastFrame = now;
        return;
      }
      // After a change while paused, every panel draws at once (off-screen ones too): no other
      // frame follows to take its turn.
      const force = paused && dirty;
      try {
        if (pg.mode === "seed" && view.playing && !still) {
          if (view.speed === "max") {
            // Whole simulator steps, a few at a time: the overshoot is at most one slow poll.
            const other = Math.max(...view.otherMs);
            const budget = Math.min(Math.max(FRAME_SCRIPT_TARGET_MS - other, FULL_SPEED_MIN_MS), FULL_SPEED_MAX_MS);
            do pg.step(FULL_SPEED_SLICE_STEPS);
            while (performance.now() - start < budget);
          } else {
            const ms = Math.min(Math.round((now - lastFrame) * Number(view.speed)), MAX_FRAME_VIRTUAL_MS);
            if (ms > 0) pg.runFor(ms);
          }
        }
        const simmed = performance.now();
        if (!still) pull();
        const pulled = performance.now();
        view.pressWait = force ? null : panelsWait();
        if (!view.pressWait) {
          renderAll(dom, time.shown(state), view, force);
          time.render();
        } else {
          // Held: the panels wait, the header's clock goes on (the run does) and says so.
          renderRunbar(dom, time.shown(state).latest(), view);
        }
        dirty = time.busy(); // a replay under way: the frame after it ends (or is cancelled) draws too
        const drawn = performance.now();
        view.otherMs.push(drawn - simmed);
        view.otherMs.shift();
        view.parts.push([simmed - start, pulled - simmed, drawn - pulled]);
        if (view.parts.length > 2000) view.parts.splice(0, 1000);
      } catch (err) {
        view.playing = false;
        dirty = false; // paused by the error: said once, not again every frame
        report({ kind: "error", text: `stopped: ${errorText(err)}` });
      }
      const took = performance.now() - start;
      view.frameMs.push(took);
      if (view.frameMs.length > 2000) view.frameMs.splice(0, 1000);
    }
    lastFrame = now;
    requestAnimationFrame(frame);
  }

  /**
   * Live mode's frame. Playing: a pull when one is due (LIVE_PULL_MS), and then only the panels
   * whose data changed are drawn. Paused: never a pull; input or a change of the view draws the
   * snapshot held. Either way the frame loop then sleeps: playing, until the next pull may be
   * due; paused, until input or the view wakes it (no timer: the page idles).
   */
  function liveFrame(start) {
    const since = start - pulledAt;
    const due = view.playing && since >= LIVE_PULL_MS && (since >= LIVE_REFRESH_MS || news());
    steady.update(!tours?.current());
    const wait = touched ? null : panelsWait(); // the learner's own input draws at once
    if (due && wait) {
      // Held: the panels wait (drawn at the release: the pull marks them dirty), the clock goes on.
      try {
        pull();
        view.pressWait = wait;
        renderRunbar(dom, state.latest(), view);
      } catch (err) {
        view.playing = false;
        report({ kind: "error", text: `stopped following the actors: ${errorText(err)}` });
      }
    } else if ((due || dirty || viewChanged()) && !wait) {
      try {
        if (due) pull();
        view.pressWait = null;
        const pulled = performance.now();
        renderAll(dom, state, view, touched, true);
        time.render();
        const drawn = performance.now();
        view.parts.push([0, pulled - start, drawn - pulled]);
        if (view.parts.length > 2000) view.parts.splice(0, 1000);
        view.frameMs.push(drawn - start);
        if (view.frameMs.length > 2000) view.frameMs.splice(0, 1000);
      } catch (err) {
        view.playing = false;
        report({ kind: "error", text: `stopped following the actors: ${errorText(err)}` });
      }
      dirty = false;
      touched = false;
    }
    // Paused with a draw held back for a press or an aim: soon again, to draw it when that ends.
    const heldBack = wait && (dirty || viewChanged());
    sleep(view.playing ? Math.max(0, pulledAt + LIVE_PULL_MS - performance.now()) : heldBack ? 100 : null);
  }

  /** Loads the playground: time first (a share link replays through it), then the run. */
  async function load(wasmModule) {
    wasm = wasmModule;
    view.table = wasm.pageTable();
    time = makeTime({ dom, wasm, pg: () => pg, replacePg, state, view, report, redraw });
    await create();
  }

  /** Draws every panel, then says the page is ready (and what went wrong on the way). */
  function ready() {
    // Live mode follows its actors unless ?autoplay=0 (then the page starts paused).
    view.playing = pg.mode === "live" ? params.autoplay : params.autoplay && !view.linkText && !touring;
    refreshDigest();
    renderAll(dom, state, view, true);
    renderRunbar(dom, state.latest(), view);
    // The time bar too (its label says what time travel can do here): the tours load, and the
    // frame loop starts, only after the page says it is ready (main.js).
    time.render();
    report({ kind: "ok", text: pg.mode === "live" ? `ready: live mode on IndexedDB database ${params.db}` : view.linkText ?? `ready: seed ${pg.seed}` });
    if (view.linkError) report({ kind: "error", text: `${view.linkError.message}; started seed ${pg.seed} instead` });
  }

  /** Starts the guided tours (www/tours/, www/render/tour.js): the picker, and the URL's tour. */
  function beginTours(list) {
    tours = startTours({
      Playground: wasm.Playground,
      dom,
      pg: () => pg,
      adopt(next) {
        time.reset();
        pg.free();
        pg = next;
        forgetRun();
        view.t0 = 0;
        view.playing = false;
      },
      pull,
      redraw,
      report,
      latest: () => state.latest(),
    /** Whether a seed-mode run is playing (live mode never is: it runs on real timers). */
    playing: () => pg.mode === "seed" && view.playing,
      mode: () => pg.mode,
      toPresent: () => time.toPresent(),
    }, list);
  }

  /** Draws every panel and starts the frame loop. */
  function run() {
    refreshDigest();
    renderAll(dom, state, view);
    renderRunbar(dom, state.latest(), view);
    for (const type of CHANGE_EVENTS) addEventListener(type, markTouched, { capture: true, passive: true });
    whenViewChanges(wake);
    if (pg.mode === "live") setTimeout(foldEvents, LIVE_FOLD_MS);
    requestAnimationFrame(frame);
  }

  /** Read-only handles onto the page, for the end-to-end tests and the page benchmark. */
  const handles = () => ({ view, state, time, pg: () => pg, readyMs: performance.now(), tours: () => tours?.current() ?? null, pressHeld, aimHeld });

  return { app, report, errorText, load, ready, beginTours, run, handles };
}
