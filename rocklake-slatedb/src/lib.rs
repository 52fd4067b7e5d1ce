//! RockLake's [`Engine`] on [SlateDB](https://slatedb.io), served as a [`KvBackend`] by core's
//! [`EngineBackend`] ([`SlateBackend`]): an LSM tree whose WAL and SSTs are objects in an object
//! store (S3, or a local folder), so a catalog needs no server at all.
//!
//! # Opening
//!
//! [`open_url`] takes
//! - `file:///absolute/path`: a local folder (`object_store`'s `LocalFileSystem`, fsync on);
//! - `memory://`: an in-process object store (nothing survives the process);
//! - `s3://bucket/prefix`: Amazon S3 or any S3-compatible server. Credentials and region come
//!   from the usual `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION` variables;
//!   `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT`) points at another server, e.g. a local emulator.
//!
//! A query parameter `flush_interval_ms=N` sets SlateDB's background WAL flush interval (default
//! [`DEFAULT_FLUSH_INTERVAL`]). Two more are read only by a [`SlateReader`] (a writer accepts
//! and ignores them, so one URL serves both): `poll_ms=N`, how often the reader looks for new
//! commits (default [`DEFAULT_POLL_INTERVAL`]), and `checkpoint=managed|none` (see
//! [`SlateOptions::reader_checkpoint`]). `simulate_latency_ms=N` makes every request to the
//! object store wait N ms first, as a remote bucket's round trip does (see
//! [`SlateOptions::simulate_latency`]): for measuring what a real bucket would cost on a
//! local folder or emulator, never for serving. `lease_ms=N` sets a writer's lease (see
//! [`SlateOptions::lease`] and [`holder`]'s "Lease"; a reader ignores it).
//!
//! # Reading beside a running writer
//!
//! [`open_url`] opens a *writer*, and a second writer fences the first (below). To read a
//! catalog while a writer (a `rocklake serve`) runs, open it with [`open_reader_url`]: a
//! [`SlateReader`] over SlateDB's `DbReader`, which never fences the writer and refuses every
//! write. What it sees and when is documented on [`SlateReader`].
//!
//! # Durability
//!
//! A SlateDB write is applied to the memtable and WAL buffer at once and becomes durable when
//! the WAL is flushed to the object store. SlateDB flushes every `flush_interval` (100 ms by
//! default upstream, which would make every durable commit take ~100 ms). RockLake instead
//! calls `flush()` right after a [`rocklake_core::Durability::Durable`] batch: on a local folder that measured
//! ~0.6 ms, on an S3 emulator ~8 ms ([`Engine::sync`]). Durable batches that arrive while a
//! flush is in progress share the next one (core's group commit). Buffered batches return after
//! the memtable write and are flushed by the background interval or the next durable batch.
//!
//! # Fencing
//!
//! A second writer is refused while the first runs: every writer keeps a holder record beside
//! the database and renews it every two seconds, and [`open_url`] fails with [`Error::Locked`],
//! naming the holder, when that record is live (see [`holder`] for how a record left by a crash
//! is told apart). [`open_url_with`] with `takeover` (`rocklake --takeover`) opens anyway, and
//! then the second writer fences the first: the first one's writes still seem to
//! succeed in memory, but its next flush fails and SlateDB closes it. Because a durable batch is
//! acknowledged only after its flush, a fenced writer's durable batch is reported as
//! [`Error::Fenced`], never as landed. A *buffered* batch of a writer that is fenced before the
//! next flush is lost without an error (it was never promised durable).
//!
//! # Preconditions
//!
//! Core checks a batch's preconditions and applies it under one in-process lock. Another
//! process cannot interleave: it would have to open the store, which fences this one, so this
//! writer's batch could not become durable.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use object_store::ObjectStore;
use rocklake_core::backend::{BatchOp, Capabilities, KeyRange, KvPair, Order, ReadView};
use rocklake_core::error::{Error, Result};
#[cfg(doc)]
use rocklake_core::KvBackend;
use rocklake_core::{Engine, EngineBackend, EngineStat, StatValue};
use slatedb::config::{ScanOptions, Settings};
use slatedb::{CloseReason, Db, DbSnapshot, ErrorKind, IterationOrder};
use slatedb_common::metrics::{DefaultMetricsRecorder, MetricValue};

