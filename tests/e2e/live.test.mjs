// End-to-end tests of the playground page in live mode (IndexedDB, real timers): state comes back
// after a reload, two pages race on one database without losing an acknowledged write (and draw
// distinct writer ids), and reset deletes the database. Each test gets a fresh browser profile.
//
// These tests wait on what the page shows, never on elapsed time.

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  frames, launch, latest, noErrors, openPage, shot, waitFor, waitForStatus, serveForTests,
} from "./helpers.mjs";
import { axisTimes, ticks } from "../../www/spec.js";
import { renderFrontiers } from "../../www/render/frontiers.js";

const server = serveForTests();

const shardOf = (snap, name) => snap.shards.find((s) => s.name === name);

/**
 * Times no panel may show in live mode (issue 16): a negative time, or an epoch-sized one (a raw
 * Date.now() number, or a time of millions of seconds). Live time counts from the database's
 * creation (src/playground/clock.rs).
 */
async function badTimes(page) {
  const text = await page.locator("section.panel").evaluateAll((els) => els.map((e) => e.innerText).join("\n"));
  const bad = [];
  for (const m of text.matchAll(/(^|[^\w.\]])(-\d[\d.]*) ?(ms|s)\b/g)) bad.push(m[2] + " " + m[3]);
  // (A scenario's seed is a 64-bit number too, and no time: "seed N" is left out.)
  for (const m of text.matchAll(/(?<!seed )\b\d{12,}\b/g)) bad.push(m[0]);
  for (const m of text.matchAll(/\b(\d{7,}(\.\d+)?) s\b/g)) bad.push(m[0]);
  // A float's error printed as a time ("1206.6000000000001 ms": an axis tick over ~1 ms).
  for (const m of text.matchAll(/\b\d+\.\d{3,} ?(ms|s)\b/g)) bad.push(m[0]);
  return bad;
}

test("the frontiers axis over a history of ~1 ms: whole-ms ticks, no float error in a label", () => {
  assert.deepEqual(ticks(1206, 1207, 6, 1), [1206, 1207]);
  assert.deepEqual(ticks(0, 1.2, 6), [0, 0.2, 0.4, 0.6, 0.8, 1, 1.2]);
  assert.deepEqual(ticks(0.1, 0.7, 6), [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]);
  const snap = (nowMs) => ({ nowMs, shards: [{ name: "s", upper: nowMs - 3, since: 0 }], actors: [], upsert: null });
  const el = { querySelectorAll: () => [] };
  renderFrontiers(el, [snap(1206), snap(1206.5), snap(1207)], 0);
  const labels = [...el.innerHTML.matchAll(/class="tick-label"[^>]*>([^<]*)</g)].map((m) => m[1]);
  const times = labels.filter((l) => !/^\d+ ms$/.test(l) || Number(l.split(" ")[0]) > 1000);
  assert.deepEqual(times, ["1206 ms", "1207 ms"], labels.join(" | "));
});

test("a chart's time axis labels every tick in one unit: never 9500 ms beside 10.0 s", () => {
  // The time ticks (centred under their time; the lag ticks are right-aligned, in ms).
  const labels = (html) => [...html.matchAll(/class="tick-label" text-anchor="middle">([^<]*)</g)].map((m) => m[1]);
  const snap = (nowMs) => ({ nowMs, shards: [{ name: "s", upper: nowMs - 3, since: 0 }], actors: [], upsert: null });
  const el = { querySelectorAll: () => [] };
  // A history across 10 s: every time tick in seconds (fmtMs said 8000 ms, 9000 ms, 10.0 s).
  renderFrontiers(el, [snap(8000), snap(9000), snap(11_000)], 0);
  const across = labels(el.innerHTML);
  assert.deepEqual(across, ["8.0 s", "8.5 s", "9.0 s", "9.5 s", "10.0 s", "10.5 s", "11.0 s"]);
  // Below 10 s: all in ms.
  renderFrontiers(el, [snap(2000), snap(9000)], 0);
  const early = labels(el.innerHTML);
  assert.ok(early.length > 2 && early.every((l) => /^\d+ ms$/.test(l)), early.join(" | "));
  // Fine steps get the decimals they need (no two ticks alike); whole seconds need none.
  const fine = axisTimes([10_000, 10_050, 10_100], 0, [10_120]);
  assert.deepEqual([10_000, 10_050, 10_100].map(fine.tick), ["10.00 s", "10.05 s", "10.10 s"]);
  assert.equal(fine.at(10_120), "10.12 s");
  const whole = axisTimes([0, 2000, 4000], 0, [9_500, 12_345]);
  assert.deepEqual([...[0, 2000, 4000].map(whole.tick), whole.at(9_500), whole.at(12_345)], ["0 s", "2 s", "4 s", "9.5 s", "12.3 s"]);
  // A since or upper past 10 s puts the whole axis in seconds; an empty frontier is ∅.
  const upper = axisTimes([8000, 9000], 0, [10_500, null]);
  assert.deepEqual([upper.tick(8000), upper.at(10_500), upper.at(null)], ["8 s", "10.5 s", "∅"]);
});

