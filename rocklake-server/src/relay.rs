//! Every frontend message is framed and checked here before pgwire decodes it.
//!
//! pgwire's decoders assume well-formed messages (a Parse or Bind cut short makes them read
//! past the end of the buffer and panic). So a connection's bytes pass through this relay: it
//! answers SSLRequest (`S` and a TLS handshake when TLS is configured, else `N`) and
//! GSSENCRequest (`N`), checks the startup packet and each message's layout against the
//! protocol, and hands pgwire only messages it can decode (over a socket pair). Until the
//! client has logged in, messages are held to PostgreSQL's small pre-authentication sizes and
//! the login to its deadline. A malformed message ends the connection the way PostgreSQL ends
//! it: a FATAL ErrorResponse with SQLSTATE 08P01, then close. Other connections go on.
//!
//! The relay also sees when the session waits for the client (every ReadyForQuery owed has
//! reached it, and nothing has come since), so it is where the idle limits are kept: past
//! `idle_in_transaction_session_timeout` (inside a block) or `idle_session_timeout` (outside)
//! the client gets PostgreSQL's FATAL `25P03` or `57P05` and the connection is closed; the
//! session ends with it, and its open transaction rolls back.

use std::io;

use pgwire::tokio::tokio_rustls;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::watch;

use rocklake_sql::IdleLimits;

/// The largest message accepted once a client has logged in (PostgreSQL's own limit is 1 GiB;
/// catalog traffic is far below this).
const MAX_MESSAGE: usize = 256 << 20;
/// The largest message accepted before authentication: a SASL exchange or a password, as
/// PostgreSQL's `PG_MAX_AUTH_TOKEN_LENGTH`.
const MAX_AUTH_MESSAGE: usize = 65_535;
/// The largest startup packet (PostgreSQL's `MAX_STARTUP_PACKET_LENGTH`).
const MAX_STARTUP: usize = 10_000;
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;
/// A cancel request's length: code, pid and a secret key of 4 (protocol 3.0) to 256 bytes
/// (protocol 3.2).
const CANCEL_LENGTHS: std::ops::RangeInclusive<usize> = 16..=12 + 256;

/// Why a message was refused.
struct Bad(String);

/// TLS for connections whose client asks for it (an SSLRequest); `None` answers `N`.
pub(crate) type Tls = Option<tokio_rustls::TlsAcceptor>;

/// A client's byte stream, plain TCP or TLS over it.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for S {}

/// A connection whose startup packet has been read and checked.
pub(crate) struct Started {
    /// The client's stream, inside TLS if it asked for it.
    pub(crate) stream: Box<dyn Stream>,
    /// The startup packet (or cancel request), length word and body, for pgwire.
    pub(crate) first: Vec<u8>,
    /// A cancel request rather than a session.
    pub(crate) cancel: bool,
    /// Whether it came through TLS.
    pub(crate) encrypted: bool,
}

/// Read `tcp`'s startup: SSL/GSS requests, the TLS handshake when one is asked for and
/// configured, then a startup packet or a cancel request. `None` when the connection ended
/// or was refused (a FATAL 08P01 already sent).
pub(crate) async fn start(mut tcp: TcpStream, tls: &Tls) -> io::Result<Option<Started>> {
    let done = |stream: Box<dyn Stream>, first: Vec<u8>, encrypted: bool| {
        let code = u32::from_be_bytes([first[4], first[5], first[6], first[7]]);
        Some(Started {
            stream,
            first,
            cancel: code == CANCEL_REQUEST,
            encrypted,
        })
    };
    match startup(&mut tcp, tls).await? {
        Start::Plain(first) => Ok(done(Box::new(tcp), first, false)),
        Start::Tls => {
            let Some(acceptor) = tls else { return Ok(None) };
            let mut stream = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::info!(error = %e, "TLS handshake failed");
                    return Ok(None);
                }
            };
            // After the handshake the client starts up again, inside TLS.
            match startup(&mut stream, &None).await? {
                Start::Plain(first) => Ok(done(Box::new(stream), first, true)),
                Start::Tls | Start::Done => Ok(None),
            }
        }
        Start::Done => Ok(None),
    }
}

/// Refuse a started connection with a FATAL error (`code`, `message`) and close it.
pub(crate) async fn refuse(stream: Box<dyn Stream>, code: &str, message: &str) {
    refuse_after(stream, &[], code, message).await
}

