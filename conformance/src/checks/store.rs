//! The engine itself: order, prefix isolation, atomic conditional batches, faults, read
//! views, a model-based comparison and bad bytes.

use super::*;

/// Random keys of random lengths come back in unsigned byte order, forward and reverse, with
/// limits and resumption, equal to a `BTreeMap`.
pub async fn ordering(t: &Target) -> CheckResult {
    let s = t.fresh().await.map_err(ctx("fresh store"))?;
    let mut rng = StdRng::seed_from_u64(0x0D0E);
    let mut model = Model::new();
    for i in 0..800u32 {
        let len = rng.random_range(1..24);
        let mut k: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        // Bias towards the interesting bytes.
        if i % 5 == 0 {
            k[0] = [0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF][rng.random_range(0..6)];
        }
        if k[0] == 0 {
            k[0] = 1;
        }
        model.insert(k, i.to_be_bytes().to_vec());
    }
    let all: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    load(s.backend.as_ref(), &all).await.map_err(ctx("load"))?;
    for page in [1usize, 7, 100, 1000] {
        let fwd = paged(s.backend.as_ref(), KeyRange::all(), Order::Ascending, page).await?;
        ensure!(
            fwd == all,
            "forward scan with page {page} differs from byte order ({} vs {} keys)",
            fwd.len(),
            all.len()
        );
        let rev = paged(s.backend.as_ref(), KeyRange::all(), Order::Descending, page).await?;
        let mut want = all.clone();
        want.reverse();
        ensure!(
            rev == want,
            "reverse scan with page {page} is not descending byte order"
        );
    }
    for _ in 0..200 {
        let a = all[rng.random_range(0..all.len())].0.clone();
        let b = all[rng.random_range(0..all.len())].0.clone();
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let start = if rng.random() {
            Bound::Included(Bytes::from(lo))
        } else {
            Bound::Excluded(Bytes::from(lo))
        };
        let end = match rng.random_range(0..3) {
            0 => Bound::Included(Bytes::from(hi)),
            1 => Bound::Excluded(Bytes::from(hi)),
            _ => Bound::Unbounded,
        };
        let range = KeyRange { start, end };
        let order = if rng.random() {
            Order::Ascending
        } else {
            Order::Descending
        };
        let limit = rng.random_range(1..50);
        let got = pairs(
            s.backend
                .scan(&range, order, limit)
                .await
                .map_err(ctx("scan"))?,
        );
        let want = model_scan(&model, &range, order, limit);
        ensure!(
            got == want,
            "scan of {range:?} {order:?} limit {limit}: got {} keys, model {}",
            got.len(),
            want.len()
        );
    }
    s.backend.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(format!(
        "{} keys, 4 page sizes, 200 random ranges",
        all.len()
    )))
}

/// A one-byte prefix scan returns exactly its table's keys, at every tag and at the edges.
pub async fn prefix_isolation(t: &Target) -> CheckResult {
    let s = t.fresh().await.map_err(ctx("fresh store"))?;
    let mut bytes: BTreeSet<u8> = tags::REGISTRY.iter().map(|i| i.tag.0).collect();
    bytes.extend([0x00, 0x1F, 0x20, 0x55, 0x7F, 0x80, 0xFC, 0xFD, 0xFE, 0xFF]);
    let mut model = Model::new();
    for b in &bytes {
        for suffix in [
            &[][..],
            &[0x00],
            &[0xFF],
            &[0xFF, 0xFF, 0xFF],
            &[0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01],
        ] {
            let mut k = vec![*b];
            k.extend_from_slice(suffix);
            model.insert(k, vec![*b]);
        }
    }
    model.insert(vec![0xFF; 40], vec![0xFF]);
    let all: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    load(s.backend.as_ref(), &all).await.map_err(ctx("load"))?;
    for b in 0..=255u8 {
        for order in [Order::Ascending, Order::Descending] {
            let got = paged(s.backend.as_ref(), KeyRange::prefix(&[b]), order, 3).await?;
            ensure!(
                got.iter().all(|(k, _)| k[0] == b),
                "prefix scan of {b:#04x} {order:?} leaked a key of another tag"
            );
            let want = model.keys().filter(|k| k[0] == b).count();
            ensure!(
                got.len() == want,
                "prefix scan of {b:#04x} {order:?} returned {} keys, expected {want}",
                got.len()
            );
        }
    }
    s.backend.close().await.map_err(ctx("close"))?;

    // A typed scan skips tags this binary does not know.
    let (cat, _) = writer(t).await?;
    name_key(&cat, 1).await.map_err(ctx("insert"))?;
    let mut b = WriteBatch::new();
    b.put(vec![0x55, 1, 2, 3], vec![9, 9, 9]);
    cat.backend()
        .write(b, Durability::Durable)
        .await
        .map_err(ctx("write unknown tag"))?;
    let r = cat.reader(None).await.map_err(ctx("reader"))?;
    let mut seen = Vec::new();
    r.visible_rows(&[], |k, _| seen.push(k.tag()))
        .await
        .map_err(ctx("typed scan over an unknown tag"))?;
    ensure!(
        seen.iter().all(|t| t.info().is_some()),
        "typed scan returned a key of an unknown tag"
    );
    ensure!(
        seen.contains(&tags::TABLE),
        "typed scan missed the table row"
    );
    drop(r);
    cat.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(format!(
        "256 prefixes × 2 orders over {} keys; unknown tag 0x55 skipped",
        all.len()
    )))
}

