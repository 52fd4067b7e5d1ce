//! `rocklake serve --lakes URL`: many lakes, one server. URL is a folder (or an `s3://`
//! prefix) that holds one store per database, each in the folder of its name
//! (`URL/NAME`); a client's `dbname` picks one, as a PostgreSQL server's databases are
//! picked, and an unknown name is refused with `3D000` once the client is authenticated.
//! `CREATE DATABASE name` makes a new store there. Each lake is a store of its own (its own
//! keys, commits, writer lease and tools: `rocklake verify URL/NAME` works on one), so
//! nothing of one can reach another. The maintenance database `postgres` is made on first
//! start, as `initdb` makes it, so that a client has somewhere to run `CREATE DATABASE`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};

use rocklake::{Error, Keyspace};
use rocklake_sql::datafusion::execution::memory_pool::MemoryPool;
use rocklake_sql::error::state;
use rocklake_sql::{Database, Databases, SqlError};

use super::ServeArgs;

/// The database a new server of lakes makes, as `initdb` makes PostgreSQL's.
pub(super) const MAINTENANCE: &str = "postgres";

/// The lakes under one URL, each open as its writer.
pub(super) struct Lakes {
    /// The URL without its query (`file:///srv/lakes`), and the query every lake's URL
    /// carries (`?lease_ms=4000`, or empty).
    base: String,
    query: String,
    open: RwLock<BTreeMap<String, Arc<Database>>>,
    generation: AtomicU64,
    /// Held while a database is made, so two `CREATE DATABASE` of one name do not race.
    creating: tokio::sync::Mutex<()>,
    /// The memory bound all lakes' statements share (set by the first lake opened).
    pool: std::sync::Mutex<Option<Arc<dyn MemoryPool>>>,
    max_memory: usize,
    work_mem: usize,
    me: Weak<Lakes>,
}

impl std::fmt::Debug for Lakes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lakes")
            .field("base", &self.base)
            .field("names", &self.names())
            .finish()
    }
}

impl Lakes {
    /// Open every lake under `args.url` (making the maintenance database if there is none).
    pub(super) async fn open(args: &ServeArgs) -> Result<Arc<Lakes>, Error> {
        let (base, query) = match args.url.split_once('?') {
            Some((b, q)) => (b.to_string(), format!("?{q}")),
            None => (args.url.clone(), String::new()),
        };
        let base = base.trim_end_matches('/').to_string();
        if base.starts_with("memory://") || base.starts_with("model://") {
            return Err(Error::InvalidArgument(format!(
                "--lakes keeps each database in a folder of its own under the URL: give a \
                 file://, s3://, sled:// or rocksdb:// folder, not {:?}",
                args.url
            )));
        }
        let lakes = Arc::new_cyclic(|me| Lakes {
            base,
            query,
            open: RwLock::new(BTreeMap::new()),
            generation: AtomicU64::new(0),
            creating: tokio::sync::Mutex::new(()),
            pool: std::sync::Mutex::new(None),
            max_memory: args.max_memory,
            work_mem: args.work_mem,
            me: me.clone(),
        });
        let (is_store, names) = lakes.stores().await?;
        if is_store {
            return Err(Error::InvalidArgument(format!(
                "--lakes {}: this URL is a store itself; give the folder that is to hold one \
                 store per database (serve this one without --lakes)",
                args.url
            )));
        }
        for name in &names {
            if valid_name(name).is_ok() {
                let db = lakes.open_lake(name).await?;
                lakes.add(name, db);
            } else {
                tracing::warn!(folder = %name, "not served: not a database name RockLake gives");
            }
        }
        if lakes.get(MAINTENANCE).is_none() {
            lakes.create(MAINTENANCE).await.map_err(|e| {
                Error::InvalidArgument(format!(
                    "making database {MAINTENANCE} under {}: {}",
                    args.url, e.message
                ))
            })?;
        }
        Ok(lakes)
    }