test("live mode: shards, the oracle and the write task's rows come back from IndexedDB after a reload", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const db = `e2e-reload-${process.pid}`;
  const page = await openPage(ctx, server.url(`?mode=live&db=${db}`));
  assert.match(await page.getByTestId("mode").textContent(), new RegExp(`live · ${db}`));
  // The seed field's number is said in words: drawn at random, what it picks, and no replay.
  assert.match(await page.getByTestId("seed").inputValue(), /^\d+$/);
  assert.ok(await page.getByTestId("seed-hint").isVisible(), "the seed's line shows in live mode");
  assert.match(await page.getByTestId("seed-hint").textContent(), /^The seed, drawn at random for this page, picks the ids .* the same seed does not replay a run\.$/);
  assert.match(await page.getByTestId("play").textContent(), /Pause/, "live mode plays (follows its actors); only the page pauses");
  assert.ok(await page.getByTestId("step").isDisabled(), "live mode cannot be stepped");
  await waitFor(page, () => document.querySelectorAll("#processes-view li[data-actor]").length === 7, "the default actors");
  await page.locator('button[data-action="push"][data-actor="T1"][data-rows="10"]').click();
  await page.locator('button[data-action="push"][data-actor="T1"][data-rows="1"]').click();
  await waitFor(page, () => {
    const s = window.__playground.state.latest();
    const data = s.shards.find((x) => x.name === "data");
    const task = s.actors.find((a) => a.id === "T1").detail;
    const oracle = s.actors.find((a) => a.id === "O1").detail;
    return data.seqno > 8 && data.updates > 4 && task.desiredRows === 11 && task.writer.committed > 1 && oracle.handedOut > 2 && s.upsert.checker.checks > 2;
  }, "writes, the task's rows, oracle timestamps and checked upsert output", null, 30_000);
  const before = await latest(page);
  const beforeData = shardOf(before, "data");
  const beforeTask = shardOf(before, "mz_task");
  const beforeOracle = before.actors.find((a) => a.id === "O1").detail;
  assert.deepEqual(await badTimes(page), [], "no negative or epoch-sized time before the reload");
  await shot(page, "live-before-reload");

  await page.reload();
  await waitForStatus(page, "ok", new RegExp(`^ready: live mode on IndexedDB database ${db}$`));
  // The same actors start again (this tab's layout), in new processes with new handles.
  await waitFor(page, () => document.querySelectorAll("#processes-view li[data-actor]").length === 7, "the actors again");
  await waitFor(
    page,
    ([seqno, upper, taskUpper]) => {
      const s = window.__playground.state.latest();
      const data = s.shards.find((x) => x.name === "data");
      const task = s.shards.find((x) => x.name === "mz_task");
      return data.seqno >= seqno && data.upper >= upper && task && task.upper >= taskUpper;
    },
    "the shards' state read back from IndexedDB",
    [beforeData.seqno, beforeData.upper, beforeTask.upper],
  );
  await waitFor(page, (n) => window.__playground.state.latest().actors.find((a) => a.id === "T1").detail.desiredRows === n, "the task's desired rows, from the shard", 11);
  await waitFor(page, () => window.__playground.state.latest().actors.find((a) => a.id === "O1").detail.firstTs !== null && window.__playground.state.latest().actors.find((a) => a.id === "O1").detail.firstTs !== undefined, "a timestamp from the restarted oracle");
  // The upsert source comes back from its shard, and the output still matches the model.
  await waitFor(page, (n) => {
    const u = window.__playground.state.latest().upsert;
    return u && u.sourceMessages >= n && u.checker.checks > 0;
  }, "the upsert source read back", before.upsert.sourceMessages);
  assert.deepEqual((await latest(page)).upsert.checker.violations, [], "the replicas' output matches the reference model after the reload");
  const afterOracle = (await latest(page)).actors.find((a) => a.id === "O1").detail;
  assert.ok(afterOracle.firstTs > beforeOracle.writeTs, `the oracle resumes above every timestamp handed out before (${afterOracle.firstTs} > ${beforeOracle.writeTs})`);
  assert.ok(afterOracle.epoch > beforeOracle.epoch, "a new epoch");
  const data = shardOf(await latest(page), "data");
  assert.ok(data.updates >= beforeData.updates, "no update lost across the reload");
  assert.deepEqual(await badTimes(page), [], "no negative or epoch-sized time after the reload");
  await shot(page, "live-after-reload");
  noErrors(page);
});

