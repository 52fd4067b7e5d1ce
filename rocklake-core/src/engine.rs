//! The engine boundary: what differs between engines ([`Engine`]), and the one [`KvBackend`]
//! built on any of them ([`EngineBackend`]).
//!
//! An engine crate implements only what its engine does differently: live point reads and
//! ordered scans ([`ReadView`]), applying a batch atomically, a durability barrier (`sync`), a
//! native snapshot if it has one, and close. Everything the [`KvBackend`] contract adds on top
//! exists once, here:
//!
//! - **check-and-apply**: a batch's preconditions are read and the batch applied under one
//!   write lock, so no other batch of this store lands in between. That is enough because an
//!   engine admits one writer per store (RocksDB's and sled's lock files refuse a second open;
//!   a second SlateDB writer fences the first, whose batches then never become durable);
//! - **group commit**: a durable batch is applied, then waits for an engine sync that began
//!   after it ([`GroupCommit`]), outside the write lock, so durable batches that arrive
//!   together share one sync and no sync is ever awaited under a lock;
//! - **point-in-time views** for engines without snapshots ([`crate::overlay`]);
//! - **close**: no batch lands after close began, every batch applied before it is durable
//!   when it returns, and every later call answers [`Error::Closed`].
//!
//! How an engine with a blocking API runs its calls is [`crate::blocking`]'s one policy.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::backend::{
    BatchOp, Capabilities, Durability, KeyRange, KvBackend, KvPair, Order, ReadView, Visitor,
    WriteBatch,
};
use crate::error::{Error, Result};
use crate::group_commit::GroupCommit;
use crate::keys;
use crate::overlay::Overlays;

/// What an engine implements. Its [`ReadView`] methods read the live store.
///
/// # Contract
/// - The engine's store has one writer: this handle (a second opener is refused, or fences
///   this one so that none of its later batches becomes durable).
/// - `apply` is atomic (every op lands or none does), visible to reads once it returns, and
///   need not be durable. [`EngineBackend`] calls it one batch at a time.
/// - `sync` makes every batch applied before it began durable.
/// - `snapshot` returns a native point-in-time view, or `None` when the engine has none.
/// - `close` makes everything durable and releases the store; it is called once, with no
///   `apply` in flight. Afterwards the engine's live reads answer [`Error::Closed`].
/// - Nothing may block the async runtime for long: see [`crate::blocking`].
#[async_trait]
pub trait Engine: ReadView + fmt::Debug + 'static {
    /// Engine name: `memory`, `slatedb`, `rocksdb`, `sled`.
    fn name(&self) -> &'static str;

    /// What the engine can do. `point_in_time_views` is ignored: every [`EngineBackend`] has
    /// them (native or from an overlay).
    fn capabilities(&self) -> Capabilities;

    /// Apply `ops` atomically; visible at once, durable after the next [`Engine::sync`].
    async fn apply(&self, ops: Vec<BatchOp>) -> Result<()>;

    /// The durability barrier: every batch applied before this call is durable when it returns.
    async fn sync(&self) -> Result<()>;

    /// A native point-in-time view; `None` when the engine has no snapshots.
    async fn snapshot(&self) -> Result<Option<Arc<dyn ReadView>>>;

    /// Make every applied batch durable and release the store.
    async fn close(&self) -> Result<()>;

    /// A forced compaction (see [`KvBackend::compact`]); `Ok(false)` where there is none.
    async fn compact(&self) -> Result<bool> {
        Ok(false)
    }

    /// The engine's own figures (see [`KvBackend::engine_stats`]).
    fn stats(&self) -> Vec<crate::backend::EngineStat> {
        Vec::new()
    }

    /// This writer's lease on its store (see [`KvBackend::lease`]).
    fn lease(&self) -> Option<std::sync::Arc<crate::lease::Lease>> {
        None
    }
}

/// A [`KvBackend`] over an [`Engine`]: preconditions, group commit, views and close, once for
/// every engine (see the module docs).
pub struct EngineBackend<E: Engine> {
    engine: Arc<E>,
    /// Held across precondition check and apply of every batch, while a view is opened on the
    /// overlay, and by close. Never held across a sync.
    write_lock: tokio::sync::Mutex<()>,
    overlays: Overlays,
    group: GroupCommit,
    closed: AtomicBool,
}

impl<E: Engine> fmt::Debug for EngineBackend<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineBackend")
            .field("engine", &self.engine)
            .field("closed", &self.closed.load(AtomicOrdering::Relaxed))
            .field("overlay_views", &self.overlays.open_views())
            .finish()
    }
}

