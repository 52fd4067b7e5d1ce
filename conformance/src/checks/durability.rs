//! What survives: close and reopen, SIGKILL of the writer, a second writer (fencing).

use super::*;

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
    let cat = Keyspace::open_read_only(b.clone())
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
        if std::env::var_os("CI").is_some() {
            return Err(
                "0 crash rounds asked for (ROCKLAKE_CRASH_ROUNDS=0): CI must run them".into(),
            );
        }
        return Ok(Outcome::NotApplicable("0 crash rounds asked for".into()));
    }
    let s = crash::run_rounds(t, t.crash_rounds).await?;
    Ok(Outcome::Pass(format!(
        "{} SIGKILL rounds ({} killed before their first acknowledgement: opening, recovering or \
         in their first commit), {} acknowledged \
         inserts and {} deletes all present, {} ids seen, none issued twice, no half batch, no \
         orphan row, marks never went back; seed {} (ROCKLAKE_CRASH_SEED)",
        s.rounds, s.during_open, s.acknowledged, s.deleted, s.rows, s.seed
    )))
}

/// Two writers on one catalog: exactly one commits afterwards; the fenced one's commits are
/// refused and nothing of them is visible after reopen.
pub async fn fencing(t: &Target) -> CheckResult {
    let s = t.fresh().await.map_err(ctx("fresh"))?;
    let caps = s.backend.capabilities();
    let old = Keyspace::open(s.backend.clone())
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
    let new = Keyspace::open(second_backend.clone())
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
