//! A transaction's row writes: INSERT, UPDATE and DELETE of one row, a table emptied, and the
//! uniqueness checks and row locks they take (PostgreSQL's heap and unique-index behaviour
//! over the transaction's reads, writes and preconditions in [`super`]).

use bytes::Bytes;
use rocklake_core::backend::KeyRange;
use rocklake_core::values::Value;

use super::Txn;
use crate::error::{state, Result, SqlError};
use crate::locks::Mode;
use crate::relation::{name_key, RelDef, StoredRow};

impl Txn {
    /// A row id from the `relation-row` id space when the row's key needs one.
    async fn fresh_id(&self, rel: &RelDef, old_key: Option<&[u8]>) -> Result<Option<u64>> {
        if rel.needs_issued_id(old_key) {
            Ok(Some(self.db.issue_row_id().await?))
        } else {
            Ok(None)
        }
    }

    async fn check_pk_free(&mut self, rel: &RelDef, pk: &[u8], cells: &[Value]) -> Result<()> {
        // Own writes and the view, then the live store: a key another session committed after
        // this transaction began is taken too (PostgreSQL checks uniqueness against the latest
        // committed state, not the snapshot).
        let taken = match self.writes.get(pk) {
            Some(w) => w.is_some(),
            None => {
                let seen = self.view.get(pk).await?;
                let mut taken = seen.is_some() || self.stored_since_view(pk).await?;
                let key = Bytes::copy_from_slice(pk);
                let name = rel.qualified();
                let stop = self.stop.as_deref();
                if taken {
                    // Committed, but another open transaction may be changing or deleting its
                    // row: wait for that one to end, as PostgreSQL's unique check does.
                    if self.held.wait_key(&key, &name, stop).await? {
                        taken = seen.is_some() || self.stored_since_view(pk).await?;
                    }
                }
                // Free now, but another open transaction may have added it: wait for that one
                // to end (as PostgreSQL's unique index does), then look again.
                if !taken && self.held.claim_key(&key, &name, stop).await? {
                    taken = self.stored_since_view(pk).await?;
                }
                if !taken && !self.conds.contains_key(pk) {
                    // What the view held (nothing): the precondition the entry's write needs,
                    // so that it is not read again.
                    self.expect(key, seen)?;
                }
                taken
            }
        };
        if taken {
            return Err(duplicate(rel, cells));
        }
        Ok(())
    }

    /// Insert a row (cells in column order, already of the columns' types).
    pub async fn insert(&mut self, rel: &RelDef, cells: Vec<Value>) -> Result<()> {
        self.guard(rel, Mode::Write).await?;
        rel.check_not_null(&cells)?;
        let pk = rel.pk_index_key(&cells)?;
        if let Some(pk) = &pk {
            self.check_pk_free(rel, pk, &cells).await?;
        }
        let fresh = self.fresh_id(rel, None).await?;
        let tuple = self.db.next_tuple(rel).await?;
        let (key, value) = rel.encode(&cells, None, &mut || fresh_or(fresh), tuple)?;
        let mut key = Bytes::from(key);
        let mut value = Bytes::from(value);
        if !self.free_for_row(&key).await? {
            // Another row holds the key: this one joins the table's overflow, as PostgreSQL's
            // heap keeps two rows a table without a unique constraint allows.
            if rel.overflow_range().is_none() {
                return Err(storage_key_taken(rel, &key));
            }
            let rid = self.db.issue_row_id().await?;
            let (k, v) = rel.encode_overflow(&cells, rid, tuple);
            (key, value) = (Bytes::from(k), Bytes::from(v));
            self.touch(&key).await?;
        }
        self.write(key.clone(), Some(value))?;
        if rel.tuples_indexed() {
            // A tuple-index entry is only ever written with its row, so the row key's
            // precondition (a row key nobody else has written) covers it: not read.
            let t = Bytes::from(rel.tuple_index_key(&key));
            self.write(t, Some(Bytes::copy_from_slice(&tuple.to_be_bytes())))?;
        }
        if let Some(pk) = pk {
            let pk = Bytes::from(pk);
            self.touch(&pk).await?;
            self.write(pk, Some(key))?;
        }
        Ok(())
    }

