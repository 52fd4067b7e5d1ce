//! DuckLake's two hottest catalog paths through SQL, with the same statements on RockLake's SQL
//! layer (every engine), on SQLite (bundled, WAL, `synchronous=FULL`) and, when
//! `ROCKLAKE_BENCH_PG` names a server, on PostgreSQL: one commit (a snapshot, one data file, its
//! column statistics, the table's statistics) and "the files of one table at snapshot N". The
//! tables are DuckLake's, with only its primary keys (as DuckLake creates them).

use std::sync::{Arc, Mutex};

use rocklake_core::{Error, Keyspace, KvBackend, Result};
use rocklake_sql::{Database, DirectMode, Session};

use crate::{sample, Budget, Measurement, Stats};

/// Data files in the read workload's table (a tenth per table).
pub const FILES: i64 = 1000;

const DDL: &str = "CREATE TABLE ducklake_snapshot(snapshot_id BIGINT PRIMARY KEY, snapshot_time TIMESTAMP WITH TIME ZONE, schema_version BIGINT, next_catalog_id BIGINT, next_file_id BIGINT);
CREATE TABLE ducklake_data_file(data_file_id BIGINT PRIMARY KEY, table_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT, file_order BIGINT, path VARCHAR, path_is_relative BOOLEAN, file_format VARCHAR, record_count BIGINT, file_size_bytes BIGINT, footer_size BIGINT, row_id_start BIGINT, partition_id BIGINT, encryption_key VARCHAR, mapping_id BIGINT, partial_max BIGINT);
CREATE TABLE ducklake_file_column_stats(data_file_id BIGINT, table_id BIGINT, column_id BIGINT, column_size_bytes BIGINT, value_count BIGINT, null_count BIGINT, min_value VARCHAR, max_value VARCHAR, contains_nan BOOLEAN, extra_stats VARCHAR);
CREATE TABLE ducklake_table_stats(table_id BIGINT, record_count BIGINT, next_row_id BIGINT, file_size_bytes BIGINT)";

/// Tables the read workload spreads its files over. The commit workload writes to as many
/// other tables (ids `TABLES..2 * TABLES`), so the read's cost does not depend on how many
/// commits the commit workload managed before it (a faster commit used to make the read
/// slower).
const TABLES: i64 = 10;

/// The table the commit workload's `i`-th commit writes to.
fn commit_table(i: usize) -> i64 {
    TABLES + i as i64 % TABLES
}

const COMMIT: &str =
    "one DuckLake commit through SQL (snapshot, 1 data file, 3 column stats, table stats)";

fn commit_text(snapshot: i64, table: i64) -> String {
    let file = 1_000_000 + snapshot;
    format!(
        "INSERT INTO ducklake_snapshot VALUES ({snapshot}, '2026-12-01 00:00:00+00', 1, 1, {next});
INSERT INTO ducklake_data_file VALUES ({file}, {table}, {snapshot}, NULL, 0, 'data/f{file}.parquet', true, 'parquet', 1000, 65536, 1024, 0, NULL, NULL, NULL, NULL);
INSERT INTO ducklake_file_column_stats VALUES ({file}, {table}, 1, 100, 1000, 0, '1', '999', false, NULL), ({file}, {table}, 2, 100, 1000, 0, 'a', 'z', false, NULL), ({file}, {table}, 3, 100, 1000, 0, '0.5', '9.5', false, NULL);
UPDATE ducklake_table_stats SET record_count = record_count + 1000, file_size_bytes = file_size_bytes + 65536, next_row_id = next_row_id + 1000 WHERE table_id = {table}",
        next = file + 1
    )
}

const POINT: &str = "a primary-key point read through SQL (one data file by id)";

fn point_query(file: i64) -> String {
    format!("SELECT path, record_count FROM ducklake_data_file WHERE data_file_id = {file}")
}

const SCAN: &str = "every data file's table, snapshots and size through SQL (a whole-table scan, as ducklake_table_info() sends)";

/// The whole `ducklake_data_file` table, four of its columns: what DuckLake reads for
/// `ducklake_table_info()`, for expiring snapshots and when it attaches (whole-table scans
/// whose cost grows with the catalog).
const SCAN_QUERY: &str =
    "SELECT table_id, begin_snapshot, end_snapshot, file_size_bytes FROM ducklake_data_file";

fn files_query(table: i64, at: i64) -> String {
    format!(
        "SELECT data_file_id, path, record_count, file_size_bytes FROM ducklake_data_file \
         WHERE table_id = {table} AND begin_snapshot <= {at} AND (end_snapshot IS NULL OR end_snapshot > {at})"
    )
}

