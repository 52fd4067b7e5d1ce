//! The same catalog-shaped transactions on SQLite, the embedded database DuckLake users pick
//! today: bundled SQLite, WAL journal, `synchronous=FULL` (durable) or `OFF` (buffered), tables
//! shaped like DuckLake's `ducklake_snapshot` and `ducklake_data_file`, with the primary keys and
//! the index a catalog needs.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rocklake_core::{Error, Result};
use rusqlite::{params, Connection};

use crate::{Budget, Stats};

fn err(e: rusqlite::Error) -> Error {
    Error::engine("sqlite", "benchmark statement", e)
}

/// A SQLite catalog.
pub struct Sqlite {
    conn: Mutex<Connection>,
    next_snapshot: Mutex<i64>,
    next_file: Mutex<i64>,
}

impl Sqlite {
    /// Create the tables in a new file.
    pub fn open(path: &Path, durable: bool) -> Result<Sqlite> {
        let conn = Connection::open(path).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.pragma_update(None, "synchronous", if durable { "FULL" } else { "OFF" })
            .map_err(err)?;
        conn.execute_batch(
            "CREATE TABLE ducklake_snapshot(snapshot_id BIGINT PRIMARY KEY, snapshot_time BIGINT, schema_version BIGINT, next_catalog_id BIGINT, next_file_id BIGINT);
             CREATE TABLE ducklake_data_file(data_file_id BIGINT PRIMARY KEY, table_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT,
                 file_order BIGINT, path VARCHAR, path_is_relative BOOLEAN, file_format VARCHAR, record_count BIGINT, file_size_bytes BIGINT,
                 footer_size BIGINT, row_id_start BIGINT);
             CREATE INDEX data_file_by_table ON ducklake_data_file(table_id, begin_snapshot);",
        )
        .map_err(err)?;
        Ok(Sqlite {
            conn: Mutex::new(conn),
            next_snapshot: Mutex::new(1),
            next_file: Mutex::new(1),
        })
    }

    fn commit(&self, table_id: i64, files: usize) -> Result<()> {
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let snap = {
            let mut s = self.next_snapshot.lock().unwrap_or_else(|e| e.into_inner());
            *s += 1;
            *s
        };
        let tx = conn.transaction().map_err(err)?;
        tx.execute(
            "INSERT INTO ducklake_snapshot VALUES (?1, ?2, 1, 1, 1)",
            params![snap, 0i64],
        )
        .map_err(err)?;
        {
            let mut stmt = tx
                .prepare_cached("INSERT INTO ducklake_data_file VALUES (?1, ?2, ?3, NULL, ?4, ?5, 1, 'parquet', 1000, 65536, 1024, ?6)")
                .map_err(err)?;
            let mut next = self.next_file.lock().unwrap_or_else(|e| e.into_inner());
            for i in 0..files as i64 {
                let id = *next;
                *next += 1;
                stmt.execute(params![
                    id,
                    table_id,
                    snap,
                    i,
                    format!("data/ducklake-{table_id}-{i:08}.parquet"),
                    i * 1000
                ])
                .map_err(err)?;
            }
        }
        tx.commit().map_err(err)
    }

    /// Time snapshot commits adding `files` files to table 1.
    pub fn sample_commit(&self, files: usize, budget: Budget) -> Result<Stats> {
        sample_sync(budget, || self.commit(1, files))
    }

    /// Load `files` files into `table_id` (untimed).
    pub fn load_files(&self, table_id: u64, files: usize) -> Result<()> {
        let mut left = files;
        while left > 0 {
            let n = left.min(1000);
            self.commit(table_id as i64, n)?;
            left -= n;
        }
        Ok(())
    }

    /// Time listing the files of `table_id` visible at the latest snapshot.
    pub fn sample_list(&self, table_id: u64, files: usize, budget: Budget) -> Result<Stats> {
        sample_sync(budget, || {
            let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            let snap: i64 = conn
                .query_row("SELECT max(snapshot_id) FROM ducklake_snapshot", [], |r| {
                    r.get(0)
                })
                .map_err(err)?;
            let mut stmt = conn
                .prepare_cached(
                    "SELECT data_file_id, table_id, begin_snapshot, end_snapshot, file_order, path, path_is_relative, file_format, record_count, file_size_bytes, footer_size, row_id_start
                     FROM ducklake_data_file WHERE table_id = ?1 AND begin_snapshot <= ?2 AND (end_snapshot IS NULL OR ?2 < end_snapshot)",
                )
                .map_err(err)?;
            let mut rows = stmt.query(params![table_id as i64, snap]).map_err(err)?;
            let mut n = 0;
            while let Some(row) = rows.next().map_err(err)? {
                let _path: String = row.get(5).map_err(err)?;
                n += 1;
            }
            assert_eq!(n, files);
            Ok(())
        })
    }

    /// Time reading the current snapshot.
    pub fn sample_current(&self, budget: Budget) -> Result<Stats> {
        sample_sync(budget, || {
            let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            let mut stmt = conn.prepare_cached("SELECT snapshot_id, snapshot_time, schema_version, next_catalog_id, next_file_id FROM ducklake_snapshot WHERE snapshot_id = (SELECT max(snapshot_id) FROM ducklake_snapshot)").map_err(err)?;
            let id: i64 = stmt.query_row([], |r| r.get(0)).map_err(err)?;
            std::hint::black_box(id);
            Ok(())
        })
    }
}

fn sample_sync(budget: Budget, mut f: impl FnMut() -> Result<()>) -> Result<Stats> {
    f()?;
    let start = Instant::now();
    let mut out: Vec<Duration> = Vec::with_capacity(budget.samples);
    while out.len() < budget.samples && (start.elapsed() < budget.time || out.len() < 5) {
        let t = Instant::now();
        f()?;
        out.push(t.elapsed());
    }
    Ok(Stats::from(out))
}
