//! Keeping a catalog small: the `retain-from` floor, PURGE (frees the keys of deleted rows, with
//! an audit entry) and GC (drops row versions no reader can see).

use std::ops::RangeInclusive;

use bytes::Bytes;
use prost::Message;

use crate::backend::{Durability, KeyRange, Order, Pager, WriteBatch};
use crate::error::{Error, Result};
use crate::keys::{self, AuditKey, Key};
use crate::keyspace::{read_u64, sys_key, Keyspace};
use crate::keystone::{self, IdSpace, SPACES};
use crate::tags::{self, system, ValueKind};
use crate::values::{self, AuditEntry, Binding, Row};

/// The capability PURGE needs. Only administrative entry points (the `--admin` flag of the
/// command line, an admin role on the wire) should make one.
#[derive(Clone, Debug)]
pub struct Admin {
    actor: String,
}

impl Admin {
    /// Grant the admin capability to `actor` (recorded in the audit log).
    pub fn grant(actor: impl Into<String>) -> Admin {
        Admin {
            actor: actor.into(),
        }
    }
}

/// What PURGE did.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PurgeReport {
    /// The id space.
    pub space: &'static str,
    /// Keys freed.
    pub freed: Vec<u64>,
    /// Row keys removed (every version of each freed entity).
    pub rows_removed: usize,
    /// The audit entry written, rendered (none when nothing was freed).
    pub audit_key: Option<String>,
}

impl Keyspace {
    /// The `retain-from` floor (0 when unset).
    pub async fn retain_from(&self) -> Result<u64> {
        Ok(
            read_u64(self.inner.backend.as_ref(), &sys_key(system::RETAIN_FROM))
                .await?
                .unwrap_or(0),
        )
    }

    /// Raise the `retain-from` floor. It only rises.
    pub async fn set_retain_from(&self, snapshot: u64) -> Result<()> {
        let _guard = self.inner.commit_lock.lock().await;
        let key = sys_key(system::RETAIN_FROM);
        let old = self.inner.backend.get(&key).await?;
        let current = match &old {
            Some(v) => values::decode_u64(&key, v)?,
            None => 0,
        };
        if snapshot < current {
            return Err(Error::InvalidArgument(format!(
                "retain-from only rises: it is {current}, cannot lower it to {snapshot}"
            )));
        }
        let latest = self.current_snapshot().await?;
        if snapshot > latest {
            return Err(Error::InvalidArgument(format!(
                "retain-from {snapshot} is past the latest snapshot {latest}"
            )));
        }
        let mut batch = WriteBatch::new();
        batch.expect(key.clone(), old);
        batch.put(key, Bytes::copy_from_slice(&values::encode_u64(snapshot)));
        self.write_fenced(batch, Durability::Durable).await
    }

