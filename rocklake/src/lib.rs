//! RockLake: a DuckLake metadata catalog on an embedded, ordered key-value store.
//!
//! This facade re-exports [`rocklake_core`] and the engines compiled in, and opens a store by URL
//! with [`open`]. Engines are chosen by Cargo feature:
//!
//! | feature | engine | URL schemes |
//! |---|---|---|
//! | `slatedb` (default) | SlateDB on an object store | `file:///path`, `memory://`, `s3://bucket/prefix` |
//! | `rocksdb` | RocksDB on a local folder | `rocksdb:///path` |
//! | `sled` | sled on a local folder | `sled:///path` |
//! | `all-engines` | all three | |
//!
//! `model://` opens the in-memory reference backend of the core (always available): the model
//! the conformance suite compares engines against.
//!
//! [`open`] opens a store as its writer. [`open_reader`] opens one for reading while its writer
//! keeps running (for `--read-only` commands beside a `rocklake serve`); which engines allow
//! that is said there.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::sync::Arc;

pub use rocklake_core;
pub use rocklake_core::*;
#[cfg(feature = "rocksdb")]
pub use rocklake_rocksdb;
#[cfg(feature = "slatedb")]
pub use rocklake_slatedb;
#[cfg(feature = "sled")]
pub use rocklake_sled;

/// The engines compiled into this binary.
pub fn engines() -> Vec<&'static str> {
    let mut v = vec!["model"];
    if cfg!(feature = "slatedb") {
        v.push("slatedb");
    }
    if cfg!(feature = "rocksdb") {
        v.push("rocksdb");
    }
    if cfg!(feature = "sled") {
        v.push("sled");
    }
    v
}

/// The engine a URL names, from its scheme.
pub fn engine_of(url: &str) -> Result<&'static str> {
    let scheme = url.split_once("://").map(|(s, _)| s).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{url:?} is not a store URL; use file:///path, memory://, s3://bucket/prefix, rocksdb:///path, sled:///path or model://"
        ))
    })?;
    Ok(match scheme {
        "file" | "memory" | "s3" => "slatedb",
        "rocksdb" => "rocksdb",
        "sled" => "sled",
        "model" => "model",
        other => {
            return Err(Error::InvalidArgument(format!(
                "unknown scheme {other}:// in {url:?}; use file://, memory://, s3:// (SlateDB), rocksdb://, sled:// or model://"
            )))
        }
    })
}

#[cfg_attr(
    all(feature = "slatedb", feature = "rocksdb", feature = "sled"),
    allow(dead_code)
)]
fn not_compiled(engine: &str, url: &str) -> Error {
    Error::Unsupported(format!(
        "{url:?} needs the {engine} engine, which this binary was built without; rebuild with `--features {engine}` (or `--features all-engines`)"
    ))
}

/// The local path of a `rocksdb:///path` or `sled:///path` URL. Percent-escapes are decoded
/// (`%20` is a space), as in `file://` URLs; a host, a query or a fragment is refused, since
/// these engines take no options.
pub fn local_path(url: &str) -> Result<std::path::PathBuf> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    if !rest.starts_with('/') {
        return Err(Error::InvalidArgument(format!(
            "{url:?}: {scheme}:// needs an absolute path, e.g. {scheme}:///var/lib/lake"
        )));
    }
    // Parsed as a file URL, which decodes percent-escapes the way file:// does.
    let parsed = url::Url::parse(&format!("file://{rest}"))
        .map_err(|e| Error::InvalidArgument(format!("{url:?} is not a valid URL: {e}")))?;
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(Error::InvalidArgument(format!(
            "{url:?}: {scheme}:// takes no options (nothing after '?' or '#')"
        )));
    }
    parsed.to_file_path().map_err(|_| {
        Error::InvalidArgument(format!(
            "{url:?}: {scheme}:// needs a local absolute path, e.g. {scheme}:///var/lib/lake"
        ))
    })
}

/// Open the store a URL names as its writer. See the crate docs for the schemes.
///
/// A store another writer holds is refused with [`Error::Locked`]: RocksDB and sled by their
/// folder's lock, SlateDB by the holder record its writers keep (a second SlateDB writer would
/// otherwise fence the running one); [`open_takeover`] fences it on purpose.
pub async fn open(url: &str) -> Result<Arc<dyn KvBackend>> {
    open_as_writer(url, false).await
}

/// Open a SlateDB store as its writer even while another writer holds it, fencing that one
/// (a standby taking over; `rocklake --takeover`). RocksDB and sled cannot be taken over,
/// since their writer holds the folder's lock: refused with [`Error::InvalidArgument`].
pub async fn open_takeover(url: &str) -> Result<Arc<dyn KvBackend>> {
    open_as_writer(url, true).await
}

async fn open_as_writer(url: &str, takeover: bool) -> Result<Arc<dyn KvBackend>> {
    let engine = engine_of(url)?;
    if takeover && engine != "slatedb" {
        return Err(Error::InvalidArgument(format!(
            "{url:?}: a takeover fences a running SlateDB writer (file://, s3://); {engine} stores are opened by one process at a time and cannot be taken over"
        )));
    }
    match engine {
        "model" => Ok(Arc::new(MemoryBackend::default())),
        "slatedb" => {
            #[cfg(feature = "slatedb")]
            {
                let b: Arc<dyn KvBackend> = rocklake_slatedb::open_url_with(url, takeover).await?;
                Ok(b)
            }
            #[cfg(not(feature = "slatedb"))]
            Err(not_compiled("slatedb", url))
        }
        "rocksdb" => {
            #[cfg(feature = "rocksdb")]
            {
                let b: Arc<dyn KvBackend> = rocklake_rocksdb::open(local_path(url)?).await?;
                Ok(b)
            }
            #[cfg(not(feature = "rocksdb"))]
            Err(not_compiled("rocksdb", url))
        }
        "sled" => {
            #[cfg(feature = "sled")]
            {
                let b: Arc<dyn KvBackend> = rocklake_sled::open(local_path(url)?).await?;
                Ok(b)
            }
            #[cfg(not(feature = "sled"))]
            Err(not_compiled("sled", url))
        }
        other => Err(Error::Unsupported(format!("engine {other}"))),
    }
}

