//! Value codecs: the versioned row envelope, Keystone bindings, audit entries and counters.
//!
//! # Why Protocol Buffers (`prost`)
//!
//! Catalog rows must stay readable for the life of a lakehouse while RockLake and DuckLake keep
//! adding fields. Protocol Buffers were designed for exactly that: fields are numbered, a reader
//! skips numbers it does not know (a newer writer's data still decodes), and a field that an
//! older writer never wrote decodes as its default. `prost` derives the messages from plain Rust
//! structs, needs no code generator at build time, and is among the most used Rust crates for
//! the format. Tests below freeze bytes written by the first envelope layout and bytes carrying
//! a field from a future layout, and decode both.
//!
//! # Layout of a row value
//!
//! ```text
//! Envelope (protobuf message)
//!   1 codec          uint32   layout version of this envelope (1: original, 2: + writer_epoch)
//!   2 begin_snapshot uint64   first snapshot the row is visible at (mirrors the key if versioned)
//!   3 end_snapshot   uint64?  absent: live; present: visible only below it
//!   4 cells          Cell*    the tag's columns in registry order; missing trailing cells = NULL
//!   5 writer_epoch   uint64   epoch of the writer that wrote it (added in codec 2)
//! Cell: oneof { int sint64 = 1, text string = 2, boolean bool = 3, blob bytes = 4 }; none = NULL
//! ```
//!
//! Counters (`0xFE`) and the system keys under `0xFF` are plain 8-byte big-endian integers.

use prost::Message;

use crate::error::{Error, Result};
use crate::keys;
use crate::tags::{ColType, TagInfo};

/// The envelope layout this binary writes.
pub const CODEC_VERSION: u32 = 2;

/// A row value: the MVCC interval and the cells.
#[derive(Clone, PartialEq, Message)]
pub struct Envelope {
    /// Layout version.
    #[prost(uint32, tag = "1")]
    pub codec: u32,
    /// First snapshot at which the row is visible.
    #[prost(uint64, tag = "2")]
    pub begin_snapshot: u64,
    /// Snapshot at which the row stops being visible; `None` while live.
    #[prost(uint64, optional, tag = "3")]
    pub end_snapshot: Option<u64>,
    /// Column values in registry order.
    #[prost(message, repeated, tag = "4")]
    pub cells: Vec<Cell>,
    /// Epoch of the writer that wrote this version (codec 2).
    #[prost(uint64, tag = "5")]
    pub writer_epoch: u64,
    /// A number the writer chose for this version (the order its readers return versions
    /// in), when it recorded one; the key space gives it no meaning. Readers that do not know
    /// the field skip it, as protobuf does with every unknown field.
    #[prost(uint64, optional, tag = "6")]
    pub tuple: Option<u64>,
}

/// One column value. `kind: None` is SQL NULL.
#[derive(Clone, PartialEq, Message)]
pub struct Cell {
    /// The value.
    #[prost(oneof = "cell::Kind", tags = "1, 2, 3, 4")]
    pub kind: Option<cell::Kind>,
}

/// The cases of [`Cell`].
pub mod cell {
    /// A cell's value.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        /// bigint, timestamptz (microseconds since the Unix epoch).
        #[prost(sint64, tag = "1")]
        Int(i64),
        /// varchar, uuid.
        #[prost(string, tag = "2")]
        Text(String),
        /// boolean.
        #[prost(bool, tag = "3")]
        Boolean(bool),
        /// bytea.
        #[prost(bytes = "vec", tag = "4")]
        Blob(Vec<u8>),
    }
}

/// A typed cell value, as callers build and read rows.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// An integer (bigint, timestamptz in microseconds).
    Int(i64),
    /// Text (varchar, uuid).
    Text(String),
    /// A boolean.
    Bool(bool),
    /// Bytes.
    Bytes(Vec<u8>),
}

impl Value {
    fn fits(&self, ty: ColType) -> bool {
        matches!(
            (self, ty),
            (Value::Null, _)
                | (Value::Int(_), ColType::BigInt | ColType::TimestampTz)
                | (Value::Text(_), ColType::Text | ColType::Uuid)
                | (Value::Bool(_), ColType::Bool)
                | (Value::Bytes(_), ColType::Bytes)
        )
    }

    fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Int(_) => "integer",
            Value::Text(_) => "text",
            Value::Bool(_) => "boolean",
            Value::Bytes(_) => "bytes",
        }
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Null => f.write_str("NULL"),
            Value::Int(v) => write!(f, "{v}"),
            Value::Text(s) => write!(f, "{s:?}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Bytes(b) => write!(f, "x'{}'", keys::hex(b).replace(' ', "")),
        }
    }
}

/// A cell borrowed from a stored row's bytes: what a scan that copies cells straight into
/// columns reads, without a [`Value`] (and its allocation) per cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueRef<'a> {
    /// SQL NULL.
    Null,
    /// An integer.
    Int(i64),
    /// Text.
    Text(&'a str),
    /// A boolean.
    Bool(bool),
    /// Bytes.
    Bytes(&'a [u8]),
}

impl Value {
    /// The cell, borrowed.
    pub fn as_cell_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Null => ValueRef::Null,
            Value::Int(i) => ValueRef::Int(*i),
            Value::Text(s) => ValueRef::Text(s),
            Value::Bool(b) => ValueRef::Bool(*b),
            Value::Bytes(b) => ValueRef::Bytes(b),
        }
    }
}

