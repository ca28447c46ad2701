// The example page in headless Chromium (playwright-core from the repository's dev dependencies,
// driving Debian's /usr/bin/chromium): the web build of the assembled package loads through an
// import map, runs every component over IndexedDB, and its shard outlives a reload.
//
// Run: node --test examples/web/   (needs dist/npm/: bash scripts/package.sh)
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { dirname, extname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const TYPES = {
  ".html": "text/html",
  ".js": "text/javascript",
  ".mjs": "text/javascript",
  ".wasm": "application/wasm",
  ".json": "application/json",
};

// A static server of the repository on a free loopback port.
const server = createServer(async (req, res) => {
  const path = normalize(decodeURIComponent(new URL(req.url, "http://x").pathname));
  const file = join(ROOT, path);
  if (!file.startsWith(ROOT)) return res.writeHead(403).end();
  try {
    const body = await readFile(file);
    res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" }).end(body);
  } catch {
    res.writeHead(404).end();
  }
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const url = `http://127.0.0.1:${server.address().port}/examples/web/index.html`;

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run"],
});
const page = await browser.newPage();
const problems = [];
page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
page.on("console", (m) => { if (m.type() === "error") problems.push(`console: ${m.text()}`); });
after(async () => {
  await browser.close();
  server.close();
});

async function visit(href) {
  await page.goto(href);
  await page.waitForFunction(() => document.body.dataset.status !== "loading", null, { timeout: 30_000 });
  const data = await page.evaluate(() => ({ ...document.body.dataset, log: document.getElementById("log").textContent }));
  assert.equal(data.status, "ok", data.log);
  return data;
}

test("the page runs every component over IndexedDB with the web build", async () => {
  const data = await visit(`${url}?reset=1`);
  assert.equal(data.visits, "1");
  assert.equal(data.epoch, "1");
  assert.equal(data.taskRows, "1");
  assert.equal(data.faultCode, "Timeout");
  assert.equal(data.upsertViolations, "0");
  assert.ok(Number(data.upsertChecks) >= 5, data.log);
  assert.deepEqual(problems, []);
});

test("a reload finds the shard and the oracle's timeline where the last visit left them", async () => {
  const data = await visit(url);
  assert.equal(data.visits, "2", data.log);
  assert.equal(data.epoch, "2", "the second oracle instance takes the next epoch");
  assert.equal(data.taskRows, "1");
  assert.deepEqual(problems, []);
});
