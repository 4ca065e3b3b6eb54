//! The gateway's own endpoints, beside the model calls: what a key may call, readiness, the
//! health table and the metrics text. Ingress turns each into HTTP in its protocol's shape.

use sha2::Digest;

use crate::error::AxError;
use crate::App;

/// The aliases the key may use, sorted.
pub fn models(app: &App, key: Option<&str>) -> Result<Vec<String>, AxError> {
    let snap = app.store.load();
    let (tenant, _) = snap.authenticate(key.ok_or(AxError::MissingApiKey)?)?;
    let mut aliases: Vec<String> = snap.routes.keys().filter(|a| tenant.allowed.permits(a)).cloned().collect();
    aliases.sort_unstable();
    Ok(aliases)
}

/// The prompt tokens of a request, by ax's estimate, for a key that may use its alias.
pub fn count_tokens(app: &App, key: Option<&str>, req: &crate::canonical::ChatRequest) -> Result<u64, AxError> {
    let snap = app.store.load();
    let (tenant, _) = snap.authenticate(key.ok_or(AxError::MissingApiKey)?)?;
    if !snap.routes.contains_key(&req.model) {
        return Err(AxError::ModelNotFound(req.model.clone()));
    }
    if !tenant.allowed.permits(&req.model) {
        return Err(AxError::ModelNotAllowed(req.model.clone()));
    }
    Ok(crate::routing::plan::estimate_prompt(req))
}

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
