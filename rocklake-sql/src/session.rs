//! One SQL session: statements in, results out, with PostgreSQL's transaction rules.
//!
//! Queries are planned and run by DataFusion over the session's transaction. INSERT runs its
//! source (`VALUES`, `SELECT`) through DataFusion and casts each value to its column's type;
//! UPDATE and DELETE run a DataFusion SELECT of the rows they name — with the statement's own
//! `WITH`, `FROM`/`USING` and `WHERE`, so DataFusion evaluates every predicate — and change
//! exactly those rows. DDL (CREATE/DROP TABLE, CREATE/DROP SCHEMA) is transactional, as in
//! PostgreSQL.
//!
//! Transactions follow PostgreSQL: a message of several statements outside a transaction
//! block runs as one implicit transaction; `BEGIN ... COMMIT` is one transaction and one atomic
//! batch, durable when COMMIT returns; an error inside a block aborts it until `ROLLBACK` (and
//! `COMMIT` of an aborted block rolls back); a session dropped with a block open lands nothing.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use datafusion::arrow::array::{Array, ArrayRef, BinaryArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::execution::context::{SessionConfig, SessionContext, SessionState};
use datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};
use datafusion::physical_plan::collect;
use datafusion::sql::planner::NullOrdering;
use datafusion::sql::sqlparser::ast::{
    visit_expressions, visit_expressions_mut, AssignmentTarget, CopyLegacyOption, CopyOption,
    CopySource, CopyTarget, Expr, FromTable, ObjectName, ObjectType, Query, SchemaName, SetExpr,
    Statement, TableFactor, TableObject, TransactionAccessMode, TransactionMode,
    UpdateTableFromKind,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use rocklake_core::keys::row_key;
use rocklake_core::tags;
use rocklake_core::values::Value;

use crate::catalog::{fold, rel_from_create, split_name};
use crate::db::{definition_row, Database};
use crate::direct::{self, DirectMode};
use crate::error::{state, Result, SqlError};
use crate::phases::{Phase, PhaseSnapshot};
use crate::provider::{RockCatalog, Shared};
use crate::relation::{RelDef, StoredRow, KEY_COLUMN};
use crate::txn::Txn;
use crate::types::{Elem, SqlType};

/// What one statement produced.
#[derive(Debug)]
pub enum Output {
    /// A result set.
    Rows {
        /// Its columns.
        schema: SchemaRef,
        /// Its rows.
        batches: Vec<RecordBatch>,
    },
    /// The rows of `COPY (query) TO STDOUT`, for the wire layer to encode.
    CopyOut {
        /// Its columns.
        schema: SchemaRef,
        /// Its rows.
        batches: Vec<RecordBatch>,
        /// Binary or text, and the text format's NULL marker and delimiter.
        format: CopyFormat,
    },
    /// A command's completion tag, as PostgreSQL writes it (`INSERT 0 3`, `UPDATE 1`, `BEGIN`).
    Command(String),
    /// `COPY table [(columns)] FROM STDIN`: the caller now sends the rows with
    /// [`Session::copy_in`] (or gives up with [`Session::copy_fail`]); the text's later
    /// statements, if any, did not run.
    CopyIn {
        /// The columns the rows carry, in order, with their types.
        columns: Vec<(String, SqlType)>,
        /// Binary or text, and the text format's NULL marker and delimiter.
        format: CopyFormat,
    },
}

impl Output {
    /// The number of result rows (0 for commands).
    pub fn row_count(&self) -> usize {
        match self {
            Output::Rows { batches, .. } | Output::CopyOut { batches, .. } => {
                batches.iter().map(|b| b.num_rows()).sum()
            }
            Output::Command(_) | Output::CopyIn { .. } => 0,
        }
    }

    /// The completion tag PostgreSQL would send.
    pub fn tag(&self) -> String {
        match self {
            Output::Rows { .. } => format!("SELECT {}", self.row_count()),
            Output::CopyOut { .. } => format!("COPY {}", self.row_count()),
            Output::Command(t) => t.clone(),
            Output::CopyIn { .. } => "COPY".into(),
        }
    }
}

/// Where the session is, in PostgreSQL's terms (the wire's ReadyForQuery status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// `I`: no transaction block.
    Idle,
    /// `T`: inside a transaction block.
    InBlock,
    /// `E`: inside a failed block; only ROLLBACK (or COMMIT, which rolls back) is accepted.
    Failed,
}

/// One session (a connection, or the local shell).
pub struct Session {
    db: Arc<Database>,
    shared: Arc<Shared>,
    ctx: SessionContext,
    status: Status,
    clock: Clock,
    /// The table and columns of a `COPY ... FROM STDIN` waiting for its rows, and whether it
    /// runs in the text's implicit transaction.
    copy: Option<(Arc<RelDef>, Vec<usize>, bool)>,
    /// Temporary tables `ON COMMIT DROP` of the open transaction.
    temp_tables: Vec<(String, String)>,
    /// Whether statements of the direct path's shapes take it.
    direct: DirectMode,
    /// DataFusion's state as the direct path uses it: name-free expression planning and
    /// evaluation, so one copy serves every statement (only functions that do not read the
    /// statement's start time take that path).
    direct_state: Arc<SessionState>,
    /// `ORDER BY`'s default null ordering (DataFusion's setting, as PostgreSQL's: NULLs are
    /// largest).
    nulls: NullOrdering,
}

/// Where a session reads the time from (µs since 1970).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("status", &self.status)
            .finish()
    }
}

impl Session {
    /// A new session on `db`.
    pub fn new(db: Arc<Database>) -> Session {
        let shared = Arc::new(Shared::default());
        *shared.catalog.lock().unwrap_or_else(|e| e.into_inner()) = db.catalog();
        let mut config = SessionConfig::new()
            .with_default_catalog_and_schema("rocklake", "public")
            .with_create_default_catalog_and_schema(false)
            .with_information_schema(false)
            .with_target_partitions(1);
        let opts = config.options_mut();
        opts.sql_parser.map_string_types_to_utf8view = false;
        // A numeric literal is exact, as in PostgreSQL (`1234567890123.0123456789`, or an
        // integer past i64, stays every digit instead of becoming a double).
        opts.sql_parser.parse_float_as_decimal = true;
        opts.sql_parser.dialect = "PostgreSQL".parse().unwrap_or_default();
        let ctx = SessionContext::new_with_config(config);
        // `now()` is the transaction's start, as in PostgreSQL (DataFusion's own is the
        // statement's).
        let started = shared.clone();
        ctx.register_udf(create_udf(
            "now",
            vec![],
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            Volatility::Stable,
            Arc::new(move |_| {
                Ok(ColumnarValue::Scalar(ScalarValue::TimestampMicrosecond(
                    Some(started.txn_start.load(Ordering::Acquire)),
                    Some("+00:00".into()),
                )))
            }),
        ));
        register_pg_functions(&ctx, &shared);
        ctx.register_catalog(
            "rocklake",
            Arc::new(RockCatalog {
                shared: shared.clone(),
            }),
        );
        let ks = db.clone();
        let direct_state = Arc::new(ctx.state());
        let nulls = NullOrdering::from(
            direct_state
                .config_options()
                .sql_parser
                .default_null_ordering
                .as_str(),
        );
        Session {
            db,
            shared,
            ctx,
            status: Status::Idle,
            clock: Arc::new(move || ks.keyspace().now_micros()),
            copy: None,
            temp_tables: Vec::new(),
            direct: DirectMode::from_env(),
            direct_state,
            nulls,
        }
    }

    /// Choose whether statements of the direct path's shapes take it (see
    /// [`crate::direct`]).
    pub fn set_direct_mode(&mut self, mode: DirectMode) {
        self.direct = mode;
    }

    /// Read the time from `clock` (tests and replays that need `now()` to be a given time).
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    /// The database name the client connected with (what `current_database()` answers).
    pub fn set_database(&mut self, name: &str) {
        *self
            .shared
            .database
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = name.to_string();
    }

