//! A deterministic, single-threaded executor with virtual time.
//!
//! One step of the simulator does exactly one of:
//! 1. if some task is ready, pick one with the seeded PRNG and poll it once;
//! 2. otherwise, if a timer is pending, jump the clock to the earliest deadline and wake its task;
//! 3. otherwise, if tasks remain, report a [`SimError::Deadlock`] naming them (never hang).
//!
//! Invariants:
//! - Virtual time only moves in step 2, so it never goes back and it never moves while any task
//!   could make progress.
//! - The only source of choice is the PRNG seeded by [`Simulator::new`]; tasks live in an ordered
//!   map ([`VecMap`]) keyed by spawn order and timers in one keyed by `(deadline, registration
//!   order)`, and the ready set is ordered too, so a run is a function of its seed and its inputs: two runs of one seed record the same [`Trace`].
//!
//! A task's waker carries only the task id and a handle to the shared ready set, which is all a
//! [`Waker`] needs to be `Send + Sync` while the tasks themselves hold `Rc`s.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use futures::future::LocalBoxFuture;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::{Runtime, RuntimeImpl};
use crate::vec_map::VecMap;

/// Why a run stopped before its goal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// Every remaining task waits, and no timer is pending: nothing can ever wake them.
    #[error("deadlock at {now_ms} ms: every task waits and no timer is pending; blocked tasks: {blocked:?}")]
    Deadlock {
        /// The virtual time of the deadlock.
        now_ms: u64,
        /// The names of the blocked tasks, in spawn order.
        blocked: Vec<String>,
    },
    /// The run took more steps than allowed (a livelock, or a limit set too low).
    #[error("step limit of {limit} reached at {now_ms} ms")]
    StepLimit {
        /// The limit that was reached.
        limit: u64,
        /// The virtual time at that point.
        now_ms: u64,
    },
}

/// One entry of a run's trace.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum TraceEntry {
    /// A task was spawned.
    Spawn {
        /// Task id, in spawn order.
        task: u64,
        /// Its name.
        name: String,
    },
    /// A task was polled once.
    Poll {
        /// Task id.
        task: u64,
        /// Virtual time of the poll.
        at_ms: u64,
    },
    /// A task finished (or was aborted) and was removed.
    Complete {
        /// Task id.
        task: u64,
    },
    /// The clock jumped to a timer's deadline and woke its task.
    Timer {
        /// The deadline (the new virtual time).
        at_ms: u64,
    },
}

/// The record of a run: what was polled, when, and in which order.
pub type Trace = Vec<TraceEntry>;

/// What one [`Simulator::step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepOutcome {
    /// A ready task was polled.
    Polled {
        /// Its id.
        task: u64,
    },
    /// No task was ready; the clock moved to the earliest timer.
    TimerFired {
        /// The new virtual time.
        at_ms: u64,
    },
    /// No tasks remain.
    Idle,
}

/// The default bound on steps for [`Simulator::block_on`] and friends.
pub const DEFAULT_STEP_LIMIT: u64 = 50_000_000;

struct Task {
    name: Rc<str>,
    fut: Option<LocalBoxFuture<'static, ()>>,
}

struct SimWaker {
    task: u64,
    ready: Arc<Mutex<VecMap<u64, ()>>>,
}

impl Wake for SimWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        // A poisoned lock can only come from a panic while holding it, which inserts cannot cause.
        if let Ok(mut ready) = self.ready.lock() {
            ready.insert(self.task, ());
        }
    }
}

struct SimInner {
    seed: u64,
    now_ms: Cell<u64>,
    rng: RefCell<Xoshiro256PlusPlus>,
    tasks: RefCell<VecMap<u64, Task>>,
    next_task: Cell<u64>,
    ready: Arc<Mutex<VecMap<u64, ()>>>,
    // Invariant: every entry belongs to a live `SimSleep`, which removes it on drop.
    timers: RefCell<VecMap<(u64, u64), Waker>>,
    next_timer: Cell<u64>,
    trace: RefCell<Trace>,
    record_trace: Cell<bool>,
    steps: Cell<u64>,
}

