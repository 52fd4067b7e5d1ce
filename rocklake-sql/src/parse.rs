//! Parsing SQL texts, with the parse of each text's *shape* kept.
//!
//! DuckLake sends the same few statements over and over with different literals (a commit's
//! `INSERT INTO ducklake_snapshot VALUES (12, ...)`, then `(13, ...)`), and sqlparser spends
//! most of a statement's parse on the parser, not on the tokenizer. So a text is tokenized, its
//! number and single-quoted string literals are taken out (each replaced by a placeholder of
//! our own), and the token sequence that remains — the shape — is the key of a parse kept from
//! an earlier text. A text of a known shape costs a tokenization, a clone of the kept
//! statements and putting its own literals back in.
//!
//! A shape is kept only when its parse, literals put back, equals the parse of the text itself
//! (sqlparser's equality, which ignores source positions); a shape whose parse differs or fails
//! (a literal where the grammar wants a literal token, such as `varchar(10)` or `DATE '...'`
//! in some positions) is remembered as one to parse whole. Errors are always the parse of the
//! text itself. The literals' kinds (number or string, and a number's `L` suffix) are part of
//! the shape, and so is every other token, whitespace included, so two texts share a parse only
//! when they differ in literal values alone.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::sql::sqlparser::ast::{Statement, Value, ValueWithSpan, VisitMut, VisitorMut};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

/// Shapes kept at most; when full, all are dropped (DuckLake's texts come back within a few
/// commits, so the working set is rebuilt at once).
const SHAPES: usize = 1024;

/// Texts longer than this are parsed whole: a bulk `INSERT ... VALUES` of thousands of rows is
/// rarely sent twice in the same shape, and keeping it would hold its whole parse.
const LONGEST: usize = 64 * 1024;

/// The prefix of our placeholders: `#` never follows `$` in a placeholder the tokenizer makes,
/// so no client text can name one.
const MARK: &str = "$#";

/// A literal taken out of a text.
#[derive(Debug)]
enum Literal {
    Number(String, bool),
    Text(String),
}

/// What is kept for a shape.
#[derive(Debug)]
enum Kept {
    /// The statements, with our placeholders where the literals were.
    Parsed(Vec<Statement>),
    /// The shape's parse is not the text's: parse such texts whole.
    Whole,
}

/// The parses kept by shape, shared by a database's sessions.
#[derive(Debug, Default)]
pub struct ParseCache {
    /// Keyed by the token sequence with DataFusion's hash map (hashbrown with its randomly
    /// seeded default hasher): hashing a shape with the standard library's SipHash cost more
    /// than a tenth of a kept parse.
    shapes: Mutex<datafusion::common::HashMap<Vec<Token>, Arc<Kept>>>,
    hits: AtomicU64,
}

impl ParseCache {
    /// How many texts were answered from a kept parse.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Parse `sql` as PostgreSQL's dialect does (`Parser::parse_sql`), using a kept parse of
    /// its shape when there is one.
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>, ParserError> {
        let dialect = PostgreSqlDialect {};
        if sql.len() > LONGEST {
            return Parser::parse_sql(&dialect, sql);
        }
        let Ok(tokens) = Tokenizer::new(&dialect, sql).tokenize_with_location() else {
            return Parser::parse_sql(&dialect, sql);
        };
        let mut shape = Vec::with_capacity(tokens.len());
        let mut spans = Vec::with_capacity(tokens.len());
        let mut literals = Vec::new();
        for TokenWithSpan { token, span } in tokens {
            let token = match token {
                // The literal's kind is in the placeholder, so it is part of the shape.
                Token::Number(n, long) => {
                    let kind = if long { 'L' } else { 'n' };
                    literals.push(Literal::Number(n, long));
                    Token::Placeholder(placeholder(kind, literals.len() - 1))
                }
                Token::SingleQuotedString(s) => {
                    literals.push(Literal::Text(s));
                    Token::Placeholder(placeholder('s', literals.len() - 1))
                }
                // A client's own placeholder that looks like ours (only possible if the
                // tokenizer ever makes one): parse whole.
                Token::Placeholder(p) if p.starts_with(MARK) => {
                    return Parser::parse_sql(&dialect, sql);
                }
                other => other,
            };
            shape.push(token);
            spans.push(span);
        }
        let kept = self
            .shapes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&shape)
            .cloned();
        match kept.as_deref() {
            Some(Kept::Parsed(statements)) => {
                if let Some(out) = fill(statements.clone(), &literals) {
                    self.hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(out);
                }
                Parser::parse_sql(&dialect, sql)
            }
            Some(Kept::Whole) => Parser::parse_sql(&dialect, sql),
            None => {
                let whole = Parser::parse_sql(&dialect, sql);
                let with_spans = shape
                    .iter()
                    .cloned()
                    .zip(spans)
                    .map(|(token, span)| TokenWithSpan { token, span })
                    .collect();
                let parsed = Parser::new(&dialect)
                    .with_tokens_with_locations(with_spans)
                    .parse_statements();
                let kept = match (&whole, parsed) {
                    (Ok(w), Ok(p)) if fill(p.clone(), &literals).as_ref() == Some(w) => {
                        Kept::Parsed(p)
                    }
                    _ => Kept::Whole,
                };
                let mut shapes = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
                if shapes.len() >= SHAPES {
                    shapes.clear();
                }
                shapes.insert(shape, Arc::new(kept));
                whole
            }
        }
    }
}

