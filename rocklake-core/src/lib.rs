//! `rocklake-core`: RockLake's key space and its rules, behind the [`KvBackend`] trait.
//!
//! | module | what it holds |
//! |---|---|
//! | [`tags`] | the tag registry: which first byte names which table |
//! | [`keys`] | typed, fixed-width big-endian key codecs and the hex-dump rendering |
//! | [`values`] | the versioned row envelope (protobuf via `prost`), bindings, audit entries |
//! | [`mvcc`] | version visibility and what GC may drop |
//! | [`backend`] | the [`KvBackend`] trait engines implement, with its contract |
//! | [`memory`] | the in-memory reference backend (model and template) |
//! | [`catalog`] | writer epoch and fencing, readers, PURGE, GC |
//! | [`txn`] | transactions: a read view plus a write set, one atomic batch |
//! | [`keystone`] | id spaces, marks, issued and named keys, DESCRIBE and SHOW BUDGET |
//! | [`verify`] | a walk of the whole key space that reports what does not decode or contradicts itself |
//!
//! This crate depends on no engine: engines live in `rocklake-slatedb`, `rocklake-rocksdb` and
//! `rocklake-sled`.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod backend;
pub mod catalog;
pub mod error;
pub mod keys;
pub mod keystone;
pub mod memory;
pub mod mvcc;
pub mod tags;
pub mod txn;
pub mod values;
pub mod verify;

pub use backend::{
    Capabilities, Durability, KeyRange, KvBackend, KvPair, Order, Pager, ReadView, ReadViewExt,
    WriteBatch,
};
pub use catalog::{Admin, Catalog, CatalogOptions, Reader};
pub use error::{Error, ErrorKind, Result};
pub use keys::Key;
pub use keystone::IdSpace;
pub use memory::MemoryBackend;
pub use tags::Tag;
pub use txn::{KeyChoice, Transaction};
pub use values::{Row, RowView, Value};
