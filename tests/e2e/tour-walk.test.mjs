// The tour walk: every step of every tour, settled at 1280x800, as a learner sees it. For each
// step it asserts that
//   - the tour card is on screen, all of it (its title, narration, Next button and foot);
//   - the step's first named panel intersects the window (highlights are ordered so the first is
//     where the step's change happens);
//   - every other named panel is in view, or its "Look at" chip brings it into view with the card
//     still on screen (the chip also flashes it);
//   - every actor it names (its actor highlights, and the actor ids its narration mentions) shows
//     on a panel in the window (its row or card, or its id in a named panel's visible text);
//     else its chip brings it there, the card staying
//     on screen (an actor the narration names and the step does not highlight has no chip, so it
//     must be in view at settle);
//   - the step's first actor highlight (its focus) shows wholly: its row or card in the first of
//     the step's panels that has one (below the panel's sticky title);
//   - the step's other panels that are on screen show their figure (an svg image: the Shard
//     panel's batches, the Frontiers lines) from its top, wholly or at least MIN_FIGURE_PX of it;
//   - every "Look at" chip, pressed from where the step settled, keeps the card's Back and Next
//     buttons in the window and shows its target; an actor already wholly in view scrolls nothing;
//   - at settle and after a chip scrolls, no line of text, button, short table row or description
//     of a panel on screen is half under that panel's sticky title, and no named panel's
//     description (after a panel's chip, that panel's) is wholly under it (linesCut);
//   - every value the narration fills in from the snapshot (`{{path}}`) is visible text of a
//     named panel: inside the window and inside every scrolling box around it, at settle (before
//     any chip is pressed: the card quotes it as the learner reads it). A `{{prev:path}}` value (the previous step's)
//     may instead have been visible so at the previous step, where the learner saw it. The clock
//     (`nowMs`) is not a panel's: it shows on the tour card.
// At every step the walk also asserts what tours.test.mjs asserted in a walk of its own (one walk
// now does both): the URL names the step; the card's title, narration (filled in from the
// snapshot, every {{path}} resolving) and links, and its count; every check of the step's
// `expect` (a snapshot check, or a panel's text); no failed-check warning; the highlighted panels
// outlined. It keeps each step's digest: a step with no command, run or reset keeps the previous
// step's digest, every other step changes it. At step 2, Back rebuilds step 1's state and Next
// step 2's again. After the last step, Finish closes the tour and keeps the state, and the last
// step's URL in a fresh context reaches the same digest.
// The first tour is walked with each step's animation, as a learner sees it (the others show each
// step at once, ?animate=0: the same state, tests/tours.rs proves the chunking and pulls change
// nothing); the writers-race tour is walked with the arrow keys instead of the Next button.
// All of it is checked HOLD_FRAMES frames after the step settled (every panel redrawn in its
// turn since), as the learner reads the card: a settled step holds still (the run is paused
// during a tour), so what the card quotes stays shown: the run is paused at settle, and its clock
// and its last event are the same then, after those frames and after the step was walked. The
// Shard panel shows the step's shard (engine.js `shardOf`), and the panels a tour hides are hidden.
// A panel is "in view" when at least min(its height, MIN_VISIBLE_PX) of it is inside the window.
// "Named" panels are the step's `panel-*` highlights and, for a `shard:NAME` highlight, the Shard
// panel (showing that shard). Steps that show all their named panels and actors at once, with no
// click, are counted over all tours: all of them must (AT_ONCE_SHARE).
//
// A step's failures are collected and reported together per tour, so one run lists them all.
//
// Run: node --test tests/e2e/tour-walk.test.mjs     (needs pkg/: bash scripts/build.sh)

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, frames, launch, latest, newPage, noErrors, serveForTests, shot, tourSettled, waitFor } from "./helpers.mjs";
import { checkTour, evalSnapCheck, fillNarration, shardOf, tourSearch, valueAt } from "../../www/tours/engine.js";
import { fmtMs } from "../../www/spec.js";

const TOURS_DIR = join(ROOT, "www", "tours");
const VIEWPORT = { width: 1280, height: 800 };
/** How much of a panel must be inside the window for it to count as in view. */
const MIN_VISIBLE_PX = 200;
/**
 * The share of settled steps that must show all their named panels at once. Issue 16 asked for
 * at least 90%; every step does since the steps that named panels far apart were re-authored (a
 * step with two focuses split in two), so any step that stops doing so fails the walk.
 */
const AT_ONCE_SHARE = 1;
/**
 * How many of the page's frames after a step settles the walk looks at it (a learner reading the
 * card): the panels take turns to redraw, a third of them a frame (www/render/index.js), so
 * every panel has redrawn four times since.
 */
const HOLD_FRAMES = 12;

const tours = JSON.parse(readFileSync(join(TOURS_DIR, "index.json"), "utf8")).tours.map((id) =>
  checkTour(JSON.parse(readFileSync(join(TOURS_DIR, `${id}.json`), "utf8"))),
);

/** The step's named panels, first first: panel-* highlights, and shard:NAME as the Shard panel. */
function namedPanels(highlight) {
  const out = [];
  for (const h of highlight ?? []) {
    const id = h.startsWith("panel-") ? h : h.startsWith("shard:") ? "panel-shard" : null;
    if (id && !out.includes(id)) out.push(id);
  }
  return out;
}

/**
 * What the narration calls each panel (tests/tours.rs checks that a "... panel" it names is one of
 * these, by its title): a step that names one must show it, not leave it below the fold.
 */
const PANEL_NAMES = [
  [/\bShard panel\b/i, "panel-shard"],
  [/\bWriters (panel|table)\b/i, "panel-writers"],
  [/\bProcesses panel\b/i, "panel-processes"],
  [/\bConsensus log\b/i, "panel-consensus"],
  [/\bTimestamp oracle panel\b/i, "panel-oracle"],
  [/\bFrontiers panel\b/i, "panel-frontiers"],
  [/\bUpsert pipeline panel\b/i, "panel-upsert"],
  [/\bEvent log\b/i, "panel-log"],
  [/\bCheck panel\b/i, "panel-check"],
];

/** The panels the step's narration names, in PANEL_NAMES's words. */
function panelsNamed(step) {
  const text = step.narration.join(" ");
  return PANEL_NAMES.filter(([re]) => re.test(text)).map(([, id]) => id);
}

/**
 * The phrases the narration quotes in “…” (filled in from the run, without markup): a quote that
 * is text on a panel (a badge, a log line) must be on screen at settle.
 */
