//! The real backends (issue 18), under the tokio runtime: the Consensus suite on PostgreSQL, the
//! Blob suite on `file://` and on the S3 emulator, the oracle suite over PostgreSQL, persist
//! end to end on both, and seeded fault runs over the unreliable decorator.
//!
//! Needs the services of `scripts/services.sh` (each test fails naming the missing variable) and
//! are `#[ignore]`d, so a plain `cargo test` needs no database: `scripts/test.sh`'s native-backends
//! layer runs them with `-- --ignored`.
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
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
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
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
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
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
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
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
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
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn persist_on_postgres_and_file() {
    let dir = TempDir::new("e2e");
    persist_end_to_end(fresh_database("e2e_file"), dir.url());
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
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
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
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
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn seeded_faults_on_postgres_and_s3_emulator() {
    let base = fresh_s3_url("faults");
    // The S3 half runs fewer seeds: the emulator answers slowly, and the file run covers 100+.
    let n = (seeds() / 4).max(25);
    fault_runs(move |_| base.clone(), fresh_database("faults_s3"), n);
}

// Forced races on PostgresConsensus's compare_and_set (two connections, one expected head). A
// trigger makes an insert of a marked row wait on an advisory lock the test holds, before or
// after the row goes in; `pg_locks` says when each racer waits where it should. Nothing here
// depends on timing: every interleaving is set up by locks.

/// What a marked row's insert waits for: the advisory lock `PAUSE_KEY`, taken by the trigger
/// `BEFORE` the row is inserted (its statement has already read the head) or `AFTER` (the row is
/// in, its key taken, the transaction open).
const PAUSE_KEY: i64 = 7_000_001;
const PAUSE_TRIGGERS: &str = "
    CREATE FUNCTION pause_marked() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.data = convert_to(TG_ARGV[0], 'UTF8') THEN
            PERFORM pg_advisory_xact_lock(7000001);
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER pause_before BEFORE INSERT ON consensus
        FOR EACH ROW EXECUTE FUNCTION pause_marked('pause-before');
    CREATE TRIGGER pause_after AFTER INSERT ON consensus
        FOR EACH ROW EXECUTE FUNCTION pause_marked('pause-after');";

fn data(seqno: u64, s: &str) -> persist_playground::location::VersionedData {
    persist_playground::location::VersionedData {
        seqno: persist_playground::location::SeqNo(seqno),
        data: bytes::Bytes::from(s.as_bytes().to_vec()),
    }
}

/// `c.compare_and_set("race", Some(expected), data(new, text))`, as a task of its own.
fn cas_task(
    c: &PostgresConsensus,
    expected: u64,
    new: u64,
    text: &'static str,
) -> tokio::task::JoinHandle<
    Result<persist_playground::location::CaSResult, persist_playground::location::ExternalError>,
> {
    let c = c.clone();
    tokio::task::spawn_local(async move {
        let expected = Some(persist_playground::location::SeqNo(expected));
        c.compare_and_set("race", expected, data(new, text)).await
    })
}

/// Takes (`true`) or releases the advisory lock marked inserts wait for.
async fn pause(holder: &tokio_postgres::Client, on: bool) {
    let sql = match on {
        true => "SELECT pg_advisory_lock($1)",
        false => "SELECT pg_advisory_unlock($1)",
    };
    holder.execute(sql, &[&PAUSE_KEY]).await.unwrap();
}

/// A plain connection of the test's own (the lock holder and the observer).
async fn raw_client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    drop(tokio::task::spawn_local(conn));
    client
}

/// Polls `pg_locks` (the test's own pacing, not an assertion) until `n` sessions of this database
/// wait for a lock of `locktype`; panics after about 20 s.
async fn until_waiting(
    rt: &persist_playground::runtime::Runtime,
    observer: &tokio_postgres::Client,
    locktype: &str,
    n: i64,
) {
    for _ in 0..4000 {
        let row = observer
            .query_one(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                 WHERE NOT l.granted AND l.locktype = $1 AND a.datname = current_database()",
                &[&locktype],
            )
            .await
            .unwrap();
        if row.get::<_, i64>(0) >= n {
            return;
        }
        rt.sleep(5).await;
    }
    panic!("never saw {n} waiting for a {locktype} lock");
}

/// In the database `url`: the pause triggers, a key `race` at head v1, two PostgresConsensus handles
/// (two connections), the lock holder (holding `PAUSE_KEY`) and an observer.
async fn race_setup(
    rt: &persist_playground::runtime::Runtime,
    url: &str,
) -> (
    PostgresConsensus,
    PostgresConsensus,
    tokio_postgres::Client,
    tokio_postgres::Client,
) {
    use persist_playground::location::CaSResult;
    let a = PostgresConsensus::open(url, rt.clone()).await.unwrap();
    let b = PostgresConsensus::open(url, rt.clone()).await.unwrap();
    let holder = raw_client(url).await;
    holder.batch_execute(PAUSE_TRIGGERS).await.unwrap();
    assert_eq!(
        a.compare_and_set("race", None, data(1, "v1"))
            .await
            .unwrap(),
        CaSResult::Committed
    );
    pause(&holder, true).await;
    let observer = raw_client(url).await;
    (a, b, holder, observer)
}

