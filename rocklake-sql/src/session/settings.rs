//! Settings a session keeps: `SET`, `RESET` and `SHOW` of the time limits
//! `statement_timeout`, `idle_in_transaction_session_timeout` and `idle_session_timeout`, and
//! of `default_transaction_isolation`, with PostgreSQL's units, its display and its
//! transaction rules (a `SET` rolled back with its transaction is undone; `SET LOCAL` lasts
//! until the transaction ends and does nothing outside a block; `RESET` goes back to the value
//! the session started with). Other settings PostgreSQL 15 lets a session change, and custom
//! ones (a name with a dot), are accepted and ignored, except a request for SERIALIZABLE
//! isolation, which is refused ([`check_isolation`]).
//! A name PostgreSQL does not know, or a parameter only its server's start or configuration
//! file sets, gets PostgreSQL's error ([`check_settable`]), so a mistyped `SET` is not taken
//! for a setting made.
//!
//! The session applies `statement_timeout` itself; the two idle limits are kept here for
//! whoever waits for the client's next message (the server, [`Session::idle_limits`]).

use std::sync::Arc;
use std::time::Duration;

use datafusion::sql::sqlparser::ast::{
    ContextModifier, Expr, Ident, ObjectName, Set, TransactionIsolationLevel, TransactionMode,
    Value,
};

use super::{Output, Session, Status};
use crate::error::{state, Result, SqlError};

mod names;

/// The time limits a session honours, in the order of [`Settings::values`].
const TIME_SETTINGS: [&str; 3] = [
    "statement_timeout",
    "idle_in_transaction_session_timeout",
    "idle_session_timeout",
];
const STATEMENT_TIMEOUT: usize = 0;
const IDLE_IN_TRANSACTION: usize = 1;
const IDLE_SESSION: usize = 2;
/// PostgreSQL's bound on an integer setting (ms here).
const MAX_MS: i64 = i32::MAX as i64;
const INVALID_PARAMETER_VALUE: &str = "22023";
/// The settings that name an isolation level.
const ISOLATION_SETTINGS: [&str; 2] = ["default_transaction_isolation", "transaction_isolation"];

/// Every RockLake transaction runs under snapshot isolation, which is PostgreSQL's REPEATABLE
/// READ: a write skew (two transactions each reading what the other writes) commits on both
/// sides. A client that asks for SERIALIZABLE is counting on that being refused, so the
/// request is refused (`0A000`) rather than silently run weaker. A block begun at READ
/// COMMITTED or READ UNCOMMITTED runs at REPEATABLE READ, which is stronger than both; a
/// statement outside a block follows `default_transaction_isolation` (see
/// [`Settings::statement_snapshots`]).
pub(super) fn check_isolation(modes: &[TransactionMode]) -> Result<()> {
    if modes.iter().any(|m| {
        matches!(
            m,
            TransactionMode::IsolationLevel(TransactionIsolationLevel::Serializable)
        )
    }) {
        return Err(serializable_refused());
    }
    Ok(())
}

fn serializable_refused() -> SqlError {
    SqlError::new(
        crate::error::state::NOT_SUPPORTED,
        "isolation level SERIALIZABLE is not supported: RockLake runs every transaction at \
         REPEATABLE READ (snapshot isolation)",
    )
}

/// When a session may change one of PostgreSQL 15's configuration parameters (its
/// `pg_settings.context`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Changeable {
    /// `user` and `superuser`: `SET` at any time (every RockLake client is a superuser).
    Session,
    /// `backend` and `superuser-backend`: only in the connection's startup options.
    AtConnection,
    /// `sighup`: only in the server's configuration file.
    Reload,
    /// `postmaster`: only when the server starts.
    Restart,
    /// `internal`: never.
    Fixed,
}

/// The name a `SET`, `RESET` or `SHOW` means: PostgreSQL folds a name to lower case unless
/// it is quoted, and joins a custom parameter's parts with dots.
fn parameter_name<'a>(parts: impl IntoIterator<Item = &'a Ident>) -> String {
    let parts: Vec<String> = parts
        .into_iter()
        .map(|p| match p.quote_style {
            Some(_) => p.value.clone(),
            None => p.value.to_lowercase(),
        })
        .collect();
    parts.join(".")
}

/// PostgreSQL 15's parameter `name` (any case) and when a session may change it.
fn known(name: &str) -> Option<(&'static str, Changeable)> {
    let lower = name.to_ascii_lowercase();
    names::PARAMETERS
        .binary_search_by(|(n, _)| (*n).cmp(lower.as_str()))
        .ok()
        .map(|i| names::PARAMETERS[i])
}

