//! Power loss, simulated at the engine boundary.
//!
//! [`PowerEngine`] is an in-memory [`Engine`] that keeps two states: the *live* one (what
//! `apply` wrote, what reads see) and the *durable image*: exactly what the last completed
//! `sync` covered (the live state when that sync began). At a crash point drawn from a seed,
//! the power goes: that call and every later one fail, and whatever the image does not hold is
//! gone. A sync that the crash interrupts may or may not have reached the disk: a seeded coin
//! decides. Core's [`EngineBackend`] sits on top unchanged, so the group commit, the
//! preconditions and close are what is being checked, with the key space's real work.
//!
//! [`run`] drives rounds of that work (concurrent committers issuing and naming keys with
//! companion rows, deleting, raising retain-from, GC, PURGE, close) with a crash at a random
//! engine call, reopens the key space on the durable image, and checks:
//! - every acknowledged commit is there, and nothing a refused commit wrote is;
//! - each table row has all its companion rows and no companion row is without its table row
//!   (no batch is half there);
//! - no id is issued twice, across every round on the same store;
//! - the stored mark of the table space is above every bound key.
//!
//! Every round runs on a current-thread runtime from its own seed, so a failing round replays
//! exactly from the seed it prints; `ROCKLAKE_POWER_TRACE=1` prints every step of the workers.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rocklake_core::backend::{BatchOp, Capabilities, KeyRange, KvPair, Order, ReadView};
use rocklake_core::memory::scan_map;
use rocklake_core::{
    keystone, Admin, Engine, EngineBackend, Error, KeyChoice, Keyspace, KeyspaceOptions, KvBackend,
    Result,
};

use crate::crash::COMPANIONS;
use crate::rows::table_cells;

type Map = BTreeMap<Bytes, Bytes>;

/// Where a crash hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CrashKind {
    /// A point read or scan.
    Read,
    /// A batch about to be applied.
    Apply,
    /// A sync whose batches did not reach the disk.
    SyncLost,
    /// A sync whose batches reached the disk, but whose caller never heard so.
    SyncKept,
    /// Taking a snapshot.
    Snapshot,
    /// Closing, before the last sync reached the disk.
    CloseLost,
    /// Closing, after the last sync reached the disk.
    CloseKept,
}

struct State {
    live: Arc<Map>,
    /// Batches applied so far, and how many of them the durable image holds: an older sync
    /// finishing after a newer one must not take the image back.
    applied: u64,
    durable_upto: u64,
    durable: Arc<Map>,
    calls: u64,
    /// The engine call at which the power fails.
    crash_at: u64,
    crashed: Option<(u64, CrashKind)>,
    coin: StdRng,
}

/// An in-memory engine whose power can fail (see the module docs).
pub struct PowerEngine {
    state: Arc<Mutex<State>>,
    closed: AtomicBool,
}

impl fmt::Debug for PowerEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PowerEngine")
            .field("crash_at", &lock(&self.state).crash_at)
            .finish()
    }
}

/// What the test keeps of a [`PowerEngine`] once the key space owns it.
#[derive(Clone)]
pub struct Power(Arc<Mutex<State>>);

impl Power {
    /// What a restart after the crash finds.
    pub fn durable_image(&self) -> Arc<Map> {
        lock(&self.0).durable.clone()
    }

    /// Fail the power at the `n`-th engine call from now (1 = the next).
    pub fn crash_in(&self, n: u64) {
        let mut st = lock(&self.0);
        st.crash_at = st.calls + n;
    }

