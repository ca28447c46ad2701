//! Races of OS processes on the real backends (issue 18): `persistcli` processes share one shard
//! (PostgreSQL Consensus + `file://` Blob) or one oracle timeline, one of them is killed with
//! SIGKILL and restarted, and PostgreSQL itself is restarted (`pg_ctl restart`) mid-run.
//! Afterwards `persistcli check` must find every acknowledged write in the shard exactly once and
//! a version chain without a gap; the oracles' logs must never repeat or go back.
//!
//! Needs the services of `scripts/services.sh` (PERSIST_TEST_POSTGRES_URL, PERSIST_TEST_PG_CTL)
//! and are `#[ignore]`d, so a plain `cargo test` needs no database: `scripts/test.sh`'s
//! native-backends layer runs them with `-- --ignored`.
//! Faults are forced by construction (a kill after a given number of acknowledgements, a restart
//! after another), never by timing assertions.
#![cfg(not(target_arch = "wasm32"))]

#[path = "support/native.rs"]
mod native;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use native::{fresh_database, service_env, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_persistcli");

fn count_lines(path: &Path, prefix: &str) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().filter(|l| l.starts_with(prefix)).count())
        .unwrap_or(0)
}

fn spawn(args: &[String], log_to: &Path) -> Child {
    spawn_to(args, Stdio::null(), log_to)
}

/// `persistcli ARGS` with its stdout to `stdout` and its stderr to the file `log_to`.
fn spawn_to(args: &[String], stdout: Stdio, log_to: &Path) -> Child {
    let err = std::fs::File::create(log_to).unwrap();
    Command::new(BIN)
        .args(args)
        .stdout(stdout)
        .stderr(err)
        .spawn()
        .expect("spawn persistcli")
}

/// Sends SIGINT (what Ctrl-C sends) to `child`.
fn interrupt(child: &Child) {
    let ok = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "SIGINT sent");
}

/// A test's fresh database, Blob directory and directory for the processes' logs.
fn scene(tag: &str) -> (String, TempDir, TempDir) {
    (
        fresh_database(tag),
        TempDir::new(&format!("{tag}-blob")),
        TempDir::new(&format!("{tag}-logs")),
    )
}

/// `persistcli`'s arguments: the location, this process's seed, then `rest`.
fn cli(db: &str, blob: &str, seed: impl ToString, rest: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["--consensus", db, "--blob", blob, "--seed"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(seed.to_string());
    args.extend(rest.iter().map(|s| s.to_string()));
    args
}

/// Runs `persistcli inspect SHARD` and asserts that the shard's state lists no writer and no
/// reader: every process that wrote or read it expired its lease.
fn assert_leases_expired(db: &str, blob: &str, shard: &str, seed: u64) {
    let out = Command::new(BIN)
        .args(cli(db, blob, seed, &["inspect", shard]))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("writers    0"),
        "the writer expired itself:\n{stdout}"
    );
    assert!(
        stdout.contains("readers    0"),
        "the reader expired itself:\n{stdout}"
    );
}

/// Polls (the test's own pacing, not an assertion) until `cond` holds; panics after `limit`
/// polls with `what`, showing the processes' stderr in `dir`.
fn wait_for(what: &str, dir: &Path, limit: u32, mut cond: impl FnMut() -> bool) {
    for _ in 0..limit {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut logs = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "err") {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(5).collect();
            logs += &format!("--- {}\n{}\n", e.path().display(), tail.join("\n"));
        }
    }
    panic!("gave up waiting for {what}\n{logs}");
}

