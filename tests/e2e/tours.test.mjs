// End-to-end tests of the guided tours (www/tours/) beyond a walk through their steps: the
// picker, tour links and the browser's back button; leaving a tour mid-way leaves a scenario that
// plays on. No console error anywhere. Every step's own assertions (title, narration, links, the
// step's `expect`, its digest, Back once per tour, Finish, the last step's URL in a fresh
// context) are made in the one walk of tests/e2e/tour-walk.test.mjs. A link made before a tour's
// steps were renumbered (a tour's `renumbered`, engine.js stepOf) opens the step it meant.
//
// Run: node --test tests/e2e/tours.test.mjs     (needs pkg/: bash scripts/build.sh)

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, launch, latest, newPage, noErrors, serveForTests, shot, tourSettled, waitFor } from "./helpers.mjs";
import { checkTour, keepOtherParams, remapOf, stepOf, tourParams, tourSearch } from "../../www/tours/engine.js";

const TOURS_DIR = join(ROOT, "www", "tours");
const tours = JSON.parse(readFileSync(join(TOURS_DIR, "index.json"), "utf8")).tours.map((id) =>
  checkTour(JSON.parse(readFileSync(join(TOURS_DIR, `${id}.json`), "utf8"))),
);

const server = serveForTests();

/** A page on `search` that records console errors (the tour's own status replaces "ready"). */
async function open(ctx, search) {
  const page = await newPage(ctx);
  await page.goto(server.url(search));
  return page;
}

const settled = tourSettled;

const digest = (page) => page.evaluate(() => window.__playground.pg().digest());

test("the picker is the first thing a newcomer sees; a tour opens in place; bad tour links say what is wrong", { timeout: 60_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await open(ctx, "?seed=1");
  await waitFor(page, () => document.querySelectorAll("[data-testid=tour-list] a[data-tour]").length > 0, "the tour picker");
  const listed = await page.locator("[data-testid=tour-list] a[data-tour]").evaluateAll((as) => as.map((a) => a.dataset.tour));
  assert.deepEqual(listed, tours.map((x) => x.id));
  // It sits above the panels and the run goes on under it: free play is not in the way.
  const pickerBox = await page.getByTestId("tour-picker").boundingBox();
  const shardBox = await page.locator("#panel-shard").boundingBox();
  assert.ok(pickerBox.y + pickerBox.height <= shardBox.y, "the picker is above the panels");
  assert.ok(pickerBox.height < 140, `the picker is compact (${pickerBox.height}px)`);
  await waitFor(page, () => window.__playground.state.latest().nowMs > 500, "the default run plays");
  await shot(page, "tours/00-picker", null, { fullPage: false });
  // Folded away, it stays folded on the next visit.
  await page.locator("#tour-picker summary").click();
  const again = await open(ctx, "?seed=1");
  await waitFor(again, () => document.querySelector("#tour-picker details") && !document.querySelector("#tour-picker details").open, "the picker to stay folded");
  await again.close();
  await page.locator("#tour-picker summary").click();
  // <details> fires its toggle event in a later task: wait for it, do not race it.
  await waitFor(page, () => localStorage.getItem("persist-playground:tour-picker") === "open", "the picker to remember it is open");
  // Clicking a tour opens it here, at step 1, with its URL.
  await page.locator('[data-testid=tour-list] a[data-tour="upper-since"]').click();
  await settled(page, "upper-since", 1);
  assert.equal(new URL(page.url()).search, tourSearch("upper-since", 1));
  assert.ok(await page.getByTestId("tour-picker").isHidden(), "the picker hides during a tour");
  assert.ok(await page.locator(".controls").isHidden(), "the tour card takes the controls' place");
  // The browser's back button steps back through the tour, then back to the page before it.
  const step1 = await digest(page);
  await page.getByTestId("tour-next").click();
  await settled(page, "upper-since", 2);
  await page.goBack();
  await settled(page, "upper-since", 1);
  assert.equal(await digest(page), step1, "browser back rebuilds step 1");
  await page.goBack();
  await waitFor(page, () => new URL(location.href).search === "?seed=1" && /^ready: seed 1/.test(document.getElementById("status").textContent), "the page before the tour");
  assert.ok(await page.getByTestId("tour-picker").isVisible(), "the picker is back");
  // A step past the end opens the last step and says so; an unknown tour says which exist.
  const last = tours[0].steps.length;
  const p2 = await open(ctx, `?tour=upper-since&step=99`);
  await settled(p2, "upper-since", last);
  assert.match(await p2.locator("#status").textContent(), new RegExp(`step ${last} of ${last} \\(it has no step 99\\)`));
  const p3 = await open(ctx, `?tour=no-such-tour`);
  await waitFor(p3, () => /there is no tour "no-such-tour"; the tours are upper-since/.test(document.getElementById("status").textContent), "the unknown-tour message");
  assert.ok(await p3.getByTestId("tour-picker").isVisible(), "free play with the picker");
  for (const p of [page, p2, p3]) noErrors(p);
});

