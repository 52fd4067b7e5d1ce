//! The captured DuckLake workload on RockLake (every engine) and on a live PostgreSQL 15 side by
//! side: every result set of every query (DuckDB's `COPY (SELECT ...) TO STDOUT` reads, run as
//! the SELECT on PostgreSQL) and every error's SQLSTATE must be the same. Rows are compared as
//! PostgreSQL's text forms; their order only where the query has an ORDER BY. Messages that
//! read PostgreSQL's own catalog run on both sides too (so DuckLake's `REPEATABLE READ`
//! transactions they open are kept), compared by the kind of each answer (rows, a command, an
//! error's SQLSTATE), not by rows: the two catalogs' rows differ. After every message the
//! session's transaction status must be the one the capture's ReadyForQuery gave.
//!
//! `now()` must answer the same on both sides: RockLake's session clock and a literal in the
//! text sent to PostgreSQL both give the capture's time of the message that opened the
//! transaction. `.ci/run` starts PostgreSQL and sets `ROCKLAKE_TEST_PG`; without it the test
//! fails in CI and says NOT RUN elsewhere.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use common::trace::{copy_in_replacement, load_trace, server_catalog, status_letter};
use common::{open, stores};
use datafusion::sql::sqlparser::ast::{CopySource, CopyTarget, Statement};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use rocklake_sql::types::pg_text;
use rocklake_sql::{Output, Session};
use tokio_postgres::{Client, SimpleQueryMessage};

type Rows = Vec<Vec<Option<String>>>;

/// One statement's answer: rows (for queries), a command, or an error's SQLSTATE.
#[derive(Debug, PartialEq)]
enum Answer {
    Rows(Rows),
    Done,
    Error(String),
}

