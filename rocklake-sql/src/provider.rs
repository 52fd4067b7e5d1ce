//! The tables as DataFusion sees them: one catalog whose schemas and tables come from the
//! session's transaction, and a table provider that scans the store through it.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{CatalogProvider, SchemaProvider, Session, TableProvider};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::TableType;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use tokio::sync::Mutex as AsyncMutex;

use crate::catalog::Catalog;
use crate::error::{to_df, SqlError};
use crate::pg_catalog::{
    information_schema_table, pg_catalog_table, INFORMATION_SCHEMA_TABLES, PG_CATALOG_TABLES,
};
use crate::phases::{Phase, PhaseTimes};
use crate::relation::RelDef;
use crate::scan::ScanShape;
use crate::txn::Txn;

/// What a session shares with the DataFusion objects planning its statements.
#[derive(Debug, Default)]
pub struct Shared {
    /// The open transaction (`None` between statements outside a transaction block).
    pub txn: AsyncMutex<Option<Txn>>,
    /// The catalog of that transaction, for DataFusion's synchronous name lookups.
    pub catalog: Mutex<Arc<Catalog>>,
    /// Tables expose `ctid` to the statement being planned (it names `ctid`).
    pub expose_ctid: AtomicBool,
    /// Tables expose their storage key (the plan of an UPDATE or DELETE).
    pub expose_key: AtomicBool,
    /// When the open transaction began (µs since 1970): what `now()` answers in it, as in
    /// PostgreSQL.
    pub txn_start: AtomicI64,
    /// Stored pairs the session's scans have read (what filter pushdown saves shows here).
    pub pairs_read: AtomicU64,
    /// The database name the client connected to (`current_database()`, `pg_database`).
    pub database: Mutex<String>,
    /// What `pg_database_size()` answers in the statement being run (the store's bytes of
    /// keys and values, counted before the statement when it calls the function).
    pub database_size: AtomicI64,
    /// Where the session's statement time went.
    pub phases: PhaseTimes,
    /// Statements (or VALUES lists) run on the direct path.
    pub direct_runs: AtomicU64,
    /// Queries answered from the database's kept answers of system-catalog queries.
    pub system_answers_reused: AtomicU64,
    /// The server's databases, when it serves several (`pg_database` lists them).
    pub databases: Option<std::sync::Weak<dyn crate::db::Databases>>,
}

