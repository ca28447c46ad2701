//! A writer without compare_and_append's idempotency token.
//!
//! Persist's `compare_and_append` makes one token per call and keeps it across the call's own
//! retries: after an indeterminate compare_and_set it re-reads state, and finding its token
//! committed, it knows its batch landed. This variant gives that up using only the public API:
//! its process's Consensus is wrapped in a [`Tripwire`] that fires on the first indeterminate
//! compare_and_set of the writer's own client; the writer then drops the call (and the token with
//! it), asks the shard for its upper, and writes the same updates again in a new call, at that
//! upper. If the lost call had landed, the upper moved because of it, the writer cannot tell,
//! and the batch lands twice; the second copy is the one acknowledged.

use std::cell::RefCell;
use std::rc::Rc;

use futures::channel::oneshot;

use crate::location::unreliable::LostAckConsensus;
use crate::location::Location;

/// Fires on an indeterminate compare_and_set while armed.
#[derive(Debug, Default)]
pub struct Tripwire {
    armed: RefCell<Option<oneshot::Sender<String>>>,
}

impl Tripwire {
    /// A tripwire, not armed.
    pub fn new() -> Rc<Tripwire> {
        Rc::default()
    }

    /// Arms it for one attempt: the receiver gets the error of the first indeterminate
    /// compare_and_set from now on (or is cancelled at the next `arm`).
    pub fn arm(&self) -> oneshot::Receiver<String> {
        let (tx, rx) = oneshot::channel();
        *self.armed.borrow_mut() = Some(tx);
        rx
    }

    /// `location` with its Consensus behind this tripwire. Give it to the writer's own client:
    /// that client's compare_and_sets are all on the writer's shard.
    pub fn wrap(self: &Rc<Self>, location: &Location) -> Location {
        let wire = Rc::clone(self);
        // Scripted lost acknowledgements, used here only to watch: it never loses one itself.
        let watched = LostAckConsensus::new(Rc::clone(&location.consensus), move |_, result| {
            if let Err(e) = result {
                if e.is_indeterminate() {
                    if let Some(tx) = wire.armed.borrow_mut().take() {
                        let _ = tx.send(e.to_string());
                    }
                }
            }
            false
        });
        Location {
            blob: Rc::clone(&location.blob),
            consensus: Rc::new(watched),
        }
    }
}

/// An attempt abandoned at an indeterminate compare_and_set: the error, as text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Tripped(pub String);

/// Runs `attempt` unless `tripped` fires first: `Err(the indeterminate error)` then, and
/// `attempt` is dropped, its token with it.
pub async fn unless_tripped<F: std::future::Future>(
    attempt: F,
    tripped: oneshot::Receiver<String>,
) -> Result<F::Output, Tripped> {
    use futures::future::{select, Either};
    futures::pin_mut!(attempt);
    match select(attempt, tripped).await {
        Either::Left((out, _)) => Ok(out),
        Either::Right((Ok(why), _)) => Err(Tripped(why)),
        Either::Right((Err(_cancelled), attempt)) => Ok(attempt.await),
    }
}
