//! [`Consensus`] on PostgreSQL (native only), through tokio-postgres.
//!
//! One table holds every key's versions:
//!
//! ```sql
//! CREATE TABLE consensus (shard text NOT NULL, sequence_number bigint NOT NULL,
//!                         data bytea NOT NULL, PRIMARY KEY (shard, sequence_number))
//! ```
//!
//! [`PostgresConsensus::open`] creates it when it is absent and refuses a `consensus` table with
//! other columns ([`LocationError::Schema`], before anything is written).
//!
//! **compare_and_set, the common case, is one statement at READ COMMITTED**: an
//! `INSERT ... SELECT` that inserts the new row only if the key's greatest seqno is still the
//! expected one (for `expected = None`: if the key has no row). It committed iff it inserted a
//! row; a unique violation (`23505`: the new seqno's row exists) is a mismatch too, since the
//! statement ran alone and rolled back. When the new seqno is the *successor* (`expected + 1`,
//! or `1` over an absent key, which is all persist and the oracle ever write), the primary key
//! alone makes it safe: every racer over one expected head inserts the same
//! `(shard, sequence_number)`, so a second racer waits for the first and then fails on the key
//! (or, if the first rolled back, inserts). A racer whose statement snapshot is stale sees an
//! old head and so inserts a seqno that already exists: it fails on the key and inserts nothing.
//! No `ON CONFLICT DO NOTHING`: its speculative insertion made every statement a quarter slower
//! (measured beside a plain INSERT, `scripts/bench-postgres.sh`) to spare the rare lost race an
//! error.
//!
//! Two things could still fork the chain at READ COMMITTED, and both take
//! `LOCK TABLE consensus IN SHARE ROW EXCLUSIVE MODE` in a transaction of their own:
//! - a **jump** (a new seqno past the successor, which the contract allows): two racers over
//!   one head inserting *different* seqnos do not collide on the key. The lock conflicts with
//!   every insert's ROW EXCLUSIVE lock and with itself, so a jump runs alone, and the statement
//!   after the lock sees every insert that committed before it;
//! - **truncate**: a successor insert whose snapshot predates rows `expected + 1 ..` would not
//!   collide with `expected + 1` if a truncate deleted that row before the insert checked the
//!   key. An insert takes its table lock before its snapshot and holds it to its end, and the
//!   truncate's lock waits for it, so no truncate commits between an insert's snapshot and its
//!   key check.
//!
//! The locked transactions run on a second connection of the handle (one at a time), since the
//! first pipelines concurrent statements; a locked call that fails or is cancelled drops that
//! connection, so the server rolls it back and releases the lock. Both are rare: persist never
//! jumps, and it truncates once per garbage collection.
//!
//! **Errors, as the original maps them**:
//! - a serialization failure (`40001`) or a deadlock (`40P01`) is
//!   [`ExternalError::Determinate`]: the transaction rolled back, the statement did not happen;
//! - not reaching the server at all (the connection was known closed and reconnecting failed) is
//!   determinate: no statement was sent;
//! - the connection lost mid-call, a call that outlived its timeout, and every other error the
//!   server answers are [`ExternalError::Indeterminate`]: the statement may have run;
//! - the table gone, or columns of another type, and rows that do not decode (a negative seqno)
//!   are [`ExternalError::Permanent`]: retrying cannot help. Each names the URL without its
//!   password.
//!
//! - reconnecting fails (`57P01`/`57P03` while the server restarts, a refused connection): the
//!   statement was not sent, so determinate; only a database that is gone is permanent.
//!
//! Opening retries what can heal (a restarting server, a refused connection) for a bounded time
//! and fails at once on what cannot ([`crate::location::open_retry`]).
//!
//! A lost connection (the server restarted) is replaced on the next call: the handle keeps one
//! connection for ordinary calls (tokio-postgres pipelines concurrent statements over it) and one
//! for the locked transactions, so one process needs no pool.
//!
//! **CockroachDB** speaks the same wire protocol, runs every transaction `SERIALIZABLE` and has
//! no `LOCK TABLE`: a connection that finds `CockroachDB` in `version()` sets SERIALIZABLE, and
//! then a jump and a truncate are single statements like the rest (a racer that would fork the
//! chain gets a serialization failure, which is determinate and retried; one that hits the key
//! gets `23505` there too). The statements use nothing beyond `INSERT ... SELECT` and a CTE with
//! a `DELETE ... RETURNING`, which CockroachDB supports. Only PostgreSQL 15 was tested: CockroachDB is not installable here.

