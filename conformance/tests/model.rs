//! The suite on core's reference engine: with native snapshots (`model`), and without them, so
//! that every view comes from core's undo overlay (`model-overlay`, the path sled takes).

use std::sync::Arc;

use conformance::{suite, Target};
use rocklake_core::{EngineBackend, KvBackend, MemoryBackend, MemoryEngine};

suite!(
    model,
    Target::in_memory("model", || Arc::new(MemoryBackend::default())
        as Arc<dyn KvBackend>)
);

suite!(
    model_overlay,
    Target::in_memory("model-overlay", || {
        Arc::new(EngineBackend::new(MemoryEngine::without_snapshots())) as Arc<dyn KvBackend>
    })
);
