//! Sessions that really interleave, on RockLake (every engine) and on PostgreSQL 15 side by
//! side. Two to four sessions each run a script of DuckLake-shaped transactions (`REPEATABLE
//! READ`: read the latest snapshot, insert a snapshot and data files, end and delete files,
//! read again, commit or roll back) plus some statements outside a block, and a random
//! schedule picks which session sends its next statement. Ids come from small ranges, so
//! sessions race for the same snapshot ids and rows.
//!
//! Each statement goes to both servers at once. Every answer must be the same: the command's
//! row count, the rows of a read (inside open transactions too), or the error's SQLSTATE. A
//! statement PostgreSQL holds back (it waits for another transaction's lock) must wait on
//! RockLake as well, and end the same way once the other transaction ends (`23505`, `40001`,
//! or going on after a rollback); two sessions waiting for each other must end with `40P01`
//! for the one that closed the cycle (PostgreSQL's `deadlock_timeout` is set short so that it
//! is that one, as it is on RockLake). Only one session waits at a time: a second statement
//! that would wait is cancelled on both sides (`57014`), because which of several waiters
//! PostgreSQL lets go first is a race among its backends. One difference is known and counted
//! (see [`known_difference`]). The outcomes are counted and printed; each fixed schedule's
//! outcome must have been seen.
//!
//! `ROCKLAKE_INTERLEAVE_CASES` sets the number of schedules (default 8; CI more; the first six
//! are fixed ones, for the outcomes random schedules reach only now and then), and
//! `ROCKLAKE_INTERLEAVE_SEED` replays one run (the seed is printed). `.ci/run` starts
//! PostgreSQL and sets `ROCKLAKE_TEST_PG`; without it the test fails in CI and says NOT RUN
//! elsewhere.

mod common;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use common::{open, stores};
use rocklake_sql::interrupt::Interrupt;
use rocklake_sql::types::pg_text;
use rocklake_sql::{Output, Session};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::{CancelToken, Client, NoTls, SimpleQueryMessage};

const DDL: &str = "CREATE TABLE ducklake_snapshot(snapshot_id BIGINT PRIMARY KEY, schema_version BIGINT);
CREATE TABLE ducklake_data_file(data_file_id BIGINT PRIMARY KEY, begin_snapshot BIGINT, end_snapshot BIGINT, record_count BIGINT)";

/// How long a statement PostgreSQL has not answered is taken to be waiting for a lock.
const WAIT: Duration = Duration::from_millis(150);
/// How long an answer may take once it is known to be coming.
const ANSWER: Duration = Duration::from_secs(20);

/// A small, seedable generator (xorshift64*), so a printed seed replays a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const READ_SNAPSHOTS: &str = "SELECT snapshot_id, schema_version FROM ducklake_snapshot";
const READ_FILES: &str =
    "SELECT data_file_id, begin_snapshot, end_snapshot, record_count FROM ducklake_data_file";

