// One render entry point: draws every panel from the state module's data. Only render modules
// touch the DOM.

import { renderFrontiers } from "./frontiers.js";
import { renderConsensus, renderLegend, renderNotices, renderVerify } from "./panels.js";
import { renderOracle, renderWriters } from "./writers.js";
import { renderLog } from "./log.js";
import { renderUpsert } from "./upsert.js";
import { markCited, renderCheck } from "./check.js"; // the check panel (issue 11)
import { renderProcesses } from "./processes.js";
import { renderShard } from "./shard.js";
import { renderRules } from "./rules.js";
import { learnHandles } from "./names.js";
import { esc, setHtml } from "./dom.js";
import { pressWords } from "./words.js";
import { findTimeDom } from "./timeline.js";
import { fmtMs } from "../spec.js";

export function findDom(doc) {
  const $ = (id) => doc.getElementById(id);
  return {
    play: $("play"), step: $("step"), speed: $("speed"), clock: $("clock"), modePill: $("mode-pill"),
    status: $("status"), seedForm: $("seed-form"), seed: $("seed"), toLive: $("to-live"), toSeed: $("to-seed"),
    modeHint: $("mode-hint"), seedHint: $("seed-hint"), intoProcess: $("into-process"), wRate: $("w-rate"), wKeys: $("w-keys"), wMode: $("w-mode"),
    addWriter: $("add-writer"), addReader: $("add-reader"), addTask: $("add-task"), addOracle: $("add-oracle"), oBurst: $("o-burst"),
    presetBusy: $("preset-busy"), addReplica: $("add-replica"), upsertForm: $("upsert-form"), upsertKey: $("u-key"),
    upsertValue: $("u-value"), generator: $("u-generator"), undecodable: $("u-undecodable"), stepReplicas: $("step-replicas"), stepSaid: $("step-said"), pushSaid: $("push-said"),
    stepReplicasHere: $("step-replicas-here"), upsertFormHere: $("upsert-form-here"), upsertKeyHere: $("u-key-here"), upsertValueHere: $("u-value-here"), pushSaidHere: $("push-said-here"), stepSaidHere: $("step-said-here"), verify: $("verify"), faultsForm: $("faults-form"), faultsOff: $("faults-off"),
    rules: $("rules-view"),
    corruptKey: $("corrupt-key"), corrupt: $("corrupt"), resetDb: $("reset-db"), shardPick: $("shard-pick"),
    shard: $("shard-view"), writers: $("writers-view"), processes: $("processes-view"), consensus: $("consensus-view"),
    oracle: $("oracle-view"), verifyView: $("verify-view"), notices: $("notices"), frontiers: $("frontiers-view"), upsert: $("upsert-view"), log: $("log-view"), legend: $("legend"),
    logActor: $("log-actor"), logKind: $("log-kind"), logNote: $("log-note"),
    check: $("check-view"), // the check panel (issue 11)
    time: findTimeDom(doc),
    faults: {
      blob: { fail: $("f-blob-fail"), timeout: $("f-blob-timeout"), latency: $("f-blob-latency"), outage: $("f-blob-outage") },
      consensus: { fail: $("f-cons-fail"), timeout: $("f-cons-timeout"), latency: $("f-cons-latency"), outage: $("f-cons-outage") },
    },
  };
}

/** Keeps a <select>'s options equal to `values` (and its choice, if still there). */
function syncSelect(select, values, labels = values, keepFirst = 0) {
  const want = values.join("\u0000");
  if (select.__values === want) return;
  select.__values = want;
  const chosen = select.value;
  while (select.options.length > keepFirst) select.remove(keepFirst);
  values.forEach((v, i) => select.add(new Option(labels[i], v)));
  if (values.includes(chosen)) select.value = chosen;
}

/** Which panels are on screen: off-screen panels are redrawn only twice a second. */
const onScreen = new Map();
const drawnAt = new Map();
const OFFSCREEN_REDRAW_MS = 500;
let observer = null;
let forceAll = false;
let frameNo = 0;
/**
 * Panels take turns: each group redraws every third frame (each panel at ~20 fps), so a frame
 * pays for a third of the panels. Groups are balanced by cost (the shard panel is the dearest).
 */
