//! The model check on folder stores whose memtables are written out at 64 KiB, with the
//! compactor merging as few as two tables and looking for work every 100 ms, so that what it compares with the model has been
//! through SlateDB's L0 flushes and compactions; SlateDB's manifest shows that both happened.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use conformance::{checks, Outcome, Target};
use rocklake_core::{EngineBackend, KvBackend};
use rocklake_slatedb::{Location, SlateBackend, SlateEngine, SlateOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_check_passes_through_l0_flushes_and_compactions() {
    let opened: Arc<Mutex<Vec<Arc<SlateBackend>>>> = Arc::default();
    let keep = opened.clone();
    let target = Target::in_temp_folders("slatedb-64KiB-memtables", move |path| {
        let keep = keep.clone();
        async move {
            let options = SlateOptions {
                l0_sst_size_bytes: Some(64 << 10),
                compactor_poll_interval: Some(Duration::from_millis(100)),
                compactor_min_sources: Some(2),
                ..SlateOptions::default()
            };
            let engine = SlateEngine::open(Location::Folder(path), options).await?;
            let backend = Arc::new(EngineBackend::new(engine));
            keep.lock().unwrap().push(backend.clone());
            Ok(backend as Arc<dyn KvBackend>)
        }
    });
    let outcome = checks::model_based(&target).await.unwrap();
    let Outcome::Pass(figures) = outcome else {
        panic!("the model check did not run: {outcome:?}")
    };
    // What each opened database's manifest held when it was last seen.
    let (mut l0, mut runs) = (0, 0);
    for backend in opened.lock().unwrap().iter() {
        let status = backend.engine_ref().raw_db().status();
        l0 += status.current_manifest.l0().len();
        runs += status.current_manifest.compacted().len();
    }
    println!(
        "model on 64 KiB memtables: {figures}; SlateDB manifests held {l0} L0 tables and \
         {runs} compacted sorted runs"
    );
    assert!(
        l0 + runs > 0,
        "no memtable was written out: the check never left the memtable"
    );
    assert!(runs > 0, "no compaction ran under the model check");
}
