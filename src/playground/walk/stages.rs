//! The seven stages of a walk (see [`super`]), one function each or one arm of
//! [`Scenario::run_stage`].
//!
//! The replica reads the source only up to the walked message's time
//! ([`Replica::read_source_capped`]): an upsert pushed while a walk runs gets a later time, stays
//! unread, and has a walk of its own next.

use std::cell::RefCell;
use std::rc::Rc;

use super::{render_value, Along, Walk};
use crate::playground::command::UPSERT_SHARD;
use crate::playground::log::plural;
use crate::playground::{CommandError, Scenario};
use crate::upsert::replica::{Manual, Replica};
use crate::upsert::source::{SourceLog, SourceMessage};

/// Reads a stage makes at most until the walked message is where it should be (each read takes
/// at most the replica's read batch, and the reader now and then holds some back).
const MAX_READS: usize = 64;

/// How many of the messages that go along a walk the texts name one by one.
const ALONG_NAMED: usize = 6;

/// Why a stage ended the walk instead of running to its end.
#[derive(Debug)]
pub(super) enum StageStop {
    /// The stage did not get where it waits for (a write committed, a read back) within the
    /// press's budget: the walk stops, unfinished. The text says what it waited for.
    Unfinished(String),
    /// The shard is already past the walked upsert's time (a walk cut short after another
    /// replica's write committed): nothing is left to walk, and the text says why.
    ShardHasIt(String),
}

impl Scenario {
    pub(super) fn run_stage(
        &mut self,
        walk: &Walk,
        r: &Rc<RefCell<Replica>>,
    ) -> Result<Result<String, StageStop>, CommandError> {
        let source = Rc::clone(&self.upsert_hub().source);
        match walk.next {
            super::Stage::Source => self.stage_source(walk, r, &source),
            super::Stage::Stash => Ok(self.stage_stash(walk, r, &source)),
            super::Stage::Provisional => self.stage_provisional(walk, r),
            super::Stage::Sink => self.stage_sink(walk, r, &source),
            super::Stage::Shard => {
                let ts = walk.message.map_or(0, |m| m.2);
                // A sink behind the shard (a walk cut short: another replica wrote) loses its
                // write, learns the upper, and writes once more.
                let mut lost = r.borrow().counters().sink_mismatches;
                let done = self.run_until(|_| {
                    let mut rb = r.borrow_mut();
                    if rb.counters().sink_mismatches > lost {
                        lost = rb.counters().sink_mismatches;
                        rb.set_manual(Manual::WriteOnce);
                    }
                    rb.sink_upper().is_some_and(|u| u > ts)
                })?;
                // The Shard panel's rows (which the text points at) are the observer's: it reads
                // the new state within a period.
                if done {
                    self.run_until(|s| s.observed_rows_past(UPSERT_SHARD, ts))?;
                }
                let upper = crate::playground::log::fmt_frontier(r.borrow().sink_upper());
                Ok(if done && walk.unchanged {
                    Ok(format!("the compare_and_append committed: no new update, only the shard's upper moved, to {upper}"))
                } else if done {
                    Ok(format!(
                        "the compare_and_append committed: the shard holds the upsert, its upper is {upper}; {}",
                        shard_row(walk)
                    ))
                } else {
                    Err(StageStop::Unfinished(
                        "the write has not committed yet".into(),
                    ))
                })
            }
            super::Stage::Feedback => {
                let ts = walk.message.map_or(0, |m| m.2);
                // An unchanged value was written as no update: the read back is of none.
                let done = self.run_until(|_| {
                    let (n, upper) = r.borrow_mut().pull_feedback();
                    (n > 0 || walk.unchanged) && upper.is_some_and(|u| u > ts)
                })?;
                let (n, upper) = r.borrow_mut().pull_feedback();
                Ok(if done && n == 0 {
                    Ok(format!(
                        "{}'s persist source read 0 updates back (listen, up to {}): the upper moved past {ts}, no update",
                        walk.actor,
                        crate::playground::log::fmt_frontier(upper)
                    ))
                } else if done {
                    Ok(format!(
                        "{}'s persist source read {} back from the shard (listen, up to {}); they wait at the operator's persist input (its card: read back, not yet folded {n})",
                        walk.actor,
                        plural(n, "update"),
                        crate::playground::log::fmt_frontier(upper)
                    ))
                } else {
                    Err(StageStop::Unfinished(
                        "the persist source has not read the write back yet".into(),
                    ))
                })
            }
            super::Stage::State => {
                let mut rb = r.borrow_mut();
                let fed = rb.feed();
                rb.step_worker();
                let (key, ts) = walk.message.map_or((0, 0), |m| (m.1, m.2));
                if walk.unchanged {
                    // No feedback for the key: its ◌ entry is not replaced, only unused past ts.
                    let snap = rb.snapshot(&source.borrow());
                    let cells = snap.operator.map_or_else(Vec::new, |o| o.state);
                    let left = cells
                        .iter()
                        .any(|c| Some(&c.key) == walk.cell.as_ref() && c.mode == "provisional");
                    let left = if left {
                        format!("; its ◌ entry at {ts} stays, used only at {ts}")
                    } else {
                        String::new()
                    };
                    return Ok(Ok(format!(
                        "{} folded {}: key {key} is as before, as the shard holds it{left}",
                        walk.actor,
                        plural(fed, "feedback update")
                    )));
                }
                Ok(Ok(format!(
                    "{} folded {} into its state: key {key} now holds what the shard holds, no longer provisional",
                    walk.actor,
                    plural(fed, "feedback update")
                )))
            }
        }
    }

