// The processes panel: each process with its actors and their controls. The markup changes only
// when processes, actors or their states change, so buttons and inputs stay put while it runs.
// Buttons carry data-action attributes; controls.js handles them (it never draws).

import { actorColour } from "../spec.js";
import { chip, esc, setHtml } from "./dom.js";
import { variantBadge } from "./rules.js";
import { shortId } from "./names.js";

function actorControls(a) {
  const s = a.spec;
  const id = esc(a.id);
  const remove = `<button data-action="remove" data-actor="${id}" title="Remove ${id}">×</button>`;
  if (a.state === "crashed") return "";
  if (s.kind === "writer") {
    return `<label class="inline">rate/s <input data-field="rate" data-actor="${id}" value="${s.ratePerS}" size="4"></label>` +
      `<button data-action="set-rate" data-actor="${id}">set</button>${remove}`;
  }
  if (s.kind === "reader") {
    const label = s.hold ? "Release since" : "Hold since";
    return `<button data-action="hold" data-actor="${id}" data-hold="${s.hold ? "false" : "true"}">${label}</button>${remove}`;
  }
  if (s.kind === "task") {
    return `<button data-action="push" data-actor="${id}" data-rows="1">+1 row</button>` +
      `<button data-action="push" data-actor="${id}" data-rows="10">+10</button>` +
      `<button data-action="delete-row" data-actor="${id}">−1 row</button>` +
      `<label class="inline"><input type="checkbox" data-action="read-only" data-actor="${id}"${s.readOnly ? " checked" : ""}> read-only</label>` +
      `<label class="inline">tick ms <input data-field="tick" data-actor="${id}" value="${s.tickIntervalMs}" size="5"></label>` +
      `<button data-action="set-tick" data-actor="${id}">set</button>${remove}`;
  }
  return remove;
}

function describe(a, snap) {
  const s = a.spec;
  if (s.kind === "writer") return `writer on ${s.shard}, keys ${s.keyLo}–${s.keyHi - 1}, ${s.mode === "append" ? "append" : "compare_and_append"}`;
  if (s.kind === "reader") return `reader on ${s.shard}${s.hold ? ", holding its since" : ""}`;
  if (s.kind === "task") return `write task on ${s.shard}${s.readOnly ? ", read-only" : ""}`;
  if (s.kind === "replica") return `upsert replica on ${snap.upsert?.shard ?? "the upsert shard"}, ${s.readBatch} message${s.readBatch === 1 ? "" : "s"} per step`;
  return `oracle instance on ${s.timeline}, window ${s.persistIntervalMs} ms${s.burst > 1 ? `, ${s.burst} timestamps a tick` : ""}`;
}

/**
 * A process's state, with its actors' where they differ: a process hosts actors, and one of them
 * can stop on an error while the process (and its other actors) runs on, so a running process
 * says how many of its actors failed ("running · 1 actor failed").
 */
export function processState(p, byId) {
  if (!p.alive) return `<span class="pstate" data-testid="process-state">crashed</span>`;
  const failed = p.actors.filter((id) => byId.get(id)?.state === "failed").length;
  const note = failed
    ? ` · <span class="state s-failed" title="the process runs on; ${failed === 1 ? "one of its actors" : `${failed} of its actors`} stopped on an error (see ${failed === 1 ? "its" : "their"} row)">${failed} actor${failed === 1 ? "" : "s"} failed</span>`
    : "";
  return `<span class="pstate" data-testid="process-state">running${note}</span>`;
}

export function renderProcesses(el, snap, rules) {
  if (!snap.processes.length) {
    setHtml(el, `<p class="empty">No processes yet: add an actor.</p>`);
    return;
  }
  const byId = new Map(snap.actors.map((a) => [a.id, a]));
  const cards = snap.processes.map((p) => {
    const pid = esc(p.id);
    if (!p.alive && p.restartedAs) {
      return `<div class="proc gone" data-process="${pid}"><b>${pid}</b> crashed, restarted as ${esc(p.restartedAs)}</div>`;
    }
    const button = p.alive
      ? `<button data-action="crash" data-process="${pid}" class="danger" title="Crash ${pid}">Crash</button>`
      : `<button data-action="restart" data-process="${pid}" title="Restart ${pid}">Restart</button>`;
    const origin = p.restartOf ? ` <span class="muted">(restart of ${esc(p.restartOf)})</span>` : "";
    const actors = p.actors
      .map((id) => byId.get(id))
      .filter(Boolean)
      .map((a) => {
        const state = a.state === "running" ? "" : ` <span class="state s-${a.state}">${esc(a.state)}</span>`;
        // An oracle's "handle" is its epoch; a persist handle is named by its actor, its id on hover.
        const oracle = a.spec.kind === "oracle";
        const handle = a.handleId && oracle ? ` <span class="muted small handle">${esc(a.handleId.replace(/^oracle /, ""))}</span>` : "";
        const title = a.handleId && !oracle ? ` title="its persist ${a.handleId[0] === "w" ? "writer" : "reader"} handle, id ${esc(shortId(a.handleId))}, registered in the shard's state; a restarted process gets a new one"` : "";
        return `<li data-actor="${esc(a.id)}">${chip(a.id, actorColour(a.colour))} <span class="desc"${title}>${esc(describe(a, snap))}</span>${handle}${variantBadge(a, rules)}${state}<span class="actor-ctl">${actorControls(a)}</span></li>`;
      })
      .join("");
    return `<div class="proc ${p.alive ? "alive" : "crashed"}" data-process="${pid}"><div class="proc-head"><b>${pid}</b> ${processState(p, byId)}${origin} <span class="muted mono seed" title="the seed of its persist ids (handle ids, Blob keys)">seed ${esc(p.seed)}</span> ${button}</div><ul>${actors || `<li class="empty">no actors</li>`}</ul></div>`;
  });
  setHtml(el, cards.join(""));
}
