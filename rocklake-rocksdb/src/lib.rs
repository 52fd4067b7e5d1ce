//! `rocklake-rocksdb`: RockLake's [`Engine`] on [RocksDB](https://rocksdb.org), served as a
//! [`KvBackend`] by core's [`EngineBackend`] ([`RocksBackend`], opened with [`open`]).
//!
//! # Why RocksDB
//! It is the fastest durable engine on a local disk that RockLake supports (see the README's
//! benchmark section and `docs/bench`). Pick it when the catalog lives on one machine's disk and
//! object storage is not a requirement.
//!
//! # Durability
//! [`Engine::apply`] writes a batch to the memtable and the write-ahead log without an fsync
//! (microseconds); [`Engine::sync`] is a log sync (`flush_wal(true)`, on the blocking pool).
//! Core's backend applies a durable batch and then waits, outside its write lock, for a sync
//! that began after it; durable batches that arrive together share one. A buffered batch
//! survives a crash of the process (the OS holds the bytes) but not of the machine, until the
//! next sync.
//!
//! # One writer
//! RocksDB's `LOCK` file admits one open handle per store: a second open, in this process or
//! another, gets [`Error::Locked`]. That is what lets core's check-and-apply (precondition reads
//! and the apply under one in-process lock) be atomic.
//!
//! # Views
//! [`Engine::snapshot`] takes a RocksDB snapshot (a pinned sequence number). The `rocksdb`
//! crate's snapshot borrows the `DB`, so it cannot live in a `'static`, `Send` view by itself.
//! The view therefore owns an `Arc` of the store together with a snapshot whose borrow is
//! extended to `'static`; field order drops the snapshot before the `Arc` (see `Pinned` for the
//! safety argument). Every read of the view passes that snapshot in its `ReadOptions`.
//!
//! # Scans
//! Scans use a raw iterator bounded with `ReadOptions::set_iterate_lower_bound` /
//! `set_iterate_upper_bound`, never `prefix_iterator`: without a configured prefix extractor
//! (RockLake configures none) `prefix_iterator` does not stop at the end of the prefix. The
//! lower bound is inclusive and the upper bound exclusive; the other bound kinds are mapped
//! through the key successor `k ++ [0x00]`, the smallest key greater than `k`.
//!
//! # Blocking
//! RocksDB's API is synchronous FFI; it follows core's one policy ([`rocklake_core::blocking`]):
//! point reads, snapshots, scans of at most [`INLINE_LIMIT`] pairs and batches of at most
//! [`INLINE_LIMIT`] writes run on the calling task; log syncs, larger scans and batches, open
//! and close run on the blocking pool.
//!
//! # Closing
//! Close syncs the log and drops the engine's handle. Views hold their own handle: the store is
//! released (and its `LOCK` freed) once the engine is closed or dropped and every view taken
//! from it has been dropped.
#![warn(missing_docs, unreachable_pub)]

mod error;

use std::fmt;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use bytes::Bytes;
use rocklake_core::backend::{
    lend, BatchOp, Capabilities, KeyRange, KvPair, Order, PageBuilder, ReadView, Visitor,
};
use rocklake_core::blocking;
use rocklake_core::error::{Error, Result};
#[cfg(doc)]
use rocklake_core::KvBackend;
use rocklake_core::{Engine, EngineBackend, EngineStat, StatValue};
use rocksdb::{DBCompressionType, Options, ReadOptions, SnapshotWithThreadMode, WriteOptions, DB};

use crate::error::ENGINE;

pub use rocklake_core::blocking::INLINE_LIMIT;

/// A handle on the open RocksDB database (see [`RocksEngine::raw_db`]); dereferences to `DB`.
pub struct RawDb(Arc<Store>);

impl std::ops::Deref for RawDb {
    type Target = DB;
    fn deref(&self) -> &DB {
        &self.0.db
    }
}

/// The open database, shared by the engine, its views and calls on blocking threads.
struct Store {
    db: DB,
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

    /// Apply `ops` to the memtable and the (unsynced) log, atomically.
    fn apply(&self, ops: &[BatchOp]) -> Result<()> {
        let mut wb = rocksdb::WriteBatch::new();
        for op in ops {
            match op {
                BatchOp::Put(k, v) => wb.put(k, v),
                BatchOp::Delete(k) => wb.delete(k),
            }
        }
        let mut opts = WriteOptions::default();
        opts.set_sync(false);
        self.db
            .write_opt(wb, &opts)
            .map_err(|e| error::map(e, format!("applying a batch of {} writes", ops.len()), None))
    }

