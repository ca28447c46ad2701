//! Bad input on the real backends (issue 18): a bad URL, a refused connection, wrong credentials,
//! a missing database, table or bucket, and a table of another schema each end in a clear, typed
//! error that names the URL without its password; nothing panics and nothing is written.
//!
//! Needs the services of `scripts/services.sh`; `#[ignore]`d, so a plain `cargo test` needs no
//! database (`scripts/test.sh`'s native-backends layer runs them with `-- --ignored`).
#![cfg(not(target_arch = "wasm32"))]

#[path = "support/native.rs"]
mod native;

use std::process::Command;

use native::{block_on, fresh_database, postgres_url, service_env, sql, sql_i64};
use persist_playground::location::url::{
    open_blob_with, open_consensus, open_consensus_with, LocationError, OpenRetry,
};
use persist_playground::location::ExternalError;

/// The password in a postgres:// URL.
fn password_of(url: &str) -> String {
    let after = url.split_once("://").unwrap().1;
    let userinfo = after.split_once('@').unwrap().0;
    userinfo.split_once(':').unwrap().1.to_string()
}

/// The default retry policy, but a retry is a failure: bad input must fail at once.
fn no_retry_expected() -> OpenRetry {
    OpenRetry::default().on_wait(|e, _| panic!("retried an error that cannot heal: {e}"))
}

fn consensus_err(url: &str) -> LocationError {
    let url = url.to_string();
    block_on(|rt| async move {
        match open_consensus_with(&url, &rt, &no_retry_expected()).await {
            Ok(_) => panic!("opened {url}"),
            Err(e) => e,
        }
    })
}

fn blob_err(url: &str) -> LocationError {
    let url = url.to_string();
    block_on(|rt| async move {
        match open_blob_with(&url, &rt, &no_retry_expected()).await {
            Ok(_) => panic!("opened {url}"),
            Err(e) => e,
        }
    })
}

/// The error the first retry of opening `url` reports (a failure that can heal), then gives up
/// on the open: forced by the event, no waiting on a budget.
fn first_retry(url: &str, consensus: bool) -> LocationError {
    let url = url.to_string();
    block_on(|rt| async move {
        let (tx, rx) = futures::channel::oneshot::channel::<LocationError>();
        let tx = std::cell::RefCell::new(Some(tx));
        let retry = OpenRetry::within_ms(600_000).on_wait(move |e, _| {
            if let Some(tx) = tx.borrow_mut().take() {
                let _ = tx.send(e.clone());
            }
        });
        let open = async {
            if consensus {
                open_consensus_with(&url, &rt, &retry).await.map(|_| ())
            } else {
                open_blob_with(&url, &rt, &retry).await.map(|_| ())
            }
        };
        futures::pin_mut!(open);
        match futures::future::select(open, rx).await {
            futures::future::Either::Left((r, _)) => panic!("{url} ended without a retry: {r:?}"),
            futures::future::Either::Right((e, _)) => e.unwrap(),
        }
    })
}

