//! Native tests of the persist handles' documented semantics, one behaviour per test, on the
//! deterministic simulator over in-memory locations (with virtual latency, so commands really
//! interleave). The randomized fault suite lives in `persist_sim.rs`.
#![cfg(not(target_arch = "wasm32"))]

use std::rc::Rc;

use persist_playground::location::mem::{Latency, MemBlob, MemConsensus};
use persist_playground::location::unreliable::{
    UnreliableBlob, UnreliableConsensus, UnreliableHandle,
};
use persist_playground::location::Location;
use persist_playground::persist::error::{InvalidUsage, PersistError};
use persist_playground::persist::read::ListenEvent;
use persist_playground::persist::state::{BatchPart, CriticalReaderId};
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::sim::Simulator;
use timely::progress::Antichain;

type Upd = ((String, String), u64, i64);

fn f(t: u64) -> Antichain<u64> {
    Antichain::from_elem(t)
}

fn upd(k: &str, v: &str, t: u64, d: i64) -> Upd {
    ((k.to_string(), v.to_string()), t, d)
}

fn setup(seed: u64) -> (Simulator, PersistClient) {
    let sim = Simulator::new(seed);
    let rt = sim.runtime();
    let location = Location {
        blob: Rc::new(MemBlob::new().with_latency(Latency::new(rt.clone(), seed, 0, 2))),
        consensus: Rc::new(MemConsensus::new().with_latency(Latency::new(rt.clone(), !seed, 0, 2))),
    };
    let client = PersistClient::new(location, rt, PersistConfig::default(), seed);
    (sim, client)
}

fn shard(name: &str) -> ShardId {
    ShardId::new(name).unwrap()
}

#[test]
fn sanity_check_write_snapshot_listen() {
    let (sim, client) = setup(1);
    sim.block_on(async move {
        let (mut write, read) = client.open::<String, String>(&shard("s")).await.unwrap();
        assert_eq!(write.upper(), &f(0));
        let data = [
            upd("k1", "v1", 1, 1),
            upd("k2", "v2", 2, 1),
            upd("k3", "v3", 3, 1),
        ];
        write
            .compare_and_append(&data[..2], f(0), f(3))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(write.upper(), &f(3));
        write
            .compare_and_append(&data[2..], f(3), f(4))
            .await
            .unwrap()
            .unwrap();
        let mut read2 = client
            .open_leased_reader::<String, String>(&shard("s"))
            .await
            .unwrap();
        assert_eq!(
            read2.snapshot_and_fetch(f(2)).await.unwrap(),
            vec![upd("k1", "v1", 2, 1), upd("k2", "v2", 2, 1)],
            "times at or before as_of advance to it"
        );
        assert_eq!(read2.snapshot_and_fetch(f(3)).await.unwrap().len(), 3);
        // A listen from 1 sees k2 and k3, each once, then progress.
        let mut listen = read.listen(f(1)).await.unwrap();
        let mut seen = Vec::new();
        while listen.frontier() != &f(4) {
            for event in listen.next().await.unwrap() {
                if let ListenEvent::Updates(u) = event {
                    seen.extend(u);
                }
            }
        }
        seen.sort();
        assert_eq!(seen, vec![upd("k2", "v2", 2, 1), upd("k3", "v3", 3, 1)]);
    })
    .unwrap();
}

#[test]
fn compare_and_append_mismatch_reports_the_current_upper() {
    let (sim, client) = setup(2);
    sim.block_on(async move {
        let mut w1 = client
            .open_writer::<String, String>(&shard("s"))
            .await
            .unwrap();
        let mut w2 = client
            .open_writer::<String, String>(&shard("s"))
            .await
            .unwrap();
        w1.compare_and_append(&[upd("a", "", 0, 1)], f(0), f(5))
            .await
            .unwrap()
            .unwrap();
        let err = w2
            .compare_and_append(&[upd("b", "", 0, 1)], f(0), f(5))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(err.expected, f(0));
        assert_eq!(err.current, f(5));
        assert_eq!(w2.upper(), &f(5), "a mismatch updates the handle's upper");
        w2.compare_and_append(&[upd("b", "", 5, 1)], f(5), f(6))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(w1.upper(), &f(5), "upper() is this handle's cache");
        assert_eq!(
            w1.shared_upper(),
            f(6),
            "shared_upper() is the process-wide cache"
        );
        assert_eq!(w1.fetch_recent_upper().await.unwrap(), &f(6));
    })
    .unwrap();
}

