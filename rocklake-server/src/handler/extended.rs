//! The extended query protocol: Parse keeps a statement's text, Describe plans it (its
//! parameters' types and its RowDescription), Bind checks the formats and turns the
//! parameters into values, and Execute runs the portal (to its end in [`super::execute`],
//! in parts here, through pgwire).

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::BytesMut;
use futures::{Sink, SinkExt};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::ExtendedQueryHandler;
use pgwire::api::results::{
    DescribePortalResponse, DescribeResponse, DescribeStatementResponse, FieldInfo, Response,
};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, ConnectionHandle, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use pgwire::messages::PgWireBackendMessage;
use rocklake_sql::datafusion::arrow::datatypes::Field;
use rocklake_sql::pg_types::{pg_type_of, PgType};
use rocklake_sql::{Output, Session, SqlError};

use super::results::{field_infos, field_infos_as};
use super::{column_type, status_of, user_error, Conn};
use crate::wire::{binary_value, text_field};

/// Prepared statements keep their text; planning happens at Describe.
#[derive(Debug, Default)]
pub(crate) struct TextParser;

#[async_trait]
impl QueryParser for TextParser {
    type Statement = String;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<String>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        Ok(Some(sql.to_string()))
    }

    fn get_parameter_types(&self, _stmt: &String) -> PgWireResult<Vec<Type>> {
        Ok(vec![])
    }

    fn get_result_schema(
        &self,
        _stmt: &String,
        _format: Option<&pgwire::api::portal::Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        Ok(vec![])
    }
}

#[async_trait]
impl ExtendedQueryHandler for Conn {
    type Statement = String;
    type QueryParser = TextParser;

    fn query_parser(&self) -> Arc<TextParser> {
        Arc::new(TextParser)
    }

