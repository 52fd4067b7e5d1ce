//! [`SlateReader`]: a read-only [`KvBackend`] over SlateDB's `DbReader`, for reading a catalog
//! while a writer has it open (a `rocklake serve` on the same folder or bucket).
//!
//! Opening a second `Db` on a path fences the first (see the crate docs); a `DbReader` does not.
//! It loads the manifest and replays the WAL objects the writer has flushed. It never writes a
//! key; RockLake refuses every write through it with [`Error::PermissionDenied`].
//!
//! SlateDB's `DbReader` has no snapshots: one that follows the writer changes under its
//! callers at every poll. So RockLake keeps *generations*: each a `DbReader` that does not
//! follow (it reads the store as it was when it opened), and every poll interval, when the
//! writer has flushed a WAL object since, a new one opens and takes over for new views. A
//! view holds its generation, so a transaction reads one state of the store from its first
//! statement to its last.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use object_store::ObjectStore;
use rocklake_core::backend::{Capabilities, Durability, KeyRange, KvPair, Order, ReadView};
use rocklake_core::error::{Error, Result};
use rocklake_core::{KvBackend, WriteBatch};
use slatedb::config::DbReaderOptions;
use slatedb::db_cache::foyer::{FoyerCache, FoyerCacheOptions};
use slatedb::db_cache::{DbCache, SplitCache};
use slatedb::{DbReader, DbReaderMode};

use crate::layer::{watched, ReadWatch};
use crate::{bounds, map_err, object_store_for, parse_url, scan_iter, scan_options};
use crate::{Location, SlateOptions};

/// How often a [`SlateReader`] looks for new commits unless the URL says `poll_ms=N`
/// (SlateDB's own default is 10 s).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The shortest lifetime RockLake gives a reader's managed checkpoint (SlateDB's default). A
/// reader refreshes it while it runs and deletes it on close; one left behind by a killed
/// reader holds back the writer's garbage collection for at most this long.
const CHECKPOINT_LIFETIME: Duration = Duration::from_secs(10 * 60);

/// Open the catalog a `file://` or `s3://` URL names for reading beside its writer (see
/// [`SlateReader`]). `memory://` is refused: every open of it is a new, empty store, so there is
/// no writer to read beside. A location holding no catalog is [`Error::NotFound`].
pub async fn open_reader_url(url: &str) -> Result<Arc<SlateReader>> {
    let (location, options) = parse_url(url)?;
    match &location {
        Location::Memory => {
            return Err(Error::Unsupported(format!(
                "{url:?}: memory:// is a new, empty store on every open, so there is no writer to read beside; read it in the process that writes it"
            )))
        }
        Location::Folder(path) if !path.is_dir() => {
            return Err(Error::NotFound(format!(
                "no catalog at {url:?}: the folder {} does not exist",
                path.display()
            )))
        }
        _ => {}
    }
    let (store, path) = object_store_for(&location)?;
    Ok(Arc::new(
        SlateReader::open_store(store, path, url.to_string(), options).await?,
    ))
}

