//! The tag registry: the single source of truth for which first byte of a key names which table.
//!
//! Every key starts with a one-byte tag. [`REGISTRY`] lists every allocated tag with its table
//! name, its range, whether its rows are versioned (the key ends in `begin_snapshot`), its key
//! fields and key length, and the columns its rows carry. Everything else in RockLake — the key
//! codec, the row codec, the command-line tool and `docs/tag-allocation.md` — reads this table;
//! a test renders the document from it and fails if the checked-in copy differs.
//!
//! # Ranges
//!
//! | bytes | range | what lives there |
//! |---|---|---|
//! | `0x00` | — | never allocated (sentinel) |
//! | `0x01..=0x1F` | protocol | DuckLake catalog tables |
//! | `0x20..=0x7F` | extended | reserved for extensions; nothing allocated yet |
//! | `0x80..=0xFD` | internal | RockLake's own structures (high bit set) |
//! | `0xFE..=0xFF` | system | id-space counters and system keys (string-named) |
//!
//! The design document allocates `0x01..=0x0D`, `0x80`, `0x81`, `0xFD`, `0xFE` and `0xFF`. The
//! DuckLake 1.0 tables it does not name are allocated here sequentially from `0x0E`, in the
//! alphabetical order of their DuckLake names. DuckLake tables without an integer identity of
//! their own (`ducklake_metadata`, the tag tables, `ducklake_file_variant_stats`) get a row id
//! from an id space so that every data-table key keeps a fixed length.

use std::fmt;

/// A one-byte table tag.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag(pub u8);

impl Tag {
    /// The tag's byte.
    pub const fn byte(self) -> u8 {
        self.0
    }

    /// The registry entry for this tag, or `None` when this binary does not know it.
    pub fn info(self) -> Option<&'static TagInfo> {
        lookup(self.0)
    }

    /// The table name, or `unknown_0xNN`.
    pub fn name(self) -> String {
        match self.info() {
            Some(info) => info.name.to_string(),
            None => format!("unknown_{:#04x}", self.0),
        }
    }
}

impl fmt::Debug for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tag({:#04x})", self.0)
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#04X}", self.0)
    }
}

/// Which of the four ranges a tag belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagRange {
    /// `0x01..=0x1F`: DuckLake catalog tables.
    Protocol,
    /// `0x20..=0x7F`: reserved for protocol or RockLake extensions.
    Extended,
    /// `0x80..=0xFD`: RockLake internal structures.
    Internal,
    /// `0xFE..=0xFF`: counters and system keys.
    System,
}

impl TagRange {
    /// The range a byte falls in, or `None` for `0x00`.
    pub const fn of(byte: u8) -> Option<TagRange> {
        match byte {
            0x00 => None,
            0x01..=0x1F => Some(TagRange::Protocol),
            0x20..=0x7F => Some(TagRange::Extended),
            0x80..=0xFD => Some(TagRange::Internal),
            0xFE..=0xFF => Some(TagRange::System),
        }
    }

    /// Lower-case name used in documents and output.
    pub const fn as_str(self) -> &'static str {
        match self {
            TagRange::Protocol => "protocol",
            TagRange::Extended => "extended",
            TagRange::Internal => "internal",
            TagRange::System => "system",
        }
    }
}

/// How long a key of a tag is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyLen {
    /// Exactly this many bytes, tag included.
    Fixed(usize),
    /// A fixed head followed by a variable suffix; at least `min` bytes, tag included.
    Variable {
        /// The shortest valid key.
        min: usize,
    },
}

/// The SQL type of a row column, as DuckLake declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColType {
    /// `bigint`: a signed 64-bit integer.
    BigInt,
    /// `character varying`.
    Text,
    /// `boolean`.
    Bool,
    /// `uuid`, stored as its text form.
    Uuid,
    /// `timestamp with time zone`, stored as microseconds since the Unix epoch.
    TimestampTz,
    /// `bytea` (opaque bytes).
    Bytes,
}

impl ColType {
    /// The SQL spelling.
    pub const fn sql(self) -> &'static str {
        match self {
            ColType::BigInt => "bigint",
            ColType::Text => "varchar",
            ColType::Bool => "boolean",
            ColType::Uuid => "uuid",
            ColType::TimestampTz => "timestamptz",
            ColType::Bytes => "bytea",
        }
    }
}

