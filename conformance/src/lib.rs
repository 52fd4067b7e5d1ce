//! One suite of checks that every RockLake engine must pass.
//!
//! Each check is a plain async function over a [`Target`]: a store factory of one engine (it
//! makes fresh stores at new locations and opens them again), and, where the engine persists, a
//! way to run a writer in a child process that can be killed. Each engine crate stamps the whole
//! suite in its own `tests/` with one [`suite!`] call (one `#[tokio::test]` per check, so one
//! failure never hides another; the crash check's child is the same test binary, run again);
//! `rocklake conformance URL` runs the same checks against any store and prints a table.
//!
//! What an engine cannot do is declared by its [`Capabilities`]: a check that does not apply
//! returns [`Outcome::NotApplicable`] with the reason, and the table shows it; nothing is skipped
//! silently.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use rocklake_core::backend::{
    Capabilities, KeyRange, KvBackend, Order, Pager, ReadView, WriteBatch,
};
use rocklake_core::error::{Error, Result};

pub mod checks;
pub mod crash;
#[cfg(target_os = "linux")]
pub mod cutfs;
pub mod cutstore;
pub mod faulty;
pub mod power;
#[cfg(target_os = "linux")]
pub mod power_cut;
pub mod rows;

pub use faulty::{FaultyBackend, FaultyHandle};

/// The store factory: opens (creating if needed) the store at a location of the target (a URL
/// for `rocklake conformance`, `dir:///path` for [`Target::in_temp_folders`]).
pub type Opener =
    Arc<dyn Fn(String) -> BoxFuture<'static, Result<Arc<dyn KvBackend>>> + Send + Sync>;

/// Builds the command that runs a crash child writing to a URL (see [`crash`]).
pub type ChildCommand = Arc<dyn Fn(&str) -> Command + Send + Sync>;

/// One engine configuration the suite runs against.
#[derive(Clone)]
pub struct Target {
    /// Display name, e.g. `slatedb-file`.
    pub name: String,
    /// Base URL; fresh stores are carved below it (`{base}/case-N`) unless `shared_url` is set.
    pub base: String,
    /// Every `open` of the base URL is a new empty store (`memory://`, `model://`).
    pub ephemeral: bool,
    /// Opens URLs.
    pub opener: Opener,
    /// Runs a crash child, when the engine persists.
    pub child: Option<ChildCommand>,
    /// Kill rounds of the crash check.
    pub crash_rounds: usize,
    /// Keeps the temporary folder alive for as long as the target.
    pub _dir: Option<Arc<tempfile::TempDir>>,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("base", &self.base)
            .finish()
    }
}

static CASE: AtomicUsize = AtomicUsize::new(0);

/// A fresh store of a target, with its URL.
pub struct Store {
    /// The URL it was opened with (reopen with [`Target::open`]).
    pub url: String,
    /// The open store.
    pub backend: Arc<dyn KvBackend>,
}

impl Target {
    /// A target whose stores live under a new temporary folder: `scheme:///tmp/xyz/case-N`.
    pub fn in_temp_dir(
        name: &str,
        scheme: &str,
        opener: Opener,
        child: Option<ChildCommand>,
    ) -> Target {
        if crash::in_child() {
            // The crash child opens the URL it is given; it needs no folder of its own (and a
            // killed child would leave it behind).
            return Target {
                name: name.into(),
                base: String::new(),
                ephemeral: false,
                opener,
                child,
                crash_rounds: 0,
                _dir: None,
            };
        }
        let dir = tempfile::Builder::new()
            .prefix("rocklake-conformance-")
            .tempdir()
            .expect("a temporary folder");
        let base = format!("{scheme}://{}", dir.path().display());
        Target {
            name: name.into(),
            base,
            ephemeral: false,
            opener,
            child,
            crash_rounds: crash_rounds_from_env(20),
            _dir: Some(Arc::new(dir)),
        }
    }

    /// A target whose stores are folders under a new temporary folder, each opened with `open`.
    /// [`suite!`] gives it a crash child: the test binary itself.
    pub fn in_temp_folders<F, Fut>(name: &str, open: F) -> Target
    where
        F: Fn(PathBuf) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Arc<dyn KvBackend>>> + Send + 'static,
    {
        let opener: Opener = Arc::new(move |location: String| {
            let path = PathBuf::from(location.strip_prefix("dir://").unwrap_or(&location));
            Box::pin(open(path))
        });
        Target::in_temp_dir(name, "dir", opener, None)
    }

