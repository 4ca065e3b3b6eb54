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

/// How the rest of a body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// This many bytes to go.
    Length(u64),
    Chunked(Chunked),
    /// Until the server closes the connection (which is then not kept).
    UntilClose,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunked {
    /// At a chunk-size line.
    Size,
    /// Inside a chunk's data, this many bytes to go.
    Data(u64),
    /// After a chunk's data, at its CRLF.
    DataEnd,
    /// After the last chunk, in the trailer section (bytes of it read so far).
    Trailers(usize),
}

/// What the bytes read so far hold, next.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Data(Bytes),
    End,
    /// More must be read.
    More,
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

/// A parsed response head.
#[derive(Debug)]
struct Head {
    len: usize,
    status: StatusCode,
    headers: HeaderMap,
    framing: Framing,
    keep_alive: bool,
}

/// The response head at the start of `buf`, if all of it is there.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    // Uninitialized slots: initializing 128 empty headers was a 4 KiB write per answer.
    let mut headers = [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut r = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut r, buf, &mut headers) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
            return Err("the response head is too large".into())
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("invalid response head: {e}")),
    };
    let status = r.code.and_then(|c| StatusCode::from_u16(c).ok()).ok_or("invalid status code")?;
    let (mut length, mut chunked, mut encoded, mut close, mut keep) = (None::<u64>, false, false, false, false);
    let mut kept = HeaderMap::new();
    for h in r.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            let n = content_length(h.value).ok_or("invalid content-length")?;
            if length.is_some_and(|l| l != n) {
                return Err("conflicting content-length".into());
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            encoded = true;
            // The last coding decides: only a body whose final coding is chunked is framed.
            chunked = tokens(h.value).last().is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case("connection") {
            for t in tokens(h.value) {
                close |= t.eq_ignore_ascii_case(b"close");
                keep |= t.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if let Some(k) = KEPT_HEADERS.iter().find(|k| name.eq_ignore_ascii_case(k)) {
            if let Ok(v) = HeaderValue::from_bytes(h.value) {
                kept.append(HeaderName::from_static(k), v);
            }
        }
    }
    let framing = if status.is_informational() || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED
    {
        Framing::Done
    } else if encoded {
        if chunked {
            Framing::Chunked(Chunked::Size)
        } else {
            Framing::UntilClose
        }
    } else {
        match length {
            Some(0) => Framing::Done,
            Some(n) => Framing::Length(n),
            None => Framing::UntilClose,
        }
    };
    let http11 = r.version == Some(1);
    // A length beside a transfer coding may be a smuggling attempt: answer read, connection not kept.
    let keep_alive = !close && (http11 || keep) && framing != Framing::UntilClose && !(encoded && length.is_some());
    Ok(Some(Head { len, status, headers: kept, framing, keep_alive }))
}

/// A `content-length` value: digits, or a list of identical ones (RFC 9110 §8.6).
fn content_length(v: &[u8]) -> Option<u64> {
    let mut found = None;
    for t in tokens(v) {
        if t.is_empty() || t.len() > 19 || !t.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = std::str::from_utf8(t).ok()?.parse::<u64>().ok()?;
        if found.is_some_and(|f| f != n) {
            return None;
        }
        found = Some(n);
    }
    found
}

/// The comma-separated elements of a header value, trimmed.
fn tokens(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|b| *b == b',').map(<[u8]>::trim_ascii)
}

