//! The real backends (issue 18), under the tokio runtime: the Consensus suite on PostgreSQL, the
//! Blob suite on `file://` and on the S3 emulator, the oracle suite over PostgreSQL, persist
//! end to end on both, and seeded fault runs over the unreliable decorator.
//!
//! Needs the services of `scripts/services.sh` (each test fails naming the missing variable) and
//! the `native-services` feature; `scripts/test.sh`'s native-backends layer runs it.
#![cfg(not(target_arch = "wasm32"))]

#[path = "support/native.rs"]
mod native;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use native::{block_on, fresh_database, fresh_s3_url, TempDir};
use persist_playground::location::conformance::{blob_impl_test, consensus_impl_test};
use persist_playground::location::object_store::ObjectStoreBlob;
use persist_playground::location::postgres::PostgresConsensus;
use persist_playground::location::unreliable::{
    UnreliableBlob, UnreliableConsensus, UnreliableHandle,
};
use persist_playground::location::url::{open_blob, open_consensus};
use persist_playground::location::{Blob, Consensus, Location};
use persist_playground::oracle::conformance::timestamp_oracle_impl_test;
use persist_playground::oracle::{DurableOracleConfig, DurableTimestampOracle, TimestampOracle};
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use timely::progress::Antichain;

fn f(t: u64) -> Antichain<u64> {
    Antichain::from_elem(t)
}

#[test]
fn consensus_conformance_on_postgres() {
    let url = fresh_database("conformance");
    block_on(|rt| async move {
        consensus_impl_test(|| {
            let (url, rt) = (url.clone(), rt.clone());
            async move {
                let c = PostgresConsensus::open(&url, rt)
                    .await
                    .map_err(|e| panic!("open: {e}"))
                    .unwrap();
                Ok(Rc::new(c) as Rc<dyn Consensus>)
            }
        })
        .await
        .unwrap();
    });
}

#[test]
fn blob_conformance_on_file() {
    let dir = TempDir::new("blob");
    let url = dir.url();
    block_on(|_rt| async move {
        blob_impl_test(|| {
            let url = url.clone();
            async move { Ok(Rc::new(ObjectStoreBlob::open(&url).await.unwrap()) as Rc<dyn Blob>) }
        })
        .await
        .unwrap();
    });
}

#[test]
fn blob_conformance_on_s3_emulator() {
    let url = fresh_s3_url("blob");
    block_on(|_rt| async move {
        blob_impl_test(|| {
            let url = url.clone();
            async move { Ok(Rc::new(ObjectStoreBlob::open(&url).await.unwrap()) as Rc<dyn Blob>) }
        })
        .await
        .unwrap();
    });
}

#[test]
fn oracle_conformance_over_postgres() {
    let url = fresh_database("oracle");
    block_on(|rt| async move {
        let consensus: Rc<dyn Consensus> =
            Rc::new(PostgresConsensus::open(&url, rt.clone()).await.unwrap());
        timestamp_oracle_impl_test(|timeline, now, initially| {
            let (consensus, rt) = (consensus.clone(), rt.clone());
            async move {
                let config = DurableOracleConfig::new(timeline).persist_interval_ms(3);
                let oracle =
                    DurableTimestampOracle::open(consensus, rt, now, initially, config).await?;
                Ok(Rc::new(oracle) as Rc<dyn TimestampOracle>)
            }
        })
        .await
        .unwrap();
    });
}

/// Two clients (as two processes would be) race compare_and_append on one shard; a third reads
/// it back. Every acknowledged write is there once.
fn persist_end_to_end(consensus_url: String, blob_url: String) {
    block_on(|rt| async move {
        let open = || async {
            Location {
                blob: open_blob(&blob_url).await.unwrap(),
                consensus: open_consensus(&consensus_url, &rt).await.unwrap(),
            }
        };
        let shard = ShardId::new("s-e2e").unwrap();
        let mut acked = Vec::new();
        let clients: Vec<PersistClient> = vec![
            PersistClient::new(open().await, rt.clone(), PersistConfig::default(), 1),
            PersistClient::new(open().await, rt.clone(), PersistConfig::default(), 2),
        ];
        let mut writers = Vec::new();
        for c in &clients {
            writers.push(c.open_writer::<String, String>(&shard).await.unwrap());
        }
        let mut mismatches = 0;
        for i in 0..40u64 {
            let w = &mut writers[(i % 2) as usize];
            let lower = w.upper().as_option().copied().unwrap();
            let upd = vec![((format!("k{i}"), format!("w{}", i % 2)), lower, 1i64)];
            match w
                .compare_and_append(&upd, f(lower), f(lower + 1))
                .await
                .unwrap()
            {
                Ok(()) => acked.push(upd[0].clone()),
                Err(_) => mismatches += 1,
            }
        }
        assert!(
            mismatches > 0,
            "the two writers raced (each learns the other's upper)"
        );
        let reader_client =
            PersistClient::new(open().await, rt.clone(), PersistConfig::default(), 3);
        let mut read = reader_client
            .open_leased_reader::<String, String>(&shard)
            .await
            .unwrap();
        let upper = writers[0].fetch_recent_upper().await.unwrap().clone();
        let as_of = upper.as_option().unwrap() - 1;
        let mut got = read.snapshot_and_fetch(f(as_of)).await.unwrap();
        got.sort();
        let mut want: Vec<_> = acked
            .into_iter()
            .map(|((k, v), _, d)| ((k, v), as_of, d))
            .collect();
        want.sort();
        assert_eq!(got, want, "exactly the acknowledged writes, once each");
        read.expire().await;
        for w in writers {
            w.expire().await;
        }
    });
}