/// Open the store a URL names for reading beside a running writer: the writer is not
/// disturbed, and every write through the backend returned is refused
/// ([`Error::PermissionDenied`]). Pass it to [`Keyspace::open_read_only`], which writes
/// nothing either.
///
/// | engine | reading beside a writer |
/// |---|---|
/// | SlateDB (`file://`, `s3://`) | a `rocklake_slatedb::SlateReader`: never fences the writer, sees its durable commits within the poll interval (`?poll_ms=N`, default 1 s) |
/// | SlateDB `memory://` | refused: every open is a new, empty store |
/// | RocksDB | not supported yet ([`Error::Unsupported`]) |
/// | sled | refused: sled holds its folder's lock for its one process |
/// | `model://` | refused: every open is a new, empty store |
///
/// [`open`] would instead open a second writer, which on SlateDB fences the running one and on
/// RocksDB and sled fails on the lock.
pub async fn open_reader(url: &str) -> Result<Arc<dyn KvBackend>> {
    match engine_of(url)? {
        "slatedb" => {
            #[cfg(feature = "slatedb")]
            {
                let b: Arc<dyn KvBackend> = rocklake_slatedb::open_reader_url(url).await?;
                Ok(b)
            }
            #[cfg(not(feature = "slatedb"))]
            Err(not_compiled("slatedb", url))
        }
        "rocksdb" => Err(Error::Unsupported(format!(
            "{url:?}: reading a RocksDB store beside its running writer is not supported yet; stop the writer and open the store alone, or keep the catalog on SlateDB (file:// or s3://), whose readers run beside the writer"
        ))),
        "sled" => Err(Error::Unsupported(format!(
            "{url:?}: a sled store cannot be opened while its writer runs: the writer holds the folder's lock, and sled has no read-only open; stop the writer first, or keep the catalog on SlateDB (file:// or s3://), whose readers run beside the writer"
        ))),
        "model" => Err(Error::Unsupported(format!(
            "{url:?}: model:// is a new, empty in-memory store on every open, so there is no writer to read beside"
        ))),
        other => Err(Error::Unsupported(format!("engine {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_name_engines() {
        assert_eq!(engine_of("file:///x").unwrap(), "slatedb");
        assert_eq!(engine_of("s3://b/p").unwrap(), "slatedb");
        assert_eq!(engine_of("rocksdb:///x").unwrap(), "rocksdb");
        assert_eq!(engine_of("sled:///x").unwrap(), "sled");
        assert!(engine_of("postgres://x").is_err());
        assert!(engine_of("/plain/path").is_err());
        assert!(local_path("sled://relative").is_err());
    }

    #[test]
    fn local_paths_decode_escapes_and_refuse_options() {
        assert_eq!(
            local_path("rocksdb:///tmp/a%20b").unwrap(),
            std::path::PathBuf::from("/tmp/a b")
        );
        assert_eq!(
            local_path("sled:///var/lib/lake").unwrap(),
            std::path::PathBuf::from("/var/lib/lake")
        );
        for (url, says) in [
            ("sled:///x?flush_interval_ms=5", "takes no options"),
            ("rocksdb:///x#frag", "takes no options"),
            ("sled://host/x", "absolute path"),
        ] {
            let e = local_path(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
        }
    }

    #[cfg(feature = "slatedb")]
    #[tokio::test]
    async fn bad_slatedb_urls_are_refused_with_the_reason() {
        for (url, says) in [
            (
                "file:///tmp/x?flush_interval_ms=0",
                "flush_interval_ms must be at least 1",
            ),
            ("file:///tmp/x?flush_interval_ms=soon", "is not a number"),
            ("file:///tmp/x?flush_interval_ms=-5", "is not a number"),
            ("memory://?cache=1", "unknown option \"cache\""),
            ("s3:///prefix", "an s3 URL needs a bucket"),
            ("file://relative/x", "needs an absolute path"),
        ] {
            match open(url).await {
                Ok(_) => panic!("{url} was accepted"),
                Err(e) => assert!(e.to_string().contains(says), "{url}: {e}"),
            }
        }
        let (location, _) = rocklake_slatedb::parse_url("file:///tmp/a%20b").unwrap();
        assert_eq!(
            location,
            rocklake_slatedb::Location::Folder("/tmp/a b".into())
        );
    }

    #[tokio::test]
    async fn missing_engines_name_their_feature() {
        #[cfg(not(feature = "rocksdb"))]
        {
            let e = open("rocksdb:///tmp/x").await.unwrap_err().to_string();
            assert!(e.contains("--features rocksdb"), "{e}");
        }
        #[cfg(not(feature = "sled"))]
        {
            let e = open("sled:///tmp/x").await.unwrap_err().to_string();
            assert!(e.contains("--features sled"), "{e}");
        }
        assert!(open("model://").await.is_ok());
    }
}
