//! How a result goes out: its RowDescription (or Describe's field list), with each column's
//! PostgreSQL type and the table column it is read from, and the bytes of `COPY ... TO STDOUT`
//! in text, CSV or binary.

use bytes::{BufMut, Bytes, BytesMut};
use futures::{Sink, SinkExt};
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::api::Type;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyOutResponse};
use pgwire::messages::data::{FieldDescription, RowDescription};
use pgwire::messages::PgWireBackendMessage;
use rocklake_sql::datafusion::arrow::array::RecordBatch;
use rocklake_sql::datafusion::arrow::datatypes::{Field, SchemaRef};
use rocklake_sql::origins::Origins;
use rocklake_sql::pg_types::{pg_type, pg_type_of, PgType};
use rocklake_sql::{CopyFormat, SqlError};

use super::is_binary;
use crate::wire::{copy_text_escape, text_value, BinaryColumn, COPY_SIGNATURE};

/// The PostgreSQL type a result column is sent as (`text` when nothing better is known: the
/// value then goes as its text form).
pub(super) fn column_type(f: &Field) -> (PgType, i32) {
    pg_type_of(f).unwrap_or_else(|| {
        (
            pg_type("text").unwrap_or(rocklake_sql::pg_types::PG_TYPES[7]),
            -1,
        )
    })
}

/// A result's RowDescription: each column's name, the table column it is read from (if it
/// is one, as PostgreSQL says), and its type.
pub(super) fn row_description(
    schema: &SchemaRef,
    origins: &Origins,
    binary: bool,
) -> RowDescription {
    let from = origins.resolve(schema.fields().len());
    RowDescription::new(
        schema
            .fields()
            .iter()
            .zip(from)
            .map(|(f, (table, column))| {
                let (t, typmod) = column_type(f);
                FieldDescription::new(
                    f.name().clone(),
                    table,
                    column,
                    t.oid,
                    t.len,
                    typmod,
                    i16::from(binary),
                )
            })
            .collect(),
    )
}

pub(super) fn field_infos(schema: &SchemaRef, origins: &Origins) -> Vec<FieldInfo> {
    field_infos_as(schema, origins, &Format::UnifiedText)
}

/// The result columns, each in the format the client asked for in its Bind.
pub(super) fn field_infos_as(
    schema: &SchemaRef,
    origins: &Origins,
    format: &Format,
) -> Vec<FieldInfo> {
    let from = origins.resolve(schema.fields().len());
    schema
        .fields()
        .iter()
        .zip(from)
        .enumerate()
        .map(|(i, (f, (table, column)))| {
            let (t, typmod) = column_type(f);
            FieldInfo::new(
                f.name().clone(),
                (table != 0).then_some(table),
                (column != 0).then_some(column),
                Type::from_oid(t.oid).unwrap_or(Type::TEXT),
                if is_binary(format, i) {
                    FieldFormat::Binary
                } else {
                    FieldFormat::Text
                },
            )
            .with_type_size(t.len)
            .with_type_modifier(typmod)
        })
        .collect()
}

/// How `COPY ... TO STDOUT` writes its rows: the format, each column's PostgreSQL type, and
/// the bytes of the message being built.
pub(super) struct CopyOut {
    format: CopyFormat,
    types: Vec<PgType>,
    buf: BytesMut,
    /// Whether CopyOutResponse has gone out.
    started: bool,
}

impl CopyOut {
    /// Start a copy of `schema`'s columns: the text format's header line is the first chunk
    /// (pushed to `chunks`); the binary header waits to go with the first row.
    pub(super) fn new(schema: &SchemaRef, format: CopyFormat, chunks: &mut Vec<Bytes>) -> CopyOut {
        let types: Vec<PgType> = schema.fields().iter().map(|f| column_type(f).0).collect();
        let mut buf = BytesMut::new();
        if format.binary {
            buf.extend_from_slice(COPY_SIGNATURE);
            buf.put_u32(0);
            buf.put_u32(0);
        } else if format.header {
            let names: Vec<String> = schema
                .fields()
                .iter()
                .map(|f| {
                    if format.csv {
                        csv_quote(f.name(), &format)
                    } else {
                        copy_text_escape(f.name(), format.delimiter)
                    }
                })
                .collect();
            buf.extend_from_slice(names.join(&format.delimiter.to_string()).as_bytes());
            buf.put_u8(b'\n');
            chunks.push(buf.split().freeze());
        }
        CopyOut {
            format,
            types,
            buf,
            started: false,
        }
    }

