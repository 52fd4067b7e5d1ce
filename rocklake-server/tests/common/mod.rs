//! A server on a real engine in a temporary folder, a raw protocol client that shows every
//! backend message, and the live PostgreSQL 15 the comparisons run against.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rocklake_server::{Server, ServerOptions};
use rocklake_sql::Database;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_postgres::{Client, NoTls};

/// A running server; dropping it stops the server.
pub struct Running {
    pub addr: SocketAddr,
    pub db: Arc<Database>,
    pub metrics: Arc<rocklake_server::Metrics>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _dir: Option<tempfile::TempDir>,
}

impl Running {
    /// Stop accepting, wait for the server to finish.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap().unwrap();
        }
    }

    /// libpq-style connection string for it.
    pub fn url(&self, extra: &str) -> String {
        format!(
            "host={} port={} user=duck dbname=lake {extra}",
            self.addr.ip(),
            self.addr.port()
        )
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// The engines the tests run on: SlateDB on a local folder and sled (RocksDB with the
/// feature).
pub fn engines() -> Vec<&'static str> {
    let mut v = vec!["file", "sled"];
    if cfg!(feature = "rocksdb") {
        v.push("rocksdb");
    }
    v
}

/// Open `engine` in a fresh folder (or `url` when given) and serve it on a free loopback port.
pub async fn serve(engine: &str, options: ServerOptions) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{engine}://{}", dir.path().display());
    let mut r = serve_url(&url, options).await;
    r._dir = Some(dir);
    r
}

/// Serve the store at `url` on a free loopback port.
pub async fn serve_url(url: &str, options: ServerOptions) -> Running {
    serve_backend(rocklake::open(url).await.unwrap(), options).await
}

/// Serve an opened store on a free loopback port.
pub async fn serve_backend(
    backend: std::sync::Arc<dyn rocklake::KvBackend>,
    mut options: ServerOptions,
) -> Running {
    let ks = rocklake_core::Keyspace::open(backend).await.unwrap();
    let db = Database::open(ks).await.unwrap();
    if options.listen.port() == 5433 {
        options.listen = "127.0.0.1:0".parse().unwrap();
    }
    let server = Server::bind(db.clone(), options).await.unwrap();
    let addr = server.local_addr();
    let metrics = server.metrics();
    let (tx, rx) = oneshot::channel();
    let task = tokio::spawn(server.run(async {
        let _ = rx.await;
    }));
    Running {
        addr,
        db,
        metrics,
        stop: Some(tx),
        task: Some(task),
        _dir: None,
    }
}

/// A tokio-postgres connection, its driver in the background.
pub async fn connect(url: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// The live PostgreSQL's connection string; `None` (with a NOT RUN line) outside CI.
pub fn pg_url() -> Option<String> {
    match std::env::var("ROCKLAKE_TEST_PG") {
        Ok(u) => Some(u),
        Err(_) if std::env::var_os("CI").is_some() => {
            panic!(
                "CI must provide ROCKLAKE_TEST_PG (PostgreSQL 15 on loopback, see .ci/services.sh)"
            )
        }
        Err(_) => {
            eprintln!("NOT RUN: the PostgreSQL comparison needs ROCKLAKE_TEST_PG");
            None
        }
    }
}

/// A fresh database on the live PostgreSQL, and the connection string to it.
pub async fn pg_fresh_db(base: &str, name: &str) -> String {
    let admin = connect(base).await.unwrap();
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
        .await
        .unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let mut parts: Vec<String> = base
        .split_whitespace()
        .filter(|p| !p.starts_with("dbname="))
        .map(String::from)
        .collect();
    parts.push(format!("dbname={name}"));
    parts.join(" ")
}

/// The host and port of a libpq-style connection string.
pub fn host_port(url: &str) -> SocketAddr {
    let get = |k: &str| {
        url.split_whitespace()
            .find_map(|p| p.strip_prefix(&format!("{k}=")).map(String::from))
    };
    format!(
        "{}:{}",
        get("host").unwrap_or_else(|| "127.0.0.1".into()),
        get("port").unwrap_or_else(|| "5432".into())
    )
    .parse()
    .unwrap()
}

/// One backend message: its type byte and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Msg {
    pub kind: u8,
    pub body: Vec<u8>,
}

impl Msg {
    /// `ReadyForQuery`'s status byte.
    pub fn status(&self) -> Option<char> {
        (self.kind == b'Z').then(|| self.body[0] as char)
    }

    /// An ErrorResponse's field (`C` SQLSTATE, `M` message, `D` detail).
    pub fn field(&self, code: u8) -> Option<String> {
        if self.kind != b'E' {
            return None;
        }
        let mut i = 0;
        while i < self.body.len() && self.body[i] != 0 {
            let c = self.body[i];
            let end = self.body[i + 1..].iter().position(|b| *b == 0)? + i + 1;
            if c == code {
                return Some(String::from_utf8_lossy(&self.body[i + 1..end]).into());
            }
            i = end + 1;
        }
        None
    }
}

