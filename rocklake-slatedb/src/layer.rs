//! The `object_store` layers RockLake puts under SlateDB.
//!
//! - A simulated round trip ([`SlateOptions::simulate_latency`](crate::SlateOptions::simulate_latency)):
//!   every request waits a fixed time before it is sent, as a round trip to a remote bucket
//!   does, for measuring on a local folder or an emulator what a real bucket would cost.
//!   `object_store`'s own `ThrottledStore` does this for remote stores, but answers a GET of a
//!   local folder's file (a `File` payload) with a panic, and waits once per object of a batch
//!   delete; this layer waits once per request and hands every answer on untouched.
//! - A watch on the listings of one folder ([`ListWatch`]): which objects each listing found,
//!   once it has been read to its end. A reader generation (see `reader`) learns from it when
//!   its `DbReader`'s first poll has looked at the WAL, and what it found there.

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};
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
        lists: None,
    })
}

/// `inner` with its listings of `watch`'s folder told to `watch`.
pub(crate) fn watched(inner: Arc<dyn ObjectStore>, watch: Arc<ListWatch>) -> Arc<dyn ObjectStore> {
    Arc::new(Layer {
        inner,
        wait: Duration::ZERO,
        lists: Some(watch),
    })
}

/// The listings of one folder through a [`watched`] store: how many began, and for each that
/// was read to its end, the newest (greatest) name it found.
#[derive(Debug)]
pub(crate) struct ListWatch {
    folder: String,
    listings: tokio::sync::watch::Sender<Listings>,
}

/// What a [`ListWatch`] has seen.
#[derive(Clone, Debug, Default)]
pub(crate) struct Listings {
    /// Listings begun.
    pub(crate) begun: u64,
    /// Listings read to their end: the number each had when it began (counting from 1), and
    /// the greatest name it found.
    pub(crate) ended: Vec<(u64, Option<Path>)>,
}

impl ListWatch {
    /// A watch on the listings of `folder` (an object-store path, e.g. `catalog/wal`).
    pub(crate) fn new(folder: String) -> Arc<ListWatch> {
        Arc::new(ListWatch {
            folder,
            listings: tokio::sync::watch::channel(Listings::default()).0,
        })
    }

    /// What it has seen so far.
    pub(crate) fn seen(&self) -> Listings {
        self.listings.borrow().clone()
    }

    /// The first listing begun after the first `begun` that is read to its end, within
    /// `within`: the greatest name it found (`Some(None)` for an empty folder). `None` when
    /// none ended in time.
    pub(crate) async fn next_after(&self, begun: u64, within: Duration) -> Option<Option<Path>> {
        let mut rx = self.listings.subscribe();
        let ended = tokio::time::timeout(
            within,
            rx.wait_for(|l| l.ended.iter().any(|(n, _)| *n > begun)),
        )
        .await
        .ok()?
        .ok()?;
        ended
            .ended
            .iter()
            .find(|(n, _)| *n > begun)
            .map(|(_, newest)| newest.clone())
    }

    fn watches(&self, prefix: Option<&Path>) -> bool {
        prefix.is_some_and(|p| p.as_ref() == self.folder)
    }

    /// A listing of the folder: counted as it begins, its greatest name recorded at its end.
    fn listing(
        self: &Arc<Self>,
        s: BoxStream<'static, object_store::Result<ObjectMeta>>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let mut number = 0;
        self.listings.send_modify(|l| {
            l.begun += 1;
            number = l.begun;
        });
        let newest: Arc<Mutex<Option<Path>>> = Arc::default();
        let found = newest.clone();
        let watch = self.clone();
        let end = futures::stream::once(async move {
            let newest = found.lock().unwrap_or_else(|e| e.into_inner()).take();
            watch
                .listings
                .send_modify(|l| l.ended.push((number, newest)));
            None
        })
        .filter_map(|x: Option<object_store::Result<ObjectMeta>>| async move { x });
        s.inspect(move |m| {
            if let Ok(m) = m {
                let mut n = newest.lock().unwrap_or_else(|e| e.into_inner());
                if n.as_ref().is_none_or(|p| m.location > *p) {
                    *n = Some(m.location.clone());
                }
            }
        })
        .chain(end)
        .boxed()
    }
}

#[derive(Debug)]
struct Layer {
    inner: Arc<dyn ObjectStore>,
    /// Before every request.
    wait: Duration,
    lists: Option<Arc<ListWatch>>,
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
        sleep(self.wait).await;
        self.inner.get_opts(location, options).await
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
        let s = later(self.wait, self.inner.list(prefix));
        match &self.lists {
            Some(w) if w.watches(prefix) => w.listing(s),
            _ => s,
        }
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let s = later(self.wait, self.inner.list_with_offset(prefix, offset));
        match &self.lists {
            Some(w) if w.watches(prefix) => w.listing(s),
            _ => s,
        }
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
