//! A power cut on object storage: an `object_store` layer, inside a crash child, that can lose
//! what its writer had not yet been told was stored.
//!
//! An object store keeps a PUT whole or not at all, and keeps every PUT it answered. What a
//! writer that loses its power (or its network) at an instant leaves behind is therefore: every
//! request the store answered before that instant; of the requests still on their way, some
//! that reached the store and some that never did; nothing it would have sent afterwards. A
//! SIGKILL is weaker than that: the requests the killed process had already handed to the
//! kernel still reach the store. This layer makes the difference:
//!
//! - Every write (a PUT, the completion of a multipart upload) spends a random
//!   [`MAX_WIRE_DELAY`] "on the wire" before it is sent. A write still there at the cut is
//!   **dropped**: the store never sees it.
//! - A write sent before the cut and answered after it reached the store, but its answer is
//!   **lost**: the writer is told it failed.
//! - Every request after the cut fails at once and reaches nothing.
//!
//! The crash child ([`crate::crash`]) started with [`CUT_ENV`] set reads its stdin; at the line
//! `cut` it cuts, stops reporting acknowledgements (a dead machine tells no one), waits for the
//! requests already sent to be answered (a bounded wait), and prints [`CUT_DONE`] with what the
//! layer did. The parent then kills it, opens the store as it is, and checks it as the crash
//! check does: every commit acknowledged before the cut is there, none is half there. The target's
//! opener must put its object store under [`wrap`] when [`wanted`] says so; the line says whether
//! it did, and the check fails if no request ever went through the layer.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, UploadPart,
};

/// The variable that asks a crash child to put its object store under this layer and to cut
/// when told to.
pub const CUT_ENV: &str = "ROCKLAKE_CHILD_CUT_STORE";

/// The start of the line a child prints once its cut is complete.
pub const CUT_DONE: &str = "CUT";

/// The longest a write waits "on the wire" before it is sent (uniformly from zero).
pub const MAX_WIRE_DELAY: Duration = Duration::from_millis(10);

/// How long a cut waits for the requests already sent to be answered before it reports.
pub const SETTLE: Duration = Duration::from_secs(10);

/// Whether this process is a child asked to run under the layer ([`CUT_ENV`]).
pub fn wanted() -> bool {
    std::env::var_os(CUT_ENV).is_some()
}

/// Whether the cut has happened in this process.
pub fn is_cut() -> bool {
    STATE.cut.load(Ordering::SeqCst)
}

/// What the layer saw in this process.
struct State {
    cut: AtomicBool,
    /// Stores put under the layer.
    wrapped: AtomicUsize,
    /// Requests through the layer not yet answered (writes on the wire included).
    in_flight: AtomicUsize,
    /// Writes sent to the store.
    sent: AtomicU64,
    /// Writes on the wire at the cut, never sent.
    dropped: AtomicU64,
    /// Writes sent before the cut and answered after it (stored, answer lost).
    unanswered: AtomicU64,
}

static STATE: State = State {
    cut: AtomicBool::new(false),
    wrapped: AtomicUsize::new(0),
    in_flight: AtomicUsize::new(0),
    sent: AtomicU64::new(0),
    dropped: AtomicU64::new(0),
    unanswered: AtomicU64::new(0),
};

/// Put `inner` under the layer.
pub fn wrap(inner: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
    STATE.wrapped.fetch_add(1, Ordering::SeqCst);
    Arc::new(CutStore { inner })
}

/// In a child started with [`CUT_ENV`]: read stdin on a thread of its own and cut at its first
/// `cut` line (see the module's docs).
pub fn listen_for_cut() {
    std::thread::spawn(|| {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if line.trim() == "cut" {
                cut_and_report();
                return;
            }
        }
    });
}

/// Cut, wait for what was sent to be answered, and print the [`CUT_DONE`] line.
fn cut_and_report() {
    use std::io::Write;
    STATE.cut.store(true, Ordering::SeqCst);
    let start = Instant::now();
    while STATE.in_flight.load(Ordering::SeqCst) > 0 && start.elapsed() < SETTLE {
        std::thread::sleep(Duration::from_millis(1));
    }
    let report = CutReport {
        wrapped: STATE.wrapped.load(Ordering::SeqCst) as u64,
        sent: STATE.sent.load(Ordering::SeqCst),
        dropped: STATE.dropped.load(Ordering::SeqCst),
        unanswered: STATE.unanswered.load(Ordering::SeqCst),
        unsettled: STATE.in_flight.load(Ordering::SeqCst) as u64,
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{report}");
    let _ = out.flush();
}

/// What a child's [`CUT_DONE`] line says.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CutReport {
    /// Stores the child put under the layer (0: its opener ignored [`CUT_ENV`], or the cut
    /// came before it opened anything).
    pub wrapped: u64,
    /// Writes sent to the store before the cut.
    pub sent: u64,
    /// Writes on the wire at the cut, never sent.
    pub dropped: u64,
    /// Writes stored whose answer the cut lost.
    pub unanswered: u64,
    /// Requests still unanswered when the child stopped waiting ([`SETTLE`]): they may or
    /// may not reach the store before the kill, both of which a power cut can leave.
    pub unsettled: u64,
}

