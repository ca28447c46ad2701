// Accessibility of the page at 1280x800: axe-core (a dev dependency, node_modules/axe-core) finds no
// serious or critical violation in seed mode (the default run, played a little, then paused) nor
// with a tour open (a plain step, and a broken-rule step whose Check panel shows breaks in red).
// And by keyboard: the first Tab reaches a skip link that moves focus to the panels; the event
// log is a focusable scroll box; Import is in the tab order; no heading level is skipped; every
// input and select has an accessible name (axe's label rules, checked at every impact).
//
// Run: node --test tests/e2e/a11y.test.mjs     (needs pkg/: bash scripts/build.sh)

import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { ROOT, launch, noErrors, openPage, waitFor, waitForStatus, NAVIGATION_TIMEOUT_MS, serveForTests } from "./helpers.mjs";

const AXE = join(ROOT, "node_modules", "axe-core", "axe.min.js");
/** Rules checked at every impact, beside every serious or critical one. */
const ALWAYS = ["label", "select-name", "color-contrast", "heading-order", "region", "scrollable-region-focusable", "empty-table-header"];

const server = serveForTests();

/** axe's violations that matter here, as readable lines. */
async function axeFindings(page) {
  await page.addScriptTag({ path: AXE });
  const found = await page.evaluate(async () => {
    const r = await globalThis.axe.run(document, { resultTypes: ["violations"] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 4).map((n) => `${n.target.join(" ")}: ${n.failureSummary.split("\n")[1]?.trim() ?? ""}`) }));
  });
  return found
    .filter((v) => v.impact === "serious" || v.impact === "critical" || ALWAYS.includes(v.id))
    .map((v) => `${v.id} (${v.impact}): ${v.nodes.join(" | ")}`);
}

/** The levels of the page's visible headings, in order; a level may rise by one at most. */
async function skippedHeadings(page) {
  return page.evaluate(() => {
    const hs = [...document.querySelectorAll("h1, h2, h3, h4, h5, h6")].filter((h) => h.getClientRects().length || h.classList.contains("visually-hidden"));
    const out = [];
    let prev = 0;
    for (const h of hs) {
      const level = Number(h.tagName[1]);
      if (level > prev + 1) out.push(`h${prev} then h${level} "${h.textContent.trim().slice(0, 40)}"`);
      prev = level;
    }
    return out;
  });
}

test("axe: no serious or critical violation in seed mode at 1280x800; headings in order", { timeout: 60_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=1"));
  await waitFor(page, () => window.__playground.state.latest().nowMs > 1500, "the default run to play a little");
  await page.keyboard.press(" ");
  await waitFor(page, () => !window.__playground.view.playing, "the run to pause");
  assert.deepEqual(await axeFindings(page), [], "axe in seed mode");
  assert.deepEqual(await skippedHeadings(page), [], "no heading level skipped");
  noErrors(page);
});

for (const [tour, step] of [["upper-since", 2], ["rule-idempotency-token", 2]]) {
  test(`axe: no serious or critical violation with the tour ${tour} open at step ${step}`, { timeout: 60_000 }, async (t) => {
    const ctx = await launch(t);
    const page = await ctx.newPage();
  page.setDefaultNavigationTimeout(NAVIGATION_TIMEOUT_MS);
    page.errors = [];
    page.on("pageerror", (err) => page.errors.push(`pageerror: ${err}`));
    await page.goto(server.url(`?tour=${tour}&step=${step}&autoplay=0&animate=0`));
    await waitFor(page, () => document.querySelector("[data-testid=tour-card]")?.dataset.state === "settled", "the tour step to settle");
    assert.deepEqual(await axeFindings(page), [], `axe with ${tour} step ${step} open`);
    assert.deepEqual(await skippedHeadings(page), [], "no heading level skipped");
    noErrors(page);
  });
}

test("keyboard: a skip link to the panels, the event log focusable, Import in the tab order", { timeout: 120_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=1&autoplay=0"));
  // The first Tab stop is the skip link; following it puts the focus on the panels.
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement?.className), "skip-link", "the first Tab stop is the skip link");
  assert.ok(await page.locator(".skip-link").isVisible(), "the skip link shows when focused");
  await page.keyboard.press("Enter");
  await waitFor(page, () => document.activeElement?.id === "panels", "the focus on the panels");
  // From the panels, Tab reaches the event log (a scroll box) and keys scroll it.
  let reached = false;
  for (let i = 0; i < 200 && !reached; i++) {
    await page.keyboard.press("Tab");
    reached = await page.evaluate(() => document.activeElement?.id === "log-view");
  }
  assert.ok(reached, "Tab reaches the event log");
  // Import: a Tab stop of its own (the file input under its label), from the top of the page.
  await page.evaluate(() => document.activeElement?.blur());
  await page.evaluate(() => document.querySelector(".skip-link").focus());
  // Listen for the file chooser before tabbing: Playwright intercepts file choosers only once a
  // listener exists, and turning that on is a protocol round trip of its own; registered just
  // before Enter, it could lose to the key press on a busy machine (the dialog then opens
  // unintercepted and no event comes).
  const chooser = page.waitForEvent("filechooser", { timeout: 60_000 });
  chooser.catch(() => {}); // awaited below; an earlier failed assertion must not leave it unhandled
  let importFocused = false;
  for (let i = 0; i < 60 && !importFocused; i++) {
    await page.keyboard.press("Tab");
    importFocused = await page.evaluate(() => document.activeElement?.id === "t-import");
  }
  assert.ok(importFocused, "Tab reaches Import");
  await page.keyboard.press("Enter");
  assert.ok(await chooser, "Enter on Import opens the file chooser");
  noErrors(page);
});

test("keyboard: Space presses a button reached with Tab; after a click, Space is play/pause again", { timeout: 60_000 }, async (t) => {
  const page = await openPage(await launch(t), server.url("?seed=1&autoplay=0"));
  const readers = async () => (await page.evaluate(() => window.__playground.state.latest().actors.filter((a) => a.id.startsWith("R")).length));
  const before = await readers();
  // Tab to + Reader, then Space: a reader is added and the run stays paused.
  await page.evaluate(() => document.querySelector(".skip-link").focus());
  let focused = false;
  for (let i = 0; i < 80 && !focused; i++) {
    await page.keyboard.press("Tab");
    focused = await page.evaluate(() => document.activeElement?.dataset.testid === "add-reader" || document.activeElement?.id === "add-reader");
  }
  assert.ok(focused, "Tab reaches + Reader");
  await page.keyboard.press(" ");
  await waitForStatus(page, "ok", /added R\d+/);
  assert.equal(await readers(), before + 1, "Space on the tabbed-to button added a reader");
  assert.equal(await page.evaluate(() => window.__playground.view.playing), false, "and did not play");
  // A click leaves the focus on the button it pressed; Space then plays, as the shortcut says.
  await page.locator("#step").click();
  await waitForStatus(page, "ok", /stepped/);
  assert.equal(await page.evaluate(() => document.activeElement?.id), "step", "the focus is on Step");
  await page.keyboard.press(" ");
  await waitForStatus(page, "ok", /^playing$/);
  noErrors(page);
});
