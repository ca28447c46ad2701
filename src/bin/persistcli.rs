//! `persistcli`: one component per OS process, against `--consensus URL --blob URL` (native
//! only). Several processes on one shard race through the database exactly as browser tabs race
//! through one IndexedDB.
//!
//! Subcommands: `writer`, `reader`, `write-task`, `upsert-replica`, `oracle`, `bench`,
//! `inspect SHARD`, `check SHARD`. Each prints what it is doing and its progress; Ctrl-C (SIGINT) or SIGTERM stops it between two commands: the
//! command in flight finishes, the handle's lease is expired, and nothing is half-written (a
//! compare_and_append is one compare_and_set, which commits whole or not at all).
//!
//! The writer's and the oracle's logs (`--log FILE`) are what a race test checks afterwards: the
//! writer writes `try KEY` before an attempt and `ack KEY LOWER UPPER` after a commit, the oracle
//! `ts T` for every timestamp it hands out, each line with one `write` call (so a SIGKILL loses
//! at most the line being written, never a line already acknowledged).

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(not(target_arch = "wasm32"))]
mod cli {
    use std::cell::{Cell, RefCell};
    use std::collections::BTreeMap;
    use std::fs::{File, OpenOptions};
    use std::io::Write;
    use std::process::ExitCode;
    use std::rc::Rc;

    use clap::{Parser, Subcommand, ValueEnum};
    use timely::progress::Antichain;

    use persist_playground::location::url::{open_location, redact_url};
    use persist_playground::location::{
        CaSResult, Consensus, ExternalError, Location, SeqNo, VersionedData, SCAN_ALL,
    };
    use persist_playground::oracle::{
        DurableOracleConfig, DurableTimestampOracle, NowFn, OracleError, TimestampOracle,
    };
    use persist_playground::persist::codec::Codec;
    use persist_playground::persist::read::ListenEvent;
    use persist_playground::persist::state::State;
    use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
    use persist_playground::playground::fact::{digest, AttemptOutcome, Fact};
    use persist_playground::playground::log::{Outcome, Pending};
    use persist_playground::playground::versions::VersionWitness;
    use persist_playground::playground::Journal;
    use persist_playground::runtime::tokio::TokioRuntime;
    use persist_playground::runtime::Runtime;

