//! Key codecs: typed keys per table, encoded as fixed-width big-endian bytes.
//!
//! ```text
//! data-table key (0x01..=0x1F, 0x81, 0xFD): fixed length, known from the tag alone
//! +-----+----------------+----------------+----------------+
//! | tag | field 1 u64 BE | field 2 u64 BE | field 3 u64 BE |   1 + 8 * fields bytes
//! +-----+----------------+----------------+----------------+
//!
//! secondary index (0x80):  tag | index_type u8 | key_data ...
//!   index_type 0x01, Keystone binding: 0x80 | 0x01 | space u8 | id u64 BE   (11 bytes)
//! counter (0xFE):          tag | counter_name (printable ASCII, 1..=255 bytes)
//! system  (0xFF):          tag | key_name     (printable ASCII, 1..=255 bytes)
//! ```
//!
//! Because every integer is big-endian and fixed-width, comparing two keys byte by byte is the
//! same as comparing their fields in order, and every key of one tag sorts inside that tag's
//! one-byte prefix. A decoder never guesses: an empty key, a `0x00` tag, an unknown tag, a key
//! shorter or longer than its tag's length, or a name that is not printable ASCII is a typed
//! [`KeyError`]. Scanners that meet an unknown tag skip it (old binaries stay compatible with new
//! tables); only the strict decoder returns [`KeyError::UnknownTag`].

use std::fmt;

use crate::tags::{self, KeyLen, Tag, TagInfo};

/// Longest counter or system name.
pub const MAX_NAME_LEN: usize = 255;

/// Index type of Keystone bindings under tag `0x80`.
pub const INDEX_KEYSTONE_BINDING: u8 = 0x01;

/// Length of a Keystone binding key.
pub const BINDING_KEY_LEN: usize = 11;

/// Why a key does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A zero-length key.
    #[error("empty key: every key starts with a one-byte tag")]
    Empty,
    /// The tag byte is `0x00`, which is never allocated.
    #[error("key {hex} starts with tag 0x00, which is never allocated")]
    ZeroTag {
        /// The key in hex.
        hex: String,
    },
    /// The tag is not in this binary's registry.
    #[error("key {hex} has tag {tag:#04x}, which this binary does not know (scanners skip it)")]
    UnknownTag {
        /// The tag byte.
        tag: u8,
        /// The key in hex.
        hex: String,
    },
    /// Fewer bytes than the tag's key length.
    #[error("{table} key {hex} is truncated: {got} bytes, a {table} key is {expected}")]
    Truncated {
        /// Table name.
        table: &'static str,
        /// Bytes present.
        got: usize,
        /// Bytes expected (the minimum for variable keys).
        expected: usize,
        /// The key in hex.
        hex: String,
    },
    /// More bytes than the tag's key length.
    #[error("{table} key {hex} is over-long: {got} bytes, a {table} key is {expected}")]
    OverLong {
        /// Table name.
        table: &'static str,
        /// Bytes present.
        got: usize,
        /// Bytes expected (the maximum for variable keys).
        expected: usize,
        /// The key in hex.
        hex: String,
    },
    /// A counter or system name that is not printable ASCII.
    #[error("{table} key {hex}: the name must be printable ASCII (0x21..=0x7E)")]
    BadName {
        /// Table name.
        table: &'static str,
        /// The key in hex.
        hex: String,
    },
    /// The key was expected under another tag.
    #[error("key {hex} is a {found} key, expected a {expected} key")]
    WrongTag {
        /// Expected table.
        expected: &'static str,
        /// Found table (or `unknown_0xNN`).
        found: String,
        /// The key in hex.
        hex: String,
    },
}

/// Lower-case hex with a space between bytes, the way the hex-dump guide prints keys.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 3);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Parse hex as printed by [`hex`] or written plainly (`05 00 2a`, `05002a`, `0x05002A`).
pub fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    let cleaned: String = text
        .trim()
        .trim_start_matches("0x")
        .trim_start_matches("0X")
        .chars()
        .filter(|c| !c.is_whitespace() && *c != ':' && *c != '-')
        .collect();
    if !cleaned.len().is_multiple_of(2) {
        return Err(format!("hex {text:?} has an odd number of digits"));
    }
    (0..cleaned.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&cleaned[i..i + 2], 16).map_err(|_| {
                format!(
                    "hex {text:?} has a non-hex digit near {:?}",
                    &cleaned[i..i + 2]
                )
            })
        })
        .collect()
}

