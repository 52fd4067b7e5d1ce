//! The checks. Each returns `Ok(Outcome)` or `Err(message naming what failed)`.

use rocklake_core::ErrorKind;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rocklake_core::backend::{KeyRange, KvBackend, Order, Pager, ReadView, WriteBatch};
use rocklake_core::catalog::DrawHook;
use rocklake_core::keys::{self, Key};
use rocklake_core::keystone::{self, MAX_ID};
use rocklake_core::tags;
use rocklake_core::values::Row;
use rocklake_core::{Admin, Catalog, CatalogOptions, Durability, Error, KeyChoice, Value};

use crate::util::{capabilities, dump, load};
use crate::{
    crash, ctx, ensure, CheckFn, CheckResult, FaultyBackend, FaultyHandle, Outcome, Target,
};

/// Every check, in report order.
pub static ALL: &[(&str, CheckFn)] = &[
    ("ordering", |t| Box::pin(ordering(t))),
    ("prefix_isolation", |t| Box::pin(prefix_isolation(t))),
    ("atomic_batches", |t| Box::pin(atomic_batches(t))),
    ("faults_leave_nothing_half_written", |t| {
        Box::pin(faults_leave_nothing_half_written(t))
    }),
    ("read_views", |t| Box::pin(read_views(t))),
    ("durability_across_reopen", |t| {
        Box::pin(durability_across_reopen(t))
    }),
    ("crash_durability", |t| Box::pin(crash_durability(t))),
    ("mvcc_visibility", |t| Box::pin(mvcc_visibility(t))),
    ("snapshot_order", |t| Box::pin(snapshot_order(t))),
    ("gc_keeps_what_readers_see", |t| {
        Box::pin(gc_keeps_what_readers_see(t))
    }),
    ("keystone_examples", |t| Box::pin(keystone_examples(t))),
    ("keystone_refusals", |t| Box::pin(keystone_refusals(t))),
    ("keystone_delete_keeps_key", |t| {
        Box::pin(keystone_delete_keeps_key(t))
    }),
    ("keystone_purge_waits_for_readers", |t| {
        Box::pin(keystone_purge_waits_for_readers(t))
    }),
    ("keystone_eight_draws", |t| {
        Box::pin(keystone_eight_draws(t))
    }),
    ("keystone_concurrent_issue", |t| {
        Box::pin(keystone_concurrent_issue(t))
    }),
    ("keystone_never_reissued", |t| {
        Box::pin(keystone_never_reissued(t))
    }),
    ("keystone_rollback_cycles", |t| {
        Box::pin(keystone_rollback_cycles(t))
    }),
    ("fencing", |t| Box::pin(fencing(t))),
    ("model_based", |t| Box::pin(model_based(t))),
    ("bad_bytes", |t| Box::pin(bad_bytes(t))),
];

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn model_scan(
    model: &Model,
    range: &KeyRange,
    order: Order,
    limit: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let (s, e) = range.as_slices();
    if range.is_empty() {
        return vec![];
    }
    let it = model
        .range::<[u8], _>((s, e))
        .map(|(k, v)| (k.clone(), v.clone()));
    match order {
        Order::Ascending => it.take(limit).collect(),
        Order::Descending => it.rev().take(limit).collect(),
    }
}

fn pairs(v: Vec<(Bytes, Bytes)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    v.into_iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect()
}