/// AuthenticationOk: what a server that trusts the client sends first.
pub(crate) const AUTHENTICATION_OK: &[u8] = &[b'R', 0, 0, 0, 8, 0, 0, 0, 0];

/// Refuse a started connection with `before` (whole messages), then a FATAL error, and close.
pub(crate) async fn refuse_after(
    mut stream: Box<dyn Stream>,
    before: &[u8],
    code: &str,
    message: &str,
) {
    tracing::info!(code, error = %message, "refusing a connection");
    let mut out = before.to_vec();
    out.extend_from_slice(&error_response(code, message));
    let _ = stream.write_all(&out).await;
    let _ = stream.shutdown().await;
}

/// How long a connection has to log in, and whether it has.
pub(crate) struct Login {
    /// When a connection that has not logged in is closed.
    pub(crate) deadline: tokio::time::Instant,
    /// Turns true once the client is authenticated (set by the startup handler).
    pub(crate) done: tokio::sync::watch::Receiver<bool>,
}

/// How a connection's startup went.
enum Start {
    /// A startup packet to pass on (length word and body).
    Plain(Vec<u8>),
    /// The client asked for TLS and was told `S`: the handshake comes next.
    Tls,
    /// Nothing more to relay (refused, closed, or a cancel request already passed on).
    Done,
}

/// Startup: any number of SSL/GSS requests, then a startup packet or a cancel request.
async fn startup<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, tls: &Tls) -> io::Result<Start> {
    loop {
        let mut len = [0u8; 4];
        if s.read_exact(&mut len).await.is_err() {
            return Ok(Start::Done);
        }
        let len = u32::from_be_bytes(len) as usize;
        if !(8..=MAX_STARTUP).contains(&len) {
            fatal(s, &format!("invalid length of startup packet: {len}")).await?;
            return Ok(Start::Done);
        }
        let mut body = vec![0u8; len - 4];
        s.read_exact(&mut body).await?;
        let code = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
        let mut packet = (len as u32).to_be_bytes().to_vec();
        packet.extend_from_slice(&body);
        match code {
            SSL_REQUEST if len == 8 && tls.is_some() => {
                s.write_all(b"S").await?;
                return Ok(Start::Tls);
            }
            SSL_REQUEST | GSSENC_REQUEST if len == 8 => {
                s.write_all(b"N").await?;
            }
            CANCEL_REQUEST if CANCEL_LENGTHS.contains(&len) => return Ok(Start::Plain(packet)),
            c if c >> 16 == 3 => {
                if let Err(Bad(why)) = startup_params(&body[4..]) {
                    fatal(s, &why).await?;
                    return Ok(Start::Done);
                }
                return Ok(Start::Plain(packet));
            }
            c => {
                fatal(
                    s,
                    &format!("unsupported frontend protocol {}.{}", c >> 16, c & 0xffff),
                )
                .await?;
                return Ok(Start::Done);
            }
        }
    }
}

