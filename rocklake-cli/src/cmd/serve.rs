//! `rocklake serve`: a PostgreSQL-wire server over a catalog, for DuckDB's
//! `ATTACH 'ducklake:postgres:...'`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use rocklake::{Error, Keyspace};
use rocklake_server::{Server, ServerOptions};
use rocklake_sql::Database;

use crate::CliResult;

mod lakes;
mod standby;

/// What `rocklake serve` was asked for.
pub(crate) struct ServeArgs {
    pub(crate) url: String,
    pub(crate) listen: SocketAddr,
    pub(crate) password_file: Option<std::path::PathBuf>,
    pub(crate) read_only: bool,
    /// Serve reads while another server holds the store; take it over when that writer's lease
    /// runs out (SlateDB stores only).
    pub(crate) standby: bool,
    /// The URL holds one store per database (`URL/NAME`), picked by the client's dbname.
    pub(crate) lakes: bool,
    pub(crate) data_path: Option<String>,
    /// Certificate and key files (PEM) for TLS.
    pub(crate) tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    pub(crate) require_tls: bool,
    pub(crate) max_connections: usize,
    pub(crate) authentication_timeout: Duration,
    pub(crate) idle: rocklake_sql::IdleLimits,
    /// Bytes all sessions' statements may hold at once.
    pub(crate) max_memory: usize,
    /// Bytes one statement may hold at once.
    pub(crate) work_mem: usize,
    /// Where to serve Prometheus metrics, `/healthz` and `/readyz`.
    pub(crate) metrics_listen: Option<SocketAddr>,
}

pub(crate) async fn run(args: ServeArgs) -> CliResult {
    init_logging();
    if args.work_mem > args.max_memory {
        return Err(Error::InvalidArgument(format!(
            "--work-mem {} is more than --max-memory {}: one statement cannot hold more than \
             all of them together",
            show_size(args.work_mem),
            show_size(args.max_memory)
        )));
    }
    let password = match (&args.password_file, std::env::var("ROCKLAKE_PASSWORD")) {
        (Some(f), _) => {
            let p = std::fs::read_to_string(f).map_err(|e| {
                Error::InvalidArgument(format!("cannot read --password-file {}: {e}", f.display()))
            })?;
            let p = p.trim_end_matches(['\r', '\n']);
            // An empty password would let anyone in while lifting the loopback-only rule.
            if p.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "--password-file {} is empty: write the password clients must give into it",
                    f.display()
                )));
            }
            Some(p.to_string())
        }
        (None, Ok(p)) if !p.is_empty() => Some(p),
        _ => None,
    };
    if args.standby && !(args.url.starts_with("file://") || args.url.starts_with("s3://")) {
        return Err(Error::InvalidArgument(format!(
            "--standby needs a store another server can hand over (SlateDB on file:// or s3://), \
             not {:?}",
            args.url
        )));
    }
    // A standby starts as the writer when no writer holds the store, else as a reader.
    let start_reading = args.read_only || (args.standby && standby::held(&args.url).await?);
    // --read-only serves a reader beside the store's writer (on SlateDB it never fences it).
    let served = if args.lakes {
        Served::Lakes(lakes::Lakes::open(&args).await?)
    } else {
        Served::One(open_database(&args, start_reading, false).await?)
    };
    let tls = match &args.tls {
        Some((cert, key)) => Some(
            rocklake_server::tls_config(cert, key)
                .map_err(|e| Error::InvalidArgument(e.to_string()))?,
        ),
        None => None,
    };
    let options = ServerOptions {
        tls,
        require_tls: args.require_tls,
        listen: args.listen,
        password: password.clone(),
        read_only: start_reading,
        grace: Duration::from_secs(5),
        max_connections: args.max_connections,
        authentication_timeout: args.authentication_timeout,
        idle: args.idle,
    };
    let shutdown = shutdown_signal();
    let bound = match &served {
        Served::One(db) => Server::bind(db.clone(), options).await,
        Served::Lakes(lakes) => Server::bind_databases(lakes.clone(), options).await,
    };
    let mut server = bound.map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let addr = server.local_addr();
    // Bound before the ATTACH line is printed, so a taken port fails the start.
    let metrics = match args.metrics_listen {
        Some(at) => {
            let listener = tokio::net::TcpListener::bind(at).await.map_err(|e| {
                Error::InvalidArgument(format!("cannot listen for metrics on {at}: {e}"))
            })?;
            let at = listener.local_addr().unwrap_or(at);
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            tokio::spawn(rocklake_server::metrics::serve_http(
                listener,
                server.metrics(),
                async move {
                    let _ = stopped.await;
                },
            ));
            Some((at, stop))
        }
        None => None,
    };
    let auth = if password.is_some() {
        " password=<ROCKLAKE_PASSWORD>"
    } else {
        ""
    };
    let data = args.data_path.as_deref().unwrap_or("lake_data/");
    println!(
        "rocklake serve: {} on {addr}{}",
        args.url,
        match (args.standby, start_reading) {
            (true, true) => " (standby: serving reads until the writer's lease runs out)",
            (true, false) => " (writer; serving reads as a standby if it loses its lease)",
            (false, true) => " (read-only)",
            (false, false) => "",
        }
    );
    // The lake the ATTACH line names: `lake`, or on a server of lakes the first one there.
    let lake = match &served {
        Served::One(_) => "lake".to_string(),
        Served::Lakes(lakes) => {
            let names = rocklake_sql::Databases::names(lakes.as_ref());
            println!(
                "One database per folder under the URL: {} (CREATE DATABASE name, connected \
                 to dbname={}, makes another)",
                names.join(", "),
                lakes::MAINTENANCE
            );
            names
                .into_iter()
                .find(|n| n != lakes::MAINTENANCE)
                .unwrap_or_else(|| lakes::MAINTENANCE.to_string())
        }
    };
    println!("Paste into DuckDB 1.5 (after INSTALL ducklake; INSTALL postgres; once):");
    println!(
        "  ATTACH 'ducklake:postgres:host={} port={} dbname={lake} user=duck{auth}' AS lake (DATA_PATH '{data}');",
        addr.ip(),
        addr.port()
    );
    if args.standby {
        println!(
            "  With a standby on another host, list both and ask for the writer: \
             host=HOST1,HOST2 port=PORT1,PORT2 target_session_attrs=read-write"
        );
    }
    if let Some((at, _)) = &metrics {
        println!("Metrics: http://{at}/metrics (and /healthz, /readyz)");
    }
    println!("Stop with Ctrl-C (or SIGTERM): open transactions roll back, the store is flushed.");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let served = match served {
        Served::One(db) if args.standby => {
            Served::One(standby::serve(&mut server, &args, db, start_reading, shutdown).await?)
        }
        served => {
            server
                .run(shutdown)
                .await
                .map_err(|e| Error::InvalidArgument(format!("server failed: {e}")))?;
            served
        }
    };
    // /readyz said 503 from the moment the server stopped accepting; the listener ends now.
    drop(metrics);
    match served {
        Served::One(db) => db
            .close()
            .await
            .map_err(|e| Error::InvalidArgument(e.to_string()))?,
        Served::Lakes(lakes) => lakes.close().await?,
    }
    tracing::info!("store closed");
    Ok(ExitCode::SUCCESS)
}

