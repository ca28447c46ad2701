// The frontiers panel: how far every upper and since lags behind the clock, over the run.

import { axisTimes, lagSeries, linear, pathOf, ticks } from "../spec.js";
import { esc, setHtml, svgEl } from "./dom.js";

const H = 190;
const LEFT = 60;
const RIGHT = 240; // room for the longest label, "— W1 cached upper 1234 ms behind"
const TOP = 10;
const BOTTOM = 24;

/** Moves labels (sorted by y) apart by `gap`, keeping them within [top, bottom] where they fit. */
export function spreadLabels(labels, top, bottom, gap) {
  const out = labels.map((l) => ({ ...l })).sort((a, b) => a.y - b.y);
  for (let i = 0; i < out.length; i++) out[i].y = Math.max(out[i].y, i ? out[i - 1].y + gap : top);
  for (let i = out.length - 1; i >= 0; i--) out[i].y = Math.min(out[i].y, i < out.length - 1 ? out[i + 1].y - gap : bottom);
  for (let i = 0; i < out.length; i++) out[i].y = Math.max(out[i].y, i ? out[i - 1].y + gap : top);
  return out;
}

export function renderFrontiers(el, history, t0, width = 940) {
  const W = Math.max(600, width);
  if (history.length < 2) {
    setHtml(el, `<p class="empty">Run for a moment to see the frontiers move.</p>`);
    return;
  }
  const series = lagSeries(history);
  const tMin = history[0].nowMs;
  const tMax = history.at(-1).nowMs;
  let lagMax = 100;
  for (const s of series) for (const [, l] of s.points) lagMax = Math.max(lagMax, l);
  lagMax = Math.min(lagMax * 1.1, 120_000);
  const x = linear(tMin, Math.max(tMax, tMin + 1), LEFT, W - RIGHT);
  // A square-root scale: small lags stay readable next to one that grows without bound.
  const ySqrt = linear(0, Math.sqrt(lagMax), H - BOTTOM, TOP);
  const y = (v) => ySqrt(Math.sqrt(Math.max(0, v)));
  const parts = [];
  for (const v of [0, ...ticks(0, lagMax, 4).filter((v) => v > 0)].concat(lagMax > 400 ? [100] : [])) {
    parts.push(svgEl("line", { x1: LEFT, x2: W - RIGHT, y1: y(v), y2: y(v), class: "grid-line" }));
    parts.push(svgEl("text", { x: LEFT - 6, y: y(v) + 4, class: "tick-label", "text-anchor": "end" }, `${v} ms`));
  }
  // The clock counts whole ms: no tick between two of them, however short the history.
  const tickValues = ticks(tMin, tMax, 6, 1);
  const axis = axisTimes(tickValues, t0);
  for (const t of tickValues) {
    parts.push(svgEl("text", { x: x(t), y: H - 6, class: "tick-label", "text-anchor": "middle" }, axis.tick(t)));
  }
  const labels = [];
  for (const s of series) {
    // Thin the points to at most ~150 per line (the panel is under 1000 px wide).
    const step = Math.max(1, Math.floor(s.points.length / 150));
    const pts = s.points.filter((_, i) => i % step === 0 || i === s.points.length - 1);
    parts.push(svgEl("path", { d: pathOf(pts, x, y), class: `lag-line${s.dashed ? " dashed" : ""}`, stroke: s.colour }, `<title>${esc(s.label)}</title>`));
    const [, lastLag] = s.points.at(-1);
    labels.push({ y: y(lastLag), text: `${s.label} ${Math.round(lastLag)} ms behind`, colour: s.colour, dashed: s.dashed });
  }
  for (const l of spreadLabels(labels, TOP + 4, H - 18, 11)) {
    parts.push(svgEl("text", { x: W - RIGHT + 6, y: (l.y + 3).toFixed(1), class: "series-label", fill: l.colour }, `${l.dashed ? "┄ " : "— "}${l.text}`));
  }
  // The axes named, and the vertical scale said: it is not linear.
  parts.push(svgEl("text", { x: LEFT + 4, y: TOP + 2, class: "axis-label" }, "↑ lag behind the clock (ms, square-root scale: small lags spread out)"));
  // The time axis's name, at its right end on the ticks' row (the series labels keep above it).
  parts.push(svgEl("text", { x: W - RIGHT + 6, y: H - 6, class: "axis-label" }, "→ the run's clock"));
  setHtml(el, `<svg viewBox="0 0 ${W} ${H}" class="frontiers-svg" role="img" aria-label="frontier lags over time">${parts.join("")}</svg>`);
}
