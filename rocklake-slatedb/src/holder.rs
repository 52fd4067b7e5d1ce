//! Who holds a SlateDB store as its writer, so that a second writer is refused instead of
//! silently fencing the first.
//!
//! SlateDB lets any process open a store as writer: the newcomer bumps the writer epoch and the
//! running writer (a `rocklake serve`, say) is fenced at its next flush. That is how a standby
//! takes over, but done by accident (a `rocklake sql` or `rocklake insert` against the store a
//! server runs on) it takes a live server down. So every writer RockLake opens on a folder or a
//! bucket keeps a small *holder record* beside the database (`rocklake.writer` next to the
//! `rocklake/` prefix): who it is (command, pid, host), since when, and a heartbeat counter it
//! rewrites every [`BEAT`]. A new writer first reads the record:
//!
//! - none: the store is free (the last writer closed cleanly and removed its record);
//! - written by this process: live exactly when that engine is still open (a registry in the
//!   process knows);
//! - written by another process in the same PID namespace on the same boot: stale at once when
//!   that pid is gone (or a zombie), which is what a crash or a `kill -9` leaves behind;
//! - otherwise the newcomer watches the heartbeat for up to [`STALE_AFTER`]: a record that
//!   changes is a live writer, one that does not was left by a writer that is gone.
//!
//! A live holder makes the open fail with [`Error::Locked`], naming the holder. A *takeover*
//! ([`crate::SlateOptions::takeover`], `rocklake --takeover`) skips the check and fences the
//! holder on purpose. Each record carries a generation one above the one it replaced, and a
//! writer that finds a record of a newer generation than its own stops beating: after a takeover
//! the fenced writer never overwrites its successor's record.
//!
//! The check and the claim are two steps, not one atomic operation: two writers that open in the
//! same instant can both find the store free (the later one then fences the earlier, as before).
//! The record guards against the mistake this module exists for, an open against a writer that
//! has been running for a while, not against a deliberate race.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use rocklake_core::error::{Error, Result};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often a writer rewrites its holder record.
pub const BEAT: Duration = Duration::from_secs(2);

/// How long a newcomer watches a record it cannot otherwise judge before calling it stale: more
/// than two beats, so one slow write does not make a live writer look gone.
pub const STALE_AFTER: Duration = Duration::from_secs(5);

/// How often the newcomer rereads the record while watching it.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// The holder record, stored as JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Random id of this writer's claim.
    pub id: u64,
    /// One above the generation of the record this claim replaced.
    pub generation: u64,
    /// Heartbeat counter, one up per rewrite.
    pub beat: u64,
    /// The command line of the holding process (its first words).
    pub command: String,
    /// Process id of the holder.
    pub pid: u32,
    /// Host name of the holder.
    pub host: String,
    /// Boot id and PID namespace of the holder: equal means its pid can be checked here.
    pub pid_scope: String,
    /// When the holder opened the store (Unix milliseconds).
    pub since_ms: u64,
    /// When the holder last wrote the record (Unix milliseconds, the holder's clock).
    pub beat_ms: u64,
}

impl Record {
    /// The holder in words, for the refusal.
    fn describe(&self) -> String {
        let ago = |ms: u64| {
            let now = unix_ms();
            if now >= ms {
                format!("{:.1} s ago", (now - ms) as f64 / 1000.0)
            } else {
                "just now (its clock is ahead of ours)".to_string()
            }
        };
        format!(
            "`{}` (pid {} on host {}), writer since {}, last heartbeat {}",
            self.command,
            self.pid,
            self.host,
            ago(self.since_ms),
            ago(self.beat_ms)
        )
    }
}

/// The store is held by a live writer.
#[derive(Debug, thiserror::Error)]
#[error(
    "held by {holder}; opening it as a writer would fence that writer. Stop it, open a reader \
     beside it (--read-only), or take the store over on purpose (--takeover; in Rust, \
     SlateOptions::takeover)"
)]
pub struct Held {
    holder: String,
}

/// The claims this process holds open: a record written by this pid is live exactly when its
/// id is here.
fn live_claims() -> &'static Mutex<HashSet<u64>> {
    static LIVE: OnceLock<Mutex<HashSet<u64>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn host_name() -> String {
    read_trimmed("/proc/sys/kernel/hostname")
        .or_else(|| read_trimmed("/etc/hostname"))
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_string())
}

/// This boot and PID namespace, or "" where the system does not say (then pids are never
/// compared across processes).
fn pid_scope() -> String {
    let boot = read_trimmed("/proc/sys/kernel/random/boot_id");
    let ns = std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|p| p.display().to_string());
    match (boot, ns) {
        (Some(boot), Some(ns)) => format!("{boot}/{ns}"),
        _ => String::new(),
    }
}

/// Whether process `pid` of this PID namespace is running (a zombie is not).
fn pid_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses, which may itself hold ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
            .unwrap_or(true),
        Err(_) => false,
    }
}

fn command_line() -> String {
    let mut words: Vec<String> = std::env::args().take(3).collect();
    if let Some(first) = words.first_mut() {
        if let Some(base) = std::path::Path::new(first.as_str()).file_name() {
            *first = base.to_string_lossy().into_owned();
        }
    }
    let mut line = words.join(" ");
    if line.len() > 200 {
        let mut cut = 200;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push('…');
    }
    line
}

/// Where the holder record of the database at `db_path` lives.
pub fn record_path(db_path: &str) -> Path {
    Path::from(format!("{db_path}.writer"))
}

fn io_err(doing: &str, location: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::engine(
        "slatedb",
        format!("{doing} the holder record of {location}"),
        e,
    )
}