impl ValueRef<'_> {
    /// The cell, owned.
    pub fn to_value(self) -> Value {
        match self {
            ValueRef::Null => Value::Null,
            ValueRef::Int(i) => Value::Int(i),
            ValueRef::Text(s) => Value::Text(s.to_owned()),
            ValueRef::Bool(b) => Value::Bool(b),
            ValueRef::Bytes(b) => Value::Bytes(b.to_vec()),
        }
    }
}

/// What [`visit_cells`] read of a row besides its cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Visited {
    /// First snapshot at which the row is visible.
    pub begin_snapshot: u64,
    /// Snapshot at which it stops being visible.
    pub end_snapshot: Option<u64>,
    /// How many cells the row stores (the columns past them are NULL).
    pub cells: usize,
    /// The writer's number for this version ([`Envelope::tuple`]), when the row records one.
    pub tuple: Option<u64>,
}

/// Hand each cell of the stored row `bytes` that `wanted` names, borrowed, with its index, to
/// `each`, in column order; the others are skipped unread.
///
/// `None` when the row is in an encoding only the full decoder takes (see [`Row::decode`]),
/// or damaged; `each` may then have been handed some of its cells already, so a caller that
/// built something from them starts again with [`Row::decode`], which also words the error.
pub fn visit_cells<'a>(
    bytes: &'a [u8],
    wanted: &dyn Fn(usize) -> bool,
    each: &mut dyn FnMut(usize, ValueRef<'a>),
) -> Option<Visited> {
    let mut n = 0;
    let h = wire::envelope(bytes, |c| {
        if wanted(n) {
            each(n, wire::cell_ref(c)?);
        }
        n += 1;
        Some(())
    })?;
    if h.codec == 0 {
        return None;
    }
    Some(Visited {
        begin_snapshot: h.begin,
        end_snapshot: h.end,
        cells: n,
        tuple: h.tuple,
    })
}

impl From<Value> for Cell {
    fn from(v: Value) -> Cell {
        Cell {
            kind: match v {
                Value::Null => None,
                Value::Int(i) => Some(cell::Kind::Int(i)),
                Value::Text(s) => Some(cell::Kind::Text(s)),
                Value::Bool(b) => Some(cell::Kind::Boolean(b)),
                Value::Bytes(b) => Some(cell::Kind::Blob(b)),
            },
        }
    }
}

impl From<Cell> for Value {
    fn from(c: Cell) -> Value {
        match c.kind {
            None => Value::Null,
            Some(cell::Kind::Int(i)) => Value::Int(i),
            Some(cell::Kind::Text(s)) => Value::Text(s),
            Some(cell::Kind::Boolean(b)) => Value::Bool(b),
            Some(cell::Kind::Blob(b)) => Value::Bytes(b),
        }
    }
}

/// A decoded row: its MVCC interval and its cells.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// First snapshot at which the row is visible.
    pub begin_snapshot: u64,
    /// Snapshot at which it stops being visible (`None` while live).
    pub end_snapshot: Option<u64>,
    /// Cells in the table's column order (may be shorter than the columns: the rest are NULL).
    pub cells: Vec<Value>,
    /// Epoch of the writer that wrote it (0 for rows written before codec 2).
    pub writer_epoch: u64,
    /// The writer's number for this version (see [`Envelope::tuple`]); `None` for
    /// rows written without one (by the key-space API, or before it was recorded).
    pub tuple: Option<u64>,
}

impl Row {
    /// A live row beginning at `begin_snapshot`.
    pub fn new(begin_snapshot: u64, cells: Vec<Value>) -> Row {
        Row {
            begin_snapshot,
            end_snapshot: None,
            cells,
            writer_epoch: 0,
            tuple: None,
        }
    }

    /// The cell of a named column of `table`, `Null` when absent.
    pub fn get(&self, table: &TagInfo, column: &str) -> Value {
        table
            .column_index(column)
            .and_then(|i| self.cells.get(i).cloned())
            .unwrap_or(Value::Null)
    }

    /// The MVCC interval of this row.
    pub fn version(&self) -> crate::mvcc::Version {
        crate::mvcc::Version {
            begin: self.begin_snapshot,
            end: self.end_snapshot,
        }
    }

    /// Check that the cells fit `table`'s columns and the interval is well formed. `what`
    /// names the row in errors (usually its rendered key).
    pub fn check(&self, table: &TagInfo, what: &str) -> Result<()> {
        self.check_named(table, || what.to_string())
    }