impl fmt::Display for CutReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{CUT_DONE} wrapped={} sent={} dropped={} unanswered={} unsettled={}",
            self.wrapped, self.sent, self.dropped, self.unanswered, self.unsettled
        )
    }
}

impl CutReport {
    /// Add another cut's figures to these.
    pub fn add(&mut self, other: &CutReport) {
        self.wrapped += other.wrapped;
        self.sent += other.sent;
        self.dropped += other.dropped;
        self.unanswered += other.unanswered;
        self.unsettled += other.unsettled;
    }

    /// Read a [`CUT_DONE`] line.
    pub fn parse(line: &str) -> Option<CutReport> {
        let rest = line.trim().strip_prefix(CUT_DONE)?;
        let mut r = CutReport::default();
        for field in rest.split_whitespace() {
            let (name, value) = field.split_once('=')?;
            let value: u64 = value.parse().ok()?;
            match name {
                "wrapped" => r.wrapped = value,
                "sent" => r.sent = value,
                "dropped" => r.dropped = value,
                "unanswered" => r.unanswered = value,
                "unsettled" => r.unsettled = value,
                _ => return None,
            }
        }
        Some(r)
    }
}

/// Counts one request as on its way until dropped.
struct InFlight;

impl InFlight {
    fn start() -> InFlight {
        STATE.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        STATE.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn cut_error() -> object_store::Error {
    object_store::Error::Generic {
        store: "power cut",
        source: "the writer lost its power (conformance::cutstore)".into(),
    }
}

/// Fail at once after the cut.
fn alive() -> object_store::Result<()> {
    if is_cut() {
        Err(cut_error())
    } else {
        Ok(())
    }
}

/// A write's way to the store: the wire (dropped if the cut comes first), then the store's
/// answer (lost if the cut came meanwhile).
async fn send<T>(
    write: impl std::future::Future<Output = object_store::Result<T>>,
) -> object_store::Result<T> {
    let _on_the_way = InFlight::start();
    alive()?;
    let delay = rand::random_range(0..=MAX_WIRE_DELAY.as_micros() as u64);
    tokio::time::sleep(Duration::from_micros(delay)).await;
    if is_cut() {
        STATE.dropped.fetch_add(1, Ordering::SeqCst);
        return Err(cut_error());
    }
    STATE.sent.fetch_add(1, Ordering::SeqCst);
    let answer = write.await;
    if is_cut() {
        STATE.unanswered.fetch_add(1, Ordering::SeqCst);
        return Err(cut_error());
    }
    answer
}

/// Any other request: refused after the cut, its answer lost if the cut came meanwhile.
async fn ask<T>(
    request: impl std::future::Future<Output = object_store::Result<T>>,
) -> object_store::Result<T> {
    let _on_the_way = InFlight::start();
    alive()?;
    let answer = request.await;
    alive()?;
    answer
}

/// A stream that ends in an error at the first item after the cut.
fn until_cut<T: Send + 'static>(
    s: BoxStream<'static, object_store::Result<T>>,
) -> BoxStream<'static, object_store::Result<T>> {
    s.map(|item| alive().and(item)).boxed()
}

#[derive(Debug)]
struct CutStore {
    inner: Arc<dyn ObjectStore>,
}

impl fmt::Display for CutStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CutStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for CutStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        send(self.inner.put_opts(location, payload, opts)).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let inner = ask(self.inner.put_multipart_opts(location, opts)).await?;
        Ok(Box::new(CutUpload { inner }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        ask(self.inner.get_opts(location, options)).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        ask(self.inner.get_ranges(location, ranges)).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        // A delete not yet handed on at the cut is not made.
        until_cut(self.inner.delete_stream(until_cut(locations)))
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        until_cut(self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        until_cut(self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        ask(self.inner.list_with_delimiter(prefix)).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        send(self.inner.copy_opts(from, to, options)).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        send(self.inner.rename_opts(from, to, options)).await
    }
}

/// A multipart upload under the layer: its parts go as any request; its completion (what makes
/// the object exist) is a write.
#[derive(Debug)]
struct CutUpload {
    inner: Box<dyn MultipartUpload>,
}

#[async_trait]
impl MultipartUpload for CutUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let part = self.inner.put_part(data);
        Box::pin(ask(part))
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        send(self.inner.complete()).await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        ask(self.inner.abort()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_line_reads_back() {
        let r = CutReport {
            wrapped: 1,
            sent: 40,
            dropped: 2,
            unanswered: 1,
            unsettled: 0,
        };
        assert_eq!(CutReport::parse(&r.to_string()), Some(r));
        assert_eq!(CutReport::parse("CUT sent=x"), None);
        assert_eq!(CutReport::parse("ACK 3"), None);
    }
}