test("two pages race on one database: distinct writer ids, both pages' writes in the shard, no acknowledged write lost", { timeout: 120_000 }, async (t) => {
  const ctx = await launch(t);
  const db = `e2e-race-${process.pid}`;
  const url = server.url(`?mode=live&db=${db}&empty=1`);
  const a = await openPage(ctx, url);
  const b = await openPage(ctx, url);
  for (const page of [a, b]) {
    await page.getByTestId("w-rate").fill("25");
    await page.getByTestId("add-writer").click();
    await waitForStatus(page, "ok", /added W1 to P1 on data/);
  }
  // Both writers register in the one shard; each page sees its own and the other's.
  for (const page of [a, b]) {
    await waitFor(page, () => window.__playground.state.latest().shards.find((s) => s.name === "data").writers.length === 2, "two writers in the shard", null, 30_000);
  }
  const idA = (await latest(a)).actors[0].handleId;
  const idB = (await latest(b)).actors[0].handleId;
  assert.ok(idA && idB, "both writers opened");
  assert.notEqual(idA, idB, "two pages draw distinct writer ids (per-page seeds from crypto.getRandomValues)");
  const seenByA = shardOf(await latest(a), "data").writers;
  assert.deepEqual(seenByA.map((w) => w.actor).sort(), ["W1", null].sort(), "page A knows its writer; the other is foreign");
  // Race until both have committed plenty and lost races to each other.
  for (const page of [a, b]) {
    await waitFor(page, () => {
      const w = window.__playground.state.latest().actors[0].detail;
      return w.committed > 20;
    }, "20 commits", null, 60_000);
  }
  const mismatches = (await latest(a)).actors[0].detail.mismatches + (await latest(b)).actors[0].detail.mismatches;
  assert.ok(mismatches > 0, "the two processes raced: someone lost a compare_and_append");
  // Each page checks its own acknowledged writes, and sees the other page's rows.
  for (const page of [a, b]) {
    await page.getByTestId("verify").click();
    await waitFor(page, () => document.querySelector("#verify-view .verify[data-lost]"), "the check's result", null, 30_000);
    const el = page.locator("#verify-view .verify");
    const text = await el.textContent();
    assert.equal(await el.getAttribute("data-lost"), "0", text);
    assert.ok(Number(await el.getAttribute("data-acked")) > 20, text);
    assert.ok(Number(await el.getAttribute("data-foreign")) > 0, `the other page's writes are in the shard: ${text}`);
  }
  // Each page's Consensus log lists the versions the other page wrote, marked as another tab's.
  for (const page of [a, b]) {
    // One condition, on one snapshot and the panel drawn from it: the log is a window of the
    // newest versions, so a check of a later snapshot could miss what the panel showed.
    await waitFor(
      page,
      () =>
        window.__playground.state.latest().consensus.some((c) => c.process === "another tab" && c.key === "data") &&
        /another tab/.test(document.getElementById("consensus-view").textContent),
      "versions of data written by the other tab, in the snapshot and the Consensus log",
      null,
      30_000,
    );
  }
  await shot(a, "live-race-page-a");
  await shot(b, "live-race-shard-b", "#panel-shard");
  noErrors(a);
  noErrors(b);
});