    /// What one statement would return, without running it (the wire's Describe of a
    /// prepared statement): the types of its `$n` parameters and, for a query, its result
    /// columns (`None`: the statement returns no rows). Several statements are refused, as
    /// PostgreSQL refuses them in a prepared statement.
    pub async fn describe(&mut self, sql: &str) -> Result<(Vec<Option<Field>>, Option<SchemaRef>)> {
        let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .map_err(|e| SqlError::new(state::SYNTAX_ERROR, e.to_string()))?;
        if statements.len() > 1 {
            return Err(SqlError::new(
                state::SYNTAX_ERROR,
                "cannot insert multiple commands into a prepared statement",
            ));
        }
        let Some(stmt) = statements.pop() else {
            return Ok((vec![], None));
        };
        let Statement::Query(mut q) = stmt else {
            return Ok((self.dml_parameter_types(&stmt).await, None));
        };
        if matches!(*q.body, SetExpr::Update(_) | SetExpr::Delete(_)) {
            return Ok((vec![], None));
        }
        if self.status == Status::Idle && self.shared.txn.lock().await.is_none() {
            *self
                .shared
                .catalog
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = self.db.catalog();
        }
        let ctid = mentions_ctid(&q);
        strip_collate(&mut q);
        let col_names = pg_column_names(&q);
        let stmt_for_casts = Statement::Query(q.clone());
        self.shared.expose_ctid.store(ctid, Ordering::Release);
        let planned = self
            .ctx
            .state()
            .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(
                Statement::Query(q),
            )))
            .await;
        self.shared.expose_ctid.store(false, Ordering::Release);
        let plan = planned?;
        let params = plan.get_parameter_types()?;
        // Slot n - 1 for `$n`, whichever numbers the statement uses.
        let mut types: Vec<Option<Field>> = vec![None; max_placeholder(&stmt_for_casts)];
        for (name, dt) in params {
            let n = name.trim_start_matches('$').parse::<usize>().unwrap_or(0);
            if let (Some(slot), Some(dt)) = (n.checked_sub(1).and_then(|i| types.get_mut(i)), dt) {
                *slot = Some(Field::new(name.as_str(), dt, true));
            }
        }
        // `$1::bigint`: a parameter cast to a type has that type, as in PostgreSQL.
        let _ = visit_expressions(&stmt_for_casts, |e| {
            if let Expr::Cast {
                expr, data_type, ..
            } = e
            {
                if let (Some(n), Ok(ty)) = (
                    placeholder_number(expr),
                    SqlType::parse(&data_type.to_string()),
                ) {
                    if let Some(slot @ None) = types.get_mut(n - 1) {
                        *slot = Some(param_field(ty));
                    }
                }
            }
            ControlFlow::<()>::Continue(())
        });
        let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
        let (schema, _) = rename_columns(schema, vec![], &col_names)?;
        Ok((types, Some(schema)))
    }

    /// The types of the `$n` parameters of an INSERT, UPDATE or DELETE (`None` where nothing
    /// says): a value bound for a column takes the column's type, and the rest are inferred
    /// by planning the statement's WHERE as a query.
    async fn dml_parameter_types(&mut self, stmt: &Statement) -> Vec<Option<Field>> {
        let count = max_placeholder(stmt);
        if count == 0 {
            return vec![];
        }
        let mut types: Vec<Option<Field>> = vec![None; count];
        let mut set = |e: &Expr, ty: SqlType| {
            if let Some(n) = placeholder_number(e) {
                if let Some(slot) = types.get_mut(n - 1) {
                    slot.get_or_insert_with(|| param_field(ty));
                }
            }
        };
        let mut probe = None;
        match stmt {
            Statement::Insert(ins) => {
                if let (TableObject::TableName(name), Some(src)) = (&ins.table, &ins.source) {
                    if let (Ok(rel), SetExpr::Values(values)) =
                        (self.table(name), src.body.as_ref())
                    {
                        let targets: Vec<Option<usize>> = if ins.columns.is_empty() {
                            (0..rel.columns.len()).map(Some).collect()
                        } else {
                            ins.columns
                                .iter()
                                .map(|c| {
                                    let n = c.0.last().and_then(|p| p.as_ident()).map(fold);
                                    rel.column_index(&n.unwrap_or_default()).ok()
                                })
                                .collect()
                        };
                        for row in &values.rows {
                            for (e, t) in row.iter().zip(&targets) {
                                if let Some(col) = t.and_then(|t| rel.columns.get(t)) {
                                    set(e, col.ty);
                                }
                            }
                        }
                    }
                }
            }
            Statement::Update(u) => {
                if let Ok((name, _)) = target_of(&u.table.relation) {
                    if let Ok(rel) = self.table(&name) {
                        for a in &u.assignments {
                            if let AssignmentTarget::ColumnName(col) = &a.target {
                                let c = col.0.last().and_then(|p| p.as_ident()).map(fold);
                                if let Ok(i) = rel.column_index(&c.unwrap_or_default()) {
                                    set(&a.value, rel.columns[i].ty);
                                }
                            }
                        }
                    }
                }
                if let Some(sel) = &u.selection {
                    probe = Some(format!("SELECT 1 FROM {} WHERE {sel}", u.table));
                }
            }
            Statement::Delete(d) => {
                let from = match &d.from {
                    FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
                };
                if let (Some(t), Some(sel)) = (from.first(), &d.selection) {
                    probe = Some(format!("SELECT 1 FROM {t} WHERE {sel}"));
                }
            }
            _ => {}
        }
        if let Some(sql) = probe {
            if let Ok((inferred, _)) = Box::pin(self.describe(&sql)).await {
                for (slot, t) in types.iter_mut().zip(inferred) {
                    if slot.is_none() {
                        *slot = t;
                    }
                }
            }
        }
        types
    }

    /// Run `sql` with its `$n` parameters bound to `params` (`params[0]` is `$1`), as the
    /// wire's Bind gives them: each a SQL expression (a literal, `NULL`, a cast literal)
    /// that takes the parameter's place before the statement is planned. A `$n` past the
    /// end of `params` is refused with PostgreSQL's `42P02`.
    pub async fn execute_with_params(&mut self, sql: &str, params: &[Expr]) -> Vec<Result<Output>> {
        self.run_statements(sql, params).await
    }

    /// A statement was interrupted (a cancel request; its future was dropped): as in
    /// PostgreSQL, an implicit transaction is rolled back and a block is aborted.
    pub async fn cancelled(&mut self) {
        self.copy = None;
        match self.status {
            Status::Idle => self.drop_txn().await,
            Status::InBlock => self.status = Status::Failed,
            Status::Failed => {}
        }
    }

    /// Where the session is.
    pub fn status(&self) -> Status {
        self.status
    }

    /// How many stored rows this session's table scans have read so far.
    pub fn rows_read(&self) -> u64 {
        self.shared.pairs_read.load(Ordering::Relaxed)
    }

    /// Run one SQL text of one or more statements and return every result; the first error
    /// ends the text (later statements do not run), as PostgreSQL's simple query does.
    pub async fn execute(&mut self, sql: &str) -> Vec<Result<Output>> {
        self.run_statements(sql, &[]).await
    }

    async fn run_statements(&mut self, sql: &str, params: &[Expr]) -> Vec<Result<Output>> {
        let parsing = Instant::now();
        let parsed = Parser::parse_sql(&PostgreSqlDialect {}, sql);
        self.shared.phases.since(Phase::Parse, parsing);
        let statements = match parsed {
            Ok(s) => s,
            Err(e) => {
                return vec![Err(SqlError::new(state::SYNTAX_ERROR, e.to_string()))];
            }
        };
        // Outside a block, the statements of one text form one implicit transaction.
        let implicit = self.status == Status::Idle;
        let mut out = Vec::with_capacity(statements.len());
        for mut stmt in statements {
            if self.copy.is_some() {
                out.push(Err(SqlError::unsupported(
                    "statements after COPY ... FROM STDIN in the same text are not run",
                )));
                return out;
            }
            let before = self.shared.phases.snapshot();
            let started = Instant::now();
            let r = match bind_parameters(&mut stmt, params) {
                Ok(()) => self.statement(stmt).await,
                Err(e) => Err(e),
            };
            self.account_statement(&before, started);
            match r {
                Ok(o @ Output::CopyIn { .. }) => {
                    if let Some(c) = self.copy.as_mut() {
                        c.2 = implicit && self.status == Status::Idle;
                    }
                    out.push(Ok(o));
                }
                Ok(o) => out.push(Ok(o)),
                Err(e) => {
                    match self.status {
                        Status::InBlock => self.status = Status::Failed,
                        Status::Failed => {}
                        Status::Idle => self.drop_txn().await,
                    }
                    out.push(Err(e));
                    return out;
                }
            }
        }
        if implicit && self.status == Status::Idle && self.copy.is_none() {
            if let Err(e) = self.commit_txn().await {
                out.push(Err(e));
            }
        }
        out
    }

    /// The rows of the `COPY ... FROM STDIN` the last text started: cells in its columns'
    /// order, of their types (integers, timestamps as µs and dates as days as `Int`; text,
    /// uuid, floats and decimals as `Text`; `Bool`; bytea as `Bytes`). Answers `COPY n`; outside
    /// a block the rows are committed before it returns. A bad row refuses the whole COPY.
    pub async fn copy_in(&mut self, rows: Vec<Vec<Value>>) -> Result<Output> {
        let Some((rel, targets, implicit)) = self.copy.take() else {
            return Err(SqlError::new(
                "08P01",
                "no COPY ... FROM STDIN is waiting for rows",
            ));
        };
        let n = rows.len();
        let r = self
            .with_txn(async |txn| {
                for (i, row) in rows.into_iter().enumerate() {
                    if row.len() != targets.len() {
                        return Err(SqlError::new(
                            "22P04",
                            format!(
                                "COPY row {} has {} values, the COPY names {} columns",
                                i + 1,
                                row.len(),
                                targets.len()
                            ),
                        ));
                    }
                    let mut cells = vec![Value::Null; rel.columns.len()];
                    for (v, t) in row.into_iter().zip(&targets) {
                        cells[*t] = v;
                    }
                    txn.insert(&rel, cells).await?;
                }
                Ok(())
            })
            .await;
        let r = match r {
            Ok(()) if implicit => self.commit_txn().await,
            other => other,
        };
        match r {
            Ok(()) => Ok(Output::Command(format!("COPY {n}"))),
            Err(e) => {
                if implicit {
                    self.drop_txn().await;
                } else {
                    self.status = Status::Failed;
                }
                Err(e)
            }
        }
    }

    /// What the statement that began at `started` spent outside the phases it timed itself
    /// goes to [`Phase::Execute`].
    fn account_statement(&self, before: &PhaseSnapshot, started: Instant) {
        let total = started.elapsed().as_nanos() as u64;
        let d = self.shared.phases.snapshot().since(before);
        let timed: u64 = [Phase::Plan, Phase::Optimize, Phase::Storage, Phase::Commit]
            .iter()
            .map(|p| d.get(*p))
            .sum();
        self.shared
            .phases
            .add(Phase::Execute, total.saturating_sub(timed));
        self.shared.phases.statement();
    }

    /// How many statements (or an INSERT's VALUES) this session ran on the direct path.
    pub fn direct_runs(&self) -> u64 {
        self.shared.direct_runs.load(Ordering::Relaxed)
    }

    /// Where this session's statement time has gone so far.
    pub fn phases(&self) -> PhaseSnapshot {
        self.shared.phases.snapshot()
    }

    /// Give up a waiting `COPY ... FROM STDIN` (the client sent CopyFail): nothing of it lands,
    /// and a block it ran in is aborted, as in PostgreSQL.
    pub async fn copy_fail(&mut self, why: &str) -> SqlError {
        if let Some((_, _, implicit)) = self.copy.take() {
            if implicit {
                self.drop_txn().await;
            } else {
                self.status = Status::Failed;
            }
        }
        SqlError::new("57014", format!("COPY from stdin failed: {why}"))
    }

    /// Run `sql` and return its last result, failing on the first error (for tests and the
    /// shell).
    pub async fn run(&mut self, sql: &str) -> Result<Output> {
        let mut last = None;
        for r in self.execute(sql).await {
            last = Some(r?);
        }
        last.ok_or_else(|| SqlError::new(state::SYNTAX_ERROR, "no statement to run"))
    }

    async fn ensure_txn(&mut self) -> Result<()> {
        let mut guard = self.shared.txn.lock().await;
        if guard.is_none() {
            let txn = self.db.begin().await?;
            self.shared
                .txn_start
                .store((self.clock)(), Ordering::Release);
            *self
                .shared
                .catalog
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = txn.catalog.clone();
            *guard = Some(txn);
        }
        Ok(())
    }

    async fn drop_txn(&mut self) {
        self.temp_tables.clear();
        self.shared.txn.lock().await.take();
        *self
            .shared
            .catalog
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = self.db.catalog();
    }

    async fn commit_txn(&mut self) -> Result<()> {
        let temps = std::mem::take(&mut self.temp_tables);
        let mut txn = self.shared.txn.lock().await.take();
        if let Some(t) = txn.as_mut() {
            // Temporary tables ON COMMIT DROP: created and dropped in this transaction, so
            // none of them reaches the store.
            for (schema, name) in temps {
                if let Ok(rel) = t.catalog.table(&schema, &name) {
                    t.discard_created(&rel);
                }
            }
        }
        let committing = Instant::now();
        let r = match txn {
            Some(t) => t.commit().await,
            None => Ok(()),
        };
        self.shared.phases.since(Phase::Commit, committing);
        *self
            .shared
            .catalog
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = self.db.catalog();
        r
    }

    async fn statement(&mut self, mut stmt: Statement) -> Result<Output> {
        rewrite_casts(&mut stmt)?;
        match (&stmt, self.status) {
            (Statement::Rollback { .. }, _) => {
                self.drop_txn().await;
                self.status = Status::Idle;
                return Ok(Output::Command("ROLLBACK".into()));
            }
            (Statement::Commit { .. }, Status::Failed) => {
                self.drop_txn().await;
                self.status = Status::Idle;
                return Ok(Output::Command("ROLLBACK".into()));
            }
            (_, Status::Failed) => {
                return Err(SqlError::new(
                    state::IN_FAILED_TRANSACTION,
                    "current transaction is aborted, commands ignored until end of transaction \
                     block",
                ))
            }
            (Statement::StartTransaction { modes, .. }, _) => {
                // Inside a block PostgreSQL only warns; the block goes on.
                self.ensure_txn().await?;
                if modes.iter().any(|m| {
                    matches!(
                        m,
                        TransactionMode::AccessMode(TransactionAccessMode::ReadOnly)
                    )
                }) {
                    if let Some(t) = self.shared.txn.lock().await.as_mut() {
                        t.read_only = true;
                    }
                }
                self.status = Status::InBlock;
                return Ok(Output::Command("BEGIN".into()));
            }
            (Statement::Commit { .. }, _) => {
                self.status = Status::Idle;
                self.commit_txn().await?;
                return Ok(Output::Command("COMMIT".into()));
            }
            _ => {}
        }
        match stmt {
            Statement::Set(_) => Ok(Output::Command("SET".into())),
            Statement::Discard { .. } => {
                self.drop_txn().await;
                self.status = Status::Idle;
                Ok(Output::Command("DISCARD ALL".into()))
            }
            Statement::Query(q) => {
                self.ensure_txn().await?;
                match *q.body {
                    SetExpr::Update(ref u) => {
                        let with = q.with.as_ref().map(|w| format!("{w} "));
                        self.update(u, with.unwrap_or_default()).await
                    }
                    SetExpr::Delete(ref d) => {
                        let with = q.with.as_ref().map(|w| format!("{w} "));
                        self.delete(d, with.unwrap_or_default()).await
                    }
                    _ => {
                        if calls_function(&q, "pg_database_size") {
                            let n = self.with_txn(async |t| t.stored_bytes().await).await?;
                            self.shared.database_size.store(n, Ordering::Release);
                        }
                        let (schema, batches) = self.query(*q).await?;
                        Ok(Output::Rows { schema, batches })
                    }
                }
            }
            Statement::Insert(_) => {
                self.ensure_txn().await?;
                self.insert(&stmt).await
            }
            Statement::Update(_) => {
                self.ensure_txn().await?;
                self.update(&stmt, String::new()).await
            }
            Statement::Delete(_) => {
                self.ensure_txn().await?;
                self.delete(&stmt, String::new()).await
            }
            Statement::CreateTable(_) | Statement::CreateSchema { .. } | Statement::Drop { .. } => {
                self.ensure_txn().await?;
                self.ddl(stmt).await
            }
            // `COPY table [(columns)] TO STDOUT` is the query of those columns, rows in the
            // table's own order, as in PostgreSQL.
            Statement::Copy {
                source,
                to: true,
                target: CopyTarget::Stdout,
                options,
                legacy_options,
                ..
            } => {
                let format = copy_format(&options, &legacy_options)?;
                self.ensure_txn().await?;
                let q = match source {
                    CopySource::Query(q) => q,
                    CopySource::Table {
                        table_name,
                        columns,
                    } => {
                        self.table(&table_name)?;
                        let list = if columns.is_empty() {
                            "*".to_string()
                        } else {
                            columns
                                .iter()
                                .map(ToString::to_string)
                                .collect::<Vec<_>>()
                                .join(", ")
                        };
                        let sql = format!("SELECT {list} FROM {table_name}");
                        match Parser::parse_sql(&PostgreSqlDialect {}, &sql)
                            .map_err(|e| SqlError::new(state::SYNTAX_ERROR, e.to_string()))?
                            .pop()
                        {
                            Some(Statement::Query(q)) => q,
                            _ => return Err(SqlError::internal(format!("{sql} is not a query"))),
                        }
                    }
                };
                let (schema, batches) = self.query(*q).await?;
                Ok(Output::CopyOut {
                    schema,
                    batches,
                    format,
                })
            }
            Statement::Copy {
                source:
                    CopySource::Table {
                        table_name,
                        columns,
                    },
                to: false,
                target: CopyTarget::Stdin,
                options,
                legacy_options,
                ..
            } => {
                let format = copy_format(&options, &legacy_options)?;
                self.ensure_txn().await?;
                let rel = self.table(&table_name)?;
                let targets: Vec<usize> = if columns.is_empty() {
                    (0..rel.columns.len()).collect()
                } else {
                    columns
                        .iter()
                        .map(|c| rel.column_index(&fold(c)))
                        .collect::<Result<_>>()?
                };
                let cols = targets
                    .iter()
                    .map(|i| (rel.columns[*i].name.clone(), rel.columns[*i].ty))
                    .collect();
                self.copy = Some((rel, targets, false));
                Ok(Output::CopyIn {
                    columns: cols,
                    format,
                })
            }
            other => Err(SqlError::unsupported(format!(
                "RockLake's SQL layer does not run this statement: {}",
                first_words(&other.to_string())
            ))),
        }
    }

    /// Plan and run a query: a single-table read on the direct path, anything else through
    /// DataFusion.
    async fn query(&self, mut q: Query) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let ctid = mentions_ctid(&q);
        strip_collate(&mut q);
        let names = pg_column_names(&q);
        if !ctid && self.direct != DirectMode::Off {
            if let Some(out) = self.direct_select(&q).await {
                if self.direct == DirectMode::Check {
                    let general = self
                        .plan_and_collect(Statement::Query(Box::new(q)), false, false)
                        .await?;
                    same_answer("a SELECT", &out, &general, true)?;
                }
                return rename_columns(out.0, out.1, &names);
            }
        }
        let (schema, batches) = self
            .plan_and_collect(Statement::Query(Box::new(q)), ctid, false)
            .await?;
        rename_columns(schema, batches, &names)
    }

    /// `q` on the direct path, when it is of its shape and it can finish it.
    async fn direct_select(&self, q: &Query) -> Option<(SchemaRef, Vec<RecordBatch>)> {
        let planning = Instant::now();
        let catalog = self.shared.current_catalog();
        let plan = direct::select_shape(q, &catalog, self.nulls);
        self.shared.phases.since(Phase::Plan, planning);
        let plan = plan?;
        let guard = self.shared.txn.lock().await;
        let txn = guard.as_ref()?;
        let (out, read) = direct::select(&self.direct_state, txn, &plan, &self.shared.phases)
            .await
            .ok()??;
        self.shared
            .pairs_read
            .fetch_add(read as u64, Ordering::Relaxed);
        self.shared.direct_runs.fetch_add(1, Ordering::Relaxed);
        Some(out)
    }

    /// The batch a direct UPDATE or DELETE changes: the storage key of every row it names,
    /// then each SET value (the shape [`Session::select_targets`] answers); `None` when the
    /// statement is not of the direct path's shapes or the path cannot finish it.
    async fn direct_targets(
        &self,
        target: &direct::Target,
        selection: Option<&Expr>,
        set: &[&Expr],
    ) -> Option<RecordBatch> {
        let guard = self.shared.txn.lock().await;
        let txn = guard.as_ref()?;
        let (m, read) = direct::matching(
            &self.direct_state,
            txn,
            target,
            selection,
            &self.shared.phases,
        )
        .await
        .ok()??;
        drop(guard);
        self.shared
            .pairs_read
            .fetch_add(read as u64, Ordering::Relaxed);
        let values = direct::evaluate(&self.direct_state, &m, set).ok()??;
        self.shared.direct_runs.fetch_add(1, Ordering::Relaxed);
        let keys: ArrayRef = Arc::new(BinaryArray::from_iter_values(
            m.rows.iter().map(|r| r.key.as_ref()),
        ));
        let mut fields = vec![Field::new(KEY_COLUMN, DataType::Binary, false)];
        let mut columns = vec![keys];
        for (i, v) in values.into_iter().enumerate() {
            fields.push(Field::new(
                format!("__rocklake_set_{i}"),
                v.data_type().clone(),
                true,
            ));
            columns.push(v);
        }
        RecordBatch::try_new_with_options(
            Arc::new(datafusion::arrow::datatypes::Schema::new(fields)),
            columns,
            &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(m.rows.len())),
        )
        .ok()
    }

    async fn plan_and_collect(
        &self,
        stmt: Statement,
        ctid: bool,
        key: bool,
    ) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        // One copy of DataFusion's session state serves planning and execution (each
        // `SessionContext::state()` clones every function registry).
        let state = self.ctx.state();
        let phases = &self.shared.phases;
        self.shared.expose_ctid.store(ctid, Ordering::Release);
        self.shared.expose_key.store(key, Ordering::Release);
        let planning = Instant::now();
        let planned = state
            .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(
                stmt,
            )))
            .await;
        phases.since(Phase::Plan, planning);
        self.shared.expose_ctid.store(false, Ordering::Release);
        self.shared.expose_key.store(false, Ordering::Release);
        let plan = planned?;
        let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
        let optimizing = Instant::now();
        let storage_before = phases.snapshot().get(Phase::Storage);
        let physical = state.create_physical_plan(&plan).await;
        let storage = phases.snapshot().get(Phase::Storage) - storage_before;
        phases.add(
            Phase::Optimize,
            (optimizing.elapsed().as_nanos() as u64).saturating_sub(storage),
        );
        let batches = collect(physical?, state.task_ctx()).await?;
        Ok((schema, batches))
    }

    /// The rows an UPDATE or DELETE changes: the direct path's batch when it has one (checked
    /// against DataFusion's in [`DirectMode::Check`]), else DataFusion's answer to `sql`.
    async fn targets_or_general(
        &self,
        direct: Option<RecordBatch>,
        sql: &str,
        ctid: bool,
        what: &str,
    ) -> Result<Vec<RecordBatch>> {
        match direct {
            Some(b) => {
                if self.direct == DirectMode::Check {
                    let general = self.select_targets(sql, ctid).await?;
                    same_rows(what, std::slice::from_ref(&b), &general)?;
                }
                Ok(vec![b])
            }
            None => self.select_targets(sql, ctid).await,
        }
    }

    /// The rows of an `INSERT ... VALUES` on the direct path, when it can evaluate them.
    fn direct_values(&self, source: &Query) -> Option<RecordBatch> {
        if !direct::bare_body(source, false) {
            return None;
        }
        let SetExpr::Values(values) = source.body.as_ref() else {
            return None;
        };
        let planning = Instant::now();
        let out = direct::values(&self.direct_state, values).ok()?;
        self.shared.phases.since(Phase::Plan, planning);
        if out.is_some() {
            self.shared.direct_runs.fetch_add(1, Ordering::Relaxed);
        }
        out
    }

    /// Plan a SELECT built from parts of an UPDATE or DELETE (displayed back to SQL by the
    /// parser, then parsed again as one query).
    async fn select_targets(&self, sql: &str, ctid: bool) -> Result<Vec<RecordBatch>> {
        let mut stmts = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .map_err(|e| SqlError::internal(format!("planning {sql}: {e}")))?;
        let Some(Statement::Query(mut q)) = stmts.pop() else {
            return Err(SqlError::internal(format!("planning {sql}: not a query")));
        };
        strip_collate(&mut q);
        let (_, batches) = self
            .plan_and_collect(Statement::Query(q), ctid, true)
            .await?;
        Ok(batches)
    }

    async fn with_txn<T>(&self, f: impl AsyncFnOnce(&mut Txn) -> Result<T>) -> Result<T> {
        let mut guard = self.shared.txn.lock().await;
        let txn = guard
            .as_mut()
            .ok_or_else(|| SqlError::internal("no transaction"))?;
        f(txn).await
    }

    fn table(&self, name: &ObjectName) -> Result<Arc<RelDef>> {
        let (s, t) = split_name(name)?;
        let cat = self
            .shared
            .catalog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        cat.table(&s, &t)
    }

    async fn insert(&mut self, stmt: &Statement) -> Result<Output> {
        let Statement::Insert(ins) = stmt else {
            unreachable!("insert() is called with an INSERT")
        };
        if ins.on.is_some() || ins.returning.is_some() {
            return Err(SqlError::unsupported(
                "INSERT ... ON CONFLICT / RETURNING is not supported",
            ));
        }
        let TableObject::TableName(name) = &ins.table else {
            return Err(SqlError::unsupported("INSERT into a table function"));
        };
        let rel = self.table(name)?;
        let targets: Vec<usize> = if ins.columns.is_empty() {
            (0..rel.columns.len()).collect()
        } else {
            ins.columns
                .iter()
                .map(|c| {
                    let n = c.0.last().and_then(|p| p.as_ident()).map(fold);
                    rel.column_index(&n.unwrap_or_default())
                })
                .collect::<Result<_>>()?
        };
        let Some(mut source) = ins.source.clone() else {
            return Err(SqlError::unsupported("INSERT ... DEFAULT VALUES"));
        };
        cast_values_to_targets(&mut source, &rel, &targets);
        let direct = match self.direct {
            DirectMode::Off => None,
            _ => self.direct_values(&source),
        };
        let batches = match direct {
            Some(b) => {
                if self.direct == DirectMode::Check {
                    let (_, general) = self.query(*source).await?;
                    same_rows("an INSERT's VALUES", std::slice::from_ref(&b), &general)?;
                }
                vec![b]
            }
            None => self.query(*source).await?.1,
        };
        let mut n = 0usize;
        let mut rows: Vec<Vec<Value>> = Vec::new();
        for b in &batches {
            if b.num_columns() > targets.len() {
                return Err(SqlError::new(
                    state::SYNTAX_ERROR,
                    "INSERT has more expressions than target columns",
                ));
            }
            if b.num_columns() < targets.len() && !ins.columns.is_empty() {
                return Err(SqlError::new(
                    state::SYNTAX_ERROR,
                    "INSERT has more target columns than expressions",
                ));
            }
            let arrays: Vec<ArrayRef> = (0..b.num_columns())
                .map(|j| {
                    let col = &rel.columns[targets[j]];
                    col.ty.coerce(b.column(j), &col.name)
                })
                .collect::<Result<_>>()?;
            for r in 0..b.num_rows() {
                let mut cells = vec![Value::Null; rel.columns.len()];
                for (j, a) in arrays.iter().enumerate() {
                    let col = &rel.columns[targets[j]];
                    cells[targets[j]] = col.ty.cell(a.as_ref(), r)?;
                }
                rows.push(cells);
            }
        }
        self.with_txn(async |txn| {
            for cells in rows {
                txn.insert(&rel, cells).await?;
                n += 1;
            }
            Ok(())
        })
        .await?;
        Ok(Output::Command(format!("INSERT 0 {n}")))
    }

    async fn update(&mut self, stmt: &Statement, with: String) -> Result<Output> {
        let Statement::Update(u) = stmt else {
            return Err(SqlError::internal("update() needs an UPDATE"));
        };
        if u.returning.is_some() {
            return Err(SqlError::unsupported(
                "UPDATE ... RETURNING is not supported",
            ));
        }
        let (name, qual) = target_of(&u.table.relation)?;
        let rel = self.table(&name)?;
        let mut targets = Vec::with_capacity(u.assignments.len());
        let mut sql = format!("{with}SELECT {qual}.\"{KEY_COLUMN}\"");
        for (i, a) in u.assignments.iter().enumerate() {
            let AssignmentTarget::ColumnName(col) = &a.target else {
                return Err(SqlError::unsupported("UPDATE ... SET (a, b) = (...)"));
            };
            let cname = col
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(fold)
                .unwrap_or_default();
            let idx = rel.column_index(&cname)?;
            targets.push(idx);
            sql.push_str(&format!(", ({}) AS \"__rocklake_set_{i}\"", a.value));
        }
        sql.push_str(&format!(" FROM {}", u.table));
        if let Some(UpdateTableFromKind::AfterSet(from) | UpdateTableFromKind::BeforeSet(from)) =
            &u.from
        {
            for t in from {
                sql.push_str(&format!(", {t}"));
            }
        }
        if let Some(sel) = &u.selection {
            sql.push_str(&format!(" WHERE {sel}"));
        }
        let ctid = mentions_ctid_stmt(stmt);
        let shape = match self.direct {
            DirectMode::Off => None,
            _ if ctid || !with.is_empty() => None,
            _ => direct::update_shape(u, &self.shared.current_catalog()),
        };
        let direct = match shape {
            Some(shape) => {
                let set: Vec<&Expr> = shape.assignments.iter().map(|(_, e)| *e).collect();
                self.direct_targets(&shape.target, shape.selection, &set)
                    .await
            }
            None => None,
        };
        let batches = self
            .targets_or_general(direct, &sql, ctid, "an UPDATE")
            .await?;
        let mut changes: Vec<(Bytes, Vec<(usize, Value)>)> = Vec::new();
        let mut seen = HashSet::new();
        for b in &batches {
            let keys = key_column(b)?;
            let arrays: Vec<ArrayRef> = targets
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let col = &rel.columns[*t];
                    col.ty.coerce(b.column(i + 1), &col.name)
                })
                .collect::<Result<_>>()?;
            for r in 0..b.num_rows() {
                let key = Bytes::copy_from_slice(keys.value(r));
                // A row that the FROM list joins more than once is updated once, with the
                // first match (PostgreSQL uses one of them, unspecified which).
                if !seen.insert(key.clone()) {
                    continue;
                }
                let mut set = Vec::with_capacity(targets.len());
                for (i, t) in targets.iter().enumerate() {
                    set.push((*t, rel.columns[*t].ty.cell(arrays[i].as_ref(), r)?));
                }
                changes.push((key, set));
            }
        }
        let n = changes.len();
        self.with_txn(async |txn| {
            for (key, set) in changes {
                let old = load(txn, &rel, key).await?;
                let mut cells = old.cells.clone();
                for (i, v) in set {
                    cells[i] = v;
                }
                txn.update(&rel, &old, cells).await?;
            }
            Ok(())
        })
        .await?;
        Ok(Output::Command(format!("UPDATE {n}")))
    }

    async fn delete(&mut self, stmt: &Statement, with: String) -> Result<Output> {
        let Statement::Delete(d) = stmt else {
            return Err(SqlError::internal("delete() needs a DELETE"));
        };
        if d.returning.is_some() {
            return Err(SqlError::unsupported(
                "DELETE ... RETURNING is not supported",
            ));
        }
        let from = match &d.from {
            FromTable::WithFromKeyword(f) | FromTable::WithoutKeyword(f) => f,
        };
        let Some(first) = from.first() else {
            return Err(SqlError::new(state::SYNTAX_ERROR, "DELETE needs a table"));
        };
        let (name, qual) = target_of(&first.relation)?;
        let rel = self.table(&name)?;
        let mut sql = format!("{with}SELECT {qual}.\"{KEY_COLUMN}\" FROM {first}");
        for t in d.using.iter().flatten() {
            sql.push_str(&format!(", {t}"));
        }
        if let Some(sel) = &d.selection {
            sql.push_str(&format!(" WHERE {sel}"));
        }
        let ctid = mentions_ctid_stmt(stmt);
        let shape = match self.direct {
            DirectMode::Off => None,
            _ if ctid || !with.is_empty() => None,
            _ => direct::delete_shape(d, &self.shared.current_catalog()),
        };
        let direct = match shape {
            Some((target, selection)) => self.direct_targets(&target, selection, &[]).await,
            None => None,
        };
        let batches = self
            .targets_or_general(direct, &sql, ctid, "a DELETE")
            .await?;
        let mut keys = Vec::new();
        let mut seen = HashSet::new();
        for b in &batches {
            let col = key_column(b)?;
            for r in 0..b.num_rows() {
                let k = Bytes::copy_from_slice(col.value(r));
                if seen.insert(k.clone()) {
                    keys.push(k);
                }
            }
        }
        let n = keys.len();
        self.with_txn(async |txn| {
            for key in keys {
                let old = load(txn, &rel, key).await?;
                txn.delete(&rel, &old).await?;
            }
            Ok(())
        })
        .await?;
        Ok(Output::Command(format!("DELETE {n}")))
    }

    async fn ddl(&mut self, stmt: Statement) -> Result<Output> {
        let db = self.db.clone();
        let out = match stmt {
            Statement::CreateTable(ct) => {
                if ct.temporary
                    && ct.on_commit != Some(datafusion::sql::sqlparser::ast::OnCommit::Drop)
                {
                    return Err(SqlError::unsupported(
                        "temporary tables are supported with ON COMMIT DROP only",
                    ));
                }
                let (schema, name) = split_name(&ct.name)?;
                let exists = self
                    .with_txn(async |txn| {
                        if !txn.catalog.schemas.contains_key(&schema) {
                            return Err(SqlError::new(
                                state::INVALID_SCHEMA_NAME,
                                format!("schema \"{schema}\" does not exist"),
                            ));
                        }
                        Ok(txn
                            .catalog
                            .tables
                            .contains_key(&(schema.clone(), name.clone())))
                    })
                    .await?;
                if exists {
                    if ct.if_not_exists {
                        return Ok(Output::Command("CREATE TABLE".into()));
                    }
                    return Err(SqlError::new(
                        state::DUPLICATE_TABLE,
                        format!("relation \"{name}\" already exists"),
                    ));
                }
                let id = db.issue_relation_id().await?;
                self.with_txn(async |txn| {
                    let rel = rel_from_create(id, &ct, &txn.catalog)?;
                    txn.put_raw(
                        Bytes::from(row_key(tags::RELATION, &[id])),
                        Bytes::from(definition_row(id, &rel.qualified(), &rel.definition)),
                    )
                    .await?;
                    Arc::make_mut(&mut txn.catalog)
                        .tables
                        .insert((rel.schema.clone(), rel.name.clone()), Arc::new(rel));
                    txn.ddl = true;
                    Ok(())
                })
                .await?;
                if ct.temporary {
                    self.temp_tables.push((schema, name));
                }
                Output::Command("CREATE TABLE".into())
            }
            Statement::CreateSchema {
                schema_name,
                if_not_exists,
                ..
            } => {
                let name = match &schema_name {
                    SchemaName::Simple(n) => split_name(n)?.1,
                    other => return Err(SqlError::unsupported(format!("CREATE SCHEMA {other}"))),
                };
                let exists = self
                    .with_txn(async |txn| Ok(txn.catalog.schemas.contains_key(&name)))
                    .await?;
                if exists {
                    if if_not_exists {
                        return Ok(Output::Command("CREATE SCHEMA".into()));
                    }
                    return Err(SqlError::new(
                        state::DUPLICATE_SCHEMA,
                        format!("schema \"{name}\" already exists"),
                    ));
                }
                let id = db.issue_relation_id().await?;
                self.with_txn(async |txn| {
                    let def = format!("CREATE SCHEMA \"{}\"", name.replace('"', "\"\""));
                    txn.put_raw(
                        Bytes::from(row_key(tags::RELATION, &[id])),
                        Bytes::from(definition_row(id, &name, &def)),
                    )
                    .await?;
                    Arc::make_mut(&mut txn.catalog)
                        .schemas
                        .insert(name.clone(), id);
                    txn.ddl = true;
                    Ok(())
                })
                .await?;
                Output::Command("CREATE SCHEMA".into())
            }
            Statement::Drop {
                object_type: ObjectType::Table,
                if_exists,
                names,
                ..
            } => {
                for n in &names {
                    let (schema, name) = split_name(n)?;
                    self.with_txn(async |txn| {
                        let Some(rel) = txn
                            .catalog
                            .tables
                            .get(&(schema.clone(), name.clone()))
                            .cloned()
                        else {
                            if if_exists {
                                return Ok(());
                            }
                            return Err(SqlError::new(
                                state::UNDEFINED_TABLE,
                                format!("table \"{name}\" does not exist"),
                            ));
                        };
                        drop_table(txn, &rel).await
                    })
                    .await?;
                }
                Output::Command("DROP TABLE".into())
            }
            Statement::Drop {
                object_type: ObjectType::Schema,
                if_exists,
                names,
                cascade,
                ..
            } => {
                for n in &names {
                    let schema = split_name(n)?.1;
                    self.with_txn(async |txn| {
                        let Some(id) = txn.catalog.schemas.get(&schema).copied() else {
                            if if_exists {
                                return Ok(());
                            }
                            return Err(SqlError::new(
                                state::INVALID_SCHEMA_NAME,
                                format!("schema \"{schema}\" does not exist"),
                            ));
                        };
                        let inside: Vec<Arc<RelDef>> = txn
                            .catalog
                            .tables
                            .values()
                            .filter(|t| t.schema == schema)
                            .cloned()
                            .collect();
                        if !inside.is_empty() && !cascade {
                            return Err(SqlError::new(
                                state::DEPENDENT_OBJECTS,
                                format!(
                                    "cannot drop schema {schema} because other objects depend on it"
                                ),
                            )
                            .with_detail(format!(
                                "table {} depends on schema {schema}",
                                inside[0].qualified()
                            )));
                        }
                        for rel in inside {
                            drop_table(txn, &rel).await?;
                        }
                        txn.delete_raw(Bytes::from(row_key(tags::RELATION, &[id])))
                            .await?;
                        Arc::make_mut(&mut txn.catalog).schemas.remove(&schema);
                        txn.ddl = true;
                        Ok(())
                    })
                    .await?;
                }
                Output::Command("DROP SCHEMA".into())
            }
            other => {
                return Err(SqlError::unsupported(format!(
                    "RockLake's SQL layer does not run this statement: {}",
                    first_words(&other.to_string())
                )))
            }
        };
        let cat = self.with_txn(async |txn| Ok(txn.catalog.clone())).await?;
        *self
            .shared
            .catalog
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = cat;
        Ok(out)
    }
}

