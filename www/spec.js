// Pure geometry and formatting ("spec" functions, as in RaftScope): each takes plain snapshot
// data and returns numbers, strings or attribute objects. Nothing here touches the DOM, so the
// layout can be tested and tweaked on its own.

/**
 * One colour per actor, by the actor's colour index (stable for its life, across restarts). Each
 * carries white chip text at WCAG AA (at least 4.5:1; checked by tests/e2e/a11y.test.mjs).
 */
export const PALETTE = [
  "#2f6fd0", "#bf4a2b", "#1a8152", "#8e44c4", "#966700", "#0c7d8a",
  "#c43b86", "#577919", "#6d5bd0", "#a85c37", "#277c7c", "#9a3b3b",
];

export function actorColour(colourIndex) {
  return PALETTE[((colourIndex % PALETTE.length) + PALETTE.length) % PALETTE.length];
}

/** One mark per outcome, the same on every panel. */
export const OUTCOMES = {
  committed: { mark: "●", label: "committed" },
  mismatch: { mark: "✕", label: "lost the race (UpperMismatch / seqno mismatch)" },
  indeterminate: { mark: "?", label: "indeterminate (may or may not have happened)" },
  retrying: { mark: "↻", label: "failed, retrying" },
  error: { mark: "■", label: "error (stops the actor)" },
  info: { mark: "·", label: "information" },
};

export function outcomeMark(outcome) {
  return (OUTCOMES[outcome] ?? OUTCOMES.info).mark;
}

/** The colour of an actor id in a snapshot (grey for handles this page does not know). */
export function colourOf(snapshot, actorId) {
  const a = snapshot.actors.find((x) => x.id === actorId);
  return a ? actorColour(a.colour) : "#6b7480";
}

/** Milliseconds as a short time: relative to t0 (the run's start on this page). */
export function fmtMs(ms, t0 = 0) {
  if (ms === null || ms === undefined) return "∅";
  const d = ms - t0;
  if (Math.abs(d) < 10_000) return `${d} ms`;
  return `${(d / 1000).toFixed(1)} s`;
}

/**
 * One format for the times of one line or list: seconds (as fmtMs) if every one of `values` is
 * 10 s or later, else all in ms ("the last at 10012 ms … at 9553 ms", never "10.0 s … 9553 ms").
 * Null (the empty frontier) is ∅ as in fmtMs.
 */
export function fmtMsAs(values, t0 = 0) {
  const secs = values.every((v) => v === null || v === undefined || Math.abs(v - t0) >= 10_000);
  return (ms) => (ms === null || ms === undefined ? "∅" : secs ? fmtMs(ms, t0) : `${ms - t0} ms`);
}

/**
 * The labels of one chart axis in one unit (a learner saw "9500 ms" beside "10.0 s"): seconds if
 * the axis reaches 10 s (a tick, or another time drawn on it: `others`, a shard's since and
 * upper), as fmtMs says such times elsewhere on the page, else all in ms. In seconds a tick has
 * the decimals its step needs ("9.5 s", "10.05 s"; "2 s" for whole seconds), and `at` labels the
 * other times with one at least ("upper 11.3 s", "since 9.5 s").
 */
export function axisTimes(tickValues, t0 = 0, others = []) {
  const all = [...tickValues, ...others].filter((v) => v !== null && v !== undefined).map((v) => Math.abs(v - t0));
  const ms = (v) => (v === null || v === undefined ? "∅" : `${v - t0} ms`);
  if (!(all.length && Math.max(...all) >= 10_000)) return { tick: ms, at: ms };
  let step = Infinity;
  for (let i = 1; i < tickValues.length; i++) step = Math.min(step, Math.abs(tickValues[i] - tickValues[i - 1]));
  const decimals = Number.isFinite(step) && step > 0 ? Math.min(3, Math.max(0, Math.ceil(-Math.log10(step / 1000) - 1e-9))) : 1;
  const secs = (d) => (v) => (v === null || v === undefined ? "∅" : `${((v - t0) / 1000).toFixed(d)} s`);
  return { tick: secs(decimals), at: secs(Math.max(1, decimals)) };
}

/** A frontier (null: the empty frontier, "finished"). */
export function fmtFrontier(f, t0 = 0) {
  return f === null || f === undefined ? "[] finished" : fmtMs(f, t0);
}

export function fmtBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

/** A linear scale from [d0, d1] to [r0, r1], clamped. */
export function linear(d0, d1, r0, r1) {
  const span = d1 - d0 || 1;
  const f = (v) => r0 + ((Math.min(Math.max(v, d0), d1) - d0) / span) * (r1 - r0);
  f.domain = [d0, d1];
  return f;
}

/**
 * The time window the shard panel shows: up to the upper, and back far enough to show the since
 * and a few batches, but at most `maxSpan` ms (older history is summarised at the left edge).
 */
