//! `rocklake serve`: the PostgreSQL wire protocol over RockLake's SQL layer, so that stock
//! DuckDB attaches to a RockLake catalog with
//! `ATTACH 'ducklake:postgres:host=127.0.0.1 port=5433 dbname=lake' AS lake`.
//!
//! The protocol itself (startup, SCRAM, message framing, extended query, cancel) is the
//! `pgwire` crate's; this crate answers it from one [`rocklake_sql::Session`] per
//! connection: simple queries with several statements, Parse/Describe of a query without
//! running it, `COPY (query) TO STDOUT` in binary and text, `COPY ... FROM STDIN` in binary,
//! ReadyForQuery with the session's transaction status and errors with their SQLSTATE.
//! Every connection's commits go through the one [`rocklake_sql::Database`] and so share the
//! core's group commit.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pgwire::api::{ConnectionManager, RandomPidSecretKeyGenerator};
use pgwire::tokio::tokio_rustls::{self, rustls};
use rocklake_sql::Database;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

mod auth;
mod handler;
mod relay;
pub mod wire;

pub use auth::PasswordSource;

/// How a server listens and whom it lets in.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Where to listen (`127.0.0.1:5433` by default).
    pub listen: SocketAddr,
    /// The password clients must present by SCRAM-SHA-256; `None` lets any client in
    /// without one, which is allowed only on a loopback address.
    pub password: Option<String>,
    /// Tell clients the server is read-only (`default_transaction_read_only`); set it when
    /// the database was opened on a read-only keyspace.
    pub read_only: bool,
    /// How long open connections get to finish when the server stops, before their open
    /// transactions are rolled back.
    pub grace: Duration,
    /// TLS for clients that ask for it (`sslmode=require`); `None` answers their SSLRequest
    /// with `N`. See [`tls_config`].
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 5433)),
            password: None,
            read_only: false,
            grace: Duration::from_secs(5),
            tls: None,
        }
    }
}

/// A TLS configuration from a PEM certificate chain and a PEM private key.
pub fn tls_config(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<Arc<rustls::ServerConfig>, ServerError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: &std::path::Path, e: &dyn std::fmt::Display| {
        ServerError::Tls(format!("{}: {e}", what.display()))
    };
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad(cert, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(cert, &e))?;
    if certs.is_empty() {
        return Err(bad(cert, &"no certificate in the file"));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(key, &e))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| ServerError::Tls(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(certs, key_der)
    .map_err(|e| ServerError::Tls(format!("{} and {}: {e}", cert.display(), key.display())))?;
    Ok(Arc::new(config))
}

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Listening without a password anywhere but on loopback.
    #[error(
        "refusing to listen on {0} without a password: set ROCKLAKE_PASSWORD (or \
         --password-file) or listen on 127.0.0.1"
    )]
    TrustOffLoopback(SocketAddr),
    /// The certificate or key could not be used.
    #[error("TLS: {0}")]
    Tls(String),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// What the server shares across its connections.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    connections: AtomicU64,
}

/// A bound server, ready to [`run`](Server::run).
pub struct Server {
    listener: TcpListener,
    db: Arc<Database>,
    options: ServerOptions,
    password: Option<Arc<PasswordSource>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listen", &self.listener.local_addr().ok())
            .finish()
    }
}

impl Server {
    /// Bind `options.listen` (port 0 picks a free one) for `db`.
    pub async fn bind(db: Arc<Database>, options: ServerOptions) -> Result<Server, ServerError> {
        if options.password.is_none() && !options.listen.ip().is_loopback() {
            return Err(ServerError::TrustOffLoopback(options.listen));
        }
        let listener =
            TcpListener::bind(options.listen)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: options.listen,
                    source,
                })?;
        let password = options
            .password
            .as_deref()
            .map(|p| Arc::new(PasswordSource::new(p)));
        Ok(Server {
            listener,
            db,
            options,
            password,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.options.listen)
    }

    /// Serve connections until `shutdown` completes; then stop accepting, give open
    /// connections [`ServerOptions::grace`] to finish, drop the rest (their open transactions
    /// land nothing) and return. The caller closes the database.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let shared = Arc::new(Shared::default());
        let manager = Arc::new(ConnectionManager::new());
        let pids = Arc::new(RandomPidSecretKeyGenerator::default());
        let params = Arc::new(handler::Params {
            read_only: self.options.read_only,
        });
        let tls = self
            .options
            .tls
            .clone()
            .map(tokio_rustls::TlsAcceptor::from);
        let mut tasks = JoinSet::new();
        tokio::pin!(shutdown);
        tracing::info!(listen = %self.local_addr(), "serving");
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = self.listener.accept() => {
                    let (socket, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            // Out of file descriptors and the like: say so, and go on.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = socket.set_nodelay(true);
                    let open = shared.connections.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::debug!(%peer, open, "accepted");
                    let shared = shared.clone();
                    let conn = Arc::new(handler::Conn::new(self.db.clone(), peer));
                    let handlers = handler::Handlers {
                        conn,
                        params: params.clone(),
                        manager: manager.clone(),
                        pids: pids.clone(),
                        password: self.password.clone(),
                    };
                    let password = self.password.is_some();
                    let tls = tls.clone();
                    tasks.spawn(async move {
                        // pgwire reads from one end of a socket pair; the relay checks every
                        // message the client sends before passing it on (see `relay`).
                        let (outer, inner) = match tokio::net::UnixStream::pair() {
                            Ok(p) => p,
                            Err(e) => {
                                tracing::warn!(%peer, error = %e, "no socket pair for the connection");
                                return;
                            }
                        };
                        let checked = relay::relay(socket, outer, password, tls);
                        let served = pgwire::tokio::process_socket_unix(inner, handlers);
                        let (r, s) = tokio::join!(checked, served);
                        if let Err(e) = r.and(s) {
                            tracing::debug!(%peer, error = %e, "connection ended with an error");
                        }
                        let open = shared.connections.fetch_sub(1, Ordering::Relaxed) - 1;
                        tracing::info!(%peer, open, "disconnection");
                    });
                }
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        drop(self.listener);
        tracing::info!(open = tasks.len(), "stopping: no new connections");
        let grace = tokio::time::sleep(self.options.grace);
        tokio::pin!(grace);
        loop {
            tokio::select! {
                _ = &mut grace => break,
                next = tasks.join_next() => if next.is_none() { break },
            }
        }
        if !tasks.is_empty() {
            tracing::info!(
                open = tasks.len(),
                "closing connections still open; their open transactions roll back"
            );
            tasks.shutdown().await;
        }
        Ok(())
    }
}
