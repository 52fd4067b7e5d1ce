//! `rocklake serve` under sockets that never log in and more clients than it admits: the
//! server process itself, with its own descriptor limit, and clients speaking the protocol by
//! hand (blocking sockets; nothing here needs a driver).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `rocklake serve` child on a fresh folder (SlateDB, the default build's engine), killed on drop.
struct Served {
    child: Child,
    addr: SocketAddr,
    /// The store it serves.
    url: String,
    /// Kept open: the server prints more lines, and a closed pipe would end it.
    _stdout: BufReader<std::process::ChildStdout>,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `rocklake serve` with `args`, its open-file limit set to `nofile` by the shell
/// that execs it, and read the address it listens on from its first line.
fn serve(nofile: u32, args: &[&str]) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("catalog").display());
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n {nofile} && exec \"$0\" serve --listen 127.0.0.1:0 \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_rocklake"))
        .arg(&url)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    // "rocklake serve: sled:///... on 127.0.0.1:PORT"
    let addr = first
        .trim()
        .rsplit(" on ")
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {first:?}"));
    Served {
        child,
        addr,
        url,
        _stdout: stdout,
        _dir: dir,
    }
}

/// Read one backend message: its type and body.
fn message(s: &mut TcpStream) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head)?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let mut body = vec![0u8; len - 4];
    s.read_exact(&mut body)?;
    Ok((head[0], body))
}

/// An ErrorResponse's SQLSTATE and message.
fn error_fields(body: &[u8]) -> (String, String) {
    let (mut code, mut text) = (String::new(), String::new());
    for field in body.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        let value = String::from_utf8_lossy(&field[1..]).into_owned();
        match field[0] {
            b'C' => code = value,
            b'M' => text = value,
            _ => {}
        }
    }
    (code, text)
}

/// Log in (trust) and run `SELECT 1`: the open connection, or the error the server sent.
fn login(addr: SocketAddr) -> Result<TcpStream, (String, String)> {
    let mut s = TcpStream::connect(addr).map_err(|e| ("connect".into(), e.to_string()))?;
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut body = 196_608u32.to_be_bytes().to_vec();
    body.extend_from_slice(b"user\0duck\0database\0lake\0\0");
    let mut packet = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    packet.extend_from_slice(&body);
    s.write_all(&packet).unwrap();
    let mut sent_query = false;
    loop {
        let (kind, body) = message(&mut s).map_err(|e| ("read".into(), e.to_string()))?;
        match kind {
            b'E' => return Err(error_fields(&body)),
            b'Z' if sent_query => return Ok(s),
            b'Z' => {
                s.write_all(b"Q\0\0\0\x0dSELECT 1\0").unwrap();
                sent_query = true;
            }
            _ => {}
        }
    }
}

/// Run one simple query on a logged-in session: how many rows it sent (DataRow and CopyData
/// messages), or the error the server sent.
fn query(s: &mut TcpStream, sql: &str) -> Result<usize, (String, String)> {
    let mut packet = vec![b'Q'];
    packet.extend_from_slice(&((sql.len() + 5) as u32).to_be_bytes());
    packet.extend_from_slice(sql.as_bytes());
    packet.push(0);
    s.write_all(&packet).unwrap();
    let (mut error, mut rows) = (None, 0);
    loop {
        let (kind, body) = message(s).map_err(|e| ("read".into(), e.to_string()))?;
        match kind {
            b'E' => error = Some(error_fields(&body)),
            b'D' | b'd' => rows += 1,
            b'Z' => return error.map_or(Ok(rows), Err),
            _ => {}
        }
    }
}

