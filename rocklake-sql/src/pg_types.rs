//! PostgreSQL's types as this server names them: names, oids and lengths, the type of each
//! declared column type, and the Arrow field metadata that carries a column's PostgreSQL type
//! to the wire layer.
//!
//! Every column of a result carries its PostgreSQL type name in its Arrow field's metadata
//! ([`PG_TYPE`]) where the SQL layer knows it (a table's declared columns, `ctid`, the
//! catalog views); the wire layer announces that type and encodes values in its binary
//! form. Columns without it (expressions) get the type their Arrow type maps to
//! ([`pg_type_of`]).

use std::collections::HashMap;

use datafusion::arrow::datatypes::{DataType, Field, IntervalUnit, TimeUnit};

use crate::types::{Elem, SqlType};

/// The Arrow field metadata key that names a column's PostgreSQL type (`int8`, `uuid`, ...).
pub const PG_TYPE: &str = "rocklake.pg_type";

/// The Arrow field metadata key of a column's PostgreSQL type modifier (`numeric(p,s)`).
pub const PG_TYPMOD: &str = "rocklake.pg_typmod";

/// The first oid of a user's relation, as in PostgreSQL (below it: the system's).
pub const FIRST_USER_OID: i64 = 16_384;

/// One PostgreSQL type this server names: its name, oid and `typlen` (-1: variable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgType {
    /// `typname`.
    pub name: &'static str,
    /// Its oid.
    pub oid: u32,
    /// `typlen`: bytes of a value, or -1 for variable length.
    pub len: i16,
    /// The oid of the element type of an array type (0 otherwise).
    pub elem: u32,
}

const fn t(name: &'static str, oid: u32, len: i16, elem: u32) -> PgType {
    PgType {
        name,
        oid,
        len,
        elem,
    }
}

/// The types this server can name, as PostgreSQL 15 numbers them.
pub const PG_TYPES: &[PgType] = &[
    t("bool", 16, 1, 0),
    t("bytea", 17, -1, 0),
    t("char", 18, 1, 0),
    t("name", 19, 64, 0),
    t("int8", 20, 8, 0),
    t("int2", 21, 2, 0),
    t("int4", 23, 4, 0),
    t("text", 25, -1, 0),
    t("oid", 26, 4, 0),
    t("tid", 27, 6, 0),
    t("json", 114, -1, 0),
    t("float4", 700, 4, 0),
    t("float8", 701, 8, 0),
    t("_bool", 1000, -1, 16),
    t("_bytea", 1001, -1, 17),
    t("_int2", 1005, -1, 21),
    t("_int4", 1007, -1, 23),
    t("_text", 1009, -1, 25),
    t("_varchar", 1015, -1, 1043),
    t("_int8", 1016, -1, 20),
    t("_float4", 1021, -1, 700),
    t("_float8", 1022, -1, 701),
    t("bpchar", 1042, -1, 0),
    t("varchar", 1043, -1, 0),
    t("date", 1082, 4, 0),
    t("time", 1083, 8, 0),
    t("timestamp", 1114, 8, 0),
    t("_timestamp", 1115, -1, 1114),
    t("_date", 1182, -1, 1082),
    t("_time", 1183, -1, 1083),
    t("timestamptz", 1184, 8, 0),
    t("_timestamptz", 1185, -1, 1184),
    t("interval", 1186, 16, 0),
    t("_interval", 1187, -1, 1186),
    t("_numeric", 1231, -1, 1700),
    t("timetz", 1266, 12, 0),
    t("_timetz", 1270, -1, 1266),
    t("numeric", 1700, -1, 0),
    t("regclass", 2205, 4, 0),
    t("uuid", 2950, 16, 0),
    t("_uuid", 2951, -1, 2950),
    t("jsonb", 3802, -1, 0),
];

/// The element type of array type `name` (`_int4` → `int4`).
pub fn pg_array_elem(name: &str) -> Option<PgType> {
    let elem = pg_type(name)?.elem;
    if elem == 0 {
        return None;
    }
    PG_TYPES.iter().copied().find(|t| t.oid == elem)
}

/// The type named `name`.
pub fn pg_type(name: &str) -> Option<PgType> {
    PG_TYPES.iter().copied().find(|t| t.name == name)
}

/// The PostgreSQL type name of a declared column type.
pub fn sql_type_name(ty: SqlType) -> &'static str {
    match ty {
        SqlType::BigInt => "int8",
        SqlType::Integer => "int4",
        SqlType::SmallInt => "int2",
        SqlType::Boolean => "bool",
        SqlType::Text => "varchar",
        SqlType::Uuid => "uuid",
        SqlType::TimestampTz => "timestamptz",
        SqlType::Timestamp => "timestamp",
        SqlType::Date => "date",
        SqlType::Time => "time",
        SqlType::TimeTz => "timetz",
        SqlType::Interval => "interval",
        SqlType::Bytea => "bytea",
        SqlType::Double => "float8",
        SqlType::Real => "float4",
        SqlType::Numeric(..) => "numeric",
        SqlType::Array(e) => match e {
            Elem::BigInt => "_int8",
            Elem::Integer => "_int4",
            Elem::SmallInt => "_int2",
            Elem::Boolean => "_bool",
            Elem::Text => "_varchar",
            Elem::Uuid => "_uuid",
            Elem::Date => "_date",
            Elem::Timestamp => "_timestamp",
            Elem::TimestampTz => "_timestamptz",
            Elem::Time => "_time",
            Elem::TimeTz => "_timetz",
            Elem::Interval => "_interval",
            Elem::Bytea => "_bytea",
            Elem::Double => "_float8",
            Elem::Real => "_float4",
            Elem::Numeric(..) => "_numeric",
        },
    }
}

