//! DuckLake catalogs kept in a SQLite file: how `rocklake import` reads one and `rocklake
//! export` writes one.
//!
//! DuckLake's SQLite catalog holds the tables its PostgreSQL catalog holds, in other column
//! types: DuckDB's sqlite extension declares integer and boolean columns `BIGINT`, blobs `BLOB`
//! and everything else `VARCHAR`, and DuckLake's SQLite metadata manager keeps floating-point
//! values of inlined data as text (SQLite would turn a NaN into NULL). RockLake stores the
//! PostgreSQL layout, the one DuckDB's postgres extension creates through `rocklake serve`. So
//! every column is mapped: DuckLake's own tables to the types their PostgreSQL twins have, and
//! each inlined-data table's columns from the DuckLake type of the column it holds
//! (`ducklake_column`), as DuckLake's PostgreSQL metadata manager types them (text, JSON and
//! blobs as `bytea`, unsigned and huge integers, dates, timestamps and nested values as text).
//! The values travel in PostgreSQL's COPY text form; only booleans (0/1 in SQLite), `bytea`
//! (hex) and floating-point text need a translation on the way.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use rocklake::Error;
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, OpenFlags};

use crate::cmd::catalog_copy::{quote, Table};

/// The SQLite file a catalog argument names: `ducklake:sqlite:PATH` or `sqlite:PATH` (as
/// DuckDB's ATTACH writes it), a path ending in `.sqlite`, `.sqlite3` or `.db`, or an existing
/// SQLite file. `None` for anything else (a PostgreSQL connection string).
pub(crate) fn sqlite_path(text: &str) -> Option<PathBuf> {
    let s = text.strip_prefix("ducklake:").unwrap_or(text);
    if let Some(p) = s.strip_prefix("sqlite:") {
        return Some(PathBuf::from(p));
    }
    if text.contains('=') || text.contains("://") {
        return None;
    }
    let p = Path::new(text);
    let named = matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("sqlite" | "sqlite3" | "db")
    );
    (named || is_sqlite_file(p)).then(|| p.to_path_buf())
}

fn is_sqlite_file(p: &Path) -> bool {
    let mut head = [0u8; 16];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head == b"SQLite format 3\0"
}

/// The PostgreSQL type (as `format_type` writes it) DuckLake's PostgreSQL metadata manager
/// gives an inlined column of DuckLake type `ducklake` (`int32`, `decimal(18,3)`, `list`, ...).
/// `None` for a type that DuckLake does not inline on PostgreSQL.
pub(crate) fn pg_type_of(ducklake: &str) -> Option<String> {
    let t = ducklake.trim().to_ascii_lowercase();
    if let Some(args) = t.strip_prefix("decimal") {
        return Some(format!("numeric{}", args.replace(' ', "")));
    }
    let ty = match t.as_str() {
        "int8" | "int16" => "smallint",
        "int32" | "uint8" | "uint16" => "integer",
        "int64" | "uint32" => "bigint",
        "float32" => "real",
        "float64" => "double precision",
        "boolean" => "boolean",
        // PostgreSQL's text cannot hold a NUL byte, so DuckLake keeps strings as bytes there.
        "varchar" | "json" | "blob" => "bytea",
        // Wider than PostgreSQL's types (or nested): their text form.
        "uint64" | "int128" | "uint128" | "date" | "timestamp" | "timestamp_us" | "timestamptz"
        | "timestamptz_ns" | "timestamp_s" | "timestamp_ms" | "timestamp_ns" | "list"
        | "struct" | "map" => "character varying",
        "time" => "time without time zone",
        "timetz" => "time with time zone",
        "interval" => "interval",
        "uuid" => "uuid",
        _ => return None,
    };
    Some(ty.to_string())
}

/// The SQLite type DuckLake's SQLite metadata manager (through DuckDB's sqlite extension)
/// declares for an inlined column of DuckLake type `ducklake`.
fn sqlite_type_of(ducklake: &str) -> &'static str {
    match ducklake.trim().to_ascii_lowercase().as_str() {
        "boolean" | "int8" | "int16" | "int32" | "int64" | "uint8" | "uint16" | "uint32" => {
            "BIGINT"
        }
        "blob" => "BLOB",
        _ => "VARCHAR",
    }
}

/// Columns of DuckLake's own tables whose PostgreSQL type is neither `bigint` nor `character
/// varying` (SQLite declares them `BIGINT` or `VARCHAR`), for catalog version 1.0.
fn ducklake_column_pg_type(column: &str) -> Option<&'static str> {
    Some(match column {
        "nulls_allowed" | "path_is_relative" | "contains_nan" | "contains_null"
        | "is_partition" => "boolean",
        "schema_uuid" | "table_uuid" | "view_uuid" => "uuid",
        "snapshot_time" | "schedule_start" => "timestamp with time zone",
        _ => return None,
    })
}