    /// The crash, if it happened: at which engine call, and of what kind.
    pub fn crashed(&self) -> Option<(u64, CrashKind)> {
        lock(&self.0).crashed
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn lost(call: u64) -> Error {
    Error::Engine {
        engine: "power",
        message: format!("the power failed (crash point: engine call {call})"),
        source: None,
    }
}

impl PowerEngine {
    /// An engine starting from `image`, whose power fails at engine call `crash_at` (1 = the
    /// first; `u64::MAX`: never); `seed` decides whether an interrupted sync reached the disk.
    pub fn new(image: Arc<Map>, crash_at: u64, seed: u64) -> (PowerEngine, Power) {
        let state = Arc::new(Mutex::new(State {
            live: image.clone(),
            applied: 0,
            durable_upto: 0,
            durable: image,
            calls: 0,
            crash_at,
            crashed: None,
            coin: StdRng::seed_from_u64(seed),
        }));
        (
            PowerEngine {
                state: state.clone(),
                closed: AtomicBool::new(false),
            },
            Power(state),
        )
    }

    /// Count a call; fail it if the power is gone or goes now. `kept` picks the kind of a crash
    /// that hits here from the coin (`None`: this call has no durable effect to keep).
    fn tick(
        &self,
        kind: CrashKind,
        kept: Option<CrashKind>,
    ) -> std::result::Result<std::sync::MutexGuard<'_, State>, Error> {
        let mut st = lock(&self.state);
        if let Some((at, _)) = st.crashed {
            return Err(lost(at));
        }
        if self.closed.load(AtomicOrdering::Acquire) {
            return Err(Error::Closed);
        }
        st.calls += 1;
        let call = st.calls;
        if call == st.crash_at {
            let mut kind = kind;
            if let Some(kept_kind) = kept {
                if st.coin.random_bool(0.5) {
                    st.durable = st.live.clone();
                    st.durable_upto = st.applied;
                    kind = kept_kind;
                }
            }
            st.crashed = Some((call, kind));
            return Err(lost(call));
        }
        Ok(st)
    }
}

#[async_trait]
impl ReadView for PowerEngine {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        let st = self.tick(CrashKind::Read, None)?;
        Ok(st.live.get(key).cloned())
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        let st = self.tick(CrashKind::Read, None)?;
        Ok(scan_map(&st.live, range, order, limit))
    }
}

/// A frozen map: the power engine's snapshot.
struct Frozen(Arc<Map>);

#[async_trait]
impl ReadView for Frozen {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.0.get(key).cloned())
    }

    async fn scan(&self, range: &KeyRange, order: Order, limit: usize) -> Result<Vec<KvPair>> {
        Ok(scan_map(&self.0, range, order, limit))
    }
}

#[async_trait]
impl Engine for PowerEngine {
    fn name(&self) -> &'static str {
        "power"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            persistent: true,
            exclusive_open: false,
            fences_on_open: false,
            point_in_time_views: true,
        }
    }

    async fn apply(&self, ops: Vec<BatchOp>) -> Result<()> {
        let mut st = self.tick(CrashKind::Apply, None)?;
        st.applied += 1;
        let live = Arc::make_mut(&mut st.live);
        for op in ops {
            match op {
                BatchOp::Put(k, v) => {
                    live.insert(k, v);
                }
                BatchOp::Delete(k) => {
                    live.remove(&k);
                }
            }
        }
        Ok(())
    }

    async fn sync(&self) -> Result<()> {
        // Covers what was applied before the call: the live state now.
        let (covered, upto) = {
            let st = self.tick(CrashKind::SyncLost, Some(CrashKind::SyncKept))?;
            (st.live.clone(), st.applied)
        };
        // Let other tasks run while the "disk" works, as a real sync would.
        tokio::task::yield_now().await;
        let mut st = lock(&self.state);
        if let Some((at, _)) = st.crashed {
            return Err(lost(at));
        }
        if upto > st.durable_upto {
            st.durable = covered;
            st.durable_upto = upto;
        }
        Ok(())
    }

    async fn snapshot(&self) -> Result<Option<Arc<dyn ReadView>>> {
        let st = self.tick(CrashKind::Snapshot, None)?;
        Ok(Some(Arc::new(Frozen(st.live.clone()))))
    }

    async fn close(&self) -> Result<()> {
        let mut st = self.tick(CrashKind::CloseLost, Some(CrashKind::CloseKept))?;
        st.durable = st.live.clone();
        st.durable_upto = st.applied;
        drop(st);
        self.closed.store(true, AtomicOrdering::Release);
        Ok(())
    }
}

