//! ax control plane: the admin API over Postgres, the snapshot push to data planes, usage
//! ingestion and cost reports.
//!
//! Codemap (a request's path), in layers: a module imports only from the lines below its own.
//! - `admin`, `usage`, `push` — the handlers: `/api/v1/…` (tenants, keys, upstreams, routes +
//!   preview, versions, nodes, audit); usage ingestion and reports; the data planes' websocket.
//!   Each decodes, calls the store, and a mutation ends in `document::commit`.
//! - `auth`     — operators, sessions (cookie), CSRF, roles, login throttling.
//! - `sso`      — single sign-on: OpenID Connect (code flow + PKCE) into an ordinary session.
//! - `document` — tables → `Document`; validation with the rules every data plane applies;
//!   versions; NOTIFY.
//! - `store`    — every SQL statement, by table group.
//! - `crypto`   — AES-256-GCM for upstream keys, SHA-256 digests, random tokens.
//! - `error`    — `ApiError`: one JSON error shape with stable codes and field errors.
//! - `extract`  — `ApiPath`, `ApiQuery`, `ApiBody`: axum's extractors with JSON rejections.
//! - `listener` — TCP_NODELAY, and JSON in place of hyper's empty 400/414/431 answers.
//! - `ui`       — the admin UI's static files at `/` (everything not under `/api/`).

#![allow(clippy::type_complexity, reason = "sqlx row tuples mirror their SELECT lists, next to the query")]

pub mod admin;
pub mod auth;
pub mod crypto;
pub mod document;
pub mod error;
pub mod extract;
pub mod listener;
pub mod operators;
pub mod push;
pub mod sso;
pub mod store;
pub mod ui;
pub mod usage;

use std::sync::Arc;

use axum::routing::{get, post, put};
use axum::Router;

/// What the control plane takes from its environment and flags, read once in `main` (no handler
/// reads the environment).
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `Secure` on the session cookie (off only for plain-http development: `AX_COOKIE_SECURE=0`).
    pub secure_cookies: bool,
    /// The built admin UI (`--ui-dir`, `AX_UI_DIR`, or `ui/dist` in a checkout), served at `/`.
    pub ui_dir: Option<std::path::PathBuf>,
    /// `AX_VERIFY_DOCUMENTS=1` (the tests): every commit checks its incremental document against
    /// a full read of the tables.
    pub verify_documents: bool,
    /// `AX_TEST_HOOKS=1` (the tests): `POST /api/v1/test/push` pushes a document unvalidated.
    pub test_hooks: bool,
    /// Operators may log in with a password (`AX_PASSWORD_LOGIN=0` turns it off when single
    /// sign-on is configured).
    pub password_login: bool,
}

impl Settings {
    /// The settings of a `serve` run: its flags' values, then the environment's.
    pub fn from_env(ui_dir_flag: Option<String>) -> Self {
        let var = |name: &str| std::env::var(name).ok();
        let ui_dir = ui_dir_flag
            .or_else(|| var("AX_UI_DIR"))
            .map(std::path::PathBuf::from)
            .or_else(|| Some(std::path::PathBuf::from("ui/dist")).filter(|d| d.join("index.html").is_file()));
        Self {
            secure_cookies: var("AX_COOKIE_SECURE").is_none_or(|v| v != "0"),
            ui_dir,
            verify_documents: var("AX_VERIFY_DOCUMENTS").as_deref() == Some("1"),
            test_hooks: var("AX_TEST_HOOKS").as_deref() == Some("1"),
            password_login: var("AX_PASSWORD_LOGIN").is_none_or(|v| v != "0"),
        }
    }
}

pub struct State {
    pub db: sqlx::PgPool,
    pub keys: crypto::MasterKeys,
    pub hub: push::Hub,
    pub settings: Settings,
    /// Single sign-on, when `AX_OIDC_ISSUER` is set.
    pub sso: Option<sso::Sso>,
    /// This process's Prometheus recorder (`/metrics`), if it could be installed.
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
}

