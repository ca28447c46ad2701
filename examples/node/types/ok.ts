// Uses the package's declarations as a user would; `tsc --noEmit` must accept it, under Node's
// resolution (tsconfig.json) and a browser bundler's (tsconfig.browser.json).
import init, {
  PersistLocation,
  PersistClient,
  WriteTask,
  TimestampOracle,
  UpsertPipeline,
  type AppendOutcome,
  type CheckerReportView,
  type UpsertRowView,
  type UpsertEventView,
  type DatumView,
  type ErrorCode,
  type Frontier,
  type ListenEventView,
  type PersistEventView,
  type PersistPlaygroundError,
  type ShardStateView,
  type UpdateView,
  type WriteTaskEventView,
  type OracleEventView,
} from "persist-playground";

export async function main(): Promise<number> {
  await init();
  const location: PersistLocation = PersistLocation.inMemory({
    faults: { seed: 1n, shouldHappen: 1, shouldTimeout: 0 },
  });
  const client = new PersistClient(location, { seed: 7, callTimeoutMs: 5_000 });
  const writer = await client.openWriter("orders");
  const outcome: AppendOutcome = await writer.compareAndAppend(
    [{ key: "apple", value: "3", time: 0, diff: 1n }, { key: "pear", value: "1", time: 0 }],
    0,
    1,
  );
  const upper: Frontier = outcome.upper;
  const reader = await client.openReader("orders");
  const rows: UpdateView[] = await reader.snapshot(0);
  const total: bigint = rows.reduce((sum, u) => sum + u.diff, 0n);
  const { snapshot, listen } = await reader.subscribe(0);
  for await (const events of listen) {
    for (const e of events satisfies ListenEventView[]) {
      if (e.type === "updates") {
        const firstKey: string | undefined = e.updates[0]?.key;
        void firstKey;
      } else {
        const frontier: number | null = e.frontier;
        void frontier;
      }
    }
    break;
  }
  await listen.expire();

  const state: ShardStateView = await client.inspectState("orders");
  const seqno: bigint = state.seqno;
  const events: PersistEventView[] = client.takeEvents();
  for (const e of events) {
    if (e.type === "command") {
      const after: number | null = e.upper.after;
      const kind: "committed" | "mismatch" | "indeterminate" | "determinate" | "permanent" | "skipped" = e.outcome.kind;
      void after;
      void kind;
    }
  }

  const task = await WriteTask.spawn(client, "mz_sessions", { upperTickIntervalMs: 100, initialDesired: "empty" });
  await task.append([{ row: ["alice", 1, 2n, true, null] }, { row: ["bob"], diff: -1 }]);
  await task.deleteWhere((row: DatumView[]) => row[0] === "alice");
  const held = await task.snapshot();
  const firstDiff: bigint | undefined = held.rows[0]?.diff;
  const taskEvents: WriteTaskEventView[] = task.takeEvents();
  if (taskEvents[0]?.event.type === "committed") {
    const fp: bigint = taskEvents[0].event.desiredFingerprint;
    void fp;
  }
  task.shutdown();

  const oracle = await TimestampOracle.open(location, { timeline: "t", persistIntervalMs: 1000 });
  const w = await oracle.writeTs();
  const advance: number = w.advanceTo;
  await oracle.applyWrite(w.timestamp);
  const read: number = await oracle.readTs();
  const oracleEvents: OracleEventView[] = oracle.takeEvents();
  const epoch: number | undefined = oracle.snapshot()?.epoch;
  const inMemory = TimestampOracle.inMemory({ initially: 5, clock: "none" });
  await inMemory.peekWriteTs();

  const pipeline = await UpsertPipeline.create(location, {
    shardId: "upserts",
    replicas: [{ readBatch: 1 }, { readBatch: 5, tickMs: 3 }],
    seed: 2n,
  });
  await pipeline.start(0);
  const offset: number = pipeline.push(1, "a", 1);
  pipeline.push(2n, null, 1);
  pipeline.pushError(3, "bad bytes", 2);
  pipeline.seal(3);
  const sealed: number = pipeline.generate({ bursts: 5, keys: 4 });
  const report: CheckerReportView = await pipeline.waitForChecker(sealed);
  const violations: string[] = report.violations;
  const upsertRows: UpsertRowView[] = (await pipeline.contents()).rows;
  const upsertKey: DatumView | undefined = upsertRows[0]?.row?.[0];
  const upsertEvents: UpsertEventView[] = pipeline.takeEvents();
  const mismatches: number = (await pipeline.counters()).sinkMismatches;
  const up: boolean = await pipeline.crash(1);
  await pipeline.shutdown();
  void [offset, violations, upsertKey, upsertEvents, mismatches, up];

  try {
    await writer.expire();
  } catch (e) {
    const code: ErrorCode = (e as PersistPlaygroundError).code;
    void code;
  }
  location.setFaults({ shouldHappen: 0.9, shouldTimeout: 0.1 });
  const failed: number | undefined = location.faultCounts()?.failed;
  location.close();
  void [upper, total, snapshot, seqno, firstDiff, advance, read, oracleEvents, epoch, failed];
  return rows.length;
}

// A location JavaScript supplies, the conformance report, and the node:fs location.
import { runLocationConformance, type ConformanceReport, type CustomBlob, type CustomConsensus } from "persist-playground";
import { fsLocation } from "persist-playground/fs";

export async function customLocation(): Promise<boolean> {
  const blob: CustomBlob = {
    get: async (_key: string) => null,
    set: async (_key: string, _value: Uint8Array) => {},
    delete: async (_key: string) => null,
    list: async (_prefix: string) => [{ key: "k", sizeInBytes: 0 }],
  };
  const consensus: CustomConsensus = {
    head: () => ({ seqno: 1n, data: new Uint8Array() }),
    compareAndSet: async (_key, expected, next) => expected === null && next.seqno > 0n,
    scan: async (_key, from, limit) => (limit > 0 ? [{ seqno: from, data: new Uint8Array() }] : []),
    truncate: async () => 0,
    listKeys: async () => ["k"],
  };
  const mine: PersistLocation = PersistLocation.custom({ blob, consensus, name: "mine" });
  const kind: "memory" | "indexeddb" | "custom" = mine.kind;
  const report: ConformanceReport = await runLocationConformance(mine);
  const onDisk = await runLocationConformance(fsLocation("/tmp/persist-types", { name: "disk" }));
  return kind === "custom" && report.passed && onDisk.blob.failure === null;
}
