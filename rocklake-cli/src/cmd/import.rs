//! `rocklake import SOURCE URL`: bring a DuckLake catalog kept in PostgreSQL or in a SQLite
//! file into a RockLake store.
//!
//! Every table of the catalog's schema (DuckLake's own, its inlined-data tables and whatever
//! else DuckDB's postgres extension created there) is created and filled through RockLake's
//! SQL layer, exactly as DuckDB's own statements would have put them: the tag layout places
//! the keys, DuckDB's ids stay the named keys they are, and the id spaces' marks follow. The
//! source is read in one `REPEATABLE READ` transaction (one SQLite transaction), so a catalog
//! that is written while the import runs is copied as of one snapshot of it. A SQLite
//! catalog's columns are mapped to the PostgreSQL layout first (`sqlite_catalog`).
//!
//! The rows land in transactions of a few MiB each (one transaction of a large catalog's
//! millions of rows would hold them all in memory twice over, and sled takes many GiB to apply
//! such a batch). What makes the store a DuckLake catalog is `ducklake_metadata`: it is created
//! and filled last, in one transaction of its own, so until then DuckDB sees no catalog there.
//! A failure drops every table the import created, leaving the store without a catalog; a
//! store an interrupted import left behind (tables, no `ducklake_metadata`) is refused by the
//! next import, which says so.

use std::collections::HashMap;
use std::time::Instant;

use futures::{pin_mut, StreamExt};
use rocklake::{Error, Keyspace};
use rocklake_sql::{Database, Output, Session, SqlError};
use tokio_postgres::Client;

use crate::cmd::catalog_copy::{self, Table};
use crate::cmd::sqlite_catalog::{self, Kind, SqliteSource};
use crate::progress::Progress;
use crate::CliResult;

/// How many bytes of the source's COPY text are decoded and loaded at a time.
const CHUNK: usize = 4 << 20;

/// Where the rows come from: a PostgreSQL read, or a SQLite file and each table's column
/// kinds.
enum Source {
    Pg(Client),
    Sqlite(SqliteSource, HashMap<String, Vec<Kind>>),
}

pub(crate) async fn run(source: String, url: String, schema: String, json: bool) -> CliResult {
    let started = Instant::now();
    let (source, tables) = match sqlite_catalog::sqlite_path(&source) {
        Some(path) => {
            let src = SqliteSource::open(&path)?;
            let tables = src.tables()?;
            catalog_copy::check_version(&src.version()?, &path.display().to_string())?;
            let kinds = tables
                .iter()
                .map(|(t, k)| (t.name.clone(), k.clone()))
                .collect();
            let tables = tables.into_iter().map(|(t, _)| t).collect::<Vec<_>>();
            (Source::Sqlite(src, kinds), tables)
        }
        None => {
            let client = catalog_copy::connect_pg(&source).await?;
            // One snapshot of the source for every table; the session's text output fixed to
            // what RockLake's COPY input reads back exactly.
            client
                .batch_execute(
                    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL TimeZone = 'UTC'; \
                     SET LOCAL DateStyle = 'ISO, MDY'; SET LOCAL IntervalStyle = 'postgres'; \
                     SET LOCAL extra_float_digits = 1; SET LOCAL bytea_output = 'hex'",
                )
                .await
                .map_err(|e| pg_error("could not begin a read of the source", e))?;
            let tables = catalog_copy::pg_tables(&client, &schema).await?;
            catalog_copy::check_version(
                &catalog_copy::pg_version(&client, &schema).await?,
                &format!("schema {schema}"),
            )?;
            (Source::Pg(client), tables)
        }
    };

    let ks = Keyspace::open(crate::open_writer(&url).await?).await?;
    let db = Database::open(ks).await.map_err(sql_error)?;
    let catalog = db.catalog();
    let held = catalog.tables.len();
    if held > 0 {
        db.close().await.map_err(sql_error)?;
        let unfinished = !catalog.tables.keys().any(|(_, t)| t == "ducklake_metadata");
        return Err(Error::InvalidArgument(if unfinished {
            format!(
                "{url} holds {held} tables but no ducklake_metadata: an import into it did not \
                 finish; remove the store and import again"
            )
        } else {
            format!(
                "{url} already holds a catalog ({held} tables); import needs a store without one"
            )
        }));
    }
    let mut session = Session::new(db.clone());
    let mut created = Vec::new();
    let loaded = load(&source, &mut session, &schema, &tables, &mut created, json).await;
    // Whatever happened, the source's read ends.
    if let Source::Pg(client) = &source {
        let _ = client.batch_execute("ROLLBACK").await;
    }
    drop(source);
    let outcome = match loaded {
        Ok(rows) => Ok(rows),
        Err(e) => Err(match undo(&mut session, &schema, &created).await {
            Ok(()) => format!(
                "import into {url} failed, and what it had written was removed: {}",
                shown(&e)
            ),
            Err(u) => format!(
                "import into {url} failed: {}; removing what it had written failed too ({}): \
                 remove the store before importing again",
                shown(&e),
                shown(&u)
            ),
        }),
    };
    drop(session);
    db.close().await.map_err(sql_error)?;
    let rows = outcome.map_err(Error::InvalidArgument)?;
    catalog_copy::report(&rows, started, json, |tables, total, secs, rate| {
        format!(
            "imported {tables} tables, {total} rows into {url} in {secs:.1} s ({rate:.0} rows/s); \
             `rocklake verify {url}` checks the store"
        )
    });
    Ok(std::process::ExitCode::SUCCESS)
}

