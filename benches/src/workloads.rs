//! The workloads: codec, point reads, scans, batches, Keystone, MVCC, catalog transactions
//! (against SQLite) and group commit.

use super::*;
use crate::harness::m;

pub(crate) fn file_cells(table_id: u64, i: u64) -> Vec<Value> {
    vec![
        Value::Null,
        Value::Int(table_id as i64),
        Value::Int(i as i64),
        Value::Text(format!("data/ducklake-{table_id}-{i:08}.parquet")),
        Value::Bool(true),
        Value::Text("parquet".into()),
        Value::Int(1000),
        Value::Int(65_536),
        Value::Int(1024),
        Value::Int((i * 1000) as i64),
    ]
}

/// Key codec workloads (no engine).
pub fn codec(budget: Budget) -> Vec<Measurement> {
    let mut out = Vec::new();
    let n = 1000u64;
    let shapes: Vec<(&str, Vec<u8>)> = vec![
        (
            "snapshot (9 B)",
            keys::SnapshotKey { snapshot_id: 42 }.to_bytes(),
        ),
        (
            "table (17 B)",
            TableKey {
                table_id: 42,
                begin_snapshot: 200,
            }
            .to_bytes(),
        ),
        (
            "column (25 B)",
            ColumnKey {
                table_id: 5,
                column_id: 3,
                begin_snapshot: 100,
            }
            .to_bytes(),
        ),
        (
            "counter (variable)",
            keys::counter_key("next-snapshot-id").unwrap_or_default(),
        ),
    ];
    for (name, bytes) in shapes {
        let mut enc = Vec::new();
        let mut dec = Vec::new();
        let deadline = Instant::now() + budget.time;
        while enc.len() < budget.samples.min(500) && Instant::now() < deadline {
            let t = Instant::now();
            for i in 0..n {
                std::hint::black_box(
                    DataFileKey {
                        table_id: i,
                        file_id: i,
                        begin_snapshot: i,
                    }
                    .encode(),
                );
            }
            enc.push(t.elapsed() / n as u32);
            let t = Instant::now();
            for _ in 0..n {
                std::hint::black_box(Key::decode(std::hint::black_box(&bytes)).ok());
            }
            dec.push(t.elapsed() / n as u32);
        }
        out.push(m(
            "codec",
            format!("decode {name}"),
            "none",
            "n/a",
            &Stats::from(dec),
        ));
        if name.starts_with("snapshot") {
            out.push(m(
                "codec",
                "encode data_file (25 B, fixed array)",
                "none",
                "n/a",
                &Stats::from(enc),
            ));
        }
    }
    out
}

async fn fill(backend: &dyn KvBackend, prefix: u8, rows: usize) -> Result<Vec<Vec<u8>>> {
    let mut keys_written = Vec::with_capacity(rows);
    for chunk in (0..rows).collect::<Vec<_>>().chunks(1000) {
        let mut b = WriteBatch::new();
        for i in chunk {
            let k = keys::row_key(rocklake_core::Tag(prefix), &[7, *i as u64]);
            b.put(k.clone(), vec![0xAB; 100]);
            keys_written.push(k);
        }
        backend.write(b, Durability::Buffered).await?;
    }
    backend.flush().await?;
    Ok(keys_written)
}

