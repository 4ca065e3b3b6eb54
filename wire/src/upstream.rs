//! Provider adapters: pure translation between the canonical model and each wire protocol.
//!
//! Every module has the same shape: its wire types, request encoding, response decoding, a
//! stream decoder (one upstream event → at most one canonical item), error decoding, and the
//! parameters it supports. Dispatch is an exhaustive `match` on `ProviderKind`: a new provider is
//! a compile error everywhere it must be handled. No routing or policy lives here.

use crate::{anthropic, gemini, openai, responses};

use ax_protocol::config::ProviderKind;

use crate::adapter::{classify, Ctx};
use crate::canonical::{ChatRequest, ChatResponse, EmbeddingsRequest, EmbeddingsResponse, Protocol, StreamItem};
use crate::error::Error;
use crate::json::Payload;
use crate::sse::SseEvent;

/// Whether `kind` can honour the request parameter `param` (named as in
/// `ChatRequest::set_params`).
pub fn supports(kind: ProviderKind, param: &str) -> bool {
    match kind {
        ProviderKind::Openai | ProviderKind::AzureOpenai | ProviderKind::Mock => true,
        ProviderKind::Anthropic => anthropic::upstream::SUPPORTED.contains(&param),
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

pub fn encode_chat(ctx: Ctx<'_>, req: &ChatRequest) -> Result<Payload, Error> {
    match ctx.kind {
        ProviderKind::Openai | ProviderKind::AzureOpenai => openai::upstream::encode_chat(ctx, req),
        ProviderKind::Anthropic => anthropic::upstream::encode_chat(ctx, req),
        ProviderKind::Gemini => gemini::encode_chat(ctx, req).map(Payload::from),
        ProviderKind::Mock => Err(Error::Internal),
    }
}

/// Decodes a 2xx body. An error object inside it is an upstream error: HTTP 200 is not success.
pub fn decode_chat(kind: ProviderKind, body: &[u8]) -> Result<ChatResponse, Error> {
    match kind {
        ProviderKind::Openai | ProviderKind::AzureOpenai => openai::upstream::decode_chat(body),
        ProviderKind::Anthropic => anthropic::upstream::decode_chat(body),
        ProviderKind::Gemini => gemini::decode_chat(body),
        ProviderKind::Mock => Err(Error::Internal),
    }
}

/// Decodes a non-2xx answer into the classified error; `retry_after` is the upstream's header.
pub fn decode_error(kind: ProviderKind, status: u16, body: &[u8], retry_after: Option<std::time::Duration>) -> Error {
    let code = match kind {
        ProviderKind::Openai | ProviderKind::AzureOpenai | ProviderKind::Mock => openai::upstream::error_code(body),
        ProviderKind::Anthropic => anthropic::upstream::error_code(body),
        ProviderKind::Gemini => gemini::error_code(body),
    };
    if matches!(status, 400 | 413 | 422) && is_context_error(code.as_deref(), body) {
        return Error::UpstreamContextLength;
    }
    match classify(status, code.as_deref()) {
        Error::UpstreamRateLimited(_) => Error::UpstreamRateLimited(retry_after),
        Error::UpstreamUnavailable(_) => Error::UpstreamUnavailable(retry_after),
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

pub fn encode_embeddings(ctx: Ctx<'_>, req: &EmbeddingsRequest) -> Result<Vec<u8>, Error> {
    match ctx.kind {
        ProviderKind::Openai | ProviderKind::AzureOpenai => openai::upstream::encode_embeddings(ctx, req),
        ProviderKind::Gemini => gemini::encode_embeddings(ctx, req),
        ProviderKind::Anthropic | ProviderKind::Mock => Err(Error::Internal),
    }
}

pub fn decode_embeddings(
    kind: ProviderKind,
    body: &[u8],
    req: &EmbeddingsRequest,
) -> Result<EmbeddingsResponse, Error> {
    match kind {
        ProviderKind::Openai | ProviderKind::AzureOpenai => openai::upstream::decode_embeddings(body),
        ProviderKind::Gemini => gemini::decode_embeddings(body, req),
        ProviderKind::Anthropic | ProviderKind::Mock => Err(Error::Internal),
    }
}

/// Per-stream decoding state of one upstream call.
pub enum StreamDecoder {
    OpenAi(openai::upstream::StreamState),
    /// An OpenAI stream to an OpenAI caller: events forwarded as they came.
    OpenAiForward(openai::upstream::ForwardState),
    /// An Anthropic stream to an Anthropic caller: events forwarded as they came.
    AnthropicForward(anthropic::upstream::ForwardState),
    /// A Responses stream to a Responses caller: events forwarded as they came.
    ResponsesForward(responses::upstream::ResponsesForwardState),
    /// A Gemini stream to a Gemini caller: events forwarded as they came.
    GeminiForward(gemini::upstream::ForwardState),
    Anthropic(anthropic::upstream::StreamState),
    Gemini(gemini::StreamState),
}

impl StreamDecoder {
    pub fn new(kind: ProviderKind) -> Option<Self> {
        match kind {
            ProviderKind::Openai | ProviderKind::AzureOpenai => {
                Some(Self::OpenAi(openai::upstream::StreamState::default()))
            }
            ProviderKind::Anthropic => Some(Self::Anthropic(anthropic::upstream::StreamState::default())),
            ProviderKind::Gemini => Some(Self::Gemini(gemini::StreamState::default())),
            ProviderKind::Mock => None,
        }
    }

    /// The decoder of a stream whose events go to a caller of the same protocol (`protocol`) as
    /// they came; `None` where the upstream's protocol has no forwarding (it is translated).
    pub fn forwarding(kind: ProviderKind, protocol: Protocol) -> Option<Self> {
        if protocol == Protocol::OpenAiResponses {
            return Some(Self::ResponsesForward(responses::upstream::ResponsesForwardState::default()));
        }
        match kind {
            ProviderKind::Openai | ProviderKind::AzureOpenai => {
                Some(Self::OpenAiForward(openai::upstream::ForwardState::default()))
            }
            ProviderKind::Anthropic => Some(Self::AnthropicForward(anthropic::upstream::ForwardState::default())),
            ProviderKind::Gemini => Some(Self::GeminiForward(gemini::upstream::ForwardState::default())),
            ProviderKind::Mock => None,
        }
    }

    /// One whole upstream event. `None` for events that carry nothing (pings, block stops, and
    /// an event with empty data, which some servers and proxies send as a keep-alive).
    pub fn on_event(&mut self, ev: &SseEvent) -> Result<Option<StreamItem>, Error> {
        if ev.data.bytes().all(|b| b.is_ascii_whitespace()) {
            return Ok(None);
        }
        match self {
            Self::OpenAi(s) => s.on_event(ev),
            Self::OpenAiForward(s) => s.on_event(ev),
            Self::AnthropicForward(s) => s.on_event(ev),
            Self::ResponsesForward(s) => s.on_event(ev),
            Self::GeminiForward(s) => s.on_event(ev),
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
            Self::GeminiForward(s) => s.facts(),
            Self::Anthropic(s) => std::mem::take(&mut s.facts),
            Self::Gemini(s) => std::mem::take(&mut s.facts),
        }
    }

    /// The upstream closed the stream. Gemini ends this way; for the others, ending without their
    /// end marker is complete only if a finish reason was already seen.
    pub fn on_eof(&mut self) -> Result<StreamItem, Error> {
        let finished = match self {
            Self::OpenAi(s) => s.finished,
            Self::OpenAiForward(s) => s.finished(),
            Self::AnthropicForward(s) => s.finished(),
            Self::ResponsesForward(s) => s.finished(),
            Self::GeminiForward(s) => s.finished(),
            Self::Anthropic(s) => s.finished,
            Self::Gemini(s) => s.finished,
        };
        if finished {
            Ok(StreamItem::Done)
        } else {
            Err(Error::UpstreamStreamTruncated)
        }
    }
}

pub use crate::canonical::estimate_tokens;

#[cfg(test)]
mod tests;
