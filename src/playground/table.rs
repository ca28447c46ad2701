//! The page's one table of fixed facts, beside the snapshot: what the page draws and sends that
//! does not change during a run. The page reads it once at start-up (`pageTable()` in
//! `src/wasm.rs`) and keeps no copy of its own.
//!
//! - `rules`: every [`Rule`], in the page's order, with its id, its field in the snapshot's
//!   `rules`, its name, its badge and its text ([`RuleInfo`]): the Rules control and the badges
//!   on actors running without a rule are drawn from it;
//! - `defaults`: one [`ActorSpec`] per kind, the one its Add button sends (the kind's `Default`
//!   spec in [`super::command`]; the page fills in only the fields its controls set);
//! - `defaultActors`: the scenario a newcomer meets ([`default_actors`]), which the page starts
//!   when it opens without `?empty=1`, a tour or a share link.

use serde::Serialize;

use super::command::{ActorSpec, OracleSpec, ReaderSpec, ReplicaSpec, TaskSpec, WriterSpec};
use super::rules::{Rule, RuleInfo};

/// See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PageTable {
    /// Every rule, in [`Rule::ALL`]'s order.
    pub rules: Vec<RuleInfo>,
    /// Each kind's default spec.
    pub defaults: SpecDefaults,
    /// See [`default_actors`].
    pub default_actors: Vec<ActorSpec>,
}

/// One default spec per kind of actor, each tagged with its `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpecDefaults {
    /// [`WriterSpec::default`].
    pub writer: ActorSpec,
    /// [`ReaderSpec::default`].
    pub reader: ActorSpec,
    /// [`TaskSpec::default`].
    pub task: ActorSpec,
    /// [`OracleSpec::default`].
    pub oracle: ActorSpec,
    /// [`ReplicaSpec::default`].
    pub replica: ActorSpec,
}

impl Default for SpecDefaults {
    fn default() -> Self {
        SpecDefaults {
            writer: ActorSpec::Writer(WriterSpec::default()),
            reader: ActorSpec::Reader(ReaderSpec::default()),
            task: ActorSpec::Task(TaskSpec::default()),
            oracle: ActorSpec::Oracle(OracleSpec::default()),
            replica: ActorSpec::Replica(ReplicaSpec::default()),
        }
    }
}

/// The scenario a newcomer meets: two writers racing on `data`, a reader listening to it, a
/// write task, an oracle instance and two upsert replicas (the page then turns the generator
/// on). Each in a process of its own.
pub fn default_actors() -> Vec<ActorSpec> {
    vec![
        ActorSpec::Writer(WriterSpec::default()),
        ActorSpec::Writer(WriterSpec::default()),
        ActorSpec::Reader(ReaderSpec::default()),
        ActorSpec::Task(TaskSpec::default()),
        ActorSpec::Oracle(OracleSpec::default()),
        ActorSpec::Replica(ReplicaSpec { read_batch: 4 }),
        ActorSpec::Replica(ReplicaSpec { read_batch: 2 }),
    ]
}

impl Default for PageTable {
    fn default() -> Self {
        PageTable {
            rules: Rule::ALL.into_iter().map(RuleInfo::from).collect(),
            defaults: SpecDefaults::default(),
            default_actors: default_actors(),
        }
    }
}
