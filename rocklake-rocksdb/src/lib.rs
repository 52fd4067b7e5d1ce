//! `rocklake-rocksdb`: RockLake's [`KvBackend`] on [RocksDB](https://rocksdb.org).
//!
//! # Why RocksDB
//! It is the fastest durable engine on a local disk that RockLake supports: in this project's
//! benchmark (`docs/bench`, 2026-12-01) a durable one-file snapshot commit took 197 µs and 16
//! concurrent committers reached 29.8k commits per second, against 6.8k for SlateDB on a local
//! folder and 8.9k for sled. Pick it when the catalog lives on one machine's disk and object
//! storage is not a requirement.
//!
//! # Durability
//! Every batch is written to the memtable and the write-ahead log without an fsync, under the
//! write mutex (microseconds). A [`Durability::Durable`] batch then waits, outside that mutex,
//! for a log sync (`flush_wal(true)`, on the blocking pool) that began after it was applied;
//! durable batches that arrive together share one sync (core's
//! [`rocklake_core::group_commit::GroupCommit`]), so no runtime worker ever waits for an fsync
//! on a mutex. A [`Durability::Buffered`] batch returns once applied; it survives a crash of
//! the process (the OS holds the bytes) but not of the machine, until the next sync:
//! a durable batch, [`KvBackend::flush`] or [`KvBackend::close`].
//!
//! # Atomic conditional batches
//! A RocksDB `WriteBatch` is atomic on its own. Preconditions are checked with plain reads while
//! an in-process mutex is held across check and apply. That is enough because RocksDB's `LOCK`
//! file admits one open handle per store (a second open, in this process or another, gets
//! [`Error::Locked`]), and every write of that handle goes through the mutex.
//!
//! # Views
//! [`KvBackend::view`] takes a RocksDB snapshot (a pinned sequence number). The `rocksdb` crate's
//! snapshot borrows the `DB`, so it cannot live in a `'static`, `Send` view by itself. The view
//! therefore owns an `Arc` of the store together with a snapshot whose borrow is extended to
//! `'static`; field order drops the snapshot before the `Arc` (see `Pinned` for the full safety
//! argument). Every read of the view passes that snapshot in its `ReadOptions`.
//!
//! # Scans
//! Scans use a raw iterator bounded with `ReadOptions::set_iterate_lower_bound` /
//! `set_iterate_upper_bound`, never `prefix_iterator`: without a configured prefix extractor
//! (RockLake configures none) `prefix_iterator` does not stop at the end of the prefix, and a
//! prefix scan of `p/` would run on into `p0` and `q/`. RocksDB's lower bound is inclusive and its
//! upper bound exclusive; the other bound kinds are mapped through the key successor `k ++ [0x00]`,
//! the smallest key greater than `k` in byte order.
//!
//! # Blocking
//! RocksDB's API is synchronous FFI; it follows core's one policy ([`rocklake_core::blocking`]):
//! point reads, views, scans of at most [`INLINE_LIMIT`] pairs and batches of at most
//! [`INLINE_LIMIT`] writes (none of which syncs) run on the calling task; log syncs, larger scans
//! and batches, open and close run on the blocking pool.
//!
//! # Closing
//! [`KvBackend::close`] syncs the log, then drops the backend's handle; every later call on the
//! backend returns [`Error::Closed`]. Views hold their own handle: the store is released (and its
//! `LOCK` freed, so it can be opened again) once the backend is closed or dropped and every view
//! taken from it has been dropped.
#![warn(missing_docs, unreachable_pub)]

mod error;

use std::fmt;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use bytes::Bytes;
use rocklake_core::backend::{
    check_preconditions, lend, BatchOp, Capabilities, Durability, KeyRange, KvBackend, KvPair,
    Order, PageBuilder, ReadView, Visitor, WriteBatch,
};
use rocklake_core::blocking;
use rocklake_core::error::{Error, Result};
use rocklake_core::group_commit::GroupCommit;
use rocksdb::{DBCompressionType, Options, ReadOptions, SnapshotWithThreadMode, WriteOptions, DB};

use crate::error::ENGINE;

pub use rocklake_core::blocking::INLINE_LIMIT;

