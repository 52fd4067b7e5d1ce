//! `RocksBackend` on real RocksDB databases in temporary folders, checked against a `BTreeMap`
//! model (core's `scan_map`, the reference the memory backend uses).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use rocklake_core::backend::{
    Capabilities, Durability, KeyRange, KvBackend, Order, ReadView, WriteBatch,
};
use rocklake_core::memory::scan_map;
use rocklake_core::Error;
use rocklake_rocksdb::RocksBackend;

type Model = BTreeMap<Bytes, Bytes>;

fn b(s: &[u8]) -> Bytes {
    Bytes::copy_from_slice(s)
}

/// A small deterministic generator (no extra dependency, same keys on every run).
struct Lcg(u64);

impl Lcg {
    fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// Keys around tag boundaries: prefixes `0x04..=0x06` and `0xFF`, short and long, including the
/// bare tag bytes, `0x05 0xFF 0xFF` (the last key of prefix `0x05`) and `0x06 0x00` (right after
/// the prefix's upper bound `0x06`).
fn model_keys() -> Vec<Vec<u8>> {
    let mut keys = vec![
        vec![0x04, 0xFF, 0xFF],
        vec![0x05],
        vec![0x05, 0x00],
        vec![0x05, 0xFF],
        vec![0x05, 0xFF, 0xFF],
        vec![0x06],
        vec![0x06, 0x00],
        vec![0x06, 0x00, 0x00],
        vec![0xFF],
        vec![0xFF, 0xFF],
    ];
    let mut rng = Lcg(42);
    for _ in 0..400 {
        let tag = [0x04, 0x05, 0x05, 0x06, 0xFF][(rng.next_u64() % 5) as usize];
        let len = (rng.next_u64() % 5) as usize;
        let mut k = vec![tag];
        for _ in 0..len {
            k.push(rng.next_u64() as u8);
        }
        keys.push(k);
    }
    keys
}

async fn fill(db: &RocksBackend) -> Model {
    let mut model = Model::new();
    let mut rng = Lcg(7);
    for chunk in model_keys().chunks(37) {
        let mut batch = WriteBatch::new();
        for k in chunk {
            let v = format!("v{}", rng.next_u64()).into_bytes();
            batch.put(b(k), b(&v));
            model.insert(b(k), b(&v));
        }
        db.write(batch, Durability::Buffered).await.unwrap();
    }
    // Delete every fifth key so tombstones sit between live keys.
    let mut batch = WriteBatch::new();
    let doomed: Vec<Bytes> = model.keys().step_by(5).cloned().collect();
    for k in doomed {
        batch.delete(k.clone());
        model.remove(&k);
    }
    db.write(batch, Durability::Durable).await.unwrap();
    model
}

/// Ranges worth scanning: prefixes, every bound kind at present and absent keys, empty ranges.
fn ranges(model: &Model) -> Vec<KeyRange> {
    let mut out = vec![
        KeyRange::all(),
        KeyRange::prefix(&[0x05]),
        KeyRange::prefix(&[0x05, 0xFF]),
        KeyRange::prefix(&[0x06]),
        KeyRange::prefix(&[0xFF]),
        KeyRange::prefix(&[0x07]),
        KeyRange::new(vec![0x05], vec![0x06]),
        KeyRange::new(vec![0x06], vec![0x05]),
    ];
    let keys: Vec<Bytes> = model.keys().cloned().collect();
    let probes = [
        keys[3].clone(),
        keys[keys.len() / 3].clone(),
        keys[keys.len() / 2].clone(),
        keys[keys.len() - 2].clone(),
        b(&[0x05]),
        b(&[0x05, 0x80]),
        b(&[0x06]),
        b(&[0x06, 0x00]),
    ];
    let bounds = |k: &Bytes| {
        [
            Bound::Included(k.clone()),
            Bound::Excluded(k.clone()),
            Bound::Unbounded,
        ]
    };
    for lo in &probes {
        for hi in &probes {
            for start in bounds(lo) {
                for end in bounds(hi) {
                    out.push(KeyRange {
                        start: start.clone(),
                        end,
                    });
                }
            }
        }
    }
    out
}

async fn check_against_model(view: &dyn ReadView, model: &Model) {
    for (k, v) in model {
        assert_eq!(view.get(k).await.unwrap().as_ref(), Some(v), "get {k:?}");
    }
    for absent in [&[0x05, 0x80, 0x80, 0x80, 0x80, 0x80][..], &[0x07], &[0x00]] {
        assert_eq!(view.get(absent).await.unwrap(), None);
    }
    for range in ranges(model) {
        for order in [Order::Ascending, Order::Descending] {
            for limit in [1, 7, 10_000] {
                let got = view.scan(&range, order, limit).await.unwrap();
                let want = scan_map(model, &range, order, limit);
                assert_eq!(got, want, "scan {range:?} {order:?} limit {limit}");
            }
        }
    }
}

#[tokio::test]
async fn point_reads_and_scans_match_a_btreemap() {
    let dir = tempfile::tempdir().unwrap();
    let db = RocksBackend::open(dir.path()).await.unwrap();
    let model = fill(&db).await;
    assert!(model.len() > 200, "{} keys", model.len());

    check_against_model(db.as_ref(), &model).await;
    let view = db.view().await.unwrap();
    check_against_model(view.as_ref(), &model).await;

    // A prefix scan of 0x05 stops before 0x06, whose keys start at the prefix's upper bound.
    let p5 = db
        .scan(&KeyRange::prefix(&[0x05]), Order::Ascending, 10_000)
        .await
        .unwrap();
    assert!(!p5.is_empty());
    assert!(p5.iter().all(|(k, _)| k[0] == 0x05), "{p5:?}");
    let p5_rev = db
        .scan(&KeyRange::prefix(&[0x05]), Order::Descending, 10_000)
        .await
        .unwrap();
    assert_eq!(p5_rev.first().map(|(k, _)| k[0]), Some(0x05));
    assert_eq!(p5_rev.len(), p5.len());

    // A range ending at Included(k) returns k; Excluded(k) does not.
    let last5 = p5.last().unwrap().0.clone();
    let incl = KeyRange {
        start: Bound::Included(b(&[0x05])),
        end: Bound::Included(last5.clone()),
    };
    let got = db.scan(&incl, Order::Ascending, 10_000).await.unwrap();
    assert_eq!(got.last().map(|(k, _)| k.clone()), Some(last5.clone()));
    let got = db.scan(&incl, Order::Descending, 1).await.unwrap();
    assert_eq!(got[0].0, last5);
    let excl = KeyRange {
        start: Bound::Included(b(&[0x05])),
        end: Bound::Excluded(last5.clone()),
    };
    let got = db.scan(&excl, Order::Descending, 1).await.unwrap();
    assert!(got[0].0 < last5);

    // Excluded(k) start skips exactly k and nothing after it.
    let first5 = p5[0].0.clone();
    let after = KeyRange::prefix(&[0x05]).after(&first5);
    let got = db.scan(&after, Order::Ascending, 10_000).await.unwrap();
    assert_eq!(got.as_slice(), &p5[1..]);
}

#[tokio::test]
async fn a_failing_precondition_applies_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = RocksBackend::open(dir.path()).await.unwrap();
    let mut setup = WriteBatch::new();
    setup.put(b(b"\x01a"), b(b"1")).put(b(b"\x01c"), b(b"3"));
    db.write(setup, Durability::Durable).await.unwrap();

