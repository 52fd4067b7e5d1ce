//! Rewrites of a parsed statement before it is planned: parameters bound, PostgreSQL's casts
//! and literals put in forms DataFusion reads (arrays, intervals, uuids, `tid`), `COLLATE`
//! dropped, and the questions the session asks of a statement (does it name `ctid`, call a
//! function, use `$n`).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions, visit_expressions_mut, Expr, Query, SetExpr, Statement,
};

use crate::error::{state, Result, SqlError};
use crate::relation::RelDef;
use crate::types::{Elem, SqlType};

/// `COLLATE "C"` compares bytes, as DataFusion's strings always do: drop the clause.
/// Drop `COLLATE` (byte order is how DataFusion compares strings anyway) and casts to `tid`
/// (a `ctid` is its text form here, `(0,1)`, and compares as text).
pub(crate) fn strip_collate(q: &mut Query) {
    let _ = visit_expressions_mut(q, strip_one);
}

/// [`strip_collate`] of one expression (the direct path's WHERE and values).
pub(crate) fn strip_collate_expr(e: &mut Expr) {
    let _ = visit_expressions_mut(e, strip_one);
}

fn strip_one(e: &mut Expr) -> ControlFlow<()> {
    {
        match e {
            Expr::Collate { expr, .. } => *e = (**expr).clone(),
            Expr::Cast {
                expr, data_type, ..
            } if data_type.to_string().eq_ignore_ascii_case("tid") => *e = tid_text(expr),
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    }
}

/// A value cast to `tid`, as the text a `ctid` compares with here (`(0,1)`). PostgreSQL's tid
/// input skips what comes before `(` and reads the numbers leniently, and DuckDB's postgres
/// extension relies on that: it sends its ctids back quoted (`'(0,2)'`). A text literal is
/// read here; any other value is read the same way by a regular expression at run time (a
/// value that is no tid stays as it is and matches no row).
fn tid_text(expr: &Expr) -> Expr {
    use datafusion::sql::sqlparser::ast::Value as SqlValue;
    use datafusion::sql::sqlparser::ast::{
        Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, ObjectName,
    };
    const TID: &str = r"^[^(]*\(\s*0*([0-9]+)\s*,\s*0*([0-9]+)\s*\).*$";
    let lit = |t: &str| Expr::Value(SqlValue::SingleQuotedString(t.to_string()).into());
    if let Expr::Value(v) = expr {
        if let SqlValue::SingleQuotedString(t) = &v.value {
            let parsed = t.split_once('(').and_then(|(_, rest)| {
                let (inner, _) = rest.split_once(')')?;
                let (block, offset) = inner.split_once(',')?;
                Some(format!(
                    "({},{})",
                    block.trim().parse::<u64>().ok()?,
                    offset.trim().parse::<u64>().ok()?
                ))
            });
            return lit(parsed.as_deref().unwrap_or(t));
        }
    }
    let arg = |e: Expr| FunctionArg::Unnamed(FunctionArgExpr::Expr(e));
    Expr::Function(Function {
        name: ObjectName::from(vec![datafusion::sql::sqlparser::ast::Ident::new(
            "regexp_replace",
        )]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![arg(expr.clone()), arg(lit(TID)), arg(lit("(${1},${2})"))],
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

fn is_ctid(e: &Expr) -> bool {
    match e {
        Expr::Identifier(i) => i.value.eq_ignore_ascii_case("ctid"),
        Expr::CompoundIdentifier(parts) => parts
            .last()
            .is_some_and(|i| i.value.eq_ignore_ascii_case("ctid")),
        _ => false,
    }
}

/// Whether a query calls the function `name`.
pub(crate) fn calls_function(q: &Query, name: &str) -> bool {
    visit_expressions(q, |e| match e {
        Expr::Function(f)
            if f.name
                .0
                .last()
                .is_some_and(|p| p.to_string().trim_matches('"').eq_ignore_ascii_case(name)) =>
        {
            ControlFlow::Break(())
        }
        _ => ControlFlow::Continue(()),
    })
    .is_break()
}

pub(crate) fn mentions_ctid(q: &Query) -> bool {
    visit_expressions(q, |e| {
        if is_ctid(e) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .is_break()
}

/// `*` never includes `ctid` in PostgreSQL, but a table exposes `ctid` to a statement that
/// names it, and DataFusion's `*` takes every column: so `SELECT ctid, * FROM t` would give
/// `ctid` twice. In each SELECT of `q` (its set operations, derived tables and CTEs too) that
/// reads one plain table, without joins, `*` and `t.*` leave `ctid` out. A SELECT over a CTE,
/// a system catalog or a join is left as it is.
pub(crate) fn hide_ctid_from_wildcards(q: &mut Query) {
    let ctes: Vec<String> = q
        .with
        .as_ref()
        .map(|w| {
            w.cte_tables
                .iter()
                .map(|c| c.alias.name.value.to_lowercase())
                .collect()
        })
        .unwrap_or_default();
    if let Some(with) = q.with.as_mut() {
        for cte in &mut with.cte_tables {
            hide_ctid_from_wildcards(&mut cte.query);
        }
    }
    hide_in_set_expr(&mut q.body, &ctes);
}

fn hide_in_set_expr(body: &mut SetExpr, ctes: &[String]) {
    use datafusion::sql::sqlparser::ast::{
        ExcludeSelectItem, Ident, ObjectName, SelectItem, TableFactor,
    };
    match body {
        SetExpr::Select(select) => {
            for t in &mut select.from {
                for f in std::iter::once(&mut t.relation)
                    .chain(t.joins.iter_mut().map(|j| &mut j.relation))
                {
                    if let TableFactor::Derived { subquery, .. } = f {
                        hide_ctid_from_wildcards(subquery);
                    }
                }
            }
            let [only] = select.from.as_slice() else {
                return;
            };
            let TableFactor::Table {
                name, args: None, ..
            } = &only.relation
            else {
                return;
            };
            let parts: Vec<String> = name
                .0
                .iter()
                .filter_map(|p| p.as_ident().map(|i| i.value.to_lowercase()))
                .collect();
            let system =
                parts.len() > 1 && matches!(parts[0].as_str(), "pg_catalog" | "information_schema");
            let cte = parts.len() == 1 && ctes.contains(&parts[0]);
            if !only.joins.is_empty() || system || cte {
                return;
            }
            for item in &mut select.projection {
                let options = match item {
                    SelectItem::Wildcard(o) | SelectItem::QualifiedWildcard(_, o) => o,
                    _ => continue,
                };
                if options.opt_exclude.is_none() && options.opt_except.is_none() {
                    options.opt_exclude = Some(ExcludeSelectItem::Single(ObjectName::from(vec![
                        Ident::new("ctid"),
                    ])));
                }
            }
        }
        SetExpr::Query(q) => hide_ctid_from_wildcards(q),
        SetExpr::SetOperation { left, right, .. } => {
            hide_in_set_expr(left, ctes);
            hide_in_set_expr(right, ctes);
        }
        _ => {}
    }
}

pub(crate) fn mentions_ctid_stmt(s: &Statement) -> bool {
    visit_expressions(s, |e| {
        if is_ctid(e) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .is_break()
}

/// The `n` of a `$n` placeholder expression.
pub(crate) fn placeholder_number(e: &Expr) -> Option<usize> {
    use datafusion::sql::sqlparser::ast::Value as SqlValue;
    match e {
        Expr::Value(v) => match &v.value {
            SqlValue::Placeholder(p) => p.strip_prefix('$')?.parse().ok().filter(|n| *n > 0),
            _ => None,
        },
        _ => None,
    }
}

/// The highest `$n` in a statement (0 for none).
pub(crate) fn max_placeholder(stmt: &Statement) -> usize {
    let mut max = 0;
    let _ = visit_expressions(stmt, |e| {
        if let Some(n) = placeholder_number(e) {
            max = max.max(n);
        }
        ControlFlow::<()>::Continue(())
    });
    max
}

/// Put `params[n - 1]` in the place of each `$n`.
pub(crate) fn bind_parameters(stmt: &mut Statement, params: &[Expr]) -> Result<()> {
    let mut missing = None;
    let _ = visit_expressions_mut(stmt, |e| {
        let name = match e {
            Expr::Value(v) => match &v.value {
                datafusion::sql::sqlparser::ast::Value::Placeholder(p) => p.clone(),
                _ => return ControlFlow::Continue(()),
            },
            _ => return ControlFlow::Continue(()),
        };
        match placeholder_number(e).and_then(|n| params.get(n - 1)) {
            Some(value) => *e = value.clone(),
            None => {
                missing = Some(name);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    });
    match missing {
        Some(p) => Err(SqlError::new("42P02", format!("there is no parameter {p}"))),
        None => Ok(()),
    }
}

/// The text of a number literal, with its sign (`-1.5e-07`); `None` for any other expression.
fn number_literal(e: &Expr) -> Option<String> {
    use datafusion::sql::sqlparser::ast::{UnaryOperator, Value as SqlValue};
    match e {
        Expr::Value(v) => match &v.value {
            SqlValue::Number(n, _) => Some(n.clone()),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => number_literal(expr).map(|n| format!("-{n}")),
        Expr::Nested(inner) => number_literal(inner),
        _ => None,
    }
}

/// In `INSERT ... VALUES`, PostgreSQL converts each value to its target column's type on its
/// own; DataFusion first unifies each VALUES column into one type, which can fail where
/// PostgreSQL succeeds (a double column given `CAST('inf' AS DOUBLE)` in one row and the exact
/// literal `3.4e+38` in another unifies to a decimal that cannot hold infinity). So every
/// value bound for a numeric or interval column is cast to that column's type first (interval
/// text read with PostgreSQL's syntax). Other types are
/// left to [`SqlType::coerce`], which reads PostgreSQL's text forms (bytea, interval) that a
/// DataFusion cast would not. A string bound for an integer column is read here with
/// PostgreSQL's integer input rules (its error is PostgreSQL's, `22P02` or `22003`), and a
/// number bound for a text column becomes its text, so that a VALUES column mixing strings and
/// numbers is not unified to a number first (`INSERT INTO t (v) VALUES ('x'), (9)` into a
/// `varchar` column stores `x` and `9`).
pub(crate) fn cast_values_to_targets(
    source: &mut Query,
    rel: &RelDef,
    targets: &[usize],
) -> Result<()> {
    use datafusion::sql::sqlparser::ast::Value as SqlValue;
    use datafusion::sql::sqlparser::ast::{CastKind, DataType as D, ExactNumberInfo};
    let SetExpr::Values(values) = source.body.as_mut() else {
        return Ok(());
    };
    for row in &mut values.rows {
        for (j, e) in row.iter_mut().enumerate() {
            let Some(col) = targets.get(j).and_then(|t| rel.columns.get(*t)) else {
                continue;
            };
            let data_type = match col.ty {
                SqlType::BigInt | SqlType::Integer | SqlType::SmallInt => {
                    if let Expr::Value(v) = e {
                        if let SqlValue::SingleQuotedString(text) = &v.value {
                            *e = integer_literal(pg_integer(text, col.ty)?);
                        }
                    }
                    match col.ty {
                        SqlType::BigInt => D::BigInt(None),
                        SqlType::Integer => D::Int(None),
                        _ => D::SmallInt(None),
                    }
                }
                SqlType::Text => {
                    // An integer's text is its value's (`007` is `7`); other numbers are cast
                    // by DataFusion.
                    if let Some(n) = number_literal(e) {
                        *e = match n.parse::<i128>() {
                            Ok(i) => {
                                Expr::Value(SqlValue::SingleQuotedString(i.to_string()).into())
                            }
                            Err(_) => Expr::Cast {
                                kind: CastKind::Cast,
                                expr: Box::new(e.clone()),
                                data_type: D::Varchar(None),
                                array: false,
                                format: None,
                            },
                        };
                    }
                    continue;
                }
                SqlType::Double | SqlType::Real => {
                    // A number literal goes in as its text, which parses to the nearest float;
                    // through an exact decimal it could land one unit off (3.4e+38).
                    if let Some(text) = number_literal(e) {
                        *e = Expr::Value(SqlValue::SingleQuotedString(text).into());
                    }
                    if col.ty == SqlType::Double {
                        D::DoublePrecision
                    } else {
                        D::Real
                    }
                }
                SqlType::Numeric(p, s) => D::Decimal(ExactNumberInfo::PrecisionAndScale(
                    u64::from(p),
                    i64::from(s),
                )),
                SqlType::Array(elem) => {
                    // A text literal (`'{1,2}'`) becomes the array it spells; one that does
                    // not parse is left to `coerce`, which names the column in its error.
                    if let Expr::Value(v) = e {
                        if let SqlValue::SingleQuotedString(text) = &v.value {
                            if let Ok(a) = array_expr(text, elem) {
                                *e = a;
                            }
                            continue;
                        }
                    }
                    array_sql_type(elem)
                }
                SqlType::Interval => {
                    // A text literal is read with PostgreSQL's syntax here; one that does not
                    // parse is left to `coerce`, which names the column in its error.
                    if let Expr::Value(v) = e {
                        if let SqlValue::SingleQuotedString(text) = &mut v.value {
                            match crate::temporal::Interval::parse(text) {
                                Ok(iv) => *text = iv.to_datafusion_text(),
                                Err(_) => continue,
                            }
                        }
                    }
                    D::Interval {
                        fields: None,
                        precision: None,
                    }
                }
                _ => continue,
            };
            *e = Expr::Cast {
                kind: CastKind::Cast,
                expr: Box::new(e.clone()),
                data_type,
                array: false,
                format: None,
            };
        }
    }
    Ok(())
}

/// `text` read as PostgreSQL 15 reads an integer of type `ty` (`int2`, `int4`, `int8`):
/// optional blanks around an optional sign and decimal digits.
fn pg_integer(text: &str, ty: SqlType) -> Result<i64> {
    let (name, min, max) = match ty {
        SqlType::SmallInt => ("smallint", i64::from(i16::MIN), i64::from(i16::MAX)),
        SqlType::Integer => ("integer", i64::from(i32::MIN), i64::from(i32::MAX)),
        _ => ("bigint", i64::MIN, i64::MAX),
    };
    let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SqlError::new(
            state::INVALID_TEXT,
            format!("invalid input syntax for type {name}: \"{text}\""),
        ));
    }
    t.parse::<i64>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| {
            SqlError::new(
                state::OUT_OF_RANGE,
                format!("value \"{text}\" is out of range for type {name}"),
            )
        })
}

/// The literal of `n` as the parser gives it (a negative number is a negated literal).
fn integer_literal(n: i64) -> Expr {
    use datafusion::sql::sqlparser::ast::{UnaryOperator, Value as SqlValue};
    let digits = Expr::Value(SqlValue::Number(n.unsigned_abs().to_string(), false).into());
    if n < 0 {
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr: Box::new(digits),
        }
    } else {
        digits
    }
}

/// The SQL type DataFusion plans an array of `elem` as (`uuid[]` is `varchar[]`, as a uuid
/// is its text).
fn array_sql_type(elem: Elem) -> datafusion::sql::sqlparser::ast::DataType {
    use datafusion::sql::sqlparser::ast::{
        ArrayElemTypeDef, DataType as D, ExactNumberInfo, TimezoneInfo,
    };
    let inner = match elem {
        Elem::BigInt => D::BigInt(None),
        Elem::Integer => D::Int(None),
        Elem::SmallInt => D::SmallInt(None),
        Elem::Boolean => D::Boolean,
        Elem::Text | Elem::Uuid | Elem::TimeTz => D::Varchar(None),
        Elem::Date => D::Date,
        Elem::Timestamp => D::Timestamp(None, TimezoneInfo::None),
        Elem::TimestampTz => D::Timestamp(None, TimezoneInfo::WithTimeZone),
        Elem::Time => D::Time(None, TimezoneInfo::None),
        Elem::Interval => D::Interval {
            fields: None,
            precision: None,
        },
        Elem::Bytea => D::Bytea,
        Elem::Double => D::DoublePrecision,
        Elem::Real => D::Real,
        Elem::Numeric(p, s) => D::Decimal(ExactNumberInfo::PrecisionAndScale(
            u64::from(p),
            i64::from(s),
        )),
    };
    D::Array(ArrayElemTypeDef::SquareBracket(Box::new(inner), None))
}

/// PostgreSQL's array text form (`{1,NULL,3}`) of `elem`s as an expression DataFusion plans:
/// `CAST(ARRAY['1', NULL, '3'] AS integer[])`. Malformed text is refused with `22P02`; a uuid
/// element is checked and written in its canonical form.
fn array_expr(text: &str, elem: Elem) -> Result<Expr> {
    use datafusion::sql::sqlparser::ast::{Array, CastKind, Value as SqlValue};
    let items = crate::types::parse_array_literal(text)?;
    // Each element is checked here, so that a bad one is refused with PostgreSQL's error
    // rather than DataFusion's.
    crate::types::check_elements(&items, elem)?;
    let mut elems = Vec::with_capacity(items.len());
    for item in items {
        elems.push(Expr::Value(
            match item {
                None => SqlValue::Null,
                Some(t) if elem == Elem::Uuid => {
                    SqlValue::SingleQuotedString(crate::types::canonical_uuid(&t)?)
                }
                // Elements whose PostgreSQL text a DataFusion cast does not read go in as
                // the value itself: bytea as a hex literal, an interval in DataFusion's
                // syntax, a time with time zone canonical.
                Some(t) if elem == Elem::Bytea => SqlValue::HexStringLiteral(
                    crate::types::parse_bytea(&t)
                        .map_err(|m| SqlError::new(crate::types::bytea_error_code(&t), m))?
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect(),
                ),
                Some(t) if elem == Elem::Interval => SqlValue::SingleQuotedString(
                    crate::temporal::Interval::parse(&t)
                        .map_err(|m| SqlError::new(state::INVALID_DATETIME, m))?
                        .to_datafusion_text(),
                ),
                Some(t) if elem == Elem::TimeTz => SqlValue::SingleQuotedString(
                    crate::temporal::TimeTz::parse(&t)
                        .map_err(|m| SqlError::new(state::INVALID_DATETIME, m))?
                        .to_pg_text(),
                ),
                Some(t) => SqlValue::SingleQuotedString(t),
            }
            .into(),
        ));
    }
    Ok(Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(Expr::Array(Array {
            elem: elems,
            named: true,
        })),
        data_type: array_sql_type(elem),
        array: false,
        format: None,
    })
}

/// Casts DataFusion has no type for, as this layer stores them: `uuid` and `time with time
/// zone` are their text (a column of either type checks and canonicalises what it is given),
/// `tid` is a ctid's text form. A text literal cast to `interval` is read with PostgreSQL's
/// interval syntax (`1 year 2 mons 04:05:06`, which DataFusion's parser refuses) and handed
/// on in a form DataFusion reads. A text literal cast to `uuid` or `time with time zone` is
/// checked and written in its canonical form here, so that it compares equal to the stored
/// values (`'A0EEBC99-...'::uuid` finds the row PostgreSQL finds); one that does not parse is
/// refused with PostgreSQL's SQLSTATE.
pub(crate) fn rewrite_casts(stmt: &mut Statement) -> Result<()> {
    use datafusion::sql::sqlparser::ast::DataType as SqlDataType;
    use datafusion::sql::sqlparser::ast::Value as SqlValue;
    let mut failed = None;
    let _ = visit_expressions_mut(stmt, |e| {
        // `'{1,2}'::integer[]`: the text read with PostgreSQL's array syntax.
        if let Expr::Cast {
            expr, data_type, ..
        } = e
        {
            if let Ok(SqlType::Array(elem)) = SqlType::parse(&data_type.to_string()) {
                if let Expr::Value(v) = expr.as_ref() {
                    if let SqlValue::SingleQuotedString(text) = &v.value {
                        match array_expr(text, elem) {
                            Ok(a) => *e = a,
                            Err(err) => {
                                failed = Some(err);
                                return ControlFlow::Break(());
                            }
                        }
                        return ControlFlow::Continue(());
                    }
                }
                // Any other value cast to an array type: the type as DataFusion names it.
                *data_type = array_sql_type(elem);
                return ControlFlow::Continue(());
            }
        }
        if let Expr::Cast {
            expr, data_type, ..
        } = e
        {
            let name = data_type.to_string().to_ascii_lowercase();
            let literal = match expr.as_mut() {
                Expr::Value(v) => match &mut v.value {
                    SqlValue::SingleQuotedString(text) => Some(text),
                    _ => None,
                },
                _ => None,
            };
            let fixed = match (name.as_str(), literal) {
                ("uuid", Some(text)) => crate::types::canonical_uuid(text).map(|c| *text = c),
                ("timetz" | "time with time zone", Some(text)) => {
                    crate::temporal::TimeTz::parse(text)
                        .map(|t| *text = t.to_pg_text())
                        .map_err(|m| SqlError::new(state::INVALID_DATETIME, m))
                }
                ("interval", Some(text)) => crate::temporal::Interval::parse(text)
                    .map(|iv| *text = iv.to_datafusion_text())
                    .map_err(|m| SqlError::new(state::INVALID_DATETIME, m)),
                _ => Ok(()),
            };
            if let Err(err) = fixed {
                failed = Some(err);
                return ControlFlow::Break(());
            }
            if name == "tid" {
                *e = tid_text(expr);
            } else if matches!(name.as_str(), "uuid" | "timetz" | "time with time zone") {
                *data_type = SqlDataType::Varchar(None);
            }
        }
        ControlFlow::<()>::Continue(())
    });
    failed.map_or(Ok(()), Err)
}

/// `WITH v(c1, ...) AS (VALUES ...) UPDATE t SET ... FROM v WHERE ...` (how DuckLake updates a
/// table's column statistics on every commit) as one single-table UPDATE per VALUES row, each
/// with that row's values in place of `v`'s columns, so that each can read only the key range
/// its WHERE names instead of joining the whole table. `None` (the statement stays whole, for
/// DataFusion) unless the rewrite keeps PostgreSQL's meaning:
/// - one CTE, not recursive, of a bare `VALUES` list of constants, its columns named, each
///   column's values of one kind (numbers, strings, booleans, one cast; NULL anywhere), as
///   PostgreSQL would type them;
/// - the FROM is that CTE alone, and no subquery anywhere;
/// - every column name the SET and WHERE use is the CTE's or the target's, not both (PostgreSQL
///   calls a name of both ambiguous), and the CTE's are qualified, if at all, by its name.
///
/// The caller must still refuse the rewrite when two rows of the list update one row (PostgreSQL
/// then uses one of them; the rewrite would apply both).
pub(crate) fn update_per_values_row(
    with: &datafusion::sql::sqlparser::ast::With,
    u: &datafusion::sql::sqlparser::ast::Update,
    rel: &RelDef,
) -> Option<Vec<datafusion::sql::sqlparser::ast::Update>> {
    use datafusion::sql::sqlparser::ast::{TableFactor, UpdateTableFromKind};
    let [cte] = with.cte_tables.as_slice() else {
        return None;
    };
    if with.recursive || cte.from.is_some() || cte.alias.columns.is_empty() {
        return None;
    }
    let q = &cte.query;
    if q.with.is_some()
        || q.order_by.is_some()
        || q.limit_clause.is_some()
        || q.fetch.is_some()
        || !q.locks.is_empty()
    {
        return None;
    }
    let SetExpr::Values(values) = q.body.as_ref() else {
        return None;
    };
    let names: Vec<String> = cte
        .alias
        .columns
        .iter()
        .map(|c| crate::catalog::fold(&c.name))
        .collect();
    if cte.alias.columns.iter().any(|c| c.data_type.is_some())
        || values.rows.iter().any(|r| r.len() != names.len())
        || values.rows.is_empty()
    {
        return None;
    }
    for j in 0..names.len() {
        let mut kinds = values.rows.iter().filter_map(|r| constant_kind(&r[j]));
        let first = kinds.next();
        if values
            .rows
            .iter()
            .any(|r| constant_kind(&r[j]).is_none() && !is_null(&r[j]))
            || kinds.any(|k| Some(k) != first.clone())
        {
            return None;
        }
    }
    let cte_name = crate::catalog::fold(&cte.alias.name);
    let Some(UpdateTableFromKind::AfterSet(from) | UpdateTableFromKind::BeforeSet(from)) = &u.from
    else {
        return None;
    };
    let [twj] = from.as_slice() else { return None };
    let TableFactor::Table {
        name, alias, args, ..
    } = &twj.relation
    else {
        return None;
    };
    if !twj.joins.is_empty()
        || args.is_some()
        || name.0.len() != 1
        || name.0[0].as_ident().map(crate::catalog::fold) != Some(cte_name.clone())
        || u.returning.is_some()
        || u.limit.is_some()
        || !u.order_by.is_empty()
    {
        return None;
    }
    let qualifier = match alias {
        Some(a) if !a.columns.is_empty() => return None,
        Some(a) => crate::catalog::fold(&a.name),
        None => cte_name,
    };
    let mut out = Vec::with_capacity(values.rows.len());
    for row in &values.rows {
        let mut one = u.clone();
        one.from = None;
        let mut ok = true;
        let mut put = |e: &mut Expr| {
            let _ = visit_expressions_mut(e, |x| {
                let col = match x {
                    Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => {
                        ok = false;
                        return ControlFlow::Break(());
                    }
                    Expr::Identifier(i) => {
                        let n = crate::catalog::fold(i);
                        let in_cte = names.iter().position(|c| *c == n);
                        if in_cte.is_some() && rel.column_index(&n).is_ok() {
                            ok = false;
                            return ControlFlow::Break(());
                        }
                        in_cte
                    }
                    Expr::CompoundIdentifier(parts) => match parts.as_slice() {
                        [q, c] if crate::catalog::fold(q) == qualifier => {
                            let n = crate::catalog::fold(c);
                            match names.iter().position(|x| *x == n) {
                                Some(p) => Some(p),
                                None => {
                                    ok = false;
                                    return ControlFlow::Break(());
                                }
                            }
                        }
                        _ => None,
                    },
                    _ => None,
                };
                if let Some(p) = col {
                    *x = Expr::Nested(Box::new(row[p].clone()));
                }
                ControlFlow::Continue(())
            });
        };
        for a in &mut one.assignments {
            put(&mut a.value);
        }
        if let Some(w) = one.selection.as_mut() {
            put(w);
        }
        if !ok {
            return None;
        }
        out.push(one);
    }
    Some(out)
}

fn is_null(e: &Expr) -> bool {
    use datafusion::sql::sqlparser::ast::Value as SqlValue;
    matches!(e, Expr::Value(v) if matches!(v.value, SqlValue::Null))
}

/// What kind of constant `e` is, for a VALUES column's type: `None` for NULL or anything that
/// is not a constant.
fn constant_kind(e: &Expr) -> Option<String> {
    use datafusion::sql::sqlparser::ast::{UnaryOperator, Value as SqlValue};
    match e {
        Expr::Value(v) => match &v.value {
            SqlValue::Number(..) => Some("number".into()),
            SqlValue::SingleQuotedString(_) => Some("string".into()),
            SqlValue::Boolean(_) => Some("boolean".into()),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => constant_kind(expr).filter(|k| k == "number"),
        Expr::Nested(inner) => constant_kind(inner),
        Expr::Cast {
            expr, data_type, ..
        } if constant_kind(expr).is_some() || is_null(expr) => Some(format!("cast {data_type}")),
        _ => None,
    }
}

/// Whether `q` reads `pg_catalog` and `information_schema` tables and nothing else (a bare
/// name of a table of `catalog`'s `public` would be that table), and calls no function (whose
/// value could depend on the session or the time): its answer then depends only on the
/// catalog and the database name.
pub(crate) fn reads_system_catalogs_only(q: &Query, catalog: &crate::catalog::Catalog) -> bool {
    use crate::pg_catalog::{INFORMATION_SCHEMA_TABLES, PG_CATALOG_TABLES};
    let mut any = false;
    let others = datafusion::sql::sqlparser::ast::visit_relations(q, |name| {
        let parts: Vec<String> = name
            .0
            .iter()
            .map(|p| p.as_ident().map(crate::catalog::fold).unwrap_or_default())
            .collect();
        let system = match parts.as_slice() {
            [t] => {
                PG_CATALOG_TABLES.contains(&t.as_str())
                    && !catalog
                        .tables
                        .contains_key(&("public".to_string(), t.clone()))
            }
            [s, t] if s == "pg_catalog" => PG_CATALOG_TABLES.contains(&t.as_str()),
            [s, t] if s == "information_schema" => INFORMATION_SCHEMA_TABLES.contains(&t.as_str()),
            _ => false,
        };
        any = true;
        if system {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        }
    })
    .is_break();
    let calls = visit_expressions(q, |e| match e {
        Expr::Function(_) => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_break();
    any && !others && !calls
}
