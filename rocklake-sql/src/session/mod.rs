//! One SQL session: statements in, results out, with PostgreSQL's transaction rules.
//!
//! A query of the direct path's shapes runs there ([`crate::direct`]); any other is planned
//! and run by DataFusion over the session's transaction (`query`). INSERT evaluates its
//! source (`VALUES`, `SELECT`) the same way and casts each value to its column's type; UPDATE
//! and DELETE find the rows they name — with the statement's own `WITH`, `FROM`/`USING` and
//! `WHERE`, so DataFusion evaluates every predicate the direct path does not — and change
//! exactly those rows (`write`). DDL (CREATE/DROP TABLE, CREATE/DROP SCHEMA) is
//! transactional, as in PostgreSQL (`ddl`). `describe` answers a prepared statement's
//! parameter and result types without running it.
//!
//! Transactions follow PostgreSQL: a message of several statements outside a transaction
//! block runs as one implicit transaction; `BEGIN ... COMMIT` is one transaction and one atomic
//! batch, durable when COMMIT returns; an error inside a block aborts it until `ROLLBACK` (and
//! `COMMIT` of an aborted block rolls back); a session dropped with a block open lands nothing.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::execution::context::{SessionConfig, SessionContext, SessionState};
use datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};
use datafusion::sql::planner::NullOrdering;
use datafusion::sql::sqlparser::ast::{
    CopySource, CopyTarget, Expr, ObjectName, ObjectType, SetExpr, Statement,
    TransactionAccessMode, TransactionMode,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use rocklake_core::values::Value;

use crate::catalog::{fold, split_name};
use crate::copy::{copy_format, CopyFormat};
use crate::db::Database;
use crate::direct::DirectMode;
use crate::error::{state, Result, SqlError};
use crate::functions::register_pg_functions;
use crate::interrupt::Interrupt;
use crate::origins::Origins;
use crate::phases::{Phase, PhaseSnapshot};
use crate::provider::{RockCatalog, Shared};
use crate::relation::RelDef;
use crate::rewrite::{bind_parameters, calls_function, rewrite_casts};
use crate::txn::Txn;
use crate::types::SqlType;

mod databases;
mod ddl;
mod describe;
mod query;
mod settings;
pub use settings::{check_startup_setting, parse_time_setting, IdleLimits};
mod write;

/// What one statement produced.
#[derive(Debug)]
pub enum Output {
    /// A result set.
    Rows {
        /// Its columns.
        schema: SchemaRef,
        /// Its rows.
        batches: Vec<RecordBatch>,
        /// Where its columns are read from ([`Origins::resolve`]).
        origins: Origins,
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
    /// `SHOW name`: one row of one text column named after the setting; its tag is `SHOW`
    /// ([`Output::into_rows`] gives the row).
    Show {
        /// The setting's name.
        name: String,
        /// Its value, as PostgreSQL shows it (`5s`, `0`).
        value: String,
    },
    /// A result already handed over piece by piece ([`Session::execute_streaming`]): how many
    /// rows it had, and for `COPY ... TO STDOUT` its format.
    Sent {
        /// Its rows.
        rows: usize,
        /// `Some` for COPY TO: the caller ends the copy.
        copy: Option<CopyFormat>,
    },
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
            Output::Show { .. } => 1,
            Output::Sent { rows, .. } => *rows,
            Output::Command(_) | Output::CopyIn { .. } => 0,
        }
    }

    /// A `SHOW`'s answer as the result set it is sent as (any other output unchanged).
    pub fn into_rows(self) -> Output {
        match self {
            Output::Show { name, value } => {
                let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(vec![
                    datafusion::arrow::datatypes::Field::new(name, DataType::Utf8, true),
                ]));
                let column = datafusion::arrow::array::StringArray::from(vec![value]);
                match RecordBatch::try_new(schema.clone(), vec![Arc::new(column)]) {
                    Ok(b) => Output::Rows {
                        schema,
                        batches: vec![b],
                        origins: Origins::None,
                    },
                    Err(_) => Output::Rows {
                        schema,
                        batches: Vec::new(),
                        origins: Origins::None,
                    },
                }
            }
            other => other,
        }
    }

    /// The completion tag PostgreSQL would send.
    pub fn tag(&self) -> String {
        match self {
            Output::Rows { .. } => format!("SELECT {}", self.row_count()),
            Output::CopyOut { .. } | Output::Sent { copy: Some(_), .. } => {
                format!("COPY {}", self.row_count())
            }
            Output::Sent { copy: None, rows } => format!("SELECT {rows}"),
            Output::Command(t) => t.clone(),
            Output::CopyIn { .. } => "COPY".into(),
            Output::Show { .. } => "SHOW".into(),
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

/// A piece of what a text's statements produce, handed over as it comes
/// ([`Session::execute_streaming`]).
#[derive(Debug)]
pub enum Piece {
    /// A result whose rows follow as [`Piece::Rows`]: its columns, and for `COPY ... TO
    /// STDOUT` its format.
    Begin {
        /// Its columns, with PostgreSQL's names.
        schema: SchemaRef,
        /// `Some` for COPY TO.
        copy: Option<CopyFormat>,
        /// Where its columns are read from ([`Origins::resolve`]).
        origins: Origins,
    },
    /// Rows of the result begun last; the memory they hold stays counted in the database's
    /// pool until the piece is dropped.
    Rows(RecordBatch, Held),
    /// The result's rows are all handed over; the statement waits for the answer. An error
    /// (a row the client's format cannot carry) fails the statement as its own would, and the
    /// session's [`Piece::Done`] for it follows.
    End(tokio::sync::oneshot::Sender<Result<()>>),
    /// One statement's outcome: [`Output::Sent`] after its pieces, or any other output or
    /// error. The first error ends the text.
    Done(Result<Output>),
}

/// A `COPY ... FROM STDIN` waiting for its rows.
struct CopyInto {
    rel: Arc<RelDef>,
    /// Each COPY column's index among the table's.
    targets: Vec<usize>,
    /// It runs in the text's implicit transaction (committed at its end).
    implicit: bool,
    /// Rows written so far.
    rows: u64,
}

/// The share of the database's memory pool that a [`Piece::Rows`] holds until dropped.
#[derive(Debug)]
pub struct Held(#[allow(dead_code)] datafusion::execution::memory_pool::MemoryReservation);

/// One session (a connection, or the local shell).
pub struct Session {
    db: Arc<Database>,
    shared: Arc<Shared>,
    ctx: SessionContext,
    status: Status,
    /// `BEGIN READ ONLY` before the block's first statement took its snapshot.
    block_read_only: bool,
    clock: Clock,
    /// The `COPY ... FROM STDIN` waiting for its rows.
    copy: Option<CopyInto>,
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
    /// `statement_timeout` and what undoes a transaction's changes to it.
    settings: settings::Settings,
    /// Stops the running statement's plan (a cancel request, the statement timeout).
    interrupt: Arc<Interrupt>,
    /// Where results go as they are produced, while [`Session::execute_streaming`] runs.
    stream: Option<tokio::sync::mpsc::Sender<Piece>>,
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
        let shared = Arc::new(Shared {
            databases: db.databases().as_ref().map(Arc::downgrade),
            ..Shared::default()
        });
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
        // `timestamptz` in a cast is a zoned timestamp, in the session's zone (UTC), as the
        // columns of that type are (without it DataFusion makes it a timestamp without one).
        opts.execution.time_zone = Some("+00:00".into());
        // Every session's statements reserve from the database's one memory pool, under the
        // bound of one statement.
        let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
            .with_memory_pool(db.session_memory_pool())
            .build_arc()
            .expect("a runtime with a memory pool and default disk and cache settings");
        let ctx = SessionContext::new_with_config_rt(config, runtime);
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
        ctx.register_udtf(
            crate::store_pairs::NAME,
            Arc::new(crate::store_pairs::StorePairs::new(db.clone())),
        );
        // After type coercion, which puts in the casts it replaces.
        ctx.add_analyzer_rule(Arc::new(crate::infinite::InfiniteLiterals));
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
            block_read_only: false,
            clock: Arc::new(move || ks.keyspace().now_micros()),
            copy: None,
            temp_tables: Vec::new(),
            direct: DirectMode::from_env(),
            direct_state,
            nulls,
            settings: settings::Settings::default(),
            interrupt: Arc::new(Interrupt::default()),
            stream: None,
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

    /// Run `sql` with its `$n` parameters bound to `params` (`params[0]` is `$1`), as the
    /// wire's Bind gives them: each a SQL expression (a literal, `NULL`, a cast literal)
    /// that takes the parameter's place before the statement is planned. A `$n` past the
    /// end of `params` is refused with PostgreSQL's `42P02`.
    pub async fn execute_with_params(&mut self, sql: &str, params: &[Expr]) -> Vec<Result<Output>> {
        self.run_statements(sql, params).await
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

    /// Run `sql` as [`Session::execute`] does, handing each outcome to `to` as soon as it is
    /// known ([`Piece::Done`]). A query that DataFusion plans (and a `COPY (query) TO STDOUT`
    /// of one) is not gathered: its rows go to `to` batch by batch while it runs, each counted
    /// in the memory pool until the receiver drops it, so a result of any size passes through
    /// a bounded amount of memory (`to`'s capacity in batches). Sending waits while the
    /// receiver is full, and a cancel or `statement_timeout` still stops the statement then.
    /// A receiver that is gone fails the statement (`08006`), and nothing of it lands.
    pub async fn execute_streaming(&mut self, sql: &str, to: tokio::sync::mpsc::Sender<Piece>) {
        self.execute_streaming_with_params(sql, &[], to).await
    }

    /// [`Session::execute_streaming`] with `$n` parameters, as
    /// [`Session::execute_with_params`] binds them (the wire's Execute of a bound portal).
    pub async fn execute_streaming_with_params(
        &mut self,
        sql: &str,
        params: &[Expr],
        to: tokio::sync::mpsc::Sender<Piece>,
    ) {
        self.stream = Some(to);
        let rest = self.run_statements(sql, params).await;
        if let Some(to) = self.stream.take() {
            for r in rest {
                if to.send(Piece::Done(r)).await.is_err() {
                    break;
                }
            }
        }
    }

    /// Hand the outcomes gathered so far to the streaming receiver, if there is one.
    async fn hand_over(&self, out: &mut Vec<Result<Output>>) {
        if let Some(to) = &self.stream {
            for r in out.drain(..) {
                // A receiver that is gone has stopped listening: nothing to tell it.
                let _ = to.send(Piece::Done(r)).await;
            }
        }
    }

    async fn run_statements(&mut self, sql: &str, params: &[Expr]) -> Vec<Result<Output>> {
        let parsing = Instant::now();
        let parsed = self.db.parse(sql);
        self.shared.phases.since(Phase::Parse, parsing);
        let statements = match parsed {
            Ok(s) => s,
            Err(e) => {
                return vec![Err(SqlError::new(state::SYNTAX_ERROR, e.to_string()))];
            }
        };
        // A cancel that came before this text does not apply to it.
        self.interrupt.reset();
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
            // statement_timeout counts from each statement's start, as in PostgreSQL 13+.
            self.interrupt.arm(self.settings.statement_timeout());
            let r = match bind_parameters(&mut stmt, params) {
                Ok(()) => self.statement_outside_block(stmt, implicit).await,
                Err(e) => Err(e),
            };
            // A COPY FROM STDIN goes on while its rows come: its time limit with it, as in
            // PostgreSQL (see `copy_rows`).
            if self.copy.is_none() {
                self.interrupt.arm(None);
            }
            self.account_statement(&before, started);
            match r {
                Ok(o @ Output::CopyIn { .. }) => {
                    if let Some(c) = self.copy.as_mut() {
                        c.implicit = implicit && self.status == Status::Idle;
                    }
                    out.push(Ok(o));
                }
                Ok(o) => out.push(Ok(o)),
                Err(e) => {
                    match self.status {
                        Status::InBlock => self.fail_block().await,
                        Status::Failed => {}
                        Status::Idle => self.drop_txn().await,
                    }
                    out.push(Err(e));
                    return out;
                }
            }
            self.hand_over(&mut out).await;
        }
        if implicit && self.status == Status::Idle && self.copy.is_none() {
            if let Err(e) = self.commit_txn().await {
                out.push(Err(e));
            }
        }
        out
    }

    /// Run `stmt`; outside a block at `READ COMMITTED` (the default, see
    /// [`settings::Settings::statement_snapshots`]), as PostgreSQL's `READ COMMITTED` does when
    /// a row it would change was changed by a transaction that committed after its snapshot
    /// (it waited for that transaction, or the commit came first): PostgreSQL takes the row as
    /// it now is and goes on where `REPEATABLE READ` fails with `40001`. Here the statement is
    /// run again on a new snapshot, which finds the row as it now is (or finds it gone, or no
    /// longer matching). Only while its transaction has written nothing, so that nothing but
    /// the statement's own work is redone; bounded, and a cancel or `statement_timeout` ends
    /// it as it ends any statement.
    async fn statement_outside_block(&mut self, stmt: Statement, implicit: bool) -> Result<Output> {
        /// Runs of one statement before its `40001` is answered after all.
        const MAX_RUNS: usize = 100;
        // Only a statement that changes rows locks them, and so can meet another's commit
        // (a read never waits): the others run once, without the copy a second run needs.
        let changes_rows = match &stmt {
            Statement::Insert(_) | Statement::Update { .. } | Statement::Delete(_) => true,
            Statement::Query(q) => matches!(
                *q.body,
                SetExpr::Update(_) | SetExpr::Delete(_) | SetExpr::Insert(_)
            ),
            _ => false,
        };
        let again = changes_rows
            && implicit
            && self.status == Status::Idle
            && self.settings.statement_snapshots()
            && self
                .shared
                .txn
                .lock()
                .await
                .as_ref()
                .is_none_or(Txn::is_clean);
        if !again {
            return self.statement(stmt).await;
        }
        let mut runs = 1;
        loop {
            let r = self.statement(stmt.clone()).await;
            match r {
                Err(e)
                    if e.code == state::SERIALIZATION_FAILURE
                        && self.status == Status::Idle
                        && self.copy.is_none()
                        && runs < MAX_RUNS =>
                {
                    // Its snapshot and whatever it began go; the session's settings and
                    // temporary tables stay (`drop_txn` would undo a `SET` made earlier in
                    // the same text).
                    self.shared.txn.lock().await.take();
                    self.interrupt.check()?;
                    runs += 1;
                    tracing::debug!(runs, "statement run again on a new snapshot after 40001");
                }
                r => return r,
            }
        }
    }

    /// The rows of the `COPY ... FROM STDIN` the last text started, whole: [`Session::copy_rows`]
    /// then [`Session::copy_end`].
    pub async fn copy_in(&mut self, rows: Vec<Vec<Value>>) -> Result<Output> {
        self.copy_rows(rows).await?;
        self.copy_end().await
    }

    /// Rows of the `COPY ... FROM STDIN` the last text started, written in its transaction
    /// (the COPY goes on: more may follow, and [`Session::copy_end`] ends it): cells in its
    /// columns' order, of their types (integers, timestamps as µs and dates as days as `Int`;
    /// text, uuid, floats and decimals as `Text`; `Bool`; bytea as `Bytes`). A bad row ends
    /// the COPY at once: nothing of it lands (inside a block, the block fails), and
    /// [`Session::copy_fail`] then has nothing left to undo.
    pub async fn copy_rows(&mut self, rows: Vec<Vec<Value>>) -> Result<()> {
        let Some(copy) = self.copy.take() else {
            return Err(SqlError::new(
                "08P01",
                "no COPY ... FROM STDIN is waiting for rows",
            ));
        };
        // The COPY's statement_timeout (armed at its start) or a cancel ends it here.
        if let Err(e) = self.interrupt.check() {
            self.end_failed_copy(copy.implicit).await;
            return Err(e);
        }
        let (rel, targets, before) = (copy.rel.clone(), copy.targets.clone(), copy.rows);
        let n = rows.len() as u64;
        let r = self
            .with_txn(async |txn| {
                for (i, row) in rows.into_iter().enumerate() {
                    if row.len() != targets.len() {
                        return Err(SqlError::new(
                            "22P04",
                            format!(
                                "COPY row {} has {} values, the COPY names {} columns",
                                before + i as u64 + 1,
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
        match r {
            Ok(()) => {
                self.copy = Some(CopyInto {
                    rows: before + n,
                    ..copy
                });
                Ok(())
            }
            Err(e) => {
                self.end_failed_copy(copy.implicit).await;
                Err(e)
            }
        }
    }

    /// End the `COPY ... FROM STDIN` whose rows have all come: `COPY n`, committed first
    /// outside a block.
    pub async fn copy_end(&mut self) -> Result<Output> {
        let Some(copy) = self.copy.take() else {
            return Err(SqlError::new(
                "08P01",
                "no COPY ... FROM STDIN is waiting for rows",
            ));
        };
        let r = match self.interrupt.check() {
            Err(e) => Err(e),
            Ok(()) => {
                // The COPY's time limit ends with its data; its commit is not interrupted.
                self.interrupt.arm(None);
                if copy.implicit {
                    self.commit_txn().await
                } else {
                    Ok(())
                }
            }
        };
        match r {
            Ok(()) => Ok(Output::Command(format!("COPY {}", copy.rows))),
            Err(e) => {
                self.end_failed_copy(copy.implicit).await;
                Err(e)
            }
        }
    }

    /// A COPY failed: its writes go (its implicit transaction, or the block's).
    async fn end_failed_copy(&mut self, implicit: bool) {
        self.interrupt.arm(None);
        if implicit {
            self.drop_txn().await;
        } else {
            self.fail_block().await;
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

    /// How many of this session's queries of the system catalogs were answered from the
    /// answers the database keeps (see [`Database::system_answer`]).
    pub fn system_answers_reused(&self) -> u64 {
        self.shared.system_answers_reused.load(Ordering::Relaxed)
    }

    /// Where this session's statement time has gone so far.
    pub fn phases(&self) -> PhaseSnapshot {
        self.shared.phases.snapshot()
    }

    /// Give up a waiting `COPY ... FROM STDIN` (the client sent CopyFail): nothing of it lands,
    /// and a block it ran in is aborted, as in PostgreSQL.
    pub async fn copy_fail(&mut self, why: &str) -> SqlError {
        if let Some(copy) = self.copy.take() {
            self.end_failed_copy(copy.implicit).await;
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

    /// The transaction statements run in, begun (its snapshot taken) now if there is none:
    /// at a block's first statement after `BEGIN`, as PostgreSQL takes a `REPEATABLE READ`
    /// snapshot, or at the first statement of an implicit transaction.
    async fn ensure_txn(&mut self) -> Result<()> {
        let mut guard = self.shared.txn.lock().await;
        if guard.is_none() {
            let mut txn = self.db.begin().await?;
            let interrupt = self.interrupt.clone();
            txn.stop = Some(Arc::new(move || interrupt.check()));
            txn.read_only = std::mem::take(&mut self.block_read_only);
            if self.status == Status::Idle {
                // A block's start time was taken at its BEGIN.
                self.shared
                    .txn_start
                    .store((self.clock)(), Ordering::Release);
            }
            *self
                .shared
                .catalog
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = txn.catalog.clone();
            *guard = Some(txn);
        }
        Ok(())
    }

    /// An error inside a block: the block stays open (only ROLLBACK or COMMIT ends it), but
    /// its transaction is over now, as PostgreSQL aborts it at the error: its writes are gone
    /// and the rows and keys it locked are free for the sessions waiting on them.
    async fn fail_block(&mut self) {
        self.drop_txn().await;
        self.status = Status::Failed;
    }

    async fn drop_txn(&mut self) {
        self.block_read_only = false;
        self.settings.rolled_back();
        self.temp_tables.clear();
        self.shared.txn.lock().await.take();
        *self
            .shared
            .catalog
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = self.db.catalog();
    }

    async fn commit_txn(&mut self) -> Result<()> {
        self.block_read_only = false;
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
        match r {
            Ok(()) => self.settings.committed(),
            Err(_) => self.settings.rolled_back(),
        }
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
                settings::check_isolation(modes)?;
                let read_only = modes.iter().any(|m| {
                    matches!(
                        m,
                        TransactionMode::AccessMode(TransactionAccessMode::ReadOnly)
                    )
                });
                // Inside a block PostgreSQL only warns; the block goes on. Otherwise the
                // snapshot is taken at the block's first statement, not here (PostgreSQL's
                // REPEATABLE READ sees what committed between BEGIN and that statement);
                // `now()` is BEGIN's time.
                match self.shared.txn.lock().await.as_mut() {
                    Some(t) => t.read_only |= read_only,
                    None if self.status == Status::Idle => {
                        self.shared
                            .txn_start
                            .store((self.clock)(), Ordering::Release);
                        self.block_read_only = read_only;
                    }
                    None => self.block_read_only |= read_only,
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
            Statement::Set(ref set) => self.set(set),
            Statement::Reset(ref r) => self.reset_setting(match &r.reset {
                datafusion::sql::sqlparser::ast::Reset::ALL => None,
                datafusion::sql::sqlparser::ast::Reset::ConfigurationParameter(n) => Some(n),
            }),
            Statement::ShowVariable { ref variable } => match self.show(variable) {
                Some(r) => r,
                None => Err(SqlError::unsupported(format!(
                    "RockLake's SQL layer does not run this statement: {}",
                    first_words(&stmt.to_string())
                ))),
            },
            Statement::Discard { .. } => {
                self.drop_txn().await;
                self.status = Status::Idle;
                Ok(Output::Command("DISCARD ALL".into()))
            }
            Statement::Query(q) => {
                self.ensure_txn().await?;
                match *q.body {
                    SetExpr::Update(ref u) => self.update(u, q.with.as_ref()).await,
                    SetExpr::Delete(ref d) => {
                        let with = q.with.as_ref().map(|w| format!("{w} "));
                        self.delete(d, with.unwrap_or_default()).await
                    }
                    _ => {
                        if calls_function(&q, "pg_database_size") {
                            let n = self.with_txn(async |t| t.stored_bytes().await).await?;
                            self.shared.database_size.store(n, Ordering::Release);
                        }
                        self.rows_out(*q, None).await
                    }
                }
            }
            Statement::Insert(_) => {
                self.ensure_txn().await?;
                self.insert(stmt).await
            }
            Statement::Update(_) => {
                self.ensure_txn().await?;
                self.update(&stmt, None).await
            }
            Statement::Delete(_) => {
                self.ensure_txn().await?;
                self.delete(&stmt, String::new()).await
            }
            Statement::CreateDatabase { .. } => self.create_database(stmt).await,
            Statement::Drop {
                object_type: ObjectType::Database,
                ..
            } => self.drop_database(),
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
                self.rows_out(*q, Some(format)).await
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
                self.copy = Some(CopyInto {
                    rel,
                    targets,
                    implicit: false,
                    rows: 0,
                });
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
}

/// The first words of a statement, to name it in an error.
fn first_words(s: &str) -> String {
    let w: Vec<&str> = s.split_whitespace().take(4).collect();
    w.join(" ")
}