/// One column of a table's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    /// Column name.
    pub name: &'static str,
    /// Column type.
    pub ty: ColType,
}

/// How a value under a tag is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    /// A row envelope ([`crate::values::Envelope`]) with the tag's columns.
    Row,
    /// A Keystone binding or other secondary-index entry ([`crate::values::Binding`]).
    Index,
    /// An audit entry ([`crate::values::AuditEntry`]).
    Audit,
    /// An unsigned 64-bit big-endian integer (counters and system keys).
    U64,
}

/// Where an allocation comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Allocated by the tag-allocation design document.
    Document,
    /// A DuckLake 1.0 table the document does not name, allocated here by its rules.
    DuckLake,
    /// A RockLake structure the document does not name, allocated here by its rules.
    RockLake,
}

/// Everything the registry knows about one tag.
#[derive(Debug)]
pub struct TagInfo {
    /// The tag byte.
    pub tag: Tag,
    /// The table name (DuckLake's name for protocol tables).
    pub name: &'static str,
    /// Which range it is in.
    pub range: TagRange,
    /// Whether the key ends in `begin_snapshot` (several versions of one entity).
    pub versioned: bool,
    /// The key's fields after the tag, in key order. Fixed-width ones are `u64` big-endian.
    pub key_fields: &'static [&'static str],
    /// The key's length.
    pub key_len: KeyLen,
    /// How values under this tag are encoded.
    pub value: ValueKind,
    /// The columns a row carries (for [`ValueKind::Row`]), `begin_snapshot`/`end_snapshot`
    /// excluded: those live in the envelope.
    pub columns: &'static [Column],
    /// One line on what the table holds.
    pub summary: &'static str,
    /// Who allocated it.
    pub origin: Origin,
}

impl TagInfo {
    /// Index of a column by name.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }
}

macro_rules! cols {
    ($($name:literal : $ty:ident),* $(,)?) => {
        &[$(Column { name: $name, ty: ColType::$ty }),*]
    };
}

const fn fixed(fields: usize) -> KeyLen {
    KeyLen::Fixed(1 + 8 * fields)
}

macro_rules! table {
    ($tag:expr, $name:literal, $range:ident, $versioned:expr, [$($field:literal),*], $value:ident,
     $cols:expr, $origin:ident, $summary:literal) => {
        TagInfo {
            tag: Tag($tag),
            name: $name,
            range: TagRange::$range,
            versioned: $versioned,
            key_fields: &[$($field),*],
            key_len: fixed([$($field),*].len()),
            value: ValueKind::$value,
            columns: $cols,
            summary: $summary,
            origin: Origin::$origin,
        }
    };
}

