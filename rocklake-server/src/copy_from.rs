//! `COPY ... FROM STDIN`: the client's stream read into rows while it comes.
//!
//! A client sends a COPY's data in CopyData messages cut wherever it likes (psql sends
//! lines, drivers fill buffers of 8 KiB or more), and a row may span several of them. A
//! [`CopyStream`] keeps only the bytes of rows not yet complete: each [`CopyStream::feed`]
//! reads the rows its bytes complete, and [`CopyStream::finish`] (at CopyDone) the rest.
//! So a COPY's data is never held whole; its rows go into the statement's transaction in
//! batches as they arrive (what lands stays all or nothing: the transaction commits at
//! CopyDone).
//!
//! Three formats, as PostgreSQL reads them:
//! - text: one row a line, fields split at the delimiter, backslash escapes, `\N` (or the
//!   `NULL` option) for NULL, an optional `\.` end line;
//! - CSV: records split at unquoted line breaks (a quoted value may hold them), the first
//!   line's end fixing every line's, quotes and their escape, an unquoted field equal to the
//!   NULL marker is NULL;
//! - binary: the `PGCOPY` header, then each row's field count and length-prefixed fields in
//!   each column type's binary form, then the trailer.
//!
//! Every error names the row (counted over the whole stream) and, where it has one, the
//! column at fault.

use std::sync::Arc;

use rocklake_core::values::Value;
use rocklake_sql::datafusion::arrow::array::{ArrayRef, StringArray};
use rocklake_sql::types::SqlType;
use rocklake_sql::{CopyFormat, SqlError};

use crate::wire::{protocol, recv, COPY_SIGNATURE};

/// One row's cells, in the COPY's column order.
pub type Row = Vec<Value>;

/// Bytes gathered before a [`CopyStream::feed`] reads rows out of them: few enough to hold,
/// many enough that a batch of rows goes into the transaction at a time rather than a row.
const READ_AT: usize = 256 << 10;

/// A `COPY ... FROM STDIN` stream being read (see the module's documentation).
#[derive(Debug)]
pub struct CopyStream {
    columns: Vec<(String, SqlType)>,
    format: CopyFormat,
    /// Bytes received and not yet read into rows: the rows not yet complete.
    pending: Vec<u8>,
    /// Bytes of the stream before `pending` (binary errors give their position).
    offset: usize,
    /// How many bytes `pending` must hold before the next read: [`READ_AT`], or twice what
    /// the last read left (a row longer than that is not read again at every message).
    read_at: usize,
    /// Rows (CSV: records, its HEADER line among them) read so far.
    rows: usize,
    /// The header (binary) or HEADER line (text, CSV) has been read.
    started: bool,
    /// The end marker (binary trailer, a `\.` line) has been read.
    ended: bool,
    /// Binary: bytes that came after the trailer (an error at the end).
    after_end: usize,
    /// CSV: the first line's end, which every line must end with.
    eol: Option<&'static str>,
}

impl CopyStream {
    /// A stream into `columns` (name and type of each, in the COPY's order) in `format`.
    pub fn new(columns: Vec<(String, SqlType)>, format: CopyFormat) -> Self {
        CopyStream {
            columns,
            format,
            pending: Vec::new(),
            offset: 0,
            read_at: READ_AT,
            rows: 0,
            started: false,
            ended: false,
            after_end: 0,
            eol: None,
        }
    }

    /// The bytes held for rows not yet complete.
    pub fn held(&self) -> usize {
        self.pending.capacity()
    }

    /// Let go of the bytes held: the COPY failed, and what still comes is dropped.
    pub fn abandon(&mut self) {
        self.pending = Vec::new();
    }

    /// Take one CopyData's bytes; the rows they complete (none until enough bytes are held
    /// to be worth reading).
    pub fn feed(&mut self, data: &[u8]) -> Result<Vec<Row>, SqlError> {
        self.pending.extend_from_slice(data);
        if self.pending.len() < self.read_at {
            return Ok(Vec::new());
        }
        let rows = self.read(false)?;
        self.read_at = (2 * self.pending.len()).max(READ_AT);
        Ok(rows)
    }