/// Create every table (`ducklake_metadata` last) and fill it; the rows per table. `created`
/// gets each table whose creation committed.
async fn load(
    source: &Source,
    session: &mut Session,
    schema: &str,
    tables: &[Table],
    created: &mut Vec<String>,
    quiet: bool,
) -> Result<Vec<(String, u64)>, SqlError> {
    let (last, rest): (Vec<&Table>, Vec<&Table>) =
        tables.iter().partition(|t| t.name == "ducklake_metadata");
    // Every other table first, in one transaction.
    session.run("BEGIN").await?;
    if schema != "public" {
        session
            .run(&format!("CREATE SCHEMA {}", catalog_copy::quote(schema)))
            .await?;
    }
    for t in &rest {
        create(session, schema, t).await?;
    }
    session.run("COMMIT").await?;
    created.extend(rest.iter().map(|t| t.name.clone()));
    let p = Progress::steps("import", tables.len() as u64, quiet);
    let mut done = Vec::with_capacity(tables.len());
    for t in &rest {
        p.say(format!("{} ...", t.name));
        let t0 = Instant::now();
        let n = copy_table(source, session, schema, t).await?;
        catalog_copy::progress(&p, &t.name, n, t0);
        done.push((t.name.clone(), n));
    }
    // The table that makes it a catalog, whole, in one transaction.
    for t in last {
        p.say(format!("{} ...", t.name));
        let t0 = Instant::now();
        session.run("BEGIN").await?;
        create(session, schema, t).await?;
        let n = copy_table(source, session, schema, t).await?;
        session.run("COMMIT").await?;
        catalog_copy::progress(&p, &t.name, n, t0);
        done.push((t.name.clone(), n));
    }
    p.done();
    Ok(done)
}

async fn create(session: &mut Session, schema: &str, t: &Table) -> Result<(), SqlError> {
    session
        .run(&t.create_sql(schema))
        .await
        .map(|_| ())
        .map_err(|e| SqlError::new(e.code, format!("creating table {}: {}", t.name, e.message)))
}

/// After a failure: end an open transaction and drop every table the import created (each
/// in its own transaction), and its schema.
async fn undo(session: &mut Session, schema: &str, created: &[String]) -> Result<(), SqlError> {
    session.run("ROLLBACK").await?;
    for name in created.iter().rev() {
        session
            .run(&format!(
                "DROP TABLE {}.{}",
                catalog_copy::quote(schema),
                catalog_copy::quote(name)
            ))
            .await?;
    }
    if schema != "public" && !created.is_empty() {
        session
            .run(&format!("DROP SCHEMA {}", catalog_copy::quote(schema)))
            .await?;
    }
    Ok(())
}

fn shown(e: &SqlError) -> String {
    match &e.detail {
        Some(d) => format!("{} ({d})", e.message),
        None => e.message.clone(),
    }
}

/// Copy one table's rows from the source into RockLake's `COPY ... FROM STDIN`, a few MiB
/// of COPY text at a time; the rows copied.
async fn copy_table(
    source: &Source,
    session: &mut Session,
    schema: &str,
    t: &Table,
) -> Result<u64, SqlError> {
    match source {
        Source::Pg(client) => copy_pg_table(client, session, schema, t).await,
        Source::Sqlite(src, kinds) => {
            let kinds = &kinds[&t.name];
            let read = |e: String| SqlError::new("08006", e);
            let mut stmt = src.select(t).map_err(read)?;
            let mut rows = stmt
                .query([])
                .map_err(|e| read(format!("reading {} from the source: {e}", t.name)))?;
            let mut buf = String::with_capacity(CHUNK + (64 << 10));
            let mut n = 0u64;
            while let Some(row) = rows
                .next()
                .map_err(|e| read(format!("reading {} from the source: {e}", t.name)))?
            {
                n += 1;
                sqlite_catalog::push_row(&mut buf, row, t, kinds, n)
                    .map_err(|e| SqlError::new("22P02", e))?;
                if buf.len() >= CHUNK {
                    load_lines(session, schema, t, buf.as_bytes()).await?;
                    buf.clear();
                }
            }
            if !buf.is_empty() {
                load_lines(session, schema, t, buf.as_bytes()).await?;
            }
            Ok(n)
        }
    }
}

/// Stream one table's rows from PostgreSQL's `COPY ... TO STDOUT` into RockLake's `COPY ...
/// FROM STDIN`, a few MiB at a time; the rows copied.
async fn copy_pg_table(
    client: &Client,
    session: &mut Session,
    schema: &str,
    t: &Table,
) -> Result<u64, SqlError> {
    let stream = client
        .copy_out(&t.copy_out_sql(schema))
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
    let sql = t.copy_in_sql(schema);
    let columns = match session.run(&sql).await? {
        Output::CopyIn { columns, .. } => columns,
        other => {
            return Err(SqlError::new(
                "XX000",
                format!("COPY FROM STDIN answered {:?}", other.tag()),
            ));
        }
    };
    let rows = match rocklake_server::copy_from::decode_copy_text(data, &columns, "\\N", '\t') {
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
