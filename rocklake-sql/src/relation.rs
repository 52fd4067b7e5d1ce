//! Table definitions and how their rows are keyed and encoded in the store.
//!
//! Every table a client creates gets a *relation id* (from the core's `relation` id space) and
//! its definition — the `CREATE TABLE` text — under `0x82 | relation_id`. Its rows live in one
//! of three layouts:
//!
//! - **Tagged**: a DuckLake catalog table under its own registry tag, keyed by the registry's
//!   key fields (`ducklake_data_file`: `0x07 | table_id | data_file_id | begin_snapshot`), the
//!   cells in the registry's column order, `begin_snapshot`/`end_snapshot` of a versioned
//!   table in the row envelope. A key field with no column of the same name (the row id of
//!   `ducklake_metadata`, `ducklake_tag`, ...) is issued from the `relation-row` id space.
//! - **Inlined**: `ducklake_inlined_data_<table>_<version>` rows under `0xFD | table_id |
//!   row_id | begin_snapshot`, cells `row_id, schema_version, data`, where `data` is the whole
//!   SQL row encoded as a row.
//! - **Rows**: every other table: `0x83 | relation_id | row_id`, cells `row_id, data`.
//!
//! A tagged or inlined row whose storage key another row of its table already holds (DuckLake
//! writes such rows, and PostgreSQL's heap keeps every one of them) goes where a plain table's
//! rows go, `0x83 | relation_id | row_id`, as a plain table's row: the *overflow* of the table.
//! Every read of the table's key ranges also reads the overflow rows whose storage key would
//! fall in them (see [`RelDef::overflow_range`]).
//!
//! A table with a PRIMARY KEY also keeps, per row, `0x80 | 0x02 | relation_id | key value` →
//! the row's storage key: a commit that adds one carries the precondition "absent", which is
//! how two sessions inserting the same key are told apart atomically (SQLSTATE 23505).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Expr, Operator};
use rocklake_core::backend::KeyRange;
use rocklake_core::keys::{self, row_key};
use rocklake_core::tags::{self, ColType, Tag, TagRange};
use rocklake_core::values::{Row, Value};

use crate::error::{state, Result, SqlError};
use crate::types::SqlType;

/// Name of the hidden column that carries a row's storage key in the plans of UPDATE and
/// DELETE (never in a client's own query).
pub const KEY_COLUMN: &str = "__rocklake_key";

/// `0x80` index type of primary-key entries.
pub const INDEX_PRIMARY_KEY: u8 = 0x02;

/// `0x80` index type of the tuple numbers of tagged tables' rows (`ctid`).
pub const INDEX_TUPLE: u8 = 0x03;

/// `0x80` index type of the names of schemas and tables: one key per name, so that two
/// transactions creating one name cannot both commit.
pub const INDEX_RELATION_NAME: u8 = 0x04;

/// The name key of schema `schema` (`table` `None`) or of table `schema.table`:
/// `0x80 | 0x04 | schema [| 0x00 | table]` (PostgreSQL names hold no NUL).
pub fn name_key(schema: &str, table: Option<&str>) -> Vec<u8> {
    let mut k = vec![tags::SECONDARY_INDEX.0, INDEX_RELATION_NAME];
    k.extend_from_slice(schema.as_bytes());
    if let Some(t) = table {
        k.push(0);
        k.extend_from_slice(t.as_bytes());
    }
    k
}

/// One declared column.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnDef {
    /// Name as stored (unquoted names folded to lower case, as PostgreSQL does).
    pub name: String,
    /// Declared type.
    pub ty: SqlType,
    /// `NOT NULL` (primary-key columns always are).
    pub not_null: bool,
    /// Declared `TEXT` rather than `VARCHAR` (both are [`SqlType::Text`]; clients are told
    /// which, as PostgreSQL tells them).
    pub is_text: bool,
}

impl ColumnDef {
    /// The PostgreSQL type name clients are told (`varchar`, `text`, `int8`, ...).
    pub fn pg_type_name(&self) -> &'static str {
        if self.is_text {
            if matches!(self.ty, SqlType::Array(_)) {
                "_text"
            } else {
                "text"
            }
        } else {
            crate::pg_types::sql_type_name(self.ty)
        }
    }
}

/// Where one SQL column of a tagged table lives in the stored row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// The envelope's `begin_snapshot`.
    Begin,
    /// The envelope's `end_snapshot`.
    End,
    /// This cell of the registry's columns.
    Cell(usize),
}