const INLINED_PREFIX: &str = "ducklake_inlined_data_";
/// The three columns every inlined-data table begins with (catalog version 1.0).
const INLINED_SYSTEM_COLUMNS: [&str; 3] = ["row_id", "begin_snapshot", "end_snapshot"];

/// One top-level column of a DuckLake table over its lifetime (`ducklake_column`).
#[derive(Debug, Clone)]
pub(crate) struct ColumnRow {
    pub table_id: i64,
    pub name: String,
    pub ty: String,
    pub begin: i64,
    pub end: Option<i64>,
}

/// What it takes to know the DuckLake type of each column of an inlined-data table: the
/// table's id and schema version (`ducklake_inlined_data_tables`), the first snapshot of each
/// schema version (`ducklake_snapshot`) and the tables' columns (`ducklake_column`).
#[derive(Debug, Default)]
pub(crate) struct InlinedTypes {
    tables: HashMap<String, (i64, i64)>,
    version_start: HashMap<i64, i64>,
    columns: HashMap<i64, Vec<ColumnRow>>,
}

impl InlinedTypes {
    pub fn new(
        tables: impl IntoIterator<Item = (String, i64, i64)>,
        snapshots: impl IntoIterator<Item = (i64, i64)>,
        columns: impl IntoIterator<Item = ColumnRow>,
    ) -> Self {
        let mut me = InlinedTypes {
            tables: tables
                .into_iter()
                .map(|(name, id, version)| (name, (id, version)))
                .collect(),
            ..Default::default()
        };
        for (snapshot, version) in snapshots {
            let first = me.version_start.entry(version).or_insert(snapshot);
            *first = (*first).min(snapshot);
        }
        for c in columns {
            me.columns.entry(c.table_id).or_default().push(c);
        }
        me
    }

    /// The table id and schema version an inlined-data table holds rows of: its registration,
    /// or its name (`ducklake_inlined_data_<table>_<version>`); `None` for any other table.
    fn table_of(&self, table: &str) -> Option<(i64, i64)> {
        if let Some(t) = self.tables.get(table) {
            return Some(*t);
        }
        let rest = table.strip_prefix(INLINED_PREFIX)?;
        let (id, version) = rest.split_once('_')?;
        Some((id.parse().ok()?, version.parse().ok()?))
    }

    /// The DuckLake type of `column` of inlined-data table `table`: the column of that name
    /// alive at the first snapshot of the table's schema version (when the catalog still
    /// keeps one), else the one type every column of that name ever had.
    fn column_type(&self, table: &str, column: &str) -> Result<String, String> {
        let (id, version) = self
            .table_of(table)
            .ok_or_else(|| format!("{table} is not an inlined-data table"))?;
        let named: Vec<&ColumnRow> = self
            .columns
            .get(&id)
            .into_iter()
            .flatten()
            .filter(|c| c.name == column)
            .collect();
        if let Some(at) = self.version_start.get(&version) {
            if let Some(c) = named
                .iter()
                .find(|c| c.begin <= *at && c.end.is_none_or(|e| e > *at))
            {
                return Ok(c.ty.clone());
            }
        }
        match named.as_slice() {
            [] => Err(format!(
                "column {column} of {table} is not a column of DuckLake table {id} \
                 (ducklake_column)"
            )),
            [first, rest @ ..] if rest.iter().all(|c| c.ty == first.ty) => Ok(first.ty.clone()),
            _ => Err(format!(
                "column {column} of {table} had several types in table {id}'s history and the \
                 catalog keeps no snapshot of schema version {version} to choose one"
            )),
        }
    }

    /// Whether `table` holds inlined rows whose column types come from `ducklake_column`:
    /// `ducklake_inlined_data_<table id>_<schema version>`.
    pub fn is_inlined(table: &str) -> bool {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        table
            .strip_prefix(INLINED_PREFIX)
            .and_then(|rest| rest.split_once('_'))
            .is_some_and(|(id, version)| digits(id) && digits(version))
    }
}

