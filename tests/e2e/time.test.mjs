// End-to-end tests of time in the playground page (www/time.js): a share link opened in a new
// browser context reaches the same snapshot at the same step (the digest), export then import
// gives the same run, a fork agrees with the original at the fork point and goes its own way
// after it, scrubbing back and forward shows the past (and says so), malformed links and files
// show a clear message and leave the running state intact, and live mode exports its event log.
// Each test gets fresh browser contexts; screenshots go to target/e2e-artifacts/ (E2E_SHOTS=1).
//
// Run: node --test tests/e2e/time.test.mjs     (needs pkg/: bash scripts/build.sh)

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { deflateRawSync } from "node:zlib";
import {
  launch, noErrors, openPage, shot, waitFor, waitForStatus, serveForTests,
} from "./helpers.mjs";

const server = serveForTests();

const digest = (page) => page.getByTestId("digest").textContent();
const present = (page) => page.evaluate(() => {
  const s = window.__playground.pg().snapshot();
  return { steps: s.steps, nowMs: s.nowMs, commands: s.commands, actors: s.actors.map((a) => a.id) };
});
const shownStep = async (page) => Number(await page.getByTestId("t-step").textContent());

/** Plays `seed` for `ms` of virtual time, pauses, and adds a writer and a reader on the way. */
async function aRun(page, ms) {
  await waitFor(page, (t) => window.__playground.state.latest().nowMs > t, `${ms} ms of the run`, ms);
  await page.keyboard.press(" ");
  await waitForStatus(page, "ok", /^paused$/);
  await page.keyboard.press("w");
  await waitForStatus(page, "ok", /added W3/);
  await page.keyboard.press("s");
  await page.keyboard.press("r");
  await waitForStatus(page, "ok", /added R2/);
  for (let i = 0; i < 3; i++) await page.keyboard.press("s");
  await waitForStatus(page, "ok", /stepped 100 ms/);
}

test("a share link opened in a new browser context reaches the same snapshot at the same step", { timeout: 90_000 }, async (t) => {
  const a = await openPage(await launch(t), server.url("?seed=4"));
  await aRun(a, 1500);
  const want = { digest: await digest(a), ...(await present(a)) };
  await a.getByTestId("t-share").click();
  await waitForStatus(a, "ok", /^share link for step \d+/);
  const link = await a.getByTestId("t-link").inputValue();
  assert.match(link, /\?run=[A-Za-z0-9_-]+$/, "the run is in the URL, compressed");
  assert.ok(link.length < 2000, `a short link (${link.length} characters)`);
  await shot(a, "time-share-origin");

  const b = await openPage(await launch(t), link);
  await waitForStatus(b, "ok", /^ready: opened the share link: seed 4, \d+ commands, replayed to step \d+/);
  const got = { digest: await digest(b), ...(await present(b)) };
  assert.deepEqual(got, want, "same snapshot (digest), step, time, commands and actors");
  assert.match(await b.locator("#clock").textContent(), new RegExp(`step ${want.steps}`));
  // The replay kept snapshots on the way: the opened run can be scrubbed back at once.
  assert.ok(await b.evaluate(() => window.__playground.time.history().size()) > 1, "snapshots kept while replaying");
  await b.keyboard.press(",");
  await waitFor(b, () => document.body.dataset.time === "past", "the past of the opened run");
  assert.ok((await shownStep(b)) < want.steps);
  await b.keyboard.press("End");
  await waitForStatus(b, "ok", /^back to the present/);
  // The opened run is paused at the link's step and plays on from it.
  assert.match(await b.getByTestId("play").textContent(), /Play/);
  await b.keyboard.press(" ");
  await waitFor(b, (s) => window.__playground.state.latest().steps > s, "the opened run plays on", want.steps);
  await shot(b, "time-share-opened");
  noErrors(a);
  noErrors(b);
});