    /// Stage 1: runs the scenario until the walked message is in the source log, then names it
    /// and every other message the replica has not read up to its time (they go along).
    fn stage_source(
        &mut self,
        walk: &Walk,
        r: &Rc<RefCell<Replica>>,
        source: &Rc<RefCell<SourceLog>>,
    ) -> Result<Result<String, StageStop>, CommandError> {
        let by_hand = !walk.pushes.is_empty();
        let arrived = if by_hand {
            self.run_until(|_| walk.locate(&source.borrow()).1.is_some())?
        } else {
            let unread =
                |r: &Rc<RefCell<Replica>>| r.borrow().snapshot(&source.borrow()).source_unread;
            self.run_until(|s| {
                s.upsert.as_ref().is_some_and(|h| h.view().queued == 0) && unread(r) > 0
            })?
        };
        let src = source.borrow();
        let (earlier_pushes, found) = walk.locate(&src);
        let m = if by_hand {
            found
        } else {
            src.messages().last().cloned()
        };
        let Some(m) = m.filter(|_| arrived) else {
            return Ok(Err(StageStop::Unfinished(
                "the upsert did not reach the source log in time".into(),
            )));
        };
        let unread = r.borrow().unread_offsets(&src);
        let along: Vec<Along> = src
            .messages()
            .iter()
            .filter(|o| o.offset != m.offset && o.ts <= m.ts && unread.contains(&o.offset))
            .map(|o| Along {
                text: format!("#{} key {} = {}", o.offset, o.key, render_value(&o.value)),
                by_hand: earlier_pushes.contains(&o.offset),
            })
            .collect();
        let overtaken_by = src
            .messages()
            .iter()
            .filter(|o| o.key == m.key && o.ts == m.ts && o.offset > m.offset)
            .map(|o| o.offset)
            .max();
        drop(src);
        let text = Ok(source_text(walk, &m, &along, overtaken_by));
        if let Some(w) = &mut self.walk {
            w.message = Some((m.offset, m.key, m.ts));
            w.value = Some(render_value(&m.value));
            w.cell = Some(super::cell_of(m.key));
            w.along = along;
            w.overtaken_by = overtaken_by;
        }
        Ok(text)
    }

