//! PostgreSQL's functions that DataFusion lacks, registered on each session's context.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};

use crate::provider::Shared;

/// The functions a PostgreSQL client calls on connecting: `version()`, `current_database()`,
/// `current_schema()`, `to_regclass(name)`, `pg_backend_pid()`.
pub(crate) fn register_pg_functions(ctx: &SessionContext, shared: &Arc<Shared>) {
    let version = crate::pg_catalog::version_string();
    ctx.register_udf(create_udf(
        "version",
        vec![],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(move |_| {
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                version.clone(),
            ))))
        }),
    ));
    let sh = shared.clone();
    ctx.register_udf(create_udf(
        "current_database",
        vec![],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |_| {
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                sh.database_name(),
            ))))
        }),
    ));
    ctx.register_udf(create_udf(
        "current_schema",
        vec![],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(|_| {
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                "public".into(),
            ))))
        }),
    ));
    ctx.register_udf(create_udf(
        "pg_backend_pid",
        vec![],
        DataType::Int32,
        Volatility::Stable,
        Arc::new(|_| {
            Ok(ColumnarValue::Scalar(ScalarValue::Int32(Some(
                std::process::id() as i32,
            ))))
        }),
    ));
    let sh = shared.clone();
    ctx.register_udf(create_udf(
        "pg_database_size",
        vec![DataType::Utf8],
        DataType::Int64,
        Volatility::Stable,
        Arc::new(move |_| {
            Ok(ColumnarValue::Scalar(ScalarValue::Int64(Some(
                sh.database_size.load(Ordering::Acquire),
            ))))
        }),
    ));
    let sh = shared.clone();
    ctx.register_udf(create_udf(
        "to_regclass",
        vec![DataType::Utf8],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |args| {
            let cat = sh.current_catalog();
            let lookup = |name: &str| -> Option<String> {
                let parts: Vec<String> = name
                    .split('.')
                    .map(|p| {
                        if p.starts_with('"') && p.ends_with('"') && p.len() >= 2 {
                            p[1..p.len() - 1].replace("\"\"", "\"")
                        } else {
                            p.to_lowercase()
                        }
                    })
                    .collect();
                let (schema, table) = match parts.as_slice() {
                    [t] => ("public".to_string(), t.clone()),
                    [s, t] => (s.clone(), t.clone()),
                    _ => return None,
                };
                if crate::pg_catalog::PG_CATALOG_TABLES.contains(&table.as_str())
                    && (schema == "pg_catalog" || parts.len() == 1)
                {
                    return Some(table);
                }
                cat.tables
                    .contains_key(&(schema.clone(), table.clone()))
                    .then(|| {
                        if schema == "public" {
                            table
                        } else {
                            format!("{schema}.{table}")
                        }
                    })
            };
            match &args[0] {
                ColumnarValue::Scalar(v) => {
                    let name = match v {
                        ScalarValue::Utf8(n)
                        | ScalarValue::LargeUtf8(n)
                        | ScalarValue::Utf8View(n) => n.clone(),
                        _ => None,
                    };
                    Ok(ColumnarValue::Scalar(ScalarValue::Utf8(
                        name.and_then(|n| lookup(&n)),
                    )))
                }
                ColumnarValue::Array(a) => {
                    use datafusion::arrow::array::{AsArray, StringArray};
                    let a = datafusion::arrow::compute::cast(a, &DataType::Utf8)?;
                    let out: StringArray = a
                        .as_string::<i32>()
                        .iter()
                        .map(|n| n.and_then(&lookup))
                        .collect();
                    Ok(ColumnarValue::Array(Arc::new(out)))
                }
            }
        }),
    ));
}
