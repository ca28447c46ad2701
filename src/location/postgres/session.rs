//! One connection of a [`super::PostgresConsensus`]: made lazily, replaced when it closed, with
//! the statements prepared on it.
//!
//! Every statement is prepared once per connection and then sent by name, so a call is one round
//! trip (Bind/Execute/Sync) rather than two (a Parse/Describe of an unnamed statement first).
//! tokio-postgres sets `TCP_NODELAY` on its sockets, so a small statement is not held back by
//! Nagle's algorithm waiting for the previous reply's ACK.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, NoTls, Statement};

use crate::runtime::Runtime;

/// How long one statement (or one connection attempt) may take before it counts as a timeout.
pub(super) const CALL_TIMEOUT_MS: u64 = 10_000;

/// Which server answers: they differ in isolation and locking (see the parent module's docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dialect {
    /// PostgreSQL: sessions at READ COMMITTED; a seqno jump and truncate take a table lock.
    Postgres,
    /// CockroachDB's PostgreSQL wire: every transaction is SERIALIZABLE, and it has no
    /// `LOCK TABLE`; every statement runs alone.
    Cockroach,
}

/// What the connections of one handle share: where to connect and the runtime that times calls.
pub(super) struct Link {
    pub(super) config: Config,
    pub(super) runtime: Runtime,
    /// Learnt from `version()` on the first connection.
    pub(super) dialect: Cell<Dialect>,
}

/// What failed while talking to the server, before it is mapped for a caller.
pub(super) enum CallError {
    /// The statement was never sent (no connection could be made in time).
    NotSent(String),
    /// No connection could be made: the server or the network refused it (nothing was sent).
    Connect(tokio_postgres::Error),
    /// The statement ran out of time.
    Timeout,
    /// The server or the connection answered with an error.
    Pg(tokio_postgres::Error),
}

/// Statements prepared on one connection, by their SQL.
#[derive(Default)]
struct Prepared {
    // The connection they belong to (held, so no later connection can share its address).
    on: Option<Rc<Client>>,
    statements: Vec<(&'static str, Statement)>,
}

/// One connection slot (see the module docs).
#[derive(Default)]
pub(super) struct Session {
    client: RefCell<Option<Rc<Client>>>,
    prepared: RefCell<Prepared>,
    // One reconnect at a time.
    connecting: futures::lock::Mutex<()>,
}

impl Session {
    /// The live connection, making a new one if there is none or it closed.
    pub(super) async fn client(&self, link: &Link) -> Result<Rc<Client>, CallError> {
        if let Some(c) = self.live_client() {
            return Ok(c);
        }
        let _guard = self.connecting.lock().await;
        if let Some(c) = self.live_client() {
            return Ok(c);
        }
        let client = connect(link).await?;
        *self.client.borrow_mut() = Some(client.clone());
        Ok(client)
    }

    fn live_client(&self) -> Option<Rc<Client>> {
        let client = self.client.borrow();
        client.as_ref().filter(|c| !c.is_closed()).cloned()
    }

    /// Drops the connection (the server rolls back whatever it had open); the next call makes a
    /// new one.
    pub(super) fn discard(&self) {
        self.client.borrow_mut().take();
        *self.prepared.borrow_mut() = Prepared::default();
    }

