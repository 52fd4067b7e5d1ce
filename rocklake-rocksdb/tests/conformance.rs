//! The whole conformance suite on RocksDB stores in temporary folders (the crash check's child
//! is this test binary, run again).

use std::sync::Arc;

use conformance::{suite, Target};
use rocklake_core::KvBackend;

suite!(
    rocksdb,
    Target::in_temp_folders("rocksdb", |path| async move {
        Ok(rocklake_rocksdb::open(path).await? as Arc<dyn KvBackend>)
    })
);
