//! The crash check: a child process commits in a loop and reports each acknowledged commit; the
//! parent kills it (SIGKILL) at a random moment (also while it opens the store and recovers,
//! and while it deletes, raises retain-from, runs GC and PURGE), reopens the store and checks
//! that every acknowledged commit is there, no commit is half there (every companion row, and
//! no companion row without its table row), no mark went backwards and no id was issued twice,
//! also against every id seen in earlier rounds. The child must die of the kill: one that
//! exited on its own fails the check with its stderr.
//!
//! Each insert of the child writes one `ducklake_table` row with an issued id and
//! [`COMPANIONS`] `ducklake_file_column_stats` rows keyed by that id, in one transaction; each
//! delete removes a table row and its companions in one transaction.
//!
//! The kill timing comes from a seed the report prints (`ROCKLAKE_CRASH_SEED` replays it; the
//! child's own pace still varies from run to run).

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rocklake_core::backend::KvBackend;
use rocklake_core::keystone;
use rocklake_core::{KeyChoice, Keyspace, KeyspaceOptions, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::Target;

/// Rows written with each table row.
pub use crate::rows::COMPANIONS;

/// Prefix of the line a child prints after each acknowledged (durable) insert.
pub const ACK: &str = "ACK ";

/// Prefix of the line a child prints after each acknowledged (durable) insert of a row its
/// maintaining task deletes next.
pub const ACK_DOOMED: &str = "ACKD ";

/// Prefix of the line a child prints after each acknowledged (durable) delete.
pub const DELETED: &str = "DEL ";

/// The line a child prints just before it opens the engine's store.
pub const OPENING: &str = "OPENING";

/// The line a child prints once the engine has opened the store (recovered it).
pub const OPENED: &str = "OPENED";

/// The line a child prints once the key space is open on the store, before its first commit.
pub const READY: &str = "READY";

/// Print one of the child's phase markers ([`OPENING`], [`OPENED`], [`READY`]) on stdout.
pub fn mark(marker: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{marker}");
    let _ = out.flush();
}

/// Committers the child runs at once, so that kills also land while commits share a flush
/// (group commit).
pub const COMMITTERS: usize = 4;

/// The variable that carries the store's location to a crash child run as a test (see
/// [`child_command`]).
pub const CHILD_ENV: &str = "ROCKLAKE_CRASH_CHILD_URL";

/// Whether this process is a crash child started by [`child_command`].
pub fn in_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// The crash child of a suite stamped by [`crate::suite!`] in module `module` (its
/// `module_path!()`): this test binary again, running only that module's ignored
/// `crash_child` test, with the store's location in [`CHILD_ENV`].
pub fn child_command(module: &str) -> Option<crate::ChildCommand> {
    let exe = std::env::current_exe().ok()?;
    // The first segment names the test binary's crate; test names start after it.
    let test = match module.split_once("::") {
        Some((_, rest)) => format!("{rest}::crash_child"),
        None => "crash_child".to_string(),
    };
    Some(Arc::new(move |url: &str| {
        let mut c = std::process::Command::new(&exe);
        c.args([test.as_str(), "--exact", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CHILD_ENV, url);
        c
    }))
}

/// The body of a stamped suite's `crash_child` test: in a child started by [`child_command`],
/// open the store of [`CHILD_ENV`] with the target's factory and commit until killed. Run by
/// hand (`--ignored`) without that variable it says so and returns.
pub fn run_child_test(make: impl FnOnce() -> Option<Target>) {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        eprintln!("crash_child only runs as the crash check's child ({CHILD_ENV} is not set)");
        return;
    };
    let Some(target) = make() else {
        eprintln!("crash child: the target is not available here");
        std::process::exit(3);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the crash child");
    // The test harness has printed `test ... crash_child ... ` without a newline: end that
    // line, so that every line of the protocol starts with its word.
    println!();
    if crate::cutstore::wanted() {
        crate::cutstore::listen_for_cut();
    }
    runtime.block_on(async move {
        mark(OPENING);
        match target.open(&url).await {
            Ok(backend) => {
                mark(OPENED);
                child_main(backend).await
            }
            Err(e) => match child_fails(3, format!("crash child: cannot open {url}: {e}")).await {},
        }
    })
}

/// A child's end on a failure: print it and exit with `code`. After a power cut
/// ([`crate::cutstore`]) every request fails and a dead machine neither says nor does anything
/// more: then it only waits for the kill.
async fn child_fails(code: i32, message: String) -> std::convert::Infallible {
    if crate::cutstore::is_cut() {
        std::future::pending::<()>().await;
    }
    eprintln!("{message}");
    std::process::exit(code)
}

/// After a power cut, wait for the kill instead of trying again.
async fn unless_cut() {
    if crate::cutstore::is_cut() {
        std::future::pending::<()>().await;
    }
}

/// The variable that picks a child's job: unset, the crash loop; `hold`, see [`hold_main`].
pub const MODE_ENV: &str = "ROCKLAKE_CHILD_MODE";

/// The row name a `hold` child gives its commits (`ROCKLAKE_CHILD_ROLE`).
pub const ROLE_ENV: &str = "ROCKLAKE_CHILD_ROLE";

/// The variable that names a file a crash child appends each acknowledgement line to before it
/// prints it: the power-cut check's observer file ([`crate::cutfs::OBSERVED`]), whose writes
/// reach the file system in order with the engine's own.
pub const ACKS_ENV: &str = "ROCKLAKE_CHILD_ACKS";

/// Report one acknowledgement line: to the [`ACKS_ENV`] file if set (one `write` each), then to
/// stdout. A child that cannot write it has lost its disk (a power cut): it stops there.
fn report(line: String) {
    use std::io::Write;
    if crate::cutstore::is_cut() {
        // The power is gone: nobody hears of this commit.
        return;
    }
    static FILE: std::sync::OnceLock<Option<std::sync::Mutex<std::fs::File>>> =
        std::sync::OnceLock::new();
    let file = FILE.get_or_init(|| {
        let path = std::env::var_os(ACKS_ENV)?;
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            Ok(f) => Some(std::sync::Mutex::new(f)),
            Err(e) => {
                eprintln!("crash child: cannot open {}: {e}", path.to_string_lossy());
                std::process::exit(5);
            }
        }
    });
    if let Some(f) = file {
        let mut f = f.lock().unwrap_or_else(|e| e.into_inner());
        if f.write_all(format!("{line}\n").as_bytes()).is_err() {
            std::process::exit(5);
        }
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A child's main: the crash loop, or what [`MODE_ENV`] asks for.
pub async fn child_main(backend: Arc<dyn KvBackend>) -> ! {
    if std::env::var(MODE_ENV).as_deref() == Ok("hold") {
        hold_main(backend).await
    }
    crash_main(backend).await
}

/// A `hold` child, for the two-process check: opens the store for writing, commits one row
/// named `<role>-ready` and prints `READY <id>`; then for each line `commit` on its stdin it
/// commits a row named `<role>-<n>` and prints `OK <id>` or `ERR <kind> <message>`; it exits
/// when stdin closes.
pub async fn hold_main(backend: Arc<dyn KvBackend>) -> ! {
    use std::io::Write;
    let role = std::env::var(ROLE_ENV).unwrap_or_else(|_| "child".into());
    let ks = match Keyspace::open(backend).await {
        Ok(ks) => ks,
        Err(e) => {
            eprintln!("hold child: cannot open the key space: {e}");
            std::process::exit(3);
        }
    };
    let commit = |name: String| {
        let ks = ks.clone();
        async move {
            let mut t = ks.begin().await?;
            let p = t
                .insert(
                    &keystone::TABLE,
                    KeyChoice::Issued,
                    crate::rows::table_cells(&name),
                )
                .await?;
            t.commit().await?;
            Ok::<u64, rocklake_core::Error>(p.id)
        }
    };
    match commit(format!("{role}-ready")).await {
        Ok(id) => println!("READY {id}"),
        Err(e) => {
            eprintln!("hold child: first commit failed: {e}");
            std::process::exit(4);
        }
    }
    let _ = std::io::stdout().flush();
    // Stdin read on a thread of its own (a blocking read), line by line.
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut n = 0;
    while let Some(line) = lines.recv().await {
        if line.trim() != "commit" {
            continue;
        }
        n += 1;
        match commit(format!("{role}-{n}")).await {
            Ok(id) => println!("OK {id}"),
            Err(e) => println!("ERR {:?} {e}", e.kind()),
        }
        let _ = std::io::stdout().flush();
    }
    let _ = ks.close().await;
    std::process::exit(0)
}

/// The crash loop: [`COMMITTERS`] tasks commit forever, each printing `ACK <id>` after each
/// durable commit, and a maintaining task deletes, raises retain-from, GCs and PURGEs.
pub async fn crash_main(backend: Arc<dyn KvBackend>) -> ! {
    // A small reservation so that reservations, not only commits, are hit by kills.
    let opts = KeyspaceOptions {
        id_reservation: 16,
        ..Default::default()
    };
    let cat = match Keyspace::open_with(backend, opts).await {
        Ok(c) => c,
        Err(e) => {
            match child_fails(3, format!("crash child: cannot open the catalog: {e}")).await {}
        }
    };
    mark(READY);
    for _ in 1..COMMITTERS {
        let cat = cat.clone();
        tokio::spawn(async move { commit_loop(cat).await });
    }
    let maintainer = cat.clone();
    tokio::spawn(async move { maintain_loop(maintainer).await });
    commit_loop(cat).await
}

/// Forever: delete a row this task inserted (with its companions), raise retain-from to the
/// latest snapshot, GC, and PURGE the deleted key; print `DEL <id>` once the delete is durable.
async fn maintain_loop(ks: Keyspace) -> ! {
    let fail = |what: &str, e: rocklake_core::Error| {
        child_fails(4, format!("crash child: {what} failed: {e}"))
    };
    loop {
        let id = loop {
            match commit_one(&ks).await {
                Ok(id) => break id,
                Err(e) if e.is_retryable() => unless_cut().await,
                Err(e) => match fail("insert", e).await {},
            }
        };
        report(format!("{ACK_DOOMED}{id}"));
        loop {
            match delete_one(&ks, id).await {
                Ok(()) => break,
                Err(e) if e.is_retryable() => unless_cut().await,
                Err(e) => match fail("delete", e).await {},
            }
        }
        report(format!("{DELETED}{id}"));
        let maintained: rocklake_core::Result<()> = async {
            let latest = ks.current_snapshot().await?;
            ks.set_retain_from(latest).await?;
            ks.gc().await?;
            ks.purge(
                &keystone::TABLE,
                id..=id,
                &rocklake_core::Admin::grant("crash-child"),
            )
            .await?;
            Ok(())
        }
        .await;
        match maintained {
            Ok(()) => {}
            Err(e) if e.is_retryable() => unless_cut().await,
            Err(e) => match fail("retain-from, GC or PURGE", e).await {},
        }
    }
}

/// Delete the table row `id` and its companions in one transaction.
async fn delete_one(ks: &Keyspace, id: u64) -> Result<(), rocklake_core::Error> {
    let mut t = ks.begin().await?;
    t.delete(&keystone::TABLE, id).await?;
    crate::rows::delete_companions(&mut t, id)?;
    t.commit().await?;
    Ok(())
}

async fn commit_loop(cat: Keyspace) -> ! {
    loop {
        // A commit refused only because another committer's later snapshot became visible
        // first is run again (see `Transaction`'s "Snapshot order").
        let r = loop {
            let r = commit_one(&cat).await;
            match r {
                Err(e) if e.is_retryable() => unless_cut().await,
                r => break r,
            }
        };
        match r {
            Ok(id) => report(format!("{ACK}{id}")),
            Err(e) => match child_fails(4, format!("crash child: commit failed: {e}")).await {},
        }
    }
}

/// One commit of the child: an issued table row and its companions.
async fn commit_one(cat: &Keyspace) -> Result<u64, rocklake_core::Error> {
    let mut t = cat.begin().await?;
    let p = t
        .insert(
            &keystone::TABLE,
            KeyChoice::Issued,
            vec![Value::Null, Value::Text("crash".into())],
        )
        .await?;
    crate::rows::put_companions(&mut t, p.id, p.snapshot)?;
    t.commit().await?;
    Ok(p.id)
}

/// What the rounds covered.
#[derive(Debug, Default)]
pub struct CrashSummary {
    /// Rounds run.
    pub rounds: usize,
    /// Commits acknowledged by children, in total.
    pub acknowledged: usize,
    /// Deletes acknowledged by children, in total.
    pub deleted: usize,
    /// Rounds whose kill came before the child acknowledged anything (while it opened the
    /// store and recovered).
    pub during_open: usize,
    /// Of those, kills after the child's [`OPENING`] and before its [`OPENED`]: inside the
    /// engine's open and recovery.
    pub in_engine_open: usize,
    /// Kills after [`OPENED`] and before [`READY`]: inside the key space's open.
    pub in_keyspace_open: usize,
    /// Table rows found after the last round.
    pub rows: usize,
    /// What the power cuts did, over all rounds ([`Ending::Cut`]).
    pub cut: crate::cutstore::CutReport,
    /// The seed of the kill timing.
    pub seed: u64,
}

/// The seed of the kill timing: `ROCKLAKE_CRASH_SEED`, or a new one.
pub fn seed_from_env() -> Result<u64, String> {
    match std::env::var("ROCKLAKE_CRASH_SEED") {
        Ok(v) => v
            .parse()
            .map_err(|_| format!("ROCKLAKE_CRASH_SEED={v:?} is not a whole number")),
        Err(_) => Ok(rand::random::<u32>() as u64),
    }
}

/// The child's phase markers, as its lines arrive.
#[derive(Default)]
struct Phase {
    /// The last marker seen.
    last: Option<&'static str>,
    opening_at: Option<tokio::time::Instant>,
    ready_at: Option<tokio::time::Instant>,
}

impl Phase {
    fn take(&mut self, line: &str) {
        let now = tokio::time::Instant::now();
        for marker in [OPENING, OPENED, READY] {
            if line.trim() == marker {
                self.last = Some(marker);
                match marker {
                    OPENING => self.opening_at = Some(now),
                    READY => self.ready_at = Some(now),
                    _ => {}
                }
            }
        }
    }

    fn open_took(&self) -> Option<Duration> {
        Some(self.ready_at?.duration_since(self.opening_at?))
    }
}

/// What the child printed: inserts and deletes it acknowledged.
#[derive(Default)]
pub(crate) struct Acks {
    pub(crate) inserted: Vec<u64>,
    /// Inserted by the maintaining task, which deletes them next.
    pub(crate) doomed: Vec<u64>,
    pub(crate) deleted: Vec<u64>,
}

impl Acks {
    pub(crate) fn take(&mut self, line: &str) {
        if let Some(id) = line
            .strip_prefix(ACK_DOOMED)
            .and_then(|s| s.trim().parse().ok())
        {
            self.inserted.push(id);
            self.doomed.push(id);
        } else if let Some(id) = line.strip_prefix(ACK).and_then(|s| s.trim().parse().ok()) {
            self.inserted.push(id);
        } else if let Some(id) = line
            .strip_prefix(DELETED)
            .and_then(|s| s.trim().parse().ok())
        {
            self.deleted.push(id);
        }
    }
}

/// How a round ends its child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// SIGKILL at a random moment.
    Kill,
    /// A power cut of its object store at a random moment ([`crate::cutstore`]), then SIGKILL.
    Cut,
}

/// Run `rounds` kill-and-check rounds against one store of `target`.
pub async fn run_rounds(target: &Target, rounds: usize) -> Result<CrashSummary, String> {
    run_rounds_ending(target, rounds, Ending::Kill).await
}

/// Run `rounds` rounds against one store of `target`, each ending its child as `ending` says,
/// then checking the store.
pub async fn run_rounds_ending(
    target: &Target,
    rounds: usize,
    ending: Ending,
) -> Result<CrashSummary, String> {
    let child = target.child.clone().ok_or("no child command")?;
    let store = target
        .fresh()
        .await
        .map_err(|e| format!("fresh store: {e}"))?;
    let url = store.url.clone();
    // Initialise, then let the children own the store.
    Keyspace::open(store.backend.clone())
        .await
        .map_err(|e| format!("init: {e}"))?
        .close()
        .await
        .map_err(|e| e.to_string())?;
    drop(store);
    let seed = seed_from_env()?;
    let mut summary = CrashSummary {
        seed,
        ..CrashSummary::default()
    };
    let mut seen: BTreeSet<u64> = BTreeSet::new();
    let mut deleted: BTreeSet<u64> = BTreeSet::new();
    let mut doomed: BTreeSet<u64> = BTreeSet::new();
    let mut last_mark = 1u64;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // How long the child's opening (OPENING to READY) took, as last measured.
    let mut open_took = Duration::from_millis(50);
    for round in 0..rounds {
        let fail = |e: String| {
            format!("round {round} (seed {seed}, replay with ROCKLAKE_CRASH_SEED={seed}): {e}")
        };
        let mut cmd = tokio::process::Command::from(child(&url));
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if ending == Ending::Cut {
            cmd.env(crate::cutstore::CUT_ENV, "1").stdin(Stdio::piped());
        }
        let mut proc = cmd
            .spawn()
            .map_err(|e| fail(format!("spawning the child: {e}")))?;
        let stdout = proc.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let mut acks = Acks::default();
        let mut phase = Phase::default();
        // One round in five kills the child while it opens the store (recovering what the last
        // kill left): at a random moment between its OPENING marker and the time its opening
        // took in the last round that finished it. The others wait for its first
        // acknowledgement, then a random while.
        if rng.random_range(0..5) == 0 {
            let opening = tokio::time::timeout(Duration::from_secs(60), async {
                while let Some(line) = lines.next_line().await.ok().flatten() {
                    phase.take(&line);
                    acks.take(&line);
                    if phase.opening_at.is_some() {
                        return true;
                    }
                }
                false
            })
            .await;
            if opening != Ok(true) {
                let _ = proc.start_kill();
                let out = proc.wait_with_output().await.map_err(|e| e.to_string())?;
                return Err(fail(format!(
                    "the child never said it was opening the store ({}); its stderr: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            let early = tokio::time::Instant::now()
                + Duration::from_micros(rng.random_range(0..=open_took.as_micros() as u64));
            while let Ok(Ok(Some(line))) = tokio::time::timeout_at(early, lines.next_line()).await {
                phase.take(&line);
                acks.take(&line);
            }
        } else {
            let first = tokio::time::timeout(Duration::from_secs(60), async {
                while let Some(line) = lines.next_line().await.ok().flatten() {
                    phase.take(&line);
                    acks.take(&line);
                    if !acks.inserted.is_empty() {
                        return true;
                    }
                }
                false
            })
            .await;
            if first != Ok(true) {
                let _ = proc.start_kill();
                let out = proc.wait_with_output().await.map_err(|e| e.to_string())?;
                return Err(fail(format!(
                    "the child acknowledged nothing ({}); its stderr: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            if let Some(took) = phase.open_took() {
                open_took = took;
            }
            let deadline =
                tokio::time::Instant::now() + Duration::from_millis(rng.random_range(0..120));
            while let Ok(Ok(Some(line))) =
                tokio::time::timeout_at(deadline, lines.next_line()).await
            {
                acks.take(&line);
            }
        }
        if ending == Ending::Cut {
            let cut = match cut_child(&mut proc, &mut lines, &mut acks, &mut phase).await {
                Ok(cut) => cut,
                Err(e) => {
                    let _ = proc.start_kill();
                    let out = proc.wait_with_output().await.map_err(|e| e.to_string())?;
                    return Err(fail(format!(
                        "{e}; its stderr: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    )));
                }
            };
            if cut.wrapped == 0 && !acks.inserted.is_empty() {
                return Err(fail(format!(
                    "the child committed, but its object store was not under the power-cut \
                     layer ({} unset by the target's opener? {cut})",
                    crate::cutstore::CUT_ENV
                )));
            }
            summary.cut.add(&cut);
        }
        proc.start_kill().map_err(|e| fail(format!("kill: {e}")))?;
        // Lines already written before the kill are acknowledgements too.
        while let Ok(Some(line)) = lines.next_line().await {
            phase.take(&line);
            acks.take(&line);
        }
        let out = proc
            .wait_with_output()
            .await
            .map_err(|e| fail(format!("waiting for the child: {e}")))?;
        if !killed(&out.status) {
            return Err(fail(format!(
                "the child was not ended by the kill but {}; its stderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        if acks.inserted.is_empty() && acks.deleted.is_empty() {
            summary.during_open += 1;
            match phase.last {
                Some(OPENING) => summary.in_engine_open += 1,
                Some(OPENED) => summary.in_keyspace_open += 1,
                _ => {}
            }
        }
        summary.acknowledged += acks.inserted.len();
        summary.deleted += acks.deleted.len();
        for id in &acks.inserted {
            if seen.contains(id) {
                return Err(fail(format!(
                    "id {id} was acknowledged as newly issued, but an earlier round had it already"
                )));
            }
        }

        let backend = open_retrying(target, &url)
            .await
            .map_err(|e| fail(format!("reopen: {e}")))?;
        deleted.extend(acks.deleted.iter().copied());
        doomed.extend(acks.doomed.iter().copied());
        let check = check_store(
            backend.clone(),
            &acks.inserted,
            &doomed,
            &deleted,
            &mut seen,
            &mut last_mark,
        )
        .await;
        let _ = backend.close().await;
        check.map_err(|e| {
            fail(format!(
                "after {} acknowledged inserts and {} deletes: {e}",
                acks.inserted.len(),
                acks.deleted.len()
            ))
        })?;
        summary.rounds += 1;
    }
    summary.rows = seen.len();
    Ok(summary)
}

/// Tell a child to cut its power and read its lines up to the cut's report (what it printed
/// before is acknowledged).
async fn cut_child(
    proc: &mut tokio::process::Child,
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    acks: &mut Acks,
    phase: &mut Phase,
) -> Result<crate::cutstore::CutReport, String> {
    use tokio::io::AsyncWriteExt;
    let mut stdin = proc.stdin.take().ok_or("the child has no stdin")?;
    stdin
        .write_all(b"cut\n")
        .await
        .map_err(|e| format!("telling the child to cut: {e}"))?;
    stdin.flush().await.map_err(|e| e.to_string())?;
    let waited = crate::cutstore::SETTLE + Duration::from_secs(20);
    let report = tokio::time::timeout(waited, async {
        while let Some(line) = lines.next_line().await.ok().flatten() {
            if let Some(r) = crate::cutstore::CutReport::parse(&line) {
                return Some(r);
            }
            phase.take(&line);
            acks.take(&line);
        }
        None
    })
    .await;
    match report {
        Ok(Some(r)) => Ok(r),
        Ok(None) => {
            let status = proc.try_wait().ok().flatten();
            Err(format!(
                "the child ended before it reported its power cut ({status:?})"
            ))
        }
        Err(_) => Err(format!(
            "the child did not report its power cut within {waited:?}"
        )),
    }
}

/// Whether the child died of SIGKILL (on Unix; elsewhere any end counts).
fn killed(status: &std::process::ExitStatus) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        status.signal() == Some(9)
    }
    #[cfg(not(unix))]
    {
        !status.success()
    }
}

pub async fn open_retrying(
    target: &Target,
    url: &str,
) -> rocklake_core::Result<Arc<dyn KvBackend>> {
    let mut tries = 0;
    loop {
        match target.open(url).await {
            Ok(b) => return Ok(b),
            // The killed child's lock is released when the OS reaps it; give it a moment.
            Err(rocklake_core::Error::Locked { .. }) if tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

pub(crate) async fn check_store(
    backend: Arc<dyn KvBackend>,
    acked: &[u64],
    doomed: &BTreeSet<u64>,
    deleted: &BTreeSet<u64>,
    seen: &mut BTreeSet<u64>,
    last_mark: &mut u64,
) -> Result<(), String> {
    let ks = Keyspace::open_read_only(backend.clone())
        .await
        .map_err(|e| e.to_string())?;
    let view = backend.view().await.map_err(|e| e.to_string())?;
    // Every bound key of the table space (live or deleted), and the companion rows.
    let (bound, companions) = crate::rows::table_keys(view.as_ref())
        .await
        .map_err(|e| e.to_string())?;
    for id in acked {
        if deleted.contains(id) {
            // Its acknowledged delete is checked below (and PURGE may have unbound it).
            continue;
        }
        match bound.get(id) {
            None if doomed.contains(id) => {
                return Err(format!(
                    "acknowledged insert of id {id} (the maintaining task's, its delete in \
                     flight at the crash) is missing after the crash: a delete leaves the key \
                     bound until a PURGE, which comes only after the delete is acknowledged"
                ))
            }
            None => {
                return Err(format!(
                    "acknowledged insert of id {id} is missing after the crash"
                ))
            }
            // Only the maintaining task deletes, only what it inserted (acknowledged as
            // `ACKD`), and its delete in flight at the kill may have landed.
            Some(false) if !doomed.contains(id) => {
                return Err(format!(
                    "id {id} is deleted after the crash, but nothing deleted it"
                ))
            }
            _ => {}
        }
    }
    for id in deleted {
        if bound.get(id) == Some(&true) {
            return Err(format!(
                "acknowledged delete of id {id} is undone after the crash"
            ));
        }
    }
    let prev_max = seen.iter().next_back().copied().unwrap_or(0);
    for (id, live) in &bound {
        let n = companions.get(id).copied().unwrap_or(0);
        let want = if *live { COMPANIONS } else { 0 };
        if n != want {
            return Err(format!(
                "commit of id {id} is half there: {n} of {want} companion rows (the row is {})",
                if *live { "live" } else { "deleted" }
            ));
        }
        if !seen.contains(id) && *id <= prev_max {
            return Err(format!(
                "id {id} was issued after a crash although ids up to {prev_max} were already issued"
            ));
        }
    }
    for (id, n) in &companions {
        if bound.get(id) != Some(&true) {
            return Err(format!(
                "{n} companion rows of id {id} are there without its live table row (orphans)"
            ));
        }
    }
    let mark = ks
        .describe(&keystone::TABLE)
        .await
        .map_err(|e| e.to_string())?
        .next_id;
    if mark < *last_mark {
        return Err(format!(
            "the mark of id space table went backwards: {last_mark} -> {mark}"
        ));
    }
    if let Some(max) = bound.keys().next_back() {
        if mark <= *max {
            return Err(format!(
                "the mark next_id={mark} is not above the largest bound id {max}"
            ));
        }
    }
    *last_mark = mark;
    seen.extend(bound.keys().copied());
    seen.extend(acked.iter().copied());
    Ok(())
}