/// The open database and what must be shared with every task and view that uses it.
/// A handle on the open RocksDB database (see [`RocksBackend::raw_db`]); dereferences to `DB`.
pub struct RawDb(Arc<Store>);

impl std::ops::Deref for RawDb {
    type Target = DB;
    fn deref(&self) -> &DB {
        &self.0.db
    }
}

struct Store {
    db: DB,
    /// Held across precondition check and apply of every batch. The data it guards lives in
    /// RocksDB, so a poisoned lock (a panic mid-batch) is simply taken over: a RocksDB write
    /// batch either landed whole or not at all.
    write_lock: Mutex<()>,
}

impl Store {
    fn get(&self, key: &[u8], opts: &ReadOptions) -> Result<Option<Bytes>> {
        match self.db.get_pinned_opt(key, opts) {
            Ok(v) => Ok(v.map(|v| Bytes::copy_from_slice(&v))),
            Err(e) => Err(error::map(e, "reading a key", Some(key))),
        }
    }

    /// Read at most `limit` pairs of `range` in `order`, with `opts` (which may carry a
    /// snapshot).
    fn scan(
        &self,
        opts: ReadOptions,
        range: &KeyRange,
        order: Order,
        limit: usize,
    ) -> Result<Vec<KvPair>> {
        let mut out = PageBuilder::with_capacity(limit.min(1024));
        self.visit(opts, range, order, limit, &mut |k, v| {
            out.push(k, v);
            true
        })?;
        Ok(out.finish())
    }

    /// Lend at most `limit` pairs of `range` in `order` to `each` straight from the iterator,
    /// until it returns `false`; returns how many it lent.
    fn visit(
        &self,
        mut opts: ReadOptions,
        range: &KeyRange,
        order: Order,
        limit: usize,
        each: &mut Visitor<'_>,
    ) -> Result<usize> {
        if limit == 0 || range.is_empty() {
            return Ok(0);
        }
        // RocksDB: lower bound inclusive, upper bound exclusive. `successor(k)` is the smallest
        // key greater than `k`, so `> k` is `>= successor(k)` and `<= k` is `< successor(k)`.
        let (start, end) = range.as_slices();
        match start {
            Bound::Included(s) => opts.set_iterate_lower_bound(s),
            Bound::Excluded(s) => opts.set_iterate_lower_bound(successor(s)),
            Bound::Unbounded => {}
        }
        match end {
            Bound::Included(e) => opts.set_iterate_upper_bound(successor(e)),
            Bound::Excluded(e) => opts.set_iterate_upper_bound(e),
            Bound::Unbounded => {}
        }
        let mut it = self.db.raw_iterator_opt(opts);
        match order {
            Order::Ascending => it.seek_to_first(),
            // With an upper bound set, RocksDB positions on the last key below it.
            Order::Descending => it.seek_to_last(),
        }
        let mut n = 0;
        while let Some((k, v)) = it.item() {
            n += 1;
            if !each(k, v) || n >= limit {
                break;
            }
            match order {
                Order::Ascending => it.next(),
                Order::Descending => it.prev(),
            }
        }
        it.status()
            .map_err(|e| error::map(e, "scanning a key range", None))?;
        Ok(n)
    }

    /// Check the preconditions and apply the batch to the memtable and the (unsynced) log.
    /// Returns whether anything was written. Never syncs: a durable batch is synced afterwards,
    /// outside the write mutex, by a group-commit flush it shares with other durable batches.
    fn apply(&self, batch: WriteBatch) -> Result<bool> {
        // One handle per store (RocksDB's LOCK file refuses a second open, in this process or
        // another), and every write of this handle takes this mutex: no write can land between
        // the precondition reads below and the apply. It is held for microseconds (no fsync).
        let _guard = self.write_lock.lock().unwrap_or_else(|e| e.into_inner());
        let latest = ReadOptions::default();
        check_preconditions(&batch, |k| self.get(k, &latest))?;
        if batch.ops.is_empty() {
            return Ok(false);
        }
        let mut wb = rocksdb::WriteBatch::new();
        for op in &batch.ops {
            match op {
                BatchOp::Put(k, v) => wb.put(k, v),
                BatchOp::Delete(k) => wb.delete(k),
            }
        }
        let mut opts = WriteOptions::default();
        opts.set_sync(false);
        self.db
            .write_opt(wb, &opts)
            .map_err(|e| {
                error::map(
                    e,
                    format!("applying a batch of {} writes", batch.ops.len()),
                    None,
                )
            })
            .map(|()| true)
    }