/// One session's statements: transactions as DuckLake writes them, and lone statements.
/// Snapshot ids grow with the script's position, from a range three wide, so that sessions at
/// the same point race for the same id; files come from a range of eight, so that sessions
/// change, end and delete the same rows.
fn script(rng: &mut Rng, units: usize) -> Vec<String> {
    const FILES: u64 = 8;
    let mut v = Vec::new();
    for unit in 0..units as u64 {
        let snapshot = 2 * unit + rng.below(3);
        // Half the files, so that two sessions often lock the same two rows in turn.
        let bump = |rng: &mut Rng| {
            format!(
                "UPDATE ducklake_data_file SET record_count = record_count + 1 WHERE data_file_id = {}",
                rng.below(FILES / 2)
            )
        };
        if rng.chance(20) {
            // Outside a block: one implicit transaction each.
            v.push(match rng.below(3) {
                0 => format!("INSERT INTO ducklake_snapshot VALUES ({snapshot}, 0)"),
                1 => bump(rng),
                _ => READ_FILES.to_string(),
            });
            continue;
        }
        v.push("BEGIN TRANSACTION ISOLATION LEVEL REPEATABLE READ".into());
        if rng.chance(60) {
            v.push("SELECT max(snapshot_id) FROM ducklake_snapshot".into());
        }
        if rng.chance(80) {
            v.push(format!(
                "INSERT INTO ducklake_snapshot VALUES ({snapshot}, {})",
                rng.below(3)
            ));
        }
        for _ in 0..rng.below(3) {
            v.push(format!(
                "INSERT INTO ducklake_data_file VALUES ({}, {snapshot}, NULL, {})",
                rng.below(FILES),
                rng.below(100)
            ));
        }
        // Rows other sessions may be changing too, in any order (so two may wait for each
        // other).
        for _ in 0..rng.below(3) {
            v.push(bump(rng));
        }
        if rng.chance(40) {
            v.push(format!(
                "UPDATE ducklake_data_file SET end_snapshot = {snapshot} WHERE end_snapshot IS NULL AND data_file_id IN ({}, {})",
                rng.below(FILES),
                rng.below(FILES)
            ));
        }
        if rng.chance(25) {
            v.push(format!(
                "DELETE FROM ducklake_data_file WHERE data_file_id = {}",
                rng.below(FILES)
            ));
        }
        if rng.chance(50) {
            v.push(
                if rng.chance(50) {
                    READ_FILES
                } else {
                    READ_SNAPSHOTS
                }
                .to_string(),
            );
        }
        v.push(if rng.chance(15) { "ROLLBACK" } else { "COMMIT" }.into());
    }
    v
}

type Request = (String, oneshot::Sender<String>);

/// A session of RockLake's in a task of its own, so that a statement can wait while others run.
fn our_worker(mut s: Session) -> mpsc::UnboundedSender<Request> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Request>();
    tokio::spawn(async move {
        while let Some((sql, reply)) = rx.recv().await {
            let a = match s.run(&sql).await {
                Ok(Output::Rows { batches, .. }) => {
                    let mut rows: Vec<Vec<Option<String>>> = Vec::new();
                    for b in &batches {
                        for r in 0..b.num_rows() {
                            rows.push(b.columns().iter().map(|c| pg_text(c.as_ref(), r)).collect());
                        }
                    }
                    rows.sort();
                    format!("rows {rows:?}")
                }
                Ok(o) => {
                    let tag = o.tag();
                    let n = tag.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok());
                    format!("ok {}", n.unwrap_or(0))
                }
                Err(e) => e.code.to_string(),
            };
            let _ = reply.send(a);
        }
    });
    tx
}

/// The same for one PostgreSQL connection.
fn pg_worker(c: Client) -> mpsc::UnboundedSender<Request> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Request>();
    tokio::spawn(async move {
        while let Some((sql, reply)) = rx.recv().await {
            let a = match c.simple_query(&sql).await {
                Ok(msgs) => {
                    let mut rows: Vec<Vec<Option<String>>> = Vec::new();
                    let (mut described, mut n) = (false, 0);
                    for m in msgs {
                        match m {
                            SimpleQueryMessage::RowDescription(_) => described = true,
                            SimpleQueryMessage::Row(r) => rows
                                .push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect()),
                            SimpleQueryMessage::CommandComplete(k) => n = k,
                            _ => {}
                        }
                    }
                    if described {
                        rows.sort();
                        format!("rows {rows:?}")
                    } else {
                        format!("ok {n}")
                    }
                }
                Err(e) => e
                    .code()
                    .map(|c| c.code().to_string())
                    .unwrap_or(e.to_string()),
            };
            let _ = reply.send(a);
        }
    });
    tx
}

/// A statement sent to both sides whose answers have not both come.
struct Sent {
    sql: String,
    ours: oneshot::Receiver<String>,
    pg: oneshot::Receiver<String>,
}

