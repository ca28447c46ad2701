// The example page in headless Chromium (playwright-core from the repository's dev dependencies,
// driving Debian's /usr/bin/chromium): the web build of the assembled package loads through an
// import map, runs every component over IndexedDB, and its shard outlives a reload.
//
// Run: node --test examples/web/   (needs dist/npm/: bash scripts/package.sh)
import { test } from "node:test";
import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { chromiumContext, load, serve, watchedPage } from "../browser-harness.mjs";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const url = `${await serve(ROOT)}/examples/web/index.html`;
const problems = [];
const page = await watchedPage(await chromiumContext(), problems);

async function visit(href) {
  await load(page, href, 30_000);
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