/// Point get, prefix scans, reverse scan, batches: through the core and raw.
pub async fn kv(
    subject: &str,
    backend: &Arc<dyn KvBackend>,
    raw: Option<&Arc<dyn RawEngine>>,
    budget: Budget,
) -> Result<Vec<Measurement>> {
    let mut out = Vec::new();
    let tag = rocklake_core::tags::TABLE_COLUMN_STATS.0;
    let keys_1k = fill(backend.as_ref(), tag, 1000).await?;
    let (s, rs) = sample_pair(
        budget,
        |i| {
            let k = keys_1k[(i * 7919) % keys_1k.len()].clone();
            let b = backend.clone();
            async move {
                std::hint::black_box(b.get(&k).await?);
                Ok(())
            }
        },
        raw.map(|r| {
            |i: usize| {
                let k = keys_1k[(i * 7919) % keys_1k.len()].clone();
                let r = r.clone();
                async move { r.get(&k).await.map(|_| ()) }
            }
        }),
    )
    .await?;
    let mut row = m("point", "get (1k rows, 100 B values)", subject, "n/a", &s);
    row.raw_median_ns = rs.map(|rs| rs.median());
    out.push(row);

    let mut sizes = vec![1000usize];
    if budget.large {
        sizes.push(100_000);
    }
    for rows in sizes {
        let ptag = if rows == 1000 {
            tag
        } else {
            rocklake_core::tags::SORT_EXPRESSION.0
        };
        if rows != 1000 {
            fill(backend.as_ref(), ptag, rows).await?;
        }
        let small = Budget {
            samples: budget.samples.min(if rows > 1000 { 20 } else { 100 }),
            ..budget
        };
        let (s, rs) = sample_pair(
            small,
            |_| {
                let b = backend.clone();
                async move {
                    let view = b.view().await?;
                    let mut p = Pager::new(
                        view.as_ref(),
                        KeyRange::prefix(&[ptag]),
                        Order::Ascending,
                        1024,
                    );
                    let mut n = 0;
                    while let Some(page) = p.next_page().await? {
                        n += page.len();
                    }
                    assert_eq!(n, rows);
                    Ok(())
                }
            },
            raw_prefix_scan(raw, ptag, rows),
        )
        .await?;
        let mut row = m(
            "scan",
            format!(
                "prefix scan {} rows",
                if rows == 1000 { "1k" } else { "100k" }
            ),
            subject,
            "n/a",
            &s,
        );
        row.raw_median_ns = rs.map(|rs| rs.median());
        out.push(row);

        // The same rows lent by `visit` (no copies where the engine lends its bytes), paged
        // the way the catalog's readers page.
        let (s, rs) = sample_pair(
            small,
            |_| {
                let b = backend.clone();
                async move {
                    let view = b.view().await?;
                    let n = visit_all(
                        view.as_ref(),
                        KeyRange::prefix(&[ptag]),
                        1024,
                        &mut |k, v| {
                            std::hint::black_box((k, v));
                            true
                        },
                    )
                    .await?;
                    assert_eq!(n, rows as u64);
                    Ok(())
                }
            },
            raw_prefix_scan(raw, ptag, rows),
        )
        .await?;
        let mut row = m(
            "scan",
            format!(
                "prefix visit {} rows (lent, not copied)",
                if rows == 1000 { "1k" } else { "100k" }
            ),
            subject,
            "n/a",
            &s,
        );
        row.raw_median_ns = rs.map(|rs| rs.median());
        out.push(row);
    }
    let (s, rs) = sample_pair(
        budget,
        |_| {
            let b = backend.clone();
            async move {
                let r = b
                    .scan(&KeyRange::prefix(&[tag]), Order::Descending, 10)
                    .await?;
                assert_eq!(r.len(), 10);
                Ok(())
            }
        },
        raw.map(|r| {
            move |_: usize| {
                let r = r.clone();
                async move { r.scan_prefix(&[tag], 10, true).await.map(|_| ()) }
            }
        }),
    )
    .await?;
    let mut row = m("scan", "reverse scan, limit 10", subject, "n/a", &s);
    row.raw_median_ns = rs.map(|rs| rs.median());
    out.push(row);

    for durability in [Durability::Buffered, Durability::Durable] {
        for n in [1usize, 10, 100, 1000] {
            let b2 = Budget {
                samples: budget.samples.min(if n >= 1000 { 30 } else { 200 }),
                ..budget
            };
            let btag = rocklake_core::tags::NAME_MAPPING.0;
            let (s, rs) = sample_pair(
                b2,
                |i| {
                    let b = backend.clone();
                    async move {
                        let mut w = WriteBatch::new();
                        for j in 0..n {
                            w.put(
                                keys::row_key(rocklake_core::Tag(btag), &[i as u64, j as u64]),
                                vec![0xCD; 100],
                            );
                        }
                        b.write(w, durability).await
                    }
                },
                raw.map(|r| {
                    move |i: usize| {
                        let r = r.clone();
                        async move {
                            let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
                                .map(|j| {
                                    (
                                        keys::row_key(
                                            rocklake_core::Tag(btag),
                                            &[1 << 40 | i as u64, j as u64],
                                        ),
                                        vec![0xCD; 100],
                                    )
                                })
                                .collect();
                            r.write(pairs, durability == Durability::Durable).await
                        }
                    }
                }),
            )
            .await?;
            let mut row = m(
                "batch",
                format!("atomic batch of {n}"),
                subject,
                &durability.to_string(),
                &s,
            );
            row.raw_median_ns = rs.map(|rs| rs.median());
            out.push(row);
        }
    }
    Ok(out)
}

