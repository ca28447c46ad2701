//! Upsert replicas in the playground: one shared source log of upserts (pushed by hand or by the
//! seeded generator) and replica actors that race to write the output shard, each learning its
//! state only from what the shard holds (the feedback edge).
//!
//! The source is durable (the `upsert_src` shard, see [`crate::playground::upsert_source`]), so it survives a
//! reload and tabs share it.
//!
//! Each replica runs in its own process like any actor: its client and storage gate are the
//! process's, so crashing the process stops the replica mid-command and a restart resumes it from
//! the shard's upper. A checker on the raw location compares the shard with the reference model
//! at every upper it reaches.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use serde::Serialize;

use crate::persist::codec::Codec;
use crate::persist::codec::Timestamp;
use crate::persist::{PersistClient, ShardId};
use crate::playground::actor::{ActorCtx, ActorState};
use crate::playground::command::UPSERT_SHARD;
use crate::playground::fact::{digest, Fact, MessageFact};
use crate::playground::journal::Journal;
use crate::playground::log::{plural, Outcome, Pending};
use crate::playground::upsert_source::{
    run_source_reader, run_source_writer, SourceError, SourceQueue,
};
use crate::playground::variants::upsert::start_own_feedback;
use crate::playground::walk::HandPush;
use crate::runtime::{JoinHandle, Runtime};
use crate::upsert::driver::start_replica;
use crate::upsert::error::ReplicaStartError;
use crate::upsert::observe::UpsertEventKind;
use crate::upsert::observe::UpsertLog;
use crate::upsert::reference::{check_contents, CheckerReport};
use crate::upsert::replica::{Replica, ReplicaConfig, ReplicaSnapshot};
use crate::upsert::source::{GeneratorConfig, SourceGenerator, SourceLog, SourceMessage};
use crate::upsert::types::kv_row;
use crate::upsert::types::{DataflowError, SourceData};

/// How often the generator adds a burst while it is on.
pub const GENERATOR_PERIOD_MS: u64 = 250;
/// How many hand pushes the hub keeps for a walk to take.
const MAX_HAND_PUSHES: usize = 64;
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
    /// The shard every replica writes ([`UPSERT_SHARD`]): the page names it from here.
    pub shard: &'static str,
    /// The source log's upper (its frontier).
    pub source_upper: Timestamp,
    /// Messages in the source log.
    pub source_messages: u64,
    /// Whether the generator is on.
    pub generating: bool,
    /// Whether it makes undecodable values on purpose.
    pub undecodable: bool,
    /// Upserts pushed or generated that are not yet in the source shard.
    pub queued: u64,
    /// The newest messages, oldest first.
    pub recent: Vec<MessageView>,
    /// Messages the generator made undecodable on purpose, so far.
    pub undecodable_messages: u64,
    /// The latest of them, kept in view however many messages followed it.
    pub last_undecodable: Option<MessageView>,
    /// What the checker found.
    pub checker: CheckerReport,
    /// The stage-by-stage walk of **Step replicas**, while one runs.
    pub walk: Option<crate::playground::walk::WalkView>,
    /// The walk that finished last, while the panel keeps its line.
    pub walk_done: Option<crate::playground::walk::WalkDoneView>,
    /// What the last **Step replicas** press did, until another command or the run moves on.
    pub press: Option<crate::playground::walk::PressView>,
}

/// The shared source, generator, log and checker of a scenario's replicas.
pub struct UpsertHub {
    pub(crate) source: Rc<RefCell<SourceLog>>,
    /// The upserts pushed by hand that no walk has taken yet, oldest first.
    pub(crate) hand: RefCell<Vec<HandPush>>,
    queue: SourceQueue,
    generating: Rc<Cell<bool>>,
    undecodable: Rc<Cell<bool>>,
    pub(crate) log: UpsertLog<Timestamp>,
    report: Rc<RefCell<CheckerReport>>,
    _tasks: Vec<JoinHandle<()>>,
}