/// The registry entry of a key's tag, or the typed error for an empty/zero/unknown tag.
pub fn tag_of(key: &[u8]) -> Result<&'static TagInfo, KeyError> {
    let Some(&first) = key.first() else {
        return Err(KeyError::Empty);
    };
    if first == 0 {
        return Err(KeyError::ZeroTag { hex: hex(key) });
    }
    tags::lookup(first).ok_or_else(|| KeyError::UnknownTag {
        tag: first,
        hex: hex(key),
    })
}

fn check_len(info: &'static TagInfo, key: &[u8]) -> Result<(), KeyError> {
    let (min, max) = match info.key_len {
        KeyLen::Fixed(n) => (n, n),
        KeyLen::Variable { min } => (min, 1 + MAX_NAME_LEN.max(BINDING_KEY_LEN)),
    };
    if key.len() < min {
        return Err(KeyError::Truncated {
            table: info.name,
            got: key.len(),
            expected: min,
            hex: hex(key),
        });
    }
    if key.len() > max {
        return Err(KeyError::OverLong {
            table: info.name,
            got: key.len(),
            expected: max,
            hex: hex(key),
        });
    }
    Ok(())
}

#[inline]
fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_be_bytes(b)
}

/// A decoded key of any table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key {
    /// A fixed-width key: a tag and its `u64` fields in key order.
    Row {
        /// The tag.
        tag: Tag,
        /// The fields, as many as the tag's `key_fields`.
        fields: Vec<u64>,
    },
    /// A Keystone binding under `0x80`/`0x01`: the id space code and the id.
    Binding {
        /// The id space's code (the tag of its table).
        space: u8,
        /// The bound id.
        id: u64,
    },
    /// Another secondary-index entry under `0x80`.
    Index {
        /// The index type.
        index_type: u8,
        /// The rest of the key.
        data: Vec<u8>,
    },
    /// A counter under `0xFE`.
    Counter(String),
    /// A system key under `0xFF`.
    System(String),
}

impl Key {
    /// Decode a key strictly. Unknown tags are an error here; scanners check
    /// [`tags::lookup`] first and skip them.
    pub fn decode(key: &[u8]) -> Result<Key, KeyError> {
        let info = tag_of(key)?;
        check_len(info, key)?;
        match info.tag {
            tags::COUNTER | tags::SYSTEM => {
                let name = &key[1..];
                if !name.iter().all(|b| (0x21..=0x7e).contains(b)) {
                    return Err(KeyError::BadName {
                        table: info.name,
                        hex: hex(key),
                    });
                }
                // Checked just above: printable ASCII is valid UTF-8.
                let name = String::from_utf8_lossy(name).into_owned();
                Ok(if info.tag == tags::COUNTER {
                    Key::Counter(name)
                } else {
                    Key::System(name)
                })
            }
            tags::SECONDARY_INDEX => {
                let index_type = key[1];
                if index_type == INDEX_KEYSTONE_BINDING {
                    if key.len() < BINDING_KEY_LEN {
                        return Err(KeyError::Truncated {
                            table: "keystone_binding",
                            got: key.len(),
                            expected: BINDING_KEY_LEN,
                            hex: hex(key),
                        });
                    }
                    if key.len() > BINDING_KEY_LEN {
                        return Err(KeyError::OverLong {
                            table: "keystone_binding",
                            got: key.len(),
                            expected: BINDING_KEY_LEN,
                            hex: hex(key),
                        });
                    }
                    Ok(Key::Binding {
                        space: key[2],
                        id: read_u64(key, 3),
                    })
                } else {
                    Ok(Key::Index {
                        index_type,
                        data: key[2..].to_vec(),
                    })
                }
            }
            tag => {
                let fields = (0..info.key_fields.len())
                    .map(|i| read_u64(key, 1 + 8 * i))
                    .collect();
                Ok(Key::Row { tag, fields })
            }
        }
    }

    /// The tag of this key.
    pub fn tag(&self) -> Tag {
        match self {
            Key::Row { tag, .. } => *tag,
            Key::Binding { .. } | Key::Index { .. } => tags::SECONDARY_INDEX,
            Key::Counter(_) => tags::COUNTER,
            Key::System(_) => tags::SYSTEM,
        }
    }

