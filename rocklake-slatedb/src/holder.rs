//! Who holds a SlateDB store as its writer, so that a second writer is refused instead of
//! silently fencing the first.
//!
//! SlateDB lets any process open a store as writer: the newcomer bumps the writer epoch and the
//! running writer (a `rocklake serve`, say) is fenced at its next flush. That is how a standby
//! takes over, but done by accident (a `rocklake sql` or `rocklake insert` against the store a
//! server runs on) it takes a live server down. So every writer RockLake opens on a folder or a
//! bucket keeps a small *holder record* beside the database (`rocklake.writer` next to the
//! `rocklake/` prefix): who it is (command, pid, host), since when, and a heartbeat counter it
//! rewrites every quarter of its lease ([`BEAT`] by default). A new writer first reads the record:
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
//!
//! # Lease
//!
//! The record is also the writer's lease ([`rocklake_core::lease`]). The writer rewrites it
//! every quarter of its lease ([`crate::SlateOptions::lease`], 8 s by default, stated in the
//! record), and each rewrite that finds the record still its own extends the lease to the
//! moment that rewrite *began* plus the lease. A writer that cannot rewrite it (cut off from
//! the store, paused) stops answering as the writer when the lease runs out; one that finds a
//! successor's record gives the lease up at once.
//!
//! A standby ([`await_vacancy`]) takes the store over once it has seen one record unchanged
//! for 1.25 times the lease that record states (or no record: the writer closed cleanly).
//! Why that is safe: the standby's watch starts after it read the record, so after the
//! writer's last rewrite began, which is where the writer's lease is counted from. The writer's
//! lease therefore ends before the standby's wait does, as long as the two machines' clocks run
//! at rates within 10 % of each other (1.1 / 0.9 < 1.25); clock *offsets* do not matter, as
//! each side measures only spans on its own monotonic clock. The standby then opens the store
//! as writer, which fences the old writer in SlateDB and in RockLake's writer epoch: even a
//! writer whose lease was wrongly still running cannot commit after that open. What the lease
//! adds to fencing is that a cut-off writer also stops *reading* as the writer.
//!
//! Without conditional writes on every store (a local folder has none), a writer paused
//! between reading the record and rewriting it can overwrite a successor's record once; the
//! successor rewrites its own at its next beat, the paused writer then sees it and gives up,
//! and its commits were refused by fencing throughout.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use rocklake_core::error::{Error, Result};
use rocklake_core::lease::Lease;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The writer's lease unless the URL says otherwise (`lease_ms`); it rewrites its record every
/// quarter of it (2 s).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(8);

/// How often a writer with the default lease rewrites its record.
pub const BEAT: Duration = Duration::from_secs(2);

/// The shortest lease a URL may ask for.
pub const MIN_LEASE: Duration = Duration::from_millis(200);

/// How long a newcomer that is not a standby watches a record it cannot otherwise judge before
/// calling it stale, at least: more than two beats of the default lease, so one slow write does
/// not make a live writer look gone (longer for a record with a longer lease).
pub const STALE_AFTER: Duration = Duration::from_secs(5);

/// How long a standby waits, past the record's last change, for a lease of `lease`: see the
/// module docs' "Lease".
pub fn takeover_after(lease: Duration) -> Duration {
    lease.mul_f64(1.25)
}

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
    /// The holder's lease in milliseconds (0 in records written before leases: then
    /// [`DEFAULT_LEASE`]).
    #[serde(default)]
    pub lease_ms: u64,
}

