// End-to-end tests of the playground page in live mode (IndexedDB, real timers): state comes back
// after a reload, two pages race on one database without losing an acknowledged write (and draw
// distinct writer ids), and reset deletes the database. Each test gets a fresh browser profile.
//
// These tests wait on what the page shows, never on elapsed time.

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  launch, latest, noErrors, openPage, shot, waitFor, waitForStatus, serveForTests,
} from "./helpers.mjs";

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
  return bad;
}

test("live mode: shards, the oracle and the write task's rows come back from IndexedDB after a reload", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const db = `e2e-reload-${process.pid}`;
  const page = await openPage(ctx, server.url(`?mode=live&db=${db}`));
  assert.match(await page.getByTestId("mode").textContent(), new RegExp(`live · ${db}`));
  assert.ok(await page.getByTestId("play").isDisabled(), "live mode cannot be paused");
  assert.ok(await page.getByTestId("step").isDisabled(), "nor stepped");
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
    await waitFor(page, () => /another tab/.test(document.getElementById("consensus-view").textContent), "the other tab's versions in the Consensus log", null, 30_000);
    const foreign = (await latest(page)).consensus.filter((c) => c.process === "another tab" && c.key === "data");
    assert.ok(foreign.length > 0, "versions of data written by the other tab");
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
  const before = shardOf(await latest(page), "data").seqno;
  await page.getByTestId("reset-db").click();
  await waitForStatus(page, "ok", new RegExp(`^reset: deleted ${db} and started again, empty$`));
  const after = shardOf(await latest(page), "data").seqno;
  assert.ok(after < before, `a fresh shard (${after} < ${before})`);
  await waitFor(page, () => document.querySelectorAll("#processes-view li[data-actor]").length === 7, "the actors again");
  await waitFor(page, () => /●/.test(document.getElementById("writers-view").textContent), "writers commit on the new database", null, 30_000);
  noErrors(page);
});
