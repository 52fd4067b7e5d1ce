//! Transactions keep a catalog whole: snapshots publish in order, the mark shown is the mark
//! that survives a restart, every write of an id-space row goes through Keystone, and a refused
//! call leaves nothing behind. Each test here failed on the code before its fix, except the
//! close-race stress test at the end: that window is too small to hit from outside, so the unit
//! test `nothing_is_issued_after_a_space_is_frozen` in `keystone.rs` is what proves that fix.

use conformance::rows::table_cells;
use rocklake_core::ErrorKind;
use std::collections::BTreeSet;
use std::sync::Arc;

use rocklake_core::keys::{self, TableKey};
use rocklake_core::keyspace::DrawHook;
use rocklake_core::keystone::{self, MAX_ID};
use rocklake_core::{
    tags, Error, KeyChoice, Keyspace, KeyspaceOptions, KvBackend, MemoryBackend, Row, Value,
};

async fn table_names_at(cat: &Keyspace, snapshot: u64) -> BTreeSet<String> {
    let r = cat.reader(Some(snapshot)).await.unwrap();
    let mut out = BTreeSet::new();
    r.visible_rows(&[tags::TABLE.0], |k, row| {
        let name = match &row.cells[3] {
            Value::Text(s) => s.clone(),
            other => other.to_string(),
        };
        out.insert(format!("{}={name}", k.field("table_id").unwrap()));
    })
    .await
    .unwrap();
    out
}

/// Snapshot 1 is drawn first but committed after snapshot 2 is visible: a reader at 1 would
/// see its rows appear afterwards. The late commit is refused (retryable) and lands nothing.
#[tokio::test]
async fn a_commit_never_lands_at_or_below_a_visible_snapshot() {
    let cat = Keyspace::open(Arc::new(MemoryBackend::default()))
        .await
        .unwrap();
    let mut early = cat.begin().await.unwrap();
    assert_eq!(early.write_snapshot().await.unwrap(), 1);
    let mut late = cat.begin().await.unwrap();
    late.insert(&keystone::TABLE, KeyChoice::Named(2), table_cells("late"))
        .await
        .unwrap();
    assert_eq!(late.snapshot(), Some(2));
    late.commit().await.unwrap();
    let seen_at_1 = table_names_at(&cat, 1).await;
    let seen_at_2 = table_names_at(&cat, 2).await;

    early
        .insert(&keystone::TABLE, KeyChoice::Named(1), table_cells("early"))
        .await
        .unwrap();
    let err = early.commit().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Conflict {
                retryable: true,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("snapshot 1"), "{err}");
    assert_eq!(table_names_at(&cat, 1).await, seen_at_1, "time travel to 1");
    assert_eq!(table_names_at(&cat, 2).await, seen_at_2, "time travel to 2");
    assert_eq!(cat.current_snapshot().await.unwrap(), 2);
    assert!(cat.binding(&keystone::TABLE, 1).await.unwrap().is_none());

    // Run again, it takes a new snapshot above every visible one and lands.
    let mut again = cat.begin().await.unwrap();
    again
        .insert(&keystone::TABLE, KeyChoice::Named(1), table_cells("early"))
        .await
        .unwrap();
    assert_eq!(again.commit().await.unwrap().snapshot, Some(3));
    assert_eq!(table_names_at(&cat, 2).await, seen_at_2);
}

/// Two writers naming the same snapshot id (as two DuckLake writers do): the second is refused
/// `AlreadyExists` (23505 on the wire), not a generic conflict.
#[tokio::test]
async fn two_writers_naming_one_snapshot_id_get_already_exists() {
    let cat = Keyspace::open(Arc::new(MemoryBackend::default()))
        .await
        .unwrap();
    let snapshot_cells = || vec![Value::Null, Value::Int(0)];
    let mut a = cat.begin().await.unwrap();
    let mut b = cat.begin().await.unwrap();
    for t in [&mut a, &mut b] {
        t.insert(&keystone::SNAPSHOT, KeyChoice::Named(7), snapshot_cells())
            .await
            .unwrap();
    }
    a.commit().await.unwrap();
    let err = b.commit().await.unwrap_err();
    assert_eq!(err.sqlstate(), "23505", "{err}");
}

