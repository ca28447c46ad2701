//! Everything the page can ask of a scenario, as one serde enum, and the specs of the actors it
//! can add. Their JSON is what `Serialize` writes; they are read back by hand
//! (the `decode` module, above this one), to the same shapes. A command is checked ([`Command::validate`]) before it touches the scenario, so a bad
//! field value is an error with a message and changes nothing.
//!
//! In seed mode every applied command is kept with its [`Stamp`]: the simulator step and virtual
//! time at which it applied. A run is a function of its seed and its stamped commands
//! ([`super::Scenario::replay`]).

use serde::Serialize;

use super::rules::{Rule, Rules};

/// The most writes per second one writer may generate.
pub const MAX_RATE_PER_S: u32 = 1_000;
/// The largest key index a writer may use.
pub const MAX_KEY: u32 = 1_000_000;
/// The longest injected latency.
pub const MAX_LATENCY_MS: u64 = 10_000;
/// The most actors a scenario holds.
pub const MAX_ACTORS: usize = 32;
/// The most write timestamps an oracle takes back to back.
pub const MAX_BURST: u32 = 10_000;

/// The shard every upsert replica writes (the page reads it from the snapshot's specs).
pub const UPSERT_SHARD: &str = "upsert_out";

/// How a writer writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub enum WriteMode {
    /// `compare_and_append` at the writer's upper: loses a race with an `UpperMismatch`.
    #[default]
    CompareAndAppend,
    /// `append`: made for replicas writing identical data, it trims what a peer already wrote.
    Append,
}

/// A writer: a WriteHandle loop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriterSpec {
    /// The shard it writes.
    pub shard: String,
    /// Updates generated per second.
    pub rate_per_s: u32,
    /// The first key index (keys are `k0000`...).
    pub key_lo: u32,
    /// One past the last key index.
    pub key_hi: u32,
    /// compare_and_append or append.
    pub mode: WriteMode,
}

impl Default for WriterSpec {
    fn default() -> Self {
        WriterSpec {
            shard: "data".into(),
            rate_per_s: 4,
            key_lo: 0,
            key_hi: 16,
            mode: WriteMode::CompareAndAppend,
        }
    }
}

/// A reader: a leased reader that listens to a shard and holds a since.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReaderSpec {
    /// The shard it reads.
    pub shard: String,
    /// While true the reader stops consuming its listen, so its since (and the shard's) stays.
    pub hold: bool,
}

impl Default for ReaderSpec {
    fn default() -> Self {
        ReaderSpec {
            shard: "data".into(),
            hold: false,
        }
    }
}

/// A differential write task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    /// The shard it keeps equal to its desired collection.
    pub shard: String,
    /// The period of its upper tick.
    pub tick_interval_ms: u64,
    /// Read-only: keeps `desired`, never writes.
    pub read_only: bool,
}

impl Default for TaskSpec {
    fn default() -> Self {
        TaskSpec {
            shard: "mz_task".into(),
            tick_interval_ms: 1_000,
            read_only: false,
        }
    }
}

/// A durable timestamp oracle instance that hands out write timestamps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OracleSpec {
    /// The timeline (instances on one timeline fence each other).
    pub timeline: String,
    /// The window of timestamps made durable per allocation.
    pub persist_interval_ms: u64,
    /// Write timestamps taken per second.
    pub rate_per_s: u32,
    /// Write timestamps taken back to back at each of those instants (1 by default). A busy
    /// coordinator takes many per millisecond, and the timeline then runs ahead of the clock.
    pub burst: u32,
}

impl Default for OracleSpec {
    fn default() -> Self {
        OracleSpec {
            timeline: "epoch_ms".into(),
            persist_interval_ms: 1_000,
            rate_per_s: 4,
            burst: 1,
        }
    }
}

/// An upsert replica: reads the shared source log, writes the upsert shard, and learns its
/// state from what the shard holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSpec {
    /// Source messages it reads per driver step: its speed.
    pub read_batch: u32,
}

impl Default for ReplicaSpec {
    fn default() -> Self {
        ReplicaSpec { read_batch: 4 }
    }
}

