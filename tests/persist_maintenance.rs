//! Compaction, rollups and garbage collection, end to end in the deterministic simulator over the
//! in-memory locations (with seeded latency, so maintenance tasks interleave with writes).
//!
//! Families of tests, and how each works:
//! - `maintenance_keeps_contents_and_reclaims_space`: a writer appends hundreds of batches
//!   through `compare_and_append` while a reader keeps its since a little behind the upper; the
//!   writer's background maintenance compacts, writes rollups and collects garbage on its own.
//!   Checked against a reference built from the writes: the snapshot at every `as_of` in
//!   `[since, upper)`; the trace holds far fewer batches; rollups were written; GC deleted parts
//!   and rollups and truncated Consensus; every blob the state refers to exists, with a rollup at
//!   the earliest live version; a fresh client (cold cache, so it starts from the newest rollup)
//!   reads an identical state.
//! - `two_collectors_at_once`: two collectors from two clients run concurrently (same and
//!   different targets), racing on every step; then the same checks.
//! - `abandoned_collector_then_another`: a collector's future is dropped part-way through
//!   (`runtime.timeout`) at many cut points, from before its first step to after its deletes;
//!   the shard stays consistent right after, and a second collector finishes the job: every blob
//!   left is one a live version refers to.
//! - `interrupted_gc_then_rerun_deletes_the_garbage`: a collector stops right after its truncate;
//!   a rerun with the same target finds it "already collected" and still deletes what the first
//!   one left (its ticket), so nothing leaks.
//! - `a_collection_spends_one_seqno`: listing a collection's rollup and unlisting those below
//!   the earliest version is one command.
//! - `a_routine_cycle_spends_one_seqno`: beside one writer, each routine rollup is listed by
//!   the collection that follows it, in that collection's one command (no `add_rollup`).
//! - `a_crashed_writers_part_is_swept_once_its_lease_expires`: a part written and never
//!   committed by a writer whose process crashed goes with the commit that expires its lease
//!   (not 64 seqnos later).
//! - `manual_compaction_tidies_a_trace_written_without_it`: a shard written with compaction
//!   off, then compacted by hand (`compact_now`): the spine tidies it, contents unchanged.
//! - `indeterminate_merge_res_that_committed_keeps_its_output`: every merge_res compare_and_set
//!   commits and then reports a timeout; the compactor must treat its output as referenced (an
//!   attempt may have committed) and never delete a part the state refers to.
//! - `listen_never_redelivers_compacted_updates`: a listen follows a writer whose batches are
//!   being merged under it (compacted to the listen's own since); every update arrives once.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use futures::FutureExt;
use persist_playground::location::mem::{Latency, MemBlob, MemConsensus};
use persist_playground::location::unreliable::LostAckConsensus;
use persist_playground::location::{Blob, CaSResult, Consensus, Location, SeqNo, SCAN_ALL};
use persist_playground::persist::compact::{compact_now, CompactionOutcome};
use persist_playground::persist::encoding::{decode_diff, decode_rollup};
use persist_playground::persist::events::PersistEvent;
use persist_playground::persist::gc::{gc_and_truncate, gc_now, leaked_blobs, GcReq};
use persist_playground::persist::read::ListenEvent;
use persist_playground::persist::state::State;
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::sim::Simulator;
use timely::progress::Antichain;

type Upd = ((String, ()), u64, i64);

const SHARD: &str = "s-maint";

fn f(t: u64) -> Antichain<u64> {
    Antichain::from_elem(t)
}

fn shard() -> ShardId {
    ShardId::new(SHARD).unwrap()
}

/// A simulator, a client over latency-wrapped in-memory locations, and raw handles onto the same
/// data (no latency) for the checks.
struct World {
    sim: Simulator,
    cfg: PersistConfig,
    client: PersistClient,
    blob: MemBlob,
    consensus: MemConsensus,
    location: Location,
}

fn world(seed: u64, cfg: PersistConfig) -> World {
    let sim = Simulator::new(seed);
    let rt = sim.runtime();
    let (blob, consensus) = (MemBlob::new(), MemConsensus::new());
    let location = Location {
        blob: Rc::new(blob.with_latency(Latency::new(rt.clone(), seed ^ 0xb10b, 0, 3))),
        consensus: Rc::new(consensus.with_latency(Latency::new(rt.clone(), seed ^ 0xc0, 0, 3))),
    };
    let client = PersistClient::new(location.clone(), rt, cfg.clone(), seed);
    World {
        sim,
        cfg,
        client,
        blob,
        consensus,
        location,
    }
}

fn cfg() -> PersistConfig {
    PersistConfig {
        // Small parts, so big batches span several Blob parts.
        part_max_updates: 64,
        // A rollup and a collection cycle every 16 seqnos (the default is 128), so that short
        // runs go through many cycles.
        rollup_threshold: 16,
        ..PersistConfig::default()
    }
}

