//! The one back-off every component retries transient storage errors with.
//!
//! [`Backoff`] is an exponential back-off on the injected runtime's clock: the first wait is
//! `min_ms`, each later one is the previous times `factor_percent / 100` (200: doubling), never
//! shorter than the previous and never longer than `max_ms`. It counts its waits, so a caller can
//! bound attempts or show "retrying (n)".
//!
//! What is retried is the caller's decision, made with [`ExternalError::is_transient`]: a
//! determinate or indeterminate error may heal and is retried; a permanent one
//! ([`ExternalError::Permanent`]) will not and goes to the caller at once. [`retry_transient`]
//! is that loop for a single storage call.
//!
//! ```
//! use persist_playground::retry::Backoff;
//! let mut b = Backoff::new(4, 20);
//! assert_eq!((b.next_ms(), b.next_ms(), b.next_ms(), b.next_ms()), (4, 8, 16, 20));
//! let mut slow = Backoff::new(1_000, 3_000).with_factor_percent(125);
//! assert_eq!((slow.next_ms(), slow.next_ms(), slow.attempts()), (1_000, 1_250, 2));
//! ```

use std::future::Future;

use crate::location::{ExternalError, PermanentError};
use crate::runtime::Runtime;

/// Exponential back-off, capped. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    min_ms: u64,
    max_ms: u64,
    factor_percent: u64,
    next_ms: u64,
    attempts: u32,
}

impl Backoff {
    /// Doubling from `min_ms` (at least 1 ms, so that a retry loop always lets time pass) up to
    /// `max_ms` (at least `min_ms`).
    pub fn new(min_ms: u64, max_ms: u64) -> Self {
        let min_ms = min_ms.max(1);
        Backoff {
            min_ms,
            max_ms: max_ms.max(min_ms),
            factor_percent: 200,
            next_ms: min_ms,
            attempts: 0,
        }
    }

    /// Grows by `factor_percent / 100` per wait instead of doubling (at least 100: it never
    /// shrinks).
    pub fn with_factor_percent(mut self, factor_percent: u64) -> Self {
        self.factor_percent = factor_percent.max(100);
        self
    }

    /// The next wait, advancing the back-off.
    pub fn next_ms(&mut self) -> u64 {
        let ms = self.next_ms;
        self.next_ms = (ms.saturating_mul(self.factor_percent) / 100)
            .max(ms)
            .min(self.max_ms);
        self.attempts = self.attempts.saturating_add(1);
        ms
    }

    /// The wait [`Backoff::next_ms`] would return, without advancing.
    pub fn peek_ms(&self) -> u64 {
        self.next_ms
    }

    /// How many waits were handed out since creation or the last [`Backoff::reset`].
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Starts over from `min_ms` (after a success).
    pub fn reset(&mut self) {
        self.next_ms = self.min_ms;
        self.attempts = 0;
    }

    /// Sleeps for the next wait on `runtime`'s clock and returns how long it slept.
    pub async fn wait(&mut self, runtime: &Runtime) -> u64 {
        let ms = self.next_ms();
        runtime.sleep(ms).await;
        ms
    }
}

/// Runs `op` until it succeeds or fails permanently, waiting `backoff` after each transient
/// error (after calling `on_retry` with the error and the wait, for events and counters). Its
/// future cancels on drop; callers bound it with the runtime's `timeout`.
pub async fn retry_transient<T, Fut>(
    runtime: &Runtime,
    backoff: &mut Backoff,
    mut op: impl FnMut() -> Fut,
    mut on_retry: impl FnMut(&ExternalError, u64),
) -> Result<T, PermanentError>
where
    Fut: Future<Output = Result<T, ExternalError>>,
{
    loop {
        match op().await {
            Ok(t) => return Ok(t),
            Err(ExternalError::Permanent(e)) => return Err(*e),
            Err(err) => {
                let ms = backoff.peek_ms();
                on_retry(&err, ms);
                backoff.wait(runtime).await;
            }
        }
    }
}

/// One failed attempt of [`retry_within`]: whether it may heal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt<E> {
    /// It may heal (a refused connection, a server restarting): worth another attempt.
    Transient(E),
    /// It will not heal (a bad URL, wrong credentials): no further attempt.
    Permanent(E),
}

impl<E> Attempt<E> {
    /// The error, whichever it is.
    pub fn into_inner(self) -> E {
        match self {
            Attempt::Transient(e) | Attempt::Permanent(e) => e,
        }
    }
}

/// What [`retry_within`] tells its caller before each wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryWait {
    /// Failed attempts so far (1 before the first wait).
    pub attempt: u32,
    /// The wait about to start.
    pub wait_ms: u64,
    /// Time passed on the runtime's clock since the first attempt began.
    pub elapsed_ms: u64,
    /// The budget the loop stops at.
    pub budget_ms: u64,
}

