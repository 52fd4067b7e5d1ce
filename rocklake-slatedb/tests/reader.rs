//! A [`SlateReader`] beside a running writer on a real folder: it reads what the writer
//! committed, never fences it, sees later commits within a bounded wait, and refuses writes.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use conformance::rows::table_cells;
use rocklake_core::keystone;
use rocklake_core::{
    Durability, Error, ErrorKind, KeyChoice, KeyRange, Keyspace, KvBackend, Order, ReadView, Value,
    WriteBatch,
};
use rocklake_slatedb::{open_reader_url, open_url, SlateReader};

/// The longest wait for a commit to show in a reader (ten times its 1 s poll interval). A
/// wait, not a timing assertion: it only bounds a test that would otherwise hang.
const PATIENCE: Duration = Duration::from_secs(10);

fn url_of(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// Insert a `table` row named `name` under key `id`, as the writer, in one transaction.
async fn commit_table(writer: &Keyspace, id: u64, name: &str) {
    let mut t = writer.begin().await.unwrap();
    t.insert(&keystone::TABLE, KeyChoice::Named(id), table_cells(name))
        .await
        .unwrap();
    t.commit().await.unwrap();
}

/// The name of `table` row `id` as a fresh catalog reader over `ro` sees it.
async fn table_name(ro: &Keyspace, id: u64) -> Option<String> {
    let r = ro.reader(None).await.unwrap();
    let (_, row) = r.by_id(&keystone::TABLE, id).await.unwrap()?;
    match &row.cells[3] {
        Value::Text(s) => Some(s.clone()),
        other => panic!("table_name is {other:?}"),
    }
}

/// Wait until `seen()` holds, up to [`PATIENCE`]; how long it took.
async fn wait_until<F, Fut>(what: &str, mut seen: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let began = Instant::now();
    while !seen().await {
        assert!(
            began.elapsed() < PATIENCE,
            "the reader did not see {what} within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    began.elapsed()
}

/// Files under `dir` whose path contains `/{part}/`.
fn files_in(dir: &Path, part: &str) -> usize {
    fn walk(p: &Path, part: &str, n: &mut usize) {
        for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
            let path = e.path();
            if path.is_dir() {
                walk(&path, part, n);
            } else if path.to_string_lossy().contains(&format!("/{part}/")) {
                *n += 1;
            }
        }
    }
    let mut n = 0;
    walk(dir, part, &mut n);
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_beside_the_writer_never_fences_it_and_sees_its_commits() {
    let dir = tempfile::tempdir().unwrap();
    let url = url_of(dir.path());
    let writer = Keyspace::open(open_url(&url).await.unwrap()).await.unwrap();
    commit_table(&writer, 1, "orders").await;

    let reader: Arc<SlateReader> = open_reader_url(&url).await.unwrap();
    let ro = Keyspace::open_read_only(reader.clone()).await.unwrap();
    assert_eq!(ro.epoch(), None);
    assert_eq!(table_name(&ro, 1).await.as_deref(), Some("orders"));

    // The old path (a second `Db::open`) fenced the writer here; the reader does not.
    commit_table(&writer, 2, "lineitem").await;
    let took = wait_until("the second commit", || async {
        table_name(&ro, 2).await.is_some()
    })
    .await;
    println!("reader saw the second commit {took:?} after it was acknowledged");
    assert_eq!(table_name(&ro, 2).await.as_deref(), Some("lineitem"));

    // Writes through the reader are refused, naming the URL, and nothing lands.
    let mut batch = WriteBatch::new();
    batch.put(
        Bytes::from_static(b"\x01reader-was-here"),
        Bytes::from_static(b"x"),
    );
    let err = reader
        .write(batch.clone(), Durability::Durable)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    assert!(err.to_string().contains(&url), "{err}");
    println!("write through the reader: {err}");
    assert_eq!(
        reader
            .write(WriteBatch::new(), Durability::Buffered)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::PermissionDenied
    );
    // A transaction on the read-only key space is refused by the core before the backend.
    let mut t = ro.begin().await.unwrap();
    let refused = match t
        .insert(&keystone::TABLE, KeyChoice::Named(3), table_cells("no"))
        .await
    {
        Err(e) => e,
        Ok(_) => t.commit().await.unwrap_err(),
    };
    assert_eq!(refused.kind(), ErrorKind::PermissionDenied, "{refused}");
    assert!(writer
        .backend()
        .get(b"\x01reader-was-here")
        .await
        .unwrap()
        .is_none());

    // Still the writer: a third commit lands, the writer closes cleanly, and a fresh writer
    // finds every commit.
    commit_table(&writer, 3, "customer").await;
    wait_until("the third commit", || async {
        table_name(&ro, 3).await.is_some()
    })
    .await;
    writer.close().await.unwrap();
    ro.close().await.unwrap();
    assert!(matches!(reader.get(b"\x01x").await, Err(Error::Closed)));
    assert!(matches!(reader.flush().await, Err(Error::Closed)));
    reader.close().await.unwrap();

    let again = Keyspace::open(open_url(&url).await.unwrap()).await.unwrap();
    for (id, name) in [(1, "orders"), (2, "lineitem"), (3, "customer")] {
        assert_eq!(table_name(&again, id).await.as_deref(), Some(name));
    }
    again.close().await.unwrap();
}

/// What `DbReader` sees: a batch only in the writer's memory (buffered, before the writer's
/// WAL flush) is in no object and stays invisible; once the writer flushes its WAL the reader
/// sees it, while no SST holds it yet (WAL objects only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_sees_the_flushed_wal_and_not_the_writers_memory() {
    let dir = tempfile::tempdir().unwrap();
    let url = url_of(dir.path());
    // An hour between background WAL flushes: only an explicit flush writes the WAL.
    let writer = open_url(&format!("{url}?flush_interval_ms=3600000"))
        .await
        .unwrap();
    let mut first = WriteBatch::new();
    first.put(Bytes::from_static(b"\x01a"), Bytes::from_static(b"1"));
    writer.write(first, Durability::Durable).await.unwrap();

    let reader = open_reader_url(&url).await.unwrap();
    assert_eq!(
        reader.get(b"\x01a").await.unwrap().as_deref(),
        Some(&b"1"[..])
    );

    let mut buffered = WriteBatch::new();
    buffered.put(Bytes::from_static(b"\x01b"), Bytes::from_static(b"2"));
    writer.write(buffered, Durability::Buffered).await.unwrap();
    assert_eq!(
        writer.get(b"\x01b").await.unwrap().as_deref(),
        Some(&b"2"[..])
    );
    // Three poll intervals: the batch is in no object, so no poll can find it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(reader.get(b"\x01b").await.unwrap(), None);

    writer.flush().await.unwrap();
    let took = wait_until("the flushed batch", || async {
        reader.get(b"\x01b").await.unwrap().is_some()
    })
    .await;
    let wal = files_in(dir.path(), "wal");
    let ssts = files_in(dir.path(), "compacted");
    println!("reader saw the WAL flush after {took:?}; {wal} WAL objects, {ssts} SSTs");
    assert!(wal > 0);
    assert_eq!(ssts, 0, "the batch is still only in the WAL");

    reader.close().await.unwrap();
    writer.close().await.unwrap();
}

/// Point reads and scans through the reader match the writer's, in both orders and with
/// limits, once the reader has caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reader_scans_match_the_writer_in_both_orders_with_limits() {
    let dir = tempfile::tempdir().unwrap();
    let url = url_of(dir.path());
    let writer = open_url(&url).await.unwrap();
    let reader = open_reader_url(&url).await.unwrap();
    // One that holds no checkpoint and writes nothing at all.
    let follower = open_reader_url(&format!("{url}?checkpoint=none"))
        .await
        .unwrap();
    let mut batch = WriteBatch::new();
    for i in 0..40u32 {
        batch.put(
            Bytes::from(format!("\x01k{i:02}")),
            Bytes::from(format!("v{i}")),
        );
    }
    batch.delete(Bytes::from_static(b"\x01k07"));
    writer.write(batch, Durability::Durable).await.unwrap();
    wait_until("the batch", || async {
        reader.get(b"\x01k39").await.unwrap().is_some()
            && follower.get(b"\x01k39").await.unwrap().is_some()
    })
    .await;

    let ranges = [
        KeyRange::all(),
        KeyRange::prefix(b"\x01k1"),
        KeyRange::new(&b"\x01k05"[..], &b"\x01k33"[..]),
        KeyRange::new(&b"\x01k09"[..], &b"\x01k05"[..]),
    ];
    for range in &ranges {
        for order in [Order::Ascending, Order::Descending] {
            for limit in [1, 3, 10, 1000] {
                let want = writer.scan(range, order, limit).await.unwrap();
                let got = reader.scan(range, order, limit).await.unwrap();
                assert_eq!(got, want, "{range:?} {order:?} limit {limit}");
                assert_eq!(follower.scan(range, order, limit).await.unwrap(), want);
                let view = reader.view().await.unwrap();
                assert_eq!(view.scan(range, order, limit).await.unwrap(), want);
            }
        }
    }
    assert_eq!(reader.get(b"\x01k07").await.unwrap(), None);
    assert_eq!(
        reader.get(b"\x01k08").await.unwrap().as_deref(),
        Some(&b"v8"[..])
    );
    assert!(reader.capabilities().point_in_time_views);
    assert!(!reader.capabilities().fences_on_open);

    reader.close().await.unwrap();
    follower.close().await.unwrap();
    writer.close().await.unwrap();
}

/// A view is one state of the store: commits the reader shows after it was taken stay out of
/// it, at every poll after, while new views see them (#22 item 10: before, a view was the live
/// reader, and one transaction's reads could straddle a poll).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_keeps_the_state_it_was_taken_at_while_the_reader_follows() {
    let dir = tempfile::tempdir().unwrap();
    let url = url_of(dir.path());
    let writer = open_url(&url).await.unwrap();
    let put = |k: &'static [u8], v: &'static [u8]| {
        let mut b = WriteBatch::new();
        b.put(Bytes::from_static(k), Bytes::from_static(v));
        b
    };
    writer
        .write(put(b"\x01a", b"1"), Durability::Durable)
        .await
        .unwrap();
    let reader = open_reader_url(&format!("{url}?poll_ms=50")).await.unwrap();
    let view = reader.view().await.unwrap();
    assert_eq!(
        view.get(b"\x01a").await.unwrap().as_deref(),
        Some(&b"1"[..])
    );
    for round in 0..3u8 {
        let mut b = put(b"\x01a", b"2");
        b.put(Bytes::from(vec![1, b'b', round]), Bytes::from_static(b"x"));
        writer.write(b, Durability::Durable).await.unwrap();
        wait_until("the next commit", || async {
            reader.get(&[1, b'b', round]).await.unwrap().is_some()
        })
        .await;
        // Several polls later the old view is as it was; a new one has the commit.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            view.get(b"\x01a").await.unwrap().as_deref(),
            Some(&b"1"[..])
        );
        let all = view
            .scan(&KeyRange::all(), Order::Ascending, 100)
            .await
            .unwrap();
        assert_eq!(all.len(), 1, "the old view holds one key: {all:?}");
        let fresh = reader.view().await.unwrap();
        assert_eq!(
            fresh.get(b"\x01a").await.unwrap().as_deref(),
            Some(&b"2"[..])
        );
        assert_eq!(
            fresh
                .scan(&KeyRange::all(), Order::Ascending, 100)
                .await
                .unwrap()
                .len(),
            2 + usize::from(round)
        );
    }
    assert!(
        reader.generations() >= 4,
        "{} generations",
        reader.generations()
    );
    drop(view);
    reader.close().await.unwrap();
    writer.close().await.unwrap();
}