/// The updates of batch `i` (at time `i`): a few updates on a small key set, so that
/// consolidation has work to do, and every 20th batch a big one that goes to Blob parts.
fn updates(i: u64) -> Vec<Upd> {
    let key = |k: u64| (format!("key-{k:03}"), ());
    if i % 20 == 7 {
        return (0..200).map(|k| (key(k % 50), i, 1)).collect();
    }
    let n = 1 + i % 3;
    (0..n)
        .map(|j| {
            (
                key((i * 7 + j) % 13),
                i,
                if (i + j) % 4 == 0 { -1 } else { 1 },
            )
        })
        .collect()
}

/// The reference: every write, accumulated to `as_of`.
fn reference(writes: &[Upd], as_of: u64) -> Vec<Upd> {
    let mut acc: BTreeMap<String, i64> = BTreeMap::new();
    for ((k, ()), t, d) in writes {
        if *t <= as_of {
            *acc.entry(k.clone()).or_default() += d;
        }
    }
    acc.into_iter()
        .filter(|(_, d)| *d != 0)
        .map(|(k, d)| ((k, ()), as_of, d))
        .collect()
}

/// Writes batches `from..to` through `compare_and_append` at `[i, i + 1)`; a reader keeps its
/// since `lag` behind the upper (and so moves its seqno hold) every 10 batches.
fn write_batches(w: &World, from: u64, to: u64, lag: u64) -> Vec<Upd> {
    let client = w.client.clone();
    w.sim
        .block_on(async move {
            let (mut write, mut read) = client.open::<String, ()>(&shard()).await.unwrap();
            let mut writes = Vec::new();
            for i in from..to {
                let batch = updates(i);
                write
                    .compare_and_append(&batch, f(i), f(i + 1))
                    .await
                    .unwrap()
                    .unwrap();
                writes.extend(batch);
                if i % 10 == 9 {
                    read.downgrade_since(&f((i + 1).saturating_sub(lag)))
                        .await
                        .unwrap();
                }
            }
            write.expire().await;
            read.expire().await;
            writes
        })
        .unwrap()
}

/// Steps the simulator until no maintenance task is left.
fn settle(sim: &Simulator) {
    sim.run_until_pred(
        || !sim.live_tasks().iter().any(|t| t.starts_with("persist: ")),
        10_000_000,
    )
    .unwrap();
}

fn blob_keys(blob: &MemBlob) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    blob.list_keys_and_metadata("", &mut |m| {
        keys.insert(m.key);
    })
    .now_or_never()
    .expect("MemBlob without latency is immediate")
    .unwrap();
    keys
}

fn versions(consensus: &MemConsensus) -> Vec<SeqNo> {
    consensus
        .scan(SHARD, SeqNo(0), SCAN_ALL)
        .now_or_never()
        .expect("MemConsensus without latency is immediate")
        .unwrap()
        .iter()
        .map(|v| v.seqno)
        .collect()
}

fn part_keys(state: &State) -> BTreeSet<String> {
    state.part_keys().map(String::from).collect()
}

fn inspect(w: &World, client: &PersistClient) -> State {
    let client = client.clone();
    w.sim
        .block_on(async move { client.inspect_state(&shard()).await.unwrap() })
        .unwrap()
}

/// The blobs no live version refers to (the leak check).
fn leaks(w: &World) -> Vec<String> {
    let client = w.client.clone();
    w.sim
        .block_on(async move { leaked_blobs(&client, &shard()).await.unwrap() })
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect()
}

/// No live version (not only the newest) refers to a missing blob: replays every stored version
/// from the rollup at the earliest one, straight from the raw storage.
fn check_no_dangling(w: &World, state: &State) {
    let stored = w
        .consensus
        .scan(SHARD, SeqNo(0), SCAN_ALL)
        .now_or_never()
        .unwrap()
        .unwrap();
    let keys = blob_keys(&w.blob);
    let earliest = stored[0].seqno;
    let rollup = &state.collections.rollups[&earliest];
    let bytes = w
        .blob
        .get(&rollup.key)
        .now_or_never()
        .unwrap()
        .unwrap()
        .unwrap();
    let mut replay = decode_rollup(&bytes).unwrap();
    for version in stored.iter().skip(1) {
        let refs = replay
            .part_keys()
            .map(String::from)
            .chain(replay.collections.rollups.values().map(|r| r.key.clone()));
        for key in refs {
            assert!(
                keys.contains(&key),
                "live version {} refers to a deleted {key}",
                replay.seqno
            );
        }
        decode_diff(&version.data)
            .unwrap()
            .apply(&mut replay)
            .unwrap();
    }
    assert_eq!(&replay, state);
}

