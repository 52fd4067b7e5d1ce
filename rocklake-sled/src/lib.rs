//! `rocklake-sled`: RockLake's [`Engine`] on [sled](https://docs.rs/sled/0.34.7) 0.34.7, served
//! as a [`KvBackend`] by core's [`EngineBackend`] ([`SledBackend`], opened with [`open`]).
//!
//! # Why sled
//! sled is pure Rust: it builds in seconds with no C++ toolchain (RocksDB's build takes over ten
//! minutes and needs libclang), and it has what an engine needs: ordered keys compared as bytes,
//! forward and reverse range scans, and atomic batches (`Batch` + `apply_batch`). sled 1.0 is an
//! unfinished rewrite; this crate stays on 0.34.7.
//!
//! # Durability
//! sled writes into memory and flushes its log every 500 ms on a background thread. Its own
//! barrier, `Db::flush`, writes the log and waits with `sync_file_range(2)` on Linux, which
//! neither flushes the disk's write cache nor the file's size: what it wrote can be lost to a
//! power cut (the conformance suite's `power_cut` check lost acknowledged commits so). So
//! [`Engine::sync`] here is `Db::flush` followed by `fdatasync` of sled's log file (`db` in the
//! store's folder). Durable batches that arrive together share one such sync (core's group
//! commit).
//!
//! sled treats I/O errors as fatal, and a failed flush cannot take back a batch that readers may
//! already have seen. So when a flush fails, the write that asked for it returns the error and
//! this handle refuses every later call ([`Error::Engine`]): close it and open the store again,
//! which recovers whatever reached the disk.
//!
//! # Exclusive open
//! sled holds an exclusive lock on its `db` file while the store is open, so a second open of
//! the same path, from this process or another, fails with [`Error::Locked`]; one writer per
//! store is what makes core's check-and-apply atomic. The lock is released by
//! [`KvBackend::close`], even while handles and views are still alive (they answer
//! [`Error::Closed`] from then on), or when the last handle and view are dropped. Either way the
//! release waits until sled's background threads have let go of the lock file, so the store can
//! be opened again at once. Dropping without closing does sled's shutdown flush and that wait
//! on the dropping thread; close first to keep them off the async runtime.
//!
//! # Views
//! sled has no snapshots: [`Engine::snapshot`] answers `None`, and the backend's views are the
//! live tree patched by core's undo overlay ([`rocklake_core::overlay`]).
//!
//! # Blocking
//! sled's API is synchronous; it follows core's one policy ([`rocklake_core::blocking`]):
//! point reads, scans of at most [`INLINE_LIMIT`] pairs and batches of at most [`INLINE_LIMIT`]
//! writes run on the calling task; flushes, larger scans and batches, open and close run on the
//! blocking pool.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod error;

use std::fmt;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use fs2::FileExt;
use rocklake_core::backend::{lend, BatchOp, KvPair, PageBuilder, Visitor};
use rocklake_core::blocking;
#[cfg(doc)]
use rocklake_core::KvBackend;
use rocklake_core::{
    Capabilities, Engine, EngineBackend, EngineStat, Error, KeyRange, Order, ReadView, Result,
    StatValue,
};

pub use rocklake_core::blocking::INLINE_LIMIT;

/// How long releasing the store waits for sled's background threads to let go of its lock file.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// A RockLake store on sled: [`SledEngine`] behind core's [`EngineBackend`].
pub type SledBackend = EngineBackend<SledEngine>;

/// Open (creating if needed) the sled store in the folder `path`.
///
/// Fails with [`Error::Locked`] while another handle, in this process or another, has the same
/// store open.
pub async fn open(path: impl AsRef<Path>) -> Result<Arc<SledBackend>> {
    Ok(Arc::new(EngineBackend::new(SledEngine::open(path).await?)))
}

/// The sled engine: one open sled database.
pub struct SledEngine {
    path: PathBuf,
    /// `None` once closed: `close` takes it out so that the lock file is released even while
    /// views or handles are still alive.
    db: RwLock<Option<sled::Db>>,
    /// sled's log file (`db`), synced after each `Db::flush` (see the crate docs).
    log: Arc<std::fs::File>,
    /// Set when a flush failed: every later call is refused (see the crate docs).
    failed: AtomicBool,
    /// Bytes sled said its completed flushes wrote ([`SledEngine::flushed_bytes`]).
    flushed_bytes: std::sync::atomic::AtomicU64,
    /// Test-only: `sync` does nothing (see [`SledEngine::skip_syncs_for_tests`]).
    skip_sync: AtomicBool,
}

impl fmt::Debug for SledEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SledEngine")
            .field("path", &self.path)
            .field("open", &self.db().is_ok())
            .field("failed", &self.failed.load(AtomicOrdering::Relaxed))
            .finish()
    }
}