function quotedPhrases(step, snap, prevSnap) {
  const out = [];
  for (const p of step.narration) {
    for (const [, q] of fillNarration(p, snap, prevSnap).matchAll(/“([^”]+)”/g)) {
      out.push(q.replace(/\*\*|`/g, "").replace(/\s+/g, " ").trim());
    }
  }
  return out;
}

/**
 * Where `phrase` is text on the panels: "absent" (the quote is the narration's own words), or
 * whether one of the innermost elements that hold it is inside the window and every scrolling box
 * around it ("shown") or not ("hidden").
 */
function phraseOnScreen(page, phrase) {
  return page.evaluate((want) => {
    const norm = (t) => t.replace(/\s+/g, " ");
    const holders = [...document.querySelectorAll(".panels .panel *")].filter(
      (el) => norm(el.textContent).includes(want) && ![...el.children].some((c) => norm(c.textContent).includes(want)),
    );
    if (!holders.length) return "absent";
    const shown = (el) => {
      let box = { top: 0, bottom: window.innerHeight };
      for (let a = el; a && a !== document.body; a = a.parentElement) {
        const s = getComputedStyle(a);
        if (s.display === "none" || s.visibility === "hidden") return false;
        if (/(auto|scroll|hidden)/.test(s.overflowY)) {
          const r = a.getBoundingClientRect();
          box = { top: Math.max(box.top, r.top), bottom: Math.min(box.bottom, r.bottom) };
        }
      }
      const r = el.getBoundingClientRect();
      return r.height > 0 && r.top >= box.top - 1 && r.bottom <= box.bottom + 1;
    };
    return holders.some(shown) ? "shown" : "hidden";
  }, phrase);
}

/** A panel at most this tall must be wholly in the window when the narration names it. */
const SMALL_PANEL_PX = 400;

/**
 * How the window shows panel `id`: whether its title (h2) is inside the window, and whether the
 * panel is shown as the narration needs it: a small one (at most SMALL_PANEL_PX) wholly, a taller
 * one with its title and at least MIN_VISIBLE_PX of it (or filling the window).
 */
function panelShown(page, id) {
  return page.evaluate(([pid, small, min]) => {
    const vh = window.innerHeight;
    const panel = document.getElementById(pid);
    const r = panel.getBoundingClientRect();
    const t = panel.querySelector("h2").getBoundingClientRect();
    const title = t.height > 0 && t.top >= 0 && t.bottom <= vh;
    const visible = Math.max(0, Math.min(r.bottom, vh) - Math.max(r.top, 0));
    const shown = r.height <= small ? r.top >= 0 && r.bottom <= vh : (title && visible >= min) || visible >= vh - 16;
    return { title, shown: r.height > 0 && shown };
  }, [id, SMALL_PANEL_PX, MIN_VISIBLE_PX]);
}

/** The ways a panel may print a value the narration quotes. */
function forms(v) {
  if (v === null) return ["∅", "[] finished"];
  if (typeof v === "number") return [...new Set([String(v), fmtMs(v)])];
  if (typeof v === "boolean") return [String(v)];
  return [typeof v === "object" ? JSON.stringify(v) : String(v)];
}

/** Every `{{path}}` of the step's narration with the value it filled in (from `snap`/`prevSnap`). */
function quoted(step, snap, prevSnap) {
  const out = [];
  for (const p of step.narration) {
    for (const [, prev, path] of p.matchAll(/\{\{(prev:)?([^}]+)\}\}/g)) {
      out.push({ path: `${prev ?? ""}${path.trim()}`, prev: Boolean(prev), bare: path.trim(), value: valueAt(prev ? prevSnap : snap, path.trim()) });
    }
  }
  return out;
}

/** Where a quoted value may show: the named panels; the clock also on the tour card. */
const placesOf = (bare, panels) => (bare === "nowMs" ? [...panels, "tour-card"] : panels);

/** True if `value` is visible text of one of `places`, pressing their chips if need be. */
async function valueShown(page, places, value) {
  const needles = forms(value);
  for (const id of places) if (await textVisible(page, id, needles)) return true;
  for (const id of places) if ((await pressChip(page, id)) && (await textVisible(page, id, needles))) return true;
  return false;
}

const server = serveForTests();
const tally = { steps: 0, atOnce: 0, notAtOnce: [] };
const settled = tourSettled;

/** What the window shows of the card and of `panels`: each panel's visible height and full height. */
function measure(page, panels) {
  return page.evaluate((ids) => {
    const vh = window.innerHeight;
    const vis = (r) => Math.max(0, Math.min(r.bottom, vh) - Math.max(r.top, 0));
    const inside = (el) => {
      const r = el.getBoundingClientRect();
      return r.height > 0 && r.top >= 0 && r.bottom <= vh;
    };
    const card = document.querySelector("[data-testid=tour-card]");
    return {
      card: Boolean(card) && inside(card) && inside(card.querySelector("[data-testid=tour-title]")) && inside(card.querySelector("[data-testid=tour-next]")),
      panels: Object.fromEntries(ids.map((id) => {
        const r = document.getElementById(id).getBoundingClientRect();
        return [id, { visible: vis(r), height: r.height }];
      })),
    };
  }, panels);
}

const inView = (m) => m.visible >= Math.min(m.height, MIN_VISIBLE_PX);

/** True if one of `needles` is visible text of panel `id` (in the window and in every scroll box). */
function textVisible(page, id, needles) {
  return page.evaluate(([pid, list]) => {
    const panel = document.getElementById(pid);
    const res = list.map((n) => new RegExp(`(?<![\\d.])${n.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}(?![\\d])`));
    const clipOf = (el) => {
      let box = { top: 0, bottom: window.innerHeight, left: 0, right: window.innerWidth };
      for (let a = el; a && a !== document.body; a = a.parentElement) {
        const s = getComputedStyle(a);
        if (s.display === "none" || s.visibility === "hidden") return null;
        if (/(auto|scroll|hidden|clip)/.test(s.overflowY + s.overflowX)) {
          const r = a.getBoundingClientRect();
          box = { top: Math.max(box.top, r.top), bottom: Math.min(box.bottom, r.bottom), left: Math.max(box.left, r.left), right: Math.min(box.right, r.right) };
        }
      }
      return box;
    };
    const walker = document.createTreeWalker(panel, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!res.some((re) => re.test(node.data))) continue;
      const el = node.parentElement;
      const clip = clipOf(el);
      if (!clip) continue;
      const range = document.createRange();
      range.selectNodeContents(node);
      const rects = [...range.getClientRects()];
      if (!rects.length) rects.push(el.getBoundingClientRect());
      if (rects.some((r) => r.width > 0 && r.bottom > clip.top + 2 && r.top < clip.bottom - 2 && r.right > clip.left && r.left < clip.right)) return true;
    }
    return false;
  }, [id, needles]);
}

/** The pairs of texts in the Shard panel's batch rows (batch labels and the axis label) whose
 * boxes intersect, as drawn: e.g. `["−1 (a retraction) ▸" × "−2 (retractions) ▸"]`. */
function batchLabelOverlaps(page) {
  return page.evaluate(() => {
    const texts = [...document.querySelectorAll("#panel-shard svg.shard-svg text.batch-label, #panel-shard svg.shard-svg text.axis-label")];
    const boxes = texts.map((t) => ({ text: t.textContent, r: t.getBoundingClientRect() })).filter((b) => b.r.width > 0);
    const out = [];
    // Boxes that only touch (within half a pixel) do not overlap.
    const meet = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) if (meet(boxes[i].r, boxes[j].r)) out.push(`${boxes[i].text} × ${boxes[j].text}`);
    }
    return out;
  });
}

/**
 * The actors a step names: its actor highlights (W1, T2, ...) and the actor ids its narration
 * mentions (outside `{{...}}`) that are in the run's snapshot.
 */
function namedActors(step, snap) {
  const ids = new Set((step.highlight ?? []).filter((h) => /^[A-Z]\d+$/.test(h)));
  for (const p of step.narration) {
    for (const [id] of p.replace(/\{\{[^}]*\}\}/g, "").matchAll(/(?<![\w-])[A-Z]\d+(?![\w-])/g)) {
      if (snap?.actors?.some((a) => a.id === id)) ids.add(id);
    }
  }
  return [...ids];
}

/**
 * True if actor `id` shows on a panel in the window: some element of `.panels` carrying
 * `data-actor=id` (its row, its card) is at least partly inside the window and inside every
 * scrolling box around it, and not in a hidden panel or a closed `<details>`. (A named panel
 * that names it in its visible text, "held by reader R1", shows it too: see walkStep.)
 */
function actorInView(page, id) {
  return page.evaluate((actor) => {
    const vh = window.innerHeight;
    const shown = (el) => {
      let top = 0;
      let bottom = vh;
      for (let a = el; a && a !== document.body; a = a.parentElement) {
        const s = getComputedStyle(a);
        if (s.display === "none" || s.visibility === "hidden") return false;
        if (/(auto|scroll|hidden|clip)/.test(s.overflowY)) {
          const r = a.getBoundingClientRect();
          top = Math.max(top, r.top);
          bottom = Math.min(bottom, r.bottom);
        }
      }
      const r = el.getBoundingClientRect();
      return r.height > 0 && Math.min(r.bottom, bottom) - Math.max(r.top, top) >= Math.min(r.height, 12);
    };
    return [...document.querySelectorAll(`.panels [data-actor="${CSS.escape(actor)}"]`)].some((el) => el.getClientRects().length > 0 && shown(el));
  }, id);
}

/**
 * Whether the step's first actor highlight (its focus) shows wholly at settle: one of its rows or
 * cards (an element carrying it, not inside another that does) in the first of the step's named
 * panels that has one, inside the window below that panel's sticky title, or filling the window
 * if it is taller. Returns what is wrong, or null (also for a step with no actor, or none on its
 * panels).
 */
function focusShown(page, step) {
  const actor = (step.highlight ?? []).find((h) => /^[A-Z]\d+$/.test(h));
  if (!actor) return null;
  return page.evaluate(([id, panels]) => {
    const vh = window.innerHeight;
    const sel = `[data-actor="${CSS.escape(id)}"]`;
    for (const pid of panels) {
      const rows = [...document.getElementById(pid).querySelectorAll(sel)].filter((el) => el.getClientRects().length && !el.parentElement.closest(sel));
      if (!rows.length) continue;
      const top = Math.max(0, document.getElementById(pid).querySelector("h2").getBoundingClientRect().bottom);
      const ok = rows.some((el) => {
        const r = el.getBoundingClientRect();
        return (r.top >= top - 1 && r.bottom <= vh + 1) || (r.top <= top + 1 && r.bottom >= vh - 1);
      });
      const r = rows[0].getBoundingClientRect();
      return ok ? null : `its focus ${id} (its first actor) is not wholly in view in ${pid} at settle (at ${Math.round(r.top)}..${Math.round(r.bottom)} px, the window showing ${Math.round(top)}..${vh})`;
    }
    return null;
  }, [actor, namedPanels(step.highlight)]);
}

/**
 * How much of a figure of a step's panel must show from its top, if it is taller: the Shard
 * panel's batch rows and time axis are its first ~125 px (its seqno and part rows below them may
 * be cut); a figure this short or shorter, the Frontiers panel's lines (190 px), shows wholly.
 */
const MIN_FIGURE_PX = 150;

/**
 * The named panels `ids` whose title is in the window but whose figure (their first drawing, an
 * svg image at least 40 px tall) does not show its top and min(its height, MIN_FIGURE_PX) of it
 * in the window, said as failures.
 */
function figuresCut(page, ids) {
  return page.evaluate(([list, min]) => {
    const vh = window.innerHeight;
    const out = [];
    for (const id of list) {
      const panel = document.getElementById(id);
      const t = panel.querySelector("h2").getBoundingClientRect();
      const fig = [...panel.querySelectorAll("svg[role=img]")].find((el) => el.getBoundingClientRect().height >= 40);
      if (!fig || t.top < 0 || t.bottom > vh) continue;
      const r = fig.getBoundingClientRect();
      if (r.top < 0 || Math.min(r.bottom, vh) - r.top < Math.min(r.height, min) - 1) out.push(`the figure of ${id} (svg.${fig.getAttribute("class")}) is cut by the window at settle (at ${Math.round(r.top)}..${Math.round(r.bottom)} px of ${vh})`);
    }
    return out;
  }, [ids, MIN_FIGURE_PX]);
}

/**
 * The lines cut at the top of the panels (the fourth learner walk: after a chip the Shard
 * panel's title covered half a line of its legend; at settle the Writers panel's description
 * showed only its last line, "last attempt ended.", and a Crash button was cut in half): for
 * each panel on screen whose title sticks (the panel's top above it), each line of its text,
 * button, field, table row up to 40 px tall and its description (.caption, whole) that is partly
 * under the title and partly below it, said as failures. Every panel on screen counts, not only
 * the step's (learner walk 5: at write-task 6 the Processes panel, beside the named Writers
 * panel, showed its "P1 running" line and Crash button half under its title). The description
 * of a panel of `whole` (at settle the step's named panels; after a panel's chip, that panel)
 * wholly under its title is cut too: the learner is sent to that panel and cannot read what it
 * shows (walk 5: the Writers panel's at write-task 6 and rule-task-resync 2, the Shard panel's
 * at upper-since 5; neither half under, so this check let them pass). The Event log's own
 * scrolling box is left out (its lines scroll within it).
 */
function linesCut(page, whole) {
  return page.evaluate((whole) => {
  const out = [];
  for (const panel of document.querySelectorAll(".panels > .panel")) {
    const id = panel.id || panel.dataset.testid || "a panel";
    const h2 = panel.querySelector("h2");
    if (!h2 || !panel.getClientRects().length) continue;
    const p = panel.getBoundingClientRect();
    const t = h2.getBoundingClientRect();
    // Its title sticks: the panel's top is above it, over the window's top.
    if (!(p.top < t.top - 2 && t.bottom > 0 && t.top < window.innerHeight)) continue;
    const line = t.bottom;
    const cut = (r) => r.height > 0 && r.width > 0 && r.top < line - 2 && r.bottom > line + 2;
    const inLog = (el) => el.closest(".log");
    const say = (what, r) => `${id}: ${what} is half under its sticky title (${Math.round(r.top)}..${Math.round(r.bottom)} px, the title's bottom at ${Math.round(line)})`;
    for (const el of panel.querySelectorAll(".caption, button, input, select, tr")) {
      if (h2.contains(el) || inLog(el)) continue;
      const r = el.getBoundingClientRect();
      if (el.tagName === "TR" && r.height > 40) continue;
      if (cut(r)) out.push(say(`${el.tagName.toLowerCase()}${el.className ? `.${el.className}` : ""} “${el.textContent.trim().slice(0, 40)}”`, r));
      else if (whole.includes(id) && el.matches(".caption") && r.height > 0 && r.top < line - 2) {
        out.push(`${id}: its description “${el.textContent.trim().slice(0, 40)}” is wholly under its sticky title, and the step names the panel (${Math.round(r.top)}..${Math.round(r.bottom)} px, the title's bottom at ${Math.round(line)})`);
      }
    }
    const walker = document.createTreeWalker(panel, NodeFilter.SHOW_TEXT);
    const range = document.createRange();
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (!n.data.trim() || h2.contains(n) || inLog(n.parentElement)) continue;
      range.selectNodeContents(n);
      const r = [...range.getClientRects()].find(cut);
      if (r) out.push(say(`a line of text “${n.data.trim().slice(0, 40)}”`, r));
    }
  }
  return out;
}, whole);
}

/** Presses the step's chip for actor `id`; false if it has none. */
async function pressActorChip(page, id) {
  const chip = page.locator(`[data-testid=tour-card] button.look-actor[data-actor="${id}"]`).first();
  if ((await chip.count()) === 0) return false;
  await chip.click();
  return true;
}

/** Opens tour `id` at `step` without animation and waits until it settles. */
async function openStep(page, id, step) {
  await page.goto(server.url(`${tourSearch(tours.find((t) => t.id === id), step)}&animate=0`));
  await settled(page, id, step);
}

/** Presses the step's chip for panel `id` (the shard chip for the Shard panel if it has one). */
async function pressChip(page, id) {
  const chip = page.locator(`[data-testid=tour-card] button.look[data-panel="${id}"]`).first();
  if ((await chip.count()) === 0) return false;
  await chip.click();
  return true;
}

/**
 * Presses every "Look at" chip of the card in turn, each from where the step settled (window
 * scrolled to `settleY`), and returns what went wrong: after each press the card's Back and Next
 * buttons must be inside the window, and the chip's target (the element it flashes) in view: an
 * actor's row or card wholly (below its panel's sticky title; or filling the window, if it is
 * taller), a panel with its title and min(its height, MIN_VISIBLE_PX) of it. An actor chip whose
 * actor already had a row or card wholly in view (in the step's named `panels`, if they show it;
 * else anywhere on the panels) must not scroll at all (issue 16 finding A:
 * write-task 4, oracle-restart 2, rule-upsert-feedback 2 centred a row already in view and pushed
 * Next off the bottom of the window).
 */
async function pressEveryChip(page, where, settleY, panels) {
  const failures = [];
  const chips = page.locator("[data-testid=tour-card] button.look");
  const n = await chips.count();
  for (let i = 0; i < n; i++) {
    const before = await page.evaluate(([k, y, named]) => {
      window.scrollTo({ top: y, behavior: "instant" });
      document.querySelectorAll(".flash").forEach((el) => el.classList.remove("flash"));
      const chip = document.querySelectorAll("[data-testid=tour-card] button.look")[k];
      const actor = chip.dataset.actor ?? null;
      const vh = window.innerHeight;
      const wholly = (el) => {
        const r = el.getBoundingClientRect();
        const title = el.closest(".panel")?.querySelector("h2")?.getBoundingClientRect();
        const top = Math.max(0, title ? title.bottom : 0);
        return r.height > 0 && r.top >= top - 1 && r.bottom <= vh + 1;
      };
      const sel = actor && `[data-actor="${CSS.escape(actor)}"]`;
      const all = actor ? [...document.querySelectorAll(`.panels ${sel}`)].filter((el) => el.getClientRects().length && !el.parentElement.closest(sel)) : [];
      // Its rows and cards in the step's panels, if they show it there, else anywhere.
      const inNamed = all.filter((el) => named.includes(el.closest(".panel")?.id));
      return { actor, label: actor ?? chip.dataset.panel, y: window.scrollY, shown: (inNamed.length ? inNamed : all).some(wholly) };
    }, [i, settleY, panels]);
    await chips.nth(i).click();
    const after = await page.evaluate(() => {
      const vh = window.innerHeight;
      const inside = (el) => {
        const r = el?.getBoundingClientRect();
        return Boolean(r) && r.height > 0 && r.top >= 0 && r.bottom <= vh;
      };
      const target = document.querySelector(".panels .flash");
      let seen = false;
      if (target?.classList.contains("panel")) {
        const r = target.getBoundingClientRect();
        const visible = Math.max(0, Math.min(r.bottom, vh) - Math.max(r.top, 0));
        seen = inside(target.querySelector("h2")) && visible >= Math.min(r.height, 200) - 1;
      } else if (target) {
        const r = target.getBoundingClientRect();
        const title = target.closest(".panel")?.querySelector("h2")?.getBoundingClientRect();
        const top = Math.max(0, title ? title.bottom : 0);
        seen = r.height > 0 && ((r.top >= top - 1 && r.bottom <= vh + 1) || (r.top <= top + 1 && r.bottom >= vh - 1));
      }
      return {
        y: window.scrollY,
        buttons: inside(document.querySelector("[data-testid=tour-back]")) && inside(document.querySelector("[data-testid=tour-next]")),
        target: target ? `${target.tagName.toLowerCase()}${target.id ? `#${target.id}` : ""}` : null,
        seen,
      };
    });
    const chip = `${where}: the chip ${before.label}`;
    if (!after.buttons) failures.push(`${chip} scrolls the tour card's Back/Next buttons off the window`);
    if (!after.target) failures.push(`${chip} flashes nothing on the panels`);
    else if (!after.seen) failures.push(`${chip} leaves its target (${after.target}) not in view`);
    if (before.actor && before.shown && after.y !== before.y) failures.push(`${chip} scrolls by ${after.y - before.y} px though ${before.actor} was wholly in view`);
    // Where a chip scrolled to, no line half under a sticky title either, nor a panel's chip's
    // panel's description wholly under its title.
    if (after.y !== before.y) for (const cut of await linesCut(page, before.actor ? [] : [before.label])) failures.push(`${chip}: ${cut}`);
  }
  await page.evaluate((y) => window.scrollTo({ top: y, behavior: "instant" }), settleY);
  return failures;
}

/** Walks one settled step; returns the failures (strings) and whether it showed all at once. */
async function walkStep(page, tour, index, prevSnap, seenPrev) {
  const step = tour.steps[index];
  const where = `${tour.id} step ${index + 1}`;
  const failures = [];
  const panels = namedPanels(step.highlight);
  const snap = await latest(page);
  const settleY = await page.evaluate(() => window.scrollY);
  const m = await measure(page, panels);
  const actors = namedActors(step, snap);
  const actorsAtSettle = [];
  for (const id of actors) {
    let seen = await actorInView(page, id);
    for (const panel of panels) seen ||= await textVisible(page, panel, [id]);
    actorsAtSettle.push(seen);
  }
  // Every filled value, visible at settle, before any chip is pressed: the card quotes it as
  // the learner reads it (a value behind a chip passed here before, rule-idempotency-token 2's
  // {{verify.duplicated}} under the Writers table, below the fold).
  for (const q of quoted(step, snap, prevSnap)) {
    if (q.prev && seenPrev.has(q.bare)) continue;
    const needles = forms(q.value);
    let seen = false;
    for (const id of placesOf(q.bare, panels)) seen ||= await textVisible(page, id, needles);
    if (!seen) failures.push(`${where}: the narration's {{${q.path}}} = ${JSON.stringify(q.value)} is not visible at settle in a named panel (${panels.join(", ") || "none named"}); only after a click`);
  }
  // The step's first panel shows its title at settle: the learner sees which panel the step is
  // in (upsert-feedback 6 scrolled U2's card into view and the Upsert pipeline title off the top).
  if (panels.length && !(await panelShown(page, panels[0])).title) failures.push(`${where}: the title of its first panel ${panels[0]} is not in the window at settle`);
  // Every panel the narration names is one the step names, and on screen at settle: a small one
  // wholly, a tall one with its title (rule-idempotency-token 1 named the Processes panel, off
  // screen; upper-since 3 the Event log; upper-since 4 the Frontiers panel, its axis below the fold).
  for (const id of panelsNamed(step)) {
    if (!panels.includes(id)) failures.push(`${where}: the narration names ${id}, which the step does not name`);
    else if (!(await panelShown(page, id)).shown) failures.push(`${where}: the narration names ${id}, which is not shown at settle (a small panel wholly, a tall one with its title and ${MIN_VISIBLE_PX} px)`);
  }
  // A phrase the narration quotes from a panel (a badge, a log line) is on screen at settle
  // (rule-idempotency-token 1 quoted “⚠ no token”, a badge of a panel below the fold).
  for (const phrase of quotedPhrases(step, snap, prevSnap)) {
    if ((await phraseOnScreen(page, phrase)) === "hidden") failures.push(`${where}: the narration quotes “${phrase}”, which is panel text, but not on screen at settle`);
  }
  // The step's focus, its first actor highlight, shows wholly at settle: its row or card in the
  // first of the step's panels that has one (upsert-feedback 5 and rule-upsert-feedback 2 left
  // U2's card below the fold, under U1's).
  const focus = await focusShown(page, step);
  if (focus) failures.push(`${where}: ${focus}`);
  // The step's other panels that are on screen show their figure wholly (upper-since 5 cut the
  // Frontiers panel's lines at the bottom of the window, write-task 6 the Shard panel's batches).
  for (const cut of await figuresCut(page, panels.slice(1))) failures.push(`${where}: ${cut}`);
  // No line half under a sticky title at settle, nor a named panel's description wholly under it.
  for (const cut of await linesCut(page, panels)) failures.push(`${where}: at settle, ${cut}`);
  if (!m.card) failures.push(`${where}: the tour card is not wholly on screen`);
  if (panels.length && m.panels[panels[0]].visible <= 0) failures.push(`${where}: its first panel ${panels[0]} is outside the window`);
  const atOnce = m.card && panels.every((id) => inView(m.panels[id])) && actorsAtSettle.every(Boolean);
  const shard = shardOf(tour, step);
  if (shard && (await page.getByTestId("shard-pick").inputValue()) !== shard) failures.push(`${where}: the Shard panel does not show ${shard}`);
  // The Shard panel's labels never overlap (rule-upsert-feedback 4 drew a pile of "(retractions)").
  const overlaps = await batchLabelOverlaps(page);
  if (overlaps.length) failures.push(`${where}: batch labels in the Shard panel overlap: ${overlaps.slice(0, 4).join("; ")}${overlaps.length > 4 ? ` and ${overlaps.length - 4} more` : ""}`);
  for (const id of tour.hide ?? []) {
    if (await page.locator(`#${id}`).isVisible()) failures.push(`${where}: ${id}, which the tour hides, is shown`);
  }
  // Panels out of view: the chip must bring them in, with the card still on screen.
  for (const id of panels.slice(1)) {
    if (inView(m.panels[id])) continue;
    if (!(await pressChip(page, id))) {
      failures.push(`${where}: ${id} is out of view and has no chip`);
      continue;
    }
    const after = await measure(page, [id]);
    if (!inView(after.panels[id])) failures.push(`${where}: the chip of ${id} does not bring it into view`);
    if (!after.card) failures.push(`${where}: the chip of ${id} scrolls the tour card away`);
  }
  // Every actor it names, on a panel in the window; else its chip must bring it there, with the
  // card still on screen (an actor the narration names without a chip must be in view).
  for (const [i, id] of actors.entries()) {
    if (actorsAtSettle[i]) continue;
    if (!(await pressActorChip(page, id))) {
      failures.push(`${where}: it names ${id}, which is on no panel in view, and it has no chip for ${id}`);
      continue;
    }
    if (!(await actorInView(page, id))) failures.push(`${where}: the chip of ${id} does not bring it into view`);
    if (!(await measure(page, [])).card) failures.push(`${where}: the chip of ${id} scrolls the tour card away`);
  }
  // Every filled value, visible in a named panel (pressing that panel's chip if needed); a
  // previous step's value may have been shown at the previous step instead.
  for (const q of quoted(step, snap, prevSnap)) {
    if (q.prev && seenPrev.has(q.bare)) continue;
    if (!(await valueShown(page, placesOf(q.bare, panels), q.value))) {
      failures.push(`${where}: the narration's {{${q.path}}} = ${JSON.stringify(q.value)} is in no named panel's visible text (${panels.join(", ") || "none named"})${q.prev ? ", nor was it at the previous step" : ""}`);
    }
  }
  // Every chip, pressed from where the step settled: the card's buttons stay, the target shows.
  failures.push(...(await pressEveryChip(page, where, settleY, panels)));
  // What the next step will quote from this one: is it visible here?
  const shownNow = new Set();
  const next = tour.steps[index + 1];
  if (next) {
    for (const q of quoted(next, null, snap).filter((x) => x.prev)) {
      if (await valueShown(page, placesOf(q.bare, panels), q.value)) shownNow.add(q.bare);
    }
  }
  return { failures, atOnce, snap, shownNow };
}

/** A fresh page at 1280x800 that records console errors and uncaught exceptions. */
async function walkPage(t) {
  const ctx = await launch(t);
  return newPage(ctx, { viewport: VIEWPORT });
}

const digest = (page) => page.evaluate(() => window.__playground.pg().digest());
const plain = (s) => s.replace(/\*\*([^*]+)\*\*/g, "$1").replace(/`([^`]+)`/g, "$1").replace(/\[([^\]]+)\]\([^)]*\)/g, "$1").replace(/\s+/g, " ").trim();

/**
 * Asserts step `index` of `tour` as tours.test.mjs did (it throws at the first failure; the walk
 * collects it): title, narration, links, count, every check of its `expect`, no warning, the
 * panels the tour hides hidden, the step's shard shown, the highlighted panels outlined.
 */
async function checkStep(page, tour, index, prevSnap) {
  const step = tour.steps[index];
  const where = `${tour.id} step ${index + 1}`;
  assert.equal(await page.getByTestId("tour-title").textContent(), step.title, `${where}: title`);
  const snap = await latest(page);
  const narration = (await page.getByTestId("tour-narration").textContent()).replace(/\s+/g, " ");
  for (const p of step.narration) {
    const want = plain(fillNarration(p, snap, prevSnap));
    for (const [, prev, path] of p.matchAll(/\{\{(prev:)?([^}]+)\}\}/g)) {
      assert.notEqual(valueAt(prev ? prevSnap : snap, path.trim()), undefined, `${where}: the narration quotes ${path}, which resolves`);
    }
    assert.ok(narration.includes(want), `${where}: narration shows ${JSON.stringify(want.slice(0, 80))}…`);
  }
  // Every [text](?query) link of the narration is a link on the card.
  const links = step.narration.flatMap((p) => [...p.matchAll(/\[([^\]]+)\]\((\?[^)\s]*)\)/g)].map((m) => m[2]));
  assert.deepEqual(await page.locator("[data-testid=tour-narration] a").evaluateAll((as) => as.map((a) => a.getAttribute("href"))), links, `${where}: narration links`);
  assert.match(await page.locator(".tour-count").textContent(), new RegExp(`^${index + 1} / ${tour.steps.length}$`));
  for (const e of step.expect ?? []) {
    if (e.snap) {
      const r = evalSnapCheck(e, snap, prevSnap);
      assert.ok(r.ok, `${where}: ${r.text}`);
    } else {
      const text = await page.locator(`#${e.panel}`).innerText();
      assert.match(text, new RegExp(e.text, "i"), `${where}: ${e.panel} shows /${e.text}/`);
    }
  }
  assert.equal(await page.getByTestId("tour-warn").count(), 0, `${where}: no failed-check warning on the card`);
  const shard = shardOf(tour, step);
  for (const id of tour.hide ?? []) assert.equal(await page.locator(`#${id}`).isVisible(), false, `${where}: ${id} hidden during the tour`);
  if (shard) assert.equal(await page.getByTestId("shard-pick").inputValue(), shard, `${where}: the Shard panel shows ${shard}`);
  // The highlighted panels are outlined.
  for (const h of (step.highlight ?? []).filter((x) => x.startsWith("panel-"))) {
    const outline = await page.locator(`#${h}`).evaluate((el) => getComputedStyle(el).outlineStyle);
    assert.equal(outline, "solid", `${where}: ${h} highlighted`);
  }
}

