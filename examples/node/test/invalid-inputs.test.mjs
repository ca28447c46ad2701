// Wrong types and out-of-range values from JavaScript: each gives an Error with a message (a
// TypeError or RangeError where it fits), never a trap of the wasm module. Each case is one test;
// scripts/test.sh counts the `bad(` lines below as declared tests.
import { test } from "node:test";
import assert from "node:assert/strict";

import {
  PersistLocation,
  PersistClient,
  TimestampOracle,
  WriteTask,
  UpsertPipeline,
} from "persist-playground";

const location = PersistLocation.inMemory();
const client = new PersistClient(location, { seed: 11 });
const writer = await client.openWriter("inputs");
const reader = await client.openReader("inputs");
const expiredWriter = await client.openWriter("inputs");
await expiredWriter.expire();
const listened = await client.openReader("inputs");
const listen = await listened.listen(0);
const downgraded = await client.openReader("inputs");
await writer.compareAndAppend([], 0, 10);
await downgraded.downgradeSince(5);
const oracle = TimestampOracle.inMemory();
const task = await WriteTask.spawn(client, "inputs-task", { upperTickIntervalMs: 1000 });
const closed = PersistLocation.inMemory();
const closedClient = new PersistClient(closed);
const closedWriter = await closedClient.openWriter("gone");
closed.close();
const faulty = PersistLocation.inMemory({ faults: { shouldHappen: 1, shouldTimeout: 0 } });
const pipeline = await UpsertPipeline.create(location, { shardId: "inputs-upsert", replicas: [{}] });
pipeline.push(1, "a", 5);
const u = (over) => [{ key: "k", value: "v", time: 10, ...over }];

function bad(name, run, Class, message, code) {
  return { name, run, Class, message, code };
}

