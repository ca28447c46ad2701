//! A press with nothing to walk (live mode, the generator on, every message read): one timely
//! worker step of every replica, and what each step changed on the replica's card, in the card's
//! own terms, so that a press never reads as nothing happening while the card moves.

use std::rc::Rc;

use crate::persist::codec::Timestamp;
use crate::playground::apply::{applied, refuse};
use crate::playground::{Applied, CommandError, Scenario};
use crate::upsert::replica::Replica;
use crate::upsert::source::SourceLog;

impl Scenario {
    /// One timely step of every replica; the message starts with `why` it was not a stage.
    pub(super) fn step_timely_all(&mut self, why: &str) -> Result<Applied, CommandError> {
        let source = Rc::clone(&self.upsert_hub().source);
        let mut stepped = Vec::new();
        for a in &self.actors {
            let slot = a.replica.borrow();
            let Some(r) = slot.as_ref() else { continue };
            let before = StepSeen::of(&r.borrow(), &source.borrow());
            let report = r.borrow_mut().step_timely(&source.borrow());
            let after = StepSeen::of(&r.borrow(), &source.borrow());
            stepped.push(format!(
                "{}: fed back {}, read {}, {} worker step, {} out{}",
                a.id,
                report.fed_back,
                report.read,
                report.worker_steps,
                report.output,
                before.moved(&after)
            ));
        }
        if stepped.is_empty() {
            return refuse("no running replica to step: add one with + Replica");
        }
        Ok(applied(
            None,
            None,
            format!(
                "{why}. Instead, one worker step of every replica: stepped {}",
                stepped.join("; ")
            ),
        ))
    }
}

/// What a worker step can change in a replica without reading or emitting an update: its
/// frontiers move (progress alone) and its stash drains, each stashed upsert dropped because the
/// shard already holds its time. A press that says only "read 0, 0 out" while the card's
/// frontiers jump and its stash empties reads as nothing happening (the sixth learner walk).
struct StepSeen {
    input: Option<Timestamp>,
    persist: Option<Timestamp>,
    emitted: Option<Timestamp>,
    stash: usize,
    discarded: u64,
}

impl StepSeen {
    /// Read as the replica's card shows them (render/upsert.js): the operator's input upper and
    /// persist upper, the output frontier ("emitted up to"), the stash's length.
    fn of(r: &Replica, source: &SourceLog) -> Self {
        let snap = r.snapshot(source);
        let op = snap.operator.as_ref();
        StepSeen {
            input: op.and_then(|op| op.input_upper),
            persist: op.and_then(|op| op.persist_upper),
            emitted: snap.output_frontier,
            stash: op.map_or(0, |op| op.stash.len()),
            discarded: snap.counters.stash_discarded,
        }
    }

    /// `", input upper 1501→1881, stash 1→0, 1 discarded"`, or `""` when nothing moved.
    fn moved(&self, after: &StepSeen) -> String {
        let t = |t: Option<Timestamp>| t.map_or("none".into(), |t| t.to_string());
        let mut out = String::new();
        for (name, was, now) in [
            ("input upper", self.input, after.input),
            ("persist upper", self.persist, after.persist),
            ("emitted up to", self.emitted, after.emitted),
        ] {
            if was != now {
                out += &format!(", {name} {}→{}", t(was), t(now));
            }
        }
        if self.stash != after.stash {
            out += &format!(", stash {}→{}", self.stash, after.stash);
        }
        if after.discarded > self.discarded {
            out += &format!(", {} discarded", after.discarded - self.discarded);
        }
        out
    }
}
