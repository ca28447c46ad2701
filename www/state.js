// The page's state: a bounded history of recent snapshots (what the frontiers panel draws; time
// travel keeps its own, in www/time.js) and the tail of the merged event log read after a cursor.
// It holds only plain data the engine returned; no protocol state lives here.

export function makeState({ snapshots = 300, events = 400 } = {}) {
  let history = [];
  let log = [];
  let cursor = 0;
  return {
    /** Keeps `snap` if the clock moved (or the first one), dropping the oldest beyond the bound. */
    push(snap) {
      const last = history.at(-1);
      if (last && last.nowMs === snap.nowMs && last.lastSeq === snap.lastSeq) {
        history[history.length - 1] = snap;
        return;
      }
      history.push(snap);
      if (history.length > snapshots) history = history.slice(history.length - snapshots);
    },
    latest() {
      return history.at(-1) ?? null;
    },
    history() {
      return history;
    },
    /** Appends events read after `cursor()`. */
    addEvents(list) {
      if (!list.length) return;
      log.push(...list);
      cursor = list.at(-1).seq;
      if (log.length > events) log = log.slice(log.length - events);
    },
    events() {
      return log;
    },
    cursor() {
      return cursor;
    },
    /** Forgets everything (a new run). */
    clear() {
      history = [];
      log = [];
      cursor = 0;
    },
  };
}
