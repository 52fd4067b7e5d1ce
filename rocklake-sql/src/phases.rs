//! Where a session's statement time goes: parse, plan, optimise and physical planning, storage
//! reads, execution and the commit's wait, summed per session (cheap atomics, always on).
//!
//! The wire server logs each statement's split at `debug`, and the `sql` benchmark group prints
//! the split of its workloads, so the README's breakdown comes from the code that runs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// One phase of a statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// SQL text to statements (sqlparser).
    Parse,
    /// A statement to DataFusion's logical plan (name resolution, `SqlToRel`).
    Plan,
    /// DataFusion's analyser, optimiser and physical planner, storage reads excluded.
    Optimize,
    /// Reading rows from the store and turning them into Arrow arrays (table scans, the rows an
    /// UPDATE or DELETE changes).
    Storage,
    /// Running a plan's operators, and the SQL layer's own work on rows (casts, keys, writes
    /// into the transaction).
    Execute,
    /// COMMIT: the batch, its preconditions and the engine's durable flush.
    Commit,
}

/// Every phase, in the order the README prints them.
pub const PHASES: [Phase; 6] = [
    Phase::Parse,
    Phase::Plan,
    Phase::Optimize,
    Phase::Storage,
    Phase::Execute,
    Phase::Commit,
];

impl Phase {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Parse => "parse",
            Phase::Plan => "plan",
            Phase::Optimize => "optimize",
            Phase::Storage => "storage",
            Phase::Execute => "execute",
            Phase::Commit => "commit",
        }
    }
}

/// Nanoseconds per phase, and the statements they were spent on.
#[derive(Debug, Default)]
pub struct PhaseTimes {
    nanos: [AtomicU64; 6],
    statements: AtomicU64,
}

/// A copy of [`PhaseTimes`] at one moment; subtract two to get what happened between them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhaseSnapshot {
    /// Nanoseconds per phase, in [`PHASES`] order.
    pub nanos: [u64; 6],
    /// Statements run.
    pub statements: u64,
}

impl PhaseTimes {
    /// Add `nanos` to `phase`.
    pub fn add(&self, phase: Phase, nanos: u64) {
        self.nanos[phase as usize].fetch_add(nanos, Ordering::Relaxed);
    }

    /// Add the time since `start` to `phase`.
    pub fn since(&self, phase: Phase, start: Instant) {
        self.add(phase, start.elapsed().as_nanos() as u64);
    }

    /// Count one statement.
    pub fn statement(&self) {
        self.statements.fetch_add(1, Ordering::Relaxed);
    }

    /// The totals now.
    pub fn snapshot(&self) -> PhaseSnapshot {
        let mut nanos = [0u64; 6];
        for (n, a) in nanos.iter_mut().zip(&self.nanos) {
            *n = a.load(Ordering::Relaxed);
        }
        PhaseSnapshot {
            nanos,
            statements: self.statements.load(Ordering::Relaxed),
        }
    }
}

impl PhaseSnapshot {
    /// What was spent between `earlier` and `self`.
    pub fn since(&self, earlier: &PhaseSnapshot) -> PhaseSnapshot {
        let mut nanos = [0u64; 6];
        for (i, n) in nanos.iter_mut().enumerate() {
            *n = self.nanos[i].saturating_sub(earlier.nanos[i]);
        }
        PhaseSnapshot {
            nanos,
            statements: self.statements.saturating_sub(earlier.statements),
        }
    }

    /// Nanoseconds spent in `phase`.
    pub fn get(&self, phase: Phase) -> u64 {
        self.nanos[phase as usize]
    }

    /// `parse 3.1µs plan 40.2µs ...`, each phase's total divided by `per` (e.g. the number of
    /// samples of a benchmark).
    pub fn render(&self, per: u64) -> String {
        let per = per.max(1) as f64;
        PHASES
            .iter()
            .map(|p| format!("{} {:.1}µs", p.name(), self.get(*p) as f64 / per / 1e3))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_subtract_per_phase() {
        let t = PhaseTimes::default();
        t.add(Phase::Plan, 5);
        let a = t.snapshot();
        t.add(Phase::Plan, 7);
        t.add(Phase::Commit, 11);
        t.statement();
        let d = t.snapshot().since(&a);
        assert_eq!(d.get(Phase::Plan), 7);
        assert_eq!(d.get(Phase::Commit), 11);
        assert_eq!(d.get(Phase::Parse), 0);
        assert_eq!(d.statements, 1);
        assert_eq!(
            d.render(1),
            "parse 0.0µs plan 0.0µs optimize 0.0µs storage 0.0µs execute 0.0µs commit 0.0µs"
        );
    }
}
