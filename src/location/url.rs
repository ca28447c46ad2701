//! Locations from URLs (native only), as the original's `--persist-consensus-url` and
//! `--persist-blob-url`:
//!
//! | service | URL | implementation |
//! | --- | --- | --- |
//! | Consensus | `mem://` | [`MemConsensus`] (this process only) |
//! | Consensus | `postgres://USER:PASSWORD@HOST:PORT/DB` (or `postgresql://`) | [`PostgresConsensus`] |
//! | Blob | `mem://` | [`MemBlob`] (this process only) |
//! | Blob | `file:///DIR` | [`ObjectStoreBlob`] on the local filesystem |
//! | Blob | `s3://BUCKET/PREFIX?endpoint=URL&region=R` | [`ObjectStoreBlob`] on S3 (credentials from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`) |
//!
//! Every failure to open one is a [`LocationError`]: a typed error that names the URL with its
//! password (and any secret query parameter) removed ([`redact_url`]), never the secret itself.
//! Opening writes nothing but the `consensus` table when it is absent (as the original does).
//! Opening retries a failure that can heal (a server restarting, a refused connection) for a
//! bounded time and fails at once on one that cannot ([`super::open_retry`]).

use std::fmt;
use std::rc::Rc;

use super::mem::{MemBlob, MemConsensus};
use super::object_store::ObjectStoreBlob;
pub use super::open_error::{redact_url, LocationError};
pub use super::open_retry::OpenRetry;
use super::postgres::PostgresConsensus;
use super::{Blob, Consensus, Location};
use crate::runtime::Runtime;

fn scheme_of(url: &str) -> &str {
    url.split_once("://").map(|(s, _)| s).unwrap_or("")
}

/// Opens the Consensus a URL names (see the module docs), retrying a failure that can heal for
/// the default budget ([`OpenRetry::default`]).
pub async fn open_consensus(
    url: &str,
    runtime: &Runtime,
) -> Result<Rc<dyn Consensus>, LocationError> {
    open_consensus_with(url, runtime, &OpenRetry::default()).await
}

/// [`open_consensus`] under the retry policy `retry`.
pub async fn open_consensus_with(
    url: &str,
    runtime: &Runtime,
    retry: &OpenRetry,
) -> Result<Rc<dyn Consensus>, LocationError> {
    match scheme_of(url) {
        "mem" => Ok(Rc::new(MemConsensus::new())),
        "postgres" | "postgresql" => Ok(Rc::new(
            PostgresConsensus::open_with(url, runtime.clone(), retry).await?,
        )),
        _ => Err(LocationError::BadUrl {
            url: redact_url(url),
            reason: "a Consensus URL is mem:// or postgres://USER:PASSWORD@HOST:PORT/DB".into(),
        }),
    }
}

/// Opens the Blob a URL names (see the module docs) with one attempt (object_store's own
/// retries apply to it); [`open_blob_with`] retries under a policy.
pub async fn open_blob(url: &str) -> Result<Rc<dyn Blob>, LocationError> {
    match scheme_of(url) {
        "mem" => Ok(Rc::new(MemBlob::new())),
        "file" | "s3" => Ok(Rc::new(ObjectStoreBlob::open(url).await?)),
        _ => Err(bad_blob_url(url)),
    }
}

/// Opens the Blob a URL names, retrying a failure that can heal under `retry`.
pub async fn open_blob_with(
    url: &str,
    runtime: &Runtime,
    retry: &OpenRetry,
) -> Result<Rc<dyn Blob>, LocationError> {
    match scheme_of(url) {
        "mem" => Ok(Rc::new(MemBlob::new())),
        "file" | "s3" => Ok(Rc::new(
            ObjectStoreBlob::open_with(url, runtime, retry).await?,
        )),
        _ => Err(bad_blob_url(url)),
    }
}

fn bad_blob_url(url: &str) -> LocationError {
    LocationError::BadUrl {
        url: redact_url(url),
        reason: "a Blob URL is mem://, file:///DIR or s3://BUCKET/PREFIX?endpoint=URL".into(),
    }
}

/// Opens both services of a location, retrying a failure that can heal for the default budget.
pub async fn open_location(
    consensus_url: &str,
    blob_url: &str,
    runtime: &Runtime,
) -> Result<Location, LocationError> {
    open_location_with(consensus_url, blob_url, runtime, &OpenRetry::default()).await
}

/// Opens both services of a location under the retry policy `retry` (each service gets the
/// whole budget).
pub async fn open_location_with(
    consensus_url: &str,
    blob_url: &str,
    runtime: &Runtime,
    retry: &OpenRetry,
) -> Result<Location, LocationError> {
    let blob = open_blob_with(blob_url, runtime, retry).await?;
    let consensus = open_consensus_with(consensus_url, runtime, retry).await?;
    Ok(Location { blob, consensus })
}

/// A URL shown without its secrets (for logs and progress lines).
pub struct Redacted<'a>(pub &'a str);

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_drops_passwords_and_secret_params() {
        assert_eq!(
            redact_url("postgres://alice:hunter2@127.0.0.1:5432/db"),
            "postgres://alice@127.0.0.1:5432/db"
        );
        assert_eq!(
            redact_url("postgres://alice:p@ss@word@h/db?sslmode=disable&password=x"),
            "postgres://alice@h/db?sslmode=disable&password=<redacted>"
        );
        assert_eq!(redact_url("postgres://h/db"), "postgres://h/db");
        assert_eq!(
            redact_url("s3://b/p?endpoint=http://h:1&secret_access_key=zz"),
            "s3://b/p?endpoint=http://h:1&secret_access_key=<redacted>"
        );
        assert_eq!(redact_url("user:pw@host/db"), "<a URL without a scheme>");
        assert_eq!(redact_url("nonsense"), "nonsense");
        assert!(!redact_url("weird://u:secretpw@").contains("secretpw"));
    }
}