    /// The stream is over (CopyDone): the rows left. Data cut short is an error.
    pub fn finish(&mut self) -> Result<Vec<Row>, SqlError> {
        let rows = self.read(true)?;
        self.pending = Vec::new();
        Ok(rows)
    }

    /// Read the complete rows out of `pending` (all of it when `last`) and keep the rest.
    fn read(&mut self, last: bool) -> Result<Vec<Row>, SqlError> {
        let (rows, used) = if self.format.binary {
            self.binary(last)?
        } else if self.format.csv {
            self.csv(last)?
        } else {
            self.text(last)?
        };
        self.pending.drain(..used);
        self.offset += used;
        // What an oversized message left behind goes back to the allocator.
        if self.pending.capacity() > 2 * READ_AT && self.pending.len() < READ_AT {
            self.pending.shrink_to(READ_AT);
        }
        Ok(rows)
    }

    /// How many bytes of `pending` are whole lines (all of it when `last`); `None`: no line
    /// is whole yet.
    fn whole_lines(&self, last: bool) -> Option<usize> {
        if last {
            return Some(self.pending.len());
        }
        self.pending
            .iter()
            .rposition(|b| *b == b'\n')
            .map(|i| i + 1)
    }

    /// A text or CSV row's fields (`None`: NULL) as cells of the COPY's columns; a wrong
    /// count or a value not of its column's type is refused, naming the row.
    fn cells(&self, fields: Vec<Option<String>>, row_no: usize) -> Result<Row, SqlError> {
        if fields.len() != self.columns.len() {
            return Err(SqlError::new(
                "22P04",
                format!(
                    "COPY row {row_no} has {} fields, expected {}",
                    fields.len(),
                    self.columns.len()
                ),
            ));
        }
        fields
            .into_iter()
            .zip(&self.columns)
            .map(|(f, (name, ty))| match f {
                None => Ok(Value::Null),
                Some(v) => text_cell(v, name, *ty, row_no),
            })
            .collect()
    }

    /// Binary rows in `pending`, and how many of its bytes they took.
    fn binary(&mut self, last: bool) -> Result<(Vec<Row>, usize), SqlError> {
        let mut r = Reader {
            data: &self.pending,
            p: 0,
            offset: self.offset,
        };
        let mut rows = Vec::new();
        if !self.started {
            match binary_header(&mut r) {
                Ok(()) => self.started = true,
                Err(Cut::Short(_)) if !last => return Ok((rows, 0)),
                Err(e) => return Err(r.error(e)),
            }
        }
        loop {
            if self.ended {
                self.after_end += r.data.len() - r.p;
                r.p = r.data.len();
                if last && self.after_end > 0 {
                    return Err(protocol(format!(
                        "{} bytes of COPY data after the end marker",
                        self.after_end
                    )));
                }
                break;
            }
            if r.p == r.data.len() && !last {
                break;
            }
            let start = r.p;
            match binary_row(&mut r, &self.columns, self.rows + 1) {
                Ok(Some(row)) => {
                    self.rows += 1;
                    rows.push(row);
                }
                Ok(None) => self.ended = true,
                Err(Cut::Short(_)) if !last => {
                    r.p = start;
                    break;
                }
                Err(e) => return Err(r.error(e)),
            }
        }
        Ok((rows, r.p))
    }

    /// Text rows in `pending` (whole lines), and how many of its bytes they took.
    fn text(&mut self, last: bool) -> Result<(Vec<Row>, usize), SqlError> {
        if self.ended {
            // What follows the end line is read and dropped, as PostgreSQL drops it.
            return Ok((Vec::new(), self.pending.len()));
        }
        // Whole lines only: a line break is never inside a character or an escaped value.
        let Some(cut) = self.whole_lines(last) else {
            return Ok((Vec::new(), 0));
        };
        let mut body = &self.pending[..cut];
        if !self.started {
            // A HEADER line is skipped (PostgreSQL 15 reads no more of it than that).
            if self.format.header {
                body = body
                    .iter()
                    .position(|b| *b == b'\n')
                    .map_or(&body[body.len()..], |i| &body[i + 1..]);
            }
            self.started = true;
        }
        let text = copy_utf8(body)?;
        let mut rows = Vec::new();
        let lines = text.split('\n').count();
        for (i, line) in text.split('\n').enumerate() {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line == "\\." {
                self.ended = true;
                break;
            }
            if line.is_empty() && i + 1 == lines {
                break;
            }
            let fields = split_copy_line(line, self.format.delimiter)
                .into_iter()
                .map(|f| (f != self.format.null).then(|| unescape_copy_text(&f)))
                .collect();
            rows.push(self.cells(fields, self.rows + 1)?);
            self.rows += 1;
        }
        Ok((rows, cut))
    }