/// What the rounds covered.
#[derive(Debug, Default)]
pub struct PowerSummary {
    /// Rounds run.
    pub rounds: u64,
    /// Crashes by kind (rounds whose crash point lay past their work crashed nowhere).
    pub crashes: BTreeMap<CrashKind, u64>,
    /// Crashes while the key space was opening (recovery), working and closing.
    pub phases: BTreeMap<&'static str, u64>,
    /// Rounds whose work ended before their crash point.
    pub uncrashed: u64,
    /// Commits acknowledged, in total; all were found after the crash.
    pub acknowledged: u64,
    /// Commits refused (duplicates, conflicts), in total; none left anything behind.
    pub refused: u64,
    /// Commits in flight at the crash (either outcome is allowed; none was half there).
    pub uncertain: u64,
    /// Ids issued, in total; none twice.
    pub issued: u64,
    /// Acknowledged commits missing after a crash (must be 0: a round with one fails).
    pub lost: u64,
}

/// What a worker did to one id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Have {
    Absent,
    Live,
    Deleted,
}

/// The ids one worker owns, with their acknowledged state and the state an in-flight commit
/// might have left instead.
#[derive(Default)]
struct Ledger {
    ids: BTreeMap<u64, (Have, Option<Have>)>,
}

impl Ledger {
    /// An acknowledged state. An absent key is no longer this worker's: after PURGE another
    /// worker may name it.
    fn settle(&mut self, id: u64, have: Have) {
        if have == Have::Absent {
            self.ids.remove(&id);
        } else {
            self.ids.insert(id, (have, None));
        }
    }

    fn maybe(&mut self, id: u64, have: Have) {
        let entry = self.ids.entry(id).or_insert((Have::Absent, None));
        entry.1 = Some(have);
    }

    fn live(&self) -> Vec<u64> {
        self.ids
            .iter()
            .filter(|(_, (h, _))| *h == Have::Live)
            .map(|(id, _)| *id)
            .collect()
    }
}

/// One worker's outcome counts.
#[derive(Default)]
struct Counts {
    acked: u64,
    refused: u64,
    uncertain: u64,
    unexpected: Option<String>,
}

/// The range of named keys worker `w` uses (disjoint from every other worker's and above the
/// issued keys of a round).
fn named_range(w: u64) -> (u64, u64) {
    let lo = 1_000_000 * (w + 1);
    (lo, lo + 200)
}

/// What one step did: `Ok(Some((id, state)))` acknowledged that state of a key, `Ok(None)`
/// acknowledged nothing to record; `Err((error, what it might have left))`.
type Outcome = std::result::Result<Option<(u64, Have)>, (Error, Option<(u64, Have)>)>;

enum Step {
    Issue,
    Name(u64),
    Delete(u64),
    Maintain,
}

/// One transaction: a table row (named or issued) and its companions, or a delete.
async fn insert(
    ks: &Keyspace,
    choice: KeyChoice,
    issued: &Mutex<Vec<u64>>,
    drawn: &mut Option<u64>,
) -> Result<u64> {
    let mut t = ks.begin().await?;
    let p = t
        .insert(&keystone::TABLE, choice, table_cells("power"))
        .await?;
    if matches!(choice, KeyChoice::Issued) {
        issued.lock().unwrap_or_else(|e| e.into_inner()).push(p.id);
        *drawn = Some(p.id);
    }
    crate::rows::put_companions(&mut t, p.id, p.snapshot)?;
    t.commit().await?;
    Ok(p.id)
}

async fn delete(ks: &Keyspace, id: u64) -> Result<bool> {
    let mut t = ks.begin().await?;
    let d = t.delete(&keystone::TABLE, id).await?;
    // The companions go in the same batch: a deleted key has none, a live one all.
    crate::rows::delete_companions(&mut t, id)?;
    t.commit().await?;
    Ok(d)
}