/// Both racers insert the successor v2 over head v1: the first has its row in (uncommitted),
/// the second has read head v1 too and waits on the first's key. The primary key decides: one
/// commits, the other finds the key taken and reports a mismatch; then the same with the first
/// rolled back, where the second commits.
#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn racing_successors_on_one_head_the_primary_key_picks_one() {
    use persist_playground::location::CaSResult;
    let url = fresh_database("race_pk");
    block_on(|rt| async move {
        let (a, b, holder, observer) = race_setup(&rt, &url).await;
        let first = cas_task(&a, 1, 2, "pause-after");
        until_waiting(&rt, &observer, "advisory", 1).await;
        let second = cas_task(&b, 1, 2, "b");
        // The second waits on the first's transaction: it read head v1 and hit the taken key.
        until_waiting(&rt, &observer, "transactionid", 1).await;
        pause(&holder, false).await;
        assert_eq!(first.await.unwrap().unwrap(), CaSResult::Committed);
        assert_eq!(
            second.await.unwrap().unwrap(),
            CaSResult::ExpectationMismatch
        );
        let head = b.head("race").await.unwrap().unwrap();
        assert_eq!((head.seqno.0, &head.data[..]), (2, &b"pause-after"[..]));

        // Again over v2, and the first one fails after its row is in: its transaction rolls back
        // (an error raised by the trigger), so the waiting second one inserts.
        holder
            .batch_execute(
                "CREATE FUNCTION fail_marked() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     IF NEW.data = convert_to('pause-then-fail', 'UTF8') THEN
                         PERFORM pg_advisory_xact_lock(7000001);
                         RAISE EXCEPTION 'forced failure' USING ERRCODE = '40001';
                     END IF;
                     RETURN NEW;
                 END $$;
                 CREATE TRIGGER pause_then_fail AFTER INSERT ON consensus
                     FOR EACH ROW EXECUTE FUNCTION fail_marked();",
            )
            .await
            .unwrap();
        pause(&holder, true).await;
        let first = cas_task(&a, 2, 3, "pause-then-fail");
        until_waiting(&rt, &observer, "advisory", 1).await;
        let second = cas_task(&b, 2, 3, "b3");
        until_waiting(&rt, &observer, "transactionid", 1).await;
        pause(&holder, false).await;
        let failed = first.await.unwrap().unwrap_err();
        assert!(
            !failed.is_indeterminate(),
            "a rolled-back statement is determinate: {failed}"
        );
        assert_eq!(second.await.unwrap().unwrap(), CaSResult::Committed);
        let head = a.head("race").await.unwrap().unwrap();
        assert_eq!((head.seqno.0, &head.data[..]), (3, &b"b3"[..]));
    });
}

/// A jump (v1 to v5) races a successor (v1 to v2) whose row is already in: the keys differ, so
/// the primary key cannot decide. The jump's table lock waits for the successor's transaction,
/// and its insert then sees v2 and does nothing. Without the lock, both would commit and fork
/// the chain at v1.
#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn a_jump_racing_a_successor_waits_for_it_and_loses() {
    use persist_playground::location::{CaSResult, SeqNo};
    let url = fresh_database("race_jump");
    block_on(|rt| async move {
        let (a, b, holder, observer) = race_setup(&rt, &url).await;
        let successor = cas_task(&a, 1, 2, "pause-after");
        until_waiting(&rt, &observer, "advisory", 1).await;
        let jump = cas_task(&b, 1, 5, "jump");
        until_waiting(&rt, &observer, "relation", 1).await;
        pause(&holder, false).await;
        assert_eq!(successor.await.unwrap().unwrap(), CaSResult::Committed);
        assert_eq!(jump.await.unwrap().unwrap(), CaSResult::ExpectationMismatch);
        let versions = b.scan("race", SeqNo(0), 10).await.unwrap();
        let seqnos: Vec<u64> = versions.iter().map(|v| v.seqno.0).collect();
        assert_eq!(seqnos, vec![1, 2]);
    });
}

/// A successor whose statement has read head v1 is held before its insert; meanwhile another
/// handle commits v2 and v3 and truncates to v3, which would delete v2 and let the held insert
/// of v2 through (an acknowledged write off the chain). The truncate's table lock waits for
/// the held insert, which then finds v2 taken.
#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn a_truncate_waits_for_an_insert_that_read_an_old_head() {
    use persist_playground::location::{CaSResult, SeqNo};
    let url = fresh_database("race_truncate");
    block_on(|rt| async move {
        let (a, b, holder, observer) = race_setup(&rt, &url).await;
        let stale = cas_task(&a, 1, 2, "pause-before");
        until_waiting(&rt, &observer, "advisory", 1).await;
        assert_eq!(
            b.compare_and_set("race", Some(SeqNo(1)), data(2, "b2"))
                .await
                .unwrap(),
            CaSResult::Committed
        );
        assert_eq!(
            b.compare_and_set("race", Some(SeqNo(2)), data(3, "b3"))
                .await
                .unwrap(),
            CaSResult::Committed
        );
        let truncate = {
            let b = b.clone();
            tokio::task::spawn_local(async move { b.truncate("race", SeqNo(3)).await })
        };
        until_waiting(&rt, &observer, "relation", 1).await;
        pause(&holder, false).await;
        assert_eq!(
            stale.await.unwrap().unwrap(),
            CaSResult::ExpectationMismatch
        );
        assert_eq!(truncate.await.unwrap().unwrap(), 2);
        let versions = b.scan("race", SeqNo(0), 10).await.unwrap();
        let chain: Vec<(u64, &[u8])> = versions.iter().map(|v| (v.seqno.0, &v.data[..])).collect();
        assert_eq!(chain, vec![(3, &b"b3"[..])]);
    });
}