    /// [`Row::check`], naming the row only when there is an error to report (rendering a key
    /// costs an allocation the success path does not need).
    pub(crate) fn check_named(&self, table: &TagInfo, what: impl Fn() -> String) -> Result<()> {
        if self.cells.len() > table.columns.len() {
            return Err(Error::InvalidArgument(format!(
                "row for {} has {} cells but {} has {} columns",
                what(),
                self.cells.len(),
                table.name,
                table.columns.len()
            )));
        }
        for (cell, col) in self.cells.iter().zip(table.columns) {
            if !cell.fits(col.ty) {
                return Err(Error::InvalidArgument(format!(
                    "row for {}: column {} is {} but got a {} value ({cell})",
                    what(),
                    col.name,
                    col.ty.sql(),
                    cell.type_name()
                )));
            }
        }
        if let Some(end) = self.end_snapshot {
            if end <= self.begin_snapshot {
                return Err(Error::InvalidArgument(format!(
                    "row for {}: end_snapshot {end} is not after begin_snapshot {}",
                    what(),
                    self.begin_snapshot
                )));
            }
        }
        Ok(())
    }

    /// Encode for `table`, checking that the cells fit its columns. `key` is used only to name
    /// the row in errors.
    pub fn encode(&self, table: &TagInfo, key: &[u8]) -> Result<Vec<u8>> {
        self.check_named(table, || keys::render(key))?;
        Ok(self.encode_unchecked())
    }

    /// Encode without checking the cells against a table (internal hot path after checks).
    ///
    /// Writes the same bytes `prost` writes for the [`Envelope`] (a test holds it to that), but
    /// straight from the cells, without first copying them into `Cell`s.
    pub fn encode_unchecked(&self) -> Vec<u8> {
        wire::encode(self)
    }

    /// The envelope encoded by `prost`: the reference for [`Row::encode_unchecked`].
    #[cfg(test)]
    pub(crate) fn encode_prost(&self) -> Vec<u8> {
        Envelope {
            codec: CODEC_VERSION,
            begin_snapshot: self.begin_snapshot,
            end_snapshot: self.end_snapshot,
            cells: self.cells.iter().cloned().map(Cell::from).collect(),
            writer_epoch: self.writer_epoch,
            tuple: self.tuple,
        }
        .encode_to_vec()
    }

    /// Decode a row stored under `key`.
    pub fn decode(key: &[u8], bytes: &[u8]) -> Result<Row> {
        match wire::row(bytes, &|_| true) {
            Some(row) => Ok(row),
            None => Row::decode_prost(key, bytes),
        }
    }

    /// [`Row::decode`] of the cells `wanted` names by index: the others are left `Null`
    /// without being read, so a reader of a few columns of many rows does not pay for the
    /// rest (nor learns of damage confined to them). A row the fast decoder does not take is
    /// decoded whole, as [`Row::decode`] does.
    pub fn decode_cells(key: &[u8], bytes: &[u8], wanted: &dyn Fn(usize) -> bool) -> Result<Row> {
        match wire::row(bytes, wanted) {
            Some(row) => Ok(row),
            None => Row::decode_prost(key, bytes),
        }
    }

    /// Decode through `prost`: the reference decoder, which also words every error.
    pub(crate) fn decode_prost(key: &[u8], bytes: &[u8]) -> Result<Row> {
        let env = Envelope::decode(bytes)
            .map_err(|e| Error::corrupt(key, format!("row envelope does not decode: {e}")))?;
        if env.codec == 0 {
            return Err(Error::corrupt(key, "row envelope has no codec version"));
        }
        Ok(Row {
            begin_snapshot: env.begin_snapshot,
            end_snapshot: env.end_snapshot,
            cells: env.cells.into_iter().map(Value::from).collect(),
            writer_epoch: env.writer_epoch,
            tuple: env.tuple,
        })
    }

    /// Render the row with the table's column names.
    pub fn render(&self, table: Option<&TagInfo>) -> String {
        let mut parts = vec![format!("begin_snapshot={}", self.begin_snapshot)];
        parts.push(match self.end_snapshot {
            Some(e) => format!("end_snapshot={e}"),
            None => "end_snapshot=NULL".to_string(),
        });
        for (i, v) in self.cells.iter().enumerate() {
            let name = table
                .and_then(|t| t.columns.get(i))
                .map(|c| c.name.to_string())
                .unwrap_or_else(|| format!("column#{i}"));
            parts.push(format!("{name}={v}"));
        }
        parts.join(" ")
    }
}

/// State of a bound Keystone key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum BindingState {
    /// The row is live.
    Live = 0,
    /// The row was deleted; the key stays bound until PURGE.
    Deleted = 1,
}

/// The value of a Keystone binding (`0x80 | 0x01 | space | id`): where the bound row lives.
#[derive(Clone, PartialEq, Message)]
pub struct Binding {
    /// The row's key (latest version for versioned tables).
    #[prost(bytes = "vec", tag = "1")]
    pub row_key: Vec<u8>,
    /// Live or deleted.
    #[prost(enumeration = "BindingState", tag = "2")]
    pub state: i32,
    /// Snapshot at which the key was bound.
    #[prost(uint64, tag = "3")]
    pub bound_at: u64,
    /// Snapshot at which the row was deleted (when deleted).
    #[prost(uint64, optional, tag = "4")]
    pub deleted_at: Option<u64>,
}

