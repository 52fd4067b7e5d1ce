//! The `KvBackend` trait: the store the catalog is written against.
//!
//! A store provides ordered point reads and range scans ([`ReadView`]), atomic conditional
//! batches with a durability choice, a consistent read view, flush and close. Everything else
//! (typed rows, MVCC, transactions, fencing, Keystone ids) is derived once, above this trait, in
//! this crate. Engines do not implement it directly: they implement the smaller
//! [`crate::engine::Engine`], and [`crate::engine::EngineBackend`] turns that into a
//! `KvBackend` (preconditions, group commit, views, close) the same way for every engine;
//! [`crate::memory::MemoryEngine`] is the template a new engine copies.
//!
//! Keys and values are arbitrary byte strings; keys compare as unsigned bytes (`memcmp`), shorter
//! first on a common prefix. Engines must not impose another order.

use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::{Error, Result};

/// One key/value pair returned by a scan.
pub type KvPair = (Bytes, Bytes);

/// What [`ReadView::visit`] lends each pair to: key, value; `false` stops the visit.
pub type Visitor<'f> = dyn for<'k> FnMut(&'k [u8], &'k [u8]) -> bool + Send + 'f;

/// Builds one page of scan results for engines whose iterators lend borrowed bytes: every key
/// and value is copied into one buffer, and the returned pairs are [`Bytes`] slices of it. That is
/// one allocation per page instead of two per pair (a pair kept alive keeps its page's buffer).
#[derive(Debug, Default)]
pub struct PageBuilder {
    /// Pairs expected: the first pair's size times this is reserved up front.
    expect: usize,
    buf: Vec<u8>,
    /// Per pair: where its key starts, where its value starts, where its value ends.
    spans: Vec<(usize, usize, usize)>,
}

impl PageBuilder {
    /// An empty page with room for about `pairs` pairs.
    pub fn with_capacity(pairs: usize) -> PageBuilder {
        PageBuilder {
            expect: pairs,
            buf: Vec::new(),
            spans: Vec::with_capacity(pairs),
        }
    }

    /// Append one pair.
    pub fn push(&mut self, key: &[u8], value: &[u8]) {
        if self.spans.is_empty() {
            // Pairs of one table are of similar size: size the buffer after the first (at most
            // 4 MiB up front; it grows past that as needed).
            let per = key.len() + value.len();
            self.buf
                .reserve(per.saturating_mul(self.expect.max(1)).min(4 << 20).max(per));
        }
        let start = self.buf.len();
        self.buf.extend_from_slice(key);
        let mid = self.buf.len();
        self.buf.extend_from_slice(value);
        self.spans.push((start, mid, self.buf.len()));
    }

    /// Pairs pushed so far.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether no pair was pushed.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The pairs, in the order pushed.
    pub fn finish(self) -> Vec<KvPair> {
        let buf = Bytes::from(self.buf);
        self.spans
            .into_iter()
            .map(|(s, m, e)| (buf.slice(s..m), buf.slice(m..e)))
            .collect()
    }
}

/// Scan direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Order {
    /// Ascending byte order.
    #[default]
    Ascending,
    /// Descending byte order.
    Descending,
}

