//! The direct path: the statements DuckLake sends most, run without DataFusion's planner.
//!
//! DuckLake reads one table at a time (`SELECT columns FROM table WHERE ... [ORDER BY ...]`),
//! writes with `INSERT ... VALUES` and changes rows with single-table `UPDATE` and `DELETE`.
//! Planning each of those through DataFusion (name resolution, the analyser, some thirty
//! optimiser rules, physical planning and its rules, then the operators) cost far more than
//! reading the rows. Here the parsed statement's shape decides (never its text): a statement
//! of one of those shapes is run straight over the table, and everything else, or anything
//! this path cannot plan, goes to DataFusion as before.
//!
//! Every expression is still DataFusion's: converted from the AST by DataFusion's own SQL
//! planner (`create_logical_expr_from_sql_expr`), type-coerced and simplified by its
//! `ExprSimplifier` (the analyser's coercion rules), evaluated by its physical expressions,
//! sorted by its `sort_batch`; `VALUES` rows are unified into one type per column by its
//! `LogicalPlanBuilder::values`. Key filters narrow the scan through the same
//! [`RelDef::ranges_for`] the table provider uses. So an answer here is DataFusion's answer;
//! [`DirectMode::Check`] runs both paths and refuses a statement whose answers differ, and the
//! replay tests run in that mode.
//!
//! A statement the direct path cannot finish (an expression it cannot plan, an error while
//! evaluating) falls back to DataFusion before anything is written, so errors, too, are the
//! general path's.

mod latest;
mod quick;
pub(crate) mod values;

use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{
    Array, ArrayRef, BinaryArray, BooleanArray, RecordBatch, RecordBatchOptions,
};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, TableReference};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::utils::split_conjunction_owned;
use datafusion::logical_expr::{Expr as DfExpr, Volatility};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::expressions::Column as PhysicalColumn;
use datafusion::physical_plan::sorts::sort::sort_batch;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, Delete, Expr, ExprWithAlias, FromTable, GroupByExpr, Ident, ObjectName,
    OrderByKind, Query, SelectFlavor, SelectItem, SetExpr, TableFactor, TableWithJoins, Update,
    Values,
};

use crate::catalog::{fold, split_name, Catalog};
use crate::error::{Result, SqlError};
use crate::pg_catalog::PG_CATALOG_TABLES;
use crate::phases::{Phase, PhaseTimes};
use crate::relation::{RelDef, StoredRow};
use crate::scan::{rows_batch, ScanShape};
use crate::txn::Txn;

/// Whether statements take the direct path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DirectMode {
    /// Statements of the direct path's shapes run there (the default).
    #[default]
    On,
    /// Every statement goes through DataFusion's planner (the path before the direct one; for
    /// comparisons and benchmarks).
    Off,
    /// Both paths run and their answers are compared; a difference fails the statement with
    /// an internal error naming it (for tests).
    Check,
}

impl DirectMode {
    /// The mode `ROCKLAKE_SQL_DIRECT` names (`off`, `check`; anything else, or nothing, is
    /// [`DirectMode::On`]): how a server or a benchmark is switched without a rebuild.
    pub fn from_env() -> DirectMode {
        match std::env::var("ROCKLAKE_SQL_DIRECT").as_deref() {
            Ok("off") => DirectMode::Off,
            Ok("check") => DirectMode::Check,
            _ => DirectMode::On,
        }
    }
}

/// The one table a statement reads, and the name its columns are qualified with.
pub(crate) struct Target {
    /// Its definition.
    pub rel: Arc<RelDef>,
    /// The alias, else the name as written.
    qualifier: TableReference,
}

impl Target {
    /// The table's columns as DataFusion names them.
    fn df_schema(&self, schema: &SchemaRef) -> Result<DFSchema> {
        Ok(DFSchema::try_from_qualified_schema(
            self.qualifier.clone(),
            schema,
        )?)
    }

    /// Whether `parts` (all but the last of a compound identifier) name this table.
    fn named_by(&self, parts: &[Ident]) -> bool {
        let parts: Vec<String> = parts.iter().map(fold).collect();
        match (&self.qualifier, parts.as_slice()) {
            (q, [t]) => q.table() == t,
            (TableReference::Partial { schema, table }, [s, t]) => {
                schema.as_ref() == s && table.as_ref() == t
            }
            _ => false,
        }
    }
}

