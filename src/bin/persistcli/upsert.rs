//! `upsert-replica`: one upsert replica (upsert with continual feedback from its output shard),
//! fed by a seeded generator or by `KEY VALUE` / `KEY -` lines on stdin.

use std::cell::RefCell;
use std::rc::Rc;

use futures::channel::mpsc::{self, TryRecvError, UnboundedReceiver};

use persist_playground::upsert::driver::{start_replica, ReplicaExit};
use persist_playground::upsert::observe::{UpsertCounters, UpsertLog};
use persist_playground::upsert::replica::ReplicaConfig;
use persist_playground::upsert::source::{GeneratorConfig, SourceGenerator, SourceLog};
use persist_playground::upsert::types::kv_row;

use crate::common::{shard_id, Ctx};

#[derive(clap::Args, Debug)]
pub(crate) struct UpsertArgs {
    /// The output shard.
    #[arg(long, default_value = "s-upsert")]
    shard: String,
    /// This replica's name in its progress lines.
    #[arg(long, default_value = "r")]
    name: String,
    /// Seed of the generator: replicas of one source must share it (the same upserts).
    #[arg(long, default_value_t = 0)]
    source_seed: u64,
    /// Keys are drawn from 0..KEYS.
    #[arg(long, default_value_t = 8)]
    keys: u64,
    /// Bursts of upserts (each at one time) to generate (0: until stopped).
    #[arg(long, default_value_t = 100)]
    bursts: u64,
    /// Bursts per second (0: all at once).
    #[arg(long, default_value_t = 20)]
    rate: u64,
    /// Read `KEY VALUE` / `KEY -` lines from stdin (one time each) instead of generating.
    #[arg(long)]
    stdin: bool,
    /// Source messages the replica reads per step.
    #[arg(long, default_value_t = 4)]
    read_batch: usize,
}

/// `KEY VALUE` (a value: the row `[KEY, VALUE]`) or `KEY -` (a delete).
fn parse_upsert(line: &str) -> Result<(i64, Option<String>), String> {
    let mut words = line.split_whitespace();
    let key = words
        .next()
        .ok_or("an empty line")?
        .parse::<i64>()
        .map_err(|e| format!("the key of {line:?}: {e}"))?;
    let value = words.next().ok_or(format!("{line:?} has no value"))?;
    if words.next().is_some() {
        return Err(format!("{line:?}: expected KEY VALUE or KEY -"));
    }
    Ok((key, (value != "-").then(|| value.to_string())))
}

/// Non-empty stdin lines, read on a thread of their own.
fn stdin_lines() -> UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(l) if l.trim().is_empty() => continue,
                Ok(l) => {
                    if tx.unbounded_send(l).is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    });
    rx
}

/// What feeds the source: stdin lines, or the generator at `rate` bursts per second.
struct Feeder {
    name: String,
    lines: Option<UnboundedReceiver<String>>,
    stdin_closed: bool,
    generator: SourceGenerator,
    generated: u64,
    bursts: u64,
    interval: u64,
    next_burst: u64,
}

impl Feeder {
    /// Moves what is due into `source`.
    fn feed(&mut self, source: &RefCell<SourceLog>, now: u64) -> Result<(), String> {
        if let Some(rx) = self.lines.as_mut() {
            loop {
                match rx.try_recv() {
                    Ok(line) => match parse_upsert(&line) {
                        Ok((key, value)) => {
                            let mut s = source.borrow_mut();
                            let ts = s.upper().max(1);
                            let value = value.map(|v| Ok(kv_row(key, &v)));
                            s.push(key, value, ts).map_err(|e| e.to_string())?;
                            s.seal(ts + 1);
                        }
                        Err(e) => eprintln!("[upsert-replica {}] skipped: {e}", self.name),
                    },
                    Err(TryRecvError::Closed) => {
                        self.stdin_closed = true;
                        break;
                    }
                    Err(TryRecvError::Empty) => break,
                }
            }
            return Ok(());
        }
        while now >= self.next_burst && !self.generated_all() {
            self.generator.burst(&mut source.borrow_mut());
            self.generated += 1;
            self.next_burst += self.interval;
            if self.interval == 0 && self.bursts == 0 {
                break;
            }
        }
        Ok(())
    }

    fn generated_all(&self) -> bool {
        self.bursts != 0 && self.generated >= self.bursts
    }

