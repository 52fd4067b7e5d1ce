//! `SledBackend` on real sled stores in temporary folders, checked against a `BTreeMap` model.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use rocklake_core::backend::{count_range, Pager};
use rocklake_core::memory::scan_map;
use rocklake_core::{Durability, Error, KeyRange, KvBackend, Order, ReadView, WriteBatch};
use rocklake_sled::SledBackend;
use tempfile::TempDir;

type Model = BTreeMap<Bytes, Bytes>;

/// A fresh store and its folder. Keep the folder binding first: locals drop in reverse order,
/// so the store is dropped (and its lock released) before the folder is removed.
async fn fresh() -> (TempDir, Arc<SledBackend>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SledBackend::open(dir.path().join("store"))
        .await
        .expect("open sled");
    (dir, store)
}

fn key(i: u32) -> Bytes {
    Bytes::from(format!("k{i:05}"))
}

fn val(i: u32, gen: u32) -> Bytes {
    Bytes::from(format!("v{i}-{gen}"))
}

/// A tiny deterministic PRNG (xorshift64*), so the tests need no extra dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Ranges worth checking over keys `k00000..k00N`.
fn ranges() -> Vec<KeyRange> {
    vec![
        KeyRange::all(),
        KeyRange::new(key(10), key(200)),
        KeyRange::prefix(b"k001"),
        KeyRange::prefix(b"k0009"),
        KeyRange::prefix(b"nothing"),
        KeyRange::all().after(&key(250)),
        KeyRange::all().before(&key(40)),
        KeyRange {
            start: Bound::Excluded(key(5)),
            end: Bound::Included(key(77)),
        },
        KeyRange {
            start: Bound::Included(key(77)),
            end: Bound::Included(key(77)),
        },
        KeyRange {
            start: Bound::Excluded(key(77)),
            end: Bound::Included(key(77)),
        },
        KeyRange::new(key(90), key(20)),
    ]
}

const LIMITS: [usize; 5] = [1, 7, 50, 299, 10_000];

/// Every range, order and limit of `view` against `model`; then a paged walk of each range.
async fn assert_matches(view: &dyn ReadView, model: &Model, what: &str) {
    for range in ranges() {
        for order in [Order::Ascending, Order::Descending] {
            for limit in LIMITS {
                let got = view.scan(&range, order, limit).await.expect("scan");
                let want = scan_map(model, &range, order, limit);
                assert_eq!(got, want, "{what}: {range:?} {order:?} limit {limit}");
            }
            for page in [1, 3, 64] {
                let mut pager = Pager::new(view, range.clone(), order, page);
                let mut got = Vec::new();
                while let Some(items) = pager.next_page().await.expect("page") {
                    assert!(items.len() <= page);
                    got.extend(items);
                }
                let want = scan_map(model, &range, order, usize::MAX);
                assert_eq!(got, want, "{what}: paged {range:?} {order:?} by {page}");
            }
        }
    }
}

async fn put_all(store: &SledBackend, pairs: &[(Bytes, Bytes)], durability: Durability) {
    let mut batch = WriteBatch::new();
    for (k, v) in pairs {
        batch.put(k.clone(), v.clone());
    }
    store.write(batch, durability).await.expect("write");
}

#[tokio::test]
async fn put_get_and_scans_match_a_btreemap() {
    let (_dir, store) = fresh().await;
    let mut model = Model::new();
    // A few hundred keys, written in shuffled single-key and multi-key batches.
    let mut rng = Rng(7);
    let mut order: Vec<u32> = (0..300).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for chunk in order.chunks(13) {
        let mut batch = WriteBatch::new();
        for &i in chunk {
            batch.put(key(i), val(i, 0));
            model.insert(key(i), val(i, 0));
        }
        store
            .write(batch, Durability::Buffered)
            .await
            .expect("write");
    }
    // Overwrite some, delete some (also keys that never existed).
    let mut batch = WriteBatch::new();
    for i in (0..300).step_by(7) {
        batch.put(key(i), val(i, 1));
        model.insert(key(i), val(i, 1));
    }
    for i in (3..330).step_by(11) {
        batch.delete(key(i));
        model.remove(&key(i));
    }
    store
        .write(batch, Durability::Durable)
        .await
        .expect("write");

    for i in 0..330 {
        assert_eq!(
            store.get(&key(i)).await.expect("get"),
            model.get(&key(i)).cloned()
        );
    }
    assert_matches(&*store, &model, "live store").await;
    assert_eq!(
        count_range(&*store, KeyRange::all()).await.expect("count"),
        model.len() as u64
    );
}

