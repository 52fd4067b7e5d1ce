//! Queries: the direct path where a statement has its shape, DataFusion's planner for the
//! rest, and the rows an UPDATE or DELETE names.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use datafusion::sql::sqlparser::ast::{Expr, Query, SetExpr, Statement};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use futures::StreamExt;
use tokio::sync::mpsc::Sender;

use super::{Held, Output, Piece, Session};
use crate::colnames::{alias_repeated, pg_column_names, rename_columns, Renamer};
use crate::copy::CopyFormat;
use crate::direct::{self, DirectMode};
use crate::error::{Result, SqlError};
use crate::origins::Origins;
use crate::phases::Phase;
use crate::relation::KEY_COLUMN;
use crate::rewrite::{
    hide_ctid_from_wildcards, mentions_ctid, reads_system_catalogs_only, strip_collate,
};

/// The error of a statement whose rows had nowhere to go: the client is gone.
fn client_gone() -> SqlError {
    SqlError::new(
        "08006",
        "the connection ended while the result was being sent",
    )
}

/// PostgreSQL's bound on a query's result columns (`MaxTupleAttributeNumber`); a wider result
/// is refused before it runs, and a row description can always count its columns.
const MAX_TARGETS: usize = 1664;

/// A result of more than [`MAX_TARGETS`] columns is refused, as PostgreSQL refuses it.
fn check_width(schema: &SchemaRef) -> Result<()> {
    if schema.fields().len() > MAX_TARGETS {
        return Err(SqlError::new(
            crate::error::state::PROGRAM_LIMIT_EXCEEDED,
            format!("target lists can have at most {MAX_TARGETS} entries"),
        ));
    }
    Ok(())
}

/// A query's rows: gathered, or already handed to the streaming receiver.
enum Answer {
    Gathered(SchemaRef, Vec<RecordBatch>, Origins),
    Sent(usize),
}

impl Session {
    /// A query's result as a statement's output: a result set, or `COPY ... TO STDOUT`'s rows
    /// in `copy`'s format. While [`Session::execute_streaming`] runs, a query DataFusion plans
    /// is sent as it runs ([`Output::Sent`]); the direct path's answers and the system
    /// catalogs' kept ones are gathered.
    pub(super) async fn rows_out(&self, q: Query, copy: Option<CopyFormat>) -> Result<Output> {
        let to = self.stream.as_ref().map(|to| (to, copy.clone()));
        Ok(match (self.answer(q, to).await?, copy) {
            (Answer::Sent(rows), copy) => Output::Sent { rows, copy },
            (Answer::Gathered(schema, batches, origins), None) => Output::Rows {
                schema,
                batches,
                origins,
            },
            (Answer::Gathered(schema, batches, _), Some(format)) => Output::CopyOut {
                schema,
                batches,
                format,
            },
        })
    }