/// `0x01` the root catalog entry.
pub const CATALOG: Tag = Tag(0x01);
/// `0x02` snapshots.
pub const SNAPSHOT: Tag = Tag(0x02);
/// `0x03` table-to-snapshot associations.
pub const TABLE_SNAPSHOT: Tag = Tag(0x03);
/// `0x04` schemas (versioned).
pub const SCHEMA: Tag = Tag(0x04);
/// `0x05` tables (versioned).
pub const TABLE: Tag = Tag(0x05);
/// `0x06` columns (versioned).
pub const COLUMN: Tag = Tag(0x06);
/// `0x07` data files (versioned).
pub const DATA_FILE: Tag = Tag(0x07);
/// `0x08` delete files (versioned).
pub const DELETE_FILE: Tag = Tag(0x08);
/// `0x09` per-column statistics of data files.
pub const FILE_COLUMN_STATS: Tag = Tag(0x09);
/// `0x0A` table statistics.
pub const TABLE_STATS: Tag = Tag(0x0A);
/// `0x0B` views (versioned).
pub const VIEW: Tag = Tag(0x0B);
/// `0x0C` macros (versioned).
pub const MACRO: Tag = Tag(0x0C);
/// `0x0D` tags on catalog objects.
pub const OBJECT_TAG: Tag = Tag(0x0D);
/// `0x0E` column mappings.
pub const COLUMN_MAPPING: Tag = Tag(0x0E);
/// `0x0F` tags on columns.
pub const COLUMN_TAG: Tag = Tag(0x0F);
/// `0x10` partition values of data files.
pub const FILE_PARTITION_VALUE: Tag = Tag(0x10);
/// `0x11` variant statistics of data files.
pub const FILE_VARIANT_STATS: Tag = Tag(0x11);
/// `0x12` files scheduled for deletion.
pub const FILES_SCHEDULED_FOR_DELETION: Tag = Tag(0x12);
/// `0x13` the list of inlined-data tables.
pub const INLINED_DATA_TABLES: Tag = Tag(0x13);
/// `0x14` macro implementations.
pub const MACRO_IMPL: Tag = Tag(0x14);
/// `0x15` macro parameters.
pub const MACRO_PARAMETERS: Tag = Tag(0x15);
/// `0x16` catalog metadata (key/value options).
pub const METADATA: Tag = Tag(0x16);
/// `0x17` name mappings.
pub const NAME_MAPPING: Tag = Tag(0x17);
/// `0x18` partition columns.
pub const PARTITION_COLUMN: Tag = Tag(0x18);
/// `0x19` partition definitions (versioned).
pub const PARTITION_INFO: Tag = Tag(0x19);
/// `0x1A` schema versions.
pub const SCHEMA_VERSIONS: Tag = Tag(0x1A);
/// `0x1B` snapshot change descriptions.
pub const SNAPSHOT_CHANGES: Tag = Tag(0x1B);
/// `0x1C` sort expressions.
pub const SORT_EXPRESSION: Tag = Tag(0x1C);
/// `0x1D` sort definitions (versioned).
pub const SORT_INFO: Tag = Tag(0x1D);
/// `0x1E` table-level column statistics.
pub const TABLE_COLUMN_STATS: Tag = Tag(0x1E);
/// `0x80` secondary indexes (Keystone bindings among them).
pub const SECONDARY_INDEX: Tag = Tag(0x80);
/// `0x81` audit log.
pub const AUDIT_ENTRY: Tag = Tag(0x81);
/// `0x82` definitions of tables that a layer above the core created (opaque text).
pub const RELATION: Tag = Tag(0x82);
/// `0x83` rows of those tables that have no tag of their own, and a tagged table's rows
/// whose key another of its rows holds.
pub const RELATION_ROW: Tag = Tag(0x83);
/// `0xFD` inlined small inserts.
pub const INLINED_INSERT: Tag = Tag(0xFD);
/// `0xFE` id-space counters.
pub const COUNTER: Tag = Tag(0xFE);
/// `0xFF` system keys.
pub const SYSTEM: Tag = Tag(0xFF);

