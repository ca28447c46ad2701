// A Consensus on PostgreSQL (../consensus.mjs) under persist through PersistLocation.custom,
// against the server at PERSIST_TEST_POSTGRES_URL. Each test works in a schema of its own,
// dropped at its end. Without the URL every test fails (it is asked to run, so it must not pass).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";

import init, { PersistLocation, PersistClient, runLocationConformance } from "persist-playground";
import { fsBlob } from "persist-playground/fs";
import { createConsensusTable, pgConsensus, serializablePool } from "../consensus.mjs";

await init();

const URL = process.env.PERSIST_TEST_POSTGRES_URL;

/** A fresh schema with the consensus table; `pools(n)` opens n pools onto it (n "processes"). */
async function fresh(t) {
  assert.ok(URL, "PERSIST_TEST_POSTGRES_URL is not set: start PostgreSQL (scripts/services.sh) and export it");
  const schema = `persist_${randomUUID().replaceAll("-", "")}`;
  const admin = serializablePool(URL, { max: 1 });
  await admin.query(`CREATE SCHEMA ${schema}`);
  const opened = [];
  const pool = () => {
    const p = serializablePool(URL, { options: `-c search_path=${schema}` });
    opened.push(p);
    return p;
  };
  await createConsensusTable(pool());
  const dir = mkdtempSync(join(tmpdir(), "persist-pg-blob-"));
  const locations = [];
  t.after(async () => {
    // Close the locations first: background work (compaction, GC) still running on them then
    // stops, instead of retrying against pools that are gone (which would keep Node alive).
    for (const l of locations) l.close();
    await Promise.all(opened.map((p) => p.end()));
    await admin.query(`DROP SCHEMA ${schema} CASCADE`);
    await admin.end();
    rmSync(dir, { recursive: true, force: true });
  });
  const location = (name) => {
    const l = PersistLocation.custom({ blob: fsBlob(dir), consensus: pgConsensus(pool()), name });
    locations.push(l);
    return l;
  };
  return { pool, location };
}

test("the pg Consensus (with the node:fs Blob) passes the Blob and Consensus conformance suites", async (t) => {
  const { location } = await fresh(t);
  const report = await runLocationConformance(location("pg"));
  assert.deepEqual(report, {
    passed: true,
    blob: { passed: true, failure: null },
    consensus: { passed: true, failure: null },
  });
});

test("compareAndSet is linearizable across connections: of two jumps from one head, exactly one wins", async (t) => {
  const { pool } = await fresh(t);
  const [a, b] = [pgConsensus(pool()), pgConsensus(pool())];
  const data = new Uint8Array([1]);
  let aborted = 0;
  for (let round = 0; round < 20; round++) {
    const key = `k${round}`;
    assert.equal(await a.compareAndSet(key, null, { seqno: 5n, data }), true);
    // Different new seqnos from one expected head: only serializable isolation tells them apart.
    const outcomes = await Promise.all([
      a.compareAndSet(key, 5n, { seqno: 6n, data }).catch((e) => (aborted++, e)),
      b.compareAndSet(key, 5n, { seqno: 10n, data }).catch((e) => (aborted++, e)),
    ]);
    const wins = outcomes.filter((o) => o === true).length;
    assert.ok(wins <= 1, `round ${round}: both won`);
    for (const o of outcomes) {
      if (o instanceof Error) {
        assert.match(o.message, /SQLSTATE 40001/);
        assert.notEqual(o.indeterminate, true, "a serialization failure wrote nothing");
      }
    }
    const versions = await a.scan(key, 0n, 100);
    assert.equal(versions.length, 1 + wins, `round ${round}`);
  }
  t.diagnostic(`serialization failures: ${aborted}`);
});

test("writers on two connections race compareAndAppend: every write lands exactly once", async (t) => {
  const { location } = await fresh(t);
  const perWriter = 10;
  // A barrier: neither writes before both have read the upper (0), so their first writes race at
  // one upper and exactly one of them loses.
  let arrive;
  const both = new Promise((resolve) => { let n = 0; arrive = () => { if (++n === 2) resolve(); }; });
  const run = async (name) => {
    const writer = await new PersistClient(location(name), { seed: 7 }).openWriter("race");
    let at = await writer.fetchRecentUpper();
    arrive();
    await both;
    let lost = 0;
    for (let i = 0; i < perWriter; i++) {
      for (;;) {
        const r = await writer.compareAndAppend([{ key: `${name}${i}`, value: "x", time: at }], at, at + 1);
        at = r.upper;
        if (r.committed) break;
        lost++;
      }
    }
    const id = writer.writerId;
    await writer.expire();
    return { id, lost };
  };
  const [a, b] = await Promise.all([run("a"), run("b")]);
  assert.notEqual(a.id, b.id, "the same seed, yet each client draws its own writer id");
  const client = new PersistClient(location("check"));
  const upper = await (await client.openWriter("race")).fetchRecentUpper();
  assert.equal(upper, 2 * perWriter);
  const rows = await (await client.openReader("race")).snapshot(upper - 1);
  const expected = ["a", "b"].flatMap((p) => Array.from({ length: perWriter }, (_, i) => `${p}${i}`)).sort();
  assert.deepEqual(rows.map((r) => r.key).sort(), expected);
  assert.ok(a.lost + b.lost >= 1, "the first writes raced at upper 0: one lost");
  t.diagnostic(`lost races: a ${a.lost}, b ${b.lost}`);
});