/// The storage invariants: every blob the current state refers to exists; a rollup is listed
/// at the earliest live version, and exists; the versions are contiguous up to the state.
fn check_storage(w: &World, state: &State) {
    let keys = blob_keys(&w.blob);
    for key in part_keys(state) {
        assert!(keys.contains(&key), "part {key} is referenced but missing");
    }
    for (seqno, r) in &state.collections.rollups {
        assert!(
            keys.contains(&r.key),
            "rollup {seqno} ({}) is missing",
            r.key
        );
    }
    let live = versions(&w.consensus);
    let earliest = live[0];
    assert!(
        state.collections.rollups.contains_key(&earliest),
        "no rollup at the earliest live version {earliest}"
    );
    assert_eq!(live.last(), Some(&state.seqno));
    assert_eq!(live.len() as u64, state.seqno.0 - earliest.0 + 1);
    check_no_dangling(w, state);
}

/// A fresh client (cold cache: it starts from the newest rollup) reads the same state, and its
/// snapshots at every readable time equal the reference. Returns the state after the maintenance
/// the reads themselves started has settled.
fn check_fresh_client(w: &World, writes: &[Upd], seed: u64) -> State {
    let state = inspect(w, &w.client);
    let fresh = PersistClient::new(w.location.clone(), w.sim.runtime(), w.cfg.clone(), seed);
    let cold = inspect(w, &fresh);
    assert_eq!(cold, state, "a fresh client reads an identical state");
    let since = state.since()[0];
    let upper = state.upper()[0];
    let writes = writes.to_vec();
    let fresh2 = fresh.clone();
    w.sim
        .block_on(async move {
            let mut read = fresh2
                .open_leased_reader::<String, ()>(&shard())
                .await
                .unwrap();
            for as_of in since..upper {
                let snap = read.snapshot_and_fetch(f(as_of)).await.unwrap();
                assert_eq!(snap, reference(&writes, as_of), "snapshot at {as_of}");
            }
            read.expire().await;
        })
        .unwrap();
    settle(&w.sim);
    inspect(w, &w.client)
}

fn count(events: &[PersistEvent], pred: impl Fn(&PersistEvent) -> bool) -> usize {
    events.iter().filter(|e| pred(e)).count()
}

fn deleted(events: &[PersistEvent], of_kind: &str) -> usize {
    events
        .iter()
        .map(|e| match e {
            PersistEvent::BlobsDeleted { kind, keys, .. } if kind == of_kind => keys.len(),
            _ => 0,
        })
        .sum()
}

#[test]
fn maintenance_keeps_contents_and_reclaims_space() {
    const BATCHES: u64 = 400;
    let w = world(11, cfg());
    let writes = write_batches(&w, 0, BATCHES, 30);
    settle(&w.sim);
    let events = w.client.events().events();
    let state = check_fresh_client(&w, &writes, 99);
    check_storage(&w, &state);

    // Compaction: far fewer batches than appends, consolidated to the since.
    let batches = state.collections.trace.batches().len();
    let compactions = count(&events, |e| {
        matches!(e, PersistEvent::CompactionApplied { .. })
    });
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for e in &events {
        match e {
            PersistEvent::CompactionApplied { result, .. } => {
                *outcomes.entry(result.clone()).or_default() += 1
            }
            PersistEvent::CompactionNotApplied { reason, .. } => {
                *outcomes.entry(reason.clone()).or_default() += 1
            }
            _ => {}
        }
    }
    println!("{BATCHES} appends -> {batches} batches; compactions: {outcomes:?}");
    assert!(compactions > 0);
    assert!(batches <= 20, "{batches} batches");
    assert!(
        state.since()[0] >= BATCHES - 40,
        "the reader moved the since"
    );
    let updates_in_state: u64 = state
        .collections
        .trace
        .batches()
        .iter()
        .map(|b| b.len)
        .sum();
    assert!(
        updates_in_state < writes.len() as u64 / 4,
        "{updates_in_state} updates left of {} written",
        writes.len()
    );

    // Rollups: written routinely and listed; the newest is recent.
    let rollups_added = count(&events, |e| {
        matches!(e, PersistEvent::RollupAdded { added: true, .. })
    });
    assert!(rollups_added > 10, "{rollups_added} rollups");
    let (newest, _) = state.latest_rollup().unwrap();
    assert!(newest.0 + 3 * 16 >= state.seqno.0);

    // GC: parts and rollups deleted, Consensus truncated, and the space is actually back.
    let live = versions(&w.consensus);
    let parts_deleted = deleted(&events, "part");
    let rollups_deleted = deleted(&events, "rollup");
    let truncations = count(
        &events,
        |e| matches!(e, PersistEvent::ConsensusTruncated { deleted, .. } if *deleted > 0),
    );
    let keys = blob_keys(&w.blob);
    println!(
        "GC: {parts_deleted} parts and {rollups_deleted} rollups deleted, {truncations} truncations; \
         {} of {} versions live (earliest {}); {} blobs left",
        live.len(),
        state.seqno.0,
        live[0],
        keys.len()
    );
    assert!(parts_deleted > 0 && rollups_deleted > 0 && truncations > 0);
    assert!(live[0] > SeqNo(1), "Consensus was truncated");
    assert!(live.len() < 100, "{} live versions", live.len());
    // Nothing leaked (no write was cancelled, no collector died): every blob left is one a live
    // version refers to (unlisted rollups wait for the next collection to pass their unlisting).
    assert_eq!(leaks(&w), Vec::<String>::new());
    let part_blobs: BTreeSet<String> = keys
        .iter()
        .filter(|k| !k.contains("/rollup/"))
        .cloned()
        .collect();
    let referenced = part_keys(&state);
    assert!(part_blobs.is_superset(&referenced));
    println!(
        "{} part blobs, {} referenced by the head (the rest awaits the next GC)",
        part_blobs.len(),
        referenced.len()
    );
    // One more collection, by hand, up to the head: exactly the referenced parts remain.
    let client = w.client.clone();
    let report = w
        .sim
        .block_on(async move { gc_now(&client, &shard()).await.unwrap() })
        .unwrap();
    assert_eq!(report.skipped, None);
    let state = inspect(&w, &w.client);
    check_storage(&w, &state);
    let parts_left: BTreeSet<String> = blob_keys(&w.blob)
        .into_iter()
        .filter(|k| !k.contains("/rollup/"))
        .collect();
    assert_eq!(parts_left, part_keys(&state));
}