/// Remove a table: its rows, its primary-key and tuple entries and its definition, and write
/// an audit entry under `0x81` (as PURGE does), in the same transaction. Its keys are free
/// again: a table created later under the same name starts empty.
async fn drop_table(txn: &mut Txn, rel: &RelDef) -> Result<()> {
    let n = txn.delete_all(rel).await?;
    txn.delete_raw(Bytes::from(row_key(tags::RELATION, &[rel.id])))
        .await?;
    let ks = txn.db().keyspace().clone();
    let snapshot = ks.current_snapshot().await?;
    let sequence = ks.issue_id(&rocklake_core::keystone::AUDIT).await?;
    let entry = rocklake_core::values::AuditEntry {
        action: "drop-table".into(),
        space: rel.qualified(),
        first_id: rel.id,
        last_id: rel.id,
        freed: Vec::new(),
        writer_epoch: ks.epoch().unwrap_or(0),
        at_micros: ks.now_micros(),
        actor: format!("sql ({n} keys removed)"),
    };
    txn.put_raw(
        Bytes::from(row_key(tags::AUDIT_ENTRY, &[snapshot, sequence])),
        Bytes::from(prost::Message::encode_to_vec(&entry)),
    )
    .await?;
    Arc::make_mut(&mut txn.catalog)
        .tables
        .remove(&(rel.schema.clone(), rel.name.clone()));
    txn.ddl = true;
    tracing::info!(table = %rel.qualified(), keys = n, "dropped table");
    Ok(())
}

