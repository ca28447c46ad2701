// The Writers and Oracle panels: each writer's and write task's cached upper against the shard's,
// its latest attempt, and the outcomes worth keeping in view until the next of their kind (the
// latest lost race with its expected and actual upper, the latest write that met a timeout and
// whether the idempotency token resolved it); a write task's desired rows, to_write and its
// latest re-sync; each oracle instance's timestamps, its first one in this incarnation and its
// durable windows.

import { OUTCOMES, actorColour, fmtFrontier, fmtMs, fmtMsAs, lagBar } from "../spec.js";
import { chip, count, esc, mark, setHtml } from "./dom.js";
import { taskWords } from "./log.js";
import { errorWords, rowWords } from "./words.js";

/** The Writers panel's marks: its ✕ is a write that lost a race (the Consensus log's is a refused
 * compare_and_set: panels.js). */
const W_MARKS = { ...OUTCOMES, mismatch: { ...OUTCOMES.mismatch, label: "lost a race (UpperMismatch): another writer moved the shard's upper first" } };

const LAG_W = 70;
/** Read-only is not an error: its own mark, drawn in CSS (two bars; Chromium's fonts have no
 * ⏸), named for screen readers. */
const READ_ONLY = `<span class="mark o-read-only" role="img" aria-label="read-only" title="read-only: desired is kept, nothing is written"></span>`;

const rowsWord = (n) => `${n} row${n === 1 ? "" : "s"}`;

/** A write task's `to_write` (or a write) in signed rows: "+2 rows, −1 row", or "no rows". */
export function signedRows(sr) {
  if (!sr || !(sr.adds || sr.retractions)) return "no rows";
  const parts = [];
  if (sr.adds) parts.push(`+${rowsWord(sr.adds)}`);
  if (sr.retractions) parts.push(`−${rowsWord(sr.retractions)}`);
  return parts.join(", ");
}

/** A re-sync's `to_write` in words, so that "desired − shard" does not read as a subtraction of
 * counts: "+2 rows to add, −1 row to retract", or "no rows". */
function rowsToWrite(sr) {
  if (!sr || !(sr.adds || sr.retractions)) return "no rows";
  const parts = [];
  if (sr.adds) parts.push(`+${rowsWord(sr.adds)} to add`);
  if (sr.retractions) parts.push(`−${rowsWord(sr.retractions)} to retract`);
  return parts.join(", ");
}

/** The first rows of a signed-rows list, each with its diff, key and value: "+1 key T1-P1-1 = 1". */
function shownRows(sr) {
  if (!sr?.shown?.length) return "";
  const more = sr.adds + sr.retractions - sr.shown.length;
  const rows = sr.shown.map((r) => `<span class="mono signed ${r.startsWith("-") ? "minus" : "plus"}">${esc(rowWords(r.replace(/^-/, "−")))}</span>`);
  return `: ${rows.join(" ")}${more > 0 ? ` and ${more} more` : ""}`;
}

/** `to_write` in a table cell: "+2 −2". */
const signedShort = (sr) => [sr?.adds ? `+${sr.adds}` : "", sr?.retractions ? `−${sr.retractions}` : ""].filter(Boolean).join(" ") || "0";

function writerSide(a) {
  const d = a.detail;
  if (d.kind === "writer") return d;
  if (d.kind === "task") return d.writer;
  return null;
}

function lagCell(value, shared, shardUpper) {
  const b = lagBar(value, shardUpper, LAG_W);
  if (!b) return `<td class="lag"></td>`;
  const s = lagBar(shared, shardUpper, LAG_W);
  const behind = (x) => (x.behind <= 0 ? "at the shard's upper" : `${x.behind} ms behind it`);
  const title = `cached upper (filled) ${behind(b)}${s ? `; shared upper (ring) ${behind(s)}` : ""}`;
  return `<td class="lag" title="${esc(title)}"><svg viewBox="0 0 ${LAG_W + 6} 14" width="${LAG_W + 6}" height="14">` +
    `<line x1="0" x2="${LAG_W}" y1="7" y2="7" class="lag-axis"/>` +
    `<line x1="${LAG_W}" x2="${LAG_W}" y1="1" y2="13" class="upper"/>` +
    (s ? `<circle cx="${s.x.toFixed(1)}" cy="7" r="5" class="shared-dot"/>` : "") +
    `<circle cx="${b.x.toFixed(1)}" cy="7" r="3.2" class="lag-dot"/></svg></td>`;
}

