// The shard panel: batches on a time axis with since and upper, the seqno strip with rollups,
// the parts and their sizes, and recent merges and GCs.

import { axisTimes, batchLabels, batchRects, fmtBytes, fmtFrontier, fmtMs, fmtMsAs, linear, seqnoCells, shardDomain, ticks } from "../spec.js";
import { count, esc, setHtml, svgEl } from "./dom.js";
import { blobKeyName, handleName, namedIds, namedIdsHtml, shortId } from "./names.js";
import { rowWords } from "./words.js";

const H = 232;
const LEFT = 70;
const RIGHT = 14;
/** The "batches" axis label's box (it shares the first lane's row with the batch labels). */
const AXIS_LABEL_BOX = { x0: 0, x1: 64, y0: 33, y1: 48 };

/** Widths of label texts as the page draws them (10 px monospace; bold for retractions),
 * measured once each on a canvas; 7 px a character where there is no canvas. */
const widths = new Map();
let measure = null;
function textWidth(text, bold) {
  const key = `${bold ? "b" : "r"}${text}`;
  let w = widths.get(key);
  if (w !== undefined) return w;
  if (measure === null) {
    const canvas = globalThis.document?.createElement?.("canvas");
    const ctx = canvas?.getContext?.("2d") ?? false;
    const mono = ctx ? getComputedStyle(document.documentElement).getPropertyValue("--mono").trim() || "monospace" : "";
    measure = ctx ? { ctx, mono } : false;
  }
  if (measure) {
    measure.ctx.font = `${bold ? "700 " : ""}10px ${measure.mono}`;
    // A margin for rounding between the canvas and the SVG text.
    w = measure.ctx.measureText(text).width * 1.04 + 1;
  } else {
    w = 7 * [...text].length;
  }
  if (widths.size > 2000) widths.clear();
  widths.set(key, w);
  return w;
}