impl Record {
    /// The lease this record's writer keeps.
    pub fn lease(&self) -> Duration {
        match self.lease_ms {
            0 => DEFAULT_LEASE,
            ms => Duration::from_millis(ms),
        }
    }

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
    let watch = STALE_AFTER.max(record.lease().mul_f64(0.625));
    tracing::info!(
        %location,
        holder = %record.describe(),
        "watching the holder's heartbeat for up to {:.1} s",
        watch.as_secs_f64()
    );
    let deadline = tokio::time::Instant::now() + watch;
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

/// This writer's claim: its record, rewritten every quarter lease until the engine closes,
/// and the lease those rewrites keep (see the module docs).
pub struct Claim {
    id: u64,
    lease: Arc<Lease>,
    lease_for: Duration,
    store: Arc<dyn ObjectStore>,
    path: Path,
    location: String,
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
        lease_for: Duration,
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
            lease_ms: lease_for.as_millis() as u64,
        };
        live_claims()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(record.id);
        let began = Instant::now();
        if let Err(e) = write(store.as_ref(), &path, &location, &record).await {
            forget(record.id);
            return Err(e);
        }
        let lease = Arc::new(Lease::new(began + lease_for));
        let id = record.id;
        let (stop, mut stopped) = watch::channel(false);
        let kept = lease.clone();
        let (kept_store, kept_path, kept_location) =
            (store.clone(), path.clone(), location.clone());
        let task = tokio::spawn(async move {
            let lease = kept;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(lease_for / 4) => {}
                    _ = stopped.changed() => break,
                }
                if lease.stepped_down() {
                    tracing::warn!(%location, "the lease ran out and this writer steps down: it stops renewing its holder record, which a standby then sees go stale");
                    forget(record.id);
                    return;
                }
                let began = Instant::now();
                match read(store.as_ref(), &path, &location).await {
                    Ok(Some(theirs))
                        if theirs.id != record.id
                            && (theirs.generation, theirs.id) > (record.generation, record.id) =>
                    {
                        tracing::warn!(%location, successor = %theirs.describe(), "another writer took the store over; this one is fenced and stops its heartbeat");
                        lease.lose(format!(
                            "another writer took the store over: {}",
                            theirs.describe()
                        ));
                        forget(record.id);
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(%location, error = %e, "could not read the holder record; the lease is not renewed");
                        continue;
                    }
                }
                if lease.stepped_down() {
                    // Ran out while the record was read: not renewed either.
                    continue;
                }
                record.beat += 1;
                record.beat_ms = unix_ms();
                match write(store.as_ref(), &path, &location, &record).await {
                    Ok(()) => lease.renew(began + lease_for),
                    Err(e) => {
                        tracing::warn!(%location, error = %e, "could not renew the holder record");
                    }
                }
            }
            // Closed: remove the record if it is still this writer's and its lease still runs.
            // A writer whose lease lapsed leaves it: a standby may already be waiting it out,
            // and a record that vanished would let every standby take the store at once.
            if !lease.is_held() {
                return;
            }
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
            lease,
            lease_for,
            store: kept_store,
            path: kept_path,
            location: kept_location,
            stop,
            task: Mutex::new(Some(task)),
        })
    }

    /// For a standby's takeover, right after [`Claim::start`]: wait an eighth of the lease (at least
    /// 100 ms) and read the record back. Another standby that judged the store free in the same
    /// moment wrote its own claim meanwhile (a standby writes its claim within moments of
    /// reading the stale record), and of two such claims only the last written is still there:
    /// the other standby gets [`Error::Locked`] and goes on waiting, instead of both opening
    /// the store and one fencing the other.
    pub async fn confirm(&self) -> Result<()> {
        tokio::time::sleep((self.lease_for / 8).max(Duration::from_millis(100))).await;
        match read(self.store.as_ref(), &self.path, &self.location).await? {
            Some(theirs) if theirs.id != self.id => Err(Error::Locked {
                path: self.location.clone(),
                source: Box::new(Held {
                    holder: format!("{} (claimed in the same moment)", theirs.describe()),
                }),
            }),
            _ => Ok(()),
        }
    }

    /// The lease this claim keeps.
    pub fn lease(&self) -> &Arc<Lease> {
        &self.lease
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

/// For a standby: wait until the store's writer is gone, by its holder record (see the module
/// docs' "Lease"): no record, or one unchanged for [`takeover_after`] its lease. Rereads the
/// record every eighth of that lease (at least every 50 ms, at most every second). Returns the
/// record it judged stale, if any. A record that cannot be read is retried, not judged.
pub async fn await_vacancy(
    store: &dyn ObjectStore,
    path: &Path,
    location: &str,
) -> Result<Option<Record>> {
    let mut seen: Option<(Record, Instant)> = None;
    loop {
        let record = match read(store, path, location).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(%location, error = %e, "could not read the holder record; watching on");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let Some(record) = record else {
            return Ok(None);
        };
        let wait = takeover_after(record.lease());
        let since = match &seen {
            Some((before, since)) if *before == record => *since,
            _ => Instant::now(),
        };
        if since.elapsed() >= wait {
            tracing::info!(%location, holder = %record.describe(), "the writer's lease has run out");
            return Ok(Some(record));
        }
        let every = (record.lease() / 8).clamp(Duration::from_millis(50), Duration::from_secs(1));
        seen = Some((record, since));
        tokio::time::sleep(every).await;
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