impl<E: Engine> EngineBackend<E> {
    /// Serve `engine` as a [`KvBackend`].
    pub fn new(engine: E) -> EngineBackend<E> {
        EngineBackend {
            engine: Arc::new(engine),
            write_lock: tokio::sync::Mutex::new(()),
            overlays: Overlays::default(),
            group: GroupCommit::default(),
            closed: AtomicBool::new(false),
        }
    }

    /// The engine underneath (for raw-engine benchmarks; writing through it bypasses the
    /// preconditions and the views).
    pub fn engine_ref(&self) -> &E {
        &self.engine
    }

    /// Bound what the views of an engine without snapshots hold at once (their undo
    /// overlays; [`crate::overlay::DEFAULT_VIEW_MEMORY`] unless set): past it the views holding
    /// the most are let go, and reads through them fail with [`Error::SnapshotTooOld`].
    pub fn limit_view_memory(&self, bytes: usize) {
        self.overlays.set_limit(bytes);
    }

    /// What the open views' undo overlays hold now, in bytes (0 on an engine with snapshots).
    pub fn view_memory(&self) -> usize {
        self.overlays.held_bytes()
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(AtomicOrdering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Under the write lock: check the preconditions, record for overlay views, apply.
    async fn check_and_apply(&self, batch: WriteBatch) -> Result<bool> {
        for p in &batch.preconditions {
            let found = self.engine.get(&p.key).await?;
            if found.as_deref() != p.expected.as_deref() {
                return Err(Error::ConditionFailed {
                    key: keys::render(&p.key),
                    raw_key: p.key.to_vec(),
                });
            }
        }
        if batch.ops.is_empty() {
            return Ok(false);
        }
        // If the apply then fails, the overlays hold the unchanged values: still each view's.
        self.overlays
            .record(self.engine.as_ref(), &batch.ops)
            .await?;
        self.engine.apply(batch.ops).await?;
        Ok(true)
    }
}

#[async_trait]
impl<E: Engine> ReadView for EngineBackend<E> {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.check_open()?;
        self.engine.get(key).await
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        self.check_open()?;
        self.engine.scan(range, order, limit).await
    }

    async fn visit(
        &self,
        range: &KeyRange,
        order: Order,
        limit: usize,
        each: &mut Visitor<'_>,
    ) -> Result<usize> {
        self.check_open()?;
        self.engine.visit(range, order, limit, each).await
    }
}

#[async_trait]
impl<E: Engine> KvBackend for EngineBackend<E> {
    fn engine(&self) -> &'static str {
        self.engine.name()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            point_in_time_views: true,
            ..self.engine.capabilities()
        }
    }

    fn engine_stats(&self) -> Vec<crate::backend::EngineStat> {
        self.engine.stats()
    }

    fn lease(&self) -> Option<Arc<crate::lease::Lease>> {
        self.engine.lease()
    }

    async fn write(&self, batch: WriteBatch, durability: Durability) -> Result<()> {
        self.check_open()?;
        batch.validate()?;
        let seq = {
            let _guard = self.write_lock.lock().await;
            // Again under the lock: close takes it, so no batch lands once close has begun.
            self.check_open()?;
            let applying = self.group.start_apply();
            if !self.check_and_apply(batch).await? {
                return Ok(());
            }
            applying.applied()
        };
        if durability == Durability::Durable {
            self.group.wait_durable(seq, || self.engine.sync()).await?;
        }
        Ok(())
    }

    async fn view(&self) -> Result<Arc<dyn ReadView>> {
        self.check_open()?;
        if let Some(view) = self.engine.snapshot().await? {
            return Ok(view);
        }
        let _guard = self.write_lock.lock().await;
        self.check_open()?;
        let live: Arc<dyn ReadView> = self.engine.clone();
        Ok(Arc::new(self.overlays.open(live)))
    }

    async fn flush(&self) -> Result<()> {
        self.check_open()?;
        self.engine.sync().await
    }

    async fn close(&self) -> Result<()> {
        if self.closed.swap(true, AtomicOrdering::AcqRel) {
            return Ok(());
        }
        // No batch is being applied once we hold the lock, and none starts after it.
        let _guard = self.write_lock.lock().await;
        // Durable waiters of batches applied so far are answered by a sync on the open engine,
        // not by an engine that was closed under them.
        let applied = self.group.last_applied();
        if let Err(e) = self
            .group
            .wait_durable(applied, || self.engine.sync())
            .await
        {
            tracing::warn!(engine = self.engine.name(), error = %e,
                "the last sync before close failed; closing the engine anyway");
        }
        self.engine.close().await
    }

    async fn compact(&self) -> Result<bool> {
        self.check_open()?;
        self.engine.compact().await
    }
}
