// The tour engine, pure (no DOM): a tour is data (www/tours/<id>.json, listed in index.json),
// a fixed seed and a list of steps. Each step is `{ title, narration: [paragraphs], commands:
// [page commands], runMs, highlight: [panel or actor ids], expect: [checks] }`, and optionally
// `logShows`: a pattern for the Event log entry the card is about, which its box scrolls to.
//
// The state at step k (1-based) is a function of the tour alone: a seed-mode playground on the
// tour's seed, then for each step 1..k its commands (the page's ordinary `Command`s, sent in
// order) and `runMs` of virtual time, run in chunks of CHUNK_MS with a pull after each (the
// page draws them; the engine's state does not depend on how often it is pulled). Opening a
// step's URL rebuilds exactly that; Back rebuilds to step k-1.
//
// What the Shard panel shows at a step: the shard it names (`shard:NAME` in `highlight`), else the
// step's `shard`, else the tour's `shard` (the one its actors write), so a step never shows an
// unrelated empty shard. A tour's `hide` lists panels it never uses (the oracle tours have no
// shard): they are hidden while the tour is open, and come back when the learner leaves it.
//
// A step with `reset: true` starts over on a fresh playground (same seed) before its commands:
// the contrast step of a broken-rule tour replays the scenario with the rule on. Rebuilding step k
// then starts from the last reset at or before it.
//
// Checks (`expect`) are plain data, evaluated against the snapshot the engine returned:
//   { snap: "shards[name=data].upper", op: ">", value: 0 }      a value
//   { snap: "...", op: "<", ref: "shards[name=data].upper" }     another path, same snapshot
//   { snap: "...", op: ">", prev: "..." }                         a path in the previous step's snapshot
//   { panel: "panel-writers", text: "UpperMismatch" }             what a panel shows (regex, page only)
// Narration may quote the run: `{{path}}` is the value at path in the step's final snapshot,
// `{{prev:path}}` in the previous step's (fillNarration).
// Paths: dot-separated fields; `name[k=v]` picks the array element whose field k is v; `name[N]`
// picks by index (negative from the end); a final `length` counts an array or string.
// tests/tours.rs evaluates the same `snap` checks natively (keep the two in step).
//
// To add a tour: write www/tours/<id>.json and list it in index.json (a `group: "rules"` tour
// goes on the picker's second row). `cargo test --test native tours::` replays it natively and
// tests/e2e/tours.test.mjs clicks through it; find the run lengths that show what a step says
// by probing the engine (the state is a function of the seed and the steps, so they stay put).

/** Virtual time per chunk of a step's run. */
export const CHUNK_MS = 50;

/**
 * `?tour=ID&step=N[&numbering=K][&free=1][&animate=0]`: which tour and step the URL opens (or
 * null); `numbering`: how many of the tour's renumberings the link already follows (see stepOf;
 * none if absent: a link made before them); `free`: with the tour closed; `animate=0`: each step's
 * run shows at once instead of over a second.
 *
 * An old broken-rule preset link, `?preset=RULE&rule=off|on`, opens the rule's tour
 * (`rule-RULE`): its broken step (`step: "broken"`, the last before the tour starts over) with
 * `rule=off`, its intact step (`step: "intact"`, the last) with `rule=on`. `stepOf` resolves
 * those names once the tour is loaded.
 */
export function tourParams(search) {
  const p = new URLSearchParams(search);
  const preset = p.get("preset");
  const id = p.get("tour") ?? (preset ? `rule-${preset}` : null);
  if (!id) return null;
  const animate = p.get("animate") !== "0";
  if (!p.get("tour")) return { id, step: p.get("rule") === "on" ? "intact" : "broken", free: false, animate };
  const raw = p.get("step") ?? "1";
  const step = /^\d{1,3}$/.test(raw) ? Number(raw) : NaN;
  const numbering = /^\d{1,3}$/.test(p.get("numbering") ?? "") ? Number(p.get("numbering")) : 0;
  return { id, step, numbering, free: p.get("free") === "1", animate };
}