/// Run `sql` with one text parameter through the extended protocol (Parse, Bind, Execute to
/// the end, Sync): how many DataRows came, or the error the server sent.
fn extended_query(s: &mut TcpStream, sql: &str, param: &str) -> Result<usize, (String, String)> {
    let mut parse = vec![0];
    parse.extend_from_slice(sql.as_bytes());
    parse.extend_from_slice(&[0, 0, 0]);
    let mut bind = vec![0, 0, 0, 0, 0, 1];
    bind.extend_from_slice(&(param.len() as u32).to_be_bytes());
    bind.extend_from_slice(param.as_bytes());
    bind.extend_from_slice(&[0, 0]);
    send(s, b'P', &parse);
    send(s, b'B', &bind);
    send(s, b'E', &[0, 0, 0, 0, 0]);
    send(s, b'S', b"");
    let (mut error, mut rows) = (None, 0);
    loop {
        let (kind, body) = message(s).map_err(|e| ("read".into(), e.to_string()))?;
        match kind {
            b'E' => error = Some(error_fields(&body)),
            b'D' => rows += 1,
            b'Z' => return error.map_or(Ok(rows), Err),
            _ => {}
        }
    }
}

/// The peak resident memory of process `pid` so far, in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {status}"))
}

/// Whether the server has closed `s` (EOF or reset), waiting at most `wait`.
fn closed_by_server(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
}

/// 300 sockets that connect and send nothing, against a server allowed 256 descriptors: a
/// real client still logs in while they are held (before their authentication timeout could
/// have made room), and every silent socket is closed by that timeout or sooner.
#[test]
fn silent_sockets_neither_lock_clients_out_nor_stay_open() {
    let timeout = Duration::from_secs(10);
    let server = serve(256, &["--authentication-timeout", "10"]);
    let held_since = Instant::now();
    let mut silent: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    let client = login(server.addr).expect("a real client logs in beside 300 silent sockets");
    let waited = held_since.elapsed();
    let open = silent
        .iter_mut()
        .map(|s| closed_by_server(s, Duration::from_millis(1)))
        .filter(|closed| !closed)
        .count();
    println!("logged in after {waited:?} with {open} of 300 silent sockets still open");
    // Not a speed check: a login that had to wait for the silent sockets to time out would
    // come after the timeout, however fast the machine.
    assert!(
        waited < timeout,
        "the login waited {waited:?}, past the silent sockets' {timeout:?} timeout"
    );
    for (i, s) in silent.iter_mut().enumerate() {
        assert!(
            closed_by_server(s, Duration::from_secs(60)),
            "silent socket {i} still open a minute after the authentication timeout"
        );
    }
    drop(client);
    // The server is still serving.
    login(server.addr).expect("a login after the silent sockets are gone");
}

/// `--max-connections 2`: the third session is refused as PostgreSQL refuses it, and a
/// place freed by a disconnection is taken by the next client.
#[test]
fn sessions_past_max_connections_are_refused_with_53300() {
    let server = serve(1024, &["--max-connections", "2"]);
    let mut a = login(server.addr).expect("first session");
    let _b = login(server.addr).expect("second session");
    let refused = login(server.addr).expect_err("a third session is refused");
    assert_eq!(
        refused,
        (
            "53300".to_string(),
            "sorry, too many clients already".to_string()
        )
    );
    a.write_all(b"X\0\0\0\x04").unwrap();
    assert!(closed_by_server(&mut a, Duration::from_secs(30)));
    // The freed place is given back when the session's task ends, just after the close.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match login(server.addr) {
            Ok(_) => break,
            Err(e) if e.0 == "53300" && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("no session after a disconnection: {e:?}"),
        }
    }
}

/// An empty password file would mean the password "" and lift the loopback-only rule.
#[test]
fn an_empty_password_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("password");
    std::fs::write(&file, "\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rocklake"))
        .args([
            "serve",
            &format!("file://{}", dir.path().join("c").display()),
        ])
        .args(["--listen", "0.0.0.0:0", "--password-file"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "served with an empty password");
    assert!(err.contains("is empty"), "{err}");
    assert!(
        !dir.path().join("c").exists(),
        "the store was created before the refusal"
    );
}

