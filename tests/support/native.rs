//! What the native-backends tests share: the services `scripts/services.sh` started (each test
//! fails, loudly, when they are missing, so these tests can never pass without them), fresh
//! databases, S3 prefixes and directories per test, and the tokio runtime.
#![allow(dead_code)]

use std::cell::Cell;
use std::future::Future;
use std::path::PathBuf;

use persist_playground::runtime::tokio::TokioRuntime;
use persist_playground::runtime::Runtime;

/// The value of a variable `services_start` exports; panics naming it when it is missing.
pub fn service_env(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{name} is not set: these tests need the throwaway PostgreSQL and S3 emulator; run \
             them through scripts/test.sh (its native-backends layer), or \
             `source scripts/services.sh && services_start` first"
        ),
    }
}

/// The base PostgreSQL URL (its database `persist`).
pub fn postgres_url() -> String {
    service_env("PERSIST_TEST_POSTGRES_URL")
}

/// `url` with its database replaced by `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b.to_string(), format!("?{q}")),
        None => (url.to_string(), String::new()),
    };
    let cut = base.rfind('/').expect("a database in the URL");
    format!("{}/{db}{query}", &base[..cut])
}

/// A unique name for this process and call (databases, prefixes, directories).
pub fn unique(tag: &str) -> String {
    thread_local!(static N: Cell<u32> = const { Cell::new(0) });
    let n = N.with(|c| {
        c.set(c.get() + 1);
        c.get()
    });
    let tid = format!("{:?}", std::thread::current().id())
        .chars()
        .filter(|c| c.is_ascii_digit())
        .collect::<String>();
    format!("{tag}_{}_{tid}_{n}", std::process::id())
}

/// Creates a fresh, empty database and returns its URL. Runs its own tokio runtime.
pub fn fresh_database(tag: &str) -> String {
    let base = postgres_url();
    let db = unique(tag).to_ascii_lowercase();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Another test of the run may be restarting the server (`pg_ctl restart`): retry for up to
    // about 30 s (the test's own pacing, not an assertion). A retry after a create whose reply
    // was lost finds the database there (42P04), which is just as good.
    rt.block_on(async {
        let mut last = String::new();
        for _ in 0..300 {
            match create_database(&base, &db).await {
                Ok(()) => return,
                Err(e)
                    if e.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_DATABASE) =>
                {
                    return
                }
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("could not create a test database {db}: {last}");
    });
    with_database(&base, &db)
}

async fn create_database(base: &str, db: &str) -> Result<(), tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls).await?;
    let conn = tokio::spawn(conn);
    let created = client.batch_execute(&format!("CREATE DATABASE {db}")).await;
    drop(client);
    let _ = conn.await;
    created
}

/// Runs SQL on `url` (its own runtime and connection).
pub fn sql(url: &str, statements: &str) -> Result<(), tokio_postgres::Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
        let conn = tokio::spawn(conn);
        let r = client.batch_execute(statements).await;
        drop(client);
        let _ = conn.await;
        r
    })
}

/// Runs a query returning one i64 column of one row.
pub fn sql_i64(url: &str, query: &str) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let conn = tokio::spawn(conn);
        let v: i64 = client.query_one(query, &[]).await.unwrap().get(0);
        drop(client);
        let _ = conn.await;
        v
    })
}

/// An `s3://` URL of a fresh prefix in the emulator's bucket.
pub fn fresh_s3_url(tag: &str) -> String {
    let endpoint = service_env("PERSIST_TEST_S3_ENDPOINT");
    let bucket = service_env("PERSIST_TEST_S3_BUCKET");
    format!("s3://{bucket}/{}?endpoint={endpoint}", unique(tag))
}

/// A fresh directory (removed when the value drops) and its `file://` URL.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("persist-test-{}", unique(tag)));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn url(&self) -> String {
        format!("file://{}", self.0.display())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `f` on the tokio runtime (a current-thread runtime with a LocalSet).
pub fn block_on<F, Fut>(f: F) -> Fut::Output
where
    F: FnOnce(Runtime) -> Fut,
    Fut: Future,
{
    TokioRuntime::block_on(f).expect("a tokio runtime")
}
