//! The `rocklake` command (package `rocklake-cli`): create, inspect, verify and exercise
//! RockLake catalogs.
//!
//! Run without a subcommand it does RockLake's main job on the embedded default: it serves a
//! DuckLake catalog kept in SlateDB on a local folder over the PostgreSQL wire protocol, and
//! prints the ATTACH line to paste into DuckDB. `rocklake conformance` qualifies the engines,
//! `rocklake bench` measures them.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rocklake::{Error, Keyspace};
use serde_json::json;

mod cmd;
mod progress;

/// mimalloc rather than the system's: glibc's malloc and free were about a third of a release
/// build's SlateDB scan (README "Bulk inserts and the allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "rocklake",
    version,
    about = "RockLake: a DuckLake catalog on an embedded key-value store"
)]
struct Cli {
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Open a SlateDB store as writer even while another writer (a running `rocklake serve`)
    /// holds it, fencing that writer on purpose. Without it such an open is refused, naming
    /// the holder.
    #[arg(long, global = true)]
    takeover: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create a catalog (or open an existing one as the new writer).
    Init { url: String },
    /// Engine, format version, writer epoch, retain-from and keys per table.
    Info { url: String },
    /// Decode keys given in hex, as the tag document's hex-dump guide reads them.
    Inspect {
        /// Keys in hex: `05 00 00 00 00 00 00 00 2a ...` (quote it) or `05000000000000002a...`.
        #[arg(required = true)]
        hex: Vec<String>,
    },
    /// List the rows of one table, keys decoded and values decoded as rows.
    Scan {
        url: String,
        /// Table name, e.g. ducklake_table.
        #[arg(long, conflicts_with = "tag")]
        table: Option<String>,
        /// Tag byte, e.g. 0x05.
        #[arg(long)]
        tag: Option<String>,
        /// Show only row versions visible at this snapshot.
        #[arg(long)]
        at: Option<u64>,
        /// Stop after this many rows.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// DESCRIBE: the mark and budget of one id space, or of all.
    Describe { url: String, space: Option<String> },
    /// SHOW BUDGET: key use of every id space with warnings.
    Budget { url: String },
    /// Insert a row into an id space with a named (--id) or issued key.
    Insert {
        url: String,
        /// Id space: table, schema, snapshot, view, ... (see `describe`).
        #[arg(long)]
        space: String,
        /// Name the key; leave out to have the engine issue one.
        #[arg(long)]
        id: Option<String>,
        /// Parent id for child spaces (column, file, delete-file): the table id.
        #[arg(long)]
        parent: Option<u64>,
        /// Column values, `name=value` (repeatable).
        #[arg(long = "set", value_name = "COLUMN=VALUE")]
        set: Vec<String>,
    },
    /// Delete the row bound to a key (the key stays bound until PURGE).
    Delete {
        url: String,
        #[arg(long)]
        space: String,
        #[arg(long)]
        id: String,
    },
    /// PURGE: free the keys of deleted rows in a range. Needs --admin.
    Purge {
        url: String,
        #[arg(long)]
        space: String,
        /// First key of the range.
        #[arg(long)]
        from: String,
        /// Last key of the range (default: --from).
        #[arg(long)]
        to: Option<String>,
        /// Confirm the admin capability PURGE needs.
        #[arg(long)]
        admin: bool,
        /// Who is purging (recorded in the audit log).
        #[arg(long, default_value = "rocklake-cli")]
        actor: String,
    },
    /// Raise the retain-from floor (the oldest snapshot that may still be read).
    RetainFrom { url: String, snapshot: u64 },
    /// Remove row versions that ended at or before retain-from.
    Gc { url: String },
    /// Walk the whole key space and report what does not decode or contradicts itself.
    Verify { url: String },
    /// Run the conformance suite against a store URL and print a pass/fail table.
    Conformance {
        /// Store URL; without one, qualifies every compiled engine on a temporary folder and in memory.
        url: Option<String>,
        /// Kill-and-reopen rounds of the crash check (needs a persistent store).
        #[arg(long, default_value_t = 20)]
        crash_rounds: usize,
        /// Allow clearing a store that already holds data.
        #[arg(long)]
        clear: bool,
    },
    /// Benchmark every compiled engine side by side (against raw engine calls and SQLite).
    Bench {
        /// Engines to run (slatedb, rocksdb, sled, model); default: every compiled one.
        #[arg(long, value_delimiter = ',')]
        engines: Vec<String>,
        /// A short run (seconds per engine) instead of the full one.
        #[arg(long)]
        quick: bool,
        /// Write bench.json, bench.md and SVG charts into this folder.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Workload groups to run (codec, point, scan, batch, keystone, mvcc, catalog,
        /// group-commit, sql); default: all.
        #[arg(long, value_delimiter = ',')]
        groups: Vec<String>,
        /// Also run on stores at this URL, each a subject of its own named by it: a new store
        /// under it for each workload group (`s3://bucket/prefix?simulate_latency_ms=20`
        /// measures a bucket 20 ms away on a local emulator). May be given more than once.
        #[arg(long = "store-url")]
        store_urls: Vec<String>,
        /// Instead of the benchmark: run a fixed number of one `sql` group operation (commit,
        /// read, point or scan) on the in-memory model engine (or on a new store at
        /// `--profile-url`), untimed, for a profiler (see the README's "Benchmarks").
        #[arg(long, conflicts_with_all = ["engines", "quick", "out", "groups", "store_urls"])]
        profile: Option<benches::sql::Operation>,
        /// Where `--profile` sets up its tables: a URL of a store that does not exist yet
        /// (`sled:///tmp/p`, `file:///tmp/p`, ...); default: the in-memory model engine.
        #[arg(long, requires = "profile")]
        profile_url: Option<String>,
        /// How many operations `--profile` runs.
        #[arg(long, default_value_t = 200, requires = "profile",
              value_parser = clap::value_parser!(u32).range(1..))]
        operations: u32,
    },
    /// Copy a whole DuckLake catalog kept in PostgreSQL or in a SQLite file into a RockLake
    /// store without one (a failure removes what it wrote, leaving the store without a
    /// catalog). The source is read as of one snapshot, so it may keep serving meanwhile.
    Import {
        /// The source catalog: PostgreSQL as a libpq string (`host=... dbname=...`), a
        /// `postgresql://` URL or DuckLake's `ducklake:postgres:...` form; or a SQLite file as
        /// `sqlite:PATH`, `ducklake:sqlite:PATH` or a path ending in `.sqlite` or `.db`.
        source: String,
        /// The target store (`file:///path`, `s3://...`, `sled:///path`, `rocksdb:///path`).
        url: String,
        /// The schema that holds the catalog's tables (DuckLake's METADATA_SCHEMA), on both
        /// sides (a SQLite file has none: the store's side).
        #[arg(long, default_value = "public")]
        schema: String,
    },
    /// Copy a RockLake store's DuckLake catalog into a PostgreSQL database or a new SQLite
    /// file, where stock DuckDB attaches it with `ducklake:postgres:` or `ducklake:sqlite:`;
    /// one transaction there (a failure leaves nothing).
    /// The store is read as of one snapshot (a SlateDB store beside its running server).
    Export {
        /// The store to read.
        url: String,
        /// The target PostgreSQL or SQLite file (written as for `import`); its schema (or the
        /// file) must hold none of the catalog's tables.
        target: String,
        /// The schema that holds the catalog's tables, on both sides (a SQLite file has none:
        /// the store's side).
        #[arg(long, default_value = "public")]
        schema: String,
    },
    /// Copy a whole store, as of one snapshot, into a new store of any engine (a folder or
    /// `s3://`), while its server keeps committing. The copy holds every commit acknowledged
    /// before it began and none after; `rocklake restore` brings it back.
    Backup {
        /// The store to back up: its URL (a SlateDB store is read beside its running server),
        /// or the PostgreSQL address of the `rocklake serve` that holds it (`host=... port=...
        /// user=...` or `postgresql://...`), which a sled or RocksDB store being served needs.
        source: String,
        /// The new store to write (`file:///path`, `s3://...`, `sled:///path`,
        /// `rocksdb:///path`); it must be empty.
        dest: String,
    },
    /// Copy a backup (any store) into a new store, for `rocklake serve` to open.
    Restore {
        /// The backup's URL.
        backup: String,
        /// The new store to write; it must be empty.
        url: String,
    },
    /// Run SQL against a catalog without a server (DuckLake's tables are SQL tables); without a
    /// statement, read statements from standard input (an interactive shell on a terminal).
    Sql {
        url: String,
        /// One or more statements; leave out for the shell.
        sql: Option<String>,
        /// Open as a reader: the store's writer (a server on the same SlateDB store) is not
        /// fenced, and writes are refused.
        #[arg(long)]
        read_only: bool,
    },
    /// Serve the catalog over the PostgreSQL wire protocol, for DuckDB's
    /// `ATTACH 'ducklake:postgres:host=... port=...'` (prints the line to paste).
    Serve {
        /// The store: `file:///path` (SlateDB on a local folder), `s3://bucket/prefix`,
        /// `sled:///path`, `rocksdb:///path`.
        url: String,
        /// Address to listen on. Without a password only loopback addresses are allowed.
        #[arg(long, default_value = "127.0.0.1:5433")]
        listen: std::net::SocketAddr,
        /// Read the password clients must give (SCRAM-SHA-256) from this file; else from
        /// the ROCKLAKE_PASSWORD environment variable; else no password (loopback only).
        #[arg(long)]
        password_file: Option<std::path::PathBuf>,
        /// Serve a reader: the store's writer is not fenced, and writes are refused.
        #[arg(long)]
        read_only: bool,
        /// Be one of two or more servers of one SlateDB store (file:// or s3://): serve reads
        /// while another server holds the store, take it over when that writer's lease runs
        /// out (the store URL's lease_ms, 8 s by default), and serve reads again if this one
        /// loses its lease. Starts as the writer when no writer holds the store.
        #[arg(long, conflicts_with = "read_only")]
        standby: bool,
        /// Serve many lakes: URL is a folder (or s3:// prefix) holding one store per
        /// database, URL/NAME, picked by the client's dbname; an unknown name is refused
        /// with SQLSTATE 3D000, as PostgreSQL refuses it. CREATE DATABASE name adds one;
        /// database postgres is made on first start.
        #[arg(long, conflicts_with_all = ["read_only", "standby"])]
        lakes: bool,
        /// The DATA_PATH shown in the printed ATTACH line.
        #[arg(long)]
        data_path: Option<String>,
        /// PEM certificate chain: clients that ask for TLS (sslmode=require) get it.
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<std::path::PathBuf>,
        /// PEM private key of --tls-cert.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<std::path::PathBuf>,
        /// Refuse sessions that do not come through TLS (PostgreSQL's hostssl), with SQLSTATE
        /// 28000; cancel requests still get through.
        #[arg(long, requires = "tls_cert")]
        require_tls: bool,
        /// Sessions open at once (PostgreSQL's max_connections); one more is refused with
        /// SQLSTATE 53300. Cancel requests always get through.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        max_connections: u32,
        /// Seconds a client has from connecting to being logged in (PostgreSQL's
        /// authentication_timeout); then its socket is closed.
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=600))]
        authentication_timeout: u64,
        /// Close a session that leaves a transaction open and sends nothing for this long
        /// (PostgreSQL's idle_in_transaction_session_timeout, in its units: 500ms, 30s,
        /// 10min, 1h; 0 is no limit, the default). Its transaction rolls back. Clients may
        /// set their own.
        #[arg(long, default_value = "0", value_parser = idle_setting("idle_in_transaction_session_timeout"))]
        idle_in_transaction_session_timeout: TimeLimit,
        /// Close a session that sends nothing for this long outside a transaction
        /// (PostgreSQL's idle_session_timeout; 0 is no limit, the default).
        #[arg(long, default_value = "0", value_parser = idle_setting("idle_session_timeout"))]
        idle_session_timeout: TimeLimit,
        /// Memory all sessions' statements may hold at once (result batches until they are
        /// sent, COPY FROM data until it lands, DataFusion's sorts, joins and aggregations),
        /// in PostgreSQL's units (512MB, 2GB); a statement that would pass it fails with
        /// SQLSTATE 53200 and the others go on.
        #[arg(long, default_value = "2GB", value_parser = memory_size)]
        max_memory: usize,
        /// Memory one statement may hold at once, of --max-memory (a quarter of it by
        /// default); past it the statement fails with SQLSTATE 53200 while the other sessions
        /// keep their share. Unlike PostgreSQL's work_mem, which bounds each sort or hash of a
        /// query before it spills, this bounds the whole statement.
        #[arg(long, value_parser = memory_size)]
        work_mem: Option<usize>,
        /// Serve Prometheus metrics on this address (`GET /metrics`), with `/healthz` and
        /// `/readyz`, e.g. 127.0.0.1:9187. Off by default.
        #[arg(long)]
        metrics_listen: Option<std::net::SocketAddr>,
    },
    /// Print the tag registry (as markdown with --markdown).
    Tags {
        #[arg(long)]
        markdown: bool,
    },
    #[command(hide = true)]
    CrashChild { url: String },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    TAKEOVER.store(cli.takeover, std::sync::atomic::Ordering::Relaxed);
    let result = match cli.command {
        None => main_job(json).await,
        Some(c) => run(c, json).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            if json {
                eprintln!(
                    "{}",
                    json!({"error": e.to_string(), "kind": e.kind(), "sqlstate": e.sqlstate()})
                );
            } else {
                eprintln!("ERR {e}");
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    eprintln!("  caused by: {s}");
                    source = s.source();
                }
            }
            ExitCode::from(1)
        }
    }
}

