//! [`SlateReader`]: a read-only [`KvBackend`] over SlateDB's `DbReader`, for reading a catalog
//! while a writer has it open (a `rocklake serve` on the same folder or bucket).
//!
//! Opening a second `Db` on a path fences the first (see the crate docs); a `DbReader` does not.
//! It loads the manifest, replays the WAL objects the writer has flushed, and refreshes both
//! every poll interval on a background task. It never writes a key; RockLake refuses every
//! write through it with [`Error::PermissionDenied`].

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use object_store::ObjectStore;
use rocklake_core::backend::{Capabilities, Durability, KeyRange, KvPair, Order, ReadView};
use rocklake_core::error::{Error, Result};
use rocklake_core::{KvBackend, WriteBatch};
use slatedb::config::DbReaderOptions;
use slatedb::{DbReader, DbReaderMode};

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
///   default [`DEFAULT_POLL_INTERVAL`]) it reloads the manifest and replays the WAL objects that
///   appeared since. A commit the writer acknowledged as durable (RockLake flushes the WAL
///   before acknowledging) is therefore visible within about one poll interval, whether it is
///   still only in the WAL or already in an L0 SST: the tests measure this on a local folder.
/// - A batch is seen whole or not at all (SlateDB writes a batch atomically, and a refresh
///   installs the reader's new state at once). The scan test reads a 40-key batch back whole
///   after it reached an L0 SST.
///
/// # Consistency of a view
/// `DbReader` has no snapshots, so [`KvBackend::view`] is the live reader and
/// [`Capabilities::point_in_time_views`] is `false`: each call sees the state of the last poll,
/// and two calls of one view may straddle a poll. For the catalog that is mostly harmless —
/// a reader at snapshot S ignores row versions that begin after S — but the writer's GC and
/// PURGE know only the readers of their own process, so a version this reader still reads
/// can vanish between two of its calls.
///
/// # Writes and close
/// Every [`KvBackend::write`] is refused with [`Error::PermissionDenied`] naming the URL, and
/// nothing reaches the store. [`KvBackend::flush`] has nothing to do. [`KvBackend::close`] stops
/// the poller (and deletes the reader's managed checkpoint); every later call answers
/// [`Error::Closed`].
pub struct SlateReader {
    inner: Arc<Inner>,
}

struct Inner {
    reader: DbReader,
    /// The URL (or location) opened, for messages.
    url: String,
    closed: AtomicBool,
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
        let mode = if options.reader_checkpoint {
            DbReaderMode::ManagedCheckpoint
        } else {
            DbReaderMode::FollowLatest
        };
        let reader_options = DbReaderOptions {
            manifest_poll_interval: options.poll_interval,
            // SlateDB requires at least two poll intervals.
            checkpoint_lifetime: CHECKPOINT_LIFETIME.max(options.poll_interval.saturating_mul(2)),
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
        let reader = DbReader::builder(path, store)
            .with_options(reader_options)
            .with_reader_mode(mode)
            .build()
            .await
            .map_err(|e| map_err(&format!("opening {url} for reading"), e))?;
        Ok(SlateReader {
            inner: Arc::new(Inner {
                reader,
                url,
                closed: AtomicBool::new(false),
            }),
        })
    }

    /// The SlateDB reader underneath.
    pub fn raw_reader(&self) -> &DbReader {
        &self.inner.reader
    }

    /// The URL (or location) this reader was opened on.
    pub fn url(&self) -> &str {
        &self.inner.url
    }
}

impl Inner {
    fn check_open(&self) -> Result<()> {
        if self.closed.load(AtomicOrdering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }
}

#[async_trait]
impl ReadView for Inner {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.check_open()?;
        self.reader
            .get(key)
            .await
            .map_err(|e| map_err("reading a key through a reader", e))
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        self.check_open()?;
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
impl ReadView for SlateReader {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.inner.get(key).await
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        self.inner.scan(range, order, limit).await
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
            point_in_time_views: false,
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
        Ok(self.inner.clone())
    }

    async fn flush(&self) -> Result<()> {
        // A reader acknowledged no write: nothing to make durable.
        self.inner.check_open()
    }

    async fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, AtomicOrdering::AcqRel) {
            return Ok(());
        }
        match self.inner.reader.close().await {
            Ok(()) => Ok(()),
            Err(e) => match map_err("closing a reader", e) {
                Error::Closed => Ok(()),
                other => Err(other),
            },
        }
    }
}
