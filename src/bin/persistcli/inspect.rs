//! `inspect SHARD`: a shard's stored versions, frontiers, rollups, batches and leases.

use persist_playground::persist::state::State;

use crate::common::{frontier, shard_id, Ctx};

#[derive(clap::Args, Debug)]
pub(crate) struct InspectArgs {
    /// The shard.
    shard: String,
}

fn print_state(state: &State) {
    let c = &state.collections;
    println!("shard      {}", state.shard_id);
    println!("seqno      {}", state.seqno);
    println!("upper      {}", frontier(state.upper()));
    println!("since      {}", frontier(state.since()));
    println!("rollups    {}", c.rollups.len());
    for (seqno, r) in c.rollups.iter() {
        println!("  rollup   {seqno} {}", r.key);
    }
    let batches = c.trace.batches();
    println!("batches    {}", batches.len());
    for b in batches {
        println!(
            "  batch    [{}, {}) since {} updates {} parts {}",
            frontier(&b.desc.lower),
            frontier(&b.desc.upper),
            frontier(&b.desc.since),
            b.len,
            b.parts.len()
        );
    }
    println!("writers    {}", c.writers.len());
    for (id, w) in c.writers.iter() {
        println!(
            "  writer   {id} upper {} heartbeat {} lease {} ms",
            frontier(&w.most_recent_write_upper),
            w.last_heartbeat_ms,
            w.lease_duration_ms
        );
    }
    println!("readers    {}", c.leased_readers.len());
    for (id, r) in c.leased_readers.iter() {
        println!(
            "  reader   {id} since {} seqno hold {} heartbeat {} lease {} ms",
            frontier(&r.since),
            r.seqno,
            r.last_heartbeat_ms,
            r.lease_duration_ms
        );
    }
    println!("critical   {}", c.critical_readers.len());
}

pub(crate) async fn inspect(ctx: &Ctx, a: InspectArgs) -> Result<(), String> {
    let shard = shard_id(&a.shard)?;
    let versions = ctx.stored_versions(&shard).await?;
    let state = ctx
        .default_client()
        .inspect_state(&shard)
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "versions   {} stored (v{}..=v{})",
        versions.len(),
        versions[0].seqno.0,
        versions[versions.len() - 1].seqno.0
    );
    print_state(&state);
    Ok(())
}