impl UpsertHub {
    /// Starts the source's writer and reader (see [`crate::playground::upsert_source`]), the generator
    /// (off until switched on) and the checker. `client` works on the raw location.
    pub fn start(
        runtime: &Runtime,
        client: PersistClient,
        journal: Rc<RefCell<Journal>>,
        seed: u64,
    ) -> Self {
        let source = Rc::new(RefCell::new(SourceLog::new()));
        let queue: SourceQueue = Rc::default();
        let generating = Rc::new(Cell::new(false));
        let report = Rc::default();
        let mut generator = SourceGenerator::new(seed, GeneratorConfig::default(), 1);
        let undecodable = Rc::new(Cell::new(true));
        let errors = Rc::clone(&undecodable);
        let (q, on, rt) = (Rc::clone(&queue), Rc::clone(&generating), runtime.clone());
        let gen_task = runtime.spawn("upsert generator", async move {
            loop {
                rt.sleep(GENERATOR_PERIOD_MS).await;
                if on.get() {
                    // The generator writes a burst into a scratch log; the burst goes to the
                    // source shard, which gives every message its time.
                    let mut scratch = SourceLog::new();
                    generator.set_undecodable(errors.get());
                    generator.burst(&mut scratch);
                    let mut q = q.borrow_mut();
                    q.extend(scratch.messages().iter().map(|m| (m.key, m.value.clone())));
                }
            }
        });
        let failed = |what: &'static str, journal: Rc<RefCell<Journal>>, rt: Runtime| {
            move |result: Result<(), SourceError>| {
                if let Err(e) = result {
                    journal.borrow_mut().notice(
                        rt.now_ms(),
                        true,
                        format!("upsert source {what} stopped: {e}"),
                    );
                }
            }
        };
        let on_writer = failed("writer", Rc::clone(&journal), runtime.clone());
        let writer_task = {
            let fut = run_source_writer(client.clone(), Rc::clone(&queue));
            runtime.spawn("upsert source writer", async move { on_writer(fut.await) })
        };
        let facts = runtime.spawn(
            "upsert source facts",
            source_facts(runtime.clone(), Rc::clone(&source), Rc::clone(&journal)),
        );
        let on_reader = failed("reader", journal, runtime.clone());
        let reader_task = {
            let fut = run_source_reader(client.clone(), Rc::clone(&source));
            runtime.spawn("upsert source reader", async move { on_reader(fut.await) })
        };
        let checker = runtime.spawn(
            "upsert checker",
            run_output_checker(client, Rc::clone(&source), Rc::clone(&report)),
        );
        UpsertHub {
            source,
            hand: RefCell::default(),
            queue,
            generating,
            undecodable,
            log: UpsertLog::new(),
            report,
            _tasks: vec![gen_task, writer_task, reader_task, checker, facts],
        }
    }

    /// Turns the generator on or off.
    pub fn set_generating(&self, on: bool) {
        self.generating.set(on);
    }

    /// Whether the generator is on.
    pub fn generating(&self) -> bool {
        self.generating.get()
    }

    /// Whether the generator makes undecodable values on purpose.
    pub fn set_undecodable(&self, on: bool) {
        self.undecodable.set(on);
    }

    /// Queues one upsert for the source shard (it reaches the log once written and read back).
    pub fn push(&self, key: i64, value: Option<&str>) {
        let value = value.map(|v| Ok(kv_row(key, v)));
        let after = self
            .source
            .borrow()
            .messages()
            .last()
            .map_or(0, |m| m.offset);
        let mut hand = self.hand.borrow_mut();
        // Only a walk takes pushes (seed mode): live mode keeps the newest few.
        if hand.len() >= MAX_HAND_PUSHES {
            hand.remove(0);
        }
        hand.push(HandPush {
            key,
            value: value.clone(),
            after,
        });
        drop(hand);
        self.queue.borrow_mut().push((key, value));
    }

    /// The panel's data.
    pub fn view(&self) -> UpsertView {
        let source = self.source.borrow();
        let messages = source.messages();
        let recent = messages[messages.len().saturating_sub(RECENT_MESSAGES)..]
            .iter()
            .map(message_view)
            .collect();
        let (undecodable_messages, last_undecodable) = source.undecodable();
        UpsertView {
            shard: UPSERT_SHARD,
            source_upper: source.upper(),
            source_messages: messages.len() as u64,
            generating: self.generating.get(),
            undecodable: self.undecodable.get(),
            queued: self.queue.borrow().len() as u64,
            recent,
            undecodable_messages,
            last_undecodable: last_undecodable.map(message_view),
            checker: self.report.borrow().clone(),
            walk: None,
            walk_done: None,
            press: None,
        }
    }

    /// Moves the replicas' events into the merged log.
    pub fn pump_into(&self, log: &mut crate::playground::log::MergedLog) {
        for e in self.log.take() {
            // `U1#2`: the row names U1; the generation only once it restarted.
            let (actor, generation) = e.who.split_once('#').unwrap_or((&e.who, "0"));
            let text = upsert_text(&e.kind);
            log.record(Pending {
                at_ms: e.at_ms,
                actor: Some(actor.to_string()),
                process: None,
                component: "upsert",
                kind: "upsert".into(),
                outcome: Outcome::Info,
                detail: match generation {
                    "0" => text,
                    g => format!("generation {g}: {text}"),
                },
                fact: None,
            });
        }
    }

    /// The replica's snapshot, if it is up.
    pub fn replica_snapshot(&self, slot: &ReplicaSlot) -> Option<ReplicaSnapshot> {
        let r = slot.borrow();
        let source = self.source.borrow();
        r.as_ref().map(|r| {
            let mut snap = r.borrow().snapshot(&source);
            // A state error names its key by hash: add the key the learner knows.
            snap.halted = snap.halted.map(|why| source.name_keys(&why));
            let cells = snap.operator.iter_mut().flat_map(|op| op.state.iter_mut());
            for e in cells.filter_map(|c| c.decode_error.as_mut()) {
                *e = source.name_keys(e);
            }
            snap
        })
    }
}

