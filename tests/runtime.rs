//! Native tests of the runtime contract under the deterministic simulator: replay by seed,
//! seed-dependent interleavings, deadlock reports, intervals that skip missed ticks, timeouts
//! that cancel, and spawn handles that abort on drop.
#![cfg(not(target_arch = "wasm32"))]

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;

use futures::channel::mpsc;
use futures::StreamExt;
use persist_playground::runtime::sim::{SimError, Simulator, Trace, TraceEntry};
use persist_playground::runtime::Runtime;

type Log = Rc<RefCell<Vec<String>>>;

/// A small workload with every kind of wake-up: timers, yields, spawns and a channel.
fn workload(rt: &Runtime, log: &Log) {
    let (tx, mut rx) = mpsc::unbounded::<String>();
    for w in 0..3u64 {
        let (rt2, log2, tx) = (rt.clone(), Rc::clone(log), tx.clone());
        rt.spawn(&format!("writer{w}"), async move {
            for i in 0..4u64 {
                log2.borrow_mut()
                    .push(format!("w{w} step{i} at {}", rt2.now_ms()));
                if (w + i) % 2 == 0 {
                    rt2.yield_now().await;
                } else {
                    rt2.sleep((w * 7 + i * 3) % 5).await;
                }
                let _ = tx.unbounded_send(format!("w{w}.{i}"));
            }
        })
        .detach();
    }
    drop(tx);
    let log2 = Rc::clone(log);
    rt.spawn("reader", async move {
        while let Some(msg) = rx.next().await {
            log2.borrow_mut().push(format!("got {msg}"));
        }
    })
    .detach();
}

fn run(seed: u64) -> (Trace, Vec<String>) {
    let sim = Simulator::new(seed);
    let log: Log = Rc::default();
    workload(&sim.runtime(), &log);
    sim.run_until(1_000).expect("the workload finishes");
    assert!(sim.live_tasks().is_empty());
    let events = log.borrow().clone();
    (sim.trace(), events)
}

#[test]
fn same_seed_same_trace_and_events() {
    for seed in [0, 1, 42, u64::MAX] {
        let (trace_a, events_a) = run(seed);
        let (trace_b, events_b) = run(seed);
        assert!(trace_a.len() > 20, "the workload did something");
        assert_eq!(trace_a, trace_b, "seed {seed}: the trace of polls replays");
        assert_eq!(events_a, events_b, "seed {seed}: the events replay");
    }
}

#[test]
fn different_seeds_interleave_differently() {
    // Goal: the seed, not spawn order, decides which ready task runs; so over a few seeds the
    // same tasks produce several different event orders.
    let orders: BTreeSet<Vec<String>> = (0..16).map(|seed| run(seed).1).collect();
    assert!(orders.len() >= 4, "only {} distinct orders", orders.len());
    let traces: BTreeSet<String> = (0..16).map(|seed| format!("{:?}", run(seed).0)).collect();
    assert!(traces.len() >= 4);
}

#[test]
fn time_moves_only_when_every_task_waits() {
    let sim = Simulator::new(3);
    let rt = sim.runtime();
    let seen = Rc::new(RefCell::new(Vec::new()));
    let (rt2, seen2) = (rt.clone(), Rc::clone(&seen));
    rt.spawn("spinner", async move {
        for _ in 0..100 {
            rt2.yield_now().await;
        }
        seen2.borrow_mut().push(rt2.now_ms());
    })
    .detach();
    let (rt3, seen3) = (rt.clone(), Rc::clone(&seen));
    rt.spawn("sleeper", async move {
        rt3.sleep(10).await;
        seen3.borrow_mut().push(rt3.now_ms());
    })
    .detach();
    sim.run_until(100).unwrap();
    assert_eq!(
        *seen.borrow(),
        vec![0, 10],
        "the spinner finished before time moved"
    );
    assert_eq!(
        sim.now_ms(),
        100,
        "run_until leaves the clock at its deadline"
    );
    let timers = sim
        .trace()
        .iter()
        .filter(|e| matches!(e, TraceEntry::Timer { .. }))
        .count();
    assert_eq!(timers, 1);
}

#[test]
fn deadlock_names_every_blocked_task() {
    let sim = Simulator::new(5);
    let rt = sim.runtime();
    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    let (tx2, rx2) = futures::channel::oneshot::channel::<()>();
    rt.spawn("waits-for-b", async move {
        let _ = rx.await;
        drop(tx2);
    })
    .detach();
    let rt2 = rt.clone();
    rt.spawn("waits-for-a", async move {
        rt2.sleep(3).await;
        let _ = rx2.await;
        drop(tx);
    })
    .detach();
    // The senders are held by the tasks themselves: neither can ever finish.
    let err = sim.run_until(1_000).unwrap_err();
    assert_eq!(
        err,
        SimError::Deadlock {
            now_ms: 3,
            blocked: vec!["waits-for-b".into(), "waits-for-a".into()],
        }
    );
    assert!(err.to_string().contains("waits-for-a"));
}

