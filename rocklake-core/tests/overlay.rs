//! Core's undo-overlay views (what sled's views are), on the reference engine without
//! snapshots: views read while writers run. (A `visit` that a write interrupts needs an engine
//! that lends from its live tree: that test is sled's, in `rocklake-sled/tests/sled.rs`.)

use std::sync::Arc;

use bytes::Bytes;
use rocklake_core::{
    Durability, EngineBackend, KeyRange, KvBackend, MemoryEngine, Order, Pager, WriteBatch,
};

fn key(i: u32) -> Bytes {
    Bytes::from(format!("k{i:05}"))
}

fn store() -> Arc<EngineBackend<MemoryEngine>> {
    Arc::new(EngineBackend::new(MemoryEngine::without_snapshots()))
}

/// Each batch moves every key to a new generation (and hides or restores the even keys), so a
/// view that mixed two points in time would see two generations or a wrong set of keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_stay_consistent_under_concurrent_writes() {
    const KEYS: u32 = 60;
    let store = store();
    let generation = |g: u32| {
        let mut batch = WriteBatch::new();
        for i in 0..KEYS {
            if g % 2 == 1 && i % 2 == 0 {
                batch.delete(key(i));
            } else {
                batch.put(key(i), Bytes::from(format!("{g:08}")));
            }
        }
        batch
    };
    store
        .write(generation(0), Durability::Buffered)
        .await
        .unwrap();
    let writer = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            for g in 1..=300 {
                store
                    .write(generation(g), Durability::Buffered)
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    let mut checked = 0;
    let mut generations = std::collections::BTreeSet::new();
    while !writer.is_finished() || checked < 5 {
        let view = store.view().await.unwrap();
        let mut seen = Vec::new();
        for order in [Order::Ascending, Order::Descending] {
            let mut pager = Pager::new(&*view, KeyRange::all(), order, 4);
            let mut pairs = Vec::new();
            while let Some(items) = pager.next_page().await.unwrap() {
                pairs.extend(items);
                tokio::task::yield_now().await;
            }
            if order == Order::Descending {
                pairs.reverse();
            }
            seen.push(pairs);
        }
        assert_eq!(seen[0], seen[1], "both directions see one point in time");
        let pairs = &seen[0];
        let g: u32 = std::str::from_utf8(&pairs[0].1).unwrap().parse().unwrap();
        generations.insert(g);
        let expected: Vec<Bytes> = (0..KEYS)
            .filter(|i| !(g % 2 == 1 && i % 2 == 0))
            .map(key)
            .collect();
        let keys: Vec<Bytes> = pairs.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(keys, expected, "generation {g}");
        assert!(
            pairs.iter().all(|(_, v)| v == &pairs[0].1),
            "one generation"
        );
        for i in [0, 1, KEYS - 1] {
            assert_eq!(
                view.get(&key(i)).await.unwrap().is_some(),
                expected.contains(&key(i))
            );
        }
        checked += 1;
    }
    writer.await.unwrap();
    eprintln!(
        "{checked} views checked, {} generations seen",
        generations.len()
    );
}

/// Views left open while writers go on hold no more than the bound together: past it the
/// view holding the most (the oldest) is let go, its reads fail with `SnapshotTooOld`
/// (SQLSTATE 72000), and the younger view and new views read on as before.
#[tokio::test]
async fn views_past_the_memory_bound_are_let_go() {
    const LIMIT: usize = 64 << 10;
    let store = store();
    store.limit_view_memory(LIMIT);
    let write = |range: std::ops::Range<u32>| {
        let store = Arc::clone(&store);
        async move {
            let mut batch = WriteBatch::new();
            for i in range {
                batch.put(key(i), Bytes::from_static(b"v"));
            }
            store.write(batch, Durability::Buffered).await.unwrap();
        }
    };
    let old = store.view().await.unwrap();
    // 400 new keys: each costs the old view an entry saying it was absent (about 70 bytes).
    write(0..400).await;
    assert_eq!(old.get(&key(5)).await.unwrap(), None, "within the bound");
    let young = store.view().await.unwrap();
    write(400..1000).await;
    let e = old
        .get(&key(5))
        .await
        .expect_err("the old view held about 70 KB, past the 64 KiB bound with the young one");
    assert_eq!(e.kind(), rocklake_core::ErrorKind::SnapshotTooOld, "{e}");
    assert_eq!(e.sqlstate(), "72000");
    assert!(old
        .scan(&KeyRange::all(), Order::Ascending, 10)
        .await
        .is_err());
    let held = store.view_memory();
    assert!(held <= LIMIT, "the views hold {held} bytes");
    assert!(held > 0, "the young view keeps its overlay");
    assert_eq!(young.get(&key(500)).await.unwrap(), None);
    assert_eq!(
        young.get(&key(5)).await.unwrap().as_deref(),
        Some(&b"v"[..])
    );
    let seen = young
        .scan(&KeyRange::all(), Order::Ascending, 2000)
        .await
        .unwrap();
    assert_eq!(
        seen.len(),
        400,
        "the young view sees the keys written before it"
    );
    let new = store.view().await.unwrap();
    let all = new
        .scan(&KeyRange::all(), Order::Ascending, 2000)
        .await
        .unwrap();
    assert_eq!(all.len(), 1000);
}