/// The placeholder of the `i`-th literal, of `kind`: `$#` `kind` `i` (written out by hand:
/// `format!` cost a few percent of a kept parse, once per literal).
fn placeholder(kind: char, i: usize) -> String {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = i;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let mut out = String::with_capacity(MARK.len() + 1 + digits.len() - at);
    out.push_str(MARK);
    out.push(kind);
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
    out
}

/// Put `literals` back into `statements` in place of our placeholders; `None` unless each
/// literal went back exactly once.
fn fill(mut statements: Vec<Statement>, literals: &[Literal]) -> Option<Vec<Statement>> {
    struct Filler<'a> {
        literals: &'a [Literal],
        used: Vec<bool>,
        bad: bool,
    }
    impl VisitorMut for Filler<'_> {
        type Break = ();
        fn pre_visit_value(&mut self, v: &mut ValueWithSpan) -> ControlFlow<()> {
            let Value::Placeholder(p) = &v.value else {
                return ControlFlow::Continue(());
            };
            let Some(i) = p.strip_prefix(MARK) else {
                return ControlFlow::Continue(());
            };
            let Some(i) = i
                .get(1..)
                .and_then(|i| i.parse::<usize>().ok())
                .filter(|i| *i < self.literals.len())
            else {
                self.bad = true;
                return ControlFlow::Break(());
            };
            if std::mem::replace(&mut self.used[i], true) {
                self.bad = true;
                return ControlFlow::Break(());
            }
            v.value = match &self.literals[i] {
                Literal::Number(n, long) => Value::Number(n.clone(), *long),
                Literal::Text(s) => Value::SingleQuotedString(s.clone()),
            };
            ControlFlow::Continue(())
        }
    }
    let mut f = Filler {
        literals,
        used: vec![false; literals.len()],
        bad: false,
    };
    let _ = statements.visit(&mut f);
    (!f.bad && f.used.iter().all(|u| *u)).then_some(statements)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(sql: &str) -> Vec<Statement> {
        Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap()
    }

    #[test]
    fn texts_of_one_shape_share_a_parse_and_keep_their_own_literals() {
        let cache = ParseCache::default();
        let a = "INSERT INTO t VALUES (1, 'x', -2.5, NULL); UPDATE t SET v = v + 10 WHERE id = 3";
        let b =
            "INSERT INTO t VALUES (7, 'it''s', -9.75, NULL); UPDATE t SET v = v + 11 WHERE id = 4";
        assert_eq!(cache.parse(a).unwrap(), plain(a));
        assert_eq!(cache.hits(), 0);
        let got = cache.parse(b).unwrap();
        assert_eq!(cache.hits(), 1);
        assert_eq!(got, plain(b));
        assert_eq!(got[1].to_string(), "UPDATE t SET v = v + 11 WHERE id = 4");
    }

    #[test]
    fn a_literal_of_another_kind_is_another_shape() {
        let cache = ParseCache::default();
        cache.parse("SELECT 1 FROM t").unwrap();
        let b = "SELECT '1' FROM t";
        assert_eq!(cache.parse(b).unwrap(), plain(b));
        assert_eq!(cache.hits(), 0);
    }

    #[test]
    fn shapes_whose_grammar_wants_a_literal_are_parsed_whole() {
        let cache = ParseCache::default();
        for sql in [
            "CREATE TABLE t (a VARCHAR(10), b NUMERIC(18, 3))",
            "CREATE TABLE t (a VARCHAR(12), b NUMERIC(10, 2))",
            "SELECT x::numeric(10, 2) FROM t",
            "SELECT x::numeric(12, 4) FROM t",
            "SELECT 'a' 'b'",
            "SELECT 'c' 'd'",
            // A quoted name after a dot: the tokenizer's string, an identifier to the parser.
            "SELECT t.'x' FROM t",
            "SELECT t.'y' FROM t",
        ] {
            assert_eq!(cache.parse(sql).unwrap(), plain(sql), "{sql}");
        }
        assert_eq!(cache.hits(), 0);
    }

    #[test]
    fn errors_are_the_text_s_own() {
        let cache = ParseCache::default();
        for _ in 0..2 {
            let e = cache.parse("SELECT FROM WHERE 1").unwrap_err().to_string();
            let p = Parser::parse_sql(&PostgreSqlDialect {}, "SELECT FROM WHERE 1")
                .unwrap_err()
                .to_string();
            assert_eq!(e, p);
        }
    }

    #[test]
    fn placeholder_names_spell_kind_and_index() {
        for i in [0, 7, 10, 99, 100, 12345, usize::MAX] {
            assert_eq!(placeholder('n', i), format!("{MARK}n{i}"));
        }
        assert_eq!(placeholder('s', 3), "$#s3");
    }

    #[test]
    fn placeholders_of_the_client_stay_for_binding() {
        let cache = ParseCache::default();
        cache.parse("SELECT $1, 5 FROM t WHERE a = $2").unwrap();
        let b = "SELECT $1, 6 FROM t WHERE a = $2";
        assert_eq!(cache.parse(b).unwrap(), plain(b));
        assert_eq!(cache.hits(), 1);
    }
}