/// Every allocated tag, in byte order.
pub static REGISTRY: &[TagInfo] = &[
    table!(
        0x01,
        "ducklake_catalog",
        Protocol,
        false,
        ["database_id"],
        Row,
        cols!("database_id": BigInt, "database_name": Text, "created_by": Text),
        Document,
        "Root catalog entry: one row per database."
    ),
    table!(
        0x02,
        "ducklake_snapshot",
        Protocol,
        false,
        ["snapshot_id"],
        Row,
        cols!("snapshot_id": BigInt, "snapshot_time": TimestampTz, "schema_version": BigInt,
              "next_catalog_id": BigInt, "next_file_id": BigInt),
        Document,
        "Snapshots: id, time and the counters DuckLake records with each."
    ),
    table!(
        0x03,
        "ducklake_table_snapshot",
        Protocol,
        false,
        ["table_id", "snapshot_id"],
        Row,
        cols!("table_id": BigInt, "snapshot_id": BigInt),
        Document,
        "Which snapshots changed which table."
    ),
    table!(
        0x04,
        "ducklake_schema",
        Protocol,
        true,
        ["schema_id", "begin_snapshot"],
        Row,
        cols!("schema_id": BigInt, "schema_uuid": Uuid, "schema_name": Text, "path": Text,
              "path_is_relative": Bool),
        Document,
        "Schema definitions."
    ),
    table!(
        0x05,
        "ducklake_table",
        Protocol,
        true,
        ["table_id", "begin_snapshot"],
        Row,
        cols!("table_id": BigInt, "table_uuid": Uuid, "schema_id": BigInt, "table_name": Text,
              "path": Text, "path_is_relative": Bool),
        Document,
        "Table definitions."
    ),
    table!(
        0x06,
        "ducklake_column",
        Protocol,
        true,
        ["table_id", "column_id", "begin_snapshot"],
        Row,
        cols!("column_id": BigInt, "table_id": BigInt, "column_order": BigInt, "column_name": Text,
              "column_type": Text, "initial_default": Text, "default_value": Text,
              "nulls_allowed": Bool, "parent_column": BigInt, "default_value_type": Text,
              "default_value_dialect": Text),
        Document,
        "Column definitions."
    ),
    table!(
        0x07,
        "ducklake_data_file",
        Protocol,
        true,
        ["table_id", "file_id", "begin_snapshot"],
        Row,
        cols!("data_file_id": BigInt, "table_id": BigInt, "file_order": BigInt, "path": Text,
              "path_is_relative": Bool, "file_format": Text, "record_count": BigInt,
              "file_size_bytes": BigInt, "footer_size": BigInt, "row_id_start": BigInt,
              "partition_id": BigInt, "encryption_key": Text, "mapping_id": BigInt,
              "partial_max": BigInt),
        Document,
        "Data files registered to tables."
    ),
    table!(
        0x08,
        "ducklake_delete_file",
        Protocol,
        true,
        ["table_id", "file_id", "begin_snapshot"],
        Row,
        cols!("delete_file_id": BigInt, "table_id": BigInt, "data_file_id": BigInt, "path": Text,
              "path_is_relative": Bool, "format": Text, "delete_count": BigInt,
              "file_size_bytes": BigInt, "footer_size": BigInt, "encryption_key": Text,
              "partial_max": BigInt),
        Document,
        "Delete files registered to tables."
    ),
    table!(
        0x09,
        "ducklake_file_column_stats",
        Protocol,
        false,
        ["file_id", "column_id"],
        Row,
        cols!("data_file_id": BigInt, "table_id": BigInt, "column_id": BigInt,
              "column_size_bytes": BigInt, "value_count": BigInt, "null_count": BigInt,
              "min_value": Text, "max_value": Text, "contains_nan": Bool, "extra_stats": Text),
        Document,
        "Per-column statistics of data files."
    ),
    table!(
        0x0A,
        "ducklake_table_stats",
        Protocol,
        false,
        ["table_id", "snapshot_id"],
        Row,
        cols!("table_id": BigInt, "record_count": BigInt, "next_row_id": BigInt,
              "file_size_bytes": BigInt),
        Document,
        "Table-level aggregate statistics."
    ),
    table!(
        0x0B,
        "ducklake_view",
        Protocol,
        true,
        ["view_id", "begin_snapshot"],
        Row,
        cols!("view_id": BigInt, "view_uuid": Uuid, "schema_id": BigInt, "view_name": Text,
              "dialect": Text, "sql": Text, "column_aliases": Text),
        Document,
        "View definitions."
    ),
    table!(
        0x0C,
        "ducklake_macro",
        Protocol,
        true,
        ["macro_id", "begin_snapshot"],
        Row,
        cols!("schema_id": BigInt, "macro_id": BigInt, "macro_name": Text),
        Document,
        "Macro definitions."
    ),
    table!(
        0x0D,
        "ducklake_tag",
        Protocol,
        false,
        ["tag_id"],
        Row,
        cols!("object_id": BigInt, "key": Text, "value": Text),
        Document,
        "Tags (key/value labels) on catalog objects; tag_id is a RockLake row id."
    ),
    table!(
        0x0E,
        "ducklake_column_mapping",
        Protocol,
        false,
        ["mapping_id"],
        Row,
        cols!("mapping_id": BigInt, "table_id": BigInt, "type": Text),
        DuckLake,
        "Column mappings of imported files."
    ),
    table!(
        0x0F,
        "ducklake_column_tag",
        Protocol,
        false,
        ["column_tag_id"],
        Row,
        cols!("table_id": BigInt, "column_id": BigInt, "key": Text, "value": Text),
        DuckLake,
        "Tags on columns; column_tag_id is a RockLake row id."
    ),
    table!(
        0x10,
        "ducklake_file_partition_value",
        Protocol,
        false,
        ["data_file_id", "partition_key_index"],
        Row,
        cols!("data_file_id": BigInt, "table_id": BigInt, "partition_key_index": BigInt,
              "partition_value": Text),
        DuckLake,
        "Partition values of data files."
    ),
    table!(
        0x11,
        "ducklake_file_variant_stats",
        Protocol,
        false,
        ["data_file_id", "column_id", "variant_stats_id"],
        Row,
        cols!("data_file_id": BigInt, "table_id": BigInt, "column_id": BigInt, "variant_path": Text,
              "shredded_type": Text, "column_size_bytes": BigInt, "value_count": BigInt,
              "null_count": BigInt, "min_value": Text, "max_value": Text, "contains_nan": Bool,
              "extra_stats": Text),
        DuckLake,
        "Statistics of shredded variant columns; variant_stats_id is a RockLake row id."
    ),
    table!(
        0x12,
        "ducklake_files_scheduled_for_deletion",
        Protocol,
        false,
        ["data_file_id"],
        Row,
        cols!("data_file_id": BigInt, "path": Text, "path_is_relative": Bool,
              "schedule_start": TimestampTz),
        DuckLake,
        "Files waiting to be removed from storage."
    ),
    table!(
        0x13,
        "ducklake_inlined_data_tables",
        Protocol,
        false,
        ["table_id", "schema_version"],
        Row,
        cols!("table_id": BigInt, "table_name": Text, "schema_version": BigInt),
        DuckLake,
        "Which inlined-data tables exist."
    ),
    table!(
        0x14,
        "ducklake_macro_impl",
        Protocol,
        false,
        ["macro_id", "impl_id"],
        Row,
        cols!("macro_id": BigInt, "impl_id": BigInt, "dialect": Text, "sql": Text, "type": Text),
        DuckLake,
        "Macro implementations."
    ),
    table!(
        0x15,
        "ducklake_macro_parameters",
        Protocol,
        false,
        ["macro_id", "impl_id", "column_id"],
        Row,
        cols!("macro_id": BigInt, "impl_id": BigInt, "column_id": BigInt, "parameter_name": Text,
              "parameter_type": Text, "default_value": Text, "default_value_type": Text),
        DuckLake,
        "Macro parameters."
    ),
    table!(
        0x16,
        "ducklake_metadata",
        Protocol,
        false,
        ["metadata_id"],
        Row,
        cols!("key": Text, "value": Text, "scope": Text, "scope_id": BigInt),
        DuckLake,
        "Catalog options; metadata_id is a RockLake row id."
    ),
    table!(
        0x17,
        "ducklake_name_mapping",
        Protocol,
        false,
        ["mapping_id", "column_id"],
        Row,
        cols!("mapping_id": BigInt, "column_id": BigInt, "source_name": Text,
              "target_field_id": BigInt, "parent_column": BigInt, "is_partition": Bool),
        DuckLake,
        "Name mappings of imported files."
    ),
    table!(
        0x18,
        "ducklake_partition_column",
        Protocol,
        false,
        ["partition_id", "partition_key_index"],
        Row,
        cols!("partition_id": BigInt, "table_id": BigInt, "partition_key_index": BigInt,
              "column_id": BigInt, "transform": Text),
        DuckLake,
        "Columns of a partitioning."
    ),
    table!(
        0x19,
        "ducklake_partition_info",
        Protocol,
        true,
        ["partition_id", "begin_snapshot"],
        Row,
        cols!("partition_id": BigInt, "table_id": BigInt),
        DuckLake,
        "Partitionings of tables."
    ),
    table!(
        0x1A,
        "ducklake_schema_versions",
        Protocol,
        false,
        ["schema_version", "table_id"],
        Row,
        cols!("begin_snapshot": BigInt, "schema_version": BigInt, "table_id": BigInt),
        DuckLake,
        "Schema version history; table_id 0 stands for NULL."
    ),
    table!(
        0x1B,
        "ducklake_snapshot_changes",
        Protocol,
        false,
        ["snapshot_id"],
        Row,
        cols!("snapshot_id": BigInt, "changes_made": Text, "author": Text, "commit_message": Text,
              "commit_extra_info": Text),
        DuckLake,
        "What each snapshot changed, and who made it."
    ),
    table!(
        0x1C,
        "ducklake_sort_expression",
        Protocol,
        false,
        ["sort_id", "sort_key_index"],
        Row,
        cols!("sort_id": BigInt, "table_id": BigInt, "sort_key_index": BigInt, "expression": Text,
              "dialect": Text, "sort_direction": Text, "null_order": Text),
        DuckLake,
        "Sort expressions of a table's sort order."
    ),
    table!(
        0x1D,
        "ducklake_sort_info",
        Protocol,
        true,
        ["sort_id", "begin_snapshot"],
        Row,
        cols!("sort_id": BigInt, "table_id": BigInt),
        DuckLake,
        "Sort orders of tables."
    ),
    table!(
        0x1E,
        "ducklake_table_column_stats",
        Protocol,
        false,
        ["table_id", "column_id"],
        Row,
        cols!("table_id": BigInt, "column_id": BigInt, "contains_null": Bool, "contains_nan": Bool,
              "min_value": Text, "max_value": Text, "extra_stats": Text),
        DuckLake,
        "Table-level per-column statistics."
    ),
    TagInfo {
        tag: Tag(0x80),
        name: "secondary_index",
        range: TagRange::Internal,
        versioned: false,
        key_fields: &["index_type", "key_data"],
        key_len: KeyLen::Variable { min: 2 },
        value: ValueKind::Index,
        columns: &[],
        summary: "Secondary indexes; index_type 0x01 holds the Keystone bindings.",
        origin: Origin::Document,
    },
    table!(
        0x81,
        "audit_entry",
        Internal,
        false,
        ["snapshot_id", "sequence"],
        Audit,
        &[],
        Document,
        "Audit log (every PURGE writes one)."
    ),
    table!(
        0x82,
        "relation",
        Internal,
        false,
        ["relation_id"],
        Row,
        cols!("relation_id": BigInt, "name": Text, "definition": Text),
        RockLake,
        "Tables a layer above the core defined: a name and an opaque definition."
    ),
    table!(
        0x83,
        "relation_row",
        Internal,
        false,
        ["relation_id", "row_id"],
        Row,
        cols!("row_id": BigInt, "data": Bytes),
        RockLake,
        "Rows of those tables that have no tag of their own, and a tagged table's rows whose key another of its rows holds; data is the row's cells, encoded as a row."
    ),
    table!(
        0xFD,
        "inlined_insert",
        Internal,
        true,
        ["table_id", "file_id", "begin_snapshot"],
        Row,
        cols!("row_id": BigInt, "schema_version": BigInt, "data": Bytes),
        Document,
        "Inlined small inserts (DuckLake's ducklake_inlined_data_<table>_<version> rows)."
    ),
    TagInfo {
        tag: Tag(0xFE),
        name: "counter",
        range: TagRange::System,
        versioned: false,
        key_fields: &["counter_name"],
        key_len: KeyLen::Variable { min: 2 },
        value: ValueKind::U64,
        columns: &[],
        summary: "Id-space counters: the stored mark of each Keystone id space.",
        origin: Origin::Document,
    },
    TagInfo {
        tag: Tag(0xFF),
        name: "system",
        range: TagRange::System,
        versioned: false,
        key_fields: &["key_name"],
        key_len: KeyLen::Variable { min: 2 },
        value: ValueKind::U64,
        columns: &[],
        summary: "System keys: writer epoch, retain-from floor, format version.",
        origin: Origin::Document,
    },
];

