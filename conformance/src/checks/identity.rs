//! Keystone identity: the document's examples, refusals, delete and PURGE, draws, issuing.

use super::*;

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
    let opts = KeyspaceOptions {
        purge_wait: Duration::from_millis(300),
        ..Default::default()
    };
    let cat = Keyspace::open_with(s.backend, opts)
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

fn racing_namer(times: usize) -> (DrawHook, Arc<std::sync::Mutex<Option<Keyspace>>>) {
    let slot: Arc<std::sync::Mutex<Option<Keyspace>>> = Arc::new(std::sync::Mutex::new(None));
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
    let cat = Keyspace::open_with(
        s.backend,
        KeyspaceOptions {
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
    let cat = Keyspace::open_with(
        s.backend,
        KeyspaceOptions {
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
    let cat = Keyspace::open(t.open(&url).await.map_err(ctx("reopen"))?)
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
    let cat = Keyspace::open(t.open(&url).await.map_err(ctx("reopen"))?)
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