/// Load `files` data files over [`TABLES`] tables, a tenth of them already ended.
fn preload(files: i64) -> Vec<String> {
    let mut texts = Vec::new();
    let mut rows = Vec::new();
    for i in 0..files {
        let end = if i % 10 == 0 {
            "5".to_string()
        } else {
            "NULL".to_string()
        };
        rows.push(format!(
            "({i}, {}, 1, {end}, 0, 'data/p{i}.parquet', true, 'parquet', 1000, 65536, 1024, 0, NULL, NULL, NULL, NULL)",
            i % TABLES
        ));
        if rows.len() == 500 {
            texts.push(format!(
                "INSERT INTO ducklake_data_file VALUES {}",
                rows.join(", ")
            ));
            rows.clear();
        }
    }
    if !rows.is_empty() {
        texts.push(format!(
            "INSERT INTO ducklake_data_file VALUES {}",
            rows.join(", ")
        ));
    }
    let stats: Vec<String> = (0..2 * TABLES).map(|t| format!("({t}, 0, 0, 0)")).collect();
    texts.push(format!(
        "INSERT INTO ducklake_table_stats VALUES {}",
        stats.join(", ")
    ));
    texts
}

fn sql_err(what: &str) -> impl Fn(rocklake_sql::SqlError) -> Error + '_ {
    move |e| Error::engine("sql", what.to_string(), e)
}

fn row(workload: &str, engine: &str, durability: &str, s: &Stats) -> Measurement {
    let mut m = crate::harness::m("sql", workload, engine, durability, s);
    m.ops_per_sec = Some(1e9 / s.median());
    m
}

/// A database on `backend` with DuckLake's tables and `files` data files, and a session on it
/// in `mode`.
async fn set_up(
    backend: Arc<dyn KvBackend>,
    mode: DirectMode,
    files: i64,
) -> Result<(Arc<Database>, Session)> {
    let ks = Keyspace::open(backend).await?;
    let db = Database::open(ks).await.map_err(sql_err("open"))?;
    let mut s = Session::new(db.clone());
    s.set_direct_mode(mode);
    s.run(DDL).await.map_err(sql_err("create tables"))?;
    for t in preload(files) {
        s.run(&t).await.map_err(sql_err("preload"))?;
    }
    Ok((db, s))
}

/// The SQL workloads on one RockLake engine (durable commits), with the direct path on or
/// (`DirectMode::Off`) every statement through DataFusion's planner.
pub async fn rocklake(
    subject: &str,
    backend: Arc<dyn KvBackend>,
    budget: Budget,
    files: i64,
    mode: DirectMode,
) -> Result<Vec<Measurement>> {
    let (db, s) = set_up(backend, mode, files).await?;
    let s = Arc::new(tokio::sync::Mutex::new(s));
    let phases = |s: &Session| s.phases();
    // The scan first, while the table holds just the preloaded files (every commit below
    // adds one).
    let before = phases(&*s.lock().await);
    let scan = sample(budget, |_| {
        let s = s.clone();
        async move {
            let mut s = s.lock().await;
            let out = s.run(SCAN_QUERY).await.map_err(sql_err("scan"))?;
            std::hint::black_box(out.row_count());
            Ok(())
        }
    })
    .await?;
    let scan_phases = split(&*s.lock().await, &before, &scan);
    let before = phases(&*s.lock().await);
    let commit = sample(budget, |i| {
        let s = s.clone();
        async move {
            let mut s = s.lock().await;
            let text = commit_text(10 + i as i64, commit_table(i));
            s.run("BEGIN").await.map_err(sql_err("begin"))?;
            s.run(&text).await.map_err(sql_err("commit body"))?;
            s.run("COMMIT").await.map_err(sql_err("commit"))?;
            Ok(())
        }
    })
    .await?;
    let commit_phases = split(&*s.lock().await, &before, &commit);
    let before = phases(&*s.lock().await);
    let read = sample(budget, |i| {
        let s = s.clone();
        async move {
            let mut s = s.lock().await;
            let out = s
                .run(&files_query(i as i64 % TABLES, 3))
                .await
                .map_err(sql_err("read"))?;
            std::hint::black_box(out.row_count());
            Ok(())
        }
    })
    .await?;
    let read_phases = split(&*s.lock().await, &before, &read);
    let before = phases(&*s.lock().await);
    let point = sample(budget, |i| {
        let s = s.clone();
        async move {
            let mut s = s.lock().await;
            let out = s
                .run(&point_query(i as i64 % files))
                .await
                .map_err(sql_err("point read"))?;
            std::hint::black_box(out.row_count());
            Ok(())
        }
    })
    .await?;
    let point_phases = split(&*s.lock().await, &before, &point);
    db.close().await.map_err(sql_err("close"))?;
    let with = |mut m: Measurement, p: String| {
        m.phases = Some(p);
        m
    };
    Ok(vec![
        with(row(COMMIT, subject, "durable", &commit), commit_phases),
        with(row(&reads_name(files), subject, "n/a", &read), read_phases),
        with(row(POINT, subject, "n/a", &point), point_phases),
        with(row(&scan_name(files), subject, "n/a", &scan), scan_phases),
    ])
}