async fn paged(
    view: &dyn ReadView,
    range: KeyRange,
    order: Order,
    page: usize,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>, String> {
    let mut out = Vec::new();
    let mut p = Pager::new(view, range, order, page);
    while let Some(items) = p.next_page().await.map_err(ctx("paging"))? {
        out.extend(pairs(items));
    }
    Ok(out)
}

fn table_cells(name: &str) -> Vec<Value> {
    vec![
        Value::Null,
        Value::Text("uuid".into()),
        Value::Int(1),
        Value::Text(name.into()),
    ]
}

async fn name_key(cat: &Catalog, id: u64) -> Result<u64, Error> {
    let mut t = cat.begin().await?;
    let p = t
        .insert(&keystone::TABLE, KeyChoice::Named(id), table_cells("named"))
        .await?;
    t.commit().await?;
    Ok(p.id)
}

async fn issue_key(cat: &Catalog) -> Result<u64, Error> {
    let mut t = cat.begin().await?;
    let p = t
        .insert(&keystone::TABLE, KeyChoice::Issued, table_cells("issued"))
        .await?;
    t.commit().await?;
    Ok(p.id)
}

async fn delete_key(cat: &Catalog, id: u64) -> Result<bool, Error> {
    let mut t = cat.begin().await?;
    let d = t.delete(&keystone::TABLE, id).await?;
    t.commit().await?;
    Ok(d)
}

async fn table_rows(r: &rocklake_core::Reader) -> Result<Vec<(String, Vec<Value>)>, Error> {
    let mut rows = Vec::new();
    r.visible_rows(&[tags::TABLE.0], |k, row| {
        rows.push((k.to_string(), row.cells))
    })
    .await?;
    Ok(rows)
}

async fn writer(t: &Target) -> Result<(Catalog, String), String> {
    let s = t.fresh().await.map_err(ctx("fresh store"))?;
    let cat = Catalog::open(s.backend)
        .await
        .map_err(ctx("open catalog"))?;
    Ok((cat, s.url))
}

fn bound_ids(rows: &[(Vec<u8>, Vec<u8>)], space: u8) -> BTreeSet<u64> {
    rows.iter()
        .filter_map(|(k, _)| match Key::decode(k) {
            Ok(Key::Binding { space: s, id }) if s == space => Some(id),
            _ => None,
        })
        .collect()
}

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

/// Faults injected into reads and writes (before and after the write applied) never leave a
/// transaction half-written.
pub async fn faults_leave_nothing_half_written(t: &Target) -> CheckResult {
    let s = t.fresh().await.map_err(ctx("fresh store"))?;
    let faulty = FaultyBackend::new(s.backend.clone());
    let backend: Arc<dyn KvBackend> = Arc::new(FaultyHandle(faulty.clone()));
    let cat = Catalog::open(backend.clone()).await.map_err(ctx("open"))?;
    let mut rng = StdRng::seed_from_u64(7);
    let (mut failed, mut landed) = (0, 0);
    for round in 0..60u64 {
        faulty.arm(rng.random_range(1..12), rng.random());
        let ids = [round * 3 + 1, round * 3 + 2, round * 3 + 3];
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
            "round {round}: {present} of 3 rows of one transaction landed ({r:?})"
        );
        if r.is_ok() {
            ensure!(
                present == 3,
                "round {round}: a commit reported success but its rows are missing"
            );
        }
    }
    cat.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(format!(
        "60 transactions with injected faults: {failed} failed, {landed} landed, none half-written"
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

/// Durable commits survive close and reopen.
pub async fn durability_across_reopen(t: &Target) -> CheckResult {
    if t.ephemeral || !capabilities(t).await.map_err(ctx("probe"))?.persistent {
        return Ok(Outcome::NotApplicable(format!(
            "{} does not persist across reopen",
            t.base
        )));
    }
    let (cat, url) = writer(t).await?;
    for id in 1..=50 {
        name_key(&cat, id * 10).await.map_err(ctx("insert"))?;
    }
    let issued = issue_key(&cat).await.map_err(ctx("issue"))?;
    let before = dump(cat.backend().as_ref()).await.map_err(ctx("dump"))?;
    let mark = cat
        .describe(&keystone::TABLE)
        .await
        .map_err(ctx("describe"))?
        .next_id;
    cat.close().await.map_err(ctx("close"))?;
    drop(cat);
    let b = t.open(&url).await.map_err(ctx("reopen"))?;
    // Counters are compared through the marks below: a clean close writes the exact marks
    // back over unused reservations.
    let data = |rows: Vec<(Vec<u8>, Vec<u8>)>| {
        rows.into_iter()
            .filter(|(k, _)| k[0] != tags::COUNTER.0)
            .collect::<Vec<_>>()
    };
    let after = dump(b.as_ref()).await.map_err(ctx("dump"))?;
    let (before, after) = (data(before), data(after));
    ensure!(
        after == before,
        "after reopen the store holds {} keys (counters aside), before close {}",
        after.len(),
        before.len()
    );
    let cat = Catalog::open_read_only(b.clone())
        .await
        .map_err(ctx("open"))?;
    let reopened_mark = cat
        .describe(&keystone::TABLE)
        .await
        .map_err(ctx("describe"))?
        .next_id;
    ensure!(
        reopened_mark == mark,
        "next_id was {mark} before a clean close and {reopened_mark} after"
    );
    b.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(format!(
        "{} keys and next_id={mark} (issued {issued}) identical after reopen",
        after.len()
    )))
}

/// Acknowledged commits survive SIGKILL of the writer process.
pub async fn crash_durability(t: &Target) -> CheckResult {
    if t.ephemeral || t.child.is_none() {
        return Ok(Outcome::NotApplicable(format!(
            "{}: no separate process can reach this store",
            t.base
        )));
    }
    if t.crash_rounds == 0 {
        return Ok(Outcome::NotApplicable("0 crash rounds asked for".into()));
    }
    let s = crash::run_rounds(t, t.crash_rounds).await?;
    Ok(Outcome::Pass(format!(
        "{} SIGKILL rounds, {} acknowledged commits all present, {} rows, no half batch, marks never went back",
        s.rounds, s.acknowledged, s.rows
    )))
}

/// Visibility at every snapshot equals the history's model.
pub async fn mvcc_visibility(t: &Target) -> CheckResult {
    let (cat, _) = writer(t).await?;
    // history: id -> (begin, end)
    let mut history: BTreeMap<u64, (u64, Option<u64>)> = BTreeMap::new();
    let mut rng = StdRng::seed_from_u64(11);
    for step in 0..60u64 {
        let mut tx = cat.begin().await.map_err(ctx("begin"))?;
        let snap = tx.write_snapshot().await.map_err(ctx("snapshot"))?;
        let live: Vec<u64> = history
            .iter()
            .filter(|(_, v)| v.1.is_none())
            .map(|(k, _)| *k)
            .collect();
        if !live.is_empty() && rng.random_bool(0.4) {
            let id = live[rng.random_range(0..live.len())];
            tx.delete(&keystone::TABLE, id)
                .await
                .map_err(ctx("delete"))?;
            history.get_mut(&id).unwrap().1 = Some(snap);
        } else {
            let id = step + 1;
            tx.insert(&keystone::TABLE, KeyChoice::Named(id), table_cells("m"))
                .await
                .map_err(ctx("insert"))?;
            history.insert(id, (snap, None));
        }
        tx.commit().await.map_err(ctx("commit"))?;
    }
    let last = cat.current_snapshot().await.map_err(ctx("snapshot"))?;
    for s in 0..=last {
        let r = cat.reader(Some(s)).await.map_err(ctx("reader"))?;
        let mut got = BTreeSet::new();
        r.visible_rows(&[tags::TABLE.0], |k, _| {
            got.insert(k.field("table_id").unwrap_or(0));
        })
        .await
        .map_err(ctx("scan"))?;
        let want: BTreeSet<u64> = history
            .iter()
            .filter(|(_, (b, e))| *b <= s && e.is_none_or(|e| s < e))
            .map(|(k, _)| *k)
            .collect();
        ensure!(
            got == want,
            "at snapshot {s}: visible {got:?}, model {want:?}"
        );
        for id in [1u64, 30, 60] {
            let one = r
                .by_id(&keystone::TABLE, id)
                .await
                .map_err(ctx("by_id"))?
                .is_some();
            ensure!(
                one == want.contains(&id),
                "at snapshot {s}: by_id({id}) = {one}"
            );
        }
    }
    cat.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(format!(
        "{} entities checked at every one of {} snapshots",
        history.len(),
        last + 1
    )))
}

/// What readers saw at each snapshot: its `ducklake_table` rows.
type Seen = BTreeMap<u64, Vec<(String, Vec<Value>)>>;

/// Snapshots publish in order under concurrency, and time travel is repeatable: committers on
/// several tasks insert, update and delete rows (running a commit again when it is refused as
/// retryable), while readers record what the latest snapshot shows and later read an earlier
/// recorded snapshot again. Every re-read, during the run and after it, equals the first read: a
/// commit that landed at or below a snapshot a reader had seen would have changed it.
pub async fn snapshot_order(t: &Target) -> CheckResult {
    const COMMITTERS: u64 = 4;
    const COMMITS: u64 = 25;
    let (cat, _) = writer(t).await?;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut committers = Vec::new();
    for task in 0..COMMITTERS {
        let cat = cat.clone();
        committers.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(0x5A0 + task);
            let mut live: Vec<u64> = Vec::new();
            let (mut commits, mut retried) = (0u64, 0u64);
            for n in 0..COMMITS {
                let op = if live.is_empty() {
                    0
                } else {
                    rng.random_range(0..3)
                };
                let pick = if live.is_empty() {
                    0
                } else {
                    rng.random_range(0..live.len())
                };
                loop {
                    let mut tx = cat.begin().await.map_err(ctx("begin"))?;
                    // The snapshot is taken first and the commit comes a few awaits later, so
                    // committers interleave between the two.
                    tx.write_snapshot().await.map_err(ctx("snapshot"))?;
                    tokio::task::yield_now().await;
                    let id = task * 1000 + n + 1;
                    let name = Value::Text(format!("t{task}-{n}"));
                    let cells = vec![Value::Null, Value::Text("uuid".into()), Value::Int(1), name];
                    match op {
                        0 => {
                            tx.insert(&keystone::TABLE, KeyChoice::Named(id), cells)
                                .await
                                .map_err(ctx("insert"))?;
                        }
                        1 => {
                            tx.update(&keystone::TABLE, live[pick], cells)
                                .await
                                .map_err(ctx("update"))?;
                        }
                        _ => {
                            tx.delete(&keystone::TABLE, live[pick])
                                .await
                                .map_err(ctx("delete"))?;
                        }
                    }
                    match tx.commit().await {
                        Ok(_) => break,
                        Err(e) if e.is_retryable() => retried += 1,
                        Err(e) => return Err(format!("task {task} commit {n}: {e}")),
                    }
                }
                commits += 1;
                match op {
                    0 => live.push(task * 1000 + n + 1),
                    2 => {
                        live.swap_remove(pick);
                    }
                    _ => {}
                }
            }
            Ok::<_, String>((commits, retried))
        }));
    }
    let mut readers = Vec::new();
    for r in 0..2u64 {
        let (cat, done) = (cat.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(0x5B0 + r);
            let mut seen = Seen::new();
            let mut rereads = 0u64;
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                let reader = cat.reader(None).await.map_err(ctx("reader"))?;
                let rows = table_rows(&reader).await.map_err(ctx("read"))?;
                let latest = reader.snapshot();
                drop(reader);
                if let Some(first) = seen.get(&latest) {
                    ensure!(
                        &rows == first,
                        "snapshot {latest} changed after a reader saw it"
                    );
                }
                seen.entry(latest).or_insert(rows);
                let pick = rng.random_range(0..seen.len());
                let (s, first) = seen.iter().nth(pick).expect("one was just added");
                let again = cat.reader(Some(*s)).await.map_err(ctx("reader"))?;
                let rows = table_rows(&again).await.map_err(ctx("re-read"))?;
                ensure!(
                    &rows == first,
                    "snapshot {s} changed after a reader saw it: first {} rows, now {}",
                    first.len(),
                    rows.len()
                );
                rereads += 1;
                tokio::task::yield_now().await;
            }
            Ok::<_, String>((seen, rereads))
        }));
    }
    let (mut commits, mut retried) = (0, 0);
    let mut failed = None;
    for c in committers {
        match c.await.map_err(|e| format!("committer task: {e}"))? {
            Ok((n, r)) => {
                commits += n;
                retried += r;
            }
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    let (mut seen, mut rereads) = (Vec::new(), 0);
    for r in readers {
        let (s, n) = r.await.map_err(|e| format!("reader task: {e}"))??;
        seen.extend(s);
        rereads += n;
    }
    seen.sort_by_key(|(s, _)| *s);
    if let Some(e) = failed {
        return Err(e);
    }
    for (s, first) in &seen {
        let again = cat.reader(Some(*s)).await.map_err(ctx("reader"))?;
        let rows = table_rows(&again).await.map_err(ctx("re-read"))?;
        ensure!(
            &rows == first,
            "snapshot {s} changed after a reader saw it (checked after the run)"
        );
    }
    let last = cat.current_snapshot().await.map_err(ctx("snapshot"))?;
    ensure!(
        last >= commits,
        "{commits} commits landed but the latest snapshot is {last}"
    );
    cat.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(format!(
        "{commits} commits from {COMMITTERS} tasks ({retried} refused as out of order and run \
         again); {} snapshots read twice, {rereads} re-read mid-run, none changed",
        seen.len()
    )))
}

