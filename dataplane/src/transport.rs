//! The upstream HTTP client: HTTP/1.1 keep-alive connections, pooled per upstream and per serving
//! thread, written and read by the request's own task.
//!
//! Why not a library client. reqwest (until issue 7) wrapped each call in boxed service layers and
//! re-parsed every response's URL; hyper's client connection (sessions 5 to 8) runs each
//! connection in a task of its own, so every request crossed two channels (the request to the
//! connection's task, the response head and each body chunk back) and woke two tasks; that task
//! was a sixth of the data plane's instructions per request under callgrind. A gateway that sends
//! a POST with a known length to one of a few origins and reads one answer back needs much less:
//! write the head and body, parse the answer's head with `httparse`, and decode its body by
//! length, chunked framing, or until close. The request's task does both, so a streamed event
//! wakes one task, not two. The figures are in `docs/BENCHMARKS.md` (session 9).
//!
//! - **Pool.** LIFO, so hot connections stay hot and the rest age out. A connection goes back to
//!   the pool only when its response body was read to the end and it may be kept (HTTP/1.1, no
//!   `connection: close`, a framed body, nothing after it); a response dropped early (a caller
//!   that went away) closes it. Idle connections older than [`IDLE_TIMEOUT`] are dropped when the
//!   pool is next touched.
//! - **Stale connections.** A pooled connection is checked before use without a system call
//!   unless the kernel flagged it (one the server closed while idle reads as end-of-file and is
//!   dropped). A request that no byte of was written is tried on the next connection; a request
//!   that was written, wholly or in part, is never sent twice.
//! - **Framing** (RFC 9112 §6): 1xx heads are skipped; 204, 304 and `content-length: 0` have no
//!   body; `transfer-encoding: chunked` wins over `content-length` (and the connection is not
//!   kept); conflicting lengths, malformed chunk sizes and oversized heads are errors.
//! - **TLS.** rustls with the Mozilla roots (`webpki-roots`), ALPN `http/1.1`.

use std::io::{self, IoSlice};
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::trace::{AttemptIo, Hop};
use ax_wire::json::Payload;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{self, ClientConfig};
use tokio_rustls::TlsConnector;

mod framing;
use framing::*;

/// An idle pooled connection is dropped after this long.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Idle connections kept per upstream and serving thread.
const MAX_IDLE: usize = 1024;
/// What is read, at most, of a body after its last event to keep its connection.
const DRAIN_BYTES: usize = 64 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(1);
/// Pooled connections tried before a new one is opened for a request.
const MAX_STALE_TRIES: usize = 4;
/// A response head larger than this, or with more headers, is refused.
const MAX_HEAD_BYTES: usize = 64 * 1024;
const MAX_HEADERS: usize = 128;
/// A chunk-size line (extensions included) or a trailer section longer than this is refused.
const MAX_LINE_BYTES: usize = 4096;
const MAX_TRAILER_BYTES: usize = 16 * 1024;
/// Free space asked of a connection's read buffer before each read.
const READ_SPACE: usize = 16 * 1024;

/// The response headers a caller gets (the others are read for framing, then dropped: a map of
/// every header an API sends, twenty and more, cost more than the rest of the head's parse).
const KEPT_HEADERS: [&str; 3] = ["content-type", "retry-after", "retry-after-ms"];

/// Why a request got no response.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connect timed out")]
    ConnectTimeout,
    #[error("connect failed: {0}")]
    Connect(String),
    /// The connection failed, or the answer's head was not HTTP/1.1, before a response.
    #[error("request failed: {0}")]
    Request(String),
}

/// The client of one upstream origin (scheme, host, port).
pub struct Client {
    origin: Origin,
    /// `host` and the headers sent on every request (credentials among them), as written:
    /// `name: value\r\n` each. Never printed.
    fixed_head: Vec<u8>,
    connect_timeout: Duration,
    /// One stack of idle connections per serving thread.
    pools: Pools,
}

type Pools = Arc<[Mutex<Vec<Idle>>]>;

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The fixed head carries the upstream key: never printed.
        f.debug_struct("Client").field("host", &self.origin.host).field("port", &self.origin.port).finish()
    }
}