/// Batches are all-or-nothing; preconditions are checked atomically with the apply.
pub async fn atomic_batches(t: &Target) -> CheckResult {
    let s = t.fresh().await.map_err(ctx("fresh store"))?;
    let b = s.backend.clone();
    let mut first = WriteBatch::new();
    for i in 0..100u32 {
        first.put([&[0x20u8][..], &i.to_be_bytes()].concat(), b"v1".to_vec());
    }
    b.write(first, Durability::Durable)
        .await
        .map_err(ctx("first batch"))?;
    let before = dump(b.as_ref()).await.map_err(ctx("dump"))?;
    let mut bad = WriteBatch::new();
    for i in 0..100u32 {
        bad.put([&[0x20u8][..], &i.to_be_bytes()].concat(), b"v2".to_vec());
        bad.delete([&[0x20u8][..], &(i + 1000).to_be_bytes()].concat());
    }
    bad.expect(b"\x20absent".to_vec(), Some(Bytes::from_static(b"present")));
    match b.write(bad, Durability::Durable).await {
        Err(Error::ConditionFailed { .. }) => {}
        other => {
            return Err(format!(
                "a batch with a failing precondition returned {other:?}"
            ))
        }
    }
    ensure!(
        dump(b.as_ref()).await.map_err(ctx("dump"))? == before,
        "a refused batch changed the store"
    );
    let mut order = WriteBatch::new();
    order
        .put(b"\x20k".to_vec(), b"1".to_vec())
        .delete(b"\x20k".to_vec())
        .put(b"\x20k".to_vec(), b"2".to_vec());
    b.write(order, Durability::Buffered)
        .await
        .map_err(ctx("ordered batch"))?;
    ensure!(
        b.get(b"\x20k").await.map_err(ctx("get"))?.as_deref() == Some(&b"2"[..]),
        "the last write of a key in a batch must win"
    );

    // Compare-and-set increments from concurrent tasks: none lost.
    let key = b"\x20counter".to_vec();
    b.write(
        {
            let mut w = WriteBatch::new();
            w.put(key.clone(), 0u64.to_be_bytes().to_vec());
            w
        },
        Durability::Durable,
    )
    .await
    .map_err(ctx("counter"))?;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let b = b.clone();
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while done < 25 {
                let cur = b.get(&key).await?.unwrap_or_default();
                let n = u64::from_be_bytes(cur.as_ref().try_into().unwrap_or([0; 8]));
                let mut w = WriteBatch::new();
                w.expect(key.clone(), Some(cur.clone()));
                w.put(key.clone(), (n + 1).to_be_bytes().to_vec());
                match b.write(w, Durability::Buffered).await {
                    Ok(()) => done += 1,
                    Err(Error::ConditionFailed { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok::<_, Error>(())
        }));
    }
    for task in tasks {
        task.await
            .map_err(|e| e.to_string())?
            .map_err(ctx("increment"))?;
    }
    let v = b.get(&key).await.map_err(ctx("get"))?.unwrap_or_default();
    ensure!(
        v.as_ref() == 100u64.to_be_bytes(),
        "4 tasks × 25 compare-and-set increments gave {v:?}, not 100"
    );
    b.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(
        "refused batch left nothing; last write wins; 100 concurrent CAS increments".into(),
    ))
}

