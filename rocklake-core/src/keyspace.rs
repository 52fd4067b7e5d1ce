//! The key space: a [`KvBackend`] opened for RockLake, with a writer epoch and id spaces
//! ([`Keyspace`]). It is what a catalog (DuckLake's, through the SQL layer) is stored in.
//!
//! Opening a key space for writing raises the writer epoch (`0xFF "writer-epoch"`). Every
//! commit of that writer carries the precondition "the epoch is still mine", checked by the
//! engine atomically with the batch; once another writer has opened the store, every commit of
//! the older one is refused [`Error::Fenced`] and nothing of it lands.
//!
//! Issuing ids follows [`crate::keystone`]'s rules (when to reserve, how far, exhaustion); this
//! module only writes the reservations it asks for, as this writer, under the commit lock.
//!
//! What a key space does is spread over modules that each add to [`Keyspace`] and import this one
//! (this one imports none of them): [`crate::txn`] (`begin`), [`crate::reader`] (`reader`),
//! [`crate::maintenance`] (retain-from, PURGE, GC) and [`crate::info`] (`info`).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::Notify;

use crate::backend::{Durability, KeyRange, KvBackend, Order, ReadView, ReadViewExt, WriteBatch};
use crate::error::{Error, Result};
use crate::group_commit::GroupCommit;
use crate::keys;
use crate::keystone::{Budget, IdSpace, SpaceDescription, SpaceState, DEFAULT_RESERVATION, SPACES};
use crate::tags::{self, system};
use crate::values::{self, Binding};

/// The catalog format this binary writes and reads.
pub const FORMAT_VERSION: u64 = 1;

/// Called between drawing an issued key and placing it: lets a test (or a fault injector) name
/// the drawn key from another session at exactly that moment.
pub type DrawHook = Arc<dyn Fn(&'static IdSpace, u64) -> BoxFuture<'static, ()> + Send + Sync>;

/// Where a view stands among this writer's changes: the number of batches that may change a
/// key a transaction reads (commits, maintenance; not id reservations) written before the view
/// was taken. Every one of them is in the view. While the key space's count is still the view's
/// mark, the store holds exactly what the view holds, so a transaction whose preconditions are
/// all values it read from its view (or from the store since) has nothing to check at its
/// commit ([`Keyspace::commit_batch_read_at`]) and a read of the store would answer what the
/// view answers ([`Keyspace::unchanged_since`]). One writer writes a store (others are
/// fenced), so its own count is the store's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViewMark(u64);

/// The view the last completed flush left (see [`Inner::flushed_view`]).
pub(crate) struct FlushedView {
    /// The number of the last batch it holds.
    upto: u64,
    mark: ViewMark,
    view: Arc<dyn ReadView>,
}

/// How a catalog behaves.
#[derive(Clone)]
pub struct KeyspaceOptions {
    /// Durability of commits (default: durable).
    pub durability: Durability,
    /// Ids reserved per durable counter write (default 1024). 1 writes the counter for every
    /// issued id.
    pub id_reservation: u64,
    /// How long PURGE waits for older readers before refusing with a retryable conflict
    /// (default 1 s).
    pub purge_wait: Duration,
    /// See [`DrawHook`].
    pub draw_hook: Option<DrawHook>,
    /// Where snapshot times and audit times come from (default: [`system_clock`]).
    pub clock: Clock,
    /// Refuse everything once the engine's writer lease has run out (default: true), so that a
    /// standby may take the store over. A writer no standby watches sets it false: a lapse
    /// (a process starved of CPU past its lease) would otherwise leave it refusing everything
    /// until restarted, though no one took its store; the store's fencing still refuses its
    /// commits if another writer ever does.
    pub steps_down_on_lapse: bool,
}

impl Default for KeyspaceOptions {
    fn default() -> Self {
        KeyspaceOptions {
            durability: Durability::Durable,
            id_reservation: DEFAULT_RESERVATION,
            purge_wait: Duration::from_secs(1),
            draw_hook: None,
            clock: system_clock(),
            steps_down_on_lapse: true,
        }
    }
}

impl fmt::Debug for KeyspaceOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyspaceOptions")
            .field("durability", &self.durability)
            .field("id_reservation", &self.id_reservation)
            .field("purge_wait", &self.purge_wait)
            .field("draw_hook", &self.draw_hook.is_some())
            .finish()
    }
}

