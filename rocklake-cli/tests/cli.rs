//! The `rocklake` command from a shell, on each compiled engine: init, named and issued inserts,
//! describe, inspect, delete/purge refusals, verify.

use std::process::Command;

fn rocklake(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rocklake"))
        .args(args)
        .output()
        .expect("run rocklake");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(args: &[&str]) -> String {
    let (success, out, err) = rocklake(args);
    assert!(success, "rocklake {args:?} failed: {err}");
    out
}

fn keystone_walkthrough(url: &str) {
    ok(&["init", url]);
    assert!(ok(&[
        "insert",
        url,
        "--space",
        "table",
        "--id",
        "500",
        "--set",
        "table_name=orders"
    ])
    .contains("INSERTED id=500"));
    assert!(ok(&["insert", url, "--space", "table"]).contains("INSERTED id=501"));
    assert!(ok(&["insert", url, "--space", "table", "--id", "100"]).contains("INSERTED id=100"));
    let d = ok(&["describe", url, "table"]);
    assert!(
        d.contains("next_id=502 ids_issued=501 ids_remaining=281474976710154 budget_used=0.000%"),
        "{d}"
    );
    let (success, _, err) = rocklake(&["insert", url, "--space", "table", "--id", "100"]);
    assert!(!success && err.contains("duplicate key 100"), "{err}");
    let (success, _, err) =
        rocklake(&["insert", url, "--space", "table", "--id", "281474976710656"]);
    assert!(
        !success && err.contains("outside the Keystone id space [1, 281474976710655]"),
        "{err}"
    );
    let (success, _, err) = rocklake(&["insert", url, "--space", "table", "--id", "abc"]);
    assert!(!success && err.contains("not an integer"), "{err}");
    assert!(ok(&["delete", url, "--space", "table", "--id", "100"]).contains("DELETED 1"));
    let (success, _, err) = rocklake(&["insert", url, "--space", "table", "--id", "100"]);
    assert!(!success && err.contains("PURGE frees its key"), "{err}");
    let (success, _, err) = rocklake(&["purge", url, "--space", "table", "--from", "100"]);
    assert!(!success && err.contains("--admin"), "{err}");
    let info = ok(&["info", url, "--json"]);
    let snap: serde_json::Value = serde_json::from_str(info.trim()).unwrap();
    let current = snap["current_snapshot"].as_u64().unwrap().to_string();
    ok(&["retain-from", url, &current]);
    assert!(
        ok(&["purge", url, "--space", "table", "--from", "100", "--admin"]).contains("PURGED 1")
    );
    assert!(ok(&["insert", url, "--space", "table", "--id", "100"]).contains("INSERTED id=100"));
    assert!(ok(&["budget", url]).contains("space=table issued=501"));
    let scan = ok(&["scan", url, "--table", "ducklake_table"]);
    assert!(
        scan.contains("ducklake_table table_id=500 begin_snapshot=")
            && scan.contains("table_name=\"orders\""),
        "{scan}"
    );
    let v = ok(&["verify", url]);
    assert!(v.contains("0 findings, clean"), "{v}");

    // The id column must agree with the key; a literal too long for any integer type is
    // OutOfRange (22003) like any other key outside the space; nothing of either lands.
    let (success, _, err) = rocklake(&[
        "insert",
        url,
        "--space",
        "table",
        "--id",
        "600",
        "--set",
        "table_id=999",
    ]);
    assert!(!success && err.contains("table_id=999"), "{err}");
    let huge = "9".repeat(40);
    let (success, _, err) = rocklake(&["insert", url, "--space", "table", "--id", &huge, "--json"]);
    assert!(!success && err.contains("\"sqlstate\":\"22003\""), "{err}");
    assert!(!ok(&["scan", url, "--table", "ducklake_table"]).contains("table_id=600"));
    // A read below retain-from is refused, naming the floor.
    let floor: u64 = current.parse().unwrap();
    assert!(floor > 1, "the walkthrough committed several snapshots");
    {
        let (success, _, err) = rocklake(&[
            "scan",
            url,
            "--table",
            "ducklake_table",
            "--at",
            &(floor - 1).to_string(),
        ]);
        assert!(
            !success && err.contains(&format!("below retain-from {floor}")),
            "{err}"
        );
    }
}

#[test]
fn inspect_decodes_the_hex_dump_guide() {
    let out = ok(&[
        "inspect",
        "05 00 00 00 00 00 00 00 2A 00 00 00 00 00 00 00 C8",
        "FE6E6578742D736E617073686F742D6964",
    ]);
    assert!(
        out.contains("ducklake_table table_id=42 begin_snapshot=200"),
        "{out}"
    );
    assert!(out.contains("counter \"next-snapshot-id\""), "{out}");
    let (success, out, _) = rocklake(&["inspect", "05 00 00"]);
    assert!(!success && out.contains("truncated"), "{out}");
}

#[test]
fn unknown_scheme_and_missing_engine_are_clear_errors() {
    let (success, _, err) = rocklake(&["info", "postgres://x"]);
    assert!(
        !success && err.contains("unknown scheme postgres://"),
        "{err}"
    );
    #[cfg(not(feature = "rocksdb"))]
    {
        let (success, _, err) = rocklake(&["info", "rocksdb:///tmp/x"]);
        assert!(!success && err.contains("--features rocksdb"), "{err}");
    }
}

#[cfg(feature = "slatedb")]
#[test]
fn keystone_from_a_shell_on_slatedb_folder() {
    let dir = tempfile::tempdir().unwrap();
    keystone_walkthrough(&format!("file://{}", dir.path().display()));
}

#[cfg(feature = "rocksdb")]
#[test]
fn keystone_from_a_shell_on_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    keystone_walkthrough(&format!("rocksdb://{}", dir.path().display()));
}