/// Injected faults (on reads, writes, views, flushes, and writes that applied but whose sync
/// failed) leave nothing half-written: a transaction's rows land all or none, a reported
/// success is there. Every round's fault fires, and a clean commit lands after it (the key
/// space does not stay broken); a fault on close leaves the store whole for the next opener.
pub async fn faults_leave_nothing_half_written(t: &Target) -> CheckResult {
    let s = t.fresh().await.map_err(ctx("fresh store"))?;
    let faulty = FaultyBackend::new(s.backend.clone());
    let backend: Arc<dyn KvBackend> = Arc::new(FaultyHandle(faulty.clone()));
    let cat = Keyspace::open(backend.clone()).await.map_err(ctx("open"))?;
    let mut rng = StdRng::seed_from_u64(7);
    let (mut failed, mut landed) = (0, 0);
    let mut hit: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut clean_id = 1_000_000u64;
    for round in 0..60u64 {
        let ids = [round * 3 + 1, round * 3 + 2, round * 3 + 3];
        // Armed within the calls a transaction makes (about ten); one that falls past them
        // lets the transaction commit whole, and is counted as not fired.
        faulty.arm(rng.random_range(1..=8), rng.random());
        let r = async {
            let mut tx = cat.begin().await?;
            for id in ids {
                tx.insert(&keystone::TABLE, KeyChoice::Named(id), table_cells("f"))
                    .await?;
            }
            tx.commit().await
        }
        .await;
        faulty.disarm();
        let what = match faulty.fired() {
            Some(what) => what,
            None if r.is_ok() => "nothing: the transaction ended first",
            None => return Err(format!("round {round}: failed without a fault: {r:?}")),
        };
        *hit.entry(what).or_default() += 1;
        if r.is_err() {
            failed += 1
        } else {
            landed += 1
        }
        let rows = dump(s.backend.as_ref()).await.map_err(ctx("dump"))?;
        let bound = bound_ids(&rows, keystone::TABLE.code());
        let present = ids.iter().filter(|i| bound.contains(i)).count();
        ensure!(
            present == 0 || present == 3,
            "round {round}: {present} of 3 rows of one transaction landed (fault in {what}: {r:?})"
        );
        if r.is_ok() {
            ensure!(
                present == 3,
                "round {round}: a commit reported success but its rows are missing"
            );
        }
        // The fault has cleared: the key space commits again.
        clean_id += 1;
        name_key(&cat, clean_id).await.map_err(|e| {
            format!("round {round}: after a fault in {what}, a clean commit failed: {e}")
        })?;
    }
    let fired: usize = hit
        .iter()
        .filter(|(w, _)| !w.starts_with("nothing"))
        .map(|(_, n)| n)
        .sum();
    ensure!(
        fired >= 50,
        "only {fired} of 60 rounds' faults fired: {hit:?}"
    );
    for kind in ["write", "flush", "view"] {
        ensure!(
            hit.keys().any(|w| w.starts_with(kind)),
            "no fault hit a {kind}: {hit:?}"
        );
    }
    // A fault on close: the store is whole for the next opener.
    faulty.arm_close();
    let closed = cat.close().await;
    ensure!(
        faulty.fired() == Some("close") && closed.is_err(),
        "the close fault did not fire or was not reported: {closed:?}"
    );
    faulty.disarm();
    s.backend.close().await.map_err(ctx("close the store"))?;
    if !t.ephemeral {
        let b = t.open(&s.url).await.map_err(ctx("reopen"))?;
        let rows = dump(b.as_ref()).await.map_err(ctx("dump"))?;
        let bound = bound_ids(&rows, keystone::TABLE.code());
        ensure!(
            (1_000_001..=clean_id).all(|id| bound.contains(&id)),
            "after a failed close, a clean commit is missing on reopen"
        );
        b.close().await.map_err(ctx("close"))?;
    }
    Ok(Outcome::Pass(format!(
        "60 transactions with injected faults ({fired} fired: {hit:?}): {failed} failed, {landed} \
         landed, none half-written; a clean commit landed after each; a failed close left the \
         store whole"
    )))
}

/// A view sees one point in time while writes continue; so does a catalog reader.
pub async fn read_views(t: &Target) -> CheckResult {
    let s = t.fresh().await.map_err(ctx("fresh store"))?;
    let b = s.backend.clone();
    let initial: Vec<_> = (0..200u32)
        .map(|i| ([&[0x20u8][..], &i.to_be_bytes()].concat(), b"old".to_vec()))
        .collect();
    load(b.as_ref(), &initial).await.map_err(ctx("load"))?;
    let before = dump(b.as_ref()).await.map_err(ctx("dump"))?;
    let view = b.view().await.map_err(ctx("view"))?;
    let mut w = WriteBatch::new();
    for i in 0..100u32 {
        w.put([&[0x20u8][..], &i.to_be_bytes()].concat(), b"new".to_vec());
    }
    for i in 100..150u32 {
        w.delete([&[0x20u8][..], &i.to_be_bytes()].concat());
    }
    for i in 1000..1050u32 {
        w.put(
            [&[0x20u8][..], &i.to_be_bytes()].concat(),
            b"added".to_vec(),
        );
    }
    b.write(w, Durability::Durable)
        .await
        .map_err(ctx("write"))?;
    for page in [1, 13, 500] {
        ensure!(
            paged(view.as_ref(), KeyRange::all(), Order::Ascending, page).await? == before,
            "the view changed under writes (page {page})"
        );
        let mut rev = before.clone();
        rev.reverse();
        ensure!(
            paged(view.as_ref(), KeyRange::all(), Order::Descending, page).await? == rev,
            "the view's reverse scan changed under writes"
        );
    }
    for limit in [1000, 5000] {
        let mut lent = Vec::new();
        view.visit(&KeyRange::all(), Order::Ascending, limit, &mut |k, v| {
            lent.push((k.to_vec(), v.to_vec()));
            true
        })
        .await
        .map_err(ctx("visit"))?;
        ensure!(
            lent == before,
            "the view's visit (limit {limit}) changed under writes"
        );
    }
    ensure!(
        view.get(&[&[0x20u8][..], &120u32.to_be_bytes()].concat())
            .await
            .map_err(ctx("get"))?
            .as_deref()
            == Some(&b"old"[..]),
        "a deleted key vanished from the view"
    );
    ensure!(
        view.get(&[&[0x20u8][..], &1000u32.to_be_bytes()].concat())
            .await
            .map_err(ctx("get"))?
            .is_none(),
        "a key added later appeared in the view"
    );
    let fresh = b.view().await.map_err(ctx("view"))?;
    ensure!(
        paged(fresh.as_ref(), KeyRange::all(), Order::Ascending, 64).await?
            == dump(b.as_ref()).await.map_err(ctx("dump"))?,
        "a new view does not see the new state"
    );
    drop(view);
    b.close().await.map_err(ctx("close"))?;

    // Catalog level: a reader at snapshot S keeps seeing the catalog as of S.
    let (cat, _) = writer(t).await?;
    for id in 1..=20 {
        name_key(&cat, id).await.map_err(ctx("insert"))?;
    }
    let reader = cat.reader(None).await.map_err(ctx("reader"))?;
    let seen = table_rows(&reader).await.map_err(ctx("read"))?;
    for id in 1..=10 {
        delete_key(&cat, id).await.map_err(ctx("delete"))?;
    }
    for id in 21..=30 {
        name_key(&cat, id).await.map_err(ctx("insert"))?;
    }
    ensure!(
        table_rows(&reader).await.map_err(ctx("read"))? == seen,
        "a catalog reader's rows changed while writers committed"
    );
    drop(reader);
    cat.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(
        "raw view frozen over 200 updates/deletes/inserts; catalog reader frozen over 20 commits"
            .into(),
    ))
}

