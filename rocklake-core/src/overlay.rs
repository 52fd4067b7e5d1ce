//! Point-in-time views for an engine without snapshots (sled): the live store patched by an
//! undo overlay. [`crate::engine::EngineBackend`] uses it for every engine whose
//! [`crate::engine::Engine::snapshot`] answers `None`.
//!
//! - The backend keeps the registry ([`Overlays`]) of open views. Opening a view and every write
//!   happen under the backend's write lock, so each write is wholly before a view (the view sees
//!   it in the store) or wholly after it.
//! - Before a write applies while views are open, [`Overlays::record`] reads the current value
//!   (or absence) of every key the batch touches and records it in each open view that has no
//!   entry for the key yet: the first write after the view wins, so an entry is the key's value
//!   at the time the view was taken.
//! - A view's `get` reads the live store and then its overlay; an overlay entry wins. A view's
//!   `scan` reads a stretch of the live range, then merges the overlay's entries of the same
//!   stretch: an overlay value replaces the store's, an overlay *absent* hides a key written
//!   since, and an overlay value of a key the store no longer holds brings it back. Reading the
//!   store before the overlay is what makes this safe without locking writers out: a write
//!   records into the overlay before it touches the store, so a live value newer than the view
//!   always finds its overlay entry.
//! - While no write has touched a view, the live store *is* the view, and `visit` lends the
//!   engine's own bytes; at the first write it falls back to the merging scan.
//! - Dropping a view drops its overlay; the registry holds weak references and prunes them.
//!
//! The cost: while a view is open, each write reads the old value of every key it touches, and
//! each view holds the old value of every key written during its life. Transactions and readers
//! keep views short, which keeps both small. With no view open, writes pay nothing.
//!
//! A view left open (an idle transaction) while writers go on would hold ever more. So all open
//! views' overlays share one bound ([`DEFAULT_VIEW_MEMORY`], [`Overlays::set_limit`]): a write
//! that takes them past it lets go of the views holding the most until they fit again. A view
//! let go is emptied at once, and every later read through it fails with
//! [`Error::SnapshotTooOld`] (PostgreSQL's `old_snapshot_threshold` gives the same error);
//! nothing is ever read from it half-patched.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;

use crate::backend::{lend, BatchOp, KeyRange, KvPair, Order, ReadView, Visitor};
use crate::error::{Error, Result};

/// The default bound on what all open views' overlays hold at once: 512 MiB.
pub const DEFAULT_VIEW_MEMORY: usize = 512 << 20;

/// What an overlay entry costs beyond its key's and value's bytes (the map's node, the
/// `Bytes` handles), counted against the bound.
const ENTRY_OVERHEAD: usize = 64;

/// One view's undo overlay: key -> its value when the view was taken (`None`: absent).
type Undo = BTreeMap<Bytes, Option<Bytes>>;

/// The state of one open view.
#[derive(Debug)]
struct State {
    undo: Mutex<Undo>,
    /// Set, before the store changes, by the first write recorded here: until then the live
    /// store is exactly the view.
    dirty: AtomicBool,
    /// What `undo` holds, counted as [`ENTRY_OVERHEAD`] plus key and value bytes per entry.
    bytes: AtomicUsize,
    /// Let go past the bound (set under `undo`'s lock, which it empties): reads fail.
    expired: AtomicBool,
    opened: Instant,
}

impl State {
    /// Empty the overlay and fail every later read (see the module docs).
    fn expire(&self) {
        let mut undo = lock(&self.undo);
        self.expired.store(true, AtomicOrdering::SeqCst);
        self.bytes.store(0, AtomicOrdering::SeqCst);
        undo.clear();
    }

    /// The error of a read through a view that was let go; `undo` is its locked overlay.
    fn check(&self, _undo: &Undo) -> Result<()> {
        if self.expired.load(AtomicOrdering::SeqCst) {
            return Err(Error::SnapshotTooOld(format!(
                "a view of the store taken {:.1} s ago was let go: the old values it kept for \
                 the writes made since passed the bound on all open views' memory (sled keeps \
                 views as undo overlays); begin a new transaction",
                self.opened.elapsed().as_secs_f64()
            )));
        }
        Ok(())
    }
}

