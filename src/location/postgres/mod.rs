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
//! **compare_and_set is one statement**: an `INSERT ... SELECT` that inserts the new row only if
//! the key's greatest seqno is still the expected one (or, for `expected = None`, if the key has
//! no row), with `ON CONFLICT DO NOTHING`. It committed iff it inserted a row. Two inserters of the
//! same new seqno cannot both win: the primary key makes the second wait for the first and then
//! do nothing. Sessions run at `SERIALIZABLE` isolation, so inserters of *different* new seqnos
//! over the same expected head (the contract allows jumps; persist only ever adds one) cannot both
//! win either: one of them gets a serialization failure, which is determinate and retried.
//!
//! **Errors, as the original maps them**:
//! - a serialization failure (`40001`) is [`ExternalError::Determinate`]: the transaction rolled
//!   back, the statement did not happen;
//! - not reaching the server at all (the connection was known closed and reconnecting failed) is
//!   determinate: no statement was sent;
//! - the connection lost mid-call, a call that outlived its timeout, and every other error the
//!   server answers are [`ExternalError::Indeterminate`]: the statement may have run;
//! - the table gone, or columns of another type, and rows that do not decode (a negative seqno)
//!   are [`ExternalError::Permanent`]: retrying cannot help. Each names the URL without its
//!   password.
//!
//! Every statement is prepared once per connection and then sent by name, so a call is one round
//! trip (Bind/Execute/Sync) rather than two (a Parse/Describe of an unnamed statement first).
//! A lost connection (the server restarted) is replaced on the next call: the handle keeps one
//! connection (tokio-postgres pipelines concurrent statements over it), so one process needs no
//! pool. CockroachDB speaks the same wire protocol and runs every transaction `SERIALIZABLE`; the
//! statements use nothing PostgreSQL-specific beyond `ON CONFLICT DO NOTHING` and a CTE with a
//! `DELETE ... RETURNING`, which CockroachDB supports. (Only PostgreSQL 15 was tested.)

use std::cell::RefCell;
use std::rc::Rc;
use std::str::FromStr;

use async_trait::async_trait;
use bytes::Bytes;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, NoTls, Statement};

use super::url::{redact_url, LocationError};
use super::{
    validate_compare_and_set, BrokenAt, CaSResult, Consensus, ExternalError, PermanentKind, SeqNo,
    VersionedData,
};
use crate::runtime::Runtime;

/// How long one statement (or one connection attempt) may take before it counts as a timeout.
const CALL_TIMEOUT_MS: u64 = 10_000;

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

const CAS_SOME: &str = "INSERT INTO consensus (shard, sequence_number, data)
    SELECT $1, $2, $3
    WHERE (SELECT sequence_number FROM consensus WHERE shard = $1
           ORDER BY sequence_number DESC LIMIT 1) = $4
    ON CONFLICT DO NOTHING";

const CAS_NONE: &str = "INSERT INTO consensus (shard, sequence_number, data)
    SELECT $1, $2, $3
    WHERE NOT EXISTS (SELECT 1 FROM consensus WHERE shard = $1)
    ON CONFLICT DO NOTHING";

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

/// Consensus on a PostgreSQL table. See the module docs. Clones share the connection.
#[derive(Clone)]
pub struct PostgresConsensus {
    inner: Rc<Inner>,
}

struct Inner {
    config: Config,
    url: String,
    runtime: Runtime,
    client: RefCell<Option<Rc<Client>>>,
    // The statements prepared on the current connection (a connection's own: a new connection
    // starts empty), so that each call after the first is one round trip (Bind/Execute/Sync)
    // instead of two (an unnamed Parse/Describe first).
    prepared: RefCell<Prepared>,
    // One reconnect at a time.
    connecting: futures::lock::Mutex<()>,
}

impl std::fmt::Debug for PostgresConsensus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConsensus")
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

