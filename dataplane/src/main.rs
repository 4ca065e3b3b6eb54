//! `ax-dataplane`: run the gateway, validate a config, or make an API key.
//!
//! Arguments are parsed by hand: three subcommands and four flags do not justify clap's
//! compile time on a 2-core build box.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use std::net::ToSocketAddrs;

use ax_dataplane::config::{self, reload};
use ax_dataplane::control;
use ax_dataplane::{worker, App};
use sha2::{Digest, Sha256};

/// mimalloc instead of glibc malloc: under load glibc's arenas spent ~22% of the gateway's CPU
/// (profile in docs/BENCHMARKS.md); mimalloc's thread-local free lists remove most of it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage:
  ax-dataplane [serve] --config <file.yaml> [--listen <addr>] [--addr-file <path>]
  ax-dataplane [serve] --control-plane <url>[,<url>…] [--node-token <token> | AX_NODE_TOKEN] [--state-dir <dir>]
                       [--config <file.yaml> (server and metering sections)] [--listen <addr>] [--addr-file <path>]
  ax-dataplane check --config <file.yaml>
  ax-dataplane keygen
  ax-dataplane help [serve|check|keygen]";

const HELP_SERVE: &str = "ax-dataplane [serve]: serves the gateway (the default command).

  --config, -c <file.yaml>    the configuration: upstreams, routes, tenants, server, metering (DB-less);
                              with --control-plane only its server and metering sections count
  --control-plane <url>[,…]   follow a control plane: configuration and upstream keys arrive over a
                              websocket; several URLs are tried in turn
  --node-token <token>        this node's token (`ax-controlplane node create`); else AX_NODE_TOKEN
  --state-dir <dir>           with --control-plane: the last applied configuration (served when the
                              control plane is unreachable at start) and the usage spool (default ax-state)
  --listen <addr>             the address to serve on (default: server.listen, 127.0.0.1:8080)
  --addr-file <path>          write the bound address there once listening (for --listen 127.0.0.1:0)

environment:
  AX_LOG        log filter, `tracing` syntax (default info: one JSON usage line per request on stderr;
                warn keeps only problems)
  AX_THREADS    serving threads (default: one per core)
  AX_NODE_TOKEN the node token, when --node-token is not given
  ${NAME}       any variable a configuration names as `${NAME}` (upstream keys)

SIGTERM or Ctrl-C: stops accepting, finishes the requests in flight, then exits.";

const HELP_CHECK: &str = "ax-dataplane check --config <file.yaml>: validates a configuration as `serve` would load it
(every reference, price and limit; `${NAME}` variables must be set) and prints `<file>: ok` or the
first error with its field path. Exit 0 when valid, 1 when not.";

const HELP_KEYGEN: &str = "ax-dataplane keygen: prints a new caller key and its SHA-256. Put the sha256 line in the
configuration (tenants[].keys[].sha256) and hand the key to its caller once: ax keeps only the digest.";

