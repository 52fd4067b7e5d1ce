//! Group commit: commits that arrive together share one durability barrier (one fsync, one
//! SlateDB WAL write). The catalog's commits use it, and so does every engine for its own
//! durable batches: one implementation, in core.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};

use tokio::sync::Notify;

use crate::error::Result;

/// Shares durability barriers between commits that arrive together.
///
/// Commits are applied one at a time under the commit lock and numbered; a committer then waits
/// for a flush that started after its batch was applied. One committer at a time leads: it
/// flushes everything applied so far and then wakes every waiter at once; those it covered
/// return, the rest elect the next leader. (A queue on a mutex instead would hand the lock from
/// waiter to waiter, one task switch each, before the next flush could start.)
///
/// Use: under the lock that orders applies, number the batch with [`GroupCommit::start_apply`],
/// apply it (visible, not yet durable) and finish the returned [`Applying`]; then, outside the
/// lock, [`GroupCommit::wait_durable`] with the engine's sync. Callers that build work which a
/// flush should wait for count it with [`GroupCommit::building`] / [`GroupCommit::built`].
///
/// Numbers are handed out before the apply and counted applied after it, so a reader that
/// took a view of the store and then read [`GroupCommit::started`] knows that every batch the
/// view may hold is numbered at most that: it can tell whether everything it sees is durable.
#[derive(Debug, Default)]
pub struct GroupCommit {
    /// Transactions begun and not yet applied or dropped (including those queued on the commit
    /// lock): a leader gives them a few turns before it flushes.
    building: std::sync::atomic::AtomicUsize,
    /// The number handed to the last batch whose apply began.
    started: std::sync::atomic::AtomicU64,
    /// Every batch numbered up to this has been applied (or failed to apply).
    applied: std::sync::atomic::AtomicU64,
    /// Every batch numbered up to this is durable.
    durable: std::sync::atomic::AtomicU64,
    /// Set while a leader flushes.
    leading: AtomicBool,
    /// Woken when a leader finishes (or gives up).
    done: Notify,
    /// The flushes that made batches durable, and how many each covered.
    flushes: FlushCounts,
}

/// The upper bounds of the flush-size buckets [`FlushStats::covering`] counts (a flush that
/// covered more than the last falls in none of them, only in the total).
pub const FLUSH_SIZE_BOUNDS: [u64; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

#[derive(Debug, Default)]
struct FlushCounts {
    flushes: std::sync::atomic::AtomicU64,
    batches: std::sync::atomic::AtomicU64,
    covering: [std::sync::atomic::AtomicU64; FLUSH_SIZE_BOUNDS.len()],
}

/// What a [`GroupCommit`]'s flushes have done so far (for a server's metrics): how many made
/// batches durable, how many batches they covered in all, and how many covered at most each of
/// [`FLUSH_SIZE_BOUNDS`] (cumulative, as a Prometheus histogram counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushStats {
    /// Flushes that made at least one batch durable.
    pub flushes: u64,
    /// Batches those flushes covered.
    pub batches: u64,
    /// Flushes that covered at most `FLUSH_SIZE_BOUNDS[i]` batches.
    pub covering: [u64; FLUSH_SIZE_BOUNDS.len()],
}

/// How many times a flush leader yields to transactions still being built or queued before it
/// flushes without them.
const MAX_LEADER_YIELDS: usize = 16;

/// Leadership of a [`GroupCommit`]: released, and the waiters woken, when dropped (also when a
/// leader's future is dropped mid-flush).
struct Leading<'a>(&'a GroupCommit);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.0.leading.store(false, AtomicOrdering::Release);
        self.0.done.notify_waiters();
    }
}

/// A batch being applied, numbered by [`GroupCommit::start_apply`]. Counted applied when
/// finished or dropped, whether the apply succeeded or not (a failed apply leaves nothing for a
/// flush to cover, and the numbers stay in step).
#[must_use = "a batch counts as applied when this is finished or dropped"]
#[derive(Debug)]
pub struct Applying<'a> {
    group: &'a GroupCommit,
    seq: u64,
}