pub mod holder;
pub mod layer;
mod reader;

pub use reader::{open_reader_url, SlateReader, DEFAULT_POLL_INTERVAL, GENERATION_LIFETIME};

/// Background WAL flush interval RockLake sets (upstream's default is 100 ms).
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_millis(5);

/// Where the database lives inside the object store.
const DB_PATH: &str = "rocklake";

/// Map a SlateDB error into RockLake's semantic error, keeping SlateDB's as the source.
pub fn map_err(doing: &str, e: slatedb::Error) -> Error {
    match e.kind() {
        ErrorKind::Closed(CloseReason::Fenced) => Error::Fenced {
            mine: 0,
            current: 0,
            detail: format!(": slatedb fenced this writer while {doing} ({e})"),
        },
        ErrorKind::Closed(_) => Error::Closed,
        ErrorKind::Transaction => Error::Conflict {
            message: format!("slatedb transaction conflict while {doing}: {e}"),
            retryable: true,
        },
        ErrorKind::Data => Error::Corrupt {
            key: format!("(slatedb, while {doing})"),
            reason: e.to_string(),
        },
        ErrorKind::Invalid => Error::InvalidArgument(format!("slatedb refused {doing}: {e}")),
        _ => Error::engine("slatedb", doing, e),
    }
}

/// [`open_url_with`] with takeover, for a standby whose writer's lease ran out
/// (`rocklake serve --standby`): the claim is read back before the open
/// ([`SlateOptions::confirm_claim`]).
pub async fn open_url_as_standby(url: &str) -> Result<Arc<SlateBackend>> {
    let (location, mut options) = parse_url(url)?;
    options.takeover = true;
    options.confirm_claim = true;
    Ok(Arc::new(EngineBackend::new(
        SlateEngine::open(location, options).await?,
    )))
}

/// Where a SlateDB catalog lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A local folder.
    Folder(std::path::PathBuf),
    /// An in-process object store.
    Memory,
    /// An S3 bucket and key prefix.
    S3 {
        /// Bucket name.
        bucket: String,
        /// Key prefix inside the bucket (may be empty).
        prefix: String,
    },
}

/// The location as a URL without options: `file:///path`, `memory://`, `s3://bucket/prefix`.
impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Folder(path) => write!(f, "file://{}", path.display()),
            Location::Memory => f.write_str("memory://"),
            Location::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