/// A range of keys: `start` and `end` bounds in byte order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRange {
    /// Lower bound.
    pub start: Bound<Bytes>,
    /// Upper bound.
    pub end: Bound<Bytes>,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> KeyRange {
        KeyRange {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
        }
    }

    /// `[start, end)`.
    pub fn new(start: impl Into<Bytes>, end: impl Into<Bytes>) -> KeyRange {
        KeyRange {
            start: Bound::Included(start.into()),
            end: Bound::Excluded(end.into()),
        }
    }

    /// Every key that starts with `prefix`. A prefix of only `0xFF` bytes (or an empty one) has
    /// no finite successor, so its range is open at the top.
    pub fn prefix(prefix: &[u8]) -> KeyRange {
        let end = match prefix_successor(prefix) {
            Some(s) => Bound::Excluded(Bytes::from(s)),
            None => Bound::Unbounded,
        };
        KeyRange {
            start: Bound::Included(Bytes::copy_from_slice(prefix)),
            end,
        }
    }

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        let above = match &self.start {
            Bound::Included(s) => key >= s.as_ref(),
            Bound::Excluded(s) => key > s.as_ref(),
            Bound::Unbounded => true,
        };
        let below = match &self.end {
            Bound::Included(e) => key <= e.as_ref(),
            Bound::Excluded(e) => key < e.as_ref(),
            Bound::Unbounded => true,
        };
        above && below
    }

    /// Whether the range can hold no key at all.
    pub fn is_empty(&self) -> bool {
        match (&self.start, &self.end) {
            (Bound::Included(s), Bound::Included(e)) => s > e,
            (Bound::Included(s), Bound::Excluded(e))
            | (Bound::Excluded(s), Bound::Included(e))
            | (Bound::Excluded(s), Bound::Excluded(e)) => s >= e,
            _ => false,
        }
    }

    /// The part of this range strictly after `key` (for resuming an ascending scan).
    pub fn after(&self, key: &[u8]) -> KeyRange {
        KeyRange {
            start: Bound::Excluded(Bytes::copy_from_slice(key)),
            end: self.end.clone(),
        }
    }

    /// The part of this range strictly before `key` (for resuming a descending scan).
    pub fn before(&self, key: &[u8]) -> KeyRange {
        KeyRange {
            start: self.start.clone(),
            end: Bound::Excluded(Bytes::copy_from_slice(key)),
        }
    }

    /// The bounds as borrowed slices, for engines' range APIs.
    pub fn as_slices(&self) -> (Bound<&[u8]>, Bound<&[u8]>) {
        (as_slice(&self.start), as_slice(&self.end))
    }
}

fn as_slice(b: &Bound<Bytes>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// The smallest key greater than every key starting with `prefix`, if there is one.
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last != 0xFF {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// How durable a batch must be before `write` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// Return only once the batch survives a crash of the process and of the machine
    /// (fsync, a synced WAL, a flushed object PUT).
    #[default]
    Durable,
    /// Return once the batch is applied and visible; it may be lost in a crash until the next
    /// durable write or [`KvBackend::flush`].
    Buffered,
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Durability::Durable => "durable",
            Durability::Buffered => "buffered",
        })
    }
}

/// One write of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchOp {
    /// Set `key` to `value`.
    Put(Bytes, Bytes),
    /// Remove `key` (no error when absent).
    Delete(Bytes),
}

impl BatchOp {
    /// The key written.
    pub fn key(&self) -> &Bytes {
        match self {
            BatchOp::Put(k, _) | BatchOp::Delete(k) => k,
        }
    }
}

/// A condition the store must find true, atomically with applying the batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Precondition {
    /// The key to check.
    pub key: Bytes,
    /// The value it must hold; `None`: the key must be absent.
    pub expected: Option<Bytes>,
}

/// An atomic batch: all its writes land, or none do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    /// Writes in order; a later write to the same key wins.
    pub ops: Vec<BatchOp>,
    /// Conditions checked atomically before the writes apply.
    pub preconditions: Vec<Precondition>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    /// Add a put.
    pub fn put(&mut self, key: impl Into<Bytes>, value: impl Into<Bytes>) -> &mut Self {
        self.ops.push(BatchOp::Put(key.into(), value.into()));
        self
    }

    /// Add a delete.
    pub fn delete(&mut self, key: impl Into<Bytes>) -> &mut Self {
        self.ops.push(BatchOp::Delete(key.into()));
        self
    }

    /// Require `key` to hold `expected` (`None`: to be absent) when the batch applies.
    pub fn expect(&mut self, key: impl Into<Bytes>, expected: Option<Bytes>) -> &mut Self {
        self.preconditions.push(Precondition {
            key: key.into(),
            expected,
        });
        self
    }

    /// Number of writes.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there is nothing to write and nothing to check.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.preconditions.is_empty()
    }

    /// Reject empty keys before anything is applied.
    pub fn validate(&self) -> Result<()> {
        for op in &self.ops {
            if op.key().is_empty() {
                return Err(Error::InvalidArgument(
                    "a batch holds a write to the empty key; every key starts with a tag".into(),
                ));
            }
        }
        Ok(())
    }
}

