//! `rocklake serve --lakes`: many lakes, one server, on every engine the binary has. The
//! server process itself on real folders, and clients through tokio-postgres, as
//! PostgreSQL's own clients connect.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls};

/// The engines of this build and the scheme of each one's folder URLs.
fn engines() -> Vec<&'static str> {
    let mut v = Vec::new();
    if cfg!(feature = "slatedb") {
        v.push("file");
    }
    if cfg!(feature = "sled") {
        v.push("sled");
    }
    if cfg!(feature = "rocksdb") {
        v.push("rocksdb");
    }
    v
}

/// The folders of lakes to try under `dir`: one per engine, and with SlateDB a prefix on the
/// S3 emulator CI runs (`ROCKLAKE_TEST_S3_URL`).
fn roots(dir: &std::path::Path) -> Vec<(&'static str, String)> {
    let mut v: Vec<_> = engines()
        .into_iter()
        .map(|scheme| {
            (
                scheme,
                format!("{scheme}://{}/{scheme}-lakes", dir.display()),
            )
        })
        .collect();
    if cfg!(feature = "slatedb") {
        match std::env::var("ROCKLAKE_TEST_S3_URL") {
            Ok(url) => v.push(("s3", format!("{url}/lakes-{}", std::process::id()))),
            Err(_) if std::env::var_os("CI").is_some() => {
                panic!("CI must provide ROCKLAKE_TEST_S3_URL (an S3-compatible server on loopback)")
            }
            Err(_) => eprintln!("NOT RUN on S3: needs ROCKLAKE_TEST_S3_URL (see .ci/services.sh)"),
        }
    }
    v
}

/// A `rocklake serve --lakes` child, stopped on drop.
struct Served {
    child: Child,
    addr: SocketAddr,
    metrics: SocketAddr,
    /// What it printed before it began serving.
    banner: String,
    /// Kept open: a closed pipe would end the server at its next line.
    _stdout: BufReader<std::process::ChildStdout>,
}