/// Options of a SlateDB backend.
#[derive(Clone, Debug)]
pub struct SlateOptions {
    /// Background WAL flush interval.
    pub flush_interval: Duration,
    /// How large the memtable grows before SlateDB writes it out as an L0 table (SlateDB's
    /// `l0_sst_size_bytes`; `None` keeps SlateDB's default, 64 MiB).
    pub l0_sst_size_bytes: Option<usize>,
    /// How often the embedded compactor looks for work to schedule, and its embedded worker for
    /// scheduled jobs to claim (`None` keeps SlateDB's defaults, 5 s each). Both run in this
    /// process, so they poll at one pace.
    pub compactor_poll_interval: Option<Duration>,
    /// How long a compaction job stays claimed by a worker that stopped heartbeating (a killed
    /// process) before this writer's compactor hands it out again; the worker heartbeats three
    /// times in that span (`None` keeps SlateDB's defaults: 30 s, every 10 s). Until then a
    /// writer opened after the kill cannot compact what that job holds: once the L0 tables
    /// reach SlateDB's limit, its memtable flushes, and so its `close`, wait for the timeout.
    pub compaction_heartbeat_timeout: Option<Duration>,
    /// How many L0 tables or sorted runs the compactor merges at least (its size-tiered
    /// scheduler's `min_compaction_sources`; `None` keeps SlateDB's default, 4).
    pub compactor_min_sources: Option<usize>,
    /// Reader only (URL option `poll_ms`): how often a [`SlateReader`] reloads the manifest and
    /// looks for new WAL objects, i.e. how long a commit takes at most to become visible to it.
    /// A writer ignores it.
    pub poll_interval: Duration,
    /// Reader only (URL option `max_staleness_ms`): the most a [`SlateReader`]'s new view may
    /// lag the store. A view asked for more than this after the reader's last look at the
    /// store began looks again first (a LIST of the WAL, and a new generation if there is
    /// news), and is refused with [`Error::Stale`] if it cannot; so every transaction reads
    /// every commit acknowledged at least this long before it began. `None` (the default):
    /// views take what the last poll found, however old. A writer ignores it.
    pub max_staleness: Option<Duration>,
    /// Reader only (URL option `checkpoint=managed|none`): whether a [`SlateReader`] holds a
    /// SlateDB checkpoint (`managed`, the default: the writer's garbage collector keeps every
    /// object the reader may still read; the reader writes that checkpoint into the manifest,
    /// which SlateDB merges with the writer's updates and which never fences the writer), or
    /// follows the latest manifest without one (`none`: the reader writes nothing at all, for
    /// read-only credentials, but a read may fail if the garbage collector deletes an object
    /// the reader's state still names; the next poll picks up the newer state). A writer
    /// ignores it.
    pub reader_checkpoint: bool,
    /// URL option `simulate_latency_ms`: every request to the object store (each GET, PUT, LIST,
    /// DELETE, copy and multipart part) waits this long before it is sent, as a round trip to a
    /// remote bucket does (S3 answers a small request in about 10–30 ms; see [`layer`]). For
    /// benchmarks on a local folder or emulator; `None` (the default) adds nothing.
    pub simulate_latency: Option<Duration>,
    /// Writer only: open even when another live writer holds the store, fencing it on purpose
    /// (a standby taking over). Without it such an open is refused with [`Error::Locked`],
    /// naming the holder (see [`holder`]). A reader ignores it.
    pub takeover: bool,
    /// Writer only (URL option `lease_ms`): how long this writer goes on answering as the
    /// store's writer after the last time it showed the store it still holds it (see
    /// [`holder`]'s "Lease"). It renews the lease every quarter of it; a standby
    /// (`rocklake serve --standby`) takes the store over once the holder record has not changed
    /// for 1.25 times the lease the record states. A shorter lease means a faster failover
    /// and more writes of the record (one per quarter lease).
    pub lease: Duration,
    /// Writer only, with [`SlateOptions::takeover`]: after claiming the holder record, wait an
    /// eighth of the lease (at least 100 ms) and read it back before opening, so that of two
    /// standbys taking the store over in the same moment only one opens it (see
    /// [`holder::Claim::confirm`]). Set by [`open_url_as_standby`]; a plain takeover does not
    /// wait.
    pub confirm_claim: bool,
}

impl Default for SlateOptions {
    fn default() -> Self {
        SlateOptions {
            flush_interval: DEFAULT_FLUSH_INTERVAL,
            l0_sst_size_bytes: None,
            compactor_poll_interval: None,
            compaction_heartbeat_timeout: None,
            compactor_min_sources: None,
            poll_interval: DEFAULT_POLL_INTERVAL,
            max_staleness: None,
            reader_checkpoint: true,
            simulate_latency: None,
            takeover: false,
            lease: holder::DEFAULT_LEASE,
            confirm_claim: false,
        }
    }
}

/// A positive number of milliseconds given as URL option `name`.
fn millis_option(url: &str, name: &str, v: &str) -> Result<Duration> {
    let ms: u64 = v
        .parse()
        .map_err(|_| Error::InvalidArgument(format!("{name}={v:?} in {url:?} is not a number")))?;
    if ms == 0 {
        return Err(Error::InvalidArgument(format!("{name} must be at least 1")));
    }
    Ok(Duration::from_millis(ms))
}

