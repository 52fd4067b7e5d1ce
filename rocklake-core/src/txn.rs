//! Transactions: a read view plus a write set, committed as one atomic batch.
//!
//! Reads go through the view taken at `begin` (and see the transaction's own writes first).
//! Writes are buffered; [`Transaction::commit`] turns them into one [`WriteBatch`] with the
//! preconditions the transaction gathered (every key it binds must still be free, every binding
//! it changes must be unchanged, and the writer epoch must still be this writer's), so the whole
//! commit lands or none of it does. Dropping a transaction, or [`Transaction::rollback`], discards
//! the write set: keys it placed are free again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;

use crate::backend::{Durability, ReadView, WriteBatch};
use crate::catalog::{now_micros, Catalog};
use crate::error::{Error, Result};
use crate::keys::{self, Key};
use crate::keystone::{self, IdSpace, MAX_DRAWS};
use crate::tags::{self, ValueKind};
use crate::values::{Binding, BindingState, Row, Value};

/// Stands in for the view after commit (a committed transaction reads nothing more).
struct EmptyView;
static EMPTY_VIEW: EmptyView = EmptyView;

#[async_trait::async_trait]
impl ReadView for EmptyView {
    async fn get(&self, _key: &[u8]) -> Result<Option<Bytes>> {
        Err(Error::Closed)
    }

    async fn scan(
        &self,
        _range: &crate::backend::KeyRange,
        _order: crate::backend::Order,
        _limit: usize,
    ) -> Result<Vec<crate::backend::KvPair>> {
        Err(Error::Closed)
    }
}

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

