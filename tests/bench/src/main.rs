//! `ax-bench`: ax against a bare reverse proxy (nginx), LiteLLM and a Rust gateway from
//! crates.io (Noveum's), over the same mock upstream, in one run, on loopback, reported as ratios
//! (absolute times on a shared machine are noise).
//!
//! ```text
//! cargo build --release -p ax-dataplane -p ax-bench
//! target/release/ax-bench [--quick] [--ax PATH] [--litellm PATH] [--noveum PATH] [--soak-secs N] [--only 3,4] [--no-docs]
//! ```
//!
//! LiteLLM is looked for in `target/bench-venv`, Noveum's gateway in `target/bench-gw`
//! (`docs/BENCHMARKS.md` has the commands that install them); a competitor that is not there is
//! left out of the run.
//!
//! Scenarios (issue 7): added latency at concurrency 1 (OpenAI upstream, Anthropic translation);
//! throughput at concurrency 64 and the rate each target sustains under a p99 of 1, 5 and 25 ms;
//! paced streams at 1, 100 and 1,000 concurrent; memory idle, under load, after, and over a soak;
//! snapshot swaps every 100 ms under load; rate limits and budgets on (local, then Redis).
//! Writes `target/bench/ax-bench-<time>.json` and, in full mode, appends a section to
//! `docs/BENCHMARKS.md`. `--quick` runs every scenario for a moment (CI: the harness cannot rot).
//! For investigations: `--only 2,3` runs those scenarios (and writes no docs), `AX_BENCH_DEBUG=1`
//! prints every step of the frontier, `AX_BENCH_ROUNDS=N` repeats each stream burst above one
//! stream N times (the later rounds find the upstream connections already open).

mod load;
mod mock;
mod procs;

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use load::{pct, Target};
use serde_json::{json, Value};
use sha2::Digest;

pub type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const KEY: &str = "ax-bench-key";
const CHAT: &str = r#"{"model":"chat","messages":[{"role":"user","content":"Hello, how are you?"}]}"#;
const CLAUDE: &str = r#"{"model":"claude","messages":[{"role":"user","content":"Hello, how are you?"}]}"#;
const ANTHROPIC_DIRECT: &str =
    r#"{"model":"claude-real","max_tokens":64,"messages":[{"role":"user","content":"Hello, how are you?"}]}"#;
const STREAM: &str = r#"{"model":"chat","stream":true,"messages":[{"role":"user","content":"Hello, how are you?"}]}"#;

struct Opts {
    quick: bool,
    ax: PathBuf,
    litellm: Option<PathBuf>,
    /// Noveum's AI gateway (Rust, `cargo install noveum-ai-gateway`).
    noveum: Option<PathBuf>,
    soak: Duration,
    docs: bool,
    /// Run only these scenarios (`--only 3,4`).
    only: Option<Vec<u8>>,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = if args.first().map(String::as_str) == Some("mock") { run_mock(&args[1..]) } else { bench(&args) };
    if let Err(e) = result {
        eprintln!("ax-bench: {e}");
        std::process::exit(1);
    }
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(String::as_str)
}

/// A competitor's program: the path given with `name`, else `default` (under the repository) if
/// it is installed there.
fn program(args: &[String], name: &str, default: &str) -> Option<PathBuf> {
    flag(args, name).map(PathBuf::from).or_else(|| {
        let v = repo().join(default);
        v.is_file().then_some(v)
    })
}