/// How one column's values change between SQLite's storage and PostgreSQL's COPY text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `smallint`, `integer`, `bigint`: SQLite integers.
    Int,
    /// `boolean`: 0 and 1 in SQLite.
    Bool,
    /// `bytea` holding a blob: a SQLite BLOB.
    Blob,
    /// `bytea` holding a DuckLake string or JSON: SQLite text.
    TextBytes,
    /// `real`, `double precision`, `interval`: the same value on both sides, written the way
    /// DuckDB writes it in a SQLite catalog (`nan`, `1.0`, `1 month` where PostgreSQL writes
    /// `NaN`, `1`, `1 mon`).
    Float32,
    Float64,
    Interval,
    /// Anything else: the same text on both sides.
    Text,
}

impl Kind {
    /// The kind of a column of PostgreSQL type `pg` (and, for `bytea`, DuckLake type
    /// `ducklake` when it is an inlined column).
    fn of(pg: &str, ducklake: Option<&str>) -> Kind {
        match pg {
            "smallint" | "integer" | "bigint" => Kind::Int,
            "boolean" => Kind::Bool,
            "real" => Kind::Float32,
            "double precision" => Kind::Float64,
            "interval" => Kind::Interval,
            "bytea" => match ducklake.map(|d| d.trim().to_ascii_lowercase()) {
                Some(d) if d == "varchar" || d == "json" => Kind::TextBytes,
                _ => Kind::Blob,
            },
            _ => Kind::Text,
        }
    }

    fn sqlite_decl(self, ducklake: Option<&str>) -> &'static str {
        match (self, ducklake) {
            (_, Some(d)) => sqlite_type_of(d),
            (Kind::Int | Kind::Bool, None) => "BIGINT",
            (Kind::Blob, None) => "BLOB",
            (_, None) => "VARCHAR",
        }
    }
}

fn sqlite_error(what: &str, path: &Path, e: rusqlite::Error) -> Error {
    Error::InvalidArgument(format!("{what} {}: {e}", path.display()))
}

/// A DuckLake catalog in a SQLite file, read in one transaction (one snapshot of it).
pub(crate) struct SqliteSource {
    conn: Connection,
    path: PathBuf,
}

impl SqliteSource {
    /// Open `path` read-only and begin the read; refused when it is not there.
    pub fn open(path: &Path) -> Result<Self, Error> {
        if !path.is_file() {
            return Err(Error::InvalidArgument(format!(
                "no SQLite file at {}: name an existing DuckLake SQLite catalog",
                path.display()
            )));
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| sqlite_error("cannot open", path, e))?;
        conn.execute_batch("BEGIN")
            .map_err(|e| sqlite_error("cannot begin a read of", path, e))?;
        Ok(SqliteSource {
            conn,
            path: path.to_path_buf(),
        })
    }

    fn err(&self, what: &str, e: rusqlite::Error) -> Error {
        sqlite_error(what, &self.path, e)
    }

