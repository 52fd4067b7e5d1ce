//! The in-memory reference engine: a `BTreeMap` behind a lock.
//!
//! [`MemoryBackend`] is the model the conformance suite compares engines against, and
//! [`MemoryEngine`] the template for a new engine: every method of [`Engine`] is here in its
//! simplest correct form; [`EngineBackend`] adds preconditions, group commit and close.
//!
//! Snapshots share structure with the live map: the map is a persistent B-tree
//! ([`imbl::OrdMap`]), a snapshot is a clone of its root (constant time), and a write while a
//! snapshot is open copies only the nodes on the path to the keys it changes. So a write beside
//! an open view costs O(log n), not a copy of the whole map, and the model's timings (the `sql`
//! benchmark group measures the SQL layer on it) are the SQL layer's, not the model's.
//! [`MemoryEngine::without_snapshots`] has none, so its views come from the undo overlay
//! ([`crate::overlay`]), which is how the suite checks the overlay apart from sled.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, RwLock};

use imbl::OrdMap;

use async_trait::async_trait;
use bytes::Bytes;

use crate::backend::{BatchOp, Capabilities, KeyRange, KvPair, Order, ReadView};
use crate::engine::{Engine, EngineBackend};
use crate::error::{Error, Result};

type Map = OrdMap<Bytes, Bytes>;

/// Scan a `BTreeMap` the way [`ReadView::scan`] promises.
pub fn scan_map(
    map: &BTreeMap<Bytes, Bytes>,
    range: &KeyRange,
    order: Order,
    limit: usize,
) -> Vec<KvPair> {
    if range.is_empty() || limit == 0 {
        return Vec::new();
    }
    let (start, end) = range.as_slices();
    let iter = map.range::<[u8], _>((start, end));
    let clone = |(k, v): (&Bytes, &Bytes)| (k.clone(), v.clone());
    match order {
        Order::Ascending => iter.take(limit).map(clone).collect(),
        Order::Descending => iter.rev().take(limit).map(clone).collect(),
    }
}

/// [`scan_map`] over the engine's persistent map.
fn scan_ord(map: &Map, range: &KeyRange, order: Order, limit: usize) -> Vec<KvPair> {
    if range.is_empty() || limit == 0 {
        return Vec::new();
    }
    let (start, end) = range.as_slices();
    let iter = map.range::<_, [u8]>((start, end));
    let clone = |(k, v): (&Bytes, &Bytes)| (k.clone(), v.clone());
    match order {
        Order::Ascending => iter.take(limit).map(clone).collect(),
        Order::Descending => iter.rev().take(limit).map(clone).collect(),
    }
}

/// The in-memory reference store: [`MemoryEngine`] served through [`EngineBackend`].
pub type MemoryBackend = EngineBackend<MemoryEngine>;

impl Default for EngineBackend<MemoryEngine> {
    fn default() -> Self {
        EngineBackend::new(MemoryEngine::default())
    }
}

impl EngineBackend<MemoryEngine> {
    /// An empty in-memory store.
    pub fn memory() -> MemoryBackend {
        MemoryBackend::default()
    }

    /// A new, open store holding what this one holds now: how a process that restarts finds
    /// the data after a clean shutdown. Tests use it to check what survives a close.
    pub fn reopened(&self) -> MemoryBackend {
        let engine = self.engine_ref();
        EngineBackend::new(MemoryEngine {
            map: RwLock::new(engine.current()),
            closed: AtomicBool::new(false),
            snapshots: engine.snapshots,
        })
    }
}

/// An in-memory engine. Nothing survives the process.
#[derive(Debug)]
pub struct MemoryEngine {
    map: RwLock<Map>,
    closed: AtomicBool,
    /// Whether [`Engine::snapshot`] gives native snapshots.
    snapshots: bool,
}

impl Default for MemoryEngine {
    fn default() -> Self {
        MemoryEngine {
            map: RwLock::default(),
            closed: AtomicBool::new(false),
            snapshots: true,
        }
    }
}

impl MemoryEngine {
    /// An empty engine with native snapshots.
    pub fn new() -> MemoryEngine {
        MemoryEngine::default()
    }

    /// An empty engine without snapshots: its store's views come from the undo overlay.
    pub fn without_snapshots() -> MemoryEngine {
        MemoryEngine {
            snapshots: false,
            ..MemoryEngine::default()
        }
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(AtomicOrdering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn current(&self) -> Map {
        // A poisoned lock means a writer panicked mid-update; the map itself is still whole
        // because updates are applied to a private clone first.
        self.map.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A frozen map: the memory engine's snapshot.
#[derive(Debug)]
struct MemoryView(Map);

#[async_trait]
impl ReadView for MemoryView {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.0.get(key).cloned())
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        Ok(scan_ord(&self.0, range, order, limit))
    }
}

#[async_trait]
impl ReadView for MemoryEngine {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.check_open()?;
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        Ok(map.get(key).cloned())
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        self.check_open()?;
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        Ok(scan_ord(&map, range, order, limit))
    }
}

#[async_trait]
impl Engine for MemoryEngine {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            persistent: false,
            exclusive_open: false,
            fences_on_open: false,
            point_in_time_views: true,
        }
    }

    async fn apply(&self, ops: Vec<BatchOp>) -> Result<()> {
        self.check_open()?;
        // Keys were validated by the backend: nothing below can fail half-way. The batch is
        // applied to a clone (sharing every node) and swapped in whole.
        let mut guard = self.map.write().unwrap_or_else(|e| e.into_inner());
        let mut map = guard.clone();
        for op in ops {
            match op {
                BatchOp::Put(k, v) => {
                    map.insert(k, v);
                }
                BatchOp::Delete(k) => {
                    map.remove(&k);
                }
            }
        }
        *guard = map;
        Ok(())
    }

    async fn sync(&self) -> Result<()> {
        self.check_open()
    }

    async fn snapshot(&self) -> Result<Option<Arc<dyn ReadView>>> {
        self.check_open()?;
        if !self.snapshots {
            return Ok(None);
        }
        Ok(Some(Arc::new(MemoryView(self.current()))))
    }

    async fn close(&self) -> Result<()> {
        self.closed.store(true, AtomicOrdering::Release);
        Ok(())
    }
}
