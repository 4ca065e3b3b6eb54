//! The ax test kit: fake upstreams that speak each provider's protocol, and ways to run the
//! gateway (in-process or as the real binary) against them.
//!
//! Fakes bind `127.0.0.1:0`, record every request they receive, count hits, and answer with a
//! scripted `Reply`: a JSON body, or an SSE body sent as arbitrary byte pieces (so tests decide
//! where socket writes split events, lines, `\r\n` pairs and multi-byte characters).

#![expect(
    clippy::expect_used,
    clippy::panic,
    reason = "the test kit reports failures by panicking, like the tests that use it"
)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::Value;

pub mod corpus;
pub mod cp;
pub mod wire;

/// One request as the fake upstream saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Value,
    /// The body's bytes as they arrived.
    pub raw: Bytes,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// What a fake upstream answers.
#[derive(Debug, Clone)]
pub enum Reply {
    Json {
        status: u16,
        body: Value,
    },
    /// Raw body bytes with a content type (for malformed answers).
    Raw {
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
    },
    /// An SSE body written piece by piece, with `delay` before each piece after the first.
    Sse {
        pieces: Vec<Bytes>,
        delay: Duration,
    },
    /// A JSON body with extra response headers (e.g. `retry-after`).
    WithHeaders {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Value,
    },
    /// The inner reply, after a delay (the request counts as in flight meanwhile).
    Delayed(Duration, Box<Reply>),
    /// Never sends response headers.
    Hang,
    /// Sends these SSE pieces, then goes silent with the connection open.
    SseThenStall(Vec<Bytes>),
    /// Sends these SSE pieces, then aborts the connection mid-body.
    SseThenReset(Vec<Bytes>),
}

impl Reply {
    pub fn json(body: Value) -> Self {
        Self::Json { status: 200, body }
    }
    pub fn status(status: u16, body: Value) -> Self {
        Self::Json { status, body }
    }
    /// An SSE body split into pieces of the given sizes, cycling through them.
    pub fn sse_split(wire: &str, sizes: &[usize]) -> Self {
        Self::Sse { pieces: split(wire.as_bytes(), sizes), delay: Duration::ZERO }
    }
    pub fn sse(wire: &str) -> Self {
        Self::sse_split(wire, &[usize::MAX])
    }
    /// One piece per event, `delay` apart (a paced stream).
    pub fn sse_paced(events: Vec<String>, delay: Duration) -> Self {
        Self::Sse { pieces: events.into_iter().map(Bytes::from).collect(), delay }
    }
}

/// Splits bytes into pieces whose sizes cycle through `sizes` (byte-exact, ignoring UTF-8).
pub fn split(bytes: &[u8], sizes: &[usize]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut k = 0;
    while i < bytes.len() {
        let n = sizes[k % sizes.len()].max(1).min(bytes.len() - i);
        out.push(Bytes::copy_from_slice(&bytes[i..i + n]));
        i += n;
        k += 1;
    }
    out
}

type Handler = dyn Fn(&Recorded) -> Reply + Send + Sync;

struct FakeState {
    handler: Box<Handler>,
    requests: Mutex<Vec<Recorded>>,
    hits: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// Streams the client (the gateway) dropped before the last piece was sent.
    cancelled: AtomicUsize,
    /// TCP connections accepted.
    connections: AtomicUsize,
}

/// A fake upstream server. Dropping it does not stop the server task (it dies with the runtime).
#[derive(Clone)]
pub struct FakeUpstream {
    pub addr: SocketAddr,
    state: Arc<FakeState>,
}