/// The table of a `FROM` of exactly one plain table of the catalog's (no join, no function,
/// no system catalog table).
pub(crate) fn single_table(from: &[TableWithJoins], catalog: &Catalog) -> Option<Target> {
    let [twj] = from else { return None };
    if !twj.joins.is_empty() {
        return None;
    }
    table_factor(&twj.relation, catalog)
}

fn table_factor(f: &TableFactor, catalog: &Catalog) -> Option<Target> {
    let TableFactor::Table {
        name,
        alias,
        args,
        with_hints,
        version,
        with_ordinality,
        partitions,
        json_path,
        sample,
        index_hints,
    } = f
    else {
        return None;
    };
    if args.is_some()
        || !with_hints.is_empty()
        || version.is_some()
        || *with_ordinality
        || !partitions.is_empty()
        || json_path.is_some()
        || sample.is_some()
        || !index_hints.is_empty()
        || alias.as_ref().is_some_and(|a| !a.columns.is_empty())
    {
        return None;
    }
    let rel = resolve(name, catalog)?;
    let qualifier = match alias {
        Some(a) => TableReference::bare(fold(&a.name)),
        None => match name.0.len() {
            1 => TableReference::bare(rel.name.clone()),
            _ => TableReference::partial(rel.schema.clone(), rel.name.clone()),
        },
    };
    Some(Target { rel, qualifier })
}

/// A table of the catalog's named by one or two parts (what DataFusion would resolve to the
/// same table); system catalog names are left to DataFusion.
fn resolve(name: &ObjectName, catalog: &Catalog) -> Option<Arc<RelDef>> {
    if name.0.len() > 2 {
        return None;
    }
    let (schema, table) = split_name(name).ok()?;
    if PG_CATALOG_TABLES.contains(&table.as_str())
        || schema == "pg_catalog"
        || schema == "information_schema"
    {
        return None;
    }
    catalog.tables.get(&(schema, table)).cloned()
}

/// A column of the target named by `e` (a bare or qualified identifier).
fn column_of(e: &Expr, target: &Target) -> Option<usize> {
    let name = match e {
        Expr::Identifier(i) => fold(i),
        Expr::CompoundIdentifier(parts) => {
            let (last, quals) = parts.split_last()?;
            if !target.named_by(quals) {
                return None;
            }
            fold(last)
        }
        Expr::Nested(inner) => return column_of(inner, target),
        _ => return None,
    };
    target.rel.column_index(&name).ok()
}

/// `SELECT columns FROM table [WHERE ...] [ORDER BY columns]`, as the direct path runs it.
pub(crate) struct Select<'a> {
    target: Target,
    /// Output columns: indices into the table's columns.
    columns: Vec<usize>,
    selection: Option<&'a Expr>,
    /// A WHERE of `column = (SELECT MAX(column) FROM table)`, in place of `selection`.
    latest: Option<latest::Latest>,
    /// (column, ascending, nulls first).
    order: Vec<(usize, bool, bool)>,
}

impl Select<'_> {
    /// The table it reads and each result column's index among the table's columns.
    pub(crate) fn reads(&self) -> (&RelDef, &[usize]) {
        (&self.target.rel, &self.columns)
    }
}

/// Whether `q` is its body alone: no `WITH`, `LIMIT`, `FETCH`, locking, `FOR`, settings,
/// format or pipe clauses, and no `ORDER BY` unless `order_by` allows one.
pub(crate) fn bare_body(q: &Query, order_by: bool) -> bool {
    q.with.is_none()
        && (order_by || q.order_by.is_none())
        && q.limit_clause.is_none()
        && q.fetch.is_none()
        && q.locks.is_empty()
        && q.for_clause.is_none()
        && q.settings.is_none()
        && q.format_clause.is_none()
        && q.pipe_operators.is_empty()
}