mod session;

use std::cell::Cell;
use std::rc::Rc;
use std::str::FromStr;

use async_trait::async_trait;
use bytes::Bytes;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, Statement};

use self::session::{heals, pg_message, timed, CallError, Dialect, Link, Session, CALL_TIMEOUT_MS};
use super::open_error::{redact_url, LocationError};
use super::open_retry::OpenRetry;
use super::{
    validate_compare_and_set, BrokenAt, CaSResult, Consensus, ExternalError, PermanentKind, SeqNo,
    VersionedData,
};
use crate::retry::Attempt;
use crate::runtime::Runtime;

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS consensus (
    shard text NOT NULL,
    sequence_number bigint NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (shard, sequence_number)
)";

const COLUMNS: &str = "SELECT column_name::text, data_type::text FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = 'consensus' ORDER BY ordinal_position";

const HEAD: &str = "SELECT sequence_number, data FROM consensus
    WHERE shard = $1 ORDER BY sequence_number DESC LIMIT 1";

/// The compare_and_set statement over an existing head (`$4`), as sent; public so that
/// `persistcli bench` times exactly this statement as its raw baseline.
pub const CAS_SOME: &str = "INSERT INTO consensus (shard, sequence_number, data)
    SELECT $1, $2, $3
    WHERE (SELECT sequence_number FROM consensus WHERE shard = $1
           ORDER BY sequence_number DESC LIMIT 1) = $4";

const CAS_NONE: &str = "INSERT INTO consensus (shard, sequence_number, data)
    SELECT $1, $2, $3
    WHERE NOT EXISTS (SELECT 1 FROM consensus WHERE shard = $1)";

const SCAN: &str = "SELECT sequence_number, data FROM consensus
    WHERE shard = $1 AND sequence_number >= $2 ORDER BY sequence_number ASC LIMIT $3";

// One statement: delete below $2 only if the head is at or above it; report how many went and
// what the head was (NULL: the key has no versions).
const TRUNCATE: &str = "WITH head AS (
        SELECT sequence_number FROM consensus WHERE shard = $1
        ORDER BY sequence_number DESC LIMIT 1
    ), deleted AS (
        DELETE FROM consensus WHERE shard = $1 AND sequence_number < $2
          AND EXISTS (SELECT 1 FROM head WHERE sequence_number >= $2)
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM deleted), (SELECT sequence_number FROM head)";

const LIST_KEYS: &str = "SELECT DISTINCT shard FROM consensus";

/// Taken by a jump and a truncate (see the module docs): conflicts with itself and with the
/// ROW EXCLUSIVE lock every insert and delete takes.
const BEGIN_LOCK: &str = "BEGIN; LOCK TABLE consensus IN SHARE ROW EXCLUSIVE MODE";

/// Consensus on a PostgreSQL table. See the module docs. Clones share the connections.
#[derive(Clone)]
pub struct PostgresConsensus {
    inner: Rc<Inner>,
}

struct Inner {
    link: Link,
    url: String,
    /// Every call but the locked ones.
    shared: Session,
    /// The locked transactions, one at a time (`locking`).
    exclusive: Session,
    locking: futures::lock::Mutex<()>,
}

impl std::fmt::Debug for PostgresConsensus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConsensus")
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

/// Drops the exclusive connection unless disarmed: a locked transaction that failed or whose
/// future was dropped half-way must not keep its lock on an idle connection.
struct DiscardOnDrop<'a>(Option<&'a Session>);

impl Drop for DiscardOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(session) = self.0 {
            session.discard();
        }
    }
}

impl PostgresConsensus {
    /// Connects to the database `url` names, creates the `consensus` table if it is absent and
    /// checks its columns, retrying a failure that can heal for the default budget
    /// ([`OpenRetry::default`]: 30 s). See [`PostgresConsensus::open_with`].
    pub async fn open(url: &str, runtime: Runtime) -> Result<PostgresConsensus, LocationError> {
        Self::open_with(url, runtime, &OpenRetry::default()).await
    }