/// What the runs of the schedules saw.
#[derive(Default)]
struct Seen {
    statements: usize,
    waited: usize,
    outcomes: BTreeMap<String, usize>,
    /// Times the one known difference was met (see [`known_difference`]).
    known: usize,
}

/// How a statement's two answers compared.
enum Settled {
    /// Both answered alike.
    Same(String),
    /// Both still wait.
    Waits,
    /// Both answered, differently.
    Differ { ours: String, pg: String },
    /// One answered, the other waits.
    OneWaits(String),
}

async fn within(rx: &mut oneshot::Receiver<String>, d: Duration) -> Option<String> {
    tokio::time::timeout(d, rx)
        .await
        .ok()
        .map(|r| r.expect("worker ended"))
}

/// Wait up to `pg_wait` for PostgreSQL's answer to a sent statement, then for RockLake's.
async fn settle(sent: &mut Sent, pg_wait: Duration) -> Settled {
    let Some(pg) = within(&mut sent.pg, pg_wait).await else {
        // PostgreSQL waits. RockLake must too; if it answered, PostgreSQL may only be slow.
        let Ok(ours) = sent.ours.try_recv() else {
            return Settled::Waits;
        };
        return match within(&mut sent.pg, ANSWER).await {
            Some(pg) if pg == ours => Settled::Same(pg),
            Some(pg) => Settled::Differ { ours, pg },
            None => Settled::OneWaits(format!(
                "RockLake answered {ours} while PostgreSQL still waits for a lock"
            )),
        };
    };
    match within(&mut sent.ours, ANSWER).await {
        Some(ours) if ours == pg => Settled::Same(pg),
        Some(ours) => Settled::Differ { ours, pg },
        None => Settled::OneWaits(format!(
            "PostgreSQL answered {pg}; RockLake still waits after {ANSWER:?}"
        )),
    }
}

/// What a statement's answer was, by kind: `lone` for one sent outside a block (PostgreSQL
/// runs it at `READ COMMITTED`, unlike a DuckLake block).
fn outcome(sql: &str, answer: &str, lone: bool) -> String {
    let word = sql.split(' ').next().unwrap_or("");
    let word = if lone {
        format!("lone {word}")
    } else {
        word.to_string()
    };
    match answer {
        a if a.starts_with("rows") => "read".into(),
        a if a.starts_with("ok") => format!("{word} ok"),
        code => format!("{word} {code}"),
    }
}

/// The one answer RockLake knowingly gives otherwise (README, "Transactions"): an INSERT, in
/// a transaction, of a key whose row another transaction deleted and committed after this
/// one's snapshot. PostgreSQL inserts it (the transaction then sees the old row and the new
/// one); RockLake refuses it with `23505`. Told apart by the key being free in the latest
/// committed state.
async fn known_difference(sql: &str, ours: &str, pg: &str, checker: &Client) -> bool {
    if ours != "23505" || pg != "ok 1" {
        return false;
    }
    let Some(rest) = sql.strip_prefix("INSERT INTO ") else {
        return false;
    };
    let Some((table, values)) = rest.split_once(" VALUES (") else {
        return false;
    };
    let id = values.split(',').next().unwrap_or("");
    let column = match table {
        "ducklake_snapshot" => "snapshot_id",
        _ => "data_file_id",
    };
    let rows = checker
        .simple_query(&format!("SELECT 1 FROM {table} WHERE {column} = {id}"))
        .await
        .unwrap();
    !rows.iter().any(|m| matches!(m, SimpleQueryMessage::Row(_)))
}

/// One schedule's sessions on both sides and where each is in its script.
struct Run {
    ours: Vec<mpsc::UnboundedSender<Request>>,
    pg: Vec<mpsc::UnboundedSender<Request>>,
    /// Each session's cancel, on both sides.
    cancels: Vec<(Arc<Interrupt>, CancelToken)>,
    scripts: Vec<Vec<String>>,
    next: Vec<usize>,
    /// Whether each session is inside a block (`BEGIN` answered, no `COMMIT`/`ROLLBACK` yet).
    in_block: Vec<bool>,
    waiting: Vec<Option<Sent>>,
    log: Vec<String>,
    /// A PostgreSQL connection of no session's, to look at the committed state.
    checker: Client,
    /// A fixed schedule (sessions in turn), else a random one.
    order: VecDeque<usize>,
}

