//! Applying commands: one method per command (adding actors, crashing and restarting processes
//! are in the `lifecycle` module, which builds on this one), faults, corruption and the acknowledged-writes check.
//!
//! Every command is validated first, and every id it names is looked up before anything
//! changes: a refused command leaves the scenario exactly as it was (and is not stamped).

use std::rc::Rc;

use super::command::{
    ActorSpec, Command, CommandError, FaultKnobs, Service, Stamp, Stamped, TaskOp, WriteMode,
    WriterSpec,
};
use super::fact::Fact;
use super::location;
use super::log::{plural, Outcome, Pending};
use super::rules::Rule;
use super::Scenario;

pub(super) fn refuse<T>(msg: impl Into<String>) -> Result<T, CommandError> {
    Err(CommandError(msg.into()))
}

/// What an applied command reports back.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Applied {
    /// The actor it created or touched, if any.
    pub actor: Option<String>,
    /// The process it created or touched, if any.
    pub process: Option<String>,
    /// A line for the page.
    pub message: String,
}

pub(super) fn applied(actor: Option<&str>, process: Option<&str>, message: String) -> Applied {
    Applied {
        actor: actor.map(str::to_string),
        process: process.map(str::to_string),
        message,
    }
}

/// A small, stable mix of two numbers (splitmix64's finaliser).
pub(super) fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The fault a command injects, as a fact (`None` for other commands).
fn command_fact(command: &Command, result: &Applied) -> Option<Fact> {
    Some(match command {
        Command::CrashProcess { process } => Fact::Crash {
            process: process.clone(),
        },
        Command::RestartProcess { process } => Fact::Restart {
            process: process.clone(),
            as_process: result.process.clone().unwrap_or_default(),
        },
        Command::SetFaults { service, knobs } => Fact::Faults {
            service: match service {
                Service::Blob => "blob",
                Service::Consensus => "consensus",
            }
            .into(),
            fail_per_mille: per_mille(knobs.fail_rate),
            timeout_per_mille: per_mille(knobs.timeout_rate),
            latency_ms: knobs.latency_ms,
            outage: knobs.outage,
        },
        Command::CorruptRecord { key } => Fact::Corrupt { key: key.clone() },
        _ => return None,
    })
}

fn per_mille(rate: f64) -> u32 {
    (rate.clamp(0.0, 1.0) * 1_000.0).round() as u32
}

impl Scenario {
    /// Applies `command`, or refuses it with a message and changes nothing.
    pub fn apply(&mut self, command: Command) -> Result<Applied, CommandError> {
        command.validate()?;
        let stamp = Stamp {
            step: self.steps(),
            at_ms: self.now_ms(),
        };
        let result = self.apply_checked(&command)?;
        let fact = command_fact(&command, &result);
        self.stamped.push(Stamped { stamp, command });
        let now = self.now_ms();
        self.journal.borrow_mut().log.record(Pending {
            at_ms: now,
            actor: result.actor.clone(),
            process: result.process.clone(),
            component: "scenario",
            kind: "command".into(),
            outcome: Outcome::Info,
            detail: result.message.clone(),
            fact,
        });
        Ok(result)
    }

    pub(super) fn actor_index(&self, id: &str) -> Result<usize, CommandError> {
        self.actors
            .iter()
            .position(|a| a.id == id)
            .map_or_else(|| refuse(format!("there is no actor {id:?}")), Ok)
    }

    pub(super) fn process_index(&self, id: &str) -> Result<usize, CommandError> {
        self.processes
            .iter()
            .position(|p| p.id == id)
            .map_or_else(|| refuse(format!("there is no process {id:?}")), Ok)
    }

