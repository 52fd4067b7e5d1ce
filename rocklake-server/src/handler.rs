//! One connection: pgwire's handlers over one [`Session`].

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::auth::sasl::scram::ScramAuth;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata,
    ServerParameterProvider, StartupHandler,
};
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::Response;
use pgwire::api::store::PortalStore;
use pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionHandle, ConnectionManager, PgWireConnectionState,
    PgWireServerHandlers, PidSecretKeyGenerator, RandomPidSecretKeyGenerator,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail, CopyInResponse};
use pgwire::messages::response::{
    CommandComplete, EmptyQueryResponse, ReadyForQuery, TransactionStatus,
};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use rocklake_sql::datafusion::arrow::array::RecordBatch;
use rocklake_sql::datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use rocklake_sql::session::Status;
use rocklake_sql::types::SqlType;
use rocklake_sql::{CopyFormat, Database, IdleLimits, Output, Piece, Session, SqlError};
use tokio::sync::Mutex as AsyncMutex;

use crate::copy_from::CopyStream;

mod execute;
mod extended;
mod results;

use extended::{bind_parameters, is_binary};
use results::{column_type, row_description, CopyOut};

/// A `COPY ... FROM STDIN` in progress: its rows go into the session's transaction as their
/// bytes come (see [`crate::copy_from`]), and the transaction commits at CopyDone.
struct CopyIn {
    stream: CopyStream,
    /// The share of the database's memory pool of the bytes held for rows not yet complete
    /// (the rows read go into the transaction, whose writes count there on their own).
    reserved: MemoryReservation,
    /// Why the COPY fails at CopyDone: a bad row, or the memory bound passed. Its
    /// transaction's writes are gone at once, and the rest of its data is read and dropped,
    /// as PostgreSQL drops a failed COPY's data.
    refused: Option<SqlError>,
}

/// The handlers of one connection.
pub(crate) struct Conn {
    /// Built at the first statement, not when the socket is accepted: a connection that
    /// has not logged in (or never sends a query) holds no DataFusion context.
    session: AsyncMutex<Option<Session>>,
    db: Arc<Database>,
    /// The `COPY ... FROM STDIN` in progress.
    copy: Mutex<Option<CopyIn>>,
    /// The parameter values of each bound portal, converted at Bind.
    bound: Mutex<HashMap<String, Vec<rocklake_sql::datafusion::sql::sqlparser::ast::Expr>>>,
    /// The session knows the client's database name.
    named: std::sync::atomic::AtomicBool,
    peer: std::net::SocketAddr,
    /// The session's idle limits as the relay applies them (see `relay::serve`).
    idle: tokio::sync::watch::Sender<IdleLimits>,
    /// The server's idle limits, before the client's own settings.
    idle_defaults: IdleLimits,
    /// The connection's cancel handle while an Execute runs (see `on_execute`).
    cancel: Mutex<Option<Arc<ConnectionHandle>>>,
    pub(crate) metrics: Arc<crate::Metrics>,
    /// Its id among the metrics' open transactions.
    id: u64,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.metrics.transaction(self.id, false);
    }
}

impl Conn {
    /// The connection's session, built on first use. (A message other than COPY's own in
    /// the middle of `COPY ... FROM STDIN` never gets here: the relay ends the connection, as
    /// PostgreSQL does.)
    async fn session(&self) -> tokio::sync::MappedMutexGuard<'_, Session> {
        let guard = self.session.lock().await;
        tokio::sync::MutexGuard::map(guard, |s: &mut Option<Session>| {
            s.get_or_insert_with(|| {
                let mut s = Session::new(self.db.clone());
                s.set_idle_defaults(self.idle_defaults);
                s
            })
        })
    }

    pub(crate) fn new(
        db: Arc<Database>,
        peer: std::net::SocketAddr,
        idle: tokio::sync::watch::Sender<IdleLimits>,
        idle_defaults: IdleLimits,
        metrics: Arc<crate::Metrics>,
    ) -> Conn {
        Conn {
            id: metrics.connection_id(),
            metrics,
            idle,
            idle_defaults,
            cancel: Mutex::new(None),
            named: std::sync::atomic::AtomicBool::new(false),
            session: AsyncMutex::new(None),
            db,
            copy: Mutex::new(None),
            bound: Mutex::new(HashMap::new()),
            peer,
        }
    }
}

