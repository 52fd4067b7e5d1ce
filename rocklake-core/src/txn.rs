//! Transactions: a read view plus a write set, committed as one atomic batch.
//!
//! Reads go through the view taken at `begin` (and see the transaction's own writes first).
//! Writes are buffered; [`Transaction::commit`] turns them into one [`WriteBatch`] with the
//! preconditions the transaction gathered (every key it binds must still be free, every binding
//! it changes must be unchanged, and the writer epoch must still be this writer's), so the whole
//! commit lands or none of it does. Dropping a transaction, or [`Transaction::rollback`], discards
//! the write set: keys it placed are free again.
//!
//! Rows of an id space are only ever written through [`Transaction::insert`],
//! [`Transaction::update`] and [`Transaction::delete`], which keep the row, its Keystone binding
//! and the space's mark consistent; [`Transaction::put_row`] refuses them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;

use crate::backend::{ClosedView, Durability, ReadView, WriteBatch};
use crate::error::{Error, Result};
use crate::keys::{self, Key};
use crate::keyspace::{current_snapshot_in, Keyspace, ViewMark};
use crate::keystone::{self, IdSpace, Layout, MAX_DRAWS};
use crate::tags::{TagInfo, ValueKind};
use crate::values::{Binding, BindingState, Row, Value};

/// Stands in for the view after commit (a committed transaction reads nothing more).
static EMPTY_VIEW: ClosedView = ClosedView;

/// Where the key of an inserted row comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyChoice {
    /// The caller names the key.
    Named(u64),
    /// The engine issues the key (the space's mark).
    Issued,
}

/// A row placed by an insert.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    /// The key (id) of the row.
    pub id: u64,
    /// The row's storage key.
    pub row_key: Vec<u8>,
    /// The snapshot it begins at.
    pub snapshot: u64,
}

impl fmt::Display for Placed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "INSERTED id={} at {}",
            self.id,
            keys::render(&self.row_key)
        )
    }
}

/// What a commit wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitInfo {
    /// The snapshot the transaction wrote at, if it wrote versioned rows.
    pub snapshot: Option<u64>,
    /// Keys written (puts and deletes).
    pub keys_written: usize,
}

/// A transaction on a [`Keyspace`].
///
/// # Snapshot order
/// A transaction that writes takes its snapshot at its first write (an issued id of the
/// `snapshot` space, or the id it names when it inserts its `ducklake_snapshot` row itself, as
/// DuckLake does). Snapshots must become visible in ascending order: a reader that has seen
/// snapshot N must never see a later commit add or end rows at N or below, or time travel to N
/// would not be repeatable. So [`Transaction::commit`] refuses, with a retryable
/// [`Error::Conflict`] and nothing written, a transaction whose snapshot is at or below a
/// snapshot already committed (one that began writing before another, and commits after it).
/// Run it again: it then takes a new snapshot above every visible one.
pub struct Transaction {
    cat: Keyspace,
    /// Taken (dropped) at commit, so engines with copy-on-write views do not copy for nothing.
    view: Option<Arc<dyn ReadView>>,
    read_snapshot: u64,
    write_snapshot: Option<u64>,
    writes: BTreeMap<Bytes, Option<Bytes>>,
    conds: BTreeMap<Bytes, Option<Bytes>>,
    /// Keys this transaction placed (binding code, id).
    placed: HashSet<(u8, u64)>,
    /// Issued keys placed, whose "still unbound" precondition is added at commit only when a
    /// session of this writer named a key at or above them (see [`Transaction::commit`]).
    issued: Vec<(&'static IdSpace, u64)>,
    /// Per id space: the counter value named keys of this transaction need (max named + 1).
    named_needs: HashMap<&'static str, (&'static IdSpace, u64)>,
    /// Row versions this transaction's updates created, each with the version it ended (so a
    /// delete in the same transaction can take the new version back).
    prior: HashMap<Bytes, Bytes>,
    /// Counted in the group commit's `building` until applied or dropped.
    building: bool,
}

impl fmt::Debug for Transaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transaction")
            .field("read_snapshot", &self.read_snapshot)
            .field("write_snapshot", &self.write_snapshot)
            .field("writes", &self.writes.len())
            .finish()
    }
}

