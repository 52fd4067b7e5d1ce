//! Table locks between the transactions of one process, as PostgreSQL takes them for DML and
//! `DROP TABLE`.
//!
//! Commit preconditions catch two transactions writing the same key, but not a `DROP TABLE`
//! racing a writer that adds new rows: the drop removes the rows its snapshot saw, the writer
//! commits rows the drop never saw, and those come back when a table of that name is created
//! again. PostgreSQL orders the two with locks: a writer holds `ROW EXCLUSIVE` on its table
//! until its transaction ends, `DROP TABLE` takes `ACCESS EXCLUSIVE`, and whichever comes
//! second waits. Only one process writes a store (the others are fenced), so the same two
//! modes, kept in memory, order every writer of the store.
//!
//! Keys, too: a primary-key entry a transaction adds is claimed until the transaction ends,
//! and another transaction adding the same entry waits for it, as PostgreSQL's unique index
//! makes the second inserter wait for the first's transaction. When the first commits, the
//! second gets `23505` at its INSERT (not at its COMMIT, after the rest of its work); when it
//! rolls back, the second goes on. The commit's preconditions stay the guarantee: a claim only
//! decides who waits, and a transaction claims at most [`MAX_CLAIMED_KEYS`] (a bulk load is
//! then checked at its commit alone, without holding a claim per row in memory).
//!
//! A wait ends when the holder's transaction ends, when the waiting statement is cancelled
//! or times out (`57014`), or at once with `40P01` when waiting would close a cycle of
//! transactions waiting on each other (through tables or keys alike).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;

use crate::error::{state, Result, SqlError};

/// What a waiting statement asks, each time it looks, to learn whether it must stop (the
/// session's cancel flag and `statement_timeout`).
pub type StopCheck = dyn Fn() -> Result<()> + Send + Sync;

/// How often a waiting statement looks at its cancel flag and deadline.
const POLL: Duration = Duration::from_millis(20);

/// The most keys one transaction claims; past it, its further keys are checked at commit only.
pub const MAX_CLAIMED_KEYS: usize = 10_000;

/// The lock table of one database.
#[derive(Debug, Default)]
pub struct Locks {
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    next_owner: u64,
    tables: HashMap<u64, TableLock>,
    /// Keys added by open transactions → the owner that added each.
    keys: HashMap<Bytes, u64>,
    /// Owner → the owners it waits for.
    waiting: HashMap<u64, HashSet<u64>>,
    /// Key → the owners waiting to claim it, first come first: when its holder ends, the
    /// first of them takes it, as PostgreSQL's lock queue grants in order.
    queues: HashMap<Bytes, VecDeque<u64>>,
}

/// Takes an owner out of a key's queue however its wait ends, and wakes the others (the
/// one behind it may be first now).
struct Queued<'a> {
    locks: &'a Locks,
    key: &'a Bytes,
    owner: u64,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let mut st = self.locks.lock();
        if let Some(q) = st.queues.get_mut(self.key) {
            let before = q.len();
            q.retain(|o| *o != self.owner);
            let removed = q.len() != before;
            if q.is_empty() {
                st.queues.remove(self.key);
            }
            drop(st);
            if removed {
                self.locks.changed.notify_waiters();
            }
        }
    }
}

#[derive(Debug, Default)]
struct TableLock {
    writers: HashSet<u64>,
    exclusive: Option<u64>,
}

impl TableLock {
    fn is_free(&self) -> bool {
        self.writers.is_empty() && self.exclusive.is_none()
    }
}

/// The two modes PostgreSQL's DML and `DROP TABLE` take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Rows are written (`ROW EXCLUSIVE`): many at once.
    Write,
    /// The table is dropped (`ACCESS EXCLUSIVE`): alone.
    Exclusive,
}

