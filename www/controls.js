// Controls: DOM events and keys -> commands for the engine (through `app`). Nothing here draws:
// the frame loop renders whatever the engine's next snapshot says. A field whose value does not
// parse is refused here with a message; values that parse are checked again by the engine.
// Every spec starts from the engine's default for its kind (`app.table().defaults`,
// src/playground/table.rs); a control sets only the fields it shows.

/** A whole number from a text field, or an Error naming the field. */
export function wholeNumber(label, text) {
  const t = String(text).trim();
  if (!/^\d+$/.test(t)) throw new Error(`${label} must be a whole number, not ${JSON.stringify(t)}`);
  return Number(t);
}

/** A percentage 0-100 as a rate 0-1. */
export function percent(label, text) {
  const t = String(text).trim();
  const n = Number(t);
  if (t === "" || !Number.isFinite(n)) throw new Error(`${label} must be a percentage, not ${JSON.stringify(t)}`);
  if (n < 0 || n > 100) throw new Error(`${label} must be between 0 and 100 %, not ${n}`);
  return n / 100;
}

/** "lo-hi" (inclusive) as { keyLo, keyHi } (exclusive). */
export function keyRange(text) {
  const m = /^\s*(\d+)\s*[-–]\s*(\d+)\s*$/.exec(String(text));
  if (!m) throw new Error(`keys must look like 0-16, not ${JSON.stringify(String(text).trim())}`);
  return { keyLo: Number(m[1]), keyHi: Number(m[2]) + 1 };
}

/** A writer's spec: the engine's default `writer`, with the rate, keys and mode of the fields. */
export function writerSpec(dom, writer) {
  return {
    ...writer,
    ratePerS: wholeNumber("writer rate/s", dom.wRate.value),
    ...keyRange(dom.wKeys.value),
    mode: dom.wMode.value,
  };
}

function faultKnobs(f, name) {
  return {
    failRate: percent(`${name} fail %`, f.fail.value),
    timeoutRate: percent(`${name} timeout %`, f.timeout.value),
    latencyMs: wholeNumber(`${name} latency ms`, f.latency.value),
    outage: f.outage.checked,
  };
}

/**
 * Wires the controls. `app` is main.js's thin layer over the engine:
 * `send(command, okText?)`, `report(status)`, `togglePlay()`, `step()`, `faster(dir)`,
 * `setSpeed(value)`, `newRun(seed)`, `switchMode()`, `resetDatabase()`, `latest()`, `table()`,
 * `playing()`.
 */