impl Keyspace {
    /// Begin a transaction: a read view plus a write set.
    pub async fn begin(&self) -> Result<Transaction> {
        if self.inner.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let view = self.committed_view().await?;
        let read_snapshot = current_snapshot_in(view.as_ref()).await?;
        Ok(Transaction::new(self.clone(), view, read_snapshot))
    }

    /// Apply a batch that a layer above the core built itself (its own rows, preconditions and
    /// deletes), as this writer: fenced by the writer epoch like every commit, applied under
    /// the commit lock, and — when the key space is durable — acknowledged only after a group
    /// flush covers it. Nothing of it lands when a precondition fails
    /// ([`Error::ConditionFailed`] names the key) or the writer was fenced.
    ///
    /// The batch bypasses [`Transaction`]'s Keystone rules: the caller owns the identity of
    /// the rows it writes.
    pub async fn commit_batch(&self, batch: WriteBatch) -> Result<()> {
        self.commit_batch_with(batch, None).await
    }

    /// [`Keyspace::commit_batch`] for a caller whose every precondition is a value it read
    /// from a view marked `mark` ([`Keyspace::committed_view_marked`]) or from the store since.
    /// When this writer has written no change since that view was taken, the store still holds
    /// each value read, so the preconditions are not read again (only the writer epoch's is
    /// checked). Otherwise they are checked as [`Keyspace::commit_batch`] checks them.
    pub async fn commit_batch_read_at(&self, batch: WriteBatch, mark: ViewMark) -> Result<()> {
        self.commit_batch_with(batch, Some(mark)).await
    }

    async fn commit_batch_with(
        &self,
        mut batch: WriteBatch,
        read_at: Option<ViewMark>,
    ) -> Result<()> {
        self.writer_epoch()?;
        let guard = self.inner.commit_lock.lock().await;
        if read_at.is_some_and(|m| self.unchanged_since(m)) {
            // Under the commit lock: no change can land between this look and the write.
            batch.preconditions.clear();
        }
        let applying = self.inner.group.start_apply();
        let written = self.write_fenced(batch, Durability::Buffered).await;
        let seq = applying.applied();
        drop(guard);
        written?;
        if self.inner.options.durability == Durability::Durable {
            self.inner
                .group
                .wait_durable(seq, || self.flush_committed())
                .await?;
        }
        Ok(())
    }
}

impl Transaction {
    pub(crate) fn new(cat: Keyspace, view: Arc<dyn ReadView>, read_snapshot: u64) -> Transaction {
        cat.inner.group.building();
        Transaction {
            cat,
            view: Some(view),
            read_snapshot,
            write_snapshot: None,
            writes: BTreeMap::new(),
            conds: BTreeMap::new(),
            placed: HashSet::new(),
            issued: Vec::new(),
            named_needs: HashMap::new(),
            prior: HashMap::new(),
            building: true,
        }
    }

    /// The latest snapshot when the transaction began.
    pub fn read_snapshot(&self) -> u64 {
        self.read_snapshot
    }

    /// The snapshot this transaction writes at, once it has one.
    pub fn snapshot(&self) -> Option<u64> {
        self.write_snapshot
    }

    /// The transaction's read view (without its own writes).
    pub fn view(&self) -> &dyn ReadView {
        match &self.view {
            Some(v) => v.as_ref(),
            None => &EMPTY_VIEW,
        }
    }

