// Page benchmark (not a test): loads the playground in headless Chromium with a fresh profile and
// measures
//   - time to interactive: from navigation start until the page says "ready" (wasm loaded, the
//     scenario created, controls wired), median of several loads;
//   - frame times with eight writers over a thousand keys and two upsert replicas (generator on) at full
//     speed: the script time of each animation frame (simulation + snapshot + render), and the
//     interval between frames, p50/p95/p99 over the measured window;
//   - the size of the .wasm, gzipped (level 9).
// Usage: bash scripts/build.sh && node scripts/bench-page.mjs [seconds=10] [width=1280] [height=800]
//        [--compare=DIR] [--rounds=N]
// With --compare=DIR (a copy of an older page: DIR/index.html, DIR/www/, DIR/pkg/ under the
// repository, e.g. target/before), the frame measurement alternates between this page and that one,
// N rounds each (default 3), in one run on one machine, and prints each round and the medians:
// a busy machine slows both alike.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { checkBuilt, closeBrowser, launch, openPage, ROOT, startServer, stopServer, waitFor } from "../tests/e2e/helpers.mjs";

const flags = Object.fromEntries(process.argv.slice(2).filter((a) => a.startsWith("--")).map((a) => a.slice(2).split("=")));
const args = process.argv.slice(2).filter((a) => !a.startsWith("--"));
const seconds = Number(args[0] ?? 10);
const viewport = { width: Number(args[1] ?? 1280), height: Number(args[2] ?? 800) };
const compare = flags.compare ?? null;
const rounds = Number(flags.rounds ?? (compare ? 3 : 1));

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};
const fmt = (x) => x.toFixed(2);

checkBuilt();
const server = await startServer();
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Frame times of one fresh page at `url` with the busy scenario at full speed. */
async function measure(url) {
  const ctx = await launch();
  const page = await openPage(ctx, url, viewport);
  await page.getByTestId("preset-busy").click();
  await page.getByTestId("add-replica").click();
  await page.getByTestId("add-replica").click();
  await page.getByTestId("u-generator").check();
  await page.getByTestId("speed").selectOption("max");
  // Warm up until the shard has a thousand keys' worth of updates.
  await waitFor(page, () => window.__playground.state.latest().shards.find((s) => s.name === "data").updates >= 1000, "1000 updates in the shard", null, 60_000);
  const result = await page.evaluate(async (ms) => {
    const view = window.__playground.view;
    view.frameMs.length = 0;
    view.parts.length = 0;
    const intervals = [];
    let last = performance.now();
    const stopAt = last + ms;
    const startVirtual = window.__playground.state.latest().nowMs;
    await new Promise((resolve) => {
      const tick = (now) => {
        intervals.push(now - last);
        last = now;
        if (now < stopAt) requestAnimationFrame(tick);
        else resolve();
      };
      requestAnimationFrame(tick);
    });
    const snap = window.__playground.state.latest();
    const data = snap.shards.find((s) => s.name === "data");
    return {
      work: [...view.frameMs],
      parts: [...view.parts],
      intervals,
      virtualMs: snap.nowMs - startVirtual,
      writers: snap.actors.filter((a) => a.spec.kind === "writer").length,
      replicas: snap.actors.filter((a) => a.spec.kind === "replica").length,
      upsertMessages: snap.upsert?.sourceMessages ?? 0,
      updates: data.updates,
      seqno: data.seqno,
    };
  }, seconds * 1000);
  if (page.errors.length) throw new Error(`errors in the page: ${page.errors.join("; ")}`);
  await ctx.close();
  return result;
}

function report(name, result) {
  const part = (i) => result.parts.map((p) => p[i]);
  console.log(`${name}: frame script time p50 ${fmt(pct(result.work, 50))} ms, p95 ${fmt(pct(result.work, 95))} ms, p99 ${fmt(pct(result.work, 99))} ms over ${result.work.length} frames` +
    ` (p95 of simulation ${fmt(pct(part(0), 95))}, snapshot + events ${fmt(pct(part(1), 95))}, render ${fmt(pct(part(2), 95))}); interval p95 ${fmt(pct(result.intervals, 95))} ms; ${result.virtualMs} ms of virtual time`);
}

try {
  console.log(`viewport ${viewport.width}x${viewport.height}, ${seconds} s at full speed`);
  if (!compare) {
    // Time to interactive, over five fresh loads.
    const tti = [];
    for (let i = 0; i < 5; i++) {
      const ctx = await launch();
      const page = await openPage(ctx, server.url("?seed=1"), viewport);
      tti.push(await page.evaluate(() => window.__playground.readyMs));
      await ctx.close();
    }
    const sorted = [...tti].sort((a, b) => a - b);
    console.log(`time to interactive: median ${fmt(sorted[2])} ms (${tti.map(fmt).join(", ")})`);
  }
  const variants = [["this page", server.url("?seed=1&empty=1")]];
  if (compare) variants.push([`${compare}`, `http://127.0.0.1:${server.port}/${compare.replace(/^\/+|\/+$/g, "")}/index.html?seed=1&empty=1`]);
  const p95s = new Map(variants.map(([n]) => [n, []]));
  const virt = new Map(variants.map(([n]) => [n, []]));
  let result;
  for (let r = 0; r < rounds; r++) {
    for (const [name, url] of variants) {
      result = await measure(url);
      p95s.get(name).push(pct(result.work, 95));
      virt.get(name).push(result.virtualMs);
      report(`round ${r + 1} ${name}`, result);
    }
  }
  console.log(`load: ${result.writers} writers over 1000 keys + ${result.replicas} upsert replicas (${result.upsertMessages} source messages); shard at seqno ${result.seqno} with ${result.updates} updates`);
  for (const [name] of variants) {
    console.log(`${name}: median over ${rounds} rounds of frame script time p95 ${fmt(median(p95s.get(name)))} ms (${p95s.get(name).map(fmt).join(", ")}); virtual time per run ${median(virt.get(name))} ms`);
  }
  const wasm = readFileSync(join(ROOT, "pkg", "persist_playground_bg.wasm"));
  const gz = gzipSync(wasm, { level: 9 }).length;
  console.log(`wasm: ${wasm.length} bytes, ${gz} bytes gzipped (-9)`);
} finally {
  await closeBrowser();
  await stopServer(server);
}