/**
 * The 1-based step `step` names in `tour`: a number as a link that follows the tour's first
 * `numbering` renumberings meant it; "broken", the last step before the first `reset` (a
 * broken-rule tour's run without the rule); "intact", the last step (the same run with it).
 * Throws on a name the tour cannot resolve (a tour that never starts over).
 *
 * A tour whose steps were split, merged or moved keeps old links working with `renumbered`: a
 * list, oldest first, of `{ why, steps: { "OLD": NEW, ... } }`, one per change, each mapping the
 * numbers that change from the numbering before it to the one after (a number it does not list
 * stays). A link carries how many it follows (`numbering=K`, which tourSearch writes), so an old
 * link goes through the later maps and a new one through none.
 */
export function stepOf(tour, step, numbering = 0) {
  if (typeof step === "number") {
    let n = step;
    for (const r of (tour.renumbered ?? []).slice(numbering)) n = r.steps[String(n)] ?? n;
    return n;
  }
  const reset = tour.steps.findIndex((s, i) => i > 0 && s.reset);
  if (reset < 0) throw new Error(`tour ${JSON.stringify(tour.id)} has no ${step} step: it never starts over with the rule on`);
  if (step === "broken") return reset;
  if (step === "intact") return tour.steps.length;
  throw new Error(`tour ${JSON.stringify(tour.id)} has no step ${JSON.stringify(step)}`);
}

/**
 * What the renumberings a link made under the tour's first `numbering` ones did to its step
 * `step` (a number): `null` if they left it where it was, else `{ from, to, whys }`, `whys` the
 * `why` of each renumbering that moved it, oldest first. The tour card says so (render/tour.js):
 * an old link opens the step it meant, never silently.
 */
export function remapOf(tour, step, numbering = 0) {
  if (typeof step !== "number" || !Number.isInteger(step)) return null;
  let n = step;
  const whys = [];
  for (const r of (tour.renumbered ?? []).slice(numbering)) {
    const to = r.steps[String(n)];
    if (to !== undefined && to !== n) {
      whys.push(r.why);
      n = to;
    }
  }
  return n === step ? null : { from: step, to: n, whys };
}

/**
 * The parameters a tour step's URL sets (tourSearch), the old preset link's, and the page's that a
 * tour decides itself (its seed, its actors: main.js).
 */
const TOUR_KEYS = ["tour", "step", "numbering", "free", "autoplay", "preset", "rule", "seed", "empty", "run", "mode", "db"];

/**
 * `search` (a tour step's URL search, from tourSearch) with the other parameters of `current`
 * (the URL the page is on) kept, in their order: a link's `animate=0` stays when the page
 * rewrites the URL to the step it opened, and on every step after.
 */
export function keepOtherParams(search, current) {
  const p = new URLSearchParams(search);
  for (const [k, v] of new URLSearchParams(current)) if (!TOUR_KEYS.includes(k) && !p.has(k)) p.append(k, v);
  return `?${p}`;
}

/**
 * The URL search of a tour step. `tour` is the tour (its link says which numbering of its steps
 * it follows, if it was ever renumbered: see stepOf) or, for a tour never renumbered, its id.
 */
export function tourSearch(tour, step, free = false) {
  const p = new URLSearchParams({ tour: typeof tour === "string" ? tour : tour.id, step: String(step) });
  const numbering = typeof tour === "string" ? 0 : (tour.renumbered ?? []).length;
  if (numbering) p.set("numbering", String(numbering));
  if (free) p.set("free", "1");
  p.set("autoplay", "0");
  return `?${p}`;
}

/** The shard the Shard panel shows at `step` of `tour` (see the top of this file), or undefined. */
export function shardOf(tour, step) {
  return (step.highlight ?? []).find((h) => h.startsWith("shard:"))?.slice(6) ?? step.shard ?? tour.shard;
}

const SHARD_NAME = /^[A-Za-z0-9_.-]{1,64}$/;

const isRegExp = (src) => {
  try {
    new RegExp(src);
    return true;
  } catch {
    return false;
  }
};