test("export then import gives the same run", { timeout: 90_000 }, async (t) => {
  const a = await openPage(await launch(t), server.url("?seed=12"));
  await aRun(a, 1200);
  const want = { digest: await digest(a), ...(await present(a)) };
  const [download] = await Promise.all([a.waitForEvent("download"), a.getByTestId("t-export").click()]);
  await waitForStatus(a, "ok", /^exported the run: seed 12, \d+ commands, up to step \d+/);
  const file = await download.path();
  const doc = JSON.parse(readFileSync(file, "utf8"));
  assert.equal(doc.format, "persist-playground-run");
  assert.equal(doc.version, 1);
  assert.equal(doc.seed, "12");
  assert.equal(doc.commands.length, want.commands);
  assert.deepEqual(doc.at, { step: want.steps, atMs: want.nowMs });
  assert.deepEqual(doc.commands.at(-1).command, { type: "addActor", spec: { kind: "reader", shard: "data", hold: false }, process: null });

  // Another context, another seed, running: the import replaces its run with the exported one.
  const b = await openPage(await launch(t), server.url("?seed=99"));
  await b.getByTestId("t-import").setInputFiles(file);
  await waitForStatus(b, "ok", new RegExp(`^imported .*: seed 12, ${want.commands} commands, at step ${want.steps}$`));
  assert.deepEqual({ digest: await digest(b), ...(await present(b)) }, want, "the same run");
  await shot(b, "time-imported");
  noErrors(a);
  noErrors(b);
});

test("a fork agrees with the original at the fork point and diverges after it", { timeout: 90_000 }, async (t) => {
  const page = await openPage(await launch(t), server.url("?seed=6"));
  await waitFor(page, () => window.__playground.state.latest().nowMs > 1500, "1.5 s of the run");
  await page.keyboard.press(" ");
  await waitForStatus(page, "ok", /^paused$/);
  const fork = { digest: await digest(page), ...(await present(page)) };
  // The original goes on: a step, then a third writer, then more steps.
  await page.keyboard.press("s");
  await page.keyboard.press("w");
  await waitForStatus(page, "ok", /added W3/);
  for (let i = 0; i < 4; i++) await page.keyboard.press("s");
  await waitForStatus(page, "ok", /stepped 100 ms/);
  const original = { digest: await digest(page), ...(await present(page)) };
  assert.ok(original.actors.includes("W3"));

  // Go to the fork point: the page shows the past, and changing the run is refused there.
  await page.getByTestId("t-goto").fill(String(fork.steps));
  await page.getByTestId("t-goto-go").click();
  await waitFor(page, () => document.body.dataset.time === "past", "the past view");
  assert.equal(await shownStep(page), fork.steps);
  assert.match(await page.getByTestId("t-label").textContent(), /Viewing the past.*Fork here/);
  assert.ok(await page.getByTestId("play").isDisabled(), "Play is off in the past");
  await page.keyboard.press("r");
  await waitForStatus(page, "error", /you are viewing the past \(step \d+\): Fork here/);
  const { digest: _digest, ...originalState } = original;
  assert.deepEqual(await present(page), originalState, "the refused command changed nothing");
  assert.ok(await page.locator("#processes-view").evaluate((el) => el.inert), "actor buttons are off in the past");
  await shot(page, "time-fork-point");

  // Fork: the same snapshot as the original had there, then another branch.
  await page.getByTestId("t-fork").click();
  await waitForStatus(page, "ok", new RegExp(`^forked at step ${fork.steps} \\(${fork.commands} commands\\): the future after it is discarded`));
  assert.deepEqual({ digest: await digest(page), ...(await present(page)) }, fork, "the fork starts at the fork point's snapshot");
  assert.equal(await page.evaluate(() => document.body.dataset.time), "present");
  await page.keyboard.press("s");
  await page.keyboard.press("r");
  await waitForStatus(page, "ok", /added R2/);
  for (let i = 0; i < 4; i++) await page.keyboard.press("s");
  await waitForStatus(page, "ok", /stepped 100 ms/);
  const branch = { digest: await digest(page), ...(await present(page)) };
  assert.equal(branch.nowMs, original.nowMs, "the same virtual time as the original's end");
  assert.notEqual(branch.digest, original.digest, "after the fork point the runs differ");
  assert.ok(branch.actors.includes("R2") && !branch.actors.includes("W3"), "the branch has its own commands");
  // The kept history was cut at the fork point: nothing after it remains from the original.
  const kept = await page.evaluate(() => window.__playground.time.history().entries().filter((e) => e.snap.actors.some((a) => a.id === "W3")).length);
  assert.equal(kept, 0, "no kept snapshot has the original's W3");
  noErrors(page);
});

