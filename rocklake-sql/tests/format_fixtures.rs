//! Stores written by an older RockLake must keep opening (#22 item 12). `tests/fixtures/
//! format-1/<engine>/` holds a small store of each engine, written once by the build that had
//! catalog format version 1: the start of DuckLake's captured workload (its bootstrap, its
//! first commits, the SQL table definitions under `0x82`, DuckLake's tagged tables, inlined
//! data). This build must open each, find it clean (`verify`), read every table's rows as they
//! were written (`expected.txt`), and keep writing to it. A store whose format version is newer
//! than this build's must be refused, naming both versions, before anything is written.
//!
//! A fixture is never written again: a new format version gets a new folder beside the old
//! ones, and every later build keeps opening them all. To write this version's folders for the
//! engines that have none yet: `ROCKLAKE_WRITE_FIXTURES=1 cargo test -p rocklake-sql
//! --features rocksdb --test format_fixtures` (it needs the captured trace beside the clone).

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use common::trace::{copy_in_replacement, load_trace};
use rocklake_core::backend::{Durability, WriteBatch};
use rocklake_core::keyspace::FORMAT_VERSION;
use rocklake_core::{keys, tags, values, Keyspace};
use rocklake_sql::types::pg_text;
use rocklake_sql::{Database, Output, Session};

/// How many of the trace's messages the fixture's store holds.
const MESSAGES: usize = 1180;

/// The engines of this build with a folder of their own, and their URL schemes.
fn engines() -> Vec<(&'static str, &'static str)> {
    let mut v = vec![("slatedb", "file://"), ("sled", "sled://")];
    if cfg!(feature = "rocksdb") {
        v.push(("rocksdb", "rocksdb://"));
    }
    v
}

fn fixtures(version: u64) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/format-{version}"))
}

/// Every table's rows, as PostgreSQL's text forms, sorted: one line per row.
async fn dump(db: &Arc<Database>) -> Vec<String> {
    let mut s = Session::new(db.clone());
    let mut lines = Vec::new();
    for (schema, name) in db.catalog().tables.keys() {
        let out = s
            .run(&format!("SELECT * FROM \"{schema}\".\"{name}\""))
            .await
            .unwrap_or_else(|e| panic!("reading {schema}.{name}: {e}"));
        let Output::Rows { batches, .. } = out else {
            panic!("{schema}.{name} gave no rows")
        };
        let mut rows = Vec::new();
        for b in &batches {
            for r in 0..b.num_rows() {
                let cells: Vec<String> = b
                    .columns()
                    .iter()
                    .map(|c| pg_text(c.as_ref(), r).unwrap_or_else(|| "NULL".into()))
                    .collect();
                rows.push(format!("{schema}.{name}: {}", cells.join("|")));
            }
        }
        rows.sort();
        lines.push(format!("{schema}.{name}: {} rows", rows.len()));
        lines.extend(rows);
    }
    lines
}

async fn open_db(url: &str) -> Arc<Database> {
    let backend = rocklake::open(url).await.unwrap();
    Database::open(Keyspace::open(backend).await.unwrap())
        .await
        .unwrap()
}

/// Write the fixtures of this build's format version for the engines that have none yet (an
/// engine's folder is never written again); every engine must read the rows `expected.txt`
/// holds, which the first one written sets.
async fn write_fixtures() {
    let dir = fixtures(FORMAT_VERSION);
    let trace = load_trace().expect("writing fixtures needs the captured trace");
    let expected_at = dir.join("expected.txt");
    for (engine, scheme) in engines() {
        let at = dir.join(engine);
        if at.exists() {
            continue;
        }
        std::fs::create_dir_all(&at).unwrap();
        let db = open_db(&format!("{scheme}{}", at.display())).await;
        let now = Arc::new(AtomicI64::new(0));
        let mut sessions = std::collections::BTreeMap::new();
        let mut loads = 0;
        for m in trace.iter().take(MESSAGES) {
            let s = sessions.entry(m.conn).or_insert_with(|| {
                let mut s = Session::new(db.clone());
                let clock = now.clone();
                s.set_clock(Arc::new(move || clock.load(Ordering::Acquire)));
                s
            });
            now.store(m.at_micros, Ordering::Release);
            let sql = copy_in_replacement(&m.query, &mut loads).unwrap_or_else(|| m.query.clone());
            s.execute(&sql).await;
        }
        drop(sessions);
        let lines = dump(&db).await.join("\n") + "\n";
        db.close().await.unwrap();
        match std::fs::read_to_string(&expected_at) {
            Ok(e) => assert_eq!(e, lines, "{engine} holds other rows than expected.txt"),
            Err(_) => std::fs::write(&expected_at, lines).unwrap(),
        }
        println!("wrote {}", at.display());
    }
}