/// `rocklake` run to its end: success, stdout, stderr.
fn rocklake(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rocklake"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A command that opens the store a running server writes (SlateDB, which would fence the
/// server) is refused, naming the server; the server keeps committing. `--takeover` opens it
/// anyway and the server is fenced; a server killed with SIGKILL leaves no lock behind.
#[test]
fn a_writer_command_beside_a_running_server_is_refused_unless_it_takes_over() {
    let server = serve(1024, &[]);
    let mut session = login(server.addr).expect("a session");
    query(
        &mut session,
        "CREATE TABLE t (id BIGINT); INSERT INTO t VALUES (1)",
    )
    .unwrap();

    let (ok, _, err) = rocklake(&["sql", &server.url, "INSERT INTO t VALUES (2)"]);
    assert!(!ok, "a second writer opened the store a server holds");
    for part in [
        format!("pid {}", server.child.id()),
        "rocklake serve".to_string(),
        "--takeover".to_string(),
    ] {
        assert!(err.contains(&part), "the refusal names {part:?}: {err}");
    }
    let (ok, _, err) = rocklake(&["info", &server.url]);
    assert!(!ok && err.contains("--takeover"), "info opened it: {err}");
    // The server was not fenced: its session still commits.
    query(&mut session, "INSERT INTO t VALUES (3)").expect("the server still commits");

    let (ok, out, err) = rocklake(&[
        "--takeover",
        "sql",
        &server.url,
        "INSERT INTO t VALUES (4); SELECT count(*) FROM t",
    ]);
    assert!(ok, "--takeover: {err}");
    assert!(out.contains('3'), "rows 1, 3 and 4: {out}");
    let (code, text) = query(&mut session, "INSERT INTO t VALUES (5)")
        .expect_err("the server was taken over and is fenced");
    assert!(text.contains("fenced"), "{code} {text}");

    let mut other = serve(1024, &[]);
    let url = other.url.clone();
    other.child.kill().unwrap();
    other.child.wait().unwrap();
    let (ok, out, err) = rocklake(&["sql", &url, "SELECT 42"]);
    assert!(ok, "the record of a killed server locked its store: {err}");
    assert!(out.contains("42"), "{out}");
    drop(server);
}

/// `--max-memory 16MB`: a result of 200 MB (two million rows of 100 bytes) streams through
/// it, as a SELECT and as a COPY TO, and the server's peak memory grows by far less than the
/// result (it was gathered whole before, and failed with 53200 under this bound).
#[test]
fn a_result_past_max_memory_streams_through_it() {
    let server = serve(1024, &["--max-memory", "16MB"]);
    let mut s = login(server.addr).expect("a session");
    let before = peak_rss_kib(server.child.id());
    for (sql, what) in [
        (
            "SELECT repeat('x', 100) FROM generate_series(1, 2000000)",
            "SELECT",
        ),
        (
            "COPY (SELECT repeat('x', 100), value FROM generate_series(1, 2000000)) TO STDOUT",
            "COPY TO",
        ),
        (
            "COPY (SELECT repeat('x', 100), value FROM generate_series(1, 2000000)) \
             TO STDOUT (FORMAT binary)",
            "binary COPY TO",
        ),
    ] {
        let rows = query(&mut s, sql).unwrap_or_else(|e| panic!("{what}: {e:?}"));
        // The binary COPY's trailer is a CopyData of its own.
        let trailer = usize::from(what == "binary COPY TO");
        assert_eq!(rows, 2_000_000 + trailer, "{what}");
    }
    // Through the extended protocol (Parse, Bind, Execute), as tokio-postgres and psycopg
    // send a query: pgwire's own Execute read a portal's rows whole before sending one.
    let rows = extended_query(
        &mut s,
        "SELECT repeat('x', 100) FROM generate_series(1, $1::bigint)",
        "2000000",
    )
    .unwrap_or_else(|e| panic!("the extended protocol's SELECT: {e:?}"));
    assert_eq!(rows, 2_000_000, "the extended protocol's SELECT");
    let grown = peak_rss_kib(server.child.id()).saturating_sub(before);
    eprintln!("peak RSS grew by {grown} KiB while 4 results of 200 MB each were sent");
    assert!(
        grown < 96 << 10,
        "the server's peak memory grew by {grown} KiB: a result was held whole"
    );
}

/// `--max-memory 16MB`: a statement that needs more than that (one aggregate of 100 MB)
/// fails with 53200 and the session goes on; a size the flag cannot read is refused before
/// anything is opened.
#[test]
fn a_statement_past_max_memory_fails_with_53200() {
    let server = serve(1024, &["--max-memory", "16MB"]);
    let mut s = login(server.addr).expect("a session");
    let (code, message) = query(
        &mut s,
        "SELECT length(string_agg(repeat('x', 100), ',')) FROM generate_series(1, 1000000)",
    )
    .expect_err("an aggregate of 100 MB under a 16 MB bound");
    assert_eq!(
        (code.as_str(), message.as_str()),
        ("53200", "out of memory")
    );
    query(&mut s, "SELECT 1").expect("the session goes on");

    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("c").display());
    for (bad, says) in [
        ("12XB", "invalid memory unit"),
        ("lots", "invalid memory size"),
        ("100kB", "below the minimum"),
    ] {
        let (ok, _, err) = rocklake(&["serve", &url, "--max-memory", bad]);
        assert!(!ok, "served with --max-memory {bad}");
        assert!(err.contains(says), "--max-memory {bad}: {err}");
    }
    assert!(
        !dir.path().join("c").exists(),
        "the store was created before the refusal"
    );
}

