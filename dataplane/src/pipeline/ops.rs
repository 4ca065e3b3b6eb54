//! The gateway's own endpoints, beside the model calls: what a key may call, readiness, the
//! health table and the metrics text. Ingress turns each into HTTP in its protocol's shape.

use sha2::Digest;

use crate::error::AxError;
use crate::routing::plan;
use crate::upstream::call::{self, Deadlines};
use crate::App;

/// The aliases the key may use, sorted.
pub fn models(app: &App, key: Option<&str>) -> Result<Vec<String>, AxError> {
    let snap = app.store.load();
    let (tenant, _) = snap.authenticate(key.ok_or(AxError::MissingApiKey)?)?;
    let mut aliases: Vec<String> = snap.routes.keys().filter(|a| tenant.allowed.permits(a)).cloned().collect();
    aliases.sort_unstable();
    Ok(aliases)
}

/// `alias`, when the key may use it; `model_not_found` otherwise (whether it exists for another
/// tenant is not revealed).
pub fn model(app: &App, key: Option<&str>, alias: &str) -> Result<(), AxError> {
    let snap = app.store.load();
    let (tenant, _) = snap.authenticate(key.ok_or(AxError::MissingApiKey)?)?;
    snap.route_for(tenant, alias).map(|_| ()).map_err(|_| AxError::ModelNotFound(alias.to_owned()))
}

/// The context window and output cap of the model an alias's first candidate serves (what
/// Gemini's model list says of a model).
pub fn model_limits(app: &App, alias: &str) -> Option<(u32, u32)> {
    let snap = app.store.load();
    let c = snap.route(alias)?.candidates.first()?;
    let (_, model) = snap.upstream_model(c);
    Some((model.context_window, model.max_output_tokens.unwrap_or(snap.default_max_tokens)))
}

/// A prompt's size in tokens, and who counted it.
pub enum TokenCount {
    /// The upstream the route would choose counted it (Anthropic's `count_tokens`).
    Exact(u64),
    /// ax's estimate: that upstream cannot count, or its count failed.
    Estimate(u64),
}

/// The prompt tokens of a request for a key that may use its alias: counted by the upstream
/// the route would choose, when it can count and speaks the caller's `protocol` (`body` writes
/// the request for its model), else ax's estimate. Not metered and not rate limited: no model
/// runs.
pub async fn count_tokens(
    app: &App,
    key: Option<&str>,
    req: &ax_wire::canonical::ChatRequest,
    protocol: ax_wire::canonical::Protocol,
    body: impl FnOnce(&str) -> Vec<bytes::Bytes>,
    headers: &[(http::HeaderName, http::HeaderValue)],
    request_id: &str,
) -> Result<TokenCount, AxError> {
    let snap = app.store.load();
    let (tenant, _) = snap.authenticate(key.ok_or(AxError::MissingApiKey)?)?;
    let route = snap.route_for(tenant, &req.model)?;
    let needs = plan::chat_needs(req, snap.default_max_tokens);
    let chosen = plan::plan(&snap, route, &needs, &mut rand::rng()).ok().and_then(|p| p.into_iter().next());
    if let Some(c) = chosen {
        let up = &snap.upstreams[c.upstream];
        let model = &up.models[c.model];
        if model.count_url.is_some() && up.speaks.has(protocol) {
            let now = tokio::time::Instant::now();
            let deadlines = Deadlines::new(up, route, now + COUNT_TIMEOUT, now);
            match call::count_tokens(up, model, body(&model.name), headers, request_id.into(), deadlines).await {
                Ok(n) => return Ok(TokenCount::Exact(n)),
                Err(e) => {
                    tracing::warn!(upstream = %up.name, code = e.code(), "count_tokens failed; answering ax's estimate")
                }
            }
        }
    }
    Ok(TokenCount::Estimate(plan::estimate_prompt(req)))
}

/// The longest an upstream's count may take.
const COUNT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The configuration version served, once there is one: version 0 is a control-plane node that
/// has heard neither from its control plane nor from a last-known-good file.
pub fn ready(app: &App) -> Result<u64, u64> {
    let version = app.store.load().version;
    if version == 0 {
        Err(version)
    } else {
        Ok(version)
    }
}

/// The Prometheus text, with the health gauges set from the live table (on each scrape, never
/// per request).
pub fn metrics(app: &App) -> Result<String, AxError> {
    let handle = app.metrics.as_ref().ok_or(AxError::Internal)?;
    crate::metering::meter::health_gauges(&app.store.load());
    Ok(handle.render())
}

/// The health table (per upstream, breaker and in-flight; per model, rolling success rate,
/// latency and time-to-first-token percentiles), for the bearer of `server.admin_token`.
pub fn health(app: &App, bearer: Option<&str>) -> Result<ax_protocol::health::NodeHealth, AxError> {
    let snap = app.store.load();
    let Some(want) = snap.admin_token else {
        return Err(AxError::NotFound("/admin/health (no server.admin_token configured)".to_owned()));
    };
    let given = bearer.ok_or(AxError::MissingApiKey)?;
    let digest: [u8; 32] = sha2::Sha256::digest(given.trim().as_bytes()).into();
    if digest != want {
        return Err(AxError::InvalidApiKey);
    }
    Ok(crate::metering::meter::health_table(&snap))
}

/// The tenant behind a key, for the endpoints that read what the tenant stored.
pub fn tenant_of(app: &App, key: Option<&str>) -> Result<String, AxError> {
    let snap = app.store.load();
    let (tenant, _) = snap.authenticate(key.ok_or(AxError::MissingApiKey)?)?;
    Ok(tenant.id.clone())
}

pub use crate::response_store::{new_id as new_response_id, Conversation, Link, NewResponse};

/// The stored conversation that ends with response `id` (oldest first), `tenant`'s only.
pub async fn stored_conversation(
    app: &App,
    tenant: &str,
    id: &str,
    max_total: u64,
    param: Option<&'static str>,
) -> Result<Conversation, AxError> {
    app.responses.chain(tenant, id, max_total, param).await
}

/// A stored response object of `tenant`.
pub async fn stored_response(app: &App, tenant: &str, id: &str) -> Result<bytes::Bytes, AxError> {
    app.responses.get(tenant, id).await
}

pub async fn delete_response(app: &App, tenant: &str, id: &str) -> Result<(), AxError> {
    app.responses.delete(tenant, id).await
}

pub async fn keep_response(app: &App, r: NewResponse) -> Result<(), AxError> {
    app.responses.put(r).await
}