#[cfg(feature = "sled")]
#[test]
fn keystone_from_a_shell_on_sled() {
    let dir = tempfile::tempdir().unwrap();
    keystone_walkthrough(&format!("sled://{}", dir.path().display()));
}

/// A command that only reads refuses a folder that does not exist, and creates nothing there
/// (it used to create an empty store and report "verified 0 keys: clean" on it).
#[test]
fn reading_commands_refuse_a_store_that_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-store");
    let mut urls = vec![format!("file://{}", missing.display())];
    if cfg!(feature = "sled") {
        urls.push(format!("sled://{}", missing.display()));
    }
    for url in &urls {
        for args in [
            vec!["verify", url.as_str()],
            vec!["info", url.as_str()],
            vec!["scan", url.as_str(), "--table", "ducklake_table"],
            vec!["describe", url.as_str()],
            vec!["sql", url.as_str(), "SELECT 1", "--read-only"],
            vec!["restore", url.as_str(), "model://"],
        ] {
            let (success, _, err) = rocklake(&args);
            assert!(
                !success && err.contains("does not exist") && err.contains("no-such-store"),
                "{args:?}: {err}"
            );
            assert!(!missing.exists(), "{args:?} created {}", missing.display());
        }
    }
}

#[test]
fn verify_of_an_empty_store_is_clean() {
    // Corruption and exit 2: tests/verify.rs.
    let out = ok(&["verify", "model://"]);
    assert!(out.contains("verified 0 keys"), "{out}");
}

