//! RocksDB's own evidence that durable commits sync the write-ahead log: its `rocksdb.wal.synced`
//! ticker rises with every durable commit, and a commit path that skips the sync is caught.

use std::sync::Arc;

use rocklake_core::{EngineBackend, KvBackend};
use rocklake_rocksdb::RocksEngine;

#[tokio::test]
async fn every_durable_commit_syncs_the_wal_and_a_skipped_sync_is_caught() {
    for skip in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(EngineBackend::new(
            RocksEngine::open_counting_syncs(dir.path()).await.unwrap(),
        ));
        backend.engine_ref().skip_syncs_for_tests(skip);
        let counter = backend.clone();
        let syncs = move || counter.engine_ref().wal_syncs().expect("statistics are on");
        let r = conformance::durable_commits_sync(backend.clone() as Arc<dyn KvBackend>, syncs, 20)
            .await;
        eprintln!("sync skipped: {skip}: {r:?}");
        if skip {
            let e = r.expect_err("a commit path without a WAL sync must be caught");
            assert!(e.contains("returned before the engine synced"), "{e}");
        } else {
            r.unwrap();
        }
    }
}