/// Parse a `file://`, `memory://` or `s3://` URL.
pub fn parse_url(url: &str) -> Result<(Location, SlateOptions)> {
    let parsed = url::Url::parse(url)
        .map_err(|e| Error::InvalidArgument(format!("{url:?} is not a URL: {e}")))?;
    let mut options = SlateOptions::default();
    for (k, v) in parsed.query_pairs() {
        match k.as_ref() {
            "flush_interval_ms" => options.flush_interval = millis_option(url, &k, &v)?,
            "poll_ms" => options.poll_interval = millis_option(url, &k, &v)?,
            "max_staleness_ms" => options.max_staleness = Some(millis_option(url, &k, &v)?),
            "lease_ms" => {
                options.lease = millis_option(url, &k, &v)?;
                if options.lease < holder::MIN_LEASE {
                    return Err(Error::InvalidArgument(format!(
                        "lease_ms={v} in {url:?} is below {} ms: the record is rewritten every \
                         quarter lease, and one rewrite may take a round trip to the store",
                        holder::MIN_LEASE.as_millis()
                    )));
                }
            }
            "simulate_latency_ms" => {
                options.simulate_latency = Some(millis_option(url, &k, &v)?);
            }
            "checkpoint" => {
                options.reader_checkpoint = match v.as_ref() {
                    "managed" => true,
                    "none" => false,
                    other => {
                        return Err(Error::InvalidArgument(format!(
                            "checkpoint={other:?} in {url:?}: use checkpoint=managed or checkpoint=none"
                        )))
                    }
                }
            }
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown option {other:?} in {url:?} (known: flush_interval_ms, poll_ms, checkpoint, simulate_latency_ms, lease_ms)"
                )))
            }
        }
    }
    let location = match parsed.scheme() {
        "file" => {
            let path = parsed.to_file_path().map_err(|_| {
                Error::InvalidArgument(format!(
                    "{url:?}: a file URL needs an absolute path, e.g. file:///tmp/lake"
                ))
            })?;
            Location::Folder(path)
        }
        "memory" => Location::Memory,
        "s3" => {
            let bucket = parsed.host_str().unwrap_or("").to_string();
            if bucket.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "{url:?}: an s3 URL needs a bucket, s3://bucket/prefix"
                )));
            }
            Location::S3 {
                bucket,
                prefix: parsed.path().trim_matches('/').to_string(),
            }
        }
        other => {
            return Err(Error::InvalidArgument(format!(
                "{url:?}: slatedb opens file://, memory:// and s3:// URLs, not {other}://"
            )))
        }
    };
    Ok((location, options))
}

/// Build the object store and the database path inside it for a location.
pub fn object_store_for(location: &Location) -> Result<(Arc<dyn ObjectStore>, String)> {
    match location {
        Location::Folder(path) => {
            std::fs::create_dir_all(path).map_err(|e| {
                Error::engine("slatedb", format!("creating folder {}", path.display()), e)
            })?;
            let store = object_store::local::LocalFileSystem::new_with_prefix(path)
                .map_err(|e| {
                    Error::engine("slatedb", format!("opening folder {}", path.display()), e)
                })?
                .with_fsync(true);
            Ok((Arc::new(store), DB_PATH.to_string()))
        }
        Location::Memory => Ok((
            Arc::new(object_store::memory::InMemory::new()),
            DB_PATH.to_string(),
        )),
        Location::S3 { bucket, prefix } => {
            let mut builder =
                object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
            let endpoint = std::env::var("AWS_ENDPOINT_URL")
                .or_else(|_| std::env::var("AWS_ENDPOINT"))
                .ok();
            if let Some(endpoint) = endpoint {
                builder = builder
                    .with_allow_http(endpoint.starts_with("http://"))
                    .with_endpoint(endpoint)
                    .with_virtual_hosted_style_request(false);
            }
            let store = builder.build().map_err(|e| {
                Error::engine("slatedb", format!("configuring S3 bucket {bucket}"), e)
            })?;
            let path = if prefix.is_empty() {
                DB_PATH.to_string()
            } else {
                format!("{prefix}/{DB_PATH}")
            };
            Ok((Arc::new(store), path))
        }
    }
}

/// `store` as `options` has it reached: behind [`SlateOptions::simulate_latency`] when set.
pub(crate) fn reached(store: Arc<dyn ObjectStore>, options: &SlateOptions) -> Arc<dyn ObjectStore> {
    let Some(wait) = options.simulate_latency else {
        return store;
    };
    layer::delayed(store, wait)
}