    /// CSV records in `pending` (complete ones only, unless `last`), and how many of its bytes
    /// they took.
    fn csv(&mut self, last: bool) -> Result<(Vec<Row>, usize), SqlError> {
        if self.ended {
            return Ok((Vec::new(), self.pending.len()));
        }
        // Whole lines first, so that the text ends on a character; a record whose quoted
        // value goes on past them waits for more.
        let Some(cut) = self.whole_lines(last) else {
            return Ok((Vec::new(), 0));
        };
        let text = copy_utf8(&self.pending[..cut])?;
        let f = &self.format;
        // Each record: its fields, each with its text and whether any of it was quoted.
        let mut records: Vec<Vec<(String, bool)>> = Vec::new();
        let mut record: Vec<(String, bool)> = Vec::new();
        let mut field = String::new();
        let mut quoted = false;
        let mut in_quotes = false;
        let mut at_line_start = true;
        // Bytes of `text` in the records read so far.
        let mut used = 0usize;
        let mut chars = text.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            if in_quotes {
                if c == f.escape
                    && chars
                        .peek()
                        .is_some_and(|(_, n)| *n == f.quote || *n == f.escape)
                    && (f.escape != f.quote || chars.peek().map(|(_, n)| *n) == Some(f.quote))
                {
                    field.push(chars.next().map_or(c, |(_, n)| n));
                } else if c == f.quote {
                    in_quotes = false;
                } else {
                    field.push(c);
                }
                continue;
            }
            if at_line_start && c == '\\' && text_at_end_marker(&text[at + 1..]) {
                self.ended = true;
                used = cut;
                break;
            }
            at_line_start = false;
            if c == f.quote {
                in_quotes = true;
                quoted = true;
            } else if c == f.delimiter {
                record.push((std::mem::take(&mut field), quoted));
                quoted = false;
            } else if c == '\n' || c == '\r' {
                // The first line's end fixes every line's, as in PostgreSQL: `\n`, `\r\n`
                // or `\r`.
                let this = if c == '\r' && chars.peek().map(|(_, n)| *n) == Some('\n') {
                    chars.next();
                    "\r\n"
                } else if c == '\r' {
                    "\r"
                } else {
                    "\n"
                };
                match self.eol {
                    None => self.eol = Some(this),
                    Some(e) if e == this => {}
                    Some(_) => {
                        let what = if c == '\n' {
                            "newline"
                        } else {
                            "carriage return"
                        };
                        return Err(SqlError::new(
                            "22P04",
                            format!(
                                "unquoted {what} found in data (COPY row {})",
                                self.rows + records.len() + 1
                            ),
                        )
                        .with_hint(format!("Use quoted CSV field to represent {what}.")));
                    }
                }
                record.push((std::mem::take(&mut field), quoted));
                quoted = false;
                records.push(std::mem::take(&mut record));
                at_line_start = true;
                used = chars.peek().map_or(text.len(), |(i, _)| *i);
            } else {
                field.push(c);
            }
        }
        if last && !self.ended {
            if in_quotes {
                return Err(SqlError::new(
                    "22P04",
                    format!(
                        "unterminated CSV quoted field (COPY row {})",
                        self.rows + records.len() + 1
                    ),
                ));
            }
            if !field.is_empty() || quoted || !record.is_empty() {
                record.push((field, quoted));
                records.push(record);
            }
            used = cut;
        }
        let mut rows = Vec::with_capacity(records.len());
        for rec in records {
            self.rows += 1;
            let row_no = self.rows;
            if !self.started {
                self.started = true;
                if f.header {
                    continue;
                }
            }
            let fields = rec
                .into_iter()
                .map(|(v, quoted)| (quoted || v != f.null).then_some(v))
                .collect();
            rows.push(self.cells(fields, row_no)?);
        }
        Ok((rows, used))
    }
}

