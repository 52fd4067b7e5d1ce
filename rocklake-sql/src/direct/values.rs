//! An INSERT's `VALUES` list as one Arrow batch, for the direct path.
//!
//! The list is what DataFusion's `LogicalPlanBuilder::values` makes of it: each column of the
//! one type the builder unifies it to, each value evaluated by DataFusion's expressions. Two
//! shortcuts give that same batch for the lists DuckLake sends (literals, each cast to its
//! column's type) without planning them: literals of the AST read as DataFusion's SQL planner
//! reads them ([`sql_literal`]), and lists whose columns need no unifying skip the builder's
//! schema inference ([`typed_rows`]). Anything else takes the builder, and
//! [`crate::DirectMode::Check`] compares every answer with DataFusion's whole plan.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::concat;
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::{Expr as DfExpr, LogicalPlan, LogicalPlanBuilder};
use datafusion::sql::sqlparser::ast::{Expr, Values};

use super::{evaluable, unsimplified};
use crate::error::{Result, SqlError};

/// The rows of a `VALUES` list as one batch, each column of the one type DataFusion unifies
/// it to; `None` when a value is not the direct path's.
pub(crate) fn batch(state: &SessionState, v: &Values) -> Result<Option<RecordBatch>> {
    if v.value_keyword {
        return Ok(None);
    }
    let plain: Option<Vec<Vec<(DataType, ScalarValue)>>> = v
        .rows
        .iter()
        .map(|row| row.iter().map(sql_literal).collect())
        .collect();
    if let Some(plain) = plain {
        if let Some(b) = typed_rows(plain)? {
            return Ok(Some(b));
        }
    }
    let empty = DFSchema::empty();
    let mut rows = Vec::with_capacity(v.rows.len());
    for row in &v.rows {
        let mut exprs = Vec::with_capacity(row.len());
        for e in row.iter() {
            // Unsimplified here: the builder unifies the types first, as the SQL planner's
            // VALUES does, and each value is simplified after.
            exprs.push(unsimplified(state, e, &empty)?);
        }
        rows.push(exprs);
    }
    if let Some(b) = literal_rows(&rows)? {
        return Ok(Some(b));
    }
    let plan = LogicalPlanBuilder::values(rows)?.build()?;
    let LogicalPlan::Values(values) = plan else {
        return Err(SqlError::internal("VALUES did not plan as VALUES"));
    };
    let schema: SchemaRef = Arc::new(values.schema.as_arrow().clone());
    let one = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    let n = values.values.len();
    let mut columns: Vec<Vec<ArrayRef>> = vec![Vec::with_capacity(n); schema.fields().len()];
    for row in values.values {
        for (j, e) in row.into_iter().enumerate() {
            let plain = evaluable(&e, false)?;
            if !plain {
                return Ok(None);
            }
            let array = match &e {
                DfExpr::Literal(v, _) => v.to_array_of_size(1)?,
                DfExpr::Cast(c) => match c.expr.as_ref() {
                    DfExpr::Literal(v, _) => v.cast_to(c.field.data_type())?.to_array_of_size(1)?,
                    _ => state
                        .create_physical_expr(e.clone(), &empty)?
                        .evaluate(&one)?
                        .into_array(1)?,
                },
                _ => state
                    .create_physical_expr(e, &empty)?
                    .evaluate(&one)?
                    .into_array(1)?,
            };
            columns[j].push(array);
        }
    }
    let arrays: Vec<ArrayRef> = columns
        .iter()
        .zip(schema.fields())
        .map(|(parts, f)| {
            let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
            let a = concat(&refs)?;
            // A NULL literal unified into a typed column arrives typed already; anything else
            // of another type is cast as the plan's schema says.
            if a.data_type() == f.data_type() {
                Ok(a)
            } else {
                Ok(datafusion::arrow::compute::cast(&a, f.data_type())?)
            }
        })
        .collect::<Result<_>>()?;
    Ok(Some(RecordBatch::try_new_with_options(
        schema,
        arrays,
        &RecordBatchOptions::new().with_row_count(Some(n)),
    )?))
}

