//! Structured payloads of the merged log's events: a [`Fact`] says, as plain data, what an event
//! records, so that the history checker (the `check` module, which builds on this one) can read the log without parsing its
//! text. An event's `detail` stays the line the log view shows; its `fact`, when it has one, is
//! what a check reads.
//!
//! Facts come from three kinds of witnesses, and the checks compare them:
//! - **the store's observer** reads every new version of every observed shard and oracle timeline
//!   straight from Consensus (no faults, no process gate): seqnos, uppers, sinces, the batches each
//!   version adds, with a digest of every appended update ([`Fact::ShardVersions`],
//!   [`Fact::ShardBaseline`], [`Fact::TimelineVersion`]);
//! - **the actors** say what they were told: a writer's acknowledged append with the digests of
//!   its values ([`Fact::Append`]), a write task's commit with the fingerprint of its desired
//!   collection ([`Fact::TaskWrite`]), an oracle's timestamps and windows ([`Fact::OracleTs`],
//!   [`Fact::OracleWindow`]), the upsert source's messages ([`Fact::UpsertSource`]);
//! - **the scenario** says what it did to them: faults, crashes, restarts, corruption
//!   ([`Fact::Faults`], [`Fact::FaultFired`], [`Fact::Crash`], [`Fact::Restart`],
//!   [`Fact::Corrupt`]).
//!
//! Frontiers are `Option<u64>`, `None` being the empty frontier ("finished"). Digests are 53-bit
//! (so they cross into JavaScript as exact numbers): [`digest`] of an update's encoded key and
//! value, and [`mask`] of a 64-bit fingerprint.

use serde::{Deserialize, Serialize};

/// The largest digest: digests keep 53 bits, so JavaScript numbers hold them exactly.
pub const DIGEST_MASK: u64 = (1 << 53) - 1;

/// The most updates the observer itemizes for one appended batch; a larger batch is reported
/// with `updates: None` and its values are not checked one by one.
pub const MAX_ITEMIZED: usize = 4_096;

/// A 64-bit fingerprint cut to 53 bits.
pub fn mask(fingerprint: u64) -> u64 {
    fingerprint & DIGEST_MASK
}

/// The digest of one update's encoded key and value (FNV-1a over both, length-prefixed).
pub fn digest(key: &[u8], value: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [key, value] {
        for b in (part.len() as u64).to_le_bytes().iter().chain(part) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    mask(h)
}

/// A batch a shard version adds to its trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchFact {
    /// Its lower.
    pub lower: u64,
    /// Its upper (`None`: the empty frontier).
    pub upper: Option<u64>,
    /// Its updates.
    pub len: u64,
    /// For a batch that extends the shard's upper (an append, not a merge): the digest and diff
    /// of every update inside `[lower, upper)`, or `None` if it was too big or unreadable.
    pub updates: Option<Vec<(u64, i64)>>,
}

/// A handle whose frontier a version sets (or removes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HandleFact {
    /// The persist id (`w…` writer, `r…` leased reader).
    pub id: String,
    /// A writer's most recent upper or a reader's since; `None` with `removed`.
    pub frontier: Option<u64>,
    /// The version removes the handle (expired).
    pub removed: bool,
}

/// One version of a shard, as the store's observer decoded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionFact {
    /// Its seqno.
    pub seqno: u64,
    /// The seqno its diff applies to (the previous version's).
    pub seqno_from: u64,
    /// The shard's upper after it.
    pub upper: Option<u64>,
    /// The shard's since after it.
    pub since: Option<u64>,
    /// Batches it inserts (or replaces, keyed by lower).
    pub batches: Vec<BatchFact>,
    /// Lowers of the batches it removes.
    pub removed: Vec<u64>,
    /// Handles it changes.
    pub handles: Vec<HandleFact>,
    /// The fingerprint ([`mask`]ed [`crate::write_task::ops::fingerprint`]) of the shard's
    /// contents after it, for shards whose contents the observer keeps (write-task shards).
    pub contents: Option<u64>,
}

/// One upsert source message, as the reference model needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageFact {
    /// Its offset in the source log.
    pub offset: u64,
    /// Its key.
    pub key: i64,
    /// Its time.
    pub ts: u64,
    /// The [`digest`] of the output update it stands for (`None`: a delete).
    pub output: Option<u64>,
}

/// What came of an attempt, in a fact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AttemptOutcome {
    /// It committed.
    Committed,
    /// The shard's upper was not the expected one; nothing was written.
    Mismatch,
    /// It may or may not have committed.
    Indeterminate,
}

