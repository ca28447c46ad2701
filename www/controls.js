// Controls: DOM events -> calls into the store -> re-render. Nothing here draws; all drawing goes
// through render.js. Actions run one at a time (controls are disabled while one runs), so the
// page never has two of its own writes in flight.

import {
  errorStatus,
  renderBusy,
  renderSnapshot,
  renderStatus,
  writeBlobStatus,
  writeVersionStatus,
} from "./render.js";

/**
 * Wires the page's controls. `store` is main.js's thin wrapper over the wasm inspector:
 * `{ writeVersion(key, data), writeBlob(key, data), snapshot(), reset() }`, all async.
 */
export function wireControls(dom, store) {
  let running = false;

  // Runs `action` (async, resolves to { status, highlight }), then re-renders from a fresh
  // snapshot. Any rejection becomes an error status; the page stays usable.
  async function run(busyText, action) {
    if (running) return;
    running = true;
    renderBusy(dom, true);
    renderStatus(dom, { kind: "busy", text: busyText });
    let status;
    let highlight = null;
    try {
      ({ status, highlight = null } = await action());
    } catch (err) {
      status = errorStatus(err);
    }
    try {
      renderSnapshot(dom, await store.snapshot(), highlight);
    } catch (err) {
      // Keep the action's own error if it had one: that is the more useful message.
      if (status.kind !== "error") status = errorStatus(err);
    }
    renderStatus(dom, status);
    running = false;
    renderBusy(dom, false);
  }

  dom.versionForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const key = dom.versionKey.value;
    const data = dom.versionData.value;
    run(`writing the next version of ${key || "(empty key)"}…`, async () => {
      const outcome = await store.writeVersion(key, data);
      return { status: writeVersionStatus(outcome), highlight: { table: "consensus", key } };
    });
  });

  dom.blobForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const key = dom.blobKey.value;
    const data = dom.blobData.value;
    run(`writing blob ${key || "(empty key)"}…`, async () => {
      await store.writeBlob(key, data);
      const bytes = new TextEncoder().encode(data).length;
      return { status: writeBlobStatus(key, bytes), highlight: { table: "blobs", key } };
    });
  });

  dom.refresh.addEventListener("click", () => {
    run("refreshing…", async () => ({ status: { kind: "ok", text: "refreshed" } }));
  });

  dom.reset.addEventListener("click", () => {
    run("deleting the database…", async () => {
      const name = await store.reset();
      return { status: { kind: "ok", text: `reset: deleted ${name} and opened it again, empty` } };
    });
  });
}
