//! The column types a table may declare, how each is held in Arrow (for DataFusion) and in the
//! core's row cells (for the store).
//!
//! | SQL | Arrow | cell |
//! |---|---|---|
//! | bigint, integer, smallint | Int64, Int32, Int16 | integer |
//! | boolean | Boolean | boolean |
//! | varchar, text, char | Utf8 | text |
//! | uuid | Utf8 (canonical lower-case text) | text |
//! | timestamp with time zone, timestamp | Timestamp(µs, UTC), Timestamp(µs) | integer (µs since 1970) |
//! | date | Date32 | integer (days since 1970) |
//! | time | Time64(µs) | integer (µs since midnight) |
//! | time with time zone | Utf8 (PostgreSQL's text form, `12:34:56+02`) | text |
//! | interval | Interval(MonthDayNano) | bytes (PostgreSQL's 16-byte binary form) |
//! | bytea | Binary | bytes |
//! | double precision, real | Float64, Float32 | text (shortest exact decimal form) |
//! | numeric(p, s) | Decimal128(p, s) | text (the decimal) |
//! | `T[]` (T one of [`Elem`]) | List(T) | text (PostgreSQL's array text form, `{1,NULL,3}`) |
//!
//! Floats and decimals are kept as text so that the core's four cell kinds hold every value
//! exactly; reading them back parses the same text.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BinaryArray, BinaryBuilder, BooleanArray, Date32Array, Float32Array,
    Float64Array, Int16Array, Int32Array, Int64Array, IntervalMonthDayNanoArray,
    IntervalMonthDayNanoBuilder, StringArray, Time64MicrosecondArray, TimestampMicrosecondArray,
};
use datafusion::arrow::array::{ArrowPrimitiveType, AsArray, ListArray, PrimitiveArray};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Field, IntervalMonthDayNano, IntervalUnit, TimeUnit,
    TimestampMicrosecondType,
};
use rocklake_core::values::Value;

use crate::error::{state, Result, SqlError};
use crate::temporal::{Interval, TimeTz};

mod build;
mod output;
pub use build::ColumnBuilder;
pub use output::{pg_text, str_value, timestamp_micros};

/// An Arrow interval as PostgreSQL's three fields (nanoseconds truncated to microseconds).
pub fn interval_of(v: IntervalMonthDayNano) -> Interval {
    Interval {
        months: v.months,
        days: v.days,
        micros: v.nanoseconds / 1_000,
    }
}

/// A column type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqlType {
    /// `bigint`
    BigInt,
    /// `integer`
    Integer,
    /// `smallint`
    SmallInt,
    /// `boolean`
    Boolean,
    /// `character varying` / `text`
    Text,
    /// `uuid`
    Uuid,
    /// `timestamp with time zone`
    TimestampTz,
    /// `timestamp without time zone`
    Timestamp,
    /// `date`
    Date,
    /// `time without time zone`
    Time,
    /// `time with time zone`
    TimeTz,
    /// `interval`
    Interval,
    /// `bytea`
    Bytea,
    /// `double precision`
    Double,
    /// `real`
    Real,
    /// `numeric(precision, scale)`
    Numeric(u8, i8),
    /// A one-dimensional array, `T[]`.
    Array(Elem),
}

/// The element types an array column may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    /// `bigint[]`
    BigInt,
    /// `integer[]`
    Integer,
    /// `smallint[]`
    SmallInt,
    /// `boolean[]`
    Boolean,
    /// `varchar[]` / `text[]`
    Text,
    /// `uuid[]`
    Uuid,
    /// `date[]`
    Date,
    /// `timestamp[]`
    Timestamp,
    /// `timestamp with time zone[]`
    TimestampTz,
    /// `time[]`
    Time,
    /// `time with time zone[]`
    TimeTz,
    /// `interval[]`
    Interval,
    /// `bytea[]`
    Bytea,
    /// `double precision[]`
    Double,
    /// `real[]`
    Real,
    /// `numeric(p, s)[]`
    Numeric(u8, i8),
}

