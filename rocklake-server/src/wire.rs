//! Values on the wire: PostgreSQL's text and binary forms of result values, and binary values
//! a client sends (in `COPY ... FROM STDIN`, see [`crate::copy_from`]) read back into cells.
//!
//! The binary forms follow PostgreSQL's `*send`/`*recv` functions: integers and floats
//! big-endian, timestamps as µs and dates as days since 2000-01-01, `uuid` as 16 bytes,
//! `numeric` as base-10000 digits with weight, sign and display scale, `tid` as block and
//! offset, `interval` as µs, days and months, `timetz` as µs and the zone's offset west of
//! UTC, arrays with their dimensions and element oid.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use rocklake_core::values::Value;
use rocklake_sql::datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, Float32Array, Float64Array,
    PrimitiveArray, StringArray,
};
use rocklake_sql::datafusion::arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Int8Type, IntervalMonthDayNanoType, IntervalUnit, Time64MicrosecondType, TimeUnit,
    TimestampMicrosecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use rocklake_sql::datafusion::sql::sqlparser::ast::Expr;
use rocklake_sql::pg_types::PgType;
use rocklake_sql::temporal::TimeTz;
use rocklake_sql::types::{interval_of, pg_text, str_value, Elem, SqlType};
use rocklake_sql::SqlError;

/// µs from 1970-01-01 to 2000-01-01, PostgreSQL's epoch.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
/// Days from 1970-01-01 to 2000-01-01.
const PG_EPOCH_DAYS: i64 = 10_957;

/// The binary COPY header: signature, flags, header-extension length.
pub const COPY_SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";

pub(crate) fn protocol(msg: impl Into<String>) -> SqlError {
    SqlError::new("22P03", msg)
}

/// PostgreSQL's text form of row `row` of `array` (`None`: NULL).
pub fn text_value(array: &dyn Array, row: usize) -> Option<String> {
    if is_null(array, row) {
        return None;
    }
    pg_text(array, row)
}

/// Append row `row` of `array` in PostgreSQL's text form (length word, then bytes; -1 for
/// NULL), as a DataRow carries it.
pub fn text_field(out: &mut BytesMut, array: &dyn Array, row: usize) {
    if is_null(array, row) {
        out.put_i32(-1);
    } else {
        let v = text_of(array, row);
        out.put_i32(v.len() as i32);
        out.extend_from_slice(v.as_bytes());
    }
}

/// A non-NULL value's text form: strings lent straight from the array, without a copy.
fn text_of(array: &dyn Array, row: usize) -> Cow<'_, str> {
    match str_value(array, row) {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(pg_text(array, row).unwrap_or_default()),
    }
}

/// Whether a value is NULL (a `NullArray`, the type of a bare `NULL`, has no null buffer).
fn is_null(array: &dyn Array, row: usize) -> bool {
    array.data_type() == &DataType::Null || array.is_null(row)
}

