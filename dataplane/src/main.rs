//! `ax-dataplane`: run the gateway, validate a config, or make an API key.
//!
//! Arguments are parsed by hand: three subcommands and four flags do not justify clap's
//! compile time on a 2-core build box.

use std::path::PathBuf;
use std::process::ExitCode;

use ax_dataplane::{config, reload, App};
use sha2::{Digest, Sha256};

/// mimalloc instead of glibc malloc: under load glibc's arenas spent ~22% of the gateway's CPU
/// (profile in docs/BENCHMARKS.md); mimalloc's thread-local free lists remove most of it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage:
  ax-dataplane [serve] --config <file.yaml> [--listen <addr>] [--addr-file <path>]
  ax-dataplane check --config <file.yaml>
  ax-dataplane keygen";

struct Args {
    command: String,
    config: Option<PathBuf>,
    listen: Option<String>,
    addr_file: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1).peekable();
    let command = match it.peek().map(String::as_str) {
        Some("serve" | "check" | "keygen") => it.next().unwrap_or_default(),
        _ => "serve".to_owned(),
    };
    let mut a = Args { command, config: None, listen: None, addr_file: None };
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--config" | "-c" => a.config = Some(PathBuf::from(value()?)),
            "--listen" => a.listen = Some(value()?),
            "--addr-file" => a.addr_file = Some(PathBuf::from(value()?)),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(a)
}

fn init_logs() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("AX_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(true)
        .with_span_list(false)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> ExitCode {
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

fn serve(args: Args) -> ExitCode {
    init_logs();
    let Some(path) = args.config.clone() else {
        eprintln!("error: --config is required\n{USAGE}");
        return ExitCode::from(2);
    };
    let (spec, snap) = match config::load(&path, 1, None) {
        Ok(x) => x,
        Err(e) => {
            tracing::error!(error = %e, path = %path.display(), "invalid configuration");
            return ExitCode::FAILURE;
        }
    };
    let listen = args.listen.unwrap_or(spec.server.listen);
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the runtime");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(&listen).await {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, listen = %listen, "cannot listen");
                return ExitCode::FAILURE;
            }
        };
        let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
        if let Some(f) = &args.addr_file {
            if let Err(e) = std::fs::write(f, &addr) {
                tracing::error!(error = %e, "cannot write --addr-file");
                return ExitCode::FAILURE;
            }
        }
        let app = App::new(snap);
        tokio::spawn(reload::watch(app.clone(), path));
        tracing::info!(addr = %addr, version = env!("CARGO_PKG_VERSION"), "listening");
        match ax_dataplane::serve(listener, app, shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "server failed");
                ExitCode::FAILURE
            }
        }
    })
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
