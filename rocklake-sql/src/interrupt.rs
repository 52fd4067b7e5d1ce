//! Stopping a running statement: a cancel request, or `statement_timeout`.
//!
//! DataFusion has no way to stop a plan from outside, and a CPU-bound operator (a join, an
//! aggregate over a long input) never returns to the runtime until it is done, so neither a
//! dropped future nor a timer can stop it. Instead every node of a plan the session runs is
//! wrapped in an `InterruptExec`, whose stream looks at the session's [`Interrupt`] before
//! each batch it hands up and fails with PostgreSQL's `57014` once the statement is cancelled
//! or past its deadline; each batch also spends a unit of tokio's cooperative budget, so a
//! plan that never waits still lets the runtime serve other sockets. The statement then ends
//! as any failed statement does (its writes
//! gone; inside a block the block fails), and work that is not a plan's, such as a commit
//! already under way, is never cut short.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::Result as DfResult;
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::channel::oneshot;
use futures::{Stream, StreamExt};

use crate::error::{to_df, SqlError};

/// SQLSTATE of a cancelled statement, by request or by timeout.
const QUERY_CANCELED: &str = "57014";

/// Whether the statement a session is running should stop. Shared by the session (which
/// arms it per statement), its plans (which look at it) and whoever cancels.
#[derive(Debug)]
pub struct Interrupt {
    base: Instant,
    /// Nanoseconds after `base` at which the running statement times out; 0 for none.
    deadline: AtomicU64,
    cancelled: AtomicBool,
    /// Fires when the client's cancel request arrives. Looked at by the plan itself, not
    /// by a task of its own: a plan that never yields holds its thread, and a task woken
    /// there would wait behind it.
    cancel_signal: Mutex<Option<oneshot::Receiver<()>>>,
}

impl Default for Interrupt {
    fn default() -> Self {
        Interrupt {
            base: Instant::now(),
            deadline: AtomicU64::new(0),
            cancelled: AtomicBool::new(false),
            cancel_signal: Mutex::new(None),
        }
    }
}

impl Interrupt {
    /// Ask the running statement to stop (a cancel request): it fails with `57014` at its
    /// plan's next batch. A statement that has no plan running, or is committing, finishes.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
    }

    /// Cancel when `signal` fires (a value sent; a dropped sender cancels nothing), until
    /// [`Interrupt::stop_watching`].
    pub fn cancel_on(&self, signal: oneshot::Receiver<()>) {
        *self.cancel_signal.lock().unwrap_or_else(|e| e.into_inner()) = Some(signal);
    }

    /// The request is answered: its cancel signal no longer applies.
    pub fn stop_watching(&self) {
        self.cancel_signal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    /// A new request from the client: an earlier cancel no longer applies.
    pub(crate) fn reset(&self) {
        self.cancelled.store(false, Ordering::Release);
        self.deadline.store(0, Ordering::Release);
    }

    fn signalled(&self) -> bool {
        let mut signal = self.cancel_signal.lock().unwrap_or_else(|e| e.into_inner());
        match signal.as_mut().map(|s| s.try_recv()) {
            Some(Ok(Some(()))) => {
                signal.take();
                self.cancel();
                true
            }
            _ => false,
        }
    }

    /// A statement starts: it times out `timeout` from now (never for `None`).
    pub(crate) fn arm(&self, timeout: Option<Duration>) {
        let at = timeout.map_or(0, |t| {
            let nanos = (self.base.elapsed() + t).as_nanos();
            u64::try_from(nanos).unwrap_or(u64::MAX).max(1)
        });
        self.deadline.store(at, Ordering::Release);
    }

    /// The error that stops the statement, if it must stop.
    pub(crate) fn check(&self) -> Result<(), SqlError> {
        if self.cancelled.load(Ordering::Acquire) || self.signalled() {
            return Err(SqlError::new(
                QUERY_CANCELED,
                "canceling statement due to user request",
            ));
        }
        let at = self.deadline.load(Ordering::Acquire);
        if at != 0 && self.base.elapsed().as_nanos() >= u128::from(at) {
            return Err(SqlError::new(
                QUERY_CANCELED,
                "canceling statement due to statement timeout",
            ));
        }
        Ok(())
    }
}

/// `plan` with every node wrapped so that its output stops at `interrupt`.
pub(crate) fn interruptible(
    plan: Arc<dyn ExecutionPlan>,
    interrupt: &Arc<Interrupt>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let wrapped: Arc<dyn ExecutionPlan> = Arc::new(InterruptExec {
            input: node,
            interrupt: interrupt.clone(),
        });
        Ok(Transformed::yes(wrapped))
    })
    .map(|t| t.data)
}

/// One plan node whose batches stop at the session's [`Interrupt`].
#[derive(Debug)]
pub(crate) struct InterruptExec {
    input: Arc<dyn ExecutionPlan>,
    interrupt: Arc<Interrupt>,
}

impl DisplayAs for InterruptExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InterruptExec")
    }
}

impl ExecutionPlan for InterruptExec {
    fn name(&self) -> &str {
        "InterruptExec"
    }

    /// Code that looks for a particular node type sees the wrapped node.
    fn downcast_delegate(&self) -> Option<&dyn ExecutionPlan> {
        Some(self.input.as_ref())
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        match (children.pop(), children.is_empty()) {
            (Some(input), true) => Ok(Arc::new(InterruptExec {
                input,
                interrupt: self.interrupt.clone(),
            })),
            _ => Err(to_df(SqlError::new(
                "XX000",
                "InterruptExec takes exactly one child",
            ))),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        Ok(Box::pin(InterruptStream {
            input: self.input.execute(partition, context)?,
            interrupt: self.interrupt.clone(),
        }))
    }
}

struct InterruptStream {
    input: SendableRecordBatchStream,
    interrupt: Arc<Interrupt>,
}

impl Stream for InterruptStream {
    type Item = DfResult<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Err(e) = self.interrupt.check() {
            return Poll::Ready(Some(Err(to_df(e))));
        }
        // Each batch spends a unit of tokio's cooperative budget: a plan that never waits
        // (a join made in its own loop) still hands its thread back every so often, so the
        // runtime goes on accepting connections and reading sockets, cancel requests among
        // them, instead of stalling until the plan is done.
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let next = self.input.poll_next_unpin(cx);
        if next.is_ready() {
            coop.made_progress();
        }
        next
    }
}

impl RecordBatchStream for InterruptStream {
    fn schema(&self) -> SchemaRef {
        self.input.schema()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_and_deadline_stop_and_reset_clears() {
        let i = Interrupt::default();
        assert!(i.check().is_ok());
        i.arm(Some(Duration::from_secs(3600)));
        assert!(i.check().is_ok(), "an hour away");
        i.arm(Some(Duration::ZERO));
        let e = i.check().unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            ("57014", "canceling statement due to statement timeout")
        );
        i.arm(None);
        assert!(i.check().is_ok());
        i.cancel();
        assert_eq!(
            i.check().unwrap_err().message,
            "canceling statement due to user request"
        );
        i.reset();
        assert!(i.check().is_ok());
        let (tx, rx) = oneshot::channel();
        i.cancel_on(rx);
        assert!(i.check().is_ok(), "not fired yet");
        tx.send(()).unwrap();
        assert!(i.check().is_err(), "fired");
        i.reset();
        let (tx, rx) = oneshot::channel::<()>();
        i.cancel_on(rx);
        drop(tx);
        assert!(i.check().is_ok(), "a dropped sender cancels nothing");
    }
}
