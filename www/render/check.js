// The "check" panel: what the live check of the history (src/playground/check/) found, from the
// snapshot's `check` section. Per rule, a green line "N checks, no break" or the count of breaks
// in red; below, each violation with links to the events that broke it and to the fault events
// beside it. A click on a violation lists those events here and marks them in the event log view
// (`markCited`, called after the log is drawn).

import { count, esc, setHtml } from "./dom.js";
import { fmtMs } from "../spec.js";
import { plainDetail, revealInLog } from "./log.js";

/** How many violations the panel lists in full (the newest); older ones, up to [`OLDER`], fold
 * into a "more" list the reader opens. Nothing is clipped: the panel grows with what it shows. */
const SHOWN = 4;
const OLDER = 12;

/** The violation the user clicked, and the events it cites (looked up once). */
let focus = null;
/** Whether the reader opened the older breaks. */
let openOlder = false;

function seqLinks(seqs, cls) {
  return seqs.map((s) => `<a href="#" class="seq-link ${cls}" data-seq="${s}">#${s}</a>`).join(" ");
}

/** What one check of a rule is, where a plain "check" would leave the count unexplained. */
const UNITS = { "upsert-model": "upper of the output shard" };

function ruleLine(r) {
  const ok = r.violations === 0;
  const unverified = r.unverified ? ` <span class="muted">(${r.unverified} could not be checked)</span>` : "";
  const unit = UNITS[r.rule] ? ` <span class="muted">(one check per ${UNITS[r.rule]}${ok ? "" : `: it differs at ${r.violations} of ${r.checks}`})</span>` : "";
  const verdict = ok
    ? `<span class="ok">${count(r.checks, "check")}, no break</span>`
    : `<b class="err">${r.violations} break${r.violations === 1 ? "" : "s"}</b> in ${count(r.checks, "check")}`;
  return `<li class="check-rule ${ok ? "ok" : "broken"}" data-testid="check-rule-${esc(r.rule)}" data-checks="${r.checks}" data-violations="${r.violations}">` +
    `<span class="mark">${ok ? "✓" : "✕"}</span> <code>${esc(r.rule)}</code> <span class="title">${esc(r.title)}</span>: ${verdict}${unit}${unverified}</li>`;
}

function violationItem(v, i, t0) {
  const faults = v.faults.length ? ` · faults beside it: ${seqLinks(v.faults, "fault")}` : " · no fault nearby";
  const chosen = focus?.key === `${v.rule}:${v.seqs.join(",")}` ? " chosen" : "";
  return `<li class="violation${chosen}" data-testid="check-violation" data-index="${i}">` +
    `<a href="#" class="focus" data-index="${i}">${esc(fmtMs(v.atMs, t0))} <code>${esc(v.rule)}</code></a> ${esc(v.message)}` +
    ` · events ${seqLinks(v.seqs, "cited")}${faults}</li>`;
}

function evidence(t0) {
  if (!focus) return "";
  const rows = focus.events.map((e) => {
    const cls = focus.seqs.includes(e.seq) ? "cited" : "fault";
    return `<li class="${cls}"><span class="seq mono">#${e.seq}</span> <span class="mono t">${esc(fmtMs(e.atMs, t0))}</span> ` +
      `${esc(e.actor ?? e.process ?? "")} <span class="comp">${esc(e.component)}</span> ${esc(plainDetail(e))}</li>`;
  });
  const missing = focus.missing ? `<li class="muted">${focus.missing === 1 ? "1 event is" : `${focus.missing} events are`} no longer in the log (it keeps the newest 20,000)</li>` : "";
  return `<div class="check-evidence" data-testid="check-evidence"><b>Events of this break</b> (red: cited, amber: faults beside it)<ol class="events">${rows.join("")}${missing}</ol></div>`;
}

