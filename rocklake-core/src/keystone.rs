//! Keystone identity: id spaces, their stored marks, and how keys are issued.
//!
//! Every entity that needs an integer identity draws it from an *id space*. An id lies in
//! `[1, 2^48 - 1]`; 0 means unset. Each space keeps a high-water mark `next_id`, stored under
//! its counter key (`0xFE | "next-<space>-id"`), never recomputed from the rows, and only rising.
//!
//! - A **named** key (the caller chooses it, as DuckLake does) at or above the mark moves the mark
//!   past it; a named key below the mark leaves it where it is.
//! - An **issued** key is the current mark. Issued keys ascend strictly in the order they are
//!   issued, across all tasks and threads, and are never issued twice, not even after a crash.
//! - A bound key (live or deleted row) is refused [`Error::AlreadyExists`]; a key outside the
//!   space is refused [`Error::OutOfRange`]. Nothing of a refused write lands.
//! - Deleting a row keeps its key bound; only PURGE (an admin operation) frees it, and the engine
//!   never issues a purged key (purged keys are below the mark).
//!
//! # Issuing without I/O
//!
//! The stored counter is a durable *ceiling*: no id at or above it has ever been issued. The
//! writer keeps the live mark in memory and, when the mark reaches the ceiling, durably raises
//! the ceiling by a reservation (1024 ids by default) before issuing. Issuing is therefore a
//! locked increment in the common case. A crash loses the unused rest of a reservation (a gap,
//! which Keystone allows); a clean close writes the exact mark back, so a catalog that was
//! closed shows the same `next_id` when reopened.
//!
//! # Where the binding lives
//!
//! Each bound key has a binding under the secondary-index tag: `0x80 | 0x01 | space | id`, whose
//! value ([`crate::values::Binding`]) names the row's key and whether the row is deleted. Commits
//! that bind a key carry the precondition "binding absent", so two writers naming one key race
//! safely: exactly one commit lands, the other is refused `AlreadyExists`.

use std::fmt;
use std::sync::Mutex;

use bytes::Bytes;
use serde::Serialize;

use crate::backend::WriteBatch;
use crate::error::{Error, Result};
use crate::keys::{self, row_key, Key};
use crate::tags::{self, Tag, TagInfo};
use crate::values::{self, Binding, Value};

/// The largest id: `2^48 - 1`.
pub const MAX_ID: u64 = (1 << 48) - 1;

/// Budget use at which an id space is reported as a warning.
pub const WARN_AT_PERCENT: f64 = 90.0;

/// How many draws an issued key gets when other sessions keep naming the drawn key.
pub const MAX_DRAWS: usize = 8;

/// Default number of ids reserved per durable counter write.
pub const DEFAULT_RESERVATION: u64 = 1024;

/// How the rows of an id space are keyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `tag | id` (unversioned table).
    Id,
    /// `tag | id | begin_snapshot` (versioned table).
    IdVersioned,
    /// `tag | parent_id | id | begin_snapshot` (columns and files belong to a table).
    ChildVersioned,
    /// Row keys are built by the caller ([`crate::txn::Transaction::insert_with_key`]).
    Custom,
}

/// One id space.
#[derive(Debug, PartialEq, Eq)]
pub struct IdSpace {
    /// Short name: `table`, `snapshot`, ...
    pub name: &'static str,
    /// Counter name under `0xFE`.
    pub counter: &'static str,
    /// The table its rows live in; its byte is the space's code in binding keys.
    pub table: Tag,
    /// How row keys are built from an id.
    pub layout: Layout,
}

impl IdSpace {
    /// The space's code in binding keys (the byte of its table's tag).
    pub fn code(&self) -> u8 {
        self.table.0
    }

