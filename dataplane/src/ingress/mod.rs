//! Ingress: the OpenAI-compatible HTTP surface, and the one place where `AxError` becomes HTTP.
//!
//! Per request, in order: request id → load the snapshot once → authenticate (401) → read the
//! body under the size limit (413) → decode into the canonical model (400) → alias exists (404)
//! and is allowed (403) → plan (400 when nothing can serve it) → dispatch → respond.

use std::sync::Arc;
use std::time::Instant;

use ax_protocol::config::{ParamsMode, ProviderKind};
use ax_protocol::usage::UNKNOWN_ALIAS;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use serde::de::DeserializeOwned;
use std::borrow::Cow;
use std::convert::Infallible;
use tracing::Instrument;

use crate::body::Body;
use crate::canonical::{ChatRequest, EmbeddingsRequest};
use crate::config::snapshot::{header_value, Snapshot, Tenant};
use crate::error::AxError;
use crate::governance::guard;
use crate::governance::limits::Kind;
use crate::metering::meter::Meter;
use crate::pipeline::stream::EgressStream;
use crate::providers::{self, openai};
use crate::routing::failover::{self, AttemptCtx, Served};
use crate::routing::plan;
use crate::upstream::call::{self, ChatOutcome};
use crate::upstream::health::Outcome;
use crate::App;

pub type Response = http::Response<Body>;

/// Every HTTP route, by method and path: the service `serve` runs for each request. A `GET`
/// route answers `HEAD` too (hyper sends the head only); a known path with another method is
/// `405 method_not_allowed` with `Allow`, any other path `404 not_found`.
pub async fn route(app: Arc<App>, req: http::Request<Incoming>) -> Result<Response, Infallible> {
    let (parts, body) = req.into_parts();
    let get = parts.method == Method::GET || parts.method == Method::HEAD;
    let post = parts.method == Method::POST;
    let r = match parts.uri.path() {
        "/v1/chat/completions" if post => chat_completions(app, parts.headers, body).await,
        "/v1/embeddings" if post => embeddings(app, parts.headers, body).await,
        "/v1/models" if get => models(&app, &parts.headers),
        "/healthz" if get => healthz(),
        "/readyz" if get => readyz(&app),
        "/metrics" if get => metrics(&app),
        "/admin/health" if get => admin_health(&app, &parts.headers),
        "/v1/chat/completions" | "/v1/embeddings" => method_not_allowed(&parts, "POST"),
        "/v1/models" | "/healthz" | "/readyz" | "/metrics" | "/admin/health" => method_not_allowed(&parts, "GET, HEAD"),
        _ => not_found(&parts),
    };
    Ok(r)
}

static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
static X_AX_UPSTREAM: HeaderName = HeaderName::from_static("x-ax-upstream");
static X_AX_MODEL: HeaderName = HeaderName::from_static("x-ax-model");
static X_AX_ATTEMPTS: HeaderName = HeaderName::from_static("x-ax-attempts");
static X_AX_FALLBACK: HeaderName = HeaderName::from_static("x-ax-fallback");
static X_AX_COST_USD: HeaderName = HeaderName::from_static("x-ax-cost-usd");
static X_AX_LONG_CONTEXT: HeaderName = HeaderName::from_static("x-ax-long-context");
static X_AX_DEGRADED: HeaderName = HeaderName::from_static("x-ax-degraded");
static X_AX_BUDGET_WARNING: HeaderName = HeaderName::from_static("x-ax-budget-warning");

/// The caller's `x-request-id` when it is sane (1–128 visible ASCII characters), else a new one.
fn request_id(headers: &HeaderMap) -> String {
    if let Some(v) = headers.get(&X_REQUEST_ID).and_then(|v| v.to_str().ok()) {
        if !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()) {
            return v.to_owned();
        }
    }
    let n: u128 = rand::random();
    let mut id = String::with_capacity(36);
    id.push_str("req_");
    for shift in (0..32).rev() {
        id.push(char::from(b"0123456789abcdef"[((n >> (shift * 4)) & 0xf) as usize]));
    }
    id
}

fn json_response(status: StatusCode, body: Vec<u8>, request_id: &str) -> Response {
    let mut r = plain(status, "application/json", body);
    r.headers_mut().insert(X_REQUEST_ID.clone(), header_value(request_id));
    r
}