    /// `b`'s rows, one chunk each: clients such as DuckDB's postgres scanner decode each
    /// CopyData as whole rows, as PostgreSQL sends them. A value the binary format cannot
    /// carry is an error.
    pub(super) fn rows(
        &mut self,
        b: &RecordBatch,
        chunks: &mut Vec<Bytes>,
    ) -> Result<(), SqlError> {
        let format = &self.format;
        let buf = &mut self.buf;
        // Each column's writer is chosen once for the batch, not per value.
        let columns: Vec<BinaryColumn<'_>> = if format.binary {
            b.columns()
                .iter()
                .zip(&self.types)
                .map(|(col, ty)| BinaryColumn::new(col.as_ref(), *ty))
                .collect()
        } else {
            Vec::new()
        };
        for row in 0..b.num_rows() {
            // Rows share one allocation (each chunk a slice of it), not one each.
            if buf.capacity() - buf.len() < 1024 {
                buf.reserve(64 * 1024);
            }
            if format.binary {
                buf.put_i16(b.num_columns() as i16);
                for column in &columns {
                    column.write(buf, row)?;
                }
            } else {
                let fields: Vec<String> = b
                    .columns()
                    .iter()
                    .map(|c| match text_value(c.as_ref(), row) {
                        None => format.null.clone(),
                        Some(v) if format.csv => csv_quote(&v, format),
                        Some(v) => copy_text_escape(&v, format.delimiter),
                    })
                    .collect();
                buf.extend_from_slice(fields.join(&format.delimiter.to_string()).as_bytes());
                buf.put_u8(b'\n');
            }
            chunks.push(buf.split().freeze());
        }
        Ok(())
    }

    /// Send CopyOutResponse if it has not gone out, then `chunks`.
    pub(super) async fn send<C>(&mut self, client: &mut C, chunks: Vec<Bytes>) -> PgWireResult<()>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !self.started {
            self.started = true;
            let n = self.types.len() as i16;
            let binary = self.format.binary;
            client
                .feed(PgWireBackendMessage::CopyOutResponse(CopyOutResponse::new(
                    i8::from(binary),
                    n,
                    vec![i16::from(binary); n as usize],
                )))
                .await?;
        }
        for c in chunks {
            client
                .feed(PgWireBackendMessage::CopyData(CopyData::new(c)))
                .await?;
        }
        Ok(())
    }

    /// A whole result's COPY: every batch is encoded before the first message, so a value
    /// without a binary form is the statement's error, not a broken COPY stream; then the
    /// rows and the end. `Ok(Err(_))`: nothing was sent.
    pub(super) async fn send_whole<C>(
        schema: &SchemaRef,
        batches: &[RecordBatch],
        format: CopyFormat,
        client: &mut C,
    ) -> PgWireResult<Result<(), SqlError>>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut copy = CopyOut::new(schema, format, &mut chunks);
        if let Err(e) = batches.iter().try_for_each(|b| copy.rows(b, &mut chunks)) {
            return Ok(Err(e));
        }
        copy.send(client, chunks).await?;
        copy.finish(client).await?;
        Ok(Ok(()))
    }

    /// End the copy: the binary trailer (a message of its own), then CopyDone.
    pub(super) async fn finish<C>(mut self, client: &mut C) -> PgWireResult<()>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut chunks = Vec::new();
        if self.format.binary {
            self.buf.put_i16(-1);
            chunks.push(self.buf.split().freeze());
        }
        self.send(client, chunks).await?;
        client
            .feed(PgWireBackendMessage::CopyDone(CopyDone::new()))
            .await?;
        Ok(())
    }
}

/// A CSV field as PostgreSQL writes it: quoted when it holds the delimiter, the quote, a
/// line break, or is the NULL marker's text (so that it reads back as a value, not NULL);
/// inside quotes, the quote and escape characters are escaped.
fn csv_quote(v: &str, f: &CopyFormat) -> String {
    let needs = v == f.null
        || v.chars()
            .any(|c| c == f.delimiter || c == f.quote || c == '\n' || c == '\r')
        || (f.escape != f.quote && v.contains(f.escape))
        || v == "\\.";
    if !needs {
        return v.to_string();
    }
    let mut s = String::with_capacity(v.len() + 2);
    s.push(f.quote);
    for c in v.chars() {
        if c == f.quote || c == f.escape {
            s.push(f.escape);
        }
        s.push(c);
    }
    s.push(f.quote);
    s
}
