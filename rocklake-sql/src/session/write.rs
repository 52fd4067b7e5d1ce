//! INSERT, UPDATE and DELETE: the rows a statement names (from the direct path or
//! DataFusion), each value cast to its column's type, then written through the transaction.

use std::collections::HashSet;

use bytes::Bytes;
use datafusion::arrow::array::{ArrayRef, BinaryArray, RecordBatch};
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, Expr, FromTable, ObjectName, Statement, TableFactor, TableObject, Update,
    UpdateTableFromKind, With,
};
use rocklake_core::values::Value;

use super::query::same_rows;
use super::{Output, Session};
use crate::catalog::fold;
use crate::catalog::Catalog;
use crate::direct::{self, DirectMode};
use crate::error::{state, Result, SqlError};
use crate::relation::{RelDef, StoredRow, KEY_COLUMN};
use crate::rewrite::{cast_values_to_targets, mentions_ctid_stmt, update_per_values_row};
use crate::txn::Txn;
impl Session {
    pub(super) async fn insert(&mut self, stmt: Statement) -> Result<Output> {
        let Statement::Insert(ins) = stmt else {
            unreachable!("insert() is called with an INSERT")
        };
        if ins.on.is_some() || ins.returning.is_some() {
            return Err(SqlError::unsupported(
                "INSERT ... ON CONFLICT / RETURNING is not supported",
            ));
        }
        let TableObject::TableName(name) = &ins.table else {
            return Err(SqlError::unsupported("INSERT into a table function"));
        };
        let rel = self.table(name)?;
        let targets: Vec<usize> = if ins.columns.is_empty() {
            (0..rel.columns.len()).collect()
        } else {
            ins.columns
                .iter()
                .map(|c| {
                    let n = c.0.last().and_then(|p| p.as_ident()).map(fold);
                    rel.column_index(&n.unwrap_or_default())
                })
                .collect::<Result<_>>()?
        };
        let Some(mut source) = ins.source else {
            return Err(SqlError::unsupported("INSERT ... DEFAULT VALUES"));
        };
        cast_values_to_targets(&mut source, &rel, &targets)?;
        let direct = match self.direct {
            DirectMode::Off => None,
            _ => self.direct_values(&source),
        };
        let batches = match direct {
            Some(b) => {
                if self.direct == DirectMode::Check {
                    let (_, general) = self.query(*source).await?;
                    same_rows("an INSERT's VALUES", std::slice::from_ref(&b), &general)?;
                }
                vec![b]
            }
            None => self.query(*source).await?.1,
        };
        let mut n = 0usize;
        let mut rows: Vec<Vec<Value>> = Vec::new();
        for b in &batches {
            if b.num_columns() > targets.len() {
                return Err(SqlError::new(
                    state::SYNTAX_ERROR,
                    "INSERT has more expressions than target columns",
                ));
            }
            if b.num_columns() < targets.len() && !ins.columns.is_empty() {
                return Err(SqlError::new(
                    state::SYNTAX_ERROR,
                    "INSERT has more target columns than expressions",
                ));
            }
            let arrays: Vec<ArrayRef> = (0..b.num_columns())
                .map(|j| {
                    let col = &rel.columns[targets[j]];
                    col.ty.coerce(b.column(j), &col.name)
                })
                .collect::<Result<_>>()?;
            for r in 0..b.num_rows() {
                let mut cells = vec![Value::Null; rel.columns.len()];
                for (j, a) in arrays.iter().enumerate() {
                    let col = &rel.columns[targets[j]];
                    cells[targets[j]] = col.ty.cell(a.as_ref(), r)?;
                }
                rows.push(cells);
            }
        }
        self.with_txn(async |txn| {
            for cells in rows {
                txn.insert(&rel, cells).await?;
                n += 1;
            }
            Ok(())
        })
        .await?;
        Ok(Output::Command(format!("INSERT 0 {n}")))
    }