/// What the server serves: one store's catalog, or the lakes under a URL.
enum Served {
    One(std::sync::Arc<Database>),
    Lakes(std::sync::Arc<lakes::Lakes>),
}

/// The store's catalog as the server serves it: a reader, or the writer (with `takeover`, one
/// that fences whichever writer holds the store).
async fn open_database(
    args: &ServeArgs,
    reading: bool,
    takeover: bool,
) -> Result<std::sync::Arc<Database>, Error> {
    let ks = if reading {
        Keyspace::open_read_only(crate::open_for_reading(&args.url).await?).await?
    } else if takeover {
        Keyspace::open(standby::takeover_backend(&args.url).await?).await?
    } else {
        // Only a standby's writer steps down when its lease runs out: a lone server has no
        // one to hand the store to.
        let options = rocklake::KeyspaceOptions {
            steps_down_on_lapse: args.standby,
            ..rocklake::KeyspaceOptions::default()
        };
        Keyspace::open_with(crate::open_writer(&args.url).await?, options).await?
    };
    let db = Database::open(ks)
        .await
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    db.limit_memory(args.max_memory);
    db.limit_statement_memory(args.work_mem);
    Ok(db)
}

/// Ctrl-C or SIGTERM, listened for from the moment this is called: it is called before the
/// server binds and prints its ATTACH line, so a signal sent right after that line is not
/// met by the default handler (which would end the process without closing the store).
#[cfg(unix)]
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let interrupt = signal(SignalKind::interrupt());
    async move {
        match (term, interrupt) {
            (Ok(mut term), Ok(mut interrupt)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = interrupt.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

/// Ctrl-C.
#[cfg(not(unix))]
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Logs to stderr: `info` by default, `RUST_LOG` to change it (`RUST_LOG=rocklake_server=debug`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// `bytes` in the largest of PostgreSQL's memory units that shows it whole (`2GB`, `1536MB`).
fn show_size(bytes: usize) -> String {
    let (shift, unit) = [(40, "TB"), (30, "GB"), (20, "MB"), (10, "kB"), (0, "B")]
        .into_iter()
        .find(|(shift, _)| bytes.is_multiple_of(1usize << shift))
        .unwrap_or((0, "B"));
    format!("{}{unit}", bytes >> shift)
}
