//! A writer's lease on its store: how long this writer may go on answering as the store's
//! writer without having heard from the store.
//!
//! An engine whose store another process can take over (SlateDB on a folder or a bucket) renews
//! the lease while it can show the store that it is still the writer, and gives it up for good
//! once it learns a successor took over. The lease runs on this process's monotonic clock, from
//! the moment a renewal *began*, so it ends no later than a successor, watching the store from
//! elsewhere, may conclude it has ended. A paused process that resumes finds its lease over
//! at its first check, before it answers anything: [`Lease::is_held`] reads the clock, no task
//! has to run first.
//!
//! The key space checks the lease before every transaction, reader and commit
//! ([`Error::LeaseLapsed`]); a server watches [`Lease::lapsed`] to stop serving as the writer.
//! Fencing, not the lease, keeps two writers from both committing; the lease keeps a writer
//! that was cut off from answering reads, or acknowledging anything, as if it were current.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::error::{Error, Result};

/// Why a lease that ran out did.
const RAN_OUT: &str = "this writer could not renew its lease on the store in time (cut off \
                       from it, or paused); another writer may have taken it over";

/// A writer's lease (see the module docs). Shared between the engine that renews it and the
/// key space and server that check it.
#[derive(Debug)]
pub struct Lease {
    base: Instant,
    /// The lease ends at `base` plus this many nanoseconds.
    until: AtomicU64,
    lost: AtomicBool,
    /// Given up because a successor took the store over (not only run out).
    taken: AtomicBool,
    /// Its writer steps down once it ends (see [`Lease::will_step_down`]).
    steps_down: AtomicBool,
    /// Why it was given up, once it was.
    why: std::sync::Mutex<String>,
    changed: Notify,
}

impl Lease {
    /// A lease held until `until`.
    pub fn new(until: Instant) -> Lease {
        let base = Instant::now();
        Lease {
            base,
            until: AtomicU64::new(until.saturating_duration_since(base).as_nanos() as u64),
            lost: AtomicBool::new(false),
            taken: AtomicBool::new(false),
            steps_down: AtomicBool::new(false),
            why: std::sync::Mutex::new(String::new()),
            changed: Notify::new(),
        }
    }

    fn nanos(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.base).as_nanos() as u64
    }

    /// Extend the lease to `until` (never shortens it), if it still runs. A lease that ran
    /// out stays out: by then a successor may have taken the store over, and a renewal that
    /// landed late proves nothing about that.
    pub fn renew(&self, until: Instant) {
        let now = self.nanos(Instant::now());
        let until = self.nanos(until);
        let renewed = self
            .until
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |current| {
                (current > now).then_some(current.max(until))
            });
        if renewed.is_err() {
            self.lose("");
        }
        self.changed.notify_waiters();
    }

    /// Give the lease up for good (a successor took the store over): `why` says so in every
    /// refusal that follows. A lease that had already run out says that first: the successor
    /// came after it, as it should.
    pub fn lose(&self, why: impl Into<String>) {
        let ran_out = self.until.load(Ordering::Acquire) <= self.nanos(Instant::now());
        let why = why.into();
        if !why.is_empty() {
            self.taken.store(true, Ordering::Release);
        }
        if !self.lost.swap(true, Ordering::AcqRel) {
            *self.why.lock().unwrap_or_else(|p| p.into_inner()) = match (ran_out, why.is_empty()) {
                (false, _) => why,
                (true, true) => RAN_OUT.to_string(),
                (true, false) => format!("{RAN_OUT}; then {why}"),
            };
        }
        self.changed.notify_waiters();
    }

    /// Said by the key space that checks this lease: once it ends, this writer steps down for
    /// good (a standby's writer). The engine then stops renewing its record, even where a
    /// renewal would get through again, so that a standby sees the record go stale and takes
    /// over. A writer that does not step down (a lone server) keeps renewing it, so that no
    /// other process takes its store while it runs.
    pub fn will_step_down(&self) {
        self.steps_down.store(true, Ordering::Release);
    }

    /// Whether this lease has ended and its writer steps down (see
    /// [`Lease::will_step_down`]): its record must no longer be renewed.
    pub fn stepped_down(&self) -> bool {
        self.steps_down.load(Ordering::Acquire) && !self.is_held()
    }

    /// Whether it was given up because a successor took the store over (a commit refused for
    /// that is refused as fenced), rather than only run out.
    pub fn taken_over(&self) -> bool {
        self.taken.load(Ordering::Acquire)
    }

    /// How long the lease still runs; `None` once it has ended or was given up.
    pub fn remaining(&self) -> Option<Duration> {
        if self.lost.load(Ordering::Acquire) {
            return None;
        }
        let until = self.until.load(Ordering::Acquire);
        let now = self.nanos(Instant::now());
        (now < until).then(|| Duration::from_nanos(until - now))
    }

    /// Whether this writer may still answer as the store's writer.
    pub fn is_held(&self) -> bool {
        self.remaining().is_some()
    }

    /// `Ok` while the lease is held; otherwise [`Error::LeaseLapsed`] saying why.
    pub fn check(&self) -> Result<()> {
        if self.is_held() {
            return Ok(());
        }
        let why = self.why.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Err(Error::LeaseLapsed(if why.is_empty() {
            RAN_OUT.to_string()
        } else {
            why
        }))
    }

    /// Resolves once the lease is no longer held.
    pub async fn lapsed(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.remaining() {
                None => return,
                Some(left) => {
                    tokio::select! {
                        _ = tokio::time::sleep(left) => {}
                        _ = changed => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lease_runs_out_unless_renewed_and_is_lost_for_good() {
        let lease = Lease::new(Instant::now() + Duration::from_millis(200));
        assert!(lease.is_held());
        lease.renew(Instant::now() + Duration::from_millis(400));
        // Renewing to an earlier end does not shorten it.
        lease.renew(Instant::now());
        assert!(lease.remaining().unwrap() > Duration::from_millis(300));
        let started = Instant::now();
        lease.lapsed().await;
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(matches!(lease.check(), Err(Error::LeaseLapsed(_))));

        // A renewal after the lease ran out does not bring it back.
        lease.renew(Instant::now() + Duration::from_secs(60));
        assert!(!lease.is_held(), "a lapsed lease came back");

        let lease = Lease::new(Instant::now() + Duration::from_secs(60));
        lease.lose("a successor took over");
        assert!(!lease.is_held());
        lease.renew(Instant::now() + Duration::from_secs(120));
        assert!(!lease.is_held(), "a lost lease is not renewed");
        let Err(Error::LeaseLapsed(why)) = lease.check() else {
            panic!("lost")
        };
        assert_eq!(why, "a successor took over");
        assert!(lease.taken_over());
        lease.lapsed().await;

        // Lost after it ran out: it says it ran out first.
        let lease = Lease::new(Instant::now());
        lease.lose("a successor took over");
        let Err(Error::LeaseLapsed(why)) = lease.check() else {
            panic!("lost")
        };
        assert!(
            why.starts_with(RAN_OUT) && why.ends_with("then a successor took over"),
            "{why}"
        );
    }
}
