"use strict";
// persist-playground/fs: a location on the local file system for Node (node:fs), to pass to
// PersistLocation.custom, or ready made with fsLocation(dir). Several Node processes may share
// one directory: every write is atomic and every compare-and-set exclusive across processes.
//
// Layout under `dir`:
//   blob/<key>              one file per Blob key (the key percent-encoded into one file name)
//   blob-deleted/<key>      deleted keys, kept so that restore can bring them back
//   consensus/<key>/p<20 digits>
//                           one file per version of a Consensus key, named by its predecessor:
//                           p00000000000000000000 holds the first version (expected = null),
//                           p<e + 1> the version that replaced the head e. Contents: the seqno
//                           (8 bytes, big-endian) and then the data; a truncated version is an
//                           empty file (the name stays taken, see below).
//   tmp/                    files being written, before their rename or link
//
// Why it is atomic:
// - blob.set writes tmp/<random> and renames it over blob/<key>: rename(2) replaces the target
//   atomically, so a reader sees the old bytes or the new ones, never a part.
// - consensus.compareAndSet checks that the head is `expected`, writes the new version to
//   tmp/<random> and link(2)s it to p<expected + 1>, which fails if that name exists: of two
//   processes racing from one head, exactly one links (the other sees EEXIST: a mismatch). A
//   head that moved past `expected` took that name already, and truncation empties a version
//   file instead of deleting it, so a name is never free twice and a stale expectation can
//   never link.
// - Errors of the file system are determinate (the operation did not happen), except a failure
//   after a link or rename was issued, which is marked `indeterminate: true`.
const fs = require("node:fs/promises");
const path = require("node:path");
const { randomUUID } = require("node:crypto");

const VERSION_PREFIX = "p";
const PAD = 20; // digits of i64::MAX + 1

/** A Blob key or Consensus key as one safe file name (and back). */
function encodeKey(key) {
  return encodeURIComponent(key).replace(/\./g, "%2E").replace(/\*/g, "%2A");
}
function decodeKey(name) {
  return decodeURIComponent(name);
}

function fail(err, indeterminate = false) {
  const e = new Error(err && err.message ? err.message : String(err));
  e.code = err && err.code;
  if (indeterminate) e.indeterminate = true;
  return e;
}

async function readOrNull(file) {
  try {
    return await fs.readFile(file);
  } catch (e) {
    if (e.code === "ENOENT") return null;
    throw fail(e);
  }
}

async function writeTmp(tmpDir, bytes) {
  const tmp = path.join(tmpDir, randomUUID());
  await fs.writeFile(tmp, bytes);
  return tmp;
}

/** A Blob (CustomBlob) on the directory `dir`. */
function fsBlob(dir) {
  const live = path.join(dir, "blob");
  const deleted = path.join(dir, "blob-deleted");
  const tmp = path.join(dir, "tmp");
  let ready;
  const init = () =>
    (ready ??= Promise.all([live, deleted, tmp].map((d) => fs.mkdir(d, { recursive: true }))));
  return {
    async get(key) {
      await init();
      return readOrNull(path.join(live, encodeKey(key)));
    },
    async set(key, value) {
      await init();
      const file = await writeTmp(tmp, value).catch((e) => {
        throw fail(e);
      });
      try {
        await fs.rename(file, path.join(live, encodeKey(key)));
      } catch (e) {
        await fs.rm(file, { force: true }).catch(() => {});
        throw fail(e, true);
      }
    },
    async delete(key) {
      await init();
      const from = path.join(live, encodeKey(key));
      let size;
      try {
        size = (await fs.stat(from)).size;
        await fs.rename(from, path.join(deleted, encodeKey(key)));
      } catch (e) {
        if (e.code === "ENOENT") return null; // absent, or deleted by another process first
        throw fail(e, size !== undefined);
      }
      return size;
    },
    async restore(key) {
      await init();
      const to = path.join(live, encodeKey(key));
      try {
        await fs.access(to);
        return; // live already
      } catch {}
      try {
        await fs.rename(path.join(deleted, encodeKey(key)), to);
      } catch (e) {
        if (e.code !== "ENOENT") throw fail(e, true);
        try {
          await fs.access(to); // another process restored it first
        } catch {
          throw fail(new Error(`cannot restore ${JSON.stringify(key)}: it was never written`));
        }
      }
    },
    async list(prefix) {
      await init();
      const out = [];
      for (const name of await fs.readdir(live)) {
        const key = decodeKey(name);
        if (!key.startsWith(prefix)) continue;
        try {
          out.push({ key, sizeInBytes: (await fs.stat(path.join(live, name))).size });
        } catch (e) {
          if (e.code !== "ENOENT") throw fail(e); // deleted meanwhile: not listed
        }
      }
      return out;
    },
  };
}