/// Whether the power-cut check's file system can be mounted here.
#[cfg(feature = "slatedb")]
fn fuse_here() -> bool {
    #[cfg(target_os = "linux")]
    {
        conformance::cutfs::available().is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(feature = "slatedb")]
#[test]
fn conformance_command_qualifies_memory_and_a_folder_and_refuses_data() {
    // Every check passes on a folder; in memory, the five that need a store a second process
    // or a reopen can reach do not apply. On a folder the power cut needs FUSE: where this
    // process cannot open /dev/fuse (not root) it does not apply either, but CI must run it.
    let checks = conformance::checks::ALL.len();
    let out = ok(&["conformance", "memory://"]);
    assert!(
        out.contains("| ordering |")
            && out.contains(&format!(
                "conformance: {} passed, 0 failed (5 not applicable)",
                checks - 5
            )),
        "{out}"
    );
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let out = ok(&["conformance", &url, "--crash-rounds", "3"]);
    let no_fuse = std::env::var_os("CI").is_none() && !fuse_here();
    let (passed, na) = if no_fuse {
        (checks - 1, 1)
    } else {
        (checks, 0)
    };
    assert!(
        out.contains(&format!(
            "conformance: {passed} passed, 0 failed ({na} not applicable)"
        )),
        "{out}"
    );
    // A store that holds data is refused unless --clear is given.
    let used = tempfile::tempdir().unwrap();
    let used = format!("file://{}", used.path().display());
    ok(&["init", &used]);
    let (success, _, err) = rocklake(&["conformance", &used]);
    assert!(!success && err.contains("--clear"), "{err}");
}

/// The main job (no subcommand): a server on the embedded default that prints the line to
/// paste into DuckDB, and stops cleanly on SIGTERM.
#[test]
fn main_job_serves_a_local_catalog_and_prints_the_attach_line() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rocklake"))
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut attach = None;
    for line in lines.by_ref().take(10) {
        let line = line.unwrap();
        if line.trim_start().starts_with("ATTACH") {
            attach = Some(line);
            break;
        }
    }
    let attach = attach.expect("an ATTACH line");
    let data = dir.path().join("rocklake-lake").join("data");
    assert!(
        attach.contains("ATTACH 'ducklake:postgres:host=127.0.0.1 port=5433 dbname=lake"),
        "{attach}"
    );
    assert!(
        attach.contains(&format!("DATA_PATH '{}/'", data.display())),
        "{attach}"
    );
    assert!(dir.path().join("rocklake-lake").join("catalog").is_dir());
    let stream = std::net::TcpStream::connect("127.0.0.1:5433").expect("listening");
    drop(stream);
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "stopped cleanly on SIGTERM: {status:?}");
}

/// `bench --profile` (the fixed workload profilers count instructions over) runs the `sql`
/// group's operation on the model engine, or on a new store at `--profile-url`, and prints
/// the session's phases; a wrong operation or count is refused by name.
#[test]
fn bench_profile_runs_one_sql_operation_a_fixed_number_of_times() {
    for op in ["commit", "point"] {
        let out = ok(&["bench", "--profile", op, "--operations", "2"]);
        assert!(
            out.contains("2 × ") && out.contains("on the model engine"),
            "{out}"
        );
        assert!(out.contains("parse ") && out.contains("commit "), "{out}");
    }
    // On a real engine: a new store at --profile-url.
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/profiled", dir.path().display());
    let out = ok(&[
        "bench",
        "--profile",
        "scan",
        "--operations",
        "2",
        "--profile-url",
        &url,
    ]);
    assert!(out.contains("2 × Scan on file://"), "{out}");
    assert!(out.contains("storage "), "{out}");
    let (success, _, err) = rocklake(&["bench", "--profile", "sideways"]);
    assert!(
        !success && err.contains("expected commit, read, point or scan"),
        "{err}"
    );
    let (success, _, err) = rocklake(&["bench", "--profile-url", &url]);
    assert!(!success && err.contains("--profile"), "{err}");
    let (success, _, err) = rocklake(&["bench", "--profile", "read", "--operations", "0"]);
    assert!(!success && err.contains("--operations"), "{err}");
    let (success, _, err) = rocklake(&["bench", "--profile", "read", "--quick"]);
    assert!(!success && err.contains("cannot be used with"), "{err}");
}

