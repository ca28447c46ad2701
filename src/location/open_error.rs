//! Why a native location could not be opened ([`LocationError`]), and URLs named without their
//! secrets ([`redact_url`]). Below both the URL factory (`url.rs`) and the services it opens
//! (`postgres`, `object_store`), which all name their URL this way: every error carries the URL
//! already redacted, never a password or secret query parameter.

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

impl LocationError {
    /// This error with `note` appended to what it says (the URL and the kind stay).
    pub fn with_note(self, note: &str) -> LocationError {
        let add = |s: String| format!("{s}; {note}");
        match self {
            LocationError::BadUrl { url, reason } => LocationError::BadUrl {
                url,
                reason: add(reason),
            },
            LocationError::Connect { url, reason } => LocationError::Connect {
                url,
                reason: add(reason),
            },
            LocationError::Auth { url, reason } => LocationError::Auth {
                url,
                reason: add(reason),
            },
            LocationError::Missing { url, what, reason } => LocationError::Missing {
                url,
                what,
                reason: add(reason),
            },
            LocationError::Schema { url, table, detail } => LocationError::Schema {
                url,
                table,
                detail: add(detail),
            },
            LocationError::Other { url, reason } => LocationError::Other {
                url,
                reason: add(reason),
            },
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

/// `e`'s message followed by each of its causes not already in it, joined by ": " (a client's own
/// message often stops at "error connecting to server" or "error sending request").
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