/// The raw engine's full scan of one prefix, checked to see `rows` pairs: what both the `scan`
/// and the `visit` rows are compared with.
fn raw_prefix_scan(
    raw: Option<&Arc<dyn RawEngine>>,
    prefix: u8,
    rows: usize,
) -> Option<impl FnMut(usize) -> futures::future::BoxFuture<'static, Result<()>>> {
    raw.cloned().map(|r| {
        move |_: usize| {
            let r = r.clone();
            Box::pin(async move {
                let n = r.scan_prefix(&[prefix], usize::MAX, false).await?;
                assert_eq!(n, rows);
                Ok(())
            }) as futures::future::BoxFuture<'static, Result<()>>
        }
    })
}

/// Keystone: issued ids on 1 and 2 threads, named inserts, describe of every space.
pub async fn keystone_workloads(
    subject: &str,
    backend: Arc<dyn KvBackend>,
    budget: Budget,
) -> Result<Vec<Measurement>> {
    let mut out = Vec::new();
    let cat = Keyspace::open_with(
        backend,
        KeyspaceOptions {
            id_reservation: 1 << 16,
            durability: Durability::Buffered,
            ..Default::default()
        },
    )
    .await?;
    for threads in [1usize, 2] {
        let per = 200_000usize;
        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..threads {
            let cat = cat.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..per {
                    std::hint::black_box(cat.issue_id(&keystone::FILE).await?);
                }
                Ok::<_, rocklake_core::Error>(())
            }));
        }
        for t in tasks {
            t.await
                .map_err(|e| rocklake_core::Error::InvalidArgument(e.to_string()))??;
        }
        let el = start.elapsed();
        let total = (per * threads) as f64;
        let s = Stats {
            ns: vec![el.as_nanos() as f64 / total],
        };
        let mut row = m(
            "keystone",
            format!("issue id, {threads} thread(s)"),
            subject,
            "reserved ranges (durable)",
            &s,
        );
        row.ops_per_sec = Some(total / el.as_secs_f64());
        out.push(row);
    }
    let next = std::sync::atomic::AtomicU64::new(1_000_000);
    let s = sample(
        Budget {
            samples: budget.samples.min(300),
            ..budget
        },
        |_| {
            let cat = cat.clone();
            let id = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            async move {
                let mut t = cat.begin().await?;
                t.insert(
                    &keystone::TABLE,
                    KeyChoice::Named(id),
                    vec![
                        Value::Null,
                        Value::Text("u".into()),
                        Value::Int(1),
                        Value::Text("t".into()),
                    ],
                )
                .await?;
                t.commit().await?;
                Ok(())
            }
        },
    )
    .await?;
    out.push(m(
        "keystone",
        "named insert + commit",
        subject,
        "buffered",
        &s,
    ));
    let s = sample(budget, |_| {
        let cat = cat.clone();
        async move {
            std::hint::black_box(cat.budget().await?);
            Ok(())
        }
    })
    .await?;
    out.push(m(
        "keystone",
        format!("describe all {} id spaces", keystone::SPACES.len()),
        subject,
        "n/a",
        &s,
    ));

    // MVCC: one entity with 1, 10, 100 versions (an insert, then updates).
    for versions in [1u64, 10, 100] {
        let table_id = 10_000 + versions;
        for v in 0..versions {
            let mut t = cat.begin().await?;
            let cells = vec![Value::Int(table_id as i64)];
            if v == 0 {
                t.insert(&keystone::TABLE, KeyChoice::Named(table_id), cells)
                    .await?;
            } else {
                t.update(&keystone::TABLE, table_id, cells).await?;
            }
            t.commit().await?;
        }
        let s = sample(budget, |_| {
            let cat = cat.clone();
            async move {
                let r = cat.reader(None).await?;
                let found = r
                    .entity(&keys::prefix(rocklake_core::tags::TABLE, &[table_id]))
                    .await?;
                assert!(found.is_some());
                Ok(())
            }
        })
        .await?;
        out.push(m(
            "mvcc",
            format!("latest visible of {versions} version(s)"),
            subject,
            "n/a",
            &s,
        ));
    }
    cat.close().await?;
    Ok(out)
}

