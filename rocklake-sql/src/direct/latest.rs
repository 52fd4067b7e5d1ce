//! Two forms of SELECT around the direct path's `SELECT columns FROM table WHERE ...`, both in
//! the query DuckLake sends at the start of every DuckDB transaction (the latest snapshot):
//!
//! ```sql
//! SELECT "snapshot_id", ... FROM (SELECT snapshot_id, ... FROM ducklake_snapshot
//!     WHERE snapshot_id = (SELECT MAX(snapshot_id) FROM ducklake_snapshot)) AS __unnamed_subquery
//! ```
//!
//! - a derived table of that shape, named, whose outer SELECT lists some of its columns by
//!   name (DuckDB's postgres extension wraps every query it sends so);
//! - a WHERE of `column = (SELECT MAX(column) FROM table)` on an integer column: the maximum is
//!   read first (from the end of the primary-key index when the column is the table's primary
//!   key, so the cost does not grow with the table; else from every row, as DataFusion's plan
//!   reads it), then the WHERE is `column = that value` (`column = NULL` when there are no
//!   rows, which matches none).
//!
//! Through DataFusion that query took 1.2–1.8 ms (planning and optimising a join with an
//! aggregate) and read the snapshot table twice, on every DuckDB transaction.

use std::time::Instant;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::compute::max;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::execution::context::SessionState;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, Query,
    SelectItem, SetExpr, TableFactor, Value,
};
use rocklake_core::backend::KeyRange;
use rocklake_core::values::Value as Cell;

use super::{bare_body, column_of, plain_select, single_table, Select, Target};
use crate::catalog::{fold, Catalog};
use crate::error::Result;
use crate::phases::{Phase, PhaseTimes};
use crate::txn::Txn;

/// The WHERE `column = (SELECT MAX(of) FROM source)`, to be made once the maximum is read.
pub(crate) struct Latest {
    /// The compared column of the SELECT's table.
    column: usize,
    /// The subquery's table.
    source: Target,
    /// The subquery's column (of `source`), an `Int64` one.
    of: usize,
}

/// `e` as `column = (SELECT MAX(column) FROM table)`, on `target`'s `Int64` columns.
pub(super) fn latest(e: &Expr, target: &Target, catalog: &Catalog) -> Option<Latest> {
    let Expr::BinaryOp {
        left,
        op: BinaryOperator::Eq,
        right,
    } = e
    else {
        return None;
    };
    let column = column_of(left, target)?;
    let Expr::Subquery(q) = right.as_ref() else {
        return None;
    };
    let s = unfiltered(q)?;
    let source = single_table(&s.from, catalog)?;
    let [SelectItem::UnnamedExpr(Expr::Function(f))] = s.projection.as_slice() else {
        return None;
    };
    let [name] = f.name.0.as_slice() else {
        return None;
    };
    if name.as_ident().map(fold).as_deref() != Some("max")
        || f.uses_odbc_syntax
        || !matches!(f.parameters, FunctionArguments::None)
        || f.filter.is_some()
        || f.null_treatment.is_some()
        || f.over.is_some()
        || !f.within_group.is_empty()
    {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return None;
    }
    let [FunctionArg::Unnamed(FunctionArgExpr::Expr(arg))] = list.args.as_slice() else {
        return None;
    };
    let of = column_of(arg, &source)?;
    let int64 = |t: &Target, c: usize| {
        t.rel.arrow_schema(false, false).field(c).data_type() == &DataType::Int64
    };
    (int64(target, column) && int64(&source, of)).then_some(Latest { column, source, of })
}

impl Latest {
    /// The maximum, and the stored rows read for it: when the subquery's column is its table's
    /// primary key, the last entry of the primary-key index (whose keys sort as the integers
    /// do) names the row, so one row is read whatever the table's size; otherwise every row.
    pub(super) async fn maximum(
        &self,
        state: &SessionState,
        txn: &Txn,
        phases: &PhaseTimes,
    ) -> Result<Option<(Option<i64>, usize)>> {
        let rel = &self.source.rel;
        if rel.primary_key == [self.of] {
            let reading = Instant::now();
            let last = txn.last(&KeyRange::prefix(&rel.pk_index_prefix())).await?;
            let Some((_, row_key)) = last else {
                return Ok(Some((None, 0)));
            };
            if let Some(value) = txn.get(&row_key).await? {
                if let Some((cells, _)) = rel.decode(&row_key, &value)? {
                    phases.since(Phase::Storage, reading);
                    return Ok(match &cells[self.of] {
                        Cell::Int(v) => Some((Some(*v), 1)),
                        _ => None,
                    });
                }
            }
        }
        let Some((all, read)) =
            super::matching(state, txn, &self.source, None, None, false, phases).await?
        else {
            return Ok(None);
        };
        let Some(values) = all.batch.column(self.of).as_primitive_opt::<Int64Type>() else {
            return Ok(None);
        };
        Ok(Some((max(values), read)))
    }

    /// The WHERE `column = maximum` (`column = NULL` for no maximum: no row matches).
    pub(super) fn condition(&self, target: &Target, maximum: Option<i64>) -> Expr {
        let value = match maximum {
            Some(m) => Value::Number(m.to_string(), false),
            None => Value::Null,
        };
        let name = &target.rel.columns[self.column].name;
        Expr::BinaryOp {
            left: Box::new(Expr::Identifier(Ident::with_quote('"', name))),
            op: BinaryOperator::Eq,
            right: Box::new(Expr::value(value)),
        }
    }
}

/// `SELECT names FROM (select) AS alias`, where `select` is of the direct path's shape and
/// each name is one of its output columns: that select, with the outer list of columns.
pub(super) fn derived<'a>(
    q: &'a Query,
    catalog: &Catalog,
    nulls: datafusion::sql::planner::NullOrdering,
) -> Option<Select<'a>> {
    let s = unfiltered(q)?;
    let [from] = s.from.as_slice() else {
        return None;
    };
    let TableFactor::Derived {
        lateral: false,
        subquery,
        alias: Some(alias),
        sample: None,
    } = &from.relation
    else {
        return None;
    };
    if !from.joins.is_empty() || !alias.columns.is_empty() || alias.at.is_some() {
        return None;
    }
    let mut inner = super::select_shape(subquery, catalog, nulls)?;
    if !inner.order.is_empty() {
        return None;
    }
    let mut columns = Vec::with_capacity(s.projection.len());
    for item in &s.projection {
        let SelectItem::UnnamedExpr(Expr::Identifier(i)) = item else {
            return None;
        };
        let name = fold(i);
        let mut named = inner
            .columns
            .iter()
            .filter(|c| inner.target.rel.columns[**c].name == name);
        let (Some(c), None) = (named.next(), named.next()) else {
            return None;
        };
        columns.push(*c);
    }
    inner.columns = columns;
    Some(inner)
}

/// `q`'s SELECT when it is a plain one with no WHERE and no clause after its body.
fn unfiltered(q: &Query) -> Option<&datafusion::sql::sqlparser::ast::Select> {
    if !bare_body(q, false) {
        return None;
    }
    let SetExpr::Select(s) = q.body.as_ref() else {
        return None;
    };
    (plain_select(s) && s.selection.is_none()).then_some(s.as_ref())
}
