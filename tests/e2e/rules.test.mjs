// End-to-end tests of "break a rule on purpose": the Rules control (a switch per protocol rule,
// with its explanation; actors added while a rule is off carry a badge, actors added before keep
// their code), and, for each rule, its preset link (`?preset=RULE&rule=off|on`, www/render/rules.js),
// which opens the rule's tour (www/tours/rule-RULE.json) at its broken step or at its intact
// step, once with the rule off, where the page shows the anomaly and the
// history check flags it (the snapshot's `check` and the check panel, branch check), and once
// with it on, where the page shows none and the check panel shows no break. No console error anywhere; screenshots go to
// target/e2e-artifacts/rules-*.png (E2E_SHOTS=1).
//
// Run: node --test tests/e2e/rules.test.mjs     (needs pkg/: bash scripts/build.sh)

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  ROOT, launch, latest, noErrors, openPage, shot, waitFor, waitForStatus, serveForTests,
} from "./helpers.mjs";
import { stepOf, tourSearch } from "../../www/tours/engine.js";

const server = serveForTests();

const RULES = ["idempotency-token", "oracle-durable-bound", "upsert-feedback", "task-resync"];

/**
 * Opens a preset by clicking its link in the Rules control (www/render/rules.js `presetQuery`): the
 * rule's tour at its broken step (the last before the tour starts over) or at its intact step
 * (the last), settled; the URL becomes the step's own.
 */
async function openPreset(ctx, rule, on) {
  const page = await openPage(ctx, server.url("?seed=1&empty=1&autoplay=0"));
  await page.locator(`[data-testid=preset-${rule}-${on ? "on" : "off"}]`).click();
  const tour = JSON.parse(readFileSync(join(ROOT, "www", "tours", `rule-${rule}.json`), "utf8"));
  const step = stepOf(tour, on ? "intact" : "broken");
  await waitFor(
    page,
    ([id, s]) => {
      const c = document.querySelector("[data-testid=tour-card]");
      return c?.dataset.tour === id && c.dataset.step === String(s) && c.dataset.state === "settled" && window.__playground?.tours?.()?.settled === true;
    },
    `the ${rule} tour's ${on ? "intact" : "broken"} step`,
    [`rule-${rule}`, step],
  );
  assert.equal(new URL(page.url()).search, tourSearch(tour, step));
  return page;
}

