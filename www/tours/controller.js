// The tour controller: loads the tours, opens the one the URL names, and drives it. Next applies
// the next step to the running playground (its commands, then its run, a few chunks per frame so
// the panels move); Back and a step's URL rebuild from the seed (engine.js), so every step is
// reached the same way whichever path led there. Leaving a tour keeps the scenario: the tour UI
// closes and the page is free play again. Drawing is render/tour.js's; this file holds no
// protocol state, only where the learner is.

import { applyCommands, checkTour, chunksOf, failedChecks, firstStepOf, keepOtherParams, remapOf, shardOf, stepOf, tourParams, tourSearch } from "./engine.js";
import { PICKER_KEY, flash, namedPanels, renderHighlights, renderPicker, renderTourCard } from "../render/tour.js";
import { uncutScrolls } from "./uncut.js";

/** Animation pace: a step's run is spread over at most this many frames. */
const MAX_FRAMES_PER_STEP = 80;
/** Where a step's first panel settles: this far below the top of the window. */
const VIEW_MARGIN_PX = 8;
/**
 * For this many frames after a step settles, it settles into view again while the window stays
 * where it put it: a panel the step moved draws again at its new width a frame or two later
 * (www/render/index.js), and its figure's height changes with it.
 */
const RESETTLE_FRAMES = 8;
/** How far (px, up or down) a scroll may move on so that no line is half under a sticky title. */
const UNCUT_PX = 160;

/** Fetches index.json and every tour it lists (checked: a malformed tour is an Error naming it). */
export async function loadTours() {
  const base = new URL("./", import.meta.url);
  const get = async (name) => {
    const res = await fetch(new URL(name, base));
    if (!res.ok) throw new Error(`could not load www/tours/${name}: HTTP ${res.status}`);
    return res.json();
  };
  const index = await get("index.json");
  return Promise.all(index.tours.map(async (id) => checkTour(await get(`${id}.json`))));
}

/**
 * Starts the tours on the page. `host` is main.js's thin layer: `Playground` (the wasm class),
 * `adopt(pg)` (make `pg` the page's playground, forgetting the old run), `pull()`, `redraw()`,
 * `report(status)`, `latest()`, `mode()`, `dom`, and optionally `toPresent()` (leave a scrubbed
 * past: www/time.js). Returns `{ beforeManual, current }`.
 */
