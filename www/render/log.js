// The Event log panel: the merged event log, newest first, LOG_ROWS rows, each row's detail in
// full (it wraps). Two filters, by actor and by event kind, and a view "around" one event (a
// Check citation the newest rows no longer hold). The page keeps only the newest events
// (state.js); a filter or a citation reads the engine's own bounded log instead, through
// `view.eventsAfter(cursor, limit)` (the wasm `eventsAfter`), so any event the engine still keeps
// (src/playground/log.rs: the newest 20,000) can be shown and marked.
//
// What the learner chose (filters, the event to show around) is view state, kept here; it never
// changes the run.

import { OUTCOMES, colourOf, fmtMs } from "../spec.js";
import { chip, esc, mark, setHtml } from "./dom.js";
import { namedIds } from "./names.js";
import { pressWords } from "./words.js";

/** A count of rows: "1 row", "2 rows". */
const rowsN = (n) => `${n} row${n === "1" ? "" : "s"}`;

/**
 * A write task's words (src/playground/actors/task.rs) as the page says them: its times in the
 * page's format ("upper now 12.0 s", not 12000) and its to_write as a sentence ("to_write: add
 * 1 row, retract 2 rows", not "+1 −2 rows").
 */
export function taskWords(text, t0 = 0) {
  return String(text)
    .replace(/\b(upper now|at upper|the shard is at|expected) (\d+)\b/g, (_, w, v) => `${w} ${fmtMs(Number(v), t0)}`)
    .replace(/to_write \+(\d+) −(\d+) rows/, (_, a, r) => {
      const parts = [a !== "0" ? `add ${rowsN(a)}` : "", r !== "0" ? `retract ${rowsN(r)}` : ""].filter(Boolean);
      return `to_write: ${parts.join(", ") || "nothing"}`;
    });
}

/** Rows the log shows. */
export const LOG_ROWS = 60;
/** How far back a filter or a citation reads the engine's log (its capacity). */
const ENGINE_LOG_EVENTS = 20_000;
/** Events one `eventsAfter` call may return (src/wasm.rs MAX_EVENTS). */
const PAGE_EVENTS = 5_000;
/** Rows shown before and after the event a citation asks for. */
const AROUND = 30;

/** The learner's choices, and what was read from the engine for them. */
const choice = { actor: "", kind: "", around: null, scrollTo: null };
/** Matching events read from the engine for the current filter: `{ key, upTo, rows }`. */
let filtered = null;
/** The window of events around `choice.around`: `{ seq, rows }`. */
let window_ = null;
/** Every kind of event seen so far (the kind filter's options). */
const kinds = new Set();
/** Counts the runs: rows drawn for an older run are never kept (seqs start again at 1). */
let generation = 0;

const matches = (e) => (!choice.actor || e.actor === choice.actor || e.process === choice.actor) && (!choice.kind || e.kind === choice.kind);

/** Sets the actor and kind filters ("" for all); the next draw reads what they match. */
export function setLogFilter({ actor = choice.actor, kind = choice.kind } = {}) {
  choice.actor = actor;
  choice.kind = kind;
  choice.around = null;
  filtered = null;
  window_ = null;
}

/** Shows the events around `seq` (a citation) unless they are already shown; marks it by scrolling. */
export function revealInLog(seq) {
  choice.scrollTo = seq;
  const shown = document.querySelector(`#log-view li[data-seq="${seq}"]`);
  if (shown) {
    shown.scrollIntoView({ block: "nearest" });
    choice.scrollTo = null;
    return;
  }
  choice.around = seq;
  window_ = null;
}

/** Back to the newest events (leaves the view around a citation). */
export function showNewest() {
  choice.around = null;
  window_ = null;
}

/** Forgets every choice (a new run replaced the old one). */
export function resetLog() {
  setLogFilter({ actor: "", kind: "" });
  choice.scrollTo = null;
  kinds.clear();
  generation += 1;
}

