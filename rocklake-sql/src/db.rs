//! A SQL database over one RockLake key space: the shared catalog of tables and the way
//! transactions begin.

use std::sync::{Arc, RwLock};

use bytes::Bytes;
use rocklake_core::backend::{visit_all, KeyRange, ReadView};
use rocklake_core::keys::row_key;
use rocklake_core::keystone;
use rocklake_core::tags;
use rocklake_core::values::{Row, Value};
use rocklake_core::Keyspace;

use crate::catalog::{parse_definition, Catalog};
use crate::error::{Result, SqlError};
use crate::txn::Txn;

/// The shared state of every session on one store.
pub struct Database {
    keyspace: Keyspace,
    catalog: RwLock<Arc<Catalog>>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("tables", &self.catalog().tables.len())
            .finish()
    }
}

impl Database {
    /// Open the SQL layer on a key space. A store that has never held a table gets the
    /// `public` schema, as a new PostgreSQL database has.
    pub async fn open(keyspace: Keyspace) -> Result<Arc<Database>> {
        let catalog = load_catalog(keyspace.backend().as_ref()).await?;
        let fresh = catalog.schemas.is_empty() && catalog.tables.is_empty();
        let db = Arc::new(Database {
            keyspace,
            catalog: RwLock::new(Arc::new(catalog)),
        });
        if fresh && db.keyspace.epoch().is_some() {
            let mut txn = db.begin().await?;
            let id = db.issue_relation_id().await?;
            txn.put_raw(
                Bytes::from(row_key(tags::RELATION, &[id])),
                Bytes::from(definition_row(id, "public", "CREATE SCHEMA \"public\"")),
            )
            .await?;
            txn.ddl = true;
            txn.commit().await?;
        }
        Ok(db)
    }

    /// The key space underneath.
    pub fn keyspace(&self) -> &Keyspace {
        &self.keyspace
    }

    /// The catalog as last committed.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Read the catalog again from the store (after a commit that changed it).
    pub async fn reload_catalog(&self) -> Result<()> {
        let c = load_catalog(self.keyspace.backend().as_ref()).await?;
        *self.catalog.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(c);
        Ok(())
    }

    /// Begin a transaction on a point-in-time view of the store.
    pub async fn begin(self: &Arc<Self>) -> Result<Txn> {
        let view = self.keyspace.backend().view().await?;
        // The catalog the view holds: read again only when the shared copy may be stale is an
        // optimisation left for later; the shared copy is reloaded on every DDL commit of this
        // process, and only one process writes a store (the others are fenced).
        Ok(Txn::new(self.clone(), view, self.catalog()))
    }

    /// A fresh row id (the `relation-row` id space).
    pub async fn issue_row_id(&self) -> Result<u64> {
        Ok(self.keyspace.issue_id(&keystone::RELATION_ROW).await?)
    }

    /// A fresh relation id (the `relation` id space).
    pub async fn issue_relation_id(&self) -> Result<u64> {
        Ok(self.keyspace.issue_id(&keystone::RELATION).await?)
    }

    /// Close the key space (flushes and releases the store).
    pub async fn close(&self) -> Result<()> {
        Ok(self.keyspace.close().await?)
    }
}

/// The stored value of a definition under `0x82`.
pub fn definition_row(id: u64, name: &str, definition: &str) -> Vec<u8> {
    Row::new(
        0,
        vec![
            Value::Int(id as i64),
            Value::Text(name.to_string()),
            Value::Text(definition.to_string()),
        ],
    )
    .encode_unchecked()
}

/// Read every definition under `0x82`, in relation-id order.
pub async fn load_catalog(view: &dyn ReadView) -> Result<Catalog> {
    let mut defs: Vec<(u64, String)> = Vec::new();
    let mut bad: Option<SqlError> = None;
    visit_all(
        view,
        KeyRange::prefix(&[tags::RELATION.0]),
        256,
        &mut |k, v| {
            match Row::decode(k, v) {
                Ok(row) => match (row.cells.first(), row.cells.get(2)) {
                    (Some(Value::Int(id)), Some(Value::Text(def))) => {
                        defs.push((*id as u64, def.clone()))
                    }
                    _ => {
                        bad = Some(SqlError::new(
                            crate::error::state::DATA_CORRUPTED,
                            format!(
                                "the definition under {} has no id or text",
                                rocklake_core::keys::render(k)
                            ),
                        ));
                        return false;
                    }
                },
                Err(e) => {
                    bad = Some(e.into());
                    return false;
                }
            }
            true
        },
    )
    .await?;
    if let Some(e) = bad {
        return Err(e);
    }
    defs.sort_by_key(|(id, _)| *id);
    let mut catalog = Catalog::default();
    for (id, def) in defs {
        parse_definition(id, &def, &mut catalog)?;
    }
    Ok(catalog)
}
