//! The whole-store verification of `rocklake verify`, on the in-memory reference backend: a store
//! written through the catalog is clean, and bytes written around it are reported.

use std::sync::Arc;

use rocklake_core::keys::{self, Key};
use rocklake_core::keystone::{self, IdSpace};
use rocklake_core::verify::{verify, Finding, Report};
use rocklake_core::{
    Durability, KeyChoice, Keyspace, KvBackend, MemoryBackend, Row, Value, WriteBatch,
};

/// A catalog with rows in a plain, a versioned and a child id space.
async fn written_store() -> Arc<dyn KvBackend> {
    let backend: Arc<dyn KvBackend> = Arc::new(MemoryBackend::default());
    let cat = Keyspace::open(backend.clone()).await.unwrap();
    let mut t = cat.begin().await.unwrap();
    let table = t
        .insert(
            &keystone::TABLE,
            KeyChoice::Named(500),
            vec![
                Value::Null,
                Value::Text("uuid".into()),
                Value::Int(1),
                Value::Text("orders".into()),
            ],
        )
        .await
        .unwrap();
    t.insert(&keystone::TABLE, KeyChoice::Issued, vec![])
        .await
        .unwrap();
    t.insert_child(&keystone::COLUMN, table.id, KeyChoice::Issued, vec![])
        .await
        .unwrap();
    t.insert(&keystone::TAG, KeyChoice::Issued, vec![])
        .await
        .unwrap();
    t.commit().await.unwrap();
    // Not closed: closing the catalog closes its backend.
    drop(cat);
    backend
}

async fn check(backend: &Arc<dyn KvBackend>) -> Report {
    let view = backend.view().await.unwrap();
    let mut progress = Vec::new();
    let report = verify(view.as_ref(), |walked, findings| {
        progress.push((walked, findings))
    })
    .await
    .unwrap();
    assert!(progress.is_empty(), "progress only every 100k keys");
    report
}

async fn put(backend: &Arc<dyn KvBackend>, key: Vec<u8>, value: Vec<u8>) {
    let mut b = WriteBatch::new();
    b.put(key, value);
    backend.write(b, Durability::Durable).await.unwrap();
}

#[tokio::test]
async fn a_store_written_through_the_catalog_is_clean() {
    let backend = written_store().await;
    let report = check(&backend).await;
    assert!(report.is_clean(), "{:?}", report.findings);
    assert!(report.keys > 4, "walked {} keys", report.keys);
    assert_eq!(
        check(&(Arc::new(MemoryBackend::default()) as Arc<dyn KvBackend>)).await,
        Report::default()
    );
}

#[tokio::test]
async fn an_undecodable_key_is_reported_with_its_bytes() {
    let backend = written_store().await;
    // A table-row key one byte short of its fields.
    put(&backend, vec![0x05, 0, 0, 0], vec![1]).await;
    let report = check(&backend).await;
    assert_eq!(report.findings.len(), 1, "{:?}", report.findings);
    assert!(matches!(&report.findings[0], Finding::Key { key, .. } if key == &[0x05, 0, 0, 0]));
    let text = report.findings[0].to_string();
    assert!(text.starts_with("key [05 00 00 00]: "), "{text}");
}

/// A row of `space` written raw under `fields` (the key's fields but the snapshot), its id
/// column holding `id_cell`.
async fn put_row(
    backend: &Arc<dyn KvBackend>,
    space: &IdSpace,
    fields: &[u64],
    id_cell: Value,
) -> Vec<u8> {
    let snapshot = 1;
    let table = space.table.info().unwrap();
    let mut key_fields = fields.to_vec();
    key_fields.push(snapshot);
    let key = keys::row_key(space.table, &key_fields);
    let column = table.column_index(space.id_column().unwrap()).unwrap();
    let mut cells = vec![Value::Null; column + 1];
    cells[column] = id_cell;
    let value = Row::new(snapshot, cells).encode(table, &key).unwrap();
    put(backend, key.clone(), value).await;
    key
}

#[tokio::test]
async fn a_row_whose_id_column_contradicts_its_key_is_reported() {
    let backend = written_store().await;
    // Agreeing or NULL id cells are fine.
    put_row(&backend, &keystone::TABLE, &[600], Value::Int(600)).await;
    put_row(&backend, &keystone::TABLE, &[601], Value::Null).await;
    put_row(&backend, &keystone::COLUMN, &[600, 9], Value::Int(9)).await;
    assert!(check(&backend).await.is_clean());

    // ducklake_table: the id is the key's first field.
    let table_row = put_row(&backend, &keystone::TABLE, &[700], Value::Int(7)).await;
    // ducklake_column: the id is the second field, after the table id (700 here, which must
    // not be mistaken for the column id).
    let column_row = put_row(&backend, &keystone::COLUMN, &[700, 12], Value::Int(700)).await;
    let report = check(&backend).await;
    let table_key = Key::decode(&table_row).unwrap();
    let column_key = Key::decode(&column_row).unwrap();
    assert_eq!(
        report.findings,
        vec![
            Finding::IdColumn {
                key: table_key.clone(),
                column: "table_id",
                key_id: 700,
                cell: Value::Int(7),
            },
            Finding::IdColumn {
                key: column_key,
                column: "column_id",
                key_id: 12,
                cell: Value::Int(700),
            },
        ],
        "findings in key order"
    );
    let text = report.findings[0].to_string();
    assert_eq!(
        text,
        format!("{table_key}: column table_id holds 7 but the key's id is 700")
    );
}