    async fn put_tuple(&mut self, rel: &RelDef, key: &[u8], tuple: u64) -> Result<()> {
        if rel.tuples_indexed() {
            let t = Bytes::from(rel.tuple_index_key(key));
            self.touch(&t).await?;
            self.write(t, Some(Bytes::copy_from_slice(&tuple.to_be_bytes())))?;
        }
        Ok(())
    }

    async fn delete_tuple(&mut self, rel: &RelDef, key: &[u8]) -> Result<()> {
        if rel.tuples_indexed() {
            let t = Bytes::from(rel.tuple_index_key(key));
            self.touch(&t).await?;
            self.write(t, None)?;
        }
        Ok(())
    }

    /// Lock a row this transaction is about to change or delete, as PostgreSQL's UPDATE and
    /// DELETE do: while another open transaction has changed or deleted it, wait for that one
    /// to end; then, if the store no longer holds the version this transaction's snapshot
    /// read (a concurrent update or delete committed), refuse with `40001` at this statement,
    /// as REPEATABLE READ does, rather than at the COMMIT. The commit's preconditions stay
    /// the guarantee; the lock decides who waits and when the loser learns it.
    async fn lock_row(&mut self, rel: &RelDef, old: &StoredRow) -> Result<()> {
        if self.writes.contains_key(&old.key) {
            // A version this transaction wrote: its own, already locked.
            return Ok(());
        }
        // A change committed since the snapshot refuses at once; one still open is waited
        // for, then looked at again. What the snapshot read is the commit's precondition (what
        // `touch` would read again).
        let seen = self.still_as_read(&old.key).await?;
        if !self.conds.contains_key(&old.key) {
            self.expect(old.key.clone(), seen)?;
        }
        let name = rel.qualified();
        let stop = self.stop.clone();
        let mut waited = self
            .held
            .claim_key(&old.key, &name, stop.as_deref())
            .await?;
        if let Some(pk) = rel.pk_index_key(&old.cells)? {
            waited |= self
                .held
                .claim_key(&Bytes::from(pk), &name, stop.as_deref())
                .await?;
        }
        if waited {
            self.still_as_read(&old.key).await?;
        }
        Ok(())
    }

    /// `40001` unless the store still holds the version of `key` this transaction's snapshot
    /// read; that version otherwise.
    async fn still_as_read(&self, key: &Bytes) -> Result<Option<Bytes>> {
        let seen = self.view.get(key).await?;
        let now = if self.db.keyspace().unchanged_since(self.mark) {
            seen.clone()
        } else {
            self.db.keyspace().backend().get(key).await?
        };
        if now.is_some() && now == seen {
            return Ok(seen);
        }
        Err(SqlError::new(
            state::SERIALIZATION_FAILURE,
            if now.is_none() {
                "could not serialize access due to concurrent delete"
            } else {
                "could not serialize access due to concurrent update"
            },
        ))
    }

    /// Replace the row stored under `old.key` with `cells`.
    pub async fn update(&mut self, rel: &RelDef, old: &StoredRow, cells: Vec<Value>) -> Result<()> {
        self.guard(rel, Mode::Write).await?;
        self.lock_row(rel, old).await?;
        rel.check_not_null(&cells)?;
        // An overflow row's key says nothing of its key fields (an issued one is drawn again).
        let old_key = (!rel.is_overflow(&old.key)).then_some(&old.key[..]);
        let fresh = self.fresh_id(rel, old_key).await?;
        // An UPDATE writes a new row version: a new tuple number, as PostgreSQL's heap does.
        let tuple = self.db.next_tuple(rel).await?;
        let (mut key, mut value) = rel.encode(&cells, old_key, &mut || fresh_or(fresh), tuple)?;
        let old_pk = rel.pk_index_key(&old.cells)?;
        let new_pk = rel.pk_index_key(&cells)?;
        if new_pk != old_pk {
            if let Some(pk) = &new_pk {
                self.check_pk_free(rel, pk, &cells).await?;
            }
        }
        if key[..] != old.key[..] && self.get(&key).await?.is_some() {
            // Another row holds the new key: the row stays in (or joins) the overflow.
            let rid = match rel.overflow_id(&old.key) {
                Some(rid) => rid,
                None if rel.overflow_range().is_some() => self.db.issue_row_id().await?,
                None => return Err(storage_key_taken(rel, &key)),
            };
            (key, value) = rel.encode_overflow(&cells, rid, tuple);
        }
        let key = Bytes::from(key);
        if key != old.key {
            self.touch(&old.key).await?;
            self.write(old.key.clone(), None)?;
            self.delete_tuple(rel, &old.key).await?;
        }
        self.touch(&key).await?;
        self.write(key.clone(), Some(Bytes::from(value)))?;
        self.put_tuple(rel, &key, tuple).await?;
        if new_pk != old_pk || key != old.key {
            if let Some(pk) = old_pk {
                let pk = Bytes::from(pk);
                self.touch(&pk).await?;
                self.write(pk, None)?;
            }
            if let Some(pk) = new_pk {
                let pk = Bytes::from(pk);
                self.touch(&pk).await?;
                self.write(pk, Some(key))?;
            }
        }
        Ok(())
    }