/// The settings of a client's startup packet (see [`crate::startup::settings`]); the
/// connection was refused before login if any of them could not be applied.
fn startup_settings<C: ClientInfo>(client: &C) -> Vec<(String, String)> {
    crate::startup::settings(
        client
            .metadata()
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str())),
    )
}

fn status_of(s: Status) -> TransactionStatus {
    match s {
        Status::Idle => TransactionStatus::Idle,
        Status::InBlock => TransactionStatus::Transaction,
        Status::Failed => TransactionStatus::Error,
    }
}

fn error_info(e: &SqlError) -> ErrorInfo {
    let mut info = ErrorInfo::new("ERROR".into(), e.code.to_string(), e.message.clone());
    // PostgreSQL (9.6 on) sends the severity twice: `S` may be translated, `V` never is.
    info.severity_nonlocalized = Some("ERROR".into());
    info.detail = e.detail.clone();
    info.hint = e.hint.clone();
    info
}

fn user_error(e: &SqlError) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(e)))
}

/// A result being streamed to the client ([`Piece::Begin`] seen, [`Piece::End`] not yet).
enum Streaming {
    Rows,
    Copy(CopyOut),
}

/// Text-format DataRows of `b`'s rows.
async fn send_data_rows<C>(client: &mut C, b: &RecordBatch) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    // Every value has a text form: this never fails to encode.
    execute::send_rows(client, b, &Format::UnifiedText, &[])
        .await?
        .map_err(|e| user_error(&e))
}