    /// A target of in-memory stores, each made by `make` (every open is new and empty).
    pub fn in_memory<F>(name: &str, make: F) -> Target
    where
        F: Fn() -> Arc<dyn KvBackend> + Send + Sync + 'static,
    {
        let opener: Opener = Arc::new(move |_| {
            let store = make();
            Box::pin(async move { Ok(store) })
        });
        Target::ephemeral(name, "memory://", opener)
    }

    /// A target of in-memory stores (every open is new and empty).
    pub fn ephemeral(name: &str, url: &str, opener: Opener) -> Target {
        Target {
            name: name.into(),
            base: url.into(),
            ephemeral: true,
            opener,
            child: None,
            crash_rounds: 0,
            _dir: None,
        }
    }

    /// A target below an arbitrary URL (a user's bucket or disk).
    pub fn at(
        name: &str,
        base: &str,
        opener: Opener,
        child: Option<ChildCommand>,
        crash_rounds: usize,
    ) -> Target {
        let ephemeral = base.starts_with("memory://") || base.starts_with("model://");
        Target {
            name: name.into(),
            // `file:///x/` and `file:///x` name one folder; `memory://` keeps its slashes.
            base: if ephemeral {
                base.into()
            } else {
                base.trim_end_matches('/').into()
            },
            ephemeral,
            opener,
            child,
            crash_rounds,
            _dir: None,
        }
    }

    /// Give a persistent target without a crash child the test binary it runs in as one
    /// ([`crash::child_command`]); `module` is the `module_path!()` of the stamped suite.
    pub fn with_self_child(mut self, module: &str) -> Target {
        if self.child.is_none() && !self.ephemeral {
            self.child = crash::child_command(module);
        }
        self
    }

    /// Make a fresh, empty store.
    pub async fn fresh(&self) -> Result<Store> {
        let url = if self.ephemeral {
            self.base.clone()
        } else {
            let n = CASE.fetch_add(1, AtomicOrdering::Relaxed);
            let (base, query) = match self.base.split_once('?') {
                Some((b, q)) => (b.to_string(), format!("?{q}")),
                None => (self.base.clone(), String::new()),
            };
            format!("{base}/case-{}-{n}{query}", std::process::id())
        };
        let backend = (self.opener)(url.clone()).await?;
        let mut probe = Pager::new(backend.as_ref(), KeyRange::all(), Order::Ascending, 1);
        if probe.next_page().await?.is_some() {
            return Err(Error::Conflict {
                message: format!("fresh store {url} is not empty"),
                retryable: false,
            });
        }
        Ok(Store { url, backend })
    }

    /// Open a URL of this target again.
    pub async fn open(&self, url: &str) -> Result<Arc<dyn KvBackend>> {
        (self.opener)(url.to_string()).await
    }
}

/// The crash rounds asked for by `ROCKLAKE_CRASH_ROUNDS`, or `default`.
///
/// # Panics
/// When the variable is set but not a whole number: a typo must not quietly run the default.
pub fn crash_rounds_from_env(default: usize) -> usize {
    match std::env::var("ROCKLAKE_CRASH_ROUNDS") {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            panic!("ROCKLAKE_CRASH_ROUNDS={v:?} is not a whole number of rounds")
        }),
        Err(_) => default,
    }
}

/// How a check ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every assertion held; the text says what was covered.
    Pass(String),
    /// The engine cannot do what the check needs; the text says why.
    NotApplicable(String),
}

/// A failed assertion or an engine error.
pub type CheckResult = std::result::Result<Outcome, String>;

/// Turn a RockLake error into a check failure naming what was being done.
pub fn ctx(what: &str) -> impl FnOnce(Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Fail the check with a message unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// A check: takes the target, returns its outcome.
pub type CheckFn = for<'a> fn(&'a Target) -> BoxFuture<'a, CheckResult>;

/// One line of the report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CaseReport {
    /// Check name.
    pub check: &'static str,
    /// `pass`, `fail` or `n/a`.
    pub outcome: &'static str,
    /// Detail.
    pub detail: String,
    /// Wall time in milliseconds.
    pub millis: u128,
}

