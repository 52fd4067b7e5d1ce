//! DDL: CREATE/DROP TABLE and CREATE/DROP SCHEMA, transactional as in PostgreSQL.

use std::sync::Arc;

use bytes::Bytes;
use datafusion::sql::sqlparser::ast::{ObjectType, SchemaName, Statement};
use rocklake_core::keys::row_key;
use rocklake_core::tags;

use super::{first_words, Output, Session};
use crate::catalog::{rel_from_create, split_name};
use crate::db::definition_row;
use crate::error::{state, Result, SqlError};
use crate::locks::Mode;
use crate::relation::{name_key, RelDef};
use crate::txn::Txn;
impl Session {
    pub(super) async fn ddl(&mut self, stmt: Statement) -> Result<Output> {
        let db = self.db.clone();
        let out = match stmt {
            Statement::CreateTable(ct) => {
                if ct.temporary
                    && ct.on_commit != Some(datafusion::sql::sqlparser::ast::OnCommit::Drop)
                {
                    return Err(SqlError::unsupported(
                        "temporary tables are supported with ON COMMIT DROP only",
                    ));
                }
                // PostgreSQL's bound on a table's columns (`MaxHeapAttributeNumber`).
                if ct.columns.len() > 1600 {
                    return Err(SqlError::new(
                        state::PROGRAM_LIMIT_EXCEEDED,
                        "tables can have at most 1600 columns",
                    ));
                }
                let (schema, name) = split_name(&ct.name)?;
                let exists = self
                    .with_txn(async |txn| {
                        if !txn.catalog.schemas.contains_key(&schema) {
                            return Err(SqlError::new(
                                state::INVALID_SCHEMA_NAME,
                                format!("schema \"{schema}\" does not exist"),
                            ));
                        }
                        Ok(txn
                            .catalog
                            .tables
                            .contains_key(&(schema.clone(), name.clone())))
                    })
                    .await?;
                if exists {
                    if ct.if_not_exists {
                        return Ok(Output::Command("CREATE TABLE".into()));
                    }
                    return Err(SqlError::new(
                        state::DUPLICATE_TABLE,
                        format!("relation \"{name}\" already exists"),
                    ));
                }
                let id = db.issue_relation_id().await?;
                self.with_txn(async |txn| {
                    let rel = rel_from_create(id, &ct, &txn.catalog)?;
                    let name_entry = Bytes::from(name_key(&schema, Some(&name)));
                    if txn.get(&name_entry).await?.is_some() {
                        // Created by a session whose commit this one's catalog predates.
                        return Err(SqlError::new(
                            state::DUPLICATE_TABLE,
                            format!("relation \"{name}\" already exists"),
                        ));
                    }
                    let Some(schema_id) = txn.catalog.schemas.get(&schema).copied() else {
                        return Err(SqlError::new(
                            state::INVALID_SCHEMA_NAME,
                            format!("schema \"{schema}\" does not exist"),
                        ));
                    };
                    txn.guard_schema(schema_id, &schema, Mode::Write).await?;
                    txn.put_raw(
                        Bytes::from(row_key(tags::RELATION, &[id])),
                        Bytes::from(definition_row(id, &rel.qualified(), &rel.definition)),
                    )
                    .await?;
                    txn.put_raw(name_entry, Bytes::copy_from_slice(&id.to_be_bytes()))
                        .await?;
                    Arc::make_mut(&mut txn.catalog)
                        .tables
                        .insert((rel.schema.clone(), rel.name.clone()), Arc::new(rel));
                    txn.ddl = true;
                    Ok(())
                })
                .await?;
                if ct.temporary {
                    self.temp_tables.push((schema, name));
                }
                Output::Command("CREATE TABLE".into())
            }
            Statement::CreateSchema {
                schema_name,
                if_not_exists,
                ..
            } => {
                let name = match &schema_name {
                    SchemaName::Simple(n) => split_name(n)?.1,
                    other => return Err(SqlError::unsupported(format!("CREATE SCHEMA {other}"))),
                };
                let exists = self
                    .with_txn(async |txn| Ok(txn.catalog.schemas.contains_key(&name)))
                    .await?;
                if exists {
                    if if_not_exists {
                        return Ok(Output::Command("CREATE SCHEMA".into()));
                    }
                    return Err(SqlError::new(
                        state::DUPLICATE_SCHEMA,
                        format!("schema \"{name}\" already exists"),
                    ));
                }
                let id = db.issue_relation_id().await?;
                self.with_txn(async |txn| {
                    let name_entry = Bytes::from(name_key(&name, None));
                    if txn.get(&name_entry).await?.is_some() {
                        return Err(SqlError::new(
                            state::DUPLICATE_SCHEMA,
                            format!("schema \"{name}\" already exists"),
                        ));
                    }
                    txn.put_raw(name_entry, Bytes::copy_from_slice(&id.to_be_bytes()))
                        .await?;
                    let def = format!("CREATE SCHEMA \"{}\"", name.replace('"', "\"\""));
                    txn.put_raw(
                        Bytes::from(row_key(tags::RELATION, &[id])),
                        Bytes::from(definition_row(id, &name, &def)),
                    )
                    .await?;
                    Arc::make_mut(&mut txn.catalog)
                        .schemas
                        .insert(name.clone(), id);
                    txn.ddl = true;
                    Ok(())
                })
                .await?;
                Output::Command("CREATE SCHEMA".into())
            }
            Statement::Drop {
                object_type: ObjectType::Table,
                if_exists,
                names,
                ..
            } => {
                for n in &names {
                    let (schema, name) = split_name(n)?;
                    self.with_txn(async |txn| {
                        let Some(rel) = txn
                            .catalog
                            .tables
                            .get(&(schema.clone(), name.clone()))
                            .cloned()
                        else {
                            if if_exists {
                                return Ok(());
                            }
                            return Err(SqlError::new(
                                state::UNDEFINED_TABLE,
                                format!("table \"{name}\" does not exist"),
                            ));
                        };
                        drop_table(txn, &rel).await
                    })
                    .await?;
                }
                Output::Command("DROP TABLE".into())
            }
            Statement::Drop {
                object_type: ObjectType::Schema,
                if_exists,
                names,
                cascade,
                ..
            } => {
                for n in &names {
                    let schema = split_name(n)?.1;
                    self.with_txn(async |txn| {
                        let Some(id) = txn.catalog.schemas.get(&schema).copied() else {
                            if if_exists {
                                return Ok(());
                            }
                            return Err(SqlError::new(
                                state::INVALID_SCHEMA_NAME,
                                format!("schema \"{schema}\" does not exist"),
                            ));
                        };
                        txn.guard_schema(id, &schema, Mode::Exclusive).await?;
                        // Every transaction that created a table in the schema before this
                        // one took its lock has ended, and a commit installed its catalog:
                        // the tables are this transaction's view of them and the shared
                        // catalog's, less those another session dropped meanwhile.
                        let shared = txn.db().catalog();
                        let mut inside: Vec<Arc<RelDef>> = Vec::new();
                        for t in txn.catalog.tables.values().chain(shared.tables.values()) {
                            if t.schema != schema || inside.iter().any(|r| r.id == t.id) {
                                continue;
                            }
                            if txn.stored_now(&row_key(tags::RELATION, &[t.id])).await? {
                                inside.push(t.clone());
                            }
                        }
                        inside.sort_by(|a, b| a.name.cmp(&b.name));
                        if !inside.is_empty() && !cascade {
                            return Err(SqlError::new(
                                state::DEPENDENT_OBJECTS,
                                format!(
                                    "cannot drop schema {schema} because other objects depend on it"
                                ),
                            )
                            .with_detail(format!(
                                "table {} depends on schema {schema}",
                                inside[0].qualified()
                            )));
                        }
                        for rel in inside {
                            drop_table(txn, &rel).await?;
                        }
                        txn.delete_raw(Bytes::from(row_key(tags::RELATION, &[id])))
                            .await?;
                        txn.delete_raw(Bytes::from(name_key(&schema, None))).await?;
                        Arc::make_mut(&mut txn.catalog).schemas.remove(&schema);
                        txn.ddl = true;
                        Ok(())
                    })
                    .await?;
                }
                Output::Command("DROP SCHEMA".into())
            }
            other => {
                return Err(SqlError::unsupported(format!(
                    "RockLake's SQL layer does not run this statement: {}",
                    first_words(&other.to_string())
                )))
            }
        };
        let cat = self.with_txn(async |txn| Ok(txn.catalog.clone())).await?;
        *self
            .shared
            .catalog
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = cat;
        Ok(out)
    }
}

