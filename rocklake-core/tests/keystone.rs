//! Every Keystone rule on the in-memory reference backend. The conformance crate runs the same
//! rules against every engine.

use conformance::rows::{delete_key, issue_key, name_key, table_cells};
use rocklake_core::ErrorKind;
use std::sync::Arc;
use std::time::Duration;

use rocklake_core::keyspace::DrawHook;
use rocklake_core::keystone::{self, MAX_ID};
use rocklake_core::{
    Admin, Error, KeyChoice, Keyspace, KeyspaceOptions, KvBackend, MemoryBackend, Value,
};

fn mem() -> Arc<dyn KvBackend> {
    Arc::new(MemoryBackend::default())
}

async fn name(ks: &Keyspace, id: u64) -> Result<u64, Error> {
    name_key(ks, id).await
}

async fn issue(ks: &Keyspace) -> Result<u64, Error> {
    issue_key(ks).await
}

async fn delete(ks: &Keyspace, id: u64) -> bool {
    delete_key(ks, id).await.unwrap()
}

#[tokio::test]
async fn the_keystone_document_examples() {
    let cat = Keyspace::open(mem()).await.unwrap();
    assert_eq!(name(&cat, 500).await.unwrap(), 500);
    assert_eq!(
        issue(&cat).await.unwrap(),
        501,
        "naming 500 moved the mark past it"
    );
    assert_eq!(
        name(&cat, 100).await.unwrap(),
        100,
        "a named key may sort below the mark"
    );
    assert_eq!(
        cat.describe(&keystone::TABLE).await.unwrap().next_id,
        502,
        "below the mark: mark unmoved"
    );

    let dup = name(&cat, 100).await.unwrap_err();
    assert_eq!(dup.kind(), ErrorKind::AlreadyExists);
    assert_eq!(dup.sqlstate(), "23505");
    let msg = dup.to_string();
    assert!(
        msg.contains("duplicate key 100")
            && msg.contains("already present at ducklake_table table_id=100 begin_snapshot="),
        "{msg}"
    );

    let big = name(&cat, 281_474_976_710_656).await.unwrap_err();
    assert_eq!(big.kind(), ErrorKind::OutOfRange);
    assert!(
        big.to_string()
            .contains("key 281474976710656 is outside the Keystone id space [1, 281474976710655]"),
        "{big}"
    );
    assert_eq!(
        name(&cat, 0).await.unwrap_err().kind(),
        ErrorKind::OutOfRange
    );

    assert!(delete(&cat, 100).await);
    let again = name(&cat, 100).await.unwrap_err();
    assert!(matches!(again, Error::AlreadyExists { deleted: true, .. }));
    let msg = again.to_string();
    assert!(
        msg.contains("a row with this key was deleted at snapshot")
            && msg.contains("PURGE frees its key (row at ducklake_table table_id=100"),
        "{msg}"
    );

    cat.set_retain_from(cat.current_snapshot().await.unwrap())
        .await
        .unwrap();
    let report = cat
        .purge(&keystone::TABLE, 100..=100, &Admin::grant("test"))
        .await
        .unwrap();
    assert_eq!(report.freed, vec![100]);
    assert!(report
        .audit_key
        .unwrap()
        .starts_with("audit_entry snapshot_id="));
    assert_eq!(name(&cat, 100).await.unwrap(), 100, "purge freed the key");

    let d = cat.describe(&keystone::TABLE).await.unwrap();
    assert_eq!(
        (d.next_id, d.ids_issued, d.ids_remaining),
        (502, 501, 281_474_976_710_154)
    );
    assert!(d
        .to_string()
        .contains("next_id=502 ids_issued=501 ids_remaining=281474976710154 budget_used=0.000%"));
}