/// GC below retain-from never changes what readers at or above the floor see.
pub async fn gc_keeps_what_readers_see(t: &Target) -> CheckResult {
    let (cat, _) = writer(t).await?;
    // Versions of columns: each update ends the old version and begins a new one.
    let mut tx = cat.begin().await.map_err(ctx("begin"))?;
    for c in 1..=20u64 {
        tx.insert_child(
            &keystone::COLUMN,
            1,
            KeyChoice::Named(c),
            vec![Value::Int(c as i64), Value::Int(1)],
        )
        .await
        .map_err(ctx("insert"))?;
    }
    tx.commit().await.map_err(ctx("commit"))?;
    for _round in 0..5 {
        let mut tx = cat.begin().await.map_err(ctx("begin"))?;
        let s = tx.write_snapshot().await.map_err(ctx("snapshot"))?;
        for c in 1..=10u64 {
            tx.update(
                &keystone::COLUMN,
                c,
                vec![Value::Int(c as i64), Value::Int(1), Value::Int(s as i64)],
            )
            .await
            .map_err(ctx("update"))?;
        }
        tx.commit().await.map_err(ctx("commit"))?;
    }
    let last = cat.current_snapshot().await.map_err(ctx("snapshot"))?;
    let floor = last - 2;
    cat.set_retain_from(floor)
        .await
        .map_err(ctx("retain-from"))?;
    let snapshot_of = |cat: Catalog| async move {
        let mut all = Vec::new();
        for s in floor..=last {
            let r = cat.reader(Some(s)).await?;
            let mut rows = Vec::new();
            r.visible_rows(&[tags::COLUMN.0], |k, row| {
                rows.push((k.to_string(), row.cells))
            })
            .await?;
            all.push(rows);
        }
        Ok::<_, Error>(all)
    };
    let before = snapshot_of(cat.clone()).await.map_err(ctx("read"))?;
    let removed = cat.gc().await.map_err(ctx("gc"))?;
    let after = snapshot_of(cat.clone()).await.map_err(ctx("read"))?;
    ensure!(
        before == after,
        "GC changed what a reader at or above retain-from {floor} sees"
    );
    ensure!(
        removed > 0,
        "GC removed nothing although versions ended below the floor"
    );
    cat.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(format!(
        "GC removed {removed} versions; readers at {floor}..={last} unchanged"
    )))
}