#[test]
fn persist_on_postgres_and_file() {
    let dir = TempDir::new("e2e");
    persist_end_to_end(fresh_database("e2e_file"), dir.url());
}

#[test]
fn persist_on_postgres_and_s3_emulator() {
    persist_end_to_end(fresh_database("e2e_s3"), fresh_s3_url("e2e"));
}

/// What the seeded fault runs exercised, across seeds.
#[derive(Default, Debug)]
struct FaultTotals {
    faults: u64,
    happened_then_timed_out: u64,
    committed: u64,
    mismatches: u64,
    timed_out_calls: u64,
}

/// One seed: two writers (two clients, each behind its own seeded fault decorator over the real
/// backends) race compare_and_append; each call is bounded by the runtime's timeout. Then, with
/// the faults off, the shard must hold every acknowledged write exactly once, nothing but
/// acknowledged or in-flight (timed-out) writes, and a gap-free chain of versions.
async fn fault_run(
    rt: &persist_playground::runtime::Runtime,
    seed: u64,
    pg: &Rc<dyn Consensus>,
    blob: &Rc<dyn Blob>,
    totals: &RefCell<FaultTotals>,
) -> Vec<String> {
    let shard = ShardId::new(&format!("s-fault-{seed}")).unwrap();
    let mut violations = Vec::new();
    let cfg = PersistConfig {
        backoff_min_ms: 1,
        backoff_max_ms: 8,
        ..PersistConfig::default()
    };
    let handles: Vec<UnreliableHandle> = (0..2)
        .map(|i| UnreliableHandle::new(seed * 10 + i, 0.9, 0.1))
        .collect();
    let clients: Vec<PersistClient> = handles
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let location = Location {
                blob: Rc::new(UnreliableBlob::new(blob.clone(), h.clone())),
                consensus: Rc::new(UnreliableConsensus::new(pg.clone(), h.clone())),
            };
            PersistClient::new(location, rt.clone(), cfg.clone(), seed * 100 + i as u64)
        })
        .collect();
    let mut acked: BTreeMap<String, ()> = BTreeMap::new();
    let mut in_flight: BTreeMap<String, ()> = BTreeMap::new();
    let mut writers = Vec::new();
    for c in &clients {
        loop {
            match rt.timeout(5_000, c.open_writer::<String, ()>(&shard)).await {
                Ok(Ok(w)) => {
                    writers.push(w);
                    break;
                }
                Ok(Err(e)) => panic!("seed {seed}: open_writer: {e}"),
                Err(_) => totals.borrow_mut().timed_out_calls += 1,
            }
        }
    }
    // Three rounds; in each, both writers attempt at once (their calls interleave on the
    // database), so one of them loses the race unless a fault delayed the other.
    for round in 0..3u64 {
        let results = {
            let (a, b) = writers.split_at_mut(1);
            let attempts = [(0usize, &mut a[0]), (1usize, &mut b[0])].map(|(i, w)| {
                let key = format!("seed{seed}-r{round}-w{i}");
                let rt = rt.clone();
                async move {
                    let lower = w.upper().as_option().copied().unwrap_or(0);
                    let upd = vec![((key.clone(), ()), lower, 1i64)];
                    let out = rt
                        .timeout(2_000, w.compare_and_append(&upd, f(lower), f(lower + 1)))
                        .await;
                    (i, key, out)
                }
            });
            let [x, y] = attempts;
            let (rx, ry) = futures::join!(x, y);
            [rx, ry]
        };
        let mut timed_out = Vec::new();
        for (i, key, out) in results {
            match out {
                Ok(Ok(Ok(()))) => {
                    totals.borrow_mut().committed += 1;
                    acked.insert(key, ());
                }
                Ok(Ok(Err(_mismatch))) => totals.borrow_mut().mismatches += 1,
                Ok(Err(e)) => violations.push(format!("seed {seed}: unexpected error {e}")),
                Err(_) => {
                    totals.borrow_mut().timed_out_calls += 1;
                    in_flight.insert(key, ());
                    timed_out.push(i);
                }
            }
        }
        // A timed-out call's writer may have lost track of its upper: re-read it.
        for i in timed_out {
            handles[i].totally_available();
            let _ = writers[i].fetch_recent_upper().await;
            handles[i].partially_available(0.9, 0.1);
        }
    }
    for h in &handles {
        let c = h.counts();
        totals.borrow_mut().faults += c.faults();
        totals.borrow_mut().happened_then_timed_out += c.happened_then_timed_out;
        h.totally_available();
    }
    // Read back with the faults off.
    let state = clients[0].inspect_state(&shard).await.unwrap();
    let upper = state.upper().as_option().copied().unwrap_or(0);
    let versions = pg
        .scan(&shard.0, persist_playground::location::SeqNo(0), usize::MAX)
        .await
        .unwrap();
    for pair in versions.windows(2) {
        if pair[1].seqno.0 != pair[0].seqno.0 + 1 {
            violations.push(format!(
                "seed {seed}: version chain gap {} -> {}",
                pair[0].seqno, pair[1].seqno
            ));
        }
    }
    if upper > 0 {
        let mut read = clients[0]
            .open_leased_reader::<String, ()>(&shard)
            .await
            .unwrap();
        let got = read.snapshot_and_fetch(f(upper - 1)).await.unwrap();
        let mut count: BTreeMap<String, i64> = BTreeMap::new();
        for ((k, ()), _, d) in got {
            *count.entry(k).or_default() += d;
        }
        for k in acked.keys() {
            if count.get(k) != Some(&1) {
                violations.push(format!(
                    "seed {seed}: acked {k} is there {:?} times",
                    count.get(k)
                ));
            }
        }
        for (k, n) in &count {
            if !acked.contains_key(k) && !in_flight.contains_key(k) {
                violations.push(format!("seed {seed}: {k} ({n}) was never written"));
            }
            if *n != 1 {
                violations.push(format!("seed {seed}: {k} has multiplicity {n}"));
            }
        }
        read.expire().await;
    } else if !acked.is_empty() {
        violations.push(format!("seed {seed}: acked writes but the upper is 0"));
    }
    for w in writers {
        w.expire().await;
    }
    violations
}

