//! `rocklake import SOURCE URL`: bring a DuckLake catalog kept in PostgreSQL into a RockLake
//! store.
//!
//! Every table of the catalog's schema (DuckLake's own, its inlined-data tables and whatever
//! else DuckDB's postgres extension created there) is created and filled through RockLake's
//! SQL layer, exactly as DuckDB's own statements would have put them: the tag layout places
//! the keys, DuckDB's ids stay the named keys they are, and the id spaces' marks follow. The
//! whole load is one transaction on the target: a failure anywhere leaves the store without
//! a catalog. The source is read in one `REPEATABLE READ` transaction, so a catalog that is
//! written while the import runs is copied as of one snapshot of it.

use std::time::Instant;

use futures::{pin_mut, StreamExt};
use rocklake::{Error, Keyspace};
use rocklake_sql::{Database, Output, Session, SqlError};
use serde_json::json;
use tokio_postgres::Client;

use crate::cmd::catalog_copy::{self, Table};
use crate::CliResult;

/// How many bytes of the source's COPY text are decoded and loaded at a time.
const CHUNK: usize = 4 << 20;

pub(crate) async fn run(source: String, url: String, schema: String, json: bool) -> CliResult {
    let started = Instant::now();
    let client = catalog_copy::connect_pg(&source).await?;
    // One snapshot of the source for every table; the session's text output fixed to what
    // RockLake's COPY input reads back exactly.
    client
        .batch_execute(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL TimeZone = 'UTC'; \
             SET LOCAL DateStyle = 'ISO, MDY'; SET LOCAL IntervalStyle = 'postgres'; \
             SET LOCAL extra_float_digits = 1; SET LOCAL bytea_output = 'hex'",
        )
        .await
        .map_err(|e| pg_error("could not begin a read of the source", e))?;
    let tables = catalog_copy::pg_tables(&client, &schema).await?;
    catalog_copy::check_version(&catalog_copy::pg_version(&client, &schema).await?, &schema)?;

    let ks = Keyspace::open(crate::open_writer(&url).await?).await?;
    let db = Database::open(ks).await.map_err(sql_error)?;
    let held = db.catalog().tables.len();
    if held > 0 {
        db.close().await.map_err(sql_error)?;
        return Err(Error::InvalidArgument(format!(
            "{url} already holds a catalog ({held} tables); import needs a store without one"
        )));
    }
    let mut session = Session::new(db.clone());
    let loaded = load(&client, &mut session, &schema, &tables, json).await;
    let outcome = match loaded {
        Ok(rows) => session.run("COMMIT").await.map(|_| rows),
        Err(e) => Err(e),
    };
    // Whatever happened, the source's read ends; a failed load's transaction is dropped.
    let _ = client.batch_execute("ROLLBACK").await;
    drop(session);
    db.close().await.map_err(sql_error)?;
    let rows = outcome.map_err(|e| {
        Error::InvalidArgument(format!(
            "import into {url} failed, nothing of it was written: {}{}",
            e.message,
            e.detail.map(|d| format!(" ({d})")).unwrap_or_default()
        ))
    })?;
    let secs = started.elapsed().as_secs_f64();
    let total: u64 = rows.iter().map(|(_, n)| n).sum();
    if json {
        println!(
            "{}",
            json!({
                "tables": rows.len(),
                "rows": total,
                "seconds": secs,
                "rows_per_second": total as f64 / secs.max(1e-9),
                "per_table": rows.iter().map(|(t, n)| json!({"table": t, "rows": n})).collect::<Vec<_>>(),
            })
        );
    } else {
        println!(
            "imported {} tables, {total} rows into {url} in {secs:.1} s ({:.0} rows/s); \
             `rocklake verify {url}` checks the store",
            rows.len(),
            total as f64 / secs.max(1e-9)
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Create and fill every table inside one open transaction of `session`; the rows per table.
async fn load(
    client: &Client,
    session: &mut Session,
    schema: &str,
    tables: &[Table],
    quiet: bool,
) -> Result<Vec<(String, u64)>, SqlError> {
    session.run("BEGIN").await?;
    if schema != "public" {
        session
            .run(&format!("CREATE SCHEMA {}", catalog_copy::quote(schema)))
            .await?;
    }
    let mut done = Vec::with_capacity(tables.len());
    for t in tables {
        let t0 = Instant::now();
        session.run(&t.create_sql(schema)).await.map_err(|e| {
            SqlError::new(e.code, format!("creating table {}: {}", t.name, e.message))
        })?;
        let n = copy_table(client, session, schema, t).await?;
        if !quiet {
            eprintln!(
                "  {:<40} {n:>10} rows {:>7.1} s",
                t.name,
                t0.elapsed().as_secs_f64()
            );
        }
        done.push((t.name.clone(), n));
    }
    Ok(done)
}

/// Stream one table's rows from the source's `COPY ... TO STDOUT` into RockLake's `COPY ...
/// FROM STDIN`, a few MiB at a time; the rows copied.
async fn copy_table(
    client: &Client,
    session: &mut Session,
    schema: &str,
    t: &Table,
) -> Result<u64, SqlError> {
    let stream = client
        .copy_out(&format!(
            "COPY (SELECT {} FROM {}) TO STDOUT",
            t.column_list(),
            t.qualified(schema)
        ))
        .await
        .map_err(|e| source_error(&t.name, e))?;
    pin_mut!(stream);
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK + (64 << 10));
    let mut rows = 0u64;
    while let Some(chunk) = stream.next().await {
        buf.extend_from_slice(&chunk.map_err(|e| source_error(&t.name, e))?);
        if buf.len() >= CHUNK {
            rows += load_lines(session, schema, t, &buf).await?;
            buf.clear();
        }
    }
    if !buf.is_empty() {
        rows += load_lines(session, schema, t, &buf).await?;
    }
    Ok(rows)
}

/// Load whole lines of text COPY data (PostgreSQL sends one row per CopyData message, so a
/// chunk of whole messages ends at a line's end).
async fn load_lines(
    session: &mut Session,
    schema: &str,
    t: &Table,
    data: &[u8],
) -> Result<u64, SqlError> {
    let sql = format!(
        "COPY {} ({}) FROM STDIN",
        t.qualified(schema),
        t.column_list()
    );
    let columns = match session.run(&sql).await? {
        Output::CopyIn { columns, .. } => columns,
        other => {
            return Err(SqlError::new(
                "XX000",
                format!("COPY FROM STDIN answered {:?}", other.tag()),
            ));
        }
    };
    let rows = match rocklake_server::wire::decode_copy_text(data, &columns, "\\N", '\t') {
        Ok(rows) => rows,
        Err(e) => {
            let e = session.copy_fail(&e.message).await;
            return Err(SqlError::new(
                e.code,
                format!("table {}: {}", t.name, e.message),
            ));
        }
    };
    let n = rows.len() as u64;
    session
        .copy_in(rows)
        .await
        .map_err(|e| SqlError::new(e.code, format!("table {}: {}", t.name, e.message)))?;
    Ok(n)
}

fn source_error(table: &str, e: tokio_postgres::Error) -> SqlError {
    SqlError::new("08006", format!("reading {table} from the source: {e}"))
}

fn pg_error(what: &str, e: tokio_postgres::Error) -> Error {
    Error::InvalidArgument(format!("{what}: {}", catalog_copy::pg_message(&e)))
}

fn sql_error(e: SqlError) -> Error {
    Error::InvalidArgument(e.to_string())
}
