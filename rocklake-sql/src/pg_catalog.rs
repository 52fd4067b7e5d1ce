//! `pg_catalog` and `information_schema` as a PostgreSQL client reads them, answered from
//! the catalog's own table definitions, and the server's version and settings.
//!
//! The catalog views hold the user's schemas and tables only (and `pg_catalog`'s and
//! `information_schema`'s namespaces), not PostgreSQL's own system tables: a client that
//! lists tables sees the tables it can read here.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Float32Array, Int16Array, Int16Builder, Int32Array, Int64Array,
    ListBuilder, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{MemTable, TableProvider};
use datafusion::error::Result as DfResult;

use crate::catalog::Catalog;
use crate::pg_types::{field, pg_type, sql_typmod, PG_TYPES};
use crate::relation::RelDef;
use crate::types::SqlType;

/// The oid of `pg_catalog`.
pub const PG_CATALOG_OID: i64 = 11;
/// The oid of `public` (as PostgreSQL numbers it).
pub const PUBLIC_OID: i64 = 2200;
/// The oid of `information_schema`.
pub const INFORMATION_SCHEMA_OID: i64 = 13_000;
use crate::pg_types::FIRST_USER_OID;

/// A schema's oid.
pub fn namespace_oid(name: &str, relation_id: u64) -> i64 {
    match name {
        "public" => PUBLIC_OID,
        "pg_catalog" => PG_CATALOG_OID,
        "information_schema" => INFORMATION_SCHEMA_OID,
        _ => FIRST_USER_OID + 2 * relation_id as i64,
    }
}

/// A table's oid (its primary-key index takes the next one).
pub fn table_oid(rel: &RelDef) -> i64 {
    rel.table_oid()
}

/// The tables of `pg_catalog` this server answers.
pub const PG_CATALOG_TABLES: &[&str] = &[
    "pg_namespace",
    "pg_class",
    "pg_attribute",
    "pg_type",
    "pg_description",
    "pg_constraint",
    "pg_enum",
    "pg_index",
    "pg_indexes",
    "pg_tables",
    "pg_settings",
    "pg_database",
];

/// The tables of `information_schema` this server answers.
pub const INFORMATION_SCHEMA_TABLES: &[&str] = &["schemata", "tables", "columns"];

fn s(v: Vec<String>) -> ArrayRef {
    Arc::new(StringArray::from(v))
}
fn i64s(v: Vec<i64>) -> ArrayRef {
    Arc::new(Int64Array::from(v))
}
fn i32s(v: Vec<i32>) -> ArrayRef {
    Arc::new(Int32Array::from(v))
}
fn bools(v: Vec<bool>) -> ArrayRef {
    Arc::new(BooleanArray::from(v))
}

fn oidf(name: &str) -> Field {
    field(name, DataType::Int64, false, "oid", -1)
}
fn namef(name: &str) -> Field {
    field(name, DataType::Utf8, false, "name", -1)
}
fn charf(name: &str) -> Field {
    field(name, DataType::Utf8, false, "char", -1)
}
fn textf(name: &str) -> Field {
    field(name, DataType::Utf8, true, "text", -1)
}

fn table(fields: Vec<Field>, columns: Vec<ArrayRef>) -> DfResult<Arc<dyn TableProvider>> {
    let schema: SchemaRef = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
}

/// The schemas a client sees, with their oids, in oid order.
fn namespaces(cat: &Catalog) -> Vec<(i64, String)> {
    let mut v: Vec<(i64, String)> = vec![
        (PG_CATALOG_OID, "pg_catalog".into()),
        (INFORMATION_SCHEMA_OID, "information_schema".into()),
    ];
    for (name, id) in &cat.schemas {
        v.push((namespace_oid(name, *id), name.clone()));
    }
    v.sort();
    v
}

fn schema_oid(cat: &Catalog, name: &str) -> i64 {
    namespace_oid(name, cat.schemas.get(name).copied().unwrap_or(0))
}

