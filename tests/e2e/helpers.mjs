// Shared helpers of the page's end-to-end tests and benchmark: serve the repository with
// scripts/serve.sh, launch Debian's Chromium through playwright-core with a fresh profile, collect
// console errors, and wait for what the page shows.
//
// The start-up every test file shares: `const server = serveForTests()` at the top of the file
// (one server per file, on its own free port, so files may run concurrently), `launch(t)` for a
// browser context with its own profile (the file's tests share one Chromium), then `openPage`
// (waits for "ready") or `newPage` + goto (a tour or a bad link replaces the ready status), and
// `tourSettled` for a tour's step.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before } from "node:test";
import { chromium } from "playwright-core";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const ARTIFACTS = join(ROOT, "target", "e2e-artifacts");
export const CHROMIUM = "/usr/bin/chromium";
const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-dev-shm-usage",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--disable-quic",
  "--no-first-run",
];
/**
 * How long one wait on the page may take before the test fails. It bounds failures only: a wait
 * returns as soon as the page shows what it waits for. scripts/test.sh runs two files at a time
 * on a 2-core machine, where a 15 s bound failed waits that pass alone (a busy machine, not a
 * slow page).
 */
export const STEP_TIMEOUT_MS = 30_000;
export const NAVIGATION_TIMEOUT_MS = 45_000;