test("scrubbing back and forward shows the past, and says so", { timeout: 90_000 }, async (t) => {
  const page = await openPage(await launch(t), server.url("?seed=3"));
  await waitFor(page, () => window.__playground.state.latest().nowMs > 3000, "3 s of the run");
  assert.equal(await page.evaluate(() => document.body.dataset.time), "present");
  assert.match(await page.getByTestId("t-label").textContent(), /^Present · step \d+ · \d+ snapshots kept/);
  // Back one kept snapshot pauses the run and shows the past.
  await page.keyboard.press(",");
  await waitFor(page, () => document.body.dataset.time === "past", "the past view");
  const now = await present(page);
  const s1 = await shownStep(page);
  assert.ok(s1 < now.steps, `the past (${s1}) is before the present (${now.steps})`);
  for (let i = 0; i < 20; i++) await page.keyboard.press(",");
  const s2 = await shownStep(page);
  assert.ok(s2 < s1, "further back");
  assert.match(await page.locator("#clock").textContent(), new RegExp(`^past: t = .* step ${s2}`));
  // The panels draw the past snapshot: the shard's seqno is the one kept at that step.
  const pastSnap = await page.evaluate(() => window.__playground.time.shown(window.__playground.state).latest());
  assert.equal(pastSnap.steps, s2);
  await waitFor(page, (want) => document.querySelector('[data-stat="seqno"] .v')?.textContent === String(want), "the past seqno in the shard panel", pastSnap.shards.find((x) => x.name === "data").seqno);
  await waitFor(page, (last) => Number(document.querySelector("#log-view li[data-seq]")?.dataset.seq) === last, "the event log up to that point", pastSnap.lastSeq);
  await shot(page, "time-past");
  // The run stood still meanwhile.
  assert.deepEqual(await present(page), now);
  // A share link made in the past opens at the point shown, with the snapshot kept there.
  await page.getByTestId("t-share").click();
  await waitForStatus(page, "ok", new RegExp(`^share link for step ${s2} `));
  const other = await openPage(await launch(t), await page.getByTestId("t-link").inputValue());
  await waitForStatus(other, "ok", new RegExp(`replayed to step ${s2}$`));
  assert.deepEqual(await other.evaluate(() => window.__playground.pg().snapshot()), pastSnap, "the same snapshot as the past point shown");
  noErrors(other);
  // Forward, the scrub bar, and back to the present.
  await page.keyboard.press(".");
  assert.ok((await shownStep(page)) > s2, "forward one");
  await page.getByTestId("t-scrub").evaluate((el, v) => {
    el.value = String(v);
    el.dispatchEvent(new Event("input", { bubbles: true }));
  }, Math.floor(now.steps / 2));
  await waitFor(page, (half) => {
    const s = Number(document.querySelector("[data-testid=t-step]").textContent);
    return s <= half && s > 0;
  }, "the scrub bar at half way", Math.floor(now.steps / 2));
  // A step between two kept snapshots is rebuilt exactly, by replay, and kept from then on.
  const [lo, hi] = await page.evaluate(() => {
    const e = window.__playground.time.history().entries();
    const i = e.findIndex((x, j) => j + 1 < e.length && e[j + 1].steps > x.steps + 1 && x.steps > 0);
    return [e[i], e[i + 1]].map((x) => ({ steps: x.steps, nowMs: x.nowMs }));
  });
  const between = lo.steps + 1;
  await page.getByTestId("t-goto").fill(String(between));
  await page.getByTestId("t-goto-go").click();
  await waitForStatus(page, "ok", new RegExp(`^step ${between} rebuilt by replay`));
  assert.equal(await shownStep(page), between);
  const rebuilt = await page.evaluate(() => window.__playground.time.shown(window.__playground.state).latest());
  assert.equal(rebuilt.steps, between);
  assert.ok(rebuilt.nowMs >= lo.nowMs && rebuilt.nowMs <= hi.nowMs, "its time lies between its neighbours'");
  await page.keyboard.press("Home");
  await page.keyboard.press("End");
  await waitForStatus(page, "ok", /^back to the present: step \d+$/);
  assert.equal(await page.evaluate(() => document.body.dataset.time), "present");
  assert.equal(await shownStep(page), now.steps);
  await page.keyboard.press(" ");
  await waitFor(page, (s) => window.__playground.state.latest().steps > s, "the run plays on", now.steps);
  noErrors(page);
});

