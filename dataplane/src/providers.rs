//! Provider adapters: pure translation between the canonical model and each wire protocol.
//!
//! Every module has the same shape: its wire types, request encoding, response decoding, a
//! stream decoder (one upstream event → at most one canonical item), error decoding, and the
//! parameters it supports. Dispatch is an exhaustive `match` on `ProviderKind`: a new provider is
//! a compile error everywhere it must be handled. No routing or policy lives here.

pub mod anthropic;
pub mod gemini;
pub mod openai;

use ax_protocol::config::ProviderKind;

use crate::body::{Payload, PayloadWriter};
pub(crate) use crate::canonical::TextOut;
use crate::canonical::{ChatRequest, ChatResponse, EmbeddingsRequest, EmbeddingsResponse, Protocol, StreamItem};
use crate::error::{upstream_code_suffix, AxError};
use crate::sse::SseEvent;

/// What an adapter may read besides the request: plain values of the one call, no live state.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    pub kind: ProviderKind,
    /// The upstream's own name for the model.
    pub model: &'a str,
    /// `max_tokens` for providers that require one when the request sets none: the model's
    /// output cap, else the server's default.
    pub max_tokens: u32,
    /// The model's output cap (`max_output_tokens`), when the configuration gives one.
    pub output_cap: Option<u32>,
    /// The model takes a reasoning control (its `reasoning` capability).
    pub reasoning: bool,
}

/// Whether `kind` can honour the request parameter `param` (named as in
/// `ChatRequest::set_params`).
pub fn supports(kind: ProviderKind, param: &str) -> bool {
    match kind {
        ProviderKind::Openai | ProviderKind::AzureOpenai | ProviderKind::Mock => true,
        ProviderKind::Anthropic => anthropic::SUPPORTED.contains(&param),
        ProviderKind::Gemini => gemini::SUPPORTED.contains(&param),
    }
}

/// Whether `kind` constrains a `strict` tool's calls itself (OpenAI's strict mode, Anthropic's
/// strict tool use); for the others ax checks the calls (`upstream::strict`).
pub fn keeps_strict_tools(kind: ProviderKind) -> bool {
    match kind {
        ProviderKind::Openai | ProviderKind::AzureOpenai | ProviderKind::Anthropic | ProviderKind::Mock => true,
        ProviderKind::Gemini => false,
    }
}

pub fn encode_chat(ctx: Ctx<'_>, req: &ChatRequest) -> Result<Payload, AxError> {
    match ctx.kind {
        ProviderKind::Openai | ProviderKind::AzureOpenai => openai::encode_chat(ctx, req),
        ProviderKind::Anthropic => anthropic::encode_chat(ctx, req),
        ProviderKind::Gemini => gemini::encode_chat(ctx, req).map(Payload::from),
        ProviderKind::Mock => Err(AxError::Internal),
    }
}

/// Decodes a 2xx body. An error object inside it is an upstream error: HTTP 200 is not success.
pub fn decode_chat(kind: ProviderKind, body: &[u8]) -> Result<ChatResponse, AxError> {
    match kind {
        ProviderKind::Openai | ProviderKind::AzureOpenai => openai::decode_chat(body),
        ProviderKind::Anthropic => anthropic::decode_chat(body),
        ProviderKind::Gemini => gemini::decode_chat(body),
        ProviderKind::Mock => Err(AxError::Internal),
    }
}

/// Decodes a non-2xx answer into the classified error; `retry_after` is the upstream's header.
pub fn decode_error(kind: ProviderKind, status: u16, body: &[u8], retry_after: Option<std::time::Duration>) -> AxError {
    let code = match kind {
        ProviderKind::Openai | ProviderKind::AzureOpenai | ProviderKind::Mock => openai::error_code(body),
        ProviderKind::Anthropic => anthropic::error_code(body),
        ProviderKind::Gemini => gemini::error_code(body),
    };
    if matches!(status, 400 | 413 | 422) && is_context_error(code.as_deref(), body) {
        return AxError::UpstreamContextLength;
    }
    match classify(status, code.as_deref()) {
        AxError::UpstreamRateLimited(_) => AxError::UpstreamRateLimited(retry_after),
        AxError::UpstreamUnavailable(_) => AxError::UpstreamUnavailable(retry_after),
        e => e,
    }
}