/// The snapshots of the open readers, by reader number: PURGE and GC wait for them.
#[derive(Debug, Default)]
pub(crate) struct Readers {
    pub(crate) next: u64,
    pub(crate) open: BTreeMap<u64, u64>,
}

pub(crate) struct Inner {
    pub(crate) backend: Arc<dyn KvBackend>,
    /// `Some(epoch)` for a writer.
    pub(crate) epoch: Option<u64>,
    pub(crate) options: KeyspaceOptions,
    pub(crate) spaces: Vec<SpaceState>,
    pub(crate) commit_lock: tokio::sync::Mutex<()>,
    pub(crate) group: GroupCommit,
    /// Keys placed by open transactions: (space code, id) -> how many.
    pub(crate) placed: Mutex<HashMap<(u8, u64), u32>>,
    pub(crate) readers: Mutex<Readers>,
    pub(crate) readers_changed: Notify,
    pub(crate) closed: AtomicBool,
    /// The highest snapshot id committed through this catalog or found at open: no commit may
    /// land at or below it (see [`Transaction`]'s "Snapshot order"). Read and raised under the
    /// commit lock.
    pub(crate) published: AtomicU64,
    /// A view taken just before the last completed flush of the commits (see
    /// [`Keyspace::committed_view`]), with the number of the last batch it holds (every batch
    /// in it is durable) and its [`ViewMark`].
    pub(crate) flushed_view: Mutex<Option<FlushedView>>,
    /// How many batches this writer has written that may change a key a transaction reads
    /// (every fenced write but an id reservation's), counted after each write, under the
    /// commit lock: see [`ViewMark`].
    pub(crate) changes: AtomicU64,
    /// A writer's lease on its store, where its engine keeps one ([`KvBackend::lease`]):
    /// checked before every view a transaction or reader takes and before every write.
    pub(crate) lease: Option<Arc<crate::lease::Lease>>,
}

/// A catalog over any [`KvBackend`]. Cheap to clone; clones share one writer identity.
#[derive(Clone)]
pub struct Keyspace {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for Keyspace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyspace")
            .field("engine", &self.inner.backend.engine())
            .field("epoch", &self.inner.epoch)
            .finish()
    }
}

pub(crate) fn epoch_key() -> Vec<u8> {
    sys_key(system::WRITER_EPOCH)
}

pub(crate) fn sys_key(name: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + name.len());
    v.push(tags::SYSTEM.0);
    v.extend_from_slice(name.as_bytes());
    v
}

pub(crate) async fn read_u64(view: &dyn ReadView, key: &[u8]) -> Result<Option<u64>> {
    match view.get(key).await? {
        Some(v) => Ok(Some(values::decode_u64(key, &v)?)),
        None => Ok(None),
    }
}

/// Microseconds since the Unix epoch, for snapshot times and audit entries. Injected through
/// [`KeyspaceOptions::clock`] so tests can fix time.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The system clock: the default [`Clock`].
pub fn system_clock() -> Clock {
    Arc::new(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as i64)
            .unwrap_or(0)
    })
}

/// What a key space's commits have done since it opened ([`Keyspace::commit_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Commits applied (batches that wrote something), durable or not yet.
    pub applied: u64,
    /// Of those, the ones made durable so far (every batch numbered up to this).
    pub durable: u64,
    /// The durable flushes and how many commits each covered (group commit).
    pub flushes: crate::group_commit::FlushStats,
}

impl Keyspace {
    /// Open for writing with default options: initialise an empty store, raise the writer
    /// epoch (fencing any older writer) and load the id spaces.
    pub async fn open(backend: Arc<dyn KvBackend>) -> Result<Keyspace> {
        Keyspace::open_with(backend, KeyspaceOptions::default()).await
    }

