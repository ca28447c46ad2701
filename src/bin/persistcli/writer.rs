//! `writer` (compare_and_append or append, one update per call, logging each attempt and each
//! acknowledgement) and `reader` (listen and print).

use timely::progress::Antichain;

use persist_playground::persist::read::ListenEvent;
use persist_playground::persist::write::WriteHandle;

use crate::common::{frontier, of_count, shard_id, Ctx, LineLog};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum Mode {
    /// compare_and_append at the writer's upper; on a mismatch adopt the shard's upper and
    /// write the same update there.
    Caa,
    /// append (for replicas writing identical data): a mismatch inside the interval trims.
    Append,
}

#[derive(clap::Args, Debug)]
pub(crate) struct WriterArgs {
    /// The shard.
    #[arg(long, default_value = "s-demo")]
    shard: String,
    /// This writer's name: keys are NAME-0, NAME-1, ... (unique across writers).
    #[arg(long, default_value = "w")]
    name: String,
    /// How many updates to write (0: until stopped).
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Index of the first update (a restarted writer continues where its log ends).
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Writes per second (0: as fast as it can).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Values go to this many distinct keys (0: every update its own key).
    #[arg(long, default_value_t = 0)]
    keys: u64,
    /// How to write.
    #[arg(long, value_enum, default_value_t = Mode::Caa)]
    mode: Mode,
    /// Append `try KEY` / `ack KEY LOWER UPPER` lines here.
    #[arg(long)]
    log: Option<String>,
}

pub(crate) async fn writer(ctx: &Ctx, a: WriterArgs) -> Result<(), String> {
    let (rt, stop) = (&ctx.rt, &ctx.stop);
    let shard = shard_id(&a.shard)?;
    let mut log = LineLog::open(a.log.as_deref())?;
    let mut write = ctx
        .client()
        .open_writer::<String, String>(&shard)
        .await
        .map_err(|e| e.to_string())?;
    let name = &a.name;
    eprintln!(
        "[writer {name}] writer {} on shard {shard}, upper {}, mode {:?}, {} updates from #{}",
        write.writer_id(),
        frontier(write.upper()),
        a.mode,
        if a.count == 0 {
            "unbounded".to_string()
        } else {
            a.count.to_string()
        },
        a.start
    );
    let (mut committed, mut mismatches) = (0u64, 0u64);
    let started = rt.now_ms();
    let mut i = a.start;
    while (a.count == 0 || i < a.start + a.count) && !stop.requested() {
        if let Some(offset) = ((i - a.start) * 1000).checked_div(a.rate) {
            rt.sleep_until(started + offset).await;
        }
        let value = format!("{name}-{i}");
        let key = if a.keys == 0 {
            value.clone()
        } else {
            format!("k{}", i % a.keys)
        };
        log.line(format!("try {key} {value}"));
        let (lower, lost) = write_one(&mut write, a.mode, &key, &value).await?;
        committed += 1;
        mismatches += lost;
        log.line(format!("ack {key} {value} {lower} {}", lower + 1));
        i += 1;
        if (i - a.start) % ctx.every == 0 {
            eprintln!(
                "[writer {name}] {}/{} committed, {mismatches} mismatches, upper {}",
                i - a.start,
                of_count(a.count),
                frontier(write.upper())
            );
        }
    }
    let upper = frontier(write.upper());
    write.expire().await;
    eprintln!(
        "[writer {name}] done: {committed} committed, {mismatches} mismatches, upper {upper}; lease expired{}",
        if stop.requested() { " (stopped)" } else { "" }
    );
    println!("committed {committed} mismatches {mismatches}");
    Ok(())
}

/// Writes `(key, value)` at the writer's upper until it commits; on a mismatch the handle knows
/// the shard's upper, and the update goes there. The lower it committed at, and the races lost.
async fn write_one(
    write: &mut WriteHandle<String, String>,
    mode: Mode,
    key: &str,
    value: &str,
) -> Result<(u64, u64), String> {
    let mut lost = 0;
    loop {
        let Some(lower) = write.upper().as_option().copied() else {
            return Err(format!("shard {} is finished", write.shard_id()));
        };
        let updates = vec![((key.to_string(), value.to_string()), lower, 1i64)];
        let (lo, hi) = (Antichain::from_elem(lower), Antichain::from_elem(lower + 1));
        let out = match mode {
            Mode::Caa => write.compare_and_append(&updates, lo, hi).await,
            Mode::Append => write.append(&updates, lo, hi).await,
        };
        match out.map_err(|e| e.to_string())? {
            Ok(()) => return Ok((lower, lost)),
            Err(_mismatch) => lost += 1,
        }
    }
}

#[derive(clap::Args, Debug)]
pub(crate) struct ReaderArgs {
    /// The shard.
    #[arg(long, default_value = "s-demo")]
    shard: String,
    /// Read from this time on.
    #[arg(long, default_value_t = 0)]
    as_of: u64,
    /// Stop once the upper passes this time.
    #[arg(long)]
    until: Option<u64>,
}

pub(crate) async fn reader(ctx: &Ctx, a: ReaderArgs) -> Result<(), String> {
    let (rt, stop) = (&ctx.rt, &ctx.stop);
    let shard = shard_id(&a.shard)?;
    let read = ctx
        .default_client()
        .open_leased_reader::<String, String>(&shard)
        .await
        .map_err(|e| e.to_string())?;
    eprintln!("[reader] listening to {shard} from {}", a.as_of);
    let mut listen = read
        .listen(Antichain::from_elem(a.as_of))
        .await
        .map_err(|e| e.to_string())?;
    let mut seen = 0u64;
    'outer: while !stop.requested() {
        // A stop request drops the pending `next`: whatever it had not returned was not
        // printed, and nothing is reported complete beyond what was.
        let next = listen.next();
        let stopped = stop.wait(rt);
        futures::pin_mut!(next, stopped);
        let events = match futures::future::select(next, stopped).await {
            futures::future::Either::Right(_) => break 'outer,
            futures::future::Either::Left((r, _)) => r.map_err(|e| e.to_string())?,
        };
        for e in events {
            match e {
                ListenEvent::Updates(updates) => {
                    for ((k, v), t, d) in updates {
                        seen += 1;
                        println!("{t}\t{k}\t{v}\t{d:+}");
                    }
                }
                ListenEvent::Progress(f) => {
                    eprintln!("[reader] complete up to {} ({seen} updates)", frontier(&f));
                    match (f.as_option(), a.until) {
                        (None, _) => break 'outer,
                        (Some(t), Some(u)) if *t > u => break 'outer,
                        _ => {}
                    }
                }
            }
        }
    }
    listen.expire().await;
    eprintln!("[reader] done: {seen} updates; lease expired");
    Ok(())
}