type CliResult = Result<ExitCode, Error>;

/// RockLake's main job on the embedded default: serve a catalog in SlateDB on a local folder
/// (`./rocklake-lake/catalog`, data files beside it in `./rocklake-lake/data/`) on
/// 127.0.0.1:5433, and print the ATTACH line for DuckDB.
async fn main_job(_json: bool) -> CliResult {
    let cwd = std::env::current_dir()
        .map_err(|e| Error::InvalidArgument(format!("no current folder: {e}")))?;
    let root = cwd.join("rocklake-lake");
    let catalog = root.join("catalog");
    std::fs::create_dir_all(&catalog)
        .map_err(|e| Error::InvalidArgument(format!("cannot create {}: {e}", catalog.display())))?;
    cmd::serve::run(cmd::serve::ServeArgs {
        url: format!("file://{}", catalog.display()),
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 5433)),
        password_file: None,
        read_only: false,
        standby: false,
        lakes: false,
        data_path: Some(format!("{}/", root.join("data").display())),
        tls: None,
        require_tls: false,
        max_connections: 100,
        authentication_timeout: std::time::Duration::from_secs(60),
        idle: rocklake_sql::IdleLimits::default(),
        max_memory: DEFAULT_MAX_MEMORY,
        work_mem: DEFAULT_MAX_MEMORY / 4,
        metrics_listen: None,
    })
    .await
}