/// Every example of the Keystone document.
pub async fn keystone_examples(t: &Target) -> CheckResult {
    let (cat, _) = writer(t).await?;
    ensure!(
        name_key(&cat, 500).await.map_err(ctx("name 500"))? == 500,
        "name 500"
    );
    let issued = issue_key(&cat).await.map_err(ctx("issue"))?;
    ensure!(
        issued == 501,
        "issued {issued} after naming 500, expected 501"
    );
    ensure!(
        name_key(&cat, 100).await.map_err(ctx("name 100"))? == 100,
        "name 100 below the mark"
    );
    let dup = name_key(&cat, 100)
        .await
        .err()
        .ok_or("duplicate 100 was accepted")?;
    ensure!(
        dup.kind() == ErrorKind::AlreadyExists && dup.to_string().contains("duplicate key 100"),
        "duplicate 100: {dup}"
    );
    let big = name_key(&cat, 281_474_976_710_656)
        .await
        .err()
        .ok_or("2^48 was accepted")?;
    ensure!(
        big.kind() == ErrorKind::OutOfRange && big.to_string().contains("[1, 281474976710655]"),
        "2^48: {big}"
    );
    ensure!(
        delete_key(&cat, 100).await.map_err(ctx("delete"))?,
        "delete 100 deleted nothing"
    );
    let again = name_key(&cat, 100)
        .await
        .err()
        .ok_or("a deleted key was named again before PURGE")?;
    ensure!(
        again.to_string().contains("PURGE frees its key"),
        "deleted key refusal lacks the PURGE hint: {again}"
    );
    cat.set_retain_from(cat.current_snapshot().await.map_err(ctx("snap"))?)
        .await
        .map_err(ctx("retain"))?;
    let r = cat
        .purge(&keystone::TABLE, 100..=100, &Admin::grant("conformance"))
        .await
        .map_err(ctx("purge"))?;
    ensure!(r.freed == vec![100], "purge freed {:?}", r.freed);
    ensure!(
        name_key(&cat, 100).await.map_err(ctx("name purged 100"))? == 100,
        "purged key not placed"
    );
    let d = cat
        .describe(&keystone::TABLE)
        .await
        .map_err(ctx("describe"))?;
    ensure!(
        d.next_id == 502 && d.ids_remaining == 281_474_976_710_154,
        "describe: {d}"
    );
    cat.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(d.to_string()))
}

