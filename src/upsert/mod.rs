//! Upsert with continual feedback (placeholder doc, rewritten below).

pub mod consolidate;
pub mod core;
pub mod memory;
pub mod observe;
pub mod operator;
pub mod stash;
pub mod state;
pub mod types;
pub mod worker;
