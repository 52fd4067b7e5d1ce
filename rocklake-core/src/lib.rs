//! `rocklake-core`: RockLake's key space and its rules, behind the [`KvBackend`] trait.
//!
//! | module | what it holds |
//! |---|---|
//! | [`tags`] | the tag registry: which first byte names which table |
//! | [`keys`] | typed, fixed-width big-endian key codecs and the hex-dump rendering |
//! | [`values`] | the versioned row envelope (protobuf via `prost`), bindings, audit entries |
//! | [`mvcc`] | version visibility and what GC may drop |
//! | [`backend`] | the [`KvBackend`] trait the key space is written against, with its contract |
//! | [`engine`] | the [`engine::Engine`] trait engine crates implement, and the one [`KvBackend`] over it: preconditions, group commit, close |
//! | [`overlay`] | point-in-time views for an engine without snapshots |
//! | [`memory`] | the in-memory reference engine (model and template) |
//! | [`blocking`] | how engines with a blocking API run their calls (inline or off the runtime) |
//! | [`keyspace`] | [`Keyspace`]: a store opened for RockLake; open and close, writer epoch and fencing, issuing ids |
//! | [`group_commit`] | commits that arrive together share one durability barrier |
//! | [`txn`] | transactions: a read view plus a write set, one atomic batch |
//! | [`reader`] | readers at one snapshot: a view plus the MVCC filter |
//! | [`maintenance`] | retain-from, PURGE and GC |
//! | [`info`] | engine, format, epoch, floor and keys per table |
//! | [`keystone`] | id spaces, marks and reservations, the identity rules of rows (ids agree with keys, duplicates), DESCRIBE and SHOW BUDGET |
//! | [`verify`] | a walk of the whole key space that reports what does not decode or contradicts itself |
//!
//! This crate depends on no engine: engines live in `rocklake-slatedb`, `rocklake-rocksdb` and
//! `rocklake-sled`.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod backend;
pub mod blocking;
pub mod copy;
pub mod engine;
pub mod error;
pub mod group_commit;
pub mod info;
pub mod keys;
pub mod keyspace;
pub mod keystone;
pub mod lease;
pub mod maintenance;
pub mod memory;
pub mod mvcc;
pub mod overlay;
pub mod reader;
pub mod tags;
pub mod txn;
pub mod values;
pub mod verify;

pub use backend::{
    Capabilities, Durability, EngineStat, KeyRange, KvBackend, KvPair, Order, Pager, ReadView,
    ReadViewExt, StatValue, WriteBatch,
};
pub use copy::{copy_view, CopyReport, StoreCopy, COPY_BATCH_BYTES};
pub use engine::{Engine, EngineBackend};
pub use error::{Error, ErrorKind, Result};
pub use keys::Key;
pub use keyspace::{CommitStats, Keyspace, KeyspaceOptions, ViewMark};
pub use keystone::IdSpace;
pub use maintenance::{Admin, PurgeReport};
pub use memory::{MemoryBackend, MemoryEngine};
pub use reader::Reader;
pub use tags::Tag;
pub use txn::{KeyChoice, Transaction};
pub use values::{Row, RowView, Value};
