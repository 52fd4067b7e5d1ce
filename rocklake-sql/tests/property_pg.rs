//! Random DuckLake-shaped transactions on RockLake (every engine) and on PostgreSQL 15, side by
//! side: two sessions commit snapshots with data files, end files (`UPDATE ... SET end_snapshot`),
//! delete them, roll back, and reuse snapshot and file ids (so some commits are refused with
//! 23505). Every statement must get the same answer (command tag or SQLSTATE) on both, and
//! after every transaction both must hold the same rows.
//!
//! The cases come from a fixed seed (they are the same every run); `ROCKLAKE_SQL_CASES` sets how
//! many (default 6). `.ci/run` starts PostgreSQL and sets `ROCKLAKE_TEST_PG`; without it the
//! test fails in CI and says NOT RUN elsewhere.

mod common;

use common::{open, stores};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRng, TestRunner};
use rocklake_sql::types::pg_text;
use rocklake_sql::{Output, Session};
use tokio_postgres::{Client, SimpleQueryMessage};

const DDL: &str = "CREATE TABLE ducklake_snapshot(snapshot_id BIGINT PRIMARY KEY, snapshot_time TIMESTAMP WITH TIME ZONE, schema_version BIGINT, next_catalog_id BIGINT, next_file_id BIGINT);
CREATE TABLE ducklake_data_file(data_file_id BIGINT PRIMARY KEY, table_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT, path VARCHAR, record_count BIGINT)";

#[derive(Clone, Debug)]
struct Txn {
    session: usize,
    snapshot: i64,
    add: Vec<(i64, i64)>,
    end: Vec<i64>,
    delete: Vec<i64>,
    rollback: bool,
}

fn txn() -> impl Strategy<Value = Txn> {
    (
        0usize..2,
        0i64..12,
        prop::collection::vec((0i64..30, 1i64..4), 0..4),
        prop::collection::vec(0i64..30, 0..3),
        prop::collection::vec(0i64..30, 0..2),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(session, snapshot, add, end, delete, rollback)| Txn {
            session,
            snapshot,
            add,
            end,
            delete,
            rollback,
        })
}

fn statements(t: &Txn) -> Vec<String> {
    let mut v = vec![
        "BEGIN TRANSACTION ISOLATION LEVEL REPEATABLE READ".to_string(),
        format!(
            "INSERT INTO ducklake_snapshot VALUES ({}, '2026-12-01 00:00:00+00', 1, 1, 1)",
            t.snapshot
        ),
    ];
    if !t.add.is_empty() {
        let rows: Vec<String> = t
            .add
            .iter()
            .map(|(f, tab)| {
                format!(
                    "({f}, {tab}, {}, NULL, 'f{f}.parquet', {})",
                    t.snapshot,
                    f * 10
                )
            })
            .collect();
        v.push(format!(
            "INSERT INTO ducklake_data_file VALUES {}",
            rows.join(", ")
        ));
    }
    if !t.end.is_empty() {
        let ids: Vec<String> = t.end.iter().map(|i| i.to_string()).collect();
        v.push(format!(
            "UPDATE ducklake_data_file SET end_snapshot = {} WHERE end_snapshot IS NULL AND data_file_id IN ({})",
            t.snapshot,
            ids.join(", ")
        ));
    }
    if !t.delete.is_empty() {
        let ids: Vec<String> = t.delete.iter().map(|i| i.to_string()).collect();
        v.push(format!(
            "DELETE FROM ducklake_data_file WHERE data_file_id IN ({})",
            ids.join(", ")
        ));
    }
    v.push(if t.rollback { "ROLLBACK" } else { "COMMIT" }.to_string());
    v
}

async fn pg_answer(c: &Client, sql: &str) -> String {
    match c.simple_query(sql).await {
        Ok(msgs) => msgs
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::CommandComplete(n) => Some(format!("ok {n}")),
                _ => None,
            })
            .next_back()
            .unwrap_or_default(),
        Err(e) => e
            .code()
            .map(|c| c.code().to_string())
            .unwrap_or(e.to_string()),
    }
}

fn our_answer(r: &rocklake_sql::Result<Output>) -> String {
    match r {
        Ok(o) => {
            let tag = o.tag();
            // The affected-row count, as tokio-postgres reports it.
            let n = tag
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            format!("ok {n}")
        }
        Err(e) => e.code.to_string(),
    }
}

async fn pg_rows(c: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    let mut rows: Vec<Vec<Option<String>>> = c
        .simple_query(sql)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect();
    rows.sort();
    rows
}

async fn our_rows(s: &mut Session, sql: &str) -> Vec<Vec<Option<String>>> {
    let out = s.run(sql).await.unwrap();
    let Output::Rows { batches, .. } = out else {
        panic!("{sql} gave no rows")
    };
    let mut rows = Vec::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            rows.push(b.columns().iter().map(|c| pg_text(c.as_ref(), r)).collect());
        }
    }
    rows.sort();
    rows
}

#[test]
fn random_ducklake_transactions_end_the_same_on_rocklake_and_postgresql() {
    let Some(url) = common::pg::url() else { return };
    let cases: usize = std::env::var("ROCKLAKE_SQL_CASES")
        .ok()
        .map(|v| v.parse().expect("ROCKLAKE_SQL_CASES must be a number"))
        .unwrap_or(6);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
    );
    let (mut txns, mut refused, mut statements_compared) = (0usize, 0usize, 0usize);
    for case in 0..cases {
        let plan = prop::collection::vec(txn(), 10..30)
            .new_tree(&mut runner)
            .unwrap()
            .current();
        rt.block_on(async {
            for store in stores() {
                let name = format!("rocklake_prop_{}_{case}_{}", std::process::id(), store.name);
                let (admin, db_url) = common::pg::fresh_db(&url, &name).await;
                let pg = [common::pg::connect(&db_url).await, common::pg::connect(&db_url).await];
                pg[0].batch_execute(DDL).await.unwrap();
                let db = open(&store).await;
                let mut ours = [Session::new(db.clone()), Session::new(db.clone())];
                for s in &mut ours {
                    s.set_direct_mode(rocklake_sql::DirectMode::Check);
                }
                ours[0].run(DDL).await.unwrap();
                for (i, t) in plan.iter().enumerate() {
                    for sql in statements(t) {
                        let a = our_answer(&ours[t.session].run(&sql).await);
                        let b = pg_answer(&pg[t.session], &sql).await;
                        statements_compared += 1;
                        assert_eq!(a, b, "{} case {case} txn {i} {t:?}: {sql}", store.name);
                        if b == "23505" {
                            refused += 1;
                        }
                    }
                    txns += 1;
                    for q in [
                        "SELECT snapshot_id, schema_version FROM ducklake_snapshot",
                        "SELECT data_file_id, table_id, begin_snapshot, end_snapshot, path, record_count FROM ducklake_data_file",
                    ] {
                        let a = our_rows(&mut ours[0], q).await;
                        let b = pg_rows(&pg[0], q).await;
                        assert_eq!(a, b, "{} case {case} after txn {i} {t:?}: {q}", store.name);
                    }
                }
                drop(pg);
                drop(ours);
                db.close().await.unwrap();
                let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
            }
        });
    }
    println!(
        "{cases} cases: {txns} transactions, {statements_compared} statements compared with \
         PostgreSQL ({refused} refused 23505 on both), table contents equal after each"
    );
}