impl Binding {
    /// Decode, naming the key in the error.
    pub fn decode_at(key: &[u8], bytes: &[u8]) -> Result<Binding> {
        let b = Binding::decode(bytes)
            .map_err(|e| Error::corrupt(key, format!("binding does not decode: {e}")))?;
        if b.row_key.is_empty() {
            return Err(Error::corrupt(key, "binding names no row key"));
        }
        Ok(b)
    }

    /// Whether the bound row is deleted.
    pub fn is_deleted(&self) -> bool {
        self.state == BindingState::Deleted as i32
    }
}

/// An audit log entry (`0x81 | snapshot_id | sequence`).
#[derive(Clone, PartialEq, Message)]
pub struct AuditEntry {
    /// What was done (`purge`).
    #[prost(string, tag = "1")]
    pub action: String,
    /// The id space.
    #[prost(string, tag = "2")]
    pub space: String,
    /// First id of the range asked for.
    #[prost(uint64, tag = "3")]
    pub first_id: u64,
    /// Last id of the range asked for.
    #[prost(uint64, tag = "4")]
    pub last_id: u64,
    /// The keys freed.
    #[prost(uint64, repeated, tag = "5")]
    pub freed: Vec<u64>,
    /// Writer epoch that did it.
    #[prost(uint64, tag = "6")]
    pub writer_epoch: u64,
    /// Wall-clock time, microseconds since the Unix epoch.
    #[prost(int64, tag = "7")]
    pub at_micros: i64,
    /// Who asked (the admin capability's holder).
    #[prost(string, tag = "8")]
    pub actor: String,
}

/// Encode a counter or system integer.
pub fn encode_u64(v: u64) -> [u8; 8] {
    v.to_be_bytes()
}

/// Decode a counter or system integer stored under `key`.
pub fn decode_u64(key: &[u8], bytes: &[u8]) -> Result<u64> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| {
        Error::corrupt(
            key,
            format!(
                "expected an 8-byte big-endian integer, found {} bytes",
                bytes.len()
            ),
        )
    })?;
    Ok(u64::from_be_bytes(arr))
}

/// Decode any value for display: a row, a binding, an audit entry or an integer.
pub fn render_value(key: &[u8], bytes: &[u8]) -> Result<String> {
    use crate::tags::ValueKind;
    let info = keys::tag_of(key)?;
    Ok(match info.value {
        ValueKind::Row => Row::decode(key, bytes)?.render(Some(info)),
        ValueKind::U64 => decode_u64(key, bytes)?.to_string(),
        ValueKind::Index => {
            let b = Binding::decode_at(key, bytes)?;
            format!(
                "row=[{}] state={} bound_at={}{}",
                keys::render(&b.row_key),
                if b.is_deleted() { "deleted" } else { "live" },
                b.bound_at,
                b.deleted_at
                    .map(|d| format!(" deleted_at={d}"))
                    .unwrap_or_default()
            )
        }
        ValueKind::Audit => {
            let a = AuditEntry::decode(bytes)
                .map_err(|e| Error::corrupt(key, format!("audit entry does not decode: {e}")))?;
            format!(
                "action={} space={} range=[{}, {}] freed={:?} writer_epoch={} at_micros={} actor={:?}",
                a.action, a.space, a.first_id, a.last_id, a.freed, a.writer_epoch, a.at_micros, a.actor
            )
        }
    })
}

/// Parse `COLUMN=VALUE` texts (the `rocklake insert --set` arguments) into the cells of a row of
/// `table`: each value is read by its column's type (integers, `true`/`false`, text, hex bytes;
/// `null` in any case is NULL), unnamed columns are NULL, and trailing NULLs are dropped.
pub fn parse_cells(table: &TagInfo, set: &[impl AsRef<str>]) -> Result<Vec<Value>> {
    let mut cells = vec![Value::Null; table.columns.len()];
    for item in set {
        let item = item.as_ref();
        let (name, text) = item
            .split_once('=')
            .ok_or_else(|| Error::InvalidArgument(format!("--set {item:?} is not COLUMN=VALUE")))?;
        let i = table.column_index(name).ok_or_else(|| {
            let names: Vec<&str> = table.columns.iter().map(|c| c.name).collect();
            Error::InvalidArgument(format!(
                "{} has no column {name:?}; its columns are: {}",
                table.name,
                names.join(", ")
            ))
        })?;
        let col = table.columns[i];
        cells[i] = if text.eq_ignore_ascii_case("null") {
            Value::Null
        } else {
            match col.ty {
                ColType::BigInt | ColType::TimestampTz => {
                    Value::Int(text.parse().map_err(|_| {
                        Error::InvalidArgument(format!(
                            "column {name} is {} but {text:?} is not an integer",
                            col.ty.sql()
                        ))
                    })?)
                }
                ColType::Bool => Value::Bool(match text {
                    "true" | "t" | "1" => true,
                    "false" | "f" | "0" => false,
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "column {name} is boolean but {text:?} is neither true nor false"
                        )))
                    }
                }),
                ColType::Text | ColType::Uuid => Value::Text(text.to_string()),
                ColType::Bytes => {
                    Value::Bytes(keys::parse_hex(text).map_err(Error::InvalidArgument)?)
                }
            }
        };
    }
    while cells.last() == Some(&Value::Null) {
        cells.pop();
    }
    Ok(cells)
}