/// SlateDB's settings for a writer opened with `options`.
fn writer_settings(options: &SlateOptions) -> Settings {
    let mut settings = Settings {
        flush_interval: Some(options.flush_interval),
        ..Settings::default()
    };
    if let Some(bytes) = options.l0_sst_size_bytes {
        settings.l0_sst_size_bytes = bytes;
    }
    if let Some(compactor) = settings.compactor_options.as_mut() {
        if let Some(every) = options.compactor_poll_interval {
            compactor.poll_interval = every;
            if let Some(worker) = compactor.worker.as_mut() {
                worker.compactions_poll_interval = every;
            }
        }
        if let Some(timeout) = options.compaction_heartbeat_timeout {
            compactor.worker_heartbeat_timeout = timeout;
            if let Some(worker) = compactor.worker.as_mut() {
                worker.heartbeat_interval = timeout / 3;
            }
        }
        if let Some(n) = options.compactor_min_sources {
            compactor
                .scheduler_options
                .insert("min_compaction_sources".into(), n.to_string());
        }
    }
    settings
}

/// A RockLake store on SlateDB: [`SlateEngine`] behind core's [`EngineBackend`].
pub type SlateBackend = EngineBackend<SlateEngine>;

/// For a standby (`rocklake serve --standby`): wait until the writer of the store `url` names
/// is gone, by its holder record (see [`holder::await_vacancy`]); then opening it as writer
/// with takeover is safe. Options of the URL other than `simulate_latency_ms` are ignored.
pub async fn await_vacancy(url: &str) -> Result<Option<holder::Record>> {
    let (store, record, location) = holder_record(url)?;
    holder::await_vacancy(store.as_ref(), &record, &location).await
}

/// What lies under the folder or prefix `url` names (`file://` or `s3://`): whether it is
/// a store itself, and the names of the folders (prefixes) right under it that each hold a
/// store, sorted. A folder that does not exist yet is made, empty.
pub async fn stores_under(url: &str) -> Result<(bool, Vec<String>)> {
    let (location, options) = parse_url(url)?;
    if location == Location::Memory {
        return Err(Error::InvalidArgument(format!(
            "{url:?}: a memory:// store holds no other stores"
        )));
    }
    let (store, db_path) = object_store_for(&location)?;
    let store = reached(store, &options);
    // The folder (prefix) the URL names, inside the object store.
    let root = db_path
        .strip_suffix(DB_PATH)
        .unwrap_or_default()
        .trim_end_matches('/')
        .to_string();
    let listed = |at: String| {
        let store = store.clone();
        async move {
            let at = (!at.is_empty()).then(|| object_store::path::Path::from(at));
            store
                .list_with_delimiter(at.as_ref())
                .await
                .map_err(|e| Error::engine("slatedb", format!("listing {url}"), e))
        }
    };
    let holds_store = |l: &object_store::ListResult| {
        l.common_prefixes
            .iter()
            .any(|p| p.filename() == Some(DB_PATH))
    };
    let top = listed(root.clone()).await?;
    let mut names = Vec::new();
    for p in &top.common_prefixes {
        let Some(name) = p.filename() else { continue };
        if name != DB_PATH && holds_store(&listed(p.to_string()).await?) {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok((holds_store(&top), names))
}

/// The holder record of the store `url` names, as it is now: `None` when no writer holds it.
pub async fn holder_of(url: &str) -> Result<Option<holder::Record>> {
    let (store, record, location) = holder_record(url)?;
    holder::read(store.as_ref(), &record, &location).await
}

fn holder_record(url: &str) -> Result<(Arc<dyn ObjectStore>, object_store::path::Path, String)> {
    let (location, options) = parse_url(url)?;
    if location == Location::Memory {
        return Err(Error::InvalidArgument(format!(
            "{url:?}: a memory:// store lives in one process; no standby can watch it"
        )));
    }
    let (store, path) = object_store_for(&location)?;
    Ok((
        reached(store, &options),
        holder::record_path(&path),
        location.to_string(),
    ))
}

/// Open the store a URL names as its writer (see the crate docs); refused while another live
/// writer holds it (see [`holder`]).
pub async fn open_url(url: &str) -> Result<Arc<SlateBackend>> {
    open_url_with(url, false).await
}

/// [`open_url`], or with `takeover` a writer that fences whichever writer holds the store.
pub async fn open_url_with(url: &str, takeover: bool) -> Result<Arc<SlateBackend>> {
    let (location, mut options) = parse_url(url)?;
    options.takeover = takeover;
    Ok(Arc::new(EngineBackend::new(
        SlateEngine::open(location, options).await?,
    )))
}

/// The SlateDB engine: one open database.
pub struct SlateEngine {
    db: Db,
    /// SlateDB's own counters, gauges and histograms (what [`Engine::stats`] reports).
    metrics: Arc<DefaultMetricsRecorder>,
    location: Location,
    closed: AtomicBool,
    /// This writer's holder record (none for `memory://`, which no other process can open).
    claim: Option<holder::Claim>,
    /// Test-only: `sync` does nothing (see [`SlateEngine::skip_syncs_for_tests`]).
    skip_sync: AtomicBool,
}

impl fmt::Debug for SlateEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlateEngine")
            .field("location", &self.location)
            .finish()
    }
}