test("the Rules control: a switch per rule, new actors take it, old ones keep their code, badges show it", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=5&empty=1&autoplay=0"));
  const boxes = page.locator("#rules-view input[data-action=rule]");
  assert.equal(await boxes.count(), 4);
  /** The history check's rule (src/playground/check/) that catches each broken protocol rule. */
const CHECK_RULE = {
  "idempotency-token": "ack-duplicate",
  "oracle-durable-bound": "oracle-regress",
  "upsert-feedback": "upsert-model",
  "task-resync": "task-desired",
};

/** The page's history check (`snapshot.check`, run in the page's wasm over its event log). */
async function pageCheck(page, rule) {
  const check = (await latest(page)).check;
  const r = check.rules.find((x) => x.rule === CHECK_RULE[rule]);
  return { total: check.violationsTotal, checks: r.checks, violations: r.violations, first: check.violations[0] };
}

for (const rule of RULES) {
    const row = page.locator(`#rules-view li[data-rule=${rule}]`);
    assert.ok(await row.locator("input").isChecked(), `${rule} starts on`);
    assert.ok((await row.locator(".hint").first().textContent()).length > 60, `${rule} is explained`);
  }
  await page.locator("[data-testid=add-task]").click();
  await page.locator("#rules-view input[data-rule=task-resync]").uncheck();
  await waitForStatus(page, "ok", /rule task-resync off: write tasks added from now on run without it \(T1 keep/);
  assert.equal((await latest(page)).rules.taskResync, false);
  await page.locator("[data-testid=add-task]").click();
  await waitFor(page, () => document.querySelector("#processes-view li[data-actor=T2] .variant[data-rule=task-resync]"), "T2's badge");
  assert.match(await page.locator("#processes-view li[data-actor=T2] .variant").textContent(), /no re-sync/);
  assert.equal(await page.locator("#processes-view li[data-actor=T1] .variant").count(), 0, "T1 was added with the rule on");
  assert.match(await page.locator("#rules-view li[data-rule=task-resync]").textContent(), /without it: T2/);
  await shot(page, "rules-control", "#rules-ctl");
  // Back on: the next task keeps the rule, T2 keeps its variant (through a restart too).
  await page.locator("#rules-view input[data-rule=task-resync]").check();
  await waitForStatus(page, "ok", /rule task-resync on/);
  await page.locator("[data-testid=add-task]").click();
  await waitFor(page, () => document.querySelector("#processes-view li[data-actor=T3]"), "T3");
  assert.equal(await page.locator("#processes-view li[data-actor=T3] .variant").count(), 0);
  const p2 = (await latest(page)).actors.find((a) => a.id === "T2").process;
  await page.locator(`#processes-view button[data-action=crash][data-process=${p2}]`).click();
  await page.locator(`#processes-view button[data-action=restart][data-process=${p2}]`).click();
  await waitFor(page, () => window.__playground.state.latest().actors.find((a) => a.id === "T2").process !== "P2", "T2 restarted");
  assert.equal((await latest(page)).actors.find((a) => a.id === "T2").variant, "task-resync");
  assert.ok(await page.locator("#processes-view li[data-actor=T2] .variant").isVisible(), "the badge survives the restart");
  // A bad rule id is a clear error from the engine, and changes nothing.
  const before = await latest(page);
  const err = await page.evaluate(() => {
    try {
      window.__playground.pg().send({ type: "setRule", rule: "nope", on: false });
      return null;
    } catch (e) {
      return e.message;
    }
  });
  assert.match(err ?? "", /unknown rule "nope": one of idempotency-token/);
  assert.deepEqual(await page.evaluate(() => window.__playground.pg().snapshot().rules), before.rules);
  noErrors(page);
});

/** What each preset's run shows on the page: `{ anomaly: bool, text }` for the assertion. */
const EVIDENCE = {
  "idempotency-token": async (page) => {
    const v = page.locator("#verify-view .verify");
    await waitFor(page, () => document.querySelector("#verify-view .verify[data-duplicated]"), "the acked-writes check");
    const duplicated = Number(await v.getAttribute("data-duplicated"));
    assert.equal(Number(await v.getAttribute("data-lost")), 0, "nothing acknowledged is lost either way");
    assert.ok(Number(await v.getAttribute("data-acked")) > 20);
    return { anomaly: duplicated > 0, text: await v.textContent() };
  },
  "oracle-durable-bound": async (page) => {
    // The page's own snapshot history: the old instance's last timestamp before the crash, the
    // new instance's first after the restart.
    const r = await page.evaluate(() => {
      const oracle = (s) => s.actors.find((a) => a.id === "O1")?.detail;
      const views = window.__playground.state.history().map(oracle).filter((o) => o?.kind === "oracle");
      const old = views.filter((o) => o.epoch === 1).at(-1);
      const neu = views.filter((o) => o.epoch === 2 && o.firstTs !== null).at(-1);
      return { oldLast: old?.writeTs, oldDurable: old?.durableUpper, newFirst: neu?.firstTs };
    });
    assert.ok(r.oldLast > 0 && r.newFirst > 0, JSON.stringify(r));
    return { anomaly: r.newFirst <= r.oldLast, text: JSON.stringify(r) };
  },
  "upsert-feedback": async (page) => {
    const text = await page.locator("[data-testid=upsert-checker]").textContent();
    const s = await latest(page);
    assert.ok(s.upsert.checker.checks > 10, text);
    return { anomaly: /differs from the reference model at [1-9]\d* of/.test(text), text };
  },
  "task-resync": async (page) => {
    const s = await latest(page);
    const resyncs = s.actors.filter((a) => a.spec.kind === "task").map((a) => a.detail.resyncs);
    return { anomaly: resyncs.every((n) => n === 0), text: `re-syncs ${resyncs}` };
  },
};

/** The history check's rule (src/playground/check/) that catches each broken protocol rule. */
const CHECK_RULE = {
  "idempotency-token": "ack-duplicate",
  "oracle-durable-bound": "oracle-regress",
  "upsert-feedback": "upsert-model",
  "task-resync": "task-desired",
};

