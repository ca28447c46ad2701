// The Consensus log, event log, legend, verify and notices panels (Writers and Oracle: writers.js).

import { OUTCOMES, actorColour, colourOf, fmtFrontier, fmtMs } from "../spec.js";
import { chip, count, esc, mark, setHtml } from "./dom.js";
import { namedIds } from "./names.js";
import { errorWords } from "./words.js";

/** What persist's command names mean, for a tooltip where they show ("W2's compaction (merge_res)"). */
const CMD_GLOSS = {
  compare_and_append: "compare_and_append: a write, appending a batch if the shard's upper is still the one the writer expects",
  merge_res: "merge_res: compaction's merge result, swapping the merged batch in for the batches it merged",
  add_rollup: "add_rollup: a rollup, a full copy of the state written to Blob so older versions can go",
  add_and_remove_rollups: "add_and_remove_rollups: garbage collection listing a new rollup and dropping old ones from the state",
  downgrade_since: "downgrade_since: a reader moving its since forward",
  compare_and_downgrade_since: "compare_and_downgrade_since: a reader moving its since forward",
};

/** A title naming the commands `text` mentions, or "" for none. */
function cmdGloss(text) {
  const found = Object.keys(CMD_GLOSS).filter((k) => text.includes(`(${k})`));
  return found.length ? ` title="${esc(found.map((k) => CMD_GLOSS[k]).join("; "))}"` : "";
}

/**
 * A Consensus key that may wrap only after a "/" ("timestamp_oracle/<wbr>epoch_ms"), never
 * mid-word nor after a "_" ("timestamp_/oracle/epoch_/ms" read as four words).
 */