/// Remove the snapshot files sled began and never finished (`snap.<lsn>.generating`) from the
/// store's folder.
///
/// sled 0.34.7 writes a snapshot as `snap.<lsn>.generating`, syncs it and renames it to
/// `snap.<lsn>`; but when it opens a store it reads the snapshot file whose name sorts last,
/// and `.generating` sorts after the finished name. So a crash or power cut between the
/// creation and the rename (found by the conformance suite's `power_cut` check: an image cut
/// there, with the file empty, was refused as corrupt at every open) left a store sled would
/// no longer open. The unfinished file holds nothing the log does not: sled renames a
/// snapshot before it deletes the one before, and rebuilds what it needs from the log.
fn remove_unfinished_snapshots(folder: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(folder) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(Error::engine(
                error::ENGINE,
                format!("listing the store's folder {}", folder.display()),
                e,
            ))
        }
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            let path = entry.path();
            tracing::warn!(path = %path.display(),
                "removing a snapshot sled began and never finished (left by a crash)");
            std::fs::remove_file(&path).map_err(|e| {
                Error::engine(
                    error::ENGINE,
                    format!("removing the unfinished sled snapshot {}", path.display()),
                    e,
                )
            })?;
        }
    }
    Ok(())
}

impl SledEngine {
    /// Open (creating if needed) the sled database in the folder `path`.
    pub async fn open(path: impl AsRef<Path>) -> Result<SledEngine> {
        let path = path.as_ref().to_path_buf();
        let at = path.clone();
        let (db, log) = blocking::run(error::ENGINE, move || {
            remove_unfinished_snapshots(&at)?;
            let db = sled::Config::new()
                .path(&at)
                .open()
                .map_err(|e| error::open_error(e, &at))?;
            let log_path = at.join("db");
            let log = std::fs::File::open(&log_path).map_err(|e| {
                Error::engine(
                    error::ENGINE,
                    format!("opening sled's log {} to sync it", log_path.display()),
                    e,
                )
            })?;
            Ok((db, log))
        })
        .await?;
        tracing::debug!(path = %path.display(), recovered = db.was_recovered(), "opened sled store");
        Ok(SledEngine {
            path,
            db: RwLock::new(Some(db)),
            log: Arc::new(log),
            failed: AtomicBool::new(false),
            flushed_bytes: std::sync::atomic::AtomicU64::new(0),
            skip_sync: AtomicBool::new(false),
        })
    }

    /// The folder the store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sled handle underneath, for benchmarks that compare against raw sled calls; `None`
    /// once closed. Writing through it bypasses RockLake's preconditions and views.
    pub fn raw_db(&self) -> Option<sled::Db> {
        self.db().ok()
    }

    /// How many bytes sled reported writing and syncing in this handle's flushes (sled's own
    /// figure: `Db::flush` returns it).
    pub fn flushed_bytes(&self) -> u64 {
        self.flushed_bytes.load(AtomicOrdering::Acquire)
    }

    /// Test-only: make [`Engine::sync`] do nothing, to show that the sync-evidence test
    /// catches a durable commit that skips the sync. Never use it on a real store.
    #[doc(hidden)]
    pub fn skip_syncs_for_tests(&self, skip: bool) {
        self.skip_sync.store(skip, AtomicOrdering::SeqCst);
    }

    /// A handle on the open database (sled's `Db` is reference counted), or why there is none.
    fn db(&self) -> Result<sled::Db> {
        if self.failed.load(AtomicOrdering::Acquire) {
            return Err(error::failed_earlier());
        }
        let guard = self.db.read().unwrap_or_else(|e| e.into_inner());
        guard.clone().ok_or(Error::Closed)
    }
}

impl Drop for SledEngine {
    fn drop(&mut self) {
        // Not closed: release here, so the store can be opened again once the last handle is
        // gone. This blocks the dropping thread for sled's shutdown flush.
        if let Some(db) = self.db.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            release(&self.path, db);
        }
    }
}