/// A raw protocol-3 client: sends frontend messages as bytes, reads backend messages.
pub struct Raw {
    stream: TcpStream,
}

impl Raw {
    /// Connect and start up as `user` on `database` (the server must trust the client);
    /// returns the messages up to the first ReadyForQuery.
    pub async fn connect(addr: SocketAddr, user: &str, database: &str) -> (Raw, Vec<Msg>) {
        Raw::connect_with(addr, &[("user", user), ("database", database)]).await
    }

    /// Connect with these startup parameters (`user` among them); the messages up to the
    /// first ReadyForQuery.
    pub async fn connect_with(addr: SocketAddr, params: &[(&str, &str)]) -> (Raw, Vec<Msg>) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let mut body = Vec::new();
        body.extend_from_slice(&196_608u32.to_be_bytes());
        for (k, v) in params {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut m = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        m.extend_from_slice(&body);
        stream.write_all(&m).await.unwrap();
        let mut raw = Raw { stream };
        let msgs = raw.until_ready().await;
        (raw, msgs)
    }

    /// Send one frontend message.
    pub async fn send(&mut self, kind: u8, body: &[u8]) {
        let mut m = vec![kind];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        self.stream.write_all(&m).await.unwrap();
    }

    /// Send bytes as they are (garbage included).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await
    }

    /// Read one backend message (`None` when the server closed the connection).
    pub async fn read(&mut self) -> Option<Msg> {
        let mut head = [0u8; 5];
        match tokio::time::timeout(Duration::from_secs(30), self.stream.read_exact(&mut head)).await
        {
            Ok(Ok(_)) => {}
            _ => return None,
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; len - 4];
        self.stream.read_exact(&mut body).await.ok()?;
        Some(Msg {
            kind: head[0],
            body,
        })
    }

    /// Run a `COPY ... TO STDOUT` and return its data, the CopyData messages' bodies joined.
    pub async fn copy_out(&mut self, sql: &str) -> Vec<u8> {
        self.query(sql)
            .await
            .into_iter()
            .filter(|m| m.kind == b'd')
            .flat_map(|m| m.body)
            .collect()
    }

    /// Half-close the connection (the client will send nothing more) and read what the
    /// server sends until it closes it: its messages, or why it did not close within `limit`.
    pub async fn finish(&mut self, limit: Duration) -> Result<Vec<Msg>, String> {
        let _ = self.stream.shutdown().await;
        to_end(&mut self.stream, limit).await
    }

    /// Read messages until the server closes the connection.
    pub async fn until_closed(&mut self) -> Vec<Msg> {
        let mut out = Vec::new();
        while let Some(m) = self.read().await {
            out.push(m);
        }
        out
    }

    /// Read messages up to and including the next ReadyForQuery.
    pub async fn until_ready(&mut self) -> Vec<Msg> {
        let mut out = Vec::new();
        while let Some(m) = self.read().await {
            let done = m.kind == b'Z';
            out.push(m);
            if done {
                break;
            }
        }
        out
    }

    /// A simple Query; the messages up to ReadyForQuery.
    pub async fn query(&mut self, sql: &str) -> Vec<Msg> {
        let mut b = sql.as_bytes().to_vec();
        b.push(0);
        self.send(b'Q', &b).await;
        self.until_ready().await
    }

    /// A simple-Query COPY ... FROM STDIN with `data` in one CopyData, then CopyDone; the
    /// messages up to ReadyForQuery.
    pub async fn copy_in(&mut self, sql: &str, data: &[u8]) -> Vec<Msg> {
        self.copy_in_ended_by(sql, data, b'c', b"").await
    }

    /// A simple-Query COPY ... FROM STDIN with `data` in one CopyData, then, where CopyDone
    /// should come, the simple Query `next`; the messages up to ReadyForQuery (or the close).
    pub async fn copy_in_then_query(&mut self, sql: &str, data: &[u8], next: &str) -> Vec<Msg> {
        let mut q = next.as_bytes().to_vec();
        q.push(0);
        self.copy_in_ended_by(sql, data, b'Q', &q).await
    }

    /// COPY `sql` FROM STDIN, `data`, then the message `kind` with `body`.
    async fn copy_in_ended_by(
        &mut self,
        sql: &str,
        data: &[u8],
        kind: u8,
        body: &[u8],
    ) -> Vec<Msg> {
        let mut b = sql.as_bytes().to_vec();
        b.push(0);
        self.send(b'Q', &b).await;
        let mut out = vec![self.read().await.unwrap()];
        if out[0].kind == b'G' {
            self.send(b'd', data).await;
            self.send(kind, body).await;
        }
        out.extend(self.until_ready().await);
        out
    }

    /// `COPY ... FROM STDIN` through the extended protocol as tokio-postgres sends it: Parse,
    /// Bind, Execute and Sync at once; then, once the CopyInResponse came, `chunks` as
    /// CopyData, CopyDone (`end` b'c') or CopyFail (b'f'), and a Sync. The messages up to the
    /// ReadyForQuery that Sync earns (or the first one, if the COPY never began).
    pub async fn copy_in_extended(&mut self, sql: &str, chunks: &[&[u8]], end: u8) -> Vec<Msg> {
        let mut p = vec![0u8];
        p.extend_from_slice(sql.as_bytes());
        p.extend_from_slice(&[0, 0, 0]);
        self.send(b'P', &p).await;
        // Unnamed portal and statement, no parameters, no result formats.
        self.send(b'B', &[0, 0, 0, 0, 0, 0, 0, 0]).await;
        self.send(b'E', b"\0\0\0\0\0").await;
        self.send(b'S', &[]).await;
        let mut out = Vec::new();
        while let Some(m) = self.read().await {
            let kind = m.kind;
            out.push(m);
            if kind == b'Z' {
                return out;
            }
            if kind == b'G' {
                break;
            }
        }
        for c in chunks {
            self.send(b'd', c).await;
        }
        match end {
            b'c' => self.send(b'c', &[]).await,
            _ => self.send(b'f', b"stopped by the client\0").await,
        }
        self.send(b'S', &[]).await;
        out.extend(self.until_ready().await);
        out
    }

    /// Parse (unnamed) + Sync, Describe statement + Sync, as DuckDB sends them.
    pub async fn parse_describe(&mut self, sql: &str) -> Vec<Msg> {
        let mut b = vec![0u8];
        b.extend_from_slice(sql.as_bytes());
        b.push(0);
        b.extend_from_slice(&0u16.to_be_bytes());
        self.send(b'P', &b).await;
        self.send(b'S', &[]).await;
        let mut out = self.until_ready().await;
        self.send(b'D', b"S\0").await;
        self.send(b'S', &[]).await;
        out.extend(self.until_ready().await);
        out
    }
}

