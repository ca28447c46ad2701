// Tiny helpers for the render modules (the only modules that touch the DOM).

/** Escapes text for HTML and SVG markup. */
export function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

/** Sets `el`'s markup only when it changed (keeps focus, selection and hover stable). */
export function setHtml(el, html) {
  if (el.__html === html) return;
  // A redraw must not undo what the user is typing: keep every text field whose value was
  // edited (it differs from the value the markup gave it), and the focus, across the redraw.
  const edited = [...el.querySelectorAll("input[data-field]")]
    .filter((i) => i.value !== i.defaultValue)
    .map((i) => ({ field: i.dataset.field, actor: i.dataset.actor, value: i.value, focused: i === document.activeElement }));
  el.innerHTML = html;
  el.__html = html;
  for (const e of edited) {
    const i = el.querySelector(`input[data-field="${CSS.escape(e.field)}"][data-actor="${CSS.escape(e.actor ?? "")}"]`);
    if (!i) continue;
    i.value = e.value;
    if (e.focused) i.focus();
  }
}

/** An SVG element string with attributes; `null`/`undefined` attributes are left out. */
export function svgEl(tag, attrs, inner = "") {
  const a = Object.entries(attrs)
    .filter(([, v]) => v !== null && v !== undefined)
    .map(([k, v]) => `${k}="${esc(v)}"`)
    .join(" ");
  return `<${tag} ${a}>${inner}</${tag}>`;
}

/** A mark for an outcome, coloured by the CSS class of the outcome. */
export function mark(outcome, marks) {
  return `<span class="mark o-${esc(outcome)}" title="${esc(marks[outcome]?.label ?? outcome)}">${esc(marks[outcome]?.mark ?? "·")}</span>`;
}

/** A coloured chip naming an actor. */
export function chip(id, colour) {
  return `<span class="chip" style="--c:${esc(colour)}">${esc(id)}</span>`;
}

/** A count with its noun, singular for 1: "1 update", "2 updates", "2 entries" (`many`). */
export function count(n, noun, many = `${noun}s`) {
  return `${n} ${n === 1 ? noun : many}`;
}
