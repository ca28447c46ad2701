// Where a client's ids come from (issue 20): seeded only over an in-memory location given a
// seed; from the platform's CSPRNG everywhere else; and a clear error where ids still collide.
import { test } from "node:test";
import assert from "node:assert/strict";

import init, { PersistLocation, PersistClient } from "persist-playground";

await init();

const ID = /^w[0-9a-f]{24}$/;
const row = (time) => [{ key: "k", value: String(time), time }];

test("over memory with a seed, writer ids are the same on every run (seeded runs replay)", async () => {
  const a = await new PersistClient(PersistLocation.inMemory(), { seed: 7 }).openWriter("s");
  const b = await new PersistClient(PersistLocation.inMemory(), { seed: 7 }).openWriter("s");
  const c = await new PersistClient(PersistLocation.inMemory(), { seed: 8 }).openWriter("s");
  assert.match(a.writerId, ID);
  assert.equal(a.writerId, b.writerId);
  assert.notEqual(a.writerId, c.writerId);
});

test("without a seed, two clients on one in-memory location draw different ids, and both write", async () => {
  const location = PersistLocation.inMemory();
  const a = await new PersistClient(location).openWriter("s");
  const b = await new PersistClient(location).openWriter("s");
  assert.match(a.writerId, ID);
  assert.notEqual(a.writerId, b.writerId);
  assert.deepEqual(await a.compareAndAppend(row(0), 0, 1), { committed: true, upper: 1 });
  assert.deepEqual(await b.compareAndAppend(row(1), 1, 2), { committed: true, upper: 2 });
});

test("over a location JavaScript supplies, the seed does not fix the ids (CSPRNG)", async () => {
  const versions = new Map();
  const blobs = new Map();
  const location = PersistLocation.custom({
    blob: {
      get: (k) => blobs.get(k) ?? null,
      set: (k, v) => void blobs.set(k, v),
      delete: (k) => { const v = blobs.get(k); blobs.delete(k); return v ? v.length : null; },
      list: (p) => [...blobs].filter(([k]) => k.startsWith(p)).map(([key, v]) => ({ key, sizeInBytes: v.length })),
    },
    consensus: {
      head: (k) => versions.get(k)?.at(-1) ?? null,
      compareAndSet: (k, expected, next) => {
        const chain = versions.get(k) ?? [];
        if ((chain.at(-1)?.seqno ?? null) !== expected) return false;
        versions.set(k, [...chain, next]);
        return true;
      },
      scan: (k, from, limit) => (versions.get(k) ?? []).filter((v) => v.seqno >= from).slice(0, limit),
      truncate: (k, s) => { const c = versions.get(k); const kept = c.filter((v) => v.seqno >= s); versions.set(k, kept); return c.length - kept.length; },
      listKeys: () => [...versions.keys()],
    },
  });
  assert.equal(location.kind, "custom");
  // Two "visits" with the same seed: before issue 20 both drew the same writer id and tokens,
  // and the second visit's first write failed for good as a replay of the first one's.
  const first = await new PersistClient(location, { seed: 7 }).openWriter("orders");
  assert.deepEqual(await first.compareAndAppend(row(0), 0, 1), { committed: true, upper: 1 });
  const second = await new PersistClient(location, { seed: 7 }).openWriter("orders");
  assert.notEqual(first.writerId, second.writerId);
  assert.deepEqual(await second.compareAndAppend(row(1), 1, 2), { committed: true, upper: 2 });
});

test("two clients forcing one writer id (the same seed on one memory location) get an error that says so", async () => {
  const location = PersistLocation.inMemory();
  const a = await new PersistClient(location, { seed: 7 }).openWriter("orders");
  const b = await new PersistClient(location, { seed: 7 }).openWriter("orders");
  assert.equal(a.writerId, b.writerId);
  assert.deepEqual(await a.compareAndAppend(row(0), 0, 1), { committed: true, upper: 1 });
  await assert.rejects(b.compareAndAppend(row(1), 1, 2), (e) => {
    assert.equal(e.code, "Permanent");
    assert.match(e.message, new RegExp(`another process uses writer ${a.writerId} \\(token i[0-9a-f]+ committed with upper .*\\): open a new writer`));
    return true;
  });
});