fn run_mock(args: &[String]) -> R<()> {
    let addr_file = flag(args, "--addr-file").ok_or("mock: --addr-file")?;
    let pace = mock::Pace {
        events: flag(args, "--events").unwrap_or("50").parse()?,
        gap: Duration::from_millis(flag(args, "--gap-ms").unwrap_or("20").parse()?),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    rt.block_on(async move {
        // A deep accept queue: a burst of 1,000 new streams through a proxy opens 1,000 upstream
        // connections at once, and the default queue of 128 dropped their SYNs (each came back
        // after the kernel's 1 s retransmission timeout, which the proxy was charged for).
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind("127.0.0.1:0".parse()?)?;
        let listener = socket.listen(4096)?;
        std::fs::write(addr_file, listener.local_addr()?.to_string())?;
        mock::serve(listener, pace).await
    })
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn bench(args: &[String]) -> R<()> {
    let quick = args.iter().any(|a| a == "--quick");
    let default_ax = repo().join("target/release/ax-dataplane");
    let litellm = program(args, "--litellm", "target/bench-venv/bin/litellm");
    let noveum = program(args, "--noveum", "target/bench-gw/bin/noveum-ai-gateway");
    let o = Opts {
        quick,
        ax: flag(args, "--ax").map_or(default_ax, PathBuf::from),
        litellm: if quick { None } else { litellm },
        noveum: if quick { None } else { noveum },
        soak: Duration::from_secs(flag(args, "--soak-secs").map_or(Ok(if quick { 3 } else { 600 }), str::parse)?),
        docs: !quick && !args.iter().any(|a| a == "--no-docs") && flag(args, "--only").is_none(),
        only: flag(args, "--only").map(|l| l.split(',').map(str::parse).collect::<Result<Vec<u8>, _>>()).transpose()?,
    };
    if !o.ax.is_file() {
        return Err(format!("{} is missing: cargo build --release -p ax-dataplane", o.ax.display()).into());
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    // Interrupted, the run is dropped, and with it every process it started.
    rt.block_on(async move {
        tokio::select! {
            r = run(o, args.join(" ")) => r,
            _ = tokio::signal::ctrl_c() => Err("interrupted".into()),
        }
    })
}

fn say(s: &str) {
    let _ = writeln!(std::io::stderr(), "{s}");
}

/// Least-squares slope of (seconds, MiB) samples, in MiB per minute.
fn least_squares_per_min(samples: &[(f64, f64)]) -> f64 {
    if samples.len() < 2 {
        return 0.0;
    }
    let n = samples.len() as f64;
    let (mx, my) = (samples.iter().map(|p| p.0).sum::<f64>() / n, samples.iter().map(|p| p.1).sum::<f64>() / n);
    let num: f64 = samples.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let den: f64 = samples.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if den > 0.0 {
        num / den * 60.0
    } else {
        0.0
    }
}

/// Steady growth of (seconds, MiB) samples taken once a second, in MiB per minute: the median
/// change between the highest RSS of successive 30-second windows. Growth in every window (a
/// leak) shows in full; a single step between flat windows does not.
fn steady_growth_per_min(samples: &[(f64, f64)]) -> f64 {
    let peaks: Vec<f64> =
        samples.chunks(30).filter(|w| w.len() == 30).map(|w| w.iter().map(|p| p.1).fold(0.0, f64::max)).collect();
    let mut steps: Vec<f64> = peaks.windows(2).map(|w| w[1] - w[0]).collect();
    if steps.is_empty() {
        return least_squares_per_min(samples); // too short for windows (quick mode)
    }
    steps.sort_by(f64::total_cmp);
    let mid = steps.len() / 2;
    let median = if steps.len() % 2 == 0 { (steps[mid - 1] + steps[mid]) / 2.0 } else { steps[mid] };
    median * 2.0 // two windows a minute
}

fn yaml(mock: SocketAddr, extra_server: &str, governed: bool, weight: u32) -> String {
    let digest = hex::encode(sha2::Sha256::digest(KEY.as_bytes()));
    let price = "price_per_mtok: { input: 0.15, output: 0.6 }";
    let tenant_extra = if governed {
        "\n    limits: { rpm: 100000000, tpm: 2000000000, concurrency: 100000 }\n    budgets: [{ window: day, usd: 1000000, action: reject }]"
    } else {
        ""
    };
    let upstream = |name: &str, provider: &str, url: &str, model: &str| {
        format!(
            "  - name: {name}
    provider: {provider}
    base_url: {url}
    api_key: sk-bench
    max_concurrency: 100000
    models: [{{ name: {model}, context_window: 128000, capabilities: [chat, streaming], {price} }}]
"
        )
    };
    let openai = format!("http://{mock}/v1");
    format!(
        "server: {{ {extra_server} }}
upstreams:
{}{}{}routes:
  - alias: chat
    candidates: [{{ upstream: openai-mock, model: gpt-4o-mini, weight: {weight} }}, {{ upstream: openai-mock-2, model: gpt-4o-mini, weight: 1 }}]
  - alias: claude
    candidates: [{{ upstream: anthropic-mock, model: claude-real }}]
tenants:
  - id: bench
    keys: [{{ id: bench-1, sha256: \"{digest}\" }}]{tenant_extra}
",
        upstream("openai-mock", "openai", &openai, "gpt-4o-mini"),
        upstream("openai-mock-2", "openai", &openai, "gpt-4o-mini"),
        upstream("anthropic-mock", "anthropic", &format!("http://{mock}"), "claude-real"),
    )
}

fn target(name: &str, addr: SocketAddr, path: &str, auth: bool, body: &'static str) -> Target {
    Target {
        name: name.into(),
        addr,
        path: path.into(),
        auth: auth.then(|| format!("Bearer {KEY}")),
        body: Bytes::from_static(body.as_bytes()),
    }
}

/// A latency summary: p50, p99 (µs), req/s, errors.
fn summary(s: &load::Sample) -> Value {
    json!({ "p50_us": s.pct(50.0), "p99_us": s.pct(99.0), "rps": s.rps().round() as u64, "errors": s.errors, "n": s.lat_us.len() })
}

/// Commands Redis (127.0.0.1:6379) was sent, by `redis-cli INFO commandstats`: every command
/// but those a Lua script ran (`total_commands_processed` counts those too), so one `EVALSHA`
/// is one.
fn redis_commands() -> Option<u64> {
    const IN_SCRIPTS: [&str; 9] = ["hset", "hget", "hdel", "hincrby", "pexpire", "time", "del", "incrby", "exists"];
    let out = std::process::Command::new("redis-cli").args(["-p", "6379", "INFO", "commandstats"]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut total = 0;
    for line in text.lines() {
        let Some((name, rest)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else { continue };
        if IN_SCRIPTS.contains(&name) || name == "info" {
            continue;
        }
        let calls = rest.split(',').find_map(|f| f.strip_prefix("calls=")).and_then(|v| v.parse::<u64>().ok());
        total += calls.unwrap_or(0);
    }
    Some(total)
}

fn ratio(a: f64, b: f64) -> Value {
    if b > 0.0 {
        json!((a / b * 1000.0).round() / 1000.0)
    } else {
        Value::Null
    }
}

/// Concurrency 1 against `t`, when that target is in the run.
async fn at_concurrency_1(t: Option<&Target>, warm: Duration, dur: Duration) -> Option<load::Sample> {
    match t {
        Some(t) => Some(load::closed(t, 1, warm, dur).await),
        None => None,
    }
}

/// The highest rate (req/s) with p99 under each bound and no failures, climbing ×1.4 per step.
async fn frontier(t: &Target, step: Duration, bounds_ms: &[u32]) -> Vec<Value> {
    let mut best = vec![0.0_f64; bounds_ms.len()];
    let mut rate = 250.0_f64;
    let mut misses = 0;
    // Warm-up: the connections are made here, not inside the first timed step.
    load::open(t, 64, rate, step.min(Duration::from_secs(1))).await;
    for _ in 0..24 {
        let s = load::open(t, 64, rate, step).await;
        let p99_ms = f64::from(s.pct(99.0)) / 1000.0;
        let kept_up = s.rps() >= rate * 0.95 && s.errors == 0;
        if std::env::var_os("AX_BENCH_DEBUG").is_some() {
            say(&format!("  {} at {rate:.0}/s: {:.0}/s, p99 {p99_ms:.2} ms, {} errors", t.name, s.rps(), s.errors));
        }
        for (b, bound) in best.iter_mut().zip(bounds_ms) {
            if kept_up && p99_ms < f64::from(*bound) {
                *b = b.max(rate);
            }
        }
        // Two steps in a row over the loosest bound end the climb (one may be a scheduling blip).
        misses = if !kept_up || p99_ms >= f64::from(*bounds_ms.last().unwrap_or(&25)) { misses + 1 } else { 0 };
        if misses == 2 || s.rps() < rate * 0.5 {
            break;
        }
        rate *= 1.4;
    }
    best.into_iter().zip(bounds_ms).map(|(r, b)| json!({ "p99_under_ms": b, "rps": r.round() as u64 })).collect()
}

/// Whether paced streams were held: no error, and every gap under 5 ms more than the pacing
/// (20 ms).
fn holds(s: &load::Streams) -> bool {
    s.errors == 0 && pct(&s.gaps_us, 100.0) < 25_000
}

/// The most concurrent paced streams `t` [`holds`], between `lo` (held) and `hi` (not), by
/// bisection to a tenth of the span; one round a probe. Returns it and the probes.
async fn most_held(t: &Target, lo: usize, hi: usize) -> (usize, Vec<Value>) {
    let (mut lo, mut hi, close_enough) = (lo, hi, ((hi - lo) / 10).max(1));
    let mut probes = Vec::new();
    while hi - lo > close_enough {
        let mid = (lo + hi) / 2;
        let s = load::streams(t, mid, 1).await;
        let ok = holds(&s);
        probes.push(json!({ "streams": mid, "held": ok, "max_gap_us": pct(&s.gaps_us, 100.0), "errors": s.errors }));
        if ok {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo, probes)
}

async fn run(o: Opts, command: String) -> R<()> {
    let dir = std::env::temp_dir().join(format!("ax-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let loadavg: String = loadavg.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    let (warm, dur) = if o.quick {
        (Duration::from_millis(200), Duration::from_millis(700))
    } else {
        (Duration::from_secs(1), Duration::from_secs(8))
    };
    let step = if o.quick { Duration::from_millis(300) } else { Duration::from_secs(3) };
    say(&format!("ax-bench: {} mode, load average at start {loadavg}", if o.quick { "quick" } else { "full" }));

    let mock = procs::mock(&dir, 50, 20)?;
    let nginx = procs::nginx(&dir, mock.addr)?;
    let ax = procs::ax(&o.ax, &dir, "ax", &yaml(mock.addr, "", false, 1))?;
    let rss_idle = ax.rss_mib();
    let on = |n: u8| o.only.as_ref().is_none_or(|l| l.contains(&n));
    // The other gateways are measured in scenarios 1 and 2 only: not started for the others. One
    // that is missing or does not start is left out of the run, which says so.
    let competitor = |bin: Option<&PathBuf>, name: &str, start: fn(&Path, &Path, SocketAddr) -> R<procs::Proc>| {
        let bin = bin.filter(|_| on(1) || on(2))?;
        start(bin, &dir, mock.addr).inspect_err(|e| say(&format!("{name} skipped: {e}"))).ok()
    };
    let mut litellm = competitor(o.litellm.as_ref(), "LiteLLM", procs::litellm);
    let mut noveum = competitor(o.noveum.as_ref(), "Noveum's gateway", procs::noveum);

    let direct = target("direct", mock.addr, "/v1/chat/completions", false, CHAT);
    let via_nginx = nginx.as_ref().map(|n| target("nginx", n.addr, "/v1/chat/completions", false, CHAT));
    let via_ax = target("ax", ax.addr, "/v1/chat/completions", true, CHAT);
    let via_litellm = litellm.as_ref().map(|l| Target {
        auth: Some(format!("Bearer {}", procs::LITELLM_KEY)),
        ..target("litellm", l.addr, "/v1/chat/completions", false, CHAT)
    });
    // Noveum's gateway forwards the caller's bearer token to the provider as its key.
    let via_noveum = noveum.as_ref().map(|g| Target {
        auth: Some("Bearer sk-bench".into()),
        ..target("noveum", g.addr, "/v1/chat/completions", false, CHAT)
    });
    let direct_anthropic = target("direct-anthropic", mock.addr, "/v1/messages", false, ANTHROPIC_DIRECT);
    let ax_anthropic = target("ax-anthropic", ax.addr, "/v1/chat/completions", true, CLAUDE);
    let mut results = serde_json::Map::new();

    let (mut rss_peak, mut rss_after) = (0.0_f64, 0.0_f64);
    if on(1) {
        // 1. Added latency at concurrency 1.
        say("1/6 added latency at concurrency 1");
        let mut lat = serde_json::Map::new();
        let mut c1 = |name: &str, s: &load::Sample| {
            lat.insert(name.into(), summary(s));
        };
        let d = load::closed(&direct, 1, warm, dur).await;
        let a = load::closed(&via_ax, 1, warm, dur).await;
        let da = load::closed(&direct_anthropic, 1, warm, dur).await;
        let aa = load::closed(&ax_anthropic, 1, warm, dur).await;
        c1("direct", &d);
        c1("ax", &a);
        c1("direct_anthropic", &da);
        c1("ax_anthropic", &aa);
        let n = at_concurrency_1(via_nginx.as_ref(), warm, dur).await;
        if let Some(n) = &n {
            c1("nginx", n);
        }
        if let Some(l) = at_concurrency_1(via_litellm.as_ref(), warm, dur).await {
            c1("litellm", &l);
        }
        let nv = at_concurrency_1(via_noveum.as_ref(), warm, dur).await;
        if let Some(g) = &nv {
            c1("noveum", g);
        }
        let added = |x: &load::Sample, base: &load::Sample, p: f64| i64::from(x.pct(p)) - i64::from(base.pct(p));
        lat.insert(
            "added_us".into(),
            json!({
                "ax_openai": { "p50": added(&a, &d, 50.0), "p99": added(&a, &d, 99.0) },
                "ax_anthropic": { "p50": added(&aa, &da, 50.0), "p99": added(&aa, &da, 99.0) },
                "nginx": n.as_ref().map(|n| json!({ "p50": added(n, &d, 50.0), "p99": added(n, &d, 99.0) })),
                "noveum": nv.as_ref().map(|g| json!({ "p50": added(g, &d, 50.0), "p99": added(g, &d, 99.0) })),
            }),
        );
        results.insert("latency_c1".into(), Value::Object(lat));
    }
    if on(2) {
        // 2. Throughput at concurrency 64, and the frontier.
        say("2/6 throughput at concurrency 64 and the p99 frontier");
        let mut tp = serde_json::Map::new();
        let mut rps = serde_json::Map::new();
        let mut targets: Vec<&Target> = vec![&direct];
        targets.extend(via_nginx.as_ref());
        targets.push(&via_ax);
        targets.extend(via_litellm.as_ref());
        targets.extend(via_noveum.as_ref());
        let proc_of = |name: &str| match name {
            "nginx" => nginx.as_ref(),
            "ax" => Some(&ax),
            "litellm" => litellm.as_ref(),
            "noveum" => noveum.as_ref(),
            _ => Some(&mock),
        };
        let mut cpu = serde_json::Map::new();
        for t in &targets {
            load::closed(t, 64, warm, Duration::ZERO).await;
            let before = proc_of(&t.name).map_or(0.0, procs::Proc::cpu_secs);
            let s = load::closed(t, 64, Duration::ZERO, dur).await;
            let used = proc_of(&t.name).map_or(0.0, procs::Proc::cpu_secs) - before;
            if t.name == "ax" {
                rss_peak = rss_peak.max(ax.rss_mib());
            }
            // CPU per request of the process in the path (for direct: the mock itself). Unlike
            // req/s, it does not depend on how the cores were shared during the run.
            let per_req = if s.lat_us.is_empty() { 0.0 } else { used * 1e6 / s.lat_us.len() as f64 };
            cpu.insert(t.name.clone(), json!((per_req * 10.0).round() / 10.0));
            rps.insert(t.name.clone(), json!(s.rps().round() as u64));
            tp.insert(format!("{}_c64", t.name), summary(&s));
        }
        let c = |k: &str| cpu.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        tp.insert(
            "cpu_us_per_request".into(),
            json!({ "mock": c("direct"), "nginx": c("nginx"), "ax": c("ax"), "litellm": cpu.get("litellm"),
                "noveum": cpu.get("noveum"), "ax_over_nginx": ratio(c("ax"), c("nginx")) }),
        );
        let get = |m: &serde_json::Map<String, Value>, k: &str| m.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        tp.insert(
        "ax_ratio".into(),
        json!({ "to_direct": ratio(get(&rps, "ax"), get(&rps, "direct")), "to_nginx": ratio(get(&rps, "ax"), get(&rps, "nginx")),
                "litellm_to_nginx": ratio(get(&rps, "litellm"), get(&rps, "nginx")),
                "noveum_to_nginx": ratio(get(&rps, "noveum"), get(&rps, "nginx")),
                "to_noveum": ratio(get(&rps, "ax"), get(&rps, "noveum")) }),
    );
        let mut front = serde_json::Map::new();
        for t in &targets {
            if t.name == "litellm" && o.quick {
                continue;
            }
            front.insert(t.name.clone(), Value::from(frontier(t, step, &[1, 5, 25]).await));
        }
        tp.insert("frontier".into(), Value::Object(front));
        results.insert("throughput".into(), Value::Object(tp));
        rss_peak = rss_peak.max(ax.rss_mib());
        tokio::time::sleep(Duration::from_secs(2)).await;
        rss_after = ax.rss_mib();
    }
    // LiteLLM and Noveum's gateway are measured in 1 and 2 only. Stopped here, so the later
    // scenarios do not share the cores with whatever they do when idle (LiteLLM's is measured
    // first: its CPU over 5 quiet seconds).
    if let Some(l) = litellm.take() {
        let before = l.cpu_secs();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let cores = (l.cpu_secs() - before) / 5.0;
        say(&format!("  LiteLLM idle after its load: {:.0} % of a core; stopped", cores * 100.0));
        results.insert("litellm_idle_cores".into(), json!((cores * 1000.0).round() / 1000.0));
    }
    drop(noveum.take());
    if on(4) {
        // 4. Memory: idle, under load, after, and a soak; before the streams, whose thousand
        // connections' buffers would inflate the allocator's footprint the soak starts from.
        say(&format!("4/6 memory soak for {} s", o.soak.as_secs()));
        let before_soak = ax.rss_mib();
        let mut samples = Vec::new();
        let soak = {
            let t = via_ax.clone();
            let dur = o.soak;
            tokio::spawn(async move { load::closed(&t, 16, Duration::ZERO, dur).await })
        };
        let start = Instant::now();
        while start.elapsed() < o.soak {
            tokio::time::sleep(Duration::from_secs(1)).await;
            samples.push((start.elapsed().as_secs_f64(), ax.rss_mib()));
        }
        let soaked = soak.await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after_soak = ax.rss_mib();
        // Growth over the second half of the soak (the first half warms caches). A leak grows
        // steadily; the allocator keeping a few more pages grows once, in one step, then stays
        // flat. So the trend is the median of the changes between successive 30-second windows'
        // highest RSS, which one step does not move; the least-squares slope, which a step does
        // move, is kept next to it.
        let tail: Vec<(f64, f64)> = samples.iter().skip(samples.len() / 2).copied().collect();
        let slope = least_squares_per_min(&tail);
        let steady = steady_growth_per_min(&tail);
        results.insert(
        "memory".into(),
        json!({ "idle_mib": rss_idle, "peak_under_load_mib": rss_peak, "after_load_mib": rss_after,
                "soak": { "secs": o.soak.as_secs(), "requests": soaked.lat_us.len(), "errors": soaked.errors,
                          "before_mib": before_soak, "after_mib": after_soak,
                          "after_vs_before": ratio(after_soak, before_soak), "growth_mib_per_min": (steady * 100.0).round() / 100.0,
                          "least_squares_mib_per_min": (slope * 100.0).round() / 100.0,
                          "min_mib": samples.iter().map(|p| p.1).fold(f64::MAX, f64::min), "max_mib": samples.iter().map(|p| p.1).fold(0.0, f64::max),
                          "samples_mib": samples.iter().map(|p| (p.1 * 10.0).round() / 10.0).collect::<Vec<_>>(),
                          // Plateaus or a trend: the highest RSS of each 30-second window.
                          "windows_max_mib": samples.chunks(30).map(|w| (w.iter().map(|p| p.1).fold(0.0, f64::max) * 10.0).round() / 10.0).collect::<Vec<_>>() } }),
    );
    }
    if on(3) {
        // 3. Paced streams.
        say("3/6 paced streams (50 events, 20 ms apart)");
        let levels: &[usize] = if o.quick { &[1, 20] } else { &[1, 100, 1000] };
        let mut st = Vec::new();
        let sdirect = target("direct", mock.addr, "/v1/chat/completions", false, STREAM);
        let sax = target("ax", ax.addr, "/v1/chat/completions", true, STREAM);
        for &n in levels {
            let rounds = if n == 1 {
                5
            } else {
                std::env::var("AX_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(1)
            };
            let d = load::streams(&sdirect, n, rounds).await;
            // nginx (proxy_buffering off) over the same streams: what one more hop costs on this box.
            let ng = match &nginx {
                Some(ngx) => {
                    let t = Target { addr: ngx.addr, ..sdirect.clone() };
                    let before = ngx.cpu_secs();
                    let s = load::streams(&t, n, rounds).await;
                    let per_event = (ngx.cpu_secs() - before) * 1e6 / (s.gaps_us.len() + s.ttft_us.len()).max(1) as f64;
                    Some((s, per_event))
                }
                None => None,
            };
            let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            let watcher = {
                let (peak, pid) = (peak.clone(), ax.pid().unwrap_or(0));
                tokio::spawn(async move {
                    loop {
                        let r = (procs::rss_mib(pid) * 10.0) as u64;
                        peak.fetch_max(r, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                })
            };
            let cpu_before = ax.cpu_secs();
            let a = load::streams(&sax, n, rounds).await;
            let cpu_per_event = (ax.cpu_secs() - cpu_before) * 1e6 / (a.gaps_us.len() + a.ttft_us.len()).max(1) as f64;
            watcher.abort();
            let rss = peak.load(std::sync::atomic::Ordering::Relaxed) as f64 / 10.0;
            let p = |v: &[u32], q: f64| i64::from(pct(v, q));
            st.push(json!({
            "streams": n,
            "completed": { "direct": d.completed, "ax": a.completed }, "errors": { "direct": d.errors, "ax": a.errors },
            "ttft_us": { "direct_p50": p(&d.ttft_us, 50.0), "direct_p99": p(&d.ttft_us, 99.0), "ax_p50": p(&a.ttft_us, 50.0), "ax_p99": p(&a.ttft_us, 99.0) },
            "added_ttft_us": { "p50": p(&a.ttft_us, 50.0) - p(&d.ttft_us, 50.0), "p99": p(&a.ttft_us, 99.0) - p(&d.ttft_us, 99.0) },
            "gap_us": { "direct_p50": p(&d.gaps_us, 50.0), "direct_p99": p(&d.gaps_us, 99.0), "direct_max": p(&d.gaps_us, 100.0),
                        "ax_p50": p(&a.gaps_us, 50.0), "ax_p99": p(&a.gaps_us, 99.0), "ax_max": p(&a.gaps_us, 100.0) },
            "added_gap_us": { "p50": p(&a.gaps_us, 50.0) - p(&d.gaps_us, 50.0), "p99": p(&a.gaps_us, 99.0) - p(&d.gaps_us, 99.0) },
            "ax_held": holds(&a),
            "ax_rss_mib": rss,
            "ax_cpu_us_per_event": (cpu_per_event * 10.0).round() / 10.0,
            "nginx": ng.as_ref().map(|(g, per_event)| json!({
                "errors": g.errors,
                "added_ttft_us": { "p50": p(&g.ttft_us, 50.0) - p(&d.ttft_us, 50.0), "p99": p(&g.ttft_us, 99.0) - p(&d.ttft_us, 99.0) },
                "added_gap_us": { "p50": p(&g.gaps_us, 50.0) - p(&d.gaps_us, 50.0), "p99": p(&g.gaps_us, 99.0) - p(&d.gaps_us, 99.0) },
                "max_gap_us": p(&g.gaps_us, 100.0),
                "held": holds(g),
                "cpu_us_per_event": (per_event * 10.0).round() / 10.0,
            })),
        }));
        }
        // The levels only say held or not at 1, 100, 1,000: between the highest level a proxy held
        // and the next one up, the most it holds is found by bisection (ax, and nginx for the same
        // box's reference).
        let highest_held = |flag: &str| -> Option<usize> {
            st.iter()
                .filter(|l| l.pointer(flag) == Some(&Value::Bool(true)))
                .filter_map(|l| l["streams"].as_u64().and_then(|n| usize::try_from(n).ok()))
                .max()
        };
        let bisect = |held: Option<usize>, t: Target| async move {
            let Some(lo) = held else { return (None, Vec::new()) };
            match levels.iter().copied().find(|l| *l > lo) {
                Some(hi) => {
                    let (m, p) = most_held(&t, lo, hi).await;
                    (Some(m), p)
                }
                None => (Some(lo), Vec::new()),
            }
        };
        let (most, probes) = bisect(highest_held("/ax_held"), sax.clone()).await;
        let mut nginx_most = Value::Null;
        if let Some(ngx) = &nginx {
            let (m, p) = bisect(highest_held("/nginx/held"), Target { addr: ngx.addr, ..sdirect.clone() }).await;
            nginx_most = json!({ "most_held_with_gaps_under_5ms_added": m, "bisection": p });
        }
        results.insert(
            "streams".into(),
            json!({ "levels": st, "most_held_with_gaps_under_5ms_added": most, "bisection": probes, "nginx": nginx_most }),
        );
    }
    if on(5) {
        // 5. Snapshot swaps every 100 ms under full load.
        say("5/6 snapshot swaps every 100 ms under load");
        let swap_dur = if o.quick { Duration::from_secs(1) } else { Duration::from_secs(10) };
        let swapper = {
            let (config, pid, mock_addr) = (dir.join("ax.yaml"), ax.pid().unwrap_or(0), mock.addr);
            tokio::spawn(async move {
                let mut swaps = 0u64;
                let end = Instant::now() + swap_dur;
                while Instant::now() < end {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let weight = 1 + (swaps % 2) as u32 * 3;
                    // Written beside and renamed over, as docs/config.md asks of operators.
                    let tmp = config.with_extension("tmp");
                    if std::fs::write(&tmp, yaml(mock_addr, "", false, weight)).is_ok()
                        && std::fs::rename(&tmp, &config).is_ok()
                        && tokio::process::Command::new("kill").args(["-HUP", &pid.to_string()]).status().await.is_ok()
                    {
                        swaps += 1;
                    }
                }
                swaps
            })
        };
        let under_swaps = load::closed(&via_ax, 64, Duration::ZERO, swap_dur).await;
        let swaps = swapper.await?;
        let calm = load::closed(&via_ax, 64, Duration::ZERO, swap_dur).await;
        results.insert(
            "swaps".into(),
            json!({ "swaps": swaps, "under_swaps": summary(&under_swaps), "without": summary(&calm),
                "p99_ratio": ratio(f64::from(under_swaps.pct(99.0)), f64::from(calm.pct(99.0))) }),
        );
    }
    if on(6) {
        // 6. Governance: limits and a budget, local, then fleet-wide through Redis.
        say("6/6 governance cost");
        let plain = load::closed(&via_ax, 64, warm, dur).await;
        let local = procs::ax(&o.ax, &dir, "ax-governed", &yaml(mock.addr, "", true, 1))?;
        let gl =
            load::closed(&target("ax-governed", local.addr, "/v1/chat/completions", true, CHAT), 64, warm, dur).await;
        drop(local);
        let redis_up = std::net::TcpStream::connect("127.0.0.1:6379").is_ok();
        let mut redis_per_request = None;
        let gr = if redis_up {
            let server =
                format!("redis_url: \"redis://127.0.0.1:6379\", redis_prefix: \"bench-{}\"", std::process::id());
            let p = procs::ax(&o.ax, &dir, "ax-redis", &yaml(mock.addr, &server, true, 1))?;
            let t = target("ax-redis", p.addr, "/v1/chat/completions", true, CHAT);
            load::run(&t, 64, warm, None).await;
            // Steady state: Redis's commands (every client's) over the measured run's requests.
            let before = redis_commands();
            let s = load::run(&t, 64, dur, None).await;
            let commands = redis_commands().zip(before).map(|(a, b)| a.saturating_sub(b));
            redis_per_request =
                commands.map(|c| (c as f64 / (s.lat_us.len() as f64).max(1.0) * 1000.0).round() / 1000.0);
            Some(s)
        } else {
            None
        };
        results.insert(
        "governance".into(),
        json!({ "plain": summary(&plain), "local": summary(&gl), "redis": gr.as_ref().map(summary),
                "local_rps_ratio": ratio(gl.rps(), plain.rps()), "redis_rps_ratio": gr.as_ref().map(|g| ratio(g.rps(), plain.rps())),
                "redis_vs_local": gr.as_ref().map(|g| ratio(g.rps(), gl.rps())),
                "redis_commands_per_request": redis_per_request }),
    );
    }
    results.insert("targets".into(), targets_met(&results));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
    let doc = json!({
        "mode": if o.quick { "quick" } else { "full" }, "unix_time": now, "command": format!("ax-bench {command}"),
        "machine": machine(), "loadavg_start": loadavg, "results": results,
    });
    let out = repo().join("target/bench");
    std::fs::create_dir_all(&out)?;
    let file = out.join(format!("ax-bench-{now}.json"));
    std::fs::write(&file, serde_json::to_vec_pretty(&doc)?)?;
    let table = markdown(&doc);
    let _ = writeln!(std::io::stdout(), "{table}");
    say(&format!("results: {}", file.display()));
    if o.docs {
        let path = repo().join("docs/benchmarks/history.md");
        let mut md = std::fs::read_to_string(&path)?;
        md.push_str(&table);
        std::fs::write(&path, md)?;
        say("appended to docs/benchmarks/history.md");
    }
    // Everything started here stops before its directory goes; the processes' logs are kept
    // next to the results (a failed request is explained there, not in the figures).
    drop((mock, nginx, ax, litellm, noveum));
    let logs = out.join(format!("ax-bench-{now}-logs"));
    std::fs::create_dir_all(&logs)?;
    for entry in std::fs::read_dir(&dir)?.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "log" || e == "err") {
            if let Some(name) = path.file_name() {
                let _ = std::fs::copy(&path, logs.join(name));
            }
        }
    }
    say(&format!("logs: {}", logs.display()));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Issue 7's targets against this run: `[name, value, target, met]`.
fn targets_met(r: &serde_json::Map<String, Value>) -> Value {
    let at = |path: &str| {
        r.get(path.split('/').next().unwrap_or("")).map_or(&Value::Null, |v| {
            path.split('/').skip(1).fold(v, |v, k| match k.parse::<usize>() {
                Ok(i) if v.is_array() => &v[i],
                _ => &v[k],
            })
        })
    };
    let f = |path: &str| at(path).as_f64();
    let top =
        r.get("streams").and_then(|s| s["levels"].as_array()).and_then(|l| l.last()).cloned().unwrap_or(Value::Null);
    // The most concurrent level run (1,000 in full mode); the target is about that level.
    let streams = top["streams"].as_u64().map_or_else(
        || "the most".to_owned(),
        |n| {
            let d = n.to_string();
            let mut out = String::new();
            for (i, c) in d.chars().enumerate() {
                if i > 0 && (d.len() - i) % 3 == 0 {
                    out.push(',');
                }
                out.push(c);
            }
            out
        },
    );
    let check = |name: &str, value: Option<f64>, target: &str, ok: fn(f64) -> bool| json!({ "name": name, "value": value, "target": target, "met": value.map(ok) });
    json!([
        check(
            "added p99 at concurrency 1, OpenAI upstream (µs)",
            f("latency_c1/added_us/ax_openai/p99"),
            "≤ 200",
            |v| v <= 200.0
        ),
        check(
            "added p99 at concurrency 1, Anthropic translation (µs)",
            f("latency_c1/added_us/ax_anthropic/p99"),
            "≤ 300",
            |v| v <= 300.0
        ),
        check("throughput at concurrency 64, ax ÷ nginx", f("throughput/ax_ratio/to_nginx"), "≥ 0.8", |v| v >= 0.8),
        check(
            "throughput at concurrency 64, ax ÷ Noveum's gateway (Rust)",
            f("throughput/ax_ratio/to_noveum"),
            "> 1",
            |v| v > 1.0
        ),
        check(
            &format!("{streams} paced streams: added gap p99 (µs)"),
            top["added_gap_us"]["p99"].as_f64(),
            "≤ 1,000",
            |v| v <= 1000.0
        ),
        check(&format!("{streams} paced streams: ax RSS (MiB)"), top["ax_rss_mib"].as_f64(), "≤ 150", |v| v <= 150.0),
        check("soak: RSS after ÷ before", f("memory/soak/after_vs_before"), "≤ 1.10", |v| v <= 1.10),
        check(
            "soak: steady growth over the second half (MiB/min)",
            f("memory/soak/growth_mib_per_min"),
            "≤ 0.5 (no trend)",
            |v| v <= 0.5
        ),
        check("failed requests during snapshot swaps", f("swaps/under_swaps/errors"), "0", |v| v == 0.0),
        check("governed through Redis ÷ governed locally", f("governance/redis_vs_local"), "≥ 0.9", |v| v >= 0.9),
        check(
            "Redis commands per governed request (steady state)",
            f("governance/redis_commands_per_request"),
            "≤ 0.1",
            |v| v <= 0.1
        ),
    ])
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpu
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned());
    let mem = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = mem
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| (kb / 1024.0 / 1024.0).round());
    json!({ "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0), "cpu": model, "mem_gib": mem_gib,
            "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim() })
}

/// The human table of a run (also appended to docs/benchmarks/history.md in full mode).
fn markdown(doc: &Value) -> String {
    let r = &doc["results"];
    let v = |x: &Value| match x {
        Value::Null => "–".to_owned(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    };
    let mut s = String::new();
    let m = &doc["machine"];
    let _ = writeln!(
        s,
        "\n## Harness run ({} mode), unix time {}\n",
        v(&doc["mode"]).trim_matches('"'),
        v(&doc["unix_time"])
    );
    let _ = writeln!(
        s,
        "Machine: {} cores ({}), {} GiB, kernel {}; load average at start {}.\nCommand: `{}`.\n",
        v(&m["cores"]),
        m["cpu"].as_str().unwrap_or("?"),
        v(&m["mem_gib"]),
        m["kernel"].as_str().unwrap_or("?"),
        doc["loadavg_start"].as_str().unwrap_or("?"),
        doc["command"].as_str().unwrap_or("")
    );
    let l = &r["latency_c1"];
    let _ = writeln!(s, "| concurrency 1 | p50 µs | p99 µs |\n|---|---:|---:|");
    for (k, label) in [
        ("direct", "direct to mock"),
        ("nginx", "through nginx"),
        ("ax", "through ax (OpenAI upstream)"),
        ("direct_anthropic", "direct to mock (Anthropic)"),
        ("ax_anthropic", "through ax (Anthropic, translated)"),
        ("litellm", "through LiteLLM"),
        ("noveum", "through Noveum's gateway"),
    ] {
        if !l[k].is_null() {
            let _ = writeln!(s, "| {label} | {} | {} |", v(&l[k]["p50_us"]), v(&l[k]["p99_us"]));
        }
    }
    let a = &l["added_us"];
    let _ =
        writeln!(s, "| **ax added, OpenAI** | **{}** | **{}** |", v(&a["ax_openai"]["p50"]), v(&a["ax_openai"]["p99"]));
    let _ = writeln!(
        s,
        "| **ax added, Anthropic translation** | **{}** | **{}** |",
        v(&a["ax_anthropic"]["p50"]),
        v(&a["ax_anthropic"]["p99"])
    );
    let _ = writeln!(s, "| nginx added | {} | {} |", v(&a["nginx"]["p50"]), v(&a["nginx"]["p99"]));
    if !a["noveum"].is_null() {
        let _ = writeln!(s, "| Noveum's gateway added | {} | {} |", v(&a["noveum"]["p50"]), v(&a["noveum"]["p99"]));
    }
    s.push('\n');
    let t = &r["throughput"];
    let _ = writeln!(s, "| concurrency 64 | req/s | p99 µs | errors |\n|---|---:|---:|---:|");
    for k in ["direct", "nginx", "ax", "litellm", "noveum"] {
        let x = &t[format!("{k}_c64")];
        if !x.is_null() {
            let _ = writeln!(s, "| {k} | {} | {} | {} |", v(&x["rps"]), v(&x["p99_us"]), v(&x["errors"]));
        }
    }
    let _ = writeln!(
        s,
        "\nax ÷ nginx: **{}**; ax ÷ direct: {}; LiteLLM ÷ nginx: {}; Noveum's gateway ÷ nginx: {}; ax ÷ Noveum's gateway: **{}**.\n",
        v(&t["ax_ratio"]["to_nginx"]),
        v(&t["ax_ratio"]["to_direct"]),
        v(&t["ax_ratio"]["litellm_to_nginx"]),
        v(&t["ax_ratio"]["noveum_to_nginx"]),
        v(&t["ax_ratio"]["to_noveum"])
    );
    if let Some(c) = r["litellm_idle_cores"].as_f64() {
        let _ = writeln!(
            s,
            "LiteLLM, idle for 5 s after its load, used {:.0} % of a core; it was stopped before the scenarios below.\n",
            c * 100.0
        );
    }
    let cpu = &t["cpu_us_per_request"];
    let _ = writeln!(
        s,
        "CPU per request at concurrency 64 (user + system of the process in the path, µs; independent of how the cores were shared): mock {}, nginx {}, ax {}, LiteLLM {}, Noveum's gateway {}; ax ÷ nginx: **{}**.\n",
        v(&cpu["mock"]),
        v(&cpu["nginx"]),
        v(&cpu["ax"]),
        v(&cpu["litellm"]),
        v(&cpu["noveum"]),
        v(&cpu["ax_over_nginx"])
    );
    let _ = writeln!(s, "| highest rate with p99 under | 1 ms | 5 ms | 25 ms |\n|---|---:|---:|---:|");
    if let Some(f) = t["frontier"].as_object() {
        for (k, list) in f {
            let cells: Vec<String> = list.as_array().into_iter().flatten().map(|x| v(&x["rps"])).collect();
            let _ = writeln!(s, "| {k} | {} |", cells.join(" | "));
        }
    }
    let _ = writeln!(
        s,
        "\n| paced streams | TTFT added p50 / p99 µs | gap added p50 / p99 µs | ax max gap µs | ax RSS MiB | ax CPU µs per event | errors (direct / ax) |\n|---:|---:|---:|---:|---:|---:|---:|"
    );
    // "TTFT added p50 / p99 | gap added p50 / p99" of one proxy at one level.
    let added = |x: &Value| {
        format!(
            "{} / {} | {} / {}",
            v(&x["added_ttft_us"]["p50"]),
            v(&x["added_ttft_us"]["p99"]),
            v(&x["added_gap_us"]["p50"]),
            v(&x["added_gap_us"]["p99"])
        )
    };
    for l in r["streams"]["levels"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} / {} |",
            v(&l["streams"]),
            added(l),
            v(&l["gap_us"]["ax_max"]),
            v(&l["ax_rss_mib"]),
            v(&l["ax_cpu_us_per_event"]),
            v(&l["errors"]["direct"]),
            v(&l["errors"]["ax"])
        );
    }
    let _ = writeln!(
        s,
        "\n| the same through nginx | TTFT added p50 / p99 µs | gap added p50 / p99 µs | nginx max gap µs | nginx CPU µs per event | errors |\n|---:|---:|---:|---:|---:|---:|"
    );
    for l in r["streams"]["levels"].as_array().into_iter().flatten().filter(|l| !l["nginx"].is_null()) {
        let g = &l["nginx"];
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            v(&l["streams"]),
            added(g),
            v(&g["max_gap_us"]),
            v(&g["cpu_us_per_event"]),
            v(&g["errors"])
        );
    }
    let probes = |b: &Value| -> String {
        let p: Vec<String> = b
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let gap = p["max_gap_us"].as_f64().unwrap_or(0.0) / 1000.0;
                format!("{} {} ({gap:.1} ms)", v(&p["streams"]), if p["held"] == true { "held" } else { "not" })
            })
            .collect();
        if p.is_empty() {
            String::new()
        } else {
            format!(" (bisection, streams and the largest gap: {})", p.join(", "))
        }
    };
    let st = &r["streams"];
    let _ = writeln!(
        s,
        "\nMost concurrent streams held with every gap under 5 ms added: ax {}{}.",
        v(&st["most_held_with_gaps_under_5ms_added"]),
        probes(&st["bisection"])
    );
    if !st["nginx"].is_null() {
        let _ = writeln!(
            s,
            "The same through nginx: {}{}.",
            v(&st["nginx"]["most_held_with_gaps_under_5ms_added"]),
            probes(&st["nginx"]["bisection"])
        );
    }
    let _ = writeln!(s);
    let mem = &r["memory"];
    let _ = writeln!(
        s,
        "Memory (ax RSS, MiB): idle {:.1}, peak under load {:.1}, after load {:.1}; soak {} s ({} requests, {} errors): before {:.1}, after {:.1} (×{}), steady growth over the second half {} MiB/min (least-squares slope {}).\n",
        mem["idle_mib"].as_f64().unwrap_or(0.0),
        mem["peak_under_load_mib"].as_f64().unwrap_or(0.0),
        mem["after_load_mib"].as_f64().unwrap_or(0.0),
        v(&mem["soak"]["secs"]),
        v(&mem["soak"]["requests"]),
        v(&mem["soak"]["errors"]),
        mem["soak"]["before_mib"].as_f64().unwrap_or(0.0),
        mem["soak"]["after_mib"].as_f64().unwrap_or(0.0),
        v(&mem["soak"]["after_vs_before"]),
        v(&mem["soak"]["growth_mib_per_min"]),
        v(&mem["soak"]["least_squares_mib_per_min"])
    );
    let windows: Vec<String> = mem["soak"]["windows_max_mib"].as_array().into_iter().flatten().map(v).collect();
    if !windows.is_empty() {
        let _ = writeln!(s, "Soak RSS, highest of each 30 s (MiB): {}.\n", windows.join(", "));
    }
    let sw = &r["swaps"];
    let _ = writeln!(
        s,
        "Snapshot swaps: {} swaps (SIGHUP every 100 ms) under concurrency 64: {} req/s, p99 {} µs, **{} failed**; without swaps {} req/s, p99 {} µs.\n",
        v(&sw["swaps"]),
        v(&sw["under_swaps"]["rps"]),
        v(&sw["under_swaps"]["p99_us"]),
        v(&sw["under_swaps"]["errors"]),
        v(&sw["without"]["rps"]),
        v(&sw["without"]["p99_us"])
    );
    let _ = writeln!(s, "| target | this run | goal | met |\n|---|---:|---|---|");
    for t in r["targets"].as_array().into_iter().flatten() {
        let met = match t["met"].as_bool() {
            Some(true) => "**met**",
            Some(false) => "**not met**",
            None => "–",
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {met} |",
            t["name"].as_str().unwrap_or(""),
            v(&t["value"]),
            t["target"].as_str().unwrap_or("")
        );
    }
    let _ = writeln!(s);
    let g = &r["governance"];
    let _ = writeln!(
        s,
        "Governance (limits + budget, concurrency 64): plain {} req/s; local {} req/s (×{}); Redis {} req/s (×{}; ×{} of local), {} Redis commands a request.",
        v(&g["plain"]["rps"]),
        v(&g["local"]["rps"]),
        v(&g["local_rps_ratio"]),
        v(&g["redis"]["rps"]),
        v(&g["redis_rps_ratio"]),
        v(&g["redis_vs_local"]),
        v(&g["redis_commands_per_request"])
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One sample a second for `secs` seconds.
    fn series(secs: usize, mib: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        (0..secs).map(|i| (i as f64, mib(i as f64))).collect()
    }

    #[test]
    fn a_single_step_is_not_a_trend_and_steady_growth_is() {
        // Flat, one 4 MiB step in the middle, flat again: the pattern of the full runs.
        let step = series(300, |t| if t < 150.0 { 24.0 } else { 28.0 });
        assert_eq!(steady_growth_per_min(&step), 0.0);
        assert!(least_squares_per_min(&step) > 0.5, "the slope does see the step");
        // 1 MiB a minute, every minute: a leak.
        let leak = series(300, |t| 24.0 + t / 60.0);
        assert!((steady_growth_per_min(&leak) - 1.0).abs() < 0.01);
        assert!((least_squares_per_min(&leak) - 1.0).abs() < 0.01);
        // Too short for whole windows (quick mode): the slope.
        let short = series(10, |t| 24.0 + t / 60.0);
        assert!((steady_growth_per_min(&short) - 1.0).abs() < 0.01);
    }
}
