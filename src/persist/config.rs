//! The knobs of a persist client ([`PersistConfig`]): leases, inline and part sizes, back-off,
//! compaction, rollups and garbage collection. The defaults are the original's where it has one
//! (a 60 s lease, a rollup every 128 versions); tests and the playground set their own.

use serde::{Deserialize, Serialize};

/// Knobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PersistConfig {
    /// A writer that stays silent this long may be expired by others.
    pub writer_lease_duration_ms: u64,
    /// A leased reader that stays silent this long may be expired by others.
    pub reader_lease_duration_ms: u64,
    /// Batches whose encoding is at most this many bytes are kept inline in state.
    pub inline_writes_single_max_bytes: u64,
    /// Updates per Blob part.
    pub part_max_updates: usize,
    /// The first back-off after a storage error.
    pub backoff_min_ms: u64,
    /// The longest back-off.
    pub backoff_max_ms: u64,
    /// Whether writers compact their shard in the background after each compare_and_append that
    /// appends a batch (see `compact.rs`). Off for benchmarks of the write path.
    pub compaction_enabled: bool,
    /// A routine merge runs only once it has at least this many inputs, or at least
    /// [`PersistConfig::compaction_min_updates`] updates: merging every two tiny batches would
    /// cost a state command per append (the spine still bounds the trace: the groups it plans
    /// grow until they pass the threshold). 2 merges whatever the spine plans.
    pub compaction_min_inputs: usize,
    /// See [`PersistConfig::compaction_min_inputs`].
    pub compaction_min_updates: u64,
    /// How long a routine merge whose output is written waits for an append of its own process
    /// to carry it (commit it together with the append, in one compare_and_set) before it runs
    /// its own command. A writer that appends more often than this pays no Consensus call for
    /// its merges; 0 commits every merge on its own at once.
    pub compaction_carry_wait_ms: u64,
    /// A rollup of the whole state is written every this many seqnos (see `maintenance.rs`); 0
    /// writes none routinely (GC still writes the ones it needs). Routine collections go up to
    /// the newest rollup, so this also sets the pace of GC: each cycle costs a fixed handful of
    /// storage calls (a rollup written, one compare_and_set, a scan, a truncate, the deletes),
    /// which the default, 128 (the original's), spreads over that many commits.
    pub rollup_threshold: u64,
    /// Whether commands trigger garbage collection of blobs and Consensus versions in the
    /// background (see `gc.rs`).
    pub gc_enabled: bool,
    /// Whether this process's commands on one shard take their compare_and_sets in turns, first
    /// come first served (see `turns.rs`), instead of racing each other. Off by default, on every
    /// target alike (the original's way: every command races and retries on a mismatch);
    /// `persistcli` turns it on: against PostgreSQL a writer's own background commands otherwise
    /// lose race after race to its appends, each loss a compare_and_set and a scan (per
    /// compare_and_append in `persistcli bench`, with turns: 1.01 compare_and_sets and 0.11
    /// scans; without: 1.15 and 0.23).
    ///
    /// Why the default is not on natively: the simulator runs natively too, its suites exercise
    /// the retry loop this leaves alone, and one seed must replay the same way natively and in
    /// wasm32, so the default cannot follow the target; nor can it follow the runtime, since a
    /// config is a plain value made before any runtime. A native deployment on a store with real
    /// latency sets it, as `persistcli` does.
    pub command_turns: bool,
}

impl PersistConfig {
    /// The back-off for retrying transient storage errors (doubling from `backoff_min_ms` to
    /// `backoff_max_ms`).
    pub fn backoff(&self) -> crate::retry::Backoff {
        crate::retry::Backoff::new(self.backoff_min_ms, self.backoff_max_ms)
    }
}

impl Default for PersistConfig {
    fn default() -> Self {
        PersistConfig {
            writer_lease_duration_ms: 60_000,
            reader_lease_duration_ms: 60_000,
            inline_writes_single_max_bytes: 4 * 1024,
            part_max_updates: 1024,
            backoff_min_ms: 4,
            backoff_max_ms: 1_000,
            compaction_enabled: true,
            compaction_min_inputs: 8,
            compaction_min_updates: 1024,
            compaction_carry_wait_ms: 20,
            rollup_threshold: 128,
            gc_enabled: true,
            command_turns: false,
        }
    }
}
