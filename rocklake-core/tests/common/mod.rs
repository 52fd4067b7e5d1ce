//! Helpers shared by the core's integration tests.

use rocklake_core::Value;

/// The cells of a `ducklake_table` row named `name` (its id column left NULL, to be filled in).
pub fn table_cells(name: &str) -> Vec<Value> {
    vec![
        Value::Null,
        Value::Text("uuid".into()),
        Value::Int(1),
        Value::Text(name.into()),
    ]
}
