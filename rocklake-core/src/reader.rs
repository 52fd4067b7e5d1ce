//! Readers: a point-in-time view at one snapshot plus the MVCC filter. PURGE and GC wait for the
//! readers that can still see what they would remove.

use std::fmt;
use std::sync::Arc;

use crate::backend::{visit_all, KeyRange, Order, Pager, ReadView};
use crate::error::{Error, Result};
use crate::keys::{self, Key};
use crate::keyspace::{check_readable_at, current_snapshot_in, Keyspace};
use crate::keystone::{self, IdSpace};
use crate::tags::{self, ValueKind};
use crate::values::{Binding, Row, RowView};

impl Keyspace {
    /// Open a reader at `snapshot` (the latest when `None`). PURGE waits for readers that can
    /// still see what it would remove. A snapshot below `retain-from` is refused.
    pub async fn reader(&self, snapshot: Option<u64>) -> Result<Reader> {
        let view = self.committed_view().await?;
        let latest = current_snapshot_in(view.as_ref()).await?;
        let snapshot = snapshot.unwrap_or(latest);
        check_readable_at(view.as_ref(), snapshot).await?;
        let id = {
            let mut r = self.inner.readers.lock().unwrap_or_else(|e| e.into_inner());
            r.next += 1;
            let id = r.next;
            r.open.insert(id, snapshot);
            id
        };
        Ok(Reader {
            catalog: self.clone(),
            id,
            snapshot,
            view,
        })
    }
}

/// A reader at one snapshot: a point-in-time view plus the MVCC filter. PURGE waits for it.
pub struct Reader {
    catalog: Keyspace,
    id: u64,
    snapshot: u64,
    view: Arc<dyn ReadView>,
}

impl fmt::Debug for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("snapshot", &self.snapshot)
            .finish()
    }
}

impl Reader {
    /// The snapshot this reader sees.
    pub fn snapshot(&self) -> u64 {
        self.snapshot
    }

    /// The underlying point-in-time view.
    pub fn view(&self) -> &dyn ReadView {
        self.view.as_ref()
    }

    /// Every row of `prefix` (a tag byte and leading key fields) visible at this snapshot, in
    /// key order, one page at a time through `each`. Keys under tags this binary does not know
    /// are skipped.
    pub async fn visible_rows<F>(&self, prefix: &[u8], mut each: F) -> Result<u64>
    where
        F: FnMut(Key, Row) + Send,
    {
        let mut failed = None;
        let n = self
            .scan_visible(prefix, |row| {
                if failed.is_some() {
                    return;
                }
                let decoded = Key::decode(row.key())
                    .map_err(Error::from)
                    .and_then(|k| Ok((k, row.row()?)));
                match decoded {
                    Ok((k, r)) => each(k, r),
                    Err(e) => failed = Some(e),
                }
            })
            .await?;
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// [`Reader::visible_rows`] without decoding: each visible row comes as a [`RowView`], whose
    /// cells are decoded only when asked for. Invisible versions are skipped after reading just
    /// their interval, and engines that can lend their bytes ([`ReadView::visit`]) are read
    /// without copying. This is the fast way to read a few columns of many rows.
    pub async fn scan_visible<F>(&self, prefix: &[u8], mut each: F) -> Result<u64>
    where
        F: FnMut(RowView<'_>) + Send,
    {
        let mut n = 0;
        let mut failed = None;
        visit_all(
            self.view.as_ref(),
            KeyRange::prefix(prefix),
            1024,
            &mut |k, v| {
                let Some(info) = k.first().and_then(|b| tags::lookup(*b)) else {
                    return true;
                };
                if info.value != ValueKind::Row {
                    return true;
                }
                match RowView::new(k, v) {
                    Ok(row) => {
                        if row.version().visible_at(self.snapshot) {
                            each(row);
                            n += 1;
                        }
                        true
                    }
                    Err(e) => {
                        failed = Some(e);
                        false
                    }
                }
            },
        )
        .await?;
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(n)
    }

    /// The version of one entity visible at this snapshot. `entity` is the key without its
    /// `begin_snapshot` (for unversioned tables, the whole key).
    pub async fn entity(&self, entity: &[u8]) -> Result<Option<(Key, Row)>> {
        let range = KeyRange::prefix(entity);
        // Versions sort by begin_snapshot; the newest visible one is found scanning down.
        let mut pager = Pager::new(self.view.as_ref(), range, Order::Descending, 16);
        while let Some(page) = pager.next_page().await? {
            for (k, v) in page {
                let row = RowView::new(&k, &v)?;
                let version = row.version();
                if version.visible_at(self.snapshot) {
                    return Ok(Some((Key::decode(&k)?, row.row()?)));
                }
                if version.begin <= self.snapshot {
                    // Older versions ended at or before this one began: none can be visible.
                    return Ok(None);
                }
            }
        }
        Ok(None)
    }

    /// The row bound to `id` in `space` as this reader sees it. The binding is re-checked
    /// against the row actually found: a purged and re-inserted key reads as the new row.
    pub async fn by_id(&self, space: &IdSpace, id: u64) -> Result<Option<(Key, Row)>> {
        let bkey = space.binding_key(id);
        let Some(raw) = self.view.get(&bkey).await? else {
            return Ok(None);
        };
        let b = Binding::decode_at(&bkey, &raw)?;
        let found = self.entity(&IdSpace::entity_prefix(&b.row_key)).await?;
        match found {
            Some((key, row)) => {
                let key_id = match space.layout {
                    keystone::Layout::ChildVersioned => key.field(
                        tags::lookup(space.code())
                            .map(|i| i.key_fields[1])
                            .unwrap_or(""),
                    ),
                    _ => match &key {
                        Key::Row { fields, .. } => fields.first().copied(),
                        _ => None,
                    },
                };
                if key_id != Some(id) || row.begin_snapshot < b.bound_at {
                    return Err(Error::corrupt(
                        &bkey,
                        format!(
                            "binding of key {id} names {} but the row found is {key}",
                            keys::render(&b.row_key)
                        ),
                    ));
                }
                Ok(Some((key, row)))
            }
            None => Ok(None),
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let mut r = self
            .catalog
            .inner
            .readers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        r.open.remove(&self.id);
        drop(r);
        self.catalog.inner.readers_changed.notify_waiters();
    }
}
