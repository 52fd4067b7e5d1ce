//! `rocklake-sled`: RockLake's [`KvBackend`] on [sled](https://docs.rs/sled/0.34.7) 0.34.7.
//!
//! # Why sled
//! sled is pure Rust: it builds in seconds with no C++ toolchain (RocksDB's build takes over ten
//! minutes and needs libclang), and it offers what the trait asks of an engine — ordered keys
//! compared as bytes, forward and reverse range scans, and atomic batches (`Batch` +
//! `apply_batch`). sled 1.0 is an unfinished rewrite; this crate stays on 0.34.7.
//!
//! # Durability
//! sled writes into memory and flushes its log every 500 ms on a background thread;
//! [`sled::Tree::flush`] (on the `Db`) (write and fsync) is the durability barrier. A
//! [`Durability::Durable`] write therefore applies its batch and then waits for a flush that
//! began after the apply; concurrent durable writers share one flush (core's group commit); see the
//! README's benchmark table for what that costs. A [`Durability::Buffered`] write returns after
//! the apply and becomes durable with the next flush, durable write or [`KvBackend::close`].
//!
//! sled treats I/O errors as fatal, and a failed flush cannot take back a batch that other
//! readers may already have seen. So when a flush fails, the write that asked for it returns the
//! error and this handle refuses every later call ([`Error::Engine`]): close it and open the
//! store again, which recovers whatever reached the disk.
//!
//! # Exclusive open
//! sled holds an exclusive lock on its `db` file for as long as the store is open, so a second
//! open of the same path, from this process or another, fails with [`Error::Locked`]. The lock is
//! released by [`KvBackend::close`], even while handles and views are still alive (they answer
//! [`Error::Closed`] from then on), or when the last handle and view are dropped. Either way the
//! release waits until sled's own background threads have let go of the lock file, so the store
//! can be opened again right away. Dropping without closing does sled's shutdown flush and that
//! wait on the dropping thread; close first to keep them off the async runtime.
//!
//! # Point-in-time views on an engine without snapshots
//! sled has no snapshots, but [`KvBackend::view`] must be point-in-time. The backend builds one
//! with a copy-on-write *undo overlay*:
//!
//! - The backend keeps a registry of open views. Creating a view and every write take the
//!   backend's write mutex, so each write is either entirely before a view (the view sees it in
//!   the tree) or entirely after it.
//! - A write applied while views are open first reads the current value (or absence) of every key
//!   its batch touches, and records it in each open view's overlay that has no entry for the key
//!   yet. The first write after the view wins, so an overlay entry is the key's value at the time
//!   the view was taken.
//! - A view's `get` reads the tree and then its overlay; an overlay entry wins. A view's `scan`
//!   reads a stretch of the tree's range and then merges the overlay's entries for the same
//!   stretch: an overlay value replaces the tree's, an overlay *absent* hides a key written since,
//!   and an overlay value for a key the tree no longer holds brings it back — in order, up to the
//!   limit. Reading the tree before the overlay is what makes this safe without locking out
//!   writers: a write records into the overlay before it touches the tree, so a tree value newer
//!   than the view always finds its overlay entry.
//! - Dropping a view drops its overlay; the registry holds only weak references and prunes them.
//!
//! The cost: while any view is open, each write reads the old value of every key it touches
//! (under the write mutex), and each view holds in memory the old value of every key written
//! during its life. Short-lived views — which is how RockLake's transactions and readers use
//! them — keep both small. With no view open, writes pay nothing.
//!
//! # Blocking
//! sled's API is synchronous. Calls that finish in microseconds when the data is cached run on
//! the calling task: point reads, view registration, scans of at most [`INLINE_LIMIT`] pairs and
//! buffered batches of at most [`INLINE_LIMIT`] writes. A hop to tokio's blocking pool costs about
//! 15 µs here, more than a cached sled read, so doing those inline keeps RockLake's overhead over
//! a raw sled call small. Durable writes (a flush), larger scans and batches, open and close run
//! under [`tokio::task::spawn_blocking`]. An inline read of a page sled has not cached waits for
//! the disk on the calling thread; a catalog's working set is small and normally cached.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod error;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::OpenOptions;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use fs2::FileExt;
use rocklake_core::backend::{check_preconditions, lend, BatchOp, KvPair, PageBuilder, Visitor};
use rocklake_core::blocking;
use rocklake_core::group_commit::GroupCommit;
use rocklake_core::{
    Capabilities, Durability, Error, KeyRange, KvBackend, Order, ReadView, Result, WriteBatch,
};