export function shardDomain(shard, maxSpan = 20_000) {
  const upper = shard.upper ?? shard.batches.at(-1)?.upper ?? 0;
  const since = shard.since ?? upper;
  const wanted = Math.max(upper - since, 2_000) * 1.25;
  const span = Math.min(Math.max(wanted, 2_000), maxSpan);
  const lo = Math.max(0, upper - span);
  return [lo, upper + span * 0.04];
}

/**
 * Batch rectangles on the time axis. Adjacent batches alternate between two lanes so their
 * boundaries show; the height grows with the log of the update count.
 */
export function batchRects(shard, x, top, laneHeight) {
  return shard.batches.map((b, i) => {
    const lower = b.lower ?? 0;
    const upper = b.upper ?? x.domain[1];
    const x0 = x(lower);
    const x1 = Math.max(x(upper), x0 + 1.5);
    const h = Math.min(laneHeight, 6 + Math.log2(1 + b.len) * 3);
    const lane = i % 2;
    return {
      x: x0,
      y: top + lane * (laneHeight + 4) + (laneHeight - h),
      w: x1 - x0,
      h,
      clippedLeft: lower < x.domain[0],
      batch: b,
      inline: b.parts.every((p) => p.key === null),
    };
  });
}

/** A label's box around its baseline (10 px text): above it the ascent, below it the descent. */
const LABEL_ASCENT = 9;
const LABEL_DESCENT = 3;

const boxesMeet = (a, b) => a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;

/** A batch's effect as its label says it: "+3 −1", or its length before the observer read it. */
export function batchEffect(b) {
  if (b.adds === null || b.adds === undefined) return String(b.len);
  return [b.adds ? `+${b.adds}` : "", b.retractions ? `−${b.retractions}` : ""].filter(Boolean).join(" ");
}

/**
 * The batch labels of the shard drawing, laid out so that no two of their boxes intersect, nor
 * any of `reserved` (other text in the drawing), whatever the number of batches: every label is
 * placed only where it meets nothing placed before it, and one that fits nowhere is left out
 * (its batch keeps its outline and its tooltip).
 *
 * A batch wide enough for its label gets it inside. A narrow batch that retracts gets one on its
 * side ("−1 (a retraction) ▸", to its left): a retraction is what a step talks about, so these
 * are placed first. Narrow retracting batches of a lane whose labels would meet are labelled
 * together, once ("3 batches: +2 −5 (retractions) ▸", left of the first), then that label tries
 * the left, a short form, then the right of the last batch.
 *
 * `rects`: [`batchRects`]; `textWidth(text, bold)`: the text's width in drawing units;
 * `minX`/`maxX`: where labels may go. Returns `[{ x, y, text, retract, box }]` (x, y: the start
 * of the baseline; box: `{ x0, x1, y0, y1 }`).
 */
export function batchLabels(rects, { textWidth = (s) => 7 * [...s].length, minX = 0, maxX = Infinity, reserved = [] } = {}) {
  const placed = [...reserved];
  const out = [];
  const boxAt = (x, y, w) => ({ x0: x - 1, x1: x + w + 1, y0: y - LABEL_ASCENT, y1: y + LABEL_DESCENT });
  const tryPlace = (x, y, text, retract) => {
    const box = boxAt(x, y, textWidth(text, retract));
    if (box.x0 < minX || box.x1 > maxX || placed.some((p) => boxesMeet(p, box))) return false;
    placed.push(box);
    out.push({ x, y, text, retract, box });
    return true;
  };
  const baseline = (r) => r.y + r.h - 4;
  const inside = [];
  const narrow = [];
  for (const r of rects) {
    const b = r.batch;
    if (!(b.len > 0)) continue;
    const label = batchEffect(b);
    if (r.w > textWidth(label, (b.retractions ?? 0) > 0) + 6) inside.push({ r, label });
    else if ((b.retractions ?? 0) > 0) narrow.push(r);
  }
  // Narrow retracting batches, right to left per lane, gathered where their labels would meet.
  const clusters = [];
  const last = new Map();
  const sideText = (members) => {
    if (members.length === 1) {
      const b = members[0].batch;
      return `${batchEffect(b)} (${b.retractions === 1 ? "a retraction" : "retractions"}) ▸`;
    }
    const sum = { adds: 0, retractions: 0, len: 0 };
    for (const m of members) {
      sum.adds += m.batch.adds ?? 0;
      sum.retractions += m.batch.retractions ?? 0;
    }
    return `${members.length} batches: ${batchEffect(sum)} (retractions) ▸`;
  };
  for (const r of [...narrow].sort((a, b) => b.x - a.x)) {
    const y = baseline(r);
    const own = boxAt(r.x - 3 - textWidth(sideText([r]), true), y, textWidth(sideText([r]), true));
    const prev = last.get(y);
    if (prev && boxesMeet(own, prev.box)) {
      prev.members.unshift(r);
      const w = textWidth(sideText(prev.members), true);
      prev.box = boxAt(r.x - 3 - w, y, w);
    } else {
      const c = { y, members: [r], box: own };
      clusters.push(c);
      last.set(y, c);
    }
  }
  for (const c of clusters) {
    const first = c.members[0];
    const end = c.members.at(-1);
    const long = sideText(c.members);
    const short = `${batchEffect({ adds: c.members.reduce((n, m) => n + (m.batch.adds ?? 0), 0), retractions: c.members.reduce((n, m) => n + (m.batch.retractions ?? 0), 0) })} ▸`;
    const right = (t) => `◂ ${t.replace(/ ▸$/, "")}`;
    const tries = [
      [first.x - 3 - textWidth(long, true), long],
      [first.x - 3 - textWidth(short, true), short],
      [end.x + end.w + 3, right(long)],
      [end.x + end.w + 3, right(short)],
    ];
    tries.some(([x, text]) => tryPlace(x, c.y, text, true));
  }
  for (const { r, label } of inside) tryPlace(r.x + 3, baseline(r), label, (r.batch.retractions ?? 0) > 0);
  return out;
}

