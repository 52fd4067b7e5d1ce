//! The same workloads on every engine, side by side, in one process.
//!
//! Every workload runs through `KvBackend` and the core (what RockLake users get) and, where it
//! wraps one engine call, against that raw engine call on the same bytes, so the report shows the
//! core's overhead as a ratio. The catalog-shaped transactions also run on SQLite (bundled, WAL
//! mode, `synchronous=FULL` for durable and `OFF` for buffered) with equivalent tables and
//! statements. [`run`] measures; [`render_markdown`], [`render_svg`] and JSON (serde) report.
//!
//! Timings are wall-clock samples of one operation each (or of a fixed-size group for very fast
//! ones); the report gives the median and the 99th percentile.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rocklake_core::backend::{visit_all, KeyRange, KvBackend, Order, Pager, WriteBatch};
use rocklake_core::keys::{self, ColumnKey, DataFileKey, Key, RowKey, TableKey};
use rocklake_core::keystone;
use rocklake_core::values::Value;
use rocklake_core::{Durability, KeyChoice, Keyspace, KeyspaceOptions, Result};
use serde::Serialize;

mod harness;
pub mod raw;
mod report;
pub mod sql;
pub mod sqlite;
mod workloads;

pub use harness::*;
pub use raw::RawEngine;
pub use report::*;
pub use workloads::*;

/// The workload groups, in the order they run.
pub const GROUPS: &[&str] = &[
    "codec",
    "point",
    "scan",
    "batch",
    "keystone",
    "mvcc",
    "catalog",
    "group-commit",
    "sql",
];

/// Run every workload of the chosen `groups` (all when empty) on every subject. `progress` is
/// told what runs.
pub async fn run(
    subjects: &[Subject],
    budget: Budget,
    groups: &[String],
    mut progress: impl FnMut(&str),
) -> Result<Vec<Measurement>> {
    let want = |g: &str| groups.is_empty() || groups.iter().any(|x| x == g);
    let dir = tempfile::Builder::new()
        .prefix("rocklake-bench-")
        .tempdir()
        .map_err(|e| rocklake_core::Error::engine("bench", "temp dir", e))?;
    let mut out = Vec::new();
    if want("codec") {
        progress("codec");
        out.extend(codec(budget));
    }
    if want("sql") {
        progress("sql: SQLite");
        out.extend(sql::sqlite(dir.path(), budget, sql::FILES).await?);
        progress("sql: PostgreSQL (ROCKLAKE_BENCH_PG)");
        if let Some(rows) = sql::postgres(budget, sql::FILES).await? {
            out.extend(rows);
        }
    }
    for s in subjects {
        if want("sql") {
            progress(&format!(
                "{}: DuckLake commit and file listing through SQL",
                s.name
            ));
            let (backend, _) = (s.open)(&dir.path().join(format!("{}-sql", s.name))).await?;
            let on = rocklake_sql::DirectMode::On;
            out.extend(sql::rocklake(&s.name, backend, budget, sql::FILES, on).await?);
            if s.name == "model" {
                // The same statements with every one planned by DataFusion: what the direct
                // path saves, measured in the same run.
                progress("model: the same through DataFusion's planner only");
                let (backend, _) = (s.open)(&dir.path().join("model-sql-planner")).await?;
                let off = rocklake_sql::DirectMode::Off;
                let name = "model (DataFusion planner)";
                out.extend(sql::rocklake(name, backend, budget, sql::FILES, off).await?);
            }
        }
        if want("point") || want("scan") || want("batch") {
            progress(&format!("{}: point, scan, batch", s.name));
            let (backend, raw) = (s.open)(&dir.path().join(format!("{}-kv", s.name))).await?;
            out.extend(kv(&s.name, &backend, raw.as_ref(), budget).await?);
            backend.close().await?;
            drop(raw);
            drop(backend);
        }
        if want("keystone") || want("mvcc") {
            progress(&format!("{}: keystone, mvcc", s.name));
            let (backend, _) = (s.open)(&dir.path().join(format!("{}-ks", s.name))).await?;
            out.extend(keystone_workloads(&s.name, backend, budget).await?);
        }
        if want("catalog") {
            progress(&format!("{}: catalog transactions vs SQLite", s.name));
            let (backend, _) = (s.open)(&dir.path().join(format!("{}-cat", s.name))).await?;
            out.extend(catalog_workloads(&s.name, backend, dir.path(), budget).await?);
        }
        if want("group-commit") {
            progress(&format!("{}: group commit", s.name));
            let (backend, _) = (s.open)(&dir.path().join(format!("{}-gc", s.name))).await?;
            out.extend(group_commit(&s.name, backend, budget).await?);
        }
    }
    out.retain(|m| want(&m.group));
    Ok(out)
}