impl Locks {
    /// A new owner: one transaction's locks, all released when it is dropped.
    pub fn owner(self: &Arc<Self>) -> Held {
        let mut st = self.lock();
        st.next_owner += 1;
        Held {
            locks: self.clone(),
            owner: st.next_owner,
            tables: HashMap::new(),
            keys: Vec::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    /// Who holds `table` in a way that keeps `owner` from taking it in `mode`.
    fn blockers(&self, table: u64, owner: u64, mode: Mode) -> HashSet<u64> {
        let Some(t) = self.tables.get(&table) else {
            return HashSet::new();
        };
        let mut out: HashSet<u64> = t.exclusive.into_iter().filter(|o| *o != owner).collect();
        if mode == Mode::Exclusive {
            out.extend(t.writers.iter().copied().filter(|o| *o != owner));
        }
        out
    }

    /// Whether some owner in `from`, following who waits for whom, waits for `owner`.
    fn reaches(&self, from: &HashSet<u64>, owner: u64) -> bool {
        let mut seen = HashSet::new();
        let mut todo: Vec<u64> = from.iter().copied().collect();
        while let Some(o) = todo.pop() {
            if o == owner {
                return true;
            }
            if seen.insert(o) {
                if let Some(next) = self.waiting.get(&o) {
                    todo.extend(next.iter().copied());
                }
            }
        }
        false
    }
}

/// One transaction's locks.
#[derive(Debug)]
pub struct Held {
    locks: Arc<Locks>,
    owner: u64,
    tables: HashMap<u64, Mode>,
    keys: Vec<Bytes>,
}

/// Takes an owner out of the wait graph however its wait ends (granted, refused, or the
/// statement's future dropped).
struct Waiting<'a> {
    locks: &'a Locks,
    owner: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.locks.lock().waiting.remove(&self.owner);
    }
}

impl Held {
    /// Whether this transaction already holds `table` at least in `mode`.
    pub fn holds(&self, table: u64, mode: Mode) -> bool {
        match self.tables.get(&table) {
            Some(Mode::Exclusive) => true,
            Some(Mode::Write) => mode == Mode::Write,
            None => false,
        }
    }

    /// Take `table` in `mode`, waiting while another transaction holds it in a mode that
    /// conflicts. `name` is for the deadlock message.
    pub async fn acquire(
        &mut self,
        table: u64,
        mode: Mode,
        name: &str,
        stop: Option<&StopCheck>,
    ) -> Result<()> {
        if self.holds(table, mode) {
            return Ok(());
        }
        let (owner, tables) = (self.owner, &mut self.tables);
        let detail = || {
            format!(
                "This transaction waited for a lock on relation \"{name}\" held by a \
                 transaction that waits for this one."
            )
        };
        wait_for(&self.locks, owner, detail, stop, |st| {
            let blockers = st.blockers(table, owner, mode);
            if !blockers.is_empty() {
                return Look::Blocked(blockers);
            }
            let t = st.tables.entry(table).or_default();
            match mode {
                Mode::Write => {
                    t.writers.insert(owner);
                }
                Mode::Exclusive => t.exclusive = Some(owner),
            }
            tables.insert(table, mode);
            Look::Done(())
        })
        .await
    }
}

impl Held {
    /// Claim `key` (a primary-key entry this transaction adds, or a row it changes or
    /// deletes, with its primary-key entry) until the transaction ends; while another open
    /// transaction holds it, wait for that one to end first. Returns whether it waited (the
    /// caller then looks again at what the store holds). `name` is for the deadlock message.
    pub async fn claim_key(
        &mut self,
        key: &Bytes,
        name: &str,
        stop: Option<&StopCheck>,
    ) -> Result<bool> {
        let (owner, keys) = (self.owner, &mut self.keys);
        let locks = self.locks.clone();
        let _queued = Queued {
            locks: &locks,
            key,
            owner,
        };
        let detail = || key_detail(name);
        let mut looks = 0;
        wait_for(&self.locks, owner, detail, stop, |st| {
            looks += 1;
            // Kept back by the holder, or by whoever came before this owner in the queue.
            let ahead = match st.keys.get(key) {
                Some(holder) if *holder == owner => return Look::Done(()),
                Some(holder) => Some(*holder),
                None => st
                    .queues
                    .get(key)
                    .and_then(|q| q.front().copied())
                    .filter(|first| *first != owner),
            };
            if let Some(ahead) = ahead {
                let q = st.queues.entry(key.clone()).or_default();
                if !q.contains(&owner) {
                    q.push_back(owner);
                }
                return Look::Blocked(HashSet::from([ahead]));
            }
            if let Some(q) = st.queues.get_mut(key) {
                q.retain(|o| *o != owner);
                if q.is_empty() {
                    st.queues.remove(key);
                }
            }
            if keys.len() < MAX_CLAIMED_KEYS {
                st.keys.insert(key.clone(), owner);
                keys.push(key.clone());
            }
            Look::Done(())
        })
        .await?;
        Ok(looks > 1)
    }
}