/// `--max-memory 16MB`: a transaction's writes wait in memory until its commit, and they
/// count in the bound. A block of 2 MB inserts fails with 53200 at the one that passes it,
/// the block is aborted and nothing of it lands; the same inserts, each its own transaction,
/// all land. Before the writes were counted, the block held every row it wrote beyond any
/// bound.
#[test]
fn a_transaction_writing_past_max_memory_fails_with_53200() {
    let server = serve(1024, &["--max-memory", "16MB"]);
    let mut s = login(server.addr).expect("a session");
    query(&mut s, "CREATE TABLE t (s text)").expect("a table");
    let insert = "INSERT INTO t SELECT repeat('x', 1000) FROM generate_series(1, 2000)";
    query(&mut s, "BEGIN").expect("a block");
    let failed = (1..=20).find_map(|i| query(&mut s, insert).err().map(|e| (i, e)));
    let (i, (code, message)) = failed.expect("40 MB of writes in one block under a 16 MB bound");
    eprintln!("the block failed at its insert {i} of 2 MB");
    assert_eq!(
        (code.as_str(), message.as_str()),
        ("53200", "out of memory")
    );
    assert!(
        i >= 3,
        "the bound stopped the block after only {i} inserts of 2 MB"
    );
    let aborted = query(&mut s, "SELECT 1").expect_err("the block is aborted");
    assert_eq!(aborted.0, "25P02", "{aborted:?}");
    query(&mut s, "ROLLBACK").expect("the block ends");
    assert_eq!(query(&mut s, "SELECT 1 FROM t"), Ok(0), "nothing landed");
    for _ in 0..20 {
        query(&mut s, insert).expect("2 MB in a transaction of its own");
    }
    assert_eq!(query(&mut s, "SELECT 1 FROM t"), Ok(40_000));
}

/// `--work-mem 16MB` under `--max-memory 64MB`: one statement that needs 30 MB fails with
/// 53200 although the server's bound has room for it (so it cannot starve the other
/// sessions), one of 10 MB runs, and a `--work-mem` above `--max-memory` is refused before
/// the store is opened.
#[test]
fn a_statement_past_work_mem_fails_with_53200() {
    let server = serve(1024, &["--max-memory", "64MB", "--work-mem", "16MB"]);
    let mut s = login(server.addr).expect("a session");
    let aggregate = |rows: u32| {
        format!("SELECT length(string_agg(repeat('x', 100), ',')) FROM generate_series(1, {rows})")
    };
    let (code, message) =
        query(&mut s, &aggregate(300_000)).expect_err("30 MB in one statement under 16 MB");
    assert_eq!(
        (code.as_str(), message.as_str()),
        ("53200", "out of memory")
    );
    let mut other = login(server.addr).expect("another session");
    assert_eq!(query(&mut other, &aggregate(100_000)), Ok(1), "10 MB fits");
    assert_eq!(
        query(&mut s, &aggregate(100_000)),
        Ok(1),
        "the session goes on"
    );

    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("c").display());
    let (ok, _, err) = rocklake(&["serve", &url, "--max-memory", "64MB", "--work-mem", "128MB"]);
    assert!(!ok, "served with --work-mem above --max-memory");
    assert!(
        err.contains("--work-mem 128MB is more than --max-memory 64MB"),
        "{err}"
    );
    assert!(
        !dir.path().join("c").exists(),
        "the store was created before the refusal"
    );
}