impl Elem {
    /// The scalar type of one element.
    pub fn scalar(self) -> SqlType {
        match self {
            Elem::BigInt => SqlType::BigInt,
            Elem::Integer => SqlType::Integer,
            Elem::SmallInt => SqlType::SmallInt,
            Elem::Boolean => SqlType::Boolean,
            Elem::Text => SqlType::Text,
            Elem::Uuid => SqlType::Uuid,
            Elem::Date => SqlType::Date,
            Elem::Timestamp => SqlType::Timestamp,
            Elem::TimestampTz => SqlType::TimestampTz,
            Elem::Time => SqlType::Time,
            Elem::TimeTz => SqlType::TimeTz,
            Elem::Interval => SqlType::Interval,
            Elem::Bytea => SqlType::Bytea,
            Elem::Double => SqlType::Double,
            Elem::Real => SqlType::Real,
            Elem::Numeric(p, s) => SqlType::Numeric(p, s),
        }
    }

    /// The element type for scalar type `t`, if arrays of it are supported.
    pub fn of(t: SqlType) -> Option<Elem> {
        Some(match t {
            SqlType::BigInt => Elem::BigInt,
            SqlType::Integer => Elem::Integer,
            SqlType::SmallInt => Elem::SmallInt,
            SqlType::Boolean => Elem::Boolean,
            SqlType::Text => Elem::Text,
            SqlType::Uuid => Elem::Uuid,
            SqlType::Date => Elem::Date,
            SqlType::Timestamp => Elem::Timestamp,
            SqlType::TimestampTz => Elem::TimestampTz,
            SqlType::Time => Elem::Time,
            SqlType::TimeTz => Elem::TimeTz,
            SqlType::Interval => Elem::Interval,
            SqlType::Bytea => Elem::Bytea,
            SqlType::Double => Elem::Double,
            SqlType::Real => Elem::Real,
            SqlType::Numeric(p, s) => Elem::Numeric(p, s),
            SqlType::Array(_) => return None,
        })
    }
}