struct Origin {
    host: String,
    port: u16,
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

struct Idle {
    conn: Conn,
    since: Instant,
}

/// One connection and what was read from it but not yet consumed.
struct Conn {
    io: Io,
    buf: BytesMut,
}

enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// A response whose body is read chunk by chunk; read to the end, its connection goes back to the
/// pool.
pub struct Response {
    pub status: StatusCode,
    /// Only [`KEPT_HEADERS`].
    pub headers: HeaderMap,
    /// `None` once the connection was given back, or broke.
    conn: Option<Conn>,
    framing: Framing,
    keep_alive: bool,
    home: Home,
    /// Where the body's bytes are counted.
    io: Option<Arc<AttemptIo>>,
}

/// Where a connection goes back to.
struct Home {
    pools: Pools,
    slot: usize,
}

impl Client {
    /// `base` is an `http://` or `https://` URL; only its origin is used here (paths are per
    /// request). `headers` go on every request. `threads` is the number of serving threads.
    pub fn new(
        base: &reqwest::Url,
        headers: HeaderMap,
        connect_timeout: Duration,
        threads: usize,
    ) -> Result<Self, String> {
        let tls = match base.scheme() {
            "http" => false,
            "https" => true,
            s => return Err(format!("unsupported scheme {s}")),
        };
        if !base.username().is_empty() || base.password().is_some() {
            return Err("credentials in the URL are not supported: use api_key or headers".into());
        }
        let host = match base.host() {
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            Some(h) => h.to_string(),
            None => return Err("the URL has no host".into()),
        };
        let port = base.port_or_known_default().ok_or("the URL has no port")?;
        let authority = match (base.host(), base.port()) {
            (Some(url::Host::Ipv6(ip)), Some(p)) => format!("[{ip}]:{p}"),
            (Some(url::Host::Ipv6(ip)), None) => format!("[{ip}]"),
            (_, Some(p)) => format!("{host}:{p}"),
            (_, None) => host.clone(),
        };
        let host_header = HeaderValue::from_str(&authority).map_err(|_| "the host is not a valid header value")?;
        let tls = if tls {
            let name = match host.parse::<IpAddr>() {
                Ok(ip) => ServerName::IpAddress(ip.into()),
                Err(_) => ServerName::try_from(host.clone()).map_err(|e| format!("invalid TLS server name: {e}"))?,
            };
            Some((TlsConnector::from(tls_config()?), name))
        } else {
            None
        };
        let mut fixed_head =
            Vec::with_capacity(64 + headers.iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum::<usize>());
        for (name, value) in std::iter::once((&http::header::HOST, &host_header)).chain(headers.iter()) {
            fixed_head.extend_from_slice(name.as_str().as_bytes());
            fixed_head.extend_from_slice(b": ");
            fixed_head.extend_from_slice(value.as_bytes());
            fixed_head.extend_from_slice(b"\r\n");
        }
        Ok(Self {
            origin: Origin { host, port, tls },
            fixed_head,
            connect_timeout,
            pools: (0..threads.max(1)).map(|_| Mutex::new(Vec::new())).collect(),
        })
    }