/// Whether a 4xx says the prompt does not fit the model: OpenAI's `context_length_exceeded`,
/// Anthropic's "prompt is too long", Gemini's "exceeds the maximum number of tokens".
fn is_context_error(code: Option<&str>, body: &[u8]) -> bool {
    if code.is_some_and(|c| c.contains("context_length")) {
        return true;
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(4096)]).to_ascii_lowercase();
    ["prompt is too long", "maximum context length", "exceeds the maximum number of tokens", "context window"]
        .iter()
        .any(|needle| text.contains(needle))
}

pub fn encode_embeddings(ctx: Ctx<'_>, req: &EmbeddingsRequest) -> Result<Vec<u8>, AxError> {
    match ctx.kind {
        ProviderKind::Openai | ProviderKind::AzureOpenai => openai::encode_embeddings(ctx, req),
        ProviderKind::Gemini => gemini::encode_embeddings(ctx, req),
        ProviderKind::Anthropic | ProviderKind::Mock => Err(AxError::Internal),
    }
}

pub fn decode_embeddings(
    kind: ProviderKind,
    body: &[u8],
    req: &EmbeddingsRequest,
) -> Result<EmbeddingsResponse, AxError> {
    match kind {
        ProviderKind::Openai | ProviderKind::AzureOpenai => openai::decode_embeddings(body),
        ProviderKind::Gemini => gemini::decode_embeddings(body, req),
        ProviderKind::Anthropic | ProviderKind::Mock => Err(AxError::Internal),
    }
}

/// Per-stream decoding state of one upstream call.
pub enum StreamDecoder {
    OpenAi(openai::StreamState),
    /// An OpenAI stream to an OpenAI caller: events forwarded as they came.
    OpenAiForward(openai::ForwardState),
    /// An Anthropic stream to an Anthropic caller: events forwarded as they came.
    AnthropicForward(anthropic::ForwardState),
    /// A Responses stream to a Responses caller: events forwarded as they came.
    ResponsesForward(openai::ResponsesForwardState),
    Anthropic(anthropic::StreamState),
    Gemini(gemini::StreamState),
}

impl StreamDecoder {
    pub fn new(kind: ProviderKind) -> Option<Self> {
        match kind {
            ProviderKind::Openai | ProviderKind::AzureOpenai => Some(Self::OpenAi(openai::StreamState::default())),
            ProviderKind::Anthropic => Some(Self::Anthropic(anthropic::StreamState::default())),
            ProviderKind::Gemini => Some(Self::Gemini(gemini::StreamState::default())),
            ProviderKind::Mock => None,
        }
    }

    /// The decoder of a stream whose events go to a caller of the same protocol (`protocol`) as
    /// they came; `None` where the upstream's protocol has no forwarding (it is translated).
    pub fn forwarding(kind: ProviderKind, protocol: Protocol) -> Option<Self> {
        if protocol == Protocol::OpenAiResponses {
            return Some(Self::ResponsesForward(openai::ResponsesForwardState::default()));
        }
        match kind {
            ProviderKind::Openai | ProviderKind::AzureOpenai => {
                Some(Self::OpenAiForward(openai::ForwardState::default()))
            }
            ProviderKind::Anthropic => Some(Self::AnthropicForward(anthropic::ForwardState::default())),
            ProviderKind::Gemini | ProviderKind::Mock => None,
        }
    }

    /// One whole upstream event. `None` for events that carry nothing (pings, block stops, and
    /// an event with empty data, which some servers and proxies send as a keep-alive).
    pub fn on_event(&mut self, ev: &SseEvent) -> Result<Option<StreamItem>, AxError> {
        if ev.data.bytes().all(|b| b.is_ascii_whitespace()) {
            return Ok(None);
        }
        match self {
            Self::OpenAi(s) => s.on_event(ev),
            Self::OpenAiForward(s) => s.on_event(ev),
            Self::AnthropicForward(s) => s.on_event(ev),
            Self::ResponsesForward(s) => s.on_event(ev),
            Self::Anthropic(s) => s.on_event(ev),
            Self::Gemini(s) => s.on_event(ev),
        }
    }

    /// The answer's id and finish reasons seen so far (taken: a second call has none).
    pub fn facts(&mut self) -> crate::canonical::AnswerFacts {
        match self {
            Self::OpenAi(s) => std::mem::take(&mut s.facts),
            Self::OpenAiForward(s) => s.facts(),
            Self::AnthropicForward(s) => s.facts(),
            Self::ResponsesForward(s) => s.facts(),
            Self::Anthropic(s) => std::mem::take(&mut s.facts),
            Self::Gemini(s) => std::mem::take(&mut s.facts),
        }
    }

