//! `oracle`: a durable timestamp oracle on the Consensus, serving (and applying) write
//! timestamps until its count, a stop, or a newer instance fencing it.

use persist_playground::oracle::{
    DurableOracleConfig, DurableTimestampOracle, NowFn, OracleError, TimestampOracle,
};

use crate::common::{Ctx, LineLog};

#[derive(clap::Args, Debug)]
pub(crate) struct OracleArgs {
    /// The timeline.
    #[arg(long, default_value = "epoch_ms")]
    timeline: String,
    /// How many write timestamps (0: until stopped).
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// The pre-allocated window, in ms.
    #[arg(long, default_value_t = 1000)]
    persist_interval_ms: u64,
    /// Append `ts T` lines here.
    #[arg(long)]
    log: Option<String>,
    /// Check the epoch in Consensus before every timestamp, so a replaced instance
    /// stops at once rather than at the end of its window.
    #[arg(long)]
    confirm_leadership: bool,
}

pub(crate) async fn oracle(ctx: &Ctx, a: OracleArgs) -> Result<(), String> {
    let (rt, stop) = (&ctx.rt, &ctx.stop);
    let mut log = LineLog::open(a.log.as_deref())?;
    let config = DurableOracleConfig::new(a.timeline.clone())
        .persist_interval_ms(a.persist_interval_ms)
        .confirm_leadership(a.confirm_leadership);
    let oracle = DurableTimestampOracle::open(
        ctx.location.consensus.clone(),
        rt.clone(),
        NowFn::from_runtime(rt),
        0,
        config,
    )
    .await
    .map_err(|e| e.to_string())?;
    let snap = oracle.snapshot();
    eprintln!("[oracle] timeline {}: {snap:?}", a.timeline);
    let mut served = 0u64;
    let fenced = |served: u64, e: OracleError| {
        // A newer instance took the timeline over: this one's work is done.
        eprintln!("[oracle] fenced after {served} write timestamps: {e}");
        Ok(())
    };
    while (a.count == 0 || served < a.count) && !stop.requested() {
        let ts = match oracle.write_ts().await {
            Ok(ts) => ts,
            Err(e @ OracleError::Fenced { .. }) => {
                println!("served {served} fenced");
                return fenced(served, e);
            }
            Err(e) => {
                eprintln!("[oracle] stopped: {e}");
                return Err(e.to_string());
            }
        };
        log.line(format!("ts {}", ts.timestamp));
        match oracle.apply_write(ts.timestamp).await {
            Ok(()) => {}
            Err(e @ OracleError::Fenced { .. }) => {
                println!("served {} fenced", served + 1);
                return fenced(served, e);
            }
            Err(e) => return Err(e.to_string()),
        }
        served += 1;
        if served % ctx.every == 0 {
            eprintln!("[oracle] {served} write timestamps, last {}", ts.timestamp);
        }
    }
    let read = oracle.read_ts().await.map_err(|e| e.to_string())?;
    eprintln!("[oracle] done: {served} write timestamps; read_ts {read}");
    println!("served {served} read_ts {read}");
    Ok(())
}
