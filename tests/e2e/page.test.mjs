// End-to-end test of the first page: serves the repository with scripts/serve.sh, drives
// index.html in headless Chromium through playwright-core, and checks that writes land in
// IndexedDB, errors show on the page, and the data survives a reload.
//
// Run: node --test tests/e2e/     (needs pkg/: bash scripts/build.sh)

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const CHROMIUM = "/usr/bin/chromium";
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
const STEP_TIMEOUT_MS = 10_000;

/** A port that was free a moment ago: listen on port 0, read it, close. */
function freePort() {
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

/** Starts `bash scripts/serve.sh PORT` in its own process group; resolves once it answers HTTP. */
async function startServer(port) {
  const child = spawn("bash", ["scripts/serve.sh", String(port)], {
    cwd: ROOT,
    detached: true, // own process group, so stopServer can kill it and anything it started
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (d) => (output += d));
  child.stderr.on("data", (d) => (output += d));
  let exited = null;
  child.on("exit", (code, signal) => (exited = { code, signal }));

  const server = { child, port, output: () => output };
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (exited) {
      throw new Error(`scripts/serve.sh exited early (${JSON.stringify(exited)}):\n${output}`);
    }
    try {
      const res = await fetch(`http://127.0.0.1:${port}/index.html`);
      await res.arrayBuffer();
      if (res.ok) return server;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stopServer(server);
      throw new Error(`scripts/serve.sh did not answer on port ${port} within 15 s:\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 100)); // polling interval for the server only
  }
}

/** Kills the server's whole process group: TERM, then KILL if it lingers. */
async function stopServer(server) {
  const { child } = server;
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const killGroup = (signal) => {
    try {
      process.kill(-child.pid, signal);
    } catch {
      // already gone
    }
  };
  killGroup("SIGTERM");
  const timer = setTimeout(() => killGroup("SIGKILL"), 3_000);
  await exited;
  clearTimeout(timer);
}

// Polling helpers (playwright-core has no `expect`): wait until the DOM matches, with a message
// that says what was expected and what the page showed instead.

function cellSelector(table, key, col) {
  return `#${table} tbody tr[data-key="${key}"] td[data-col="${col}"]`;
}

async function describePage(page) {
  return page
    .evaluate(() => {
      const rows = (id) =>
        [...document.querySelectorAll(`#${id} tbody tr`)].map((tr) => tr.innerText.replace(/\s+/g, " ").trim());
      return JSON.stringify({
        status: document.getElementById("status")?.textContent,
        consensus: rows("consensus-table"),
        blobs: rows("blobs-table"),
      });
    })
    .catch((e) => `(could not read the page: ${e.message})`);
}

async function waitForCell(page, table, key, col, expected) {
  const sel = cellSelector(table, key, col);
  try {
    await page.waitForFunction(
      ([s, want]) => document.querySelector(s)?.textContent.trim() === want,
      [sel, expected],
      { timeout: STEP_TIMEOUT_MS },
    );
  } catch (err) {
    assert.fail(`expected ${sel} to read ${JSON.stringify(expected)}; page: ${await describePage(page)} (${err.message})`);
  }
}

async function waitForStatus(page, kind, pattern) {
  try {
    await page.waitForFunction(
      ([k, src]) => {
        const el = document.getElementById("status");
        return el?.dataset.kind === k && new RegExp(src).test(el.textContent);
      },
      [kind, pattern.source],
      { timeout: STEP_TIMEOUT_MS },
    );
  } catch (err) {
    assert.fail(`expected a ${kind} status matching ${pattern}; page: ${await describePage(page)} (${err.message})`);
  }
}

async function waitForEmptyTables(page) {
  try {
    await page.waitForFunction(
      () =>
        ["consensus-table", "blobs-table"].every((id) => {
          const rows = document.querySelectorAll(`#${id} tbody tr`);
          return rows.length === 1 && rows[0].classList.contains("empty");
        }),
      null,
      { timeout: STEP_TIMEOUT_MS },
    );
  } catch (err) {
    assert.fail(`expected both tables to be empty; page: ${await describePage(page)} (${err.message})`);
  }
}

async function writeVersion(page, key, data) {
  await page.locator("#version-key").fill(key);
  await page.locator("#version-data").fill(data);
  await page.getByRole("button", { name: "Write version" }).click();
}

async function writeBlob(page, key, data) {
  await page.locator("#blob-key").fill(key);
  await page.locator("#blob-data").fill(data);
  await page.getByRole("button", { name: "Write blob" }).click();
}

test("the first page writes Consensus versions and Blobs to IndexedDB and keeps them across a reload", { timeout: 60_000 }, async (t) => {
  for (const file of ["pkg/persist_playground.js", "pkg/persist_playground_bg.wasm"]) {
    assert.ok(
      existsSync(join(ROOT, file)),
      `${file} is missing: build the wasm package first with \`bash scripts/build.sh\``,
    );
  }
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: this test drives the system Chromium`);

  const server = await startServer(await freePort());
  t.after(() => stopServer(server));
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
  t.after(() => browser.close());

  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.setDefaultTimeout(STEP_TIMEOUT_MS);
  const consoleErrors = [];
  const pageErrors = [];
  page.on("console", (msg) => {
    if (msg.type() === "error") consoleErrors.push(`${msg.text()} (${msg.location().url})`);
  });
  page.on("pageerror", (err) => pageErrors.push(String(err)));

  const dbName = `e2e-${process.pid}`;
  const url = `http://127.0.0.1:${server.port}/index.html?db=${dbName}`;
  await page.goto(url);

  // Ready: the database is named on the page, and both tables show their empty row.
  await waitForStatus(page, "ok", /^ready/);
  assert.equal(await page.locator("#db-name").textContent(), dbName);
  await waitForEmptyTables(page);

  // First version of "demo".
  await writeVersion(page, "demo", "hello");
  await waitForStatus(page, "ok", /^committed v1 of demo$/);
  await waitForCell(page, "consensus-table", "demo", "headSeqno", "1");
  await waitForCell(page, "consensus-table", "demo", "versions", "1");
  await waitForCell(page, "consensus-table", "demo", "headPreview", "hello");

  // Second version: compare_and_set at head + 1.
  await writeVersion(page, "demo", "hello again");
  await waitForStatus(page, "ok", /^committed v2 of demo$/);
  await waitForCell(page, "consensus-table", "demo", "headSeqno", "2");
  await waitForCell(page, "consensus-table", "demo", "versions", "2");
  await waitForCell(page, "consensus-table", "demo", "bytes", String("hello".length + "hello again".length));
  await waitForCell(page, "consensus-table", "demo", "headPreview", "hello again");

  // A blob.
  await writeBlob(page, "part-0", "some bytes");
  await waitForStatus(page, "ok", /^wrote blob part-0 \(10 bytes\)$/);
  await waitForCell(page, "blobs-table", "part-0", "size", "10");

  // An empty key: the wasm API rejects it, the page says so and keeps working.
  await writeVersion(page, "", "no key");
  await waitForStatus(page, "error", /key must not be empty/);
  await waitForCell(page, "consensus-table", "demo", "headSeqno", "2");
  await writeVersion(page, "after-error", "still works");
  await waitForStatus(page, "ok", /^committed v1 of after-error$/);
  await waitForCell(page, "consensus-table", "after-error", "headSeqno", "1");

  // Durable: a reload reads everything back from IndexedDB.
  await page.reload();
  await waitForStatus(page, "ok", /^ready/);
  await waitForCell(page, "consensus-table", "demo", "headSeqno", "2");
  await waitForCell(page, "consensus-table", "demo", "versions", "2");
  await waitForCell(page, "consensus-table", "after-error", "headSeqno", "1");
  await waitForCell(page, "blobs-table", "part-0", "size", "10");
  assert.deepEqual(
    await page.locator("#consensus-table tbody tr").evaluateAll((trs) => trs.map((tr) => tr.dataset.key)),
    ["after-error", "demo"],
    "consensus keys, sorted",
  );

  mkdirSync(join(ROOT, "artifacts"), { recursive: true });
  await page.screenshot({ path: join(ROOT, "artifacts", "e2e-page.png"), fullPage: true });

  // Reset: the database is deleted and reopened empty, and writes start again at v1.
  await page.getByRole("button", { name: "Reset database" }).click();
  await waitForStatus(page, "ok", /^reset:/);
  await waitForEmptyTables(page);
  await writeVersion(page, "demo", "fresh");
  await waitForStatus(page, "ok", /^committed v1 of demo$/);
  await waitForCell(page, "consensus-table", "demo", "headSeqno", "1");

  assert.deepEqual(pageErrors, [], "uncaught errors in the page");
  assert.deepEqual(consoleErrors, [], "console errors in the page");
});