    /// Number of keys written so far.
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Read a key: this transaction's own writes first, then the view.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        if let Some(w) = self.writes.get(key) {
            return Ok(w.clone());
        }
        self.view().get(key).await
    }

    /// Write a row under `key` in a row table that no id space owns (statistics, partition
    /// columns, ...). The cells are checked against the table. Rows of an id space are refused:
    /// [`Transaction::insert`], [`Transaction::update`] and [`Transaction::delete`] write those,
    /// keeping the key's binding and the space's mark consistent.
    pub fn put_row(&mut self, key: &[u8], row: &Row) -> Result<()> {
        let epoch = self.cat.writer_epoch()?;
        let info = raw_row_table(key, "put_row")?;
        let mut row = row.clone();
        row.writer_epoch = epoch;
        let bytes = row.encode(info, key)?;
        self.writes
            .insert(Bytes::copy_from_slice(key), Some(Bytes::from(bytes)));
        Ok(())
    }

    /// Delete a row of a table that no id space owns outright (no MVCC). Rows of an id space
    /// are refused: [`Transaction::delete`] ends them and keeps their key bound.
    pub fn delete_key(&mut self, key: &[u8]) -> Result<()> {
        self.cat.writer_epoch()?;
        raw_row_table(key, "delete_key")?;
        self.writes.insert(Bytes::copy_from_slice(key), None);
        Ok(())
    }

    /// Require `key` to hold `expected` (`None`: absent) when the transaction commits.
    pub fn expect(&mut self, key: &[u8], expected: Option<Bytes>) {
        self.conds.insert(Bytes::copy_from_slice(key), expected);
    }

    /// The snapshot this transaction writes at; the first call issues one from the `snapshot`
    /// id space and writes its `ducklake_snapshot` row.
    pub async fn write_snapshot(&mut self) -> Result<u64> {
        if let Some(s) = self.write_snapshot {
            return Ok(s);
        }
        let cells = vec![
            Value::Null,
            Value::Int(self.cat.now_micros()),
            Value::Null,
            Value::Null,
            Value::Null,
        ];
        let placed = self
            .place(&keystone::SNAPSHOT, KeyChoice::Issued, None, cells, None)
            .await?;
        Ok(placed.id)
    }

    /// Insert a row of an id space keyed `tag | id` or `tag | id | begin_snapshot`.
    ///
    /// Inserting into the `snapshot` space sets the snapshot this transaction writes at (as
    /// DuckLake's commits do); any other insert first takes a write snapshot if it has none.
    /// `cells` are the table's columns in order; the id column is filled in when left NULL.
    pub async fn insert(
        &mut self,
        space: &'static IdSpace,
        choice: KeyChoice,
        cells: Vec<Value>,
    ) -> Result<Placed> {
        self.place(space, choice, None, cells, None).await
    }

    /// Insert a row of a child space (`column`, `file`, `delete-file`) under `parent`, an id
    /// in `[1, 2^48 - 1]` like every id.
    pub async fn insert_child(
        &mut self,
        space: &'static IdSpace,
        parent: u64,
        choice: KeyChoice,
        cells: Vec<Value>,
    ) -> Result<Placed> {
        self.place(space, choice, Some(parent), cells, None).await
    }

    /// Insert a row whose storage key the caller builds from `(id, snapshot)`.
    pub async fn insert_with_key(
        &mut self,
        space: &'static IdSpace,
        choice: KeyChoice,
        make_key: fn(u64, u64) -> Vec<u8>,
        cells: Vec<Value>,
    ) -> Result<Placed> {
        self.place(space, choice, None, cells, Some(make_key)).await
    }

    async fn bound(&self, space: &IdSpace, id: u64) -> Result<Option<Binding>> {
        let bkey = space.binding_key(id);
        if let Some(w) = self.writes.get(bkey.as_slice()) {
            return match w {
                Some(v) => Ok(Some(Binding::decode_at(&bkey, v)?)),
                None => Ok(None),
            };
        }
        // The live store, not the view: a key bound after this transaction began is bound.
        match self.cat.inner.backend.get(&bkey).await? {
            Some(v) => Ok(Some(Binding::decode_at(&bkey, &v)?)),
            None => Ok(None),
        }
    }

    fn placed_elsewhere(&self, space: &IdSpace, id: u64) -> bool {
        let mine = self.placed.contains(&(space.code(), id));
        let placed = self
            .cat
            .inner
            .placed
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        placed
            .get(&(space.code(), id))
            .is_some_and(|n| *n > u32::from(mine))
    }

    fn register(&mut self, space: &IdSpace, id: u64) {
        let mut placed = self
            .cat
            .inner
            .placed
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *placed.entry((space.code(), id)).or_insert(0) += 1;
        self.placed.insert((space.code(), id));
    }

    fn unregister(&mut self, space: &IdSpace, id: u64) {
        if self.placed.remove(&(space.code(), id)) {
            release(&self.cat, [(space.code(), id)]);
        }
    }

    async fn place(
        &mut self,
        space: &'static IdSpace,
        choice: KeyChoice,
        parent: Option<u64>,
        cells: Vec<Value>,
        make_key: Option<fn(u64, u64) -> Vec<u8>>,
    ) -> Result<Placed> {
        let epoch = self.cat.writer_epoch()?;
        self.cat.state(space)?;
        let table = keystone::table_of(space)?;
        if let Some(p) = parent {
            keystone::check_parent(space, p)?;
        }
        if make_key.is_none() {
            // The layout and the parent fit (the key itself is built once the id is known).
            space.row_key(1, parent, 0)?;
        }
        let is_snapshot_space = std::ptr::eq(space, &keystone::SNAPSHOT);
        if is_snapshot_space {
            if let Some(s) = self.write_snapshot {
                return Err(Error::InvalidArgument(format!(
                    "this transaction already writes at snapshot {s}; one transaction creates one snapshot"
                )));
            }
        }
        // Everything that can refuse the insert is checked before anything is placed.
        let named = match choice {
            KeyChoice::Named(id) => {
                space.check_id(id)?;
                Some(id)
            }
            KeyChoice::Issued => None,
        };
        keystone::check_identity(space, table, &cells, named, parent)?;
        let mut row = Row {
            begin_snapshot: 0,
            end_snapshot: None,
            cells,
            writer_epoch: epoch,
            tuple: None,
        };
        row.check_named(table, || format!("a new {} row", table.name))?;
        if let Some(id) = named {
            if let Some(b) = self.bound(space, id).await? {
                return Err(keystone::already_exists(space, id, &b));
            }
        }
        // An issued key is drawn before the snapshot is taken: if no key can be drawn, nothing
        // was placed (a drawn key that is then not used is a gap, which Keystone allows).
        let id = match named {
            Some(id) => id,
            None => self.draw(space).await?,
        };
        if !is_snapshot_space && self.write_snapshot.is_none() {
            Box::pin(self.write_snapshot()).await?;
        }
        // Nothing below can fail: the row is placed whole or not at all.
        if named.is_some() {
            if let Ok(st) = self.cat.state(space) {
                st.note_named(id);
            }
            let need = self.named_needs.entry(space.name).or_insert((space, 0));
            need.1 = need.1.max(id + 1);
        }
        self.register(space, id);
        let snapshot = if is_snapshot_space {
            self.write_snapshot = Some(id);
            id
        } else {
            self.write_snapshot.unwrap_or(self.read_snapshot)
        };
        let row_key = match make_key {
            Some(f) => f(id, snapshot),
            None => space.row_key(id, parent, snapshot).unwrap_or_default(),
        };
        keystone::fill_identity(space, table, &mut row.cells, id, parent);
        row.begin_snapshot = snapshot;
        // Checked above; only the id cells (integer columns) and the snapshot changed since.
        let value = row.encode_unchecked();
        let binding = Binding {
            row_key: row_key.clone(),
            state: BindingState::Live as i32,
            bound_at: snapshot,
            deleted_at: None,
        };
        let bkey = Bytes::copy_from_slice(&space.binding_key(id));
        self.writes
            .insert(Bytes::from(row_key.clone()), Some(Bytes::from(value)));
        self.writes
            .insert(bkey.clone(), Some(Bytes::from(binding.encode_to_vec())));
        match choice {
            KeyChoice::Named(_) => {
                self.conds.insert(bkey, None);
            }
            KeyChoice::Issued => self.issued.push((space, id)),
        }
        Ok(Placed {
            id,
            row_key,
            snapshot,
        })
    }

    /// Take back the snapshot row this transaction placed, when the operation that made it
    /// place one is refused after all: a refused call leaves nothing in the write set.
    fn undo_snapshot(&mut self) {
        let Some(s) = self.write_snapshot.take() else {
            return;
        };
        let snapshot = &keystone::SNAPSHOT;
        let bkey = snapshot.binding_key(s);
        if let Some(Some(v)) = self.writes.remove(bkey.as_slice()) {
            if let Ok(b) = Binding::decode_at(&bkey, &v) {
                self.writes.remove(b.row_key.as_slice());
            }
        }
        self.conds.remove(bkey.as_slice());
        self.issued
            .retain(|(space, id)| !(std::ptr::eq(*space, snapshot) && *id == s));
        self.unregister(snapshot, s);
    }

    /// Run `f` with this transaction's write snapshot, taking one first if it has none; when
    /// `f` refuses, a snapshot taken for it is taken back.
    async fn with_snapshot<T>(&mut self, f: impl FnOnce(&mut Self, u64) -> Result<T>) -> Result<T> {
        let created = self.write_snapshot.is_none();
        let snapshot = self.write_snapshot().await?;
        let out = f(self, snapshot);
        if out.is_err() && created {
            self.undo_snapshot();
        }
        out
    }

    /// The live version of the row bound by `b`, with its bytes as the store holds them when
    /// they do not come from this transaction (for the "unchanged" precondition).
    async fn live_row(&self, bkey: &[u8], b: &Binding) -> Result<(Row, Option<Bytes>)> {
        let own = self.writes.contains_key(b.row_key.as_slice());
        let bytes = self.get(&b.row_key).await?.ok_or_else(|| {
            Error::corrupt(
                bkey,
                format!(
                    "binding names {} but no such row exists",
                    keys::render(&b.row_key)
                ),
            )
        })?;
        let row = Row::decode(&b.row_key, &bytes)?;
        if let Some(end) = row.end_snapshot {
            return Err(Error::corrupt(
                bkey,
                format!(
                    "binding names {} as the live row, but that version ended at snapshot {end}",
                    keys::render(&b.row_key)
                ),
            ));
        }
        Ok((row, if own { None } else { Some(bytes) }))
    }

    /// Replace the cells of the live row bound to `id` in `space`.
    ///
    /// For a versioned table the live version ends at this transaction's snapshot and a new
    /// version begins there, under the same key; the binding then names the new version. An
    /// unversioned row is rewritten in place. The id (and parent) columns must agree with the
    /// key or be NULL (they are filled in). A row this transaction wrote is simply rewritten.
    /// Refused with [`Error::NotFound`] when no live row holds the key, and with a retryable
    /// [`Error::Conflict`] at commit when another transaction changed the row first.
    pub async fn update(
        &mut self,
        space: &'static IdSpace,
        id: u64,
        cells: Vec<Value>,
    ) -> Result<Placed> {
        let epoch = self.cat.writer_epoch()?;
        space.check_id(id)?;
        let table = keystone::table_of(space)?;
        if space.layout == Layout::Custom || std::ptr::eq(space, &keystone::SNAPSHOT) {
            return Err(Error::InvalidArgument(format!(
                "rows of id space {:?} are written once and cannot be updated",
                space.name
            )));
        }
        let bkey = space.binding_key(id);
        let binding = self.live_binding(space, id).await?;
        let parent = keystone::parent_of(space, &binding.row_key);
        keystone::check_identity(space, table, &cells, Some(id), parent)?;
        let mut new = Row {
            begin_snapshot: 0,
            end_snapshot: None,
            cells,
            writer_epoch: epoch,
            tuple: None,
        };
        new.check_named(table, || {
            format!("an update of {}", keys::render(&binding.row_key))
        })?;
        keystone::fill_identity(space, table, &mut new.cells, id, parent);
        let (mut old, stored_row) = self.live_row(&bkey, &binding).await?;
        let raw_binding = if self.writes.contains_key(bkey.as_slice()) {
            None
        } else {
            self.cat.inner.backend.get(&bkey).await?
        };
        let old_key = Bytes::from(binding.row_key.clone());
        self.with_snapshot(move |t, snapshot| {
            if let Some(stored) = stored_row {
                // The version replaced must still be the one read when this commits.
                if old.begin_snapshot >= snapshot {
                    return Err(begins_too_late(
                        &binding.row_key,
                        old.begin_snapshot,
                        snapshot,
                    ));
                }
                t.conds.insert(old_key.clone(), Some(stored));
            }
            if let Some(raw) = raw_binding {
                t.conds.insert(Bytes::copy_from_slice(&bkey), Some(raw));
            }
            let row_key = if space.layout == Layout::Id || old.begin_snapshot == snapshot {
                // Unversioned, or a version this transaction wrote: rewrite it in place.
                new.begin_snapshot = old.begin_snapshot;
                old_key.clone()
            } else {
                old.end_snapshot = Some(snapshot);
                old.writer_epoch = epoch;
                t.writes
                    .insert(old_key.clone(), Some(Bytes::from(old.encode_unchecked())));
                let mut key = IdSpace::entity_prefix(&old_key);
                key.extend_from_slice(&snapshot.to_be_bytes());
                let key = Bytes::from(key);
                new.begin_snapshot = snapshot;
                let moved = Binding {
                    row_key: key.to_vec(),
                    ..binding.clone()
                };
                t.writes.insert(
                    Bytes::copy_from_slice(&bkey),
                    Some(Bytes::from(moved.encode_to_vec())),
                );
                t.prior.insert(key.clone(), old_key.clone());
                key
            };
            t.writes
                .insert(row_key.clone(), Some(Bytes::from(new.encode_unchecked())));
            Ok(Placed {
                id,
                row_key: row_key.to_vec(),
                snapshot,
            })
        })
        .await
    }

    /// The binding of `id` when a live row holds it; [`Error::NotFound`] otherwise.
    async fn live_binding(&self, space: &IdSpace, id: u64) -> Result<Binding> {
        match self.bound(space, id).await? {
            Some(b) if b.is_deleted() => Err(Error::NotFound(format!(
                "key {id} of id space {:?} belongs to a row deleted at snapshot {}; it has no live row",
                space.name,
                b.deleted_at.unwrap_or(0)
            ))),
            Some(b) => Ok(b),
            None => Err(Error::NotFound(format!(
                "no row holds key {id} in id space {:?}",
                space.name
            ))),
        }
    }

    /// Draw an issued key: if another session names the drawn key before it is placed, draw
    /// again; after [`MAX_DRAWS`] such draws in a row, refuse `AlreadyExists`.
    async fn draw(&mut self, space: &'static IdSpace) -> Result<u64> {
        let mut last = 0;
        for _ in 0..MAX_DRAWS {
            let id = self.cat.issue_id(space).await?;
            if let Some(hook) = &self.cat.inner.options.draw_hook {
                hook(space, id).await;
            }
            last = id;
            if self.placed_elsewhere(space, id) {
                continue;
            }
            // A freshly issued key is bound only if a session of this writer named it; ask the
            // store only then (this lookup used to cost one engine read per inserted row).
            if self.cat.state(space)?.may_be_named(id) && self.bound(space, id).await?.is_some() {
                continue;
            }
            return Ok(id);
        }
        Err(Error::AlreadyExists {
            space: space.name.to_string(),
            id: last,
            deleted: false,
            message: format!(
                "could not issue a key in id space {:?}: another session named each of the last \
                 {MAX_DRAWS} keys drawn (the last was {last}) before it could be placed",
                space.name
            ),
        })
    }

    /// Delete the row bound to `id`: end its live version at this transaction's snapshot. The
    /// key stays bound (a later insert naming it is refused) until PURGE frees it. Returns
    /// `false` when no live row holds the key. A row inserted by this same transaction is
    /// simply removed again, freeing its key; a version made by this transaction's own update
    /// is taken back, and the version that update ended stays the last one.
    pub async fn delete(&mut self, space: &'static IdSpace, id: u64) -> Result<bool> {
        let epoch = self.cat.writer_epoch()?;
        space.check_id(id)?;
        let bkey = space.binding_key(id);
        let own = self.writes.contains_key(bkey.as_slice());
        let binding = match self.live_binding(space, id).await {
            Ok(b) => b,
            Err(Error::NotFound(_)) => return Ok(false),
            Err(e) => return Err(e),
        };
        if own && self.placed.contains(&(space.code(), id)) {
            // Placed by this transaction: take it back, as a rollback of that insert would.
            self.writes.remove(bkey.as_slice());
            self.writes.remove(binding.row_key.as_slice());
            self.conds.remove(bkey.as_slice());
            self.unregister(space, id);
            return Ok(true);
        }
        let (mut row, stored_row) = self.live_row(&bkey, &binding).await?;
        let deleted = |row_key: Vec<u8>, at: u64| Binding {
            row_key,
            state: BindingState::Deleted as i32,
            deleted_at: Some(at),
            ..binding.clone()
        };
        if let Some(ended) = self.prior.remove(binding.row_key.as_slice()) {
            // The live version is this transaction's own update; the one it ended (at this
            // transaction's snapshot) becomes the last version.
            let snapshot = self.write_snapshot.unwrap_or(row.begin_snapshot);
            self.writes.remove(binding.row_key.as_slice());
            let b = deleted(ended.to_vec(), snapshot);
            self.writes.insert(
                Bytes::copy_from_slice(&bkey),
                Some(Bytes::from(b.encode_to_vec())),
            );
            return Ok(true);
        }
        let raw_binding = if own {
            None
        } else {
            self.cat.inner.backend.get(&bkey).await?
        };
        let row_key = Bytes::from(binding.row_key.clone());
        self.with_snapshot(move |t, snapshot| {
            if row.begin_snapshot >= snapshot {
                return Err(begins_too_late(&row_key, row.begin_snapshot, snapshot));
            }
            row.end_snapshot = Some(snapshot);
            row.writer_epoch = epoch;
            if let Some(stored) = stored_row {
                t.conds.insert(row_key.clone(), Some(stored));
            }
            if let Some(raw) = raw_binding {
                t.conds.insert(Bytes::copy_from_slice(&bkey), Some(raw));
            }
            t.writes
                .insert(row_key.clone(), Some(Bytes::from(row.encode_unchecked())));
            let b = deleted(row_key.to_vec(), snapshot);
            t.writes.insert(
                Bytes::copy_from_slice(&bkey),
                Some(Bytes::from(b.encode_to_vec())),
            );
            Ok(true)
        })
        .await
    }

    /// Commit: everything lands atomically, or nothing does.
    pub async fn commit(mut self) -> Result<CommitInfo> {
        let cat = self.cat.clone();
        self.view = None;
        if self.writes.is_empty() && self.conds.is_empty() {
            return Ok(CommitInfo {
                snapshot: None,
                keys_written: 0,
            });
        }
        cat.writer_epoch()?;
        let mut batch = WriteBatch::new();
        let keys_written = self.writes.len();
        for (k, v) in std::mem::take(&mut self.writes) {
            match v {
                Some(v) => batch.put(k, v),
                None => batch.delete(k),
            };
        }
        for (k, v) in std::mem::take(&mut self.conds) {
            batch.expect(k, v);
        }
        let guard = cat.inner.commit_lock.lock().await;
        // Snapshots publish in ascending order (see "Snapshot order" above).
        if let Some(s) = self.write_snapshot {
            let published = cat
                .inner
                .published
                .load(std::sync::atomic::Ordering::Acquire);
            if s <= published {
                drop(guard);
                // A key this transaction binds that another commit bound meanwhile is the more
                // precise refusal (two DuckLake writers naming one snapshot id get 23505).
                for (code, id) in &self.placed {
                    if let Some(space) = keystone::space_by_code(*code) {
                        if let Some(b) = cat.binding(space, *id).await? {
                            return Err(keystone::already_exists(space, *id, &b));
                        }
                    }
                }
                return Err(Error::Conflict {
                    message: format!(
                        "this transaction writes at snapshot {s}, but snapshot {published} was \
                         committed after it began writing and readers may already see it; a \
                         commit at {s} would change what they see; nothing was committed, run \
                         the transaction again"
                    ),
                    retryable: true,
                });
            }
        }
        // Issued keys need the "still unbound" precondition only when a session of this writer
        // has named a key at or above them since they were drawn; decided under the commit lock,
        // so a named insert that commits later is the one whose precondition refuses it.
        for (space, id) in std::mem::take(&mut self.issued) {
            if self.placed.contains(&(space.code(), id)) && cat.state(space)?.may_be_named(id) {
                batch.expect(Bytes::copy_from_slice(&space.binding_key(id)), None);
            }
        }
        // Named keys at or above the stored counter raise it in the same batch, so the stored
        // mark is never behind a committed key. Computed under the commit lock: monotonic.
        let mut raises = Vec::new();
        for (space, need) in self.named_needs.values() {
            let st = cat.state(space)?;
            if *need > st.marks().ceiling {
                batch.put(
                    space.counter_key(),
                    Bytes::copy_from_slice(&need.to_be_bytes()),
                );
            }
            // The mark moves only once the key has committed (a rolled-back key leaves it).
            raises.push((st, *need));
        }
        // Group commit: the batch is applied (preconditions checked) under the commit lock, but
        // its durability barrier is awaited after the lock is released, so commits that arrive
        // together share one flush (one fsync, one SlateDB WAL write). A commit is acknowledged
        // only after a flush that covers it.
        let durable = cat.inner.options.durability == Durability::Durable;
        let applying = cat.inner.group.start_apply();
        let written = cat.write_fenced(batch, Durability::Buffered).await;
        let seq = applying.applied();
        match written {
            Ok(()) => {
                for (st, need) in raises {
                    st.committed_named(need);
                }
                if let Some(s) = self.write_snapshot {
                    cat.inner
                        .published
                        .fetch_max(s, std::sync::atomic::Ordering::AcqRel);
                }
                self.done_building();
                drop(guard);
                if durable {
                    cat.inner
                        .group
                        .wait_durable(seq, || cat.flush_committed())
                        .await?;
                }
                Ok(CommitInfo {
                    snapshot: self.write_snapshot,
                    keys_written,
                })
            }
            Err(Error::ConditionFailed { raw_key, key }) => {
                if let Ok(Key::Binding { space: code, id }) = Key::decode(&raw_key) {
                    if let Some(space) = keystone::space_by_code(code) {
                        if let Some(b) = cat.binding(space, id).await? {
                            return Err(keystone::already_exists(space, id, &b));
                        }
                    }
                }
                Err(Error::Conflict {
                    message: format!(
                        "{key} changed since this transaction read it; nothing was committed"
                    ),
                    retryable: true,
                })
            }
            Err(e) => Err(e),
        }
    }

    fn done_building(&mut self) {
        if std::mem::take(&mut self.building) {
            self.cat.inner.group.built();
        }
    }

    /// Discard the write set. Keys placed are free again.
    pub fn rollback(self) {}
}

