//! The model check on stores whose memtables are 64 KiB, so that what it compares with the model
//! has been through RocksDB's memtable flushes and compactions; RocksDB's own tickers show that
//! both happened.

use std::sync::{Arc, Mutex};

use conformance::{checks, Outcome, Target};
use rocklake_core::{EngineBackend, KvBackend};
use rocklake_rocksdb::{RocksBackend, RocksEngine};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_check_passes_through_flushes_and_compactions() {
    let opened: Arc<Mutex<Vec<Arc<RocksBackend>>>> = Arc::default();
    let keep = opened.clone();
    let target = Target::in_temp_folders("rocksdb-64KiB-memtables", move |path| {
        let keep = keep.clone();
        async move {
            let backend = Arc::new(EngineBackend::new(
                RocksEngine::open_with_small_memtables_for_tests(path).await?,
            ));
            keep.lock().unwrap().push(backend.clone());
            Ok(backend as Arc<dyn KvBackend>)
        }
    });
    let outcome = checks::model_based(&target).await.unwrap();
    let Outcome::Pass(figures) = outcome else {
        panic!("the model check did not run: {outcome:?}")
    };
    let (mut flushed, mut compacted) = (0, 0);
    for backend in opened.lock().unwrap().iter() {
        let (f, c) = backend.engine_ref().flush_and_compaction_bytes().unwrap();
        flushed += f;
        compacted += c;
    }
    println!(
        "model on 64 KiB memtables: {figures}; RocksDB flushed {} KiB and compacted {} KiB",
        flushed / 1024,
        compacted / 1024
    );
    assert!(
        flushed > 0,
        "no memtable was flushed: the check never left the memtable"
    );
    assert!(compacted > 0, "no compaction ran under the model check");
}