impl Held {
    /// Wait while another open transaction holds `key`, without claiming it: an INSERT of a
    /// key whose committed row another transaction is changing or deleting waits for that one,
    /// as PostgreSQL's unique check does. Returns whether it waited.
    pub async fn wait_key(
        &mut self,
        key: &Bytes,
        name: &str,
        stop: Option<&StopCheck>,
    ) -> Result<bool> {
        let owner = self.owner;
        let mut looks = 0;
        wait_for(
            &self.locks,
            owner,
            || key_detail(name),
            stop,
            |st| {
                looks += 1;
                match st.keys.get(key) {
                    Some(holder) if *holder != owner => Look::Blocked(HashSet::from([*holder])),
                    _ => Look::Done(()),
                }
            },
        )
        .await?;
        Ok(looks > 1)
    }
}

fn key_detail(name: &str) -> String {
    format!(
        "This transaction waited for another's change of the same row or key of \"{name}\", \
         and that transaction waits for this one."
    )
}

/// What one look at the lock table found.
enum Look<T> {
    Done(T),
    /// Kept from going on by these owners.
    Blocked(HashSet<u64>),
}

/// Look at the lock table until `look` is done, waiting between looks for any change (or
/// [`POLL`], to ask `stop`); refused with `40P01` and `detail()` when the owners `owner` would
/// wait for, following who waits for whom, wait for `owner`.
async fn wait_for<T>(
    locks: &Locks,
    owner: u64,
    detail: impl Fn() -> String,
    stop: Option<&StopCheck>,
    mut look: impl FnMut(&mut State) -> Look<T>,
) -> Result<T> {
    let _waiting = Waiting { locks, owner };
    loop {
        let changed = locks.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        {
            let mut st = locks.lock();
            match look(&mut st) {
                Look::Done(t) => {
                    st.waiting.remove(&owner);
                    return Ok(t);
                }
                Look::Blocked(blockers) => {
                    if st.reaches(&blockers, owner) {
                        st.waiting.remove(&owner);
                        return Err(SqlError::new(state::DEADLOCK_DETECTED, "deadlock detected")
                            .with_detail(detail()));
                    }
                    st.waiting.insert(owner, blockers);
                }
            }
        }
        tokio::select! {
            _ = changed => {}
            _ = tokio::time::sleep(POLL) => {}
        }
        if let Some(stop) = stop {
            stop()?;
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.tables.is_empty() && self.keys.is_empty() {
            return;
        }
        {
            let mut st = self.locks.lock();
            for key in self.keys.drain(..) {
                if st.keys.get(&key) == Some(&self.owner) {
                    st.keys.remove(&key);
                }
            }
            for (table, mode) in self.tables.drain() {
                if let Some(t) = st.tables.get_mut(&table) {
                    match mode {
                        Mode::Write => {
                            t.writers.remove(&self.owner);
                        }
                        Mode::Exclusive => {
                            t.exclusive = None;
                            t.writers.remove(&self.owner);
                        }
                    }
                    if t.is_free() {
                        st.tables.remove(&table);
                    }
                }
            }
        }
        self.locks.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writers_share_a_drop_waits_for_them_and_a_cycle_is_refused() {
        let locks = Arc::new(Locks::default());
        let mut a = locks.owner();
        let mut b = locks.owner();
        a.acquire(1, Mode::Write, "t", None).await.unwrap();
        b.acquire(1, Mode::Write, "t", None).await.unwrap();
        // A drop waits for both writers.
        let mut c = locks.owner();
        let drop_c = tokio::spawn(async move {
            c.acquire(1, Mode::Exclusive, "t", None).await.unwrap();
            c
        });
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(!drop_c.is_finished());
        drop(a);
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(!drop_c.is_finished());
        // A writer takes another table that nobody holds without waiting.
        b.acquire(2, Mode::Write, "u", None).await.unwrap();
        drop(b);
        let c = drop_c.await.unwrap();
        assert!(c.holds(1, Mode::Exclusive));
        // While c holds it, a writer waits; c holding 1 asking for 3 held by the writer's
        // transaction closes a cycle and is refused.
        let mut d = locks.owner();
        d.acquire(3, Mode::Write, "v", None).await.unwrap();
        let d_waits = tokio::spawn(async move {
            let r = d.acquire(1, Mode::Write, "t", None).await;
            (d, r)
        });
        tokio::time::sleep(Duration::from_millis(60)).await;
        let mut c = c;
        let e = c.acquire(3, Mode::Exclusive, "v", None).await.unwrap_err();
        assert_eq!(e.code, state::DEADLOCK_DETECTED);
        drop(c);
        let (d, r) = d_waits.await.unwrap();
        r.unwrap();
        assert!(d.holds(1, Mode::Write) && d.holds(3, Mode::Write));
        drop(d);
        assert!(locks.lock().tables.is_empty() && locks.lock().waiting.is_empty());
    }

    #[tokio::test]
    async fn a_claimed_key_makes_the_next_claimant_wait_and_the_cap_holds() {
        let locks = Arc::new(Locks::default());
        let key = Bytes::from_static(b"k");
        let mut a = locks.owner();
        assert!(!a.claim_key(&key, "t", None).await.unwrap());
        // Claiming it again is free for its holder.
        assert!(!a.claim_key(&key, "t", None).await.unwrap());
        let mut b = locks.owner();
        let b_waits = tokio::spawn(async move {
            let r = b.claim_key(&Bytes::from_static(b"k"), "t", None).await;
            (b, r)
        });
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(!b_waits.is_finished());
        drop(a);
        let (b, r) = b_waits.await.unwrap();
        assert!(r.unwrap(), "b waited, so it must look at the store again");
        assert_eq!(locks.lock().keys.get(&key), Some(&b.owner));
        drop(b);
        // Past the cap a transaction's keys are not claimed: nobody waits for them.
        let mut c = locks.owner();
        for i in 0..MAX_CLAIMED_KEYS as u64 + 1 {
            c.claim_key(&Bytes::copy_from_slice(&i.to_be_bytes()), "t", None)
                .await
                .unwrap();
        }
        assert_eq!(locks.lock().keys.len(), MAX_CLAIMED_KEYS);
        let mut d = locks.owner();
        let past = Bytes::copy_from_slice(&(MAX_CLAIMED_KEYS as u64).to_be_bytes());
        assert!(!d.claim_key(&past, "t", None).await.unwrap());
        drop(c);
        drop(d);
        assert!(locks.lock().keys.is_empty() && locks.lock().waiting.is_empty());
    }

    #[tokio::test]
    async fn waiters_for_a_key_are_let_go_in_the_order_they_came() {
        let locks = Arc::new(Locks::default());
        let key = Bytes::from_static(b"k");
        for round in 0..50 {
            let mut holder = locks.owner();
            holder.claim_key(&key, "t", None).await.unwrap();
            // Three waiters arrive one after another; the order they are let go in is sent
            // back as each gets the key (and then lets it go).
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            for n in 0..3 {
                let mut w = locks.owner();
                let tx = tx.clone();
                tokio::spawn(async move {
                    w.claim_key(&Bytes::from_static(b"k"), "t", None)
                        .await
                        .unwrap();
                    tx.send(n).unwrap();
                    // Hold it a moment, so the next must wait for this one.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                });
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            drop(holder);
            let mut order = Vec::new();
            for _ in 0..3 {
                order.push(rx.recv().await.unwrap());
            }
            assert_eq!(order, [0, 1, 2], "round {round}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let st = locks.lock();
        assert!(st.keys.is_empty() && st.queues.is_empty() && st.waiting.is_empty());
    }
}
