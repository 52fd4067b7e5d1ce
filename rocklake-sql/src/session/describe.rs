//! Describe: the parameter types and result columns of a statement, without running it.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, SchemaRef};
use datafusion::sql::sqlparser::ast::{
    visit_expressions, AssignmentTarget, Expr, FromTable, SetExpr, Statement, TableObject,
};

use super::write::target_of;
use super::Session;
use crate::catalog::fold;
use crate::colnames::{alias_repeated, pg_column_names, rename_columns};
use crate::error::{state, Result, SqlError};
use crate::origins::Origins;
use crate::rewrite::{
    hide_ctid_from_wildcards, max_placeholder, mentions_ctid, placeholder_number, strip_collate,
};
use crate::types::SqlType;
impl Session {
    /// What one statement would return, without running it (the wire's Describe of a
    /// prepared statement): the types of its `$n` parameters and, for a query, its result
    /// columns (`None`: the statement returns no rows). Several statements are refused, as
    /// PostgreSQL refuses them in a prepared statement.
    /// The result columns come with where each is read from ([`Origins`]).
    pub async fn describe(
        &mut self,
        sql: &str,
    ) -> Result<(Vec<Option<Field>>, Option<(SchemaRef, Origins)>)> {
        let mut statements = self
            .db
            .parse(sql)
            .map_err(|e| SqlError::new(state::SYNTAX_ERROR, e.to_string()))?;
        if statements.len() > 1 {
            return Err(SqlError::new(
                state::SYNTAX_ERROR,
                "cannot insert multiple commands into a prepared statement",
            ));
        }
        let Some(stmt) = statements.pop() else {
            return Ok((vec![], None));
        };
        let Statement::Query(mut q) = stmt else {
            return Ok((self.dml_parameter_types(&stmt).await, None));
        };
        if matches!(*q.body, SetExpr::Update(_) | SetExpr::Delete(_)) {
            return Ok((vec![], None));
        }
        if self.shared.txn.lock().await.is_none() {
            *self
                .shared
                .catalog
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = self.db.catalog();
        }
        let ctid = mentions_ctid(&q);
        if ctid {
            hide_ctid_from_wildcards(&mut q);
        }
        strip_collate(&mut q);
        let col_names = pg_column_names(&q);
        alias_repeated(&mut q);
        let stmt_for_casts = Statement::Query(q.clone());
        self.shared.expose_ctid.store(ctid, Ordering::Release);
        let planned = self
            .ctx
            .state()
            .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(
                Statement::Query(q),
            )))
            .await;
        self.shared.expose_ctid.store(false, Ordering::Release);
        let plan = planned?;
        let params = plan.get_parameter_types()?;
        // Slot n - 1 for `$n`, whichever numbers the statement uses.
        let mut types: Vec<Option<Field>> = vec![None; max_placeholder(&stmt_for_casts)];
        for (name, dt) in params {
            let n = name.trim_start_matches('$').parse::<usize>().unwrap_or(0);
            if let (Some(slot), Some(dt)) = (n.checked_sub(1).and_then(|i| types.get_mut(i)), dt) {
                *slot = Some(Field::new(name.as_str(), dt, true));
            }
        }
        // `$1::bigint`: a parameter cast to a type has that type, as in PostgreSQL.
        let _ = visit_expressions(&stmt_for_casts, |e| {
            if let Expr::Cast {
                expr, data_type, ..
            } = e
            {
                if let (Some(n), Ok(ty)) = (
                    placeholder_number(expr),
                    SqlType::parse(&data_type.to_string()),
                ) {
                    if let Some(slot @ None) = types.get_mut(n - 1) {
                        *slot = Some(param_field(ty));
                    }
                }
            }
            ControlFlow::<()>::Continue(())
        });
        let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
        let (schema, _) = rename_columns(schema, vec![], &col_names)?;
        Ok((types, Some((schema, Origins::Plan(Arc::new(plan))))))
    }

    /// The types of the `$n` parameters of an INSERT, UPDATE or DELETE (`None` where nothing
    /// says): a value bound for a column takes the column's type, and the rest are inferred
    /// by planning the statement's WHERE as a query.
    pub(super) async fn dml_parameter_types(&mut self, stmt: &Statement) -> Vec<Option<Field>> {
        let count = max_placeholder(stmt);
        if count == 0 {
            return vec![];
        }
        let mut types: Vec<Option<Field>> = vec![None; count];
        let mut set = |e: &Expr, ty: SqlType| {
            if let Some(n) = placeholder_number(e) {
                if let Some(slot) = types.get_mut(n - 1) {
                    slot.get_or_insert_with(|| param_field(ty));
                }
            }
        };
        let mut probe = None;
        match stmt {
            Statement::Insert(ins) => {
                if let (TableObject::TableName(name), Some(src)) = (&ins.table, &ins.source) {
                    if let (Ok(rel), SetExpr::Values(values)) =
                        (self.table(name), src.body.as_ref())
                    {
                        let targets: Vec<Option<usize>> = if ins.columns.is_empty() {
                            (0..rel.columns.len()).map(Some).collect()
                        } else {
                            ins.columns
                                .iter()
                                .map(|c| {
                                    let n = c.0.last().and_then(|p| p.as_ident()).map(fold);
                                    rel.column_index(&n.unwrap_or_default()).ok()
                                })
                                .collect()
                        };
                        for row in &values.rows {
                            for (e, t) in row.iter().zip(&targets) {
                                if let Some(col) = t.and_then(|t| rel.columns.get(t)) {
                                    set(e, col.ty);
                                }
                            }
                        }
                    }
                }
            }
            Statement::Update(u) => {
                if let Ok((name, _)) = target_of(&u.table.relation) {
                    if let Ok(rel) = self.table(&name) {
                        for a in &u.assignments {
                            if let AssignmentTarget::ColumnName(col) = &a.target {
                                let c = col.0.last().and_then(|p| p.as_ident()).map(fold);
                                if let Ok(i) = rel.column_index(&c.unwrap_or_default()) {
                                    set(&a.value, rel.columns[i].ty);
                                }
                            }
                        }
                    }
                }
                if let Some(sel) = &u.selection {
                    probe = Some(format!("SELECT 1 FROM {} WHERE {sel}", u.table));
                }
            }
            Statement::Delete(d) => {
                let from = match &d.from {
                    FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
                };
                if let (Some(t), Some(sel)) = (from.first(), &d.selection) {
                    probe = Some(format!("SELECT 1 FROM {t} WHERE {sel}"));
                }
            }
            _ => {}
        }
        if let Some(sql) = probe {
            if let Ok((inferred, _)) = Box::pin(self.describe(&sql)).await {
                for (slot, t) in types.iter_mut().zip(inferred) {
                    if slot.is_none() {
                        *slot = t;
                    }
                }
            }
        }
        types
    }
}

/// A parameter of column type `ty`, announcing its PostgreSQL type (`varchar`, `uuid`).
fn param_field(ty: SqlType) -> Field {
    crate::pg_types::field(
        "param",
        ty.arrow(),
        true,
        crate::pg_types::sql_type_name(ty),
        -1,
    )
}