/// The batch [`batch`] gives for rows of literals and casts of literals (what an INSERT's
/// VALUES list is once each value is cast to its column) whose columns need no unifying: every
/// value of a column of one type, or a bare NULL. That is the case where DataFusion's
/// `LogicalPlanBuilder::values` changes nothing but the NULLs (typed to their column), so its
/// schema inference is skipped: it derives each value's field, display name included, only to
/// read its metadata, and that cost more than the rest of the INSERT. `None` for anything
/// else (the builder decides, as before).
fn literal_rows(rows: &[Vec<DfExpr>]) -> Result<Option<RecordBatch>> {
    let mut typed = Vec::with_capacity(rows.len());
    for row in rows {
        let mut values = Vec::with_capacity(row.len());
        for e in row {
            let value = match e {
                DfExpr::Literal(v, None) => (v.data_type(), v.clone()),
                DfExpr::Cast(c) if c.field.metadata().is_empty() => match c.expr.as_ref() {
                    DfExpr::Literal(v, None) => {
                        (c.field.data_type().clone(), v.cast_to(c.field.data_type())?)
                    }
                    _ => return Ok(None),
                },
                _ => return Ok(None),
            };
            values.push(value);
        }
        typed.push(values);
    }
    typed_rows(typed)
}

/// The type DataFusion's SQL planner gives a literal of the AST, and its value, for the
/// forms an INSERT's VALUES list is made of (after `cast_values_to_targets`): a string, an
/// integer that fits `i64` (negated or not), a boolean, NULL, and `CAST` of one of those to an
/// integer, floating-point or boolean type. Each is what DataFusion plans (`lit` of the
/// string, integer or boolean, `ScalarValue::Null`, `Expr::Cast` to the type its planner maps
/// the SQL type to) and evaluates (`ScalarValue::cast_to`), without building the expression:
/// planning literals through DataFusion's SQL planner was the largest part of an INSERT.
/// `None` for any other form, or a cast that fails (DataFusion then plans it, and its error
/// is the statement's).
pub(super) fn sql_literal(e: &Expr) -> Option<(DataType, ScalarValue)> {
    use datafusion::sql::sqlparser::ast::{CastKind, DataType as D, UnaryOperator, Value};
    let integer = |digits: &str, negative: bool| -> Option<ScalarValue> {
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: i64 = if negative {
            format!("-{digits}").parse().ok()?
        } else {
            digits.parse().ok()?
        };
        Some(ScalarValue::Int64(Some(n)))
    };
    let v = match e {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => integer(n, false)?,
            Value::SingleQuotedString(s) => ScalarValue::Utf8(Some(s.clone())),
            Value::Boolean(b) => ScalarValue::Boolean(Some(*b)),
            Value::Null => ScalarValue::Null,
            _ => return None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => integer(n, true)?,
                _ => return None,
            },
            _ => return None,
        },
        Expr::Cast {
            kind: CastKind::Cast,
            expr,
            data_type,
            array: false,
            format: None,
        } => {
            let to = match data_type {
                D::SmallInt(None) | D::Int2(None) => DataType::Int16,
                D::Int(None) | D::Integer(None) | D::Int4(None) => DataType::Int32,
                D::BigInt(None) | D::Int8(None) => DataType::Int64,
                D::Real | D::Float4 => DataType::Float32,
                D::DoublePrecision | D::Float8 => DataType::Float64,
                D::Boolean | D::Bool => DataType::Boolean,
                _ => return None,
            };
            let (_, inner) = sql_literal(expr)?;
            let v = inner.cast_to(&to).ok()?;
            return Some((to, v));
        }
        _ => return None,
    };
    Some((v.data_type(), v))
}

/// One batch of rows of values, each with the type of the expression it came from (which the
/// value has, bar NULLs): `None` unless each column is of one type (NULL aside). NULLs take
/// their column's type, a column of NULLs only is DataFusion's `Null` type, and columns are
/// named `column1`... as `LogicalPlanBuilder::values` names them.
fn typed_rows(rows: Vec<Vec<(DataType, ScalarValue)>>) -> Result<Option<RecordBatch>> {
    use datafusion::arrow::datatypes::Field;
    let Some(width) = rows.first().map(|r| r.len()) else {
        return Ok(None);
    };
    if width == 0 || rows.iter().any(|r| r.len() != width) {
        return Ok(None);
    }
    let n = rows.len();
    let mut types: Vec<Option<DataType>> = vec![None; width];
    let mut nullable = vec![false; width];
    let mut columns: Vec<Vec<ScalarValue>> = vec![Vec::with_capacity(n); width];
    for row in rows {
        for (j, (ty, v)) in row.into_iter().enumerate() {
            nullable[j] |= v.is_null();
            if ty != DataType::Null {
                match &types[j] {
                    Some(t) if *t != ty => return Ok(None),
                    Some(_) => {}
                    None => types[j] = Some(ty),
                }
            }
            columns[j].push(v);
        }
    }
    let mut fields = Vec::with_capacity(width);
    let mut arrays = Vec::with_capacity(width);
    for (j, (ty, mut values)) in types.into_iter().zip(columns).enumerate() {
        let (ty, nullable) = match ty {
            Some(t) => (t, nullable[j]),
            None => (DataType::Null, true),
        };
        for v in values.iter_mut() {
            if matches!(v, ScalarValue::Null) && ty != DataType::Null {
                *v = ScalarValue::try_from(&ty)?;
            }
        }
        let array = column_array(&ty, values)?;
        if array.data_type() != &ty {
            return Ok(None);
        }
        fields.push(Field::new(column_name(j), ty, nullable));
        arrays.push(array);
    }
    Ok(Some(RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        arrays,
        &RecordBatchOptions::new().with_row_count(Some(n)),
    )?))
}