    /// Every table of the file in the PostgreSQL layout RockLake stores, in creation order,
    /// and each column's kind. Refused when the file holds no DuckLake catalog, or a column
    /// this build cannot map.
    pub fn tables(&self) -> Result<Vec<(Table, Vec<Kind>)>, Error> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'table' \
                 AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid",
            )
            .map_err(|e| self.err("cannot list the tables of", e))?;
        let names: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .and_then(|rows| rows.collect())
            .map_err(|e| self.err("cannot list the tables of", e))?;
        if !names.iter().any(|n| n == "ducklake_metadata") {
            return Err(Error::InvalidArgument(format!(
                "{} holds no DuckLake catalog (no ducklake_metadata table among its {} tables)",
                self.path.display(),
                names.len()
            )));
        }
        let inlined = if names.iter().any(|n| InlinedTypes::is_inlined(n)) {
            self.inlined_types()?
        } else {
            InlinedTypes::default()
        };
        names
            .iter()
            .map(|name| self.table(name, &inlined))
            .collect()
    }

    /// One table's columns (`PRAGMA table_info`) mapped to PostgreSQL's types.
    fn table(&self, name: &str, inlined: &InlinedTypes) -> Result<(Table, Vec<Kind>), Error> {
        let mut stmt = self
            .conn
            .prepare(&format!("PRAGMA table_info({})", quote(name)))
            .map_err(|e| self.err("cannot read the columns of a table of", e))?;
        // (name, declared type, not null, position in the primary key)
        let cols: Vec<(String, String, bool, i64)> = stmt
            .query_map([], |r| Ok((r.get(1)?, r.get(2)?, r.get(3)?, r.get(5)?)))
            .and_then(|rows| rows.collect())
            .map_err(|e| self.err("cannot read the columns of a table of", e))?;
        let mut columns = Vec::with_capacity(cols.len());
        let mut kinds = Vec::with_capacity(cols.len());
        let mut key: Vec<(i64, String)> = Vec::new();
        for (i, (col, declared, not_null, pk)) in cols.into_iter().enumerate() {
            let unmapped = |why: String| {
                Error::InvalidArgument(format!(
                    "table {name}, column {col} (SQLite type {declared:?}): {why}"
                ))
            };
            let (pg, ducklake) =
                if InlinedTypes::is_inlined(name) && !(i < 3 && col == INLINED_SYSTEM_COLUMNS[i]) {
                    let d = inlined.column_type(name, &col).map_err(unmapped)?;
                    let pg = pg_type_of(&d).ok_or_else(|| {
                        unmapped(format!(
                            "DuckLake type {d} has no PostgreSQL form this build knows"
                        ))
                    })?;
                    (pg, Some(d))
                } else {
                    (
                        pg_type_of_declared(name, &col, &declared).map_err(unmapped)?,
                        None,
                    )
                };
            kinds.push(Kind::of(&pg, ducklake.as_deref()));
            if pk > 0 {
                key.push((pk, col.clone()));
            }
            columns.push((col, pg, not_null || pk > 0));
        }
        key.sort();
        Ok((
            Table {
                name: name.to_string(),
                columns,
                primary_key: key.into_iter().map(|(_, c)| c).collect(),
            },
            kinds,
        ))
    }

    fn inlined_types(&self) -> Result<InlinedTypes, Error> {
        let q = |sql: &str| -> Result<Vec<Vec<Option<String>>>, Error> {
            let mut stmt = self
                .conn
                .prepare(sql)
                .map_err(|e| self.err("cannot read the column types of", e))?;
            let n = stmt.column_count();
            stmt.query_map([], |r| {
                (0..n)
                    .map(|i| r.get::<_, Option<SqlValue>>(i).map(|v| v.map(value_text)))
                    .collect()
            })
            .and_then(|rows| rows.collect())
            .map_err(|e| self.err("cannot read the column types of", e))
        };
        let tables =
            q("SELECT table_name, table_id, schema_version FROM ducklake_inlined_data_tables")?;
        let snapshots = q("SELECT snapshot_id, schema_version FROM ducklake_snapshot")?;
        let columns = q(
            "SELECT table_id, column_name, column_type, begin_snapshot, end_snapshot \
             FROM ducklake_column WHERE parent_column IS NULL",
        )?;
        inlined_types_from_text(tables, snapshots, columns).map_err(Error::InvalidArgument)
    }

    /// The catalog's DuckLake version (`ducklake_metadata`'s global `version`).
    pub fn version(&self) -> Result<String, Error> {
        let mut stmt = self
            .conn
            .prepare("SELECT value FROM ducklake_metadata WHERE key = 'version' AND scope IS NULL")
            .map_err(|e| self.err("cannot read the catalog's version in", e))?;
        let values: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .and_then(|rows| rows.collect())
            .map_err(|e| self.err("cannot read the catalog's version in", e))?;
        match values.as_slice() {
            [v] => Ok(v.clone()),
            _ => Err(Error::InvalidArgument(format!(
                "ducklake_metadata of {} has {} global `version` rows; a DuckLake catalog has one",
                self.path.display(),
                values.len()
            ))),
        }
    }

    /// The query that reads every row of `t`, columns in `t`'s order.
    pub fn select(&self, t: &Table) -> Result<rusqlite::Statement<'_>, String> {
        self.conn
            .prepare(&format!(
                "SELECT {} FROM {}",
                t.column_list(),
                quote(&t.name)
            ))
            .map_err(|e| format!("reading {} from the source: {e}", t.name))
    }
}

/// Append row number `n` of `t` (read by `SqliteSource::select`) as one line of
/// PostgreSQL's COPY text.
pub(crate) fn push_row(
    out: &mut String,
    row: &rusqlite::Row<'_>,
    t: &Table,
    kinds: &[Kind],
    n: u64,
) -> Result<(), String> {
    for (i, kind) in kinds.iter().enumerate() {
        if i > 0 {
            out.push('\t');
        }
        let v = row
            .get_ref(i)
            .map_err(|e| format!("reading {} from the source: {e}", t.name))?;
        push_copy_text(out, v, *kind).map_err(|why| {
            format!(
                "table {}, column {}, row {n}: {why}",
                t.name, t.columns[i].0
            )
        })?;
    }
    out.push('\n');
    Ok(())
}