for (const [ti, tour] of tours.entries()) {
  const useKeys = tour.id === "writers-race";
  const animate = ti === 0 ? "" : "&animate=0";
  test(`tour walk at 1280x800: "${tour.title}"${useKeys ? " with the arrow keys" : ""}${animate ? " (steps at once)" : " (animated)"}, every step shows what it names and what it expects; Back once; Finish; the last step's URL in a fresh context`, { timeout: 180_000 }, async (t) => {
    const page = await walkPage(t);
    const next = () => (useKeys ? page.keyboard.press("ArrowRight") : page.getByTestId("tour-next").click());
    const back = () => (useKeys ? page.keyboard.press("ArrowLeft") : page.getByTestId("tour-back").click());
    await page.goto(server.url(`${tourSearch(tour, 1)}${animate}`));
    const failures = [];
    const digests = [];
    let prevSnap = null;
    let seenPrev = new Set();
    for (let i = 0; i < tour.steps.length; i++) {
      if (i > 0) await next();
      await settled(page, tour.id, i + 1);
      assert.equal(new URL(page.url()).search, tourSearch(tour, i + 1) + animate, "the URL names the step (and keeps animate=0)");
      // The learner reads the card: the step must hold still meanwhile (paused, the same clock
      // and last event after the page's next frames and after the walk).
      const clock = () => page.evaluate(() => {
        const s = window.__playground.state.latest();
        return { nowMs: s.nowMs, lastSeq: s.lastSeq, playing: window.__playground.view.playing };
      });
      const atSettle = await clock();
      if (atSettle.playing) failures.push(`${tour.id} step ${i + 1}: the run plays after the step settled`);
      const held = async (when) => {
        const later = await clock();
        if (later.nowMs !== atSettle.nowMs || later.lastSeq !== atSettle.lastSeq || later.playing) {
          failures.push(`${tour.id} step ${i + 1}: the run moved on ${when} (${JSON.stringify(atSettle)} → ${JSON.stringify(later)})`);
        }
      };
      await frames(page, HOLD_FRAMES);
      await held(`in the ${HOLD_FRAMES} frames after the step settled`);
      await shot(page, `tour-walk/${String(ti + 1).padStart(2, "0")}-${tour.id}-${i + 1}`, null, { fullPage: false });
      try {
        await checkStep(page, tour, i, prevSnap);
      } catch (err) {
        failures.push(err.message);
      }
      digests.push(await digest(page));
      const r = await walkStep(page, tour, i, prevSnap, seenPrev);
      await held("while the step was walked");
      prevSnap = r.snap;
      seenPrev = r.shownNow;
      failures.push(...r.failures);
      tally.steps += 1;
      if (r.atOnce) tally.atOnce += 1;
      else tally.notAtOnce.push(`${tour.id} ${i + 1}`);
      if (i === 1) {
        // Back rebuilds the previous step from the seed: the same state as before, then Next again.
        await back();
        await settled(page, tour.id, 1);
        assert.equal(new URL(page.url()).search, tourSearch(tour, 1) + animate, "Back: the URL names step 1");
        assert.equal(await digest(page), digests[0], "Back reaches step 1's state again");
        await next();
        await settled(page, tour.id, 2);
        assert.equal(await digest(page), digests[1], "Next after Back reaches step 2's state again");
      }
    }
    assert.deepEqual(failures, [], `what the steps of ${tour.id} name is not all shown`);
    // A step with no command and no run only moves the learner's focus to another panel: the
    // state stays; every other step changes it.
    for (let i = 1; i < digests.length; i++) {
      const s = tour.steps[i];
      if (!s.reset && !(s.commands ?? []).length && !s.runMs) assert.equal(digests[i], digests[i - 1], `step ${i + 1} only moves the focus`);
      else assert.notEqual(digests[i], digests[i - 1], `step ${i + 1} changes the state`);
    }
    // Finish: the tour closes, the picker is back, the run stays.
    assert.match(await page.getByTestId("tour-next").textContent(), /Finish/);
    await page.getByTestId("tour-next").click();
    await waitFor(page, () => document.getElementById("tour-card").hidden && !document.getElementById("tour-picker").hidden, "the tour to close");
    assert.match(await page.locator("#status").textContent(), /finished: the run is yours/);
    assert.equal(await digest(page), digests.at(-1), "finishing keeps the last step's state");
    noErrors(page);

    // The last step's URL in a fresh browser context rebuilds the same state.
    const fresh = await walkPage(t);
    await fresh.goto(server.url(tourSearch(tour, tour.steps.length) + animate));
    await settled(fresh, tour.id, tour.steps.length);
    assert.equal(await digest(fresh), digests.at(-1), "the step's URL reaches the same digest in a fresh context");
    noErrors(fresh);
  });
}