    /// Open for writing with `options`.
    pub async fn open_with(
        backend: Arc<dyn KvBackend>,
        options: KeyspaceOptions,
    ) -> Result<Keyspace> {
        if options.id_reservation == 0 {
            return Err(Error::InvalidArgument(
                "id_reservation must be at least 1".into(),
            ));
        }
        let ekey = epoch_key();
        let fkey = sys_key(system::FORMAT_VERSION);
        let mut attempts = 0;
        let epoch = loop {
            attempts += 1;
            let format = read_u64(backend.as_ref(), &fkey).await?;
            check_format(format)?;
            if format.is_none() {
                refuse_unfinished_copy(backend.as_ref()).await?;
            }
            let old = backend.get(&ekey).await?;
            let current = match &old {
                Some(v) => values::decode_u64(&ekey, v)?,
                None => 0,
            };
            let next = current + 1;
            let mut batch = WriteBatch::new();
            batch.expect(ekey.clone(), old.clone());
            batch.put(
                ekey.clone(),
                Bytes::copy_from_slice(&values::encode_u64(next)),
            );
            if format.is_none() {
                batch.expect(fkey.clone(), None);
                batch.put(
                    fkey.clone(),
                    Bytes::copy_from_slice(&values::encode_u64(FORMAT_VERSION)),
                );
            }
            match backend.write(batch, Durability::Durable).await {
                Ok(()) => break next,
                // Another opener raised the epoch between our read and our write: read again.
                Err(Error::ConditionFailed { .. }) if attempts < 16 => continue,
                Err(e) => return Err(e),
            }
        };
        Keyspace::assemble(backend, Some(epoch), options).await
    }

    /// Open read-only: no epoch change, every write refused.
    pub async fn open_read_only(backend: Arc<dyn KvBackend>) -> Result<Keyspace> {
        let format = read_u64(backend.as_ref(), &sys_key(system::FORMAT_VERSION)).await?;
        check_format(format)?;
        if format.is_none() {
            refuse_unfinished_copy(backend.as_ref()).await?;
        }
        Keyspace::assemble(backend, None, KeyspaceOptions::default()).await
    }

    async fn assemble(
        backend: Arc<dyn KvBackend>,
        epoch: Option<u64>,
        options: KeyspaceOptions,
    ) -> Result<Keyspace> {
        let mut spaces = Vec::with_capacity(SPACES.len());
        for space in SPACES {
            let stored = read_u64(backend.as_ref(), &space.counter_key()).await?;
            spaces.push(SpaceState::new(space, stored.unwrap_or(1)));
        }
        let published = current_snapshot_in(backend.as_ref()).await?;
        let steps_down = options.steps_down_on_lapse;
        Ok(Keyspace {
            inner: Arc::new(Inner {
                epoch,
                options,
                spaces,
                commit_lock: tokio::sync::Mutex::new(()),
                group: GroupCommit::default(),
                placed: Mutex::new(HashMap::new()),
                readers: Mutex::new(Readers::default()),
                readers_changed: Notify::new(),
                closed: AtomicBool::new(false),
                published: AtomicU64::new(published),
                flushed_view: Mutex::new(None),
                changes: AtomicU64::new(0),
                lease: epoch.filter(|_| steps_down).and_then(|_| {
                    let lease = backend.lease()?;
                    lease.will_step_down();
                    Some(lease)
                }),
                backend,
            }),
        })
    }

    /// The backend underneath.
    pub fn backend(&self) -> &Arc<dyn KvBackend> {
        &self.inner.backend
    }

    /// What this key space's commits have done since it opened (for a server's metrics).
    pub fn commit_stats(&self) -> CommitStats {
        let group = &self.inner.group;
        CommitStats {
            applied: group.last_applied(),
            durable: group.durable(),
            flushes: group.flush_stats(),
        }
    }

    /// The writer epoch held, `None` when read-only.
    pub fn epoch(&self) -> Option<u64> {
        self.inner.epoch
    }

    /// The options in force.
    pub fn options(&self) -> &KeyspaceOptions {
        &self.inner.options
    }

    /// Now, by the catalog's [`Clock`], in microseconds since the Unix epoch.
    pub fn now_micros(&self) -> i64 {
        (self.inner.options.clock)()
    }

    /// This writer's lease on its store, where its engine keeps one (see [`crate::lease`]).
    pub fn lease(&self) -> Option<&Arc<crate::lease::Lease>> {
        self.inner.lease.as_ref()
    }

    /// The writer epoch the store holds now, for a fenced writer's refusal (0 when it cannot be
    /// read: the engine may refuse a fenced writer's reads too).
    async fn epoch_in_store(&self) -> u64 {
        read_u64(self.inner.backend.as_ref(), &epoch_key())
            .await
            .ok()
            .flatten()
            .unwrap_or(0)
    }

    /// `Ok` unless this writer's lease on its store has lapsed. Given up to a successor that
    /// took the store over, it is refused as [`Error::Fenced`], as the store itself refuses
    /// such a writer; only run out, as [`Error::LeaseLapsed`].
    async fn check_lease(&self) -> Result<()> {
        let Some(lease) = &self.inner.lease else {
            return Ok(());
        };
        let Err(lapsed) = lease.check() else {
            return Ok(());
        };
        if !lease.taken_over() {
            return Err(lapsed);
        }
        let current = self.epoch_in_store().await;
        Err(Error::Fenced {
            mine: self.inner.epoch.unwrap_or(0),
            current,
            detail: format!(": {lapsed}"),
        })
    }

