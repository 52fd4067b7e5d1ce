//! A wrapper backend that fails a chosen call (a read, a write, a view, a flush or a close), to
//! prove that failures leave nothing half-written. A write can also fail *after* it applied:
//! the batch is visible but its caller hears of a failed sync.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use rocklake_core::backend::{
    Capabilities, Durability, KeyRange, KvBackend, KvPair, Order, ReadView, WriteBatch,
};
use rocklake_core::error::{Error, Result};

/// Wraps a backend; once armed with [`FaultyBackend::arm`], the `n`-th call from then on fails with an engine
/// error. A failing write either is not applied at all, or (with `after_apply`) is applied and
/// then reported as failed: the "acknowledgement lost" case.
#[derive(Debug)]
pub struct FaultyBackend {
    inner: Arc<dyn KvBackend>,
    calls: AtomicUsize,
    fail_at: AtomicUsize,
    after_apply: AtomicBool,
    /// What the last fault hit, once it fired (`None`: armed, not fired yet).
    fired: std::sync::Mutex<Option<&'static str>>,
    /// Fail the next close, whatever the count.
    fail_close: AtomicBool,
    /// Fail this many of the next flushes, whatever the count.
    fail_flushes: AtomicUsize,
    /// Flushes wait for a read share of this while [`FaultyBackend::hold_flushes`] holds it.
    flush_gate: Arc<tokio::sync::RwLock<()>>,
    /// Flushes waiting at the gate now.
    flushes_held: AtomicUsize,
}

impl FaultyBackend {
    /// Wrap a backend; no fault is armed.
    pub fn new(inner: Arc<dyn KvBackend>) -> Arc<FaultyBackend> {
        Arc::new(FaultyBackend {
            inner,
            calls: AtomicUsize::new(0),
            fail_at: AtomicUsize::new(usize::MAX),
            after_apply: AtomicBool::new(false),
            fired: std::sync::Mutex::new(None),
            fail_close: AtomicBool::new(false),
            fail_flushes: AtomicUsize::new(0),
            flush_gate: Arc::new(tokio::sync::RwLock::new(())),
            flushes_held: AtomicUsize::new(0),
        })
    }

    /// Fail the `n`-th call from now (1 = the next one). Writes fail before applying, or after
    /// when `after_apply`.
    pub fn arm(&self, n: usize, after_apply: bool) {
        self.after_apply.store(after_apply, Ordering::SeqCst);
        *self.fired.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.fail_at
            .store(self.calls.load(Ordering::SeqCst) + n, Ordering::SeqCst);
    }

    /// Disarm.
    pub fn disarm(&self) {
        self.fail_at.store(usize::MAX, Ordering::SeqCst);
    }

    fn tick(&self) -> bool {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        n == self.fail_at.load(Ordering::SeqCst)
    }

    /// Fail the next close (and nothing else).
    pub fn arm_close(&self) {
        *self.fired.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.fail_close.store(true, Ordering::SeqCst);
    }

    /// Fail the next `n` flushes (and nothing else), whatever the count.
    pub fn fail_next_flushes(&self, n: usize) {
        *self.fired.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.fail_flushes.store(n, Ordering::SeqCst);
    }

    /// Hold every flush back until the returned guard is dropped: a commit applied meanwhile
    /// is visible in the store but not durable, for as long as the test needs.
    pub async fn hold_flushes(&self) -> tokio::sync::OwnedRwLockWriteGuard<()> {
        self.flush_gate.clone().write_owned().await
    }

    /// How many flushes are waiting at the gate of [`FaultyBackend::hold_flushes`] now.
    pub fn flushes_held(&self) -> usize {
        self.flushes_held.load(Ordering::SeqCst)
    }

    /// The call the armed fault hit, if it has fired.
    pub fn fired(&self) -> Option<&'static str> {
        *self.fired.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fault(&self, what: &'static str) -> Error {
        *self.fired.lock().unwrap_or_else(|e| e.into_inner()) = Some(what);
        Error::Engine {
            engine: "faulty",
            message: format!("injected fault in {what}"),
            source: None,
        }
    }
}

struct FaultyView {
    owner: Arc<FaultyBackend>,
    inner: Arc<dyn ReadView>,
}

#[async_trait]
impl ReadView for FaultyView {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        if self.owner.tick() {
            return Err(self.owner.fault("view get"));
        }
        self.inner.get(key).await
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        if self.owner.tick() {
            return Err(self.owner.fault("view scan"));
        }
        self.inner.scan(range, order, limit).await
    }
}

#[async_trait]
impl ReadView for FaultyBackend {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        if self.tick() {
            return Err(self.fault("get"));
        }
        self.inner.get(key).await
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        if self.tick() {
            return Err(self.fault("scan"));
        }
        self.inner.scan(range, order, limit).await
    }
}

/// Needs an `Arc<FaultyBackend>` to hand out views that count too.
pub struct FaultyHandle(pub Arc<FaultyBackend>);

impl std::fmt::Debug for FaultyHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[async_trait]
impl ReadView for FaultyHandle {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.0.get(key).await
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        self.0.scan(range, order, limit).await
    }
}

#[async_trait]
impl KvBackend for FaultyHandle {
    fn engine(&self) -> &'static str {
        self.0.inner.engine()
    }

    fn capabilities(&self) -> Capabilities {
        self.0.inner.capabilities()
    }

    fn engine_stats(&self) -> Vec<rocklake_core::EngineStat> {
        self.0.inner.engine_stats()
    }

    async fn write(&self, batch: WriteBatch, durability: Durability) -> Result<()> {
        if self.0.tick() {
            if self.0.after_apply.load(Ordering::SeqCst) {
                self.0.inner.write(batch, Durability::Buffered).await?;
            }
            // "Applied but the sync failed": visible, not durable, reported as failed.
            return Err(self.0.fault(if self.0.after_apply.load(Ordering::SeqCst) {
                "write (applied, then the sync failed)"
            } else {
                "write"
            }));
        }
        self.0.inner.write(batch, durability).await
    }

    async fn view(&self) -> Result<Arc<dyn ReadView>> {
        if self.0.tick() {
            return Err(self.0.fault("view"));
        }
        Ok(Arc::new(FaultyView {
            owner: self.0.clone(),
            inner: self.0.inner.view().await?,
        }))
    }

    async fn flush(&self) -> Result<()> {
        let failing = self
            .0
            .fail_flushes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if self.0.tick() || failing {
            return Err(self.0.fault("flush"));
        }
        self.0.flushes_held.fetch_add(1, Ordering::SeqCst);
        let open = self.0.flush_gate.read().await;
        self.0.flushes_held.fetch_sub(1, Ordering::SeqCst);
        let flushed = self.0.inner.flush().await;
        drop(open);
        flushed
    }

    async fn close(&self) -> Result<()> {
        if self.0.fail_close.swap(false, Ordering::SeqCst) || self.0.tick() {
            return Err(self.0.fault("close"));
        }
        self.0.inner.close().await
    }
}
