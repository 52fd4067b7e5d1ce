//! Parsing SQL texts, with the parse of each text's *shape* kept.
//!
//! DuckLake sends the same few statements over and over with different literals (a commit's
//! `INSERT INTO ducklake_snapshot VALUES (12, ...)`, then `(13, ...)`), and sqlparser spends
//! most of a statement's parse on the parser, not on the tokenizer. So a text's number and
//! single-quoted string literals are taken out by a one-pass scanner of our own (`scan`), and
//! the text that remains — the shape — is the key of a parse kept from an earlier text. A text
//! of a known shape costs that scan, a clone of the kept statements and putting its own
//! literals back in.
//!
//! A shape is kept only when sqlparser's tokenizer finds exactly the scanner's literals in its
//! first text, and the parse of that text's tokens with placeholders in place of its literals,
//! literals put back, equals the parse of the text itself (sqlparser's equality, which ignores
//! source positions); a shape whose parse differs or fails (a literal where the grammar wants
//! a literal token, such as `varchar(10)` or `DATE '...'` in some positions) is remembered as
//! one to parse whole. Errors are always the parse of the text itself. The literals' kinds
//! (integer, decimal or string) are part of the shape, and so is every other byte, whitespace
//! included, so two texts share a parse only when they differ in literal values alone.

use std::borrow::Cow;
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

