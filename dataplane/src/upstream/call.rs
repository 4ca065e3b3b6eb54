//! Dispatch: one upstream call for one candidate of the attempt plan.
//!
//! Encodes with the candidate's adapter, sends through the upstream's pooled client, and
//! classifies the answer. A non-2xx status and an error object inside a 2xx body are both
//! upstream errors; the raw body is logged with the request id and never returned to the caller.
//! Each timeout has its own error: connect (the client's), first byte (`send` until headers),
//! idle (between two body reads or stream events), total (the attempt's deadline).

use std::pin::Pin;
use std::time::Duration;

use bytes::BytesMut;
use tokio::time::{sleep_until, timeout_at, Instant, Sleep};

use crate::config::snapshot::{Backend, Model, Route, Upstream};
use crate::error::AxError;
use crate::trace::Hop;
use crate::transport::{self, Client, Response};
use crate::upstream::mock;
use ax_protocol::config::{Capability, ProviderKind};
use ax_wire::adapter::Ctx;
use ax_wire::canonical::{
    AnswerFacts, ChatRequest, ChatResponse, EmbeddingsRequest, EmbeddingsResponse, Protocol, RawChat, StreamItem,
    Transcript, Usage,
};
use ax_wire::sse::SseDecoder;
use ax_wire::upstream::{self as providers, StreamDecoder};

/// Upstream error bodies are logged up to this many bytes.
const LOGGED_BODY_BYTES: usize = 2048;
/// An error answer is read up to this size (only its code and a logged prefix are used); past
/// it, the error is classified by its status alone.
const MAX_ERROR_BODY_BYTES: usize = 1024 * 1024;

/// The time deadlines of one attempt: the upstream's timeouts with the route's overrides, and the
/// attempt's deadline (its total limit, capped by the request's overall deadline).
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    pub first_byte: Duration,
    pub idle: Duration,
    pub deadline: Instant,
}

impl Deadlines {
    /// When a step that may take `step` from now must end, and the error if it does not: the
    /// sooner of the step's own limit (`step_error`) and the attempt's deadline
    /// (`UpstreamTimeout`). One timer where a `timeout` inside a `timeout_at` armed two. (Not an
    /// async wrapper: that would hold the step's future twice and grow every caller's future.)
    fn step_end(&self, step: Duration, step_error: AxError) -> (Instant, AxError) {
        let end = Instant::now() + step;
        if end <= self.deadline {
            (end, step_error)
        } else {
            (self.deadline, AxError::UpstreamTimeout)
        }
    }

    /// An attempt's deadlines, it starting `now`.
    pub fn new(up: &Upstream, route: &Route, request_deadline: Instant, now: Instant) -> Self {
        let o = &route.timeouts;
        let total = Duration::from_millis(o.total_ms.unwrap_or(up.timeouts.total_ms));
        Self {
            first_byte: Duration::from_millis(o.first_byte_ms.unwrap_or(up.timeouts.first_byte_ms)),
            idle: Duration::from_millis(o.idle_ms.unwrap_or(up.timeouts.idle_ms)),
            deadline: (now + total).min(request_deadline),
        }
    }
}

pub enum ChatOutcome {
    /// A whole answer, in the canonical model.
    Full(ChatResponse),
    /// A whole answer in the caller's own protocol, to forward as it came, its usage, and (for a
    /// traced request) its id and finish reasons.
    Forward {
        body: bytes::Bytes,
        usage: Option<Usage>,
        facts: AnswerFacts,
    },
    Stream(Box<UpstreamStream>),
}

