// Locations JavaScript supplies (issue 18): PersistLocation.custom over objects of async
// functions, runLocationConformance, and persist-playground/fs (node:fs), shared by processes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import init, { PersistLocation, PersistClient, runLocationConformance } from "persist-playground";
import { fsBlob, fsConsensus, fsLocation } from "persist-playground/fs";

await init();

const here = fileURLToPath(new URL("..", import.meta.url));
// A directory for one test, and the locations opened on it: at the test's end they are closed
// (background compaction and GC on them stop) before the directory goes, or that work would
// keep retrying against missing files and keep Node alive.
const opened = new Map();
const tempDir = (t) => {
  const dir = mkdtempSync(join(tmpdir(), "persist-fs-"));
  t.after(() => {
    for (const l of opened.get(t) ?? []) l.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
};
const keep = (t, location) => {
  opened.set(t, [...(opened.get(t) ?? []), location]);
  return location;
};

/** A Consensus in a Map (correct), with hooks to break it. */
function mapConsensus(hooks = {}) {
  const versions = new Map();
  return {
    head: async (k) => versions.get(k)?.at(-1) ?? null,
    compareAndSet: async (k, expected, next) => {
      const chain = versions.get(k) ?? [];
      if (!hooks.ignoreExpected && (chain.at(-1)?.seqno ?? null) !== expected) return false;
      versions.set(k, [...chain, next]);
      hooks.afterCas?.();
      return true;
    },
    scan: async (k, from, limit) => (versions.get(k) ?? []).filter((v) => v.seqno >= from).slice(0, limit),
    truncate: async (k, s) => {
      const c = versions.get(k);
      const kept = c.filter((v) => v.seqno >= s);
      versions.set(k, kept);
      return c.length - kept.length;
    },
    listKeys: async () => [...versions.keys()],
  };
}

test("the node:fs location passes the Blob and Consensus conformance suites", async (t) => {
  const location = keep(t, fsLocation(tempDir(t)));
  assert.equal(location.kind, "custom");
  const report = await runLocationConformance(location);
  assert.deepEqual(report, {
    passed: true,
    blob: { passed: true, failure: null },
    consensus: { passed: true, failure: null },
  });
});

test("runLocationConformance names the case a broken Consensus breaks", async (t) => {
  const broken = keep(t, PersistLocation.custom({ blob: fsBlob(tempDir(t)), consensus: mapConsensus({ ignoreExpected: true }) }));
  const report = await runLocationConformance(broken);
  assert.equal(report.passed, false);
  assert.equal(report.blob.passed, true);
  assert.equal(report.consensus.passed, false);
  assert.match(report.consensus.failure, /contract broken: expecting a version of an absent key/);
});

test("a blob without restore fails the suite's restore case, and says so", async () => {
  const blobs = new Map();
  const blob = {
    get: async (k) => blobs.get(k) ?? null,
    set: async (k, v) => void blobs.set(k, v),
    delete: async (k) => { const v = blobs.get(k); blobs.delete(k); return v ? v.length : null; },
    list: async (p) => [...blobs].filter(([k]) => k.startsWith(p)).map(([key, v]) => ({ key, sizeInBytes: v.length })),
  };
  const report = await runLocationConformance(PersistLocation.custom({ blob, consensus: mapConsensus() }));
  assert.equal(report.consensus.passed, true);
  assert.equal(report.blob.passed, false);
  assert.match(report.blob.failure, /has no restore function/);
});

test("a throw marked indeterminate after the write happened: persist resolves it with the token, the write lands once", async (t) => {
  let fail = true;
  let thrown = 0;
  const consensus = mapConsensus({
    afterCas: () => {
      if (fail) {
        fail = false;
        thrown++;
        throw Object.assign(new Error("timeout: connection lost"), { indeterminate: true });
      }
    },
  });
  const location = keep(t, PersistLocation.custom({ blob: fsBlob(tempDir(t)), consensus }));
  const client = new PersistClient(location);
  const writer = await client.openWriter("s");
  fail = true; // the write's own compareAndSet happens, then reports a timeout
  assert.deepEqual(await writer.compareAndAppend([{ key: "k", value: "v", time: 0 }], 0, 1), { committed: true, upper: 1 });
  assert.equal(thrown, 2);
  const rows = await (await client.openReader("s")).snapshot(0);
  assert.deepEqual(rows.map((r) => [r.key, r.value, r.diff]), [["k", "v", 1n]]);
});

test("a plain throw is determinate: retried until it works", async (t) => {
  let failures = 3;
  const inner = mapConsensus();
  const consensus = {
    ...inner,
    compareAndSet: async (...args) => {
      if (failures > 0) {
        failures--;
        throw new Error("the database is busy");
      }
      return inner.compareAndSet(...args);
    },
  };
  const client = new PersistClient(keep(t, PersistLocation.custom({ blob: fsBlob(tempDir(t)), consensus })));
  const writer = await client.openWriter("s");
  assert.deepEqual(await writer.compareAndAppend([{ key: "k", value: "v", time: 0 }], 0, 1), { committed: true, upper: 1 });
  assert.equal(failures, 0);
});

test("a function returning the wrong shape is a permanent error naming it", async (t) => {
  const consensus = { ...mapConsensus(), head: async () => ({ seqno: "one", data: null }) };
  const client = new PersistClient(keep(t, PersistLocation.custom({ blob: fsBlob(tempDir(t)), consensus, name: "mine" })), { callTimeoutMs: 5_000 });
  await assert.rejects(client.openWriter("s"), (e) => {
    assert.equal(e.code, "Permanent");
    assert.match(e.message, /custom consensus\.head returned a bad value: seqno must be a number or a bigint/);
    return true;
  });
});

test("PersistLocation.custom checks its arguments", () => {
  const blob = fsBlob("/nonexistent-never-used");
  assert.throws(() => PersistLocation.custom({ blob }), (e) => e instanceof TypeError && /consensus/.test(e.message));
  assert.throws(
    () => PersistLocation.custom({ blob, consensus: { ...mapConsensus(), scan: 3 } }),
    (e) => e instanceof TypeError && /options\.consensus\.scan must be a function, got a number/.test(e.message),
  );
  assert.throws(() => PersistLocation.custom({ blob, consensus: mapConsensus(), nmae: "x" }), TypeError);
});

test("two Node processes race compareAndAppend on one fs directory: every write lands exactly once", async (t) => {
  const dir = tempDir(t);
  const perProcess = 10;
  const script = `
    import { PersistClient } from "persist-playground";
    import { fsLocation } from "persist-playground/fs";
    const location = fsLocation(process.argv[1]);
    import { existsSync, writeFileSync } from "node:fs";
    const writer = await new PersistClient(location, { seed: 7 }).openWriter("race");
    let at = await writer.fetchRecentUpper(), lost = 0;
    // A barrier: neither writes before both have read the upper (0), so their first writes race
    // at one upper and exactly one of them loses.
    writeFileSync(process.argv[1] + "/ready-" + process.argv[2], "");
    while (!["a", "b"].every((p) => existsSync(process.argv[1] + "/ready-" + p))) await new Promise((r) => setTimeout(r, 5));
    for (let i = 0; i < ${perProcess}; i++) {
      for (;;) {
        const r = await writer.compareAndAppend([{ key: process.argv[2] + i, value: "x", time: at }], at, at + 1);
        if (r.committed) { at = r.upper; break; }
        lost++;
        at = r.upper;
      }
    }
    await writer.expire();
    console.log(JSON.stringify({ lost, id: writer.writerId }));
  `;
  const run = (name) =>
    new Promise((resolve, reject) => {
      const p = spawn(process.execPath, ["--input-type=module", "-e", script, dir, name], { cwd: here });
      let out = "", err = "";
      p.stdout.on("data", (d) => (out += d));
      p.stderr.on("data", (d) => (err += d));
      p.on("exit", (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`${name}: exit ${code}: ${err}`))));
    });
  const [a, b] = await Promise.all([run("a"), run("b")]);
  assert.notEqual(a.id, b.id, "the same seed, yet each process draws its own writer id");
  const location = keep(t, fsLocation(dir));
  const client = new PersistClient(location);
  const writer = await client.openWriter("race");
  const upper = await writer.fetchRecentUpper();
  assert.equal(upper, 2 * perProcess);
  const rows = await (await client.openReader("race")).snapshot(upper - 1);
  const keys = rows.map((r) => r.key).sort();
  const expected = ["a", "b"].flatMap((p) => Array.from({ length: perProcess }, (_, i) => p + i)).sort();
  assert.deepEqual(keys, expected);
  assert.ok(a.lost + b.lost >= 1, "the first writes raced at upper 0: one lost");
  t.diagnostic(`lost races: a ${a.lost}, b ${b.lost}`);
});