/// The PostgreSQL type of a column of a SQLite catalog that is not an inlined-data column:
/// DuckLake's own columns as version 1.0 types them on PostgreSQL, any other by its declared
/// type.
fn pg_type_of_declared(table: &str, column: &str, declared: &str) -> Result<String, String> {
    if table.starts_with("ducklake_") {
        if let Some(t) = ducklake_column_pg_type(column) {
            return Ok(t.to_string());
        }
    }
    let upper = declared.trim().to_ascii_uppercase();
    let (base, args) = match upper.split_once('(') {
        Some((b, a)) => (b.trim(), format!("({}", a.replace(' ', ""))),
        None => (upper.as_str(), String::new()),
    };
    Ok(match base {
        "BIGINT" | "INTEGER" | "INT" | "INT8" | "INT4" | "INT2" | "SMALLINT" | "TINYINT" => {
            "bigint".into()
        }
        "VARCHAR" | "TEXT" | "" => "character varying".into(),
        "BLOB" => "bytea".into(),
        "DOUBLE" | "REAL" | "FLOAT" | "FLOAT8" => "double precision".into(),
        "BOOLEAN" | "BOOL" => "boolean".into(),
        "DATE" => "date".into(),
        "TIMESTAMP" => "timestamp without time zone".into(),
        "TIMESTAMPTZ" | "TIMESTAMP WITH TIME ZONE" => "timestamp with time zone".into(),
        "UUID" => "uuid".into(),
        "DECIMAL" | "NUMERIC" => format!("numeric{args}"),
        _ => return Err("import does not know this SQLite type".into()),
    })
}

/// A SQLite value as text (for the small catalog tables read to type inlined columns).
fn value_text(v: SqlValue) -> String {
    match v {
        SqlValue::Null => String::new(),
        SqlValue::Integer(i) => i.to_string(),
        SqlValue::Real(f) => f.to_string(),
        SqlValue::Text(s) => s,
        SqlValue::Blob(b) => String::from_utf8_lossy(&b).into_owned(),
    }
}

