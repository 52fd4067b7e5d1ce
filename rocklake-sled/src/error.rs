//! How sled's errors map onto RockLake's semantic [`Error`].
//!
//! | sled error | RockLake error |
//! |---|---|
//! | `Io` saying `could not acquire lock ... WouldBlock` (open) | [`Error::Locked`] |
//! | `Corruption { at, .. }` | [`Error::Corrupt`] |
//! | anything else | [`Error::Engine`] with `engine: "sled"` |
//!
//! The sled error is kept as the `source` wherever the variant has one.

use std::path::Path;

use rocklake_core::keys;
use rocklake_core::Error;

/// The engine name carried by every [`Error::Engine`] of this crate.
pub(crate) const ENGINE: &str = "sled";

/// What sled's `Config::open` says when another handle holds the store's lock file.
const LOCK_MESSAGE: &str = "could not acquire lock";

/// Map an error of `Config::open` on `path`: a held lock becomes [`Error::Locked`].
pub(crate) fn open_error(err: sled::Error, path: &Path) -> Error {
    if let sled::Error::Io(io) = &err {
        if io.to_string().contains(LOCK_MESSAGE) {
            return Error::Locked {
                path: path.display().to_string(),
                source: Box::new(err),
            };
        }
    }
    map(
        err,
        &format!("opening the store at {}", path.display()),
        None,
    )
}

/// Map an error sled returned while doing `what` (a phrase: "reading a key"), touching `key`
/// when one is known.
pub(crate) fn map(err: sled::Error, what: &str, key: Option<&[u8]>) -> Error {
    match err {
        sled::Error::Corruption { at, .. } => Error::Corrupt {
            key: match key {
                Some(k) => keys::render(k),
                None => "(no single key: sled's log)".to_string(),
            },
            reason: match at {
                Some(at) => format!("sled found corruption in its log at {at:?} while {what}"),
                None => format!("sled found corruption in its log while {what}"),
            },
        },
        other => Error::engine(ENGINE, what, other),
    }
}

/// The error every call returns once a durability flush has failed (see the crate docs).
pub(crate) fn failed_earlier() -> Error {
    Error::Engine {
        engine: ENGINE,
        message: "an earlier flush failed, so writes acknowledged as buffered may not be on disk \
                  and the last batch may not have landed; this handle refuses further calls: \
                  close it and open the store again"
            .to_string(),
        source: None,
    }
}
