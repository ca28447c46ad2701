//! The single-threaded runtime every component is written against: a clock, timers, task spawning
//! and timeouts, handed to components as a value ([`Runtime`]) rather than chosen by `cfg`.
//!
//! Two implementations stand behind it:
//! - [`sim::Simulator`]: a deterministic executor with virtual time. Time moves only when every task
//!   waits on a timer; which ready task runs next is a seeded choice. A run is a function of its seed
//!   and its inputs, natively and in wasm32 alike, which is what randomized tests over thousands of
//!   seeds and the playground's replay stand on.
//! - `browser::BrowserRuntime` (wasm32 only): the JS clock (`Date.now`), `setTimeout` timers through
//!   gloo-timers and tasks through `wasm_bindgen_futures::spawn_local`.
//! - `tokio::TokioRuntime` (native only): the wall clock, tokio timers and `spawn_local` on a
//!   current-thread runtime with a `LocalSet`, for the command-line tool and the tests against
//!   PostgreSQL and S3.
//!
//! Semantics shared by all:
//! - [`Runtime::now_ms`] never goes back.
//! - [`Runtime::now_us`] is a monotonic microsecond reading for timing work (benchmarks): it
//!   never goes back, counts from an origin of its own (not comparable with `now_ms`), and is as
//!   fine as the implementation's clock allows (microseconds natively; the simulator's and the
//!   browser's millisecond clock times 1,000).
//! - [`Runtime::sleep`] completes at or after `now + ms`.
//! - [`Runtime::interval`] ticks every period; ticks missed while the owner was busy collapse
//!   into one, never a burst.
//! - [`Runtime::spawn`] returns a [`JoinHandle`]: dropping it aborts the task (the task's future is
//!   dropped at its next wake-up at the latest); [`JoinHandle::detach`] lets it run on. A panic in a
//!   task is not caught: it unwinds out of the executor (under the simulator, out of `step` and
//!   into the test; in the browser it traps the module), so no failure is silently dropped.
//! - [`Runtime::timeout`] bounds any future; the inner future is dropped (cancelled) on expiry.
//!
//! Everything is `!Send`: futures are `LocalBoxFuture`s and components share state through `Rc`.
//! Model code never reads a clock except through this module.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use futures::channel::oneshot;
use futures::future::{AbortHandle, Abortable, FutureExt, LocalBoxFuture};

pub mod sim;

#[cfg(target_arch = "wasm32")]
pub mod browser;

#[cfg(not(target_arch = "wasm32"))]
pub mod tokio;

/// What an implementation of the runtime provides. Components use [`Runtime`], which wraps this.
pub trait RuntimeImpl {
    /// Milliseconds on this runtime's clock. Never decreases.
    fn now_ms(&self) -> u64;
    /// Microseconds on a monotonic clock, from an origin of the implementation's own. Never
    /// decreases. By default the millisecond clock times 1,000 (the simulator's virtual time, the
    /// browser's `Date.now()`); the native runtime reads a monotonic clock.
    fn now_us(&self) -> u64 {
        self.now_ms().saturating_mul(1_000)
    }
    /// A future that completes once `now_ms() >= deadline_ms`.
    fn sleep_until(&self, deadline_ms: u64) -> LocalBoxFuture<'static, ()>;
    /// Runs `fut` to completion in the background. `name` labels the task in traces.
    fn spawn_boxed(&self, name: &str, fut: LocalBoxFuture<'static, ()>);
}

/// A cheaply clonable handle to the runtime a component runs on.
#[derive(Clone)]
pub struct Runtime {
    inner: Rc<dyn RuntimeImpl>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("now_ms", &self.now_ms())
            .finish()
    }
}

/// The error of [`Runtime::timeout`]: the deadline passed before the future completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("timed out after {after_ms} ms")]
pub struct Elapsed {
    /// The duration the caller allowed.
    pub after_ms: u64,
}

impl Runtime {
    /// Wraps an implementation.
    pub fn new(inner: Rc<dyn RuntimeImpl>) -> Self {
        Runtime { inner }
    }

    /// Milliseconds on this runtime's clock (virtual under the simulator). Never decreases.
    pub fn now_ms(&self) -> u64 {
        self.inner.now_ms()
    }

    /// Microseconds on a monotonic clock, for timing work (see the module docs): never decreases;
    /// only differences between two readings mean anything.
    pub fn now_us(&self) -> u64 {
        self.inner.now_us()
    }