const CASES = [
  bad("location options that are a string", () => PersistLocation.inMemory("fast"), TypeError, /options must be an object, got a string/, "TypeError"),
  bad("a misspelt location option", () => PersistLocation.inMemory({ fault: {} }), TypeError, /unknown property "fault"/, "TypeError"),
  bad("a probability above 1", () => PersistLocation.inMemory({ faults: { shouldHappen: 2, shouldTimeout: 0 } }), RangeError, /shouldHappen must be between 0 and 1, got 2/, "RangeError"),
  bad("a probability given as a string", () => PersistLocation.inMemory({ faults: { shouldHappen: "1", shouldTimeout: 0 } }), TypeError, /shouldHappen must be a number between 0 and 1, got a string/, "TypeError"),
  bad("a missing probability", () => PersistLocation.inMemory({ faults: { shouldHappen: 1 } }), TypeError, /shouldTimeout is required/, "TypeError"),
  bad("a negative seed", () => PersistLocation.inMemory({ faults: { seed: -1, shouldHappen: 1, shouldTimeout: 0 } }), RangeError, /seed must be between 0/, "RangeError"),
  bad("a BigInt seed past u64", () => PersistLocation.inMemory({ faults: { seed: 2n ** 64n, shouldHappen: 1, shouldTimeout: 0 } }), RangeError, /unsigned 64-bit integer, got 18446744073709551616n/, "RangeError"),
  bad("a plain object for a location", () => new PersistClient({}, {}), Error, /expected instance of PersistLocation/),
  bad("null for a location", () => new PersistClient(null), Error, /expected instance of PersistLocation/),
  bad("a fractional client seed", () => new PersistClient(location, { seed: 1.5 }), RangeError, /seed must be an integer, got 1.5/, "RangeError"),
  bad("a zero call timeout", () => new PersistClient(location, { callTimeoutMs: 0 }), RangeError, /callTimeoutMs must be at least 1/, "RangeError"),
  bad("a string for a boolean option", () => new PersistClient(location, { compaction: "yes" }), TypeError, /compaction must be a boolean, got a string/, "TypeError"),
  bad("a number for a shard id", () => client.openWriter(42), TypeError, /shardId must be a string, got a number \(42\)/, "TypeError"),
  bad("an empty shard id", () => client.openReader(""), RangeError, /invalid shard id ""/, "RangeError"),
  bad("a shard id with a slash", () => client.openWriter("a/b"), RangeError, /without '\/'/, "RangeError"),
  bad("a string for a time", () => writer.compareAndAppend(u({ time: "10" }), 10, 11), TypeError, /updates\[0\]\.time must be a number \(a time in milliseconds\), got a string/, "TypeError"),
  bad("a negative time", () => writer.compareAndAppend(u({ time: -1 }), 10, 11), RangeError, /updates\[0\]\.time must be between 0 and Number.MAX_SAFE_INTEGER, got -1/, "RangeError"),
  bad("a fractional time", () => writer.compareAndAppend(u({ time: 10.5 }), 10, 11), RangeError, /updates\[0\]\.time must be an integer, got 10.5/, "RangeError"),
  bad("a time past MAX_SAFE_INTEGER", () => writer.compareAndAppend(u({ time: 2 ** 53 }), 10, 11), RangeError, /Number.MAX_SAFE_INTEGER, got 9007199254740992/, "RangeError"),
  bad("a BigInt for a time", () => writer.compareAndAppend(u({ time: 10n }), 10, 11), TypeError, /time must be a number .* got a bigint \(10n\)/, "TypeError"),
  bad("a BigInt diff past i64", () => writer.compareAndAppend(u({ diff: 2n ** 63n }), 10, 11), RangeError, /signed 64-bit integer, got 9223372036854775808n/, "RangeError"),
  bad("a fractional diff", () => writer.compareAndAppend(u({ diff: 1.5 }), 10, 11), RangeError, /diff must be an integer, got 1.5/, "RangeError"),
  bad("an unsafe number for a diff", () => writer.compareAndAppend(u({ diff: 2 ** 60 }), 10, 11), RangeError, /pass a bigint/, "RangeError"),
  bad("null for the updates", () => writer.compareAndAppend(null, 10, 11), TypeError, /updates must be an array, got null/, "TypeError"),
  bad("null inside the updates", () => writer.compareAndAppend([null], 10, 11), TypeError, /updates\[0\] must be an object, got null/, "TypeError"),
  bad("an update without a value", () => writer.compareAndAppend([{ key: "k", time: 10 }], 10, 11), TypeError, /updates\[0\]\.value is required/, "TypeError"),
  bad("an update with an extra field", () => writer.compareAndAppend(u({ extra: 1 }), 10, 11), TypeError, /unknown property "extra"/, "TypeError"),
  bad("undefined for the expected upper", () => writer.compareAndAppend([], undefined, 11), TypeError, /expectedUpper must be a number \(a time\), got undefined/, "TypeError"),
  bad("NaN for the new upper", () => writer.compareAndAppend([], 10, NaN), RangeError, /newUpper must be an integer, got NaN/, "RangeError"),
  bad("an upper before the lower", () => writer.compareAndAppend([], 10, 5), Error, /invalid bounds/, "InvalidBounds"),
  bad("an update outside [lower, upper)", () => writer.compareAndAppend(u({ time: 20 }), 10, 11), Error, /beyond the batch upper/, "InvalidBounds"),
  bad("null for a snapshot's as-of", () => reader.snapshot(null), TypeError, /asOf must be a number \(a time\), got null/, "TypeError"),
  bad("Infinity for a snapshot's as-of", () => reader.snapshot(Infinity), RangeError, /asOf must be an integer, got Infinity/, "RangeError"),
  bad("a string for a since", () => reader.downgradeSince("5"), TypeError, /since must be a number \(a time\) or null/, "TypeError"),
  bad("a read before the since", () => downgraded.snapshot(1), Error, /before the since/, "SinceViolation"),
  bad("a listen before the since", () => downgraded.listen(2), Error, /before the since/, "SinceViolation"),
  bad("a call on an expired writer", () => expiredWriter.compareAndAppend([], 10, 11), Error, /writer w[0-9a-f]+ has expired; open a new one/, "Expired"),
  bad("a call on a reader that moved into a listen", () => listened.snapshot(0), Error, /reader r[0-9a-f]+ was moved into a listen/, "Expired"),
  bad("a call on an expired listen", async () => { await listen.expire(); return listen.next(); }, Error, /next: listen of reader r[0-9a-f]+ has expired/, "Expired"),
  bad("opening a shard on a closed location", () => closedClient.openWriter("x"), Error, /the location is closed/, "Closed"),
  bad("a handle call on a closed location", () => closedWriter.fetchRecentUpper(), Error, /fetchRecentUpper: the location is closed/, "Closed"),
  bad("a client on a closed location", () => new PersistClient(closed), Error, /the location is closed/, "Closed"),
  bad("faults on a closed location", () => closed.setFaults({ shouldHappen: 1, shouldTimeout: 0 }), Error, /the location is closed/, "Closed"),
  bad("faults on a location without the decorator", () => location.setFaults({ shouldHappen: 1, shouldTimeout: 0 }), Error, /opened without the fault decorator/, "InvalidUsage"),
  bad("fault settings of the wrong shape", () => faulty.setFaults([0.5, 0.5]), TypeError, /settings must be an object, got an array/, "TypeError"),
  bad("a negative initial timestamp", () => TimestampOracle.inMemory({ initially: -5 }), RangeError, /initially must be between 0/, "RangeError"),
  bad("an unknown clock", () => TimestampOracle.inMemory({ clock: "sundial" }), TypeError, /clock must be "wall" or "none", got "sundial"/, "TypeError"),
  bad("a string for applyWrite", () => oracle.applyWrite("10"), TypeError, /timestamp must be a number/, "TypeError"),
  bad("no options for a durable oracle", () => TimestampOracle.open(location, undefined), TypeError, /options must be an object, got undefined/, "TypeError"),
  bad("a number for a timeline", () => TimestampOracle.open(location, { timeline: 5 }), TypeError, /timeline must be a string, got a number/, "TypeError"),
  bad("a zero persist interval", () => TimestampOracle.open(location, { timeline: "t", persistIntervalMs: 0 }), Error, /persist_interval_ms must be at least 1/, "OracleError"),
  bad("confirmLeadership on an in-memory oracle", () => oracle.confirmLeadership(), Error, /in-memory oracle has no leadership/, "OracleError"),
  bad("a write handle for a client", () => WriteTask.spawn(writer, "t"), Error, /expected instance of PersistClient/),
  bad("zero tries for a write task", () => WriteTask.spawn(client, "t2", { maxTries: 0 }), RangeError, /maxTries must be at least 1/, "RangeError"),
  bad("an unknown initial desired state", () => WriteTask.spawn(client, "t3", { initialDesired: "all" }), TypeError, /initialDesired must be "empty" or "fromShard"/, "TypeError"),
  bad("a string for a row", () => task.append([{ row: "alice" }]), TypeError, /updates\[0\]\.row must be an array, got a string/, "TypeError"),
  bad("an object inside a row", () => task.append([{ row: [{}] }]), TypeError, /updates\[0\]\.row\[0\] must be null, a boolean, an integer or a string, got an object/, "TypeError"),
  bad("a fraction inside a row", () => task.append([{ row: [1.5] }]), RangeError, /row\[0\] must be an integer, got 1.5/, "RangeError"),
  bad("a string for a predicate", () => task.deleteWhere("alice"), TypeError, /predicate must be a function, got a string/, "TypeError"),
  bad("IndexedDB under Node", () => PersistLocation.indexedDb("db"), Error, /IndexedDB.*not available/i, "Unavailable"),
  bad("a number for a database name", () => PersistLocation.indexedDb(7), TypeError, /name must be a string, got a number/, "TypeError"),
  bad("no replicas for a pipeline", () => UpsertPipeline.create(location, { shardId: "u", replicas: [] }), RangeError, /at least one replica/, "RangeError"),
  bad("a replica of the wrong shape", () => UpsertPipeline.create(location, { shardId: "u", replicas: [{ speed: 3 }] }), TypeError, /options.replicas\[0\] has an unknown property "speed"/, "TypeError"),
  bad("a replica slot out of range", () => pipeline.start(3), RangeError, /replica must be a replica slot below 1, got 3/, "RangeError"),
  bad("a number for an upsert's value", () => pipeline.push(1, 5, 6), TypeError, /value \(a string, or null to delete\) must be a string, got a number/, "TypeError"),
  bad("an upsert before the source's last message", () => pipeline.push(1, "b", 4), RangeError, /cannot append at 4/, "RangeError"),
  bad("a BigInt key past i64", () => pipeline.push(2n ** 64n, "b", 6), RangeError, /key must fit a signed 64-bit integer/, "RangeError"),
  bad("a percentage above 100", () => pipeline.generate({ bursts: 1, deletePercent: 150 }), RangeError, /deletePercent must be at most 100, got 150/, "RangeError"),
];

test(`the list has at least 30 cases (${CASES.length})`, () => {
  assert.ok(CASES.length >= 30);
});

for (const c of CASES) {
  test(`bad input: ${c.name}`, async () => {
    let error;
    try {
      await c.run();
    } catch (e) {
      error = e;
    }
    assert.ok(error !== undefined, "no error was thrown");
    assert.ok(!(error instanceof WebAssembly.RuntimeError), `a wasm trap: ${error}`);
    assert.ok(error instanceof c.Class, `expected a ${c.Class.name}, got ${error?.constructor?.name}: ${error?.message}`);
    assert.match(error.message, c.message);
    if (c.code !== undefined) assert.equal(error.code, c.code);
  });
}

test("after every bad input the module still works", async () => {
  const out = await writer.compareAndAppend([{ key: "ok", value: "1", time: 10 }], 10, 11);
  assert.deepEqual(out, { committed: true, upper: 11 });
  assert.deepEqual(await reader.snapshot(10), [{ key: "ok", value: "1", time: 10, diff: 1n }]);
  task.shutdown();
  await pipeline.shutdown();
  location.close();
});
