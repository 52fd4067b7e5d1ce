//! What `rocklake import` and `rocklake export` share: reaching a PostgreSQL catalog, the
//! shape of one table on either side, and which DuckLake catalog versions this build moves.

use std::time::Instant;

use rocklake::Error;

use crate::progress::Progress;
use serde_json::json;
use tokio_postgres::{Client, NoTls};

/// The DuckLake catalog versions this build imports and exports: what the DuckDB release it
/// is tested with (1.5) writes. An older catalog is upgraded by attaching it once with that
/// DuckDB; a newer one may hold tables or columns this build does not know.
pub(crate) const DUCKLAKE_VERSIONS: &[&str] = &["1.0"];

/// One table of a catalog: its columns (name, PostgreSQL type as `format_type` writes it,
/// `NOT NULL`) and primary-key columns in key order.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    pub name: String,
    pub columns: Vec<(String, String, bool)>,
    pub primary_key: Vec<String>,
}

impl Table {
    /// `"schema"."name"`.
    pub fn qualified(&self, schema: &str) -> String {
        format!("{}.{}", quote(schema), quote(&self.name))
    }

    /// The columns' quoted names, comma separated, in declared order.
    pub fn column_list(&self) -> String {
        let names: Vec<String> = self.columns.iter().map(|(n, _, _)| quote(n)).collect();
        names.join(", ")
    }

    /// `COPY` of every row, in column order, to the client (PostgreSQL's text form).
    pub fn copy_out_sql(&self, schema: &str) -> String {
        format!(
            "COPY (SELECT {} FROM {}) TO STDOUT",
            self.column_list(),
            self.qualified(schema)
        )
    }

    /// `COPY` of rows in column order from the client (PostgreSQL's text form).
    pub fn copy_in_sql(&self, schema: &str) -> String {
        format!(
            "COPY {} ({}) FROM STDIN",
            self.qualified(schema),
            self.column_list()
        )
    }

    /// The `CREATE TABLE` that makes this table in `schema`.
    pub fn create_sql(&self, schema: &str) -> String {
        let mut parts: Vec<String> = self
            .columns
            .iter()
            .map(|(n, ty, not_null)| {
                format!(
                    "{} {ty}{}",
                    quote(n),
                    if *not_null { " NOT NULL" } else { "" }
                )
            })
            .collect();
        if !self.primary_key.is_empty() {
            let key: Vec<String> = self.primary_key.iter().map(|c| quote(c)).collect();
            parts.push(format!("PRIMARY KEY ({})", key.join(", ")));
        }
        format!(
            "CREATE TABLE {} ({})",
            self.qualified(schema),
            parts.join(", ")
        )
    }
}

/// An identifier quoted as PostgreSQL quotes it.
pub(crate) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A PostgreSQL connection string as DuckLake's ATTACH takes it (`ducklake:postgres:...`,
/// `postgres:...`) or as libpq does (`host=... dbname=...`, `postgresql://...`).
pub(crate) fn pg_dsn(text: &str) -> &str {
    let s = text.strip_prefix("ducklake:").unwrap_or(text);
    match s.strip_prefix("postgres:") {
        Some(rest) if !rest.starts_with("//") => rest,
        _ => s,
    }
}

/// Connect to the PostgreSQL at `dsn` (no TLS); the connection runs on its own task.
pub(crate) async fn connect_pg(dsn: &str) -> Result<Client, Error> {
    let dsn = pg_dsn(dsn);
    let (client, conn) = tokio_postgres::connect(dsn, NoTls).await.map_err(|e| {
        Error::InvalidArgument(format!(
            "cannot connect to PostgreSQL at `{dsn}`: {}",
            pg_message(&e)
        ))
    })?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::warn!(error = %e, "PostgreSQL connection ended");
        }
    });
    Ok(client)
}

/// A PostgreSQL error's own message (with its SQLSTATE) rather than tokio-postgres' "db error".
pub(crate) fn pg_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

