//! Stock DuckDB 1.5.5 with DuckLake through `rocklake serve`, on every engine built in, side by
//! side with PostgreSQL 15: the Python suite in `e2e/` (see its scripts for what each step
//! does), run with this package's `rocklake` binary.
//!
//! It needs a Python with `duckdb==1.5.5` and the extension packages (`ROCKLAKE_E2E_PYTHON`),
//! an extension folder (`ROCKLAKE_E2E_EXT`) and a PostgreSQL (`ROCKLAKE_TEST_PG`); `.ci/run`
//! provides all three. Without them the tests say NOT RUN, and fail in CI.
//! `ROCKLAKE_E2E_CRASH_ROUNDS` sets the SIGKILL rounds per engine (default 5);
//! `ROCKLAKE_E2E_FAILOVER_ROUNDS` the failover rounds of each kind (default 2);
//! `ROCKLAKE_E2E_DAY` which engine the 250-client test takes (default: the day).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// One suite at a time: each starts servers and DuckDB processes of its own.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

struct Env {
    python: String,
    ext: String,
    pg: String,
}

fn env() -> Option<Env> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (
        get("ROCKLAKE_E2E_PYTHON"),
        get("ROCKLAKE_E2E_EXT"),
        get("ROCKLAKE_TEST_PG"),
    ) {
        (Some(python), Some(ext), Some(pg)) => Some(Env { python, ext, pg }),
        _ if std::env::var_os("CI").is_some() => panic!(
            "CI must provide ROCKLAKE_E2E_PYTHON, ROCKLAKE_E2E_EXT and ROCKLAKE_TEST_PG (.ci/run \
             sets them up)"
        ),
        _ => {
            eprintln!(
                "NOT RUN: the DuckDB end-to-end suite needs ROCKLAKE_E2E_PYTHON, ROCKLAKE_E2E_EXT \
                 and ROCKLAKE_TEST_PG (see .ci/run)"
            );
            None
        }
    }
}

/// The engines this build of the command has.
fn engines() -> Vec<&'static str> {
    let mut v = vec![];
    if cfg!(feature = "slatedb") {
        v.push("slatedb");
    }
    if cfg!(feature = "sled") {
        v.push("sled");
    }
    if cfg!(feature = "rocksdb") {
        v.push("rocksdb");
    }
    v
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../e2e")
        .join(name)
}

/// Run a script of the suite; its output goes to the test's output; fail on a non-zero exit.
fn run(env: &Env, name: &str, args: &[String]) {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let started = std::time::Instant::now();
    let out = Command::new(&env.python)
        .arg(script(name))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} {name}: {e}", env.python));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    println!("{name}: {:.1} s", started.elapsed().as_secs_f64());
    assert!(
        out.status.success(),
        "{name} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

fn common_args(env: &Env) -> Vec<String> {
    let mut a = vec![
        "--rocklake-bin".to_string(),
        env!("CARGO_BIN_EXE_rocklake").to_string(),
        "--ext-dir".to_string(),
        env.ext.clone(),
    ];
    for e in engines() {
        a.push("--engine".into());
        a.push(e.into());
    }
    a
}

/// The binary, the extension folder and one engine.
fn one_engine_args(env: &Env, engine: &str) -> Vec<String> {
    vec![
        "--rocklake-bin".to_string(),
        env!("CARGO_BIN_EXE_rocklake").to_string(),
        "--ext-dir".to_string(),
        env.ext.clone(),
        "--engine".to_string(),
        engine.to_string(),
    ]
}

#[test]
fn duckdb_workload_answers_as_on_postgres() {
    let Some(env) = env() else { return };
    let mut args = common_args(&env);
    // Then DuckLake's expiry of all but the last snapshots on both catalogs, RockLake's
    // retain-from, gc and verify on each store, a restart, and everything read back (#22 item 11).
    args.extend([
        "--pg-dsn".to_string(),
        env.pg.clone(),
        "--maintain".to_string(),
    ]);
    run(&env, "run.py", &args);
}

#[test]
fn duckdb_workload_with_s3_data_and_a_catalog_on_s3() {
    let Some(env) = env() else { return };
    if std::env::var_os("AWS_ENDPOINT_URL").is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must provide the S3 emulator (AWS_ENDPOINT_URL)"
        );
        eprintln!("NOT RUN: the S3 variant needs AWS_ENDPOINT_URL (a local S3 emulator)");
        return;
    }
    if !cfg!(feature = "slatedb") {
        return;
    }
    let nonce: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let args = vec![
        "--rocklake-bin".to_string(),
        env!("CARGO_BIN_EXE_rocklake").to_string(),
        "--ext-dir".to_string(),
        env.ext.clone(),
        "--pg-dsn".to_string(),
        env.pg.clone(),
        "--s3".to_string(),
        "--engine-url".to_string(),
        format!("s3://rocklake-test/e2e-catalog-{nonce:x}"),
    ];
    run(&env, "run.py", &args);
}

