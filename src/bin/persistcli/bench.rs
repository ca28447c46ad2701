//! `bench`: compare_and_append per second on this location, with the storage calls one costs
//! (counted by persist's own `CountingLocation`), and beside it, on a `postgres://` Consensus,
//! the raw baselines over one connection of the same server: a prepared single-row INSERT of
//! the same bytes, and the conditional insert PostgresConsensus sends, alone, at READ COMMITTED
//! (what it runs) and at SERIALIZABLE (what it ran before). Measures; asserts nothing.
//!
//! Like with like: the raw INSERT and the compare_and_set pay the same server, WAL and commit;
//! what a compare_and_append adds is persist's own work (state, encoding, maintenance) and
//! whatever Blob calls it makes, which the counts line shows (a small update is inlined in the
//! state diff, so it writes no blob part).

use timely::progress::Antichain;

use persist_playground::persist::stats::{CountingLocation, LocationCounts};
use persist_playground::runtime::Runtime;

use crate::common::{shard_id, Ctx};

#[derive(clap::Args, Debug)]
pub(crate) struct BenchArgs {
    /// The shard (use a fresh one).
    #[arg(long, default_value = "s-bench")]
    shard: String,
    /// compare_and_appends (and raw INSERTs) to time.
    #[arg(long, default_value_t = 2000)]
    count: u64,
}

pub(crate) async fn bench(ctx: &Ctx, a: BenchArgs) -> Result<(), String> {
    let (caa_rate, avg) = caa(ctx, &a).await?;
    if !ctx.consensus_url.starts_with("postgres") {
        return Ok(());
    }
    let (raw_rate, cas_rates) = raw_baselines(ctx, a.count, avg).await?;
    println!(
        "ratio: caa / raw insert = {:.2}; caa / raw compare_and_set (READ COMMITTED) = {:.2}",
        caa_rate / raw_rate,
        caa_rate / cas_rates[0]
    );
    Ok(())
}

/// Times `count` compare_and_appends of one small update each; the rate and the average bytes
/// of a state diff.
async fn caa(ctx: &Ctx, a: &BenchArgs) -> Result<(f64, usize), String> {
    let (rt, count) = (&ctx.rt, a.count);
    let shard = shard_id(&a.shard)?;
    let (location, counter) = CountingLocation::wrap(ctx.location.clone());
    let client = ctx.client_on(location.clone());
    let mut write = client
        .open_writer::<String, String>(&shard)
        .await
        .map_err(|e| e.to_string())?;
    let first_seqno = client
        .inspect_state(&shard)
        .await
        .map_err(|e| e.to_string())?
        .seqno;
    eprintln!("[bench] {count} compare_and_appends of one small update on {shard}");
    counter.reset();
    let start = rt.now_ms();
    for i in 0..count {
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
    }
    let caa_ms = rt.now_ms().saturating_sub(start).max(1);
    let counts = counter.counts();
    let last_seqno = client
        .inspect_state(&shard)
        .await
        .map_err(|e| e.to_string())?
        .seqno;
    let versions = location
        .consensus
        .scan(
            &shard.0,
            first_seqno.next(),
            persist_playground::location::SCAN_ALL,
        )
        .await
        .map_err(|e| e.to_string())?;
    let bytes: usize = versions.iter().map(|v| v.data.len()).sum();
    let avg = bytes / versions.len().max(1);
    write.expire().await;
    let caa_rate = count as f64 * 1000.0 / caa_ms as f64;
    println!(
        "storage calls per compare_and_append: {}",
        per_call(&counts, count)
    );
    println!(
        "caa: {count} in {caa_ms} ms = {caa_rate:.0}/s ({} state versions for {count} appends: \
         maintenance adds the rest; {avg} bytes of state diff each)",
        last_seqno.0 - first_seqno.0
    );
    Ok((caa_rate, avg))
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

/// The raw INSERT rate, and the raw conditional insert's at READ COMMITTED and SERIALIZABLE.
async fn raw_baselines(ctx: &Ctx, count: u64, avg: usize) -> Result<(f64, Vec<f64>), String> {
    let rt = &ctx.rt;
    let (pg, conn) = tokio_postgres::connect(&ctx.consensus_url, tokio_postgres::NoTls)
        .await
        .map_err(|e| e.to_string())?;
    drop(tokio::task::spawn_local(async move {
        let _ = conn.await;
    }));
    let e = |e: tokio_postgres::Error| e.to_string();
    pg.batch_execute(
        "CREATE TABLE IF NOT EXISTS bench_raw (id text, n bigint, data bytea, PRIMARY KEY (id, n));
         CREATE TABLE IF NOT EXISTS bench_cas (shard text, sequence_number bigint, data bytea,
             PRIMARY KEY (shard, sequence_number))",
    )
    .await
    .map_err(e)?;
    let payload = vec![7u8; avg];
    // Unique per run, so a second run on one database does not collide.
    let id = format!("raw-{}-{}", ctx.seed, rt.now_ms());
    // Prepared once, like PostgresConsensus's statements: one round trip per INSERT.
    let insert = pg
        .prepare("INSERT INTO bench_raw (id, n, data) VALUES ($1, $2, $3)")
        .await
        .map_err(e)?;
    let start = rt.now_ms();
    for n in 0..count as i64 {
        pg.execute(&insert, &[&id, &n, &payload]).await.map_err(e)?;
    }
    let raw_rate = rate(rt, count, start);
    println!(
        "raw insert (prepared): {count} in {} ms = {raw_rate:.0}/s ({avg} bytes each)",
        ms(rt, start)
    );
    let cas = pg
        .prepare(
            "INSERT INTO bench_cas (shard, sequence_number, data) SELECT $1, $2, $3 \
             WHERE (SELECT sequence_number FROM bench_cas WHERE shard = $1 \
             ORDER BY sequence_number DESC LIMIT 1) = $4 ON CONFLICT DO NOTHING",
        )
        .await
        .map_err(e)?;
    let mut cas_rates = Vec::new();
    for (level, tag) in [("READ COMMITTED", "rc"), ("SERIALIZABLE", "s")] {
        pg.batch_execute(&format!(
            "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL {level}"
        ))
        .await
        .map_err(e)?;
        let cas_id = format!("{id}-{tag}");
        pg.execute(
            "INSERT INTO bench_cas VALUES ($1, 0, $2)",
            &[&cas_id, &payload],
        )
        .await
        .map_err(e)?;
        let start = rt.now_ms();
        for n in 1..=count as i64 {
            let inserted = pg
                .execute(&cas, &[&cas_id, &n, &payload, &(n - 1)])
                .await
                .map_err(e)?;
            if inserted != 1 {
                return Err("bench_cas: a compare_and_set lost to nobody".into());
            }
        }
        let cas_rate = rate(rt, count, start);
        println!(
            "raw compare_and_set statement (prepared, {level}): {count} in {} ms = {cas_rate:.0}/s",
            ms(rt, start)
        );
        cas_rates.push(cas_rate);
    }
    Ok((raw_rate, cas_rates))
}

fn ms(rt: &Runtime, start: u64) -> u64 {
    rt.now_ms().saturating_sub(start).max(1)
}

fn rate(rt: &Runtime, count: u64, start: u64) -> f64 {
    count as f64 * 1000.0 / ms(rt, start) as f64
}
