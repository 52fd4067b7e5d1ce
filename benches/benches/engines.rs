//! Criterion benches: the same workloads on every engine, side by side in one run.
//! `cargo bench -p benches`. (`rocklake bench` prints the full comparison table.)

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rocklake::keys::{DataFileKey, Key};
use rocklake::{Durability, Keyspace, KeyspaceOptions, KvBackend, WriteBatch};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn engines(dir: &std::path::Path) -> Vec<(&'static str, Arc<dyn KvBackend>)> {
    vec![
        (
            "slatedb-file",
            rocklake::open(&format!("file://{}/slate", dir.display()))
                .await
                .expect("slatedb"),
        ),
        (
            "rocksdb",
            rocklake::open(&format!("rocksdb://{}/rocks", dir.display()))
                .await
                .expect("rocksdb"),
        ),
        (
            "sled",
            rocklake::open(&format!("sled://{}/sled", dir.display()))
                .await
                .expect("sled"),
        ),
        ("model", rocklake::open("model://").await.expect("model")),
    ]
}

fn codec(c: &mut Criterion) {
    let key = DataFileKey {
        table_id: 5,
        file_id: 3,
        begin_snapshot: 100,
    }
    .encode();
    c.bench_function("codec/encode data_file key", |b| {
        b.iter(|| {
            DataFileKey {
                table_id: std::hint::black_box(5),
                file_id: 3,
                begin_snapshot: 100,
            }
            .encode()
        })
    });
    c.bench_function("codec/decode data_file key", |b| {
        b.iter(|| Key::decode(std::hint::black_box(&key)))
    });
}

fn kv_and_catalog(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    let subjects = rt.block_on(engines(dir.path()));
    let mut g = c.benchmark_group("get");
    for (name, b) in &subjects {
        rt.block_on(async {
            let mut w = WriteBatch::new();
            for i in 0..1000u64 {
                w.put(
                    DataFileKey {
                        table_id: 1,
                        file_id: i,
                        begin_snapshot: 1,
                    }
                    .encode()
                    .to_vec(),
                    vec![0u8; 100],
                );
            }
            b.write(w, Durability::Buffered).await.expect("fill");
        });
        let key = DataFileKey {
            table_id: 1,
            file_id: 500,
            begin_snapshot: 1,
        }
        .encode();
        g.bench_function(BenchmarkId::from_parameter(name), |bench| {
            bench
                .to_async(&rt)
                .iter(|| async { b.get(&key).await.expect("get") })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("batch-100-buffered");
    for (name, b) in &subjects {
        let mut i = 0u64;
        g.bench_function(BenchmarkId::from_parameter(name), |bench| {
            bench.to_async(&rt).iter(|| {
                i += 1;
                let mut w = WriteBatch::new();
                for j in 0..100u64 {
                    w.put(
                        DataFileKey {
                            table_id: 2,
                            file_id: i,
                            begin_snapshot: j,
                        }
                        .encode()
                        .to_vec(),
                        vec![0u8; 100],
                    );
                }
                async move { b.write(w, Durability::Buffered).await.expect("write") }
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("snapshot-commit-1-file-buffered");
    for (name, b) in &subjects {
        let cat = rt
            .block_on(Keyspace::open_with(
                b.clone(),
                KeyspaceOptions {
                    durability: Durability::Buffered,
                    ..Default::default()
                },
            ))
            .expect("catalog");
        g.bench_function(BenchmarkId::from_parameter(name), |bench| {
            bench
                .to_async(&rt)
                .iter(|| benches::commit_snapshot(&cat, 1))
        });
    }
    g.finish();
}

criterion_group!(benches, codec, kv_and_catalog);
criterion_main!(benches);