/// A whole text-format COPY stream (`\N` or `null` for NULL, fields split at `delimiter`)
/// read into rows of cells of the given types.
pub fn decode_copy_text(
    data: &[u8],
    columns: &[(String, SqlType)],
    null: &str,
    delimiter: char,
) -> Result<Vec<Row>, SqlError> {
    let format = CopyFormat {
        null: null.into(),
        delimiter,
        ..CopyFormat::default()
    };
    let mut stream = CopyStream::new(columns.to_vec(), format);
    stream.pending = data.to_vec();
    stream.finish()
}

/// Why a binary stream could not be read on: it stops short (more may come), or it is wrong.
enum Cut {
    Short(&'static str),
    Bad(SqlError),
}

impl From<SqlError> for Cut {
    fn from(e: SqlError) -> Self {
        Cut::Bad(e)
    }
}

/// A position in the binary bytes held.
struct Reader<'a> {
    data: &'a [u8],
    p: usize,
    /// Bytes of the stream before `data`.
    offset: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&[u8], Cut> {
        if self.data.len() - self.p < n {
            return Err(Cut::Short(what));
        }
        let s = &self.data[self.p..self.p + n];
        self.p += n;
        Ok(s)
    }

    fn i16(&mut self, what: &'static str) -> Result<i16, Cut> {
        let b = self.take(2, what)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self, what: &'static str) -> Result<i32, Cut> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The error `cut` stands for, where it ended at the end of the data.
    fn error(&self, cut: Cut) -> SqlError {
        match cut {
            Cut::Bad(e) => e,
            Cut::Short(what) => protocol(format!(
                "COPY data ends inside {what} (at byte {} of {})",
                self.offset + self.p,
                self.offset + self.data.len()
            )),
        }
    }
}

/// The binary header: signature, flags (no OIDs), extension.
fn binary_header(r: &mut Reader<'_>) -> Result<(), Cut> {
    if r.take(COPY_SIGNATURE.len(), "the header")? != COPY_SIGNATURE {
        return Err(protocol("COPY file signature not recognized").into());
    }
    let flags = r.i32("the header")?;
    if flags & 0x0001_0000 != 0 {
        return Err(protocol("COPY data with OIDs is not supported").into());
    }
    let ext = r.i32("the header")?;
    r.take(ext as u32 as usize, "the header extension")?;
    Ok(())
}

/// One binary row (`None`: the trailer).
fn binary_row(
    r: &mut Reader<'_>,
    columns: &[(String, SqlType)],
    row_no: usize,
) -> Result<Option<Row>, Cut> {
    let n = r.i16("a row's field count")?;
    if n == -1 {
        return Ok(None);
    }
    if n as usize != columns.len() {
        return Err(SqlError::new(
            "22P04",
            format!(
                "row field count is {n}, expected {} (COPY row {row_no})",
                columns.len()
            ),
        )
        .into());
    }
    let mut row = Vec::with_capacity(columns.len());
    for (name, ty) in columns {
        let len = r.i32("a field length")?;
        if len == -1 {
            row.push(Value::Null);
            continue;
        }
        if len < 0 {
            return Err(protocol(format!(
                "negative field length {len} (COPY row {row_no}, column {name})"
            ))
            .into());
        }
        let bytes = r.take(len as usize, "a field")?;
        let v = recv(bytes, *ty).map_err(|e| {
            SqlError::new(
                e.code,
                format!("{} (COPY row {row_no}, column {name})", e.message),
            )
        })?;
        row.push(v);
    }
    Ok(Some(row))
}

/// Text or CSV COPY data as UTF-8 (the only encoding the server speaks).
fn copy_utf8(data: &[u8]) -> Result<&str, SqlError> {
    std::str::from_utf8(data).map_err(|_| {
        SqlError::new(
            "22021",
            "invalid byte sequence for encoding \"UTF8\" in COPY data",
        )
    })
}

/// A COPY field's text as a cell of column `name`'s type; an error names the row and column.
fn text_cell(v: String, name: &str, ty: SqlType, row_no: usize) -> Result<Value, SqlError> {
    let a: ArrayRef = Arc::new(StringArray::from(vec![v]));
    ty.coerce(&a, name)
        .and_then(|a| ty.cell(a.as_ref(), 0))
        .map_err(|e| {
            SqlError::new(
                e.code,
                format!("{} (COPY row {row_no}, column {name})", e.message),
            )
        })
}

/// Whether `rest`, what follows a line-initial backslash, is `.` and the end of the line (the
/// end marker `\.`).
fn text_at_end_marker(rest: &str) -> bool {
    let mut rest = rest.chars();
    rest.next() == Some('.') && matches!(rest.next(), None | Some('\n') | Some('\r'))
}

/// A text COPY line's fields, split at delimiters that are not escaped (the fields keep their
/// escapes).
fn split_copy_line(line: &str, delimiter: char) -> Vec<String> {
    let mut fields = Vec::new();
    let mut current = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            current.push(c);
            if let Some(n) = chars.next() {
                current.push(n);
            }
        } else if c == delimiter {
            fields.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    fields.push(current);
    fields
}

fn unescape_copy_text(f: &str) -> String {
    let mut out = String::with_capacity(f.len());
    let mut chars = f.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('v') => out.push('\u{b}'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(types: &[(&str, SqlType)]) -> Vec<(String, SqlType)> {
        types.iter().map(|(n, t)| (n.to_string(), *t)).collect()
    }

    /// `data` fed in pieces ending at `cuts`, rows read after each piece (not only once
    /// [`READ_AT`] bytes are held), then finished.
    fn in_pieces(
        data: &[u8],
        cuts: &[usize],
        columns: &[(String, SqlType)],
        format: &CopyFormat,
    ) -> Result<Vec<Row>, SqlError> {
        let mut s = CopyStream::new(columns.to_vec(), format.clone());
        let mut rows = Vec::new();
        let mut from = 0;
        for &at in cuts {
            s.pending.extend_from_slice(&data[from..at]);
            rows.extend(s.read(false)?);
            from = at;
        }
        s.pending.extend_from_slice(&data[from..]);
        rows.extend(s.finish()?);
        Ok(rows)
    }

    /// However the stream is cut (at any one byte, and at every byte), it reads as it does
    /// whole: the same rows, or the same error.
    fn same_however_cut(data: &[u8], columns: &[(String, SqlType)], format: &CopyFormat) {
        let whole = in_pieces(data, &[], columns, format);
        for at in 0..=data.len() {
            assert_eq!(
                in_pieces(data, &[at], columns, format),
                whole,
                "cut at byte {at} of {:?}",
                String::from_utf8_lossy(data)
            );
        }
        let every: Vec<usize> = (1..data.len()).collect();
        assert_eq!(in_pieces(data, &every, columns, format), whole);
    }

    fn binary_format() -> CopyFormat {
        CopyFormat {
            binary: true,
            ..CopyFormat::default()
        }
    }

    fn binary_stream(rows: &[&[Option<&[u8]>]]) -> Vec<u8> {
        let mut d = COPY_SIGNATURE.to_vec();
        d.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 4, 9, 9, 9, 9]);
        for row in rows {
            d.extend_from_slice(&(row.len() as i16).to_be_bytes());
            for f in *row {
                match f {
                    None => d.extend_from_slice(&(-1i32).to_be_bytes()),
                    Some(b) => {
                        d.extend_from_slice(&(b.len() as i32).to_be_bytes());
                        d.extend_from_slice(b);
                    }
                }
            }
        }
        d.extend_from_slice(&(-1i16).to_be_bytes());
        d
    }