/// Seeded sequences of operations applied to the engine and to a model, compared at each step.
pub async fn model_based(t: &Target) -> CheckResult {
    let persistent = !t.ephemeral && capabilities(t).await.map_err(ctx("probe"))?.persistent;
    let (base, count) = model_seeds_from_env();
    let seeds: Vec<u64> = REGRESSION_SEEDS
        .iter()
        .copied()
        .chain((0..count).map(|i| base.wrapping_add(i)))
        .collect();
    let (mut steps, mut bulk_bytes, mut compacted) = (0, 0, 0);
    for seed in &seeds {
        steps += model_run(t, *seed, persistent, &mut bulk_bytes, &mut compacted)
            .await
            .map_err(|e| {
                format!(
                    "seed {seed}: {e} (ROCKLAKE_MODEL_SEED={seed} ROCKLAKE_MODEL_SEEDS=1 runs \
                     it alone; add it to REGRESSION_SEEDS)"
                )
            })?;
    }
    Ok(Outcome::Pass(format!(
        "{} seeds (ROCKLAKE_MODEL_SEED={base}, {count} from it, {} regression seeds), {steps} \
         steps, {} KiB in bulk batches, reopens {}, compared again after a forced compaction \
         in {compacted} of them{}",
        seeds.len(),
        REGRESSION_SEEDS.len(),
        bulk_bytes / 1024,
        if persistent {
            "included"
        } else {
            "not possible"
        },
        if compacted == 0 {
            " (the engine has none to force)"
        } else {
            ""
        }
    )))
}

/// Seeds that once failed; they run first, every time.
pub const REGRESSION_SEEDS: &[u64] = &[];

/// The first seed and the number of seeds of [`model_based`]: `ROCKLAKE_MODEL_SEED` (else a
/// new random one each run, printed in the check's report, so that runs keep finding new
/// sequences and any one can be replayed) and `ROCKLAKE_MODEL_SEEDS` (else 12; CI asks more).
///
/// # Panics
/// When a variable is set but not a whole number: a typo must not quietly run the default.
pub fn model_seeds_from_env() -> (u64, u64) {
    let number = |name: &str| {
        std::env::var(name).ok().map(|v| {
            v.trim()
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number"))
        })
    };
    let base = number("ROCKLAKE_MODEL_SEED").unwrap_or_else(rand::random);
    (base, number("ROCKLAKE_MODEL_SEEDS").unwrap_or(12))
}