/// A loopback port nobody listens on (bound, then released).
fn refused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn assert_redacted(e: &LocationError, secret: &str) {
    let msg = e.to_string();
    assert!(
        !msg.contains(secret),
        "the message shows the password: {msg}"
    );
    assert!(
        !e.url().contains(secret),
        "the url shows the password: {}",
        e.url()
    );
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn bad_urls_are_typed_errors_without_the_password() {
    for url in [
        "postgres://alice:s3cr3t-pw@[not-a-host/db",
        "postgres://alice:s3cr3t-pw@/db?bogus_option=1",
        "mysql://alice:s3cr3t-pw@localhost/db",
        "alice:s3cr3t-pw@localhost",
    ] {
        let e = consensus_err(url);
        assert!(matches!(e, LocationError::BadUrl { .. }), "{url}: {e:?}");
        assert_redacted(&e, "s3cr3t-pw");
    }
    for url in [
        "ftp://example/dir",
        "file://somehost/tmp/x",
        "s3://?endpoint=http://127.0.0.1:1",
        "s3://bucket/p?secret_access_key=s3cr3t-pw&nonsense=1",
    ] {
        let e = blob_err(url);
        assert!(matches!(e, LocationError::BadUrl { .. }), "{url}: {e:?}");
        assert_redacted(&e, "s3cr3t-pw");
    }
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn a_refused_connection_is_a_connect_error() {
    // A refused connection may heal (the server is starting): opening retries it, and says why.
    let port = refused_port();
    let url = format!("postgres://persist:s3cr3t-pw@127.0.0.1:{port}/persist");
    let e = first_retry(&url, true);
    assert!(matches!(e, LocationError::Connect { .. }), "{e:?}");
    assert_redacted(&e, "s3cr3t-pw");
    assert!(
        e.to_string().contains(&format!("127.0.0.1:{port}")),
        "names the server: {e}"
    );
    // With no retry budget it is the same error at once.
    let once = block_on(|rt| async move {
        open_consensus_with(&url, &rt, &OpenRetry::once())
            .await
            .map(|_| ())
            .unwrap_err()
    });
    assert!(matches!(once, LocationError::Connect { .. }), "{once:?}");
    assert_redacted(&once, "s3cr3t-pw");
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn an_unknown_host_fails_at_once() {
    let e = consensus_err("postgres://persist:s3cr3t-pw@no-such-host.invalid:5432/persist");
    assert!(matches!(e, LocationError::Connect { .. }), "{e:?}");
    assert_redacted(&e, "s3cr3t-pw");
    assert!(e.to_string().contains("no-such-host.invalid"), "{e}");
    let e = blob_err("s3://bucket/p?endpoint=http://no-such-host.invalid:9000");
    assert!(matches!(e, LocationError::Connect { .. }), "{e:?}");
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn a_refused_s3_endpoint_is_retried() {
    let port = refused_port();
    let e = first_retry(
        &format!("s3://bucket/p?endpoint=http://127.0.0.1:{port}"),
        false,
    );
    assert!(matches!(e, LocationError::Connect { .. }), "{e:?}");
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn wrong_credentials_and_a_missing_database() {
    let good = postgres_url();
    let real = password_of(&good);
    let wrong = good.replace(&format!(":{real}@"), ":wrong-pw-123@");
    let e = consensus_err(&wrong);
    assert!(matches!(e, LocationError::Auth { .. }), "{e:?}");
    assert_redacted(&e, "wrong-pw-123");

    let missing = native::with_database(&good, "no_such_database_here");
    let e = consensus_err(&missing);
    assert!(matches!(e, LocationError::Missing { .. }), "{e:?}");
    assert_redacted(&e, &real);
    assert!(e.to_string().contains("no_such_database_here"), "{e}");
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn a_table_of_another_schema_is_refused_and_left_alone() {
    let url = fresh_database("schema");
    sql(
        &url,
        "CREATE TABLE consensus (x int); INSERT INTO consensus VALUES (42)",
    )
    .unwrap();
    let e = consensus_err(&url);
    assert!(matches!(e, LocationError::Schema { .. }), "{e:?}");
    assert_redacted(&e, &password_of(&url));
    assert!(
        e.to_string().contains("x integer"),
        "says what it found: {e}"
    );
    // Nothing was written: the foreign table is as it was.
    assert_eq!(sql_i64(&url, "SELECT count(*) FROM consensus"), 1);
    assert_eq!(
        sql_i64(
            &url,
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'consensus'"
        ),
        1
    );
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn a_table_dropped_under_a_running_consensus_is_a_permanent_error() {
    let url = fresh_database("dropped");
    let url2 = url.clone();
    block_on(|rt| async move {
        let consensus = open_consensus(&url2, &rt).await.unwrap();
        assert_eq!(consensus.head("s1").await.unwrap(), None);
        // On another thread: this one is driving the runtime.
        let u = url2.clone();
        std::thread::spawn(move || sql(&u, "DROP TABLE consensus").unwrap())
            .join()
            .unwrap();
        let e = consensus.head("s1").await.unwrap_err();
        assert!(matches!(e, ExternalError::Permanent(_)), "{e:?}");
        assert!(!e.to_string().contains(&password_of(&url2)), "{e}");
        assert!(e.to_string().contains("consensus"), "names the table: {e}");
    });
    let _ = url;
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn a_missing_bucket_is_a_missing_error() {
    let endpoint = service_env("PERSIST_TEST_S3_ENDPOINT");
    let e = blob_err(&format!("s3://no-such-bucket-here/p?endpoint={endpoint}"));
    assert!(matches!(e, LocationError::Missing { .. }), "{e:?}");
    assert!(e.to_string().contains("bucket"), "{e}");
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn the_command_line_tool_reports_wrong_credentials_without_a_panic() {
    let good = postgres_url();
    let real = password_of(&good);
    let wrong = good.replace(&format!(":{real}@"), ":wrong-pw-456@");
    let out = Command::new(env!("CARGO_BIN_EXE_persistcli"))
        .args(["--consensus", &wrong, "--blob", "mem://", "inspect", "s1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit code 1: {stderr}");
    assert!(stderr.contains("refused the credentials"), "{stderr}");
    assert!(
        !stderr.contains("wrong-pw-456") && !stderr.contains("panicked"),
        "{stderr}"
    );
}
