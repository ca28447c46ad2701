// Time in seed mode: a bounded history of snapshots to scrub through, step back and forward in,
// and fork from; export and import of a run as JSON; a share link that carries the run in the URL.
//
// It rests on the engine's determinism: a seed-mode run is a function of its seed and its stamped
// commands (src/playground/replay.rs), so any point can be rebuilt by replay. The page keeps every
// frame's snapshot (thinned in the older part once the bound is reached: count and estimated bytes);
// a point between kept ones, a fork, an import and a share link are rebuilt by a PlaygroundReplay,
// a slice of simulator steps per animation frame, so the page never freezes.
//
// While it shows the past, the page says so (the time bar, the clock, a tinted page) and the
// controls that would change the run are disabled: Fork here starts a new branch at that point
// (the future is discarded), Present goes back. In live mode nothing is replayable: Export saves
// the event log instead, and says so.

import { renderTimeline } from "./render/timeline.js";

export const RUN_FORMAT = "persist-playground-run";
export const EVENTS_FORMAT = "persist-playground-events";
export const FORMAT_VERSION = 1;
/** The wall-time budget a replay gets per animation frame, and its slice of simulator steps. */
const REPLAY_BUDGET_MS = 8;
const REPLAY_SLICE_STEPS = 200;
/** While a replay rebuilds a new run (an import, a share link), it keeps a snapshot this often. */
const KEEP_EVERY_STEPS = 1000;
/** The past view's event log: the events up to the point, read from the engine's log. */
const PAST_EVENTS = 60;
/** The frontiers panel's history in the past view. */
const PAST_HISTORY = 300;

/**
 * The kept snapshots, oldest first, each `{ steps, nowMs, commands, lastSeq, snap }`. Every push
 * keeps the newest `dense` densely; once over the bound, every other older one goes (the first is
 * always kept), so the whole run stays covered, more coarsely further back. The bound is a count
 * and an estimate of bytes (a snapshot's JSON length, sampled every 64th push).
 */
export function makeHistory({ maxPoints = 600, dense = 240, maxBytes = 48 << 20 } = {}) {
  let list = [];
  let bytesEach = 0;
  let pushes = 0;
  const limit = () => Math.max(dense + 8, Math.min(maxPoints, bytesEach ? Math.floor(maxBytes / bytesEach) : maxPoints));
  function thin() {
    const keepTo = Math.max(1, list.length - dense);
    list = list.filter((_, i) => i === 0 || i >= keepTo || i % 2 === 0);
  }
  return {
    push(snap) {
      const e = { steps: snap.steps, nowMs: snap.nowMs, commands: snap.commands, lastSeq: snap.lastSeq, snap };
      const last = list.at(-1);
      if (last && last.steps === e.steps && last.nowMs === e.nowMs && last.commands === e.commands) {
        list[list.length - 1] = e;
        return;
      }
      if (pushes++ % 64 === 0) bytesEach = JSON.stringify(snap).length;
      list.push(e);
      if (list.length > limit()) thin();
    },
    /** Inserts a rebuilt entry in step order (a point between kept ones). */
    insert(e) {
      const i = list.findIndex((x) => x.steps > e.steps || (x.steps === e.steps && x.commands > e.commands));
      if (i < 0) list.push(e);
      else list.splice(i, 0, e);
    },
    /** The last entry at or before `step` (the newest of a step's entries). */
    at(step) {
      let lo = 0;
      let hi = list.length - 1;
      if (hi < 0 || list[0].steps > step) return list[0] ?? null;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (list[mid].steps <= step) lo = mid;
        else hi = mid - 1;
      }
      return list[lo];
    },
    indexOf: (e) => list.indexOf(e),
    get: (i) => list[i] ?? null,
    entries: () => list,
    size: () => list.length,
    estimatedBytes: () => bytesEach * list.length,
    /** Drops every entry after `e` (a fork discards the future). */
    truncateAfter(e) {
      const i = list.indexOf(e);
      if (i >= 0) list = list.slice(0, i + 1);
    },
    clear() {
      list = [];
    },
  };
}

// ---- The run as a document: JSON export/import and the share link ----

