// Entry point: load the wasm package, open the IndexedDB location, wire the controls, render.
// The page holds no protocol state: everything shown comes from a fresh snapshot.

import { wireControls } from "./controls.js";
import {
  errorStatus,
  findDom,
  renderBusy,
  renderDbName,
  renderFailed,
  renderSnapshot,
  renderStatus,
} from "./render.js";

const DEFAULT_DB = "persist-playground";

/** `?db=NAME` picks the database (tests use it to start clean); else the default. */
export function dbNameFrom(search) {
  const name = new URLSearchParams(search).get("db");
  return name ? name : DEFAULT_DB;
}

async function loadWasm() {
  // A dynamic import, so that a missing pkg/ shows up on the page rather than as a silent failure.
  let wasm;
  try {
    wasm = await import("../pkg/persist_playground.js");
    await wasm.default();
  } catch (err) {
    throw new Error(
      `could not load the WebAssembly package from pkg/ (build it with: bash scripts/build.sh): ${
        err instanceof Error ? err.message : String(err)
      }`,
    );
  }
  return wasm;
}

/** The store the controls call: the inspector, reopened lazily after a reset. */
function makeStore(LocationInspector, dbName) {
  let inspector = null;
  const current = async () => {
    if (!inspector) inspector = await LocationInspector.open(dbName);
    return inspector;
  };
  return {
    current,
    writeVersion: async (key, data) => (await current()).writeVersion(key, data),
    writeBlob: async (key, data) => (await current()).writeBlob(key, data),
    snapshot: async () => (await current()).snapshot(),
    async reset() {
      const old = await current();
      inspector = null; // whatever happens next, never use the deleted one again
      try {
        await old.deleteDatabase();
      } finally {
        old.free();
      }
      await current();
      return dbName;
    },
  };
}

async function main() {
  const dom = findDom(document);
  const dbName = dbNameFrom(window.location.search);
  renderDbName(dom, dbName);
  renderBusy(dom, true);
  let store;
  try {
    const { LocationInspector } = await loadWasm();
    store = makeStore(LocationInspector, dbName);
    await store.current();
  } catch (err) {
    renderFailed(dom, errorStatus(err)); // nothing to work with: controls stay disabled
    return;
  }
  wireControls(dom, store);
  try {
    renderSnapshot(dom, await store.snapshot());
    renderStatus(dom, { kind: "ok", text: `ready: opened IndexedDB database ${dbName}` });
  } catch (err) {
    // The database opened but could not be read: keep the controls, Reset may fix it.
    renderStatus(dom, errorStatus(err));
  }
  renderBusy(dom, false);
}

main();
