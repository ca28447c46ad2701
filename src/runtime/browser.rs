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
}

impl BrowserRuntime {
    /// A [`Runtime`] on the browser's clock and event loop.
    pub fn runtime() -> Runtime {
        Runtime::new(Rc::new(BrowserRuntime::default()))
    }
}

impl RuntimeImpl for BrowserRuntime {
    fn now_ms(&self) -> u64 {
        let wall = js_sys::Date::now();
        let wall = if wall.is_finite() && wall > 0.0 {
            wall as u64
        } else {
            0
        };
        let now = wall.max(self.last_ms.get());
        self.last_ms.set(now);
        now
    }

    fn sleep_until(&self, deadline_ms: u64) -> LocalBoxFuture<'static, ()> {
        let clock = Rc::new(BrowserRuntime {
            last_ms: Cell::new(self.last_ms.get()),
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