    /// [`PostgresConsensus::open`] under the retry policy `retry`. A server that refuses or
    /// resets the connection, or answers that it is shutting down, restarting or starting up
    /// (`57P01`, `57P02`, `57P03`), is tried again with back-off until `retry`'s budget is spent
    /// ([`crate::location::open_retry`]). A bad URL, an unknown host, wrong credentials, a missing
    /// database and a table of another schema fail at once. Every error is a [`LocationError`]
    /// naming the URL without its password.
    pub async fn open_with(
        url: &str,
        runtime: Runtime,
        retry: &OpenRetry,
    ) -> Result<PostgresConsensus, LocationError> {
        let redacted = redact_url(url);
        let mut config = Config::from_str(url).map_err(|e| LocationError::BadUrl {
            url: redacted.clone(),
            reason: e.to_string(),
        })?;
        if config.get_hosts().is_empty() {
            return Err(LocationError::BadUrl {
                url: redacted,
                reason: "no host".into(),
            });
        }
        config.application_name("persist-playground");
        retry
            .run(&runtime, || {
                Self::open_once(config.clone(), runtime.clone(), redacted.clone())
            })
            .await
    }

    /// One attempt to open: connect, create the table if absent, check its columns.
    async fn open_once(
        config: Config,
        runtime: Runtime,
        url: String,
    ) -> Result<PostgresConsensus, Attempt<LocationError>> {
        let inner = Rc::new(Inner {
            link: Link {
                config,
                runtime,
                dialect: Cell::new(Dialect::Postgres),
            },
            url: url.clone(),
            shared: Session::default(),
            exclusive: Session::default(),
            locking: futures::lock::Mutex::new(()),
        });
        let this = PostgresConsensus { inner };
        let client = this
            .inner
            .shared
            .client(&this.inner.link)
            .await
            .map_err(|e| open_error(&url, e))?;
        // Concurrent creators race on the catalog: "already exists" means someone else won.
        match client.batch_execute(CREATE_TABLE).await {
            Ok(()) => {}
            Err(e)
                if e.code() == Some(&SqlState::UNIQUE_VIOLATION)
                    || e.code() == Some(&SqlState::DUPLICATE_TABLE)
                    || e.code() == Some(&SqlState::DUPLICATE_OBJECT) => {}
            Err(e) => return Err(open_error(&url, CallError::Pg(e))),
        }
        let rows = client
            .query(COLUMNS, &[])
            .await
            .map_err(|e| open_error(&url, CallError::Pg(e)))?;
        let found: Vec<(String, String)> = rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect();
        check_columns(&url, &found).map_err(Attempt::Permanent)?;
        Ok(this)
    }

    /// The URL this handle is connected to, without its password.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// Runs `sql` on the shared connection.
    async fn query(
        &self,
        sql: &'static str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, CallError> {
        self.inner.shared.query(&self.inner.link, sql, params).await
    }

    /// Runs `call` on `sql` inside `BEGIN; LOCK ...; ...; COMMIT` on the exclusive connection
    /// (on CockroachDB: alone, on the shared connection; see the module docs).
    async fn locked<T, F, Fut>(&self, sql: &'static str, call: F) -> Result<T, CallError>
    where
        F: FnOnce(Rc<Client>, Statement) -> Fut,
        Fut: std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let (link, session) = (&self.inner.link, &self.inner.exclusive);
        if link.dialect.get() == Dialect::Cockroach {
            let client = self.inner.shared.client(link).await?;
            let st = self.inner.shared.statement(link, &client, sql).await?;
            return timed(link, call(client, st)).await;
        }
        let _one_at_a_time = self.inner.locking.lock().await;
        let client = session.client(link).await?;
        let st = session.statement(link, &client, sql).await?;
        let mut guard = DiscardOnDrop(Some(session));
        // Two round trips: BEGIN with the lock in one simple query, then the statement and its
        // COMMIT pipelined (after a failed statement the server answers COMMIT with a rollback).
        timed(link, client.batch_execute(BEGIN_LOCK)).await?;
        let statement_then_commit = async {
            let (out, commit) =
                futures::join!(call(Rc::clone(&client), st), client.batch_execute("COMMIT"));
            let out = out?;
            commit?;
            Ok::<T, tokio_postgres::Error>(out)
        };
        let out = timed(link, statement_then_commit).await?;
        guard.0 = None;
        Ok(out)
    }

