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
//! Which upsert: the newest one pushed by hand ([`HandPush`]) that the replica has not read.
//! Older messages it has not read (the generator's, queued before it was turned off, or older
//! pushes) go through the stages with it, and stage 1 names each. With no push waiting, the walk
//! takes the newest message and says so. Every press's message, and why a press walked nothing,
//! stays in the snapshot ([`PressView`]) for the page to show beside the button.
//!
//! Invariant: `walk.is_some()` iff every running replica is held.

use std::cell::RefCell;
use std::rc::Rc;

use serde::Serialize;

use super::apply::{applied, refuse};
use super::{Applied, CommandError, Mode, Scenario};
use crate::persist::codec::{Datum, Row};
use crate::upsert::replica::{Manual, Replica};
use crate::upsert::source::{SourceLog, SourceMessage};
use crate::upsert::types::{UpsertKey, UpsertValue};

mod stages;
mod step_all;
use stages::StageStop;

/// Virtual time one wait of a stage may run the scenario for before it reports that it could
/// not finish.
const STAGE_BUDGET_MS: u64 = 3_000;

/// Virtual time one press may run the scenario for in all: half a lease. A held replica's
/// persist source heartbeats its reader only when a batch arrives, so a press that ran the clock
/// a whole lease without a write let the readers expire (and the replicas fail).
pub const PRESS_BUDGET_MS: u64 = super::PLAYGROUND_LEASE_MS / 2;

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
    /// The pushes it takes, oldest first: the last is the one it follows, the others go along
    /// (empty: no push was waiting, it follows the newest message).
    pushes: Vec<HandPush>,
    message: Option<(u64, i64, u64)>,
    value: Option<String>,
    cell: Option<String>,
    along: Vec<Along>,
    overtaken_by: Option<u64>,
    empty_range: bool,
    /// The sink wrote no update for the upsert (its value was already in state): only the
    /// shard's upper moves past its time, and the feedback read is of 0 updates.
    unchanged: bool,
    /// Until when (virtual time) the press now running may run the scenario.
    press_deadline_ms: u64,
}

/// A message that goes through the stages with the walked one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Along {
    /// `#offset key K = value`.
    pub text: String,
    /// Whether it is an earlier push of the learner's (else the generator's).
    pub by_hand: bool,
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
    /// Whether it follows an upsert pushed by hand (else the newest message, the generator's).
    pub by_hand: bool,
    /// The upsert's source offset, key and time, once it is in the source log.
    pub offset: Option<u64>,
    /// Its key.
    pub key: Option<i64>,
    /// Its time.
    pub ts: Option<u64>,
    /// Its value, as the state shows values ("delete" for a delete).
    pub value: Option<String>,
    /// Its key as the replica's stash and state cells name it (the key's hash).
    pub cell: Option<String>,
    /// The other unread messages that go through the stages with it.
    pub along: Vec<Along>,
    /// A message for the same key at the same time with a later offset: the upsert keeps it.
    pub overtaken_by: Option<u64>,
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
    /// Whether it followed an upsert pushed by hand.
    pub by_hand: bool,
    /// The upsert's key.
    pub key: Option<i64>,
    /// Its time.
    pub ts: Option<u64>,
    /// What the upsert held ("delete" for a delete).
    pub pushed: Option<String>,
    /// What the replica's state holds for that same key now (`None`: a delete, or not found).
    pub value: Option<String>,
    /// A later message for the key at the same time, whose value the state holds instead.
    pub overtaken_by: Option<u64>,
}

/// What the last **Step replicas** press did, for the page to show beside the button until
/// another command runs or the run moves on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PressView {
    /// The press's message (or why it was refused).
    pub text: String,
    /// Whether it was refused.
    pub refused: bool,
    /// Whether the generator kept it from walking (the page offers to turn it off).
    pub generator_on: bool,
}

impl Walk {
    pub(crate) fn view(&self) -> WalkView {
        WalkView {
            replica: self.actor.clone(),
            next: self.next,
            next_name: self.next.name(),
            by_hand: !self.pushes.is_empty(),
            offset: self.message.map(|m| m.0),
            key: self.message.map(|m| m.1),
            ts: self.message.map(|m| m.2),
            value: self.value.clone(),
            cell: self.cell.clone(),
            along: self.along.clone(),
            overtaken_by: self.overtaken_by,
            empty_range: self.empty_range,
        }
    }

    /// Finds the walk's pushes in the source log, oldest first, each taking the first message
    /// after it that holds what it pushed and no earlier push took: the offsets the earlier
    /// pushes took, and the message of the one the walk follows, once there.
    fn locate(&self, log: &SourceLog) -> (Vec<u64>, Option<SourceMessage>) {
        let mut taken = Vec::new();
        let mut last = None;
        for p in &self.pushes {
            last = log
                .messages()
                .iter()
                .find(|m| p.is(m) && !taken.contains(&m.offset))
                .cloned();
            if let Some(m) = &last {
                taken.push(m.offset);
            }
        }
        if last.is_some() {
            taken.pop();
        }
        (taken, last)
    }
}

