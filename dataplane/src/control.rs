//! Control-plane mode (`--control-plane <url> --node-token <token>`): the data plane follows the
//! control plane's versions over a websocket, keeps the last applied one on disk (encrypted) to
//! start from when the control plane is unreachable, and ships its usage spool to it.
//!
//! Rules: a version is applied only if it compiles (`snapshot::build`, the same compiler the
//! control plane validated it with); an empty document never replaces a non-empty one; a version
//! not newer than the one served is never applied (no going back). Each outcome is reported
//! (`applied` / `rejected`). Reconnects back off exponentially (200 ms to 10 s) with jitter.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use ax_protocol::config::ConfigSpec;
use ax_protocol::snapshot::{Document, FromNode, ToNode};
use futures_util::{SinkExt, StreamExt};
use sha2::{Digest, Sha256};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::config::snapshot::{self, ConfigError, Snapshot};
use crate::App;

/// Where the control plane is and who this node is.
#[derive(Clone)]
pub struct Link {
    /// `http://host:port` of each control-plane replica (or one load balancer in front of them),
    /// tried in turn: a replica that goes away is replaced by the next at once.
    pub urls: Vec<String>,
    pub token: String,
    /// Holds `last-known-good.bin` (and the spool, unless the config names one).
    pub state_dir: PathBuf,
}

/// The routing part of the config from `doc`, everything else (server, metering) from `base`.
/// The document is moved in and handed back (it is what the node stores as last-known-good):
/// a 10,000-alias document is not copied.
pub fn compile(
    base: &ConfigSpec,
    doc: Document,
    version: u64,
    prev: Option<&Snapshot>,
) -> (Result<Snapshot, ConfigError>, Document) {
    let Document { upstreams, routes, tenants, groups } = doc;
    let spec =
        ConfigSpec { upstreams, routes, tenants, groups, server: base.server.clone(), metering: base.metering.clone() };
    let snap = snapshot::build(&spec, version, &|name| std::env::var(name).ok(), prev);
    let ConfigSpec { upstreams, routes, tenants, groups, .. } = spec;
    (snap, Document { upstreams, routes, tenants, groups })
}

// ---------- last known good ----------

const LKG_FILE: &str = "last-known-good.bin";
const LKG_MAGIC: &[u8] = b"AXLKG1";

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Stored {
    pub version: u64,
    pub hash: String,
    pub document: Document,
}

fn lkg_cipher(token: &str) -> Option<Aes256Gcm> {
    let key = Sha256::digest(format!("ax-lkg-v1:{token}").as_bytes());
    Aes256Gcm::new_from_slice(&key).ok()
}

/// The last applied version, if one is on disk and opens with this node's token.
pub fn load_last_known_good(link: &Link) -> Option<Stored> {
    let path = link.state_dir.join(LKG_FILE);
    let bytes = std::fs::read(&path).ok()?;
    let body = bytes.strip_prefix(LKG_MAGIC)?;
    if body.len() < 12 {
        return None;
    }
    let (nonce, ct) = body.split_at(12);
    let plain = lkg_cipher(&link.token)?.decrypt(Nonce::from_slice(nonce), Payload { msg: ct, aad: LKG_MAGIC }).ok();
    match plain.and_then(|p| serde_json::from_slice::<Stored>(&p).ok()) {
        Some(s) => Some(s),
        None => {
            tracing::error!(path = %path.display(), "last-known-good snapshot does not open with this node token; ignored");
            None
        }
    }
}