/// The base tables of `schema` in the order they were created, with their columns and
/// primary keys. Refused when the schema holds no DuckLake catalog.
pub(crate) async fn pg_tables(client: &Client, schema: &str) -> Result<Vec<Table>, Error> {
    let rows = client
        .query(
            "SELECT c.relname::text, a.attname::text, format_type(a.atttypid, a.atttypmod), \
                    a.attnotnull, array_position(i.indkey::int2[], a.attnum) \
             FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
             LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary \
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') \
             ORDER BY c.oid, a.attnum",
            &[&schema],
        )
        .await
        .map_err(|e| {
            Error::InvalidArgument(format!(
                "cannot list the tables of schema {schema}: {}",
                pg_message(&e)
            ))
        })?;
    let mut tables: Vec<Table> = Vec::new();
    let mut keys: Vec<Vec<(i32, String)>> = Vec::new();
    for r in rows {
        let (table, column): (String, String) = (r.get(0), r.get(1));
        if tables.last().is_none_or(|t| t.name != table) {
            tables.push(Table {
                name: table,
                columns: Vec::new(),
                primary_key: Vec::new(),
            });
            keys.push(Vec::new());
        }
        let t = tables.last_mut().expect("pushed above");
        if let Some(pos) = r.get::<_, Option<i32>>(4) {
            keys.last_mut()
                .expect("pushed above")
                .push((pos, column.clone()));
        }
        t.columns.push((column, r.get(2), r.get(3)));
    }
    for (t, mut k) in tables.iter_mut().zip(keys) {
        k.sort();
        t.primary_key = k.into_iter().map(|(_, c)| c).collect();
    }
    if !tables.iter().any(|t| t.name == "ducklake_metadata") {
        return Err(Error::InvalidArgument(format!(
            "schema {schema} of the source holds no DuckLake catalog (no ducklake_metadata \
             table among its {} tables); name the catalog's schema with --schema",
            tables.len()
        )));
    }
    Ok(tables)
}

/// The catalog's DuckLake version (`ducklake_metadata`'s global `version`).
pub(crate) async fn pg_version(client: &Client, schema: &str) -> Result<String, Error> {
    let sql = format!(
        "SELECT value FROM {}.ducklake_metadata WHERE key = 'version' AND scope IS NULL",
        quote(schema)
    );
    let rows = client.query(&sql, &[]).await.map_err(|e| {
        Error::InvalidArgument(format!(
            "cannot read the catalog's version: {}",
            pg_message(&e)
        ))
    })?;
    match rows.as_slice() {
        [r] => Ok(r.get::<_, String>(0)),
        _ => Err(Error::InvalidArgument(format!(
            "{schema}.ducklake_metadata has {} global `version` rows; a DuckLake catalog has one",
            rows.len()
        ))),
    }
}

/// Refuse a catalog version this build does not move; `place` names where the catalog is
/// (`schema public`, a file).
pub(crate) fn check_version(version: &str, place: &str) -> Result<(), Error> {
    if DUCKLAKE_VERSIONS.contains(&version) {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "the DuckLake catalog in {place} is version {version}; this build moves version \
         {} (an older catalog is upgraded by attaching it once with DuckDB 1.5; a newer one \
         needs a newer RockLake)",
        DUCKLAKE_VERSIONS.join(", ")
    )))
}

/// One table done: the bar moves on and says what the table took.
pub(crate) fn progress(p: &Progress, table: &str, rows: u64, since: Instant) {
    p.step();
    p.say(format!(
        "{table}: {rows} rows in {:.1} s",
        since.elapsed().as_secs_f64()
    ));
}

/// Print what was moved: rows per table as JSON, or the line `text(tables, rows, seconds,
/// rows per second)` makes.
pub(crate) fn report(
    rows: &[(String, u64)],
    started: Instant,
    json: bool,
    text: impl FnOnce(usize, u64, f64, f64) -> String,
) {
    let secs = started.elapsed().as_secs_f64();
    let total: u64 = rows.iter().map(|(_, n)| n).sum();
    let rate = total as f64 / secs.max(1e-9);
    if json {
        let per_table: Vec<_> = rows
            .iter()
            .map(|(t, n)| json!({"table": t, "rows": n}))
            .collect();
        println!(
            "{}",
            json!({
                "tables": rows.len(),
                "rows": total,
                "seconds": secs,
                "rows_per_second": rate,
                "per_table": per_table,
            })
        );
    } else {
        println!("{}", text(rows.len(), total, secs, rate));
    }
}
