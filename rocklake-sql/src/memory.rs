//! The memory one session's statement may hold at once.
//!
//! Every session reserves from the database's one pool (`rocklake serve --max-memory`), which
//! shares it fairly among the operators that can spill but lets one statement that cannot
//! take all of it. A [`StatementPool`] stands between a session and that pool and refuses a
//! reservation that would take the session past its own bound (`rocklake serve --work-mem`),
//! so one large statement fails with `53200` while the other sessions keep their share.
//!
//! A session runs one statement at a time, so the bound is per statement. PostgreSQL's
//! `work_mem` differs: it bounds each sort or hash table of a query before it spills to disk.
//! DataFusion's operators that can spill do so here too, when their share is used up.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};

/// A session's view of the database's pool, with a bound of its own (see the module's
/// documentation).
#[derive(Debug)]
pub struct StatementPool {
    inner: Arc<dyn MemoryPool>,
    limit: usize,
    used: AtomicUsize,
}

impl StatementPool {
    /// At most `limit` bytes at once of `inner`.
    pub fn new(inner: Arc<dyn MemoryPool>, limit: usize) -> StatementPool {
        StatementPool {
            inner,
            limit,
            used: AtomicUsize::new(0),
        }
    }
}

impl fmt::Display for StatementPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a statement's {} bytes of {}", self.limit, self.inner)
    }
}

impl MemoryPool for StatementPool {
    fn name(&self) -> &str {
        "statement"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.inner.register(consumer);
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.inner.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.used.fetch_add(additional, Ordering::Relaxed);
        self.inner.grow(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.used.fetch_sub(shrink, Ordering::Relaxed);
        self.inner.shrink(reservation, shrink);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        let before = self.used.fetch_add(additional, Ordering::Relaxed);
        if before.saturating_add(additional) > self.limit {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            // DataFusion's aggregations spill or emit early on this kind of error.
            return Err(DataFusionError::ResourcesExhausted(format!(
                "{} asked for {additional} more bytes while the statement held {before} of \
                 the {} one statement may hold (rocklake serve --work-mem)",
                reservation.consumer().name(),
                self.limit
            )));
        }
        self.inner
            .try_grow(reservation, additional)
            .inspect_err(|_| {
                self.used.fetch_sub(additional, Ordering::Relaxed);
            })
    }

    fn reserved(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::memory_pool::GreedyMemoryPool;

    /// The session's bound and the shared pool's both hold, and what one refuses is not
    /// counted by either.
    #[test]
    fn a_reservation_passes_neither_the_statement_bound_nor_the_pool() {
        let shared: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1000));
        let one: Arc<dyn MemoryPool> = Arc::new(StatementPool::new(shared.clone(), 600));
        let two: Arc<dyn MemoryPool> = Arc::new(StatementPool::new(shared.clone(), 600));
        let a = MemoryConsumer::new("a").register(&one);
        a.try_grow(500).unwrap();
        let e = a.try_grow(200).unwrap_err().to_string();
        assert!(e.contains("--work-mem"), "{e}");
        assert_eq!(
            (a.size(), one.reserved(), shared.reserved()),
            (500, 500, 500)
        );
        let b = MemoryConsumer::new("b").register(&two);
        b.try_grow(400).unwrap();
        // Within its own bound, past the shared pool's.
        assert!(b.try_grow(150).is_err());
        assert_eq!((two.reserved(), shared.reserved()), (400, 900));
        drop(a);
        assert_eq!((one.reserved(), shared.reserved()), (0, 400));
        b.try_grow(150).unwrap();
        assert_eq!(shared.reserved(), 550);
    }
}