impl State {
    /// Whether commits check their incremental document (`Settings::verify_documents`).
    pub fn verify(&self) -> bool {
        self.settings.verify_documents
    }
}

pub type AppState = Arc<State>;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

pub fn router(state: AppState) -> Router {
    use admin::*;
    let api = Router::new()
        .route("/login", post(auth::login))
        .route("/logout", post(auth::logout))
        .route("/session", get(auth::session))
        .route("/session/password", post(auth::change_password))
        .route("/sso", get(sso::options))
        .route("/sso/login", get(sso::login))
        .route("/sso/callback", get(sso::callback))
        .route("/operators", get(operators::list).post(operators::create))
        .route("/operators/{username}", put(operators::change))
        .route("/operators/{username}/reset-password", post(operators::reset_password))
        .route("/tenants", get(list_tenants))
        .route("/tenants/{id}", put(put_tenant))
        .route("/tenants/{id}/keys", get(list_keys).post(create_key))
        .route("/keys/{id}", put(put_key))
        .route("/keys/{id}/revoke", post(revoke_key))
        .route("/groups", get(list_groups))
        .route("/groups/{id}", put(put_group).delete(delete_group))
        .route("/upstreams", get(list_upstreams))
        .route("/upstreams/{name}", put(put_upstream).delete(delete_upstream))
        .route("/routes", get(list_routes))
        .route("/routes/{alias}", get(get_route).put(put_route).delete(delete_route))
        .route("/routes/{alias}/preview", post(preview_route))
        .route("/versions", get(list_versions))
        .route("/versions/{version}/rollback", post(rollback))
        .route("/nodes", get(list_nodes).post(create_node))
        .route("/nodes/connect", get(push::connect))
        .route("/audit", get(list_audit))
        .route("/usage", post(usage::ingest))
        .route("/reports/cost", get(usage::cost_report))
        .route("/reports/top", get(usage::top_spenders))
        .route("/reports/budgets", get(usage::budget_burn))
        .route("/reports/recent", get(usage::recent_traffic))
        .route("/requests", get(usage::list_requests))
        .route("/requests/{id}", get(usage::get_request))
        .route("/test/push", post(push::test_push))
        .method_not_allowed_fallback(method_not_allowed);
    let api_404 = || async { error::ApiError::new(http::StatusCode::NOT_FOUND, "not_found", "no such route") };
    let ui = ui::routes(state.settings.ui_dir.as_deref());
    Router::new()
        .nest("/api/v1", api)
        .route("/api/openapi.json", get(openapi))
        .route("/api", axum::routing::any(api_404))
        .route("/api/{*rest}", axum::routing::any(api_404))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .method_not_allowed_fallback(method_not_allowed)
        .fallback_service(ui)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(head_limit))
        .with_state(state)
}

/// The largest request head (header names and values) a handler sees.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Refuses a head over [`MAX_HEAD_BYTES`] with 431 `headers_too_large`. hyper answers 431 only when
/// a head outgrows its read buffer before it is complete; one that arrives whole in a single read
/// can be larger, so the limit is also checked here, the same for every arrival pattern.
async fn head_limit(req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::response::IntoResponse;
    let size: usize = req.headers().iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum();
    if size > MAX_HEAD_BYTES {
        return error::ApiError::new(
            http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            "the request's head is too large",
        )
        .into_response();
    }
    next.run(req).await
}