    /// Plan and run a query, gathering its rows.
    pub(super) async fn query(&self, q: Query) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        match self.answer(q, None).await? {
            Answer::Gathered(schema, batches, _) => Ok((schema, batches)),
            Answer::Sent(_) => Err(SqlError::internal("a gathered query's rows were sent")),
        }
    }

    /// Plan and run a query: a single-table read on the direct path, anything else through
    /// DataFusion, whose rows go to `to` as they come when it is given.
    async fn answer(
        &self,
        mut q: Query,
        to: Option<(&Sender<Piece>, Option<CopyFormat>)>,
    ) -> Result<Answer> {
        let ctid = mentions_ctid(&q);
        if ctid {
            hide_ctid_from_wildcards(&mut q);
        }
        strip_collate(&mut q);
        let names = pg_column_names(&q);
        alias_repeated(&mut q);
        if !ctid && self.direct != DirectMode::Off {
            let direct = match self.direct_select(&q).await {
                Some(out) => Some(out),
                None => self
                    .direct_constant(&q)
                    .map(|(schema, batches)| (schema, batches, Origins::None)),
            };
            if let Some((schema, batches, origins)) = direct {
                let out = (schema, batches);
                check_width(&out.0)?;
                // Compared as the client sees them: with PostgreSQL's column names.
                let out = rename_columns(out.0, out.1, &names)?;
                if self.direct == DirectMode::Check {
                    let (schema, batches, planned) = self
                        .plan_and_collect(Statement::Query(Box::new(q)), false, false)
                        .await?;
                    let general = rename_columns(schema, batches, &names)?;
                    same_answer("a SELECT", &out, &general, true)?;
                    let n = out.0.fields().len();
                    if origins.resolve(n) != planned.resolve(n) {
                        return Err(SqlError::internal(format!(
                            "the direct path's result columns come from {:?}, DataFusion's \
                             plan's from {:?}",
                            origins.resolve(n),
                            planned.resolve(n)
                        )));
                    }
                }
                return Ok(Answer::Gathered(out.0, out.1, origins));
            }
        }
        // A query of the system catalogs alone (DuckDB's postgres extension asks several per
        // connection and per table it looks up) has the same answer until the catalog
        // changes: the database keeps it.
        let catalog = self.shared.current_catalog();
        let key = (!ctid && reads_system_catalogs_only(&q, &catalog))
            .then(|| format!("{}\0{q}", self.shared.system_view_name()));
        if let Some(hit) = key
            .as_ref()
            .and_then(|k| self.db.system_answer(k, &catalog))
        {
            self.shared
                .system_answers_reused
                .fetch_add(1, Ordering::Relaxed);
            return Ok(Answer::Gathered(hit.0, hit.1, Origins::None));
        }
        if let (Some((to, copy)), None) = (to, &key) {
            let rows = self
                .plan_and_send(Statement::Query(Box::new(q)), ctid, &names, to, copy)
                .await?;
            return Ok(Answer::Sent(rows));
        }
        let (schema, batches, origins) = self
            .plan_and_collect(Statement::Query(Box::new(q)), ctid, false)
            .await?;
        let out = rename_columns(schema, batches, &names)?;
        if let Some(k) = key {
            // PostgreSQL's own catalogs are not tables of ours: no origins.
            self.db.keep_system_answer(k, catalog, out.clone());
        }
        Ok(Answer::Gathered(out.0, out.1, origins))
    }

    /// A SELECT of constants without FROM, on the direct path when it can evaluate them.
    pub(super) fn direct_constant(&self, q: &Query) -> Option<(SchemaRef, Vec<RecordBatch>)> {
        let planning = Instant::now();
        let out = direct::constant_select(&self.direct_state, q).ok()??;
        self.shared.phases.since(Phase::Plan, planning);
        self.shared.direct_runs.fetch_add(1, Ordering::Relaxed);
        Some(out)
    }

    /// `q` on the direct path, when it is of its shape and it can finish it.
    pub(super) async fn direct_select(
        &self,
        q: &Query,
    ) -> Option<(SchemaRef, Vec<RecordBatch>, Origins)> {
        let planning = Instant::now();
        let catalog = self.shared.current_catalog();
        let plan = direct::select_shape(q, &catalog, self.nulls);
        self.shared.phases.since(Phase::Plan, planning);
        let plan = plan?;
        let (rel, columns) = plan.reads();
        let origins = Origins::Table {
            oid: rel.table_oid(),
            columns: columns.into(),
        };
        let guard = self.shared.txn.lock().await;
        let txn = guard.as_ref()?;
        let (out, read) = direct::select(&self.direct_state, txn, &plan, &self.shared.phases)
            .await
            .ok()??;
        self.shared
            .pairs_read
            .fetch_add(read as u64, Ordering::Relaxed);
        self.shared.direct_runs.fetch_add(1, Ordering::Relaxed);
        Some((out.0, out.1, origins))
    }

    /// The batch a direct UPDATE or DELETE changes: the storage key of every row it names,
    /// then each SET value (the shape [`Session::select_targets`] answers); `None` when the
    /// statement is not of the direct path's shapes or the path cannot finish it.
    pub(super) async fn direct_targets(
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
            None,
            true,
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
        let keys = m.keys?;
        let rows = keys.len();
        let keys: ArrayRef = Arc::new(keys);
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
            &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .ok()
    }

    /// Plan `stmt` for DataFusion to run: its columns as the client is told them, its
    /// physical plan (stopped by the session's interrupt) and the context to run it in.
    async fn plan(
        &self,
        stmt: Statement,
        ctid: bool,
        key: bool,
    ) -> Result<(SchemaRef, Arc<dyn ExecutionPlan>, Arc<TaskContext>, Origins)> {
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
        check_width(&schema)?;
        let optimizing = Instant::now();
        let storage_before = phases.snapshot().get(Phase::Storage);
        let physical = state.create_physical_plan(&plan).await;
        let storage = phases.snapshot().get(Phase::Storage) - storage_before;
        phases.add(
            Phase::Optimize,
            (optimizing.elapsed().as_nanos() as u64).saturating_sub(storage),
        );
        let physical = crate::interrupt::interruptible(physical?, &self.interrupt)?;
        let schema = resolve_null_types(schema, &physical.schema());
        // Kept for the result's RowDescription, worked out only if one is sent.
        let origins = Origins::Plan(Arc::new(plan));
        Ok((schema, physical, state.task_ctx(), origins))
    }

    pub(super) async fn plan_and_collect(
        &self,
        stmt: Statement,
        ctid: bool,
        key: bool,
    ) -> Result<(SchemaRef, Vec<RecordBatch>, Origins)> {
        let (schema, physical, ctx, origins) = self.plan(stmt, ctid, key).await?;
        // Gathered batch by batch, each reserved from the database's memory pool first, so a
        // result too large for it fails with 53200 rather than taking the process's memory.
        let reservation =
            MemoryConsumer::new("the result of a statement").register(ctx.memory_pool());
        let mut stream = execute_stream(physical, ctx)?;
        let mut batches = Vec::new();
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            reservation.try_grow(batch.get_array_memory_size())?;
            batches.push(batch);
        }
        Ok((schema, batches, origins))
    }

    /// Plan and run `stmt`, handing its rows to `to` batch by batch as they come (after a
    /// [`Piece::Begin`] with PostgreSQL's column names), then waiting for the receiver to say
    /// they all went out. Each batch is reserved from the memory pool until the receiver
    /// drops it. Answers the number of rows.
    async fn plan_and_send(
        &self,
        stmt: Statement,
        ctid: bool,
        names: &[Option<String>],
        to: &Sender<Piece>,
        copy: Option<CopyFormat>,
    ) -> Result<usize> {
        let (schema, physical, ctx, origins) = self.plan(stmt, ctid, false).await?;
        let reservation = MemoryConsumer::new("a result being sent").register(ctx.memory_pool());
        let mut stream = execute_stream(physical, ctx)?;
        let renamer = Renamer::new(schema.fields().len(), names);
        let mut next = stream.next().await.transpose()?;
        // As a gathered result is named: from its first batch's own schema, where execution
        // may have settled a type the plan left open.
        let schema = match &renamer {
            Some(r) => r.schema(&next.as_ref().map_or(schema, |b| b.schema())),
            None => schema,
        };
        self.send_piece(
            to,
            Piece::Begin {
                schema,
                copy,
                origins,
            },
        )
        .await?;
        let mut rows = 0;
        while let Some(batch) = next {
            let batch = match &renamer {
                Some(r) => r.batch(&batch)?,
                None => batch,
            };
            let size = batch.get_array_memory_size();
            reservation.try_grow(size)?;
            let held = Held(reservation.split(size));
            rows += batch.num_rows();
            self.send_piece(to, Piece::Rows(batch, held)).await?;
            next = stream.next().await.transpose()?;
        }
        let (done, sent) = tokio::sync::oneshot::channel();
        self.send_piece(to, Piece::End(done)).await?;
        match sent.await {
            Ok(r) => r.map(|()| rows),
            Err(_) => Err(client_gone()),
        }
    }

    /// Hand `piece` to `to`, waiting while it is full; a cancel or the statement's timeout
    /// still stops the statement meanwhile.
    async fn send_piece(&self, to: &Sender<Piece>, piece: Piece) -> Result<()> {
        loop {
            match tokio::time::timeout(std::time::Duration::from_millis(50), to.reserve()).await {
                Ok(Ok(permit)) => {
                    permit.send(piece);
                    return Ok(());
                }
                Ok(Err(_)) => return Err(client_gone()),
                Err(_) => self.interrupt.check()?,
            }
        }
    }

    /// The rows an UPDATE or DELETE changes: the direct path's batch when it has one (checked
    /// against DataFusion's in [`DirectMode::Check`]), else DataFusion's answer to the query
    /// `sql` prints (only printed when it is planned).
    pub(super) async fn targets_or_general(
        &self,
        direct: Option<RecordBatch>,
        sql: impl FnOnce() -> String,
        ctid: bool,
        what: &str,
    ) -> Result<Vec<RecordBatch>> {
        match direct {
            Some(b) => {
                if self.direct == DirectMode::Check {
                    let general = self.select_targets(&sql(), ctid).await?;
                    same_rows(what, std::slice::from_ref(&b), &general)?;
                }
                Ok(vec![b])
            }
            None => self.select_targets(&sql(), ctid).await,
        }
    }

    /// The rows of an `INSERT ... VALUES` on the direct path, when it can evaluate them.
    pub(super) fn direct_values(&self, source: &Query) -> Option<RecordBatch> {
        if !direct::bare_body(source, false) {
            return None;
        }
        let SetExpr::Values(values) = source.body.as_ref() else {
            return None;
        };
        let planning = Instant::now();
        let out = direct::values::batch(&self.direct_state, values).ok()?;
        self.shared.phases.since(Phase::Plan, planning);
        if out.is_some() {
            self.shared.direct_runs.fetch_add(1, Ordering::Relaxed);
        }
        out
    }

    /// Plan a SELECT built from parts of an UPDATE or DELETE (displayed back to SQL by the
    /// parser, then parsed again as one query).
    pub(super) async fn select_targets(&self, sql: &str, ctid: bool) -> Result<Vec<RecordBatch>> {
        let mut stmts = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .map_err(|e| SqlError::internal(format!("planning {sql}: {e}")))?;
        let Some(Statement::Query(mut q)) = stmts.pop() else {
            return Err(SqlError::internal(format!("planning {sql}: not a query")));
        };
        strip_collate(&mut q);
        let (_, batches, _) = self
            .plan_and_collect(Statement::Query(q), ctid, true)
            .await?;
        Ok(batches)
    }
}