test("leaving a tour mid-way keeps the scenario and plays on; a manual command leaves it too", { timeout: 60_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await open(ctx, tourSearch("writers-race", 2));
  await settled(page, "writers-race", 2);
  const at = await digest(page);
  const before = await latest(page);
  await page.getByTestId("tour-leave").click();
  await waitFor(page, () => document.getElementById("tour-card").hidden, "the tour card to close");
  assert.match(await page.locator("#status").textContent(), /left the tour "two writers racing" at step 2/);
  assert.equal(await digest(page), at, "leaving keeps the state");
  assert.equal(new URL(page.url()).search, tourSearch("writers-race", 2, true), "the URL reopens this state with the tour closed");
  assert.ok(await page.locator(".controls").isVisible(), "the controls are back");
  // Play on: space plays, the clock moves, the writers keep committing; a new writer joins.
  await page.keyboard.press(" ");
  await waitFor(page, (t0) => window.__playground.state.latest().nowMs > t0 + 1000, "the run to play on", before.nowMs);
  await page.getByTestId("add-writer").click();
  await waitFor(page, () => /added W3/.test(document.getElementById("status").textContent), "W3 added");
  await waitFor(page, () => window.__playground.state.latest().actors.find((a) => a.id === "W3")?.detail?.committed > 0, "W3 commits");
  const w1 = (await latest(page)).actors.find((a) => a.id === "W1").detail.committed;
  assert.ok(w1 > before.actors.find((a) => a.id === "W1").detail.committed, "W1 commits on");
  noErrors(page);

  // Reopening the free URL rebuilds the state at the step with the tour closed.
  const p2 = await open(ctx, tourSearch("writers-race", 2, true));
  await waitFor(p2, () => window.__playground?.tours && document.getElementById("tour-card").hidden && /left the tour/.test(document.getElementById("status").textContent), "the free URL");
  assert.equal(await digest(p2), at, "the free URL reaches the step's state");

  // A command by hand (the w key) during a tour leaves it first, then applies.
  const p3 = await open(ctx, tourSearch("upper-since", 3));
  await settled(p3, "upper-since", 3);
  // Scrubbed back in time (the , key of www/time.js), Next runs the next step on the present.
  await p3.keyboard.press(",");
  await waitFor(p3, () => window.__playground.time.inPast(), "the page to show the past");
  await p3.keyboard.press("ArrowRight");
  await settled(p3, "upper-since", 4);
  assert.equal(await p3.evaluate(() => window.__playground.time.inPast()), false, "back at the present");
  await p3.keyboard.press("w");
  await waitFor(p3, () => document.getElementById("tour-card").hidden && /added W2/.test(document.getElementById("status").textContent), "w to leave the tour and add W2");
  assert.match(new URL(p3.url()).search, /step=4&free=1/, "left at step 4");
  for (const p of [p2, p3]) noErrors(p);
});