impl SlateEngine {
    /// Open a location with options.
    pub async fn open(location: Location, options: SlateOptions) -> Result<SlateEngine> {
        let (store, path) = object_store_for(&location)?;
        SlateEngine::open_store(store, path, location, options).await
    }

    /// Open a database at `path` inside an existing object store.
    pub async fn open_store(
        store: Arc<dyn ObjectStore>,
        path: String,
        location: Location,
        options: SlateOptions,
    ) -> Result<SlateEngine> {
        let settings = writer_settings(&options);
        let store = reached(store, &options);
        let held = !matches!(location, Location::Memory);
        let record = holder::record_path(&path);
        let shown = location.to_string();
        let generation = if held {
            holder::check(store.as_ref(), &record, &shown, options.takeover).await?
        } else {
            0
        };
        // The record is claimed before the database opens, so that a standby watching it sees
        // the store taken at once rather than after the open's round trips; a takeover then
        // makes sure no other standby claimed it in the same moment.
        let claim = if held {
            let claim =
                holder::Claim::start(store.clone(), record, shown, generation, options.lease)
                    .await?;
            if options.takeover && options.confirm_claim {
                if let Err(e) = claim.confirm().await {
                    claim.release().await;
                    return Err(e);
                }
            }
            Some(claim)
        } else {
            None
        };
        let metrics = Arc::new(DefaultMetricsRecorder::new());
        let opened = Db::builder(path, store.clone())
            .with_settings(settings)
            .with_metrics_recorder(metrics.clone())
            .build()
            .await
            .map_err(|e| map_err("opening the database", e));
        let db = match opened {
            Ok(db) => db,
            Err(e) => {
                if let Some(claim) = &claim {
                    claim.release().await;
                }
                return Err(e);
            }
        };
        Ok(SlateEngine {
            db,
            metrics,
            location,
            claim,
            closed: AtomicBool::new(false),
            skip_sync: AtomicBool::new(false),
        })
    }

    /// `r`, after giving this writer's lease up if `r` says SlateDB fenced it: a successor
    /// opened the store, so this writer must stop answering as its writer at once.
    fn noticing<T>(&self, r: Result<T>) -> Result<T> {
        if let (Err(Error::Fenced { .. }), Some(claim)) = (&r, &self.claim) {
            claim
                .lease()
                .lose("SlateDB fenced this writer: another writer opened the store");
        }
        r
    }

    /// The SlateDB handle underneath, for benchmarks that compare against raw SlateDB calls.
    /// Writing through it bypasses RockLake's preconditions and fencing.
    pub fn raw_db(&self) -> &Db {
        &self.db
    }