/// What an actor is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ActorSpec {
    /// See [`WriterSpec`].
    Writer(WriterSpec),
    /// See [`ReaderSpec`].
    Reader(ReaderSpec),
    /// See [`TaskSpec`].
    Task(TaskSpec),
    /// See [`OracleSpec`].
    Oracle(OracleSpec),
    /// See [`ReplicaSpec`].
    Replica(ReplicaSpec),
}

impl ActorSpec {
    /// The letter of actor ids of this kind (`W1`, `R1`, `T1`, `O1`).
    pub fn letter(&self) -> char {
        match self {
            ActorSpec::Writer(_) => 'W',
            ActorSpec::Reader(_) => 'R',
            ActorSpec::Task(_) => 'T',
            ActorSpec::Oracle(_) => 'O',
            ActorSpec::Replica(_) => 'U',
        }
    }

    /// The rule that governs actors of this kind, if any (readers have none).
    pub fn rule(&self) -> Option<Rule> {
        match self {
            ActorSpec::Writer(_) => Some(Rule::IdempotencyToken),
            ActorSpec::Oracle(_) => Some(Rule::OracleDurableBound),
            ActorSpec::Replica(_) => Some(Rule::UpsertFeedback),
            ActorSpec::Task(_) => Some(Rule::TaskResync),
            ActorSpec::Reader(_) => None,
        }
    }

    /// The variant an actor of this spec added now runs: the rule it runs without, if `rules`
    /// has it off.
    pub fn variant(&self, rules: Rules) -> Option<Rule> {
        self.rule().filter(|r| !rules.is_on(*r))
    }

    /// The shard or timeline the actor works on.
    pub fn target(&self) -> &str {
        match self {
            ActorSpec::Writer(s) => &s.shard,
            ActorSpec::Reader(s) => &s.shard,
            ActorSpec::Task(s) => &s.shard,
            ActorSpec::Oracle(s) => &s.timeline,
            ActorSpec::Replica(_) => UPSERT_SHARD,
        }
    }
}

/// Which storage service a fault knob applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Service {
    /// Blob.
    Blob,
    /// Consensus.
    Consensus,
}

/// The fault knobs of one service.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultKnobs {
    /// The chance that a call fails without happening (0 to 1).
    pub fail_rate: f64,
    /// The chance that a call reports a timeout, whether it happened or not (0 to 1).
    pub timeout_rate: f64,
    /// Extra latency before every call.
    pub latency_ms: u64,
    /// A full outage: every call fails (determinately) until the outage ends.
    pub outage: bool,
}

impl Default for FaultKnobs {
    fn default() -> Self {
        FaultKnobs {
            fail_rate: 0.0,
            timeout_rate: 0.0,
            latency_ms: 0,
            outage: false,
        }
    }
}

/// A desired-state command for a write task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum TaskOp {
    /// Adds `rows` new rows to `desired`.
    Append {
        /// How many.
        rows: u32,
    },
    /// Deletes the oldest row from `desired`.
    DeleteOldest,
}

