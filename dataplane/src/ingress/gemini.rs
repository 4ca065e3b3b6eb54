//! Gemini's own API (what the `google-genai` SDKs and the Gemini CLI call):
//! `POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent` (`?alt=sse`: SSE;
//! without it, one JSON array streamed), `:countTokens`, `:embedContent`, `:batchEmbedContents`;
//! `GET /v1beta/models` and `/v1beta/models/{model}`; the same under `/v1/`. The colon may come
//! percent-encoded (`%3A`). The key: `x-goog-api-key`, `?key=` or `Authorization: Bearer`.
//! Errors in Google's shape (`Dialect::Gemini`).

use std::borrow::Cow;
use std::sync::Arc;

use ax_wire::gemini::caller as gemini;
use bytes::Bytes;
use futures_util::StreamExt;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use hyper::body::Incoming;

use super::{answer_in, event_stream, json_response, model_call, read_body, request_id, Dialect, Response};
use crate::body::{header_value, Body};
use crate::error::AxError;
use crate::pipeline::{self, codec, ops, ChatReply};
use crate::App;

/// A Gemini method on a model.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Generate,
    Stream,
    Count,
    Embed,
    BatchEmbed,
}

/// `(model, method)` of a `POST …/models/{model}:{method}` path under `/v1beta/` or `/v1/`; the
/// method `None` when Gemini has no such method.
pub fn call_path(path: &str) -> Option<(String, Option<Method>)> {
    let rest = path.strip_prefix("/v1beta/models/").or_else(|| path.strip_prefix("/v1/models/"))?;
    let rest = percent_encoding::percent_decode_str(rest).decode_utf8().ok()?;
    let (model, method) = rest.rsplit_once(':')?;
    let method = match method {
        "generateContent" => Some(Method::Generate),
        "streamGenerateContent" => Some(Method::Stream),
        "countTokens" => Some(Method::Count),
        "embedContent" => Some(Method::Embed),
        "batchEmbedContents" => Some(Method::BatchEmbed),
        _ => None,
    };
    (!model.is_empty()).then(|| (model.to_owned(), method))
}

/// The model of a `GET /v1beta/models/{model}` path.
pub fn model_path(path: &str) -> Option<Cow<'_, str>> {
    let rest = path.strip_prefix("/v1beta/models/").filter(|r| !r.is_empty())?;
    // `{model}:{method}` is a call (`call_path`); an alias may hold a colon (`llama3:8b`).
    (!is_call(path)).then(|| percent_encoding::percent_decode_str(rest).decode_utf8_lossy())
}

/// Whether `path` calls one of Gemini's methods on a model.
pub fn is_call(path: &str) -> bool {
    call_path(path).is_some_and(|(_, m)| m.is_some())
}

/// The caller's key: `x-goog-api-key`, the `key` query parameter, or `Authorization: Bearer`.
pub fn key<'a>(headers: &'a HeaderMap, query: Option<&'a str>) -> Option<Cow<'a, str>> {
    if let Some(k) = headers.get("x-goog-api-key").and_then(|v| v.to_str().ok()).map(str::trim) {
        if !k.is_empty() {
            return Some(Cow::Borrowed(k));
        }
    }
    query_key(query).or_else(|| super::headers::bearer_key(headers).map(Cow::Borrowed))
}

fn query_key(query: Option<&str>) -> Option<Cow<'_, str>> {
    url::form_urlencoded::parse(query?.as_bytes()).find(|(k, _)| k == "key").map(|(_, v)| v).filter(|v| !v.is_empty())
}

/// Whether a caller authenticates the Gemini way (`x-goog-api-key` or `?key=`): `GET /v1/models`
/// then answers in Gemini's shape.
pub fn authenticates(parts: &http::request::Parts) -> bool {
    parts.headers.contains_key("x-goog-api-key") || query_key(parts.uri.query()).is_some()
}