/// Remove a table: its rows, its primary-key and tuple entries, its name and its definition, and write
/// an audit entry under `0x81` (as PURGE does), in the same transaction. Its keys are free
/// again: a table created later under the same name starts empty.
async fn drop_table(txn: &mut Txn, rel: &RelDef) -> Result<()> {
    let n = txn.delete_all(rel).await?;
    txn.delete_raw(Bytes::from(row_key(tags::RELATION, &[rel.id])))
        .await?;
    let ks = txn.db().keyspace().clone();
    let snapshot = ks.current_snapshot().await?;
    let sequence = ks.issue_id(&rocklake_core::keystone::AUDIT).await?;
    let entry = rocklake_core::values::AuditEntry {
        action: "drop-table".into(),
        space: rel.qualified(),
        first_id: rel.id,
        last_id: rel.id,
        freed: Vec::new(),
        writer_epoch: ks.epoch().unwrap_or(0),
        at_micros: ks.now_micros(),
        actor: format!("sql ({n} keys removed)"),
    };
    txn.put_raw(
        Bytes::from(row_key(tags::AUDIT_ENTRY, &[snapshot, sequence])),
        Bytes::from(prost::Message::encode_to_vec(&entry)),
    )
    .await?;
    Arc::make_mut(&mut txn.catalog)
        .tables
        .remove(&(rel.schema.clone(), rel.name.clone()));
    txn.ddl = true;
    tracing::info!(table = %rel.qualified(), keys = n, "dropped table");
    Ok(())
}