export function renderShard(el, snapshot, name, t0, width = 940) {
  const W = Math.max(600, width);
  const shard = snapshot.shards.find((s) => s.name === name) ?? snapshot.shards[0];
  if (!shard) {
    setHtml(el, `<p class="empty">No shard yet.</p>`);
    return;
  }
  const [d0, d1] = shardDomain(shard);
  const x = linear(d0, d1, LEFT, W - RIGHT);
  const parts = [];
  // Axis labels.
  parts.push(svgEl("text", { x: 4, y: 44, class: "axis-label" }, "batches"));
  parts.push(svgEl("text", { x: 4, y: 160, class: "axis-label" }, "seqnos"));
  parts.push(svgEl("text", { x: 4, y: 212, class: "axis-label" }, "parts"));
  // Batches.
  let spansSince = null;
  const rects = batchRects(shard, x, 24, 26);
  for (const r of rects) {
    const b = r.batch;
    const retracts = (b.retractions ?? 0) > 0;
    const signs = b.adds === null || b.adds === undefined ? "" : ` (${b.adds} added, ${b.retractions} retracted)`;
    const where = b.parts.length === 0 ? "" : r.inline ? ", inline in the state" : `, in Blob`;
    const title = `batch [${fmtFrontier(b.lower, t0)}, ${fmtFrontier(b.upper, t0)}) since ${fmtFrontier(b.since, t0)}: ${count(b.len, "update")}${signs} in ${count(b.parts.length, "part")}${where}`;
    if (shard.since !== null && b.lower !== null && b.lower < shard.since && (b.upper === null || b.upper > shard.since)) spansSince ??= b;
    parts.push(
      svgEl("rect", {
        x: r.x.toFixed(1), y: r.y.toFixed(1), width: r.w.toFixed(1), height: r.h.toFixed(1),
        class: `batch${r.inline ? " inline" : ""}${b.len === 0 ? " empty-batch" : ""}${retracts ? " retracts" : ""}`,
      }, `<title>${esc(title)}</title>`),
    );
    // A batch that begins left of the axis (a merge reaching back to 0, say) is drawn from the
    // axis's start: a ◀ at its left end says it goes on.
    if (r.clippedLeft) {
      const mid = r.y + r.h / 2;
      parts.push(svgEl("path", { d: `M${LEFT - 8},${mid.toFixed(1)} L${LEFT - 2},${(mid - 4).toFixed(1)} L${LEFT - 2},${(mid + 4).toFixed(1)} Z`, class: `batch${r.inline ? " inline" : ""}`, "data-testid": "batch-clipped" }, `<title>${esc(`${title}: it begins at ${fmtFrontier(b.lower, t0)}, left of the axis`)}</title>`));
    }
  }
  // The labels: laid out so that none meets another, at any batch count (spec.js).
  for (const l of batchLabels(rects, { textWidth, minX: 0, maxX: W, reserved: [AXIS_LABEL_BOX] })) {
    parts.push(svgEl("text", { x: l.x.toFixed(1), y: l.y.toFixed(1), class: `batch-label${l.retract ? " retract" : ""}` }, esc(l.text)));
  }
  // Time ticks, in one unit with the since and upper drawn on the same axis.
  const tickValues = ticks(d0, d1, 7);
  const axis = axisTimes(tickValues, t0, [shard.since, shard.upper]);
  for (const t of tickValues) {
    parts.push(svgEl("line", { x1: x(t), x2: x(t), y1: 84, y2: 90, class: "tick" }));
    // The last label would run past the panel's edge if centred on its tick.
    parts.push(svgEl("text", { x: x(t), y: 102, class: "tick-label", "text-anchor": x(t) > W - RIGHT - 30 ? "end" : "middle" }, axis.tick(t)));
  }
  parts.push(svgEl("line", { x1: LEFT, x2: W - RIGHT, y1: 84, y2: 84, class: "axis" }));
  // Since and upper.
  const frontierLine = (value, cls, label, dy, note = "") => {
    if (value === null || value === undefined) return;
    const off = value < d0;
    const px = off ? LEFT : x(value);
    parts.push(svgEl("line", { x1: px, x2: px, y1: 14, y2: 92, class: cls }));
    const text = `${off ? "◀ " : ""}${label} ${axis.at(value)}${note}`;
    const anchor = px > W - 150 ? "end" : "start";
    parts.push(svgEl("text", { x: px + (anchor === "end" ? -4 : 4), y: dy, class: `${cls}-label`, "text-anchor": anchor }, text));
  };
  // A merged batch may span the since: legitimate state (see SPAN_NOTE), named, not hidden.
  const spanned = spansSince ? ` · batch [${fmtFrontier(spansSince.lower, t0)}, ${fmtFrontier(spansSince.upper, t0)}) spans it` : "";
  frontierLine(shard.since, "since", "since", 12, spanned);
  frontierLine(shard.upper, "upper", "upper", 122);
  // Seqno strip.
  const cells = seqnoCells(shard, LEFT, W - LEFT - RIGHT, 50);
  for (const c of cells) {
    const cls = c.rollup ? "seq rollup" : c.truncated ? "seq truncated" : "seq";
    parts.push(svgEl("rect", { x: c.x.toFixed(1), y: 140, width: c.w.toFixed(1), height: 22, class: cls }, `<title>seqno ${c.seqno}${c.rollup ? " (rollup)" : ""}${c.truncated ? " (truncated by GC)" : ""}</title>`));
  }
  if (cells.length) {
    const last = cells.at(-1);
    // Two labels where there is room for both; one "seqnos a–b (head b)" where they would overlap.
    if (last.x + last.w - cells[0].x >= 150) {
      parts.push(svgEl("text", { x: last.x + last.w, y: 176, class: "tick-label", "text-anchor": "end" }, `head ${shard.seqno}`));
      parts.push(svgEl("text", { x: cells[0].x, y: 176, class: "tick-label" }, `seqno ${cells[0].seqno}`));
    } else {
      const range = cells[0].seqno === shard.seqno ? `seqno ${shard.seqno}` : `seqnos ${cells[0].seqno}–${shard.seqno}`;
      parts.push(svgEl("text", { x: cells[0].x, y: 176, class: "tick-label" }, `${range} (head ${shard.seqno})`));
    }
    const gc = cells.find((c) => c.seqno === shard.seqnoSince);
    if (gc) parts.push(svgEl("line", { x1: gc.x, x2: gc.x, y1: 134, y2: 166, class: "gc-line" }, `<title>GC requested below seqno ${shard.seqnoSince}</title>`));
  }
  // Parts: one block per part, width by log size.
  let px = LEFT;
  const allParts = shard.batches.flatMap((b) => b.parts);
  for (const p of allParts.slice(-80)) {
    const w = Math.max(2, Math.log2(1 + p.bytes) * 1.6);
    if (px + w > W - RIGHT) break;
    parts.push(svgEl("rect", { x: px.toFixed(1), y: 196, width: w.toFixed(1), height: 22, class: p.key ? "part blob" : "part inline" }, `<title>${esc(p.key ?? "inline part")}: ${fmtBytes(p.bytes)}</title>`));
    px += w + 2;
  }
  parts.push(blobPartsText(allParts, allParts.length ? px + 8 : LEFT, 211, W - RIGHT - px - 8, snapshot));
  const svg = `<svg viewBox="0 0 ${W} ${H}" class="shard-svg" role="img" aria-label="batches of shard ${esc(shard.name)}">${parts.join("")}</svg>`;

  const stats = [
    ["seqno", shard.seqno],
    ["upper", fmtFrontier(shard.upper, t0)],
    ["since", fmtFrontier(shard.since, t0)],
    ["batches", shard.batches.length],
    ["updates", shard.updates],
    ["inline", fmtBytes(shard.inlineBytes), "bytes of batch parts small enough to live inside the state version, in Consensus"],
    ["in Blob", fmtBytes(shard.blobBytes), "bytes of batch parts written to Blob, each under its own key, which the state refers to"],
    ["rollups", shard.rollups.length],
    ["writers", shard.writers.length],
    ["readers", shard.readers.length],
  ];
  const statHtml = stats
    .map(([k, v, title]) => `<span class="stat" data-stat="${k}"${title ? ` title="${esc(title)}"` : ""}><span class="k">${k}</span> <span class="v mono">${esc(v)}</span></span>`)
    .join("");
  const maint = gcRuns(shard.maintenance.slice(-24)).slice(-6).reverse();
  const sw = shard.lastSweep;
  // One time format for the whole list and the sweep line under it (not "10.9 s" over "9846 ms").
  const at = fmtMsAs([...maint.flatMap((m) => (m.kind === "merge" ? [m.atMs, m.lower, m.upper] : [m.atMs])), sw?.atMs], t0);
  const frontier = (f) => (f === null || f === undefined ? fmtFrontier(f, t0) : at(f));
  const maintHtml = maint.length
    ? maint
        .map((m) => {
          const what = m.kind === "merge"
            ? `merged [${frontier(m.lower)}, ${frontier(m.upper)}) → ${count(m.count, "update")}`
            : m.kind === "gc run"
              ? gcRunText(m)
              : m.kind.startsWith("sweep")
                ? `sweep deleted ${swept(m.count, m.kind)}`
                : `GC deleted ${count(m.count, `${m.kind.replace("gc ", "")} blob`)}`;
          return `<li${m.kind === "gc run" ? ` title="${esc(GC_TICKET)}"` : ""}><span class="mono">${esc(at(m.atMs))}</span> ${esc(what)}</li>`;
        })
        .join("")
    : `<li class="empty">no compaction or GC yet</li>`;
  const sweepHtml = sw
    ? `<p class="last-sweep" data-testid="last-sweep"><span class="mono">${esc(at(sw.atMs))}</span> last sweep deleted ${esc(swept(sw.count, sw.kind))}${sw.writers.length ? ` (${esc(namedIds(sw.writers.join(", "), snapshot))})` : ""}</p>`
    : "";
  const holdHtml = sinceHolds(shard, snapshot, t0, spansSince ? SPAN_NOTE : "");
  const error = shard.error ? `<p class="shard-error" data-testid="shard-error">${esc(shard.error)}</p>` : "";
  setHtml(
    el,
    `${error}<div class="stats" data-testid="shard-stats">${statHtml}</div>${holdHtml}${svg}${shardRows(shard, snapshot, t0, W)}<div class="maint"><h3>Compaction &amp; GC</h3><ul data-testid="maintenance">${maintHtml}</ul>${sweepHtml}</div>`,
  );
}

