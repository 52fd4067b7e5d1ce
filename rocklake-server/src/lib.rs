//! `rocklake serve`: the PostgreSQL wire protocol over RockLake's SQL layer, so that stock
//! DuckDB attaches to a RockLake catalog with
//! `ATTACH 'ducklake:postgres:host=127.0.0.1 port=5433 dbname=lake' AS lake`.
//!
//! The protocol itself (startup, SCRAM, message framing, extended query, cancel) is the
//! `pgwire` crate's; this crate answers it from one [`rocklake_sql::Session`] per
//! connection: simple queries with several statements, Parse/Describe of a query without
//! running it, `COPY (query) TO STDOUT` in binary and text, `COPY ... FROM STDIN` in text, CSV
//! and binary through both protocols, read as it comes ([`copy_from`]),
//! ReadyForQuery with the session's transaction status and errors with their SQLSTATE.
//! Every connection's commits go through the one [`rocklake_sql::Database`] and so share the
//! core's group commit.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pgwire::api::{ConnectionManager, RandomPidSecretKeyGenerator};
use pgwire::tokio::tokio_rustls::{self, rustls};
use rocklake_sql::{Database, Databases};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;

mod auth;
pub mod copy_from;
mod handler;
pub mod metrics;
mod relay;
mod startup;
pub mod wire;

pub use auth::PasswordSource;
pub use metrics::Metrics;

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
    /// Refuse every session that did not come through TLS (PostgreSQL's `hostssl` lines)
    /// with FATAL `28000`; cancel requests are let through, as PostgreSQL lets them. Needs
    /// [`ServerOptions::tls`].
    pub require_tls: bool,
    /// How many sessions may be open at once (PostgreSQL's `max_connections`, 100); one more
    /// is refused with `53300`. Cancel requests are always let through. As many sockets
    /// again may be waiting to send their startup packet; past that the oldest waiting one
    /// is closed, so silent sockets cannot keep a real client out.
    pub max_connections: usize,
    /// How long a client has from connecting to being logged in (PostgreSQL's
    /// `authentication_timeout`, 60 s); then its socket is closed.
    pub authentication_timeout: Duration,
    /// The sessions' defaults for `idle_in_transaction_session_timeout` and
    /// `idle_session_timeout` (PostgreSQL's: none). A client's startup options and `SET`
    /// change its own; a session that keeps the server waiting longer is closed with FATAL
    /// `25P03` or `57P05`, and its open transaction rolled back.
    pub idle: rocklake_sql::IdleLimits,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 5433)),
            password: None,
            read_only: false,
            grace: Duration::from_secs(5),
            tls: None,
            require_tls: false,
            max_connections: 100,
            authentication_timeout: Duration::from_secs(60),
            idle: rocklake_sql::IdleLimits::default(),
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
    /// TLS required with no certificate to offer it.
    #[error("--require-tls needs a certificate and key (--tls-cert, --tls-key)")]
    RequireTlsWithoutCertificate,
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

/// What a server serves: one database, whatever name a client gives, or several, each
/// under its own name (an unknown name refused with `3D000`, as PostgreSQL refuses it).
#[derive(Clone, Debug)]
pub(crate) enum Served {
    One(Arc<Database>),
    Many(Arc<dyn Databases>),
}

/// A bound server, ready to [`run`](Server::run).
pub struct Server {
    /// `None` once [`Server::run`] stopped listening.
    listener: Option<TcpListener>,
    db: Served,
    options: ServerOptions,
    password: Option<Arc<PasswordSource>>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listen", &self.local_addr())
            .finish()
    }
}

impl Server {
    /// Bind `options.listen` (port 0 picks a free one) for `db`, served under any database
    /// name a client gives.
    pub async fn bind(db: Arc<Database>, options: ServerOptions) -> Result<Server, ServerError> {
        Server::bind_serving(Served::One(db), options).await
    }