/// Append row `row` of `array` in the binary form of `ty` (length word, then bytes; -1 for
/// NULL). A value that has no binary form as `ty` is an error naming both.
pub fn binary_value(
    out: &mut BytesMut,
    array: &dyn Array,
    row: usize,
    ty: PgType,
) -> Result<(), SqlError> {
    if is_null(array, row) {
        out.put_i32(-1);
        return Ok(());
    }
    // The length word first, filled in once the value is written (no buffer of its own).
    let at = out.len();
    out.put_i32(0);
    encode(out, array, row, ty)?;
    let len = (out.len() - at - 4) as i32;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// One column of a batch, ready to write its values in PostgreSQL's binary form. The common
/// pairs of Arrow and PostgreSQL types are told apart once per batch rather than once per value
/// (a whole-table COPY writes hundreds of thousands of values); every other pair goes through
/// [`binary_value`], which gives the same bytes.
pub enum BinaryColumn<'a> {
    /// `int8` from Int64.
    Int8(&'a PrimitiveArray<Int64Type>),
    /// `int4` from Int32.
    Int4(&'a PrimitiveArray<Int32Type>),
    /// `bool` from Boolean.
    Bool(&'a BooleanArray),
    /// `float8` from Float64.
    Float8(&'a Float64Array),
    /// A text type from Utf8.
    Text(&'a StringArray),
    /// `timestamp`/`timestamptz` from microsecond timestamps.
    Timestamp(&'a PrimitiveArray<TimestampMicrosecondType>),
    /// Anything else, value by value.
    Other(&'a dyn Array, PgType),
}

impl<'a> BinaryColumn<'a> {
    /// The writer of `array`'s values as `ty`.
    pub fn new(array: &'a dyn Array, ty: PgType) -> BinaryColumn<'a> {
        match (ty.name, array.data_type()) {
            ("int8", DataType::Int64) => BinaryColumn::Int8(array.as_primitive()),
            ("int4", DataType::Int32) => BinaryColumn::Int4(array.as_primitive()),
            ("bool", DataType::Boolean) => BinaryColumn::Bool(array.as_boolean()),
            ("float8", DataType::Float64) => BinaryColumn::Float8(array.as_primitive()),
            ("text" | "varchar" | "name" | "bpchar" | "char" | "json", DataType::Utf8) => {
                BinaryColumn::Text(array.as_string())
            }
            ("timestamp" | "timestamptz", DataType::Timestamp(TimeUnit::Microsecond, _)) => {
                BinaryColumn::Timestamp(array.as_primitive())
            }
            _ => BinaryColumn::Other(array, ty),
        }
    }

    /// Append row `row`'s value (length word, then bytes; -1 for NULL), as [`binary_value`].
    #[inline]
    pub fn write(&self, out: &mut BytesMut, row: usize) -> Result<(), SqlError> {
        let null = match self {
            BinaryColumn::Int8(a) => a.is_null(row),
            BinaryColumn::Int4(a) => a.is_null(row),
            BinaryColumn::Bool(a) => a.is_null(row),
            BinaryColumn::Float8(a) => a.is_null(row),
            BinaryColumn::Text(a) => a.is_null(row),
            BinaryColumn::Timestamp(a) => a.is_null(row),
            BinaryColumn::Other(a, ty) => return binary_value(out, *a, row, *ty),
        };
        if null {
            out.put_i32(-1);
            return Ok(());
        }
        match self {
            BinaryColumn::Int8(a) => {
                out.put_i32(8);
                out.put_i64(a.value(row));
            }
            BinaryColumn::Int4(a) => {
                out.put_i32(4);
                out.put_i32(a.value(row));
            }
            BinaryColumn::Bool(a) => {
                out.put_i32(1);
                out.put_u8(u8::from(a.value(row)));
            }
            BinaryColumn::Float8(a) => {
                out.put_i32(8);
                out.put_f64(a.value(row));
            }
            BinaryColumn::Text(a) => {
                let v = a.value(row).as_bytes();
                out.put_i32(v.len() as i32);
                out.extend_from_slice(v);
            }
            BinaryColumn::Timestamp(a) => {
                out.put_i32(8);
                out.put_i64(timestamp_send(a.value(row)));
            }
            BinaryColumn::Other(..) => {}
        }
        Ok(())
    }
}

/// A microsecond timestamp as PostgreSQL sends it: from its epoch; its infinities are
/// `i64::MAX` / `i64::MIN` on both sides of the shift (as the binary input keeps them).
fn timestamp_send(v: i64) -> i64 {
    if v == i64::MAX || v == i64::MIN {
        v
    } else {
        v - PG_EPOCH_MICROS
    }
}

fn int_of(array: &dyn Array, row: usize) -> Option<i64> {
    Some(match array.data_type() {
        DataType::Int8 => array.as_primitive::<Int8Type>().value(row).into(),
        DataType::Int16 => array.as_primitive::<Int16Type>().value(row).into(),
        DataType::Int32 => array.as_primitive::<Int32Type>().value(row).into(),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(row),
        DataType::UInt8 => array.as_primitive::<UInt8Type>().value(row).into(),
        DataType::UInt16 => array.as_primitive::<UInt16Type>().value(row).into(),
        DataType::UInt32 => array.as_primitive::<UInt32Type>().value(row).into(),
        DataType::UInt64 => i64::try_from(array.as_primitive::<UInt64Type>().value(row)).ok()?,
        _ => return None,
    })
}

fn encode(buf: &mut BytesMut, array: &dyn Array, row: usize, ty: PgType) -> Result<(), SqlError> {
    let cannot = || {
        SqlError::new(
            "0A000",
            format!(
                "a value of Arrow type {} has no binary form as PostgreSQL type {}",
                array.data_type(),
                ty.name
            ),
        )
    };
    match ty.name {
        "bool" => buf.put_u8(u8::from(array.as_boolean().value(row))),
        "int2" => buf.put_i16(
            int_of(array, row)
                .and_then(|v| i16::try_from(v).ok())
                .ok_or_else(cannot)?,
        ),
        "int4" => buf.put_i32(
            int_of(array, row)
                .and_then(|v| i32::try_from(v).ok())
                .ok_or_else(cannot)?,
        ),
        "oid" | "regclass" => buf.put_u32(
            int_of(array, row)
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(cannot)?,
        ),
        "int8" => buf.put_i64(int_of(array, row).ok_or_else(cannot)?),
        "float4" => match array.data_type() {
            DataType::Float32 => buf.put_f32(array.as_primitive::<Float32Type>().value(row)),
            _ => return Err(cannot()),
        },
        "float8" => match array.data_type() {
            DataType::Float64 => buf.put_f64(array.as_primitive::<Float64Type>().value(row)),
            DataType::Float32 => {
                buf.put_f64(f64::from(array.as_primitive::<Float32Type>().value(row)))
            }
            _ => return Err(cannot()),
        },
        "text" | "varchar" | "name" | "bpchar" | "char" | "json" => {
            buf.extend_from_slice(text_of(array, row).as_bytes())
        }
        "bytea" => match array.data_type() {
            DataType::Binary => buf.extend_from_slice(array.as_binary::<i32>().value(row)),
            _ => return Err(cannot()),
        },
        "uuid" => {
            let s = pg_text(array, row).unwrap_or_default();
            buf.extend_from_slice(&uuid_bytes(&s)?);
        }
        "tid" => {
            let s = pg_text(array, row).unwrap_or_default();
            let (block, offset) = parse_tid(&s)?;
            buf.put_u32(block);
            buf.put_u16(offset);
        }
        "date" => match array.data_type() {
            DataType::Date32 => {
                let v = array.as_primitive::<Date32Type>().value(row);
                // PostgreSQL's infinite dates are i32::MAX / i32::MIN on both sides of the
                // epoch shift, as the binary input keeps them.
                buf.put_i32(if v == i32::MAX || v == i32::MIN {
                    v
                } else {
                    (i64::from(v) - PG_EPOCH_DAYS) as i32
                })
            }
            _ => return Err(cannot()),
        },
        "time" => match array.data_type() {
            DataType::Time64(TimeUnit::Microsecond) => {
                buf.put_i64(array.as_primitive::<Time64MicrosecondType>().value(row))
            }
            _ => return Err(cannot()),
        },
        "timetz" => {
            let s = pg_text(array, row).unwrap_or_default();
            let t = TimeTz::parse(&s).map_err(|m| SqlError::new("22007", m))?;
            buf.extend_from_slice(&t.to_bytes());
        }
        "interval" => match array.data_type() {
            DataType::Interval(IntervalUnit::MonthDayNano) => {
                let v = interval_of(array.as_primitive::<IntervalMonthDayNanoType>().value(row));
                buf.extend_from_slice(&v.to_bytes());
            }
            _ => return Err(cannot()),
        },
        // Of any unit: a cast such as `'...'::timestamp` gives DataFusion's nanoseconds.
        "timestamp" | "timestamptz" => match rocklake_sql::types::timestamp_micros(array, row) {
            Some(micros) => buf.put_i64(timestamp_send(micros)),
            None => return Err(cannot()),
        },
        "numeric" => match array.data_type() {
            DataType::Decimal128(_, scale) => {
                let v = array.as_primitive::<Decimal128Type>().value(row);
                numeric_send(buf, v, *scale);
            }
            _ => {
                if let Some(v) = int_of(array, row) {
                    numeric_send(buf, i128::from(v), 0);
                } else {
                    return Err(cannot());
                }
            }
        },
        _ if ty.elem != 0 => {
            let elem = rocklake_sql::pg_types::PG_TYPES
                .iter()
                .copied()
                .find(|t| t.oid == ty.elem)
                .ok_or_else(cannot)?;
            let DataType::List(_) = array.data_type() else {
                return Err(cannot());
            };
            let items = array.as_list::<i32>().value(row);
            let has_null = (0..items.len()).any(|i| items.is_null(i));
            // PostgreSQL sends an empty array with no dimensions.
            buf.put_i32(i32::from(!items.is_empty()));
            buf.put_i32(i32::from(has_null));
            buf.put_u32(elem.oid);
            if !items.is_empty() {
                buf.put_i32(items.len() as i32);
                buf.put_i32(1);
            }
            for i in 0..items.len() {
                binary_value(buf, items.as_ref(), i, elem)?;
            }
        }
        _ => return Err(cannot()),
    }
    Ok(())
}

/// A uuid's 16 bytes from its text form (with or without dashes).
pub fn uuid_bytes(s: &str) -> Result<[u8; 16], SqlError> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    let bad = || protocol(format!("invalid input syntax for type uuid: \"{s}\""));
    if hex.len() != 32 {
        return Err(bad());
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

fn parse_tid(s: &str) -> Result<(u32, u16), SqlError> {
    let bad = || protocol(format!("invalid input syntax for type tid: \"{s}\""));
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .ok_or_else(bad)?;
    let (b, o) = inner.split_once(',').ok_or_else(bad)?;
    Ok((
        b.trim().parse().map_err(|_| bad())?,
        o.trim().parse().map_err(|_| bad())?,
    ))
}

/// PostgreSQL's binary `numeric` of `unscaled × 10^-scale`.
fn numeric_send(buf: &mut BytesMut, unscaled: i128, scale: i8) {
    let negative = unscaled < 0;
    let (digits_text, dscale) = if scale >= 0 {
        (unscaled.unsigned_abs().to_string(), scale as usize)
    } else {
        let mut t = unscaled.unsigned_abs().to_string();
        t.push_str(&"0".repeat((-scale) as usize));
        (t, 0)
    };
    // Split into integer and fraction digits.
    let padded = if digits_text.len() <= dscale {
        format!(
            "{}{}",
            "0".repeat(dscale + 1 - digits_text.len()),
            digits_text
        )
    } else {
        digits_text
    };
    let (int_part, frac_part) = padded.split_at(padded.len() - dscale);
    // Base-10000 groups: the integer part from the right, the fraction from the left.
    let lead = (4 - int_part.len() % 4) % 4;
    let int_padded = format!("{}{}", "0".repeat(lead), int_part);
    let mut groups: Vec<i16> = int_padded
        .as_bytes()
        .chunks(4)
        .map(|c| std::str::from_utf8(c).unwrap_or("0").parse().unwrap_or(0))
        .collect();
    let mut weight = groups.len() as i16 - 1;
    let trail = (4 - frac_part.len() % 4) % 4;
    let frac_padded = format!("{}{}", frac_part, "0".repeat(trail));
    groups.extend(frac_padded.as_bytes().chunks(4).map(|c| {
        std::str::from_utf8(c)
            .unwrap_or("0")
            .parse::<i16>()
            .unwrap_or(0)
    }));
    while groups.first() == Some(&0) {
        groups.remove(0);
        weight -= 1;
    }
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    buf.put_i16(groups.len() as i16);
    buf.put_i16(weight);
    buf.put_u16(if negative && !groups.is_empty() {
        0x4000
    } else {
        0
    });
    buf.put_u16(dscale as u16);
    for g in groups {
        buf.put_i16(g);
    }
}

/// The text form of a binary `numeric`.
fn numeric_recv(b: &[u8]) -> Result<String, SqlError> {
    let bad = || protocol("invalid binary numeric value");
    if b.len() < 8 {
        return Err(bad());
    }
    let rd = |i: usize| i16::from_be_bytes([b[i], b[i + 1]]);
    let ndigits = rd(0) as usize;
    let weight = rd(2) as i32;
    let sign = u16::from_be_bytes([b[4], b[5]]);
    let dscale = u16::from_be_bytes([b[6], b[7]]) as usize;
    if b.len() != 8 + 2 * ndigits {
        return Err(bad());
    }
    if sign == 0xC000 {
        return Ok("NaN".into());
    }
    let digits: Vec<i16> = (0..ndigits).map(|i| rd(8 + 2 * i)).collect();
    if digits.iter().any(|d| !(0..10_000).contains(d)) {
        return Err(bad());
    }
    let mut int_part = String::new();
    for w in (0..=weight.max(0)).rev() {
        let idx = weight - w;
        let d = if idx >= 0 && (idx as usize) < ndigits && w <= weight {
            digits[idx as usize]
        } else {
            0
        };
        if int_part.is_empty() {
            int_part = d.to_string();
        } else {
            int_part.push_str(&format!("{d:04}"));
        }
    }
    if weight < 0 {
        int_part = "0".into();
    }
    let mut frac = String::new();
    let mut idx = weight + 1;
    while frac.len() < dscale {
        let d = if idx >= 0 && (idx as usize) < ndigits {
            digits[idx as usize]
        } else {
            0
        };
        frac.push_str(&format!("{d:04}"));
        idx += 1;
    }
    frac.truncate(dscale);
    let mut s = String::new();
    if sign == 0x4000 {
        s.push('-');
    }
    s.push_str(&int_part);
    if dscale > 0 {
        s.push('.');
        s.push_str(&frac);
    }
    Ok(s)
}

/// A text-format COPY field: backslash, the delimiter, newline and carriage return escaped.
pub fn copy_text_escape(v: &str, delimiter: char) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            c if c == delimiter && c != '\t' => {
                s.push('\\');
                s.push(c);
            }
            '\\' => s.push_str("\\\\"),
            '\t' => s.push_str("\\t"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            c => s.push(c),
        }
    }
    s
}

/// The column type whose binary form is PostgreSQL type `oid`'s (numeric aside: its scale
/// is the value's own).
fn sql_type_of_oid(oid: u32) -> Option<SqlType> {
    Some(match oid {
        20 => SqlType::BigInt,
        23 => SqlType::Integer,
        21 => SqlType::SmallInt,
        16 => SqlType::Boolean,
        25 | 1043 | 19 | 1042 | 705 | 114 => SqlType::Text,
        2950 => SqlType::Uuid,
        1184 => SqlType::TimestampTz,
        1114 => SqlType::Timestamp,
        1082 => SqlType::Date,
        1083 => SqlType::Time,
        1266 => SqlType::TimeTz,
        1186 => SqlType::Interval,
        17 => SqlType::Bytea,
        701 => SqlType::Double,
        700 => SqlType::Real,
        _ => {
            let t = rocklake_sql::pg_types::PG_TYPES
                .iter()
                .find(|t| t.oid == oid)?;
            let elem = sql_type_of_oid(rocklake_sql::pg_types::pg_array_elem(t.name)?.oid)?;
            SqlType::Array(Elem::of(elem)?)
        }
    })
}

/// A Bind parameter of PostgreSQL type `oid` (0: unknown), in text or binary form, as the
/// SQL expression that takes its `$n`'s place: `NULL`, a number, a boolean, or its text form
/// (cast where DataFusion would otherwise read the text as a string: floats, dates,
/// intervals). A value that is not of its type is refused with PostgreSQL's SQLSTATE.
pub fn param_expr(value: Option<&[u8]>, binary: bool, oid: u32) -> Result<Expr, SqlError> {
    use rocklake_sql::datafusion::sql::sqlparser::ast::{CastKind, DataType as D, Value as V};
    let Some(b) = value else {
        return Ok(Expr::Value(V::Null.into()));
    };
    let name = rocklake_sql::pg_types::PG_TYPES
        .iter()
        .find(|t| t.oid == oid)
        .map_or("unknown", |t| t.name);
    let text = if !binary {
        String::from_utf8(b.to_vec())
            .map_err(|_| SqlError::new("22021", "invalid byte sequence for encoding \"UTF8\""))?
    } else if oid == 1700 {
        numeric_recv(b)?
    } else {
        let ty = sql_type_of_oid(oid).ok_or_else(|| {
            SqlError::unsupported(format!(
                "a binary parameter of type {name} (oid {oid}) is not supported; send it as text"
            ))
        })?;
        let cell = recv(b, ty)?;
        let a = ty.to_array(&[&cell], &|| "parameter".into())?;
        text_value(a.as_ref(), 0).unwrap_or_default()
    };
    let invalid = |t: &str| {
        SqlError::new(
            "22P02",
            format!("invalid input syntax for type {name}: \"{t}\""),
        )
    };
    let lit = |s: String| Expr::Value(V::SingleQuotedString(s).into());
    let cast = |s: String, data_type: D| Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(lit(s)),
        data_type,
        array: false,
        format: None,
    };
    Ok(match oid {
        20 | 21 | 23 | 26 | 1700 => {
            let t = text.trim();
            let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
            let plain = !digits.is_empty()
                && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
                && digits.matches('.').count() <= usize::from(oid == 1700);
            if !plain {
                return Err(invalid(&text));
            }
            Expr::Value(V::Number(t.to_string(), false).into())
        }
        700 | 701 => {
            if text.trim().parse::<f64>().is_err() {
                return Err(invalid(&text));
            }
            cast(
                text,
                if oid == 700 {
                    D::Real
                } else {
                    D::DoublePrecision
                },
            )
        }
        16 => match text.trim().to_ascii_lowercase().as_str() {
            "t" | "true" | "yes" | "on" | "1" | "y" => Expr::Value(V::Boolean(true).into()),
            "f" | "false" | "no" | "off" | "0" | "n" => Expr::Value(V::Boolean(false).into()),
            _ => return Err(invalid(&text)),
        },
        1186 => {
            let iv = rocklake_sql::temporal::Interval::parse(&text)
                .map_err(|m| SqlError::new("22007", m))?;
            cast(
                iv.to_datafusion_text(),
                D::Interval {
                    fields: None,
                    precision: None,
                },
            )
        }
        1082 => cast(text, D::Date),
        // An array in its text form, read as the array it spells (where the statement's
        // casts are rewritten).
        _ if matches!(sql_type_of_oid(oid), Some(SqlType::Array(_))) => cast(
            text,
            D::Custom(
                rocklake_sql::datafusion::sql::sqlparser::ast::ObjectName::from(vec![
                    rocklake_sql::datafusion::sql::sqlparser::ast::Ident::new(name),
                ]),
                vec![],
            ),
        ),
        _ => lit(text),
    })
}

/// One binary field of column type `ty` as a stored cell.
pub(crate) fn recv(b: &[u8], ty: SqlType) -> Result<Value, SqlError> {
    let need = |n: usize| -> Result<(), SqlError> {
        if b.len() == n {
            Ok(())
        } else {
            Err(protocol(format!(
                "a binary {} value is {n} bytes, this one is {}",
                ty.pg_name(),
                b.len()
            )))
        }
    };
    let be64 = || i64::from_be_bytes(b.try_into().unwrap_or_default());
    Ok(match ty {
        SqlType::BigInt => {
            need(8)?;
            Value::Int(be64())
        }
        SqlType::Integer => {
            need(4)?;
            Value::Int(i32::from_be_bytes(b.try_into().unwrap_or_default()).into())
        }
        SqlType::SmallInt => {
            need(2)?;
            Value::Int(i16::from_be_bytes(b.try_into().unwrap_or_default()).into())
        }
        SqlType::Boolean => {
            need(1)?;
            Value::Bool(b[0] != 0)
        }
        SqlType::Text => {
            Value::Text(String::from_utf8(b.to_vec()).map_err(|_| {
                SqlError::new("22021", "invalid byte sequence for encoding \"UTF8\"")
            })?)
        }
        SqlType::Uuid => {
            need(16)?;
            let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
            Value::Text(rocklake_sql::types::canonical_uuid(&h)?)
        }
        SqlType::TimestampTz | SqlType::Timestamp => {
            need(8)?;
            let v = be64();
            // PostgreSQL's infinities are i64::MAX / i64::MIN; they stay as they are.
            Value::Int(if v == i64::MAX || v == i64::MIN {
                v
            } else {
                v.checked_add(PG_EPOCH_MICROS)
                    .filter(|v| *v != i64::MAX)
                    .ok_or_else(|| SqlError::new("22008", "timestamp out of range"))?
            })
        }
        SqlType::Date => {
            need(4)?;
            let v = i32::from_be_bytes(b.try_into().unwrap_or_default());
            // PostgreSQL's infinite dates (i32::MAX / i32::MIN) stay as they are; a finite
            // date the shift would carry past them is out of range.
            Value::Int(if v == i32::MAX || v == i32::MIN {
                i64::from(v)
            } else {
                let days = i64::from(v) + PG_EPOCH_DAYS;
                if days >= i64::from(i32::MAX) {
                    return Err(SqlError::new("22008", "date out of range"));
                }
                days
            })
        }
        SqlType::Time => {
            need(8)?;
            Value::Int(be64())
        }
        SqlType::TimeTz => {
            need(12)?;
            let t = TimeTz::from_bytes(b).unwrap_or(TimeTz {
                micros: 0,
                offset_secs: 0,
            });
            Value::Text(t.to_pg_text())
        }
        SqlType::Interval => {
            need(16)?;
            Value::Bytes(b.to_vec())
        }
        SqlType::Bytea => Value::Bytes(b.to_vec()),
        SqlType::Double => {
            need(8)?;
            let a: ArrayRef = Arc::new(Float64Array::from(vec![f64::from_bits(be64() as u64)]));
            ty.cell(a.as_ref(), 0)?
        }
        SqlType::Real => {
            need(4)?;
            let a: ArrayRef = Arc::new(Float32Array::from(vec![f32::from_be_bytes(
                b.try_into().unwrap_or_default(),
            )]));
            ty.cell(a.as_ref(), 0)?
        }
        SqlType::Array(elem) => array_recv(b, elem)?,
        SqlType::Numeric(..) => {
            let text = numeric_recv(b)?;
            let a: ArrayRef = Arc::new(StringArray::from(vec![text]));
            let a = ty.coerce(&a, "numeric")?;
            let _ = a.as_any().downcast_ref::<Decimal128Array>();
            ty.cell(a.as_ref(), 0)?
        }
    })
}

/// PostgreSQL's binary array form (dimensions, a NULL flag, the element type's oid, each
/// dimension's length and lower bound, then length-prefixed elements) as an array cell. Only
/// one-dimensional arrays of the column's element type are taken, as PostgreSQL's
/// `array_recv` takes only its column's element type.
fn array_recv(b: &[u8], elem: Elem) -> Result<Value, SqlError> {
    let scalar = elem.scalar();
    let mut p = 0usize;
    let word = |p: &mut usize, what: &str| -> Result<i32, SqlError> {
        let w = b
            .get(*p..*p + 4)
            .ok_or_else(|| protocol(format!("a binary array ends inside {what}")))?;
        *p += 4;
        Ok(i32::from_be_bytes(w.try_into().unwrap_or_default()))
    };
    let ndim = word(&mut p, "its header")?;
    let _flags = word(&mut p, "its header")?;
    let oid = word(&mut p, "its header")? as u32;
    let want = rocklake_sql::pg_types::pg_type(rocklake_sql::pg_types::sql_type_name(scalar))
        .map_or(0, |t| t.oid);
    let same = oid == want || (scalar == SqlType::Text && matches!(oid, 25 | 1043));
    if !same {
        return Err(SqlError::new(
            "42804",
            format!(
                "binary data has array element type {oid} instead of expected {want} ({})",
                scalar.pg_name()
            ),
        ));
    }
    let len = match ndim {
        0 => 0,
        1 => {
            let n = word(&mut p, "its dimensions")?;
            let _lower = word(&mut p, "its dimensions")?;
            usize::try_from(n).map_err(|_| protocol(format!("a binary array of length {n}")))?
        }
        n if n > 1 => {
            return Err(SqlError::unsupported(format!(
                "a binary array of {n} dimensions: only one-dimensional arrays are supported"
            )))
        }
        n => return Err(protocol(format!("a binary array of {n} dimensions"))),
    };
    let mut cells = Vec::with_capacity(len.min(4096));
    for _ in 0..len {
        let n = word(&mut p, "an element's length")?;
        if n == -1 {
            cells.push(Value::Null);
            continue;
        }
        let n = usize::try_from(n)
            .map_err(|_| protocol(format!("a binary array element of length {n}")))?;
        let bytes = b
            .get(p..p + n)
            .ok_or_else(|| protocol("a binary array ends inside an element"))?;
        p += n;
        cells.push(recv(bytes, scalar)?);
    }
    if p != b.len() {
        return Err(protocol(format!(
            "{} bytes after the last element of a binary array",
            b.len() - p
        )));
    }
    let refs: Vec<&Value> = cells.iter().collect();
    let values = scalar.to_array(&refs, &|| "array element".into())?;
    let items: Vec<Option<String>> = (0..values.len())
        .map(|i| pg_text(values.as_ref(), i))
        .collect();
    Ok(Value::Text(rocklake_sql::types::array_literal(&items)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric_roundtrip(v: i128, scale: i8) -> String {
        let mut b = BytesMut::new();
        numeric_send(&mut b, v, scale);
        numeric_recv(&b).unwrap()
    }

    #[test]
    fn numeric_binary_matches_postgres_layout() {
        // 12345.678 as PostgreSQL sends it: digits 1, 2345, 6780; weight 1; dscale 3.
        let mut b = BytesMut::new();
        numeric_send(&mut b, 12_345_678, 3);
        assert_eq!(
            &b[..],
            &[0, 3, 0, 1, 0, 0, 0, 3, 0, 1, 0x09, 0x29, 0x1a, 0x7c]
        );
        assert_eq!(numeric_roundtrip(12_345_678, 3), "12345.678");
        assert_eq!(numeric_roundtrip(-5, 2), "-0.05");
        assert_eq!(numeric_roundtrip(0, 2), "0.00");
        assert_eq!(numeric_roundtrip(100_000_000, 0), "100000000");
        assert_eq!(numeric_roundtrip(1, 10), "0.0000000001");
    }
}