#[test]
fn append_trims_overlaps_and_fails_only_on_gaps() {
    let (sim, client) = setup(3);
    sim.block_on(async move {
        let mut a = client
            .open_writer::<String, String>(&shard("s"))
            .await
            .unwrap();
        let mut b = client
            .open_writer::<String, String>(&shard("s"))
            .await
            .unwrap();
        let data: Vec<Upd> = (0..10).map(|t| upd(&format!("k{t}"), "", t, 1)).collect();
        // Replica a writes [0, 5); replica b, with identical data, writes [0, 8): overlapping.
        a.append(&data[..5], f(0), f(5)).await.unwrap().unwrap();
        b.append(&data[..8], f(0), f(8)).await.unwrap().unwrap();
        // Contiguous: a writes [8, 10).
        a.append(&data[8..10], f(8), f(10)).await.unwrap().unwrap();
        // Already covered: b's [5, 9) is a no-op success.
        b.append(&data[5..9], f(5), f(9)).await.unwrap().unwrap();
        // A gap: [12, 15) while the shard is at 10.
        let err = a.append(&[], f(12), f(15)).await.unwrap().unwrap_err();
        assert_eq!(err.current, f(10));
        let mut read = client
            .open_leased_reader::<String, String>(&shard("s"))
            .await
            .unwrap();
        let snap = read.snapshot_and_fetch(f(9)).await.unwrap();
        assert_eq!(snap.len(), 10, "every key exactly once: {snap:?}");
        assert!(snap.iter().all(|(_, _, d)| *d == 1));
    })
    .unwrap();
}

#[test]
fn every_invalid_usage() {
    let (sim, client) = setup(4);
    sim.block_on(async move {
        let (mut w, mut r) = client.open::<String, String>(&shard("s")).await.unwrap();
        let e = w
            .compare_and_append(&[upd("a", "", 0, 1)], f(1), f(2))
            .await;
        assert!(
            matches!(
                e,
                Err(PersistError::InvalidUsage(
                    InvalidUsage::UpdateNotBeyondLower { ts: 0, .. }
                ))
            ),
            "{e:?}"
        );
        let e = w
            .compare_and_append(&[upd("a", "", 2, 1)], f(0), f(2))
            .await;
        assert!(
            matches!(
                e,
                Err(PersistError::InvalidUsage(
                    InvalidUsage::UpdateBeyondUpper { ts: 2, .. }
                ))
            ),
            "{e:?}"
        );
        let e = w.compare_and_append(&[], f(3), f(2)).await;
        assert!(
            matches!(
                e,
                Err(PersistError::InvalidUsage(
                    InvalidUsage::InvalidBounds { .. }
                ))
            ),
            "{e:?}"
        );
        let mut batch = w.batch(&[upd("a", "", 1, 1)], f(1), f(1)).await;
        assert!(matches!(
            batch,
            Err(PersistError::InvalidUsage(
                InvalidUsage::UpdateBeyondUpper { .. }
            ))
        ));
        // An empty time interval with data is only reachable through a batch truncated to it.
        batch = w.batch(&[upd("a", "", 1, 1)], f(0), f(3)).await;
        let mut batch = batch.unwrap();
        let e = w
            .compare_and_append_batch(&mut [&mut batch], f(0), f(0))
            .await;
        assert!(
            matches!(
                e,
                Err(PersistError::InvalidUsage(
                    InvalidUsage::InvalidEmptyTimeInterval { .. }
                ))
            ),
            "{e:?}"
        );
        let e = w
            .compare_and_append_batch(&mut [&mut batch], f(0), f(4))
            .await;
        assert!(
            matches!(
                e,
                Err(PersistError::InvalidUsage(
                    InvalidUsage::InvalidBatchBounds { .. }
                ))
            ),
            "{e:?}"
        );
        let mut other = client
            .open_writer::<String, String>(&shard("other"))
            .await
            .unwrap();
        let e = other
            .compare_and_append_batch(&mut [&mut batch], f(0), f(3))
            .await;
        assert!(
            matches!(
                e,
                Err(PersistError::InvalidUsage(
                    InvalidUsage::BatchNotFromThisShard { .. }
                ))
            ),
            "{e:?}"
        );
        let e = client.open_writer::<String, ()>(&shard("s")).await.err();
        assert!(
            matches!(
                e,
                Some(PersistError::InvalidUsage(
                    InvalidUsage::CodecMismatch { .. }
                ))
            ),
            "{e:?}"
        );
        // Reads before the since.
        w.compare_and_append_batch(&mut [&mut batch], f(0), f(3))
            .await
            .unwrap()
            .unwrap();
        r.downgrade_since(&f(2)).await.unwrap();
        let e = r.snapshot_and_fetch(f(1)).await;
        assert!(
            matches!(
                e,
                Err(PersistError::InvalidUsage(
                    InvalidUsage::SinceViolation { .. }
                ))
            ),
            "{e:?}"
        );
        // A finished shard refuses every later write.
        w.compare_and_append(&[], f(3), Antichain::new())
            .await
            .unwrap()
            .unwrap();
        let e = w
            .compare_and_append(&[], f(3), f(4))
            .await
            .unwrap()
            .unwrap_err();
        assert!(e.current.is_empty());
        w.expire().await;
    })
    .unwrap();
}

