//! `--metrics-listen`: what a Prometheus scrape reads moves as the server works, on every
//! engine, through a real client (tokio-postgres, simple and extended protocol) and a real
//! HTTP request.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use rocklake_server::ServerOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` over HTTP/1.1: the status code and the body.
async fn get(at: SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

/// Every sample of a scrape: `name{labels}` → value.
async fn scrape(at: SocketAddr) -> HashMap<String, f64> {
    let (status, body) = get(at, "/metrics").await;
    assert_eq!(status, 200);
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, value) = l.rsplit_once(' ').unwrap();
            (name.to_string(), value.parse().unwrap())
        })
        .collect()
}

fn delta(after: &HashMap<String, f64>, before: &HashMap<String, f64>, name: &str) -> f64 {
    after.get(name).copied().unwrap_or(0.0) - before.get(name).copied().unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_counts_statements_commits_conflicts_and_open_transactions() {
    for engine in common::engines() {
        let r = common::serve(engine, ServerOptions::default()).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let http = tokio::spawn(rocklake_server::metrics::serve_http(
            listener,
            r.metrics.clone(),
            async move {
                let _ = stopped.await;
            },
        ));
        assert_eq!(get(at, "/healthz").await.0, 200, "{engine}");
        assert_eq!(get(at, "/readyz").await.0, 200, "{engine}");
        assert_eq!(get(at, "/nothing").await.0, 404, "{engine}");
        let before = scrape(at).await;

        let a = common::connect(&r.url("")).await.unwrap();
        let b = common::connect(&r.url("")).await.unwrap();
        a.batch_execute("CREATE TABLE t (k int PRIMARY KEY, v text)")
            .await
            .unwrap();
        a.batch_execute("INSERT INTO t VALUES (1, 'a')")
            .await
            .unwrap();
        let e = a.batch_execute("SELECT 1 / 0").await.unwrap_err();
        assert_eq!(e.code().unwrap().code(), "22012");
        let e = a
            .batch_execute("INSERT INTO t VALUES (1, 'b')")
            .await
            .unwrap_err();
        assert_eq!(e.code().unwrap().code(), "23505");
        // The extended protocol's path: Parse, Bind, Execute.
        let row = a
            .query_one("SELECT v FROM t WHERE k = $1", &[&1i32])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), "a");
        b.batch_execute("BEGIN; SELECT count(*) FROM t")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let open = scrape(at).await;

        let d = |name: &str| delta(&open, &before, name);
        let ok = |command: &str| {
            format!("rocklake_statements_total{{command=\"{command}\",sqlstate=\"00000\"}}")
        };
        let failed =
            |code: &str| format!("rocklake_statements_total{{command=\"\",sqlstate=\"{code}\"}}");
        assert_eq!(d(&ok("CREATE")), 1.0, "{engine}");
        assert_eq!(d(&ok("INSERT")), 1.0, "{engine}");
        assert_eq!(
            d(&ok("SELECT")),
            2.0,
            "{engine}: the extended query and b's count"
        );
        assert_eq!(d(&ok("BEGIN")), 1.0, "{engine}");
        assert_eq!(d(&failed("22012")), 1.0, "{engine}");
        assert_eq!(d(&failed("23505")), 1.0, "{engine}");
        assert_eq!(
            d("rocklake_conflicts_total{sqlstate=\"23505\"}"),
            1.0,
            "{engine}"
        );
        assert_eq!(open["rocklake_sessions"], 2.0, "{engine}");
        assert_eq!(d("rocklake_connections_accepted_total"), 2.0, "{engine}");
        assert_eq!(open["rocklake_open_transactions"], 1.0, "{engine}");
        assert!(
            open["rocklake_oldest_transaction_age_seconds"] >= 0.3,
            "{engine}: {open:?}"
        );
        // The CREATE and the INSERT wrote; each durable commit was covered by one flush.
        assert_eq!(d("rocklake_commits_total"), 2.0, "{engine}");
        assert_eq!(d("rocklake_durable_commits_total"), 2.0, "{engine}");
        assert_eq!(
            open["rocklake_group_commit_size_sum"], open["rocklake_durable_commits_total"],
            "{engine}"
        );
        assert!(d("rocklake_group_commit_size_count") >= 1.0, "{engine}");
        // Six messages: four simple queries of a, one Execute, one simple query of b.
        assert_eq!(d("rocklake_message_seconds_count"), 6.0, "{engine}");
        assert_eq!(
            open["rocklake_group_commit_size_bucket{le=\"+Inf\"}"],
            open["rocklake_group_commit_size_count"],
            "{engine}"
        );
        // The refused INSERT got as far as its commit too.
        assert_eq!(
            d("rocklake_phase_seconds_count{phase=\"commit\"}"),
            3.0,
            "{engine}"
        );

        b.batch_execute("COMMIT").await.unwrap();
        drop((a, b));

        // Commits that arrive together share flushes: whatever the grouping, the flushes
        // covered every durable commit exactly once.
        let mut writers = Vec::new();
        for w in 0..16i32 {
            let url = r.url("");
            writers.push(tokio::spawn(async move {
                let c = common::connect(&url).await.unwrap();
                for i in 0..5i32 {
                    c.execute("INSERT INTO t VALUES ($1, 'w')", &[&(100 + w * 10 + i)])
                        .await
                        .unwrap();
                }
            }));
        }
        for w in writers {
            w.await.unwrap();
        }
        let grouped = scrape(at).await;
        let g = |name: &str| delta(&grouped, &open, name);
        assert_eq!(g("rocklake_durable_commits_total"), 80.0, "{engine}");
        assert_eq!(g("rocklake_group_commit_size_sum"), 80.0, "{engine}");
        println!(
            "{engine}: 80 concurrent commits took {} flushes",
            g("rocklake_group_commit_size_count")
        );
        // The engine's own figures moved with those 80 commits: SlateDB's write batches,
        // the bytes sled's flushes wrote, RocksDB's estimate of its keys.
        let (figure, at_least) = match engine {
            "file" => ("rocklake_engine_slatedb_db_write_batch_count_total", 80.0),
            "sled" => ("rocklake_engine_sled_flushed_bytes_total", 80.0),
            "rocksdb" => ("rocklake_engine_rocksdb_estimate_num_keys", 80.0),
            other => panic!("no engine figure named for {other}"),
        };
        assert!(
            g(figure) >= at_least,
            "{engine}: {figure} moved by {} over 80 commits; the engine's figures: {:?}",
            g(figure),
            grouped
                .keys()
                .filter(|k| k.starts_with("rocklake_engine_"))
                .take(20)
                .collect::<Vec<_>>()
        );
        println!("{engine}: {figure} +{} over 80 commits", g(figure));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = scrape(at).await;
        assert_eq!(after["rocklake_open_transactions"], 0.0, "{engine}");
        assert_eq!(
            after["rocklake_oldest_transaction_age_seconds"], 0.0,
            "{engine}"
        );
        assert_eq!(after["rocklake_sessions"], 0.0, "{engine}");
        assert_eq!(after["rocklake_ready"], 1.0, "{engine}");

        let metrics = r.metrics.clone();
        r.stop().await;
        assert!(!metrics.ready(), "{engine}");
        assert_eq!(get(at, "/readyz").await.0, 503, "{engine}");
        let _ = stop.send(());
        http.await.unwrap();
    }
}
