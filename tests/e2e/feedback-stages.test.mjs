// Continual feedback one stage at a time (issue 16): with the run paused and the generator off,
// Push then Step replicas (j) moves a hand-pushed upsert one stage per press, and each press says
// which stage it ran: source, stash, the partial emission as a provisional value (◌), the sink's
// write, the shard, the feedback read, then state. The walk's line in the Upsert panel shows the
// stage to come; the replica's state shows ◌ from the partial emission until the feedback read
// is folded in. A screenshot of the panel at each stage goes to target/e2e-artifacts/ (E2E_SHOTS=1).
//
// What a learner found in free play (issue 16, third walk): with a generator burst still queued
// when they pushed, the walk followed a generator message and its done line paired one key with
// another key's value; press 8 said "push an upsert" though one was; and with the generator on,
// each press explained itself only in the status line, out of view. So: the walk follows the
// push and names what goes along; the done line's key and value are of one message; every
// press's message shows beside the Step replicas button at 1280x800, and with the generator on
// it offers to turn it off.
//
// Run: node --test tests/e2e/feedback-stages.test.mjs     (needs pkg/: bash scripts/build.sh)

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  frames, launch, openTwoReplicas, noErrors, shot, waitFor, waitForStatus, serveForTests,
} from "./helpers.mjs";
import { rowWords } from "../../www/render/words.js";
import { fmtFrontier } from "../../www/spec.js";

const server = serveForTests();

const STAGES = ["source", "stash", "partial emission", "sink", "shard", "feedback read", "state"];
const U1_STATE = '#upsert-view .up-replica[data-actor="U1"] [data-testid=upsert-state]';

/**
 * Where the panel's Step replicas button and the walked key's row in U1's state are, once the
 * press has been drawn and the page has held still for a while (longer than controls.js holds
 * the button: what moves after that moves it too).
 */
async function pressPlaces(page) {
  await frames(page, 30);
  return page.evaluate((sel) => {
    const b = document.querySelector("[data-testid=upsert-step-replicas]").getBoundingClientRect();
    const row = document.querySelector(`${sel} li[data-walked]`);
    const r = row?.getBoundingClientRect();
    return { button: b.top, row: r ? { top: r.top, bottom: r.bottom, text: row.textContent } : null, vh: innerHeight };
  }, U1_STATE);
}

/**
 * Where the press shows (issue 16, finding 7): the press brings the Upsert pipeline panel into
 * view at 1280x800, its title at the top, with its own Step replicas button and the press's
 * message beside it (the same text as the status line), and the walk's line under them. The
 * message under the controls' button says the same. Returns the text.
 */
async function saidBesideButton(page, name, n) {
  // The page's scroll happens in the press's handler; a frame draws what it brought into view.
  await page.evaluate(() => new Promise(requestAnimationFrame));
  const box = await page.evaluate(() => {
    const r = (el) => {
      if (!el) return null;
      const b = el.getBoundingClientRect();
      return { top: b.top, bottom: b.bottom, hidden: el.hidden, text: el.textContent };
    };
    const q = (s) => document.querySelector(s);
    return {
      title: r(q("#panel-upsert h2")),
      button: r(q("[data-testid=upsert-step-replicas]")),
      said: r(q("#step-said-here")),
      walk: r(q("[data-testid=upsert-walk], [data-testid=upsert-walk-done]")),
      controls: q("[data-testid=step-said-text]")?.textContent,
      message: q("[data-testid=upsert-press-text]")?.textContent,
      status: q("#status").textContent,
      vh: innerHeight,
    };
  });
  const inView = (b) => b.top >= -2 && b.bottom <= box.vh;
  // The first press brings the panel in, its title at the top. Later presses keep the button
  // where the learner pressed it and scroll only to bring the walked key's row into the window,
  // which may take the title (and the Push row above the button) out at the top.
  assert.ok((n > 1 || inView(box.title)) && inView(box.button) && inView(box.said), `press ${n}: the panel's title (first press), its button and the message are in view: ${JSON.stringify(box)}`);
  // A walk's line (none with the generator on: nothing is walked) is in view under them.
  if (box.walk) assert.ok(box.walk.top >= box.said.bottom && box.walk.top < box.vh, `press ${n}: the walk's line is in view under them: ${JSON.stringify(box)}`);
  assert.ok(box.said.text.startsWith("Step replicas: ") && box.message === box.status && box.controls === box.status,
    `press ${n}: beside the panel's button and the controls' one, what the status says: ${JSON.stringify(box)}`);
  // What the learner sees at 1280x800 after the press: the press, its message and its effect.
  await shot(page, `${name}-press-${n}`, null, { fullPage: false });
  return box.said.text;
}

