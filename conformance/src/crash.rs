//! The crash check: a child process commits in a loop and reports each acknowledged commit; the
//! parent kills it (SIGKILL) at a random moment, reopens the store and checks that every
//! acknowledged commit is there, no commit is half there, no mark went backwards and no id was
//! issued twice.
//!
//! Each commit of the child inserts one `ducklake_table` row with an issued id and
//! [`COMPANIONS`] `ducklake_file_column_stats` rows keyed by that id, in one transaction.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rocklake_core::backend::{KeyRange, KvBackend, Order, Pager};
use rocklake_core::keys::{self, Key};
use rocklake_core::keystone;
use rocklake_core::values::Row;
use rocklake_core::{Catalog, CatalogOptions, KeyChoice, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::Target;

/// Rows written with each table row.
pub const COMPANIONS: u64 = 3;

/// Prefix of the line a child prints after each acknowledged (durable) commit.
pub const ACK: &str = "ACK ";

/// Committers the child runs at once, so that kills also land while commits share a flush
/// (group commit).
pub const COMMITTERS: usize = 4;

/// The child's loop: [`COMMITTERS`] tasks commit forever, each printing `ACK <id>` after each
/// durable commit.
pub async fn child_main(backend: Arc<dyn KvBackend>) -> ! {
    // A small reservation so that reservations, not only commits, are hit by kills.
    let opts = CatalogOptions {
        id_reservation: 16,
        ..Default::default()
    };
    let cat = match Catalog::open_with(backend, opts).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("crash child: cannot open the catalog: {e}");
            std::process::exit(3);
        }
    };
    for _ in 1..COMMITTERS {
        let cat = cat.clone();
        tokio::spawn(async move { commit_loop(cat).await });
    }
    commit_loop(cat).await
}

async fn commit_loop(cat: Catalog) -> ! {
    use std::io::Write;
    let stdout = std::io::stdout();
    loop {
        // A commit refused only because another committer's later snapshot became visible
        // first is run again (see `Transaction`'s "Snapshot order").
        let r = loop {
            let r = commit_one(&cat).await;
            match r {
                Err(e) if e.is_retryable() => continue,
                r => break r,
            }
        };
        match r {
            Ok(id) => {
                let mut out = stdout.lock();
                let _ = writeln!(out, "{ACK}{id}");
                let _ = out.flush();
            }
            Err(e) => {
                eprintln!("crash child: commit failed: {e}");
                std::process::exit(4);
            }
        }
    }
}

/// One commit of the child: an issued table row and its companions.
async fn commit_one(cat: &Catalog) -> Result<u64, rocklake_core::Error> {
    let mut t = cat.begin().await?;
    let p = t
        .insert(
            &keystone::TABLE,
            KeyChoice::Issued,
            vec![Value::Null, Value::Text("crash".into())],
        )
        .await?;
    for c in 1..=COMPANIONS {
        let key = keys::FileColumnStatsKey {
            file_id: p.id,
            column_id: c,
        }
        .encode();
        t.put_row(
            &key,
            &Row::new(
                p.snapshot,
                vec![Value::Int(p.id as i64), Value::Int(0), Value::Int(c as i64)],
            ),
        )?;
    }
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
    /// Table rows found after the last round.
    pub rows: usize,
}

