// A user's Vite app: the package imported by name, no bundler configuration. Each visit
// appends one update to a shard in IndexedDB and reads the visits back.
import init, { PersistLocation, PersistClient } from "persist-playground";

const out = document.getElementById("log");
const log = (line) => { out.textContent += line + "\n"; };

async function main() {
  await init();
  const memory = new PersistClient(PersistLocation.inMemory(), { seed: 1 });
  const scratch = await memory.openWriter("scratch");
  const first = await scratch.compareAndAppend([{ key: "k", value: "v", time: 0 }], 0, 1);
  log(`in memory: ${JSON.stringify(first)}`);

  const durable = await PersistLocation.indexedDb("vite-app");
  const client = new PersistClient(durable, { seed: 7 });
  const writer = await client.openWriter("visits");
  let at = await writer.fetchRecentUpper();
  for (;;) {
    const { committed, upper } = await writer.compareAndAppend(
      [{ key: "visit", value: new Date().toISOString(), time: at }], at, at + 1);
    if (committed) break;
    at = upper;
  }
  const rows = await (await client.openReader("visits")).snapshot(at);
  const visits = rows.reduce((n, r) => n + Number(r.diff), 0);
  log(`visits: ${visits} (writer ${writer.writerId})`);
  document.body.dataset.visits = String(visits);
  document.body.dataset.firstCommitted = String(first.committed);
  durable.close();
  document.body.dataset.status = "ok";
}

main().catch((e) => {
  log(`error: ${e.code ?? e.name}: ${e.message}`);
  document.body.dataset.status = `error: ${e.code ?? e.name}: ${e.message}`;
});
