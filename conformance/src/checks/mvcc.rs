//! Versions and snapshots: visibility at every snapshot, snapshots that publish in order, GC.

use super::*;

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
    let snapshot_of = |cat: Keyspace| async move {
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

/// A commit is seen only once a flush has made it durable, as PostgreSQL's readers see a
/// commit only once its WAL record is flushed. While a commit's flush is held back, a reader
/// and a transaction opened meanwhile see every commit acknowledged before them and not that
/// one (though the store already holds its batch); once the flush completes, it is seen. A
/// commit whose flush failed is not seen while later flushes fail too (a reader is refused
/// with the flush's error instead), and is seen once a flush succeeds, which makes it durable.
pub async fn commits_seen_once_durable(t: &Target) -> CheckResult {
    let s = t.fresh().await.map_err(ctx("fresh store"))?;
    let faulty = FaultyBackend::new(s.backend.clone());
    let backend: Arc<dyn KvBackend> = Arc::new(FaultyHandle(faulty.clone()));
    let cat = Keyspace::open(backend).await.map_err(ctx("open"))?;
    ensure!(
        cat.options().durability == Durability::Durable,
        "the key space did not open durable"
    );
    // What a reader opened now sees of keys 1..=4, and whether the store itself holds each.
    let seen = |cat: Keyspace| async move {
        let r = cat.reader(None).await?;
        let mut ids = BTreeSet::new();
        for id in 1..=4u64 {
            if r.by_id(&keystone::TABLE, id).await?.is_some() {
                ids.insert(id);
            }
        }
        Ok::<_, Error>(ids)
    };
    let stored = |id: u64| {
        let backend = s.backend.clone();
        async move {
            backend
                .get(&keystone::TABLE.binding_key(id))
                .await
                .map(|v| v.is_some())
        }
    };
    name_key(&cat, 1).await.map_err(ctx("commit key 1"))?;

    // Key 2's flush is held back: applied, not durable.
    let gate = faulty.hold_flushes().await;
    let committer = tokio::spawn({
        let cat = cat.clone();
        async move { name_key(&cat, 2).await }
    });
    let mut waited = 0;
    while faulty.flushes_held() == 0 {
        ensure!(
            waited < 3000 && !committer.is_finished(),
            "key 2's commit never reached its flush (finished: {})",
            committer.is_finished()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += 1;
    }
    ensure!(
        stored(2).await.map_err(ctx("raw get"))?,
        "key 2's batch is not in the store while its flush is held"
    );
    let during = seen(cat.clone()).await.map_err(ctx("reader while held"))?;
    ensure!(
        during == BTreeSet::from([1]),
        "a reader opened while key 2's flush was held saw {during:?}: key 2 is not durable yet"
    );
    let tx = cat.begin().await.map_err(ctx("begin while held"))?;
    let in_tx = tx
        .view()
        .get(&keystone::TABLE.binding_key(2))
        .await
        .map_err(ctx("get in transaction"))?;
    ensure!(
        in_tx.is_none(),
        "a transaction begun while key 2's flush was held sees key 2"
    );
    tx.rollback();
    drop(gate);
    committer
        .await
        .map_err(|e| format!("key 2's committer: {e}"))?
        .map_err(ctx("commit key 2"))?;
    let after = seen(cat.clone()).await.map_err(ctx("reader after flush"))?;
    ensure!(
        after == BTreeSet::from([1, 2]),
        "after key 2's flush a reader saw {after:?}"
    );

    // Key 3's flush fails, and so does the next one (the reader's own).
    faulty.fail_next_flushes(2);
    let failed = name_key(&cat, 3).await;
    ensure!(
        failed.is_err(),
        "key 3's commit reported success though its flush failed"
    );
    ensure!(
        stored(3).await.map_err(ctx("raw get"))?,
        "key 3's batch is not in the store after its failed flush (the case is not exercised)"
    );
    match seen(cat.clone()).await {
        Err(_) => {}
        Ok(ids) => ensure!(
            !ids.contains(&3),
            "a reader saw key 3, whose flush failed and which no flush has made durable: {ids:?}"
        ),
    }
    faulty.fail_next_flushes(0);
    let later = seen(cat.clone())
        .await
        .map_err(ctx("reader once flushes succeed"))?;
    ensure!(
        later == BTreeSet::from([1, 2, 3]),
        "once a flush succeeded a reader saw {later:?}"
    );
    name_key(&cat, 4).await.map_err(ctx("commit key 4"))?;
    cat.close().await.map_err(ctx("close"))?;
    let mut survived = String::new();
    if !t.ephemeral {
        let b = t.open(&s.url).await.map_err(ctx("reopen"))?;
        let rows = dump(b.as_ref()).await.map_err(ctx("dump"))?;
        let bound = bound_ids(&rows, keystone::TABLE.code());
        let want: BTreeSet<u64> = (1..=4).collect();
        ensure!(
            bound.is_superset(&want),
            "after reopening, keys {want:?} should all be bound; found {bound:?}"
        );
        b.close().await.map_err(ctx("close again"))?;
        survived = "; all four after reopening".into();
    }
    Ok(Outcome::Pass(format!(
        "a held flush's commit unseen by a reader and a transaction, seen after; a failed \
         flush's commit unseen until a flush succeeded{survived}"
    )))
}
