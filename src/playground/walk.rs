//! Continual feedback one stage at a time: with the generator off, **Step replicas** walks the
//! newest upsert (the one pushed by hand) through one replica, one stage per command, and says
//! which stage it ran:
//!
//! ```text
//!  1 source     the pushed upsert reaches the source log (the run goes on until it is there)
//!  2 stash      the replica reads it with its input frontier held at the message's time
//!  3 partial    the operator drains at its input frontier: a provisional value (◌) in state
//!  4 sink       the input frontier moves past the time; the sink's compare_and_append goes out
//!  5 shard      the write commits: the shard holds the upsert
//!  6 feedback   the replica's persist source reads it back (listen)
//!  7 state      the feedback is folded in: the value in state is no longer provisional
//! ```
//!
//! While a walk runs, every replica is taken from its driver ([`Manual::Hold`]), so nothing moves
//! the pipeline but these commands; the rest of the scenario runs whenever a stage needs the
//! runtime (a write, a read), for as little virtual time as that stage takes. The last stage
//! gives the replicas back to their drivers, and so does any other command or any run of the
//! scenario between two stages (a step, play): the pipeline never stays frozen. Seed mode only: live mode (and a walk with nothing
//! unread) takes one timely step per replica instead.
//!
//! Invariant: `walk.is_some()` iff every running replica is held.

use std::cell::RefCell;
use std::rc::Rc;

use serde::Serialize;

use super::apply::{applied, refuse};
use super::{Applied, CommandError, Mode, Scenario};
use crate::upsert::replica::{Manual, Replica};

/// Virtual time a stage may run the scenario for before it reports that it could not finish.
const STAGE_BUDGET_MS: u64 = 3_000;

/// The stages, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Stage {
    /// The upsert reaches the source log.
    Source,
    /// The replica reads it into its stash.
    Stash,
    /// Partial emission: a provisional value in state.
    Provisional,
    /// The sink's compare_and_append goes out.
    Sink,
    /// The write commits: the shard holds it.
    Shard,
    /// The persist source reads it back.
    Feedback,
    /// The feedback is folded into state.
    State,
}

impl Stage {
    const ALL: [Stage; 7] = [
        Stage::Source,
        Stage::Stash,
        Stage::Provisional,
        Stage::Sink,
        Stage::Shard,
        Stage::Feedback,
        Stage::State,
    ];

    /// Its name, as each command's message starts.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Source => "source",
            Stage::Stash => "stash",
            Stage::Provisional => "partial emission",
            Stage::Sink => "sink",
            Stage::Shard => "shard",
            Stage::Feedback => "feedback read",
            Stage::State => "state",
        }
    }

    fn number(self) -> usize {
        Stage::ALL.iter().position(|s| *s == self).unwrap_or(0) + 1
    }

    fn next(self) -> Option<Stage> {
        Stage::ALL.get(self.number()).copied()
    }
}

/// A walk in progress.
#[derive(Debug, Clone)]
pub(crate) struct Walk {
    actor: String,
    next: Stage,
    message: Option<(u64, i64, u64)>,
    cell: Option<String>,
    empty_range: bool,
}

/// The walk as the upsert panel shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WalkView {
    /// The replica walked.
    pub replica: String,
    /// The stage the next command runs.
    pub next: Stage,
    /// Its name.
    pub next_name: &'static str,
    /// The upsert's source offset, key and time, once it is in the source log.
    pub offset: Option<u64>,
    /// Its key.
    pub key: Option<i64>,
    /// Its time.
    pub ts: Option<u64>,
    /// Its key as the replica's stash and state cells name it, once stashed.
    pub cell: Option<String>,
    /// Whether the partial emission had the sink write an empty range first, up to the
    /// upsert's time (then every upper reads that time before the upsert is written).
    pub empty_range: bool,
}

/// A walk that went through all seven stages, as the upsert panel's last line keeps it until
/// the run moves on, another command runs, or a new walk starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WalkDoneView {
    /// The replica walked.
    pub replica: String,
    /// The upsert's key, time and value as its state now holds it (confirmed by the shard).
    pub key: Option<i64>,
    /// Its time.
    pub ts: Option<u64>,
    /// What the replica's state holds for the key now (`None`: a delete, or not found).
    pub value: Option<String>,
}

