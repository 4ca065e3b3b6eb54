//! The upstream HTTP client: HTTP/1.1 keep-alive connections, pooled per upstream and per serving
//! thread, written on `hyper::client::conn` directly.
//!
//! Why not reqwest (used here until issue 7): its legacy hyper-util client wraps each call in
//! several boxed service layers, moves large futures around (a tenth of the data plane's user-space
//! instructions went to those copies under callgrind) and re-parses every response's URL. A proxy
//! that sends every request to one of a few known origins needs much less: a stack of idle
//! connections per thread, a connect with a timeout, and TLS.
//!
//! - **Pool.** LIFO, so hot connections stay hot and the rest age out. A connection goes back to
//!   the pool only when its response body was read to the end; a response dropped early (a caller
//!   that went away) closes it. Idle connections older than [`IDLE_TIMEOUT`] are dropped when the
//!   pool is next touched.
//! - **Stale connections.** A pooled connection the server closed while idle is skipped. A request
//!   refused by a connection before any byte was written is retried on another (hyper hands it
//!   back); a request that was written is never sent twice.
//! - **TLS.** rustls with the Mozilla roots (`webpki-roots`), ALPN `http/1.1`.

use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;
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

type Sender = SendRequest<Full<Bytes>>;

/// Why a request got no response.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connect timed out")]
    ConnectTimeout,
    #[error("connect failed: {0}")]
    Connect(String),
    #[error("request failed: {0}")]
    Request(hyper::Error),
}

/// The client of one upstream origin (scheme, host, port).
pub struct Client {
    origin: Origin,
    /// Headers sent on every request (credentials among them), then `content-type` and the id.
    headers: HeaderMap,
    connect_timeout: Duration,
    /// One stack of idle connections per serving thread.
    pools: Arc<[Mutex<Vec<Idle>>]>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The headers carry the upstream key: never printed.
        f.debug_struct("Client").field("host", &self.origin.host).field("port", &self.origin.port).finish()
    }
}

struct Origin {
    host: String,
    port: u16,
    host_header: HeaderValue,
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

struct Idle {
    sender: Sender,
    since: Instant,
}

/// A response whose body is read chunk by chunk; read to the end, its connection goes back to the
/// pool.
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: Incoming,
    lease: Option<Lease>,
}

struct Lease {
    sender: Sender,
    pools: Arc<[Mutex<Vec<Idle>>]>,
    slot: usize,
}

impl Client {
    /// `base` is an `http://` or `https://` URL; only its origin is used here (paths are per
    /// request). `threads` is the number of serving threads.
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
        Ok(Self {
            origin: Origin { host, port, host_header, tls },
            headers,
            connect_timeout,
            pools: (0..threads.max(1)).map(|_| Mutex::new(Vec::new())).collect(),
        })
    }

    /// POSTs a JSON body to `path` (origin-form: path and query) and waits for the response head.
    pub async fn post_json(&self, path: &Uri, body: Vec<u8>, request_id: &str) -> Result<Response, Error> {
        let mut req = Request::new(Full::new(Bytes::from(body)));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = path.clone();
        let h = req.headers_mut();
        h.reserve(self.headers.len() + 3);
        h.insert(HOST, self.origin.host_header.clone());
        for (name, value) in &self.headers {
            h.insert(name, value.clone());
        }
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Ok(id) = HeaderValue::from_str(request_id) {
            h.insert("x-request-id", id);
        }

        let slot = crate::worker::current() % self.pools.len();
        // Pooled connections first; a request one of them refused unsent moves on to the next.
        for _ in 0..MAX_STALE_TRIES {
            let Some(mut sender) = self.take(slot) else { break };
            if sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok(self.response(resp, sender, slot)),
                Err(mut e) => match e.take_message() {
                    Some(back) => req = back,
                    None => return Err(Error::Request(e.into_error())),
                },
            }
        }
        let mut sender = self.connect().await?;
        let resp = sender.send_request(req).await.map_err(Error::Request)?;
        Ok(self.response(resp, sender, slot))
    }

    fn response(&self, resp: http::Response<Incoming>, sender: Sender, slot: usize) -> Response {
        let (parts, body) = resp.into_parts();
        Response {
            status: parts.status,
            headers: parts.headers,
            body,
            lease: Some(Lease { sender, pools: self.pools.clone(), slot }),
        }
    }

    fn take(&self, slot: usize) -> Option<Sender> {
        let mut idle = self.pools[slot].lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(c) = idle.pop() {
            if c.since.elapsed() >= IDLE_TIMEOUT {
                // Everything below is older still.
                idle.clear();
            } else if !c.sender.is_closed() {
                return Some(c.sender);
            }
        }
        None
    }

    async fn connect(&self) -> Result<Sender, Error> {
        let o = &self.origin;
        let connect = async {
            let tcp = TcpStream::connect((o.host.as_str(), o.port)).await.map_err(|e| Error::Connect(e.to_string()))?;
            tcp.set_nodelay(true).map_err(|e| Error::Connect(e.to_string()))?;
            match &o.tls {
                None => handshake(tcp).await,
                Some((connector, name)) => {
                    let tls =
                        connector.connect(name.clone(), tcp).await.map_err(|e| Error::Connect(format!("TLS: {e}")))?;
                    handshake(tls).await
                }
            }
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

async fn handshake<T>(io: T) -> Result<Sender, Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) =
        http1::Builder::new().handshake(TokioIo::new(io)).await.map_err(|e| Error::Connect(e.to_string()))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "upstream connection closed");
        }
    });
    Ok(sender)
}