function versionName(predecessor) {
  // predecessor: null (the first version) or a bigint seqno.
  const n = predecessor === null ? 0n : predecessor + 1n;
  return VERSION_PREFIX + n.toString().padStart(PAD, "0");
}

function encodeVersion(seqno, data) {
  const out = Buffer.alloc(8 + data.length);
  out.writeBigUInt64BE(seqno, 0);
  Buffer.from(data.buffer, data.byteOffset, data.byteLength).copy(out, 8);
  return out;
}

function decodeVersion(bytes) {
  if (bytes.length === 0) return null; // truncated
  if (bytes.length < 8) throw fail(new Error("a version file shorter than its seqno"));
  return { seqno: bytes.readBigUInt64BE(0), data: new Uint8Array(bytes.subarray(8)) };
}

/** A Consensus (CustomConsensus) on the directory `dir`. */
function fsConsensus(dir) {
  const root = path.join(dir, "consensus");
  const tmp = path.join(dir, "tmp");
  let ready;
  const init = () =>
    (ready ??= Promise.all([root, tmp].map((d) => fs.mkdir(d, { recursive: true }))));
  const keyDir = (key) => path.join(root, encodeKey(key));

  async function names(key) {
    try {
      return (await fs.readdir(keyDir(key))).filter((n) => n.startsWith(VERSION_PREFIX)).sort();
    } catch (e) {
      if (e.code === "ENOENT") return [];
      throw fail(e);
    }
  }

  async function read(key, name) {
    const bytes = await readOrNull(path.join(keyDir(key), name));
    return bytes === null ? null : decodeVersion(bytes);
  }

  async function head(key) {
    const all = await names(key);
    // The version with the greatest name is the head (names grow with seqnos); truncation
    // never empties the head.
    for (let i = all.length - 1; i >= 0; i--) {
      const v = await read(key, all[i]);
      if (v) return v;
    }
    return null;
  }

  return {
    async head(key) {
      await init();
      return head(key);
    },
    async compareAndSet(key, expected, next) {
      await init();
      const current = await head(key);
      const currentSeqno = current ? current.seqno : null;
      if (currentSeqno !== expected) return false;
      await fs.mkdir(keyDir(key), { recursive: true }).catch((e) => {
        throw fail(e);
      });
      const file = await writeTmp(tmp, encodeVersion(next.seqno, next.data)).catch((e) => {
        throw fail(e);
      });
      try {
        await fs.link(file, path.join(keyDir(key), versionName(expected)));
        return true;
      } catch (e) {
        if (e.code === "EEXIST") return false; // another process moved the head first
        throw fail(e, true);
      } finally {
        await fs.rm(file, { force: true }).catch(() => {});
      }
    },
    async scan(key, from, limit) {
      await init();
      const out = [];
      for (const name of await names(key)) {
        if (out.length >= limit) break;
        const v = await read(key, name);
        if (v && v.seqno >= from) out.push(v);
      }
      return out;
    },
    async truncate(key, seqno) {
      await init();
      let deleted = 0;
      for (const name of await names(key)) {
        const v = await read(key, name);
        if (!v) continue;
        if (v.seqno >= seqno) break;
        // Empty the file rather than delete it: its name must stay taken (see the top).
        const file = await writeTmp(tmp, Buffer.alloc(0)).catch((e) => {
          throw fail(e);
        });
        try {
          await fs.rename(file, path.join(keyDir(key), name));
        } catch (e) {
          throw fail(e, true);
        }
        deleted++;
      }
      return deleted;
    },
    async listKeys() {
      await init();
      const out = [];
      for (const name of await fs.readdir(root)) {
        const key = decodeKey(name);
        if ((await head(key)) !== null) out.push(key);
      }
      return out;
    },
  };
}

/** A PersistLocation on the directory `dir` (created if needed): fsBlob and fsConsensus. */
function fsLocation(dir, options = {}) {
  const { PersistLocation } = require("../node/index.cjs");
  return PersistLocation.custom({
    blob: fsBlob(dir),
    consensus: fsConsensus(dir),
    name: options.name ?? `fs:${path.resolve(dir)}`,
    ...(options.faults ? { faults: options.faults } : {}),
  });
}

module.exports = { fsBlob, fsConsensus, fsLocation, encodeKey, decodeKey };