    fn apply_checked(&mut self, command: &Command) -> Result<Applied, CommandError> {
        // A stage-by-stage walk of the replicas ends with any command but the walk's own
        // (see the `walk` module): the replicas go back to their drivers.
        if !matches!(
            command,
            Command::StepReplicas | Command::PushUpsert { .. } | Command::Verify
        ) {
            self.end_walk();
        }
        match command {
            Command::AddActor { spec, process } => self.add_actor(spec, process.as_deref()),
            Command::RemoveActor { actor } => self.remove_actor(actor),
            Command::SetWriter { actor, spec } => self.set_writer(actor, spec),
            Command::SetReaderHold { actor, hold } => self.set_reader_hold(actor, hold),
            Command::SetTask {
                actor,
                tick_interval_ms,
                read_only,
            } => self.set_task(actor, tick_interval_ms, read_only),
            Command::TaskPush { actor, op } => self.task_push(actor, op),
            Command::CrashProcess { process } => self.crash(process),
            Command::RestartProcess { process } => self.restart(process),
            Command::SetFaults { service, knobs } => self.set_faults(service, knobs),
            Command::CorruptRecord { key } => self.corrupt_record(key),
            Command::Verify => {
                self.start_verify();
                Ok(applied(None, None, "checking acknowledged writes".into()))
            }
            Command::PushUpsert { key, value } => self.push_upsert(key, value),
            Command::SetGenerator { on } => {
                self.upsert_hub().set_generating(*on);
                let what = if *on { "on" } else { "off" };
                Ok(applied(None, None, format!("upsert generator {what}")))
            }
            Command::SetUndecodable { on } => {
                self.upsert_hub().set_undecodable(*on);
                let makes = if *on { "makes" } else { "makes no" };
                let text = format!("the upsert generator {makes} undecodable values on purpose");
                Ok(applied(None, None, text))
            }
            Command::SetRule { rule, on } => Ok(applied(None, None, self.set_rule(*rule, *on))),
            Command::StepReplicas => self.step_replicas(),
        }
    }

    /// Removes actor `actor` (its task aborts, its handles expire).
    fn remove_actor(&mut self, actor: &str) -> Result<Applied, CommandError> {
        let i = self.actor_index(actor)?;
        let a = self.actors.remove(i);
        // Dropping the task's handle aborts it; its persist handles expire on drop.
        drop(a.task);
        *a.replica.borrow_mut() = None;
        Ok(applied(Some(actor), None, format!("removed {actor}")))
    }

    /// Changes writer `actor`'s rate and mode (it keeps its shard) and restarts its loop.
    fn set_writer(&mut self, actor: &str, spec: &WriterSpec) -> Result<Applied, CommandError> {
        let i = self.actor_index(actor)?;
        let ActorSpec::Writer(old) = &self.actors[i].spec else {
            return refuse(format!("{actor} is not a writer"));
        };
        if old.shard != spec.shard {
            return refuse(format!(
                "a writer keeps its shard: {actor} writes {}, not {}",
                old.shard, spec.shard
            ));
        }
        self.live_process_of(i)?;
        self.actors[i].spec = ActorSpec::Writer(spec.clone());
        self.spawn_actor(i);
        Ok(applied(
            Some(actor),
            None,
            format!(
                "{actor} now writes {} per second with {}",
                spec.rate_per_s,
                match spec.mode {
                    WriteMode::CompareAndAppend => "compare_and_append",
                    WriteMode::Append => "append",
                }
            ),
        ))
    }

    /// Makes reader `actor` hold or release its since.
    fn set_reader_hold(&mut self, actor: &str, hold: &bool) -> Result<Applied, CommandError> {
        let i = self.actor_index(actor)?;
        if !matches!(self.actors[i].spec, ActorSpec::Reader(_)) {
            return refuse(format!("{actor} is not a reader"));
        }
        if let ActorSpec::Reader(s) = &mut self.actors[i].spec {
            s.hold = *hold;
        }
        self.actors[i].view.borrow_mut().spec = self.actors[i].spec.clone();
        self.actors[i].hold.set(*hold);
        let what = if *hold {
            "holds its since"
        } else {
            "releases its since"
        };
        Ok(applied(Some(actor), None, format!("{actor} {what}")))
    }

    /// Changes write task `actor`'s tick and read-only flag and restarts it.
    fn set_task(
        &mut self,
        actor: &str,
        tick_interval_ms: &u64,
        read_only: &bool,
    ) -> Result<Applied, CommandError> {
        let i = self.actor_index(actor)?;
        if !matches!(self.actors[i].spec, ActorSpec::Task(_)) {
            return refuse(format!("{actor} is not a write task"));
        }
        self.live_process_of(i)?;
        if let ActorSpec::Task(s) = &mut self.actors[i].spec {
            s.tick_interval_ms = *tick_interval_ms;
            s.read_only = *read_only;
        }
        self.spawn_actor(i);
        Ok(applied(
            Some(actor),
            None,
            format!("{actor} restarted: tick {tick_interval_ms} ms, read-only {read_only}"),
        ))
    }

