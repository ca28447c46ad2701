// The Vite app's production build (dist/, made by run.sh with no configuration) in headless
// Chromium: the web build is the export Vite picks, its .wasm is emitted as an asset, and the
// app writes to IndexedDB on two visits in a row.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile, readdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { chromiumContext, load, serve, watchedPage } from "../browser-harness.mjs";

const DIST = join(dirname(fileURLToPath(import.meta.url)), "dist");
const requested = [];
const url = `${await serve(DIST, { index: "index.html", onRequest: (p) => requested.push(p) })}/`;
const problems = [];
const page = await watchedPage(await chromiumContext(), problems);

async function visit() {
  await load(page, url);
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
