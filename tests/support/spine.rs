//! The body the spine tests share (`tests/persist_spine.rs` on the simulator over memory,
//! `tests/browser_spine.rs` in Chromium over IndexedDB): one writer appends one-update batches by
//! `compare_and_append` in a tight loop (no pause between commits), its own background
//! maintenance (compaction, rollups, GC) racing every commit for the next seqno, and a reader
//! holding the since 50 times behind, moved every 100 commits. After every commit the number of
//! batches in the state it committed stays within the spine bound ([`spine_bound`]: logarithmic
//! in the updates); at the end the contents at `commits - 1` are exactly the writes.

use persist_playground::persist::trace::spine_bound;
use persist_playground::persist::{PersistClient, ShardId};
use timely::progress::Antichain;

/// What a run saw: the most batches any committed state held, and how close that came to the
/// bound (`max_excess` is at most 0: negative is room left).
pub struct SpineRun {
    pub max_batches: usize,
    pub max_excess: i64,
}

/// Runs `commits` commits on shard `s-spine` of `client` and checks the bound after each.
pub async fn tight_loop_writer(client: PersistClient, commits: u64) -> SpineRun {
    let shard = ShardId::new("s-spine").unwrap();
    let (mut w, mut r) = client.open::<String, ()>(&shard).await.unwrap();
    let f = Antichain::from_elem;
    let (mut max_batches, mut max_excess) = (0usize, i64::MIN);
    for t in 0..commits {
        let u = [((format!("k{t}"), ()), t, 1i64)];
        w.compare_and_append(&u, f(t), f(t + 1))
            .await
            .unwrap()
            .unwrap();
        let batches = client
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
    let contents = r.snapshot_and_fetch(f(commits - 1)).await.unwrap();
    assert_eq!(contents.len() as u64, commits);
    w.expire().await;
    r.expire().await;
    SpineRun {
        max_batches,
        max_excess,
    }
}
