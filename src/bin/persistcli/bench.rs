//! `bench`: compare_and_append per second on this location, with the storage calls one costs
//! (counted by persist's own `CountingLocation`), and beside it, on a `postgres://` Consensus,
//! the raw baselines on the same server: a prepared single-row INSERT of the same bytes, and the
//! conditional insert PostgresConsensus sends, alone, at READ COMMITTED (what it runs) and at
//! SERIALIZABLE (what it ran before), and that statement through `PostgresConsensus` itself (on
//! a key of its own: the Consensus layer's cost without persist above it). Measures; asserts
//! nothing.
//!
//! The kinds run interleaved, in `--rounds` rounds of `count / rounds` calls each (compare_and_
//! append, then each baseline), so a slower moment of a shared machine falls on all of them;
//! each round gives a ratio, and the report gives every kind's median rate and the median ratio.
//! Every call is also timed on its own (the runtime's monotonic microsecond clock,
//! `Runtime::now_us`): the median of one call's latency is what the preempted moments of a
//! shared machine move least, so the report adds the ratio of the two kinds' median latencies,
//! and the ceiling of that ratio: the raw INSERT against the conditional insert alone, which
//! every compare_and_append sends.
//! The compare_and_sets a compare_and_append sends are timed too (a decorator on the
//! Consensus), so the report splits one compare_and_append into its statement and the rest,
//! persist's own work in this process.
//!
//! Like with like: the raw INSERT and the compare_and_set pay the same server, WAL and commit;
//! what a compare_and_append adds is persist's own work (state, encoding, maintenance) and
//! whatever Blob calls it makes, which the counts line shows.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use async_trait::async_trait;
use timely::progress::Antichain;
use tokio_postgres::{Client, Statement};

use persist_playground::location::{
    CaSResult, Consensus, ExternalError, Location, SeqNo, VersionedData, SCAN_ALL,
};
use persist_playground::persist::stats::{CountingLocation, LocationCounts};
use persist_playground::persist::write::WriteHandle;
use persist_playground::runtime::Runtime;

use crate::common::{shard_id, Ctx};

#[derive(clap::Args, Debug)]
pub(crate) struct BenchArgs {
    /// The shard (use a fresh one).
    #[arg(long, default_value = "s-bench")]
    shard: String,
    /// compare_and_appends (and raw calls of each kind) to time, in all rounds together.
    #[arg(long, default_value_t = 2000)]
    count: u64,
    /// Rounds the calls are split into, the kinds interleaved.
    #[arg(long, default_value_t = 5)]
    rounds: u64,
}

/// The raw baselines' connections and statements (see the module docs).
struct Raw {
    /// At READ COMMITTED: the INSERT and the conditional insert.
    rc: Client,
    /// At SERIALIZABLE: the conditional insert.
    s: Client,
    insert: Statement,
    cas_rc: Statement,
    cas_s: Statement,
    id: String,
    payload: Vec<u8>,
    /// The bench's Consensus without persist above it (its own key).
    consensus: Rc<dyn Consensus>,
    /// The next row of each kind.
    next: i64,
}

const KINDS: [&str; 5] = [
    "caa",
    "raw insert (prepared)",
    "raw compare_and_set statement (prepared, READ COMMITTED)",
    "raw compare_and_set statement (prepared, SERIALIZABLE)",
    "PostgresConsensus::compare_and_set alone (the same statement through the Consensus)",
];