/// The array of one column's values, all of type `ty` (NULLs typed): built directly for the
/// types DuckLake's rows are made of, by `ScalarValue::iter_to_array` (which the direct builds
/// give the same array as, at a fraction of its cost) for any other.
fn column_array(ty: &DataType, values: Vec<ScalarValue>) -> Result<ArrayRef> {
    use datafusion::arrow::array::{BooleanArray, Float64Array, Int64Array, StringArray};
    let n = values.len();
    let array: ArrayRef = match ty {
        DataType::Int64 if values.iter().all(|v| matches!(v, ScalarValue::Int64(_))) => {
            Arc::new(Int64Array::from_iter(values.iter().map(|v| match v {
                ScalarValue::Int64(x) => *x,
                _ => None,
            })))
        }
        DataType::Utf8 if values.iter().all(|v| matches!(v, ScalarValue::Utf8(_))) => {
            let bytes = values
                .iter()
                .map(|v| match v {
                    ScalarValue::Utf8(Some(s)) => s.len(),
                    _ => 0,
                })
                .sum();
            let mut b = datafusion::arrow::array::StringBuilder::with_capacity(n, bytes);
            for v in &values {
                if let ScalarValue::Utf8(x) = v {
                    b.append_option(x.as_deref());
                }
            }
            let a: StringArray = b.finish();
            Arc::new(a)
        }
        DataType::Boolean if values.iter().all(|v| matches!(v, ScalarValue::Boolean(_))) => {
            Arc::new(BooleanArray::from_iter(values.iter().map(|v| match v {
                ScalarValue::Boolean(x) => *x,
                _ => None,
            })))
        }
        DataType::Float64 if values.iter().all(|v| matches!(v, ScalarValue::Float64(_))) => {
            Arc::new(Float64Array::from_iter(values.iter().map(|v| match v {
                ScalarValue::Float64(x) => *x,
                _ => None,
            })))
        }
        _ => ScalarValue::iter_to_array(values)?,
    };
    Ok(array)
}

/// `column{j + 1}`, the name `LogicalPlanBuilder::values` gives the `j`-th column.
fn column_name(j: usize) -> String {
    const NAMES: [&str; 16] = [
        "column1", "column2", "column3", "column4", "column5", "column6", "column7", "column8",
        "column9", "column10", "column11", "column12", "column13", "column14", "column15",
        "column16",
    ];
    match NAMES.get(j) {
        Some(name) => (*name).to_string(),
        None => format!("column{}", j + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_column_arrays_are_datafusions() {
        let lists: Vec<(DataType, Vec<ScalarValue>)> = vec![
            (
                DataType::Int64,
                vec![ScalarValue::Int64(Some(-3)), ScalarValue::Int64(None)],
            ),
            (
                DataType::Utf8,
                vec![
                    ScalarValue::Utf8(Some("a".into())),
                    ScalarValue::Utf8(None),
                    ScalarValue::Utf8(Some(String::new())),
                ],
            ),
            (
                DataType::Boolean,
                vec![ScalarValue::Boolean(None), ScalarValue::Boolean(Some(true))],
            ),
            (
                DataType::Float64,
                vec![ScalarValue::Float64(Some(0.5)), ScalarValue::Float64(None)],
            ),
            (DataType::Int32, vec![ScalarValue::Int32(Some(7))]),
        ];
        for (ty, values) in lists {
            let ours = column_array(&ty, values.clone()).unwrap();
            let theirs = ScalarValue::iter_to_array(values).unwrap();
            assert_eq!(ours.as_ref(), theirs.as_ref(), "{ty}");
            assert_eq!(ours.data_type(), &ty);
        }
        for j in [0, 9, 15, 16, 99] {
            assert_eq!(column_name(j), format!("column{}", j + 1));
        }
    }
}
