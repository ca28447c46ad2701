// End-to-end tests of the check panel (www/render/check.js): in a default seed-mode run with
// faults on, every rule's count of checks goes up and nothing breaks, with no console error; and
// a violation (drawn from a made-up snapshot) shows in red, and a click on it lists the events it
// cites and the faults beside them, and marks them in the event log view.
//
// Run: node --test tests/e2e/check.test.mjs     (needs pkg/: bash scripts/build.sh)

import { test } from "node:test";
import assert from "node:assert/strict";
import { launch, newPage, noErrors, openPage, shot, tourSettled, waitFor, serveForTests } from "./helpers.mjs";

const server = serveForTests();

const RULES = [
  "append-chain", "frontier-regress", "ack-lost", "ack-duplicate", "task-desired",
  "oracle-regress", "oracle-duplicate", "oracle-bound", "upsert-model",
];

/** Checks per rule, as the panel shows them. */
function checksShown(page) {
  return page.evaluate((rules) => Object.fromEntries(rules.map((r) => {
    const li = document.querySelector(`[data-testid="check-rule-${r}"]`);
    return [r, li ? { checks: Number(li.dataset.checks), violations: Number(li.dataset.violations), text: li.textContent } : null];
  })), RULES);
}

test("a faulty default run: every rule is checked more and more, and nothing breaks", { timeout: 120_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=1"));
  // Faults on both services: 5% of calls fail, 5% time out.
  for (const id of ["f-cons-fail", "f-cons-timeout", "f-blob-fail", "f-blob-timeout"]) await page.fill(`#${id}`, "5");
  await page.click("[data-testid=apply-faults]");
  await waitFor(page, () => window.__playground.state.latest().faults.consensus.knobs.failRate > 0, "the faults applied");
  // The same run 16 times as fast: the virtual seconds below pass in a fraction of their wall time.
  await page.getByTestId("speed").selectOption("16");
  await waitFor(page, () => window.__playground.state.latest().nowMs > 4_000, "4 s of the run");
  const first = await checksShown(page);
  for (const r of RULES) assert.ok(first[r], `the panel lists ${r}`);
  // More virtual time: every count goes up (the default actors exercise every rule).
  await waitFor(
    page,
    ([rules, before]) => {
      const snap = window.__playground.state.latest();
      if (snap.nowMs < 12_000) return false;
      return rules.every((r) => Number(document.querySelector(`[data-testid="check-rule-${r}"]`)?.dataset.checks) > before[r].checks);
    },
    "every rule's count to go up",
    [RULES, first],
    60_000,
  );
  const later = await checksShown(page);
  for (const r of RULES) {
    assert.ok(later[r].checks > first[r].checks, `${r}: ${first[r].checks} -> ${later[r].checks}`);
    assert.equal(later[r].violations, 0, `${r} breaks nothing: ${later[r].text}`);
    assert.match(later[r].text, /\d+ checks, no break/);
  }
  const summary = page.locator("[data-testid=check-summary]");
  assert.equal(await summary.getAttribute("data-violations"), "0");
  assert.match(await summary.textContent(), /checks, no break over \d+ events/);
  assert.equal(await page.locator("[data-testid=check-violation]").count(), 0);
  // Faults really fired in this run (the check ran through them).
  const faults = await page.evaluate(() => window.__playground.state.latest().faults.consensus);
  assert.ok(faults.failed + faults.timedOut + faults.happenedThenTimedOut > 0, JSON.stringify(faults));
  await shot(page, "check-panel-faulty-run", "#panel-check");
  await shot(page, "check-page-faulty-run");
  noErrors(page);
});

