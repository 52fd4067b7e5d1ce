//! PostgreSQL's text form of a value held in an Arrow array: what a client reading text
//! results sees, and what the tests hold to PostgreSQL's answers.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Date32Type, IntervalUnit, TimeUnit};

use super::{array_literal, float_text, interval_of};

/// PostgreSQL's text form of one value of an Arrow array (`None` for NULL): integers and
/// decimals as written, booleans `t`/`f`, floats in PostgreSQL's shortest form (`1e+20`,
/// `NaN`, `Infinity`), `bytea` as `\x` and hex, timestamps `2026-11-29 23:21:17.336452+00`
/// (the session's time zone is UTC), dates and times in ISO form. What a client reading text
/// results sees, so that results can be held to PostgreSQL's.
pub fn pg_text(array: &dyn Array, row: usize) -> Option<String> {
    use datafusion::arrow::datatypes::{Float32Type, Float64Type, IntervalMonthDayNanoType};
    if array.is_null(row) || array.data_type() == &DataType::Null {
        return None;
    }
    let ts = |micros: i64, tz: bool| -> String {
        // PostgreSQL's infinities (kept as the extreme values, as its binary form has them).
        match micros {
            i64::MAX => return "infinity".into(),
            i64::MIN => return "-infinity".into(),
            _ => {}
        }
        let secs = micros.div_euclid(1_000_000);
        let frac = micros.rem_euclid(1_000_000);
        let dt = chrono::DateTime::from_timestamp(secs, 0)
            .map(|d| d.naive_utc())
            .unwrap_or_default();
        let mut s = dt.format("%Y-%m-%d %H:%M:%S").to_string();
        if frac != 0 {
            let f = format!("{frac:06}");
            s.push('.');
            s.push_str(f.trim_end_matches('0'));
        }
        if tz {
            s.push_str("+00");
        }
        s
    };
    if let Some(s) = str_value(array, row) {
        return Some(s.to_string());
    }
    if let Some(v) = int_text(array, row) {
        return Some(v);
    }
    Some(match array.data_type() {
        DataType::Boolean => if array.as_boolean().value(row) {
            "t"
        } else {
            "f"
        }
        .to_string(),
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            interval_of(array.as_primitive::<IntervalMonthDayNanoType>().value(row)).to_pg_text()
        }
        DataType::List(_) => {
            let items = array.as_list::<i32>().value(row);
            let parts: Vec<Option<String>> = (0..items.len())
                .map(|i| pg_text(items.as_ref(), i))
                .collect();
            array_literal(&parts)
        }
        DataType::Float64 => pg_float(array.as_primitive::<Float64Type>().value(row)),
        DataType::Float32 => pg_real(array.as_primitive::<Float32Type>().value(row)),
        DataType::Binary => {
            let b = array.as_binary::<i32>().value(row);
            let mut s = String::with_capacity(2 + 2 * b.len());
            s.push_str("\\x");
            for x in b {
                s.push_str(&format!("{x:02x}"));
            }
            s
        }
        // PostgreSQL's infinite dates, kept as the extreme day numbers (as its binary form).
        DataType::Date32 if is_infinite_date(array, row) => {
            if array.as_primitive::<Date32Type>().value(row) == i32::MAX {
                "infinity".to_string()
            } else {
                "-infinity".to_string()
            }
        }
        DataType::Timestamp(_, tz) => {
            let micros = timestamp_micros(array, row)?;
            ts(micros, tz.is_some())
        }
        _ => {
            let opts = datafusion::arrow::util::display::FormatOptions::default();
            match datafusion::arrow::util::display::ArrayFormatter::try_new(array, &opts) {
                Ok(f) => f.value(row).to_string(),
                Err(e) => format!("<{e}>"),
            }
        }
    })
}

/// The value at `row` of a timestamp array of any unit in microseconds, PostgreSQL's unit
/// (`None` for another type). The infinities (each unit's extreme values) stay the extremes.
pub fn timestamp_micros(array: &dyn Array, row: usize) -> Option<i64> {
    use datafusion::arrow::datatypes::{
        TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
        TimestampSecondType,
    };
    let DataType::Timestamp(unit, _) = array.data_type() else {
        return None;
    };
    let (raw, micros_per_tick, ticks_per_micro) = match unit {
        TimeUnit::Second => (
            array.as_primitive::<TimestampSecondType>().value(row),
            1_000_000,
            1,
        ),
        TimeUnit::Millisecond => (
            array.as_primitive::<TimestampMillisecondType>().value(row),
            1_000,
            1,
        ),
        TimeUnit::Microsecond => (
            array.as_primitive::<TimestampMicrosecondType>().value(row),
            1,
            1,
        ),
        TimeUnit::Nanosecond => (
            array.as_primitive::<TimestampNanosecondType>().value(row),
            1,
            1_000,
        ),
    };
    Some(match raw {
        i64::MAX | i64::MIN => raw,
        _ => raw
            .saturating_mul(micros_per_tick)
            .div_euclid(ticks_per_micro),
    })
}

/// Whether a date array's value is one of PostgreSQL's infinities (`i32::MAX`, `i32::MIN`).
fn is_infinite_date(array: &dyn Array, row: usize) -> bool {
    matches!(
        array.as_primitive::<Date32Type>().value(row),
        i32::MAX | i32::MIN
    )
}

/// The text of a string array's value as stored (`None` for other types; NULL is not checked
/// here): what [`pg_text`] answers for it, without a copy.
pub fn str_value(array: &dyn Array, row: usize) -> Option<&str> {
    Some(match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().value(row),
        DataType::LargeUtf8 => array.as_string::<i64>().value(row),
        DataType::Utf8View => array.as_string_view().value(row),
        _ => return None,
    })
}

/// An integer array's value in decimal (`None` for other types), as Arrow's formatter would
/// write it, without building a formatter for each value.
fn int_text(array: &dyn Array, row: usize) -> Option<String> {
    use datafusion::arrow::datatypes::{
        Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
    };
    Some(match array.data_type() {
        DataType::Int8 => array.as_primitive::<Int8Type>().value(row).to_string(),
        DataType::Int16 => array.as_primitive::<Int16Type>().value(row).to_string(),
        DataType::Int32 => array.as_primitive::<Int32Type>().value(row).to_string(),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(row).to_string(),
        DataType::UInt8 => array.as_primitive::<UInt8Type>().value(row).to_string(),
        DataType::UInt16 => array.as_primitive::<UInt16Type>().value(row).to_string(),
        DataType::UInt32 => array.as_primitive::<UInt32Type>().value(row).to_string(),
        DataType::UInt64 => array.as_primitive::<UInt64Type>().value(row).to_string(),
        _ => return None,
    })
}

/// A float as PostgreSQL 15 prints it: the shortest text that reads back exactly, in
/// exponent form below 1e-4 and from 1e15 (`1e+20`, `1.5e-07`).
fn pg_float(v: f64) -> String {
    pg_float_from(v, format!("{v:e}"), v.to_string())
}

/// As [`pg_float`], for a `real`: its own shortest digits, not those of the wider double.
fn pg_real(v: f32) -> String {
    pg_float_from(f64::from(v), format!("{v:e}"), v.to_string())
}

fn pg_float_from(v: f64, e: String, plain: String) -> String {
    if v.is_nan() || v.is_infinite() || v == 0.0 {
        return float_text(v);
    }
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..15).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        plain
    }
}