/// Run one check by name and report it.
pub async fn run_case(target: &Target, name: &'static str, f: CheckFn) -> CaseReport {
    let start = Instant::now();
    let r = f(target).await;
    let millis = start.elapsed().as_millis();
    match r {
        Ok(Outcome::Pass(d)) => CaseReport {
            check: name,
            outcome: "pass",
            detail: d,
            millis,
        },
        Ok(Outcome::NotApplicable(d)) => CaseReport {
            check: name,
            outcome: "n/a",
            detail: d,
            millis,
        },
        Err(d) => CaseReport {
            check: name,
            outcome: "fail",
            detail: d,
            millis,
        },
    }
}

/// Run every check against a target, calling `progress` after each.
pub async fn run_all(target: &Target, mut progress: impl FnMut(&CaseReport)) -> Vec<CaseReport> {
    let mut out = Vec::new();
    for (name, f) in checks::ALL {
        let r = run_case(target, name, *f).await;
        progress(&r);
        out.push(r);
    }
    out
}

/// Render reports of several targets as one markdown table (checks down, targets across).
pub fn render_table(results: &[(String, Vec<CaseReport>)]) -> String {
    let mut rows: BTreeMap<usize, (&str, Vec<String>)> = BTreeMap::new();
    for (col, (_, reports)) in results.iter().enumerate() {
        for (i, r) in reports.iter().enumerate() {
            let e = rows
                .entry(i)
                .or_insert((r.check, vec![String::new(); results.len()]));
            e.1[col] = match r.outcome {
                "pass" => format!("pass ({} ms)", r.millis),
                "n/a" => "n/a".to_string(),
                _ => "**FAIL**".to_string(),
            };
        }
    }
    let mut s = String::from("| check |");
    for (name, _) in results {
        s.push_str(&format!(" {name} |"));
    }
    s.push_str("\n|---|");
    for _ in results {
        s.push_str("---|");
    }
    s.push('\n');
    for (_, (check, cells)) in rows {
        s.push_str(&format!("| {check} | {} |\n", cells.join(" | ")));
    }
    s
}

/// The one list of checks, in report order: calls `$crate::$callback!` with whatever follows
/// the callback's name, then `;` and every check's name. [`checks::ALL`] and [`suite!`] are
/// both made from it, so a check added here is in the CLI's table and in every engine's tests.
#[macro_export]
macro_rules! with_checks {
    ($callback:ident $($pre:tt)*) => {
        $crate::$callback!($($pre)* ;
            ordering, prefix_isolation, atomic_batches, faults_leave_nothing_half_written,
            read_views, durability_across_reopen, crash_durability, power_cut, two_processes, mvcc_visibility,
            snapshot_order, commits_seen_once_durable, gc_keeps_what_readers_see, keystone_examples, keystone_refusals,
            keystone_delete_keeps_key, keystone_purge_waits_for_readers,
            keystone_eight_draws, keystone_concurrent_issue, keystone_never_reissued,
            keystone_rollback_cycles, fencing, model_based, bad_bytes, edges_and_close);
    };
}

/// Stamp the whole suite for a target-making expression: one `#[tokio::test]` per check, and
/// the crash check's child (an ignored test that the crash check runs in a copy of this test
/// binary; see [`crash::child_command`]).
///
/// ```text
/// conformance::suite!(sled, Target::in_temp_folders("sled", open_sled));
/// conformance::suite!(s3, optional maybe_an_s3_target());
/// ```
///
/// With `optional`, the expression gives an `Option<Target>`; when it is `None` every case
/// returns at once (the target says why it is not run; CI makes sure it is).
#[macro_export]
macro_rules! suite {
    ($module:ident, optional $target:expr) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $crate::with_checks!(suite @cases optional $target);
            $crate::suite!(@child optional $target);
        }
    };
    ($module:ident, $target:expr) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $crate::with_checks!(suite @cases required $target);
            $crate::suite!(@child required $target);
        }
    };
    (@target required $target:expr) => {
        $target
    };
    (@target optional $target:expr) => {
        match $target {
            Some(target) => target,
            None => return,
        }
    };
    (@maybe required $target:expr) => {
        Some($target)
    };
    (@maybe optional $target:expr) => {
        $target
    };
    (@child $mode:ident $target:expr) => {
        #[test]
        #[ignore = "the crash check's child process: crash_durability runs it, never on its own"]
        fn crash_child() {
            $crate::crash::run_child_test(|| $crate::suite!(@maybe $mode $target));
        }
    };
    (@cases $mode:ident $target:expr; $($check:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let target = $crate::suite!(@target $mode $target)
                    .with_self_child(module_path!());
                let report = $crate::run_case(&target, stringify!($check), |t| Box::pin($crate::checks::$check(t))).await;
                match report.outcome {
                    "fail" => panic!("[{}] {} failed: {}", target.name, stringify!($check), report.detail),
                    "n/a" => eprintln!("[{}] {}: not applicable: {}", target.name, stringify!($check), report.detail),
                    _ => eprintln!("[{}] {}: {}", target.name, stringify!($check), report.detail),
                }
            }
        )*
    };
}