/// `rocklake serve --max-memory`'s default: 2 GiB.
const DEFAULT_MAX_MEMORY: usize = 2 << 30;

/// A size in PostgreSQL's memory units (`B`, `kB`, `MB`, `GB`, `TB`, each 1024 of the one
/// before; a bare number is bytes), at least 1 MB.
fn memory_size(v: &str) -> Result<usize, String> {
    let t = v.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    let n: usize = number.parse().map_err(|_| {
        format!("invalid memory size {v:?}: expected a number and a unit, as 512MB or 2GB")
    })?;
    let shift = match unit {
        "" | "B" => 0,
        "kB" => 10,
        "MB" => 20,
        "GB" => 30,
        "TB" => 40,
        other => {
            return Err(format!(
                "invalid memory unit {other:?} in {v:?}: valid units are B, kB, MB, GB and TB"
            ))
        }
    };
    let bytes = n
        .checked_mul(1usize << shift)
        .ok_or_else(|| format!("memory size {v:?} is too large"))?;
    if bytes < 1 << 20 {
        return Err(format!("memory size {v:?} is below the minimum of 1MB"));
    }
    Ok(bytes)
}

/// A time limit; `None` is no limit (PostgreSQL's 0).
#[derive(Clone, Copy, Debug)]
struct TimeLimit(Option<std::time::Duration>);