/// Whether a connection may start with `name` = `value` (a parameter of its startup packet,
/// or `-c name=value` in its `options`), with PostgreSQL 15's refusal when it may not:
/// `42704` for a name it does not know, `55P02` for one only the server's start or its
/// configuration sets, `22023` for a time limit that does not read; and RockLake's `0A000`
/// for SERIALIZABLE, which it does not run (see [`Session::startup_setting`]).
pub fn check_startup_setting(name: &str, value: &str) -> Result<()> {
    if !name.contains('.') {
        match known(name) {
            None => return Err(unrecognized(name)),
            Some((_, Changeable::Session | Changeable::AtConnection)) => {}
            Some(_) => return check_settable(name),
        }
    }
    if let Some(i) = time_setting(name) {
        parse_timeout(value, i)?;
    } else if ISOLATION_SETTINGS
        .iter()
        .any(|s| name.eq_ignore_ascii_case(s))
    {
        isolation_value(name, value)?;
    }
    Ok(())
}

/// Whether a session may `SET` or `RESET` the parameter `name`, with PostgreSQL 15's error
/// when it may not: `42704` for a name it does not know (one with a dot is a custom
/// parameter, which any session may set), `55P02` for one set elsewhere.
fn check_settable(name: &str) -> Result<()> {
    if name.contains('.') {
        return Ok(());
    }
    let (canonical, why) = match known(name) {
        None => return Err(unrecognized(name)),
        Some((_, Changeable::Session)) => return Ok(()),
        Some((n, Changeable::AtConnection)) => (n, "cannot be set after connection start"),
        Some((n, Changeable::Reload)) => (n, "cannot be changed now"),
        Some((n, Changeable::Restart)) => (n, "cannot be changed without restarting the server"),
        Some((n, Changeable::Fixed)) => (n, "cannot be changed"),
    };
    Err(SqlError::new(
        state::CANT_CHANGE_RUNTIME_PARAM,
        format!("parameter \"{canonical}\" {why}"),
    ))
}

fn unrecognized(name: &str) -> SqlError {
    SqlError::new(
        state::UNDEFINED_OBJECT,
        format!("unrecognized configuration parameter \"{name}\""),
    )
}

/// Which of [`TIME_SETTINGS`] `name` is.
fn time_setting(name: &str) -> Option<usize> {
    TIME_SETTINGS
        .iter()
        .position(|s| name.eq_ignore_ascii_case(s))
}

/// A time limit's value; `None` is 0 (no limit).
type Limit = Option<Duration>;

/// One setting's value, what `RESET` goes back to, and what undoes a transaction's change.
#[derive(Debug, Default, Clone, Copy)]
struct Tracked<T: Copy> {
    value: T,
    /// The server's default or the connection's startup option.
    default: T,
    /// The value when the open transaction first changed it (back on rollback).
    before_txn: Option<T>,
    /// The value before a `SET LOCAL` of the open transaction (back at its end).
    before_local: Option<T>,
}

impl<T: Copy> Tracked<T> {
    /// A value given at the session's start: as `SET` outside any transaction, and what
    /// `RESET` goes back to.
    fn start(&mut self, v: T) {
        self.value = v;
        self.default = v;
    }

    fn committed(&mut self) {
        if let Some(v) = self.before_local.take() {
            self.value = v;
        }
        self.before_txn = None;
    }

    fn rolled_back(&mut self) {
        if let Some(v) = self.before_txn.take() {
            self.value = v;
        }
        self.before_local = None;
    }

    fn assign(&mut self, value: T, local: bool) {
        self.before_txn.get_or_insert(self.value);
        if local {
            self.before_local.get_or_insert(self.value);
        } else {
            self.before_local = None;
        }
        self.value = value;
    }
}

/// What a session's settings are, and what undoes a transaction's changes to them.
#[derive(Debug, Default)]
pub(crate) struct Settings {
    /// Each of [`TIME_SETTINGS`].
    limits: [Tracked<Limit>; 3],
    /// `default_transaction_isolation` is `repeatable read` (PostgreSQL's default, and this
    /// one's, is `read committed`): see [`Settings::statement_snapshots`].
    repeatable_default: Tracked<bool>,
}

impl Settings {
    /// `statement_timeout`.
    pub(crate) fn statement_timeout(&self) -> Limit {
        self.limits[STATEMENT_TIMEOUT].value
    }