#[tokio::test]
async fn a_later_write_to_the_same_key_in_a_batch_wins() {
    let (_dir, store) = fresh().await;
    let mut batch = WriteBatch::new();
    batch.put("a", "1").put("a", "2").put("b", "1").delete("b");
    batch.delete("c").put("c", "3");
    store
        .write(batch, Durability::Buffered)
        .await
        .expect("write");
    assert_eq!(store.get(b"a").await.unwrap(), Some(Bytes::from("2")));
    assert_eq!(store.get(b"b").await.unwrap(), None);
    assert_eq!(store.get(b"c").await.unwrap(), Some(Bytes::from("3")));
}

#[tokio::test]
async fn a_failing_precondition_applies_nothing() {
    let (_dir, store) = fresh().await;
    put_all(
        &store,
        &[(key(1), val(1, 0)), (key(2), val(2, 0))],
        Durability::Durable,
    )
    .await;

    // Every op of the batch would change something, and one precondition of three fails.
    let mut batch = WriteBatch::new();
    batch
        .put(key(1), val(1, 1))
        .delete(key(2))
        .put(key(3), val(3, 1))
        .expect(key(1), Some(val(1, 0)))
        .expect(key(3), None)
        .expect(key(2), Some(val(2, 9)));
    let err = store.write(batch, Durability::Durable).await.unwrap_err();
    match err {
        Error::ConditionFailed { raw_key, .. } => assert_eq!(raw_key, key(2).to_vec()),
        other => panic!("expected ConditionFailed, got {other:?}"),
    }
    assert_eq!(store.get(&key(1)).await.unwrap(), Some(val(1, 0)));
    assert_eq!(store.get(&key(2)).await.unwrap(), Some(val(2, 0)));
    assert_eq!(store.get(&key(3)).await.unwrap(), None);

    // The same batch with true preconditions lands whole.
    let mut batch = WriteBatch::new();
    batch
        .put(key(1), val(1, 1))
        .delete(key(2))
        .put(key(3), val(3, 1))
        .expect(key(1), Some(val(1, 0)))
        .expect(key(3), None)
        .expect(key(2), Some(val(2, 0)));
    store
        .write(batch, Durability::Durable)
        .await
        .expect("write");
    assert_eq!(store.get(&key(1)).await.unwrap(), Some(val(1, 1)));
    assert_eq!(store.get(&key(2)).await.unwrap(), None);
    assert_eq!(store.get(&key(3)).await.unwrap(), Some(val(3, 1)));

    // A batch of only preconditions checks them and writes nothing.
    let mut batch = WriteBatch::new();
    batch.expect(key(2), Some(val(2, 0)));
    assert!(matches!(
        store.write(batch, Durability::Durable).await,
        Err(Error::ConditionFailed { .. })
    ));
}

