//! One module per subcommand; `main.rs` parses the command line and dispatches here.

pub(crate) mod backup;
pub(crate) mod bench;
pub(crate) mod budget;
pub(crate) mod catalog_copy;
pub(crate) mod conformance;
pub(crate) mod delete;
pub(crate) mod describe;
pub(crate) mod export;
pub(crate) mod gc;
pub(crate) mod import;
pub(crate) mod info;
pub(crate) mod init;
pub(crate) mod insert;
pub(crate) mod inspect;
pub(crate) mod purge;
pub(crate) mod retain_from;
pub(crate) mod scan;
pub(crate) mod serve;
pub(crate) mod sql;
pub(crate) mod sqlite_catalog;
pub(crate) mod tags;
pub(crate) mod verify;
