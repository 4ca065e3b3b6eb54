//! `ax-controlplane`: serve the admin API and the snapshot push, run migrations, create operators
//! and data-plane tokens, rotate the master key.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use ax_controlplane::{admin, auth, crypto, push, router, store, Settings, State, MIGRATOR};

const USAGE: &str = "usage (DATABASE_URL and AX_MASTER_KEY in the environment):
  ax-controlplane serve [--listen 127.0.0.1:8090] [--addr-file <path>] [--ui-dir ui/dist]
  ax-controlplane migrate
  ax-controlplane admin create <username> [--role admin|operator|finance]   (password from AX_ADMIN_PASSWORD or stdin)
  ax-controlplane node create <id>           (prints the node token once; AX_NODE_TOKEN registers a chosen one)
  ax-controlplane rotate-master-key            (re-encrypts every upstream key from AX_MASTER_KEY_PREVIOUS to AX_MASTER_KEY)
  ax-controlplane help [command]";

const HELP_SERVE: &str = "ax-controlplane serve: the admin API (/api/v1), the admin UI, the configuration push to data
planes (websocket /api/v1/nodes/connect) and usage ingestion. Migrates the database first.

  --listen <addr>      the address to serve on (default 127.0.0.1:8090)
  --addr-file <path>   write the bound address there once listening (for --listen 127.0.0.1:0)
  --ui-dir <dir>       the built admin UI (ui/build.sh writes ui/dist); else AX_UI_DIR; none: API only

environment:
  DATABASE_URL            Postgres, e.g. postgres://user@host/ax
  AX_MASTER_KEY           32 bytes, base64: seals upstream keys in the database
  AX_MASTER_KEY_PREVIOUS  the key before a rotation, still accepted for reading
  AX_COOKIE_SECURE=0      session cookies without `Secure` (plain-HTTP development only)
  AX_PUBLIC_URL           the admin UI's public URL (e.g. https://ax.example.com): SSO's callback
  AX_PASSWORD_LOGIN=0     no password logins (single sign-on only)