/// One command. See the module docs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Command {
    /// Adds an actor to `process` (an existing live process) or, without one, to a new process.
    #[serde(rename_all = "camelCase")]
    AddActor {
        /// What to add.
        spec: ActorSpec,
        /// Where; `None` starts a new process.
        process: Option<String>,
    },
    /// Stops an actor for good (its handles expire gracefully).
    #[serde(rename_all = "camelCase")]
    RemoveActor {
        /// Its id.
        actor: String,
    },
    /// Changes a writer's rate, keys and mode (it restarts its loop, keeping its handle's process).
    #[serde(rename_all = "camelCase")]
    SetWriter {
        /// The writer.
        actor: String,
        /// The new spec (its shard must stay the same).
        spec: WriterSpec,
    },
    /// Holds or releases a reader's since.
    #[serde(rename_all = "camelCase")]
    SetReaderHold {
        /// The reader.
        actor: String,
        /// Hold?
        hold: bool,
    },
    /// Changes a write task's tick interval and read-only flag (the task is restarted in place).
    #[serde(rename_all = "camelCase")]
    SetTask {
        /// The task.
        actor: String,
        /// New tick interval.
        tick_interval_ms: u64,
        /// New read-only flag.
        read_only: bool,
    },
    /// Sends a desired-state command to a write task.
    #[serde(rename_all = "camelCase")]
    TaskPush {
        /// The task.
        actor: String,
        /// The command.
        op: TaskOp,
    },
    /// Crashes a process: its actors stop mid-command, its storage calls never return.
    #[serde(rename_all = "camelCase")]
    CrashProcess {
        /// The process.
        process: String,
    },
    /// Starts a crashed process's actors again, in a new process with a fresh client.
    #[serde(rename_all = "camelCase")]
    RestartProcess {
        /// The crashed process.
        process: String,
    },
    /// Sets the fault knobs of one service.
    #[serde(rename_all = "camelCase")]
    SetFaults {
        /// Blob or Consensus.
        service: Service,
        /// The knobs.
        knobs: FaultKnobs,
    },
    /// Writes a version of garbage bytes at the head of a Consensus key (a shard or an oracle
    /// timeline): whoever reads it next gets a decode error.
    #[serde(rename_all = "camelCase")]
    CorruptRecord {
        /// The shard name, or `timestamp_oracle/<timeline>`.
        key: String,
    },
    /// Reads the writers' shard and checks that every acknowledged write is in it.
    Verify,
    /// Pushes one upsert into the source log at its upper (`value: None` deletes the key).
    #[serde(rename_all = "camelCase")]
    PushUpsert {
        /// The key, 0 to 1000.
        key: i64,
        /// The value, or `None` for a delete.
        value: Option<String>,
    },
    /// Turns the seeded upsert generator on or off.
    #[serde(rename_all = "camelCase")]
    SetGenerator {
        /// On?
        on: bool,
    },
    /// Whether the upsert generator makes undecodable values on purpose (about 1 upsert in 20,
    /// to show an error travelling through the pipeline; on at the start).
    #[serde(rename_all = "camelCase")]
    SetUndecodable {
        /// Make them?
        on: bool,
    },
    /// Takes one timely step of every running replica by hand: feed back what the shard
    /// delivered, read source messages, exactly one `worker.step()`, hand its output to the sink
    /// (the sink's write happens in the replica's driver, when the run goes on).
    StepReplicas,
    /// Turns a protocol rule off or on ([`super::rules`]). Only actors added afterwards take
    /// the change: each keeps the code it was added with for its life (restarts included), and
    /// the page marks the ones running without a rule.
    #[serde(rename_all = "camelCase")]
    SetRule {
        /// Which rule.
        rule: Rule,
        /// On (the correct protocol) or off (the variant).
        on: bool,
    },
}

/// Why a command was refused. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CommandError(pub String);

fn bad<T>(msg: impl Into<String>) -> Result<T, CommandError> {
    Err(CommandError(msg.into()))
}

fn check_name(what: &str, name: &str) -> Result<(), CommandError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        bad(format!(
            "{what} {name:?} must be 1 to 64 letters, digits, '_' or '-'"
        ))
    }
}

fn check_rate(what: &str, rate: u32) -> Result<(), CommandError> {
    if rate == 0 || rate > MAX_RATE_PER_S {
        return bad(format!(
            "{what} rate must be 1 to {MAX_RATE_PER_S} per second, not {rate}"
        ));
    }
    Ok(())
}

fn check_rate01(what: &str, rate: f64) -> Result<(), CommandError> {
    if !(0.0..=1.0).contains(&rate) {
        return bad(format!("{what} must be between 0 and 1, not {rate}"));
    }
    Ok(())
}

fn check_tick(ms: u64) -> Result<(), CommandError> {
    if !(10..=60_000).contains(&ms) {
        return bad(format!("tick interval must be 10 to 60000 ms, not {ms}"));
    }
    Ok(())
}

impl WriterSpec {
    /// Checks the fields.
    pub fn validate(&self) -> Result<(), CommandError> {
        check_name("shard", &self.shard)?;
        check_rate("writer", self.rate_per_s)?;
        if self.key_lo >= self.key_hi || self.key_hi > MAX_KEY {
            return bad(format!(
                "writer keys must satisfy 0 <= lo < hi <= {MAX_KEY}, not [{}, {})",
                self.key_lo, self.key_hi
            ));
        }
        Ok(())
    }
}