/// A time limit given as PostgreSQL writes its setting `name` (`30s`, `10min`, `0`).
fn idle_setting(name: &'static str) -> impl Fn(&str) -> Result<TimeLimit, String> + Clone {
    move |v: &str| match rocklake_sql::parse_time_setting(name, v) {
        Some(Ok(d)) => Ok(TimeLimit(d)),
        Some(Err(e)) => Err(e.message),
        None => Err(format!("{name} is not a time setting")),
    }
}

fn print(json: bool, value: serde_json::Value, text: impl FnOnce() -> String) {
    if json {
        println!("{value}");
    } else {
        println!("{}", text());
    }
}

/// `--takeover`: writer opens fence a SlateDB store's running writer instead of being refused.
static TAKEOVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Open a store as its writer: refused while another writer holds it, unless `--takeover`.
pub(crate) async fn open_writer(
    url: &str,
) -> Result<std::sync::Arc<dyn rocklake::KvBackend>, Error> {
    if TAKEOVER.load(std::sync::atomic::Ordering::Relaxed) {
        rocklake::open_takeover(url).await
    } else {
        rocklake::open(url).await
    }
}

async fn writer(url: &str) -> Result<Keyspace, Error> {
    Keyspace::open(open_writer(url).await?).await
}

async fn reader(url: &str) -> Result<Keyspace, Error> {
    Keyspace::open_read_only(open_for_reading(url).await?).await
}