/// Lock ignoring poison: an overlay stays whole if a holder panicked (entries are inserted
/// whole, and an entry equal to the unchanged live value is harmless).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The open overlay views of one store. Every method must be called under the store's write
/// lock (see the module docs).
#[derive(Debug)]
pub struct Overlays {
    views: Mutex<Vec<Weak<State>>>,
    /// The bound on what all open views' overlays hold at once, in bytes.
    limit: AtomicUsize,
}

impl Default for Overlays {
    fn default() -> Self {
        Overlays {
            views: Mutex::default(),
            limit: AtomicUsize::new(DEFAULT_VIEW_MEMORY),
        }
    }
}

impl Overlays {
    /// Bound what all open views' overlays hold at once to `bytes` (from the next write on).
    pub fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes, AtomicOrdering::Relaxed);
    }

    /// What the open views' overlays hold now, in bytes as the bound counts them.
    pub fn held_bytes(&self) -> usize {
        lock(&self.views)
            .iter()
            .filter_map(Weak::upgrade)
            .map(|v| v.bytes.load(AtomicOrdering::SeqCst))
            .sum()
    }

    /// Open a view over `live` at this moment.
    pub fn open(&self, live: Arc<dyn ReadView>) -> OverlayView {
        let state = Arc::new(State {
            undo: Mutex::default(),
            dirty: AtomicBool::new(false),
            bytes: AtomicUsize::new(0),
            expired: AtomicBool::new(false),
            opened: Instant::now(),
        });
        let mut views = lock(&self.views);
        views.retain(|w| w.strong_count() > 0);
        views.push(Arc::downgrade(&state));
        OverlayView { live, state }
    }

    /// Views still open.
    pub fn open_views(&self) -> usize {
        lock(&self.views)
            .iter()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    /// Before `ops` apply to `live`: give every open view the value each touched key has now,
    /// unless it holds an older one; then let go of the views holding the most while all of
    /// them hold more than the bound.
    pub async fn record(&self, live: &dyn ReadView, ops: &[BatchOp]) -> Result<()> {
        let views: Vec<Arc<State>> = {
            let mut views = lock(&self.views);
            views.retain(|w| {
                w.upgrade()
                    .is_some_and(|v| !v.expired.load(AtomicOrdering::SeqCst))
            });
            views.iter().filter_map(Weak::upgrade).collect()
        };
        if views.is_empty() {
            return Ok(());
        }
        let touched: BTreeSet<&Bytes> = ops.iter().map(BatchOp::key).collect();
        for key in touched {
            let lacking: Vec<&Arc<State>> = views
                .iter()
                .filter(|v| !lock(&v.undo).contains_key(key))
                .collect();
            if lacking.is_empty() {
                continue;
            }
            let old = live.get(key).await?;
            let cost = ENTRY_OVERHEAD + key.len() + old.as_ref().map_or(0, Bytes::len);
            for view in lacking {
                lock(&view.undo).insert(key.clone(), old.clone());
                view.bytes.fetch_add(cost, AtomicOrdering::SeqCst);
                view.dirty.store(true, AtomicOrdering::SeqCst);
            }
        }
        let limit = self.limit.load(AtomicOrdering::Relaxed);
        let held = |v: &Arc<State>| v.bytes.load(AtomicOrdering::SeqCst);
        let mut total: usize = views.iter().map(held).sum();
        let mut largest_first = views;
        largest_first.sort_by_key(|v| std::cmp::Reverse(held(v)));
        for view in largest_first {
            if total <= limit {
                break;
            }
            total -= held(&view);
            view.expire();
        }
        Ok(())
    }
}

/// A point-in-time view made of the live store and an undo overlay.
pub struct OverlayView {
    live: Arc<dyn ReadView>,
    state: Arc<State>,
}

impl fmt::Debug for OverlayView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OverlayView")
            .field("undo_keys", &lock(&self.state.undo).len())
            .finish()
    }
}

/// The overlay's part of a stretch of the live range: after the keys already covered
/// (`covered`, the last live key of the previous stretch) up to and including `end` (the last
/// live key of this stretch; `None`: the live range is exhausted). Never inverted: the live
/// keys are strictly increasing in scan order and inside `range`.
fn stretch<'a>(
    range: &'a KeyRange,
    order: Order,
    covered: Option<&'a Bytes>,
    end: Option<&'a Bytes>,
) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    let (start, stop) = range.as_slices();
    let excl = |k: &'a Bytes| Bound::Excluded(k.as_ref());
    let incl = |k: &'a Bytes| Bound::Included(k.as_ref());
    match order {
        Order::Ascending => (covered.map_or(start, excl), end.map_or(stop, incl)),
        Order::Descending => (end.map_or(start, incl), covered.map_or(stop, excl)),
    }
}