/// One of the `sql` group's operations, for [`profile`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// One DuckLake commit (BEGIN, the four statements, COMMIT).
    Commit,
    /// The files of one table at snapshot N.
    Read,
    /// A primary-key point read.
    Point,
    /// Every data file (a whole-table scan).
    Scan,
}

impl std::str::FromStr for Operation {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Operation, String> {
        match s {
            "commit" => Ok(Operation::Commit),
            "read" => Ok(Operation::Read),
            "point" => Ok(Operation::Point),
            "scan" => Ok(Operation::Scan),
            other => Err(format!(
                "unknown operation {other:?} (expected commit, read, point or scan)"
            )),
        }
    }
}

/// The `sql` group's set-up on `backend` (its tables, [`FILES`] data files), then `n` of one
/// operation, untimed: a fixed amount of work, so that an instruction count (valgrind's
/// callgrind, collecting only inside [`profiled_operations`]) compares two builds where the
/// wall clock of a shared machine cannot. Returns the session's phase split of those `n`.
pub async fn profile(backend: Arc<dyn KvBackend>, op: Operation, n: usize) -> Result<String> {
    let (db, mut s) = set_up(backend, DirectMode::On, FILES).await?;
    // One of each first, as the timed workloads' warm-up does.
    profiled_operations(&mut s, op, 0, 1).await?;
    let before = s.phases();
    profiled_operations(&mut s, op, 1, n).await?;
    let split = s.phases().since(&before).render(n.max(1) as u64);
    db.close().await.map_err(sql_err("close"))?;
    Ok(split)
}

/// Operations `from..from + n` of `op` (the part [`profile`] means to be measured).
#[inline(never)]
pub async fn profiled_operations(
    s: &mut Session,
    op: Operation,
    from: usize,
    n: usize,
) -> Result<()> {
    for i in from..from + n {
        let out = match op {
            Operation::Commit => {
                let text = commit_text(10 + i as i64, commit_table(i));
                s.run("BEGIN").await.map_err(sql_err("begin"))?;
                s.run(&text).await.map_err(sql_err("commit body"))?;
                s.run("COMMIT").await.map_err(sql_err("commit"))?
            }
            Operation::Read => s
                .run(&files_query(i as i64 % TABLES, 3))
                .await
                .map_err(sql_err("read"))?,
            Operation::Point => s
                .run(&point_query(i as i64 % FILES))
                .await
                .map_err(sql_err("point read"))?,
            Operation::Scan => s.run(SCAN_QUERY).await.map_err(sql_err("scan"))?,
        };
        std::hint::black_box(out.row_count());
    }
    Ok(())
}

/// The phase split of one operation: what the session spent since `before`, over the
/// samples and the warm-up call.
fn split(s: &Session, before: &rocklake_sql::PhaseSnapshot, stats: &Stats) -> String {
    s.phases().since(before).render(stats.ns.len() as u64 + 1)
}

fn scan_name(files: i64) -> String {
    format!("{SCAN} ({files} rows)")
}

fn reads_name(files: i64) -> String {
    format!(
        "the files of one table at snapshot N through SQL ({} of {files} files)",
        files / TABLES
    )
}