async fn model_run(
    t: &Target,
    seed: u64,
    persistent: bool,
    bulk_bytes: &mut usize,
    compacted: &mut usize,
) -> Result<usize, String> {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

    #[derive(Clone, Debug)]
    enum Op {
        Put(u16, u8),
        Delete(u16),
        Batch(Vec<(u16, Option<u8>)>, bool),
        /// From, to, reverse, limit, bound kinds (start and end: included, excluded, open).
        Scan(u16, u16, bool, u8, u8),
        /// A prefix scan: of the table (`None`) or of the keys whose first key byte is this.
        Prefix(Option<u8>, bool),
        /// Take a view and keep it, with the model as it is now.
        Snap,
        /// Read the most recent kept view again, after whatever was written since.
        Reread,
        Reopen,
        Name(u16),
        Issue,
        Remove(u16),
        /// One batch of `count` keys from `start` (wrapping), each value `len` copies of a
        /// byte: enough data, over a run, to leave a small memtable for the engine's flush and
        /// compaction paths.
        Bulk(u16, u8, u8, u16),
    }
    let op = proptest::prop_oneof![
        4 => (0u16..300, proptest::num::u8::ANY).prop_map(|(k, v)| Op::Put(k, v)),
        2 => (0u16..300).prop_map(Op::Delete),
        2 => (proptest::collection::vec((0u16..300, proptest::option::of(proptest::num::u8::ANY)), 1..20), proptest::bool::ANY).prop_map(|(v, ok)| Op::Batch(v, ok)),
        3 => (0u16..300, 0u16..300, proptest::bool::ANY, 1u8..40, 0u8..9).prop_map(|(a, b, r, l, k)| Op::Scan(a, b, r, l, k)),
        1 => (proptest::option::of(0u8..3), proptest::bool::ANY).prop_map(|(p, r)| Op::Prefix(p, r)),
        1 => proptest::strategy::Just(Op::Snap),
        2 => proptest::strategy::Just(Op::Reread),
        1 => proptest::strategy::Just(Op::Reopen),
        2 => (1u16..200).prop_map(Op::Name),
        2 => proptest::strategy::Just(Op::Issue),
        1 => (1u16..200).prop_map(Op::Remove),
        1 => (0u16..300, 8u8..64, proptest::num::u8::ANY, 512u16..4096).prop_map(|(s, n, v, l)| Op::Bulk(s, n, v, l)),
    ];
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let ops = proptest::collection::vec(op, 60..120)
        .new_tree(&mut runner)
        .map_err(|e| e.to_string())?
        .current();

    let key = |k: u16| [&[0x20u8][..], &k.to_be_bytes()].concat();
    let mut model = Model::new();
    let mut bound: BTreeMap<u64, bool> = BTreeMap::new(); // id -> deleted
    let mut mark = 1u64;
    let s = t.fresh().await.map_err(ctx("fresh"))?;
    let url = s.url.clone();
    let mut cat = Keyspace::open(s.backend).await.map_err(ctx("open"))?;
    // Views kept across later writes, with the model at the time each was taken.
    let mut snaps: Vec<(Arc<dyn ReadView>, Model)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let b = cat.backend().clone();
        match op {
            Op::Put(k, v) => {
                let mut w = WriteBatch::new();
                w.put(key(*k), vec![*v]);
                b.write(w, Durability::Durable).await.map_err(ctx("put"))?;
                model.insert(key(*k), vec![*v]);
            }
            Op::Bulk(start, count, v, len) => {
                let mut w = WriteBatch::new();
                for j in 0..u16::from(*count) {
                    let k = (start + j) % 300;
                    w.put(key(k), vec![*v; usize::from(*len)]);
                    model.insert(key(k), vec![*v; usize::from(*len)]);
                }
                b.write(w, Durability::Durable).await.map_err(ctx("bulk"))?;
                *bulk_bytes += usize::from(*count) * usize::from(*len);
            }
            Op::Delete(k) => {
                let mut w = WriteBatch::new();
                w.delete(key(*k));
                b.write(w, Durability::Buffered)
                    .await
                    .map_err(ctx("delete"))?;
                model.remove(&key(*k));
            }
            Op::Batch(items, ok) => {
                let mut w = WriteBatch::new();
                for (k, v) in items {
                    match v {
                        Some(v) => w.put(key(*k), vec![*v]),
                        None => w.delete(key(*k)),
                    };
                }
                let probe = key(items[0].0);
                let expected = if *ok {
                    model.get(&probe).cloned().map(Bytes::from)
                } else {
                    Some(Bytes::from_static(b"never"))
                };
                w.expect(probe, expected);
                let r = b.write(w, Durability::Durable).await;
                match (ok, r) {
                    (true, Ok(())) => {
                        for (k, v) in items {
                            match v {
                                Some(v) => model.insert(key(*k), vec![*v]),
                                None => model.remove(&key(*k)),
                            };
                        }
                    }
                    (false, Err(Error::ConditionFailed { .. })) => {}
                    (ok, r) => {
                        return Err(format!(
                            "step {i}: batch with precondition holding={ok} returned {r:?}"
                        ))
                    }
                }
            }
            Op::Prefix(p, rev) => {
                let prefix = match p {
                    None => vec![0x20],
                    Some(p) => vec![0x20, *p],
                };
                let range = KeyRange::prefix(&prefix);
                let order = if *rev {
                    Order::Descending
                } else {
                    Order::Ascending
                };
                let got = paged(b.as_ref(), range.clone(), order, 7).await?;
                let want = model_scan(&model, &range, order, usize::MAX);
                if got != want {
                    return Err(format!(
                        "step {i}: prefix scan of {} {order:?} differs from the model ({} pairs, \
                         the model has {})",
                        keys::hex(&prefix),
                        got.len(),
                        want.len()
                    ));
                }
            }
            Op::Snap => {
                let view = b.view().await.map_err(ctx("view"))?;
                snaps.push((view, model.clone()));
                if snaps.len() > 3 {
                    snaps.remove(0);
                }
            }
            Op::Reread => {
                if let Some((view, then)) = snaps.last() {
                    for order in [Order::Ascending, Order::Descending] {
                        let got = paged(view.as_ref(), KeyRange::all(), order, 16).await?;
                        let want: Vec<(Vec<u8>, Vec<u8>)> = {
                            let mut w =
                                model_scan(then, &KeyRange::prefix(&[0x20]), order, usize::MAX);
                            // The view also holds the key space's own keys; keep the table's.
                            w.retain(|(k, _)| k[0] == 0x20);
                            w
                        };
                        let got: Vec<_> = got.into_iter().filter(|(k, _)| k[0] == 0x20).collect();
                        if got != want {
                            return Err(format!(
                                "step {i}: a view read again after later writes differs from \
                                 the model at its time ({order:?}: {} pairs, the model had {})",
                                got.len(),
                                want.len()
                            ));
                        }
                    }
                }
            }
            Op::Scan(a, z, rev, limit, kinds) => {
                let (lo, hi) = if a <= z { (*a, *z) } else { (*z, *a) };
                let bound = |kind: u8, k: u16| match kind {
                    0 => Bound::Included(Bytes::from(key(k))),
                    1 => Bound::Excluded(Bytes::from(key(k))),
                    _ => Bound::Unbounded,
                };
                let mut range = KeyRange {
                    start: bound(kinds / 3, lo),
                    end: bound(kinds % 3, hi),
                };
                // An open end reaches the key space's own keys around the table: the whole
                // range is walked, and its table keys compared with the model's.
                if range.start == Bound::Unbounded || range.end == Bound::Unbounded {
                    let order = if *rev {
                        Order::Descending
                    } else {
                        Order::Ascending
                    };
                    let got: Vec<_> = paged(b.as_ref(), range.clone(), order, *limit as usize)
                        .await?
                        .into_iter()
                        .filter(|(k, _)| k[0] == 0x20)
                        .collect();
                    if range.start == Bound::Unbounded {
                        range.start = Bound::Included(Bytes::from_static(&[0x20]));
                    }
                    if range.end == Bound::Unbounded {
                        range.end = Bound::Excluded(Bytes::from_static(&[0x21]));
                    }
                    let want = model_scan(&model, &range, order, usize::MAX);
                    if got != want {
                        return Err(format!(
                            "step {i}: open-ended scan {range:?} {order:?} differs from the model"
                        ));
                    }
                    continue;
                }
                let order = if *rev {
                    Order::Descending
                } else {
                    Order::Ascending
                };
                let got = pairs(
                    b.scan(&range, order, *limit as usize)
                        .await
                        .map_err(ctx("scan"))?,
                );
                let want = model_scan(&model, &range, order, *limit as usize);
                if got != want {
                    return Err(format!(
                        "step {i}: scan {lo}..{hi} {order:?} limit {limit} differs from the model"
                    ));
                }
                // `visit` lends the same pairs, on the store and on a view, and stops when told.
                let view = b.view().await.map_err(ctx("view"))?;
                let stop = (*limit as usize).div_ceil(2);
                for (on, target) in [
                    ("store", b.as_ref() as &dyn ReadView),
                    ("view", view.as_ref()),
                ] {
                    let mut lent = Vec::new();
                    let n = target
                        .visit(&range, order, *limit as usize, &mut |k, v| {
                            lent.push((k.to_vec(), v.to_vec()));
                            lent.len() < stop
                        })
                        .await
                        .map_err(ctx("visit"))?;
                    let expect = &want[..want.len().min(stop)];
                    if lent != expect || n != lent.len() {
                        return Err(format!(
                            "step {i}: visit of the {on}, {lo}..{hi} {order:?} limit {limit} \
                             stopping after {stop}, lent {} pairs (said {n}), the model has {}",
                            lent.len(),
                            expect.len()
                        ));
                    }
                }
            }
            Op::Reopen if persistent => {
                // Views keep an engine's store open (RocksDB's hold its lock): let them go.
                snaps.clear();
                cat.close().await.map_err(ctx("close"))?;
                cat = Keyspace::open(t.open(&url).await.map_err(ctx("reopen"))?)
                    .await
                    .map_err(ctx("open"))?;
            }
            Op::Reopen => {}
            Op::Name(id) => {
                let id = u64::from(*id);
                let r = name_key(&cat, id).await;
                match (bound.contains_key(&id), r) {
                    (false, Ok(_)) => {
                        bound.insert(id, false);
                        mark = mark.max(id + 1);
                    }
                    (true, Err(e)) if e.kind() == ErrorKind::AlreadyExists => {}
                    (was, r) => {
                        return Err(format!(
                            "step {i}: naming {id} (bound before: {was}) gave {r:?}"
                        ))
                    }
                }
            }
            Op::Issue => {
                let id = issue_key(&cat).await.map_err(ctx("issue"))?;
                if id < mark || bound.contains_key(&id) {
                    return Err(format!(
                        "step {i}: issued {id} but the model's mark is {mark}"
                    ));
                }
                bound.insert(id, false);
                mark = id + 1;
            }
            Op::Remove(id) => {
                let id = u64::from(*id);
                let d = delete_key(&cat, id).await.map_err(ctx("delete"))?;
                let want = bound.get(&id) == Some(&false);
                if d != want {
                    return Err(format!(
                        "step {i}: delete {id} returned {d}, model says {want}"
                    ));
                }
                if want {
                    bound.insert(id, true);
                }
            }
        }
        // Compare everything after each step.
        let rows = dump(cat.backend().as_ref()).await.map_err(ctx("dump"))?;
        let raw: Model = rows.iter().filter(|(k, _)| k[0] == 0x20).cloned().collect();
        if raw != model {
            return Err(format!("step {i} ({op:?}): raw keys differ from the model"));
        }
        let got = bound_ids(&rows, keystone::TABLE.code());
        let want: BTreeSet<u64> = bound.keys().copied().collect();
        if got != want {
            return Err(format!(
                "step {i} ({op:?}): bound keys {got:?}, model {want:?}"
            ));
        }
    }
    // Once more after the engine was made to write out and merge what it holds (RocksDB:
    // memtables flushed, every level compacted; SlateDB: the memtable written as an L0 table).
    snaps.clear();
    if cat.backend().compact().await.map_err(ctx("compact"))? {
        *compacted += 1;
        let rows = dump(cat.backend().as_ref()).await.map_err(ctx("dump"))?;
        let raw: Model = rows.iter().filter(|(k, _)| k[0] == 0x20).cloned().collect();
        if raw != model {
            return Err("after a forced compaction: raw keys differ from the model".into());
        }
        let got = bound_ids(&rows, keystone::TABLE.code());
        let want: BTreeSet<u64> = bound.keys().copied().collect();
        if got != want {
            return Err(format!(
                "after a forced compaction: bound keys {got:?}, model {want:?}"
            ));
        }
    }
    cat.close().await.map_err(ctx("close"))?;
    Ok(ops.len())
}