/// Merge a stretch of live pairs with the overlay's entries of the same stretch, both in scan
/// order, into `out` until it holds `limit` pairs.
fn merge<'a>(
    chunk: Vec<KvPair>,
    patches: impl Iterator<Item = (&'a Bytes, &'a Option<Bytes>)>,
    order: Order,
    limit: usize,
    out: &mut Vec<KvPair>,
) {
    let mut live = chunk.into_iter().peekable();
    let mut patches = patches.peekable();
    while out.len() < limit {
        let from_live = match (live.peek(), patches.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((lk, _)), Some((pk, _))) => {
                let cmp = lk.as_ref().cmp(pk.as_ref());
                let cmp = match order {
                    Order::Ascending => cmp,
                    Order::Descending => cmp.reverse(),
                };
                match cmp {
                    std::cmp::Ordering::Less => true,
                    std::cmp::Ordering::Greater => false,
                    std::cmp::Ordering::Equal => {
                        // Written since the view: the overlay holds the view's value.
                        live.next();
                        false
                    }
                }
            }
        };
        if from_live {
            if let Some(pair) = live.next() {
                out.push(pair);
            }
        } else if let Some((k, Some(v))) = patches.next() {
            // An overlay `None` is consumed too, and hides its key.
            out.push((k.clone(), v.clone()));
        }
    }
}

#[async_trait]
impl ReadView for OverlayView {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        // The live store first, the overlay second: see the module docs.
        let now = self.live.get(key).await?;
        let undo = lock(&self.state.undo);
        self.state.check(&undo)?;
        if let Some(then) = undo.get(key) {
            return Ok(then.clone());
        }
        Ok(now)
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        let mut out: Vec<KvPair> = Vec::new();
        if range.is_empty() || limit == 0 {
            return Ok(out);
        }
        let mut rest = range.clone();
        let mut covered: Option<Bytes> = None;
        while out.len() < limit {
            // A stretch of the live store, read before the overlay is looked at.
            let want = (limit - out.len()).max(32);
            let chunk = self.live.scan(&rest, order, want).await?;
            let exhausted = chunk.len() < want;
            let end = if exhausted {
                None
            } else {
                chunk.last().map(|(k, _)| k.clone())
            };
            {
                let undo = lock(&self.state.undo);
                self.state.check(&undo)?;
                let patches =
                    undo.range::<[u8], _>(stretch(range, order, covered.as_ref(), end.as_ref()));
                let patches: Box<dyn Iterator<Item = (&Bytes, &Option<Bytes>)>> = match order {
                    Order::Ascending => Box::new(patches),
                    Order::Descending => Box::new(patches.rev()),
                };
                merge(chunk, patches, order, limit, &mut out);
            }
            match &end {
                None => break,
                Some(k) => {
                    rest = match order {
                        Order::Ascending => rest.after(k),
                        Order::Descending => rest.before(k),
                    }
                }
            }
            covered = end;
        }
        Ok(out)
    }

    async fn visit(
        &self,
        range: &KeyRange,
        order: Order,
        limit: usize,
        each: &mut Visitor<'_>,
    ) -> Result<usize> {
        if range.is_empty() || limit == 0 {
            return Ok(0);
        }
        // While the overlay is clean the live store is the view: lend its bytes. A pair is lent
        // only if the overlay was still clean after the pair was read (writers mark it before
        // they change the store); from the first dirty mark on, the merging scan takes over.
        let dirty = &self.state.dirty;
        let (mut lent, mut stopped, mut interrupted) = (0usize, false, false);
        let mut last: Vec<u8> = Vec::new();
        self.live
            .visit(range, order, limit, &mut |k, v| {
                if dirty.load(AtomicOrdering::SeqCst) {
                    interrupted = true;
                    return false;
                }
                lent += 1;
                last.clear();
                last.extend_from_slice(k);
                stopped = !each(k, v);
                !stopped
            })
            .await?;
        if !interrupted || stopped {
            return Ok(lent);
        }
        let rest = match (lent, order) {
            (0, _) => range.clone(),
            (_, Order::Ascending) => range.after(&last),
            (_, Order::Descending) => range.before(&last),
        };
        let page = self.scan(&rest, order, limit - lent).await?;
        Ok(lent + lend(&page, each))
    }
}