    pub(super) async fn update(&mut self, stmt: &Statement, with: Option<&With>) -> Result<Output> {
        let Statement::Update(u) = stmt else {
            return Err(SqlError::internal("update() needs an UPDATE"));
        };
        if u.returning.is_some() {
            return Err(SqlError::unsupported(
                "UPDATE ... RETURNING is not supported",
            ));
        }
        let (name, qual) = target_of(&u.table.relation)?;
        let rel = self.table(&name)?;
        let mut targets = Vec::with_capacity(u.assignments.len());
        for a in &u.assignments {
            let AssignmentTarget::ColumnName(col) = &a.target else {
                return Err(SqlError::unsupported("UPDATE ... SET (a, b) = (...)"));
            };
            let cname = col
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(fold)
                .unwrap_or_default();
            targets.push(rel.column_index(&cname)?);
        }
        // The SELECT DataFusion plans when the direct path does not take the UPDATE, printed
        // only then (printing the AST back to SQL is a large part of a direct UPDATE's cost).
        let general_sql = || {
            let with_text = with.map(|w| format!("{w} ")).unwrap_or_default();
            let mut sql = format!("{with_text}SELECT {qual}.\"{KEY_COLUMN}\"");
            for (i, a) in u.assignments.iter().enumerate() {
                sql.push_str(&format!(", ({}) AS \"__rocklake_set_{i}\"", a.value));
            }
            sql.push_str(&format!(" FROM {}", u.table));
            if let Some(
                UpdateTableFromKind::AfterSet(from) | UpdateTableFromKind::BeforeSet(from),
            ) = &u.from
            {
                for t in from {
                    sql.push_str(&format!(", {t}"));
                }
            }
            if let Some(sel) = &u.selection {
                sql.push_str(&format!(" WHERE {sel}"));
            }
            sql
        };
        let ctid = mentions_ctid_stmt(stmt);
        let catalog = self.shared.current_catalog();
        let shapes: Option<Vec<std::borrow::Cow<'_, Update>>> = match (self.direct, with) {
            (DirectMode::Off, _) => None,
            _ if ctid => None,
            (_, None) => Some(vec![std::borrow::Cow::Borrowed(u)]),
            // DuckLake's `WITH v(...) AS (VALUES ...) UPDATE ... FROM v`: one UPDATE per row.
            (_, Some(w)) => update_per_values_row(w, u, &rel)
                .map(|each| each.into_iter().map(std::borrow::Cow::Owned).collect()),
        };
        let direct = match shapes {
            Some(shapes) => self.direct_update(&shapes, &catalog).await,
            None => None,
        };
        let changes = match direct {
            Some(batches) => {
                let changes = changes_of(&rel, &targets, &batches)?;
                if self.direct == DirectMode::Check {
                    let general = self.select_targets(&general_sql(), ctid).await?;
                    same_changes(&changes, &changes_of(&rel, &targets, &general)?)?;
                }
                changes
            }
            None => changes_of(
                &rel,
                &targets,
                &self.select_targets(&general_sql(), ctid).await?,
            )?,
        };
        let n = changes.len();
        self.with_txn(async |txn| {
            for (key, set) in changes {
                let old = load(txn, &rel, key).await?;
                let mut cells = old.cells.clone();
                for (i, v) in set {
                    cells[i] = v;
                }
                txn.update(&rel, &old, cells).await?;
            }
            Ok(())
        })
        .await?;
        Ok(Output::Command(format!("UPDATE {n}")))
    }

    /// The rows the UPDATEs `shapes` change, on the direct path: `None` unless every one has
    /// its shape and no row is named twice (which only several UPDATEs from one statement's
    /// VALUES rows can do; PostgreSQL updates such a row once).
    async fn direct_update(
        &self,
        shapes: &[std::borrow::Cow<'_, Update>],
        catalog: &Catalog,
    ) -> Option<Vec<RecordBatch>> {
        let mut batches = Vec::with_capacity(shapes.len());
        let mut seen = HashSet::new();
        for u in shapes {
            let shape = direct::update_shape(u, catalog)?;
            let set: Vec<&Expr> = shape.assignments.iter().map(|(_, e)| *e).collect();
            let b = self
                .direct_targets(&shape.target, shape.selection, &set)
                .await?;
            let keys = key_column(&b).ok()?;
            for r in 0..b.num_rows() {
                if !seen.insert(Bytes::copy_from_slice(keys.value(r))) {
                    return None;
                }
            }
            batches.push(b);
        }
        Some(batches)
    }

    pub(super) async fn delete(&mut self, stmt: &Statement, with: String) -> Result<Output> {
        let Statement::Delete(d) = stmt else {
            return Err(SqlError::internal("delete() needs a DELETE"));
        };
        if d.returning.is_some() {
            return Err(SqlError::unsupported(
                "DELETE ... RETURNING is not supported",
            ));
        }
        let from = match &d.from {
            FromTable::WithFromKeyword(f) | FromTable::WithoutKeyword(f) => f,
        };
        let Some(first) = from.first() else {
            return Err(SqlError::new(state::SYNTAX_ERROR, "DELETE needs a table"));
        };
        let (name, qual) = target_of(&first.relation)?;
        let rel = self.table(&name)?;
        let general_sql = || {
            let mut sql = format!("{with}SELECT {qual}.\"{KEY_COLUMN}\" FROM {first}");
            for t in d.using.iter().flatten() {
                sql.push_str(&format!(", {t}"));
            }
            if let Some(sel) = &d.selection {
                sql.push_str(&format!(" WHERE {sel}"));
            }
            sql
        };
        let ctid = mentions_ctid_stmt(stmt);
        let shape = match self.direct {
            DirectMode::Off => None,
            _ if ctid || !with.is_empty() => None,
            _ => direct::delete_shape(d, &self.shared.current_catalog()),
        };
        let direct = match shape {
            Some((target, selection)) => self.direct_targets(&target, selection, &[]).await,
            None => None,
        };
        let batches = self
            .targets_or_general(direct, general_sql, ctid, "a DELETE")
            .await?;
        let mut keys = Vec::new();
        let mut seen = HashSet::new();
        for b in &batches {
            let col = key_column(b)?;
            for r in 0..b.num_rows() {
                let k = Bytes::copy_from_slice(col.value(r));
                if seen.insert(k.clone()) {
                    keys.push(k);
                }
            }
        }
        let n = keys.len();
        self.with_txn(async |txn| {
            for key in keys {
                let old = load(txn, &rel, key).await?;
                txn.delete(&rel, &old).await?;
            }
            Ok(())
        })
        .await?;
        Ok(Output::Command(format!("DELETE {n}")))
    }
}