/**
 * Evenly spaced ticks over a domain, at "nice" steps (1, 2 or 5 times a power of ten), each a
 * multiple of the step with no float error (0.6, never 0.6000000000000001); `minStep` keeps
 * them whole for a clock in ms.
 */
export function ticks(d0, d1, count = 6, minStep = 0) {
  const span = d1 - d0;
  if (!(span > 0)) return [d0];
  const raw = span / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = Math.max(minStep, [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? raw);
  const digits = Math.max(0, -Math.floor(Math.log10(step)));
  const out = [];
  for (let k = Math.ceil(d0 / step - 1e-9); k * step <= d1 + step * 1e-9; k++) out.push(Number((k * step).toFixed(digits)));
  return out;
}

/**
 * The seqno strip: the last `count` seqnos up to the head, each a cell; rollups and the GC
 * point are marked. Returns cells `{ seqno, x, rollup, truncated }`.
 */
export function seqnoCells(shard, x0, width, count = 40) {
  const head = shard.seqno;
  const first = Math.max(1, head - count + 1);
  const n = head - first + 1;
  const w = n > 0 ? width / count : 0;
  const rollups = new Set(shard.rollups.map((r) => r.seqno));
  const cells = [];
  for (let s = first; s <= head; s++) {
    cells.push({
      seqno: s,
      x: x0 + (s - first) * w,
      w: Math.max(w - 1, 1),
      rollup: rollups.has(s),
      truncated: shard.earliestSeqno !== null && shard.earliestSeqno !== undefined && s < shard.earliestSeqno,
    });
  }
  return cells;
}

/**
 * The lag series of the frontiers panel, from the snapshot history: for every upper and since,
 * `now - frontier` at each snapshot. Series are keyed and coloured by what they follow.
 */
export function lagSeries(history) {
  const series = new Map();
  const add = (key, label, colour, dashed, t, f) => {
    if (f === null || f === undefined) return;
    let s = series.get(key);
    if (!s) {
      s = { key, label, colour, dashed, points: [] };
      series.set(key, s);
    }
    s.points.push([t, Math.max(0, t - f)]);
  };
  for (const snap of history) {
    const t = snap.nowMs;
    for (const sh of snap.shards) {
      // The upsert shard's times are source times, not the clock: its panel shows them.
      if (sh.name === snap.upsert?.shard) continue;
      add(`shard:${sh.name}:upper`, `${sh.name} upper`, "#1d232b", false, t, sh.upper);
      add(`shard:${sh.name}:since`, `${sh.name} since`, "#1d232b", true, t, sh.since);
    }
    for (const a of snap.actors) {
      const c = actorColour(a.colour);
      const d = a.detail;
      if (d.kind === "writer") add(`${a.id}:upper`, `${a.id} cached upper`, c, false, t, d.cachedUpper);
      if (d.kind === "task") add(`${a.id}:upper`, `${a.id} upper`, c, false, t, d.writer.cachedUpper);
      if (d.kind === "reader") add(`${a.id}:since`, `${a.id} since`, c, true, t, d.since);
      if (d.kind === "oracle") add(`${a.id}:read`, `${a.id} read_ts`, c, false, t, d.readTs);
    }
  }
  return [...series.values()];
}

/** An SVG path through points under scales x and y. */
export function pathOf(points, x, y) {
  let d = "";
  for (const [i, [px, py]] of points.entries()) d += `${i ? "L" : "M"}${x(px).toFixed(1)},${y(py).toFixed(1)}`;
  return d;
}

/** Where a value sits on a small per-writer axis centred on the shard's upper. */
export function lagBar(value, shardUpper, width, spanMs = 2_000) {
  if (value === null || value === undefined || shardUpper === null || shardUpper === undefined) return null;
  const behind = shardUpper - value;
  const frac = Math.min(Math.max(behind / spanMs, 0), 1);
  return { behind, x: width - frac * width };
}