#[test]
fn two_collectors_at_once() {
    for seed in 0..8u64 {
        let cfg = PersistConfig {
            gc_enabled: false,
            ..cfg()
        };
        let w = world(100 + seed, cfg.clone());
        let writes = write_batches(&w, 0, 160, 20);
        settle(&w.sim);
        let head = inspect(&w, &w.client).seqno;
        let other = PersistClient::new(w.location.clone(), w.sim.runtime(), cfg, 500 + seed);
        let (a, b) = (w.client.clone(), other.clone());
        // Seeds alternate between equal targets and a smaller one racing a larger one.
        let target_b = if seed % 2 == 0 {
            head
        } else {
            SeqNo(head.0 / 2)
        };
        let rt = w.sim.runtime();
        let (ra, rb) = w
            .sim
            .block_on(async move {
                let req_a = GcReq {
                    old_seqno_since: SeqNo(0),
                    new_seqno_since: head,
                };
                let ga = rt.spawn("gc a", async move {
                    gc_and_truncate(&a, &shard(), req_a).await.unwrap()
                });
                let req = GcReq {
                    old_seqno_since: SeqNo(0),
                    new_seqno_since: target_b,
                };
                let gb = rt.spawn("gc b", async move {
                    gc_and_truncate(&b, &shard(), req).await.unwrap()
                });
                (ga.await, gb.await)
            })
            .unwrap();
        assert_eq!(ra.new_seqno_since, head);
        assert!(ra.versions_truncated.is_some() || rb.versions_truncated.is_some());
        let state = check_fresh_client(&w, &writes, 900 + seed);
        check_storage(&w, &state);
        assert_eq!(
            versions(&w.consensus)[0],
            head,
            "truncated to the larger target (a: {:?} / b: {:?})",
            ra.skipped,
            rb.skipped
        );
        let parts_left = blob_keys(&w.blob)
            .into_iter()
            .filter(|k| !k.contains("/rollup/"))
            .count();
        assert_eq!(
            parts_left,
            part_keys(&state).len(),
            "no garbage part is left"
        );
    }
}