/// One figure an engine keeps about itself (its own counters, sizes and latencies), for a
/// monitoring system to scrape beside RockLake's own.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineStat {
    /// The engine's own name for it, prefixed with the engine's (`rocksdb.estimate-num-keys`,
    /// `slatedb.db.write_ops`); an exporter makes it a metric name.
    pub name: String,
    /// Label pairs that tell apart several figures of one name.
    pub labels: Vec<(String, String)>,
    /// What it measures, in the engine's words where it has them.
    pub help: String,
    /// The figure now.
    pub value: StatValue,
}

/// The value of an [`EngineStat`].
#[derive(Clone, Debug, PartialEq)]
pub enum StatValue {
    /// Only ever grows while the store is open.
    Counter(u64),
    /// Any value now.
    Gauge(f64),
    /// Observations by bucket: `counts[i]` fell at or below `bounds[i]` and above the bound
    /// before it; the last count (`counts.len() == bounds.len() + 1`) above every bound.
    Histogram {
        /// Observations in all.
        count: u64,
        /// Their sum.
        sum: f64,
        /// Upper bounds of the buckets, ascending.
        bounds: Vec<f64>,
        /// Observations per bucket (not cumulative).
        counts: Vec<u64>,
    },
}

/// What an engine can and cannot do. Tests and the conformance suite read this instead of
/// skipping checks silently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Data survives closing and reopening (false for in-memory stores).
    pub persistent: bool,
    /// A second opener of the same store is refused with [`Error::Locked`].
    pub exclusive_open: bool,
    /// A second opener fences the first (SlateDB): the first one's writes fail with
    /// [`Error::Fenced`].
    pub fences_on_open: bool,
    /// [`KvBackend::view`] is a true point-in-time view of every key.
    pub point_in_time_views: bool,
}

/// Point reads and ordered scans: what a read view and a live store both offer.
///
/// # Contract
/// - `get` returns the value last written to the key, or `None`.
/// - `scan` returns at most `limit` pairs of keys inside `range`, in `order`, each key once.
///   `limit` must be at least 1. Callers that want more call again with the range narrowed past
///   the last key returned ([`KeyRange::after`]/[`KeyRange::before`], or [`Pager`]). No scan
///   returns a whole table at once.
/// - On a view, every call sees the same point in time. On a live store, each call sees some
///   state at least as new as every write acknowledged before it began.
#[async_trait]
pub trait ReadView: Send + Sync {
    /// Read one key.
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>>;

    /// Read at most `limit` pairs of `range` in `order`.
    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>>;

    /// Lend at most `limit` pairs of `range`, in `order`, to `each`, until it returns `false`;
    /// returns how many pairs it was given. The same pairs as [`ReadView::scan`], without the
    /// copies where an engine can lend its own bytes (RocksDB's and sled's iterators do). The
    /// default collects a page with `scan` and lends from it.
    async fn visit(
        &self,
        range: &KeyRange,
        order: Order,
        limit: usize,
        each: &mut Visitor<'_>,
    ) -> Result<usize> {
        let page = self.scan(range, order, limit).await?;
        Ok(lend(&page, each))
    }
}

/// A view that reads nothing: every read answers [`Error::Closed`]. It stands in for the view
/// of a transaction that has let go of its own (at its commit), so that the store stops
/// keeping what that view would have read.
pub struct ClosedView;

#[async_trait]
impl ReadView for ClosedView {
    async fn get(&self, _key: &[u8]) -> Result<Option<Bytes>> {
        Err(Error::Closed)
    }

    async fn scan(&self, _range: &KeyRange, _order: Order, _limit: usize) -> Result<Vec<KvPair>> {
        Err(Error::Closed)
    }
}

/// Lend the pairs of a collected page to `each` until it returns `false`; returns how many it
/// was given. What [`ReadView::visit`] does with a page it had to collect.
pub fn lend(page: &[KvPair], each: &mut Visitor<'_>) -> usize {
    let mut n = 0;
    for (k, v) in page {
        n += 1;
        if !each(k, v) {
            break;
        }
    }
    n
}

