//! `rocklake sql`: statements as an argument and on standard input, results as tables, errors
//! with their SQLSTATE and a failing exit code, a read-only mode that refuses writes.

use std::io::Write;
use std::process::{Command, Stdio};

fn rocklake(args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rocklake"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    } else {
        drop(child.stdin.take());
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn sql_runs_statements_prints_tables_and_reports_errors() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/lake", dir.path().display());
    let (code, out, err) = rocklake(
        &["sql", &url, "CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR); INSERT INTO t VALUES (1, 'a'), (2, 'b')"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("CREATE TABLE") && out.contains("INSERT 0 2"),
        "{out}"
    );

    let (code, out, _) = rocklake(&["sql", &url, "SELECT id, name FROM t ORDER BY id"], None);
    assert_eq!(code, 0);
    assert!(
        out.contains("| 1  | a    |") && out.contains("(2 rows)"),
        "{out}"
    );

    let (code, _, err) = rocklake(&["sql", &url, "INSERT INTO t VALUES (1, 'x')"], None);
    assert_eq!(code, 1);
    assert!(
        err.contains("duplicate key value violates unique constraint \"t_pkey\"")
            && err.contains("23505"),
        "{err}"
    );
    assert!(err.contains("Key (id)=(1) already exists."), "{err}");

    // Statements on standard input, each ending at a `;` that ends a line.
    let (code, out, _) = rocklake(
        &["sql", &url],
        Some("SELECT count(*) AS n\n  FROM t;\nSELECT name FROM t WHERE id = 2;\n"),
    );
    assert_eq!(code, 0);
    assert!(out.contains("| 2 |") && out.contains("| b    |"), "{out}");

    let (code, out, _) = rocklake(
        &[
            "--json",
            "sql",
            "--read-only",
            &url,
            "SELECT name FROM t ORDER BY id",
        ],
        None,
    );
    assert_eq!(code, 0);
    assert!(out.contains(r#""rows":[["a"],["b"]]"#), "{out}");

    let (code, _, err) = rocklake(&["sql", "--read-only", &url, "DELETE FROM t"], None);
    assert_eq!(code, 1);
    assert!(err.contains("25006"), "{err}");
    let (_, out, _) = rocklake(&["sql", &url, "SELECT count(*) AS n FROM t"], None);
    assert!(
        out.contains("| 2 |"),
        "the refused DELETE changed nothing: {out}"
    );
}
