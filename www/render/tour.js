// The guided tours' DOM: the picker a newcomer sees first, the narration card of a tour step,
// and the highlight of the panels and actors a step points at (a generated style sheet, so
// highlights survive the panels' redraws). www/tours/controller.js decides what to show.

import { actorColour, fmtMs } from "../spec.js";
import { chip, esc, setHtml } from "./dom.js";
import { fillNarration, tourSearch } from "../tours/engine.js";

/** Narration markup: **bold**, `code` and [text](?query) links (same-page links only). */
export function narrationHtml(text) {
  return esc(text)
    .replace(/\*\*([^*]+)\*\*/g, "<b>$1</b>")
    .replace(/`([^`]+)`/g, "<code>$1</code>")
    .replace(/\[([^\]]+)\]\((\?[^)\s]*)\)/g, (_, label, href) => `<a href="${href}">${label}</a>`);
}

/** Where the picker remembers that the learner folded it away. */
export const PICKER_KEY = "persist-playground:tour-picker";

export function renderPicker(el, tours, shown) {
  el.hidden = !shown;
  if (!shown) return;
  let folded = false;
  try {
    folded = localStorage.getItem(PICKER_KEY) === "folded";
  } catch {
    // storage unavailable: start unfolded
  }
  const item = (t, i) => `<li><a href="${esc(tourSearch(t, 1))}" data-tour="${esc(t.id)}" title="${esc(t.blurb ?? "")}"><span class="n">${i + 1}</span> ${esc(t.title.replace(/^broken rule: /, ""))}</a></li>`;
  const learn = tours.filter((t) => t.group !== "rules");
  const rules = tours.filter((t) => t.group === "rules");
  const row = (label, list, from) => (list.length ? `<div class="tour-row"><span class="tour-row-label">${label}</span><ol class="tour-list" start="${from + 1}">${list.map((t, i) => item(t, from + i)).join("")}</ol></div>` : "");
  setHtml(
    el,
    `<details${folded ? "" : " open"}><summary><b>New here? Take a guided tour</b> <span class="muted">a scripted run of the real components, step by step with narration: leave it at any step and play on. Or just play with the run below.</span></summary>` +
      `<div data-testid="tour-list">${row("Learn", learn, 0)}${row("Break a rule", rules, learn.length)}</div></details>`,
  );
}

/**
 * The panels a step names, in its order: `panel-X` entries, and `shard:NAME` as the Shard panel
 * (that is where a named shard shows). The first is where the step's change happens.
 */
export function namedPanels(highlight) {
  const out = [];
  for (const h of highlight ?? []) {
    const id = h.startsWith("panel-") ? h : h.startsWith("shard:") ? "panel-shard" : null;
    if (id && !out.includes(id)) out.push(id);
  }
  return out;
}

function lookChips(step, snap) {
  return (step.highlight ?? [])
    .map((h) => {
      if (h.startsWith("panel-")) {
        const name = document.querySelector(`#${CSS.escape(h)} h2`)?.firstChild?.textContent?.trim() ?? h.slice(6);
        return `<button type="button" class="look" data-tour-action="look" data-panel="${esc(h)}" title="Scroll to the ${esc(name)} panel">${esc(name)}</button>`;
      }
      if (h.startsWith("shard:")) {
        const name = h.slice(6);
        return `<button type="button" class="look look-shard" data-tour-action="look" data-panel="panel-shard" data-shard="${esc(name)}" title="Show shard ${esc(name)} in the Shard panel">shard <code>${esc(name)}</code></button>`;
      }
      const a = snap?.actors.find((x) => x.id === h);
      return a ? `<button type="button" class="look look-actor" data-tour-action="look" data-actor="${esc(h)}" title="Find ${esc(h)} on the panels">${chip(h, actorColour(a.colour))}</button>` : "";
    })
    .join(" ");
}

