//! DuckLake's catalog as SQL tables over `rocklake-core`, with Apache DataFusion as the SQL
//! engine.
//!
//! A [`Database`] opens on a [`rocklake_core::Keyspace`]; each [`Session`] runs SQL text
//! against it with PostgreSQL's rules for transactions, primary keys and errors (every error
//! carries its SQLSTATE). DuckLake's 28 catalog tables, created by DuckLake's own `CREATE
//! TABLE`s, store their rows under the tag registry's tags and key layouts, so `rocklake
//! inspect` and `scan` decode them; every other table (DuckLake's inlined-data tables, a
//! client's own tables) has a layout of its own (see [`relation`]).
//!
//! ```no_run
//! # async fn demo() -> rocklake_sql::Result<()> {
//! let backend = rocklake_core::MemoryBackend::default();
//! let keyspace = rocklake_core::Keyspace::open(std::sync::Arc::new(backend)).await?;
//! let db = rocklake_sql::Database::open(keyspace).await?;
//! let mut s = rocklake_sql::Session::new(db);
//! s.run("CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR)").await?;
//! s.run("INSERT INTO t VALUES (1, 'a'), (2, 'b')").await?;
//! let out = s.run("SELECT name FROM t WHERE id = 2").await?;
//! assert_eq!(out.row_count(), 1);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The modules in layers, lowest first: a module uses modules of its own group or of groups
// listed before it, never after, and no two modules use each other (`tests/layers.rs` holds
// to both).

// Values: errors, timing, memory bounds, column types and PostgreSQL's names for them;
// parsing SQL texts.
pub mod error;
pub mod memory;
pub mod parse;
pub mod pg_types;
pub mod phases;
pub mod temporal;
pub mod types;

// Table definitions and the catalog of them.
pub mod catalog;
pub mod relation;

// Stored rows: the database, its transactions and their table locks.
pub mod db;
pub mod locks;
pub mod scan;
pub mod txn;

// What DataFusion plans over: table providers, `pg_catalog`, PostgreSQL's functions, and
// what stops a running plan.
mod functions;
mod infinite;
pub mod interrupt;
pub mod pg_catalog;
pub mod provider;
pub mod store_pairs;

// Statements: rewrites, result column names, COPY formats, the direct path, the session.
mod colnames;
pub mod copy;
pub mod direct;
pub mod origins;
mod rewrite;
pub mod session;

pub use copy::CopyFormat;
pub use datafusion;
pub use db::{Database, Databases};
pub use direct::DirectMode;
pub use error::{Result, SqlError};
pub use phases::{Phase, PhaseSnapshot};
pub use session::{parse_time_setting, Clock, Held, IdleLimits, Output, Piece, Session, Status};