    /// The row column that holds the id, when the table has one.
    pub fn id_column(&self) -> Option<&'static str> {
        let info = self.table.info()?;
        match self.layout {
            Layout::Custom => None,
            Layout::ChildVersioned if self.table == tags::DATA_FILE => Some("data_file_id"),
            Layout::ChildVersioned if self.table == tags::DELETE_FILE => Some("delete_file_id"),
            Layout::ChildVersioned => info.key_fields.get(1).copied(),
            Layout::Id | Layout::IdVersioned => info.key_fields.first().copied(),
        }
    }

    /// The counter key.
    pub fn counter_key(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(1 + self.counter.len());
        v.push(tags::COUNTER.0);
        v.extend_from_slice(self.counter.as_bytes());
        v
    }

    /// The binding key of `id`.
    pub fn binding_key(&self, id: u64) -> [u8; keys::BINDING_KEY_LEN] {
        keys::binding_key(self.code(), id)
    }

    /// The row key of `id` at `snapshot`, for layouts the space builds itself.
    pub fn row_key(&self, id: u64, parent: Option<u64>, snapshot: u64) -> Result<Vec<u8>> {
        match (self.layout, parent) {
            (Layout::Id, None) => Ok(row_key(self.table, &[id])),
            (Layout::IdVersioned, None) => Ok(row_key(self.table, &[id, snapshot])),
            (Layout::ChildVersioned, Some(p)) => Ok(row_key(self.table, &[p, id, snapshot])),
            (Layout::ChildVersioned, None) => Err(Error::InvalidArgument(format!(
                "rows of id space {:?} ({}) belong to a parent: give its {}",
                self.name,
                self.table.name(),
                self.table
                    .info()
                    .map(|i| i.key_fields[0])
                    .unwrap_or("parent id")
            ))),
            (Layout::Custom, _) => Err(Error::InvalidArgument(format!(
                "rows of id space {:?} need their full key; use insert_with_key",
                self.name
            ))),
            (_, Some(_)) => Err(Error::InvalidArgument(format!(
                "rows of id space {:?} ({}) have no parent id",
                self.name,
                self.table.name()
            ))),
        }
    }

    /// The prefix holding every version of the entity whose latest row key is `row_key`.
    pub fn entity_prefix(row_key: &[u8]) -> Vec<u8> {
        match keys::tag_of(row_key) {
            Ok(info) if info.versioned && row_key.len() >= 9 => {
                row_key[..row_key.len() - 8].to_vec()
            }
            _ => row_key.to_vec(),
        }
    }

    /// Check that `id` lies in `[1, MAX_ID]`.
    pub fn check_id(&self, id: u64) -> Result<()> {
        if id == 0 || id > MAX_ID {
            return Err(out_of_range(self, id as u128));
        }
        Ok(())
    }

    /// Check a key given as text (the command line, the SQL wire): an integer in range.
    ///
    /// An integer literal of any length outside `[1, MAX_ID]` is [`Error::OutOfRange`], even one
    /// too long for any integer type; only text that is not an integer at all is
    /// [`Error::InvalidArgument`].
    pub fn parse_id(&self, text: &str) -> Result<u64> {
        let t = text.trim();
        match t.parse::<i128>() {
            Ok(v) if v >= 1 && v <= MAX_ID as i128 => Ok(v as u64),
            Ok(_) => Err(out_of_range_text(self, t)),
            Err(_) if is_integer_literal(t) => Err(out_of_range_text(self, t)),
            Err(_) => Err(Error::InvalidArgument(format!(
                "key {t:?} for id space {:?} is not an integer",
                self.name
            ))),
        }
    }
}