/// A transaction on a [`Catalog`].
pub struct Transaction {
    cat: Catalog,
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

pub(crate) fn already_exists(space: &IdSpace, id: u64, b: &Binding) -> Error {
    let at = keys::render(&b.row_key);
    let message = if b.is_deleted() {
        format!(
            "duplicate key {id} in id space {:?}: a row with this key was deleted at snapshot {}; \
             PURGE frees its key (row at {at})",
            space.name,
            b.deleted_at.unwrap_or(0)
        )
    } else {
        format!(
            "duplicate key {id} in id space {:?} already present at {at}",
            space.name
        )
    };
    Error::AlreadyExists {
        space: space.name.to_string(),
        id,
        deleted: b.is_deleted(),
        message,
    }
}

impl Transaction {
    pub(crate) fn new(cat: Catalog, view: Arc<dyn ReadView>, read_snapshot: u64) -> Transaction {
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

    /// Write a row under `key` (any row table). The cells are checked against the table.
    pub fn put_row(&mut self, key: &[u8], row: &Row) -> Result<()> {
        self.cat.writer_epoch()?;
        let info = keys::tag_of(key)?;
        Key::decode(key)?;
        if info.value != ValueKind::Row {
            return Err(Error::InvalidArgument(format!(
                "{} holds no rows; put_row writes row tables only",
                info.name
            )));
        }
        let mut row = row.clone();
        row.writer_epoch = self.cat.writer_epoch()?;
        let bytes = row.encode(info, key)?;
        self.writes
            .insert(Bytes::copy_from_slice(key), Some(Bytes::from(bytes)));
        Ok(())
    }

    /// Delete a key outright (no MVCC; use [`Transaction::delete`] for Keystone rows).
    pub fn delete_key(&mut self, key: &[u8]) -> Result<()> {
        self.cat.writer_epoch()?;
        Key::decode(key)?;
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
            Value::Int(now_micros()),
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

    /// Insert a row of a child space (`column`, `file`, `delete-file`) under `parent`.
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
        let table = space
            .table
            .info()
            .ok_or_else(|| Error::NotFound(format!("table of id space {:?}", space.name)))?;
        if space.layout == keystone::Layout::Custom && make_key.is_none() {
            space.row_key(0, parent, 0)?;
        }
        // Everything that can refuse the insert is checked before anything is placed.
        if let KeyChoice::Named(id) = choice {
            space.check_id(id)?;
            if let Some(b) = self.bound(space, id).await? {
                return Err(already_exists(space, id, &b));
            }
        }
        let mut row = Row {
            begin_snapshot: 0,
            end_snapshot: None,
            cells,
            writer_epoch: epoch,
        };
        row.check_named(table, || format!("a new {} row", table.name))?;
        let is_snapshot_space = std::ptr::eq(space, &keystone::SNAPSHOT);
        if is_snapshot_space {
            if let (Some(s), KeyChoice::Named(id)) = (self.write_snapshot, choice) {
                if s != id {
                    return Err(Error::InvalidArgument(format!(
                        "this transaction already writes at snapshot {s}; it cannot also create snapshot {id}"
                    )));
                }
            }
        } else if self.write_snapshot.is_none() {
            Box::pin(self.write_snapshot()).await?;
        }

        let id = match choice {
            KeyChoice::Named(id) => {
                self.cat.state(space)?.observe_named(id);
                let need = self.named_needs.entry(space.name).or_insert((space, 0));
                need.1 = need.1.max(id + 1);
                id
            }
            KeyChoice::Issued => self.draw(space).await?,
        };
        self.register(space, id);

        let snapshot = if is_snapshot_space {
            self.write_snapshot = Some(id);
            id
        } else {
            self.write_snapshot.unwrap_or(self.read_snapshot)
        };
        let row_key = match make_key {
            Some(f) => f(id, snapshot),
            None => space.row_key(id, parent, snapshot)?,
        };
        // Fill the id column when the caller left it NULL.
        if let Some(col) = space.id_column().and_then(|c| table.column_index(c)) {
            if row.cells.len() <= col {
                row.cells.resize(col + 1, Value::Null);
            }
            if row.cells[col] == Value::Null {
                row.cells[col] = Value::Int(id as i64);
            }
        }
        row.begin_snapshot = snapshot;
        // Checked above; only the id cell (an integer column) and the snapshot changed since.
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

    /// Delete the row bound to `id`: end its version at this transaction's snapshot. The key
    /// stays bound (a later insert naming it is refused) until PURGE frees it. Returns `false`
    /// when no live row holds the key. A row inserted by this same transaction is simply
    /// removed again, freeing its key.
    pub async fn delete(&mut self, space: &'static IdSpace, id: u64) -> Result<bool> {
        self.cat.writer_epoch()?;
        space.check_id(id)?;
        let bkey = space.binding_key(id);
        let own = self.writes.contains_key(bkey.as_slice());
        let Some(binding) = self.bound(space, id).await? else {
            return Ok(false);
        };
        if binding.is_deleted() {
            return Ok(false);
        }
        let raw_binding = if own {
            None
        } else {
            self.cat.inner.backend.get(&bkey).await?
        };
        let row_bytes = self.get(&binding.row_key).await?.ok_or_else(|| {
            Error::corrupt(
                &bkey,
                format!(
                    "binding names {} but no such row exists",
                    keys::render(&binding.row_key)
                ),
            )
        })?;
        let mut row = Row::decode(&binding.row_key, &row_bytes)?;
        if own && self.placed.contains(&(space.code(), id)) {
            // Placed by this transaction: take it back, as a rollback of that insert would.
            self.writes.remove(bkey.as_slice());
            self.writes.remove(binding.row_key.as_slice());
            self.conds.remove(bkey.as_slice());
            self.unregister(space, id);
            return Ok(true);
        }
        let snapshot = self.write_snapshot().await?;
        if row.begin_snapshot >= snapshot {
            return Err(Error::Conflict {
                message: format!(
                    "row {} begins at snapshot {}, not before this transaction's snapshot {snapshot}",
                    keys::render(&binding.row_key),
                    row.begin_snapshot
                ),
                retryable: true,
            });
        }
        row.end_snapshot = Some(snapshot);
        row.writer_epoch = self.cat.writer_epoch()?;
        let info = keys::tag_of(&binding.row_key)?;
        let value = row.encode(info, &binding.row_key)?;
        let new_binding = Binding {
            state: BindingState::Deleted as i32,
            deleted_at: Some(snapshot),
            ..binding.clone()
        };
        self.writes.insert(
            Bytes::from(binding.row_key.clone()),
            Some(Bytes::from(value)),
        );
        self.writes.insert(
            Bytes::copy_from_slice(&bkey),
            Some(Bytes::from(new_binding.encode_to_vec())),
        );
        if !own {
            self.conds
                .insert(Bytes::copy_from_slice(&bkey), raw_binding);
        }
        Ok(true)
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
                raises.push((st, *need));
            }
        }
        // Group commit: the batch is applied (preconditions checked) under the commit lock, but
        // its durability barrier is awaited after the lock is released, so commits that arrive
        // together share one flush (one fsync, one SlateDB WAL write). A commit is acknowledged
        // only after a flush that covers it.
        let durable = cat.inner.options.durability == Durability::Durable;
        match cat.write_fenced(batch, Durability::Buffered).await {
            Ok(()) => {
                for (st, need) in raises {
                    st.raise_ceiling(need);
                }
                let seq = cat.inner.group.applied();
                self.done_building();
                drop(guard);
                if durable {
                    cat.inner.group.wait_durable(seq, &cat).await?;
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
                            return Err(already_exists(space, id, &b));
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

fn release(cat: &Catalog, keys: impl IntoIterator<Item = (u8, u64)>) {
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

/// Does `tag` hold rows of id space `space`? (Used by verification.)
pub fn space_of_table(tag: tags::Tag) -> Option<&'static IdSpace> {
    keystone::SPACES.iter().copied().find(|s| s.table == tag)
}