    /// Trusts the PEM certificates in `pem` besides the Mozilla roots (a private CA's).
    pub fn trusting(mut self, pem: &[u8]) -> Result<Self, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;
        let Some((_, name)) = self.origin.tls.take() else { return Ok(self) };
        let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("not a PEM certificate: {e}"))?;
            roots.add(cert).map_err(|e| format!("a certificate that cannot be trusted: {e}"))?;
            added += 1;
        }
        if added == 0 {
            return Err("no PEM certificate in it".to_owned());
        }
        let config = tls_config_with(roots)?;
        self.origin.tls = Some((TlsConnector::from(config), name));
        Ok(self)
    }

    /// POSTs a JSON body to `path` (origin-form: path and query) and waits for the response head.
    /// (`post`'s own future, not one wrapping it: a request's future is moved whole several
    /// times, and each level of nesting makes it larger.)
    pub fn post_json<'a>(
        &'a self,
        path: &'a Uri,
        body: impl Into<Payload>,
        headers: &'a [(HeaderName, HeaderValue)],
        hop: Hop<'a>,
    ) -> impl std::future::Future<Output = Result<Response, Error>> + 'a {
        self.post(path, "application/json", body.into(), headers, hop)
    }

    /// POSTs a body of `content_type` to `path` and waits for the response head.
    pub async fn post(
        &self,
        path: &Uri,
        content_type: &str,
        body: Payload,
        headers: &[(HeaderName, HeaderValue)],
        hop: Hop<'_>,
    ) -> Result<Response, Error> {
        let head = self.request_head(path, content_type, body.len(), headers, hop);
        let slot = crate::worker::current() % self.pools.len();
        let io = hop.io;
        let sent = |io: Option<&Arc<AttemptIo>>| {
            if let Some(io) = io {
                io.add_sent(head.len() + body.len());
            }
        };
        // Pooled connections first; a request no byte of went out moves on to the next.
        for _ in 0..MAX_STALE_TRIES {
            let Some(mut conn) = self.take(slot) else { break };
            match conn.write_request(&head, &body).await {
                Ok(()) => {
                    sent(io);
                    return self.response(conn, slot, io).await;
                }
                Err((false, _)) => {}
                Err((true, e)) => return Err(Error::Request(e.to_string())),
            }
        }
        let mut conn = self.connect().await?;
        conn.write_request(&head, &body).await.map_err(|(_, e)| Error::Request(e.to_string()))?;
        sent(io);
        self.response(conn, slot, io).await
    }

    /// `headers`: the caller's, passed on (their values are `HeaderValue`s: no line breaks).
    fn request_head(
        &self,
        path: &Uri,
        content_type: &str,
        body_len: usize,
        headers: &[(HeaderName, HeaderValue)],
        hop: Hop<'_>,
    ) -> Vec<u8> {
        let request_id = hop.request_id;
        let target = path.path_and_query().map_or("/", http::uri::PathAndQuery::as_str);
        // Sized for all of it: growing the head mid-way costs a reallocation and a copy.
        let passed: usize = headers.iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum();
        let traceparent = hop.traceparent.map_or(0, |t| t.len() + 15);
        let mut h = Vec::with_capacity(
            target.len() + self.fixed_head.len() + content_type.len() + request_id.len() + passed + traceparent + 96,
        );
        h.extend_from_slice(b"POST ");
        h.extend_from_slice(target.as_bytes());
        h.extend_from_slice(b" HTTP/1.1\r\n");
        h.extend_from_slice(&self.fixed_head);
        h.extend_from_slice(b"content-type: ");
        h.extend_from_slice(content_type.as_bytes());
        h.extend_from_slice(b"\r\n");
        for (name, value) in headers {
            h.extend_from_slice(name.as_str().as_bytes());
            h.extend_from_slice(b": ");
            h.extend_from_slice(value.as_bytes());
            h.extend_from_slice(b"\r\n");
        }
        // The caller's request id goes along so provider-side logs can be matched (ingress
        // keeps only visible ASCII; anything else is left out rather than sent broken).
        if !request_id.is_empty() && request_id.bytes().all(|b| b.is_ascii_graphic()) {
            h.extend_from_slice(b"x-request-id: ");
            h.extend_from_slice(request_id.as_bytes());
            h.extend_from_slice(b"\r\n");
        }
        if let Some(tp) = hop.traceparent {
            h.extend_from_slice(b"traceparent: ");
            h.extend_from_slice(tp);
            h.extend_from_slice(b"\r\n");
        }
        h.extend_from_slice(b"content-length: ");
        h.extend_from_slice(itoa::Buffer::new().format(body_len).as_bytes());
        h.extend_from_slice(b"\r\n\r\n");
        h
    }

    /// Reads the answer's head (skipping 1xx heads).
    async fn response(&self, mut conn: Conn, slot: usize, io: Option<&Arc<AttemptIo>>) -> Result<Response, Error> {
        loop {
            let head = loop {
                match parse_head(&conn.buf).map_err(Error::Request)? {
                    Some(h) => break h,
                    None => {
                        if conn.read_more().await.map_err(|e| Error::Request(e.to_string()))? == 0 {
                            return Err(Error::Request("the connection closed before a response".into()));
                        }
                    }
                }
            };
            conn.buf.advance(head.len);
            if let Some(io) = io {
                io.add_received(head.len);
            }
            if head.status.is_informational() {
                if head.status == StatusCode::SWITCHING_PROTOCOLS {
                    return Err(Error::Request("the upstream switched protocols".into()));
                }
                continue;
            }
            return Ok(Response {
                status: head.status,
                headers: head.headers,
                conn: Some(conn),
                framing: head.framing,
                keep_alive: head.keep_alive,
                home: Home { pools: self.pools.clone(), slot },
                io: io.cloned(),
            });
        }
    }

    /// The most recently used open connection of this thread's pool.
    fn take(&self, slot: usize) -> Option<Conn> {
        loop {
            let idle = {
                let mut pool = self.pools[slot].lock().unwrap_or_else(PoisonError::into_inner);
                let idle = pool.pop()?;
                if idle.since.elapsed() >= IDLE_TIMEOUT {
                    // Everything below is older still.
                    pool.clear();
                    return None;
                }
                idle
            };
            let mut conn = idle.conn;
            if conn.is_open() {
                return Some(conn);
            }
        }
    }

    async fn connect(&self) -> Result<Conn, Error> {
        let o = &self.origin;
        let connect = async {
            let tcp = TcpStream::connect((o.host.as_str(), o.port)).await.map_err(|e| Error::Connect(e.to_string()))?;
            tcp.set_nodelay(true).map_err(|e| Error::Connect(e.to_string()))?;
            let io = match &o.tls {
                None => Io::Plain(tcp),
                Some((connector, name)) => Io::Tls(Box::new(
                    connector.connect(name.clone(), tcp).await.map_err(|e| Error::Connect(format!("TLS: {e}")))?,
                )),
            };
            Ok(Conn { io, buf: BytesMut::new() })
        };
        tokio::time::timeout(self.connect_timeout, connect).await.map_err(|_| Error::ConnectTimeout)?
    }

    /// Serving threads this client has pools for.
    pub fn threads(&self) -> usize {
        self.pools.len()
    }

    /// Idle connections held now, over all serving threads.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.pools.iter().map(|p| p.lock().unwrap_or_else(PoisonError::into_inner).len()).sum()
    }
}

