//! Errors of the SQL layer, each with the SQLSTATE PostgreSQL would answer.

use std::fmt;

use rocklake_core::Error as CoreError;

/// Result of the SQL layer.
pub type Result<T, E = SqlError> = std::result::Result<T, E>;

/// An error with a PostgreSQL SQLSTATE, so that a client (and the wire server) can tell a
/// duplicate key from a syntax error the way it does with PostgreSQL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqlError {
    /// Five-character SQLSTATE, e.g. `23505`.
    pub code: &'static str,
    /// PostgreSQL-style message.
    pub message: String,
    /// PostgreSQL's DETAIL line, when it has one (`Key (snapshot_id)=(5) already exists.`).
    pub detail: Option<String>,
    /// PostgreSQL's HINT line, when it has one (what to do instead).
    pub hint: Option<String>,
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (SQLSTATE {})", self.message, self.code)
    }
}

impl std::error::Error for SqlError {}

/// The SQLSTATEs this layer answers.
pub mod state {
    /// `23505` unique_violation.
    pub const UNIQUE_VIOLATION: &str = "23505";
    /// `23502` not_null_violation.
    pub const NOT_NULL_VIOLATION: &str = "23502";
    /// `42P01` undefined_table.
    pub const UNDEFINED_TABLE: &str = "42P01";
    /// `42P07` duplicate_table.
    pub const DUPLICATE_TABLE: &str = "42P07";
    /// `42P06` duplicate_schema.
    pub const DUPLICATE_SCHEMA: &str = "42P06";
    /// `3F000` invalid_schema_name.
    pub const INVALID_SCHEMA_NAME: &str = "3F000";
    /// `2BP01` dependent_objects_still_exist.
    pub const DEPENDENT_OBJECTS: &str = "2BP01";
    /// `42703` undefined_column.
    pub const UNDEFINED_COLUMN: &str = "42703";
    /// `42601` syntax_error.
    pub const SYNTAX_ERROR: &str = "42601";
    /// `42804` datatype_mismatch.
    pub const DATATYPE_MISMATCH: &str = "42804";
    /// `22P02` invalid_text_representation.
    pub const INVALID_TEXT: &str = "22P02";
    /// `22003` numeric_value_out_of_range.
    pub const OUT_OF_RANGE: &str = "22003";
    /// `22023` invalid_parameter_value.
    pub const INVALID_PARAMETER: &str = "22023";
    /// `invalid_datetime_format`: a date, time or interval that does not parse.
    pub const INVALID_DATETIME: &str = "22007";
    /// `25P02` in_failed_sql_transaction.
    pub const IN_FAILED_TRANSACTION: &str = "25P02";
    /// `25006` read_only_sql_transaction.
    pub const READ_ONLY_TRANSACTION: &str = "25006";
    /// `40001` serialization_failure.
    pub const SERIALIZATION_FAILURE: &str = "40001";
    /// `40P01` deadlock_detected.
    pub const DEADLOCK_DETECTED: &str = "40P01";
    /// `42883` undefined_function.
    pub const UNDEFINED_FUNCTION: &str = "42883";
    /// `22012` division_by_zero.
    pub const DIVISION_BY_ZERO: &str = "22012";
    /// `0A000` feature_not_supported.
    pub const NOT_SUPPORTED: &str = "0A000";
    /// `54011` program_limit_exceeded (more columns than PostgreSQL allows).
    pub const PROGRAM_LIMIT_EXCEEDED: &str = "54011";
    /// `42000` syntax_error_or_access_rule_violation (planning errors DataFusion words).
    pub const PLAN_ERROR: &str = "42000";
    /// `57P01` admin_shutdown (the writer was fenced or closed).
    pub const ADMIN_SHUTDOWN: &str = "57P01";
    /// `42704` undefined_object (a configuration parameter PostgreSQL does not know).
    pub const UNDEFINED_OBJECT: &str = "42704";
    /// `55P02` cant_change_runtime_param.
    pub const CANT_CHANGE_RUNTIME_PARAM: &str = "55P02";
    /// `53200` out_of_memory (a statement past the server's memory bound).
    pub const OUT_OF_MEMORY: &str = "53200";
    /// `72000` snapshot_too_old (a sled view let go past the bound on views' memory).
    pub const SNAPSHOT_TOO_OLD: &str = "72000";
    /// `3D000` invalid_catalog_name (a database that does not exist).
    pub const INVALID_CATALOG_NAME: &str = "3D000";
    /// `42P04` duplicate_database.
    pub const DUPLICATE_DATABASE: &str = "42P04";
    /// `25001` active_sql_transaction (a statement that cannot run in a transaction block).
    pub const ACTIVE_SQL_TRANSACTION: &str = "25001";
    /// `42602` invalid_name.
    pub const INVALID_NAME: &str = "42602";
    /// `57P03` cannot_connect_now (a reader past its staleness bound).
    pub const CANNOT_CONNECT_NOW: &str = "57P03";
    /// `XX000` internal_error.
    pub const INTERNAL: &str = "XX000";
    /// `XX001` data_corrupted.
    pub const DATA_CORRUPTED: &str = "XX001";
}

impl SqlError {
    /// An error with this SQLSTATE.
    pub fn new(code: &'static str, message: impl Into<String>) -> SqlError {
        SqlError {
            code,
            message: message.into(),
            detail: None,
            hint: None,
        }
    }