/// The undo overlay of one view: key -> its value when the view was taken (`None`: absent).
type Overlay = BTreeMap<Bytes, Option<Bytes>>;

/// A boxed sled iterator, forward or reversed.
type TreeIter = Box<dyn Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>> + Send>;

/// How long releasing the store waits for sled's background threads to let go of its lock file.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// A RockLake store in a sled database on a local folder.
///
/// Cheap to share: [`SledBackend::open`] returns it in an `Arc`, and views keep what they need
/// alive on their own.
pub struct SledBackend {
    inner: Arc<Inner>,
}

/// The state shared by the backend and its views (views outlive `&SledBackend` borrows and run
/// their reads on blocking threads, so they hold an `Arc` of this).
struct Inner {
    /// Where the store lives (for errors and `Debug`).
    path: PathBuf,
    /// The database; taken out by `close`, so that the lock file is released even while views
    /// or handles are still alive.
    db: RwLock<Option<sled::Db>>,
    /// Set by `close`.
    closed: AtomicBool,
    /// Set when a flush failed: every later call is refused (see the crate docs).
    failed: AtomicBool,
    /// The write mutex: serialises precondition checks with applies, view registration and
    /// close. sled's lock file guarantees that only this process has the store open, so an
    /// in-process mutex is enough to make check-and-apply atomic.
    writer: Mutex<Writer>,
    /// Durable batches that arrive together share one flush (core's group commit).
    group: GroupCommit,
}

/// What the write mutex guards.
#[derive(Default)]
struct Writer {
    /// Open views, weakly; dead entries are pruned by writes and new views.
    views: Vec<Weak<ViewState>>,
}

/// One view's undo overlay.
#[derive(Default)]
struct ViewState {
    overlay: Mutex<Overlay>,
    /// Set (before the tree changes) by the first write recorded in the overlay: until then
    /// the live tree is exactly the view, and `visit` lends from it without copying.
    dirty: AtomicBool,
}

/// A point-in-time read view of a [`SledBackend`]: the live tree patched by an undo overlay.
struct SledView {
    inner: Arc<Inner>,
    state: Arc<ViewState>,
}

/// Lock a mutex, ignoring poison: every structure guarded here stays whole if a holder panics
/// (see [`Inner::write_blocking`]).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Lend the pairs of `range` in `order` straight from sled's iterator (its buffers are
/// reference counted: no copy) to `each`, at most `limit`, until `each` returns `false` or
/// `interrupted()` is true after a pair was read (that pair is then not lent). Returns how many
/// were lent, the last key lent, and whether the walk ended without an interruption.
fn lend_tree(
    db: &sled::Db,
    range: &KeyRange,
    order: Order,
    limit: usize,
    each: &mut Visitor<'_>,
    interrupted: impl Fn() -> bool,
) -> Result<(usize, Option<sled::IVec>, bool)> {
    let mut n = 0;
    let mut last = None;
    for item in tree_iter(db, range, order).take(limit) {
        let (k, v) = item.map_err(|e| error::map(e, "scanning a range", None))?;
        if interrupted() {
            return Ok((n, last, false));
        }
        n += 1;
        if !each(&k, &v) {
            break;
        }
        last = Some(k);
    }
    Ok((n, last, true))
}

pub use rocklake_core::blocking::INLINE_LIMIT;

fn to_bytes(v: sled::IVec) -> Bytes {
    Bytes::copy_from_slice(&v)
}

/// The tree's part of `range`, in `order`.
fn tree_iter(db: &sled::Db, range: &KeyRange, order: Order) -> TreeIter {
    let iter = db.range::<&[u8], _>(range.as_slices());
    match order {
        Order::Ascending => Box::new(iter),
        Order::Descending => Box::new(iter.rev()),
    }
}