    pub(crate) fn writer_epoch(&self) -> Result<u64> {
        if self.inner.closed.load(AtomicOrdering::Acquire) {
            return Err(Error::Closed);
        }
        self.inner.epoch.ok_or_else(|| {
            Error::PermissionDenied("this catalog was opened read-only; open it for writing".into())
        })
    }

    pub(crate) fn state(&self, space: &IdSpace) -> Result<&SpaceState> {
        self.inner
            .spaces
            .iter()
            // One byte per space (its table's tag), unique among the spaces: no string compare.
            .find(|s| s.space.code() == space.code())
            .ok_or_else(|| Error::NotFound(format!("id space {:?} is not known", space.name)))
    }

    /// Write `batch` as this writer: adds the epoch precondition and maps a failed
    /// precondition on the epoch to [`Error::Fenced`]. Callers hold the commit lock.
    ///
    /// Counted as a change for [`ViewMark`] whatever the outcome (an engine's error may leave
    /// the store's state unknown).
    pub(crate) async fn write_fenced(
        &self,
        batch: WriteBatch,
        durability: Durability,
    ) -> Result<()> {
        let written = self.write_fenced_uncounted(batch, durability).await;
        self.inner.changes.fetch_add(1, AtomicOrdering::Release);
        written
    }

    /// [`Keyspace::write_fenced`] for a batch that changes no key a transaction reads or
    /// expects (an id space's counter, which only Keystone reads): not counted as a change.
    async fn write_fenced_uncounted(
        &self,
        mut batch: WriteBatch,
        durability: Durability,
    ) -> Result<()> {
        let epoch = self.writer_epoch()?;
        self.check_lease().await?;
        let ekey = epoch_key();
        batch.expect(
            ekey.clone(),
            Some(Bytes::copy_from_slice(&values::encode_u64(epoch))),
        );
        match self.inner.backend.write(batch, durability).await {
            Ok(()) => Ok(()),
            Err(Error::ConditionFailed { raw_key, .. }) if raw_key == ekey => {
                let current = self.epoch_in_store().await;
                Err(Error::Fenced {
                    mine: epoch,
                    current,
                    detail: String::new(),
                })
            }
            Err(Error::Fenced {
                current, detail, ..
            }) => Err(Error::Fenced {
                mine: epoch,
                current,
                detail,
            }),
            Err(e) => Err(e),
        }
    }

    /// A point-in-time view of the store as a reader may see it: every commit acknowledged
    /// before this call, and no commit that a flush has not yet made durable. PostgreSQL's
    /// readers likewise see a commit only once its WAL record is flushed, so a reader never
    /// builds on a commit that a crash, or a failed flush, then takes back.
    ///
    /// Costs a view and a few atomic loads when no commit is between its apply and its flush.
    /// While a flush is under way, the view the last completed flush left is lent instead (it
    /// holds every acknowledged commit and nothing else). Otherwise (before any flush left
    /// one, in the moment between a commit's apply and its flush, or after a flush failed)
    /// this flushes, or joins the flush, that makes everything in its view durable, and fails
    /// with that flush's error: a commit whose flush failed is never seen unless a later flush
    /// makes it durable.
    /// With [`Durability::Buffered`] a commit is visible once applied, as that mode promises.
    pub async fn committed_view(&self) -> Result<Arc<dyn ReadView>> {
        Ok(self.committed_view_marked().await?.0)
    }

    /// [`Keyspace::committed_view`] with its [`ViewMark`].
    pub async fn committed_view_marked(&self) -> Result<(Arc<dyn ReadView>, ViewMark)> {
        self.check_lease().await?;
        // Read before the view is taken: every change counted by then is in the view.
        let mark = self.mark();
        let view = self.inner.backend.view().await?;
        if self.inner.options.durability != Durability::Durable {
            return Ok((view, mark));
        }
        let group = &self.inner.group;
        // Numbers are handed out before a batch is applied, so every batch this view may hold
        // is numbered at most `seen`.
        let seen = group.started();
        let acknowledged = group.durable();
        if acknowledged >= seen {
            return Ok((view, mark));
        }
        if group.flushing() {
            if let Some(kept) = &*self.lock_flushed_view() {
                if kept.upto >= acknowledged {
                    return Ok((kept.view.clone(), kept.mark));
                }
            }
        }
        if group.last_applied() < seen {
            // A batch is being applied under the commit lock: a flush covers it only after.
            drop(self.inner.commit_lock.lock().await);
        }
        group.wait_durable(seen, || self.flush_committed()).await?;
        Ok((view, mark))
    }