    /// Close every lake (flushing its store).
    pub(super) async fn close(&self) -> Result<(), Error> {
        let all: Vec<_> =
            std::mem::take(&mut *self.open.write().unwrap_or_else(|e| e.into_inner()))
                .into_iter()
                .collect();
        let mut first_error = None;
        for (name, db) in all {
            if let Err(e) = db.close().await {
                tracing::warn!(database = %name, error = %e, "closing");
                first_error.get_or_insert(Error::InvalidArgument(format!("closing {name}: {e}")));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn url_of(&self, name: &str) -> String {
        format!("{}/{name}{}", self.base, self.query)
    }

    /// The local folder of the URL (`file://`, `sled://`, `rocksdb://`).
    fn folder(&self) -> Result<Option<PathBuf>, Error> {
        crate::local_folder(&self.base)
    }

    /// Whether the URL is a store itself, and the names of the stores under it.
    async fn stores(&self) -> Result<(bool, Vec<String>), Error> {
        match rocklake::engine_of(&self.base)? {
            "slatedb" => {
                #[cfg(feature = "slatedb")]
                {
                    rocklake::rocklake_slatedb::stores_under(&format!(
                        "{}{}",
                        self.base, self.query
                    ))
                    .await
                }
                #[cfg(not(feature = "slatedb"))]
                {
                    Err(Error::Unsupported(format!(
                        "{}: this binary was built without SlateDB",
                        self.base
                    )))
                }
            }
            engine => {
                let Some(folder) = self.folder()? else {
                    return Err(Error::InvalidArgument(format!(
                        "--lakes needs a folder, not {}",
                        self.base
                    )));
                };
                // What each engine writes first into its folder.
                let marker = if engine == "sled" { "conf" } else { "CURRENT" };
                std::fs::create_dir_all(&folder).map_err(|e| {
                    Error::InvalidArgument(format!("making folder {}: {e}", folder.display()))
                })?;
                let mut names = Vec::new();
                let entries = std::fs::read_dir(&folder).map_err(|e| {
                    Error::InvalidArgument(format!("reading folder {}: {e}", folder.display()))
                })?;
                for entry in entries.flatten() {
                    if entry.path().join(marker).exists() {
                        names.push(entry.file_name().to_string_lossy().into_owned());
                    }
                }
                names.sort();
                Ok((folder.join(marker).exists(), names))
            }
        }
    }

    /// Open (making it if new) the store of database `name`, as a database of this server.
    async fn open_lake(&self, name: &str) -> Result<Arc<Database>, Error> {
        let url = self.url_of(name);
        let ks = Keyspace::open(crate::open_writer(&url).await?).await?;
        let db = Database::open(ks)
            .await
            .map_err(|e| Error::InvalidArgument(format!("{url}: {e}")))?;
        {
            let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
            match pool.as_ref() {
                Some(p) => db.share_memory_pool(p.clone()),
                None => {
                    db.limit_memory(self.max_memory);
                    *pool = Some(db.memory_pool());
                }
            }
        }
        db.limit_statement_memory(self.work_mem);
        let me: Weak<dyn Databases> = self.me.clone();
        db.serve_among(me);
        tracing::info!(database = %name, %url, "serving");
        Ok(db)
    }

    fn add(&self, name: &str, db: Arc<Database>) {
        self.open
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), db);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

#[async_trait::async_trait]
impl Databases for Lakes {
    fn names(&self) -> Vec<String> {
        self.open
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    fn get(&self, name: &str) -> Option<Arc<Database>> {
        self.open
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    async fn create(&self, name: &str) -> rocklake_sql::Result<()> {
        valid_name(name)?;
        let _one_at_a_time = self.creating.lock().await;
        let exists = || {
            SqlError::new(
                state::DUPLICATE_DATABASE,
                format!("database \"{name}\" already exists"),
            )
        };
        if self.get(name).is_some() {
            return Err(exists());
        }
        let failed = |e: &dyn std::fmt::Display| {
            SqlError::new(
                state::INTERNAL,
                format!("could not create database \"{name}\": {e}"),
            )
        };
        // A store already there (made by another server, or left by one that failed) is not
        // taken over as new.
        let (_, present) = self.stores().await.map_err(|e| failed(&e))?;
        if present.iter().any(|n| n == name) {
            return Err(exists());
        }
        let folder = self.folder().map_err(|e| failed(&e))?.map(|f| f.join(name));
        let made_folder = match &folder {
            Some(f) if !f.exists() => {
                std::fs::create_dir(f).map_err(|e| failed(&e))?;
                true
            }
            _ => false,
        };
        match self.open_lake(name).await {
            Ok(db) => {
                self.add(name, db);
                Ok(())
            }
            Err(e) => {
                // Nothing half-made is left to be served as a database at the next start.
                if let (true, Some(f)) = (made_folder, &folder) {
                    let _ = std::fs::remove_dir_all(f);
                }
                Err(failed(&e))
            }
        }
    }
}

/// The names a database may have here: each is a folder's (or a prefix's) name, so lower-case
/// letters, digits, `_` and `-` only, starting with a letter or `_`, at most 63 bytes
/// (PostgreSQL's `NAMEDATALEN - 1`); no two names differ only in case, even on a
/// filesystem that ignores it.
fn valid_name(name: &str) -> rocklake_sql::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(SqlError::new(
            state::INVALID_NAME,
            format!(
                "database name \"{name}\" is not one RockLake can give: each database is a \
                 folder of its name, so it takes lower-case letters, digits, _ and - (starting \
                 with a letter or _, at most 63 bytes)"
            ),
        ))
    }
}