    /// Maps a failed call on `key` (see the module docs).
    fn map_err(&self, key: &str, e: CallError) -> ExternalError {
        let url = &self.inner.url;
        match e {
            CallError::NotSent(reason) => {
                ExternalError::determinate(format!("postgres {url}: not connected: {reason}"))
            }
            // Reconnecting failed, so nothing was sent: determinate (and retried) whether the
            // server is restarting (57P01, 57P03) or refused us; only a database that is gone
            // will not heal.
            CallError::Connect(e) if e.code() == Some(&SqlState::INVALID_CATALOG_NAME) => {
                ExternalError::permanent(
                    key,
                    BrokenAt::Store,
                    PermanentKind::Missing,
                    format!("postgres {url}: the database is gone: {}", pg_message(&e)),
                )
            }
            CallError::Connect(e) => ExternalError::determinate(format!(
                "postgres {url}: not connected: {}",
                pg_message(&e)
            )),
            CallError::Timeout => ExternalError::indeterminate(format!(
                "postgres {url}: timeout after {CALL_TIMEOUT_MS} ms"
            )),
            CallError::Pg(e) => {
                let msg = pg_message(&e);
                match e.code() {
                    Some(c)
                        if *c == SqlState::T_R_SERIALIZATION_FAILURE
                            || *c == SqlState::T_R_DEADLOCK_DETECTED =>
                    {
                        ExternalError::determinate(format!("postgres {url}: {msg}"))
                    }
                    Some(c)
                        if *c == SqlState::UNDEFINED_TABLE
                            || *c == SqlState::UNDEFINED_COLUMN
                            || *c == SqlState::DATATYPE_MISMATCH
                            || *c == SqlState::INVALID_CATALOG_NAME =>
                    {
                        ExternalError::permanent(
                            key,
                            BrokenAt::Store,
                            PermanentKind::Missing,
                            format!(
                                "postgres {url}: the consensus table is missing or changed: {msg}"
                            ),
                        )
                    }
                    _ => ExternalError::indeterminate(format!("postgres {url}: {msg}")),
                }
            }
        }
    }

    fn decode_row(
        &self,
        key: &str,
        row: &tokio_postgres::Row,
    ) -> Result<VersionedData, ExternalError> {
        let seqno: i64 = row
            .try_get(0)
            .map_err(|e| self.undecodable(key, e.to_string()))?;
        let data: Vec<u8> = row
            .try_get(1)
            .map_err(|e| self.undecodable(key, e.to_string()))?;
        let seqno = u64::try_from(seqno)
            .map_err(|_| self.undecodable(key, format!("negative sequence_number {seqno}")))?;
        Ok(VersionedData {
            seqno: SeqNo(seqno),
            data: Bytes::from(data),
        })
    }

    fn undecodable(&self, key: &str, detail: String) -> ExternalError {
        ExternalError::permanent(
            key,
            BrokenAt::Store,
            PermanentKind::Undecodable,
            format!(
                "postgres {}: a consensus row does not decode: {detail}",
                self.inner.url
            ),
        )
    }
}

/// Maps a failure while opening `url` to its error, marked transient when it may heal
/// ([`session::heals`]: the server restarting, a refused or reset connection, a timeout).
fn open_error(url: &str, e: CallError) -> Attempt<LocationError> {
    let url = url.to_string();
    let e = match e {
        CallError::NotSent(reason) => {
            return Attempt::Transient(LocationError::Connect { url, reason })
        }
        CallError::Timeout => {
            return Attempt::Transient(LocationError::Connect {
                url,
                reason: format!("timeout after {CALL_TIMEOUT_MS} ms"),
            })
        }
        CallError::Connect(e) | CallError::Pg(e) => e,
    };
    let reason = pg_message(&e);
    match e.code() {
        Some(c)
            if *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            Attempt::Permanent(LocationError::Auth { url, reason })
        }
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => {
            Attempt::Permanent(LocationError::Missing {
                url,
                what: "the database".into(),
                reason,
            })
        }
        _ if heals(&e) => Attempt::Transient(LocationError::Connect { url, reason }),
        Some(_) => Attempt::Permanent(LocationError::Other { url, reason }),
        None => Attempt::Permanent(LocationError::Connect { url, reason }),
    }
}

/// Refuses a `consensus` table whose columns are not ours.
fn check_columns(url: &str, found: &[(String, String)]) -> Result<(), LocationError> {
    let want = [
        ("shard", "text"),
        ("sequence_number", "bigint"),
        ("data", "bytea"),
    ];
    let matches = found.len() == want.len()
        && found
            .iter()
            .zip(want.iter())
            .all(|((n, t), (wn, wt))| n == wn && t == wt);
    if matches {
        return Ok(());
    }
    let show = |cols: Vec<String>| cols.join(", ");
    Err(LocationError::Schema {
        url: url.to_string(),
        table: "consensus".into(),
        detail: format!(
            "it has ({}), expected ({})",
            show(found.iter().map(|(n, t)| format!("{n} {t}")).collect()),
            show(want.iter().map(|(n, t)| format!("{n} {t}")).collect())
        ),
    })
}

