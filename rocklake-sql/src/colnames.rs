//! The names PostgreSQL gives a query's result columns, put on DataFusion's results.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::sql::sqlparser::ast::{Expr, Ident, Query, SelectItem, SetExpr};

use crate::catalog::fold;
use crate::error::{Result, SqlError};
use crate::types::SqlType;

/// The names PostgreSQL gives a query's unaliased result columns (its `FigureColname`): a
/// column's own name, a function's name (`count`, `max`), `?column?` for other expressions,
/// the type's name for a cast of one. `None` where DataFusion's name stands (aliases,
/// wildcards); an empty list when the projection cannot be lined up with the result.
pub(crate) fn pg_column_names(q: &Query) -> Vec<Option<String>> {
    let mut body = q.body.as_ref();
    while let SetExpr::SetOperation { left, .. } = body {
        body = left.as_ref();
    }
    let select = match body {
        SetExpr::Select(s) => s,
        SetExpr::Query(inner) => return pg_column_names(inner),
        _ => return vec![],
    };
    let mut out = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::UnnamedExpr(e) if int4_literal(e) => out.push(Some("\0int4".into())),
            SelectItem::UnnamedExpr(e) => out.push(Some(pg_expr_name(e))),
            SelectItem::ExprWithAlias { .. } => out.push(None),
            // A wildcard's columns keep their names; their number is only known after
            // planning, so one wildcard is marked and the rest lined up around it.
            _ => out.push(Some("\0*".into())),
        }
    }
    if out.iter().filter(|n| n.as_deref() == Some("\0*")).count() > 1 {
        return vec![];
    }
    out
}

/// Give each unaliased result expression that repeats another one's text an alias of its own
/// (`SELECT NULL, NULL`, `INSERT ... SELECT 1000, 1000`): PostgreSQL allows result columns of
/// one name, DataFusion refuses a projection whose expressions share one. Call it after
/// [`pg_column_names`], which still names those columns as PostgreSQL does.
pub(crate) fn alias_repeated(q: &mut Query) {
    fn body(b: &mut SetExpr) {
        match b {
            SetExpr::Select(s) => {
                let text = |item: &SelectItem| match item {
                    SelectItem::UnnamedExpr(e)
                        if !matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) =>
                    {
                        Some(e.to_string())
                    }
                    _ => None,
                };
                let texts: Vec<Option<String>> = s.projection.iter().map(text).collect();
                for (i, item) in s.projection.iter_mut().enumerate() {
                    let Some(t) = &texts[i] else { continue };
                    if texts.iter().filter(|x| x.as_ref() == Some(t)).count() < 2 {
                        continue;
                    }
                    if let SelectItem::UnnamedExpr(e) = item {
                        *item = SelectItem::ExprWithAlias {
                            expr: e.clone(),
                            alias: Ident::new(format!("__rocklake_column_{i}")),
                        };
                    }
                }
            }
            SetExpr::SetOperation { left, right, .. } => {
                body(left);
                body(right);
            }
            SetExpr::Query(inner) => body(&mut inner.body),
            _ => {}
        }
    }
    body(&mut q.body);
}

/// An integer constant that fits `integer`: PostgreSQL's type for it (DataFusion's is
/// `bigint`).
fn int4_literal(e: &Expr) -> bool {
    use datafusion::sql::sqlparser::ast::{UnaryOperator, Value};
    match e {
        Expr::Value(v) => matches!(&v.value, Value::Number(n, _) if n.parse::<i32>().is_ok()),
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => matches!(expr.as_ref(), Expr::Value(v)
            if matches!(&v.value, Value::Number(n, _) if format!("-{n}").parse::<i32>().is_ok())),
        Expr::Nested(inner) => int4_literal(inner),
        _ => false,
    }
}

