// The rules control: one switch per protocol rule with its one-line explanation and links to
// its tour (www/tours/rule-RULE.json), at the broken step and at the intact one; and the badge on actors that run without a rule.
// Switches carry data-action="rule"; controls.js sends the command (this module only draws).
// The rules, their names, texts and badges are the engine's (`pageTable().rules`,
// src/playground/rules.rs): `rules` below is that list.

import { esc, setHtml } from "./dom.js";

/** The link to rule `id`'s tour: `on` false at its broken step, true at its intact step. */
export const presetQuery = (id, on) => `?preset=${encodeURIComponent(id)}&rule=${on ? "on" : "off"}`;

export function renderRules(el, snap, rules) {
  const rows = rules.map((r) => {
    const on = snap.rules?.[r.key] !== false;
    const without = snap.actors.filter((a) => a.variant === r.id).map((a) => a.id);
    const who = without.length ? ` <span class="variant-list">without it: ${esc(without.join(", "))}</span>` : "";
    return `<li class="rule ${on ? "on" : "off"}" data-rule="${esc(r.id)}">` +
      `<label><input type="checkbox" data-action="rule" data-rule="${esc(r.id)}"${on ? " checked" : ""}> <b>${esc(r.name)}</b></label>${who}` +
      `<p class="hint">${esc(r.text)}</p>` +
      `<p class="hint">try it: <a href="${presetQuery(r.id, false)}" data-testid="preset-${esc(r.id)}-off">broken</a> · ` +
      `<a href="${presetQuery(r.id, true)}" data-testid="preset-${esc(r.id)}-on">intact</a></p></li>`;
  }).join("");
  setHtml(el, `<ul class="rules">${rows}</ul><p class="hint">A switch applies to actors added after it; each actor keeps the code it was added with (restarts too), marked ⚠ when it runs without a rule.</p>`);
}

/** The badge of an actor that runs without a rule ("" for one that keeps them all). */
export function variantBadge(actor, rules) {
  const r = actor.variant ? rules.find((x) => x.id === actor.variant) : null;
  if (!r) return "";
  return ` <span class="variant" data-testid="variant" data-rule="${esc(r.id)}" title="runs without the rule: ${esc(r.name)}">⚠ ${esc(r.badge)}</span>`;
}
