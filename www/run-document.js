// A seed-mode run as a document: its seed, its stamped commands and the point it is at. The JSON
// of Export and Import, checked before anything replays it, and the share link's run= parameter
// (the document, compressed, in base64url). The engine's determinism makes it enough: replaying
// the commands from the seed rebuilds the run (src/playground/replay.rs).

export const RUN_FORMAT = "persist-playground-run";
export const EVENTS_FORMAT = "persist-playground-events";
export const FORMAT_VERSION = 1;
/** The wall-time budget a replay gets per animation frame, and its slice of simulator steps. */

/**
 * The seed-mode run of `pg` as a document: seed, stamped commands and the point it is at; with
 * `snap` a point of the past, the commands up to it (what the run had applied there).
 */
export function runDocument(pg, snap) {
  return {
    format: RUN_FORMAT,
    version: FORMAT_VERSION,
    seed: pg.seed,
    at: { step: snap.steps, atMs: snap.nowMs },
    commands: pg.stampedCommands().slice(0, snap.commands),
  };
}

const isWhole = (n) => Number.isSafeInteger(n) && n >= 0;

/** Checks a parsed document's shape (the engine checks every command); returns it or throws. */
export function checkRunDocument(doc) {
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) throw new Error("it is not a JSON object");
  if (doc.format === EVENTS_FORMAT) throw new Error("it is a live-mode event log: live runs are not replayable");
  if (doc.format !== RUN_FORMAT) throw new Error(`its format is ${JSON.stringify(doc.format)}, not "${RUN_FORMAT}"`);
  if (doc.version !== FORMAT_VERSION) throw new Error(`format version ${JSON.stringify(doc.version)} is not supported (this page reads version ${FORMAT_VERSION})`);
  const seed = typeof doc.seed === "number" ? String(doc.seed) : doc.seed;
  if (typeof seed !== "string" || !/^\d{1,20}$/.test(seed)) throw new Error(`the seed must be a whole number, not ${JSON.stringify(doc.seed)}`);
  if (!doc.at || !isWhole(doc.at.step) || !isWhole(doc.at.atMs)) throw new Error("`at` must be { step, atMs } with whole numbers");
  if (!Array.isArray(doc.commands)) throw new Error("`commands` must be a list of stamped commands");
  return { ...doc, seed };
}

/** Parses and checks a JSON text; a clear Error if it is not a run. */
export function parseRun(text) {
  let doc;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new Error(`it is not valid JSON (${err.message})`);
  }
  return checkRunDocument(doc);
}

async function streamBytes(bytes, stream) {
  const out = new Response(new Blob([bytes]).stream().pipeThrough(stream));
  return new Uint8Array(await out.arrayBuffer());
}

function toBase64Url(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function fromBase64Url(text) {
  if (!/^[A-Za-z0-9_-]+$/.test(text)) throw new Error("it is not base64url text");
  const bin = atob(text.replace(/-/g, "+").replace(/_/g, "/"));
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

/** A run document as a URL parameter: JSON, deflate-raw, base64url. */
export async function encodeRun(doc) {
  return toBase64Url(await streamBytes(new TextEncoder().encode(JSON.stringify(doc)), new CompressionStream("deflate-raw")));
}

/** The inverse of `encodeRun`; a clear Error for a damaged link. */
export async function decodeRun(param) {
  let bytes;
  try {
    bytes = await streamBytes(fromBase64Url(param), new DecompressionStream("deflate-raw"));
  } catch (err) {
    throw new Error(`its run= data does not decompress (${err.message || err.name}): was the link cut short?`);
  }
  return parseRun(new TextDecoder().decode(bytes));
}

/** Saves `text` as the file `name` (Export). */
export function download(name, text) {
  const url = URL.createObjectURL(new Blob([text], { type: "application/json" }));
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