#[test]
fn leases_run_out_on_the_runtime_clock() {
    let (sim, client) = setup(5);
    let rt = sim.runtime();
    sim.block_on(async move {
        let lease = client.cfg().reader_lease_duration_ms;
        let (mut w, mut quiet) = client.open::<String, String>(&shard("s")).await.unwrap();
        let mut active = client
            .open_leased_reader::<String, String>(&shard("s"))
            .await
            .unwrap();
        let mut quiet_writer = client
            .open_writer::<String, String>(&shard("s"))
            .await
            .unwrap();
        w.compare_and_append(&[upd("a", "", 0, 1)], f(0), f(10))
            .await
            .unwrap()
            .unwrap();
        active.downgrade_since(&f(5)).await.unwrap();
        let state = client.inspect_state(&shard("s")).await.unwrap();
        assert_eq!(
            state.since(),
            &f(0),
            "the quiet reader holds the since at 0"
        );
        // Time passes; only the active reader and the writer heartbeat.
        rt.sleep(lease / 2).await;
        active.heartbeat().await.unwrap();
        w.heartbeat().await.unwrap();
        rt.sleep(lease / 2 + 10).await;
        active.downgrade_since(&f(6)).await.unwrap();
        let state = client.inspect_state(&shard("s")).await.unwrap();
        assert!(!state
            .collections
            .leased_readers
            .contains_key(quiet.reader_id()));
        assert_eq!(
            state.since(),
            &f(6),
            "the since is recomputed when a lease runs out"
        );
        let e = quiet.snapshot_and_fetch(f(7)).await;
        assert!(
            matches!(
                e,
                Err(PersistError::InvalidUsage(InvalidUsage::Expired { .. }))
            ),
            "{e:?}"
        );
        let e = quiet.downgrade_since(&f(8)).await;
        assert!(
            matches!(
                e,
                Err(PersistError::InvalidUsage(InvalidUsage::Expired { .. }))
            ),
            "{e:?}"
        );
        // A writer's lease runs out the same way.
        let e = quiet_writer.heartbeat().await;
        assert!(
            matches!(
                e,
                Err(PersistError::InvalidUsage(InvalidUsage::Expired {
                    what: "writer",
                    ..
                }))
            ),
            "{e:?}"
        );
        let e = quiet_writer.compare_and_append(&[], f(10), f(11)).await;
        assert!(
            matches!(
                e,
                Err(PersistError::InvalidUsage(InvalidUsage::Expired { .. }))
            ),
            "{e:?}"
        );
    })
    .unwrap();
}

#[test]
fn critical_readers_race_and_exactly_one_wins() {
    let (sim, client) = setup(6);
    let rt = sim.runtime();
    let wins = sim
        .block_on(async move {
            let id = CriticalReaderId("c-controller".into());
            let mut handles = Vec::new();
            for i in 0..4u64 {
                let client = client.clone();
                let id = id.clone();
                handles.push(rt.spawn(&format!("cads{i}"), async move {
                    let mut since = client
                        .open_critical_since::<String, String>(&shard("s"), id, 0)
                        .await
                        .unwrap();
                    since
                        .compare_and_downgrade_since(0, (i + 1, &f(i + 1)))
                        .await
                        .unwrap()
                }));
            }
            futures::future::join_all(handles).await
        })
        .unwrap();
    let winners: Vec<_> = wins.iter().filter(|r| r.is_ok()).collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one racing downgrade wins: {wins:?}"
    );
    let losers: Vec<u64> = wins.iter().filter_map(|r| r.clone().err()).collect();
    assert!(
        losers.iter().all(|o| *o != 0),
        "losers learn the winning token"
    );
}