/// The largest admin request body (a usage batch is at most 4 MiB plus one record).
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// A route that exists, with a method it does not take (axum adds `Allow`).
async fn method_not_allowed(method: http::Method, uri: axum::extract::OriginalUri) -> error::ApiError {
    error::ApiError::new(
        http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

/// `GET /metrics`: the control plane's Prometheus series: dead-lettered usage records per node, and
/// the fleet's state read from the database at the scrape (never per request): each data plane's
/// versions behind the newest and whether it is connected, each budget's burn and warning level.
async fn metrics(axum::extract::State(state): axum::extract::State<AppState>) -> axum::response::Response {
    use axum::response::IntoResponse;
    match &state.metrics {
        Some(h) => {
            if let Err(e) = fleet_gauges(&state).await {
                tracing::warn!(error = %e.message, "metrics: the fleet gauges are stale (database)");
            }
            ([(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], h.render()).into_response()
        }
        None => error::ApiError::new(http::StatusCode::NOT_FOUND, "not_found", "no metrics recorder").into_response(),
    }
}

/// Sets the gauges `/metrics` reads from the database. Labels are registered names (nodes,
/// tenants, aliases), never what a caller sent.
async fn fleet_gauges(state: &State) -> error::ApiResult<()> {
    let latest = state.hub.latest_version().unwrap_or(0) as f64;
    for n in store::nodes::list(&state.db, push::CONNECTED_WITHIN_S).await? {
        let node = n.id.clone();
        metrics::gauge!("ax_node_connected", "node" => node.clone()).set(if n.connected { 1.0 } else { 0.0 });
        if let Some(applied) = n.applied_version {
            metrics::gauge!("ax_node_config_lag_versions", "node" => node).set((latest - applied as f64).max(0.0));
        }
    }
    for b in usage::budgets(&state.db).await? {
        let labels = [
            ("scope", b.scope.clone()),
            ("tenant", b.tenant.clone()),
            ("subject", b.subject.clone().unwrap_or_default()),
            ("window", b.window.clone()),
            ("alias", b.alias.clone().unwrap_or_default()),
        ];
        metrics::gauge!("ax_budget_used_ratio", &labels).set(b.used_pct / 100.0);
        metrics::gauge!("ax_budget_warn_ratio", &labels).set(b.warn_at);
    }
    Ok(())
}

/// Installs this process's Prometheus recorder (once) and describes its series.
pub fn prometheus() -> Option<metrics_exporter_prometheus::PrometheusHandle> {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder().ok()?;
    metrics::describe_counter!(
        "ax_usage_dead_letters_total",
        "Usage records stored in usage_dead_letters instead of usage_events, by node"
    );
    // Alert rules use it before anything was set aside: present at 0 from the start.
    metrics::counter!("ax_usage_dead_letters_total").absolute(0);
    metrics::describe_gauge!("ax_node_connected", "Whether a data plane holds a websocket to a control-plane replica");
    metrics::describe_gauge!(
        "ax_node_config_lag_versions",
        "Configuration versions a data plane is behind the newest (0: current)"
    );
    metrics::describe_gauge!("ax_budget_used_ratio", "A budget's spend in its current UTC window ÷ its cap");
    metrics::describe_gauge!(
        "ax_budget_warn_ratio",
        "A budget's warning level (warn_at), to compare with the used ratio"
    );
    Some(handle)
}

/// The admin API's OpenAPI document (hand-written next to the router; a test checks that every
/// route is in it).
pub const OPENAPI: &str = include_str!("../openapi.json");

async fn openapi() -> impl axum::response::IntoResponse {
    ([(http::header::CONTENT_TYPE, "application/json")], OPENAPI)
}

#[cfg(test)]
mod tests {
    /// Every `.route("…")` under `/api/v1` in `router` is documented in `openapi.json`, and
    /// every documented path is routed.
    #[test]
    fn openapi_documents_every_route() {
        let doc: serde_json::Value = serde_json::from_str(super::OPENAPI).expect("openapi.json parses");
        let documented: std::collections::BTreeSet<String> =
            doc["paths"].as_object().expect("paths").keys().cloned().collect();
        let source = include_str!("lib.rs");
        let router =
            &source[source.find("let api = Router::new()").expect("router")..source.find(".nest(").expect("nest")];
        let routed: std::collections::BTreeSet<String> = router
            .split(".route(\"")
            .skip(1)
            .filter_map(|s| s.split('"').next())
            .map(|p| format!("/api/v1{p}"))
            .collect();
        assert_eq!(routed, documented);
    }
}