/// A read-only [`KvBackend`] over SlateDB's `DbReader`: it reads a catalog while a writer has it
/// open, and never fences that writer.
///
/// # What it sees, and when
/// - At open, everything the writer had made durable: the SSTs its manifest names plus every
///   WAL object already in the object store (SlateDB's reader replays the WAL up to the newest
///   WAL object, not just up to the manifest's boundary). A write still only in the writer's
///   memory — a [`Durability::Buffered`] batch before the writer's next WAL flush — is in no
///   object and is not seen.
/// - Afterwards, every poll interval ([`SlateOptions::poll_interval`], URL option `poll_ms`,
///   default [`DEFAULT_POLL_INTERVAL`]) it lists the WAL objects newer than the current
///   generation's, and if there is one opens a new generation, which reads the manifest and
///   replays the WAL again. A commit the writer acknowledged as durable (RockLake flushes the
///   WAL before acknowledging) is therefore visible within about one poll interval (plus the
///   open), whether it is still only in the WAL or already in an L0 SST: the tests measure this
///   on a local folder.
/// - A batch is seen whole or not at all (SlateDB writes a batch atomically, and a generation
///   replays whole WAL objects). The scan test reads a 40-key batch back whole after it
///   reached an L0 SST.
///
/// # Consistency of a view
/// [`KvBackend::view`] is point-in-time ([`Capabilities::point_in_time_views`]): it holds the
/// generation current when it was taken (see the module's docs), which never changes. A
/// generation is a `DbReader` whose own poll is set to [`GENERATION_LIFETIME`], so a view kept
/// longer than that may see a later state. With the managed checkpoint (the default) the
/// writer's garbage collection keeps every SST a live generation reads; a generation is closed
/// (and its checkpoint deleted) once no view holds it.
///
/// # Writes and close
/// Every [`KvBackend::write`] is refused with [`Error::PermissionDenied`] naming the URL, and
/// nothing reaches the store. [`KvBackend::flush`] has nothing to do. [`KvBackend::close`] stops
/// the poller (and deletes the reader's managed checkpoint); every later call answers
/// [`Error::Closed`].
pub struct SlateReader {
    inner: Arc<Inner>,
}

/// How long a generation's `DbReader` goes without looking at the store itself: views are
/// point-in-time for at least this long.
pub const GENERATION_LIFETIME: Duration = Duration::from_secs(30 * 60);

/// How long a new generation waits for its `DbReader`'s first poll before views may take it.
/// A `DbReader` polls once as it starts (SlateDB's poll ticker fires at once, on its own task,
/// after the open returns); a commit whose WAL object lands between the open and that poll
/// would change the generation under a view taken in between, so a generation is published
/// only once that poll has asked again for the WAL object the open found absent (seen through
/// [`crate::layer::ReadWatch`]) and, when it is there now, has replayed it. Past this bound (a
/// poll that never asks, an object store that does not answer) it is published anyway; one
/// whose replayed sequence number moved after that is replaced at the next poll.
const FIRST_POLL: Duration = Duration::from_secs(5);

/// How long a generation waits for its first poll to replay a WAL object it found (its
/// sequence number to move) before it is published anyway.
const REPLAY: Duration = Duration::from_secs(2);

/// The cache of SST blocks and metadata a reader's generations share, of SlateDB's default
/// sizes (512 MiB of blocks, 128 MiB of indexes and filters). Without it each generation, a
/// new `DbReader`, starts with an empty cache of its own, and on object storage the first
/// read after every new generation (under a writer that commits, every poll) fetches every
/// block it needs again, a round trip each.
fn shared_cache() -> Arc<dyn DbCache> {
    let foyer = |bytes| -> Option<Arc<dyn DbCache>> {
        Some(Arc::new(FoyerCache::new_with_opts(FoyerCacheOptions {
            max_capacity: bytes,
            ..FoyerCacheOptions::default()
        })))
    };
    Arc::new(
        SplitCache::new()
            .with_block_cache(foyer(slatedb::db_cache::DEFAULT_BLOCK_CACHE_CAPACITY))
            .with_meta_cache(foyer(slatedb::db_cache::DEFAULT_META_CACHE_CAPACITY))
            .build(),
    )
}

/// How long a view past its reader's `max_staleness` waits for the reader to look at the
/// store (an object store that does not answer) before it is refused.
const LOOK_WITHIN: Duration = Duration::from_secs(10);

struct Inner {
    /// The generation new views take.
    current: RwLock<Arc<Generation>>,
    /// Generations no longer current, closed once no view holds them.
    retired: Mutex<Vec<Arc<Generation>>>,
    store: Arc<dyn ObjectStore>,
    /// The block and metadata cache every generation reads through (see [`shared_cache`]).
    cache: Arc<dyn DbCache>,
    path: String,
    mode: DbReaderMode,
    options: DbReaderOptions,
    poll_interval: Duration,
    /// See [`crate::SlateOptions::max_staleness`].
    max_staleness: Option<Duration>,
    /// When the last look at the store that succeeded began: every commit acknowledged
    /// before then is in the current generation.
    fresh_as_of: Mutex<Instant>,
    /// Held by a look at the store (the poller's, or a view's past `max_staleness`).
    looking: tokio::sync::Mutex<()>,
    /// The URL (or location) opened, for messages.
    url: String,
    closed: AtomicBool,
    /// Generations opened since the reader opened (the first included).
    generations: AtomicU64,
    /// Of those, the ones published without their first poll seen (see [`FIRST_POLL`]).
    unseen_polls: AtomicU64,
}