    let mut batch = WriteBatch::new();
    batch
        .put(b(b"\x01a"), b(b"2"))
        .put(b(b"\x01b"), b(b"new"))
        .delete(b(b"\x01c"))
        .expect(b(b"\x01c"), Some(b(b"3")))
        .expect(b(b"\x01a"), Some(b(b"9")));
    let err = db.write(batch, Durability::Durable).await.unwrap_err();
    match &err {
        Error::ConditionFailed { raw_key, .. } => assert_eq!(raw_key.as_slice(), b"\x01a"),
        other => panic!("expected ConditionFailed, got {other:?}"),
    }
    assert_eq!(
        db.scan(&KeyRange::all(), Order::Ascending, 100)
            .await
            .unwrap(),
        vec![(b(b"\x01a"), b(b"1")), (b(b"\x01c"), b(b"3"))]
    );

    // "Must be absent" fails on a present key, and holds on an absent one.
    let mut batch = WriteBatch::new();
    batch.put(b(b"\x01a"), b(b"2")).expect(b(b"\x01a"), None);
    assert!(matches!(
        db.write(batch, Durability::Buffered).await,
        Err(Error::ConditionFailed { .. })
    ));
    let mut batch = WriteBatch::new();
    batch
        .put(b(b"\x01a"), b(b"2"))
        .put(b(b"\x01a"), b(b"3")) // a later write to the same key wins
        .delete(b(b"\x01c"))
        .expect(b(b"\x01b"), None)
        .expect(b(b"\x01a"), Some(b(b"1")));
    db.write(batch, Durability::Durable).await.unwrap();
    assert_eq!(
        db.scan(&KeyRange::all(), Order::Ascending, 100)
            .await
            .unwrap(),
        vec![(b(b"\x01a"), b(b"3"))]
    );