    /// Where this store lives.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Test-only: make [`Engine::sync`] do nothing, to show that the sync-evidence test
    /// catches a durable commit that skips the sync. Never use it on a real store.
    #[doc(hidden)]
    pub fn skip_syncs_for_tests(&self, skip: bool) {
        self.skip_sync.store(skip, AtomicOrdering::SeqCst);
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(AtomicOrdering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }
}

pub(crate) async fn scan_iter(
    iter: std::result::Result<slatedb::DbIterator, slatedb::Error>,
    limit: usize,
) -> Result<Vec<KvPair>> {
    let mut iter = iter.map_err(|e| map_err("starting a scan", e))?;
    let mut out = Vec::with_capacity(limit.min(1024));
    while out.len() < limit {
        match iter.next().await.map_err(|e| map_err("scanning", e))? {
            Some(kv) => out.push((kv.key, kv.value)),
            None => break,
        }
    }
    Ok(out)
}

pub(crate) fn scan_options(order: Order) -> ScanOptions {
    ScanOptions {
        order: match order {
            Order::Ascending => IterationOrder::Ascending,
            Order::Descending => IterationOrder::Descending,
        },
        cache_blocks: true,
        ..ScanOptions::default()
    }
}

pub(crate) fn bounds(range: &KeyRange) -> (Bound<Bytes>, Bound<Bytes>) {
    (range.start.clone(), range.end.clone())
}

#[async_trait]
impl ReadView for SlateEngine {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.check_open()?;
        self.db
            .get(key)
            .await
            .map_err(|e| map_err("reading a key", e))
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        self.check_open()?;
        if range.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        scan_iter(
            self.db
                .scan_with_options(bounds(range), &scan_options(order))
                .await,
            limit,
        )
        .await
    }
}

/// A SlateDB snapshot: the point-in-time view.
struct SlateView(Arc<DbSnapshot>);

#[async_trait]
impl ReadView for SlateView {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.0
            .get(key)
            .await
            .map_err(|e| map_err("reading a key from a snapshot", e))
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        if range.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        scan_iter(
            self.0
                .scan_with_options(bounds(range), &scan_options(order))
                .await,
            limit,
        )
        .await
    }
}