const GROUP = {
  "panel-shard": 0, "panel-log": 0,
  "panel-writers": 1, "panel-frontiers": 1, "panel-oracle": 1,
  "panel-consensus": 2, "panel-upsert": 2, "panel-check": 1,
};
const GROUPS = 3;
/** The frame an off-screen panel last redrew in: at most one per frame, so they never pile up. */
let offscreenFrame = -1;
/**
 * Panels that came into view since they last drew: they draw in the next frame, whatever its
 * group, so a panel skipped off screen never shows its stale drawing in view. A scroll marks
 * them before the frame that paints it (scroll events run before animation frames); the
 * observer, a frame later, catches what moved without a scroll (a layout change).
 */
const due = new Set();
let scrolled = true;
/**
 * Live mode draws only what changed (`renderAll`'s `changedOnly`): each panel keeps the key of
 * the data it last drew from (the parts of the snapshot it reads), and is not drawn again from
 * the same key unless every panel is forced, or it came into view or was resized (`due`). Seed
 * mode draws by turns instead (GROUP).
 */
const drewFrom = new Map();
let changedOnly = false;
/** Whether the panel of `el` draws in this frame; `key`: the data it would draw from (live mode). */
function visible(el, key = null) {
  const panel = el.closest(".panel");
  if (!panel) return true;
  const fresh = due.has(panel);
  if (changedOnly) {
    if (!forceAll && !fresh && drewFrom.get(panel) === key) return false;
  } else if (!forceAll && !fresh && (GROUP[panel.id] ?? 0) !== frameNo % GROUPS) return false;
  const now = performance.now();
  if (!forceAll && !fresh && onScreen.get(panel) === false) {
    observe();
    // (Live mode's draws are a few a second: each off-screen panel may draw in the same one.)
    if (now - (drawnAt.get(panel) ?? 0) < OFFSCREEN_REDRAW_MS || (!changedOnly && offscreenFrame === frameNo)) return false;
    offscreenFrame = frameNo;
  }
  due.delete(panel);
  drawnAt.set(panel, now);
  drewFrom.set(panel, key);
  observe();
  return true;
}
/** For what draws outside a panel's turn (processes, rules): whether its data `key` is new. */
function changed(name, key) {
  if (changedOnly && !forceAll && drewFrom.get(name) === key) return false;
  drewFrom.set(name, key);
  return true;
}
function observe() {
  if (!observer && typeof IntersectionObserver === "function") {
    observer = new IntersectionObserver((entries) => {
      for (const e of entries) {
        if (e.isIntersecting && onScreen.get(e.target) === false) due.add(e.target);
        onScreen.set(e.target, e.isIntersecting);
      }
      if (due.size) onViewChange();
    });
    for (const p of document.querySelectorAll(".panel")) observer.observe(p);
    addEventListener("scroll", () => {
      scrolled = true;
      onViewChange();
    }, { capture: true, passive: true });
  }
}
/**
 * After a scroll: which panels are in view now. Read at the start of a frame, before it writes
 * anything, so the layout is the one just painted and the read costs no layout.
 */
function checkScrolled() {
  if (!scrolled || !observer) return;
  scrolled = false;
  for (const p of document.querySelectorAll(".panel")) {
    const r = p.getBoundingClientRect();
    const inView = r.bottom > 0 && r.top < innerHeight && r.right > 0 && r.left < innerWidth && r.height > 0;
    if (inView && onScreen.get(p) === false) due.add(p);
    onScreen.set(p, inView);
  }
}