pub async fn chat(
    up: &Upstream,
    model: &Model,
    req: &ChatRequest,
    default_max_tokens: u32,
    hop: Hop<'_>,
    deadlines: Deadlines,
) -> Result<ChatOutcome, AxError> {
    let client = match &up.backend {
        Backend::Http(client) => client,
        Backend::Mock(m) => {
            return if req.stream {
                let source = Source::Mock(mock::MockStream::start(m, req)?);
                Ok(ChatOutcome::Stream(Box::new(UpstreamStream::new(source, deadlines))))
            } else {
                let reply = timeout_at(deadlines.deadline, mock::chat(m, model, req))
                    .await
                    .map_err(|_| AxError::UpstreamTimeout)??;
                Ok(ChatOutcome::Full(reply))
            };
        }
    };
    let ctx = Ctx {
        kind: up.kind,
        model: &model.name,
        max_tokens: model.max_output_tokens.unwrap_or(default_max_tokens),
        output_cap: model.max_output_tokens,
        reasoning: model.caps.has(Capability::Reasoning),
    };
    let strict = ax_wire::strict::StrictTools::for_request(up.kind, req)?;
    let body = providers::encode_chat(ctx, req)?;
    let url = if req.stream { &model.stream_url } else { &model.chat_url };
    let resp = send(client, up, url.as_ref(), body, &[], hop, deadlines).await?;
    if req.stream {
        return match stream_of(up, resp, deadlines, StreamDecoder::new(up.kind)).await? {
            ChatOutcome::Stream(mut us) => {
                us.strict = strict.map(Box::new);
                Ok(ChatOutcome::Stream(us))
            }
            other => Ok(other),
        };
    }
    let bytes = read_body(resp, deadlines, up.max_response_bytes).await?;
    let r = read(up, &bytes, providers::decode_chat(up.kind, &bytes))?;
    if let Some(s) = &strict {
        s.check_answer(&r)?;
    }
    Ok(ChatOutcome::Full(r))
}

/// A codec's reading of an upstream's 2xx answer; an error in it (an error object in a 200, an
/// answer that cannot be read) is logged with the body.
fn read<T>(up: &Upstream, bytes: &[u8], r: Result<T, ax_wire::Error>) -> Result<T, AxError> {
    r.map_err(|e| {
        let e = AxError::from(e);
        log_upstream_error(up, 200, bytes, &e);
        e
    })
}

/// A request in the caller's own protocol, sent to an upstream that speaks it (the same-protocol
/// fast path): the caller's bytes with the model replaced (`RawChat::body_for`), the answer
/// forwarded as it came unless something in it must be rewritten for the caller (then it comes
/// back canonical, as from `chat`). Only for HTTP upstreams whose protocol is the caller's.
pub async fn chat_forward(
    up: &Upstream,
    model: &Model,
    req: &RawChat,
    hop: Hop<'_>,
    deadlines: Deadlines,
) -> Result<ChatOutcome, AxError> {
    let Backend::Http(client) = &up.backend else { return Err(AxError::Internal) };
    let body = req.body_for(&model.name);
    let hop_traced = hop.traceparent.is_some();
    let responses = req.protocol == Protocol::OpenAiResponses;
    let url = match (responses, req.stream) {
        (true, _) => &model.responses_url,
        (false, true) => &model.stream_url,
        (false, false) => &model.chat_url,
    };
    let resp = send(client, up, url.as_ref(), body.into(), &req.headers, hop, deadlines).await?;
    if req.stream {
        return stream_of(up, resp, deadlines, StreamDecoder::forwarding(up.kind, req.protocol)).await;
    }
    let bytes = read_body(resp, deadlines, up.max_response_bytes).await?;
    // A traced request's span names the answer.
    let mut facts = AnswerFacts::default();
    let want = hop_traced.then_some(&mut facts);
    if responses {
        let usage = read(up, &bytes, ax_wire::responses::upstream::responses_forwardable(&bytes, want))?;
        return Ok(ChatOutcome::Forward { body: bytes, usage, facts });
    }
    let forwarded = match up.kind {
        ProviderKind::Openai | ProviderKind::AzureOpenai => ax_wire::openai::upstream::forwardable(&bytes, want),
        ProviderKind::Anthropic => ax_wire::anthropic::upstream::forwardable(&bytes, want),
        ProviderKind::Gemini => ax_wire::gemini::upstream::forwardable(&bytes, want),
        ProviderKind::Mock => return Err(AxError::Internal),
    };
    match read(up, &bytes, forwarded)? {
        Some(usage) => Ok(ChatOutcome::Forward { body: bytes, usage, facts }),
        // Something in it is rewritten for the caller: through the canonical model.
        None => read(up, &bytes, providers::decode_chat(up.kind, &bytes)).map(ChatOutcome::Full),
    }
}

/// An upstream's exact count of a request's prompt tokens (Anthropic's `count_tokens`, the
/// caller's body with the model replaced; Gemini's `countTokens`, the caller's body).
pub async fn count_tokens(
    up: &Upstream,
    model: &Model,
    body: Vec<bytes::Bytes>,
    headers: &[(http::HeaderName, http::HeaderValue)],
    hop: Hop<'_>,
    deadlines: Deadlines,
) -> Result<u64, AxError> {
    #[derive(serde::Deserialize)]
    struct Count {
        /// Anthropic's `input_tokens`, Gemini's `totalTokens`.
        #[serde(alias = "totalTokens")]
        input_tokens: u64,
    }
    let Backend::Http(client) = &up.backend else { return Err(AxError::Internal) };
    let resp = send(client, up, model.count_url.as_ref(), body.into(), headers, hop, deadlines).await?;
    let bytes = read_body(resp, deadlines, up.max_response_bytes).await?;
    serde_json::from_slice::<Count>(&bytes).map(|c| c.input_tokens).map_err(|_| AxError::UpstreamInvalidResponse)
}

