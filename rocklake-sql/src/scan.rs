//! A table's stored rows read into one Arrow batch, in the order PostgreSQL's heap gives them.
//!
//! DuckLake reads whole catalog tables (every data file for `ducklake_table_info()` and when
//! it expires snapshots, every column when it loads a schema), so the cost of a row read is
//! what a large catalog pays per query. Rows of DuckLake's tables (the tagged layout) are read
//! straight from their stored bytes into the columns' builders: no decoded row, no value per
//! cell, no copy of their text before the column's own. Other layouts, and a row only the full
//! decoder takes, go through [`Txn::columns_in_heap_order`] and [`rows_batch`].

use std::sync::Arc;

use datafusion::arrow::array::{
    new_null_array, ArrayRef, BinaryArray, BinaryBuilder, RecordBatch, RecordBatchOptions,
    StringBuilder, UInt32Array,
};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{Field, SchemaRef};
use datafusion::common::ScalarValue;
use rocklake_core::backend::KeyRange;
use rocklake_core::values::{visit_cells, Value, ValueRef};

use crate::error::{state, Result, SqlError};
use crate::relation::{Layout, RelDef, Slot, StoredRow};
use crate::txn::Txn;
use crate::types::ColumnBuilder;

/// What a scan of one table reads and returns.
#[derive(Clone, Copy, Debug)]
pub struct ScanShape<'a> {
    /// Add `ctid` after the table's columns (every row must then have its tuple number).
    pub ctid: bool,
    /// Add the storage key after them (and after `ctid`).
    pub key: bool,
    /// The columns to read; the others are placeholders no caller looks at. `None`: all.
    pub read: Option<&'a [bool]>,
}

impl ScanShape<'_> {
    fn reads(&self, column: usize) -> bool {
        self.read
            .is_none_or(|r| r.get(column).copied().unwrap_or(true))
    }
}

impl Txn {
    /// The rows of `rel` within `ranges` (own writes applied) as one batch of `schema`
    /// (`rel.arrow_schema(shape.ctid, shape.key)`), in heap order (see
    /// [`Txn::columns_in_heap_order`]).
    pub async fn scan_batch(
        &self,
        rel: &RelDef,
        ranges: &[KeyRange],
        schema: &SchemaRef,
        shape: ScanShape<'_>,
    ) -> Result<RecordBatch> {
        // A table with overflow rows in these ranges is read row by row (rare: DuckLake
        // writes rows sharing a storage key in few cases).
        let overflow = self.has_overflow(rel, ranges).await?;
        if let (Layout::Tagged { slots, cells, .. }, false) = (&rel.layout, overflow) {
            if let Some(batch) = self
                .tagged_batch(rel, slots, *cells, ranges, schema, shape)
                .await?
            {
                return Ok(batch);
            }
        }
        let rows = self
            .columns_in_heap_order(rel, ranges, shape.ctid, shape.read)
            .await?;
        rows_batch(rel, schema, &rows, shape.ctid, shape.key, shape.read)
    }