export function startTours(host, tours) {
  const doc = document;
  const els = {
    picker: doc.getElementById("tour-picker"),
    card: doc.getElementById("tour-card"),
    style: doc.getElementById("tour-style"),
    layout: doc.querySelector(".layout"),
  };
  /**
   * Where the learner is: a tour and its step (1-based), and a step being run, if any; `remap`:
   * the tour was opened by a link older than a renumbering of its steps (engine.js remapOf), which
   * the card says until the learner moves on.
   */
  const at = { tour: null, step: 0, run: null, prevSnap: null, note: "", remap: null };
  /** `?animate=0` on the URL the page opened with: steps show at once (the state is the same). */
  const animated = tourParams(window.location.search)?.animate ?? true;

  const byId = (id) => tours.find((t) => t.id === id);
  // A step's URL keeps the parameters of the page's that are not a tour step's own (animate=0).
  const setUrl = (step, push) => {
    const search = keepOtherParams(step, window.location.search);
    if (window.location.search === search) return;
    if (push) window.history.pushState(null, "", search);
    else window.history.replaceState(null, "", search);
  };

  function draw() {
    renderPicker(els.picker, tours, !at.tour);
    els.layout.classList.toggle("touring", Boolean(at.tour));
    if (!at.tour) {
      renderTourCard(els.card, null);
      renderHighlights(els.style, null);
      return;
    }
    const step = at.tour.steps[at.step - 1];
    const settled = !at.run;
    const failed = settled ? failedChecks(at.tour, at.step - 1, host.latest(), at.prevSnap) : [];
    for (const f of failed) console.warn(`tour ${at.tour.id} step ${at.step}: ${f.text}`);
    renderTourCard(els.card, { tour: at.tour, index: at.step - 1, settled, failed, snap: host.latest(), prevSnap: at.prevSnap, remap: at.remap });
    renderHighlights(els.style, step.highlight ?? [], at.tour.hide ?? []);
  }

  /**
   * Shows the step's shard in the Shard panel (engine.js `shardOf`: the one it names, else the
   * step's or the tour's `shard`); true if that changed it.
   */
  function pickShard(step) {
    const want = shardOf(at.tour, step);
    const sel = host.dom.shardPick;
    if (!want || sel.value === want || ![...sel.options].some((o) => o.value === want)) return false;
    sel.value = want;
    return true;
  }

  /** Draws the panels, then again if the step's shard only got its option in that draw. */
  function redrawStep() {
    const step = at.tour.steps[at.step - 1];
    pickShard(step);
    host.redraw();
    if (pickShard(step)) host.redraw();
  }

  /**
   * Brings the step's panels into view: they sit first in the panel grid during a tour (see
   * renderHighlights), so the top of the first one goes to the top of the window; the tour card
   * is sticky beside them and stays on screen. Then the step's focus actor (see focusOn), then the
   * figures of its other panels (see figuresIntoView).
   */
  function settleIntoView(step) {
    const id = namedPanels(step.highlight)[0];
    const panel = id && doc.getElementById(id);
    if (!panel) return;
    const top = panel.getBoundingClientRect().top;
    if (Math.abs(top - VIEW_MARGIN_PX) > 1) window.scrollTo({ top: window.scrollY + top - VIEW_MARGIN_PX, behavior: "instant" });
    focusOn(step, panel);
    figuresIntoView(step);
    logIntoView(step);
    // What the step shows stays shown (the first panel's figure and column heads, its focus, the
    // other panels' figures, the card's buttons), and no line sits half under a sticky title.
    const [first, ...others] = namedPanels(step.highlight).map((id) => doc.getElementById(id)).filter(Boolean);
    const keep = [figureOf(first), first?.querySelector("thead"), focusRow(step), els.card.querySelector(".tour-nav")].filter((el) => el && whollyShown(el));
    const figs = others.map(figureOf).filter((el) => el && figureShown(el));
    uncutTitles(() => keep.every(whollyShown) && figs.every(figureShown), [first, ...others], [first, ...others]);
  }

  /**
   * The Event log entry a step's narration is about (`logShows`, a regular expression on its
   * text) wholly inside the log's own scrolling box, which scrolls as little as it must
   * (rule-oracle-durable-bound 4: the newer events above it left the new instance's wait cut at
   * the bottom of the box). The window does not move.
   */
  function logIntoView(step) {
    if (!step.logShows) return;
    const box = doc.querySelector("#panel-log .log");
    const re = new RegExp(step.logShows);
    const li = box && [...box.querySelectorAll("li[data-seq]")].find((el) => re.test(el.textContent));
    if (!li) return;
    const b = box.getBoundingClientRect();
    const r = li.getBoundingClientRect();
    if (r.bottom > b.bottom) box.scrollTop += Math.min(r.bottom - b.bottom, r.top - b.top);
    else if (r.top < b.top) box.scrollTop -= b.top - r.top;
  }

  /**
   * A panel's figure shows as a step needs it: its top in the window and min(its height, 150 px)
   * of it (tests/e2e/tour-walk.test.mjs MIN_FIGURE_PX), or its panel's title is off the window.
   */
  function figureShown(fig) {
    const vh = window.innerHeight;
    const t = fig.closest(".panel")?.querySelector("h2")?.getBoundingClientRect();
    if (!t || t.top < 0 || t.bottom > vh) return true;
    const r = fig.getBoundingClientRect();
    return r.top >= 0 && Math.min(r.bottom, vh) - r.top >= Math.min(r.height, 150) - 1;
  }

  /**
   * Moves the window (by at most UNCUT_PX) to the nearest place where no line, button, short
   * row or description of a panel is half under that panel's sticky title, nor the description
   * of a panel of `whole` (the step's panels, a panel's chip's) under it at all (uncut.js), if
   * `ok()` still holds there; failing that, of the panels `mine` only (the step's, a chip's
   * target's: two panels side by side may have no such place in common); else leaves it.
   */
  function uncutTitles(ok, mine, whole = []) {
    const y0 = window.scrollY;
    const max = doc.documentElement.scrollHeight - window.innerHeight;
    const lo = Math.max(-y0, -UNCUT_PX);
    const hi = Math.min(max - y0, UNCUT_PX);
    for (const panels of [[...doc.querySelectorAll(".panels > .panel")], mine.filter(Boolean)]) {
      for (const d of uncutScrolls(panels, 0, lo, hi, whole.filter(Boolean))) {
        if (d === 0) return;
        window.scrollTo({ top: y0 + d, behavior: "instant" });
        if (ok()) return;
      }
      if (window.scrollY !== y0) window.scrollTo({ top: y0, behavior: "instant" });
    }
  }

  /**
   * A step whose first highlight is an actor is about that actor's row or card in the first
   * panel: scroll on until it is wholly in the window (the panel's top going up, if need be).
   */
  function focusOn(step, panel) {
    const first = step.highlight?.[0];
    if (!first || !/^[A-Z]\d+$/.test(first)) return;
    const row = [...panel.querySelectorAll(`[data-actor="${CSS.escape(first)}"]`)].find((el) => el.getClientRects().length);
    if (!row) return;
    const r = row.getBoundingClientRect();
    const below = r.bottom - (window.innerHeight - VIEW_MARGIN_PX);
    if (below > 0) window.scrollBy({ top: Math.min(below, r.top - VIEW_MARGIN_PX), behavior: "instant" });
    else return;
    // The panel's title sticks at the top: a block of the panel cut by it (a paragraph showing
    // only its last lines, upsert-feedback 6) goes wholly under it, if the row stays in view.
    const h2 = panel.querySelector("header > h2")?.getBoundingClientRect();
    if (!h2) return;
    const blocks = [...panel.children].filter((el) => el.tagName !== "HEADER").flatMap((el) => [...el.children]);
    const cut = blocks.map((el) => el.getBoundingClientRect()).find((b) => b.top < h2.bottom - 1 && b.bottom > h2.bottom + 1);
    const extra = cut ? cut.bottom - h2.bottom : 0;
    if (extra > 0 && row.getBoundingClientRect().top - extra >= h2.bottom) window.scrollBy({ top: extra, behavior: "instant" });
  }

  /**
   * The step's other panels, below the first, show their figure (the Shard panel's batches, the
   * Frontiers panel's lines) wholly: the window scrolls on by as much as the lowest one is cut at
   * the bottom, if its panel's title is in the window, but never so far that the first panel's
   * figure or its table's column heads, or the step's first actor's row or card, wholly in view
   * until then, goes under a panel's sticky title.
   */
  function figuresIntoView(step) {
    const vh = window.innerHeight;
    const [first, ...others] = namedPanels(step.highlight).map((id) => doc.getElementById(id)).filter(Boolean);
    let need = 0;
    for (const p of others) {
      const fig = figureOf(p);
      const title = p.querySelector("h2")?.getBoundingClientRect();
      if (fig && title && title.top >= 0 && title.bottom <= vh) need = Math.max(need, fig.getBoundingClientRect().bottom - (vh - VIEW_MARGIN_PX));
    }
    if (need <= 0) return;
    const keep = [figureOf(first), first.querySelector("thead"), focusRow(step)].filter((el) => el && whollyShown(el));
    // Once scrolled, the title of the keeper's panel sticks at the top: the keeper must stay below it.
    const room = Math.min(Infinity, ...keep.map((el) => el.getBoundingClientRect().top - (el.closest(".panel")?.querySelector("h2")?.offsetHeight ?? 0) - VIEW_MARGIN_PX));
    const by = Math.floor(Math.min(need, room));
    if (by > 0) window.scrollBy({ top: by, behavior: "instant" });
  }

  /** Settles `step` into view again each frame, RESETTLE_FRAMES times, unless the learner moved on. */
  function resettle(step) {
    let y = window.scrollY;
    let left = RESETTLE_FRAMES;
    const tick = () => {
      if (!at.tour || at.run || at.tour.steps[at.step - 1] !== step || window.scrollY !== y || left-- <= 0) return;
      settleIntoView(step);
      y = window.scrollY;
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  }

  /** A panel's figure: its first drawing (an svg image) taller than a line, or null. */
  function figureOf(panel) {
    return [...(panel?.querySelectorAll("svg[role=img]") ?? [])].find((el) => el.getBoundingClientRect().height >= 40) ?? null;
  }

  /** The row or card of the step's first actor highlight in the first of its panels that shows one. */
  function focusRow(step) {
    const actor = (step.highlight ?? []).find((h) => /^[A-Z]\d+$/.test(h));
    if (!actor) return null;
    const sel = `[data-actor="${CSS.escape(actor)}"]`;
    for (const id of namedPanels(step.highlight)) {
      const row = [...(doc.getElementById(id)?.querySelectorAll(sel) ?? [])].find((el) => el.getClientRects().length && !el.parentElement.closest(sel));
      if (row) return row;
    }
    return null;
  }

  /**
   * The top of the part of the window where `el` shows: below its panel's title, which sticks at
   * the top of the window during a tour.
   */
  function topOf(el) {
    const title = el.closest(".panel")?.querySelector("h2")?.getBoundingClientRect();
    return Math.max(0, title ? title.bottom : 0);
  }

  /** True if `el` is wholly in the window, below its panel's sticky title. */
  function whollyShown(el) {
    const r = el.getBoundingClientRect();
    return r.height > 0 && r.top >= topOf(el) - 1 && r.bottom <= window.innerHeight + 1;
  }

  /**
   * Scrolls the window by as little as shows `el` wholly below its panel's sticky title (its top
   * first, if it is taller than that).
   */
  function scrollToShow(el) {
    for (let pass = 0; pass < 2 && !whollyShown(el); pass++) {
      const r = el.getBoundingClientRect();
      const top = topOf(el) + VIEW_MARGIN_PX / 2;
      const below = r.bottom - (window.innerHeight - VIEW_MARGIN_PX);
      // Down until its bottom is in (never its top under the title), else up until its top is.
      const by = below > 0 ? Math.min(below, r.top - top) : r.top - top;
      if (Math.abs(by) < 1) return;
      window.scrollBy({ top: by, behavior: "instant" });
    }
  }

  /**
   * Keeps the tour card's Back and Next buttons in the window. The card is sticky: above the top
   * of the panels (the page scrolled up to its header) it sits lower, and its foot can leave the
   * window; scrolling down by as much as it is out brings it back.
   */
  function keepCardButtons() {
    const nav = els.card.querySelector(".tour-nav")?.getBoundingClientRect();
    if (!nav || nav.height === 0) return;
    const out = nav.bottom - (window.innerHeight - VIEW_MARGIN_PX);
    if (out > 0) window.scrollBy({ top: out, behavior: "instant" });
    else if (nav.top < VIEW_MARGIN_PX) window.scrollBy({ top: nav.top - VIEW_MARGIN_PX, behavior: "instant" });
  }

  /** True if the tour card's Back and Next buttons are inside the window. */
  function cardButtonsShown() {
    const nav = els.card.querySelector(".tour-nav")?.getBoundingClientRect();
    return !nav || nav.height === 0 || (nav.top >= 0 && nav.bottom <= window.innerHeight);
  }

  /** A panel a chip brought into view: its title in the window and min(its height, 200 px) of it. */
  function panelSeen(panel) {
    const vh = window.innerHeight;
    const r = panel.getBoundingClientRect();
    const t = panel.querySelector("h2").getBoundingClientRect();
    return t.top >= 0 && t.bottom <= vh && Math.min(r.bottom, vh) - Math.max(r.top, 0) >= Math.min(r.height, 200) - 1;
  }

  /**
   * A "Look at" chip: shows its shard, brings its panel or actor into view, and flashes it. An
   * actor's row or card (in the step's panels, in their order, if they show it; else anywhere on
   * the panels) that is already wholly in view is only flashed; else the window scrolls as little
   * as shows the first of them. Either way the tour card's buttons stay in the window.
   */
  function look(chipEl) {
    const { panel, shard, actor } = chipEl.dataset;
    if (shard && host.dom.shardPick.value !== shard && [...host.dom.shardPick.options].some((o) => o.value === shard)) {
      host.dom.shardPick.value = shard;
      host.redraw();
    }
    let target = panel ? doc.getElementById(panel) : null;
    if (actor) {
      // Its rows and cards: elements carrying it not inside another that does (a row's buttons).
      const sel = `[data-actor="${CSS.escape(actor)}"]`;
      const named = at.tour ? namedPanels(at.tour.steps[at.step - 1].highlight) : [];
      const rank = (el) => {
        const i = named.indexOf(el.closest(".panel")?.id);
        return i < 0 ? named.length : i;
      };
      const all = [...doc.querySelectorAll(`.panels ${sel}`)]
        .filter((el) => el.getClientRects().length && !el.parentElement.closest(sel))
        .sort((a, b) => rank(a) - rank(b));
      // Those in the step's panels, if it has any there (not a row in another panel instead).
      const inNamed = all.filter((el) => rank(el) < named.length);
      const mine = inNamed.length ? inNamed : all;
      target = mine.find(whollyShown) ?? mine[0] ?? null;
    }
    if (!target) return;
    const y0 = window.scrollY;
    // A panel's chip keeps the step's own actors' rows in view that are now (oracle-restart 5: the
    // Consensus log's chip slid the O1 row, which the card is about, under the Timestamp oracle's
    // sticky title).
    const keep = actor ? [] : stepActorRows().filter(whollyShown);
    const kept = () => keep.every(whollyShown);
    if (actor) scrollToShow(target);
    else {
      // A panel as little as it must (its top first when it is taller than the window).
      const block = target.offsetHeight > window.innerHeight - 2 * VIEW_MARGIN_PX ? "start" : "nearest";
      target.scrollIntoView({ block, behavior: "instant" });
      if (!kept()) scrollBackToKeep(y0, kept, () => panelSeen(target));
    }
    keepCardButtons();
    // Where it scrolled to, no line left half under a panel's sticky title (the target and the
    // card's buttons staying in view).
    if (window.scrollY !== y0) uncutTitles(() => cardButtonsShown() && (actor ? whollyShown(target) : panelSeen(target)) && kept(), [target.closest(".panel")], actor ? [] : [target]);
    flash(target);
  }

  /** The rows and cards of the current step's actors in the step's panels. */
  function stepActorRows() {
    if (!at.tour) return [];
    const step = at.tour.steps[at.step - 1];
    const actors = (step.highlight ?? []).filter((h) => /^[A-Z]\d+$/.test(h));
    const named = namedPanels(step.highlight);
    return actors.flatMap((a) => {
      const sel = `[data-actor="${CSS.escape(a)}"]`;
      return [...doc.querySelectorAll(`.panels ${sel}`)].filter((el) => named.includes(el.closest(".panel")?.id) && el.getClientRects().length && !el.parentElement.closest(sel));
    });
  }

  /**
   * From a scroll that hid what `kept` wants shown, back towards `y0` (where it was shown): the
   * farthest position at which it still is, if `seen` holds there too; else the scroll stays.
   */
  function scrollBackToKeep(y0, kept, seen) {
    const y1 = window.scrollY;
    let good = y0;
    let bad = y1;
    while (Math.abs(bad - good) > 1) {
      const mid = Math.round((good + bad) / 2);
      window.scrollTo({ top: mid, behavior: "instant" });
      if (kept()) good = mid;
      else bad = mid;
    }
    window.scrollTo({ top: good, behavior: "instant" });
    if (!seen()) window.scrollTo({ top: y1, behavior: "instant" });
  }

  /** Applies step `index` (0-based) to the current playground; runs it over frames unless `now`. */
  function runStep(index, now) {
    const tour = at.tour;
    host.toPresent?.(); // a step runs on the present, even if the learner scrubbed back
    at.prevSnap = index > 0 ? host.latest() : null;
    at.step = index + 1;
    if (index > 0 && tour.steps[index].reset) {
      host.adopt(host.Playground.seeded(String(tour.seed)));
      host.pull();
    }
    applyCommands(host.pg(), tour, index);
    host.pull();
    const chunks = chunksOf(tour.steps[index].runMs ?? 0);
    const run = { chunks, next: 0, perFrame: Math.max(1, Math.ceil(chunks.length / MAX_FRAMES_PER_STEP)) };
    at.run = run;
    pickShard(tour.steps[index]);
    draw();
    settleIntoView(tour.steps[index]);
    if (now || !animated) finishRun();
    else requestAnimationFrame(() => frame(run));
  }

  function frame(run) {
    if (at.run !== run) return; // finished early, or replaced
    try {
      for (let i = 0; i < run.perFrame && run.next < run.chunks.length; i++) {
        host.pg().runFor(run.chunks[run.next++]);
        host.pull();
      }
      redrawStep();
    } catch (err) {
      fail(err);
      return;
    }
    if (run.next < run.chunks.length) requestAnimationFrame(() => frame(run));
    else settle();
  }

  /** Runs what is left of the current step at once. */
  function finishRun() {
    const run = at.run;
    if (!run) return;
    try {
      while (run.next < run.chunks.length) {
        host.pg().runFor(run.chunks[run.next++]);
        host.pull();
      }
    } catch (err) {
      fail(err);
      return;
    }
    settle();
  }

  function settle() {
    at.run = null;
    redrawStep();
    draw();
    settleIntoView(at.tour.steps[at.step - 1]);
    resettle(at.tour.steps[at.step - 1]);
    host.report({ kind: at.note ? "error" : "ok", text: `tour "${at.tour.title}": step ${at.step} of ${at.tour.steps.length}${at.note}` });
    at.note = "";
  }

  function fail(err) {
    at.run = null;
    host.report({ kind: "error", text: `the tour stopped: ${err instanceof Error ? err.message : String(err)}` });
    draw();
  }

  /**
   * Opens `tour` at `step` (1-based): rebuilds steps 1..step-1 at once, then runs `step`. `remap`:
   * what the renumberings did to the link's step, if it was older than them (remapOf).
   */
  function open(tour, step, { push = false, animate = true, remap = null } = {}) {
    const n = tour.steps.length;
    at.remap = remap;
    const k = Math.min(Math.max(Number.isInteger(step) ? step : 1, 1), n);
    at.note = k === step ? "" : ` (it has no step ${Number.isNaN(step) ? "like that" : step})`;
    try {
      at.run = null;
      at.tour = tour;
      host.adopt(host.Playground.seeded(String(tour.seed)));
      host.pull();
      for (let i = firstStepOf(tour, k - 1); i < k - 1; i++) {
        applyCommands(host.pg(), tour, i);
        host.pull();
        for (const ms of chunksOf(tour.steps[i].runMs ?? 0)) {
          host.pg().runFor(ms);
          host.pull();
        }
      }
      setUrl(tourSearch(tour, k), push);
      runStep(k - 1, !animate);
    } catch (err) {
      fail(err);
    }
  }

  function next() {
    if (!at.tour) return;
    finishRun();
    at.remap = null;
    if (at.step >= at.tour.steps.length) {
      leave("finished");
      return;
    }
    try {
      setUrl(tourSearch(at.tour, at.step + 1), true);
      runStep(at.step, false);
    } catch (err) {
      fail(err);
    }
  }

  function back() {
    if (!at.tour || at.step <= 1) return;
    open(at.tour, at.step - 1, { push: true });
  }

  /** Closes the tour UI; the scenario stays (the current step finished first) and play is free. */
  function leave(why = "left") {
    if (!at.tour) return;
    finishRun();
    const { tour, step, remap } = at;
    at.tour = null;
    at.remap = null;
    at.step = 0;
    setUrl(tourSearch(tour, step, true), false);
    draw();
    host.redraw();
    host.report({
      kind: "ok",
      text: why === "finished"
        ? `tour "${tour.title}" finished: the run is yours, play on (space)`
        : `left the tour "${tour.title}" at step ${step}${remap ? ` (the link's step ${remap.from}, from before a change to this tour)` : ""}: the run is yours, play on (space)`,
    });
  }

  // Clicks on the card and the picker (their markup is redrawn, so listen on the containers).
  els.card.addEventListener("click", (e) => {
    const b = e.target.closest("[data-tour-action]");
    if (!b) return;
    e.preventDefault();
    const act = b.dataset.tourAction;
    if (act === "next") next();
    else if (act === "back") back();
    else if (act === "leave") leave();
    else if (act === "goto") open(at.tour, Number(b.dataset.step), { push: true });
    else if (act === "look") look(b);
  });
  els.picker.addEventListener("click", (e) => {
    const a = e.target.closest("a[data-tour]");
    if (!a) return;
    if (host.mode() !== "seed") return; // live mode: the link opens the tour in seed mode
    e.preventDefault();
    const tour = byId(a.dataset.tour);
    if (tour) open(tour, 1, { push: true });
  });
  // Folding the picker away is remembered (it stays one line, out of the way of free play).
  els.picker.addEventListener("toggle", (e) => {
    try {
      localStorage.setItem(PICKER_KEY, e.target.open ? "open" : "folded");
    } catch {
      // storage unavailable: not remembered
    }
  }, true);
  // Left and right step through a tour; Escape leaves it. Not while typing in a field.
  doc.addEventListener("keydown", (e) => {
    if (!at.tour || e.ctrlKey || e.metaKey || e.altKey) return;
    const tag = e.target?.tagName;
    if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA") return;
    const act = { ArrowRight: next, ArrowLeft: back, Escape: () => leave() }[e.key];
    if (act) {
      e.preventDefault();
      act();
    }
  });
  // The browser's back and forward buttons move between tour steps too.
  window.addEventListener("popstate", () => {
    const p = tourParams(window.location.search);
    const tour = p && byId(p.id);
    if (tour && !p.free) {
      let step = p.step;
      try {
        step = stepOf(tour, p.step, p.numbering);
      } catch {
        // a step name the tour cannot resolve: open() says it has no such step
      }
      open(tour, step, { remap: remapOf(tour, p.step, p.numbering) });
    } else if (at.tour) window.location.reload(); // back past the tour: the page that was there
  });

  const wanted = tourParams(window.location.search);
  if (wanted) {
    const tour = byId(wanted.id);
    if (!tour) host.report({ kind: "error", text: `there is no tour ${JSON.stringify(wanted.id)}; the tours are ${tours.map((t) => t.id).join(", ")}` });
    else {
      let step = null;
      try {
        step = stepOf(tour, wanted.step, wanted.numbering);
      } catch (err) {
        fail(err);
      }
      if (step !== null && wanted.free) {
        open(tour, step, { animate: false });
        leave();
      } else if (step !== null) open(tour, step, { remap: remapOf(tour, wanted.step, wanted.numbering) });
    }
  }
  draw();

  return {
    /** Called before any command or run the learner starts by hand: that leaves the tour. */
    beforeManual() {
      if (at.tour) leave();
    },
    /** `{ id, step, settled }` or null. */
    current: () => (at.tour ? { id: at.tour.id, step: at.step, settled: !at.run } : null),
  };
}
