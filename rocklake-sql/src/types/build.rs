//! Arrow columns built cell by cell from stored cells, borrowed from the rows' bytes where a
//! scan reads them (no [`Value`] per cell) or from decoded [`Value`]s.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayBuilder, ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, Int16Builder,
    Int32Builder, Int64Builder, IntervalMonthDayNanoBuilder, StringBuilder,
    Time64MicrosecondBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::IntervalMonthDayNano;
use rocklake_core::values::ValueRef;

use super::{list_from_texts, SqlType};
use crate::error::{state, Result, SqlError};
use crate::temporal::Interval;

/// The Arrow builder a column type fills.
enum Inner {
    I64(Int64Builder),
    I32(Int32Builder),
    I16(Int16Builder),
    Bool(BooleanBuilder),
    /// Text kept as it is stored: text types, and floats, decimals and arrays (stored as
    /// text, parsed when the column is finished).
    Str(StringBuilder),
    Timestamp(TimestampMicrosecondBuilder),
    Date(Date32Builder),
    Time(Time64MicrosecondBuilder),
    Interval(IntervalMonthDayNanoBuilder),
    Bin(BinaryBuilder),
}

/// One column of type `ty` being built. A cell of the wrong kind is corruption, reported
/// with the column's name.
pub struct ColumnBuilder {
    ty: SqlType,
    inner: Inner,
}

impl ColumnBuilder {
    /// A builder with room for `rows` cells.
    pub fn new(ty: SqlType, rows: usize) -> ColumnBuilder {
        let inner = match ty {
            SqlType::BigInt => Inner::I64(Int64Builder::with_capacity(rows)),
            SqlType::Integer => Inner::I32(Int32Builder::with_capacity(rows)),
            SqlType::SmallInt => Inner::I16(Int16Builder::with_capacity(rows)),
            SqlType::Boolean => Inner::Bool(BooleanBuilder::with_capacity(rows)),
            SqlType::Text | SqlType::Uuid | SqlType::TimeTz => {
                Inner::Str(StringBuilder::with_capacity(rows, rows * 16))
            }
            SqlType::Double | SqlType::Real | SqlType::Numeric(..) | SqlType::Array(_) => {
                Inner::Str(StringBuilder::with_capacity(rows, rows * 8))
            }
            SqlType::TimestampTz | SqlType::Timestamp => {
                Inner::Timestamp(TimestampMicrosecondBuilder::with_capacity(rows))
            }
            SqlType::Date => Inner::Date(Date32Builder::with_capacity(rows)),
            SqlType::Time => Inner::Time(Time64MicrosecondBuilder::with_capacity(rows)),
            SqlType::Interval => Inner::Interval(IntervalMonthDayNanoBuilder::with_capacity(rows)),
            SqlType::Bytea => Inner::Bin(BinaryBuilder::with_capacity(rows, rows * 16)),
        };
        ColumnBuilder { ty, inner }
    }

    /// The cells appended so far.
    pub fn len(&self) -> usize {
        match &self.inner {
            Inner::I64(b) => b.len(),
            Inner::I32(b) => b.len(),
            Inner::I16(b) => b.len(),
            Inner::Bool(b) => b.len(),
            Inner::Str(b) => b.len(),
            Inner::Timestamp(b) => b.len(),
            Inner::Date(b) => b.len(),
            Inner::Time(b) => b.len(),
            Inner::Interval(b) => b.len(),
            Inner::Bin(b) => b.len(),
        }
    }

    /// Whether no cell was appended.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Append a NULL.
    pub fn push_null(&mut self) {
        match &mut self.inner {
            Inner::I64(b) => b.append_null(),
            Inner::I32(b) => b.append_null(),
            Inner::I16(b) => b.append_null(),
            Inner::Bool(b) => b.append_null(),
            Inner::Str(b) => b.append_null(),
            Inner::Timestamp(b) => b.append_null(),
            Inner::Date(b) => b.append_null(),
            Inner::Time(b) => b.append_null(),
            Inner::Interval(b) => b.append_null(),
            Inner::Bin(b) => b.append_null(),
        }
    }