/// Arbitrary bytes never panic the decoders; a newer value still decodes; a corrupt value in
/// the store surfaces as a `Corrupt` error naming the key.
pub async fn bad_bytes(t: &Target) -> CheckResult {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[3; 32]),
    );
    let strat = proptest::collection::vec(proptest::num::u8::ANY, 0..80);
    let mut typed = 0;
    for _ in 0..5000 {
        let bytes = strat
            .new_tree(&mut runner)
            .map_err(|e| e.to_string())?
            .current();
        let r = std::panic::catch_unwind(|| {
            let k = Key::decode(&bytes).map(|_| ()).map_err(|e| e.to_string());
            let key = keys::TableKey {
                table_id: 1,
                begin_snapshot: 1,
            }
            .encode();
            let v = Row::decode(&key, &bytes)
                .map(|_| ())
                .map_err(|e| e.to_string());
            let _ = rocklake_core::values::render_value(&bytes, &bytes);
            let _ = rocklake_core::values::Binding::decode_at(&bytes, &bytes);
            (k, v)
        });
        match r {
            Ok((k, v)) => {
                if k.is_err() || v.is_err() {
                    typed += 1;
                }
                for m in [k.err(), v.err()].into_iter().flatten() {
                    if m.is_empty() {
                        return Err("an error with no message".into());
                    }
                }
            }
            Err(_) => return Err(format!("decoding {} panicked", keys::hex(&bytes))),
        }
    }
    // A value with a field from a newer codec (field 15) still decodes.
    let key = keys::TableKey {
        table_id: 1,
        begin_snapshot: 1,
    }
    .encode();
    let mut newer = Row::new(1, vec![Value::Int(1)]).encode_unchecked();
    newer.extend_from_slice(&[0x78, 0x63]);
    Row::decode(&key, &newer).map_err(ctx("newer value"))?;

    let (cat, _) = writer(t).await?;
    name_key(&cat, 1).await.map_err(ctx("insert"))?;
    let bad_key = keys::TableKey {
        table_id: 9,
        begin_snapshot: 1,
    }
    .encode();
    let mut w = WriteBatch::new();
    w.put(bad_key.to_vec(), vec![0xFF, 0xFF, 0xFF]);
    cat.backend()
        .write(w, Durability::Durable)
        .await
        .map_err(ctx("write"))?;
    let r = cat.reader(None).await.map_err(ctx("reader"))?;
    let e = r
        .visible_rows(&[tags::TABLE.0], |_, _| {})
        .await
        .err()
        .ok_or("a corrupt row was read without error")?;
    ensure!(
        e.kind() == ErrorKind::Corrupt && e.to_string().contains("table_id=9"),
        "corrupt row: {e}"
    );
    drop(r);
    cat.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(format!("5000 random inputs, {typed} typed errors, no panic; newer value decodes; stored garbage reported Corrupt")))
}