/// A direct reader of the row envelope's wire format: decodes straight into [`Value`]s (no
/// intermediate `Cell` vector) and lets a scan test visibility without decoding any cell.
///
/// It accepts only the plain encodings every protobuf writer produces; on anything else (a group,
/// an over-long varint, a known field with the wrong wire type, bad UTF-8) it answers `None`, and
/// the caller falls back to `prost`, which decides and words the error. A property test checks
/// that it never accepts what `prost` refuses and never decodes differently.
mod wire {
    use super::{Row, Value, ValueRef};

    pub(super) struct Reader<'a> {
        buf: &'a [u8],
    }

    pub(super) enum Field<'a> {
        Varint(u64),
        Len(&'a [u8]),
        Fixed,
    }

    impl<'a> Reader<'a> {
        pub(super) fn new(buf: &'a [u8]) -> Reader<'a> {
            Reader { buf }
        }

        #[inline]
        fn varint(&mut self) -> Option<u64> {
            let mut v: u64 = 0;
            for i in 0..10 {
                let b = *self.buf.get(i)?;
                if i == 9 && b > 1 {
                    return None;
                }
                v |= u64::from(b & 0x7f) << (7 * i);
                if b < 0x80 {
                    self.buf = &self.buf[i + 1..];
                    return Some(v);
                }
            }
            None
        }

        fn take(&mut self, n: usize) -> Option<&'a [u8]> {
            if self.buf.len() < n {
                return None;
            }
            let (head, rest) = self.buf.split_at(n);
            self.buf = rest;
            Some(head)
        }

        /// The next field: `Some(None)` at the end, `None` on anything unusual.
        #[inline]
        pub(super) fn next(&mut self) -> Option<Option<(u32, Field<'a>)>> {
            if self.buf.is_empty() {
                return Some(None);
            }
            let key = self.varint()?;
            if key > u64::from(u32::MAX) {
                return None;
            }
            let tag = (key >> 3) as u32;
            if tag == 0 {
                return None;
            }
            let field = match key & 7 {
                0 => Field::Varint(self.varint()?),
                1 => {
                    self.take(8)?;
                    Field::Fixed
                }
                2 => {
                    let len = usize::try_from(self.varint()?).ok()?;
                    Field::Len(self.take(len)?)
                }
                5 => {
                    self.take(4)?;
                    Field::Fixed
                }
                _ => return None,
            };
            Some(Some((tag, field)))
        }
    }

    /// The envelope's scalar fields, its cells left encoded.
    pub(super) struct Header {
        pub(super) codec: u32,
        pub(super) begin: u64,
        pub(super) end: Option<u64>,
        pub(super) epoch: u64,
        pub(super) tuple: Option<u64>,
    }

    /// Walk the envelope, handing each encoded cell to `cell`.
    pub(super) fn envelope<'a>(
        bytes: &'a [u8],
        mut cell: impl FnMut(&'a [u8]) -> Option<()>,
    ) -> Option<Header> {
        let mut h = Header {
            codec: 0,
            begin: 0,
            end: None,
            epoch: 0,
            tuple: None,
        };
        let mut r = Reader::new(bytes);
        while let Some((tag, f)) = r.next()? {
            match (tag, f) {
                (1, Field::Varint(v)) => h.codec = v as u32,
                (2, Field::Varint(v)) => h.begin = v,
                (3, Field::Varint(v)) => h.end = Some(v),
                (4, Field::Len(c)) => cell(c)?,
                (5, Field::Varint(v)) => h.epoch = v,
                (6, Field::Varint(v)) => h.tuple = Some(v),
                (1..=6, _) => return None,
                _ => {}
            }
        }
        Some(h)
    }

    /// Decode one cell.
    pub(super) fn cell(bytes: &[u8]) -> Option<Value> {
        cell_ref(bytes).map(ValueRef::to_value)
    }

    /// Decode one cell, borrowing its text or bytes.
    #[inline]
    pub(super) fn cell_ref(bytes: &[u8]) -> Option<ValueRef<'_>> {
        let mut v = ValueRef::Null;
        let mut r = Reader::new(bytes);
        while let Some((tag, f)) = r.next()? {
            v = match (tag, f) {
                (1, Field::Varint(z)) => ValueRef::Int(((z >> 1) as i64) ^ -((z & 1) as i64)),
                (2, Field::Len(s)) => ValueRef::Text(std::str::from_utf8(s).ok()?),
                (3, Field::Varint(b)) => ValueRef::Bool(b != 0),
                (4, Field::Len(b)) => ValueRef::Bytes(b),
                (1..=4, _) => return None,
                _ => v,
            };
        }
        Some(v)
    }

    fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn varint_len(v: u64) -> usize {
        // 1 byte per started 7 bits; 0 takes one byte.
        (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
    }

    /// The body of one encoded cell: (field key, payload) as protobuf lays it out.
    fn cell_len(v: &Value) -> usize {
        match v {
            Value::Null => 0,
            Value::Int(i) => 1 + varint_len(zigzag(*i)),
            Value::Bool(_) => 2,
            Value::Text(s) => 1 + varint_len(s.len() as u64) + s.len(),
            Value::Bytes(b) => 1 + varint_len(b.len() as u64) + b.len(),
        }
    }

    fn zigzag(i: i64) -> u64 {
        ((i << 1) ^ (i >> 63)) as u64
    }

    /// Encode a row's envelope exactly as `prost` encodes [`super::Envelope`]: fields in tag
    /// order, proto3 defaults (0) left out, the optional end and every oneof case written.
    pub(super) fn encode(row: &Row) -> Vec<u8> {
        let body: usize = row
            .cells
            .iter()
            .map(|c| {
                let n = cell_len(c);
                1 + varint_len(n as u64) + n
            })
            .sum();
        let mut out = Vec::with_capacity(body + 48);
        put_varint(&mut out, 0x08);
        put_varint(&mut out, u64::from(super::CODEC_VERSION));
        if row.begin_snapshot != 0 {
            out.push(0x10);
            put_varint(&mut out, row.begin_snapshot);
        }
        if let Some(end) = row.end_snapshot {
            out.push(0x18);
            put_varint(&mut out, end);
        }
        for c in &row.cells {
            out.push(0x22);
            put_varint(&mut out, cell_len(c) as u64);
            match c {
                Value::Null => {}
                Value::Int(i) => {
                    out.push(0x08);
                    put_varint(&mut out, zigzag(*i));
                }
                Value::Text(s) => {
                    out.push(0x12);
                    put_varint(&mut out, s.len() as u64);
                    out.extend_from_slice(s.as_bytes());
                }
                Value::Bool(b) => {
                    out.push(0x18);
                    out.push(u8::from(*b));
                }
                Value::Bytes(b) => {
                    out.push(0x22);
                    put_varint(&mut out, b.len() as u64);
                    out.extend_from_slice(b);
                }
            }
        }
        if row.writer_epoch != 0 {
            out.push(0x28);
            put_varint(&mut out, row.writer_epoch);
        }
        if let Some(tuple) = row.tuple {
            out.push(0x30);
            put_varint(&mut out, tuple);
        }
        out
    }

    /// Decode a row's envelope and the cells `wanted` names (the others `Null`).
    pub(super) fn row(bytes: &[u8], wanted: &dyn Fn(usize) -> bool) -> Option<Row> {
        // DuckLake's widest catalog table has 16 columns: one allocation for nearly every row.
        let mut cells = Vec::with_capacity(16);
        let h = envelope(bytes, |c| {
            cells.push(if wanted(cells.len()) {
                cell(c)?
            } else {
                Value::Null
            });
            Some(())
        })?;
        if h.codec == 0 {
            return None;
        }
        Some(Row {
            begin_snapshot: h.begin,
            end_snapshot: h.end,
            cells,
            writer_epoch: h.epoch,
            tuple: h.tuple,
        })
    }
}