    /// Bind `options.listen` for several databases, each served under its name: a client
    /// that names another is refused once authenticated with PostgreSQL's FATAL `3D000`.
    pub async fn bind_databases(
        databases: Arc<dyn Databases>,
        options: ServerOptions,
    ) -> Result<Server, ServerError> {
        Server::bind_serving(Served::Many(databases), options).await
    }

    async fn bind_serving(db: Served, options: ServerOptions) -> Result<Server, ServerError> {
        if options.password.is_none() && !options.listen.ip().is_loopback() {
            return Err(ServerError::TrustOffLoopback(options.listen));
        }
        if options.require_tls && options.tls.is_none() {
            return Err(ServerError::RequireTlsWithoutCertificate);
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
            listener: Some(listener),
            metrics: Metrics::serving(db.clone()),
            db,
            options,
            password,
        })
    }

    /// What it counts (see [`metrics`]): serve it with [`metrics::serve_http`].
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .unwrap_or(self.options.listen)
    }

    /// Serve connections until `shutdown` completes; then stop accepting, give open
    /// connections [`ServerOptions::grace`] to finish, drop the rest (their open transactions
    /// land nothing) and return. The caller closes the database.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let grace = self.options.grace;
        self.serve(
            async move {
                shutdown.await;
                grace
            },
            false,
        )
        .await
    }

    /// Serve connections until `stop` completes, then give open connections the time `stop`
    /// returned to finish and drop the rest, as [`Server::run`] does, but keep the listening
    /// socket: clients
    /// that connect meanwhile wait in its queue until [`Server::serve_phase`] is called again,
    /// after [`Server::switch`] has given the server another database (a standby that became
    /// the writer, a writer that lost its lease going back to standby).
    pub async fn serve_phase(
        &mut self,
        stop: impl Future<Output = Duration>,
    ) -> std::io::Result<()> {
        self.serve(stop, true).await
    }

    /// Serve `db` from the next [`Server::serve_phase`] on; `read_only` as
    /// [`ServerOptions::read_only`].
    pub fn switch(&mut self, db: Arc<Database>, read_only: bool) {
        self.metrics.switch(db.clone());
        self.db = Served::One(db);
        self.options.read_only = read_only;
    }

    async fn serve(
        &mut self,
        shutdown: impl Future<Output = Duration>,
        keep_listening: bool,
    ) -> std::io::Result<()> {
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
        let max = self.options.max_connections.max(1);
        let mut tasks = JoinSet::new();
        tokio::pin!(shutdown);
        let Some(listener) = self.listener.as_ref() else {
            return Err(std::io::Error::other("the server stopped listening"));
        };
        tracing::info!(listen = %self.local_addr(), max_connections = max, "serving");
        self.metrics.set_ready(true);
        let grace = loop {
            tokio::select! {
                grace = &mut shutdown => break grace,
                accepted = listener.accept() => {
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
                    let _ = socket2::SockRef::from(&socket).set_tcp_keepalive(&keepalive());
                    // Until its startup packet is read a socket holds one descriptor and no
                    // session; the oldest of too many such sockets is closed.
                    let waiting = shared.wait(max);
                    tracing::debug!(%peer, "accepted");
                    let connection = Connection {
                        db: self.db.clone(),
                        shared: shared.clone(),
                        params: params.clone(),
                        manager: manager.clone(),
                        pids: pids.clone(),
                        password: self.password.clone(),
                        tls: tls.clone(),
                        require_tls: self.options.require_tls,
                        max,
                        deadline: tokio::time::Instant::now() + self.options.authentication_timeout,
                        idle: self.options.idle,
                        metrics: self.metrics.clone(),
                    };
                    tasks.spawn(connection.serve(socket, peer, waiting));
                }
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        };
        self.metrics.set_ready(false);
        if !keep_listening {
            if let Some(listener) = self.listener.take() {
                drop(listener);
            }
        }
        tracing::info!(open = tasks.len(), "stopping: no new connections");
        let grace = tokio::time::sleep(grace);
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

/// TCP keepalive on every client socket, as PostgreSQL sets it: a peer that vanished
/// without closing (a crashed machine, a dropped route) is found in about two minutes
/// rather than the kernel's two hours, and its session and transaction end.
fn keepalive() -> socket2::TcpKeepalive {
    socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(60))
        .with_interval(Duration::from_secs(10))
        .with_retries(6)
}

/// One accepted socket and what it needs from the server.
struct Connection {
    db: Served,
    shared: Arc<Shared>,
    params: Arc<handler::Params>,
    manager: Arc<ConnectionManager>,
    pids: Arc<RandomPidSecretKeyGenerator>,
    password: Option<Arc<PasswordSource>>,
    tls: relay::Tls,
    require_tls: bool,
    max: usize,
    /// When it must be logged in.
    deadline: tokio::time::Instant,
    /// The server's idle limits, before the client's own settings.
    idle: rocklake_sql::IdleLimits,
    metrics: Arc<Metrics>,
}

impl Connection {
    async fn serve(self, socket: tokio::net::TcpStream, peer: SocketAddr, waiting: Waiting) {
        let started = tokio::select! {
            s = relay::start(socket, &self.tls) => s.ok().flatten(),
            () = waiting.closed.notified() => {
                tracing::info!(%peer, "closing a socket that sent no startup packet: too many are waiting");
                None
            }
            () = tokio::time::sleep_until(self.deadline) => {
                tracing::info!(%peer, "closing a socket that sent no startup packet in time");
                None
            }
        };
        self.shared.waited(waiting.id);
        let Some(started) = started else { return };
        if self.require_tls && !started.encrypted && !started.cancel {
            self.metrics.refused("tls_required");
            relay::refuse(
                started.stream,
                "28000",
                "this server takes only encrypted connections (--require-tls): connect with \
                 sslmode=require",
            )
            .await;
            return;
        }
        // A cancel request is no session: it always gets through, as in PostgreSQL.
        let _slot = if started.cancel {
            None
        } else {
            match self.shared.take_slot(self.max) {
                Some(slot) => Some(slot),
                None => {
                    self.metrics.refused("too_many_connections");
                    relay::refuse(started.stream, "53300", "sorry, too many clients already").await;
                    return;
                }
            }
        };
        // Settings the connection cannot start with refuse it, as PostgreSQL refuses it once
        // the client is authenticated. Without a password, that is at once (after
        // AuthenticationOk, as PostgreSQL sends it); with one, before the SASL exchange, since
        // pgwire answers a successful one whole (ParameterStatus and ReadyForQuery included).
        if !started.cancel {
            let refused =
                relay::startup_settings(&started.first)
                    .iter()
                    .find_map(|(name, value)| {
                        rocklake_sql::session::check_startup_setting(name, value).err()
                    });
            if let Some(e) = refused {
                self.metrics.refused("startup_setting");
                let before = if self.password.is_none() {
                    relay::AUTHENTICATION_OK
                } else {
                    &[]
                };
                relay::refuse_after(started.stream, before, e.code, &e.message).await;
                return;
            }
        }
        // The database the client names. An unknown one is refused once the client is
        // authenticated, as PostgreSQL refuses it (so that a client without the password
        // learns nothing of which exist): without a password, at once after
        // AuthenticationOk; with one, by the relay, which passes pgwire nothing but the
        // password exchange and puts the refusal in place of what follows its
        // AuthenticationOk. The session of such a connection never runs a statement.
        let (db, unknown) = match &self.db {
            Served::One(db) => (db.clone(), None),
            Served::Many(many) => {
                let name = relay::startup_database(&started.first);
                match many.get(&name) {
                    Some(db) => (db, None),
                    None if started.cancel => match any_database(many.as_ref()) {
                        Some(db) => (db, None),
                        None => return,
                    },
                    None => {
                        let why = format!("database \"{name}\" does not exist");
                        let placeholder = any_database(many.as_ref());
                        match (&self.password, placeholder) {
                            (Some(_), Some(db)) => (db, Some(why)),
                            _ => {
                                self.metrics.refused("unknown_database");
                                let before = if self.password.is_none() {
                                    relay::AUTHENTICATION_OK
                                } else {
                                    &[]
                                };
                                relay::refuse_after(
                                    started.stream,
                                    before,
                                    rocklake_sql::error::state::INVALID_CATALOG_NAME,
                                    &why,
                                )
                                .await;
                                return;
                            }
                        }
                    }
                }
            }
        };
        // pgwire reads from one end of a socket pair; the relay checks every message the
        // client sends before passing it on (see `relay`).
        let (outer, inner) = match tokio::net::UnixStream::pair() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "no socket pair for the connection");
                relay::refuse(started.stream, "53000", "out of file descriptors").await;
                return;
            }
        };
        let _session = (!started.cancel).then(|| self.metrics.session());
        let (login, logged_in) = tokio::sync::watch::channel(false);
        let (idle, idle_limits) = tokio::sync::watch::channel(self.idle);
        let handlers = handler::Handlers {
            conn: Arc::new(handler::Conn::new(
                db,
                peer,
                idle,
                self.idle,
                self.metrics.clone(),
            )),
            params: self.params.clone(),
            manager: self.manager.clone(),
            pids: self.pids.clone(),
            password: self.password.clone(),
            login: Arc::new(login),
        };
        let checked = relay::serve(
            started.stream,
            outer,
            self.password.is_some(),
            started.first,
            relay::Login {
                deadline: self.deadline,
                done: logged_in,
            },
            idle_limits,
            unknown.map(|message| {
                let metrics = self.metrics.clone();
                relay::Refusal {
                    code: rocklake_sql::error::state::INVALID_CATALOG_NAME,
                    message,
                    counted: Box::new(move || metrics.refused("unknown_database")),
                }
            }),
        );
        let served = pgwire::tokio::process_socket_unix(inner, handlers);
        let (r, s) = tokio::join!(checked, served);
        if let Err(e) = r.and(s) {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
        if !started.cancel {
            tracing::info!(
                %peer,
                open = self.shared.sessions.load(Ordering::Relaxed) - 1,
                "disconnection"
            );
        }
    }
}

