//! Mapping RocksDB's errors onto RockLake's semantic ones, in one place.
//!
//! RocksDB reports every failure as one string-carrying `rocksdb::Error` whose
//! [`kind`](rocksdb::Error::kind) is parsed from the message prefix. Three cases have a closer
//! meaning than "the engine failed":
//!
//! | RocksDB | RockLake |
//! |---|---|
//! | `IO error` naming the `LOCK` file, at open | [`Error::Locked`]: another handle holds the store |
//! | `Corruption` | [`Error::Corrupt`] |
//! | anything else | [`Error::Engine`] with what we were doing, keeping RocksDB's error as source |

use std::path::Path;

use rocklake_core::error::Error;
use rocklake_core::keys;
use rocksdb::ErrorKind;

/// The engine name reported in errors and by `KvBackend::engine`.
pub(crate) const ENGINE: &str = "rocksdb";

/// Map an error of `DB::open` on `path`.
///
/// A second open of a store already open (in this process or another) fails with an `IO error`
/// naming the `LOCK` file, e.g. `IO error: While lock file: /tmp/x/LOCK: Resource temporarily
/// unavailable` or `IO error: lock hold by current process ... /tmp/x/LOCK: No locks available`.
pub(crate) fn open_error(path: &Path, e: rocksdb::Error) -> Error {
    if e.kind() == ErrorKind::IOError && e.as_ref().contains("LOCK") {
        return Error::Locked {
            path: path.display().to_string(),
            source: Box::new(e),
        };
    }
    map(e, format!("opening the store at {}", path.display()), None)
}

/// Map an error RocksDB returned while `doing` something, about `key` when there is one.
pub(crate) fn map(e: rocksdb::Error, doing: impl Into<String>, key: Option<&[u8]>) -> Error {
    let doing = doing.into();
    match e.kind() {
        ErrorKind::Corruption => Error::Corrupt {
            key: match key {
                Some(k) => keys::render(k),
                None => "(no single key)".to_string(),
            },
            reason: format!("RocksDB found corruption while {doing}: {e}"),
        },
        _ => Error::engine(ENGINE, doing, e),
    }
}

/// Map a `std::io::Error` of preparing the store's folder.
pub(crate) fn io(e: std::io::Error, doing: impl Into<String>) -> Error {
    Error::engine(ENGINE, doing, e)
}