/// Shared helpers for checks.
pub mod util {
    use super::*;

    /// Everything in a store, in order, paged.
    pub async fn dump(view: &dyn ReadView) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut pager = Pager::new(view, KeyRange::all(), Order::Ascending, 500);
        while let Some(page) = pager.next_page().await? {
            out.extend(page.into_iter().map(|(k, v)| (k.to_vec(), v.to_vec())));
        }
        Ok(out)
    }

    /// Put many pairs in batches.
    pub async fn load(backend: &dyn KvBackend, pairs: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        for chunk in pairs.chunks(500) {
            let mut b = WriteBatch::new();
            for (k, v) in chunk {
                b.put(k.clone(), v.clone());
            }
            backend
                .write(b, rocklake_core::Durability::Buffered)
                .await?;
        }
        Ok(())
    }

    /// The capabilities of a target's stores.
    pub async fn capabilities(target: &Target) -> Result<Capabilities> {
        let s = target.fresh().await?;
        let c = s.backend.capabilities();
        s.backend.close().await?;
        Ok(c)
    }

    /// Sleep a little (used while waiting on children).
    pub async fn nap(ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await
    }
}

/// Engine evidence that durable commits reach the disk: each of `commits` durable commits, one
/// after another, on a key space over `backend` must have raised `syncs` (the engine's own
/// figure of its durability barriers: RocksDB's WAL-sync ticker, SlateDB's WAL object writes,
/// the bytes sled says its flushes wrote) by the time it returns: read just before each
/// commit and again when it returns, not once after all of them, so that a sync issued after
/// the acknowledgement (deferred to a task, or to the next transaction's start) is caught.
/// Engine crates run it twice: as they are, and with their test-only switch that skips the
/// sync, which it must catch.
pub async fn durable_commits_sync(
    backend: Arc<dyn KvBackend>,
    syncs: impl Fn() -> u64,
    commits: u64,
) -> std::result::Result<String, String> {
    let ks = rocklake_core::Keyspace::open(backend)
        .await
        .map_err(|e| format!("open: {e}"))?;
    let start = syncs();
    let mut unsynced = Vec::new();
    for id in 1..=commits {
        let mut t = ks.begin().await.map_err(|e| format!("begin {id}: {e}"))?;
        t.insert(
            &rocklake_core::keystone::TABLE,
            rocklake_core::KeyChoice::Named(id),
            rows::table_cells("named"),
        )
        .await
        .map_err(|e| format!("insert {id}: {e}"))?;
        // Read just before the commit: `begin` may itself flush an earlier commit that was
        // applied but not yet durable, which must not count as this commit's barrier.
        let before = syncs();
        t.commit().await.map_err(|e| format!("commit {id}: {e}"))?;
        if syncs() == before {
            unsynced.push(id);
        }
    }
    let during = syncs() - start;
    ks.close().await.map_err(|e| format!("close: {e}"))?;
    if !unsynced.is_empty() {
        return Err(format!(
            "{} of {commits} durable commits returned before the engine synced (commits \
             {unsynced:?}; the engine's figure rose by {during} in all)",
            unsynced.len()
        ));
    }
    Ok(format!(
        "{commits} durable commits, each synced before it returned (the engine's figure rose by \
         {during})"
    ))
}
