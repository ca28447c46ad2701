// Browser benchmark (not a test): in one page run, alternate rounds of
//   raw: one IndexedDB readwrite transaction that gets a ~200-byte record and puts it back with
//        its version bumped if the version matches (the cost of a compare-and-set), and
//   cas: one Consensus compare_and_set of ~200 bytes from Rust through web-sys (no persist), and
//   caa: one persist compare_and_append of one small update (kept inline in state).
// Each round times a batch of sequential operations (a page's clock is coarse) and reports the
// mean per operation; the summary gives the medians over rounds and their ratio.
import init, { BenchWriter } from "../pkg-bench/persist_playground.js";

const params = new URLSearchParams(location.search);
const OPS = Number(params.get("ops") ?? 300);
const ROUNDS = Number(params.get("rounds") ?? 5);
// "off": compaction, rollups and GC off (the write path alone); "on": the defaults;
// "compaction": compaction alone; "gc": rollups and GC alone.
const MODE = params.get("maintenance") ?? "off";
const MAINTENANCE = MODE === "on";
const COMPACTION = MODE === "on" || MODE === "compaction";
const ROLLUPS_AND_GC = MODE === "on" || MODE === "gc";
const out = document.getElementById("out");

function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

async function deleteDb(name) {
  await request(indexedDB.deleteDatabase(name));
}

async function openRaw(name) {
  const req = indexedDB.open(name, 1);
  req.onupgradeneeded = () => req.result.createObjectStore("kv");
  const db = await request(req);
  const tx = db.transaction("kv", "readwrite");
  tx.objectStore("kv").put({ version: 0, data: new Uint8Array(200) }, "head");
  await new Promise((res, rej) => { tx.oncomplete = res; tx.onerror = () => rej(tx.error); });
  return db;
}

function rawCompareAndSet(db, expected) {
  return new Promise((resolve, reject) => {
    const tx = db.transaction("kv", "readwrite");
    const store = tx.objectStore("kv");
    const get = store.get("head");
    let committed = false;
    get.onsuccess = () => {
      const rec = get.result;
      if (rec.version === expected) {
        store.put({ version: expected + 1, data: rec.data }, "head");
        committed = true;
      }
    };
    tx.oncomplete = () => resolve(committed);
    tx.onerror = () => reject(tx.error);
  });
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
  await init();
  await deleteDb("bench-raw");
  await deleteDb("bench-persist");
  const raw = await openRaw("bench-raw");
  let version = 0;
  const rows = [];
  for (let r = 0; r < ROUNDS; r++) {
    let t0 = performance.now();
    for (let i = 0; i < OPS; i++) {
      if (!(await rawCompareAndSet(raw, version))) throw new Error("raw compare-and-set lost");
      version++;
    }
    const rawMs = (performance.now() - t0) / OPS;
    // A fresh shard per round, so every round's trace starts empty.
    const writer = await BenchWriter.openParts("bench-persist", `s-bench-${r}`, COMPACTION, ROLLUPS_AND_GC);
    t0 = performance.now();
    await writer.casMany(`cas-${r}`, OPS);
    const casMs = (performance.now() - t0) / OPS;
    t0 = performance.now();
    await writer.appendMany(OPS);
    const caaMs = (performance.now() - t0) / OPS;
    writer.free();
    rows.push({ round: r, rawMs, casMs, caaMs });
    out.textContent = JSON.stringify(rows, null, 1);
  }
  const rawMs = median(rows.map((x) => x.rawMs));
  const caaMs = median(rows.map((x) => x.caaMs));
  const casMs = median(rows.map((x) => x.casMs));
  window.benchResult = {
    ops: OPS, rounds: ROUNDS, maintenance: MAINTENANCE, mode: MODE, rows, rawMs, casMs, caaMs,
    ratio: caaMs / rawMs, caaPerSecond: 1000 / caaMs,
  };
  out.textContent = JSON.stringify(window.benchResult, null, 1);
}

main().catch((e) => {
  window.benchResult = { error: String(e) };
  out.textContent = "error: " + e;
});