    /// Whether a statement outside a block runs as PostgreSQL's `READ COMMITTED` does: a row
    /// another transaction changed and committed while the statement waited for it (or
    /// since its snapshot) is taken as it now is, not refused with `40001`. True unless
    /// `default_transaction_isolation` is `repeatable read`.
    pub(crate) fn statement_snapshots(&self) -> bool {
        !self.repeatable_default.value
    }

    /// The transaction committed: its `SET`s stay, its `SET LOCAL`s end.
    pub(crate) fn committed(&mut self) {
        self.limits.iter_mut().for_each(Tracked::committed);
        self.repeatable_default.committed();
    }

    /// The transaction rolled back: everything it set is undone.
    pub(crate) fn rolled_back(&mut self) {
        self.limits.iter_mut().for_each(Tracked::rolled_back);
        self.repeatable_default.rolled_back();
    }
}

/// The limits on waiting for a client's next message, as the session's settings have them
/// now: `idle_in_transaction_session_timeout` while a transaction block is open (or failed),
/// `idle_session_timeout` outside one. `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdleLimits {
    /// `idle_in_transaction_session_timeout`.
    pub in_transaction: Option<Duration>,
    /// `idle_session_timeout`.
    pub session: Option<Duration>,
}

impl IdleLimits {
    /// Apply the setting `name` = `value` when it is one of the two (as a startup option or
    /// `SET` reads it); other names are left alone.
    pub fn apply(&mut self, name: &str, value: &str) -> Result<()> {
        match time_setting(name) {
            Some(IDLE_IN_TRANSACTION) => {
                self.in_transaction = parse_timeout(value, IDLE_IN_TRANSACTION)?
            }
            Some(IDLE_SESSION) => self.session = parse_timeout(value, IDLE_SESSION)?,
            _ => {}
        }
        Ok(())
    }
}

impl Session {
    /// `SET [SESSION | LOCAL] name { = | TO } value`.
    pub(super) fn set(&mut self, set: &Set) -> Result<Output> {
        if let Set::SetTransaction { modes, session, .. } = set {
            check_isolation(modes)?;
            // `SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL ...` is
            // `default_transaction_isolation`'s other spelling.
            let level = modes.iter().rev().find_map(|m| match m {
                TransactionMode::IsolationLevel(l) => Some(*l),
                _ => None,
            });
            if let (true, Some(level)) = (*session, level) {
                let repeatable = level == TransactionIsolationLevel::RepeatableRead;
                self.assign_isolation(repeatable, false);
            }
        }
        let Set::SingleAssignment {
            scope,
            variable,
            values,
            ..
        } = set
        else {
            return Ok(Output::Command("SET".into()));
        };
        let name = parameter_name(variable.0.iter().filter_map(|p| p.as_ident()));
        check_settable(&name)?;
        let local = matches!(scope, Some(ContextModifier::Local));
        if ISOLATION_SETTINGS
            .iter()
            .any(|s| name.eq_ignore_ascii_case(s))
        {
            let repeatable = match values.as_slice() {
                [Expr::Identifier(id)] if id.value.eq_ignore_ascii_case("default") => {
                    self.settings.repeatable_default.default
                }
                [v] => isolation_value(&name, &v.to_string())?,
                _ => {
                    return Err(SqlError::new(
                        INVALID_PARAMETER_VALUE,
                        format!("SET {name} takes only one argument"),
                    ))
                }
            };
            // `transaction_isolation` is the open transaction's own level: a block runs at
            // REPEATABLE READ whatever it says, and outside one it ends with the statement.
            if name.eq_ignore_ascii_case(ISOLATION_SETTINGS[0]) {
                self.assign_isolation(repeatable, local);
            }
            return Ok(Output::Command("SET".into()));
        }
        let Some(i) = time_setting(&name) else {
            return Ok(Output::Command("SET".into()));
        };
        let value = match values.as_slice() {
            [v] => timeout_value(v, i, self.settings.limits[i].default)?,
            _ => {
                return Err(SqlError::new(
                    INVALID_PARAMETER_VALUE,
                    format!("SET {} takes only one argument", TIME_SETTINGS[i]),
                ))
            }
        };
        // Outside a block the statement is its own transaction: SET LOCAL ends with it
        // (PostgreSQL warns and changes nothing).
        if !(local && self.status == Status::Idle) {
            self.settings.limits[i].assign(value, local);
        }
        Ok(Output::Command("SET".into()))
    }