/// An answer to a stream request: the upstream stream with `decoder` (the provider's, or its
/// forwarding one); a JSON body instead (some servers answer a stream request so, often with an
/// error) is the upstream's error.
async fn stream_of(
    up: &Upstream,
    resp: Response,
    deadlines: Deadlines,
    decoder: Option<StreamDecoder>,
) -> Result<ChatOutcome, AxError> {
    let is_sse = resp
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"));
    if !is_sse {
        let bytes = read_body(resp, deadlines, up.max_response_bytes).await?;
        let err = match providers::decode_chat(up.kind, &bytes) {
            Err(e) => AxError::from(e),
            Ok(_) => AxError::UpstreamInvalidResponse,
        };
        log_upstream_error(up, 200, &bytes, &err);
        return Err(err);
    }
    let decoder = decoder.ok_or(AxError::Internal)?;
    let sse = SseDecoder::with_limit(up.max_event_bytes);
    let source = Source::Http { resp, sse, decoder, state: HttpState::Reading };
    Ok(ChatOutcome::Stream(Box::new(UpstreamStream::new(source, deadlines))))
}

pub async fn embeddings(
    up: &Upstream,
    model: &Model,
    req: &EmbeddingsRequest,
    hop: Hop<'_>,
    deadlines: Deadlines,
) -> Result<EmbeddingsResponse, AxError> {
    let client = match &up.backend {
        Backend::Http(client) => client,
        Backend::Mock(_) => return mock::embeddings(model, req),
    };
    let ctx = Ctx { kind: up.kind, model: &model.name, max_tokens: 0, output_cap: None, reasoning: false };
    let body = providers::encode_embeddings(ctx, req)?;
    let resp = send(client, up, model.embed_url.as_ref(), body.into(), &[], hop, deadlines).await?;
    let bytes = read_body(resp, deadlines, up.max_response_bytes).await?;
    read(up, &bytes, providers::decode_embeddings(up.kind, &bytes, req))
}

/// Sends one request and waits for the response headers; the caller's request id goes along so
/// provider-side logs can be matched.
async fn send(
    client: &Client,
    up: &Upstream,
    target: Option<&http::Uri>,
    body: ax_wire::json::Payload,
    headers: &[(http::HeaderName, http::HeaderValue)],
    hop: Hop<'_>,
    deadlines: Deadlines,
) -> Result<Response, AxError> {
    let Some(target) = target else { return Err(AxError::Internal) };
    let fut = client.post_json(target, body, headers, hop);
    let (end, late) = deadlines.step_end(deadlines.first_byte, AxError::UpstreamFirstByteTimeout);
    let resp = timeout_at(end, fut).await.map_err(|_| late)?.map_err(|e| {
        tracing::warn!(upstream = %up.name, error = %e, "upstream request failed");
        match e {
            transport::Error::ConnectTimeout => AxError::UpstreamConnectTimeout,
            transport::Error::Connect(_) => AxError::UpstreamConnect,
            // Typically a connection reset or closed before any response byte.
            transport::Error::Request(_) => AxError::UpstreamFailed(String::new()),
        }
    })?;
    let status = resp.status;
    if status.is_success() {
        return Ok(resp);
    }
    let retry_after = retry_after(&resp.headers);
    let bytes = read_body(resp, deadlines, MAX_ERROR_BODY_BYTES).await.unwrap_or_default();
    let err = AxError::from(providers::decode_error(up.kind, status.as_u16(), &bytes, retry_after));
    log_upstream_error(up, status.as_u16(), &bytes, &err);
    Err(err)
}

/// `retry-after-ms` (OpenAI) or `retry-after` in seconds; HTTP dates are ignored.
fn retry_after(h: &http::HeaderMap) -> Option<Duration> {
    let num =
        |name: &str| h.get(name)?.to_str().ok()?.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0);
    num("retry-after-ms")
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .or_else(|| num("retry-after").map(Duration::from_secs_f64))
}

