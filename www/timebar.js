// The time bar: it draws the history, the point shown and a replay under way (through
// www/render/timeline.js), marks the page while it shows the past or replays (the controls that
// would change the run are inert then), and wires its buttons, the scrub bar, the step field,
// import and the keys to the controller of www/time.js. It holds no state of its own.

import { renderTimeline } from "./render/timeline.js";

/**
 * Draws the bar for `s`: `{ live, playing, hist, past, present, job, link }` (`job`: a replay
 * under way, `{ label, replay, target }`).
 */
export function renderTimeBar(dom, s) {
  renderTimeline(dom, {
    live: s.live,
    playing: s.playing,
    entries: s.hist.entries(),
    past: s.past,
    present: s.present,
    job: s.job && { label: s.job.label, steps: safeSteps(s.job.replay), target: s.job.target },
    link: s.link,
    bytes: s.hist.estimatedBytes(),
  });
  // Touch the DOM only on a change: an attribute set, even to its value, restyles the page.
  const mode = s.past ? "past" : s.job ? "busy" : "present";
  if (document.body.dataset.time !== mode) {
    document.body.dataset.time = mode;
    for (const el of dom.changesRun()) el.inert = Boolean(s.past || s.job);
  }
}

function safeSteps(replay) {
  try {
    return replay.steps;
  } catch {
    return 0;
  }
}

/** Buttons, the scrub bar, the step field, import, and the keys , . Home End f e k i. */
export function wireTimeBar(d, api, fail) {
  const guarded = (f) => async (...args) => {
    try {
      await f(...args);
    } catch (err) {
      fail(err);
    }
  };
  const click = (el, f) => el.addEventListener("click", guarded(f));
  click(d.oldest, () => api.oldest());
  click(d.back, () => api.back());
  click(d.forward, () => api.forward());
  click(d.present, () => api.toPresent());
  click(d.fork, () => api.fork());
  click(d.exportRun, () => api.exportRun());
  click(d.share, () => api.shareLink());
  click(d.cancel, () => api.cancel());
  d.scrub.addEventListener("input", guarded(() => api.scrubTo(d.scrub.value)));
  d.gotoForm.addEventListener("submit", guarded((e) => {
    e.preventDefault();
    return api.goTo(d.goto.value);
  }));
  d.importFile.addEventListener("change", guarded(async () => {
    const file = d.importFile.files[0];
    if (!file) return;
    d.importFile.value = "";
    await api.importText(await file.text(), file.name);
  }));
  document.addEventListener("keydown", guarded((e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const tag = e.target?.tagName;
    if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA") return;
    const actions = {
      ",": () => api.back(),
      ".": () => api.forward(),
      Home: () => api.oldest(),
      End: () => api.toPresent(),
      f: () => api.fork(),
      e: () => api.exportRun(),
      k: () => api.shareLink(),
      i: () => d.importFile.click(),
    };
    const act = actions[e.key];
    if (!act) return;
    e.preventDefault();
    return act();
  }));
}