impl SimInner {
    fn record(&self, entry: TraceEntry) {
        if self.record_trace.get() {
            self.trace.borrow_mut().push(entry);
        }
    }
}

impl SimInner {
    fn spawn_task(&self, name: &str, fut: LocalBoxFuture<'static, ()>) {
        let task = self.next_task.get();
        self.next_task.set(task + 1);
        self.tasks.borrow_mut().insert(
            task,
            Task {
                name: Rc::from(name),
                fut: Some(fut),
            },
        );
        self.record(TraceEntry::Spawn {
            task,
            name: name.to_string(),
        });
        if let Ok(mut ready) = self.ready.lock() {
            ready.insert(task, ());
        }
    }
}

/// The [`RuntimeImpl`] the simulator hands to components: a weak handle, so that tasks holding a
/// [`Runtime`] do not keep the simulator alive.
struct SimRuntime {
    inner: Weak<SimInner>,
}

impl RuntimeImpl for SimRuntime {
    fn now_ms(&self) -> u64 {
        self.inner
            .upgrade()
            .map_or(u64::MAX, |inner| inner.now_ms.get())
    }

    fn sleep_until(&self, deadline_ms: u64) -> LocalBoxFuture<'static, ()> {
        Box::pin(SimSleep {
            inner: self.inner.clone(),
            deadline_ms,
            key: None,
        })
    }

    fn spawn_boxed(&self, name: &str, fut: LocalBoxFuture<'static, ()>) {
        // A task spawned after the simulator is gone would never run; dropping it is the only
        // honest outcome (its JoinHandle then never completes, as with an aborted task).
        if let Some(inner) = self.inner.upgrade() {
            inner.spawn_task(name, fut);
        }
    }
}

struct SimSleep {
    inner: Weak<SimInner>,
    deadline_ms: u64,
    key: Option<(u64, u64)>,
}

