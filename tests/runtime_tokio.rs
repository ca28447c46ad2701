//! The tokio runtime keeps the runtime contract (src/runtime/mod.rs): sleeps never wake early on
//! its own clock, the clock never goes back, a dropped JoinHandle aborts its task, a timeout
//! cancels its future, and `!Send` futures (holding `Rc`s) run. No wall-clock bounds are asserted:
//! only orderings on the runtime's own clock.
#![cfg(not(target_arch = "wasm32"))]

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use persist_playground::runtime::tokio::TokioRuntime;

#[test]
fn sleep_completes_at_or_after_its_deadline_and_the_clock_never_goes_back() {
    TokioRuntime::block_on(|rt| async move {
        let mut last = rt.now_ms();
        for ms in [0u64, 1, 5, 20] {
            let start = rt.now_ms();
            rt.sleep(ms).await;
            let now = rt.now_ms();
            assert!(now >= start + ms, "slept {ms} ms: {start} -> {now}");
            assert!(now >= last);
            last = now;
        }
    })
    .unwrap();
}

#[test]
fn the_microsecond_clock_never_goes_back_and_moves_across_a_sleep() {
    TokioRuntime::block_on(|rt| async move {
        let mut last = rt.now_us();
        for _ in 0..1000 {
            let now = rt.now_us();
            assert!(now >= last, "now_us went back: {last} -> {now}");
            last = now;
        }
        // It moves forward across a sleep (ordering only, no bound on how far).
        let before = rt.now_us();
        rt.sleep(2).await;
        assert!(rt.now_us() > before);
    })
    .unwrap();
}

#[test]
fn spawned_tasks_run_and_a_dropped_handle_aborts() {
    TokioRuntime::block_on(|rt| async move {
        // A !Send task sharing an Rc.
        let ran = Rc::new(Cell::new(0u32));
        let r2 = ran.clone();
        let handle = rt.spawn("adder", async move {
            r2.set(r2.get() + 1);
            7u32
        });
        assert_eq!(handle.await, 7);
        assert_eq!(ran.get(), 1);

        let ticks = Rc::new(Cell::new(0u32));
        let t2 = ticks.clone();
        let rt2 = rt.clone();
        let handle = rt.spawn("ticker", async move {
            loop {
                rt2.sleep(1).await;
                t2.set(t2.get() + 1);
            }
        });
        while ticks.get() < 3 {
            rt.sleep(1).await;
        }
        drop(handle);
        rt.sleep(2).await; // lets the abort take effect at the task's next wake-up
        let frozen = ticks.get();
        rt.sleep(20).await;
        assert_eq!(ticks.get(), frozen, "an aborted task runs no more");
    })
    .unwrap();
}

#[test]
fn timeout_cancels_and_interval_ticks_on_schedule() {
    TokioRuntime::block_on(|rt| async move {
        let dropped = Rc::new(RefCell::new(false));
        struct OnDrop(Rc<RefCell<bool>>);
        impl Drop for OnDrop {
            fn drop(&mut self) {
                *self.0.borrow_mut() = true;
            }
        }
        let guard = OnDrop(dropped.clone());
        let rt2 = rt.clone();
        let out = rt
            .timeout(5, async move {
                let _g = guard;
                rt2.sleep(60_000).await;
            })
            .await;
        assert_eq!(out.unwrap_err().after_ms, 5);
        assert!(*dropped.borrow(), "the timed-out future was dropped");
        assert_eq!(rt.timeout(1_000, async { 3 }).await, Ok(3));

        let mut interval = rt.interval(3);
        let first = interval.tick().await;
        let second = interval.tick().await;
        assert!(
            second >= first + 3,
            "ticks keep their period: {first}, {second}"
        );
        assert!(rt.now_ms() >= second);
    })
    .unwrap();
}