test("Push, then Step replicas (j) seven times: each stage named once, in order, with ◌ in state before the feedback read overwrites it", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openTwoReplicas(ctx, server);
  assert.equal(await page.getByTestId("u-generator").isChecked(), false, "the generator is off");
  await page.getByTestId("u-key").fill("3");
  await page.getByTestId("u-value").fill("hello");
  await page.getByTestId("push-upsert").click();
  await waitForStatus(page, "ok", /pushed upsert: key 3 → "hello"/);
  // The push confirms beside the Upserts box too (the status line is off screen there).
  const pushSaid = page.getByTestId("push-said");
  assert.match(await pushSaid.textContent(), /^✓ pushed upsert: key 3 → "hello"; Step replicas walks it through a replica$/);
  assert.ok(await pushSaid.isVisible(), "the push's confirmation shows");

  const said = [];
  const u2Steps = [];
  assert.match(await page.getByTestId("step-replicas").getAttribute("title"), /walks that upsert through one replica, one stage per press \(the other replicas wait until the walk ends\); a stage runs the scenario until its write or read completes, so the clock may move by seconds/);
  const provisional = () => page.locator(`${U1_STATE} li.provisional`).count();
  // The fourth learner walk: the button drifted (its top at y 111, 95, 111, 176, 244, 263, 247
  // over the seven presses) as the page scrolled itself, and the walked row ended below the
  // window at presses 5 to 7. The first press brings the panel into view; from there on the
  // button stays where the learner presses it, and the walked row is in the window.
  const places = [];
  for (const [i, stage] of STAGES.entries()) {
    // Nothing is focused but the page: the key goes to the page's shortcuts.
    await page.evaluate(() => document.activeElement?.blur());
    await page.keyboard.press("j");
    const n = i + 1;
    await waitForStatus(page, "ok", new RegExp(`stage ${n}/7, ${stage}: `));
    said.push(await page.locator("#status").textContent());
    await saidBesideButton(page, "feedback", n);
    const at = await pressPlaces(page);
    places.push(at);
    assert.ok(Math.abs(at.button - places[0].button) <= 1.5, `press ${n}: the Step replicas button stays where press 1 left it (y ${places.map((p) => Math.round(p.button)).join(", ")})`);
    if (n >= 3) {
      assert.ok(at.row && /key 3 = hello/.test(at.row.text), `press ${n}: U1's state marks the walked row: ${JSON.stringify(at.row)}`);
      assert.ok(at.row.top >= 0 && at.row.bottom <= at.vh, `press ${n}: the walked row ${at.row.text} is in the window (${Math.round(at.row.top)}..${Math.round(at.row.bottom)} of ${at.vh})`);
    }
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
      assert.match(await page.getByTestId("upsert-walk-done").textContent(), /✓ done: your push, key 3 = hello at t\d+ went through all seven stages: U1's state holds it as the shard does, no longer provisional/);
    }
    if (stage === "partial emission" || stage === "sink") {
      // Stage 3 wrote an empty range up to the upsert's time if it had to: the line says the
      // uppers reading that time do not mean the upsert is in.
      const snap = await page.evaluate(() => window.__playground.state.latest().upsert.walk);
      if (snap.emptyRange) assert.match(await walk.textContent(), new RegExp(`The uppers read ${snap.ts} now: to get there the sink wrote an empty range \\(no updates\\)\\. An upper ${snap.ts} says every time before ${snap.ts} is complete; the upsert at t${snap.ts} is not in the shard until stage 5\\.`));
    }
    if (stage === "shard") {
      // The commit shows in the panel: the shard's new upper, past the upsert's time.
      const { ts, upper } = await page.evaluate(() => {
        const s = window.__playground.state.latest();
        return { ts: s.upsert.walk.ts, upper: s.actors.find((a) => a.id === "U1").detail.sink.upper };
      });
      assert.ok(upper > ts, `the shard's upper ${upper} is past t${ts}`);
      assert.match(await page.getByTestId("upsert-walk-shard").textContent(), new RegExp(`its upper is ${upper}, past t${ts}`));
      assert.equal(await page.getByTestId("upsert-shard-upper").textContent(), `upper ${upper}`);
      // The press points at the Shard panel's rows, and there the pushed key's row shows with
      // its value, marked as the newest write's, at that upper (the learner scrolls to it).
      assert.match(said.at(-1), /; see the Shard panel's rows: key 3 = hello \(next: feedback read\)$/);
      assert.equal(await page.getByTestId("shard-pick").inputValue(), "upsert_out");
      // The walk's line beside the button quotes that row as the Shard panel lists it (walk 7:
      // the panel is ~2300 px above; both were never seen at once).
      assert.equal(await page.getByTestId("upsert-walk-shard-row").innerText(), "● key 3 = hello");
      const y = await page.evaluate(() => scrollY);
      await page.locator("#panel-shard").scrollIntoViewIfNeeded();
      await waitFor(page, () => /● key 3 = hello\b/.test(document.querySelector("[data-testid=shard-rows]")?.innerText ?? ""), "key 3 = hello in the Shard panel's rows");
      const rows = page.getByTestId("shard-rows");
      assert.ok(await rows.isVisible(), "the Shard panel's rows show");
      // The upper as the panel's own stat says it (fmtFrontier: "1234 ms").
      const at = await page.locator("#shard-view [data-stat=upper] .v").innerText();
      assert.equal(at, fmtFrontier(upper), "the panel shows the upper the press named");
      assert.equal(await rows.innerText(), `rows at upper ${at}: ● key 3 = hello`);
      await shot(page, "feedback-stage-5-shard-rows", "#panel-shard");
      // Back to where the learner pressed (the next presses keep the button there).
      await page.evaluate((top) => scrollTo(0, top), y);
      await frames(page, 2);
    }
    // The feedback read shows on the card: the updates read back wait at the operator's
    // persist input (walk 6: nothing on U1's card changed at this press); the state folds them.
    const waiting = page.locator('#upsert-view .up-replica[data-actor="U1"] [data-testid=upsert-feedback-waiting]');
    if (stage === "feedback read") assert.equal(await waiting.innerText(), "read back, not yet folded 1");
    else assert.equal(await waiting.count(), 0, `no feedback waits at ${stage}`);
    if (stage === "partial emission") {
      await waitFor(page, (sel) => /◌\s*key 3 = hello/.test(document.querySelector(sel)?.textContent ?? ""), "◌ hello in U1's state", U1_STATE);
    }
    const p = await provisional();
    if (n >= 3 && n <= 6) assert.equal(p, 1, `◌ in U1's state at ${stage}`);
    else assert.equal(p, 0, `no provisional value in U1's state at ${stage}`);
    await shot(page, `feedback-stage-${n}`, "#panel-upsert");
  }
  // Presses 8 and 9: nothing left to walk. Each says what it did (one worker step of every
  // replica, and why), and the done line stays, naming what U2 has not read yet.
  const steps = (id) => page.evaluate((a) => window.__playground.state.latest().actors.find((x) => x.id === a).detail.worker_steps, id);
  // What U2's card shows that a worker step can change without reading or emitting an update.
  const moves = [];
  const u2Card = () => page.evaluate(() => {
    const d = window.__playground.state.latest().actors.find((x) => x.id === "U2").detail;
    return { input: d.operator?.input_upper, persist: d.operator?.persist_upper, stash: d.operator?.stash.length ?? 0, discarded: d.counters.stashDiscarded };
  });
  for (const n of [8, 9]) {
    const before = await steps("U1");
    const u2Was = await u2Card();
    await page.evaluate(() => document.activeElement?.blur());
    await page.keyboard.press("j");
    await waitFor(page, (b) => window.__playground.state.latest().actors.find((x) => x.id === "U1").detail.worker_steps > b, `press ${n} stepped U1`, before);
    // It names the push that went through, not "push an upsert" as if none had been.
    await waitForStatus(page, "ok", /^nothing new to walk: your push, key 3 = hello, went through all seven stages\. Instead, each replica ran one worker step: U1 .*; U2 /s);
    await saidBesideButton(page, "feedback", n);
    // The sixth learner walk: a press said "U2 had nothing new to do" while U2's card's uppers
    // jumped and its stash emptied (a discard). What moved on the card, the press says.
    const u2Now = await u2Card();
    const u2Said = (await page.locator("#status").textContent()).split("; U2 ")[1];
    if (u2Now.input !== u2Was.input) assert.ok(u2Said.includes(`input upper ${u2Was.input} → ${u2Now.input}`), `press ${n}: U2's input upper moved ${u2Was.input} → ${u2Now.input}, and the press says so: ${u2Said}`);
    if (u2Now.stash !== u2Was.stash) assert.ok(u2Said.includes(`stash ${u2Was.stash} → ${u2Now.stash}`), `press ${n}: U2's stash ${u2Was.stash} → ${u2Now.stash}: ${u2Said}`);
    if (u2Now.discarded > u2Was.discarded) assert.match(u2Said, new RegExp(`${u2Now.discarded - u2Was.discarded} stashed upserts? discarded: another replica already wrote`), `press ${n}`);
    if (JSON.stringify(u2Now) !== JSON.stringify(u2Was)) assert.doesNotMatch(u2Said, /nothing new to do/, `press ${n}: U2's card changed`);
    moves.push(JSON.stringify(u2Now) !== JSON.stringify(u2Was));
    assert.match(await page.getByTestId("upsert-walk-done").textContent(), /The walk is over\. From now on each press of Step replicas \(j\) runs one worker step of every replica\..* To walk another upsert, push it, then press Step replicas\./);
    // U2, held during the walk, has not read the shard back past the upsert: the line says what
    // its presses do and what only the run does (a press steps its worker, not its sink).
    if (n === 8) assert.match(await page.getByTestId("upsert-walk-done").textContent(), /U2 was held during the walk\. These presses move its worker only .*need the run to go on \(Step or Play\)\. U1 has written that time already, so none of U2's output for it lands/);
    // U2's card says why its sink's upper is behind the shard's: U1 wrote those times, and a
    // sink learns the upper only from its own writes (src/upsert/sink.rs); U1's card has no such line.
    if (n === 8) {
      const sinks = await page.evaluate(() => Object.fromEntries(window.__playground.state.latest().actors.filter((a) => a.detail?.kind === "replica").map((a) => [a.id, a.detail.sink.upper])));
      assert.ok(sinks.U2 < sinks.U1, `U2's sink's upper is behind U1's: ${JSON.stringify(sinks)}`);
      const card = (id) => page.locator(`#upsert-view .up-replica[data-actor="${id}"] [data-testid=upsert-sink-behind]`);
      assert.equal(await card("U2").innerText(), `Why sink's upper ${sinks.U2} is behind the shard's ${sinks.U1}: U1 wrote the shard up to ${sinks.U1}, and a sink learns the upper only from its own writes. U2's next write, at ${sinks.U2}, loses the race (UpperMismatch); its sink then takes ${sinks.U1} and drops its output below it.`);
      assert.equal(await card("U1").count(), 0, "U1's sink is at the shard's upper");
    }
    await shot(page, `feedback-stage-${n}`, "#panel-upsert");
  }
  // The walker saw it at press 9; at least one of the two presses moves U2's card (else the
  // checks above checked nothing).
  assert.ok(moves.includes(true), `U2's card moved at press 8 or 9: ${moves}`);
  assert.ok(u2Steps.length === 6 && u2Steps.every((x) => Number.isInteger(x) && x > 0), `U2's worker steps read: ${u2Steps}`);
  assert.equal(new Set(u2Steps).size, 1, `U2's worker did not step while U1 was walked: ${u2Steps}`);
  // Each stage named once, in order.
  const named = said.map((s) => STAGES.find((st) => new RegExp(`stage \\d/7, ${st}: `).test(s)));
  assert.deepEqual(named, STAGES, said.join("\n"));
  for (const st of STAGES) assert.equal(said.filter((s) => s.includes(`, ${st}: `)).length, 1, `${st} named once`);
  // After the feedback is folded in: hello is a value in U1's state, not provisional.
  const state = await page.locator(U1_STATE).textContent();
  assert.match(state, /key 3 = hello/);
  assert.doesNotMatch(state, /◌/);
  noErrors(page);
});

/** Presses j with nothing focused (the key goes to the page's shortcuts). */
async function pressJ(page) {
  await page.evaluate(() => document.activeElement?.blur());
  await page.keyboard.press("j");
}

test("a push made while a generator burst is still queued: the walk follows the push, names the burst, and the done line pairs key 0 with key 0's value", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openTwoReplicas(ctx, server);
  // The generator runs (paused run, simulator steps) until a burst of its waits in the source's
  // queue; then it is turned off and key 0 is pushed, into the same batch as the burst. Key 0
  // sorts first in that batch: the old walk took its last message, a generator one.
  await page.keyboard.press("g");
  await waitForStatus(page, "ok", /upsert generator on/);
  const queued = await page.evaluate(() => {
    const pg = window.__playground.pg();
    pg.runFor(600);
    for (let i = 0; i < 3000 && pg.snapshot().upsert.queued < 2; i++) pg.step(1);
    return pg.snapshot().upsert.queued;
  });
  assert.ok(queued >= 2, `a generator burst is queued: ${queued}`);
  await page.getByTestId("u-generator").uncheck();
  await waitForStatus(page, "ok", /upsert generator off/);
  await page.getByTestId("u-key").fill("0");
  await page.getByTestId("u-value").fill("pear");
  await page.getByTestId("push-upsert").click();
  await waitForStatus(page, "ok", /pushed upsert: key 0 → "pear"/);

  await pressJ(page);
  await waitForStatus(page, "ok", /^stage 1\/7, source: your push, key 0 = pear, is in the source log at offset \d+, time \d+; U1 has not read it\. \d+ other messages? it has not read, queued before yours, (it goes|they go) through these stages with it: #\d+ key \d+ = .*\(the generator's\)/);
  const first = await saidBesideButton(page, "feedback-burst", 1);
  // The walk's line in the Upserts panel says whose upsert it walks and names what goes along.
  const walk = await page.getByTestId("upsert-walk").textContent();
  assert.match(walk, /walks your push, key 0 = pear at t\d+, through U1/);
  const along = await page.evaluate(() => window.__playground.state.latest().upsert.walk.along);
  assert.ok(along.length >= 1, JSON.stringify(along));
  for (const a of along) {
    assert.ok(first.includes(rowWords(a.text)), `press 1 names ${rowWords(a.text)}`);
    assert.ok(walk.includes(rowWords(a.text)), `the walk line names ${rowWords(a.text)}`);
  }
  for (let n = 2; n <= 7; n++) {
    await pressJ(page);
    await waitForStatus(page, "ok", new RegExp(`^stage ${n}/7, ${STAGES[n - 1]}: `));
    await saidBesideButton(page, "feedback-burst", n);
  }
  // Key and value of one message: key 0's row starts with 0 (the value is (key, text)).
  const done = await page.getByTestId("upsert-walk-done").textContent();
  assert.match(done, /✓ done: your push, key 0 = \S+ at t\d+ went through all seven stages/);
  const d = await page.evaluate(() => window.__playground.state.latest().upsert.walkDone);
  if (d.overtakenBy === null) assert.match(done, /key 0 = pear /);
  // And U1's state shows that value for key 0.
  assert.ok((await page.locator(U1_STATE).textContent()).includes(rowWords(d.value)), `U1's state holds ${rowWords(d.value)}`);
  await pressJ(page);
  await waitForStatus(page, "ok", /^nothing new to walk: your push, key 0 = pear, went through all seven stages/);
  await saidBesideButton(page, "feedback-burst", 8);
  noErrors(page);
});

test("with the generator on, a press says so beside the button and offers to turn it off; a press while playing pauses first", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openTwoReplicas(ctx, server);
  await page.keyboard.press("g");
  await waitForStatus(page, "ok", /upsert generator on/);
  // Playing, as the page starts: the press pauses the run, then steps.
  await page.keyboard.press(" ");
  await waitForStatus(page, "ok", /^playing$/);
  await pressJ(page);
  await waitForStatus(page, "ok", /^the generator is on, so there is no one upsert to walk stage by stage: turn it off, push an upsert, then press again\. Instead, each replica ran one worker step: U1 /);
  assert.equal(await page.evaluate(() => window.__playground.view.playing), false, "the press paused the run");
  const said = await saidBesideButton(page, "feedback-generator", 1);
  assert.match(said, /the generator is on/);
  const off = page.getByTestId("press-here-generator-off");
  assert.ok(await off.isVisible(), "the offer to turn the generator off is beside the message");
  await off.click();
  await waitForStatus(page, "ok", /upsert generator off/);
  assert.equal(await page.getByTestId("u-generator").isChecked(), false);
  assert.equal(await page.getByTestId("step-said").isHidden(), true, "the press's line goes with the next command");
  // Now a push walks.
  await page.getByTestId("push-upsert").click();
  await waitForStatus(page, "ok", /pushed upsert: key 1 → "hello"/);
  await pressJ(page);
  await waitForStatus(page, "ok", /^stage 1\/7, source: your push, key 1 = hello/);
  await saidBesideButton(page, "feedback-generator", 2);
  noErrors(page);
});

