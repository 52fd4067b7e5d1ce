//! The one error type of RockLake.
//!
//! Variants are *semantic*: each says what happened in terms a caller can act on, and its doc
//! comment says what to do about it. Engines keep their own error as the `source` of the variant
//! they map it to (see each engine crate's `error.rs`), so no message from the engine is lost.

use std::error::Error as StdError;

/// A boxed engine or I/O error kept as the source of a semantic error.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// `Result` with RockLake's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in RockLake.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A Keystone key is already bound to a row, live or deleted. Nothing was written.
    ///
    /// The caller should choose another key (or, for a deleted row, PURGE it first). On the
    /// PostgreSQL wire this is SQLSTATE `23505`.
    #[error("{message}")]
    AlreadyExists {
        /// The id space, e.g. `table`.
        space: String,
        /// The key that was refused.
        id: u64,
        /// True when the bound row is a deleted one (PURGE would free the key).
        deleted: bool,
        /// The full message, with where the bound row lives.
        message: String,
    },

    /// A value is outside the range it must lie in (a Keystone id outside `[1, 2^48 - 1]`, an
    /// exhausted id space). Nothing was written. SQLSTATE `22003` on the wire.
    #[error("{message}")]
    OutOfRange {
        /// The full message, with the value and the bounds.
        message: String,
    },

    /// The caller passed something malformed (a bad URL, a non-integer key, a row that does not
    /// fit its table). Nothing was written; fix the input. SQLSTATE `22P02` on the wire.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A key that does not decode. Scanners skip unknown tags instead of returning this.
    #[error(transparent)]
    Key(#[from] crate::keys::KeyError),

    /// A stored value that does not decode, or contradicts its key.
    #[error("corrupt value under {key}: {reason}")]
    Corrupt {
        /// The key, rendered as the hex-dump guide reads it (or as hex when it does not decode).
        key: String,
        /// What is wrong with it.
        reason: String,
    },

    /// Something the caller asked for does not exist (an unknown id space, a row id with no row).
    #[error("not found: {0}")]
    NotFound(String),

    /// Another writer opened the catalog after this one: this writer's epoch is no longer
    /// current and everything it commits is refused. Nothing of the refused commit landed.
    /// The caller must stop writing; reopening makes it the current writer again (and fences
    /// the other one).
    #[error("writer fenced: this writer holds epoch {mine} but the catalog's writer epoch is {current}; nothing of this commit landed{detail}")]
    Fenced {
        /// The epoch this writer opened with.
        mine: u64,
        /// The epoch found in the catalog (0 when the engine fenced us without telling which).
        current: u64,
        /// Extra words from the engine, if any (starts with `": "` when not empty).
        detail: String,
    },

    /// A concurrent change got in the way. Nothing was written. When `retryable` the same call
    /// may succeed if tried again later (for example PURGE waiting on an older reader).
    #[error("conflict: {message}")]
    Conflict {
        /// What conflicted with what.
        message: String,
        /// Whether trying again may succeed.
        retryable: bool,
    },

    /// A precondition of an atomic batch did not hold (the key's value was not the expected
    /// one). Nothing of the batch was written. The catalog layer turns this into
    /// [`Error::AlreadyExists`], [`Error::Fenced`] or [`Error::Conflict`].
    #[error("precondition failed on key {key}: the batch was not applied")]
    ConditionFailed {
        /// The rendered key whose precondition failed.
        key: String,
        /// The raw key bytes.
        raw_key: Vec<u8>,
    },

    /// Another process holds the store open (RocksDB's and sled's lock file). Close the other
    /// process, or open read-only where the engine allows it.
    #[error("store at {path} is locked by another process")]
    Locked {
        /// Where the store lives.
        path: String,
        /// The engine's own error.
        #[source]
        source: BoxError,
    },

    /// The store (or this handle to it) was closed. Open it again.
    #[error("store is closed")]
    Closed,

    /// The caller lacks the capability an operation needs (PURGE without the admin
    /// capability, a write on a read-only catalog).
    #[error("permission denied: {0}")]
    PermissionDenied(String),

    /// An engine error that has no closer semantic meaning. The message names the engine.
    #[error("{engine} error: {message}")]
    Engine {
        /// `slatedb`, `rocksdb`, `sled`, `memory`.
        engine: &'static str,
        /// What the engine was doing.
        message: String,
        /// The engine's own error.
        #[source]
        source: Option<BoxError>,
    },

    /// The engine named in a URL is not compiled into this binary.
    #[error("{0}")]
    Unsupported(String),
    /// A view kept for an engine without snapshots (sled's undo overlay) was let go because
    /// the old values it held for the writes made since it was taken passed the bound on all
    /// such views' memory; it can no longer be read. Nothing was written. Begin again for a
    /// newer view. SQLSTATE `72000` (PostgreSQL's `snapshot too old`) on the wire.
    #[error("snapshot too old: {0}")]
    SnapshotTooOld(String),
    /// This writer's lease on its store ran out or was given up (see [`crate::lease`]): it no
    /// longer answers as the store's writer. Nothing was written. Reconnect to whichever
    /// server now holds the store.
    #[error("writer lease lapsed: {0}")]
    LeaseLapsed(String),
    /// A reader bound to lag its store by at most a set time (SlateDB's `max_staleness_ms`)
    /// lags it by more and could not catch up: it answers nothing rather than an older state
    /// than promised. Nothing was read. Try again, or read from the writer. SQLSTATE `57P03`
    /// (PostgreSQL's `cannot_connect_now`, what a standby not ready to serve answers).
    #[error("reader too stale: {0}")]
    Stale(String),
}