fn fault_runs(blob_url: impl Fn(u64) -> String, consensus_url: String, seeds: u64) {
    block_on(|rt| async move {
        let pg: Rc<dyn Consensus> = Rc::new(
            PostgresConsensus::open(&consensus_url, rt.clone())
                .await
                .unwrap(),
        );
        let totals = RefCell::new(FaultTotals::default());
        let mut violations = Vec::new();
        let done = Cell::new(0);
        for seed in 0..seeds {
            let blob = ObjectStoreBlob::open(&blob_url(seed)).await.unwrap();
            let blob: Rc<dyn Blob> = Rc::new(blob);
            violations.extend(fault_run(&rt, seed, &pg, &blob, &totals).await);
            done.set(done.get() + 1);
        }
        let totals = totals.into_inner();
        eprintln!("{} seeds: {totals:?}", done.get());
        assert_eq!(violations, Vec::<String>::new(), "0 violations");
        assert!(totals.faults > 0, "faults were injected");
        assert!(
            totals.happened_then_timed_out > 0,
            "some calls ran and then timed out"
        );
        assert!(totals.committed > 0 && totals.mismatches > 0, "{totals:?}");
    });
}

fn seeds() -> u64 {
    std::env::var("NATIVE_FAULT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
}

#[test]
fn seeded_faults_on_postgres_and_file() {
    let dir = TempDir::new("faults");
    let base = dir.url();
    fault_runs(
        move |_| base.clone(),
        fresh_database("faults_file"),
        seeds(),
    );
}

#[test]
fn seeded_faults_on_postgres_and_s3_emulator() {
    let base = fresh_s3_url("faults");
    // The S3 half runs fewer seeds: the emulator answers slowly, and the file run covers 100+.
    let n = (seeds() / 4).max(25);
    fault_runs(move |_| base.clone(), fresh_database("faults_s3"), n);
}
