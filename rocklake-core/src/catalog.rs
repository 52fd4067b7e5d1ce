//! The catalog: a [`KvBackend`] with a writer epoch, id spaces, readers, PURGE and GC.
//!
//! Opening a catalog for writing raises the writer epoch (`0xFF "writer-epoch"`). Every commit
//! of that writer carries the precondition "the epoch is still mine", checked by the engine
//! atomically with the batch; once another writer has opened the catalog, every commit of the
//! older one is refused [`Error::Fenced`] and nothing of it lands.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::future::BoxFuture;
use prost::Message;
use tokio::sync::Notify;

use crate::backend::{
    visit_all, Durability, KeyRange, KvBackend, Order, Pager, ReadView, WriteBatch,
};
use crate::error::{Error, Result};
use crate::keys::{self, AuditKey, Key};
use crate::keystone::{
    self, Budget, IdSpace, SpaceDescription, SpaceState, DEFAULT_RESERVATION, MAX_ID, SPACES,
};
use crate::tags::{self, system, ValueKind};
use crate::txn::Transaction;
use crate::values::{self, AuditEntry, Binding, Row, RowView};

/// Shares durability barriers between commits that arrive together.
///
/// Commits are applied one at a time under the commit lock and numbered; a committer then waits
/// for a flush that started after its batch was applied. One committer at a time leads: it
/// flushes everything applied so far and then wakes every waiter at once; those it covered
/// return, the rest elect the next leader. (A queue on a mutex instead would hand the lock from
/// waiter to waiter, one task switch each, before the next flush could start.)
#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    /// Transactions begun and not yet applied or dropped (including those queued on the commit
    /// lock): a leader gives them a few turns before it flushes.
    building: std::sync::atomic::AtomicUsize,
    applied: std::sync::atomic::AtomicU64,
    /// Every batch numbered up to this is durable.
    durable: std::sync::atomic::AtomicU64,
    /// Set while a leader flushes.
    leading: AtomicBool,
    /// Woken when a leader finishes (or gives up).
    done: Notify,
}

/// How many times a flush leader yields to transactions still being built or queued before it
/// flushes without them.
const MAX_LEADER_YIELDS: usize = 16;

/// Leadership of a [`GroupCommit`]: released, and the waiters woken, when dropped (also when a
/// leader's future is dropped mid-flush).
struct Leading<'a>(&'a GroupCommit);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.0.leading.store(false, AtomicOrdering::Release);
        self.0.done.notify_waiters();
    }
}

impl GroupCommit {
    /// A transaction began: count it as building.
    pub(crate) fn building(&self) {
        self.building.fetch_add(1, AtomicOrdering::AcqRel);
    }

    /// A transaction counted by [`GroupCommit::building`] applied or was dropped.
    pub(crate) fn built(&self) {
        self.building.fetch_sub(1, AtomicOrdering::AcqRel);
    }

    /// Number the batch just applied (call under the commit lock).
    pub(crate) fn applied(&self) -> u64 {
        self.applied.fetch_add(1, AtomicOrdering::AcqRel) + 1
    }

    /// Return once batch `seq` is durable.
    pub(crate) async fn wait_durable(&self, seq: u64, cat: &Catalog) -> Result<()> {
        loop {
            if self.durable.load(AtomicOrdering::Acquire) >= seq {
                return Ok(());
            }
            // Registered before looking again, so a leader finishing in between still wakes us.
            let finished = self.done.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            if self.durable.load(AtomicOrdering::Acquire) >= seq {
                return Ok(());
            }
            if self
                .leading
                .compare_exchange(false, true, AtomicOrdering::AcqRel, AtomicOrdering::Acquire)
                .is_err()
            {
                finished.await;
                continue;
            }
            let _leading = Leading(self);
            // Transactions being built or queued on the commit lock apply in microseconds;
            // letting them go first puts them in this flush instead of the next one. A lone
            // committer does not wait at all.
            for _ in 0..MAX_LEADER_YIELDS {
                if self.building.load(AtomicOrdering::Acquire) == 0 {
                    break;
                }
                tokio::task::yield_now().await;
            }
            // Every batch numbered so far was applied before this flush starts: it covers them.
            let upto = self.applied.load(AtomicOrdering::Acquire);
            return match cat.inner.backend.flush().await {
                Ok(()) => {
                    self.durable.fetch_max(upto, AtomicOrdering::AcqRel);
                    Ok(())
                }
                Err(Error::Fenced {
                    current, detail, ..
                }) => Err(Error::Fenced {
                    mine: cat.inner.epoch.unwrap_or(0),
                    current,
                    detail,
                }),
                Err(e) => Err(e),
            };
        }
    }
}