impl Shared {
    fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The catalog names resolve in now (the open transaction's, else the latest).
    pub fn current_catalog(&self) -> Arc<Catalog> {
        self.catalog()
    }

    /// The database name the client connected to.
    pub fn database_name(&self) -> String {
        self.database
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every database of the server, sorted (the one connected to alone on a server of one).
    pub fn database_names(&self) -> Vec<String> {
        match self.databases.as_ref().and_then(std::sync::Weak::upgrade) {
            Some(d) => d.names(),
            None => vec![self.database_name()],
        }
    }

    /// What names the session's view of the system catalogs: the database connected to and,
    /// on a server of several, which of them exist (see [`crate::Databases::generation`]).
    pub fn system_view_name(&self) -> String {
        match self.databases.as_ref().and_then(std::sync::Weak::upgrade) {
            Some(d) => format!("{}\0{}", self.database_name(), d.generation()),
            None => self.database_name(),
        }
    }
}

/// The catalog DataFusion resolves names in.
#[derive(Debug)]
pub struct RockCatalog {
    /// The session's shared state.
    pub shared: Arc<Shared>,
}

impl CatalogProvider for RockCatalog {
    fn schema_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.shared.catalog().schemas.keys().cloned().collect();
        names.push("pg_catalog".into());
        names.push("information_schema".into());
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if name == "pg_catalog" || name == "information_schema" {
            return Some(Arc::new(PgCatalogSchema {
                shared: self.shared.clone(),
                information_schema: name == "information_schema",
            }));
        }
        self.shared.catalog().schemas.contains_key(name).then(|| {
            Arc::new(RockSchema {
                name: name.to_string(),
                shared: self.shared.clone(),
            }) as Arc<dyn SchemaProvider>
        })
    }
}

/// One schema.
#[derive(Debug)]
pub struct RockSchema {
    name: String,
    shared: Arc<Shared>,
}

#[async_trait]
impl SchemaProvider for RockSchema {
    fn table_names(&self) -> Vec<String> {
        self.shared
            .catalog()
            .tables
            .keys()
            .filter(|(s, _)| *s == self.name)
            .map(|(_, t)| t.clone())
            .collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let cat = self.shared.catalog();
        // As in PostgreSQL, whose search path starts with pg_catalog: an unqualified
        // `pg_class` is the system catalog's.
        if PG_CATALOG_TABLES.contains(&name) {
            return pg_catalog_table(&cat, name, &self.shared.database_name(), &|| {
                self.shared.database_names()
            });
        }
        let Some(rel) = cat.tables.get(&(self.name.clone(), name.to_string())) else {
            return Ok(None);
        };
        let ctid = self.shared.expose_ctid.load(Ordering::Acquire);
        let key = self.shared.expose_key.load(Ordering::Acquire);
        Ok(Some(Arc::new(RockTable {
            schema: rel.arrow_schema(ctid, key),
            rel: rel.clone(),
            shared: self.shared.clone(),
            ctid,
            key,
        })))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.shared
            .catalog()
            .tables
            .contains_key(&(self.name.clone(), name.to_string()))
    }
}

/// One table, read through the session's transaction.
#[derive(Debug)]
pub struct RockTable {
    rel: Arc<RelDef>,
    schema: SchemaRef,
    shared: Arc<Shared>,
    ctid: bool,
    key: bool,
}

impl RockTable {
    /// The table's definition.
    pub fn rel(&self) -> &Arc<RelDef> {
        &self.rel
    }
}

#[async_trait]
impl TableProvider for RockTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Filters narrow the key ranges read; DataFusion still evaluates every one of them.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let started = std::time::Instant::now();
        let ranges = self.rel.ranges_for(filters);
        // Only the projected columns are read (DataFusion's projection here includes every
        // column the plan above uses, its filters' too).
        let read: Option<Vec<bool>> = projection.map(|p| {
            let mut read = vec![false; self.rel.columns.len()];
            for &i in p {
                if let Some(r) = read.get_mut(i) {
                    *r = true;
                }
            }
            read
        });
        let batch = {
            let guard = self.shared.txn.lock().await;
            let txn = guard.as_ref().ok_or_else(|| {
                to_df(SqlError::internal(
                    "a table was scanned outside a transaction",
                ))
            })?;
            // Rows come back in the order PostgreSQL's heap would give them: by tuple number,
            // which is the order row versions were written (a scan without ORDER BY reads
            // the same sequence from both).
            let shape = ScanShape {
                ctid: self.ctid,
                key: self.key,
                read: read.as_deref(),
            };
            txn.scan_batch(&self.rel, &ranges, &self.schema, shape)
                .await
                .map_err(to_df)?
        };
        self.shared
            .pairs_read
            .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
        self.shared.phases.since(Phase::Storage, started);
        let exec = MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            self.schema.clone(),
            projection.cloned(),
        )?;
        Ok(exec)
    }
}

/// `pg_catalog` as a schema (for `pg_catalog.pg_class` and the like).
#[derive(Debug)]
pub struct PgCatalogSchema {
    /// Where the catalog comes from.
    pub shared: Arc<Shared>,
    /// `information_schema` rather than `pg_catalog`.
    pub information_schema: bool,
}

#[async_trait]
impl SchemaProvider for PgCatalogSchema {
    fn table_names(&self) -> Vec<String> {
        let names = if self.information_schema {
            INFORMATION_SCHEMA_TABLES
        } else {
            PG_CATALOG_TABLES
        };
        names.iter().map(|n| n.to_string()).collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let cat = self.shared.current_catalog();
        let db = self.shared.database_name();
        if self.information_schema {
            information_schema_table(&cat, name, &db)
        } else {
            pg_catalog_table(&cat, name, &db, &|| self.shared.database_names())
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.table_names().iter().any(|n| n == name)
    }
}