/// An optional sign followed by one or more ASCII digits.
fn is_integer_literal(t: &str) -> bool {
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

fn out_of_range_text(space: &IdSpace, text: &str) -> Error {
    let shown = text.strip_prefix('+').unwrap_or(text);
    Error::OutOfRange {
        message: format!(
            "key {shown} is outside the Keystone id space [1, {MAX_ID}] (id space {:?})",
            space.name
        ),
    }
}

fn out_of_range(space: &IdSpace, id: u128) -> Error {
    Error::OutOfRange {
        message: format!(
            "key {id} is outside the Keystone id space [1, {MAX_ID}] (id space {:?})",
            space.name
        ),
    }
}

macro_rules! spaces {
    ($($konst:ident = $name:literal, $counter:literal, $table:ident, $layout:ident;)*) => {
        $(
            #[doc = concat!("The `", $name, "` id space (counter `", $counter, "`).")]
            pub static $konst: IdSpace = IdSpace {
                name: $name,
                counter: $counter,
                table: tags::$table,
                layout: Layout::$layout,
            };
        )*
        /// Every id space, in the order `describe` lists them.
        pub static SPACES: &[&IdSpace] = &[$(&$konst),*];
    };
}

spaces! {
    CATALOG = "catalog", "next-database-id", CATALOG, Id;
    SNAPSHOT = "snapshot", "next-snapshot-id", SNAPSHOT, Id;
    SCHEMA = "schema", "next-schema-id", SCHEMA, IdVersioned;
    TABLE = "table", "next-table-id", TABLE, IdVersioned;
    COLUMN = "column", "next-column-id", COLUMN, ChildVersioned;
    FILE = "file", "next-file-id", DATA_FILE, ChildVersioned;
    DELETE_FILE = "delete-file", "next-delete-file-id", DELETE_FILE, ChildVersioned;
    VIEW = "view", "next-view-id", VIEW, IdVersioned;
    MACRO = "macro", "next-macro-id", MACRO, IdVersioned;
    TAG = "tag", "next-tag-id", OBJECT_TAG, Id;
    MAPPING = "mapping", "next-mapping-id", COLUMN_MAPPING, Id;
    COLUMN_TAG = "column-tag", "next-column-tag-id", COLUMN_TAG, Id;
    VARIANT_STATS = "variant-stats", "next-variant-stats-id", FILE_VARIANT_STATS, Custom;
    METADATA = "metadata", "next-metadata-id", METADATA, Id;
    PARTITION = "partition", "next-partition-id", PARTITION_INFO, IdVersioned;
    SORT = "sort", "next-sort-id", SORT_INFO, IdVersioned;
    AUDIT = "audit", "next-audit-id", AUDIT_ENTRY, Custom;
    RELATION = "relation", "next-relation-id", RELATION, Id;
    RELATION_ROW = "relation-row", "next-relation-row-id", RELATION_ROW, Custom;
}

/// The id space with this name (`table`) or counter (`next-table-id`).
pub fn space(name: &str) -> Result<&'static IdSpace> {
    SPACES
        .iter()
        .copied()
        .find(|s| s.name == name || s.counter == name)
        .ok_or_else(|| {
            let names: Vec<&str> = SPACES.iter().map(|s| s.name).collect();
            Error::NotFound(format!(
                "no id space named {name:?}; the id spaces are: {}",
                names.join(", ")
            ))
        })
}

/// The id space whose binding code is `code`.
pub fn space_by_code(code: u8) -> Option<&'static IdSpace> {
    SPACES.iter().copied().find(|s| s.code() == code)
}

/// The in-memory state of one id space in a writer.
#[derive(Debug)]
pub(crate) struct SpaceState {
    pub(crate) space: &'static IdSpace,
    pub(crate) inner: Mutex<Marks>,
}

/// The live mark and the durable ceiling.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Marks {
    /// `next_id`: the next id to issue.
    pub(crate) mark: u64,
    /// Stored counter: no id at or above it was ever issued.
    pub(crate) ceiling: u64,
    /// The highest key named in this writer so far (0: none), committed or not. An issued key
    /// above it cannot be bound: keys bound before this writer opened are below the stored
    /// counter, which the mark starts at, and no session of this writer has named it.
    pub(crate) named_max: u64,
    /// Set by [`SpaceState::freeze`] when the catalog closes: nothing is issued after the mark
    /// was read to be written back.
    pub(crate) frozen: bool,
}

impl SpaceState {
    pub(crate) fn new(space: &'static IdSpace, stored: u64) -> SpaceState {
        let stored = stored.max(1);
        SpaceState {
            space,
            inner: Mutex::new(Marks {
                mark: stored,
                ceiling: stored,
                named_max: 0,
                frozen: false,
            }),
        }
    }

