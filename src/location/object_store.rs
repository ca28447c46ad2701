//! [`Blob`] on an object store through the `object_store` crate (native only):
//! `file:///DIR` (a local directory) and `s3://BUCKET/PREFIX?endpoint=URL` (S3, or anything that
//! speaks its API).
//!
//! Layout under the URL's prefix:
//! - `data/<key>`: live values. A `set` is one `put`, which is atomic on both stores (the local
//!   filesystem writes a staging file and renames it into place; S3 publishes an object whole).
//! - `trash/<key>`: deleted values. `delete` moves the value there (a rename on the filesystem, a
//!   copy then a delete on S3), so that `restore` can move it back, as the contract asks. Nothing
//!   reclaims the trash: a store that must not grow would empty it out of band.
//!
//! A Blob key maps to an object path segment by segment (`/` separates them); a key whose path
//! would not round-trip (an empty segment, `.` or `..`) is refused with a determinate error before
//! anything is sent. Persist's own keys (`<shard>/<seqno>/<id>`, `<shard>/<writer>/p<id>`) all map.
//!
//! Errors: an object that is not there is an answer (`None`), not an error. A failed `get`,
//! `list` or `head` is determinate (a read changes nothing); a failed `put`, `copy` or `delete` is
//! indeterminate (it may have happened). Opening checks that the bucket (or directory) can be
//! listed, so a missing bucket is a [`LocationError::Missing`] before anything is written.

use std::sync::Arc;

use ::object_store::path::Path;
use ::object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;

use super::open_error::{redact_url, LocationError};
use super::open_retry::OpenRetry;
use super::{Blob, BlobMetadata, ExternalError};
use crate::retry::Attempt;
use crate::runtime::Runtime;

/// A Blob over an [`ObjectStore`]. See the module docs.
#[derive(Debug, Clone)]
pub struct ObjectStoreBlob {
    store: Arc<dyn ObjectStore>,
    // "<prefix>/" or "" (no leading '/').
    prefix: String,
    url: String,
}

impl ObjectStoreBlob {
    /// Opens `file:///DIR` (the directory is created if absent) or
    /// `s3://BUCKET[/PREFIX][?endpoint=URL][&region=R][&allow_http=true]`. S3 credentials come
    /// from the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, optionally
    /// `AWS_ENDPOINT`, `AWS_REGION`). A plain `http://` endpoint is allowed (the test emulator).
    ///
    /// One attempt: the probe goes through the store's own retries (object_store's defaults).
    /// [`ObjectStoreBlob::open_with`] retries instead under an [`OpenRetry`] policy.
    pub async fn open(url: &str) -> Result<ObjectStoreBlob, LocationError> {
        let (blob, _) = Self::build(url)?;
        let store = Arc::clone(&blob.store);
        blob.probe(&store).await.map_err(Attempt::into_inner)?;
        Ok(blob)
    }

    /// [`ObjectStoreBlob::open`], retrying a probe that failed in a way that can heal (the
    /// endpoint refused or reset the connection, timed out, or answered 5xx) under `retry`. The
    /// probe itself makes one request (no retries of object_store's own), so that each failure
    /// comes back to this loop and its `on_wait`; an unknown host, a missing bucket and refused
    /// credentials fail at once. The Blob's own calls keep object_store's retries.
    pub async fn open_with(
        url: &str,
        runtime: &Runtime,
        retry: &OpenRetry,
    ) -> Result<ObjectStoreBlob, LocationError> {
        let (blob, probe) = Self::build(url)?;
        retry.run(runtime, || blob.probe(&probe)).await?;
        Ok(blob)
    }