impl Error {
    /// Whether trying the same operation again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Conflict {
                retryable: true,
                ..
            }
        )
    }

    /// The SQLSTATE a PostgreSQL-wire server would report for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            Error::AlreadyExists { .. } => "23505",
            Error::OutOfRange { .. } => "22003",
            Error::InvalidArgument(_) => "22P02",
            Error::Conflict { .. } | Error::ConditionFailed { .. } => "40001",
            Error::PermissionDenied(_) => "42501",
            Error::NotFound(_) => "42P01",
            Error::SnapshotTooOld(_) => "72000",
            Error::LeaseLapsed(_) => "57P01",
            Error::Stale(_) => "57P03",
            _ => "XX000",
        }
    }

    /// The kind of error: one fieldless value per variant, for matching and for `--json`
    /// output (it serialises as its name).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            Error::OutOfRange { .. } => ErrorKind::OutOfRange,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::Key(_) => ErrorKind::InvalidKey,
            Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::Fenced { .. } => ErrorKind::Fenced,
            Error::Conflict { .. } => ErrorKind::Conflict,
            Error::ConditionFailed { .. } => ErrorKind::ConditionFailed,
            Error::Locked { .. } => ErrorKind::Locked,
            Error::Closed => ErrorKind::Closed,
            Error::PermissionDenied(_) => ErrorKind::PermissionDenied,
            Error::Engine { .. } => ErrorKind::Engine,
            Error::Unsupported(_) => ErrorKind::Unsupported,
            Error::SnapshotTooOld(_) => ErrorKind::SnapshotTooOld,
            Error::LeaseLapsed(_) => ErrorKind::LeaseLapsed,
            Error::Stale(_) => ErrorKind::Stale,
        }
    }

    /// Build an [`Error::Engine`] keeping the engine's error as the source.
    pub fn engine(
        engine: &'static str,
        message: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Error::Engine {
            engine,
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// Build an [`Error::Corrupt`] for a raw key.
    pub fn corrupt(key: &[u8], reason: impl Into<String>) -> Self {
        Error::Corrupt {
            key: crate::keys::render(key),
            reason: reason.into(),
        }
    }
}

/// What kind of [`Error`] happened, without its details: see [`Error::kind`]. Each kind is
/// named after the variant it stands for ([`ErrorKind::InvalidKey`] for [`Error::Key`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`Error::AlreadyExists`].
    AlreadyExists,
    /// [`Error::OutOfRange`].
    OutOfRange,
    /// [`Error::InvalidArgument`].
    InvalidArgument,
    /// [`Error::Key`].
    InvalidKey,
    /// [`Error::Corrupt`].
    Corrupt,
    /// [`Error::NotFound`].
    NotFound,
    /// [`Error::Fenced`].
    Fenced,
    /// [`Error::Conflict`].
    Conflict,
    /// [`Error::ConditionFailed`].
    ConditionFailed,
    /// [`Error::Locked`].
    Locked,
    /// [`Error::Closed`].
    Closed,
    /// [`Error::PermissionDenied`].
    PermissionDenied,
    /// [`Error::Engine`].
    Engine,
    /// [`Error::Unsupported`].
    Unsupported,
    /// [`Error::SnapshotTooOld`].
    SnapshotTooOld,
    /// [`Error::LeaseLapsed`].
    LeaseLapsed,
    /// [`Error::Stale`].
    Stale,
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}
