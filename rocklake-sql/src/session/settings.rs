//! Settings a session keeps: `SET`, `RESET` and `SHOW` of `statement_timeout`, with
//! PostgreSQL's units, its display and its transaction rules (a `SET` rolled back with its
//! transaction is undone; `SET LOCAL` lasts until the transaction ends and does nothing
//! outside a block). Other settings are accepted and ignored, as DuckDB's own `SET`s need.

use std::sync::Arc;
use std::time::Duration;

use datafusion::sql::sqlparser::ast::{ContextModifier, Expr, Ident, Set, Value};

use super::{Output, Session, Status};
use crate::error::{Result, SqlError};

/// The one setting a session honours today.
const STATEMENT_TIMEOUT: &str = "statement_timeout";
/// PostgreSQL's bound on an integer setting (ms here).
const MAX_MS: i64 = i32::MAX as i64;
const INVALID_PARAMETER_VALUE: &str = "22023";

/// What a session's settings are, and what undoes a transaction's changes to them.
#[derive(Debug, Default)]
pub(crate) struct Settings {
    /// `statement_timeout`; `None` is 0 (no limit).
    pub(crate) statement_timeout: Option<Duration>,
    /// Its value when the open transaction first changed it (back on rollback).
    before_txn: Option<Option<Duration>>,
    /// Its value before a `SET LOCAL` of the open transaction (back at its end).
    before_local: Option<Option<Duration>>,
}

impl Settings {
    /// The transaction committed: its `SET`s stay, its `SET LOCAL`s end.
    pub(crate) fn committed(&mut self) {
        if let Some(v) = self.before_local.take() {
            self.statement_timeout = v;
        }
        self.before_txn = None;
    }

    /// The transaction rolled back: everything it set is undone.
    pub(crate) fn rolled_back(&mut self) {
        if let Some(v) = self.before_txn.take() {
            self.statement_timeout = v;
        }
        self.before_local = None;
    }

    fn assign(&mut self, value: Option<Duration>, local: bool) {
        self.before_txn.get_or_insert(self.statement_timeout);
        if local {
            self.before_local.get_or_insert(self.statement_timeout);
        } else {
            self.before_local = None;
        }
        self.statement_timeout = value;
    }
}

impl Session {
    /// `SET [SESSION | LOCAL] name { = | TO } value`.
    pub(super) fn set(&mut self, set: &Set) -> Result<Output> {
        let Set::SingleAssignment {
            scope,
            variable,
            values,
            ..
        } = set
        else {
            return Ok(Output::Command("SET".into()));
        };
        if !variable.to_string().eq_ignore_ascii_case(STATEMENT_TIMEOUT) {
            return Ok(Output::Command("SET".into()));
        }
        let value = match values.as_slice() {
            [v] => timeout_value(v)?,
            _ => {
                return Err(SqlError::new(
                    INVALID_PARAMETER_VALUE,
                    format!("SET {STATEMENT_TIMEOUT} takes only one argument"),
                ))
            }
        };
        let local = matches!(scope, Some(ContextModifier::Local));
        // Outside a block the statement is its own transaction: SET LOCAL ends with it
        // (PostgreSQL warns and changes nothing).
        if !(local && self.status == Status::Idle) {
            self.settings.assign(value, local);
        }
        Ok(Output::Command("SET".into()))
    }

    /// `RESET name` / `RESET ALL`.
    pub(super) fn reset_setting(&mut self, name: Option<&str>) -> Output {
        if name.is_none_or(|n| n.eq_ignore_ascii_case(STATEMENT_TIMEOUT)) {
            self.settings.assign(None, false);
        }
        Output::Command("RESET".into())
    }

    /// `SHOW statement_timeout`; `None` for any other name (the caller decides).
    pub(super) fn show(&self, variable: &[Ident]) -> Option<Result<Output>> {
        let [name] = variable else { return None };
        if !name.value.eq_ignore_ascii_case(STATEMENT_TIMEOUT) {
            return None;
        }
        Some(Ok(Output::Show {
            name: STATEMENT_TIMEOUT.into(),
            value: show_timeout(self.settings.statement_timeout),
        }))
    }