    /// Write the memtables out and compact every level over the whole key space.
    fn compact_all(&self) -> Result<()> {
        self.db
            .flush()
            .map_err(|e| error::map(e, "flushing the memtables", None))?;
        self.db.compact_range::<&[u8], &[u8]>(None, None);
        Ok(())
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

/// A RockLake store on RocksDB: [`RocksEngine`] behind core's [`EngineBackend`].
pub type RocksBackend = EngineBackend<RocksEngine>;

/// Open (creating if missing, with its parent folders) the RocksDB store at `path`.
///
/// Fails with [`Error::Locked`] when the store is already open, in this process or another.
pub async fn open(path: impl AsRef<Path>) -> Result<Arc<RocksBackend>> {
    Ok(Arc::new(EngineBackend::new(RocksEngine::open(path).await?)))
}

/// The RocksDB engine: one open database on a local folder.
pub struct RocksEngine {
    path: PathBuf,
    /// `None` once closed.
    store: RwLock<Option<Arc<Store>>>,
    /// With statistics on (see [`RocksEngine::open_counting_syncs`]): RocksDB's own counters.
    options: Option<Options>,
    /// Test-only: `sync` does nothing (see [`RocksEngine::skip_syncs_for_tests`]).
    skip_sync: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for RocksEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksEngine")
            .field("path", &self.path)
            .field("open", &self.open_store().is_ok())
            .finish()
    }
}

impl RocksEngine {
    /// Open (creating if missing, with its parent folders) the database at `path`, with lz4
    /// compression.
    pub async fn open(path: impl AsRef<Path>) -> Result<RocksEngine> {
        RocksEngine::open_with(path.as_ref(), false, false).await
    }

    /// [`RocksEngine::open`] with RocksDB's statistics on, so that [`RocksEngine::wal_syncs`]
    /// reports the engine's own count of WAL syncs (for tests and diagnostics; statistics cost
    /// a little on every call).
    pub async fn open_counting_syncs(path: impl AsRef<Path>) -> Result<RocksEngine> {
        RocksEngine::open_with(path.as_ref(), true, false).await
    }

    /// Test-only: [`RocksEngine::open_counting_syncs`] with 64 KiB memtables and small levels,
    /// so that a test's few hundred KiB go through RocksDB's flushes and compactions (see
    /// [`RocksEngine::flush_and_compaction_bytes`]). Never use it on a real store.
    #[doc(hidden)]
    pub async fn open_with_small_memtables_for_tests(
        path: impl AsRef<Path>,
    ) -> Result<RocksEngine> {
        RocksEngine::open_with(path.as_ref(), true, true).await
    }

