//! A SQL transaction: a point-in-time view of the store, the transaction's own writes on top,
//! and the preconditions that make its commit one atomic, fenced batch.
//!
//! Reads see the view plus the writes (a transaction reads its own writes). Every row the
//! transaction changes or deletes carries the precondition "still as this transaction read
//! it", every row it adds "still absent", every primary-key entry it adds "absent": a commit
//! that raced another lands whole or not at all, and says which (23505 for a duplicate key,
//! 40001 for a concurrent update).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use rocklake_core::backend::{visit_all, KeyRange, Order, Pager, ReadView, WriteBatch};
use rocklake_core::keys::row_key;
use rocklake_core::tags;
use rocklake_core::values::Value;
use rocklake_core::Error as CoreError;
use rocklake_core::ViewMark;

use crate::catalog::Catalog;
use crate::db::Database;
use crate::error::{state, Result, SqlError};
use crate::locks::{Held, Mode, StopCheck};
use crate::relation::{name_key, RelDef, StoredRow, INDEX_PRIMARY_KEY, INDEX_RELATION_NAME};

mod rows;

/// Transactions begin here rather than in [`crate::db`], which knows nothing of them.
impl Database {
    /// Begin a transaction on a point-in-time view of the store.
    pub async fn begin(self: &Arc<Self>) -> Result<Txn> {
        let (view, mark) = self.keyspace().committed_view_marked().await?;
        // A key space opened read-only refuses writes at the statement, as PostgreSQL's
        // read-only transactions do, not only at COMMIT.
        let read_only = self.keyspace().epoch().is_none();
        // The catalog the view holds. A writer's shared copy is reloaded on every DDL commit
        // of this process, and only one process writes a store (the others are fenced). A
        // reader beside another process's writer follows its definitions here.
        if read_only {
            self.follow_definitions(view.as_ref()).await?;
        }
        let mut txn = Txn::new(self.clone(), view, mark, self.catalog());
        txn.read_only = read_only;
        Ok(txn)
    }

    /// On a read-only key space: when `view` holds a definition newer than every one the
    /// shared catalog has (a table the writer created since it was loaded, DuckLake's inlined
    /// data tables among them), load the catalog again from `view`. One reverse read of the
    /// definitions' key range, limit 1, per transaction. A definition changed in place
    /// (`ALTER TABLE`) keeps its id and is not noticed.
    async fn follow_definitions(&self, view: &dyn ReadView) -> Result<()> {
        let range = KeyRange::prefix(&[tags::RELATION.0]);
        let newest = view.scan(&range, Order::Descending, 1).await?;
        let Some((key, _)) = newest.first() else {
            return Ok(());
        };
        let id = match rocklake_core::keys::Key::decode(key) {
            Ok(rocklake_core::keys::Key::Row { fields, .. }) => fields.first().copied(),
            _ => None,
        };
        let known = self.catalog();
        if id.is_some_and(|id| id > known.newest_definition()) {
            self.install_catalog_from(view).await?;
        }
        Ok(())
    }
}

/// Called with each stored pair (key, value) of a visit; an error stops it.
type PairVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + Send + 'a;

/// An open transaction.
pub struct Txn {
    db: Arc<Database>,
    view: Arc<dyn ReadView>,
    /// Where `view` stands among the writer's changes: while the store has none since, a read
    /// of the store answers what the view does, and the commit checks no precondition (each
    /// is a value read from the view, or from the store since).
    mark: ViewMark,
    writes: BTreeMap<Bytes, Option<Bytes>>,
    conds: BTreeMap<Bytes, Option<Bytes>>,
    /// Schemas and tables as this transaction sees them.
    pub catalog: Arc<Catalog>,
    /// The shared catalog this transaction began from.
    base: Arc<Catalog>,
    /// Whether the transaction changed the catalog.
    pub ddl: bool,
    /// `BEGIN ... READ ONLY`.
    pub read_only: bool,
    /// The table locks this transaction holds until it ends.
    held: Held,
    /// Asked while waiting for a lock: the session's cancel and `statement_timeout`.
    pub stop: Option<Arc<StopCheck>>,
    /// Bytes the writes and preconditions hold, as [`entry_size`] counts them.
    held_bytes: usize,
    /// Their share of the database's memory pool, taken at the first write: a transaction
    /// that writes more than the server's bound fails with `53200` instead of taking the
    /// process's memory (the rows wait here until the commit).
    memory: Option<MemoryReservation>,
}