/// The single error-to-HTTP mapping.
pub fn error_response(e: &AxError, request_id: &str) -> Response {
    if e.status().is_server_error() {
        tracing::warn!(code = e.code(), status = e.status().as_u16(), error = %e, "request failed");
    } else {
        tracing::info!(code = e.code(), status = e.status().as_u16(), error = %e, "request rejected");
    }
    let mut r = json_response(e.status(), e.to_body(request_id), request_id);
    if let Some(ra) = e.retry_after() {
        // Whole seconds, rounded up: a client must not come back before the limit lifts.
        let secs = ra.as_secs() + u64::from(ra.subsec_nanos() > 0);
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    }
    if let AxError::RateLimitExceeded { kind, limit, remaining, retry_after, .. } = e {
        // OpenAI's headers, for the limit that refused.
        let which = match kind {
            Kind::Requests => Some("requests"),
            Kind::Tokens => Some("tokens"),
            Kind::Concurrency => None,
        };
        if let Some(w) = which {
            let h = r.headers_mut();
            let name = |n: &str| HeaderName::from_bytes(format!("x-ratelimit-{n}-{w}").as_bytes()).ok();
            if let (Some(l), Some(rem), Some(reset)) = (name("limit"), name("remaining"), name("reset")) {
                h.insert(l, HeaderValue::from(*limit));
                h.insert(rem, HeaderValue::from(*remaining));
                h.insert(reset, header_value(&format!("{:.3}s", retry_after.as_secs_f64())));
            }
        }
    }
    r
}

fn served_headers(r: &mut Response, s: &Served<'_>) {
    let h = r.headers_mut();
    h.insert(X_AX_UPSTREAM.clone(), s.up.name_header.clone());
    h.insert(X_AX_MODEL.clone(), s.model.name_header.clone());
    h.insert(X_AX_ATTEMPTS.clone(), HeaderValue::from(s.attempts));
    if let Some(f) = s.fallback {
        h.insert(X_AX_FALLBACK.clone(), header_value(f));
    }
}

/// Who is calling: the tenant behind the bearer key.
struct Caller<'s> {
    tenant: &'s Tenant,
    key_id: &'s str,
    key: &'s crate::config::snapshot::KeyRef,
}

fn authenticate<'s>(snap: &'s Snapshot, headers: &HeaderMap) -> Result<Caller<'s>, AxError> {
    let raw = headers.get(header::AUTHORIZATION).ok_or(AxError::MissingApiKey)?;
    let key = raw
        .to_str()
        .ok()
        .and_then(|v| v.get(..7).filter(|scheme| scheme.eq_ignore_ascii_case("bearer ")).map(|_| &v[7..]))
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .ok_or(AxError::MissingApiKey)?;
    let (tenant, k) = snap.authenticate(key)?;
    let span = tracing::Span::current();
    span.record("tenant", tenant.id.as_str());
    span.record("key_id", k.key_id.as_str());
    Ok(Caller { tenant, key_id: &k.key_id, key: k })
}

async fn read_body(headers: &HeaderMap, body: Incoming, limit: u64) -> Result<Bytes, AxError> {
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(AxError::PayloadTooLarge(limit));
    }
    let limit_usize = usize::try_from(limit).unwrap_or(usize::MAX);
    match Limited::new(body, limit_usize).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(AxError::PayloadTooLarge(limit)),
        Err(_) => Err(AxError::invalid("could not read the request body")),
    }
}

/// Decodes a JSON body, naming the failing field path; unknown fields are collected, then
/// refused (strict) or dropped with a warning (lenient).
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8], mode: ParamsMode) -> Result<T, AxError> {
    // UTF-8 is checked once for the whole body (`from_slice` checks each string on its own).
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Err(explain::<T>(bytes).unwrap_or_else(|| AxError::InvalidJson("the body is not UTF-8".into())));
    };
    let mut unknown = Vec::new();
    let mut de = serde_json::Deserializer::from_str(text);
    let value: T = match serde_ignored::deserialize(&mut de, |path| unknown.push(path.to_string()))
        .and_then(|v| de.end().map(|()| v))
    {
        Ok(v) => v,
        // Field paths are tracked only to explain a failure: a second pass, off the common path.
        Err(e) => return Err(explain::<T>(bytes).unwrap_or_else(|| AxError::InvalidJson(e.to_string()))),
    };
    if let Some(first) = unknown.first() {
        match mode {
            ParamsMode::Strict => {
                return Err(AxError::UnsupportedParameter { param: first.clone(), provider: "ax" });
            }
            ParamsMode::Lenient => {
                tracing::warn!(params = ?unknown, "dropped unknown request parameters")
            }
        }
    }
    Ok(value)
}