/** The page's history check (`snapshot.check`, run in the page's wasm over its event log). */
async function pageCheck(page, rule) {
  const check = (await latest(page)).check;
  const r = check.rules.find((x) => x.rule === CHECK_RULE[rule]);
  return { total: check.violationsTotal, checks: r.checks, violations: r.violations, first: check.violations[0] };
}

for (const rule of RULES) {
  test(`${rule}: its preset shows the anomaly with the rule off and none with it on`, { timeout: 120_000 }, async (t) => {
    const ctx = await launch(t);
    for (const on of [false, true]) {
      const page = await openPreset(ctx, rule, on);
      const snap = await latest(page);
      assert.equal(snap.rules[{ "idempotency-token": "idempotencyToken", "oracle-durable-bound": "oracleDurableBound", "upsert-feedback": "upsertFeedback", "task-resync": "taskResync" }[rule]], on);
      const badges = await page.locator(`#processes-view .variant[data-rule=${rule}]`).count();
      assert.ok(on ? badges === 0 : badges > 0, `badges with the rule ${on ? "on" : "off"}: ${badges}`);
      const e = await EVIDENCE[rule](page);
      assert.equal(e.anomaly, !on, `with the rule ${on ? "on" : "off"} the page shows ${e.text}`);
      const c = await pageCheck(page, rule);
      // The check panel (www/render/check.js) draws the same verdict.
      const line = `#check-view [data-testid=check-rule-${CHECK_RULE[rule]}]`;
      await waitFor(page, (sel) => document.querySelector(sel), "the check panel's line", line);
      if (on) {
        assert.equal(c.total, 0, `the check flags nothing with the rule on: ${JSON.stringify(c)}`);
        assert.ok(c.checks > 0, `${CHECK_RULE[rule]} was checked: ${JSON.stringify(c)}`);
        await waitFor(page, (sel) => Number(document.querySelector(sel)?.dataset.checks) > 0, "the panel's checks", line);
        const broken = await page.locator("#check-view [data-testid^=check-rule-]").evaluateAll((els) => els.filter((e) => e.dataset.violations !== "0").map((e) => e.dataset.testid));
        assert.deepEqual(broken, [], "the panel shows no break");
        assert.equal(await page.locator("#check-view [data-testid=check-violation]").count(), 0);
        assert.match(await page.locator("#check-view").textContent(), /no break/);
      } else {
        assert.ok(c.violations > 0, `the check flags ${CHECK_RULE[rule]}: ${JSON.stringify(c)}`);
        await waitFor(page, (sel) => Number(document.querySelector(sel)?.dataset.violations) > 0, "the panel's breaks", line);
        assert.match(await page.locator(line).textContent(), /break/);
        const listed = await page.locator("#check-view [data-testid=check-violation]").allTextContents();
        assert.ok(listed.some((t) => t.includes(CHECK_RULE[rule]) || t.includes("oracle-bound")), `a listed violation of ${CHECK_RULE[rule]}: ${listed[0]}`);
      }
      await shot(page, `rules-${rule}-${on ? "on" : "off"}-check`, "#panel-check");
      await shot(page, `rules-${rule}-${on ? "on" : "off"}`);
      noErrors(page);
      await page.close();
    }
  });
}

test("step replicas: each click is one timely step() of each replica's worker", { timeout: 60_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=3&empty=1&autoplay=0"));
  await page.locator("[data-testid=add-replica]").click();
  for (let i = 0; i < 5; i++) await page.locator("[data-testid=step]").click();
  const steps = async () => Number(await page.locator("#upsert-view .up-replica[data-actor=U1] [data-testid=worker-steps]").textContent());
  await waitFor(page, () => document.querySelector("#upsert-view .up-replica[data-actor=U1] [data-testid=worker-steps]"), "U1's step count");
  const before = await steps();
  const sel = "#upsert-view .up-replica[data-actor=U1] [data-testid=worker-steps]";
  for (let k = 1; k <= 3; k++) {
    await page.locator("[data-testid=step-replicas]").click();
    // The status line reads the same after every press, so it cannot tell this press's draw
    // from the last one's: wait for the count to move, then check by how much (the run is
    // paused, so nothing else steps the replica; one press's steps land in one draw).
    await waitFor(page, ([s, n]) => Number(document.querySelector(s)?.textContent) >= n, `U1's step count to reach ${before + k}`, [sel, before + k]);
    await waitForStatus(page, "ok", /each replica ran one worker step: U1 [a-z]/);
    assert.equal(await steps(), before + k, `one timely step per click (${k})`);
  }
  await shot(page, "step-replicas", "#panel-upsert");
  noErrors(page);
});