    /// The upstream closed the stream. Gemini ends this way; for the others, ending without their
    /// end marker is complete only if a finish reason was already seen.
    pub fn on_eof(&mut self) -> Result<StreamItem, AxError> {
        let finished = match self {
            Self::OpenAi(s) => s.finished,
            Self::OpenAiForward(s) => s.finished(),
            Self::AnthropicForward(s) => s.finished(),
            Self::ResponsesForward(s) => s.finished(),
            Self::Anthropic(s) => s.finished,
            Self::Gemini(s) => s.finished,
        };
        if finished {
            Ok(StreamItem::Done)
        } else {
            Err(AxError::UpstreamStreamTruncated)
        }
    }
}

/// Maps an upstream HTTP status (or a status carried inside a 200 body) and the provider's
/// error code onto ax's error. Which of these may fail over is `AxError::is_retryable`.
pub fn classify(status: u16, code: Option<&str>) -> AxError {
    if code.is_some_and(|c| c.contains("content_filter") || c == "content_policy_violation" || c == "refusal") {
        return AxError::ContentFilter;
    }
    match status {
        400 | 409 | 413 | 422 => AxError::UpstreamRejected(upstream_code_suffix(code)),
        401 | 403 => AxError::UpstreamAuth,
        404 => AxError::UpstreamNotFound,
        408 | 504 => AxError::UpstreamTimeout,
        429 => AxError::UpstreamRateLimited(None),
        503 | 529 => AxError::UpstreamUnavailable(None),
        _ => AxError::UpstreamFailed(upstream_code_suffix(code)),
    }
}

/// Maps a provider's error *type* string (what errors inside a 200 carry) onto a status.
pub fn status_of_error_type(t: &str) -> u16 {
    match t {
        "invalid_request_error" | "invalid_argument" | "INVALID_ARGUMENT" | "FAILED_PRECONDITION" => 400,
        "authentication_error" | "UNAUTHENTICATED" => 401,
        "permission_error" | "PERMISSION_DENIED" => 403,
        "not_found_error" | "NOT_FOUND" => 404,
        "request_too_large" => 413,
        "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" | "RESOURCE_EXHAUSTED" => 429,
        "overloaded_error" | "overloaded" | "UNAVAILABLE" => 503,
        "DEADLINE_EXCEEDED" | "timeout" => 504,
        _ => 500,
    }
}

/// The arguments of an assistant's tool call (`messages[i].tool_calls[j]`) as the JSON object
/// Anthropic's `input` and Gemini's `args` need. Empty arguments are `{}`; anything not JSON is
/// the caller's error, named by its path.
pub fn tool_arguments(args: &str, i: usize, j: usize) -> Result<serde_json::Value, AxError> {
    if args.trim().is_empty() {
        return Ok(serde_json::Value::Object(serde_json::Map::new()));
    }
    serde_json::from_str(args).map_err(|_| {
        let path = format!("messages[{i}].tool_calls[{j}].function.arguments");
        let message = format!("{path} is not valid JSON");
        AxError::invalid_param(path, message)
    })
}

pub use crate::canonical::estimate_tokens;

/// Synthesized tool-call id for providers that have none (Gemini, the mock): `call_` + 24
/// random alphanumerics, like OpenAI's.
pub fn synth_call_id() -> String {
    use rand::distr::{Alphanumeric, SampleString};
    format!("call_{}", Alphanumeric.sample_string(&mut rand::rng(), 24))
}

/// An optional string field read as a `Cow` that borrows from the body when the string has no
/// escapes (`#[serde(default, borrow, deserialize_with = "borrowed_str")]`). serde's own impl
/// copies every `Option<Cow<str>>` into a `String`: `#[serde(borrow)]` reaches only a bare `Cow`
/// field (two allocations a forwarded answer, ~850 instructions, in session 23's profile).
/// (`serde_with::BorrowCow` does the same; it is in the control plane's tree only, through
/// `openidconnect`, and not worth a dependency of the data plane for these few lines.)
pub(crate) fn borrowed_str<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<std::borrow::Cow<'de, str>>, D::Error> {
    struct Text<'de>(std::borrow::Cow<'de, str>);
    impl<'de> serde::Deserialize<'de> for Text<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Text<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a string")
                }
                fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
                    Ok(Text(std::borrow::Cow::Borrowed(v)))
                }
                fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Text<'de>, E> {
                    Ok(Text(std::borrow::Cow::Owned(v.to_owned())))
                }
                fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Text<'de>, E> {
                    Ok(Text(std::borrow::Cow::Owned(v)))
                }
            }
            d.deserialize_str(V)
        }
    }
    Ok(<Option<Text<'de>> as serde::Deserialize>::deserialize(d)?.map(|t| t.0))
}

