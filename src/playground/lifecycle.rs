//! The processes and their actors: adding an actor (in a new process or a named one), spawning
//! its loop in its process, crashing a process (its actors stop mid-command, its gate closes) and
//! restarting it (a new process with a fresh client; the actors keep their ids and colours).
//!
//! Invariant: an actor's task is owned by its [`Actor`] entry, so replacing or dropping the entry
//! stops the loop; a crashed process's actors show [`ActorState::Crashed`] until a restart.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures::channel::mpsc;

use super::actor::{Acked, ActorCtx, ActorDetail, ActorState, ActorView};
use super::actors;
use super::apply::{applied, mix, refuse, Applied};
use super::command::{ActorSpec, CommandError, MAX_ACTORS};
use super::location::ProcessGate;
use super::variants::writer::Tripwire;
use super::{Actor, Process, Scenario};
use crate::persist::PersistClient;
use crate::write_task::WriteTaskLog;

impl Scenario {
    pub(super) fn add_actor(
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
        let variant = spec.variant(self.rules);
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
            other => self.observe_shard(other.target()),
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
    pub(super) fn spawn_actor(&mut self, i: usize) {
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
                actors::writer::run_writer(ctx, s.clone(), Rc::clone(&a.acked), tripwire),
            ),
            ActorSpec::Reader(s) => self.runtime.spawn(
                &name,
                actors::reader::run_reader(ctx, s.clone(), Rc::clone(&a.hold)),
            ),
            ActorSpec::Task(s) => {
                let (tx, rx) = mpsc::unbounded();
                a.ops = Some(tx);
                self.runtime.spawn(
                    &name,
                    actors::task::run_task(ctx, s.clone(), p.task_log.clone(), rx, variant),
                )
            }
            ActorSpec::Oracle(s) => self.runtime.spawn(
                &name,
                actors::oracle::run_oracle(
                    ctx,
                    s.clone(),
                    Rc::clone(&p.location.consensus),
                    variant,
                ),
            ),
            ActorSpec::Replica(s) => {
                let (source, log) = hub.expect("the hub starts with the first replica");
                self.runtime.spawn(
                    &name,
                    actors::replica::run_replica(
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

    pub(super) fn crash(&mut self, process: &str) -> Result<Applied, CommandError> {
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

    pub(super) fn restart(&mut self, process: &str) -> Result<Applied, CommandError> {
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
                "restarted {process} as {new_id} with a fresh client ({})",
                super::log::plural(moved.len() as u64, "actor")
            ),
        ))
    }
}