async fn worker(
    ks: Keyspace,
    w: u64,
    mut rng: StdRng,
    steps: usize,
    issued: Arc<Mutex<Vec<u64>>>,
    power: Power,
    mut ledger: Ledger,
) -> (Ledger, Counts) {
    let mut counts = Counts::default();
    let (lo, hi) = named_range(w);
    for _ in 0..steps {
        if power.crashed().is_some() {
            break;
        }
        let live = ledger.live();
        let step = match rng.random_range(0..10) {
            0..=3 => Step::Issue,
            4..=5 => Step::Name(rng.random_range(lo..hi)),
            6..=8 if !live.is_empty() => Step::Delete(live[rng.random_range(0..live.len())]),
            9 => Step::Maintain,
            _ => Step::Issue,
        };
        // The outcome: `Ok(Some(id, state))` acknowledged; `Ok(None)` nothing to record.
        let outcome: Outcome = match step {
            Step::Issue => {
                let mut drawn = None;
                match insert(&ks, KeyChoice::Issued, &issued, &mut drawn).await {
                    Ok(id) => Ok(Some((id, Have::Live))),
                    Err(e) => Err((e, drawn.map(|id| (id, Have::Live)))),
                }
            }
            Step::Name(id) => match insert(&ks, KeyChoice::Named(id), &issued, &mut None).await {
                Ok(id) => Ok(Some((id, Have::Live))),
                Err(e) => Err((e, Some((id, Have::Live)))),
            },
            Step::Delete(id) => match delete(&ks, id).await {
                Ok(_) => Ok(Some((id, Have::Deleted))),
                Err(e) => Err((e, Some((id, Have::Deleted)))),
            },
            Step::Maintain => {
                // Raise retain-from to the latest snapshot, GC, then PURGE this worker's
                // deleted keys one by one (a range would free other workers' keys too).
                let deleted: Vec<u64> = ledger
                    .ids
                    .iter()
                    .filter(|(_, (h, _))| *h == Have::Deleted)
                    .map(|(id, _)| *id)
                    .collect();
                let mut in_flight = None;
                let r: Result<()> = async {
                    let latest = ks.current_snapshot().await?;
                    ks.set_retain_from(latest).await?;
                    ks.gc().await?;
                    for id in deleted {
                        in_flight = Some(id);
                        let report = ks
                            .purge(&keystone::TABLE, id..=id, &Admin::grant("power-test"))
                            .await?;
                        for freed in report.freed {
                            ledger.settle(freed, Have::Absent);
                        }
                        in_flight = None;
                    }
                    Ok(())
                }
                .await;
                match r {
                    Ok(()) => Ok(None),
                    Err(e) => Err((e, in_flight.map(|id| (id, Have::Absent)))),
                }
            }
        };
        if std::env::var_os("ROCKLAKE_POWER_TRACE").is_some() {
            let what = match step {
                Step::Issue => "issue".to_string(),
                Step::Name(id) => format!("name {id}"),
                Step::Delete(id) => format!("delete {id}"),
                Step::Maintain => "maintain".to_string(),
            };
            let how = match &outcome {
                Ok(v) => format!("ok {v:?}"),
                Err((e, v)) => format!("err {v:?}: {e}"),
            };
            eprintln!("  worker {w}: {what}: {how}");
        }
        match outcome {
            Ok(Some((id, have))) => {
                ledger.settle(id, have);
                counts.acked += 1;
            }
            Ok(None) => counts.acked += 1,
            Err((_, what)) if power.crashed().is_some() => {
                counts.uncertain += 1;
                if let Some((id, have)) = what {
                    // Only an id this worker drew or owns can be in flight.
                    let owned = (lo..hi).contains(&id) || ledger.ids.contains_key(&id);
                    let drawn_here = matches!(step, Step::Issue);
                    if owned || drawn_here {
                        ledger.maybe(id, have);
                    }
                }
                break;
            }
            Err((e, _)) => {
                // Without a crash, a commit may only be refused for what it asked: a duplicate
                // key or a conflict to retry.
                let expected = matches!(e, Error::AlreadyExists { .. }) || e.is_retryable();
                if !expected && counts.unexpected.is_none() {
                    counts.unexpected = Some(format!("worker {w}: unexpected error: {e}"));
                }
                counts.refused += 1;
            }
        }
    }
    (ledger, counts)
}