/// Commit one snapshot adding `files` data files to table 1: snapshot row, file rows with
/// issued ids and their bindings, counters — one transaction.
///
/// A commit refused because another committer's later snapshot became visible first (see
/// `Transaction`'s "Snapshot order") is run again, as a client would; the time of a commit
/// includes its retries.
pub async fn commit_snapshot(cat: &Keyspace, files: usize) -> Result<u64> {
    loop {
        let mut t = cat.begin().await?;
        let snap = t.write_snapshot().await?;
        for i in 0..files {
            t.insert_child(
                &keystone::FILE,
                1,
                KeyChoice::Issued,
                file_cells(1, i as u64),
            )
            .await?;
        }
        match t.commit().await {
            Ok(_) => return Ok(snap),
            Err(e) if e.is_retryable() => continue,
            Err(e) => return Err(e),
        }
    }
}

/// List the data files of `table_id` visible at the latest snapshot, reading each one's path
/// (as the SQLite side reads its `path` column).
pub async fn list_files(cat: &Keyspace, table_id: u64) -> Result<usize> {
    let path = rocklake_core::tags::DATA_FILE
        .info()
        .and_then(|t| t.column_index("path"))
        .expect("data_file has a path column");
    let r = cat.reader(None).await?;
    let mut n = 0;
    let mut failed = None;
    r.scan_visible(
        &keys::prefix(rocklake_core::tags::DATA_FILE, &[table_id]),
        |row| match row.cell(path) {
            Ok(Value::Text(p)) => {
                std::hint::black_box(p);
                n += 1;
            }
            Ok(other) => {
                failed = Some(rocklake_core::Error::InvalidArgument(format!(
                    "a data file's path is {other}"
                )))
            }
            Err(e) => failed = Some(e),
        },
    )
    .await?;
    match failed {
        Some(e) => Err(e),
        None => Ok(n),
    }
}