    /// This writer's count of changes now: see [`ViewMark`].
    fn mark(&self) -> ViewMark {
        ViewMark(self.inner.changes.load(AtomicOrdering::Acquire))
    }

    /// Whether this writer has written no change since the view marked `mark` was taken, so
    /// that the store holds what that view holds: a read of the store now would answer what
    /// the view answers. Without the commit lock that is only true of the moment of the call
    /// (a commit may land right after it), as a read of the store would be.
    pub fn unchanged_since(&self, mark: ViewMark) -> bool {
        self.mark() == mark
    }

    fn lock_flushed_view(&self) -> std::sync::MutexGuard<'_, Option<FlushedView>> {
        self.inner
            .flushed_view
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The group commit's flush of this key space's commits: a view of every batch applied so
    /// far is taken first, and kept for [`Keyspace::committed_view`] once the flush has made
    /// all of it durable (a failed flush keeps the older one).
    pub(crate) async fn flush_committed(&self) -> Result<()> {
        let (upto, mark, view) = {
            let _guard = self.inner.commit_lock.lock().await;
            (
                self.inner.group.last_applied(),
                self.mark(),
                self.inner.backend.view().await?,
            )
        };
        self.flush_as_writer().await?;
        // Leaders flush one at a time and `upto` is read under the commit lock, so each kept
        // view is newer than the one it replaces. The old one is dropped outside the lock:
        // releasing an engine's snapshot may take its own locks.
        let replaced = self
            .lock_flushed_view()
            .replace(FlushedView { upto, mark, view });
        drop(replaced);
        Ok(())
    }

    /// Flush the backend; a fencing it reports names this writer's epoch.
    pub(crate) async fn flush_as_writer(&self) -> Result<()> {
        match self.inner.backend.flush().await {
            Err(Error::Fenced {
                current, detail, ..
            }) => Err(Error::Fenced {
                mine: self.inner.epoch.unwrap_or(0),
                current,
                detail,
            }),
            other => other,
        }
    }

    /// Issue the next key of `space`: strictly ascending across all tasks, never issued twice.
    /// Costs no I/O while the durable reservation lasts.
    pub async fn issue_id(&self, space: &'static IdSpace) -> Result<u64> {
        self.writer_epoch()?;
        let st = self.state(space)?;
        loop {
            if let Some(id) = st.try_issue()? {
                return Ok(id);
            }
            let _guard = self.inner.commit_lock.lock().await;
            self.reserve_locked(st).await?;
        }
    }

    /// Write the next reservation of `st` if its current one is used up (Keystone decides:
    /// [`SpaceState::next_reservation`]). Callers hold the commit lock.
    pub(crate) async fn reserve_locked(&self, st: &SpaceState) -> Result<()> {
        if let Some((batch, ceiling)) = st.next_reservation(self.inner.options.id_reservation)? {
            // Reservations are always durable: an id must never be issued twice after a crash.
            // A counter no transaction reads: not a change for `ViewMark`.
            self.write_fenced_uncounted(batch, Durability::Durable)
                .await?;
            st.raise_ceiling(ceiling);
        }
        Ok(())
    }

    /// The highest snapshot id in the catalog (0 when there is none).
    pub async fn current_snapshot(&self) -> Result<u64> {
        current_snapshot_in(self.inner.backend.as_ref()).await
    }

    /// The snapshot of the oldest open [`crate::reader::Reader`], if any.
    pub(crate) fn oldest_reader(&self) -> Option<u64> {
        let r = self.inner.readers.lock().unwrap_or_else(|e| e.into_inner());
        r.open.values().min().copied()
    }

    /// DESCRIBE one id space. A writer reports its live mark; a read-only catalog the stored one.
    pub async fn describe(&self, space: &'static IdSpace) -> Result<SpaceDescription> {
        let mark = match self.inner.epoch {
            Some(_) => self.state(space)?.marks().mark,
            None => read_u64(self.inner.backend.as_ref(), &space.counter_key())
                .await?
                .unwrap_or(1),
        };
        Ok(SpaceDescription::new(space, mark))
    }