impl Conn {
    /// Send one statement's result.
    async fn send_output<C>(&self, client: &mut C, out: Output) -> PgWireResult<bool>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let tag = out.tag();
        match out.into_rows() {
            Output::Rows {
                schema,
                batches,
                origins,
            } => {
                client
                    .feed(PgWireBackendMessage::RowDescription(row_description(
                        &schema, &origins, false,
                    )))
                    .await?;
                for b in &batches {
                    send_data_rows(client, b).await?;
                }
            }
            Output::CopyOut {
                schema,
                batches,
                format,
            } => CopyOut::send_whole(&schema, &batches, format, client)
                .await?
                .map_err(|e| user_error(&e))?,
            // A streamed result's rows (and a COPY's end) have gone out already.
            Output::Command(_) | Output::Show { .. } | Output::Sent { .. } => {}
            Output::CopyIn { columns, format } => {
                self.start_copy_in(client, columns, format, false).await?;
                return Ok(true);
            }
        }
        client
            .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                tag,
            )))
            .await?;
        Ok(false)
    }

    /// Answer a `COPY ... FROM STDIN` with CopyInResponse: the client sends its data next
    /// (`extended`: the COPY came in an Execute, and a Sync ends it after CopyDone).
    async fn start_copy_in<C>(
        &self,
        client: &mut C,
        columns: Vec<(String, SqlType)>,
        format: CopyFormat,
        extended: bool,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let n = columns.len() as i16;
        let binary = format.binary;
        let reserved =
            MemoryConsumer::new("the bytes of a COPY FROM STDIN").register(&self.db.memory_pool());
        *self.copy.lock().unwrap_or_else(|e| e.into_inner()) = Some(CopyIn {
            stream: CopyStream::new(columns, format),
            reserved,
            refused: None,
        });
        client
            .feed(PgWireBackendMessage::CopyInResponse(CopyInResponse::new(
                i8::from(binary),
                n,
                vec![i16::from(binary); n as usize],
            )))
            .await?;
        // Sent now: a driver waits for it before its data, and in the extended protocol no
        // later message of this exchange flushes it (the Sync behind the Execute is let be).
        client.flush().await?;
        client.set_state(PgWireConnectionState::CopyInProgress(extended));
        Ok(())
    }

    /// What running `portal` needs: its parameter values (converted at Bind, else now) and
    /// the watch that lets a cancel request stop it.
    async fn start_portal(
        &self,
        session: &mut Session,
        portal: &Portal<String>,
    ) -> PgWireResult<(
        Vec<rocklake_sql::datafusion::sql::sqlparser::ast::Expr>,
        CancelWatch,
    )> {
        let cached = self
            .bound
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&portal.name);
        let params = match cached {
            Some(p) => p,
            None => bind_parameters(session, portal).await?,
        };
        let handle = self
            .cancel
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Ok((params, watch_cancel(handle, session).await))
    }

    /// Send what a simple Query's statements produce as it comes ([`Session::execute_streaming`]
    /// hands it over): a streamed result's rows while the statement still runs, every
    /// outcome in order. `true` when a `COPY ... FROM STDIN` now waits for the client's rows
    /// (what followed it in the text did not run and is not answered).
    async fn send_pieces<C>(
        &self,
        client: &mut C,
        mut from: tokio::sync::mpsc::Receiver<Piece>,
        sql: &str,
    ) -> PgWireResult<bool>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut streaming: Option<Streaming> = None;
        // A row the client's format could not carry: the statement fails with it at its end.
        let mut failed: Option<SqlError> = None;
        while let Some(piece) = from.recv().await {
            match piece {
                Piece::Begin {
                    schema,
                    copy,
                    origins,
                } => {
                    failed = None;
                    streaming = Some(match copy {
                        None => {
                            client
                                .feed(PgWireBackendMessage::RowDescription(row_description(
                                    &schema, &origins, false,
                                )))
                                .await?;
                            Streaming::Rows
                        }
                        Some(format) => {
                            let mut header = Vec::new();
                            let mut copy = CopyOut::new(&schema, format, &mut header);
                            if !header.is_empty() {
                                copy.send(client, header).await?;
                            }
                            Streaming::Copy(copy)
                        }
                    });
                }
                Piece::Rows(batch, _held) => match streaming.as_mut() {
                    _ if failed.is_some() => {}
                    Some(Streaming::Rows) => send_data_rows(client, &batch).await?,
                    Some(Streaming::Copy(copy)) => {
                        // A batch is encoded whole before any of it is sent: a value without
                        // a binary form in the first batch fails the COPY before it starts.
                        let mut chunks = Vec::new();
                        match copy.rows(&batch, &mut chunks) {
                            Ok(()) => copy.send(client, chunks).await?,
                            Err(e) => failed = Some(e),
                        }
                    }
                    None => {}
                },
                Piece::End(done) => {
                    let outcome = match (streaming.take(), failed.take()) {
                        (_, Some(e)) => Err(e),
                        (Some(Streaming::Copy(copy)), None) => {
                            copy.finish(client).await?;
                            Ok(())
                        }
                        (Some(Streaming::Rows), None) | (None, None) => Ok(()),
                    };
                    // A statement that stopped waiting (cancelled meanwhile) needs no answer.
                    let _ = done.send(outcome);
                }
                Piece::Done(Ok(out)) => {
                    streaming = None;
                    // A COPY FROM STDIN is counted when its rows are in (or it failed).
                    if !matches!(out, Output::CopyIn { .. }) {
                        self.metrics.statement(Ok(&out.tag()));
                    }
                    if self.send_output(client, out).await? {
                        // COPY FROM STDIN: the client sends the rows next.
                        return Ok(true);
                    }
                }
                Piece::Done(Err(e)) => {
                    streaming = None;
                    self.metrics.statement(Err(&e));
                    self.log_failure(&e, sql);
                    client
                        .feed(PgWireBackendMessage::ErrorResponse(error_info(&e).into()))
                        .await?;
                }
            }
        }
        Ok(false)
    }

    /// Log a failed statement: a refused commit (how concurrent DuckLake writers learn they
    /// lost a race) at info, anything else at warn with its SQL.
    fn log_failure(&self, e: &SqlError, sql: &str) {
        if e.code == "23505" || e.code == "40001" {
            tracing::info!(peer = %self.peer, code = e.code, error = %e.message, "commit refused");
        } else {
            let shown: String = sql.chars().take(300).collect();
            tracing::warn!(peer = %self.peer, code = e.code, error = %e.message, sql = %shown, "statement failed");
        }
    }
}