/// A `POST` on a model.
pub async fn call(app: Arc<App>, parts: http::request::Parts, body: Incoming) -> Response {
    let Some((model, method)) = call_path(parts.uri.path()) else {
        return not_found(&parts);
    };
    let sse = parts
        .uri
        .query()
        .is_some_and(|q| url::form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "alt" && v == "sse"));
    let key = key(&parts.headers, parts.uri.query()).map(Cow::into_owned);
    match method {
        Some(Method::Generate) => generate(app, parts.headers, key, model, None, body).await,
        Some(Method::Stream) => generate(app, parts.headers, key, model, Some(sse), body).await,
        Some(Method::Count) => Box::pin(count(app, parts.headers, key, model, body)).await,
        Some(m @ (Method::Embed | Method::BatchEmbed)) => {
            embed(app, parts.headers, key, model, m == Method::BatchEmbed, body).await
        }
        None => not_found(&parts),
    }
}

/// `generateContent` (`stream` `None`) or `streamGenerateContent` (`Some(sse)`).
async fn generate(
    app: Arc<App>,
    headers: HeaderMap,
    key: Option<String>,
    model: String,
    stream: Option<bool>,
    body: Incoming,
) -> Response {
    model_call(app, headers, |app, rid, headers, start| async move {
        let snap = app.store.load();
        let inbound = pipeline::Inbound {
            request_id: &rid,
            start,
            trace: pipeline::trace_of(&headers),
            key: key.as_deref(),
            body: |limit, _| read_body(&headers, body, limit),
        };
        let mut codec = codec::Gemini { request_id: &rid, model, stream: stream.is_some(), shows_thoughts: false };
        let ended = pipeline::chat(&app, &snap, inbound, &mut codec).await;
        answer_in(Dialect::Gemini, ended, &rid, |reply, served| match reply {
            ChatReply::Full(r) => {
                let body = gemini::encode_answer(&r, &rid, &served.model.name, codec.shows_thoughts);
                json_response(StatusCode::OK, body, &rid)
            }
            ChatReply::Forward { body, .. } => json_response(StatusCode::OK, body, &rid),
            ChatReply::Stream(s) if stream == Some(false) => array_stream(s.into_body(), &rid),
            ChatReply::Stream(s) => event_stream(s.into_body(), &rid),
        })
    })
    .await
}

/// A stream as the one JSON array Google sends without `alt=sse`.
fn array_stream(body: Body, rid: &str) -> Response {
    let Body::Stream(inner) = body else {
        return json_response(StatusCode::OK, Bytes::from_static(b"[]"), rid);
    };
    let framed = futures_util::stream::unfold(Some((inner, gemini::ArrayFraming::default())), |state| async move {
        let (mut inner, mut framing) = state?;
        loop {
            match inner.next().await {
                Some(b) => {
                    let out = framing.push(&b);
                    if !out.is_empty() {
                        return Some((out, Some((inner, framing))));
                    }
                }
                None => return Some((framing.end(), None)),
            }
        }
    });
    let mut r = Response::new(Body::stream(framed));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(super::X_REQUEST_ID.clone(), header_value(rid));
    r
}

/// `countTokens`: counted by a Gemini upstream the route would choose (the body as sent,
/// `x-ax-token-count: exact`), else ax's estimate (`estimate`). No usage is recorded.
async fn count(app: Arc<App>, headers: HeaderMap, key: Option<String>, model: String, body: Incoming) -> Response {
    let rid = request_id(&headers);
    let snap = app.store.load();
    let counted = async {
        let bytes = read_body(&headers, body, snap.max_body_bytes).await?;
        let req = gemini::decode_count(&bytes, &model)?;
        let protocol = ax_wire::canonical::Protocol::GeminiGenerate;
        let body = |m: &str| gemini::count_body(&bytes, m);
        ops::count_tokens(&app, key.as_deref(), &req, protocol, body, &[], &rid).await
    };
    super::token_count(Dialect::Gemini, counted.await, gemini::encode_count, &rid)
}

