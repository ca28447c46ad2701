//! A write task that does not re-sync after an UpperMismatch.
//!
//! [`DifferentialWriteTask`] answers a mismatch with `sync_to_persist`: it reads the shard at the
//! new upper and sets `to_write = desired - snapshot`, so its next commit makes the shard equal
//! `desired` whatever the other writer did. This variant is that same task, spawned with
//! [`Resync::KeepToWrite`]: every other step is the task's own (commands into `desired` and
//! `to_write`, writes at `current_upper` up to `max(now, current_upper + 1)`, the upper tick,
//! bounded retries, the same [`WriteTaskEvent`](crate::write_task::WriteTaskEvent)s into the same
//! log), but on a mismatch it only adopts the shard's upper and writes its old `to_write` again
//! there, on top of what the other writer wrote. Its `Committed` events still claim the shard
//! equals `desired` (they carry `desired`'s fingerprint):
//! [`crate::write_task::audit::audit_commits`] shows they are wrong.

use futures::channel::oneshot;

use crate::persist::codec::Row;
use crate::persist::write::WriteHandle;
use crate::runtime::JoinHandle;
use crate::write_task::{
    CommandSender, DifferentialIntrospectionConfig, DifferentialWriteTask, InitialDesired, NowFn,
    ReadHandleFuture, Resync, WriteTaskConfig, WriteTaskError,
};

/// Spawns the variant on `cfg.runtime`, seeding `desired` from the shard (as the playground's
/// tasks do). Returns the command sender, the task (dropping it aborts it) and the shutdown
/// sender, as [`DifferentialWriteTask::spawn`] does.
#[allow(clippy::type_complexity)]
pub fn spawn<R>(
    id: &str,
    write: WriteHandle<Row, ()>,
    read_handle_fn: R,
    read_only: bool,
    now: NowFn,
    cfg: WriteTaskConfig,
) -> Result<(CommandSender, JoinHandle<()>, oneshot::Sender<()>), WriteTaskError>
where
    R: FnMut() -> ReadHandleFuture + 'static,
{
    let introspection = DifferentialIntrospectionConfig {
        initial_desired: InitialDesired::FromShard {
            retain: Box::new(|_| true),
        },
    };
    let task = (id, write, read_handle_fn, read_only, now);
    DifferentialWriteTask::spawn_with_resync(task, introspection, cfg, Resync::KeepToWrite)
}
