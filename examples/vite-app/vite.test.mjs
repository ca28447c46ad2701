// The Vite app's production build (dist/, made by run.sh with no configuration) in headless
// Chromium: the web build is the export Vite picks, its .wasm is emitted as an asset, and the
// app writes to IndexedDB on two visits in a row.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { readFile, readdir } from "node:fs/promises";
import { dirname, extname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const DIST = join(dirname(fileURLToPath(import.meta.url)), "dist");
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".wasm": "application/wasm", ".css": "text/css" };
const requested = [];
const server = createServer(async (req, res) => {
  const path = normalize(decodeURIComponent(new URL(req.url, "http://x").pathname));
  requested.push(path);
  const file = join(DIST, path === "/" ? "index.html" : path);
  if (!file.startsWith(DIST)) return res.writeHead(403).end();
  try {
    res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" }).end(await readFile(file));
  } catch {
    res.writeHead(404).end();
  }
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const url = `http://127.0.0.1:${server.address().port}/`;
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

async function visit() {
  await page.goto(url);
  await page.waitForFunction(() => document.body.dataset.status !== "loading", null, { timeout: 60_000 });
  return page.evaluate(() => ({ ...document.body.dataset, log: document.getElementById("log").textContent }));
}

test("vite build with no configuration emits the package's .wasm as an asset of the web build", async () => {
  const assets = await readdir(join(DIST, "assets"));
  assert.ok(assets.some((f) => /^persist_playground_bg-.*\.wasm$/.test(f)), assets.join(", "));
  const js = (await Promise.all(assets.filter((f) => f.endsWith(".js")).map((f) => readFile(join(DIST, "assets", f), "utf8")))).join("\n");
  assert.doesNotMatch(js, /require\("fs"\)|__dirname/, "the node build was bundled");
});

test("the built app runs in Chromium and commits a write on every visit", async () => {
  const first = await visit();
  assert.equal(first.status, "ok", first.log);
  assert.equal(first.firstCommitted, "true");
  assert.ok(requested.some((p) => /\/assets\/persist_playground_bg-.*\.wasm$/.test(p)), requested.join(", "));
  const second = await visit();
  assert.equal(second.status, "ok", second.log);
  assert.equal(Number(second.visits), Number(first.visits) + 1, second.log);
  assert.deepEqual(problems, []);
});