/// The text PostgreSQL runs for one captured message: `COPY (q) TO STDOUT` becomes `q`, and
/// `NOW()` the given time. Also says, per statement, whether its rows are ordered.
fn for_postgres(sql: &str, now_micros: i64) -> (String, Vec<bool>) {
    let stmts = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap_or_default();
    let ordered = stmts.iter().map(ordered).collect();
    let ts = format!(
        "'{}'::timestamptz",
        chrono::DateTime::from_timestamp_micros(now_micros)
            .unwrap()
            .format("%Y-%m-%d %H:%M:%S%.6f+00")
    );
    let sql = if sql.contains("TO STDOUT") {
        stmts
            .iter()
            .map(|s| match s {
                Statement::Copy {
                    source: CopySource::Query(q),
                    to: true,
                    target: CopyTarget::Stdout,
                    ..
                } => q.to_string(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(";\n")
    } else {
        sql.to_string()
    };
    (sql.replace("NOW()", &ts), ordered)
}

fn ordered(s: &Statement) -> bool {
    let q = match s {
        Statement::Query(q) => q,
        Statement::Copy {
            source: CopySource::Query(q),
            ..
        } => q,
        _ => return false,
    };
    q.order_by.is_some()
}

async fn on_postgres(client: &Client, sql: &str) -> Vec<Answer> {
    match client.simple_query(sql).await {
        Ok(msgs) => {
            let mut out = Vec::new();
            let mut rows: Rows = Vec::new();
            let mut has_rows = false;
            for m in msgs {
                match m {
                    SimpleQueryMessage::RowDescription(_) => has_rows = true,
                    SimpleQueryMessage::Row(r) => {
                        has_rows = true;
                        rows.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect());
                    }
                    SimpleQueryMessage::CommandComplete(_) => {
                        out.push(if has_rows {
                            Answer::Rows(std::mem::take(&mut rows))
                        } else {
                            Answer::Done
                        });
                        has_rows = false;
                    }
                    _ => {}
                }
            }
            out
        }
        Err(e) => vec![Answer::Error(
            e.code()
                .map(|c| c.code().to_string())
                .unwrap_or_else(|| e.to_string()),
        )],
    }
}

fn rows_of(out: &Output) -> Option<Rows> {
    let (Output::Rows { batches, .. } | Output::CopyOut { batches, .. }) = out else {
        return None;
    };
    let mut rows = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            rows.push(b.columns().iter().map(|c| pg_text(c.as_ref(), r)).collect());
        }
    }
    Some(rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rocklake_answers_the_captured_workload_as_postgresql_15_does() {
    let Some(url) = common::pg::url() else { return };
    let Some(trace) = load_trace() else { return };
    for store in stores() {
        // A database of its own on the PostgreSQL side, for this engine's run.
        let dbname = format!("rocklake_replay_{}_{}", std::process::id(), store.name);
        let (admin, pg_db_url) = common::pg::fresh_db(&url, &dbname).await;

        let db = open(&store).await;
        let now = Arc::new(AtomicI64::new(0));
        let mut sessions: BTreeMap<u64, (Session, Client, Option<i64>)> = BTreeMap::new();
        let (mut statements, mut result_sets, mut errors) = (0usize, 0usize, 0usize);
        let mut catalog_sets = 0usize;
        let mut differ: Vec<String> = Vec::new();
        let mut metadata_loads = 0;
        for m in &trace {
            if let std::collections::btree_map::Entry::Vacant(e) = sessions.entry(m.conn) {
                let mut s = Session::new(db.clone());
                // Every statement of the direct path's shapes is answered by both paths.
                s.set_direct_mode(rocklake_sql::DirectMode::Check);
                let clock = now.clone();
                s.set_clock(Arc::new(move || clock.load(Ordering::Acquire)));
                let c = common::pg::connect(&pg_db_url).await;
                c.simple_query("SET TimeZone = 'UTC'; SET statement_timeout = '20s'")
                    .await
                    .unwrap();
                e.insert((s, c, None));
            }
            let (s, client, txn_start) = sessions.get_mut(&m.conn).unwrap();
            let catalog_read = server_catalog(&m.query);
            now.store(m.at_micros, Ordering::Release);
            let sql = copy_in_replacement(&m.query, &mut metadata_loads)
                .unwrap_or_else(|| m.query.clone());
            // PostgreSQL's now() is the start of the transaction the statement runs in.
            let begins = s.status() == rocklake_sql::Status::Idle;
            if begins {
                *txn_start = Some(m.at_micros);
            }
            let (pg_sql, ordered) = for_postgres(&sql, txn_start.unwrap_or(m.at_micros));
            let pg = on_postgres(client, &pg_sql).await;
            let ours: Vec<Answer> = s
                .execute(&sql)
                .await
                .into_iter()
                .map(|r| match r {
                    Ok(o) => rows_of(&o).map(Answer::Rows).unwrap_or(Answer::Done),
                    Err(e) => Answer::Error(e.code.to_string()),
                })
                .collect();
            let status = status_letter(s.status());
            if status != m.status {
                differ.push(format!(
                    "conn {} {:?}\n    transaction status after it: rocklake {status}, the \
                     capture {}",
                    m.conn,
                    sql.chars().take(240).collect::<String>(),
                    m.status
                ));
            }
            statements += ours.len();
            // PostgreSQL reports only the error of a failed text; compare from there.
            let (mut ours, mut pg) = (ours, pg);
            if let Some(Answer::Error(_)) = pg.last() {
                if pg.len() == 1 && ours.len() > 1 {
                    ours = ours.split_off(ours.len() - 1);
                }
            }
            for (i, (a, b)) in ours.iter_mut().zip(pg.iter_mut()).enumerate() {
                if let (Answer::Rows(x), Answer::Rows(y)) = (&mut *a, &mut *b) {
                    if catalog_read {
                        // The kind of answer only: PostgreSQL's catalog rows are its own.
                        catalog_sets += 1;
                        x.clear();
                        y.clear();
                        continue;
                    }
                    result_sets += 1;
                    if !ordered.get(i).copied().unwrap_or(false) {
                        x.sort();
                        y.sort();
                    }
                }
                if let Answer::Error(_) = b {
                    errors += 1;
                }
            }
            if ours != pg {
                differ.push(format!(
                    "conn {} {:?}\n    rocklake   {:?}\n    postgresql {:?}",
                    m.conn,
                    sql.chars().take(240).collect::<String>(),
                    ours.iter()
                        .map(|a| format!("{a:?}").chars().take(300).collect::<String>())
                        .collect::<Vec<_>>(),
                    pg.iter()
                        .map(|a| format!("{a:?}").chars().take(300).collect::<String>())
                        .collect::<Vec<_>>(),
                ));
            }
        }
        let direct: u64 = sessions.values().map(|(s, _, _)| s.direct_runs()).sum();
        println!(
            "{} vs PostgreSQL 15: {statements} statements, {result_sets} result sets and \
             {errors} errors compared, {catalog_sets} reads of PostgreSQL's own catalog \
             compared by kind, the transaction status after each of {} messages; {} \
             differ; {direct} statements on the direct path (each also answered by DataFusion \
             and compared)",
            store.name,
            trace.len(),
            differ.len()
        );
        for d in differ.iter().take(20) {
            println!("  {d}");
        }
        drop(sessions);
        db.close().await.unwrap();
        let _ = admin
            .simple_query(&format!("DROP DATABASE IF EXISTS {dbname} WITH (FORCE)"))
            .await;
        assert!(
            differ.is_empty(),
            "{}: {} messages differ from PostgreSQL",
            store.name,
            differ.len()
        );
    }
}
