//! The holder record on a real folder: a second writer is refused while the first runs (naming
//! it), a takeover fences the first for good, and records left by writers that are gone (a dead
//! pid here, a heartbeat that stopped elsewhere) do not lock the store; a writer that steps
//! down stops renewing its record once its lease ran out.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rocklake_core::{Durability, ErrorKind, KvBackend, WriteBatch};
use rocklake_slatedb::holder::{Record, BEAT, STALE_AFTER};
use rocklake_slatedb::{open_url, open_url_with};

fn url_of(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

fn record_file(dir: &Path) -> std::path::PathBuf {
    dir.join("rocklake.writer")
}

fn record(dir: &Path) -> Option<Record> {
    let bytes = std::fs::read(record_file(dir)).ok()?;
    Some(serde_json::from_slice(&bytes).expect("a holder record"))
}

fn put(dir: &Path, r: &Record) {
    std::fs::write(record_file(dir), serde_json::to_vec(r).unwrap()).unwrap();
}

/// The error and every source under it, as the command line prints them.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

async fn write_one(b: &dyn KvBackend, key: &'static [u8]) -> rocklake_core::Result<()> {
    let mut batch = WriteBatch::new();
    batch.put(Bytes::from_static(key), Bytes::from_static(b"v"));
    b.write(batch, Durability::Durable).await.map(drop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_is_refused_naming_the_first_which_keeps_writing() {
    let dir = tempfile::tempdir().unwrap();
    let url = url_of(dir.path());
    let first = open_url(&url).await.unwrap();
    let mine = record(dir.path()).expect("the writer keeps a record");
    assert_eq!(mine.pid, std::process::id());

    let e = open_url(&url)
        .await
        .expect_err("a second writer is refused");
    assert_eq!(e.kind(), ErrorKind::Locked, "{e}");
    let said = chain(&e);
    for part in [
        format!("pid {}", std::process::id()),
        "--takeover".to_string(),
        "--read-only".to_string(),
    ] {
        assert!(said.contains(&part), "the refusal names {part:?}: {said}");
    }
    // Refused before SlateDB opened anything: the first writer is not fenced.
    write_one(first.as_ref(), b"\x01a").await.unwrap();

    // The heartbeat renews the record.
    tokio::time::sleep(BEAT + Duration::from_millis(700)).await;
    let renewed = record(dir.path()).unwrap();
    assert_eq!(renewed.id, mine.id);
    assert!(renewed.beat > mine.beat, "{renewed:?} after {mine:?}");

    first.close().await.unwrap();
    assert!(
        record(dir.path()).is_none(),
        "a closed writer removes its record"
    );
    let again = open_url(&url).await.unwrap();
    write_one(again.as_ref(), b"\x01b").await.unwrap();
    drop(again);
    // Dropped without a close: this process no longer holds it.
    let third = open_url(&url).await.unwrap();
    third.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_fences_the_holder_whose_heartbeat_then_stops() {
    let dir = tempfile::tempdir().unwrap();
    let url = url_of(dir.path());
    let first = open_url(&url).await.unwrap();
    let old = record(dir.path()).unwrap();
    let second = open_url_with(&url, true).await.unwrap();
    let new = record(dir.path()).unwrap();
    assert_ne!(new.id, old.id);
    assert_eq!(new.generation, old.generation + 1);
    let e = write_one(first.as_ref(), b"\x01a")
        .await
        .expect_err("the old writer is fenced");
    assert_eq!(e.kind(), ErrorKind::Fenced, "{e}");
    write_one(second.as_ref(), b"\x01b").await.unwrap();
    let e = open_url(&url).await.expect_err("the new writer holds it");
    assert_eq!(e.kind(), ErrorKind::Locked);
    // A beat later the old writer has seen its successor's record; once the successor closes
    // (removing its record), the old one, fenced, must not write its own record back.
    tokio::time::sleep(BEAT + Duration::from_millis(700)).await;
    assert_eq!(record(dir.path()).unwrap().id, new.id);
    second.close().await.unwrap();
    tokio::time::sleep(2 * BEAT + Duration::from_millis(500)).await;
    assert_eq!(
        record(dir.path()),
        None,
        "the fenced writer went on renewing its record"
    );
    let _ = first.close().await;
    open_url(&url).await.unwrap().close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_writers_that_are_gone_do_not_lock_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let url = url_of(dir.path());
    let w = open_url(&url).await.unwrap();
    let template = record(dir.path()).unwrap();
    w.close().await.unwrap();

    // A process of this machine that has exited (a crash, a kill -9): free at once.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    put(
        dir.path(),
        &Record {
            pid: gone.id(),
            ..template.clone()
        },
    );
    let began = Instant::now();
    open_url(&url).await.unwrap().close().await.unwrap();
    assert!(
        began.elapsed() < STALE_AFTER,
        "a dead pid needs no watching: {:?}",
        began.elapsed()
    );

    // Another machine whose heartbeat stopped: free once it has been silent long enough.
    let elsewhere = Record {
        host: "other-host".into(),
        pid_scope: "another-boot/pid:[1]".into(),
        pid: 1,
        ..template.clone()
    };
    put(dir.path(), &elsewhere);
    let began = Instant::now();
    open_url(&url).await.unwrap().close().await.unwrap();
    assert!(
        began.elapsed() >= STALE_AFTER,
        "a foreign record is watched before it is called stale: {:?}",
        began.elapsed()
    );

    // Another machine whose heartbeat goes on: refused, naming that host.
    put(dir.path(), &elsewhere);
    let beating = {
        let dir = dir.path().to_path_buf();
        let elsewhere = elsewhere.clone();
        tokio::spawn(async move {
            for beat in 1.. {
                tokio::time::sleep(Duration::from_millis(300)).await;
                put(
                    &dir,
                    &Record {
                        beat,
                        ..elsewhere.clone()
                    },
                );
            }
        })
    };
    let e = open_url(&url).await.expect_err("a live foreign writer");
    beating.abort();
    assert_eq!(e.kind(), ErrorKind::Locked);
    assert!(chain(&e).contains("on host other-host"), "{}", chain(&e));
    // The refusal left the foreign writer's record as it was.
    assert_eq!(record(dir.path()).unwrap().host, "other-host");
}

/// The lease (`lease_ms`): a standby watching the record does not judge a working writer gone;
/// a takeover makes the old writer give its lease up at its next beat, after which its key
/// space refuses every transaction and commit as fenced; and a writer whose record stops changing (the
/// heartbeat held, as a paused or cut-off process's is) is judged gone after 1.25 leases, by
/// which time its own lease has run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_waits_out_the_writers_lease_and_a_takeover_ends_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}?lease_ms=400", url_of(dir.path()));
    let first = open_url(&url).await.unwrap();
    let ks = rocklake_core::Keyspace::open(first.clone()).await.unwrap();
    let lease = ks.lease().expect("a SlateDB writer keeps a lease").clone();
    assert_eq!(record(dir.path()).unwrap().lease_ms, 400);

    // A working writer: the standby's watch does not end within 2 s (five leases).
    let watched = tokio::time::timeout(
        Duration::from_secs(2),
        rocklake_slatedb::await_vacancy(&url),
    )
    .await;
    assert!(
        watched.is_err(),
        "a standby judged a working writer gone: {watched:?}"
    );
    assert!(lease.is_held());
    ks.begin().await.expect("the writer still answers");

    // A takeover: the old writer gives its lease up within a beat or two.
    let second = open_url_with(&url, true).await.unwrap();
    let started = Instant::now();
    while lease.is_held() && started.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!lease.is_held(), "the fenced writer still holds its lease");
    // Refused as fenced (a successor took the store over), saying why.
    let e = ks
        .begin()
        .await
        .expect_err("a writer without its lease answers nothing");
    assert_eq!(e.kind(), ErrorKind::Fenced, "{e}");
    assert!(
        e.to_string().contains("another writer took the store over"),
        "{e}"
    );
    second.close().await.unwrap();
    drop(ks);
    drop(first);

    // A record whose heartbeat stopped: judged gone after 1.25 leases, not before.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let stuck = Record {
        id: 7,
        generation: 99,
        beat: 1,
        command: "a paused writer".into(),
        pid: u32::MAX - 9,
        host: "elsewhere".into(),
        pid_scope: "another machine".into(),
        since_ms: now,
        beat_ms: now,
        lease_ms: 600,
    };
    put(dir.path(), &stuck);
    let started = Instant::now();
    let judged = rocklake_slatedb::await_vacancy(&url).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(judged.map(|r| r.id), Some(7));
    assert!(
        waited >= Duration::from_millis(750),
        "took a 600 ms lease over after {waited:?}, before 1.25 leases"
    );
}