impl SledBackend {
    /// Open (creating if needed) the sled store in the folder `path`.
    ///
    /// Fails with [`Error::Locked`] while another handle — in this process or another — has the
    /// same store open.
    pub async fn open(path: impl AsRef<Path>) -> Result<Arc<SledBackend>> {
        let path = path.as_ref().to_path_buf();
        let at = path.clone();
        let db = blocking::run(error::ENGINE, move || {
            sled::Config::new()
                .path(&at)
                .open()
                .map_err(|e| error::open_error(e, &at))
        })
        .await?;
        tracing::debug!(path = %path.display(), recovered = db.was_recovered(), "opened sled store");
        Ok(Arc::new(SledBackend {
            inner: Arc::new(Inner {
                path,
                db: RwLock::new(Some(db)),
                closed: AtomicBool::new(false),
                failed: AtomicBool::new(false),
                writer: Mutex::new(Writer::default()),
                group: GroupCommit::default(),
            }),
        }))
    }

    /// The folder the store lives in.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The sled handle underneath, for benchmarks that compare against raw sled calls; `None`
    /// once closed. Writing through it bypasses RockLake's preconditions and views.
    pub fn raw_db(&self) -> Option<sled::Db> {
        self.inner.db().ok()
    }
}

impl Inner {
    /// The database, or why there is none to use.
    /// Run `f` on the open database without taking a handle of our own (a `Db` clone costs
    /// more than a cached read). `f` must not call back into `db`/`with_db`.
    fn with_db<T>(&self, f: impl FnOnce(&sled::Db) -> Result<T>) -> Result<T> {
        if self.failed.load(AtomicOrdering::Acquire) {
            return Err(error::failed_earlier());
        }
        if self.closed.load(AtomicOrdering::Acquire) {
            return Err(Error::Closed);
        }
        let guard = self.db.read().unwrap_or_else(|e| e.into_inner());
        f(guard.as_ref().ok_or(Error::Closed)?)
    }

    fn db(&self) -> Result<sled::Db> {
        if self.failed.load(AtomicOrdering::Acquire) {
            return Err(error::failed_earlier());
        }
        if self.closed.load(AtomicOrdering::Acquire) {
            return Err(Error::Closed);
        }
        let guard = self.db.read().unwrap_or_else(|e| e.into_inner());
        guard.clone().ok_or(Error::Closed)
    }

    /// Check, record for open views, and apply one batch; returns the database it landed in
    /// (`None` when there was nothing to apply). Blocks (briefly: no flush).
    fn write_blocking(&self, batch: &WriteBatch) -> Result<Option<sled::Db>> {
        let mut writer = lock(&self.writer);
        // Checked again under the mutex: `close` takes it too, so no batch lands after close.
        let db = self.db()?;
        check_preconditions(batch, |k| {
            db.get(k)
                .map(|v| v.map(to_bytes))
                .map_err(|e| error::map(e, "reading a key to check a precondition", Some(k)))
        })?;
        if batch.ops.is_empty() {
            return Ok(None);
        }

        // Undo overlay: before the tree changes, give every open view the value each touched key
        // has now, unless the view already holds an older one (first write after the view wins).
        writer.views.retain(|w| w.strong_count() > 0);
        let views: Vec<Arc<ViewState>> = writer.views.iter().filter_map(Weak::upgrade).collect();
        if !views.is_empty() {
            let touched: BTreeSet<&Bytes> = batch.ops.iter().map(BatchOp::key).collect();
            for key in touched {
                let mut old = None;
                for view in &views {
                    let mut overlay = lock(&view.overlay);
                    if overlay.contains_key(key) {
                        continue;
                    }
                    if old.is_none() {
                        old = Some(db.get(key).map(|v| v.map(to_bytes)).map_err(|e| {
                            error::map(e, "reading a key's old value for an open view", Some(key))
                        })?);
                    }
                    overlay.insert(key.clone(), old.clone().flatten());
                    view.dirty.store(true, AtomicOrdering::SeqCst);
                }
            }
        }

        let mut sled_batch = sled::Batch::default();
        for op in &batch.ops {
            match op {
                BatchOp::Put(k, v) => sled_batch.insert(k.as_ref(), v.as_ref()),
                BatchOp::Delete(k) => sled_batch.remove(k.as_ref()),
            }
        }
        // If this fails, the overlays hold entries equal to the tree's unchanged values: still
        // the values at each view's time, so nothing needs undoing.
        db.apply_batch(sled_batch)
            .map_err(|e| error::map(e, "applying a batch", None))?;
        Ok(Some(db))
    }