/** The seed-mode run of `pg` as a document: seed, stamped commands and the point it is at. */
export function runDocument(pg, snap) {
  return {
    format: RUN_FORMAT,
    version: FORMAT_VERSION,
    seed: pg.seed,
    at: { step: snap.steps, atMs: snap.nowMs },
    commands: pg.stampedCommands(),
  };
}

const isWhole = (n) => Number.isSafeInteger(n) && n >= 0;

/** Checks a parsed document's shape (the engine checks every command); returns it or throws. */
export function checkRunDocument(doc) {
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) throw new Error("it is not a JSON object");
  if (doc.format === EVENTS_FORMAT) throw new Error("it is a live-mode event log: live runs are not replayable");
  if (doc.format !== RUN_FORMAT) throw new Error(`its format is ${JSON.stringify(doc.format)}, not "${RUN_FORMAT}"`);
  if (doc.version !== FORMAT_VERSION) throw new Error(`format version ${JSON.stringify(doc.version)} is not supported (this page reads version ${FORMAT_VERSION})`);
  const seed = typeof doc.seed === "number" ? String(doc.seed) : doc.seed;
  if (typeof seed !== "string" || !/^\d{1,20}$/.test(seed)) throw new Error(`the seed must be a whole number, not ${JSON.stringify(doc.seed)}`);
  if (!doc.at || !isWhole(doc.at.step) || !isWhole(doc.at.atMs)) throw new Error("`at` must be { step, atMs } with whole numbers");
  if (!Array.isArray(doc.commands)) throw new Error("`commands` must be a list of stamped commands");
  return { ...doc, seed };
}

/** Parses and checks a JSON text; a clear Error if it is not a run. */
export function parseRun(text) {
  let doc;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new Error(`it is not valid JSON (${err.message})`);
  }
  return checkRunDocument(doc);
}

async function streamBytes(bytes, stream) {
  const out = new Response(new Blob([bytes]).stream().pipeThrough(stream));
  return new Uint8Array(await out.arrayBuffer());
}