/// Statements prepared on one connection, by their SQL.
#[derive(Default)]
struct Prepared {
    // The connection they belong to (held, so no later connection can share its address).
    on: Option<Rc<Client>>,
    statements: Vec<(&'static str, Statement)>,
}

/// What failed while talking to the server, before it is mapped for a caller.
enum CallError {
    /// The statement was never sent (no connection could be made).
    NotSent(String),
    /// The statement ran out of time.
    Timeout,
    /// The server or the connection answered with an error.
    Pg(tokio_postgres::Error),
}

impl PostgresConsensus {
    /// Connects to the database `url` names, creates the `consensus` table if it is absent and
    /// checks its columns. A refused connection, wrong credentials, a missing database and a table
    /// of another schema are each a [`LocationError`] naming the URL without its password.
    pub async fn open(url: &str, runtime: Runtime) -> Result<PostgresConsensus, LocationError> {
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
        let inner = Rc::new(Inner {
            config,
            url: redacted.clone(),
            runtime,
            client: RefCell::new(None),
            prepared: RefCell::new(Prepared::default()),
            connecting: futures::lock::Mutex::new(()),
        });
        let this = PostgresConsensus { inner };
        let client = this.connect().await.map_err(|e| this.open_error(e))?;
        // Concurrent creators race on the catalog: "already exists" means someone else won.
        match client.batch_execute(CREATE_TABLE).await {
            Ok(()) => {}
            Err(e)
                if e.code() == Some(&SqlState::UNIQUE_VIOLATION)
                    || e.code() == Some(&SqlState::DUPLICATE_TABLE)
                    || e.code() == Some(&SqlState::DUPLICATE_OBJECT) => {}
            Err(e) => return Err(this.open_error(CallError::Pg(e))),
        }
        let rows = client
            .query(COLUMNS, &[])
            .await
            .map_err(|e| this.open_error(CallError::Pg(e)))?;
        let found: Vec<(String, String)> = rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect();
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
        if !matches {
            let show = |cols: Vec<String>| cols.join(", ");
            return Err(LocationError::Schema {
                url: redacted,
                table: "consensus".into(),
                detail: format!(
                    "it has ({}), expected ({})",
                    show(found.iter().map(|(n, t)| format!("{n} {t}")).collect()),
                    show(want.iter().map(|(n, t)| format!("{n} {t}")).collect())
                ),
            });
        }
        Ok(this)
    }

    /// The URL this handle is connected to, without its password.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    fn open_error(&self, e: CallError) -> LocationError {
        let url = self.inner.url.clone();
        match e {
            CallError::NotSent(reason) => LocationError::Connect { url, reason },
            CallError::Timeout => LocationError::Connect {
                url,
                reason: format!("timeout after {CALL_TIMEOUT_MS} ms"),
            },
            CallError::Pg(e) => {
                let reason = pg_message(&e);
                match e.code() {
                    Some(c)
                        if *c == SqlState::INVALID_PASSWORD
                            || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
                    {
                        LocationError::Auth { url, reason }
                    }
                    Some(c) if *c == SqlState::INVALID_CATALOG_NAME => LocationError::Missing {
                        url,
                        what: "the database".into(),
                        reason,
                    },
                    Some(_) => LocationError::Other { url, reason },
                    None => LocationError::Connect { url, reason },
                }
            }
        }
    }

    /// The live connection, making a new one if there is none or it closed.
    async fn client(&self) -> Result<Rc<Client>, CallError> {
        if let Some(c) = self.live_client() {
            return Ok(c);
        }
        let _guard = self.inner.connecting.lock().await;
        if let Some(c) = self.live_client() {
            return Ok(c);
        }
        self.connect().await
    }

    fn live_client(&self) -> Option<Rc<Client>> {
        let client = self.inner.client.borrow();
        client.as_ref().filter(|c| !c.is_closed()).cloned()
    }