async fn load(txn: &Txn, rel: &RelDef, key: Bytes) -> Result<StoredRow> {
    let Some(v) = txn.get(&key).await? else {
        return Err(SqlError::new(
            state::SERIALIZATION_FAILURE,
            format!(
                "the row {} changed while the statement ran",
                rocklake_core::keys::render(&key)
            ),
        ));
    };
    let (cells, tuple) = rel.decode(&key, &v)?.ok_or_else(|| {
        SqlError::internal(format!(
            "{} is not a row of {}",
            rocklake_core::keys::render(&key),
            rel.qualified()
        ))
    })?;
    Ok(StoredRow { key, cells, tuple })
}

fn key_column(b: &RecordBatch) -> Result<&BinaryArray> {
    b.column(0)
        .as_any()
        .downcast_ref::<BinaryArray>()
        .ok_or_else(|| SqlError::internal("the target key column is not binary"))
}

/// The table an UPDATE or DELETE names, and how its columns are qualified in the query.
fn target_of(f: &TableFactor) -> Result<(ObjectName, String)> {
    match f {
        TableFactor::Table { name, alias, .. } => {
            let qual = match alias {
                Some(a) => a.name.to_string(),
                None => name.0.last().map(|p| p.to_string()).unwrap_or_default(),
            };
            Ok((name.clone(), qual))
        }
        other => Err(SqlError::unsupported(format!(
            "UPDATE/DELETE of {other} (only a table)"
        ))),
    }
}

