// End-to-end tests of the Event log panel (www/render/log.js) and of what a new run resets:
//   - the actor and kind filters show exactly the newest matching events of the engine's own log
//     (compared with `eventsAfter`), and clearing them goes back to the newest rows;
//   - no row's text is cut (each detail wraps inside its row);
//   - a Check break whose cited events are older than the log's rows still marks them: the log
//     shows the events around the cited one, read from the engine's bounded log;
//   - a tour opened by URL shows no event of the page's first run, and its status is the tour's;
//     a run replaced by a tour replaces the status line too;
//   - a share link opens with the Faults form showing the replayed run's fault settings.
//
// Run: node --test tests/e2e/log.test.mjs     (needs pkg/: bash scripts/build.sh)

import { test } from "node:test";
import assert from "node:assert/strict";
import { launch, latest, noErrors, openPage, waitFor, waitForStatus, NAVIGATION_TIMEOUT_MS, serveForTests } from "./helpers.mjs";

const server = serveForTests();

/** The seqs the log shows, newest first. */
const shownSeqs = (page) => page.locator("#log-view li[data-seq]").evaluateAll((lis) => lis.map((li) => Number(li.dataset.seq)));

/** The newest `n` events of the engine's log that `pred` (a source string of `(e) => bool`) keeps, newest first. */
function engineNewest(page, pred, n = 60) {
  return page.evaluate(([src, k]) => {
    const keep = new Function("e", `return (${src})(e)`);
    const pg = window.__playground.pg();
    const out = [];
    let cursor = 0;
    for (;;) {
      const batch = pg.eventsAfter(cursor, 5000);
      if (!batch.length) break;
      out.push(...batch.filter(keep));
      cursor = batch.at(-1).seq;
    }
    return out.slice(-k).map((e) => e.seq).reverse();
  }, [pred, n]);
}

test("the event log filters by actor and by kind, from the engine's log, and cuts no text", { timeout: 90_000 }, async (t) => {
  const page = await openPage(await launch(t), server.url("?seed=3"));
  await waitFor(page, () => window.__playground.state.latest().lastSeq > 600, "a few hundred events");
  await page.keyboard.press(" ");
  await waitFor(page, () => !window.__playground.view.playing, "the run to pause");
  // W1's events are a small share of the log: most of the newest 60 are older than the page's tail.
  await page.selectOption("#log-actor", "W1");
  await waitFor(page, () => /of W1/.test(document.getElementById("log-note").textContent), "the note on the filter");
  assert.deepEqual(await shownSeqs(page), await engineNewest(page, "(e) => e.actor === 'W1' || e.process === 'W1'"), "the newest events of W1, from the engine's log");
  const chips = await page.locator("#log-view li[data-seq] .chip").allTextContents();
  assert.ok(chips.length > 0 && chips.every((c) => c === "W1"), "every row is W1's");
  // Both filters at once.
  await page.selectOption("#log-kind", "compare_and_append");
  await waitFor(page, () => /kind compare_and_append/.test(document.getElementById("log-note").textContent), "the kind filter");
  const both = await shownSeqs(page);
  assert.ok(both.length > 0, "W1 made compare_and_appends");
  assert.deepEqual(both, await engineNewest(page, "(e) => (e.actor === 'W1' || e.process === 'W1') && e.kind === 'compare_and_append'"), "the newest compare_and_appends of W1");
  // Filters off: the newest rows again.
  await page.selectOption("#log-actor", "");
  await page.selectOption("#log-kind", "");
  await waitFor(page, () => document.getElementById("log-note").hidden, "the note gone");
  assert.deepEqual(await shownSeqs(page), await engineNewest(page, "() => true"), "the newest 60 events");
  // No cut text: every detail fits its box (it wraps), every row shows all it holds.
  const cut = await page.locator("#log-view li[data-seq]").evaluateAll((lis) => lis
    .filter((li) => li.scrollWidth > li.clientWidth + 1 || [...li.children].some((c) => c.scrollWidth > c.clientWidth + 1))
    .map((li) => li.dataset.seq));
  assert.deepEqual(cut, [], "rows whose text is cut");
  // The log is a focusable scroll box, so the keyboard scrolls it.
  assert.equal(await page.locator("#log-view").getAttribute("tabindex"), "0");
  noErrors(page);
});