/**
 * The shard's rows at its upper (the engine consolidates them, src/playground/rows.rs): each as
 * `key 3 = hello`, its count when not 1, ● on the rows the newest write changed; as many of the
 * first few as fit one line of the panel (a taller panel pushed the tours' targets off the
 * window), and how many more.
 */
function shardRows(shard, snap, t0, width) {
  const r = shard.rows;
  if (!r) return "";
  // A big shard's rows are listed at most every second (src/playground/observe.rs): they say
  // the upper they are at, which may trail the shard's.
  const head = `rows at upper ${fmtFrontier(r.upper ?? shard.upper, t0)}`;
  const title = `what the shard holds at its upper: every update before the upper, summed per row. ● the newest write changed the row; ×N: the shard holds it N times${shard.name === snap.upsert?.shard ? "" : ". A row is a (key, value) pair: writers append rows, they do not replace a key's value, so a key may show with several values"}`;
  if (!r.total) return `<p class="shard-rows small" data-testid="shard-rows" title="${esc(title)}"><b>${esc(head)}</b>: none, the shard holds no row</p>`;
  // About 7.8 px a character of the mono rows, 6.5 of the rest (.small at the page's size).
  let room = width - head.length * 6.5 - 110;
  const rows = [];
  for (const x of r.shown) {
    // A writer's value is `W1:<its writer id>#34`: said as what it is, W1's 34th update.
    const words = rowWords(x.row).replace(/"(\w+):[wr][0-9a-f]{24}#(\d+)"/g, "$1's update #$2");
    const n = x.count === 1 ? "" : ` ×${String(x.count).replace("-", "−")}`;
    const w = (namedIds(words, snap).length + n.length + (x.newest ? 2 : 0) + 3) * 7.8;
    if (rows.length && w > room) break;
    room -= w;
    rows.push(`<span class="shard-row${x.newest ? " newest" : ""}">${x.newest ? "● " : ""}${namedIdsHtml(words, snap)}${n ? `<span class="muted">${esc(n)}</span>` : ""}</span>`);
  }
  const more = r.total > rows.length ? ` · and ${r.total - rows.length} more` : "";
  return `<p class="shard-rows small" data-testid="shard-rows" title="${esc(title)}"><b>${esc(head)}</b>: ${rows.join(" · ")}${more}</p>`;
}