/// A string field that only matters when it says `"error"` (OpenAI-compatible `object`,
/// Anthropic `type`): decoded without allocating, so the success path parses the body once.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IsError(pub bool);

impl<'de> serde::Deserialize<'de> for IsError {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = IsError;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<IsError, E> {
                Ok(IsError(v == "error"))
            }
            // Any other JSON type is simply not the error marker.
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<IsError, E> {
                Ok(IsError(false))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<IsError, E> {
                Ok(IsError(false))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<IsError, E> {
                Ok(IsError(false))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<IsError, E> {
                Ok(IsError(false))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<IsError, E> {
                Ok(IsError(false))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<IsError, A::Error> {
                while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(IsError(false))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<IsError, A::Error> {
                while a.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
                Ok(IsError(false))
            }
        }
        d.deserialize_any(V)
    }
}

/// Writes an upstream request body. `sonic_rs` writes the same JSON as serde_json from the same
/// `Serialize` types, escaping strings with SIMD: serde_json's byte-at-a-time escape was half of a
/// translated 50 KB request's instructions (438,000 of 922,000 under callgrind), a conversation's
/// text being almost all of the body.
/// `reserve`: about the body's size, so its buffer is allocated once (each doubling of a growing
/// one copied what was written so far).
pub(crate) fn to_json<T: serde::Serialize>(body: &T, reserve: usize) -> Result<Vec<u8>, AxError> {
    let mut out = body_buffer(reserve);
    write_json(&mut out, body)?;
    Ok(out)
}

/// A buffer for a request body whose text takes about `text_len` bytes (`ChatRequest::text_len`),
/// with room for its escapes and the other fields.
pub(crate) fn body_buffer(text_len: usize) -> Vec<u8> {
    Vec::with_capacity(text_len + text_len / 8 + 1024)
}

/// The bytes of `text` that `write_text` copies into the body's buffer (about: escapes aside).
pub(crate) fn copied(text: &TextOut<'_>) -> usize {
    match text.literal() {
        Some(json) if PayloadWriter::copies(json.len()) => json.len(),
        Some(_) => 0,
        None => text.decoded().len(),
    }
}

/// A text into the body: a long literal of the caller's as a piece of its own (`PayloadWriter`).
pub(crate) fn write_text(out: &mut PayloadWriter, text: &TextOut<'_>) -> Result<(), AxError> {
    match text.literal() {
        Some(json) => {
            out.shared(json);
            Ok(())
        }
        None => text.write(&mut out.buf),
    }
}
/// A string's JSON into a body written by hand: as it is between quotes when nothing in it needs
/// escaping (an image's base64 `data:` URL, often hundreds of KB, which sonic-rs would scan byte
/// by byte after reserving six times its length, moving the whole body), else through sonic-rs.
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) -> Result<(), AxError> {
    if !crate::skim::plain(s.as_bytes()) {
        return write_json(out, s);
    }
    out.reserve(s.len() + 2);
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
    Ok(())
}

/// Appends a value's JSON to a body being written by hand.
pub(crate) fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), AxError> {
    sonic_rs::to_writer(&mut *out, value).map_err(|_| AxError::Internal)
}

/// Parses JSON from bytes, checking UTF-8 once for the whole body: `serde_json::from_slice`
/// checks every string on its own, a large share of the parse for an answer of short strings
/// (about 90 instructions a string under callgrind).
pub(crate) fn from_json<'a, T: serde::Deserialize<'a>>(body: &'a [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(body) {
        Ok(s) => serde_json::from_str(s),
        Err(_) => serde_json::from_slice(body), // for its error
    }
}

/// Re-reads a body known to carry an error (the rare path) and classifies it.
pub(crate) fn error_body(body: &[u8], classify_value: fn(&serde_json::Value) -> Option<AxError>) -> AxError {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| classify_value(&v))
        .unwrap_or(AxError::UpstreamInvalidResponse)
}

#[cfg(test)]
mod tests;