impl Run {
    fn send(&self, i: usize, sql: &str) -> Sent {
        let (otx, orx) = oneshot::channel();
        let (ptx, prx) = oneshot::channel();
        self.ours[i].send((sql.to_string(), otx)).unwrap();
        self.pg[i].send((sql.to_string(), ptx)).unwrap();
        Sent {
            sql: sql.to_string(),
            ours: orx,
            pg: prx,
        }
    }

    /// Take a settled statement of session `i`: `Ok(true)` when it is over (answered alike,
    /// or the known difference, after which both sides roll the transaction back and the
    /// session goes on after its end), `Ok(false)` while both wait, `Err` when they differ.
    async fn take(
        &mut self,
        i: usize,
        mut sent: Sent,
        pg_wait: Duration,
        waited: bool,
        seen: &mut Seen,
    ) -> Result<bool, String> {
        let after = if waited { " (after waiting)" } else { "" };
        match settle(&mut sent, pg_wait).await {
            Settled::Same(a) => {
                self.log.push(format!("s{i} {} -> {a}{after}", sent.sql));
                let o = format!("{}{after}", outcome(&sent.sql, &a, !self.in_block[i]));
                if sent.sql.starts_with("BEGIN") {
                    self.in_block[i] = true;
                } else if matches!(sent.sql.as_str(), "COMMIT" | "ROLLBACK") {
                    self.in_block[i] = false;
                }
                *seen.outcomes.entry(o).or_default() += 1;
                seen.statements += 1;
                Ok(true)
            }
            Settled::Waits if !waited && self.waiting.iter().any(Option::is_some) => {
                // A second session waits. Which of several waiters PostgreSQL lets go first
                // when a lock is freed is a race among its backends, so only one waits at a
                // time: this one is cancelled on both sides, which must end it alike.
                let (ours, pg) = &self.cancels[i];
                ours.cancel();
                pg.cancel_query(NoTls).await.unwrap();
                match settle(&mut sent, ANSWER).await {
                    Settled::Same(a) if a == "57014" => {
                        self.log
                            .push(format!("s{i} {} -> waits, cancelled: {a}", sent.sql));
                        *seen
                            .outcomes
                            .entry("cancelled while waiting".into())
                            .or_default() += 1;
                        seen.statements += 1;
                        Ok(true)
                    }
                    Settled::Same(a) => {
                        // The lock came free before the cancel arrived, on both sides alike.
                        self.log
                            .push(format!("s{i} {} -> {a} (after waiting)", sent.sql));
                        seen.statements += 1;
                        Ok(true)
                    }
                    Settled::Differ { ours, pg } => Err(format!(
                        "{} cancelled while waiting: RockLake {ours}, PostgreSQL {pg}",
                        sent.sql
                    )),
                    _ => Err(format!("{}: no answer after its cancel", sent.sql)),
                }
            }
            Settled::Waits => {
                if !waited {
                    self.log.push(format!("s{i} {} -> waits", sent.sql));
                    seen.waited += 1;
                }
                self.waiting[i] = Some(sent);
                Ok(false)
            }
            Settled::Differ { ours, pg } => {
                if !known_difference(&sent.sql, &ours, &pg, &self.checker).await {
                    return Err(format!("{}: RockLake {ours}, PostgreSQL {pg}", sent.sql));
                }
                seen.known += 1;
                self.log.push(format!(
                    "s{i} {} -> RockLake {ours}, PostgreSQL {pg}{after} (the known difference: \
                     both roll back)",
                    sent.sql
                ));
                let mut rollback = self.send(i, "ROLLBACK");
                match settle(&mut rollback, ANSWER).await {
                    Settled::Same(_) => self.in_block[i] = false,
                    _ => return Err("the two ROLLBACKs after the known difference differ".into()),
                }
                let script = &self.scripts[i];
                while self.next[i] < script.len() {
                    self.next[i] += 1;
                    if matches!(script[self.next[i] - 1].as_str(), "COMMIT" | "ROLLBACK") {
                        break;
                    }
                }
                Ok(true)
            }
            Settled::OneWaits(e) => Err(format!("{}: {e}", sent.sql)),
        }
    }