    #[derive(Parser, Debug)]
    #[command(
        name = "persistcli",
        about = "Run one persist component as its own process, on a location given by URLs."
    )]
    struct Args {
        /// Consensus: mem:// or postgres://USER:PASSWORD@HOST:PORT/DB
        #[arg(long, global = true, default_value = "mem://")]
        consensus: String,
        /// Blob: mem://, file:///DIR or s3://BUCKET/PREFIX?endpoint=URL
        #[arg(long, global = true, default_value = "mem://")]
        blob: String,
        /// Seed of this process's ids (writer and reader ids, idempotency tokens, part keys).
        /// Processes sharing a shard need different seeds; the default is the process id.
        #[arg(long, global = true)]
        seed: Option<u64>,
        /// Garbage-collect old state versions and blobs (off keeps the whole version chain in
        /// Consensus, so `check` can read a shard's history from its first version).
        #[arg(long, global = true, default_value_t = true, action = clap::ArgAction::Set)]
        gc: bool,
        /// Compact the shard in the background after appends (off: the write path alone).
        #[arg(long, global = true, default_value_t = true, action = clap::ArgAction::Set)]
        compaction: bool,
        /// Write a rollup of the whole state every this many seqnos (0: only those GC needs).
        #[arg(long, global = true, default_value_t = PersistConfig::default().rollup_threshold)]
        rollup_threshold: u64,
        /// Print progress every this many operations.
        #[arg(long, global = true, default_value_t = 100)]
        progress_every: u64,
        #[command(subcommand)]
        command: Command,
    }

    #[derive(Clone, Copy, Debug, ValueEnum)]
    enum Mode {
        /// compare_and_append at the writer's upper; on a mismatch adopt the shard's upper and
        /// write the same update there.
        Caa,
        /// append (for replicas writing identical data): a mismatch inside the interval trims.
        Append,
    }

    #[derive(Subcommand, Debug)]
    enum Command {
        /// Write `count` updates to a shard, one compare_and_append each.
        Writer {
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
        },
        /// Run a differential write task that keeps a shard equal to a table of `keys` rows
        /// (key, latest value), updating one key per command; other processes may write the
        /// same shard: the task re-syncs when it loses a race.
        WriteTask {
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
        },
        /// Run one upsert replica (upsert with continual feedback from its output shard) fed by a
        /// seeded generator or by `KEY VALUE` lines on stdin (`KEY -` deletes). Replicas in other
        /// processes may write the same shard: each keeps its state only from what the shard
        /// holds. Ends once the shard has every generated burst (or stdin closed), or on Ctrl-C.
        UpsertReplica {
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
        },
        /// Listen to a shard from `as_of` and print every update.
        Reader {
            /// The shard.
            #[arg(long, default_value = "s-demo")]
            shard: String,
            /// Read from this time on.
            #[arg(long, default_value_t = 0)]
            as_of: u64,
            /// Stop once the upper passes this time.
            #[arg(long)]
            until: Option<u64>,
        },
        /// Serve `count` write timestamps from a durable oracle on Consensus (and apply each).
        Oracle {
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
        },
        /// Measure compare_and_append per second on this location, and beside it (on a
        /// postgres:// Consensus) a raw single-row INSERT of the same bytes per version.
        Bench {
            /// The shard (use a fresh one).
            #[arg(long, default_value = "s-bench")]
            shard: String,
            /// compare_and_appends (and raw INSERTs) to time.
            #[arg(long, default_value_t = 2000)]
            count: u64,
        },
        /// Print a shard's frontiers, versions, batches and leases.
        Inspect {
            /// The shard.
            shard: String,
        },
        /// Check a shard's history in Consensus (the playground's history check) against the
        /// writers' logs: the version chain, acknowledged writes present exactly once.
        Check {
            /// The shard.
            shard: String,
            /// Writer logs (`--log` files of `persistcli writer`).
            #[arg(long = "acks")]
            acks: Vec<String>,
        },
    }

    /// Set by SIGINT/SIGTERM; commands check it between operations.
    #[derive(Clone, Default)]
    struct Stop(Rc<Cell<bool>>);

    impl Stop {
        fn requested(&self) -> bool {
            self.0.get()
        }

        /// Completes once a stop was requested (checks every 50 ms of the runtime's clock).
        async fn wait(&self, rt: &Runtime) {
            while !self.requested() {
                rt.sleep(50).await;
            }
        }
    }

    fn watch_signals(stop: &Stop) {
        let flag = stop.0.clone();
        drop(tokio::task::spawn_local(async move {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(_) => return,
                };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {},
                _ = term.recv() => {},
            }
            eprintln!("[persistcli] stop requested: finishing the command in flight, then expiring leases");
            flag.set(true);
        }));
    }

    /// A log file written one line per `write` call.
    struct LineLog(Option<File>);

    impl LineLog {
        fn open(path: Option<&str>) -> Result<LineLog, String> {
            match path {
                None => Ok(LineLog(None)),
                Some(p) => OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map(|f| LineLog(Some(f)))
                    .map_err(|e| format!("cannot open log {p}: {e}")),
            }
        }

        fn line(&mut self, s: String) {
            if let Some(f) = &mut self.0 {
                let _ = f.write_all(format!("{s}\n").as_bytes());
            }
        }
    }

    fn shard_id(name: &str) -> Result<ShardId, String> {
        ShardId::new(name)
    }

    pub fn main() -> ExitCode {
        let args = Args::parse();
        let result = TokioRuntime::block_on(|rt| run(args, rt));
        match result {
            Ok(Ok(())) => ExitCode::SUCCESS,
            Ok(Err(e)) => {
                eprintln!("[persistcli] error: {e}");
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("[persistcli] error: cannot start the tokio runtime: {e}");
                ExitCode::FAILURE
            }
        }
    }

    async fn run(args: Args, rt: Runtime) -> Result<(), String> {
        let seed = args
            .seed
            .unwrap_or_else(|| u64::from(std::process::id()) ^ rt.now_ms().rotate_left(20));
        eprintln!(
            "[persistcli] consensus {}, blob {}",
            redact_url(&args.consensus),
            redact_url(&args.blob)
        );
        let location = open_location(&args.consensus, &args.blob, &rt)
            .await
            .map_err(|e| e.to_string())?;
        let stop = Stop::default();
        watch_signals(&stop);
        let every = args.progress_every.max(1);
        let cfg = PersistConfig {
            gc_enabled: args.gc,
            compaction_enabled: args.compaction,
            rollup_threshold: args.rollup_threshold,
            ..PersistConfig::default()
        };
        match args.command {
            Command::Writer {
                shard,
                name,
                count,
                start,
                rate,
                keys,
                mode,
                log,
            } => {
                let shard = shard_id(&shard)?;
                let log = LineLog::open(log.as_deref())?;
                let client = PersistClient::new(location, rt.clone(), cfg, seed);
                writer(
                    client, rt, shard, name, count, start, rate, keys, mode, log, stop, every,
                )
                .await
            }
            Command::WriteTask {
                shard,
                count,
                rate,
                keys,
                tick_ms,
                read_only,
            } => {
                let client = PersistClient::new(location, rt.clone(), cfg, seed);
                let opts = TaskOpts {
                    count,
                    rate,
                    keys: keys.max(1),
                    tick_ms,
                    read_only,
                };
                write_task(client, rt, shard_id(&shard)?, opts, stop, every).await
            }
            Command::UpsertReplica {
                shard,
                name,
                source_seed,
                keys,
                bursts,
                rate,
                stdin,
                read_batch,
            } => {
                let client = PersistClient::new(location, rt.clone(), cfg, seed);
                let opts = UpsertOpts {
                    name,
                    source_seed,
                    keys: keys.max(1),
                    bursts,
                    rate,
                    stdin,
                    read_batch: read_batch.max(1),
                    seed,
                };
                upsert_replica(client, rt, shard_id(&shard)?, opts, stop).await
            }
            Command::Reader {
                shard,
                as_of,
                until,
            } => reader(location, rt, seed, shard_id(&shard)?, as_of, until, stop).await,
            Command::Oracle {
                timeline,
                count,
                persist_interval_ms,
                log,
                confirm_leadership,
            } => {
                let log = LineLog::open(log.as_deref())?;
                let config = DurableOracleConfig::new(timeline)
                    .persist_interval_ms(persist_interval_ms)
                    .confirm_leadership(confirm_leadership);
                oracle(location, rt, config, count, log, stop, every).await
            }
            Command::Inspect { shard } => inspect(location, rt, seed, shard_id(&shard)?).await,
            Command::Bench { shard, count } => {
                bench(
                    location,
                    rt,
                    seed,
                    shard_id(&shard)?,
                    count,
                    &args.consensus,
                    cfg,
                )
                .await
            }
            Command::Check { shard, acks } => {
                check(location, rt, seed, shard_id(&shard)?, acks).await
            }
        }
    }

    fn client(location: Location, rt: &Runtime, seed: u64) -> PersistClient {
        PersistClient::new(location, rt.clone(), PersistConfig::default(), seed)
    }

    fn frontier(f: &Antichain<u64>) -> String {
        match f.as_option() {
            Some(t) => t.to_string(),
            None => "[] (finished)".into(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn writer(
        client: PersistClient,
        rt: Runtime,
        shard: ShardId,
        name: String,
        count: u64,
        start: u64,
        rate: u64,
        keys: u64,
        mode: Mode,
        mut log: LineLog,
        stop: Stop,
        every: u64,
    ) -> Result<(), String> {
        let mut write = client
            .open_writer::<String, String>(&shard)
            .await
            .map_err(|e| e.to_string())?;
        eprintln!(
            "[writer {name}] writer {} on shard {shard}, upper {}, mode {mode:?}, {} updates from #{start}",
            write.writer_id(),
            frontier(write.upper()),
            if count == 0 { "unbounded".to_string() } else { count.to_string() }
        );
        let (mut committed, mut mismatches) = (0u64, 0u64);
        let started = rt.now_ms();
        let mut i = start;
        while (count == 0 || i < start + count) && !stop.requested() {
            if let Some(offset) = ((i - start) * 1000).checked_div(rate) {
                rt.sleep_until(started + offset).await;
            }
            let value = format!("{name}-{i}");
            let key = if keys == 0 {
                value.clone()
            } else {
                format!("k{}", i % keys)
            };
            log.line(format!("try {key} {value}"));
            loop {
                let Some(lower) = write.upper().as_option().copied() else {
                    return Err(format!("shard {shard} is finished"));
                };
                let updates = vec![((key.clone(), value.clone()), lower, 1i64)];
                let (lo, hi) = (Antichain::from_elem(lower), Antichain::from_elem(lower + 1));
                let out = match mode {
                    Mode::Caa => write.compare_and_append(&updates, lo, hi).await,
                    Mode::Append => write.append(&updates, lo, hi).await,
                };
                match out.map_err(|e| e.to_string())? {
                    Ok(()) => {
                        committed += 1;
                        log.line(format!("ack {key} {value} {lower} {}", lower + 1));
                        break;
                    }
                    Err(_mismatch) => {
                        // The handle now knows the shard's upper: write there.
                        mismatches += 1;
                    }
                }
            }
            i += 1;
            if (i - start) % every == 0 {
                eprintln!(
                    "[writer {name}] {}/{} committed, {mismatches} mismatches, upper {}",
                    i - start,
                    if count == 0 {
                        "-".to_string()
                    } else {
                        count.to_string()
                    },
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

    struct TaskOpts {
        count: u64,
        rate: u64,
        keys: i64,
        tick_ms: u64,
        read_only: bool,
    }

    async fn write_task(
        client: PersistClient,
        rt: Runtime,
        shard: ShardId,
        opts: TaskOpts,
        stop: Stop,
        every: u64,
    ) -> Result<(), String> {
        use persist_playground::persist::codec::{Datum, Row};
        use persist_playground::write_task::{
            now_fn, DifferentialIntrospectionConfig, DifferentialWriteTask, InitialDesired,
            ReadHandleFuture, StorageWriteOp, WriteTaskConfig,
        };
        let write = client
            .open_writer::<Row, ()>(&shard)
            .await
            .map_err(|e| e.to_string())?;
        let (c, s) = (client.clone(), shard.clone());
        let read_handle_fn = move || -> ReadHandleFuture {
            let (c, s) = (c.clone(), s.clone());
            Box::pin(async move { c.open_leased_reader::<Row, ()>(&s).await })
        };
        let mut cfg = WriteTaskConfig::new(rt.clone());
        cfg.upper_tick_interval_ms = opts.tick_ms.max(1);
        let log = cfg.log.clone();
        // The table carries over a restart: start from what the shard holds.
        let introspection = DifferentialIntrospectionConfig {
            initial_desired: InitialDesired::FromShard {
                retain: Box::new(|_| true),
            },
        };
        let (tx, handle, shutdown) = DifferentialWriteTask::spawn(
            shard.0.clone(),
            write,
            read_handle_fn,
            opts.read_only,
            now_fn(&rt),
            introspection,
            cfg,
        )
        .map_err(|e| e.to_string())?;
        eprintln!(
            "[write-task] keeping {shard} equal to a table of {} keys{}",
            opts.keys,
            if opts.read_only { " (read-only)" } else { "" }
        );
        let key_of = |r: &Row| match r.0.first() {
            Some(Datum::Int(k)) => *k,
            _ => i64::MIN,
        };
        let started = rt.now_ms();
        let (mut ok, mut refused) = (0u64, 0u64);
        let mut i = 0u64;
        while (opts.count == 0 || i < opts.count) && !stop.requested() {
            if let Some(offset) = (i * 1000).checked_div(opts.rate) {
                rt.sleep_until(started + offset).await;
            }
            let k = (i % opts.keys as u64) as i64;
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
                let (resp_tx, resp_rx) = futures::channel::oneshot::channel();
                tx.unbounded_send((op, resp_tx))
                    .map_err(|_| "the write task ended".to_string())?;
                answers.push(resp_rx);
            }
            for a in answers {
                match a.await {
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
            if i % every == 0 {
                let events = log.take();
                eprintln!(
                    "[write-task] {i} commands: {ok} durable, {refused} refused; {} task events since the last line",
                    events.len()
                );
            }
        }
        let _ = shutdown.send(());
        handle.await;
        eprintln!(
            "[write-task] done: {i} commands, {ok} durable, {refused} refused; task shut down"
        );
        println!("commands {i} durable {ok} refused {refused}");
        Ok(())
    }

    async fn reader(
        location: Location,
        rt: Runtime,
        seed: u64,
        shard: ShardId,
        as_of: u64,
        until: Option<u64>,
        stop: Stop,
    ) -> Result<(), String> {
        let client = client(location, &rt, seed);
        let read = client
            .open_leased_reader::<String, String>(&shard)
            .await
            .map_err(|e| e.to_string())?;
        eprintln!("[reader] listening to {shard} from {as_of}");
        let mut listen = read
            .listen(Antichain::from_elem(as_of))
            .await
            .map_err(|e| e.to_string())?;
        let mut seen = 0u64;
        'outer: while !stop.requested() {
            // A stop request drops the pending `next`: whatever it had not returned was not
            // printed, and nothing is reported complete beyond what was.
            let next = listen.next();
            let stopped = stop.wait(&rt);
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
                        match (f.as_option(), until) {
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

    struct UpsertOpts {
        name: String,
        source_seed: u64,
        keys: u64,
        bursts: u64,
        rate: u64,
        stdin: bool,
        read_batch: usize,
        seed: u64,
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

    async fn upsert_replica(
        client: PersistClient,
        rt: Runtime,
        shard: ShardId,
        o: UpsertOpts,
        stop: Stop,
    ) -> Result<(), String> {
        use persist_playground::upsert::driver::{start_replica, ReplicaExit};
        use persist_playground::upsert::observe::UpsertLog;
        use persist_playground::upsert::replica::ReplicaConfig;
        use persist_playground::upsert::source::{GeneratorConfig, SourceGenerator, SourceLog};
        use persist_playground::upsert::types::kv_row;

        let source = Rc::new(std::cell::RefCell::new(SourceLog::new()));
        let gen_cfg = GeneratorConfig {
            keys: o.keys,
            ..GeneratorConfig::default()
        };
        let mut generator = SourceGenerator::new(o.source_seed, gen_cfg, 1);
        let mut generated = 0u64;
        // The source is "outside" the replica, like a topic: what it held before this process
        // started (the bursts below the shard's upper) is there at once.
        let upper = client
            .inspect_state(&shard)
            .await
            .ok()
            .and_then(|s| s.upper().as_option().copied())
            .unwrap_or(0);
        if !o.stdin {
            while source.borrow().upper() < upper && (o.bursts == 0 || generated < o.bursts) {
                generator.burst(&mut source.borrow_mut());
                generated += 1;
            }
        }
        let mut cfg = ReplicaConfig::new(&o.name, o.seed);
        cfg.read_batch = o.read_batch;
        cfg.caa_timeout_ms = 30_000;
        let running = start_replica(
            client,
            shard.clone(),
            Rc::clone(&source),
            cfg,
            0,
            UpsertLog::disabled(),
        )
        .await
        .map_err(|e| e.to_string())?;
        eprintln!(
            "[upsert-replica {}] started on {shard} at upper {upper} ({generated} bursts already in the source)",
            o.name
        );
        let lines = if o.stdin {
            let (tx, rx) = futures::channel::mpsc::unbounded::<String>();
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
            Some(rx)
        } else {
            None
        };
        let mut lines = lines;
        let mut stdin_closed = false;
        let interval = 1000u64.checked_div(o.rate).unwrap_or(0);
        let mut next_burst = rt.now_ms();
        let mut last_report = 0u64;
        let exit = loop {
            if stop.requested() {
                break None;
            }
            // Feed the source.
            if let Some(rx) = lines.as_mut() {
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
                            Err(e) => eprintln!("[upsert-replica {}] skipped: {e}", o.name),
                        },
                        Err(futures::channel::mpsc::TryRecvError::Closed) => {
                            stdin_closed = true;
                            break;
                        }
                        Err(futures::channel::mpsc::TryRecvError::Empty) => break,
                    }
                }
            } else if o.bursts == 0 || generated < o.bursts {
                while rt.now_ms() >= next_burst && (o.bursts == 0 || generated < o.bursts) {
                    generator.burst(&mut source.borrow_mut());
                    generated += 1;
                    next_burst += interval;
                    if interval == 0 && o.bursts == 0 {
                        break;
                    }
                }
            }
            // SUBTLE: read after feeding, so the end test below sees the last burst.
            let (source_upper, messages) = {
                let s = source.borrow();
                (s.upper(), s.messages().len() as u64)
            };
            let source_done = if o.stdin {
                stdin_closed
            } else {
                o.bursts != 0 && generated >= o.bursts
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
            if source_done && sink_upper.is_some_and(|u| u >= source_upper) && source_upper > 0 {
                eprintln!(
                    "[upsert-replica {}] the shard holds the whole source (upper {source_upper})",
                    o.name
                );
                break None;
            }
            rt.sleep(10).await;
        };
        let counters = running.replica.borrow().counters();
        let how = running.stop().await;
        match (exit, how) {
            (None, ReplicaExit::Stopped) => {
                eprintln!("[upsert-replica {}] stopped; leases expired", o.name);
                let summary = format!(
                    "done: {} appends, {} ranges lost to peers, {} updates dropped below a peer's upper",
                    counters.sink_appends, counters.sink_mismatches, counters.sink_dropped
                );
                eprintln!("[upsert-replica {}] {summary}", o.name);
                println!("{summary}");
                Ok(())
            }
            (Some(reason), _) | (None, ReplicaExit::Halted(reason)) => {
                Err(format!("the replica halted: {reason}"))
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn oracle(
        location: Location,
        rt: Runtime,
        config: DurableOracleConfig,
        count: u64,
        mut log: LineLog,
        stop: Stop,
        every: u64,
    ) -> Result<(), String> {
        let timeline = config.timeline.clone();
        let oracle = DurableTimestampOracle::open(
            location.consensus.clone(),
            rt.clone(),
            NowFn::from_runtime(&rt),
            0,
            config,
        )
        .await
        .map_err(|e| e.to_string())?;
        let snap = oracle.snapshot();
        eprintln!("[oracle] timeline {timeline}: {snap:?}");
        let mut served = 0u64;
        while (count == 0 || served < count) && !stop.requested() {
            let ts = match oracle.write_ts().await {
                Ok(ts) => ts,
                Err(e @ OracleError::Fenced { .. }) => {
                    // A newer instance took the timeline over: this one's work is done.
                    eprintln!("[oracle] fenced after {served} write timestamps: {e}");
                    println!("served {served} fenced");
                    return Ok(());
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
                    eprintln!("[oracle] fenced after {served} write timestamps: {e}");
                    println!("served {} fenced", served + 1);
                    return Ok(());
                }
                Err(e) => return Err(e.to_string()),
            }
            served += 1;
            if served % every == 0 {
                eprintln!("[oracle] {served} write timestamps, last {}", ts.timestamp);
            }
        }
        let read = oracle.read_ts().await.map_err(|e| e.to_string())?;
        eprintln!("[oracle] done: {served} write timestamps; read_ts {read}");
        println!("served {served} read_ts {read}");
        Ok(())
    }

    async fn bench(
        location: Location,
        rt: Runtime,
        seed: u64,
        shard: ShardId,
        count: u64,
        consensus_url: &str,
        cfg: PersistConfig,
    ) -> Result<(), String> {
        // Default knobs (but --gc): compaction, rollups and GC run as they would in use. Consensus calls
        // are counted, to say what one compare_and_append costs in round trips.
        let counted = Rc::new(CountingConsensus {
            inner: location.consensus.clone(),
            counts: RefCell::new(BTreeMap::new()),
        });
        let location = Location {
            blob: location.blob.clone(),
            consensus: counted.clone(),
        };
        let client = PersistClient::new(location.clone(), rt.clone(), cfg, seed);
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
        let last_seqno = client
            .inspect_state(&shard)
            .await
            .map_err(|e| e.to_string())?
            .seqno;
        let versions = location
            .consensus
            .scan(&shard.0, first_seqno.next(), SCAN_ALL)
            .await
            .map_err(|e| e.to_string())?;
        let bytes: usize = versions.iter().map(|v| v.data.len()).sum();
        let avg = bytes / versions.len().max(1);
        write.expire().await;
        let caa_rate = count as f64 * 1000.0 / caa_ms as f64;
        let calls: Vec<String> = counted
            .counts
            .borrow()
            .iter()
            .map(|(op, n)| format!("{op} {:.2}", *n as f64 / count as f64))
            .collect();
        println!(
            "consensus calls per compare_and_append: {}",
            calls.join(", ")
        );
        println!(
            "caa: {count} in {caa_ms} ms = {caa_rate:.0}/s ({} state versions for {count} appends: \
             maintenance adds the rest; {avg} bytes of state diff each)",
            last_seqno.0 - first_seqno.0
        );
        if !consensus_url.starts_with("postgres") {
            return Ok(());
        }
        // The raw baseline: one single-row INSERT of `avg` bytes per call, one connection.
        let (pg, conn) = tokio_postgres::connect(consensus_url, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        drop(tokio::task::spawn_local(async move {
            let _ = conn.await;
        }));
        pg.batch_execute(
            "CREATE TABLE IF NOT EXISTS bench_raw (id text, n bigint, data bytea, PRIMARY KEY (id, n))",
        )
        .await
        .map_err(|e| e.to_string())?;
        let payload = vec![7u8; avg];
        // Unique per run, so a second run on one database does not collide.
        let id = format!("raw-{seed}-{}", rt.now_ms());
        // Prepared once, like PostgresConsensus's statements: one round trip per INSERT.
        let insert = pg
            .prepare("INSERT INTO bench_raw (id, n, data) VALUES ($1, $2, $3)")
            .await
            .map_err(|e| e.to_string())?;
        let start = rt.now_ms();
        for n in 0..count as i64 {
            pg.execute(&insert, &[&id, &n, &payload])
                .await
                .map_err(|e| e.to_string())?;
        }
        let raw_ms = rt.now_ms().saturating_sub(start).max(1);
        let raw_rate = count as f64 * 1000.0 / raw_ms as f64;
        println!(
            "raw insert (prepared): {count} in {raw_ms} ms = {raw_rate:.0}/s ({avg} bytes each)"
        );
        // The same statement PostgresConsensus sends, alone: at its isolation level
        // (SERIALIZABLE), and at READ COMMITTED for comparison.
        pg.batch_execute(
            "CREATE TABLE IF NOT EXISTS bench_cas (shard text, sequence_number bigint, data bytea, \
             PRIMARY KEY (shard, sequence_number))",
        )
        .await
        .map_err(|e| e.to_string())?;
        let mut cas_rates = Vec::new();
        for (level, tag) in [("SERIALIZABLE", "s"), ("READ COMMITTED", "rc")] {
            pg.batch_execute(&format!(
                "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL {level}"
            ))
            .await
            .map_err(|e| e.to_string())?;
            let cas_id = format!("{id}-{tag}");
            let start = rt.now_ms();
            pg.execute(
                "INSERT INTO bench_cas VALUES ($1, 0, $2)",
                &[&cas_id, &payload],
            )
            .await
            .map_err(|e| e.to_string())?;
            let cas = pg
                .prepare(
                    "INSERT INTO bench_cas (shard, sequence_number, data) SELECT $1, $2, $3 \
                     WHERE (SELECT sequence_number FROM bench_cas WHERE shard = $1 \
                     ORDER BY sequence_number DESC LIMIT 1) = $4 ON CONFLICT DO NOTHING",
                )
                .await
                .map_err(|e| e.to_string())?;
            for n in 1..count as i64 {
                let inserted = pg
                    .execute(&cas, &[&cas_id, &n, &payload, &(n - 1)])
                    .await
                    .map_err(|e| e.to_string())?;
                if inserted != 1 {
                    return Err("bench_cas: a compare_and_set lost to nobody".into());
                }
            }
            let cas_ms = rt.now_ms().saturating_sub(start).max(1);
            let cas_rate = count as f64 * 1000.0 / cas_ms as f64;
            println!(
                "raw compare_and_set statement (prepared, {level}): {count} in {cas_ms} ms = {cas_rate:.0}/s"
            );
            cas_rates.push(cas_rate);
        }
        let cas_rate = cas_rates[0];
        println!(
            "ratio: caa / raw insert = {:.2}; caa / raw compare_and_set = {:.2}",
            caa_rate / raw_rate,
            caa_rate / cas_rate
        );
        Ok(())
    }

    /// Counts Consensus calls by operation (for `bench`).
    struct CountingConsensus {
        inner: Rc<dyn Consensus>,
        counts: RefCell<BTreeMap<&'static str, u64>>,
    }

    impl CountingConsensus {
        fn count(&self, op: &'static str) {
            *self.counts.borrow_mut().entry(op).or_default() += 1;
        }
    }

    #[async_trait::async_trait(?Send)]
    impl Consensus for CountingConsensus {
        async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
            self.count("head");
            self.inner.head(key).await
        }
        async fn compare_and_set(
            &self,
            key: &str,
            expected: Option<SeqNo>,
            new: VersionedData,
        ) -> Result<CaSResult, ExternalError> {
            self.count("compare_and_set");
            self.inner.compare_and_set(key, expected, new).await
        }
        async fn scan(
            &self,
            key: &str,
            from: SeqNo,
            limit: usize,
        ) -> Result<Vec<VersionedData>, ExternalError> {
            self.count("scan");
            self.inner.scan(key, from, limit).await
        }
        async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
            self.count("truncate");
            self.inner.truncate(key, seqno).await
        }
        async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
            self.count("list_keys");
            self.inner.list_keys().await
        }
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

    async fn inspect(
        location: Location,
        rt: Runtime,
        seed: u64,
        shard: ShardId,
    ) -> Result<(), String> {
        let versions = location
            .consensus
            .scan(&shard.0, SeqNo(0), SCAN_ALL)
            .await
            .map_err(|e| e.to_string())?;
        if versions.is_empty() {
            return Err(format!("shard {shard} has no versions"));
        }
        let client = client(location, &rt, seed);
        let state = client
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

    async fn check(
        location: Location,
        rt: Runtime,
        seed: u64,
        shard: ShardId,
        acks: Vec<String>,
    ) -> Result<(), String> {
        let logs: Vec<(String, WriterLog)> = acks
            .iter()
            .map(|p| read_log(p).map(|l| (p.clone(), l)))
            .collect::<Result<_, _>>()?;
        let mut problems: Vec<String> = Vec::new();

        // 1. The version chain: seqno + 1 each, from the earliest stored.
        let versions = location
            .consensus
            .scan(&shard.0, SeqNo(0), SCAN_ALL)
            .await
            .map_err(|e| e.to_string())?;
        if versions.is_empty() {
            return Err(format!("shard {shard} has no versions"));
        }
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

        // 2. The playground's history check over the Consensus log (from v1 when it is all
        // there) and the writers' acknowledgements.
        let journal = RefCell::new(Journal::default());
        let mut witness = VersionWitness::default();
        let from_start = versions[0].seqno.0 == 1;
        let client = client(location.clone(), &rt, seed);
        let baseline = if from_start {
            State::uninitialized(shard.clone())
        } else {
            client
                .inspect_state(&shard)
                .await
                .map_err(|e| e.to_string())?
        };
        witness
            .pass(&location, &shard.0, Some(&baseline), &journal, 0)
            .await;
        let mut passes = 0;
        loop {
            let before = journal.borrow().log.last_seq();
            witness.pass(&location, &shard.0, None, &journal, 1).await;
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
        let mut acked_total = 0u64;
        for (path, log) in &logs {
            for (k, v, lo, hi) in &log.acked {
                let mut kb = Vec::new();
                k.encode(&mut kb);
                let mut vb = Vec::new();
                v.encode(&mut vb);
                acked_total += 1;
                journal.borrow_mut().log.record(Pending {
                    at_ms: 2,
                    actor: Some(path.clone()),
                    process: None,
                    component: "writer",
                    kind: "compare_and_append".into(),
                    outcome: Outcome::Info,
                    detail: format!("{k} {v}"),
                    fact: Some(Fact::Append {
                        shard: shard.0.clone(),
                        writer: path.clone(),
                        mode: "compareAndAppend".into(),
                        lower: *lo,
                        upper: *hi,
                        outcome: AttemptOutcome::Committed,
                        updates: 1,
                        acked: vec![digest(&kb, &vb)],
                        current: None,
                    }),
                });
            }
        }
        journal.borrow_mut().pump();
        let report = journal.borrow().check.report();
        for v in &report.violations {
            problems.push(format!("{}: {}", v.rule, v.message));
        }
        for r in &report.rules {
            if r.checks > 0 || r.violations > 0 {
                println!(
                    "rule {:<16} {:>6} checks {:>3} violations {:>4} unverified",
                    r.rule, r.checks, r.violations, r.unverified
                );
            }
        }

        // 3. Exactly once, from a snapshot: every acknowledged value with multiplicity 1, and
        // nothing that no writer tried.
        let state = client
            .inspect_state(&shard)
            .await
            .map_err(|e| e.to_string())?;
        let mut snapshot_count: BTreeMap<(String, String), i64> = BTreeMap::new();
        if let Some(&upper) = state.upper().as_option() {
            if upper > 0 {
                let mut read = client
                    .open_leased_reader::<String, String>(&shard)
                    .await
                    .map_err(|e| e.to_string())?;
                let got = read
                    .snapshot_and_fetch(Antichain::from_elem(upper - 1))
                    .await
                    .map_err(|e| e.to_string())?;
                read.expire().await;
                for ((k, v), _, d) in got {
                    *snapshot_count.entry((k, v)).or_default() += d;
                }
            }
        }
        if !logs.is_empty() {
            let mut tried: BTreeMap<(String, String), ()> = BTreeMap::new();
            for (_, log) in &logs {
                for (k, v) in &log.tried {
                    tried.insert((k.clone(), v.clone()), ());
                }
                for (k, v, _, _) in &log.acked {
                    let n = snapshot_count
                        .get(&(k.clone(), v.clone()))
                        .copied()
                        .unwrap_or(0);
                    if n != 1 {
                        problems.push(format!("acknowledged {k}={v} is in the shard {n} times"));
                    }
                }
            }
            for ((k, v), n) in &snapshot_count {
                if !tried.contains_key(&(k.clone(), v.clone())) {
                    problems.push(format!(
                        "{k}={v} ({n:+}) is in the shard but no writer tried it"
                    ));
                }
                if *n != 1 {
                    problems.push(format!("{k}={v} has multiplicity {n}"));
                }
            }
        }
        eprintln!(
            "[check] {acked_total} acknowledged writes in {} logs; {} values in the shard at upper {}",
            logs.len(),
            snapshot_count.len(),
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
}