#[test]
fn abandoned_collector_then_another() {
    let cuts_ms = [0, 2, 5, 10, 20, 40, 80, 160, 320, 640, 1_280, 10_000];
    let (mut died_before_truncating, mut died_after_truncating, mut finished) = (0, 0, 0);
    for (i, cut_ms) in cuts_ms.into_iter().enumerate() {
        let cfg = PersistConfig {
            gc_enabled: false,
            // Every batch in Blob: plenty of garbage, so the deletes take a while.
            inline_writes_single_max_bytes: 0,
            ..cfg()
        };
        let w = world(200 + i as u64, cfg);
        let writes = write_batches(&w, 0, 120, 10);
        settle(&w.sim);
        let before = inspect(&w, &w.client);
        let blobs_before = blob_keys(&w.blob);
        let earliest_before = versions(&w.consensus)[0];
        let (client, rt) = (w.client.clone(), w.sim.runtime());
        let abandoned = w
            .sim
            .block_on(async move { rt.timeout(cut_ms, gc_now(&client, &shard())).await })
            .unwrap();
        let truncated = versions(&w.consensus)[0] > earliest_before;
        let gone = blobs_before.difference(&blob_keys(&w.blob)).count();
        // SUBTLE: deletes come after the truncate, so a collector that died before truncating
        // deleted nothing; one that died after may leave blobs only dead versions referred to.
        let leaked_now = leaks(&w);
        match (&abandoned, truncated) {
            (Ok(_), _) => {
                finished += 1;
                assert_eq!(leaked_now, Vec::<String>::new());
            }
            (Err(_), false) => {
                died_before_truncating += 1;
                assert_eq!(gone, 0, "cut at {cut_ms} ms: deletes before the truncate");
            }
            (Err(_), true) => died_after_truncating += 1,
        }
        // Right after the collector died, the shard is consistent.
        let state = inspect(&w, &w.client);
        check_storage(&w, &state);
        assert_eq!(state.collections.trace, before.collections.trace);
        // A second collector finishes the job; what the first left undeleted after its
        // truncate is a leak, and the leak check lists exactly it.
        let client = w.client.clone();
        let report = w
            .sim
            .block_on(async move { gc_now(&client, &shard()).await.unwrap() })
            .unwrap();
        assert_eq!(
            versions(&w.consensus)[0],
            report.new_seqno_since,
            "{report:?}"
        );
        let state = check_fresh_client(&w, &writes, 700 + i as u64);
        check_storage(&w, &state);
        let leaked = leaks(&w);
        let parts_left = blob_keys(&w.blob)
            .into_iter()
            .filter(|k| !k.contains("/rollup/"))
            .count();
        // What may remain is a rollup the first one wrote and never listed, at or above the
        // oldest listed one (it could still have been listed): swept once a later collection
        // moves the oldest listed rollup past it.
        assert!(
            leaked.iter().all(|k| k.contains("/rollup/")),
            "cut at {cut_ms} ms: the second collector left {leaked:?}"
        );
        assert_eq!(parts_left, part_keys(&state).len(), "cut at {cut_ms} ms");
        if !leaked.is_empty() {
            let client = w.client.clone();
            w.sim
                .block_on(async move { gc_now(&client, &shard()).await.unwrap() })
                .unwrap();
            settle(&w.sim);
            assert_eq!(leaks(&w), Vec::<String>::new(), "cut at {cut_ms} ms");
        }
    }
    println!(
        "abandoned collectors: {died_before_truncating} before truncating, \
         {died_after_truncating} after truncating (their undeleted blobs leak), {finished} finished"
    );
    assert!(died_before_truncating > 0 && died_after_truncating > 0 && finished > 0);
}

#[test]
fn manual_compaction_tidies_a_trace_written_without_it() {
    let cfg = PersistConfig {
        compaction_enabled: false,
        ..cfg()
    };
    let w = world(3, cfg);
    let writes = write_batches(&w, 0, 100, 5);
    settle(&w.sim);
    let before = inspect(&w, &w.client);
    assert_eq!(before.collections.trace.batches().len(), 100);
    let client = w.client.clone();
    let outcomes = w
        .sim
        .block_on(async move { compact_now(&client, &shard()).await.unwrap() })
        .unwrap();
    assert!(!outcomes.is_empty());
    assert!(outcomes
        .iter()
        .all(|o| matches!(o, CompactionOutcome::Applied(_))));
    // The merges' commits queued maintenance (rollups, GC): let it finish before comparing.
    settle(&w.sim);
    let after = check_fresh_client(&w, &writes, 77);
    let trace = &after.collections.trace;
    assert!(trace.merge_reqs().is_empty(), "tidy");
    assert!(
        trace.batches().len() < 10,
        "{} batches",
        trace.batches().len()
    );
    check_storage(&w, &after);
}

#[test]
fn listen_never_redelivers_compacted_updates() {
    for seed in 0..10u64 {
        let w = world(300 + seed, cfg());
        let client = w.client.clone();
        let got = w
            .sim
            .block_on(async move {
                let (mut write, read) = client.open::<String, ()>(&shard()).await.unwrap();
                let mut listen = read.listen(f(0)).await.unwrap();
                let writer = client.runtime().spawn("writer", async move {
                    for i in 0..100u64 {
                        let key = (format!("k{i:03}"), ());
                        write
                            .compare_and_append(&[(key, i, 1)], f(i), f(i + 1))
                            .await
                            .unwrap()
                            .unwrap();
                    }
                    write.expire().await;
                });
                let mut got = Vec::new();
                while listen.frontier() != &f(100) {
                    for event in listen.next().await.unwrap() {
                        if let ListenEvent::Updates(updates) = event {
                            got.extend(updates);
                        }
                    }
                }
                writer.await;
                listen.expire().await;
                got
            })
            .unwrap();
        let mut got: Vec<(String, u64, i64)> =
            got.into_iter().map(|((k, ()), t, d)| (k, t, d)).collect();
        got.sort();
        let expected: Vec<(String, u64, i64)> =
            (1..100u64).map(|i| (format!("k{i:03}"), i, 1)).collect();
        assert_eq!(
            got, expected,
            "seed {seed}: each update exactly once, at its own time"
        );
        let events = w.client.events().events();
        assert!(
            count(&events, |e| matches!(
                e,
                PersistEvent::CompactionApplied { .. }
            )) > 0
        );
    }
}

