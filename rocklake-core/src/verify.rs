//! Verification: walk a store's whole key space and report what does not decode or contradicts
//! itself. The `rocklake verify` command prints the [`Report`] this returns.
//!
//! What is checked, key by key:
//!
//! - the key decodes (its tag is allocated, its length and fields are well formed);
//! - the value decodes as its table's kind (row, counter, audit entry, binding);
//! - a row's MVCC interval is well formed, its begin snapshot agrees with its key, and it has no
//!   more cells than its table has columns;
//! - a row of an id space whose id column holds a value (not NULL) holds the id its key names;
//! - a Keystone binding names an id below its space's mark and a row that exists.

use std::collections::HashMap;
use std::fmt;

use crate::backend::{KeyRange, Order, Pager, ReadView};
use crate::error::Result;
use crate::keys::{self, Key};
use crate::keystone::space_of_table;
use crate::keystone::{self, Layout};
use crate::tags::ValueKind;
use crate::values::{self, Binding, Row, Value};

/// [`verify`] calls its progress callback every this many keys.
pub const PROGRESS_EVERY: u64 = 100_000;

/// One thing [`verify`] found wrong.
#[derive(Clone, Debug, PartialEq)]
pub enum Finding {
    /// A key that does not decode.
    Key {
        /// The raw key.
        key: Vec<u8>,
        /// Why it does not decode.
        error: String,
    },
    /// A key that decodes, but whose value does not, or contradicts its key or the rest of the
    /// store.
    Value {
        /// The decoded key.
        key: Key,
        /// What is wrong.
        detail: String,
    },
    /// A row of an id space whose id column holds another id than its key.
    IdColumn {
        /// The row's key.
        key: Key,
        /// The id column.
        column: &'static str,
        /// The id in the key.
        key_id: u64,
        /// What the id column holds.
        cell: Value,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Key { key, error } => write!(f, "key [{}]: {error}", keys::hex(key)),
            Finding::Value { key, detail } => write!(f, "{key}: {detail}"),
            Finding::IdColumn {
                key,
                column,
                key_id,
                cell,
            } => write!(
                f,
                "{key}: column {column} holds {cell} but the key's id is {key_id}"
            ),
        }
    }
}

/// What a walk of the whole key space found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Keys walked.
    pub keys: u64,
    /// What was found wrong, in key order.
    pub findings: Vec<Finding>,
}

impl Report {
    /// No findings.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Walk every key of `view`; report undecodable keys and values, contradictory versions, id
/// columns that contradict their key, bindings to missing rows and ids at or above their space's
/// mark. `progress(walked, findings)`
/// is called every [`PROGRESS_EVERY`] keys with the keys walked and the findings so far.
///
/// Errors only when the store cannot be read; what is wrong with its contents is in the
/// [`Report`].
pub async fn verify(view: &dyn ReadView, mut progress: impl FnMut(u64, usize)) -> Result<Report> {
    let mut marks = HashMap::new();
    for s in keystone::SPACES {
        let stored = match view.get(&s.counter_key()).await? {
            Some(v) => values::decode_u64(&s.counter_key(), &v).ok(),
            None => Some(1),
        };
        marks.insert(s.code(), stored);
    }
    let mut findings = Vec::new();
    let mut walked = 0u64;
    let mut pager = Pager::new(view, KeyRange::all(), Order::Ascending, 4096);
    while let Some(page) = pager.next_page().await? {
        for (k, v) in page {
            walked += 1;
            if walked.is_multiple_of(PROGRESS_EVERY) {
                progress(walked, findings.len());
            }
            let key = match Key::decode(&k) {
                Ok(key) => key,
                Err(e) => {
                    findings.push(Finding::Key {
                        key: k.to_vec(),
                        error: e.to_string(),
                    });
                    continue;
                }
            };
            match check_value(view, &key, &k, &v, &marks).await {
                Err(detail) => findings.push(Finding::Value { key, detail }),
                Ok(Some(row)) => findings.extend(check_id_column(&key, &row)),
                Ok(None) => {}
            }
        }
    }
    Ok(Report {
        keys: walked,
        findings,
    })
}

async fn check_value(
    view: &dyn ReadView,
    key: &Key,
    raw: &[u8],
    value: &[u8],
    marks: &HashMap<u8, Option<u64>>,
) -> Result<Option<Row>, String> {
    let info = keys::tag_of(raw).map_err(|e| e.to_string())?;
    match info.value {
        ValueKind::U64 => {
            values::decode_u64(raw, value).map_err(|e| e.to_string())?;
        }
        ValueKind::Audit => {
            values::render_value(raw, value).map_err(|e| e.to_string())?;
        }
        ValueKind::Row => {
            let row = Row::decode(raw, value).map_err(|e| e.to_string())?;
            if !row.version().is_consistent() {
                return Err(format!(
                    "end_snapshot {:?} is not after begin_snapshot {}",
                    row.end_snapshot, row.begin_snapshot
                ));
            }
            if let Some(begin) = key.begin_snapshot() {
                if begin != row.begin_snapshot {
                    return Err(format!(
                        "key says begin_snapshot={begin} but the row says {}",
                        row.begin_snapshot
                    ));
                }
            }
            if row.cells.len() > info.columns.len() {
                return Err(format!(
                    "{} cells but {} has {} columns (written by a newer RockLake?)",
                    row.cells.len(),
                    info.name,
                    info.columns.len()
                ));
            }
            return Ok(Some(row));
        }
        ValueKind::Index => {
            let Key::Binding { space, id } = key else {
                return Ok(None);
            };
            let b = Binding::decode_at(raw, value).map_err(|e| e.to_string())?;
            let Some(s) = keystone::space_by_code(*space) else {
                return Err(format!("binding of an unknown id space {space:#04x}"));
            };
            match marks.get(space).copied().flatten() {
                Some(mark) if *id >= mark => {
                    return Err(format!(
                        "id {id} is at or above the mark next_id={mark} of id space {:?}",
                        s.name
                    ))
                }
                None => {
                    return Err(format!(
                        "the counter of id space {:?} does not decode",
                        s.name
                    ))
                }
                _ => {}
            }
            if view
                .get(&b.row_key)
                .await
                .map_err(|e| e.to_string())?
                .is_none()
            {
                return Err(format!(
                    "binding names row {} which does not exist",
                    keys::render(&b.row_key)
                ));
            }
        }
    }
    Ok(None)
}

/// A row of an id space must hold, in its id column, the id its key names (or NULL there): the
/// key's first field for `Id`/`IdVersioned` spaces, the second (after the parent) for
/// `ChildVersioned` ones. `Custom` spaces build their keys otherwise and are not checked.
fn check_id_column(key: &Key, row: &Row) -> Option<Finding> {
    let Key::Row { tag, fields } = key else {
        return None;
    };
    let space = space_of_table(*tag)?;
    let key_id = match space.layout {
        Layout::Id | Layout::IdVersioned => fields.first(),
        Layout::ChildVersioned => fields.get(1),
        Layout::Custom => None,
    }
    .copied()?;
    let column = space.id_column()?;
    let cell = row.get(tag.info()?, column);
    let agrees = match &cell {
        Value::Null => true,
        Value::Int(v) => u64::try_from(*v) == Ok(key_id),
        _ => false,
    };
    (!agrees).then(|| Finding::IdColumn {
        key: key.clone(),
        column,
        key_id,
        cell,
    })
}
