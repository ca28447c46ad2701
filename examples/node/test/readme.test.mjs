// The README's "Use it as a library" snippets under Node, as written (../../readme-snippets.mjs
// merges their imports): every block but the browser-only one (IndexedDB), in order, in a
// fresh Node process that must finish by itself. Run by ../run.sh with the packed package.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { writeFileSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";

import { compose, librarySnippets } from "../../readme-snippets.mjs";

const here = fileURLToPath(new URL("..", import.meta.url));

test("the README's library snippets run under Node, as written, and the process exits by itself", () => {
  const blocks = librarySnippets();
  const browserOnly = blocks.filter((b) => b.tags.has("browser"));
  assert.ok(blocks.length >= 8, `found ${blocks.length} js blocks`);
  assert.equal(browserOnly.length, 1, "one block needs a browser (IndexedDB)");
  // What the snippets' comments promise, read back after they ran.
  const epilogue = `
    const state = await client.inspectState("orders");
    console.log("README-RESULT " + JSON.stringify({
      conformance: report.passed, blobFailure: report.blob.failure, consensusFailure: report.consensus.failure,
      ordersUpper: state.upper, listenFrontier: listen.frontier, kind: mine.kind,
      mineUpper: await mineWriter.fetchRecentUpper(),
    }));
  `;
  const file = `${here}/readme-snippets.gen.mjs`;
  writeFileSync(file, compose(blocks.filter((b) => !b.tags.has("browser")), epilogue));
  try {
    const r = spawnSync(process.execPath, [file], { encoding: "utf8", cwd: here, timeout: 120_000 });
    assert.equal(r.signal, null, `killed (${r.signal}): the snippets did not let the process exit\n${r.stderr}`);
    assert.equal(r.status, 0, r.stderr);
    const line = r.stdout.split("\n").find((l) => l.startsWith("README-RESULT "));
    assert.ok(line, r.stdout);
    assert.deepEqual(JSON.parse(line.slice("README-RESULT ".length)), {
      conformance: true, blobFailure: null, consensusFailure: null,
      ordersUpper: 2, listenFrontier: 2, kind: "custom", mineUpper: 1,
    });
  } finally {
    rmSync(file, { force: true });
  }
});