export function wireControls(dom, app) {
  const defaults = app.table().defaults;
  // The fields start at the engine's defaults.
  dom.wRate.value = String(defaults.writer.ratePerS);
  dom.wKeys.value = `${defaults.writer.keyLo}-${defaults.writer.keyHi - 1}`;
  dom.wMode.value = defaults.writer.mode;
  dom.oBurst.value = String(defaults.oracle.burst);
  // Runs `f`; a thrown Error becomes an error status (the running state is left as it was).
  const guarded = (f) => (...args) => {
    try {
      return f(...args);
    } catch (err) {
      app.report({ kind: "error", text: err instanceof Error ? err.message : String(err) });
      return undefined;
    }
  };
  const into = () => dom.intoProcess.value || null;
  const addActor = (spec) => app.send({ type: "addActor", spec, process: into() });

  dom.play.addEventListener("click", guarded(() => app.togglePlay()));
  dom.step.addEventListener("click", guarded(() => app.step()));
  dom.speed.addEventListener("change", guarded(() => app.setSpeed(dom.speed.value)));
  dom.seedForm.addEventListener("submit", guarded((e) => {
    e.preventDefault();
    app.newRun(dom.seed.value);
  }));
  dom.toLive.addEventListener("click", guarded(() => app.switchMode()));
  dom.toSeed.addEventListener("click", guarded(() => app.switchMode()));
  dom.addWriter.addEventListener("click", guarded(() => addActor(writerSpec(dom, defaults.writer))));
  dom.addReader.addEventListener("click", guarded(() => addActor({ ...defaults.reader })));
  dom.addTask.addEventListener("click", guarded(() => addActor({ ...defaults.task })));
  dom.addOracle.addEventListener("click", guarded(() => addActor({
    ...defaults.oracle, burst: wholeNumber("oracle burst", dom.oBurst.value),
  })));
  dom.presetBusy.addEventListener("click", guarded(() => app.presetBusy()));
  dom.addReplica.addEventListener("click", guarded(() => addActor({ ...defaults.replica })));
  dom.upsertForm.addEventListener("submit", guarded((e) => {
    e.preventDefault();
    // The push confirms here, beside the box (the status line is off screen by then).
    const said = (text, err) => {
      for (const el of [dom.pushSaid, dom.pushSaidHere]) {
        if (!el) continue;
        el.hidden = false;
        el.classList.toggle("err", err);
        el.textContent = text;
      }
    };
    try {
      const key = wholeNumber("upsert key", dom.upsertKey.value);
      const value = dom.upsertValue.value.trim();
      const applied = app.send({ type: "pushUpsert", key, value: value === "" ? null : value });
      said(`✓ ${applied.message}${app.latest()?.upsert?.generating || app.latest()?.mode !== "seed" ? "" : "; Step replicas walks it through a replica"}`, false);
    } catch (err) {
      said(err instanceof Error ? err.message : String(err), true);
      throw err;
    }
  }));
  // The same push from the Upsert pipeline panel's own form (beside Step replicas): one code
  // path, the sidebar's form, so both boxes always hold what was pushed last.
  dom.upsertFormHere?.addEventListener("submit", (e) => {
    e.preventDefault();
    dom.upsertKey.value = dom.upsertKeyHere.value;
    dom.upsertValue.value = dom.upsertValueHere.value;
    dom.upsertForm.requestSubmit();
  });
  dom.generator.addEventListener("change", guarded(() => app.send({ type: "setGenerator", on: dom.generator.checked })));
  dom.undecodable.addEventListener("change", guarded(() => app.send({ type: "setUndecodable", on: dom.undecodable.checked })));
  dom.stepReplicas.addEventListener("click", guarded(() => {
    // A walk moves only a paused run (running it ends the walk): the press pauses it first.
    if (app.playing()) app.togglePlay();
    // Where the panel's own button is before the press: a press made there leaves it there.
    const here = dom.stepReplicasHere;
    const was = here?.getBoundingClientRect();
    const shown = Boolean(was) && was.height > 0 && was.top >= 0 && was.bottom <= innerHeight;
    try {
      app.send({ type: "stepReplicas" });
      // The walk's stage 5 points at the Shard panel's rows: the panel shows the replicas' shard.
      const shard = app.latest()?.upsert?.shard;
      if (shard && dom.shardPick.value !== shard && [...dom.shardPick.options].some((o) => o.value === shard)) dom.shardPick.value = shard;
    } finally {
      // The press's effect shows in the Upsert pipeline panel, ~2000 px below the controls at
      // 1280x800: bring it into view, its title at the top. Its own Step replicas button and the
      // press's message are there (render/index.js renderPressHere), so the next press is made
      // where it shows, and that button then stays where it is (keepPressStill).
      const panel = dom.stepSaidHere?.closest(".panel");
      const title = panel?.querySelector("h2").getBoundingClientRect();
      const bar = dom.stepSaidHere?.closest("p").getBoundingClientRect();
      if (panel && !shown && (title.top < -2 || bar.bottom > innerHeight)) panel.scrollIntoView({ block: "start" });
      // A press made where the last one left the button keeps the last one's place exactly: the
      // button's top can sit a fraction of a pixel off it (lines of fractional height, whole-pixel
      // scrolls), and measuring it anew at each press let those fractions add up to a drift.
      const held = shown && heldAt !== null && Math.abs(was.top - heldAt) < 2 ? heldAt : null;
      if (panel && here) keepPressStill(here, panel, held ?? (shown ? was.top : here.getBoundingClientRect().top));
    }
  }));
  dom.stepReplicasHere?.addEventListener("click", () => dom.stepReplicas.click());
  const generatorOff = guarded((e) => {
    if (e.target.closest("[data-action=generator-off]")) app.send({ type: "setGenerator", on: false });
  });
  dom.stepSaid.addEventListener("click", generatorOff);
  dom.stepSaidHere?.addEventListener("click", generatorOff);
  dom.verify.addEventListener("click", guarded(() => app.send({ type: "verify" })));
  dom.faultsForm.addEventListener("submit", guarded((e) => {
    e.preventDefault();
    // Parse both rows before sending either: a bad field changes nothing.
    const blob = faultKnobs(dom.faults.blob, "Blob");
    const consensus = faultKnobs(dom.faults.consensus, "Consensus");
    app.send({ type: "setFaults", service: "blob", knobs: blob });
    app.send({ type: "setFaults", service: "consensus", knobs: consensus }, "faults applied");
  }));
  dom.faultsOff.addEventListener("click", guarded(() => allFaultsOff(dom, app)));
  dom.corrupt.addEventListener("click", guarded(() => {
    if (!dom.corruptKey.value) throw new Error("nothing to corrupt yet");
    app.send({ type: "corruptRecord", key: dom.corruptKey.value });
  }));
  dom.resetDb.addEventListener("click", guarded(() => app.resetDatabase()));
  // The event log's filters and its "show the newest" (a view choice: no command).
  dom.logActor.addEventListener("change", guarded(() => app.setLogFilter({ actor: dom.logActor.value })));
  dom.logKind.addEventListener("change", guarded(() => app.setLogFilter({ kind: dom.logKind.value })));
  dom.logNote.addEventListener("click", guarded((e) => {
    if (e.target.closest("[data-log-action=newest]")) app.showNewestEvents();
  }));
  // Rules (www/render/rules.js draws the switches).
  dom.rules.addEventListener("change", guarded((e) => {
    const box = e.target.closest("input[data-action=rule]");
    if (box) app.send({ type: "setRule", rule: box.dataset.rule, on: box.checked });
  }));

  // Per-actor and per-process buttons are re-rendered, so listen on their container.
  dom.processes.addEventListener("click", guarded((e) => {
    const b = e.target.closest("[data-action]");
    if (!b || b.tagName === "INPUT") return;
    actorAction(dom, app, b);
  }));
  dom.processes.addEventListener("change", guarded((e) => {
    const b = e.target.closest("input[data-action]");
    if (b) actorAction(dom, app, b);
  }));

  // Whether the focus last moved by the keyboard (Tab) rather than by a press.
  let tabbed = false;
  addEventListener("keydown", (e) => { if (e.key === "Tab") tabbed = true; }, { capture: true, passive: true });
  addEventListener("pointerdown", () => { tabbed = false; }, { capture: true, passive: true });
  document.addEventListener("keydown", guarded((e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const tag = e.target?.tagName;
    if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA") return;
    const key = e.key;
    // Space on a button, link or summary reached with Tab presses it, as everywhere else. After a
    // click the button keeps the focus, and Space is the shortcut (play/pause) again.
    if (key === " " && tabbed && e.target instanceof Element && e.target.closest("button, a[href], summary, [role=button]")) return;
    const actions = {
      " ": () => app.togglePlay(),
      s: () => app.step(),
      "+": () => app.faster(1),
      "=": () => app.faster(1),
      "-": () => app.faster(-1),
      w: () => addActor(writerSpec(dom, defaults.writer)),
      r: () => dom.addReader.click(),
      t: () => dom.addTask.click(),
      o: () => dom.addOracle.click(),
      u: () => dom.addReplica.click(),
      g: () => app.send({ type: "setGenerator", on: !app.latest()?.upsert?.generating }),
      j: () => dom.stepReplicas.click(),
      v: () => dom.verify.click(),
      c: () => crashNewest(app),
      x: () => restartNewest(app),
      0: () => allFaultsOff(dom, app),
      n: () => app.newRun(dom.seed.value),
      l: () => app.switchMode(),
    };
    const act = actions[key];
    if (act) {
      e.preventDefault();
      act();
    }
  }));
}

