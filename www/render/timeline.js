// The time bar: the scrub bar over the run's simulator steps, a strip of what is kept (a tick per
// column that holds kept snapshots, a mark where a command applied), the label
// that says whether the page shows the present or the past, and a replay's progress. It only
// draws; www/time.js owns the history and wires the buttons.

import { fmtMs } from "../spec.js";
import { esc, setHtml } from "./dom.js";

const COLUMNS = 250;
const W = 1000;
const H = 16;

export function findTimeDom(doc) {
  const $ = (id) => doc.getElementById(id);
  return {
    bar: $("timebar"), oldest: $("t-oldest"), back: $("t-back"), scrub: $("t-scrub"), forward: $("t-forward"),
    present: $("t-present"), gotoForm: $("t-goto-form"), goto: $("t-goto"), fork: $("t-fork"), label: $("t-label"),
    strip: $("t-strip"), exportRun: $("t-export"), importFile: $("t-import"), share: $("t-share"), link: $("t-link"),
    progress: $("t-progress"), progressText: $("t-progress-text"), cancel: $("t-cancel"),
    /** What must not be used while the past is shown: every control that changes the run. */
    changesRun: () => [...doc.querySelectorAll(".controls > section:not(:first-child):not(.keys), #processes-view")],
  };
}

/** The strip redraws at most this often while the run plays (it changes with every frame). */
const STRIP_EVERY_MS = 250;
let stripKey = "";
let stripAt = 0;

function strip(entries, maxStep) {
  const x = (s) => (maxStep > 0 ? (s / maxStep) * W : W);
  const kept = new Set();
  const commands = new Set();
  let prev = 0;
  for (const e of entries) {
    const col = Math.min(COLUMNS - 1, Math.floor((x(e.steps) / W) * COLUMNS));
    kept.add(col);
    if (e.commands > prev) commands.add(col);
    prev = e.commands;
  }
  const cw = W / COLUMNS;
  let out = "";
  for (const c of kept) out += `<rect x="${(c * cw).toFixed(1)}" y="6" width="${cw.toFixed(1)}" height="6" class="t-kept"/>`;
  for (const c of commands) out += `<path d="M${((c + 0.5) * cw).toFixed(1)},0 l3,5 l-6,0 z" class="t-cmd"/>`;
  return `<svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none" class="t-svg" role="img" aria-label="kept snapshots (grey) and commands (triangles) over the run">${out}</svg>`;
}

/**
 * Draws the time bar. `m`: `{ live, playing, entries, past, present, job, link, bytes }` (entries are the
 * kept snapshots, oldest first; `past` the one shown, or null; `job` a replay under way).
 */
export function renderTimeline(d, m) {
  if (!d.bar) return;
  const { live, entries, past, present, job } = m;
  const idle = !live && !job;
  // Set a property only when it changes: the page redraws this every frame.
  const set = (el, prop, v) => {
    if (el[prop] !== v) el[prop] = v;
  };
  const atOldest = !entries.length || entries[0] === (past ?? present);
  set(d.oldest, "disabled", !idle || atOldest);
  set(d.back, "disabled", !idle || atOldest);
  set(d.forward, "disabled", !idle || !past);
  set(d.present, "disabled", !idle || !past);
  set(d.fork, "disabled", !idle || !past);
  set(d.scrub, "disabled", !idle || !present);
  set(d.goto, "disabled", !idle);
  set(d.gotoForm.querySelector("button"), "disabled", !idle);
  set(d.share, "disabled", !idle || !present);
  set(d.importFile, "disabled", !idle);
  set(d.link, "value", m.link);
  set(d.link, "hidden", !m.link);
  set(d.bar.dataset, "state", live ? "live" : job ? "busy" : past ? "past" : "present");
  const maxStep = present?.steps ?? 0;
  if (String(d.scrub.max) !== String(maxStep)) d.scrub.max = String(maxStep);
  const at = String((past ?? present)?.steps ?? 0);
  if (d.scrub.value !== at) d.scrub.value = at;
  set(d.progress, "hidden", !job);
  if (job) {
    const pct = job.target > 0 ? Math.min(100, Math.round((job.steps / job.target) * 100)) : 100;
    d.progressText.textContent = `${job.label}: replaying step ${job.steps} of ${job.target} (${pct} %)`;
  }
  let label;
  if (live) {
    label = `<b>Live mode is not replayable</b> (real timers and IndexedDB): no scrubbing, forking or share link. <b>Export</b> saves the event log instead.`;
  } else if (past) {
    const i = entries.indexOf(past) + 1;
    label = `<b class="t-past-flag">◀◀ Viewing the past</b> · step <b class="mono" data-testid="t-step">${past.steps}</b> · t = <span class="mono">${esc(fmtMs(past.nowMs))}</span> · ` +
      `kept snapshot ${i} of ${entries.length} (the run is paused at step ${maxStep}). Changing the run is off here: <b>Fork here</b> (f) goes on from this point and discards the future; <b>Present</b> (End) goes back.`;
  } else if (present) {
    const mb = (m.bytes / 1048576).toFixed(1);
    label = `<b>Present</b> · step <b class="mono" data-testid="t-step">${present.steps}</b> · ${entries.length} snapshot${entries.length === 1 ? "" : "s"} kept (≈${mb} MB, thinned further back) · drag the bar or press , to look back; <b>Go</b> shows any step exactly (rebuilt by replay)`;
  } else {
    label = "no snapshot yet";
  }
  setHtml(d.label, label);
  // The scrub bar's thumb shows the point; the strip (what is kept, where commands applied)
  // changes only as the run grows, so it redraws when that changed, a few times a second.
  const key = live ? "live" : `${entries.length}:${maxStep}:${entries[0]?.steps}`;
  const now = performance.now();
  if (key !== stripKey && (now - stripAt > STRIP_EVERY_MS || !m.playing)) {
    stripKey = key;
    stripAt = now;
    setHtml(d.strip, live ? "" : strip(entries, maxStep));
  }
}
