// The example page: every component of the library in a browser, over IndexedDB.
import init, { PersistLocation, PersistClient, TimestampOracle, UpsertPipeline, WriteTask } from "persist-playground";

const out = document.getElementById("log");
const log = (line) => { out.textContent += line + "\n"; };
const DB = "persist-playground-example";

async function main() {
  await init(); // fetches and instantiates the .wasm next to the web build
  if (new URLSearchParams(location.search).has("reset")) {
    await PersistLocation.deleteIndexedDb(DB);
    history.replaceState(null, "", location.pathname);
  }
  const storage = await PersistLocation.indexedDb(DB);
  // Over IndexedDB, ids (writers, readers, idempotency tokens) come from the platform's CSPRNG,
  // whatever the seed: every visit and tab has its own. This seed only names this visit's upsert
  // shard and seeds its bursts.
  const seed = crypto.getRandomValues(new Uint32Array(1))[0];
  const client = new PersistClient(storage);

  // A shard: append at the current upper, read back.
  const writer = await client.openWriter("visits");
  const upper = await writer.fetchRecentUpper();
  const outcome = await writer.compareAndAppend(
    [{ key: "visit", value: new Date().toISOString(), time: upper }], upper, upper + 1);
  log(`compareAndAppend at ${upper}: ${JSON.stringify(outcome)}`);
  const reader = await client.openReader("visits");
  const rows = await reader.snapshot(upper);
  const visits = rows.reduce((n, r) => n + r.diff, 0n);
  log(`visits so far: ${visits}`);
  document.body.dataset.visits = String(visits);
  await reader.expire();
  await writer.expire();

  // The timestamp oracle, durable in the same database.
  const oracle = await TimestampOracle.open(storage, { timeline: "example", persistIntervalMs: 1000 });
  const ts = await oracle.writeTs();
  await oracle.applyWrite(ts.timestamp);
  log(`oracle: write ${ts.timestamp}, read ${await oracle.readTs()}, epoch ${oracle.snapshot().epoch}`);
  document.body.dataset.epoch = String(oracle.snapshot().epoch);

  // A write task keeps a shard equal to the rows it is given.
  const task = await WriteTask.spawn(client, "example_rows", { batchDurationMs: 0, upperTickIntervalMs: 200 });
  await task.append([{ row: ["visit", Number(visits)] }]);
  await task.deleteWhere((row) => row[0] === "visit" && row[1] !== visits);
  const held = await task.snapshot();
  log(`write task: ${JSON.stringify(held.rows, (_, v) => typeof v === "bigint" ? `${v}n` : v)}`);
  document.body.dataset.taskRows = String(held.rows.length);
  task.shutdown();

  // Upsert with continual feedback: two replicas race to write one shard in IndexedDB, and the
  // checker compares it with the model at every upper (a fresh shard per visit: its source
  // lives in this page).
  const pipeline = await UpsertPipeline.create(storage, {
    shardId: `upsert-${seed}`, seed, replicas: [{ readBatch: 1 }, { readBatch: 4 }], callTimeoutMs: 60_000,
  });
  await pipeline.start(0);
  await pipeline.start(1);
  const sealed = pipeline.generate({ bursts: 10, seed, keys: 4 });
  const report = await pipeline.waitForChecker(sealed);
  const counters = await pipeline.counters();
  log(`upsert: ${report.checks} checks, ${report.violations.length} violations, ` +
    `${counters.sinkAppends} appends, ${counters.sinkMismatches} lost races`);
  document.body.dataset.upsertChecks = String(report.checks);
  document.body.dataset.upsertViolations = String(report.violations.length);
  await pipeline.shutdown();

  // The fault decorator over IndexedDB: calls pass while every coin says "happen", and a call
  // that cannot succeed is bounded by callTimeoutMs.
  const flaky = await PersistLocation.indexedDb(`${DB}-faults`, {
    faults: { seed, shouldHappen: 1, shouldTimeout: 0 },
  });
  const flakyWriter = await new PersistClient(flaky, { seed, callTimeoutMs: 300 }).openWriter("flaky");
  const at = await flakyWriter.fetchRecentUpper();
  const passed = await flakyWriter.compareAndAppend([], at, at + 1);
  flaky.setFaults({ shouldHappen: 0, shouldTimeout: 0 });
  try {
    await flakyWriter.compareAndAppend([], at + 1, at + 2);
  } catch (e) {
    log(`faults: passed ${passed.committed}, then ${e.code}: ${e.message}; ${JSON.stringify(flaky.faultCounts())}`);
    document.body.dataset.faultCode = e.code;
  }
  flaky.close();
  storage.close();
  document.body.dataset.status = "ok";
}

main().catch((e) => {
  log(`error: ${e.code ?? e.name}: ${e.message}`);
  document.body.dataset.status = `error: ${e.message}`;
});
