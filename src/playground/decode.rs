//! [`Command`]s and [`Stamped`] commands from plain data ([`Value`]), by hand: the JSON shapes
//! are the ones their `Serialize` writes (serde's derive, [`super::command`]), and every bad input
//! is an error in serde's words, never a panic.
//!
//! - A command is an object tagged by `type` (`{"type":"removeActor","actor":"W1"}`); fields it
//!   does not know are ignored; `Option` fields may be missing or `null`.
//! - An actor spec is tagged by `kind`, a task op by `op`. Specs and fault knobs refuse unknown
//!   fields, and a missing field takes the spec's default.
//! - A stamped command is `{"stamp":{"step":..,"atMs":..},"command":{..}}`.
//! - Every error names the field it is in (`... in field `spec.ratePerS``), after serde's words;
//!   every field a shape knows has its own match arm (no catch-all takes a new one silently).

use serde::{Deserialize, Deserializer};

use super::command::{
    ActorSpec, FaultKnobs, OracleSpec, ReaderSpec, ReplicaSpec, Service, TaskOp, TaskSpec,
    WriteMode, WriterSpec,
};
use super::rules::Rule;
use super::value::{
    deserialize_via, field, field_opt, tag, unknown_field, unknown_variant, DecodeError, Value,
};
use super::{Command, Stamp, Stamped};

const COMMANDS: &[&str] = &[
    "addActor",
    "removeActor",
    "setWriter",
    "setReaderHold",
    "setTask",
    "taskPush",
    "crashProcess",
    "restartProcess",
    "setFaults",
    "corruptRecord",
    "verify",
    "pushUpsert",
    "setGenerator",
    "setUndecodable",
    "stepReplicas",
    "setRule",
];

/// The command `v` stands for.
pub fn command(v: &Value) -> Result<Command, DecodeError> {
    let o = v.entries("internally tagged enum Command")?;
    let actor = || field(o, "actor", Value::string);
    let process = || field(o, "process", Value::string);
    Ok(match tag(o, "type")? {
        "addActor" => Command::AddActor {
            spec: field(o, "spec", actor_spec)?,
            process: field_opt(o, "process", Value::opt_string)?,
        },
        "removeActor" => Command::RemoveActor { actor: actor()? },
        "setWriter" => Command::SetWriter {
            actor: actor()?,
            spec: field(o, "spec", |v| {
                writer_spec(v.entries("struct WriterSpec")?, None)
            })?,
        },
        "setReaderHold" => Command::SetReaderHold {
            actor: actor()?,
            hold: field(o, "hold", Value::bool)?,
        },
        "setTask" => Command::SetTask {
            actor: actor()?,
            tick_interval_ms: field(o, "tickIntervalMs", Value::u64)?,
            read_only: field(o, "readOnly", Value::bool)?,
        },
        "taskPush" => Command::TaskPush {
            actor: actor()?,
            op: field(o, "op", task_op)?,
        },
        "crashProcess" => Command::CrashProcess {
            process: process()?,
        },
        "restartProcess" => Command::RestartProcess {
            process: process()?,
        },
        "setFaults" => Command::SetFaults {
            service: field(o, "service", service)?,
            knobs: field(o, "knobs", fault_knobs)?,
        },
        "corruptRecord" => Command::CorruptRecord {
            key: field(o, "key", Value::string)?,
        },
        "verify" => Command::Verify,
        "pushUpsert" => Command::PushUpsert {
            key: field(o, "key", Value::i64)?,
            value: field_opt(o, "value", Value::opt_string)?,
        },
        "setGenerator" => Command::SetGenerator {
            on: field(o, "on", Value::bool)?,
        },
        "setUndecodable" => Command::SetUndecodable {
            on: field(o, "on", Value::bool)?,
        },
        "stepReplicas" => Command::StepReplicas,
        "setRule" => Command::SetRule {
            rule: field(o, "rule", rule)?,
            on: field(o, "on", Value::bool)?,
        },
        other => return Err(unknown_variant(other, COMMANDS).in_field("type")),
    })
}