    /// Encode back into bytes.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Key::Row { tag, fields } => row_key(*tag, fields),
            Key::Binding { space, id } => binding_key(*space, *id).to_vec(),
            Key::Index { index_type, data } => {
                let mut v = Vec::with_capacity(2 + data.len());
                v.push(tags::SECONDARY_INDEX.0);
                v.push(*index_type);
                v.extend_from_slice(data);
                v
            }
            Key::Counter(name) => named_key(tags::COUNTER, name),
            Key::System(name) => named_key(tags::SYSTEM, name),
        }
    }

    /// The value of a named field of a row key.
    pub fn field(&self, name: &str) -> Option<u64> {
        match self {
            Key::Row { tag, fields } => {
                let info = tag.info()?;
                let i = info.key_fields.iter().position(|f| *f == name)?;
                fields.get(i).copied()
            }
            _ => None,
        }
    }

    /// `begin_snapshot` of a versioned row key.
    pub fn begin_snapshot(&self) -> Option<u64> {
        match self {
            Key::Row { tag, fields } if tag.info().is_some_and(|i| i.versioned) => {
                fields.last().copied()
            }
            _ => None,
        }
    }
}

impl fmt::Display for Key {
    /// Renders as the hex-dump reading guide reads keys:
    /// `ducklake_table table_id=42 begin_snapshot=200`, `counter "next-snapshot-id"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Row { tag, fields } => {
                let info = tag.info();
                write!(f, "{}", tag.name())?;
                for (i, v) in fields.iter().enumerate() {
                    let name = info
                        .and_then(|i2| i2.key_fields.get(i))
                        .copied()
                        .unwrap_or("?");
                    write!(f, " {name}={v}")?;
                }
                Ok(())
            }
            Key::Binding { space, id } => {
                write!(
                    f,
                    "secondary_index keystone_binding space={}",
                    Tag(*space).name()
                )?;
                write!(f, " id={id}")
            }
            Key::Index { index_type, data } => {
                write!(
                    f,
                    "secondary_index index_type={index_type:#04x} key_data=[{}]",
                    hex(data)
                )
            }
            Key::Counter(name) => write!(f, "counter \"{name}\""),
            Key::System(name) => write!(f, "system \"{name}\""),
        }
    }
}

/// Render raw key bytes for messages: decoded when possible, hex otherwise.
pub fn render(key: &[u8]) -> String {
    match Key::decode(key) {
        Ok(k) => k.to_string(),
        Err(_) => format!("[{}]", hex(key)),
    }
}

/// Encode a fixed-width key of `tag` from its fields (the caller passes as many as the tag has;
/// [`RowKey`] types check that at compile time).
pub fn row_key(tag: Tag, fields: &[u64]) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + 8 * fields.len());
    v.push(tag.0);
    for f in fields {
        v.extend_from_slice(&f.to_be_bytes());
    }
    v
}

/// The prefix of all keys of `tag` whose leading fields are `fields` (for scans).
pub fn prefix(tag: Tag, fields: &[u64]) -> Vec<u8> {
    row_key(tag, fields)
}

/// A counter (`0xFE`) or system (`0xFF`) key. Panics in debug builds on a bad name; names are
/// constants of this crate or checked by [`counter_key`].
fn named_key(tag: Tag, name: &str) -> Vec<u8> {
    debug_assert!(!name.is_empty() && name.len() <= MAX_NAME_LEN);
    let mut v = Vec::with_capacity(1 + name.len());
    v.push(tag.0);
    v.extend_from_slice(name.as_bytes());
    v
}

/// The counter key of an id space, `0xFE | name`, checking the name.
pub fn counter_key(name: &str) -> Result<Vec<u8>, KeyError> {
    let k = named_key(tags::COUNTER, name);
    Key::decode(&k).map(|_| k)
}

/// A system key, `0xFF | name`, checking the name.
pub fn system_key(name: &str) -> Result<Vec<u8>, KeyError> {
    let k = named_key(tags::SYSTEM, name);
    Key::decode(&k).map(|_| k)
}

/// The Keystone binding key of `id` in the id space with `space` code.
pub fn binding_key(space: u8, id: u64) -> [u8; BINDING_KEY_LEN] {
    let mut k = [0u8; BINDING_KEY_LEN];
    k[0] = tags::SECONDARY_INDEX.0;
    k[1] = INDEX_KEYSTONE_BINDING;
    k[2] = space;
    k[3..].copy_from_slice(&id.to_be_bytes());
    k
}

/// The prefix of every binding of one id space.
pub fn binding_prefix(space: u8) -> [u8; 3] {
    [tags::SECONDARY_INDEX.0, INDEX_KEYSTONE_BINDING, space]
}

/// A typed, fixed-width key of one table.
pub trait RowKey: Sized {
    /// The table's tag.
    const TAG: Tag;
    /// The encoded length, tag included.
    const LEN: usize;
    /// Encode into bytes.
    fn to_bytes(&self) -> Vec<u8>;
    /// Decode, checking tag and exact length.
    fn from_bytes(key: &[u8]) -> Result<Self, KeyError>;
}