/// `InlinedTypes` from the text of `ducklake_inlined_data_tables` (name, table id, schema
/// version), `ducklake_snapshot` (id, schema version) and `ducklake_column` (table id, name,
/// type, begin, end) rows, however the catalog gave them.
pub(crate) fn inlined_types_from_text(
    tables: Vec<Vec<Option<String>>>,
    snapshots: Vec<Vec<Option<String>>>,
    columns: Vec<Vec<Option<String>>>,
) -> Result<InlinedTypes, String> {
    fn int(v: &Option<String>, what: &str) -> Result<i64, String> {
        v.as_deref()
            .unwrap_or_default()
            .parse()
            .map_err(|_| format!("{what} is {v:?}, not an integer"))
    }
    let tables = tables
        .iter()
        .map(|r| {
            Ok((
                r[0].clone().unwrap_or_default(),
                int(&r[1], "ducklake_inlined_data_tables.table_id")?,
                int(&r[2], "ducklake_inlined_data_tables.schema_version")?,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let snapshots = snapshots
        .iter()
        .map(|r| {
            Ok((
                int(&r[0], "ducklake_snapshot.snapshot_id")?,
                int(&r[1], "ducklake_snapshot.schema_version")?,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let columns = columns
        .iter()
        .map(|r| {
            Ok(ColumnRow {
                table_id: int(&r[0], "ducklake_column.table_id")?,
                name: r[1].clone().unwrap_or_default(),
                ty: r[2].clone().unwrap_or_default(),
                begin: int(&r[3], "ducklake_column.begin_snapshot")?,
                end: match &r[4] {
                    None => None,
                    v => Some(int(v, "ducklake_column.end_snapshot")?),
                },
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(InlinedTypes::new(tables, snapshots, columns))
}

/// Append one SQLite value in PostgreSQL's COPY text form for a column of `kind`.
fn push_copy_text(out: &mut String, v: ValueRef<'_>, kind: Kind) -> Result<(), String> {
    let text = match (v, kind) {
        (ValueRef::Null, _) => {
            out.push_str("\\N");
            return Ok(());
        }
        (ValueRef::Integer(i), Kind::Bool) => (if i == 0 { "f" } else { "t" }).to_string(),
        (ValueRef::Integer(i), _) => i.to_string(),
        (ValueRef::Real(f), Kind::Int | Kind::Bool | Kind::Blob | Kind::TextBytes) => {
            return Err(format!(
                "a floating-point value ({f}) where {kind:?} was expected"
            ));
        }
        (ValueRef::Real(f), _) => float_text(f),
        (ValueRef::Text(b) | ValueRef::Blob(b), Kind::Blob | Kind::TextBytes) => {
            let mut s = String::with_capacity(2 + 2 * b.len());
            s.push_str("\\x");
            for byte in b {
                s.push_str(&format!("{byte:02x}"));
            }
            s
        }
        (ValueRef::Text(b) | ValueRef::Blob(b), _) => std::str::from_utf8(b)
            .map_err(|_| "text that is not UTF-8".to_string())?
            .to_string(),
    };
    out.push_str(&rocklake_server::wire::copy_text_escape(&text, '\t'));
    Ok(())
}

/// A double in a text form PostgreSQL reads back exactly (Rust's shortest round-trip digits).
fn float_text(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        (if f > 0.0 { "Infinity" } else { "-Infinity" }).into()
    } else {
        format!("{f}")
    }
}

/// A new DuckLake catalog being written into a SQLite file, in one transaction: a failure
/// leaves the file as it was (and removes it when the export created it).
pub(crate) struct SqliteTarget {
    conn: Connection,
    path: PathBuf,
    created: bool,
}

impl SqliteTarget {
    /// Open (or create) `path` and begin; refused when it already holds any of `tables`.
    pub fn begin(path: &Path, tables: &[&str]) -> Result<Self, Error> {
        let created = !path.exists();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                return Err(Error::InvalidArgument(format!(
                    "cannot create {}: folder {} does not exist",
                    path.display(),
                    dir.display()
                )));
            }
        }
        let conn = Connection::open(path).map_err(|e| sqlite_error("cannot open", path, e))?;
        let target = SqliteTarget {
            conn,
            path: path.to_path_buf(),
            created,
        };
        let held = match target.held(tables) {
            Ok(h) => h,
            Err(e) => {
                target.abandon();
                return Err(e);
            }
        };
        if !held.is_empty() {
            let path = target.path.display().to_string();
            target.abandon();
            return Err(Error::InvalidArgument(format!(
                "{path} already holds {} of the catalog's tables ({}); export writes only into \
                 a SQLite file without them",
                held.len(),
                held.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
                    + if held.len() > 3 { ", ..." } else { "" }
            )));
        }
        if let Err(e) = target.conn.execute_batch("BEGIN IMMEDIATE") {
            let e = sqlite_error("cannot begin writing", &target.path, e);
            target.abandon();
            return Err(e);
        }
        Ok(target)
    }

    fn held(&self, tables: &[&str]) -> Result<Vec<String>, Error> {
        let mut stmt = self
            .conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .map_err(|e| sqlite_error("cannot list the tables of", &self.path, e))?;
        let names: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .and_then(|rows| rows.collect())
            .map_err(|e| sqlite_error("cannot list the tables of", &self.path, e))?;
        Ok(names
            .into_iter()
            .filter(|n| tables.contains(&n.as_str()))
            .collect())
    }

    /// Create `t` with SQLite's types for DuckLake's SQLite catalog; each column's kind.
    /// `inlined` types the columns of inlined-data tables.
    pub fn create(&self, t: &Table, inlined: &InlinedTypes) -> Result<Vec<Kind>, String> {
        let mut parts = Vec::with_capacity(t.columns.len() + 1);
        let mut kinds = Vec::with_capacity(t.columns.len());
        for (i, (name, pg, not_null)) in t.columns.iter().enumerate() {
            let ducklake = if InlinedTypes::is_inlined(&t.name)
                && !(i < 3 && name == INLINED_SYSTEM_COLUMNS[i])
            {
                Some(
                    inlined
                        .column_type(&t.name, name)
                        .map_err(|e| format!("creating {}: {e}", t.name))?,
                )
            } else {
                None
            };
            let kind = Kind::of(pg, ducklake.as_deref());
            parts.push(format!(
                "{} {}{}",
                quote(name),
                kind.sqlite_decl(ducklake.as_deref()),
                if *not_null { " NOT NULL" } else { "" }
            ));
            kinds.push(kind);
        }
        if !t.primary_key.is_empty() {
            let key: Vec<String> = t.primary_key.iter().map(|c| quote(c)).collect();
            parts.push(format!("PRIMARY KEY ({})", key.join(", ")));
        }
        self.conn
            .execute_batch(&format!(
                "CREATE TABLE {} ({})",
                quote(&t.name),
                parts.join(", ")
            ))
            .map_err(|e| format!("creating {}: {e}", t.name))?;
        Ok(kinds)
    }

    /// Insert rows given as PostgreSQL text values (`None`: NULL) into `t`.
    pub fn insert<'a>(
        &self,
        t: &Table,
        kinds: &[Kind],
        rows: impl Iterator<Item = Vec<Option<String>>> + 'a,
    ) -> Result<u64, String> {
        let marks = vec!["?"; t.columns.len()].join(", ");
        let mut stmt = self
            .conn
            .prepare_cached(&format!("INSERT INTO {} VALUES ({marks})", quote(&t.name)))
            .map_err(|e| format!("writing {}: {e}", t.name))?;
        let mut n = 0u64;
        for row in rows {
            n += 1;
            let values = row
                .into_iter()
                .zip(kinds)
                .enumerate()
                .map(|(i, (v, k))| {
                    sqlite_value(v, *k).map_err(|why| {
                        format!(
                            "table {}, column {}, row {n}: {why}",
                            t.name, t.columns[i].0
                        )
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            stmt.execute(rusqlite::params_from_iter(values))
                .map_err(|e| format!("writing {}: {e}", t.name))?;
        }
        Ok(n)
    }

    /// Commit everything written; on failure the file is left as it was.
    pub fn commit(self) -> Result<(), String> {
        match self.conn.execute_batch("COMMIT") {
            Ok(()) => Ok(()),
            Err(e) => {
                let msg = format!("the commit into {} failed: {e}", self.path.display());
                self.abandon();
                Err(msg)
            }
        }
    }

    /// Undo everything: roll back, and remove the file when this export created it.
    pub fn abandon(self) {
        let _ = self.conn.execute_batch("ROLLBACK");
        let (path, created) = (self.path.clone(), self.created);
        drop(self.conn);
        if created {
            let _ = std::fs::remove_file(&path);
            for suffix in ["-journal", "-wal", "-shm"] {
                let mut p = path.clone().into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// A PostgreSQL text value as SQLite stores it in a column of `kind`.
fn sqlite_value(v: Option<String>, kind: Kind) -> Result<SqlValue, String> {
    let Some(v) = v else {
        return Ok(SqlValue::Null);
    };
    Ok(match kind {
        Kind::Int => SqlValue::Integer(v.parse().map_err(|_| format!("{v:?} is not an integer"))?),
        Kind::Bool => SqlValue::Integer(match v.as_str() {
            "t" | "true" => 1,
            "f" | "false" => 0,
            _ => return Err(format!("{v:?} is not a boolean")),
        }),
        Kind::Blob => SqlValue::Blob(unhex(&v)?),
        Kind::TextBytes => SqlValue::Text(
            String::from_utf8(unhex(&v)?).map_err(|_| "a string that is not UTF-8".to_string())?,
        ),
        Kind::Float32 => SqlValue::Text(match v.parse::<f32>() {
            Ok(f) => duckdb_float_text(f64::from(f), format!("{f:e}")),
            Err(_) => v,
        }),
        Kind::Float64 => SqlValue::Text(match v.parse::<f64>() {
            Ok(f) => duckdb_float_text(f, format!("{f:e}")),
            Err(_) => v,
        }),
        Kind::Interval => SqlValue::Text(duckdb_interval_text(&v)),
        Kind::Text => SqlValue::Text(v),
    })
}

/// A float as DuckDB casts it to text: its shortest digits (`scientific`, Rust's `{:e}` of
/// the value at its own width), positional with at least one decimal for exponents -4..16,
/// else `d.ddde+XX`; `nan`, `inf`, `-inf`.
fn duckdb_float_text(v: f64, scientific: String) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return (if v > 0.0 { "inf" } else { "-inf" }).into();
    }
    let (mantissa, exp) = scientific
        .split_once('e')
        .expect("{:e} always writes an exponent");
    let exp: i32 = exp.parse().expect("{:e} writes a decimal exponent");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if !(-4..16).contains(&exp) {
        let e_sign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{mantissa}e{e_sign}{:02}", exp.abs());
    }
    let point = exp + 1; // digits before the decimal point
    if point <= 0 {
        format!("{sign}0.{}{digits}", "0".repeat((-point) as usize))
    } else if (point as usize) >= digits.len() {
        format!(
            "{sign}{digits}{}.0",
            "0".repeat(point as usize - digits.len())
        )
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{sign}{int}.{frac}")
    }
}

/// An interval as DuckDB writes it, from PostgreSQL's `postgres` style: `mon(s)` spelled
/// `month(s)`, a unit plural unless its count is ±1, and no `+` before a part.
fn duckdb_interval_text(pg: &str) -> String {
    let tokens: Vec<&str> = pg.split_whitespace().collect();
    let mut out: Vec<String> = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].trim_start_matches('+');
        let unit = tokens.get(i + 1).and_then(|u| {
            Some(match *u {
                "year" | "years" => "year",
                "mon" | "mons" => "month",
                "day" | "days" => "day",
                _ => return None,
            })
        });
        match unit {
            Some(unit) => {
                let one = t == "1" || t == "-1";
                out.push(format!("{t} {unit}{}", if one { "" } else { "s" }));
                i += 2;
            }
            None => {
                out.push(t.to_string());
                i += 1;
            }
        }
    }
    out.join(" ")
}

/// The bytes of a `bytea` in PostgreSQL's hex text form (`\x0a1b...`).
fn unhex(v: &str) -> Result<Vec<u8>, String> {
    let hex = v
        .strip_prefix("\\x")
        .ok_or_else(|| format!("{v:?} is not bytea's hex form"))?;
    if hex.len() % 2 != 0 {
        return Err(format!("{v:?} has an odd number of hex digits"));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| format!("{v:?} is not hex")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ducklake_types_map_as_its_postgres_manager_types_them() {
        for (d, pg) in [
            ("int8", "smallint"),
            ("uint16", "integer"),
            ("uint32", "bigint"),
            ("float64", "double precision"),
            ("varchar", "bytea"),
            ("json", "bytea"),
            ("uint64", "character varying"),
            ("timestamptz", "character varying"),
            ("decimal(18, 3)", "numeric(18,3)"),
            ("timetz", "time with time zone"),
        ] {
            assert_eq!(pg_type_of(d).as_deref(), Some(pg), "{d}");
        }
        assert_eq!(pg_type_of("variant"), None);
    }

    #[test]
    fn values_cross_between_the_two_text_forms() {
        let mut s = String::new();
        push_copy_text(&mut s, ValueRef::Text(b"a\tb\\"), Kind::TextBytes).unwrap();
        assert_eq!(s, "\\\\x6109625c");
        assert_eq!(
            sqlite_value(Some("\\x6109625c".into()), Kind::TextBytes).unwrap(),
            SqlValue::Text("a\tb\\".into())
        );
        let mut s = String::new();
        push_copy_text(&mut s, ValueRef::Integer(0), Kind::Bool).unwrap();
        push_copy_text(&mut s, ValueRef::Real(f64::NEG_INFINITY), Kind::Text).unwrap();
        push_copy_text(&mut s, ValueRef::Text(b"x\ny"), Kind::Text).unwrap();
        assert_eq!(s, "f-Infinityx\\ny");
        assert!(unhex("\\x0").is_err());
    }

    #[test]
    fn floats_and_intervals_are_written_as_duckdb_writes_them() {
        for (v, duck) in [
            (100.0, "100.0"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (0.0001, "0.0001"),
            (1e-5, "1e-05"),
            (-1.5e-7, "-1.5e-07"),
            (-0.0, "-0.0"),
            (0.1 + 0.2, "0.30000000000000004"),
            (5e-324, "5e-324"),
            (1.2345678901234568e17, "1.2345678901234568e+17"),
            (f64::NAN, "nan"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(duckdb_float_text(v, format!("{v:e}")), duck, "{v:e}");
        }
        let f = 1.1f32;
        assert_eq!(duckdb_float_text(f64::from(f), format!("{f:e}")), "1.1");
        for (pg, duck) in [
            ("-1 days +02:00:00", "-1 day 02:00:00"),
            ("1 mon", "1 month"),
            ("-1 years -2 mons", "-1 year -2 months"),
            ("3 days -04:00:00", "3 days -04:00:00"),
            ("-00:00:01.5", "-00:00:01.5"),
            ("2 years 1 mon 1 day", "2 years 1 month 1 day"),
            ("-1 mons +1 day", "-1 month 1 day"),
        ] {
            assert_eq!(duckdb_interval_text(pg), duck, "{pg}");
        }
    }

    #[test]
    fn an_inlined_column_takes_the_type_alive_at_its_schema_version() {
        let col = |name: &str, ty: &str, begin, end| ColumnRow {
            table_id: 7,
            name: name.into(),
            ty: ty.into(),
            begin,
            end,
        };
        let types = InlinedTypes::new(
            [("ducklake_inlined_data_7_2".to_string(), 7, 2)],
            [(1, 1), (4, 2), (5, 2), (9, 3)],
            [col("a", "int32", 1, Some(9)), col("a", "varchar", 9, None)],
        );
        assert_eq!(
            types.column_type("ducklake_inlined_data_7_2", "a").unwrap(),
            "int32"
        );
        assert_eq!(
            types.column_type("ducklake_inlined_data_7_3", "a").unwrap(),
            "varchar"
        );
        // No snapshot of schema version 8 is kept, and `a` had two types: refused.
        assert!(types.column_type("ducklake_inlined_data_7_8", "a").is_err());
    }
}