#[tokio::test]
async fn an_empty_key_is_refused() {
    let (_dir, store) = fresh().await;
    let mut batch = WriteBatch::new();
    batch.put(key(1), val(1, 0)).put(Bytes::new(), "x");
    assert!(matches!(
        store.write(batch, Durability::Buffered).await,
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(store.get(&key(1)).await.unwrap(), None);
}

#[tokio::test]
async fn a_view_is_point_in_time() {
    let (_dir, store) = fresh().await;
    let mut before = Model::new();
    for i in 0..200 {
        before.insert(key(i), val(i, 0));
    }
    let pairs: Vec<_> = before.clone().into_iter().collect();
    put_all(&store, &pairs, Durability::Durable).await;

    let view = store.view().await.expect("view");

    // Overwrite, delete and insert, in several batches (a key written twice keeps the first
    // old value), including keys the view never saw and keys inserted then deleted.
    let mut after = before.clone();
    for round in 1..=3u32 {
        let mut batch = WriteBatch::new();
        for i in (0..200).step_by(3 + round as usize) {
            batch.put(key(i), val(i, round));
            after.insert(key(i), val(i, round));
        }
        for i in (1..260).step_by(5 * round as usize) {
            batch.delete(key(i));
            after.remove(&key(i));
        }
        for i in (200..300).step_by(round as usize + 1) {
            batch.put(key(i), val(i, round));
            after.insert(key(i), val(i, round));
        }
        store
            .write(batch, Durability::Buffered)
            .await
            .expect("write");
    }
    assert_ne!(before, after);

    for i in 0..310 {
        assert_eq!(
            view.get(&key(i)).await.expect("view get"),
            before.get(&key(i)).cloned(),
            "view get {i}"
        );
        assert_eq!(
            store.get(&key(i)).await.expect("get"),
            after.get(&key(i)).cloned()
        );
    }
    assert_matches(&*view, &before, "old view").await;
    assert_matches(&*store, &after, "live store").await;

    // A view taken now sees the new state, and the old view still the old one.
    let newer = store.view().await.expect("view");
    assert_matches(&*newer, &after, "new view").await;
    store
        .write(
            {
                let mut b = WriteBatch::new();
                b.delete(key(0)).put(key(1), "x");
                b
            },
            Durability::Buffered,
        )
        .await
        .expect("write");
    assert_matches(&*newer, &after, "new view after more writes").await;
    assert_matches(&*view, &before, "old view after more writes").await;

    // Dropping views stops the bookkeeping; reads of the store are unaffected.
    drop(view);
    drop(newer);
    store
        .write(
            {
                let mut b = WriteBatch::new();
                b.put(key(2), "y");
                b
            },
            Durability::Buffered,
        )
        .await
        .expect("write");
    assert_eq!(store.get(&key(2)).await.unwrap(), Some(Bytes::from("y")));
    assert!(format!("{store:?}").contains("open_views: Some(0)"));
}

#[tokio::test]
async fn views_survive_random_writes() {
    let (_dir, store) = fresh().await;
    let mut rng = Rng(0x5EED);
    let mut model = Model::new();
    let mut views: Vec<(Arc<dyn ReadView>, Model)> = Vec::new();
    for step in 0..60u32 {
        // A random batch over a small key space, so keys collide, vanish and come back.
        let mut batch = WriteBatch::new();
        for _ in 0..rng.below(20) + 1 {
            let i = rng.below(120) as u32;
            if rng.below(3) == 0 {
                batch.delete(key(i));
                model.remove(&key(i));
            } else {
                batch.put(key(i), val(i, step));
                model.insert(key(i), val(i, step));
            }
        }
        store
            .write(batch, Durability::Buffered)
            .await
            .expect("write");

        if rng.below(4) == 0 {
            views.push((store.view().await.expect("view"), model.clone()));
        }
        if !views.is_empty() && rng.below(6) == 0 {
            views.swap_remove(rng.below(views.len() as u64) as usize);
        }
        for (view, then) in &views {
            for _ in 0..4 {
                let a = key(rng.below(130) as u32);
                let b = key(rng.below(130) as u32);
                let range = match rng.below(3) {
                    0 => KeyRange::new(a, b),
                    1 => KeyRange::all().after(&a),
                    _ => KeyRange::all().before(&b),
                };
                let order = if rng.below(2) == 0 {
                    Order::Ascending
                } else {
                    Order::Descending
                };
                let limit = rng.below(40) as usize + 1;
                let got = view.scan(&range, order, limit).await.expect("scan");
                assert_eq!(got, scan_map(then, &range, order, limit), "step {step}");
                let k = key(rng.below(130) as u32);
                assert_eq!(view.get(&k).await.expect("get"), then.get(&k).cloned());
            }
        }
    }
    for (view, then) in &views {
        assert_matches(&**view, then, "random view").await;
    }
    assert_matches(&*store, &model, "live store").await;
}

#[tokio::test]
async fn durable_writes_survive_close_and_reopen() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store");
    let store = SledBackend::open(&path).await.expect("open");
    put_all(&store, &[(key(1), val(1, 0))], Durability::Durable).await;
    put_all(&store, &[(key(2), val(2, 0))], Durability::Buffered).await;
    store.close().await.expect("close");
    drop(store);

    let store = SledBackend::open(&path).await.expect("reopen");
    assert_eq!(store.get(&key(1)).await.unwrap(), Some(val(1, 0)));
    // Buffered writes are made durable by close.
    assert_eq!(store.get(&key(2)).await.unwrap(), Some(val(2, 0)));
    store.flush().await.expect("flush");
    store.close().await.expect("close");
}

#[tokio::test]
async fn concurrent_durable_writers_all_land() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store");
    let store = SledBackend::open(&path).await.expect("open");
    let mut tasks = Vec::new();
    for t in 0..8u32 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                let k = t * 100 + i;
                put_all(&store, &[(key(k), val(k, 0))], Durability::Durable).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer task");
    }
    store.close().await.expect("close");
    drop(store);

    let store = SledBackend::open(&path).await.expect("reopen");
    let all = store
        .scan(&KeyRange::all(), Order::Ascending, 1000)
        .await
        .unwrap();
    assert_eq!(all.len(), 160);
    store.close().await.expect("close");
}

