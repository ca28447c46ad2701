//! `persistcli`: one component per OS process, against `--consensus URL --blob URL` (native
//! only). Several processes on one shard race through the database exactly as browser tabs race
//! through one IndexedDB.
//!
//! Subcommands: `writer`, `reader`, `write-task`, `upsert-replica`, `oracle`, `bench`,
//! `inspect SHARD`, `check SHARD`, one module each. Each prints what it is doing and its
//! progress; Ctrl-C (SIGINT) or SIGTERM stops it between two commands: the command in flight
//! finishes, the handle's lease is expired, and nothing is half-written (a compare_and_append is
//! one compare_and_set, which commits whole or not at all).
//!
//! The writer's and the oracle's logs (`--log FILE`) are what a race test checks afterwards: the
//! writer writes `try KEY` before an attempt and `ack KEY LOWER UPPER` after a commit, the oracle
//! `ts T` for every timestamp it hands out, each line with one `write` call (so a SIGKILL loses
//! at most the line being written, never a line already acknowledged).

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
mod bench;
#[cfg(not(target_arch = "wasm32"))]
mod check;
#[cfg(not(target_arch = "wasm32"))]
mod common;
#[cfg(not(target_arch = "wasm32"))]
mod inspect;
#[cfg(not(target_arch = "wasm32"))]
mod oracle;
#[cfg(not(target_arch = "wasm32"))]
mod task;
#[cfg(not(target_arch = "wasm32"))]
mod upsert;
#[cfg(not(target_arch = "wasm32"))]
mod writer;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    use clap::Parser;
    use persist_playground::runtime::tokio::TokioRuntime;
    use std::process::ExitCode;

    let args = Args::parse();
    match TokioRuntime::block_on(|rt| run(args, rt)) {
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

#[cfg(not(target_arch = "wasm32"))]
use persist_playground::persist::PersistConfig;

#[cfg(not(target_arch = "wasm32"))]
#[derive(clap::Parser, Debug)]
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
    /// This process's commands on a shard take their compare_and_sets in turns instead of
    /// racing each other (`PersistConfig::command_turns`; false: the original's racing).
    #[arg(long, global = true, default_value_t = true, action = clap::ArgAction::Set)]
    command_turns: bool,
    /// Keep retrying to open the location for this long while it fails in a way that can heal
    /// (the server refuses the connection or is restarting: SQLSTATE 57P01, 57P02, 57P03),
    /// printing a `retrying` line before each wait; 0 tries once. A bad URL, an unknown host,
    /// wrong credentials or a missing database fail at once.
    #[arg(long, global = true, default_value_t = persist_playground::location::open_retry::DEFAULT_OPEN_BUDGET_MS)]
    open_retry_ms: u64,
    /// Print progress every this many operations.
    #[arg(long, global = true, default_value_t = 100)]
    progress_every: u64,
    #[command(subcommand)]
    command: Command,
}

#[cfg(not(target_arch = "wasm32"))]
#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Write `count` updates to a shard, one compare_and_append each.
    Writer(writer::WriterArgs),
    /// Run a differential write task that keeps a shard equal to a table of `keys` rows
    /// (key, latest value), updating one key per command; other processes may write the
    /// same shard: the task re-syncs when it loses a race.
    WriteTask(task::TaskArgs),
    /// Run one upsert replica (upsert with continual feedback from its output shard) fed by a
    /// seeded generator or by `KEY VALUE` lines on stdin (`KEY -` deletes). Replicas in other
    /// processes may write the same shard: each keeps its state only from what the shard
    /// holds. Ends once the shard has every generated burst (or stdin closed), or on Ctrl-C.
    UpsertReplica(upsert::UpsertArgs),
    /// Listen to a shard from `as_of` and print every update.
    Reader(writer::ReaderArgs),
    /// Serve `count` write timestamps from a durable oracle on Consensus (and apply each).
    Oracle(oracle::OracleArgs),
    /// Measure compare_and_append per second on this location, and beside it (on a
    /// postgres:// Consensus) a raw single-row INSERT of the same bytes per version.
    Bench(bench::BenchArgs),
    /// Print a shard's frontiers, versions, batches and leases.
    Inspect(inspect::InspectArgs),
    /// Check a shard's history in Consensus (the playground's history check) against the
    /// writers' logs: the version chain, acknowledged writes present exactly once.
    Check(check::CheckArgs),
}

/// Opens the location, watches for Ctrl-C and runs the subcommand.
#[cfg(not(target_arch = "wasm32"))]
async fn run(args: Args, rt: persist_playground::runtime::Runtime) -> Result<(), String> {
    use persist_playground::location::url::redact_url;

    let seed = args
        .seed
        .unwrap_or_else(|| u64::from(std::process::id()) ^ rt.now_ms().rotate_left(20));
    eprintln!(
        "[persistcli] consensus {}, blob {}",
        redact_url(&args.consensus),
        redact_url(&args.blob)
    );
    let location = common::open_location(&args.consensus, &args.blob, &rt, args.open_retry_ms)
        .await
        .map_err(|e| e.to_string())?;
    let stop = common::Stop::default();
    common::watch_signals(&stop);
    let ctx = common::Ctx {
        location,
        rt,
        seed,
        cfg: PersistConfig {
            gc_enabled: args.gc,
            compaction_enabled: args.compaction,
            rollup_threshold: args.rollup_threshold,
            command_turns: args.command_turns,
            ..PersistConfig::default()
        },
        stop,
        every: args.progress_every.max(1),
        consensus_url: args.consensus,
    };
    match args.command {
        Command::Writer(a) => writer::writer(&ctx, a).await,
        Command::WriteTask(a) => task::write_task(&ctx, a).await,
        Command::UpsertReplica(a) => upsert::upsert_replica(&ctx, a).await,
        Command::Reader(a) => writer::reader(&ctx, a).await,
        Command::Oracle(a) => oracle::oracle(&ctx, a).await,
        Command::Bench(a) => bench::bench(&ctx, a).await,
        Command::Inspect(a) => inspect::inspect(&ctx, a).await,
        Command::Check(a) => check::check(&ctx, a).await,
    }
}
