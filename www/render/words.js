// The engine's data-shaped texts in a learner's words, said the same way on every panel: a row
// (the core prints it as a Rust tuple, `(3, "hello")`, `("T1-P1-4", 4)`) as its key and value,
// `key 3 = hello`; a storage error's chain ("indeterminate: unreliable: compare_and_set
// timeout") as a sentence; a Step replicas press's worker-step report as what each replica did.

/** One datum as src/persist/codec.rs prints it: an integer, a quoted string, null or a bool. */
const DATUM = String.raw`-?\d+|"(?:[^"\\]|\\.)*"|null|true|false`;
const ROW2 = new RegExp(String.raw`\((${DATUM}), (${DATUM})\)`, "g");
/** "key 3 = (3, "hello")": the key said twice. */
const KEYED_ROW = new RegExp(String.raw`\bkey (${DATUM}) = \((${DATUM}), (${DATUM})\)`, "g");
/** "value for key (4)": a one-column row holding a key. */
const KEY1 = new RegExp(String.raw`\bkey \((${DATUM})\)`, "g");

/** A datum as a learner reads it: a plain word without its quotes, other text quoted. */
export function datumWords(d) {
  if (!d.startsWith('"')) return d;
  let s;
  try {
    s = JSON.parse(d);
  } catch {
    return d;
  }
  return /^[\w.-]+$/.test(s) ? s : d;
}

/** A row's two columns, key then value, as `key 3 = hello`. */
const rowOf = (k, v) => `key ${datumWords(k)} = ${datumWords(v)}`;

/** `text` with every two-column row as `key K = V` (and a key said twice, once). */
export function rowWords(text) {
  return String(text)
    .replace(KEYED_ROW, (m, k, rk, v) => (rk === k ? rowOf(k, v) : `key ${datumWords(k)} = ${rowOf(rk, v)}`))
    .replace(ROW2, (_, k, v) => rowOf(k, v))
    .replace(KEY1, (_, k) => `key ${datumWords(k)}`);
}

/** The value alone of a row `(K, V)` (the walk names its key already); other text as rowWords. */
export function rowValue(text) {
  const m = new RegExp(String.raw`^\((${DATUM}), (${DATUM})\)$`).exec(String(text ?? ""));
  return m ? datumWords(m[2]) : rowWords(text);
}

/**
 * A storage error's chain as a sentence. The fault-injecting store's errors
 * (src/location/unreliable.rs) say what was injected; the class says what the caller can know:
 * an indeterminate call may or may not have happened, a determinate one did not.
 */
export function errorWords(text) {
  return String(text)
    .replace(/\bindeterminate: unreliable: (\w+) timeout\b/g, "$1 timed out (a fault this page injects): it may or may not have happened")
    .replace(/\bdeterminate: unreliable: (\w+) failed\b/g, "$1 failed (a fault this page injects): it did not happen")
    .replace(/\bindeterminate: /g, "may or may not have happened: ")
    .replace(/\bdeterminate: /g, "did not happen: ");
}

const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/**
 * A press's report of one worker step per replica (src/playground/walk.rs step_timely_all:
 * "U1: fed back 0, read 0, 1 worker step, 0 out, input upper 1501→1881, stash 1→0, 1 discarded")
 * as what each replica did. A step can change a card without reading or emitting an update:
 * progress alone moves its uppers, and a drain drops the stashed upserts whose time the shard
 * already holds. Those are said too, in the card's words.
 */
function steppedWords(list) {
  let idle = 0;
  const said = list.split("; ").map((one) => {
    const m = /^(\S+): fed back (\d+), read (\d+), (\d+) worker steps?, (\d+) out((?:, [^,;]+)*)$/.exec(one);
    if (!m) return one;
    const [, id, fed, read, , out] = m.slice(0, 6).map((x, i) => (i > 1 ? Number(x) : x));
    const moved = (m[6] ?? "").split(", ").filter(Boolean);
    const uppers = moved.filter((x) => /^(input upper|persist upper|emitted up to) /.test(x));
    const stash = moved.find((x) => x.startsWith("stash "));
    const discarded = Number(/^(\d+) discarded$/.exec(moved.find((x) => x.endsWith(" discarded")) ?? "")?.[1] ?? 0);
    const did = [
      read ? `read ${plural(read, "source message")} into its stash (its input upper may show it only a worker step later)` : "",
      fed ? `folded ${plural(fed, "update")} read back from the shard into its state (its persist upper shows it a worker step later)` : "",
      out ? `emitted ${plural(out, "update")}` : "",
      uppers.length ? `moved its ${uppers.join(", ").replaceAll("→", " → ")}${read || fed || out ? "" : " (progress only, no update)"}` : "",
      stash ? `${stash.replace("→", " → ")}${discarded ? ` (${plural(discarded, "stashed upsert")} discarded: another replica already wrote ${discarded === 1 ? "its time" : "their times"} to the shard)` : ""}` : "",
    ].filter(Boolean);
    if (!did.length) idle += 1;
    return `${id} ${did.length ? did.join(", ") : "had nothing new to do"}`;
  }).join("; ");
  // A worker step works on what the replica's inputs brought in; they bring more (source
  // messages, the shard read back after a sink's write) only while the run plays. Said once.
  return idle ? `${said}. A worker step works on what a replica's inputs brought in; they bring more (source messages, the shard read back) only while the run plays (Play, or s)` : said;
}

/** A Step replicas press's text (and the status line's, an event's detail) in a learner's words. */
export function pressWords(text) {
  return errorWords(rowWords(text))
    // A stage that could not finish (src/playground/walk.rs): what happens next, and what to do.
    .replace(/; the walk stops here, unfinished: the replicas run on their own again \(push and press to walk again\)$/, ", so the walk ends here, unfinished. The replicas run on their own again; to walk an upsert, push one, then press Step replicas.")
    .replace(/Instead, one worker step of every replica: stepped (.*)$/s, (_, list) => `Instead, each replica ran one worker step: ${steppedWords(list)}.`);
}