/// Send one frontend message.
fn send(s: &mut TcpStream, kind: u8, body: &[u8]) {
    let mut packet = vec![kind];
    packet.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    packet.extend_from_slice(body);
    s.write_all(&packet).unwrap();
}

/// `COPY t FROM STDIN` of `lines` lines of 100 bytes, in CopyData messages of 64 KiB: Ok, or
/// the error the server sent.
fn copy_lines(s: &mut TcpStream, lines: usize) -> Result<(), (String, String)> {
    query_start(s, "COPY t FROM STDIN");
    loop {
        let (kind, body) = message(s).unwrap();
        match kind {
            b'G' => break,
            b'E' => return Err(error_fields(&body)),
            _ => {}
        }
    }
    let line = format!("{}\n", "x".repeat(99));
    let per_message = (64 << 10) / line.len();
    let mut left = lines;
    while left > 0 {
        let n = left.min(per_message);
        send(s, b'd', line.repeat(n).as_bytes());
        left -= n;
    }
    send(s, b'c', b"");
    let mut error = None;
    loop {
        let (kind, body) = message(s).unwrap();
        match kind {
            b'E' => error = Some(error_fields(&body)),
            b'Z' => return error.map_or(Ok(()), Err),
            _ => {}
        }
    }
}

/// Send a simple Query without reading its answer.
fn query_start(s: &mut TcpStream, sql: &str) {
    let mut body = sql.as_bytes().to_vec();
    body.push(0);
    send(s, b'Q', &body);
}

/// `--max-memory 16MB`: a `COPY FROM STDIN` of 64 MB fails with 53200 once the CopyDone
/// comes (its rows, waiting in its transaction, pass the bound), lands nothing, and the
/// server does not hold the 64 MB meanwhile; a COPY of 4 MB lands whole (its rows are read
/// as they come: before, the server held every byte until CopyDone and then the rows decoded
/// from them beside them, and refused it: by psql, the old server took 30,000 lines and
/// refused 35,000), and the session goes on.
#[test]
fn a_copy_from_stdin_past_max_memory_fails_with_53200() {
    let server = serve(1024, &["--max-memory", "16MB"]);
    let mut s = login(server.addr).expect("a session");
    query(&mut s, "CREATE TABLE t (s text)").expect("a table");
    let before = peak_rss_kib(server.child.id());
    let (code, message) = copy_lines(&mut s, 640_000).expect_err("64 MB under a 16 MB bound");
    assert_eq!(
        (code.as_str(), message.as_str()),
        ("53200", "out of memory")
    );
    let grown = peak_rss_kib(server.child.id()).saturating_sub(before);
    eprintln!("peak RSS grew by {grown} KiB while 64 MB of COPY data came");
    assert!(
        grown < 48 << 10,
        "the server's peak memory grew by {grown} KiB: the COPY was held whole"
    );
    assert_eq!(query(&mut s, "SELECT s FROM t"), Ok(0), "nothing landed");
    copy_lines(&mut s, 10_000).expect("1 MB within the bound");
    assert_eq!(query(&mut s, "SELECT s FROM t"), Ok(10_000));
    copy_lines(&mut s, 40_000).expect("4 MB within the bound");
    assert_eq!(query(&mut s, "SELECT s FROM t"), Ok(50_000));
}