/** Reads the engine's log from `from` (exclusive) up to `upTo`, keeping what `keep` accepts. */
function scan(eventsAfter, from, upTo, keep) {
  const out = [];
  let cursor = from;
  for (let guard = 0; guard < ENGINE_LOG_EVENTS / PAGE_EVENTS + 1 && cursor < upTo; guard++) {
    const batch = eventsAfter(cursor, PAGE_EVENTS);
    if (!batch.length) break;
    for (const e of batch) {
      if (e.seq > upTo) break;
      kinds.add(e.kind);
      if (keep(e)) out.push(e);
    }
    cursor = batch.at(-1).seq;
    if (batch.length < PAGE_EVENTS) break;
  }
  return out;
}

/** The events to show, oldest first, and a note on what they are (or "" for the newest). */
function rowsToShow(events, snap, eventsAfter) {
  const upTo = snap.lastSeq;
  if (choice.around !== null && eventsAfter) {
    if (!window_ || window_.seq !== choice.around) {
      const from = Math.max(0, choice.around - AROUND - 1);
      window_ = { seq: choice.around, rows: scan(eventsAfter, from, Math.min(upTo, choice.around + AROUND), () => true) };
    }
    const gone = !window_.rows.some((e) => e.seq === choice.around);
    return {
      rows: window_.rows,
      note: gone
        ? `event #${choice.around} is no longer in the engine's log (it keeps the newest ${ENGINE_LOG_EVENTS.toLocaleString("en")})`
        : `events around #${choice.around}, which the newest rows no longer hold`,
    };
  }
  if (!choice.actor && !choice.kind) return { rows: events.slice(-LOG_ROWS), note: "" };
  const key = `${choice.actor}\u0000${choice.kind}`;
  if (eventsAfter && (!filtered || filtered.key !== key || filtered.upTo > upTo)) {
    filtered = { key, upTo, rows: scan(eventsAfter, Math.max(0, upTo - ENGINE_LOG_EVENTS), upTo, matches).slice(-LOG_ROWS) };
  } else if (filtered && filtered.upTo < upTo) {
    const fresh = events.filter((e) => e.seq > filtered.upTo && e.seq <= upTo && matches(e));
    filtered = { key, upTo, rows: [...filtered.rows, ...fresh].slice(-LOG_ROWS) };
  }
  const rows = filtered?.rows ?? events.filter(matches).slice(-LOG_ROWS);
  return { rows, note: `${rows.length === 1 ? "the newest event" : `${rows.length} newest events`}${choice.actor ? ` of ${choice.actor}` : ""}${choice.kind ? ` of kind ${choice.kind}` : ""}` };
}

/** A replica's operator words (src/playground/actors/replica.rs) in a learner's. */
function upsertWords(d) {
  // "stashed 1 source update at 510": what "at" means (the messages' time) and why they wait.
  const stashed = /^((?:generation \d+: )?)stashed (\d+) source updates? at (\d+)$/.exec(d);
  if (stashed) {
    const [, gen, n, t] = stashed;
    const one = n === "1";
    return one
      ? `${gen}stashed 1 source message (t${t}): it waits for the shard's state at t${t} before its update goes out`
      : `${gen}stashed ${n} source messages (times from t${t}): each waits for the shard's state at its time before its update goes out`;
  }
  const mid = /^drain skipped: the feedback is mid-timestamp at (\d+)$/.exec(d);
  if (mid) return `held its stash back (if any): the feedback it has seen stops partway through time ${mid[1]} (its persist frontier, as the operator sees it, is not past ${mid[1]} yet), so some keys may hold only part of that time's updates; what is stashed drains once the frontier moves on`;
  const folded = /^folded 0 feedback updates into state; persist upper (.*)$/.exec(d);
  if (folded) return `no new feedback to fold into state; the operator's persist frontier moved to ${folded[1]} (the shard is read back up to it, no rows changed)`;
  // The persist source hands the operator updates and a frontier at once; timely shows the
  // operator the new frontier a worker step after the updates, so its upper here may trail the
  // "fed back" event's by one step (2320 here, 2321 there).
  const some = /^folded (.*) into state; persist upper (.*)$/.exec(d);
  if (some) return `folded ${some[1]} into state; the operator's persist frontier is ${some[2]} so far (a frontier fed back with the updates reaches it a worker step later)`;
  const fed = /^fed back (.*); persist input upper (.*)$/.exec(d);
  if (fed) return `fed back ${fed[1]} from the shard into the operator's persist input, with the read-back frontier ${fed[2]}`;
  return d;
}