    /// Flush `db` (write and fsync): the durability barrier. Runs on a blocking thread. A failed
    /// flush makes this handle refuse every later call (see the crate docs).
    fn sync_blocking(&self, db: &sled::Db) -> Result<()> {
        if self.failed.load(AtomicOrdering::Acquire) {
            return Err(error::failed_earlier());
        }
        match db.flush() {
            Ok(_) => Ok(()),
            Err(e) => {
                self.failed.store(true, AtomicOrdering::Release);
                tracing::error!(path = %self.path.display(), error = %e,
                    "sled flush failed; this handle refuses further calls");
                Err(error::map(e, "flushing to disk", None))
            }
        }
    }

    /// [`Inner::sync_blocking`] on the blocking pool.
    async fn sync(self: Arc<Self>, db: sled::Db) -> Result<()> {
        blocking::run(error::ENGINE, move || self.sync_blocking(&db)).await
    }

    /// Register a new view. Blocks briefly on the write mutex.
    fn view_blocking(self: &Arc<Self>) -> Result<SledView> {
        let mut writer = lock(&self.writer);
        self.db()?;
        writer.views.retain(|w| w.strong_count() > 0);
        let state = Arc::new(ViewState::default());
        writer.views.push(Arc::downgrade(&state));
        Ok(SledView {
            inner: Arc::clone(self),
            state,
        })
    }

    /// Flush and release the database. Runs on a blocking thread.
    fn close_blocking(&self) -> Result<()> {
        let _writer = lock(&self.writer);
        if self.closed.swap(true, AtomicOrdering::AcqRel) {
            return Ok(());
        }
        let db = self.db.write().unwrap_or_else(|e| e.into_inner()).take();
        let Some(db) = db else { return Ok(()) };
        let flushed = if self.failed.load(AtomicOrdering::Acquire) {
            Err(error::failed_earlier())
        } else {
            db.flush()
                .map(|_| ())
                .map_err(|e| error::map(e, "flushing to disk on close", None))
        };
        release(&self.path, db);
        tracing::debug!(path = %self.path.display(), "closed sled store");
        flushed
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Not closed: release here, so that the store can be opened again as soon as the last
        // handle is gone. This blocks the dropping thread for sled's shutdown flush.
        let db = self.db.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(db) = db {
            release(&self.path, db);
        }
    }
}

/// Drop `db` and wait until sled has let go of the store's lock file.
///
/// Dropping the last `Db` flushes and joins sled's flusher thread, but tasks sled handed to its
/// own thread pool (log writes, segment truncation) may still hold the open file — and with it
/// the lock — for a moment after the last call returned; so may calls of ours still running on
/// blocking threads. A reopen right after `close` would then fail with [`Error::Locked`]. So
/// this probes the lock (the same `flock` sled takes, through the same crate) until it is free,
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

#[async_trait]
impl ReadView for SledBackend {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        // Inline: see the crate docs, "Blocking".
        self.inner.with_db(|db| {
            db.get(key)
                .map(|v| v.map(to_bytes))
                .map_err(|e| error::map(e, "reading a key", Some(key)))
        })
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        let db = self.inner.db()?;
        if range.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let scan = move |range: &KeyRange| {
            let mut page = PageBuilder::with_capacity(limit.min(1024));
            for item in tree_iter(&db, range, order).take(limit) {
                let (k, v) = item.map_err(|e| error::map(e, "scanning a range", None))?;
                page.push(&k, &v);
            }
            Ok(page.finish())
        };
        if limit <= INLINE_LIMIT {
            return scan(range);
        }
        let range = range.clone();
        blocking::run(error::ENGINE, move || scan(&range)).await
    }

    async fn visit(
        &self,
        range: &KeyRange,
        order: Order,
        limit: usize,
        each: &mut Visitor<'_>,
    ) -> Result<usize> {
        let db = self.inner.db()?;
        if range.is_empty() || limit == 0 {
            return Ok(0);
        }
        if limit > INLINE_LIMIT {
            // Long: collected on the blocking pool, then lent from the page.
            let page = self.scan(range, order, limit).await?;
            return Ok(lend(&page, each));
        }
        Ok(lend_tree(&db, range, order, limit, each, || false)?.0)
    }
}