/// Refuse an answer of the direct path that is not DataFusion's ([`DirectMode::Check`]):
/// the same columns (names, types, PostgreSQL types) when `schema`, and the same rows in the
/// same order.
pub(super) fn same_answer(
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
pub(super) fn same_rows(what: &str, direct: &[RecordBatch], general: &[RecordBatch]) -> Result<()> {
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

/// The answer's schema as the client is told it: the planned one (its names and PostgreSQL
/// types), except that a column the plan left untyped (`NULL` in a UNION's first branch) takes
/// the type the optimiser gave it from the other branches, as PostgreSQL resolves a union's
/// column. With rows, the batches carry that type anyway; without, only this tells the client
/// (DuckDB's per-table lookup of a missing table: `oid`, `char`, `int2[]`, not `text`).
fn resolve_null_types(planned: SchemaRef, physical: &SchemaRef) -> SchemaRef {
    let untyped = |i: usize| {
        planned.field(i).data_type() == &DataType::Null
            && physical
                .fields()
                .get(i)
                .is_some_and(|f| f.data_type() != &DataType::Null)
    };
    if planned.fields().len() != physical.fields().len()
        || !(0..planned.fields().len()).any(untyped)
    {
        return planned;
    }
    let fields: Vec<_> = planned
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if untyped(i) {
                Arc::new(
                    physical
                        .field(i)
                        .as_ref()
                        .clone()
                        .with_name(f.name().clone()),
                )
            } else {
                f.clone()
            }
        })
        .collect();
    Arc::new(datafusion::arrow::datatypes::Schema::new_with_metadata(
        fields,
        planned.metadata().clone(),
    ))
}