impl Walk {
    pub(crate) fn view(&self) -> WalkView {
        WalkView {
            replica: self.actor.clone(),
            next: self.next,
            next_name: self.next.name(),
            offset: self.message.map(|m| m.0),
            key: self.message.map(|m| m.1),
            ts: self.message.map(|m| m.2),
            cell: self.cell.clone(),
            empty_range: self.empty_range,
        }
    }
}

impl Scenario {
    /// [`super::Command::StepReplicas`]: a stage of the walk (see the module docs), or one timely
    /// step of every replica when there is nothing to walk.
    pub(super) fn step_replicas(&mut self) -> Result<Applied, CommandError> {
        let hub = self.upsert_hub();
        let walkable = !hub.view().generating;
        if self.walk.is_none() && (!walkable || !self.is_seeded() || !self.has_unread()) {
            let why = if !self.is_seeded() {
                "live mode walks no stages: one worker step of every replica"
            } else if !walkable {
                "the generator is on, so there is no one upsert to walk: one worker step of every replica"
            } else {
                "nothing new for the first replica to walk (push an upsert to walk it): one worker step of every replica, each reading what it has not read yet"
            };
            return self.step_timely_all(why);
        }
        if self.walk.is_none() {
            self.walk_done = None;
            let Some(actor) = self.walk_replica().map(|(id, _)| id) else {
                return self.step_timely_all("no running replica to walk");
            };
            self.hold_replicas(Manual::Hold);
            self.walk = Some(Walk {
                actor,
                next: Stage::Source,
                message: None,
                cell: None,
                empty_range: false,
            });
        }
        let Some(walk) = self.walk.clone() else {
            return refuse("no walk");
        };
        let Some(replica) = self.replica_of(&walk.actor) else {
            self.end_walk();
            return refuse(format!(
                "{} is not running: the walk is over; push again and step",
                walk.actor
            ));
        };
        let text = self.run_stage(&walk, &replica)?;
        let stage = walk.next;
        match stage.next() {
            Some(next) => {
                if let Some(w) = &mut self.walk {
                    w.next = next;
                }
            }
            None => {
                self.end_walk();
                self.walk_done = Some(self.done_view(&walk, &replica));
            }
        }
        let tail = stage.next().map_or(
            "; the walk is done: the next press takes one worker step of every replica".into(),
            |n| format!(" (next: {})", n.name()),
        );
        Ok(applied(
            Some(&walk.actor),
            None,
            format!("stage {}/7, {}: {text}{tail}", stage.number(), stage.name()),
        ))
    }

    /// What the panel keeps of a finished walk: the key and the value the state now holds.
    fn done_view(&mut self, walk: &Walk, r: &Rc<RefCell<Replica>>) -> WalkDoneView {
        let source = Rc::clone(&self.upsert_hub().source);
        let value = walk.cell.as_ref().and_then(|cell| {
            let snap = r.borrow().snapshot(&source.borrow());
            let op = snap.operator?;
            op.state.into_iter().find(|c| &c.key == cell)?.value
        });
        WalkDoneView {
            replica: walk.actor.clone(),
            key: walk.message.map(|m| m.1),
            ts: walk.message.map(|m| m.2),
            value,
        }
    }