/// Whether `new` is the successor of `expected` (`expected + 1`, or `1` over an absent key):
/// the one new seqno the primary key alone makes safe (see the module docs).
fn is_successor(expected: Option<SeqNo>, new: SeqNo) -> bool {
    match expected {
        Some(e) => e.0.checked_add(1) == Some(new.0),
        None => new == SeqNo(1),
    }
}

fn to_i64(seqno: SeqNo) -> i64 {
    // Callers validate the range first; saturate rather than wrap if one did not.
    i64::try_from(seqno.0).unwrap_or(i64::MAX)
}

#[async_trait(?Send)]
impl Consensus for PostgresConsensus {
    async fn head(&self, key: &str) -> Result<Option<VersionedData>, ExternalError> {
        let rows = self
            .query(HEAD, &[&key])
            .await
            .map_err(|e| self.map_err(key, e))?;
        rows.first().map(|r| self.decode_row(key, r)).transpose()
    }

    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: VersionedData,
    ) -> Result<CaSResult, ExternalError> {
        validate_compare_and_set(expected, &new)?;
        let seqno = to_i64(new.seqno);
        let data: &[u8] = &new.data;
        let expected_i64 = expected.map(to_i64);
        let (sql, params): (_, Vec<&(dyn tokio_postgres::types::ToSql + Sync)>) =
            match &expected_i64 {
                Some(e) => (CAS_SOME, vec![&key, &seqno, &data, e]),
                None => (CAS_NONE, vec![&key, &seqno, &data]),
            };
        let inserted = if is_successor(expected, new.seqno) {
            let (link, shared) = (&self.inner.link, &self.inner.shared);
            shared.execute(link, sql, &params).await
        } else {
            let params = &params[..];
            self.locked(sql, |client, st| async move {
                client.execute(&st, params).await
            })
            .await
        }
        .or_else(|e| match e {
            // The new seqno's row exists: someone else's version is there; nothing was written.
            CallError::Pg(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => Ok(0),
            e => Err(self.map_err(key, e)),
        })?;
        Ok(if inserted == 1 {
            CaSResult::Committed
        } else {
            CaSResult::ExpectationMismatch
        })
    }

    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<Vec<VersionedData>, ExternalError> {
        if from > SeqNo::maximum() {
            return Ok(Vec::new());
        }
        let from = to_i64(from);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .query(SCAN, &[&key, &from, &limit])
            .await
            .map_err(|e| self.map_err(key, e))?;
        rows.iter().map(|r| self.decode_row(key, r)).collect()
    }

    async fn truncate(&self, key: &str, seqno: SeqNo) -> Result<usize, ExternalError> {
        if seqno > SeqNo::maximum() {
            return Err(ExternalError::determinate(format!(
                "truncate {key} to {seqno}: beyond the maximum seqno"
            )));
        }
        let at = to_i64(seqno);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&key, &at];
        let params = &params[..];
        let rows = self
            .locked(TRUNCATE, |client, st| async move {
                client.query(&st, params).await
            })
            .await
            .map_err(|e| self.map_err(key, e))?;
        let row = rows
            .first()
            .ok_or_else(|| self.undecodable(key, "truncate returned no row".into()))?;
        let deleted: i64 = row
            .try_get(0)
            .map_err(|e| self.undecodable(key, e.to_string()))?;
        let head: Option<i64> = row
            .try_get(1)
            .map_err(|e| self.undecodable(key, e.to_string()))?;
        match head {
            None => Err(ExternalError::determinate(format!(
                "truncate {key} to {seqno}: the key has no versions"
            ))),
            Some(head) if head < at => Err(ExternalError::determinate(format!(
                "truncate {key} to {seqno}: beyond the head v{head}"
            ))),
            Some(_) => Ok(usize::try_from(deleted).unwrap_or(0)),
        }
    }

    async fn list_keys(&self) -> Result<Vec<String>, ExternalError> {
        let rows = self
            .query(LIST_KEYS, &[])
            .await
            .map_err(|e| self.map_err("<list_keys>", e))?;
        rows.iter()
            .map(|r| {
                r.try_get::<_, String>(0)
                    .map_err(|e| self.undecodable("<list_keys>", e.to_string()))
            })
            .collect()
    }
}
