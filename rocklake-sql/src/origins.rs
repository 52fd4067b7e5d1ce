//! Where each result column is read from, as PostgreSQL's RowDescription names it: the oid of
//! the table and the column's number in it when the column is a plain reference to a table's
//! column (through aliases, filters, sorts, joins, groupings and subqueries in `FROM`), and
//! `(0, 0)` for anything else (an expression, an aggregate, a constant, a set operation's
//! columns).
//!
//! Worked out only when a RowDescription is sent: a statement keeps what it needs (the table
//! and column indices of the direct path, or DataFusion's logical plan behind an `Arc`), and
//! [`Origins::resolve`] walks it then. Carrying origins through DataFusion as field metadata
//! cost a primary-key read 6 µs of 23 (`docs/bench-sql/origin-metadata-fae4f7e.md`); this
//! costs a statement one `Arc`.

use std::sync::Arc;

use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{Distinct, Expr, JoinType, LogicalPlan};

use crate::provider::RockTable;

/// A result column's origin: the table's oid and the column's number (`attnum`), or `(0, 0)`.
pub type Origin = (i32, i16);

/// What a result's column origins are worked out from.
#[derive(Clone, Debug, Default)]
pub enum Origins {
    /// No column has one.
    #[default]
    None,
    /// Every column read straight from one table (the direct path): the table's oid and each
    /// result column's index among the table's columns.
    Table {
        /// The table's oid.
        oid: i64,
        /// Each result column's index among the table's columns.
        columns: Arc<[usize]>,
    },
    /// Traced through DataFusion's logical plan of the statement.
    Plan(Arc<LogicalPlan>),
}

impl Origins {
    /// The origin of each of a result's `n` columns.
    pub fn resolve(&self, n: usize) -> Vec<Origin> {
        let mut out = vec![(0, 0); n];
        match self {
            Origins::None => {}
            Origins::Table { oid, columns } => {
                for (o, c) in out.iter_mut().zip(columns.iter()) {
                    *o = origin(*oid, *c);
                }
            }
            Origins::Plan(plan) => {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = trace(plan, i).unwrap_or((0, 0));
                }
            }
        }
        out
    }
}

/// Table column `column` (0-based) of the table `oid`; the oid goes out as the int32 it is on
/// the wire (an oid is unsigned).
fn origin(oid: i64, column: usize) -> Origin {
    match i16::try_from(column + 1) {
        Ok(attnum) => (oid as u32 as i32, attnum),
        Err(_) => (0, 0),
    }
}

/// The origin of output column `i` of `plan`.
fn trace(plan: &LogicalPlan, i: usize) -> Option<Origin> {
    match plan {
        LogicalPlan::Projection(p) => through(p.expr.get(i)?, &p.input),
        LogicalPlan::Aggregate(a) => through(a.group_expr.get(i)?, &a.input),
        LogicalPlan::Window(w) => {
            // The input's columns, then the window functions' results.
            (i < w.input.schema().fields().len())
                .then(|| trace(&w.input, i))
                .flatten()
        }
        LogicalPlan::Filter(f) => trace(&f.input, i),
        LogicalPlan::Sort(s) => trace(&s.input, i),
        LogicalPlan::Limit(l) => trace(&l.input, i),
        LogicalPlan::SubqueryAlias(s) => trace(&s.input, i),
        LogicalPlan::Repartition(r) => trace(&r.input, i),
        LogicalPlan::Distinct(Distinct::All(input)) => trace(input, i),
        LogicalPlan::Join(j) => {
            let left = j.left.schema().fields().len();
            match j.join_type {
                JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full => {
                    if i < left {
                        trace(&j.left, i)
                    } else {
                        trace(&j.right, i - left)
                    }
                }
                JoinType::LeftSemi | JoinType::LeftAnti => trace(&j.left, i),
                JoinType::RightSemi | JoinType::RightAnti => trace(&j.right, i),
                _ => None,
            }
        }
        LogicalPlan::TableScan(s) => {
            let column = match &s.projection {
                Some(p) => *p.get(i)?,
                None => i,
            };
            let provider = source_as_provider(&s.source).ok()?;
            let table = provider.downcast_ref::<RockTable>()?;
            let rel = table.rel();
            // `ctid` and the storage key come after the declared columns: no origin.
            (column < rel.columns.len()).then(|| origin(rel.table_oid(), column))
        }
        _ => None,
    }
}

/// The origin of `expr` evaluated over `input`: a column of it (aliased or not), traced on.
fn through(expr: &Expr, input: &LogicalPlan) -> Option<Origin> {
    let mut e = expr;
    while let Expr::Alias(a) = e {
        e = &a.expr;
    }
    let Expr::Column(c) = e else {
        return None;
    };
    let j = input.schema().index_of_column(c).ok()?;
    trace(input, j)
}
