// End-to-end tests of the playground page in seed mode: every control is clicked (or its key
// pressed) and the test asserts what the page then shows, with no console error. Each test gets
// a fresh browser profile. Screenshots of every panel go to target/e2e-artifacts/ (E2E_SHOTS=1).
//
// Run: node --test tests/e2e/     (needs pkg/: bash scripts/build.sh)

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  frames, launch, openTwoReplicas, latest, noErrors, openPage, shot, waitFor, waitForStatus, serveForTests,
} from "./helpers.mjs";

const server = serveForTests();

const PANELS = ["shard", "writers", "processes", "consensus", "oracle", "frontiers", "upsert", "log"];

/** Text of one shard stat (seqno, upper, since, ...). */
const stat = (page, name) => page.locator(`[data-stat="${name}"] .v`).first().textContent();
const ms = (text) => Number(String(text).replace(/[^\d.]/g, "")) * (/ s$/.test(text) ? 1000 : 1);
const clockMs = async (page) => Number(/t = (\d+) ms|t = ([\d.]+) s/.exec(await page.locator("#clock").textContent()).slice(1).find(Boolean)) * (/t = [\d.]+ s/.test(await page.locator("#clock").textContent()) ? 1000 : 1);

async function actorIds(page) {
  return page.locator("#processes-view li[data-actor]").evaluateAll((els) => els.map((e) => e.dataset.actor));
}