const base64url = (buf) => buf.toString("base64").replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
const linkOf = (doc) => `?run=${base64url(deflateRawSync(Buffer.from(JSON.stringify(doc))))}`;

test("malformed links and malformed JSON show a clear message and leave the running state intact", { timeout: 120_000 }, async (t) => {
  const ctx = await launch(t);
  const cases = [
    ["?run=not*base64", /the share link is damaged: .*base64url/],
    ["?run=AAAAAAAA", /the share link is damaged: its run= data does not decompress/],
    [linkOf({ hello: 1 }), /the share link is damaged: its format is undefined/],
    [linkOf({ format: "persist-playground-run", version: 1, seed: "3", at: { step: 10, atMs: 0 }, commands: [{ stamp: { step: 0, atMs: 0 }, command: { type: "flyAway" } }] }),
      /the share link's run could not be replayed: bad stamped command list: .*flyAway/],
  ];
  for (const [query, message] of cases) {
    const page = await ctx.newPage();
    page.errors = [];
    page.on("pageerror", (err) => page.errors.push(String(err)));
    await page.goto(server.url(query));
    await waitForStatus(page, "error", new RegExp(`${message.source}.*; started seed 1 instead`));
    // The page still works: the default run plays.
    await waitFor(page, () => window.__playground.state.latest().nowMs > 500, "the default run playing");
    assert.equal((await present(page)).actors.length, 7);
    assert.deepEqual(page.errors, []);
    await page.close();
  }

  const page = await openPage(ctx, server.url("?seed=8"));
  await aRun(page, 800);
  const before = { digest: await digest(page), ...(await present(page)) };
  const bad = [
    ["broken.json", "{ not json", /could not import broken\.json: it is not valid JSON .*; the running state is unchanged$/],
    ["events.json", JSON.stringify({ format: "persist-playground-events", version: 1, events: [] }), /it is a live-mode event log: live runs are not replayable/],
    ["v9.json", JSON.stringify({ format: "persist-playground-run", version: 9 }), /format version 9 is not supported/],
    ["rate.json", JSON.stringify({ format: "persist-playground-run", version: 1, seed: "8", at: { step: 5, atMs: 0 }, commands: [{ stamp: { step: 0, atMs: 0 }, command: { type: "addActor", spec: { kind: "writer", shard: "data", ratePerS: 0, keyLo: 0, keyHi: 4, mode: "append" } } }] }),
      /could not import rate\.json: command 1: writer rate must be 1 to \d+ per second, not 0; the running state is unchanged/],
    ["ghost.json", JSON.stringify({ format: "persist-playground-run", version: 1, seed: "8", at: { step: 50, atMs: 0 }, commands: [{ stamp: { step: 0, atMs: 0 }, command: { type: "removeActor", actor: "W7" } }] }),
      /could not import ghost\.json: command 1 was refused: there is no actor "W7"/],
  ];
  for (const [name, text, message] of bad) {
    await page.getByTestId("t-import").setInputFiles({ name, mimeType: "application/json", buffer: Buffer.from(text) });
    await waitForStatus(page, "error", message);
    assert.deepEqual({ digest: await digest(page), ...(await present(page)) }, before, `${name}: the running state is intact`);
  }
  await shot(page, "time-bad-import");
  await page.keyboard.press(" ");
  await waitFor(page, (s) => window.__playground.state.latest().steps > s, "the run plays on", before.steps);
  noErrors(page);
});

test("a long replay shows its progress, refuses commands meanwhile, and can be cancelled", { timeout: 90_000 }, async (t) => {
  const page = await openPage(await launch(t), server.url("?seed=5&autoplay=0"));
  const before = { digest: await digest(page), ...(await present(page)) };
  // A run whose end is twenty million steps away: far too long to replay in a moment.
  const far = { format: "persist-playground-run", version: 1, seed: "5", at: { step: 20_000_000, atMs: 0 }, commands: [] };
  await page.getByTestId("t-import").setInputFiles({ name: "far.json", mimeType: "application/json", buffer: Buffer.from(JSON.stringify(far)) });
  await waitFor(page, () => /^importing far\.json: replaying step [1-9]\d* of 20000000 \(\d+ %\)$/.test(document.getElementById("t-progress-text").textContent), "the replay's progress");
  assert.ok(await page.getByTestId("t-progress").isVisible());
  await page.keyboard.press("w");
  await waitForStatus(page, "error", /^wait: importing far\.json is under way/);
  await shot(page, "time-replay-progress");
  await page.getByTestId("t-cancel").click();
  await waitForStatus(page, "error", /^could not import far\.json: importing far\.json cancelled; the running state is unchanged$/);
  // The status is set before the next frame redraws the time bar: wait for the bar, do not race it.
  await page.getByTestId("t-progress").waitFor({ state: "hidden" });
  assert.deepEqual({ digest: await digest(page), ...(await present(page)) }, before, "the running state is intact");
  noErrors(page);
});

test("live mode: nothing is replayable, so export gives the event log and says so", { timeout: 90_000 }, async (t) => {
  const page = await openPage(await launch(t), server.url(`?mode=live&db=e2e-time-live-${process.pid}`));
  assert.match(await page.getByTestId("t-label").textContent(), /Live mode is not replayable.*Export.*saves the event log/);
  for (const id of ["t-share", "t-scrub", "t-back", "t-fork", "t-import"]) {
    assert.ok(await page.getByTestId(id).isDisabled(), `${id} is off in live mode`);
  }
  await waitFor(page, () => window.__playground.state.latest().lastSeq > 20, "events in the log");
  const [download] = await Promise.all([page.waitForEvent("download"), page.getByTestId("t-export").click()]);
  await waitForStatus(page, "ok", /^live mode is not replayable \(real timers, IndexedDB\): exported the event log instead, \d+ events$/);
  const doc = JSON.parse(readFileSync(await download.path(), "utf8"));
  assert.equal(doc.format, "persist-playground-events");
  assert.equal(doc.mode, "live");
  assert.match(doc.note, /not replayable/);
  assert.ok(doc.events.length > 20);
  assert.deepEqual(doc.events.map((e) => e.seq), doc.events.map((_, i) => doc.events[0].seq + i), "the whole log, in order");
  assert.equal(doc.commands, undefined, "no commands: a live run is not a run to import");
  await page.keyboard.press(",");
  await waitForStatus(page, "error", /live mode runs on real timers and IndexedDB: nothing is replayable/);
  await page.keyboard.press("k");
  await waitForStatus(page, "error", /there is no share link/);
  await shot(page, "time-live");
  noErrors(page);
});