    fn stage_stash(
        &mut self,
        walk: &Walk,
        r: &Rc<RefCell<Replica>>,
        source: &Rc<RefCell<SourceLog>>,
    ) -> Result<String, StageStop> {
        let Some((offset, key, ts)) = walk.message else {
            return Err(StageStop::Unfinished(
                "nothing to stash: the upsert never reached the source log".into(),
            ));
        };
        let mut rb = r.borrow_mut();
        // The shard's upper may be at `ts` already (a walk cut short wrote up to it): fed, the
        // operator would drain the message in the step that stashes it. It waits for stage 3.
        rb.feed_below(Some(ts));
        // Earlier unread messages first (the generator's, before it was turned off): the input
        // frontier may not pass their times before they are read (the replica would fail).
        let mut read = 0;
        for _ in 0..MAX_READS {
            let src = source.borrow();
            let behind = rb
                .unread_offsets(&src)
                .iter()
                .any(|o| src.messages().iter().any(|m| m.offset == *o && m.ts < ts));
            if !behind || rb.halted().is_some() {
                break;
            }
            read += rb.read_source_capped(&src, ts, ts);
            drop(src);
            rb.step_worker_once();
        }
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
        // Read (nothing after the message's time) until the message is in the stash.
        let from = offset.to_string();
        let mut stash = Vec::new();
        for _ in 0..MAX_READS {
            read += rb.read_source_capped(&source.borrow(), ts + 1, ts);
            rb.step_worker_once();
            stash = rb
                .snapshot(&source.borrow())
                .operator
                .map_or_else(Vec::new, |o| o.stash);
            if stash.iter().any(|e| e.from_time == from) || rb.halted().is_some() {
                break;
            }
        }
        let there = stash.iter().any(|e| e.from_time == from);
        drop(rb);
        if !there {
            if let Some(stop) = self.shard_has_it(walk, r) {
                return Err(stop);
            }
        }
        let rb = r.borrow();
        let where_ = if there {
            format!(
                "key {key} (offset {offset}) waits in the stash ({}) until the operator has read the shard back up to t{ts} (its persist upper reaches {ts})",
                plural(stash.len() as u64, "entry")
            )
        } else {
            let why = rb
                .halted()
                .map_or(String::new(), |h| format!(" ({} failed: {h})", walk.actor));
            format!("key {key} (offset {offset}) is not in the stash{why}")
        };
        let text = format!(
            "{} read {} with its input frontier held at {ts} (every source time before {ts} is in, {ts} itself may still grow); {where_}",
            walk.actor,
            plural(read, "message")
        );
        if there {
            Ok(text)
        } else {
            Err(StageStop::Unfinished(text))
        }
    }

