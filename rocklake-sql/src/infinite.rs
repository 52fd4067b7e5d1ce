//! PostgreSQL's infinite dates and timestamps where a statement casts text to them:
//! `'infinity'::timestamp`, `date '-infinity'`, and the text a comparison such as
//! `ts < 'infinity'` casts to its column's type.
//!
//! Arrow's parsers read no `infinity`, so DataFusion's constant folding would fail on such a
//! cast. An analyzer rule, run after type coercion has put in every cast, replaces a cast of
//! the text `infinity` / `-infinity` (any case, spaces around, as the column input reads it)
//! to a date or timestamp with the value RockLake stores for it: the type's largest or
//! smallest value (`i32::MAX`/`MIN` days, `i64::MAX`/`MIN` ticks), which sorts after or before
//! every finite one, compares equal to itself and prints as `infinity` / `-infinity`.

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::config::ConfigOptions;
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    BinaryExpr, Cast, Expr, ExprSchemable, LogicalPlan, Operator, TryCast,
};
use datafusion::optimizer::AnalyzerRule;

use crate::types::infinity_sign;

/// The analyzer rule (see the module's docs).
#[derive(Debug, Default)]
pub(crate) struct InfiniteLiterals;

impl AnalyzerRule for InfiniteLiterals {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            let schema = merge_schema(&node.inputs());
            // An expression keeps its name (a projection's column is named after it).
            let names = NamePreserver::new(&node);
            node.map_expressions(|e| {
                let name = names.save(&e);
                e.transform_up(|e| rewrite(e, &schema))
                    .map(|t| t.update_data(|e| name.restore(e)))
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "rocklake_infinite_literals"
    }
}

/// One expression, its operands already rewritten.
fn rewrite(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    Ok(match e {
        Expr::Cast(Cast {
            ref expr,
            ref field,
        })
        | Expr::TryCast(TryCast {
            ref expr,
            ref field,
        }) => match infinite_text(expr).and_then(|sign| infinite_value(sign, field.data_type())) {
            Some(v) => Transformed::yes(Expr::Literal(v, None)),
            None => Transformed::no(e),
        },
        // Type coercion compares a timestamp column with text in nanoseconds, casting the
        // column: an infinite column value (the microsecond type's extreme) does not survive
        // that cast. Compared with an infinity, the column is compared in its own unit.
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if comparison(op) => {
            match (unwrap(&left, &right, schema), unwrap(&right, &left, schema)) {
                (Some((l, r)), _) => Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(l),
                    op,
                    Box::new(r),
                ))),
                (_, Some((r, l))) => Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(l),
                    op,
                    Box::new(r),
                ))),
                _ => Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op, right })),
            }
        }
        Expr::InList(InList {
            expr,
            list,
            negated,
        }) => {
            // `x IN (a, b)` with an infinity among them: each compared in `x`'s own unit.
            let mut out = Vec::with_capacity(list.len());
            let mut inner = None;
            for item in &list {
                match unwrap(&expr, item, schema) {
                    Some((x, v)) => {
                        inner = Some(x);
                        out.push(v);
                    }
                    None => break,
                }
            }
            match inner {
                Some(x) if out.len() == list.len() => Transformed::yes(Expr::InList(InList {
                    expr: Box::new(x),
                    list: out,
                    negated,
                })),
                _ => Transformed::no(Expr::InList(InList {
                    expr,
                    list,
                    negated,
                })),
            }
        }
        e => Transformed::no(e),
    })
}

/// Whether `op` compares its operands.
fn comparison(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom
    )
}

/// When `cast` is a timestamp cast to another unit and `other` a literal of that unit: the
/// uncast timestamp and the literal in its unit, if the literal is an infinity (a finite
/// literal is left to DataFusion's casts).
fn unwrap(cast: &Expr, other: &Expr, schema: &DFSchema) -> Option<(Expr, Expr)> {
    let Expr::Cast(Cast { expr, field }) = cast else {
        return None;
    };
    let DataType::Timestamp(_, _) = field.data_type() else {
        return None;
    };
    let from = expr.get_type(schema).ok()?;
    if !matches!(from, DataType::Timestamp(_, _)) {
        return None;
    }
    let sign = match other {
        Expr::Literal(
            ScalarValue::TimestampSecond(Some(t), _)
            | ScalarValue::TimestampMillisecond(Some(t), _)
            | ScalarValue::TimestampMicrosecond(Some(t), _)
            | ScalarValue::TimestampNanosecond(Some(t), _),
            _,
        ) => match *t {
            i64::MAX => true,
            i64::MIN => false,
            _ => return None,
        },
        _ => return None,
    };
    Some((
        expr.as_ref().clone(),
        Expr::Literal(infinite_value(sign, &from)?, None),
    ))
}

/// The sign of an `infinity` / `-infinity` text literal.
fn infinite_text(e: &Expr) -> Option<bool> {
    match e {
        Expr::Literal(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
            _,
        ) => infinity_sign(s),
        _ => None,
    }
}

/// The infinity of sign `positive` as a value of `to`, if `to` is a date or a timestamp.
fn infinite_value(positive: bool, to: &DataType) -> Option<ScalarValue> {
    let ticks = Some(if positive { i64::MAX } else { i64::MIN });
    Some(match to {
        DataType::Date32 => ScalarValue::Date32(Some(if positive { i32::MAX } else { i32::MIN })),
        DataType::Timestamp(unit, tz) => match unit {
            TimeUnit::Second => ScalarValue::TimestampSecond(ticks, tz.clone()),
            TimeUnit::Millisecond => ScalarValue::TimestampMillisecond(ticks, tz.clone()),
            TimeUnit::Microsecond => ScalarValue::TimestampMicrosecond(ticks, tz.clone()),
            TimeUnit::Nanosecond => ScalarValue::TimestampNanosecond(ticks, tz.clone()),
        },
        _ => return None,
    })
}
