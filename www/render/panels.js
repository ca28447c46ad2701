// The Consensus log, event log, legend, verify and notices panels (Writers and Oracle: writers.js).

import { OUTCOMES, actorColour, colourOf, fmtFrontier, fmtMs } from "../spec.js";
import { chip, esc, mark, setHtml } from "./dom.js";

export function renderConsensus(el, snap, t0) {
  const rows = snap.consensus
    .slice(-16)
    .reverse()
    .map((c) => {
      const procActor = snap.processes.find((p) => p.id === c.process)?.actors?.[0];
      const colour = procActor ? colourOf(snap, procActor) : "#8a939e";
      return `<tr><td class="mono">${esc(fmtMs(c.atMs, t0))}</td><td>${chip(c.process, colour)}</td>` +
        `<td class="mono key" title="${esc(c.key)}">${esc(c.key)}</td>` +
        `<td class="mono num">${c.expected ?? "none"} → ${c.newSeqno}</td><td class="mono num">${c.bytes}</td>` +
        `<td>${mark(c.outcome, OUTCOMES)}${c.error ? ` <span class="err small">${esc(c.error)}</span>` : ""}</td></tr>`;
    })
    .join("");
  const counts = {};
  for (const c of snap.consensus) counts[c.outcome] = (counts[c.outcome] ?? 0) + 1;
  const summary = Object.entries(counts)
    .map(([o, n]) => `${mark(o, OUTCOMES)} ${n}`)
    .join(" &nbsp; ");
  setHtml(
    el,
    `<p class="summary">last ${snap.consensus.length}: ${summary || "none yet"}</p>` +
      `<table class="grid"><thead><tr><th>at</th><th>process</th><th>key</th><th title="the seqno it expected at the head → the one it wrote">seqno</th><th>bytes</th><th>won?</th></tr></thead><tbody>${rows || `<tr><td colspan="6" class="empty">No compare_and_set yet.</td></tr>`}</tbody></table>`,
  );
}

/** The event log shows the newest rows, newest first. */
const LOG_ROWS = 60;

function logRow(e, snap, t0) {
  const who = e.actor ? chip(e.actor, colourOf(snap, e.actor)) : e.process ? `<span class="muted">${esc(e.process)}</span>` : "";
  return `<li data-seq="${e.seq}"><span class="seq mono">${e.seq}</span><span class="mono t">${esc(fmtMs(e.atMs, t0))}</span>${mark(e.outcome, OUTCOMES)}${who}<span class="comp">${esc(e.component)}</span> <span class="detail">${esc(e.detail)}</span></li>`;
}

/**
 * The event log, updated in place: while the log grows, only the new rows are added (at the top)
 * and the oldest taken off (at the bottom); anything else (the past view, a new run) redraws it.
 */
export function renderLog(el, events, snap, t0) {
  const want = events.slice(-LOG_ROWS);
  const ol = el.firstElementChild;
  if (!want.length || !ol || ol.tagName !== "OL" || !ol.firstElementChild?.dataset.seq) {
    const rows = want.reverse().map((e) => logRow(e, snap, t0)).join("");
    setHtml(el, `<ol class="events" data-testid="events">${rows || `<li class="empty">nothing yet</li>`}</ol>`);
    return;
  }
  const shownNewest = Number(ol.firstElementChild.dataset.seq);
  const at = want.findIndex((e) => e.seq === shownNewest);
  if (at < 0 && shownNewest >= want[0].seq) {
    // What is shown is not a prefix of what is wanted: draw it all again.
    el.__html = null;
    ol.innerHTML = want.reverse().map((e) => logRow(e, snap, t0)).join("");
    return;
  }
  const fresh = want.slice(at + 1);
  if (!fresh.length) return;
  el.__html = null; // setHtml's cache no longer describes the markup
  ol.insertAdjacentHTML("afterbegin", fresh.reverse().map((e) => logRow(e, snap, t0)).join(""));
  while (ol.children.length > LOG_ROWS) ol.lastElementChild.remove();
}

export function renderLegend(el, snap) {
  const marks = Object.entries(OUTCOMES)
    .map(([k, v]) => `<span class="legend-item">${mark(k, OUTCOMES)} ${esc(v.label)}</span>`)
    .join("");
  const actors = snap.actors.map((a) => chip(a.id, actorColour(a.colour))).join(" ");
  setHtml(
    el,
    `<div class="legend-row"><b>Marks</b> ${marks}</div><div class="legend-row"><b>Actors</b> ${actors || "none"} <span class="muted">one colour each, on every panel</span>` +
      ` &nbsp; <b>Lines</b> <span class="legend-item"><svg width="26" height="8"><line x1="0" x2="26" y1="4" y2="4" class="upper"/></svg> upper</span>` +
      `<span class="legend-item"><svg width="26" height="8"><line x1="0" x2="26" y1="4" y2="4" class="since"/></svg> since</span></div>`,
  );
}

export function renderVerify(el, snap, t0) {
  const v = snap.verify;
  if (!v) {
    setHtml(el, `<p class="verify muted">Check acked writes (v) reads the shard and looks for every write a writer was told had committed.</p>`);
    return;
  }
  if (v.error) {
    setHtml(el, `<p class="verify err">Check at ${esc(fmtMs(v.atMs, t0))}: ${esc(v.error)}</p>`);
    return;
  }
  const per = v.writers.map((w) => `${esc(w.actor)} ${w.found}/${w.acked}`).join(", ");
  const verdict = v.lost === 0
    ? `<b class="ok">no acknowledged write lost</b>`
    : `<b class="err">${v.lost} acknowledged writes missing</b> (e.g. ${esc(v.lostExamples.join(", "))})`;
  // Each write's values are unique: one held twice is a write that landed twice.
  const twice = v.duplicated > 0
    ? `; <b class="err">${v.duplicated} acknowledged writes held twice</b> (e.g. ${esc(v.duplicatedExamples.join(", "))})`
    : "";
  const appendNote = v.uncheckedAppendWriters.length
    ? ` · not checked: ${esc(v.uncheckedAppendWriters.join(", "))} (append trims what a peer already wrote, by design)`
    : "";
  setHtml(
    el,
    `<p class="verify" data-lost="${v.lost}" data-duplicated="${v.duplicated}" data-acked="${v.acked}" data-foreign="${v.foreignRows}">Check at ${esc(fmtMs(v.atMs, t0))}: ${verdict}${twice}: ${v.acked} acknowledged updates checked against ${v.rows} rows of ${esc(v.shard)} at ${esc(fmtFrontier(v.asOf, t0))}` +
      ` (${per || "no writers"}); ${v.foreignRows} rows written by other tabs${appendNote}.</p>`,
  );
}

export function renderNotices(el, snap, t0) {
  const items = snap.notices
    .slice(-3)
    .reverse()
    .map((n) => `<li class="${n.error ? "err" : ""}"><span class="mono">${esc(fmtMs(n.atMs, t0))}</span> ${esc(n.text)}</li>`)
    .join("");
  setHtml(el, items);
}