    /// Append one stored cell; a cell of the wrong kind fails with `what` (the table and
    /// column) and appends nothing.
    pub fn push(&mut self, v: ValueRef<'_>, what: &dyn Fn() -> String) -> Result<()> {
        if v == ValueRef::Null {
            self.push_null();
            return Ok(());
        }
        let ty = self.ty;
        let bad = || {
            SqlError::new(
                state::DATA_CORRUPTED,
                format!(
                    "{}: a stored {} cell holds {}",
                    what(),
                    ty.pg_name(),
                    v.to_value()
                ),
            )
        };
        match (&mut self.inner, v) {
            (Inner::I64(b), ValueRef::Int(i)) => b.append_value(i),
            (Inner::I32(b), ValueRef::Int(i)) => b.append_value(i as i32),
            (Inner::I16(b), ValueRef::Int(i)) => b.append_value(i as i16),
            (Inner::Bool(b), ValueRef::Bool(x)) => b.append_value(x),
            (Inner::Str(b), ValueRef::Text(s)) => b.append_value(s),
            (Inner::Timestamp(b), ValueRef::Int(i)) => b.append_value(i),
            (Inner::Date(b), ValueRef::Int(i)) => b.append_value(i as i32),
            (Inner::Time(b), ValueRef::Int(i)) => b.append_value(i),
            (Inner::Interval(b), ValueRef::Bytes(x)) => {
                let iv = Interval::from_bytes(x).ok_or_else(bad)?;
                b.append_value(IntervalMonthDayNano::new(
                    iv.months,
                    iv.days,
                    iv.micros.saturating_mul(1_000),
                ));
            }
            (Inner::Bin(b), ValueRef::Bytes(x)) => b.append_value(x),
            _ => return Err(bad()),
        }
        Ok(())
    }

    /// The column as an array of [`SqlType::arrow`]; text that does not parse as the
    /// column's type fails with `what`.
    pub fn finish(self, what: &dyn Fn() -> String) -> Result<ArrayRef> {
        let ty = self.ty;
        Ok(match self.inner {
            Inner::I64(mut b) => Arc::new(b.finish()),
            Inner::I32(mut b) => Arc::new(b.finish()),
            Inner::I16(mut b) => Arc::new(b.finish()),
            Inner::Bool(mut b) => Arc::new(b.finish()),
            Inner::Timestamp(mut b) => {
                let a = b.finish();
                match ty {
                    SqlType::TimestampTz => Arc::new(a.with_timezone("+00:00")),
                    _ => Arc::new(a),
                }
            }
            Inner::Date(mut b) => Arc::new(b.finish()),
            Inner::Time(mut b) => Arc::new(b.finish()),
            Inner::Interval(mut b) => Arc::new(b.finish()),
            Inner::Bin(mut b) => Arc::new(b.finish()),
            Inner::Str(mut b) => {
                let strings = b.finish();
                match ty {
                    SqlType::Double | SqlType::Real | SqlType::Numeric(..) => {
                        let strings: ArrayRef = Arc::new(strings);
                        cast(&strings, &ty.arrow()).map_err(|e| {
                            SqlError::new(
                                state::DATA_CORRUPTED,
                                format!(
                                    "{}: stored {} text does not parse: {e}",
                                    what(),
                                    ty.pg_name()
                                ),
                            )
                        })?
                    }
                    SqlType::Array(e) => {
                        list_from_texts(strings.iter(), e, &what()).map_err(|err| {
                            SqlError::new(
                                state::DATA_CORRUPTED,
                                format!(
                                    "{}: a stored {} cell does not parse: {}",
                                    what(),
                                    ty.pg_name(),
                                    err.message
                                ),
                            )
                        })?
                    }
                    _ => Arc::new(strings),
                }
            }
        })
    }
}