test("a newcomer's first view: every panel with its caption, moving, legible at 1280x800 and 1920x1080", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=1"));
  // Playing from the start: the clock and the shard's upper move.
  const upper0 = ms(await stat(page, "upper"));
  await waitFor(page, () => window.__playground.state.latest().nowMs > 2500, "2.5 s of the run");
  assert.ok(ms(await stat(page, "upper")) > upper0, "the upper moves");
  // The default scenario: two writers, a reader, a write task, an oracle and two upsert
  // replicas, each in its process, with the upsert generator on.
  assert.deepEqual(await actorIds(page), ["W1", "W2", "R1", "T1", "O1", "U1", "U2"]);
  await waitFor(page, () => /matches the reference model at (all [1-9]\d* uppers|the 1 upper) checked/.test(document.querySelector("[data-testid=upsert-checker]")?.textContent ?? ""), "the upsert shard checked against the model");
  await waitFor(page, () => document.querySelectorAll("#upsert-view .up-replica").length === 2, "two replica cards");
  for (const p of PANELS) {
    const panel = page.locator(`#panel-${p}`);
    assert.ok(await panel.isVisible(), `${p} panel visible`);
    const caption = await panel.locator(".caption").textContent();
    assert.ok(caption.trim().length > 40, `${p} panel has a one-line caption`);
  }
  await waitFor(page, () => document.querySelectorAll("#writers-view tbody[data-actor]").length === 3, "three rows in the writers panel");
  await waitFor(page, () => /●/.test(document.getElementById("consensus-view").textContent), "a committed compare_and_set");
  await waitFor(page, () => document.querySelectorAll("#log-view li[data-seq]").length > 20, "events in the log");
  await waitFor(page, () => document.querySelector("#oracle-view [data-testid=durable-upper]")?.textContent !== "∅", "the oracle's durable upper");
  // Both stores at work (issue 16): small writes inline in the state, merges in Blob, whose parts
  // the Shard panel names by their writer and key ("W1's part pm11x0", the full key on hover) and
  // sizes; its legend says what the marks mean.
  await waitFor(page, () => /^\d+ parts? in Blob, newest: W\d's part pm\w+ \d/.test(document.querySelector("#shard-view [data-testid=blob-parts]")?.textContent ?? ""), "a Blob part named in the Shard panel");
  assert.doesNotMatch(await stat(page, "in Blob"), /^0 B$/);
  assert.match(await page.locator("[data-testid=shard-legend]").textContent(), /in Blob.*inline in the state.*rollup.*GC's point/s);
  assert.match(await page.locator("#frontiers-view").textContent(), /square-root scale.*the run's clock/s);
  // The legend lists the marks and the shortcuts are on the page.
  assert.match(await page.locator("[data-testid=legend]").textContent(), /committed.*lost the race.*indeterminate/s);
  assert.match(await page.locator("[data-testid=shortcuts]").textContent(), /space.*play/);
  for (const p of PANELS) await shot(page, `panel-${p}-1280`, `#panel-${p}`);
  await shot(page, "page-1280x800");
  // Nothing overflows the viewport sideways at either size.
  const overflow = () => document.documentElement.scrollWidth - window.innerWidth;
  assert.ok((await page.evaluate(overflow)) <= 0, "no horizontal scroll at 1280x800");
  await page.setViewportSize({ width: 1920, height: 1080 });
  // Every panel redrawn at the new size (a third of them a frame), not a fixed wait.
  await frames(page, 4);
  assert.ok((await page.evaluate(overflow)) <= 0, "no horizontal scroll at 1920x1080");
  await shot(page, "page-1920x1080");
  for (const p of PANELS) await shot(page, `panel-${p}-1920`, `#panel-${p}`);
  noErrors(page);
});

test("run controls: pause, step, speed and their keys", { timeout: 60_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=2"));
  // While the run plays, the Processes panel leaves the view and comes back (at 1280x800 its top
  // is just below the fold: a small shift of the panels above it did the same, now and then,
  // under load). A panel back in view is due (render/index.js): it must not stay due once drawn,
  // or the paused page below draws every frame. Each scroll is seen by the frame loop's next draw.
  await page.evaluate(() => window.scrollTo(0, document.documentElement.scrollHeight));
  await frames(page, 3);
  await page.evaluate(() => document.getElementById("panel-processes").scrollIntoView());
  await frames(page, 3);
  await page.evaluate(() => window.scrollTo(0, 0));
  await frames(page, 3);
  // Pausing adds the state digest to the clock; the header keeps its height (a learner saw every
  // panel jump ~60 px down at each pause: the wider clock narrowed the title beside it).
  const headerHeight = () => page.evaluate(() => document.querySelector("header.top").getBoundingClientRect().height);
  const playingHeader = await headerHeight();
  await page.getByTestId("play").click();
  await waitForStatus(page, "ok", /^paused$/);
  assert.match(await page.getByTestId("play").textContent(), /Play/);
  await waitFor(page, () => /state digest [0-9a-f]{16}/.test(document.getElementById("clock").textContent), "the paused clock's digest");
  assert.equal(await headerHeight(), playingHeader, "the header keeps its height when the run pauses");
  const paused = await clockMs(page);
  // Twelve of the page's frames: playing, each would move the clock.
  await frames(page, 12);
  assert.equal(await clockMs(page), paused, "paused: the clock stands still");
  // Paused and untouched, the page idles: its frames pull no snapshot and draw nothing (a pull
  // replaces the latest snapshot with a new object; a drawn frame records its time).
  const idle = () => page.evaluate(() => ({ same: window.__playground.state.latest() === window.__idleSnap, drawn: window.__playground.view.frameMs.length }));
  await page.evaluate(() => (window.__idleSnap = window.__playground.state.latest()));
  const idleBefore = await idle();
  await frames(page, 12);
  assert.deepEqual(await idle(), idleBefore, "paused and untouched: no pull, no draw");
  // A view choice while paused still draws: the Shard panel shows the picked shard.
  const shardShown = () => page.locator("#shard-view svg").getAttribute("aria-label");
  await page.getByTestId("shard-pick").selectOption("mz_task");
  await waitFor(page, () => /shard mz_task$/.test(document.querySelector("#shard-view svg")?.getAttribute("aria-label") ?? ""), "the Shard panel to show mz_task while paused");
  await page.getByTestId("shard-pick").selectOption("data");
  await waitFor(page, () => /shard data$/.test(document.querySelector("#shard-view svg")?.getAttribute("aria-label") ?? ""), "the Shard panel to show data again");
  assert.match(await shardShown(), /shard data$/);
  await page.getByTestId("step").click();
  await waitForStatus(page, "ok", /^stepped 100 ms$/);
  assert.equal(await clockMs(page), paused + 100, "Step advances 100 ms");
  await page.keyboard.press("s");
  await waitFor(page, (want) => window.__playground.state.latest().nowMs === want, "s steps", paused + 200);
  assert.equal(await clockMs(page), paused + 200);
  // A digest of the snapshot shows while paused.
  assert.match(await page.getByTestId("digest").textContent(), /^[0-9a-f]{16}$/);
  // Speed: the select and + / -.
  await page.getByTestId("speed").selectOption("16");
  await page.keyboard.press("-");
  assert.equal(await page.getByTestId("speed").inputValue(), "4");
  await page.keyboard.press("+");
  await page.keyboard.press("+");
  assert.equal(await page.getByTestId("speed").inputValue(), "max");
  // Space plays again; at full speed virtual time runs far ahead of the wall clock.
  await page.keyboard.press(" ");
  await waitForStatus(page, "ok", /^playing$/);
  await waitFor(page, (from) => window.__playground.state.latest().nowMs > from + 5000, "full speed", paused);
  assert.ok(await page.getByTestId("step").isDisabled(), "Step is disabled while playing");
  noErrors(page);
});

test("add and remove writers, readers, write tasks and oracle instances (buttons and keys)", { timeout: 60_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=3&empty=1"));
  assert.deepEqual(await actorIds(page), []);
  await page.getByTestId("add-writer").click();
  await waitForStatus(page, "ok", /added W1 to P1 on data/);
  await page.getByTestId("add-reader").click();
  await page.getByTestId("add-task").click();
  await page.getByTestId("add-oracle").click();
  await page.keyboard.press("w");
  await page.keyboard.press("r");
  await page.keyboard.press("t");
  await page.keyboard.press("o");
  await waitFor(page, () => document.querySelectorAll("#processes-view li[data-actor]").length === 8, "eight actors");
  assert.deepEqual(await actorIds(page), ["W1", "R1", "T1", "O1", "W2", "R2", "T2", "O2"]);
  // Into an existing process.
  await page.getByTestId("into-process").selectOption("P1");
  await page.getByTestId("add-writer").click();
  await waitForStatus(page, "ok", /added W3 to P1/);
  assert.deepEqual(
    await page.locator('#processes-view .proc[data-process="P1"] li[data-actor]').evaluateAll((e) => e.map((x) => x.dataset.actor)),
    ["W1", "W3"],
  );
  // Each new writer shows up in the writers panel and commits.
  await waitFor(page, () => document.querySelectorAll("#writers-view tbody[data-actor]").length === 5, "W1-W3, T1, T2 in the writers panel");
  await waitFor(page, () => /●/.test(document.querySelector('#writers-view tbody[data-actor="W3"]')?.textContent ?? ""), "W3 commits");
  // A second oracle instance fenced the first.
  await waitFor(page, () => /fenced/.test([...document.querySelectorAll('#oracle-view tr[data-actor="O1"]')].map((r) => r.textContent).join(" ")), "O1 fenced by O2");
  // The fenced O1 stops (failed): its Processes row redraws then. Wait for that redraw before
  // clicking in the panel, or the click's press and release can land on two renderings of the
  // button and make no click (seen once under load).
  await waitFor(page, () => /failed/.test(document.querySelector('#processes-view li[data-actor="O1"]')?.textContent ?? ""), "O1 failed in the Processes panel");
  // Remove.
  await page.locator('#processes-view button[data-action="remove"][data-actor="R2"]').click();
  await waitForStatus(page, "ok", /removed R2/);
  assert.ok(!(await actorIds(page)).includes("R2"));
  noErrors(page);
});

test("actor knobs: a writer's rate, a reader holding its since, a write task's rows, read-only and tick", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=4&empty=1"));
  await page.getByTestId("add-writer").click();
  await page.getByTestId("add-reader").click();
  await page.getByTestId("add-task").click();
  await waitFor(page, () => document.querySelectorAll("#processes-view li[data-actor]").length === 3, "three actors");
  // Writer rate.
  await page.locator('input[data-field="rate"][data-actor="W1"]').fill("40");
  await page.locator('button[data-action="set-rate"][data-actor="W1"]').click();
  await waitForStatus(page, "ok", /W1 now writes 40 per second/);
  // The new rate redraws the Processes panel (its markup's value): wait for that redraw before
  // clicking in the panel, or the click's press and release can land on two renderings of the
  // button and make no click (R1's Hold since, seen once under load).
  await waitFor(page, () => document.querySelector('#processes-view input[data-field="rate"][data-actor="W1"]')?.defaultValue === "40", "the Processes panel redrawn with W1's new rate");
  const w1 = await latest(page).then((s) => s.actors.find((a) => a.id === "W1"));
  assert.equal(w1.spec.ratePerS, 40);
  // Reader hold: the since stops; release: it moves again.
  await waitFor(page, () => window.__playground.state.latest().nowMs > 1500, "a moment of running");
  await page.locator('button[data-action="hold"][data-actor="R1"]').click();
  await waitForStatus(page, "ok", /R1 holds its since/);
  // Held, the shard's since comes to R1's (the other readers move on) and stays there. Waited
  // for in the engine (R1 among what holds the since) and on the panel (its since shown): the
  // panels may wait a moment before they draw it, while the pointer rests on the button it pressed.
  const pinned = () => window.__playground.state.latest().shards.find((x) => x.name === "data");
  await waitFor(page, () => {
    const d = window.__playground.state.latest().shards.find((x) => x.name === "data");
    if (!d.sinceHeldBy?.some((h) => h.handle.actor === "R1")) return false;
    const t = document.querySelector('[data-stat="since"] .v').textContent;
    const shown = Number(t.replace(/[^\d.]/g, "")) * (/ s$/.test(t) ? 1000 : 1);
    return Math.abs(shown - d.since) < (/ s$/.test(t) ? 100 : 1);
  }, "the since held at R1's, and shown");
  const held = await stat(page, "since");
  const heldMs = (await page.evaluate(pinned)).since;
  await waitFor(page, () => window.__playground.state.latest().nowMs > 5000, "time passes");
  assert.equal((await page.evaluate(pinned)).since, heldMs, "a held reader pins the shard's since");
  assert.equal(await stat(page, "since"), held, "and the panel shows it still");
  await page.locator('button[data-action="hold"][data-actor="R1"]').click();
  await waitForStatus(page, "ok", /R1 releases its since/);
  await waitFor(page, (h) => document.querySelector('[data-stat="since"] .v').textContent !== h, "the since moves again", held);
  // Write task: rows, then read-only, then a new tick interval.
  await page.getByTestId("shard-pick").selectOption("mz_task");
  await page.locator('button[data-action="push"][data-actor="T1"][data-rows="10"]').click();
  await page.locator('button[data-action="push"][data-actor="T1"][data-rows="1"]').click();
  await page.locator('button[data-action="delete-row"][data-actor="T1"]').click();
  await waitFor(page, () => window.__playground.state.latest().actors.find((a) => a.id === "T1").detail.desiredRows === 10, "desired holds 10 rows");
  await waitFor(page, () => document.querySelector('[data-stat="updates"] .v').textContent !== "0", "the task's shard holds its rows");
  await page.locator('input[data-action="read-only"][data-actor="T1"]').check();
  await waitForStatus(page, "ok", /T1 restarted: tick 1000 ms, read-only true/);
  await waitFor(page, () => /read-only/.test(document.querySelector('#processes-view li[data-actor="T1"] .desc')?.textContent ?? ""), "the Processes panel redrawn with T1 read-only");
  await waitFor(page, () => [...document.querySelectorAll('#writers-view tbody[data-actor="T1"] .how')].map((h) => h.textContent).join(" ") === "task read-only", "the writers panel shows read-only");
  await page.locator('button[data-action="push"][data-actor="T1"][data-rows="1"]').click();
  await waitFor(page, () => /read-only: 1 command kept in desired, not written/.test(document.querySelector('#writers-view tbody[data-actor="T1"]')?.textContent ?? ""), "the writers panel shows the read-only refusal");
  await page.locator('input[data-field="tick"][data-actor="T1"]').fill("250");
  await page.locator('button[data-action="set-tick"][data-actor="T1"]').click();
  await waitForStatus(page, "ok", /T1 restarted: tick 250 ms/);
  // A bad tick interval is refused with a message; the task keeps its settings.
  await page.locator('input[data-field="tick"][data-actor="T1"]').fill("5");
  await page.locator('button[data-action="set-tick"][data-actor="T1"]').click();
  await waitForStatus(page, "error", /tick interval must be 10 to 60000 ms, not 5/);
  assert.equal((await latest(page)).actors.find((a) => a.id === "T1").spec.tickIntervalMs, 250);
  noErrors(page);
});

/**
 * From now on, counts every change to the panels below the run bar in `window.__panelChanges`;
 * returns once the running page has redrawn one (the Shard and Writers panels redraw as the
 * writers write).
 */
async function countPanelChanges(page) {
  await page.evaluate(() => {
    window.__panelChanges = 0;
    new MutationObserver((list) => { window.__panelChanges += list.length; })
      .observe(document.getElementById("panels"), { childList: true, subtree: true, characterData: true, attributes: true });
  });
  await waitFor(page, () => window.__panelChanges > 0, "the running page to redraw a panel");
}

test("a press held on a button freezes the panels until its release, so a running page cannot move the button from under it", { timeout: 60_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=5"));
  await waitFor(page, () => window.__playground.state.latest().nowMs > 1000, "a moment of running");
  const crash = page.locator('button[data-action="crash"][data-process="P1"]');
  await crash.scrollIntoViewIfNeeded();
  // Counts every change to the panels, and notes what each press lands on.
  await countPanelChanges(page);
  await page.evaluate(() => {
    addEventListener("pointerdown", (e) => { const b = e.target.closest("[data-action]"); window.__pressedOn = b ? `${b.dataset.action} ${b.dataset.process}` : e.target.nodeName; }, true);
  });
  // A press on `button` (its data-action and data-process in `what`): where the button is now. A
  // redraw may move it between that look and the press (what this test is about, before the
  // press); then the mouse leaves (a release elsewhere is no click) and presses again.
  const pressOn = async (button, what) => {
    for (let tries = 0; ; tries++) {
      assert.ok(tries < 20, `a press landed on ${what}`);
      const box = await button.boundingBox();
      await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
      await page.mouse.down();
      if ((await page.evaluate(() => window.__pressedOn)) === what) return;
      await page.mouse.move(1, 1);
      await page.mouse.up();
    }
  };
  await pressOn(crash, "crash P1");
  const held = await page.evaluate(() => window.__panelChanges);
  const box = await crash.boundingBox();
  const clockAtPress = await page.locator("#clock").textContent();
  // Held: the run goes on (the clock moves) and no panel changes, for as long as the press lasts
  // (however long a loaded machine takes: only the release, or the pointer leaving, ends it).
  await waitFor(page, (t) => window.__playground.state.latest().nowMs > t + 300, "the run to go on while the press is held", (await latest(page)).nowMs);
  await frames(page, 5);
  assert.ok(await page.evaluate(() => window.__playground.pressHeld()), "the press still holds the panels");
  assert.equal(await page.evaluate(() => window.__panelChanges), held, "no panel changed while the press was held");
  assert.deepEqual(await crash.boundingBox(), box, "the button is where it was pressed");
  assert.notEqual(await page.locator("#clock").textContent(), clockAtPress, "the header's clock goes on while the panels wait");
  assert.match(await page.locator("#clock").textContent(), /panels wait for your release/, "and says the panels wait");
  await page.mouse.up();
  await waitForStatus(page, "ok", /crashed P1 \(W1\) mid-command/);
  await waitFor(page, (n) => window.__panelChanges > n, "the panels to draw again after the release", held);
  await waitFor(page, () => !/panels wait/.test(document.getElementById("clock").textContent), "the clock's note gone after the release");
  // A press whose pointer leaves its button is no click: the panels draw again at once, while the
  // button is still held down, and the release far from it restarts nothing.
  const restart = page.locator('button[data-action="restart"][data-process="P1"]');
  await restart.scrollIntoViewIfNeeded();
  await pressOn(restart, "restart P1");
  const left = await page.evaluate(() => window.__panelChanges);
  assert.ok(await page.evaluate(() => window.__playground.pressHeld()), "the press on Restart holds the panels");
  await page.mouse.move(1, 1);
  assert.equal(await page.evaluate(() => window.__playground.pressHeld()), false, "the pointer left the button: the panels are free, the button still down");
  await waitFor(page, (n) => window.__panelChanges > n, "the panels to draw again once the pointer left the pressed button", left);
  await page.mouse.up();
  await frames(page, 5);
  assert.match(await page.locator('#processes-view .proc[data-process="P1"]').textContent(), /crashed/, "the release away from Restart restarted nothing");
  noErrors(page);
});

test("a pointer come onto a button holds the panels still while it aims, for a moment at most; the clock says so; leaving the button lets go", { timeout: 60_000 }, async (t) => {
  const page = await openPage(await launch(t), server.url("?seed=5"), { width: 1280, height: 800 });
  await waitFor(page, () => window.__playground.state.latest().nowMs > 1000, "a moment of running");
  const crash = page.locator('button[data-action="crash"][data-process="P2"]');
  await crash.scrollIntoViewIfNeeded();
  await countPanelChanges(page);
  // Onto the button, and then rest there: each frame, whether the page holds the panels for
  // the aim, how many panel changes it has seen, and the clock's words.
  // (A redraw may move the button between the look and the move, and so may the panel above
  // growing to the tallest it was lately as the pointer comes below it (render/steady.js): then
  // onto it again where it is now.)
  const onto = async () => {
    for (let tries = 0; ; tries++) {
      assert.ok(tries < 20, "the pointer came onto the Crash button");
      const box = await crash.boundingBox();
      await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
      await frames(page, 2);
      if (await page.evaluate(() => document.querySelector(":hover:is(button)")?.dataset.process === "P2" && window.__playground.aimHeld())) return;
    }
  };
  await onto();
  const frames_ = await page.evaluate(async () => {
    const out = [];
    for (let i = 0; i < 2000; i++) {
      await new Promise(requestAnimationFrame);
      const aim = window.__playground.aimHeld();
      out.push({ aim, changes: window.__panelChanges, clock: document.getElementById("clock").textContent });
      if (!aim && out.length > 1 && out.filter((f) => !f.aim).length > 30) break;
    }
    return out;
  });
  const whileHeld = frames_.filter((f, i) => i > 0 && f.aim && frames_[i - 1].aim);
  assert.ok(whileHeld.length > 0, "for some frames");
  for (let i = 1; i < frames_.length; i++) {
    if (frames_[i].aim && frames_[i - 1].aim) assert.equal(frames_[i].changes, frames_[i - 1].changes, `no panel changed while held (frame ${i})`);
  }
  assert.ok(whileHeld.some((f) => /panels hold still under your pointer/.test(f.clock)), "the clock says the panels hold still");
  const after = frames_.filter((f) => !f.aim);
  assert.ok(after.length > 0, "resting on the button, the pointer no longer holds them after a moment");
  assert.ok(after.at(-1).changes > after[0].changes, "and the panels go on drawing");
  // Onto the button again (from off it), then off: the hold ends at once.
  await page.mouse.move(1, 1);
  await onto();
  assert.ok(await page.evaluate(() => window.__playground.aimHeld()), "back on the button, held");
  await page.mouse.move(1, 1);
  assert.equal(await page.evaluate(() => window.__playground.aimHeld()), false, "off it, free");
  noErrors(page);
});

test("on a playing page a panel above the pointer never shrinks, so the button pointed at never moves up; above them all, none is held", { timeout: 60_000 }, async (t) => {
  const page = await openPage(await launch(t), server.url("?seed=5"), { width: 1280, height: 800 });
  await waitFor(page, () => window.__playground.state.latest().nowMs > 1000, "a moment of running");
  // The pointer rests on P1's Crash button, below the Shard panel.
  const crash = page.locator('button[data-action="crash"][data-process="P1"]');
  await crash.scrollIntoViewIfNeeded();
  const box = await crash.boundingBox();
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  // Every frame for 240 frames: the button's top, and each panel's height and min-height. The run
  // redraws the panels and their contents' heights wander (the Shard panel's Compaction & GC list
  // gains and loses a line): a panel above the pointer may grow, never shrink, so the button
  // under it may move down, never up.
  const seen = await page.evaluate(async (pointerY) => {
    const frame = () => new Promise(requestAnimationFrame);
    const button = () => document.querySelector('button[data-action="crash"][data-process="P1"]');
    const out = { upMoves: [], shrinks: [], heldAbove: 0, heldBelow: [] };
    let top = button().getBoundingClientRect().top;
    const heights = new Map();
    for (let i = 0; i < 240; i++) {
      await frame();
      const now = button().getBoundingClientRect().top;
      if (now < top - 0.5) out.upMoves.push({ frame: i, from: top, to: now });
      top = now;
      for (const p of document.querySelectorAll(".panel")) {
        const r = p.getBoundingClientRect();
        if (r.bottom > pointerY) {
          if (p.style.minHeight) out.heldBelow.push(p.id);
          continue;
        }
        if (p.style.minHeight) out.heldAbove += 1;
        if (r.height < (heights.get(p) ?? 0) - 0.5) out.shrinks.push({ panel: p.id, frame: i, from: heights.get(p), to: r.height });
        heights.set(p, r.height);
      }
    }
    return out;
  }, box.y + box.height / 2);
  assert.deepEqual(seen.upMoves, [], "the button under the pointer never moved up while the run played");
  assert.deepEqual(seen.shrinks, [], "no panel above the pointer shrank");
  assert.ok(seen.heldAbove > 0, "the panels above the pointer were held at their tallest");
  assert.deepEqual([...new Set(seen.heldBelow)], [], "no panel at or below the pointer was held");
  // The pointer above every panel (the header, at the top of the page): none is held, each is
  // its content's height again.
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.mouse.move(640, 5);
  await frames(page, 3);
  assert.deepEqual(await page.evaluate(() => [...document.querySelectorAll(".panel")].filter((p) => p.style.minHeight).map((p) => p.id)), [], "with the pointer above them all, no panel is held");
  // The pointer inside the Shard panel for 90 frames, its heights noted, then below it: held at
  // once at the tallest of them (not at the height of the moment, which its next flip would
  // exceed, moving the button the pointer has just reached).
  await page.evaluate(() => window.scrollBy(0, document.getElementById("panel-shard").getBoundingClientRect().bottom - 400));
  await page.mouse.move(640, 300);
  await page.evaluate(async () => {
    window.__shardHeights = [];
    for (let i = 0; i < 90; i++) {
      await new Promise(requestAnimationFrame);
      window.__shardHeights.push([performance.now(), document.getElementById("panel-shard").getBoundingClientRect().height]);
    }
  });
  await page.mouse.move(640, 600);
  await frames(page, 2);
  // The heights that count: those of the last 2.5 s (render/steady.js counts 3 s back from the
  // hold; a loaded machine may take long over the frames, and only these are surely in it).
  const { heldAt, tallest } = await page.evaluate(() => {
    const since = performance.now() - 2500;
    return {
      heldAt: parseFloat(document.getElementById("panel-shard").style.minHeight),
      tallest: Math.max(0, ...window.__shardHeights.filter(([t]) => t >= since).map(([, h]) => h)),
    };
  });
  assert.ok(heldAt >= tallest - 0.5, `the Shard panel held at the tallest it was while the pointer was in it: ${heldAt} px, tallest ${tallest} px`);
  noErrors(page);
});

test("crash and restart processes: actors stop mid-command and come back with a fresh client", { timeout: 60_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=5"));
  await waitFor(page, () => window.__playground.state.latest().nowMs > 1000, "a moment of running");
  const before = (await latest(page)).actors.find((a) => a.id === "W1").handleId;
  await page.locator('button[data-action="crash"][data-process="P1"]').click();
  await waitForStatus(page, "ok", /crashed P1 \(W1\) mid-command/);
  await waitFor(page, () => /crashed/.test(document.querySelector('#processes-view .proc[data-process="P1"]').textContent), "P1 shown crashed");
  assert.match(await page.locator('#writers-view tbody[data-actor="W1"]').textContent(), /crashed/);
  await page.locator('button[data-action="restart"][data-process="P1"]').click();
  await waitForStatus(page, "ok", /restarted P1 as P8 with a fresh client/);
  await waitFor(page, () => /restarted as P8/.test(document.querySelector('#processes-view .proc[data-process="P1"]').textContent), "P1 restarted as P8");
  await waitFor(page, () => window.__playground.state.latest().actors.find((a) => a.id === "W1").state === "running", "W1 running again");
  const afterRestart = (await latest(page)).actors.find((a) => a.id === "W1");
  assert.equal(afterRestart.process, "P8");
  assert.notEqual(afterRestart.handleId, before, "a new writer id in the new process");
  // Keys: c crashes the newest running process, x restarts the newest crashed one.
  await page.keyboard.press("c");
  await waitForStatus(page, "ok", /crashed P8/);
  await page.keyboard.press("x");
  await waitForStatus(page, "ok", /restarted P8 as P9/);
  noErrors(page);
});

test("faults: knobs apply and count, an outage leaves writers retrying, bad values are refused", { timeout: 60_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=6"));
  await page.getByTestId("f-cons-fail").fill("20");
  await page.getByTestId("f-cons-timeout").fill("20");
  await page.getByTestId("f-blob-latency").fill("5");
  await page.getByTestId("apply-faults").click();
  await waitForStatus(page, "ok", /^faults applied$/);
  await waitFor(page, () => window.__playground.state.latest().faults.consensus.happenedThenTimedOut > 0, "an indeterminate compare_and_set");
  await waitFor(page, () => /[?↻]/.test(document.getElementById("consensus-view").textContent), "the consensus log marks failed attempts");
  // A bad value: refused, and the knobs in force stay as they were.
  await page.getByTestId("f-cons-fail").fill("150");
  await page.getByTestId("apply-faults").click();
  await waitForStatus(page, "error", /Consensus fail % must be between 0 and 100 %, not 150/);
  await page.getByTestId("f-cons-fail").fill("abc");
  await page.getByTestId("apply-faults").click();
  await waitForStatus(page, "error", /must be a percentage, not "abc"/);
  assert.equal((await latest(page)).faults.consensus.knobs.failRate, 0.2);
  // Full outage on Consensus: writes cannot finish; writers show retrying.
  await page.getByTestId("f-cons-fail").fill("0");
  await page.getByTestId("f-cons-timeout").fill("0");
  await page.getByTestId("f-cons-outage").check();
  await page.getByTestId("apply-faults").click();
  await waitFor(page, () => /retrying/.test(document.getElementById("writers-view").textContent), "a writer retrying under the outage");
  await shot(page, "faults-outage-writers", "#panel-writers");
  // All off (key 0): writes commit again.
  await page.keyboard.press("0");
  await waitForStatus(page, "ok", /all faults off/);
  assert.equal(await page.getByTestId("f-cons-outage").isChecked(), false);
  const seqno = Number(await stat(page, "seqno"));
  await waitFor(page, (s) => Number(document.querySelector('[data-stat="seqno"] .v').textContent) > s + 5, "the shard moves on", seqno);
  noErrors(page);
});

test("bad field values show a clear message and leave the running state intact", { timeout: 60_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=7"));
  await page.getByTestId("play").click();
  const before = await latest(page);
  const cases = [
    ["w-rate", "abc", /writer rate\/s must be a whole number, not "abc"/],
    ["w-rate", "0", /writer rate must be 1 to 1000 per second, not 0/],
    ["w-rate", "5000", /writer rate must be 1 to 1000 per second, not 5000/],
  ];
  for (const [field, value, message] of cases) {
    await page.getByTestId(field).fill(value);
    await page.getByTestId("add-writer").click();
    await waitForStatus(page, "error", message);
  }
  await page.getByTestId("w-rate").fill("4");
  await page.getByTestId("w-keys").fill("9-2");
  await page.getByTestId("add-writer").click();
  await waitForStatus(page, "error", /writer keys must satisfy 0 <= lo < hi/);
  await page.getByTestId("w-keys").fill("a lot");
  await page.getByTestId("add-writer").click();
  await waitForStatus(page, "error", /keys must look like 0-16/);
  await page.getByTestId("seed").fill("-1");
  await page.getByTestId("seed").press("Enter");
  await waitForStatus(page, "error", /the seed must be a whole number/);
  await page.locator('input[data-field="rate"][data-actor="W1"]').fill("1.5");
  await page.locator('button[data-action="set-rate"][data-actor="W1"]').click();
  await waitForStatus(page, "error", /W1 rate\/s must be a whole number/);
  // Nothing changed: same actors, same specs, same clock (paused), same event count.
  const now = await latest(page);
  assert.deepEqual(now.actors.map((a) => [a.id, a.spec]), before.actors.map((a) => [a.id, a.spec]));
  assert.equal(now.nowMs, before.nowMs);
  assert.equal(now.commands, before.commands);
  // And it still runs.
  await page.getByTestId("step").click();
  await waitForStatus(page, "ok", /stepped/);
  noErrors(page);
});

test("a corrupted record shows a clear message; the rest runs on; reset database starts clean", { timeout: 60_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=8"));
  await waitFor(page, () => window.__playground.state.latest().nowMs > 1000, "a moment of running");
  await page.getByTestId("corrupt-key").selectOption("data");
  await page.getByTestId("corrupt").click();
  await waitFor(page, () => /does not decode/.test(document.querySelector("[data-testid=shard-error]")?.textContent ?? ""), "the shard panel names the corruption");
  assert.match(await page.getByTestId("shard-error").textContent(), /state version v\d+ of shard data does not decode/);
  await waitFor(page, () => /wrote garbage as version/.test(document.getElementById("notices").textContent), "the notice says what was corrupted");
  await shot(page, "corrupted-shard", "#panel-shard");
  // The oracle and the write task (other keys) keep going.
  const handed = (await latest(page)).actors.find((a) => a.id === "O1").detail.handedOut;
  await waitFor(page, (h) => window.__playground.state.latest().actors.find((a) => a.id === "O1").detail.handedOut > h + 3, "the oracle keeps handing out timestamps", handed);
  // Reset: a fresh location, the same actors, no error.
  await page.getByTestId("reset-db").click();
  await waitForStatus(page, "ok", /^reset: a fresh in-memory location$/);
  await waitFor(page, () => !document.querySelector("[data-testid=shard-error]"), "the error is gone");
  assert.deepEqual(await actorIds(page), ["W1", "W2", "R1", "T1", "O1", "U1", "U2"]);
  await waitFor(page, () => /●/.test(document.getElementById("writers-view").textContent), "writers commit again");
  noErrors(page);
});

test("seed mode is deterministic: the same seed and the same clicks give the same snapshot", { timeout: 90_000 }, async (t) => {
  async function run() {
    const ctx = await launch();
    try {
      const page = await openPage(ctx, server.url("?seed=42&autoplay=0"));
      await page.getByTestId("step").click();
      const firstDigest = await page.getByTestId("digest").textContent();
      for (let i = 0; i < 7; i++) await page.getByTestId("step").click();
      await page.getByTestId("add-writer").click();
      // The new writer redraws the Processes panel: click in it once that is done (a press and
      // release on two renderings make no click).
      await waitFor(page, () => document.querySelector('#processes-view li[data-actor="W3"]'), "W3 in the Processes panel");
      await page.locator('button[data-action="crash"][data-process="P2"]').click();
      for (let i = 0; i < 5; i++) await page.getByTestId("step").click();
      await page.getByTestId("f-cons-timeout").fill("30");
      await page.getByTestId("apply-faults").click();
      for (let i = 0; i < 5; i++) await page.keyboard.press("s");
      await page.locator('button[data-action="restart"][data-process="P2"]').click();
      for (let i = 0; i < 10; i++) await page.getByTestId("step").click();
      await waitForStatus(page, "ok", /stepped/);
      const digest = await page.getByTestId("digest").textContent();
      const snap = await latest(page);
      noErrors(page);
      return { digest, snap, firstDigest };
    } finally {
      await ctx.close();
    }
  }
  // The two runs side by side, each in its own context (a fresh profile): nothing is shared but
  // the seed and the clicks, and the page's wall-clock timing differs between them.
  const [a, b] = await Promise.all([run(), run()]);
  assert.match(a.digest, /^[0-9a-f]{16}$/);
  assert.notEqual(a.digest, a.firstDigest, "the digest follows the state (it is not a constant)");
  assert.equal(a.snap.nowMs, 2800);
  assert.equal(a.digest, b.digest, "same digest on the page");
  assert.deepEqual(a.snap, b.snap, "same snapshot");
  assert.ok(a.snap.shards.find((s) => s.name === "data").seqno > 10, "the run did something");
});

test("eight writers over a thousand keys at full speed, then every acknowledged write is found", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=9&empty=1"));
  await page.getByTestId("preset-busy").click();
  await waitForStatus(page, "ok", /added eight writers/);
  await page.getByTestId("speed").selectOption("max");
  await waitFor(page, () => window.__playground.state.latest().nowMs > 5000, "5 s of virtual time", null, 60_000);
  await page.keyboard.press("v");
  await waitFor(page, () => document.querySelector("#verify-view .verify[data-lost]"), "the check's result");
  const el = page.locator("#verify-view .verify");
  assert.equal(await el.getAttribute("data-lost"), "0", await el.textContent());
  assert.ok(Number(await el.getAttribute("data-acked")) > 500, await el.textContent());
  assert.match(await el.textContent(), /no acknowledged write lost/);
  await shot(page, "busy-writers", "#panel-writers");
  await shot(page, "busy-shard", "#panel-shard");
  noErrors(page);
});