    #[test]
    fn text_copy_honours_null_marker_delimiter_and_escapes() {
        let cols = columns(&[("a", SqlType::BigInt), ("v", SqlType::Text)]);
        let rows = decode_copy_text(b"1\tx\\ty\n2\t\n3\t\\N\n\\.\n", &cols, "", '\t').unwrap();
        assert_eq!(
            rows,
            vec![
                vec![Value::Int(1), Value::Text("x\ty".into())],
                vec![Value::Int(2), Value::Null],
                vec![Value::Int(3), Value::Text("N".into())],
            ]
        );
        let rows = decode_copy_text(b"4|a\\|b\n", &cols, "\\N", '|').unwrap();
        assert_eq!(rows, vec![vec![Value::Int(4), Value::Text("a|b".into())]]);
        let e = decode_copy_text(b"x\ty\n", &cols, "\\N", '\t').unwrap_err();
        assert!(e.message.contains("COPY row 1, column a"), "{}", e.message);
    }

    #[test]
    fn text_reads_the_same_however_the_stream_is_cut() {
        let cols = columns(&[("a", SqlType::BigInt), ("v", SqlType::Text)]);
        let header = CopyFormat {
            header: true,
            ..CopyFormat::default()
        };
        let data = "a\tv\n1\tx\\ty\n2\t\\N\r\n3\tnaïve 😀\n\\.\nnot read\n".as_bytes();
        let rows = in_pieces(data, &[], &cols, &header).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[2][1], Value::Text("naïve 😀".into()));
        same_however_cut(data, &cols, &header);
        same_however_cut(b"1\tone\n2\ttwo\n3", &cols, &CopyFormat::default());
        // An error names its row counted over the whole stream, wherever the cut fell.
        let bad = b"1\tone\n2\ttwo\nthree\t3\n";
        let e = in_pieces(bad, &[9], &cols, &CopyFormat::default()).unwrap_err();
        assert!(e.message.contains("COPY row 3, column a"), "{}", e.message);
        same_however_cut(bad, &cols, &CopyFormat::default());
    }

    #[test]
    fn csv_reads_the_same_however_the_stream_is_cut() {
        let cols = columns(&[("a", SqlType::BigInt), ("v", SqlType::Text)]);
        let csv = CopyFormat {
            csv: true,
            null: String::new(),
            delimiter: ',',
            header: true,
            ..CopyFormat::default()
        };
        // A quoted value holding line breaks, a doubled quote and a delimiter; a quoted
        // empty string apart from NULL; CRLF line ends throughout; characters of 2 and 4
        // bytes.
        let data =
            "a,v\r\n1,\"two\r\nlines, \"\"quoted\"\"\"\r\n2,\r\n3,\"\"\r\n4,ünï😀\r\n".as_bytes();
        let rows = in_pieces(data, &[], &cols, &csv).unwrap();
        assert_eq!(
            rows,
            vec![
                vec![
                    Value::Int(1),
                    Value::Text("two\r\nlines, \"quoted\"".into())
                ],
                vec![Value::Int(2), Value::Null],
                vec![Value::Int(3), Value::Text(String::new())],
                vec![Value::Int(4), Value::Text("ünï😀".into())],
            ]
        );
        same_however_cut(data, &cols, &csv);
        // The first line's end fixes every line's, across pieces too.
        let mixed = b"a,v\n1,x\r\n2,y\n";
        let e = in_pieces(mixed, &[], &cols, &csv).unwrap_err();
        assert!(e.message.contains("carriage return"), "{}", e.message);
        same_however_cut(mixed, &cols, &csv);
        // An unterminated quote, a `\.` end line, a last line without its end.
        same_however_cut(b"1,\"open\n2,x\n", &cols, &csv);
        same_however_cut(b"h\n1,x\n\\.\n2,y\n", &cols, &csv);
        same_however_cut(b"h\n1,x\n2,y", &cols, &csv);
    }

    #[test]
    fn binary_reads_the_same_however_the_stream_is_cut() {
        let cols = columns(&[("a", SqlType::BigInt), ("v", SqlType::Text)]);
        let one = 1i64.to_be_bytes();
        let two = 2i64.to_be_bytes();
        let data = binary_stream(&[&[Some(&one), Some(b"x")], &[Some(&two), None]]);
        let binary = binary_format();
        let rows = in_pieces(&data, &[], &cols, &binary).unwrap();
        assert_eq!(
            rows,
            vec![
                vec![Value::Int(1), Value::Text("x".into())],
                vec![Value::Int(2), Value::Null],
            ]
        );
        same_however_cut(&data, &cols, &binary);
        // Cut short: the error gives its position in the whole stream.
        let short = &data[..data.len() - 5];
        let e = in_pieces(short, &[30], &cols, &binary).unwrap_err();
        assert_eq!(
            e.message,
            format!(
                "COPY data ends inside a field length (at byte {} of {})",
                short.len() - 1,
                short.len()
            )
        );
        same_however_cut(short, &cols, &binary);
        // Bytes after the trailer.
        let mut after = data.clone();
        after.extend_from_slice(b"xyz");
        same_however_cut(&after, &cols, &binary);
        assert!(in_pieces(&after, &[], &cols, &binary).is_err());
    }

    /// A stream fed as a client sends it (8 KiB messages) gives its rows while it comes, and
    /// the bytes held stay near [`READ_AT`] however long the stream; a value longer than
    /// that (a quoted CSV value of 3 MB) is held until its row is whole.
    #[test]
    fn rows_come_out_while_the_stream_comes_and_little_is_held() {
        let cols = columns(&[("a", SqlType::BigInt), ("v", SqlType::Text)]);
        let data: String = (0..100_000).map(|i| format!("{i}\tvalue {i}\n")).collect();
        let mut s = CopyStream::new(cols.clone(), CopyFormat::default());
        let (mut rows, mut held, mut early) = (0, 0, 0);
        for piece in data.as_bytes().chunks(8 << 10) {
            rows += s.feed(piece).unwrap().len();
            held = held.max(s.held());
            if early == 0 && rows > 0 {
                early = rows;
            }
        }
        rows += s.finish().unwrap().len();
        assert_eq!(rows, 100_000);
        assert!(early > 0 && early < 50_000, "first rows out: {early}");
        assert!(
            held <= 2 * READ_AT + (8 << 10),
            "{held} bytes held for a {}-byte stream",
            data.len()
        );
        let csv = CopyFormat {
            csv: true,
            null: String::new(),
            delimiter: ',',
            ..CopyFormat::default()
        };
        let long = "x\n".repeat(1_500_000);
        let data = format!("1,\"{long}\"\n2,after\n");
        let mut s = CopyStream::new(cols, csv);
        let mut rows = Vec::new();
        for piece in data.as_bytes().chunks(8 << 10) {
            rows.extend(s.feed(piece).unwrap());
        }
        rows.extend(s.finish().unwrap());
        assert_eq!(
            rows,
            vec![
                vec![Value::Int(1), Value::Text(long)],
                vec![Value::Int(2), Value::Text("after".into())],
            ]
        );
    }

    #[test]
    fn truncated_copy_data_is_refused_with_its_position() {
        let cols = columns(&[("a", SqlType::BigInt)]);
        let binary = binary_format();
        let mut d = COPY_SIGNATURE.to_vec();
        d.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0]);
        let e = in_pieces(&d, &[], &cols, &binary).unwrap_err();
        assert!(e.message.contains("ends inside a field"), "{}", e.message);
        let e = in_pieces(b"PGCOPY\n", &[], &cols, &binary).unwrap_err();
        assert!(e.message.contains("header"), "{}", e.message);
    }

    #[test]
    fn a_field_of_the_wrong_width_names_row_and_column() {
        let cols = columns(&[("snapshot_id", SqlType::BigInt)]);
        let binary = binary_format();
        let mut d = COPY_SIGNATURE.to_vec();
        d.extend_from_slice(&[
            0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 7, 0xff, 0xff,
        ]);
        let e = in_pieces(&d, &[], &cols, &binary).unwrap_err();
        assert!(e.message.contains("8 bytes"), "{}", e.message);
        assert!(
            e.message.contains("COPY row 1, column snapshot_id"),
            "{}",
            e.message
        );
    }
}