/// The same on SQLite (one file in `dir`, `synchronous=FULL`).
pub async fn sqlite(dir: &std::path::Path, budget: Budget, files: i64) -> Result<Vec<Measurement>> {
    let err = |e: rusqlite::Error| Error::engine("sqlite", "SQL benchmark", e);
    let conn = rusqlite::Connection::open(dir.join("sql-bench.sqlite")).map_err(err)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(err)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(err)?;
    conn.execute_batch(DDL).map_err(err)?;
    for t in preload(files) {
        conn.execute_batch(&t).map_err(err)?;
    }
    let conn = Arc::new(Mutex::new(conn));
    let scan = sample(budget, |_| {
        let conn = conn.clone();
        async move {
            let c = conn.lock().unwrap_or_else(|e| e.into_inner());
            let mut stmt = c.prepare(SCAN_QUERY).map_err(err)?;
            let n = stmt.query_map([], |_| Ok(())).map_err(err)?.count();
            std::hint::black_box(n);
            Ok(())
        }
    })
    .await?;
    let commit = sample(budget, |i| {
        let conn = conn.clone();
        async move {
            let c = conn.lock().unwrap_or_else(|e| e.into_inner());
            c.execute_batch(&format!(
                "BEGIN; {}; COMMIT;",
                commit_text(10 + i as i64, commit_table(i))
            ))
            .map_err(err)
        }
    })
    .await?;
    let read = sample(budget, |i| {
        let conn = conn.clone();
        async move {
            let c = conn.lock().unwrap_or_else(|e| e.into_inner());
            let mut stmt = c.prepare(&files_query(i as i64 % TABLES, 3)).map_err(err)?;
            let n = stmt.query_map([], |_| Ok(())).map_err(err)?.count();
            std::hint::black_box(n);
            Ok(())
        }
    })
    .await?;
    let point = sample(budget, |i| {
        let conn = conn.clone();
        async move {
            let c = conn.lock().unwrap_or_else(|e| e.into_inner());
            let mut stmt = c.prepare(&point_query(i as i64 % files)).map_err(err)?;
            let n = stmt.query_map([], |_| Ok(())).map_err(err)?.count();
            std::hint::black_box(n);
            Ok(())
        }
    })
    .await?;
    Ok(vec![
        row(COMMIT, "sqlite", "durable (synchronous=FULL)", &commit),
        row(&reads_name(files), "sqlite", "n/a", &read),
        row(POINT, "sqlite", "n/a", &point),
        row(&scan_name(files), "sqlite", "n/a", &scan),
    ])
}

/// The same on the PostgreSQL server `ROCKLAKE_BENCH_PG` names (libpq-style
/// `host=... port=... user=...`), in a database of its own that is dropped afterwards; `None`
/// without one.
pub async fn postgres(budget: Budget, files: i64) -> Result<Option<Vec<Measurement>>> {
    let Ok(url) = std::env::var("ROCKLAKE_BENCH_PG") else {
        return Ok(None);
    };
    let err = |e: tokio_postgres::Error| Error::engine("postgresql", "SQL benchmark", e);
    let connect = |u: String| async move {
        let (c, conn) = tokio_postgres::connect(&u, tokio_postgres::NoTls)
            .await
            .map_err(err)?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok::<_, Error>(c)
    };
    let admin = connect(url.clone()).await?;
    let name = format!("rocklake_bench_{}", std::process::id());
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
        .await
        .map_err(err)?;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .map_err(err)?;
    let c = Arc::new(connect(format!("{url} dbname={name}")).await?);
    let fsync = c
        .simple_query("SHOW fsync")
        .await
        .ok()
        .and_then(|m| {
            m.into_iter().find_map(|x| match x {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                _ => None,
            })
        })
        .unwrap_or_else(|| "?".into());
    c.batch_execute(DDL).await.map_err(err)?;
    for t in preload(files) {
        c.batch_execute(&t).await.map_err(err)?;
    }
    let scan = sample(budget, |_| {
        let c = c.clone();
        async move {
            let rows = c.simple_query(SCAN_QUERY).await.map_err(err)?;
            std::hint::black_box(rows.len());
            Ok(())
        }
    })
    .await?;
    let commit = sample(budget, |i| {
        let c = c.clone();
        async move {
            c.batch_execute(&format!(
                "BEGIN; {}; COMMIT;",
                commit_text(10 + i as i64, commit_table(i))
            ))
            .await
            .map_err(err)
        }
    })
    .await?;
    let read = sample(budget, |i| {
        let c = c.clone();
        async move {
            let rows = c
                .simple_query(&files_query(i as i64 % TABLES, 3))
                .await
                .map_err(err)?;
            std::hint::black_box(rows.len());
            Ok(())
        }
    })
    .await?;
    let point = sample(budget, |i| {
        let c = c.clone();
        async move {
            let rows = c
                .simple_query(&point_query(i as i64 % files))
                .await
                .map_err(err)?;
            std::hint::black_box(rows.len());
            Ok(())
        }
    })
    .await?;
    drop(c);
    let _ = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
    Ok(Some(vec![
        row(
            COMMIT,
            "postgresql",
            &format!("durable (fsync={fsync})"),
            &commit,
        ),
        row(&reads_name(files), "postgresql", "n/a", &read),
        row(POINT, "postgresql", "n/a", &point),
        row(&scan_name(files), "postgresql", "n/a", &scan),
    ]))
}
