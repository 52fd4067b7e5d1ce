//! Replays every simple-Query message of the captured DuckLake workload
//! (`shared/ducklake-wire/wire_trace.jsonl.gz`: two DuckDB processes against PostgreSQL 15)
//! through the SQL layer, connection by connection in captured order, on every engine, and
//! holds each statement's result to what PostgreSQL answered: the command tag with its row
//! count, or the SQLSTATE of the error; and after each message the transaction status
//! (`I`/`T`/`E`) to the one PostgreSQL's ReadyForQuery gave.
//!
//! The capture does not hold the rows of the four bootstrap `COPY ... FROM STDIN` loads and the
//! four option loads; they are replaced by INSERTs of the rows the capture's final catalog
//! shows. `now()` answers the capture's time of the message that opened the transaction, as
//! PostgreSQL's did. Messages that read PostgreSQL's own catalog (`pg_catalog`,
//! `pg_settings`, `to_regclass`, `version()`) run too (five of them open DuckLake's
//! `REPEATABLE READ` transactions, the bootstrap among them), but their tags are compared
//! without row counts: that catalog's rows are not PostgreSQL's.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use common::trace::{
    command_matches, copy_in_replacement, load_trace, server_catalog, status_letter, tag_matches,
    Want,
};
use common::{open, stores};
use rocklake_sql::relation::Layout;
use rocklake_sql::Session;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_captured_ducklake_workload_gets_postgresql_s_answers_on_every_engine() {
    let Some(trace) = load_trace() else { return };
    for store in stores() {
        let db = open(&store).await;
        let now = Arc::new(AtomicI64::new(0));
        let mut sessions: BTreeMap<u64, Session> = BTreeMap::new();
        let (mut compared, mut server_only, mut statements) = (0usize, 0usize, 0usize);
        let mut statuses = 0usize;
        let mut mismatches: Vec<String> = Vec::new();
        let mut metadata_loads = 0;
        for m in &trace {
            let s = sessions.entry(m.conn).or_insert_with(|| {
                let mut s = Session::new(db.clone());
                // Every statement of the direct path's shapes is answered by both paths.
                s.set_direct_mode(rocklake_sql::DirectMode::Check);
                let clock = now.clone();
                s.set_clock(Arc::new(move || clock.load(Ordering::Acquire)));
                s
            });
            now.store(m.at_micros, Ordering::Release);
            statements += m.want.len();
            let catalog_read = server_catalog(&m.query);
            if catalog_read {
                server_only += m.want.len();
            }
            let sql = copy_in_replacement(&m.query, &mut metadata_loads)
                .unwrap_or_else(|| m.query.clone());
            let got = s.execute(&sql).await;
            let status = status_letter(s.status());
            compared += 1;
            let errors: Vec<String> = got
                .iter()
                .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
                .collect();
            let got: Vec<Want> = got
                .iter()
                .map(|r| match r {
                    Ok(o) => Want::Tag(o.tag()),
                    Err(e) => Want::Error(e.code.to_string()),
                })
                .collect();
            let same = got.len() == m.want.len()
                && got.iter().zip(&m.want).all(|(g, w)| match (g, w) {
                    _ if catalog_read => command_matches(w, g),
                    (Want::Tag(g), Want::Tag(w)) => tag_matches(w, g),
                    (g, w) => g == w,
                });
            if status == m.status {
                statuses += 1;
            }
            if !same || status != m.status {
                mismatches.push(format!(
                    "conn {} {:?}\n    want {:?} then {}\n    got  {:?} then {status}\n    \
                     errors {:?}",
                    m.conn,
                    &sql.chars().take(300).collect::<String>(),
                    m.want,
                    m.status,
                    got,
                    errors
                ));
            }
        }
        let direct: u64 = sessions.values().map(|s| s.direct_runs()).sum();
        let reused = db.parses_reused();
        println!(
            "{}: {} messages ({statements} statements) replayed; {compared} messages compared, \
             {} differ; the transaction status after {statuses} of them as PostgreSQL's; \
             {server_only} statements read PostgreSQL's own catalog (compared without row \
             counts); {direct} statements on the direct path, each also answered by DataFusion \
             and compared; {reused} texts parsed from a kept parse of their shape",
            store.name,
            trace.len(),
            mismatches.len()
        );
        assert!(direct > 0, "no statement took the direct path");
        assert!(
            reused > 0,
            "no text was parsed from a kept parse of its shape"
        );
        for m in mismatches.iter().take(25) {
            println!("  {m}");
        }
        // DuckLake's catalog tables landed under their registry tags, the inlined-data tables
        // under 0xFD, and the store is one that `rocklake verify` finds clean.
        let catalog = db.catalog();
        let mut tagged = 0;
        for t in catalog.tables.values() {
            let inlined = t.name.starts_with("ducklake_inlined_data_")
                && !t.name.starts_with("ducklake_inlined_data_tables");
            match &t.layout {
                Layout::Tagged { .. } => tagged += 1,
                Layout::Inlined { .. } => assert!(inlined, "{} is stored as inlined data", t.name),
                Layout::Rows => assert!(
                    !t.name.starts_with("ducklake_")
                        || t.name.starts_with("ducklake_inlined_delete_"),
                    "{}: DuckLake table {} is not under its registry tag",
                    store.name,
                    t.name
                ),
            }
        }
        assert_eq!(
            tagged, 28,
            "{}: every DuckLake catalog table is tagged",
            store.name
        );
        let report = rocklake_core::verify::verify(db.keyspace().backend().as_ref(), |_, _| {})
            .await
            .unwrap();
        println!(
            "{}: {} tables ({tagged} under registry tags); verify walked {} keys, {} findings",
            store.name,
            catalog.tables.len(),
            report.keys,
            report.findings.len()
        );
        assert!(report.is_clean(), "{}: {:?}", store.name, report.findings);
        db.close().await.unwrap();
        assert!(
            mismatches.is_empty(),
            "{}: {} messages differ from PostgreSQL's answers",
            store.name,
            mismatches.len()
        );
    }
}