    /// Sends `op` to write task `actor`.
    fn task_push(&mut self, actor: &str, op: &TaskOp) -> Result<Applied, CommandError> {
        let i = self.actor_index(actor)?;
        if !matches!(self.actors[i].spec, ActorSpec::Task(_)) {
            return refuse(format!("{actor} is not a write task"));
        }
        self.live_process_of(i)?;
        let sent = self.actors[i]
            .ops
            .as_ref()
            .is_some_and(|tx| tx.unbounded_send(op.clone()).is_ok());
        if !sent {
            return refuse(format!("{actor} is not running"));
        }
        Ok(applied(
            Some(actor),
            None,
            match op {
                TaskOp::Append { rows } => {
                    format!("asked {actor} to append {}", plural(*rows as u64, "row"))
                }
                TaskOp::DeleteOldest => format!("asked {actor} to delete its oldest row"),
            },
        ))
    }

    /// Sets the fault knobs of `service`.
    fn set_faults(
        &mut self,
        service: &Service,
        knobs: &FaultKnobs,
    ) -> Result<Applied, CommandError> {
        self.faults.set(*service, *knobs);
        let text = if knobs.outage {
            "a full outage".to_string()
        } else {
            format!(
                "{}% of calls fail, {}% time out, {} ms added latency",
                per_mille(knobs.fail_rate) as f64 / 10.0,
                per_mille(knobs.timeout_rate) as f64 / 10.0,
                knobs.latency_ms
            )
        };
        Ok(applied(None, None, format!("{service:?} faults: {text}")))
    }

    /// Writes a garbage version of Consensus key `key` (in a task: it is async).
    fn corrupt_record(&mut self, key: &str) -> Result<Applied, CommandError> {
        let consensus = Rc::clone(&self.truth.consensus);
        let journal = Rc::clone(&self.journal);
        let rt = self.runtime.clone();
        let target = key.to_string();
        self.runtime
            .spawn("corrupt", async move {
                let result = location::corrupt(consensus.as_ref(), &target).await;
                let text = match result {
                    Ok(seqno) => format!(
                        "wrote garbage as version {seqno} of {target}: whoever reads \
                         it next gets a decode error"
                    ),
                    Err(e) => e.to_string(),
                };
                journal.borrow_mut().notice(rt.now_ms(), true, text);
            })
            .detach();
        Ok(applied(None, None, format!("corrupting {key}")))
    }

    /// Pushes one upsert into the source.
    fn push_upsert(&mut self, key: &i64, value: &Option<String>) -> Result<Applied, CommandError> {
        self.upsert_hub().push(*key, value.as_deref());
        // A walk in progress goes on (this push waits for a walk of its own); the lines of a
        // finished walk and of the last press no longer say what the next press does.
        self.walk_done = None;
        self.press = None;
        let what = value
            .as_ref()
            .map_or("delete".to_string(), |v| format!("{v:?}"));
        Ok(applied(
            None,
            None,
            format!("pushed upsert: key {key} → {what}"),
        ))
    }

    /// Sets a rule; returns the line for the page, which says who takes the change.
    fn set_rule(&mut self, rule: Rule, on: bool) -> String {
        self.rules.set(rule, on);
        let keep: Vec<&str> = self
            .actors
            .iter()
            .filter(|a| a.spec.rule() == Some(rule))
            .map(|a| a.id.as_str())
            .collect();
        let state = if on { "on" } else { "off" };
        let with = if on { "with" } else { "without" };
        let mut text = format!(
            "rule {} {state}: {} added from now on run {with} it",
            rule.id(),
            rule.actors()
        );
        if !keep.is_empty() {
            text.push_str(&format!(
                " ({} keep the code they were added with)",
                keep.join(", ")
            ));
        }
        text
    }

    pub(super) fn live_process_of(&self, actor: usize) -> Result<(), CommandError> {
        let p = &self.processes[self.actors[actor].process];
        if !p.alive.get() {
            return refuse(format!(
                "{}'s process {} has crashed: restart it first",
                self.actors[actor].id, p.id
            ));
        }
        Ok(())
    }
}