/// Refusals carry the facts and change nothing.
pub async fn keystone_refusals(t: &Target) -> CheckResult {
    let (cat, _) = writer(t).await?;
    name_key(&cat, 7).await.map_err(ctx("name"))?;
    let before = dump(cat.backend().as_ref()).await.map_err(ctx("dump"))?;
    for (id, kind) in [
        (0u64, ErrorKind::OutOfRange),
        (MAX_ID + 1, ErrorKind::OutOfRange),
        (7, ErrorKind::AlreadyExists),
    ] {
        let e = name_key(&cat, id)
            .await
            .err()
            .ok_or(format!("key {id} accepted"))?;
        ensure!(e.kind() == kind, "key {id}: {} instead of {kind}", e.kind());
        ensure!(
            e.to_string().contains(&id.to_string()),
            "refusal of {id} does not name the key: {e}"
        );
    }
    let e = keystone::TABLE
        .parse_id("seven")
        .err()
        .ok_or("non-integer accepted")?;
    ensure!(e.kind() == ErrorKind::InvalidArgument, "non-integer: {e}");
    ensure!(
        dump(cat.backend().as_ref()).await.map_err(ctx("dump"))? == before,
        "a refused insert changed the store"
    );
    // Two writers naming the same key: exactly one commit lands.
    let mut a = cat.begin().await.map_err(ctx("begin"))?;
    let mut b = cat.begin().await.map_err(ctx("begin"))?;
    a.insert(&keystone::TABLE, KeyChoice::Named(42), table_cells("a"))
        .await
        .map_err(ctx("a"))?;
    b.insert(&keystone::TABLE, KeyChoice::Named(42), table_cells("b"))
        .await
        .map_err(ctx("b"))?;
    a.commit().await.map_err(ctx("commit a"))?;
    let e = b
        .commit()
        .await
        .err()
        .ok_or("both writers of key 42 committed")?;
    ensure!(
        e.kind() == ErrorKind::AlreadyExists && e.sqlstate() == "23505",
        "losing writer got {e}"
    );
    cat.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(
        "0 and 2^48 OutOfRange, duplicate AlreadyExists (23505), racing namers: one lands".into(),
    ))
}