impl Conn {
    /// Writes the request; on failure, whether any of it went out.
    /// Writes the head and the body's pieces together (one `writev` while the socket takes
    /// them all). The error says whether any byte went out.
    async fn write_request(&mut self, head: &[u8], body: &Payload) -> Result<(), (bool, io::Error)> {
        let mut pieces: Vec<&[u8]> = Vec::with_capacity(4);
        pieces.push(head);
        body.slices(&mut pieces);
        pieces.retain(|p| !p.is_empty());
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        let (mut at, mut off, mut written) = (0, 0, 0);
        while written < total {
            let n = if at + 1 < pieces.len() {
                // At most IOV_MAX (1,024 on Linux) slices a call; the rest go in the next.
                let slices: Vec<IoSlice<'_>> = std::iter::once(IoSlice::new(&pieces[at][off..]))
                    .chain(pieces[at + 1..].iter().take(1023).map(|p| IoSlice::new(p)))
                    .collect();
                self.io.write_vectored(&slices).await
            } else {
                self.io.write(&pieces[at][off..]).await
            };
            match n {
                Ok(0) => return Err((written > 0, io::ErrorKind::WriteZero.into())),
                Ok(mut n) => {
                    written += n;
                    while n > 0 {
                        let left = pieces[at].len() - off;
                        if n < left {
                            off += n;
                            n = 0;
                        } else {
                            n -= left;
                            at += 1;
                            off = 0;
                        }
                    }
                }
                Err(e) => return Err((written > 0, e)),
            }
        }
        self.io.flush().await.map_err(|e| (true, e))
    }

    /// Reads what has arrived (waiting for something); 0 at end-of-file.
    async fn read_more(&mut self) -> io::Result<usize> {
        self.buf.reserve(READ_SPACE);
        self.io.read_buf(&mut self.buf).await
    }

    /// Whether an idle connection can carry a request: not closed by the server, nothing unasked
    /// for arrived on it. No system call unless the kernel reported the socket readable.
    fn is_open(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut probe = [0u8; 1];
        let mut rb = ReadBuf::new(&mut probe);
        matches!(Pin::new(&mut self.io).poll_read(&mut cx, &mut rb), Poll::Pending)
    }
}

impl Response {
    /// The bytes of the body still to come, when the answer declared its length.
    pub fn remaining_length(&self) -> Option<u64> {
        match self.framing {
            Framing::Length(n) => Some(n),
            Framing::Done => Some(0),
            Framing::Chunked(_) | Framing::UntilClose => None,
        }
    }

    /// What [`chunk`](Self::chunk) would give without reading from the connection: the next
    /// chunk, the end, or an error, when the bytes already read say so; `None` when more must be
    /// read. (A one-piece answer usually arrives whole with its head: its reader then needs no
    /// timer and no clock.)
    pub fn buffered_chunk(&mut self) -> Option<io::Result<Option<Bytes>>> {
        let Some(conn) = self.conn.as_mut() else {
            return Some(match self.framing {
                Framing::Done => Ok(None),
                _ => Err(io::Error::new(io::ErrorKind::BrokenPipe, "the body was abandoned")),
            });
        };
        match self.framing.step(&mut conn.buf) {
            Ok(Step::Data(b)) => {
                if let Some(io) = &self.io {
                    io.add_received(b.len());
                }
                Some(Ok(Some(b)))
            }
            Ok(Step::End) => {
                self.release();
                Some(Ok(None))
            }
            Ok(Step::More) => None,
            Err(e) => {
                self.conn = None;
                Some(Err(e))
            }
        }
    }

