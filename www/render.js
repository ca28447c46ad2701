// Rendering: pure functions from plain data (a snapshot, a status) to the DOM. Only these
// functions touch the tables and the status line. They hold no state and call nothing in wasm.
//
// Every cell gets `data-col`, every data row `data-key`, so tests (and people) can find them:
//   #consensus-table tbody tr[data-key="demo"] td[data-col="headSeqno"]
//   #blobs-table tbody tr[data-key="part-0"] td[data-col="size"]

/** The page elements the renderers (and controls) work on, found once. */
export function findDom(doc) {
  const byId = (id) => {
    const el = doc.getElementById(id);
    if (!el) throw new Error(`page is missing #${id}`);
    return el;
  };
  return {
    main: doc.querySelector("main"),
    dbName: byId("db-name"),
    status: byId("status"),
    versionForm: byId("version-form"),
    versionKey: byId("version-key"),
    versionData: byId("version-data"),
    blobForm: byId("blob-form"),
    blobKey: byId("blob-key"),
    blobData: byId("blob-data"),
    refresh: byId("refresh"),
    reset: byId("reset"),
    consensusBody: byId("consensus-table").tBodies[0],
    blobsBody: byId("blobs-table").tBodies[0],
  };
}

export function renderDbName(dom, name) {
  dom.dbName.textContent = name;
  dom.main.ownerDocument.title = `persist-playground: ${name}`;
}

/**
 * Shows `status` ({ kind: "ok" | "warn" | "error" | "busy", text }) in the status line.
 * `data-kind` carries the kind for styling and tests.
 */
export function renderStatus(dom, status) {
  dom.status.dataset.kind = status.kind;
  dom.status.textContent = status.text;
}

/** Enables or disables every control while an action runs (or before the page is ready). */
export function renderBusy(dom, busy) {
  for (const form of [dom.versionForm, dom.blobForm]) {
    for (const fieldset of form.querySelectorAll("fieldset")) fieldset.disabled = busy;
  }
  dom.refresh.disabled = busy;
  dom.reset.disabled = busy;
  dom.main.setAttribute("aria-busy", busy ? "true" : "false");
  dom.main.dataset.state = busy ? "busy" : "ready";
}

/** The page could not start (no wasm, no database): say why; the controls stay disabled. */
export function renderFailed(dom, status) {
  renderStatus(dom, status);
  dom.main.setAttribute("aria-busy", "false");
  dom.main.dataset.state = "failed";
  const unavailable = "Not available: see the message above.";
  renderRows(dom.consensusBody, [], CONSENSUS_COLUMNS, null, unavailable);
  renderRows(dom.blobsBody, [], BLOB_COLUMNS, null, unavailable);
}

/**
 * Draws both tables from a snapshot
 * `{ dbName, consensus: [{ key, headSeqno, versions, bytes, headPreview }], blobs: [{ key, sizeInBytes }] }`.
 * `highlight` ({ table: "consensus" | "blobs", key }, optional) marks the row just written.
 */
export function renderSnapshot(dom, snapshot, highlight = null) {
  renderDbName(dom, snapshot.dbName);
  const hl = (table) => (highlight && highlight.table === table ? highlight.key : null);
  renderRows(dom.consensusBody, snapshot.consensus, CONSENSUS_COLUMNS, hl("consensus"),
    "Nothing stored yet: write a version above.");
  renderRows(dom.blobsBody, snapshot.blobs, BLOB_COLUMNS, hl("blobs"),
    "Nothing stored yet: write a blob above.");
}

/** Each column: `col` (the data-col name), how to get its text, and its CSS class. */
const CONSENSUS_COLUMNS = [
  { col: "key", text: (r) => r.key, className: "mono key" },
  { col: "headSeqno", text: (r) => r.headSeqno, className: "mono num" },
  { col: "versions", text: (r) => String(r.versions), className: "num" },
  { col: "bytes", text: (r) => String(r.bytes), className: "num" },
  { col: "headPreview", text: (r) => r.headPreview, className: "mono preview" },
];

const BLOB_COLUMNS = [
  { col: "key", text: (r) => r.key, className: "mono key" },
  { col: "size", text: (r) => String(r.sizeInBytes), className: "num" },
];

function renderRows(tbody, rows, columns, highlightKey, emptyText) {
  const doc = tbody.ownerDocument;
  const out = [];
  for (const row of rows) {
    const tr = doc.createElement("tr");
    tr.dataset.key = row.key;
    if (row.key === highlightKey) tr.classList.add("just-written");
    for (const { col, text, className } of columns) {
      const td = doc.createElement("td");
      td.dataset.col = col;
      td.className = className;
      const value = text(row);
      if (value === "") {
        td.classList.add("blank");
        td.title = "empty";
      } else {
        td.textContent = value; // textContent, never innerHTML: keys and data are user text
        td.title = value;
      }
      tr.append(td);
    }
    out.push(tr);
  }
  if (out.length === 0) {
    const tr = doc.createElement("tr");
    tr.className = "empty";
    tr.dataset.testid = "empty";
    const td = doc.createElement("td");
    td.colSpan = columns.length;
    td.textContent = emptyText;
    tr.append(td);
    out.push(tr);
  }
  tbody.replaceChildren(...out);
}

// Status texts, kept next to the status renderer so every message reads the same way.

export function writeVersionStatus(outcome) {
  return outcome.committed
    ? { kind: "ok", text: `committed v${outcome.seqno} of ${outcome.key}` }
    : {
        kind: "warn",
        text: `lost the race for v${outcome.seqno} of ${outcome.key}: another writer took that seqno first (the table shows the winner); write again to try v${nextSeqno(outcome.seqno)}`,
      };
}

export function writeBlobStatus(key, bytes) {
  return { kind: "ok", text: `wrote blob ${key} (${bytes} ${bytes === 1 ? "byte" : "bytes"})` };
}

export function errorStatus(err) {
  const message = err instanceof Error ? err.message : String(err);
  return { kind: "error", text: `Error: ${message}` };
}

/** Seqnos are decimal strings (they may exceed 2^53): add one with BigInt. */
function nextSeqno(seqno) {
  try {
    return (BigInt(seqno) + 1n).toString();
  } catch {
    return "?";
  }
}
