//! [`SlateOptions::simulate_latency`](crate::SlateOptions::simulate_latency): an object store
//! whose every request waits a fixed time before it is sent, as a round trip to a remote bucket
//! does, for measuring on a local folder or an emulator what a real bucket would cost.
//!
//! `object_store`'s own `ThrottledStore` does this for remote stores, but answers a GET of a
//! local folder's file (a `File` payload) with a panic, and waits once per object of a batch
//! delete; this layer waits once per request and hands every answer on untouched.

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
    Arc::new(LatencyStore { inner, wait })
}

#[derive(Debug)]
struct LatencyStore {
    inner: Arc<dyn ObjectStore>,
    wait: Duration,
}

impl fmt::Display for LatencyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LatencyStore({:?}, {})", self.wait, self.inner)
    }
}

/// A stream whose first item comes `wait` after it is first polled (one request's round trip;
/// the pages after it are taken to come with it).
fn later<T: Send + 'static>(
    wait: Duration,
    s: BoxStream<'static, object_store::Result<T>>,
) -> BoxStream<'static, object_store::Result<T>> {
    futures::stream::once(async move {
        tokio::time::sleep(wait).await;
        s
    })
    .flatten()
    .boxed()
}

#[async_trait]
impl ObjectStore for LatencyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        tokio::time::sleep(self.wait).await;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        tokio::time::sleep(self.wait).await;
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(LatencyUpload {
            inner,
            wait: self.wait,
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        tokio::time::sleep(self.wait).await;
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        tokio::time::sleep(self.wait).await;
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
        tokio::time::sleep(self.wait).await;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        tokio::time::sleep(self.wait).await;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        tokio::time::sleep(self.wait).await;
        self.inner.rename_opts(from, to, options).await
    }
}

/// A multipart upload whose parts and completion each wait as a request does.
#[derive(Debug)]
struct LatencyUpload {
    inner: Box<dyn MultipartUpload>,
    wait: Duration,
}

#[async_trait]
impl MultipartUpload for LatencyUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let part = self.inner.put_part(data);
        let wait = self.wait;
        Box::pin(async move {
            tokio::time::sleep(wait).await;
            part.await
        })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        tokio::time::sleep(self.wait).await;
        self.inner.complete().await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        tokio::time::sleep(self.wait).await;
        self.inner.abort().await
    }
}