/// The direct path's plan of `q`, when it is a single-table read of plain columns.
pub(crate) fn select_shape<'a>(
    q: &'a Query,
    catalog: &Catalog,
    nulls: datafusion::sql::planner::NullOrdering,
) -> Option<Select<'a>> {
    if let Some(s) = latest::derived(q, catalog, nulls) {
        return Some(s);
    }
    if !bare_body(q, true) {
        return None;
    }
    let SetExpr::Select(s) = q.body.as_ref() else {
        return None;
    };
    if !plain_select(s) {
        return None;
    }
    let target = single_table(&s.from, catalog)?;
    let mut columns = Vec::new();
    for item in &s.projection {
        match item {
            SelectItem::UnnamedExpr(e) => columns.push(column_of(e, &target)?),
            SelectItem::Wildcard(opts) if *opts == Default::default() => {
                columns.extend(0..target.rel.columns.len())
            }
            _ => return None,
        }
    }
    let mut order = Vec::new();
    if let Some(ob) = &q.order_by {
        if ob.interpolate.is_some() {
            return None;
        }
        let OrderByKind::Expressions(items) = &ob.kind else {
            return None;
        };
        for item in items {
            if item.with_fill.is_some() {
                return None;
            }
            let c = column_of(&item.expr, &target)?;
            let asc = item.options.asc.unwrap_or(true);
            let nulls_first = item
                .options
                .nulls_first
                .unwrap_or_else(|| nulls.nulls_first(asc));
            order.push((c, asc, nulls_first));
        }
    }
    let latest = s
        .selection
        .as_ref()
        .and_then(|e| latest::latest(e, &target, catalog));
    Some(Select {
        target,
        columns,
        selection: s.selection.as_ref().filter(|_| latest.is_none()),
        latest,
        order,
    })
}

/// Whether a SELECT has none of the clauses the direct path leaves to DataFusion (DISTINCT,
/// GROUP BY, HAVING, windows, dialect extensions).
fn plain_select(s: &datafusion::sql::sqlparser::ast::Select) -> bool {
    let plain_group_by =
        matches!(&s.group_by, GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty());
    if !s.optimizer_hints.is_empty()
        || s.distinct.is_some()
        || s.select_modifiers.is_some()
        || s.top.is_some()
        || s.exclude.is_some()
        || s.into.is_some()
        || !s.lateral_views.is_empty()
        || s.prewhere.is_some()
        || !s.connect_by.is_empty()
        || !plain_group_by
        || !s.cluster_by.is_empty()
        || !s.distribute_by.is_empty()
        || !s.sort_by.is_empty()
        || s.having.is_some()
        || !s.named_window.is_empty()
        || s.qualify.is_some()
        || s.value_table_mode.is_some()
        || s.flavor != SelectFlavor::Standard
    {
        return false;
    }
    true
}

/// `SELECT expression [AS name], ...` with no FROM (DuckDB's postgres extension checks a pooled
/// connection with `SELECT 1`): the one row, evaluated as a one-row `VALUES` list is. Columns
/// are named by their aliases; unnamed ones get PostgreSQL's names from the caller.
pub(crate) fn constant_select(
    state: &SessionState,
    q: &Query,
) -> Result<Option<(SchemaRef, Vec<RecordBatch>)>> {
    if !bare_body(q, false) {
        return Ok(None);
    }
    let SetExpr::Select(s) = q.body.as_ref() else {
        return Ok(None);
    };
    if !s.from.is_empty() || s.selection.is_some() || !plain_select(s) {
        return Ok(None);
    }
    let mut row = Vec::with_capacity(s.projection.len());
    let mut names = Vec::with_capacity(s.projection.len());
    for item in &s.projection {
        match item {
            SelectItem::UnnamedExpr(e) => {
                row.push(e.clone());
                names.push(None);
            }
            SelectItem::ExprWithAlias { expr, alias } => {
                row.push(expr.clone());
                names.push(Some(fold(alias)));
            }
            _ => return Ok(None),
        }
    }
    let list = Values {
        explicit_row: false,
        value_keyword: false,
        rows: vec![datafusion::sql::sqlparser::ast::Parens::with_empty_span(
            row,
        )],
    };
    let Some(batch) = values::batch(state, &list)? else {
        return Ok(None);
    };
    let fields: Vec<_> = batch
        .schema()
        .fields()
        .iter()
        .zip(&names)
        .enumerate()
        .map(|(i, (f, n))| {
            let name = n
                .clone()
                .unwrap_or_else(|| format!("__rocklake_constant_{i}"));
            f.as_ref().clone().with_name(name)
        })
        .collect();
    let schema: SchemaRef = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), batch.columns().to_vec())?;
    Ok(Some((schema, vec![batch])))
}

