//! `rocklake export URL TARGET`: write a RockLake store's DuckLake catalog into PostgreSQL or
//! into a SQLite file, where stock DuckDB attaches it as before (the way out).
//!
//! The store is read in one `REPEATABLE READ` transaction (one snapshot of it; a SlateDB store
//! is opened as a reader, so its running server keeps serving). The target's schema (or
//! file) must hold none of the tables; they are created and filled in one transaction there,
//! so a failure leaves nothing behind. A SQLite target gets DuckLake's SQLite layout
//! (`sqlite_catalog`).

use std::sync::Arc;
use std::time::Instant;

use futures::{pin_mut, SinkExt};
use rocklake::{Error, Keyspace};
use rocklake_sql::datafusion::arrow::array::RecordBatch;
use rocklake_sql::relation::RelDef;
use rocklake_sql::types::SqlType;
use rocklake_sql::{Database, Output, Session, SqlError};
use tokio_postgres::types::ToSql;
use tokio_postgres::Client;

use crate::cmd::catalog_copy::{self, quote, Table};
use crate::cmd::sqlite_catalog::{self, InlinedTypes, SqliteTarget};
use crate::progress::Progress;
use crate::CliResult;

/// How many bytes of COPY text go to PostgreSQL in one message.
const CHUNK: usize = 1 << 20;

pub(crate) async fn run(url: String, target: String, schema: String, json: bool) -> CliResult {
    let started = Instant::now();
    let ks = Keyspace::open_read_only(crate::open_for_reading(&url).await?).await?;
    let db = Database::open(ks).await.map_err(sql_error)?;
    let result = export(&db, &url, &target, &schema, json).await;
    db.close().await.map_err(sql_error)?;
    let rows = result?;
    catalog_copy::report(&rows, started, json, |tables, total, secs, rate| {
        format!(
            "exported {tables} tables, {total} rows from {url} in {secs:.1} s ({rate:.0} rows/s)"
        )
    });
    Ok(std::process::ExitCode::SUCCESS)
}

async fn export(
    db: &Arc<Database>,
    url: &str,
    target: &str,
    schema: &str,
    quiet: bool,
) -> Result<Vec<(String, u64)>, Error> {
    let mut session = Session::new(db.clone());
    session
        .run("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .map_err(sql_error)?;
    let catalog = db.catalog();
    let mut rels: Vec<Arc<RelDef>> = catalog
        .tables
        .values()
        .filter(|t| t.schema == schema)
        .cloned()
        .collect();
    rels.sort_by_key(|t| t.id);
    if !rels.iter().any(|t| t.name == "ducklake_metadata") {
        return Err(Error::InvalidArgument(format!(
            "{url} holds no DuckLake catalog in schema {schema} (no ducklake_metadata among its \
             {} tables there)",
            rels.len()
        )));
    }
    let version = store_version(&mut session, schema).await?;
    catalog_copy::check_version(&version, &format!("schema {schema}"))?;
    let tables: Vec<Table> = rels.iter().map(|r| table_of(r)).collect();
    if let Some(path) = sqlite_catalog::sqlite_path(target) {
        let result = export_sqlite(&mut session, schema, &tables, &path, quiet).await;
        let _ = session.run("ROLLBACK").await;
        return result.map_err(|e| {
            Error::InvalidArgument(format!(
                "export of {url} failed, nothing of it was written: {e}"
            ))
        });
    }

    let client = catalog_copy::connect_pg(target).await?;
    refuse_existing(&client, schema, &tables).await?;
    client
        .batch_execute("BEGIN")
        .await
        .map_err(|e| Error::InvalidArgument(pg_error("could not begin on the target", &e)))?;
    let mut done = Vec::with_capacity(tables.len());
    let mut result = Ok(());
    if schema != "public" {
        result = client
            .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {}", quote(schema)))
            .await
            .map_err(|e| pg_error("could not create the schema", &e));
    }
    let p = Progress::steps("export", tables.len() as u64, quiet);
    for t in &tables {
        if result.is_err() {
            break;
        }
        p.say(format!("{} ...", t.name));
        let t0 = Instant::now();
        match copy_table(&client, &mut session, schema, t).await {
            Ok(n) => {
                catalog_copy::progress(&p, &t.name, n, t0);
                done.push((t.name.clone(), n));
            }
            Err(e) => result = Err(e),
        }
    }
    let result = match result {
        Ok(()) => {
            p.say("committing on the target");
            let committed = client
                .batch_execute("COMMIT")
                .await
                .map_err(|e| pg_error("the target refused the commit", &e));
            if committed.is_ok() {
                p.done();
            }
            committed
        }
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            Err(e)
        }
    };
    let _ = session.run("ROLLBACK").await;
    result.map_err(|e| {
        Error::InvalidArgument(format!(
            "export of {url} failed, nothing of it was written: {e}"
        ))
    })?;
    Ok(done)
}

