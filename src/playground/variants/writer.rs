//! A writer without compare_and_append's idempotency token.
//!
//! Persist's `compare_and_append` makes one token per call and keeps it across the call's own
//! retries: after an indeterminate compare_and_set it re-reads state, and finding its token
//! committed, it knows its batch landed. This variant gives that up using only the public API:
//! its process's Consensus is wrapped in a [`Tripwire`] that fires on the first indeterminate
//! compare_and_set of the writer's shard; the writer then drops the call (and the token with
//! it), asks the shard for its upper, and writes the same updates again in a new call, at that
//! upper. If the lost call had landed, the upper moved because of it, the writer cannot tell,
//! and the batch lands twice; the second copy is the one acknowledged.

use std::cell::RefCell;
use std::rc::Rc;

use async_trait::async_trait;
use futures::channel::oneshot;

use crate::location::{CaSResult, Consensus, ExternalError, Location, SeqNo, VersionedData};

/// Fires on an indeterminate compare_and_set of one Consensus key while armed.
#[derive(Debug)]
pub struct Tripwire {
    key: String,
    armed: RefCell<Option<oneshot::Sender<String>>>,
}

impl Tripwire {
    /// A tripwire on `key` (a shard name), not armed.
    pub fn new(key: &str) -> Rc<Tripwire> {
        Rc::new(Tripwire {
            key: key.to_string(),
            armed: RefCell::new(None),
        })
    }

    /// Arms it for one attempt: the receiver gets the error of the first indeterminate
    /// compare_and_set on the key from now on (or is cancelled at the next `arm`).
    pub fn arm(&self) -> oneshot::Receiver<String> {
        let (tx, rx) = oneshot::channel();
        *self.armed.borrow_mut() = Some(tx);
        rx
    }

    /// `location` with its Consensus behind this tripwire.
    pub fn wrap(self: &Rc<Self>, location: &Location) -> Location {
        Location {
            blob: Rc::clone(&location.blob),
            consensus: Rc::new(Tripped {
                inner: Rc::clone(&location.consensus),
                wire: Rc::clone(self),
            }),
        }
    }
}

struct Tripped {
    inner: Rc<dyn Consensus>,
    wire: Rc<Tripwire>,
}

#[async_trait(?Send)]
impl Consensus for Tripped {
    async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
        self.inner.head(key).await
    }
    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: VersionedData,
    ) -> Result<CaSResult, ExternalError> {
        let result = self.inner.compare_and_set(key, expected, new).await;
        if let Err(e) = &result {
            if e.is_indeterminate() && key == self.wire.key {
                if let Some(tx) = self.wire.armed.borrow_mut().take() {
                    let _ = tx.send(e.to_string());
                }
            }
        }
        result
    }
    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<Vec<VersionedData>, ExternalError> {
        self.inner.scan(key, from, limit).await
    }
    async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
        self.inner.truncate(key, seqno).await
    }
    async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
        self.inner.list_keys().await
    }
}

/// Runs `attempt` unless `tripped` fires first: `Err(the indeterminate error)` then, and
/// `attempt` is dropped, its token with it.
pub async fn unless_tripped<F: std::future::Future>(
    attempt: F,
    tripped: oneshot::Receiver<String>,
) -> Result<F::Output, String> {
    use futures::future::{select, Either};
    futures::pin_mut!(attempt);
    match select(attempt, tripped).await {
        Either::Left((out, _)) => Ok(out),
        Either::Right((Ok(why), _)) => Err(why),
        Either::Right((Err(_cancelled), attempt)) => Ok(attempt.await),
    }
}
