// Continual feedback one stage at a time (issue 16): with the run paused and the generator off,
// Push then Step replicas (j) moves a hand-pushed upsert one stage per press, and each press says
// which stage it ran: source, stash, the partial emission as a provisional value (◌), the sink's
// write, the shard, the feedback read, then state. The walk's line in the Upsert panel shows the
// stage to come; the replica's state shows ◌ from the partial emission until the feedback read
// is folded in. A screenshot of the panel at each stage goes to target/e2e-artifacts/.
//
// Run: node --test tests/e2e/feedback-stages.test.mjs     (needs pkg/: bash scripts/build.sh)

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  launch, openTwoReplicas, noErrors, shot, waitFor, waitForStatus, serveForTests,
} from "./helpers.mjs";

const server = serveForTests();

const STAGES = ["source", "stash", "partial emission", "sink", "shard", "feedback read", "state"];
const U1_STATE = '#upsert-view .up-replica[data-actor="U1"] [data-testid=upsert-state]';

test("Push, then Step replicas (j) seven times: each stage named once, in order, with ◌ in state before the feedback read overwrites it", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openTwoReplicas(ctx, server);
  assert.equal(await page.getByTestId("u-generator").isChecked(), false, "the generator is off");
  await page.getByTestId("u-key").fill("3");
  await page.getByTestId("u-value").fill("hello");
  await page.getByTestId("push-upsert").click();
  await waitForStatus(page, "ok", /pushed upsert: key 3 → "hello"/);

  const said = [];
  const u2Steps = [];
  assert.match(await page.getByTestId("step-replicas").getAttribute("title"), /walks that upsert through one replica, one stage per press \(the other replicas wait until the walk ends\); a stage runs the scenario until its write or read completes, so the clock may move by seconds/);
  const provisional = () => page.locator(`${U1_STATE} li.provisional`).count();
  for (const [i, stage] of STAGES.entries()) {
    // Nothing is focused but the page: the key goes to the page's shortcuts.
    await page.evaluate(() => document.activeElement?.blur());
    await page.keyboard.press("j");
    const n = i + 1;
    await waitForStatus(page, "ok", new RegExp(`stage ${n}/7, ${stage}: `));
    said.push(await page.locator("#status").textContent());
    const walk = page.getByTestId("upsert-walk");
    if (n < STAGES.length) {
      // What the button's title promises: the walk moves one replica, the other waits, and a
      // press may move the clock by seconds (the line says both).
      const line = await walk.textContent();
      assert.match(line, /through U1: .*the clock may move by seconds\. U2 waits until the walk ends\./s);
      u2Steps.push(await page.evaluate(() => window.__playground.state.latest().actors.find((a) => a.id === "U2").detail.worker_steps));
      assert.match(await walk.textContent(), new RegExp(`▸ ${STAGES[n]}`), `the walk shows ${STAGES[n]} next`);
    } else {
      // The walk's line gives way to a final one: done, the key confirmed, and what a press does now.
      await waitFor(page, () => !document.querySelector("[data-testid=upsert-walk]") && document.querySelector("[data-testid=upsert-walk-done]"), "the walk's done line");
      assert.match(await page.getByTestId("upsert-walk-done").textContent(), /✓ done: key 3 = \(3, "hello"\) at t\d+ confirmed: U1's state holds what the shard holds, no longer provisional/);
    }
    if (stage === "partial emission" || stage === "sink") {
      // Stage 3 wrote an empty range up to the upsert's time if it had to: the line says the
      // uppers reading that time do not mean the upsert is in.
      const snap = await page.evaluate(() => window.__playground.state.latest().upsert.walk);
      if (snap.emptyRange) assert.match(await walk.textContent(), new RegExp(`The uppers read ${snap.ts} now: to get there the sink wrote an empty range \\(no updates\\)\\. An upper ${snap.ts} says every time before ${snap.ts} is complete; the upsert at t${snap.ts} is not in the shard until stage 5\\.`));
    }
    if (stage === "partial emission") {
      await waitFor(page, (sel) => /◌\s*\(3, "hello"\)/.test(document.querySelector(sel)?.textContent ?? ""), "◌ hello in U1's state", U1_STATE);
    }
    const p = await provisional();
    if (n >= 3 && n <= 6) assert.equal(p, 1, `◌ in U1's state at ${stage}`);
    else assert.equal(p, 0, `no provisional value in U1's state at ${stage}`);
    await shot(page, `feedback-stage-${n}`, "#panel-upsert");
  }
  // Presses 8 and 9: nothing left to walk. Each says what it did (one worker step of every
  // replica, and why), and the done line stays, naming what U2 has not read yet.
  const steps = (id) => page.evaluate((a) => window.__playground.state.latest().actors.find((x) => x.id === a).detail.worker_steps, id);
  for (const n of [8, 9]) {
    const before = await steps("U1");
    await page.evaluate(() => document.activeElement?.blur());
    await page.keyboard.press("j");
    await waitFor(page, (b) => window.__playground.state.latest().actors.find((x) => x.id === "U1").detail.worker_steps > b, `press ${n} stepped U1`, before);
    await waitForStatus(page, "ok", /^stepped U1: .*; U2: .* \(nothing new for the first replica to walk \(push an upsert to walk it\): one worker step of every replica, each reading what it has not read yet\)$/s);
    assert.match(await page.getByTestId("upsert-walk-done").textContent(), /Step replicas \(j\) has nothing left to walk: each further press takes one worker step of every replica/);
    await shot(page, `feedback-stage-${n}`, "#panel-upsert");
  }
  assert.ok(u2Steps.length === 6 && u2Steps.every((x) => Number.isInteger(x) && x > 0), `U2's worker steps read: ${u2Steps}`);
  assert.equal(new Set(u2Steps).size, 1, `U2's worker did not step while U1 was walked: ${u2Steps}`);
  // Each stage named once, in order.
  const named = said.map((s) => STAGES.find((st) => new RegExp(`stage \\d/7, ${st}: `).test(s)));
  assert.deepEqual(named, STAGES, said.join("\n"));
  for (const st of STAGES) assert.equal(said.filter((s) => s.includes(`, ${st}: `)).length, 1, `${st} named once`);
  // After the feedback is folded in: hello is a value in U1's state, not provisional.
  const state = await page.locator(U1_STATE).textContent();
  assert.match(state, /\(3, "hello"\)/);
  assert.doesNotMatch(state, /◌/);
  noErrors(page);
});