/** The card of one tour step; `at` is null when no tour is open. */
export function renderTourCard(el, at) {
  el.hidden = !at;
  if (!at) {
    setHtml(el, "");
    return;
  }
  const { tour, index, settled, failed, snap, prevSnap, remap } = at;
  const step = tour.steps[index];
  const n = tour.steps.length;
  const last = index === n - 1;
  const dots = tour.steps
    .map((s, i) => `<a href="${esc(tourSearch(tour, i + 1))}" class="dot${i === index ? " here" : ""}${i < index ? " done" : ""}" data-tour-action="goto" data-step="${i + 1}" title="${esc(`${i + 1}. ${s.title}`)}">${i + 1}</a>`)
    .join("");
  const warn = failed.length
    ? `<p class="tour-warn small" data-testid="tour-warn">This step should show more than it does (the engine changed?): ${esc(failed.map((f) => f.text).join("; "))}</p>`
    : "";
  setHtml(
    el,
    `<div class="tour-inner" data-testid="tour-card" data-tour="${esc(tour.id)}" data-step="${index + 1}" data-state="${settled ? "settled" : "running"}">` +
      `<div class="tour-head"><span class="tour-name">Tour: ${esc(tour.title)}</span><button class="tour-x" data-tour-action="leave" title="Leave the tour and play on (Esc)" aria-label="Leave the tour">×</button></div>` +
      remapLine(tour, remap) +
      `<h2 data-testid="tour-title">${esc(step.title)}</h2>` +
      `<div class="tour-narration" data-testid="tour-narration">${step.narration.map((p) => `<p>${narrationHtml(settled ? fillNarration(p, snap, prevSnap) : p.replace(/\{\{[^}]+\}\}/g, "…"))}</p>`).join("")}</div>` +
      `<p class="tour-look small">Look at: ${lookChips(step, snap)}</p>` +
      (snap ? `<p class="tour-clock small muted">the run's clock: <span class="mono" data-testid="tour-clock">t = ${esc(fmtMs(snap.nowMs))}</span></p>` : "") +
      `<div class="tour-nav"><button data-tour-action="back" data-testid="tour-back"${index === 0 ? " disabled" : ""} title="Back one step (←)">← Back</button>` +
      `<span class="tour-count mono">${index + 1} / ${n}</span>` +
      `<button class="primary" data-tour-action="next" data-testid="tour-next" title="${last ? "Finish the tour and play on" : "Next step (→)"}">${last ? "Finish ✓" : "Next →"}</button></div>` +
      `<nav class="tour-dots" aria-label="Steps">${dots}</nav>` +
      `<p class="tour-foot small"><button data-tour-action="leave" data-testid="tour-leave">Leave the tour and play from here</button> <a href="${esc(tourSearch(tour, index + 1))}" class="muted">link to this step</a> <span class="muted">· ← → step, Esc leaves</span></p>` +
      warn +
      `</div>`,
  );
}

/**
 * One line over the step's title when the link that opened it is older than a renumbering of the
 * tour's steps (engine.js remapOf): what changed (each `why` up to its detail, whole in the
 * tooltip), the step it opens instead, and today's step of the link's number, linked.
 */
export function remapLine(tour, remap) {
  if (!remap) return "";
  const short = remap.whys.map((w) => w.split(/ \(|: /)[0]).join("; ");
  const today = tour.steps[remap.from - 1];
  const now = today
    ? ` Step ${remap.from} today is <a href="${esc(tourSearch(tour, remap.from))}" data-tour-action="goto" data-step="${remap.from}">“${esc(today.title)}”</a>.`
    : "";
  return `<p class="tour-remap small" data-testid="tour-remap" title="${esc(remap.whys.join("; "))}">This link is older than a change to this tour (${esc(short)}): it opens step ${remap.to}, the step it meant.${now}</p>`;
}

/**
 * Outlines the highlighted panels and actors (ids as in the snapshot: W1, T2, ...) and, during a
 * tour, puts the named panels first in the panel grid, in the step's order, so that they sit
 * together beside the tour card (the other panels follow in their usual order), and the named
 * actors' replica cards first among the cards of the Upsert pipeline panel (a half-width named
 * panel followed by a full-width one takes the whole row: see below). `hidden`: the panels the
 * tour never uses, hidden while it is open.
 */
export function renderHighlights(styleEl, highlight, hidden = []) {
  const rules = hidden.map((id) => `.layout.touring #${CSS.escape(id)} { display: none; }`);
  const named = namedPanels(highlight);
  const wide = (id) => Boolean(styleEl.ownerDocument.getElementById(id)?.classList.contains("span2"));
  let col = 0; // the column the next half-width named panel starts in, in the two-column grid
  named.forEach((id, i) => {
    rules.push(`.layout.touring #${CSS.escape(id)} { order: ${i - 20}; }`);
    rules.push(`#${CSS.escape(id)} { outline: 3px solid var(--accent); outline-offset: 1px; }`);
    if (wide(id)) col = 0;
    else if (col === 0 && i + 1 < named.length && wide(named[i + 1])) {
      // A half-width panel that the next named panel, a full-width one, cannot sit beside takes
      // the whole row: as wide, it is shorter, and the next one comes up by as much (a panel
      // the step does not name filled its other half). Walk 5: at write-task 6 the Shard
      // panel's batches showed below the Writers panel only once its title stuck over its
      // description.
      rules.push(`@media (max-width: 1799.98px) { .layout.touring #${CSS.escape(id)} { grid-column: span 2; } }`);
    } else col = 1 - col;
  });
  (highlight ?? []).filter((h) => /^[A-Z]\d+$/.test(h)).forEach((h, i) => {
    const a = `[data-actor="${h}"]`;
    rules.push(`.panels tbody${a} td, .panels tr${a} > td, .panels li${a}, .panels .up-replica${a} { background: #fff3c4; }`);
    // Its replica card first among the cards (style.css: the others follow, order 10).
    rules.push(`.layout.touring #upsert-view > .up-replica${a} { order: ${i + 1}; }`);
  });
  const text = rules.join("\n");
  if (styleEl.textContent !== text) styleEl.textContent = text;
}

/** Plays the short "here I am" flash on `el` (a chip brought it into view). */
export function flash(el) {
  el.classList.remove("flash");
  void el.offsetWidth; // restart the animation
  el.classList.add("flash");
  el.addEventListener("animationend", () => el.classList.remove("flash"), { once: true });
}