    // A batch of only preconditions checks them and writes nothing.
    let mut only = WriteBatch::new();
    only.expect(b(b"\x01a"), Some(b(b"3")));
    db.write(only, Durability::Durable).await.unwrap();

    // The empty key is refused before anything is applied.
    let mut bad = WriteBatch::new();
    bad.put(b(b"\x01z"), b(b"z")).put(Bytes::new(), b(b"x"));
    assert!(matches!(
        db.write(bad, Durability::Durable).await,
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(db.get(b"\x01z").await.unwrap(), None);
}

#[tokio::test]
async fn preconditions_serialize_concurrent_writers() {
    // Many tasks race to bump a counter with compare-and-set; every success must be counted
    // once: the check and the apply are atomic together.
    let dir = tempfile::tempdir().unwrap();
    let db = RocksBackend::open(dir.path()).await.unwrap();
    let key = b(b"\x01counter");
    let mut init = WriteBatch::new();
    init.put(key.clone(), b(&0u64.to_be_bytes()));
    db.write(init, Durability::Buffered).await.unwrap();

    let mut tasks = Vec::new();
    for _ in 0..8 {
        let db = Arc::clone(&db);
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            let mut won = 0u64;
            for _ in 0..25 {
                let cur = db.get(&key).await.unwrap().unwrap();
                let n = u64::from_be_bytes(cur.as_ref().try_into().unwrap());
                let mut batch = WriteBatch::new();
                batch
                    .put(key.clone(), b(&(n + 1).to_be_bytes()))
                    .expect(key.clone(), Some(cur));
                match db.write(batch, Durability::Buffered).await {
                    Ok(()) => won += 1,
                    Err(Error::ConditionFailed { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            won
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    let end = db.get(&key).await.unwrap().unwrap();
    assert_eq!(u64::from_be_bytes(end.as_ref().try_into().unwrap()), total);
    assert!(total > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_stays_at_its_point_in_time_while_writes_continue() {
    let dir = tempfile::tempdir().unwrap();
    let db = RocksBackend::open(dir.path()).await.unwrap();
    let mut batch = WriteBatch::new();
    for i in 0u16..200 {
        batch.put(b(&[&[0x05u8][..], &i.to_be_bytes()].concat()), b(b"old"));
    }
    db.write(batch, Durability::Durable).await.unwrap();

    let view = db.view().await.unwrap();
    let before = view
        .scan(&KeyRange::prefix(&[0x05]), Order::Ascending, 1000)
        .await
        .unwrap();
    assert_eq!(before.len(), 200);

    // A writer overwrites, deletes and adds keys while the view is read again and again.
    let writer = {
        let db = Arc::clone(&db);
        tokio::spawn(async move {
            for round in 0u16..50 {
                let mut batch = WriteBatch::new();
                batch
                    .put(b(&[0x05, 0, (round % 200) as u8]), b(b"new"))
                    .delete(b(&[0x05, 0, ((round + 100) % 200) as u8]))
                    .put(b(&[0x05, 0xFF, round as u8]), b(b"added"));
                db.write(batch, Durability::Buffered).await.unwrap();
            }
        })
    };
    for _ in 0..20 {
        let again = view
            .scan(&KeyRange::prefix(&[0x05]), Order::Ascending, 1000)
            .await
            .unwrap();
        assert_eq!(again, before);
        assert_eq!(view.get(&[0x05, 0, 0]).await.unwrap(), Some(b(b"old")));
        tokio::task::yield_now().await;
    }
    writer.await.unwrap();

    // The view still sees its point in time; the live store sees the writes.
    let desc = view
        .scan(&KeyRange::prefix(&[0x05]), Order::Descending, 1000)
        .await
        .unwrap();
    assert_eq!(desc.into_iter().rev().collect::<Vec<_>>(), before);
    assert_eq!(view.get(&[0x05, 0xFF, 0]).await.unwrap(), None);
    assert_eq!(db.get(&[0x05, 0, 0]).await.unwrap(), Some(b(b"new")));
    assert_eq!(db.get(&[0x05, 0, 100]).await.unwrap(), None);
    assert_eq!(db.get(&[0x05, 0xFF, 0]).await.unwrap(), Some(b(b"added")));
    // A new view sees the new state.
    let later = db.view().await.unwrap();
    assert_eq!(later.get(&[0x05, 0, 0]).await.unwrap(), Some(b(b"new")));
}

#[tokio::test]
async fn writes_survive_close_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/store");
    {
        let db = RocksBackend::open(&path).await.unwrap();
        let mut durable = WriteBatch::new();
        durable.put(b(b"\x01durable"), b(b"d"));
        db.write(durable, Durability::Durable).await.unwrap();
        let mut buffered = WriteBatch::new();
        buffered.put(b(b"\x01buffered"), b(b"b"));
        db.write(buffered, Durability::Buffered).await.unwrap();
        db.flush().await.unwrap();
        db.close().await.unwrap();
    }
    let db = RocksBackend::open(&path).await.unwrap();
    assert_eq!(db.get(b"\x01durable").await.unwrap(), Some(b(b"d")));
    assert_eq!(db.get(b"\x01buffered").await.unwrap(), Some(b(b"b")));

    // Dropping the backend without close also releases the store.
    let mut more = WriteBatch::new();
    more.put(b(b"\x01dropped"), b(b"x"));
    db.write(more, Durability::Durable).await.unwrap();
    drop(db);
    let db = RocksBackend::open(&path).await.unwrap();
    assert_eq!(db.get(b"\x01dropped").await.unwrap(), Some(b(b"x")));
    assert_eq!(
        db.scan(&KeyRange::all(), Order::Ascending, 10)
            .await
            .unwrap()
            .len(),
        3
    );
}

#[tokio::test]
async fn a_second_opener_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = RocksBackend::open(dir.path()).await.unwrap();
    match RocksBackend::open(dir.path()).await {
        Err(Error::Locked { path, source }) => {
            assert_eq!(path, dir.path().display().to_string());
            assert!(source.to_string().contains("LOCK"), "{source}");
        }
        other => panic!("expected Locked, got {other:?}"),
    }

    // A view keeps the store open after close; dropping it releases the store.
    let view = db.view().await.unwrap();
    db.close().await.unwrap();
    assert!(matches!(
        RocksBackend::open(dir.path()).await,
        Err(Error::Locked { .. })
    ));
    assert_eq!(view.get(b"\x01nothing").await.unwrap(), None);
    drop(view);
    let again = RocksBackend::open(dir.path()).await.unwrap();
    again.close().await.unwrap();
}

#[tokio::test]
async fn calls_after_close_return_closed() {
    let dir = tempfile::tempdir().unwrap();
    let db = RocksBackend::open(dir.path()).await.unwrap();
    assert_eq!(db.engine(), "rocksdb");
    assert_eq!(
        db.capabilities(),
        Capabilities {
            persistent: true,
            exclusive_open: true,
            fences_on_open: false,
            point_in_time_views: true,
        }
    );
    assert!(format!("{db:?}").contains("open: true"));
    db.close().await.unwrap();
    db.close().await.unwrap(); // closing twice is fine
    assert!(format!("{db:?}").contains("open: false"));

    assert!(matches!(db.get(b"\x01a").await, Err(Error::Closed)));
    assert!(matches!(
        db.scan(&KeyRange::all(), Order::Ascending, 1).await,
        Err(Error::Closed)
    ));
    let mut batch = WriteBatch::new();
    batch.put(b(b"\x01a"), b(b"1"));
    assert!(matches!(
        db.write(batch, Durability::Durable).await,
        Err(Error::Closed)
    ));
    assert!(matches!(db.view().await, Err(Error::Closed)));
    assert!(matches!(db.flush().await, Err(Error::Closed)));

    // Closed and dropped: the folder opens again.
    RocksBackend::open(dir.path()).await.unwrap();
}