/// Delete keeps the key; PURGE frees it only past the floor and writes an audit entry.
pub async fn keystone_delete_keeps_key(t: &Target) -> CheckResult {
    let (cat, _) = writer(t).await?;
    for id in 1..=5 {
        name_key(&cat, id).await.map_err(ctx("name"))?;
    }
    for id in 1..=3 {
        delete_key(&cat, id).await.map_err(ctx("delete"))?;
    }
    let e = name_key(&cat, 2).await.err().ok_or("deleted key reused")?;
    ensure!(
        matches!(e, Error::AlreadyExists { deleted: true, .. }),
        "deleted key: {e}"
    );
    let e = cat
        .purge(&keystone::TABLE, 1..=5, &Admin::grant("c"))
        .await
        .err()
        .ok_or("purge above the floor went through")?;
    ensure!(
        !e.is_retryable() && e.to_string().contains("retain-from"),
        "purge above the floor: {e}"
    );
    cat.set_retain_from(cat.current_snapshot().await.map_err(ctx("snap"))?)
        .await
        .map_err(ctx("retain"))?;
    let r = cat
        .purge(&keystone::TABLE, 1..=5, &Admin::grant("auditor"))
        .await
        .map_err(ctx("purge"))?;
    ensure!(
        r.freed == vec![1, 2, 3],
        "purge freed {:?}; live keys 4 and 5 must stay",
        r.freed
    );
    let audit = dump(cat.backend().as_ref())
        .await
        .map_err(ctx("dump"))?
        .into_iter()
        .filter(|(k, _)| k[0] == tags::AUDIT_ENTRY.0)
        .count();
    ensure!(audit == 1, "{audit} audit entries after one purge");
    let next = issue_key(&cat).await.map_err(ctx("issue"))?;
    ensure!(
        next == 6,
        "issued {next} after purging 1..=3; the engine must never issue a purged key"
    );
    ensure!(
        name_key(&cat, 2).await.map_err(ctx("rename"))? == 2,
        "purged key not placed again"
    );
    cat.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(
        "deleted keys refused with PURGE hint; purge freed only deleted keys, wrote 1 audit entry"
            .into(),
    ))
}

/// PURGE waits for older readers, then refuses with a retryable conflict.
pub async fn keystone_purge_waits_for_readers(t: &Target) -> CheckResult {
    let s = t.fresh().await.map_err(ctx("fresh"))?;
    let opts = CatalogOptions {
        purge_wait: Duration::from_millis(300),
        ..Default::default()
    };
    let cat = Catalog::open_with(s.backend, opts)
        .await
        .map_err(ctx("open"))?;
    name_key(&cat, 5).await.map_err(ctx("name"))?;
    let old = cat.reader(None).await.map_err(ctx("reader"))?;
    delete_key(&cat, 5).await.map_err(ctx("delete"))?;
    cat.set_retain_from(cat.current_snapshot().await.map_err(ctx("snap"))?)
        .await
        .map_err(ctx("retain"))?;
    let started = std::time::Instant::now();
    let e = cat
        .purge(&keystone::TABLE, 5..=5, &Admin::grant("c"))
        .await
        .err()
        .ok_or("purge ignored an older reader")?;
    ensure!(
        e.is_retryable(),
        "purge blocked by a reader must be retryable: {e}"
    );
    ensure!(
        started.elapsed() >= Duration::from_millis(300),
        "purge gave up before its wait"
    );
    ensure!(
        old.by_id(&keystone::TABLE, 5)
            .await
            .map_err(ctx("read"))?
            .is_some(),
        "the older reader lost its row"
    );
    let c2 = cat.clone();
    let purge =
        tokio::spawn(async move { c2.purge(&keystone::TABLE, 5..=5, &Admin::grant("c")).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(old);
    let r = purge
        .await
        .map_err(|e| e.to_string())?
        .map_err(ctx("purge after release"))?;
    ensure!(
        r.freed == vec![5],
        "purge after the reader left freed {:?}",
        r.freed
    );
    cat.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(
        "refused retryably after 300 ms with a reader held; went through once released".into(),
    ))
}

fn racing_namer(times: usize) -> (DrawHook, Arc<std::sync::Mutex<Option<Catalog>>>) {
    let slot: Arc<std::sync::Mutex<Option<Catalog>>> = Arc::new(std::sync::Mutex::new(None));
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let hook: DrawHook = {
        let slot = slot.clone();
        Arc::new(move |space, id| -> BoxFuture<'static, ()> {
            let cat = slot.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let race = space.name == "table"
                && count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < times;
            Box::pin(async move {
                if let (true, Some(cat)) = (race, cat) {
                    if let Ok(mut t) = cat.begin().await {
                        if t.insert(space, KeyChoice::Named(id), table_cells("racer"))
                            .await
                            .is_ok()
                        {
                            let _ = t.commit().await;
                        }
                    }
                }
            })
        })
    };
    (hook, slot)
}

/// An issued key that another session names at the same moment is drawn again, 8 times at most.
pub async fn keystone_eight_draws(t: &Target) -> CheckResult {
    let s = t.fresh().await.map_err(ctx("fresh"))?;
    let (hook, slot) = racing_namer(8 + 3);
    let cat = Catalog::open_with(
        s.backend,
        CatalogOptions {
            draw_hook: Some(hook),
            ..Default::default()
        },
    )
    .await
    .map_err(ctx("open"))?;
    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(cat.clone());
    let e = issue_key(&cat)
        .await
        .err()
        .ok_or("an issued insert survived 8 named draws")?;
    ensure!(
        e.kind() == ErrorKind::AlreadyExists && e.to_string().contains("last 8 keys drawn"),
        "after 8 draws: {e}"
    );
    let id = issue_key(&cat)
        .await
        .map_err(ctx("issue after the racer tires"))?;
    ensure!(
        id == 12,
        "after 3 more named draws the 4th should be placed: got {id}"
    );
    cat.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(
        "8 raced draws refused AlreadyExists; 3 raced draws then placed id 12".into(),
    ))
}

