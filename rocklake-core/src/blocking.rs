//! How an engine whose API blocks (RocksDB's FFI, sled) runs its calls without stalling the
//! async runtime. One policy for every such engine:
//!
//! - a call that finishes in microseconds when its data is in memory (a point read, taking a
//!   view, a scan of at most [`INLINE_LIMIT`] pairs, an unsynced batch of at most
//!   [`INLINE_LIMIT`] writes) runs on the calling task: a hop to tokio's blocking pool costs
//!   about 15 µs here, ten times a cached RocksDB read;
//! - anything that can wait on the disk for longer (a sync, a larger scan or batch, open,
//!   close) runs under [`tokio::task::spawn_blocking`] through [`run`].
//!
//! An inline read of a block the engine has not cached still waits for the disk on the calling
//! thread; a catalog's working set is small and normally cached.

use crate::error::{Error, Result};

/// The most pairs a scan, or writes an unsynced batch, may have to run on the calling task
/// instead of the blocking pool.
pub const INLINE_LIMIT: usize = 1024;

/// Whether a call over `items` pairs or writes is short enough to run inline.
pub fn is_inline(items: usize) -> bool {
    items <= INLINE_LIMIT
}

/// Run a blocking call of `engine` on tokio's blocking pool and wait for it. A panic inside `f`
/// is resumed here; a task the runtime cancelled (it is shutting down) is an
/// [`Error::Engine`] naming the engine.
pub async fn run<T, F>(engine: &'static str, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(Error::engine(
            engine,
            format!("a blocking {engine} call was cancelled (is the runtime shutting down?)"),
            e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn runs_off_the_runtime_and_resumes_panics() {
        let here = std::thread::current().id();
        let there = run("test", move || Ok(std::thread::current().id()))
            .await
            .unwrap();
        assert_ne!(here, there, "the call ran on a blocking thread");
        let e = run::<(), _>("test", || Err(Error::Closed))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Closed));
        let panicked = tokio::spawn(run::<(), _>("test", || panic!("boom")))
            .await
            .unwrap_err();
        assert!(panicked.is_panic());
        assert!(is_inline(INLINE_LIMIT) && !is_inline(INLINE_LIMIT + 1));
    }
}