/// Read the record; a record that does not parse counts as none (it names nobody to protect).
pub async fn read(store: &dyn ObjectStore, path: &Path, location: &str) -> Result<Option<Record>> {
    match store.get(path).await {
        Ok(got) => {
            let bytes = got
                .bytes()
                .await
                .map_err(|e| io_err("reading", location, e))?;
            match serde_json::from_slice(&bytes) {
                Ok(record) => Ok(Some(record)),
                Err(e) => {
                    tracing::warn!(%location, error = %e, "ignoring an unreadable holder record");
                    Ok(None)
                }
            }
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(io_err("reading", location, e)),
    }
}

async fn write(store: &dyn ObjectStore, path: &Path, location: &str, r: &Record) -> Result<()> {
    let json = serde_json::to_vec(r).map_err(|e| io_err("encoding", location, e))?;
    store
        .put(path, PutPayload::from(json))
        .await
        .map(drop)
        .map_err(|e| io_err("writing", location, e))
}

/// Whether the writer a record names still runs (see the module docs).
async fn alive(
    store: &dyn ObjectStore,
    path: &Path,
    location: &str,
    record: &Record,
) -> Result<Option<Record>> {
    let scope = pid_scope();
    if !scope.is_empty() && record.pid_scope == scope {
        if record.pid == std::process::id() {
            let live = live_claims()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&record.id);
            return Ok(live.then(|| record.clone()));
        }
        if !pid_running(record.pid) {
            return Ok(None);
        }
    }
    tracing::info!(
        %location,
        holder = %record.describe(),
        "watching the holder's heartbeat for up to {} s",
        STALE_AFTER.as_secs()
    );
    let deadline = tokio::time::Instant::now() + STALE_AFTER;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(WATCH_EVERY).await;
        match read(store, path, location).await? {
            None => return Ok(None),
            Some(now) if now != *record => return Ok(Some(now)),
            Some(_) => {}
        }
    }
    Ok(None)
}

/// Before opening as writer: refuse when a live writer holds the store (unless `takeover`).
/// Returns the generation the new claim takes.
pub async fn check(
    store: &dyn ObjectStore,
    path: &Path,
    location: &str,
    takeover: bool,
) -> Result<u64> {
    let Some(record) = read(store, path, location).await? else {
        return Ok(1);
    };
    let generation = record.generation + 1;
    if takeover {
        tracing::warn!(%location, holder = %record.describe(), "taking the store over (--takeover): its writer, if it still runs, is fenced");
        return Ok(generation);
    }
    match alive(store, path, location, &record).await? {
        Some(live) => Err(Error::Locked {
            path: location.to_string(),
            source: Box::new(Held {
                holder: live.describe(),
            }),
        }),
        None => {
            tracing::info!(%location, holder = %record.describe(), "the last writer is gone; its holder record is stale");
            Ok(generation)
        }
    }
}

/// This writer's claim: its record, rewritten every [`BEAT`] until the engine closes.
pub struct Claim {
    id: u64,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim").field("id", &self.id).finish()
    }
}

impl Claim {
    /// After the database opened: write the record and start the heartbeat.
    pub async fn start(
        store: Arc<dyn ObjectStore>,
        path: Path,
        location: String,
        generation: u64,
    ) -> Result<Claim> {
        let now = unix_ms();
        let mut record = Record {
            id: rand::random(),
            generation,
            beat: 0,
            command: command_line(),
            pid: std::process::id(),
            host: host_name(),
            pid_scope: pid_scope(),
            since_ms: now,
            beat_ms: now,
        };
        live_claims()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(record.id);
        if let Err(e) = write(store.as_ref(), &path, &location, &record).await {
            forget(record.id);
            return Err(e);
        }
        let id = record.id;
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(BEAT) => {}
                    _ = stopped.changed() => break,
                }
                match read(store.as_ref(), &path, &location).await {
                    Ok(Some(theirs))
                        if theirs.id != record.id
                            && (theirs.generation, theirs.id) > (record.generation, record.id) =>
                    {
                        tracing::warn!(%location, successor = %theirs.describe(), "another writer took the store over; this one is fenced and stops its heartbeat");
                        forget(record.id);
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(%location, error = %e, "could not read the holder record");
                        continue;
                    }
                }
                record.beat += 1;
                record.beat_ms = unix_ms();
                if let Err(e) = write(store.as_ref(), &path, &location, &record).await {
                    tracing::warn!(%location, error = %e, "could not renew the holder record");
                }
            }
            // Closed: remove the record if it is still this writer's.
            if let Ok(Some(theirs)) = read(store.as_ref(), &path, &location).await {
                if theirs.id == record.id {
                    if let Err(e) = store.as_ref().delete(&path).await {
                        tracing::warn!(%location, error = %e, "could not remove the holder record");
                    }
                }
            }
        });
        Ok(Claim {
            id,
            stop,
            task: Mutex::new(Some(task)),
        })
    }

    /// The engine closed: stop the heartbeat and remove the record.
    pub async fn release(&self) {
        forget(self.id);
        let _ = self.stop.send(true);
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

impl Drop for Claim {
    /// Dropped without a close: the claim is no longer live in this process; the task removes
    /// the record if the runtime still runs it.
    fn drop(&mut self) {
        forget(self.id);
        let _ = self.stop.send(true);
    }
}

fn forget(id: u64) {
    live_claims()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_and_a_missing_pid_does_not() {
        assert!(pid_running(std::process::id()));
        assert!(!pid_running(u32::MAX - 7));
        assert!(
            !pid_scope().is_empty(),
            "Linux names the boot and PID namespace"
        );
    }
}