/// Reads a whole body chunk by chunk, so a body that stops arriving hits the idle timeout. A body
/// over `max` bytes is refused (`upstream_response_too_large`) as soon as that is known: from its
/// declared length, or once that much has arrived; dropping the response closes its connection.
/// The chunks are kept as they came and joined once, at the end, into a buffer of the body's
/// exact size: a body that arrived in one piece (the usual answer) is not copied at all, and a
/// large one is not copied into ever-doubling buffers (each left behind freed, but resident,
/// until the allocator purges it: 100 MiB of RSS for one 32 MiB answer, measured).
async fn read_body(mut resp: Response, deadlines: Deadlines, max: usize) -> Result<bytes::Bytes, AxError> {
    if resp.remaining_length().is_some_and(|n| n > max as u64) {
        return Err(AxError::UpstreamResponseTooLarge(max));
    }
    // The first chunk apart: the usual one-piece answer allocates nothing here.
    let mut first: Option<bytes::Bytes> = None;
    let mut more: Vec<bytes::Bytes> = Vec::new();
    let mut total = 0;
    loop {
        // What has arrived already is taken without arming a timer (or reading the clock).
        let chunk = match resp.buffered_chunk() {
            Some(ready) => ready,
            None => {
                let (end, late) = deadlines.step_end(deadlines.idle, AxError::UpstreamIdleTimeout);
                timeout_at(end, resp.chunk()).await.map_err(|_| late)?
            }
        };
        let chunk = chunk.map_err(|e| {
            tracing::warn!(error = %e, "upstream body failed");
            AxError::UpstreamStreamTruncated
        })?;
        let Some(c) = chunk else { break };
        total += c.len();
        if total > max {
            return Err(AxError::UpstreamResponseTooLarge(max));
        }
        if first.is_none() {
            first = Some(c);
        } else {
            more.push(c);
        }
    }
    let Some(first) = first else { return Ok(bytes::Bytes::new()) };
    if more.is_empty() {
        return Ok(first);
    }
    let mut body = BytesMut::with_capacity(total);
    body.extend_from_slice(&first);
    for c in more {
        body.extend_from_slice(&c);
    }
    Ok(body.freeze())
}

fn log_upstream_error(up: &Upstream, status: u16, body: &[u8], err: &AxError) {
    let shown = &body[..body.len().min(LOGGED_BODY_BYTES)];
    tracing::warn!(
        upstream = %up.name,
        provider = up.kind.as_str(),
        upstream_status = status,
        code = err.code(),
        upstream_body = %String::from_utf8_lossy(shown),
        "upstream error"
    );
}

// ---------------------------------------------------------------------------------------------
// Upstream streams

/// The stream is over before its end (timed out): the upstream response is dropped (closing its
/// connection), what the decoder had read of the answer kept.
fn end(source: &mut Source, facts: &mut AnswerFacts) {
    if let Source::Http { mut decoder, .. } = std::mem::replace(source, Source::Ended) {
        *facts = decoder.facts();
    }
}

/// The canonical items of one upstream stream, pulled one at a time under the attempt's idle and
/// total deadlines. Dropping it drops the upstream response, which closes the connection: a client
/// disconnect cancels the upstream call.
pub struct UpstreamStream {
    source: Source,
    deadlines: Deadlines,
    /// Made on the first pull and kept for the whole stream: a stream of thousands of events
    /// arms no timer per event (two per event used to cost a timer-wheel insert and removal each).
    timers: Option<Timers>,
    /// The decoder's facts of the answer, kept when its source ends.
    facts: AnswerFacts,
    /// The answer so far, for a request whose span carries its content.
    recording: Option<Box<Recording>>,
    /// The check of strict tools' calls, for an upstream without a strict mode of its own.
    strict: Option<Box<ax_wire::strict::StrictTools>>,
}

/// A stream's answer put back together for the request's span (`record_content`).
struct Recording {
    transcript: Transcript,
    /// Forwarded events also go through the upstream's canonical decoder, whose chunks are kept.
    shadow: Option<StreamDecoder>,
    /// Forwarded Responses events: the last one carries the whole response.
    responses: bool,
}

impl Recording {
    /// A forwarded event, read for its content.
    fn event(&mut self, ev: &ax_wire::sse::SseEvent) {
        if let Some(d) = &mut self.shadow {
            if let Ok(Some(StreamItem::Chunk(c))) = d.on_event(ev) {
                self.transcript.chunk(&c);
            }
        } else if self.responses && ev.data.contains("\"response.") && ev.data.contains("\"output\"") {
            if let Some(r) = ax_wire::responses::upstream::responses_content(ev.data.as_bytes()) {
                if !r.choices.iter().all(|c| c.content.is_none() && c.tool_calls.is_empty()) {
                    self.transcript.whole(r);
                }
            }
        }
    }
}