/// A new generation is taken by views only once its `DbReader`'s first poll is behind it: a
/// commit whose WAL object lands between the generation's open and that poll must not show up
/// inside a view taken in between. The reader's store is 100 ms away (`simulate_latency_ms`),
/// so the poll comes long after the open, while the writer commits every 100 ms; each view
/// reads a counter, waits past the poll and reads it again. Before the generation waited for
/// its poll (a fixed 250 ms), the second read saw a later commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_taken_from_a_new_generation_does_not_move_at_its_first_poll() {
    let dir = tempfile::tempdir().unwrap();
    let url = url_of(dir.path());
    let writer = open_url(&format!("{url}?flush_interval_ms=3600000"))
        .await
        .unwrap();
    let counter = |n: u64| {
        let mut b = WriteBatch::new();
        b.put(
            Bytes::from_static(b"\x01n"),
            Bytes::from(n.to_be_bytes().to_vec()),
        );
        b
    };
    writer.write(counter(0), Durability::Durable).await.unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let committing = {
        let (writer, stop) = (writer.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                writer.write(counter(n), Durability::Durable).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            n
        })
    };
    let reader = open_reader_url(&format!("{url}?poll_ms=50&simulate_latency_ms=100"))
        .await
        .unwrap();
    let read = |v: &Arc<dyn ReadView>| {
        let v = v.clone();
        async move { v.get(b"\x01n").await.unwrap() }
    };
    let mut views = 0;
    let began = Instant::now();
    let mut generation = reader.generations();
    while views < 3 {
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "only {views} new generations in 120 s"
        );
        // A view of a generation just published.
        if reader.generations() == generation {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        generation = reader.generations();
        let view = reader.view().await.unwrap();
        let first = read(&view).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let again = read(&view).await;
        assert_eq!(
            first, again,
            "a view of generation {generation} read the counter at {first:?}, then at {again:?}"
        );
        views += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let commits = committing.await.unwrap();
    // Each generation saw its first poll (none was published after the wait ran out).
    assert_eq!(reader.unseen_first_polls(), 0);
    eprintln!(
        "{views} views of new generations held still over 1.5 s each, while the writer made \
         {commits} commits; {} generations",
        reader.generations()
    );
    reader.close().await.unwrap();
    writer.close().await.unwrap();
}