/// One bound parameter: its format code (0 text, 1 binary) and value (`None`: NULL).
pub type Param<'a> = (i16, Option<&'a [u8]>);

impl Raw {
    /// The extended protocol as a driver sends it: Parse (unnamed, with declared parameter
    /// type oids, 0 for "infer"), Describe statement, Bind with `params` and `results`
    /// (result format codes), Describe portal, Execute, Sync; the messages up to
    /// ReadyForQuery.
    pub async fn extended(
        &mut self,
        sql: &str,
        types: &[u32],
        params: &[Param<'_>],
        results: &[i16],
    ) -> Vec<Msg> {
        let mut p = vec![0u8];
        p.extend_from_slice(sql.as_bytes());
        p.push(0);
        p.extend_from_slice(&(types.len() as u16).to_be_bytes());
        for t in types {
            p.extend_from_slice(&t.to_be_bytes());
        }
        self.send(b'P', &p).await;
        self.send(b'D', b"S\0").await;
        let mut b = vec![0u8, 0u8];
        b.extend_from_slice(&(params.len() as u16).to_be_bytes());
        for (f, _) in params {
            b.extend_from_slice(&f.to_be_bytes());
        }
        b.extend_from_slice(&(params.len() as u16).to_be_bytes());
        for (_, v) in params {
            match v {
                None => b.extend_from_slice(&(-1i32).to_be_bytes()),
                Some(v) => {
                    b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                    b.extend_from_slice(v);
                }
            }
        }
        b.extend_from_slice(&(results.len() as u16).to_be_bytes());
        for r in results {
            b.extend_from_slice(&r.to_be_bytes());
        }
        self.send(b'B', &b).await;
        self.send(b'D', b"P\0").await;
        self.send(b'E', b"\0\0\0\0\0").await;
        self.send(b'S', &[]).await;
        self.until_ready().await
    }
}

/// The message types of a sequence, as letters (`T D C Z`).
/// Read `stream` until the server closes it (end of stream or reset) and split what came into
/// messages; an error when it stays open past `limit` or ends inside a message.
pub async fn to_end(stream: &mut TcpStream, limit: Duration) -> Result<Vec<Msg>, String> {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 8192];
    let read_all = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
            }
        }
    };
    if tokio::time::timeout(limit, read_all).await.is_err() {
        return Err(format!(
            "the server kept the connection open past {limit:?}"
        ));
    }
    let mut msgs = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        if bytes.len() - at < 5 {
            return Err(format!(
                "the connection ended inside a message: {:?}",
                &bytes[at..]
            ));
        }
        let len = u32::from_be_bytes([bytes[at + 1], bytes[at + 2], bytes[at + 3], bytes[at + 4]])
            as usize;
        if len < 4 || bytes.len() - at - 1 < len {
            return Err(format!(
                "the connection ended inside a message: {:?}",
                &bytes[at..]
            ));
        }
        msgs.push(Msg {
            kind: bytes[at],
            body: bytes[at + 5..at + 1 + len].to_vec(),
        });
        at += 1 + len;
    }
    Ok(msgs)
}

pub fn kinds(msgs: &[Msg]) -> String {
    msgs.iter()
        .map(|m| (m.kind as char).to_string())
        .collect::<Vec<_>>()
        .join(" ")
}
