//! The processes under test: the mock upstream (this binary, `mock`), ax, nginx as a keep-alive
//! reverse proxy, LiteLLM's proxy. Each listens on loopback, is stopped when dropped, and can be
//! asked for its resident memory.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::R;

/// A child process that is killed when dropped.
pub struct Proc {
    pub addr: SocketAddr,
    child: Option<Child>,
    /// nginx daemonizes: its master's pid (read from its pid file once it listens).
    daemon: Option<u32>,
}

impl Proc {
    pub fn pid(&self) -> Option<u32> {
        self.daemon.or_else(|| self.child.as_ref().map(Child::id))
    }

    /// Resident memory in MiB (from /proc).
    pub fn rss_mib(&self) -> f64 {
        self.pid().map_or(0.0, rss_mib)
    }

    /// CPU time used so far (user + system, seconds), its child processes included (nginx's
    /// worker, LiteLLM's workers).
    pub fn cpu_secs(&self) -> f64 {
        self.pid().map_or(0.0, cpu_secs)
    }
}

/// CPU seconds of `pid` and, recursively, its children (from /proc, in clock ticks of 10 ms).
pub fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) : state is field 3; utime 14, stime 15.
    let own = stat.rsplit_once(')').map_or(0.0, |(_, rest)| {
        let f: Vec<&str> = rest.split_whitespace().collect();
        let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        (tick(11) + tick(12)) / 100.0
    });
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    own + children.split_whitespace().filter_map(|c| c.parse().ok()).map(cpu_secs).sum::<f64>()
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            // SIGTERM first: LiteLLM stops its worker processes only when asked politely.
            let _ = Command::new("kill").arg(c.id().to_string()).status();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(5) && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(pid) = self.daemon {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
}

pub fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn free_port() -> R<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits up to 20 s for `path` to hold an address.
fn read_addr(path: &Path, child: &mut Child, name: &str) -> R<SocketAddr> {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if let Ok(a) = s.trim().parse() {
                return Ok(a);
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{name} exited: {status}").into());
        }
        if start.elapsed() > Duration::from_secs(20) {
            return Err(format!("{name} did not start").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits up to `secs` for something to accept connections on `addr`.
fn wait_port(addr: SocketAddr, secs: u64, name: &str) -> R<()> {
    let start = Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        if start.elapsed() > Duration::from_secs(secs) {
            return Err(format!("{name} is not listening on {addr}").into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The mock upstream: this binary's `mock` mode.
pub fn mock(dir: &Path, events: u32, gap_ms: u64) -> R<Proc> {
    let addr_file = dir.join("mock.addr");
    let mut child = Command::new(std::env::current_exe()?)
        .args(["mock", "--addr-file"])
        .arg(&addr_file)
        .args(["--events", &events.to_string(), "--gap-ms", &gap_ms.to_string()])
        .stdin(Stdio::null())
        .spawn()?;
    let addr = read_addr(&addr_file, &mut child, "mock")?;
    Ok(Proc { addr, child: Some(child), daemon: None })
}

/// ax's data plane from a YAML file.
pub fn ax(bin: &Path, dir: &Path, name: &str, yaml: &str) -> R<Proc> {
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(&config, yaml)?;
    let addr_file = dir.join(format!("{name}.addr"));
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    let mut child = Command::new(bin)
        .arg("--config")
        .arg(&config)
        .args(["--listen", "127.0.0.1:0", "--addr-file"])
        .arg(&addr_file)
        .env("AX_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    let addr = read_addr(&addr_file, &mut child, name)?;
    Ok(Proc { addr, child: Some(child), daemon: None })
}

/// nginx as a reverse proxy to `upstream` with keep-alive (the cost of "one more hop"); `None`
/// when nginx is not installed. Its accept queue is as deep as the mock's, 4,096 (nginx's
/// default, 511, dropped SYNs in a burst of 1,000 new streams).
pub fn nginx(dir: &Path, upstream: SocketAddr) -> R<Option<Proc>> {
    if Command::new("nginx").arg("-v").stderr(Stdio::null()).status().is_err() {
        return Ok(None);
    }
    let port = free_port()?;
    let pid_file = dir.join("nginx.pid");
    let conf = format!(
        "worker_processes 1;\npid {pid};\nerror_log {dir}/nginx.err warn;\nevents {{ worker_connections 8192; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 1000000;\n  proxy_buffering off;\n\
           upstream up {{ server {upstream}; keepalive 256; }}\n\
           server {{ listen 127.0.0.1:{port} backlog=4096; location / {{ proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection \"\"; }} }}\n}}\n",
        pid = pid_file.display(),
        dir = dir.display(),
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf)?;
    let status = Command::new("nginx").arg("-p").arg(dir).arg("-c").arg(&path).stderr(Stdio::null()).status()?;
    if !status.success() {
        return Err("nginx did not start".into());
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_port(addr, 10, "nginx")?;
    let daemon = std::fs::read_to_string(&pid_file)?.trim().parse()?;
    Ok(Some(Proc { addr, child: None, daemon: Some(daemon) }))
}

/// LiteLLM's master key (it refuses to start without one; callers send it as their bearer token).
pub const LITELLM_KEY: &str = "sk-ax-bench-0f3c9a7e5d1b2468ace13579bdf02468";

/// LiteLLM's proxy in front of the mock, started as its docs start it (`litellm --config`, one
/// worker per core).
pub fn litellm(bin: &Path, dir: &Path, upstream: SocketAddr) -> R<Proc> {
    let port = free_port()?;
    let config = dir.join("litellm.yaml");
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: chat\n    litellm_params:\n      model: openai/gpt-4o-mini\n      api_base: http://{upstream}/v1\n      api_key: sk-bench\n\
             litellm_settings:\n  telemetry: false\ngeneral_settings:\n  master_key: {LITELLM_KEY}\n"
        ),
    )?;
    let mut cmd = Command::new(bin);
    cmd.arg("--config")
        .arg(&config)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--num_workers", &std::thread::available_parallelism().map_or(1, |n| n.get()).to_string()])
        .env("LITELLM_LOG", "ERROR")
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True");
    listening(cmd, dir, "litellm", port, 120)
}

/// Starts `cmd` (its stderr in `<dir>/<name>.log`) and waits up to `secs` for it to listen on
/// loopback `port`.
fn listening(mut cmd: Command, dir: &Path, name: &str, port: u16, secs: u64) -> R<Proc> {
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log).spawn()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let p = Proc { addr, child: Some(child), daemon: None };
    wait_port(addr, secs, name)?;
    Ok(p)
}

/// Noveum's AI gateway (a Rust gateway from crates.io: `noveum-ai-gateway`) in front of the mock,
/// started as its README starts it (its own default worker threads), logging at `warn` as ax
/// does here. It takes the provider key from each request and the upstream from
/// `OPENAI_BASE_URL`.
pub fn noveum(bin: &Path, dir: &Path, upstream: SocketAddr) -> R<Proc> {
    let port = free_port()?;
    let mut cmd = Command::new(bin);
    cmd.env("HOST", "127.0.0.1")
        .env("PORT", port.to_string())
        .env("OPENAI_BASE_URL", format!("http://{upstream}"))
        .env("RUST_LOG", "warn");
    listening(cmd, dir, "noveum", port, 20)
}