    pub(crate) fn marks(&self) -> Marks {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take the next id if it is inside the reservation. `Ok(None)`: a reservation is needed.
    pub(crate) fn try_issue(&self) -> Result<Option<u64>> {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if m.frozen {
            return Err(Error::Closed);
        }
        if m.mark > MAX_ID {
            return Err(exhausted(self.space));
        }
        if m.mark < m.ceiling {
            let id = m.mark;
            m.mark += 1;
            return Ok(Some(id));
        }
        Ok(None)
    }

    /// A named key was placed by a transaction that has not committed yet: issued keys at or
    /// below it must be checked against the store. The mark does not move until the key
    /// commits ([`SpaceState::committed_named`]), so a rolled-back key leaves no trace in it.
    pub(crate) fn note_named(&self, id: u64) {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        m.named_max = m.named_max.max(id);
    }

    /// Named keys up to `need - 1` committed, and the stored counter is at least `need`: move
    /// the mark (and the known ceiling) to `need` if they are below it. Called under the
    /// commit lock once the batch that raised the stored counter has applied.
    pub(crate) fn committed_named(&self, need: u64) {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        m.mark = m.mark.max(need);
        m.ceiling = m.ceiling.max(need);
    }

    /// Stop issuing (the catalog is closing) and return the marks to write back. No id can be
    /// issued after this returns, so the mark written back is above every id issued.
    pub(crate) fn freeze(&self) -> Marks {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        m.frozen = true;
        *m
    }

    /// Could the issued key `id` be bound already? Only when some session of this writer has
    /// named a key at or above it (see [`Marks::named_max`]); otherwise the store need not be
    /// asked.
    pub(crate) fn may_be_named(&self, id: u64) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .named_max
            >= id
    }

    /// When the reservation is used up: the counter write that reserves the next `per` ids
    /// (never past [`MAX_ID`]) and the ceiling it sets; `None` while ids are still reserved.
    /// The caller writes it durably, as this writer, under the commit lock, then calls
    /// [`SpaceState::raise_ceiling`]: an id must never be issued twice after a crash.
    pub(crate) fn next_reservation(&self, per: u64) -> Result<Option<(WriteBatch, u64)>> {
        let m = self.marks();
        if m.mark < m.ceiling {
            return Ok(None);
        }
        if m.mark > MAX_ID {
            return Err(exhausted(self.space));
        }
        let ceiling = m.mark.saturating_add(per).min(MAX_ID + 1);
        let mut batch = WriteBatch::new();
        batch.put(
            self.space.counter_key(),
            Bytes::copy_from_slice(&values::encode_u64(ceiling)),
        );
        Ok(Some((batch, ceiling)))
    }

    pub(crate) fn raise_ceiling(&self, to: u64) {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        m.ceiling = m.ceiling.max(to);
    }
}

pub(crate) fn exhausted(space: &IdSpace) -> Error {
    Error::OutOfRange {
        message: format!(
            "id space {:?} is exhausted: every key of [1, {MAX_ID}] up to the mark is used; \
             no key can be issued",
            space.name
        ),
    }
}

/// DESCRIBE of one id space.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SpaceDescription {
    /// Space name.
    pub space: &'static str,
    /// Counter name.
    pub counter: &'static str,
    /// Table the space's rows live in.
    pub table: &'static str,
    /// The mark: the next id the engine would issue.
    pub next_id: u64,
    /// Keys used up by the mark (`next_id - 1`), named or issued, gaps included.
    pub ids_issued: u64,
    /// Keys left above the mark.
    pub ids_remaining: u64,
    /// `ids_issued` as a percentage of the space.
    pub budget_used: f64,
    /// Budget use is at or above 90 %.
    pub warn: bool,
    /// No key is left to issue.
    pub exhausted: bool,
}

impl SpaceDescription {
    /// Describe a space whose mark is `next_id`.
    pub fn new(space: &'static IdSpace, next_id: u64) -> SpaceDescription {
        let next_id = next_id.max(1);
        let ids_issued = (next_id - 1).min(MAX_ID);
        let ids_remaining = MAX_ID - ids_issued;
        let budget_used = ids_issued as f64 * 100.0 / MAX_ID as f64;
        SpaceDescription {
            space: space.name,
            counter: space.counter,
            table: space.table.info().map(|i| i.name).unwrap_or("?"),
            next_id,
            ids_issued,
            ids_remaining,
            budget_used,
            warn: budget_used >= WARN_AT_PERCENT,
            exhausted: ids_remaining == 0,
        }
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

impl fmt::Display for SpaceDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "space={} counter={} table={} next_id={} ids_issued={} ids_remaining={} budget_used={:.3}% warn={} exhausted={}",
            self.space,
            self.counter,
            self.table,
            self.next_id,
            self.ids_issued,
            self.ids_remaining,
            self.budget_used,
            yes_no(self.warn),
            yes_no(self.exhausted)
        )
    }
}

