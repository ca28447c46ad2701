// The writers, Consensus log, oracle, upsert, event log and legend panels.

import { OUTCOMES, actorColour, colourOf, fmtFrontier, fmtMs, lagBar } from "../spec.js";
import { chip, esc, mark, setHtml } from "./dom.js";

const LAG_W = 70;

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

export function renderWriters(el, snap, t0) {
  const rows = [];
  for (const a of snap.actors) {
    if (!(a.spec.kind === "writer" || a.spec.kind === "task")) continue;
    const w = writerSide(a);
    const shard = snap.shards.find((s) => s.name === a.spec.shard);
    const su = shard?.upper ?? null;
    const c = actorColour(a.colour);
    const last = w?.last;
    let status;
    if (a.state !== "running") {
      status = `<span class="state s-${a.state}">${esc(a.state)}</span>${a.error ? ` <span class="err">${esc(a.error)}</span>` : ""}`;
    } else if (a.detail.kind === "task" && a.detail.readOnly) {
      status = `${mark("error", OUTCOMES)} read-only: ${a.detail.refused} commands kept in desired, not written`;
    } else if (w?.inFlight) {
      status = w.inFlight.retrying
        ? `${mark("retrying", OUTCOMES)} retrying [${esc(fmtFrontier(w.inFlight.lower, t0))}, ${esc(fmtFrontier(w.inFlight.upper, t0))})`
        : `<span class="busy">writing</span> ${w.inFlight.updates} at [${esc(fmtFrontier(w.inFlight.lower, t0))}, ${esc(fmtFrontier(w.inFlight.upper, t0))})`;
    } else if (last) {
      status = `${mark(last.outcome, OUTCOMES)} ${esc(last.detail)}`;
    } else {
      status = `<span class="muted">waiting</span>`;
    }
    const kind = a.spec.kind === "task" ? `task${a.detail.readOnly ? " (read-only)" : ""}` : a.spec.mode === "append" ? "append" : "c&a";
    rows.push(
      `<tbody data-actor="${esc(a.id)}"><tr><td rowspan="2">${chip(a.id, c)}<span class="how">${esc(kind)}</span></td>` +
        `<td class="mono">${w && (w.last || w.committed) ? esc(fmtFrontier(w.cachedUpper, t0)) : "–"}</td>${lagCell(w?.cachedUpper, w?.sharedUpper, su)}` +
        `<td class="mono num" data-col="pending">${w ? w.pending : ""}</td>` +
        `<td class="mono num">${w ? `${w.committed}/${w.mismatches}/${w.indeterminate}` : ""}</td></tr>` +
        `<tr class="sub"><td colspan="4" class="last" data-col="last" title="${esc(last?.detail ?? "")}">${status}</td></tr></tbody>`,
    );
  }
  const body = rows.length
    ? rows.join("")
    : `<tbody><tr><td colspan="5" class="empty">No writers. Add one with + Writer (w).</td></tr></tbody>`;
  setHtml(
    el,
    `<table class="grid writers"><thead><tr><th>actor</th><th>cached upper</th><th title="dot: the handle's cached upper; ring: the process's shared upper; bar end: the shard's upper">vs shard</th><th title="to_write">pending</th><th title="committed / lost races / indeterminate">ok/✕/?</th></tr></thead>${body}</table>`,
  );
}

export function renderConsensus(el, snap, t0) {
  const rows = snap.consensus
    .slice(-16)
    .reverse()
    .map((c) => {
      const procActor = snap.processes.find((p) => p.id === c.process)?.actors?.[0];
      const colour = procActor ? colourOf(snap, procActor) : "#6b7480";
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
      return `<tr data-actor="${esc(a.id)}"><td>${chip(a.id, actorColour(a.colour))}</td><td class="mono num">${o?.epoch ?? ""}</td>` +
        `<td class="mono num">${o ? esc(fmtMs(o.readTs, t0)) : ""}</td><td class="mono num">${o ? esc(fmtMs(o.writeTs, t0)) : ""}</td>` +
        `<td class="mono num">${o ? esc(fmtMs(o.durableUpper, t0)) : ""}</td><td class="mono num">${o?.handedOut ?? ""}</td>` +
        `<td>${windows}${state}</td></tr>`;
    })
    .join("");
  setHtml(
    el,
    `${timelines}<table class="grid"><thead><tr><th>instance</th><th>epoch</th><th>read_ts</th><th>write_ts</th><th title="the durable upper: nothing at or beyond it is handed out">durable</th><th title="write timestamps handed out">ts</th><th title="durable window allocations">windows</th></tr></thead><tbody>${rows}</tbody></table>`,
  );
}

function windowsSvg(o) {
  const ws = o.windows.slice(-8);
  if (!ws.length) return "";
  const lo = ws[0].forTs;
  const hi = Math.max(ws.at(-1).durableUpper, o.writeTs);
  const w = 110;
  const x = (v) => ((v - lo) / (hi - lo || 1)) * w;
  const bars = ws
    .map((win, i) => `<rect x="${x(win.forTs).toFixed(1)}" y="${i % 2 ? 7 : 1}" width="${Math.max(1, x(win.durableUpper) - x(win.forTs)).toFixed(1)}" height="6" class="window"><title>window [${win.forTs}, ${win.durableUpper})</title></rect>`)
    .join("");
  return `<svg viewBox="0 0 ${w + 4} 14" width="${w + 4}" height="14" class="windows">${bars}<line x1="${x(o.writeTs).toFixed(1)}" x2="${x(o.writeTs).toFixed(1)}" y1="0" y2="14" class="write-ts"/></svg>`;
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
  // Each write's values are unique: a value held more than once is a write that landed more than once.
  const twice = v.duplicated > 0
    ? `; <b class="err">${v.duplicated} acknowledged writes held more than once</b> (e.g. ${esc(v.duplicatedExamples.join(", "))})`
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