/// Lend every pair of `range`, in ascending order, to `each` until it returns `false`, through
/// [`ReadView::visit`] calls of `page` pairs each; returns how many pairs it was given.
pub async fn visit_all(
    view: &dyn ReadView,
    mut range: KeyRange,
    page: usize,
    each: &mut Visitor<'_>,
) -> Result<u64> {
    let page = page.max(1);
    let mut total = 0u64;
    let mut last = Vec::new();
    loop {
        let mut stopped = false;
        let got = view
            .visit(&range, Order::Ascending, page, &mut |k, v| {
                last.clear();
                last.extend_from_slice(k);
                stopped = !each(k, v);
                !stopped
            })
            .await?;
        total += got as u64;
        if stopped || got < page {
            return Ok(total);
        }
        range = range.after(&last);
    }
}

/// An ordered key-value engine that RockLake can store a catalog in.
///
/// # Contract
/// - **Reads** ([`ReadView`]) on the store see every write acknowledged before they began.
/// - **`write`** is atomic: either every op of the batch is applied, or none is. Before applying
///   it checks each [`Precondition`] against the current state, atomically with the apply; if
///   one fails it returns [`Error::ConditionFailed`] and applies nothing. With
///   [`Durability::Durable`] it returns `Ok` only once the batch survives a crash; with
///   [`Durability::Buffered`] once it is visible to reads. An `Err` means the batch did not land
///   — an engine that cannot tell (e.g. fenced after the write was buffered) must make sure it
///   never becomes visible, and report [`Error::Fenced`].
/// - **`view`** returns a consistent read view: all of its reads see one point in time, no
///   matter what is written meanwhile. Engines without native snapshots must still honour this
///   (see the sled crate) or say so in [`Capabilities::point_in_time_views`].
/// - **`flush`** makes every acknowledged buffered write durable.
/// - **`close`** flushes and releases the store; every later call returns [`Error::Closed`].
///   Closing twice is not an error.
/// - Implementations must not block the async runtime for long: a blocking engine may run a
///   call that finishes in microseconds on the calling task (a cached point read, a short scan,
///   a buffered batch), and runs anything that can wait on the disk for longer (a sync, a large
///   scan) under `tokio::task::spawn_blocking`, whose round trip alone costs about 15 µs.
#[async_trait]
pub trait KvBackend: ReadView + fmt::Debug {
    /// Engine name: `memory`, `slatedb`, `rocksdb`, `sled`.
    fn engine(&self) -> &'static str;

    /// What this engine can do.
    fn capabilities(&self) -> Capabilities;

    /// Apply a batch atomically, checking its preconditions first.
    async fn write(&self, batch: WriteBatch, durability: Durability) -> Result<()>;

    /// A consistent, point-in-time read view.
    async fn view(&self) -> Result<Arc<dyn ReadView>>;

    /// Make every acknowledged write durable.
    async fn flush(&self) -> Result<()>;

    /// Flush and release the store.
    async fn close(&self) -> Result<()>;

    /// Make the engine write what it holds in memory into its files and merge them, where it
    /// can be asked to (a forced compaction), so that checks can compare contents across one.
    /// Contents never change. `Ok(false)`: there is nothing this engine can be made to do.
    async fn compact(&self) -> Result<bool> {
        Ok(false)
    }

    /// The engine's own figures about itself, read now (cheap: no I/O beyond a file's size).
    /// Empty for an engine that keeps none.
    fn engine_stats(&self) -> Vec<EngineStat> {
        Vec::new()
    }

    /// This writer's lease on its store, for an engine whose store another process can take
    /// over (see [`crate::lease`]); `None` where no other writer can open the store while this
    /// one has it (a lock file, memory) or for a reader.
    fn lease(&self) -> Option<Arc<crate::lease::Lease>> {
        None
    }
}

/// Pages through a range of any [`ReadView`], `page` pairs at a time, resuming after the last
/// key returned. Use it on a view for a consistent walk of a whole table.
pub struct Pager<'a> {
    view: &'a dyn ReadView,
    range: KeyRange,
    order: Order,
    page: usize,
    remaining: Option<usize>,
    done: bool,
}

