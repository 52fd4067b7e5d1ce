//! The whole-store verification of `rocklake verify`, on the in-memory reference backend: a store
//! written through the catalog is clean, and bytes written around it are reported.

use std::sync::Arc;

use rocklake_core::keystone;
use rocklake_core::verify::{verify, Finding, Report};
use rocklake_core::{Catalog, Durability, KeyChoice, KvBackend, MemoryBackend, Value, WriteBatch};

/// A catalog with rows in a plain, a versioned and a child id space.
async fn written_store() -> Arc<dyn KvBackend> {
    let backend: Arc<dyn KvBackend> = Arc::new(MemoryBackend::new());
    let cat = Catalog::open(backend.clone()).await.unwrap();
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
        check(&(Arc::new(MemoryBackend::new()) as Arc<dyn KvBackend>)).await,
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