/// The type modifier PostgreSQL stores for a declared type (`atttypmod`), -1 for none.
pub fn sql_typmod(ty: SqlType) -> i32 {
    match ty {
        SqlType::Numeric(p, s) | SqlType::Array(Elem::Numeric(p, s)) => {
            ((i32::from(p) << 16) | (i32::from(s) & 0xffff)) + 4
        }
        _ => -1,
    }
}

/// An Arrow field that announces PostgreSQL type `pg` (and type modifier `typmod`).
pub fn field(name: &str, dt: DataType, nullable: bool, pg: &str, typmod: i32) -> Field {
    let mut md = HashMap::from([(PG_TYPE.to_string(), pg.to_string())]);
    if typmod != -1 {
        md.insert(PG_TYPMOD.to_string(), typmod.to_string());
    }
    Field::new(name, dt, nullable).with_metadata(md)
}

/// The PostgreSQL type a result column is announced as: its metadata's, else its Arrow
/// type's (`Utf8` → `text`, `Int64` → `int8`, `Decimal128` → `numeric`, ...), and the type
/// modifier (-1: none). `None` for an Arrow type no PostgreSQL type stands for.
pub fn pg_type_of(f: &Field) -> Option<(PgType, i32)> {
    let typmod = f
        .metadata()
        .get(PG_TYPMOD)
        .and_then(|m| m.parse().ok())
        .unwrap_or(-1);
    if let Some(t) = f.metadata().get(PG_TYPE).and_then(|n| pg_type(n)) {
        if arrow_fits(t.name, f.data_type()) {
            return Some((t, typmod));
        }
    }
    let name = match f.data_type() {
        DataType::Boolean => "bool",
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => "int2",
        DataType::Int32 | DataType::UInt16 => "int4",
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => "int8",
        DataType::Float16 | DataType::Float32 => "float4",
        DataType::Float64 => "float8",
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => "text",
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "bytea",
        DataType::Date32 | DataType::Date64 => "date",
        DataType::Time32(_) | DataType::Time64(_) => "time",
        DataType::Timestamp(_, None) => "timestamp",
        DataType::Timestamp(_, Some(_)) => "timestamptz",
        DataType::Interval(_) | DataType::Duration(_) => "interval",
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => {
            let tm = ((i32::from(*p) << 16) | (i32::from(*s) & 0xffff)) + 4;
            return pg_type("numeric").map(|t| (t, tm));
        }
        DataType::List(inner) | DataType::LargeList(inner) => match inner.data_type() {
            DataType::Boolean => "_bool",
            DataType::Int16 => "_int2",
            DataType::Int32 => "_int4",
            DataType::Int64 => "_int8",
            DataType::Float32 => "_float4",
            DataType::Float64 => "_float8",
            DataType::Date32 => "_date",
            DataType::Timestamp(_, None) => "_timestamp",
            DataType::Timestamp(_, Some(_)) => "_timestamptz",
            DataType::Time64(_) => "_time",
            DataType::Interval(_) => "_interval",
            DataType::Binary => "_bytea",
            DataType::Decimal128(..) => "_numeric",
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "_text",
            _ => return None,
        },
        _ => return None,
    };
    pg_type(name).map(|t| (t, -1))
}

/// Whether values of Arrow type `dt` can be sent as PostgreSQL type `pg` (metadata survives
/// some casts it should not, e.g. a uuid column cast to an integer).
fn arrow_fits(pg: &str, dt: &DataType) -> bool {
    match pg {
        "int8" => dt == &DataType::Int64,
        "int4" | "oid" | "regclass" => dt == &DataType::Int32 || dt == &DataType::Int64,
        "int2" => dt == &DataType::Int16,
        "bool" => dt == &DataType::Boolean,
        "varchar" | "text" | "name" | "char" | "uuid" | "tid" | "bpchar" | "timetz" => {
            matches!(
                dt,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            )
        }
        "timestamptz" => matches!(dt, DataType::Timestamp(TimeUnit::Microsecond, Some(_))),
        "timestamp" => matches!(dt, DataType::Timestamp(TimeUnit::Microsecond, None)),
        "date" => dt == &DataType::Date32,
        "time" => dt == &DataType::Time64(TimeUnit::Microsecond),
        "interval" => dt == &DataType::Interval(IntervalUnit::MonthDayNano),
        "bytea" => dt == &DataType::Binary,
        "float8" => dt == &DataType::Float64,
        "float4" => dt == &DataType::Float32,
        "numeric" => matches!(dt, DataType::Decimal128(..)),
        _ => match (pg_array_elem(pg), dt) {
            (Some(elem), DataType::List(f)) => arrow_fits(elem.name, f.data_type()),
            _ => false,
        },
    }
}
