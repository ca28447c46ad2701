// Sticky panel titles and the lines under them. During a tour each panel's title sticks at the
// top of the window while the panel runs on under it (style.css), so a scroll that stops
// anywhere can leave a line of text, a button or a table row half under a title: the fourth
// learner walk saw "last attempt ended." as all of the Writers panel's description, a Crash button
// cut in half, the first line of the Upsert pipeline panel half covered. This module finds, for
// a scroll the controller wants (tours/controller.js), the nearest one at which no such thing
// is cut: a panel's description shows whole or not at all, a line wholly below its panel's
// title or wholly under it; and the description of a panel the learner is sent to (the step's
// panels, a chip's panel) shows whole (walk 5: the Writers panel's wholly under its title at
// write-task 6, the Shard panel's at upper-since 5). Only geometry: which scroll is kept is the
// controller's call.

/** A row of a table up to this tall is one line (a taller one, a write task's, is cut between its lines). */
const ROW_PX = 40;
/** Overlaps up to this much do not count as a cut (sub-pixel rounding, a border). */
const SLACK_PX = 1.5;

/**
 * The things under `panel`'s title that must not be cut, as `{ top, bottom }` in the window's
 * coordinates now: each line of its text (in the panel's own scrolling boxes, the lines inside
 * their box), its buttons and fields, its table rows up to ROW_PX tall, and its description
 * (`.caption`) whole; `whole` (the panel is one the learner is sent to): its description must
 * show, not go under the title either.
 */
function atomsOf(panel, h2, whole) {
  const out = [];
  const clip = (el) => {
    const box = el.closest(".log");
    return box && panel.contains(box) ? box.getBoundingClientRect() : null;
  };
  const push = (r, c, shown = false) => {
    if (r.height <= 0 || r.width <= 0) return;
    if (c && (r.bottom <= c.top || r.top >= c.bottom)) return;
    out.push({ top: c ? Math.max(r.top, c.top) : r.top, bottom: c ? Math.min(r.bottom, c.bottom) : r.bottom, shown });
  };
  const walker = panel.ownerDocument.createTreeWalker(panel, NodeFilter.SHOW_TEXT);
  const range = panel.ownerDocument.createRange();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!node.data.trim() || h2.contains(node)) continue;
    range.selectNodeContents(node);
    const c = clip(node.parentElement);
    for (const r of range.getClientRects()) push(r, c);
  }
  for (const el of panel.querySelectorAll("button, input, select, tr, .caption")) {
    if (h2.contains(el)) continue;
    const r = el.getBoundingClientRect();
    if (el.tagName === "TR" && r.height > ROW_PX) continue;
    push(r, clip(el), whole && el.matches(".caption"));
  }
  return out;
}

/**
 * Each panel (of `panels`) that a scroll by up to `lo`..`hi` px can slide under its title: where
 * it and its title are now and what must not be cut (`whole`: the panels whose description must
 * show).
 */
function stickyPanels(panels, lo, hi, whole) {
  const vh = window.innerHeight;
  const out = [];
  for (const panel of panels) {
    const h2 = panel.querySelector("h2");
    if (!h2 || !panel.getClientRects().length || getComputedStyle(h2).position !== "sticky") continue;
    const r = panel.getBoundingClientRect();
    const s = getComputedStyle(panel);
    // The title's place in the panel when it does not stick: the panel's border and padding.
    const off = panel.clientTop + parseFloat(s.paddingTop);
    const endPad = parseFloat(s.paddingBottom) + (panel.offsetHeight - panel.clientHeight - panel.clientTop);
    const h = h2.getBoundingClientRect().height;
    // Stuck for some scroll in range, and on screen then.
    if (r.top - hi + off >= 0 || r.bottom - lo <= 0 || r.top - lo >= vh) continue;
    out.push({ top: r.top, bottom: r.bottom, off, endPad, h, atoms: atomsOf(panel, h2, whole.includes(panel)) });
  }
  return out;
}

/** Where `p`'s title's bottom is after scrolling by `d`, or null if it does not stick then. */
function titleBottom(p, d) {
  if (p.top - d + p.off >= 0) return null;
  const top = Math.min(0, p.bottom - d - p.endPad - p.h);
  return top + p.h;
}

/**
 * The atoms of `ps` that a scroll by `d` leaves half under their panel's title (a description
 * that must show: under it at all).
 */
function cutAt(ps, d) {
  const out = [];
  for (const p of ps) {
    const line = titleBottom(p, d);
    if (line === null || line <= 0) continue;
    for (const a of p.atoms) {
      if (a.top - d < line - SLACK_PX && (a.shown || a.bottom - d > line + SLACK_PX)) out.push(a);
    }
  }
  return out;
}

/**
 * The scrolls (by d px from where the window is, `lo` <= d <= `hi`) at which no line, button,
 * short row or description of `panels` is half under its panel's sticky title, and the
 * description of each panel of `whole` (of `panels`) is not under it at all, nearest to `want`
 * first (at most `max` of them). Empty if none; `[want]` if it cuts nothing.
 */
export function uncutScrolls(panels, want, lo, hi, whole = [], max = 8) {
  const ps = stickyPanels(panels, Math.min(lo, want), Math.max(hi, want), whole);
  if (!cutAt(ps, want).length) return [want];
  const cands = new Set();
  for (const p of ps) {
    // The scroll at which the title stops sticking; and each atom just below or wholly under it.
    cands.add(Math.floor(p.top + p.off));
    for (const a of p.atoms) {
      cands.add(Math.floor(a.top - p.h));
      cands.add(Math.ceil(a.bottom - p.h));
    }
  }
  const out = [];
  for (const d of [...cands].filter((x) => x >= lo && x <= hi).sort((a, b) => Math.abs(a - want) - Math.abs(b - want) || a - b)) {
    if (cutAt(ps, d).length) continue;
    out.push(d);
    if (out.length >= max) break;
  }
  return out;
}