/// A chunk-size line's size (hex digits, then optional `;extensions`).
fn chunk_size(line: &[u8]) -> Option<u64> {
    let end = line.iter().position(|b| *b == b';').unwrap_or(line.len());
    let digits = line[..end].trim_ascii();
    if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// Where the first line of `buf` ends (the index of its CR), if its CRLF is there. A line feed
/// without a carriage return before it is an error. (`memchr` for the LF: `memmem` for a
/// two-byte needle spent more on its setup than on the search, per chunk.)
fn line_end(buf: &[u8]) -> io::Result<Option<usize>> {
    match memchr::memchr(b'\n', buf) {
        None => Ok(None),
        Some(i) if i > 0 && buf[i - 1] == b'\r' => Ok(Some(i - 1)),
        Some(_) => Err(io::Error::new(io::ErrorKind::InvalidData, "a line ends without CRLF in the chunked framing")),
    }
}

impl Framing {
    /// Takes the next piece of body out of `buf`, if one is there.
    fn step(&mut self, buf: &mut BytesMut) -> io::Result<Step> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
        loop {
            match self {
                Framing::Done | Framing::Length(0) => {
                    *self = Framing::Done;
                    return Ok(Step::End);
                }
                Framing::Length(rest) => {
                    if buf.is_empty() {
                        return Ok(Step::More);
                    }
                    let n = buf.len().min(usize::try_from(*rest).unwrap_or(usize::MAX));
                    *rest -= n as u64;
                    return Ok(Step::Data(buf.split_to(n).freeze()));
                }
                Framing::UntilClose => {
                    return Ok(if buf.is_empty() { Step::More } else { Step::Data(buf.split().freeze()) });
                }
                Framing::Chunked(c) => match c {
                    Chunked::Size => {
                        let Some(eol) = line_end(buf)? else {
                            return if buf.len() > MAX_LINE_BYTES {
                                Err(bad("chunk-size line too long"))
                            } else {
                                Ok(Step::More)
                            };
                        };
                        let size = chunk_size(&buf[..eol]).ok_or_else(|| bad("invalid chunk size"))?;
                        buf.advance(eol + 2);
                        *c = if size == 0 { Chunked::Trailers(0) } else { Chunked::Data(size) };
                    }
                    Chunked::Data(rest) => {
                        if buf.is_empty() {
                            return Ok(Step::More);
                        }
                        let n = buf.len().min(usize::try_from(*rest).unwrap_or(usize::MAX));
                        *rest -= n as u64;
                        if *rest == 0 {
                            *c = Chunked::DataEnd;
                        }
                        return Ok(Step::Data(buf.split_to(n).freeze()));
                    }
                    Chunked::DataEnd => {
                        if buf.len() < 2 {
                            return Ok(Step::More);
                        }
                        if &buf[..2] != b"\r\n" {
                            return Err(bad("chunk data not followed by CRLF"));
                        }
                        buf.advance(2);
                        *c = Chunked::Size;
                    }
                    Chunked::Trailers(seen) => {
                        let Some(eol) = line_end(buf)? else {
                            return if *seen + buf.len() > MAX_TRAILER_BYTES {
                                Err(bad("trailers too long"))
                            } else {
                                Ok(Step::More)
                            };
                        };
                        buf.advance(eol + 2);
                        if eol == 0 {
                            *self = Framing::Done;
                            return Ok(Step::End);
                        }
                        *seen += eol + 2;
                        if *seen > MAX_TRAILER_BYTES {
                            return Err(bad("trailers too long"));
                        }
                    }
                },
            }
        }
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
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A minimal HTTP/1.1 server: answers every request with `{"ok":true}`; closes each
    /// connection after one answer when `close_after_one`. Counts connections and keeps the
    /// request heads it saw.
    struct Server {
        url: reqwest::Url,
        accepted: Arc<AtomicUsize>,
        heads: Arc<Mutex<Vec<String>>>,
    }

    async fn server(close_after_one: bool) -> Server {
        server_with(close_after_one, false).await
    }

    /// `chunked`: the answer is a chunked body of two chunks, the second sent 20 ms after the first.
    async fn server_with(close_after_one: bool, chunked: bool) -> Server {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = reqwest::Url::parse(&format!("http://{}/v1", l.local_addr().unwrap())).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (a, h) = (accepted.clone(), heads.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                let h = h.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        let mut chunk = [0u8; 4096];
                        let Ok(n) = s.read(&mut chunk).await else { return };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
                        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        if buf.len() < end + 4 + len {
                            continue;
                        }
                        buf.drain(..end + 4 + len);
                        h.lock().unwrap().push(head);
                        if chunked {
                            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                            let first = format!("{head}b\r\ndata: one\n\n\r\n");
                            if s.write_all(first.as_bytes()).await.is_err() {
                                return;
                            }
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            if s.write_all(b"0\r\n\r\n").await.is_err() {
                                return;
                            }
                            continue;
                        }
                        let body = r#"{"ok":true}"#;
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if s.write_all(resp.as_bytes()).await.is_err() || close_after_one {
                            return;
                        }
                    }
                });
            }
        });
        Server { url, accepted, heads }
    }

    fn client(url: &reqwest::Url) -> Client {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer sk-upstream"));
        Client::new(url, headers, Duration::from_secs(2), 1).unwrap()
    }

    async fn call(c: &Client) -> Result<Vec<u8>, String> {
        let target: Uri = "/v1/chat/completions".parse().unwrap();
        let mut resp = c.post_json(&target, b"{}".to_vec(), &[], "req-1".into()).await.map_err(|e| e.to_string())?;
        let mut body = Vec::new();
        while let Some(b) = resp.chunk().await.map_err(|e| e.to_string())? {
            body.extend_from_slice(&b);
        }
        Ok(body)
    }

    #[tokio::test]
    async fn one_connection_serves_sequential_requests_and_carries_the_headers() {
        let s = server(false).await;
        let c = client(&s.url);
        for _ in 0..5 {
            assert_eq!(call(&c).await.unwrap(), br#"{"ok":true}"#);
        }
        assert_eq!(s.accepted.load(Ordering::SeqCst), 1);
        assert_eq!(c.idle(), 1);
        let heads = s.heads.lock().unwrap();
        assert_eq!(heads.len(), 5);
        let host = format!("host: {}", s.url.authority());
        for h in heads.iter() {
            assert!(h.starts_with("post /v1/chat/completions http/1.1"), "{h}");
            for line in [host.as_str(), "authorization: bearer sk-upstream", "x-request-id: req-1"] {
                assert!(h.lines().any(|l| l == line), "{line} missing in {h}");
            }
            assert!(h.lines().any(|l| l == "content-type: application/json"), "{h}");
        }
    }

    #[tokio::test]
    async fn a_response_dropped_before_its_end_does_not_go_back_to_the_pool() {
        let s = server(false).await;
        let c = client(&s.url);
        let target: Uri = "/v1/chat/completions".parse().unwrap();
        drop(c.post_json(&target, b"{}".to_vec(), &[], "req-1".into()).await.unwrap());
        assert_eq!(c.idle(), 0);
        call(&c).await.unwrap();
        assert_eq!(s.accepted.load(Ordering::SeqCst), 2);
    }

    /// What has arrived is given without a read: an answer that came whole with its head is its
    /// body then its end (the connection back in the pool); a body still arriving is `None` until
    /// a read brings more.
    #[tokio::test]
    async fn a_buffered_chunk_needs_no_read() {
        let target: Uri = "/v1/chat/completions".parse().unwrap();
        let s = server(false).await;
        let c = client(&s.url);
        let mut resp = c.post_json(&target, b"{}".to_vec(), &[], "req-1".into()).await.unwrap();
        let mut body = Vec::new();
        // (The head and the body may come in two reads: one more read at most.)
        let end = loop {
            match resp.buffered_chunk() {
                Some(Ok(Some(b))) => body.extend_from_slice(&b),
                Some(Ok(None)) => break true,
                Some(Err(e)) => panic!("{e}"),
                None => match resp.chunk().await.unwrap() {
                    Some(b) => body.extend_from_slice(&b),
                    None => break false,
                },
            }
        };
        assert!(end, "the end was read, not buffered");
        assert_eq!(body, br#"{"ok":true}"#);
        assert_eq!(c.idle(), 1);

        let s = server_with(false, true).await;
        let c = client(&s.url);
        let mut resp = c.post_json(&target, b"{}".to_vec(), &[], "req-1".into()).await.unwrap();
        let first = match resp.buffered_chunk() {
            Some(first) => first.unwrap(),
            None => resp.chunk().await.unwrap(),
        };
        assert_eq!(first.unwrap(), &b"data: one\n\n"[..]);
        // The terminator comes 20 ms later: nothing is buffered for it yet.
        assert!(resp.buffered_chunk().is_none());
        assert_eq!(resp.chunk().await.unwrap(), None);
        assert_eq!(resp.buffered_chunk().unwrap().unwrap(), None, "the end, again");
    }

    #[tokio::test]
    async fn a_stream_left_after_its_last_event_keeps_its_connection() {
        let s = server_with(false, true).await;
        let c = client(&s.url);
        let target: Uri = "/v1/chat/completions".parse().unwrap();
        let mut resp = c.post_json(&target, b"{}".to_vec(), &[], "req-1".into()).await.unwrap();
        assert_eq!(resp.chunk().await.unwrap().unwrap(), &b"data: one\n\n"[..]);
        // The caller has its last event and moves on; the body's end arrives 20 ms later.
        resp.finish_in_background();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(c.idle(), 1);
        let mut resp = c.post_json(&target, b"{}".to_vec(), &[], "req-2".into()).await.unwrap();
        while resp.chunk().await.unwrap().is_some() {}
        assert_eq!(s.accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_not_used_again() {
        let s = server(true).await;
        let c = client(&s.url);
        call(&c).await.unwrap();
        // Let the close arrive.
        tokio::time::sleep(Duration::from_millis(50)).await;
        for _ in 0..3 {
            call(&c).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(s.accepted.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn a_refused_connect_is_a_connect_error() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = reqwest::Url::parse(&format!("http://{}", l.local_addr().unwrap())).unwrap();
        drop(l);
        let c = client(&url);
        let target: Uri = "/".parse().unwrap();
        assert!(matches!(c.post_json(&target, Vec::<u8>::new(), &[], "r".into()).await, Err(Error::Connect(_))));
    }

    #[tokio::test]
    async fn a_failed_tls_handshake_is_a_connect_error_and_a_silent_one_times_out() {
        // A server that closes at once: the handshake fails.
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = reqwest::Url::parse(&format!("https://{}", l.local_addr().unwrap())).unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                drop(s);
            }
        });
        let target: Uri = "/".parse().unwrap();
        let c = Client::new(&url, HeaderMap::new(), Duration::from_secs(2), 1).unwrap();
        let e = c.post_json(&target, Vec::<u8>::new(), &[], "r".into()).await.err().unwrap();
        assert!(matches!(&e, Error::Connect(m) if m.starts_with("TLS")), "{e}");
        // One that accepts and says nothing: the connect timeout covers the handshake.
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = reqwest::Url::parse(&format!("https://{}", l.local_addr().unwrap())).unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                held.push(s);
            }
        });
        let c = Client::new(&url, HeaderMap::new(), Duration::from_millis(200), 1).unwrap();
        assert!(matches!(c.post_json(&target, Vec::<u8>::new(), &[], "r".into()).await, Err(Error::ConnectTimeout)));
    }

    #[test]
    fn origins_are_checked_and_https_gets_tls() {
        let new = |u: &str| Client::new(&reqwest::Url::parse(u).unwrap(), HeaderMap::new(), Duration::from_secs(1), 2);
        let c = new("https://api.example.com/v1").unwrap();
        assert!(c.origin.tls.is_some());
        assert_eq!((c.origin.host.as_str(), c.origin.port), ("api.example.com", 443));
        assert!(c.fixed_head.starts_with(b"host: api.example.com\r\n"));
        let c = new("http://[::1]:8080").unwrap();
        assert_eq!((c.origin.host.as_str(), c.origin.port), ("::1", 8080));
        assert!(c.fixed_head.starts_with(b"host: [::1]:8080\r\n"));
        assert!(new("http://user:pw@example.com").unwrap_err().contains("credentials"));
        assert!(new("ftp://example.com").is_err());
    }

    /// A server that answers each request with the next of `answers` (raw bytes, written as
    /// given, each piece after the one before with `gap` between), then closes when `close`.
    async fn scripted(answers: Vec<Vec<&'static [u8]>>, gap: Duration, close: bool) -> reqwest::Url {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = reqwest::Url::parse(&format!("http://{}", l.local_addr().unwrap())).unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            for pieces in answers {
                let mut buf = Vec::new();
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    let mut chunk = [0u8; 4096];
                    let n = s.read(&mut chunk).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                for p in pieces {
                    s.write_all(p).await.unwrap();
                    tokio::time::sleep(gap).await;
                }
            }
            if !close {
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        });
        url
    }

    async fn body_of(c: &Client) -> Result<(StatusCode, Vec<u8>), String> {
        let target: Uri = "/v1/x".parse().unwrap();
        let mut resp = c.post_json(&target, b"{}".to_vec(), &[], "req-1".into()).await.map_err(|e| e.to_string())?;
        let mut body = Vec::new();
        while let Some(b) = resp.chunk().await.map_err(|e| e.to_string())? {
            body.extend_from_slice(&b);
        }
        Ok((resp.status, body))
    }

    #[tokio::test]
    async fn chunked_bodies_split_anywhere_are_reassembled_and_the_connection_kept() {
        let pieces: Vec<&'static [u8]> = vec![
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n5;ext=1\r\nhel",
            b"lo\r",
            b"\n6\r\n world\r\n0\r\nx-trailer: 1\r\n",
            b"\r\n",
        ];
        let url =
            scripted(vec![pieces, vec![b"HTTP/1.1 204 No Content\r\n\r\n"]], Duration::from_millis(5), false).await;
        let c = client(&url);
        let (status, body) = body_of(&c).await.unwrap();
        assert_eq!((status, body.as_slice()), (StatusCode::OK, &b"hello world"[..]));
        assert_eq!(c.idle(), 1, "a chunked body read to its end keeps its connection");
        let (status, body) = body_of(&c).await.unwrap();
        assert_eq!((status, body.len()), (StatusCode::NO_CONTENT, 0));
        assert_eq!(c.idle(), 1);
    }

    #[tokio::test]
    async fn informational_heads_are_skipped_and_the_kept_headers_are_given() {
        let url = scripted(
            vec![vec![
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n",
                b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nx-other: 1\r\ncontent-length: 2\r\n\r\n{}",
            ]],
            Duration::ZERO,
            false,
        )
        .await;
        let c = client(&url);
        let target: Uri = "/".parse().unwrap();
        let mut resp = c.post_json(&target, Vec::<u8>::new(), &[], "r".into()).await.unwrap();
        assert_eq!(resp.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers.get("retry-after").unwrap(), "7");
        assert!(resp.headers.get("x-other").is_none(), "only the kept headers are kept");
        assert_eq!(resp.chunk().await.unwrap().unwrap(), &b"{}"[..]);
        assert!(resp.chunk().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_body_until_close_is_read_to_the_end_and_its_connection_not_kept() {
        let url =
            scripted(vec![vec![b"HTTP/1.1 200 OK\r\n\r\npart one, ", b"part two"]], Duration::from_millis(5), true)
                .await;
        let c = client(&url);
        assert_eq!(body_of(&c).await.unwrap().1, b"part one, part two");
        assert_eq!(c.idle(), 0);
    }

    #[tokio::test]
    async fn connection_close_and_http_1_0_answers_are_not_pooled() {
        for head in [
            &b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"[..],
            b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
        ] {
            let url = scripted(vec![vec![head]], Duration::ZERO, false).await;
            let c = client(&url);
            assert_eq!(body_of(&c).await.unwrap().1, b"ok");
            assert_eq!(c.idle(), 0, "{}", String::from_utf8_lossy(head));
        }
    }

    #[tokio::test]
    async fn a_body_cut_short_is_an_error_not_an_answer() {
        for pieces in [
            vec![&b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort"[..]],
            vec![b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"],
        ] {
            let url = scripted(vec![pieces], Duration::ZERO, true).await;
            let c = client(&url);
            let e = body_of(&c).await.unwrap_err();
            assert!(e.contains("ended early"), "{e}");
        }
        let url = scripted(vec![vec![]], Duration::ZERO, true).await;
        let e = body_of(&client(&url)).await.unwrap_err();
        assert!(e.contains("closed before a response"), "{e}");
    }

    #[tokio::test]
    async fn malformed_answers_are_errors() {
        for (pieces, want) in [
            (vec![&b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok"[..]], "conflicting"),
            (vec![b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"], "invalid chunk size"),
            (vec![b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nokX\r\n"], "CRLF"),
            (vec![b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\nok\r\n"], "without CRLF"),
            (vec![b"SMTP ready\r\n\r\n"], "invalid response head"),
        ] {
            let url = scripted(vec![pieces], Duration::ZERO, false).await;
            let e = body_of(&client(&url)).await.unwrap_err();
            assert!(e.contains(want), "{e} should say {want}");
        }
    }

    #[test]
    fn heads_are_framed_by_the_rules_of_rfc_9112() {
        let head = |s: &str| parse_head(s.as_bytes()).unwrap().unwrap();
        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 42, 42\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Length(42), true));
        // A transfer coding wins over a length, and such a connection is not kept.
        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: gzip, chunked\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Chunked(Chunked::Size), false));
        let h = head("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::UntilClose, false));
        assert_eq!(head("HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n").framing, Framing::Done);
        assert!(head("HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 1\r\n\r\n").keep_alive);
        assert!(!head("HTTP/1.1 200 OK\r\nconnection: Close\r\ncontent-length: 1\r\n\r\n").keep_alive);
        let h = head("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After-Ms: 250\r\ncontent-length: 0\r\n\r\n");
        assert_eq!(h.headers.get("retry-after-ms").unwrap(), "250");
        assert_eq!(h.headers.get(http::header::CONTENT_TYPE).unwrap(), "application/json");
        assert_eq!(h.framing, Framing::Done);
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-").unwrap().is_none(), "a partial head waits");
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 1, 2\r\n\r\n").is_err());
        let huge = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD_BYTES + 1));
        assert!(parse_head(huge.as_bytes()).unwrap_err().contains("too large"));
    }

    #[test]
    fn request_heads_carry_the_fixed_headers_the_id_and_the_length() {
        let url = reqwest::Url::parse("http://127.0.0.1:9/v1").unwrap();
        let c = client(&url);
        let target: Uri = "/v1/chat/completions?x=1".parse().unwrap();
        let head = String::from_utf8(c.request_head(&target, "application/json", 17, &[], "req-1".into())).unwrap();
        assert_eq!(
            head,
            "POST /v1/chat/completions?x=1 HTTP/1.1\r\nhost: 127.0.0.1:9\r\nauthorization: Bearer sk-upstream\r\n\
             content-type: application/json\r\nx-request-id: req-1\r\ncontent-length: 17\r\n\r\n"
        );
        let head = String::from_utf8(c.request_head(&target, "application/json", 0, &[], "bad\r\nid".into())).unwrap();
        assert!(!head.contains("x-request-id"), "{head}");
        let traced = Hop {
            request_id: "r",
            traceparent: Some(b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            io: None,
        };
        let head = String::from_utf8(c.request_head(&target, "application/json", 0, &[], traced)).unwrap();
        assert!(
            head.contains("\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n"),
            "{head}"
        );
        assert!(!format!("{c:?}").contains("sk-upstream"), "the key is never printed");
    }

    /// Decodes `wire` given in pieces split at `cuts`, as reads would hand them over.
    fn decode_in_pieces(wire: &[u8], cuts: &[usize]) -> io::Result<Vec<u8>> {
        let mut framing = Framing::Chunked(Chunked::Size);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut at = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.push(wire.len());
        for cut in cuts {
            buf.extend_from_slice(&wire[at..cut.max(at)]);
            at = cut.max(at);
            loop {
                match framing.step(&mut buf)? {
                    Step::Data(b) => out.extend_from_slice(&b),
                    Step::End => return Ok(out),
                    Step::More => break,
                }
            }
        }
        Err(io::ErrorKind::UnexpectedEof.into())
    }

    proptest::proptest! {
        #[test]
        fn a_chunked_body_decodes_the_same_however_it_is_split(
            chunks in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 1..40), 0..8),
            cuts in proptest::collection::vec(0usize..1000, 0..12),
        ) {
            let mut wire = Vec::new();
            for (i, c) in chunks.iter().enumerate() {
                wire.extend_from_slice(format!("{:x}{}\r\n", c.len(), if i % 2 == 1 { ";ext=v" } else { "" }).as_bytes());
                wire.extend_from_slice(c);
                wire.extend_from_slice(b"\r\n");
            }
            wire.extend_from_slice(b"0\r\ntrailer: t\r\n\r\n");
            let got = decode_in_pieces(&wire, &cuts).unwrap();
            proptest::prop_assert_eq!(got, chunks.concat());
        }
    }
}