impl Future for SimSleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(inner) = self.inner.upgrade() else {
            // The simulator is gone: time will never advance again.
            return Poll::Pending;
        };
        if inner.now_ms.get() >= self.deadline_ms {
            if let Some(key) = self.key.take() {
                inner.timers.borrow_mut().remove(&key);
            }
            return Poll::Ready(());
        }
        let key = match self.key {
            Some(key) => key,
            None => {
                let seq = inner.next_timer.get();
                inner.next_timer.set(seq + 1);
                let key = (self.deadline_ms, seq);
                self.key = Some(key);
                key
            }
        };
        inner.timers.borrow_mut().insert(key, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for SimSleep {
    fn drop(&mut self) {
        if let (Some(key), Some(inner)) = (self.key, self.inner.upgrade()) {
            // A cancelled timer must not count as pending, or a deadlock would look like progress.
            if let Ok(mut timers) = inner.timers.try_borrow_mut() {
                timers.remove(&key);
            }
        }
    }
}

/// The deterministic simulator. See the module docs.
pub struct Simulator {
    inner: Rc<SimInner>,
}

impl Simulator {
    /// A simulator at virtual time 0 whose choices are drawn from `seed`.
    pub fn new(seed: u64) -> Self {
        Simulator {
            inner: Rc::new(SimInner {
                seed,
                now_ms: Cell::new(0),
                rng: RefCell::new(Xoshiro256PlusPlus::seed_from_u64(seed)),
                tasks: RefCell::new(VecMap::new()),
                next_task: Cell::new(0),
                ready: Arc::new(Mutex::new(VecMap::new())),
                timers: RefCell::new(VecMap::new()),
                next_timer: Cell::new(0),
                trace: RefCell::new(Vec::new()),
                record_trace: Cell::new(true),
                steps: Cell::new(0),
            }),
        }
    }

    /// The seed this simulator was created with.
    pub fn seed(&self) -> u64 {
        self.inner.seed
    }

    /// The [`Runtime`] to hand to components that should run on this simulator.
    pub fn runtime(&self) -> Runtime {
        Runtime::new(Rc::new(SimRuntime {
            inner: Rc::downgrade(&self.inner),
        }))
    }

    /// The current virtual time.
    pub fn now_ms(&self) -> u64 {
        self.inner.now_ms.get()
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.inner.steps.get()
    }

    /// Turns trace recording on or off (on by default).
    pub fn set_record_trace(&self, on: bool) {
        self.inner.record_trace.set(on);
    }

    /// The trace recorded so far.
    pub fn trace(&self) -> Trace {
        self.inner.trace.borrow().clone()
    }

    /// The names of the tasks that have not finished, in spawn order.
    pub fn live_tasks(&self) -> Vec<String> {
        self.inner
            .tasks
            .borrow()
            .values()
            .map(|t| t.name.to_string())
            .collect()
    }

    /// The deadline of the earliest pending timer, if any.
    pub fn next_timer_ms(&self) -> Option<u64> {
        self.inner.timers.borrow().keys().next().map(|(d, _)| *d)
    }

    fn ready_is_empty(&self) -> bool {
        self.inner.ready.lock().map_or(true, |r| r.is_empty())
    }

    fn deadlock(&self) -> SimError {
        SimError::Deadlock {
            now_ms: self.now_ms(),
            blocked: self.live_tasks(),
        }
    }

    /// Takes one step (see the module docs).
    pub fn step(&self) -> Result<StepOutcome, SimError> {
        let inner = &self.inner;
        inner.steps.set(inner.steps.get() + 1);
        loop {
            let picked = {
                let mut ready = inner.ready.lock().expect("ready set lock poisoned");
                if ready.is_empty() {
                    None
                } else {
                    // `ready.len()` is tiny; the modulo bias is irrelevant to a test schedule.
                    let len = ready.len() as u64;
                    let nth = (inner.rng.borrow_mut().next_u64() % len) as usize;
                    let task = *ready.keys().nth(nth).expect("nth < len");
                    ready.remove(&task);
                    Some(task)
                }
            };
            let Some(task) = picked else { break };
            // A wake-up for a task that has finished since is stale: pick again.
            let fut = inner
                .tasks
                .borrow_mut()
                .get_mut(&task)
                .and_then(|t| t.fut.take());
            let Some(mut fut) = fut else { continue };
            inner.record(TraceEntry::Poll {
                task,
                at_ms: inner.now_ms.get(),
            });
            let waker = Waker::from(Arc::new(SimWaker {
                task,
                ready: Arc::clone(&inner.ready),
            }));
            let mut cx = Context::from_waker(&waker);
            // SUBTLE: no RefCell borrow is held across this poll, so the task may spawn, sleep or
            // drop other tasks' handles freely.
            match fut.as_mut().poll(&mut cx) {
                Poll::Ready(()) => {
                    let removed = inner.tasks.borrow_mut().remove(&task);
                    drop(fut);
                    drop(removed);
                    inner.record(TraceEntry::Complete { task });
                }
                Poll::Pending => {
                    if let Some(t) = inner.tasks.borrow_mut().get_mut(&task) {
                        t.fut = Some(fut);
                    }
                }
            }
            return Ok(StepOutcome::Polled { task });
        }
        let first = inner.timers.borrow_mut().pop_first();
        if let Some(((deadline_ms, _), waker)) = first {
            let now = inner.now_ms.get();
            inner.now_ms.set(now.max(deadline_ms));
            inner.record(TraceEntry::Timer { at_ms: deadline_ms });
            waker.wake();
            return Ok(StepOutcome::TimerFired { at_ms: deadline_ms });
        }
        if inner.tasks.borrow().is_empty() {
            Ok(StepOutcome::Idle)
        } else {
            Err(self.deadlock())
        }
    }

    /// Runs until virtual time reaches `deadline_ms` with nothing left to do before it: every
    /// ready task has been polled and the next timer (if any) lies beyond the deadline. The clock
    /// then reads `deadline_ms`. A run in which every task waits forever reports a deadlock.
    pub fn run_until(&self, deadline_ms: u64) -> Result<(), SimError> {
        self.run_until_then(deadline_ms, || {})
    }

    /// [`Simulator::run_until`], calling `after_step` after every step (a driver that folds
    /// what each step recorded, so its records do not depend on where a run paused).
    pub fn run_until_then(
        &self,
        deadline_ms: u64,
        mut after_step: impl FnMut(),
    ) -> Result<(), SimError> {
        let limit = self.steps() + DEFAULT_STEP_LIMIT;
        loop {
            if self.steps() >= limit {
                return Err(SimError::StepLimit {
                    limit: DEFAULT_STEP_LIMIT,
                    now_ms: self.now_ms(),
                });
            }
            if self.ready_is_empty() {
                match self.next_timer_ms() {
                    Some(next) if next <= deadline_ms => {}
                    Some(_) => break,
                    None if self.inner.tasks.borrow().is_empty() => break,
                    None => return Err(self.deadlock()),
                }
            }
            self.step()?;
            after_step();
        }
        let now = self.inner.now_ms.get();
        self.inner.now_ms.set(now.max(deadline_ms));
        Ok(())
    }

    /// Runs for `ms` milliseconds of virtual time; see [`Simulator::run_until`].
    pub fn run_for(&self, ms: u64) -> Result<(), SimError> {
        self.run_until(self.now_ms().saturating_add(ms))
    }

    /// Steps until `done()` holds (checked before every step), for at most `max_steps` steps.
    pub fn run_until_pred(
        &self,
        mut done: impl FnMut() -> bool,
        max_steps: u64,
    ) -> Result<(), SimError> {
        let limit = self.steps().saturating_add(max_steps);
        while !done() {
            if self.steps() >= limit {
                return Err(SimError::StepLimit {
                    limit: max_steps,
                    now_ms: self.now_ms(),
                });
            }
            if self.step()? == StepOutcome::Idle {
                // Nothing is left that could make `done` true.
                return Err(self.deadlock());
            }
        }
        Ok(())
    }

    /// Spawns `fut` and runs the simulation until it completes, returning its output. Other tasks
    /// keep whatever state they reached.
    pub fn block_on<F>(&self, fut: F) -> Result<F::Output, SimError>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        let slot: Rc<RefCell<Option<F::Output>>> = Rc::new(RefCell::new(None));
        let out = Rc::clone(&slot);
        let handle = self.runtime().spawn("block_on", async move {
            let value = fut.await;
            *out.borrow_mut() = Some(value);
        });
        let result = self.run_until_pred(|| slot.borrow().is_some(), DEFAULT_STEP_LIMIT);
        drop(handle);
        result?;
        let value = slot.borrow_mut().take();
        Ok(value.expect("run_until_pred returned Ok only once the slot was filled"))
    }

    /// Draws a value from the simulator's PRNG (for drivers that want one seeded stream).
    pub fn next_u64(&self) -> u64 {
        self.inner.rng.borrow_mut().next_u64()
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        // Tasks hold only weak handles to the simulator, but their futures may hold each other's
        // JoinHandles; drop them outside any borrow.
        let tasks = std::mem::take(&mut *self.inner.tasks.borrow_mut());
        drop(tasks);
        let timers = std::mem::take(&mut *self.inner.timers.borrow_mut());
        drop(timers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_advances_virtual_time_only() {
        let sim = Simulator::new(1);
        let rt = sim.runtime();
        let out = sim
            .block_on(async move {
                let t0 = rt.now_ms();
                rt.sleep(250).await;
                (t0, rt.now_ms())
            })
            .unwrap();
        assert_eq!(out, (0, 250));
    }

    #[test]
    fn deadlock_is_reported_not_hung() {
        let sim = Simulator::new(7);
        let rt = sim.runtime();
        let (_tx, rx) = futures::channel::oneshot::channel::<()>();
        let err = sim
            .block_on(async move {
                rt.sleep(5).await;
                let _ = rx.await;
            })
            .unwrap_err();
        match err {
            SimError::Deadlock { now_ms, blocked } => {
                assert_eq!(now_ms, 5);
                assert_eq!(blocked, vec!["block_on".to_string()]);
            }
            other => panic!("expected a deadlock, got {other:?}"),
        }
    }
}