#[async_trait]
impl SimpleQueryHandler for Conn {
    async fn on_query<C>(
        &self,
        client: &mut C,
        query: pgwire::messages::simplequery::Query,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        let sql = query.query;
        let mut session = self.session().await;
        self.name_database(client, &mut session).await;
        if sql.trim().trim_matches(';').trim().is_empty() {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
        } else {
            tracing::debug!(peer = %self.peer, sql = %sql, "query");
            let started = std::time::Instant::now();
            let phases = session.phases();
            let rows_before = session.rows_read();
            let handle = client
                .session_extensions()
                .get::<Arc<ConnectionHandle>>()
                .map(|h| (*h).clone());
            let cancel = watch_cancel(handle, &session).await;
            // The statements run while their results go out: a large result passes through
            // a few batches of memory instead of being gathered whole first.
            let (to, from) = tokio::sync::mpsc::channel::<Piece>(2);
            let (_, sent) = tokio::join!(
                session.execute_streaming(&sql, to),
                self.send_pieces(client, from, &sql)
            );
            drop(cancel);
            self.metrics
                .message(started.elapsed(), &session.phases().since(&phases));
            // Where this message's time went in the SQL layer (`RUST_LOG=rocklake_server=debug`);
            // the time spent sending is in it.
            tracing::debug!(
                peer = %self.peer,
                micros = started.elapsed().as_micros() as u64,
                rows_read = session.rows_read() - rows_before,
                phases = %session.phases().since(&phases).render(1),
                "query phases"
            );
            if sent? {
                client.flush().await?;
                return Ok(());
            }
            tracing::trace!(peer = %self.peer, elapsed_us = started.elapsed().as_micros() as u64, "query");
        }
        self.publish(&session);
        let status = status_of(session.status());
        client.set_transaction_status(status);
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                status,
            )))
            .await?;
        client.set_state(PgWireConnectionState::ReadyForQuery);
        Ok(())
    }

    async fn do_query<C>(&self, _client: &mut C, _query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // `on_query` above answers every simple query itself.
        Ok(vec![])
    }
}

#[async_trait]
impl CopyHandler for Conn {
    async fn on_copy_data<C>(&self, _client: &mut C, data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // Out of the lock while its rows are written (the lock is not held across an await).
        let taken = self.copy.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(mut c) = taken else {
            return Ok(());
        };
        if c.refused.is_none() {
            // The bytes held count in the memory pool, so a stream of rows too long for it
            // fails with 53200 instead of taking the process's memory.
            let fed = c
                .reserved
                .try_resize(c.stream.held() + data.data.len())
                .map_err(SqlError::from)
                .and_then(|()| c.stream.feed(&data.data));
            let written = match fed {
                Ok(rows) if rows.is_empty() => Ok(()),
                Ok(rows) => self.session().await.copy_rows(rows).await,
                Err(e) => Err(e),
            };
            match written {
                Ok(()) => c.reserved.resize(c.stream.held()),
                Err(e) => {
                    self.session().await.copy_fail(&e.message).await;
                    c.refused = Some(e);
                    c.stream.abandon();
                    c.reserved.free();
                }
            }
        }
        *self.copy.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let taken = self.copy.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut session = self.session().await;
        let result = match taken {
            None => Err(SqlError::new(
                "08P01",
                "CopyDone without a COPY in progress",
            )),
            Some(CopyIn {
                refused: Some(e), ..
            }) => {
                session.copy_fail(&e.message).await;
                Err(e)
            }
            Some(CopyIn {
                mut stream,
                reserved,
                refused: None,
            }) => {
                let rows = stream.finish();
                drop(stream);
                drop(reserved);
                let written = match rows {
                    Ok(rows) => session.copy_rows(rows).await,
                    Err(e) => Err(e),
                };
                match written {
                    Ok(()) => session.copy_end().await,
                    Err(e) => {
                        session.copy_fail(&e.message).await;
                        Err(e)
                    }
                }
            }
        };
        client.set_transaction_status(status_of(session.status()));
        self.publish(&session);
        self.metrics.outcome(&result);
        match result {
            Ok(out) => {
                client
                    .send(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                        out.tag(),
                    )))
                    .await?;
                Ok(())
            }
            Err(e) => Err(user_error(&e)),
        }
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.copy.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut session = self.session().await;
        let e = session.copy_fail(&fail.message).await;
        client.set_transaction_status(status_of(session.status()));
        self.publish(&session);
        self.metrics.statement(Err(&e));
        user_error(&e)
    }
}