/// The registry entry for a byte, or `None` when the tag is not allocated.
pub fn lookup(byte: u8) -> Option<&'static TagInfo> {
    // Scans call this once per key: one indexed load instead of a search.
    match BY_BYTE[byte as usize] {
        NOT_A_TAG => None,
        i => Some(&REGISTRY[i as usize]),
    }
}

const NOT_A_TAG: u8 = u8::MAX;

/// Registry index of each tag byte ([`NOT_A_TAG`] for unallocated bytes), built at compile time.
static BY_BYTE: [u8; 256] = {
    assert!(REGISTRY.len() < NOT_A_TAG as usize);
    let mut t = [NOT_A_TAG; 256];
    let mut i = 0;
    while i < REGISTRY.len() {
        t[REGISTRY[i].tag.0 as usize] = i as u8;
        i += 1;
    }
    t
};

/// The registry entry for a table name (`ducklake_table`, `counter`, ...).
pub fn by_name(name: &str) -> Option<&'static TagInfo> {
    REGISTRY.iter().find(|t| t.name == name)
}

/// The system keys under `0xFF` that RockLake writes.
pub mod system {
    /// Writer epoch: raised by every writer that opens the catalog; fences older writers.
    pub const WRITER_EPOCH: &str = "writer-epoch";
    /// Oldest snapshot that may still be read; GC and PURGE work below it.
    pub const RETAIN_FROM: &str = "retain-from";
    /// Catalog format version.
    pub const FORMAT_VERSION: &str = "catalog-format-version";
    /// Cached high-frequency read data (reserved by the document; unused yet).
    pub const HOT_KEY: &str = "hot-key";
}

