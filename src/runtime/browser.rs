//! The browser's runtime (wasm32 only): `Date.now()` for the clock, `setTimeout` (through
//! gloo-timers) for timers, and `wasm_bindgen_futures::spawn_local` for tasks.
//!
//! `Date.now()` can step back when the system clock is adjusted; [`BrowserRuntime`] clamps it so
//! that `now_ms` never decreases, as the runtime contract requires.

use std::cell::Cell;
use std::rc::Rc;

use futures::future::LocalBoxFuture;

use super::{Runtime, RuntimeImpl};

/// See the module docs.
#[derive(Default)]
pub struct BrowserRuntime {
    last_ms: Cell<u64>,
    epoch_ms: u64,
}

impl BrowserRuntime {
    /// A [`Runtime`] on the browser's clock and event loop.
    pub fn runtime() -> Runtime {
        Runtime::new(Rc::new(BrowserRuntime::default()))
    }

    /// The wall clock now, in ms since the Unix epoch (`Date.now()`; 0 if it is not a number).
    pub fn wall_now_ms() -> u64 {
        let wall = js_sys::Date::now();
        if wall.is_finite() && wall > 0.0 {
            wall as u64
        } else {
            0
        }
    }

    /// A [`Runtime`] whose clock counts milliseconds since `epoch_ms` (a wall-clock reading, ms
    /// since the Unix epoch), as live mode measures time since its database was created
    /// ([`crate::playground::clock`]). Before the epoch it reads 0.
    pub fn runtime_since(epoch_ms: u64) -> Runtime {
        Runtime::new(Rc::new(BrowserRuntime {
            last_ms: Cell::new(0),
            epoch_ms,
        }))
    }
}

impl RuntimeImpl for BrowserRuntime {
    fn now_ms(&self) -> u64 {
        let wall = BrowserRuntime::wall_now_ms();
        let now = wall.saturating_sub(self.epoch_ms).max(self.last_ms.get());
        self.last_ms.set(now);
        now
    }

    fn sleep_until(&self, deadline_ms: u64) -> LocalBoxFuture<'static, ()> {
        let clock = Rc::new(BrowserRuntime {
            last_ms: Cell::new(self.last_ms.get()),
            epoch_ms: self.epoch_ms,
        });
        Box::pin(async move {
            // setTimeout may fire early by a millisecond, and takes at most i32::MAX ms: loop.
            loop {
                let now = clock.now_ms();
                if now >= deadline_ms {
                    return;
                }
                let wait = (deadline_ms - now).min(i32::MAX as u64) as u32;
                gloo_timers::future::TimeoutFuture::new(wait).await;
            }
        })
    }

    fn spawn_boxed(&self, _name: &str, fut: LocalBoxFuture<'static, ()>) {
        wasm_bindgen_futures::spawn_local(fut);
    }
}
