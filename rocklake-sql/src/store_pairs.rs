//! `rocklake_store_pairs()`: every key and value of the store as of one committed view, in key
//! order, as a table of two `bytea` columns. `rocklake backup` reads a running server's store
//! through it (`COPY (SELECT key, value FROM rocklake_store_pairs()) TO STDOUT (FORMAT
//! binary)`) and writes the pairs into a store of its own, so a served catalog is backed up
//! without stopping its server, over the same authenticated connection DuckDB uses.
//!
//! The rows stream a page at a time from one
//! [`Keyspace::committed_view`](rocklake_core::Keyspace::committed_view): every commit acknowledged before the statement
//! started and none after, whatever is committed while the pairs are read.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BinaryBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{plan_err, DataFusionError};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use rocklake_core::backend::{KeyRange, Order, ReadView};

use crate::db::Database;

/// The name clients call it by.
pub const NAME: &str = "rocklake_store_pairs";

/// Pairs per batch of rows.
const PAGE: usize = 4096;

/// The table function, registered on each session.
#[derive(Debug)]
pub(crate) struct StorePairs {
    db: Arc<Database>,
}

impl StorePairs {
    pub(crate) fn new(db: Arc<Database>) -> StorePairs {
        StorePairs { db }
    }
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Binary, false),
        Field::new("value", DataType::Binary, false),
    ]))
}

impl TableFunctionImpl for StorePairs {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::common::Result<Arc<dyn TableProvider>> {
        if !args.exprs().is_empty() {
            return plan_err!("{NAME}() takes no arguments");
        }
        let part = Pairs {
            db: self.db.clone(),
            schema: schema(),
        };
        Ok(Arc::new(StreamingTable::try_new(
            schema(),
            vec![Arc::new(part)],
        )?))
    }
}

#[derive(Debug)]
struct Pairs {
    db: Arc<Database>,
    schema: SchemaRef,
}

/// Where the stream stands: not started, reading from `range` of `view`, or done.
enum Step {
    Start(Arc<Database>),
    Next(Arc<dyn ReadView>, KeyRange),
    Done,
}

fn external(e: rocklake_core::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl PartitionStream for Pairs {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let schema = self.schema.clone();
        let out = schema.clone();
        let stream = futures::stream::try_unfold(Step::Start(self.db.clone()), move |step| {
            let schema = schema.clone();
            async move {
                let (view, range) = match step {
                    Step::Done => return Ok(None),
                    Step::Start(db) => (
                        db.keyspace().committed_view().await.map_err(external)?,
                        KeyRange::all(),
                    ),
                    Step::Next(view, range) => (view, range),
                };
                let mut keys = BinaryBuilder::with_capacity(PAGE, PAGE * 16);
                let mut values = BinaryBuilder::with_capacity(PAGE, PAGE * 64);
                let mut last = Vec::new();
                let got = view
                    .visit(&range, Order::Ascending, PAGE, &mut |k, v| {
                        keys.append_value(k);
                        values.append_value(v);
                        last.clear();
                        last.extend_from_slice(k);
                        true
                    })
                    .await
                    .map_err(external)?;
                if got == 0 {
                    return Ok(None);
                }
                let columns: Vec<ArrayRef> =
                    vec![Arc::new(keys.finish()), Arc::new(values.finish())];
                let batch = RecordBatch::try_new(schema, columns)?;
                let next = if got < PAGE {
                    Step::Done
                } else {
                    Step::Next(view, range.after(&last))
                };
                Ok(Some((batch, next)))
            }
        });
        Box::pin(RecordBatchStreamAdapter::new(out, stream))
    }
}