/// `UPDATE table SET column = expression, ... [WHERE ...]` (no FROM, no RETURNING).
pub(crate) struct UpdateShape<'a> {
    /// The table.
    pub target: Target,
    /// (column index, value) per assignment.
    pub assignments: Vec<(usize, &'a Expr)>,
    /// The WHERE.
    pub selection: Option<&'a Expr>,
}

/// The direct path's plan of an UPDATE of one table by its own columns.
pub(crate) fn update_shape<'a>(u: &'a Update, catalog: &Catalog) -> Option<UpdateShape<'a>> {
    if u.from.is_some() || u.returning.is_some() || u.or.is_some() || u.limit.is_some() {
        return None;
    }
    if !u.table.joins.is_empty() {
        return None;
    }
    let target = table_factor(&u.table.relation, catalog)?;
    let mut assignments = Vec::with_capacity(u.assignments.len());
    for a in &u.assignments {
        let AssignmentTarget::ColumnName(col) = &a.target else {
            return None;
        };
        let [part] = col.0.as_slice() else {
            return None;
        };
        let c = target.rel.column_index(&fold(part.as_ident()?)).ok()?;
        assignments.push((c, &a.value));
    }
    Some(UpdateShape {
        target,
        assignments,
        selection: u.selection.as_ref(),
    })
}

/// The direct path's plan of a DELETE from one table by its own columns: the table and the
/// WHERE.
pub(crate) fn delete_shape<'a>(
    d: &'a Delete,
    catalog: &Catalog,
) -> Option<(Target, Option<&'a Expr>)> {
    if !d.tables.is_empty()
        || d.using.is_some()
        || d.returning.is_some()
        || !d.order_by.is_empty()
        || d.limit.is_some()
    {
        return None;
    }
    let from = match &d.from {
        FromTable::WithFromKeyword(f) | FromTable::WithoutKeyword(f) => f,
    };
    let target = single_table(from, catalog)?;
    Some((target, d.selection.as_ref()))
}