/// `COLLATE "C"` compares bytes, as DataFusion's strings always do: drop the clause.
/// Drop `COLLATE` (byte order is how DataFusion compares strings anyway) and casts to `tid`
/// (a `ctid` is its text form here, `(0,1)`, and compares as text).
fn strip_collate(q: &mut Query) {
    let _ = visit_expressions_mut(q, strip_one);
}

/// [`strip_collate`] of one expression (the direct path's WHERE and values).
pub(crate) fn strip_collate_expr(e: &mut Expr) {
    let _ = visit_expressions_mut(e, strip_one);
}

/// Refuse an answer of the direct path that is not DataFusion's ([`DirectMode::Check`]):
/// the same columns (names, types, PostgreSQL types) when `schema`, and the same rows in the
/// same order.
fn same_answer(
    what: &str,
    direct: &(SchemaRef, Vec<RecordBatch>),
    general: &(SchemaRef, Vec<RecordBatch>),
    schema: bool,
) -> Result<()> {
    if schema && direct.0 != general.0 {
        return Err(SqlError::internal(format!(
            "the direct path's columns of {what} differ from DataFusion's: {:?} against {:?}",
            direct.0, general.0
        )));
    }
    same_rows(what, &direct.1, &general.1)
}

/// The rows of two answers, column by column (types included), in order.
fn same_rows(what: &str, direct: &[RecordBatch], general: &[RecordBatch]) -> Result<()> {
    let rows = |b: &[RecordBatch]| b.iter().map(|b| b.num_rows()).sum::<usize>();
    let (nd, ng) = (rows(direct), rows(general));
    let width = |b: &[RecordBatch]| b.first().map(|b| b.num_columns());
    let columns = |b: &[RecordBatch], j: usize| -> Result<ArrayRef> {
        let parts: Vec<&dyn Array> = b.iter().map(|b| b.column(j).as_ref()).collect();
        Ok(datafusion::arrow::compute::concat(&parts)?)
    };
    let differ = |why: String| {
        SqlError::internal(format!(
            "the direct path's answer to {what} differs from DataFusion's: {why}"
        ))
    };
    if nd != ng {
        return Err(differ(format!("{nd} rows against {ng}")));
    }
    if nd == 0 {
        return Ok(());
    }
    let (wd, wg) = (width(direct), width(general));
    if wd != wg {
        return Err(differ(format!("{wd:?} columns against {wg:?}")));
    }
    for j in 0..wd.unwrap_or(0) {
        let (a, b) = (columns(direct, j)?, columns(general, j)?);
        if a.as_ref() != b.as_ref() {
            return Err(differ(format!("column {j}: {a:?} against {b:?}")));
        }
    }
    Ok(())
}

