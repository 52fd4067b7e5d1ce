//! The holder record on a real folder: a second writer is refused while the first runs (naming
//! it), a takeover fences the first for good, and records left by writers that are gone (a dead
//! pid here, a heartbeat that stopped elsewhere) do not lock the store.

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