/// What a column's values may be converted from on the way in and out of the store.
impl SqlType {
    /// Parse a declared type as PostgreSQL spells it (`BIGINT`, `VARCHAR`, `DECIMAL(18, 3)`,
    /// `TIMESTAMP WITH TIME ZONE`, `DOUBLE PRECISION`, ...).
    pub fn parse(declared: &str) -> Result<SqlType> {
        let t = declared.trim().to_ascii_lowercase();
        let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
        // `integer[]`, `integer[3]`, `integer[][]`, `integer array`, `_int4`: PostgreSQL
        // treats every spelling as the same one array type.
        let inner = if let Some(open) = t.find('[').filter(|_| t.ends_with(']')) {
            Some(t[..open].trim().to_string())
        } else if let Some(base) = t.strip_suffix(" array") {
            Some(base.trim().to_string())
        } else {
            t.strip_prefix('_').map(str::to_string)
        };
        if let Some(inner) = inner {
            let scalar = SqlType::parse(&inner)?;
            return Elem::of(scalar).map(SqlType::Array).ok_or_else(|| {
                SqlError::unsupported(format!(
                    "type {declared:?}: arrays of arrays are not supported by RockLake's SQL \
                     layer (an array column is one-dimensional: {}[])",
                    scalar.pg_name().trim_end_matches("[]")
                ))
            });
        }
        let base = t.split('(').next().unwrap_or("").trim().to_string();
        let args: Vec<i64> = t
            .find('(')
            .and_then(|open| t[open + 1..].split(')').next())
            .map(|inner| {
                inner
                    .split(',')
                    .filter_map(|a| a.trim().parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let after = t.split(')').nth(1).unwrap_or("").trim().to_string();
        Ok(match base.as_str() {
            "bigint" | "int8" | "int64" => SqlType::BigInt,
            "integer" | "int" | "int4" | "int32" => SqlType::Integer,
            "smallint" | "int2" | "int16" => SqlType::SmallInt,
            "boolean" | "bool" => SqlType::Boolean,
            "varchar" | "character varying" | "text" | "string" | "char" | "character"
            | "bpchar" => SqlType::Text,
            "uuid" => SqlType::Uuid,
            "timestamptz" | "timestamp with time zone" => SqlType::TimestampTz,
            "timestamp" | "timestamp without time zone" => {
                if after.contains("with time zone") && !after.contains("without") {
                    SqlType::TimestampTz
                } else {
                    SqlType::Timestamp
                }
            }
            "date" => SqlType::Date,
            "time" | "time without time zone" => SqlType::Time,
            "timetz" | "time with time zone" => SqlType::TimeTz,
            "interval" => SqlType::Interval,
            "bytea" | "blob" => SqlType::Bytea,
            "double precision" | "double" | "float8" | "float" => SqlType::Double,
            "real" | "float4" => SqlType::Real,
            "numeric" | "decimal" => {
                let p = args.first().copied().unwrap_or(38);
                let s = args
                    .get(1)
                    .copied()
                    .unwrap_or(if args.is_empty() { 10 } else { 0 });
                if !(1..=38).contains(&p) || s < 0 || s > p {
                    return Err(SqlError::new(
                        state::OUT_OF_RANGE,
                        format!("NUMERIC precision {p} and scale {s} are out of range (precision 1 to 38, scale 0 to precision)"),
                    ));
                }
                SqlType::Numeric(p as u8, s as i8)
            }
            _ => {
                return Err(SqlError::unsupported(format!(
                    "type {declared:?} is not supported by RockLake's SQL layer (supported: \
                     bigint, integer, smallint, boolean, varchar/text, uuid, timestamp [with time \
                     zone], date, time [with time zone], interval, bytea, double precision, real, \
                     numeric(p, s), and arrays of most of them)"
                )))
            }
        })
    }

    /// How PostgreSQL names the type (`information_schema.columns.data_type`).
    pub fn pg_name(&self) -> String {
        match self {
            SqlType::BigInt => "bigint".into(),
            SqlType::Integer => "integer".into(),
            SqlType::SmallInt => "smallint".into(),
            SqlType::Boolean => "boolean".into(),
            SqlType::Text => "character varying".into(),
            SqlType::Uuid => "uuid".into(),
            SqlType::TimestampTz => "timestamp with time zone".into(),
            SqlType::Timestamp => "timestamp without time zone".into(),
            SqlType::Date => "date".into(),
            SqlType::Time => "time without time zone".into(),
            SqlType::TimeTz => "time with time zone".into(),
            SqlType::Interval => "interval".into(),
            SqlType::Bytea => "bytea".into(),
            SqlType::Double => "double precision".into(),
            SqlType::Real => "real".into(),
            SqlType::Numeric(p, s) => format!("numeric({p},{s})"),
            SqlType::Array(e) => format!("{}[]", e.scalar().pg_name()),
        }
    }

    /// The Arrow type DataFusion sees.
    pub fn arrow(&self) -> DataType {
        match self {
            SqlType::BigInt => DataType::Int64,
            SqlType::Integer => DataType::Int32,
            SqlType::SmallInt => DataType::Int16,
            SqlType::Boolean => DataType::Boolean,
            SqlType::Text | SqlType::Uuid | SqlType::TimeTz => DataType::Utf8,
            SqlType::Interval => DataType::Interval(IntervalUnit::MonthDayNano),
            SqlType::TimestampTz => {
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
            }
            SqlType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            SqlType::Date => DataType::Date32,
            SqlType::Time => DataType::Time64(TimeUnit::Microsecond),
            SqlType::Bytea => DataType::Binary,
            SqlType::Double => DataType::Float64,
            SqlType::Real => DataType::Float32,
            SqlType::Numeric(p, s) => DataType::Decimal128(*p, *s),
            SqlType::Array(e) => {
                DataType::List(Arc::new(Field::new_list_field(e.scalar().arrow(), true)))
            }
        }
    }

    /// Build an Arrow array of this type from stored cells. A cell of the wrong kind is
    /// corruption, reported with `what` (the table and column).
    pub fn to_array(&self, cells: &[&Value], what: &dyn Fn() -> String) -> Result<ArrayRef> {
        let mut b = ColumnBuilder::new(*self, cells.len());
        for v in cells {
            b.push(v.as_cell_ref(), what)?;
        }
        b.finish(what)
    }

    /// The cell for row `i` of `array`, which must already be of [`SqlType::arrow`].
    pub fn cell(&self, array: &dyn Array, i: usize) -> Result<Value> {
        if array.is_null(i) {
            return Ok(Value::Null);
        }
        let wrong = || {
            SqlError::internal(format!(
                "a {} column was given an Arrow {} array",
                self.pg_name(),
                array.data_type()
            ))
        };
        macro_rules! get {
            ($t:ty) => {
                array
                    .as_any()
                    .downcast_ref::<$t>()
                    .ok_or_else(wrong)?
                    .value(i)
            };
        }
        Ok(match self {
            SqlType::BigInt => Value::Int(get!(Int64Array)),
            SqlType::Integer => Value::Int(get!(Int32Array).into()),
            SqlType::SmallInt => Value::Int(get!(Int16Array).into()),
            SqlType::Boolean => Value::Bool(get!(BooleanArray)),
            SqlType::Text => Value::Text(get!(StringArray).to_string()),
            SqlType::Uuid => {
                let s = get!(StringArray);
                Value::Text(canonical_uuid(s)?)
            }
            SqlType::TimestampTz | SqlType::Timestamp => {
                Value::Int(get!(TimestampMicrosecondArray))
            }
            SqlType::Date => Value::Int(get!(Date32Array).into()),
            SqlType::Time => Value::Int(get!(Time64MicrosecondArray)),
            SqlType::TimeTz => {
                let s = get!(StringArray);
                Value::Text(
                    TimeTz::parse(s)
                        .map_err(|m| SqlError::new(state::INVALID_DATETIME, m))?
                        .to_pg_text(),
                )
            }
            SqlType::Interval => Value::Bytes(
                interval_of(get!(IntervalMonthDayNanoArray))
                    .to_bytes()
                    .to_vec(),
            ),
            SqlType::Bytea => Value::Bytes(get!(BinaryArray).to_vec()),
            SqlType::Double => Value::Text(float_text(get!(Float64Array))),
            SqlType::Real => Value::Text(float_text(f64::from(get!(Float32Array)))),
            SqlType::Numeric(..) => {
                let text = cast(&array.slice(i, 1), &DataType::Utf8)
                    .map_err(|e| SqlError::internal(e.to_string()))?;
                let text = text
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .ok_or_else(wrong)?
                    .value(0)
                    .to_string();
                Value::Text(text)
            }
            SqlType::Array(e) => {
                let DataType::List(_) = array.data_type() else {
                    return Err(wrong());
                };
                let items = array.as_list::<i32>().value(i);
                Value::Text(array_text(items.as_ref(), *e)?)
            }
        })
    }

    /// Cast an incoming array (a VALUES list, an expression) to this column's Arrow type, as
    /// PostgreSQL's assignment casts do: text to numbers, booleans and timestamps, numbers to
    /// narrower numbers when they fit.
    pub fn coerce(&self, array: &ArrayRef, column: &str) -> Result<ArrayRef> {
        let target = self.arrow();
        if array.data_type() == &target {
            return Ok(array.clone());
        }
        // Text into bytea reads PostgreSQL's bytea input forms (`\x` hex, or escapes).
        if *self == SqlType::Bytea {
            if let Ok(text) = cast(array, &DataType::Utf8) {
                if let Some(text) = text.as_any().downcast_ref::<StringArray>() {
                    let mut b = BinaryBuilder::with_capacity(text.len(), text.len() * 8);
                    for v in text.iter() {
                        match v {
                            None => b.append_null(),
                            Some(s) => b.append_value(parse_bytea(s).map_err(|m| {
                                SqlError::new(
                                    bytea_error_code(s),
                                    format!("invalid input syntax for type bytea (column \"{column}\"): {m}"),
                                )
                            })?),
                        }
                    }
                    return Ok(Arc::new(b.finish()));
                }
            }
        }
        // Text into interval reads PostgreSQL's interval input, which Arrow's parser does not
        // (`04:05:06`, `2 mons`, `ago`).
        if *self == SqlType::Interval {
            if let Some(text) = array.as_any().downcast_ref::<StringArray>() {
                let mut b = IntervalMonthDayNanoBuilder::with_capacity(text.len());
                for v in text.iter() {
                    match v {
                        None => b.append_null(),
                        Some(s) => {
                            let iv = Interval::parse(s).map_err(|m| {
                                SqlError::new(
                                    state::INVALID_DATETIME,
                                    format!("{m} (column \"{column}\")"),
                                )
                            })?;
                            b.append_value(IntervalMonthDayNano::new(
                                iv.months,
                                iv.days,
                                iv.micros.saturating_mul(1_000),
                            ));
                        }
                    }
                }
                return Ok(Arc::new(b.finish()));
            }
        }
        // PostgreSQL's infinite dates and timestamps from their text input (`infinity`,
        // `-infinity`, any case, spaces around), which Arrow's parser does not read: the
        // others are cast as below, then the infinities put in (`i32::MAX`/`i64::MAX` and
        // `MIN`, as the binary input keeps them).
        if matches!(
            self,
            SqlType::Date | SqlType::Timestamp | SqlType::TimestampTz
        ) {
            if let Some(text) = array.as_any().downcast_ref::<StringArray>() {
                let signs: Vec<Option<bool>> =
                    text.iter().map(|v| v.and_then(infinity_sign)).collect();
                if signs.iter().any(Option::is_some) {
                    let finite: StringArray = text
                        .iter()
                        .zip(&signs)
                        .map(|(v, s)| if s.is_some() { None } else { v })
                        .collect();
                    let cast = self.coerce(&(Arc::new(finite) as ArrayRef), column)?;
                    return Ok(if *self == SqlType::Date {
                        Arc::new(with_infinities::<Date32Type>(
                            &cast,
                            &signs,
                            i32::MAX,
                            i32::MIN,
                        ))
                    } else {
                        Arc::new(
                            with_infinities::<TimestampMicrosecondType>(
                                &cast,
                                &signs,
                                i64::MAX,
                                i64::MIN,
                            )
                            .with_data_type(target),
                        )
                    });
                }
            }
        }
        // Text into an array reads PostgreSQL's array input (`{1,2,NULL}`, `{"a b",c}`).
        if let SqlType::Array(e) = self {
            if let Some(text) = array.as_any().downcast_ref::<StringArray>() {
                return list_from_texts(text.iter(), *e, column);
            }
        }
        let safe = datafusion::arrow::compute::CastOptions {
            safe: false,
            ..Default::default()
        };
        datafusion::arrow::compute::cast_with_options(array, &target, &safe).map_err(|e| {
            let m = e.to_string();
            let text = matches!(
                array.data_type(),
                DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
            );
            let code = if m.contains("overflow") || m.contains("out of range") {
                state::OUT_OF_RANGE
            } else if text
                && matches!(
                    self,
                    SqlType::Date | SqlType::Timestamp | SqlType::TimestampTz | SqlType::Time
                )
            {
                // PostgreSQL's "invalid input syntax for type date" and its kin.
                state::INVALID_DATETIME
            } else if text {
                state::INVALID_TEXT
            } else {
                state::DATATYPE_MISMATCH
            };
            SqlError::new(
                code,
                format!(
                    "column \"{column}\" is of type {} but a value of type {} does not convert: {m}",
                    self.pg_name(),
                    array.data_type()
                ),
            )
        })
    }
}

/// PostgreSQL's text form of a one-dimensional array of these element texts (`None`: NULL):
/// `{1,NULL,"a b"}`, each element quoted where PostgreSQL quotes it.
pub fn array_literal(items: &[Option<String>]) -> String {
    let mut out = String::from("{");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match item {
            None => out.push_str("NULL"),
            Some(v) => {
                let plain = !v.is_empty()
                    && !v.eq_ignore_ascii_case("null")
                    && !v.chars().any(|c| {
                        matches!(c, '{' | '}' | ',' | '"' | '\\') || c.is_ascii_whitespace()
                    });
                if plain {
                    out.push_str(v);
                } else {
                    out.push('"');
                    for c in v.chars() {
                        if c == '"' || c == '\\' {
                            out.push('\\');
                        }
                        out.push(c);
                    }
                    out.push('"');
                }
            }
        }
    }
    out.push('}');
    out
}

/// The elements of PostgreSQL's array text form (`{1, 2,NULL}`, `{"a,b",c\"d}`); `None` is a
/// NULL element. Only one-dimensional arrays are read. Malformed text is PostgreSQL's `22P02`
/// `malformed array literal`, with PostgreSQL's DETAIL where it has one.
pub fn parse_array_literal(s: &str) -> std::result::Result<Vec<Option<String>>, SqlError> {
    let malformed = |detail: &str| {
        SqlError::new(
            state::INVALID_TEXT,
            format!("malformed array literal: \"{s}\""),
        )
        .with_detail(detail)
    };
    let unexpected = |c: char| malformed(&format!("Unexpected \"{c}\" character."));
    let end = || malformed("Unexpected end of input.");
    let t = s.trim();
    if t.starts_with('[') {
        return Err(SqlError::new(
            state::INVALID_TEXT,
            format!("malformed array literal: \"{s}\" (explicit array bounds are not supported)"),
        ));
    }
    let Some(inner) = t.strip_prefix('{') else {
        return Err(malformed(
            "Array value must start with \"{\" or dimension information.",
        ));
    };
    let body = match inner.strip_suffix('}') {
        Some(body) => body,
        None if inner.contains('}') => return Err(malformed("Junk after closing right brace.")),
        None => return Err(end()),
    };
    let mut items = Vec::new();
    if body.trim().is_empty() {
        return Ok(items);
    }
    let mut chars = body.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            chars.next();
        }
        let mut item = String::new();
        let mut quoted = false;
        let mut trailing_ws = 0usize;
        match chars.peek() {
            Some('"') => {
                chars.next();
                quoted = true;
                loop {
                    match chars.next() {
                        None => return Err(end()),
                        Some('"') => break,
                        Some('\\') => item.push(chars.next().ok_or_else(end)?),
                        Some(c) => item.push(c),
                    }
                }
                while chars.peek().is_some_and(|c| c.is_ascii_whitespace()) {
                    chars.next();
                }
            }
            Some('{') if items.is_empty() => {
                return Err(SqlError::new(
                    state::INVALID_TEXT,
                    format!(
                        "malformed array literal: \"{s}\" (multidimensional arrays are not \
                         supported)"
                    ),
                ))
            }
            Some('{') => return Err(unexpected('{')),
            _ => {
                while let Some(&c) = chars.peek() {
                    match c {
                        ',' => break,
                        '{' | '}' | '"' => return Err(unexpected(c)),
                        '\\' => {
                            chars.next();
                            item.push(chars.next().ok_or_else(end)?);
                            trailing_ws = 0;
                            continue;
                        }
                        c if c.is_ascii_whitespace() => trailing_ws += 1,
                        _ => trailing_ws = 0,
                    }
                    item.push(c);
                    chars.next();
                }
                item.truncate(item.len() - trailing_ws);
                if item.is_empty() {
                    // What came where an element should be: a delimiter, or the closing brace.
                    return Err(unexpected(if chars.peek().is_some() { ',' } else { '}' }));
                }
            }
        }
        items.push(if !quoted && item.eq_ignore_ascii_case("null") {
            None
        } else {
            Some(item)
        });
        match chars.next() {
            None => return Ok(items),
            Some(',') => continue,
            Some(_) => return Err(malformed("Incorrectly quoted array element.")),
        }
    }
}