/// The state of every table-space key in a store, and its companion rows.
async fn read_back(
    backend: &Arc<dyn KvBackend>,
) -> std::result::Result<(BTreeMap<u64, Have>, BTreeMap<u64, u64>, u64), String> {
    let ks = Keyspace::open_read_only(backend.clone())
        .await
        .map_err(|e| format!("reopen read-only: {e}"))?;
    let view = backend.view().await.map_err(|e| e.to_string())?;
    let (live, companions) = crate::rows::table_keys(view.as_ref())
        .await
        .map_err(|e| e.to_string())?;
    let bound = live
        .into_iter()
        .map(|(id, live)| (id, if live { Have::Live } else { Have::Deleted }))
        .collect();
    let mark = ks
        .describe(&keystone::TABLE)
        .await
        .map_err(|e| e.to_string())?
        .next_id;
    Ok((bound, companions, mark))
}

/// Run `rounds` power-loss rounds from `seed` (round `r` runs from `seed + r`), starting a new
/// store every `per_store` rounds. Returns the summary, or the first failure with the seed that
/// replays it.
pub fn run(rounds: u64, seed: u64, per_store: u64) -> std::result::Result<PowerSummary, String> {
    let mut summary = PowerSummary::default();
    let mut image: Arc<Map> = Arc::new(Map::new());
    let mut issued_before: BTreeSet<u64> = BTreeSet::new();
    let mut ledgers: Vec<Ledger> = Vec::new();
    for r in 0..rounds {
        if r % per_store.max(1) == 0 {
            image = Arc::new(Map::new());
            issued_before.clear();
            ledgers.clear();
        }
        let round_seed = seed.wrapping_add(r);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| e.to_string())?;
        let (next, ledgers_after) = runtime
            .block_on(round(
                image.clone(),
                round_seed,
                &mut issued_before,
                std::mem::take(&mut ledgers),
                &mut summary,
            ))
            .map_err(|e| format!("round {r}, seed {round_seed}: {e}"))?;
        image = next;
        ledgers = ledgers_after;
        summary.rounds += 1;
    }
    Ok(summary)
}

const WORKERS: u64 = 3;