/** Checks a tour's shape; throws an Error naming the first problem. */
export function checkTour(tour) {
  const where = `tour ${JSON.stringify(tour?.id)}`;
  if (!tour || typeof tour.id !== "string" || !/^[a-z0-9-]{1,40}$/.test(tour.id)) throw new Error(`${where}: a tour needs an id of lowercase letters, digits and -`);
  if (typeof tour.title !== "string" || !tour.title) throw new Error(`${where}: no title`);
  if (!/^\d{1,20}$/.test(String(tour.seed))) throw new Error(`${where}: the seed must be a whole number`);
  if (!Array.isArray(tour.steps) || tour.steps.length === 0) throw new Error(`${where}: no steps`);
  if ("shard" in tour && !SHARD_NAME.test(tour.shard)) throw new Error(`${where}: shard must be a shard's name`);
  if ("hide" in tour && !(Array.isArray(tour.hide) && tour.hide.every((h) => /^panel-[a-z]+$/.test(h)))) throw new Error(`${where}: hide must be a list of panel ids (panel-...)`);
  tour.steps.forEach((s, i) => {
    const at = `${where} step ${i + 1}`;
    if (typeof s.title !== "string" || !s.title) throw new Error(`${at}: no title`);
    if (!Array.isArray(s.narration) || !s.narration.length) throw new Error(`${at}: no narration`);
    if (!Array.isArray(s.commands ?? [])) throw new Error(`${at}: commands must be a list`);
    if ("shard" in s && !SHARD_NAME.test(s.shard)) throw new Error(`${at}: shard must be a shard's name`);
    for (const h of s.highlight ?? []) if ((tour.hide ?? []).includes(h)) throw new Error(`${at}: it names ${h}, which the tour hides`);
    if ("reset" in s && typeof s.reset !== "boolean") throw new Error(`${at}: reset must be true or false`);
    if ("logShows" in s && !(typeof s.logShows === "string" && s.logShows && isRegExp(s.logShows))) throw new Error(`${at}: logShows must be a regular expression`);
    if (!Number.isInteger(s.runMs ?? 0) || (s.runMs ?? 0) < 0 || s.runMs > 60_000) throw new Error(`${at}: runMs must be 0 to 60000`);
    for (const e of s.expect ?? []) if (e.prev && i === 0) throw new Error(`${at}: the first step has no previous step`);
  });
  if ("renumbered" in tour && !Array.isArray(tour.renumbered)) throw new Error(`${where}: renumbered must be a list`);
  for (const [k, r] of (tour.renumbered ?? []).entries()) {
    const map = Object.entries(r?.steps ?? {});
    const ok = map.length > 0 && map.every(([from, to]) => /^[1-9]\d{0,2}$/.test(from) && Number.isInteger(to) && to >= 1);
    if (!ok || typeof r.why !== "string" || !r.why) throw new Error(`${where}: renumbered[${k}] needs a why and steps mapping old step numbers to new ones`);
  }
  return tour;
}

/** The chunks a step's run is cut into (the same on every path: click-through and rebuild). A
 * step of no time is one run of 0 ms: what its commands started runs at that instant (a check of
 * acknowledged writes reports at the settle, as of the moment the panels show). */
export function chunksOf(runMs) {
  if (!runMs) return [0];
  const out = [];
  for (let left = runMs; left > 0; left -= CHUNK_MS) out.push(Math.min(CHUNK_MS, left));
  return out;
}

/**
 * Applies step `index` (0-based) of `tour` to `pg`: its commands, in order (a refused command
 * throws an Error naming the step), then its run, one chunk per `onChunk` call if given (the
 * caller may pace them), else all at once. Returns nothing; pull the snapshot after.
 */
export function applyCommands(pg, tour, index) {
  const step = tour.steps[index];
  for (const [i, command] of (step.commands ?? []).entries()) {
    try {
      pg.send(command);
    } catch (err) {
      throw new Error(`tour ${tour.id} step ${index + 1}, command ${i + 1} (${command.type}) was refused: ${err instanceof Error ? err.message : err}`);
    }
  }
}

/** The index (0-based) of the step a rebuild to the end of step `upTo` (1-based) starts from. */
export function firstStepOf(tour, upTo) {
  let start = 0;
  for (let i = 0; i < upTo; i++) if (tour.steps[i].reset) start = i;
  return start;
}