/// An Arrow list array, one row per text (`None`: NULL), each text in PostgreSQL's array text
/// form and its elements of type `elem`. An error names `column`.
fn list_from_texts<'a>(
    texts: impl Iterator<Item = Option<&'a str>>,
    elem: Elem,
    column: &str,
) -> Result<ArrayRef> {
    let mut offsets = vec![0i32];
    let mut valid = Vec::new();
    let mut items: Vec<Option<String>> = Vec::new();
    for t in texts {
        match t {
            None => valid.push(false),
            Some(t) => {
                let parsed = parse_array_literal(t).map_err(|mut e| {
                    e.message = format!("{} (column \"{column}\")", e.message);
                    e
                })?;
                items.extend(parsed);
                valid.push(true);
            }
        }
        offsets.push(i32::try_from(items.len()).map_err(|_| {
            SqlError::new(
                state::OUT_OF_RANGE,
                format!("array too large (column \"{column}\")"),
            )
        })?);
    }
    let strings: ArrayRef = Arc::new(StringArray::from_iter(items.iter().map(Option::as_deref)));
    let values =
        elem.scalar()
            .coerce(&strings, column)
            .map_err(|e| match check_elements(&items, elem) {
                Err(bad) => {
                    SqlError::new(bad.code, format!("{} (column \"{column}\")", bad.message))
                }
                Ok(()) => e,
            })?;
    let field = Arc::new(Field::new_list_field(elem.scalar().arrow(), true));
    let nulls = valid.iter().any(|v| !v).then(|| valid.into());
    let list = ListArray::try_new(field, OffsetBuffer::new(offsets.into()), values, nulls)
        .map_err(|e| SqlError::internal(e.to_string()))?;
    Ok(Arc::new(list))
}