/// Issued ids strictly ascend per task and are unique across many concurrent tasks.
pub async fn keystone_concurrent_issue(t: &Target) -> CheckResult {
    let s = t.fresh().await.map_err(ctx("fresh"))?;
    let cat = Catalog::open_with(
        s.backend,
        CatalogOptions {
            id_reservation: 50,
            ..Default::default()
        },
    )
    .await
    .map_err(ctx("open"))?;
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let cat = cat.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::with_capacity(300);
            for _ in 0..300 {
                ids.push(cat.issue_id(&keystone::FILE).await?);
            }
            Ok::<_, Error>(ids)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let ids = task
            .await
            .map_err(|e| e.to_string())?
            .map_err(ctx("issue"))?;
        ensure!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "a task saw ids that do not ascend"
        );
        all.extend(ids);
    }
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    ensure!(all.len() == n, "{} ids issued twice", n - all.len());
    cat.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(format!(
        "{n} ids from 16 tasks: unique, ascending per task"
    )))
}

/// Issued ids are never issued again after a reopen (crash or clean).
pub async fn keystone_never_reissued(t: &Target) -> CheckResult {
    if t.ephemeral {
        return Ok(Outcome::NotApplicable(
            "the store does not survive a reopen".into(),
        ));
    }
    let (cat, url) = writer(t).await?;
    let mut last = 0;
    for _ in 0..20 {
        last = cat
            .issue_id(&keystone::SNAPSHOT)
            .await
            .map_err(ctx("issue"))?;
    }
    // An unclean stop: flush the engine (so the reservation is durable) but never close the catalog.
    cat.backend().close().await.map_err(ctx("engine close"))?;
    drop(cat);
    let cat = Catalog::open(t.open(&url).await.map_err(ctx("reopen"))?)
        .await
        .map_err(ctx("open"))?;
    let next = cat
        .issue_id(&keystone::SNAPSHOT)
        .await
        .map_err(ctx("issue"))?;
    ensure!(
        next > last,
        "after an unclean stop issued {next}, not above {last}"
    );
    cat.close().await.map_err(ctx("close"))?;
    drop(cat);
    let cat = Catalog::open(t.open(&url).await.map_err(ctx("reopen"))?)
        .await
        .map_err(ctx("open"))?;
    let after = cat
        .issue_id(&keystone::SNAPSHOT)
        .await
        .map_err(ctx("issue"))?;
    ensure!(
        after == next + 1,
        "after a clean close issued {after}, expected {}",
        next + 1
    );
    cat.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(format!(
        "unclean stop: {last} then {next} (gap); clean close: {next} then {after}"
    )))
}

/// One key inserted, rolled back and named again thousands of times is still placed.
pub async fn keystone_rollback_cycles(t: &Target) -> CheckResult {
    let (cat, _) = writer(t).await?;
    for i in 0..2000 {
        let mut tx = cat.begin().await.map_err(ctx("begin"))?;
        let cells = vec![
            Value::Null,
            Value::Text(format!("cover {i}")),
            Value::Int(1),
            Value::Text("same".into()),
        ];
        tx.insert(&keystone::TABLE, KeyChoice::Named(77), cells)
            .await
            .map_err(|e| format!("cycle {i}: {e}"))?;
        tx.rollback();
    }
    ensure!(
        name_key(&cat, 77).await.map_err(ctx("final insert"))? == 77,
        "key 77 not placed after 2000 cycles"
    );
    cat.close().await.map_err(ctx("close"))?;
    Ok(Outcome::Pass(
        "2000 insert/rollback cycles, then placed".into(),
    ))
}