pub(crate) async fn bench(ctx: &Ctx, a: BenchArgs) -> Result<(), String> {
    let shard = shard_id(&a.shard)?;
    let (timed, cas_micros, scans) = TimedConsensus::wrap(ctx.location.clone(), &ctx.rt);
    let (location, counter) = CountingLocation::wrap(timed);
    let client = ctx.client_on(location.clone());
    let mut write = client
        .open_writer::<String, String>(&shard)
        .await
        .map_err(|e| e.to_string())?;
    let postgres = ctx.consensus_url.starts_with("postgres");
    // The raw rows carry as many bytes as a state diff of this workload: measured on a first
    // round of compare_and_appends (untimed).
    let before = client
        .inspect_state(&shard)
        .await
        .map_err(|e| e.to_string())?
        .seqno;
    caa_round(&ctx.rt, &mut write, 0, 50, &mut Vec::new()).await?;
    let versions = location
        .consensus
        .scan(&shard.0, before.next(), SCAN_ALL)
        .await
        .map_err(|e| e.to_string())?;
    let warm = versions.iter().map(|v| v.data.len()).sum::<usize>() / versions.len().max(1);
    let mut raw = match postgres {
        true => Some(Raw::open(ctx, warm).await?),
        false => None,
    };
    let (rounds, per) = (a.rounds.max(1), (a.count / a.rounds.max(1)).max(1));
    eprintln!(
        "[bench] {rounds} rounds of {per} compare_and_appends of one small update on {shard}{}",
        if postgres {
            ", each beside the raw baselines"
        } else {
            ""
        }
    );
    counter.reset();
    cas_micros.borrow_mut().clear();
    scans.set(ScanTally::default());
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); KINDS.len()];
    let mut calls: Vec<Vec<f64>> = vec![Vec::new(); KINDS.len()];
    let mut ratios = Vec::new();
    for round in 0..rounds {
        let start = ctx.rt.now_us();
        caa_round(&ctx.rt, &mut write, 50 + round * per, per, &mut calls[0]).await?;
        rates[0].push(rate(per, start, ctx.rt.now_us()));
        if let Some(raw) = raw.as_mut() {
            for (kind, r) in rates.iter_mut().enumerate().skip(1) {
                let start = ctx.rt.now_us();
                raw.round(&ctx.rt, kind, per, &mut calls[kind]).await?;
                r.push(rate(per, start, ctx.rt.now_us()));
            }
            ratios.push(rates[0][round as usize] / rates[1][round as usize]);
        }
    }
    let counts = counter.counts();
    let mut cas = std::mem::take(&mut *cas_micros.borrow_mut());
    write.expire().await;
    println!(
        "storage calls per compare_and_append: {}",
        per_call(&counts, rounds * per)
    );
    println!("({warm} bytes of state diff per compare_and_append; the raw rows carry as many)");
    let ScanTally {
        limited,
        full,
        rows,
    } = scans.get();
    println!(
        "scans: {limited} limited, {full} of every version, {rows} versions read in all ({:.1} per compare_and_append)",
        rows as f64 / (rounds * per).max(1) as f64
    );
    for ((kind, r), c) in KINDS.iter().zip(rates.iter_mut()).zip(calls.iter_mut()) {
        if !r.is_empty() {
            println!(
                "{kind}: median {:.0}/s over {rounds} rounds of {per}; one call: median {:.0} us",
                median(r),
                median(c)
            );
        }
    }
    if !cas.is_empty() {
        let (all, statement) = (median(&mut calls[0]), median(&mut cas));
        println!(
            "caa one call: median {all:.0} us = its compare_and_set statement(s) (median {statement:.0} us \
             over {} sent) + the rest in this process (~{:.0} us)",
            cas.len(),
            (all - statement).max(0.0)
        );
    }
    print_ratios(&mut calls, &mut ratios);
    Ok(())
}

/// The ratios against the raw INSERT (one call's median latency, the ceiling, the per-round
/// rates), when the raw baselines ran (a `postgres://` Consensus).
fn print_ratios(calls: &mut [Vec<f64>], ratios: &mut [f64]) {
    if !calls[1].is_empty() {
        // Per call, the median is what a preempted moment of a shared machine moves least.
        println!(
            "ratio of one call's median latency, raw insert / caa: {:.2}",
            median(&mut calls[1]) / median(&mut calls[0])
        );
        // The ceiling of that ratio: a compare_and_append sends at least the conditional insert,
        // so no compare_and_append can come closer to a plain INSERT than that statement alone.
        println!(
            "ceiling: raw insert / the raw compare_and_set statement (READ COMMITTED) alone: {:.2}",
            median(&mut calls[1]) / median(&mut calls[2])
        );
    }
    if !ratios.is_empty() {
        let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "ratio caa / raw insert: median {:.2} (rounds: {})",
            median(ratios),
            shown.join(" ")
        );
    }
}

