//! The [`Blob`] suite: its cases, in order, each on the store as the cases before it left it.

use std::future::Future;
use std::rc::Rc;

use bytes::Bytes;
use futures::future::LocalBoxFuture;

use super::super::Blob;
use super::{list, meta, ConformanceError};
use crate::location::ExternalError;

/// The [`Blob`] contract, returning the first broken case.
pub async fn blob_conformance<'a, F, Fut>(open: F) -> Result<(), ConformanceError>
where
    F: Fn() -> Fut + 'a,
    Fut: Future<Output = Result<Rc<dyn Blob>, ExternalError>> + 'a,
{
    let open: Box<OpenBlob<'a>> = Box::new(move || Box::pin(open()) as LocalBoxFuture<'a, _>);
    let blob = open().await?;
    let mut suite = BlobSuite {
        open,
        blob,
        other: None,
    };
    for case in BLOB_CASES {
        case(&mut suite).await?;
    }
    Ok(())
}

/// Opens a new handle onto the store under test.
type OpenBlob<'a> = dyn Fn() -> LocalBoxFuture<'a, Result<Rc<dyn Blob>, ExternalError>> + 'a;

/// What every case of the Blob suite gets: the opener, the first handle, and the second one
/// (opened by [`blob_new_handle`], used by the cases after it).
struct BlobSuite<'a> {
    open: Box<OpenBlob<'a>>,
    blob: Rc<dyn Blob>,
    other: Option<Rc<dyn Blob>>,
}

impl BlobSuite<'_> {
    /// The second handle.
    fn other(&self) -> Result<Rc<dyn Blob>, ConformanceError> {
        self.other
            .clone()
            .ok_or_else(|| ConformanceError::Broken("the second handle was not opened".into()))
    }
}

/// The keys and values of the Blob suite.
const K0: &str = "shard/part0";
const K1: &str = "shard/part1";
const K2: &str = "other/part2";
const V0: Bytes = Bytes::from_static(b"hello");
const V1: Bytes = Bytes::from_static(b"world!");

/// One case of the Blob suite: it runs on the store as the cases before it left it.
type BlobCase =
    for<'x, 'a> fn(&'x mut BlobSuite<'a>) -> LocalBoxFuture<'x, Result<(), ConformanceError>>;

/// The Blob suite's cases, in the order they run.
const BLOB_CASES: [BlobCase; 7] = [
    blob_empty_store,
    blob_set_get_overwrite,
    blob_listing,
    blob_new_handle,
    blob_delete,
    blob_restore,
    blob_rewrite,
];

/// An empty store.
fn blob_empty_store<'x, 'a>(
    s: &'x mut BlobSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let blob = Rc::clone(&s.blob);
        let k0 = K0;
        check_eq!(blob.get(k0).await?, None, "get of an absent key");
        check_eq!(
            list(&*blob, "").await?,
            vec![],
            "an empty store lists nothing"
        );
        check_eq!(blob.delete(k0).await?, None, "delete of an absent key");
        Ok(())
    })
}

/// set, get, overwrite.
fn blob_set_get_overwrite<'x, 'a>(
    s: &'x mut BlobSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let blob = Rc::clone(&s.blob);
        let k0 = K0;
        let k1 = K1;
        let k2 = K2;
        let v0 = V0;
        let v1 = V1;
        blob.set(k0, v0.clone()).await?;
        check_eq!(blob.get(k0).await?, Some(v0.clone()));
        blob.set(k0, v1.clone()).await?;
        check_eq!(blob.get(k0).await?, Some(v1.clone()), "set overwrites");
        blob.set(k0, v0.clone()).await?;
        blob.set(k1, Bytes::new()).await?;
        check_eq!(
            blob.get(k1).await?,
            Some(Bytes::new()),
            "an empty value is a value"
        );
        blob.set(k2, v1.clone()).await?;
        Ok(())
    })
}

/// Listing by prefix, with sizes.
fn blob_listing<'x, 'a>(
    s: &'x mut BlobSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let blob = Rc::clone(&s.blob);
        let k0 = K0;
        let k1 = K1;
        let k2 = K2;
        check_eq!(
            list(&*blob, "").await?,
            vec![meta(k2, 6), meta(k0, 5), meta(k1, 0)]
        );
        check_eq!(
            list(&*blob, "shard/").await?,
            vec![meta(k0, 5), meta(k1, 0)]
        );
        check_eq!(list(&*blob, "shard/part1").await?, vec![meta(k1, 0)]);
        check_eq!(list(&*blob, "nothing").await?, vec![]);
        Ok(())
    })
}

/// A new handle sees the same data.
fn blob_new_handle<'x, 'a>(
    s: &'x mut BlobSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let k0 = K0;
        let v0 = V0;
        let other = (s.open)().await?;
        s.other = Some(Rc::clone(&other));
        check_eq!(
            other.get(k0).await?,
            Some(v0.clone()),
            "a new handle sees the data"
        );
        Ok(())
    })
}

/// delete reports whether the key existed; deleted keys are gone from get and list.
fn blob_delete<'x, 'a>(
    s: &'x mut BlobSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let blob = Rc::clone(&s.blob);
        let k0 = K0;
        let k1 = K1;
        let other = s.other()?;
        check_eq!(blob.delete(k0).await?, Some(5), "delete returns the size");
        check_eq!(
            blob.delete(k0).await?,
            None,
            "a second delete finds nothing"
        );
        check_eq!(blob.get(k0).await?, None);
        check_eq!(
            other.get(k0).await?,
            None,
            "delete is visible to other handles"
        );
        check_eq!(list(&*blob, "shard/").await?, vec![meta(k1, 0)]);
        check_eq!(
            blob.delete(k1).await?,
            Some(0),
            "an empty value's size is 0"
        );
        Ok(())
    })
}

/// restore brings a deleted key back; it is idempotent; a never-written key cannot be restored.
fn blob_restore<'x, 'a>(
    s: &'x mut BlobSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let blob = Rc::clone(&s.blob);
        let k0 = K0;
        let k2 = K2;
        let v0 = V0;
        let v1 = V1;
        blob.restore(k0).await?;
        check_eq!(
            blob.get(k0).await?,
            Some(v0.clone()),
            "restore brings the value back"
        );
        blob.restore(k0).await?;
        blob.restore(k2).await?;
        check_eq!(
            blob.get(k2).await?,
            Some(v1.clone()),
            "restore of a live key changes nothing"
        );
        check!(
            blob.restore("shard/never-written").await.is_err(),
            "restoring a key that was never written is an error"
        );
        check_eq!(blob.get("shard/never-written").await?, None);
        Ok(())
    })
}

/// A deleted key can be written again.
fn blob_rewrite<'x, 'a>(
    s: &'x mut BlobSuite<'a>,
) -> LocalBoxFuture<'x, Result<(), ConformanceError>> {
    Box::pin(async move {
        let blob = Rc::clone(&s.blob);
        let k0 = K0;
        let k1 = K1;
        let k2 = K2;
        let v1 = V1;
        let other = s.other()?;
        blob.set(k1, v1.clone()).await?;
        check_eq!(blob.get(k1).await?, Some(v1.clone()));
        check_eq!(
            list(&*other, "").await?,
            vec![meta(k2, 6), meta(k0, 5), meta(k1, 6)]
        );
        Ok(())
    })
}