/// A source value as the replica's state shows values ("delete" for a delete).
pub(crate) fn render_value(v: &Option<UpsertValue>) -> String {
    match v {
        None => "delete".into(),
        Some(Ok(row)) => row.to_string(),
        Some(Err(e)) => format!("error: {e}"),
    }
}

/// The name the replica's stash and state give key `key` (its hash, short).
fn cell_of(key: i64) -> String {
    UpsertKey::from_key(&Row::new([Datum::Int(key)])).short()
}

/// What a walk starting now would take.
enum Start {
    /// The pushes it takes (the last is the one it follows; empty: the newest message).
    Walk(Vec<HandPush>),
    /// Nothing to walk, and why.
    Nothing(String),
}

impl Scenario {
    /// [`super::Command::StepReplicas`]: a stage of the walk (see the module docs), or one timely
    /// step of every replica when there is nothing to walk. The press's message stays for the
    /// page ([`PressView`]).
    pub(super) fn step_replicas(&mut self) -> Result<Applied, CommandError> {
        let generating = self.upsert_hub().generating();
        let result = self.press_step_replicas(generating);
        self.press = Some(match &result {
            Ok(a) => PressView {
                text: a.message.clone(),
                refused: false,
                generator_on: generating && self.walk.is_none() && self.is_seeded(),
            },
            Err(e) => PressView {
                text: e.0.clone(),
                refused: true,
                generator_on: false,
            },
        });
        result
    }