/// The local folder a `file://`, `sled://` or `rocksdb://` URL names; `None` for a store
/// elsewhere (`s3://`, `memory://`, `model://`).
pub(crate) fn local_folder(url: &str) -> Result<Option<std::path::PathBuf>, Error> {
    Ok(match rocklake::engine_of(url)? {
        "sled" | "rocksdb" => Some(rocklake::local_path(url)?),
        "slatedb" if url.starts_with("file://") => {
            rocklake::local_path(url.split(['?', '#']).next().unwrap_or(url)).ok()
        }
        _ => None,
    })
}

/// Refuse the URL of a command that only reads when it names a folder that does not exist:
/// opening it would create an empty store there and report on that instead of the store
/// the user meant. (An engine this binary lacks is left to the open, which names the
/// feature.)
pub(crate) fn require_store(url: &str) -> Result<(), Error> {
    if !rocklake::engines().contains(&rocklake::engine_of(url)?) {
        return Ok(());
    }
    match local_folder(url)? {
        Some(path) if !path.exists() => Err(Error::NotFound(format!(
            "no store at {url}: the folder {} does not exist (`rocklake init {url}` creates one)",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// A store opened for reading only. SlateDB stores are opened as a reader beside their writer
/// (a running `rocklake serve` is not fenced); RocksDB and sled, which lock their folder,
/// are opened alone, as before (a running writer makes that fail on the lock, saying so).
pub(crate) async fn open_for_reading(
    url: &str,
) -> Result<std::sync::Arc<dyn rocklake::KvBackend>, Error> {
    require_store(url)?;
    if url.starts_with("file://") || url.starts_with("s3://") {
        rocklake::open_reader(url).await
    } else {
        open_writer(url).await
    }
}
async fn run(command: Command, json: bool) -> CliResult {
    match command {
        Command::Init { url } => cmd::init::run(url, json).await,
        Command::Info { url } => cmd::info::run(url, json).await,
        Command::Inspect { hex } => cmd::inspect::run(hex, json).await,
        Command::Scan {
            url,
            table,
            tag,
            at,
            limit,
        } => cmd::scan::run(url, table, tag, at, limit, json).await,
        Command::Describe { url, space } => cmd::describe::run(url, space, json).await,
        Command::Budget { url } => cmd::budget::run(url, json).await,
        Command::Insert {
            url,
            space,
            id,
            parent,
            set,
        } => cmd::insert::run(url, space, id, parent, set, json).await,
        Command::Delete { url, space, id } => cmd::delete::run(url, space, id, json).await,
        Command::Purge {
            url,
            space,
            from,
            to,
            admin,
            actor,
        } => cmd::purge::run(url, space, from, to, admin, actor, json).await,
        Command::RetainFrom { url, snapshot } => cmd::retain_from::run(url, snapshot, json).await,
        Command::Gc { url } => cmd::gc::run(url, json).await,
        Command::Verify { url } => cmd::verify::run(url, json).await,
        Command::Conformance {
            url,
            crash_rounds,
            clear,
        } => cmd::conformance::run(url, crash_rounds, clear, json).await,
        Command::Bench {
            profile: Some(op),
            operations,
            profile_url,
            ..
        } => cmd::bench::profile(op, operations as usize, profile_url).await,
        Command::Bench {
            engines,
            quick,
            out,
            groups,
            store_urls,
            profile: None,
            ..
        } => cmd::bench::run(engines, store_urls, groups, quick, out, json).await,
        Command::Sql {
            url,
            sql,
            read_only,
        } => cmd::sql::run(url, sql, read_only, json).await,
        Command::Import {
            source,
            url,
            schema,
        } => cmd::import::run(source, url, schema, json).await,
        Command::Export {
            url,
            target,
            schema,
        } => cmd::export::run(url, target, schema, json).await,
        Command::Backup { source, dest } => cmd::backup::backup(source, dest, json).await,
        Command::Restore { backup, url } => cmd::backup::restore(backup, url, json).await,
        Command::Serve {
            url,
            listen,
            password_file,
            read_only,
            standby,
            lakes,
            data_path,
            tls_cert,
            tls_key,
            require_tls,
            max_connections,
            authentication_timeout,
            idle_in_transaction_session_timeout,
            idle_session_timeout,
            max_memory,
            work_mem,
            metrics_listen,
        } => {
            cmd::serve::run(cmd::serve::ServeArgs {
                url,
                listen,
                password_file,
                read_only,
                standby,
                lakes,
                data_path,
                tls: tls_cert.zip(tls_key),
                require_tls,
                max_connections: max_connections as usize,
                authentication_timeout: std::time::Duration::from_secs(authentication_timeout),
                idle: rocklake_sql::IdleLimits {
                    in_transaction: idle_in_transaction_session_timeout.0,
                    session: idle_session_timeout.0,
                },
                max_memory,
                work_mem: work_mem.unwrap_or(max_memory / 4),
                metrics_listen,
            })
            .await
        }
        Command::Tags { markdown } => cmd::tags::run(markdown, json).await,
        Command::CrashChild { url } => cmd::conformance::crash_child(&url).await,
    }
}