    /// pgwire's Execute races the statement against the session's cancel signal and, when
    /// the cancel wins, drops the statement wherever it was: its transaction and writes so
    /// far stay in the session, and the next statement's commit would land them. So while
    /// pgwire runs the Execute it sees a stand-in handle whose cancel never fires, and the
    /// real one goes to the statement's interrupt ([`watch_cancel`]), as for a simple query:
    /// the statement then ends as a failed one does.
    async fn on_execute<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::extendedquery::Execute,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let extensions = client.session_extensions();
        let real = extensions
            .get::<Arc<ConnectionHandle>>()
            .map(|h| (*h).clone());
        if let Some(real) = &real {
            extensions.insert::<Arc<ConnectionHandle>>(Arc::new(ConnectionHandle::default()));
            *self.cancel.lock().unwrap_or_else(|e| e.into_inner()) = Some(real.clone());
        }
        let r = self.execute_portal(client, message).await;
        self.cancel.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(real) = real {
            client
                .session_extensions()
                .insert::<Arc<ConnectionHandle>>(real);
        }
        r
    }

    /// Bind converts the parameter values right away, so that a value that is not of its
    /// type is refused at Bind, as PostgreSQL refuses it; Execute takes the converted values.
    async fn on_bind<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::extendedquery::Bind,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = String>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        use pgwire::api::store::Entry;
        let statement_name = message
            .statement_name
            .as_deref()
            .unwrap_or(pgwire::api::DEFAULT_NAME);
        match client.portal_store().get_statement(statement_name) {
            Some(Entry::Value(statement)) => {
                let portal = Portal::try_new(&message, statement)?;
                let params = {
                    let mut session = self.session().await;
                    if let Format::Individual(codes) = &portal.result_column_format {
                        if codes.len() > 1 {
                            let (_, schema) = session
                                .describe(&portal.statement.statement)
                                .await
                                .map_err(|e| user_error(&e))?;
                            let n = schema.map_or(0, |(s, _)| s.fields().len());
                            check_formats(&portal.result_column_format, n, |k| {
                                format!(
                                    "bind message has {k} result formats but query has {n} columns"
                                )
                            })?;
                        }
                    }
                    bind_parameters(&mut session, &portal).await?
                };
                self.bound
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(portal.name.clone(), params);
                client.portal_store().put_portal(Arc::new(portal));
            }
            Some(Entry::Empty) => {
                if !message.parameters.is_empty() {
                    return Err(user_error(&SqlError::new(
                        "08P01",
                        format!(
                            "bind message supplies {} parameters, but prepared statement \"{}\" requires 0",
                            message.parameters.len(),
                            message.statement_name.as_deref().unwrap_or("")
                        ),
                    )));
                }
                let portal_name = message
                    .portal_name
                    .as_deref()
                    .unwrap_or(pgwire::api::DEFAULT_NAME);
                client.portal_store().put_empty_portal(portal_name);
            }
            None => return Err(PgWireError::StatementNotFound(statement_name.to_owned())),
        }
        client
            .send(PgWireBackendMessage::BindComplete(
                pgwire::messages::extendedquery::BindComplete::new(),
            ))
            .await?;
        Ok(())
    }

    /// Describe of a statement that returns no rows answers NoData after its
    /// ParameterDescription, as PostgreSQL does (pgwire's own sends an empty RowDescription
    /// once there are parameters).
    async fn on_describe<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::extendedquery::Describe,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = String>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if message.target_type == b'S' {
            let name = message.name.as_deref().unwrap_or(pgwire::api::DEFAULT_NAME);
            if let Some(pgwire::api::store::Entry::Value(stmt)) =
                client.portal_store().get_statement(name)
            {
                let r = self.do_describe_statement(client, &stmt).await?;
                if r.fields.is_empty() {
                    client
                        .send(PgWireBackendMessage::ParameterDescription(
                            pgwire::messages::data::ParameterDescription::new(
                                r.parameters.iter().map(|t| t.oid()).collect(),
                            ),
                        ))
                        .await?;
                    client
                        .send(PgWireBackendMessage::NoData(
                            pgwire::messages::data::NoData::new(),
                        ))
                        .await?;
                } else {
                    pgwire::api::query::send_describe_response(client, &r).await?;
                }
                return Ok(());
            }
        }
        self._on_describe(client, message).await
    }

    async fn do_describe_statement<C>(
        &self,
        client: &mut C,
        target: &StoredStatement<String>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = String>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut session = self.session().await;
        self.name_database(client, &mut session).await;
        let (params, schema) = session
            .describe(&target.statement)
            .await
            .map_err(|e| user_error(&e))?;
        // The types the client declared in its Parse win, as in PostgreSQL; the rest are
        // inferred, and one nothing determines is text (as PostgreSQL resolves `SELECT $1`).
        let declared = &target.parameter_types;
        let params = (0..params.len().max(declared.len()))
            .map(|i| {
                declared
                    .get(i)
                    .cloned()
                    .flatten()
                    .filter(|t| *t != Type::UNKNOWN)
                    .or_else(|| {
                        params
                            .get(i)
                            .cloned()
                            .flatten()
                            .and_then(|f| param_type(&f))
                    })
                    .unwrap_or(Type::TEXT)
            })
            .collect();
        Ok(match schema {
            Some((s, origins)) => DescribeStatementResponse::new(params, field_infos(&s, &origins)),
            None => DescribeStatementResponse::new(params, vec![]),
        })
    }

    async fn do_describe_portal<C>(
        &self,
        _client: &mut C,
        target: &Portal<String>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = String>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut session = self.session().await;
        let (_, schema) = session
            .describe(&target.statement.statement)
            .await
            .map_err(|e| user_error(&e))?;
        Ok(match schema {
            Some((s, origins)) => DescribePortalResponse::new(field_infos_as(
                &s,
                &origins,
                &target.result_column_format,
            )),
            None => DescribePortalResponse::no_data(),
        })
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<String>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = String>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut session = self.session().await;
        let (params, cancel) = self.start_portal(&mut session, portal).await?;
        let started = std::time::Instant::now();
        let phases = session.phases();
        let mut results = session
            .execute_with_params(&portal.statement.statement, &params)
            .await;
        drop(cancel);
        self.metrics
            .message(started.elapsed(), &session.phases().since(&phases));
        for r in &results {
            self.metrics.outcome(r);
        }
        client.set_transaction_status(status_of(session.status()));
        self.publish(&session);
        if results.len() > 1 {
            return Err(user_error(&SqlError::new(
                "42601",
                "cannot insert multiple commands into a prepared statement",
            )));
        }
        let show = matches!(results.last(), Some(Ok(Output::Show { .. })));
        match results.pop().map(|r| r.map(Output::into_rows)) {
            None => Ok(Response::EmptyQuery),
            Some(Err(e)) => Err(user_error(&e)),
            Some(Ok(Output::Rows {
                schema,
                batches,
                origins,
            })) => {
                // Each column in the format the Bind asked for (the portal's RowDescription
                // came from Describe).
                let format = &portal.result_column_format;
                let n = schema.fields().len();
                check_formats(format, n, |k| {
                    format!("bind message has {k} result formats but query has {n} columns")
                })?;
                let fields = Arc::new(field_infos_as(&schema, &origins, format));
                let types: Vec<PgType> = schema.fields().iter().map(|f| column_type(f).0).collect();
                let mut rows = Vec::new();
                for b in &batches {
                    for row in 0..b.num_rows() {
                        let mut data = BytesMut::new();
                        for (i, col) in b.columns().iter().enumerate() {
                            if is_binary(format, i) {
                                binary_value(&mut data, col.as_ref(), row, types[i])
                                    .map_err(|e| user_error(&e))?;
                            } else {
                                text_field(&mut data, col.as_ref(), row);
                            }
                        }
                        rows.push(Ok(DataRow::new(data, b.num_columns() as i16)));
                    }
                }
                let mut response =
                    pgwire::api::results::QueryResponse::new(fields, futures::stream::iter(rows));
                if show {
                    response.set_command_tag("SHOW");
                }
                Ok(Response::Query(response))
            }
            Some(Ok(Output::Command(tag))) => {
                let mut parts = tag.rsplitn(2, ' ');
                let last = parts.next().unwrap_or_default();
                let t = match (parts.next(), last.parse::<usize>()) {
                    // `INSERT 0 n`: pgwire writes the oid word when it is given one.
                    (Some("INSERT 0"), Ok(n)) => pgwire::api::results::Tag::new("INSERT")
                        .with_oid(0)
                        .with_rows(n),
                    (Some(head), Ok(n)) => pgwire::api::results::Tag::new(head).with_rows(n),
                    _ => pgwire::api::results::Tag::new(&tag),
                };
                Ok(Response::Execution(t))
            }
            Some(Ok(_)) => Err(user_error(&SqlError::unsupported(
                "COPY in a portal read in parts is not supported; execute it to its end (a row limit of 0)",
            ))),
        }
    }
}