/** What a GC run's ticket is (it deleted one each run: a line of its own read as a bug). */
const GC_TICKET = "A GC run first writes a ticket to Blob, the list of what it deletes, so that a run that stops midway is finished by the next; it deletes the ticket last.";

/**
 * The maintenance entries with each GC run's (its truncate, then its deletes of parts, rollups
 * and its ticket) folded into one `gc run` entry: `{ kind: "gc run", atMs, seqno, versions, deleted: Map }`.
 */
function gcRuns(list) {
  const out = [];
  let run = null;
  for (const m of list) {
    if (m.kind === "truncate") {
      run = { kind: "gc run", atMs: m.atMs, seqno: m.seqno, versions: m.count, deleted: new Map() };
      out.push(run);
    } else if (m.kind.startsWith("gc ") && run) {
      // persist names its ticket "gc ticket" (src/persist/gc/collect.rs): its kind is "gc gc ticket".
      const what = m.kind.slice(3).replace(/^gc /, "");
      run.deleted.set(what, (run.deleted.get(what) ?? 0) + m.count);
      if (what === "ticket") run = null;
    } else {
      out.push(m);
    }
  }
  return out;
}

/** A GC run in a line: "GC to seqno 97: 0 old versions removed; deleted 3 part blobs, 1 rollup blob (and its ticket)". */
function gcRunText(r) {
  const blobs = [...r.deleted].filter(([w]) => w !== "ticket").map(([w, n]) => count(n, `${w} blob`));
  const ticket = r.deleted.has("ticket") ? " (and its ticket, the run's list of what it deletes)" : "";
  return `GC to seqno ${r.seqno}: ${count(r.versions, "old version")} removed${blobs.length ? `; deleted ${blobs.join(", ")}${ticket}` : ticket}`;
}

/** What a sweep deleted (its kind names them in the plural: "sweep: stale merge outputs"). */
const SWEPT_ONE = {
  "parts of expired writers": "part of an expired writer",
  "stale merge outputs": "stale merge output",
  "unlisted rollups": "unlisted rollup",
};
export function swept(n, kind) {
  const what = kind.replace("sweep: ", "");
  return n === 1 ? `1 ${SWEPT_ONE[what] ?? what}` : `${n} ${what}`;
}

