// Renames a .wasm's functions (its `name` section) so that binaryen's --reorder-functions-by-name
// puts them in the order gzip compresses best that we found: by demangled name without its
// `::h<hash>` suffix, then by body bytes. The copies of one generic function (a Vec's from_iter
// for each item type, ...) then sit side by side with the most alike of them next to each other.
// Sorting by the full names (hash included) orders copies by hash, which is random: this order
// makes the page's gzipped .wasm ~2.4 KB smaller. The names it writes are the rank, zero-padded;
// scripts/wasm-passes.sh strips them after the reorder. Called by scripts/wasm-passes.sh only
// (the page's build and the npm package's):
//
//   node scripts/order-functions.mjs IN.wasm OUT.wasm
//
// IN must have a name section with function names (wasm-opt -g keeps it). Only the function-names
// subsection is written back: the others (locals, ...) are dropped, as the strip would drop them.
import { readFileSync, writeFileSync } from "node:fs";

const [input, output] = process.argv.slice(2);
if (!input || !output) {
  console.error("usage: node scripts/order-functions.mjs IN.wasm OUT.wasm");
  process.exit(2);
}
const bytes = readFileSync(input);

function leb(at) {
  let value = 0;
  let shift = 0;
  for (;;) {
    const b = bytes[at++];
    value += (b & 0x7f) * 2 ** shift;
    shift += 7;
    if (b < 0x80) return [value, at];
  }
}
function uleb(n) {
  const out = [];
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    out.push(b);
  } while (n > 0);
  return Buffer.from(out);
}
function name(at) {
  const [len, start] = leb(at);
  return [bytes.subarray(start, start + len), start + len];
}

const kept = [bytes.subarray(0, 8)]; // the header and every section but `name`, as they are
let imported = 0; // function imports: their indices come first
const bodies = [];
const names = new Map();
let at = 8;
while (at < bytes.length) {
  const start = at;
  const id = bytes[at++];
  let len;
  [len, at] = leb(at);
  const end = at + len;
  if (id === 2) {
    let n, p;
    [n, p] = leb(at);
    for (let i = 0; i < n; i++) {
      [, p] = name(p);
      [, p] = name(p);
      const kind = bytes[p++];
      if (kind === 0) {
        [, p] = leb(p);
        imported++;
      } else if (kind === 1) {
        p++;
        let flags;
        [flags, p] = leb(p);
        [, p] = leb(p);
        if (flags & 1) [, p] = leb(p);
      } else if (kind === 2) {
        let flags;
        [flags, p] = leb(p);
        [, p] = leb(p);
        if (flags & 1) [, p] = leb(p);
      } else if (kind === 3) {
        p += 2;
      } else {
        throw new Error(`import kind ${kind} not known`);
      }
    }
  } else if (id === 10) {
    let n, p;
    [n, p] = leb(at);
    for (let i = 0; i < n; i++) {
      let size;
      [size, p] = leb(p);
      bodies.push(bytes.subarray(p, p + size));
      p += size;
    }
  } else if (id === 0) {
    const [section, p0] = name(at);
    if (section.toString() === "name") {
      let p = p0;
      while (p < end) {
        const sub = bytes[p++];
        let size;
        [size, p] = leb(p);
        if (sub === 1) {
          let n, q;
          [n, q] = leb(p);
          for (let i = 0; i < n; i++) {
            let index, text;
            [index, q] = leb(q);
            [text, q] = name(q);
            names.set(index, text.toString());
          }
        }
        p += size;
      }
      at = end;
      continue;
    }
  }
  kept.push(bytes.subarray(start, end));
  at = end;
}
if (names.size === 0) {
  console.error(`[order-functions] ${input} has no function names (run wasm-opt with -g)`);
  process.exit(1);
}

const stem = (i) => (names.get(imported + i) ?? "").replace(/::h[0-9a-f]{16}$/, "");
const order = bodies.map((_, i) => i);
const stems = order.map(stem);
order.sort((a, b) => {
  if (stems[a] !== stems[b]) return stems[a] < stems[b] ? -1 : 1;
  return Buffer.compare(bodies[a], bodies[b]) || a - b;
});
const width = String(bodies.length).length;
const entries = [uleb(bodies.length)];
const rank = new Array(bodies.length);
order.forEach((f, r) => (rank[f] = r));
for (let i = 0; i < bodies.length; i++) {
  const text = Buffer.from(String(rank[i]).padStart(width, "0"));
  entries.push(uleb(imported + i), uleb(text.length), text);
}
const sub = Buffer.concat(entries);
const payload = Buffer.concat([uleb(4), Buffer.from("name"), Buffer.from([1]), uleb(sub.length), sub]);
const out = Buffer.concat([...kept, Buffer.from([0]), uleb(payload.length), payload]);
writeFileSync(output, out);
