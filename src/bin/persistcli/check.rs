//! `check SHARD --acks LOG...`: a shard's history against the writers' logs. Three checks:
//! 1. the version chain in Consensus has no gap;
//! 2. the playground's history check, run over the Consensus log (from v1 when it is all
//!    there) with the writers' acknowledgements as committed appends;
//! 3. exactly once: a snapshot holds every acknowledged value with multiplicity 1, and nothing
//!    no writer tried.

use std::cell::RefCell;
use std::collections::BTreeMap;

use timely::progress::Antichain;

use persist_playground::location::VersionedData;
use persist_playground::persist::codec::Codec;
use persist_playground::persist::state::State;
use persist_playground::persist::{PersistClient, ShardId};
use persist_playground::playground::fact::{digest, AttemptOutcome, Fact};
use persist_playground::playground::log::{Outcome, Pending};
use persist_playground::playground::versions::VersionWitness;
use persist_playground::playground::Journal;

use crate::common::{frontier, shard_id, Ctx};

#[derive(clap::Args, Debug)]
pub(crate) struct CheckArgs {
    /// The shard.
    shard: String,
    /// Writer logs (`--log` files of `persistcli writer`).
    #[arg(long = "acks")]
    acks: Vec<String>,
}

/// One writer log: acknowledged (key, value, lower, upper) and attempted values.
#[derive(Default)]
struct WriterLog {
    acked: Vec<(String, String, u64, u64)>,
    tried: Vec<(String, String)>,
}

fn read_log(path: &str) -> Result<WriterLog, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let mut log = WriterLog::default();
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts.as_slice() {
            ["try", k, v] => log.tried.push((k.to_string(), v.to_string())),
            ["ack", k, v, lo, hi] => {
                let (Ok(lo), Ok(hi)) = (lo.parse(), hi.parse()) else {
                    continue;
                };
                log.acked.push((k.to_string(), v.to_string(), lo, hi));
            }
            // A line cut short by a SIGKILL.
            _ => {}
        }
    }
    Ok(log)
}

pub(crate) async fn check(ctx: &Ctx, a: CheckArgs) -> Result<(), String> {
    let shard = shard_id(&a.shard)?;
    let logs: Vec<(String, WriterLog)> = a
        .acks
        .iter()
        .map(|p| read_log(p).map(|l| (p.clone(), l)))
        .collect::<Result<_, _>>()?;
    let versions = ctx.stored_versions(&shard).await?;
    let mut problems = chain_gaps(&shard, &versions);
    let client = ctx.default_client();
    let from_start = versions[0].seqno.0 == 1;
    problems.extend(history(ctx, &client, &shard, from_start, &logs).await?);
    let state = client
        .inspect_state(&shard)
        .await
        .map_err(|e| e.to_string())?;
    let snapshot = snapshot_counts(&client, &shard, &state).await?;
    if !logs.is_empty() {
        problems.extend(exactly_once(&logs, &snapshot));
    }
    let acked_total: usize = logs.iter().map(|(_, l)| l.acked.len()).sum();
    eprintln!(
        "[check] {acked_total} acknowledged writes in {} logs; {} values in the shard at upper {}",
        logs.len(),
        snapshot.len(),
        frontier(state.upper())
    );
    if problems.is_empty() {
        println!(
            "check: ok: 0 violations ({} versions, {acked_total} acknowledged writes)",
            versions.len()
        );
        Ok(())
    } else {
        for p in &problems {
            println!("violation: {p}");
        }
        Err(format!("{} violations", problems.len()))
    }
}

/// Check 1, the version chain: seqno + 1 each, from the earliest stored.
fn chain_gaps(shard: &ShardId, versions: &[VersionedData]) -> Vec<String> {
    let mut problems = Vec::new();
    for pair in versions.windows(2) {
        if pair[1].seqno.0 != pair[0].seqno.0 + 1 {
            problems.push(format!(
                "version chain gap: {} then {}",
                pair[0].seqno, pair[1].seqno
            ));
        }
    }
    eprintln!(
        "[check] {shard}: {} versions v{}..=v{}, chain {}",
        versions.len(),
        versions[0].seqno.0,
        versions[versions.len() - 1].seqno.0,
        if problems.is_empty() {
            "without a gap"
        } else {
            "BROKEN"
        }
    );
    problems
}