/// What one entry of the writes or preconditions is counted for besides its key and value:
/// the map's share of a node and the two `Bytes` handles (an estimate, on the high side).
const ENTRY_OVERHEAD: usize = 96;

/// The write set reserves memory from the pool in steps of this much, so that most writes
/// touch only a counter.
const RESERVE_STEP: usize = 256 << 10;

fn entry_size(key: &[u8], value: Option<&Bytes>) -> usize {
    ENTRY_OVERHEAD + key.len() + value.map_or(0, Bytes::len)
}

impl Txn {
    /// Whether the transaction has written nothing (rows, keys or definitions): ending it
    /// loses nothing but its snapshot and the locks its writes would have taken.
    pub fn is_clean(&self) -> bool {
        self.writes.is_empty() && !self.ddl
    }
}

impl std::fmt::Debug for Txn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Txn")
            .field("writes", &self.writes.len())
            .field("conds", &self.conds.len())
            .finish()
    }
}

impl Txn {
    /// Take back everything this transaction wrote for `rel`, a table it created itself (a
    /// temporary table `ON COMMIT DROP`): its definition, rows and index entries, so that the
    /// commit carries none of it.
    pub fn discard_created(&mut self, rel: &RelDef) {
        let ranges: Vec<KeyRange> = [
            Some(rel.full_range()),
            rel.overflow_range(),
            Some(KeyRange::prefix(&rel.pk_index_prefix())),
            Some(KeyRange::prefix(&rel.tuple_index_prefix())),
            Some(KeyRange::prefix(&row_key(tags::RELATION, &[rel.id]))),
        ]
        .into_iter()
        .flatten()
        .collect();
        let name = name_key(&rel.schema, Some(&rel.name));
        let inside = |k: &Bytes| k[..] == name[..] || ranges.iter().any(|r| r.contains(k));
        self.writes.retain(|k, _| !inside(k));
        self.conds.retain(|k, _| !inside(k));
        self.held_bytes = (self.writes.iter().chain(&self.conds))
            .map(|(k, v)| entry_size(k, v.as_ref()))
            .sum();
        Arc::make_mut(&mut self.catalog)
            .tables
            .remove(&(rel.schema.clone(), rel.name.clone()));
    }