    fn sync_wal(&self) -> Result<()> {
        self.db
            .flush_wal(true)
            .map_err(|e| error::map(e, "syncing the write-ahead log", None))
    }
}

/// `k ++ [0x00]`: the smallest key greater than `k` in byte order.
fn successor(k: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(k.len() + 1);
    s.extend_from_slice(k);
    s.push(0);
    s
}

/// A RockLake store in a RocksDB database on a local folder.
///
/// Open it with [`RocksBackend::open`]; use it through [`KvBackend`].
pub struct RocksBackend {
    path: PathBuf,
    /// `None` once closed.
    store: RwLock<Option<Arc<Store>>>,
    /// Durable batches that arrive together share one log sync.
    group: GroupCommit,
}

impl fmt::Debug for RocksBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksBackend")
            .field("path", &self.path)
            .field("open", &self.open_store().is_ok())
            .finish()
    }
}

impl RocksBackend {
    /// Open (creating if missing, with its parent folders) the RocksDB store at `path`, with lz4
    /// compression.
    ///
    /// Fails with [`Error::Locked`] when the store is already open, in this process or another.
    pub async fn open(path: impl AsRef<Path>) -> Result<Arc<RocksBackend>> {
        let path = path.as_ref().to_path_buf();
        let at = path.clone();
        let db = blocking::run(ENGINE, move || {
            std::fs::create_dir_all(&at)
                .map_err(|e| error::io(e, format!("creating the store folder {}", at.display())))?;
            let mut opts = Options::default();
            opts.create_if_missing(true);
            opts.set_compression_type(DBCompressionType::Lz4);
            DB::open(&opts, &at).map_err(|e| error::open_error(&at, e))
        })
        .await?;
        tracing::debug!(path = %path.display(), "opened rocksdb store");
        Ok(Arc::new(RocksBackend {
            path,
            store: RwLock::new(Some(Arc::new(Store {
                db,
                write_lock: Mutex::new(()),
            }))),
            group: GroupCommit::default(),
        }))
    }

    /// Where the store lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The RocksDB handle underneath, for benchmarks that compare against raw RocksDB calls;
    /// `None` once closed. Writing through it bypasses RockLake's preconditions.
    pub fn raw_db(&self) -> Option<RawDb> {
        self.open_store().ok().map(RawDb)
    }

    fn open_store(&self) -> Result<Arc<Store>> {
        // The lock only guards the `Option`; a panic while holding it cannot leave it half set.
        self.store
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(Error::Closed)
    }
}

#[async_trait]
impl ReadView for RocksBackend {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        // Inline: see the crate docs, "Blocking".
        self.open_store()?.get(key, &ReadOptions::default())
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        let store = self.open_store()?;
        if limit <= INLINE_LIMIT {
            return store.scan(ReadOptions::default(), range, order, limit);
        }
        let range = range.clone();
        blocking::run(ENGINE, move || {
            store.scan(ReadOptions::default(), &range, order, limit)
        })
        .await
    }

    async fn visit(
        &self,
        range: &KeyRange,
        order: Order,
        limit: usize,
        each: &mut Visitor<'_>,
    ) -> Result<usize> {
        if limit > INLINE_LIMIT {
            // Long: collected on the blocking pool, then lent from the page.
            let page = self.scan(range, order, limit).await?;
            return Ok(lend(&page, each));
        }
        self.open_store()?
            .visit(ReadOptions::default(), range, order, limit, each)
    }
}