    /// One timely step of every replica; the message ends with `why` it was not a stage.
    fn step_timely_all(&mut self, why: &str) -> Result<Applied, CommandError> {
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
            format!("stepped {} ({why})", stepped.join("; ")),
        ))
    }

    /// Whether some upsert is queued or unread by the replica a walk would take.
    fn has_unread(&mut self) -> bool {
        let queued = self.upsert_hub().view().queued > 0;
        let source = Rc::clone(&self.upsert_hub().source);
        let unread = self
            .walk_replica()
            .is_some_and(|(_, r)| r.borrow().snapshot(&source.borrow()).source_unread > 0);
        queued || unread
    }

    /// The first running replica.
    fn walk_replica(&self) -> Option<(String, Rc<RefCell<Replica>>)> {
        self.actors.iter().find_map(|a| {
            let slot = a.replica.borrow();
            let r = slot.as_ref()?;
            let halted = r.borrow().halted().is_some();
            (!halted).then(|| (a.id.clone(), Rc::clone(r)))
        })
    }

    fn replica_of(&self, id: &str) -> Option<Rc<RefCell<Replica>>> {
        let a = self.actors.iter().find(|a| a.id == id)?;
        let slot = a.replica.borrow();
        slot.as_ref().map(Rc::clone)
    }

    fn hold_replicas(&self, manual: Manual) {
        for a in &self.actors {
            if let Some(r) = a.replica.borrow().as_ref() {
                r.borrow_mut().set_manual(manual);
            }
        }
    }

    /// Ends a walk in progress, and forgets the line of a finished one.
    pub(super) fn end_walk(&mut self) {
        self.walk_done = None;
        if self.walk.take().is_some() {
            self.hold_replicas(Manual::Auto);
        }
    }

    /// Runs the scenario, one simulator step at a time, until `done` holds or the stage's
    /// budget of virtual time is spent. Returns whether `done` held.
    fn run_until(&mut self, mut done: impl FnMut(&Scenario) -> bool) -> Result<bool, CommandError> {
        let Mode::Seed(sim) = &self.mode else {
            return Ok(done(self));
        };
        let deadline = sim.now_ms() + STAGE_BUDGET_MS;
        while !done(self) {
            if sim.now_ms() >= deadline {
                return Ok(false);
            }
            sim.step().map_err(super::sim_error)?;
            self.pump();
        }
        Ok(true)
    }

    fn run_stage(&mut self, walk: &Walk, r: &Rc<RefCell<Replica>>) -> Result<String, CommandError> {
        let source = Rc::clone(&self.upsert_hub().source);
        let unread = |r: &Rc<RefCell<Replica>>| r.borrow().snapshot(&source.borrow()).source_unread;
        match walk.next {
            Stage::Source => {
                let arrived = self.run_until(|s| {
                    s.upsert.as_ref().is_some_and(|h| h.view().queued == 0) && unread(r) > 0
                })?;
                let src = source.borrow();
                // The newest message is the one just pushed by hand; older unread ones (the
                // generator's, before it was turned off) go along with it into the stash.
                let earlier = unread(r).saturating_sub(1);
                let Some(m) = src.messages().last().filter(|_| arrived) else {
                    return Ok("the upsert did not reach the source log in time".into());
                };
                let value = m.value.as_ref().map_or("a delete".into(), |v| match v {
                    Ok(row) => format!("= {row}"),
                    Err(e) => format!("= error {e:?}"),
                });
                if let Some(w) = &mut self.walk {
                    w.message = Some((m.offset, m.key, m.ts));
                }
                let also = match earlier {
                    0 => String::new(),
                    1 => " (nor 1 earlier message, which goes along)".into(),
                    n => format!(" (nor {n} earlier messages, which go along)"),
                };
                Ok(format!(
                    "key {} {value} is in the source log at offset {}, time {}; {} has not read it{also}",
                    m.key, m.offset, m.ts, walk.actor
                ))
            }
            Stage::Stash => Ok(self.stage_stash(walk, r, &source)),
            Stage::Provisional => self.stage_provisional(walk, r),
            Stage::Sink => self.stage_sink(walk, r, &source),
            Stage::Shard => {
                let ts = walk.message.map_or(0, |m| m.2);
                let done = self.run_until(|_| r.borrow().sink_upper().is_some_and(|u| u > ts))?;
                let upper = r.borrow().sink_upper();
                Ok(if done {
                    format!(
                        "the compare_and_append committed: the shard holds the upsert, its upper is {}",
                        super::log::fmt_frontier(upper)
                    )
                } else {
                    "the write has not committed yet".into()
                })
            }
            Stage::Feedback => {
                let ts = walk.message.map_or(0, |m| m.2);
                let done = self.run_until(|_| {
                    let (n, upper) = r.borrow_mut().pull_feedback();
                    n > 0 && upper.is_some_and(|u| u > ts)
                })?;
                let (n, upper) = r.borrow_mut().pull_feedback();
                Ok(if done {
                    format!(
                        "{}'s persist source read {n} updates back from the shard (listen, up to {}); they wait at the operator's persist input",
                        walk.actor,
                        super::log::fmt_frontier(upper)
                    )
                } else {
                    "the persist source has not read the write back yet".into()
                })
            }
            Stage::State => {
                let mut rb = r.borrow_mut();
                let fed = rb.feed();
                rb.step_worker();
                let key = walk.message.map_or(0, |m| m.1);
                Ok(format!(
                    "{} folded {fed} feedback updates into its state: key {key} now holds what the shard holds, no longer provisional",
                    walk.actor
                ))
            }
        }
    }

    fn stage_stash(
        &mut self,
        walk: &Walk,
        r: &Rc<RefCell<Replica>>,
        source: &Rc<RefCell<crate::upsert::source::SourceLog>>,
    ) -> String {
        let Some((_, key, ts)) = walk.message else {
            return "nothing to stash: the upsert never reached the source log".into();
        };
        let mut rb = r.borrow_mut();
        rb.feed();
        // The input frontier first, then the data at it: it arrives exactly at the frontier.
        rb.advance_source_to(ts);
        for _ in 0..8 {
            let at = rb
                .snapshot(&source.borrow())
                .operator
                .and_then(|o| o.input_upper);
            if at >= Some(ts) {
                break;
            }
            rb.step_worker_once();
        }
        let read = rb.read_source_capped(&source.borrow(), ts);
        rb.step_worker_once();
        let stash = rb
            .snapshot(&source.borrow())
            .operator
            .map_or_else(Vec::new, |o| o.stash);
        let stashed = stash.len();
        let cell = stash.into_iter().find(|e| e.time == ts).map(|e| e.key);
        drop(rb);
        if let Some(w) = &mut self.walk {
            w.cell = cell;
        }
        format!(
            "{} read {read} messages with its input frontier held at {ts}; key {key} waits in the stash ({stashed} entries) until the time is complete",
            walk.actor
        )
    }

    fn stage_provisional(
        &mut self,
        walk: &Walk,
        r: &Rc<RefCell<Replica>>,
    ) -> Result<String, CommandError> {
        let Some((_, key, ts)) = walk.message else {
            return Ok("nothing to emit".into());
        };
        let before = r.borrow().counters().provisional_written;
        let mut caught_up = false;
        for _ in 0..6 {
            {
                let mut rb = r.borrow_mut();
                rb.feed();
                rb.step_worker_once();
                if rb.counters().provisional_written > before {
                    break;
                }
            }
            // The persist upper must reach the time first: write the (empty) range up to it.
            let lower = r.borrow().sink_upper();
            r.borrow_mut().set_manual(Manual::WriteOnce);
            self.run_until(|_| {
                let rb = r.borrow();
                rb.manual() == Manual::Hold && rb.sink_upper() != lower
            })?;
            let upper = r.borrow().sink_upper();
            self.run_until(|_| r.borrow_mut().pull_feedback().1 >= upper)?;
            caught_up = true;
        }
        let made = r.borrow().counters().provisional_written > before;
        if let Some(w) = &mut self.walk {
            w.empty_range = caught_up;
        }
        let how = if caught_up {
            format!(
                " (its sink first wrote an empty range, no updates, to move the shard's upper to \
                 {ts}: the uppers now read {ts}, and an upper {ts} means every time before {ts} \
                 is complete, not {ts} itself; the upsert at {ts} is not in the shard yet)"
            )
        } else {
            String::new()
        };
        Ok(if made {
            format!("{} drained at its input frontier {ts}{how}: key {key} is in its state as a provisional value ◌, not yet in the shard", walk.actor)
        } else {
            format!("{} made no partial emission at {ts}{how}", walk.actor)
        })
    }

    fn stage_sink(
        &mut self,
        walk: &Walk,
        r: &Rc<RefCell<Replica>>,
        source: &Rc<RefCell<crate::upsert::source::SourceLog>>,
    ) -> Result<String, CommandError> {
        let ts = walk.message.map_or(0, |m| m.2);
        let write = {
            let mut rb = r.borrow_mut();
            rb.read_source(&source.borrow());
            let mut write = None;
            for _ in 0..4 {
                rb.step_worker_once();
                write = rb.next_write();
                if write.as_ref().is_some_and(|w| !w.updates.is_empty()) {
                    break;
                }
            }
            write
        };
        let Some(w) = write else {
            return Ok("the sink has nothing complete to write yet".into());
        };
        r.borrow_mut().set_manual(Manual::WriteOnce);
        self.run_until(|_| r.borrow().manual() == Manual::Hold)?;
        let f = |a: &timely::progress::Antichain<u64>| {
            super::log::fmt_frontier(a.elements().first().copied())
        };
        Ok(format!(
            "the input frontier moved past {ts}; {}'s sink sent compare_and_append of {} updates at [{}, {}), expecting the shard's upper {}",
            walk.actor,
            w.updates.len(),
            f(&w.lower),
            f(&w.upper),
            f(&w.lower)
        ))
    }
}
