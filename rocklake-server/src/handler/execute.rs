//! Execute of a bound portal run to its end: its rows go out while the statement runs.
//!
//! pgwire runs a portal by taking every row of its result before it sends the first (a
//! portal fetched without a row limit is read whole into a list), so a large result
//! through the extended protocol was held whole, twice: as Arrow batches and as encoded
//! DataRows. A portal executed to its end (a row limit of 0: what tokio-postgres, psycopg
//! and JDBC without a fetch size send) is run here instead, as a simple query is: the
//! session hands its result over batch by batch ([`Session::execute_streaming_with_params`])
//! and each batch is encoded in the portal's formats and sent before the next is made. A
//! portal read in parts (a row limit) is still pgwire's.

use std::fmt::Debug;

use bytes::BytesMut;
use futures::{Sink, SinkExt};
use pgwire::api::portal::{Format, Portal, PortalExecutionState};
use pgwire::api::query::ExtendedQueryHandler;
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState, DEFAULT_NAME};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use pgwire::messages::extendedquery::Execute;
use pgwire::messages::response::{CommandComplete, EmptyQueryResponse};
use pgwire::messages::PgWireBackendMessage;
use rocklake_sql::datafusion::arrow::array::RecordBatch;
use rocklake_sql::datafusion::arrow::datatypes::SchemaRef;
use rocklake_sql::pg_types::PgType;
use rocklake_sql::types::SqlType;
use rocklake_sql::{CopyFormat, Output, Piece, SqlError};

use super::{column_type, is_binary, status_of, user_error, Conn, CopyOut};
use crate::wire::{binary_value, text_field};

/// What an Execute's statement came to, once its pieces are all handled.
enum Executed {
    /// Its rows (if any) and its CommandComplete went out.
    Done,
    /// It failed, or its answer could not go out in the portal's formats.
    Failed(SqlError),
    /// It was a `COPY ... FROM STDIN` into these columns, which the session now waits for.
    CopyIn(Vec<(String, SqlType)>, CopyFormat),
}

/// The columns of a result in the portal's formats: their types, or why the Bind's list of
/// formats does not fit them (`08P01`).
fn columns_in(format: &Format, schema: &SchemaRef) -> Result<Vec<PgType>, SqlError> {
    let n = schema.fields().len();
    match format {
        Format::Individual(codes) if codes.len() != n => Err(SqlError::new(
            "08P01",
            format!(
                "bind message has {} result formats but query has {n} columns",
                codes.len()
            ),
        )),
        _ => Ok(schema.fields().iter().map(|f| column_type(f).0).collect()),
    }
}

/// `b`'s rows as DataRows, each column in the portal's format (`types` are needed only for
/// binary columns).
pub(super) async fn send_rows<C>(
    client: &mut C,
    b: &RecordBatch,
    format: &Format,
    types: &[PgType],
) -> PgWireResult<Result<(), SqlError>>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for row in 0..b.num_rows() {
        let mut data = BytesMut::new();
        for (i, col) in b.columns().iter().enumerate() {
            if is_binary(format, i) {
                if let Err(e) = binary_value(&mut data, col.as_ref(), row, types[i]) {
                    return Ok(Err(e));
                }
            } else {
                text_field(&mut data, col.as_ref(), row);
            }
        }
        client
            .feed(PgWireBackendMessage::DataRow(DataRow::new(
                data,
                b.num_columns() as i16,
            )))
            .await?;
    }
    Ok(Ok(()))
}