/// Refuse the first of `items` (array elements as text) that is not a value of `elem`, with
/// PostgreSQL's message.
pub fn check_elements(items: &[Option<String>], elem: Elem) -> Result<()> {
    let scalar = elem.scalar();
    for t in items.iter().flatten() {
        let one: ArrayRef = Arc::new(StringArray::from(vec![t.as_str()]));
        if let Err(mut e) = scalar.coerce(&one, "array element") {
            // A whole number too wide for its integer type is out of range, not malformed.
            let integer = matches!(
                scalar,
                SqlType::SmallInt | SqlType::Integer | SqlType::BigInt
            );
            if integer && t.trim().parse::<i128>().is_ok() {
                e.code = state::OUT_OF_RANGE;
            }
            // A date or time that does not parse is PostgreSQL's 22007.
            let temporal = matches!(
                scalar,
                SqlType::Date
                    | SqlType::Timestamp
                    | SqlType::TimestampTz
                    | SqlType::Time
                    | SqlType::TimeTz
                    | SqlType::Interval
            );
            if temporal && e.code == state::INVALID_TEXT {
                e.code = state::INVALID_DATETIME;
            }
            let message = if e.code == state::OUT_OF_RANGE {
                format!(
                    "value \"{t}\" is out of range for type {}",
                    scalar.pg_name()
                )
            } else {
                format!(
                    "invalid input syntax for type {}: \"{t}\"",
                    scalar.pg_name()
                )
            };
            return Err(SqlError::new(e.code, message));
        }
    }
    Ok(())
}