/// Two writers on one catalog: exactly one commits afterwards; the fenced one's commits are
/// refused and nothing of them is visible after reopen.
pub async fn fencing(t: &Target) -> CheckResult {
    let s = t.fresh().await.map_err(ctx("fresh"))?;
    let caps = s.backend.capabilities();
    let old = Catalog::open(s.backend.clone())
        .await
        .map_err(ctx("open"))?;
    name_key(&old, 1).await.map_err(ctx("insert"))?;
    let mut pending = old.begin().await.map_err(ctx("begin"))?;
    pending
        .insert(&keystone::TABLE, KeyChoice::Named(2), table_cells("lost"))
        .await
        .map_err(ctx("insert"))?;

    let mut detail = String::new();
    let second_backend = if caps.exclusive_open && !t.ephemeral {
        match t.open(&s.url).await {
            Err(Error::Locked { .. }) => {
                detail.push_str("second process-level open refused Locked; ")
            }
            Ok(_) => return Err("a second open of an exclusive store succeeded".into()),
            Err(e) => return Err(format!("a second open failed with {e}, not Locked")),
        }
        s.backend.clone()
    } else if caps.fences_on_open && !t.ephemeral {
        detail.push_str("second engine instance fenced the first; ");
        t.open(&s.url).await.map_err(ctx("second open"))?
    } else {
        s.backend.clone()
    };
    let new = Catalog::open(second_backend.clone())
        .await
        .map_err(ctx("second writer"))?;
    let e = pending
        .commit()
        .await
        .err()
        .ok_or("the fenced writer's commit landed")?;
    ensure!(e.kind() == ErrorKind::Fenced, "fenced writer's commit: {e}");
    let e = name_key(&old, 3)
        .await
        .err()
        .ok_or("the fenced writer committed again")?;
    ensure!(
        e.kind() == ErrorKind::Fenced,
        "fenced writer's second commit: {e}"
    );
    ensure!(
        name_key(&new, 4).await.map_err(ctx("new writer"))? == 4,
        "the new writer cannot commit"
    );
    if t.ephemeral || !caps.persistent {
        let bound = bound_ids(
            &dump(second_backend.as_ref()).await.map_err(ctx("dump"))?,
            keystone::TABLE.code(),
        );
        ensure!(
            bound == BTreeSet::from([1, 4]),
            "bound keys are {bound:?}, expected [1, 4]"
        );
        detail.push_str("only the live writer's rows exist");
    }
    new.close().await.map_err(ctx("close"))?;
    let _ = old.close().await;
    if !t.ephemeral && caps.persistent {
        let b = t.open(&s.url).await.map_err(ctx("reopen"))?;
        let rows = dump(b.as_ref()).await.map_err(ctx("dump"))?;
        let bound = bound_ids(&rows, keystone::TABLE.code());
        ensure!(
            bound == BTreeSet::from([1, 4]),
            "after reopen bound keys are {bound:?}, expected [1, 4]"
        );
        b.close().await.map_err(ctx("close"))?;
        detail.push_str("after reopen only the live writer's rows exist");
    }
    Ok(Outcome::Pass(detail))
}

/// Seeded sequences of operations applied to the engine and to a model, compared at each step.
pub async fn model_based(t: &Target) -> CheckResult {
    let persistent = !t.ephemeral && capabilities(t).await.map_err(ctx("probe"))?.persistent;
    let seeds: Vec<u64> = REGRESSION_SEEDS.iter().copied().chain(0..12).collect();
    let mut steps = 0;
    for seed in &seeds {
        steps += model_run(t, *seed, persistent)
            .await
            .map_err(|e| format!("seed {seed}: {e} (add it to REGRESSION_SEEDS)"))?;
    }
    Ok(Outcome::Pass(format!(
        "{} seeds, {steps} steps, reopens {}",
        seeds.len(),
        if persistent {
            "included"
        } else {
            "not possible"
        }
    )))
}

/// Seeds that once failed; they run first, every time.
pub const REGRESSION_SEEDS: &[u64] = &[];

async fn model_run(t: &Target, seed: u64, persistent: bool) -> Result<usize, String> {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

    #[derive(Clone, Debug)]
    enum Op {
        Put(u16, u8),
        Delete(u16),
        Batch(Vec<(u16, Option<u8>)>, bool),
        Scan(u16, u16, bool, u8),
        Reopen,
        Name(u16),
        Issue,
        Remove(u16),
    }
    let op = proptest::prop_oneof![
        4 => (0u16..300, proptest::num::u8::ANY).prop_map(|(k, v)| Op::Put(k, v)),
        2 => (0u16..300).prop_map(Op::Delete),
        2 => (proptest::collection::vec((0u16..300, proptest::option::of(proptest::num::u8::ANY)), 1..20), proptest::bool::ANY).prop_map(|(v, ok)| Op::Batch(v, ok)),
        3 => (0u16..300, 0u16..300, proptest::bool::ANY, 1u8..40).prop_map(|(a, b, r, l)| Op::Scan(a, b, r, l)),
        1 => proptest::strategy::Just(Op::Reopen),
        2 => (1u16..200).prop_map(Op::Name),
        2 => proptest::strategy::Just(Op::Issue),
        1 => (1u16..200).prop_map(Op::Remove),
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
    let mut cat = Catalog::open(s.backend).await.map_err(ctx("open"))?;
    for (i, op) in ops.iter().enumerate() {
        let b = cat.backend().clone();
        match op {
            Op::Put(k, v) => {
                let mut w = WriteBatch::new();
                w.put(key(*k), vec![*v]);
                b.write(w, Durability::Durable).await.map_err(ctx("put"))?;
                model.insert(key(*k), vec![*v]);
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
            Op::Scan(a, z, rev, limit) => {
                let (lo, hi) = if a <= z { (*a, *z) } else { (*z, *a) };
                let range = KeyRange::new(key(lo), key(hi));
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
                cat.close().await.map_err(ctx("close"))?;
                cat = Catalog::open(t.open(&url).await.map_err(ctx("reopen"))?)
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