/// One field of a storage key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyPart {
    /// The value of this SQL column.
    Column(usize),
    /// An id issued when the row is first written, kept across updates.
    Issued,
}

/// How a table's rows are stored.
#[derive(Clone, Debug, PartialEq)]
pub enum Layout {
    /// Under a registry tag (DuckLake's catalog tables).
    Tagged {
        /// The tag.
        tag: Tag,
        /// The key's fields after the tag.
        key: Vec<KeyPart>,
        /// Per SQL column, where it is stored.
        slots: Vec<Slot>,
        /// The registry's column count.
        cells: usize,
    },
    /// `ducklake_inlined_data_<table_id>_<schema_version>` under `0xFD`.
    Inlined {
        /// DuckLake's table id.
        table_id: u64,
        /// DuckLake's schema version.
        version: u64,
        /// SQL columns `row_id`, `begin_snapshot`, `end_snapshot`.
        row_id: usize,
        /// See `row_id`.
        begin: usize,
        /// See `row_id`.
        end: usize,
    },
    /// Under `0x83 | relation_id`.
    Rows,
}

/// A table definition.
#[derive(Clone, Debug, PartialEq)]
pub struct RelDef {
    /// Relation id (key of the definition under `0x82`).
    pub id: u64,
    /// Schema name.
    pub schema: String,
    /// Table name.
    pub name: String,
    /// Columns in declared order.
    pub columns: Vec<ColumnDef>,
    /// Primary-key columns (empty: none).
    pub primary_key: Vec<usize>,
    /// Storage layout.
    pub layout: Layout,
    /// The canonical `CREATE TABLE` text stored for it.
    pub definition: String,
}

/// A stored row read back: its storage key and its SQL cells in column order.
#[derive(Clone, Debug)]
pub struct StoredRow {
    /// Storage key.
    pub key: Bytes,
    /// Cells in the table's column order.
    pub cells: Vec<Value>,
    /// The tuple number behind `ctid` (see [`RelDef::ctid_text`]), when read.
    pub tuple: Option<u64>,
}

impl RelDef {
    /// Choose the layout for a new table. `tagged_schema`: whether the table's schema holds the
    /// tables under registry tags (inlined-data rows go under `0xFD` only then); `tag_taken`
    /// says whether a registry tag already holds another relation's rows.
    pub fn layout_for(
        name: &str,
        columns: &[ColumnDef],
        tagged_schema: bool,
        tag_taken: &dyn Fn(Tag) -> bool,
    ) -> Layout {
        let find = |n: &str| columns.iter().position(|c| c.name == n);
        if let Some(rest) = name
            .strip_prefix("ducklake_inlined_data_")
            .filter(|_| tags::by_name(name).is_none())
        {
            let mut parts = rest.splitn(2, '_');
            let tid = parts.next().and_then(|p| p.parse::<u64>().ok());
            let ver = parts.next().and_then(|p| p.parse::<u64>().ok());
            if let (Some(table_id), Some(version), Some(row_id), Some(begin), Some(end)) = (
                tid,
                ver,
                find("row_id"),
                find("begin_snapshot"),
                find("end_snapshot"),
            ) {
                let ints = [row_id, begin, end]
                    .iter()
                    .all(|i| columns[*i].ty == SqlType::BigInt);
                if ints && tagged_schema && table_id <= keys_max() {
                    return Layout::Inlined {
                        table_id,
                        version,
                        row_id,
                        begin,
                        end,
                    };
                }
            }
            return Layout::Rows;
        }
        let Some(info) = tags::by_name(name) else {
            return Layout::Rows;
        };
        if info.range != TagRange::Protocol || tag_taken(info.tag) {
            return Layout::Rows;
        }
        let mut slots = Vec::with_capacity(columns.len());
        for c in columns {
            // A versioned table keeps its interval in the row envelope; so does a table the
            // registry lists unversioned whose DuckLake columns still carry one (the tag
            // tables).
            let envelope = info.versioned || info.column_index(&c.name).is_none();
            let slot = if envelope && c.name == "begin_snapshot" {
                if c.ty != SqlType::BigInt {
                    return Layout::Rows;
                }
                Slot::Begin
            } else if envelope && c.name == "end_snapshot" {
                if c.ty != SqlType::BigInt {
                    return Layout::Rows;
                }
                Slot::End
            } else {
                let Some(i) = info.column_index(&c.name) else {
                    return Layout::Rows;
                };
                let fits = matches!(
                    (c.ty, info.columns[i].ty),
                    (SqlType::BigInt, ColType::BigInt)
                        | (SqlType::Text, ColType::Text)
                        | (SqlType::Uuid, ColType::Uuid | ColType::Text)
                        | (SqlType::Boolean, ColType::Bool)
                        | (SqlType::TimestampTz, ColType::TimestampTz)
                        | (SqlType::Bytea, ColType::Bytes)
                );
                if !fits {
                    return Layout::Rows;
                }
                Slot::Cell(i)
            };
            slots.push(slot);
        }
        let key = info
            .key_fields
            .iter()
            .map(|f| {
                let direct = find(f);
                // The registry's `file_id` is the table's own file id column.
                let alias = match *f {
                    "file_id" => find("delete_file_id").or_else(|| find("data_file_id")),
                    _ => None,
                };
                match direct.or(alias) {
                    Some(i) if columns[i].ty == SqlType::BigInt => KeyPart::Column(i),
                    _ => KeyPart::Issued,
                }
            })
            .collect();
        Layout::Tagged {
            tag: info.tag,
            key,
            slots,
            cells: info.columns.len(),
        }
    }