/** Who holds the since where it is: each reader whose since is the shard's, with its lease. */
function sinceHolds(shard, snapshot, t0, span = "") {
  const holds = shard.sinceHeldBy ?? [];
  const now = snapshot.nowMs;
  if (!holds.length) {
    const why = shard.readers.length || shard.criticalReaders?.length
      ? "no reader is at it (it moved since the readers were read)"
      : "no reader: nothing holds it";
    return `<p class="since-held small" data-testid="since-held">since ${esc(fmtFrontier(shard.since, t0))}: ${why}${span}</p>`;
  }
  const items = holds.map((h) => {
    // A handle no actor owns: in live mode another tab's; in seed mode one the scenario opened
    // for itself (the upsert checker's reader, a write task's re-sync reader).
    // Named in words, the id on hover (names.js).
    const id = `<span class="hid" title="persist handle id ${esc(shortId(h.handle.id))}">`;
    // An actor restarted since it opened this handle: the holder is its old incarnation's.
    // (An upsert replica's handle id is its sink's writer, w…: its reader, r…, is no old one.)
    const current = snapshot.actors.find((a) => a.id === h.handle.actor)?.handleId;
    const who = !h.handle.actor
      ? `${id}${esc(handleName(h.handle.id, snapshot))}</span>`
      : current && current !== h.handle.id && current[0] === h.handle.id[0]
        ? `${id}${esc(h.handle.actor)}'s old handle</span>, from before its process restarted (no heartbeat since)`
        : `${id}${esc(h.handle.actor)}</span>`;
    if (h.kind === "critical") return `${h.handle.actor ? `critical reader ${who}` : `${who}, a critical one`}, no lease: it holds the since until it moves it`;
    const left = h.handle.expiresMs - now;
    const expiry = left > 0 ? `expires in ${(left / 1000).toFixed(1)} s` : `expired ${(-left / 1000).toFixed(1)} s ago`;
    return `${h.handle.actor ? "reader " : ""}${who}, lease ${(h.handle.leaseMs / 1000).toFixed(0)} s, last heartbeat ${esc(fmtMs(h.handle.heartbeatMs, t0))}, ${expiry} (at ${esc(fmtMs(h.handle.expiresMs, t0))})`;
  });
  const leased = holds.some((h) => h.kind !== "critical");
  const lease = leased
    ? ` <span class="muted">· a <b>lease</b> is a reader's hold on the since, renewed by each heartbeat; a reader that stops (a crash) keeps holding it until the lease expires</span>`
    : "";
  return `<p class="since-held small" data-testid="since-held">since ${esc(fmtFrontier(shard.since, t0))} held by ${items.join("; ")}${lease}${span}</p>`;
}

/** Why a batch may be drawn across the since line. */
const SPAN_NOTE = ` <span data-testid="since-span">· A batch drawn across the since line is no broken rule: compaction merged batches from both sides of it into one, and moved only the times <i>below</i> the since up to the since; every time at or after it is kept as it was.</span>`;

/** The newest Blob parts, with their keys and sizes (what the shard keeps outside Consensus),
 * as a line of the drawing's parts row, right of the part blocks. */
function blobPartsText(all, x, y, room, snap) {
  const blob = all.filter((p) => p.key);
  if (!all.length) return svgEl("text", { x, y, class: "tick-label" }, "no parts: every batch is empty");
  if (!blob.length) return svgEl("text", { x, y, class: "tick-label", "data-testid": "blob-parts" }, "no part in Blob: each is small enough to be inline in the state");
  // About 6.3 px a character: as many of the newest keys as fit.
  const shown = blob.slice(-2).reverse().map((p) => `${blobKeyName(p.key, snap)} ${fmtBytes(p.bytes)}`).slice(0, room > 560 ? 2 : room > 330 ? 1 : 0);
  const all2 = blob.map((p) => `${p.key} ${fmtBytes(p.bytes)}`).join("\n");
  return svgEl("text", { x, y, class: "tick-label blob-parts", "data-testid": "blob-parts" },
    `${esc(`${blob.length} part${blob.length === 1 ? "" : "s"} in Blob${shown.length ? `, newest: ${shown.join(", ")}` : ""}`)}<title>${esc(all2)}</title>`);
}
