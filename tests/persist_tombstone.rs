//! Tombstones: once a shard's upper and since are both empty it drops every handle, and every
//! later command is a no-op that spends no seqno. `finalize_shard` makes one on purpose.
#![cfg(not(target_arch = "wasm32"))]

use std::rc::Rc;

use futures::FutureExt;
use persist_playground::location::mem::{Latency, MemBlob, MemConsensus};
use persist_playground::location::{Consensus, Location, SeqNo};
use persist_playground::persist::error::{InvalidUsage, PersistError};
use persist_playground::persist::state::CriticalReaderId;
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::sim::Simulator;
use timely::progress::Antichain;

fn f(t: u64) -> Antichain<u64> {
    Antichain::from_elem(t)
}

fn empty() -> Antichain<u64> {
    Antichain::new()
}

fn setup(seed: u64) -> (Simulator, MemConsensus, PersistClient) {
    let sim = Simulator::new(seed);
    let rt = sim.runtime();
    let consensus = MemConsensus::new();
    let location = Location {
        blob: Rc::new(MemBlob::new().with_latency(Latency::new(rt.clone(), seed, 0, 2))),
        consensus: Rc::new(consensus.with_latency(Latency::new(rt.clone(), seed ^ 9, 0, 2))),
    };
    let client = PersistClient::new(location, rt, PersistConfig::default(), seed);
    (sim, consensus, client)
}

fn head(consensus: &MemConsensus, shard: &ShardId) -> SeqNo {
    consensus
        .head(&shard.0)
        .now_or_never()
        .unwrap()
        .unwrap()
        .unwrap()
        .seqno
}

#[test]
fn closing_both_frontiers_makes_a_tombstone_whose_commands_spend_no_seqno() {
    let (sim, consensus, client) = setup(1);
    let shard = ShardId::new("s-tomb").unwrap();
    let (c, s) = (client.clone(), shard.clone());
    let (w, r) = sim
        .block_on(async move {
            let (mut w, mut r) = c.open::<String, ()>(&s).await.unwrap();
            let data = vec![(("a".to_string(), ()), 0u64, 1i64)];
            w.compare_and_append(&data, f(0), f(3))
                .await
                .unwrap()
                .unwrap();
            // Finish the upper: not a tombstone yet, the reader still holds the since.
            w.compare_and_append(&[], f(3), empty())
                .await
                .unwrap()
                .unwrap();
            assert!(!c.is_finalized(&s).await.unwrap());
            // Close the since too: the shard drops every handle.
            r.downgrade_since(&empty()).await.unwrap();
            assert!(c.is_finalized(&s).await.unwrap());
            (w, r)
        })
        .unwrap();
    let state = {
        let (c, s) = (client.clone(), shard.clone());
        sim.block_on(async move { c.inspect_state(&s).await.unwrap() })
            .unwrap()
    };
    assert!(state.collections.writers.is_empty() && state.collections.leased_readers.is_empty());
    assert!(state.upper().is_empty() && state.since().is_empty());
    assert!(state.part_keys().next().is_none(), "no batch keeps parts");

    // From here on, nothing takes a seqno.
    let at = head(&consensus, &shard);
    let (c, s) = (client.clone(), shard.clone());
    sim.block_on(async move {
        let (mut w, mut r) = (w, r);
        // The old writer, a new one, and any expected upper: an upper mismatch at [].
        for (lo, hi) in [(f(3), f(4)), (empty(), empty()), (f(0), f(0))] {
            let m = w
                .compare_and_append(&[], lo.clone(), hi)
                .await
                .unwrap()
                .unwrap_err();
            assert_eq!((m.expected, m.current), (lo, empty()));
        }
        let mut w2 = c.open_writer::<String, ()>(&s).await.unwrap();
        assert_eq!(
            w2.upper(),
            &empty(),
            "registering succeeds and sees the empty upper"
        );
        let data = vec![(("b".to_string(), ()), 7u64, 1i64)];
        let m = w2
            .compare_and_append(&data, f(7), f(8))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(m.current, empty());
        w.heartbeat().await.unwrap();
        // Readers: downgrades answer the empty since; registration succeeds.
        r.downgrade_since(&f(9)).await.unwrap();
        assert_eq!(r.since(), &empty());
        r.heartbeat().await.unwrap();
        let r2 = c.open_leased_reader::<String, ()>(&s).await.unwrap();
        assert_eq!(r2.since(), &empty());
        let mut crit = c
            .open_critical_since::<String, ()>(&s, CriticalReaderId("c-1".into()), 5)
            .await
            .unwrap();
        assert_eq!(
            crit.compare_and_downgrade_since(5, (6, &f(1)))
                .await
                .unwrap(),
            Ok(empty())
        );
        // Expiring handles succeeds; finalizing again succeeds.
        w.expire().await;
        w2.expire().await;
        r.expire().await;
        r2.expire().await;
        crit.expire().await;
        c.finalize_shard(&s).await.unwrap();
        assert!(c.is_finalized(&s).await.unwrap());
    })
    .unwrap();
    sim.run_for(5_000).unwrap();
    assert_eq!(
        head(&consensus, &shard),
        at,
        "a tombstone takes no new seqno"
    );
}

#[test]
fn finalize_shard_needs_a_finished_upper_and_no_held_since() {
    let (sim, consensus, client) = setup(2);
    let shard = ShardId::new("s-final").unwrap();
    let (c, s) = (client.clone(), shard.clone());
    sim.block_on(async move {
        let (mut w, mut r) = c.open::<String, ()>(&s).await.unwrap();
        let refused = |e: PersistError| {
            matches!(
                e,
                PersistError::InvalidUsage(InvalidUsage::NotFinalizable { .. })
            )
        };
        // An open upper: refused.
        assert!(refused(c.finalize_shard(&s).await.unwrap_err()));
        w.compare_and_append(&[], f(0), empty())
            .await
            .unwrap()
            .unwrap();
        // A reader holds the since at 0: refused.
        assert!(refused(c.finalize_shard(&s).await.unwrap_err()));
        r.downgrade_since(&f(2)).await.unwrap();
        assert!(refused(c.finalize_shard(&s).await.unwrap_err()));
        // No reader left: the since may close, and the shard becomes a tombstone.
        r.expire().await;
        assert!(!c.is_finalized(&s).await.unwrap());
        c.finalize_shard(&s).await.unwrap();
        assert!(c.is_finalized(&s).await.unwrap());
        let state = c.inspect_state(&s).await.unwrap();
        assert!(
            state.collections.writers.is_empty(),
            "the writer was dropped"
        );
        assert!(state.since().is_empty());
        w.abandon();
    })
    .unwrap();
    let at = head(&consensus, &shard);
    let (c, s) = (client.clone(), shard.clone());
    sim.block_on(async move {
        c.finalize_shard(&s).await.unwrap();
        let _ = c.open::<String, ()>(&s).await.unwrap();
    })
    .unwrap();
    sim.run_for(5_000).unwrap();
    assert_eq!(head(&consensus, &shard), at);
}