/// Runs `op` until it succeeds, fails permanently, or fails transiently when the next wait
/// would end more than `budget_ms` (of the runtime's clock) after the first attempt began; each
/// failure ends in the error of the last attempt. Before each wait it calls `on_wait` with the
/// transient error and the wait (for a progress line). An attempt that itself takes long (a
/// connection timeout) can carry the total past `budget_ms` by that attempt's length; a budget of
/// 0 makes one attempt.
pub async fn retry_within<T, E, Fut>(
    runtime: &Runtime,
    backoff: &mut Backoff,
    budget_ms: u64,
    mut op: impl FnMut() -> Fut,
    mut on_wait: impl FnMut(&E, RetryWait),
) -> Result<T, E>
where
    Fut: Future<Output = Result<T, Attempt<E>>>,
{
    let start = runtime.now_ms();
    loop {
        let err = match op().await {
            Ok(t) => return Ok(t),
            Err(Attempt::Permanent(e)) => return Err(e),
            Err(Attempt::Transient(e)) => e,
        };
        let elapsed_ms = runtime.now_ms().saturating_sub(start);
        let wait_ms = backoff.peek_ms();
        if elapsed_ms.saturating_add(wait_ms) > budget_ms {
            return Err(err);
        }
        let wait = RetryWait {
            attempt: backoff.attempts().saturating_add(1),
            wait_ms,
            elapsed_ms,
            budget_ms,
        };
        on_wait(&err, wait);
        backoff.wait(runtime).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::location::{BrokenAt, PermanentKind};
    use crate::runtime::sim::Simulator;
    use std::cell::Cell;
    use std::rc::Rc;

    #[test]
    fn grows_caps_and_resets() {
        let mut b = Backoff::new(0, 5);
        let waits: Vec<u64> = (0..5).map(|_| b.next_ms()).collect();
        assert_eq!(
            waits,
            vec![1, 2, 4, 5, 5],
            "a zero minimum still lets time pass"
        );
        assert_eq!(b.attempts(), 5);
        b.reset();
        assert_eq!((b.peek_ms(), b.attempts()), (1, 0));
        let mut flat = Backoff::new(10, 3).with_factor_percent(50);
        assert_eq!(
            (flat.next_ms(), flat.next_ms()),
            (10, 10),
            "max below min, factor below 1"
        );
        let mut huge = Backoff::new(u64::MAX / 2, u64::MAX);
        assert_eq!(huge.next_ms(), u64::MAX / 2);
        assert_eq!(huge.next_ms(), u64::MAX / 2, "saturates and never shrinks");
    }

    #[test]
    fn retries_transient_errors_and_stops_at_a_permanent_one() {
        let sim = Simulator::new(3);
        let runtime = sim.runtime();
        let calls = Rc::new(Cell::new(0u32));
        let retries = Rc::new(Cell::new(0u32));
        let (c, r) = (Rc::clone(&calls), Rc::clone(&retries));
        let out = sim
            .block_on(async move {
                let mut backoff = Backoff::new(4, 100);
                let first = retry_transient(
                    &runtime,
                    &mut backoff,
                    || {
                        c.set(c.get() + 1);
                        let n = c.get();
                        async move {
                            match n {
                                1 => Err(ExternalError::determinate("unavailable")),
                                2 => Err(ExternalError::indeterminate("timeout")),
                                _ => Ok(n),
                            }
                        }
                    },
                    |_, _| r.set(r.get() + 1),
                )
                .await;
                let start = runtime.now_ms();
                let second: Result<(), _> = retry_transient(
                    &runtime,
                    &mut Backoff::new(4, 100),
                    || async {
                        Err(ExternalError::permanent(
                            "s",
                            BrokenAt::Version(crate::location::SeqNo(3)),
                            PermanentKind::Undecodable,
                            "garbage",
                        ))
                    },
                    |_, _| panic!("a permanent error is not retried"),
                )
                .await;
                (first, second, runtime.now_ms() - start)
            })
            .unwrap();
        assert_eq!(out.0, Ok(3));
        assert_eq!(retries.get(), 2);
        assert_eq!(out.1.unwrap_err().kind, PermanentKind::Undecodable);
        assert_eq!(out.2, 0, "no back-off before a permanent error");
    }

    #[test]
    fn retry_within_stops_at_a_permanent_error_or_the_budget() {
        let sim = Simulator::new(5);
        let runtime = sim.runtime();
        let out = sim
            .block_on(async move {
                // Heals on the third attempt: two waits (4 ms, 8 ms) fit a budget of 20 ms.
                let mut calls = 0u32;
                let mut waits = Vec::new();
                let healed = retry_within(
                    &runtime,
                    &mut Backoff::new(4, 100),
                    20,
                    || {
                        calls += 1;
                        let n = calls;
                        async move {
                            if n < 3 {
                                Err(Attempt::Transient(n))
                            } else {
                                Ok(n)
                            }
                        }
                    },
                    |e, w| waits.push((*e, w.attempt, w.wait_ms)),
                )
                .await;
                // Never heals: 4 + 8 fit in 15 ms, the next 16 does not; the last error returns.
                let mut tries = 0u32;
                let gave_up: Result<(), u32> = retry_within(
                    &runtime,
                    &mut Backoff::new(4, 100),
                    15,
                    || {
                        tries += 1;
                        let n = tries;
                        async move { Err(Attempt::Transient(n)) }
                    },
                    |_, _| {},
                )
                .await;
                let permanent: Result<(), &str> = retry_within(
                    &runtime,
                    &mut Backoff::new(4, 100),
                    1_000,
                    || async { Err(Attempt::Permanent("bad url")) },
                    |_, _| panic!("a permanent error is not retried"),
                )
                .await;
                (healed, waits, gave_up, permanent)
            })
            .unwrap();
        assert_eq!(out.0, Ok(3));
        assert_eq!(out.1, vec![(1, 1, 4), (2, 2, 8)]);
        assert_eq!(out.2, Err(3), "three attempts, then the budget is spent");
        assert_eq!(out.3, Err("bad url"));
    }
}
