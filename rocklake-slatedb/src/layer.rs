//! The `object_store` layers RockLake puts under SlateDB.
//!
//! - A simulated round trip ([`SlateOptions::simulate_latency`](crate::SlateOptions::simulate_latency)):
//!   every request waits a fixed time before it is sent, as a round trip to a remote bucket
//!   does, for measuring on a local folder or an emulator what a real bucket would cost.
//!   `object_store`'s own `ThrottledStore` does this for remote stores, but answers a GET of a
//!   local folder's file (a `File` payload) with a panic, and waits once per object of a batch
//!   delete; this layer waits once per request and hands every answer on untouched.
//! - A watch on the reads of one folder (`ReadWatch`): which object each GET or HEAD asked
//!   for, and whether it was there. A reader generation (see `reader`) learns from it when its
//!   `DbReader`'s first poll has looked for a WAL object after the ones it read, and whether
//!   it found one.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, UploadPart,
};

/// `inner` with every request `wait` later.
pub fn delayed(inner: Arc<dyn ObjectStore>, wait: Duration) -> Arc<dyn ObjectStore> {
    Arc::new(Layer {
        inner,
        wait,
        reads: None,
    })
}

/// `inner` with its reads of `watch`'s folder told to `watch`.
pub(crate) fn watched(inner: Arc<dyn ObjectStore>, watch: Arc<ReadWatch>) -> Arc<dyn ObjectStore> {
    Arc::new(Layer {
        inner,
        wait: Duration::ZERO,
        reads: Some(watch),
    })
}

/// The reads (GET and HEAD) of objects in one folder through a [`watched`] store: each one's
/// object as it began, and whether it found the object once it was answered.
#[derive(Debug)]
pub(crate) struct ReadWatch {
    /// The folder's path and a `/`.
    folder: String,
    reads: tokio::sync::watch::Sender<Reads>,
}

/// What a [`ReadWatch`] has seen.
#[derive(Clone, Debug, Default)]
pub(crate) struct Reads {
    /// Each read's object, in the order they began.
    pub(crate) begun: Vec<Path>,
    /// The reads answered: the index of each in `begun`, and whether it found its object
    /// (`false` for not found; other errors are not counted).
    pub(crate) answered: Vec<(usize, bool)>,
}

impl Reads {
    /// The answers to the reads of `location`, in the order they came: whether each found it.
    pub(crate) fn answers_for(&self, location: &Path) -> Vec<bool> {
        self.answered
            .iter()
            .filter(|(i, _)| self.begun[*i] == *location)
            .map(|(_, found)| *found)
            .collect()
    }

    /// The lowest (least) object a read was told is not there.
    pub(crate) fn lowest_absent(&self) -> Option<Path> {
        self.answered
            .iter()
            .filter(|(_, found)| !found)
            .map(|(i, _)| &self.begun[*i])
            .min()
            .cloned()
    }
}

impl ReadWatch {
    /// A watch on the reads of the objects in `folder` (an object-store path, e.g.
    /// `catalog/wal`).
    pub(crate) fn new(folder: &str) -> Arc<ReadWatch> {
        Arc::new(ReadWatch {
            folder: format!("{folder}/"),
            reads: tokio::sync::watch::channel(Reads::default()).0,
        })
    }

    /// Wait up to `within` until `done` holds of what it has seen: what it has seen then, or
    /// `None` when `done` did not come to hold in time.
    pub(crate) async fn until(
        &self,
        within: Duration,
        done: impl FnMut(&Reads) -> bool,
    ) -> Option<Reads> {
        let mut rx = self.reads.subscribe();
        let seen = tokio::time::timeout(within, rx.wait_for(done))
            .await
            .ok()?
            .ok()?
            .clone();
        Some(seen)
    }

    /// A read of `location` about to begin: its index, when it is in the folder.
    fn begin(&self, location: &Path) -> Option<usize> {
        if !location.as_ref().starts_with(&self.folder) {
            return None;
        }
        let mut i = 0;
        self.reads.send_modify(|r| {
            i = r.begun.len();
            r.begun.push(location.clone());
        });
        Some(i)
    }

    fn answered<T>(&self, i: Option<usize>, answer: &object_store::Result<T>) {
        let found = match answer {
            Ok(_) => true,
            Err(object_store::Error::NotFound { .. }) => false,
            Err(_) => return,
        };
        if let Some(i) = i {
            self.reads.send_modify(|r| r.answered.push((i, found)));
        }
    }
}

#[derive(Debug)]
struct Layer {
    inner: Arc<dyn ObjectStore>,
    /// Before every request.
    wait: Duration,
    reads: Option<Arc<ReadWatch>>,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Layer({:?}, {})", self.wait, self.inner)
    }
}

/// Wait `d` unless it is zero.
async fn sleep(d: Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}

/// A stream whose first item comes `wait` after it is first polled (one request's round trip;
/// the pages after it are taken to come with it).
fn later<T: Send + 'static>(
    wait: Duration,
    s: BoxStream<'static, object_store::Result<T>>,
) -> BoxStream<'static, object_store::Result<T>> {
    if wait.is_zero() {
        return s;
    }
    futures::stream::once(async move {
        tokio::time::sleep(wait).await;
        s
    })
    .flatten()
    .boxed()
}

#[async_trait]
impl ObjectStore for Layer {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        sleep(self.wait).await;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        sleep(self.wait).await;
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(LayerUpload {
            inner,
            wait: self.wait,
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let watched = self.reads.as_ref().and_then(|w| w.begin(location));
        sleep(self.wait).await;
        let answer = self.inner.get_opts(location, options).await;
        if let Some(w) = &self.reads {
            w.answered(watched, &answer);
        }
        answer
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        sleep(self.wait).await;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        later(self.wait, self.inner.delete_stream(locations))
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        later(self.wait, self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        later(self.wait, self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        sleep(self.wait).await;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        sleep(self.wait).await;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        sleep(self.wait).await;
        self.inner.rename_opts(from, to, options).await
    }
}

/// A multipart upload whose parts and completion each wait as a request does.
#[derive(Debug)]
struct LayerUpload {
    inner: Box<dyn MultipartUpload>,
    wait: Duration,
}

#[async_trait]
impl MultipartUpload for LayerUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let part = self.inner.put_part(data);
        let wait = self.wait;
        Box::pin(async move {
            sleep(wait).await;
            part.await
        })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        sleep(self.wait).await;
        self.inner.complete().await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        sleep(self.wait).await;
        self.inner.abort().await
    }
}