fn strip_one(e: &mut Expr) -> ControlFlow<()> {
    {
        match e {
            Expr::Collate { expr, .. } => *e = (**expr).clone(),
            Expr::Cast {
                expr, data_type, ..
            } if data_type.to_string().eq_ignore_ascii_case("tid") => *e = tid_text(expr),
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    }
}

/// A value cast to `tid`, as the text a `ctid` compares with here (`(0,1)`). PostgreSQL's tid
/// input skips what comes before `(` and reads the numbers leniently, and DuckDB's postgres
/// extension relies on that: it sends its ctids back quoted (`'(0,2)'`). A text literal is
/// read here; any other value is read the same way by a regular expression at run time (a
/// value that is no tid stays as it is and matches no row).
fn tid_text(expr: &Expr) -> Expr {
    use datafusion::sql::sqlparser::ast::Value as SqlValue;
    use datafusion::sql::sqlparser::ast::{
        Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, ObjectName,
    };
    const TID: &str = r"^[^(]*\(\s*0*([0-9]+)\s*,\s*0*([0-9]+)\s*\).*$";
    let lit = |t: &str| Expr::Value(SqlValue::SingleQuotedString(t.to_string()).into());
    if let Expr::Value(v) = expr {
        if let SqlValue::SingleQuotedString(t) = &v.value {
            let parsed = t.split_once('(').and_then(|(_, rest)| {
                let (inner, _) = rest.split_once(')')?;
                let (block, offset) = inner.split_once(',')?;
                Some(format!(
                    "({},{})",
                    block.trim().parse::<u64>().ok()?,
                    offset.trim().parse::<u64>().ok()?
                ))
            });
            return lit(parsed.as_deref().unwrap_or(t));
        }
    }
    let arg = |e: Expr| FunctionArg::Unnamed(FunctionArgExpr::Expr(e));
    Expr::Function(Function {
        name: ObjectName::from(vec![datafusion::sql::sqlparser::ast::Ident::new(
            "regexp_replace",
        )]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![arg(expr.clone()), arg(lit(TID)), arg(lit("(${1},${2})"))],
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

fn is_ctid(e: &Expr) -> bool {
    match e {
        Expr::Identifier(i) => i.value.eq_ignore_ascii_case("ctid"),
        Expr::CompoundIdentifier(parts) => parts
            .last()
            .is_some_and(|i| i.value.eq_ignore_ascii_case("ctid")),
        _ => false,
    }
}

/// Whether a query calls the function `name`.
fn calls_function(q: &Query, name: &str) -> bool {
    visit_expressions(q, |e| match e {
        Expr::Function(f)
            if f.name
                .0
                .last()
                .is_some_and(|p| p.to_string().trim_matches('"').eq_ignore_ascii_case(name)) =>
        {
            ControlFlow::Break(())
        }
        _ => ControlFlow::Continue(()),
    })
    .is_break()
}

fn mentions_ctid(q: &Query) -> bool {
    visit_expressions(q, |e| {
        if is_ctid(e) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .is_break()
}

fn mentions_ctid_stmt(s: &Statement) -> bool {
    visit_expressions(s, |e| {
        if is_ctid(e) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .is_break()
}

fn first_words(s: &str) -> String {
    let w: Vec<&str> = s.split_whitespace().take(4).collect();
    w.join(" ")
}

/// How a COPY's data is written: PostgreSQL's binary format, its text format with a NULL
/// marker (`\N` unless `NULL '...'`) and a delimiter (tab unless `DELIMITER '...'`), or CSV
/// (`,`, NULL as an unquoted empty field, `"` quotes, optional HEADER line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyFormat {
    /// `FORMAT binary`.
    pub binary: bool,
    /// `FORMAT csv`.
    pub csv: bool,
    /// The text or CSV format's NULL marker (`\N` in text, the empty string in CSV).
    pub null: String,
    /// The text or CSV format's column delimiter (tab in text, `,` in CSV).
    pub delimiter: char,
    /// Text and CSV: the first line holds the column names (written out; skipped on the way
    /// in).
    pub header: bool,
    /// CSV: the quote character (`"`).
    pub quote: char,
    /// CSV: the character that escapes a quote inside a quoted value (the quote itself).
    pub escape: char,
}

impl Default for CopyFormat {
    fn default() -> Self {
        CopyFormat {
            binary: false,
            csv: false,
            null: "\\N".into(),
            delimiter: '\t',
            header: false,
            quote: '"',
            escape: '"',
        }
    }
}

/// The format a COPY statement's options name, with PostgreSQL's defaults for what they do
/// not say, and its refusals of options that do not fit the format.
fn copy_format(options: &[CopyOption], legacy: &[CopyLegacyOption]) -> Result<CopyFormat> {
    use datafusion::sql::sqlparser::ast::CopyLegacyCsvOption as Csv;
    let mut f = CopyFormat::default();
    let (mut null, mut delimiter, mut quote, mut escape, mut header) =
        (None, None, None, None, None);
    for o in options {
        match o {
            CopyOption::Format(name) => match name.value.to_ascii_lowercase().as_str() {
                "binary" => (f.binary, f.csv) = (true, false),
                "text" => (f.binary, f.csv) = (false, false),
                "csv" => (f.binary, f.csv) = (false, true),
                other => {
                    return Err(SqlError::new(
                        state::INVALID_PARAMETER,
                        format!("COPY format \"{other}\" not recognized"),
                    ))
                }
            },
            CopyOption::Null(n) => null = Some(n.clone()),
            CopyOption::Delimiter(d) => delimiter = Some(*d),
            CopyOption::Header(h) => header = Some(*h),
            CopyOption::Quote(q) => quote = Some(*q),
            CopyOption::Escape(e) => escape = Some(*e),
            CopyOption::Encoding(e)
                if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {}
            other => {
                return Err(SqlError::unsupported(format!(
                    "COPY option {other} is not supported"
                )))
            }
        }
    }
    for o in legacy {
        match o {
            CopyLegacyOption::Binary => f.binary = true,
            CopyLegacyOption::Null(n) => null = Some(n.clone()),
            CopyLegacyOption::Delimiter(d) => delimiter = Some(*d),
            CopyLegacyOption::Csv(csv) => {
                f.csv = true;
                for c in csv {
                    match c {
                        Csv::Header => header = Some(true),
                        Csv::Quote(q) => quote = Some(*q),
                        Csv::Escape(e) => escape = Some(*e),
                        other => {
                            return Err(SqlError::unsupported(format!(
                                "COPY option {other} is not supported"
                            )))
                        }
                    }
                }
            }
            other => {
                return Err(SqlError::unsupported(format!(
                    "COPY option {other} is not supported"
                )))
            }
        }
    }
    if f.binary && (null.is_some() || delimiter.is_some()) {
        return Err(SqlError::new(
            state::SYNTAX_ERROR,
            "cannot specify NULL or DELIMITER in BINARY mode",
        ));
    }
    if f.binary && header == Some(true) {
        return Err(SqlError::new(
            state::NOT_SUPPORTED,
            "cannot specify HEADER in BINARY mode",
        ));
    }
    if !f.csv && (quote.is_some() || escape.is_some()) {
        return Err(SqlError::new(
            state::NOT_SUPPORTED,
            "COPY QUOTE and ESCAPE are available only in CSV mode",
        ));
    }
    if f.csv {
        f.delimiter = ',';
        f.null = String::new();
    }
    f.delimiter = delimiter.unwrap_or(f.delimiter);
    f.null = null.unwrap_or(f.null);
    f.header = header.unwrap_or(false);
    f.quote = quote.unwrap_or('"');
    f.escape = escape.unwrap_or(f.quote);
    if f.csv && f.delimiter == f.quote {
        return Err(SqlError::new(
            state::NOT_SUPPORTED,
            "COPY delimiter and quote must be different",
        ));
    }
    Ok(f)
}

/// The functions a PostgreSQL client calls on connecting: `version()`, `current_database()`,
/// `current_schema()`, `to_regclass(name)`, `pg_backend_pid()`.
fn register_pg_functions(ctx: &SessionContext, shared: &Arc<Shared>) {
    let version = crate::pg::version_string();
    ctx.register_udf(create_udf(
        "version",
        vec![],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(move |_| {
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                version.clone(),
            ))))
        }),
    ));
    let sh = shared.clone();
    ctx.register_udf(create_udf(
        "current_database",
        vec![],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |_| {
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                sh.database_name(),
            ))))
        }),
    ));
    ctx.register_udf(create_udf(
        "current_schema",
        vec![],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(|_| {
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                "public".into(),
            ))))
        }),
    ));
    ctx.register_udf(create_udf(
        "pg_backend_pid",
        vec![],
        DataType::Int32,
        Volatility::Stable,
        Arc::new(|_| {
            Ok(ColumnarValue::Scalar(ScalarValue::Int32(Some(
                std::process::id() as i32,
            ))))
        }),
    ));
    let sh = shared.clone();
    ctx.register_udf(create_udf(
        "pg_database_size",
        vec![DataType::Utf8],
        DataType::Int64,
        Volatility::Stable,
        Arc::new(move |_| {
            Ok(ColumnarValue::Scalar(ScalarValue::Int64(Some(
                sh.database_size.load(Ordering::Acquire),
            ))))
        }),
    ));
    let sh = shared.clone();
    ctx.register_udf(create_udf(
        "to_regclass",
        vec![DataType::Utf8],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |args| {
            let cat = sh.current_catalog();
            let lookup = |name: &str| -> Option<String> {
                let parts: Vec<String> = name
                    .split('.')
                    .map(|p| {
                        if p.starts_with('"') && p.ends_with('"') && p.len() >= 2 {
                            p[1..p.len() - 1].replace("\"\"", "\"")
                        } else {
                            p.to_lowercase()
                        }
                    })
                    .collect();
                let (schema, table) = match parts.as_slice() {
                    [t] => ("public".to_string(), t.clone()),
                    [s, t] => (s.clone(), t.clone()),
                    _ => return None,
                };
                if crate::pg::PG_CATALOG_TABLES.contains(&table.as_str())
                    && (schema == "pg_catalog" || parts.len() == 1)
                {
                    return Some(table);
                }
                cat.tables
                    .contains_key(&(schema.clone(), table.clone()))
                    .then(|| {
                        if schema == "public" {
                            table
                        } else {
                            format!("{schema}.{table}")
                        }
                    })
            };
            match &args[0] {
                ColumnarValue::Scalar(v) => {
                    let name = match v {
                        ScalarValue::Utf8(n)
                        | ScalarValue::LargeUtf8(n)
                        | ScalarValue::Utf8View(n) => n.clone(),
                        _ => None,
                    };
                    Ok(ColumnarValue::Scalar(ScalarValue::Utf8(
                        name.and_then(|n| lookup(&n)),
                    )))
                }
                ColumnarValue::Array(a) => {
                    use datafusion::arrow::array::{AsArray, StringArray};
                    let a = datafusion::arrow::compute::cast(a, &DataType::Utf8)?;
                    let out: StringArray = a
                        .as_string::<i32>()
                        .iter()
                        .map(|n| n.and_then(&lookup))
                        .collect();
                    Ok(ColumnarValue::Array(Arc::new(out)))
                }
            }
        }),
    ));
}