fn pg_restart() {
    let ctl = service_env("PERSIST_TEST_PG_CTL");
    let out = Command::new(&ctl)
        .arg("restart")
        .output()
        .expect("run pg_ctl");
    assert!(
        out.status.success(),
        "pg_ctl restart failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn wait_success(mut child: Child, name: &str, err: &Path) {
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "{name} exited with {status}: {}",
        std::fs::read_to_string(err).unwrap_or_default()
    );
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn four_writer_processes_one_killed_and_postgres_restarted() {
    let (db, blob, logs) = scene("race");
    let dir = logs.0.clone();
    let per_writer = 1000u64;
    // Keep every version, so the check reads the shard's history from v1.
    let common = |seed: u64| {
        cli(
            &db,
            &blob.url(),
            seed,
            &["--progress-every", "250", "--gc", "false"],
        )
    };
    let log_of = |i: usize| -> PathBuf { dir.join(format!("w{i}.log")) };
    let err_of = |name: &str| -> PathBuf { dir.join(format!("{name}.err")) };
    let writer_args = |i: usize, seed: u64, start: u64, count: u64| {
        let mut a = common(seed);
        a.extend([
            "writer".into(),
            "--shard".into(),
            "s-race".into(),
            "--name".into(),
            format!("w{i}"),
            "--start".into(),
            start.to_string(),
            "--count".into(),
            count.to_string(),
            "--log".into(),
            log_of(i).display().to_string(),
        ]);
        a
    };
    let mut children: Vec<Option<Child>> = (0..4)
        .map(|i| {
            Some(spawn(
                &writer_args(i, 100 + i as u64, 0, per_writer),
                &err_of(&format!("w{i}")),
            ))
        })
        .collect();

    // SIGKILL writer 1 once it has 200 acknowledged writes, mid-run.
    wait_for("200 acks from w1", &dir, 3_000, || {
        count_lines(&log_of(1), "ack ") >= 200
    });
    let mut victim = children[1].take().unwrap();
    victim.kill().unwrap(); // SIGKILL
    victim.wait().unwrap();
    let tried = count_lines(&log_of(1), "try ") as u64;
    let acked_before = count_lines(&log_of(1), "ack ");
    assert!(
        acked_before >= 200 && (acked_before as u64) < per_writer,
        "killed mid-run"
    );
    // Restart it as a new process (new seed: new writer id), after its last attempt.
    children[1] = Some(spawn(
        &writer_args(1, 200, tried, per_writer - tried),
        &err_of("w1-restarted"),
    ));

    // Restart PostgreSQL once the writers are about half way and the restarted writer has
    // opened its location and acknowledged a write, so that the restart meets every writer
    // mid-run (a restart while one opens is retried too: native_open covers that case).
    wait_for(
        "2,000 acks in all, one from w1-restarted",
        &dir,
        4_000,
        || {
            count_lines(&log_of(1), "ack ") > acked_before
                && (0..4)
                    .map(|i| count_lines(&log_of(i), "ack "))
                    .sum::<usize>()
                    >= 2_000
        },
    );
    let before_restart: usize = (0..4).map(|i| count_lines(&log_of(i), "ack ")).sum();
    pg_restart();
    assert!(before_restart < 4_000, "PostgreSQL restarted mid-run");

    for (i, c) in children.into_iter().enumerate() {
        let name = if i == 1 {
            "w1-restarted".to_string()
        } else {
            format!("w{i}")
        };
        wait_success(c.unwrap(), &name, &err_of(&name));
    }
    let acked: usize = (0..4).map(|i| count_lines(&log_of(i), "ack ")).sum();
    assert!(
        acked >= 4 * per_writer as usize - 1,
        "every update acknowledged but at most the one in flight at the kill: {acked}"
    );

    // The history check over the Consensus log, against the writers' logs.
    let mut args = common(300);
    args.extend(["check".into(), "s-race".into()]);
    for i in 0..4 {
        args.extend(["--acks".into(), log_of(i).display().to_string()]);
    }
    let out = Command::new(BIN).args(&args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("0 violations"),
        "check failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{stdout}");
    // The history check really ran over every acknowledgement and every version.
    let checks = |rule: &str| -> u64 {
        stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(rule))
            .and_then(|l| l.split_whitespace().nth(2))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    assert!(
        checks("ack-lost") >= acked as u64,
        "ack-lost checked each ack:\n{stdout}"
    );
    assert!(
        checks("append-chain") >= 4_000,
        "append-chain checked each version:\n{stdout}"
    );

    // And the check can fail: an acknowledgement of a write that never happened is found.
    let forged = dir.join("forged.log");
    std::fs::write(
        &forged,
        "try k-forged v-forged\nack k-forged v-forged 5 6\n",
    )
    .unwrap();
    let mut args = common(301);
    args.extend([
        "check".into(),
        "s-race".into(),
        "--acks".into(),
        forged.display().to_string(),
    ]);
    let out = Command::new(BIN).args(&args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && stdout.contains("violation: ack-lost"),
        "a forged acknowledgement is a violation:\n{stdout}"
    );
}

fn read_ts(path: &Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("ts ").and_then(|t| t.parse().ok()))
        .collect()
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn two_oracle_processes_one_killed_never_repeat_or_go_back() {
    let db = fresh_database("oracles");
    let logs = TempDir::new("oracle-logs");
    let dir = logs.0.clone();
    let args = |seed: u64, log: &Path| -> Vec<String> {
        let rest = [
            "--progress-every",
            "500",
            "oracle",
            "--timeline",
            "race",
            "--count",
            "0",
            "--persist-interval-ms",
            "20",
            "--confirm-leadership",
            "--log",
            &log.display().to_string(),
        ];
        cli(&db, "mem://", seed, &rest)
    };
    let (a_log, b_log, b2_log) = (dir.join("a.log"), dir.join("b.log"), dir.join("b2.log"));
    let a = spawn(&args(1, &a_log), &dir.join("a.err"));
    wait_for("300 timestamps from A", &dir, 6_000, || {
        read_ts(&a_log).len() >= 300
    });
    // B takes the timeline over: A is fenced and stops by itself.
    let mut b = spawn(&args(2, &b_log), &dir.join("b.err"));
    wait_success(a, "oracle A (fenced)", &dir.join("a.err"));
    wait_for("300 timestamps from B", &dir, 6_000, || {
        read_ts(&b_log).len() >= 300
    });
    b.kill().unwrap(); // SIGKILL mid-run
    b.wait().unwrap();
    let mut b2 = spawn(&args(3, &b2_log), &dir.join("b2.err"));
    wait_for("300 timestamps from B restarted", &dir, 6_000, || {
        read_ts(&b2_log).len() >= 300
    });
    b2.kill().unwrap();
    b2.wait().unwrap();

    let runs = [read_ts(&a_log), read_ts(&b_log), read_ts(&b2_log)];
    let mut all = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        assert!(run.len() >= 300, "run {i} served {}", run.len());
        assert!(
            run.windows(2).all(|w| w[0] < w[1]),
            "run {i} went back or repeated"
        );
        if i > 0 {
            let prev_max = runs[..i].iter().flatten().max().unwrap();
            assert!(
                run[0] > *prev_max,
                "run {i} started at {} at or below an earlier timestamp {prev_max}",
                run[0]
            );
        }
        all.extend(run.iter().copied());
    }
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "no timestamp handed out twice");
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn ctrl_c_stops_a_writer_and_a_reader_cleanly() {
    let (db, blob, logs) = scene("ctrlc");
    let dir = logs.0.clone();
    let log = dir.join("w.log");
    let w = cli(
        &db,
        &blob.url(),
        1,
        &[
            "writer",
            "--shard",
            "s-int",
            "--name",
            "w",
            "--count",
            "0",
            "--rate",
            "200",
            "--log",
            &log.display().to_string(),
        ],
    );
    let writer = spawn(&w, &dir.join("w.err"));
    wait_for("50 acks", &dir, 3_000, || count_lines(&log, "ack ") >= 50);
    let r = cli(&db, &blob.url(), 2, &["reader", "--shard", "s-int"]);
    let reader = spawn(&r, &dir.join("r.err"));
    wait_for("the reader's first progress", &dir, 3_000, || {
        std::fs::read_to_string(dir.join("r.err")).is_ok_and(|s| s.contains("complete up to"))
    });
    for child in [&writer, &reader] {
        interrupt(child);
    }
    wait_success(writer, "writer", &dir.join("w.err"));
    wait_success(reader, "reader", &dir.join("r.err"));
    let werr = std::fs::read_to_string(dir.join("w.err")).unwrap();
    assert!(werr.contains("lease expired (stopped)"), "{werr}");
    // Nothing half-written: every attempt but at most the last was acknowledged, and the
    // shard's state lists neither handle any more.
    let (tried, acked) = (count_lines(&log, "try "), count_lines(&log, "ack "));
    assert!(tried - acked <= 1, "tried {tried}, acked {acked}");
    assert_leases_expired(&db, &blob.url(), "s-int", 3);
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn two_write_task_processes_share_a_shard() {
    // Two differential write tasks in two processes keep one shard equal to their own desired
    // tables: each loses races to the other and re-syncs; both finish, and every command of
    // theirs was answered (durable, or refused after its retries, never dropped).
    let (db, blob, logs) = scene("tasks");
    let dir = logs.0.clone();
    let args = |seed: &str| -> Vec<String> {
        let rest = [
            "--progress-every",
            "20",
            "write-task",
            "--shard",
            "s-tasks",
            "--count",
            "10",
            "--rate",
            "0",
            "--keys",
            "4",
            "--tick-ms",
            "50",
        ];
        cli(&db, &blob.url(), seed, &rest)
    };
    let children: Vec<_> = ["1", "2"]
        .iter()
        .map(|s| {
            let out = dir.join(format!("t{s}.out"));
            let err = dir.join(format!("t{s}.err"));
            let child = spawn_to(
                &args(s),
                Stdio::from(std::fs::File::create(&out).unwrap()),
                &err,
            );
            (child, out, err)
        })
        .collect();
    for (child, out, err) in children {
        wait_success(child, "write-task", &err);
        let text = std::fs::read_to_string(&out).unwrap();
        let nums: Vec<u64> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(nums.len(), 3, "commands N durable N refused N: {text}");
        assert_eq!(nums[0], 10, "{text}");
        assert_eq!(nums[1] + nums[2], 20, "every command answered: {text}");
        assert!(nums[1] > 0, "some commands became durable: {text}");
    }
}

/// The model of a generated source: `bursts` bursts of the generator over `keys` keys from
/// `source_seed`, exactly as `persistcli upsert-replica` generates them.
fn upsert_model(
    source_seed: u64,
    keys: u64,
    bursts: u64,
) -> persist_playground::upsert::source::SourceLog {
    use persist_playground::upsert::source::{GeneratorConfig, SourceGenerator, SourceLog};
    let cfg = GeneratorConfig {
        keys,
        ..GeneratorConfig::default()
    };
    let mut generator = SourceGenerator::new(source_seed, cfg, 1);
    let mut log = SourceLog::new();
    for _ in 0..bursts {
        generator.burst(&mut log);
    }
    log
}

/// The shard's upper and its contents at upper - 1, consolidated (diff per row or error).
fn upsert_contents(
    consensus: &str,
    blob: &str,
    shard: &str,
) -> (
    u64,
    persist_playground::vec_map::VecMap<persist_playground::upsert::types::SourceData, i64>,
) {
    use persist_playground::location::url::open_location;
    use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
    use persist_playground::upsert::types::SourceData;
    use persist_playground::vec_map::VecMap;
    use timely::progress::Antichain;
    native::block_on(|rt| async move {
        let location = open_location(consensus, blob, &rt).await.expect("location");
        let client = PersistClient::new(location, rt.clone(), PersistConfig::default(), 77);
        let shard = ShardId::new(shard).unwrap();
        let upper = *client
            .inspect_state(&shard)
            .await
            .expect("the shard's state")
            .upper()
            .as_option()
            .expect("an open shard");
        let mut read = client
            .open_leased_reader::<SourceData, ()>(&shard)
            .await
            .expect("a reader");
        let updates = read
            .snapshot_and_fetch(Antichain::from_elem(upper - 1))
            .await
            .expect("a snapshot");
        read.expire().await;
        let mut contents: VecMap<SourceData, i64> = VecMap::new();
        for ((data, ()), _, d) in updates {
            let prev = contents.get(&data).copied().unwrap_or(0);
            contents.insert(data, prev + d);
        }
        (upper, contents)
    })
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn two_upsert_replica_processes_one_killed_match_the_model() {
    // Two upsert replicas in two processes write one output shard from one seeded source (each
    // generates it identically). Replica A is SIGKILLed mid-run and restarted; it rehydrates
    // from the shard (its own feedback) and resumes at the shard's upper. Afterwards the shard
    // holds exactly the last value per key of every upsert: the reference model.
    let (db, blob, logs) = scene("upsert");
    let dir = logs.0.clone();
    let (source_seed, keys, bursts) = (11u64, 6u64, 120u64);
    let args = |seed: &str, name: &str| -> Vec<String> {
        let rest = [
            "upsert-replica",
            "--shard",
            "s-upsert",
            "--name",
            name,
            "--source-seed",
            &source_seed.to_string(),
            "--keys",
            &keys.to_string(),
            "--bursts",
            &bursts.to_string(),
            "--rate",
            "40",
        ];
        cli(&db, &blob.url(), seed, &rest)
    };
    let a_err = dir.join("a.err");
    let b_err = dir.join("b.err");
    let mut a = spawn(&args("1", "a"), &a_err);
    let b = spawn(&args("2", "b"), &b_err);
    // Kill A once the shard has a third of the source (read from A's progress lines).
    let shard_upper_in = |path: &Path| -> u64 {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split("shard upper ").nth(1))
            .filter_map(|r| r.split(',').next()?.parse::<u64>().ok())
            .max()
            .unwrap_or(0)
    };
    let final_upper = upsert_model(source_seed, keys, bursts).upper();
    wait_for(
        "replica a to write a third of the source",
        &dir,
        1200,
        || shard_upper_in(&a_err) >= final_upper / 3,
    );
    a.kill().unwrap();
    let _ = a.wait();
    let a2_err = dir.join("a2.err");
    let a2 = spawn(&args("3", "a"), &a2_err);
    wait_success(a2, "restarted replica a", &a2_err);
    wait_success(b, "replica b", &b_err);
    let restarted_at: u64 = std::fs::read_to_string(&a2_err)
        .unwrap()
        .lines()
        .find_map(|l| {
            l.split(" at upper ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .expect("the restarted replica's start line");
    assert!(
        restarted_at > 0,
        "the restarted replica resumed mid-run, not from an empty shard"
    );

    for err in [&a_err, &a2_err, &b_err] {
        let text = std::fs::read_to_string(err).unwrap_or_default();
        let last = text.lines().last().unwrap_or_default().to_string();
        eprintln!("{}: {last}", err.display());
    }
    let (upper, contents) = upsert_contents(&db, &blob.url(), "s-upsert");
    assert!(
        upper >= final_upper,
        "the shard has the whole source: {upper} < {final_upper}"
    );
    let model = upsert_model(source_seed, keys, bursts);
    persist_playground::upsert::reference::check_contents(&contents, model.messages(), upper)
        .unwrap_or_else(|e| panic!("the shard differs from the model: {e}"));
    // The check can fail: another seed's source is a different model.
    let other = upsert_model(source_seed + 1, keys, bursts);
    assert!(
        persist_playground::upsert::reference::check_contents(&contents, other.messages(), upper)
            .is_err(),
        "the model is sensitive to the upserts"
    );
}

#[test]
#[ignore = "needs the services of scripts/services.sh: cargo test --test NAME -- --ignored"]
fn ctrl_c_stops_an_idle_upsert_replica_cleanly() {
    // A replica fed from stdin writes three upserts, then waits (stdin stays open, so its
    // persist source sits in a listen step no write will end). Ctrl-C must still end it, with
    // its writer and its reader expired, and the shard holding the three upserts' outcome.
    use std::io::Write;
    let (db, blob, logs) = scene("upsertint");
    let dir = logs.0.clone();
    let err = dir.join("r.err");
    let mut child = Command::new(BIN)
        .args(cli(
            &db,
            &blob.url(),
            5,
            &["upsert-replica", "--shard", "s-upsert-int", "--stdin"],
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"1 a\n2 b\n1 -\n").unwrap();
    stdin.flush().unwrap();
    wait_for("the three upserts in the shard", &dir, 3_000, || {
        std::fs::read_to_string(&err).is_ok_and(|s| s.contains("shard upper 4,"))
    });
    interrupt(&child);
    wait_success(child, "upsert-replica", &err);
    drop(stdin);
    let text = std::fs::read_to_string(&err).unwrap();
    assert!(text.contains("stopped; leases expired"), "{text}");
    assert_leases_expired(&db, &blob.url(), "s-upsert-int", 6);
    let (upper, contents) = upsert_contents(&db, &blob.url(), "s-upsert-int");
    assert_eq!(upper, 4);
    let rows: Vec<_> = contents.iter().filter(|(_, d)| **d != 0).collect();
    assert_eq!(rows.len(), 1, "key 1 deleted, key 2 = b: {rows:?}");
    assert!(format!("{rows:?}").contains('b'), "{rows:?}");
}