impl FakeUpstream {
    pub async fn start(handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Self {
        let state = Arc::new(FakeState {
            handler: Box::new(handler),
            requests: Mutex::new(Vec::new()),
            hits: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            cancelled: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind fake upstream");
        let addr = listener.local_addr().expect("fake upstream addr");
        let app = axum::Router::new().fallback(fake_handler).with_state(state.clone());
        let counted = state.clone();
        let listener = axum::serve::ListenerExt::tap_io(listener, move |_| {
            counted.connections.fetch_add(1, Ordering::SeqCst);
        });
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, state }
    }

    /// Always answers the same.
    pub async fn fixed(reply: Reply) -> Self {
        Self::start(move |_| reply.clone()).await
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
    pub fn hits(&self) -> usize {
        self.state.hits.load(Ordering::SeqCst)
    }
    /// The most requests this fake was answering at the same time.
    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }
    /// TCP connections the gateway opened to this fake.
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }
    pub fn cancelled(&self) -> usize {
        self.state.cancelled.load(Ordering::SeqCst)
    }
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().expect("requests lock").clone()
    }
    pub fn last(&self) -> Recorded {
        self.requests().pop().expect("the fake upstream saw no request")
    }
}

async fn fake_handler(State(state): State<Arc<FakeState>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let rec = Recorded {
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        raw: body,
    };
    state.hits.fetch_add(1, Ordering::SeqCst);
    let reply = (state.handler)(&rec);
    state.requests.lock().expect("requests lock").push(rec);
    let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    state.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let _in_flight = InFlight(state.clone());
    respond(state.clone(), reply).await
}