fn release(cat: &Keyspace, keys: impl IntoIterator<Item = (u8, u64)>) {
    let mut keys = keys.into_iter().peekable();
    if keys.peek().is_none() {
        return;
    }
    let mut placed = cat.inner.placed.lock().unwrap_or_else(|e| e.into_inner());
    for k in keys {
        if let Some(n) = placed.get_mut(&k) {
            *n -= 1;
            if *n == 0 {
                placed.remove(&k);
            }
        }
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        self.done_building();
        release(&self.cat, std::mem::take(&mut self.placed));
    }
}

/// A row table that no id space owns: the only tables [`Transaction::put_row`] and
/// [`Transaction::delete_key`] write.
fn raw_row_table(key: &[u8], what: &str) -> Result<&'static TagInfo> {
    let info = keys::tag_of(key)?;
    Key::decode(key)?;
    if info.value != ValueKind::Row {
        return Err(Error::InvalidArgument(format!(
            "{} holds no rows; {what} writes row tables only",
            info.name
        )));
    }
    if let Some(space) = keystone::space_of_table(info.tag) {
        return Err(Error::InvalidArgument(format!(
            "{} is a row of id space {:?}; {what} does not write those: insert, update and \
             delete keep its key's binding and the space's mark consistent",
            keys::render(key),
            space.name
        )));
    }
    Ok(info)
}

fn begins_too_late(row_key: &[u8], begin: u64, snapshot: u64) -> Error {
    Error::Conflict {
        message: format!(
            "row {} begins at snapshot {begin}, not before this transaction's snapshot \
             {snapshot}: it was written after this transaction began writing; run it again",
            keys::render(row_key)
        ),
        retryable: true,
    }
}