function toBase64Url(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function fromBase64Url(text) {
  if (!/^[A-Za-z0-9_-]+$/.test(text)) throw new Error("it is not base64url text");
  const bin = atob(text.replace(/-/g, "+").replace(/_/g, "/"));
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

/** A run document as a URL parameter: JSON, deflate-raw, base64url. */
export async function encodeRun(doc) {
  return toBase64Url(await streamBytes(new TextEncoder().encode(JSON.stringify(doc)), new CompressionStream("deflate-raw")));
}

/** The inverse of `encodeRun`; a clear Error for a damaged link. */
export async function decodeRun(param) {
  let bytes;
  try {
    bytes = await streamBytes(fromBase64Url(param), new DecompressionStream("deflate-raw"));
  } catch (err) {
    throw new Error(`its run= data does not decompress (${err.message || err.name}): was the link cut short?`);
  }
  return parseRun(new TextDecoder().decode(bytes));
}

function download(name, text) {
  const url = URL.createObjectURL(new Blob([text], { type: "application/json" }));
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

const nextFrame = () => new Promise((r) => requestAnimationFrame(r));

// ---- The controller ----

/**
 * Time for the page. `ctx`: `{ dom, wasm, pg(), replacePg(pg), state, view, report, redraw }`
 * from main.js. The frame loop asks `busy()` / `inPast()` (then it runs no simulation), records
 * each pulled snapshot with `record(snap)` and draws `shown(state)`; `guard()` throws when a
 * command must not be sent now.
 */
export function makeTime(ctx) {
  const { dom, view, report } = ctx;
  let hist = makeHistory();
  let past = null; // the entry shown, or null: the present
  let pastEvents = { entry: null, events: [] };
  let job = null; // a replay under way: { replay, label, target, cancelled }
  let link = "";
  const pg = () => ctx.pg();
  const live = () => pg()?.mode === "live";
  const errorText = (err) => (err instanceof Error ? err.message : String(err));

  function present() {
    return hist.get(hist.size() - 1);
  }

  /** Throws unless the page can move in time now. */
  function idle() {
    if (live()) throw new Error("live mode runs on real timers and IndexedDB: nothing is replayable, so there is no past to scrub");
    if (job) throw new Error(`wait: ${job.label} is under way`);
    if (!present()) throw new Error("no snapshot kept yet");
  }

  /** Shows `entry` (null, or the newest: the present). */
  function show(entry, draw = true) {
    idle();
    if (entry === present()) entry = null;
    if (entry && !past) view.playing = false; // scrubbing back pauses the run
    past = entry;
    view.past = Boolean(past);
    if (draw) ctx.redraw();
    else render();
  }

  function eventsAt(entry) {
    if (pastEvents.entry !== entry) {
      const from = Math.max(0, entry.lastSeq - PAST_EVENTS);
      const events = pg().eventsAfter(from, PAST_EVENTS).filter((e) => e.seq <= entry.lastSeq);
      pastEvents = { entry, events };
    }
    return pastEvents.events;
  }

  /** Runs a replay a slice at a time on animation frames; resolves to the finished playground. */
  async function runReplay(replay, label, target, keep = null) {
    job = { replay, label, target, cancelled: false };
    view.busyTime = true;
    render();
    let keptAt = 0;
    try {
      for (;;) {
        const start = performance.now();
        let done = false;
        do {
          done = replay.advance(REPLAY_SLICE_STEPS);
          // A new run's snapshots on the way are kept (one per KEEP_EVERY_STEPS), so it can be
          // scrubbed at once.
          if (keep && !done && replay.steps - keptAt >= KEEP_EVERY_STEPS) {
            keptAt = replay.steps;
            keep.push(replay.snapshot());
          }
        } while (!done && performance.now() - start < REPLAY_BUDGET_MS);
        if (done) {
          const finished = replay.finish();
          replay.free(); // used up: finish() took its scenario
          return finished;
        }
        render();
        await nextFrame();
        if (job.cancelled) throw new Error(`${label} cancelled`);
      }
    } catch (err) {
      replay.free();
      throw err;
    } finally {
      job = null;
      view.busyTime = false;
    }
  }

  /** Rebuilds a run document into a new playground (the running one is left as it was). */
  async function rebuild(doc, label, keep = null) {
    let replay;
    try {
      replay = new ctx.wasm.PlaygroundReplay(doc.seed, doc.commands, doc.at.step, doc.at.atMs);
    } catch (err) {
      throw new Error(errorText(err));
    }
    return runReplay(replay, label, doc.at.step, keep);
  }

  const api = {
    inPast: () => Boolean(past),
    busy: () => Boolean(job),
    history: () => hist,
    /** Forgets every kept snapshot: another run replaced the playground (a guided tour). */
    reset() {
      if (job) job.cancelled = true;
      hist = makeHistory();
      past = null;
      view.past = false;
    },
    /** Keeps a snapshot of the present (seed mode). */
    record(snap) {
      if (snap.mode !== "seed" || past || job) return;
      hist.push(snap);
    },
    /** What the panels draw: the present state, or the past point with its history and events. */
    shown(state) {
      if (!past) return state;
      const entry = past;
      return {
        latest: () => entry.snap,
        history: () => {
          const all = hist.entries();
          const i = all.indexOf(entry);
          return all.slice(Math.max(0, i - PAST_HISTORY + 1), i + 1).map((e) => e.snap);
        },
        events: () => eventsAt(entry),
        cursor: () => entry.lastSeq,
      };
    },
    /** Throws (with what to do instead) when a command must not be sent now. */
    guard() {
      if (job) throw new Error(`wait: ${job.label} is under way (or cancel it)`);
      if (past) throw new Error(`you are viewing the past (step ${past.steps}): Fork here (f) to change the run from this point, or go back to the present (End)`);
    },
    back() {
      idle();
      const i = past ? hist.indexOf(past) : hist.size() - 1;
      if (i <= 0) throw new Error("this is the oldest kept snapshot");
      show(hist.get(i - 1));
    },
    forward() {
      idle();
      if (!past) throw new Error("already at the present");
      show(hist.get(hist.indexOf(past) + 1));
    },
    oldest: () => show(hist.get(0)),
    toPresent() {
      if (!past) return;
      show(null);
      report({ kind: "ok", text: `back to the present: step ${present().steps}` });
    },
    /** Shows the kept snapshot at or before `step` (instant: what dragging the scrub bar does). */
    scrubTo(step) {
      show(hist.at(Number(step)), false);
    },
    /** Shows exactly step `step`: a kept snapshot, or one rebuilt by replay. */
    async goTo(text) {
      const t = String(text).trim();
      if (!/^\d{1,15}$/.test(t)) throw new Error(`the step must be a whole number, not ${JSON.stringify(t)}`);
      const step = Number(t);
      const now = present();
      if (!now) throw new Error("no snapshot kept yet");
      if (step > now.steps) throw new Error(`step ${step} is in the future: the run is at step ${now.steps}`);
      const kept = hist.at(step);
      if (kept && kept.steps === step) return show(kept);
      if (job) throw new Error(`wait: ${job.label} is under way`);
      const commands = pg().stampedCommands().filter((c) => c.stamp.step <= step);
      let replay;
      try {
        replay = new ctx.wasm.PlaygroundReplay(pg().seed, commands, step, undefined);
      } catch (err) {
        throw new Error(errorText(err));
      }
      view.playing = false;
      const rebuilt = await runReplay(replay, `rebuilding step ${step}`, step);
      const snap = rebuilt.snapshot();
      rebuilt.free();
      const entry = { steps: snap.steps, nowMs: snap.nowMs, commands: snap.commands, lastSeq: snap.lastSeq, snap };
      hist.insert(entry);
      show(entry);
      report({ kind: "ok", text: `step ${step} rebuilt by replay (older than the kept snapshots around it)` });
    },
    /** Fork here: rebuild the run at the point shown, discard the future, go on from there. */
    async fork() {
      if (job) throw new Error(`wait: ${job.label} is under way`);
      if (!past) throw new Error("scrub back first: a fork starts a new branch at a point of the past");
      const entry = past;
      const doc = { seed: pg().seed, at: { step: entry.steps, atMs: entry.nowMs }, commands: pg().stampedCommands().slice(0, entry.commands) };
      const next = await rebuild(doc, `forking at step ${entry.steps}`);
      const same = JSON.stringify(next.snapshot()) === JSON.stringify(entry.snap);
      hist.truncateAfter(entry);
      past = null;
      view.past = false;
      ctx.replacePg(next);
      report(same
        ? { kind: "ok", text: `forked at step ${entry.steps} (${entry.commands} commands): the future after it is discarded; the run goes on from here with your next commands` }
        : { kind: "error", text: `forked at step ${entry.steps}, but the replayed snapshot differs from the one kept there: the run is not deterministic (a bug)` });
    },
    /** Export: the run as JSON in seed mode; the event log in live mode (and it says so). */
    exportRun() {
      const p = pg();
      if (live()) {
        const events = [];
        for (let cursor = 0; ;) {
          const batch = p.eventsAfter(cursor, 5000);
          if (!batch.length) break;
          events.push(...batch);
          cursor = batch.at(-1).seq;
        }
        const doc = {
          format: EVENTS_FORMAT,
          version: FORMAT_VERSION,
          mode: "live",
          db: view.db,
          note: "Live mode runs on real timers and IndexedDB, so it is not replayable: this is its event log, not a run to import.",
          events,
        };
        download(`persist-playground-live-${view.db}-events.json`, JSON.stringify(doc, null, 1));
        report({ kind: "ok", text: `live mode is not replayable (real timers, IndexedDB): exported the event log instead, ${events.length} events` });
        return doc;
      }
      const doc = runDocument(p, present().snap);
      download(`persist-playground-seed${doc.seed}-step${doc.at.step}.json`, JSON.stringify(doc, null, 1));
      report({ kind: "ok", text: `exported the run: seed ${doc.seed}, ${doc.commands.length} commands, up to step ${doc.at.step}` });
      return doc;
    },
    /** Import: replays the run in a file; a bad file is a message and the running state stays. */
    async importText(text, name = "the file") {
      if (live()) throw new Error("live mode runs on real timers: switch to seed mode (l) to import a run");
      if (job) throw new Error(`wait: ${job.label} is under way`);
      let doc;
      let next;
      const kept = makeHistory();
      try {
        doc = parseRun(text);
        next = await rebuild(doc, `importing ${name}`, kept);
      } catch (err) {
        throw new Error(`could not import ${name}: ${errorText(err)}; the running state is unchanged`);
      }
      hist = kept;
      past = null;
      view.past = false;
      ctx.replacePg(next);
      report({ kind: "ok", text: `imported ${name}: seed ${doc.seed}, ${doc.commands.length} commands, at step ${doc.at.step}` });
    },
    /** The share link of the run as it is now (seed mode), also shown in the link field. */
    async shareLink() {
      if (live()) throw new Error("live mode runs on real timers and IndexedDB: nothing is replayable, so there is no share link (Export saves the event log)");
      api.guard();
      const doc = runDocument(pg(), present().snap);
      const url = new URL(window.location.href);
      url.search = `?run=${await encodeRun(doc)}`;
      url.hash = "";
      link = url.toString();
      render();
      navigator.clipboard?.writeText(link).catch(() => {});
      report({ kind: "ok", text: `share link for step ${doc.at.step} (${doc.commands.length} commands, ${link.length} characters): opening it replays this run to this step` });
      return link;
    },
    /** Opens a share link's run= parameter: a new playground, or an Error saying what is wrong. */
    async openLink(param) {
      let doc;
      try {
        doc = await decodeRun(param);
      } catch (err) {
        throw new Error(`the share link is damaged: ${errorText(err)}`);
      }
      const kept = makeHistory();
      try {
        const opened = { pg: await rebuild(doc, "opening the share link", kept), doc };
        hist = kept;
        return opened;
      } catch (err) {
        throw new Error(`the share link's run could not be replayed: ${errorText(err)}`);
      }
    },
    cancel() {
      if (job) job.cancelled = true;
    },
    render,
  };

  function render() {
    renderTimeline(dom.time, {
      live: live(),
      playing: view.playing,
      entries: hist.entries(),
      past,
      present: present(),
      job: job && { label: job.label, steps: safeSteps(job.replay), target: job.target },
      link,
      bytes: hist.estimatedBytes(),
    });
    // Touch the DOM only on a change: an attribute set, even to its value, restyles the page.
    const mode = past ? "past" : job ? "busy" : "present";
    if (document.body.dataset.time !== mode) {
      document.body.dataset.time = mode;
      for (const el of dom.time.changesRun()) el.inert = Boolean(past || job);
    }
  }

  function safeSteps(replay) {
    try {
      return replay.steps;
    } catch {
      return 0;
    }
  }

  wire(dom.time, api, (err) => report({ kind: "error", text: errorText(err) }));
  return api;
}

/** Buttons, the scrub bar, the step field, import, and the keys , . Home End f e k i. */
function wire(d, api, fail) {
  const guarded = (f) => async (...args) => {
    try {
      await f(...args);
    } catch (err) {
      fail(err);
    }
  };
  const click = (el, f) => el.addEventListener("click", guarded(f));
  click(d.oldest, () => api.oldest());
  click(d.back, () => api.back());
  click(d.forward, () => api.forward());
  click(d.present, () => api.toPresent());
  click(d.fork, () => api.fork());
  click(d.exportRun, () => api.exportRun());
  click(d.share, () => api.shareLink());
  click(d.cancel, () => api.cancel());
  d.scrub.addEventListener("input", guarded(() => api.scrubTo(d.scrub.value)));
  d.gotoForm.addEventListener("submit", guarded((e) => {
    e.preventDefault();
    return api.goTo(d.goto.value);
  }));
  d.importFile.addEventListener("change", guarded(async () => {
    const file = d.importFile.files[0];
    if (!file) return;
    d.importFile.value = "";
    await api.importText(await file.text(), file.name);
  }));
  document.addEventListener("keydown", guarded((e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const tag = e.target?.tagName;
    if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA") return;
    const actions = {
      ",": () => api.back(),
      ".": () => api.forward(),
      Home: () => api.oldest(),
      End: () => api.toPresent(),
      f: () => api.fork(),
      e: () => api.exportRun(),
      k: () => api.shareLink(),
      i: () => d.importFile.click(),
    };
    const act = actions[e.key];
    if (!act) return;
    e.preventDefault();
    return act();
  }));
}