struct InFlight(Arc<FakeState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn respond(
    state: Arc<FakeState>,
    reply: Reply,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send>> {
    Box::pin(async move {
        match reply {
            Reply::WithHeaders { status, headers, body } => {
                let mut b = Response::builder()
                    .status(StatusCode::from_u16(status).unwrap_or(StatusCode::OK))
                    .header("content-type", "application/json");
                for (k, v) in headers {
                    b = b.header(k, v);
                }
                b.body(Body::from(body.to_string())).expect("response")
            }
            Reply::Delayed(d, inner) => {
                tokio::time::sleep(d).await;
                respond(state, *inner).await
            }
            Reply::Hang => std::future::pending().await,
            Reply::SseThenStall(pieces) => {
                let s = futures_util::stream::iter(pieces.into_iter().map(Ok::<_, std::convert::Infallible>))
                    .chain(futures_util::stream::pending());
                Response::builder()
                    .status(200)
                    .header("content-type", "text/event-stream")
                    .body(Body::from_stream(s))
                    .expect("response")
            }
            Reply::SseThenReset(pieces) => {
                let s = futures_util::stream::iter(pieces.into_iter().map(Ok::<_, std::io::Error>)).chain(
                    futures_util::stream::once(async {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Err(std::io::Error::other("reset"))
                    }),
                );
                Response::builder()
                    .status(200)
                    .header("content-type", "text/event-stream")
                    .body(Body::from_stream(s))
                    .expect("response")
            }
            Reply::Json { status, body } => Response::builder()
                .status(StatusCode::from_u16(status).unwrap_or(StatusCode::OK))
                .header("content-type", "application/json")
                .body(Body::from(body.to_string()))
                .expect("response"),
            Reply::Raw { status, content_type, body } => Response::builder()
                .status(StatusCode::from_u16(status).unwrap_or(StatusCode::OK))
                .header("content-type", content_type)
                .body(Body::from(body))
                .expect("response"),
            Reply::Sse { pieces, delay } => {
                let guard = CancelGuard { state: state.clone(), finished: Arc::new(AtomicBool::new(false)) };
                let total = pieces.len();
                let s = futures_util::stream::unfold(
                    (pieces.into_iter().enumerate(), guard),
                    move |(mut it, guard)| async move {
                        let (i, piece) = it.next()?;
                        if i > 0 {
                            if delay.is_zero() {
                                // Give the writer a chance to flush so pieces reach the socket apart.
                                if i % 16 == 0 {
                                    tokio::time::sleep(Duration::from_micros(200)).await;
                                } else {
                                    tokio::task::yield_now().await;
                                }
                            } else {
                                tokio::time::sleep(delay).await;
                            }
                        }
                        if i + 1 == total {
                            guard.finished.store(true, Ordering::SeqCst);
                        }
                        Some((Ok::<_, std::convert::Infallible>(piece), (it, guard)))
                    },
                );
                Response::builder()
                    .status(200)
                    .header("content-type", "text/event-stream")
                    .body(Body::from_stream(s))
                    .expect("response")
            }
        }
    })
}

struct CancelGuard {
    state: Arc<FakeState>,
    finished: Arc<AtomicBool>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.finished.load(Ordering::SeqCst) {
            self.state.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Running the gateway

/// A gateway running inside the test process.
pub struct Gateway {
    pub url: String,
    pub app: Arc<ax_dataplane::App>,
}

impl Gateway {
    pub async fn start(yaml: &str) -> Self {
        let spec = ax_dataplane::config::parse(yaml).expect("test config parses");
        let snap = ax_dataplane::config::snapshot::build(&spec, 1, &|n| std::env::var(n).ok(), None)
            .expect("test config builds");
        let app = ax_dataplane::App::new(snap);
        app.spawn_upkeep();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind gateway");
        let url = format!("http://{}", listener.local_addr().expect("gateway addr"));
        let a = app.clone();
        tokio::spawn(async move {
            let _ = ax_dataplane::serve(listener, a, std::future::pending()).await;
        });
        Self { url, app }
    }
}

/// A process started with `--listen 127.0.0.1:0 --addr-file`, killed on drop.
pub struct Process {
    pub url: String,
    child: Child,
    pub log: PathBuf,
}

impl Process {
    /// Starts `cmd` with `--listen 127.0.0.1:0 --addr-file <dir>/<name>.addr`, logging to
    /// `<dir>/<name>.log` (appended: a restarted process adds to the same log).
    pub fn spawn(mut cmd: Command, dir: &Path, name: &str) -> Self {
        std::fs::create_dir_all(dir).expect("dir");
        let addr_file = dir.join(format!("{name}.addr"));
        let log = dir.join(format!("{name}.log"));
        let _ = std::fs::remove_file(&addr_file);
        cmd.args(["--listen", "127.0.0.1:0", "--addr-file"]).arg(&addr_file);
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("log"))
            .spawn()
            .expect("spawn");
        for _ in 0..400 {
            if let Ok(a) = std::fs::read_to_string(&addr_file) {
                if !a.is_empty() {
                    return Self { url: format!("http://{a}"), child, log };
                }
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        panic!("{name} did not start within 10 s; log:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
    }

    /// The real `ax-dataplane` binary from a config file (fresh log `<dir>/ax.log`).
    pub fn start(config: &Path, dir: &Path) -> Self {
        let _ = std::fs::remove_file(dir.join("ax.log"));
        let mut cmd = Command::new(binary_path());
        cmd.arg("--config").arg(config);
        Self::spawn(cmd, dir, "ax")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends a signal by name (`TERM`, `HUP`, `INT`) with `kill(1)`.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill").arg(format!("-{name}")).arg(self.pid().to_string()).status().expect("kill");
        assert!(status.success(), "kill -{name} {}", self.pid());
    }

    /// Waits for the process to exit by itself, at most `within`; its status if it did.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let start = std::time::Instant::now();
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if start.elapsed() >= within {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Resident memory, from `/proc/<pid>/status`, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The standalone data plane (`Process::start`), as the older tests name it.
pub type Binary = Process;

/// `target/<profile>/ax-dataplane`, next to the test executable's `deps/` folder. Built (or
/// confirmed up to date) once per test process, so black-box tests never run a stale binary.
pub fn binary_path() -> PathBuf {
    built("ax-dataplane")
}

/// `target/<profile>/<bin>` (`ax-dataplane` or `ax-controlplane`), built or confirmed up to date
/// once per test process.
pub fn built(bin: &str) -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        // Benchmarks point this at prebuilt release binaries.
        if let Some(d) = std::env::var_os("AX_BIN_DIR") {
            return PathBuf::from(d);
        }
        let exe = std::env::current_exe().expect("current exe");
        let dir = exe.parent().and_then(Path::parent).expect("target dir");
        let release = dir.file_name().is_some_and(|n| n == "release");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "--quiet", "-p", "ax-dataplane", "-p", "ax-controlplane", "--bins"]);
        if release {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("cargo build");
        assert!(status.success(), "building the binaries failed");
        dir.to_path_buf()
    });
    dir.join(bin)
}

/// A private `redis-server` on a free loopback port, for tests that need a Redis to kill.
/// Killed on drop.
pub struct RedisServer {
    pub port: u16,
    child: Child,
}

impl RedisServer {
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
        Self::start_on(port)
    }

    /// A server on this port (a restart of one that was killed).
    pub fn start_on(port: u16) -> Self {
        Self::start_with(port, &[])
    }

    /// A server on this port with more arguments (`--replicaof 127.0.0.1 6379`).
    pub fn start_with(port: u16, extra: &[&str]) -> Self {
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (apt-get install redis-server)");
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Self { port, child };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("redis-server did not start on port {port}");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `redis-cli` against this server; its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli (apt-get install redis-tools)");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Whether the process still runs.
    pub fn alive(&self) -> bool {
        std::path::Path::new(&format!("/proc/{}", self.child.id())).exists()
            && !std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).is_ok_and(|s| s.contains(") Z "))
    }

    /// Kills the server now (a test of what happens when Redis dies).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A master and its replica watched by three Sentinels (`redis-server --sentinel`), all private
/// on loopback, the master named `ax`, failed over after 1 s without an answer. Killed on drop.
pub struct RedisSentinel {
    pub master: RedisServer,
    pub replica: RedisServer,
    pub sentinels: Vec<Child>,
    pub sentinel_ports: Vec<u16>,
    dir: PathBuf,
}

impl RedisSentinel {
    pub fn start() -> Self {
        let free = || std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
        let master = RedisServer::start();
        let replica = RedisServer::start_with(free(), &["--replicaof", "127.0.0.1", &master.port.to_string()]);
        let dir = temp_dir("redis-sentinel");
        let (mut sentinels, mut sentinel_ports) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let port = free();
            let conf = dir.join(format!("sentinel-{port}.conf"));
            let text = format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor ax 127.0.0.1 {} 2\n\
                 sentinel down-after-milliseconds ax 1000\nsentinel failover-timeout ax 3000\n",
                dir.display(),
                master.port
            );
            std::fs::write(&conf, text).expect("sentinel config");
            let child = Command::new("redis-server")
                .arg(&conf)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .spawn()
                .expect("redis-server --sentinel");
            sentinels.push(child);
            sentinel_ports.push(port);
        }
        let me = Self { master, replica, sentinels, sentinel_ports, dir };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while me.master_port() != Some(me.master.port) || !me.replica.cli(&["ROLE"]).contains("connected") {
            assert!(std::time::Instant::now() < deadline, "the sentinels never named the master");
            std::thread::sleep(Duration::from_millis(100));
        }
        me
    }

    /// The sentinels, comma-separated (`server.redis_url` with `redis_sentinel: ax`).
    pub fn url(&self) -> String {
        self.sentinel_ports.iter().map(|p| format!("redis://127.0.0.1:{p}")).collect::<Vec<_>>().join(",")
    }

    /// The master's port as the first sentinel names it now.
    pub fn master_port(&self) -> Option<u16> {
        let out = Command::new("redis-cli")
            .args(["-p", &self.sentinel_ports[0].to_string(), "SENTINEL", "get-master-addr-by-name", "ax"])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout).lines().nth(1)?.trim().parse().ok()
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        for c in &mut self.sentinels {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of private `redis-server`s on loopback: `masters` masters with one replica
/// each, made by `redis-cli --cluster create`, nodes failing over after 1 s without an answer
/// (whatever the replica's replication lag).
/// Every node is killed on drop.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    dir: PathBuf,
}

impl RedisCluster {
    pub fn start(masters: usize) -> Self {
        let dir = temp_dir("redis-cluster");
        let mut nodes = Vec::new();
        while nodes.len() < masters * 2 {
            // A node needs its port and the cluster bus's (port + 10,000) free.
            let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
            if port > 55_000 || std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_err() {
                continue;
            }
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"])
                // A replica takes over however long ago it last heard from its master (on a
                // loaded test machine, replication pings can be late).
                .args(["--cluster-replica-validity-factor", "0"])
                .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .spawn()
                .expect("redis-server (apt-get install redis-server)");
            let node = RedisServer { port, child };
            let up = (0..100).any(|_| {
                std::thread::sleep(Duration::from_millis(20));
                std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            });
            assert!(up, "cluster node on {port} did not start");
            nodes.push(node);
        }
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli");
        assert!(out.status.success(), "cluster create: {}", String::from_utf8_lossy(&out.stdout));
        let cluster = Self { nodes, dir };
        cluster.wait_ok(Duration::from_secs(20));
        cluster
    }

    /// Waits until every live node says `cluster_state:ok`.
    pub fn wait_ok(&self, within: Duration) {
        let started = std::time::Instant::now();
        while started.elapsed() < within {
            let ok = self
                .nodes
                .iter()
                .filter(|n| n.alive())
                .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            if ok {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let states: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.alive())
            .map(|n| format!("{}: {}", n.port, n.cli(&["CLUSTER", "INFO"]).lines().next().unwrap_or("")))
            .collect();
        panic!("the cluster is not ok after {within:?}: {states:?}\n{}", self.cli(&["CLUSTER", "NODES"]));
    }

    /// `redis://…` of some nodes, comma-separated, for `redis_url` with `redis_cluster: true`.
    pub fn url(&self) -> String {
        self.nodes.iter().take(3).map(RedisServer::url).collect::<Vec<_>>().join(",")
    }

    /// The node that serves `key` now (its slot's master: the others answer `MOVED`), once the
    /// key exists.
    pub fn master_of(&self, key: &str) -> &RedisServer {
        self.nodes
            .iter()
            .filter(|n| n.alive())
            .find(|n| n.cli(&["EXISTS", key]) == "1")
            .expect("a master holding the key")
    }

    /// `redis-cli -c` (following redirections) through a live node.
    pub fn cli(&self, args: &[&str]) -> String {
        let node = self.nodes.iter().find(|n| n.alive()).expect("a live node");
        let out = Command::new("redis-cli")
            .args(["-c", "-p", &node.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A program of the repository's Python venv (`.venv/bin/<name>`, made by `.ci/run` from
/// `tests/sdk/requirements.txt`); `what` says what the test needs it for.
pub fn venv_bin(name: &str, what: &str) -> String {
    let path = format!("{}/../.venv/bin/{name}", env!("CARGO_MANIFEST_DIR"));
    assert!(Path::new(&path).exists(), "{what} needs {path}: run `bash .ci/run` once");
    path
}

/// A loopback address where nothing listens: connecting is refused.
pub async fn refused_url() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    drop(l);
    format!("http://{addr}")
}

/// A fresh temporary directory under the target dir (no tempfile dependency needed).
pub fn temp_dir(name: &str) -> PathBuf {
    let n: u64 = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let dir = std::env::temp_dir().join(format!("ax-test-{name}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

// ---------------------------------------------------------------------------------------------
// Client side

pub const KEY: &str = "ax-test-key";
pub const UPSTREAM_KEY: &str = "sk-upstream-secret-123";

pub fn key_digest(key: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(key.as_bytes()))
}

/// A POST with the test key.
pub async fn post(url: &str, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{url}{path}"))
        .bearer_auth(KEY)
        .json(body)
        .send()
        .await
        .expect("request to gateway")
}

/// POSTs an Anthropic Messages body to `/v1/messages` as the Anthropic SDKs do (`x-api-key`,
/// `anthropic-version`).
pub async fn post_messages(url: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{url}/v1/messages"))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .expect("request to gateway")
}

/// Reads a whole SSE response from the gateway as its `data:` payloads (the gateway always
/// frames with `\n\n`, so this parser is deliberately simple and independent of ax's decoder).
pub async fn sse_events(resp: reqwest::Response) -> Vec<String> {
    let body = resp.bytes().await.expect("stream body");
    let text = String::from_utf8(body.to_vec()).expect("gateway stream is UTF-8");
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").unwrap_or_else(|| panic!("not a data event: {e:?}")).to_owned())
        .collect()
}

/// A stream's text with the `ax` field ax writes into its last JSON event taken out (what the
/// upstream sent, byte for byte, when the events were forwarded), and that field.
pub fn without_ax(text: &str) -> (String, Option<Value>) {
    let Some(at) = text.rfind("\"ax\":{") else { return (text.to_owned(), None) };
    // The field is the last of its object: from `"ax":` to the object's closing brace.
    let line_end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    let close = text[..line_end].rfind('}').expect("the event's closing brace");
    let facts: Value = serde_json::from_str(&text[at + 5..close]).expect("ax's facts are JSON");
    let start = if text[..at].ends_with(',') { at - 1 } else { at };
    (format!("{}{}", &text[..start], &text[close..]), Some(facts))
}

/// What an OpenAI client assembles from a chunk stream.
#[derive(Debug, Default, PartialEq)]
pub struct Assembled {
    pub role: Option<String>,
    pub text: String,
    /// (id, name, arguments) by tool-call index.
    pub tool_calls: Vec<(String, String, String)>,
    pub finish_reason: Option<String>,
    pub provider_finish_reason: Option<String>,
    pub usage: Option<Value>,
    pub error: Option<Value>,
    pub done: bool,
}

pub fn assemble(events: &[String]) -> Assembled {
    let mut a = Assembled::default();
    for e in events {
        assert!(!a.done, "event after [DONE]: {e}");
        if e == "[DONE]" {
            a.done = true;
            continue;
        }
        let v: Value = serde_json::from_str(e).unwrap_or_else(|_| panic!("event is not JSON: {e}"));
        if let Some(err) = v.get("error") {
            a.error = Some(err.clone());
            continue;
        }
        assert_eq!(v["object"], "chat.completion.chunk", "{e}");
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            a.usage = Some(u.clone());
        }
        for c in v["choices"].as_array().expect("choices") {
            let d = &c["delta"];
            if let Some(r) = d["role"].as_str() {
                a.role = Some(r.to_owned());
            }
            if let Some(t) = d["content"].as_str() {
                a.text.push_str(t);
            }
            for tc in d["tool_calls"].as_array().into_iter().flatten() {
                let i = tc["index"].as_u64().expect("tool call index") as usize;
                if a.tool_calls.len() <= i {
                    a.tool_calls.resize(i + 1, Default::default());
                }
                let slot = &mut a.tool_calls[i];
                if let Some(id) = tc["id"].as_str() {
                    slot.0 = id.to_owned();
                }
                if let Some(n) = tc["function"]["name"].as_str() {
                    slot.1 = n.to_owned();
                }
                if let Some(args) = tc["function"]["arguments"].as_str() {
                    slot.2.push_str(args);
                }
            }
            if let Some(f) = c["finish_reason"].as_str() {
                a.finish_reason = Some(f.to_owned());
            }
            if let Some(f) = c["provider_finish_reason"].as_str() {
                a.provider_finish_reason = Some(f.to_owned());
            }
        }
    }
    a
}