/** An exact time on the page's clock (a lost race's uppers differ by a few ms: no rounding). */
const exactMs = (v, t0) => (v === null || v === undefined ? "[] finished" : `${v - t0} ms`);

/** What the row is doing now: its state, read-only, the write in flight, or its last attempt. */
function statusOf(a, w, t0) {
  const last = w?.last;
  if (a.state !== "running") {
    return `<span class="state s-${a.state}">${esc(a.state)}</span>${a.error ? ` <span class="err">${esc(errorWords(a.error))}</span>` : ""}`;
  }
  if (a.detail.kind === "task" && a.detail.readOnly) {
    return `${READ_ONLY} read-only: ${a.detail.refused} command${a.detail.refused === 1 ? "" : "s"} kept in desired, not written`;
  }
  // Both ends in one unit: "[9031 ms, 10031 ms)", never "[9031 ms, 10.0 s)".
  const range = (f) => {
    const at = fmtMsAs([f.lower, f.upper], t0);
    const end = (v) => (v === null || v === undefined ? fmtFrontier(v, t0) : at(v));
    return `[${esc(end(f.lower))}, ${esc(end(f.upper))})`;
  };
  // A last attempt that lost a race is said once, by its own line (lostLine), with its time.
  const lastLost = lostInStatus(a, w);
  const lastText = last && !(last.outcome === "mismatch" && w.lastLost) ? ` · last ${mark(last.outcome, W_MARKS)} ${esc(errorWords(taskWords(last.detail, t0)))}` : "";
  if (w?.inFlight) {
    const f = w.inFlight;
    // A retry after a timeout: with a token, the timeouts line below says so and what persist
    // does about it; without one, here.
    const now = f.retrying
      ? `${mark("retrying", OUTCOMES)} retrying ${range(f)}${f.timeouts && a.variant === "idempotency-token" ? ` after ${count(f.timeouts, "timeout")} (its ? in the Consensus log): without a token it cannot look, so it writes again` : ""}`
      : f.updates === 0
        ? `<span class="busy">writing</span> an empty batch at ${range(f)}: no updates, it only moves the upper`
        : `<span class="busy">writing</span> ${f.updates} update${f.updates === 1 ? "" : "s"} at ${range(f)}`;
    return now + lastText;
  }
  if (lastLost) return lostLine(w.lastLost, t0);
  if (last) return `${mark(last.outcome, W_MARKS)} ${esc(errorWords(taskWords(last.detail, t0)))}`;
  // No attempt yet in this process: said in words, with what starts the first write.
  const first = a.detail.kind === "task"
    ? "a write task writes at its next command or upper tick (its tick ms)"
    : "a writer writes as its updates come (its rate per second)";
  return `<span class="muted" title="${esc(`no write attempted yet by this process: ${first}`)}">waiting: no write yet</span>`;
}

/** Whether the status line is the latest lost race (a running row at rest whose last attempt lost). */
const lostInStatus = (a, w) => Boolean(a.state === "running" && !(a.detail.kind === "task" && a.detail.readOnly) && !w?.inFlight && w?.last?.outcome === "mismatch" && w.lastLost);

/** The latest lost race, with its expected and actual upper (the numbers a step quotes). */
function lostLine(l, t0) {
  return `<span data-kept="lost">${mark("mismatch", W_MARKS)} lost a race at ${esc(exactMs(l.atMs, t0))}: it expected the upper at ${esc(exactMs(l.expected, t0))}, the shard's was ${esc(exactMs(l.actual, t0))} <span class="muted" title="compare_and_append's error when the shard's upper is not the one the writer expected: another writer wrote first">(UpperMismatch)</span></span>`;
}

const writesWord = (n) => `${n} write${n === 1 ? "" : "s"}`;

/**
 * What became of its writes that met a timeout, counted as the won/lost/? column counts them:
 * each was ? (unknown) until persist looked for its idempotency token in the state; the ?
 * counts those left unknown. A writer without the token (the broken rule) resolves none: it
 * writes each again blindly. The write in flight is not settled yet, so not among them: said
 * apart, with its own timeouts.
 */
