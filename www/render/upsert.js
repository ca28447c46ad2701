// The upsert pipeline panel: the source log and its frontier, each replica (stash, input upper
// against persist upper, state per key with provisional values marked, what it emitted,
// discarded and fed back), and the feedback edge from the shard into every replica, animated
// while feedback arrives.

import { actorColour } from "../spec.js";

/** Source times are not the clock: plain numbers (∅ for the empty frontier). */
const fmtT = (t) => (t === null || t === undefined ? "∅" : String(t));
import { chip, esc, setHtml } from "./dom.js";
import { rowValue, rowWords } from "./words.js";

/** The upsert shard's upper (a source time, as the panel shows times): the newest of the
 * observed state's and what the replicas' sinks learned from their writes (the observer reads the
 * state a moment later). */
/** The upsert shard's row for `key` as its rows line says it (`● key 3 = hello`), or null. */
function shardRowOf(snap, key) {
  const rows = snap.shards.find((s) => s.name === snap.upsert.shard)?.rows?.shown ?? [];
  const x = rows.find((x) => rowWords(x.row).startsWith(`key ${key} = `));
  return x ? `${x.newest ? "● " : ""}${rowWords(x.row)}${x.count === 1 ? "" : ` ×${x.count}`}` : null;
}

function shardUpper(snap) {
  const ups = [snap.shards.find((s) => s.name === snap.upsert.shard)?.upper,
    ...snap.actors.map((a) => (a.detail?.kind === "replica" ? a.detail.sink?.upper : null))].filter((u) => u != null);
  return ups.length ? Math.max(...ups) : null;
}

/** Did replica `id` get feedback since the previous snapshot? */
function fedSince(prev, id, now) {
  const before = prev?.actors.find((a) => a.id === id)?.detail?.counters?.fedBack ?? 0;
  return (now?.counters?.fedBack ?? 0) > before;
}

function diagram(snap, replicas, prev) {
  const W = 460;
  const rowH = 34;
  const H = Math.max(90, 20 + replicas.length * rowH);
  const midY = H / 2;
  const parts = [];
  parts.push(`<rect x="4" y="${midY - 18}" width="78" height="36" rx="5" class="up-box"/><text x="43" y="${midY - 2}" class="up-label" text-anchor="middle">source</text><text x="43" y="${midY + 12}" class="up-sub" text-anchor="middle">${snap.upsert.sourceMessages} msg${snap.upsert.sourceMessages === 1 ? "" : "s"}</text>`);
  parts.push(`<rect x="${W - 92}" y="${midY - 18}" width="88" height="36" rx="5" class="up-box shard"/><text x="${W - 48}" y="${midY - 2}" class="up-label" text-anchor="middle">${snap.upsert.shard}</text><text x="${W - 48}" y="${midY + 12}" class="up-sub${snap.upsert.walk?.nextName === "feedback read" ? " walk-hit" : ""}" text-anchor="middle" data-testid="upsert-shard-upper">upper ${fmtT(shardUpper(snap))}</text>`);
  replicas.forEach((a, i) => {
    const y = 10 + i * rowH + rowH / 2;
    const c = actorColour(a.colour);
    const r = a.detail.kind === "replica" ? a.detail : null;
    const active = r && fedSince(prev, a.id, r);
    // A replica without the feedback rule never reads the shard back: no feedback edge, and its
    // box says so. The box is as wide as its label (mono 11px, ~7 px a character).
    const own = a.variant === "upsert-feedback";
    const label = `${a.id}${r ? ` gen ${r.generation}` : ""}${a.state !== "running" ? ` (${a.state})` : ""}${own ? " · no feedback" : ""}`;
    const bw = Math.min(190, Math.max(110, label.length * 7 + 12));
    const [x0, x1] = [225 - bw / 2, 225 + bw / 2];
    parts.push(`<path d="M82,${midY} C${x0 - 40},${midY} ${x0 - 40},${y} ${x0},${y}" class="up-edge"/>`);
    parts.push(`<path d="M${x1},${y} C${x1 + 40},${y} ${x1 + 40},${midY} ${W - 92},${midY}" class="up-edge"/>`);
    // The feedback edge: from the shard back into the replica, below the forward edge.
    if (!own) parts.push(`<path d="M${W - 92},${midY + 10} C${W - 150},${y + 22} ${x1 + 20},${y + 14} ${x1},${y + 8}" class="up-feedback${active ? " active" : ""}" data-feedback="${esc(a.id)}" stroke="${c}"><title>feedback: ${a.id} reads back what the shard holds</title></path>`);
    // A failed replica's box and label are red, as its card's reason is.
    const failed = a.state === "failed";
    parts.push(`<rect x="${x0}" y="${y - 13}" width="${bw}" height="26" rx="5" class="up-box" stroke="${failed ? "var(--error)" : c}" style="stroke-width:2"/>`);
    parts.push(`<text x="225" y="${y + 4}" class="up-label${failed ? " failed" : ""}" text-anchor="middle" data-replica-label="${esc(a.id)}"${failed ? ` style="fill:var(--error)"` : ""}>${esc(label)}<title>${esc(a.id)}${r ? `, generation ${r.generation}: ${r.generation === 0 ? "its first start" : `restarted ${r.generation}×, each time rehydrated from the shard`}` : ""}${own ? "; without the feedback rule it never reads the shard back: it learns only from what it emitted itself" : ""}</title></text>`);
  });
  return `<svg viewBox="0 0 ${W} ${H}" class="upsert-svg" role="img" aria-label="the upsert pipeline with its feedback edge">${parts.join("")}</svg>`;
}

