//! The set of schemas and tables, read from the `0x82` definitions, and parsing a
//! `CREATE TABLE` into a [`RelDef`].

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::sql::sqlparser::ast::{
    ColumnOption, CreateTable, Ident, ObjectName, ObjectNamePart, Statement, TableConstraint,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use rocklake_core::tags::Tag;

use crate::error::{state, Result, SqlError};
use crate::relation::{ColumnDef, Layout, RelDef};
use crate::types::{Elem, SqlType};

/// Schemas and tables, as of some snapshot (shared, copied on change).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Catalog {
    /// Schema name → relation id of its definition.
    pub schemas: BTreeMap<String, u64>,
    /// (schema, table) → definition.
    pub tables: BTreeMap<(String, String), Arc<RelDef>>,
}

impl Catalog {
    /// The highest relation id among its schemas and tables (0 when empty).
    pub fn newest_definition(&self) -> u64 {
        let schemas = self.schemas.values().copied();
        let tables = self.tables.values().map(|t| t.id);
        schemas.chain(tables).max().unwrap_or(0)
    }

    /// The table `schema.name`, or PostgreSQL's 42P01.
    pub fn table(&self, schema: &str, name: &str) -> Result<Arc<RelDef>> {
        self.tables
            .get(&(schema.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| {
                let shown = if schema == "public" {
                    name.to_string()
                } else {
                    format!("{schema}.{name}")
                };
                SqlError::new(
                    state::UNDEFINED_TABLE,
                    format!("relation \"{shown}\" does not exist"),
                )
            })
    }

    /// Whether a registry tag already holds some table's rows.
    pub fn tag_taken(&self, tag: Tag) -> bool {
        self.tables
            .values()
            .any(|t| matches!(t.layout, Layout::Tagged { tag: t2, .. } if t2 == tag))
    }

    /// The table with this relation id.
    pub fn by_id(&self, id: u64) -> Option<Arc<RelDef>> {
        self.tables.values().find(|t| t.id == id).cloned()
    }
}

/// An identifier as PostgreSQL folds it: unquoted names to lower case.
pub fn fold(ident: &Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}

/// `schema.table` (default schema `public`) from an object name.
pub fn split_name(name: &ObjectName) -> Result<(String, String)> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| match p {
            ObjectNamePart::Identifier(i) => Ok(fold(i)),
            other => Err(SqlError::unsupported(format!("name part {other}"))),
        })
        .collect::<Result<_>>()?;
    match parts.as_slice() {
        [t] => Ok(("public".into(), t.clone())),
        [s, t] => Ok((s.clone(), t.clone())),
        [_db, s, t] => Ok((s.clone(), t.clone())),
        _ => Err(SqlError::new(
            state::SYNTAX_ERROR,
            format!("improper qualified name (too many dotted names): {name}"),
        )),
    }
}

/// Build a definition from a parsed `CREATE TABLE`, choosing its storage layout.
pub fn rel_from_create(id: u64, ct: &CreateTable, catalog: &Catalog) -> Result<RelDef> {
    let (schema, name) = split_name(&ct.name)?;
    if ct.query.is_some() {
        return Err(SqlError::unsupported(
            "CREATE TABLE ... AS is not supported; create the table, then INSERT ... SELECT",
        ));
    }
    let mut columns: Vec<ColumnDef> = Vec::with_capacity(ct.columns.len());
    let mut primary_key = Vec::new();
    for (i, c) in ct.columns.iter().enumerate() {
        let cname = fold(&c.name);
        if columns.iter().any(|d| d.name == cname) {
            return Err(SqlError::new(
                "42701",
                format!("column \"{cname}\" specified more than once"),
            ));
        }
        let ty = SqlType::parse(&c.data_type.to_string())?;
        let mut not_null = false;
        for o in &c.options {
            match &o.option {
                ColumnOption::NotNull => not_null = true,
                ColumnOption::Null => not_null = false,
                ColumnOption::PrimaryKey(_) => {
                    primary_key.push(i);
                    not_null = true;
                }
                other => {
                    return Err(SqlError::unsupported(format!(
                        "column option {other} of \"{cname}\" is not supported"
                    )))
                }
            }
        }
        let declared = c.data_type.to_string().trim().to_ascii_lowercase();
        let is_text = match ty {
            SqlType::Text => declared == "text",
            SqlType::Array(Elem::Text) => {
                declared.starts_with("text[") || declared == "text array" || declared == "_text"
            }
            _ => false,
        };
        columns.push(ColumnDef {
            name: cname,
            ty,
            not_null,
            is_text,
        });
    }
    for con in &ct.constraints {
        match con {
            TableConstraint::PrimaryKey(pk) => {
                if !primary_key.is_empty() {
                    return Err(SqlError::new(
                        "42P16",
                        format!("multiple primary keys for table \"{name}\" are not allowed"),
                    ));
                }
                for col in &pk.columns {
                    let cname = col.column.expr.to_string().trim_matches('"').to_string();
                    let i = columns
                        .iter()
                        .position(|d| d.name == cname)
                        .ok_or_else(|| {
                            SqlError::new(
                                state::UNDEFINED_COLUMN,
                                format!("column \"{cname}\" named in key does not exist"),
                            )
                        })?;
                    columns[i].not_null = true;
                    primary_key.push(i);
                }
            }
            other => {
                return Err(SqlError::unsupported(format!(
                    "table constraint {other} is not supported"
                )))
            }
        }
    }
    if primary_key.len() > 1 && ct.constraints.is_empty() {
        return Err(SqlError::new(
            "42P16",
            format!("multiple primary keys for table \"{name}\" are not allowed"),
        ));
    }
    // Inlined-data rows go under 0xFD only for the catalog whose tables hold the registry
    // tags (0xFD's keys name DuckLake's table id, not the schema): a second DuckLake catalog
    // in another schema of the same store (METADATA_SCHEMA) keeps its own under 0x83.
    let tagged_schema = catalog
        .tables
        .values()
        .any(|t| t.schema == schema && matches!(t.layout, Layout::Tagged { .. }));
    let layout = RelDef::layout_for(&name, &columns, tagged_schema, &|t| catalog.tag_taken(t));
    let mut canonical = ct.clone();
    canonical.if_not_exists = false;
    Ok(RelDef {
        id,
        schema,
        name,
        columns,
        primary_key,
        layout,
        definition: Statement::CreateTable(canonical).to_string(),
    })
}

/// Parse a stored definition back (`CREATE TABLE ...` or `CREATE SCHEMA ...`). The layout of a
/// stored table is decided again from its text and the tags already taken, in relation-id
/// order, so it comes out as when it was created.
pub fn parse_definition(id: u64, text: &str, catalog: &mut Catalog) -> Result<()> {
    let stmts = Parser::parse_sql(&PostgreSqlDialect {}, text).map_err(|e| {
        SqlError::new(
            state::DATA_CORRUPTED,
            format!("the stored definition of relation {id} does not parse ({e}): {text}"),
        )
    })?;
    match stmts.as_slice() {
        [Statement::CreateTable(ct)] => {
            let rel = rel_from_create(id, ct, catalog)?;
            catalog
                .tables
                .insert((rel.schema.clone(), rel.name.clone()), Arc::new(rel));
            Ok(())
        }
        [Statement::CreateSchema { schema_name, .. }] => {
            let name = schema_name.to_string().trim_matches('"').to_string();
            catalog.schemas.insert(name, id);
            Ok(())
        }
        _ => Err(SqlError::new(
            state::DATA_CORRUPTED,
            format!("the stored definition of relation {id} is not a CREATE TABLE or CREATE SCHEMA: {text}"),
        )),
    }
}