struct Timers {
    /// The attempt's deadline.
    deadline: Pin<Box<Sleep>>,
    /// Fires no earlier than `idle` after the current pull began; when it fires early (a later
    /// pull moved the mark) it is re-armed, so it is reset about once per idle period, not per event.
    idle: Pin<Box<Sleep>>,
    /// When the current pull began: the idle limit counts from here.
    pull_started: Instant,
}

#[expect(
    clippy::large_enum_variant,
    reason = "it lives in the stream's one Box; boxing the answer too would be a second allocation per stream"
)]
enum Source {
    Http {
        resp: Response,
        sse: SseDecoder,
        decoder: StreamDecoder,
        state: HttpState,
    },
    Mock(mock::MockStream),
    /// Timed out: the upstream response was dropped (closing its connection).
    Ended,
}

#[derive(PartialEq, Eq)]
enum HttpState {
    Reading,
    /// The body ended; the decoder's end-of-stream verdict is next.
    Eof,
    Over,
}

impl UpstreamStream {
    fn new(source: Source, deadlines: Deadlines) -> Self {
        Self { source, deadlines, timers: None, facts: AnswerFacts::default(), recording: None, strict: None }
    }

    /// Keeps the answer as it streams, for the request's span (a tenant that records content);
    /// `kind` is the upstream's, whose decoder reads forwarded events for it.
    pub fn record_content(&mut self, kind: ProviderKind) {
        let (shadow, responses) = match &self.source {
            Source::Http { decoder: StreamDecoder::OpenAiForward(_) | StreamDecoder::AnthropicForward(_), .. } => {
                (StreamDecoder::new(kind), false)
            }
            Source::Http { decoder: StreamDecoder::ResponsesForward(_), .. } => (None, true),
            _ => (None, false),
        };
        self.recording = Some(Box::new(Recording { transcript: Transcript::default(), shadow, responses }));
    }

    /// The answer so far, when `record_content` asked for it.
    pub fn transcript(&self) -> Option<&Transcript> {
        self.recording.as_ref().map(|r| &r.transcript)
    }

    /// The answer's id and finish reasons, as far as the stream got (`gen_ai.response.*`).
    pub fn facts(&mut self) -> AnswerFacts {
        match &mut self.source {
            Source::Http { decoder, .. } => decoder.facts(),
            Source::Mock(m) => m.facts(),
            Source::Ended => std::mem::take(&mut self.facts),
        }
    }

    /// The next canonical item; `None` once the stream is over.
    pub async fn next(&mut self) -> Option<Result<StreamItem, AxError>> {
        let deadlines = self.deadlines;
        let now = Instant::now();
        let Self { source, timers, facts, recording, strict, .. } = self;
        let t = timers.get_or_insert_with(|| Timers {
            deadline: Box::pin(sleep_until(deadlines.deadline)),
            idle: Box::pin(sleep_until(now + deadlines.idle)),
            pull_started: now,
        });
        t.pull_started = now;
        loop {
            tokio::select! {
                biased;
                item = Self::next_item(source, facts, recording, strict) => return item,
                () = t.deadline.as_mut() => {
                    end(source, facts);
                    return Some(Err(AxError::UpstreamTimeout));
                }
                () = t.idle.as_mut() => {
                    let quiet_until = t.pull_started + deadlines.idle;
                    if Instant::now() >= quiet_until {
                        end(source, facts);
                        return Some(Err(AxError::UpstreamIdleTimeout));
                    }
                    // Armed for an earlier pull: count from this one. (Cancelling the pull here
                    // loses nothing: a body read that has not completed has taken no data.)
                    t.idle.as_mut().reset(quiet_until);
                }
            }
        }
    }

    /// The next item, recorded when the answer is, and checked when its tools are strict (a call
    /// that breaks its schema ends the stream as an error).
    async fn next_item(
        source: &mut Source,
        facts: &mut AnswerFacts,
        recording: &mut Option<Box<Recording>>,
        strict: &mut Option<Box<ax_wire::strict::StrictTools>>,
    ) -> Option<Result<StreamItem, AxError>> {
        let item = Self::next_decoded(source, facts, recording).await;
        if let (Some(s), Some(Ok(StreamItem::Chunk(c)))) = (strict.as_mut(), &item) {
            if let Err(e) = s.check_chunk(c) {
                end(source, facts);
                return Some(Err(e.into()));
            }
        }
        if let (Some(r), Some(Ok(StreamItem::Chunk(c)))) = (recording.as_mut(), &item) {
            if r.shadow.is_none() {
                r.transcript.chunk(c);
            }
        }
        item
    }