    /// `default_transaction_isolation` set: `repeatable` for `repeatable read`.
    fn assign_isolation(&mut self, repeatable: bool, local: bool) {
        if !(local && self.status == Status::Idle) {
            self.settings.repeatable_default.assign(repeatable, local);
        }
    }

    /// `RESET name` / `RESET ALL` (`None`): back to the value the session started with.
    pub(super) fn reset_setting(&mut self, name: Option<&ObjectName>) -> Result<Output> {
        let name = name.map(|n| parameter_name(n.0.iter().filter_map(|p| p.as_ident())));
        if let Some(n) = &name {
            check_settable(n)?;
        }
        let named = |setting: &str| {
            name.as_deref()
                .is_none_or(|n| n.eq_ignore_ascii_case(setting))
        };
        for (i, setting) in TIME_SETTINGS.iter().enumerate() {
            if named(setting) {
                let v = self.settings.limits[i].default;
                self.settings.limits[i].assign(v, false);
            }
        }
        if named(ISOLATION_SETTINGS[0]) {
            let v = self.settings.repeatable_default.default;
            self.assign_isolation(v, false);
        }
        Ok(Output::Command("RESET".into()))
    }

    /// `SHOW` of a time limit or an isolation level; `42704` for a name PostgreSQL does not
    /// know; `None` for any other name (the caller decides).
    pub(super) fn show(&self, variable: &[Ident]) -> Option<Result<Output>> {
        let [name] = variable else { return None };
        let name = parameter_name([name]);
        // `SHOW ALL` is the one name of its own.
        if name != "all" && !name.contains('.') && known(&name).is_none() {
            return Some(Err(unrecognized(&name)));
        }
        if let Some(n) = ISOLATION_SETTINGS
            .iter()
            .find(|s| name.eq_ignore_ascii_case(s))
        {
            // A block runs at REPEATABLE READ; a statement outside one at the default.
            let repeatable = (n == &ISOLATION_SETTINGS[1] && self.status != Status::Idle)
                || self.settings.repeatable_default.value;
            let value = if repeatable {
                "repeatable read"
            } else {
                "read committed"
            };
            return Some(Ok(Output::Show {
                name: (*n).into(),
                value: value.into(),
            }));
        }
        let i = time_setting(&name)?;
        Some(Ok(Output::Show {
            name: TIME_SETTINGS[i].into(),
            value: show_timeout(self.settings.limits[i].value),
        }))
    }

    /// A setting given when the connection started (`options=-c statement_timeout=5s`) or
    /// by the server as its default: as `SET` outside any transaction, and what `RESET`
    /// goes back to.
    pub fn startup_setting(&mut self, name: &str, value: &str) -> Result<()> {
        if let Some(i) = time_setting(name) {
            let v = parse_timeout(value, i)?;
            self.settings.limits[i].start(v);
        } else if ISOLATION_SETTINGS
            .iter()
            .any(|s| name.eq_ignore_ascii_case(s))
        {
            let repeatable = isolation_value(name, value)?;
            if name.eq_ignore_ascii_case(ISOLATION_SETTINGS[0]) {
                self.settings.repeatable_default.start(repeatable);
            }
        }
        Ok(())
    }

    /// Start from these idle limits (the server's defaults): as `SET` outside any
    /// transaction, and what `RESET` goes back to.
    pub fn set_idle_defaults(&mut self, limits: IdleLimits) {
        for (i, v) in [
            (IDLE_IN_TRANSACTION, limits.in_transaction),
            (IDLE_SESSION, limits.session),
        ] {
            self.settings.limits[i].start(v);
        }
    }

    /// How long the client may keep the session waiting for its next message, as its
    /// settings say now.
    pub fn idle_limits(&self) -> IdleLimits {
        IdleLimits {
            in_transaction: self.settings.limits[IDLE_IN_TRANSACTION].value,
            session: self.settings.limits[IDLE_SESSION].value,
        }
    }

    /// The running statement's interrupt: [`crate::interrupt::Interrupt::cancel`] stops it.
    pub fn interrupt(&self) -> Arc<crate::interrupt::Interrupt> {
        self.interrupt.clone()
    }
}