/// A protocol rule by its id.
fn rule(v: &Value) -> Result<Rule, DecodeError> {
    Rule::from_id(v.str_as("a string")?).map_err(|e| DecodeError::new(e.to_string()))
}

/// A storage service by its name.
fn service(v: &Value) -> Result<Service, DecodeError> {
    match v.str_as("variant identifier")? {
        "blob" => Ok(Service::Blob),
        "consensus" => Ok(Service::Consensus),
        other => Err(unknown_variant(other, &["blob", "consensus"])),
    }
}

/// The stamped command `v` stands for.
pub fn stamped(v: &Value) -> Result<Stamped, DecodeError> {
    let o = v.entries("struct Stamped")?;
    Ok(Stamped {
        stamp: field(o, "stamp", |v| {
            let s = v.entries("struct Stamp")?;
            Ok(Stamp {
                step: field(s, "step", Value::u64)?,
                at_ms: field(s, "atMs", Value::u64)?,
            })
        })?,
        command: field(o, "command", command)?,
    })
}

/// A list of stamped commands.
pub fn stamped_list(v: &Value) -> Result<Vec<Stamped>, DecodeError> {
    v.items("a sequence")?.iter().map(stamped).collect()
}

/// Each field of a spec object in turn (`skip`: its tag, if it has one), refusing unknown ones;
/// an error in a field's value names the field.
fn fields<'a>(
    o: &'a [(String, Value)],
    skip: Option<&str>,
    names: &[&str],
    mut set: impl FnMut(&str, &'a Value) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    for (k, v) in o {
        if Some(k.as_str()) == skip {
            continue;
        }
        if !names.contains(&k.as_str()) {
            return Err(unknown_field(k, names));
        }
        set(k, v).map_err(|e| e.in_field(k))?;
    }
    Ok(())
}

fn writer_spec(o: &[(String, Value)], skip: Option<&str>) -> Result<WriterSpec, DecodeError> {
    let mut s = WriterSpec::default();
    let names = &["shard", "ratePerS", "keyLo", "keyHi", "mode"];
    fields(o, skip, names, |k, v| {
        match k {
            "shard" => s.shard = v.string()?,
            "ratePerS" => s.rate_per_s = v.u32()?,
            "keyLo" => s.key_lo = v.u32()?,
            "keyHi" => s.key_hi = v.u32()?,
            "mode" => s.mode = write_mode(v)?,
            other => return Err(unknown_field(other, names)),
        }
        Ok(())
    })?;
    Ok(s)
}

/// A writer's mode by its name.
fn write_mode(v: &Value) -> Result<WriteMode, DecodeError> {
    match v.str_as("variant identifier")? {
        "compareAndAppend" => Ok(WriteMode::CompareAndAppend),
        "append" => Ok(WriteMode::Append),
        other => Err(unknown_variant(other, &["compareAndAppend", "append"])),
    }
}

fn actor_spec(v: &Value) -> Result<ActorSpec, DecodeError> {
    let o = v.entries("internally tagged enum ActorSpec")?;
    let skip = Some("kind");
    Ok(match tag(o, "kind")? {
        "writer" => ActorSpec::Writer(writer_spec(o, skip)?),
        "reader" => {
            let mut s = ReaderSpec::default();
            let names = &["shard", "hold"];
            fields(o, skip, names, |k, v| {
                match k {
                    "shard" => s.shard = v.string()?,
                    "hold" => s.hold = v.bool()?,
                    other => return Err(unknown_field(other, names)),
                }
                Ok(())
            })?;
            ActorSpec::Reader(s)
        }
        "task" => {
            let mut s = TaskSpec::default();
            let names = &["shard", "tickIntervalMs", "readOnly"];
            fields(o, skip, names, |k, v| {
                match k {
                    "shard" => s.shard = v.string()?,
                    "tickIntervalMs" => s.tick_interval_ms = v.u64()?,
                    "readOnly" => s.read_only = v.bool()?,
                    other => return Err(unknown_field(other, names)),
                }
                Ok(())
            })?;
            ActorSpec::Task(s)
        }
        "oracle" => {
            let mut s = OracleSpec::default();
            let names = &["timeline", "persistIntervalMs", "ratePerS", "burst"];
            fields(o, skip, names, |k, v| {
                match k {
                    "timeline" => s.timeline = v.string()?,
                    "persistIntervalMs" => s.persist_interval_ms = v.u64()?,
                    "ratePerS" => s.rate_per_s = v.u32()?,
                    "burst" => s.burst = v.u32()?,
                    other => return Err(unknown_field(other, names)),
                }
                Ok(())
            })?;
            ActorSpec::Oracle(s)
        }
        "replica" => {
            let mut s = ReplicaSpec::default();
            let names = &["readBatch"];
            fields(o, skip, names, |k, v| {
                match k {
                    "readBatch" => s.read_batch = v.u32()?,
                    other => return Err(unknown_field(other, names)),
                }
                Ok(())
            })?;
            ActorSpec::Replica(s)
        }
        other => {
            let kinds = &["writer", "reader", "task", "oracle", "replica"];
            return Err(unknown_variant(other, kinds).in_field("kind"));
        }
    })
}

