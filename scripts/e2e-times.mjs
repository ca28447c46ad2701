// A node --test reporter for scripts/test.sh's summary: where the page layer's time goes. For each
// test file, the sum of its top-level tests' durations (a file runs its tests one after another,
// so that is about its share of the layer), slowest first, then the slowest tests.
//
//   node --test --test-reporter=tap --test-reporter-destination=stdout \
//     --test-reporter=./scripts/e2e-times.mjs --test-reporter-destination=times.txt tests/e2e/

import { relative } from "node:path";

const SLOWEST_TESTS = 8;

export default async function* times(source) {
  const files = new Map();
  const tests = [];
  for await (const event of source) {
    if ((event.type !== "test:pass" && event.type !== "test:fail") || event.data.nesting !== 0) continue;
    const file = event.data.file ? relative(process.cwd(), event.data.file) : "?";
    const ms = event.data.details?.duration_ms ?? 0;
    files.set(file, (files.get(file) ?? 0) + ms);
    tests.push({ file, name: event.data.name, ms });
  }
  const s = (ms) => `${(ms / 1000).toFixed(1)}s`;
  yield `e2e files by the time of their tests: ${[...files].sort((a, b) => b[1] - a[1]).map(([f, ms]) => `${f.replace(/^tests\/e2e\//, "")} ${s(ms)}`).join(", ")}\n`;
  const slow = tests.sort((a, b) => b.ms - a.ms).slice(0, SLOWEST_TESTS);
  yield `slowest e2e tests: ${slow.map((t) => `${s(t.ms)} ${t.file.replace(/^tests\/e2e\//, "")}: ${t.name.slice(0, 60)}`).join("; ")}\n`;
}