/// Check 2, the playground's history check over the Consensus log and the writers'
/// acknowledgements: prints each rule that checked something, returns the violations.
async fn history(
    ctx: &Ctx,
    client: &PersistClient,
    shard: &ShardId,
    from_start: bool,
    logs: &[(String, WriterLog)],
) -> Result<Vec<String>, String> {
    let journal = RefCell::new(Journal::default());
    let mut witness = VersionWitness::default();
    let baseline = if from_start {
        State::uninitialized(shard.clone())
    } else {
        client
            .inspect_state(shard)
            .await
            .map_err(|e| e.to_string())?
    };
    let location = &ctx.location;
    witness
        .pass(location, &shard.0, Some(&baseline), &journal, 0)
        .await;
    let mut passes = 0;
    loop {
        let before = journal.borrow().log.last_seq();
        witness.pass(location, &shard.0, None, &journal, 1).await;
        journal.borrow_mut().pump();
        passes += 1;
        if journal.borrow().log.last_seq() == before {
            break;
        }
        if passes % 10 == 0 {
            eprintln!(
                "[check] read {} events of versions",
                journal.borrow().log.last_seq()
            );
        }
    }
    for (path, log) in logs {
        for (k, v, lo, hi) in &log.acked {
            journal
                .borrow_mut()
                .log
                .record(ack_event(shard, path, k, v, *lo, *hi));
        }
    }
    journal.borrow_mut().pump();
    let report = journal.borrow().check.report();
    for r in &report.rules {
        if r.checks > 0 || r.violations > 0 {
            println!(
                "rule {:<16} {:>6} checks {:>3} violations {:>4} unverified",
                r.rule, r.checks, r.violations, r.unverified
            );
        }
    }
    Ok(report
        .violations
        .iter()
        .map(|v| format!("{}: {}", v.rule, v.message))
        .collect())
}

/// A writer's acknowledgement of `k=v` at `[lo, hi)`, as the event log records a committed
/// compare_and_append.
fn ack_event(shard: &ShardId, writer: &str, k: &str, v: &str, lo: u64, hi: u64) -> Pending {
    let (mut kb, mut vb) = (Vec::new(), Vec::new());
    k.to_string().encode(&mut kb);
    v.to_string().encode(&mut vb);
    Pending {
        at_ms: 2,
        actor: Some(writer.to_string()),
        process: None,
        component: "writer",
        kind: "compare_and_append".into(),
        outcome: Outcome::Info,
        detail: format!("{k} {v}"),
        fact: Some(Fact::Append {
            shard: shard.0.clone(),
            writer: writer.to_string(),
            mode: "compareAndAppend".into(),
            lower: lo,
            upper: hi,
            outcome: AttemptOutcome::Committed,
            updates: 1,
            acked: vec![digest(&kb, &vb)],
            current: None,
        }),
    }
}

/// The shard's contents at `upper - 1`, as multiplicities per (key, value).
async fn snapshot_counts(
    client: &PersistClient,
    shard: &ShardId,
    state: &State,
) -> Result<BTreeMap<(String, String), i64>, String> {
    let mut counts: BTreeMap<(String, String), i64> = BTreeMap::new();
    let Some(&upper) = state.upper().as_option() else {
        return Ok(counts);
    };
    if upper == 0 {
        return Ok(counts);
    }
    let mut read = client
        .open_leased_reader::<String, String>(shard)
        .await
        .map_err(|e| e.to_string())?;
    let got = read
        .snapshot_and_fetch(Antichain::from_elem(upper - 1))
        .await
        .map_err(|e| e.to_string())?;
    read.expire().await;
    for ((k, v), _, d) in got {
        *counts.entry((k, v)).or_default() += d;
    }
    Ok(counts)
}

/// Check 3: every acknowledged value in the snapshot once, and nothing that no writer tried.
fn exactly_once(
    logs: &[(String, WriterLog)],
    snapshot: &BTreeMap<(String, String), i64>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut tried: BTreeMap<(String, String), ()> = BTreeMap::new();
    for (_, log) in logs {
        for (k, v) in &log.tried {
            tried.insert((k.clone(), v.clone()), ());
        }
        for (k, v, _, _) in &log.acked {
            let n = snapshot.get(&(k.clone(), v.clone())).copied().unwrap_or(0);
            if n != 1 {
                problems.push(format!("acknowledged {k}={v} is in the shard {n} times"));
            }
        }
    }
    for ((k, v), n) in snapshot {
        if !tried.contains_key(&(k.clone(), v.clone())) {
            problems.push(format!(
                "{k}={v} ({n:+}) is in the shard but no writer tried it"
            ));
        }
        if *n != 1 {
            problems.push(format!("{k}={v} has multiplicity {n}"));
        }
    }
    problems
}