#[tokio::test]
async fn a_reader_refuses_memory_and_locations_without_a_catalog() {
    let e = open_reader_url("memory://").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    assert!(e.to_string().contains("no writer to read beside"), "{e}");

    let dir = tempfile::tempdir().unwrap();
    let missing = format!("file://{}/nothing-here", dir.path().display());
    let e = open_reader_url(&missing).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(
        !dir.path().join("nothing-here").exists(),
        "a reader creates no folder"
    );

    let e = open_reader_url(&url_of(dir.path())).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    println!("empty folder: {e}");

    let e = open_reader_url("file:///tmp/x?poll_ms=0")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("poll_ms must be at least 1"), "{e}");
}

/// While the writer flushes L0 SSTs and compacts (each a manifest update) and a reader that
/// polls every 100 ms replaces its managed checkpoint (its own manifest updates), every durable
/// batch of the writer still lands: the two never fence each other, and the reader ends up
/// seeing the last batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_reader_does_not_fence_a_writer_that_flushes_and_compacts() {
    use rocklake_core::EngineBackend;
    use rocklake_slatedb::{Location, SlateEngine, SlateOptions};

    let dir = tempfile::tempdir().unwrap();
    let url = url_of(dir.path());
    let options = SlateOptions {
        l0_sst_size_bytes: Some(64 << 10),
        compactor_poll_interval: Some(Duration::from_millis(100)),
        compactor_min_sources: Some(2),
        ..SlateOptions::default()
    };
    let engine = SlateEngine::open(Location::Folder(dir.path().to_path_buf()), options)
        .await
        .unwrap();
    let writer = Arc::new(EngineBackend::new(engine));
    let mut seed = WriteBatch::new();
    seed.put(Bytes::from_static(b"\x01seed"), Bytes::from_static(b"0"));
    writer.write(seed, Durability::Durable).await.unwrap();
    let reader = open_reader_url(&format!("{url}?poll_ms=100"))
        .await
        .unwrap();

    let value = Bytes::from(vec![b'v'; 200]);
    let last = 150u32;
    for round in 0..=last {
        let mut batch = WriteBatch::new();
        for i in 0..40u32 {
            batch.put(
                Bytes::from(format!("\x01r{round:04}k{i:02}")),
                value.clone(),
            );
        }
        writer.write(batch, Durability::Durable).await.unwrap();
    }
    let last_key = format!("\x01r{last:04}k39");
    let took = wait_until("the last batch", || async {
        reader.get(last_key.as_bytes()).await.unwrap().is_some()
    })
    .await;
    let ssts = files_in(dir.path(), "compacted");
    println!(
        "reader saw the last of {} batches after {took:?}; {ssts} SSTs on disk",
        last + 1
    );
    assert!(ssts > 0, "the writer flushed L0 SSTs meanwhile");
    let page = reader
        .scan(&KeyRange::prefix(b"\x01r0000"), Order::Ascending, 1000)
        .await
        .unwrap();
    assert_eq!(
        page.len(),
        40,
        "a batch that reached an SST still reads whole"
    );

    reader.close().await.unwrap();
    writer.close().await.unwrap();
}

