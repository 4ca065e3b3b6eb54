//! Ingress: the HTTP surface, and the one place where `AxError` becomes HTTP.
//!
//! The route table (`router`) sends each model endpoint into the pipeline (`crate::pipeline`)
//! with the caller's key, a reader of its body and its protocol's codec (`pipeline::codec`), and
//! what comes out is encoded back (`ax_wire`) with the gateway's `x-ax-*` headers. Operational
//! endpoints (`/healthz`, `/readyz`, `/metrics`, `/admin/health`, `/v1/models`) are answered here.

pub mod gemini;
pub mod headers;

use ax_wire::anthropic::caller as anthropic;
use ax_wire::openai::caller as openai;
use ax_wire::responses::caller as responses;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;

use crate::body::{header_value, Body};
use crate::error::{AxError, LimitKind};
use crate::pipeline::{self, codec, ops, ChatReply, Ended, Served};
use crate::App;

pub type Response = http::Response<Body>;

/// Every HTTP route, by method and path: the service `serve` runs for each request. A `GET`
/// route answers `HEAD` too (hyper sends the head only); a known path with another method is
/// `405 method_not_allowed` with `Allow`, any other path `404 not_found`.
pub async fn router(app: Arc<App>, req: http::Request<Incoming>) -> Result<Response, Infallible> {
    let (parts, body) = req.into_parts();
    let get = parts.method == Method::GET || parts.method == Method::HEAD;
    let post = parts.method == Method::POST;
    // The model calls box their own state (`model_call`): the futures here stay small.
    let r = match parts.uri.path() {
        "/v1/chat/completions" if post => chat_completions(app, parts.headers, body).await,
        "/v1/messages" if post => messages(app, parts.headers, body).await,
        "/v1/responses" if post => responses_api(app, parts.headers, body).await,
        "/v1/messages/count_tokens" if post => Box::pin(count_tokens(app, parts.headers, body)).await,
        "/v1/embeddings" if post => embeddings(app, parts.headers, body).await,
        p if post && gemini::call_path(p).is_some() => gemini::call(app, parts, body).await,
        p if gemini::is_call(p) => method_not_allowed(&parts, "POST"),
        "/v1beta/models" if get => gemini::models(&app, &parts),
        p if get && gemini::model_path(p).is_some() => {
            gemini::model(&app, &parts, &gemini::model_path(p).unwrap_or_default())
        }
        "/v1/models" if get && gemini::authenticates(&parts) => gemini::models(&app, &parts),
        "/v1/models" if get => models(&app, &parts.headers),
        "/healthz" if get => healthz(),
        "/readyz" if get => readyz(&app),
        "/metrics" if get => metrics(&app),
        "/admin/health" if get => admin_health(&app, &parts.headers),
        p if get && model_id(p).is_some() && gemini::authenticates(&parts) => {
            let id = percent_encoding::percent_decode_str(model_id(p).unwrap_or_default()).decode_utf8_lossy();
            gemini::model(&app, &parts, &id)
        }
        p if get && model_id(p).is_some() => model(&app, &parts.headers, model_id(p).unwrap_or_default()),
        p if p.starts_with("/v1/responses/") => stored_response(&app, &parts).await,
        "/v1/chat/completions" | "/v1/embeddings" | "/v1/responses" => method_not_allowed(&parts, "POST"),
        "/v1/messages" | "/v1/messages/count_tokens" => method_not_allowed(&parts, "POST"),
        "/v1/models" | "/v1beta/models" | "/healthz" | "/readyz" | "/metrics" | "/admin/health" => {
            method_not_allowed(&parts, "GET, HEAD")
        }
        p if model_id(p).is_some() => method_not_allowed(&parts, "GET, HEAD"),
        _ => not_found(&parts),
    };
    Ok(r)
}

/// The id of a `/v1/models/{id}` path: the rest of the path (an alias may hold a `/`).
fn model_id(path: &str) -> Option<&str> {
    path.strip_prefix("/v1/models/").filter(|id| !id.is_empty())
}