/// The `pg_catalog` table `name`, built from `cat`; `None` for a table this server does not
/// answer.
/// `database` is the one connected to; `databases` lists every database of the server.
pub fn pg_catalog_table(
    cat: &Catalog,
    name: &str,
    database: &str,
    databases: &dyn Fn() -> Vec<String>,
) -> DfResult<Option<Arc<dyn TableProvider>>> {
    let tables: Vec<&Arc<RelDef>> = cat.tables.values().collect();
    let t =
        match name {
            "pg_namespace" => {
                let ns = namespaces(cat);
                table(
                    vec![oidf("oid"), namef("nspname"), oidf("nspowner")],
                    vec![
                        i64s(ns.iter().map(|n| n.0).collect()),
                        s(ns.iter().map(|n| n.1.clone()).collect()),
                        i64s(vec![10; ns.len()]),
                    ],
                )?
            }
            "pg_class" => {
                // Every table, then its primary-key index.
                let mut oid = vec![];
                let mut relname = vec![];
                let mut ns = vec![];
                let mut kind = vec![];
                let mut hasindex = vec![];
                for r in &tables {
                    oid.push(table_oid(r));
                    relname.push(r.name.clone());
                    ns.push(schema_oid(cat, &r.schema));
                    kind.push("r".to_string());
                    hasindex.push(!r.primary_key.is_empty());
                    if !r.primary_key.is_empty() {
                        oid.push(table_oid(r) + 1);
                        relname.push(r.pkey_name());
                        ns.push(schema_oid(cat, &r.schema));
                        kind.push("i".to_string());
                        hasindex.push(false);
                    }
                }
                let n = oid.len();
                table(
                    vec![
                        oidf("oid"),
                        namef("relname"),
                        oidf("relnamespace"),
                        charf("relkind"),
                        field("relpages", DataType::Int32, false, "int4", -1),
                        field("reltuples", DataType::Float32, false, "float4", -1),
                        oidf("relowner"),
                        charf("relpersistence"),
                        field("relhasindex", DataType::Boolean, false, "bool", -1),
                    ],
                    vec![
                        i64s(oid),
                        s(relname),
                        i64s(ns),
                        s(kind),
                        i32s(vec![0; n]),
                        Arc::new(Float32Array::from(vec![-1.0f32; n])),
                        i64s(vec![10; n]),
                        s(vec!["p".into(); n]),
                        bools(hasindex),
                    ],
                )?
            }
            "pg_attribute" => {
                let (mut rel, mut name, mut typ, mut typmod, mut num, mut notnull, mut ndims) =
                    (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
                for r in &tables {
                    for (i, c) in r.columns.iter().enumerate() {
                        rel.push(table_oid(r));
                        name.push(c.name.clone());
                        typ.push(pg_type(c.pg_type_name()).map_or(0, |t| i64::from(t.oid)));
                        typmod.push(sql_typmod(c.ty));
                        ndims.push(i32::from(matches!(c.ty, SqlType::Array(_))));
                        num.push(i as i16 + 1);
                        notnull.push(c.not_null);
                    }
                }
                let n = rel.len();
                table(
                    vec![
                        oidf("attrelid"),
                        namef("attname"),
                        oidf("atttypid"),
                        field("atttypmod", DataType::Int32, false, "int4", -1),
                        field("attndims", DataType::Int32, false, "int4", -1),
                        field("attnum", DataType::Int16, false, "int2", -1),
                        field("attnotnull", DataType::Boolean, false, "bool", -1),
                        field("attisdropped", DataType::Boolean, false, "bool", -1),
                        field("atthasdef", DataType::Boolean, false, "bool", -1),
                    ],
                    vec![
                        i64s(rel),
                        s(name),
                        i64s(typ),
                        i32s(typmod),
                        i32s(ndims),
                        Arc::new(Int16Array::from(num)),
                        bools(notnull),
                        bools(vec![false; n]),
                        bools(vec![false; n]),
                    ],
                )?
            }
            "pg_type" => {
                let n = PG_TYPES.len();
                table(
                    vec![
                        oidf("oid"),
                        namef("typname"),
                        oidf("typnamespace"),
                        field("typlen", DataType::Int16, false, "int2", -1),
                        charf("typtype"),
                        oidf("typrelid"),
                        oidf("typelem"),
                        charf("typcategory"),
                    ],
                    vec![
                        i64s(PG_TYPES.iter().map(|t| i64::from(t.oid)).collect()),
                        s(PG_TYPES.iter().map(|t| t.name.to_string()).collect()),
                        i64s(vec![PG_CATALOG_OID; n]),
                        Arc::new(Int16Array::from(
                            PG_TYPES.iter().map(|t| t.len).collect::<Vec<_>>(),
                        )),
                        s(vec!["b".into(); n]),
                        i64s(vec![0; n]),
                        i64s(PG_TYPES.iter().map(|t| i64::from(t.elem)).collect()),
                        s(PG_TYPES
                            .iter()
                            .map(|t| if t.elem != 0 { "A" } else { "U" }.to_string())
                            .collect()),
                    ],
                )?
            }
            "pg_description" => table(
                vec![
                    oidf("objoid"),
                    oidf("classoid"),
                    field("objsubid", DataType::Int32, false, "int4", -1),
                    textf("description"),
                ],
                vec![i64s(vec![]), i64s(vec![]), i32s(vec![]), s(vec![])],
            )?,
            "pg_constraint" => {
                let with_pk: Vec<&&Arc<RelDef>> = tables
                    .iter()
                    .filter(|r| !r.primary_key.is_empty())
                    .collect();
                let mut keys = ListBuilder::new(Int16Builder::new())
                    .with_field(Arc::new(Field::new("item", DataType::Int16, true)));
                for r in &with_pk {
                    for c in &r.primary_key {
                        keys.values().append_value(*c as i16 + 1);
                    }
                    keys.append(true);
                }
                let n = with_pk.len();
                let list = Arc::new(keys.finish());
                table(
                    vec![
                        oidf("oid"),
                        namef("conname"),
                        oidf("connamespace"),
                        charf("contype"),
                        oidf("conrelid"),
                        oidf("conindid"),
                        field("conkey", list.data_type().clone(), true, "_int2", -1),
                    ],
                    vec![
                        i64s(with_pk.iter().map(|r| table_oid(r) + 1).collect()),
                        s(with_pk.iter().map(|r| r.pkey_name()).collect()),
                        i64s(with_pk.iter().map(|r| schema_oid(cat, &r.schema)).collect()),
                        s(vec!["p".into(); n]),
                        i64s(with_pk.iter().map(|r| table_oid(r)).collect()),
                        i64s(with_pk.iter().map(|r| table_oid(r) + 1).collect()),
                        list,
                    ],
                )?
            }
            "pg_enum" => table(
                vec![
                    oidf("oid"),
                    oidf("enumtypid"),
                    field("enumsortorder", DataType::Float32, false, "float4", -1),
                    namef("enumlabel"),
                ],
                vec![
                    i64s(vec![]),
                    i64s(vec![]),
                    Arc::new(Float32Array::from(Vec::<f32>::new())),
                    s(vec![]),
                ],
            )?,
            "pg_index" => {
                let with_pk: Vec<&&Arc<RelDef>> = tables
                    .iter()
                    .filter(|r| !r.primary_key.is_empty())
                    .collect();
                let n = with_pk.len();
                table(
                    vec![
                        oidf("indexrelid"),
                        oidf("indrelid"),
                        field("indisunique", DataType::Boolean, false, "bool", -1),
                        field("indisprimary", DataType::Boolean, false, "bool", -1),
                    ],
                    vec![
                        i64s(with_pk.iter().map(|r| table_oid(r) + 1).collect()),
                        i64s(with_pk.iter().map(|r| table_oid(r)).collect()),
                        bools(vec![true; n]),
                        bools(vec![true; n]),
                    ],
                )?
            }
            "pg_indexes" => {
                let with_pk: Vec<&&Arc<RelDef>> = tables
                    .iter()
                    .filter(|r| !r.primary_key.is_empty())
                    .collect();
                let n = with_pk.len();
                table(
                    vec![
                        namef("schemaname"),
                        namef("tablename"),
                        namef("indexname"),
                        field("tablespace", DataType::Utf8, true, "name", -1),
                        textf("indexdef"),
                    ],
                    vec![
                        s(with_pk.iter().map(|r| r.schema.clone()).collect()),
                        s(with_pk.iter().map(|r| r.name.clone()).collect()),
                        s(with_pk.iter().map(|r| r.pkey_name()).collect()),
                        Arc::new(StringArray::from(vec![None::<&str>; n])),
                        s(with_pk
                            .iter()
                            .map(|r| {
                                let cols: Vec<&str> = r
                                    .primary_key
                                    .iter()
                                    .map(|c| r.columns[*c].name.as_str())
                                    .collect();
                                format!(
                                    "CREATE UNIQUE INDEX {} ON {}.{} USING btree ({})",
                                    r.pkey_name(),
                                    r.schema,
                                    r.name,
                                    cols.join(", ")
                                )
                            })
                            .collect()),
                    ],
                )?
            }
            "pg_tables" => table(
                vec![
                    namef("schemaname"),
                    namef("tablename"),
                    namef("tableowner"),
                    field("hasindexes", DataType::Boolean, false, "bool", -1),
                ],
                vec![
                    s(tables.iter().map(|r| r.schema.clone()).collect()),
                    s(tables.iter().map(|r| r.name.clone()).collect()),
                    s(vec!["rocklake".into(); tables.len()]),
                    bools(tables.iter().map(|r| !r.primary_key.is_empty()).collect()),
                ],
            )?,
            "pg_settings" => {
                let rows = server_settings();
                table(
                    vec![textf("name"), textf("setting")],
                    vec![
                        s(rows.iter().map(|r| r.0.to_string()).collect()),
                        s(rows.iter().map(|r| r.1.to_string()).collect()),
                    ],
                )?
            }
            "pg_database" => {
                let names = databases();
                // The one connected to keeps the oid a server of one gives it.
                let mut next = 16_384;
                let oids = names
                    .iter()
                    .map(|n| {
                        if n == database {
                            16_383
                        } else {
                            next += 1;
                            next - 1
                        }
                    })
                    .collect();
                table(
                    vec![oidf("oid"), namef("datname")],
                    vec![i64s(oids), s(names)],
                )?
            }
            _ => return Ok(None),
        };
    Ok(Some(t))
}

/// The `information_schema` view `name`, built from `cat`.
pub fn information_schema_table(
    cat: &Catalog,
    name: &str,
    database: &str,
) -> DfResult<Option<Arc<dyn TableProvider>>> {
    let tables: Vec<&Arc<RelDef>> = cat.tables.values().collect();
    let t = match name {
        "schemata" => {
            let ns = namespaces(cat);
            table(
                vec![
                    textf("catalog_name"),
                    textf("schema_name"),
                    textf("schema_owner"),
                ],
                vec![
                    s(vec![database.to_string(); ns.len()]),
                    s(ns.iter().map(|n| n.1.clone()).collect()),
                    s(vec!["rocklake".into(); ns.len()]),
                ],
            )?
        }
        "tables" => table(
            vec![
                textf("table_catalog"),
                textf("table_schema"),
                textf("table_name"),
                textf("table_type"),
            ],
            vec![
                s(vec![database.to_string(); tables.len()]),
                s(tables.iter().map(|r| r.schema.clone()).collect()),
                s(tables.iter().map(|r| r.name.clone()).collect()),
                s(vec!["BASE TABLE".into(); tables.len()]),
            ],
        )?,
        "columns" => {
            let (mut sch, mut tab, mut col, mut pos, mut null, mut ty, mut udt) =
                (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
            for r in &tables {
                for (i, c) in r.columns.iter().enumerate() {
                    sch.push(r.schema.clone());
                    tab.push(r.name.clone());
                    col.push(c.name.clone());
                    pos.push(i as i32 + 1);
                    null.push(if c.not_null { "NO" } else { "YES" }.to_string());
                    ty.push(match c.ty {
                        SqlType::Numeric(..) => "numeric".to_string(),
                        SqlType::Array(_) => "ARRAY".to_string(),
                        _ if c.is_text => "text".to_string(),
                        other => other.pg_name(),
                    });
                    udt.push(c.pg_type_name().to_string());
                }
            }
            let n = sch.len();
            table(
                vec![
                    textf("table_catalog"),
                    textf("table_schema"),
                    textf("table_name"),
                    textf("column_name"),
                    field("ordinal_position", DataType::Int32, false, "int4", -1),
                    textf("is_nullable"),
                    textf("data_type"),
                    textf("udt_name"),
                ],
                vec![
                    s(vec![database.to_string(); n]),
                    s(sch),
                    s(tab),
                    s(col),
                    i32s(pos),
                    s(null),
                    s(ty),
                    s(udt),
                ],
            )?
        }
        _ => return Ok(None),
    };
    Ok(Some(t))
}

/// The server version a client is told (`server_version`, `version()`): PostgreSQL 15's
/// protocol and behaviour, which is what clients check.
pub const SERVER_VERSION: &str = "15.18 (RockLake)";

/// `version()`.
pub fn version_string() -> String {
    format!(
        "PostgreSQL 15.18 (RockLake {}) on {}-unknown-linux-gnu, a DuckLake catalog on an \
         embedded key-value store",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    )
}

/// What `pg_settings` and `SHOW` answer (the settings a client may read).
pub fn server_settings() -> Vec<(&'static str, &'static str)> {
    vec![
        ("server_version", SERVER_VERSION),
        ("server_version_num", "150018"),
        ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"),
        ("DateStyle", "ISO, MDY"),
        ("IntervalStyle", "postgres"),
        ("TimeZone", "Etc/UTC"),
        ("integer_datetimes", "on"),
        ("standard_conforming_strings", "on"),
        ("default_transaction_isolation", "read committed"),
        ("transaction_isolation", "repeatable read"),
        ("max_identifier_length", "63"),
        ("search_path", "\"$user\", public"),
    ]
}
