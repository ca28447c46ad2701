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

use std::fmt;
use std::rc::Rc;

use super::mem::{MemBlob, MemConsensus};
use super::object_store::ObjectStoreBlob;
use super::postgres::PostgresConsensus;
use super::{Blob, Consensus, Location};
use crate::runtime::Runtime;

/// Why a location could not be opened. Each variant's `url` is already redacted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    /// The URL does not parse, or names a scheme or option this service does not know.
    #[error("bad location URL {url}: {reason}")]
    BadUrl {
        /// The URL, without its password.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server could not be reached (refused, unknown host, timed out).
    #[error("cannot connect to {url}: {reason}")]
    Connect {
        /// The URL, without its password.
        url: String,
        /// What the connection attempt said.
        reason: String,
    },
    /// The server refused the credentials.
    #[error("{url} refused the credentials: {reason}")]
    Auth {
        /// The URL, without its password.
        url: String,
        /// What the server said.
        reason: String,
    },
    /// The database, bucket or directory the URL names does not exist.
    #[error("{url}: {what} does not exist ({reason})")]
    Missing {
        /// The URL, without its password.
        url: String,
        /// What is missing ("database", "bucket", ...).
        what: String,
        /// What the server said.
        reason: String,
    },
    /// The table exists with columns other than the ones this implementation stores.
    #[error("{url}: table {table} has another schema: {detail}; nothing was written")]
    Schema {
        /// The URL, without its password.
        url: String,
        /// The table.
        table: String,
        /// Which columns it has and which it should have.
        detail: String,
    },
    /// Anything else the server answered while opening.
    #[error("{url}: {reason}")]
    Other {
        /// The URL, without its password.
        url: String,
        /// What went wrong.
        reason: String,
    },
}

impl LocationError {
    /// The (redacted) URL the error is about.
    pub fn url(&self) -> &str {
        match self {
            LocationError::BadUrl { url, .. }
            | LocationError::Connect { url, .. }
            | LocationError::Auth { url, .. }
            | LocationError::Missing { url, .. }
            | LocationError::Schema { url, .. }
            | LocationError::Other { url, .. } => url,
        }
    }
}

/// `url` with the password of its user-info and the values of query parameters whose name
/// mentions a password, secret or token removed. Works on strings that do not parse, too (it
/// only looks at `://`, `@`, `?` and `&`), so a bad URL can be named in an error safely.
pub fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = String::with_capacity(url.len());
    match base.find("://") {
        Some(i) => {
            let (scheme, rest) = base.split_at(i + 3);
            out.push_str(scheme);
            // The authority ends at the first '/'; user-info ends at its last '@'.
            let auth_end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(auth_end);
            match authority.rfind('@') {
                Some(at) => {
                    let userinfo = &authority[..at];
                    let user = userinfo.split(':').next().unwrap_or("");
                    out.push_str(user);
                    out.push_str(&authority[at..]);
                }
                None => out.push_str(authority),
            }
            out.push_str(path);
        }
        // No scheme: it may still hold user-info; show none of it.
        None if base.contains('@') => out.push_str("<a URL without a scheme>"),
        None => out.push_str(base),
    }
    if let Some(query) = query {
        out.push('?');
        let params: Vec<String> = query
            .split('&')
            .map(|kv| {
                let (k, _) = kv.split_once('=').unwrap_or((kv, ""));
                let lower = k.to_ascii_lowercase();
                if ["password", "secret", "token", "key"]
                    .iter()
                    .any(|s| lower.contains(s))
                {
                    format!("{k}=<redacted>")
                } else {
                    kv.to_string()
                }
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    out
}

fn scheme_of(url: &str) -> &str {
    url.split_once("://").map(|(s, _)| s).unwrap_or("")
}

/// Opens the Consensus a URL names (see the module docs).
pub async fn open_consensus(
    url: &str,
    runtime: &Runtime,
) -> Result<Rc<dyn Consensus>, LocationError> {
    match scheme_of(url) {
        "mem" => Ok(Rc::new(MemConsensus::new())),
        "postgres" | "postgresql" => Ok(Rc::new(
            PostgresConsensus::open(url, runtime.clone()).await?,
        )),
        _ => Err(LocationError::BadUrl {
            url: redact_url(url),
            reason: "a Consensus URL is mem:// or postgres://USER:PASSWORD@HOST:PORT/DB".into(),
        }),
    }
}

/// Opens the Blob a URL names (see the module docs).
pub async fn open_blob(url: &str) -> Result<Rc<dyn Blob>, LocationError> {
    match scheme_of(url) {
        "mem" => Ok(Rc::new(MemBlob::new())),
        "file" | "s3" => Ok(Rc::new(ObjectStoreBlob::open(url).await?)),
        _ => Err(LocationError::BadUrl {
            url: redact_url(url),
            reason: "a Blob URL is mem://, file:///DIR or s3://BUCKET/PREFIX?endpoint=URL".into(),
        }),
    }
}

/// Opens both services of a location.
pub async fn open_location(
    consensus_url: &str,
    blob_url: &str,
    runtime: &Runtime,
) -> Result<Location, LocationError> {
    let blob = open_blob(blob_url).await?;
    let consensus = open_consensus(consensus_url, runtime).await?;
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