/// A writer whose lease ran out while its record could not be written: once the record can be
/// written again, a writer that steps down (a standby's) leaves it as it was, so that a standby
/// sees it go stale; a lone writer (`steps_down_on_lapse: false`) renews it again, so that no
/// other process takes its store while it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_steps_down_stops_renewing_its_record_once_its_lease_ran_out() {
    for steps_down in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("{}?lease_ms=400", url_of(dir.path()));
        let backend = open_url(&url).await.unwrap();
        let options = rocklake_core::KeyspaceOptions {
            steps_down_on_lapse: steps_down,
            ..Default::default()
        };
        let ks = rocklake_core::Keyspace::open_with(backend.clone(), options)
            .await
            .unwrap();
        let lease = backend.lease().expect("a SlateDB writer keeps a lease");
        let kept = record(dir.path()).expect("the writer's record");

        // The record's place taken by a folder: no beat can read or write it.
        std::fs::remove_file(record_file(dir.path())).unwrap();
        std::fs::create_dir(record_file(dir.path())).unwrap();
        std::fs::write(record_file(dir.path()).join("x"), b"x").unwrap();
        let started = Instant::now();
        while lease.is_held() && started.elapsed() < Duration::from_secs(3) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            !lease.is_held(),
            "the lease did not run out without its record"
        );

        // The record can be written again: six beats' time.
        std::fs::remove_dir_all(record_file(dir.path())).unwrap();
        put(dir.path(), &kept);
        tokio::time::sleep(Duration::from_millis(600)).await;
        let now = record(dir.path()).expect("a record");
        if steps_down {
            assert_eq!(
                now.beat, kept.beat,
                "a writer that steps down renewed its record after its lease ran out"
            );
        } else {
            assert!(
                now.beat > kept.beat,
                "a lone writer stopped renewing its record (beat {} then {})",
                kept.beat,
                now.beat
            );
        }
        drop(ks);
        backend.close().await.ok();
    }
}