single sign-on (OpenID Connect, authorization code + PKCE; on when AX_OIDC_ISSUER is set):
  AX_OIDC_ISSUER          the provider's issuer URL (its /.well-known/openid-configuration)
  AX_OIDC_CLIENT_ID       this control plane's client id at the provider
  AX_OIDC_CLIENT_SECRET   its secret (unset: a public client, PKCE alone)
  AX_OIDC_ROLES           claim value → role, e.g. ax-admins=admin,ax-ops=operator,finance=finance
  AX_OIDC_ROLE_CLAIM      the claim those values are in (default groups)
  AX_OIDC_USERNAME_CLAIM  the claim that names the operator (default preferred_username)
  AX_OIDC_SCOPES          scopes to ask for (default \"openid profile email\")
  AX_OIDC_REDIRECT_URL    the callback URL registered at the provider (default
                          AX_PUBLIC_URL/api/v1/sso/callback, else from the request's Host)
  AX_OIDC_LABEL           the login page's button (default \"Single sign-on\")
  AX_LOG                  log filter, `tracing` syntax (default info)

SIGTERM or Ctrl-C: stops accepting, finishes the requests in flight, closes the data planes'
websockets (they move to another replica), then exits.";

const HELP_MIGRATE: &str = "ax-controlplane migrate: applies the database migrations (idempotent) and makes the usage
partitions of the coming months. `serve` does the same at start. Needs DATABASE_URL.";

const HELP_ADMIN: &str = "ax-controlplane admin create <username> [--role admin|operator|finance]: creates an operator
of the admin UI and API, or resets the password (and role) of an existing one. The password comes
from AX_ADMIN_PASSWORD, else the first line of stdin (12 characters or more). Roles: admin (everything), operator (routes,
weights, tenants' limits and budgets, keys), finance (cost reports). Default role: admin.";

const HELP_NODE: &str =
    "ax-controlplane node create <id>: registers a data plane and prints its token once (the database
keeps its digest). AX_NODE_TOKEN registers a token chosen by the deployment instead (24 characters
or more). Give the token to the data plane as --node-token or AX_NODE_TOKEN.";

const HELP_ROTATE: &str = "ax-controlplane rotate-master-key: re-encrypts every stored upstream key from the previous
master key (AX_MASTER_KEY_PREVIOUS) to the new one (AX_MASTER_KEY), in one transaction. Run it
with both set, then drop AX_MASTER_KEY_PREVIOUS.";

/// `help [command]`, `<command> --help`: the usage, or one command's help.
fn help(command: Option<&str>) -> Option<String> {
    Some(match command {
        None => format!(
            "ax-controlplane: the control plane of ax, an LLM API gateway.\n\n{USAGE}\n\n{HELP_SERVE}\n\n{HELP_MIGRATE}\n\n{HELP_ADMIN}\n\n{HELP_NODE}\n\n{HELP_ROTATE}"
        ),
        Some("serve") => HELP_SERVE.to_owned(),
        Some("migrate") => HELP_MIGRATE.to_owned(),
        Some("admin") => HELP_ADMIN.to_owned(),
        Some("node") => HELP_NODE.to_owned(),
        Some("rotate-master-key") => HELP_ROTATE.to_owned(),
        Some("help") => USAGE.to_owned(),
        Some(_) => return None,
    })
}

/// Logs to stderr at `AX_LOG`, else `info` for the server and `warn` for the one-shot commands
/// (whose output is their answer, not the database driver's INFO lines).
fn init_logs(serving: bool) {
    use tracing_subscriber::EnvFilter;
    let default = if serving { "info" } else { "warn" };
    let filter = EnvFilter::try_from_env("AX_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    json_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}

#[expect(clippy::print_stdout, reason = "the usage asked for")]
fn main() -> ExitCode {
    let missing = ax_protocol::cpu::missing();
    if !missing.is_empty() {
        eprintln!("error: {}", ax_protocol::cpu::refusal(&missing));
        return ExitCode::from(2);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let first = args.first().map(String::as_str);
    let asked = if first == Some("help") {
        Some(args.get(1).map(String::as_str))
    } else if args.iter().any(|a| matches!(a.as_str(), "-h" | "--help")) {
        Some(first.filter(|c| !c.starts_with('-')))
    } else {
        None
    };
    if let Some(command) = asked {
        return match help(command) {
            Some(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            None => {
                eprintln!("error: no command '{}'\n{USAGE}", command.unwrap_or_default());
                ExitCode::from(2)
            }
        };
    }
    init_logs(matches!(args.first().map(String::as_str), None | Some("serve")));
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("error: {msg}");
            if msg.starts_with("usage") {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
            ExitCode::FAILURE
        }
    }
}

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
}

async fn connect() -> Result<sqlx::PgPool, String> {
    let url = std::env::var("DATABASE_URL").map_err(|_| "DATABASE_URL is not set".to_owned())?;
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(std::time::Duration::from_secs(5))
        .connect(&url)
        .await
        .map_err(|e| format!("cannot connect to the database: {e}"))
}

async fn migrate(db: &sqlx::PgPool) -> Result<(), String> {
    MIGRATOR.run(db).await.map_err(|e| format!("migration failed: {e}"))?;
    store::usage::ensure_partitions(db).await.map_err(|e| format!("partitions: {e}"))
}

#[expect(clippy::print_stdout, reason = "command output")]
async fn run(args: Vec<String>) -> Result<(), String> {
    match args.first().map(String::as_str) {
        None | Some("serve") => serve(&args).await,
        Some("migrate") => {
            let db = connect().await?;
            migrate(&db).await?;
            println!("migrations applied");
            Ok(())
        }
        Some("admin") if args.get(1).map(String::as_str) == Some("create") => {
            let username = args.get(2).filter(|u| !u.starts_with("--")).ok_or("usage: admin create <username>")?;
            let role = flag(&args, "--role").unwrap_or_else(|| "admin".to_owned());
            let role = auth::Role::parse(&role).ok_or("usage: --role is admin, operator or finance")?;
            let password = match std::env::var("AX_ADMIN_PASSWORD") {
                Ok(p) => p,
                Err(_) => {
                    let mut line = String::new();
                    std::io::stdin().read_line(&mut line).map_err(|e| e.to_string())?;
                    line.trim_end_matches(['\r', '\n']).to_owned()
                }
            };
            let db = connect().await?;
            migrate(&db).await?;
            auth::create_operator(&db, username, &password, role).await?;
            println!("operator '{username}' ({}) ready", role.as_str());
            Ok(())
        }
        Some("node") if args.get(1).map(String::as_str) == Some("create") => {
            let id = args.get(2).ok_or("usage: node create <id>")?;
            let db = connect().await?;
            migrate(&db).await?;
            // A token chosen by the deployment (a secret shared with the node) or a fresh one.
            let token = std::env::var("AX_NODE_TOKEN").unwrap_or_else(|_| format!("axn-{}", crypto::token(30)));
            if token.len() < 24 {
                return Err("AX_NODE_TOKEN must have at least 24 characters".to_owned());
            }
            admin::register_node(&db, id, &token).await.map_err(|e| e.message)?;
            println!("{token}");
            Ok(())
        }
        Some("rotate-master-key") => rotate(&connect().await?).await,
        Some(other) => Err(format!("usage: unknown command '{other}'")),
    }
}

async fn serve(args: &[String]) -> Result<(), String> {
    let keys = crypto::MasterKeys::from_env()?;
    let db = connect().await?;
    migrate(&db).await?;
    let listen = flag(args, "--listen").unwrap_or_else(|| "127.0.0.1:8090".to_owned());
    let listener =
        tokio::net::TcpListener::bind(&listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    if let Some(f) = flag(args, "--addr-file") {
        std::fs::write(&f, addr.to_string()).map_err(|e| format!("cannot write --addr-file: {e}"))?;
    }
    let settings = Settings::from_env(flag(args, "--ui-dir"));
    match &settings.ui_dir {
        Some(d) if d.join("index.html").is_file() => tracing::info!(dir = %d.display(), "serving the admin UI at /"),
        Some(d) => tracing::warn!(dir = %d.display(), "no index.html in the UI directory; build it with ui/build.sh"),
        None => tracing::info!("no admin UI directory (build it with ui/build.sh); the API is at /api/"),
    }
    let metrics = ax_controlplane::prometheus();
    let sso = match ax_controlplane::sso::Config::from_env()? {
        Some(config) => {
            tracing::info!(issuer = %config.issuer, "single sign-on through OpenID Connect");
            Some(ax_controlplane::sso::Sso::new(config)?)
        }
        None => None,
    };
    if !settings.password_login && sso.is_none() {
        return Err("AX_PASSWORD_LOGIN=0 leaves no way to log in: configure single sign-on (AX_OIDC_ISSUER)".to_owned());
    }
    let state = Arc::new(State { db: db.clone(), keys, hub: push::Hub::default(), settings, sso, metrics });
    tokio::spawn(push::follow(state.clone()));
    tokio::spawn(async move {
        let mut t = tokio::time::interval(std::time::Duration::from_secs(3600));
        loop {
            t.tick().await;
            if let Err(e) = store::usage::ensure_partitions(&db).await {
                tracing::error!(error = %e, "usage partition upkeep failed");
            }
            let _ = store::operators::purge_expired(&db).await;
            let _ = store::nodes::purge_stale_connections(&db).await;
        }
    });
    tracing::info!(addr = %addr, "control plane listening");
    let app = router(state.clone()).into_make_service_with_connect_info::<SocketAddr>();
    // SIGTERM or SIGINT: stop accepting, tell every node session to close (its data plane moves
    // to another replica at once), let admin requests and usage batches in flight finish, for at
    // most DRAIN.
    let (signalled_tx, mut signalled) = tokio::sync::watch::channel(false);
    let closing = state.clone();
    // (`tap_io` does nothing; through it the address is the request's `ConnectInfo`.)
    use axum::serve::ListenerExt;
    let listener = ax_controlplane::listener::Listener(listener).tap_io(|_| {});
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown_signal().await;
        tracing::info!(drain_s = DRAIN.as_secs(), "shutting down: finishing requests in flight, closing node sessions");
        closing.hub.close();
        let _ = signalled_tx.send(true);
    });
    let deadline = async {
        let _ = signalled.wait_for(|s| *s).await;
        tokio::time::sleep(DRAIN).await;
    };
    let result = tokio::select! {
        r = std::future::IntoFuture::into_future(server) => r.map_err(|e| e.to_string()),
        () = deadline => {
            tracing::warn!("requests still in flight after the drain period; stopping anyway");
            Ok(())
        }
    };
    if !state.hub.closed(std::time::Duration::from_secs(2)).await {
        tracing::warn!("node sessions still open at exit");
    }
    tracing::info!("control plane stopped");
    result
}

/// How long a shutting-down control plane lets requests in flight finish.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(20);

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        () = term => {},
    }
}

/// Re-encrypts every upstream key under the current master key.
#[expect(clippy::print_stdout, reason = "command output")]
async fn rotate(db: &sqlx::PgPool) -> Result<(), String> {
    let keys = crypto::MasterKeys::from_env()?;
    let mut tx = db.begin().await.map_err(|e| e.to_string())?;
    let rows = store::config::sealed_keys(&mut tx, true).await.map_err(|e| e.to_string())?;
    let mut n = 0;
    for (name, ct, nonce, id) in rows {
        if id == keys.current.id {
            continue;
        }
        let plain = keys.open(&id, &nonce, &ct, &name).map_err(|e| format!("upstream {name}: {e}"))?;
        store::config::store_key(&mut tx, &name, keys.seal(&plain, &name)?).await.map_err(|e| e.to_string())?;
        n += 1;
    }
    tx.commit().await.map_err(|e| e.to_string())?;
    println!("re-encrypted {n} upstream key(s) under master key {}", keys.current.id);
    Ok(())
}
