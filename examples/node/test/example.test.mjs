// The packed package under Node with the in-memory location, imported the way a user imports it.
// Run by ../run.sh (npm install of the npm pack output, then node --test with no Rust on PATH).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";

import init, {
  PersistLocation,
  PersistClient,
  TimestampOracle,
  WriteTask,
  UpsertPipeline,
} from "persist-playground";

await init(); // a no-op under Node; the same line works in a browser

const sortUpdates = (updates) =>
  [...updates].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));

test("the package runs with no Rust toolchain on PATH", () => {
  for (const tool of ["cargo", "rustc", "wasm-pack", "wasm-bindgen"]) {
    const found = spawnSync("sh", ["-c", `command -v ${tool}`], { encoding: "utf8" });
    assert.notEqual(found.status, 0, `${tool} is on PATH (${found.stdout.trim()})`);
  }
});

test("the node build is the one resolved", async () => {
  const { createRequire } = await import("node:module");
  const resolved = createRequire(import.meta.url).resolve("persist-playground");
  assert.match(resolved, /node_modules\/persist-playground\/node\/index\.cjs$/);
  assert.match(import.meta.resolve("persist-playground"), /\/node\/index\.mjs$/);
  // require() gets the same classes, async iterator included.
  const cjs = createRequire(import.meta.url)("persist-playground");
  assert.equal(cjs.PersistLocation, PersistLocation);
  assert.equal(typeof cjs.Listen.prototype[Symbol.asyncIterator], "function");
});

test("the bundler build works where .wasm imports are ES modules (node --experimental-wasm-modules)", () => {
  const script = `
    import init, { PersistLocation, PersistClient } from "persist-playground/bundler";
    await init();
    const client = new PersistClient(PersistLocation.inMemory());
    const writer = await client.openWriter("s");
    const out = await writer.compareAndAppend([{ key: "k", value: "v", time: 0 }], 0, 1);
    const rows = await (await client.openReader("s")).snapshot(0);
    console.log(JSON.stringify({ out, rows: rows.map((r) => [r.key, r.value, r.time, String(r.diff)]) }));
    process.exit(0);
  `;
  const r = spawnSync(process.execPath, ["--experimental-wasm-modules", "--no-warnings", "--input-type=module", "-e", script], {
    encoding: "utf8",
    cwd: new URL("..", import.meta.url).pathname,
  });
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), { out: { committed: true, upper: 1 }, rows: [["k", "v", 0, "1"]] });
});

test("a shard: compareAndAppend, a lost race, append, snapshot", async () => {
  const location = PersistLocation.inMemory();
  assert.equal(location.kind, "memory");
  const client = new PersistClient(location, { seed: 7 });
  const writer = await client.openWriter("orders");
  const reader = await client.openReader("orders");
  assert.equal(writer.upper, 0);

  let out = await writer.compareAndAppend(
    [
      { key: "apple", value: "3", time: 0 },
      { key: "pear", value: "1", time: 1, diff: 2 },
    ],
    0,
    2,
  );
  assert.deepEqual(out, { committed: true, upper: 2 });

  // A second writer that still expects the upper at 0 loses: nothing is written.
  const stale = await new PersistClient(location, { seed: 8 }).openWriter("orders");
  out = await stale.compareAndAppend([{ key: "ghost", value: "x", time: 0 }], 0, 1);
  assert.deepEqual(out, { committed: false, upper: 2 });

  // append (for replicas writing identical data) trims what is already there.
  out = await stale.append([{ key: "apple", value: "3", time: 2, diff: -1n }], 2, 3);
  assert.deepEqual(out, { committed: true, upper: 3 });

  // At time 2 apple's +1 and -1 cancel: a snapshot is consolidated.
  const snapshot = await reader.snapshot(2);
  assert.deepEqual(snapshot, [{ key: "pear", value: "1", time: 2, diff: 2n }]);
  const atOne = await reader.snapshot(1);
  assert.deepEqual(sortUpdates(atOne), [
    { key: "apple", value: "3", time: 1, diff: 1n },
    { key: "pear", value: "1", time: 1, diff: 2n },
  ]);

  const state = await client.inspectState("orders");
  assert.equal(state.shardId, "orders");
  assert.equal(state.upper, 3);
  assert.equal(typeof state.seqno, "bigint");
  assert.ok(state.seqno > 0n);
  assert.equal(state.writers.length, 2);

  const events = client.takeEvents();
  assert.ok(events.length > 0);
  const commits = events.filter((e) => e.type === "command" && e.cmd === "compare_and_append");
  assert.ok(commits.some((e) => e.outcome.kind === "committed" && e.upper.after === 2));
  assert.ok(events.every((e) => typeof e.atMs === "number" && typeof e.who === "string"));

  await writer.expire();
  await stale.expire();
  await reader.expire();
  assert.equal(writer.expired, true);
});