/// Pass `first` (the startup packet) and then every checked message on to pgwire, and its
/// answers back, until either side closes. A connection that has not logged in by
/// `login.deadline` is told so and closed, as PostgreSQL's `authentication_timeout` does.
/// One that keeps the server waiting for its next message longer than `idle` allows is
/// closed as PostgreSQL's `idle_in_transaction_session_timeout` and `idle_session_timeout`
/// close it (see [`Ready`]).
///
/// With `refuse_at_login`, only the password exchange reaches
/// pgwire, and once the client is authenticated the refusal takes the place of whatever
/// follows AuthenticationOk: the connection ends there, as PostgreSQL ends a login to a
/// database that does not exist.
pub(crate) async fn serve(
    stream: Box<dyn Stream>,
    inner: UnixStream,
    password: bool,
    first: Vec<u8>,
    login: Login,
    mut idle: watch::Receiver<IdleLimits>,
    mut refuse_at_login: Option<Refusal>,
) -> io::Result<()> {
    let only_login = refuse_at_login.is_some();
    let (mut inner_read, mut inner_write) = inner.into_split();
    inner_write.write_all(&first).await?;
    let (tcp_read, mut tcp_write) = tokio::io::split(stream);
    // Buffered: a message's header and body (and often the next message) in one read, where
    // reading each exactly cost two system calls per message.
    let mut tcp_read = tokio::io::BufReader::with_capacity(16 << 10, tcp_read);
    let (ready_tx, mut ready) = watch::channel(Ready::default());
    let mut back = tokio::spawn(async move {
        let mut buf = vec![0u8; 16 << 10];
        let mut scan = Scanner::default();
        loop {
            let n = match inner_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // Counted before the client has them, so that what it sends in answer is read
            // knowing them (a CopyInResponse changes what it may send).
            let (mut fatal, mut logged_in) = (None, false);
            scan.feed(&buf[..n], |seen| match seen {
                Seen::Fatal(end) => {
                    fatal.get_or_insert(end);
                }
                // A login that is to be refused: nothing after its AuthenticationOk.
                Seen::AuthenticationOk(end) if refuse_at_login.is_some() && fatal.is_none() => {
                    fatal = Some(end);
                    logged_in = true;
                }
                Seen::AuthenticationOk(_) => {}
                _ if fatal.is_some() => {}
                Seen::Ready(status) => ready_tx.send_modify(|r| {
                    r.count += 1;
                    r.status = status;
                }),
                Seen::CopyIn => ready_tx.send_modify(|r| r.copies += 1),
            });
            // Nothing goes to the client after a FATAL error (pgwire follows a refused
            // password exchange with a ReadyForQuery): the connection ends there.
            if tcp_write
                .write_all(&buf[..fatal.unwrap_or(n)])
                .await
                .is_err()
                || fatal.is_some()
            {
                if let (true, Some(r)) = (logged_in, refuse_at_login.take()) {
                    tracing::info!(code = r.code, error = %r.message, "refusing a connection");
                    (r.counted)();
                    let _ = tcp_write
                        .write_all(&error_response(r.code, &r.message))
                        .await;
                }
                break;
            }
        }
        tcp_write
    });
    let logged_in = login.done.clone();
    // Completes only if the deadline passes before the login does.
    let expired = async move {
        let mut done = login.done;
        let logged_in = async move { done.wait_for(|d| *d).await.is_ok() };
        tokio::select! {
            _ = tokio::time::sleep_until(login.deadline) => {}
            true = logged_in => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(expired);
    let mut passwords = 0usize;
    let mut ended = None;
    // Messages that each earn one ReadyForQuery: the startup packet, each Query and Sync.
    let mut requests = 1u64;
    // CopyDone and CopyFail messages relayed (each ends a COPY FROM STDIN).
    let mut copies_ended = 0u64;
    // CopyInResponses taken into account so far.
    let mut copies_seen = 0u64;
    // Whether the last statement came in an Execute (not a Query), and the Syncs counted
    // since that Execute: a driver sends a Sync right behind the Execute of a COPY FROM
    // STDIN, and the server lets it be (it earns no ReadyForQuery) if the COPY began, which
    // the relay may learn only after relaying the Sync.
    let (mut executed_last, mut syncs_since_execute) = (false, 0u64);
    let mut idle_since = tokio::time::Instant::now();
    let (mut ready_open, mut idle_open) = (true, true);
    let refused = 'relay: loop {
        let limit = if *logged_in.borrow() {
            MAX_MESSAGE
        } else {
            MAX_AUTH_MESSAGE
        };
        let read = read_message(&mut tcp_read, limit);
        tokio::pin!(read);
        let message = loop {
            let waiting = {
                let r = *ready.borrow();
                let limits = *idle.borrow();
                match r.status {
                    _ if r.count < requests => None,
                    b'I' => limits.session.map(|d| (d, IDLE_SESSION)),
                    _ => limits.in_transaction.map(|d| (d, IDLE_IN_TRANSACTION)),
                }
            };
            let idle_timer = async {
                match waiting {
                    Some((d, why)) => {
                        tokio::time::sleep_until(idle_since + d).await;
                        why
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                m = &mut read => break m,
                // pgwire closed its end (a refused login, its own timeout): nothing to relay.
                w = &mut back => {
                    ended = Some(w);
                    break 'relay None;
                }
                () = &mut expired => {
                    break 'relay Some(closing("57014", "canceling authentication due to timeout"));
                }
                r = ready.changed(), if ready_open => {
                    ready_open = r.is_ok();
                    idle_since = tokio::time::Instant::now();
                }
                r = idle.changed(), if idle_open => idle_open = r.is_ok(),
                (code, why) = idle_timer => {
                    break 'relay Some(closing(code, why));
                }
            }
        };
        let (head, body) = match message {
            Ok(Some(m)) => m,
            Ok(None) => break None,
            Err(Bad(why)) => break Some(closing("08P01", &why)),
        };
        let kind = head[0];
        // In COPY FROM STDIN only its own messages may come (Flush and Sync are let be, as
        // PostgreSQL lets them be); anything else, PostgreSQL answers with an error and
        // ends the connection: client and server no longer agree on what comes next.
        let copies = ready.borrow().copies;
        if copies > copies_seen {
            if executed_last {
                requests -= syncs_since_execute;
                syncs_since_execute = 0;
            }
            copies_seen = copies;
        }
        let copying = copies > copies_ended;
        if copying {
            match kind {
                b'd' | b'H' | b'S' => {}
                b'c' | b'f' => copies_ended += 1,
                _ => {
                    let why = format!(
                        "unexpected message type {} during COPY from stdin",
                        shown(kind)
                    );
                    tracing::info!(error = %why, "ending a COPY");
                    let mut bytes = message_response("ERROR", "08P01", &why);
                    bytes.extend(message_response(
                        "FATAL",
                        "08P01",
                        "terminating connection because protocol synchronization was lost",
                    ));
                    break Some(bytes);
                }
            }
        }
        // A login to be refused gets nothing to pgwire but its password exchange.
        if only_login && kind != b'p' {
            break Some(closing(
                "08P01",
                &format!(
                    "expected password response, got message type {}",
                    shown(kind)
                ),
            ));
        }
        let first_password = kind == b'p' && passwords == 0 && password;
        if kind == b'p' {
            passwords += 1;
        }
        if let Err(Bad(why)) = check(kind, &body, first_password) {
            break Some(closing("08P01", &why));
        }
        // One write, so that pgwire wakes once for the whole message.
        let mut whole = Vec::with_capacity(head.len() + body.len());
        whole.extend_from_slice(&head);
        whole.extend_from_slice(&body);
        if inner_write.write_all(&whole).await.is_err() {
            break None;
        }
        match kind {
            b'X' => break None,
            b'Q' => {
                requests += 1;
                executed_last = false;
            }
            b'E' => (executed_last, syncs_since_execute) = (true, 0),
            // A Sync in COPY earns no ReadyForQuery.
            b'S' if !copying => {
                requests += 1;
                syncs_since_execute += 1;
            }
            _ => {}
        }
    };
    // pgwire sees the end of its input, finishes what it was sending, and closes.
    let _ = inner_write.shutdown().await;
    let tcp_write = match ended {
        Some(w) => w.ok(),
        None => back.await.ok(),
    };
    if let Some(mut w) = tcp_write {
        if let Some(last) = refused {
            let _ = w.write_all(&last).await;
        }
        let _ = w.shutdown().await;
    }
    Ok(())
}

/// How a login is refused once the client is authenticated (see [`serve`]).
pub(crate) struct Refusal {
    /// The SQLSTATE.
    pub(crate) code: &'static str,
    pub(crate) message: String,
    /// Called when the refusal is sent (a wrong password ends the login before it).
    pub(crate) counted: Box<dyn FnOnce() + Send>,
}

/// PostgreSQL's answer when `idle_session_timeout` runs out.
const IDLE_SESSION: (&str, &str) = (
    "57P05",
    "terminating connection due to idle-session timeout",
);
/// PostgreSQL's answer when `idle_in_transaction_session_timeout` runs out.
const IDLE_IN_TRANSACTION: (&str, &str) = (
    "25P03",
    "terminating connection due to idle-in-transaction timeout",
);

/// The ReadyForQuery messages the server has sent so far, and the transaction status of
/// the last one.
///
/// The session waits for the client's next message, as PostgreSQL's idle timeouts count it,
/// from the moment the client has a ReadyForQuery for every message that asks for one (the
/// startup packet, each Query, each Sync) until its next message: a client that pipelines a
/// second Query before the first one's answer is not idle in between.
#[derive(Clone, Copy, Debug, Default)]
struct Ready {
    count: u64,
    status: u8,
    /// CopyInResponses sent so far.
    copies: u64,
}

/// A backend message the relay acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// ReadyForQuery, with its transaction status.
    Ready(u8),
    /// CopyInResponse: the client sends COPY data next.
    CopyIn,
    /// The end of a FATAL ErrorResponse: its last byte is just before this offset of the
    /// chunk fed. PostgreSQL sends nothing after a FATAL error and closes the connection.
    Fatal(usize),
    /// The end of an AuthenticationOk (the client is in), as for `Fatal`.
    AuthenticationOk(usize),
}

/// Finds the ReadyForQuery and CopyInResponse messages in the server's byte stream (one message may arrive in
/// pieces, and one read may hold many).
#[derive(Debug, Default)]
struct Scanner {
    head: [u8; 5],
    have: usize,
    /// Bytes of the current message's body still to come.
    left: usize,
    /// The first bytes of the current message's body (an ErrorResponse's severity field).
    start: [u8; 6],
    /// How many body bytes of the current message have been read.
    read: usize,
}

/// How an ErrorResponse of severity FATAL begins (its `S` field first, as pgwire and
/// PostgreSQL write it).
const FATAL_START: &[u8; 6] = b"SFATAL";

impl Scanner {
    /// Read `b`; `seen` for each ReadyForQuery, CopyInResponse and FATAL error in it.
    fn feed(&mut self, chunk: &[u8], mut seen: impl FnMut(Seen)) {
        let mut b = chunk;
        while !b.is_empty() {
            if self.left > 0 {
                // A ReadyForQuery's body is its one status byte.
                if self.head[0] == b'Z' && self.left == 1 {
                    seen(Seen::Ready(b[0]));
                }
                let n = self.left.min(b.len());
                if self.read < self.start.len() {
                    let k = n.min(self.start.len() - self.read);
                    self.start[self.read..self.read + k].copy_from_slice(&b[..k]);
                }
                self.read += n;
                self.left -= n;
                b = &b[n..];
                if self.left == 0 && self.head[0] == b'E' && &self.start == FATAL_START {
                    seen(Seen::Fatal(chunk.len() - b.len()));
                }
                // An authentication request's body is its code; 0 is AuthenticationOk.
                if self.left == 0
                    && self.head[0] == b'R'
                    && self.read == 4
                    && self.start[..4] == [0; 4]
                {
                    seen(Seen::AuthenticationOk(chunk.len() - b.len()));
                }
                continue;
            }
            let n = (5 - self.have).min(b.len());
            self.head[self.have..self.have + n].copy_from_slice(&b[..n]);
            self.have += n;
            b = &b[n..];
            if self.have == 5 {
                self.have = 0;
                let h = &self.head;
                self.left =
                    (u32::from_be_bytes([h[1], h[2], h[3], h[4]]) as usize).saturating_sub(4);
                self.read = 0;
                self.start = [0; 6];
                if h[0] == b'G' {
                    seen(Seen::CopyIn);
                }
            }
        }
    }
}

/// Read one message (type byte, length word, body) of at most `limit` bytes; `None` when
/// the client closed.
async fn read_message<R: AsyncRead + Unpin>(
    r: &mut R,
    limit: usize,
) -> Result<Option<([u8; 5], Vec<u8>)>, Bad> {
    let mut head = [0u8; 5];
    if r.read_exact(&mut head).await.is_err() {
        return Ok(None);
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if !(4..=limit).contains(&len) {
        return Err(Bad(format!(
            "invalid message length {len} (message type {})",
            shown(head[0])
        )));
    }
    let mut body = vec![0u8; len - 4];
    if r.read_exact(&mut body).await.is_err() {
        return Ok(None);
    }
    Ok(Some((head, body)))
}

fn shown(kind: u8) -> String {
    if kind.is_ascii_graphic() {
        format!("'{}'", kind as char)
    } else {
        format!("0x{kind:02x}")
    }
}

async fn fatal<S: AsyncWrite + Unpin>(tcp: &mut S, why: &str) -> io::Result<()> {
    tracing::info!(error = %why, "refusing a connection's startup");
    tcp.write_all(&error_response("08P01", why)).await?;
    tcp.shutdown().await
}

/// A FATAL ErrorResponse with SQLSTATE `code` (08P01: a protocol violation).
pub(crate) fn error_response(code: &str, why: &str) -> Vec<u8> {
    message_response("FATAL", code, why)
}

/// The FATAL ErrorResponse that ends a connection, logged.
fn closing(code: &str, why: &str) -> Vec<u8> {
    tracing::info!(code, error = %why, "closing a connection");
    error_response(code, why)
}

/// An ErrorResponse of `severity` (`ERROR`, `FATAL`) with SQLSTATE `code`.
fn message_response(severity: &str, code: &str, why: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for (code, text) in [
        (b'S', severity),
        (b'V', severity),
        (b'C', code),
        (b'M', why),
    ] {
        body.push(code);
        body.extend_from_slice(text.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut m = vec![b'E'];
    m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(&body);
    m
}

/// The name/value pairs of a checked startup packet (`first`: length word, protocol
/// version, pairs).
fn startup_pairs(first: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(first.get(8..).unwrap_or_default());
    let mut parts = text.split('\0');
    let mut pairs = Vec::new();
    while let (Some(name), Some(value)) = (parts.next(), parts.next()) {
        if name.is_empty() {
            break;
        }
        pairs.push((name.to_string(), value.to_string()));
    }
    pairs
}

/// The settings a checked startup packet asks for (see [`crate::startup::settings`]).
pub(crate) fn startup_settings(first: &[u8]) -> Vec<(String, String)> {
    let pairs = startup_pairs(first);
    crate::startup::settings(pairs.iter().map(|(n, v)| (n.as_str(), v.as_str())))
}

/// The database a checked startup packet names: its `database`, else its `user`, as
/// PostgreSQL defaults it.
pub(crate) fn startup_database(first: &[u8]) -> String {
    let pairs = startup_pairs(first);
    let value = |key: &str| {
        pairs
            .iter()
            .find(|(n, v)| n == key && !v.is_empty())
            .map(|(_, v)| v.clone())
    };
    value("database")
        .or_else(|| value("user"))
        .unwrap_or_default()
}

/// Startup parameters: NUL-terminated name/value pairs, then a final NUL; `user` required.
fn startup_params(b: &[u8]) -> Result<(), Bad> {
    let bad = || Bad("invalid startup packet layout: expected terminator as last byte".into());
    let Some((&0, pairs)) = b.split_last() else {
        return Err(bad());
    };
    if pairs.is_empty() {
        return Err(Bad(
            "no PostgreSQL user name specified in startup packet".into()
        ));
    }
    let Some((&0, pairs)) = pairs.split_last() else {
        return Err(bad());
    };
    let parts: Vec<&[u8]> = pairs.split(|c| *c == 0).collect();
    if !parts.len().is_multiple_of(2) || parts.iter().step_by(2).any(|k| k.is_empty()) {
        return Err(bad());
    }
    if std::str::from_utf8(pairs).is_err() {
        return Err(Bad(
            "invalid byte sequence for encoding \"UTF8\" in startup packet".into(),
        ));
    }
    if !parts.iter().step_by(2).any(|k| *k == b"user") {
        return Err(Bad(
            "no PostgreSQL user name specified in startup packet".into()
        ));
    }
    Ok(())
}

/// A cursor over a message body that refuses to read past its end.
struct Cur<'a> {
    b: &'a [u8],
    kind: u8,
}

impl<'a> Cur<'a> {
    fn bad(&self, what: &str) -> Bad {
        Bad(format!(
            "invalid message format: {what} (message type {})",
            shown(self.kind)
        ))
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Bad> {
        if self.b.len() < n {
            return Err(self.bad(what));
        }
        let (x, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(x)
    }

    fn cstring(&mut self, what: &str) -> Result<&'a [u8], Bad> {
        let end = self
            .b
            .iter()
            .position(|c| *c == 0)
            .ok_or_else(|| self.bad(what))?;
        let s = &self.b[..end];
        if std::str::from_utf8(s).is_err() {
            return Err(Bad(format!(
                "invalid byte sequence for encoding \"UTF8\" in {what} (message type {})",
                shown(self.kind)
            )));
        }
        self.b = &self.b[end + 1..];
        Ok(s)
    }

    fn i16(&mut self, what: &str) -> Result<i16, Bad> {
        let x = self.take(2, what)?;
        Ok(i16::from_be_bytes([x[0], x[1]]))
    }

    fn i32(&mut self, what: &str) -> Result<i32, Bad> {
        let x = self.take(4, what)?;
        Ok(i32::from_be_bytes([x[0], x[1], x[2], x[3]]))
    }

    fn count(&mut self, what: &str) -> Result<usize, Bad> {
        let n = self.i16(what)?;
        usize::try_from(n).map_err(|_| self.bad(what))
    }

    fn end(&self) -> Result<(), Bad> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(self.bad("bytes after the end of the message"))
        }
    }
}

/// Check one frontend message's layout (`first_password`: the SASLInitialResponse of a
/// SCRAM login).
fn check(kind: u8, body: &[u8], first_password: bool) -> Result<(), Bad> {
    let mut c = Cur { b: body, kind };
    match kind {
        b'Q' | b'f' => {
            c.cstring("a query string")?;
        }
        b'P' => {
            c.cstring("a statement name")?;
            c.cstring("a query string")?;
            let n = c.count("a parameter type count")?;
            c.take(4 * n, "parameter types")?;
        }
        b'B' => {
            c.cstring("a portal name")?;
            c.cstring("a statement name")?;
            let n = c.count("a format count")?;
            c.take(2 * n, "parameter formats")?;
            let n = c.count("a parameter count")?;
            for _ in 0..n {
                let len = c.i32("a parameter length")?;
                if len >= 0 {
                    c.take(len as usize, "a parameter value")?;
                } else if len != -1 {
                    return Err(c.bad("a negative parameter length"));
                }
            }
            let n = c.count("a result format count")?;
            c.take(2 * n, "result formats")?;
        }
        b'D' | b'C' => {
            let t = c.take(1, "a target type")?[0];
            if t != b'S' && t != b'P' {
                return Err(c.bad("a target type other than 'S' or 'P'"));
            }
            c.cstring("a name")?;
        }
        b'E' => {
            c.cstring("a portal name")?;
            c.i32("a row limit")?;
        }
        b'S' | b'H' | b'c' | b'X' => {}
        b'd' => return Ok(()),
        b'p' if first_password => {
            c.cstring("a SASL mechanism name")?;
            // -1: no initial response; any other negative length is malformed (pgwire
            // would take it as a huge unsigned one).
            let len = c.i32("a SASL response length")?;
            if len >= 0 {
                c.take(len as usize, "a SASL response")?;
            } else if len != -1 {
                return Err(c.bad("a negative SASL response length"));
            }
        }
        b'p' => return Ok(()),
        other => {
            return Err(Bad(format!(
                "invalid frontend message type {}",
                shown(other)
            )));
        }
    }
    c.end()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Backend messages (type byte, body) as one byte stream.
    /// Feed `stream` to a scanner in pieces of `piece` bytes; the offsets in the whole stream
    /// of what `pick` takes from what it sees.
    fn ends_seen(stream: &[u8], piece: usize, pick: impl Fn(Seen) -> Option<usize>) -> Vec<usize> {
        let mut scan = Scanner::default();
        let (mut at, mut found) = (0, Vec::new());
        for chunk in stream.chunks(piece) {
            scan.feed(chunk, |s| found.extend(pick(s).map(|end| at + end)));
            at += chunk.len();
        }
        found
    }

    fn frames(messages: &[(u8, &[u8])]) -> Vec<u8> {
        let mut stream = Vec::new();
        for (kind, body) in messages {
            stream.push(*kind);
            stream.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
            stream.extend_from_slice(body);
        }
        stream
    }

    #[test]
    fn ready_for_query_and_copy_in_are_found_however_the_stream_is_cut() {
        // CommandComplete, a DataRow holding a 'Z' byte, ReadyForQuery 'T', CopyInResponse,
        // ReadyForQuery 'I'.
        let stream = frames(&[
            (b'C', b"SELECT 1\0"),
            (b'D', b"\0\x01\0\0\0\x01Z"),
            (b'Z', b"T"),
            (b'G', b"\0\0\x01\0\0"),
            (b'Z', b"I"),
        ]);
        for piece in 1..=stream.len() {
            let mut scan = Scanner::default();
            let mut seen = Vec::new();
            for chunk in stream.chunks(piece) {
                scan.feed(chunk, |s| seen.push(s));
            }
            assert_eq!(
                seen,
                [Seen::Ready(b'T'), Seen::CopyIn, Seen::Ready(b'I')],
                "pieces of {piece} bytes"
            );
        }
    }

    #[test]
    fn a_fatal_error_is_found_where_it_ends_however_the_stream_is_cut() {
        // An ERROR (not FATAL), a FATAL error, then a ReadyForQuery that must not be seen.
        let stream = frames(&[
            (b'E', b"SERROR\0C22012\0Mx\0\0"),
            (b'E', b"SFATAL\0C08P01\0Mbad\0\0"),
            (b'Z', b"I"),
        ]);
        let fatal_end = stream.len() - 6;
        for piece in 1..=stream.len() {
            let found = ends_seen(&stream, piece, |s| match s {
                Seen::Fatal(end) => Some(end),
                _ => None,
            });
            assert_eq!(found.first(), Some(&fatal_end), "pieces of {piece} bytes");
        }
    }

    #[test]
    fn authentication_ok_is_found_where_it_ends_however_the_stream_is_cut() {
        // A password request (code 3, as long as AuthenticationOk), SASL's final message
        // (code 12), AuthenticationOk (code 0), then what must not be relayed to a login that
        // is to be refused: a ParameterStatus and ReadyForQuery.
        let stream = frames(&[
            (b'R', b"\0\0\0\x03"),
            (b'R', b"\0\0\0\x0cv=abc"),
            (b'R', b"\0\0\0\0"),
            (b'S', b"a\0b\0"),
            (b'Z', b"I"),
        ]);
        let ok_end = 9 + 14 + 9;
        for piece in 1..=stream.len() {
            let found = ends_seen(&stream, piece, |s| match s {
                Seen::AuthenticationOk(end) => Some(end),
                _ => None,
            });
            assert_eq!(found, [ok_end], "pieces of {piece} bytes");
        }
    }

    #[test]
    fn message_layouts_are_checked_before_decoding() {
        assert!(check(b'Q', b"SELECT 1\0", false).is_ok());
        assert!(check(b'Q', b"SELECT 1", false).is_err());
        assert!(check(b'P', b"\0SELECT 1\0\0\0", false).is_ok());
        assert!(
            check(b'P', b"\0SELECT 1\0", false).is_err(),
            "no parameter count"
        );
        assert!(
            check(b'P', b"\0SELECT 1\0\0\x02\0\0\0\x17", false).is_err(),
            "one oid of two"
        );
        assert!(check(b'D', b"S\0", false).is_ok());
        assert!(check(b'D', b"Z\0", false).is_err());
        assert!(check(b'E', b"\0\0\0\0\0", false).is_ok());
        assert!(check(b'E', b"\0\0\0", false).is_err());
        assert!(check(b'S', b"", false).is_ok());
        assert!(check(b'S', b"x", false).is_err());
        assert!(check(b'B', b"\0\0\0\0\0\x01\xff\xff\xff\xff\0\0", false).is_ok());
        assert!(check(b'B', b"\0\0\0\0\0\x01\0\0\0\x09ab\0\0", false).is_err());
        assert!(check(b'F', b"", false).is_err());
        assert!(check(b'p', b"SCRAM-SHA-256\0\0\0\0\x03abc", true).is_ok());
        assert!(check(b'p', b"SCRAM-SHA-256\0\0\0", true).is_err());
        assert!(check(b'p', b"SCRAM-SHA-256\0\xff\xff\xff\xff", true).is_ok());
        assert!(
            check(b'p', b"SCRAM-SHA-256\0\xff\xff\xff\xfe", true).is_err(),
            "a negative length other than -1"
        );
        let e = check(b'P', b"\0SELECT", false).err().unwrap();
        assert!(e.0.contains("message type 'P'"), "{}", e.0);
    }

    #[test]
    fn startup_parameters_must_be_pairs_with_a_user() {
        assert!(startup_params(b"user\0duck\0database\0lake\0\0").is_ok());
        assert!(startup_params(b"user\0duck\0database\0lake\0").is_err());
        assert!(startup_params(b"database\0lake\0\0").is_err());
        assert!(startup_params(b"user\0duck\0orphan\0\0").is_err());
        assert!(startup_params(b"\0").is_err());
    }
}