#[tokio::test]
async fn nothing_of_a_refused_insert_lands() {
    let backend = mem();
    let cat = Keyspace::open(backend.clone()).await.unwrap();
    name(&cat, 7).await.unwrap();
    let before = cat.info().await.unwrap().counts;
    let mut t = cat.begin().await.unwrap();
    t.insert(&keystone::TABLE, KeyChoice::Named(8), table_cells("ok"))
        .await
        .unwrap();
    assert!(t
        .insert(&keystone::TABLE, KeyChoice::Named(7), table_cells("dup"))
        .await
        .is_err());
    // The refused insert changed nothing; the transaction can still be rolled back whole.
    t.rollback();
    assert_eq!(cat.info().await.unwrap().counts, before);
    // A row that does not fit its table is refused before anything is placed.
    let mut t = cat.begin().await.unwrap();
    let bad = t
        .insert(
            &keystone::TABLE,
            KeyChoice::Named(9),
            vec![Value::Text("not an int".into())],
        )
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::InvalidArgument);
    assert!(t.is_empty());
}

#[tokio::test]
async fn two_writers_naming_one_key_exactly_one_lands() {
    let cat = Keyspace::open(mem()).await.unwrap();
    let mut a = cat.begin().await.unwrap();
    let mut b = cat.begin().await.unwrap();
    a.insert(&keystone::TABLE, KeyChoice::Named(42), table_cells("a"))
        .await
        .unwrap();
    b.insert(&keystone::TABLE, KeyChoice::Named(42), table_cells("b"))
        .await
        .unwrap();
    a.commit().await.unwrap();
    let err = b.commit().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
    let r = cat.reader(None).await.unwrap();
    let (_, row) = r.by_id(&keystone::TABLE, 42).await.unwrap().unwrap();
    assert_eq!(row.cells[3], Value::Text("a".into()));
}

/// An open transaction that has placed one issued `table` row named `name`, and its key.
async fn placed_issued(cat: &Keyspace, name: &str) -> (rocklake_core::Transaction, u64) {
    let mut t = cat.begin().await.unwrap();
    let id = t
        .insert(&keystone::TABLE, KeyChoice::Issued, table_cells(name))
        .await
        .unwrap()
        .id;
    (t, id)
}