#[test]
fn eight_duckdb_writers_lose_no_commit() {
    let Some(env) = env() else { return };
    let mut args = common_args(&env);
    // PostgreSQL first, with the same clients: its share of commits that fail after DuckLake's
    // retries bounds each engine's (#22 item 7).
    args.extend(["--seconds", "15", "--pg-dsn", &env.pg].map(String::from));
    run(&env, "concurrency.py", &args);
}

/// #20's many connections: 250 DuckDB clients (10 processes of 25) appending and reading back
/// through one server at once; every reported commit there, nothing else, every read-back right,
/// `verify` clean. One engine per run, turning with the day (the figures beside
/// PostgreSQL come from a run by hand, README "Many connections").
#[test]
fn two_hundred_fifty_duckdb_clients_through_one_server() {
    let Some(env) = env() else { return };
    let engines = engines();
    if engines.is_empty() {
        return;
    }
    // `ROCKLAKE_E2E_DAY` picks another engine by hand.
    let day = std::env::var("ROCKLAKE_E2E_DAY")
        .ok()
        .and_then(|d| d.parse::<usize>().ok())
        .unwrap_or_else(days_since_epoch);
    let mut args = one_engine_args(&env, engines[day % engines.len()]);
    args.extend(["--writers", "250", "--per-process", "25", "--seconds", "10"].map(String::from));
    run(&env, "concurrency.py", &args);
}

/// Days since the Unix epoch: which engine the many-clients test takes today.
fn days_since_epoch() -> usize {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| (d.as_secs() / 86_400) as usize)
        .unwrap_or(0)
}

#[test]
fn sigkill_during_commits_keeps_exactly_the_reported_commits() {
    let Some(env) = env() else { return };
    let rounds = std::env::var("ROCKLAKE_E2E_CRASH_ROUNDS").unwrap_or_else(|_| "5".into());
    for engine in engines() {
        let mut args = one_engine_args(&env, engine);
        args.extend(["--rounds".to_string(), rounds.clone()]);
        args.extend(["--seed", "20261201"].map(String::from));
        run(&env, "crash.py", &args);
    }
}

/// And for 10 s under a writer that commits, expires and cleans up: every transaction on the
/// reader reads one state of the catalog (#22 item 10). On a local folder with the reader's
/// lag bounded by `max_staleness_ms` (#24 item 4), then on the S3 emulator with three readers
/// polling every 100 ms.
#[test]
fn a_read_only_server_beside_the_writer_never_fences_it() {
    let Some(env) = env() else { return };
    if !cfg!(feature = "slatedb") {
        return;
    }
    let args = vec![
        "--rocklake-bin".to_string(),
        env!("CARGO_BIN_EXE_rocklake").to_string(),
        "--ext-dir".to_string(),
        env.ext.clone(),
        "--load-seconds".to_string(),
        "10".to_string(),
        // A reader 1 s behind often trails the writer's expiry (it keeps 6 snapshots, about
        // 0.4 s of commits here) and compares fewer time travels.
        "--reader-poll-ms".to_string(),
        "100".to_string(),
    ];
    // On a folder the reader's lag is bounded by max_staleness_ms rather than its poll (#24
    // item 4): it polls every 2 s, and every reader transaction must read each commit
    // acknowledged 200 ms before it began.
    let mut bounded = args.clone();
    bounded.truncate(bounded.len() - 2);
    bounded.extend(
        [
            "--reader-poll-ms",
            "2000",
            "--reader-max-staleness-ms",
            "200",
        ]
        .map(String::from),
    );
    run(&env, "readonly.py", &bounded);
    // The same on the S3 emulator with three read-only servers under the load (separate
    // processes, each with its own caches, as on three machines), where it runs (CI has it).
    if let Some(prefix) = s3_prefix("readonly") {
        let mut on_s3 = args.clone();
        on_s3.extend(["--store-url", &prefix, "--readers", "3"].map(String::from));
        run(&env, "readonly.py", &on_s3);
    }
}

