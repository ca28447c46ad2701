// Scrub benchmark (not a test): loads the playground in headless Chromium with a fresh profile,
// runs eight writers over a thousand keys and two upsert replicas at full speed until the merged
// event log holds at least 10,000 events, pauses, then drags the time bar's scrub bar through the
// kept snapshots that cover the last 10,000 events, one position per animation frame, back to the
// start of that span and forward again. Each sweep measures the script time of every frame:
// the page's frame (drawing the past snapshot shown) plus the scrub bar's input handling.
// It prints p50/p95/p99 per sweep and the medians over sweeps.
// Usage: bash scripts/build.sh && node scripts/bench-scrub.mjs [sweeps=5] [framesPerSweep=240] [width=1280] [height=800]

import { checkBuilt, closeBrowser, launch, openPage, startServer, stopServer, waitFor } from "../tests/e2e/helpers.mjs";

const sweeps = Number(process.argv[2] ?? 5);
const frames = Number(process.argv[3] ?? 240);
const viewport = { width: Number(process.argv[4] ?? 1280), height: Number(process.argv[5] ?? 800) };
const EVENTS = 10_000;

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (x) => x.toFixed(2);

checkBuilt();
const server = await startServer();
try {
  const ctx = await launch();
  const page = await openPage(ctx, server.url("?seed=1&empty=1"), viewport);
  await page.getByTestId("preset-busy").click();
  await page.getByTestId("add-replica").click();
  await page.getByTestId("add-replica").click();
  await page.getByTestId("u-generator").check();
  await page.getByTestId("speed").selectOption("max");
  await waitFor(page, (n) => window.__playground.state.latest().lastSeq >= n + 500, `${EVENTS + 500} events in the log`, EVENTS, 180_000);
  await page.getByTestId("play").click();
  await waitFor(page, () => !window.__playground.view.playing, "paused");
  const rows = [];
  for (let s = 0; s < sweeps; s++) {
    const r = await page.evaluate(async ([frames, events]) => {
      const { time, view } = window.__playground;
      const entries = time.history().entries();
      const present = entries.at(-1);
      // The newest kept snapshot at least `events` events before the present: the span holds them all.
      const first = entries.findLast((e) => e.lastSeq <= present.lastSeq - events) ?? entries[0];
      const span = present.steps - first.steps;
      const scrub = document.getElementById("t-scrub");
      // Back to the start of the span over half the frames, then forward again.
      const positions = [];
      const half = Math.floor(frames / 2);
      for (let i = 1; i <= half; i++) positions.push(Math.round(present.steps - (span * i) / half));
      for (let i = 1; i <= frames - half; i++) positions.push(Math.round(first.steps + (span * i) / (frames - half)));
      view.frameMs.length = 0;
      const input = [];
      const shown = new Set();
      let minSeq = Infinity;
      let maxSeq = 0;
      await new Promise((resolve) => {
        let i = 0;
        const tick = () => {
          if (i === positions.length) return resolve();
          const t = performance.now();
          scrub.value = String(positions[i++]);
          scrub.dispatchEvent(new Event("input", { bubbles: true }));
          input.push(performance.now() - t);
          const snap = time.shown(window.__playground.state).latest();
          shown.add(snap.steps);
          minSeq = Math.min(minSeq, snap.lastSeq);
          maxSeq = Math.max(maxSeq, snap.lastSeq);
          requestAnimationFrame(tick);
        };
        requestAnimationFrame(tick);
      });
      // One more frame, so the page draws the last position.
      await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
      const frame = view.frameMs.slice(1); // the first frame drew before the first position
      time.toPresent();
      return { frame, input, shown: shown.size, events: maxSeq - minSeq, kept: entries.length, firstStep: entries[0].steps, spanFrom: first.steps, present: present.steps };
    }, [frames, EVENTS]);
    const total = r.frame.map((f, i) => f + (r.input[i] ?? 0));
    rows.push({ p50: pct(total, 50), p95: pct(total, 95), p99: pct(total, 99) });
    console.log(`sweep ${s + 1}: ${r.frame.length} frames over ${r.events} events (${r.shown} distinct kept snapshots of ${r.kept}, steps ${r.spanFrom}-${r.present}, oldest kept ${r.firstStep}); frame script time p50 ${fmt(pct(total, 50))} ms, p95 ${fmt(pct(total, 95))} ms, p99 ${fmt(pct(total, 99))} ms (input handling p95 ${fmt(pct(r.input, 95))} ms)`);
  }
  if (page.errors.length) throw new Error(`errors in the page: ${page.errors.join("; ")}`);
  console.log(`viewport ${viewport.width}x${viewport.height}: median over ${sweeps} sweeps: p50 ${fmt(median(rows.map((r) => r.p50)))} ms, p95 ${fmt(median(rows.map((r) => r.p95)))} ms, p99 ${fmt(median(rows.map((r) => r.p99)))} ms`);
  await ctx.close();
} finally {
  await closeBrowser();
  await stopServer(server);
}