/// The array text form of `items`, elements of type `elem` (uuids canonical).
fn array_text(items: &dyn Array, elem: Elem) -> Result<String> {
    let mut parts = Vec::with_capacity(items.len());
    for i in 0..items.len() {
        parts.push(match pg_text(items, i) {
            Some(t) if elem == Elem::Uuid => Some(canonical_uuid(&t)?),
            Some(t) if elem == Elem::TimeTz => Some(
                TimeTz::parse(&t)
                    .map_err(|m| SqlError::new(state::INVALID_DATETIME, m))?
                    .to_pg_text(),
            ),
            other => other,
        });
    }
    Ok(array_literal(&parts))
}

/// The SQLSTATE of bytea input that does not parse: bad hex is `22023`, a bad escape `22P02`,
/// as in PostgreSQL.
pub fn bytea_error_code(s: &str) -> &'static str {
    if s.starts_with("\\x") || s.starts_with("\\X") {
        "22023"
    } else {
        state::INVALID_TEXT
    }
}

/// PostgreSQL's bytea input: `\x` followed by hex digit pairs, or the escape form, where
/// `\\` is a backslash and `\nnn` an octal byte.
pub fn parse_bytea(s: &str) -> std::result::Result<Vec<u8>, String> {
    if let Some(hex) = s.strip_prefix("\\x").or_else(|| s.strip_prefix("\\X")) {
        let digits: Vec<u8> = hex.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
        if !digits.len().is_multiple_of(2) {
            return Err(format!("odd number of hex digits in {s:?}"));
        }
        return digits
            .chunks(2)
            .map(|p| {
                std::str::from_utf8(p)
                    .ok()
                    .and_then(|t| u8::from_str_radix(t, 16).ok())
                    .ok_or_else(|| format!("invalid hexadecimal digit in {s:?}"))
            })
            .collect();
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
        } else if b.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else if i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = u32::from(b[i + 1] - b'0') * 64
                + u32::from(b[i + 2] - b'0') * 8
                + u32::from(b[i + 3] - b'0');
            out.push(u8::try_from(v).map_err(|_| format!("octal escape out of range in {s:?}"))?);
            i += 4;
        } else {
            return Err(format!(
                "a backslash must be followed by a backslash or three octal digits in {s:?}"
            ));
        }
    }
    Ok(out)
}

