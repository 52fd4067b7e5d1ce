//! What only RocksDB does: its `LOCK` file refuses a second open, and a view keeps the database
//! (and the lock) alive after close until the view is dropped. Everything else is the suite's
//! (`tests/conformance.rs`).

use rocklake_core::{Error, KvBackend, ReadView};

#[tokio::test]
async fn a_second_opener_is_locked_out_until_the_last_view_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let db = rocklake_rocksdb::open(dir.path()).await.unwrap();
    match rocklake_rocksdb::open(dir.path()).await {
        Err(Error::Locked { path, source }) => {
            assert_eq!(path, dir.path().display().to_string());
            assert!(source.to_string().contains("LOCK"), "{source}");
        }
        other => panic!("expected Locked, got {other:?}"),
    }

    let view = db.view().await.unwrap();
    db.close().await.unwrap();
    assert!(matches!(db.get(b"\x01a").await, Err(Error::Closed)));
    assert!(matches!(
        rocklake_rocksdb::open(dir.path()).await,
        Err(Error::Locked { .. })
    ));
    assert_eq!(view.get(b"\x01nothing").await.unwrap(), None);
    drop(view);
    let again = rocklake_rocksdb::open(dir.path()).await.unwrap();
    again.close().await.unwrap();
}