/// `help [command]`, `--help`, `-h`: the usage, or one command's help, on stdout.
#[expect(clippy::print_stdout, reason = "help is the command's product")]
fn help(command: Option<&str>) -> ExitCode {
    match command {
        None => println!("ax-dataplane: the data plane of ax, an LLM API gateway.\n\n{USAGE}\n\n{HELP_SERVE}\n\n{HELP_CHECK}\n\n{HELP_KEYGEN}"),
        Some("serve") => println!("{HELP_SERVE}"),
        Some("check") => println!("{HELP_CHECK}"),
        Some("keygen") => println!("{HELP_KEYGEN}"),
        Some("help") => println!("{USAGE}"),
        Some(other) => {
            eprintln!("error: no command '{other}'\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}

struct Args {
    command: String,
    /// With `help`: the command asked about (none: all of them).
    topic: Option<String>,
    config: Option<PathBuf>,
    listen: Option<String>,
    addr_file: Option<PathBuf>,
    control_plane: Option<String>,
    node_token: Option<String>,
    state_dir: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1).peekable();
    let named = matches!(it.peek().map(String::as_str), Some("serve" | "check" | "keygen" | "help"));
    let command = if named { it.next().unwrap_or_default() } else { "serve".to_owned() };
    let mut a = Args {
        command,
        topic: None,
        config: None,
        listen: None,
        addr_file: None,
        control_plane: None,
        node_token: None,
        state_dir: None,
    };
    if a.command == "help" {
        a.topic = it.next();
        return Ok(a);
    }
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--config" | "-c" => a.config = Some(PathBuf::from(value()?)),
            "--listen" => a.listen = Some(value()?),
            "--addr-file" => a.addr_file = Some(PathBuf::from(value()?)),
            "--control-plane" => a.control_plane = Some(value()?),
            "--node-token" => a.node_token = Some(value()?),
            "--state-dir" => a.state_dir = Some(PathBuf::from(value()?)),
            // `<command> --help`: that command's help; a bare `--help`: all of it.
            "-h" | "--help" => {
                a.topic = named.then(|| a.command.clone());
                a.command = "help".to_owned();
                return Ok(a);
            }
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(a)
}

/// JSON lines on stderr, the shape of `tracing_subscriber`'s JSON format (timestamp, level,
/// fields, target, current span) plus the `request_id` of the request a line was written in,
/// written by `json-subscriber`: it keeps each span's fields as
/// JSON values, where `tracing_subscriber` re-parses a span's fields on every `record` and every
/// event inside it. At the default level (`info`, one usage line per request) that cut the cost
/// of logging a request by 40 % (callgrind: 82,000 → 49,000 instructions).
///
/// Every line goes through one writer thread (`tracing_appender`'s non-blocking writer over a
/// buffered stderr, lossy): no serving thread waits on the pipe or terminal behind stderr; lines
/// the thread cannot keep up with are dropped and counted. The usage line of each request is
/// written straight into it (`metering::usage_log`). The returned guard flushes at exit.
fn init_logs() -> tracing_appender::non_blocking::WorkerGuard {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("AX_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(LOG_QUEUE)
        .thread_name("ax-log")
        .finish(std::io::BufWriter::with_capacity(64 * 1024, std::io::stderr()));
    ax_dataplane::metering::usage_log::install(writer.clone());
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let mut json = json_subscriber::fmt::layer().with_current_span(true).with_span_list(false).with_writer(writer);
    // The id of the request a line was written in (none outside one): a top-level field.
    json.inner_layer_mut().add_dynamic_field("request_id", |_, _| ax_dataplane::trace::current_request_id());
    tracing_subscriber::registry().with(filter).with(json).init();
    guard
}

/// Writes queued for the writer thread at most. A write is one ordinary log line or one serving
/// thread's batch of usage lines (`usage_log::BATCH_BYTES` and the line that filled it), so about
/// `LOG_QUEUE_BYTES` wait at most: half a second of usage lines at 80,000 requests a second, or
/// 512 ordinary lines. (It was 10,000 writes: 320 MiB of 32 KiB batches for a stderr that blocks.)
const LOG_QUEUE: usize = LOG_QUEUE_BYTES / ax_dataplane::metering::usage_log::BATCH_BYTES;
const LOG_QUEUE_BYTES: usize = 32 * 1024 * 1024;

/// No transparent huge pages for this process. mimalloc asks for them on its arenas
/// (`madvise(MADV_HUGEPAGE)`), and the kernel then zeroes a whole 2 MiB page the first time any
/// byte of it is touched, inside the serving thread that touched it. A burst of 1,000 new streams
/// spent 16 % of the gateway's CPU zeroing pages; without huge pages its RSS was 60–64 MiB
/// instead of 94 and the added time to first token a third lower, with throughput unchanged
/// within the spread between runs (docs/BENCHMARKS.md).
fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        tracing::warn!(error = %e, "cannot turn transparent huge pages off");
    }
}

fn main() -> ExitCode {
    let missing = ax_protocol::cpu::missing();
    if !missing.is_empty() {
        eprintln!("error: {}", ax_protocol::cpu::refusal(&missing));
        return ExitCode::from(2);
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("error: {msg}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match args.command.as_str() {
        "help" => help(args.topic.as_deref()),
        "keygen" => keygen(),
        "check" => check(&args),
        _ => serve(args),
    }
}

#[expect(clippy::print_stdout, reason = "keygen's output is its product")]
fn keygen() -> ExitCode {
    use rand::distr::{Alphanumeric, SampleString};
    let key = format!("ax-{}", Alphanumeric.sample_string(&mut rand::rng(), 40));
    let digest = hex::encode(Sha256::digest(key.as_bytes()));
    println!("key:    {key}");
    println!("sha256: {digest}");
    println!("\nPut the sha256 line in the config (tenants[].keys[].sha256); hand the key to the caller once.");
    ExitCode::SUCCESS
}

fn check(args: &Args) -> ExitCode {
    let Some(path) = &args.config else {
        eprintln!("error: --config is required\n{USAGE}");
        return ExitCode::from(2);
    };
    match config::load(path, 1, None) {
        Ok(_) => {
            eprintln!("{}: ok", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            ExitCode::FAILURE
        }
    }
}

/// Turns traces on when `server.tracing` or the standard OpenTelemetry variables ask for them
/// (`OTEL_SDK_DISABLED=true` keeps them off).
fn start_tracing(spec: Option<&ax_protocol::config::TracingSpec>) -> Result<(), String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let Some(settings) = ax_dataplane::metering::traces::Settings::resolve(spec, &env)? else {
        return Ok(());
    };
    tracing::info!(endpoint = %settings.endpoint, sampler = ?settings.sampler, "tracing on");
    ax_dataplane::metering::traces::install(settings)
}

fn serve(args: Args) -> ExitCode {
    let _logs = init_logs();
    no_huge_pages();
    // One serving thread per core (AX_THREADS overrides), each with its own runtime.
    let threads = std::env::var("AX_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get));
    worker::set_count(threads);
    let link = match &args.control_plane {
        None => None,
        Some(url) => {
            let Some(token) = args.node_token.clone().or_else(|| std::env::var("AX_NODE_TOKEN").ok()) else {
                eprintln!("error: --control-plane needs --node-token or AX_NODE_TOKEN\n{USAGE}");
                return ExitCode::from(2);
            };
            let state_dir = args.state_dir.clone().unwrap_or_else(|| PathBuf::from("ax-state"));
            // Several replicas: `--control-plane http://cp-1:8090,http://cp-2:8090`.
            let urls: Vec<String> =
                url.split(',').map(str::trim).filter(|u| !u.is_empty()).map(str::to_owned).collect();
            if urls.is_empty() {
                eprintln!("error: --control-plane needs a URL\n{USAGE}");
                return ExitCode::from(2);
            }
            Some(control::Link { urls, token, state_dir })
        }
    };
    let (mut spec, snap) = match (&args.config, &link) {
        (Some(path), None) => match config::load(path, 1, None) {
            Ok(x) => x,
            Err(e) => {
                tracing::error!(error = %e, path = %path.display(), "invalid configuration");
                return ExitCode::FAILURE;
            }
        },
        (None, None) => {
            eprintln!("error: --config (or --control-plane) is required\n{USAGE}");
            return ExitCode::from(2);
        }
        (path, Some(link)) => match control_plane_start(path.as_deref(), link) {
            Ok(x) => x,
            Err(e) => {
                tracing::error!(error = %e, "cannot start in control-plane mode");
                return ExitCode::FAILURE;
            }
        },
    };
    if let Some(link) = &link {
        if spec.metering.spool_dir.is_none() {
            spec.metering.spool_dir = Some(control::default_spool(link).display().to_string());
        }
    }
    if let Err(e) = start_tracing(spec.server.tracing.as_ref()) {
        tracing::error!(error = %e, "cannot start tracing");
        return ExitCode::FAILURE;
    }
    let path = args.config.clone();
    let base = spec.clone();
    let listen = args.listen.unwrap_or(spec.server.listen);
    let metering: Option<(PathBuf, Box<dyn ax_dataplane::metering::spool::Sink>)> =
        match (&spec.metering.spool_dir, &spec.metering.jsonl, &link) {
            (None, None, _) => None,
            (Some(dir), Some(jsonl), _) => {
                let dir = PathBuf::from(dir);
                let opened = ax_dataplane::metering::spool::init(&dir)
                    .and_then(|()| ax_dataplane::metering::spool::JsonlSink::open(Path::new(jsonl)));
                match opened {
                    Ok(sink) => Some((dir, Box::new(sink))),
                    Err(e) => {
                        tracing::error!(error = %e, "cannot open the usage spool or sink");
                        return ExitCode::FAILURE;
                    }
                }
            }
            (Some(dir), None, Some(link)) => {
                let dir = PathBuf::from(dir);
                match ax_dataplane::metering::spool::init(&dir).and_then(|()| control::ControlPlaneSink::new(link)) {
                    Ok(sink) => Some((dir, Box::new(sink))),
                    Err(e) => {
                        tracing::error!(error = %e, "cannot open the usage spool");
                        return ExitCode::FAILURE;
                    }
                }
            }
            _ => {
                tracing::error!("metering: set both spool_dir and jsonl (the standalone sink), or neither");
                return ExitCode::FAILURE;
            }
        };
    let listeners = match listen.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(addr)) => worker::bind_reuseport(addr, threads),
        Ok(None) => Err(std::io::Error::other("the address resolves to nothing")),
        Err(e) => Err(e),
    };
    let listeners = match listeners {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, listen = %listen, "cannot listen");
            return ExitCode::FAILURE;
        }
    };
    let addr = listeners.first().and_then(|l| l.local_addr().ok()).map(|a| a.to_string()).unwrap_or_default();
    if let Some(f) = &args.addr_file {
        if let Err(e) = std::fs::write(f, &addr) {
            tracing::error!(error = %e, "cannot write --addr-file");
            return ExitCode::FAILURE;
        }
    }

    let app = App::new(snap);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (exit_tx, mut exit_rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Result<(), String>)>();
    let mut handles = Vec::with_capacity(threads);
    for (i, listener) in listeners.into_iter().enumerate() {
        let (app, mut stop, exit) = (app.clone(), stop_rx.clone(), exit_tx.clone());
        let spawned = std::thread::Builder::new().name(format!("ax-serve-{i}")).spawn(move || {
            worker::set_current(i);
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .on_thread_park(ax_dataplane::metering::on_park)
                .build()
                .map_err(|e| e.to_string())
                .and_then(|rt| {
                    rt.block_on(async move {
                        tokio::spawn(plan_a_wake_up_every_second());
                        let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
                        let shutdown = async move {
                            let _ = stop.wait_for(|s| *s).await;
                        };
                        let served = ax_dataplane::serve(listener, app.clone(), shutdown).await;
                        // Writes of the response store sent behind their answers run on this
                        // thread's runtime: they finish before it ends.
                        app.responses.drain().await;
                        served.map_err(|e| e.to_string())
                    })
                });
            // Usage lines this thread still holds (its requests drained): to the writer before
            // the process's exit flushes it.
            ax_dataplane::metering::flush_now();
            let _ = exit.send((i, result));
        });
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                tracing::error!(error = %e, "cannot start a serving thread");
                return ExitCode::FAILURE;
            }
        }
    }
    drop(exit_tx);

    // The main thread runs the control work: signals, reloads, metrics upkeep.
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the runtime");
            return ExitCode::FAILURE;
        }
    };
    let failed = rt.block_on(async move {
        app.spawn_upkeep();
        match (&link, path) {
            (Some(link), _) => {
                tokio::spawn(control::follow(app.clone(), link.clone(), base));
            }
            (None, Some(path)) => {
                tokio::spawn(reload::watch(app.clone(), path));
            }
            (None, None) => {}
        }
        if let Some((dir, sink)) = metering {
            if let Err(e) = ax_dataplane::metering::spool::spawn_drain(dir, sink) {
                tracing::error!(error = %e, "cannot start the usage spool drain");
                return true;
            }
        }
        tracing::info!(addr = %addr, threads, version = env!("CARGO_PKG_VERSION"), "listening");
        let mut failed = false;
        tokio::select! {
            () = shutdown_signal() => {}
            Some((i, r)) = exit_rx.recv() => {
                tracing::error!(thread = i, error = ?r.err(), "a serving thread stopped; shutting down");
                failed = true;
            }
        }
        let _ = stop_tx.send(true);
        while let Some((i, r)) = exit_rx.recv().await {
            if let Err(e) = r {
                tracing::error!(thread = i, error = %e, "serving thread failed");
                failed = true;
            }
        }
        // Fleet-wide quota this process drew and did not spend goes back to the fleet.
        if let Some(fleet) = &app.fleet {
            fleet.release().await;
        }
        failed
    });
    for h in handles {
        let _ = h.join();
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Keeps a timer due within a second on a serving thread. tokio's timer wakes its driver (an
/// `eventfd` write: a system call) whenever a timer is armed earlier than the wake-up the driver
/// planned when it last parked, and with no timer pending it plans none: a thread that had gone
/// idle between requests paid one write for the next request's first-byte timer (about one in
/// ten requests at concurrency 64, `strace -c`). With a wake-up always planned within a second,
/// a request's timeouts (seconds) are never earlier than it. It costs one wake-up a second.
///
/// The same tick lets the allocator give freed memory back. mimalloc returns freed pages to the
/// system only from a later free that comes after its purge delay (1 s): a serving thread that
/// goes quiet after a burst of large answers (a forwarded 20 MiB body is freed within
/// milliseconds of its arrival) would keep them until its next large free, for hours if the
/// load stays light. Freeing one untouched 1 MiB block a second (a "huge" allocation to mimalloc,
/// so its free is such a moment) gives every serving thread that moment; no page of it is ever
/// touched, so it costs no memory.
async fn plan_a_wake_up_every_second() {
    let mut t = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        t.tick().await;
        drop(std::hint::black_box(Vec::<u8>::with_capacity(1 << 20)));
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            () = term => {},
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
    tracing::info!("shutting down");
}

/// Control-plane mode's first snapshot: the last-known-good version if one is stored (so the node
/// serves while the control plane is down), else an empty one until the first push. The local
/// file, if any, supplies the `server` and `metering` sections only.
fn control_plane_start(
    path: Option<&Path>,
    link: &control::Link,
) -> Result<(ax_protocol::config::ConfigSpec, ax_dataplane::config::snapshot::Snapshot), String> {
    let mut base = match path {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            config::parse(&text).map_err(|e| format!("{}: {e}", p.display()))?
        }
        None => ax_protocol::config::ConfigSpec::default(),
    };
    if !(base.upstreams.is_empty() && base.routes.is_empty() && base.tenants.is_empty()) {
        tracing::warn!("control-plane mode: upstreams, routes and tenants in the local file are ignored");
    }
    base.upstreams.clear();
    base.routes.clear();
    base.tenants.clear();
    if let Some(stored) = control::load_last_known_good(link) {
        match control::compile(&base, stored.document, stored.version, None).0 {
            Ok(snap) => {
                tracing::info!(
                    version = stored.version,
                    "serving the last-known-good configuration until the control plane answers"
                );
                return Ok((base, snap));
            }
            Err(e) => tracing::error!(error = %e, "the last-known-good configuration does not compile; starting empty"),
        }
    }
    let snap = control::compile(&base, Default::default(), 0, None).0.map_err(|e| e.to_string())?;
    Ok((base, snap))
}