#[async_trait]
impl KvBackend for SledBackend {
    fn engine(&self) -> &'static str {
        error::ENGINE
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
        self.inner.db()?;
        batch.validate()?;
        let landed = if blocking::is_inline(batch.ops.len()) {
            self.inner.write_blocking(&batch)?
        } else {
            let inner = Arc::clone(&self.inner);
            blocking::run(error::ENGINE, move || inner.write_blocking(&batch)).await?
        };
        if let (Some(db), Durability::Durable) = (landed, durability) {
            // Outside the write mutex, so later writers apply while this one flushes. `db` is
            // the handle the batch landed in, still usable if `close` ran meanwhile.
            let seq = self.inner.group.applied();
            let inner = Arc::clone(&self.inner);
            self.inner
                .group
                .wait_durable(seq, || inner.sync(db))
                .await?;
        }
        Ok(())
    }

    async fn view(&self) -> Result<Arc<dyn ReadView>> {
        self.inner.db()?;
        // Registration takes the write mutex for a moment: inline.
        Ok(Arc::new(self.inner.view_blocking()?))
    }

    async fn flush(&self) -> Result<()> {
        let db = self.inner.db()?;
        Arc::clone(&self.inner).sync(db).await
    }

    async fn close(&self) -> Result<()> {
        if self.inner.closed.load(AtomicOrdering::Acquire) {
            return Ok(());
        }
        let inner = Arc::clone(&self.inner);
        blocking::run(error::ENGINE, move || inner.close_blocking()).await
    }
}

impl fmt::Debug for SledBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `try_lock`: formatting must not wait behind a write.
        let views = self
            .inner
            .writer
            .try_lock()
            .ok()
            .map(|w| w.views.iter().filter(|v| v.strong_count() > 0).count());
        f.debug_struct("SledBackend")
            .field("path", &self.inner.path)
            .field("closed", &self.inner.closed.load(AtomicOrdering::Relaxed))
            .field("failed", &self.inner.failed.load(AtomicOrdering::Relaxed))
            .field("open_views", &views)
            .finish()
    }
}

impl fmt::Debug for SledView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SledView")
            .field("path", &self.inner.path)
            .field("overlay_keys", &lock(&self.state.overlay).len())
            .finish()
    }
}

/// The part of the overlay to merge with a stretch of the tree: after the keys already covered
/// (`covered`, the last tree key of the previous stretch) up to and including `end` (the last
/// tree key of this stretch; `None`: the tree is exhausted, so up to the end of `range`).
///
/// Never an inverted range (which `BTreeMap::range` would panic on): the tree yields keys in
/// `range`, strictly increasing in scan order.
fn stretch<'a>(
    range: &'a KeyRange,
    order: Order,
    covered: Option<&'a Bytes>,
    end: Option<&'a Bytes>,
) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    let (start, stop) = range.as_slices();
    let excl = |k: &'a Bytes| Bound::Excluded(k.as_ref());
    let incl = |k: &'a Bytes| Bound::Included(k.as_ref());
    match order {
        Order::Ascending => (covered.map_or(start, excl), end.map_or(stop, incl)),
        Order::Descending => (end.map_or(start, incl), covered.map_or(stop, excl)),
    }
}

impl SledView {
    fn get_blocking(&self, key: &[u8]) -> Result<Option<Bytes>> {
        // The tree first, the overlay second: see the crate docs.
        let now = self.inner.with_db(|db| {
            db.get(key)
                .map_err(|e| error::map(e, "reading a key through a view", Some(key)))
        })?;
        if let Some(then) = lock(&self.state.overlay).get(key) {
            return Ok(then.clone());
        }
        Ok(now.map(to_bytes))
    }