/// The names PostgreSQL gives a query's unaliased result columns (its `FigureColname`): a
/// column's own name, a function's name (`count`, `max`), `?column?` for other expressions,
/// the type's name for a cast of one. `None` where DataFusion's name stands (aliases,
/// wildcards); an empty list when the projection cannot be lined up with the result.
fn pg_column_names(q: &Query) -> Vec<Option<String>> {
    use datafusion::sql::sqlparser::ast::SelectItem;
    let mut body = q.body.as_ref();
    while let SetExpr::SetOperation { left, .. } = body {
        body = left.as_ref();
    }
    let select = match body {
        SetExpr::Select(s) => s,
        SetExpr::Query(inner) => return pg_column_names(inner),
        _ => return vec![],
    };
    let mut out = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::UnnamedExpr(e) if int4_literal(e) => out.push(Some("\0int4".into())),
            SelectItem::UnnamedExpr(e) => out.push(Some(pg_expr_name(e))),
            SelectItem::ExprWithAlias { .. } => out.push(None),
            // A wildcard's columns keep their names; their number is only known after
            // planning, so one wildcard is marked and the rest lined up around it.
            _ => out.push(Some("\0*".into())),
        }
    }
    if out.iter().filter(|n| n.as_deref() == Some("\0*")).count() > 1 {
        return vec![];
    }
    out
}

/// An integer constant that fits `integer`: PostgreSQL's type for it (DataFusion's is
/// `bigint`).
fn int4_literal(e: &Expr) -> bool {
    use datafusion::sql::sqlparser::ast::{UnaryOperator, Value};
    match e {
        Expr::Value(v) => matches!(&v.value, Value::Number(n, _) if n.parse::<i32>().is_ok()),
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => matches!(expr.as_ref(), Expr::Value(v)
            if matches!(&v.value, Value::Number(n, _) if format!("-{n}").parse::<i32>().is_ok())),
        Expr::Nested(inner) => int4_literal(inner),
        _ => false,
    }
}

fn pg_expr_name(e: &Expr) -> String {
    match e {
        Expr::Identifier(i) => fold(i),
        Expr::CompoundIdentifier(parts) => parts.last().map(fold).unwrap_or_default(),
        Expr::Function(f) => match f.name.0.last() {
            Some(datafusion::sql::sqlparser::ast::ObjectNamePart::Identifier(i)) => fold(i),
            _ => "?column?".into(),
        },
        Expr::Nested(inner) => pg_expr_name(inner),
        // `a[1]` is named after its array, as in PostgreSQL.
        Expr::CompoundFieldAccess { root, access_chain }
            if access_chain.iter().all(|a| {
                matches!(a, datafusion::sql::sqlparser::ast::AccessExpr::Subscript(_))
            }) =>
        {
            pg_expr_name(root)
        }
        Expr::Cast {
            expr, data_type, ..
        } => {
            let n = pg_expr_name(expr);
            if n != "?column?" {
                return n;
            }
            match SqlType::parse(&data_type.to_string()) {
                Ok(t) => crate::pg::sql_type_name(t).to_string(),
                Err(_) => data_type.to_string().to_lowercase(),
            }
        }
        Expr::Case { .. } => "case".into(),
        Expr::Exists { .. } => "exists".into(),
        Expr::Array(_) => "array".into(),
        Expr::Subquery(q) => pg_column_names(q)
            .first()
            .cloned()
            .flatten()
            .unwrap_or_else(|| "?column?".into()),
        Expr::Extract { .. } => "extract".into(),
        Expr::Substring { .. } => "substring".into(),
        Expr::Position { .. } => "position".into(),
        Expr::Ceil { .. } => "ceil".into(),
        Expr::Floor { .. } => "floor".into(),
        _ => "?column?".into(),
    }
}