    /// Parses `url` and builds the store, and a second store on the same bucket whose requests
    /// are not retried (the probe of [`ObjectStoreBlob::open_with`]).
    fn build(url: &str) -> Result<(ObjectStoreBlob, Arc<dyn ObjectStore>), LocationError> {
        let redacted = redact_url(url);
        let bad = |reason: String| LocationError::BadUrl {
            url: redacted.clone(),
            reason,
        };
        let parsed = ::url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
        type Stores = (Arc<dyn ObjectStore>, Arc<dyn ObjectStore>, String);
        let (store, probe, prefix): Stores = match parsed.scheme() {
            "file" => {
                if parsed.host_str().is_some_and(|h| !h.is_empty()) {
                    return Err(bad("a file URL has no host: file:///ABSOLUTE/DIR".into()));
                }
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| bad("not an absolute directory path".into()))?;
                std::fs::create_dir_all(&dir).map_err(|e| LocationError::Other {
                    url: redacted.clone(),
                    reason: format!("cannot create directory {}: {e}", dir.display()),
                })?;
                let fs = ::object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| bad(e.to_string()))?;
                let fs: Arc<dyn ObjectStore> = Arc::new(fs);
                (Arc::clone(&fs), fs, String::new())
            }
            "s3" => {
                let bucket = parsed
                    .host_str()
                    .filter(|b| !b.is_empty())
                    .ok_or_else(|| bad("no bucket: s3://BUCKET/PREFIX".into()))?
                    .to_string();
                let mut builder =
                    ::object_store::aws::AmazonS3Builder::from_env().with_bucket_name(&bucket);
                let mut region_set = std::env::var("AWS_REGION").is_ok()
                    || std::env::var("AWS_DEFAULT_REGION").is_ok();
                for (k, v) in parsed.query_pairs() {
                    match &*k {
                        "endpoint" => {
                            builder = builder
                                .with_endpoint(v.to_string())
                                .with_allow_http(v.starts_with("http://"));
                        }
                        "region" => {
                            region_set = true;
                            builder = builder.with_region(v.to_string());
                        }
                        "allow_http" => builder = builder.with_allow_http(v == "true"),
                        other => return Err(bad(format!("unknown parameter {other:?}"))),
                    }
                }
                // reqwest's rustls has no crypto provider compiled in but ring: make it the
                // process default (a second call finds one installed and changes nothing).
                let _ = rustls::crypto::ring::default_provider().install_default();
                if !region_set {
                    builder = builder.with_region("us-east-1");
                }
                let once = ::object_store::RetryConfig {
                    max_retries: 0,
                    ..Default::default()
                };
                let probe = builder
                    .clone()
                    .with_retry(once)
                    .build()
                    .map_err(|e| bad(e.to_string()))?;
                let s3 = builder.build().map_err(|e| bad(e.to_string()))?;
                let prefix = parsed.path().trim_matches('/');
                let prefix = if prefix.is_empty() {
                    String::new()
                } else {
                    format!("{prefix}/")
                };
                (Arc::new(s3), Arc::new(probe), prefix)
            }
            other => return Err(bad(format!("unknown Blob scheme {other:?}"))),
        };
        let blob = ObjectStoreBlob {
            store,
            prefix,
            url: redacted,
        };
        Ok((blob, probe))
    }

    /// Lists (read-only) under the prefix through `store`: a missing bucket fails here.
    async fn probe(&self, store: &Arc<dyn ObjectStore>) -> Result<(), Attempt<LocationError>> {
        let at = Path::from(format!("{}data", self.prefix));
        match store.list_with_delimiter(Some(&at)).await {
            Ok(_) => Ok(()),
            Err(::object_store::Error::NotFound { source, .. }) => {
                Err(Attempt::Permanent(LocationError::Missing {
                    url: self.url.clone(),
                    what: "the bucket".into(),
                    reason: source.to_string(),
                }))
            }
            Err(e) if store_error_heals(&e) => Err(Attempt::Transient(LocationError::Connect {
                url: self.url.clone(),
                reason: error_chain(&e),
            })),
            Err(e) => Err(Attempt::Permanent(classify_open_error(self.url.clone(), e))),
        }
    }

    /// The URL this Blob was opened from, without secrets.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn path(&self, area: &str, key: &str) -> Result<Path, ExternalError> {
        let full = format!("{}{area}/{key}", self.prefix);
        let path = Path::parse(&full).map_err(|e| {
            ExternalError::determinate(format!("blob key {key:?} is not a valid object path: {e}"))
        })?;
        if path.as_ref() != full {
            return Err(ExternalError::determinate(format!(
                "blob key {key:?} does not map to an object path one to one"
            )));
        }
        Ok(path)
    }

    fn read_err(&self, op: &str, key: &str, e: ::object_store::Error) -> ExternalError {
        ExternalError::determinate(format!("{} {op} {key}: {e}", self.url))
    }

    fn write_err(&self, op: &str, key: &str, e: ::object_store::Error) -> ExternalError {
        ExternalError::indeterminate(format!("{} {op} {key}: {e}", self.url))
    }
}

/// Whether a failed request may heal: a socket error of an endpoint that is not up (refused,
/// reset, timed out) or a 5xx answer. A name that does not resolve is not one.
fn store_error_heals(e: &::object_store::Error) -> bool {
    use std::io::ErrorKind as K;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                K::ConnectionRefused
                    | K::ConnectionReset
                    | K::ConnectionAborted
                    | K::UnexpectedEof
                    | K::TimedOut
            ) {
                return true;
            }
        }
        source = s.source();
    }
    e.to_string().contains("status code: 5")
}