test(`${AT_ONCE_SHARE === 1 ? "every one" : `at least ${AT_ONCE_SHARE * 100}%`} of the settled steps shows every panel it names at once`, (t) => {
  t.diagnostic(`${tally.atOnce} of ${tally.steps} settled steps show every panel they name at once; not at once: ${tally.notAtOnce.join(", ") || "none"}`);
  assert.equal(tally.steps, tours.reduce((n, t) => n + t.steps.length, 0), "every step was walked");
  assert.ok(tally.atOnce >= Math.ceil(AT_ONCE_SHARE * tally.steps), `${tally.atOnce} of ${tally.steps} steps show all their panels at once; not at once: ${tally.notAtOnce.join(", ")}`);
});

test("every kind of Look at chip scrolls to its target and flashes it, the card staying on screen", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await newPage(ctx, { viewport: VIEWPORT, consoleErrors: false });
  // rule-task-resync step 1 names the Writers panel, the shard mz_task and the actors T1 and T2.
  await page.goto(server.url(`${tourSearch("rule-task-resync", 1)}&animate=0`));
  await settled(page, "rule-task-resync", 1);
  const away = async () => {
    await page.evaluate(() => window.scrollTo({ top: document.body.scrollHeight, behavior: "instant" }));
    await page.evaluate(() => document.querySelectorAll(".flash").forEach((el) => el.classList.remove("flash")));
  };
  const seen = (selector) => page.evaluate((sel) => {
    const el = document.querySelector(sel);
    const r = el.getBoundingClientRect();
    return { inView: r.top < window.innerHeight && r.bottom > 0 && Math.min(r.bottom, window.innerHeight) - Math.max(r.top, 0) >= Math.min(r.height, 100) - 2, flashing: el.classList.contains("flash") };
  }, selector);
  // The shard chip: the Shard panel shows mz_task again, in view, flashing.
  await away();
  await page.selectOption("#shard-pick", "data");
  await page.locator("button.look-shard").click();
  assert.equal(await page.getByTestId("shard-pick").inputValue(), "mz_task", "the shard chip shows its shard");
  assert.deepEqual(await seen("#panel-shard"), { inView: true, flashing: true }, "the shard chip brings the Shard panel");
  assert.ok((await measure(page, [])).card, "the card stays on screen");
  // A panel chip.
  await away();
  await page.locator('button.look[data-panel="panel-writers"]').click();
  assert.deepEqual(await seen("#panel-writers"), { inView: true, flashing: true }, "the Writers chip brings its panel");
  assert.ok((await measure(page, [])).card, "the card stays on screen");
  // An actor chip: the actor's row in a named panel.
  await away();
  await page.locator('button.look-actor[data-actor="T2"]').click();
  assert.deepEqual(await seen('#panel-writers [data-actor="T2"]'), { inView: true, flashing: true }, "the T2 chip brings T2's row");
  assert.ok((await measure(page, [])).card, "the card stays on screen");
  noErrors(page);
});

