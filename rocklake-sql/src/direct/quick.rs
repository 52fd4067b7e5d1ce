//! The WHERE and SET expressions DuckLake sends, made as DataFusion's SQL planner, its coercion
//! and its simplifier leave them, without running the three (they were most of an UPDATE's
//! instructions, and a part of every read's).
//!
//! Taken: `column <op> literal` (`=`, `<>`, `<`, `<=`, `>`, `>=`), `column IS [NOT] NULL` on a
//! nullable column, and `AND`/`OR` of those (in parentheses or not) in which no comparison
//! appears twice; as a SET value, also `column + literal` and `column - literal`. The column and
//! the literal must be of one type, `Int64` or `Utf8`, and the literal not NULL (nor 0 beside
//! `+` and `-`). Then coercion adds no cast, and no rule of the simplifier applies: none
//! rewrites a comparison of a column with a non-NULL, non-boolean literal of its own type, the
//! rules for `AND` and `OR` need a boolean literal, a `NOT` or a condition that appears twice,
//! `IS NULL` is rewritten only on a column that cannot be NULL, and `x + 0`, `x - 0` are the
//! arithmetic ones. Any other form is `None`, and [`super::logical`] plans it; debug builds
//! check every answer here against the planned one.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::logical_expr::{BinaryExpr, Expr as DfExpr, Operator};
use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr};

use super::values::sql_literal;
use crate::catalog::fold;

/// `e` over `schema` as planned, coerced and simplified, for the forms above; `None` otherwise.
pub(super) fn expr(e: &Expr, schema: &DFSchema) -> Option<DfExpr> {
    if let Some(a) = arithmetic(e, schema) {
        return Some(a);
    }
    let mut comparisons = Vec::new();
    let out = condition(e, schema, &mut comparisons)?;
    for (i, c) in comparisons.iter().enumerate() {
        if comparisons[..i].contains(c) {
            return None;
        }
    }
    Some(out)
}

/// `column + literal` or `column - literal`.
fn arithmetic(e: &Expr, schema: &DFSchema) -> Option<DfExpr> {
    let Expr::BinaryOp { left, op, right } = e else {
        return None;
    };
    let op = match op {
        BinaryOperator::Plus => Operator::Plus,
        BinaryOperator::Minus => Operator::Minus,
        _ => return None,
    };
    let (column, ty, _) = column(left, schema)?;
    let literal = literal(right, &ty)?;
    if ty != DataType::Int64 || matches!(literal, DfExpr::Literal(ScalarValue::Int64(Some(0)), _)) {
        return None;
    }
    Some(binary(column, op, literal))
}

/// A condition: comparisons, null tests, and `AND`/`OR` of conditions; each comparison or null
/// test made is pushed on `made`.
fn condition(e: &Expr, schema: &DFSchema, made: &mut Vec<DfExpr>) -> Option<DfExpr> {
    let out = match e {
        Expr::Nested(inner) => return condition(inner, schema, made),
        Expr::BinaryOp { left, op, right } => {
            let op = match op {
                BinaryOperator::And => Operator::And,
                BinaryOperator::Or => Operator::Or,
                BinaryOperator::Eq => Operator::Eq,
                BinaryOperator::NotEq => Operator::NotEq,
                BinaryOperator::Lt => Operator::Lt,
                BinaryOperator::LtEq => Operator::LtEq,
                BinaryOperator::Gt => Operator::Gt,
                BinaryOperator::GtEq => Operator::GtEq,
                _ => return None,
            };
            if matches!(op, Operator::And | Operator::Or) {
                let l = condition(left, schema, made)?;
                let r = condition(right, schema, made)?;
                return Some(binary(l, op, r));
            }
            let (column, ty, _) = column(left, schema)?;
            binary(column, op, literal(right, &ty)?)
        }
        Expr::IsNull(inner) | Expr::IsNotNull(inner) => {
            let (column, _, nullable) = column(inner, schema)?;
            if !nullable {
                return None;
            }
            match e {
                Expr::IsNull(_) => DfExpr::IsNull(Box::new(column)),
                _ => DfExpr::IsNotNull(Box::new(column)),
            }
        }
        _ => return None,
    };
    made.push(out.clone());
    Some(out)
}