/// An issued key is placed without asking the store (no session had named a key that high),
/// then another session names the same key and commits first: the issued insert must still be
/// refused at commit, never overwrite the named row.
#[tokio::test]
async fn an_issued_key_named_and_committed_by_another_session_is_refused_at_commit() {
    let cat = Keyspace::open(mem()).await.unwrap();
    let (issuer, drawn) = placed_issued(&cat, "issued").await;
    assert_eq!(name(&cat, drawn).await.unwrap(), drawn);
    let err = issuer.commit().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
    let r = cat.reader(None).await.unwrap();
    let (_, row) = r.by_id(&keystone::TABLE, drawn).await.unwrap().unwrap();
    assert_eq!(
        row.cells[3],
        Value::Text("named".into()),
        "the named row stays"
    );
    // And the other order: the issued insert commits first, the named one is refused.
    let (issuer, drawn) = placed_issued(&cat, "issued").await;
    let mut namer = cat.begin().await.unwrap();
    namer
        .insert(
            &keystone::TABLE,
            KeyChoice::Named(drawn),
            table_cells("named"),
        )
        .await
        .unwrap();
    issuer.commit().await.unwrap();
    let err = namer.commit().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
    // Deleting an issued row placed by the same transaction frees it: nothing of it lands.
    let (mut t, id) = placed_issued(&cat, "gone").await;
    assert!(t.delete(&keystone::TABLE, id).await.unwrap());
    t.commit().await.unwrap();
    let r = cat.reader(None).await.unwrap();
    assert!(r.by_id(&keystone::TABLE, id).await.unwrap().is_none());
    assert!(cat.binding(&keystone::TABLE, id).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issued_ids_ascend_across_tasks_and_are_unique() {
    let cat = Keyspace::open_with(
        mem(),
        KeyspaceOptions {
            id_reservation: 7,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let cat = cat.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..500 {
                ids.push(cat.issue_id(&keystone::FILE).await.unwrap());
            }
            ids
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        let ids = t.await.unwrap();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "each task sees strictly ascending ids"
        );
        all.extend(ids);
    }
    all.sort_unstable();
    let n = all.len();
    all.dedup();
    assert_eq!(all.len(), n, "no id issued twice");
    assert_eq!(
        all,
        (1..=4000).collect::<Vec<u64>>(),
        "one process with no crash issues without gaps"
    );
}

#[tokio::test]
async fn issued_ids_are_never_reissued_after_a_crash_and_marks_survive_a_clean_close() {
    let backend = mem();
    let cat = Keyspace::open(backend.clone()).await.unwrap();
    let mut last = 0;
    for _ in 0..10 {
        last = cat.issue_id(&keystone::SNAPSHOT).await.unwrap();
    }
    drop(cat); // a crash: no close, the reservation is lost
    let cat = Keyspace::open(backend.clone()).await.unwrap();
    let next = cat.issue_id(&keystone::SNAPSHOT).await.unwrap();
    assert!(next > last, "{next} must be above {last}");
    assert_eq!(
        next,
        1 + keystone::DEFAULT_RESERVATION,
        "resumes at the durable ceiling (a gap)"
    );

    // A clean close writes the exact mark back.
    name(&cat, 500).await.unwrap();
    issue(&cat).await.unwrap();
    let mark = cat.describe(&keystone::TABLE).await.unwrap().next_id;
    assert_eq!(mark, 502);
    let reopened = Keyspace::open_read_only(backend.clone()).await;
    // the writer is still open; a reader sees the stored ceiling, which is at or above the mark
    assert!(
        reopened
            .unwrap()
            .describe(&keystone::TABLE)
            .await
            .unwrap()
            .next_id
            >= mark
    );
}

#[tokio::test]
async fn insert_rollback_rename_thousands_of_times() {
    let cat = Keyspace::open(mem()).await.unwrap();
    for i in 0..3000 {
        let mut t = cat.begin().await.unwrap();
        let p = t
            .insert(
                &keystone::TABLE,
                KeyChoice::Named(77),
                vec![
                    Value::Null,
                    Value::Text(format!("v{i}")),
                    Value::Int(1),
                    Value::Text("same".into()),
                ],
            )
            .await
            .unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        assert_eq!(p.id, 77);
        t.rollback();
    }
    assert_eq!(name(&cat, 77).await.unwrap(), 77);
    // Placed and removed again within one transaction frees the key too.
    let mut t = cat.begin().await.unwrap();
    t.insert(&keystone::TABLE, KeyChoice::Named(78), table_cells("x"))
        .await
        .unwrap();
    assert!(t.delete(&keystone::TABLE, 78).await.unwrap());
    t.insert(&keystone::TABLE, KeyChoice::Named(78), table_cells("y"))
        .await
        .unwrap();
    t.commit().await.unwrap();
}

#[tokio::test]
async fn purge_waits_for_older_readers_then_refuses_retryably() {
    let opts = KeyspaceOptions {
        purge_wait: Duration::from_millis(200),
        ..Default::default()
    };
    let cat = Keyspace::open_with(mem(), opts).await.unwrap();
    name(&cat, 5).await.unwrap();
    let old_reader = cat.reader(None).await.unwrap();
    assert!(delete(&cat, 5).await);
    cat.set_retain_from(cat.current_snapshot().await.unwrap())
        .await
        .unwrap();
    let admin = Admin::grant("test");
    let err = cat
        .purge(&keystone::TABLE, 1..=10, &admin)
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("still see key 5"), "{err}");
    // The old reader still sees the row.
    assert!(old_reader
        .by_id(&keystone::TABLE, 5)
        .await
        .unwrap()
        .is_some());
    // Released during the wait: purge goes through.
    let cat2 = cat.clone();
    let purge = tokio::spawn(async move {
        cat2.purge(&keystone::TABLE, 1..=10, &Admin::grant("test"))
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(old_reader);
    let report = purge.await.unwrap().unwrap();
    assert_eq!(report.freed, vec![5]);
    assert!(report.rows_removed >= 1);
    assert_eq!(
        KeyspaceOptions::default().purge_wait,
        Duration::from_secs(1)
    );
}

#[tokio::test]
async fn purge_refuses_rows_visible_at_the_floor_and_writes_audit_entries() {
    let cat = Keyspace::open(mem()).await.unwrap();
    name(&cat, 5).await.unwrap();
    name(&cat, 6).await.unwrap();
    assert!(delete(&cat, 5).await);
    let err = cat
        .purge(&keystone::TABLE, 5..=5, &Admin::grant("t"))
        .await
        .unwrap_err();
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("raise retain-from"), "{err}");
    cat.set_retain_from(cat.current_snapshot().await.unwrap())
        .await
        .unwrap();
    let r = cat
        .purge(&keystone::TABLE, 1..=100, &Admin::grant("alice"))
        .await
        .unwrap();
    assert_eq!(r.freed, vec![5], "live key 6 stays");
    let info = cat.info().await.unwrap();
    assert_eq!(info.counts.get("audit_entry"), Some(&1));
    // The engine never issues a purged key: it draws from the mark.
    let id = issue(&cat).await.unwrap();
    assert_eq!(id, 7);
    let err = cat.set_retain_from(1).await.unwrap_err();
    assert!(err.to_string().contains("only rises"));
}

/// A draw hook that, for the first `times` keys drawn in the `table` space, names that key from
/// another session (a clone of the writer, as a second connection would be) before the issuer
/// can place it.
fn racing_namer(times: usize) -> (DrawHook, Arc<std::sync::Mutex<Option<Keyspace>>>) {
    let slot: Arc<std::sync::Mutex<Option<Keyspace>>> = Arc::new(std::sync::Mutex::new(None));
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let hook: DrawHook = {
        let slot = slot.clone();
        Arc::new(move |space, id| {
            let cat = slot.lock().unwrap().clone();
            let race = space.name == "table"
                && count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < times;
            Box::pin(async move {
                if race {
                    let cat = cat.unwrap();
                    let mut t = cat.begin().await.unwrap();
                    t.insert(space, KeyChoice::Named(id), table_cells("racer"))
                        .await
                        .unwrap();
                    t.commit().await.unwrap();
                }
            })
        })
    };
    (hook, slot)
}

#[tokio::test]
async fn eight_draws_named_by_a_racing_session_refuse_the_insert() {
    let (hook, slot) = racing_namer(8);
    let cat = Keyspace::open_with(
        mem(),
        KeyspaceOptions {
            draw_hook: Some(hook),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    *slot.lock().unwrap() = Some(cat.clone());
    let err = issue(&cat).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    assert!(err.to_string().contains("last 8 keys drawn"), "{err}");
    // The racer stops after 8: the next issued insert is placed on its first draw.
    assert_eq!(issue(&cat).await.unwrap(), 9);
}

#[tokio::test]
async fn a_racer_that_gives_up_early_costs_only_draws() {
    let (hook, slot) = racing_namer(3);
    let cat = Keyspace::open_with(
        mem(),
        KeyspaceOptions {
            draw_hook: Some(hook),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    *slot.lock().unwrap() = Some(cat.clone());
    assert_eq!(
        issue(&cat).await.unwrap(),
        4,
        "draws 1..=3 were named by the racer; the fourth is placed"
    );
}

#[tokio::test]
async fn a_newer_writer_fences_the_older_one() {
    let backend = mem();
    let old = Keyspace::open(backend.clone()).await.unwrap();
    name(&old, 1).await.unwrap();
    let mut pending = old.begin().await.unwrap();
    pending
        .insert(&keystone::TABLE, KeyChoice::Named(2), table_cells("lost"))
        .await
        .unwrap();
    let new = Keyspace::open(backend.clone()).await.unwrap();
    let err = pending.commit().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Fenced {
                mine: 1,
                current: 2,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(name(&old, 3).await.unwrap_err().kind(), ErrorKind::Fenced);
    assert_eq!(
        old.issue_id(&keystone::FILE)
            .await
            .map(|_| ())
            .unwrap_err()
            .kind(),
        ErrorKind::Fenced
    );
    // Nothing of the fenced commits is visible; the new writer commits.
    assert!(new.binding(&keystone::TABLE, 2).await.unwrap().is_none());
    assert!(new.binding(&keystone::TABLE, 3).await.unwrap().is_none());
    assert_eq!(name(&new, 2).await.unwrap(), 2);
}

#[tokio::test]
async fn read_only_catalogs_refuse_writes_and_purge_is_admin_only_by_type() {
    let backend = mem();
    let w = Keyspace::open(backend.clone()).await.unwrap();
    name(&w, 10).await.unwrap();
    let ro = Keyspace::open_read_only(backend.clone()).await.unwrap();
    assert_eq!(
        name(&ro, 11).await.unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    assert_eq!(ro.epoch(), None);
}

#[tokio::test]
async fn a_purged_and_reinserted_key_reads_as_the_new_row() {
    let cat = Keyspace::open(mem()).await.unwrap();
    name(&cat, 9).await.unwrap();
    assert!(delete(&cat, 9).await);
    cat.set_retain_from(cat.current_snapshot().await.unwrap())
        .await
        .unwrap();
    cat.purge(&keystone::TABLE, 9..=9, &Admin::grant("t"))
        .await
        .unwrap();
    let mut t = cat.begin().await.unwrap();
    t.insert(
        &keystone::TABLE,
        KeyChoice::Named(9),
        table_cells("second life"),
    )
    .await
    .unwrap();
    t.commit().await.unwrap();
    let r = cat.reader(None).await.unwrap();
    let (_, row) = r.by_id(&keystone::TABLE, 9).await.unwrap().unwrap();
    assert_eq!(row.cells[3], Value::Text("second life".into()));
}

#[tokio::test]
async fn budget_lists_every_space_and_exhaustion_refuses() {
    let cat = Keyspace::open(mem()).await.unwrap();
    name(&cat, MAX_ID).await.unwrap();
    let b = cat.budget().await.unwrap();
    assert_eq!(b.spaces.len(), keystone::SPACES.len());
    assert_eq!((b.warning, b.exhausted), (1, 1));
    let t = b.spaces.iter().find(|s| s.space == "table").unwrap();
    assert!(t.exhausted && t.warn && t.ids_remaining == 0);
    let err = issue(&cat).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfRange);
    assert!(err.to_string().contains("exhausted"), "{err}");
    // Named keys below the mark still work.
    assert_eq!(name(&cat, 3).await.unwrap(), 3);
    assert!(
        b.to_string().contains(
            "space=table issued=281474976710655 remaining=0 used=100.000% warn=yes exhausted=yes"
        ),
        "{b}"
    );
}

#[tokio::test]
async fn gc_never_changes_what_readers_at_or_above_the_floor_see() {
    let cat = Keyspace::open(mem()).await.unwrap();
    for id in 1..=20 {
        name(&cat, id).await.unwrap();
    }
    for id in 1..=10 {
        assert!(delete(&cat, id).await);
    }
    let floor = cat.current_snapshot().await.unwrap();
    cat.set_retain_from(floor).await.unwrap();
    let collect = |r: rocklake_core::Reader| async move {
        let mut rows = Vec::new();
        r.visible_rows(&[rocklake_core::tags::TABLE.0], |k, row| {
            rows.push((k.to_string(), row))
        })
        .await
        .unwrap();
        rows
    };
    let before = collect(cat.reader(Some(floor)).await.unwrap()).await;
    // Deleted rows are still bound, so GC keeps them until PURGE.
    assert_eq!(cat.gc().await.unwrap(), 0);
    cat.purge(&keystone::TABLE, 1..=10, &Admin::grant("t"))
        .await
        .unwrap();
    let after = collect(cat.reader(Some(floor)).await.unwrap()).await;
    assert_eq!(before, after);
    assert_eq!(after.len(), 10);
    assert_eq!(
        cat.reader(Some(floor - 1)).await.unwrap_err().kind(),
        ErrorKind::OutOfRange
    );
}