/** Widths of the observed boxes, as the browser last laid them out. */
const widths = new WeakMap();
let sizer = null;
/** A box changed its width since the last draw: its panel draws again (`due`) at the new width. */
let resized = false;
function widthOf(el) {
  if (!sizer && typeof ResizeObserver === "function") {
    sizer = new ResizeObserver((entries) => {
      for (const e of entries) {
        const w = Math.round(e.contentRect.width);
        if (widths.get(e.target) !== w) {
          resized = true;
          // Its panel draws in the next frame, whatever its turn, at the new width.
          const panel = e.target.closest(".panel");
          if (panel) due.add(panel);
        }
        widths.set(e.target, w);
      }
      if (resized) onViewChange();
    });
  }
  if (!widths.has(el)) {
    widths.set(el, Math.round(el.clientWidth)); // the first time only: one read
    sizer?.observe(el);
  }
  return widths.get(el) || 940;
}

/**
 * Whether the view changed under the panels since the last draw, with the run unchanged: a
 * scroll, a panel come into view, a box resized. The frame loop of a paused run draws only then
 * (or when the page marks a change of its own, www/page.js).
 */
export function viewChanged() {
  return scrolled || resized || due.size > 0;
}

/** Called when the view changes (viewChanged turns true): the page's sleeping frame loop wakes. */
let onViewChange = () => {};
export function whenViewChanges(wake) {
  onViewChange = wake;
}

/**
 * Draws every panel from the latest snapshot; `force` redraws off-screen panels too.
 * `changedOnly` (live mode): instead of taking turns, a panel draws when the data it reads
 * changed since it last drew (see `drewFrom`).
 */
export function renderAll(dom, state, view, force = false, changedOnly_ = false) {
  const snap = state.latest();
  if (!snap) return;
  forceAll = force;
  changedOnly = changedOnly_;
  resized = false;
  frameNo += 1;
  checkScrolled();
  const t0 = view.t0;
  // The SVG panels' widths (so SVG text keeps its native size), as last laid out: read from a
  // ResizeObserver, never from the DOM mid-frame (that would force a layout of the whole page).
  const shardWidth = widthOf(dom.shard);
  const frontiersWidth = widthOf(dom.frontiers);
  syncSelect(dom.shardPick, snap.shards.map((s) => s.name));
  const alive = snap.processes.filter((p) => p.alive).map((p) => p.id);
  syncSelect(dom.intoProcess, alive, alive.map((p) => `process ${p}`), 1);
  const keys = [...snap.shards.map((s) => s.name), ...snap.timelines.map((t) => `timestamp_oracle/${t.timeline}`)];
  syncSelect(dom.corruptKey, keys);
  // The page benchmark sets `view.panelMs` (an object) to learn what each panel costs.
  const prof = view.panelMs;
  const draw = prof
    ? (name, f) => {
      const t = performance.now();
      f();
      (prof[name] ??= []).push(performance.now() - t);
    }
    : (_, f) => f();
  learnHandles(snap);
  // A panel's key (live mode only; null otherwise): the snapshot's parts it reads, as JSON (each
  // part made once a frame), and its other inputs.
  const parts = new Map();
  const part = (name) => {
    if (!parts.has(name)) parts.set(name, JSON.stringify(snap[name]) ?? "");
    return parts.get(name);
  };
  const key = changedOnly ? (names, ...more) => [...names.map(part), ...more].join("\u0001") : () => null;
  const history = state.history();
  const prev = history.at(-2);
  if (visible(dom.shard, key(["shards", "actors", "nowMs", "mode"], dom.shardPick.value, t0, shardWidth))) draw("shard", () => renderShard(dom.shard, snap, dom.shardPick.value, t0, shardWidth));
  if (visible(dom.writers, key(["actors", "shards", "timelines", "mode"], t0))) draw("writers", () => renderWriters(dom.writers, snap, t0));
  renderVerify(dom.verifyView, snap, t0);
  renderNotices(dom.notices, snap, t0);
  if (changed("processes", key(["processes", "actors", "upsert"]))) draw("processes", () => renderProcesses(dom.processes, snap, view.table.rules));
  if (changed("rules", key(["rules"], changedOnly && snap.actors.map((a) => `${a.id}:${a.variant ?? ""}`).join()))) draw("rules", () => renderRules(dom.rules, snap, view.table.rules));
  if (visible(dom.consensus, key(["consensus", "processes", "actors", "shards", "mode"], t0))) draw("consensus", () => renderConsensus(dom.consensus, snap, t0));
  if (visible(dom.oracle, key(["actors", "timelines"], t0))) draw("oracle", () => renderOracle(dom.oracle, snap, t0));
  if (visible(dom.frontiers, key(["nowMs", "shards", "actors", "upsert"], history.length, history[0]?.nowMs, t0, frontiersWidth))) draw("frontiers", () => renderFrontiers(dom.frontiers, history, t0, frontiersWidth));
  if (visible(dom.upsert, key(["actors", "upsert", "check", "shards"], changedOnly && JSON.stringify(prev?.actors ?? null)))) draw("upsert", () => renderUpsert(dom.upsert, snap, prev));
  renderPress(dom.stepSaid, snap.upsert?.press);
  renderPressHere(dom.stepSaidHere, snap.upsert?.press);
  dom.generator.checked = Boolean(snap.upsert?.generating);
  if (snap.upsert) dom.undecodable.checked = Boolean(snap.upsert.undecodable);
  if (visible(dom.log, key(["actors", "processes", "lastSeq"], state.events().at(-1)?.seq, t0))) draw("log", () => renderLog(dom, state.events(), snap, t0, view.eventsAfter));
  // The check panel (issue 11): the live check of the history, and its marks in the log view.
  if (dom.check && visible(dom.check, key(["check"], t0))) draw("check", () => renderCheck(dom.check, snap, state, t0));
  markCited(dom.log);
  renderLegend(dom.legend, snap);
  renderRunbar(dom, snap, view);
  syncFaultForm(dom, snap);
  // No panel stays due after a draw: the panels that take turns drew if due (`visible`), and
  // the others (Processes, the legend) have no turn to miss: they draw in every draw, or, in
  // live mode, whenever their data changed, on screen or not. A panel left due (Processes,
  // scrolled out of view and back while the run played) kept viewChanged() true: a paused run's
  // frame loop then drew every frame, never idle.
  due.clear();
}

