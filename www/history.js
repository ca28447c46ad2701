// The kept snapshots of a seed-mode run, for time in the page (www/time.js): a bounded history,
// dense near the present and thinned further back, so the whole run stays covered. Pure data: no
// DOM, no engine.

/**
 * The kept snapshots, oldest first, each `{ steps, nowMs, commands, lastSeq, snap }`. Every push
 * keeps the newest `dense` densely; once over the bound, every other older one goes (the first is
 * always kept), so the whole run stays covered, more coarsely further back. The bound is a count
 * and an estimate of bytes (a snapshot's JSON length, sampled every 64th push).
 */
export function makeHistory({ maxPoints = 600, dense = 240, maxBytes = 48 << 20 } = {}) {
  let list = [];
  let bytesEach = 0;
  let pushes = 0;
  const limit = () => Math.max(dense + 8, Math.min(maxPoints, bytesEach ? Math.floor(maxBytes / bytesEach) : maxPoints));
  function thin() {
    const keepTo = Math.max(1, list.length - dense);
    list = list.filter((_, i) => i === 0 || i >= keepTo || i % 2 === 0);
  }
  return {
    push(snap) {
      const e = { steps: snap.steps, nowMs: snap.nowMs, commands: snap.commands, lastSeq: snap.lastSeq, snap };
      const last = list.at(-1);
      if (last && last.steps === e.steps && last.nowMs === e.nowMs && last.commands === e.commands) {
        list[list.length - 1] = e;
        return;
      }
      if (pushes++ % 64 === 0) bytesEach = JSON.stringify(snap).length;
      list.push(e);
      if (list.length > limit()) thin();
    },
    /** Inserts a rebuilt entry in step order (a point between kept ones). */
    insert(e) {
      const i = list.findIndex((x) => x.steps > e.steps || (x.steps === e.steps && x.commands > e.commands));
      if (i < 0) list.push(e);
      else list.splice(i, 0, e);
    },
    /** The last entry at or before `step` (the newest of a step's entries). */
    at(step) {
      let lo = 0;
      let hi = list.length - 1;
      if (hi < 0 || list[0].steps > step) return list[0] ?? null;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (list[mid].steps <= step) lo = mid;
        else hi = mid - 1;
      }
      return list[lo];
    },
    indexOf: (e) => list.indexOf(e),
    get: (i) => list[i] ?? null,
    entries: () => list,
    size: () => list.length,
    estimatedBytes: () => bytesEach * list.length,
    /** Drops every entry after `e` (a fork discards the future). */
    truncateAfter(e) {
      const i = list.indexOf(e);
      if (i >= 0) list = list.slice(0, i + 1);
    },
    clear() {
      list = [];
    },
  };
}