/// The catalog format this binary writes and reads.
pub const FORMAT_VERSION: u64 = 1;

/// Called between drawing an issued key and placing it: lets a test (or a fault injector) name
/// the drawn key from another session at exactly that moment.
pub type DrawHook = Arc<dyn Fn(&'static IdSpace, u64) -> BoxFuture<'static, ()> + Send + Sync>;

/// How a catalog behaves.
#[derive(Clone)]
pub struct CatalogOptions {
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
}

impl Default for CatalogOptions {
    fn default() -> Self {
        CatalogOptions {
            durability: Durability::Durable,
            id_reservation: DEFAULT_RESERVATION,
            purge_wait: Duration::from_secs(1),
            draw_hook: None,
            clock: system_clock(),
        }
    }
}

impl fmt::Debug for CatalogOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CatalogOptions")
            .field("durability", &self.durability)
            .field("id_reservation", &self.id_reservation)
            .field("purge_wait", &self.purge_wait)
            .field("draw_hook", &self.draw_hook.is_some())
            .finish()
    }
}

/// The capability PURGE needs. Only administrative entry points (the `--admin` flag of the
/// command line, an admin role on the wire) should make one.
#[derive(Clone, Debug)]
pub struct Admin {
    actor: String,
}

impl Admin {
    /// Grant the admin capability to `actor` (recorded in the audit log).
    pub fn grant(actor: impl Into<String>) -> Admin {
        Admin {
            actor: actor.into(),
        }
    }
}

/// What PURGE did.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PurgeReport {
    /// The id space.
    pub space: &'static str,
    /// Keys freed.
    pub freed: Vec<u64>,
    /// Row keys removed (every version of each freed entity).
    pub rows_removed: usize,
    /// The audit entry written, rendered (none when nothing was freed).
    pub audit_key: Option<String>,
}

/// Summary of a catalog for `rocklake info`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CatalogInfo {
    /// Engine name.
    pub engine: &'static str,
    /// Stored format version (0 when not initialised).
    pub format_version: u64,
    /// Current writer epoch.
    pub writer_epoch: u64,
    /// The retain-from floor.
    pub retain_from: u64,
    /// Highest snapshot id.
    pub current_snapshot: u64,
    /// Keys per table name.
    pub counts: BTreeMap<String, u64>,
}

#[derive(Debug, Default)]
struct Readers {
    next: u64,
    open: BTreeMap<u64, u64>,
}

pub(crate) struct Inner {
    pub(crate) backend: Arc<dyn KvBackend>,
    /// `Some(epoch)` for a writer.
    pub(crate) epoch: Option<u64>,
    pub(crate) options: CatalogOptions,
    pub(crate) spaces: Vec<SpaceState>,
    pub(crate) commit_lock: tokio::sync::Mutex<()>,
    pub(crate) group: GroupCommit,
    /// Keys placed by open transactions: (space code, id) -> how many.
    pub(crate) placed: Mutex<HashMap<(u8, u64), u32>>,
    readers: Mutex<Readers>,
    readers_changed: Notify,
    closed: AtomicBool,
    /// The highest snapshot id committed through this catalog or found at open: no commit may
    /// land at or below it (see [`Transaction`]'s "Snapshot order"). Read and raised under the
    /// commit lock.
    pub(crate) published: AtomicU64,
}

/// A catalog over any [`KvBackend`]. Cheap to clone; clones share one writer identity.
#[derive(Clone)]
pub struct Catalog {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for Catalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Catalog")
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

async fn read_u64(view: &dyn ReadView, key: &[u8]) -> Result<Option<u64>> {
    match view.get(key).await? {
        Some(v) => Ok(Some(values::decode_u64(key, &v)?)),
        None => Ok(None),
    }
}

/// Microseconds since the Unix epoch, for snapshot times and audit entries. Injected through
/// [`CatalogOptions::clock`] so tests can fix time.
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

impl Catalog {
    /// Open for writing with default options: initialise an empty store, raise the writer
    /// epoch (fencing any older writer) and load the id spaces.
    pub async fn open(backend: Arc<dyn KvBackend>) -> Result<Catalog> {
        Catalog::open_with(backend, CatalogOptions::default()).await
    }