#[test]
fn small_batches_are_inline_large_ones_in_blob_and_the_cap_flushes() {
    let (sim, client) = setup(7);
    // The batch layout checked below is the write path's own: compaction would merge it.
    let cfg = PersistConfig {
        compaction_enabled: false,
        ..PersistConfig::default()
    };
    let client = PersistClient::new(client.location().clone(), client.runtime().clone(), cfg, 7);
    let c = client.clone();
    let state = sim
        .block_on(async move {
            let mut w = c.open_writer::<String, String>(&shard("s")).await.unwrap();
            w.compare_and_append(&[upd("small", "x", 0, 1)], f(0), f(1))
                .await
                .unwrap()
                .unwrap();
            let big: Vec<Upd> = (0..3000)
                .map(|i| upd(&format!("key{i:05}"), "v", 1, 1))
                .collect();
            w.compare_and_append(&big, f(1), f(2))
                .await
                .unwrap()
                .unwrap();
            // Many small inline writes hit the state's inline cap and get flushed to Blob.
            for t in 2..60u64 {
                let rows: Vec<Upd> = (0..40)
                    .map(|i| upd(&format!("t{t}-{i}"), "0123456789", t, 1))
                    .collect();
                w.compare_and_append(&rows, f(t), f(t + 1))
                    .await
                    .unwrap()
                    .unwrap();
            }
            let mut r = c
                .open_leased_reader::<String, String>(&shard("s"))
                .await
                .unwrap();
            let snap = r.snapshot_and_fetch(f(59)).await.unwrap();
            assert_eq!(snap.len(), 1 + 3000 + 58 * 40);
            c.inspect_state(&shard("s")).await.unwrap()
        })
        .unwrap();
    let batches = state.collections.trace.batches();
    assert!(matches!(batches[0].parts[..], [BatchPart::Inline { .. }]));
    assert!(
        batches[1].parts.len() >= 2,
        "3000 updates span several Blob parts"
    );
    assert!(batches[1]
        .parts
        .iter()
        .all(|p| matches!(p, BatchPart::Hollow { .. })));
    let inline_total: u64 = batches.iter().map(|b| b.inline_bytes()).sum();
    assert!(inline_total <= persist_playground::persist::state::INLINE_WRITES_TOTAL_MAX_BYTES);
    assert!(
        batches[2..]
            .iter()
            .any(|b| matches!(b.parts[..], [BatchPart::Hollow { .. }])),
        "past the cap, small batches were flushed to Blob"
    );
}

#[test]
fn snapshot_waits_for_the_upper_and_wait_for_upper_past() {
    let (sim, client) = setup(8);
    let rt = sim.runtime();
    sim.block_on(async move {
        let (mut w, mut r) = client.open::<String, String>(&shard("s")).await.unwrap();
        let rt2 = rt.clone();
        let mut w2 = client
            .open_writer::<String, String>(&shard("s"))
            .await
            .unwrap();
        let late = rt.spawn("late writer", async move {
            rt2.sleep(500).await;
            w2.compare_and_append(&[upd("a", "", 3, 1)], f(0), f(6))
                .await
                .unwrap()
                .unwrap();
        });
        let snap = r.snapshot_and_fetch(f(4)).await.unwrap();
        assert_eq!(snap, vec![upd("a", "", 4, 1)]);
        assert!(rt.now_ms() >= 500, "the snapshot waited for the write");
        w.wait_for_upper_past(&f(5)).await.unwrap();
        assert_eq!(w.upper(), &f(6));
        late.await;
    })
    .unwrap();
}

#[test]
fn transmittable_batches_and_subscribe() {
    let (sim, client) = setup(9);
    sim.block_on(async move {
        let (mut w, r) = client.open::<String, String>(&shard("s")).await.unwrap();
        let batch = w.batch(&[upd("a", "1", 0, 1)], f(0), f(1)).await.unwrap();
        let bytes = batch.into_transmittable_batch();
        let mut again = w.batch_from_transmittable_batch(&bytes).unwrap();
        assert!(w.batch_from_transmittable_batch(&bytes[..3]).is_err());
        w.compare_and_append_batch(&mut [&mut again], f(0), f(1))
            .await
            .unwrap()
            .unwrap();
        let (snapshot, mut listen) = r.subscribe(f(0)).await.unwrap();
        assert_eq!(snapshot, vec![upd("a", "1", 0, 1)]);
        w.compare_and_append(&[upd("a", "1", 1, -1), upd("a", "2", 1, 1)], f(1), f(2))
            .await
            .unwrap()
            .unwrap();
        // The first interval [0, 1) holds only the snapshot's update (not beyond as_of).
        assert_eq!(
            listen.next().await.unwrap(),
            vec![ListenEvent::Progress(f(1))]
        );
        let events = listen.next().await.unwrap();
        let ListenEvent::Updates(mut u) = events[0].clone() else {
            panic!("{events:?}")
        };
        u.sort();
        assert_eq!(u, vec![upd("a", "1", 1, -1), upd("a", "2", 1, 1)]);
        assert_eq!(events[1], ListenEvent::Progress(f(2)));
    })
    .unwrap();
}