#[async_trait]
impl KvBackend for RocksBackend {
    fn engine(&self) -> &'static str {
        ENGINE
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            persistent: true,
            exclusive_open: true,
            fences_on_open: false,
            point_in_time_views: true,
        }
    }

    async fn write(&self, batch: WriteBatch, durability: Durability) -> Result<()> {
        let store = self.open_store()?;
        batch.validate()?;
        let wrote = if blocking::is_inline(batch.ops.len()) {
            store.apply(batch)?
        } else {
            let store = Arc::clone(&store);
            blocking::run(ENGINE, move || store.apply(batch)).await?
        };
        if wrote && durability == Durability::Durable {
            // Applied and visible; durable once a log sync that began after it completes. The
            // sync uses the handle the batch landed in, so a close racing it cannot turn a
            // landed batch into an error.
            let seq = self.group.applied();
            self.group
                .wait_durable(seq, || blocking::run(ENGINE, move || store.sync_wal()))
                .await?;
        }
        Ok(())
    }

    async fn view(&self) -> Result<Arc<dyn ReadView>> {
        // Taking a snapshot is an in-memory operation: inline.
        let store = self.open_store()?;
        Ok(Arc::new(RocksView(Arc::new(Pinned::new(store)))))
    }

    async fn flush(&self) -> Result<()> {
        let store = self.open_store()?;
        blocking::run(ENGINE, move || store.sync_wal()).await
    }

    async fn close(&self) -> Result<()> {
        let taken = self.store.write().unwrap_or_else(|e| e.into_inner()).take();
        let Some(store) = taken else {
            return Ok(()); // closed before
        };
        let path = self.path.clone();
        blocking::run(ENGINE, move || {
            let synced = store.sync_wal();
            // Drop our handle here, off the runtime: when it is the last one (no view or
            // in-flight call holds another), this closes the DB and frees its LOCK.
            drop(store);
            tracing::debug!(path = %path.display(), "closed rocksdb store");
            synced
        })
        .await
    }
}

/// A RocksDB snapshot together with the store it belongs to.
///
/// # Safety
/// `snapshot` borrows `store.db` with a lifetime extended to `'static`. That is sound because:
/// - `store` is an `Arc`, so the `DB` sits at a fixed heap address for as long as this struct
///   holds its clone, however the struct itself moves;
/// - fields drop in declaration order, so `snapshot` (whose drop releases it through the `DB`)
///   drops before `store`, and with it possibly the `DB`;
/// - the `'static` snapshot is private and never leaves this struct: it is only lent out as
///   `&self.snapshot`, for the duration of a read.
struct Pinned {
    // Field order matters: `snapshot` must drop before `store`.
    snapshot: SnapshotWithThreadMode<'static, DB>,
    store: Arc<Store>,
}

impl Pinned {
    fn new(store: Arc<Store>) -> Pinned {
        // SAFETY: see the type's doc: the `DB` outlives the snapshot, which `Pinned` owns.
        let db: &'static DB = unsafe { &*(&store.db as *const DB) };
        Pinned {
            snapshot: db.snapshot(),
            store,
        }
    }

    fn read_options(&self) -> ReadOptions {
        let mut opts = ReadOptions::default();
        opts.set_snapshot(&self.snapshot);
        opts
    }
}

/// A point-in-time view of a [`RocksBackend`]: every read sees the snapshot taken when the view
/// was made. It keeps the store open until it is dropped, and keeps reading after the backend is
/// closed.
struct RocksView(Arc<Pinned>);

impl fmt::Debug for RocksView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksView")
            .field("sequence", &self.0.snapshot.sequence_number())
            .finish()
    }
}

#[async_trait]
impl ReadView for RocksView {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.0.store.get(key, &self.0.read_options())
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        if limit <= INLINE_LIMIT {
            return self
                .0
                .store
                .scan(self.0.read_options(), range, order, limit);
        }
        let pinned = Arc::clone(&self.0);
        let range = range.clone();
        blocking::run(ENGINE, move || {
            pinned
                .store
                .scan(pinned.read_options(), &range, order, limit)
        })
        .await
    }

    async fn visit(
        &self,
        range: &KeyRange,
        order: Order,
        limit: usize,
        each: &mut Visitor<'_>,
    ) -> Result<usize> {
        if limit > INLINE_LIMIT {
            let page = self.scan(range, order, limit).await?;
            return Ok(lend(&page, each));
        }
        self.0
            .store
            .visit(self.0.read_options(), range, order, limit, each)
    }
}