impl Applying<'_> {
    /// The batch is applied: its number, to wait on with [`GroupCommit::wait_durable`].
    pub fn applied(self) -> u64 {
        self.seq
    }
}

impl Drop for Applying<'_> {
    fn drop(&mut self) {
        self.group
            .applied
            .fetch_max(self.seq, AtomicOrdering::AcqRel);
    }
}

impl FlushCounts {
    fn record(&self, batches: u64) {
        self.flushes.fetch_add(1, AtomicOrdering::Relaxed);
        self.batches.fetch_add(batches, AtomicOrdering::Relaxed);
        for (bound, count) in FLUSH_SIZE_BOUNDS.iter().zip(&self.covering) {
            if batches <= *bound {
                count.fetch_add(1, AtomicOrdering::Relaxed);
            }
        }
    }
}

impl GroupCommit {
    /// A transaction began: count it as building.
    pub fn building(&self) {
        self.building.fetch_add(1, AtomicOrdering::AcqRel);
    }

    /// A transaction counted by [`GroupCommit::building`] applied or was dropped.
    pub fn built(&self) {
        self.building.fetch_sub(1, AtomicOrdering::AcqRel);
    }

    /// Number the batch about to be applied. Call under the lock that orders applies (one
    /// apply at a time), before the batch can become visible.
    pub fn start_apply(&self) -> Applying<'_> {
        let seq = self.started.fetch_add(1, AtomicOrdering::AcqRel) + 1;
        Applying { group: self, seq }
    }

    /// The number of the last batch whose apply began (0 before the first): every batch a
    /// view taken before this call may hold is numbered at most this.
    pub fn started(&self) -> u64 {
        self.started.load(AtomicOrdering::Acquire)
    }

    /// Whether a leader is flushing now.
    pub fn flushing(&self) -> bool {
        self.leading.load(AtomicOrdering::Acquire)
    }

    /// Every batch numbered at most this is durable.
    pub fn durable(&self) -> u64 {
        self.durable.load(AtomicOrdering::Acquire)
    }

    /// What the flushes have done so far.
    pub fn flush_stats(&self) -> FlushStats {
        let f = &self.flushes;
        FlushStats {
            flushes: f.flushes.load(AtomicOrdering::Relaxed),
            batches: f.batches.load(AtomicOrdering::Relaxed),
            covering: std::array::from_fn(|i| f.covering[i].load(AtomicOrdering::Relaxed)),
        }
    }

    /// The number of the last batch applied (0 before the first).
    pub fn last_applied(&self) -> u64 {
        self.applied.load(AtomicOrdering::Acquire)
    }

    /// Return once batch `seq` is durable. Whichever waiter leads calls `sync`, which must make
    /// every batch applied before it was called durable; its error is returned as it is.
    /// Batch `seq` must have been applied (its [`Applying`] finished): a flush covers only
    /// applied batches.
    pub async fn wait_durable<F, Fut>(&self, seq: u64, sync: F) -> Result<()>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        loop {
            if self.durable.load(AtomicOrdering::Acquire) >= seq {
                return Ok(());
            }
            // Registered before looking again, so a leader finishing in between still wakes us.
            let finished = self.done.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            if self.durable.load(AtomicOrdering::Acquire) >= seq {
                return Ok(());
            }
            if self
                .leading
                .compare_exchange(false, true, AtomicOrdering::AcqRel, AtomicOrdering::Acquire)
                .is_err()
            {
                finished.await;
                continue;
            }
            let _leading = Leading(self);
            // Transactions being built or queued on the commit lock apply in microseconds;
            // letting them go first puts them in this flush instead of the next one. A lone
            // committer does not wait at all.
            for _ in 0..MAX_LEADER_YIELDS {
                if self.building.load(AtomicOrdering::Acquire) == 0 {
                    break;
                }
                tokio::task::yield_now().await;
            }
            // Every batch numbered so far was applied before this flush starts: it covers them.
            let upto = self.applied.load(AtomicOrdering::Acquire);
            let synced = sync().await;
            if synced.is_ok() {
                let before = self.durable.fetch_max(upto, AtomicOrdering::AcqRel);
                if upto > before {
                    self.flushes.record(upto - before);
                }
            }
            return synced;
        }
    }
}
