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

/// The local path of a `rocksdb:///path` or `sled:///path` URL.
pub fn local_path(url: &str) -> Result<std::path::PathBuf> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    if !rest.starts_with('/') {
        return Err(Error::InvalidArgument(format!(
            "{url:?}: {scheme}:// needs an absolute path, e.g. {scheme}:///var/lib/lake"
        )));
    }
    Ok(std::path::PathBuf::from(rest))
}

/// Open the store a URL names. See the crate docs for the schemes.
pub async fn open(url: &str) -> Result<Arc<dyn KvBackend>> {
    match engine_of(url)? {
        "model" => Ok(Arc::new(MemoryBackend::default())),
        "slatedb" => {
            #[cfg(feature = "slatedb")]
            {
                let b: Arc<dyn KvBackend> = rocklake_slatedb::open_url(url).await?;
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