/// A literal taken out of a text: a number's digits, or a string's value (quotes undoubled).
#[derive(Debug, PartialEq)]
enum Literal<'a> {
    Number(Cow<'a, str>),
    Text(Cow<'a, str>),
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
    /// Keyed by [`scan`]'s shape with DataFusion's hash map (hashbrown with its randomly seeded
    /// default hasher): hashing with the standard library's SipHash cost more than a tenth of a
    /// kept parse.
    shapes: Mutex<datafusion::common::HashMap<String, Arc<Kept>>>,
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
        let Some((shape, literals)) = scan(sql) else {
            return Parser::parse_sql(&dialect, sql);
        };
        let kept = self
            .shapes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(shape.as_str())
            .cloned();
        match kept.as_deref() {
            Some(Kept::Parsed(statements)) => {
                debug_assert_eq!(
                    Some(&literals),
                    tokenized(sql).as_ref().map(|(_, l)| l),
                    "the shape scanner and sqlparser's tokenizer differ on {sql:?}"
                );
                if let Some(out) = fill(statements.clone(), literals) {
                    self.hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(out);
                }
                Parser::parse_sql(&dialect, sql)
            }
            Some(Kept::Whole) => Parser::parse_sql(&dialect, sql),
            None => {
                let whole = Parser::parse_sql(&dialect, sql);
                let kept = match (&whole, tokenized(sql)) {
                    // Kept only when sqlparser's own tokens have exactly the scanner's literals
                    // and the parse with placeholders, literals put back, is the text's parse.
                    (Ok(w), Some((tokens, from_tokens))) if from_tokens == literals => {
                        let parsed = Parser::new(&dialect)
                            .with_tokens_with_locations(tokens)
                            .parse_statements();
                        match parsed {
                            Ok(p) if fill(p.clone(), from_tokens).as_ref() == Some(w) => {
                                Kept::Parsed(p)
                            }
                            _ => Kept::Whole,
                        }
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

/// A text as sqlparser's tokenizer reads it, with our placeholders in place of its number and
/// single-quoted string literals, and those literals; `None` if it does not tokenize, or holds
/// a placeholder that looks like ours (only possible if the tokenizer ever makes one).
fn tokenized(sql: &str) -> Option<(Vec<TokenWithSpan>, Vec<Literal<'static>>)> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize_with_location()
        .ok()?;
    let mut literals = Vec::new();
    let mut out = Vec::with_capacity(tokens.len());
    for TokenWithSpan { token, span } in tokens {
        let token = match token {
            // A number with Hive's `L` suffix is no literal the scanner takes out; keeping its
            // flag in the list makes it differ from the scanner's.
            Token::Number(n, long) => {
                let n = if long { format!("{n}L") } else { n };
                literals.push(Literal::Number(Cow::Owned(n)));
                Token::Placeholder(placeholder('n', literals.len() - 1))
            }
            Token::SingleQuotedString(s) => {
                literals.push(Literal::Text(Cow::Owned(s)));
                Token::Placeholder(placeholder('s', literals.len() - 1))
            }
            Token::Placeholder(p) if p.starts_with(MARK) => return None,
            other => other,
        };
        out.push(TokenWithSpan { token, span });
    }
    Some((out, literals))
}

/// A text's shape: the text with each number and single-quoted string literal replaced by a
/// NUL and its kind (`i` integer, `d` decimal, `s` string), and those literals in order; read
/// by hand in one pass, because sqlparser's tokenizer (a token, and for words a `String`, per
/// word) was the largest cost of a kept parse.
///
/// It takes only texts whose literals it finds exactly where sqlparser's tokenizer does, and
/// gives up (`None`: the text is parsed whole) on anything else: comments, dollar quotes,
/// prefixed strings (`E'...'`, `U&'...'`, `x'...'`), numbers with exponents, suffixes, hex or
/// underscores, names or operators with characters outside plain ASCII, a `NUL`. Every other
/// byte stays in the shape as it is, whitespace included. The first text of a shape is
/// checked against the tokenizer ([`tokenized`]), and in debug builds every later one too.
fn scan(sql: &str) -> Option<(String, Vec<Literal<'_>>)> {
    let b = sql.as_bytes();
    let is_word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$';
    // What may not directly follow a name, number or placeholder for the scanner to be sure of
    // where it ends: more of a name, a quote (a prefixed string), a non-ASCII letter, a dot.
    let runs_on = |c: Option<&u8>| {
        c.is_some_and(|&c| is_word(c) || !c.is_ascii() || matches!(c, b'\'' | b'"' | b'.'))
    };
    let mut shape = String::with_capacity(sql.len());
    let mut literals = Vec::new();
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\n' | b'\r' | b'(' | b')' | b'[' | b']' | b',' | b';' | b'+'
            | b'*' | b'<' | b'>' | b'=' | b'!' | b'|' | b'%' | b'^' | b'~' => i += 1,
            // `--` and `/*` open comments; `.5` is a number (and `._` the tokenizer's error
            // after anything but a name); `:name` and `&'...'` are a placeholder and a Unicode
            // string.
            b'-' if b.get(i + 1) == Some(&b'-') => return None,
            b'/' if b.get(i + 1) == Some(&b'*') => return None,
            b'.' if b
                .get(i + 1)
                .is_some_and(|&c| c.is_ascii_digit() || c == b'_') =>
            {
                return None
            }
            b'&' if matches!(b.get(i + 1), Some(b'\'' | b'"')) => return None,
            b'-' | b'/' | b'.' | b'&' => i += 1,
            b':' if b.get(i + 1) == Some(&b':') => i += 2,
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                while i < b.len() && is_word(b[i]) {
                    i += 1;
                }
                if b.get(i)
                    .is_some_and(|&c| !c.is_ascii() || matches!(c, b'\'' | b'"'))
                {
                    return None;
                }
            }
            b'"' => i = quoted(b, i)?.0,
            // `$1`, the client's placeholder.
            b'$' => {
                i += 1;
                let digits = i;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                if i == digits || runs_on(b.get(i)) {
                    return None;
                }
            }
            b'0'..=b'9' => {
                let start = i;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                let mut kind = 'i';
                if b.get(i) == Some(&b'.') {
                    if !b.get(i + 1).is_some_and(u8::is_ascii_digit) {
                        return None;
                    }
                    i += 1;
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                    kind = 'd';
                }
                if runs_on(b.get(i)) {
                    return None;
                }
                shape.push_str(&sql[copied..start]);
                shape.push('\0');
                shape.push(kind);
                copied = i;
                literals.push(Literal::Number(Cow::Borrowed(&sql[start..i])));
            }
            b'\'' => {
                let start = i;
                let (end, doubled) = quoted(b, i)?;
                i = end;
                let inner = &sql[start + 1..end - 1];
                let text = if doubled {
                    Cow::Owned(inner.replace("''", "'"))
                } else {
                    Cow::Borrowed(inner)
                };
                shape.push_str(&sql[copied..start]);
                shape.push_str("\0s");
                copied = i;
                literals.push(Literal::Text(text));
            }
            _ => return None,
        }
    }
    shape.push_str(&sql[copied..]);
    Some((shape, literals))
}

/// The end (one past the closing quote) of the quoted string or name opening at `start`, and
/// whether it holds a doubled quote; `None` if it does not end.
fn quoted(b: &[u8], start: usize) -> Option<(usize, bool)> {
    let quote = b[start];
    let mut i = start + 1;
    let mut doubled = false;
    loop {
        match b.get(i)? {
            &c if c == quote => {
                if b.get(i + 1) == Some(&quote) {
                    doubled = true;
                    i += 2;
                } else {
                    return Some((i + 1, doubled));
                }
            }
            _ => i += 1,
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
fn fill(mut statements: Vec<Statement>, literals: Vec<Literal<'_>>) -> Option<Vec<Statement>> {
    struct Filler<'a> {
        literals: Vec<Option<Literal<'a>>>,
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
            v.value = match self.literals[i].take() {
                Some(Literal::Number(n)) => Value::Number(n.into_owned(), false),
                Some(Literal::Text(s)) => Value::SingleQuotedString(s.into_owned()),
                None => {
                    self.bad = true;
                    return ControlFlow::Break(());
                }
            };
            ControlFlow::Continue(())
        }
    }
    let mut f = Filler {
        literals: literals.into_iter().map(Some).collect(),
        bad: false,
    };
    let _ = statements.visit(&mut f);
    (!f.bad && f.literals.iter().all(Option::is_none)).then_some(statements)
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

    /// The literals sqlparser's tokenizer finds, or `None` if it fails.
    fn tokenizer_literals(sql: &str) -> Option<Vec<Literal<'static>>> {
        tokenized(sql).map(|(_, l)| l)
    }

    #[test]
    fn the_scanner_finds_the_tokenizer_s_literals() {
        for (sql, want) in [
            ("SELECT 1, 22.50, 'x' FROM t", vec!["1", "22.50", "'x"]),
            ("SELECT 'it''s', '''', ''", vec!["'it's", "''", "'"]),
            (
                r#"SELECT 'a\b', 'ünï ''q''' FROM "we""ird 1""#,
                vec![r"'a\b", "'ünï 'q'"],
            ),
            (
                "SELECT t1.c2, a[1], x::int8, -3, $1 FROM s_1$x",
                vec!["1", "3"],
            ),
            (
                "SELECT 5-2*3/1%7, 'a'||'b'",
                vec!["5", "2", "3", "1", "7", "'a", "'b"],
            ),
            ("SELECT\t1\n,\r2;", vec!["1", "2"]),
        ] {
            let (_, got) = scan(sql).unwrap_or_else(|| panic!("scanner gave up on {sql:?}"));
            let want: Vec<Literal> = want
                .into_iter()
                .map(|w| match w.strip_prefix('\'') {
                    Some(t) => Literal::Text(Cow::Borrowed(t)),
                    None => Literal::Number(Cow::Borrowed(w)),
                })
                .collect();
            assert_eq!(got, want, "{sql}");
            assert_eq!(tokenizer_literals(sql), Some(want), "{sql}");
        }
    }

    #[test]
    fn the_scanner_gives_up_where_literals_are_not_plain() {
        for sql in [
            "SELECT 1 -- note",
            "SELECT /* note */ 1",
            r"SELECT E'a\nb'",
            r"SELECT U&'d\0061t'",
            "SELECT x'1F', b'01', N'x'",
            "SELECT $$a'b$$",
            "SELECT $tag$x$tag$",
            "SELECT 1e5",
            "SELECT 1.5E-3",
            "SELECT 0x1F",
            "SELECT 1_000",
            "SELECT .5",
            "SELECT 1.",
            "SELECT 10L",
            "SELECT :name",
            "SELECT ?",
            "SELECT @x",
            "SELECT 'unterminated",
            "SELECT \"unterminated",
            "SELECT café FROM t",
            "SELECT 1 FROM t WHERE a = 'x'\u{0}",
        ] {
            assert!(scan(sql).is_none(), "{sql}");
        }
    }

    /// Texts stitched at random from fragments that sit at the edges of literals (quotes,
    /// digits, dots, letters, `$`, `&`, `:`, comments, non-ASCII): wherever the scanner takes a
    /// text, its literals are the tokenizer's.
    #[test]
    fn the_scanner_agrees_with_the_tokenizer_on_stitched_texts() {
        #[rustfmt::skip]
        const PIECES: &[&str] = &[
            "'a'", "''", "'''", "'", "\"", "\"q\"\"\"", "1", "23", ".", "4.5", "0", "x", "e", "E",
            "L", "_", "$", "$1", "&", ":", "::", "-", "--", "/", "*", " ", "\n", "(", ")", ",",
            "é", "'é'", "U", "N", "+", "=", "[", "]", ";", "\\", "#", "@", "?", "a1", "SELECT ",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut taken, mut literals) = (0, 0);
        for _ in 0..50_000 {
            let n = 1 + next() % 10;
            let sql: String = (0..n)
                .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
                .collect();
            if let Some((_, got)) = scan(&sql) {
                taken += 1;
                literals += got.len();
                assert_eq!(Some(got), tokenizer_literals(&sql), "{sql:?}");
            }
        }
        // The check means something only if many texts, with literals, were taken.
        assert!(
            taken > 5_000 && literals > 2_000,
            "{taken} texts, {literals} literals"
        );
    }
}
