//! Two tabs in live mode, natively: `Scenario::live` twice on the simulator's runtime over one
//! shared in-memory location (as two tabs share one IndexedDB database), a writer in each. Each
//! page's Consensus log lists the versions of the `data` shard the other page wrote, marked as
//! another tab's, besides its own compare_and_sets; and none of its own versions is claimed for
//! the other tab.

#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeSet;
use std::rc::Rc;

use persist_playground::location::mem::{MemBlob, MemConsensus};
use persist_playground::location::Location;
use persist_playground::playground::command::{ActorSpec, Command, WriterSpec};
use persist_playground::playground::log::Outcome;
use persist_playground::playground::{Scenario, FOREIGN_PROCESS};
use persist_playground::runtime::sim::Simulator;

/// `(own committed, claimed for another tab)` seqnos of `data` in `page`'s Consensus log.
fn seqnos(page: &mut Scenario) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let snap = page.snapshot();
    let data = snap.consensus.iter().filter(|c| c.key == "data");
    let (mut own, mut foreign) = (BTreeSet::new(), BTreeSet::new());
    for c in data {
        if c.process == FOREIGN_PROCESS {
            foreign.insert(c.new_seqno);
        } else if c.outcome == Outcome::Committed {
            own.insert(c.new_seqno);
        }
    }
    (own, foreign)
}

#[test]
fn each_tab_lists_the_versions_the_other_tab_wrote() {
    let sim = Simulator::new(5);
    let location = Location {
        blob: Rc::new(MemBlob::new()),
        consensus: Rc::new(MemConsensus::new()),
    };
    let page = |seed| {
        let mut p = Scenario::live(sim.runtime(), location.clone(), seed);
        p.apply(Command::AddActor {
            spec: ActorSpec::Writer(WriterSpec::default()),
            process: None,
        })
        .unwrap();
        p
    };
    let (mut a, mut b) = (page(11), page(12));
    sim.run_for(6_000).unwrap();
    let ((a_own, a_foreign), (b_own, b_foreign)) = (seqnos(&mut a), seqnos(&mut b));
    assert!(a_own.len() > 5 && b_own.len() > 5, "{a_own:?} {b_own:?}");
    assert!(
        !a_foreign.is_empty() && !b_foreign.is_empty(),
        "each page lists the other's versions: {a_foreign:?} {b_foreign:?}"
    );
    // What a page claims for the other tab is what the other tab wrote, never its own.
    assert!(a_foreign.is_disjoint(&a_own), "{a_foreign:?} {a_own:?}");
    assert!(b_foreign.is_disjoint(&b_own), "{b_foreign:?} {b_own:?}");
    let b_wrote = |s: &u64| b_own.contains(s) || !a_own.contains(s);
    assert!(a_foreign.iter().all(b_wrote), "{a_foreign:?} {b_own:?}");
    let a_wrote = |s: &u64| a_own.contains(s) || !b_own.contains(s);
    assert!(b_foreign.iter().all(a_wrote), "{b_foreign:?} {a_own:?}");
    // Every version the other tab committed inside the span this page has claimed so far is
    // listed. (Both lists are windows: a page's own log keeps its newest 200 entries over every
    // key, and a page claims a version only a second after it read it, so the spans slide and
    // overlap only in part; within the overlap nothing may be missing.)
    let all_listed = |own: &BTreeSet<u64>, foreign: &BTreeSet<u64>| {
        let (Some(&lo), Some(&hi)) = (foreign.first(), foreign.last()) else {
            return Err("nothing claimed".to_string());
        };
        let within: Vec<u64> = own.range(lo..=hi).copied().collect();
        if within.is_empty() {
            return Err(format!("no overlap: own {own:?}, claimed {foreign:?}"));
        }
        match within.iter().find(|s| !foreign.contains(s)) {
            Some(s) => Err(format!(
                "version {s} missing: own {own:?}, claimed {foreign:?}"
            )),
            None => Ok(()),
        }
    };
    all_listed(&b_own, &a_foreign).unwrap();
    all_listed(&a_own, &b_foreign).unwrap();
}