/// Give a result PostgreSQL's column names (keeping each field's type and metadata).
fn rename_columns(
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    names: &[Option<String>],
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let n = schema.fields().len();
    if names.is_empty() || names.len() > n + 1 {
        return Ok((schema, batches));
    }
    let star = names.iter().position(|x| x.as_deref() == Some("\0*"));
    let mut per_field: Vec<Option<String>> = Vec::with_capacity(n);
    match star {
        None if names.len() == n => per_field.extend(names.iter().cloned()),
        None => return Ok((schema, batches)),
        Some(at) => {
            let span = n + 1 - names.len();
            per_field.extend(names[..at].iter().cloned());
            per_field.extend(std::iter::repeat_n(None, span));
            per_field.extend(names[at + 1..].iter().cloned());
        }
    }
    if per_field.iter().all(Option::is_none) {
        return Ok((schema, batches));
    }
    // `\0int4`: an integer constant, `?column?` of type integer as in PostgreSQL.
    let int4: Vec<bool> = per_field
        .iter()
        .map(|n| n.as_deref() == Some("\0int4"))
        .collect();
    let rename = |schema: &SchemaRef| -> SchemaRef {
        let fields: Vec<datafusion::arrow::datatypes::Field> = schema
            .fields()
            .iter()
            .zip(&per_field)
            .map(|(f, name)| match name.as_deref() {
                Some("\0int4") if f.data_type() == &DataType::Int64 => f
                    .as_ref()
                    .clone()
                    .with_name("?column?")
                    .with_data_type(DataType::Int32),
                Some("\0int4") => f.as_ref().clone().with_name("?column?"),
                Some(name) => f.as_ref().clone().with_name(name),
                None => f.as_ref().clone(),
            })
            .collect();
        Arc::new(datafusion::arrow::datatypes::Schema::new_with_metadata(
            fields,
            schema.metadata().clone(),
        ))
    };
    // The batches' own schema: execution may have settled a type the plan left open (a
    // NULL column of a UNION's first branch).
    let renamed = match batches.first() {
        Some(b) => rename(&b.schema()),
        None => rename(&schema),
    };
    let batches = batches
        .into_iter()
        .map(|b| {
            let columns = b
                .columns()
                .iter()
                .zip(&int4)
                .map(|(c, small)| {
                    if *small && c.data_type() == &DataType::Int64 {
                        datafusion::arrow::compute::cast(c, &DataType::Int32)
                    } else {
                        Ok(c.clone())
                    }
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            RecordBatch::try_new(rename(&b.schema()), columns)
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| SqlError::internal(format!("renaming result columns: {e}")))?;
    Ok((renamed, batches))
}

/// A parameter of column type `ty`, announcing its PostgreSQL type (`varchar`, `uuid`).
fn param_field(ty: SqlType) -> Field {
    crate::pg::field("param", ty.arrow(), true, crate::pg::sql_type_name(ty), -1)
}

/// The `n` of a `$n` placeholder expression.
fn placeholder_number(e: &Expr) -> Option<usize> {
    use datafusion::sql::sqlparser::ast::Value as SqlValue;
    match e {
        Expr::Value(v) => match &v.value {
            SqlValue::Placeholder(p) => p.strip_prefix('$')?.parse().ok().filter(|n| *n > 0),
            _ => None,
        },
        _ => None,
    }
}

/// The highest `$n` in a statement (0 for none).
fn max_placeholder(stmt: &Statement) -> usize {
    let mut max = 0;
    let _ = visit_expressions(stmt, |e| {
        if let Some(n) = placeholder_number(e) {
            max = max.max(n);
        }
        ControlFlow::<()>::Continue(())
    });
    max
}

/// Put `params[n - 1]` in the place of each `$n`.
fn bind_parameters(stmt: &mut Statement, params: &[Expr]) -> Result<()> {
    let mut missing = None;
    let _ = visit_expressions_mut(stmt, |e| {
        let name = match e {
            Expr::Value(v) => match &v.value {
                datafusion::sql::sqlparser::ast::Value::Placeholder(p) => p.clone(),
                _ => return ControlFlow::Continue(()),
            },
            _ => return ControlFlow::Continue(()),
        };
        match placeholder_number(e).and_then(|n| params.get(n - 1)) {
            Some(value) => *e = value.clone(),
            None => {
                missing = Some(name);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    });
    match missing {
        Some(p) => Err(SqlError::new("42P02", format!("there is no parameter {p}"))),
        None => Ok(()),
    }
}

/// The text of a number literal, with its sign (`-1.5e-07`); `None` for any other expression.
fn number_literal(e: &Expr) -> Option<String> {
    use datafusion::sql::sqlparser::ast::{UnaryOperator, Value as SqlValue};
    match e {
        Expr::Value(v) => match &v.value {
            SqlValue::Number(n, _) => Some(n.clone()),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => number_literal(expr).map(|n| format!("-{n}")),
        Expr::Nested(inner) => number_literal(inner),
        _ => None,
    }
}

/// In `INSERT ... VALUES`, PostgreSQL converts each value to its target column's type on its
/// own; DataFusion first unifies each VALUES column into one type, which can fail where
/// PostgreSQL succeeds (a double column given `CAST('inf' AS DOUBLE)` in one row and the exact
/// literal `3.4e+38` in another unifies to a decimal that cannot hold infinity). So every
/// value bound for a numeric or interval column is cast to that column's type first (interval
/// text read with PostgreSQL's syntax). Other types are
/// left to [`SqlType::coerce`], which reads PostgreSQL's text forms (bytea, interval) that a
/// DataFusion cast would not.
fn cast_values_to_targets(source: &mut Query, rel: &RelDef, targets: &[usize]) {
    use datafusion::sql::sqlparser::ast::Value as SqlValue;
    use datafusion::sql::sqlparser::ast::{CastKind, DataType as D, ExactNumberInfo};
    let SetExpr::Values(values) = source.body.as_mut() else {
        return;
    };
    for row in &mut values.rows {
        for (j, e) in row.iter_mut().enumerate() {
            let Some(col) = targets.get(j).and_then(|t| rel.columns.get(*t)) else {
                continue;
            };
            let data_type = match col.ty {
                SqlType::BigInt => D::BigInt(None),
                SqlType::Integer => D::Int(None),
                SqlType::SmallInt => D::SmallInt(None),
                SqlType::Double | SqlType::Real => {
                    // A number literal goes in as its text, which parses to the nearest float;
                    // through an exact decimal it could land one unit off (3.4e+38).
                    if let Some(text) = number_literal(e) {
                        *e = Expr::Value(SqlValue::SingleQuotedString(text).into());
                    }
                    if col.ty == SqlType::Double {
                        D::DoublePrecision
                    } else {
                        D::Real
                    }
                }
                SqlType::Numeric(p, s) => D::Decimal(ExactNumberInfo::PrecisionAndScale(
                    u64::from(p),
                    i64::from(s),
                )),
                SqlType::Array(elem) => {
                    // A text literal (`'{1,2}'`) becomes the array it spells; one that does
                    // not parse is left to `coerce`, which names the column in its error.
                    if let Expr::Value(v) = e {
                        if let SqlValue::SingleQuotedString(text) = &v.value {
                            if let Ok(a) = array_expr(text, elem) {
                                *e = a;
                            }
                            continue;
                        }
                    }
                    array_sql_type(elem)
                }
                SqlType::Interval => {
                    // A text literal is read with PostgreSQL's syntax here; one that does not
                    // parse is left to `coerce`, which names the column in its error.
                    if let Expr::Value(v) = e {
                        if let SqlValue::SingleQuotedString(text) = &mut v.value {
                            match crate::temporal::Interval::parse(text) {
                                Ok(iv) => *text = iv.to_datafusion_text(),
                                Err(_) => continue,
                            }
                        }
                    }
                    D::Interval {
                        fields: None,
                        precision: None,
                    }
                }
                _ => continue,
            };
            *e = Expr::Cast {
                kind: CastKind::Cast,
                expr: Box::new(e.clone()),
                data_type,
                array: false,
                format: None,
            };
        }
    }
}

/// The SQL type DataFusion plans an array of `elem` as (`uuid[]` is `varchar[]`, as a uuid
/// is its text).
fn array_sql_type(elem: Elem) -> datafusion::sql::sqlparser::ast::DataType {
    use datafusion::sql::sqlparser::ast::{
        ArrayElemTypeDef, DataType as D, ExactNumberInfo, TimezoneInfo,
    };
    let inner = match elem {
        Elem::BigInt => D::BigInt(None),
        Elem::Integer => D::Int(None),
        Elem::SmallInt => D::SmallInt(None),
        Elem::Boolean => D::Boolean,
        Elem::Text | Elem::Uuid | Elem::TimeTz => D::Varchar(None),
        Elem::Date => D::Date,
        Elem::Timestamp => D::Timestamp(None, TimezoneInfo::None),
        Elem::TimestampTz => D::Timestamp(None, TimezoneInfo::WithTimeZone),
        Elem::Time => D::Time(None, TimezoneInfo::None),
        Elem::Interval => D::Interval {
            fields: None,
            precision: None,
        },
        Elem::Bytea => D::Bytea,
        Elem::Double => D::DoublePrecision,
        Elem::Real => D::Real,
        Elem::Numeric(p, s) => D::Decimal(ExactNumberInfo::PrecisionAndScale(
            u64::from(p),
            i64::from(s),
        )),
    };
    D::Array(ArrayElemTypeDef::SquareBracket(Box::new(inner), None))
}

/// PostgreSQL's array text form (`{1,NULL,3}`) of `elem`s as an expression DataFusion plans:
/// `CAST(ARRAY['1', NULL, '3'] AS integer[])`. Malformed text is refused with `22P02`; a uuid
/// element is checked and written in its canonical form.
fn array_expr(text: &str, elem: Elem) -> Result<Expr> {
    use datafusion::sql::sqlparser::ast::{Array, CastKind, Value as SqlValue};
    let items = crate::types::parse_array_literal(text)
        .map_err(|m| SqlError::new(state::INVALID_TEXT, m))?;
    // Each element is checked here, so that a bad one is refused with PostgreSQL's error
    // rather than DataFusion's.
    crate::types::check_elements(&items, elem)?;
    let mut elems = Vec::with_capacity(items.len());
    for item in items {
        elems.push(Expr::Value(
            match item {
                None => SqlValue::Null,
                Some(t) if elem == Elem::Uuid => {
                    SqlValue::SingleQuotedString(crate::types::canonical_uuid(&t)?)
                }
                // Elements whose PostgreSQL text a DataFusion cast does not read go in as
                // the value itself: bytea as a hex literal, an interval in DataFusion's
                // syntax, a time with time zone canonical.
                Some(t) if elem == Elem::Bytea => SqlValue::HexStringLiteral(
                    crate::types::parse_bytea(&t)
                        .map_err(|m| SqlError::new(crate::types::bytea_error_code(&t), m))?
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect(),
                ),
                Some(t) if elem == Elem::Interval => SqlValue::SingleQuotedString(
                    crate::temporal::Interval::parse(&t)
                        .map_err(|m| SqlError::new(state::INVALID_DATETIME, m))?
                        .to_datafusion_text(),
                ),
                Some(t) if elem == Elem::TimeTz => SqlValue::SingleQuotedString(
                    crate::temporal::TimeTz::parse(&t)
                        .map_err(|m| SqlError::new(state::INVALID_DATETIME, m))?
                        .to_pg_text(),
                ),
                Some(t) => SqlValue::SingleQuotedString(t),
            }
            .into(),
        ));
    }
    Ok(Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(Expr::Array(Array {
            elem: elems,
            named: true,
        })),
        data_type: array_sql_type(elem),
        array: false,
        format: None,
    })
}

/// Casts DataFusion has no type for, as this layer stores them: `uuid` and `time with time
/// zone` are their text (a column of either type checks and canonicalises what it is given),
/// `tid` is a ctid's text form. A text literal cast to `interval` is read with PostgreSQL's
/// interval syntax (`1 year 2 mons 04:05:06`, which DataFusion's parser refuses) and handed
/// on in a form DataFusion reads. A text literal cast to `uuid` or `time with time zone` is
/// checked and written in its canonical form here, so that it compares equal to the stored
/// values (`'A0EEBC99-...'::uuid` finds the row PostgreSQL finds); one that does not parse is
/// refused with PostgreSQL's SQLSTATE.
fn rewrite_casts(stmt: &mut Statement) -> Result<()> {
    use datafusion::sql::sqlparser::ast::DataType as SqlDataType;
    use datafusion::sql::sqlparser::ast::Value as SqlValue;
    let mut failed = None;
    let _ = visit_expressions_mut(stmt, |e| {
        // `'{1,2}'::integer[]`: the text read with PostgreSQL's array syntax.
        if let Expr::Cast {
            expr, data_type, ..
        } = e
        {
            if let Ok(SqlType::Array(elem)) = SqlType::parse(&data_type.to_string()) {
                if let Expr::Value(v) = expr.as_ref() {
                    if let SqlValue::SingleQuotedString(text) = &v.value {
                        match array_expr(text, elem) {
                            Ok(a) => *e = a,
                            Err(err) => {
                                failed = Some(err);
                                return ControlFlow::Break(());
                            }
                        }
                        return ControlFlow::Continue(());
                    }
                }
                // Any other value cast to an array type: the type as DataFusion names it.
                *data_type = array_sql_type(elem);
                return ControlFlow::Continue(());
            }
        }
        if let Expr::Cast {
            expr, data_type, ..
        } = e
        {
            let name = data_type.to_string().to_ascii_lowercase();
            let literal = match expr.as_mut() {
                Expr::Value(v) => match &mut v.value {
                    SqlValue::SingleQuotedString(text) => Some(text),
                    _ => None,
                },
                _ => None,
            };
            let fixed = match (name.as_str(), literal) {
                ("uuid", Some(text)) => crate::types::canonical_uuid(text).map(|c| *text = c),
                ("timetz" | "time with time zone", Some(text)) => {
                    crate::temporal::TimeTz::parse(text)
                        .map(|t| *text = t.to_pg_text())
                        .map_err(|m| SqlError::new(state::INVALID_DATETIME, m))
                }
                ("interval", Some(text)) => crate::temporal::Interval::parse(text)
                    .map(|iv| *text = iv.to_datafusion_text())
                    .map_err(|m| SqlError::new(state::INVALID_DATETIME, m)),
                _ => Ok(()),
            };
            if let Err(err) = fixed {
                failed = Some(err);
                return ControlFlow::Break(());
            }
            if name == "tid" {
                *e = tid_text(expr);
            } else if matches!(name.as_str(), "uuid" | "timetz" | "time with time zone") {
                *data_type = SqlDataType::Varchar(None);
            }
        }
        ControlFlow::<()>::Continue(())
    });
    failed.map_or(Ok(()), Err)
}