test("live mode: reset database deletes it and starts the actors again on an empty one", { timeout: 60_000 }, async (t) => {
  const ctx = await launch(t);
  const db = `e2e-reset-${process.pid}`;
  const page = await openPage(ctx, server.url(`?mode=live&db=${db}`));
  await waitFor(page, () => window.__playground.state.latest().shards.find((s) => s.name === "data").seqno > 10, "some versions", null, 30_000);
  // The Seed field shows live mode's own seed, the one its notice names, and cannot be edited
  // (a live run cannot be replayed from a seed): WALK4 saw "1" beside "live mode, seed 8181…".
  const seedField = await page.evaluate(() => ({ value: document.getElementById("seed").value, disabled: document.getElementById("seed").disabled, title: document.getElementById("seed").title }));
  assert.equal(seedField.value, String((await latest(page)).seed), "the field shows the run's seed");
  assert.ok(seedField.disabled && /cannot replay/.test(seedField.title), `disabled, with why: ${JSON.stringify(seedField)}`);
  const before = shardOf(await latest(page), "data").seqno;
  await page.getByTestId("reset-db").click();
  await waitForStatus(page, "ok", new RegExp(`^reset: deleted ${db} and started again, empty$`));
  const after = shardOf(await latest(page), "data").seqno;
  assert.ok(after < before, `a fresh shard (${after} < ${before})`);
  await waitFor(page, () => document.querySelectorAll("#processes-view li[data-actor]").length === 7, "the actors again");
  await waitFor(page, () => /●/.test(document.getElementById("writers-view").textContent), "writers commit on the new database", null, 30_000);
  noErrors(page);
});

test("live mode: a panel whose data did not change is not drawn again; paused and untouched, the page pulls and draws nothing while the actors run on", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const db = `e2e-idle-${process.pid}`;
  const page = await openPage(ctx, server.url(`?mode=live&db=${db}`));
  // The mode's hint says what Pause does here: the view stops, the actors do not.
  assert.match(await page.locator("#mode-hint").textContent(), /^Live mode: .* Pause freezes this view; the actors keep running\.$/);
  await waitFor(page, () => window.__playground.state.latest().actors.find((a) => a.id === "W1")?.detail.committed > 2, "W1 commits", null, 30_000);
  // Playing: the page follows the actors (the Shard panel's data, the shard and the clock, moves
  // with every pull), but the Rules panel's data (the rules, and which actors run without one)
  // stays the same, and it is not drawn again. (view.panelMs: the page benchmark's per-panel
  // record of draws.)
  const drawCounts = () => page.evaluate(() => Object.fromEntries(Object.entries(window.__playground.view.panelMs).map(([k, v]) => [k, v.length])));
  await page.evaluate(() => (window.__playground.view.panelMs = {}));
  const seqBefore = (await latest(page)).lastSeq;
  await waitFor(page, () => (window.__playground.view.panelMs.shard?.length ?? 0) >= 3, "the Shard panel drawn three times", null, 30_000);
  const playing = await drawCounts();
  assert.ok((await latest(page)).lastSeq > seqBefore, "the page pulled newer snapshots");
  assert.equal(playing.rules ?? 0, 0, `the Rules panel's data did not change: not drawn again (draws: ${JSON.stringify(playing)})`);

  // Paused: no pull (a pull replaces the latest snapshot with a new object) and no draw (a drawn
  // frame records its time; each panel drawn records its cost), while the engine logs new events.
  await page.getByTestId("play").click();
  await waitForStatus(page, "ok", /^paused: this page stops following the actors/);
  assert.match(await page.getByTestId("play").textContent(), /Play/);
  await frames(page, 3); // the click's draw
  const idle = () => page.evaluate(() => {
    const v = window.__playground.view;
    return { same: window.__playground.state.latest() === window.__idleSnap, frames: v.frameMs.length, panels: Object.values(v.panelMs).reduce((n, xs) => n + xs.length, 0) };
  });
  await page.evaluate(() => (window.__idleSnap = window.__playground.state.latest()));
  const idleBefore = await idle();
  assert.ok(idleBefore.same);
  const pausedSeq = (await latest(page)).lastSeq;
  // The actors run on: the engine has logged events the page has not pulled.
  await waitFor(page, (seq) => window.__playground.pg().eventsAfter(seq, 1).length > 0, "the actors to log an event while the page is paused", pausedSeq);
  await frames(page, 30);
  assert.deepEqual(await idle(), idleBefore, "paused and untouched: no pull, no draw");
  // Input while paused draws what the page holds, and pulls nothing: the Shard panel shows the
  // picked shard.
  await page.getByTestId("shard-pick").selectOption("mz_task");
  await waitFor(page, () => /shard mz_task$/.test(document.querySelector("#shard-view svg")?.getAttribute("aria-label") ?? ""), "the Shard panel to show mz_task while paused");
  assert.equal((await idle()).same, true, "a view choice while paused pulls nothing");
  await page.getByTestId("shard-pick").selectOption("data");

  // Play: the page follows the actors again, from their newest state.
  await page.getByTestId("play").click();
  await waitForStatus(page, "ok", /^playing$/);
  await waitFor(page, (seq) => window.__playground.state.latest().lastSeq > seq, "a snapshot newer than the paused one", pausedSeq);
  noErrors(page);
});
