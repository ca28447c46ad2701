//! Compaction keeps up with a writer committing as fast as it can: one writer appends one-update
//! batches by `compare_and_append` in a tight loop (no pause between commits) for 10,000 commits,
//! over the in-memory locations with seeded latency in the simulator, with its own background
//! maintenance (compaction, rollups, GC) racing every commit for the next seqno. After every
//! commit, the number of batches in the state it committed stays within the spine bound
//! ([`spine_bound`]: logarithmic in the updates), and at the end the contents are exactly the
//! writes.
#![cfg(not(target_arch = "wasm32"))]

use std::rc::Rc;

use persist_playground::location::mem::{Latency, MemBlob, MemConsensus};
use persist_playground::location::Location;
use persist_playground::persist::events::EventLog;
use persist_playground::persist::trace::spine_bound;
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::sim::Simulator;
use timely::progress::Antichain;

const COMMITS: u64 = 10_000;

#[test]
fn a_tight_loop_writer_stays_within_the_spine_bound() {
    let sim = Simulator::new(17);
    sim.set_record_trace(false);
    let rt = sim.runtime();
    let location = Location {
        blob: Rc::new(MemBlob::new().with_latency(Latency::new(rt.clone(), 1, 0, 3))),
        consensus: Rc::new(MemConsensus::new().with_latency(Latency::new(rt.clone(), 2, 0, 3))),
    };
    let cfg = PersistConfig::default();
    let client =
        PersistClient::new(location, rt.clone(), cfg.clone(), 17).with_events(EventLog::disabled());
    let client2 = client.clone();
    let (max_batches, max_excess, contents) = sim
        .block_on(async move {
            let shard = ShardId::new("s-spine").unwrap();
            let (mut w, mut r) = client.open::<String, ()>(&shard).await.unwrap();
            let f = Antichain::from_elem;
            let (mut max_batches, mut max_excess) = (0usize, 0i64);
            for t in 0..COMMITS {
                let u = [((format!("k{t}"), ()), t, 1i64)];
                w.compare_and_append(&u, f(t), f(t + 1))
                    .await
                    .unwrap()
                    .unwrap();
                let batches = client2
                    .cached_state(&shard)
                    .expect("the writer committed")
                    .collections
                    .trace
                    .batches()
                    .len();
                let bound = spine_bound(t + 1);
                max_batches = max_batches.max(batches);
                max_excess = max_excess.max(batches as i64 - bound as i64);
                assert!(
                    batches <= bound,
                    "after {} commits: {batches} batches, bound {bound}",
                    t + 1
                );
                if t % 100 == 99 {
                    r.downgrade_since(&f(t - 50)).await.unwrap();
                }
            }
            let contents = r.snapshot_and_fetch(f(COMMITS - 1)).await.unwrap();
            (max_batches, max_excess, contents)
        })
        .unwrap();
    println!("{COMMITS} commits: at most {max_batches} batches ({max_excess} from the bound)");
    assert_eq!(contents.len() as u64, COMMITS);
}
