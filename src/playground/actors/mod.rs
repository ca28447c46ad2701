//! The actors' loops, one file per kind. Each actor runs as one task on the scenario's runtime,
//! inside a process: it uses that process's client and storage gate, and publishes what it is
//! doing into its [`ActorView`](super::actor::ActorView), which snapshots copy. What they share
//! (the views, the context, the constants) is in [`super::actor`], which imports none of these.
//!
//! - [`writer`]: writes generated updates at its cached upper (compare_and_append or append).
//! - [`reader`]: a leased reader listening to its shard, which can hold its since.
//! - [`task`]: a differential write task on its own shard.
//! - [`oracle`]: a durable timestamp oracle instance on a timeline.
//! - [`replica`]: the upsert source and its replicas racing to write [`UPSERT_SHARD`](super::command::UPSERT_SHARD).

pub mod oracle;
pub mod reader;
pub mod replica;
pub mod task;
pub mod writer;
