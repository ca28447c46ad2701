//! Applying commands: adding and removing actors, crashing and restarting processes, faults,
//! corruption and the acknowledged-writes check.
//!
//! Every command is validated first, and every id it names is looked up before anything
//! changes: a refused command leaves the scenario exactly as it was (and is not stamped).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures::channel::mpsc;

use super::actors::{self, Acked, ActorCtx, ActorDetail, ActorState, ActorView};
use super::command::{ActorSpec, Command, CommandError, Service, Stamp, Stamped, MAX_ACTORS};
use super::fact::Fact;
use super::location::{self, ProcessGate};
use super::log::{Outcome, Pending};
use super::rules::Rule;
use super::services;
use super::variants::writer::Tripwire;
use super::{Actor, Process, Scenario};
use crate::persist::PersistClient;
use crate::write_task::WriteTaskLog;

fn refuse<T>(msg: impl Into<String>) -> Result<T, CommandError> {
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

fn applied(actor: Option<&str>, process: Option<&str>, message: String) -> Applied {
    Applied {
        actor: actor.map(str::to_string),
        process: process.map(str::to_string),
        message,
    }
}

/// A small, stable mix of two numbers (splitmix64's finaliser).
fn mix(a: u64, b: u64) -> u64 {
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

    fn actor_index(&self, id: &str) -> Result<usize, CommandError> {
        self.actors
            .iter()
            .position(|a| a.id == id)
            .map_or_else(|| refuse(format!("there is no actor {id:?}")), Ok)
    }

    fn process_index(&self, id: &str) -> Result<usize, CommandError> {
        self.processes
            .iter()
            .position(|p| p.id == id)
            .map_or_else(|| refuse(format!("there is no process {id:?}")), Ok)
    }

    fn apply_checked(&mut self, command: &Command) -> Result<Applied, CommandError> {
        match command {
            Command::AddActor { spec, process } => self.add_actor(spec, process.as_deref()),
            Command::RemoveActor { actor } => {
                let i = self.actor_index(actor)?;
                let a = self.actors.remove(i);
                // Dropping the task's handle aborts it; its persist handles expire on drop.
                drop(a.task);
                *a.replica.borrow_mut() = None;
                Ok(applied(Some(actor), None, format!("removed {actor}")))
            }
            Command::SetWriter { actor, spec } => {
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
                        "{actor} now writes {} per second, {:?}",
                        spec.rate_per_s, spec.mode
                    ),
                ))
            }
            Command::SetReaderHold { actor, hold } => {
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
            Command::SetTask {
                actor,
                tick_interval_ms,
                read_only,
            } => {
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
            Command::TaskPush { actor, op } => {
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
                    format!("sent {op:?} to {actor}"),
                ))
            }
            Command::CrashProcess { process } => self.crash(process),
            Command::RestartProcess { process } => self.restart(process),
            Command::SetFaults { service, knobs } => {
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
            Command::CorruptRecord { key } => {
                let consensus = Rc::clone(&self.truth.consensus);
                let journal = Rc::clone(&self.journal);
                let rt = self.runtime.clone();
                let target = key.clone();
                self.runtime
                    .spawn("corrupt", async move {
                        let result = location::corrupt(consensus.as_ref(), &target).await;
                        let text = match result {
                            Ok(seqno) => format!(
                                "wrote garbage as version {seqno} of {target}: whoever reads \
                                 it next gets a decode error"
                            ),
                            Err(e) => e,
                        };
                        journal.borrow_mut().notice(rt.now_ms(), true, text);
                    })
                    .detach();
                Ok(applied(None, None, format!("corrupting {key}")))
            }
            Command::Verify => {
                self.start_verify();
                Ok(applied(None, None, "checking acknowledged writes".into()))
            }
            Command::PushUpsert { key, value } => {
                self.upsert_hub().push(*key, value.as_deref());
                let what = value
                    .as_ref()
                    .map_or("delete".to_string(), |v| format!("{v:?}"));
                Ok(applied(
                    None,
                    None,
                    format!("pushed upsert: key {key} → {what}"),
                ))
            }
            Command::SetGenerator { on } => {
                self.upsert_hub().set_generating(*on);
                let what = if *on { "on" } else { "off" };
                Ok(applied(None, None, format!("upsert generator {what}")))
            }
            Command::SetRule { rule, on } => Ok(applied(None, None, self.set_rule(*rule, *on))),
            Command::StepReplicas => {
                let source = Rc::clone(&self.upsert_hub().source);
                let mut stepped = Vec::new();
                for a in &self.actors {
                    let slot = a.replica.borrow();
                    let Some(r) = slot.as_ref() else { continue };
                    let report = r.borrow_mut().step_timely(&source.borrow());
                    stepped.push(format!(
                        "{}: fed back {}, read {}, {} worker step, {} out",
                        a.id, report.fed_back, report.read, report.worker_steps, report.output
                    ));
                }
                if stepped.is_empty() {
                    return refuse("no running replica to step: add one with + Replica");
                }
                Ok(applied(
                    None,
                    None,
                    format!("stepped {}", stepped.join("; ")),
                ))
            }
        }
    }

    /// Sets a rule; returns the line for the page, which says who takes the change.
    fn set_rule(&mut self, rule: Rule, on: bool) -> String {
        self.rules.set(rule, on);
        let keep: Vec<&str> = self
            .actors
            .iter()
            .filter(|a| Rule::of(&a.spec) == Some(rule))
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

    fn live_process_of(&self, actor: usize) -> Result<(), CommandError> {
        let p = &self.processes[self.actors[actor].process];
        if !p.alive.get() {
            return refuse(format!(
                "{}'s process {} has crashed: restart it first",
                self.actors[actor].id, p.id
            ));
        }
        Ok(())
    }

    fn add_actor(
        &mut self,
        spec: &ActorSpec,
        process: Option<&str>,
    ) -> Result<Applied, CommandError> {
        if self.actors.len() >= MAX_ACTORS {
            return refuse(format!("a scenario holds at most {MAX_ACTORS} actors"));
        }
        let p = match process {
            Some(id) => {
                let p = self.process_index(id)?;
                if !self.processes[p].alive.get() {
                    return refuse(format!("process {id} has crashed: restart it first"));
                }
                p
            }
            None => self.new_process(None),
        };
        let letter = spec.letter();
        let n = self.next_actor.get_or_insert_with(letter, || 0);
        *n += 1;
        let id = format!("{letter}{n}");
        let colour = self.colours;
        self.colours += 1;
        let variant = self.rules.variant_for(spec);
        let view = ActorView {
            id: id.clone(),
            colour,
            process: self.processes[p].id.clone(),
            spec: spec.clone(),
            state: ActorState::Starting,
            handle_id: None,
            error: None,
            detail: ActorDetail::None,
            variant,
        };
        let hold = matches!(spec, ActorSpec::Reader(r) if r.hold);
        self.actors.push(Actor {
            id: id.clone(),
            process: p,
            spec: spec.clone(),
            view: Rc::new(RefCell::new(view)),
            acked: Rc::new(RefCell::new(Acked::default())),
            hold: Rc::new(Cell::new(hold)),
            ops: None,
            task: None,
            incarnation: 0,
            replica: Rc::default(),
            variant,
        });
        match spec {
            ActorSpec::Oracle(o) => self.observe_timeline(&o.timeline.clone()),
            ActorSpec::Replica(_) => {
                self.upsert_hub();
            }
            other => self.observe_shard(&other.target().to_string()),
        }
        if let ActorSpec::Task(t) = spec {
            // The history check compares a task's commits with the shard's contents.
            if let Some((obs, _)) = self.observers.shards.get(&t.shard) {
                obs.borrow_mut().keep_contents = true;
            }
        }
        let i = self.actors.len() - 1;
        self.spawn_actor(i);
        let pid = self.processes[p].id.clone();
        let without = variant.map_or(String::new(), |r| format!(", without {}", r.id()));
        Ok(applied(
            Some(&id),
            Some(&pid),
            format!("added {id} to {pid} on {}{without}", spec.target()),
        ))
    }

    fn new_process(&mut self, restart_of: Option<String>) -> usize {
        let seed = self.next_seed();
        let id = format!("P{}", self.processes.len() + 1);
        let alive = Rc::new(Cell::new(true));
        let location = ProcessGate::location(
            &id,
            Rc::clone(&alive),
            self.faulty.clone(),
            Rc::clone(&self.journal),
            self.runtime.clone(),
        );
        let client = PersistClient::new(
            location.clone(),
            self.runtime.clone(),
            self.cfg.clone(),
            seed,
        );
        self.processes.push(Process {
            id,
            seed,
            alive,
            client,
            location,
            task_log: WriteTaskLog::new(),
            restart_of,
            restarted_as: None,
            started_ms: self.runtime.now_ms(),
            crashed_ms: None,
        });
        self.processes.len() - 1
    }

    /// (Re)starts actor `i`'s task in its process, replacing any earlier incarnation.
    fn spawn_actor(&mut self, i: usize) {
        let hub = self
            .upsert
            .as_ref()
            .map(|h| (Rc::clone(&h.source), h.log.clone()));
        let a = &mut self.actors[i];
        *a.replica.borrow_mut() = None;
        // The old incarnation goes first: its handles expire as it is dropped.
        drop(a.task.take());
        a.ops = None;
        a.incarnation += 1;
        let p = &self.processes[a.process];
        let seed = mix(
            p.seed,
            mix(a.incarnation, a.id.bytes().fold(0, |h, b| mix(h, b.into()))),
        );
        let variant = a.variant.is_some();
        // A writer without the token watches its process's Consensus through a tripwire, so it
        // needs a client of its own over that (the process's events stay one log).
        let tripwire = match &a.spec {
            ActorSpec::Writer(_) if variant => Some(Tripwire::new()),
            _ => None,
        };
        let client = match &tripwire {
            Some(t) => PersistClient::new(
                t.wrap(&p.location),
                self.runtime.clone(),
                self.cfg.clone(),
                seed ^ 0x7031,
            )
            .with_events(p.client.events().clone()),
            None => p.client.clone(),
        };
        let ctx = Rc::new(ActorCtx {
            id: a.id.clone(),
            process: p.id.clone(),
            runtime: self.runtime.clone(),
            client,
            seed,
            journal: Rc::clone(&self.journal),
            view: Rc::clone(&a.view),
        });
        {
            let mut view = a.view.borrow_mut();
            view.process = p.id.clone();
            view.state = ActorState::Starting;
            view.spec = a.spec.clone();
            view.handle_id = None;
            // A new incarnation starts its counters afresh (acknowledged values are kept apart).
            view.detail = ActorDetail::None;
        }
        let name = format!("{} in {}", a.id, p.id);
        let task = match &a.spec {
            ActorSpec::Writer(s) => self.runtime.spawn(
                &name,
                actors::run_writer(ctx, s.clone(), Rc::clone(&a.acked), tripwire),
            ),
            ActorSpec::Reader(s) => self.runtime.spawn(
                &name,
                actors::run_reader(ctx, s.clone(), Rc::clone(&a.hold)),
            ),
            ActorSpec::Task(s) => {
                let (tx, rx) = mpsc::unbounded();
                a.ops = Some(tx);
                self.runtime.spawn(
                    &name,
                    services::run_task(ctx, s.clone(), p.task_log.clone(), rx, variant),
                )
            }
            ActorSpec::Oracle(s) => self.runtime.spawn(
                &name,
                services::run_oracle(ctx, s.clone(), Rc::clone(&p.location.consensus), variant),
            ),
            ActorSpec::Replica(s) => {
                let (source, log) = hub.expect("the hub starts with the first replica");
                self.runtime.spawn(
                    &name,
                    super::upsert::run_replica(
                        ctx,
                        s.read_batch,
                        source,
                        log,
                        Rc::clone(&a.replica),
                        a.incarnation - 1,
                        variant,
                    ),
                )
            }
        };
        a.task = Some(task);
    }

    fn crash(&mut self, process: &str) -> Result<Applied, CommandError> {
        let p = self.process_index(process)?;
        if !self.processes[p].alive.get() {
            return refuse(format!("process {process} has already crashed"));
        }
        // Close the gate first: nothing the dying tasks still send reaches storage.
        self.processes[p].alive.set(false);
        self.processes[p].crashed_ms = Some(self.runtime.now_ms());
        let mut names = Vec::new();
        for a in self.actors.iter_mut().filter(|a| a.process == p) {
            drop(a.task.take());
            a.ops = None;
            *a.replica.borrow_mut() = None;
            let mut view = a.view.borrow_mut();
            view.state = ActorState::Crashed;
            if let ActorDetail::Writer(w) = &mut view.detail {
                w.in_flight = None;
            }
            names.push(a.id.clone());
        }
        Ok(applied(
            None,
            Some(process),
            format!("crashed {process} ({}) mid-command", names.join(", ")),
        ))
    }

    fn restart(&mut self, process: &str) -> Result<Applied, CommandError> {
        let old = self.process_index(process)?;
        if self.processes[old].alive.get() {
            return refuse(format!("process {process} is running: crash it first"));
        }
        if let Some(new) = &self.processes[old].restarted_as {
            return refuse(format!("process {process} was already restarted as {new}"));
        }
        let new = self.new_process(Some(process.to_string()));
        let new_id = self.processes[new].id.clone();
        self.processes[old].restarted_as = Some(new_id.clone());
        let moved: Vec<usize> = (0..self.actors.len())
            .filter(|&i| self.actors[i].process == old)
            .collect();
        for &i in &moved {
            self.actors[i].process = new;
            self.spawn_actor(i);
        }
        Ok(applied(
            None,
            Some(&new_id),
            format!(
                "restarted {process} as {new_id} with a fresh client ({} actors)",
                moved.len()
            ),
        ))
    }
}
