//! The native runtime (not on wasm32): a tokio current-thread runtime with a `LocalSet`, because
//! our futures are `!Send` (they share state through `Rc`).
//!
//! - The clock is the system's wall clock in milliseconds since the Unix epoch, clamped so that
//!   [`RuntimeImpl::now_ms`] never decreases (a clock stepped back reads as standing still), the
//!   way [`super::browser`] treats `Date.now()`. Wall-clock milliseconds are what the playground's
//!   timestamps are (`T = u64` ms), and what lets several OS processes agree roughly on "now"
//!   (correctness never rests on that agreement: it rests on Consensus).
//! - Timers are tokio timers; `sleep_until` loops until the clamped clock reads the deadline, so
//!   it never completes early even if tokio's monotonic clock and the wall clock drift apart.
//! - Tasks are `tokio::task::spawn_local` on the `LocalSet` the runtime was entered with:
//!   [`TokioRuntime::block_on`] runs a future inside one. Spawning outside it panics in tokio,
//!   so `spawn_boxed` is only reachable from inside `block_on` (every component gets its
//!   [`Runtime`] there).
//! - [`RuntimeImpl::now_us`] reads the monotonic clock (`Instant`), in microseconds since the
//!   runtime was made: for timing work, never for timestamps.
//!
//! This is the only place natively where a clock is read.

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::future::LocalBoxFuture;

use super::{Runtime, RuntimeImpl};

/// The tokio-backed runtime. See the module docs.
pub struct TokioRuntime {
    clock: Rc<Clock>,
}

/// The clamped wall clock, shared by the runtime and its pending sleeps.
struct Clock {
    last_ms: Cell<u64>,
    /// The origin of `now_us`.
    origin: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Clock {
            last_ms: Cell::new(0),
            origin: Instant::now(),
        }
    }
}

impl Clock {
    fn now_ms(&self) -> u64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        let now = wall.max(self.last_ms.get());
        self.last_ms.set(now);
        now
    }
}

impl TokioRuntime {
    /// A [`Runtime`] on the wall clock and tokio's timers. Use it inside [`TokioRuntime::block_on`].
    pub fn runtime() -> Runtime {
        Runtime::new(Rc::new(TokioRuntime {
            clock: Rc::new(Clock::default()),
        }))
    }

    /// Builds a current-thread tokio runtime (timers and I/O on), runs `f(runtime)` to completion
    /// inside a `LocalSet` and returns its output. Tasks still running when it returns are dropped.
    ///
    /// An error building the tokio runtime (the OS refused an epoll or timer descriptor) is
    /// returned, not panicked.
    pub fn block_on<F, Fut>(f: F) -> std::io::Result<Fut::Output>
    where
        F: FnOnce(Runtime) -> Fut,
        Fut: Future,
    {
        let tokio_rt = ::tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let local = ::tokio::task::LocalSet::new();
        let runtime = Self::runtime();
        Ok(local.block_on(&tokio_rt, f(runtime)))
    }
}

impl RuntimeImpl for TokioRuntime {
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn now_us(&self) -> u64 {
        // Instant never goes back; saturate after half a million years.
        u64::try_from(self.clock.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn sleep_until(&self, deadline_ms: u64) -> LocalBoxFuture<'static, ()> {
        let clock = self.clock.clone();
        Box::pin(async move {
            loop {
                let now = clock.now_ms();
                if now >= deadline_ms {
                    return;
                }
                // At most a day per wait: a far deadline (u64::MAX) must not overflow tokio's
                // Instant arithmetic; the loop re-checks the clock anyway.
                let wait = (deadline_ms - now).min(86_400_000);
                ::tokio::time::sleep(Duration::from_millis(wait)).await;
            }
        })
    }

    fn spawn_boxed(&self, _name: &str, fut: LocalBoxFuture<'static, ()>) {
        // Detached: the Runtime's JoinHandle aborts it through its Abortable wrapper.
        drop(::tokio::task::spawn_local(fut));
    }
}
