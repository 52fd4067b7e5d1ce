//! Keystone helpers: a `ducklake_table` row, and one-statement transactions that name, issue
//! and delete its key. The checks use them, and so do core's own tests (a dev-dependency), so
//! the two never drift apart.

use std::collections::BTreeMap;

use rocklake_core::backend::{KeyRange, Order, Pager, ReadView};
use rocklake_core::keys::{self, FileColumnStatsKey, Key};
use rocklake_core::values::{Binding, Row};
use rocklake_core::{keystone, tags, Error, KeyChoice, Keyspace, Transaction, Value};

/// Rows the crash and power-loss checks write with each table row, keyed by its id.
pub const COMPANIONS: u64 = 3;

/// Write the [`COMPANIONS`] `ducklake_file_column_stats` rows of table row `id` at `snapshot`.
pub fn put_companions(t: &mut Transaction, id: u64, snapshot: u64) -> Result<(), Error> {
    for c in 1..=COMPANIONS {
        let key = FileColumnStatsKey {
            file_id: id,
            column_id: c,
        }
        .encode();
        let cells = vec![Value::Int(id as i64), Value::Int(0), Value::Int(c as i64)];
        t.put_row(&key, &Row::new(snapshot, cells))?;
    }
    Ok(())
}

/// Remove the companion rows of table row `id`.
pub fn delete_companions(t: &mut Transaction, id: u64) -> Result<(), Error> {
    for c in 1..=COMPANIONS {
        t.delete_key(
            &FileColumnStatsKey {
                file_id: id,
                column_id: c,
            }
            .encode(),
        )?;
    }
    Ok(())
}

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

/// What a crash check reads back from one view: every bound key of the table space (id ->
/// whether its row is live) and the number of companion rows per table key.
pub async fn table_keys(
    view: &dyn ReadView,
) -> Result<(BTreeMap<u64, bool>, BTreeMap<u64, u64>), Error> {
    let mut bound = BTreeMap::new();
    let range = KeyRange::prefix(&keys::binding_prefix(keystone::TABLE.code()));
    let mut pager = Pager::new(view, range, Order::Ascending, 1000);
    while let Some(page) = pager.next_page().await? {
        for (k, v) in page {
            if let Ok(Key::Binding { id, .. }) = Key::decode(&k) {
                bound.insert(id, !Binding::decode_at(&k, &v)?.is_deleted());
            }
        }
    }
    let mut companions = BTreeMap::new();
    let range = KeyRange::prefix(&[tags::FILE_COLUMN_STATS.0]);
    let mut pager = Pager::new(view, range, Order::Ascending, 1000);
    while let Some(page) = pager.next_page().await? {
        for (k, _) in page {
            if let Ok(Key::Row { fields, .. }) = Key::decode(&k) {
                *companions.entry(fields[0]).or_default() += 1;
            }
        }
    }
    Ok((bound, companions))
}
