// The README's "Use it as a library" snippets in a page, with the web build of the assembled
// package (dist/npm/, from scripts/package.sh) in headless Chromium: every block in order, and
// the IndexedDB block, as written, on 3 visits in a row and in 2 pages at once, with `seed: 7`
// and with no seed. Every visit's write must commit (issue 20: before, 8 of 10 visits failed
// for good, because each visit drew the same writer id and idempotency tokens).
//
// Run: node --test examples/web/   (needs dist/npm/: bash scripts/package.sh)
import { test } from "node:test";
import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { chromiumContext, load, serve, watchedPage } from "../browser-harness.mjs";
import { compose, librarySnippets } from "../readme-snippets.mjs";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

const blocks = librarySnippets();
const idb = blocks.filter((b) => b.tags.has("browser"));
assert.equal(idb.length, 1, "the README has one browser-only (IndexedDB) block");
const idbCode = idb[0].code;
assert.match(idbCode, /\{ seed: 7 \}/, "the IndexedDB snippet passes seed 7");
const WITHOUT_SEED = idbCode.replace(", { seed: 7 }", "");
assert.notEqual(WITHOUT_SEED, idbCode);

// Counts the rows of the snippet's shard "visits" in its database "my-demo".
const COUNT = `
import init, { PersistLocation, PersistClient } from "persist-playground";
await init();
const location = await PersistLocation.indexedDb("my-demo");
const client = new PersistClient(location);
const writer = await client.openWriter("visits");
const upper = await writer.fetchRecentUpper();
const rows = upper === 0 ? [] : await (await client.openReader("visits")).snapshot(upper - 1);
window.result = { upper, visits: rows.reduce((n, r) => n + Number(r.diff), 0) };
location.close();
`;
const EPILOGUE = `
window.result = { conformance: report.passed, listenFrontier: listen.frontier, kind: mine.kind };
`;
const modules = {
  "/readme/all.js": compose(blocks, EPILOGUE),
  "/readme/idb-seed.js": idbCode,
  "/readme/idb-noseed.js": WITHOUT_SEED,
  "/readme/count.js": COUNT,
  "/readme/reset.js": `import init, { PersistLocation } from "persist-playground";\nawait init();\nawait PersistLocation.deleteIndexedDb("my-demo");\n`,
};
// A page that runs one module and reports how it ended in data-status.
const page = (module) => `<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,">
<script type="importmap">{ "imports": { "persist-playground": "/dist/npm/web/index.js" } }</script></head>
<body data-status="loading"><script type="module">
import(${JSON.stringify(module)}).then(
  () => { document.body.dataset.status = "ok"; },
  (e) => { document.body.dataset.status = "error: " + (e.code ? e.code + ": " : "") + e.message; });
</script></body></html>`;

const origin = await serve(ROOT, {
  route: (path, url) => {
    if (modules[path]) return { type: "text/javascript", body: modules[path] };
    if (path === "/readme/page.html") return { type: "text/html", body: page(url.searchParams.get("module")) };
    return null;
  },
});
// One context: one origin's IndexedDB, shared by its pages as by a user's tabs.
const context = await chromiumContext();
const problems = [];

/** Opens a page that runs `module`; resolves to its status and window.result. */
async function visit(module) {
  const tab = await watchedPage(context, problems);
  try {
    await load(tab, `${origin}/readme/page.html?module=${encodeURIComponent(module)}`);
    return await tab.evaluate(() => ({ status: document.body.dataset.status, result: window.result ?? null }));
  } finally {
    await tab.close();
  }
}

async function visits() {
  const { status, result } = await visit("/readme/count.js");
  assert.equal(status, "ok");
  return result.visits;
}

test("every README library snippet runs in a page with the web build, in order", async () => {
  assert.equal((await visit("/readme/reset.js")).status, "ok");
  const { status, result } = await visit("/readme/all.js");
  assert.equal(status, "ok");
  assert.deepEqual(result, { conformance: true, listenFrontier: 2, kind: "custom" });
  assert.equal(await visits(), 1, "the IndexedDB block wrote one visit");
  assert.deepEqual(problems, []);
});

for (const [name, module] of [["seed: 7", "/readme/idb-seed.js"], ["no seed", "/readme/idb-noseed.js"]]) {
  test(`the IndexedDB snippet with ${name}: 3 visits in a row and 2 pages at once, 5 of 5 commit`, async () => {
    const before = await visits();
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await visit(module)).status);
    statuses.push(...(await Promise.all([visit(module), visit(module)])).map((v) => v.status));
    assert.deepEqual(statuses, ["ok", "ok", "ok", "ok", "ok"]);
    assert.equal(await visits(), before + 5, "each visit's write committed once");
    assert.deepEqual(problems, []);
  });
}
