//! What the pipeline needs of a caller's wire protocol: a [`Codec`], one value per request. Its
//! per-request state (whether the caller sees thinking, the Responses turn) lives on the codec,
//! written as the body is read or decoded (`&mut self`) and read as the answer is written
//! (`&self`): the stages run in order, so nothing is shared between threads or reset.
//!
//! The wire work itself is `ax_wire`'s (one module per protocol); a codec binds it to the
//! request: its id, the caller's headers, the store.

use std::future::Future;

use ax_protocol::config::ParamsMode;
use ax_wire::anthropic::caller as anthropic;
use ax_wire::canonical::{ChatRequest, Protocol, Skim};
use ax_wire::gemini::caller as gemini;
use ax_wire::openai::caller as openai;
use bytes::Bytes;

use super::stream::StreamEncoder;
use crate::config::snapshot::Snapshot;
use crate::error::AxError;

/// A caller's wire protocol, for one request.
pub trait Codec: Send {
    /// The caller's stream events, written from the canonical stream.
    type Events: StreamEncoder;

    /// The protocol whose upstreams are sent the caller's bytes (the same-protocol fast path);
    /// `None`: every request is decoded.
    const FORWARDS: Option<Protocol>;

    /// Work once the body is read and the caller known, before the body is skimmed or decoded
    /// (the Responses codec reads the conversation a turn continues).
    fn prepare<'a>(
        &'a mut self,
        _snap: &'a Snapshot,
        _tenant: &'a str,
        _body: &'a Bytes,
    ) -> impl Future<Output = Result<(), AxError>> + Send + 'a {
        std::future::ready(Ok(()))
    }

    /// What the stages need of a body to forward it (its alias, stream flags, estimates), without
    /// decoding it; `Skim::Decode` when the alias is not forwarded (`forwards`).
    fn skim(&mut self, body: Bytes, forwards: &dyn Fn(&str) -> bool) -> Result<Skim, AxError> {
        let _ = forwards;
        Ok(Skim::Decode(body))
    }

    /// The canonical request, its texts slices of `body`.
    fn decode(&mut self, body: &Bytes, mode: ParamsMode) -> Result<ChatRequest, AxError>;

    /// The stream encoder for an answer `model` serves (`include_usage`: the caller asked for
    /// usage in the stream).
    fn events(&self, include_usage: bool, model: &str) -> Self::Events;
}

/// OpenAI Chat Completions (`POST /v1/chat/completions`).
pub struct Chat<'r> {
    pub request_id: &'r str,
}

impl Codec for Chat<'_> {
    type Events = openai::Events;
    const FORWARDS: Option<Protocol> = Some(Protocol::OpenAiChat);

    fn skim(&mut self, body: Bytes, forwards: &dyn Fn(&str) -> bool) -> Result<Skim, AxError> {
        Ok(openai::skim_chat(body, forwards)?)
    }

    fn decode(&mut self, body: &Bytes, mode: ParamsMode) -> Result<ChatRequest, AxError> {
        Ok(openai::decode_chat(body, mode)?)
    }

    fn events(&self, include_usage: bool, model: &str) -> Self::Events {
        openai::Events::new(include_usage, self.request_id, model)
    }
}

/// Anthropic Messages (`POST /v1/messages`).
pub struct Messages<'r> {
    pub request_id: &'r str,
    /// The `anthropic-version` header's check, refused once the caller is known (so the refusal
    /// is recorded under its tenant).
    pub version: Result<(), AxError>,
    /// The `anthropic-beta` headers an Anthropic upstream is sent.
    pub beta: Vec<(http::HeaderName, http::HeaderValue)>,
    /// Whether the answer shows thinking blocks: known once the request is decoded (a caller
    /// that did not ask for thinking is not shown the thinking an upstream did).
    pub shows_thinking: bool,
}

impl Codec for Messages<'_> {
    type Events = anthropic::Events;
    const FORWARDS: Option<Protocol> = Some(Protocol::AnthropicMessages);

    fn skim(&mut self, body: Bytes, forwards: &dyn Fn(&str) -> bool) -> Result<Skim, AxError> {
        self.version.clone()?;
        let mut skim = anthropic::skim_messages(body, forwards)?;
        if let Skim::Forward(raw) = &mut skim {
            raw.headers = std::mem::take(&mut self.beta);
        }
        Ok(skim)
    }

    fn decode(&mut self, body: &Bytes, mode: ParamsMode) -> Result<ChatRequest, AxError> {
        self.version.clone()?;
        let (req, shows_thinking) = anthropic::decode_canonical(body, mode, false)?;
        self.shows_thinking = shows_thinking;
        Ok(req)
    }

    fn events(&self, _include_usage: bool, model: &str) -> Self::Events {
        anthropic::Events::new(self.request_id, model, self.shows_thinking)
    }
}

/// Gemini's `generateContent` (`POST /v1beta/models/{model}:generateContent`,
/// `:streamGenerateContent`): the model and whether it streams come from the path.
pub struct Gemini<'r> {
    pub request_id: &'r str,
    /// The model the path names (an alias).
    pub model: String,
    pub stream: bool,
    /// Whether the answer shows thoughts (`thinkingConfig.includeThoughts`): known once the
    /// request is decoded; a forwarded answer is the upstream's own.
    pub shows_thoughts: bool,
}

impl Codec for Gemini<'_> {
    type Events = gemini::Events;
    const FORWARDS: Option<Protocol> = Some(Protocol::GeminiGenerate);

    fn skim(&mut self, body: Bytes, forwards: &dyn Fn(&str) -> bool) -> Result<Skim, AxError> {
        Ok(gemini::skim_generate(body, &self.model, self.stream, forwards)?)
    }

    fn decode(&mut self, body: &Bytes, mode: ParamsMode) -> Result<ChatRequest, AxError> {
        let d = gemini::decode_generate(body, &self.model, self.stream, mode)?;
        self.shows_thoughts = d.shows_thoughts;
        Ok(d.request)
    }

    fn events(&self, _include_usage: bool, model: &str) -> Self::Events {
        gemini::Events::new(self.request_id, model, self.shows_thoughts)
    }
}