impl Response {
    /// The next chunk of the body; `None` at its end (and the connection is back in the pool).
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, hyper::Error> {
        loop {
            match self.body.frame().await {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if data.is_empty() => {}
                    Ok(data) => return Ok(Some(data)),
                    Err(_trailers) => {}
                },
                Some(Err(e)) => {
                    self.lease = None;
                    return Err(e);
                }
                None => {
                    if let Some(lease) = self.lease.take() {
                        lease.release();
                    }
                    return Ok(None);
                }
            }
        }
    }
}

impl Response {
    /// Hands what is left of the body to a background read, so the connection goes back to the
    /// pool: a stream's decoder sees its last event (`[DONE]`) before the body's end (a chunked
    /// body's last chunk) arrives. Dropping the response instead would close a connection that
    /// is good for the next request, and every stream would pay a new connect (and TLS handshake).
    /// Gives up (closing the connection) past [`DRAIN_BYTES`] or [`DRAIN_TIME`].
    pub fn finish_in_background(mut self) {
        if self.lease.is_none() {
            return;
        }
        // Usually the end is already here: no task needed.
        match futures_util::FutureExt::now_or_never(self.body.frame()) {
            Some(None) => {
                if let Some(lease) = self.lease.take() {
                    lease.release();
                }
                return;
            }
            Some(Some(Ok(_))) | None => {}
            Some(Some(Err(_))) => return,
        }
        tokio::spawn(async move {
            let drain = async {
                let mut read = 0;
                while let Ok(Some(c)) = self.chunk().await {
                    read += c.len();
                    if read > DRAIN_BYTES {
                        self.lease = None;
                        return;
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
        });
    }
}

impl Lease {
    fn release(self) {
        if self.sender.is_closed() {
            return;
        }
        let mut idle = self.pools[self.slot].lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        // The oldest sit at the bottom: drop the ones past their time.
        let expired = idle.iter().take_while(|c| now.duration_since(c.since) >= IDLE_TIMEOUT).count();
        if expired > 0 {
            idle.drain(..expired);
        }
        if idle.len() < MAX_IDLE {
            idle.push(Idle { sender: self.sender, since: now });
        }
    }
}

/// One rustls configuration per process: parsing the root store is not free.
fn tls_config() -> Result<Arc<ClientConfig>, String> {
    static CONFIG: std::sync::OnceLock<Result<Arc<ClientConfig>, String>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
            let mut config = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
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
        let mut resp = c.post_json(&target, b"{}".to_vec(), "req-1").await.map_err(|e| e.to_string())?;
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
        drop(c.post_json(&target, b"{}".to_vec(), "req-1").await.unwrap());
        assert_eq!(c.idle(), 0);
        call(&c).await.unwrap();
        assert_eq!(s.accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_stream_left_after_its_last_event_keeps_its_connection() {
        let s = server_with(false, true).await;
        let c = client(&s.url);
        let target: Uri = "/v1/chat/completions".parse().unwrap();
        let mut resp = c.post_json(&target, b"{}".to_vec(), "req-1").await.unwrap();
        assert_eq!(resp.chunk().await.unwrap().unwrap(), &b"data: one\n\n"[..]);
        // The caller has its last event and moves on; the body's end arrives 20 ms later.
        resp.finish_in_background();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(c.idle(), 1);
        let mut resp = c.post_json(&target, b"{}".to_vec(), "req-2").await.unwrap();
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
        assert!(matches!(c.post_json(&target, Vec::new(), "r").await, Err(Error::Connect(_))));
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
        let e = c.post_json(&target, Vec::new(), "r").await.err().unwrap();
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
        assert!(matches!(c.post_json(&target, Vec::new(), "r").await, Err(Error::ConnectTimeout)));
    }

    #[test]
    fn origins_are_checked_and_https_gets_tls() {
        let new = |u: &str| Client::new(&reqwest::Url::parse(u).unwrap(), HeaderMap::new(), Duration::from_secs(1), 2);
        let c = new("https://api.example.com/v1").unwrap();
        assert!(c.origin.tls.is_some());
        assert_eq!((c.origin.host.as_str(), c.origin.port), ("api.example.com", 443));
        assert_eq!(c.origin.host_header, "api.example.com");
        let c = new("http://[::1]:8080").unwrap();
        assert_eq!((c.origin.host.as_str(), c.origin.port), ("::1", 8080));
        assert_eq!(c.origin.host_header, "[::1]:8080");
        assert!(new("http://user:pw@example.com").unwrap_err().contains("credentials"));
        assert!(new("ftp://example.com").is_err());
    }
}