#[async_trait]
impl Engine for SlateEngine {
    fn name(&self) -> &'static str {
        "slatedb"
    }

    fn stats(&self) -> Vec<EngineStat> {
        self.metrics
            .snapshot()
            .all()
            .iter()
            .map(|m| EngineStat {
                name: m.name.clone(),
                labels: m.labels.clone(),
                help: m.description.clone(),
                value: match &m.value {
                    MetricValue::Counter(v) => StatValue::Counter(*v),
                    MetricValue::Gauge(v) | MetricValue::UpDownCounter(v) => {
                        StatValue::Gauge(*v as f64)
                    }
                    MetricValue::Histogram {
                        count,
                        sum,
                        boundaries,
                        bucket_counts,
                        ..
                    } => StatValue::Histogram {
                        count: *count,
                        sum: *sum,
                        bounds: boundaries.clone(),
                        counts: bucket_counts.clone(),
                    },
                },
            })
            .collect()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            persistent: !matches!(self.location, Location::Memory),
            exclusive_open: false,
            fences_on_open: true,
            point_in_time_views: true,
        }
    }

    async fn apply(&self, ops: Vec<BatchOp>) -> Result<()> {
        self.check_open()?;
        let mut wb = slatedb::WriteBatch::new();
        for op in &ops {
            match op {
                BatchOp::Put(k, v) => wb.put(k, v),
                BatchOp::Delete(k) => wb.delete(k),
            }
        }
        let written = self
            .db
            .write(wb)
            .await
            .map(drop)
            .map_err(|e| map_err("writing a batch", e));
        self.noticing(written)
    }

    /// SlateDB can be made to write its memtable out as an L0 table, not to merge on demand:
    /// its compactor merges L0 tables into sorted runs on its own schedule.
    async fn compact(&self) -> Result<bool> {
        self.check_open()?;
        self.db
            .flush_with_options(slatedb::config::FlushOptions {
                flush_type: slatedb::config::FlushType::MemTable,
            })
            .await
            .map_err(|e| map_err("writing the memtable out", e))?;
        Ok(true)
    }

    async fn sync(&self) -> Result<()> {
        self.check_open()?;
        if self.skip_sync.load(AtomicOrdering::SeqCst) {
            return Ok(());
        }
        let flushed = self
            .db
            .flush()
            .await
            .map_err(|e| map_err("flushing the WAL", e));
        self.noticing(flushed)
    }

    fn lease(&self) -> Option<Arc<rocklake_core::lease::Lease>> {
        self.claim.as_ref().map(|c| c.lease().clone())
    }

    async fn snapshot(&self) -> Result<Option<Arc<dyn ReadView>>> {
        self.check_open()?;
        let snap = self
            .db
            .snapshot()
            .map_err(|e| map_err("taking a snapshot", e))?;
        Ok(Some(Arc::new(SlateView(snap))))
    }

    async fn close(&self) -> Result<()> {
        if self.closed.swap(true, AtomicOrdering::AcqRel) {
            return Ok(());
        }
        let closed = self.db.close().await;
        if let Some(claim) = &self.claim {
            claim.release().await;
        }
        match closed {
            Ok(()) => Ok(()),
            Err(e) => match map_err("closing the database", e) {
                Error::Closed => Ok(()),
                other => Err(other),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compaction_timings_reach_the_compactor_and_its_worker() {
        let defaults = writer_settings(&SlateOptions::default());
        let compactor = defaults.compactor_options.expect("an embedded compactor");
        let worker = compactor.worker.expect("an embedded worker");
        assert_eq!(compactor.poll_interval, Duration::from_secs(5));
        assert_eq!(worker.compactions_poll_interval, Duration::from_secs(5));
        assert_eq!(compactor.worker_heartbeat_timeout, Duration::from_secs(30));

        let set = writer_settings(&SlateOptions {
            compactor_poll_interval: Some(Duration::from_millis(200)),
            compaction_heartbeat_timeout: Some(Duration::from_secs(3)),
            ..SlateOptions::default()
        });
        let compactor = set.compactor_options.expect("an embedded compactor");
        let worker = compactor.worker.expect("an embedded worker");
        assert_eq!(compactor.poll_interval, Duration::from_millis(200));
        assert_eq!(worker.compactions_poll_interval, Duration::from_millis(200));
        assert_eq!(compactor.worker_heartbeat_timeout, Duration::from_secs(3));
        assert_eq!(worker.heartbeat_interval, Duration::from_secs(1));
    }

    #[test]
    fn urls_parse_into_locations() {
        assert_eq!(parse_url("memory://").unwrap().0, Location::Memory);
        assert_eq!(
            parse_url("file:///tmp/x").unwrap().0,
            Location::Folder("/tmp/x".into())
        );
        assert_eq!(
            parse_url("s3://bucket/a/b").unwrap().0,
            Location::S3 {
                bucket: "bucket".into(),
                prefix: "a/b".into()
            }
        );
        let (_, o) = parse_url("memory://?flush_interval_ms=20").unwrap();
        assert_eq!(o.flush_interval, Duration::from_millis(20));
        assert_eq!(o.poll_interval, DEFAULT_POLL_INTERVAL);
        assert!(o.reader_checkpoint);
        let (_, o) = parse_url("file:///tmp/x?poll_ms=250&checkpoint=none").unwrap();
        assert_eq!(o.poll_interval, Duration::from_millis(250));
        assert!(!o.reader_checkpoint);
        assert_eq!(o.simulate_latency, None);
        let (_, o) = parse_url("s3://b/p?simulate_latency_ms=20").unwrap();
        assert_eq!(o.simulate_latency, Some(Duration::from_millis(20)));
        for (url, says) in [
            ("memory://?poll_ms=0", "poll_ms must be at least 1"),
            (
                "memory://?simulate_latency_ms=0",
                "simulate_latency_ms must be at least 1",
            ),
            ("memory://?simulate_latency_ms=20ms", "is not a number"),
            ("memory://?poll_ms=soon", "is not a number"),
            (
                "memory://?checkpoint=always",
                "use checkpoint=managed or checkpoint=none",
            ),
        ] {
            let e = parse_url(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
        }
        assert!(parse_url("memory://?bogus=1")
            .unwrap_err()
            .to_string()
            .contains("unknown option"));
        assert!(parse_url("file://relative").is_err());
        assert!(parse_url("ftp://x")
            .unwrap_err()
            .to_string()
            .contains("not ftp://"));
    }
}