/// A source message as the panel shows it.
fn message_view(m: &SourceMessage) -> MessageView {
    MessageView {
        offset: m.offset,
        key: m.key,
        value: m.value.as_ref().map(|v| match v {
            Ok(row) => row.to_string(),
            // As the state shows an error value (`error: value for key (6): ...`).
            Err(e) => format!("error: {e}"),
        }),
        ts: m.ts,
    }
}

/// A source message as the history check's reference model reads it: the digest of the output
/// update it stands for (what a replica writes for it), or `None` for a delete.
pub fn message_fact(m: &SourceMessage) -> MessageFact {
    MessageFact {
        offset: m.offset,
        key: m.key,
        ts: m.ts,
        output: m.value.clone().map(|v| {
            let mut buf = Vec::new();
            SourceData(v.map_err(DataflowError::from)).encode(&mut buf);
            digest(&buf, &[])
        }),
    }
}

/// Logs what the source log gained, every 50 ms, as a [`Fact::UpsertSource`]: the history
/// check's reference model reads the source from these.
async fn source_facts(rt: Runtime, source: Rc<RefCell<SourceLog>>, journal: Rc<RefCell<Journal>>) {
    let (mut from, mut last_upper) = (0usize, 0);
    loop {
        rt.sleep(50).await;
        let source = source.borrow();
        let (messages, upper) = (source.messages(), source.upper());
        from = from.min(messages.len());
        if from == messages.len() && upper == last_upper {
            continue;
        }
        let new: Vec<MessageFact> = messages[from..].iter().map(message_fact).collect();
        (from, last_upper) = (messages.len(), upper);
        journal.borrow_mut().log.record(Pending {
            at_ms: rt.now_ms(),
            actor: None,
            process: None,
            component: "upsert",
            kind: "source".into(),
            outcome: Outcome::Info,
            detail: format!(
                "source log: {} new, upper {upper}",
                plural(new.len() as u64, "message")
            ),
            fact: Some(Fact::UpsertSource {
                upper,
                messages: new,
            }),
        });
    }
}

/// A replica actor: starts a replica (its writer, persist source and driver) in its process and
/// keeps it until dropped (a crash or a removal aborts it). With `own_feedback` it runs without
/// the feedback edge ([`crate::playground::variants::upsert`]).
pub async fn run_replica(
    ctx: Rc<ActorCtx>,
    read_batch: u32,
    source: Rc<RefCell<SourceLog>>,
    log: UpsertLog<Timestamp>,
    slot: ReplicaSlot,
    generation: u64,
    own_feedback: bool,
) {
    let mut cfg = ReplicaConfig::new(&ctx.id, ctx.seed);
    cfg.read_batch = read_batch as usize;
    let shard = ShardId(UPSERT_SHARD.to_string());
    let client = ctx.client.clone();
    // What its errors' key hashes stand for (`SourceLog::name_keys`).
    let keys = Rc::clone(&source);
    // Either way the replica's tasks live as long as `_running`.
    type Started = (Rc<RefCell<Replica>>, String, Box<dyn std::any::Any>);
    let started: Result<Started, ReplicaStartError> = if own_feedback {
        start_own_feedback(client, shard, source, cfg, generation, log)
            .await
            .map(|r| (Rc::clone(&r.replica), r.writer_id.clone(), Box::new(r) as _))
    } else {
        start_replica(client, shard, source, cfg, generation, log)
            .await
            .map(|r| (Rc::clone(&r.replica), r.writer_id.clone(), Box::new(r) as _))
    };
    let (replica, writer_id, _running) = match started {
        Ok(r) => r,
        Err(e) => return ctx.fail("upsert", "start replica", e),
    };
    *slot.borrow_mut() = Some(Rc::clone(&replica));
    // Its sink's writer goes by its actor id (the Consensus log, the Event log, the Shard panel).
    ctx.register(&writer_id);
    let learns = if own_feedback {
        "learning its state from its own output (rule upsert-feedback off)"
    } else {
        "learning its state from the shard"
    };
    ctx.event(
        "upsert",
        "start",
        Outcome::Info,
        format!("started from the shard's upper (generation {generation}), {learns}"),
    );
    let rt = ctx.runtime.clone();
    loop {
        rt.sleep(200).await;
        let halted = replica.borrow().halted();
        if let Some(why) = halted {
            let why = keys.borrow().name_keys(&why);
            ctx.view.borrow_mut().state = ActorState::Failed;
            return ctx.fail("upsert", "replica halted", why);
        }
    }
}