#[test]
fn indeterminate_merge_res_that_committed_keeps_its_output() {
    let cfg = PersistConfig {
        // Outputs in Blob, so a wrong delete would leave state pointing at nothing.
        inline_writes_single_max_bytes: 0,
        gc_enabled: false,
        // Every merge commits on its own (none waits for an append to carry it), so that its
        // own compare_and_sets are the ones that lose their acknowledgement.
        compaction_carry_wait_ms: 0,
        ..cfg()
    };
    let mut w = world(42, cfg.clone());
    // Compare_and_sets of merge results (a version that changes batches but not the upper)
    // happen, then report a timeout.
    let lossy = Rc::new(LostAckConsensus::new(
        Rc::clone(&w.location.consensus),
        |new, result| {
            let is_merge = decode_diff(&new.data)
                .map(|d| d.upper.is_none() && !d.batches.is_empty())
                .unwrap_or(false);
            is_merge && *result == Ok(CaSResult::Committed)
        },
    ));
    w.location.consensus = lossy.clone();
    w.client = PersistClient::new(w.location.clone(), w.sim.runtime(), cfg, 42);
    let writes = write_batches(&w, 0, 150, 5);
    settle(&w.sim);
    let events = w.client.events().events();
    let applied = count(&events, |e| {
        matches!(e, PersistEvent::CompactionApplied { .. })
    });
    let kept = count(
        &events,
        |e| matches!(e, PersistEvent::CompactionNotApplied { reason, .. } if reason.contains("kept")),
    );
    println!(
        "{} merge acks lost: {applied} compactions found applied, {kept} kept as maybe applied",
        lossy.lost()
    );
    // Every merge_res that committed was retried after its lost ack, and none of them deleted
    // its output: each one is found applied, or kept because it may have been. (A merge whose
    // own compare_and_set lost to an append was carried by that append: applied, no ack lost.)
    assert!(lossy.lost() > 5);
    assert!(applied + kept >= lossy.lost() as usize);
    let state = check_fresh_client(&w, &writes, 4242);
    check_storage(&w, &state);
}

/// A Consensus whose truncates, while `cut` is set, happen and then never return: the collector
/// that made one stops right after its truncate (its future is dropped by a timeout), before its
/// deletes.
struct CutAfterTruncate {
    inner: Rc<dyn Consensus>,
    cut: Rc<std::cell::Cell<bool>>,
}

#[async_trait::async_trait(?Send)]
impl Consensus for CutAfterTruncate {
    async fn head(
        &self,
        key: &str,
    ) -> Result<
        Option<persist_playground::location::VersionedData>,
        persist_playground::location::ExternalError,
    > {
        self.inner.head(key).await
    }
    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: persist_playground::location::VersionedData,
    ) -> Result<CaSResult, persist_playground::location::ExternalError> {
        self.inner.compare_and_set(key, expected, new).await
    }
    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<
        Vec<persist_playground::location::VersionedData>,
        persist_playground::location::ExternalError,
    > {
        self.inner.scan(key, from, limit).await
    }
    async fn truncate(
        &self,
        key: &str,
        seqno: SeqNo,
    ) -> Result<usize, persist_playground::location::ExternalError> {
        let r = self.inner.truncate(key, seqno).await;
        if self.cut.get() {
            futures::future::pending::<()>().await;
        }
        r
    }
    async fn list_keys(&self) -> Result<Vec<String>, persist_playground::location::ExternalError> {
        self.inner.list_keys().await
    }
}

/// A world whose Consensus cuts collectors after their truncate while the returned flag is set.
fn world_with_cut(seed: u64, cfg: PersistConfig) -> (World, Rc<std::cell::Cell<bool>>) {
    let mut w = world(seed, cfg);
    let cut = Rc::new(std::cell::Cell::new(false));
    w.location = Location {
        blob: Rc::clone(&w.location.blob),
        consensus: Rc::new(CutAfterTruncate {
            inner: Rc::clone(&w.location.consensus),
            cut: Rc::clone(&cut),
        }),
    };
    w.client = PersistClient::new(w.location.clone(), w.sim.runtime(), w.cfg.clone(), seed);
    (w, cut)
}