/// Send what the portal's statement hands over, as it comes.
async fn send_pieces<C>(
    client: &mut C,
    mut from: tokio::sync::mpsc::Receiver<Piece>,
    format: &Format,
    metrics: &crate::Metrics,
) -> PgWireResult<Executed>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    // The streamed result's column types, or why it cannot be sent: the statement then
    // fails with that at its end, and nothing of it lands.
    let mut columns: Result<Vec<PgType>, SqlError> = Ok(vec![]);
    // A `COPY ... TO STDOUT` being streamed: its rows go out as CopyData, as in a simple
    // query (the portal's result formats do not apply to COPY, as in PostgreSQL).
    let mut copy: Option<CopyOut> = None;
    let mut outcome = Executed::Done;
    while let Some(piece) = from.recv().await {
        match piece {
            Piece::Begin {
                schema, copy: None, ..
            } => columns = columns_in(format, &schema),
            Piece::Begin {
                schema,
                copy: Some(copy_format),
                ..
            } => {
                columns = Ok(vec![]);
                let mut header = Vec::new();
                let mut started = CopyOut::new(&schema, copy_format, &mut header);
                if !header.is_empty() {
                    started.send(client, header).await?;
                }
                copy = Some(started);
            }
            Piece::Rows(batch, _held) => match (&columns, copy.as_mut()) {
                (Err(_), _) => {}
                (Ok(_), Some(out)) => {
                    // Encoded whole before any of it goes: a value without a binary form
                    // fails the COPY before the batch's first row.
                    let mut chunks = Vec::new();
                    match out.rows(&batch, &mut chunks) {
                        Ok(()) => out.send(client, chunks).await?,
                        Err(e) => columns = Err(e),
                    }
                }
                (Ok(types), None) => {
                    if let Err(e) = send_rows(client, &batch, format, types).await? {
                        columns = Err(e);
                    }
                }
            },
            Piece::End(done) => {
                let failed = std::mem::replace(&mut columns, Ok(vec![])).err();
                if let (Some(out), None) = (copy.take(), &failed) {
                    out.finish(client).await?;
                }
                // A statement that stopped waiting (cancelled meanwhile) needs no answer.
                let _ = done.send(failed.map_or(Ok(()), Err));
            }
            Piece::Done(Ok(out)) => {
                let tag = out.tag();
                if !matches!(out, Output::CopyIn { .. }) {
                    metrics.statement(Ok(&tag));
                }
                let sent = match out.into_rows() {
                    Output::Rows {
                        schema, batches, ..
                    } => match columns_in(format, &schema) {
                        Ok(types) => {
                            let mut sent = Ok(());
                            for b in &batches {
                                sent = send_rows(client, b, format, &types).await?;
                                if sent.is_err() {
                                    break;
                                }
                            }
                            sent
                        }
                        Err(e) => Err(e),
                    },
                    Output::CopyOut {
                        schema,
                        batches,
                        format: copy_format,
                    } => CopyOut::send_whole(&schema, &batches, copy_format, client).await?,
                    Output::CopyIn { columns, format } => {
                        outcome = Executed::CopyIn(columns, format);
                        continue;
                    }
                    Output::Command(_) | Output::Show { .. } | Output::Sent { .. } => Ok(()),
                };
                match sent {
                    Ok(()) => {
                        client
                            .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                                tag,
                            )))
                            .await?
                    }
                    Err(e) => outcome = Executed::Failed(e),
                }
            }
            Piece::Done(Err(e)) => {
                metrics.statement(Err(&e));
                outcome = Executed::Failed(e)
            }
        }
    }
    Ok(outcome)
}

impl Conn {
    /// Execute: a portal run to its end streams its rows (see the module's documentation);
    /// any other goes to pgwire's own Execute.
    pub(super) async fn execute_portal<C>(
        &self,
        client: &mut C,
        message: Execute,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = String>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        let portal = match client.portal_store().get_portal(name) {
            Some(Entry::Value(portal)) if message.max_rows == 0 => portal,
            _ => return self._on_execute(client, message).await,
        };
        if !matches!(*portal.state.lock().await, PortalExecutionState::Initial) {
            return self._on_execute(client, message).await;
        }
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        let r = self.stream_portal(client, &portal).await;
        // Executed again, it answers as a finished portal does (no rows).
        *portal.state.lock().await = PortalExecutionState::Finished;
        r?;
        // A `COPY ... FROM STDIN` now waits for its data (a Sync the driver sent at once
        // is let be, as PostgreSQL lets it be; CopyDone and then a Sync end it).
        if !matches!(client.state(), PgWireConnectionState::CopyInProgress(_)) {
            client.set_state(PgWireConnectionState::ReadyForQuery);
        }
        Ok(())
    }

    async fn stream_portal<C>(&self, client: &mut C, portal: &Portal<String>) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let sql = &portal.statement.statement;
        match self.db.parse(sql).map(|s| s.len()) {
            Ok(0) => {
                client
                    .feed(PgWireBackendMessage::EmptyQueryResponse(
                        EmptyQueryResponse::new(),
                    ))
                    .await?;
                return Ok(());
            }
            Ok(1) | Err(_) => {}
            // As PostgreSQL refuses it at Parse: none of the statements runs.
            Ok(_) => {
                return Err(user_error(&SqlError::new(
                    "42601",
                    "cannot insert multiple commands into a prepared statement",
                )))
            }
        }
        let mut session = self.session().await;
        let (params, cancel) = self.start_portal(&mut session, portal).await?;
        let started = std::time::Instant::now();
        let phases = session.phases();
        let (to, from) = tokio::sync::mpsc::channel::<Piece>(2);
        let (_, sent) = tokio::join!(
            session.execute_streaming_with_params(sql, &params, to),
            send_pieces(client, from, &portal.result_column_format, &self.metrics)
        );
        drop(cancel);
        self.metrics
            .message(started.elapsed(), &session.phases().since(&phases));
        let failed = match sent? {
            Executed::Done => None,
            Executed::Failed(e) => Some(e),
            Executed::CopyIn(columns, format) => {
                self.start_copy_in(client, columns, format, true).await?;
                None
            }
        };
        client.set_transaction_status(status_of(session.status()));
        self.publish(&session);
        match failed {
            None => Ok(()),
            Some(e) => {
                self.log_failure(&e, sql);
                Err(user_error(&e))
            }
        }
    }
}