    /// The source has all it will ever have.
    fn done(&self) -> bool {
        if self.lines.is_some() {
            self.stdin_closed
        } else {
            self.generated_all()
        }
    }
}

pub(crate) async fn upsert_replica(ctx: &Ctx, o: UpsertArgs) -> Result<(), String> {
    let (rt, stop) = (&ctx.rt, &ctx.stop);
    let shard = shard_id(&o.shard)?;
    let client = ctx.client();
    let source = Rc::new(RefCell::new(SourceLog::new()));
    let gen_cfg = GeneratorConfig {
        keys: o.keys.max(1),
        ..GeneratorConfig::default()
    };
    let mut feeder = Feeder {
        name: o.name.clone(),
        lines: o.stdin.then(stdin_lines),
        stdin_closed: false,
        generator: SourceGenerator::new(o.source_seed, gen_cfg, 1),
        generated: 0,
        bursts: o.bursts,
        interval: 1000u64.checked_div(o.rate).unwrap_or(0),
        next_burst: rt.now_ms(),
    };
    // The source is "outside" the replica, like a topic: what it held before this process
    // started (the bursts below the shard's upper) is there at once.
    let upper = client
        .inspect_state(&shard)
        .await
        .ok()
        .and_then(|s| s.upper().as_option().copied())
        .unwrap_or(0);
    if !o.stdin {
        while source.borrow().upper() < upper && !feeder.generated_all() {
            feeder.generator.burst(&mut source.borrow_mut());
            feeder.generated += 1;
        }
    }
    let mut cfg = ReplicaConfig::new(&o.name, ctx.seed);
    cfg.read_batch = o.read_batch.max(1);
    cfg.caa_timeout_ms = 30_000;
    let log = UpsertLog::disabled();
    let running = start_replica(client, shard.clone(), Rc::clone(&source), cfg, 0, log)
        .await
        .map_err(|e| e.to_string())?;
    eprintln!(
        "[upsert-replica {}] started on {shard} at upper {upper} ({} bursts already in the source)",
        o.name, feeder.generated
    );
    let mut last_report = 0u64;
    let exit = loop {
        if stop.requested() {
            break None;
        }
        feeder.feed(&source, rt.now_ms())?;
        // SUBTLE: read after feeding, so the end test below sees the last burst.
        let (source_upper, messages) = {
            let s = source.borrow();
            (s.upper(), s.messages().len() as u64)
        };
        let (sink_upper, halted, counters) = {
            let r = running.replica.borrow();
            (r.sink_upper(), r.halted(), r.counters())
        };
        if let Some(h) = halted {
            break Some(h);
        }
        let now = rt.now_ms();
        if now >= last_report + 500 {
            last_report = now;
            eprintln!(
                "[upsert-replica {}] source upper {source_upper} ({messages} upserts), shard upper {}, {} appends, lost {} ranges to peers",
                o.name,
                sink_upper.map_or("[]".into(), |u| u.to_string()),
                counters.sink_appends,
                counters.sink_mismatches,
            );
        }
        if feeder.done() && sink_upper.is_some_and(|u| u >= source_upper) && source_upper > 0 {
            eprintln!(
                "[upsert-replica {}] the shard holds the whole source (upper {source_upper})",
                o.name
            );
            break None;
        }
        rt.sleep(10).await;
    };
    let counters = running.replica.borrow().counters();
    finish(&o.name, exit, running.stop().await, counters)
}

/// How the run ended, from why the loop ended (`Some`: the replica halted) and how it stopped.
fn finish(
    name: &str,
    exit: Option<String>,
    how: ReplicaExit,
    counters: UpsertCounters,
) -> Result<(), String> {
    match (exit, how) {
        (None, ReplicaExit::Stopped) => {
            eprintln!("[upsert-replica {name}] stopped; leases expired");
            let summary = format!(
                "done: {} appends, {} ranges lost to peers, {} updates dropped below a peer's upper",
                counters.sink_appends, counters.sink_mismatches, counters.sink_dropped
            );
            eprintln!("[upsert-replica {name}] {summary}");
            println!("{summary}");
            Ok(())
        }
        (Some(reason), _) | (None, ReplicaExit::Halted(reason)) => {
            Err(format!("the replica halted: {reason}"))
        }
    }
}