/// `n` compare_and_appends of one small update each, keys from `first`.
async fn caa_round(
    rt: &Runtime,
    write: &mut WriteHandle<String, String>,
    first: u64,
    n: u64,
    micros: &mut Vec<f64>,
) -> Result<(), String> {
    for i in first..first + n {
        let start = rt.now_us();
        let lower = write.upper().as_option().copied().ok_or("shard finished")?;
        let upd = vec![((format!("k{i}"), "v".to_string()), lower, 1i64)];
        let lo = Antichain::from_elem(lower);
        if write
            .compare_and_append(&upd, lo, Antichain::from_elem(lower + 1))
            .await
            .map_err(|e| e.to_string())?
            .is_err()
        {
            return Err("another writer moved the shard: use a fresh --shard".into());
        }
        micros.push(rt.now_us().saturating_sub(start) as f64);
    }
    Ok(())
}

/// A Consensus that times every compare_and_set it passes on (microseconds, the runtime's
/// clock) into a shared list and tallies the scans; every other call passes straight through.
struct TimedConsensus {
    inner: Rc<dyn Consensus>,
    rt: Runtime,
    micros: Rc<RefCell<Vec<f64>>>,
    scans: Rc<Cell<ScanTally>>,
}

/// Scans seen by the bench's Consensus.
#[derive(Clone, Copy, Default)]
struct ScanTally {
    /// Scans with a limit.
    limited: u64,
    /// Scans of every version from their start.
    full: u64,
    /// Versions returned by all of them.
    rows: u64,
}

impl TimedConsensus {
    /// `location` with its Consensus timed, the list the times go to, and the scan tally.
    #[allow(clippy::type_complexity)]
    fn wrap(
        location: Location,
        rt: &Runtime,
    ) -> (Location, Rc<RefCell<Vec<f64>>>, Rc<Cell<ScanTally>>) {
        let micros = Rc::new(RefCell::new(Vec::new()));
        let scans = Rc::new(Cell::new(ScanTally::default()));
        let consensus = Rc::new(TimedConsensus {
            inner: location.consensus,
            rt: rt.clone(),
            micros: Rc::clone(&micros),
            scans: Rc::clone(&scans),
        });
        let location = Location {
            blob: location.blob,
            consensus,
        };
        (location, micros, scans)
    }
}

#[async_trait(?Send)]
impl Consensus for TimedConsensus {
    async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
        self.inner.head(key).await
    }
    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: VersionedData,
    ) -> Result<CaSResult, ExternalError> {
        let start = self.rt.now_us();
        let r = self.inner.compare_and_set(key, expected, new).await;
        let took = self.rt.now_us().saturating_sub(start);
        self.micros.borrow_mut().push(took as f64);
        r
    }
    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<Vec<VersionedData>, ExternalError> {
        let r = self.inner.scan(key, from, limit).await;
        let rows = r.as_ref().map_or(0, |v| v.len() as u64);
        let mut t = self.scans.get();
        if limit < SCAN_ALL {
            t.limited += 1;
        } else {
            t.full += 1;
        }
        t.rows += rows;
        self.scans.set(t);
        r
    }
    async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
        self.inner.truncate(key, seqno).await
    }
    async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
        self.inner.list_keys().await
    }
}

