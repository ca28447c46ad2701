//! A reader: opens a leased reader, subscribes from its since and consumes the listen, unless
//! told to hold, when it stops consuming and its since stays where it is.
//!
//! Invariant: the since it shows is the frontier its listen last emitted from (the listen holds
//! its since there), and `updatesSeen` counts the snapshot and every update delivered since.

use std::cell::Cell;
use std::rc::Rc;

use crate::persist::events::frontier;
use crate::persist::read::ListenEvent;
use crate::playground::actor::ActorCtx;
use crate::playground::command::ReaderSpec;
use crate::playground::log::{fmt_frontier, Outcome};

/// A reader: opens a leased reader, subscribes from its since and consumes the listen, unless
/// told to hold, when it stops consuming and its since stays where it is.
pub async fn run_reader(ctx: Rc<ActorCtx>, spec: ReaderSpec, hold: Rc<Cell<bool>>) {
    let Some(shard) = ctx.shard("scenario", &spec.shard) else {
        return;
    };
    let read = match ctx
        .client
        .open_leased_reader::<String, String>(&shard)
        .await
    {
        Ok(r) => r,
        Err(e) => return ctx.fail("reader", "open_leased_reader", e),
    };
    ctx.register(&read.reader_id().0);
    let as_of = read.since().clone();
    let start = frontier(&as_of);
    ctx.reader_view(|r| {
        r.since = start;
        r.hold = hold.get();
    });
    ctx.event(
        "reader",
        "open",
        Outcome::Info,
        format!(
            "opened its reader on {shard} (handle id {}) with since {}",
            read.reader_id().0,
            fmt_frontier(start)
        ),
    );
    let (snapshot, mut listen) = match read.subscribe(as_of).await {
        Ok(s) => s,
        Err(e) => return ctx.fail("reader", "subscribe", e),
    };
    let rt = ctx.runtime.clone();
    let mut seen = snapshot.len() as u64;
    ctx.reader_view(|r| {
        r.updates_seen = seen;
        r.frontier = frontier(listen.frontier());
    });
    // A held reader consumes nothing, so nothing heartbeats its lease: it does so itself,
    // every half lease, or the lease (short in the playground) would run out while held.
    let half_lease_ms = (ctx.client.cfg().reader_lease_duration_ms / 2).max(1);
    let mut beat_ms = rt.now_ms();
    loop {
        let holding = hold.get();
        ctx.reader_view(|r| r.hold = holding);
        if holding {
            if rt.now_ms().saturating_sub(beat_ms) >= half_lease_ms {
                if let Err(e) = listen.heartbeat().await {
                    return ctx.fail("reader", "heartbeat", e);
                }
                beat_ms = rt.now_ms();
            }
            rt.sleep(100).await;
            continue;
        }
        let emitted_from = frontier(listen.frontier());
        let events = match listen.next().await {
            Ok(e) => e,
            Err(e) => return ctx.fail("reader", "listen", e),
        };
        // Each step downgrades the since, which heartbeats.
        beat_ms = rt.now_ms();
        for event in events {
            match event {
                ListenEvent::Updates(u) => seen += u.len() as u64,
                ListenEvent::Progress(p) => {
                    let f = frontier(&p);
                    // The listen holds its since at the frontier it emitted from.
                    ctx.reader_view(|r| {
                        r.frontier = f;
                        r.since = emitted_from;
                        r.updates_seen = seen;
                    });
                }
            }
        }
    }
}
