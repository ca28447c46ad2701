//! Opening a native location retries what can heal (native only).
//!
//! A server that is restarting (PostgreSQL answers `57P01` admin shutdown, `57P02` crash
//! shutdown or `57P03` starting up / shutting down, or refuses or resets the connection) or an
//! S3 endpoint that is not up yet will usually be there a moment later: opening tries again with
//! the crate's back-off ([`crate::retry`]) for a bounded time ([`OpenRetry::budget_ms`], 30 s by
//! default), telling [`OpenRetry::on_wait`] before each wait. What cannot heal (a bad URL, an
//! unknown host, wrong credentials, a missing database or bucket, a table of another schema)
//! fails at once with its [`LocationError`]. When the budget is spent, the last error is returned
//! with a note saying how long it was retried.

use std::fmt;
use std::rc::Rc;

use super::open_error::LocationError;
use crate::retry::{retry_within, Attempt, Backoff, RetryWait};
use crate::runtime::Runtime;

/// How long opening a location may keep retrying a failure that can heal.
pub const DEFAULT_OPEN_BUDGET_MS: u64 = 30_000;

/// The first wait between two attempts to open.
const OPEN_BACKOFF_MIN_MS: u64 = 100;
/// The longest wait between two attempts to open.
const OPEN_BACKOFF_MAX_MS: u64 = 2_000;

/// Who hears about each wait: the error that will be retried and the wait.
pub type OnOpenWait = Rc<dyn Fn(&LocationError, RetryWait)>;

/// How opening a location retries a failure that can heal (see the module docs).
#[derive(Clone)]
pub struct OpenRetry {
    /// Stop retrying once the next wait would end this long after the first attempt began
    /// (the runtime's clock); 0 makes one attempt.
    pub budget_ms: u64,
    /// Called before each wait (for a progress line); `None`: silent.
    pub on_wait: Option<OnOpenWait>,
}

impl Default for OpenRetry {
    fn default() -> Self {
        OpenRetry {
            budget_ms: DEFAULT_OPEN_BUDGET_MS,
            on_wait: None,
        }
    }
}

impl fmt::Debug for OpenRetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenRetry")
            .field("budget_ms", &self.budget_ms)
            .field("on_wait", &self.on_wait.is_some())
            .finish()
    }
}

impl OpenRetry {
    /// One attempt, no retry.
    pub fn once() -> Self {
        OpenRetry {
            budget_ms: 0,
            on_wait: None,
        }
    }

    /// Retries for `budget_ms`, silently.
    pub fn within_ms(budget_ms: u64) -> Self {
        OpenRetry {
            budget_ms,
            on_wait: None,
        }
    }

    /// Calls `f` before each wait.
    pub fn on_wait(mut self, f: impl Fn(&LocationError, RetryWait) + 'static) -> Self {
        self.on_wait = Some(Rc::new(f));
        self
    }

    /// Runs `attempt` under this policy. A transient failure that outlived the budget after at
    /// least one retry comes back with a note of how long it was retried.
    pub(crate) async fn run<T, Fut>(
        &self,
        runtime: &Runtime,
        attempt: impl FnMut() -> Fut,
    ) -> Result<T, LocationError>
    where
        Fut: std::future::Future<Output = Result<T, Attempt<LocationError>>>,
    {
        let mut backoff = Backoff::new(OPEN_BACKOFF_MIN_MS, OPEN_BACKOFF_MAX_MS);
        let start = runtime.now_ms();
        let on_wait = self.on_wait.clone();
        let mut waited = false;
        let out = retry_within(runtime, &mut backoff, self.budget_ms, attempt, |e, w| {
            waited = true;
            if let Some(f) = &on_wait {
                f(e, w);
            }
        })
        .await;
        match out {
            Err(e) if waited => {
                let ms = runtime.now_ms().saturating_sub(start);
                Err(e.with_note(&format!(
                    "still failing after {} attempts over {} ms (the open budget is {} ms)",
                    backoff.attempts().saturating_add(1),
                    ms,
                    self.budget_ms
                )))
            }
            out => out,
        }
    }
}