/**
 * Persist's reasons for a command with nothing to commit come as the names its code gives them
 * ("Upper(shard [250], writer [0])", "SpineBackpressure"): each as a sentence. `cmd` is the
 * command (a bare true or false is add_rollup's answer). `null`: a reason not known here.
 */
function skipReason(cmd, why) {
  const upper = /^Upper\(shard \[(\d*)\], writer \[(\d*)\]\)$/.exec(why);
  if (upper) {
    const [, shard, own] = upper;
    if (!shard) return "the shard is finished: nothing is appended any more";
    const moved = own === shard
      ? "this writer's own last write took it there"
      : own === "0"
        ? "another writer moved it (this one has written nothing yet)"
        : `another writer moved it on from ${own}, where this one's last write ended`;
    return `the shard's upper is already ${shard}, not where this batch starts; ${moved}`;
  }
  const inner = /^(?:InvalidUsage|Inconsistent)\((.*)\)$/s.exec(why);
  if (inner) return inner[1];
  if (why === "true" || why === "false") {
    if (cmd === "add_rollup") {
      return why === "true"
        ? "this rollup is listed already (an earlier attempt added it)"
        : "refused: a rollup is listed at this seqno already, or a newer one is the oldest kept";
    }
    return "no rollup to add or unlist";
  }
  return SKIPPED[why] ?? null;
}

const SKIPPED = {
  AlreadyCommitted: "this write had committed already (a retry after its first attempt landed)",
  SpineBackpressure: "too many batches wait for compaction: the write waits for a merge, then retries",
  InlineBackpressure: "the state holds too much inline data: the batch goes to Blob, then retries",
  WriterExpired: "the writer's lease had expired: it is no longer registered",
  ReaderExpired: "the reader's lease had expired: it is no longer registered",
  NotAppliedNoMatch: "the batches it merged are no longer in the state as they were (another merge replaced them, or an append carried this one)",
  NotAppliedInvalidSince: "the merge's since is past the shard's",
  NotAppliedTooManyUpdates: "the merge's output has more updates than its inputs",
  NotAppliedStale: "the merge is older than the oldest rollup kept (its parts may have been swept)",
  tombstone: "the shard is finished (a tombstone): nothing changes any more",
  "()": "nothing changed",
};

/**
 * An event's detail as the log shows it: persist's coded reasons (above) as sentences, in a
 * command's "nothing to commit (…)" and a merge that was not applied.
 */
/**
 * An oracle's burst in words (src/playground/actors/oracle.rs logs its first and its last
 * timestamp): "write ts 5765 (burst 5266 to 5765)" as "write ts 5765 (the last of a burst, 500
 * taken in one tick: 5266 to 5765)".
 */
export function burstWords(text) {
  return String(text).replace(/^write ts (\d+) \(burst (\d+) to (\d+)\)/, (all, ts, first, last) => {
    const which = ts === first ? "the first" : ts === last ? "the last" : null;
    const n = Number(last) - Number(first) + 1;
    return which && n > 1 ? `write ts ${ts} (${which} of a burst, ${n} taken in one tick: ${first} to ${last})` : all;
  });
}

const BURST_TITLE = "a burst: the write timestamps an oracle takes back to back in one tick (the oracle burst field; 1 takes one a tick). The log keeps the first and the last of each.";

export function plainDetail(e, t0 = 0) {
  // A handle is its actor's (the row's chip names it), or named in words (names.js).
  let d = namedIds(String(e.detail ?? "").replace(/ \(handle id [wr][0-9a-f]{24}\)/, ""));
  if (e.component === "task") d = taskWords(d, t0);
  if (e.component === "upsert") d = upsertWords(d);
  if (e.component === "oracle") d = burstWords(d);
  if (e.component === "oracle") d = d.replace("the two persist intervals allowed", "the two persist intervals allowed (a persist interval is the span of timestamps one durable write covers: a starting instance waits while the stored upper is more than two of them ahead of the clock)");
  if (e.component !== "persist") return d;
  const skip = /^(.*?: (\w+) expected seqno .*?): nothing to commit \((.*)\)$/s.exec(d);
  if (skip) {
    const why = skipReason(skip[2], skip[3]);
    return why === null ? d : `${skip[1]}: nothing to commit — ${why}`;
  }
  const merge = /^([^:]+): (NotApplied\w+)$/.exec(d);
  if (merge && SKIPPED[merge[2]]) return `${merge[1]}: merge not applied — ${SKIPPED[merge[2]]}`;
  return d;
}