    /// Whatever the last statement released: every waiting session whose statement
    /// PostgreSQL now answers must get the same answer on RockLake.
    async fn wake(&mut self, pg_wait: Duration, seen: &mut Seen) -> Result<bool, String> {
        let mut moved = false;
        for j in 0..self.waiting.len() {
            if let Some(sent) = self.waiting[j].take() {
                moved |= self.take(j, sent, pg_wait, true, seen).await?;
            }
        }
        Ok(moved)
    }

    async fn play(&mut self, rng: &mut Rng, seen: &mut Seen) -> Result<(), String> {
        let n = self.scripts.len();
        loop {
            let ready: Vec<usize> = (0..n)
                .filter(|&i| self.waiting[i].is_none() && self.next[i] < self.scripts[i].len())
                .collect();
            if ready.is_empty() {
                if self.waiting.iter().all(Option::is_none) {
                    return Ok(());
                }
                // Everyone left waits: only PostgreSQL's deadlock check can end it.
                if !self.wake(Duration::from_secs(3), seen).await? {
                    return Err("every session waits on both sides and nothing ends it".into());
                }
                continue;
            }
            let i = match self.order.pop_front() {
                Some(i) if ready.contains(&i) => i,
                Some(i) => return Err(format!("the fixed schedule's session s{i} is not ready")),
                None => ready[rng.below(ready.len() as u64) as usize],
            };
            let sql = self.scripts[i][self.next[i]].clone();
            self.next[i] += 1;
            let sent = self.send(i, &sql);
            self.take(i, sent, WAIT, false, seen).await?;
            self.wake(Duration::from_millis(30), seen).await?;
        }
    }
}