/// Two `rocklake serve --standby` on one SlateDB store, 8 DuckDB clients committing through a
/// libpq string naming both (`target_session_attrs=read-write`): the writer SIGKILLed,
/// SIGSTOPped past its lease and resumed, and cut off from the store, 2 rounds of each
/// (`ROCKLAKE_E2E_FAILOVER_ROUNDS`; CI's every-engine step gives 20). Every acknowledged
/// commit is on the last writer, nothing no client tried is, `verify` is clean, and no writer
/// gave its lease up to a successor while it still ran (#24 items 1-2). On the S3 emulator where it runs (CI has it), else on a folder without
/// the cut.
#[test]
fn a_standby_takes_over_from_a_failed_writer_losing_no_acknowledged_commit() {
    let Some(env) = env() else { return };
    if !cfg!(feature = "slatedb") {
        eprintln!("NOT RUN: --standby needs SlateDB");
        return;
    }
    let rounds = std::env::var("ROCKLAKE_E2E_FAILOVER_ROUNDS").unwrap_or_else(|_| "2".into());
    let mut args = vec![
        "--rocklake-bin".to_string(),
        env!("CARGO_BIN_EXE_rocklake").to_string(),
        "--ext-dir".to_string(),
        env.ext.clone(),
        "--rounds".to_string(),
        rounds,
    ];
    let folder = tempfile::tempdir().expect("a temporary folder");
    match s3_prefix("failover") {
        Some(prefix) => args.extend(["--store-url".to_string(), prefix]),
        None => args.extend([
            "--store-url".to_string(),
            format!("file://{}", folder.path().display()),
            "--kinds".to_string(),
            "kill,stop".to_string(),
        ]),
    }
    run(&env, "failover.py", &args);
}

/// A lake built on PostgreSQL, imported into each engine, served, exported back: DuckDB reads
/// the same answers on all three, the export equals the source row for row, bad sources are
/// refused leaving nothing behind (#23 items 1-3). The same for a lake on DuckLake's SQLite
/// file (exported back into SQLite, equal value for value), and a DuckDB-file lake imported
/// through DuckDB's copy of it into SQLite.
/// SlateDB's stores go into the S3 emulator where there is one (CI has it).
#[test]
fn a_catalog_moves_from_postgresql_into_rocklake_and_back() {
    let Some(env) = env() else { return };
    let mut args = common_args(&env);
    args.extend(["--pg-dsn".to_string(), env.pg.clone()]);
    if let Some(prefix) = s3_prefix("migrate") {
        args.extend(["--s3-prefix".to_string(), prefix]);
    }
    run(&env, "migrate.py", &args);
}

/// Many lakes through one server (`serve --lakes`, #24 item 6): databases made with CREATE
/// DATABASE through DuckDB, a DuckLake lake in each, a taken name and a missing one refused:
/// every engine answers as PostgreSQL 15's databases do.
#[test]
fn many_lakes_through_one_server_answer_as_postgresql_databases() {
    let Some(env) = env() else { return };
    let mut args = common_args(&env);
    args.extend(["--pg-dsn".to_string(), env.pg.clone()]);
    run(&env, "lakes.py", &args);
}

/// A fresh `s3://rocklake-test/` prefix for a script's SlateDB stores where the S3 emulator
/// runs (CI must have it), else `None`.
fn s3_prefix(what: &str) -> Option<String> {
    if std::env::var_os("AWS_ENDPOINT_URL").is_some() && cfg!(feature = "slatedb") {
        let nonce: u64 = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Some(format!("s3://rocklake-test/{what}-{nonce:x}"))
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must provide the S3 emulator (AWS_ENDPOINT_URL)"
        );
        None
    }
}

/// A served catalog backed up through its server while 8 DuckDB clients commit, restored and
/// served: the snapshots up to the backup's and none after, every commit acknowledged before
/// it, time travel equal, `verify` clean, writes go on (#23 item 4). The backups go to the
/// S3 emulator.
#[test]
fn a_catalog_backed_up_while_serving_restores_to_one_snapshot() {
    let Some(env) = env() else { return };
    let mut args = common_args(&env);
    // Into the S3 emulator where there is one (CI has it), as a backup to a bucket goes.
    if let Some(prefix) = s3_prefix("backup") {
        args.extend(["--s3-prefix".to_string(), prefix]);
    }
    run(&env, "backup.py", &args);
}
