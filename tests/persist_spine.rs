//! Compaction keeps up with a writer committing as fast as it can, over the in-memory locations
//! with seeded latency in the simulator: the shared body ([`spine::tight_loop_writer`], also run
//! in Chromium over IndexedDB by `tests/browser_spine.rs`) appends 10,000 one-update batches in
//! a tight loop, checks the spine bound after every commit and the contents at the end.
#![cfg(not(target_arch = "wasm32"))]

#[path = "support/spine.rs"]
mod spine;

use std::rc::Rc;

use persist_playground::location::mem::{Latency, MemBlob, MemConsensus};
use persist_playground::location::Location;
use persist_playground::persist::events::EventLog;
use persist_playground::persist::{PersistClient, PersistConfig};
use persist_playground::runtime::sim::Simulator;

const COMMITS: u64 = 10_000;

#[test]
fn a_tight_loop_writer_stays_within_the_spine_bound() {
    let sim = Simulator::new(17);
    sim.set_record_trace(false);
    let rt = sim.runtime();
    let location = Location {
        blob: Rc::new(MemBlob::new().with_latency(Latency::new(rt.clone(), 1, 0, 3))),
        consensus: Rc::new(MemConsensus::new().with_latency(Latency::new(rt.clone(), 2, 0, 3))),
    };
    let client = PersistClient::new(location, rt, PersistConfig::default(), 17)
        .with_events(EventLog::disabled());
    let run = sim
        .block_on(spine::tight_loop_writer(client, COMMITS))
        .unwrap();
    println!(
        "{COMMITS} commits: at most {} batches ({} from the bound)",
        run.max_batches, run.max_excess
    );
}