    /// Completes after at least `ms` milliseconds. `sleep(0)` completes at once.
    pub fn sleep(&self, ms: u64) -> LocalBoxFuture<'static, ()> {
        let deadline_ms = self.now_ms().saturating_add(ms);
        self.inner.sleep_until(deadline_ms)
    }

    /// Completes once the clock reads at least `deadline_ms`.
    pub fn sleep_until(&self, deadline_ms: u64) -> LocalBoxFuture<'static, ()> {
        self.inner.sleep_until(deadline_ms)
    }

    /// An interval whose first tick is one `period_ms` from now. Missed ticks are skipped.
    ///
    /// A `period_ms` of zero is raised to one millisecond, so an interval can never spin.
    pub fn interval(&self, period_ms: u64) -> Interval {
        let period_ms = period_ms.max(1);
        Interval {
            runtime: self.clone(),
            period_ms,
            next_ms: self.now_ms().saturating_add(period_ms),
        }
    }

    /// Spawns `fut` as a background task labelled `name`. Dropping the returned handle aborts the
    /// task; awaiting it yields the task's output.
    pub fn spawn<F>(&self, name: &str, fut: F) -> JoinHandle<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        let (abort, registration) = AbortHandle::new_pair();
        let (tx, rx) = oneshot::channel();
        // Aborting wakes the task, whose future is then dropped without being polled again.
        let task = Abortable::new(fut, registration).map(move |out| {
            if let Ok(value) = out {
                // The handle may be gone (detached): then the output is dropped.
                let _ = tx.send(value);
            }
        });
        self.inner.spawn_boxed(name, task.boxed_local());
        JoinHandle {
            abort: Some(abort),
            output: rx,
        }
    }

    /// Runs `fut` for at most `ms` milliseconds. On expiry `fut` is dropped, which cancels it.
    pub async fn timeout<F: Future>(&self, ms: u64, fut: F) -> Result<F::Output, Elapsed> {
        let sleep = self.sleep(ms);
        futures::pin_mut!(fut);
        match futures::future::select(fut, sleep).await {
            futures::future::Either::Left((out, _)) => Ok(out),
            futures::future::Either::Right(((), _)) => Err(Elapsed { after_ms: ms }),
        }
    }

    /// Yields once to the executor, letting other ready tasks run first.
    pub fn yield_now(&self) -> YieldNow {
        YieldNow { yielded: false }
    }
}

/// A handle to a spawned task. Dropping it aborts the task; awaiting it gives the task's output.
/// (If the task's executor drops it first, as a dropped simulator does, the await never ends.)
#[must_use = "dropping a JoinHandle aborts its task; call detach() to let it run"]
pub struct JoinHandle<T> {
    abort: Option<AbortHandle>,
    output: oneshot::Receiver<T>,
}

impl<T: 'static> JoinHandle<T> {
    /// Lets the task run to completion on its own; its output is dropped.
    pub fn detach(mut self) {
        self.abort = None;
    }

    /// Aborts the task now (the same as dropping the handle).
    pub fn abort(self) {
        drop(self)
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        if let Some(abort) = self.abort.take() {
            abort.abort();
        }
    }
}

impl<T: 'static> Future for JoinHandle<T> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match self.output.poll_unpin(cx) {
            Poll::Ready(Ok(value)) => Poll::Ready(value),
            // The task was dropped without finishing: it will never produce an output.
            Poll::Ready(Err(oneshot::Canceled)) | Poll::Pending => Poll::Pending,
        }
    }
}

/// A periodic timer; see [`Runtime::interval`].
pub struct Interval {
    runtime: Runtime,
    period_ms: u64,
    next_ms: u64,
}

impl Interval {
    /// Waits for the next tick and returns its scheduled time. Ticks missed while the owner was
    /// busy are not delivered in a burst: the next call returns at once, with the latest missed
    /// scheduled time standing for all of them, and later ticks keep the original schedule.
    pub async fn tick(&mut self) -> u64 {
        self.runtime.sleep_until(self.next_ms).await;
        let now_ms = self.runtime.now_ms();
        debug_assert!(now_ms >= self.next_ms, "sleep_until woke early");
        let behind = now_ms.saturating_sub(self.next_ms) / self.period_ms;
        let tick_ms = self
            .next_ms
            .saturating_add(behind.saturating_mul(self.period_ms));
        self.next_ms = tick_ms.saturating_add(self.period_ms);
        tick_ms
    }

    /// The period of this interval.
    pub fn period_ms(&self) -> u64 {
        self.period_ms
    }
}

/// See [`Runtime::yield_now`].
pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            Poll::Ready(())
        } else {
            self.yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}