/// Write every table into a new SQLite catalog at `path`, in one SQLite transaction.
async fn export_sqlite(
    session: &mut Session,
    schema: &str,
    tables: &[Table],
    path: &std::path::Path,
    quiet: bool,
) -> Result<Vec<(String, u64)>, String> {
    let inlined = if tables.iter().any(|t| InlinedTypes::is_inlined(&t.name)) {
        store_inlined_types(session, schema).await?
    } else {
        InlinedTypes::default()
    };
    let names: Vec<&str> = tables.iter().map(|t| t.name.as_str()).collect();
    let target = SqliteTarget::begin(path, &names).map_err(|e| match e {
        Error::InvalidArgument(m) => m,
        e => e.to_string(),
    })?;
    let mut done = Vec::with_capacity(tables.len());
    let p = Progress::steps("export", tables.len() as u64, quiet);
    for t in tables {
        p.say(format!("{} ...", t.name));
        let t0 = Instant::now();
        let written = async {
            let kinds = target.create(t, &inlined)?;
            let batches = read_table(session, schema, t).await?;
            let rows = batches.iter().flat_map(|b| {
                (0..b.num_rows()).map(move |row| {
                    b.columns()
                        .iter()
                        .map(|c| rocklake_server::wire::text_value(c.as_ref(), row))
                        .collect::<Vec<_>>()
                })
            });
            target.insert(t, &kinds, rows)
        }
        .await;
        match written {
            Ok(n) => {
                catalog_copy::progress(&p, &t.name, n, t0);
                done.push((t.name.clone(), n));
            }
            Err(e) => {
                target.abandon();
                return Err(e);
            }
        }
    }
    target.commit()?;
    p.done();
    Ok(done)
}

/// The DuckLake types of the store's inlined-data columns.
async fn store_inlined_types(session: &mut Session, schema: &str) -> Result<InlinedTypes, String> {
    let s = quote(schema);
    let tables = query_text(
        session,
        &format!(
            "SELECT table_name, table_id, schema_version FROM {s}.ducklake_inlined_data_tables"
        ),
    )
    .await?;
    let snapshots = query_text(
        session,
        &format!("SELECT snapshot_id, schema_version FROM {s}.ducklake_snapshot"),
    )
    .await?;
    let columns = query_text(
        session,
        &format!(
            "SELECT table_id, column_name, column_type, begin_snapshot, end_snapshot \
             FROM {s}.ducklake_column WHERE parent_column IS NULL"
        ),
    )
    .await?;
    sqlite_catalog::inlined_types_from_text(tables, snapshots, columns)
}

/// Every row of a query as PostgreSQL text values.
async fn query_text(session: &mut Session, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let out = session.run(sql).await.map_err(|e| e.message)?;
    let Output::Rows { batches, .. } = out else {
        return Err(format!("{sql} answered {}", out.tag()));
    };
    Ok(batches
        .iter()
        .flat_map(|b| {
            (0..b.num_rows()).map(move |row| {
                b.columns()
                    .iter()
                    .map(|c| rocklake_server::wire::text_value(c.as_ref(), row))
                    .collect()
            })
        })
        .collect())
}

/// Every row of `t` as the store's COPY reads it.
async fn read_table(
    session: &mut Session,
    schema: &str,
    t: &Table,
) -> Result<Vec<RecordBatch>, String> {
    let out = session
        .run(&t.copy_out_sql(schema))
        .await
        .map_err(|e| format!("reading {}: {}", t.name, e.message))?;
    match out {
        Output::CopyOut { batches, .. } | Output::Rows { batches, .. } => Ok(batches),
        other => Err(format!("reading {} answered {}", t.name, other.tag())),
    }
}

/// One stored table as the target creates it.
fn table_of(rel: &RelDef) -> Table {
    let columns = rel
        .columns
        .iter()
        .map(|c| {
            let ty = match (c.is_text, c.ty) {
                (true, SqlType::Array(_)) => "text[]".to_string(),
                (true, _) => "text".to_string(),
                (false, ty) => ty.pg_name(),
            };
            (c.name.clone(), ty, c.not_null)
        })
        .collect();
    Table {
        name: rel.name.clone(),
        columns,
        primary_key: rel
            .primary_key
            .iter()
            .map(|i| rel.columns[*i].name.clone())
            .collect(),
    }
}