/// Writes the applied version atomically (temp file, fsync, rename), encrypted under a key
/// derived from the node token: upstream keys never reach the disk in plaintext.
fn save_last_known_good(link: &Link, stored: &Stored) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(&link.state_dir)?;
    let plain = serde_json::to_vec(stored).map_err(std::io::Error::other)?;
    let nonce: [u8; 12] = rand::random();
    let cipher = lkg_cipher(&link.token).ok_or_else(|| std::io::Error::other("cipher"))?;
    let ct = cipher
        .encrypt(Nonce::from_slice(&nonce), Payload { msg: &plain, aad: LKG_MAGIC })
        .map_err(|_| std::io::Error::other("encryption failed"))?;
    let tmp = link.state_dir.join(format!("{LKG_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(LKG_MAGIC)?;
    f.write_all(&nonce)?;
    f.write_all(&ct)?;
    f.sync_all()?;
    std::fs::rename(&tmp, link.state_dir.join(LKG_FILE))?;
    if let Ok(d) = std::fs::File::open(&link.state_dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

// ---------- following versions ----------

/// Runs for the life of the process: connect, follow, reconnect. A session that ends after it
/// was up (the replica shut down and said so, or died) moves on to the next URL at once; connect
/// failures try every URL in turn, then back off exponentially (200 ms to 10 s, full jitter: a
/// restarted control plane is not met by every node at once).
pub async fn follow(app: Arc<App>, link: Link, base: ConfigSpec) {
    let mut backoff = Duration::from_millis(200);
    let mut at = 0;
    let mut failures = 0usize;
    loop {
        let url = &link.urls[at % link.urls.len()];
        let started = std::time::Instant::now();
        let (was_up, result) = session(&app, &link, url, &base).await;
        match result {
            Ok(()) => tracing::warn!(url = %url, "control plane closed the connection"),
            Err(e) => tracing::warn!(url = %url, error = %e, "control plane connection failed"),
        }
        at = (at + 1) % link.urls.len();
        // Up for a second at least: a replica that went away, not one that refuses at once.
        if was_up && started.elapsed() >= Duration::from_secs(1) {
            failures = 0;
            backoff = Duration::from_millis(200);
            continue;
        }
        failures += 1;
        if failures % link.urls.len() != 0 {
            continue;
        }
        let wait = backoff.mul_f64(0.5 + rand::random::<f64>() * 0.5);
        tokio::time::sleep(wait).await;
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

fn ws_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    let ws = if let Some(rest) = base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        base.to_owned()
    };
    format!("{ws}/api/v1/nodes/connect")
}

/// How often the node sends its health table.
const HEALTH_EVERY: Duration = Duration::from_secs(5);

/// One websocket session with the replica at `url`: whether it was up (connected and said
/// hello), and how it ended.
async fn session(app: &App, link: &Link, url: &str, base: &ConfigSpec) -> (bool, Result<(), String>) {
    let ws = match connect(link, url).await {
        Ok(ws) => ws,
        Err(e) => return (false, Err(e)),
    };
    let (mut tx, mut rx) = ws.split();
    let send = |m: FromNode| Message::Text(serde_json::to_string(&m).unwrap_or_default().into());
    if let Err(e) = tx.send(send(FromNode::Hello { version: app.store.load().version })).await {
        return (false, Err(e.to_string()));
    }
    tracing::info!(url = %url, "connected to the control plane");
    (true, follow_session(app, link, base, &mut tx, &mut rx).await)
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(link: &Link, url: &str) -> Result<Ws, String> {
    let mut req = ws_url(url).into_client_request().map_err(|e| e.to_string())?;
    let auth = format!("Bearer {}", link.token).parse().map_err(|_| "the node token is not a valid header value")?;
    req.headers_mut().insert(http::header::AUTHORIZATION, auth);
    let (ws, _) = tokio::time::timeout(Duration::from_secs(5), tokio_tungstenite::connect_async(req))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    if let tokio_tungstenite::MaybeTlsStream::Plain(s) = ws.get_ref() {
        let _ = s.set_nodelay(true);
    }
    Ok(ws)
}

async fn follow_session(
    app: &App,
    link: &Link,
    base: &ConfigSpec,
    tx: &mut futures_util::stream::SplitSink<Ws, Message>,
    rx: &mut futures_util::stream::SplitStream<Ws>,
) -> Result<(), String> {
    let send = |m: FromNode| Message::Text(serde_json::to_string(&m).unwrap_or_default().into());
    let mut health = tokio::time::interval(HEALTH_EVERY);
    loop {
        // The control plane pings every 10 s; silence for 35 s means the link is dead.
        let next = tokio::time::timeout(Duration::from_secs(35), rx.next());
        let msg = tokio::select! {
            m = next => match m {
                Err(_) => return Err("no message or ping for 35 s".to_owned()),
                Ok(None) => return Ok(()),
                Ok(Some(m)) => m.map_err(|e| e.to_string())?,
            },
            _ = health.tick() => {
                let table = crate::metering::meter::health_table(&app.store.load());
                tx.send(send(FromNode::Health { health: table })).await.map_err(|e| e.to_string())?;
                continue;
            }
        };
        let text = match msg {
            Message::Text(t) => t,
            Message::Close(frame) => {
                if let Some(f) = frame {
                    tracing::info!(code = u16::from(f.code), reason = %f.reason, "the control plane closed the session");
                }
                return Ok(());
            }
            _ => continue,
        };
        let received = std::time::Instant::now();
        match serde_json::from_str::<ToNode>(&text) {
            Ok(ToNode::Snapshot { version, hash, keys, mut document }) => {
                for u in &mut document.upstreams {
                    if let Some(k) = keys.get(&u.name) {
                        u.api_key = Some(k.clone());
                    }
                }
                let decode_ms = received.elapsed().as_secs_f64() * 1000.0;
                let (reply, stored) = apply(app, base, version, hash, document);
                let swapped_ms = received.elapsed().as_secs_f64() * 1000.0;
                // The answer first (the version is being served), then the durable copy.
                tx.send(send(reply)).await.map_err(|e| e.to_string())?;
                if let Some(stored) = stored {
                    if let Err(e) = save_last_known_good(link, &stored) {
                        tracing::error!(error = %e, "cannot store the last-known-good snapshot");
                    }
                }
                tracing::info!(
                    version,
                    bytes = text.len(),
                    decode_ms,
                    swapped_ms,
                    total_ms = received.elapsed().as_secs_f64() * 1000.0,
                    "snapshot message handled"
                );
            }
            Ok(ToNode::Fleet { replicas }) => {
                if let Some(f) = &app.fleet {
                    f.set_live_replicas(replicas);
                }
            }
            Err(e) => tracing::error!(error = %e, "unreadable message from the control plane"),
        }
    }
}

/// Validates and swaps in one pushed version: the answer for the control plane, and what to store
/// as last-known-good when it was applied.
fn apply(app: &App, base: &ConfigSpec, version: u64, hash: String, document: Document) -> (FromNode, Option<Stored>) {
    let current = app.store.load();
    if version <= current.version {
        tracing::info!(version, serving = current.version, "pushed version is not newer; kept the current one");
        let reply = if version == current.version {
            FromNode::Applied { version }
        } else {
            FromNode::Rejected { version, error: format!("older than the version served ({})", current.version) }
        };
        return (reply, None);
    }
    let started = std::time::Instant::now();
    let (snap, document) = compile(base, document, version, Some(&current));
    match snap.and_then(|s| s.replacing(&current)) {
        Ok(snap) => {
            app.store.swap(snap);
            let compile_ms = started.elapsed().as_secs_f64() * 1000.0;
            tracing::info!(version, hash = %hash, compile_ms, "configuration version applied");
            (FromNode::Applied { version }, Some(Stored { version, hash, document }))
        }
        Err(e) => {
            tracing::error!(version, error = %e, "refused a configuration version; the current one keeps serving");
            (FromNode::Rejected { version, error: e.to_string() }, None)
        }
    }
}

// ---------- usage shipping ----------

/// The spool's sink in control-plane mode: batches POSTed to `/api/v1/usage`; the control
/// plane's 200 (after its transaction committed) is the acknowledgement. A batch a replica does
/// not take is offered to the next one (ingestion is idempotent by request id).
pub struct ControlPlaneSink {
    urls: Vec<String>,
    /// The replica that took the last batch: tried first.
    at: usize,
    token: String,
    rt: tokio::runtime::Runtime,
    client: reqwest::Client,
    buf: Vec<u8>,
}

/// A batch is sent once it reaches this size (more records wait for the commit at the pass's end).
const BATCH_BYTES: usize = 4 * 1024 * 1024;

impl ControlPlaneSink {
    pub fn new(link: &Link) -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let client = rt
            .block_on(async { reqwest::Client::builder().timeout(Duration::from_secs(15)).tcp_nodelay(true).build() });
        let client = client.map_err(std::io::Error::other)?;
        Ok(Self {
            urls: link.urls.iter().map(|u| format!("{}/api/v1/usage", u.trim_end_matches('/'))).collect(),
            at: 0,
            token: link.token.clone(),
            rt,
            client,
            buf: Vec::new(),
        })
    }

    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let body = bytes::Bytes::from(std::mem::take(&mut self.buf));
        let mut last = None;
        for i in 0..self.urls.len() {
            let at = (self.at + i) % self.urls.len();
            let req = self
                .client
                .post(&self.urls[at])
                .bearer_auth(&self.token)
                .header("content-type", "application/x-ndjson")
                .body(body.clone());
            // `send` arms its timeout when called, so it must be called inside the runtime.
            match self.rt.block_on(async { req.send().await }) {
                Ok(r) if r.status().is_success() => {
                    self.at = at;
                    return Ok(());
                }
                Ok(r) => last = Some(format!("{} answered {} to a usage batch", self.urls[at], r.status())),
                Err(e) => last = Some(format!("{}: {e}", self.urls[at])),
            }
        }
        Err(std::io::Error::other(last.unwrap_or_else(|| "no control plane URL".to_owned())))
    }
}

impl crate::metering::spool::Sink for ControlPlaneSink {
    fn deliver(&mut self, lines: &[&[u8]]) -> std::io::Result<()> {
        for l in lines {
            self.buf.extend_from_slice(l);
            self.buf.push(b'\n');
        }
        if self.buf.len() >= BATCH_BYTES {
            self.send()?;
        }
        Ok(())
    }

    fn commit(&mut self) -> std::io::Result<()> {
        self.send()
    }

    fn abort(&mut self) {
        self.buf.clear();
    }
}

/// The spool directory in control-plane mode when the config names none.
pub fn default_spool(link: &Link) -> PathBuf {
    link.state_dir.join("spool")
}
