// CPU benchmark (not a test): how much of a core the page's main thread uses, from Chrome DevTools
// Protocol's Performance.getMetrics (TaskDuration: all main-thread tasks; ScriptDuration: script)
// over a window, in three states at 1280x800, each on a fresh page with a fresh profile:
//   - live running: live mode on a new IndexedDB database with the default actors;
//   - live paused: the same, Pause pressed (if the page can pause live mode);
//   - seed running: seed 1 with the default actors, playing at speed 1.
// The page's own counters over the window too: frames drawn (view.frameMs) and panel draws
// (view.panelMs, the page benchmark's per-panel hook).
// (style + layout: RecalcStyleDuration + LayoutDuration.)
// Usage: node scripts/bench-idle.mjs [seconds=10] [--runs=3] [--compare=DIR] [--only=live,paused,seed]
// With --compare=DIR (an older page: DIR/index.html, DIR/www/, DIR/pkg/ under the repository, e.g.
// target/before), the runs alternate between this page and that one; medians are printed per state.

import { checkBuilt, closeBrowser, launch, openPage, startServer, stopServer, waitFor } from "../tests/e2e/helpers.mjs";

const flags = Object.fromEntries(process.argv.slice(2).filter((a) => a.startsWith("--")).map((a) => a.slice(2).split("=")));
const args = process.argv.slice(2).filter((a) => !a.startsWith("--"));
const seconds = Number(args[0] ?? 10);
const runs = Number(flags.runs ?? 3);
const compare = flags.compare ?? null;
const only = (flags.only ?? "live,paused,seed").split(",");
const viewport = { width: 1280, height: 800 };
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

checkBuilt();
const server = await startServer();
let dbNo = 0;

/** One measurement of `state` on the page at `base` (a URL without its query). */
async function measure(base, state) {
  const ctx = await launch();
  const live = state !== "seed";
  const query = live ? `?mode=live&db=bench-idle-${process.pid}-${dbNo++}` : "?seed=1";
  const page = await openPage(ctx, base + query, viewport);
  if (live) {
    await waitFor(page, () => (window.__playground.state.latest().shards.find((s) => s.name === "data")?.seqno ?? 0) > 5, "a few versions", null, 60_000);
  }
  let paused = "n/a";
  if (state === "paused") {
    if (await page.getByTestId("play").isDisabled()) paused = "cannot pause";
    else {
      await page.getByTestId("play").click();
      paused = "paused";
    }
  }
  // Settle for a second (the click's draw, a warm-up), then measure.
  await page.waitForTimeout(1000);
  const cdp = await ctx.newCDPSession(page);
  await cdp.send("Performance.enable");
  const metrics = async () => Object.fromEntries((await cdp.send("Performance.getMetrics")).metrics.map((m) => [m.name, m.value]));
  const counters = () => page.evaluate(() => {
    const v = window.__playground.view;
    v.panelMs ??= {};
    return { frames: v.frameMs.length, panels: Object.values(v.panelMs).reduce((n, xs) => n + xs.length, 0), latest: v.frameMs.at(-1) ?? null };
  });
  await page.evaluate(() => {
    window.__playground.view.frameMs.length = 0;
    window.__playground.view.panelMs = {};
  });
  const c0 = await counters();
  const m0 = await metrics();
  await page.waitForTimeout(seconds * 1000);
  const m1 = await metrics();
  const c1 = await counters();
  const wall = m1.Timestamp - m0.Timestamp;
  const result = {
    task: (m1.TaskDuration - m0.TaskDuration) / wall,
    script: (m1.ScriptDuration - m0.ScriptDuration) / wall,
    layout: (m1.LayoutDuration - m0.LayoutDuration + m1.RecalcStyleDuration - m0.RecalcStyleDuration) / wall,
    frames: c1.frames - c0.frames,
    panels: c1.panels - c0.panels,
    paused,
  };
  if (page.errors.length) throw new Error(`errors in the page: ${page.errors.join("; ")}`);
  await ctx.close();
  return result;
}

const fmt = (x) => x.toFixed(3);
try {
  const variants = [["this page", server.url("")]];
  if (compare) variants.push([compare, `http://127.0.0.1:${server.port}/${compare.replace(/^\/+|\/+$/g, "")}/index.html`]);
  const states = { live: "live", paused: "paused", seed: "seed" };
  const all = new Map();
  console.log(`viewport 1280x800, ${seconds} s per run, ${runs} runs; task/script: main-thread seconds per second (cores)`);
  for (let r = 0; r < runs; r++) {
    for (const key of only) {
      for (const [name, base] of variants) {
        const res = await measure(base, states[key]);
        const k = `${name} | ${key}`;
        if (!all.has(k)) all.set(k, []);
        all.get(k).push(res);
        console.log(`run ${r + 1} ${k}: task ${fmt(res.task)}, script ${fmt(res.script)}, style + layout ${fmt(res.layout)}, frames drawn ${res.frames}, panel draws ${res.panels}${key === "paused" ? ` (${res.paused})` : ""}`);
      }
    }
  }
  for (const [k, rs] of all) {
    const m = (f) => median(rs.map(f));
    console.log(`median ${k}: task ${fmt(m((x) => x.task))} (${rs.map((x) => fmt(x.task)).join(", ")}), script ${fmt(m((x) => x.script))}, style + layout ${fmt(m((x) => x.layout))}, frames drawn ${m((x) => x.frames)}, panel draws ${m((x) => x.panels)}`);
  }
} finally {
  await closeBrowser();
  await stopServer(server);
}