/// A named key above the mark that rolls back leaves the mark where it is, in DESCRIBE and after
/// a restart; one that commits moves it, and the move survives the restart. (The mark is raised
/// only by keys that commit, so the mark shown is always the stored one or below it.)
#[tokio::test]
async fn the_mark_shown_is_the_mark_that_survives_a_restart() {
    let cat = Keyspace::open(Arc::new(MemoryBackend::default()))
        .await
        .unwrap();
    let mut t = cat.begin().await.unwrap();
    t.insert(&keystone::TABLE, KeyChoice::Named(5000), table_cells("x"))
        .await
        .unwrap();
    t.rollback();
    assert_eq!(cat.describe(&keystone::TABLE).await.unwrap().next_id, 1);
    let mut t = cat.begin().await.unwrap();
    t.insert(&keystone::TABLE, KeyChoice::Named(5000), table_cells("x"))
        .await
        .unwrap();
    drop(t);
    assert_eq!(cat.describe(&keystone::TABLE).await.unwrap().next_id, 1);

    // A crash (no clean close): reopen what the store holds.
    let backend = Arc::new(MemoryBackend::default());
    let cat = Keyspace::open(backend.clone()).await.unwrap();
    let mut t = cat.begin().await.unwrap();
    t.insert(&keystone::TABLE, KeyChoice::Named(5000), table_cells("x"))
        .await
        .unwrap();
    t.rollback();
    let shown = cat.describe(&keystone::TABLE).await.unwrap().next_id;
    let after = Keyspace::open(Arc::new(backend.reopened())).await.unwrap();
    assert_eq!(
        after.describe(&keystone::TABLE).await.unwrap().next_id,
        shown,
        "DESCRIBE showed {shown} before the restart"
    );

    let mut t = after.begin().await.unwrap();
    t.insert(&keystone::TABLE, KeyChoice::Named(5000), table_cells("x"))
        .await
        .unwrap();
    t.commit().await.unwrap();
    assert_eq!(
        after.describe(&keystone::TABLE).await.unwrap().next_id,
        5001
    );
    after.close().await.unwrap();
}

/// The committed move of the mark survives a restart without a clean close too.
#[tokio::test]
async fn a_committed_named_key_keeps_the_mark_past_it_after_a_crash() {
    let backend = Arc::new(MemoryBackend::default());
    let cat = Keyspace::open(backend.clone()).await.unwrap();
    let mut t = cat.begin().await.unwrap();
    t.insert(&keystone::TABLE, KeyChoice::Named(5000), table_cells("x"))
        .await
        .unwrap();
    t.commit().await.unwrap();
    assert_eq!(cat.describe(&keystone::TABLE).await.unwrap().next_id, 5001);
    let after = Keyspace::open(Arc::new(backend.reopened())).await.unwrap();
    assert!(after.describe(&keystone::TABLE).await.unwrap().next_id >= 5001);
}