    /// `sql` prepared on `client` (prepared now if it is not yet). Preparing sends nothing
    /// that changes data, so a failure here means the statement did not run.
    pub(super) async fn statement(
        &self,
        link: &Link,
        client: &Rc<Client>,
        sql: &'static str,
    ) -> Result<Statement, CallError> {
        let mine = |p: &Prepared| p.on.as_ref().is_some_and(|c| Rc::ptr_eq(c, client));
        {
            let p = self.prepared.borrow();
            if mine(&p) {
                if let Some((_, st)) = p.statements.iter().find(|(q, _)| *q == sql) {
                    return Ok(st.clone());
                }
            }
        }
        let st = timed(link, client.prepare(sql)).await?;
        let mut p = self.prepared.borrow_mut();
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

    /// Runs one prepared query on this slot's live connection.
    pub(super) async fn query(
        &self,
        link: &Link,
        sql: &'static str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, CallError> {
        let client = self.client(link).await?;
        let st = self.statement(link, &client, sql).await?;
        timed(link, client.query(&st, params)).await
    }

    /// Runs one prepared statement on this slot's live connection; the rows it changed.
    pub(super) async fn execute(
        &self,
        link: &Link,
        sql: &'static str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, CallError> {
        let client = self.client(link).await?;
        let st = self.statement(link, &client, sql).await?;
        timed(link, client.execute(&st, params)).await
    }
}

/// `call` bounded by [`CALL_TIMEOUT_MS`].
pub(super) async fn timed<T>(
    link: &Link,
    call: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, CallError> {
    match link.runtime.timeout(CALL_TIMEOUT_MS, call).await {
        Err(_) => Err(CallError::Timeout),
        Ok(r) => r.map_err(CallError::Pg),
    }
}

/// A new connection with its session set up: the dialect learnt (first time) and the isolation
/// level the dialect needs.
async fn connect(link: &Link) -> Result<Rc<Client>, CallError> {
    let connecting = link.config.connect(NoTls);
    let (client, connection) = match link.runtime.timeout(CALL_TIMEOUT_MS, connecting).await {
        Err(_) => {
            return Err(CallError::NotSent(format!(
                "connect timeout after {CALL_TIMEOUT_MS} ms"
            )))
        }
        Ok(Err(e)) => return Err(CallError::Connect(e)),
        Ok(Ok(pair)) => pair,
    };
    // The connection future drives the socket; it ends when the connection closes, and the
    // client then reports `is_closed`.
    drop(::tokio::task::spawn_local(async move {
        let _ = connection.await;
    }));
    let client = Rc::new(client);
    let setup = async {
        let version: String = client
            .query_one("SELECT version()", &[])
            .await?
            .try_get(0)?;
        let dialect = if version.contains("CockroachDB") {
            Dialect::Cockroach
        } else {
            Dialect::Postgres
        };
        let level = match dialect {
            Dialect::Postgres => "READ COMMITTED",
            Dialect::Cockroach => "SERIALIZABLE",
        };
        client
            .batch_execute(&format!(
                "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL {level}"
            ))
            .await?;
        Ok::<_, tokio_postgres::Error>(dialect)
    };
    match link.runtime.timeout(CALL_TIMEOUT_MS, setup).await {
        Err(_) => Err(CallError::NotSent(format!(
            "session setup timeout after {CALL_TIMEOUT_MS} ms"
        ))),
        Ok(Err(e)) => Err(CallError::Pg(e)),
        Ok(Ok(dialect)) => {
            link.dialect.set(dialect);
            Ok(client)
        }
    }
}

/// The server's message (with its SQLSTATE) when it sent one, else the client's with its causes
/// ("error connecting to server: Connection refused (os error 111)").
pub(super) fn pg_message(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} (SQLSTATE {})", db.message(), db.code().code());
    }
    crate::location::open_error::error_chain(e)
}

/// Whether a failure may heal by itself, so that trying again later can succeed: the server is
/// shutting down, restarting or recovering from a crash, has no connection slot free, or the
/// connection was refused, reset or closed. Not: bad credentials, a missing database or table,
/// an unknown host (its name does not resolve), or anything else the server answers.
pub(super) fn heals(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        Some(code) => code_heals(code),
        None => e.is_closed() || io_kind(e).is_some_and(io_heals),
    }
}

/// The SQLSTATEs of a server that is going away or coming back (see [`heals`]).
pub(super) fn code_heals(code: &SqlState) -> bool {
    [
        // 57P01: "terminating connection due to administrator command" (a fast or smart shutdown).
        SqlState::ADMIN_SHUTDOWN,
        // 57P02: another backend crashed and the server is resetting.
        SqlState::CRASH_SHUTDOWN,
        // 57P03: "the database system is starting up", "... is shutting down", "... in recovery".
        SqlState::CANNOT_CONNECT_NOW,
        // 53300: every connection slot is taken.
        SqlState::TOO_MANY_CONNECTIONS,
        // Class 08: the connection failed.
        SqlState::CONNECTION_EXCEPTION,
        SqlState::CONNECTION_FAILURE,
        SqlState::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
    ]
    .contains(code)
}

/// The socket errors of a server that is not listening yet or went away (see [`heals`]); a name
/// that does not resolve is none of them.
pub(super) fn io_heals(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        kind,
        K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::NotConnected
            | K::BrokenPipe
            | K::UnexpectedEof
            | K::TimedOut
    )
}

/// The kind of the I/O error under `e`, if one is.
fn io_kind(e: &tokio_postgres::Error) -> Option<std::io::ErrorKind> {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        source = s.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    #[test]
    fn a_restarting_server_heals_and_a_wrong_setup_does_not() {
        for code in [
            "57P01", "57P02", "57P03", "53300", "08000", "08001", "08006",
        ] {
            assert!(code_heals(&SqlState::from_code(code)), "{code} heals");
        }
        // Wrong password, bad authorization, missing database, missing table, syntax, unique.
        for code in ["28P01", "28000", "3D000", "42P01", "42601", "23505"] {
            assert!(!code_heals(&SqlState::from_code(code)), "{code} does not");
        }
        for kind in [
            ErrorKind::ConnectionRefused,
            ErrorKind::ConnectionReset,
            ErrorKind::ConnectionAborted,
            ErrorKind::UnexpectedEof,
            ErrorKind::TimedOut,
        ] {
            assert!(io_heals(kind), "{kind:?} heals");
        }
        for kind in [
            ErrorKind::NotFound,
            ErrorKind::PermissionDenied,
            ErrorKind::InvalidInput,
            ErrorKind::Other,
        ] {
            assert!(!io_heals(kind), "{kind:?} does not");
        }
    }

    /// Real client errors, no server needed: a loopback port nobody listens on refuses (heals:
    /// the server may be starting), a name that does not resolve does not heal.
    #[test]
    fn a_refused_connection_heals_and_an_unknown_host_does_not() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let rt = ::tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let connect = |url: String| {
            rt.block_on(async move {
                match tokio_postgres::connect(&url, NoTls).await {
                    Ok(_) => panic!("connected to {url}"),
                    Err(e) => e,
                }
            })
        };
        let refused = connect(format!("postgres://u:pw@127.0.0.1:{port}/db"));
        assert!(heals(&refused), "refused: {refused}");
        let unknown = connect("postgres://u:pw@no-such-host.invalid:5432/db".into());
        assert!(!heals(&unknown), "unknown host: {unknown}");
    }
}