function timeoutLine(w, noToken) {
  const parts = [];
  const flying = w.inFlight?.timeouts ?? 0;
  // The write in flight first, under the row's "retrying" line; then the settled ones.
  if (flying && !noToken) parts.push(`<span title="its timeout is a ? in the Consensus log: persist reads the state back for its idempotency token, and counts the write (won, or lost) once it knows">${mark("retrying", OUTCOMES)} the write in flight met ${count(flying, "timeout")} too and is not settled yet</span>`);
  if (w.timedOutWrites) {
    const unknown = w.timedOutWrites - w.resolvedByToken - w.timedOutThenLost;
    const total = `${w.timeouts} timeout${w.timeouts === 1 ? "" : "s"} in all: a write may meet several${flying ? `, and ${flying} ${flying === 1 ? "is" : "are"} the retrying write's` : ""}`;
    // One line: the three results side by side, what each means on hover.
    const how = noToken
      ? [`all ${unknown} left ${mark("indeterminate", OUTCOMES)} unknown: without an idempotency token it cannot tell whether a timed-out write landed, so it wrote each again at the shard's new upper (a blind retry)`]
      : [
        `<span title="it had landed, once">${w.resolvedByToken} → ${mark("committed", OUTCOMES)} its token was in the state</span>`,
        `<span title="it had not landed; written again, it lost a race (these count in the lost column)">${w.timedOutThenLost} → ${mark("mismatch", W_MARKS)} its token was not in the state</span>`,
        unknown ? `${unknown} left ${mark("indeterminate", OUTCOMES)} unknown` : `none left ${mark("indeterminate", OUTCOMES)} unknown`,
      ];
    parts.push(`${mark("indeterminate", OUTCOMES)} ${writesWord(w.timedOutWrites)} met a storage timeout${noToken ? "" : ` and ${w.timedOutWrites === 1 ? "is" : "are"} settled`} (${total}): ${how.join(", ")}`);
  }
  return `<span data-kept="timeouts">${parts.join("<br>")}</span>`;
}

/** The timeouts that hit its maintenance, not a write: a line of their own, last. */
const maintenanceLine = (w) => `<span data-kept="maintenance" title="heartbeats, compaction, rollups: persist retries those itself">${w.otherTimeouts} more timeout${w.otherTimeouts === 1 ? "" : "s"} hit its own maintenance (heartbeats, compaction, rollups), not a write</span>`;

/** The outcomes kept until the next of their kind. */
function keptLines(a, w, t0) {
  const lines = [];
  // The latest lost race, unless the status line above is that race (its last attempt).
  if (w?.lastLost && !lostInStatus(a, w)) lines.push(lostLine(w.lastLost, t0));
  // The count of timed-out writes first, then the latest of them (one of that count).
  if (w && (w.timedOutWrites || (w.inFlight?.timeouts && a.variant !== "idempotency-token"))) lines.push(timeoutLine(w, a.variant === "idempotency-token"));
  if (w?.lastTimedOut) {
    const o = w.lastTimedOut;
    const how = o.resolvedByToken
      ? `${mark("indeterminate", OUTCOMES)} → ${mark("committed", OUTCOMES)} resolved by the idempotency token`
      : `${mark(o.outcome, W_MARKS)} ${o.outcome === "indeterminate" ? (a.variant === "idempotency-token" ? "unknown for good (no token), written again" : "still unknown") : o.outcome === "mismatch" ? "had not landed, and its retry lost a race" : esc(OUTCOMES[o.outcome]?.label ?? o.outcome)}`;
    lines.push(`<span data-kept="timed-out">${w.timedOutWrites > 1 ? "the latest of them: " : ""}write at ${esc(exactMs(o.lower, t0))} met ${o.timeouts} timeout${o.timeouts === 1 ? "" : "s"} (${esc(exactMs(o.atMs, t0))}): ${how}</span>`);
  }
  if (w?.otherTimeouts) lines.push(maintenanceLine(w));
  if (a.detail.kind === "task") lines.push(...taskLines(a.detail, w, t0));
  // Kept lines wrap: none of them is cut.
  return lines.length ? `<tr class="sub kept"><td colspan="4" style="white-space:normal">${lines.join("<br>")}</td></tr>` : "";
}