fn pg_expr_name(e: &Expr) -> String {
    match e {
        Expr::Identifier(i) => fold(i),
        Expr::CompoundIdentifier(parts) => parts.last().map(fold).unwrap_or_default(),
        Expr::Function(f) => match f.name.0.last() {
            Some(datafusion::sql::sqlparser::ast::ObjectNamePart::Identifier(i)) => fold(i),
            _ => "?column?".into(),
        },
        Expr::Nested(inner) => pg_expr_name(inner),
        // `a[1]` is named after its array, as in PostgreSQL.
        Expr::CompoundFieldAccess { root, access_chain }
            if access_chain.iter().all(|a| {
                matches!(a, datafusion::sql::sqlparser::ast::AccessExpr::Subscript(_))
            }) =>
        {
            pg_expr_name(root)
        }
        Expr::Cast {
            expr, data_type, ..
        } => {
            let n = pg_expr_name(expr);
            if n != "?column?" {
                return n;
            }
            match SqlType::parse(&data_type.to_string()) {
                Ok(t) => crate::pg_types::sql_type_name(t).to_string(),
                Err(_) => data_type.to_string().to_lowercase(),
            }
        }
        Expr::Case { .. } => "case".into(),
        Expr::Exists { .. } => "exists".into(),
        Expr::Array(_) => "array".into(),
        Expr::Subquery(q) => pg_column_names(q)
            .first()
            .cloned()
            .flatten()
            .unwrap_or_else(|| "?column?".into()),
        Expr::Extract { .. } => "extract".into(),
        Expr::Substring { .. } => "substring".into(),
        Expr::Position { .. } => "position".into(),
        Expr::Ceil { .. } => "ceil".into(),
        Expr::Floor { .. } => "floor".into(),
        _ => "?column?".into(),
    }
}

/// Give a result PostgreSQL's column names (keeping each field's type and metadata).
pub(crate) fn rename_columns(
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    names: &[Option<String>],
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let Some(renamer) = Renamer::new(schema.fields().len(), names) else {
        return Ok((schema, batches));
    };
    // The batches' own schema: execution may have settled a type the plan left open (a
    // NULL column of a UNION's first branch).
    let renamed = renamer.schema(&batches.first().map_or(schema, |b| b.schema()));
    let batches = batches
        .into_iter()
        .map(|b| renamer.batch(&b))
        .collect::<Result<Vec<_>>>()?;
    Ok((renamed, batches))
}

/// PostgreSQL's names for a result's columns, applied to its schema and to each of its
/// batches as they come (a streamed result is renamed batch by batch).
pub(crate) struct Renamer {
    per_field: Vec<Option<String>>,
    /// `\0int4`: an integer constant, `?column?` of type integer as in PostgreSQL.
    int4: Vec<bool>,
}

impl Renamer {
    /// The renaming of a result of `n` columns to `names` ([`pg_column_names`]); `None` when
    /// it keeps every name.
    pub(crate) fn new(n: usize, names: &[Option<String>]) -> Option<Renamer> {
        if names.is_empty() || names.len() > n + 1 {
            return None;
        }
        let star = names.iter().position(|x| x.as_deref() == Some("\0*"));
        let mut per_field: Vec<Option<String>> = Vec::with_capacity(n);
        match star {
            None if names.len() == n => per_field.extend(names.iter().cloned()),
            None => return None,
            Some(at) => {
                let span = n + 1 - names.len();
                per_field.extend(names[..at].iter().cloned());
                per_field.extend(std::iter::repeat_n(None, span));
                per_field.extend(names[at + 1..].iter().cloned());
            }
        }
        if per_field.iter().all(Option::is_none) {
            return None;
        }
        let int4 = per_field
            .iter()
            .map(|n| n.as_deref() == Some("\0int4"))
            .collect();
        Some(Renamer { per_field, int4 })
    }

    /// `schema` with the new names.
    pub(crate) fn schema(&self, schema: &SchemaRef) -> SchemaRef {
        let fields: Vec<datafusion::arrow::datatypes::Field> = schema
            .fields()
            .iter()
            .zip(&self.per_field)
            .map(|(f, name)| match name.as_deref() {
                Some("\0int4") if f.data_type() == &DataType::Int64 => f
                    .as_ref()
                    .clone()
                    .with_name("?column?")
                    .with_data_type(DataType::Int32),
                Some("\0int4") => f.as_ref().clone().with_name("?column?"),
                Some(name) => f.as_ref().clone().with_name(name),
                None => f.as_ref().clone(),
            })
            .collect();
        Arc::new(datafusion::arrow::datatypes::Schema::new_with_metadata(
            fields,
            schema.metadata().clone(),
        ))
    }

    /// `b` with the new names, an integer constant's column cast to `int4`.
    pub(crate) fn batch(&self, b: &RecordBatch) -> Result<RecordBatch> {
        let columns = b
            .columns()
            .iter()
            .zip(&self.int4)
            .map(|(c, small)| {
                if *small && c.data_type() == &DataType::Int64 {
                    datafusion::arrow::compute::cast(c, &DataType::Int32)
                } else {
                    Ok(c.clone())
                }
            })
            .collect::<std::result::Result<Vec<_>, _>>()
            .and_then(|columns| RecordBatch::try_new(self.schema(&b.schema()), columns))
            .map_err(|e| SqlError::internal(format!("renaming result columns: {e}")))?;
        Ok(columns)
    }
}