/// `max_staleness_ms` bounds what a view may lag: with the poller all but stopped (one poll
/// every ten minutes), a view taken more than the bound after a commit was acknowledged still
/// reads it (the view looks at the store first), where the same reader without the bound does
/// not; and a view that cannot look is refused rather than served the old state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_past_max_staleness_looks_at_the_store_first_or_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let url = url_of(dir.path());
    let writer = open_url(&url).await.unwrap();
    let mut first = WriteBatch::new();
    first.put(Bytes::from_static(b"\x01k0"), Bytes::from_static(b"0"));
    writer.write(first, Durability::Durable).await.unwrap();
    let bound = Duration::from_millis(300);
    let bounded = open_reader_url(&format!(
        "{url}?poll_ms=600000&max_staleness_ms={}",
        bound.as_millis()
    ))
    .await
    .unwrap();
    let unbounded = open_reader_url(&format!("{url}?poll_ms=600000"))
        .await
        .unwrap();
    for i in 1..=5u8 {
        let key = Bytes::from(vec![1, b'k', b'0' + i]);
        let mut b = WriteBatch::new();
        b.put(key.clone(), Bytes::from(vec![b'0' + i]));
        writer.write(b, Durability::Durable).await.unwrap();
        // Acknowledged; once the bound has passed, every new view must read it.
        tokio::time::sleep(bound + Duration::from_millis(50)).await;
        let view = bounded.view().await.unwrap();
        assert_eq!(
            view.get(&key).await.unwrap().as_deref(),
            Some(&[b'0' + i][..]),
            "commit {i}, acknowledged more than max_staleness_ms before the view"
        );
        assert_eq!(
            unbounded.view().await.unwrap().get(&key).await.unwrap(),
            None,
            "the reader without the bound has not polled since it opened"
        );
    }
    assert!(bounded.generations() > 1 && unbounded.generations() == 1);

    // One more commit, then the store's manifests made unreadable: the bounded view must
    // look, fails to, and is refused; nothing is served from the old generation.
    let mut b = WriteBatch::new();
    b.put(Bytes::from_static(b"\x01last"), Bytes::from_static(b"x"));
    writer.write(b, Durability::Durable).await.unwrap();
    writer.close().await.unwrap();
    let manifests = dir.path().join("rocklake/manifest");
    std::fs::rename(&manifests, dir.path().join("manifest-away")).unwrap();
    std::fs::write(&manifests, b"not a folder").unwrap();
    tokio::time::sleep(bound + Duration::from_millis(50)).await;
    let refused = bounded.view().await.map(|_| ()).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Stale, "{refused}");
    assert!(
        refused.to_string().contains("max_staleness_ms=300"),
        "{refused}"
    );
    assert_eq!(refused.sqlstate(), "57P03");
    // The reader without the bound serves what it has, as before.
    assert!(unbounded.view().await.is_ok());
    // (Closing a reader deletes its checkpoint from the manifest: give the manifests back.)
    std::fs::remove_file(&manifests).unwrap();
    std::fs::rename(dir.path().join("manifest-away"), &manifests).unwrap();
    bounded.close().await.unwrap();
    unbounded.close().await.unwrap();
}