macro_rules! row_keys {
    ($($(#[$doc:meta])* $name:ident = $tag:ident { $($field:ident),+ })*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name { $(#[allow(missing_docs)] pub $field: u64),+ }

        impl $name {
            /// Encode into a fixed array (no allocation).
            #[inline]
            pub fn encode(&self) -> [u8; <$name as RowKey>::LEN] {
                let mut out = [0u8; <$name as RowKey>::LEN];
                out[0] = tags::$tag.0;
                let mut at = 1;
                $(
                    out[at..at + 8].copy_from_slice(&self.$field.to_be_bytes());
                    at += 8;
                )+
                let _ = at;
                out
            }
        }

        impl RowKey for $name {
            const TAG: Tag = tags::$tag;
            const LEN: usize = 1 + 8 * [$(stringify!($field)),+].len();
            fn to_bytes(&self) -> Vec<u8> { self.encode().to_vec() }
            fn from_bytes(key: &[u8]) -> Result<Self, KeyError> {
                let info = tag_of(key)?;
                if info.tag != tags::$tag {
                    return Err(KeyError::WrongTag {
                        expected: tags::$tag.info().map(|i| i.name).unwrap_or("?"),
                        found: info.name.to_string(),
                        hex: hex(key),
                    });
                }
                check_len(info, key)?;
                let mut at = 1;
                $(
                    let $field = read_u64(key, at);
                    at += 8;
                )+
                let _ = at;
                Ok($name { $($field),+ })
            }
        }
    )*};
}

row_keys! {
    /// `0x01 | database_id`
    CatalogKey = CATALOG { database_id }
    /// `0x02 | snapshot_id`
    SnapshotKey = SNAPSHOT { snapshot_id }
    /// `0x03 | table_id | snapshot_id`
    TableSnapshotKey = TABLE_SNAPSHOT { table_id, snapshot_id }
    /// `0x04 | schema_id | begin_snapshot`
    SchemaKey = SCHEMA { schema_id, begin_snapshot }
    /// `0x05 | table_id | begin_snapshot`
    TableKey = TABLE { table_id, begin_snapshot }
    /// `0x06 | table_id | column_id | begin_snapshot`
    ColumnKey = COLUMN { table_id, column_id, begin_snapshot }
    /// `0x07 | table_id | file_id | begin_snapshot`
    DataFileKey = DATA_FILE { table_id, file_id, begin_snapshot }
    /// `0x08 | table_id | file_id | begin_snapshot`
    DeleteFileKey = DELETE_FILE { table_id, file_id, begin_snapshot }
    /// `0x09 | file_id | column_id`
    FileColumnStatsKey = FILE_COLUMN_STATS { file_id, column_id }
    /// `0x0A | table_id | snapshot_id`
    TableStatsKey = TABLE_STATS { table_id, snapshot_id }
    /// `0x0B | view_id | begin_snapshot`
    ViewKey = VIEW { view_id, begin_snapshot }
    /// `0x0C | macro_id | begin_snapshot`
    MacroKey = MACRO { macro_id, begin_snapshot }
    /// `0x0D | tag_id`
    ObjectTagKey = OBJECT_TAG { tag_id }
    /// `0x0E | mapping_id`
    ColumnMappingKey = COLUMN_MAPPING { mapping_id }
    /// `0x0F | column_tag_id`
    ColumnTagKey = COLUMN_TAG { column_tag_id }
    /// `0x10 | data_file_id | partition_key_index`
    FilePartitionValueKey = FILE_PARTITION_VALUE { data_file_id, partition_key_index }
    /// `0x11 | data_file_id | column_id | variant_stats_id`
    FileVariantStatsKey = FILE_VARIANT_STATS { data_file_id, column_id, variant_stats_id }
    /// `0x12 | data_file_id`
    FileScheduledForDeletionKey = FILES_SCHEDULED_FOR_DELETION { data_file_id }
    /// `0x13 | table_id | schema_version`
    InlinedDataTablesKey = INLINED_DATA_TABLES { table_id, schema_version }
    /// `0x14 | macro_id | impl_id`
    MacroImplKey = MACRO_IMPL { macro_id, impl_id }
    /// `0x15 | macro_id | impl_id | column_id`
    MacroParametersKey = MACRO_PARAMETERS { macro_id, impl_id, column_id }
    /// `0x16 | metadata_id`
    MetadataKey = METADATA { metadata_id }
    /// `0x17 | mapping_id | column_id`
    NameMappingKey = NAME_MAPPING { mapping_id, column_id }
    /// `0x18 | partition_id | partition_key_index`
    PartitionColumnKey = PARTITION_COLUMN { partition_id, partition_key_index }
    /// `0x19 | partition_id | begin_snapshot`
    PartitionInfoKey = PARTITION_INFO { partition_id, begin_snapshot }
    /// `0x1A | schema_version | table_id`
    SchemaVersionsKey = SCHEMA_VERSIONS { schema_version, table_id }
    /// `0x1B | snapshot_id`
    SnapshotChangesKey = SNAPSHOT_CHANGES { snapshot_id }
    /// `0x1C | sort_id | sort_key_index`
    SortExpressionKey = SORT_EXPRESSION { sort_id, sort_key_index }
    /// `0x1D | sort_id | begin_snapshot`
    SortInfoKey = SORT_INFO { sort_id, begin_snapshot }
    /// `0x1E | table_id | column_id`
    TableColumnStatsKey = TABLE_COLUMN_STATS { table_id, column_id }
    /// `0x81 | snapshot_id | sequence`
    AuditKey = AUDIT_ENTRY { snapshot_id, sequence }
    /// `0xFD | table_id | file_id | begin_snapshot`
    InlinedInsertKey = INLINED_INSERT { table_id, file_id, begin_snapshot }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_hex_dump_guide_examples() {
        let k = parse_hex("01 00 00 00 00 00 00 00 01").unwrap();
        assert_eq!(render(&k), "ducklake_catalog database_id=1");
        let k = parse_hex("05 00 00 00 00 00 00 00 2A 00 00 00 00 00 00 00 C8").unwrap();
        assert_eq!(render(&k), "ducklake_table table_id=42 begin_snapshot=200");
        let k =
            parse_hex("06 00 00 00 00 00 00 00 05 00 00 00 00 00 00 00 03 00 00 00 00 00 00 00 64")
                .unwrap();
        assert_eq!(
            render(&k),
            "ducklake_column table_id=5 column_id=3 begin_snapshot=100"
        );
        let k = counter_key("next-snapshot-id").unwrap();
        assert_eq!(hex(&k[..9]), "fe 6e 65 78 74 2d 73 6e 61");
        assert_eq!(render(&k), "counter \"next-snapshot-id\"");
        let k = system_key("writer-epoch").unwrap();
        assert_eq!(hex(&k[..9]), "ff 77 72 69 74 65 72 2d 65");
        assert_eq!(render(&k), "system \"writer-epoch\"");
    }

    #[test]
    fn typed_keys_match_the_generic_codec() {
        let k = TableKey {
            table_id: 42,
            begin_snapshot: 200,
        };
        let bytes = k.encode();
        assert_eq!(bytes.len(), TableKey::LEN);
        assert_eq!(TableKey::from_bytes(&bytes).unwrap(), k);
        assert_eq!(
            Key::decode(&bytes).unwrap(),
            Key::Row {
                tag: tags::TABLE,
                fields: vec![42, 200]
            }
        );
        assert!(matches!(
            SnapshotKey::from_bytes(&bytes),
            Err(KeyError::WrongTag { .. })
        ));
    }

    #[test]
    fn malformed_keys_are_typed_errors() {
        assert_eq!(Key::decode(&[]), Err(KeyError::Empty));
        assert!(matches!(
            Key::decode(&[0, 1, 2]),
            Err(KeyError::ZeroTag { .. })
        ));
        assert!(matches!(
            Key::decode(&[0x55, 1]),
            Err(KeyError::UnknownTag { tag: 0x55, .. })
        ));
        assert!(matches!(
            Key::decode(&[0x05, 0, 0]),
            Err(KeyError::Truncated {
                got: 3,
                expected: 17,
                ..
            })
        ));
        assert!(matches!(
            Key::decode(&[0x02; 10]),
            Err(KeyError::OverLong {
                got: 10,
                expected: 9,
                ..
            })
        ));
        assert!(matches!(
            Key::decode(&[0xFE]),
            Err(KeyError::Truncated { .. })
        ));
        assert!(matches!(
            Key::decode(&[0xFE, b'a', 0x01]),
            Err(KeyError::BadName { .. })
        ));
        assert!(matches!(
            Key::decode(&[0x80, 0x01, 0x05]),
            Err(KeyError::Truncated { .. })
        ));
        let msg = Key::decode(&[0x05, 0, 0]).unwrap_err().to_string();
        assert!(
            msg.contains("ducklake_table") && msg.contains("truncated"),
            "{msg}"
        );
    }
}
