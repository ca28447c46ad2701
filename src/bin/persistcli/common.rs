//! What every subcommand shares: its context (location, runtime, seed, knobs), the stop flag
//! Ctrl-C and SIGTERM set, line logs, and frontier printing.

use std::cell::Cell;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::rc::Rc;

use timely::progress::Antichain;

use persist_playground::location::{Location, SeqNo, VersionedData, SCAN_ALL};
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::Runtime;

/// One run's context, built from the global flags.
pub(crate) struct Ctx {
    pub(crate) location: Location,
    pub(crate) rt: Runtime,
    /// Seed of this process's ids.
    pub(crate) seed: u64,
    /// Persist's knobs (`--gc`, `--compaction`, `--rollup-threshold`).
    pub(crate) cfg: PersistConfig,
    pub(crate) stop: Stop,
    /// Print progress every this many operations (at least 1).
    pub(crate) every: u64,
    /// `--consensus` as given (the benchmark's raw baseline connects to it).
    pub(crate) consensus_url: String,
}

impl Ctx {
    /// A persist client on this location with the run's knobs.
    pub(crate) fn client(&self) -> PersistClient {
        self.client_on(self.location.clone())
    }

    /// A persist client on `location` with the run's knobs.
    /// A client over `location` with this process's runtime, config and seed. Its event log is
    /// off: no subcommand reads it, and recording every command is work a long-running writer
    /// would pay on each compare_and_append.
    pub(crate) fn client_on(&self, location: Location) -> PersistClient {
        PersistClient::new(location, self.rt.clone(), self.cfg.clone(), self.seed)
            .with_events(persist_playground::persist::events::EventLog::disabled())
    }

    /// Every version of `shard` Consensus holds, oldest first; an error if it holds none.
    pub(crate) async fn stored_versions(
        &self,
        shard: &ShardId,
    ) -> Result<Vec<VersionedData>, String> {
        let versions = self
            .location
            .consensus
            .scan(&shard.0, SeqNo(0), SCAN_ALL)
            .await
            .map_err(|e| e.to_string())?;
        if versions.is_empty() {
            return Err(format!("shard {shard} has no versions"));
        }
        Ok(versions)
    }

    /// A persist client with persist's default knobs (reading, inspecting, checking).
    pub(crate) fn default_client(&self) -> PersistClient {
        PersistClient::new(
            self.location.clone(),
            self.rt.clone(),
            PersistConfig::default(),
            self.seed,
        )
    }
}

/// Opens the location, retrying a failure that can heal for `budget_ms`: before each wait it
/// prints `[persistcli] cannot open the location yet: ERROR; retrying in MS ms (attempt N, MS of
/// BUDGET ms)`, and once open after a retry `[persistcli] location open after N retries`.
pub(crate) async fn open_location(
    consensus_url: &str,
    blob_url: &str,
    rt: &Runtime,
    budget_ms: u64,
) -> Result<Location, persist_playground::location::url::LocationError> {
    use persist_playground::location::url::{open_location_with, OpenRetry};
    let waits = Rc::new(Cell::new(0u32));
    let counted = Rc::clone(&waits);
    let retry = OpenRetry::within_ms(budget_ms).on_wait(move |e, w| {
        counted.set(counted.get().saturating_add(1));
        eprintln!(
            "[persistcli] cannot open the location yet: {e}; retrying in {} ms (attempt {}, {} of {} ms)",
            w.wait_ms, w.attempt, w.elapsed_ms, w.budget_ms
        );
    });
    let location = open_location_with(consensus_url, blob_url, rt, &retry).await?;
    if waits.get() > 0 {
        eprintln!("[persistcli] location open after {} retries", waits.get());
    }
    Ok(location)
}

/// Set by SIGINT/SIGTERM; commands check it between operations.
#[derive(Clone, Default)]
pub(crate) struct Stop(Rc<Cell<bool>>);

impl Stop {
    pub(crate) fn requested(&self) -> bool {
        self.0.get()
    }

    /// Completes once a stop was requested (checks every 50 ms of the runtime's clock).
    pub(crate) async fn wait(&self, rt: &Runtime) {
        while !self.requested() {
            rt.sleep(50).await;
        }
    }
}

/// Sets `stop` on the first SIGINT or SIGTERM.
pub(crate) fn watch_signals(stop: &Stop) {
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
        eprintln!(
            "[persistcli] stop requested: finishing the command in flight, then expiring leases"
        );
        flag.set(true);
    }));
}

/// A log file written one line per `write` call.
pub(crate) struct LineLog(Option<File>);

impl LineLog {
    pub(crate) fn open(path: Option<&str>) -> Result<LineLog, String> {
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

    pub(crate) fn line(&mut self, s: String) {
        if let Some(f) = &mut self.0 {
            let _ = f.write_all(format!("{s}\n").as_bytes());
        }
    }
}

pub(crate) fn shard_id(name: &str) -> Result<ShardId, String> {
    ShardId::new(name)
}

pub(crate) fn frontier(f: &Antichain<u64>) -> String {
    match f.as_option() {
        Some(t) => t.to_string(),
        None => "[] (finished)".into(),
    }
}

/// `count` for a progress line: `-` when unbounded (0).
pub(crate) fn of_count(count: u64) -> String {
    if count == 0 {
        "-".to_string()
    } else {
        count.to_string()
    }
}
