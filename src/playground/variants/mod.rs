//! The playground's variants: each component with one protocol rule taken out, built beside the
//! component from its public API (the components keep only their correct code paths). Which
//! rule each drops, what breaks and what makes it visible is in [`super::rules`].
//!
//! - [`writer`]: a writer without the idempotency token. It wires its process's Consensus with a
//!   [`writer::Tripwire`] that reports an indeterminate compare_and_set, abandons the call there
//!   (the call's token dies with it) and writes the same batch again, with a new call, at
//!   whatever upper the shard then has.
//! - [`oracle`]: an oracle instance that serves from memory past its durable upper and never
//!   allocates another window.
//! - [`upsert`]: an upsert replica whose feedback is what it wrote (or tried to write) itself,
//!   not the shard read back.
//! - [`task`]: a write task that, after an UpperMismatch, adopts the new upper and retries its
//!   old `to_write` instead of re-syncing.

pub mod oracle;
pub mod task;
pub mod upsert;
pub mod writer;