/// A reader's generations share one block cache: after the writer commits (a new generation),
/// a scan the reader already made is answered from the cache, even with the SSTs it read gone
/// from the store. Each generation used to start with a cache of its own, so on object storage
/// the first read after every commit fetched every block again, a round trip each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_generation_reads_through_the_blocks_the_last_one_cached() {
    let dir = tempfile::tempdir().unwrap();
    let url = url_of(dir.path());
    // About 2 MB of rows, written out to an L0 table when the writer closes.
    let writer = open_url(&url).await.unwrap();
    for chunk in 0..20u32 {
        let mut b = WriteBatch::new();
        for i in 0..1_000u32 {
            let n = chunk * 1_000 + i;
            b.put(
                Bytes::from(format!("\x01row{n:06}")),
                Bytes::from(vec![b'v'; 100]),
            );
        }
        writer.write(b, Durability::Durable).await.unwrap();
    }
    writer.close().await.unwrap();
    assert!(
        files_in(dir.path(), "compacted") > 0,
        "the rows are in an SST"
    );
    let writer = open_url(&url).await.unwrap();
    let reader = open_reader_url(&format!("{url}?poll_ms=100"))
        .await
        .unwrap();
    let all = KeyRange::prefix(b"\x01");
    let scan = |v: Arc<dyn ReadView>| {
        let all = all.clone();
        async move {
            v.scan(&all, Order::Ascending, usize::MAX)
                .await
                .map(|r| r.len())
        }
    };
    assert_eq!(scan(reader.view().await.unwrap()).await.unwrap(), 20_000);

    // A commit, and the reader's next generation holding it.
    let before = reader.generations();
    let mut b = WriteBatch::new();
    b.put(Bytes::from_static(b"\x01zz"), Bytes::from_static(b"new"));
    writer.write(b, Durability::Durable).await.unwrap();
    wait_until("the commit in a new generation", || async {
        reader.generations() > before && reader.get(b"\x01zz").await.unwrap().is_some()
    })
    .await;

    // The SSTs taken away: the new generation still scans every row, from the cache.
    let compacted = dir.path().join("rocklake/compacted");
    let away = dir.path().join("compacted-away");
    std::fs::rename(&compacted, &away).unwrap();
    let scanned = scan(reader.view().await.unwrap()).await;
    std::fs::rename(&away, &compacted).unwrap();
    assert_eq!(
        scanned.map_err(|e| e.to_string()),
        Ok(20_001),
        "the new generation had to read the SSTs again"
    );
    reader.close().await.unwrap();
    writer.close().await.unwrap();
}