/// A `DbReader` that does not follow the writer: the store as it was when it opened.
struct Generation {
    reader: DbReader,
    /// The newest WAL object listed just before it opened (it replayed that one and older).
    newest_wal: Option<object_store::path::Path>,
    /// Published without its first poll seen (see [`FIRST_POLL`]).
    unseen_poll: bool,
    /// The reader's replayed sequence number when the generation was published.
    seq: u64,
}

/// A view: one generation, while the reader is open.
struct Pinned {
    generation: Arc<Generation>,
    owner: Arc<Inner>,
}

impl fmt::Debug for SlateReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlateReader")
            .field("url", &self.inner.url)
            .field("closed", &self.inner.closed.load(AtomicOrdering::Relaxed))
            .finish()
    }
}

impl SlateReader {
    /// Open a location for reading, with the reader options of `options`.
    pub async fn open(location: Location, options: SlateOptions) -> Result<SlateReader> {
        let (store, path) = object_store_for(&location)?;
        SlateReader::open_store(store, path, location.to_string(), options).await
    }

    /// Open the database at `path` inside an existing object store for reading; `url` names it
    /// in messages.
    pub async fn open_store(
        store: Arc<dyn ObjectStore>,
        path: String,
        url: String,
        options: SlateOptions,
    ) -> Result<SlateReader> {
        let store = crate::reached(store, &options);
        let mode = if options.reader_checkpoint {
            DbReaderMode::ManagedCheckpoint
        } else {
            DbReaderMode::FollowLatest
        };
        let reader_options = DbReaderOptions {
            manifest_poll_interval: GENERATION_LIFETIME,
            // SlateDB requires at least two poll intervals.
            checkpoint_lifetime: CHECKPOINT_LIFETIME.max(GENERATION_LIFETIME.saturating_mul(2)),
            ..DbReaderOptions::default()
        };
        // A writer creates the manifest when it first opens; without one there is nothing to
        // read (SlateDB would answer with a data error, as for a corrupt manifest).
        let manifests = object_store::path::Path::from(format!("{path}/manifest"));
        let first = store
            .list(Some(&manifests))
            .next()
            .await
            .transpose()
            .map_err(|e| Error::engine("slatedb", format!("listing the manifests of {url}"), e))?;
        if first.is_none() {
            return Err(Error::NotFound(format!(
                "no catalog at {url:?} to read: it has no SlateDB manifest (a writer creates it on its first open)"
            )));
        }
        let looked = Instant::now();
        let cache = shared_cache();
        let first = Generation::open(&store, &cache, &path, mode, &reader_options, &url).await?;
        let first_unseen = first.unseen_poll;
        let inner = Arc::new(Inner {
            current: RwLock::new(Arc::new(first)),
            retired: Mutex::new(Vec::new()),
            store,
            cache,
            path,
            mode,
            options: reader_options,
            poll_interval: options.poll_interval,
            max_staleness: options.max_staleness,
            fresh_as_of: Mutex::new(looked),
            looking: tokio::sync::Mutex::new(()),
            url,
            closed: AtomicBool::new(false),
            generations: AtomicU64::new(1),
            unseen_polls: AtomicU64::new(u64::from(first_unseen)),
        });
        tokio::spawn(follow(Arc::downgrade(&inner)));
        Ok(SlateReader { inner })
    }

    /// How many generations (SlateDB readers, see the module's docs) this reader has opened.
    pub fn generations(&self) -> u64 {
        self.inner.generations.load(AtomicOrdering::Relaxed)
    }

    /// How many of its generations were published without their `DbReader`'s first poll seen
    /// (waited 5 s for it in vain): each may have changed under a view. 0 normally.
    pub fn unseen_first_polls(&self) -> u64 {
        self.inner.unseen_polls.load(AtomicOrdering::Relaxed)
    }