    /// PURGE: free the keys of deleted rows of `space` in `ids`, removing every version of
    /// those rows. Live keys in the range are left alone.
    ///
    /// A key is freed only once nothing can see its row: not a reader at or above `retain-from`
    /// (the row must have been deleted at or before the floor, else this is refused, not
    /// retryable) and not an open reader (PURGE waits up to `purge_wait` for older readers,
    /// then refuses with a retryable conflict). One audit entry under `0x81` records each purge.
    pub async fn purge(
        &self,
        space: &'static IdSpace,
        ids: RangeInclusive<u64>,
        admin: &Admin,
    ) -> Result<PurgeReport> {
        self.writer_epoch()?;
        let (first, last) = (*ids.start(), *ids.end());
        space.check_id(first)?;
        space.check_id(last)?;
        if first > last {
            return Err(Error::InvalidArgument(format!(
                "PURGE range [{first}, {last}] is empty"
            )));
        }
        let wait = self.inner.options.purge_wait;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.inner.readers_changed.notified();
            let floor = self.retain_from().await?;
            let view = self.inner.backend.view().await?;
            let start = space.binding_key(first);
            let mut end = space.binding_key(last).to_vec();
            end.push(0);
            let range = KeyRange::new(start.to_vec(), end);
            let mut pager = Pager::new(view.as_ref(), range, Order::Ascending, 512);
            let mut targets: Vec<(u64, Bytes, Binding)> = Vec::new();
            while let Some(page) = pager.next_page().await? {
                for (k, v) in page {
                    let Ok(Key::Binding { id, .. }) = Key::decode(&k) else {
                        continue;
                    };
                    let b = Binding::decode_at(&k, &v)?;
                    if b.is_deleted() {
                        targets.push((id, v, b));
                    }
                }
            }
            for (id, _, b) in &targets {
                let at = b.deleted_at.unwrap_or(u64::MAX);
                if at > floor {
                    return Err(Error::Conflict {
                        message: format!(
                            "PURGE of key {id} in id space {:?}: its row was deleted at snapshot {at}, \
                             which readers at retain-from {floor} can still see; raise retain-from to \
                             at least {at} first",
                            space.name
                        ),
                        retryable: false,
                    });
                }
            }
            if let Some(oldest) = self.oldest_reader() {
                if let Some((id, _, b)) = targets
                    .iter()
                    .find(|(_, _, b)| b.deleted_at.unwrap_or(u64::MAX) > oldest)
                {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(Error::Conflict {
                            message: format!(
                                "PURGE waited {wait:?} for the reader at snapshot {oldest}, which can \
                                 still see key {id} of id space {:?} (deleted at snapshot {}); try again",
                                space.name,
                                b.deleted_at.unwrap_or(0)
                            ),
                            retryable: true,
                        });
                    }
                    let _ = tokio::time::timeout_at(deadline, notified).await;
                    continue;
                }
            }
            if targets.is_empty() {
                return Ok(PurgeReport {
                    space: space.name,
                    freed: vec![],
                    rows_removed: 0,
                    audit_key: None,
                });
            }
            let mut batch = WriteBatch::new();
            let mut rows_removed = 0;
            let mut freed = Vec::with_capacity(targets.len());
            for (id, raw, b) in &targets {
                let bkey = space.binding_key(*id);
                batch.expect(bkey.to_vec(), Some(raw.clone()));
                batch.delete(bkey.to_vec());
                let mut versions = Pager::new(
                    view.as_ref(),
                    KeyRange::prefix(&IdSpace::entity_prefix(&b.row_key)),
                    Order::Ascending,
                    512,
                );
                while let Some(page) = versions.next_page().await? {
                    for (k, _) in page {
                        batch.delete(k);
                        rows_removed += 1;
                    }
                }
                freed.push(*id);
            }
            let _guard = self.inner.commit_lock.lock().await;
            let snapshot = self.current_snapshot().await?;
            let sequence = self.issue_id_locked(&keystone::AUDIT).await?;
            let akey = AuditKey {
                snapshot_id: snapshot,
                sequence,
            }
            .encode();
            let entry = AuditEntry {
                action: "purge".into(),
                space: space.name.into(),
                first_id: first,
                last_id: last,
                freed: freed.clone(),
                writer_epoch: self.writer_epoch()?,
                at_micros: self.now_micros(),
                actor: admin.actor.clone(),
            };
            batch.put(akey.to_vec(), entry.encode_to_vec());
            match self.write_fenced(batch, Durability::Durable).await {
                Ok(()) => {
                    return Ok(PurgeReport {
                        space: space.name,
                        freed,
                        rows_removed,
                        audit_key: Some(keys::render(&akey)),
                    })
                }
                // A binding changed between our read and the write: look again.
                Err(Error::ConditionFailed { .. }) if tokio::time::Instant::now() < deadline => {
                    continue
                }
                Err(Error::ConditionFailed { key, .. }) => {
                    return Err(Error::Conflict {
                        message: format!(
                            "PURGE raced with a concurrent change of {key}; try again"
                        ),
                        retryable: true,
                    })
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Issue an id while already holding the commit lock (no reservation write may take it).
    async fn issue_id_locked(&self, space: &'static IdSpace) -> Result<u64> {
        let st = self.state(space)?;
        loop {
            if let Some(id) = st.try_issue()? {
                return Ok(id);
            }
            self.reserve_locked(st).await?;
        }
    }

    /// Garbage-collect row versions that ended at or before `retain-from` (and before every
    /// open reader). The last version of a deleted Keystone row stays until PURGE, since its
    /// key is still bound. Returns how many versions were removed.
    pub async fn gc(&self) -> Result<u64> {
        self.writer_epoch()?;
        let mut floor = self.retain_from().await?;
        if let Some(oldest) = self.oldest_reader() {
            floor = floor.min(oldest);
        }
        let view = self.inner.backend.view().await?;
        let mut removed = 0u64;
        for info in tags::REGISTRY
            .iter()
            .filter(|t| t.versioned && t.value == ValueKind::Row)
        {
            let mut pager = Pager::new(
                view.as_ref(),
                KeyRange::prefix(&[info.tag.0]),
                Order::Ascending,
                512,
            );
            while let Some(page) = pager.next_page().await? {
                let mut batch = WriteBatch::new();
                for (k, v) in page {
                    let row = Row::decode(&k, &v)?;
                    if !row.version().collectable(floor) {
                        continue;
                    }
                    if self.is_bound_row(&k).await? {
                        continue;
                    }
                    batch.expect(k.clone(), Some(v));
                    batch.delete(k);
                }
                if !batch.ops.is_empty() {
                    let n = batch.ops.len() as u64;
                    let _guard = self.inner.commit_lock.lock().await;
                    match self.write_fenced(batch, Durability::Durable).await {
                        Ok(()) => removed += n,
                        // A version changed under us; leave it to the next GC.
                        Err(Error::ConditionFailed { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(removed)
    }

    async fn is_bound_row(&self, row_key: &[u8]) -> Result<bool> {
        let Ok(Key::Row { tag, fields }) = Key::decode(row_key) else {
            return Ok(false);
        };
        for space in SPACES.iter().filter(|s| s.table == tag) {
            let id = match space.layout {
                keystone::Layout::Id | keystone::Layout::IdVersioned => fields[0],
                keystone::Layout::ChildVersioned => fields[1],
                keystone::Layout::Custom => continue,
            };
            if let Some(b) = self.binding(space, id).await? {
                if b.row_key == row_key {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }
}