/// `embedContent` and `batchEmbedContents`.
async fn embed(
    app: Arc<App>,
    headers: HeaderMap,
    key: Option<String>,
    model: String,
    batch: bool,
    body: Incoming,
) -> Response {
    model_call(app, headers, |app, rid, headers, start| async move {
        let snap = app.store.load();
        let inbound = pipeline::Inbound {
            request_id: &rid,
            start,
            trace: pipeline::trace_of(&headers),
            key: key.as_deref(),
            body: |limit, _| read_body(&headers, body, limit),
        };
        let decode = |b: &[u8], mode| Ok(gemini::embed_request(b, &model, batch, mode)?);
        let ended = pipeline::embeddings(&app, &snap, inbound, decode).await;
        answer_in(Dialect::Gemini, ended, &rid, |(resp, _), _| {
            let body = if batch { gemini::encode_batch_embeddings(&resp) } else { gemini::encode_embedding(&resp) };
            json_response(StatusCode::OK, body, &rid)
        })
    })
    .await
}

/// `GET /v1beta/models` (and `/v1/models` for a caller authenticating the Gemini way).
pub fn models(app: &App, parts: &http::request::Parts) -> Response {
    let rid = request_id(&parts.headers);
    let key = key(&parts.headers, parts.uri.query());
    match ops::models(app, key.as_deref()) {
        Ok(aliases) => {
            let listed: Vec<(String, Option<(u32, u32)>)> = aliases
                .into_iter()
                .map(|a| {
                    let l = ops::model_limits(app, &a);
                    (a, l)
                })
                .collect();
            json_response(StatusCode::OK, gemini::encode_models(&listed), &rid)
        }
        Err(e) => super::error_in(Dialect::Gemini, &e, &rid),
    }
}

/// `GET /v1beta/models/{model}` (and `/v1/models/{model}` the Gemini way).
pub fn model(app: &App, parts: &http::request::Parts, id: &str) -> Response {
    let rid = request_id(&parts.headers);
    let id = id.strip_prefix("models/").unwrap_or(id);
    let key = key(&parts.headers, parts.uri.query());
    match ops::model(app, key.as_deref(), id) {
        Ok(()) => json_response(StatusCode::OK, gemini::encode_model(id, ops::model_limits(app, id)), &rid),
        Err(e) => super::error_in(Dialect::Gemini, &e, &rid),
    }
}

fn not_found(parts: &http::request::Parts) -> Response {
    let rid = request_id(&parts.headers);
    super::error_in(Dialect::Gemini, &AxError::NotFound(parts.uri.path().to_owned()), &rid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_paths_with_and_without_an_encoded_colon() {
        let (m, method) = call_path("/v1beta/models/gemini-2.5-pro:streamGenerateContent").unwrap();
        assert_eq!(m, "gemini-2.5-pro");
        assert!(method == Some(Method::Stream));
        let (m, method) = call_path("/v1/models/gemini-*%3AgenerateContent").unwrap();
        assert_eq!(m, "gemini-*");
        assert!(method == Some(Method::Generate));
        assert!(call_path("/v1beta/models/x:nope").unwrap().1.is_none());
        assert!(call_path("/v1beta/models/:generateContent").is_none());
        assert!(call_path("/v1/chat/completions").is_none());
    }

    #[test]
    fn the_key_from_its_header_its_query_or_a_bearer_token() {
        let mut h = HeaderMap::new();
        assert_eq!(key(&h, Some("alt=sse&key=ax%2Dk")).as_deref(), Some("ax-k"));
        h.insert("authorization", HeaderValue::from_static("Bearer ax-b"));
        assert_eq!(key(&h, Some("alt=sse")).as_deref(), Some("ax-b"));
        h.insert("x-goog-api-key", HeaderValue::from_static("ax-g"));
        assert_eq!(key(&h, Some("key=ax-k")).as_deref(), Some("ax-g"));
    }
}
