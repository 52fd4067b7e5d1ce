//! What only sled does: its lock file refuses a second open, and close releases it at once even
//! while a view is alive (the view then answers Closed); dropping every handle releases it too.
//! And a view's `visit` that lends from sled's live tree while a write lands. Everything else is
//! the suite's (`tests/conformance.rs`). And a store a crash left with an unfinished sled
//! snapshot still opens.

use bytes::Bytes;
use rocklake_core::{Durability, Error, KeyRange, KvBackend, Order, ReadView, WriteBatch};

fn key(i: u32) -> Bytes {
    Bytes::from(format!("k{i:05}"))
}

fn val(i: u32, gen: u32) -> Bytes {
    Bytes::from(format!("v{i}-{gen}"))
}

#[tokio::test]
async fn close_releases_the_lock_even_with_a_view_alive() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store");
    let store = rocklake_sled::open(&path).await.expect("open");
    match rocklake_sled::open(&path).await {
        Err(Error::Locked { path: p, source }) => {
            assert_eq!(p, path.display().to_string());
            assert!(
                source.to_string().contains("could not acquire lock"),
                "{source}"
            );
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    let mut batch = WriteBatch::new();
    batch.put(b"\x01k".to_vec(), b"v".to_vec());
    store.write(batch, Durability::Buffered).await.unwrap();
    let view = store.view().await.expect("view");
    store.close().await.expect("close");

    let again = rocklake_sled::open(&path)
        .await
        .expect("reopen after close");
    assert_eq!(
        again.get(b"\x01k").await.unwrap().as_deref(),
        Some(&b"v"[..])
    );
    assert!(matches!(view.get(b"\x01k").await, Err(Error::Closed)));
    again.close().await.expect("close");
    drop(view);
    drop(store);

    let store = rocklake_sled::open(&path).await.expect("reopen");
    drop(store);
    let store = rocklake_sled::open(&path)
        .await
        .expect("reopen after a drop without close");
    assert_eq!(
        store.get(b"\x01k").await.unwrap().as_deref(),
        Some(&b"v"[..])
    );
}

/// sled 0.34.7 reads the snapshot file whose name sorts last, and an unfinished one
/// (`snap.<lsn>.generating`, left by a crash or power cut before sled renamed it) sorts after
/// every finished one: without `rocklake-sled` removing it, this open failed as corrupt.
#[tokio::test]
async fn a_store_with_an_unfinished_snapshot_still_opens() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store");
    let store = rocklake_sled::open(&path).await.expect("open");
    let mut batch = WriteBatch::new();
    batch.put(b"\x01k".to_vec(), b"v".to_vec());
    store.write(batch, Durability::Durable).await.unwrap();
    store.close().await.expect("close");
    let unfinished = path.join("snap.FFFFFFFFFFFFFFFF.generating");
    std::fs::write(&unfinished, b"").expect("an empty unfinished snapshot");
    let again = rocklake_sled::open(&path)
        .await
        .expect("open with an unfinished snapshot left by a crash");
    assert_eq!(
        again.get(b"\x01k").await.unwrap().as_deref(),
        Some(&b"v"[..])
    );
    assert!(!unfinished.exists(), "the unfinished snapshot is removed");
    again.close().await.expect("close");
}

/// A view's `visit` lends from the live tree while no write has touched the view, and must
/// switch to the merging scan when a write lands mid-visit: writes made from inside the visit,
/// ahead of and behind the cursor, stay invisible to it.
#[tokio::test]
async fn a_visit_stays_point_in_time_when_a_write_lands_mid_visit() {
    for order in [Order::Ascending, Order::Descending] {
        let dir = tempfile::tempdir().unwrap();
        let store = rocklake_sled::open(dir.path().join("store")).await.unwrap();
        let mut w = WriteBatch::new();
        for i in 0..200 {
            w.put(key(i), val(i, 0));
        }
        store.write(w, Durability::Buffered).await.unwrap();
        let view = store.view().await.unwrap();
        let mut lent: Vec<(Bytes, Bytes)> = Vec::new();
        let writer = store.clone();
        let n = view
            .visit(&KeyRange::all(), order, 1000, &mut |k, v| {
                lent.push((Bytes::copy_from_slice(k), Bytes::copy_from_slice(v)));
                if lent.len() == 50 {
                    let writer = writer.clone();
                    std::thread::spawn(move || {
                        let mut w = WriteBatch::new();
                        for i in (0..10).chain(100..120) {
                            w.put(key(i), val(i, 1));
                        }
                        for i in 150..160 {
                            w.delete(key(i));
                        }
                        w.put(key(500), val(500, 1));
                        tokio::runtime::Builder::new_current_thread()
                            .build()
                            .unwrap()
                            .block_on(writer.write(w, Durability::Buffered))
                            .unwrap();
                    })
                    .join()
                    .unwrap();
                }
                true
            })
            .await
            .unwrap();
        let mut want: Vec<(Bytes, Bytes)> = (0..200).map(|i| (key(i), val(i, 0))).collect();
        if order == Order::Descending {
            want.reverse();
        }
        assert_eq!(n, 200, "{order:?}");
        assert_eq!(
            lent, want,
            "{order:?}: the visit saw a write made after the view"
        );
        assert_eq!(store.get(&key(105)).await.unwrap(), Some(val(105, 1)));
    }
}