/// A stored row read lazily: its MVCC interval is decoded, its cells only on demand. Scans use
/// it to skip invisible versions without decoding them, and callers that need a few columns of
/// many rows read just those.
#[derive(Clone, Debug)]
pub struct RowView<'a> {
    key: &'a [u8],
    bytes: &'a [u8],
    begin_snapshot: u64,
    end_snapshot: Option<u64>,
}

impl<'a> RowView<'a> {
    /// Read the interval of the row stored under `key`. The envelope is checked here; each cell
    /// is checked when it is read ([`RowView::cell`], [`RowView::row`]), so a damaged cell is
    /// reported by the read that needs it, with the error [`Row::decode`] gives.
    pub fn new(key: &'a [u8], bytes: &'a [u8]) -> Result<RowView<'a>> {
        match wire::envelope(bytes, |_| Some(())) {
            Some(h) if h.codec != 0 => Ok(RowView {
                key,
                bytes,
                begin_snapshot: h.begin,
                end_snapshot: h.end,
            }),
            _ => {
                let row = Row::decode_prost(key, bytes)?;
                Ok(RowView {
                    key,
                    bytes,
                    begin_snapshot: row.begin_snapshot,
                    end_snapshot: row.end_snapshot,
                })
            }
        }
    }

    /// The stored key.
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The MVCC interval.
    pub fn version(&self) -> crate::mvcc::Version {
        crate::mvcc::Version {
            begin: self.begin_snapshot,
            end: self.end_snapshot,
        }
    }

    /// The cell at column `index` (`Null` past the stored cells).
    pub fn cell(&self, index: usize) -> Result<Value> {
        let mut seen = 0;
        let mut found = None;
        let walked = wire::envelope(self.bytes, |c| {
            if seen == index {
                found = Some(wire::cell(c)?);
            }
            seen += 1;
            Some(())
        });
        match (walked, found) {
            (Some(_), Some(v)) => Ok(v),
            (Some(_), None) if seen <= index => Ok(Value::Null),
            // Unusual encoding or a damaged cell: the full decoder decides and words the error.
            _ => Ok(self.row()?.cells.get(index).cloned().unwrap_or(Value::Null)),
        }
    }

    /// Decode the whole row.
    pub fn row(&self) -> Result<Row> {
        Row::decode(self.key, self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{parse_hex, RowKey, TableKey};
    use crate::tags;

    fn table() -> &'static TagInfo {
        tags::TABLE.info().unwrap()
    }

    #[test]
    fn parse_cells_reads_each_column_by_its_type() {
        let cells = parse_cells(
            table(),
            &["table_name=orders", "schema_id=7", "path_is_relative=t"],
        )
        .unwrap();
        assert_eq!(
            cells,
            vec![
                Value::Null,
                Value::Null,
                Value::Int(7),
                Value::Text("orders".into()),
                Value::Null,
                Value::Bool(true)
            ]
        );
        assert_eq!(parse_cells(table(), &["table_id=NULL"]).unwrap(), vec![]);
        let e = parse_cells(table(), &["schema_id=x"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not an integer"), "{e}");
        let e = parse_cells(table(), &["nope=1"]).unwrap_err().to_string();
        assert!(e.contains("has no column \"nope\""), "{e}");
        let e = parse_cells(table(), &["table_name"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not COLUMN=VALUE"), "{e}");
    }

    #[test]
    fn round_trip() {
        let key = TableKey {
            table_id: 5,
            begin_snapshot: 3,
        }
        .to_bytes();
        let row = Row {
            begin_snapshot: 3,
            end_snapshot: Some(9),
            cells: vec![
                Value::Int(5),
                Value::Text("3e2a...".into()),
                Value::Int(1),
                Value::Text("orders".into()),
                Value::Null,
                Value::Bool(true),
            ],
            writer_epoch: 7,
            tuple: Some(300),
        };
        let bytes = row.encode(table(), &key).unwrap();
        assert_eq!(Row::decode(&key, &bytes).unwrap(), row);
    }

    /// Bytes written by codec 1, before `writer_epoch` (field 5) existed:
    /// codec=1, begin=3, cells=[Int(5), Text("t")]. Frozen: never regenerate them.
    const CODEC1_ROW: &str = "08 01 10 03 22 02 08 0a 22 03 12 01 74";

    #[test]
    fn decodes_rows_written_before_a_field_was_added() {
        let key = TableKey {
            table_id: 5,
            begin_snapshot: 3,
        }
        .to_bytes();
        let row = Row::decode(&key, &parse_hex(CODEC1_ROW).unwrap()).unwrap();
        assert_eq!(row.begin_snapshot, 3);
        assert_eq!(row.end_snapshot, None);
        assert_eq!(row.cells, vec![Value::Int(5), Value::Text("t".into())]);
        assert_eq!(row.writer_epoch, 0, "absent field decodes as its default");
        assert_eq!(
            row.get(table(), "table_name"),
            Value::Null,
            "missing cells are NULL"
        );
    }

    #[test]
    fn decodes_rows_with_a_field_from_a_newer_codec() {
        // CODEC1_ROW followed by field 15 (varint 99) that no codec here knows.
        let mut bytes = parse_hex(CODEC1_ROW).unwrap();
        bytes.extend_from_slice(&[0x78, 0x63]);
        let key = TableKey {
            table_id: 5,
            begin_snapshot: 3,
        }
        .to_bytes();
        let row = Row::decode(&key, &bytes).unwrap();
        assert_eq!(row.cells.len(), 2);
    }

    #[test]
    fn rejects_cells_that_do_not_fit() {
        let key = TableKey {
            table_id: 5,
            begin_snapshot: 3,
        }
        .to_bytes();
        let row = Row::new(3, vec![Value::Text("five".into())]);
        let err = row.encode(table(), &key).unwrap_err().to_string();
        assert!(
            err.contains("column table_id is bigint but got a text value"),
            "{err}"
        );
        let too_many = Row::new(3, vec![Value::Null; 7]);
        assert!(too_many.encode(table(), &key).is_err());
    }

    #[test]
    fn garbage_is_a_corrupt_error_naming_the_key() {
        let key = TableKey {
            table_id: 5,
            begin_snapshot: 3,
        }
        .to_bytes();
        let err = Row::decode(&key, &[0xff, 0xff, 0xff])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ducklake_table table_id=5 begin_snapshot=3"),
            "{err}"
        );
        let err = decode_u64(b"\xfenext-table-id", &[1, 2])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("counter \"next-table-id\"") && err.contains("2 bytes"),
            "{err}"
        );
    }

    fn arb_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::Int),
            ".{0,12}".prop_map(Value::Text),
            any::<bool>().prop_map(Value::Bool),
            proptest::collection::vec(any::<u8>(), 0..12).prop_map(Value::Bytes),
        ]
    }

    /// The direct decoder against `prost`, the reference: never a different row, never accepting
    /// what `prost` refuses; `RowView` reads the same interval and cells.
    fn agrees(bytes: &[u8]) {
        let fast = wire::row(bytes, &|_| true);
        let reference = Row::decode_prost(b"k", bytes);
        match (&fast, &reference) {
            (Some(f), Ok(r)) => assert_eq!(f, r, "bytes {bytes:02x?}"),
            (Some(f), Err(e)) => panic!("direct decoder accepted {f:?}, prost refused: {e}"),
            (None, _) => {}
        }
        assert_eq!(
            Row::decode(b"k", bytes).ok(),
            reference.as_ref().ok().cloned(),
            "Row::decode agrees with prost on {bytes:02x?}"
        );
        // The borrowing visit: the same interval and cells as prost, or a refusal.
        let mut seen = Vec::new();
        if let Some(v) = visit_cells(bytes, &|_| true, &mut |i, c| seen.push((i, c.to_value()))) {
            let r = match &reference {
                Ok(r) => r,
                Err(e) => panic!("visit_cells accepted {seen:?}, prost refused: {e}"),
            };
            assert_eq!(
                (v.begin_snapshot, v.end_snapshot),
                (r.begin_snapshot, r.end_snapshot)
            );
            assert_eq!(v.cells, r.cells.len(), "cells of {bytes:02x?}");
            let want: Vec<(usize, Value)> = r.cells.iter().cloned().enumerate().collect();
            assert_eq!(seen, want, "visited cells of {bytes:02x?}");
        }
        match (RowView::new(b"k", bytes), &reference) {
            (Ok(v), Ok(r)) => {
                assert_eq!(v.version(), r.version());
                for i in 0..r.cells.len() + 2 {
                    let want = r.cells.get(i).cloned().unwrap_or(Value::Null);
                    assert_eq!(v.cell(i).unwrap(), want, "cell {i} of {bytes:02x?}");
                }
            }
            (Err(_), Err(_)) => {}
            // Cells are checked when read: the damage must show there.
            (Ok(v), Err(_)) => assert!(v.row().is_err(), "RowView hid damage in {bytes:02x?}"),
            (v, r) => panic!("RowView {v:?} against prost {r:?} on {bytes:02x?}"),
        }
    }

    #[test]
    fn direct_encoder_writes_prost_bytes_at_the_edges() {
        let edges = [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::MAX / 2,
            u64::MAX - 1,
            u64::MAX,
        ];
        for n in edges {
            for (end, tuple) in [(None, None), (Some(0), Some(0)), (Some(n), Some(n))] {
                let row = Row {
                    begin_snapshot: n,
                    end_snapshot: end,
                    cells: vec![
                        Value::Int(n as i64),
                        Value::Int(i64::MIN),
                        Value::Int(i64::MAX),
                        Value::Int(-1),
                        Value::Int(0),
                        Value::Text(String::new()),
                        Value::Text("x".repeat(200)),
                        Value::Bool(false),
                        Value::Bool(true),
                        Value::Bytes(Vec::new()),
                        Value::Bytes(vec![0xff; 130]),
                        Value::Null,
                    ],
                    writer_epoch: n,
                    tuple,
                };
                assert_eq!(row.encode_unchecked(), row.encode_prost(), "{row:?}");
                assert_eq!(Row::decode(b"k", &row.encode_unchecked()).unwrap(), row);
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        #[test]
        fn direct_decoder_matches_prost_on_rows(
            begin in 0u64..u64::MAX,
            end in proptest::option::of(0u64..u64::MAX),
            epoch in 0u64..u64::MAX,
            tuple in proptest::option::of(0u64..u64::MAX),
            cells in proptest::collection::vec(arb_value(), 0..8),
        ) {
            let row = Row { begin_snapshot: begin, end_snapshot: end, cells, writer_epoch: epoch, tuple };
            let bytes = row.encode_unchecked();
            proptest::prop_assert_eq!(&bytes, &row.encode_prost(), "same bytes as prost");
            proptest::prop_assert_eq!(wire::row(&bytes, &|_| true), Some(row.clone()));
            agrees(&bytes);
        }

        #[test]
        fn decoding_some_cells_reads_those_and_leaves_the_rest_null(
            cells in proptest::collection::vec(arb_value(), 0..10),
            mask in proptest::prelude::any::<u16>(),
        ) {
            let row = Row { begin_snapshot: 3, end_snapshot: Some(5), cells, writer_epoch: 1, tuple: None };
            let wanted = |i: usize| mask & (1 << i) != 0;
            let some = Row::decode_cells(b"k", &row.encode_unchecked(), &wanted).unwrap();
            let mut expected = row.clone();
            for (i, c) in expected.cells.iter_mut().enumerate() {
                if !wanted(i) {
                    *c = Value::Null;
                }
            }
            proptest::prop_assert_eq!(some, expected);
        }

        #[test]
        fn direct_decoder_matches_prost_on_damaged_rows(
            cells in proptest::collection::vec(arb_value(), 0..6),
            flips in proptest::collection::vec((0usize..64, proptest::prelude::any::<u8>()), 1..4),
            cut in 0usize..80,
        ) {
            let mut bytes = Row { begin_snapshot: 7, end_snapshot: Some(9), cells, writer_epoch: 2, tuple: Some(4) }
                .encode_unchecked();
            for (at, b) in flips {
                if !bytes.is_empty() {
                    let i = at % bytes.len();
                    bytes[i] = b;
                }
            }
            bytes.truncate(cut.max(1));
            agrees(&bytes);
        }

        #[test]
        fn direct_decoder_matches_prost_on_any_bytes(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48),
        ) {
            agrees(&bytes);
        }
    }
}