    /// Delete the row stored under `old.key` (and its primary-key entry).
    pub async fn delete(&mut self, rel: &RelDef, old: &StoredRow) -> Result<()> {
        self.guard(rel, Mode::Write).await?;
        self.lock_row(rel, old).await?;
        self.touch(&old.key).await?;
        self.write(old.key.clone(), None)?;
        self.delete_tuple(rel, &old.key).await?;
        if let Some(pk) = rel.pk_index_key(&old.cells)? {
            let pk = Bytes::from(pk);
            self.touch(&pk).await?;
            self.write(pk, None)?;
        }
        Ok(())
    }

    /// Delete every row of `rel`, its primary-key and tuple entries and its name (DROP TABLE).
    ///
    /// Holding the table alone, this reads what the store holds now rather than this
    /// transaction's snapshot: rows another transaction committed since it began go too.
    pub async fn delete_all(&mut self, rel: &RelDef) -> Result<usize> {
        self.guard(rel, Mode::Exclusive).await?;
        let live = self.db.keyspace().backend().view().await?;
        let mut n = 0;
        let ranges = [
            Some(rel.full_range()),
            rel.overflow_range(),
            Some(KeyRange::prefix(&rel.pk_index_prefix())),
            Some(KeyRange::prefix(&rel.tuple_index_prefix())),
        ];
        for range in ranges.into_iter().flatten() {
            for (k, v) in self.scan_in(live.as_ref(), &range).await? {
                // Another schema version of an inlined table shares the range: keep its rows.
                if range.start == rel.full_range().start && rel.decode(&k, &v)?.is_none() {
                    continue;
                }
                if !self.writes.contains_key(&k) && !self.conds.contains_key(&k) {
                    let stored = live.get(&k).await?;
                    self.expect(k.clone(), stored)?;
                }
                self.write(k, None)?;
                n += 1;
            }
        }
        // Its name as the store holds it now, too: a table created after this transaction
        // began (one a DROP SCHEMA found in the shared catalog) is not in its view.
        let name = Bytes::from(name_key(&rel.schema, Some(&rel.name)));
        if !self.writes.contains_key(&name) && !self.conds.contains_key(&name) {
            let stored = live.get(&name).await?;
            self.expect(name.clone(), stored)?;
        }
        self.delete_raw(name).await?;
        Ok(n)
    }
}

/// Two rows of a table without a primary key that would share one storage key (PostgreSQL
/// would keep both; RockLake's fixed-width keys cannot).
fn storage_key_taken(rel: &RelDef, key: &[u8]) -> SqlError {
    SqlError::new(
        state::UNIQUE_VIOLATION,
        format!(
            "RockLake keeps one row per storage key of \"{}\", and a row with key {} already \
             exists",
            rel.name,
            rocklake_core::keys::render(key)
        ),
    )
}

fn fresh_or(fresh: Option<u64>) -> Result<u64> {
    fresh.ok_or_else(|| SqlError::internal("a row key needed an issued id that was not drawn"))
}

fn duplicate(rel: &RelDef, cells: &[Value]) -> SqlError {
    SqlError::new(
        state::UNIQUE_VIOLATION,
        format!(
            "duplicate key value violates unique constraint \"{}\"",
            rel.pkey_name()
        ),
    )
    .with_detail(rel.duplicate_detail(cells))
}