/// Until dropped, a cancel request for this connection stops the session's running
/// statement: the statement fails with `57014` at its plan's next batch and ends as any
/// failed statement does (nothing of it lands; a block it ran in is aborted). A commit under
/// way is not interrupted, so the client always learns a commit's real outcome.
struct CancelWatch(Option<Arc<rocklake_sql::interrupt::Interrupt>>);

impl Drop for CancelWatch {
    fn drop(&mut self) {
        if let Some(i) = self.0.take() {
            i.stop_watching();
        }
    }
}

async fn watch_cancel(handle: Option<Arc<ConnectionHandle>>, session: &Session) -> CancelWatch {
    let Some(handle) = handle else {
        return CancelWatch(None);
    };
    let interrupt = session.interrupt();
    interrupt.cancel_on(handle.start_query().await);
    CancelWatch(Some(interrupt))
}

/// The ParameterStatus values PostgreSQL 15 sends after authentication.
#[derive(Debug)]
pub(crate) struct Params {
    pub(crate) read_only: bool,
}

impl ServerParameterProvider for Params {
    fn server_parameters<C>(&self, client: &C) -> Option<HashMap<String, String>>
    where
        C: ClientInfo,
    {
        let md = client.metadata();
        let user = md.get("user").cloned().unwrap_or_default();
        let mut p = HashMap::new();
        p.insert(
            "application_name".into(),
            md.get("application_name").cloned().unwrap_or_default(),
        );
        p.insert("client_encoding".into(), "UTF8".into());
        p.insert("DateStyle".into(), "ISO, MDY".into());
        p.insert(
            "default_transaction_read_only".into(),
            if self.read_only { "on" } else { "off" }.into(),
        );
        // libpq's target_session_attrs=read-write reads these two to pass over a standby.
        p.insert(
            "in_hot_standby".into(),
            if self.read_only { "on" } else { "off" }.into(),
        );
        p.insert("integer_datetimes".into(), "on".into());
        p.insert("IntervalStyle".into(), "postgres".into());
        p.insert("is_superuser".into(), "off".into());
        p.insert("server_encoding".into(), "UTF8".into());
        p.insert(
            "server_version".into(),
            rocklake_sql::pg_catalog::SERVER_VERSION.into(),
        );
        p.insert("session_authorization".into(), user);
        p.insert("standard_conforming_strings".into(), "on".into());
        p.insert("TimeZone".into(), "Etc/UTC".into());
        Some(p)
    }
}

/// Startup without a password (loopback only, checked when the server starts).
pub(crate) struct TrustStartup {
    pub(crate) params: Arc<Params>,
    pub(crate) manager: Arc<ConnectionManager>,
    pub(crate) pids: Arc<RandomPidSecretKeyGenerator>,
}

