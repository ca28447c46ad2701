//! The protocol rules a learner may turn off, one per component, to see why each exists.
//!
//! All four are on by default. [`Command::SetRule`](super::Command::SetRule) turns one off or
//! on; the switch applies to **actors added from then on**: an actor takes the variant (the code
//! path without the rule, in the `variants` module) when it is added, and keeps it for its life,
//! through crashes, restarts and changes of its knobs (a restarted process runs the same code).
//! Actors already running keep what they were started with. The snapshot carries the switches
//! ([`Rules`]) and every actor's `ActorView::variant` (module `actor`), so the
//! page shows which rules are off and marks the actors running without one.
//!
//! The components themselves keep only their correct code paths: the variants are built beside
//! them, from their public API.
//!
//! - [`Rule::IdempotencyToken`]: *a compare_and_append carries one idempotency token across its
//!   retries.* Without it, a writer whose write timed out cannot tell whether its batch landed;
//!   when the shard's upper has moved it takes that for a lost race and writes the batch again at
//!   the new upper, so an acknowledged write lands twice. Visible with Consensus timeouts on (a
//!   timeout after the compare_and_set happened): `Verify` counts duplicated values.
//! - [`Rule::OracleDurableBound`]: *the oracle hands out no timestamp at or beyond its durable
//!   upper before allocating a new window.* Without it, an instance serves from memory past the
//!   only window it made durable; after a crash and restart the new instance resumes at that
//!   stale upper and hands out timestamps that go back below, or repeat, ones already handed out.
//!   Visible when the timeline runs ahead of the clock (an oracle with a burst of many
//!   timestamps per tick), then a crash and restart of its process.
//! - [`Rule::UpsertFeedback`]: *an upsert replica learns its state only from its output read
//!   back from the shard.* Without it, the replica learns from what it emitted itself; a replica
//!   that starts (or restarts) over a non-empty shard believes the shard is empty, inserts new
//!   values without retracting the old ones, and the output diverges from the reference model.
//!   Visible with two replicas racing, the second added after the first has written.
//! - [`Rule::TaskResync`]: *after an UpperMismatch, the write task re-derives
//!   `to_write = desired - snapshot` at the shard's new upper.* Without it, the task retries its
//!   old diff at the new upper, on top of whatever the other writer wrote, and the shard stops
//!   equalling the task's desired collection. Visible with two write tasks on one shard, both
//!   pushed rows at once.

use serde::{Deserialize, Serialize};

/// One protocol rule, in JSON by its id ([`Rule::id`], kebab-case: `idempotency-token`). See the
/// module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    /// compare_and_append's idempotency token (writers).
    IdempotencyToken,
    /// The oracle's durable upper bound (oracle instances).
    OracleDurableBound,
    /// Upsert's state from its output read back (upsert replicas).
    UpsertFeedback,
    /// The write task's re-sync after an UpperMismatch (write tasks).
    TaskResync,
}

impl Rule {
    /// Every rule, in the page's order.
    pub const ALL: [Rule; 4] = [
        Rule::IdempotencyToken,
        Rule::OracleDurableBound,
        Rule::UpsertFeedback,
        Rule::TaskResync,
    ];

    /// Its id, as in JSON.
    pub fn id(self) -> &'static str {
        match self {
            Rule::IdempotencyToken => "idempotency-token",
            Rule::OracleDurableBound => "oracle-durable-bound",
            Rule::UpsertFeedback => "upsert-feedback",
            Rule::TaskResync => "task-resync",
        }
    }

    /// The kind of actor it governs, plural, for messages.
    pub fn actors(self) -> &'static str {
        match self {
            Rule::IdempotencyToken => "writers",
            Rule::OracleDurableBound => "oracle instances",
            Rule::UpsertFeedback => "upsert replicas",
            Rule::TaskResync => "write tasks",
        }
    }
}