fn task_op(v: &Value) -> Result<TaskOp, DecodeError> {
    let o = v.entries("internally tagged enum TaskOp")?;
    Ok(match tag(o, "op")? {
        "append" => TaskOp::Append {
            rows: field(o, "rows", Value::u32)?,
        },
        "deleteOldest" => TaskOp::DeleteOldest,
        other => return Err(unknown_variant(other, &["append", "deleteOldest"]).in_field("op")),
    })
}

fn fault_knobs(v: &Value) -> Result<FaultKnobs, DecodeError> {
    let o = v.entries("struct FaultKnobs")?;
    let mut s = FaultKnobs::default();
    let names = &["failRate", "timeoutRate", "latencyMs", "outage"];
    fields(o, None, names, |k, v| {
        match k {
            "failRate" => s.fail_rate = v.f64()?,
            "timeoutRate" => s.timeout_rate = v.f64()?,
            "latencyMs" => s.latency_ms = v.u64()?,
            "outage" => s.outage = v.bool()?,
            other => return Err(unknown_field(other, names)),
        }
        Ok(())
    })?;
    Ok(s)
}

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_via(d, command)
    }
}

impl<'de> Deserialize<'de> for Stamped {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_via(d, stamped)
    }
}

impl<'de> Deserialize<'de> for FaultKnobs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_via(d, fault_knobs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(json: &str) -> Result<Command, DecodeError> {
        command(&serde_json::from_str::<Value>(json).map_err(|e| DecodeError::new(e.to_string()))?)
    }

    #[test]
    fn every_command_reads_back_what_it_writes() {
        let commands = vec![
            Command::AddActor {
                spec: ActorSpec::Writer(WriterSpec {
                    mode: WriteMode::Append,
                    ..WriterSpec::default()
                }),
                process: Some("P1".into()),
            },
            Command::AddActor {
                spec: ActorSpec::Reader(ReaderSpec::default()),
                process: None,
            },
            Command::AddActor {
                spec: ActorSpec::Task(TaskSpec::default()),
                process: None,
            },
            Command::AddActor {
                spec: ActorSpec::Oracle(OracleSpec::default()),
                process: None,
            },
            Command::AddActor {
                spec: ActorSpec::Replica(ReplicaSpec::default()),
                process: None,
            },
            Command::RemoveActor { actor: "W1".into() },
            Command::SetWriter {
                actor: "W1".into(),
                spec: WriterSpec::default(),
            },
            Command::SetReaderHold {
                actor: "R1".into(),
                hold: true,
            },
            Command::SetTask {
                actor: "T1".into(),
                tick_interval_ms: 100,
                read_only: true,
            },
            Command::TaskPush {
                actor: "T1".into(),
                op: TaskOp::Append { rows: 3 },
            },
            Command::TaskPush {
                actor: "T1".into(),
                op: TaskOp::DeleteOldest,
            },
            Command::CrashProcess {
                process: "P1".into(),
            },
            Command::RestartProcess {
                process: "P1".into(),
            },
            Command::SetFaults {
                service: Service::Consensus,
                knobs: FaultKnobs {
                    fail_rate: 0.25,
                    timeout_rate: 0.5,
                    latency_ms: 40,
                    outage: true,
                },
            },
            Command::CorruptRecord { key: "data".into() },
            Command::Verify,
            Command::PushUpsert {
                key: -4,
                value: Some("v".into()),
            },
            Command::PushUpsert {
                key: 3,
                value: None,
            },
            Command::SetGenerator { on: true },
            Command::SetUndecodable { on: false },
            Command::StepReplicas,
            Command::SetRule {
                rule: Rule::TaskResync,
                on: false,
            },
        ];
        for c in commands {
            let json = super::super::json::to_json(&c).unwrap();
            assert_eq!(decode(&json), Ok(c.clone()), "{json}");
            let stamped = Stamped {
                stamp: Stamp { step: 7, at_ms: 40 },
                command: c,
            };
            let json = serde_json::to_string(&vec![stamped.clone()]).unwrap();
            assert_eq!(
                serde_json::from_str::<Vec<Stamped>>(&json).unwrap(),
                vec![stamped]
            );
        }
    }

    #[test]
    fn missing_fields_take_the_spec_defaults_and_extra_command_fields_are_ignored() {
        assert_eq!(
            decode(r#"{"type":"addActor","spec":{"kind":"writer","keyHi":8},"extra":1}"#),
            Ok(Command::AddActor {
                spec: ActorSpec::Writer(WriterSpec {
                    key_hi: 8,
                    ..WriterSpec::default()
                }),
                process: None,
            })
        );
        assert_eq!(
            decode(r#"{"type":"pushUpsert","key":3,"value":null}"#),
            Ok(Command::PushUpsert {
                key: 3,
                value: None
            })
        );
        assert_eq!(
            decode(r#"{"type":"verify","junk":[1]}"#),
            Ok(Command::Verify)
        );
    }

    #[test]
    fn bad_input_is_refused_in_serdes_words() {
        let cases = [
            (r#"{"type":"nope"}"#, "unknown variant `nope`, expected one of `addActor`, "),
            (r#"{"kind":"writer"}"#, "missing field `type`"),
            (r#"{"type":5}"#, "invalid type: integer `5`, expected variant identifier"),
            (r#""verify""#, "invalid type: string \"verify\", expected internally tagged enum Command"),
            (r#"{"type":"removeActor"}"#, "missing field `actor`"),
            (r#"{"type":"removeActor","actor":7}"#, "invalid type: integer `7`, expected a string"),
            (r#"{"type":"addActor","spec":{"kind":"ghost"}}"#, "unknown variant `ghost`, expected one of `writer`, `reader`, `task`, `oracle`, `replica`"),
            (r#"{"type":"addActor","spec":{"shard":"x"}}"#, "missing field `kind`"),
            (r#"{"type":"addActor","spec":{"kind":"writer","ratePerS":"abc"}}"#, "invalid type: string \"abc\", expected u32"),
            (r#"{"type":"addActor","spec":{"kind":"writer","ratePerS":1.5}}"#, "invalid type: floating point `1.5`, expected u32"),
            (r#"{"type":"addActor","spec":{"kind":"writer","ratePerS":-1}}"#, "invalid value: integer `-1`, expected u32"),
            (r#"{"type":"addActor","spec":{"kind":"writer","bogus":1}}"#, "unknown field `bogus`, expected one of `shard`, `ratePerS`, `keyLo`, `keyHi`, `mode`"),
            (r#"{"type":"addActor","spec":{"kind":"writer","mode":"nope"}}"#, "unknown variant `nope`, expected `compareAndAppend` or `append`"),
            (r#"{"type":"addActor","spec":{"kind":"replica","readBatch":null}}"#, "invalid type: null, expected u32"),
            (r#"{"type":"addActor","spec":{"kind":"writer"},"process":5}"#, "invalid type: integer `5`, expected a string"),
            (r#"{"type":"setWriter","actor":"W1","spec":{"kind":"writer"}}"#, "unknown field `kind`, expected one of `shard`, "),
            (r#"{"type":"setTask","actor":"T1","tickIntervalMs":100}"#, "missing field `readOnly`"),
            (r#"{"type":"taskPush","actor":"T1","op":{"op":"explode"}}"#, "unknown variant `explode`, expected `append` or `deleteOldest`"),
            (r#"{"type":"taskPush","actor":"T1","op":{"op":"append"}}"#, "missing field `rows`"),
            (r#"{"type":"setFaults","service":"disk","knobs":{}}"#, "unknown variant `disk`, expected `blob` or `consensus`"),
            (r#"{"type":"setFaults","service":"blob","knobs":{"failRate":"x"}}"#, "invalid type: string \"x\", expected f64"),
            (r#"{"type":"setFaults","service":"blob","knobs":{"fail":1}}"#, "unknown field `fail`, expected one of `failRate`, "),
            (r#"{"type":"pushUpsert","key":2.5}"#, "invalid type: floating point `2.5`, expected i64"),
            (r#"{"type":"setRule","rule":"nope","on":false}"#, "unknown rule \"nope\": one of idempotency-token, "),
            (r#"{"type":"removeActor","actor":"W1","actor":"W2"}"#, "duplicate field `actor`"),
        ];
        for (json, want) in cases {
            let got = decode(json).unwrap_err().to_string();
            assert!(got.starts_with(want), "{json}: {got}");
        }
        let err = serde_json::from_str::<Vec<Stamped>>(r#"[{"stamp":{"step":3}}]"#).unwrap_err();
        assert!(err.to_string().starts_with("missing field `atMs`"), "{err}");
    }

    #[test]
    fn every_error_in_a_field_names_the_field() {
        let cases = [
            (r#"{"type":"removeActor","actor":7}"#, "actor"),
            (r#"{"type":"nope"}"#, "type"),
            (r#"{"type":5}"#, "type"),
            (
                r#"{"type":"addActor","spec":{"kind":"ghost"}}"#,
                "spec.kind",
            ),
            (
                r#"{"type":"addActor","spec":{"kind":"writer","ratePerS":"abc"}}"#,
                "spec.ratePerS",
            ),
            (
                r#"{"type":"addActor","spec":{"kind":"writer","mode":"nope"}}"#,
                "spec.mode",
            ),
            (
                r#"{"type":"addActor","spec":{"kind":"reader","hold":1}}"#,
                "spec.hold",
            ),
            (
                r#"{"type":"addActor","spec":{"kind":"task","readOnly":1}}"#,
                "spec.readOnly",
            ),
            (
                r#"{"type":"addActor","spec":{"kind":"oracle","burst":-1}}"#,
                "spec.burst",
            ),
            (
                r#"{"type":"addActor","spec":{"kind":"replica","readBatch":null}}"#,
                "spec.readBatch",
            ),
            (
                r#"{"type":"addActor","spec":{"kind":"writer"},"process":5}"#,
                "process",
            ),
            (
                r#"{"type":"setTask","actor":"T1","tickIntervalMs":"x","readOnly":true}"#,
                "tickIntervalMs",
            ),
            (
                r#"{"type":"taskPush","actor":"T1","op":{"op":"append","rows":-2}}"#,
                "op.rows",
            ),
            (
                r#"{"type":"taskPush","actor":"T1","op":{"op":"explode"}}"#,
                "op.op",
            ),
            (
                r#"{"type":"setFaults","service":"disk","knobs":{}}"#,
                "service",
            ),
            (
                r#"{"type":"setFaults","service":"blob","knobs":{"outage":"x"}}"#,
                "knobs.outage",
            ),
            (r#"{"type":"pushUpsert","key":2.5}"#, "key"),
            (r#"{"type":"setRule","rule":"nope","on":false}"#, "rule"),
        ];
        for (json, path) in cases {
            let err = decode(json).unwrap_err();
            assert_eq!(err.field(), path, "{json}: {err}");
            assert!(
                err.to_string().ends_with(&format!(" in field `{path}`")),
                "{json}: {err}"
            );
        }
        let stamped = stamped(
            &serde_json::from_str::<Value>(
                r#"{"stamp":{"step":1,"atMs":"x"},"command":{"type":"verify"}}"#,
            )
            .unwrap(),
        );
        assert_eq!(stamped.unwrap_err().field(), "stamp.atMs");
    }
}
