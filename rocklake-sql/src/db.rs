//! A SQL database over one RockLake key space: the shared catalog of tables and the way
//! transactions begin.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::memory_pool::{
    FairSpillPool, MemoryPool, TrackConsumersPool, UnboundedMemoryPool,
};
use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::parser::ParserError;
use rocklake_core::backend::{visit_all, KeyRange, ReadView, WriteBatch};
use rocklake_core::keys::row_key;
use rocklake_core::keystone;
use rocklake_core::tags;
use rocklake_core::values::{Row, Value};
use rocklake_core::Keyspace;

use crate::catalog::{parse_definition, Catalog};
use crate::error::{Result, SqlError};
use crate::locks::Locks;
use crate::memory::StatementPool;
use crate::parse::ParseCache;
use crate::relation::{name_key, RelDef};

/// How many answers of system-catalog queries [`Database`] keeps.
pub const SYSTEM_ANSWERS: usize = 256;

/// One kept answer: the catalog it was computed from, its columns and rows.
struct SystemAnswer {
    catalog: Arc<Catalog>,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
}

/// The databases of a server that serves several, each a [`Database`] on a store of its own
/// (what `CREATE DATABASE` adds to and `pg_database` lists). The server sets it on each of
/// its databases with [`Database::serve_among`]; a database alone has none, and refuses
/// `CREATE DATABASE`.
#[async_trait::async_trait]
pub trait Databases: Send + Sync + std::fmt::Debug {
    /// Every database's name, sorted.
    fn names(&self) -> Vec<String>;
    /// The database named `name`, if there is one.
    fn get(&self, name: &str) -> Option<Arc<Database>>;
    /// A number that changes whenever a database is added (answers of `pg_database` are
    /// kept only while it stays).
    fn generation(&self) -> u64;
    /// Add the database `name` (already folded as PostgreSQL folds identifiers): an empty
    /// catalog in a store of its own. Refused with `42P04` when it exists.
    async fn create(&self, name: &str) -> Result<()>;
}

/// The shared state of every session on one store.
pub struct Database {
    keyspace: Keyspace,
    catalog: RwLock<Arc<Catalog>>,
    /// Held while a catalog is installed after a DDL commit or read again, so that an older
    /// read never replaces a newer catalog.
    installing: tokio::sync::Mutex<()>,
    /// How many times the catalog was read whole from the store.
    loads: AtomicU64,
    /// Answers of queries that read only the system catalogs, by query text (see
    /// [`Database::system_answer`]).
    system_answers: std::sync::Mutex<HashMap<String, SystemAnswer>>,
    /// Per relation id: the next tuple number (`ctid`), found on first use from the largest
    /// stored one (tuple numbers are positions, not identities: like PostgreSQL's, a number
    /// whose row version is gone may be given again after a restart).
    tuples: tokio::sync::Mutex<HashMap<u64, u64>>,
    /// Table locks between this process's transactions.
    locks: Arc<Locks>,
    /// Parses kept by the shape of their text, for every session.
    parses: ParseCache,
    /// The memory every session's statements share: DataFusion's operators, results until
    /// they are sent and COPY FROM data reserve from it (see [`Database::limit_memory`]).
    memory: RwLock<Arc<dyn MemoryPool>>,
    /// The most one session's statement may hold of `memory` at once (0: no bound of its
    /// own; see [`Database::limit_statement_memory`]).
    statement_memory: AtomicUsize,
    /// The server's databases, when it serves several (see [`Databases`]).
    databases: RwLock<Option<std::sync::Weak<dyn Databases>>>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("tables", &self.catalog().tables.len())
            .finish()
    }
}