impl Served {
    /// Stop it as an operator does (SIGTERM), and wait for it to close its stores.
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "the server ended with {status}");
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the server did not stop within 60 s of SIGTERM");
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `rocklake serve --lakes url`, with `password` if given; its address and metrics
/// address from what it prints.
fn serve(url: &str, password: Option<&str>) -> Served {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rocklake"));
    cmd.args([
        "serve",
        "--lakes",
        url,
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ])
    .env_remove("ROCKLAKE_PASSWORD")
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if let Some(p) = password {
        cmd.env("ROCKLAKE_PASSWORD", p);
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    let mut line = String::new();
    while !line.starts_with("Stop with") {
        line.clear();
        if stdout.read_line(&mut line).unwrap() == 0 {
            let status = child.wait().unwrap();
            panic!("rocklake serve --lakes {url} ended ({status}) after printing {banner:?}");
        }
        banner.push_str(&line);
    }
    let addr_after = |marker: &str, end: char| -> SocketAddr {
        let at = banner
            .find(marker)
            .unwrap_or_else(|| panic!("no {marker:?} in {banner:?}"));
        let rest = &banner[at + marker.len()..];
        rest[..rest.find(end).unwrap()].parse().unwrap()
    };
    Served {
        addr: addr_after(" on ", '\n'),
        metrics: addr_after("Metrics: http://", '/'),
        banner,
        child,
        _stdout: stdout,
    }
}

/// A connection to database `db`, or the error the server answered.
async fn connect(
    addr: SocketAddr,
    db: &str,
    password: Option<&str>,
) -> Result<Client, tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config
        .host(addr.ip().to_string())
        .port(addr.port())
        .user("duck")
        .dbname(db)
        .connect_timeout(Duration::from_secs(30));
    if let Some(p) = password {
        config.password(p);
    }
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// The SQLSTATE and message of a failed call.
fn refusal<T: std::fmt::Debug>(r: Result<T, tokio_postgres::Error>) -> (String, String) {
    let e = r.expect_err("refused");
    let db = e
        .as_db_error()
        .unwrap_or_else(|| panic!("not an error from the server: {e}"));
    (db.code().code().to_string(), db.message().to_string())
}

async fn names(c: &Client) -> Vec<String> {
    c.query("SELECT datname FROM pg_database ORDER BY datname", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect()
}

fn scrape(at: SocketAddr) -> String {
    let mut s = std::net::TcpStream::connect(at).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Each lake is a database of its own name: a store under the URL, made by CREATE DATABASE,
/// kept across a restart, its tables and commits apart from the others'; an unknown name
/// is refused with 3D000 as PostgreSQL refuses it.
#[test]
fn lakes_are_databases_by_name_each_a_store_of_its_own() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    for (scheme, url) in roots(dir.path()) {
        let server = serve(&url, None);
        assert!(
            server
                .banner
                .contains("One database per folder under the URL: postgres ("),
            "{scheme}: {}",
            server.banner
        );
        rt.block_on(async {
            let (code, message) = refusal(connect(server.addr, "sales", None).await);
            assert_eq!(
                (code.as_str(), message.as_str()),
                ("3D000", "database \"sales\" does not exist"),
                "{scheme}"
            );
            let admin = connect(server.addr, "postgres", None).await.unwrap();
            assert_eq!(names(&admin).await, ["postgres"], "{scheme}");
            admin.batch_execute("CREATE DATABASE sales").await.unwrap();
            admin
                .batch_execute("CREATE DATABASE Audit_2")
                .await
                .unwrap();
            let refused = [
                ("CREATE DATABASE sales", "42P04"),
                ("CREATE DATABASE \"Sales\"", "42602"),
                ("CREATE DATABASE \"a/b\"", "42602"),
                ("CREATE DATABASE IF NOT EXISTS sales", "42601"),
                ("BEGIN; CREATE DATABASE inblock", "25001"),
                ("DROP DATABASE sales", "0A000"),
            ];
            for (sql, want) in refused {
                let (code, message) = refusal(admin.batch_execute(sql).await);
                assert_eq!(code, want, "{scheme}: {sql}: {message}");
                let _ = admin.batch_execute("ROLLBACK").await;
            }
            assert_eq!(
                names(&admin).await,
                ["audit_2", "postgres", "sales"],
                "{scheme}: the database list after CREATE DATABASE (names folded, failures \
                 leaving nothing)"
            );
            let sales = connect(server.addr, "sales", None).await.unwrap();
            sales
                .batch_execute("CREATE TABLE t (v text); INSERT INTO t VALUES ('sales')")
                .await
                .unwrap();
            let audit = connect(server.addr, "audit_2", None).await.unwrap();
            let (code, _) = refusal(audit.query("SELECT v FROM t", &[]).await);
            assert_eq!(code, "42P01", "{scheme}: sales's table seen from audit_2");
            audit
                .batch_execute("CREATE TABLE t (v text); INSERT INTO t VALUES ('audit')")
                .await
                .unwrap();
            let row = sales
                .query_one("SELECT current_database(), v FROM t", &[])
                .await
                .unwrap();
            assert_eq!(
                (row.get::<_, String>(0), row.get::<_, String>(1)),
                ("sales".to_string(), "sales".to_string()),
                "{scheme}"
            );
        });
        let metrics = scrape(server.metrics);
        for db in ["postgres", "sales", "audit_2"] {
            assert!(
                metrics.contains(&format!("rocklake_commits_total{{database=\"{db}\"}}")),
                "{scheme}: no commits of {db} in\n{metrics}"
            );
        }
        server.stop();

        // Each lake is a store of its own, with its own tools.
        let out = Command::new(env!("CARGO_BIN_EXE_rocklake"))
            .args(["verify", &format!("{url}/sales")])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{scheme}: verify of one lake: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // ... and a store is not a folder of lakes.
        let out = Command::new(env!("CARGO_BIN_EXE_rocklake"))
            .args([
                "serve",
                "--lakes",
                &format!("{url}/sales"),
                "--listen",
                "127.0.0.1:0",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("is a store itself"),
            "{scheme}: --lakes on a store: {err}"
        );

        let server = serve(&url, None);
        rt.block_on(async {
            for (db, want) in [("sales", "sales"), ("audit_2", "audit")] {
                let c = connect(server.addr, db, None).await.unwrap();
                let rows = c.query("SELECT v FROM t", &[]).await.unwrap();
                let got: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
                assert_eq!(got, [want], "{scheme}: {db} after a restart");
                assert_eq!(
                    names(&c).await,
                    ["audit_2", "postgres", "sales"],
                    "{scheme}: after a restart"
                );
            }
        });
        server.stop();
    }
}

/// With a password, a client learns whether a database exists only once it has given the
/// password: a wrong one is refused as such (28P01) whatever database it names.
#[test]
fn an_unknown_database_is_refused_only_after_the_password() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let scheme = engines()[0];
    let url = format!("{scheme}://{}/lakes", dir.path().display());
    let server = serve(&url, Some("s3cret"));
    rt.block_on(async {
        for db in ["nowhere", "postgres"] {
            let (code, _) = refusal(connect(server.addr, db, Some("wrong")).await);
            assert_eq!(code, "28P01", "a wrong password naming {db}");
        }
        let (code, message) = refusal(connect(server.addr, "nowhere", Some("s3cret")).await);
        assert_eq!(
            (code.as_str(), message.as_str()),
            ("3D000", "database \"nowhere\" does not exist")
        );
        let c = connect(server.addr, "postgres", Some("s3cret"))
            .await
            .unwrap();
        assert_eq!(names(&c).await, ["postgres"]);
    });
    let metrics = scrape(server.metrics);
    assert!(
        metrics.contains("rocklake_connections_refused_total{reason=\"unknown_database\"} 1"),
        "one refusal of an unknown database counted:\n{metrics}"
    );
    server.stop();
}