    async fn next_decoded(
        source: &mut Source,
        facts: &mut AnswerFacts,
        recording: &mut Option<Box<Recording>>,
    ) -> Option<Result<StreamItem, AxError>> {
        let (resp, sse, decoder, state) = match source {
            Source::Mock(m) => return m.next().await,
            Source::Ended => return None,
            Source::Http { resp, sse, decoder, state } => (resp, sse, decoder, state),
        };
        loop {
            match state {
                HttpState::Over => return None,
                HttpState::Eof => {
                    *state = HttpState::Over;
                    return Some(decoder.on_eof().map_err(AxError::from));
                }
                HttpState::Reading => {}
            }
            match sse.next_event() {
                Ok(Some(ev)) => match decoder.on_event(&ev).inspect(|_| {
                    if let Some(r) = recording.as_mut() {
                        r.event(&ev);
                    }
                }) {
                    Ok(Some(item)) => {
                        if item == StreamItem::Done {
                            // The rest of the body is read in the background: its connection is
                            // kept for the next request.
                            if let Source::Http { resp, mut decoder, .. } = std::mem::replace(source, Source::Ended) {
                                *facts = decoder.facts();
                                resp.finish_in_background();
                            }
                        }
                        return Some(Ok(item));
                    }
                    Ok(None) => continue,
                    Err(e) => {
                        *state = HttpState::Over;
                        tracing::warn!(code = ax_wire::Reported::code(&e), upstream_event = %truncate(&ev.data), "upstream stream error");
                        return Some(Err(e.into()));
                    }
                },
                Ok(None) => {}
                Err(ax_wire::sse::SseError::TooLarge(max)) => {
                    *state = HttpState::Over;
                    tracing::warn!(limit = max, "upstream stream event over max_event_bytes");
                    return Some(Err(AxError::UpstreamResponseTooLarge(max)));
                }
                Err(e) => {
                    *state = HttpState::Over;
                    tracing::warn!(error = %e, "upstream stream is malformed");
                    return Some(Err(AxError::UpstreamInvalidResponse));
                }
            }
            match resp.chunk().await {
                Ok(Some(bytes)) => sse.push(&bytes),
                Ok(None) => {
                    *state = HttpState::Eof;
                    match sse.finish() {
                        Ok(Some(ev)) => match decoder.on_event(&ev) {
                            Ok(Some(item)) => return Some(Ok(item)),
                            Ok(None) => {}
                            Err(e) => {
                                *state = HttpState::Over;
                                return Some(Err(e.into()));
                            }
                        },
                        Ok(None) => {}
                        Err(_) => {
                            *state = HttpState::Over;
                            return Some(Err(AxError::UpstreamInvalidResponse));
                        }
                    }
                }
                Err(e) => {
                    *state = HttpState::Over;
                    tracing::warn!(error = %e, "upstream stream failed");
                    return Some(Err(AxError::UpstreamStreamTruncated));
                }
            }
        }
    }
}

fn truncate(s: &str) -> &str {
    let mut end = s.len().min(LOGGED_BODY_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deadlines(deadline_in: Duration) -> Deadlines {
        Deadlines {
            first_byte: Duration::from_secs(5),
            idle: Duration::from_secs(5),
            deadline: Instant::now() + deadline_in,
        }
    }

    #[test]
    fn a_step_ends_at_its_own_limit_when_that_comes_first() {
        let l = deadlines(Duration::from_secs(60));
        let before = Instant::now();
        let (end, err) = l.step_end(l.first_byte, AxError::UpstreamFirstByteTimeout);
        assert_eq!(err.code(), AxError::UpstreamFirstByteTimeout.code());
        assert!(end >= before + l.first_byte && end < l.deadline);
        let (_, err) = l.step_end(l.idle, AxError::UpstreamIdleTimeout);
        assert_eq!(err.code(), AxError::UpstreamIdleTimeout.code());
    }

    #[test]
    fn a_step_ends_at_the_deadline_when_that_comes_first() {
        let l = deadlines(Duration::from_secs(1));
        let (end, err) = l.step_end(l.first_byte, AxError::UpstreamFirstByteTimeout);
        assert_eq!(err.code(), AxError::UpstreamTimeout.code());
        assert_eq!(end, l.deadline);
    }
}
