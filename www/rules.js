// The protocol rules a learner may turn off (src/playground/rules.rs), their one-line
// explanations, and one preset scenario per rule: the command sequence that makes the rule's
// absence visible (the same sequences tests/playground_rules.rs runs, and
// /work/notes/rules-scenarios.md lists). Plain data and a runner; nothing here draws.
//
// A preset opens as a URL, on a fresh empty seed-mode run:
//   ?seed=S&empty=1&autoplay=0&preset=RULE&rule=off   (or rule=on: the same run with the rule kept)

/** Each rule: its id, its key in `snapshot.rules`, a short name, the badge of actors without it. */
export const RULES = [
  {
    id: "idempotency-token",
    key: "idempotencyToken",
    name: "idempotency token",
    badge: "no token",
    text: "compare_and_append keeps one token across its retries, so a write whose acknowledgement was lost is recognised, not written twice. Off: a writer re-appends after a timeout (needs Consensus timeouts).",
  },
  {
    id: "oracle-durable-bound",
    key: "oracleDurableBound",
    name: "oracle durable bound",
    badge: "no durable bound",
    text: "The oracle hands out no timestamp beyond its durable upper before storing a new window, so a restart resumes above them all. Off: it serves past it; crash and restart an oracle running ahead of the clock.",
  },
  {
    id: "upsert-feedback",
    key: "upsertFeedback",
    name: "upsert feedback",
    badge: "own feedback",
    text: "A replica learns its state only from its output read back from the shard, so racing replicas agree. Off: it learns from what it emitted itself; add a second replica after the first has written.",
  },
  {
    id: "task-resync",
    key: "taskResync",
    name: "write task re-sync",
    badge: "no re-sync",
    text: "After an UpperMismatch the write task re-derives to_write = desired − snapshot at the new upper. Off: it retries its old diff there; push rows to two tasks at the same instant.",
  },
];

export const ruleById = (id) => RULES.find((r) => r.id === id);

const consensusTimeouts = (rate) => ({
  type: "setFaults", service: "consensus", knobs: { failRate: 0, timeoutRate: rate, latencyMs: 0, outage: false },
});
const add = (spec) => ({ type: "addActor", spec, process: null });
const task = { kind: "task", shard: "mz_task", tickIntervalMs: 1000, readOnly: false };
const push = (actor, rows) => ({ type: "taskPush", actor, op: { op: "append", rows } });

/**
 * Per rule: the seed, the steps (a command, or `{ runMs }` of virtual time), and `look`: what
 * to look at afterwards. `rule` in a step stands for the setRule command with the chosen state.
 */
export const PRESETS = {
  "idempotency-token": {
    seed: 41,
    look: "the acked-writes check under the Writers panel: values held twice",
    steps: [
      "rule",
      consensusTimeouts(0.3),
      add({ kind: "writer", shard: "data", ratePerS: 20, keyLo: 0, keyHi: 1000, mode: "compareAndAppend" }),
      { runMs: 4000 },
      consensusTimeouts(0),
      { runMs: 1000 },
      { type: "verify" },
      { runMs: 2000 },
    ],
  },
  "oracle-durable-bound": {
    seed: 42,
    look: "the Timestamp oracle panel: O1's first timestamp after the restart against the old instance's last",
    steps: [
      "rule",
      add({ kind: "oracle", timeline: "epoch_ms", persistIntervalMs: 1000, ratePerS: 4, burst: 500 }),
      { runMs: 3000 },
      { type: "crashProcess", process: "P1" },
      { runMs: 100 },
      { type: "restartProcess", process: "P1" },
      { runMs: 3000 },
    ],
  },
  "upsert-feedback": {
    seed: 43,
    look: "the Upsert pipeline panel: the shard against the reference model",
    steps: [
      add({ kind: "replica", readBatch: 4 }),
      { type: "setGenerator", on: true },
      { runMs: 2000 },
      "rule",
      add({ kind: "replica", readBatch: 8 }),
      { runMs: 3000 },
      { type: "setGenerator", on: false },
      { runMs: 2000 },
    ],
  },
  "task-resync": {
    seed: 44,
    look: "the Writers panel: T1's and T2's re-syncs (with the rule) or none (without)",
    steps: [
      "rule",
      add(task),
      add(task),
      { runMs: 500 },
      push("T1", 2), push("T2", 2), { runMs: 1500 },
      push("T1", 3), push("T2", 3), { runMs: 1500 },
      push("T1", 4), push("T2", 4), { runMs: 1500 },
    ],
  },
};

/** The URL of a preset: `on` false breaks the rule, true keeps it (the control run). */
export function presetQuery(id, on) {
  const p = PRESETS[id];
  return `?seed=${p.seed}&empty=1&autoplay=0&preset=${encodeURIComponent(id)}&rule=${on ? "on" : "off"}`;
}

/**
 * Plays preset `id` through `app` (`send(command)`, `runFor(ms)`); throws on an unknown preset.
 * Returns the line to show when it is done.
 */
export function runPreset(app, id, on) {
  const preset = PRESETS[id];
  if (!preset) throw new Error(`unknown preset ${JSON.stringify(id)}: one of ${Object.keys(PRESETS).join(", ")}`);
  for (const step of preset.steps) {
    if (step === "rule") app.send({ type: "setRule", rule: id, on });
    else if (step.runMs) app.runFor(step.runMs);
    else app.send(step);
  }
  return `preset ${id} with the rule ${on ? "on" : "off"}: look at ${preset.look}`;
}