/// The error of a body `decode` refused, with the path of the field at fault.
fn explain<T: DeserializeOwned>(bytes: &[u8]) -> Option<AxError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut track = serde_path_to_error::Track::new();
    let value: Result<T, _> = {
        let pd = serde_path_to_error::Deserializer::new(&mut de, &mut track);
        serde_ignored::deserialize(pd, |_| ())
    };
    let err = match value {
        Err(e) => {
            let path = track.path().to_string();
            if path.is_empty() || path == "." {
                AxError::InvalidJson(e.to_string())
            } else {
                AxError::InvalidJson(format!("{path}: {e}"))
            }
        }
        Ok(_) => AxError::InvalidJson(de.end().err()?.to_string()),
    };
    Some(err)
}

fn alias_allowed<'s>(
    snap: &'s Snapshot,
    caller: &Caller<'_>,
    alias: &str,
) -> Result<&'s crate::config::snapshot::Route, AxError> {
    let route = snap.routes.get(alias).ok_or_else(|| AxError::ModelNotFound(alias.to_owned()))?;
    if !caller.tenant.allowed.permits(alias) {
        return Err(AxError::ModelNotAllowed(alias.to_owned()));
    }
    tracing::Span::current().record("alias", alias);
    Ok(route)
}

fn request_span(request_id: &str, path: &'static str) -> tracing::Span {
    tracing::info_span!("request", request_id = %request_id, path, tenant = tracing::field::Empty,
        key_id = tracing::field::Empty, alias = tracing::field::Empty)
}

/// The frame every model endpoint shares: request id, the request's span, one snapshot load, and
/// the error edge (a request rejected before any upstream was chosen still gets its usage record).
async fn handle<F, Fut>(app: Arc<App>, headers: HeaderMap, body: Incoming, path: &'static str, stage: F) -> Response
where
    F: FnOnce(Arc<App>, Arc<Snapshot>, String, HeaderMap, Incoming, Instant) -> Fut,
    Fut: std::future::Future<Output = (String, Result<Response, Rejection>)>,
{
    let start = Instant::now();
    let rid = request_id(&headers);
    let span = request_span(&rid, path);
    async move {
        let snap = app.store.load();
        match stage(app, snap, rid, headers, body, start).await {
            (_, Ok(r)) => r,
            (rid, Err(r)) => {
                let caller = r.caller.as_ref().map(|(t, k)| (t.as_str(), k.as_str()));
                Meter::rejected(&rid, caller, r.alias.as_deref(), start, &r.error);
                error_response(&r.error, &rid)
            }
        }
    }
    .instrument(span)
    .await
}

async fn chat_completions(app: Arc<App>, headers: HeaderMap, body: Incoming) -> Response {
    handle(app, headers, body, "/v1/chat/completions", |app, snap, rid, headers, body, start| async move {
        let r = chat(&app, &snap, &rid, &headers, body, start).await;
        (rid, r)
    })
    .await
}

async fn embeddings(app: Arc<App>, headers: HeaderMap, body: Incoming) -> Response {
    handle(app, headers, body, "/v1/embeddings", |app, snap, rid, headers, body, start| async move {
        let r = embed(&app, &snap, &rid, &headers, body, start).await;
        (rid, r)
    })
    .await
}

/// A request refused before any upstream was chosen, with what is known of it for its record.
struct Rejection {
    error: AxError,
    alias: Option<String>,
    /// (tenant, key id), once the key was checked.
    caller: Option<(String, String)>,
}

impl Rejection {
    fn anonymous(error: AxError) -> Self {
        Self { error, alias: None, caller: None }
    }

    /// The names are copied only if the request is refused (this runs 4 times per request).
    fn of<'a>(caller: &'a Caller<'_>, alias: Option<&'a str>) -> impl FnOnce(AxError) -> Self + 'a {
        move |error| Self {
            error,
            alias: alias.map(str::to_owned),
            caller: Some((caller.tenant.id.clone(), caller.key_id.to_owned())),
        }
    }
}

