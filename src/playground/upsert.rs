//! Upsert replicas in the playground: one shared source log of upserts (pushed by hand or by the
//! seeded generator) and replica actors that race to write the output shard, each learning its
//! state only from what the shard holds (the feedback edge).
//!
//! Each replica runs in its own process like any actor: its client and storage gate are the
//! process's, so crashing the process stops the replica mid-command and a restart resumes it from
//! the shard's upper. A checker on the raw location compares the shard with the reference model
//! at every upper it reaches.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use serde::Serialize;

use super::actors::{ActorCtx, ActorState};
use super::log::{Outcome, Pending};
use crate::persist::codec::Timestamp;
use crate::persist::{PersistClient, ShardId};
use crate::runtime::{JoinHandle, Runtime};
use crate::upsert::driver::start_replica;
use crate::upsert::observe::UpsertLog;
use crate::upsert::reference::{run_checker, CheckerReport};
use crate::upsert::replica::{Replica, ReplicaConfig, ReplicaSnapshot};
use crate::upsert::source::{GeneratorConfig, SourceGenerator, SourceLog};
use crate::upsert::types::kv_row;

/// The shard every replica writes.
pub const UPSERT_SHARD: &str = "upsert_out";
/// How often the generator adds a burst while it is on.
pub const GENERATOR_PERIOD_MS: u64 = 250;
/// How many recent source messages a snapshot shows.
const RECENT_MESSAGES: usize = 10;

/// A replica's running core, shared with the scenario for snapshots and manual steps.
pub type ReplicaSlot = Rc<RefCell<Option<Rc<RefCell<Replica>>>>>;

/// One source message as the panel shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageView {
    /// Its offset in the log.
    pub offset: u64,
    /// Its key.
    pub key: i64,
    /// Its value (`None`: a delete).
    pub value: Option<String>,
    /// Its time.
    pub ts: Timestamp,
}

/// The pipeline's shared side, as the panel shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpsertView {
    /// The source log's upper (its frontier).
    pub source_upper: Timestamp,
    /// Messages in the source log.
    pub source_messages: u64,
    /// Whether the generator is on.
    pub generating: bool,
    /// The newest messages, oldest first.
    pub recent: Vec<MessageView>,
    /// What the checker found.
    pub checker: CheckerReport,
}

/// The shared source, generator, log and checker of a scenario's replicas.
pub struct UpsertHub {
    pub(crate) source: Rc<RefCell<SourceLog>>,
    generator: Rc<RefCell<SourceGenerator>>,
    generating: Rc<Cell<bool>>,
    pub(crate) log: UpsertLog<Timestamp>,
    report: Rc<RefCell<CheckerReport>>,
    _tasks: Vec<JoinHandle<()>>,
}

impl UpsertHub {
    /// Starts the generator task (off until switched on) and the checker.
    pub fn start(runtime: &Runtime, checker_client: PersistClient, seed: u64) -> Self {
        let source = Rc::new(RefCell::new(SourceLog::new()));
        let generator = Rc::new(RefCell::new(SourceGenerator::new(
            seed,
            GeneratorConfig::default(),
            1,
        )));
        let generating = Rc::new(Cell::new(false));
        let report = Rc::default();
        let (g, s, on, rt) = (
            Rc::clone(&generator),
            Rc::clone(&source),
            Rc::clone(&generating),
            runtime.clone(),
        );
        let gen_task = runtime.spawn("upsert generator", async move {
            loop {
                rt.sleep(GENERATOR_PERIOD_MS).await;
                if on.get() {
                    g.borrow_mut().burst(&mut s.borrow_mut());
                }
            }
        });
        let shard = ShardId(UPSERT_SHARD.to_string());
        let checker = runtime.spawn(
            "upsert checker",
            run_checker(
                checker_client,
                shard,
                Rc::clone(&source),
                Rc::clone(&report),
            ),
        );
        UpsertHub {
            source,
            generator,
            generating,
            log: UpsertLog::new(),
            report,
            _tasks: vec![gen_task, checker],
        }
    }

    /// Turns the generator on or off.
    pub fn set_generating(&self, on: bool) {
        self.generating.set(on);
    }

    /// Pushes one upsert at the source's upper and seals the log past it.
    pub fn push(&self, key: i64, value: Option<&str>) -> Result<u64, String> {
        let mut source = self.source.borrow_mut();
        let ts = source.upper();
        let offset = source.push(key, value.map(|v| Ok(kv_row(key, v))), ts)?;
        source.seal(ts + 1);
        Ok(offset)
    }

    /// One generator burst now.
    pub fn burst(&self) -> Timestamp {
        self.generator
            .borrow_mut()
            .burst(&mut self.source.borrow_mut())
    }

    /// The panel's data.
    pub fn view(&self) -> UpsertView {
        let source = self.source.borrow();
        let messages = source.messages();
        let recent = messages[messages.len().saturating_sub(RECENT_MESSAGES)..]
            .iter()
            .map(|m| MessageView {
                offset: m.offset,
                key: m.key,
                value: m.value.as_ref().map(|v| match v {
                    Ok(row) => row.to_string(),
                    Err(e) => format!("error: {e:?}"),
                }),
                ts: m.ts,
            })
            .collect();
        UpsertView {
            source_upper: source.upper(),
            source_messages: messages.len() as u64,
            generating: self.generating.get(),
            recent,
            checker: self.report.borrow().clone(),
        }
    }

    /// Moves the replicas' events into the merged log.
    pub fn pump_into(&self, log: &mut super::log::MergedLog) {
        for e in self.log.take() {
            let actor = e.who.split('#').next().map(str::to_string);
            log.record(Pending {
                at_ms: e.at_ms,
                actor,
                process: None,
                component: "upsert",
                kind: "upsert".into(),
                outcome: Outcome::Info,
                detail: format!("{}: {:?}", e.who, e.kind),
            });
        }
    }

    /// The replica's snapshot, if it is up.
    pub fn replica_snapshot(&self, slot: &ReplicaSlot) -> Option<ReplicaSnapshot> {
        let r = slot.borrow();
        let source = self.source.borrow();
        r.as_ref().map(|r| r.borrow().snapshot(&source))
    }
}

/// A replica actor: starts a replica (its writer, persist source and driver) in its process and
/// keeps it until dropped (a crash or a removal aborts it).
pub async fn run_replica(
    ctx: Rc<ActorCtx>,
    read_batch: u32,
    source: Rc<RefCell<SourceLog>>,
    log: UpsertLog<Timestamp>,
    slot: ReplicaSlot,
    generation: u64,
) {
    let mut cfg = ReplicaConfig::new(&ctx.id, ctx.seed);
    cfg.read_batch = read_batch as usize;
    let shard = ShardId(UPSERT_SHARD.to_string());
    let running = match start_replica(ctx.client.clone(), shard, source, cfg, generation, log).await
    {
        Ok(r) => r,
        Err(e) => return ctx.fail("upsert", "start replica", e),
    };
    *slot.borrow_mut() = Some(Rc::clone(&running.replica));
    ctx.register(&format!("{}#{generation}", ctx.id));
    ctx.event(
        "upsert",
        "start",
        Outcome::Info,
        format!(
            "replica {}#{generation} started from the shard's upper",
            ctx.id
        ),
    );
    let rt = ctx.runtime.clone();
    loop {
        rt.sleep(200).await;
        let halted = running.replica.borrow().halted();
        if let Some(why) = halted {
            ctx.view.borrow_mut().state = ActorState::Failed;
            return ctx.fail("upsert", "replica halted", why);
        }
    }
}