    async fn open_with(path: &Path, statistics: bool, small: bool) -> Result<RocksEngine> {
        let path = path.to_path_buf();
        let at = path.clone();
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(DBCompressionType::Lz4);
        if statistics {
            opts.enable_statistics();
        }
        if small {
            opts.set_write_buffer_size(64 << 10);
            opts.set_level_zero_file_num_compaction_trigger(2);
            opts.set_target_file_size_base(64 << 10);
            opts.set_max_bytes_for_level_base(256 << 10);
        }
        let open_opts = opts.clone();
        let db = blocking::run(ENGINE, move || {
            std::fs::create_dir_all(&at)
                .map_err(|e| error::io(e, format!("creating the store folder {}", at.display())))?;
            DB::open(&open_opts, &at).map_err(|e| error::open_error(&at, e))
        })
        .await?;
        tracing::debug!(path = %path.display(), "opened rocksdb store");
        Ok(RocksEngine {
            path,
            store: RwLock::new(Some(Arc::new(Store { db }))),
            options: statistics.then_some(opts),
            skip_sync: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// RocksDB's count of WAL syncs (its `rocksdb.wal.synced` ticker) since open; `None` unless
    /// opened with [`RocksEngine::open_counting_syncs`].
    pub fn wal_syncs(&self) -> Option<u64> {
        self.options
            .as_ref()
            .map(|o| o.get_ticker_count(rocksdb::statistics::Ticker::WalFileSynced))
    }

    /// Bytes RocksDB wrote in memtable flushes and in compactions since open (its
    /// `rocksdb.flush.write.bytes` and `rocksdb.compact.write.bytes` tickers); `None` without
    /// statistics.
    pub fn flush_and_compaction_bytes(&self) -> Option<(u64, u64)> {
        use rocksdb::statistics::Ticker;
        self.options.as_ref().map(|o| {
            (
                o.get_ticker_count(Ticker::FlushWriteBytes),
                o.get_ticker_count(Ticker::CompactWriteBytes),
            )
        })
    }

    /// Test-only: make [`Engine::sync`] do nothing, to show that the sync-evidence test
    /// catches a durable commit that skips the sync. Never use it on a real store.
    #[doc(hidden)]
    pub fn skip_syncs_for_tests(&self, skip: bool) {
        self.skip_sync
            .store(skip, std::sync::atomic::Ordering::SeqCst);
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
impl ReadView for RocksEngine {
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

/// The RocksDB properties `stats` reports: name, whether it only grows, what it is.
const PROPERTIES: &[(&str, bool, &str)] = &[
    (
        "rocksdb.estimate-num-keys",
        false,
        "Estimated number of keys (memtables and SST files)",
    ),
    (
        "rocksdb.total-sst-files-size",
        false,
        "Bytes of all SST files, live and obsolete",
    ),
    (
        "rocksdb.live-sst-files-size",
        false,
        "Bytes of the SST files of the current version",
    ),
    ("rocksdb.num-files-at-level0", false, "SST files at level 0"),
    (
        "rocksdb.cur-size-all-mem-tables",
        false,
        "Bytes of the active and unflushed memtables",
    ),
    (
        "rocksdb.num-immutable-mem-table",
        false,
        "Immutable memtables not yet flushed",
    ),
    (
        "rocksdb.mem-table-flush-pending",
        false,
        "1 when a memtable flush is pending",
    ),
    (
        "rocksdb.compaction-pending",
        false,
        "1 when at least one compaction is pending",
    ),
    (
        "rocksdb.num-running-compactions",
        false,
        "Compactions running now",
    ),
    (
        "rocksdb.num-running-flushes",
        false,
        "Memtable flushes running now",
    ),
    (
        "rocksdb.estimate-pending-compaction-bytes",
        false,
        "Estimated bytes compaction must rewrite to settle the levels",
    ),
    (
        "rocksdb.num-live-versions",
        false,
        "Live versions (more means old iterators or snapshots hold files)",
    ),
    (
        "rocksdb.num-snapshots",
        false,
        "Unreleased snapshots (RockLake's open read views)",
    ),
    (
        "rocksdb.block-cache-usage",
        false,
        "Bytes in the block cache",
    ),
    (
        "rocksdb.estimate-table-readers-mem",
        false,
        "Bytes of memory for reading SST files (indexes, filters) outside the block cache",
    ),
    (
        "rocksdb.background-errors",
        true,
        "Background errors (a failed flush or compaction)",
    ),
];

#[async_trait]
impl Engine for RocksEngine {
    fn name(&self) -> &'static str {
        ENGINE
    }

    fn stats(&self) -> Vec<EngineStat> {
        let Ok(store) = self.open_store() else {
            return Vec::new();
        };
        PROPERTIES
            .iter()
            .filter_map(|(name, counter, help)| {
                let v = store.db.property_int_value(*name).ok().flatten()?;
                Some(EngineStat {
                    name: (*name).to_string(),
                    labels: Vec::new(),
                    help: (*help).to_string(),
                    value: if *counter {
                        StatValue::Counter(v)
                    } else {
                        StatValue::Gauge(v as f64)
                    },
                })
            })
            .collect()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            persistent: true,
            exclusive_open: true,
            fences_on_open: false,
            point_in_time_views: true,
        }
    }

    async fn apply(&self, ops: Vec<BatchOp>) -> Result<()> {
        let store = self.open_store()?;
        if blocking::is_inline(ops.len()) {
            return store.apply(&ops);
        }
        blocking::run(ENGINE, move || store.apply(&ops)).await
    }

    async fn compact(&self) -> Result<bool> {
        let store = self.open_store()?;
        blocking::run(ENGINE, move || store.compact_all()).await?;
        Ok(true)
    }

    async fn sync(&self) -> Result<()> {
        let store = self.open_store()?;
        if self.skip_sync.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        blocking::run(ENGINE, move || store.sync_wal()).await
    }

    async fn snapshot(&self) -> Result<Option<Arc<dyn ReadView>>> {
        // Taking a snapshot is an in-memory operation: inline.
        let store = self.open_store()?;
        Ok(Some(Arc::new(RocksView(Arc::new(Pinned::new(store))))))
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

/// A point-in-time view of a [`RocksEngine`]: every read sees the snapshot taken when the view
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
