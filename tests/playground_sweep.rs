//! A crashed writer's garbage goes within seconds in the playground: its processes use a short
//! lease (`playground::PLAYGROUND_LEASE_MS`), so once a writer's process crashed between writing
//! a Blob part and committing it, the next commit after the lease expires that writer and
//! sweeps its parts; the Shard panel's "last sweep" line names the writer, and the leak check
//! finds nothing.
//!
//! Method: two writers on `data` in their own processes. A slow Consensus makes W1's pending
//! updates pile up into batches too big to keep inline, so its attempts write Blob parts; an
//! outage then keeps its latest from committing, and W1's process crashes there (mid-write).
//! The outage ends, W2 goes on committing, and after the lease the part is swept.

#![cfg(not(target_arch = "wasm32"))]

use persist_playground::location::BlobMetadata;
use persist_playground::persist::gc::leaked_blobs;
use persist_playground::persist::state::part_writer;
use persist_playground::persist::{PersistClient, ShardId};
use persist_playground::playground::actor::ActorDetail;
use persist_playground::playground::command::{
    ActorSpec, Command, FaultKnobs, Service, WriteMode, WriterSpec,
};
use persist_playground::playground::{persist_config, Scenario, PLAYGROUND_LEASE_MS};
use persist_playground::runtime::sim::Simulator;

fn writer(rate: u32) -> Command {
    Command::AddActor {
        spec: ActorSpec::Writer(WriterSpec {
            rate_per_s: rate,
            key_lo: 0,
            key_hi: 1_000,
            mode: WriteMode::CompareAndAppend,
            ..WriterSpec::default()
        }),
        process: None,
    }
}

fn add(s: &mut Scenario, c: Command) -> String {
    s.apply(c)
        .expect("command applies")
        .actor
        .expect("an actor")
}

fn consensus(s: &mut Scenario, latency_ms: u64, outage: bool) {
    s.apply(Command::SetFaults {
        service: Service::Consensus,
        knobs: FaultKnobs {
            latency_ms,
            outage,
            ..FaultKnobs::default()
        },
    })
    .unwrap();
}

/// The blobs of shard `data` that no live version refers to, read from the scenario's raw
/// store by a client of its own.
fn leaks(s: &Scenario) -> Vec<BlobMetadata> {
    let sim = Simulator::new(7);
    let client = PersistClient::new(s.store(), sim.runtime(), persist_config(), 7);
    let shard = ShardId::new("data").unwrap();
    sim.block_on(async move { leaked_blobs(&client, &shard).await })
        .expect("the leak check finished")
        .expect("the shard reads")
}

#[test]
fn a_crashed_writers_parts_are_swept_within_seconds_and_named_in_the_last_sweep_line() {
    let mut s = Scenario::seeded(31);
    let w1 = add(&mut s, writer(1_000));
    let w2 = add(&mut s, writer(5));
    s.run_for(1_000).unwrap();
    let snap = s.snapshot();
    let process = |id: &str| {
        snap.actors
            .iter()
            .find(|a| a.id == id)
            .unwrap()
            .process
            .clone()
    };
    let (p1, p2) = (process(&w1), process(&w2));
    assert_ne!(p1, p2, "the writers run in processes of their own");

    // Slow Consensus: W1's updates pile up while each compare_and_set takes half a second, so
    // its batches grow too big to keep inline and go to Blob parts. Then, mid-write, an outage:
    // W1's latest part is in Blob and its compare_and_set cannot land.
    consensus(&mut s, 500, false);
    s.run_for(1_600).unwrap();
    consensus(&mut s, 500, true);
    s.run_for(300).unwrap();
    let snap = s.snapshot();
    let ActorDetail::Writer(w) = &snap.actors.iter().find(|a| a.id == w1).unwrap().detail else {
        panic!("{w1} is a writer")
    };
    assert!(w.in_flight.is_some(), "W1 is mid-write: {w:?}");
    let uncommitted: Vec<String> = leaks(&s)
        .into_iter()
        .filter(|m| part_writer(&m.key).is_some())
        .map(|m| m.key)
        .collect();
    assert!(
        !uncommitted.is_empty(),
        "W1 wrote a part it has not committed"
    );
    let w1_id = part_writer(&uncommitted[0]).unwrap().to_string();
    assert!(
        uncommitted
            .iter()
            .all(|k| part_writer(k) == Some(w1_id.as_str())),
        "only W1 wrote parts (W2's batches are small, kept inline): {uncommitted:?}"
    );
    s.apply(Command::CrashProcess {
        process: p1.clone(),
    })
    .unwrap();
    consensus(&mut s, 0, false);

    // Before the lease runs out W1 is still registered: its part stays (it could still commit,
    // as far as anyone else can tell).
    s.run_for(PLAYGROUND_LEASE_MS / 4).unwrap();
    let keys: Vec<String> = leaks(&s).into_iter().map(|m| m.key).collect();
    assert!(
        uncommitted.iter().all(|k| keys.contains(k)),
        "kept while W1's lease runs: {keys:?}"
    );
    let snap = s.snapshot();
    let data = snap.shards.iter().find(|x| x.name == "data").unwrap();
    assert!(
        data.writers.iter().any(|h| h.id == w1_id),
        "{w1_id} still registered"
    );

    // Within seconds after the lease: expired, swept, and the line says whose parts went.
    s.run_for(PLAYGROUND_LEASE_MS + 3_000).unwrap();
    let snap = s.snapshot();
    let data = snap.shards.iter().find(|x| x.name == "data").unwrap();
    assert!(
        data.writers.iter().all(|h| h.id != w1_id),
        "{w1_id} expired: {:?}",
        data.writers
    );
    let sweep = data.last_sweep.clone().expect("a sweep deleted something");
    assert!(
        sweep.writers.contains(&w1),
        "the last sweep names {w1}: {sweep:?}"
    );
    assert!(sweep.count >= uncommitted.len() as u64, "{sweep:?}");
    assert!(sweep.kind.contains("expired writers"), "{sweep:?}");
    assert!(
        sweep.at_ms <= s.now_ms() && sweep.at_ms > 2_900 + PLAYGROUND_LEASE_MS / 4,
        "{sweep:?} swept after the crash"
    );

    // W2 still writes; stopped, nothing is left unreferenced.
    s.apply(Command::RemoveActor { actor: w2 }).unwrap();
    s.run_for(2_000).unwrap();
    let left = leaks(&s);
    assert!(left.is_empty(), "leaked: {left:?}");
}