/// Run `rounds` kill-and-check rounds against one store of `target`.
pub async fn run_rounds(target: &Target, rounds: usize) -> Result<CrashSummary, String> {
    let child = target.child.clone().ok_or("no child command")?;
    let store = target
        .fresh()
        .await
        .map_err(|e| format!("fresh store: {e}"))?;
    let url = store.url.clone();
    // Initialise, then let the children own the store.
    Catalog::open(store.backend.clone())
        .await
        .map_err(|e| format!("init: {e}"))?
        .close()
        .await
        .map_err(|e| e.to_string())?;
    drop(store);
    let mut summary = CrashSummary::default();
    let mut seen: BTreeSet<u64> = BTreeSet::new();
    let mut last_mark = 1u64;
    let mut rng = rand::rngs::StdRng::from_os_rng();
    for round in 0..rounds {
        let mut cmd = tokio::process::Command::from(child(&url));
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let mut proc = cmd
            .spawn()
            .map_err(|e| format!("round {round}: spawning the child: {e}"))?;
        let stdout = proc.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let mut acked = Vec::new();
        // Wait for the first acknowledgement (the child is up), then let it run a random while.
        let first = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.ok().flatten() {
                if let Some(id) = line.strip_prefix(ACK) {
                    return id.trim().parse::<u64>().ok();
                }
            }
            None
        })
        .await;
        match first {
            Ok(Some(id)) => acked.push(id),
            _ => {
                let _ = proc.kill().await;
                let out = proc.wait_with_output().await.map_err(|e| e.to_string())?;
                return Err(format!(
                    "round {round}: the child acknowledged nothing; its stderr: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        let run_for = Duration::from_millis(rng.random_range(0..120));
        let deadline = tokio::time::Instant::now() + run_for;
        while let Ok(Ok(Some(line))) = tokio::time::timeout_at(deadline, lines.next_line()).await {
            if let Some(id) = line.strip_prefix(ACK).and_then(|s| s.trim().parse().ok()) {
                acked.push(id);
            }
        }
        proc.start_kill()
            .map_err(|e| format!("round {round}: kill: {e}"))?;
        // Lines already written before the kill are acknowledgements too.
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(id) = line.strip_prefix(ACK).and_then(|s| s.trim().parse().ok()) {
                acked.push(id);
            }
        }
        let _ = proc.wait().await;
        summary.acknowledged += acked.len();

        let backend = open_retrying(target, &url)
            .await
            .map_err(|e| format!("round {round}: reopen: {e}"))?;
        let check = check_store(backend.clone(), &acked, &mut seen, &mut last_mark).await;
        let _ = backend.close().await;
        check.map_err(|e| {
            format!(
                "round {round} (after {} acknowledged commits): {e}",
                acked.len()
            )
        })?;
        summary.rounds += 1;
    }
    summary.rows = seen.len();
    Ok(summary)
}

async fn open_retrying(target: &Target, url: &str) -> rocklake_core::Result<Arc<dyn KvBackend>> {
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

async fn check_store(
    backend: Arc<dyn KvBackend>,
    acked: &[u64],
    seen: &mut BTreeSet<u64>,
    last_mark: &mut u64,
) -> Result<(), String> {
    let cat = Catalog::open_read_only(backend.clone())
        .await
        .map_err(|e| e.to_string())?;
    let view = backend.view().await.map_err(|e| e.to_string())?;
    let mut bound = BTreeSet::new();
    let mut pager = Pager::new(
        view.as_ref(),
        KeyRange::prefix(&keys::binding_prefix(keystone::TABLE.code())),
        Order::Ascending,
        1000,
    );
    while let Some(page) = pager.next_page().await.map_err(|e| e.to_string())? {
        for (k, _) in page {
            if let Ok(Key::Binding { id, .. }) = Key::decode(&k) {
                bound.insert(id);
            }
        }
    }
    for id in acked {
        if !bound.contains(id) {
            return Err(format!(
                "acknowledged commit of id {id} is missing after the crash"
            ));
        }
    }
    let prev_max = seen.iter().next_back().copied().unwrap_or(0);
    for id in &bound {
        let mut n = 0;
        let mut companions = Pager::new(
            view.as_ref(),
            KeyRange::prefix(&keys::prefix(
                rocklake_core::tags::FILE_COLUMN_STATS,
                &[*id],
            )),
            Order::Ascending,
            16,
        );
        while let Some(page) = companions.next_page().await.map_err(|e| e.to_string())? {
            n += page.len() as u64;
        }
        if n != COMPANIONS {
            return Err(format!(
                "commit of id {id} is half there: {n} of {COMPANIONS} companion rows"
            ));
        }
        if !seen.contains(id) && *id <= prev_max {
            return Err(format!("id {id} was issued after a crash although ids up to {prev_max} were already issued"));
        }
    }
    let mark = cat
        .describe(&keystone::TABLE)
        .await
        .map_err(|e| e.to_string())?
        .next_id;
    if mark < *last_mark {
        return Err(format!(
            "the mark of id space table went backwards: {last_mark} -> {mark}"
        ));
    }
    if let Some(max) = bound.iter().next_back() {
        if mark <= *max {
            return Err(format!(
                "the mark next_id={mark} is not above the largest bound id {max}"
            ));
        }
    }
    *last_mark = mark;
    seen.extend(bound);
    Ok(())
}