    /// Stage 3. The operator drains at `ts` only once its persist upper is `ts` (the state is
    /// complete before it). Earlier stash entries (a generator burst it read) hold its output,
    /// hence the sink, below `ts`; each round here folds the feedback in, steps the worker until
    /// quiet, and then either waits for the feedback to reach the shard's upper as the sink knows
    /// it, or lets the sink write the range it has complete (the earlier entries, or an empty
    /// range up to `ts`). SUBTLE: the driver is let write only when the sink has a range: a
    /// write-once with nothing to write, or a wait for feedback the operator already took, ran
    /// the clock out (8 budgets, 24 s: the readers' leases expired).
    fn stage_provisional(
        &mut self,
        walk: &Walk,
        r: &Rc<RefCell<Replica>>,
    ) -> Result<Result<String, StageStop>, CommandError> {
        let Some((_, key, ts)) = walk.message else {
            return Ok(Err(StageStop::Unfinished("nothing to emit".into())));
        };
        let before = r.borrow().counters().provisional_written;
        let made = || r.borrow().counters().provisional_written > before;
        let (mut wrote, mut with_updates) = (false, 0u64);
        for _ in 0..MAX_READS {
            {
                let mut rb = r.borrow_mut();
                rb.feed();
                rb.step_worker();
            }
            if made() || r.borrow().halted().is_some() {
                break;
            }
            let lower = r.borrow().sink_upper();
            let fed = |r: &Rc<RefCell<Replica>>| {
                let mut rb = r.borrow_mut();
                rb.pull_feedback().1.max(rb.persist_fed_upper())
            };
            let next = r.borrow_mut().next_write();
            let ok = if fed(r) < lower {
                // The shard is ahead of the operator's persist input: its feedback is on the way.
                self.run_until(|_| fed(r) >= lower)?
            } else if let Some(w) = next {
                with_updates += w.updates.len() as u64;
                r.borrow_mut().set_manual(Manual::WriteOnce);
                let ok = self.run_until(|_| {
                    let rb = r.borrow();
                    rb.manual() == Manual::Hold && rb.sink_upper() != lower
                })?;
                wrote |= ok;
                ok
            } else {
                // Nothing to write and the feedback is in: only newer feedback can move it.
                let at = fed(r);
                self.run_until(|_| fed(r) > at)?
            };
            if !ok {
                break;
            }
        }
        if let Some(w) = &mut self.walk {
            w.empty_range = wrote && with_updates == 0;
        }
        // What the sink wrote first, in short sentences after the main one (a learner reads it
        // in the status line; one sentence with a long parenthesis was hard to follow).
        let how = if !wrote {
            String::new()
        } else if with_updates == 0 {
            format!(
                ". Its sink first wrote an empty range (no updates) to move the shard's upper to \
                 {ts}. The uppers now read {ts}. An upper {ts} means every time before {ts} is \
                 complete, not {ts} itself. So the upsert at {ts} is not in the shard yet"
            )
        } else {
            format!(
                ". Its sink first wrote the earlier messages it had read ({}) to move the \
                 shard's upper to {ts}. The upsert at {ts} is not in the shard yet",
                plural(with_updates, "update")
            )
        };
        if !made() {
            if let Some(stop) = self.shard_has_it(walk, r) {
                return Ok(Err(stop));
            }
        }
        // With `how`, its last sentence says the upsert is not in the shard yet.
        let not_yet = if how.is_empty() {
            ", not yet in the shard"
        } else {
            ""
        };
        Ok(if made() {
            Ok(format!(
                "{} drained its stash at its input frontier {ts} (took out what may go out now): key {key} is in its state as a provisional value ◌{not_yet}{how}",
                walk.actor
            ))
        } else {
            Err(StageStop::Unfinished(format!(
                "{} made no partial emission at {ts}{how}",
                walk.actor
            )))
        })
    }

    /// Whether the shard is past the upsert's time already, as the replica knows it (a walk cut
    /// short after another replica's write committed): the operator discards the message as
    /// stale, and the walk ends with why.
    fn shard_has_it(&self, walk: &Walk, r: &Rc<RefCell<Replica>>) -> Option<StageStop> {
        let (_, key, ts) = walk.message?;
        let upper = {
            let mut rb = r.borrow_mut();
            rb.pull_feedback()
                .1
                .max(rb.persist_fed_upper())
                .max(rb.sink_upper())
        };
        let u = upper.filter(|u| *u > ts)?;
        Some(StageStop::ShardHasIt(format!(
            "the shard already holds key {key} (its upper {u} is past {ts}), written by another replica before the walk was cut short: {} learns it by the feedback read, on its own; the walk ends here",
            walk.actor
        )))
    }