    /// Open for writing with `options`.
    pub async fn open_with(
        backend: Arc<dyn KvBackend>,
        options: CatalogOptions,
    ) -> Result<Catalog> {
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
        Catalog::assemble(backend, Some(epoch), options).await
    }

    /// Open read-only: no epoch change, every write refused.
    pub async fn open_read_only(backend: Arc<dyn KvBackend>) -> Result<Catalog> {
        let format = read_u64(backend.as_ref(), &sys_key(system::FORMAT_VERSION)).await?;
        check_format(format)?;
        Catalog::assemble(backend, None, CatalogOptions::default()).await
    }

    async fn assemble(
        backend: Arc<dyn KvBackend>,
        epoch: Option<u64>,
        options: CatalogOptions,
    ) -> Result<Catalog> {
        let mut spaces = Vec::with_capacity(SPACES.len());
        for space in SPACES {
            let stored = read_u64(backend.as_ref(), &space.counter_key()).await?;
            spaces.push(SpaceState::new(space, stored.unwrap_or(1)));
        }
        let published = current_snapshot_in(backend.as_ref()).await?;
        Ok(Catalog {
            inner: Arc::new(Inner {
                backend,
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
            }),
        })
    }

    /// The backend underneath.
    pub fn backend(&self) -> &Arc<dyn KvBackend> {
        &self.inner.backend
    }

    /// The writer epoch held, `None` when read-only.
    pub fn epoch(&self) -> Option<u64> {
        self.inner.epoch
    }

    /// The options in force.
    pub fn options(&self) -> &CatalogOptions {
        &self.inner.options
    }