    /// SHOW BUDGET over every id space.
    pub async fn budget(&self) -> Result<Budget> {
        let mut out = Vec::with_capacity(SPACES.len());
        for s in SPACES {
            out.push(self.describe(s).await?);
        }
        Ok(Budget::new(out))
    }

    /// Read the binding of `id` (from the live store).
    pub async fn binding(&self, space: &IdSpace, id: u64) -> Result<Option<Binding>> {
        let key = space.binding_key(id);
        match self.inner.backend.get(&key).await? {
            Some(v) => Ok(Some(Binding::decode_at(&key, &v)?)),
            None => Ok(None),
        }
    }

    /// Flush, write the exact marks back over unused reservations (so a reopened catalog shows
    /// the same `next_id`), and close the backend.
    pub async fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, AtomicOrdering::AcqRel) {
            return Ok(());
        }
        // First, whatever happens below: a kept view may hold the store open (a RocksDB
        // snapshot keeps its DB, and so its lock file, until dropped).
        let kept = self.lock_flushed_view().take();
        drop(kept);
        if let Some(epoch) = self.inner.epoch {
            let _guard = self.inner.commit_lock.lock().await;
            let mut batch = WriteBatch::new();
            for st in &self.inner.spaces {
                // Frozen before it is read: an `issue_id` racing this close either got its id
                // before (and the mark written back is above it) or is refused `Closed`.
                let m = st.freeze();
                if m.ceiling > m.mark {
                    batch.put(
                        st.space.counter_key(),
                        Bytes::copy_from_slice(&values::encode_u64(m.mark)),
                    );
                }
            }
            if !batch.ops.is_empty() {
                batch.expect(
                    epoch_key(),
                    Some(Bytes::copy_from_slice(&values::encode_u64(epoch))),
                );
                match self.inner.backend.write(batch, Durability::Durable).await {
                    Ok(()) => {}
                    // Fenced: the newer writer owns the counters now; our reservation stays a gap.
                    Err(Error::ConditionFailed { .. }) | Err(Error::Fenced { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.inner.backend.close().await
    }
}

/// Refuse a store that has no format version but holds keys: the mark of a copy that did not
/// finish (`crate::copy` writes the format version last). Called by every open that found no format version.
async fn refuse_unfinished_copy(view: &dyn ReadView) -> Result<()> {
    if let Some((key, _)) = view.first(&KeyRange::all(), Order::Ascending).await? {
        return Err(Error::InvalidArgument(format!(
            "the store holds keys (the first is {}) but no format version: a copy into it (rocklake backup or restore) did not finish; remove the store and copy again",
            crate::keys::render(&key)
        )));
    }
    Ok(())
}

fn check_format(format: Option<u64>) -> Result<()> {
    match format {
        Some(v) if v > FORMAT_VERSION => Err(Error::Unsupported(format!(
            "catalog format version {v} is newer than this binary understands ({FORMAT_VERSION}); upgrade RockLake"
        ))),
        _ => Ok(()),
    }
}

/// Refuse a read at `snapshot` when it lies below the `retain-from` floor of `view`: GC may
/// already have removed versions such a reader would see, so its answer could be wrong.
/// [`Error::OutOfRange`] names the snapshot and the floor. Every snapshot read of the API
/// ([`Keyspace::reader`]) and of the command line (`scan --at`) goes through this.
pub async fn check_readable_at(view: &dyn ReadView, snapshot: u64) -> Result<()> {
    let floor = read_u64(view, &sys_key(system::RETAIN_FROM))
        .await?
        .unwrap_or(0);
    if snapshot < floor {
        return Err(Error::OutOfRange {
            message: format!(
                "snapshot {snapshot} is below retain-from {floor}: versions a reader at it would \
                 see may have been garbage-collected; read at snapshot {floor} or later"
            ),
        });
    }
    Ok(())
}

/// The highest snapshot id in a view (0 when there is none).
pub async fn current_snapshot_in(view: &dyn ReadView) -> Result<u64> {
    let range = KeyRange::prefix(&[tags::SNAPSHOT.0]);
    match view.scan(&range, Order::Descending, 1).await?.first() {
        Some((k, _)) => Ok(<keys::SnapshotKey as keys::RowKey>::from_bytes(k)?.snapshot_id),
        None => Ok(0),
    }
}
