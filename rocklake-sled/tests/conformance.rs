//! The whole conformance suite on sled stores in temporary folders (the crash check's child is
//! this test binary, run again).

use std::sync::Arc;

use conformance::{suite, Target};
use rocklake_core::KvBackend;

suite!(
    sled,
    Target::in_temp_folders("sled", |path| async move {
        Ok(rocklake_sled::open(path).await? as Arc<dyn KvBackend>)
    })
);