test("an old preset link keeps working: it opens the rule's tour at the step it names", { timeout: 60_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await ctx.newPage();
  page.errors = [];
  page.on("console", (msg) => {
    if (msg.type() === "error") page.errors.push(`console: ${msg.text()}`);
  });
  page.on("pageerror", (err) => page.errors.push(`pageerror: ${err}`));
  await page.goto(server.url("?seed=41&empty=1&autoplay=0&preset=idempotency-token&rule=off&animate=0"));
  await waitForStatus(page, "ok", /tour "broken rule: no idempotency token": step 3 of 5$/);
  assert.equal(new URL(page.url()).search, "?tour=rule-idempotency-token&step=3&numbering=1&autoplay=0&animate=0");
  assert.equal((await latest(page)).rules.idempotencyToken, false);
  noErrors(page);
});

test("an unknown preset in the URL is a clear message, and the page runs on", { timeout: 60_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await ctx.newPage();
  page.errors = [];
  page.on("pageerror", (err) => page.errors.push(`pageerror: ${err}`));
  await page.goto(server.url("?seed=1&empty=1&autoplay=0&preset=nope&rule=off"));
  await waitForStatus(page, "error", /there is no tour "rule-nope"; the tours are .*rule-idempotency-token/);
  await page.locator("[data-testid=add-task]").click();
  await waitForStatus(page, "ok", /added T1/);
  assert.deepEqual(page.errors, []);
});

test("oracle-durable-bound through the controls: switch, burst, crash, restart; the check panel flags it", { timeout: 120_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openPage(ctx, server.url("?seed=42&empty=1&autoplay=0"));
  await page.locator("#rules-view input[data-rule=oracle-durable-bound]").uncheck();
  await waitForStatus(page, "ok", /rule oracle-durable-bound off/);
  await page.getByTestId("o-burst").fill("500");
  await page.getByTestId("add-oracle").click();
  await waitForStatus(page, "ok", /added O1 to P1 on epoch_ms, without oracle-durable-bound/);
  assert.match(await page.locator("#processes-view li[data-actor=O1]").textContent(), /500 timestamps a tick.*no durable bound/);
  const steps = async (n) => {
    for (let i = 0; i < n; i++) await page.getByTestId("step").click();
  };
  await steps(30);
  const line = "#check-view [data-testid=check-rule-oracle-bound]";
  await waitFor(page, (sel) => Number(document.querySelector(sel)?.dataset.violations) > 0, "oracle-bound flagged before any restart", line);
  await page.locator("#processes-view button[data-action=crash][data-process=P1]").click();
  await page.locator("#processes-view button[data-action=restart][data-process=P1]").click();
  await waitForStatus(page, "ok", /restarted P1 as P2/);
  await steps(30);
  const regress = "#check-view [data-testid=check-rule-oracle-regress]";
  await waitFor(page, (sel) => Number(document.querySelector(sel)?.dataset.violations) > 0, "oracle-regress flagged after the restart", regress);
  // The oracle panel does not promise what the broken instance did not keep (a learner walk read
  // "every timestamp handed out before was below it" beside Check's regression).
  const resumed = await page.locator("#oracle-view [data-testid=oracle-resumed-from]").textContent();
  assert.match(resumed, /^Resumed above \S+ ms, the durable upper the previous instance had stored: without the durable-bound rule, that instance could hand out timestamps past it/);
  assert.doesNotMatch(resumed, /every timestamp handed out before was below it/);
  await shot(page, "rules-oracle-controls-check", "#panel-check");
  noErrors(page);
});
