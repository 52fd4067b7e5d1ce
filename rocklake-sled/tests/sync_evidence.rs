//! Evidence that durable commits flush sled (write and sync): the bytes sled itself reports
//! its flushes wrote (`Db::flush` returns them) have risen when each durable commit returns,
//! and a commit path that skips the flush is caught.

use std::sync::Arc;

use rocklake_core::{EngineBackend, KvBackend};
use rocklake_sled::SledEngine;

#[tokio::test]
async fn every_durable_commit_flushes_and_a_skipped_flush_is_caught() {
    for skip in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(EngineBackend::new(
            SledEngine::open(dir.path().join("store")).await.unwrap(),
        ));
        backend.engine_ref().skip_syncs_for_tests(skip);
        let counter = backend.clone();
        // sled's own figure: the bytes its `Db::flush` says it wrote and synced.
        let syncs = move || counter.engine_ref().flushed_bytes();
        let r = conformance::durable_commits_sync(backend.clone() as Arc<dyn KvBackend>, syncs, 20)
            .await;
        eprintln!("sync skipped: {skip}: {r:?}");
        if skip {
            let e = r.expect_err("a commit path without a flush must be caught");
            assert!(e.contains("returned before the engine synced"), "{e}");
        } else {
            r.unwrap();
        }
    }
}