/// Whether the direct path evaluates `expr`: no subquery, aggregate or window function,
/// placeholder or other planner-only node, no column when `columns` is false (a `VALUES`
/// value), and no function whose value depends on when the statement runs (`now()` is the
/// session's own: the transaction's start); those stay with DataFusion, which gives them the
/// statement's start time.
fn evaluable(expr: &DfExpr, columns: bool) -> Result<bool> {
    use datafusion::common::tree_node::TreeNodeRecursion;
    let mut plain = true;
    expr.apply(|e| {
        let ok = match e {
            DfExpr::Column(_) => columns,
            DfExpr::ScalarSubquery(_)
            | DfExpr::InSubquery(_)
            | DfExpr::Exists(_)
            | DfExpr::SetComparison(_)
            | DfExpr::AggregateFunction(_)
            | DfExpr::WindowFunction(_)
            | DfExpr::OuterReferenceColumn(..)
            | DfExpr::Placeholder(_)
            | DfExpr::GroupingSet(_)
            | DfExpr::Unnest(_)
            | DfExpr::ScalarVariable(..)
            | DfExpr::HigherOrderFunction(_)
            | DfExpr::Lambda(_)
            | DfExpr::LambdaVariable(_) => false,
            DfExpr::ScalarFunction(f) => {
                f.func.name() == "now" || f.func.signature().volatility == Volatility::Immutable
            }
            _ => true,
        };
        plain &= ok;
        Ok(if ok {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    })?;
    Ok(plain)
}

/// DataFusion's expression of `e` over `schema` as its SQL planner makes it (COLLATE left
/// out), before coercion and simplification.
fn unsimplified(state: &SessionState, e: &Expr, schema: &DFSchema) -> Result<DfExpr> {
    let mut e = e.clone();
    crate::rewrite::strip_collate_expr(&mut e);
    Ok(state.create_logical_expr_from_sql_expr(
        ExprWithAlias {
            expr: e,
            alias: None,
        },
        schema,
    )?)
}

/// A DataFusion expression of `e` over `schema`, coerced and simplified as the analyser and
/// optimiser would leave it; `None` when the direct path should not evaluate it (a subquery,
/// an aggregate or window function, a placeholder, or a function whose value depends on when
/// the statement runs).
fn logical(state: &SessionState, e: &Expr, schema: &DFSchema) -> Result<Option<DfExpr>> {
    if let Some(quick) = quick::expr(e, schema) {
        #[cfg(debug_assertions)]
        {
            let planned = planned(state, e, schema)?;
            assert_eq!(
                Some(&quick),
                planned.as_ref(),
                "the direct path's own expression of `{e}` differs from DataFusion's"
            );
        }
        return Ok(Some(quick));
    }
    planned(state, e, schema)
}

/// [`logical`] through DataFusion's planner, coercion and simplifier.
fn planned(state: &SessionState, e: &Expr, schema: &DFSchema) -> Result<Option<DfExpr>> {
    let expr = unsimplified(state, e, schema)?;
    let plain = evaluable(&expr, true)?;
    if !plain {
        return Ok(None);
    }
    let context = SimplifyContext::builder()
        .with_schema(Arc::new(schema.clone()))
        .with_config_options(state.config_options().clone())
        .with_query_execution_start_time(state.execution_props().query_execution_start_time)
        .build();
    let simplifier = ExprSimplifier::new(context);
    let coerced = simplifier.coerce(expr, schema)?;
    Ok(Some(simplifier.simplify(coerced)?))
}

/// What a WHERE matched: the table's columns of the matching rows, in heap order, and their
/// stored rows.
pub(crate) struct Matched {
    /// The table's columns.
    pub batch: RecordBatch,
    /// The storage keys of the same rows, when asked for.
    pub keys: Option<BinaryArray>,
    df_schema: DFSchema,
}

/// The rows of `target` that `selection` matches, read through `txn`, with the number of
/// stored rows the scan read, and with their storage keys when `keys`; `None` when the WHERE
/// is not the direct path's.
pub(crate) async fn matching(
    state: &SessionState,
    txn: &Txn,
    target: &Target,
    selection: Option<&Expr>,
    columns: Option<Vec<bool>>,
    keys: bool,
    phases: &PhaseTimes,
) -> Result<Option<(Matched, usize)>> {
    let planning = Instant::now();
    let schema = target.rel.arrow_schema(false, false);
    let df_schema = target.df_schema(&schema)?;
    let predicate = match selection {
        None => None,
        Some(e) => match logical(state, e, &df_schema)? {
            Some(p) => Some(p),
            None => return Ok(None),
        },
    };
    // The columns a scan reads: the caller's and the WHERE's (the others are placeholders in
    // the batch, see `rows_batch`). A primary-key lookup reads whole rows.
    let columns = match (columns, &predicate) {
        (Some(mut wanted), Some(p)) => {
            for c in p.column_refs() {
                match df_schema.index_of_column(c) {
                    Ok(i) if i < wanted.len() => wanted[i] = true,
                    // A name the schema does not place: read everything.
                    _ => wanted.iter_mut().for_each(|w| *w = true),
                }
            }
            Some(wanted)
        }
        (columns, _) => columns,
    };
    phases.since(Phase::Plan, planning);
    let reading = Instant::now();
    let filters = predicate
        .clone()
        .map(split_conjunction_owned)
        .unwrap_or_default();
    // With `keys`, the batch has the storage keys as its last column, split off below.
    let scanned = if keys {
        target.rel.arrow_schema(false, true)
    } else {
        schema.clone()
    };
    let mut batch = match primary_keys(&target.rel, &filters)? {
        // Every primary-key column is named by `=` or `IN`: the primary-key index finds the
        // rows, whatever the table's storage key leads with.
        Some(pks) => {
            let rows = by_primary_key(txn, &target.rel, pks).await?;
            rows_batch(&target.rel, &scanned, &rows, false, keys, None)?
        }
        None => {
            let ranges = target.rel.ranges_for(&filters);
            let shape = ScanShape {
                ctid: false,
                key: keys,
                read: columns.as_deref(),
            };
            txn.scan_batch(&target.rel, &ranges, &scanned, shape)
                .await?
        }
    };
    let read = batch.num_rows();
    let mut key_column = None;
    if keys {
        key_column = Some(batch.remove_column(batch.num_columns() - 1));
        batch = RecordBatch::try_new_with_options(
            schema,
            batch.columns().to_vec(),
            &RecordBatchOptions::new().with_row_count(Some(read)),
        )?;
    }
    phases.since(Phase::Storage, reading);
    if let Some(p) = predicate {
        let physical = state.create_physical_expr(p, &df_schema)?;
        let mask = physical.evaluate(&batch)?.into_array(batch.num_rows())?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| SqlError::internal("a WHERE did not evaluate to booleans"))?;
        batch = filter_record_batch(&batch, mask)?;
        if let Some(k) = key_column.as_mut() {
            *k = datafusion::arrow::compute::filter(k, mask)?;
        }
    }
    let keys = key_column
        .map(|k| {
            k.as_any()
                .downcast_ref::<BinaryArray>()
                .cloned()
                .ok_or_else(|| SqlError::internal("storage keys that are not bytes"))
        })
        .transpose()?;
    Ok(Some((
        Matched {
            batch,
            keys,
            df_schema,
        },
        read,
    )))
}

/// Run a [`Select`]: the columns' schema and the rows, or `None` when its WHERE is not the
/// direct path's.
pub(crate) async fn select(
    state: &SessionState,
    txn: &Txn,
    plan: &Select<'_>,
    phases: &PhaseTimes,
) -> Result<Option<((SchemaRef, Vec<RecordBatch>), usize)>> {
    let mut before = 0;
    let condition;
    let selection = match &plan.latest {
        Some(l) => {
            let Some((maximum, read)) = l.maximum(state, txn, phases).await? else {
                return Ok(None);
            };
            before = read;
            condition = l.condition(&plan.target, maximum);
            Some(&condition)
        }
        None => plan.selection,
    };
    // Read only the columns the answer and its order need (and the WHERE's, added there).
    let mut wanted = vec![false; plan.target.rel.columns.len()];
    for &c in plan
        .columns
        .iter()
        .chain(plan.order.iter().map(|(c, _, _)| c))
    {
        if let Some(w) = wanted.get_mut(c) {
            *w = true;
        }
    }
    let Some((m, read)) = matching(
        state,
        txn,
        &plan.target,
        selection,
        Some(wanted),
        false,
        phases,
    )
    .await?
    else {
        return Ok(None);
    };
    let read = read + before;
    let mut batch = m.batch;
    if !plan.order.is_empty() {
        let ordering = LexOrdering::new(plan.order.iter().map(|(c, asc, nulls_first)| {
            PhysicalSortExpr::new(
                Arc::new(PhysicalColumn::new(&plan.target.rel.columns[*c].name, *c)),
                datafusion::arrow::compute::SortOptions {
                    descending: !asc,
                    nulls_first: *nulls_first,
                },
            )
        }))
        .ok_or_else(|| SqlError::internal("an empty ORDER BY"))?;
        batch = sort_batch(&batch, &ordering, None)?;
    }
    let schema = batch.schema();
    let out = Arc::new(Schema::new(
        plan.columns
            .iter()
            .map(|c| schema.field(*c).clone())
            .collect::<Vec<_>>(),
    ));
    let columns: Vec<ArrayRef> = plan
        .columns
        .iter()
        .map(|c| batch.column(*c).clone())
        .collect();
    let batch = RecordBatch::try_new_with_options(
        out.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?;
    Ok(Some(((out, vec![batch]), read)))
}

/// The values `exprs` take on the matched rows (an UPDATE's SET list), one array each, or
/// `None` when one of them is not the direct path's.
pub(crate) fn evaluate(
    state: &SessionState,
    m: &Matched,
    exprs: &[&Expr],
) -> Result<Option<Vec<ArrayRef>>> {
    let mut out = Vec::with_capacity(exprs.len());
    for e in exprs {
        // A literal (DuckLake sets its statistics to literals) is the value DataFusion would
        // plan and evaluate, without planning it.
        if let Some((_, v)) = values::sql_literal(e) {
            out.push(v.to_array_of_size(m.batch.num_rows())?);
            continue;
        }
        let Some(l) = logical(state, e, &m.df_schema)? else {
            return Ok(None);
        };
        let physical = state.create_physical_expr(l, &m.df_schema)?;
        out.push(
            physical
                .evaluate(&m.batch)?
                .into_array(m.batch.num_rows())?,
        );
    }
    Ok(Some(out))
}

/// The most primary-key values one statement looks up in the primary-key index (past it, the
/// scan of the key ranges is used).
const MAX_KEY_LOOKUPS: usize = 1024;

/// The primary-key index entries a conjunction names, when it names every primary-key column
/// with `column = literal` or `column IN (literals)`: each combination of the named values,
/// as the index key.
fn primary_keys(rel: &RelDef, filters: &[DfExpr]) -> Result<Option<Vec<Vec<u8>>>> {
    use datafusion::logical_expr::{BinaryExpr, Operator};
    if rel.primary_key.is_empty() {
        return Ok(None);
    }
    let mut values: Vec<Option<Vec<datafusion::common::ScalarValue>>> =
        vec![None; rel.primary_key.len()];
    let slot = |name: &str| {
        rel.primary_key
            .iter()
            .position(|&i| rel.columns[i].name == name)
    };
    for f in filters {
        let (column, list) = match f {
            DfExpr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::Eq,
                right,
            }) => match (left.as_ref(), right.as_ref()) {
                (DfExpr::Column(c), DfExpr::Literal(v, _))
                | (DfExpr::Literal(v, _), DfExpr::Column(c)) => (c, vec![v.clone()]),
                _ => continue,
            },
            DfExpr::InList(inlist) if !inlist.negated => match inlist.expr.as_ref() {
                DfExpr::Column(c) => {
                    let mut list = Vec::with_capacity(inlist.list.len());
                    for e in &inlist.list {
                        match e {
                            DfExpr::Literal(v, _) => list.push(v.clone()),
                            _ => return Ok(None),
                        }
                    }
                    (c, list)
                }
                _ => continue,
            },
            _ => continue,
        };
        if let Some(i) = slot(&column.name) {
            if list.iter().any(|v| v.is_null()) {
                return Ok(None);
            }
            // Two conditions on one column: keep the first (the predicate still checks both).
            values[i].get_or_insert(list);
        }
    }
    let mut combos: Vec<Vec<rocklake_core::values::Value>> =
        vec![vec![rocklake_core::values::Value::Null; rel.columns.len()]];
    for (slot, column) in rel.primary_key.iter().enumerate() {
        let Some(list) = &values[slot] else {
            return Ok(None);
        };
        if combos.len() * list.len() > MAX_KEY_LOOKUPS {
            return Ok(None);
        }
        let col = &rel.columns[*column];
        let mut cells = Vec::with_capacity(list.len());
        for v in list {
            // The value as the column stores it: the same conversion an INSERT makes.
            let a = match col.ty.coerce(&v.to_array_of_size(1)?, &col.name) {
                Ok(a) => a,
                Err(_) => return Ok(None),
            };
            match col.ty.cell(a.as_ref(), 0) {
                Ok(c) => cells.push(c),
                Err(_) => return Ok(None),
            }
        }
        combos = combos
            .into_iter()
            .flat_map(|row| {
                cells.iter().map(move |c| {
                    let mut row = row.clone();
                    row[*column] = c.clone();
                    row
                })
            })
            .collect();
    }
    let mut keys = Vec::with_capacity(combos.len());
    for row in &combos {
        match rel.pk_index_key(row)? {
            Some(k) => keys.push(k),
            None => return Ok(None),
        }
    }
    keys.sort();
    keys.dedup();
    Ok(Some(keys))
}

/// The rows the primary-key index entries `keys` point to, in heap order (by tuple number).
async fn by_primary_key(txn: &Txn, rel: &RelDef, keys: Vec<Vec<u8>>) -> Result<Vec<StoredRow>> {
    let mut rows = Vec::with_capacity(keys.len());
    for pk in keys {
        let Some(key) = txn.get(&pk).await? else {
            continue;
        };
        let Some(value) = txn.get(&key).await? else {
            return Err(SqlError::new(
                crate::error::state::DATA_CORRUPTED,
                format!(
                    "the primary-key entry {} of {} points to {}, which holds no row",
                    rocklake_core::keys::render(&pk),
                    rel.qualified(),
                    rocklake_core::keys::render(&key)
                ),
            ));
        };
        let Some((cells, tuple)) = rel.decode(&key, &value)? else {
            continue;
        };
        let tuple = match tuple {
            Some(t) => Some(t),
            None if rel.tuples_indexed() => txn
                .get(&rel.tuple_index_key(&key))
                .await?
                .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
                .map(u64::from_be_bytes),
            None => None,
        };
        rows.push(StoredRow { key, cells, tuple });
    }
    rows.sort_by_key(|r| r.tuple.unwrap_or(u64::MAX));
    Ok(rows)
}