/// Shortest text that parses back to exactly `v` (`NaN`, `Infinity`, `-Infinity` as PostgreSQL
/// writes them).
fn float_text(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        }
    } else {
        v.to_string()
    }
}

/// PostgreSQL's text form of a uuid: 32 hex digits, lower case, hyphenated 8-4-4-4-12. Accepts
/// the forms PostgreSQL accepts (upper case, braces, no hyphens).
pub fn canonical_uuid(s: &str) -> Result<String> {
    let hex: String = s
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .chars()
        .filter(|c| *c != '-')
        .collect();
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(SqlError::new(
            state::INVALID_TEXT,
            format!("invalid input syntax for type uuid: \"{s}\""),
        ));
    }
    let h = hex.to_ascii_lowercase();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    ))
}

#[cfg(test)]
mod tests;

/// `Some(true)` for PostgreSQL's `infinity`, `Some(false)` for `-infinity` (any case, spaces
/// around), as date and timestamp input reads them; `None` for any other text.
pub(crate) fn infinity_sign(s: &str) -> Option<bool> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("infinity") {
        Some(true)
    } else if s.eq_ignore_ascii_case("-infinity") {
        Some(false)
    } else {
        None
    }
}

/// `finite`'s values with `max` where `signs` says `infinity` and `min` where it says
/// `-infinity`.
fn with_infinities<T: ArrowPrimitiveType>(
    finite: &ArrayRef,
    signs: &[Option<bool>],
    max: T::Native,
    min: T::Native,
) -> PrimitiveArray<T> {
    finite
        .as_primitive::<T>()
        .iter()
        .zip(signs)
        .map(|(v, s)| match s {
            Some(true) => Some(max),
            Some(false) => Some(min),
            None => v,
        })
        .collect()
}