impl Raw {
    /// Two connections to the bench's server (one per isolation level), the tables and the
    /// prepared statements; rows of `payload_bytes` bytes.
    async fn open(ctx: &Ctx, payload_bytes: usize) -> Result<Raw, String> {
        let connect = || async {
            let (pg, conn) = tokio_postgres::connect(&ctx.consensus_url, tokio_postgres::NoTls)
                .await
                .map_err(|e| e.to_string())?;
            drop(tokio::task::spawn_local(async move {
                let _ = conn.await;
            }));
            Ok::<_, String>(pg)
        };
        let (rc, s) = (connect().await?, connect().await?);
        let e = |e: tokio_postgres::Error| e.to_string();
        rc.batch_execute(
            "CREATE TABLE IF NOT EXISTS bench_raw (id text, n bigint, data bytea,
                 PRIMARY KEY (id, n));
             CREATE TABLE IF NOT EXISTS bench_cas (shard text, sequence_number bigint, data bytea,
                 PRIMARY KEY (shard, sequence_number));
             SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED",
        )
        .await
        .map_err(e)?;
        s.batch_execute("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE")
            .await
            .map_err(e)?;
        // Unique per run, so a second run on one database does not collide.
        let id = format!("raw-{}-{}", ctx.seed, ctx.rt.now_ms());
        let payload = vec![7u8; payload_bytes];
        // PostgresConsensus's own statement, on a table of its own.
        let cas =
            persist_playground::location::postgres::CAS_SOME.replace("consensus", "bench_cas");
        let cas = cas.as_str();
        let first = "INSERT INTO bench_cas VALUES ($1, 0, $2)";
        for (client, tag) in [(&rc, "rc"), (&s, "s")] {
            let key = format!("{id}-{tag}");
            client.execute(first, &[&key, &payload]).await.map_err(e)?;
        }
        let consensus = Rc::clone(&ctx.location.consensus);
        let v0 = VersionedData {
            seqno: SeqNo(0),
            data: payload.clone().into(),
        };
        consensus
            .compare_and_set(&format!("{id}-pc"), None, v0)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Raw {
            insert: rc
                .prepare("INSERT INTO bench_raw (id, n, data) VALUES ($1, $2, $3)")
                .await
                .map_err(e)?,
            cas_rc: rc.prepare(cas).await.map_err(e)?,
            cas_s: s.prepare(cas).await.map_err(e)?,
            rc,
            s,
            id,
            payload,
            consensus,
            next: 1,
        })
    }

    /// `n` calls of baseline `kind` (an index into [`KINDS`]).
    async fn round(
        &mut self,
        rt: &Runtime,
        kind: usize,
        n: u64,
        micros: &mut Vec<f64>,
    ) -> Result<(), String> {
        let e = |e: tokio_postgres::Error| e.to_string();
        let from = self.next;
        for row in from..from + n as i64 {
            let start = rt.now_us();
            match kind {
                1 => {
                    let key = &self.id;
                    self.rc
                        .execute(&self.insert, &[key, &row, &self.payload])
                        .await
                        .map_err(e)?;
                }
                4 => {
                    let key = format!("{}-pc", self.id);
                    let new = VersionedData {
                        seqno: SeqNo(row as u64),
                        data: self.payload.clone().into(),
                    };
                    let expected = Some(SeqNo(row as u64 - 1));
                    let done = self.consensus.compare_and_set(&key, expected, new).await;
                    if done.map_err(|e| e.to_string())? != CaSResult::Committed {
                        return Err("bench: a compare_and_set lost to nobody".into());
                    }
                }
                _ => {
                    let (client, st, key) = match kind {
                        2 => (&self.rc, &self.cas_rc, format!("{}-rc", self.id)),
                        _ => (&self.s, &self.cas_s, format!("{}-s", self.id)),
                    };
                    let inserted = client
                        .execute(st, &[&key, &row, &self.payload, &(row - 1)])
                        .await
                        .map_err(e)?;
                    if inserted != 1 {
                        return Err("bench_cas: a compare_and_set lost to nobody".into());
                    }
                }
            }
            micros.push(rt.now_us().saturating_sub(start) as f64);
        }
        // Each kind has its own key (or id), so the rows of one round follow on for all.
        if kind == KINDS.len() - 1 {
            self.next = from + n as i64;
        }
        Ok(())
    }
}

fn per_call(c: &LocationCounts, count: u64) -> String {
    let n = count.max(1) as f64;
    format!(
        "consensus compare_and_set {:.2}, head {:.2}, scan {:.2}, truncate {:.2}; \
         blob set {:.2}, get {:.2}, delete {:.2}, list {:.2}",
        c.consensus_cas as f64 / n,
        c.consensus_heads as f64 / n,
        c.consensus_scans as f64 / n,
        c.consensus_truncates as f64 / n,
        c.blob_sets as f64 / n,
        c.blob_gets as f64 / n,
        c.blob_deletes as f64 / n,
        c.blob_lists as f64 / n,
    )
}

/// Calls per second between two readings of `Runtime::now_us` (a round of fast calls lasts a
/// few milliseconds, finer than the runtime's millisecond clock).
fn rate(count: u64, start_us: u64, end_us: u64) -> f64 {
    count as f64 * 1e6 / (end_us.saturating_sub(start_us) as f64).max(1e-3)
}

/// The median (sorts `v`).
fn median(v: &mut [f64]) -> f64 {
    persist_playground::sort::sort_by(v, |a, b| a.total_cmp(b));
    v[v.len() / 2]
}
