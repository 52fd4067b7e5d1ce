//! Keystone helpers: a `ducklake_table` row, and one-statement transactions that name, issue
//! and delete its key. The checks use them, and so do core's own tests (a dev-dependency), so
//! the two never drift apart.

use rocklake_core::{keystone, Error, KeyChoice, Keyspace, Value};

/// The cells of a `ducklake_table` row named `name` (its id column left NULL, to be filled in).
pub fn table_cells(name: &str) -> Vec<Value> {
    vec![
        Value::Null,
        Value::Text("uuid".into()),
        Value::Int(1),
        Value::Text(name.into()),
    ]
}

/// Insert a table row under the named key `id`, in a transaction of its own.
pub async fn name_key(ks: &Keyspace, id: u64) -> Result<u64, Error> {
    let mut t = ks.begin().await?;
    let p = t
        .insert(&keystone::TABLE, KeyChoice::Named(id), table_cells("named"))
        .await?;
    t.commit().await?;
    Ok(p.id)
}

/// Insert a table row under an issued key, in a transaction of its own; returns the key.
pub async fn issue_key(ks: &Keyspace) -> Result<u64, Error> {
    let mut t = ks.begin().await?;
    let p = t
        .insert(&keystone::TABLE, KeyChoice::Issued, table_cells("issued"))
        .await?;
    t.commit().await?;
    Ok(p.id)
}

/// Delete the table row of key `id`, in a transaction of its own; whether there was one.
pub async fn delete_key(ks: &Keyspace, id: u64) -> Result<bool, Error> {
    let mut t = ks.begin().await?;
    let d = t.delete(&keystone::TABLE, id).await?;
    t.commit().await?;
    Ok(d)
}