impl<'a> Pager<'a> {
    /// Walk `range` in `order`, `page` pairs per call.
    pub fn new(view: &'a dyn ReadView, range: KeyRange, order: Order, page: usize) -> Pager<'a> {
        Pager {
            view,
            range,
            order,
            page: page.max(1),
            remaining: None,
            done: false,
        }
    }

    /// Stop after `limit` pairs in total.
    pub fn limit(mut self, limit: usize) -> Self {
        self.remaining = Some(limit);
        self.done = limit == 0;
        self
    }

    /// The next page, or `None` when the range is exhausted.
    pub async fn next_page(&mut self) -> Result<Option<Vec<KvPair>>> {
        if self.done || self.range.is_empty() {
            return Ok(None);
        }
        let want = match self.remaining {
            Some(r) => r.min(self.page),
            None => self.page,
        };
        let items = self.view.scan(&self.range, self.order, want).await?;
        if items.len() < want {
            self.done = true;
        }
        if let Some(r) = &mut self.remaining {
            *r -= items.len().min(*r);
            if *r == 0 {
                self.done = true;
            }
        }
        if let Some((last, _)) = items.last() {
            self.range = match self.order {
                Order::Ascending => self.range.after(last),
                Order::Descending => self.range.before(last),
            };
        }
        if items.is_empty() {
            return Ok(None);
        }
        Ok(Some(items))
    }
}

/// Read helpers derived once from [`ReadView`]; implementors never write these.
#[async_trait]
pub trait ReadViewExt: ReadView {
    /// The first pair of `range` in `order`.
    async fn first(&self, range: &KeyRange, order: Order) -> Result<Option<KvPair>> {
        Ok(self.scan(range, order, 1).await?.into_iter().next())
    }

    /// Count the keys of a range, paging through it.
    async fn count(&self, range: KeyRange) -> Result<u64>
    where
        Self: Sized,
    {
        let mut pager = Pager::new(self, range, Order::Ascending, 1024);
        let mut n = 0u64;
        while let Some(page) = pager.next_page().await? {
            n += page.len() as u64;
        }
        Ok(n)
    }
}

impl<T: ReadView + ?Sized> ReadViewExt for T {}

/// Count the keys of a range of any view (also for `dyn ReadView`).
pub async fn count_range(view: &dyn ReadView, range: KeyRange) -> Result<u64> {
    let mut pager = Pager::new(view, range, Order::Ascending, 1024);
    let mut n = 0u64;
    while let Some(page) = pager.next_page().await? {
        n += page.len() as u64;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ranges_stop_at_the_next_tag() {
        let r = KeyRange::prefix(&[0x05]);
        assert!(r.contains(&[0x05]));
        assert!(r.contains(&[0x05, 0xFF, 0xFF]));
        assert!(!r.contains(&[0x06]));
        assert!(!r.contains(&[0x04, 0xFF]));
        let r = KeyRange::prefix(&[0xFF]);
        assert!(r.contains(&[0xFF, 0xFF, 0xFF]));
        assert_eq!(r.end, Bound::Unbounded);
        assert_eq!(prefix_successor(&[0x01, 0xFF]), Some(vec![0x02]));
        assert_eq!(prefix_successor(&[0xFF, 0xFF]), None);
    }

    /// `visit_all` pages through a range in order, across page boundaries, and stops for good
    /// when told (not just for the current page).
    #[tokio::test]
    async fn visit_all_pages_in_order_and_stops_when_told() {
        let store = crate::memory::MemoryBackend::default();
        let mut w = WriteBatch::new();
        for i in 0..3000u32 {
            w.put(
                [&[0x20u8][..], &i.to_be_bytes()].concat(),
                i.to_be_bytes().to_vec(),
            );
        }
        w.put(vec![0x21, 0], b"next table".to_vec());
        store.write(w, Durability::Buffered).await.unwrap();

        let mut seen = Vec::new();
        let n = visit_all(&store, KeyRange::prefix(&[0x20]), 128, &mut |k, v| {
            assert_eq!(&k[1..], v);
            seen.push(u32::from_be_bytes(v.try_into().unwrap()));
            true
        })
        .await
        .unwrap();
        assert_eq!(n, 3000);
        assert_eq!(seen, (0..3000).collect::<Vec<_>>());

        // Told to stop mid-page, and on the last pair of a full page (where a short page no
        // longer signals the end).
        for stop in [250, 256] {
            let mut lent = 0;
            let n = visit_all(&store, KeyRange::all(), 128, &mut |_, _| {
                lent += 1;
                lent < stop
            })
            .await
            .unwrap();
            assert_eq!(
                (n, lent),
                (stop as u64, stop),
                "told to stop at pair {stop}"
            );
        }
    }
}
