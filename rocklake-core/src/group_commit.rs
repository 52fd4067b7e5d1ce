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
/// Use: apply a batch (visible, not yet durable), number it with [`GroupCommit::applied`], then
/// [`GroupCommit::wait_durable`] with the engine's sync. Callers that build work which a flush
/// should wait for count it with [`GroupCommit::building`] / [`GroupCommit::built`].
#[derive(Debug, Default)]
pub struct GroupCommit {
    /// Transactions begun and not yet applied or dropped (including those queued on the commit
    /// lock): a leader gives them a few turns before it flushes.
    building: std::sync::atomic::AtomicUsize,
    applied: std::sync::atomic::AtomicU64,
    /// Every batch numbered up to this is durable.
    durable: std::sync::atomic::AtomicU64,
    /// Set while a leader flushes.
    leading: AtomicBool,
    /// Woken when a leader finishes (or gives up).
    done: Notify,
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

impl GroupCommit {
    /// A transaction began: count it as building.
    pub fn building(&self) {
        self.building.fetch_add(1, AtomicOrdering::AcqRel);
    }

    /// A transaction counted by [`GroupCommit::building`] applied or was dropped.
    pub fn built(&self) {
        self.building.fetch_sub(1, AtomicOrdering::AcqRel);
    }

    /// Number the batch just applied (after it is visible, before waiting for it).
    pub fn applied(&self) -> u64 {
        self.applied.fetch_add(1, AtomicOrdering::AcqRel) + 1
    }

    /// The number of the last batch applied (0 before the first).
    pub fn last_applied(&self) -> u64 {
        self.applied.load(AtomicOrdering::Acquire)
    }

    /// Return once batch `seq` is durable. Whichever waiter leads calls `sync`, which must make
    /// every batch applied before it was called durable; its error is returned as it is.
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
                self.durable.fetch_max(upto, AtomicOrdering::AcqRel);
            }
            return synced;
        }
    }
}