impl Database {
    /// Open the SQL layer on a key space. A store that has never held a table gets the
    /// `public` schema, as a new PostgreSQL database has.
    pub async fn open(keyspace: Keyspace) -> Result<Arc<Database>> {
        let catalog = load_catalog(keyspace.backend().as_ref()).await?;
        let fresh = catalog.schemas.is_empty() && catalog.tables.is_empty();
        let db = Arc::new(Database {
            keyspace,
            catalog: RwLock::new(Arc::new(catalog)),
            installing: tokio::sync::Mutex::new(()),
            loads: AtomicU64::new(1),
            system_answers: std::sync::Mutex::new(HashMap::new()),
            tuples: tokio::sync::Mutex::new(HashMap::new()),
            locks: Arc::default(),
            parses: ParseCache::default(),
            memory: RwLock::new(Arc::new(UnboundedMemoryPool::default())),
            statement_memory: AtomicUsize::new(0),
            databases: RwLock::new(None),
        });
        if fresh && db.keyspace.epoch().is_some() {
            // One batch under a freshly issued relation id, with the "still absent" condition
            // every new row's key carries (what the transaction this replaces wrote).
            let id = db.issue_relation_id().await?;
            let key = Bytes::from(row_key(tags::RELATION, &[id]));
            let mut batch = WriteBatch::new();
            batch.put(
                key.clone(),
                Bytes::from(definition_row(id, "public", "CREATE SCHEMA \"public\"")),
            );
            batch.expect(key, None);
            let name = Bytes::from(name_key("public", None));
            batch.put(name.clone(), Bytes::copy_from_slice(&id.to_be_bytes()));
            batch.expect(name, None);
            db.keyspace.commit_batch(batch).await?;
            db.reload_catalog().await?;
        }
        Ok(db)
    }

    /// Bound the memory that the statements of every session created from now on hold at
    /// once (their results until sent, and DataFusion's sorts, joins and aggregations) to
    /// `bytes`, shared fairly among the statements that need it. A
    /// statement that would pass it fails with `53200` (out of memory) and the others go on.
    /// Call before the first session; without a call there is no bound.
    pub fn limit_memory(&self, bytes: usize) {
        *self.memory.write().unwrap_or_else(|e| e.into_inner()) =
            Arc::new(TrackConsumersPool::new(
                FairSpillPool::new(bytes),
                std::num::NonZeroUsize::new(3).expect("3 is not zero"),
            ));
    }

    /// Reserve from `pool` (another database's [`Database::memory_pool`]), so that the
    /// databases of one server share one bound. Call before the first session.
    pub fn share_memory_pool(&self, pool: Arc<dyn MemoryPool>) {
        *self.memory.write().unwrap_or_else(|e| e.into_inner()) = pool;
    }

    /// Bound what one statement of a session created from now on may hold of the memory
    /// pool at once to `bytes` (see [`crate::memory`]): past it the statement fails with
    /// `53200`, while the other sessions keep their share of [`Database::limit_memory`]'s
    /// bound. Without a call a statement may take the whole pool.
    pub fn limit_statement_memory(&self, bytes: usize) {
        self.statement_memory.store(bytes, Ordering::Relaxed);
    }