test("the Upsert pipeline panel has its own Push beside Step replicas: a push there confirms there, and the next press walks it", { timeout: 90_000 }, async (t) => {
  const ctx = await launch(t);
  const page = await openTwoReplicas(ctx, server);
  // The learner walk found Push only in the sidebar, ~2300 px above the panel it acts on.
  await page.locator("#panel-upsert").scrollIntoViewIfNeeded();
  const form = page.getByTestId("upsert-push-here");
  assert.ok(await form.isVisible(), "the panel's push form shows");
  await page.getByTestId("u-key-here").fill("5");
  await page.getByTestId("u-value-here").fill("plum");
  await page.getByTestId("push-upsert-here").click();
  await waitForStatus(page, "ok", /pushed upsert: key 5 → "plum"/);
  const here = page.getByTestId("push-said-here");
  assert.match(await here.textContent(), /^✓ pushed upsert: key 5 → "plum"; Step replicas walks it through a replica$/);
  const box = await here.boundingBox();
  assert.ok(box && box.y >= 0 && box.y + box.height <= 800, "the confirmation is in the window, beside the form");
  // One code path: the sidebar's box holds what was pushed.
  assert.equal(await page.getByTestId("u-key").inputValue(), "5");
  assert.equal(await page.getByTestId("u-value").inputValue(), "plum");
  await page.getByTestId("upsert-step-replicas").click();
  await waitForStatus(page, "ok", /stage 1\/7, source: /);
  assert.match(await page.getByTestId("upsert-walk").textContent(), /key 5/);
  // Bad input: a clear message beside the form, nothing pushed.
  const sourceLen = () => page.evaluate(() => window.__playground.state.latest().upsert.sourceMessages);
  const before = await sourceLen();
  await page.getByTestId("u-key-here").fill("x");
  await page.getByTestId("push-upsert-here").click();
  await waitFor(page, () => document.querySelector("[data-testid=push-said-here]").classList.contains("err"), "the refusal beside the form");
  assert.match(await here.textContent(), /upsert key/);
  assert.equal(await sourceLen(), before, "nothing pushed");
  noErrors(page);
});