test("a Check break whose events are older than the log's rows still marks them", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await ctx.newPage();
  page.setDefaultNavigationTimeout(NAVIGATION_TIMEOUT_MS);
  page.errors = [];
  page.on("pageerror", (err) => page.errors.push(`pageerror: ${err}`));
  await page.goto(server.url("?tour=rule-idempotency-token&step=2&autoplay=0&animate=0"));
  await waitFor(page, () => document.querySelector("[data-testid=tour-card]")?.dataset.state === "settled", "the broken step");
  const oldest = Math.min(...(await shownSeqs(page)));
  // The older breaks fold under a summary (the newest few are shown whole): open it, as a reader
  // would, to reach the oldest break listed.
  const older = page.locator("details.check-older > summary");
  if (await older.count()) await older.click();
  // The oldest break listed: its events are far older than the newest rows.
  const link = page.locator("[data-testid=check-violation] a.focus").last();
  const index = Number(await link.getAttribute("data-index"));
  const cited = (await latest(page)).check.violations[index].seqs;
  assert.ok(cited[0] < oldest, `the break cites #${cited[0]}, older than the log's oldest row #${oldest}`);
  await link.click();
  await waitFor(page, (s) => document.querySelector(`#log-view li[data-seq="${s}"]`)?.classList.contains("cited"), `#${cited[0]} marked in the log`, cited[0]);
  assert.match(await page.getByTestId("log-note").textContent(), new RegExp(`events around #${cited[0]}`));
  const box = await page.locator(`#log-view li[data-seq="${cited[0]}"]`).evaluate((li) => {
    const r = li.getBoundingClientRect();
    const v = document.getElementById("log-view").getBoundingClientRect();
    return r.top >= v.top - 1 && r.bottom <= v.bottom + 1;
  });
  assert.ok(box, "the cited row is scrolled into the log's view");
  // Back to the newest rows.
  await page.locator("[data-log-action=newest]").click();
  await waitFor(page, () => document.getElementById("log-note").hidden, "the newest rows again");
  noErrors(page);
});

test("a run replaced by a tour starts the log and the status line over; a share link's faults show in the form", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  // A tour opened by URL: none of the first run's events (seed 1) stays in the log.
  const page = await ctx.newPage();
  page.setDefaultNavigationTimeout(NAVIGATION_TIMEOUT_MS);
  await page.goto(server.url("?tour=writers-race&step=1&animate=0"));
  await waitFor(page, () => document.querySelector("[data-testid=tour-card]")?.dataset.state === "settled", "the tour step");
  const rows = await page.locator("#log-view li[data-seq]").allTextContents();
  assert.ok(rows.some((r) => /seed mode, seed 12\b/.test(r)), "the tour's run (seed 12) is in the log");
  assert.ok(!rows.some((r) => /seed mode, seed 1\b/.test(r)), "nothing of the page's first run (seed 1)");
  assert.match(await page.locator("#status").textContent(), /^tour "two writers racing": step 1 of/);

  // A status about the old run does not outlive it: corrupt, then open a tour from the picker.
  const p2 = await openPage(ctx, server.url("?seed=2&autoplay=0"));
  await p2.getByTestId("corrupt").click();
  await waitForStatus(p2, "ok", /^corrupting /);
  await p2.locator('[data-testid=tour-list] a[data-tour="upper-since"]').click();
  await waitFor(p2, () => /^tour "upper and since": step 1 of/.test(document.getElementById("status").textContent), "the tour's status");

  // A share link of a run with 10% Consensus timeouts opens with the form saying so.
  const a = await openPage(ctx, server.url("?seed=5&autoplay=0"));
  await a.getByTestId("f-cons-timeout").fill("10");
  await a.getByTestId("apply-faults").click();
  await a.getByTestId("step").click();
  await a.getByTestId("t-share").click();
  await waitForStatus(a, "ok", /^share link for step \d+/);
  const link = await a.getByTestId("t-link").inputValue();
  const b = await openPage(await launch(t), link);
  await waitForStatus(b, "ok", /^ready: opened the share link/);
  assert.equal((await latest(b)).faults.consensus.knobs.timeoutRate, 0.1, "the replayed run has 10% timeouts");
  assert.equal(await b.getByTestId("f-cons-timeout").inputValue(), "10", "the Faults form shows them");
  assert.equal(await b.getByTestId("f-cons-fail").inputValue(), "0");
  for (const p of [p2, a, b]) noErrors(p);
});