/// Some database of `many`, for a connection that will not use it (a cancel request, or a
/// login to refuse once its password is checked).
fn any_database(many: &dyn Databases) -> Option<Arc<Database>> {
    many.names().iter().find_map(|n| many.get(n))
}

/// What the server shares across its connections.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Sessions open (past their startup packet; cancel requests are not counted).
    sessions: AtomicUsize,
    /// Sockets not yet past their startup packet, oldest first, each with what closes it.
    waiting: std::sync::Mutex<BTreeMap<u64, Arc<Notify>>>,
    next_id: AtomicU64,
}

/// A socket waiting for its startup packet.
struct Waiting {
    id: u64,
    /// Notified when it is closed to make room for newer ones.
    closed: Arc<Notify>,
}

/// A session's place among [`ServerOptions::max_connections`], given back on drop.
struct Slot(Arc<Shared>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.sessions.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Shared {
    /// Register a new socket waiting for its startup packet; beyond `max` waiting, the
    /// oldest is told to close.
    fn wait(&self, max: usize) -> Waiting {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let closed = Arc::new(Notify::new());
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.insert(id, closed.clone());
        while waiting.len() > max {
            if let Some((_, oldest)) = waiting.pop_first() {
                oldest.notify_one();
            }
        }
        Waiting { id, closed }
    }

    fn waited(&self, id: u64) {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// A place for one more session, unless `max` are open.
    fn take_slot(self: &Arc<Self>, max: usize) -> Option<Slot> {
        let taken = self
            .sessions
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            });
        taken.ok().map(|_| Slot(self.clone()))
    }
}