/// The store's DuckLake version, read through SQL as DuckDB reads it.
async fn store_version(session: &mut Session, schema: &str) -> Result<String, Error> {
    let sql = format!(
        "SELECT value FROM {}.ducklake_metadata WHERE key = 'version' AND scope IS NULL",
        quote(schema)
    );
    let out = session.run(&sql).await.map_err(sql_error)?;
    let Output::Rows { batches, .. } = out else {
        return Err(Error::InvalidArgument(format!(
            "reading the version answered {}",
            out.tag()
        )));
    };
    let values: Vec<String> = batches
        .iter()
        .flat_map(|b| {
            (0..b.num_rows())
                .filter_map(move |i| rocklake_server::wire::text_value(b.column(0).as_ref(), i))
        })
        .collect();
    match values.as_slice() {
        [v] => Ok(v.clone()),
        _ => Err(Error::InvalidArgument(format!(
            "{schema}.ducklake_metadata has {} global `version` rows; a DuckLake catalog has one",
            values.len()
        ))),
    }
}

/// Refuse a target whose schema already holds any of the tables.
async fn refuse_existing(client: &Client, schema: &str, tables: &[Table]) -> Result<(), Error> {
    let names: Vec<&str> = tables.iter().map(|t| t.name.as_str()).collect();
    let params: [&(dyn ToSql + Sync); 2] = [&schema, &names];
    let rows = client
        .query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = ANY($2) ORDER BY 1",
            &params,
        )
        .await
        .map_err(|e| Error::InvalidArgument(pg_error("cannot list the target's tables", &e)))?;
    if rows.is_empty() {
        return Ok(());
    }
    let held: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    Err(Error::InvalidArgument(format!(
        "the target's schema {schema} already holds {} of the catalog's tables ({}); export \
         writes only into a schema without them",
        held.len(),
        held.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
            + if held.len() > 3 { ", ..." } else { "" }
    )))
}

/// Create one table on the target and copy its rows there; the rows copied.
async fn copy_table(
    client: &Client,
    session: &mut Session,
    schema: &str,
    t: &Table,
) -> Result<u64, String> {
    client
        .batch_execute(&t.create_sql(schema))
        .await
        .map_err(|e| format!("creating {}: {}", t.name, catalog_copy::pg_message(&e)))?;
    let batches = read_table(session, schema, t).await?;
    let sink = client
        .copy_in(&t.copy_in_sql(schema))
        .await
        .map_err(|e| format!("writing {}: {}", t.name, catalog_copy::pg_message(&e)))?;
    pin_mut!(sink);
    let mut buf = String::with_capacity(CHUNK + (64 << 10));
    for b in &batches {
        for row in 0..b.num_rows() {
            text_line(&mut buf, b, row);
            if buf.len() >= CHUNK {
                let chunk = bytes::Bytes::from(std::mem::take(&mut buf));
                sink.send(chunk)
                    .await
                    .map_err(|e| format!("writing {}: {}", t.name, catalog_copy::pg_message(&e)))?;
            }
        }
    }
    if !buf.is_empty() {
        sink.send(bytes::Bytes::from(buf))
            .await
            .map_err(|e| format!("writing {}: {}", t.name, catalog_copy::pg_message(&e)))?;
    }
    sink.finish()
        .await
        .map_err(|e| format!("writing {}: {}", t.name, catalog_copy::pg_message(&e)))
}

/// Append one row as a line of PostgreSQL's text COPY format.
fn text_line(out: &mut String, b: &RecordBatch, row: usize) {
    for (i, col) in b.columns().iter().enumerate() {
        if i > 0 {
            out.push('\t');
        }
        match rocklake_server::wire::text_value(col.as_ref(), row) {
            None => out.push_str("\\N"),
            Some(v) => out.push_str(&rocklake_server::wire::copy_text_escape(&v, '\t')),
        }
    }
    out.push('\n');
}

fn pg_error(what: &str, e: &tokio_postgres::Error) -> String {
    format!("{what}: {}", catalog_copy::pg_message(e))
}

fn sql_error(e: SqlError) -> Error {
    Error::InvalidArgument(e.to_string())
}
