//! Unique ids for the blobs every piece of background work (compaction, rollups, GC) writes.
//! Its other building blocks are the machine's: Blob writes and deletes that retry transient
//! errors (`machine/blob.rs`) and idempotent maintenance commands (`apply_maintenance_cmd`,
//! `machine/commands.rs`). `maintenance.rs` decides what runs and when; this module imports
//! none of the work it serves.

use std::cell::Cell;

use super::PersistClient;
use crate::location::SeqNo;

/// Unique names for the blobs one piece of maintenance writes.
#[derive(Debug)]
pub(crate) struct MaintenanceIds {
    prefix: String,
    next: Cell<u64>,
}

impl MaintenanceIds {
    /// Ids for the work the commit of `seqno` assigned (unique: a seqno is committed once).
    pub(crate) fn for_commit(seqno: SeqNo) -> Self {
        MaintenanceIds {
            prefix: format!("m{}", seqno.0),
            next: Cell::new(0),
        }
    }

    /// Ids drawn from the client's seeded generator, for work started by hand.
    pub(crate) fn from_client(client: &PersistClient) -> Self {
        MaintenanceIds {
            prefix: client.new_id("m"),
            next: Cell::new(0),
        }
    }

    /// The next id.
    pub(crate) fn next(&self) -> String {
        let n = self.next.get();
        self.next.set(n.saturating_add(1));
        format!("{}x{}", self.prefix, n)
    }
}