const keyBreaks = (key) => esc(key).replace(/\//g, "/<wbr>");

/** An acknowledged value as the check names it: "W1:w…#2 x3" → "W1's update #2, 3 copies". */

/** A compare_and_set's outcome in a word, beside its mark in the summary. */
const CAS_WORDS = { committed: "won", mismatch: "refused (seqno already taken)", indeterminate: "timed out (unknown at the time)", retrying: "failed, retried", error: "failed" };

/** The Consensus log's marks: its ✕ is a refused compare_and_set, not a lost race. */
const CAS_MARKS = { ...OUTCOMES, mismatch: { ...OUTCOMES.mismatch, label: "refused: the seqno it expected was already taken (the command re-reads the state: a write whose upper another write moved is an UpperMismatch, anything else applies itself again)" } };

/** A version no process's command wrote: the page's own checkers (the upsert checker's reader, the
 * acked-writes check's) read and register on storage directly, outside the processes. */
const UNLOGGED = "the page's own checker (it reads storage directly, outside the processes)";

/** What took a refused attempt's seqno, short: "W1's compaction (merge_res)". */
const takenShort = (c) => (c.takenBy ? c.takenBy.replace(/(: an earlier attempt that timed out.*|, in (this same|another) process)$/, (m) => (m.startsWith(":") ? ", timed out but landed" : "")) : "the page's own checker");

/** A timestamp oracle's key (src/oracle/config.rs KEY_PREFIX), not a shard's. */
const isOracleKey = (key) => key.startsWith("timestamp_oracle/");

/** A refused attempt's line: which version it wanted and what wrote that version first. (Not
 * "lost": the Writers panel's lost is a write that lost a race, an UpperMismatch; a refused
 * compare_and_set is retried, and its write may still win.) */
function takenLine(c) {
  const seqno = (c.expected ?? 0) + 1;
  return `✕ refused: version ${seqno} was already written by ${c.takenBy ?? UNLOGGED}. ${refusedThen(c)}`;
}

/**
 * What a refused attempt's command does next, by what took its seqno. The log does not know
 * which command the attempt was, so a case that depends on it names both: a write whose upper
 * another write moved is an UpperMismatch (the Writers panel's lost), not applied again.
 */
function refusedThen(c) {
  if (isOracleKey(c.key)) {
    return "The seqno moved, so the oracle instance re-reads the record: if it carries a newer epoch, this instance is fenced and stops (one that is still starting bumps its epoch above it and tries again).";
  }
  const by = c.takenBy ?? "";
  if (/timed out but had landed/.test(by)) {
    return "That earlier attempt had landed after all, so the state its command re-reads already holds it (a write with an idempotency token finds its token there and does not write again).";
  }
  if (/\(compare_and_append\)/.test(by)) {
    return "A write moved the upper: a write refused here is an UpperMismatch (the Writers panel's lost) and tries again at the new upper; any other command re-reads the state and applies itself again.";
  }
  if (/\([a-z_]+\)/.test(by)) {
    return "That was no write, so the upper did not move: its command re-reads the state and applies itself again.";
  }
  return "The seqno moved, so its command re-reads the state: a write whose lower the upper has moved past is an UpperMismatch; any other command applies itself again.";
}

/** The summary's word for refused attempts, with what took the seqno: "refused: seqno already taken by W1's compaction ×2, W2's write; retried". */
function refusedWords(attempts) {
  const by = new Map();
  for (const c of attempts) if (c.outcome === "mismatch") by.set(takenShort(c), (by.get(takenShort(c)) ?? 0) + 1);
  const list = [...by].sort((a, b) => b[1] - a[1]).map(([w, n]) => (n > 1 ? `${w} ×${n}` : w));
  // A shard's command applies itself again; an oracle instance re-reads its record (fenced, or
  // a starting one bumps its epoch).
  const lost = attempts.filter((c) => c.outcome === "mismatch");
  const oracle = lost.filter((c) => isOracleKey(c.key)).length;
  // A write's seqno taken by another write is an UpperMismatch, not retried as it was.
  const writes = lost.some((c) => !isOracleKey(c.key) && /\(compare_and_append\)/.test(c.takenBy ?? "") && !/timed out but had landed/.test(c.takenBy ?? ""));
  const shard = oracle === 0 ? (writes ? "retried, or a write's UpperMismatch" : "retried") : null;
  const then = shard ?? (oracle === lost.length ? "re-read" : writes ? "retried, re-read, or a write's UpperMismatch" : "retried or re-read");
  return `refused: seqno already taken by ${list.join(", ")}; ${then}`;
}

export function renderConsensus(el, snap, t0) {
  // What took a seqno names its handle by its actor (names.js), never by a raw id.
  snap = { ...snap, consensus: snap.consensus.map((c) => (c.takenBy ? { ...c, takenBy: namedIds(c.takenBy, snap) } : c)) };
  const rows = snap.consensus
    .slice(-16)
    .reverse()
    .map((c) => {
      const procActor = snap.processes.find((p) => p.id === c.process)?.actors?.[0];
      const colour = procActor ? colourOf(snap, procActor) : "#6b7480";
      return `<tr><td class="mono">${esc(fmtMs(c.atMs, t0))}</td><td>${chip(c.process, colour)}</td>` +
        `<td class="mono key" title="${esc(c.key)}">${keyBreaks(c.key)}</td>` +
        `<td class="mono num">${c.expected ?? "none"} → ${c.newSeqno}</td><td class="mono num">${c.bytes}</td>` +
        `<td>${mark(c.outcome, CAS_MARKS)}</td></tr>` +
        // The error on a wrapped row of its own: the table is as wide as the panel.
        (c.error ? `<tr class="sub"><td colspan="6" class="err small" style="white-space:normal">${esc(errorWords(c.error))}</td></tr>` : "") +
        // A refused attempt says what took its seqno (with one writer: its own process's maintenance).
        (c.outcome === "mismatch" ? `<tr class="sub"><td colspan="6" class="small" style="white-space:normal" data-testid="cas-taken"${cmdGloss(takenLine(c))}>${esc(takenLine(c))}</td></tr>` : "");
    })
    .join("");
  const counts = {};
  for (const c of snap.consensus) counts[c.outcome] = (counts[c.outcome] ?? 0) + 1;
  const summary = Object.entries(counts)
    .map(([o, n]) => `${mark(o, CAS_MARKS)} ${n} ${esc(o === "mismatch" ? refusedWords(snap.consensus) : CAS_WORDS[o] ?? o)}`)
    .join(" &nbsp; ");
  setHtml(
    el,
    `<p class="summary"${cmdGloss(summary)}>last ${snap.consensus.length}: ${summary || "none yet"}</p>` +
      `<table class="grid"><thead><tr><th title="when the call returned to its process, not when the store applied it: a call takes a few ms, and a timed-out one returns only when its timeout fires, so a row can sit above a write it raced and lost to">returned</th><th>process</th><th>key</th><th title="the seqno it expected at the head → the one it wrote">seqno</th><th>bytes</th><th>won?</th></tr></thead><tbody>${rows || `<tr><td colspan="6" class="empty">No compare_and_set yet.</td></tr>`}</tbody></table>`,
  );
}

export function renderLegend(el, snap) {
  // ✕ is a write's lost race, and in the Consensus log a refused compare_and_set: said apart.
  const label = (k, v) => (k === "mismatch" ? "lost the race (UpperMismatch); in the Consensus log: refused, seqno already taken" : v.label);
  const marks = Object.entries(OUTCOMES)
    .map(([k, v]) => `<span class="legend-item">${mark(k, OUTCOMES)} ${esc(label(k, v))}</span>`)
    .join("");
  const actors = snap.actors.map((a) => chip(a.id, actorColour(a.colour))).join(" ");
  setHtml(
    el,
    `<div class="legend-row"><b>Marks</b> ${marks}</div><div class="legend-row"><b>Actors</b> ${actors || "none"} <span class="muted">one colour each, on every panel</span>` +
      ` &nbsp; <b>Lines</b> <span class="legend-item"><svg width="26" height="8"><line x1="0" x2="26" y1="4" y2="4" class="upper"/></svg> upper</span>` +
      `<span class="legend-item"><svg width="26" height="8"><line x1="0" x2="26" y1="4" y2="4" class="since"/></svg> since</span></div>`,
  );
}

/** 1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st. */
export function ordinal(n) {
  const tens = n % 100;
  const suffix = tens >= 11 && tens <= 13 ? "th" : ["th", "st", "nd", "rd"][n % 10] ?? "th";
  return `${n}${suffix}`;
}

export function renderVerify(el, snap, t0) {
  const v = snap.verify;
  if (!v) {
    setHtml(el, `<p class="verify muted">Check acked writes (v) reads the shard and looks for every write a writer was told had committed.</p>`);
    return;
  }
  if (v.error) {
    setHtml(el, `<p class="verify err">Check at ${esc(fmtMs(v.atMs, t0))}: ${esc(v.error)}</p>`);
    return;
  }
  // Each writer's figures are of the moment the check read the shard (seqno N): the updates
  // acknowledged by then, and the writes that carried them, which is the Writers row's "won"
  // then. A writer that won more since says so, so the two counts never stand unexplained.
  const per = v.writers.map((w) => {
    const now = snap.actors.find((a) => a.id === w.actor)?.detail;
    const since = now?.kind === "writer" ? now.committed - w.writes : 0;
    const later = since > 0 ? `; ${since} more won since, not checked` : "";
    // The row counts its current process's writes: updates acknowledged before a restart are
    // told apart, so the writes and the updates they carried add up.
    const won = `its ${count(w.writes, "won write")}`;
    const from = w.earlier
      ? `${w.earlier} acknowledged before its process restarted, ${w.acked - w.earlier} from ${won} since`
      : `from ${won}`;
    return `<span data-verify-writer="${esc(w.actor)}" data-writes="${w.writes}" data-acked="${w.acked}">${esc(w.actor)}: ${w.found} of ${count(w.acked, "acknowledged update")} found, ${from}${later}</span>`;
  }).join("; ");
  // A value is "actor:writer_id#n", the n-th update of that write handle: named by its actor
  // and n as an ordinal ("W1's 2nd update", not the unexplained "update no. 2"), its copies
  // said in words (the handle id is on the actor's process row); a hover says how updates are
  // numbered.
  const ex = (list) => list.map((x) => {
    const m = /^([^:]+):[^#]*#(\d+)(?: x(\d+))?$/.exec(x);
    return m ? `${m[1]}'s ${ordinal(Number(m[2]))} update${m[3] ? ` (${m[3]} copies)` : ""}` : x;
  }).join(", ");
  const EX_TITLE = "each update a writer writes is unique: it carries its writer and a count, so “W1's 2nd update” is the second update W1's current write handle wrote; its copies are how many times the shard holds it";
  const examples = (list) => `<span class="examples" title="${esc(EX_TITLE)}">e.g. ${esc(ex(list))}</span>`;
  const verdict = v.lost === 0
    ? `<b class="ok">no acknowledged write lost</b>`
    : `<b class="err">${count(v.lost, "acknowledged update")} missing</b> (${examples(v.lostExamples)})`;
  // Each write's values are unique: a value held more than once is a write that landed more than once.
  const twice = v.duplicated > 0
    ? `; <b class="err">${count(v.duplicated, "acknowledged update")} held more than once</b> (${examples(v.duplicatedExamples)})`
    : "";
  const appendNote = v.uncheckedAppendWriters.length
    ? ` · not checked: ${esc(v.uncheckedAppendWriters.join(", "))} (append trims what a peer already wrote, by design)`
    : "";
  const moment = v.seqno === null || v.seqno === undefined
    ? `Check at ${esc(fmtMs(v.atMs, t0))}`
    : `Check as of seqno ${v.seqno} (${esc(fmtMs(v.atMs, t0))})`;
  setHtml(
    el,
    `<p class="verify" data-testid="verify-line" data-seqno="${v.seqno ?? ""}" data-lost="${v.lost}" data-duplicated="${v.duplicated}" data-acked="${v.acked}" data-foreign="${v.foreignRows}">${moment}: ${verdict}${twice}: ${count(v.acked, "acknowledged update")} checked against ${count(v.rows, "row")} of ${esc(v.shard)} at ${esc(fmtFrontier(v.asOf, t0))}` +
      ` (${per || "no writers"})${v.foreignRows ? `; ${count(v.foreignRows, "row")} written by writers this page does not know (another tab's, sharing its store), not checked` : ""}${appendNote}.</p>`,
  );
}

export function renderNotices(el, snap, t0) {
  const items = snap.notices
    .slice(-3)
    .reverse()
    .map((n) => `<li class="${n.error ? "err" : ""}"><span class="mono">${esc(fmtMs(n.atMs, t0))}</span> ${esc(n.text)}</li>`)
    .join("");
  setHtml(el, items);
}