test("subscribe: a snapshot, then a listen that sees later writes", async () => {
  const location = PersistLocation.inMemory();
  const client = new PersistClient(location, { seed: 1 });
  const writer = await client.openWriter("feed");
  await writer.compareAndAppend([{ key: "a", value: "1", time: 0 }], 0, 1);
  const reader = await client.openReader("feed");
  const { snapshot, listen } = await reader.subscribe(0);
  assert.deepEqual(snapshot, [{ key: "a", value: "1", time: 0, diff: 1n }]);
  assert.equal(reader.expired, true, "the reader moved into the listen");

  await writer.compareAndAppend([{ key: "b", value: "2", time: 1 }], 1, 2);
  await writer.compareAndAppend([{ key: "c", value: "3", time: 2 }], 2, null); // finishes the shard
  const seen = [];
  for await (const events of listen) {
    for (const e of events) {
      if (e.type === "updates") seen.push(...e.updates.map((u) => u.key));
    }
  }
  assert.deepEqual(seen, ["b", "c"]);
  assert.equal(listen.frontier, null);
  await listen.expire();
  await writer.expire();
});

test("expire() cancels a next() that waits for data", async () => {
  const location = PersistLocation.inMemory();
  const client = new PersistClient(location, { seed: 4 });
  const writer = await client.openWriter("quiet");
  await writer.compareAndAppend([], 0, 1);
  const listen = await (await client.openReader("quiet")).listen(0);
  assert.equal((await listen.next()).at(-1).frontier, 1);
  const pending = listen.next(); // nothing more is written: it waits
  await listen.expire();
  await assert.rejects(pending, (e) => e.code === "Expired" && /listen of reader r[0-9a-f]+ has expired/.test(e.message));
  await writer.expire();
});

test("a write task keeps a shard equal to its desired rows", async () => {
  const location = PersistLocation.inMemory();
  const client = new PersistClient(location, { seed: 3 });
  const task = await WriteTask.spawn(client, "mz_sessions", {
    upperTickIntervalMs: 50,
    batchDurationMs: 0,
    initialBackoffMs: 5,
  });
  await task.append([
    { row: ["alice", 1, true] },
    { row: ["bob", 2n, null], diff: 2 },
  ]);
  await task.deleteWhere((row) => row[0] === "alice");
  await task.append([{ row: ["carol", 9007199254740993n, false] }]);
  const { rows, upper } = await task.snapshot();
  assert.ok(upper > 0);
  const byName = Object.fromEntries(rows.map((r) => [r.row[0], r]));
  assert.deepEqual(Object.keys(byName).sort(), ["bob", "carol"]);
  assert.deepEqual(byName.bob, { row: ["bob", 2n, null], diff: 2n });
  assert.deepEqual(byName.carol.row, ["carol", 9007199254740993n, false]);

  const events = task.takeEvents();
  assert.equal(events[0].event.type, "spawned");
  assert.ok(events.filter((e) => e.event.type === "committed").length >= 3);

  task.shutdown();
  assert.equal(task.running, false);
  await assert.rejects(task.append([{ row: ["dave"] }]), (e) => {
    assert.equal(e.code, "WriteTaskError");
    assert.match(e.message, /shut|ended/);
    return true;
  });
  location.close();
});

test("the timestamp oracle: monotone, and durable across a restart", async () => {
  const mem = TimestampOracle.inMemory({ initially: 10, clock: "none" });
  const w1 = await mem.writeTs();
  const w2 = await mem.writeTs();
  assert.ok(w2.timestamp > w1.timestamp);
  assert.equal(w1.advanceTo, w1.timestamp + 1);
  await mem.applyWrite(w2.timestamp);
  assert.ok((await mem.readTs()) >= w2.timestamp);
  assert.equal(mem.snapshot(), null);

  const location = PersistLocation.inMemory();
  const options = { timeline: "epoch_ms", persistIntervalMs: 1000, clock: "none" };
  const first = await TimestampOracle.open(location, options);
  const handed = [];
  for (let i = 0; i < 5; i++) handed.push((await first.writeTs()).timestamp);
  const snap = first.snapshot();
  assert.equal(snap.epoch, 1);
  assert.equal(snap.durableUpper, 1000);

  // A restart resumes above everything handed out, and fences the old instance.
  const second = await TimestampOracle.open(location, options);
  const next = await second.writeTs();
  assert.ok(next.timestamp > Math.max(...handed));
  assert.equal(next.timestamp, 1001, "it resumes at the stored upper bound");
  assert.ok(second.takeEvents().some((e) => e.event.type === "opened" && e.event.resumedFrom === 1000));
  await assert.rejects(first.confirmLeadership(), (e) => e.code === "Fenced" && /fenced/.test(e.message));
});