#[tokio::test]
async fn a_second_open_is_locked() {
    let (dir, store) = fresh().await;
    let path = dir.path().join("store");
    match SledBackend::open(&path).await {
        Err(Error::Locked { path: p, source }) => {
            assert_eq!(p, path.display().to_string());
            assert!(
                source.to_string().contains("could not acquire lock"),
                "{source}"
            );
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    // The refused open did not disturb the first handle.
    put_all(&store, &[(key(1), val(1, 0))], Durability::Durable).await;
    assert_eq!(store.get(&key(1)).await.unwrap(), Some(val(1, 0)));
}

#[tokio::test]
async fn close_releases_the_lock_even_with_a_view_alive() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store");
    let store = SledBackend::open(&path).await.expect("open");
    put_all(&store, &[(key(1), val(1, 0))], Durability::Buffered).await;
    let view = store.view().await.expect("view");
    store.close().await.expect("close");

    // The first handle and its view are still alive, yet the store can be opened again.
    let again = SledBackend::open(&path).await.expect("reopen after close");
    assert_eq!(again.get(&key(1)).await.unwrap(), Some(val(1, 0)));
    assert!(matches!(view.get(&key(1)).await, Err(Error::Closed)));
    again.close().await.expect("close");
    drop(view);
    drop(store);

    // Dropping every handle without closing releases it too.
    let store = SledBackend::open(&path).await.expect("reopen");
    drop(store);
    let store = SledBackend::open(&path).await.expect("reopen after drop");
    assert_eq!(store.get(&key(1)).await.unwrap(), Some(val(1, 0)));
}

#[tokio::test]
async fn calls_after_close_return_closed() {
    let (_dir, store) = fresh().await;
    put_all(&store, &[(key(1), val(1, 0))], Durability::Buffered).await;
    let view = store.view().await.expect("view");
    store.close().await.expect("close");
    store.close().await.expect("closing twice is fine");

    let closed = |r: Result<(), Error>, what: &str| match r {
        Err(Error::Closed) => {}
        other => panic!("{what}: expected Closed, got {other:?}"),
    };
    closed(store.get(&key(1)).await.map(drop), "get");
    closed(
        store
            .scan(&KeyRange::all(), Order::Ascending, 10)
            .await
            .map(drop),
        "scan",
    );
    let mut batch = WriteBatch::new();
    batch.put(key(2), val(2, 0));
    closed(store.write(batch, Durability::Durable).await, "write");
    closed(store.view().await.map(drop), "view");
    closed(store.flush().await, "flush");
    closed(view.get(&key(1)).await.map(drop), "view get");
    closed(
        view.scan(&KeyRange::all(), Order::Descending, 10)
            .await
            .map(drop),
        "view scan",
    );
}

#[tokio::test]
async fn engine_name_capabilities_and_debug() {
    let (dir, store) = fresh().await;
    assert_eq!(store.engine(), "sled");
    let caps = store.capabilities();
    assert!(caps.persistent && caps.exclusive_open && caps.point_in_time_views);
    assert!(!caps.fences_on_open);
    assert_eq!(store.path(), dir.path().join("store"));
    let debug = format!("{store:?}");
    assert!(debug.starts_with("SledBackend"), "{debug}");
    assert!(debug.contains("closed: false"), "{debug}");
}

/// Views taken and read while writers run: each batch moves every key to a new generation (and
/// hides or restores the even keys), so a view that mixed two points in time would see two
/// generations or a wrong set of keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_stay_consistent_under_concurrent_writes() {
    const KEYS: u32 = 60;
    let (_dir, store) = fresh().await;
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
        .expect("write");

    let writer = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            for g in 1..=300 {
                store
                    .write(generation(g), Durability::Buffered)
                    .await
                    .expect("write");
            }
        })
    };

    let mut checked = 0;
    while !writer.is_finished() || checked < 5 {
        let view = store.view().await.expect("view");
        let mut seen = Vec::new();
        for order in [Order::Ascending, Order::Descending] {
            let mut pager = Pager::new(&*view, KeyRange::all(), order, 4);
            let mut pairs = Vec::new();
            while let Some(items) = pager.next_page().await.expect("page") {
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
                view.get(&key(i)).await.expect("get").is_some(),
                expected.contains(&key(i))
            );
        }
        checked += 1;
    }
    writer.await.expect("writer");
}

/// A view's `visit` lends from the live tree while no write has touched the view, and must
/// switch to the merging path when a write lands mid-visit: writes made from inside the visit,
/// ahead of and behind the cursor, stay invisible to it.
#[tokio::test]
async fn a_views_visit_stays_point_in_time_when_a_write_lands_mid_visit() {
    for order in [Order::Ascending, Order::Descending] {
        let (_dir, store) = fresh().await;
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
                    // A write from another thread (with its own runtime), while we are inside.
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
        // The store itself has the write.
        assert_eq!(store.get(&key(105)).await.unwrap(), Some(val(105, 1)));
    }
}