/// Fixed schedules for the outcomes the random ones reach only now and then: two
/// transactions that lock two rows in opposite orders (the second to close the cycle gets
/// `40P01`, and the other goes on once it rolls back); an UPDATE that waits for another's
/// update of the same row and gets `40001` when that one commits (or goes on when it rolls
/// back); an INSERT that waits for another's insert of its key; a second waiter cancelled;
/// and lone statements (PostgreSQL's `READ COMMITTED`) that wait for a block's update or
/// delete of their row and go on with the row as it then is, unless the session's
/// `default_transaction_isolation` is `repeatable read`.
fn fixed_schedules() -> Vec<(Vec<Vec<String>>, VecDeque<usize>)> {
    let bump = |f: u64| {
        format!("UPDATE ducklake_data_file SET record_count = record_count + 1 WHERE data_file_id = {f}")
    };
    let begin = || "BEGIN TRANSACTION ISOLATION LEVEL REPEATABLE READ".to_string();
    let load = || {
        vec![
            "INSERT INTO ducklake_data_file VALUES (1, 0, NULL, 10)".to_string(),
            "INSERT INTO ducklake_data_file VALUES (2, 0, NULL, 20)".to_string(),
        ]
    };
    let mut deadlock0 = load();
    deadlock0.extend([begin(), bump(1), bump(2), "COMMIT".into()]);
    let deadlock1 = vec![begin(), bump(2), bump(1), "ROLLBACK".into()];
    let mut update0 = load();
    update0.extend([begin(), READ_FILES.into(), bump(1), "COMMIT".into()]);
    let update1 = vec![begin(), READ_FILES.into(), bump(1), "ROLLBACK".into()];
    let mut stale0 = load();
    stale0.extend([begin(), READ_FILES.into(), bump(1), "ROLLBACK".into()]);
    let insert = || "INSERT INTO ducklake_snapshot VALUES (5, 0)".to_string();
    let mut queue0 = load();
    queue0.extend([begin(), bump(1), "COMMIT".into()]);
    let queued = || vec![begin(), bump(1), "ROLLBACK".into()];
    let delete2 = || "DELETE FROM ducklake_data_file WHERE data_file_id = 2".to_string();
    let mut holder = load();
    for change in [bump(1), delete2(), bump(1)] {
        holder.extend([begin(), change, "COMMIT".into()]);
    }
    let lone = vec![
        bump(1),
        delete2(),
        "SET default_transaction_isolation = 'repeatable read'".into(),
        bump(1),
    ];
    vec![
        // s0 loads; both begin; s0 locks 1, s1 locks 2; s0 waits for 2; s1 asks for 1.
        (
            vec![deadlock0, deadlock1],
            VecDeque::from([0, 0, 0, 1, 0, 1, 0, 1, 1, 0]),
        ),
        // s0 loads; both take their snapshots; s0 updates 1; s1 waits for it; s0 commits.
        (
            vec![update0, update1],
            VecDeque::from([0, 0, 0, 1, 0, 1, 0, 1, 0, 1]),
        ),
        // s0 loads and takes its snapshot; s1 updates 1 and commits; s0's update of 1: 40001.
        (
            vec![stale0, vec![bump(1)]],
            VecDeque::from([0, 0, 0, 0, 1, 0, 0]),
        ),
        // s1 inserts snapshot 5; s0's insert of 5 waits; s1 rolls back: s0's goes in.
        (
            vec![
                vec![begin(), insert(), "COMMIT".into()],
                vec![begin(), insert(), "ROLLBACK".into()],
            ],
            VecDeque::from([1, 1, 0, 0, 1, 0]),
        ),
        // s0 locks 1; s1 waits for it; s2 would wait too: cancelled on both sides.
        (
            vec![queue0, queued(), queued()],
            VecDeque::from([0, 0, 0, 0, 1, 2, 1, 2, 0, 1, 2]),
        ),
        // s0 loads; s0 updates 1 in a block, s1's lone update of 1 waits and goes on when
        // s0 commits; the same with a delete of 2 (s1's lone delete then deletes nothing);
        // s1 asks for REPEATABLE READ, and its lone update of 1 then gets 40001 instead.
        (
            vec![holder, lone],
            VecDeque::from([0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 1, 0]),
        ),
    ]
}