pub(super) async fn load(txn: &Txn, rel: &RelDef, key: Bytes) -> Result<StoredRow> {
    let Some(v) = txn.get(&key).await? else {
        return Err(SqlError::new(
            state::SERIALIZATION_FAILURE,
            format!(
                "the row {} changed while the statement ran",
                rocklake_core::keys::render(&key)
            ),
        ));
    };
    let (cells, tuple) = rel.decode(&key, &v)?.ok_or_else(|| {
        SqlError::internal(format!(
            "{} is not a row of {}",
            rocklake_core::keys::render(&key),
            rel.qualified()
        ))
    })?;
    Ok(StoredRow { key, cells, tuple })
}

pub(super) fn key_column(b: &RecordBatch) -> Result<&BinaryArray> {
    b.column(0)
        .as_any()
        .downcast_ref::<BinaryArray>()
        .ok_or_else(|| SqlError::internal("the target key column is not binary"))
}

/// The table an UPDATE or DELETE names, and how its columns are qualified in the query.
pub(super) fn target_of(f: &TableFactor) -> Result<(ObjectName, String)> {
    match f {
        TableFactor::Table { name, alias, .. } => {
            let qual = match alias {
                Some(a) => a.name.to_string(),
                None => name.0.last().map(|p| p.to_string()).unwrap_or_default(),
            };
            Ok((name.clone(), qual))
        }
        other => Err(SqlError::unsupported(format!(
            "UPDATE/DELETE of {other} (only a table)"
        ))),
    }
}

/// One row an UPDATE changes: its storage key and (column, new value) per SET.
type Change = (Bytes, Vec<(usize, Value)>);
type Changes = Vec<Change>;

/// What an UPDATE writes, from the rows it names (storage key, then each SET value): per row,
/// the columns it sets, each value cast to its column's type. A row named more than once (a
/// FROM list that joins it twice) is updated once, with the first match (PostgreSQL uses one
/// of them, unspecified which).
fn changes_of(rel: &RelDef, targets: &[usize], batches: &[RecordBatch]) -> Result<Changes> {
    let mut changes = Vec::new();
    let mut seen = HashSet::new();
    for b in batches {
        let keys = key_column(b)?;
        let arrays: Vec<ArrayRef> = targets
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let col = &rel.columns[*t];
                col.ty.coerce(b.column(i + 1), &col.name)
            })
            .collect::<Result<_>>()?;
        for r in 0..b.num_rows() {
            let key = Bytes::copy_from_slice(keys.value(r));
            if !seen.insert(key.clone()) {
                continue;
            }
            let mut set = Vec::with_capacity(targets.len());
            for (i, t) in targets.iter().enumerate() {
                set.push((*t, rel.columns[*t].ty.cell(arrays[i].as_ref(), r)?));
            }
            changes.push((key, set));
        }
    }
    Ok(changes)
}

/// Refuse an UPDATE whose direct path would write other than DataFusion's plan
/// ([`DirectMode::Check`]): the same rows (in any order) with the same values.
fn same_changes(direct: &[Change], general: &[Change]) -> Result<()> {
    let sorted = |c: &[Change]| {
        let mut v = c.to_vec();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let (d, g) = (sorted(direct), sorted(general));
    if d != g {
        return Err(SqlError::internal(format!(
            "the direct path's UPDATE differs from DataFusion's: {} rows {d:?} against {} rows \
             {g:?}",
            d.len(),
            g.len()
        )));
    }
    Ok(())
}
