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
}

impl Row {
    /// A live row beginning at `begin_snapshot`.
    pub fn new(begin_snapshot: u64, cells: Vec<Value>) -> Row {
        Row {
            begin_snapshot,
            end_snapshot: None,
            cells,
            writer_epoch: 0,
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
    pub fn encode_unchecked(&self) -> Vec<u8> {
        let env = Envelope {
            codec: CODEC_VERSION,
            begin_snapshot: self.begin_snapshot,
            end_snapshot: self.end_snapshot,
            cells: self.cells.iter().cloned().map(Cell::from).collect(),
            writer_epoch: self.writer_epoch,
        };
        env.encode_to_vec()
    }

    /// Decode a row stored under `key`.
    pub fn decode(key: &[u8], bytes: &[u8]) -> Result<Row> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{parse_hex, RowKey, TableKey};
    use crate::tags;

    fn table() -> &'static TagInfo {
        tags::TABLE.info().unwrap()
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
}
