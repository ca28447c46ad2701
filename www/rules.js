// The protocol rules a learner may turn off (src/playground/rules.rs) and their one-line
// explanations. Each rule's scenario is its tour, www/tours/rule-RULE.json: the link
// `?preset=RULE&rule=off` opens its broken step, `&rule=on` its intact one (www/tours/engine.js).

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

/** The link to rule `id`'s tour: `on` false at its broken step, true at its intact step. */
export const presetQuery = (id, on) => `?preset=${encodeURIComponent(id)}&rule=${on ? "on" : "off"}`;