/** A write task's lines: desired, to_write in signed rows, its latest write, its re-syncs. */
function taskLines(t, w, t0) {
  const lines = [];
  const desired = t.readOnly
    ? (t.desiredRows
      ? `desired ${rowsWord(t.desiredRows)} (only the commands it was sent: a read-only task does not read the shard)`
      : `no desired rows: a read-only task does not read the shard, it keeps only the commands it is sent`)
    : `desired ${rowsWord(t.desiredRows)}`;
  const pending = w.pending ? `to_write ${signedRows(t.toWrite)}${shownRows(t.toWrite)}` : "to_write empty";
  lines.push(`<span data-kept="task">${desired} · ${pending}</span>`);
  if (t.lastWritten) {
    const empty = !(t.lastWritten.adds || t.lastWritten.retractions);
    lines.push(`<span data-kept="written">last write carried ${empty ? "no rows (an empty batch: the upper tick)" : signedRows(t.lastWritten)}${shownRows(t.lastWritten)}</span>`);
  }
  let resync = `${t.resyncs} re-sync${t.resyncs === 1 ? "" : "s"}`;
  if (t.lastResync) {
    const r = t.lastResync;
    const at = fmtMsAs([r.atMs, r.upper], t0);
    const upper = r.upper === null || r.upper === undefined ? fmtFrontier(r.upper, t0) : at(r.upper);
    // The difference as rows to add and to retract, no counts on either side of the "−": "desired
    // 2 rows − shard 2 rows → +2 rows, −2 rows" read as wrong arithmetic (learner walk 5). Short
    // enough that a shown row stays on the line's second line (write-task 6 fits the window).
    resync += `, the last at ${esc(at(r.atMs))}: to_write = desired − shard at ${esc(upper)}: ${rowsToWrite(r.toWrite)}${shownRows(r.toWrite)}`;
  }
  if (!t.readOnly || t.resyncs) lines.push(`<span data-kept="resync">${resync}</span>`);
  return lines;
}

export function renderWriters(el, snap, t0) {
  const rows = [];
  for (const a of snap.actors) {
    if (!(a.spec.kind === "writer" || a.spec.kind === "task")) continue;
    const w = writerSide(a);
    const shard = snap.shards.find((s) => s.name === a.spec.shard);
    const su = shard?.upper ?? null;
    const c = actorColour(a.colour);
    const kept = keptLines(a, w, t0);
    const kind = a.spec.kind === "task"
      ? `<span class="how">task</span>${a.detail.readOnly ? `<span class="how">read-only</span>` : ""}`
      : `<span class="how">${a.spec.mode === "append" ? "append" : "c&amp;a"}</span>`;
    const pending = !w ? "" : a.detail.kind === "task" && w.pending ? esc(signedShort(a.detail.toWrite)) : w.pending;
    rows.push(
      `<tbody data-actor="${esc(a.id)}"><tr><td rowspan="${kept ? 3 : 2}">${chip(a.id, c)}${kind}</td>` +
        `<td class="mono">${w && (w.last || w.committed) ? esc(fmtFrontier(w.cachedUpper, t0)) : "–"}</td>${lagCell(w?.cachedUpper, w?.sharedUpper, su)}` +
        `<td class="mono num" data-col="pending">${pending}</td>` +
        `<td class="mono num">${w ? `${w.committed}/${w.mismatches}/${w.indeterminate}` : ""}</td></tr>` +
        `<tr class="sub"><td colspan="4" class="last" data-col="last">${statusOf(a, w, t0)}</td></tr>${kept}</tbody>`,
    );
  }
  const body = rows.length
    ? rows.join("")
    : `<tbody><tr><td colspan="5" class="empty">No writers. Add one with + Writer (w).</td></tr></tbody>`;
  setHtml(
    el,
    `<table class="grid writers"><thead><tr><th>actor</th><th>cached upper</th><th title="dot: the handle's cached upper; ring: the process's shared upper; bar end: the shard's upper">vs shard</th><th title="updates still to write (to_write)">pending</th><th title="writes committed / lost a race (UpperMismatch) / whose outcome it never learned (a timed-out write without an idempotency token; with one, persist resolves every timeout: see the row's ? line)">won/lost/?</th></tr></thead>${body}</table>`,
  );
}

