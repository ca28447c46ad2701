// Persist's ids in words (a learner should never meet a raw 25-hex-digit id where an actor name
// exists): a handle id is named by its actor ("W1's writer", "R1's reader", "U1's reader"); a
// handle no actor holds says what it is ("a reader the page opened itself", in live mode
// "a reader of another tab, or of this page before a reload"); a Blob key is "W1's part pm11x0". The id itself shows only on hover,
// short (its first 7 characters).

import { esc } from "./dom.js";

/** A raw persist handle id: w (writer) or r (reader) and 24 hex digits. */
export const RAW_ID = /\b[wr][0-9a-f]{24}\b/g;

/** Every handle id → actor seen in this run (ids are random per process, so never reused). */
const known = new Map();
let mode = "seed";

/** Learns which actor holds which handle, from the snapshot's actors and shards. */
export function learnHandles(snap) {
  mode = snap.mode;
  for (const a of snap.actors ?? []) if (a.handleId && /^[wr][0-9a-f]{24}$/.test(a.handleId)) known.set(a.handleId, a.id);
  for (const s of snap.shards ?? []) {
    for (const h of [...(s.writers ?? []), ...(s.readers ?? []), ...(s.criticalReaders ?? [])]) if (h.actor) known.set(h.id, h.actor);
  }
}

/** The handle `id` in words: "W1's writer", "R1's old reader" (from before a restart), ... */
export function handleName(id, snap) {
  const kind = id[0] === "w" ? "writer" : "reader";
  const actor = known.get(id);
  if (!actor) return mode === "live" ? `a ${kind} of another tab, or of this page before a reload (the database outlives the page)` : kind === "reader" ? "a reader the page opened itself (a checker's, or a write task's re-sync)" : "a writer no actor holds";
  const current = snap?.actors?.find((a) => a.id === actor)?.handleId;
  const old = current && current !== id && current[0] === id[0] ? "old " : "";
  return `${actor}'s ${old}${kind}`;
}

/** The short id for a tooltip. */
export const shortId = (id) => `${id.slice(0, 7)}…`;

/** `text` as HTML with every raw handle id named (its short id on hover). */
export function namedIdsHtml(text, snap) {
  let out = "";
  let last = 0;
  for (const m of String(text).matchAll(RAW_ID)) {
    out += esc(text.slice(last, m.index));
    out += `<span class="hid" title="persist handle id ${esc(shortId(m[0]))}">${esc(handleName(m[0], snap))}</span>`;
    last = m.index + m[0].length;
  }
  return out + esc(String(text).slice(last));
}

/** `text` with every raw handle id named, as plain text (SVG labels, tooltips). */
export const namedIds = (text, snap) => String(text).replace(RAW_ID, (id) => handleName(id, snap));

/** A Blob key in words: "data/w…/pm11x0" → "W1's part pm11x0"; other keys as they are. */
export function blobKeyName(key, snap) {
  const m = /^[^/]+\/([wr][0-9a-f]{24})\/(.+)$/.exec(key);
  if (!m) return key;
  const who = handleName(m[1], snap).replace(/'s (old )?writer$/, "'s");
  return who.endsWith("'s") ? `${who} part ${m[2]}` : `part ${m[2]} of ${who}`;
}