function logRow(e, snap, t0) {
  const who = e.actor ? chip(e.actor, colourOf(snap, e.actor)) : e.process ? `<span class="muted">${esc(e.process)}</span>` : "";
  const detail = pressWords(plainDetail(e, t0));
  const title = / of a burst, /.test(detail) ? ` title="${esc(BURST_TITLE)}"` : "";
  return `<li data-seq="${e.seq}"><span class="seq mono">${e.seq}</span><span class="mono t">${esc(fmtMs(e.atMs, t0))}</span>${mark(e.outcome, OUTCOMES)}${who}<span class="comp">${esc(e.component)}</span> <span class="detail"${title}>${esc(detail)}</span></li>`;
}

/** Keeps a filter <select>'s options equal to `values` (after its first, "all" option). */
function syncOptions(select, values) {
  if (!select) return;
  const want = values.join("\u0000");
  if (select.__values === want) return;
  select.__values = want;
  const chosen = select.value;
  while (select.options.length > 1) select.remove(1);
  for (const v of values) select.add(new Option(v, v));
  select.value = values.includes(chosen) ? chosen : "";
}

/**
 * Draws the log into `dom.log` (and its filters, `dom.logActor`, `dom.logKind`, `dom.logNote`):
 * while it shows the newest events unfiltered and only grows, the new rows go on top and the
 * oldest come off; anything else draws it again.
 */
export function renderLog(dom, events, snap, t0, eventsAfter = null) {
  for (const e of events.slice(-LOG_ROWS)) kinds.add(e.kind);
  syncOptions(dom.logActor, [...snap.actors.map((a) => a.id), ...snap.processes.map((p) => p.id)]);
  syncOptions(dom.logKind, [...kinds].sort());
  const { rows, note } = rowsToShow(events, snap, eventsAfter);
  if (dom.logNote) {
    setHtml(dom.logNote, note ? `${esc(note)}${choice.around !== null ? ` <button type="button" data-log-action="newest">show the newest</button>` : ""}` : "");
    dom.logNote.hidden = !note;
  }
  const el = dom.log;
  const ol = el.firstElementChild;
  const incremental = !note && rows.length && ol?.tagName === "OL" && ol.firstElementChild?.dataset.seq && ol.dataset.view === "newest" && ol.dataset.gen === String(generation);
  if (!incremental) {
    const html = rows.slice().reverse().map((e) => logRow(e, snap, t0)).join("");
    setHtml(el, `<ol class="events" data-testid="events" data-view="${note ? "chosen" : "newest"}" data-gen="${generation}">${html || `<li class="empty">nothing ${note ? "matches" : "yet"}</li>`}</ol>`);
  } else {
    const shownNewest = Number(ol.firstElementChild.dataset.seq);
    const at = rows.findIndex((e) => e.seq === shownNewest);
    if (at < 0 && shownNewest >= rows[0].seq) {
      el.__html = null;
      ol.innerHTML = rows.slice().reverse().map((e) => logRow(e, snap, t0)).join("");
    } else {
      const fresh = rows.slice(at + 1);
      if (fresh.length) {
        el.__html = null; // setHtml's cache no longer describes the markup
        ol.insertAdjacentHTML("afterbegin", fresh.reverse().map((e) => logRow(e, snap, t0)).join(""));
        while (ol.children.length > LOG_ROWS) ol.lastElementChild.remove();
      }
    }
  }
  if (choice.scrollTo !== null) {
    const li = el.querySelector(`li[data-seq="${choice.scrollTo}"]`);
    if (li) {
      li.scrollIntoView({ block: "nearest" });
      choice.scrollTo = null;
    }
  }
}