/// Regression: a collector that died between its truncate and its deletes leaves garbage that
/// the next collection with the same target (which finds the work "already collected") still
/// deletes, from the ticket the first one wrote before truncating.
#[test]
fn interrupted_gc_then_rerun_deletes_the_garbage() {
    let cfg = PersistConfig {
        gc_enabled: false,
        // Every batch in Blob, and compaction merging them: plenty of garbage below the head.
        inline_writes_single_max_bytes: 0,
        compaction_min_inputs: 2,
        ..cfg()
    };
    let (w, cut) = world_with_cut(31, cfg);
    let writes = write_batches(&w, 0, 60, 5);
    settle(&w.sim);
    let state = inspect(&w, &w.client);
    let req = GcReq {
        old_seqno_since: state.collections.last_gc_req,
        new_seqno_since: state.collections.seqno_since(state.seqno),
    };
    assert!(
        leaks(&w).is_empty(),
        "nothing unreferenced before collecting"
    );

    // The first collector truncates, then dies before deleting anything.
    cut.set(true);
    let (client, rt) = (w.client.clone(), w.sim.runtime());
    let first = w
        .sim
        .block_on(async move {
            rt.timeout(10_000, gc_and_truncate(&client, &shard(), req))
                .await
        })
        .unwrap();
    assert!(first.is_err(), "the first collector was cut: {first:?}");
    cut.set(false);
    assert_eq!(
        versions(&w.consensus)[0],
        req.new_seqno_since,
        "it truncated"
    );
    let garbage: Vec<String> = leaks(&w)
        .into_iter()
        .filter(|k| !k.contains("/gc/"))
        .collect();
    assert!(
        garbage.iter().any(|k| !k.contains("/rollup/")),
        "it left garbage parts: {garbage:?}"
    );

    // The rerun, with the same target: already collected, and yet it deletes the garbage.
    let client = w.client.clone();
    let rerun = w
        .sim
        .block_on(async move { gc_and_truncate(&client, &shard(), req).await.unwrap() })
        .unwrap();
    assert!(
        rerun
            .skipped
            .as_deref()
            .is_some_and(|r| r.contains("already collected")),
        "{rerun:?}"
    );
    assert_eq!(rerun.unfinished_deleted, garbage.len(), "{rerun:?}");
    let blobs = blob_keys(&w.blob);
    for key in &garbage {
        assert!(!blobs.contains(key), "{key} is still there");
    }
    assert!(
        !blobs.iter().any(|k| k.contains("/gc/")),
        "the ticket is gone too"
    );
    assert!(leaks(&w).is_empty(), "nothing leaks: {:?}", leaks(&w));
    let state = check_fresh_client(&w, &writes, 77);
    check_storage(&w, &state);
}