/** A rate (0 to 1) as the faults form writes it: a percentage. */
const percentText = (rate) => String(Math.round(rate * 1000) / 10);

/**
 * Shows the run's fault settings in the Faults form whenever the engine's change (a replayed or
 * shared run, a tour, Apply): the form never claims settings the run does not have. Between
 * changes, what the learner types stays.
 */
function syncFaultForm(dom, snap) {
  if (!snap.faults || !dom.faultsForm) return;
  const key = JSON.stringify([snap.faults.blob.knobs, snap.faults.consensus.knobs]);
  if (dom.faultsForm.__knobs === key) return;
  dom.faultsForm.__knobs = key;
  for (const name of ["blob", "consensus"]) {
    const k = snap.faults[name].knobs;
    const f = dom.faults[name];
    f.fail.value = percentText(k.failRate);
    f.timeout.value = percentText(k.timeoutRate);
    f.latency.value = String(k.latencyMs);
    f.outage.checked = k.outage;
  }
}

export function renderRunbar(dom, snap, view) {
  const clock = snap.mode === "seed" ? `${view.past ? "past: " : ""}t = ${fmtMs(snap.nowMs)} · step ${snap.steps}` : `live · ${fmtMs(snap.nowMs, view.t0)} since the database was created`;
  // A press held on a control, or a pointer come onto one: the panels wait (www/page.js), the
  // clock says so.
  const wait = view.pressWait ? ` · <span class="muted" data-testid="press-wait">${view.pressWait === "press" ? "panels wait for your release" : "panels hold still under your pointer"}</span>` : "";
  setHtml(dom.clock, `${esc(clock)}${wait}${view.digest ? ` · <span title="a digest is a short fingerprint (a hash) of the whole state: the same seed and the same clicks give the same digest, so two runs can be compared by it">state digest <span data-testid="digest">${esc(view.digest)}</span> (the run's fingerprint)</span>` : ""}`);
  // Each set only on a change: a text or an attribute set, even to its value, restyles the page.
  const set = (o, prop, v) => {
    if (o[prop] !== v) o[prop] = v;
  };
  set(dom.play, "textContent", view.playing ? "❚❚ Pause" : "▶ Play");
  if (dom.play.getAttribute("aria-pressed") !== String(view.playing)) dom.play.setAttribute("aria-pressed", String(view.playing));
  const live = snap.mode === "live";
  // Viewing the past (or a replay under way): nothing runs; Fork here or Present (www/time.js).
  const still = Boolean(view.past || view.busyTime);
  // Live mode's Pause pauses the page (it stops following the actors), not the actors.
  set(dom.play, "disabled", still);
  set(dom.step, "disabled", live || view.playing || still);
  set(dom.speed, "disabled", live);
  set(dom.modePill, "textContent", live ? `live · ${view.db}` : `seed ${snap.seed}`);
  if (live) set(dom.seed, "value", String(snap.seed));
  set(dom.modePill.dataset, "mode", snap.mode);
}

/** The status line: `{ kind: "ok" | "error" | "busy", text }`. Notices from the engine show too. */
/**
 * What the last Step replicas press did, beside the button (the engine keeps it until another
 * command runs or the run moves on): the stage it ran, or why it walked nothing and what it did
 * instead; with the generator in the way, a button that turns it off.
 */
function renderPress(el, press) {
  if (!el) return;
  if (el.hidden !== !press) el.hidden = !press;
  if (!press) return setHtml(el, "");
  const off = press.generatorOn
    ? ` <button type="button" data-action="generator-off" data-testid="press-generator-off">Turn the generator off</button>`
    : "";
  setHtml(el, `<b>Step replicas${press.refused ? " refused" : ""}:</b> <span data-testid="step-said-text" class="${press.refused ? "err" : ""}">${esc(pressWords(press.text))}</span>${off}`);
}

/**
 * The same message in the Upsert pipeline panel, beside its own Step replicas button: a press
 * brings the panel into view (controls.js), where its effect shows. Without a press, what a
 * press does.
 */
function renderPressHere(el, press) {
  if (!el) return;
  if (!press) return setHtml(el, `<span class="muted">walks a pushed upsert through one replica, one stage per press; otherwise one worker step of every replica</span>`);
  const off = press.generatorOn
    ? ` <button type="button" data-action="generator-off" data-testid="press-here-generator-off">Turn the generator off</button>`
    : "";
  setHtml(el, `<b>Step replicas${press.refused ? " refused" : ""}:</b> <span data-testid="upsert-press-text" class="${press.refused ? "err" : ""}">${esc(pressWords(press.text))}</span>${off}`);
}

export function renderStatus(dom, status) {
  dom.status.dataset.kind = status.kind;
  dom.status.textContent = pressWords(status.text);
}

export function renderMode(dom, mode, db) {
  const live = mode === "live";
  dom.toLive.hidden = live;
  dom.toSeed.hidden = !live;
  // Live mode draws its own seed (shown in the field once the run is up: renderRunbar); the field
  // is for choosing one, which only a seed-mode run can.
  const button = dom.seedForm.querySelector("button");
  button.disabled = live;
  dom.seed.disabled = live;
  if (live) {
    const why = "live mode's own seed, drawn at random for this page: it picks the ids, not the timing (real timers), so it cannot replay a run. Switch to seed mode to choose a seed.";
    dom.seed.value = "";
    dom.seed.placeholder = "random";
    dom.seed.title = why;
    button.title = why;
  }
  // The 19-digit number in the disabled field, said in a line (a learner saw it unexplained).
  dom.seedHint.hidden = !live;
  dom.seedHint.textContent = live
    ? "The seed, drawn at random for this page, picks the ids and random choices (keys, upserts, faults). Timing is real: the same seed does not replay a run."
    : "";
  dom.modeHint.textContent = live
    ? `Live mode: IndexedDB database "${db}" and real timers. Reload the page: the shards and the oracle come back. Open a second tab: two processes race on one database. Pause freezes this view; the actors keep running.`
    : "Seed mode: a simulator over memory. The same seed and the same clicks give the same run.";
}