async fn round(
    image: Arc<Map>,
    seed: u64,
    issued_before: &mut BTreeSet<u64>,
    mut ledgers: Vec<Ledger>,
    summary: &mut PowerSummary,
) -> std::result::Result<(Arc<Map>, Vec<Ledger>), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    // A quarter of the rounds crash while closing instead (close writes the marks back,
    // syncs and closes the engine).
    let at_close = rng.random_bool(0.25);
    let crash_at = if at_close {
        u64::MAX
    } else {
        rng.random_range(1..=300u64)
    };
    let (engine, power) = PowerEngine::new(image, crash_at, rng.random());
    let backend: Arc<dyn KvBackend> = Arc::new(EngineBackend::new(engine));
    let options = KeyspaceOptions {
        id_reservation: rng.random_range(1..=8),
        ..KeyspaceOptions::default()
    };
    ledgers.resize_with(WORKERS as usize, Ledger::default);
    let issued = Arc::new(Mutex::new(Vec::new()));
    let mut phase = "open";
    let opened = Keyspace::open_with(backend.clone(), options).await;
    if let Ok(ks) = opened {
        phase = "work";
        let mut tasks = Vec::new();
        for (w, ledger) in ledgers.drain(..).enumerate() {
            let steps = rng.random_range(1..=12);
            tasks.push(tokio::spawn(worker(
                ks.clone(),
                w as u64,
                StdRng::seed_from_u64(rng.random()),
                steps,
                issued.clone(),
                power.clone(),
                ledger,
            )));
        }
        for t in tasks {
            let (ledger, counts) = t.await.map_err(|e| format!("a worker panicked: {e}"))?;
            summary.acknowledged += counts.acked;
            summary.refused += counts.refused;
            summary.uncertain += counts.uncertain;
            if let Some(e) = counts.unexpected {
                return Err(e);
            }
            ledgers.push(ledger);
        }
        if power.crashed().is_none() {
            phase = "close";
            if at_close {
                power.crash_in(rng.random_range(1..=5));
            }
            let _ = ks.close().await;
        }
    }
    match power.crashed() {
        Some((_, kind)) => {
            *summary.crashes.entry(kind).or_default() += 1;
            *summary.phases.entry(phase).or_default() += 1;
        }
        None => summary.uncrashed += 1,
    }

    // Ids: none issued twice, in this round or across the rounds on this store.
    let issued = std::mem::take(&mut *issued.lock().unwrap_or_else(|e| e.into_inner()));
    summary.issued += issued.len() as u64;
    for id in issued {
        if !issued_before.insert(id) {
            return Err(format!("id {id} was issued twice"));
        }
    }

    // Restart on the durable image and read everything back.
    let image = power.durable_image();
    let (engine, after) = PowerEngine::new(image, u64::MAX, 0);
    let backend: Arc<dyn KvBackend> = Arc::new(EngineBackend::new(engine));
    let (bound, companions, mark) = read_back(&backend).await?;

    // A named insert in flight on a key another worker holds was a duplicate: it landed
    // nothing, whatever the store shows for that key.
    let held: BTreeMap<u64, usize> = ledgers
        .iter()
        .enumerate()
        .flat_map(|(w, l)| {
            l.ids
                .iter()
                .filter(|(_, (h, _))| *h != Have::Absent)
                .map(move |(id, _)| (*id, w))
        })
        .collect();
    for (w, ledger) in ledgers.iter_mut().enumerate() {
        ledger.ids.retain(|id, (have, _)| {
            *have != Have::Absent || held.get(id).is_none_or(|owner| *owner == w)
        });
    }
    // Inserts of one key in flight on two workers at once (one named it while another was
    // issued it): at most one landed, and the store cannot tell whose, since their rows are
    // alike. The first of those workers takes the key; the others' commits landed nothing.
    // (Both ledgers taking it made the next round expect it live in one after the other
    // deleted it: round 6957 of seed 647093512, 2026-12-04.)
    let mut first_in_flight: BTreeMap<u64, usize> = BTreeMap::new();
    for (w, ledger) in ledgers.iter_mut().enumerate() {
        ledger.ids.retain(|id, (have, maybe)| {
            *have != Have::Absent
                || maybe.is_none()
                || *first_in_flight.entry(*id).or_insert(w) == w
        });
    }
    for (w, ledger) in ledgers.iter_mut().enumerate() {
        for (id, (have, maybe)) in ledger.ids.iter_mut() {
            let found = bound.get(id).copied().unwrap_or(Have::Absent);
            if found == *have {
                *maybe = None;
                continue;
            }
            if Some(found) == *maybe {
                // The commit in flight at the crash landed: it is the state now.
                *have = found;
                *maybe = None;
                continue;
            }
            if *have == Have::Absent && maybe.is_none() {
                continue;
            }
            summary.lost += 1;
            return Err(format!(
                "worker {w}: key {id} should be {have:?} after the crash (or {maybe:?} from the \
                 commit in flight), but the store has it {found:?}"
            ));
        }
    }
    for ledger in ledgers.iter_mut() {
        ledger.ids.retain(|_, (have, _)| *have != Have::Absent);
    }
    let owned: BTreeSet<u64> = ledgers
        .iter()
        .flat_map(|l| l.ids.iter().filter(|(_, (h, _))| *h != Have::Absent))
        .map(|(id, _)| *id)
        .collect();
    for id in bound.keys() {
        if !owned.contains(id) {
            return Err(format!(
                "key {id} is bound, but no commit that bound it was acknowledged or in flight"
            ));
        }
    }
    for (id, have) in &bound {
        let n = companions.get(id).copied().unwrap_or(0);
        let want = if *have == Have::Live { COMPANIONS } else { 0 };
        if n != want {
            return Err(format!(
                "key {id} ({have:?}) is half there: {n} companion rows, not {want}"
            ));
        }
    }
    for id in companions.keys() {
        if bound.get(id) != Some(&Have::Live) {
            return Err(format!(
                "companion rows of key {id} are there without its live row (an orphan)"
            ));
        }
    }
    if let Some(top) = bound.keys().next_back() {
        if mark <= *top {
            return Err(format!(
                "the stored mark {mark} is not above the bound key {top}"
            ));
        }
    }
    // The next round starts from what a clean restart leaves.
    backend.close().await.map_err(|e| e.to_string())?;
    Ok((after.durable_image(), ledgers))
}
