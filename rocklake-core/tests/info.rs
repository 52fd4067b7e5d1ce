//! `info`: key counts per table, with progress on long walks.

use std::sync::Arc;

use rocklake_core::backend::WriteBatch;
use rocklake_core::info::{info_with_progress, INFO_PROGRESS_EVERY};
use rocklake_core::{Durability, Keyspace, KvBackend, MemoryBackend};

#[tokio::test]
async fn info_counts_every_key_per_table_and_reports_progress() {
    let backend: Arc<dyn KvBackend> = Arc::new(MemoryBackend::default());
    let cat = Keyspace::open(backend.clone()).await.unwrap();
    let before = cat.info().await.unwrap();
    let stats = rocklake_core::tags::FILE_COLUMN_STATS;
    let name = stats.info().unwrap().name.to_string();
    let rows = 2 * INFO_PROGRESS_EVERY + 1234;
    let mut w = WriteBatch::new();
    for i in 0..rows {
        w.put(
            rocklake_core::keys::row_key(stats, &[i, 1]),
            b"not a row, only counted".to_vec(),
        );
    }
    // A key under a byte no table uses: counted under its byte.
    w.put(vec![0x7a, 1, 2], b"x".to_vec());
    backend.write(w, Durability::Buffered).await.unwrap();

    let mut reports = Vec::new();
    let info = info_with_progress(backend.as_ref(), backend.engine(), |n| reports.push(n))
        .await
        .unwrap();
    assert_eq!(info.counts.get(&name), Some(&rows));
    assert_eq!(info.counts.get("unknown_0x7a"), Some(&1));
    let total: u64 = info.counts.values().sum();
    let before_total: u64 = before.counts.values().sum();
    assert_eq!(total, before_total + rows + 1);
    assert_eq!(reports, vec![INFO_PROGRESS_EVERY, 2 * INFO_PROGRESS_EVERY]);
    cat.close().await.unwrap();
}