    fn scan_blocking(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        let db = self.inner.db()?;
        let mut tree = tree_iter(&db, range, order);
        let mut out: Vec<KvPair> = Vec::new();
        let mut covered: Option<Bytes> = None;
        while out.len() < limit {
            // A stretch of the tree, read before the overlay is looked at.
            let want = (limit - out.len()).max(32);
            let mut page = PageBuilder::with_capacity(want.min(1024));
            for item in tree.by_ref().take(want) {
                let (k, v) = item.map_err(|e| error::map(e, "scanning a range of a view", None))?;
                page.push(&k, &v);
            }
            let chunk = page.finish();
            let exhausted = chunk.len() < want;
            let end = if exhausted {
                None
            } else {
                chunk.last().map(|(k, _)| k.clone())
            };

            let overlay = lock(&self.state.overlay);
            let patches =
                overlay.range::<[u8], _>(stretch(range, order, covered.as_ref(), end.as_ref()));
            let patches: Box<dyn Iterator<Item = (&Bytes, &Option<Bytes>)>> = match order {
                Order::Ascending => Box::new(patches),
                Order::Descending => Box::new(patches.rev()),
            };
            merge(chunk, patches, order, limit, &mut out);
            drop(overlay);

            if exhausted {
                break;
            }
            covered = end;
        }
        Ok(out)
    }
}

/// Merge a stretch of the tree with the overlay's entries for the same stretch, both in scan
/// order, into `out` until it holds `limit` pairs. An overlay entry replaces the tree's pair for
/// its key; `None` entries hide the key.
fn merge<'a>(
    chunk: Vec<KvPair>,
    patches: impl Iterator<Item = (&'a Bytes, &'a Option<Bytes>)>,
    order: Order,
    limit: usize,
    out: &mut Vec<KvPair>,
) {
    let mut tree = chunk.into_iter().peekable();
    let mut patches = patches.peekable();
    while out.len() < limit {
        let from_tree = match (tree.peek(), patches.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((tk, _)), Some((pk, _))) => {
                let cmp = tk.as_ref().cmp(pk.as_ref());
                let cmp = match order {
                    Order::Ascending => cmp,
                    Order::Descending => cmp.reverse(),
                };
                match cmp {
                    std::cmp::Ordering::Less => true,
                    std::cmp::Ordering::Greater => false,
                    std::cmp::Ordering::Equal => {
                        // Written since the view: the overlay's value is the view's.
                        tree.next();
                        false
                    }
                }
            }
        };
        if from_tree {
            if let Some(pair) = tree.next() {
                out.push(pair);
            }
        } else if let Some((k, Some(v))) = patches.next() {
            // An overlay `None` is consumed here too, and hides its key.
            out.push((k.clone(), v.clone()));
        }
    }
}

#[async_trait]
impl ReadView for SledView {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.get_blocking(key)
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        self.inner.db()?;
        if range.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        if limit <= INLINE_LIMIT {
            return self.scan_blocking(range, order, limit);
        }
        let view = self.handle();
        let range = range.clone();
        blocking::run(error::ENGINE, move || {
            view.scan_blocking(&range, order, limit)
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
        if range.is_empty() || limit == 0 {
            return Ok(0);
        }
        if limit > INLINE_LIMIT {
            let page = self.scan(range, order, limit).await?;
            return Ok(lend(&page, each));
        }
        // While no write has touched this view's overlay, the live tree is the view: lend
        // straight from sled's iterator. Each pair is lent only if the overlay was still clean
        // after it was read (writers mark it before they change the tree); at the first dirty
        // mark the rest goes through the merging scan.
        // A handle of our own: no lock is held while `each` runs.
        let db = self.inner.db()?;
        let (n, last, finished) = lend_tree(&db, range, order, limit, each, || {
            self.state.dirty.load(AtomicOrdering::SeqCst)
        })?;
        if finished {
            return Ok(n);
        }
        let rest = match &last {
            None => range.clone(),
            Some(k) => match order {
                Order::Ascending => range.after(k),
                Order::Descending => range.before(k),
            },
        };
        let page = self.scan_blocking(&rest, order, limit - n)?;
        Ok(n + lend(&page, each))
    }
}

impl SledView {
    /// A second handle on the same view, to move onto a blocking thread. It shares the overlay,
    /// so the view stays registered until both are dropped.
    fn handle(&self) -> SledView {
        SledView {
            inner: Arc::clone(&self.inner),
            state: Arc::clone(&self.state),
        }
    }
}
