//! A store copied into another (`rocklake backup`, `rocklake restore`): the copy is the
//! committed view, pair for pair; a copy cut short is refused on open; a target that holds
//! anything is refused. The CLI's tests and `e2e/backup.py` do the same on the real engines.

use std::sync::Arc;

use conformance::rows::{delete_key, issue_key, name_key};
use rocklake_core::backend::{KeyRange, Order, ReadView};
use rocklake_core::{copy_view, Keyspace, KvBackend, MemoryBackend, StoreCopy};

fn mem() -> Arc<dyn KvBackend> {
    Arc::new(MemoryBackend::default())
}

async fn pairs(view: &dyn ReadView) -> Vec<(bytes::Bytes, bytes::Bytes)> {
    view.scan(&KeyRange::all(), Order::Ascending, usize::MAX)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_copy_holds_every_committed_pair_and_opens_as_the_same_catalog() {
    let source = Keyspace::open(mem()).await.unwrap();
    for id in [5, 900] {
        name_key(&source, id).await.unwrap();
    }
    let mut issued = Vec::new();
    for _ in 0..40 {
        issued.push(issue_key(&source).await.unwrap());
    }
    assert!(delete_key(&source, 5).await.unwrap());
    let view = source.committed_view().await.unwrap();
    let snapshot = source.current_snapshot().await.unwrap();

    let target = mem();
    let mut seen = Vec::new();
    let report = copy_view(view.as_ref(), target.as_ref(), &mut |k, b| {
        seen.push((k, b))
    })
    .await
    .unwrap();
    // A commit after the view was taken is not in the copy.
    issue_key(&source).await.unwrap();

    let expected = pairs(view.as_ref()).await;
    assert_eq!(pairs(target.as_ref()).await, expected, "pair for pair");
    assert_eq!(report.keys, expected.len() as u64);
    assert_eq!(report.snapshot, snapshot);
    assert_eq!(seen.last().copied(), Some((report.keys, report.bytes)));

    let copy = Keyspace::open(target).await.unwrap();
    assert_eq!(copy.current_snapshot().await.unwrap(), snapshot);
    let next = issue_key(&copy).await.unwrap();
    assert!(
        next > *issued.iter().max().unwrap(),
        "the id space's mark came along: {next}"
    );
    let report = rocklake_core::verify::verify(copy.backend().as_ref(), |_, _| {})
        .await
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[tokio::test]
async fn a_copy_cut_short_is_refused_and_a_full_target_too() {
    let source = Keyspace::open(mem()).await.unwrap();
    for _ in 0..10 {
        issue_key(&source).await.unwrap();
    }
    let view = source.committed_view().await.unwrap();

    // Every pair lands but the format key, held back for the end; then the copy stops (as
    // when its process is killed).
    let target = mem();
    {
        let mut copy = StoreCopy::begin(target.as_ref())
            .await
            .unwrap()
            .batch_bytes(1);
        for (k, v) in pairs(view.as_ref()).await {
            copy.push(k, v).await.unwrap();
        }
    }
    target.flush().await.unwrap();
    assert_eq!(
        pairs(target.as_ref()).await.len() + 1,
        pairs(view.as_ref()).await.len()
    );
    let err = Keyspace::open(target.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no format version") && err.contains("did not finish"),
        "{err}"
    );
    let err = Keyspace::open_read_only(target.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("did not finish"), "{err}");

    let err = copy_view(view.as_ref(), target.as_ref(), &mut |_, _| {})
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not empty"), "{err}");

    // Keys out of order are refused, not written.
    let target = mem();
    let mut copy = StoreCopy::begin(target.as_ref()).await.unwrap();
    copy.push("b".into(), "1".into()).await.unwrap();
    let err = copy.push("a".into(), "1".into()).await.unwrap_err();
    assert!(err.to_string().contains("ascending"), "{err}");
}