/// A bare column name of `schema` (one unqualified identifier, resolved as the planner does),
/// with its type and whether it may be NULL.
fn column(e: &Expr, schema: &DFSchema) -> Option<(DfExpr, DataType, bool)> {
    let Expr::Identifier(ident) = e else {
        return None;
    };
    let name = fold(ident);
    let (qualifier, field) = schema.qualified_field_with_unqualified_name(&name).ok()?;
    Some((
        DfExpr::Column(Column::from((qualifier, field))),
        field.data_type().clone(),
        field.is_nullable(),
    ))
}

/// A non-NULL literal of type `ty`, `Int64` or `Utf8`.
fn literal(e: &Expr, ty: &DataType) -> Option<DfExpr> {
    let (t, v) = sql_literal(e)?;
    (t == *ty && matches!(t, DataType::Int64 | DataType::Utf8) && !v.is_null())
        .then_some(DfExpr::Literal(v, None))
}

fn binary(left: DfExpr, op: Operator, right: DfExpr) -> DfExpr {
    DfExpr::BinaryExpr(BinaryExpr::new(Box::new(left), op, Box::new(right)))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::common::TableReference;
    use datafusion::prelude::SessionContext;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    use super::*;

    fn schema() -> DFSchema {
        let fields = vec![
            Field::new("table_id", DataType::Int64, false),
            Field::new("begin_snapshot", DataType::Int64, true),
            Field::new("end_snapshot", DataType::Int64, true),
            Field::new("path", DataType::Utf8, true),
            Field::new("flag", DataType::Boolean, true),
            Field::new("small", DataType::Int32, true),
        ];
        DFSchema::try_from_qualified_schema(
            TableReference::bare("ducklake_data_file"),
            &Schema::new(fields),
        )
        .unwrap()
    }

    fn sql(e: &str) -> Expr {
        Parser::new(&PostgreSqlDialect {})
            .try_with_sql(e)
            .unwrap()
            .parse_expr()
            .unwrap()
    }

    #[test]
    fn taken_forms_are_what_datafusion_plans() {
        let state = SessionContext::new().state();
        let schema = schema();
        for e in [
            "table_id = 3",
            "table_id <> -3",
            "path = 'data/f1.parquet'",
            "table_id = 2 AND begin_snapshot <= 7 AND (end_snapshot IS NULL OR end_snapshot > 7)",
            "end_snapshot IS NOT NULL OR path >= 'a'",
            "begin_snapshot + 1000",
            "begin_snapshot - 5",
            "\"table_id\" < 4",
        ] {
            let e = sql(e);
            let quick = expr(&e, &schema).unwrap_or_else(|| panic!("not taken: {e}"));
            let planned = super::super::planned(&state, &e, &schema).unwrap();
            assert_eq!(Some(quick), planned, "{e}");
        }
    }

    #[test]
    fn forms_the_simplifier_or_coercion_would_change_are_left_to_datafusion() {
        let schema = schema();
        for e in [
            // A cast (Int32 column, Int64 literal), a boolean, a NULL, a 0 beside `+`.
            "small = 3",
            "flag = true",
            "table_id = NULL",
            "begin_snapshot + 0",
            // A condition twice; NOT; IS NULL on a column that cannot be NULL.
            "table_id = 2 AND table_id = 2",
            "end_snapshot IS NULL OR (end_snapshot IS NULL AND table_id = 1)",
            "NOT table_id = 2",
            "table_id IS NULL",
            // The literal first, an IN list, a qualified or unknown name.
            "3 = table_id",
            "table_id IN (2)",
            "ducklake_data_file.table_id = 2",
            "nope = 2",
        ] {
            assert!(expr(&sql(e), &schema).is_none(), "{e}");
        }
    }
}