/// A request body that names the alias it wants.
trait ModelRequest: DeserializeOwned {
    fn alias(&self) -> &str;
}

impl ModelRequest for ChatRequest {
    fn alias(&self) -> &str {
        &self.model
    }
}

impl ModelRequest for EmbeddingsRequest {
    fn alias(&self) -> &str {
        &self.model
    }
}

/// The stages every model endpoint shares, in order: authenticate (401), read the body under the
/// limit (413), decode (400), the alias exists (404) and is allowed (403).
async fn admit<'s, T: ModelRequest>(
    snap: &'s Snapshot,
    headers: &HeaderMap,
    body: Incoming,
) -> Result<(Caller<'s>, T, &'s crate::config::snapshot::Route), Rejection> {
    let caller = authenticate(snap, headers).map_err(Rejection::anonymous)?;
    let bytes = read_body(headers, body, snap.max_body_bytes).await.map_err(Rejection::of(&caller, None))?;
    let req: T = decode(&bytes, snap.params).map_err(Rejection::of(&caller, None))?;
    let route = alias_allowed(snap, &caller, req.alias()).map_err(|e| {
        // A name the caller made up is never a metric label or a report group: its record counts
        // under one fixed alias, and the raw name is only in the log line (`error_response`).
        let alias = if matches!(e, AxError::ModelNotFound(_)) { UNKNOWN_ALIAS } else { req.alias() };
        Rejection::of(&caller, Some(alias))(e)
    })?;
    Ok((caller, req, route))
}

/// What a successful chat attempt produced.
enum ChatReply {
    /// The answer's JSON, and the usage it reports.
    Full {
        body: Vec<u8>,
        usage: Option<crate::canonical::Usage>,
    },
    Stream(Box<EgressStream>),
}