/// The edges of the contract: a batch holding the empty key is refused whole; a 1 MiB value
/// and a batch of 100,000 writes land whole and read back; after close, every call of the
/// store and of a key space over it is an error (`Closed`), never a panic, and closing twice
/// is fine.
pub async fn edges_and_close(t: &Target) -> CheckResult {
    let s = t.fresh().await.map_err(ctx("fresh"))?;
    let b = s.backend.clone();

    let mut w = WriteBatch::new();
    w.put(vec![0x20, 1], b"lands only with the batch".to_vec());
    w.put(Vec::<u8>::new(), b"empty key".to_vec());
    match b.write(w, Durability::Durable).await {
        Err(Error::InvalidArgument(m)) if m.contains("empty key") => {}
        other => return Err(format!("a batch with the empty key gave {other:?}")),
    }
    ensure!(
        b.get(&[0x20, 1]).await.map_err(ctx("get"))?.is_none(),
        "a refused batch left a write behind"
    );

    let big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    let mut w = WriteBatch::new();
    w.put(vec![0x20, 2], big.clone());
    b.write(w, Durability::Durable)
        .await
        .map_err(ctx("write 1 MiB"))?;
    let back = b.get(&[0x20, 2]).await.map_err(ctx("get 1 MiB"))?;
    ensure!(
        back.as_deref() == Some(&big[..]),
        "the 1 MiB value read back as {:?} bytes",
        back.map(|v| v.len())
    );

    const MANY: u32 = 100_000;
    let key = |i: u32| [&[0x21u8][..], &i.to_be_bytes()].concat();
    let mut w = WriteBatch::new();
    for i in 0..MANY {
        w.put(key(i), i.to_le_bytes().to_vec());
    }
    b.write(w, Durability::Durable)
        .await
        .map_err(ctx("write 100,000"))?;
    let n = rocklake_core::backend::count_range(b.as_ref(), KeyRange::prefix(&[0x21]))
        .await
        .map_err(ctx("count"))?;
    ensure!(n == MANY as u64, "a batch of {MANY} writes left {n} keys");
    for i in [0, 1, MANY / 2, MANY - 1] {
        let v = b.get(&key(i)).await.map_err(ctx("get"))?;
        ensure!(
            v.as_deref() == Some(&i.to_le_bytes()[..]),
            "key {i} of the big batch read back as {v:?}"
        );
    }

    let view = b.view().await.map_err(ctx("view"))?;
    b.close().await.map_err(ctx("close"))?;
    b.close().await.map_err(ctx("close twice"))?;
    let closed = |what: &str, r: Result<(), Error>| match r {
        Err(Error::Closed) => Ok(()),
        other => Err(format!("{what} after close gave {other:?}, not Closed")),
    };
    closed("get", b.get(&[0x20, 2]).await.map(drop))?;
    closed(
        "scan",
        b.scan(&KeyRange::all(), Order::Ascending, 10)
            .await
            .map(drop),
    )?;
    closed(
        "visit",
        b.visit(&KeyRange::all(), Order::Descending, 10, &mut |_, _| true)
            .await
            .map(drop),
    )?;
    let mut w = WriteBatch::new();
    w.put(vec![0x20, 3], b"late".to_vec());
    closed("write", b.write(w, Durability::Buffered).await)?;
    closed("view", b.view().await.map(drop))?;
    closed("flush", b.flush().await)?;
    // A view taken before close may keep reading (RocksDB, SlateDB) or answer Closed (sled's
    // overlay reads the live tree); either is fine, a panic is not.
    let view_read = match view.get(&[0x20, 1]).await {
        Ok(_) => "kept reading",
        Err(Error::Closed) => "answered Closed",
        Err(e) => return Err(format!("a view read after close gave {e}")),
    };
    drop(view);

    // A key space over a store, closed: every entry point answers Closed.
    let s = t.fresh().await.map_err(ctx("fresh"))?;
    let ks = Keyspace::open(s.backend.clone())
        .await
        .map_err(ctx("open"))?;
    name_key(&ks, 1).await.map_err(ctx("insert"))?;
    ks.close().await.map_err(ctx("close the key space"))?;
    ks.close().await.map_err(ctx("close the key space twice"))?;
    closed("begin", ks.begin().await.map(drop))?;
    closed("issue_id", ks.issue_id(&keystone::TABLE).await.map(drop))?;
    closed("gc", ks.gc().await.map(drop))?;
    Ok(Outcome::Pass(format!(
        "the empty key refused whole; 1 MiB value and a {MANY}-write batch read back; every \
         call after close answered Closed; a view taken before close {view_read}"
    )))
}