function allFaultsOff(dom, app) {
  for (const f of [dom.faults.blob, dom.faults.consensus]) {
    f.fail.value = "0";
    f.timeout.value = "0";
    f.latency.value = "0";
    f.outage.checked = false;
  }
  const off = { failRate: 0, timeoutRate: 0, latencyMs: 0, outage: false };
  app.send({ type: "setFaults", service: "blob", knobs: off });
  app.send({ type: "setFaults", service: "consensus", knobs: off }, "all faults off");
}

function crashNewest(app) {
  const p = app.latest()?.processes.filter((x) => x.alive).at(-1);
  if (!p) throw new Error("no running process to crash");
  app.send({ type: "crashProcess", process: p.id });
}

function restartNewest(app) {
  const p = app.latest()?.processes.filter((x) => !x.alive && !x.restartedAs).at(-1);
  if (!p) throw new Error("no crashed process to restart");
  app.send({ type: "restartProcess", process: p.id });
}

function field(dom, actor, name) {
  const input = dom.processes.querySelector(`input[data-field="${name}"][data-actor="${actor}"]`);
  return input ? input.value : "";
}

function actorAction(dom, app, el) {
  const { action, actor, process } = el.dataset;
  const spec = app.latest()?.actors.find((a) => a.id === actor)?.spec;
  switch (action) {
    case "crash":
      return app.send({ type: "crashProcess", process });
    case "restart":
      return app.send({ type: "restartProcess", process });
    case "remove":
      return app.send({ type: "removeActor", actor });
    case "set-rate": {
      const ratePerS = wholeNumber(`${actor} rate/s`, field(dom, actor, "rate"));
      const { kind: _kind, ...fields } = spec;
      return app.send({ type: "setWriter", actor, spec: { ...fields, ratePerS } });
    }
    case "hold":
      return app.send({ type: "setReaderHold", actor, hold: el.dataset.hold === "true" });
    case "push":
      return app.send({ type: "taskPush", actor, op: { op: "append", rows: Number(el.dataset.rows) } });
    case "delete-row":
      return app.send({ type: "taskPush", actor, op: { op: "deleteOldest" } });
    case "read-only":
      return app.send({ type: "setTask", actor, tickIntervalMs: spec.tickIntervalMs, readOnly: el.checked });
    case "set-tick": {
      const tickIntervalMs = wholeNumber(`${actor} tick ms`, field(dom, actor, "tick"));
      return app.send({ type: "setTask", actor, tickIntervalMs, readOnly: spec.readOnly });
    }
    default:
      return undefined;
  }
}