/** Draws the panel into `el` from `snap.check`; `state` holds the recent events. */
export function renderCheck(el, snap, state, t0) {
  const c = snap.check;
  if (!c) return;
  if (!el.__wired) {
    el.__wired = true;
    el.addEventListener("click", (ev) => onClick(ev, el, state));
    // The older breaks stay open across redraws once opened.
    el.addEventListener("toggle", (ev) => {
      if (ev.target.classList?.contains("check-older")) openOlder = ev.target.open;
    }, true);
  }
  const checks = c.rules.reduce((n, r) => n + r.checks, 0);
  const summary = c.violationsTotal === 0
    ? `<b class="ok">${count(checks, "check")}, no break</b> over ${count(c.events, "event")}`
    : `<b class="err">${c.violationsTotal} break${c.violationsTotal === 1 ? "" : "s"}</b> found in ${count(checks, "check")} over ${count(c.events, "event")}`;
  const shown = c.violations.slice(-SHOWN).reverse();
  const list = shown.map((v, i) => violationItem(v, c.violations.length - 1 - i, t0)).join("");
  const older = c.violations.slice(-(SHOWN + OLDER), -SHOWN).reverse();
  const olderList = older.map((v, i) => violationItem(v, c.violations.length - 1 - SHOWN - i, t0)).join("");
  const rest = c.violationsTotal - shown.length - older.length;
  const more = !older.length
    ? ""
    : `<details class="check-older"${openOlder ? " open" : ""}><summary class="muted">${older.length} older break${older.length === 1 ? "" : "s"}${rest > 0 ? ` · ${rest} more, older still, are counted in the total but not listed (the page keeps the newest ${SHOWN + OLDER})` : ""}</summary>` +
      `<ol class="check-violations" data-testid="check-violations-older" start="${SHOWN + 1}">${olderList}</ol></details>`;
  const head = c.violationsTotal > shown.length
    ? `<p class="muted small" data-testid="check-shown">${shown.length === 1 ? (c.violationsTotal === 1 ? "the only break" : `the newest of ${c.violationsTotal} breaks`) : `the newest ${shown.length} of ${c.violationsTotal} breaks, newest first`}</p>`
    : "";
  el.__violations = c.violations;
  setHtml(
    el,
    `<p class="check-summary" data-testid="check-summary" data-violations="${c.violationsTotal}">${summary}</p>` +
      `<ul class="check-rules" data-testid="check-rules">${c.rules.map(ruleLine).join("")}</ul>` +
      (list ? `${head}<ol class="check-violations" data-testid="check-violations" tabindex="0" aria-label="Breaks, newest first">${list}</ol>${more}` : "") +
      evidence(t0),
  );
}

function onClick(ev, el, state) {
  const a = ev.target.closest("a");
  if (!a || !el.contains(a)) return;
  ev.preventDefault();
  const li = a.closest("li.violation");
  const v = li ? el.__violations?.[Number(li.dataset.index)] : null;
  if (!v) return;
  const wanted = [...new Set([...v.seqs, ...v.faults])].sort((x, y) => x - y);
  const have = new Map(state.events().map((e) => [e.seq, e]));
  const events = [];
  let missing = 0;
  for (const s of wanted) {
    let e = have.get(s);
    if (!e) {
      // Older than the page's tail: ask the engine (it keeps the newest 20,000).
      try {
        e = globalThis.__playground?.pg?.()?.eventsAfter(s - 1, 1)?.find((x) => x.seq === s);
      } catch {
        e = null;
      }
    }
    if (e) events.push(e);
    else missing += 1;
  }
  focus = { key: `${v.rule}:${v.seqs.join(",")}`, seqs: v.seqs, faults: v.faults, events, missing };
  el.__html = null; // redraw with the evidence
  const target = a.dataset.seq ? Number(a.dataset.seq) : v.seqs[0];
  revealInLog(target); // older than the log's newest rows: it shows the events around it
}

/** Marks, in the event log view `logEl`, the events the chosen violation cites and its faults. */
export function markCited(logEl) {
  if (!focus) return;
  for (const li of logEl.querySelectorAll("li[data-seq]")) {
    const s = Number(li.dataset.seq);
    li.classList.toggle("cited", focus.seqs.includes(s));
    li.classList.toggle("fault-near", focus.faults.includes(s));
  }
}