impl Rule {
    /// Its field in the snapshot's [`Rules`] (camelCase, as in JSON).
    pub fn key(self) -> &'static str {
        match self {
            Rule::IdempotencyToken => "idempotencyToken",
            Rule::OracleDurableBound => "oracleDurableBound",
            Rule::UpsertFeedback => "upsertFeedback",
            Rule::TaskResync => "taskResync",
        }
    }

    /// Its short name, as the page's Rules control shows it.
    pub fn name(self) -> &'static str {
        match self {
            Rule::IdempotencyToken => "idempotency token",
            Rule::OracleDurableBound => "oracle durable bound",
            Rule::UpsertFeedback => "upsert feedback",
            Rule::TaskResync => "write task re-sync",
        }
    }

    /// The badge on an actor that runs without it.
    pub fn badge(self) -> &'static str {
        match self {
            Rule::IdempotencyToken => "no token",
            Rule::OracleDurableBound => "no durable bound",
            Rule::UpsertFeedback => "own feedback",
            Rule::TaskResync => "no re-sync",
        }
    }

    /// Its one-line explanation: what it guarantees, and how to see it broken.
    pub fn text(self) -> &'static str {
        match self {
            Rule::IdempotencyToken => {
                "compare_and_append keeps one token across its retries, so a write whose \
                 acknowledgement was lost is recognised, not written twice. Off: a writer \
                 re-appends after a timeout (needs Consensus timeouts)."
            }
            Rule::OracleDurableBound => {
                "The oracle hands out no timestamp beyond its durable upper before storing a new \
                 window, so a restart resumes above them all. Off: it serves past it; crash and \
                 restart an oracle running ahead of the clock."
            }
            Rule::UpsertFeedback => {
                "A replica learns its state only from its output read back from the shard, so \
                 racing replicas agree. Off: it learns from what it emitted itself; add a second \
                 replica after the first has written."
            }
            Rule::TaskResync => {
                "After an UpperMismatch the write task re-derives to_write = desired − snapshot \
                 at the new upper. Off: it retries its old diff there; push rows to two tasks at \
                 the same instant."
            }
        }
    }
}

/// What the page shows of one rule (its row in the `table` module's `PageTable`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleInfo {
    /// [`Rule::id`].
    pub id: Rule,
    /// [`Rule::key`].
    pub key: &'static str,
    /// [`Rule::name`].
    pub name: &'static str,
    /// [`Rule::badge`].
    pub badge: &'static str,
    /// [`Rule::text`].
    pub text: &'static str,
}

impl From<Rule> for RuleInfo {
    fn from(rule: Rule) -> Self {
        RuleInfo {
            id: rule,
            key: rule.key(),
            name: rule.name(),
            badge: rule.badge(),
            text: rule.text(),
        }
    }
}

// By hand, through its id: smaller in the page's wasm than the derived visitors.
impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
    }
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Rule::from_id(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl Rule {
    /// The rule of id `id` ([`Rule::id`]).
    pub fn from_id(id: &str) -> Result<Rule, UnknownRule> {
        Rule::ALL
            .into_iter()
            .find(|r| r.id() == id)
            .ok_or_else(|| UnknownRule(id.to_string()))
    }
}

/// A rule id that is none of [`Rule::ALL`]'s. Its message lists them (from [`Rule::id`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct UnknownRule(pub String);

impl std::fmt::Display for UnknownRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown rule {:?}: one of ", self.0)?;
        for (i, rule) in Rule::ALL.into_iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{}", rule.id())?;
        }
        Ok(())
    }
}

/// Which rules are on (all, by default). See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rules {
    /// See [`Rule::IdempotencyToken`].
    pub idempotency_token: bool,
    /// See [`Rule::OracleDurableBound`].
    pub oracle_durable_bound: bool,
    /// See [`Rule::UpsertFeedback`].
    pub upsert_feedback: bool,
    /// See [`Rule::TaskResync`].
    pub task_resync: bool,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            idempotency_token: true,
            oracle_durable_bound: true,
            upsert_feedback: true,
            task_resync: true,
        }
    }
}

impl Rules {
    fn slot(&mut self, rule: Rule) -> &mut bool {
        match rule {
            Rule::IdempotencyToken => &mut self.idempotency_token,
            Rule::OracleDurableBound => &mut self.oracle_durable_bound,
            Rule::UpsertFeedback => &mut self.upsert_feedback,
            Rule::TaskResync => &mut self.task_resync,
        }
    }

    /// Whether `rule` is on.
    pub fn is_on(mut self, rule: Rule) -> bool {
        *self.slot(rule)
    }

    /// Turns `rule` on or off.
    pub fn set(&mut self, rule: Rule, on: bool) {
        *self.slot(rule) = on;
    }
}
