//! `rocklake::open_reader`: a reader beside a running writer where the engine allows one, a
//! clear refusal where it does not.

use std::path::PathBuf;

use rocklake::{Durability, ErrorKind, KvBackend, WriteBatch};

/// A fresh folder under the system temp dir (this crate has no `tempfile`), removed on drop.
struct TempFolder(PathBuf);

impl TempFolder {
    fn new(tag: &str) -> TempFolder {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "rocklake-open-reader-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempFolder(path)
    }
}

impl Drop for TempFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn put(backend: &dyn KvBackend, key: &'static [u8], value: &'static [u8]) {
    let mut batch = WriteBatch::new();
    batch.put(key, value);
    backend.write(batch, Durability::Durable).await.unwrap();
}

#[cfg(feature = "sled")]
#[tokio::test]
async fn a_sled_store_is_refused_while_its_writer_runs_and_the_writer_keeps_working() {
    let dir = TempFolder::new("sled");
    let url = format!("sled://{}", dir.0.display());
    let writer = rocklake::open(&url).await.unwrap();
    put(writer.as_ref(), b"\x01a", b"1").await;

    let e = rocklake::open_reader(&url).await.unwrap_err();
    println!("{e}");
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    let text = e.to_string();
    for says in [
        "cannot be opened while its writer runs",
        "stop the writer",
        "SlateDB",
    ] {
        assert!(text.contains(says), "{says:?} missing from: {text}");
    }
    put(writer.as_ref(), b"\x01b", b"2").await;
    assert_eq!(
        writer.get(b"\x01b").await.unwrap().as_deref(),
        Some(&b"2"[..])
    );
    writer.close().await.unwrap();
}

#[tokio::test]
async fn engines_without_a_reader_say_so() {
    for (url, says) in [
        ("sled:///tmp/rocklake-no-such-sled", "stop the writer"),
        ("rocksdb:///tmp/rocklake-no-such-rocks", "not supported yet"),
        ("model://", "no writer to read beside"),
        ("memory://", "no writer to read beside"),
    ] {
        match rocklake::open_reader(url).await {
            Ok(_) => panic!("{url} was opened"),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Unsupported, "{url}: {e}");
                assert!(e.to_string().contains(says), "{url}: {e}");
            }
        }
    }
    assert!(rocklake::open_reader("postgres://x").await.is_err());
}

#[cfg(feature = "slatedb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slatedb_reader_reads_beside_its_writer() {
    let dir = TempFolder::new("slatedb");
    let url = format!("file://{}", dir.0.display());
    let writer = rocklake::open(&url).await.unwrap();
    // A catalog's first open writes its format version (a store of keys without one is an
    // unfinished copy, which no open accepts).
    let ks = rocklake::Keyspace::open(writer.clone()).await.unwrap();
    put(writer.as_ref(), b"\x01a", b"1").await;

    let reader = rocklake::open_reader(&url).await.unwrap();
    assert_eq!(
        reader.get(b"\x01a").await.unwrap().as_deref(),
        Some(&b"1"[..])
    );
    let ro = rocklake::Keyspace::open_read_only(reader.clone())
        .await
        .unwrap();
    assert_eq!(ro.epoch(), None);
    // The writer is not fenced.
    put(writer.as_ref(), b"\x01b", b"2").await;
    let mut batch = WriteBatch::new();
    batch.put(&b"\x01c"[..], &b"3"[..]);
    let e = reader.write(batch, Durability::Durable).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    ro.close().await.unwrap();
    ks.close().await.unwrap();
}