    /// The index of a column, or PostgreSQL's 42703 naming it.
    pub fn column_index(&self, name: &str) -> Result<usize> {
        self.columns
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| {
                SqlError::new(
                    state::UNDEFINED_COLUMN,
                    format!(
                        "column \"{name}\" of relation \"{}\" does not exist",
                        self.name
                    ),
                )
            })
    }

    /// Qualified name as PostgreSQL prints it in messages.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }

    /// The primary-key constraint's name, as PostgreSQL names it.
    pub fn pkey_name(&self) -> String {
        format!("{}_pkey", self.name)
    }

    /// The table's oid in `pg_class` (its primary-key index takes the next one).
    pub fn table_oid(&self) -> i64 {
        crate::pg_types::FIRST_USER_OID + 2 * self.id as i64
    }

    /// The Arrow schema DataFusion sees: the declared columns, then `ctid` and the storage key
    /// when asked for.
    pub fn arrow_schema(&self, ctid: bool, key: bool) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .columns
            .iter()
            .map(|c| {
                crate::pg_types::field(
                    &c.name,
                    c.ty.arrow(),
                    !c.not_null,
                    c.pg_type_name(),
                    crate::pg_types::sql_typmod(c.ty),
                )
            })
            .collect();
        if ctid {
            fields.push(crate::pg_types::field(
                "ctid",
                DataType::Utf8,
                false,
                "tid",
                -1,
            ));
        }
        if key {
            fields.push(Field::new(KEY_COLUMN, DataType::Binary, false));
        }
        Arc::new(Schema::new(fields))
    }

    /// The key range holding every row of this table.
    pub fn full_range(&self) -> KeyRange {
        match &self.layout {
            Layout::Tagged { tag, .. } => KeyRange::prefix(&[tag.0]),
            Layout::Inlined { table_id, .. } => {
                KeyRange::prefix(&keys::prefix(tags::INLINED_INSERT, &[*table_id]))
            }
            Layout::Rows => KeyRange::prefix(&keys::prefix(tags::RELATION_ROW, &[self.id])),
        }
    }

    /// Key ranges that hold every row the conjunction `filters` can match (a superset:
    /// DataFusion evaluates the filters again on what the scan returns). Equalities and `IN`
    /// lists on leading key columns become point prefixes, a range on the next key column a
    /// range inside each; anything else reads the whole table.
    pub fn ranges_for(&self, filters: &[Expr]) -> Vec<KeyRange> {
        let (prefix_head, parts): (Vec<u8>, Vec<KeyPart>) = match &self.layout {
            Layout::Tagged { tag, key, .. } => (vec![tag.0], key.clone()),
            Layout::Inlined {
                table_id,
                row_id,
                begin,
                ..
            } => (
                keys::prefix(tags::INLINED_INSERT, &[*table_id]),
                vec![KeyPart::Column(*row_id), KeyPart::Column(*begin)],
            ),
            Layout::Rows => return vec![self.full_range()],
        };
        let mut cons: BTreeMap<usize, Constraint> = BTreeMap::new();
        for f in filters {
            collect_constraints(f, &self.columns, &mut cons);
        }
        let mut prefixes: Vec<Vec<u8>> = vec![prefix_head];
        for part in &parts {
            let KeyPart::Column(col) = part else { break };
            match cons.get(col) {
                Some(Constraint::Empty) => return Vec::new(),
                Some(Constraint::Eq(set)) if prefixes.len() * set.len() <= 512 => {
                    prefixes = prefixes
                        .iter()
                        .flat_map(|p| {
                            set.iter().map(move |v| {
                                let mut k = p.clone();
                                k.extend_from_slice(&v.to_be_bytes());
                                k
                            })
                        })
                        .collect();
                }
                Some(Constraint::Range { lo, hi }) => {
                    let (lo, hi) = (*lo, *hi);
                    if lo > hi {
                        return Vec::new();
                    }
                    return prefixes
                        .iter()
                        .map(|p| {
                            let start = [p.as_slice(), &lo.to_be_bytes()].concat();
                            let end = [p.as_slice(), &hi.to_be_bytes()].concat();
                            let end = KeyRange::prefix(&end).end;
                            KeyRange {
                                start: Bound::Included(Bytes::from(start)),
                                end,
                            }
                        })
                        .collect();
                }
                _ => break,
            }
        }
        prefixes.iter().map(|p| KeyRange::prefix(p)).collect()
    }

    /// Build the storage key and value of `cells`. `old_key` (an update) supplies the issued
    /// key fields; `issue` draws new ones.
    pub fn encode(
        &self,
        cells: &[Value],
        old_key: Option<&[u8]>,
        issue: &mut dyn FnMut() -> Result<u64>,
        tuple: u64,
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        let key_int = |i: usize| -> Result<u64> {
            match &cells[i] {
                Value::Int(v) if *v >= 0 && (*v as u64) <= keys_max() => Ok(*v as u64),
                Value::Int(v) => Err(SqlError::new(
                    state::OUT_OF_RANGE,
                    format!(
                        "column \"{}\" of relation \"{}\" is part of RockLake's storage key and \
                         must be in [0, 2^48 - 1]; got {v}",
                        self.columns[i].name, self.name
                    ),
                )),
                other => Err(SqlError::new(
                    state::NOT_NULL_VIOLATION,
                    format!(
                        "column \"{}\" of relation \"{}\" is part of RockLake's storage key and \
                         cannot be {other}",
                        self.columns[i].name, self.name
                    ),
                )),
            }
        };
        match &self.layout {
            Layout::Tagged {
                tag,
                key,
                slots,
                cells: n,
            } => {
                let mut fields = Vec::with_capacity(key.len());
                for (pos, part) in key.iter().enumerate() {
                    fields.push(match part {
                        // A NULL key column whose value is also a cell (not the envelope's
                        // begin_snapshot) is keyed 0; the cell keeps the NULL.
                        KeyPart::Column(i)
                            if cells[*i] == Value::Null && matches!(slots[*i], Slot::Cell(_)) =>
                        {
                            0
                        }
                        KeyPart::Column(i) => key_int(*i)?,
                        KeyPart::Issued => match old_key {
                            Some(k) if k.len() > 8 * (pos + 1) => {
                                u64::from_be_bytes(k[1 + 8 * pos..9 + 8 * pos].try_into().unwrap())
                            }
                            _ => issue()?,
                        },
                    });
                }
                let key = row_key(*tag, &fields);
                let mut row = Row::new(0, vec![Value::Null; *n]);
                for (i, slot) in slots.iter().enumerate() {
                    match slot {
                        Slot::Begin => row.begin_snapshot = key_int(i)?,
                        Slot::End => {
                            row.end_snapshot = match &cells[i] {
                                Value::Null => None,
                                Value::Int(v) if *v >= 0 => Some(*v as u64),
                                other => {
                                    return Err(SqlError::new(
                                        state::OUT_OF_RANGE,
                                        format!(
                                            "end_snapshot of relation \"{}\" must be a \
                                             non-negative integer or NULL; got {other}",
                                            self.name
                                        ),
                                    ))
                                }
                            }
                        }
                        Slot::Cell(c) => row.cells[*c] = cells[i].clone(),
                    }
                }
                // Trailing NULL cells need no bytes (the codec reads them back as NULL).
                while matches!(row.cells.last(), Some(Value::Null)) {
                    row.cells.pop();
                }
                // The tuple number goes in the row as well as in the tuple index: a scan then
                // reads one pair per row, not two.
                row.tuple = Some(tuple);
                Ok((key, row.encode_unchecked()))
            }
            Layout::Inlined {
                table_id,
                version,
                row_id,
                begin,
                end,
            } => {
                let rid = key_int(*row_id)?;
                let b = key_int(*begin)?;
                let key = row_key(tags::INLINED_INSERT, &[*table_id, rid, b]);
                let mut row = Row::new(
                    b,
                    vec![
                        Value::Int(rid as i64),
                        Value::Int(*version as i64),
                        Value::Bytes(Row::new(tuple, cells.to_vec()).encode_unchecked()),
                    ],
                );
                row.end_snapshot = match &cells[*end] {
                    Value::Int(e) if *e >= 0 => Some(*e as u64),
                    _ => None,
                };
                Ok((key, row.encode_unchecked()))
            }
            Layout::Rows => {
                let rid = match old_key {
                    Some(k) if k.len() == 17 => u64::from_be_bytes(k[9..17].try_into().unwrap()),
                    _ => issue()?,
                };
                Ok(self.encode_plain(cells, rid, tuple))
            }
        }
    }

    /// A row as a plain table stores it: `0x83 | relation_id | rid`, cells `rid, data`.
    fn encode_plain(&self, cells: &[Value], rid: u64, tuple: u64) -> (Vec<u8>, Vec<u8>) {
        let key = row_key(tags::RELATION_ROW, &[self.id, rid]);
        let row = Row::new(
            0,
            vec![
                Value::Int(rid as i64),
                Value::Bytes(Row::new(tuple, cells.to_vec()).encode_unchecked()),
            ],
        );
        (key, row.encode_unchecked())
    }

    /// Where the rows of a tagged or inlined table go whose storage key another row already
    /// holds: the relation-row space of this relation, `0x83 | relation_id`. `None` for a plain
    /// table, whose every key is issued and so never shared.
    pub fn overflow_range(&self) -> Option<KeyRange> {
        match self.layout {
            Layout::Rows => None,
            Layout::Tagged { .. } | Layout::Inlined { .. } => Some(KeyRange::prefix(
                &keys::prefix(tags::RELATION_ROW, &[self.id]),
            )),
        }
    }

    /// Whether `key` is one of this table's overflow rows (see [`RelDef::overflow_range`]).
    pub fn is_overflow(&self, key: &[u8]) -> bool {
        !matches!(self.layout, Layout::Rows) && key.first() == Some(&tags::RELATION_ROW.0)
    }

    /// The overflow row `rid` holding `cells` (see [`RelDef::overflow_range`]); an overflow
    /// row keeps its key when updated (`rid` from [`RelDef::overflow_id`]).
    pub fn encode_overflow(&self, cells: &[Value], rid: u64, tuple: u64) -> (Vec<u8>, Vec<u8>) {
        self.encode_plain(cells, rid, tuple)
    }

    /// The row id of an overflow row's key.
    pub fn overflow_id(&self, key: &[u8]) -> Option<u64> {
        (self.is_overflow(key) && key.len() == 17)
            .then(|| u64::from_be_bytes(key[9..17].try_into().unwrap()))
    }

    /// The storage key an overflow row's cells would have (the key another row holds), to
    /// tell which key ranges it belongs to; `None` when the cells make no key.
    pub fn home_key(&self, cells: &[Value]) -> Option<Vec<u8>> {
        self.encode(cells, None, &mut || Ok(0), 0)
            .ok()
            .map(|(k, _)| k)
    }

    /// Whether writing a row (an insert when `old_key` is `None`) draws an issued id.
    pub fn needs_issued_id(&self, old_key: Option<&[u8]>) -> bool {
        match &self.layout {
            Layout::Tagged { key, .. } => old_key.is_none() && key.contains(&KeyPart::Issued),
            Layout::Rows => old_key.is_none(),
            Layout::Inlined { .. } => false,
        }
    }

    /// Decode a stored pair into SQL cells; `None` when the pair belongs to another relation
    /// sharing the key range (another schema version of an inlined table).
    pub fn decode(&self, key: &[u8], value: &[u8]) -> Result<Option<(Vec<Value>, Option<u64>)>> {
        self.decode_cells(key, value, None)
    }

    /// Which stored cells hold the SQL columns `columns` marks; `None` when this layout nests
    /// its cells in one (then a row is decoded whole).
    pub fn stored_cells(&self, columns: &[bool]) -> Option<Vec<bool>> {
        let Layout::Tagged { slots, cells, .. } = &self.layout else {
            return None;
        };
        let mut wanted = vec![false; *cells];
        for (slot, &needed) in slots.iter().zip(columns) {
            if let (Slot::Cell(i), true) = (slot, needed) {
                if let Some(w) = wanted.get_mut(*i) {
                    *w = true;
                }
            }
        }
        Some(wanted)
    }

    /// [`RelDef::decode`] reading only the stored cells `cells` marks (from
    /// [`RelDef::stored_cells`]); the SQL columns of the others are `Null`.
    pub fn decode_cells(
        &self,
        key: &[u8],
        value: &[u8],
        cells: Option<&[bool]>,
    ) -> Result<Option<(Vec<Value>, Option<u64>)>> {
        let overflow = self.is_overflow(key);
        let row = match cells.filter(|_| !overflow) {
            None => Row::decode(key, value),
            Some(w) => Row::decode_cells(key, value, &|i| w.get(i).copied().unwrap_or(false)),
        }
        .map_err(SqlError::from)?;
        let nested = |v: Option<&Value>| -> Result<(Vec<Value>, Option<u64>)> {
            match v {
                Some(Value::Bytes(b)) => {
                    let inner = Row::decode(key, b).map_err(SqlError::from)?;
                    let mut cells = inner.cells;
                    cells.resize(self.columns.len(), Value::Null);
                    Ok((cells, Some(inner.begin_snapshot)))
                }
                _ => Err(SqlError::new(
                    state::DATA_CORRUPTED,
                    format!(
                        "{}: the row under {} has no data cell",
                        self.qualified(),
                        keys::render(key)
                    ),
                )),
            }
        };
        if overflow {
            return nested(row.cells.get(1)).map(Some);
        }
        match &self.layout {
            Layout::Tagged { slots, .. } => {
                // Each stored cell has one column (columns have distinct names), so cells are
                // moved out, not copied.
                let mut cells = row.cells;
                let tuple = row.tuple;
                Ok(Some((
                    slots
                        .iter()
                        .map(|s| match s {
                            Slot::Begin => Value::Int(row.begin_snapshot as i64),
                            Slot::End => row
                                .end_snapshot
                                .map(|e| Value::Int(e as i64))
                                .unwrap_or(Value::Null),
                            Slot::Cell(i) => cells
                                .get_mut(*i)
                                .map(|c| std::mem::replace(c, Value::Null))
                                .unwrap_or(Value::Null),
                        })
                        .collect(),
                    tuple,
                )))
            }
            Layout::Inlined { version, .. } => {
                if row.cells.get(1) != Some(&Value::Int(*version as i64)) {
                    return Ok(None);
                }
                nested(row.cells.get(2)).map(Some)
            }
            Layout::Rows => nested(row.cells.get(1)).map(Some),
        }
    }

    /// `ctid` as PostgreSQL writes it, `(block,offset)`, from a tuple number: every row
    /// version a table gets (each INSERT, and each UPDATE, as in PostgreSQL's heap) takes the
    /// table's next number from 1, so a small table's tuples read `(0,1)`, `(0,2)`, ... like a
    /// fresh PostgreSQL table's; the number is stored with the row and never changes.
    pub fn ctid_text(tuple: u64) -> String {
        format!("({},{})", tuple >> 16, tuple & 0xFFFF)
    }

    /// Where the tuple number of a tagged table's row is kept: `0x80 | 0x03 | relation_id |
    /// row key`.
    pub fn tuple_index_key(&self, row_key: &[u8]) -> Vec<u8> {
        let mut k = self.tuple_index_prefix();
        k.extend_from_slice(row_key);
        k
    }

    /// The prefix of [`RelDef::tuple_index_key`]s.
    pub fn tuple_index_prefix(&self) -> Vec<u8> {
        let mut k = vec![tags::SECONDARY_INDEX.0, INDEX_TUPLE];
        k.extend_from_slice(&self.id.to_be_bytes());
        k
    }

    /// Whether the tuple number lives in the tuple index (tagged rows) rather than in the row.
    pub fn tuples_indexed(&self) -> bool {
        matches!(self.layout, Layout::Tagged { .. })
    }

    /// The `0x80` primary-key index key of a row, when the table has a primary key.
    pub fn pk_index_key(&self, cells: &[Value]) -> Result<Option<Vec<u8>>> {
        if self.primary_key.is_empty() {
            return Ok(None);
        }
        let mut k = vec![tags::SECONDARY_INDEX.0, INDEX_PRIMARY_KEY];
        k.extend_from_slice(&self.id.to_be_bytes());
        for &i in &self.primary_key {
            match &cells[i] {
                Value::Null => {
                    return Err(not_null(self, i));
                }
                Value::Int(v) => k.extend_from_slice(&((*v as u64) ^ (1 << 63)).to_be_bytes()),
                other => {
                    let b = Row::new(0, vec![other.clone()]).encode_unchecked();
                    k.extend_from_slice(&(b.len() as u32).to_be_bytes());
                    k.extend_from_slice(&b);
                }
            }
        }
        Ok(Some(k))
    }

    /// The prefix of this table's primary-key index entries.
    pub fn pk_index_prefix(&self) -> Vec<u8> {
        let mut k = vec![tags::SECONDARY_INDEX.0, INDEX_PRIMARY_KEY];
        k.extend_from_slice(&self.id.to_be_bytes());
        k
    }

    /// PostgreSQL's detail line for a duplicate key: `Key (snapshot_id)=(5) already exists.`
    pub fn duplicate_detail(&self, cells: &[Value]) -> String {
        let names: Vec<&str> = self
            .primary_key
            .iter()
            .map(|i| self.columns[*i].name.as_str())
            .collect();
        let vals: Vec<String> = self
            .primary_key
            .iter()
            .map(|i| match &cells[*i] {
                Value::Text(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        format!(
            "Key ({})=({}) already exists.",
            names.join(", "),
            vals.join(", ")
        )
    }

    /// Refuse NULL in NOT NULL columns (23502, PostgreSQL's message).
    pub fn check_not_null(&self, cells: &[Value]) -> Result<()> {
        for (i, c) in self.columns.iter().enumerate() {
            if (c.not_null || self.primary_key.contains(&i)) && cells[i] == Value::Null {
                return Err(not_null(self, i));
            }
        }
        Ok(())
    }
}

fn not_null(rel: &RelDef, i: usize) -> SqlError {
    SqlError::new(
        state::NOT_NULL_VIOLATION,
        format!(
            "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
            rel.columns[i].name, rel.name
        ),
    )
}

/// The largest value a key field holds (ids are 48-bit).
pub const fn keys_max() -> u64 {
    (1 << 48) - 1
}

/// What the filters say about one key column.
#[derive(Clone, Debug)]
enum Constraint {
    /// One of these values.
    Eq(Vec<u64>),
    /// Between these, inclusive.
    Range { lo: u64, hi: u64 },
    /// Nothing can match (`IS NULL` on a key column, a negative or impossible bound).
    Empty,
}

fn literal_i64(e: &Expr) -> Option<i64> {
    match e {
        Expr::Literal(v, _) => match v {
            ScalarValue::Int64(Some(v)) => Some(*v),
            ScalarValue::Int32(Some(v)) => Some((*v).into()),
            ScalarValue::Int16(Some(v)) => Some((*v).into()),
            ScalarValue::Int8(Some(v)) => Some((*v).into()),
            ScalarValue::UInt32(Some(v)) => Some((*v).into()),
            ScalarValue::UInt16(Some(v)) => Some((*v).into()),
            ScalarValue::UInt8(Some(v)) => Some((*v).into()),
            _ => None,
        },
        _ => None,
    }
}

fn column_of(e: &Expr, columns: &[ColumnDef]) -> Option<usize> {
    match e {
        Expr::Column(c) => columns
            .iter()
            .position(|d| d.name == c.name && d.ty == SqlType::BigInt),
        _ => None,
    }
}

fn merge(cons: &mut BTreeMap<usize, Constraint>, col: usize, new: Constraint) {
    let merged = match (cons.remove(&col), new) {
        (None, n) => n,
        (Some(Constraint::Empty), _) | (_, Constraint::Empty) => Constraint::Empty,
        (Some(Constraint::Eq(a)), Constraint::Eq(b)) => {
            let v: Vec<u64> = a.into_iter().filter(|x| b.contains(x)).collect();
            if v.is_empty() {
                Constraint::Empty
            } else {
                Constraint::Eq(v)
            }
        }
        (Some(Constraint::Eq(a)), Constraint::Range { lo, hi })
        | (Some(Constraint::Range { lo, hi }), Constraint::Eq(a)) => {
            let v: Vec<u64> = a.into_iter().filter(|x| *x >= lo && *x <= hi).collect();
            if v.is_empty() {
                Constraint::Empty
            } else {
                Constraint::Eq(v)
            }
        }
        (Some(Constraint::Range { lo: a, hi: b }), Constraint::Range { lo: c, hi: d }) => {
            Constraint::Range {
                lo: a.max(c),
                hi: b.min(d),
            }
        }
    };
    cons.insert(col, merged);
}

fn collect_constraints(e: &Expr, columns: &[ColumnDef], cons: &mut BTreeMap<usize, Constraint>) {
    let max = keys_max() as i64;
    match e {
        Expr::BinaryExpr(b) if b.op == Operator::And => {
            collect_constraints(&b.left, columns, cons);
            collect_constraints(&b.right, columns, cons);
        }
        Expr::BinaryExpr(b) if b.op == Operator::Or => {
            // `a = 1 OR a = 2` (what DataFusion makes of a short IN list): the union of the
            // two sides' value sets, when both sides constrain the same one column to values.
            let (mut l, mut r) = (BTreeMap::new(), BTreeMap::new());
            collect_constraints(&b.left, columns, &mut l);
            collect_constraints(&b.right, columns, &mut r);
            if l.len() == 1 && r.len() == 1 {
                let (lc, lv) = l.pop_first().unwrap();
                let (rc, rv) = r.pop_first().unwrap();
                if lc == rc {
                    let union = match (lv, rv) {
                        (Constraint::Empty, other) | (other, Constraint::Empty) => Some(other),
                        (Constraint::Eq(mut a), Constraint::Eq(b)) => {
                            a.extend(b);
                            a.sort_unstable();
                            a.dedup();
                            Some(Constraint::Eq(a))
                        }
                        _ => None,
                    };
                    if let Some(c) = union {
                        merge(cons, lc, c);
                    }
                }
            }
        }
        Expr::BinaryExpr(b) => {
            let (col, op, v) = match (column_of(&b.left, columns), literal_i64(&b.right)) {
                (Some(c), Some(v)) => (c, b.op, v),
                _ => match (literal_i64(&b.left), column_of(&b.right, columns)) {
                    (Some(v), Some(c)) => match b.op.swap() {
                        Some(op) => (c, op, v),
                        None => return,
                    },
                    _ => return,
                },
            };
            let c = match op {
                Operator::Eq if (0..=max).contains(&v) => Constraint::Eq(vec![v as u64]),
                Operator::Eq => Constraint::Empty,
                Operator::Lt if v <= 0 => Constraint::Empty,
                Operator::Lt => Constraint::Range {
                    lo: 0,
                    hi: (v - 1).min(max) as u64,
                },
                Operator::LtEq if v < 0 => Constraint::Empty,
                Operator::LtEq => Constraint::Range {
                    lo: 0,
                    hi: v.min(max) as u64,
                },
                Operator::Gt if v >= max => Constraint::Empty,
                Operator::Gt => Constraint::Range {
                    lo: (v + 1).max(0) as u64,
                    hi: max as u64,
                },
                Operator::GtEq if v > max => Constraint::Empty,
                Operator::GtEq => Constraint::Range {
                    lo: v.max(0) as u64,
                    hi: max as u64,
                },
                _ => return,
            };
            merge(cons, col, c);
        }
        Expr::InList(l) if !l.negated => {
            let Some(col) = column_of(&l.expr, columns) else {
                return;
            };
            let mut vals = Vec::with_capacity(l.list.len());
            for item in &l.list {
                match literal_i64(item) {
                    Some(v) if (0..=max).contains(&v) => vals.push(v as u64),
                    Some(_) => {}
                    None => return,
                }
            }
            vals.sort_unstable();
            vals.dedup();
            merge(
                cons,
                col,
                if vals.is_empty() {
                    Constraint::Empty
                } else {
                    Constraint::Eq(vals)
                },
            );
        }
        Expr::IsNull(inner) => {
            if let Some(col) = column_of(inner, columns) {
                merge(cons, col, Constraint::Empty);
            }
        }
        _ => {}
    }
}