test("upsert controls: add replicas, push upserts by hand, the generator, step the replicas, crash one", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openTwoReplicas(ctx, server);
  // By hand: key 3 -> "hello", then step the replicas (one driver step each) while paused.
  await page.getByTestId("u-key").fill("3");
  await page.getByTestId("u-value").fill("hello");
  await page.getByTestId("push-upsert").click();
  await waitForStatus(page, "ok", /pushed upsert: key 3 → "hello"/);
  // Queued for the (durable) source shard; one step later it is in the source log.
  assert.match(await page.getByTestId("upsert-source").textContent(), /source: 0 messages, 1 queued/);
  const inLog = /source: 1 message, 0 queued, frontier \d+, generator off/;
  for (let i = 0; i < 20 && !inLog.test(await page.getByTestId("upsert-source").textContent()); i++) {
    await page.getByTestId("step").click();
  }
  assert.match(await page.getByTestId("upsert-source").textContent(), inLog, "the upsert reached the source log");
  // The replicas' drivers read it while the run stepped, so there is nothing to walk stage by
  // stage (tests/e2e/feedback-stages.test.mjs does that): one timely step of each replica.
  await page.getByTestId("step-replicas").click();
  await waitForStatus(page, "ok", /Instead, each replica ran one worker step: U1 [^;]+; U2 [a-z]/);
  await page.keyboard.press("j");
  await waitForStatus(page, "ok", /ran one worker step: U1 /);
  // Run: the replicas write, read it back, and the shard matches the model.
  for (let i = 0; i < 10; i++) await page.getByTestId("step").click();
  await waitFor(page, () => /hello/.test(document.querySelector('#upsert-view .up-replica[data-actor="U1"] [data-testid=upsert-state]')?.textContent ?? ""), "U1's state holds key 3 = hello");
  assert.match(await page.getByTestId("upsert-checker").textContent(), /matches the reference model/);
  // The replica's counters (the core's UpsertCounters, camelCase in the snapshot) are numbers,
  // and U1 has written and read back what it emitted.
  const counters = await page.locator('#upsert-view .up-replica[data-actor="U1"] [data-testid=upsert-counters]').textContent();
  const m = counters.match(/^emitted (\d+) · discarded (\d+) · fed back (\d+) · partial (\d+) · lost races (\d+) · worker steps \d+$/);
  assert.ok(m, `U1's counters are numbers: ${counters}`);
  assert.ok(Number(m[1]) > 0 && Number(m[3]) > 0, `U1 emitted and was fed back: ${counters}`);
  // A delete (empty value), then a bad key.
  await page.getByTestId("u-value").fill("");
  await page.getByTestId("push-upsert").click();
  await waitForStatus(page, "ok", /key 3 → delete/);
  await page.getByTestId("u-key").fill("x");
  await page.getByTestId("push-upsert").click();
  await waitForStatus(page, "error", /upsert key must be a whole number, not "x"/);
  await page.getByTestId("u-key").fill("5000");
  await page.getByTestId("push-upsert").click();
  await waitForStatus(page, "error", /an upsert key must be 0 to 1000, not 5000/);
  // The generator (checkbox and g), then play and crash a replica's process.
  await page.getByTestId("u-generator").check();
  await waitForStatus(page, "ok", /upsert generator on/);
  await page.getByTestId("play").click();
  await waitFor(page, () => window.__playground.state.latest().upsert.sourceMessages > 20, "generated upserts");
  await page.locator('button[data-action="crash"][data-process="P1"]').click();
  await waitForStatus(page, "ok", /crashed P1 \(U1\)/);
  await page.locator('button[data-action="restart"][data-process="P1"]').click();
  await waitFor(page, () => window.__playground.state.latest().actors.find((a) => a.id === "U1").detail.generation === 1, "U1 back as generation 1");
  await waitFor(page, (n) => window.__playground.state.latest().upsert.checker.checks > n, "more checks after the restart", (await latest(page)).upsert.checker.checks);
  const up = (await latest(page)).upsert;
  assert.deepEqual(up.checker.violations, [], "racing replicas through a crash still match the model");
  await page.keyboard.press("g");
  await waitForStatus(page, "ok", /upsert generator off/);
  await shot(page, "panel-upsert-running", "#panel-upsert");
  noErrors(page);
});