/// A structured payload of a log event. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Fact {
    /// The observer's starting point for a shard: its state at `seqno` (on the first read, and
    /// again whenever versions it had not read yet were truncated away).
    ShardBaseline {
        /// The shard.
        shard: String,
        /// The seqno of the state read.
        seqno: u64,
        /// Its upper.
        upper: Option<u64>,
        /// Its since.
        since: Option<u64>,
        /// Every batch of its trace, oldest first (`updates` not itemized).
        batches: Vec<BatchFact>,
        /// Its handles.
        handles: Vec<HandleFact>,
        /// See [`VersionFact::contents`].
        contents: Option<u64>,
    },
    /// New versions of a shard, oldest first, read in one pass of the observer.
    ShardVersions {
        /// The shard.
        shard: String,
        /// The versions.
        versions: Vec<VersionFact>,
    },
    /// A version of an oracle timeline's durable record, read by the observer.
    TimelineVersion {
        /// The timeline.
        timeline: String,
        /// The version's seqno.
        seqno: u64,
        /// The epoch stored.
        epoch: u64,
        /// The durable upper stored: every timestamp handed out is below it.
        durable_upper: u64,
    },
    /// A writer's compare_and_append (or append) came back.
    Append {
        /// The shard.
        shard: String,
        /// The writer's persist id.
        writer: String,
        /// `compareAndAppend` or `append` (append trims what a peer wrote: not checked for loss).
        mode: String,
        /// The expected upper (the batch's lower).
        lower: u64,
        /// The new upper.
        upper: u64,
        /// What came of it.
        outcome: AttemptOutcome,
        /// Updates carried.
        updates: u64,
        /// On a commit, the [`digest`] of every acknowledged value (empty otherwise).
        acked: Vec<u64>,
        /// On a mismatch, the shard's upper it learned.
        current: Option<u64>,
    },
    /// A write task's write came back (or it adopted a new upper by re-syncing).
    TaskWrite {
        /// The shard.
        shard: String,
        /// The upper the task expected.
        expected_upper: Option<u64>,
        /// On a commit, the new upper; on a mismatch, the shard's upper; on a re-sync, the
        /// adopted upper.
        upper: Option<u64>,
        /// `committed`, `mismatch`, `indeterminate` (timed out) or `resynced`.
        what: String,
        /// Updates carried (commit).
        updates: u64,
        /// On a commit: the [`mask`]ed fingerprint of `desired`, which the shard must now equal.
        desired: Option<u64>,
    },
    /// An oracle instance opened (it fenced every earlier instance of its timeline).
    OracleOpened {
        /// The timeline.
        timeline: String,
        /// Its epoch.
        epoch: u64,
        /// Its first timestamp.
        start_ts: u64,
        /// Its first durable upper.
        durable_upper: u64,
    },
    /// An oracle instance made a new window durable.
    OracleWindow {
        /// The timeline.
        timeline: String,
        /// Its epoch.
        epoch: u64,
        /// The timestamp that needed it (`None`: a write of its own that timed out, found in
        /// the store and adopted).
        for_ts: Option<u64>,
        /// The new durable upper.
        durable_upper: u64,
    },
    /// An oracle instance handed out a write timestamp, applied it, and then a read timestamp.
    OracleTs {
        /// The timeline.
        timeline: String,
        /// Its epoch.
        epoch: u64,
        /// The write timestamp.
        write_ts: u64,
        /// The read timestamp after `apply_write(write_ts)`.
        read_ts: u64,
    },
    /// The upsert source log grew (or its upper moved).
    UpsertSource {
        /// The source log's upper: every message before it is in the log.
        upper: u64,
        /// The new messages, by offset.
        messages: Vec<MessageFact>,
    },
    /// A fault knob was set.
    Faults {
        /// `blob` or `consensus`.
        service: String,
        /// Calls failing, per thousand.
        fail_per_mille: u32,
        /// Calls timing out, per thousand.
        timeout_per_mille: u32,
        /// Extra latency per call.
        latency_ms: u64,
        /// A full outage.
        outage: bool,
    },
    /// A storage call failed (an injected fault, or a corrupted record read back).
    FaultFired {
        /// `blob` or `consensus`.
        service: String,
        /// The call (`get`, `set`, `compare_and_set`, ...).
        op: String,
        /// The error.
        error: String,
        /// Whether the call may have happened anyway.
        indeterminate: bool,
    },
    /// A process crashed.
    Crash {
        /// The process.
        process: String,
    },
    /// A crashed process restarted as a new one.
    Restart {
        /// The crashed process.
        process: String,
        /// The new process.
        as_process: String,
    },
    /// A Consensus record was overwritten with garbage.
    Corrupt {
        /// The key.
        key: String,
    },
}

impl Fact {
    /// Whether the fact is a fault the scenario injected (violations cite those beside them).
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            Fact::Faults { .. }
                | Fact::FaultFired { .. }
                | Fact::Crash { .. }
                | Fact::Restart { .. }
                | Fact::Corrupt { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_fit_53_bits_and_tell_key_from_value() {
        assert!(digest(b"k1", b"v") <= DIGEST_MASK);
        assert_ne!(digest(b"k1", b"v"), digest(b"k", b"1v"));
        assert_eq!(digest(b"a", b""), digest(b"a", b""));
    }

    #[test]
    fn facts_are_tagged_camel_case_json() {
        let f = Fact::Crash {
            process: "P1".into(),
        };
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(json, r#"{"type":"crash","process":"P1"}"#);
        let back: Fact = serde_json::from_str(&json).unwrap();
        assert_eq!(back, f);
        let r = Fact::Restart {
            process: "P1".into(),
            as_process: "P2".into(),
        };
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"asProcess\":\"P2\""), "{json}");
    }
}
