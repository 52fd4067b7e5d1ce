//! A whole store copied pair for pair into an empty one: what `rocklake backup` and
//! `rocklake restore` do.
//!
//! The copy takes every pair of one consistent view (for a running writer,
//! [`Keyspace::committed_view`](crate::Keyspace::committed_view): every acknowledged commit
//! and nothing else), so the copy is the catalog as of one snapshot, with its MVCC versions,
//! id spaces and marks as they were. Any engine can be copied into any other.
//!
//! Nothing half-written can pass for a catalog: the format-version key, which every open
//! reads first, is held back and written last, durably, after every other pair is durable.
//! A copy cut short leaves a store with keys and no format version, which
//! [`Keyspace::open`](crate::Keyspace::open) refuses (naming the unfinished copy) instead of
//! taking it for a new, empty store.

use bytes::Bytes;

use crate::backend::{Durability, KeyRange, KvBackend, Order, ReadView, ReadViewExt, WriteBatch};
use crate::error::{Error, Result};
use crate::keyspace::{current_snapshot_in, sys_key};
use crate::tags::system;

/// Bytes of keys and values per write while copying: a batch this size costs the target a few
/// MiB of memory at most, and each is one engine write.
pub const COPY_BATCH_BYTES: usize = 4 << 20;

/// Pairs read from the source per page.
const PAGE: usize = 1024;

/// What a finished copy holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyReport {
    /// The catalog's snapshot the copy holds (its last published snapshot).
    pub snapshot: u64,
    /// Pairs copied.
    pub keys: u64,
    /// Bytes of keys and values copied.
    pub bytes: u64,
}

/// A copy under way into an empty store: pairs are [pushed](StoreCopy::push) in ascending key
/// order and land in batches of about [`COPY_BATCH_BYTES`]; [`StoreCopy::finish`] writes the
/// format-version key last and makes everything durable.
pub struct StoreCopy<'a> {
    target: &'a dyn KvBackend,
    batch: WriteBatch,
    batch_bytes: usize,
    pending: usize,
    keys: u64,
    bytes: u64,
    format_key: Vec<u8>,
    format: Option<Bytes>,
    last: Option<Bytes>,
}

impl std::fmt::Debug for StoreCopy<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreCopy")
            .field("target", &self.target.engine())
            .field("keys", &self.keys)
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl<'a> StoreCopy<'a> {
    /// Start a copy into `target`, which must hold no key at all.
    pub async fn begin(target: &'a dyn KvBackend) -> Result<StoreCopy<'a>> {
        refuse_non_empty(target).await?;
        Ok(StoreCopy {
            target,
            batch: WriteBatch::new(),
            batch_bytes: COPY_BATCH_BYTES,
            pending: 0,
            keys: 0,
            bytes: 0,
            format_key: sys_key(system::FORMAT_VERSION),
            format: None,
            last: None,
        })
    }

    /// Write a batch every `bytes` of pairs instead of every [`COPY_BATCH_BYTES`].
    pub fn batch_bytes(mut self, bytes: usize) -> Self {
        self.batch_bytes = bytes.max(1);
        self
    }

    /// Add one pair. Keys must come in strictly ascending order, as a scan gives them.
    pub async fn push(&mut self, key: Bytes, value: Bytes) -> Result<()> {
        if let Some(last) = &self.last {
            if key <= *last {
                return Err(Error::InvalidArgument(format!(
                    "copy: key {} came after {}, not in ascending order",
                    crate::keys::render(&key),
                    crate::keys::render(last)
                )));
            }
        }
        self.keys += 1;
        self.bytes += (key.len() + value.len()) as u64;
        if key.as_ref() == self.format_key.as_slice() {
            self.format = Some(value);
            self.last = Some(key);
            return Ok(());
        }
        self.pending += key.len() + value.len();
        self.last = Some(key.clone());
        self.batch.put(key, value);
        if self.pending >= self.batch_bytes {
            self.write_pending().await?;
        }
        Ok(())
    }

    /// Pairs and bytes pushed so far.
    pub fn progress(&self) -> (u64, u64) {
        (self.keys, self.bytes)
    }

    async fn write_pending(&mut self) -> Result<()> {
        let batch = std::mem::take(&mut self.batch);
        self.pending = 0;
        if !batch.is_empty() {
            self.target.write(batch, Durability::Buffered).await?;
        }
        Ok(())
    }

    /// Write what is left, make it durable, then write the format version (durably): from
    /// then on the target opens as the catalog copied.
    pub async fn finish(mut self) -> Result<CopyReport> {
        let Some(format) = self.format.take() else {
            return Err(Error::InvalidArgument(
                "copy: the source has no format version, so it is not a RockLake catalog (or is an unfinished copy itself)".into(),
            ));
        };
        self.write_pending().await?;
        self.target.flush().await?;
        let mut last = WriteBatch::new();
        last.expect(self.format_key.clone(), None);
        last.put(self.format_key.clone(), format);
        self.target.write(last, Durability::Durable).await?;
        let snapshot = current_snapshot_in(self.target).await?;
        Ok(CopyReport {
            snapshot,
            keys: self.keys,
            bytes: self.bytes,
        })
    }
}

/// Refuse a copy's target that holds any key, naming the first; nothing is written.
pub async fn refuse_non_empty(target: &dyn KvBackend) -> Result<()> {
    if let Some((key, _)) = target.first(&KeyRange::all(), Order::Ascending).await? {
        return Err(Error::InvalidArgument(format!(
            "the target {} store is not empty (it holds key {}); a copy goes into a new, empty store",
            target.engine(),
            crate::keys::render(&key)
        )));
    }
    Ok(())
}

/// Copy every pair of `view` into the empty `target`; `progress` is told the pairs and bytes
/// copied after each page read, and once at the end.
pub async fn copy_view(
    view: &dyn ReadView,
    target: &dyn KvBackend,
    progress: &mut (dyn FnMut(u64, u64) + Send),
) -> Result<CopyReport> {
    let mut copy = StoreCopy::begin(target).await?;
    let mut range = KeyRange::all();
    loop {
        let page = read_page(view, &range).await?;
        let Some((last, _)) = page.last() else { break };
        range = range.after(last);
        let full = page.len() == PAGE;
        for (k, v) in page {
            copy.push(k, v).await?;
        }
        progress(copy.keys, copy.bytes);
        if !full {
            break;
        }
    }
    let report = copy.finish().await?;
    progress(report.keys, report.bytes);
    Ok(report)
}

/// At most [`PAGE`] pairs of `range`, copied out of the view (its visitor lends borrowed
/// bytes and cannot await a write, so a page is collected first).
async fn read_page(view: &dyn ReadView, range: &KeyRange) -> Result<Vec<(Bytes, Bytes)>> {
    let mut page = Vec::with_capacity(PAGE);
    view.visit(range, Order::Ascending, PAGE, &mut |k, v| {
        page.push((Bytes::copy_from_slice(k), Bytes::copy_from_slice(v)));
        true
    })
    .await?;
    Ok(page)
}