    /// The URL (or location) this reader was opened on.
    pub fn url(&self) -> &str {
        &self.inner.url
    }
}

impl Generation {
    async fn open(
        store: &Arc<dyn ObjectStore>,
        cache: &Arc<dyn DbCache>,
        path: &str,
        mode: DbReaderMode,
        options: &DbReaderOptions,
        url: &str,
    ) -> Result<Generation> {
        let newest_wal = newest_wal_after(store, path, None, url).await?;
        let wal = ReadWatch::new(&format!("{path}/wal"));
        let reader = DbReader::builder(path.to_string(), watched(store.clone(), wal.clone()))
            .with_options(options.clone())
            .with_reader_mode(mode)
            // One cache for every generation: SSTs never change, so a block read by one is
            // good for the next (one id: they are all the same database).
            .with_db_cache(cache.clone(), 0)
            .build()
            .await
            .map_err(|e| map_err(&format!("opening {url} for reading"), e))?;
        // Its first poll (see [`FIRST_POLL`]) is behind it before a view takes it. The open
        // looked for the WAL objects after the last one it read (SlateDB asks for ids by
        // HEAD, not by listing) and found the lowest absent one: the next the writer will
        // write. The poll asks for that one again, first of all: its second answer says
        // whether there is anything to replay. (Counted by answers, not by when the open
        // returned: the poll, on its own task, may be answered before this code runs.)
        let seq_opened = reader.status().durable_seq;
        let found = wal
            .until(FIRST_POLL, |r| {
                r.lowest_absent()
                    .is_some_and(|p| r.answers_for(&p).len() >= 2)
            })
            .await
            .and_then(|r| {
                let p = r.lowest_absent()?;
                r.answers_for(&p).get(1).copied()
            });
        let unseen_poll = found.is_none();
        match found {
            Some(true) => {
                // A WAL object the open had not read: wait for its replay (the sequence
                // number moves just before the new state is installed).
                let until = tokio::time::Instant::now() + REPLAY;
                while reader.status().durable_seq == seq_opened {
                    if tokio::time::Instant::now() >= until {
                        tracing::debug!(%url, "a reader generation's first poll found a WAL \
                            object whose replay was not seen in time; publishing it");
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Some(false) => {}
            None => tracing::warn!(%url, "a reader generation's first poll was not seen \
                looking at the WAL in time; publishing it"),
        }
        let seq = reader.status().durable_seq;
        Ok(Generation {
            reader,
            newest_wal,
            unseen_poll,
            seq,
        })
    }

    /// Whether its state moved after it was published (see [`FIRST_POLL`]).
    fn moved(&self) -> bool {
        self.reader.status().durable_seq != self.seq
    }

    async fn close(&self) -> Result<()> {
        match self.reader.close().await {
            Ok(()) => Ok(()),
            Err(e) => match map_err("closing a reader", e) {
                Error::Closed => Ok(()),
                other => Err(other),
            },
        }
    }
}

/// How many times a WAL listing is tried before its error is the caller's: `object_store`
/// retries a request that fails, but not a listing whose response body breaks off (a reset
/// connection), and a standby or reader that opens must not give up on one such break.
const LIST_TRIES: u32 = 4;

/// The newest WAL object of the store at `path` listed after `after` (all of them when `None`),
/// listed again (100, 200, 400 ms later) while a listing fails.
async fn newest_wal_after(
    store: &Arc<dyn ObjectStore>,
    path: &str,
    after: Option<&object_store::path::Path>,
    url: &str,
) -> Result<Option<object_store::path::Path>> {
    let mut tried = 1;
    loop {
        match list_newest_wal(store, path, after, url).await {
            Err(e) if tried < LIST_TRIES => {
                tracing::warn!(%url, error = %e, "listing the WAL failed; listing it again");
                tokio::time::sleep(Duration::from_millis(50 << tried)).await;
                tried += 1;
            }
            done => return done,
        }
    }
}

async fn list_newest_wal(
    store: &Arc<dyn ObjectStore>,
    path: &str,
    after: Option<&object_store::path::Path>,
    url: &str,
) -> Result<Option<object_store::path::Path>> {
    let prefix = object_store::path::Path::from(format!("{path}/wal"));
    let mut listed = match after {
        Some(offset) => store.list_with_offset(Some(&prefix), offset),
        None => store.list(Some(&prefix)),
    };
    let mut newest: Option<object_store::path::Path> = None;
    while let Some(meta) = listed.next().await {
        let meta =
            meta.map_err(|e| Error::engine("slatedb", format!("listing the WAL of {url}"), e))?;
        // WAL objects are named by their number, zero-padded: names sort as numbers.
        if newest.as_ref().is_none_or(|n| meta.location > *n) {
            newest = Some(meta.location);
        }
    }
    Ok(newest)
}

/// Every poll interval: a new generation when the writer flushed a WAL object since the
/// current one opened; retired generations no view holds are closed. Ends when the reader
/// closes or is dropped.
async fn follow(inner: std::sync::Weak<Inner>) {
    loop {
        let every = match inner.upgrade() {
            Some(i) => i.poll_interval,
            None => return,
        };
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if inner.closed.load(AtomicOrdering::Acquire) {
            return;
        }
        if let Err(e) = inner.look().await {
            tracing::warn!(url = %inner.url, error = %e,
                "a read-only catalog could not look for new commits; it keeps reading the state it has");
        }
        inner.close_unused().await;
    }
}

impl Inner {
    fn check_open(&self) -> Result<()> {
        if self.closed.load(AtomicOrdering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn current(&self) -> Arc<Generation> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Look at the store: [`Inner::refresh`], one look at a time; a look that succeeds moves
    /// `fresh_as_of` to when it began.
    async fn look(&self) -> Result<()> {
        let _one = self.looking.lock().await;
        self.look_held().await
    }

    /// [`Inner::look`] with `looking` already held.
    async fn look_held(&self) -> Result<()> {
        let began = Instant::now();
        self.refresh().await?;
        let mut fresh = self.fresh_as_of.lock().unwrap_or_else(|e| e.into_inner());
        *fresh = (*fresh).max(began);
        Ok(())
    }

    /// How long before `at` the last look that succeeded began (zero if it began after).
    fn staleness(&self, at: Instant) -> Duration {
        at.saturating_duration_since(*self.fresh_as_of.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Within `max_staleness` of the store before a view is taken: look again if the last
    /// look began longer than that before the view was asked for, refuse if that look fails.
    /// A look that began after the view was asked for serves it too, so views that wait
    /// together share one look (however long a look takes on a slow store).
    async fn fresh_enough(&self) -> Result<()> {
        let Some(bound) = self.max_staleness else {
            return Ok(());
        };
        let asked = Instant::now();
        if self.staleness(asked) <= bound {
            return Ok(());
        }
        let _one = self.looking.lock().await;
        // Another view's look, or the poller's, may have been under way.
        if self.staleness(asked) <= bound {
            return Ok(());
        }
        let looked = match tokio::time::timeout(LOOK_WITHIN, self.look_held()).await {
            Ok(r) => r,
            Err(_) => Err(Error::engine(
                "slatedb",
                format!(
                    "no answer from the store within {} s",
                    LOOK_WITHIN.as_secs()
                ),
                std::io::Error::from(std::io::ErrorKind::TimedOut),
            )),
        };
        if let Err(e) = looked {
            return Err(Error::Stale(format!(
                "{}: this reader last saw the store {} ms ago, more than max_staleness_ms={}, \
                 and could not look again: {e}",
                self.url,
                self.staleness(Instant::now()).as_millis(),
                bound.as_millis()
            )));
        }
        tracing::debug!(url = %self.url, waited_ms = asked.elapsed().as_millis() as u64,
            "a view past max_staleness looked at the store first");
        Ok(())
    }

    /// Open a new generation if the store has a WAL object the current one has not read.
    async fn refresh(&self) -> Result<()> {
        let current = self.current();
        let newer = newest_wal_after(
            &self.store,
            &self.path,
            current.newest_wal.as_ref(),
            &self.url,
        )
        .await?;
        if newer.is_none() && !current.moved() {
            return Ok(());
        }
        if current.moved() {
            tracing::warn!(url = %self.url,
                "a reader generation polled after it was published; replacing it");
        }
        let next = Arc::new(
            Generation::open(
                &self.store,
                &self.cache,
                &self.path,
                self.mode,
                &self.options,
                &self.url,
            )
            .await?,
        );
        self.generations.fetch_add(1, AtomicOrdering::Relaxed);
        if next.unseen_poll {
            self.unseen_polls.fetch_add(1, AtomicOrdering::Relaxed);
        }
        let old = std::mem::replace(
            &mut *self.current.write().unwrap_or_else(|e| e.into_inner()),
            next,
        );
        self.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(old);
        if self.closed.load(AtomicOrdering::Acquire) {
            // Closed while it opened: close what this opened too.
            let _ = self.close_all().await;
        }
        Ok(())
    }

    /// Close the retired generations no view holds any more.
    async fn close_unused(&self) {
        let unused: Vec<Arc<Generation>> = {
            let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
            let (unused, held) = std::mem::take(&mut *retired)
                .into_iter()
                .partition(|g| Arc::strong_count(g) == 1);
            *retired = held;
            unused
        };
        for g in unused {
            if let Err(e) = g.close().await {
                tracing::warn!(url = %self.url, error = %e, "closing an old reader generation failed");
            }
        }
    }

    /// Close every generation (at close: views taken before answer `Closed` from now on).
    async fn close_all(&self) -> Result<()> {
        let mut all: Vec<Arc<Generation>> =
            std::mem::take(&mut *self.retired.lock().unwrap_or_else(|e| e.into_inner()));
        all.push(self.current());
        let mut first_error = Ok(());
        for g in all {
            if let Err(e) = g.close().await {
                if first_error.is_ok() {
                    first_error = Err(e);
                }
            }
        }
        first_error
    }
}

#[async_trait]
impl ReadView for Generation {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.reader
            .get(key)
            .await
            .map_err(|e| map_err("reading a key through a reader", e))
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        if range.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        scan_iter(
            self.reader
                .scan_with_options(bounds(range), &scan_options(order))
                .await,
            limit,
        )
        .await
    }
}

#[async_trait]
impl ReadView for Pinned {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.owner.check_open()?;
        self.generation.get(key).await
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        self.owner.check_open()?;
        self.generation.scan(range, order, limit).await
    }
}

#[async_trait]
impl ReadView for SlateReader {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.inner.check_open()?;
        self.inner.current().get(key).await
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        self.inner.check_open()?;
        self.inner.current().scan(range, order, limit).await
    }
}

#[async_trait]
impl KvBackend for SlateReader {
    fn engine(&self) -> &'static str {
        "slatedb"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            persistent: true,
            exclusive_open: false,
            // Opening a reader fences nobody.
            fences_on_open: false,
            point_in_time_views: true,
        }
    }

    async fn write(&self, _batch: WriteBatch, _durability: Durability) -> Result<()> {
        self.inner.check_open()?;
        Err(Error::PermissionDenied(format!(
            "{} is open read-only (a SlateDB reader beside the writer), so nothing was written; write through the writer, or open the store as the writer (which fences the one running)",
            self.inner.url
        )))
    }

    async fn view(&self) -> Result<Arc<dyn ReadView>> {
        self.inner.check_open()?;
        self.inner.fresh_enough().await?;
        Ok(Arc::new(Pinned {
            generation: self.inner.current(),
            owner: self.inner.clone(),
        }))
    }

    async fn flush(&self) -> Result<()> {
        // A reader acknowledged no write: nothing to make durable.
        self.inner.check_open()
    }

    async fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, AtomicOrdering::AcqRel) {
            return Ok(());
        }
        let closed = self.inner.close_all().await;
        // The shared cache outlives the generations that read through it.
        let cache = self
            .inner
            .cache
            .close()
            .await
            .map_err(|e| map_err("closing a reader's cache", e));
        closed.and(cache)
    }
}