impl ActorSpec {
    /// Checks the fields.
    pub fn validate(&self) -> Result<(), CommandError> {
        match self {
            ActorSpec::Writer(s) => s.validate(),
            ActorSpec::Reader(s) => check_name("shard", &s.shard),
            ActorSpec::Task(s) => {
                check_name("shard", &s.shard)?;
                check_tick(s.tick_interval_ms)
            }
            ActorSpec::Replica(s) => {
                if !(1..=64).contains(&s.read_batch) {
                    return bad(format!(
                        "a replica reads 1 to 64 messages per step, not {}",
                        s.read_batch
                    ));
                }
                Ok(())
            }
            ActorSpec::Oracle(s) => {
                check_name("timeline", &s.timeline)?;
                check_rate("oracle", s.rate_per_s)?;
                if !(1..=3_600_000).contains(&s.persist_interval_ms) {
                    return bad(format!(
                        "oracle window must be 1 to 3600000 ms, not {}",
                        s.persist_interval_ms
                    ));
                }
                if !(1..=MAX_BURST).contains(&s.burst) {
                    return bad(format!(
                        "an oracle burst is 1 to {MAX_BURST} timestamps, not {}",
                        s.burst
                    ));
                }
                Ok(())
            }
        }
    }
}

impl Command {
    /// Checks every field that does not need the scenario (ids are checked when applied).
    pub fn validate(&self) -> Result<(), CommandError> {
        match self {
            Command::AddActor { spec, .. } => spec.validate(),
            Command::SetWriter { spec, .. } => spec.validate(),
            Command::SetTask {
                tick_interval_ms, ..
            } => check_tick(*tick_interval_ms),
            Command::TaskPush {
                op: TaskOp::Append { rows },
                ..
            } => {
                if *rows == 0 || *rows > 1_000 {
                    return bad(format!("a task append takes 1 to 1000 rows, not {rows}"));
                }
                Ok(())
            }
            Command::SetFaults { knobs, .. } => {
                check_rate01("fail rate", knobs.fail_rate)?;
                check_rate01("timeout rate", knobs.timeout_rate)?;
                if knobs.latency_ms > MAX_LATENCY_MS {
                    return bad(format!(
                        "latency must be at most {MAX_LATENCY_MS} ms, not {}",
                        knobs.latency_ms
                    ));
                }
                Ok(())
            }
            Command::CorruptRecord { key } => {
                if key.is_empty() || key.len() > 200 {
                    return bad("the key to corrupt must be 1 to 200 characters");
                }
                Ok(())
            }
            Command::PushUpsert { key, value } => {
                if !(0..=1_000).contains(key) {
                    return bad(format!("an upsert key must be 0 to 1000, not {key}"));
                }
                if value.as_ref().is_some_and(|v| v.is_empty() || v.len() > 64) {
                    return bad("an upsert value must be 1 to 64 characters (or none, to delete)");
                }
                Ok(())
            }
            Command::SetGenerator { .. }
            | Command::SetUndecodable { .. }
            | Command::StepReplicas
            | Command::SetRule { .. } => Ok(()),
            Command::RemoveActor { .. }
            | Command::SetReaderHold { .. }
            | Command::TaskPush { .. }
            | Command::CrashProcess { .. }
            | Command::RestartProcess { .. }
            | Command::Verify => Ok(()),
        }
    }
}

/// When a command applied, in seed mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stamp {
    /// Simulator steps taken before it applied.
    pub step: u64,
    /// The virtual time it applied at.
    pub at_ms: u64,
}

/// A command with its stamp.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stamped {
    /// When.
    pub stamp: Stamp,
    /// What.
    pub command: Command,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_start_on_and_only_their_own_kind_takes_a_variant() {
        let mut rules = Rules::default();
        assert!(Rule::ALL.iter().all(|r| rules.is_on(*r)));
        let writer = ActorSpec::Writer(WriterSpec::default());
        let reader = ActorSpec::Reader(ReaderSpec::default());
        assert_eq!(writer.variant(rules), None);
        rules.set(Rule::IdempotencyToken, false);
        assert_eq!(writer.variant(rules), Some(Rule::IdempotencyToken));
        assert_eq!(reader.variant(rules), None);
        rules.set(Rule::TaskResync, false);
        assert_eq!(writer.variant(rules), Some(Rule::IdempotencyToken));
        rules.set(Rule::IdempotencyToken, true);
        assert_eq!(writer.variant(rules), None);
        for r in Rule::ALL {
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(json, format!("\"{}\"", r.id()));
            assert_eq!(serde_json::from_str::<Rule>(&json).unwrap(), r);
        }
    }
}