#[async_trait]
impl StartupHandler for TrustStartup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let PgWireFrontendMessage::Startup(ref startup) = message {
            protocol_negotiation(client, startup).await?;
            save_startup_parameters_to_metadata(client, startup);
            let (pid, key) = self.pids.generate(client);
            client.set_pid_and_secret_key(pid, key.clone());
            let (handle, guard) = self.manager.register(pid, key);
            client
                .session_extensions()
                .insert::<Arc<ConnectionHandle>>(handle);
            client.session_extensions().insert(guard);
            finish_authentication(client, self.params.as_ref()).await?;
        }
        Ok(())
    }
}

/// Everything one connection needs, as pgwire asks for it.
pub(crate) struct Handlers {
    pub(crate) conn: Arc<Conn>,
    pub(crate) params: Arc<Params>,
    pub(crate) manager: Arc<ConnectionManager>,
    pub(crate) pids: Arc<RandomPidSecretKeyGenerator>,
    pub(crate) password: Option<Arc<crate::auth::PasswordSource>>,
    /// Told when the client has logged in (the relay's authentication timeout stops).
    pub(crate) login: Arc<tokio::sync::watch::Sender<bool>>,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.conn.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.conn.clone()
    }

    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.conn.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::new(crate::auth::Startup {
            trust: TrustStartup {
                params: self.params.clone(),
                manager: self.manager.clone(),
                pids: self.pids.clone(),
            },
            scram: self.password.as_ref().map(|p| {
                let mut scram = ScramAuth::new(p.clone());
                scram.set_iterations(crate::auth::ITERATIONS);
                // Each backend its own pid and secret key, so cancel requests reach the
                // session they name (without a generator every SCRAM login got one pid).
                let pids: Arc<dyn pgwire::api::PidSecretKeyGenerator> = self.pids.clone();
                SASLAuthStartupHandler::new(self.params.clone())
                    .with_scram(scram)
                    .with_connection_manager(self.manager.clone())
                    .with_pid_secret_key_generator(pids)
            }),
            login: self.login.clone(),
            conn: self.conn.clone(),
            password: self.password.clone(),
        })
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        Arc::new(pgwire::api::cancel::DefaultCancelHandler::new(
            self.manager.clone(),
        ))
    }
}

impl Conn {
    /// The client's address.
    pub(crate) fn peer(&self) -> std::net::SocketAddr {
        self.peer
    }

    /// The client has logged in: the relay's idle limits from the server's defaults and the
    /// client's startup settings (the session itself is only built at its first statement).
    pub(crate) fn logged_in<C: ClientInfo>(&self, client: &C) {
        let mut limits = self.idle_defaults;
        for (name, value) in startup_settings(client) {
            // A bad value is logged when the session is built from the same settings.
            let _ = limits.apply(&name, &value);
        }
        self.idle.send_replace(limits);
    }

    /// The session's idle limits, as its settings have them after a statement, to the relay.
    fn publish(&self, session: &Session) {
        self.metrics
            .transaction(self.id, session.status() != Status::Idle);
        let limits = session.idle_limits();
        self.idle
            .send_if_modified(|l| std::mem::replace(l, limits) != limits);
    }

    /// Tell the session the client's database name, once (the startup parameters are only
    /// known after authentication, whichever way it went).
    async fn name_database<C: ClientInfo>(&self, client: &C, session: &mut Session) {
        if self.named.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        let md = client.metadata();
        let db = md
            .get("database")
            .or_else(|| md.get("user"))
            .cloned()
            .unwrap_or_default();
        session.set_database(&db);
        for (name, value) in startup_settings(client) {
            if let Err(e) = session.startup_setting(&name, &value) {
                tracing::info!(peer = %self.peer, error = %e.message, "startup option ignored");
            }
        }
        self.publish(session);
        tracing::info!(
            peer = %self.peer,
            user = md.get("user").map(String::as_str).unwrap_or(""),
            database = %db,
            "connection"
        );
    }
}