/// `put_row` cannot write a row of an id space; `update` writes a new version, moves the
/// binding to it, keeps older snapshots as they were, and a later delete ends the live version
/// (no two versions of the entity overlap).
#[tokio::test]
async fn updates_go_through_keystone_and_delete_ends_the_live_version() {
    let cat = Keyspace::open(Arc::new(MemoryBackend::default()))
        .await
        .unwrap();
    let mut t = cat.begin().await.unwrap();
    let raw = TableKey {
        table_id: 9,
        begin_snapshot: 1,
    }
    .encode();
    let err = t
        .put_row(&raw, &Row::new(1, table_cells("raw")))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("id space \"table\""), "{err}");
    assert!(t.is_empty());
    assert_eq!(
        t.delete_key(&raw).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );

    let s1 = {
        let mut t = cat.begin().await.unwrap();
        t.insert(&keystone::TABLE, KeyChoice::Named(9), table_cells("v1"))
            .await
            .unwrap();
        t.commit().await.unwrap().snapshot.unwrap()
    };
    let s2 = {
        let mut t = cat.begin().await.unwrap();
        let p = t
            .update(&keystone::TABLE, 9, table_cells("v2"))
            .await
            .unwrap();
        assert_eq!(p.snapshot, t.snapshot().unwrap());
        t.commit().await.unwrap().snapshot.unwrap()
    };
    let b = cat.binding(&keystone::TABLE, 9).await.unwrap().unwrap();
    assert_eq!(
        b.row_key,
        TableKey {
            table_id: 9,
            begin_snapshot: s2
        }
        .encode(),
        "the binding names the live version"
    );
    let s3 = {
        let mut t = cat.begin().await.unwrap();
        assert!(t.delete(&keystone::TABLE, 9).await.unwrap());
        t.commit().await.unwrap().snapshot.unwrap()
    };
    assert_eq!(table_names_at(&cat, s1).await, ["9=v1".to_string()].into());
    assert_eq!(table_names_at(&cat, s2).await, ["9=v2".to_string()].into());
    assert!(table_names_at(&cat, s3).await.is_empty());

    // Every version of entity 9, as stored: intervals never overlap.
    let view = cat.backend().view().await.unwrap();
    let page = view
        .scan(
            &rocklake_core::KeyRange::prefix(&keys::prefix(tags::TABLE, &[9])),
            rocklake_core::Order::Ascending,
            100,
        )
        .await
        .unwrap();
    let versions: Vec<(u64, Option<u64>)> = page
        .iter()
        .map(|(k, v)| {
            let r = Row::decode(k, v).unwrap();
            (r.begin_snapshot, r.end_snapshot)
        })
        .collect();
    assert_eq!(versions, vec![(s1, Some(s2)), (s2, Some(s3))]);

    // A deleted row cannot be updated; an unknown key neither.
    let mut t = cat.begin().await.unwrap();
    let err = t
        .update(&keystone::TABLE, 9, table_cells("v3"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let err = t
        .update(&keystone::TABLE, 10, table_cells("v3"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(t.is_empty(), "refused updates leave nothing");
}

/// Update then delete in one transaction: the update's version is taken back, the version it
/// ended is the last one and ends at this snapshot.
#[tokio::test]
async fn update_then_delete_in_one_transaction_leaves_one_ended_version() {
    let cat = Keyspace::open(Arc::new(MemoryBackend::default()))
        .await
        .unwrap();
    let mut t = cat.begin().await.unwrap();
    t.insert(&keystone::TABLE, KeyChoice::Named(4), table_cells("v1"))
        .await
        .unwrap();
    let s1 = t.commit().await.unwrap().snapshot.unwrap();
    let mut t = cat.begin().await.unwrap();
    t.update(&keystone::TABLE, 4, table_cells("v2"))
        .await
        .unwrap();
    t.update(&keystone::TABLE, 4, table_cells("v3"))
        .await
        .unwrap();
    assert!(t.delete(&keystone::TABLE, 4).await.unwrap());
    let s2 = t.commit().await.unwrap().snapshot.unwrap();
    let b = cat.binding(&keystone::TABLE, 4).await.unwrap().unwrap();
    assert!(b.is_deleted());
    assert_eq!(
        b.row_key,
        TableKey {
            table_id: 4,
            begin_snapshot: s1
        }
        .encode()
    );
    assert_eq!(table_names_at(&cat, s1).await, ["4=v1".to_string()].into());
    assert!(table_names_at(&cat, s2).await.is_empty());
}

/// An issued insert that gives up (every drawn key named by another session first) leaves
/// nothing in the transaction: not even the snapshot row it would have written at.
#[tokio::test]
async fn a_refused_insert_leaves_nothing_behind() {
    let backend: Arc<dyn KvBackend> = Arc::new(MemoryBackend::default());
    let other = Arc::new(std::sync::Mutex::new(None::<Keyspace>));
    let racing = other.clone();
    let hook: DrawHook = Arc::new(move |space, id| {
        let other = racing.lock().unwrap().clone();
        Box::pin(async move {
            // Another session of the same writer names the drawn key before it is placed.
            if let (Some(cat), true) = (other, space.name == "table") {
                let mut t = cat.begin().await.unwrap();
                t.insert(space, KeyChoice::Named(id), table_cells("racer"))
                    .await
                    .unwrap();
                std::mem::forget(t);
            }
        })
    });
    let cat = Keyspace::open_with(
        backend,
        KeyspaceOptions {
            draw_hook: Some(hook),
            ..KeyspaceOptions::default()
        },
    )
    .await
    .unwrap();
    *other.lock().unwrap() = Some(cat.clone());
    let mut t = cat.begin().await.unwrap();
    let err = t
        .insert(&keystone::TABLE, KeyChoice::Issued, table_cells("me"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
    assert!(t.is_empty(), "the refused insert left {} writes", t.len());
    assert_eq!(t.snapshot(), None);
    let info = t.commit().await.unwrap();
    assert_eq!(info.keys_written, 0);
    assert_eq!(cat.current_snapshot().await.unwrap(), 0);
}

/// The id column must agree with the key (or be NULL, then it is filled in), on insert and on
/// update; a refused row places nothing.
#[tokio::test]
async fn the_id_column_agrees_with_the_key() {
    let cat = Keyspace::open(Arc::new(MemoryBackend::default()))
        .await
        .unwrap();
    let mut t = cat.begin().await.unwrap();
    let mut cells = table_cells("x");
    cells[0] = Value::Int(999);
    let err = t
        .insert(&keystone::TABLE, KeyChoice::Named(600), cells.clone())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("table_id=999"), "{err}");
    let err = t
        .insert(&keystone::TABLE, KeyChoice::Issued, cells.clone())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(t.is_empty());
    cells[0] = Value::Int(600);
    t.insert(&keystone::TABLE, KeyChoice::Named(600), cells.clone())
        .await
        .unwrap();
    t.commit().await.unwrap();
    let mut t = cat.begin().await.unwrap();
    cells[0] = Value::Int(601);
    let err = t.update(&keystone::TABLE, 600, cells).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    // A child's parent column must agree with its parent key too.
    let column = vec![
        Value::Null,
        Value::Int(77),
        Value::Int(0),
        Value::Text("c".into()),
    ];
    let err = t
        .insert_child(&keystone::COLUMN, 600, KeyChoice::Named(1), column)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("table_id=77"), "{err}");
    assert!(t.is_empty());
}

/// Error kinds at the edges: an integer literal of any length outside the space is OutOfRange
/// (22003); parent ids are range-checked like ids.
#[tokio::test]
async fn out_of_range_at_every_edge() {
    let huge = "9".repeat(60);
    for text in [
        huge.as_str(),
        "-99999999999999999999999999999999999999999",
        "+281474976710656",
    ] {
        let e = keystone::TABLE.parse_id(text).unwrap_err();
        assert_eq!(
            (e.kind(), e.sqlstate()),
            (ErrorKind::OutOfRange, "22003"),
            "{text}: {e}"
        );
    }
    assert_eq!(
        keystone::TABLE.parse_id("12abc").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let cat = Keyspace::open(Arc::new(MemoryBackend::default()))
        .await
        .unwrap();
    let mut t = cat.begin().await.unwrap();
    for parent in [0, MAX_ID + 1] {
        let e = t
            .insert_child(&keystone::COLUMN, parent, KeyChoice::Issued, vec![])
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfRange, "parent {parent}: {e}");
    }
    assert!(t.is_empty());
}

/// `issue_id` racing `close()`: no id handed out before the close is issued again after the
/// store is reopened. Many rounds, several issuing tasks each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_id_issued_around_close_is_issued_again() {
    for round in 0..200 {
        let backend = Arc::new(MemoryBackend::default());
        let cat = Keyspace::open_with(
            backend.clone(),
            KeyspaceOptions {
                id_reservation: 64,
                ..KeyspaceOptions::default()
            },
        )
        .await
        .unwrap();
        let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let cat = cat.clone();
            let started = started.clone();
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::new();
                while let Ok(id) = cat.issue_id(&keystone::TABLE).await {
                    got.push(id);
                    started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                got
            }));
        }
        // Close while the issuers are busy (each has issued, and reserved, by then).
        while started.load(std::sync::atomic::Ordering::Relaxed) < 300 {
            tokio::task::yield_now().await;
        }
        cat.close().await.unwrap();
        let mut before = BTreeSet::new();
        for t in tasks {
            before.extend(t.await.unwrap());
        }
        let again = Keyspace::open(Arc::new(backend.reopened())).await.unwrap();
        for _ in 0..3 {
            let id = again.issue_id(&keystone::TABLE).await.unwrap();
            assert!(
                !before.contains(&id),
                "round {round}: id {id} was issued before the close and again after it"
            );
        }
    }
}
