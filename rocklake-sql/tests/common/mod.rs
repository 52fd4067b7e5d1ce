//! Stores of every engine this build has, in temporary folders, for the SQL tests.

#![allow(dead_code)]

pub mod pg;
pub mod trace;

use std::sync::Arc;

use rocklake_core::Keyspace;
use rocklake_sql::{Database, Output, Session};

/// One engine's store: its URL and the folder that holds it.
pub struct Store {
    pub name: &'static str,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

/// A fresh store on every engine of this build.
pub fn stores() -> Vec<Store> {
    let mut out = vec![Store {
        name: "model",
        url: "model://".into(),
        _dir: None,
    }];
    let mut add = |name: &'static str, scheme: &str| {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("{scheme}{}/store", dir.path().display());
        out.push(Store {
            name,
            url,
            _dir: Some(dir),
        });
    };
    add("slatedb", "file://");
    add("sled", "sled://");
    #[cfg(feature = "rocksdb")]
    add("rocksdb", "rocksdb://");
    out
}

/// Open the SQL layer on a store.
pub async fn open(store: &Store) -> Arc<Database> {
    let backend = rocklake::open(&store.url).await.unwrap();
    let ks = Keyspace::open(backend).await.unwrap();
    Database::open(ks).await.unwrap()
}

/// Render a result as lines of `|`-separated cells (NULL as `NULL`), in the order returned.
pub fn lines(out: &Output) -> Vec<String> {
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
    let (Output::Rows { batches, .. } | Output::CopyOut { batches, .. }) = out else {
        return vec![out.tag()];
    };
    let opts = FormatOptions::default().with_null("NULL");
    let mut v = Vec::new();
    for b in batches {
        let fmts: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for r in 0..b.num_rows() {
            let cells: Vec<String> = fmts.iter().map(|f| f.value(r).to_string()).collect();
            v.push(cells.join("|"));
        }
    }
    v
}

/// Run and render each value in PostgreSQL's text form (what a client reading text results
/// sees); panics with the statement on error.
pub async fn q_pg(s: &mut Session, sql: &str) -> Vec<String> {
    let out = Box::pin(s.run(sql))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let Output::Rows { batches, .. } = &out else {
        return vec![out.tag()];
    };
    let mut v = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            let cells: Vec<String> = b
                .columns()
                .iter()
                .map(|c| {
                    rocklake_sql::types::pg_text(c.as_ref(), r).unwrap_or_else(|| "NULL".into())
                })
                .collect();
            v.push(cells.join("|"));
        }
    }
    v
}

/// Run and render; panics with the statement on error.
pub async fn q(s: &mut Session, sql: &str) -> Vec<String> {
    // Boxed, as in `err`: a test of many statements would otherwise hold each statement's
    // (large, in a debug build) future inline and outgrow its thread's stack.
    match Box::pin(s.run(sql)).await {
        Ok(o) => lines(&o),
        Err(e) => panic!("{sql}: {e}"),
    }
}

/// Run and return the error's SQLSTATE; panics when the statement succeeds.
pub async fn err(s: &mut Session, sql: &str) -> (String, String) {
    match Box::pin(s.run(sql)).await {
        Ok(o) => panic!("{sql} should fail, gave {:?}", lines(&o)),
        Err(e) => (e.code.to_string(), e.message),
    }
}