    /// A setting given when the connection started (`options=-c statement_timeout=5s`): as
    /// `SET`, outside any transaction.
    pub fn startup_setting(&mut self, name: &str, value: &str) -> Result<()> {
        if name.eq_ignore_ascii_case(STATEMENT_TIMEOUT) {
            self.settings.statement_timeout = parse_timeout(value)?;
        }
        Ok(())
    }

    /// The running statement's interrupt: [`crate::interrupt::Interrupt::cancel`] stops it.
    pub fn interrupt(&self) -> Arc<crate::interrupt::Interrupt> {
        self.interrupt.clone()
    }
}

/// A `SET` value: a number of ms, a string with a unit, or `DEFAULT`.
fn timeout_value(v: &Expr) -> Result<Option<Duration>> {
    match v {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => parse_timeout(n),
            Value::SingleQuotedString(s) => parse_timeout(s),
            other => parse_timeout(&other.to_string()),
        },
        Expr::Identifier(i) if i.value.eq_ignore_ascii_case("default") => Ok(None),
        Expr::UnaryOp { .. } => parse_timeout(&v.to_string().replace(' ', "")),
        other => parse_timeout(&other.to_string()),
    }
}

/// PostgreSQL's reading of a time setting whose unit is ms: `200`, `1.5s`, `5 min`, `0`;
/// units us, ms, s, min, h, d; rounded to whole ms; 0 is no limit.
pub(crate) fn parse_timeout(text: &str) -> Result<Option<Duration>> {
    let invalid = |hint: Option<&str>| {
        let e = SqlError::new(
            INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"{STATEMENT_TIMEOUT}\": \"{text}\""),
        );
        match hint {
            Some(h) => e.with_detail(h.to_string()),
            None => e,
        }
    };
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(t.len());
    let (number, unit) = (t[..split].trim(), t[split..].trim());
    let n: f64 = number.parse().map_err(|_| invalid(None))?;
    let ms_per_unit = match unit {
        "" | "ms" => 1.0,
        "us" => 0.001,
        "s" => 1_000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return Err(invalid(Some(
            "Valid units for this parameter are \"us\", \"ms\", \"s\", \"min\", \"h\", and \"d\".",
        ))),
    };
    let ms = (n * ms_per_unit).round();
    if ms.abs() > i64::MAX as f64 || (unit.is_empty() && ms.abs() > MAX_MS as f64) {
        return Err(invalid(Some("Value exceeds integer range.")));
    }
    let ms = ms as i64;
    if !(0..=MAX_MS).contains(&ms) {
        return Err(SqlError::new(
            INVALID_PARAMETER_VALUE,
            format!(
                "{ms} ms is outside the valid range for parameter \"{STATEMENT_TIMEOUT}\" (0 .. {MAX_MS})"
            ),
        ));
    }
    Ok((ms > 0).then(|| Duration::from_millis(ms as u64)))
}

/// How PostgreSQL shows it: the largest unit that divides it exactly.
fn show_timeout(d: Option<Duration>) -> String {
    let Some(d) = d else { return "0".into() };
    let ms = d.as_millis();
    for (unit, per) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("min", 60_000),
        ("s", 1_000),
    ] {
        if ms % per == 0 {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_read_and_show_as_postgresql_does() {
        for (text, shown) in [
            ("200", "200ms"),
            ("200ms", "200ms"),
            ("1s", "1s"),
            ("1.5s", "1500ms"),
            ("90s", "90s"),
            ("1min", "1min"),
            ("5 s", "5s"),
            ("0", "0"),
            ("100us", "0"),
            ("1500us", "2ms"),
            ("3600000", "1h"),
            ("2h", "2h"),
            ("86400000", "1d"),
        ] {
            assert_eq!(show_timeout(parse_timeout(text).unwrap()), shown, "{text}");
        }
        let e = parse_timeout("-1").unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                "22023",
                "-1 ms is outside the valid range for parameter \"statement_timeout\" (0 .. 2147483647)"
            )
        );
        for bad in ["5 parsecs", "abc", "3000000000"] {
            let e = parse_timeout(bad).unwrap_err();
            assert_eq!(
                e.message,
                format!("invalid value for parameter \"statement_timeout\": \"{bad}\"")
            );
        }
    }
}