    /// Now, by the catalog's [`Clock`], in microseconds since the Unix epoch.
    pub fn now_micros(&self) -> i64 {
        (self.inner.options.clock)()
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
    pub(crate) async fn write_fenced(
        &self,
        mut batch: WriteBatch,
        durability: Durability,
    ) -> Result<()> {
        let epoch = self.writer_epoch()?;
        let ekey = epoch_key();
        batch.expect(
            ekey.clone(),
            Some(Bytes::copy_from_slice(&values::encode_u64(epoch))),
        );
        match self.inner.backend.write(batch, durability).await {
            Ok(()) => Ok(()),
            Err(Error::ConditionFailed { raw_key, .. }) if raw_key == ekey => {
                let current = read_u64(self.inner.backend.as_ref(), &ekey)
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or(0);
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
            let m = st.marks();
            if m.mark < m.ceiling {
                continue;
            }
            if m.mark > MAX_ID {
                return Err(keystone::exhausted(space));
            }
            let new_ceiling = m
                .mark
                .saturating_add(self.inner.options.id_reservation)
                .min(MAX_ID + 1);
            let mut batch = WriteBatch::new();
            batch.put(
                space.counter_key(),
                Bytes::copy_from_slice(&values::encode_u64(new_ceiling)),
            );
            // Reservations are always durable: an id must never be issued twice after a crash.
            self.write_fenced(batch, Durability::Durable).await?;
            st.raise_ceiling(new_ceiling);
        }
    }

    /// Begin a transaction: a read view plus a write set.
    pub async fn begin(&self) -> Result<Transaction> {
        if self.inner.closed.load(AtomicOrdering::Acquire) {
            return Err(Error::Closed);
        }
        let view = self.inner.backend.view().await?;
        let read_snapshot = current_snapshot_in(view.as_ref()).await?;
        Ok(Transaction::new(self.clone(), view, read_snapshot))
    }

    /// The highest snapshot id in the catalog (0 when there is none).
    pub async fn current_snapshot(&self) -> Result<u64> {
        current_snapshot_in(self.inner.backend.as_ref()).await
    }

    /// The `retain-from` floor (0 when unset).
    pub async fn retain_from(&self) -> Result<u64> {
        Ok(
            read_u64(self.inner.backend.as_ref(), &sys_key(system::RETAIN_FROM))
                .await?
                .unwrap_or(0),
        )
    }

    /// Raise the `retain-from` floor. It only rises.
    pub async fn set_retain_from(&self, snapshot: u64) -> Result<()> {
        let _guard = self.inner.commit_lock.lock().await;
        let key = sys_key(system::RETAIN_FROM);
        let old = self.inner.backend.get(&key).await?;
        let current = match &old {
            Some(v) => values::decode_u64(&key, v)?,
            None => 0,
        };
        if snapshot < current {
            return Err(Error::InvalidArgument(format!(
                "retain-from only rises: it is {current}, cannot lower it to {snapshot}"
            )));
        }
        let latest = self.current_snapshot().await?;
        if snapshot > latest {
            return Err(Error::InvalidArgument(format!(
                "retain-from {snapshot} is past the latest snapshot {latest}"
            )));
        }
        let mut batch = WriteBatch::new();
        batch.expect(key.clone(), old);
        batch.put(key, Bytes::copy_from_slice(&values::encode_u64(snapshot)));
        self.write_fenced(batch, Durability::Durable).await
    }

    /// Open a reader at `snapshot` (the latest when `None`). PURGE waits for readers that can
    /// still see what it would remove. A snapshot below `retain-from` is refused.
    pub async fn reader(&self, snapshot: Option<u64>) -> Result<Reader> {
        let view = self.inner.backend.view().await?;
        let latest = current_snapshot_in(view.as_ref()).await?;
        let snapshot = snapshot.unwrap_or(latest);
        check_readable_at(view.as_ref(), snapshot).await?;
        let id = {
            let mut r = self.inner.readers.lock().unwrap_or_else(|e| e.into_inner());
            r.next += 1;
            let id = r.next;
            r.open.insert(id, snapshot);
            id
        };
        Ok(Reader {
            catalog: self.clone(),
            id,
            snapshot,
            view,
        })
    }

    fn oldest_reader(&self) -> Option<u64> {
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

    /// PURGE: free the keys of deleted rows of `space` in `ids`, removing every version of
    /// those rows. Live keys in the range are left alone.
    ///
    /// A key is freed only once nothing can see its row: not a reader at or above `retain-from`
    /// (the row must have been deleted at or before the floor, else this is refused, not
    /// retryable) and not an open reader (PURGE waits up to `purge_wait` for older readers,
    /// then refuses with a retryable conflict). One audit entry under `0x81` records each purge.
    pub async fn purge(
        &self,
        space: &'static IdSpace,
        ids: RangeInclusive<u64>,
        admin: &Admin,
    ) -> Result<PurgeReport> {
        self.writer_epoch()?;
        let (first, last) = (*ids.start(), *ids.end());
        space.check_id(first)?;
        space.check_id(last)?;
        if first > last {
            return Err(Error::InvalidArgument(format!(
                "PURGE range [{first}, {last}] is empty"
            )));
        }
        let wait = self.inner.options.purge_wait;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.inner.readers_changed.notified();
            let floor = self.retain_from().await?;
            let view = self.inner.backend.view().await?;
            let start = space.binding_key(first);
            let mut end = space.binding_key(last).to_vec();
            end.push(0);
            let range = KeyRange::new(start.to_vec(), end);
            let mut pager = Pager::new(view.as_ref(), range, Order::Ascending, 512);
            let mut targets: Vec<(u64, Bytes, Binding)> = Vec::new();
            while let Some(page) = pager.next_page().await? {
                for (k, v) in page {
                    let Ok(Key::Binding { id, .. }) = Key::decode(&k) else {
                        continue;
                    };
                    let b = Binding::decode_at(&k, &v)?;
                    if b.is_deleted() {
                        targets.push((id, v, b));
                    }
                }
            }
            for (id, _, b) in &targets {
                let at = b.deleted_at.unwrap_or(u64::MAX);
                if at > floor {
                    return Err(Error::Conflict {
                        message: format!(
                            "PURGE of key {id} in id space {:?}: its row was deleted at snapshot {at}, \
                             which readers at retain-from {floor} can still see; raise retain-from to \
                             at least {at} first",
                            space.name
                        ),
                        retryable: false,
                    });
                }
            }
            if let Some(oldest) = self.oldest_reader() {
                if let Some((id, _, b)) = targets
                    .iter()
                    .find(|(_, _, b)| b.deleted_at.unwrap_or(u64::MAX) > oldest)
                {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(Error::Conflict {
                            message: format!(
                                "PURGE waited {wait:?} for the reader at snapshot {oldest}, which can \
                                 still see key {id} of id space {:?} (deleted at snapshot {}); try again",
                                space.name,
                                b.deleted_at.unwrap_or(0)
                            ),
                            retryable: true,
                        });
                    }
                    let _ = tokio::time::timeout_at(deadline, notified).await;
                    continue;
                }
            }
            if targets.is_empty() {
                return Ok(PurgeReport {
                    space: space.name,
                    freed: vec![],
                    rows_removed: 0,
                    audit_key: None,
                });
            }
            let mut batch = WriteBatch::new();
            let mut rows_removed = 0;
            let mut freed = Vec::with_capacity(targets.len());
            for (id, raw, b) in &targets {
                let bkey = space.binding_key(*id);
                batch.expect(bkey.to_vec(), Some(raw.clone()));
                batch.delete(bkey.to_vec());
                let mut versions = Pager::new(
                    view.as_ref(),
                    KeyRange::prefix(&IdSpace::entity_prefix(&b.row_key)),
                    Order::Ascending,
                    512,
                );
                while let Some(page) = versions.next_page().await? {
                    for (k, _) in page {
                        batch.delete(k);
                        rows_removed += 1;
                    }
                }
                freed.push(*id);
            }
            let _guard = self.inner.commit_lock.lock().await;
            let snapshot = self.current_snapshot().await?;
            let sequence = self.issue_id_locked(&keystone::AUDIT).await?;
            let akey = AuditKey {
                snapshot_id: snapshot,
                sequence,
            }
            .encode();
            let entry = AuditEntry {
                action: "purge".into(),
                space: space.name.into(),
                first_id: first,
                last_id: last,
                freed: freed.clone(),
                writer_epoch: self.writer_epoch()?,
                at_micros: self.now_micros(),
                actor: admin.actor.clone(),
            };
            batch.put(akey.to_vec(), entry.encode_to_vec());
            match self.write_fenced(batch, Durability::Durable).await {
                Ok(()) => {
                    return Ok(PurgeReport {
                        space: space.name,
                        freed,
                        rows_removed,
                        audit_key: Some(keys::render(&akey)),
                    })
                }
                // A binding changed between our read and the write: look again.
                Err(Error::ConditionFailed { .. }) if tokio::time::Instant::now() < deadline => {
                    continue
                }
                Err(Error::ConditionFailed { key, .. }) => {
                    return Err(Error::Conflict {
                        message: format!(
                            "PURGE raced with a concurrent change of {key}; try again"
                        ),
                        retryable: true,
                    })
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Issue an id while already holding the commit lock (no reservation write may take it).
    async fn issue_id_locked(&self, space: &'static IdSpace) -> Result<u64> {
        let st = self.state(space)?;
        if let Some(id) = st.try_issue()? {
            return Ok(id);
        }
        let m = st.marks();
        let new_ceiling = m
            .mark
            .saturating_add(self.inner.options.id_reservation)
            .min(MAX_ID + 1);
        if m.mark > MAX_ID {
            return Err(keystone::exhausted(space));
        }
        let mut batch = WriteBatch::new();
        batch.put(
            space.counter_key(),
            Bytes::copy_from_slice(&values::encode_u64(new_ceiling)),
        );
        self.write_fenced(batch, Durability::Durable).await?;
        st.raise_ceiling(new_ceiling);
        st.try_issue()?.ok_or_else(|| keystone::exhausted(space))
    }

    /// Garbage-collect row versions that ended at or before `retain-from` (and before every
    /// open reader). The last version of a deleted Keystone row stays until PURGE, since its
    /// key is still bound. Returns how many versions were removed.
    pub async fn gc(&self) -> Result<u64> {
        self.writer_epoch()?;
        let mut floor = self.retain_from().await?;
        if let Some(oldest) = self.oldest_reader() {
            floor = floor.min(oldest);
        }
        let view = self.inner.backend.view().await?;
        let mut removed = 0u64;
        for info in tags::REGISTRY
            .iter()
            .filter(|t| t.versioned && t.value == ValueKind::Row)
        {
            let mut pager = Pager::new(
                view.as_ref(),
                KeyRange::prefix(&[info.tag.0]),
                Order::Ascending,
                512,
            );
            while let Some(page) = pager.next_page().await? {
                let mut batch = WriteBatch::new();
                for (k, v) in page {
                    let row = Row::decode(&k, &v)?;
                    if !row.version().collectable(floor) {
                        continue;
                    }
                    if self.is_bound_row(&k).await? {
                        continue;
                    }
                    batch.expect(k.clone(), Some(v));
                    batch.delete(k);
                }
                if !batch.ops.is_empty() {
                    let n = batch.ops.len() as u64;
                    let _guard = self.inner.commit_lock.lock().await;
                    match self.write_fenced(batch, Durability::Durable).await {
                        Ok(()) => removed += n,
                        // A version changed under us; leave it to the next GC.
                        Err(Error::ConditionFailed { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(removed)
    }

    async fn is_bound_row(&self, row_key: &[u8]) -> Result<bool> {
        let Ok(Key::Row { tag, fields }) = Key::decode(row_key) else {
            return Ok(false);
        };
        for space in SPACES.iter().filter(|s| s.table == tag) {
            let id = match space.layout {
                keystone::Layout::Id | keystone::Layout::IdVersioned => fields[0],
                keystone::Layout::ChildVersioned => fields[1],
                keystone::Layout::Custom => continue,
            };
            if let Some(b) = self.binding(space, id).await? {
                if b.row_key == row_key {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Engine, format, epoch, floor and keys per table.
    pub async fn info(&self) -> Result<CatalogInfo> {
        info_of(self.inner.backend.as_ref(), self.inner.backend.engine()).await
    }

    /// Flush, write the exact marks back over unused reservations (so a reopened catalog shows
    /// the same `next_id`), and close the backend.
    pub async fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, AtomicOrdering::AcqRel) {
            return Ok(());
        }
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
/// ([`Catalog::reader`]) and of the command line (`scan --at`) goes through this.
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

/// Catalog summary straight from a backend (works on stores that were never opened as a
/// catalog too).
pub async fn info_of(view: &dyn ReadView, engine: &'static str) -> Result<CatalogInfo> {
    info_with_progress(view, engine, |_| {}).await
}

/// How often [`info_with_progress`] reports: every this many keys.
pub const INFO_PROGRESS_EVERY: u64 = 100_000;

/// [`info_of`], calling `progress` with the number of keys counted so far every
/// [`INFO_PROGRESS_EVERY`] keys (a large catalog takes a while to walk).
pub async fn info_with_progress(
    view: &dyn ReadView,
    engine: &'static str,
    mut progress: impl FnMut(u64) + Send,
) -> Result<CatalogInfo> {
    // Counted per tag byte while walking (no allocation per key), named at the end.
    let mut per_byte = [0u64; 256];
    let mut walked = 0u64;
    visit_all(view, KeyRange::all(), 1024, &mut |k, _| {
        if let Some(b) = k.first() {
            per_byte[*b as usize] += 1;
        }
        walked += 1;
        if walked.is_multiple_of(INFO_PROGRESS_EVERY) {
            progress(walked);
        }
        true
    })
    .await?;
    let mut counts = BTreeMap::new();
    for (b, n) in per_byte.iter().enumerate() {
        if *n == 0 {
            continue;
        }
        let name = match tags::lookup(b as u8) {
            Some(info) => info.name.to_string(),
            None => format!("unknown_{b:#04x}"),
        };
        counts.insert(name, *n);
    }
    Ok(CatalogInfo {
        engine,
        format_version: read_u64(view, &sys_key(system::FORMAT_VERSION))
            .await?
            .unwrap_or(0),
        writer_epoch: read_u64(view, &epoch_key()).await?.unwrap_or(0),
        retain_from: read_u64(view, &sys_key(system::RETAIN_FROM))
            .await?
            .unwrap_or(0),
        current_snapshot: current_snapshot_in(view).await?,
        counts,
    })
}

/// A reader at one snapshot: a point-in-time view plus the MVCC filter. PURGE waits for it.
pub struct Reader {
    catalog: Catalog,
    id: u64,
    snapshot: u64,
    view: Arc<dyn ReadView>,
}

impl fmt::Debug for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("snapshot", &self.snapshot)
            .finish()
    }
}

impl Reader {
    /// The snapshot this reader sees.
    pub fn snapshot(&self) -> u64 {
        self.snapshot
    }

    /// The underlying point-in-time view.
    pub fn view(&self) -> &dyn ReadView {
        self.view.as_ref()
    }

    /// Every row of `prefix` (a tag byte and leading key fields) visible at this snapshot, in
    /// key order, one page at a time through `each`. Keys under tags this binary does not know
    /// are skipped.
    pub async fn visible_rows<F>(&self, prefix: &[u8], mut each: F) -> Result<u64>
    where
        F: FnMut(Key, Row) + Send,
    {
        let mut failed = None;
        let n = self
            .scan_visible(prefix, |row| {
                if failed.is_some() {
                    return;
                }
                let decoded = Key::decode(row.key())
                    .map_err(Error::from)
                    .and_then(|k| Ok((k, row.row()?)));
                match decoded {
                    Ok((k, r)) => each(k, r),
                    Err(e) => failed = Some(e),
                }
            })
            .await?;
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// [`Reader::visible_rows`] without decoding: each visible row comes as a [`RowView`], whose
    /// cells are decoded only when asked for. Invisible versions are skipped after reading just
    /// their interval, and engines that can lend their bytes ([`ReadView::visit`]) are read
    /// without copying. This is the fast way to read a few columns of many rows.
    pub async fn scan_visible<F>(&self, prefix: &[u8], mut each: F) -> Result<u64>
    where
        F: FnMut(RowView<'_>) + Send,
    {
        let mut n = 0;
        let mut failed = None;
        visit_all(
            self.view.as_ref(),
            KeyRange::prefix(prefix),
            1024,
            &mut |k, v| {
                let Some(info) = k.first().and_then(|b| tags::lookup(*b)) else {
                    return true;
                };
                if info.value != ValueKind::Row {
                    return true;
                }
                match RowView::new(k, v) {
                    Ok(row) => {
                        if row.version().visible_at(self.snapshot) {
                            each(row);
                            n += 1;
                        }
                        true
                    }
                    Err(e) => {
                        failed = Some(e);
                        false
                    }
                }
            },
        )
        .await?;
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(n)
    }

    /// The version of one entity visible at this snapshot. `entity` is the key without its
    /// `begin_snapshot` (for unversioned tables, the whole key).
    pub async fn entity(&self, entity: &[u8]) -> Result<Option<(Key, Row)>> {
        let range = KeyRange::prefix(entity);
        // Versions sort by begin_snapshot; the newest visible one is found scanning down.
        let mut pager = Pager::new(self.view.as_ref(), range, Order::Descending, 16);
        while let Some(page) = pager.next_page().await? {
            for (k, v) in page {
                let row = RowView::new(&k, &v)?;
                let version = row.version();
                if version.visible_at(self.snapshot) {
                    return Ok(Some((Key::decode(&k)?, row.row()?)));
                }
                if version.begin <= self.snapshot {
                    // Older versions ended at or before this one began: none can be visible.
                    return Ok(None);
                }
            }
        }
        Ok(None)
    }

    /// The row bound to `id` in `space` as this reader sees it. The binding is re-checked
    /// against the row actually found: a purged and re-inserted key reads as the new row.
    pub async fn by_id(&self, space: &IdSpace, id: u64) -> Result<Option<(Key, Row)>> {
        let bkey = space.binding_key(id);
        let Some(raw) = self.view.get(&bkey).await? else {
            return Ok(None);
        };
        let b = Binding::decode_at(&bkey, &raw)?;
        let found = self.entity(&IdSpace::entity_prefix(&b.row_key)).await?;
        match found {
            Some((key, row)) => {
                let key_id = match space.layout {
                    keystone::Layout::ChildVersioned => key.field(
                        tags::lookup(space.code())
                            .map(|i| i.key_fields[1])
                            .unwrap_or(""),
                    ),
                    _ => match &key {
                        Key::Row { fields, .. } => fields.first().copied(),
                        _ => None,
                    },
                };
                if key_id != Some(id) || row.begin_snapshot < b.bound_at {
                    return Err(Error::corrupt(
                        &bkey,
                        format!(
                            "binding of key {id} names {} but the row found is {key}",
                            keys::render(&b.row_key)
                        ),
                    ));
                }
                Ok(Some((key, row)))
            }
            None => Ok(None),
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let mut r = self
            .catalog
            .inner
            .readers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        r.open.remove(&self.id);
        drop(r);
        self.catalog.inner.readers_changed.notify_waiters();
    }
}