    /// The same error with a DETAIL line.
    pub fn with_detail(mut self, detail: impl Into<String>) -> SqlError {
        self.detail = Some(detail.into());
        self
    }

    /// The same error with a HINT line.
    pub fn with_hint(mut self, hint: impl Into<String>) -> SqlError {
        self.hint = Some(hint.into());
        self
    }

    /// `0A000`: something this layer does not do (yet), said plainly.
    pub fn unsupported(message: impl Into<String>) -> SqlError {
        SqlError::new(state::NOT_SUPPORTED, message)
    }

    /// `XX000`.
    pub fn internal(message: impl Into<String>) -> SqlError {
        SqlError::new(state::INTERNAL, message)
    }
}

impl From<CoreError> for SqlError {
    fn from(e: CoreError) -> SqlError {
        let code = match &e {
            CoreError::Fenced { .. } | CoreError::Closed | CoreError::LeaseLapsed(_) => {
                state::ADMIN_SHUTDOWN
            }
            CoreError::Conflict { .. } | CoreError::ConditionFailed { .. } => {
                state::SERIALIZATION_FAILURE
            }
            CoreError::Corrupt { .. } => state::DATA_CORRUPTED,
            CoreError::OutOfRange { .. } => state::OUT_OF_RANGE,
            CoreError::PermissionDenied(_) => state::READ_ONLY_TRANSACTION,
            CoreError::SnapshotTooOld(_) => state::SNAPSHOT_TOO_OLD,
            CoreError::Stale(_) => state::CANNOT_CONNECT_NOW,
            _ => state::INTERNAL,
        };
        SqlError::new(code, e.to_string())
    }
}

impl From<datafusion::arrow::error::ArrowError> for SqlError {
    fn from(e: datafusion::arrow::error::ArrowError) -> SqlError {
        datafusion::error::DataFusionError::ArrowError(Box::new(e), None).into()
    }
}

impl From<datafusion::error::DataFusionError> for SqlError {
    fn from(e: datafusion::error::DataFusionError) -> SqlError {
        use datafusion::error::DataFusionError as D;
        let e = match e {
            D::Diagnostic(_, inner) => *inner,
            D::Shared(inner) => D::Internal(inner.to_string()),
            other => other,
        };
        match e {
            D::External(inner) => match inner.downcast::<SqlError>() {
                Ok(sql) => *sql,
                Err(other) => SqlError::internal(other.to_string()),
            },
            D::Context(ctx, inner) => {
                let mut e = SqlError::from(*inner);
                e.message = format!("{ctx}: {}", e.message);
                e
            }
            D::SQL(p, _) => SqlError::new(state::SYNTAX_ERROR, p.to_string()),
            D::NotImplemented(m) => SqlError::unsupported(m),
            D::ResourcesExhausted(m) => SqlError::new(state::OUT_OF_MEMORY, "out of memory")
                .with_detail(format!(
                    "This statement needed more memory than it may hold (rocklake serve \
                     --work-mem bounds one statement, --max-memory all of them): {m}"
                )),
            D::SchemaError(s, _) => {
                let m = s.to_string();
                let code = if m.contains("No field named") {
                    state::UNDEFINED_COLUMN
                } else {
                    state::PLAN_ERROR
                };
                SqlError::new(code, m)
            }
            D::Plan(m) => match quoted_after(&m, "table '") {
                // DataFusion: `table 'rocklake.public.nope' not found`.
                Some(t) if m.contains("not found") => {
                    let name = t.rsplit('.').next().unwrap_or(&t).to_string();
                    SqlError::new(
                        state::UNDEFINED_TABLE,
                        format!("relation \"{name}\" does not exist"),
                    )
                }
                _ => match quoted_after(&m, "Invalid function '") {
                    // DataFusion: `Invalid function 'nope'.`
                    Some(f) => SqlError::new(
                        state::UNDEFINED_FUNCTION,
                        format!("function {f}() does not exist"),
                    ),
                    None => SqlError::new(state::PLAN_ERROR, m),
                },
            },
            D::ArrowError(a, _) => {
                use datafusion::arrow::error::ArrowError as A;
                let code = match a.as_ref() {
                    A::DivideByZero => state::DIVISION_BY_ZERO,
                    A::CastError(m) if m.contains("overflow") => state::OUT_OF_RANGE,
                    A::CastError(_) | A::ParseError(_) => state::INVALID_TEXT,
                    A::ArithmeticOverflow(_) => state::OUT_OF_RANGE,
                    other if other.to_string().contains("overflow") => state::OUT_OF_RANGE,
                    _ => state::INTERNAL,
                };
                let m = if code == state::DIVISION_BY_ZERO {
                    "division by zero".to_string()
                } else {
                    a.to_string()
                };
                SqlError::new(code, m)
            }
            other => SqlError::internal(other.to_string()),
        }
    }
}

/// The text between `start` and the next `'` in `m`.
fn quoted_after(m: &str, start: &str) -> Option<String> {
    let rest = &m[m.find(start)? + start.len()..];
    Some(rest[..rest.find('\'')?].to_string())
}

/// Carry a [`SqlError`] through DataFusion (which only knows its own error type).
pub(crate) fn to_df(e: SqlError) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::External(Box::new(e))
}