test("a violation shows in red; a click lists the events it cites and marks them in the log", { timeout: 60_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=1&autoplay=0"));
  // Draw the panel module into a scratch element from a made-up report with one violation; the
  // events it cites are in the page's recent events.
  const result = await page.evaluate(async () => {
    const { renderCheck, markCited } = await import("./www/render/check.js");
    const el = document.createElement("div");
    el.id = "scratch-check";
    document.body.append(el);
    const log = document.createElement("ol");
    log.innerHTML = [7, 8, 9, 10].map((s) => `<li data-seq="${s}">event ${s}</li>`).join("");
    document.body.append(log);
    const ev = (seq, detail) => ({ seq, atMs: seq * 10, actor: "W1", process: "P1", component: "writer", kind: "k", outcome: "committed", detail });
    const state = { events: () => [ev(7, "a fault"), ev(9, "the ack"), ev(10, "the store")] };
    const rule = (r, v) => ({ rule: r, title: `${r} title`, checks: 5, violations: v, unverified: 0 });
    const snap = {
      check: {
        events: 10, facts: 8, violationsTotal: 1,
        rules: [rule("append-chain", 0), rule("ack-lost", 1)],
        violations: [{ rule: "ack-lost", message: "data: W1's acknowledged write is not in the shard", atMs: 100, seqs: [9, 10], faults: [7] }],
      },
    };
    renderCheck(el, snap, state, 0);
    const red = el.querySelector('[data-testid="check-rule-ack-lost"]').className;
    const green = el.querySelector('[data-testid="check-rule-append-chain"]').textContent;
    const item = el.querySelector("[data-testid=check-violation]").textContent;
    el.querySelector("a.focus").click();
    el.__html = null;
    renderCheck(el, snap, state, 0);
    markCited(log);
    return {
      red, green, item,
      summary: el.querySelector("[data-testid=check-summary]").textContent,
      evidence: [...el.querySelectorAll("[data-testid=check-evidence] li")].map((li) => `${li.className}:${li.textContent}`),
      marked: [...log.querySelectorAll("li")].map((li) => `${li.dataset.seq}:${li.className}`),
    };
  });
  assert.match(result.red, /broken/);
  assert.match(result.green, /5 checks, no break/);
  assert.match(result.item, /ack-lost.*not in the shard.*#9 #10.*faults beside it: #7/s);
  assert.match(result.summary, /1 break found/);
  assert.deepEqual(result.evidence.map((e) => e.split(":")[0]), ["fault", "cited", "cited"]);
  assert.match(result.evidence[1], /#9.*the ack/);
  assert.deepEqual(result.marked, ["7:fault-near", "8:", "9:cited", "10:cited"]);
  await shot(page, "check-panel-violation", "#scratch-check");
  noErrors(page);
});

test("live mode, two pages racing on one database: each page's check follows both and breaks nothing", { timeout: 150_000 }, async (t) => {
  const ctx = await launch(t);
  const db = `pp-check-e2e-${process.pid}-${Date.now()}`;
  const url = server.url(`?mode=live&db=${db}&empty=1`);
  const a = await openPage(ctx, url);
  const b = await openPage(ctx, url);
  for (const page of [a, b]) {
    await page.getByTestId("w-rate").fill("25");
    await page.getByTestId("add-writer").click();
  }
  // Each page's check reads every version of the shared shard (both pages' appends) and checks
  // its own writer's acknowledged writes. The panel is scrolled into view, where it redraws every
  // third frame: off screen, the first of two pages redrew it seldom or never (the counts stayed
  // at their first value for a minute while the snapshot's went past 600), and the wait failed.
  for (const page of [a, b]) {
    await page.locator("#panel-check").scrollIntoViewIfNeeded();
    await waitFor(
      page,
      () => ["append-chain", "ack-lost", "ack-duplicate", "frontier-regress"].every(
        (r) => Number(document.querySelector(`[data-testid="check-rule-${r}"]`)?.dataset.checks) > 20,
      ),
      "the check's counts in live mode",
      null,
      90_000,
    );
  }
  for (const page of [a, b]) {
    const shown = await checksShown(page);
    for (const r of RULES) assert.equal(shown[r].violations, 0, `${r}: ${shown[r].text}`);
    assert.equal(await page.locator("[data-testid=check-summary]").getAttribute("data-violations"), "0");
    noErrors(page);
  }
  await shot(a, "check-panel-live-two-pages", "#panel-check");
});

test("live mode, the default actors across a reload: the check starts again from the store and breaks nothing", { timeout: 150_000 }, async (t) => {
  const ctx = await launch(t);
  const db = `pp-check-reload-${process.pid}-${Date.now()}`;
  const page = await openPage(ctx, server.url(`?mode=live&db=${db}`));
  const counted = (rules, least) => waitFor(
    page,
    ([rs, n]) => rs.every((r) => Number(document.querySelector(`[data-testid="check-rule-${r}"]`)?.dataset.checks) > n),
    `${rules.join(", ")} checked more than ${least} times`,
    [rules, least],
    90_000,
  );
  const live = ["append-chain", "frontier-regress", "ack-lost", "ack-duplicate", "task-desired", "oracle-regress", "oracle-bound", "upsert-model"];
  await counted(live, 3);
  await page.reload();
  await waitFor(page, () => /^ready: live mode/.test(document.getElementById("status")?.textContent ?? ""), "the page ready again");
  // After the reload the shards already hold data: the store observer starts from their state.
  await counted(live, 3);
  const shown = await checksShown(page);
  for (const r of RULES) assert.equal(shown[r].violations, 0, `${r}: ${shown[r].text}`);
  await shot(page, "check-panel-live-after-reload", "#panel-check");
  noErrors(page);
});

test("a tour step with many breaks: the newest are shown whole (no list box clips them), the older fold away", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await newPage(ctx);
  await page.goto(server.url("?tour=rule-idempotency-token&step=2&animate=0"));
  await tourSettled(page, "rule-idempotency-token", 2);
  const seen = await page.evaluate(() => {
    const panel = document.getElementById("panel-check");
    const list = panel.querySelector("[data-testid=check-violations]");
    const p = panel.getBoundingClientRect();
    const items = [...list.querySelectorAll(":scope > li")].map((li) => {
      const r = li.getBoundingClientRect();
      return { top: r.top, bottom: r.bottom, text: li.textContent };
    });
    return {
      total: Number(panel.querySelector("[data-testid=check-summary]").dataset.violations),
      shownLine: panel.querySelector("[data-testid=check-shown]")?.textContent ?? "",
      scrolls: list.scrollHeight > list.clientHeight + 1,
      panelBottom: p.bottom,
      items,
      older: panel.querySelectorAll("[data-testid=check-violations-older] > li").length,
      olderOpen: panel.querySelector(".check-older")?.open ?? null,
    };
  });
  assert.ok(seen.total > 4, `the broken run has breaks: ${seen.total}`);
  assert.equal(seen.items.length, 4, "the newest 4 in full");
  assert.match(seen.shownLine, new RegExp(`the newest 4 of ${seen.total} breaks, newest first`));
  assert.equal(seen.scrolls, false, "the list is no box that scrolls (nothing cut at its edge)");
  for (const it of seen.items) assert.ok(it.bottom <= seen.panelBottom, `inside the panel: ${it.text}`);
  assert.equal(seen.older, Math.min(12, seen.total - 4), "the older ones fold away");
  assert.equal(seen.olderOpen, false);
  await shot(page, "check-panel-many-breaks", "#panel-check");
  noErrors(page);
});
