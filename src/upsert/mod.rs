//! Upsert with continual feedback (placeholder doc, rewritten below).

pub mod consolidate;
pub mod core;
pub mod driver;
pub mod memory;
pub mod observe;
pub mod operator;
pub mod persist_source;
pub mod pipeline;
pub mod reference;
pub mod replica;
pub mod sink;
pub mod source;
pub mod stash;
pub mod state;
pub mod types;
pub mod worker;