/// Drop `db` and wait until sled has let go of the store's lock file.
///
/// Dropping the last `Db` flushes and joins sled's flusher thread, but work sled handed to its
/// own thread pool may still hold the open file (and with it the lock) for a moment; so may our
/// calls still running on blocking threads. A reopen right after close would then fail with
/// [`Error::Locked`]. So this probes the lock (the same `flock` sled takes) until it is free,
/// for at most [`RELEASE_WAIT`].
fn release(path: &Path, db: sled::Db) {
    drop(db);
    let file = path.join("db");
    let deadline = Instant::now() + RELEASE_WAIT;
    let mut pause = Duration::from_micros(100);
    loop {
        let Ok(probe) = OpenOptions::new().read(true).open(&file) else {
            return; // no lock file, nothing to wait for
        };
        if probe.try_lock_exclusive().is_ok() {
            return; // closing `probe` drops our lock again
        }
        if Instant::now() >= deadline {
            tracing::warn!(path = %path.display(), waited = ?RELEASE_WAIT,
                "sled still holds the store's lock file after close; a reopen may be refused");
            return;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Lend at most `limit` pairs of `range` in `order` straight from sled's iterator (its buffers
/// are reference counted: no copy) to `each`, until it returns `false`; returns how many.
fn lend_tree(
    db: &sled::Db,
    range: &KeyRange,
    order: Order,
    limit: usize,
    each: &mut Visitor<'_>,
) -> Result<usize> {
    let iter = db.range::<&[u8], _>(range.as_slices());
    let iter: Box<dyn Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>> = match order {
        Order::Ascending => Box::new(iter),
        Order::Descending => Box::new(iter.rev()),
    };
    let mut n = 0;
    for item in iter.take(limit) {
        let (k, v) = item.map_err(|e| error::map(e, "scanning a range", None))?;
        n += 1;
        if !each(&k, &v) {
            break;
        }
    }
    Ok(n)
}

fn scan_tree(db: &sled::Db, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
    let mut page = PageBuilder::with_capacity(limit.min(1024));
    lend_tree(db, range, order, limit, &mut |k, v| {
        page.push(k, v);
        true
    })?;
    Ok(page.finish())
}

#[async_trait]
impl ReadView for SledEngine {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        // Inline: see the crate docs, "Blocking".
        let found = self.db()?.get(key);
        found
            .map(|v| v.map(|v| Bytes::copy_from_slice(&v)))
            .map_err(|e| error::map(e, "reading a key", Some(key)))
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        let db = self.db()?;
        if range.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        if limit <= INLINE_LIMIT {
            return scan_tree(&db, range, order, limit);
        }
        let range = range.clone();
        blocking::run(error::ENGINE, move || scan_tree(&db, &range, order, limit)).await
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
        let db = self.db()?;
        if range.is_empty() || limit == 0 {
            return Ok(0);
        }
        lend_tree(&db, range, order, limit, each)
    }
}

#[async_trait]
impl Engine for SledEngine {
    fn name(&self) -> &'static str {
        error::ENGINE
    }

    /// sled keeps few figures: the size of its files, whether the open recovered from a
    /// crash, and the bytes each flush reported writing.
    fn stats(&self) -> Vec<EngineStat> {
        let Ok(db) = self.db() else {
            return Vec::new();
        };
        let stat = |name: &str, help: &str, value| EngineStat {
            name: name.to_string(),
            labels: Vec::new(),
            help: help.to_string(),
            value,
        };
        let mut out = vec![
            stat(
                "sled.was_recovered",
                "1 when the open recovered the store from files a previous process left",
                StatValue::Gauge(if db.was_recovered() { 1.0 } else { 0.0 }),
            ),
            stat(
                "sled.flushed_bytes",
                "Bytes sled's completed flushes reported writing",
                StatValue::Counter(self.flushed_bytes()),
            ),
        ];
        if let Ok(size) = db.size_on_disk() {
            out.push(stat(
                "sled.size_on_disk_bytes",
                "Bytes of sled's files on disk",
                StatValue::Gauge(size as f64),
            ));
        }
        out
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            persistent: true,
            exclusive_open: true,
            fences_on_open: false,
            point_in_time_views: false,
        }
    }

    async fn apply(&self, ops: Vec<BatchOp>) -> Result<()> {
        let db = self.db()?;
        let n = ops.len();
        let apply = move || {
            let mut batch = sled::Batch::default();
            for op in ops {
                match op {
                    BatchOp::Put(k, v) => batch.insert(k.as_ref(), v.as_ref()),
                    BatchOp::Delete(k) => batch.remove(k.as_ref()),
                }
            }
            db.apply_batch(batch)
                .map_err(|e| error::map(e, &format!("applying a batch of {n} writes"), None))
        };
        if blocking::is_inline(n) {
            return apply();
        }
        blocking::run(error::ENGINE, apply).await
    }

    async fn sync(&self) -> Result<()> {
        let db = self.db()?;
        if self.skip_sync.load(AtomicOrdering::SeqCst) {
            return Ok(());
        }
        let log = self.log.clone();
        let flushed = blocking::run(error::ENGINE, move || {
            Ok(db.flush().and_then(|bytes| {
                log.sync_data()?;
                Ok(bytes)
            }))
        })
        .await?;
        if let Ok(bytes) = flushed {
            self.flushed_bytes
                .fetch_add(bytes as u64, AtomicOrdering::AcqRel);
        }
        if let Err(e) = flushed {
            self.failed.store(true, AtomicOrdering::Release);
            tracing::error!(path = %self.path.display(), error = %e,
                "sled flush failed; this handle refuses further calls");
            return Err(error::map(e, "flushing to disk", None));
        }
        Ok(())
    }

    async fn snapshot(&self) -> Result<Option<Arc<dyn ReadView>>> {
        self.db()?;
        Ok(None)
    }

    async fn close(&self) -> Result<()> {
        let failed = self.failed.load(AtomicOrdering::Acquire);
        let Some(db) = self.db.write().unwrap_or_else(|e| e.into_inner()).take() else {
            return Ok(()); // closed before
        };
        let path = self.path.clone();
        let log = self.log.clone();
        blocking::run(error::ENGINE, move || {
            let flushed = if failed {
                Err(error::failed_earlier())
            } else {
                db.flush()
                    .and_then(|_| Ok(log.sync_data()?))
                    .map_err(|e| error::map(e, "flushing to disk on close", None))
            };
            release(&path, db);
            tracing::debug!(path = %path.display(), "closed sled store");
            flushed
        })
        .await
    }
}