#[test]
fn interval_skips_missed_ticks() {
    let sim = Simulator::new(0);
    let rt = sim.runtime();
    let rt2 = rt.clone();
    let ticks = sim
        .block_on(async move {
            let mut interval = rt2.interval(10);
            let mut ticks = Vec::new();
            ticks.push((interval.tick().await, rt2.now_ms()));
            rt2.sleep(35).await; // busy through the ticks at 20, 30 and 40
            ticks.push((interval.tick().await, rt2.now_ms()));
            ticks.push((interval.tick().await, rt2.now_ms()));
            ticks
        })
        .unwrap();
    assert_eq!(
        ticks,
        vec![(10, 10), (40, 45), (50, 50)],
        "one late tick stands for 20, 30 and 40; then the schedule goes on"
    );
    let zero = rt.interval(0);
    assert_eq!(zero.period_ms(), 1, "a zero period cannot spin");
}

#[test]
fn timeout_expires_and_cancels_the_inner_future() {
    let sim = Simulator::new(0);
    let rt = sim.runtime();
    let dropped = Rc::new(Cell::new(false));
    struct SetOnDrop(Rc<Cell<bool>>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.set(true);
        }
    }
    let (rt2, dropped2) = (rt.clone(), Rc::clone(&dropped));
    let (early, late, at) = sim
        .block_on(async move {
            let guard = SetOnDrop(dropped2);
            let rt3 = rt2.clone();
            let early = rt2
                .timeout(10, async move {
                    let _guard = guard;
                    rt3.sleep(20).await;
                })
                .await;
            let late = rt2.timeout(30, rt2.sleep(20)).await;
            (early, late, rt2.now_ms())
        })
        .unwrap();
    assert_eq!(early.unwrap_err().after_ms, 10);
    assert!(dropped.get(), "the timed-out future was dropped");
    assert_eq!(late, Ok(()));
    assert_eq!(
        at, 30,
        "10 ms waiting for the first, then 20 for the second"
    );
    assert_eq!(sim.next_timer_ms(), None, "cancelled timers do not linger");
}

#[test]
fn dropping_a_join_handle_aborts_its_task() {
    let sim = Simulator::new(8);
    let rt = sim.runtime();
    let count = Rc::new(Cell::new(0u32));
    let (rt2, c2) = (rt.clone(), Rc::clone(&count));
    let handle = rt.spawn("ticker", async move {
        loop {
            c2.set(c2.get() + 1);
            rt2.sleep(5).await;
        }
    });
    sim.run_until(22).unwrap();
    assert_eq!(count.get(), 5, "ticks at 0, 5, 10, 15, 20");
    drop(handle);
    sim.run_until(100).unwrap();
    assert_eq!(count.get(), 5, "no tick after the handle was dropped");
    assert!(sim.live_tasks().is_empty(), "the aborted task is gone");

    // A detached task runs on; a joined task yields its output.
    let c3 = Rc::clone(&count);
    rt.spawn("detached", async move { c3.set(100) }).detach();
    let out = sim.block_on(rt.spawn("joined", async { "done" })).unwrap();
    assert_eq!(out, "done");
    sim.run_until(sim.now_ms()).unwrap();
    assert_eq!(count.get(), 100);
}

#[test]
fn run_until_pred_and_step_limits() {
    let sim = Simulator::new(1);
    let rt = sim.runtime();
    let flag = Rc::new(Cell::new(false));
    let (rt2, f2) = (rt.clone(), Rc::clone(&flag));
    rt.spawn("setter", async move {
        rt2.sleep(40).await;
        f2.set(true);
        rt2.sleep(1_000_000).await;
    })
    .detach();
    let f3 = Rc::clone(&flag);
    sim.run_until_pred(move || f3.get(), 1_000).unwrap();
    assert_eq!(sim.now_ms(), 40);
    // A spinning task hits the step limit instead of hanging.
    let rt3 = rt.clone();
    rt.spawn("spin", async move {
        loop {
            rt3.yield_now().await;
        }
    })
    .detach();
    let err = sim.run_until_pred(|| false, 500).unwrap_err();
    assert!(matches!(err, SimError::StepLimit { limit: 500, .. }));
}
