//! Evidence that durable commits reach the object store: an `object_store` wrapper counts the
//! WAL objects SlateDB writes; every durable commit writes one, and a commit path that skips
//! the flush is caught. SlateDB's background flush is set to an hour so that only commits flush.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use rocklake_core::{EngineBackend, KvBackend};
use rocklake_slatedb::{Location, SlateEngine, SlateOptions};

/// Counts the WAL objects written through it (paths with a `wal` segment).
#[derive(Debug)]
struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    wal_puts: AtomicU64,
}

impl fmt::Display for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CountingStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let r = self.inner.put_opts(location, payload, opts).await;
        if r.is_ok() && location.parts().any(|p| p.as_ref() == "wal") {
            self.wal_puts.fetch_add(1, Ordering::SeqCst);
        }
        r
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_durable_commit_writes_a_wal_object_and_a_skipped_flush_is_caught() {
    for skip in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let location = Location::Folder(dir.path().to_path_buf());
        let (inner, path) = rocklake_slatedb::object_store_for(&location).unwrap();
        let counting = Arc::new(CountingStore {
            inner,
            wal_puts: AtomicU64::new(0),
        });
        let options = SlateOptions {
            flush_interval: std::time::Duration::from_secs(3600),
            ..SlateOptions::default()
        };
        let engine = SlateEngine::open_store(counting.clone(), path, location, options)
            .await
            .unwrap();
        let backend = Arc::new(EngineBackend::new(engine));
        backend.engine_ref().skip_syncs_for_tests(skip);
        let syncs = move || counting.wal_puts.load(Ordering::SeqCst);
        let r = conformance::durable_commits_sync(backend.clone() as Arc<dyn KvBackend>, syncs, 20)
            .await;
        eprintln!("sync skipped: {skip}: {r:?}");
        if skip {
            let e = r.expect_err("a commit path without a WAL flush must be caught");
            assert!(e.contains("returned before the engine synced"), "{e}");
        } else {
            r.unwrap();
        }
    }
}

/// `simulate_latency_ms` (a remote bucket's round trip, for benchmarks) puts every request
/// behind that wait: a durable commit, which writes one WAL object and waits for it, takes at
/// least as long; without the option the same commit on the same folder waits for nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_latency_delays_every_durable_commit() {
    use rocklake_core::backend::WriteBatch;
    use rocklake_core::Durability;
    use std::time::{Duration, Instant};

    const WAIT: Duration = Duration::from_millis(60);
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "file://{}?flush_interval_ms=3600000&simulate_latency_ms={}",
        dir.path().display(),
        WAIT.as_millis()
    );
    let backend = rocklake_slatedb::open_url(&url).await.unwrap();
    let mut fastest = Duration::MAX;
    for i in 0..5u8 {
        let mut batch = WriteBatch::default();
        batch.put(vec![0x40, i], vec![i]);
        let started = Instant::now();
        backend.write(batch, Durability::Durable).await.unwrap();
        fastest = fastest.min(started.elapsed());
    }
    backend.close().await.unwrap();
    eprintln!("the fastest of 5 durable commits behind {WAIT:?}: {fastest:?}");
    assert!(
        fastest >= WAIT,
        "a durable commit took {fastest:?}, less than the {WAIT:?} each request waits"
    );
}