/// Whether value `i` goes in binary under a Bind's format codes (pgwire's own lookup panics
/// past the end of a list of codes; the counts are checked by [`check_formats`]).
pub(super) fn is_binary(format: &Format, i: usize) -> bool {
    match format {
        Format::UnifiedText => false,
        Format::UnifiedBinary => true,
        Format::Individual(codes) => codes.get(i) == Some(&1),
    }
}

/// A Bind whose list of format codes does not fit what it formats is refused, as PostgreSQL
/// refuses it (`08P01`).
fn check_formats(format: &Format, n: usize, message: impl Fn(usize) -> String) -> PgWireResult<()> {
    match format {
        Format::Individual(codes) if codes.len() != n => {
            Err(user_error(&SqlError::new("08P01", message(codes.len()))))
        }
        _ => Ok(()),
    }
}

/// The PostgreSQL type a parameter is announced as.
fn param_type(f: &Field) -> Option<Type> {
    pg_type_of(f).and_then(|(t, _)| Type::from_oid(t.oid))
}

/// A Bind's parameter values as the expressions that take the `$n`s' places. Each value's
/// type is the one the client declared in its Parse, else the one inferred from the
/// statement (as Describe announced it); a binary value of no known type is refused.
pub(super) async fn bind_parameters(
    session: &mut Session,
    portal: &Portal<String>,
) -> PgWireResult<Vec<rocklake_sql::datafusion::sql::sqlparser::ast::Expr>> {
    if portal.parameters.is_empty() {
        return Ok(vec![]);
    }
    let n = portal.parameters.len();
    check_formats(&portal.parameter_format, n, |k| {
        format!("bind message has {k} parameter formats but {n} parameters")
    })?;
    let declared = &portal.statement.parameter_types;
    let known = |i: usize| {
        declared
            .get(i)
            .cloned()
            .flatten()
            .filter(|t| *t != Type::UNKNOWN)
    };
    let inferred = if (0..portal.parameters.len()).all(|i| known(i).is_some()) {
        vec![]
    } else {
        session
            .describe(&portal.statement.statement)
            .await
            .map(|(p, _)| p)
            .unwrap_or_default()
    };
    portal
        .parameters
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let oid = known(i)
                .or_else(|| {
                    inferred
                        .get(i)
                        .cloned()
                        .flatten()
                        .and_then(|f| param_type(&f))
                })
                .map_or(0, |t| t.oid());
            crate::wire::param_expr(v.as_deref(), is_binary(&portal.parameter_format, i), oid)
                .map_err(|e| user_error(&e))
        })
        .collect()
}