test("what the learner walk found missing is shown: signed to_write rows, read-only, one upsert count, the lease", { timeout: 120_000 }, async (t) => {
  const page = await walkPage(t);
  const open = (id, step) => openStep(page, id, step);
  const rowText = (actor) => page.locator(`#panel-writers tbody[data-actor="${actor}"]`).innerText();

  // write-task 3: the deleted row's −1, as a signed row, visible in the Writers panel.
  await open("write-task", 3);
  assert.match(await rowText("T1"), /last write carried −1 row: −1 key T1-P\d+-1 = 1/);
  assert.ok(await textVisible(page, "panel-writers", ["last write carried −1 row"]), "the retraction is in view");
  // write-task 5: each re-sync's to_write in signed rows, one task adding the row the other retracts.
  await open("write-task", 5);
  const [t1, t2] = [await rowText("T1"), await rowText("T2")];
  const resync = /to_write = desired − shard at [^:]+: ([+−])1 row to (?:add|retract): ([+−])1 key T1-P\d+-4 = 4/;
  const [r1, r2] = [resync.exec(t1), resync.exec(t2)];
  assert.ok(r1 && r1[1] === r1[2], `T1's re-sync in signed rows: ${t1}`);
  assert.ok(r2 && r2[1] === r2[2], `T2's re-sync in signed rows: ${t2}`);
  assert.notEqual(r1[1], r2[1], "one adds the row, the other retracts it");
  // write-task 6: read-only has its own mark (drawn, not a glyph), a whole label, and no desired.
  await open("write-task", 6);
  assert.match(await rowText("T2"), /no desired rows: a read-only task does not read the shard/);
  const ro = await page.evaluate(() => {
    const body = document.querySelector('#panel-writers tbody[data-actor="T2"]');
    const m = body.querySelector(".mark.o-read-only");
    const before = getComputedStyle(m, "::before");
    return {
      label: m.getAttribute("aria-label"),
      glyph: m.textContent,
      bars: before.borderLeftStyle === "solid" && before.borderRightStyle === "solid" && parseFloat(before.height) > 4,
      cut: [...body.querySelectorAll(".how")].filter((h) => h.scrollWidth > h.clientWidth + 1).map((h) => h.textContent),
      how: [...body.querySelectorAll(".how")].map((h) => h.textContent),
    };
  });
  assert.deepEqual(ro, { label: "read-only", glyph: "", bars: true, cut: [], how: ["task", "read-only"] });

  // rule-upsert-feedback 2: the Upsert panel counts what Check counts (uppers that differ, of the
  // uppers checked), the narration quotes that count, and the difference is rows, not JSON.
  await open("rule-upsert-feedback", 2);
  const counts = await page.evaluate(() => {
    const rule = document.querySelector("[data-testid=check-rule-upsert-model]");
    const m = /differs from the reference model at (\d+) of (\d+) uppers checked/.exec(document.querySelector("[data-testid=upsert-checker]").textContent);
    const said = /counts the uppers at which the shard differs: (\d+) so far/.exec(document.querySelector("[data-testid=tour-narration]").textContent);
    return {
      check: [Number(rule.dataset.violations), Number(rule.dataset.checks)],
      upsert: m && [Number(m[1]), Number(m[2])],
      narration: said && Number(said[1]),
      diff: document.querySelector("[data-testid=upsert-diff]")?.textContent ?? "",
    };
  });
  assert.ok(counts.check[0] > 0, "the rule is broken at this step");
  assert.deepEqual(counts.upsert, counts.check, "the Upsert panel and Check give one count");
  assert.equal(counts.narration, counts.check[0], "the narration quotes the same count");
  assert.match(counts.diff, /latest difference: at upper \d+, the shard holds \d+ rows? the model does not/);
  assert.doesNotMatch(counts.diff, /\["|"\]/, "the difference is rendered, not a JSON dump");

  // upsert-feedback 3: the Shard panel shows the replicas' output shard.
  await open("upsert-feedback", 3);
  assert.equal(await page.getByTestId("shard-pick").inputValue(), "upsert_out");

  // durability 5: the since's holder, what a lease is and when it expires; no hidden controls.
  await open("durability", 5);
  const held = await page.getByTestId("since-held").innerText();
  assert.match(held, /held by reader R1's old handle, from before its process restarted \(no heartbeat since\), lease \d+ s, last heartbeat .*(expires in|expired) [\d.]+ s/);
  assert.match(held, /a lease is a reader's hold on the since, renewed by each heartbeat/);
  assert.doesNotMatch(await page.getByTestId("tour-narration").innerText(), /every control on the left works from here/);
  noErrors(page);
});

test("the counts a step puts side by side agree, and a refused compare_and_set names what took its seqno", { timeout: 150_000 }, async (t) => {
  const page = await walkPage(t);
  const open = (id, step) => openStep(page, id, step);
  // Check acked writes counts as of the moment the Writers rows show: each writer's won writes in
  // the check's line are its row's "won", and the updates it checked are the ones acknowledged.
  for (const [id, step] of [["writers-race", 5], ["rule-idempotency-token", 2], ["rule-idempotency-token", 5]]) {
    await open(id, step);
    const got = await page.evaluate(() => {
      const snap = window.__playground.state.latest();
      const won = Object.fromEntries([...document.querySelectorAll("#panel-writers tbody[data-actor]")].map((b) => [b.dataset.actor, b.querySelector("tr td.num:last-child")?.textContent.split("/")[0]]));
      const checked = [...document.querySelectorAll("#verify-view [data-verify-writer]")].map((s) => ({ actor: s.dataset.verifyWriter, writes: s.dataset.writes, acked: Number(s.dataset.acked) }));
      const acked = Object.fromEntries(snap.actors.filter((a) => a.detail.kind === "writer").map((a) => [a.id, a.detail.ackedUpdates]));
      return { won, checked, acked, line: document.querySelector("#verify-view .verify")?.textContent ?? "", seqno: snap.verify?.seqno };
    });
    assert.ok(got.checked.length > 0, `${id} ${step}: the check lists its writers: ${got.line}`);
    for (const c of got.checked) {
      assert.equal(c.writes, got.won[c.actor], `${id} ${step}: ${c.actor}'s won writes, in the check and in its row (${got.line})`);
      assert.equal(c.acked, got.acked[c.actor], `${id} ${step}: ${c.actor}'s acknowledged updates, checked and counted`);
    }
    assert.match(got.line, new RegExp(`as of seqno ${got.seqno} `), "the check says which version it read");
    assert.doesNotMatch(got.line, /more won since/, "nothing was won after the check at a settled step");
  }
  // writers-race 4: every write that met a timeout is accounted for on its row (? turned into ●
  // by the token, or ✕), the column's ? counts those left unknown, and the narration quotes the same.
  await open("writers-race", 4);
  const wr = await page.evaluate(() => {
    const snap = window.__playground.state.latest();
    return snap.actors.filter((a) => a.detail.kind === "writer").map((a) => {
      const body = document.querySelector(`#panel-writers tbody[data-actor="${a.id}"]`);
      return {
        id: a.id, d: a.detail,
        cell: body.querySelector("tr td.num:last-child").textContent,
        line: body.querySelector("[data-kept=timeouts]")?.textContent ?? "",
      };
    });
  });
  const narration = await page.getByTestId("tour-narration").innerText();
  // Each fact once on W1's row (WALK4 6): its latest lost race on its own line, not again in the
  // status line; the retry's timeout on the in-flight line only.
  const rowText = await page.evaluate(() => {
    const body = document.querySelector('#panel-writers tbody[data-actor="W1"]');
    return { status: body.querySelector("td.last").textContent, lost: [...body.querySelectorAll("[data-kept=lost]")].map((s) => s.textContent) };
  });
  assert.doesNotMatch(rowText.status, /UpperMismatch|timeout/, `W1's status line: ${rowText.status}`);
  assert.equal(rowText.lost.length, 1, `one lost-race line: ${rowText.lost}`);
  assert.match(rowText.lost[0], /lost a race at .*: it expected the upper at \d+ ms, the shard's was \d+ ms/);
  for (const w of wr) {
    const m = /\? (\d+) writes? met a storage timeout and (?:is|are) settled \((\d+) timeouts? in all: a write may meet several[^)]*\):\s*(\d+) → ● its token was in the state.*?,\s*(\d+) → ✕ its token was not in the state.*?,\s*(\d+|none) left \? unknown/.exec(w.line);
    assert.ok(m, `${w.id}'s row says what became of its timed-out writes: ${w.line}`);
    const [met, all, won, lost, unknown] = m.slice(1).map((x) => (x === "none" ? 0 : Number(x)));
    assert.equal(met, won + lost + unknown, `${w.id}: every timed-out write is accounted for`);
    assert.ok(met > 0 && all >= met, `${w.id} met timeouts at this step`);
    assert.deepEqual([met, won, unknown], [w.d.timedOutWrites, w.d.resolvedByToken, w.d.indeterminate]);
    assert.equal(w.cell.split("/")[2], String(unknown), `${w.id}: the column's ? is the writes left unknown`);
  }
  const w1 = wr.find((w) => w.id === "W1").d;
  // The narration's retrying write is the row's: in flight, retrying after a timeout, and said
  // apart from the settled ones.
  assert.ok(w1.inFlight?.retrying && w1.inFlight.timeouts > 0, `W1 retries a timed-out write at this step: ${JSON.stringify(w1.inFlight)}`);
  assert.match(wr.find((w) => w.id === "W1").line, /the write in flight met \d+ timeouts? too and is not settled yet/);
  assert.match(narration, new RegExp(`${w1.timedOutWrites} of W1's did, and the token resolved them all, ${w1.resolvedByToken} into ●`));
  assert.match(narration, new RegExp(`the \\? of its won/lost/\\? is ${w1.indeterminate}\\.`));
  // rule-idempotency-token 1 and 4: the writes that met a timeout never outnumber the timeouts
  // they met (a tokenless write abandoned at its upkeep's timeout counts that timeout as its
  // own), and the latest timed-out write is shown as one of them, under their count.
  for (const step of [1, 4]) {
    await open("rule-idempotency-token", step);
    const kept = await page.evaluate(() => [...document.querySelectorAll('#panel-writers tbody[data-actor="W1"] [data-kept]')].map((s) => ({ kind: s.dataset.kept, text: s.textContent })));
    const line = kept.find((k) => k.kind === "timeouts")?.text ?? "";
    const m = /\? (\d+) writes? met a storage timeout(?: and (?:is|are) settled)? \((\d+) timeouts? in all/.exec(line);
    assert.ok(m, `rule-idempotency-token ${step}: W1 counts its timed-out writes: ${line}`);
    assert.ok(Number(m[2]) >= Number(m[1]), `rule-idempotency-token ${step}: ${m[1]} writes met a timeout but only ${m[2]} timeouts in all: ${line}`);
    const kinds = kept.map((k) => k.kind);
    assert.ok(kinds.indexOf("timeouts") < kinds.indexOf("timed-out"), `rule-idempotency-token ${step}: the count comes before the latest of its writes: ${kinds}`);
    assert.match(kept.find((k) => k.kind === "timed-out").text, /^the latest of them: write at /);
    // Step 1's W1 has no token: its row says so and shows no line about a token it lacks.
    if (step === 1) {
      assert.match(line, /all \d+ left \? unknown: without an idempotency token it cannot tell/, line);
      assert.doesNotMatch(line, /its token was/, `rule-idempotency-token 1: no token lines on the writer without one: ${line}`);
    }
  }
  // A refused compare_and_set with one writer: the Consensus log names what took the seqno (the
  // writer's own process's maintenance), in its summary and on the row.
  for (const [id, step] of [["upper-since", 6], ["rule-idempotency-token", 4]]) {
    await open(id, step);
    const got = await page.evaluate(() => ({
      summary: document.querySelector("#consensus-view .summary")?.textContent ?? "",
      rows: [...document.querySelectorAll("#consensus-view [data-testid=cas-taken]")].map((r) => r.textContent),
    }));
    assert.match(got.summary, /✕ \d+ refused: seqno already taken by [^;]*(compaction|rollup|garbage collection|since downgrade|heartbeat|registration|expiry|write|timed out but had landed)/, `${id} ${step}: ${got.summary}`);
    assert.ok(got.rows.length > 0, `${id} ${step}: a refused attempt is listed`);
    for (const r of got.rows) assert.match(r, /was already written by (\S+'s [a-z ]+ \([a-z_]+\)|an earlier attempt of \S+ that timed out)[^.]*, in (this same|another) process/, `${id} ${step}: ${r}`);
  }
  noErrors(page);
});

test("what the second learner walk found is shown: undecodable values, the failed key, the loser, a failed actor's process", { timeout: 120_000 }, async (t) => {
  const page = await walkPage(t);
  const open = (id, step) => openStep(page, id, step);
  // upsert-feedback 5: the generator's undecodable values, counted with the latest marked, in
  // view without a click (not only in the folded list of recent messages); the error in state.
  await open("upsert-feedback", 5);
  const line = await page.getByTestId("upsert-undecodable").innerText();
  assert.match(line, /⚠ \d+ values? made undecodable on purpose by the generator so far; the latest: message #\d+ t\d+ key \d+ → error: value for key \d+: undecodable on purpose \(in place of the generator's value v\d+\)/);
  assert.doesNotMatch(await page.locator("#panel-upsert").innerText(), /\(the generator's\) #/, "no bare # for a generated value");
  assert.ok(await textVisible(page, "panel-upsert", ["made undecodable on purpose by the generator so far"]), "the count is in view");
  assert.ok(await textVisible(page, "panel-upsert", ["(made undecodable on purpose by the generator)"]), "an error value in a replica's state is marked, in view");

  // rule-upsert-feedback 3: U1's card names the key whose diff_sum is 2 as the source numbers
  // it, beside its hash; its process says it runs on with one failed actor.
  await open("rule-upsert-feedback", 3);
  const card = await page.locator('#panel-upsert .up-replica[data-actor="U1"]').innerText();
  assert.match(card, /key [0-9a-f]{12} \(the source's key \d+\): diff_sum is 2/);
  assert.ok(await textVisible(page, "panel-upsert", ["(the source's key"]), "the key is in view");
  const proc = await page.locator('#panel-processes .proc:has(li[data-actor="U1"]) [data-testid=process-state]').innerText();
  assert.equal(proc, "running · 1 actor failed");
  const other = await page.locator('#panel-processes .proc:has(li[data-actor="U2"]) [data-testid=process-state]').innerText();
  assert.equal(other, "running", "a process whose actors all run says just running");

  // rule-task-resync 2: the loser, named on the card, shows its lost race in the Writers panel,
  // in view; the winner shows none.
  await open("rule-task-resync", 2);
  const narration = await page.getByTestId("tour-narration").innerText();
  assert.match(narration, /one loses: here T1\. Its compare_and_append expected the shard's upper at 0 ms, but T2 had just moved it to \d+ ms/);
  assert.match(await page.locator('#panel-writers tbody[data-actor="T1"]').innerText(), /lost a race/);
  assert.doesNotMatch(await page.locator('#panel-writers tbody[data-actor="T2"]').innerText(), /lost a race/);
  assert.ok(await textVisible(page, "panel-writers", ["lost a race"]), "the lost race is in view");
  noErrors(page);
});

test("what the third learner walk found is shown: the badge a step names, U2 beside its badge, one window per oracle write, what a restarted oracle starts at", { timeout: 120_000 }, async (t) => {
  const page = await walkPage(t);
  const open = (id, step) => openStep(page, id, step);
  const inWindow = (selector) => page.evaluate((sel) => [...document.querySelectorAll(sel)].some((el) => {
    const r = el.getBoundingClientRect();
    return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight;
  }), selector);

  // rule-idempotency-token 1: W1's "⚠ no token" badge, which the narration names, is on screen.
  await open("rule-idempotency-token", 1);
  assert.match(await page.getByTestId("tour-narration").innerText(), /“⚠ no token”/);
  assert.ok(await inWindow('#panel-processes li[data-actor="W1"] [data-testid=variant][data-rule=idempotency-token]'), "W1's no-token badge is on screen");

  // rule-upsert-feedback 2 and 6: U2's process row, with its badge (2) or without (6), on screen
  // beside the Upsert pipeline panel's count, which the narration quotes.
  for (const [step, badge] of [[2, true], [6, false]]) {
    await open("rule-upsert-feedback", step);
    assert.ok(await inWindow('#panel-processes li[data-actor="U2"]'), `rule-upsert-feedback ${step}: U2's process row is on screen`);
    assert.equal(await page.locator('#panel-processes li[data-actor="U2"] [data-testid=variant]').count(), badge ? 1 : 0);
    assert.ok(await inWindow("[data-testid=upsert-checker]"), `rule-upsert-feedback ${step}: the checker's line is on screen`);
    assert.doesNotMatch(await page.getByTestId("tour-narration").innerText(), /Upsert panel/);
    // The graph draws no feedback edge into U2 while it runs without the rule (it never reads
    // the shard back), and one once it keeps it; U1's always. Every replica's label fits its box.
    assert.equal(await page.locator('#panel-upsert svg.upsert-svg [data-feedback="U2"]').count(), badge ? 0 : 1, `rule-upsert-feedback ${step}: U2's feedback edge`);
    assert.equal(await page.locator('#panel-upsert svg.upsert-svg [data-feedback="U1"]').count(), 1);
    const spill = await page.evaluate(() => [...document.querySelectorAll("#panel-upsert svg.upsert-svg text[data-replica-label]")].filter((t) => {
      const box = t.previousElementSibling.getBoundingClientRect();
      const r = t.getBoundingClientRect();
      return r.left < box.left || r.right > box.right;
    }).map((t) => t.textContent));
    assert.deepEqual(spill, [], `rule-upsert-feedback ${step}: replica labels spill over their boxes`);
  }

  // upsert-feedback 7 (Provisional values; 6 before step 5 was split): U2's card wholly on
  // screen, the Upsert pipeline title too (it sticks).
  await open("upsert-feedback", 7);
  assert.ok(await inWindow('#panel-upsert .up-replica[data-actor="U2"]'), "U2's card is on screen");
  assert.ok(await inWindow("#panel-upsert h2"), "the Upsert pipeline title is on screen");

  // oracle-restart 2: one window on the Timestamp oracle panel per Consensus write of the
  // timeline (the start's write with epoch 1 is a window too), and the narration counts them.
  await open("oracle-restart", 2);
  const o2 = await page.evaluate(() => {
    const snap = window.__playground.state.latest();
    return {
      writes: snap.consensus.filter((c) => c.key === "timestamp_oracle/epoch_ms" && c.outcome === "committed").length,
      windows: snap.actors.find((a) => a.id === "O1").detail.windows.length,
      line: document.querySelector('#panel-oracle tr.sub[data-actor="O1"]')?.textContent ?? "",
      bars: document.querySelectorAll("#panel-oracle svg.windows rect.window").length,
      narration: document.querySelector("[data-testid=tour-narration]").textContent,
    };
  });
  assert.ok(o2.writes >= 2, `O1 wrote its record more than once: ${JSON.stringify(o2)}`);
  assert.equal(o2.windows, o2.writes, "one window per Consensus write");
  assert.equal(o2.bars, o2.writes, "one bar per Consensus write");
  assert.match(o2.line, new RegExp(`durable windows, all ${o2.writes} `));
  assert.match(o2.narration, new RegExp(`those windows, ${o2.writes} so far`));

  // oracle-restart 4: the log line says what the restarted instance starts at (the stored upper,
  // above which it hands out write timestamps), the narration quotes it, and the first timestamp
  // it handed out is another number, above it, under its own name.
  await open("oracle-restart", 4);
  const o4 = await page.evaluate(() => {
    const snap = window.__playground.state.latest();
    return {
      first: snap.actors.find((a) => a.id === "O1").detail.firstTs,
      log: document.querySelector("#log-view").textContent,
      narration: document.querySelector("[data-testid=tour-narration]").textContent,
    };
  });
  const opened = /epoch 2 opened: resumed from (\d+), hands out write timestamps above (\d+)/.exec(o4.log);
  assert.ok(opened, `the log says what the restarted instance starts at: ${o4.log.slice(0, 300)}`);
  assert.equal(opened[1], opened[2]);
  assert.ok(o4.first > Number(opened[2]), `the first timestamp ${o4.first} is above ${opened[2]}`);
  assert.ok(o4.narration.includes(`“${opened[0]}”`), "the narration quotes the log line");
  assert.match(o4.narration, new RegExp(`Its first timestamp, ${o4.first} \\(the first ts column\\)`));
  assert.ok(await textVisible(page, "panel-oracle", [String(o4.first), fmtMs(o4.first)]), "the first ts column shows it");
  noErrors(page);
});

test("what the sixth learner walk found is shown: the ✕ note per case, the wait in the log's box, the O1 row after a chip, the windows' scale", { timeout: 120_000 }, async (t) => {
  const page = await walkPage(t);
  const open = (id, step) => openStep(page, id, step);
  // writers-race 3: a ✕ whose seqno the other writer's write took says a write refused there is
  // an UpperMismatch; one taken by anything else says the upper did not move. Both show.
  await open("writers-race", 3);
  const notes = await page.evaluate(() => [...document.querySelectorAll("#consensus-view [data-testid=cas-taken]")].map((r) => r.textContent));
  const byWrite = notes.filter((n) => /\(compare_and_append\), in another process/.test(n));
  const byOther = notes.filter((n) => /\((merge_res|add_rollup|add_and_remove_rollups|downgrade_since|compare_and_downgrade_since)\), in (this same|another) process/.test(n));
  assert.ok(byWrite.length > 0 && byOther.length > 0, `both kinds of ✕ in view: ${JSON.stringify(notes)}`);
  for (const n of byWrite) assert.match(n, /a write refused here is an UpperMismatch/, n);
  for (const n of byOther) assert.match(n, /That was no write, so the upper did not move: its command re-reads the state and applies itself again\.$/, n);

  // rule-oracle-durable-bound 4: the log entry of the restarted instance's wait, which the card
  // names, is wholly inside the Event log's scrolling box at settle.
  await open("rule-oracle-durable-bound", 4);
  const wait = await page.evaluate(() => {
    const box = document.querySelector("#log-view");
    const li = [...box.querySelectorAll("li[data-seq]")].find((el) => /stored upper \d+ is \d+ ms ahead of the clock/.test(el.textContent));
    if (!li) return null;
    const b = box.getBoundingClientRect();
    const r = li.getBoundingClientRect();
    return { inBox: r.top >= b.top - 1 && r.bottom <= b.bottom + 1, scrolled: box.scrollTop, inWindow: b.top >= 0 && b.bottom <= window.innerHeight };
  });
  assert.ok(wait, "the wait is logged");
  assert.ok(wait.inBox && wait.inWindow, `the wait's entry shows whole: ${JSON.stringify(wait)}`);

  // oracle-restart 5: the Consensus log's chip leaves O1's row (the card's numbers) in view
  // below the Timestamp oracle's sticky title.
  await open("oracle-restart", 5);
  assert.ok(await pressChip(page, "panel-consensus"), "the step has a Consensus log chip");
  await page.waitForTimeout(100);
  const o1 = await page.evaluate(() => {
    const row = document.querySelector('#panel-oracle tr[data-actor="O1"]');
    const title = document.querySelector("#panel-oracle h2").getBoundingClientRect();
    const r = row.getBoundingClientRect();
    return { top: r.top, bottom: r.bottom, titleBottom: title.bottom, vh: window.innerHeight };
  });
  assert.ok(o1.top >= o1.titleBottom - 1 && o1.bottom <= o1.vh, `O1's row is in view after the chip: ${JSON.stringify(o1)}`);

  // oracle-restart 2: the windows' bars are drawn between two times printed at their ends.
  await open("oracle-restart", 2);
  const scale = await page.evaluate(() => {
    const snap = window.__playground.state.latest();
    const o = snap.actors.find((a) => a.id === "O1").detail;
    return { ends: [...document.querySelectorAll("#panel-oracle .windows-scale > span.mono")].map((s) => s.textContent), lo: o.windows[0].forTs, hi: Math.max(o.windows.at(-1).durableUpper, o.writeTs) };
  });
  assert.deepEqual(scale.ends, [`${scale.lo} ms`, `${scale.hi} ms`], "the bars' two ends, in the times of their windows");
  noErrors(page);
});
