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
//
// This file is the controller (what is shown, replays, fork, export, import, share link); the
// kept snapshots are www/history.js, the run as a document www/run-document.js, and the time bar
// (drawing and wiring) www/timebar.js.

import { makeHistory } from "./history.js";
import { decodeRun, download, encodeRun, EVENTS_FORMAT, FORMAT_VERSION, parseRun, runDocument } from "./run-document.js";
import { renderTimeBar, wireTimeBar } from "./timebar.js";

const REPLAY_BUDGET_MS = 8;
const REPLAY_SLICE_STEPS = 200;
/** While a replay rebuilds a new run (an import, a share link), it keeps a snapshot this often. */
const KEEP_EVERY_STEPS = 1000;
/** The past view's event log: the events up to the point, read from the engine's log. */
const PAST_EVENTS = 60;
/** The frontiers panel's history in the past view. */
const PAST_HISTORY = 300;

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
      if (job) throw new Error(`wait: ${job.label} is under way`);
      // In the past, the link is to the point shown: it opens there.
      const doc = runDocument(pg(), (past ?? present()).snap);
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
    renderTimeBar(dom.time, { live: live(), playing: view.playing, hist, past, present: present(), job, link });
  }

  wireTimeBar(dom.time, api, (err) => report({ kind: "error", text: errorText(err) }));
  return api;
}