    /// The memory pool sessions reserve from (see [`Database::limit_memory`]).
    pub fn memory_pool(&self) -> Arc<dyn MemoryPool> {
        self.memory
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The pool a new session's statements reserve from: [`Database::memory_pool`] under the
    /// bound of [`Database::limit_statement_memory`].
    pub fn session_memory_pool(&self) -> Arc<dyn MemoryPool> {
        match self.statement_memory.load(Ordering::Relaxed) {
            0 => self.memory_pool(),
            bytes => Arc::new(StatementPool::new(self.memory_pool(), bytes)),
        }
    }

    /// The table locks of this process's transactions.
    pub fn locks(&self) -> &Arc<Locks> {
        &self.locks
    }

    /// The key space underneath.
    pub fn keyspace(&self) -> &Keyspace {
        &self.keyspace
    }

    /// The catalog as last committed.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Read the catalog again from the store.
    pub async fn reload_catalog(&self) -> Result<()> {
        let _installing = self.installing.lock().await;
        self.load_and_install().await
    }

    /// Load the catalog from `view` and make it the shared one (a reader following another
    /// process's writer; see `Database::begin`).
    pub(crate) async fn install_catalog_from(&self, view: &dyn ReadView) -> Result<()> {
        let _installing = self.installing.lock().await;
        let c = load_catalog(view).await?;
        self.loads.fetch_add(1, Ordering::Relaxed);
        let mut shared = self.catalog.write().unwrap_or_else(|e| e.into_inner());
        // Two transactions may load at once from views of different ages: the newer stays.
        if c.newest_definition() >= shared.newest_definition() {
            *shared = Arc::new(c);
        }
        Ok(())
    }

    async fn load_and_install(&self) -> Result<()> {
        // As a reader sees the store: another session's DDL whose flush is still under way
        // is not in the shared catalog before it is durable.
        let view = self.keyspace.committed_view().await?;
        let c = load_catalog(view.as_ref()).await?;
        self.loads.fetch_add(1, Ordering::Relaxed);
        *self.catalog.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(c);
        Ok(())
    }

    /// After a commit that changed the catalog: `committed`, the committing transaction's own
    /// catalog, becomes the shared one when the transaction began from the shared one (`base`,
    /// so no other DDL landed since); otherwise the catalog is read again from the store, which
    /// holds both. Reading every definition again on each DDL commit cost time in proportion to
    /// the number of tables (DuckLake creates a table per inlined-data version).
    pub async fn install_catalog(
        &self,
        base: &Arc<Catalog>,
        committed: Arc<Catalog>,
    ) -> Result<()> {
        let _installing = self.installing.lock().await;
        {
            let mut current = self.catalog.write().unwrap_or_else(|e| e.into_inner());
            if Arc::ptr_eq(&current, base) {
                *current = committed;
                return Ok(());
            }
        }
        self.load_and_install().await
    }

    /// Parse a SQL text (PostgreSQL's dialect), from the kept parse of its shape when one of
    /// the same shape came before (see [`crate::parse`]).
    pub fn parse(&self, sql: &str) -> std::result::Result<Vec<Statement>, ParserError> {
        self.parses.parse(sql)
    }

    /// How many texts were parsed from a kept parse of their shape.
    pub fn parses_reused(&self) -> u64 {
        self.parses.hits()
    }

    /// The answer kept for `key` (a query of the system catalogs only, with what else it
    /// depends on) when it was computed from `catalog` itself: such an answer depends on
    /// nothing else, and a catalog, once built, never changes.
    pub fn system_answer(
        &self,
        key: &str,
        catalog: &Arc<Catalog>,
    ) -> Option<(SchemaRef, Vec<RecordBatch>)> {
        let answers = self
            .system_answers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let a = answers.get(key)?;
        Arc::ptr_eq(&a.catalog, catalog).then(|| (a.schema.clone(), a.batches.clone()))
    }

    /// Keep the answer to `key` computed from `catalog` (at most [`SYSTEM_ANSWERS`] answers:
    /// all are dropped when the limit is reached, and each is worth keeping only until the
    /// catalog next changes).
    pub fn keep_system_answer(
        &self,
        key: String,
        catalog: Arc<Catalog>,
        answer: (SchemaRef, Vec<RecordBatch>),
    ) {
        let mut answers = self
            .system_answers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if answers.len() >= SYSTEM_ANSWERS {
            answers.clear();
        }
        answers.insert(
            key,
            SystemAnswer {
                catalog,
                schema: answer.0,
                batches: answer.1,
            },
        );
    }

    /// Serve this database as one of `databases` (weakly held: they hold their databases).
    pub fn serve_among(&self, databases: std::sync::Weak<dyn Databases>) {
        *self.databases.write().unwrap_or_else(|e| e.into_inner()) = Some(databases);
    }

    /// The server's databases, when it serves several and still runs.
    pub fn databases(&self) -> Option<Arc<dyn Databases>> {
        self.databases
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(std::sync::Weak::upgrade)
    }

    /// How many times the catalog has been read whole from the store (once on open).
    pub fn catalog_loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }

    /// The next tuple number of `rel`.
    pub async fn next_tuple(&self, rel: &RelDef) -> Result<u64> {
        let mut tuples = self.tuples.lock().await;
        if let Some(n) = tuples.get_mut(&rel.id) {
            *n += 1;
            return Ok(*n - 1);
        }
        let view = self.keyspace.backend().as_ref();
        let mut max = 0u64;
        let mut bad: Option<SqlError> = None;
        if rel.tuples_indexed() {
            visit_all(
                view,
                KeyRange::prefix(&rel.tuple_index_prefix()),
                1024,
                &mut |_, v| {
                    if let Ok(b) = <[u8; 8]>::try_from(v) {
                        max = max.max(u64::from_be_bytes(b));
                    }
                    true
                },
            )
            .await?;
        } else {
            // An inlined table's overflow rows are not in its range (see
            // `RelDef::overflow_range`); a tagged table's are in its tuple index.
            for range in [Some(rel.full_range()), rel.overflow_range()]
                .into_iter()
                .flatten()
            {
                visit_all(view, range, 1024, &mut |k, v| {
                    match rel.decode(k, v) {
                        Ok(Some((_, Some(t)))) => max = max.max(t),
                        Ok(_) => {}
                        Err(e) => {
                            bad = Some(e);
                            return false;
                        }
                    }
                    true
                })
                .await?;
                if bad.is_some() {
                    break;
                }
            }
        }
        if let Some(e) = bad {
            return Err(e);
        }
        tuples.insert(rel.id, max + 2);
        Ok(max + 1)
    }

    /// A fresh row id (the `relation-row` id space).
    pub async fn issue_row_id(&self) -> Result<u64> {
        Ok(self.keyspace.issue_id(&keystone::RELATION_ROW).await?)
    }

    /// A fresh relation id (the `relation` id space).
    pub async fn issue_relation_id(&self) -> Result<u64> {
        Ok(self.keyspace.issue_id(&keystone::RELATION).await?)
    }

    /// Close the key space (flushes and releases the store).
    pub async fn close(&self) -> Result<()> {
        Ok(self.keyspace.close().await?)
    }
}

/// The stored value of a definition under `0x82`.
pub fn definition_row(id: u64, name: &str, definition: &str) -> Vec<u8> {
    Row::new(
        0,
        vec![
            Value::Int(id as i64),
            Value::Text(name.to_string()),
            Value::Text(definition.to_string()),
        ],
    )
    .encode_unchecked()
}

/// Read every definition under `0x82`, in relation-id order.
pub async fn load_catalog(view: &dyn ReadView) -> Result<Catalog> {
    let mut defs: Vec<(u64, String)> = Vec::new();
    let mut bad: Option<SqlError> = None;
    visit_all(
        view,
        KeyRange::prefix(&[tags::RELATION.0]),
        256,
        &mut |k, v| {
            match Row::decode(k, v) {
                Ok(row) => match (row.cells.first(), row.cells.get(2)) {
                    (Some(Value::Int(id)), Some(Value::Text(def))) => {
                        defs.push((*id as u64, def.clone()))
                    }
                    _ => {
                        bad = Some(SqlError::new(
                            crate::error::state::DATA_CORRUPTED,
                            format!(
                                "the definition under {} has no id or text",
                                rocklake_core::keys::render(k)
                            ),
                        ));
                        return false;
                    }
                },
                Err(e) => {
                    bad = Some(e.into());
                    return false;
                }
            }
            true
        },
    )
    .await?;
    if let Some(e) = bad {
        return Err(e);
    }
    defs.sort_by_key(|(id, _)| *id);
    let mut catalog = Catalog::default();
    for (id, def) in defs {
        parse_definition(id, &def, &mut catalog)?;
    }
    Ok(catalog)
}