/// `e` and its causes, joined (object_store's own message stops at "error sending request").
fn error_chain(e: &::object_store::Error) -> String {
    super::open_error::error_chain(e)
}

fn classify_open_error(url: String, e: ::object_store::Error) -> LocationError {
    let reason = error_chain(&e);
    let lower = reason.to_ascii_lowercase();
    if lower.contains("nosuchbucket") || lower.contains("does not exist") {
        LocationError::Missing {
            url,
            what: "the bucket".into(),
            reason,
        }
    } else if lower.contains("accessdenied")
        || lower.contains("invalidaccesskeyid")
        || lower.contains("signaturedoesnotmatch")
        || lower.contains("403")
    {
        LocationError::Auth { url, reason }
    } else if lower.contains("connect") || lower.contains("dns") {
        LocationError::Connect { url, reason }
    } else {
        LocationError::Other { url, reason }
    }
}

#[async_trait(?Send)]
impl Blob for ObjectStoreBlob {
    async fn get(&self, key: &str) -> Result<Option<Bytes>, ExternalError> {
        let path = self.path("data", key)?;
        match self.store.get(&path).await {
            Ok(r) => match r.bytes().await {
                Ok(b) => Ok(Some(b)),
                Err(::object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(self.read_err("get", key, e)),
            },
            Err(::object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.read_err("get", key, e)),
        }
    }

    async fn list_keys_and_metadata(
        &self,
        key_prefix: &str,
        f: &mut (dyn FnMut(BlobMetadata) + '_),
    ) -> Result<(), ExternalError> {
        // object_store lists by whole segments: list the directory of the prefix, then filter.
        let data_root = format!("{}data/", self.prefix);
        let dir = match key_prefix.rfind('/') {
            Some(i) => format!("{data_root}{}", &key_prefix[..i]),
            None => data_root.trim_end_matches('/').to_string(),
        };
        let dir = Path::parse(&dir).map_err(|e| {
            ExternalError::determinate(format!(
                "blob prefix {key_prefix:?} is not a valid path: {e}"
            ))
        })?;
        let mut stream = self.store.list(Some(&dir));
        while let Some(item) = stream.next().await {
            let meta = match item {
                Ok(m) => m,
                // The directory does not exist (yet): nothing under it.
                Err(::object_store::Error::NotFound { .. }) => return Ok(()),
                Err(e) => return Err(self.read_err("list", key_prefix, e)),
            };
            let Some(key) = meta.location.as_ref().strip_prefix(&data_root) else {
                continue;
            };
            if key.starts_with(key_prefix) {
                f(BlobMetadata {
                    key: key.to_string(),
                    size_in_bytes: meta.size,
                });
            }
        }
        Ok(())
    }

    async fn set(&self, key: &str, value: Bytes) -> Result<(), ExternalError> {
        let path = self.path("data", key)?;
        self.store
            .put(&path, PutPayload::from(value))
            .await
            .map(|_| ())
            .map_err(|e| self.write_err("set", key, e))
    }

    async fn delete(&self, key: &str) -> Result<Option<usize>, ExternalError> {
        let live = self.path("data", key)?;
        let trash = self.path("trash", key)?;
        let size = match self.store.head(&live).await {
            Ok(meta) => meta.size,
            Err(::object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.read_err("delete", key, e)),
        };
        match self.store.rename(&live, &trash).await {
            Ok(()) => Ok(Some(usize::try_from(size).unwrap_or(usize::MAX))),
            // Someone else deleted it between the head and the rename.
            Err(::object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.write_err("delete", key, e)),
        }
    }

    async fn restore(&self, key: &str) -> Result<(), ExternalError> {
        let live = self.path("data", key)?;
        match self.store.head(&live).await {
            Ok(_) => return Ok(()),
            Err(::object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(self.read_err("restore", key, e)),
        }
        let trash = self.path("trash", key)?;
        match self.store.copy(&trash, &live).await {
            Ok(()) => Ok(()),
            Err(::object_store::Error::NotFound { .. }) => {
                Err(ExternalError::determinate(format!(
                    "{} restore {key}: the key was never written (or its deletion was reclaimed)",
                    self.url
                )))
            }
            Err(e) => Err(self.write_err("restore", key, e)),
        }
    }
}