/// SHOW BUDGET: every id space with totals.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Budget {
    /// One entry per id space.
    pub spaces: Vec<SpaceDescription>,
    /// Spaces at or above the warning level.
    pub warning: usize,
    /// Spaces with nothing left.
    pub exhausted: usize,
    /// Keys per space.
    pub capacity: u64,
    /// Warning level in percent.
    pub warn_at: f64,
}

impl Budget {
    /// Totals over `spaces`.
    pub fn new(spaces: Vec<SpaceDescription>) -> Budget {
        Budget {
            warning: spaces.iter().filter(|s| s.warn).count(),
            exhausted: spaces.iter().filter(|s| s.exhausted).count(),
            capacity: MAX_ID,
            warn_at: WARN_AT_PERCENT,
            spaces,
        }
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "spaces={} warning={} exhausted={} capacity={} warn_at={:.3}%",
            self.spaces.len(),
            self.warning,
            self.exhausted,
            self.capacity,
            self.warn_at
        )?;
        for s in &self.spaces {
            writeln!(
                f,
                "space={} issued={} remaining={} used={:.3}% warn={} exhausted={}",
                s.space,
                s.ids_issued,
                s.ids_remaining,
                s.budget_used,
                yes_no(s.warn),
                yes_no(s.exhausted)
            )?;
        }
        Ok(())
    }
}

// The rules a transaction applies to the rows of an id space.

pub(crate) fn already_exists(space: &IdSpace, id: u64, b: &Binding) -> Error {
    let at = keys::render(&b.row_key);
    let message = if b.is_deleted() {
        format!(
            "duplicate key {id} in id space {:?}: a row with this key was deleted at snapshot {}; \
             PURGE frees its key (row at {at})",
            space.name,
            b.deleted_at.unwrap_or(0)
        )
    } else {
        format!(
            "duplicate key {id} in id space {:?} already present at {at}",
            space.name
        )
    };
    Error::AlreadyExists {
        space: space.name.to_string(),
        id,
        deleted: b.is_deleted(),
        message,
    }
}

/// The table of an id space.
pub(crate) fn table_of(space: &IdSpace) -> Result<&'static TagInfo> {
    space
        .table
        .info()
        .ok_or_else(|| Error::NotFound(format!("table of id space {:?}", space.name)))
}

/// A parent id must be an id too.
pub(crate) fn check_parent(space: &IdSpace, parent: u64) -> Result<()> {
    if parent == 0 || parent > MAX_ID {
        return Err(Error::OutOfRange {
            message: format!(
                "parent id {parent} of a row of id space {:?} is outside [1, {}]",
                space.name, MAX_ID
            ),
        });
    }
    Ok(())
}

/// The parent id in a row key of a child space.
pub(crate) fn parent_of(space: &IdSpace, row_key: &[u8]) -> Option<u64> {
    if space.layout != Layout::ChildVersioned {
        return None;
    }
    match Key::decode(row_key) {
        Ok(Key::Row { fields, .. }) => fields.first().copied(),
        _ => None,
    }
}

/// The column holding a child row's parent id (e.g. `table_id` of a column).
pub(crate) fn parent_column(space: &IdSpace, table: &TagInfo) -> Option<(&'static str, usize)> {
    if space.layout != Layout::ChildVersioned {
        return None;
    }
    let name = *table.key_fields.first()?;
    Some((name, table.column_index(name)?))
}

/// The id column (and a child's parent column) must agree with the key, or be NULL. `id` is
/// `None` for a key the engine will issue: then the id column must be NULL.
pub(crate) fn check_identity(
    space: &IdSpace,
    table: &TagInfo,
    cells: &[Value],
    id: Option<u64>,
    parent: Option<u64>,
) -> Result<()> {
    let id_col = space
        .id_column()
        .and_then(|c| Some((c, table.column_index(c)?)));
    for (column, index, want) in [
        id_col.map(|(c, i)| (c, i, id)),
        parent_column(space, table).map(|(c, i)| (c, i, parent)),
    ]
    .into_iter()
    .flatten()
    {
        let cell = cells.get(index).unwrap_or(&Value::Null);
        if *cell == Value::Null {
            continue;
        }
        match want {
            Some(w) if *cell == Value::Int(w as i64) => {}
            Some(w) => {
                return Err(Error::InvalidArgument(format!(
                    "column {column}={cell} of a {} row contradicts its key, whose {column} is \
                     {w}: leave the column NULL or give the same value",
                    table.name
                )))
            }
            None => {
                return Err(Error::InvalidArgument(format!(
                    "column {column}={cell} of a {} row whose key the engine issues: leave it \
                     NULL, it is filled with the issued key",
                    table.name
                )))
            }
        }
    }
    Ok(())
}