async fn run_schedule(
    store: &common::Store,
    url: &str,
    case: usize,
    rng: &mut Rng,
    fixed: Option<(Vec<Vec<String>>, VecDeque<usize>)>,
    seen: &mut Seen,
) -> Result<(), String> {
    let (scripts, order) = match fixed {
        Some((scripts, order)) => (scripts, order),
        None => {
            let n = 2 + rng.below(3) as usize;
            let scripts: Vec<Vec<String>> = (0..n)
                .map(|_| {
                    let units = 4 + rng.below(5) as usize;
                    script(rng, units)
                })
                .collect();
            (scripts, VecDeque::new())
        }
    };
    let n = scripts.len();
    let name = format!(
        "rocklake_interleave_{}_{case}_{}",
        std::process::id(),
        store.name
    );
    let (admin, case_url) = common::pg::fresh_db(url, &name).await;
    let db = open(store).await;
    let mut ours = Vec::new();
    let mut pg = Vec::new();
    let mut cancels = Vec::new();
    for i in 0..n {
        let c = common::pg::connect(&case_url).await;
        // Each wait is checked for a deadlock once, this long after it began: the session
        // that closes a cycle is the one refused, as on RockLake.
        c.batch_execute("SET deadlock_timeout = '20ms'")
            .await
            .unwrap();
        if i == 0 {
            c.batch_execute(DDL).await.unwrap();
        }
        let pg_cancel = c.cancel_token();
        pg.push(pg_worker(c));
        let mut s = Session::new(db.clone());
        cancels.push((s.interrupt(), pg_cancel));
        s.set_direct_mode(rocklake_sql::DirectMode::Check);
        if i == 0 {
            s.run(DDL).await.unwrap();
        }
        ours.push(our_worker(s));
    }
    let mut run = Run {
        ours,
        pg,
        cancels,
        next: vec![0; n],
        in_block: vec![false; n],
        waiting: (0..n).map(|_| None).collect(),
        scripts,
        log: Vec::new(),
        checker: common::pg::connect(&case_url).await,
        order,
    };
    let mut result = run.play(rng, seen).await;
    if result.is_ok() {
        // Both hold the same rows at the end.
        for q in [READ_FILES, READ_SNAPSHOTS] {
            let mut sent = run.send(0, q);
            match settle(&mut sent, ANSWER).await {
                Settled::Same(_) => {}
                Settled::Differ { ours, pg } => {
                    result = Err(format!("at the end, {q}: RockLake {ours}, PostgreSQL {pg}"));
                }
                _ => result = Err(format!("at the end, {q}: no answer")),
            }
        }
    }
    let log = std::mem::take(&mut run.log);
    drop(run);
    let _ = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
    if result.is_ok() {
        db.close().await.unwrap();
    }
    result.map_err(|e| format!("{e}\n  schedule so far:\n    {}", log.join("\n    ")))
}

#[test]
fn interleaved_sessions_get_postgresql_s_answers() {
    let Some(url) = common::pg::url() else { return };
    let cases: usize = std::env::var("ROCKLAKE_INTERLEAVE_CASES")
        .ok()
        .map(|v| {
            v.parse()
                .expect("ROCKLAKE_INTERLEAVE_CASES must be a number")
        })
        .unwrap_or(8);
    let seed: u64 = match std::env::var("ROCKLAKE_INTERLEAVE_SEED") {
        Ok(v) => v
            .parse()
            .expect("ROCKLAKE_INTERLEAVE_SEED must be a number"),
        Err(_) => {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        }
    };
    println!("ROCKLAKE_INTERLEAVE_SEED={seed} ({cases} cases)");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut seen: BTreeMap<&'static str, Seen> = BTreeMap::new();
        for case in 0..cases {
            // A fresh store of each engine per case; each engine plays the same schedule.
            for store in stores() {
                let mut rng = Rng((seed ^ (case as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1);
                let seen = seen.entry(store.name).or_default();
                let fixed = fixed_schedules().into_iter().nth(case);
                if let Err(e) = run_schedule(&store, &url, case, &mut rng, fixed, seen).await {
                    panic!(
                        "{} case {case} (ROCKLAKE_INTERLEAVE_SEED={seed}): {e}",
                        store.name
                    );
                }
            }
        }
        // Each fixed schedule ran: each outcome it is there for was seen, on every engine.
        let fixed = fixed_schedules().len();
        for (name, seen) in &seen {
            if cases >= fixed {
                for want in [
                    "UPDATE 40P01",
                    "UPDATE ok (after waiting)",
                    "UPDATE 40001 (after waiting)",
                    "UPDATE 40001",
                    "INSERT ok (after waiting)",
                    "cancelled while waiting",
                    "lone UPDATE ok (after waiting)",
                    "lone DELETE ok (after waiting)",
                    "lone UPDATE 40001 (after waiting)",
                ] {
                    assert!(
                        seen.outcomes.contains_key(want),
                        "{name}: no \"{want}\" in {:?}",
                        seen.outcomes
                    );
                }
            }
            println!(
                "{name}: {cases} schedules, {} answers compared with PostgreSQL, {} statements \
                 waited for another session on both, {} times the known difference; outcomes \
                 {:?}",
                seen.statements, seen.waited, seen.known, seen.outcomes
            );
        }
    });
}