    async fn connect(&self) -> Result<Rc<Client>, CallError> {
        let connecting = self.inner.config.connect(NoTls);
        let (client, connection) = match self
            .inner
            .runtime
            .timeout(CALL_TIMEOUT_MS, connecting)
            .await
        {
            Err(_) => {
                return Err(CallError::NotSent(format!(
                    "connect timeout after {CALL_TIMEOUT_MS} ms"
                )))
            }
            Ok(Err(e)) if e.code().is_some() => return Err(CallError::Pg(e)),
            Ok(Err(e)) => return Err(CallError::NotSent(pg_message(&e))),
            Ok(Ok(pair)) => pair,
        };
        // The connection future drives the socket; it ends when the connection closes, and the
        // client then reports `is_closed`.
        drop(::tokio::task::spawn_local(async move {
            let _ = connection.await;
        }));
        let client = Rc::new(client);
        let isolation = "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE";
        match self
            .inner
            .runtime
            .timeout(CALL_TIMEOUT_MS, client.batch_execute(isolation))
            .await
        {
            Err(_) => {
                return Err(CallError::NotSent(format!(
                    "session setup timeout after {CALL_TIMEOUT_MS} ms"
                )))
            }
            Ok(Err(e)) => return Err(CallError::Pg(e)),
            Ok(Ok(())) => {}
        }
        *self.inner.client.borrow_mut() = Some(client.clone());
        Ok(client)
    }

    /// `sql` prepared on `client` (prepared now if it is not yet). Preparing sends nothing
    /// that changes data, so a failure here means the statement did not run.
    async fn statement(
        &self,
        client: &Rc<Client>,
        sql: &'static str,
    ) -> Result<Statement, CallError> {
        let mine = |p: &Prepared| p.on.as_ref().is_some_and(|c| Rc::ptr_eq(c, client));
        {
            let p = self.inner.prepared.borrow();
            if mine(&p) {
                if let Some((_, st)) = p.statements.iter().find(|(q, _)| *q == sql) {
                    return Ok(st.clone());
                }
            }
        }
        let st = match self
            .inner
            .runtime
            .timeout(CALL_TIMEOUT_MS, client.prepare(sql))
            .await
        {
            Err(_) => return Err(CallError::Timeout),
            Ok(r) => r.map_err(CallError::Pg)?,
        };
        let mut p = self.inner.prepared.borrow_mut();
        if !mine(&p) {
            *p = Prepared {
                on: Some(Rc::clone(client)),
                statements: Vec::new(),
            };
        }
        if !p.statements.iter().any(|(q, _)| *q == sql) {
            p.statements.push((sql, st.clone()));
        }
        Ok(st)
    }

    /// Runs one query with a timeout on a live connection.
    async fn query(
        &self,
        sql: &'static str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, CallError> {
        let client = self.client().await?;
        let st = self.statement(&client, sql).await?;
        match self
            .inner
            .runtime
            .timeout(CALL_TIMEOUT_MS, client.query(&st, params))
            .await
        {
            Err(_) => Err(CallError::Timeout),
            Ok(r) => r.map_err(CallError::Pg),
        }
    }

    async fn execute(
        &self,
        sql: &'static str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, CallError> {
        let client = self.client().await?;
        let st = self.statement(&client, sql).await?;
        match self
            .inner
            .runtime
            .timeout(CALL_TIMEOUT_MS, client.execute(&st, params))
            .await
        {
            Err(_) => Err(CallError::Timeout),
            Ok(r) => r.map_err(CallError::Pg),
        }
    }

    /// Maps a failed call on `key` (see the module docs).
    fn map_err(&self, key: &str, e: CallError) -> ExternalError {
        let url = &self.inner.url;
        match e {
            CallError::NotSent(reason) => {
                ExternalError::determinate(format!("postgres {url}: not connected: {reason}"))
            }
            CallError::Timeout => ExternalError::indeterminate(format!(
                "postgres {url}: timeout after {CALL_TIMEOUT_MS} ms"
            )),
            CallError::Pg(e) => {
                let msg = pg_message(&e);
                match e.code() {
                    Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE => {
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

/// The server's message (with its SQLSTATE) when it sent one, else the client's.
fn pg_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => e.to_string(),
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
        let inserted = match expected {
            Some(expected) => {
                let expected = to_i64(expected);
                self.execute(CAS_SOME, &[&key, &seqno, &data, &expected])
                    .await
            }
            None => self.execute(CAS_NONE, &[&key, &seqno, &data]).await,
        }
        .map_err(|e| self.map_err(key, e))?;
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
        let rows = self
            .query(TRUNCATE, &[&key, &at])
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