/** What reads as code, not as a sentence: persist's reason names, frontier lists, a replica's internal name. */
const CODE = /Upper\(|\[\d*\], writer|NotApplied|Backpressure|AlreadyCommitted|Expired\b|U\d#\d/;
/** A raw persist handle id. */
const RAW_ID = /\b[wr][0-9a-f]{24}\b/;
/** A count of one with a plural noun. */
const ONE_MANY = /(^|[^\d.,])1 (updates|rows|versions|blobs|rollups|actors|commands|checks|events|parts|msgs|snapshots|stash entries|writes)\b/;

test("every event reads as a sentence: no persist reason code, no raw handle id for an actor, no '1 rows'; the Consensus log names U1/U2", { timeout: 120_000 }, async (t) => {
  const page = await openPage(await launch(t), server.url("?seed=1&autoplay=0"));
  // Faults, a crash and a restart of the replica's process: lost races, skipped commands,
  // merges not applied, and a replica's second generation.
  await page.evaluate(() => {
    const pg = window.__playground.pg();
    const f = (k) => ({ failRate: k, timeoutRate: k, latencyMs: 0, outage: false });
    for (let i = 0; i < 250; i++) {
      if (i === 50) for (const service of ["blob", "consensus"]) pg.send({ type: "setFaults", service, knobs: f(0.2) });
      if (i === 100) for (const service of ["blob", "consensus"]) pg.send({ type: "setFaults", service, knobs: f(0) });
      if (i === 120) pg.send({ type: "crashProcess", process: "P6" });
      if (i === 140) pg.send({ type: "restartProcess", process: "P6" });
      if (i === 160) pg.send({ type: "taskPush", actor: "T1", op: { op: "append", rows: 1 } });
      pg.runFor(100);
    }
  });
  await page.getByTestId("step").click();
  // Every event the engine keeps, as the log draws its detail (render/log.js plainDetail).
  const details = await page.evaluate(async () => {
    const { plainDetail } = await import("./www/render/log.js");
    const pg = window.__playground.pg();
    const out = [];
    let cursor = 0;
    for (;;) {
      const batch = pg.eventsAfter(cursor, 5000);
      if (!batch.length) break;
      out.push(...batch.map((e) => ({ raw: e.detail, shown: plainDetail(e), actor: e.actor })));
      cursor = batch.at(-1).seq;
    }
    return out;
  });
  assert.ok(details.some((d) => /nothing to commit \(Upper\(shard \[\d+\]/.test(d.raw)), "the run has a compare_and_append that lost its lower (what this test reads)");
  assert.ok(details.some((d) => /generation 1: /.test(d.shown)), "the run has a restarted replica");
  for (const d of details) {
    assert.doesNotMatch(d.shown, CODE, `reads as code: ${d.shown}`);
    assert.doesNotMatch(d.shown, ONE_MANY, `a plural for one: ${d.shown}`);
  }
  const sentence = details.find((d) => /Upper\(shard \[\d+\], writer/.test(d.raw)).shown;
  assert.match(sentence, /nothing to commit — the shard's upper is already \d+, not where this batch starts; (another writer moved it|this writer's own)/);
  // A replica's stash event says what its time is and why the messages wait ("stashed 1 source
  // update at 0" left a learner asking what "at 0" was).
  const stash = details.find((d) => /^(generation \d+: )?stashed 1 source update at \d+$/.test(d.raw));
  assert.ok(stash, "the run has a replica that stashed one source message");
  const at = /at (\d+)$/.exec(stash.raw)[1];
  assert.match(stash.shown, new RegExp(`stashed 1 source message \\(t${at}\\): it waits for the shard's state at t${at} before its update goes out$`));
  // The rows drawn say the same.
  await page.locator("#panel-log").scrollIntoViewIfNeeded();
  const rows = await page.locator("#log-view li[data-seq]").allTextContents();
  assert.ok(rows.length > 10);
  for (const r of rows) assert.doesNotMatch(r, CODE, r);
  // The replicas' handles go by U1/U2: persist rows of the upsert shard name an actor, and no
  // lost compare_and_set in the Consensus log names a raw handle id.
  const unnamed = details.filter((d) => /^upsert_out: (compare_and_append|downgrade_since|heartbeat_leased_reader) /.test(d.raw) && !d.actor);
  assert.ok(unnamed.length <= 2, `upsert_out commands of no actor: ${unnamed.slice(0, 3).map((d) => d.raw).join("\n")}`);
  const taken = await page.evaluate(() => window.__playground.state.latest().consensus.map((c) => c.takenBy).filter(Boolean));
  assert.ok(taken.some((x) => /^U\d's /.test(x)), `a lost attempt names a replica: ${taken.slice(0, 5)}`);
  for (const x of taken) assert.doesNotMatch(x, /\b[wr][0-9a-f]{20,}\b/, x);
  assert.doesNotMatch(await page.locator("#consensus-view").textContent(), /\b[wr][0-9a-f]{20,}\b/);
  // No raw handle id anywhere a learner reads (WALK3 B1): not in an event, not in any panel's
  // text (processes, since holds, Blob keys, lost races), nor in the clock footer; the digest is labelled.
  for (const d of details) assert.doesNotMatch(d.shown, RAW_ID, `an event with a raw id: ${d.shown}`);
  const shown = await page.evaluate(() => `${document.querySelector(".panels").innerText}\n${document.getElementById("clock").innerText}`);
  assert.match(shown, /W1's part pm\w+|in Blob/, "the Shard panel shows its parts");
  const raw = shown.split("\n").filter((l) => RAW_ID.test(l));
  assert.deepEqual(raw, [], "lines with a raw handle id");
  assert.match(await page.locator("#clock").innerText(), /state digest [0-9a-f]{16}/);
  noErrors(page);
});
