//! Turns: this process's commands on one shard take their compare_and_sets one at a time, in the
//! order they asked (first come, first served).
//!
//! Why: every command computes its transition from the process's cached state and then sends one
//! compare_and_set on the cached seqno. Two commands of one process that overlap (a writer's
//! append and the background rollup, merge or GC its own appends assigned) compute from the same
//! seqno, so one of them must lose: a mismatch, a scan to learn what the winner wrote (which this
//! very process already knows) and a second attempt. Against a store with real latency the
//! background command tends to lose again and again to a writer that appends back to back (the
//! writer's next attempt is always sent before the loser's retry). Taking turns, the second
//! command waits for the first's outcome, which the cache then holds, and computes on it: no
//! race inside one process, one compare_and_set per commit. Races between processes are
//! untouched: they are what Consensus arbitrates.
//!
//! Invariants:
//! - at most one [`Turn`] per shard and process is held at a time;
//! - waiters are served strictly in the order they first asked: a command that asks while others
//!   wait queues behind them even if the turn happens to be free at that instant (no barging), so
//!   a writer in a tight loop cannot starve its own maintenance;
//! - a waiter dropped before its turn (a cancelled command) leaves the queue, and one dropped
//!   after being handed the turn but before taking it passes the turn on: cancellation never
//!   leaves the turn held;
//! - asking when the turn is free and nobody waits takes it at once, without yielding, so a
//!   process that never overlaps its commands schedules exactly as without turns.
//!
//! A holder must not await another command of the same shard (it would wait for itself); the
//! holder in `Machine::apply_erased` awaits only storage calls.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// One shard's queue of turns in this process (clones share it).
#[derive(Clone, Default)]
pub(crate) struct Turns {
    inner: Rc<RefCell<Queue>>,
}

#[derive(Default)]
struct Queue {
    held: bool,
    next_ticket: u64,
    /// Waiting tickets, oldest first, with the waker of their last poll.
    waiting: VecDeque<(u64, Option<Waker>)>,
    /// A ticket the turn was handed to that has not taken it yet.
    granted: Option<u64>,
}

impl Queue {
    /// Hands the turn to the oldest waiter, or frees it.
    fn pass_on(&mut self) {
        match self.waiting.pop_front() {
            Some((ticket, waker)) => {
                self.granted = Some(ticket);
                if let Some(w) = waker {
                    w.wake();
                }
            }
            None => self.held = false,
        }
    }
}

/// The held turn: dropping it passes the turn to the next waiter.
pub(crate) struct Turn {
    inner: Rc<RefCell<Queue>>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.inner.borrow_mut().pass_on();
    }
}

/// Waits for a turn (see [`Turns::take`]).
pub(crate) struct Waiting {
    inner: Rc<RefCell<Queue>>,
    ticket: Option<u64>,
    done: bool,
}

impl Turns {
    /// Waits for this process's turn on the shard; the turn is held until the returned value
    /// drops.
    pub(crate) fn take(&self) -> Waiting {
        Waiting {
            inner: Rc::clone(&self.inner),
            ticket: None,
            done: false,
        }
    }

    /// Whether some command holds the turn now (for tests and debug checks).
    #[cfg(test)]
    fn is_held(&self) -> bool {
        self.inner.borrow().held
    }
}

impl Future for Waiting {
    type Output = Turn;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Turn> {
        let this = &mut *self;
        let mut q = this.inner.borrow_mut();
        let ready = match this.ticket {
            None if !q.held && q.waiting.is_empty() && q.granted.is_none() => {
                q.held = true;
                true
            }
            None => {
                let ticket = q.next_ticket;
                q.next_ticket += 1;
                q.waiting.push_back((ticket, Some(cx.waker().clone())));
                this.ticket = Some(ticket);
                false
            }
            Some(t) if q.granted == Some(t) => {
                q.granted = None;
                true
            }
            Some(t) => {
                if let Some(slot) = q.waiting.iter_mut().find(|(w, _)| *w == t) {
                    slot.1 = Some(cx.waker().clone());
                }
                false
            }
        };
        drop(q);
        if ready {
            this.done = true;
            Poll::Ready(Turn {
                inner: Rc::clone(&this.inner),
            })
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let (Some(t), false) = (self.ticket, self.done) else {
            return;
        };
        let mut q = self.inner.borrow_mut();
        if q.granted == Some(t) {
            // Handed the turn but cancelled before taking it: pass it on.
            q.granted = None;
            q.pass_on();
        } else {
            q.waiting.retain(|(w, _)| *w != t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::task::noop_waker;

    fn poll(w: &mut Waiting) -> Option<Turn> {
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        match Pin::new(w).poll(&mut cx) {
            Poll::Ready(t) => Some(t),
            Poll::Pending => None,
        }
    }

    #[test]
    fn a_free_turn_is_taken_at_once_and_freed_on_drop() {
        let turns = Turns::default();
        let t = poll(&mut turns.take()).expect("free");
        assert!(turns.is_held());
        drop(t);
        assert!(!turns.is_held());
        assert!(poll(&mut turns.take()).is_some());
    }

    #[test]
    fn waiters_are_served_in_order_and_nobody_barges() {
        let turns = Turns::default();
        let first = poll(&mut turns.take()).expect("free");
        let (mut b, mut c) = (turns.take(), turns.take());
        assert!(poll(&mut b).is_none());
        assert!(poll(&mut c).is_none());
        drop(first);
        // The turn went to b: neither c nor a newcomer gets it, though nobody holds a Turn.
        let mut newcomer = turns.take();
        assert!(poll(&mut newcomer).is_none());
        assert!(poll(&mut c).is_none());
        let tb = poll(&mut b).expect("b was first in line");
        drop(tb);
        assert!(poll(&mut newcomer).is_none(), "c asked before the newcomer");
        let tc = poll(&mut c).expect("c next");
        drop(tc);
        assert!(poll(&mut newcomer).is_some());
    }

    #[test]
    fn a_cancelled_waiter_never_keeps_the_turn() {
        let turns = Turns::default();
        let first = poll(&mut turns.take()).expect("free");
        let (mut b, mut c, mut d) = (turns.take(), turns.take(), turns.take());
        assert!(poll(&mut b).is_none());
        assert!(poll(&mut c).is_none());
        assert!(poll(&mut d).is_none());
        // c leaves the queue before its turn; b is handed the turn and cancelled before taking it.
        drop(c);
        drop(first);
        drop(b);
        let td = poll(&mut d).expect("the turn passed over both cancelled waiters");
        drop(td);
        assert!(!turns.is_held());
    }
}