/// `bench --store-url` adds a subject on the stores a URL names: each workload group gets a
/// new store under it, the URL's options kept (here SlateDB's simulated latency, so the group
/// commit of one committer waits at least that long); a word that is no URL is refused.
#[test]
fn bench_runs_on_stores_a_url_names() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/b?simulate_latency_ms=25", dir.path().display());
    let out = ok(&[
        "--json",
        "bench",
        "--quick",
        "--engines",
        "model",
        "--groups",
        "group-commit",
        "--store-url",
        &url,
        "--store-url",
        &url,
    ]);
    let report: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON document");
    let rows = report["rows"].as_array().unwrap();
    let ours: Vec<&serde_json::Value> = rows.iter().filter(|r| r["engine"] == url).collect();
    assert!(!ours.is_empty(), "no row of {url}: {out}");
    let model = rows.iter().filter(|r| r["engine"] == "model").count();
    // The same URL twice: two subjects, each on stores of its own.
    assert_eq!(ours.len(), 2 * model, "{out}");
    for r in &ours {
        let median = r["median_ns"].as_f64().unwrap();
        assert!(median >= 25e6, "a durable commit 25 ms from its store: {r}");
    }
    // New stores in a folder of each subject's own, under the URL's path.
    let runs: Vec<_> = std::fs::read_dir(dir.path().join("b")).unwrap().collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let (success, _, err) = rocklake(&["bench", "--store-url", "nowhere"]);
    assert!(!success && err.contains("not a store URL"), "{err}");
}

/// A command's combined output under a real pseudo-terminal (`script`); `None` where the
/// machine has no `script` (CI must have it).
fn on_a_terminal(args: &[&str]) -> Option<String> {
    let line = std::iter::once(env!("CARGO_BIN_EXE_rocklake"))
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ");
    let out = match Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .output()
    {
        Ok(out) => out,
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("no `script` here ({e}): the terminal half of the progress check is skipped");
            return None;
        }
        Err(e) => panic!("`script` (util-linux) is needed for the progress check: {e}"),
    };
    assert!(
        out.status.success(),
        "{args:?} under script failed: {out:?}"
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Long commands draw their progress on a terminal, and write nothing but their result when
/// standard error is piped or they are given `--json` (#23 item 6). indicatif clears the line
/// it draws with `ESC [2K`; nothing else the commands print does.
#[test]
#[cfg(feature = "slatedb")]
fn progress_is_drawn_on_a_terminal_and_nowhere_else() {
    const DRAWN: &str = "\x1b[2K";
    let dir = tempfile::tempdir().unwrap();
    let src = format!("file://{}", dir.path().join("src").display());
    ok(&["init", &src]);
    ok(&[
        "sql",
        &src,
        "CREATE TABLE t (a bigint); INSERT INTO t SELECT value FROM generate_series(1, 20000)",
    ]);
    let to = |name: &str| format!("file://{}", dir.path().join(name).display());

    // Piped: the result on stdout, nothing on stderr.
    for args in [
        vec!["backup", src.as_str(), &to("piped")],
        vec!["verify", src.as_str()],
        vec!["gc", src.as_str()],
    ] {
        let (success, out, err) = rocklake(&args);
        assert!(success, "{args:?}: {err}");
        assert!(!out.is_empty(), "{args:?} printed no result");
        assert_eq!(err, "", "{args:?} wrote to a piped stderr");
    }

    // On a terminal: drawn, then the result; with --json only the result.
    let Some(shown) = on_a_terminal(&["backup", &src, &to("terminal")]) else {
        return;
    };
    assert!(
        shown.contains(DRAWN) && shown.contains("backup: ") && shown.contains(" pairs, "),
        "no progress drawn on a terminal: {shown:?}"
    );
    assert!(shown.contains("copied into"), "{shown:?}");
    let shown = on_a_terminal(&["verify", &src]).unwrap();
    assert!(
        shown.contains(DRAWN) && shown.contains("verify: "),
        "{shown:?}"
    );
    for args in [
        vec!["--json", "backup", src.as_str(), &to("json")],
        vec!["--json", "verify", src.as_str()],
    ] {
        let shown = on_a_terminal(&args).unwrap();
        assert!(!shown.contains(DRAWN), "{args:?} drew progress: {shown:?}");
        assert!(shown.trim_start().starts_with('{'), "{args:?}: {shown:?}");
    }
}