    /// The next chunk of the body; `None` at its end (and the connection is back in the pool).
    /// Cancel-safe: what was read stays in the connection's buffer for the next call.
    pub async fn chunk(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            if let Some(ready) = self.buffered_chunk() {
                return ready;
            }
            // `buffered_chunk` answers whenever no connection is held: this `else` is never taken.
            let Some(conn) = self.conn.as_mut() else { continue };
            match conn.read_more().await {
                Ok(0) if self.framing == Framing::UntilClose => {
                    self.framing = Framing::Done;
                    self.conn = None;
                    return Ok(None);
                }
                Ok(0) => {
                    self.conn = None;
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the body ended early"));
                }
                Ok(_) => {}
                Err(e) => {
                    self.conn = None;
                    return Err(e);
                }
            }
        }
    }

    /// The body is over: the connection goes back to the pool if it may carry another request.
    fn release(&mut self) {
        self.framing = Framing::Done;
        let Some(conn) = self.conn.take() else { return };
        // Bytes after the body's end were never asked for: that connection is not reused.
        if !self.keep_alive || !conn.buf.is_empty() {
            return;
        }
        let mut idle = self.home.pools[self.home.slot].lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        // The oldest sit at the bottom: drop the ones past their time.
        let expired = idle.iter().take_while(|c| now.duration_since(c.since) >= IDLE_TIMEOUT).count();
        if expired > 0 {
            idle.drain(..expired);
        }
        if idle.len() < MAX_IDLE {
            idle.push(Idle { conn, since: now });
        }
    }

    /// Hands what is left of the body to a background read, so the connection goes back to the
    /// pool: a stream's decoder sees its last event (`[DONE]`) before the body's end (a chunked
    /// body's last chunk) arrives. Dropping the response instead would close a connection that
    /// is good for the next request, and every stream would pay a new connect (and TLS handshake).
    /// Gives up (closing the connection) past [`DRAIN_BYTES`] or [`DRAIN_TIME`].
    pub fn finish_in_background(mut self) {
        if self.conn.is_none() || !self.keep_alive {
            return;
        }
        // Usually the end is already here: no task needed.
        let mut read = 0;
        loop {
            match futures_util::FutureExt::now_or_never(self.chunk()) {
                Some(Ok(None) | Err(_)) => return,
                Some(Ok(Some(c))) => {
                    read += c.len();
                    if read > DRAIN_BYTES {
                        return;
                    }
                }
                None => break,
            }
        }
        tokio::spawn(async move {
            let drain = async {
                while let Ok(Some(c)) = self.chunk().await {
                    read += c.len();
                    if read > DRAIN_BYTES {
                        self.conn = None;
                        return;
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
        });
    }
}

impl AsyncRead for Io {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// One rustls configuration per process: parsing the root store is not free.
fn tls_config() -> Result<Arc<ClientConfig>, String> {
    static CONFIG: std::sync::OnceLock<Result<Arc<ClientConfig>, String>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| tls_config_with(rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() }))
        .clone()
}

fn tls_config_with(roots: rustls::RootCertStore) -> Result<Arc<ClientConfig>, String> {
    let mut config = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The fuzz target of the response parser and the body framing (`crate::fuzz::upstream_http`):
/// any bytes as an upstream's answer. A head that parses has its body decoded from the same
/// bytes in one read and in reads of a few bytes: the two must agree.
#[doc(hidden)]
pub fn fuzz_response(data: &[u8]) {
    let Ok(Some(head)) = parse_head(data) else { return };
    let body = &data[head.len.min(data.len())..];
    let decode = |piece: usize| -> (Vec<u8>, Option<bool>) {
        let mut framing = head.framing;
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for p in body.chunks(piece.max(1)) {
            buf.extend_from_slice(p);
            loop {
                match framing.step(&mut buf) {
                    Ok(Step::Data(b)) => out.extend_from_slice(&b),
                    Ok(Step::End) => return (out, Some(true)),
                    Ok(Step::More) => break,
                    Err(_) => return (out, Some(false)),
                }
            }
        }
        (out, None)
    };
    let whole = decode(body.len());
    let pieces = decode(3);
    // Until the body ends or fails, both have produced the same bytes; a verdict reached in one
    // read is reached in small reads too.
    let n = whole.0.len().min(pieces.0.len());
    assert_eq!(whole.0[..n], pieces.0[..n], "the body depends on how it was read");
    if whole.1.is_some() {
        assert_eq!(whole, pieces, "framing verdicts differ between one read and small reads");
    }
}

#[cfg(test)]
mod tests;