test("a panel skipped off screen is drawn current in the very frame it scrolls into view", { timeout: 90_000 }, async (t) => {
  const page = await openPage(await launch(t), server.url("?seed=4"), { width: 1280, height: 800 });
  await waitFor(page, () => window.__playground.state.latest().nowMs > 1500, "a moment of running");
  // The Event log, ~2000 px down at 1280x800, is off screen at the top of the page: it redraws
  // at most twice a second there. Scrolled into view, the first frame must show the newest event.
  const trials = await page.evaluate(async () => {
    const out = [];
    const frame = () => new Promise(requestAnimationFrame);
    for (let i = 0; i < 4; i++) {
      window.scrollTo(0, 0);
      await new Promise((r) => setTimeout(r, 700));
      document.getElementById("panel-log").scrollIntoView({ block: "start" });
      await frame();
      const shown = Number(document.querySelector("#log-view li[data-seq]")?.dataset.seq);
      out.push({ shown, newest: window.__playground.state.events().at(-1).seq, top: document.getElementById("panel-log").getBoundingClientRect().top });
    }
    return out;
  });
  for (const x of trials) {
    assert.ok(x.top >= 0 && x.top < 100, `the log is in view: ${JSON.stringify(x)}`);
    assert.equal(x.shown, x.newest, `the first frame in view shows the newest event: ${JSON.stringify(trials)}`);
  }
  noErrors(page);
});