/// A `SET` value of setting `i`: a number of ms, a string with a unit, or `DEFAULT` (the
/// value the session started with).
fn timeout_value(v: &Expr, i: usize, default: Limit) -> Result<Limit> {
    match v {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => parse_timeout(n, i),
            Value::SingleQuotedString(s) => parse_timeout(s, i),
            other => parse_timeout(&other.to_string(), i),
        },
        Expr::Identifier(id) if id.value.eq_ignore_ascii_case("default") => Ok(default),
        Expr::UnaryOp { .. } => parse_timeout(&v.to_string().replace(' ', ""), i),
        other => parse_timeout(&other.to_string(), i),
    }
}

/// PostgreSQL's reading of a time limit given by its name (`statement_timeout`,
/// `idle_in_transaction_session_timeout`, `idle_session_timeout`): a number of ms or a number
/// with a unit (`us`, `ms`, `s`, `min`, `h`, `d`), rounded to whole ms; `Ok(None)` is 0, no
/// limit. `None` for any other name.
pub fn parse_time_setting(name: &str, text: &str) -> Option<Result<Option<Duration>>> {
    time_setting(name).map(|i| parse_timeout(text, i))
}

/// PostgreSQL's reading of a time setting whose unit is ms: `200`, `1.5s`, `5 min`, `0`;
/// units us, ms, s, min, h, d; rounded to whole ms; 0 is no limit. `i` names the setting in
/// errors.
fn parse_timeout(text: &str, i: usize) -> Result<Limit> {
    let setting = TIME_SETTINGS[i];
    let invalid = |hint: Option<&str>| {
        let e = SqlError::new(
            INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"{setting}\": \"{text}\""),
        );
        match hint {
            Some(h) => e.with_hint(h.to_string()),
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
                "{ms} ms is outside the valid range for parameter \"{setting}\" (0 .. {MAX_MS})"
            ),
        ));
    }
    Ok((ms > 0).then(|| Duration::from_millis(ms as u64)))
}

/// How PostgreSQL shows it: the largest unit that divides it exactly.
fn show_timeout(d: Limit) -> String {
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

/// A value of the isolation setting `name` (`'repeatable read'`, `"read committed"`, quoted
/// or not): whether it is REPEATABLE READ. PostgreSQL's `22023` for a level it does not have;
/// SERIALIZABLE is refused (see [`check_isolation`]).
fn isolation_value(name: &str, value: &str) -> Result<bool> {
    let v = value.trim().trim_matches(|c| c == '\'' || c == '"').trim();
    match v.to_ascii_lowercase().as_str() {
        "serializable" => Err(serializable_refused()),
        "repeatable read" => Ok(true),
        "read committed" | "read uncommitted" => Ok(false),
        _ => Err(SqlError::new(
            INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"{name}\": \"{v}\""),
        )
        .with_hint(
            "Available values: serializable, repeatable read, read committed, read uncommitted.",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_names_are_looked_up_as_postgresql_15_does() {
        // The table is searched by halves: sorted, lower case, each name once.
        assert!(names::PARAMETERS.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(names::PARAMETERS
            .iter()
            .all(|(n, _)| *n == n.to_ascii_lowercase()));
        for ok in [
            "TimeZone",
            "search_path",
            "WORK_MEM",
            "statement_timeout",
            "a.b",
            "role",
        ] {
            assert!(check_settable(ok).is_ok(), "{ok}");
        }
        for (name, code, message) in [
            (
                "statment_timeout",
                "42704",
                "unrecognized configuration parameter \"statment_timeout\"",
            ),
            (
                "Max_Connections",
                "55P02",
                "parameter \"max_connections\" cannot be changed without restarting the server",
            ),
            (
                "archive_command",
                "55P02",
                "parameter \"archive_command\" cannot be changed now",
            ),
            (
                "log_connections",
                "55P02",
                "parameter \"log_connections\" cannot be set after connection start",
            ),
            (
                "server_version",
                "55P02",
                "parameter \"server_version\" cannot be changed",
            ),
        ] {
            let e = check_settable(name).unwrap_err();
            assert_eq!((e.code, e.message.as_str()), (code, message), "{name}");
        }
    }

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
            assert_eq!(
                show_timeout(parse_timeout(text, 0).unwrap()),
                shown,
                "{text}"
            );
        }
        let e = parse_timeout("-1", 0).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                "22023",
                "-1 ms is outside the valid range for parameter \"statement_timeout\" (0 .. 2147483647)"
            )
        );
        for bad in ["5 parsecs", "abc", "3000000000"] {
            let e = parse_timeout(bad, 0).unwrap_err();
            assert_eq!(
                e.message,
                format!("invalid value for parameter \"statement_timeout\": \"{bad}\"")
            );
        }
    }
}