/// Follows the output shard from its since and, at every upper it reaches, compares its contents
/// with the reference model over the source log, once the log has caught up to that upper (the
/// log is rebuilt from the source shard after a reload, so the check waits for it).
pub async fn run_output_checker(
    client: PersistClient,
    source: Rc<RefCell<SourceLog>>,
    report: Rc<RefCell<CheckerReport>>,
) {
    use crate::persist::events::frontier;
    use crate::persist::read::ListenEvent;
    let rt = client.runtime().clone();
    let fail = |e: String| report.borrow_mut().violations.push(format!("checker: {e}"));
    let shard = ShardId(UPSERT_SHARD.to_string());
    let read = match client.open_leased_reader::<SourceData, ()>(&shard).await {
        Ok(r) => r,
        Err(e) => return fail(e.to_string()),
    };
    let as_of = read.since().clone();
    let (snapshot, mut listen) = match read.subscribe(as_of.clone()).await {
        Ok(s) => s,
        Err(e) => return fail(e.to_string()),
    };
    let mut contents: crate::vec_map::VecMap<SourceData, i64> = crate::vec_map::VecMap::new();
    for ((d, ()), _, r) in snapshot {
        *contents.get_or_insert_with(d, || 0) += r;
    }
    let mut pending_upper = frontier(&as_of).map(|t| t + 1);
    loop {
        if let Some(upper) = pending_upper.take() {
            while source.borrow().upper() < upper {
                rt.sleep(20).await;
            }
            contents.retain(|_, d| *d != 0);
            let result = check_contents(&contents, source.borrow().messages(), upper);
            let mut r = report.borrow_mut();
            r.checks += 1;
            r.upper = Some(upper);
            if let Err(e) = result {
                r.violations.push(e.to_string());
            }
        }
        let events = match listen.next().await {
            Ok(e) => e,
            Err(e) => return fail(e.to_string()),
        };
        for event in events {
            match event {
                ListenEvent::Updates(updates) => {
                    for ((d, ()), _, r) in updates {
                        *contents.get_or_insert_with(d, || 0) += r;
                    }
                }
                ListenEvent::Progress(p) => match frontier(&p) {
                    Some(u) => pending_upper = Some(u),
                    None => return,
                },
            }
        }
    }
}

/// A line for the log view of one replica event.
fn upsert_text(k: &UpsertEventKind<Timestamp>) -> String {
    use UpsertEventKind as K;
    let f = |t: &Option<Timestamp>| crate::playground::log::fmt_frontier(*t);
    match k {
        K::PersistIngested {
            updates,
            persist_upper,
            ..
        } => format!(
            "folded {} into state; persist upper {}",
            plural(*updates, "feedback update"),
            f(persist_upper)
        ),
        K::SourceStaged { time, staged, .. } => {
            format!("stashed {} at {time}", plural(*staged, "source update"))
        }
        K::SourceProgress { input_upper, .. } => format!("source frontier {}", f(input_upper)),
        K::DrainSkipped { persist_upper, .. } => format!(
            "drain skipped: the feedback is mid-timestamp at {}",
            f(persist_upper)
        ),
        K::Drained {
            drain,
            eligible,
            emitted,
            remaining,
            ..
        } => format!(
            "{} drain: {} eligible, {} out, {remaining} left",
            match drain {
                crate::upsert::observe::DrainKind::ToUpper => "complete-time",
                crate::upsert::observe::DrainKind::AtTime => "partial",
            },
            plural(*eligible, "stash entry"),
            plural(*emitted, "update")
        ),
        K::HealthError { error } => format!("stopped on an error: {error}"),
        K::Started {
            resume_upper,
            generation,
        } => format!("start {generation} from upper {}", f(resume_upper)),
        K::FedBack { updates, upper } => {
            format!(
                "fed back {}; persist input upper {}",
                plural(*updates, "update"),
                f(upper)
            )
        }
        K::SinkAppended {
            lower,
            upper,
            updates,
        } => format!(
            "sink wrote {} at [{lower}, {})",
            plural(*updates, "update"),
            f(upper)
        ),
        K::SinkMismatch {
            expected,
            current,
            dropped,
        } => format!(
            "sink lost [{expected}, …) to a peer at {}; dropped {dropped}",
            f(current)
        ),
        K::SinkTimedOut {
            lower,
            after_ms,
            retry_in_ms,
        } => format!(
            "sink write at {lower} timed out after {after_ms} ms (it may have landed): retrying in {retry_in_ms} ms"
        ),
        K::Crashed { reason } => format!("crashed: {reason}"),
    }
}