    /// Bytes of keys and values in the store as this transaction sees it (its own writes not
    /// counted): `pg_database_size`.
    pub async fn stored_bytes(&self) -> Result<i64> {
        let mut total = 0i64;
        visit_all(self.view.as_ref(), KeyRange::all(), 4096, &mut |k, v| {
            total += (k.len() + v.len()) as i64;
            true
        })
        .await?;
        Ok(total)
    }
    pub(crate) fn new(
        db: Arc<Database>,
        view: Arc<dyn ReadView>,
        mark: ViewMark,
        catalog: Arc<Catalog>,
    ) -> Txn {
        Txn {
            view,
            mark,
            writes: BTreeMap::new(),
            conds: BTreeMap::new(),
            base: catalog.clone(),
            catalog,
            ddl: false,
            read_only: false,
            held: db.locks().owner(),
            stop: None,
            held_bytes: 0,
            memory: None,
            db,
        }
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// The database this transaction belongs to.
    pub fn db(&self) -> &Arc<Database> {
        &self.db
    }

    /// Read one key: own writes, then the view.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        if let Some(w) = self.writes.get(key) {
            return Ok(w.clone());
        }
        Ok(self.view.get(key).await?)
    }

    /// Every pair in `range`, ascending, own writes applied.
    pub async fn scan(&self, range: &KeyRange) -> Result<Vec<(Bytes, Bytes)>> {
        self.scan_in(self.view.as_ref(), range).await
    }

    /// The last pair of `range` (the greatest key), own writes applied: read from the end of
    /// the range, a page at a time past keys this transaction deleted.
    pub async fn last(&self, range: &KeyRange) -> Result<Option<(Bytes, Bytes)>> {
        let (lo, hi) = range.as_slices();
        let own = self
            .writes
            .range::<[u8], _>((lo, hi))
            .rev()
            .find_map(|(k, v)| v.as_ref().map(|v| (k.clone(), v.clone())));
        let mut pager = Pager::new(self.view.as_ref(), range.clone(), Order::Descending, 8);
        let mut stored = None;
        'pages: while let Some(page) = pager.next_page().await? {
            for (k, v) in page {
                // A key this transaction wrote is answered by `own` (or deleted).
                if !self.writes.contains_key(&k) {
                    stored = Some((k, v));
                    break 'pages;
                }
            }
        }
        Ok(match (own, stored) {
            (Some(o), Some(s)) => Some(if o.0 > s.0 { o } else { s }),
            (o, s) => o.or(s),
        })
    }

    /// Every pair of `view` in `range`, ascending, own writes applied.
    async fn scan_in(&self, view: &dyn ReadView, range: &KeyRange) -> Result<Vec<(Bytes, Bytes)>> {
        let mut base: Vec<(Bytes, Bytes)> = Vec::new();
        visit_all(view, range.clone(), 512, &mut |k, v| {
            base.push((Bytes::copy_from_slice(k), Bytes::copy_from_slice(v)));
            true
        })
        .await?;
        let (lo, hi) = range.as_slices();
        let own: Vec<(&Bytes, &Option<Bytes>)> = self.writes.range::<[u8], _>((lo, hi)).collect();
        if own.is_empty() {
            return Ok(base);
        }
        let mut merged: BTreeMap<Bytes, Bytes> = base.into_iter().collect();
        for (k, v) in own {
            match v {
                Some(v) => {
                    merged.insert(k.clone(), v.clone());
                }
                None => {
                    merged.remove(k);
                }
            }
        }
        Ok(merged.into_iter().collect())
    }

    /// Every row of `rel` in the given key ranges (the whole table without them).
    ///
    /// With `tuples`, every row carries its tuple number (`ctid`).
    pub async fn rows(
        &self,
        rel: &RelDef,
        ranges: &[KeyRange],
        tuples: bool,
    ) -> Result<Vec<StoredRow>> {
        self.rows_with(rel, ranges, tuples, tuples, None).await
    }

    /// The rows of `ranges` in the order PostgreSQL's heap would return them: by tuple number
    /// (the order row versions were written; rows written without one, outside SQL, last).
    /// With `ctid` every row must have its tuple number.
    pub async fn rows_in_heap_order(
        &self,
        rel: &RelDef,
        ranges: &[KeyRange],
        ctid: bool,
    ) -> Result<Vec<StoredRow>> {
        self.columns_in_heap_order(rel, ranges, ctid, None).await
    }

    /// [`Txn::rows_in_heap_order`] with only the SQL columns `columns` marks read (the others
    /// `Null`, see [`RelDef::stored_cells`]); `None` reads every column.
    pub async fn columns_in_heap_order(
        &self,
        rel: &RelDef,
        ranges: &[KeyRange],
        ctid: bool,
        columns: Option<&[bool]>,
    ) -> Result<Vec<StoredRow>> {
        let cells = columns.and_then(|c| rel.stored_cells(c));
        let mut rows = self
            .rows_with(rel, ranges, true, ctid, cells.as_deref())
            .await?;
        rows.sort_by_key(|r| r.tuple.unwrap_or(u64::MAX));
        Ok(rows)
    }

    async fn rows_with(
        &self,
        rel: &RelDef,
        ranges: &[KeyRange],
        tuples: bool,
        strict: bool,
        cells: Option<&[bool]>,
    ) -> Result<Vec<StoredRow>> {
        let mut out: Vec<StoredRow> = Vec::new();
        for r in ranges {
            let first = out.len();
            self.decoded(rel, r, cells, &|_| true, &mut out).await?;
            let read = &mut out[first..];
            // Rows written since the tuple number is kept in the row need no index read.
            if tuples && rel.tuples_indexed() && read.iter().any(|r| r.tuple.is_none()) {
                let mut numbers: Vec<u64> =
                    read.iter().map(|r| r.tuple.unwrap_or(u64::MAX)).collect();
                let rows: &[StoredRow] = read;
                self.merge_tuple_index(rel, r, &|i| rows[i].key.as_ref(), &mut numbers)
                    .await?;
                for (row, n) in read.iter_mut().zip(numbers) {
                    if n != u64::MAX {
                        row.tuple = Some(n);
                    }
                }
            }
            if strict {
                if let Some(r) = read.iter().find(|r| r.tuple.is_none()) {
                    return Err(SqlError::new(
                        state::DATA_CORRUPTED,
                        format!(
                            "the row {} of {} has no tuple number",
                            rocklake_core::keys::render(&r.key),
                            rel.qualified()
                        ),
                    ));
                }
            }
        }
        out.extend(self.overflow_rows(rel, ranges).await?);
        Ok(out)
    }

    /// The overflow rows of `rel` (see [`RelDef::overflow_range`]) whose storage key, were it
    /// free, would lie in one of `ranges`, own writes applied; each carries its tuple number.
    pub(crate) async fn overflow_rows(
        &self,
        rel: &RelDef,
        ranges: &[KeyRange],
    ) -> Result<Vec<StoredRow>> {
        let Some(range) = rel.overflow_range() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let home_in_ranges = |cells: &[Value]| {
            rel.home_key(cells)
                .is_some_and(|h| ranges.iter().any(|r| r.contains(&h)))
        };
        self.decoded(rel, &range, None, &home_in_ranges, &mut out)
            .await?;
        Ok(out)
    }

    /// Append to `out` the rows of `rel` stored in `range` (own writes applied) whose cells
    /// `keep` accepts, decoding only the stored cells `cells` marks when given.
    async fn decoded(
        &self,
        rel: &RelDef,
        range: &KeyRange,
        cells: Option<&[bool]>,
        keep: &(dyn Fn(&[Value]) -> bool + Sync),
        out: &mut Vec<StoredRow>,
    ) -> Result<()> {
        self.visit(range, &mut |k, v| {
            if let Some((cells, tuple)) = rel.decode_cells(k, v, cells)? {
                if keep(&cells) {
                    out.push(StoredRow {
                        key: Bytes::copy_from_slice(k),
                        cells,
                        tuple,
                    });
                }
            }
            Ok(())
        })
        .await
    }

    /// Whether `rel` has an overflow row in `ranges` (see [`Txn::overflow_rows`]).
    pub(crate) async fn has_overflow(&self, rel: &RelDef, ranges: &[KeyRange]) -> Result<bool> {
        Ok(!self.overflow_rows(rel, ranges).await?.is_empty())
    }

    /// Fill in the tuple numbers `tuples` lacks (`u64::MAX`) from the tuple index, for the
    /// rows of `rel` read from `range` whose keys, in key order, are `key(0..tuples.len())`.
    /// The index holds `prefix | row key`, so its entries come in the rows' key order: one
    /// merge numbers them, with nothing copied.
    pub(crate) async fn merge_tuple_index<'k>(
        &self,
        rel: &RelDef,
        range: &KeyRange,
        key: &(dyn Fn(usize) -> &'k [u8] + Sync),
        tuples: &mut [u64],
    ) -> Result<()> {
        let prefix = rel.tuple_index_prefix();
        let rows = tuples.len();
        let mut next = 0;
        self.visit(&prefixed(&prefix, range), &mut |k, v| {
            let row_key = &k[prefix.len()..];
            while next < rows && key(next) < row_key {
                next += 1;
            }
            if next < rows && key(next) == row_key {
                let n = <[u8; 8]>::try_from(v).map_err(|_| {
                    SqlError::new(
                        state::DATA_CORRUPTED,
                        format!(
                            "the tuple number under {} is not 8 bytes",
                            rocklake_core::keys::hex(k)
                        ),
                    )
                })?;
                if tuples[next] == u64::MAX {
                    tuples[next] = u64::from_be_bytes(n);
                }
                next += 1;
            }
            Ok(())
        })
        .await
    }

    /// Offer each pair of `range`, ascending, own writes applied, to `each`; the first error
    /// stops the visit and is returned. Without own writes in the range the view lends each
    /// pair in place, uncopied.
    pub(crate) async fn visit(&self, range: &KeyRange, each: &mut PairVisitor<'_>) -> Result<()> {
        let (lo, hi) = range.as_slices();
        if self.writes.range::<[u8], _>((lo, hi)).next().is_some() {
            for (k, v) in self.scan(range).await? {
                each(&k, &v)?;
            }
            return Ok(());
        }
        let mut failed = None;
        visit_all(
            self.view.as_ref(),
            range.clone(),
            512,
            &mut |k, v| match each(k, v) {
                Ok(()) => true,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            },
        )
        .await?;
        failed.map_or(Ok(()), Err)
    }

    fn writable(&self) -> Result<()> {
        if self.read_only {
            return Err(SqlError::new(
                state::READ_ONLY_TRANSACTION,
                "cannot execute a write in a read-only transaction",
            ));
        }
        Ok(())
    }

    /// Before this transaction's first write to `rel`: take the table's lock in `mode`
    /// (waiting while another transaction drops it, or, to drop it, while others write it),
    /// then make sure its definition is still stored. The commit expects the definition
    /// unchanged, so rows never land in a table dropped meanwhile.
    async fn guard(&mut self, rel: &RelDef, mode: Mode) -> Result<()> {
        let name = rel.qualified();
        self.lock_definition(rel.id, mode, &name, || {
            SqlError::new(
                state::UNDEFINED_TABLE,
                format!("relation \"{name}\" does not exist: another session dropped it"),
            )
        })
        .await
    }

    /// Lock relation `id` (a table or a schema, `name`) in `mode` until the transaction ends;
    /// then its definition must still be stored (else `gone`), and the commit expects it
    /// unchanged. One this transaction created or dropped needs no lock: no other sees it.
    async fn lock_definition(
        &mut self,
        id: u64,
        mode: Mode,
        name: &str,
        gone: impl FnOnce() -> SqlError,
    ) -> Result<()> {
        self.writable()?;
        if self.held.holds(id, mode) {
            return Ok(());
        }
        let def = Bytes::from(row_key(tags::RELATION, &[id]));
        if self.writes.contains_key(&def) {
            return Ok(());
        }
        self.held
            .acquire(id, mode, name, self.stop.as_deref())
            .await?;
        let stored = self.db.keyspace().backend().get(&def).await?;
        if stored.is_none() {
            return Err(gone());
        }
        if !self.conds.contains_key(&def) {
            self.expect(def, stored)?;
        }
        Ok(())
    }

    /// Lock schema `id` (`name`) in `mode`, as PostgreSQL locks a schema: a table created in
    /// it takes it shared ([`Mode::Write`]), `DROP SCHEMA` alone ([`Mode::Exclusive`]), so that
    /// neither commits around the other (a drop that cascaded over the tables it saw would
    /// leave one created meanwhile). Held to the transaction's end. Then the schema must still
    /// be stored (`3F000` when another session dropped it meanwhile), and the commit expects
    /// it unchanged. A schema this transaction created or dropped needs no lock.
    pub async fn guard_schema(&mut self, id: u64, name: &str, mode: Mode) -> Result<()> {
        self.lock_definition(id, mode, name, || {
            SqlError::new(
                state::INVALID_SCHEMA_NAME,
                format!("schema \"{name}\" does not exist"),
            )
        })
        .await
    }

    /// Whether the store holds `key` now, this transaction's own writes included.
    pub async fn stored_now(&self, key: &[u8]) -> Result<bool> {
        if let Some(w) = self.writes.get(key) {
            return Ok(w.is_some());
        }
        Ok(self.db.keyspace().backend().get(key).await?.is_some())
    }

    /// Remember what the view holds for `key` before the first write to it, as the commit's
    /// precondition.
    async fn touch(&mut self, key: &Bytes) -> Result<()> {
        if !self.writes.contains_key(key) && !self.conds.contains_key(key) {
            let seen = self.view.get(key).await?;
            self.expect(key.clone(), seen)?;
        }
        Ok(())
    }

    /// Whether `key` is free for a new row (own writes applied); when the view holds nothing
    /// there, that is also remembered as the precondition of the row's write, which a
    /// [`Txn::touch`] would otherwise read again.
    async fn free_for_row(&mut self, key: &Bytes) -> Result<bool> {
        if let Some(w) = self.writes.get(key) {
            return Ok(w.is_none());
        }
        let seen = self.view.get(key).await?;
        if seen.is_some() {
            return Ok(false);
        }
        if !self.conds.contains_key(key) {
            self.expect(key.clone(), None)?;
        }
        Ok(true)
    }

    /// Whether the store holds `key` now, where the view holds nothing: not read when the
    /// store has had no change since the view was taken.
    async fn stored_since_view(&self, key: &[u8]) -> Result<bool> {
        if self.db.keyspace().unchanged_since(self.mark) {
            return Ok(false);
        }
        Ok(self.db.keyspace().backend().get(key).await?.is_some())
    }

    /// Record a write (`None` deletes), counted against the memory bound.
    fn write(&mut self, key: Bytes, value: Option<Bytes>) -> Result<()> {
        let key_len = key.len();
        let added = entry_size(&key, value.as_ref());
        let replaced = self.writes.insert(key, value);
        let removed = replaced.map_or(0, |old| {
            ENTRY_OVERHEAD + key_len + old.map_or(0, |v| v.len())
        });
        self.count(added, removed)
    }

    /// Record the precondition that `key` still holds `seen` at the commit (the caller knows
    /// there is none yet for it).
    fn expect(&mut self, key: Bytes, seen: Option<Bytes>) -> Result<()> {
        let added = entry_size(&key, seen.as_ref());
        self.conds.insert(key, seen);
        self.count(added, 0)
    }

    /// Count `added` more bytes and `removed` fewer as held, reserving from the pool when the
    /// share taken so far is passed.
    fn count(&mut self, added: usize, removed: usize) -> Result<()> {
        self.held_bytes = (self.held_bytes + added).saturating_sub(removed);
        let memory = self.memory.get_or_insert_with(|| {
            MemoryConsumer::new("a transaction's writes").register(&self.db.memory_pool())
        });
        let Some(short) = self.held_bytes.checked_sub(memory.size()) else {
            return Ok(());
        };
        if short == 0 || memory.try_grow(short.max(RESERVE_STEP)).is_ok() {
            return Ok(());
        }
        memory.try_grow(short).map_err(SqlError::from)
    }

    /// Write a raw pair (definitions and index entries).
    pub async fn put_raw(&mut self, key: Bytes, value: Bytes) -> Result<()> {
        self.writable()?;
        self.touch(&key).await?;
        self.write(key, Some(value))?;
        Ok(())
    }

    /// Delete a raw pair.
    pub async fn delete_raw(&mut self, key: Bytes) -> Result<()> {
        self.writable()?;
        self.touch(&key).await?;
        self.write(key, None)?;
        Ok(())
    }

    /// Commit: one fenced, atomic, durable batch.
    pub async fn commit(mut self) -> Result<()> {
        if self.writes.is_empty() {
            return Ok(());
        }
        // Nothing below reads the view. Let go of it first: an engine without snapshots
        // (sled) would otherwise keep, for it, the old value of every key this batch writes.
        self.view = Arc::new(rocklake_core::backend::ClosedView);
        let mut batch = WriteBatch::new();
        for (k, v) in &self.writes {
            match v {
                Some(v) => batch.put(k.clone(), v.clone()),
                None => batch.delete(k.clone()),
            };
        }
        for (k, v) in &self.conds {
            batch.expect(k.clone(), v.clone());
        }
        let ks = self.db.keyspace().clone();
        match ks.commit_batch_read_at(batch, self.mark).await {
            Ok(()) => {
                if self.ddl {
                    self.db
                        .install_catalog(&self.base, self.catalog.clone())
                        .await?;
                }
                Ok(())
            }
            Err(CoreError::ConditionFailed { raw_key, key }) => {
                // Which precondition an engine reports first is its own business: a primary
                // key another commit took meanwhile is the answer that matters (23505), even
                // when the row's own key was checked first.
                if let Some(e) = self.taken_primary_key().await? {
                    return Err(e);
                }
                Err(self.explain_conflict(&raw_key, &key))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The first primary-key entry this transaction adds that the store now holds.
    async fn taken_primary_key(&self) -> Result<Option<SqlError>> {
        let store = self.db.keyspace().backend();
        for (k, expected) in &self.conds {
            let pk = k.len() >= 10 && k[0] == tags::SECONDARY_INDEX.0 && k[1] == INDEX_PRIMARY_KEY;
            if !pk || expected.is_some() || !matches!(self.writes.get(k), Some(Some(_))) {
                continue;
            }
            if store.get(k).await?.is_some() {
                let id = u64::from_be_bytes(k[2..10].try_into().unwrap());
                let name = self
                    .catalog
                    .by_id(id)
                    .map(|r| r.pkey_name())
                    .unwrap_or_else(|| format!("relation {id}'s primary key"));
                return Ok(Some(SqlError::new(
                    state::UNIQUE_VIOLATION,
                    format!("duplicate key value violates unique constraint \"{name}\""),
                )));
            }
        }
        Ok(None)
    }

    fn explain_conflict(&self, raw_key: &[u8], rendered: &str) -> SqlError {
        if raw_key.len() >= 10
            && raw_key[0] == tags::SECONDARY_INDEX.0
            && raw_key[1] == INDEX_PRIMARY_KEY
            && matches!(self.conds.get(raw_key), Some(None))
        {
            let id = u64::from_be_bytes(raw_key[2..10].try_into().unwrap());
            if let Some(rel) = self.catalog.by_id(id) {
                return SqlError::new(
                    state::UNIQUE_VIOLATION,
                    format!(
                        "duplicate key value violates unique constraint \"{}\"",
                        rel.pkey_name()
                    ),
                );
            }
        }
        if raw_key.len() > 2
            && raw_key[0] == tags::SECONDARY_INDEX.0
            && raw_key[1] == INDEX_RELATION_NAME
            && matches!(self.conds.get(raw_key), Some(None))
        {
            // Another session created this name first (PostgreSQL's answer after waiting for it).
            let name = String::from_utf8_lossy(&raw_key[2..]);
            return match name.split_once('\0') {
                Some((_, table)) => SqlError::new(
                    state::DUPLICATE_TABLE,
                    format!("relation \"{table}\" already exists"),
                ),
                None => SqlError::new(
                    state::DUPLICATE_SCHEMA,
                    format!("schema \"{name}\" already exists"),
                ),
            };
        }
        if raw_key.len() == 9 && raw_key[0] == tags::RELATION.0 {
            return SqlError::new(
                state::SERIALIZATION_FAILURE,
                "could not serialize access: another session changed the same table definition \
                 concurrently; nothing was committed",
            );
        }
        SqlError::new(
            state::SERIALIZATION_FAILURE,
            format!(
                "could not serialize access due to concurrent update of {rendered}; nothing was \
                 committed"
            ),
        )
    }
}

/// `range` with every bound behind `prefix`.
fn prefixed(prefix: &[u8], range: &KeyRange) -> KeyRange {
    use std::ops::Bound;
    let with = |k: &Bytes| Bytes::from([prefix, k.as_ref()].concat());
    KeyRange {
        start: match &range.start {
            Bound::Included(k) => Bound::Included(with(k)),
            Bound::Excluded(k) => Bound::Excluded(with(k)),
            Bound::Unbounded => Bound::Included(Bytes::copy_from_slice(prefix)),
        },
        end: match &range.end {
            Bound::Included(k) => Bound::Included(with(k)),
            Bound::Excluded(k) => Bound::Excluded(with(k)),
            Bound::Unbounded => KeyRange::prefix(prefix).end,
        },
    }
}