/** Builds a fresh playground at the end of step `upTo` (1-based); `pull` runs after each chunk. */
export function rebuild(Playground, tour, upTo, pull = () => {}) {
  const pg = Playground.seeded(String(tour.seed));
  for (let i = firstStepOf(tour, upTo); i < upTo; i++) {
    applyCommands(pg, tour, i);
    pull(pg);
    for (const ms of chunksOf(tour.steps[i].runMs ?? 0)) {
      pg.runFor(ms);
      pull(pg);
    }
  }
  return pg;
}

function segment(value, seg) {
  if (value === null || value === undefined) return undefined;
  const m = /^([A-Za-z_]\w*)?(?:\[(-?\d+|[A-Za-z_]\w*=[^\]]*)\])?$/.exec(seg);
  if (!m) throw new Error(`bad path segment ${JSON.stringify(seg)}`);
  const [, name, pick] = m;
  if (name === "length" && !pick && (Array.isArray(value) || typeof value === "string")) return value.length;
  let v = name ? value[name] : value;
  if (pick === undefined) return v;
  if (!Array.isArray(v)) return undefined;
  if (/^-?\d+$/.test(pick)) {
    const n = Number(pick);
    return v[n < 0 ? v.length + n : n];
  }
  const [k, want] = pick.split("=");
  return v.find((e) => e && String(e[k]) === want);
}

/** The value at `path` in `snap` (undefined when a part is missing). */
export function valueAt(snap, path) {
  return path.split(".").reduce(segment, snap);
}

function compare(op, a, b) {
  switch (op) {
    case "==": return a === b;
    case "!=": return a !== b;
    case ">": return typeof a === "number" && typeof b === "number" && a > b;
    case ">=": return typeof a === "number" && typeof b === "number" && a >= b;
    case "<": return typeof a === "number" && typeof b === "number" && a < b;
    case "<=": return typeof a === "number" && typeof b === "number" && a <= b;
    case "contains": return (typeof a === "string" || Array.isArray(a)) && a.includes(b);
    case "exists": return a !== null && a !== undefined;
    case "null": return a === null;
    default: throw new Error(`unknown op ${op}`);
  }
}

/**
 * Evaluates one `snap` check; returns `{ ok, got, want, text }`. `prevSnap` is the previous
 * step's final snapshot (for `prev` checks).
 */
export function evalSnapCheck(check, snap, prevSnap = null) {
  const got = valueAt(snap, check.snap);
  let want;
  if ("ref" in check) want = valueAt(snap, check.ref);
  else if ("prev" in check) {
    if (!prevSnap) return { ok: false, got, want: undefined, text: `${check.snap} ${check.op} previous ${check.prev}: no previous step` };
    want = valueAt(prevSnap, check.prev);
  } else want = check.value;
  const ok = compare(check.op, got, want);
  const rhs = "ref" in check ? `${check.ref} (${JSON.stringify(want)})` : "prev" in check ? `previous step's ${check.prev} (${JSON.stringify(want)})` : JSON.stringify(want);
  return { ok, got, want, text: `${check.snap} = ${JSON.stringify(got)} ${check.op}${check.op === "exists" || check.op === "null" ? "" : ` ${rhs}`}` };
}

/** Every `snap` check of step `index` that fails (empty: the step shows what it says). */
export function failedChecks(tour, index, snap, prevSnap) {
  return (tour.steps[index].expect ?? [])
    .filter((e) => e.snap)
    .map((e) => evalSnapCheck(e, snap, prevSnap))
    .filter((r) => !r.ok);
}

/** A value as narration shows it: numbers as they are, the empty frontier as ∅. */
function shown(v) {
  if (v === null) return "∅";
  if (v === undefined) return "?";
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

/** Replaces `{{path}}` and `{{prev:path}}` in a narration paragraph with values from the run. */
export function fillNarration(text, snap, prevSnap = null) {
  return text.replace(/\{\{(prev:)?([^}]+)\}\}/g, (_, prev, path) => shown(valueAt(prev ? prevSnap : snap, path.trim())));
}