pub(crate) static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
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
    let mut id = String::with_capacity(36);
    id.push_str("req_");
    crate::trace::push_hex(&mut id, crate::trace::random_id(), 32);
    id
}

fn json_response(status: StatusCode, body: impl Into<Bytes>, request_id: &str) -> Response {
    let mut r = plain(status, "application/json", body);
    r.headers_mut().insert(X_REQUEST_ID.clone(), header_value(request_id));
    r
}

/// Whose error shape a caller gets: OpenAI's (`{"error":{message,type,code,param}}`),
/// Anthropic's (`{"type":"error","error":{type,message}}`, 529 for overloaded) or Google's
/// (`{"error":{code,message,status,details}}`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    OpenAi,
    Anthropic,
    Gemini,
}

static X_AX_ERROR_CODE: HeaderName = HeaderName::from_static("x-ax-error-code");

/// The single error-to-HTTP mapping.
pub fn error_response(e: &AxError, request_id: &str) -> Response {
    error_in(Dialect::OpenAi, e, request_id)
}

/// The single error-to-HTTP mapping, in the caller's dialect. ax's stable code is in every error
/// (OpenAI's `code`; Anthropic's message) and in `x-ax-error-code`.
pub fn error_in(dialect: Dialect, e: &AxError, request_id: &str) -> Response {
    if e.status().is_server_error() {
        tracing::warn!(code = e.code(), status = e.status().as_u16(), error = %e, "request failed");
    } else {
        tracing::info!(code = e.code(), status = e.status().as_u16(), error = %e, "request rejected");
    }
    let mut r = match dialect {
        Dialect::OpenAi => json_response(e.status(), e.to_body(request_id), request_id),
        Dialect::Anthropic => {
            let status = StatusCode::from_u16(anthropic::status(e)).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            json_response(status, anthropic::error_body(e, request_id), request_id)
        }
        Dialect::Gemini => json_response(e.status(), ax_wire::gemini::caller::error_body(e, request_id), request_id),
    };
    r.headers_mut().insert(X_AX_ERROR_CODE.clone(), HeaderValue::from_static(e.code()));
    if let Some(ra) = e.retry_after() {
        // Whole seconds, rounded up: a client must not come back before the limit lifts.
        let secs = ra.as_secs() + u64::from(ra.subsec_nanos() > 0);
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    }
    if let (Dialect::OpenAi, AxError::RateLimitExceeded { kind, limit, remaining, retry_after, .. }) = (dialect, e) {
        // OpenAI's headers, for the limit that refused.
        let which = match kind {
            LimitKind::Requests => Some("requests"),
            LimitKind::Tokens => Some("tokens"),
            LimitKind::Concurrency => None,
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

/// A model endpoint's frame: the request id, current on the thread while the call runs (every
/// line it logs carries it: `trace::WithRequestId`; who called and for which alias is in the
/// request's usage line, which carries the same id). The pipeline loads the snapshot once for the
/// whole request. The call's state (several KiB) is boxed here: it is copied once, into its box,
/// where a future holding it inline would be copied whole at every level that moves it (the
/// router's, hyper's, a wrapper's).
async fn model_call<F, Fut>(app: Arc<App>, headers: HeaderMap, call: F) -> Response
where
    F: FnOnce(Arc<App>, String, HeaderMap, Instant) -> Fut,
    Fut: std::future::Future<Output = Response>,
{
    let start = Instant::now();
    let rid = request_id(&headers);
    crate::trace::WithRequestId::new(rid.clone(), Box::pin(call(app, rid, headers, start))).await
}

async fn chat_completions(app: Arc<App>, headers: HeaderMap, body: Incoming) -> Response {
    model_call(app, headers, |app, rid, headers, start| async move {
        let snap = app.store.load();
        let inbound = pipeline::Inbound {
            request_id: &rid,
            start,
            trace: pipeline::trace_of(&headers),
            key: headers::bearer_key(&headers),
            body: |limit, _| read_body(&headers, body, limit),
        };
        let mut codec = codec::Chat { request_id: &rid };
        let ended = pipeline::chat(&app, &snap, inbound, &mut codec).await;
        answer(ended, &rid, |reply, served| match reply {
            ChatReply::Full(r) => json_response(StatusCode::OK, openai::encode_chat(r, &rid, &served.model.name), &rid),
            ChatReply::Forward { body, .. } => json_response(StatusCode::OK, body, &rid),
            ChatReply::Stream(s) => event_stream(s.into_body(), &rid),
        })
    })
    .await
}

/// `POST /v1/responses`: the Responses API, forwarded to routes whose upstreams all offer it,
/// translated (and kept, with `store`) for every other (`pipeline::responses`).
async fn responses_api(app: Arc<App>, headers: HeaderMap, body: Incoming) -> Response {
    model_call(app, headers, |app, rid, headers, start| async move {
        let snap = app.store.load();
        let inbound = pipeline::Inbound {
            request_id: &rid,
            start,
            trace: pipeline::trace_of(&headers),
            key: headers::bearer_key(&headers),
            body: |limit, _| read_body(&headers, body, limit),
        };
        let mut codec = pipeline::responses::Responses::new(&app);
        let ended = pipeline::chat(&app, &snap, inbound, &mut codec).await;
        let kept = codec.keep_whole(&ended).await;
        answer(ended, &rid, |reply, served| match reply {
            ChatReply::Full(r) => {
                let body = kept.unwrap_or_else(|| codec.encode(&r, &served.model.name));
                json_response(StatusCode::OK, body, &rid)
            }
            ChatReply::Forward { body, .. } => json_response(StatusCode::OK, body, &rid),
            ChatReply::Stream(s) => event_stream(s.into_body(), &rid),
        })
    })
    .await
}

async fn embeddings(app: Arc<App>, headers: HeaderMap, body: Incoming) -> Response {
    model_call(app, headers, |app, rid, headers, start| async move {
        let snap = app.store.load();
        let inbound = pipeline::Inbound {
            request_id: &rid,
            start,
            trace: pipeline::trace_of(&headers),
            key: headers::bearer_key(&headers),
            body: |limit, _| read_body(&headers, body, limit),
        };
        let decode = |b: &[u8], mode| Ok(openai::decode_embeddings(b, mode)?);
        let ended = pipeline::embeddings(&app, &snap, inbound, decode).await;
        answer(ended, &rid, |(resp, req), _| {
            json_response(StatusCode::OK, openai::encode_embeddings(&resp, &req), &rid)
        })
    })
    .await
}

async fn messages(app: Arc<App>, headers: HeaderMap, body: Incoming) -> Response {
    model_call(app, headers, |app, rid, headers, start| async move {
        let snap = app.store.load();
        let inbound = pipeline::Inbound {
            request_id: &rid,
            start,
            trace: pipeline::trace_of(&headers),
            key: headers::anthropic_key(&headers),
            body: |limit, _| read_body(&headers, body, limit),
        };
        let mut codec = codec::Messages {
            request_id: &rid,
            version: headers::anthropic_version(&headers),
            beta: headers::anthropic_forwarded(&headers),
            shows_thinking: true,
        };
        let ended = pipeline::chat(&app, &snap, inbound, &mut codec).await;
        answer_in(Dialect::Anthropic, ended, &rid, |reply, served| match reply {
            ChatReply::Full(r) => {
                let body = anthropic::encode_message(&r, &rid, &served.model.name, codec.shows_thinking);
                json_response(StatusCode::OK, body, &rid)
            }
            ChatReply::Forward { body, .. } => json_response(StatusCode::OK, body, &rid),
            ChatReply::Stream(s) => event_stream(s.into_body(), &rid),
        })
    })
    .await
}

/// `POST /v1/messages/count_tokens`: the prompt's tokens, counted by the upstream the route
/// would choose when it is Anthropic (`x-ax-token-count: exact`), else ax's estimate
/// (`x-ax-token-count: estimate`). No usage is recorded.
async fn count_tokens(app: Arc<App>, headers: HeaderMap, body: Incoming) -> Response {
    let rid = request_id(&headers);
    let snap = app.store.load();
    let counted = async {
        headers::anthropic_version(&headers)?;
        let bytes = read_body(&headers, body, snap.max_body_bytes).await?;
        // Lenient whatever the mode: counting drops nothing a model would have acted on, and an
        // Anthropic upstream counts the body as written.
        let (req, _) = anthropic::decode_canonical(&bytes, ax_protocol::config::ParamsMode::Lenient, true)?;
        let beta = headers::anthropic_forwarded(&headers);
        let body = |model: &str| anthropic::with_model(bytes.clone(), model);
        let protocol = ax_wire::canonical::Protocol::AnthropicMessages;
        ops::count_tokens(&app, headers::anthropic_key(&headers), &req, protocol, body, &beta, &rid).await
    };
    token_count(Dialect::Anthropic, counted.await, anthropic::encode_count, &rid)
}

/// A token count's answer (`encode` writes the caller protocol's body), `x-ax-token-count`
/// saying who counted; or the error.
fn token_count(
    dialect: Dialect,
    counted: Result<ops::TokenCount, AxError>,
    encode: fn(u64) -> Vec<u8>,
    rid: &str,
) -> Response {
    match counted {
        Ok(n) => {
            let (n, how) = match n {
                ops::TokenCount::Exact(n) => (n, "exact"),
                ops::TokenCount::Estimate(n) => (n, "estimate"),
            };
            let mut r = json_response(StatusCode::OK, encode(n), rid);
            r.headers_mut().insert(HeaderName::from_static("x-ax-token-count"), HeaderValue::from_static(how));
            r
        }
        Err(e) => error_in(dialect, &e, rid),
    }
}

/// `GET` and `DELETE /v1/responses/{id}`, `GET /v1/responses/{id}/input_items`: the caller's
/// tenant's stored responses (another tenant's id is a 404, as an unknown one).
async fn stored_response(app: &App, parts: &http::request::Parts) -> Response {
    let rid = request_id(&parts.headers);
    let rest = parts.uri.path().trim_start_matches("/v1/responses/");
    let (id, items) = match rest.strip_suffix("/input_items") {
        Some(id) => (id, true),
        None => (rest, false),
    };
    let method = &parts.method;
    let get = method == Method::GET || method == Method::HEAD;
    if id.is_empty() || id.contains('/') {
        return not_found(parts);
    }
    if !(get || (method == Method::DELETE && !items)) {
        return method_not_allowed(parts, if items { "GET, HEAD" } else { "GET, HEAD, DELETE" });
    }
    let answered = async {
        let tenant = ops::tenant_of(app, headers::bearer_key(&parts.headers))?;
        if items {
            let query = responses::ListQuery::parse(parts.uri.query().unwrap_or(""))?;
            let max = app.store.load().max_body_bytes.saturating_mul(2);
            let chain = ops::stored_conversation(app, &tenant, id, max, None).await?;
            Ok(responses::encode_input_items(&chain.links, &query))
        } else if get {
            Ok(ops::stored_response(app, &tenant, id).await?.to_vec())
        } else {
            ops::delete_response(app, &tenant, id).await?;
            Ok(serde_json::to_vec(&serde_json::json!({ "id": id, "object": "response", "deleted": true }))
                .unwrap_or_default())
        }
    };
    match answered.await {
        Ok(body) => json_response(StatusCode::OK, body, &rid),
        Err(e) => error_response(&e, &rid),
    }
}

/// A stream's answer: `text/event-stream`, the request id.
fn event_stream(body: Body, rid: &str) -> Response {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(X_REQUEST_ID.clone(), header_value(rid));
    r
}

/// The HTTP answer to a call: the codec's body (`encode`) with the gateway's headers, or the error.
fn answer<R>(ended: Ended<'_, R>, rid: &str, encode: impl FnOnce(R, &Served<'_>) -> Response) -> Response {
    answer_in(Dialect::OpenAi, ended, rid, encode)
}

/// The HTTP answer to a call in the caller's dialect.
fn answer_in<R>(
    dialect: Dialect,
    ended: Ended<'_, R>,
    rid: &str,
    encode: impl FnOnce(R, &Served<'_>) -> Response,
) -> Response {
    match ended {
        Ended::Answered(a) => {
            let mut r = encode(a.reply, &a.served);
            if let Some(c) = a.cost {
                r.headers_mut().insert(X_AX_COST_USD.clone(), header_value(&ax_protocol::price::format_usd(c)));
            }
            served_headers(&mut r, &a.served);
            let h = r.headers_mut();
            if let Some(l) = a.long_context {
                h.insert(X_AX_LONG_CONTEXT.clone(), header_value(l));
            }
            if let Some(d) = &a.degraded {
                h.insert(X_AX_DEGRADED.clone(), header_value(d));
            }
            if let Some(w) = &a.warning {
                h.insert(X_AX_BUDGET_WARNING.clone(), header_value(w));
            }
            r
        }
        Ended::Failed { error, served } => {
            let mut r = error_in(dialect, &error, rid);
            match &served {
                Some(s) => served_headers(&mut r, s),
                None => {
                    r.headers_mut().insert(X_AX_ATTEMPTS.clone(), HeaderValue::from(0));
                }
            }
            r
        }
        Ended::Rejected(e) => error_in(dialect, &e, rid),
    }
}

/// An Anthropic client (it sends `anthropic-version`) is answered in Anthropic's shapes.
fn dialect_of(headers: &HeaderMap) -> Dialect {
    if headers.contains_key("anthropic-version") {
        Dialect::Anthropic
    } else {
        Dialect::OpenAi
    }
}

fn models(app: &App, headers: &HeaderMap) -> Response {
    let rid = request_id(headers);
    let dialect = dialect_of(headers);
    let aliases = match ops::models(app, headers::anthropic_key(headers)) {
        Ok(a) => a,
        Err(e) => return error_in(dialect, &e, &rid),
    };
    let body = match dialect {
        Dialect::Anthropic => anthropic::encode_models(&aliases),
        Dialect::OpenAi | Dialect::Gemini => openai::encode_models(&aliases),
    };
    json_response(StatusCode::OK, body, &rid)
}

/// `GET /v1/models/{id}`: one alias the key may use, in the caller's dialect.
fn model(app: &App, headers: &HeaderMap, raw_id: &str) -> Response {
    let rid = request_id(headers);
    let dialect = dialect_of(headers);
    let id = percent_encoding::percent_decode_str(raw_id).decode_utf8_lossy();
    if let Err(e) = ops::model(app, headers::anthropic_key(headers), &id) {
        return error_in(dialect, &e, &rid);
    }
    let body = match dialect {
        Dialect::Anthropic => anthropic::encode_model(&id),
        Dialect::OpenAi | Dialect::Gemini => openai::encode_model(&id),
    };
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

/// Ready once a configuration is served; a node with none yet answers 503, so a load balancer
/// skips it.
fn readyz(app: &App) -> Response {
    let (status, word, version) = match ops::ready(app) {
        Ok(v) => (StatusCode::OK, "ready", v),
        Err(v) => (StatusCode::SERVICE_UNAVAILABLE, "no_configuration", v),
    };
    let body = format!(r#"{{"status":"{word}","config_version":{version}}}"#);
    plain(status, "application/json", body)
}

fn metrics(app: &App) -> Response {
    match ops::metrics(app) {
        Ok(text) => plain(StatusCode::OK, "text/plain; version=0.0.4", text),
        Err(e) => error_response(&e, "-"),
    }
}

/// The health table. Needs `Authorization: Bearer <server.admin_token>`.
fn admin_health(app: &App, headers: &HeaderMap) -> Response {
    let rid = request_id(headers);
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.get(..7).filter(|s| s.eq_ignore_ascii_case("bearer ")).map(|_| &v[7..]));
    match ops::health(app, bearer) {
        Ok(table) => json_response(StatusCode::OK, serde_json::to_vec(&table).unwrap_or_default(), &rid),
        Err(e) => error_response(&e, &rid),
    }
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