/** The generator numbers its values v0, v1, ...; an undecodable one says "(the generator's) #N"
 * for the value vN it stands in place of: say that, not a bare "#" (the source's #n are offsets). */
const shown = (v) => rowWords(String(v).replace(/\(the generator's\) #(\d+)/g, "(in place of the generator's value v$1)"));

/**
 * Replicas key their stash and state by a hash of the key. A delete carries no row, so the panel
 * names its key from a cell or stash entry of the same hash that has a row (whose first column
 * is the key): `hash → key`, over every replica.
 */
function keysByHash(replicas) {
  const keys = new Map();
  const learn = (hash, row) => {
    const m = /^\((-?\d+), /.exec(row ?? "");
    if (m) keys.set(String(hash), m[1]);
  };
  for (const a of replicas) {
    const op = a.detail?.kind === "replica" ? a.detail.operator : null;
    for (const c of op?.state ?? []) learn(c.key, c.value ?? c.provisional_value);
    for (const e of op?.stash ?? []) learn(e.key, e.value);
  }
  return keys;
}

/** A delete's key: named if a row of the same key hash is in view, else its hash, explained. */
function deletedKey(hash, keys) {
  const k = keys.get(String(hash));
  return k !== undefined
    ? `key ${esc(k)}`
    : `<span class="muted" title="replicas key their stash and state by a hash of the key; a delete carries no row to name its key by, and no row of this key is in view">key hash ${esc(String(hash).slice(0, 8))}</span>`;
}

/** The generator's undecodable values are made on purpose (its text says so): say it plainly. */
const ON_PURPOSE = /undecodable on purpose/;
const purposeNote = (v) => (v && ON_PURPOSE.test(v)
  ? ` <span class="muted small" title="the generator makes about 1 upsert in 20 undecodable, to show an error travelling through the pipeline; switch it off with setUndecodable">(made undecodable on purpose by the generator)</span>`
  : "");

function stateTable(op, walkCell, keys, doneValue = null) {
  if (!op) return "";
  // The cell of the upsert a stage-by-stage walk follows comes first, so it is always in view,
  // and stays first once the walk is done (the cell holding the value it confirmed); it is marked
  // (data-walked) for the press to keep in the window (controls.js).
  const state = op.state.slice();
  const w = walkCell ? state.findIndex((c) => c.key === walkCell) : doneValue != null ? state.findIndex((c) => c.value === doneValue && c.mode !== "provisional") : -1;
  if (w > 0) state.unshift(...state.splice(w, 1));
  const cells = state.slice(0, 10).map((c) => {
    const prov = c.mode === "provisional";
    // A cell that does not decode (two rows for one key, say) says why, its key named.
    // A provisional delete names the row it retracts (the value the state held, whose row
    // carries the key), else its key's hash, as the stash does.
    const k = keys?.get(String(c.key));
    const del = `⌫ delete ${c.value != null ? c.value : k !== undefined ? `key ${k}` : `(key hash ${String(c.key).slice(0, 8)})`}`;
    const value = prov ? (c.provisional_value ?? del) : (c.value ?? (c.decode_error ? `does not decode: ${c.decode_error}` : c.mode === "tombstone" ? "⌫" : "–"));
    // The key is shown by its row (key, value); its hash, the state's own key, only on hover.
    // An error takes its key's place (a value that did not decode): marked ⚠.
    const bad = /^error: /.test(value) || Boolean(c.decode_error);
    const walked = w >= 0 && c === state[0] ? " data-walked" : "";
    return `<li class="${prov ? "provisional" : ""}${bad ? " err" : ""}"${walked} title="${esc(c.mode)}${prov ? ` at ${c.provisional_time}` : ""}; key hash ${esc(c.key)}">${prov ? "◌ " : ""}${bad ? "⚠ " : ""}${esc(shown(value))}${purposeNote(value)}</li>`;
  });
  // A stashed value shows its row; a delete has no row, so its key's hash stands in.
  const stash = op.stash.slice(0, 6).map((e) => `<li title="key hash ${esc(e.key)}"><span class="mono">t${e.time}</span> ${e.value != null ? esc(shown(e.value)) : `⌫ delete ${deletedKey(e.key, keys)}`}</li>`);
  return `<div class="up-cols"><div><h4>state per key <span class="nowrap muted" title="a legend, not a status: a value marked ◌ is provisional, emitted before the shard confirmed it">(◌ marks a provisional value)</span></h4><ul class="cells" data-testid="upsert-state">${cells.join("") || `<li class="empty">empty</li>`}</ul></div>` +
    `<div><h4>stash (${op.stash.length})</h4><ul class="cells" data-testid="upsert-stash">${stash.join("") || `<li class="empty">empty</li>`}</ul></div></div>`;
}

/**
 * Why a card's persist upper trails its "emitted up to" (0 beside 1010, say), said once a
 * panel, on the first card that shows it before reading anything back: they count different things.
 */
function trailNote(a, r) {
  const p = r.operator?.persist_upper;
  const out = r.output_frontier;
  if (p == null || out == null || p >= out) return "";
  return `<div class="small muted" data-testid="upsert-trail">Why persist upper ${fmtT(p)} trails emitted up to ${fmtT(out)}: ${esc(a.id)} will emit nothing more before ${fmtT(out)} (its sink writes the shard up to there, with an empty write if it has nothing new), but it has read the shard back only to ${fmtT(p)}: the read-back comes after the write. Its stash waits until the persist upper reaches each message's time.</div>`;
}

/**
 * Why a card's sink's upper is behind the shard's (a replica held during a walk, or one that
 * lost the last race): a sink learns the shard's upper only from the answer to its own
 * compare_and_append (src/upsert/sink.rs), never from the feedback read. None while its own
 * write is retrying: that write may be what moved the shard.
 */
function sinkBehindNote(a, r, snap, replicas) {
  const up = shardUpper(snap);
  const mine = r.sink?.upper;
  // A halted replica writes no more: its sink's upper stays where it stopped, for no reason to give.
  if (mine == null || up == null || mine >= up || r.retrying || r.halted) return "";
  const by = replicas.find((x) => x.id !== a.id && x.detail?.sink?.upper === up)?.id ?? "another replica";
  return `<div class="small muted" data-testid="upsert-sink-behind">Why sink's upper ${fmtT(mine)} is behind the shard's ${fmtT(up)}: ${esc(by)} wrote the shard up to ${fmtT(up)}, and a sink learns the upper only from its own writes. ${esc(a.id)}'s next write, at ${fmtT(mine)}, loses the race (UpperMismatch); its sink then takes ${fmtT(up)} and drops its output below it.</div>`;
}

function replicaCard(a, walk, keys, note, done = null, snap = null, replicas = []) {
  const r = a.detail.kind === "replica" ? a.detail : null;
  const head = `${chip(a.id, actorColour(a.colour))} <span class="muted">${esc(a.process)}</span>`;
  if (!r) return `<div class="up-replica" data-actor="${esc(a.id)}">${head} <span class="state s-${esc(a.state)}">${esc(a.state)}</span>${a.error ? ` <span class="err small">${esc(a.error)}</span>` : ""}</div>`;
  const op = r.operator;
  const c = r.counters;
  const frontiers = `<span title="its input frontier: how far the operator has read the source (every source time before it is in)">input upper <b class="mono">${fmtT(op?.input_upper)}</b></span> · <span title="how far the operator has read the shard back (feedback): it knows the shard's contents before this time. It trails “emitted up to”: the sink writes first, the read-back comes after">persist upper <b class="mono">${fmtT(op?.persist_upper)}</b></span> · ${r.feedback_waiting ? `<span class="feedback-waiting" data-testid="upsert-feedback-waiting" title="its persist source has read these updates back from the shard (the feedback read); they wait at the operator's persist input until its next step folds them into the state">read back, not yet folded <b>${r.feedback_waiting}</b></span> · ` : ""}<span title="the operator's output frontier: it has emitted every update before this time to its sink">emitted up to <b class="mono">${fmtT(r.output_frontier)}</b></span> · <span title="the shard's upper as this replica's sink last saw it: its next compare_and_append starts here">sink's upper <b class="mono">${fmtT(r.sink.upper)}</b></span>`;
  // Without the feedback rule (the own-feedback variant) what it feeds into its state is its own
  // writes, never the shard's: its counter says so.
  const fed = a.variant === "upsert-feedback"
    ? `<span title="without the feedback rule it never reads the shard back: it feeds its own writes into its state, as if they were the shard's">fed back its own <b>${c.fedBack}</b> emissions (not the shard)</span>`
    : `<span title="updates read back from the shard into state">fed back <b>${c.fedBack}</b></span>`;
  const counts = `<span title="updates the operator emitted to its sink">emitted <b>${c.emitted}</b></span> · <span title="stashed upserts dropped because a peer had already written their time">discarded <b>${c.stashDiscarded}</b></span> · ${fed} · <span title="emissions at the input frontier before the shard caught up (provisional values)">partial <b>${c.partialEmissions}</b></span> · <span title="sink writes that lost to another replica (UpperMismatch)">lost races <b>${c.sinkMismatches}</b></span> · <span title="times the replica ran each of its dataflow operators once (one step of its timely worker, the engine that runs the dataflow: worker.step())">worker steps <b data-testid="worker-steps">${r.worker_steps}</b></span>`;
  const gen = `<span title="which start of the replica this is: 0 its first; each restart adds 1 and rehydrates its state from the shard">generation ${r.generation}</span>`;
  return `<div class="up-replica" data-actor="${esc(a.id)}">${head} ${gen}${op?.hydrating ? ` <span class="state s-starting">rehydrating</span>` : ""}${r.halted ? ` <span class="err small">${esc(r.halted)}</span>` : ""}` +
    `<div class="small">${frontiers}</div>${snap ? sinkBehindNote(a, r, snap, replicas) : ""}${note ? trailNote(a, r) : ""}<div class="small" data-testid="upsert-counters">${r.generation > 0 ? `<span class="muted" data-testid="upsert-generation-counts" title="a restart starts a new replica: its counters start at 0">generation ${r.generation} only, counted from 0 at its restart (the counts of earlier generations went with their process); it resumed at the shard's upper ${fmtT(r.resume_upper)}, and its first ${"fed back"} updates rebuilt its state from the shard:</span> ` : ""}${counts}</div>${emittedLine(r.last_emitted)}${stateTable(op, walk?.replica === a.id ? walk.cell : null, keys, !walk && done?.replica === a.id ? done.value : null)}</div>`;
}

/** The updates the operator last handed to its sink, each with its sign: the effect of an upsert. */
function emittedLine(e) {
  if (!e) return `<div class="small muted" data-testid="upsert-emitted">emitted nothing yet</div>`;
  const rows = e.shown.map((u) => `<span class="mono ${u.startsWith("-") ? "retract" : "add"}">${esc(shown(u.replace(/^-/, "−")))}</span>`).join(", ");
  const total = e.adds + e.retractions;
  const more = total > e.shown.length ? ` and ${total - e.shown.length} more` : "";
  return `<div class="small" data-testid="upsert-emitted" title="the updates the operator last handed to its sink: +1 adds a row to the shard, −1 retracts one">last emitted: ${rows}${more}</div>`;
}

/** Whether the reader opened the done line's "what the next press does" (kept across redraws). */
let openNext = false;

export function renderUpsert(el, snap, prev) {
  const replicas = snap.actors.filter((a) => a.spec.kind === "replica");
  if (!el.__wired) {
    el.__wired = true;
    el.addEventListener("toggle", (ev) => {
      if (ev.target.classList?.contains("walk-next")) openNext = ev.target.open;
    }, true);
  }
  if (!snap.upsert) {
    setHtml(el, `<p class="empty">No replicas yet. Add one with + Replica (u), then push upserts or turn the generator on (g).</p>`);
    return;
  }
  const u = snap.upsert;
  const recent = u.recent
    .slice()
    .reverse()
    .map((m) => `<li><span class="mono">#${m.offset} t${m.ts}</span> key ${m.key} → ${esc(shown(m.value ?? "⌫ delete"))}${purposeNote(m.value)}</li>`)
    .join("");
  const check = checkerLine(snap);
  const keys = keysByHash(replicas);
  // Said where the learner first meets it (a replica that has read nothing back yet, its
  // persist upper 0 beside a later "emitted up to"); later the persist upper's title says it.
  const trailAt = replicas.findIndex((a) => a.detail?.kind === "replica" && a.detail.counters?.fedBack === 0 && a.detail.operator?.persist_upper < a.detail.output_frontier);
  setHtml(
    el,
    `<p class="small" data-testid="upsert-source">source: ${u.sourceMessages} message${u.sourceMessages === 1 ? "" : "s"}, ${u.queued} queued, frontier ${u.sourceUpper}, generator ${u.generating ? "on" : "off"}${generatorNote(u)}${u.sourceMessages ? `. Messages are numbered #1, #2, ... by offset, their order in the source; t is the time of each` : ""}</p>` +
      undecodableLine(u) +
      check +
      (u.walk ? walkLine(u.walk, replicas, snap) : doneLine(u.walkDone, replicas)) +
      diagram(snap, replicas, prev) +
      replicas.map((a, i) => replicaCard(a, u.walk, keys, i === trailAt, u.walkDone, snap, replicas)).join("") +
      `<details><summary class="small">recent source messages</summary><ul class="cells">${recent || `<li class="empty">none</li>`}</ul></details>`,
  );
}

/**
 * The values the generator made undecodable on purpose: how many so far and the latest, marked,
 * in view (not only in the folded list of recent messages, which the latest soon leaves).
 */
function undecodableLine(u) {
  const n = u.undecodableMessages ?? 0;
  if (!n) return u.generating && u.undecodable ? `<p class="small muted" data-testid="upsert-undecodable">no value made undecodable yet</p>` : "";
  const m = u.lastUndecodable;
  const latest = m ? `; the latest: message <span class="mono">#${m.offset} t${m.ts}</span> key ${m.key} → <span class="err">${esc(shown(m.value ?? ""))}</span>` : "";
  return `<p class="small" data-testid="upsert-undecodable">⚠ <b>${n}</b> value${n === 1 ? "" : "s"} made undecodable on purpose by the generator so far${latest}</p>`;
}

/** The generator's undecodable values, said where the source is. */
function generatorNote(u) {
  if (!u.generating) return u.undecodable ? "" : " (no undecodable values)";
  return u.undecodable
    ? ` <span class="muted">(about 1 in 20 of its values is undecodable on purpose, to show an error travelling through the pipeline: untick “undecodable values” (Upserts, in free play) to make none)</span>`
    : " (no undecodable values)";
}

/**
 * The shard against the reference model, counted once: the Check panel's `upsert-model` rule
 * (uppers of the output shard at which its contents differ from the model, of the uppers
 * checked). Below it, the latest difference the replicas' own checker saw, as rows.
 */
function checkerLine(snap) {
  const rule = snap.check?.rules?.find((r) => r.rule === "upsert-model");
  const checker = snap.upsert.checker;
  let verdict;
  if (!rule || rule.checks === 0) verdict = `<span class="muted">not compared with the reference model yet (no upper reached)</span>`;
  else if (rule.violations === 0) verdict = `<b class="ok">matches the reference model</b> ${rule.checks === 1 ? "at the 1 upper checked" : `at all ${rule.checks} uppers checked`}`;
  else verdict = `<b class="err">differs from the reference model at ${rule.violations} of ${rule.checks} upper${rule.checks === 1 ? "" : "s"} checked</b>`;
  const last = checker.violations.at(-1);
  const diff = last ? `<br><span data-testid="upsert-diff">latest difference: ${renderDifference(last)}</span>` : "";
  return `<p class="small" data-testid="upsert-checker">shard ${esc(snap.upsert.shard)} (the Check panel's <code>upsert-model</code>, counting uppers): ${verdict}${diff}</p>`;
}

/** A checker's difference ("at upper U: the shard holds [..], the model [..]") as rows. */
export function renderDifference(text) {
  const m = /^at upper (\d+): the shard holds (\[.*\]), the model (\[.*\])$/s.exec(text);
  let shard, model;
  try {
    [shard, model] = m ? [JSON.parse(m[2]), JSON.parse(m[3])] : [];
  } catch {
    shard = undefined;
  }
  if (!Array.isArray(shard) || !Array.isArray(model)) return esc(text);
  const extra = shard.filter((r) => !model.includes(r));
  const missing = model.filter((r) => !shard.includes(r));
  const rows = (list) => list.slice(0, 4).map((r) => `<span class="mono">${esc(r.replace(/x(-?\d+)$/, " ×$1"))}</span>`).join(", ") + (list.length > 4 ? ` and ${list.length - 4} more` : "");
  const parts = [];
  if (extra.length) parts.push(`the shard holds ${extra.length} row${extra.length === 1 ? "" : "s"} the model does not (${rows(extra)})`);
  if (missing.length) parts.push(`it lacks ${missing.length} the model has (${rows(missing)})`);
  return `at upper ${m[1]}, ${parts.join("; ") || "the same rows with other counts"}`;
}

const STAGES = ["source", "stash", "partial emission", "sink", "shard", "feedback read", "state"];

/** The stage-by-stage walk of Step replicas (j), while one runs: the stages done and the next. */
function walkLine(walk, replicas, snap) {
  if (!walk) return "";
  // The other running replicas are held (a crashed one waits for nothing).
  const held = replicas.filter((a) => a.state === "running").map((a) => a.id).filter((id) => id !== walk.replica);
  const waiting = held.length ? ` ${held.join(", ")} ${held.length === 1 ? "waits" : "wait"} until the walk ends.` : "";
  const at = STAGES.indexOf(walk.nextName);
  const stages = STAGES.map((s, i) => `<span class="${i < at ? "done" : i === at ? "next" : "muted"}">${i < at ? "✓ " : i === at ? "▸ " : ""}${esc(s)}</span>`).join(" → ");
  const whose = walk.byHand ? "your push" : "the newest message (no push of yours was waiting)";
  const what = walk.key !== null ? `${whose}, key ${walk.key} = ${rowValue(walk.value)} at t${walk.ts},` : whose;
  // The messages the replica has not read up to that time go through the stages with it.
  const along = walk.along.length
    ? ` <span class="walk-note" data-testid="upsert-walk-along">With it go ${walk.along.length} message${walk.along.length === 1 ? "" : "s"} ${esc(walk.replica)} had not read, queued before it: ${walk.along.slice(0, 6).map((a) => `${esc(rowWords(a.text))} (${a.byHand ? "your earlier push" : "the generator's"})`).join(", ")}${walk.along.length > 6 ? ` and ${walk.along.length - 6} more` : ""}.</span>`
    : "";
  const overtaken = walk.overtakenBy != null
    ? ` <span class="walk-note">Message #${walk.overtakenBy} has key ${esc(walk.key)} at the same time and a later offset: the upsert keeps it, so the state ends with its value.</span>`
    : "";
  // After the partial emission the sink wrote an empty range up to the upsert's time: every
  // upper now reads that time, which looks like the end of the road but is not.
  const emptyRange = walk.emptyRange && at >= 3 && at <= 4 && walk.ts !== null
    ? ` <span class="walk-note">The uppers read ${walk.ts} now: to get there the sink wrote an empty range (no updates). An upper ${walk.ts} says every time <i>before</i> ${walk.ts} is complete; the upsert at t${walk.ts} is not in the shard until stage 5.</span>`
    : "";
  // Stage 5 done: the shard holds the upsert, and its upper is past the upsert's time.
  // Its row as the Shard panel's rows line shows it (that panel is far above this one at
  // 1280x800: the seventh learner walk never saw both at once), when it is among the rows shown.
  const row = at >= 5 ? shardRowOf(snap, walk.key) : null;
  const committed = at >= 5 && walk.ts !== null
    ? ` <span class="walk-note" data-testid="upsert-walk-shard">The shard ${esc(snap.upsert.shard)} holds it now: its upper is <b class="mono">${fmtT(shardUpper(snap))}</b>, past t${walk.ts} (the shard box below; the replica's “sink's upper”).${row ? ` Its row there, as the Shard panel lists it: <b class="mono" data-testid="upsert-walk-shard-row">${esc(row)}</b>.` : ""}</span>`
    : "";
  return `<p class="small walk" data-testid="upsert-walk">Step replicas (j) walks ${esc(what)} through ${esc(walk.replica)}: ${stages}.${along}${overtaken}${emptyRange}${committed} <span class="muted">Each press runs the scenario until that stage's write or read completes, so the clock may move by seconds.${esc(waiting)}</span></p>`;
}

/** The walk just finished: what it confirmed, and what the next press does. */
function doneLine(done, replicas) {
  if (!done) return "";
  // The key and the value of one message: the value is what the replica's state holds for the
  // walked key (the engine looks the key's own cell up).
  const value = done.value ? `= ${rowValue(done.value)}` : "(deleted)";
  const whose = done.byHand ? "your push, " : "";
  const over = done.overtakenBy != null
    ? ` (message #${done.overtakenBy}, for the same key at the same time with a later offset, won over ${rowValue(done.pushed)})`
    : "";
  // The other replicas were held while the walk ran: what their steps do now.
  const behind = replicas
    .filter((a) => a.id !== done.replica && a.detail.kind === "replica" && (a.detail.source_unread > 0 || a.detail.operator?.stash?.length > 0 || (done.ts != null && (a.detail.operator?.persist_upper ?? 0) <= done.ts)))
    .map((a) => a.id);
  const others = behind.length
    ? ` ${behind.join(" and ")} ${behind.length === 1 ? "was" : "were"} held during the walk. These presses move ${behind.length === 1 ? "its" : "their"} worker only (the message into the stash, then out as an emission); the sink's write and the read-back need the run to go on (Step or Play). ${esc(done.replica)} has written that time already, so none of ${behind.join(" and ")}'s output for it lands (a write of it loses the race), and ${behind.length === 1 ? "it learns" : "they learn"} the value from the shard.`
    : "";
  // Compact: what the walk confirmed in one line or two; what the next presses do folded away
  // (open, it pushed the replica's card off the window at 1280x800).
  return `<div class="small walk" data-testid="upsert-walk-done"><span class="done">✓ done: ${esc(whose)}key ${esc(done.key ?? "?")} ${esc(value)} at t${esc(done.ts ?? "?")} went through all seven stages${esc(over)}</span>: ${esc(done.replica)}'s state holds it as the shard does, no longer provisional (◌). ` +
    `<details class="walk-next"${openNext ? " open" : ""}><summary class="muted">what the next press does</summary><span class="muted">The walk is over. From now on each press of Step replicas (j) runs one worker step of every replica.${others} To walk another upsert, push it, then press Step replicas.</span></details></div>`;
}