/// The request as this provider should see it: in lenient mode, without the parameters it cannot
/// honour (strict mode already kept such candidates out of the plan).
fn for_provider<'r>(req: &'r ChatRequest, params: &[&'static str], kind: ProviderKind) -> Cow<'r, ChatRequest> {
    let dropped: Vec<&str> = params.iter().copied().filter(|p| !providers::supports(kind, p)).collect();
    if dropped.is_empty() {
        return Cow::Borrowed(req);
    }
    tracing::warn!(provider = kind.as_str(), params = ?dropped, "dropped parameters the provider does not support");
    let mut r = req.clone();
    for p in dropped {
        r.clear_param(p);
    }
    Cow::Owned(r)
}

async fn chat(
    app: &App,
    snap: &Arc<Snapshot>,
    rid: &str,
    headers: &HeaderMap,
    body: Incoming,
    start: Instant,
) -> Result<Response, Rejection> {
    let (caller, req, route) = admit::<ChatRequest>(snap, headers, body).await?;
    let alias = route.alias.as_str();
    req.validate().map_err(Rejection::of(&caller, Some(alias)))?;
    let needs = plan::chat_needs(&req, snap.default_max_tokens);
    // Context budget: a prompt over the alias's limit goes to its long-context alias, if any.
    let (route, long_context) = match route.max_prompt_tokens {
        Some(limit) if needs.prompt_estimate > u64::from(limit) => match &route.long_context_alias {
            Some(l) => (snap.routes.get(l).unwrap_or(route), Some(l.as_str())),
            None => {
                let e = AxError::PromptTooLong { alias: alias.to_owned(), estimated: needs.prompt_estimate, limit };
                return Err(Rejection::of(&caller, Some(alias))(e));
            }
        },
        _ => (route, None),
    };
    // Budgets (may downgrade to a cheaper alias), then the requested alias's rate limits:
    // checked after every other reason to refuse, so a refused request uses no one's quota.
    let requested = snap.routes.get(alias).unwrap_or(route);
    let passed = guard::run(app, snap, caller.tenant, caller.key, requested, route, &needs)
        .await
        .map_err(Rejection::of(&caller, Some(alias)))?;
    let (route, degraded, warning) = (passed.route, passed.degraded.clone(), passed.warning.clone());
    let mut meter = Meter::new(rid, &caller.tenant.id, caller.key_id, alias, req.stream, start);
    meter.prompt_estimate(needs.prompt_estimate);
    meter.guarded(passed);
    let mut attempt_log = Vec::new();
    let (req, needs) = (&req, &needs);
    let result = failover::run(snap, route, needs, rid, &mut attempt_log, |a| async move {
        let AttemptCtx { up, model, limits, guard } = a;
        let req = for_provider(req, &needs.params, up.kind);
        match call::chat(up, model, &req, snap.default_max_tokens, rid, limits).await {
            Err(e) => Err((e, guard)),
            Ok(ChatOutcome::Full { body, usage }) => {
                let mut guard = guard;
                if let Some(u) = &usage {
                    guard.usage(u.total());
                }
                guard.finish(Outcome::Success);
                Ok(ChatReply::Full { body, usage })
            }
            Ok(ChatOutcome::Stream(us)) => {
                let enc =
                    openai::ChunkEncoder::new(&format!("chatcmpl-{rid}"), crate::canonical::unix_now(), &model.name);
                EgressStream::open(us, enc, rid.to_owned(), req.include_usage(), req.n.unwrap_or(1), guard)
                    .await
                    .map(ChatReply::Stream)
            }
        }
    })
    .await;
    meter.attempts(attempt_log);
    let (reply, served) = match result {
        Ok(x) => x,
        Err((e, served)) => return Ok(failed(&e, rid, meter, served.as_ref())),
    };
    meter.served_by(&served);
    let mut r = match reply {
        ChatReply::Full { body, usage } => {
            if let Some(u) = &usage {
                meter.usage(u);
            }
            let cost = meter.cost_micro_usd();
            meter.finish(200, None);
            let mut r = json_response(StatusCode::OK, body, rid);
            if let Some(c) = cost {
                r.headers_mut().insert(X_AX_COST_USD.clone(), header_value(&ax_protocol::price::format_usd(c)));
            }
            r
        }
        ChatReply::Stream(mut s) => {
            s.attach(meter);
            let mut r = Response::new(s.into_body());
            let h = r.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            h.insert(X_REQUEST_ID.clone(), header_value(rid));
            r
        }
    };
    served_headers(&mut r, &served);
    let h = r.headers_mut();
    if let Some(l) = long_context {
        h.insert(X_AX_LONG_CONTEXT.clone(), header_value(l));
    }
    if let Some(d) = &degraded {
        h.insert(X_AX_DEGRADED.clone(), header_value(d));
    }
    if let Some(w) = &warning {
        h.insert(X_AX_BUDGET_WARNING.clone(), header_value(w));
    }
    Ok(r)
}

/// The answer when every attempt failed (or none could be made); the record says so.
fn failed(e: &AxError, rid: &str, mut meter: Meter, served: Option<&Served<'_>>) -> Response {
    if let Some(s) = served {
        meter.served_by(s);
    }
    meter.finish(e.status().as_u16(), Some(e.code()));
    let mut r = error_response(e, rid);
    match served {
        Some(s) => served_headers(&mut r, s),
        None => {
            r.headers_mut().insert(X_AX_ATTEMPTS.clone(), HeaderValue::from(0));
        }
    }
    r
}

async fn embed(
    app: &App,
    snap: &Arc<Snapshot>,
    rid: &str,
    headers: &HeaderMap,
    body: Incoming,
    start: Instant,
) -> Result<Response, Rejection> {
    let (caller, req, route) = admit::<EmbeddingsRequest>(snap, headers, body).await?;
    let alias = route.alias.as_str();
    let needs = plan::embeddings_needs(&req);
    let passed = guard::run(app, snap, caller.tenant, caller.key, route, route, &needs)
        .await
        .map_err(Rejection::of(&caller, Some(alias)))?;
    let route = passed.route;
    let mut meter = Meter::new(rid, &caller.tenant.id, caller.key_id, alias, false, start);
    meter.prompt_estimate(needs.prompt_estimate);
    meter.guarded(passed);
    let mut attempt_log = Vec::new();
    let req = &req;
    let result = failover::run(snap, route, &needs, rid, &mut attempt_log, |a| async move {
        let AttemptCtx { up, model, limits, guard } = a;
        match call::embeddings(up, model, req, rid, limits).await {
            Ok(resp) => {
                let mut guard = guard;
                guard.usage(resp.prompt_tokens);
                guard.finish(Outcome::Success);
                Ok(resp)
            }
            Err(e) => Err((e, guard)),
        }
    })
    .await;
    meter.attempts(attempt_log);
    let (mut resp, served) = match result {
        Ok(x) => x,
        Err((e, served)) => return Ok(failed(&e, rid, meter, served.as_ref())),
    };
    if resp.model.is_empty() || resp.model == req.model {
        resp.model.clone_from(&served.model.name);
    }
    meter.served_by(&served);
    meter.usage(&crate::canonical::Usage { prompt_tokens: resp.prompt_tokens, ..Default::default() });
    let cost = meter.cost_micro_usd();
    meter.finish(200, None);
    let mut r = json_response(StatusCode::OK, openai::encode_embeddings_response(&resp, req.encoding_format), rid);
    if let Some(c) = cost {
        r.headers_mut().insert(X_AX_COST_USD.clone(), header_value(&ax_protocol::price::format_usd(c)));
    }
    served_headers(&mut r, &served);
    Ok(r)
}

fn models(app: &App, headers: &HeaderMap) -> Response {
    let rid = request_id(headers);
    let snap = app.store.load();
    let caller = match authenticate(&snap, headers) {
        Ok(c) => c,
        Err(e) => return error_response(&e, &rid),
    };
    let mut aliases: Vec<&str> =
        snap.routes.keys().map(String::as_str).filter(|a| caller.tenant.allowed.permits(a)).collect();
    aliases.sort_unstable();
    let data: Vec<serde_json::Value> = aliases
        .iter()
        .map(|a| serde_json::json!({ "id": a, "object": "model", "created": 0, "owned_by": "ax" }))
        .collect();
    let body = serde_json::to_vec(&serde_json::json!({ "object": "list", "data": data })).unwrap_or_default();
    json_response(StatusCode::OK, body, &rid)
}

fn healthz() -> Response {
    plain(StatusCode::OK, "application/json", r#"{"status":"ok"}"#)
}

/// A response of one body and its content type (`json_response` adds the request id).
fn plain(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response {
    let mut r = Response::new(Body::full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// Ready once a configuration is served: version 0 is a control-plane node that has neither heard
/// from its control plane nor a last-known-good snapshot (503, so a load balancer skips it).
fn readyz(app: &App) -> Response {
    let snap = app.store.load();
    let (status, word) = if snap.version == 0 {
        (StatusCode::SERVICE_UNAVAILABLE, "no_configuration")
    } else {
        (StatusCode::OK, "ready")
    };
    let body = format!(r#"{{"status":"{word}","config_version":{}}}"#, snap.version);
    plain(status, "application/json", body)
}

fn metrics(app: &App) -> Response {
    match &app.metrics {
        Some(h) => {
            crate::metering::meter::health_gauges(&app.store.load());
            plain(StatusCode::OK, "text/plain; version=0.0.4", h.render())
        }
        None => error_response(&AxError::Internal, "-"),
    }
}

/// The health table: per upstream, breaker and in-flight; per model, rolling success rate and
/// latency and time-to-first-token percentiles. Needs `Authorization: Bearer <server.admin_token>`.
fn admin_health(app: &App, headers: &HeaderMap) -> Response {
    use sha2::Digest;
    let rid = request_id(headers);
    let snap = app.store.load();
    let Some(want) = snap.admin_token else {
        return error_response(&AxError::NotFound("/admin/health (no server.admin_token configured)".to_owned()), &rid);
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.get(..7).filter(|s| s.eq_ignore_ascii_case("bearer ")).map(|_| &v[7..]));
    let Some(given) = given else {
        return error_response(&AxError::MissingApiKey, &rid);
    };
    let digest: [u8; 32] = sha2::Sha256::digest(given.trim().as_bytes()).into();
    if digest != want {
        return error_response(&AxError::InvalidApiKey, &rid);
    }
    let body = serde_json::to_vec(&crate::metering::meter::health_table(&snap)).unwrap_or_default();
    json_response(StatusCode::OK, body, &rid)
}

fn not_found(parts: &http::request::Parts) -> Response {
    let rid = request_id(&parts.headers);
    error_response(&AxError::NotFound(parts.uri.path().to_owned()), &rid)
}

fn method_not_allowed(parts: &http::request::Parts, allow: &'static str) -> Response {
    let rid = request_id(&parts.headers);
    let mut r = error_response(&AxError::MethodNotAllowed(format!("{} {}", parts.method, parts.uri.path())), &rid);
    r.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}