/// Catalog-shaped transactions, RockLake and SQLite.
pub async fn catalog_workloads(
    subject: &str,
    backend: Arc<dyn KvBackend>,
    dir: &std::path::Path,
    budget: Budget,
) -> Result<Vec<Measurement>> {
    let mut out = Vec::new();
    for durability in [Durability::Buffered, Durability::Durable] {
        let cat = Keyspace::open_with(
            backend.clone(),
            KeyspaceOptions {
                durability,
                ..Default::default()
            },
        )
        .await?;
        let sql = sqlite::Sqlite::open(
            &dir.join(format!("sqlite-{subject}-{durability}.db")),
            durability == Durability::Durable,
        )?;
        for files in [1usize, 10, 100, 1000] {
            let b2 = Budget {
                samples: budget.samples.min(if files >= 1000 {
                    20
                } else if files >= 100 {
                    60
                } else {
                    300
                }),
                ..budget
            };
            let s = sample(b2, |_| {
                let cat = cat.clone();
                async move { commit_snapshot(&cat, files).await.map(|_| ()) }
            })
            .await?;
            let q = sql.sample_commit(files, b2)?;
            let mut row = m(
                "catalog",
                format!("commit snapshot adding {files} file(s)"),
                subject,
                &durability.to_string(),
                &s,
            );
            row.sqlite_median_ns = Some(q.median());
            out.push(row);
        }
        // Dropped, not closed: the backend stays open for the next catalog on it.
        drop(cat);
    }
    // Read workloads, with tables of 100, 10k (and 100k) files.
    let sql = sqlite::Sqlite::open(&dir.join(format!("sqlite-{subject}-reads.db")), false)?;
    let cat = Keyspace::open_with(
        backend.clone(),
        KeyspaceOptions {
            durability: Durability::Buffered,
            ..Default::default()
        },
    )
    .await?;
    let mut sizes = vec![100usize, 10_000];
    if budget.large {
        sizes.push(100_000);
    }
    for (table_id, files) in sizes
        .into_iter()
        .enumerate()
        .map(|(i, f)| (100 + i as u64, f))
    {
        let mut left = files;
        while left > 0 {
            let n = left.min(1000);
            let mut t = cat.begin().await?;
            t.write_snapshot().await?;
            for i in 0..n {
                t.insert_child(
                    &keystone::FILE,
                    table_id,
                    KeyChoice::Issued,
                    file_cells(table_id, i as u64),
                )
                .await?;
            }
            t.commit().await?;
            left -= n;
        }
        sql.load_files(table_id, files)?;
        let b2 = Budget {
            samples: budget.samples.min(if files >= 10_000 { 20 } else { 200 }),
            ..budget
        };
        let s = sample(b2, |_| {
            let cat = cat.clone();
            async move {
                let n = list_files(&cat, table_id).await?;
                assert_eq!(n, files);
                Ok(())
            }
        })
        .await?;
        let q = sql.sample_list(table_id, files, b2)?;
        let mut row = m(
            "catalog",
            format!("list visible files of a table with {files}"),
            subject,
            "n/a",
            &s,
        );
        row.sqlite_median_ns = Some(q.median());
        out.push(row);
    }
    let s = sample(budget, |_| {
        let cat = cat.clone();
        async move {
            std::hint::black_box(cat.current_snapshot().await?);
            Ok(())
        }
    })
    .await?;
    let q = sql.sample_current(budget)?;
    let mut row = m("catalog", "read the current snapshot", subject, "n/a", &s);
    row.sqlite_median_ns = Some(q.median());
    out.push(row);
    cat.close().await?;
    Ok(out)
}

/// Durable commits from 1, 4 and 16 concurrent committers (group commit).
pub async fn group_commit(
    subject: &str,
    backend: Arc<dyn KvBackend>,
    budget: Budget,
) -> Result<Vec<Measurement>> {
    let mut out = Vec::new();
    let cat = Keyspace::open_with(
        backend,
        KeyspaceOptions {
            durability: Durability::Durable,
            ..Default::default()
        },
    )
    .await?;
    for committers in [1usize, 4, 16] {
        let deadline = Instant::now() + budget.time.max(Duration::from_millis(500));
        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..committers {
            let cat = cat.clone();
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    commit_snapshot(&cat, 1).await?;
                    lat.push(t.elapsed());
                }
                Ok::<_, rocklake_core::Error>(lat)
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(
                t.await
                    .map_err(|e| rocklake_core::Error::InvalidArgument(e.to_string()))??,
            );
        }
        let el = start.elapsed().as_secs_f64();
        let tput = all.len() as f64 / el;
        let s = Stats::from(all);
        let mut row = m(
            "group-commit",
            format!("{committers} concurrent committer(s), 1-file snapshots"),
            subject,
            "durable",
            &s,
        );
        row.ops_per_sec = Some(tput);
        out.push(row);
    }
    cat.close().await?;
    Ok(out)
}