test("faults: a location that fails every call times out, then recovers", async () => {
  const location = PersistLocation.inMemory({
    faults: { seed: 5, shouldHappen: 1, shouldTimeout: 0 },
  });
  const client = new PersistClient(location, { seed: 2, callTimeoutMs: 200 });
  const writer = await client.openWriter("flaky");
  location.setFaults({ shouldHappen: 0, shouldTimeout: 0 });
  await assert.rejects(
    writer.compareAndAppend([{ key: "k", value: "v", time: 0 }], 0, 1),
    (e) => e.code === "Timeout" && /callTimeoutMs/.test(e.message),
  );
  assert.ok(location.faultCounts().failed > 0);
  // The same writer, once storage works again: the aborted call left nothing behind.
  location.setFaults({ shouldHappen: 1, shouldTimeout: 0 });
  const out = await writer.compareAndAppend([{ key: "k", value: "v", time: 0 }], 0, 1);
  assert.deepEqual(out, { committed: true, upper: 1 });
  assert.ok(location.faultCounts().ok > 0);
  await writer.expire();
  location.close();
});

test("upsert: two replicas race to write one shard and it always matches the model", async () => {
  const location = PersistLocation.inMemory();
  const pipeline = await UpsertPipeline.create(location, {
    shardId: "upserts",
    seed: 2,
    replicas: [{ readBatch: 1, tickMs: 2 }, { readBatch: 5, tickMs: 3 }],
    callTimeoutMs: 60_000,
  });
  await pipeline.start(0);
  await pipeline.start(1);

  // By hand: the later offset wins per key, a null deletes, an error takes its key's place.
  pipeline.push(1, "a", 1);
  pipeline.push(2, "b", 1);
  pipeline.push(1, "c", 2);
  pipeline.push(2, null, 3);
  pipeline.pushError(3n, "bad bytes", 3);
  pipeline.seal(4);
  let report = await pipeline.waitForChecker(4);
  assert.deepEqual(report.violations, []);
  const { rows, upper } = await pipeline.contents();
  assert.ok(upper >= 4);
  assert.deepEqual(rows, [
    { row: [1n, "c"], error: null, diff: 1n },
    { row: null, error: "upsert: value for key (3): bad bytes", diff: 1n },
  ]);

  // Seeded bursts while the replicas race; then replica 0 crashes and restarts from the
  // shard's upper, rehydrating its state from the shard alone.
  let target = pipeline.generate({ bursts: 20, seed: 9, keys: 6 });
  report = await pipeline.waitForChecker(target);
  assert.deepEqual(report.violations, []);
  assert.equal(await pipeline.crash(0), true);
  target = pipeline.generate({ bursts: 10, seed: 10, keys: 6 });
  await pipeline.start(0);
  target = pipeline.generate({ bursts: 10, seed: 11, keys: 6 });
  report = await pipeline.waitForChecker(target);
  assert.deepEqual(report.violations, []);
  assert.ok(report.checks >= 10, JSON.stringify(report));

  const snapshot = await pipeline.snapshot();
  assert.equal(snapshot.replicas.length, 2);
  assert.ok(snapshot.replicas.every((r) => r !== null && r.halted === null));
  assert.equal(snapshot.replicas[0].generation, 1, "replica 0 restarted once");
  const counters = await pipeline.counters();
  assert.ok(counters.sinkAppends > 0 && counters.emitted > 0 && counters.persistIngested > 0);
  assert.equal(counters.restarts, 1);
  const events = pipeline.takeEvents();
  assert.ok(events.some((e) => e.event.type === "started" && e.who.startsWith("r0#1")));
  assert.ok(events.some((e) => e.event.type === "sinkAppended"));

  await pipeline.shutdown();
  await assert.rejects(pipeline.report(), (e) => e.code === "Expired" && /shut down/.test(e.message));
  location.close();
});