    fn stage_sink(
        &mut self,
        walk: &Walk,
        r: &Rc<RefCell<Replica>>,
        source: &Rc<RefCell<SourceLog>>,
    ) -> Result<Result<String, StageStop>, CommandError> {
        let ts = walk.message.map_or(0, |m| m.2);
        let write = {
            let mut rb = r.borrow_mut();
            // The input frontier moves just past the time: every message up to it is read,
            // nothing after it (an upsert pushed meanwhile waits for a walk of its own).
            for _ in 0..MAX_READS {
                let src = source.borrow();
                rb.read_source_capped(&src, ts + 1, ts + 1);
                let behind = rb
                    .unread_offsets(&src)
                    .iter()
                    .any(|o| src.messages().iter().any(|m| m.offset == *o && m.ts <= ts));
                if !behind || rb.halted().is_some() {
                    break;
                }
            }
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
            return Ok(Err(StageStop::Unfinished(
                "the sink has nothing complete to write yet".into(),
            )));
        };
        // No update in a range past the upsert's time: the operator emitted nothing for it (the
        // value was already in state, or a delete of an absent key).
        let unchanged = w.updates.is_empty() && w.upper.elements().iter().all(|u| *u > ts);
        if let Some(walk) = &mut self.walk {
            walk.unchanged = unchanged;
        }
        r.borrow_mut().set_manual(Manual::WriteOnce);
        self.run_until(|_| r.borrow().manual() == Manual::Hold)?;
        let f = |a: &timely::progress::Antichain<u64>| {
            crate::playground::log::fmt_frontier(a.elements().first().copied())
        };
        let same = match (unchanged, walk.value.as_deref()) {
            (false, _) => "",
            (true, Some("delete")) => {
                "; the key holds nothing already, so no update: only the upper moves"
            }
            (true, _) => "; the value is unchanged, so no update: only the upper moves",
        };
        Ok(Ok(format!(
            "the input frontier moved past {ts}; {}'s sink sent compare_and_append of {} at [{}, {}), expecting the shard's upper {}{same}",
            walk.actor,
            plural(w.updates.len() as u64, "update"),
            f(&w.lower),
            f(&w.upper),
            f(&w.lower)
        )))
    }
}

/// Where stage 5's upsert shows as in the shard: the Shard panel's rows (www/render/shard.js),
/// the walked key's row (a row the core prints, which the page says as `key 3 = hello`).
fn shard_row(walk: &Walk) -> String {
    let key = walk.message.map_or(0, |m| m.1);
    match (walk.value.as_deref(), walk.overtaken_by) {
        (_, Some(o)) => format!("see the Shard panel's rows: key {key}, with message #{o}'s value"),
        (Some("delete"), _) => format!("see the Shard panel's rows: no row of key {key}"),
        (Some(v), _) => format!("see the Shard panel's rows: key {key} = {v}"),
        (None, _) => format!("see the Shard panel's rows: key {key}"),
    }
}

/// Stage 1's message: the walked message, whose it is, and what goes along with it.
fn source_text(
    walk: &Walk,
    m: &SourceMessage,
    along: &[Along],
    overtaken_by: Option<u64>,
) -> String {
    let whose = if walk.pushes.is_empty() {
        "no upsert of yours is waiting, so the walk takes the newest message, the generator's:"
    } else {
        "your push,"
    };
    let mut text = format!(
        "{whose} key {} = {}, is in the source log at offset {}, time {}; {} has not read it",
        m.key,
        render_value(&m.value),
        m.offset,
        m.ts,
        walk.actor
    );
    if !along.is_empty() {
        let named: Vec<String> = along
            .iter()
            .take(ALONG_NAMED)
            .map(|a| {
                let whose = if a.by_hand {
                    "your earlier push"
                } else {
                    "the generator's"
                };
                format!("{} ({whose})", a.text)
            })
            .collect();
        let more = along.len().saturating_sub(ALONG_NAMED);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        let n = along.len();
        let (s, they) = if n == 1 {
            ("", "it goes")
        } else {
            ("s", "they go")
        };
        let queued = if walk.pushes.is_empty() {
            "earlier in the log"
        } else {
            "queued before yours"
        };
        text.push_str(&format!(
            ". {n} other message{s} it has not read, {queued}, {they} through these stages with it: {}{more}",
            named.join(", ")
        ));
    }
    if let Some(o) = overtaken_by {
        text.push_str(&format!(
            ". Message #{o} has key {} at the same time and a later offset: the upsert keeps the later offset, so the state ends with #{o}'s value",
            m.key
        ));
    }
    text
}
