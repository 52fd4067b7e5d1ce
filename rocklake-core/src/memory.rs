//! The in-memory reference backend: a `BTreeMap` behind a lock.
//!
//! It is the model the conformance suite compares engines against, and the template for a new
//! engine: every method of [`KvBackend`] is here in its simplest correct form.
//!
//! Views are copy-on-write: the map lives in an `Arc`, a view clones the `Arc`, and a write that
//! finds a view still holding the old map clones it first (`Arc::make_mut`). Writes while a view
//! is open cost a copy of the map; that is fine for a model and for tests.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use bytes::Bytes;

use crate::backend::{
    check_preconditions, BatchOp, Capabilities, Durability, KeyRange, KvBackend, KvPair, Order,
    ReadView, WriteBatch,
};
use crate::error::{Error, Result};

type Map = BTreeMap<Bytes, Bytes>;

/// Scan a `BTreeMap` the way [`ReadView::scan`] promises.
pub fn scan_map(map: &Map, range: &KeyRange, order: Order, limit: usize) -> Vec<KvPair> {
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

/// An in-memory store. Nothing survives the process.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    map: RwLock<Arc<Map>>,
    closed: AtomicBool,
}

impl MemoryBackend {
    /// An empty store.
    pub fn new() -> MemoryBackend {
        MemoryBackend::default()
    }

    /// An empty store, shared.
    pub fn shared() -> Arc<MemoryBackend> {
        Arc::new(MemoryBackend::new())
    }

    /// A new, open store holding what this one holds now: how a process that restarts finds
    /// the data after a clean shutdown. Tests use it to check what survives a close.
    pub fn reopened(&self) -> MemoryBackend {
        MemoryBackend {
            map: RwLock::new(self.current()),
            closed: AtomicBool::new(false),
        }
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(AtomicOrdering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn current(&self) -> Arc<Map> {
        // A poisoned lock means a writer panicked mid-update; the map itself is still whole
        // because updates are applied to a private clone first.
        self.map.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A frozen map: the memory backend's read view.
#[derive(Debug)]
struct MemoryView(Arc<Map>);

#[async_trait]
impl ReadView for MemoryView {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.0.get(key).cloned())
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        Ok(scan_map(&self.0, range, order, limit))
    }
}

#[async_trait]
impl ReadView for MemoryBackend {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.check_open()?;
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        Ok(map.get(key).cloned())
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        self.check_open()?;
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        Ok(scan_map(&map, range, order, limit))
    }
}

#[async_trait]
impl KvBackend for MemoryBackend {
    fn engine(&self) -> &'static str {
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

    async fn write(&self, batch: WriteBatch, _durability: Durability) -> Result<()> {
        self.check_open()?;
        batch.validate()?;
        let mut guard = self.map.write().unwrap_or_else(|e| e.into_inner());
        check_preconditions(&batch, |k| Ok(guard.get(k).cloned()))?;
        if batch.ops.is_empty() {
            return Ok(());
        }
        // Preconditions held and keys are valid: nothing below can fail half-way.
        let map = Arc::make_mut(&mut guard);
        for op in batch.ops {
            match op {
                BatchOp::Put(k, v) => {
                    map.insert(k, v);
                }
                BatchOp::Delete(k) => {
                    map.remove(&k);
                }
            }
        }
        Ok(())
    }

    async fn view(&self) -> Result<Arc<dyn ReadView>> {
        self.check_open()?;
        Ok(Arc::new(MemoryView(self.current())))
    }

    async fn flush(&self) -> Result<()> {
        self.check_open()
    }

    async fn close(&self) -> Result<()> {
        self.closed.store(true, AtomicOrdering::Release);
        Ok(())
    }
}
