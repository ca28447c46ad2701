//! Stepping a [`Replica`] by hand: a host (the playground's stage-by-stage walk) takes the
//! replica from its driver ([`Manual::Hold`]), moves it one stage at a time with the methods
//! here, lets the driver write one range when it is time ([`Manual::WriteOnce`]), and gives it
//! back ([`Manual::Auto`]). Nothing here is async; the driver reads [`Replica::driver_turn`].

use serde::Serialize;

use super::Replica;
use crate::persist::codec::Timestamp;
use crate::upsert::persist_source::FeedbackEvent;
use crate::upsert::source::SourceLog;

/// Who moves the replica: its driver on its own, or a host stepping it by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Manual {
    /// The driver steps it and writes (the default).
    Auto,
    /// The host steps it; the driver neither steps nor writes.
    Hold,
    /// As `Hold`, but the driver writes the sink's next range once, then holds again.
    WriteOnce,
}

impl Replica {
    /// Hands the replica to a host stepping it by hand ([`Manual::Hold`]), lets its driver
    /// write once ([`Manual::WriteOnce`]), or gives it back to the driver ([`Manual::Auto`]).
    pub fn set_manual(&mut self, manual: Manual) {
        self.manual = manual;
    }

    /// Who moves it now.
    pub fn manual(&self) -> Manual {
        self.manual
    }

    /// The driver's turn: whether it steps the replica, and whether it may write (a
    /// [`Manual::WriteOnce`] is used up here).
    pub fn driver_turn(&mut self) -> (bool, bool) {
        match self.manual {
            Manual::Auto => (true, true),
            Manual::Hold => (false, false),
            Manual::WriteOnce => {
                self.manual = Manual::Hold;
                (false, true)
            }
        }
    }

    /// Advances the operator's source frontier to `t` without reading (a host holding the
    /// input frontier at a message's time, so that it arrives exactly at the frontier).
    pub fn advance_source_to(&mut self, t: Timestamp) {
        if t > self.source_frontier {
            self.source_frontier = t;
            self.worker.advance_source(t);
        }
    }

    /// Reads like [`Replica::read_source`], but no message at or after time `end`
    /// ([`crate::upsert::source::SourceReader::read_before`]), and advances the source frontier
    /// at most to `cap`.
    pub fn read_source_capped(
        &mut self,
        source: &SourceLog,
        end: Timestamp,
        cap: Timestamp,
    ) -> u64 {
        let (updates, frontier) = self.reader.read_before(source, self.cfg.read_batch, end);
        let n = updates.len() as u64;
        if let Err(e) = self.worker.send_source(updates) {
            self.halt(format!("source: {e}"));
            return n;
        }
        self.advance_source_to(frontier.min(cap));
        n
    }

    /// The offsets of the source messages it has not read yet.
    pub fn unread_offsets(&self, source: &SourceLog) -> Vec<u64> {
        self.reader.unread_offsets(source)
    }

    /// One `worker.step()` and the output to the sink, with no feed and no read.
    pub fn step_worker_once(&mut self) -> u64 {
        self.worker.step_once();
        self.collect()
    }

    /// Takes what the persist source delivered off its channel, without moving it into the
    /// operator: the updates waiting and the newest upper among them.
    pub fn pull_feedback(&mut self) -> (u64, Option<Timestamp>) {
        while let Ok(event) = self.feedback.try_recv() {
            self.feedback_queue.push_back(event);
        }
        let mut n = 0;
        let mut upper = None;
        for e in &self.feedback_queue {
            match e {
                FeedbackEvent::Updates(u) => n += u.len() as u64,
                FeedbackEvent::Progress(p) => upper = p.elements().first().copied().or(upper),
                FeedbackEvent::Error(_) => {}
            }
        }
        (n, upper)
    }
}