/// Renders the tag allocation as markdown. `docs/tag-allocation.md` is this output; a test
/// keeps the two equal.
pub fn render_markdown() -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    out.push_str("# Tag allocation\n\n");
    out.push_str(
        "<!-- Generated from rocklake-core/src/tags.rs; a test fails when this file and the registry differ.\n     \
         Regenerate: ROCKLAKE_UPDATE_DOCS=1 cargo test -p rocklake-core --test tags -->\n\n",
    );
    out.push_str(
        "Every RockLake key starts with a one-byte tag naming its table. Byte order of keys is \
         numeric order: every integer field is 8 bytes big-endian, so a one-byte prefix scan \
         returns exactly one table, and within it rows sort by their key fields in order.\n\n",
    );
    out.push_str("## Ranges\n\n| bytes | range | use |\n|---|---|---|\n");
    out.push_str("| `0x00` | — | never allocated |\n");
    out.push_str("| `0x01`–`0x1F` | protocol | DuckLake catalog tables, allocated in sequence |\n");
    out.push_str("| `0x20`–`0x7F` | extended | reserved; nothing allocated yet |\n");
    out.push_str("| `0x80`–`0xFD` | internal | RockLake structures; the high bit marks them |\n");
    out.push_str("| `0xFE`–`0xFF` | system | counters and system keys, named by a string |\n\n");
    out.push_str("## Tags\n\n");
    out.push_str("| tag | table | range | versioned | key after the tag | key bytes | allocated by | holds |\n");
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for t in REGISTRY {
        let len = match t.key_len {
            KeyLen::Fixed(n) => n.to_string(),
            KeyLen::Variable { min } => format!("≥ {min} (variable)"),
        };
        let origin = match t.origin {
            Origin::Document => "design document",
            Origin::DuckLake => "DuckLake 1.0 table",
            Origin::RockLake => "RockLake",
        };
        let _ = writeln!(
            out,
            "| `{}` | `{}` | {} | {} | {} | {} | {} | {} |",
            t.tag,
            t.name,
            t.range.as_str(),
            if t.versioned { "yes" } else { "no" },
            t.key_fields.join(" · "),
            len,
            origin,
            t.summary
        );
    }
    out.push_str("\n## Row columns\n\nRows are stored as a versioned envelope (`begin_snapshot`, `end_snapshot`) \
                  around these columns, in this order. Columns are only ever appended.\n\n");
    for t in REGISTRY.iter().filter(|t| !t.columns.is_empty()) {
        let cols: Vec<String> = t
            .columns
            .iter()
            .map(|c| format!("{} {}", c.name, c.ty.sql()))
            .collect();
        let _ = writeln!(out, "- `{}` `{}`: {}", t.tag, t.name, cols.join(", "));
    }
    out.push_str("\n## Counters and system keys\n\n");
    out.push_str("Counters (`0xFE`) are named `next-<space>-id`, one per Keystone id space (see `rocklake describe`). \
                  System keys (`0xFF`):\n\n");
    for (k, what) in [
        (
            system::WRITER_EPOCH,
            "current writer epoch; a writer whose epoch is older is fenced",
        ),
        (
            system::RETAIN_FROM,
            "oldest snapshot that may be read; only rises",
        ),
        (system::FORMAT_VERSION, "catalog format version"),
        (system::HOT_KEY, "reserved for cached hot data; unused"),
    ] {
        let _ = writeln!(out, "- `{k}`: {what}");
    }
    out.push_str(
        "\n## Rules for a new tag\n\n\
         1. Protocol tables go in `0x01`–`0x1F`, internal ones in `0x80`–`0xFD`; `0x00`, `0xFE` and `0xFF` are never allocated again.\n\
         2. Take the next free byte of the range; no gaps without a reason written here.\n\
         3. Add it to `tags.rs` and regenerate this file.\n\
         4. A tag is never reused, even when its table is retired.\n\
         5. Old binaries skip keys under tags they do not know; changing a tag's meaning needs a format version bump.\n",
    );
    out
}
