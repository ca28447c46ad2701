// Runs www/bench.html in headless Chromium (playwright-core) through scripts/serve.sh and prints
// the result. Usage: node scripts/bench-browser.mjs [ops] [rounds] [maintenance: off|on|compaction|gc]
// (build pkg-bench/ first: `bash scripts/build.sh --bench`, the build with BenchWriter). "off"
// measures the write path alone; "on" runs compaction, rollups and GC; "compaction" and "gc" run
// compaction alone and rollups with GC alone.
import { spawn } from "node:child_process";
import net from "node:net";
import { chromium } from "playwright-core";

const [ops = "300", rounds = "5", maintenance = "off"] = process.argv.slice(2);
const port = await new Promise((resolve) => {
  const srv = net.createServer().listen(0, "127.0.0.1", () => {
    const { port } = srv.address();
    srv.close(() => resolve(port));
  });
});
const server = spawn("bash", ["scripts/serve.sh", String(port)], { detached: true, stdio: "ignore" });
try {
  for (let i = 0; ; i++) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/www/bench.html`);
      if (r.ok) break;
    } catch {}
    if (i > 100) throw new Error("server did not start");
    await new Promise((r) => setTimeout(r, 100));
  }
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run"],
  });
  const page = await browser.newPage();
  page.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") console.error(`[page ${m.type()}] ${m.text()}`); });
  page.on("pageerror", (e) => console.error(`[page error] ${e}`));
  await page.goto(`http://127.0.0.1:${port}/www/bench.html?ops=${ops}&rounds=${rounds}&maintenance=${maintenance}`);
  try {
    await page.waitForFunction(() => window.benchResult !== undefined, null, { timeout: 60_000 });
  } catch (e) {
    console.error("the page showed:", await page.textContent("#out"));
    throw e;
  }
  const result = await page.evaluate(() => window.benchResult);
  await browser.close();
  if (result.error) throw new Error(result.error);
  for (const row of result.rows) {
    console.log(`round ${row.round}: raw ${row.rawMs.toFixed(3)} ms/op, Rust compare_and_set ${row.casMs.toFixed(3)} ms/op, compare_and_append ${row.caaMs.toFixed(3)} ms/op`);
  }
  console.log(`maintenance ${maintenance}: median over ${result.rounds} rounds of ${result.ops} ops: raw ${result.rawMs.toFixed(3)} ms, ` +
    `Rust compare_and_set ${result.casMs.toFixed(3)} ms (${(result.casMs / result.rawMs).toFixed(2)}x), ` +
    `compare_and_append ${result.caaMs.toFixed(3)} ms (${result.ratio.toFixed(2)}x), ` +
    `${result.caaPerSecond.toFixed(0)} compare_and_appends/s`);
} finally {
  process.kill(-server.pid);
}