export function renderOracle(el, snap, t0) {
  const oracles = snap.actors.filter((a) => a.spec.kind === "oracle");
  if (!oracles.length && !snap.timelines.length) {
    setHtml(el, `<p class="empty">No oracle instance. Add one with + Oracle (o).</p>`);
    return;
  }
  const timelines = snap.timelines
    .map((t) => `<p class="timeline">timeline <b>${esc(t.timeline)}</b>: stored epoch <span class="mono">${t.epoch ?? "–"}</span>, durable upper <span class="mono" data-testid="durable-upper">${esc(fmtFrontier(t.durableUpper, t0))}</span>${t.error ? ` <span class="err">${esc(t.error)}</span>` : ""}</p>`)
    .join("");
  const rows = oracles
    .map((a) => {
      const o = a.detail.kind === "oracle" ? a.detail : null;
      const state = a.state === "running"
        ? ""
        : `<span class="state s-${a.state}">${esc(a.state)}</span> <span class="err small">${esc(a.error ?? "")}</span>`;
      const windows = o ? windowsSvg(o) : "";
      // An instance without the durable bound (and its restarts) hands out timestamps past its
      // durable upper: resuming above that upper promises nothing then.
      const unbound = Boolean(o?.unbounded);
      return `<tr data-actor="${esc(a.id)}"><td>${chip(a.id, actorColour(a.colour))}</td><td class="mono num">${o?.epoch ?? ""}</td>` +
        `<td class="mono num" data-col="first-ts" title="the first write timestamp this instance handed out${unbound ? " (without the durable-bound rule, a restart's may be below one handed out before)" : " (after a restart: above every earlier one)"}">${o?.firstTs != null ? esc(fmtMs(o.firstTs, t0)) : "–"}</td>` +
        `<td class="mono num">${o ? esc(fmtMs(o.readTs, t0)) : ""}</td><td class="mono num">${o ? esc(fmtMs(o.writeTs, t0)) : ""}</td>` +
        `<td class="mono num">${o ? esc(fmtMs(o.durableUpper, t0)) : ""}</td><td class="mono num">${o?.handedOut ?? ""}</td></tr>` +
        // The durable windows on a row of their own: in the table they were cut at the edge.
        (windows ? `<tr class="sub" data-actor="${esc(a.id)}"><td colspan="7" class="small" style="white-space:normal">durable windows, ${o.windows.length > 8 ? "the newest 8" : o.windows.length === 1 ? "the only one" : `all ${o.windows.length}`} (each a range of timestamps made durable at once; the line is write_ts): ${windowsScaled(o, windows, t0)}${o.resumedFrom != null ? ` <span data-testid="oracle-resumed-from">Resumed above <span class="mono">${esc(fmtMs(o.resumedFrom, t0))}</span>, the durable upper the previous instance had stored: ${unbound ? "without the durable-bound rule, that instance could hand out timestamps past it, so some handed out before may be above it (the Check panel says if one was)" : "every timestamp handed out before was below it"}.</span>` : ""}</td></tr>` : "") +
        // The state and its error on a row of their own, wrapped: a fenced instance's reason is
        // what the step is about, and the table is wider than the panel.
        (state ? `<tr class="sub" data-actor="${esc(a.id)}"><td colspan="7" style="white-space:normal">${state}</td></tr>` : "");
    })
    .join("");
  setHtml(
    el,
    `${timelines}<table class="grid"><thead><tr><th>instance</th><th>epoch</th><th title="its first write timestamp in this incarnation">first ts</th><th>read_ts</th><th>write_ts</th><th title="the durable upper: nothing at or beyond it is handed out">durable</th><th title="write timestamps handed out">handed out</th></tr></thead><tbody>${rows}</tbody></table>`,
  );
}

/** The ends of the windows' drawing, in the panel's times: the bars have no axis of their own. */
function windowsSpan(o) {
  const ws = o.windows.slice(-8);
  return ws.length ? { ws, lo: ws[0].forTs, hi: Math.max(ws.at(-1).durableUpper, o.writeTs) } : null;
}

/** The windows' bars between the times at their ends ("263 ms ▭▭▭ 4037 ms"): their scale. */
function windowsScaled(o, svg, t0) {
  const s = windowsSpan(o);
  const end = (v, side) => `<span class="mono muted" title="the ${side} end of the drawing: a bar's own range shows on hover">${esc(fmtMs(v, t0))}</span>`;
  return s ? `<span class="windows-scale" style="display:block;white-space:nowrap">${end(s.lo, "left")} ${svg} ${end(s.hi, "right")}</span>` : svg;
}

function windowsSvg(o) {
  const span = windowsSpan(o);
  if (!span) return "";
  const { ws, lo, hi } = span;
  const w = 250;
  const x = (v) => ((v - lo) / (hi - lo || 1)) * w;
  const bars = ws
    .map((win, i) => `<rect x="${x(win.forTs).toFixed(1)}" y="${i % 2 ? 7 : 1}" width="${Math.max(1, x(win.durableUpper) - x(win.forTs)).toFixed(1)}" height="6" class="window"><title>window [${win.forTs}, ${win.durableUpper})</title></rect>`)
    .join("");
  return `<svg viewBox="0 0 ${w + 4} 14" width="${w + 4}" height="14" class="windows" style="display:inline-block;vertical-align:middle">${bars}<line x1="${x(o.writeTs).toFixed(1)}" x2="${x(o.writeTs).toFixed(1)}" y1="0" y2="14" class="write-ts"/></svg>`;
}