#[test]
fn lost_acknowledgements_write_at_most_once() {
    // Goal: compare_and_append under "happened, then timed out" faults commits each batch exactly
    // once. Method: a flaky Consensus; every acknowledged write must be in the snapshot once.
    for seed in 0..20 {
        let sim = Simulator::new(seed);
        let rt = sim.runtime();
        let handle = UnreliableHandle::new(seed, 0.7, 0.4);
        let location = Location {
            blob: Rc::new(UnreliableBlob::new(Rc::new(MemBlob::new()), handle.clone())),
            consensus: Rc::new(UnreliableConsensus::new(
                Rc::new(MemConsensus::new()),
                handle.clone(),
            )),
        };
        let client = PersistClient::new(location, rt, PersistConfig::default(), seed);
        let snap = sim
            .block_on(async move {
                let (mut w, mut r) = client.open::<String, String>(&shard("s")).await.unwrap();
                for t in 0..20u64 {
                    w.compare_and_append(&[upd(&format!("k{t}"), "", t, 1)], f(t), f(t + 1))
                        .await
                        .unwrap()
                        .unwrap();
                }
                r.snapshot_and_fetch(f(19)).await.unwrap()
            })
            .unwrap();
        assert_eq!(snap.len(), 20, "seed {seed}");
        assert!(
            snap.iter().all(|(_, _, d)| *d == 1),
            "seed {seed}: {snap:?}"
        );
        assert!(handle.counts().happened_then_timed_out > 0, "seed {seed}");
    }
}

#[test]
fn diff_overflow_is_an_error_not_a_panic() {
    let (sim, client) = setup(10);
    sim.block_on(async move {
        let (mut w, mut r) = client.open::<String, String>(&shard("s")).await.unwrap();
        let e = w
            .compare_and_append(&[upd("k", "", 0, i64::MAX), upd("k", "", 0, 1)], f(0), f(1))
            .await;
        assert!(
            matches!(
                e,
                Err(PersistError::InvalidUsage(InvalidUsage::DiffOverflow(_)))
            ),
            "{e:?}"
        );
        // Each batch fits; only a read that accumulates both overflows.
        w.compare_and_append(&[upd("k", "", 0, i64::MAX)], f(0), f(1))
            .await
            .unwrap()
            .unwrap();
        w.compare_and_append(&[upd("k", "", 1, i64::MAX)], f(1), f(2))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            r.snapshot_and_fetch(f(0)).await.unwrap(),
            vec![upd("k", "", 0, i64::MAX)]
        );
        let e = r.snapshot_and_fetch(f(1)).await;
        assert!(
            matches!(
                e,
                Err(PersistError::InvalidUsage(InvalidUsage::DiffOverflow(_)))
            ),
            "{e:?}"
        );
    })
    .unwrap();
}

#[test]
fn dropped_handles_expire_and_abandoned_ones_stay_until_their_lease_runs_out() {
    let (sim, client) = setup(11);
    let c = client.clone();
    let (w_id, r_id, abandoned_w, abandoned_r) = sim
        .block_on(async move {
            let (w, r) = c.open::<String, String>(&shard("s")).await.unwrap();
            let (aw, ar) = c.open::<String, String>(&shard("s")).await.unwrap();
            let ids = (
                w.writer_id().clone(),
                r.reader_id().clone(),
                aw.writer_id().clone(),
                ar.reader_id().clone(),
            );
            drop((w, r));
            aw.abandon();
            ar.abandon();
            ids
        })
        .unwrap();
    sim.run_for(100).unwrap();
    let c = client.clone();
    let state = sim
        .block_on(async move { c.inspect_state(&shard("s")).await.unwrap() })
        .unwrap();
    assert!(
        !state.collections.writers.contains_key(&w_id),
        "a dropped writer expires"
    );
    assert!(
        !state.collections.leased_readers.contains_key(&r_id),
        "so does a reader"
    );
    assert!(
        state.collections.writers.contains_key(&abandoned_w),
        "abandon is a crash"
    );
    assert!(state.collections.leased_readers.contains_key(&abandoned_r));
}