export function checkBuilt() {
  for (const file of ["pkg/persist_playground.js", "pkg/persist_playground_bg.wasm"]) {
    assert.ok(existsSync(join(ROOT, file)), `${file} is missing: build it first with \`bash scripts/build.sh\``);
  }
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: these tests drive the system Chromium`);
}

/** A port that was free a moment ago. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Starts `bash scripts/serve.sh PORT` in its own process group; resolves once it answers. Files
 * run concurrently (scripts/test.sh), each with its own server: if another took the free port
 * first (the server exits at once, unable to bind), it tries a new port, up to three times.
 */
export async function startServer() {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startServerOn(await freePort());
    } catch (err) {
      if (attempt >= 3 || !err.exitedEarly) throw err;
    }
  }
}

async function startServerOn(port) {
  const child = spawn("bash", ["scripts/serve.sh", String(port)], {
    cwd: ROOT,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (d) => (output += d));
  child.stderr.on("data", (d) => (output += d));
  let exited = null;
  child.on("exit", (code, signal) => (exited = { code, signal }));
  const server = { child, port, url: (q = "") => `http://127.0.0.1:${port}/index.html${q}` };
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (exited) {
      throw Object.assign(new Error(`scripts/serve.sh exited early (${JSON.stringify(exited)}):\n${output}`), { exitedEarly: true });
    }
    try {
      const res = await fetch(server.url());
      await res.arrayBuffer();
      if (res.ok) return server;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stopServer(server);
      throw new Error(`scripts/serve.sh did not answer within 15 s:\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * The file's server, started in a `before` hook (after `checkBuilt`, and after making `dirs`) and
 * stopped in an `after` hook. Its `url(query)` is the page's address; it answers only once the
 * hook ran, i.e. inside tests.
 */
export function serveForTests({ dirs = [] } = {}) {
  let server = null;
  const handle = {
    url(q = "") {
      assert.ok(server, "the server starts in the file's before() hook: call url() inside a test");
      return server.url(q);
    },
  };
  before(async () => {
    checkBuilt();
    for (const dir of dirs) mkdirSync(dir, { recursive: true });
    server = await startServer();
  });
  after(async () => {
    await closeBrowser();
    if (server) await stopServer(server);
  });
  return handle;
}

export async function stopServer(server) {
  const { child } = server;
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const kill = (sig) => {
    try {
      process.kill(-child.pid, sig);
    } catch {
      // gone
    }
  };
  kill("SIGTERM");
  const timer = setTimeout(() => kill("SIGKILL"), 3_000);
  await exited;
  clearTimeout(timer);
}

/**
 * The file's one Chromium, launched on first use and closed by `closeBrowser` (serveForTests's
 * after() hook). Each test gets its own browser context from it (`launch`): a context is a fresh,
 * off-the-record profile of its own (no cookie, storage, IndexedDB or cache carried over between
 * contexts), at the cost of a tab, not of a browser start and a profile of ~90 MB on disk.
 */
let browser = null;

async function theBrowser() {
  browser ??= chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
  return browser;
}

/** Closes the file's Chromium, if one was launched (the process cannot exit while it runs). */
export async function closeBrowser() {
  const b = browser;
  browser = null;
  if (b) await (await b).close();
}

/** A browser context with a fresh profile (nothing carried over between tests), closed after `t`. */
export async function launch(t) {
  const context = await (await theBrowser()).newContext({ viewport: { width: 1280, height: 800 } });
  t?.after(() => context.close());
  return context;
}

/**
 * A new page, not yet navigated, that records uncaught exceptions in `page.errors` and, unless
 * `consoleErrors` is false, console errors too.
 */
export async function newPage(context, { viewport = null, consoleErrors = true } = {}) {
  const page = await context.newPage();
  if (viewport) await page.setViewportSize(viewport);
  page.setDefaultTimeout(STEP_TIMEOUT_MS);
  // Loading the page (1.2 MB of wasm) takes seconds on a busy machine: a navigation may take longer
  // than a step.
  page.setDefaultNavigationTimeout(NAVIGATION_TIMEOUT_MS);
  page.errors = [];
  if (consoleErrors) {
    page.on("console", (msg) => {
      if (msg.type() === "error") page.errors.push(`console: ${msg.text()} (${msg.location().url})`);
    });
  }
  page.on("pageerror", (err) => page.errors.push(`pageerror: ${err}`));
  return page;
}

/** A page on `url` that records console errors and uncaught exceptions, once it says "ready". */
export async function openPage(context, url, viewport) {
  const page = await newPage(context, { viewport });
  await page.goto(url);
  await waitFor(page, () => /^ready/.test(document.getElementById("status")?.textContent ?? ""), "the page to be ready");
  return page;
}

/**
 * The upsert start-up of the page and feedback-stages tests: seed 10, no default actors, paused;
 * two replicas added (U1 by its button, U2 by the `u` key, each in its own process, on
 * upsert_out), then five steps of the run.
 */
export async function openTwoReplicas(context, server) {
  const page = await openPage(context, server.url("?seed=10&empty=1&autoplay=0"));
  await page.getByTestId("add-replica").click();
  await waitForStatus(page, "ok", /added U1 to P1 on upsert_out/);
  await page.keyboard.press("u");
  await waitForStatus(page, "ok", /added U2 to P2/);
  for (let i = 0; i < 5; i++) await page.getByTestId("step").click();
  return page;
}

/** Waits until the tour card shows step `step` of tour `id`, its run finished. */
export function tourSettled(page, id, step) {
  return waitFor(
    page,
    ([i, s]) => {
      const c = document.querySelector("[data-testid=tour-card]");
      return c?.dataset.tour === i && c.dataset.step === String(s) && c.dataset.state === "settled" && window.__playground?.tours?.()?.settled === true;
    },
    `tour ${id} step ${step} to settle`,
    [id, step],
  );
}

/**
 * Resolves once the page has shown `n` more animation frames. The page's frame loop (www/page.js)
 * runs once a frame, so it has run at least n - 1 times since the call: a state that holds over
 * them held while the page kept drawing, which a fixed wait could only hope for.
 */
export function frames(page, n) {
  return page.evaluate((k) => new Promise((resolve) => {
    let left = k;
    const tick = () => (--left <= 0 ? resolve() : requestAnimationFrame(tick));
    requestAnimationFrame(tick);
  }), n);
}

/** What the page shows, for failure messages. */
export async function describe(page) {
  return page
    .evaluate(() => JSON.stringify({
      status: document.getElementById("status")?.textContent,
      clock: document.getElementById("clock")?.textContent,
      processes: document.getElementById("processes-view")?.innerText.slice(0, 600),
      writers: document.getElementById("writers-view")?.innerText.slice(0, 600),
    }))
    .catch((e) => `(could not read the page: ${e.message})`);
}

/** Waits until `predicate(arg)` holds in the page. */
export async function waitFor(page, predicate, what, arg = null, timeout = STEP_TIMEOUT_MS) {
  try {
    await page.waitForFunction(predicate, arg, { timeout });
  } catch (err) {
    assert.fail(`waited for ${what}; the page shows ${await describe(page)} (${err.message.split("\n")[0]})`);
  }
}

export async function waitForStatus(page, kind, pattern) {
  await waitFor(
    page,
    ([k, src]) => {
      const el = document.getElementById("status");
      return el?.dataset.kind === k && new RegExp(src).test(el.textContent);
    },
    `a ${kind} status matching ${pattern}`,
    [kind, pattern.source],
  );
}

/** The page's latest snapshot (plain data the page drew last). */
export function latest(page) {
  return page.evaluate(() => window.__playground.state.latest());
}

export function noErrors(page) {
  assert.deepEqual(page.errors, [], "console errors or uncaught exceptions in the page");
}

/**
 * True if the tests save their screenshots (E2E_SHOTS=1). The screenshots are for a person to
 * look at (the page as a learner sees it); no test reads them, and the 160 or so of a whole run
 * cost it tens of seconds, so a plain run takes none:
 *
 *   E2E_SHOTS=1 node --test tests/e2e/page.test.mjs     # then look at target/e2e-artifacts/
 */
export const SHOTS = process.env.E2E_SHOTS === "1";

/**
 * Saves a screenshot of one element (a panel), or of the whole page (`fullPage`, the default
 * without a selector; `{ fullPage: false }`: the window only), as target/e2e-artifacts/NAME.png
 * (NAME may name a subdirectory), if E2E_SHOTS=1. Either way an element must be visible, as a
 * screenshot of it needs. Returns the file's path, or null if none was taken.
 */
export async function shot(page, name, selector = null, { fullPage = true } = {}) {
  if (!SHOTS) {
    if (selector) await page.locator(selector).waitFor({ state: "visible" });
    return null;
  }
  const path = join(ARTIFACTS, `${name}.png`);
  mkdirSync(dirname(path), { recursive: true });
  if (selector) await page.locator(selector).screenshot({ path });
  else await page.screenshot({ path, fullPage });
  return path;
}