    /// [`Txn::scan_batch`] of a tagged table, each row's cells copied from its bytes into the
    /// columns; `None` when a row is in an encoding only the full decoder takes.
    async fn tagged_batch(
        &self,
        rel: &RelDef,
        slots: &[Slot],
        cells: usize,
        ranges: &[KeyRange],
        schema: &SchemaRef,
        shape: ScanShape<'_>,
    ) -> Result<Option<RecordBatch>> {
        // Which SQL column each stored cell fills, and which take the row's interval.
        let mut column_of_cell: Vec<Option<usize>> = vec![None; cells];
        let mut begins = Vec::new();
        let mut ends = Vec::new();
        for (j, slot) in slots.iter().enumerate() {
            if !shape.reads(j) {
                continue;
            }
            match slot {
                Slot::Cell(i) => {
                    if let Some(c) = column_of_cell.get_mut(*i) {
                        *c = Some(j);
                    }
                }
                Slot::Begin => begins.push(j),
                Slot::End => ends.push(j),
            }
        }
        let mut builders: Vec<Option<ColumnBuilder>> = rel
            .columns
            .iter()
            .enumerate()
            .map(|(j, c)| shape.reads(j).then(|| ColumnBuilder::new(c.ty, 0)))
            .collect();
        let what = |j: usize| format!("{}.{}", rel.qualified(), rel.columns[j].name);
        let mut keys = BinaryBuilder::new();
        let mut tuples: Vec<u64> = Vec::new();
        let mut rows = 0usize;
        let mut refused = false;
        for range in ranges {
            let first = rows;
            let visited = self
                .visit(range, &mut |k, v| {
                    let mut failed = None;
                    let row = visit_cells(
                        v,
                        &|i| column_of_cell.get(i).is_some_and(Option::is_some),
                        &mut |i, cell| {
                            let Some(Some(j)) = column_of_cell.get(i).copied() else {
                                return;
                            };
                            if let (None, Some(b)) = (&failed, builders[j].as_mut()) {
                                if let Err(e) = b.push(cell, &|| what(j)) {
                                    failed = Some(e);
                                }
                            }
                        },
                    );
                    if let Some(e) = failed {
                        return Err(e);
                    }
                    let Some(row) = row else {
                        refused = true;
                        return Err(SqlError::internal("a row the full decoder must read"));
                    };
                    for &j in &begins {
                        if let Some(b) = builders[j].as_mut() {
                            b.push(ValueRef::Int(row.begin_snapshot as i64), &|| what(j))?;
                        }
                    }
                    for &j in &ends {
                        if let Some(b) = builders[j].as_mut() {
                            let cell = row
                                .end_snapshot
                                .map_or(ValueRef::Null, |e| ValueRef::Int(e as i64));
                            b.push(cell, &|| what(j))?;
                        }
                    }
                    tuples.push(row.tuple.unwrap_or(u64::MAX));
                    // Columns past the row's stored cells are NULL.
                    rows += 1;
                    for b in builders.iter_mut().flatten() {
                        if b.len() < rows {
                            b.push_null();
                        }
                    }
                    keys.append_value(k);
                    Ok(())
                })
                .await;
            if refused {
                return Ok(None);
            }
            visited?;
            // Rows written before the tuple number was kept in the row take it from the
            // tuple index.
            if tuples[first..].contains(&u64::MAX) {
                let offsets = keys.offsets_slice();
                let bytes = keys.values_slice();
                let key =
                    |i: usize| &bytes[offsets[first + i] as usize..offsets[first + i + 1] as usize];
                self.merge_tuple_index(rel, range, &key, &mut tuples[first..])
                    .await?;
            }
        }
        if shape.ctid {
            if let Some(i) = tuples.iter().position(|t| *t == u64::MAX) {
                let keys = keys.finish_cloned();
                return Err(SqlError::new(
                    state::DATA_CORRUPTED,
                    format!(
                        "the row {} of {} has no tuple number",
                        rocklake_core::keys::render(keys.value(i)),
                        rel.qualified()
                    ),
                ));
            }
        }
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for (j, b) in builders.into_iter().enumerate() {
            columns.push(match b {
                Some(b) => b.finish(&|| what(j))?,
                None => placeholder(schema.field(j), rows)?,
            });
        }
        let keys: BinaryArray = keys.finish();
        // Heap order: by tuple number (a row without one last), stable. Rows written in key
        // order, as most of DuckLake's are, are in it already.
        let order = tuples.windows(2).any(|w| w[0] > w[1]).then(|| {
            let mut order: Vec<u32> = (0..rows as u32).collect();
            order.sort_by_key(|&i| tuples[i as usize]);
            UInt32Array::from(order)
        });
        if shape.ctid {
            let mut b = StringBuilder::with_capacity(rows, rows * 8);
            for t in &tuples {
                b.append_value(RelDef::ctid_text(*t));
            }
            columns.push(Arc::new(b.finish()));
        }
        if shape.key {
            columns.push(Arc::new(keys));
        }
        if let Some(order) = order {
            columns = columns
                .iter()
                .map(|c| take(c.as_ref(), &order, None))
                .collect::<std::result::Result<_, _>>()?;
        }
        RecordBatch::try_new_with_options(
            schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .map(Some)
        .map_err(|e| SqlError::internal(format!("building a batch of {}: {e}", rel.qualified())))
    }
}

/// A column no caller looks at, `rows` long: NULLs, or the type's default value where the
/// column cannot be NULL (so that the schema holds as it is).
fn placeholder(field: &Field, rows: usize) -> Result<ArrayRef> {
    Ok(if field.is_nullable() {
        new_null_array(field.data_type(), rows)
    } else {
        ScalarValue::new_default(field.data_type()).and_then(|v| v.to_array_of_size(rows))?
    })
}

/// Stored rows of `rel` as one batch of `schema` (the table's columns, then `ctid` and the
/// storage key when asked for).
///
/// With `read`, the columns it does not mark were not read (their cells are `Null`): they
/// become placeholders: NULLs, or the type's default value where the column cannot be NULL.
pub fn rows_batch(
    rel: &RelDef,
    schema: &SchemaRef,
    rows: &[StoredRow],
    ctid: bool,
    key: bool,
    read: Option<&[bool]>,
) -> Result<RecordBatch> {
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for (i, c) in rel.columns.iter().enumerate() {
        if read.is_some_and(|r| !r.get(i).copied().unwrap_or(true)) {
            columns.push(placeholder(schema.field(i), rows.len())?);
            continue;
        }
        let cells: Vec<&Value> = rows.iter().map(|r| &r.cells[i]).collect();
        let what = || format!("{}.{}", rel.qualified(), c.name);
        columns.push(c.ty.to_array(&cells, &what)?);
    }
    if ctid {
        let mut b = StringBuilder::with_capacity(rows.len(), rows.len() * 8);
        for r in rows {
            b.append_value(RelDef::ctid_text(r.tuple.unwrap_or(0)));
        }
        columns.push(Arc::new(b.finish()));
    }
    if key {
        let mut b = BinaryBuilder::with_capacity(rows.len(), rows.len() * 25);
        for r in rows {
            b.append_value(&r.key);
        }
        columns.push(Arc::new(b.finish()));
    }
    RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )
    .map_err(|e| SqlError::internal(format!("building a batch of {}: {e}", rel.qualified())))
}