/// Copy a fixture folder, so that opening it (which raises its writer epoch) leaves the
/// checked-in one as it was.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_of_every_format_version_open_read_and_write() {
    if std::env::var_os("ROCKLAKE_WRITE_FIXTURES").is_some() {
        write_fixtures().await;
    }
    let mut opened = 0;
    for version in 1..=FORMAT_VERSION {
        let dir = fixtures(version);
        let expected: Vec<String> = std::fs::read_to_string(dir.join("expected.txt"))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .lines()
            .map(str::to_string)
            .collect();
        for (engine, scheme) in engines() {
            let tmp = tempfile::tempdir().unwrap();
            let at = tmp.path().join("store");
            copy_dir(&dir.join(engine), &at);
            let url = format!("{scheme}{}", at.display());
            let db = open_db(&url).await;
            let report = rocklake_core::verify::verify(db.keyspace().backend().as_ref(), |_, _| {})
                .await
                .unwrap();
            assert!(
                report.is_clean(),
                "format {version} on {engine}: {:?}",
                report.findings
            );
            let got = dump(&db).await;
            assert!(
                got == expected,
                "format {version} on {engine}: the rows read differ from expected.txt; first \
                 difference at line {}",
                got.iter()
                    .zip(&expected)
                    .take_while(|(a, b)| a == b)
                    .count()
                    + 1
            );
            // It keeps working: a DuckLake-style commit lands and reads back.
            let mut s = Session::new(db.clone());
            s.run("BEGIN").await.unwrap();
            s.run("INSERT INTO ducklake_metadata VALUES ('fixture', 'reopened', NULL, NULL)")
                .await
                .unwrap();
            s.run("COMMIT").await.unwrap();
            let out = s
                .run("SELECT value FROM ducklake_metadata WHERE key = 'fixture'")
                .await
                .unwrap();
            let Output::Rows { batches, .. } = out else {
                panic!("no rows")
            };
            assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
            drop(s);
            db.close().await.unwrap();
            println!(
                "format {version} on {engine}: opened, verify walked {} keys clean, {} lines \
                 as written, a new commit landed",
                report.keys,
                got.len()
            );
            opened += 1;
        }
    }
    assert!(opened >= 2, "no fixture was opened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_format_version_is_refused_before_anything_is_written() {
    for (engine, scheme) in engines() {
        let tmp = tempfile::tempdir().unwrap();
        let at = tmp.path().join("store");
        copy_dir(&fixtures(1).join(engine), &at);
        let url = format!("{scheme}{}", at.display());
        // A later build's store: its format version one above this build's.
        let backend = rocklake::open(&url).await.unwrap();
        let key = Bytes::from(keys::system_key(tags::system::FORMAT_VERSION).unwrap());
        let epoch = Bytes::from(keys::system_key(tags::system::WRITER_EPOCH).unwrap());
        let mut batch = WriteBatch::new();
        batch.put(
            key,
            Bytes::copy_from_slice(&values::encode_u64(FORMAT_VERSION + 1)),
        );
        backend.write(batch, Durability::Durable).await.unwrap();
        let epoch_before = backend.get(&epoch).await.unwrap();
        let e = match Keyspace::open(backend.clone()).await {
            Ok(_) => panic!("{engine}: a store of format {} opened", FORMAT_VERSION + 1),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains(&format!(
                "catalog format version {} is newer than this binary understands ({FORMAT_VERSION})",
                FORMAT_VERSION + 1
            )),
            "{engine}: {e}"
        );
        // Refused before the writer epoch was raised: nothing was written.
        assert_eq!(backend.get(&epoch).await.unwrap(), epoch_before, "{engine}");
        backend.close().await.unwrap();
        println!("{engine}: refused: {e}");
    }
}