/// Fill the id column (and a child's parent column) when left NULL.
pub(crate) fn fill_identity(
    space: &IdSpace,
    table: &TagInfo,
    cells: &mut Vec<Value>,
    id: u64,
    parent: Option<u64>,
) {
    let id_col = space.id_column().and_then(|c| table.column_index(c));
    let parent_col = parent_column(space, table).map(|(_, i)| i);
    for (index, value) in [(id_col, Some(id)), (parent_col, parent)] {
        let (Some(index), Some(value)) = (index, value) else {
            continue;
        };
        if cells.len() <= index {
            cells.resize(index + 1, Value::Null);
        }
        if cells[index] == Value::Null {
            cells[index] = Value::Int(value as i64);
        }
    }
}

/// Does `tag` hold rows of id space `space`? (Used by verification.)
pub fn space_of_table(tag: tags::Tag) -> Option<&'static IdSpace> {
    SPACES.iter().copied().find(|s| s.table == tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_have_distinct_codes_and_counters() {
        for (i, a) in SPACES.iter().enumerate() {
            for b in &SPACES[i + 1..] {
                assert_ne!(a.code(), b.code(), "{} and {}", a.name, b.name);
                assert_ne!(a.counter, b.counter);
            }
            assert!(keys::counter_key(a.counter).is_ok());
            assert!(
                a.table.info().is_some(),
                "{} names an allocated table",
                a.name
            );
        }
    }

    /// Closing freezes a space under the lock that issues: the marks it returns are above
    /// every id issued, and nothing is issued after it (the race with `issue_id`).
    #[test]
    fn nothing_is_issued_after_a_space_is_frozen() {
        let st = SpaceState::new(&TABLE, 1);
        st.raise_ceiling(100);
        assert_eq!(st.try_issue().unwrap(), Some(1));
        let m = st.freeze();
        assert_eq!((m.mark, m.ceiling), (2, 100));
        assert!(matches!(st.try_issue(), Err(Error::Closed)));
        assert_eq!(st.marks().mark, 2);
    }

    #[test]
    fn describe_matches_the_keystone_example() {
        let d = SpaceDescription::new(&TABLE, 502);
        assert_eq!(d.ids_issued, 501);
        assert_eq!(d.ids_remaining, 281_474_976_710_154);
        assert!(d.to_string().contains("next_id=502 ids_issued=501 ids_remaining=281474976710154 budget_used=0.000% warn=no exhausted=no"));
        let full = SpaceDescription::new(&TABLE, MAX_ID + 1);
        assert!(full.exhausted && full.warn);
        let ninety = SpaceDescription::new(&TABLE, (MAX_ID as f64 * 0.9) as u64 + 2);
        assert!(ninety.warn && !ninety.exhausted);
    }

    #[test]
    fn parse_id_separates_out_of_range_from_not_an_integer() {
        assert_eq!(TABLE.parse_id("500").unwrap(), 500);
        let e = TABLE.parse_id("281474976710656").unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::OutOfRange);
        assert!(e
            .to_string()
            .contains("key 281474976710656 is outside the Keystone id space [1, 281474976710655]"));
        assert_eq!(
            TABLE.parse_id("0").unwrap_err().kind(),
            crate::error::ErrorKind::OutOfRange
        );
        assert_eq!(
            TABLE.parse_id("-3").unwrap_err().kind(),
            crate::error::ErrorKind::OutOfRange
        );
        assert_eq!(
            TABLE.parse_id("abc").unwrap_err().kind(),
            crate::error::ErrorKind::InvalidArgument
        );
    }
}