    fn press_step_replicas(&mut self, generating: bool) -> Result<Applied, CommandError> {
        if self.walk.is_none() {
            let Some((actor, replica)) = self.walk_replica() else {
                return self.step_timely_all("no running replica to walk");
            };
            let pushes = if !self.is_seeded() {
                Start::Nothing("live mode walks no stages".into())
            } else if generating {
                Start::Nothing(self.generator_on_why(&replica))
            } else {
                self.walk_start(&actor, &replica)
            };
            let pushes = match pushes {
                Start::Walk(p) => p,
                Start::Nothing(why) => return self.step_timely_all(&why),
            };
            self.walk_done = None;
            self.hold_replicas(Manual::Hold);
            self.walk = Some(Walk {
                actor,
                next: Stage::Source,
                pushes,
                message: None,
                value: None,
                cell: None,
                along: Vec::new(),
                overtaken_by: None,
                empty_range: false,
                unchanged: false,
                press_deadline_ms: 0,
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
        let deadline = self.now_ms() + PRESS_BUDGET_MS;
        if let Some(w) = &mut self.walk {
            w.press_deadline_ms = deadline;
        }
        let stage = walk.next;
        let text = match self.run_stage(&walk, &replica)? {
            Ok(text) => text,
            Err(stop) => {
                // A stage that could not finish ends the walk: it says so, never a later stage.
                // Its pushes are not given back: the learner pushes again.
                if let Some(w) = &mut self.walk {
                    w.pushes.clear();
                }
                self.end_walk();
                let (n, name) = (stage.number(), stage.name());
                return Ok(applied(
                    Some(&walk.actor),
                    None,
                    match stop {
                        StageStop::ShardHasIt(text) => format!("stage {n}/7, {name}: {text}"),
                        StageStop::Unfinished(text) => format!(
                            "stage {n}/7, {name}: {text}; the walk stops here, unfinished: the replicas run on their own again (push and press to walk again)"
                        ),
                    },
                ));
            }
        };
        match stage.next() {
            Some(next) => {
                if let Some(w) = &mut self.walk {
                    w.next = next;
                }
            }
            None => {
                let done = self.done_view(&walk, &replica);
                if let Some(w) = &mut self.walk {
                    w.pushes.clear();
                }
                self.end_walk();
                self.walk_done = Some(done);
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

    /// Takes the hand pushes the hub keeps and decides what a walk through `actor` follows:
    /// the newest push it has not read, with the older unread ones going along. A push it has
    /// read already (the run went on) is dropped; with none waiting, the newest unread message.
    fn walk_start(&mut self, actor: &str, replica: &Rc<RefCell<Replica>>) -> Start {
        let hub = self.upsert_hub();
        let pushes: Vec<HandPush> = hub.hand.borrow_mut().drain(..).collect();
        let queued = hub.view().queued;
        let unread = {
            let src = hub.source.borrow();
            replica.borrow().unread_offsets(&src).len()
        };
        let (waiting, read) = self.sort_pushes(replica, pushes);
        if !waiting.is_empty() || queued > 0 || unread > 0 {
            return Start::Walk(waiting);
        }
        let why = if let Some(last) = read.last() {
            format!(
                "nothing to walk: your push, {last}, was read by {actor} on its own while the run went on; push another upsert and press again without running in between"
            )
        } else if let Some(done) = self.walk_done.as_ref().filter(|d| d.by_hand) {
            format!(
                "nothing new to walk: your push, key {} = {}, went through all seven stages",
                done.key.unwrap_or_default(),
                done.pushed.as_deref().unwrap_or("?")
            )
        } else {
            "nothing to walk: push an upsert (Push, above), then press again".into()
        };
        Start::Nothing(why)
    }

    /// Why a press walks nothing while the generator is on, and what to do (a push already
    /// made is named: it is walked once the generator is off).
    fn generator_on_why(&mut self, replica: &Rc<RefCell<Replica>>) -> String {
        let pushes = self.upsert_hub().hand.borrow().clone();
        let (waiting, _) = self.sort_pushes(replica, pushes);
        let then = match waiting.last() {
            Some(p) => format!(
                "turn it off, then press again to walk your push, key {} = {}",
                p.key,
                render_value(&p.value)
            ),
            None => "turn it off, push an upsert, then press again".into(),
        };
        format!("the generator is on, so there is no one upsert to walk stage by stage: {then}")
    }

    /// Sorts hand pushes, oldest first, into those `replica` has not read (queued, or in the
    /// source log unread) and those it has read on its own (as text). Each push takes the
    /// first message after it that holds what it pushed and no earlier push took.
    fn sort_pushes(
        &mut self,
        replica: &Rc<RefCell<Replica>>,
        pushes: Vec<HandPush>,
    ) -> (Vec<HandPush>, Vec<String>) {
        let source = Rc::clone(&self.upsert_hub().source);
        let src = source.borrow();
        let unread = replica.borrow().unread_offsets(&src);
        let mut taken: Vec<u64> = Vec::new();
        let mut waiting = Vec::new();
        let mut read = Vec::new();
        for p in pushes {
            let m = src
                .messages()
                .iter()
                .find(|m| p.is(m) && !taken.contains(&m.offset));
            match m {
                Some(m) if !unread.contains(&m.offset) => {
                    taken.push(m.offset);
                    read.push(format!("key {} = {}", p.key, render_value(&p.value)));
                }
                Some(m) => {
                    taken.push(m.offset);
                    waiting.push(p);
                }
                None => waiting.push(p),
            }
        }
        (waiting, read)
    }

    /// What the panel keeps of a finished walk: the walked key, what it held, and the value
    /// the state holds for that same key now.
    fn done_view(&mut self, walk: &Walk, r: &Rc<RefCell<Replica>>) -> WalkDoneView {
        let source = Rc::clone(&self.upsert_hub().source);
        let value = walk.cell.as_ref().and_then(|cell| {
            let snap = r.borrow().snapshot(&source.borrow());
            let op = snap.operator?;
            op.state.into_iter().find(|c| &c.key == cell)?.value
        });
        WalkDoneView {
            replica: walk.actor.clone(),
            by_hand: !walk.pushes.is_empty(),
            key: walk.message.map(|m| m.1),
            ts: walk.message.map(|m| m.2),
            pushed: walk.value.clone(),
            value,
            overtaken_by: walk.overtaken_by,
        }
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

    /// Ends a walk in progress, and forgets the line of a finished one and the last press's.
    pub(super) fn end_walk(&mut self) {
        // A walk cut short (a command, a crash, the run going on) gives its pushes back: the
        // next walk still follows them as the learner's, not as the generator's messages.
        if let (Some(w), Some(hub)) = (&mut self.walk, &self.upsert) {
            let mut hand = hub.hand.borrow_mut();
            w.pushes.append(&mut hand);
            std::mem::swap(&mut *hand, &mut w.pushes);
        }
        self.walk_done = None;
        self.press = None;
        if self.walk.take().is_some() {
            self.hold_replicas(Manual::Auto);
        }
    }

    /// Runs the scenario, one simulator step at a time, until `done` holds or the stage's
    /// budget of virtual time is spent. Returns whether `done` held.
    /// Whether the observer of `shard` has read a state whose upper is past `ts`, and its rows.
    fn observed_rows_past(&self, shard: &str, ts: u64) -> bool {
        self.observers.shards.get(shard).is_some_and(|(obs, _)| {
            let obs = obs.borrow();
            let upper = obs
                .state
                .as_ref()
                .and_then(|s| crate::persist::events::frontier(s.upper()));
            obs.rows.is_some() && upper.is_none_or(|u| u > ts)
        })
    }

    fn run_until(&mut self, mut done: impl FnMut(&Scenario) -> bool) -> Result<bool, CommandError> {
        let Mode::Seed(sim) = &self.mode else {
            return Ok(done(self));
        };
        let press = self.walk.as_ref().map_or(u64::MAX, |w| w.press_deadline_ms);
        let deadline = (sim.now_ms() + STAGE_BUDGET_MS).min(press);
        while !done(self) {
            if sim.now_ms() >= deadline {
                return Ok(false);
            }
            sim.step().map_err(super::sim_error)?;
            self.pump();
        }
        Ok(true)
    }
}

/// An upsert pushed by hand, kept until a walk of **Step replicas** follows it, or the replicas
/// read it on their own.
#[derive(Debug, Clone, PartialEq)]
pub struct HandPush {
    /// Its key.
    pub key: i64,
    /// Its value (`None`: a delete).
    pub value: Option<UpsertValue>,
    /// The source log's newest offset when it was pushed: its message comes after that one.
    pub after: u64,
}

impl HandPush {
    /// Whether `m` is this push's message.
    pub fn is(&self, m: &SourceMessage) -> bool {
        m.offset > self.after && m.key == self.key && m.value == self.value
    }
}