/** For this many frames after a Step replicas press, its button is held where it was. */
const PRESS_HOLD_FRAMES = 20;
/** The walked key's row keeps this far above the bottom of the window. */
const PRESS_ROW_MARGIN_PX = 8;
/** The press being held, if any: a newer press replaces it. */
let pressHold = null;
/** Where the last press held the button (its top in the window), or null. */
let heldAt = null;

/**
 * Holds the Upsert pipeline panel's Step replicas button at `y` (its top in the window) for a
 * few frames after a press: what the press changes (the walk's line, the replicas' cards, the
 * panels above, drawn again a frame or two later) must not move the button the learner presses
 * next (the fourth learner walk saw it drift from y 111 to 263 over seven presses). The
 * browser's scroll anchoring is off meanwhile, which moved the page on its own. The one scroll
 * allowed: the walked key's row in the state (render/upsert.js marks it data-walked) below the
 * bottom of the window comes up into it (the button with it, never above the window's top), and
 * the button is held at its new place. A wheel, a touch, a press or a key other than j lets go.
 */
function keepPressStill(button, panel, y) {
  const root = document.documentElement;
  if (pressHold) pressHold.stop();
  const hold = { left: PRESS_HOLD_FRAMES, y };
  const release = () => hold.stop();
  const onKey = (e) => {
    if (e.key !== "j") release();
  };
  hold.stop = () => {
    hold.left = 0;
    root.style.overflowAnchor = "";
    removeEventListener("wheel", release);
    removeEventListener("touchstart", release);
    removeEventListener("pointerdown", release, true);
    removeEventListener("keydown", onKey);
    if (pressHold === hold) pressHold = null;
  };
  pressHold = hold;
  root.style.overflowAnchor = "none";
  addEventListener("wheel", release, { passive: true });
  addEventListener("touchstart", release, { passive: true });
  // A press anywhere lets go too: holding the button scrolls the page, which would move what
  // that press is on between its press and its release (and lose the click).
  addEventListener("pointerdown", release, { capture: true, passive: true });
  addEventListener("keydown", onKey);
  const settle = () => {
    const top = button.getBoundingClientRect().top;
    if (Math.abs(top - hold.y) >= 0.5) window.scrollBy({ top: top - hold.y, behavior: "instant" });
    const row = [...panel.querySelectorAll("[data-walked]")].find((el) => el.getClientRects().length);
    const below = row ? row.getBoundingClientRect().bottom - (innerHeight - PRESS_ROW_MARGIN_PX) : 0;
    const by = Math.min(below, button.getBoundingClientRect().top);
    if (by >= 1) {
      window.scrollBy({ top: by, behavior: "instant" });
      hold.y = button.getBoundingClientRect().top;
    }
    heldAt = hold.y;
  };
  settle();
  const tick = () => {
    if (hold.left-- <= 0) {
      hold.stop();
      return;
    }
    settle();
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
}
