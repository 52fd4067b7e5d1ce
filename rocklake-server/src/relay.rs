//! Every frontend message is framed and checked here before pgwire decodes it.
//!
//! pgwire's decoders assume well-formed messages (a Parse or Bind cut short makes them read
//! past the end of the buffer and panic). So a connection's bytes pass through this relay: it
//! answers SSLRequest and GSSENCRequest with `N` (no TLS here), checks the startup packet and
//! each message's layout against the protocol, and hands pgwire only messages it can decode
//! (over a socket pair). A malformed message ends the connection the way PostgreSQL ends it:
//! a FATAL ErrorResponse with SQLSTATE 08P01, then close. Other connections go on.

use std::io;

use pgwire::tokio::tokio_rustls;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

/// The largest message accepted (PostgreSQL's own limit is 1 GiB; catalog traffic is far
/// below this).
const MAX_MESSAGE: usize = 256 << 20;
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;

/// Why a message was refused.
struct Bad(String);

/// TLS for connections whose client asks for it (an SSLRequest); `None` answers `N`.
pub(crate) type Tls = Option<tokio_rustls::TlsAcceptor>;

/// Relay `tcp` to `inner` (pgwire's end) until either side closes.
pub(crate) async fn relay(
    mut tcp: TcpStream,
    inner: UnixStream,
    password: bool,
    tls: Tls,
) -> io::Result<()> {
    match startup(&mut tcp, &tls).await? {
        Start::Plain(first) => serve(tcp, inner, password, first).await,
        Start::Tls => {
            let Some(acceptor) = tls else { return Ok(()) };
            let mut stream = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::info!(error = %e, "TLS handshake failed");
                    return Ok(());
                }
            };
            // After the handshake the client starts up again, inside TLS.
            match startup(&mut stream, &None).await? {
                Start::Plain(first) => serve(stream, inner, password, first).await,
                Start::Tls | Start::Done => Ok(()),
            }
        }
        Start::Done => {
            // A cancel request: hand it to pgwire and close.
            Ok(())
        }
    }
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
        if !(8..=10_000).contains(&len) {
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
            CANCEL_REQUEST if len == 16 => return Ok(Start::Plain(packet)),
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
/// answers back.
async fn serve<S>(stream: S, inner: UnixStream, password: bool, first: Vec<u8>) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut inner_read, mut inner_write) = inner.into_split();
    inner_write.write_all(&first).await?;
    let (mut tcp_read, mut tcp_write) = tokio::io::split(stream);
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut inner_read, &mut tcp_write).await;
        tcp_write
    });
    let mut passwords = 0usize;
    let refused = loop {
        let mut head = [0u8; 5];
        if tcp_read.read_exact(&mut head).await.is_err() {
            break None;
        }
        let kind = head[0];
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if !(4..=MAX_MESSAGE).contains(&len) {
            break Some(format!(
                "invalid message length {len} (message type {})",
                shown(kind)
            ));
        }
        let mut body = vec![0u8; len - 4];
        if tcp_read.read_exact(&mut body).await.is_err() {
            break None;
        }
        let first_password = kind == b'p' && passwords == 0 && password;
        if kind == b'p' {
            passwords += 1;
        }
        if let Err(Bad(why)) = check(kind, &body, first_password) {
            break Some(why);
        }
        if inner_write.write_all(&head).await.is_err()
            || inner_write.write_all(&body).await.is_err()
        {
            break None;
        }
        if kind == b'X' {
            break None;
        }
    };
    // pgwire sees the end of its input, finishes what it was sending, and closes.
    let _ = inner_write.shutdown().await;
    let tcp_write = back.await.ok();
    if let (Some(why), Some(mut w)) = (refused, tcp_write) {
        tracing::info!(error = %why, "closing a connection that sent a malformed message");
        let _ = w.write_all(&error_response(&why)).await;
        let _ = w.shutdown().await;
    }
    Ok(())
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
    tcp.write_all(&error_response(why)).await?;
    tcp.shutdown().await
}

/// A FATAL ErrorResponse with SQLSTATE 08P01 (protocol violation).
fn error_response(why: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for (code, text) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', "08P01"),
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
            let len = c.i32("a SASL response length")?;
            if len >= 0 {
                c.take(len as usize, "a SASL response")?;
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