test("a link made before a tour's steps were renumbered opens the step it meant; a link made after, its own", { timeout: 90_000 }, async (t) => {
  const tour = tours.find((x) => x.id === "rule-idempotency-token");
  // Its step 2 was split in two: the old steps 3 and 4 are 4 and 5 now; 1 and 2 stay.
  const old = (step) => tourParams(`?tour=${tour.id}&step=${step}`);
  assert.deepEqual([1, 2, 3, 4].map((n) => stepOf(tour, old(n).step, old(n).numbering)), [1, 2, 4, 5]);
  // upsert-feedback's step 5 was split in two too: its old 6 and 7 are 7 and 8.
  const uf = tours.find((x) => x.id === "upsert-feedback");
  assert.deepEqual([5, 6, 7].map((n) => stepOf(uf, n)), [5, 7, 8]);
  // The tour's own links say which numbering they follow, so they open the step they name.
  for (let n = 1; n <= tour.steps.length; n++) {
    const p = tourParams(tourSearch(tour, n));
    assert.equal(stepOf(tour, p.step, p.numbering), n, `the link ${tourSearch(tour, n)}`);
  }
  // A tour never renumbered keeps its links as they were.
  for (const other of tours.filter((x) => !x.renumbered)) assert.equal(tourSearch(other, 2), tourSearch(other.id, 2));
  // Every tour's maps lead to steps it has, and a malformed map is refused.
  for (const x of tours) {
    for (const r of x.renumbered ?? []) for (const from of Object.keys(r.steps)) assert.ok(stepOf(x, Number(from)) <= x.steps.length, `${x.id}: old step ${from}`);
  }
  assert.throws(() => checkTour({ ...tour, renumbered: [{ why: "x", steps: { 3: "four" } }] }), /renumbered\[0\]/);
  assert.throws(() => checkTour({ ...tour, renumbered: { 3: 4 } }), /renumbered must be a list/);
  // What a renumbering did to a link's step: nothing for a step it left, nothing for a link of
  // today's numbering.
  assert.deepEqual(remapOf(uf, 6), { from: 6, to: 7, whys: [uf.renumbered[0].why] });
  assert.equal(remapOf(uf, 5), null);
  assert.equal(remapOf(uf, 6, uf.renumbered.length), null);
  // A step's URL keeps the page's other parameters, not an old preset link's.
  assert.equal(keepOtherParams(tourSearch(uf, 7), "?tour=upsert-feedback&step=6&animate=0&x=1"), `${tourSearch(uf, 7)}&animate=0&x=1`);
  assert.equal(keepOtherParams(tourSearch(tour, 4), "?seed=41&empty=1&preset=idempotency-token&rule=off"), tourSearch(tour, 4));

  // On the page: the old links open steps 4 and 5, and say so in one line over the step's title,
  // with a link to today's step of their number; the URL becomes the step's link, keeping the
  // link's animate=0.
  const ctx = await launch(t);
  for (const [oldStep, step] of [[3, 4], [4, 5], [2, 2]]) {
    const page = await open(ctx, `?tour=${tour.id}&step=${oldStep}&autoplay=0&animate=0`);
    await settled(page, tour.id, step);
    assert.equal(await page.getByTestId("tour-title").textContent(), tour.steps[step - 1].title, `old step ${oldStep}`);
    assert.equal(new URL(page.url()).search, `${tourSearch(tour, step)}&animate=0`, `old step ${oldStep}: the URL names the step it opened, animate=0 kept`);
    assert.equal(await page.locator("[data-testid=tour-card] .tour-foot a").getAttribute("href"), tourSearch(tour, step), "the card's link to this step");
    const remap = page.getByTestId("tour-remap");
    if (oldStep === step) assert.equal(await remap.count(), 0, `old step ${oldStep}: nothing moved, nothing said`);
    else {
      const text = await remap.textContent();
      assert.match(text, new RegExp(`older than a change to this tour \\(step 2 was split in two\\): it opens step ${step}, the step it meant\\. Step ${oldStep} today is “${tour.steps[oldStep - 1].title}”`), text);
      assert.ok(await remap.isVisible(), "the line is on screen");
    }
    if (oldStep === 3) {
      // Its link opens today's step 3 (a link of today's numbering), and the line goes.
      await remap.locator("a").click();
      await settled(page, tour.id, 3);
      assert.equal(new URL(page.url()).search, `${tourSearch(tour, 3)}&animate=0`);
      assert.equal(await page.getByTestId("tour-remap").count(), 0, "today's step 3 says nothing of old links");
    }
    noErrors(page);
    await page.close();
  }
  // A link of today's numbering opens its own step 3 (the Check panel), not step 4; the browser's
  // back button, after Next, comes back to it (its URL says which numbering it follows).
  const now = await open(ctx, `${tourSearch(tour, 3)}&animate=0`);
  await settled(now, tour.id, 3);
  assert.equal(await now.getByTestId("tour-title").textContent(), tour.steps[2].title);
  await now.getByTestId("tour-next").click();
  await settled(now, tour.id, 4);
  assert.equal(new URL(now.url()).search, `${tourSearch(tour, 4)}&animate=0`, "Next keeps animate=0");
  await now.goBack();
  await settled(now, tour.id, 3);
  noErrors(now);
});
