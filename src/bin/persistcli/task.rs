//! `write-task`: a differential write task that keeps a shard equal to a table of `keys` rows
//! (key, latest value), one key updated per command.

use futures::channel::oneshot;

use persist_playground::persist::codec::{Datum, Row};
use persist_playground::persist::{PersistClient, ShardId};
use persist_playground::runtime::JoinHandle;
use persist_playground::write_task::{
    now_fn, CommandSender, DifferentialIntrospectionConfig, DifferentialWriteTask, InitialDesired,
    ReadHandleFuture, StorageWriteOp, WriteTaskConfig, WriteTaskError,
};

use crate::common::{shard_id, Ctx};

#[derive(clap::Args, Debug)]
pub(crate) struct TaskArgs {
    /// The shard.
    #[arg(long, default_value = "s-task")]
    shard: String,
    /// Commands to send (0: until stopped).
    #[arg(long, default_value_t = 100)]
    count: u64,
    /// Commands per second (0: as fast as they are acknowledged).
    #[arg(long, default_value_t = 10)]
    rate: u64,
    /// The table's keys.
    #[arg(long, default_value_t = 10)]
    keys: i64,
    /// How often an idle task moves the upper to now, in ms.
    #[arg(long, default_value_t = 1000)]
    tick_ms: u64,
    /// Keep `desired` but never write (a process waiting to take over).
    #[arg(long)]
    read_only: bool,
}

pub(crate) async fn write_task(ctx: &Ctx, a: TaskArgs) -> Result<(), String> {
    let (rt, stop) = (&ctx.rt, &ctx.stop);
    let shard = shard_id(&a.shard)?;
    let keys = a.keys.max(1);
    let mut cfg = WriteTaskConfig::new(rt.clone());
    cfg.upper_tick_interval_ms = a.tick_ms.max(1);
    let log = cfg.log.clone();
    let (tx, handle, shutdown) = spawn_task(ctx.client(), &shard, a.read_only, cfg).await?;
    eprintln!(
        "[write-task] keeping {shard} equal to a table of {keys} keys{}",
        if a.read_only { " (read-only)" } else { "" }
    );
    let started = rt.now_ms();
    let (mut ok, mut refused) = (0u64, 0u64);
    let mut i = 0u64;
    while (a.count == 0 || i < a.count) && !stop.requested() {
        if let Some(offset) = (i * 1000).checked_div(a.rate) {
            rt.sleep_until(started + offset).await;
        }
        for answer in send_update(&tx, i, keys)? {
            match answer.await {
                Ok(Ok(())) => ok += 1,
                Ok(Err(e)) => {
                    refused += 1;
                    if refused <= 5 {
                        eprintln!("[write-task] command refused: {e}");
                    }
                }
                Err(_) => return Err("the write task ended without answering".into()),
            }
        }
        i += 1;
        if i % ctx.every == 0 {
            let events = log.take();
            eprintln!(
                "[write-task] {i} commands: {ok} durable, {refused} refused; {} task events since the last line",
                events.len()
            );
        }
    }
    let _ = shutdown.send(());
    handle.await;
    eprintln!("[write-task] done: {i} commands, {ok} durable, {refused} refused; task shut down");
    println!("commands {i} durable {ok} refused {refused}");
    Ok(())
}

/// Starts the task on `shard`, its desired table taken from what the shard holds (so the table
/// carries over a restart).
async fn spawn_task(
    client: PersistClient,
    shard: &ShardId,
    read_only: bool,
    cfg: WriteTaskConfig,
) -> Result<(CommandSender, JoinHandle<()>, oneshot::Sender<()>), String> {
    let write = client
        .open_writer::<Row, ()>(shard)
        .await
        .map_err(|e| e.to_string())?;
    let (c, s) = (client.clone(), shard.clone());
    let read_handle_fn = move || -> ReadHandleFuture {
        let (c, s) = (c.clone(), s.clone());
        Box::pin(async move { c.open_leased_reader::<Row, ()>(&s).await })
    };
    let introspection = DifferentialIntrospectionConfig {
        initial_desired: InitialDesired::FromShard {
            retain: Box::new(|_| true),
        },
    };
    let now = now_fn(&cfg.runtime);
    DifferentialWriteTask::spawn(
        shard.0.clone(),
        write,
        read_handle_fn,
        read_only,
        now,
        introspection,
        cfg,
    )
    .map_err(|e| e.to_string())
}

/// Command `i`: key `i % keys` gets the value `v{i}` (a delete of the key's row, then an append).
fn send_update(
    tx: &CommandSender,
    i: u64,
    keys: i64,
) -> Result<Vec<oneshot::Receiver<Result<(), WriteTaskError>>>, String> {
    let key_of = |r: &Row| match r.0.first() {
        Some(Datum::Int(k)) => *k,
        _ => i64::MIN,
    };
    let k = (i % keys as u64) as i64;
    let row = Row::new([Datum::Int(k), Datum::String(format!("v{i}"))]);
    let ops = [
        StorageWriteOp::Delete {
            filter: Box::new(move |r: &Row| key_of(r) == k),
        },
        StorageWriteOp::Append {
            updates: vec![(row, 1)],
        },
    ];
    let mut answers = Vec::new();
    for op in ops {
        let (resp_tx, resp_rx) = oneshot::channel();
        tx.unbounded_send((op, resp_tx))
            .map_err(|_| "the write task ended".to_string())?;
        answers.push(resp_rx);
    }
    Ok(answers)
}