/// Regression: one collection is one state transition. Listing the collection's rollup and
/// unlisting the rollups below the earliest live version spend one seqno together.
#[test]
fn a_collection_spends_one_seqno() {
    let cfg = PersistConfig {
        gc_enabled: false,
        ..cfg()
    };
    let w = world(32, cfg);
    let mut writes = write_batches(&w, 0, 80, 5);
    settle(&w.sim);
    let client = w.client.clone();
    let first = w
        .sim
        .block_on(async move { gc_now(&client, &shard()).await.unwrap() })
        .unwrap();
    assert!(first.versions_truncated.is_some_and(|n| n > 0), "{first:?}");
    writes.extend(write_batches(&w, 80, 160, 5));
    settle(&w.sim);
    let before = inspect(&w, &w.client);
    let listed_below: usize = before
        .collections
        .rollups
        .range(..versions(&w.consensus)[0])
        .count();
    assert!(
        listed_below > 0,
        "rollups are listed below the earliest version"
    );
    let events_before = w.client.events().events().len();
    let client = w.client.clone();
    let report = w
        .sim
        .block_on(async move { gc_now(&client, &shard()).await.unwrap() })
        .unwrap();
    let after = inspect(&w, &w.client);
    assert_eq!(after.seqno, before.seqno.next(), "one seqno: {report:?}");
    assert_eq!(report.rollups_unlisted, listed_below, "{report:?}");
    assert!(
        report.versions_truncated.is_some_and(|n| n > 0),
        "{report:?}"
    );
    assert!(after
        .collections
        .rollups
        .contains_key(&report.new_seqno_since));
    let commands: Vec<String> = w.client.events().events()[events_before..]
        .iter()
        .filter_map(|e| match e {
            PersistEvent::Command {
                cmd,
                outcome: persist_playground::persist::events::CasOutcome::Committed,
                ..
            } => Some(cmd.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(commands, ["add_and_remove_rollups"]);
    let state = check_fresh_client(&w, &writes, 78);
    check_storage(&w, &state);
}

#[test]
fn a_routine_cycle_spends_one_seqno() {
    // Goal: routine maintenance spends one seqno per rollup cycle. Method: one writer, no
    // reader, 300 one-update appends with compaction off (rollups every 16 seqnos, GC on); count
    // the committed commands by name once maintenance has settled.
    let cfg = PersistConfig {
        compaction_enabled: false,
        ..cfg()
    };
    let w = world(41, cfg);
    let client = w.client.clone();
    w.sim
        .block_on(async move {
            let mut write = client.open_writer::<String, ()>(&shard()).await.unwrap();
            for i in 0..300u64 {
                let u = [((format!("k{i}"), ()), i, 1i64)];
                write
                    .compare_and_append(&u, f(i), f(i + 1))
                    .await
                    .unwrap()
                    .unwrap();
            }
            write.expire().await;
        })
        .unwrap();
    settle(&w.sim);
    let events = w.client.events().events();
    let committed = |name: &str| {
        count(&events, |e| {
            matches!(e, PersistEvent::Command {
                cmd,
                outcome: persist_playground::persist::events::CasOutcome::Committed,
                ..
            } if cmd == name)
        })
    };
    let (collections, alone) = (committed("add_and_remove_rollups"), committed("add_rollup"));
    let truncates = count(
        &events,
        |e| matches!(e, PersistEvent::ConsensusTruncated { deleted, .. } if *deleted > 0),
    );
    // Rollups every 16 seqnos, stretched as the state grows (300 inline batches).
    assert!(collections >= 5, "{collections} collections");
    assert_eq!(alone, 0, "every rollup listed by a collection");
    assert!(
        truncates >= collections,
        "{truncates} truncates, {collections} collections"
    );
    let state = inspect(&w, &w.client);
    assert!(
        state.seqno.0 <= 300 + collections as u64 + 4,
        "seqno {} for 300 appends and {collections} collections",
        state.seqno
    );
    assert!(leaks(&w).is_empty(), "{:?}", leaks(&w));
}

#[test]
fn a_crashed_writers_part_is_swept_once_its_lease_expires() {
    // Goal: a crashed writer's uncommitted part goes as soon as its lease has run out. Method:
    // writer A writes a batch to Blob parts and crashes (abandoned: never expired, never
    // committed); writer B appends every second of virtual time past A's lease; the part must
    // be gone right after the version that expires A, and the sweep says whose it was.
    let cfg = PersistConfig {
        writer_lease_duration_ms: 5_000,
        ..cfg()
    };
    let w = world(43, cfg);
    let (client, rt, blob) = (w.client.clone(), w.sim.runtime(), w.blob.clone());
    let (part_keys, deleted_after_ms, expired_at_ms) = w
        .sim
        .block_on(async move {
            let a = client.open_writer::<String, ()>(&shard()).await.unwrap();
            let big: Vec<Upd> = (0..200).map(|k| ((format!("k{k:03}"), ()), 0, 1)).collect();
            let before = blob_keys(&blob);
            let batch = a.batch(&big, f(0), f(1)).await.unwrap();
            let keys: Vec<String> = blob_keys(&blob).difference(&before).cloned().collect();
            std::mem::forget(batch);
            a.abandon();
            let mut b = client.open_writer::<String, ()>(&shard()).await.unwrap();
            let mut expired_at = None;
            for i in 0..20u64 {
                let u = [((format!("b{i}"), ()), i, 1i64)];
                b.compare_and_append(&u, f(i), f(i + 1))
                    .await
                    .unwrap()
                    .unwrap();
                let writers = client
                    .inspect_state(&shard())
                    .await
                    .unwrap()
                    .collections
                    .writers
                    .len();
                if writers == 1 && expired_at.is_none() {
                    expired_at = Some(rt.now_ms());
                }
                rt.sleep(1_000).await;
            }
            (keys, rt.now_ms(), expired_at)
        })
        .unwrap();
    assert!(!part_keys.is_empty(), "the batch went to Blob parts");
    let expired_at_ms = expired_at_ms.expect("A's lease ran out");
    let events = w.client.events().events();
    let swept: Vec<(u64, Vec<String>)> = events
        .iter()
        .filter_map(|e| match e {
            PersistEvent::BlobsDeleted {
                kind, keys, at_ms, ..
            } if kind == persist_playground::persist::gc::SWEPT_PARTS => {
                Some((*at_ms, keys.clone()))
            }
            _ => None,
        })
        .collect();
    let (at_ms, keys) = swept
        .first()
        .cloned()
        .expect("a sweep of parts of expired writers");
    for key in &part_keys {
        assert!(keys.contains(key), "{key} swept: {keys:?}");
        assert!(!blob_keys(&w.blob).contains(key), "{key} gone");
    }
    assert!(
        at_ms <= expired_at_ms + 1_000,
        "swept at {at_ms} ms, A expired by {expired_at_ms} ms (run ended at {deleted_after_ms} ms)"
    );
}
