//! OpenAI Chat Completions and every compatible API (DeepSeek, Qwen, vLLM, Ollama, Azure).
//!
//! The upstream side: canonical requests encoded for an OpenAI-compatible server, its answers,
//! streams and errors decoded. Callers who speak OpenAI are answered by `openai::caller`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::adapter::{embedded_error, error_body, Ctx};
use crate::canonical::{
    AnswerFacts, ChatRequest, ChatResponse, Choice, Chunk, ChunkChoice, Content, ContentPart, EmbeddingsRequest,
    EmbeddingsResponse, FinishReason, ImageUrl, Message, RawEvent, ReasoningEffort, ResponseFormat, Role, Stop,
    StreamItem, StreamOptions, Tool, ToolCall, ToolCallDelta, ToolChoice, Usage,
};
use crate::json::read::IsError;
use crate::json::write::{copied, write_json, write_str, write_text};
use crate::json::{Payload, PayloadWriter};
use crate::sse::SseEvent;
use crate::Error;

// ---------------------------------------------------------------------------------------------
// Upstream request

/// The request's fields after `model` and `messages`, which are written by hand.
#[derive(Serialize)]
struct OpenAiRest<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop: Option<&'a Stop>,
    #[serde(skip_serializing_if = "Option::is_none")]
    n: Option<u32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a [Tool]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'a ToolChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<&'a ResponseFormat>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    logit_bias: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_logprobs: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<ReasoningEffort>,
    #[serde(skip_serializing_if = "Option::is_none")]
    store: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    service_tier: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    safety_identifier: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    verbosity: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    modalities: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prediction: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    web_search_options: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    audio: Option<&'a Value>,
}

/// One message as canonical `Message` serializes it, its texts written as `write_text` writes
/// them (a caller's long literal a piece of the body of its own). A tool message's images are
/// not written: OpenAI's tool messages hold only text, so its text marks them
/// (`Content::text_marking_images`) and `write_tool_images` sends them after the results.
fn write_message(out: &mut PayloadWriter, m: &Message) -> Result<(), Error> {
    out.buf.extend_from_slice(b"{\"role\":\"");
    out.buf.extend_from_slice(m.role.as_str().as_bytes());
    out.buf.push(b'"');
    match &m.content {
        None => {}
        Some(c @ Content::Parts(_)) if m.role == Role::Tool && c.has_images() => {
            out.buf.extend_from_slice(b",\"content\":");
            write_json(&mut out.buf, c.text_marking_images().as_ref())?;
        }
        Some(Content::Text(t)) => {
            out.buf.extend_from_slice(b",\"content\":");
            write_text(out, &t.out())?;
        }
        Some(Content::Parts(parts)) => {
            out.buf.extend_from_slice(b",\"content\":[");
            for (i, p) in parts.iter().enumerate() {
                if i > 0 {
                    out.buf.push(b',');
                }
                write_part(out, p)?;
            }
            out.buf.push(b']');
        }
    }
    // In `Message`'s order; a field that is not there is not written.
    let string = |out: &mut PayloadWriter, key: &[u8], v: Option<&str>| match v {
        Some(v) => {
            out.buf.extend_from_slice(key);
            write_json(&mut out.buf, v)
        }
        None => Ok(()),
    };
    string(out, b",\"name\":", m.name.as_deref())?;
    if let Some(calls) = &m.tool_calls {
        out.buf.extend_from_slice(b",\"tool_calls\":");
        write_json(&mut out.buf, calls)?;
    }
    string(out, b",\"tool_call_id\":", m.tool_call_id.as_deref())?;
    string(out, b",\"refusal\":", m.refusal.as_deref())?;
    out.buf.push(b'}');
    Ok(())
}

fn write_part(out: &mut PayloadWriter, p: &ContentPart) -> Result<(), Error> {
    match p {
        ContentPart::Text { text } => {
            out.buf.extend_from_slice(b"{\"type\":\"text\",\"text\":");
            write_text(out, &text.out())?;
            out.buf.push(b'}');
            Ok(())
        }
        ContentPart::ImageUrl { image_url } => {
            out.buf.extend_from_slice(b"{\"type\":\"image_url\",\"image_url\":");
            write_image_url(&mut out.buf, image_url)?;
            out.buf.push(b'}');
            Ok(())
        }
    }
}

/// `{"url":…,"detail":…}`, the URL (a `data:` URL of base64, mostly) through `write_str`.
fn write_image_url(out: &mut Vec<u8>, image_url: &ImageUrl) -> Result<(), Error> {
    out.extend_from_slice(b"{\"url\":");
    write_str(out, &image_url.url)?;
    if let Some(detail) = &image_url.detail {
        out.extend_from_slice(b",\"detail\":");
        write_json(out, detail)?;
    }
    out.push(b'}');
    Ok(())
}

/// The images a run of tool messages returned, as one user message after the run (OpenAI wants
/// every tool result right after the call that asked for it, so they cannot go between them):
/// each tool's images under a line naming its call, in order.
fn write_tool_images(out: &mut PayloadWriter, results: &[&Message]) -> Result<(), Error> {
    out.buf.extend_from_slice(b"{\"role\":\"user\",\"content\":[");
    for (i, m) in results.iter().enumerate() {
        if i > 0 {
            out.buf.push(b',');
        }
        let id = m.tool_call_id.as_deref().unwrap_or_default();
        out.buf.extend_from_slice(b"{\"type\":\"text\",\"text\":");
        write_json(&mut out.buf, &format!("Images returned by tool call {id}:"))?;
        out.buf.push(b'}');
        for image_url in m.content.iter().flat_map(Content::images) {
            out.buf.extend_from_slice(b",{\"type\":\"image_url\",\"image_url\":");
            write_image_url(&mut out.buf, image_url)?;
            out.buf.push(b'}');
        }
    }
    out.buf.extend_from_slice(b"]}");
    Ok(())
}

/// The request body: the head and the conversation by hand (through serde, each message's
/// fields cost ~1k instructions, and a caller's literal a UTF-8 check and a copy), a caller's long
/// literal sent as the slice of its body it is (a `Payload` in pieces); the other fields through
/// serde, their `{` turned into a `,`.
pub fn encode_chat(ctx: Ctx<'_>, r: &ChatRequest) -> Result<Payload, Error> {
    let copied = r.messages.iter().map(message_copied).sum::<usize>();
    let mut out = PayloadWriter::new(crate::json::write::body_buffer(copied));
    out.buf.extend_from_slice(b"{\"model\":");
    write_json(&mut out.buf, ctx.model)?;
    out.buf.extend_from_slice(b",\"messages\":[");
    // Tool messages of the current run whose images wait for the run's end.
    let mut with_images: Vec<&Message> = Vec::new();
    for (i, m) in r.messages.iter().enumerate() {
        if m.role != Role::Tool && !with_images.is_empty() {
            out.buf.push(b',');
            write_tool_images(&mut out, &with_images)?;
            with_images.clear();
        }
        if i > 0 {
            out.buf.push(b',');
        }
        write_message(&mut out, m)?;
        if m.role == Role::Tool && m.content.as_ref().is_some_and(Content::has_images) {
            with_images.push(m);
        }
    }
    if !with_images.is_empty() {
        out.buf.push(b',');
        write_tool_images(&mut out, &with_images)?;
    }
    out.buf.push(b']');
    let rest = OpenAiRest {
        temperature: r.temperature,
        top_p: r.top_p,
        max_tokens: r.max_tokens,
        max_completion_tokens: r.max_completion_tokens,
        stop: r.stop.as_ref(),
        n: r.n,
        stream: r.stream,
        // Always ask for usage on streams: metering needs it even when the caller did not.
        stream_options: r.stream.then_some(StreamOptions { include_usage: true }),
        tools: r.tools.as_deref(),
        tool_choice: r.tool_choice.as_ref(),
        parallel_tool_calls: r.parallel_tool_calls,
        response_format: r.response_format.as_ref(),
        seed: r.seed,
        user: r.user.as_deref(),
        presence_penalty: r.presence_penalty,
        frequency_penalty: r.frequency_penalty,
        logit_bias: r.logit_bias.as_ref(),
        logprobs: r.logprobs,
        top_logprobs: r.top_logprobs,
        reasoning_effort: r.reasoning_effort.filter(|_| ctx.reasoning),
        store: r.store,
        metadata: r.metadata.as_ref(),
        service_tier: r.service_tier.as_deref(),
        prompt_cache_key: r.prompt_cache_key.as_deref(),
        safety_identifier: r.safety_identifier.as_deref(),
        verbosity: r.verbosity.as_deref(),
        modalities: r.modalities.as_deref(),
        prediction: r.prediction.as_ref(),
        web_search_options: r.web_search_options.as_ref(),
        audio: r.audio.as_ref(),
    };
    let at = out.buf.len();
    write_json(&mut out.buf, &rest)?;
    if out.buf.len() - at <= 2 {
        out.buf.truncate(at); // `{}`: nothing more
    } else {
        out.buf[at] = b',';
        out.buf.pop(); // its `}`, written after the extra fields
    }
    // Fields ax does not know, for an upstream that passes them through (the pipeline left only
    // those): written after the ones it knows, as the caller wrote them.
    for (name, raw) in &r.extra {
        out.buf.push(b',');
        write_json(&mut out.buf, name.as_str())?;
        out.buf.push(b':');
        out.buf.extend_from_slice(raw.get().as_bytes());
    }
    out.buf.push(b'}');
    Ok(out.finish())
}

/// The bytes of a message's texts `write_text` copies into the body's buffer (about).
fn message_copied(m: &Message) -> usize {
    match &m.content {
        None => 0,
        Some(Content::Text(t)) => copied(&t.out()),
        Some(Content::Parts(parts)) => parts
            .iter()
            .map(|p| match p {
                ContentPart::Text { text } => copied(&text.out()),
                ContentPart::ImageUrl { image_url } => image_url.url.len(),
            })
            .sum(),
    }
}

// ---------------------------------------------------------------------------------------------
// Upstream response

#[derive(Deserialize)]
struct OpenAiResponse {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    created: Option<u64>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<OpenAiChoice>,
    #[serde(default)]
    usage: Option<OpenAiUsage>,
    #[serde(default)]
    system_fingerprint: Option<String>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    object: IsError,
}

#[derive(Deserialize)]
struct OpenAiChoice {
    #[serde(default)]
    index: u32,
    message: OpenAiMessage,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    logprobs: Option<Value>,
}

#[derive(Deserialize)]
struct OpenAiMessage {
    #[serde(default)]
    content: Option<String>,
    /// DeepSeek, Qwen, vLLM and most OpenAI-compatible reasoning servers; some write
    /// `reasoning` instead, newer vLLM both.
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<Reasoning>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCall>>,
}

/// A `reasoning` field: text (vLLM, OpenRouter) or an object some servers send (ignored).
#[derive(Deserialize)]
#[serde(untagged)]
enum Reasoning {
    Text(String),
    Other(serde::de::IgnoredAny),
}

impl Reasoning {
    /// The reasoning text of a message or delta: `reasoning_content`, else a text `reasoning`.
    fn text(content: Option<String>, reasoning: Option<Reasoning>) -> Option<String> {
        content
            .or(match reasoning {
                Some(Reasoning::Text(t)) => Some(t),
                _ => None,
            })
            .filter(|t| !t.is_empty())
    }
}

#[derive(Deserialize, Default)]
struct OpenAiUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
    /// DeepSeek reports cache hits here instead.
    #[serde(default)]
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
    /// OpenRouter's (and ax's own) count of prompt tokens written to a cache.
    #[serde(default)]
    cache_write_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl From<OpenAiUsage> for Usage {
    fn from(u: OpenAiUsage) -> Self {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u
                .prompt_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens)
                .or(u.prompt_cache_hit_tokens)
                .unwrap_or(0),
            cache_write_tokens: u.prompt_tokens_details.as_ref().and_then(|d| d.cache_write_tokens).unwrap_or(0),
            cache_write_1h_tokens: 0,
            reasoning_tokens: u.completion_tokens_details.and_then(|d| d.reasoning_tokens).unwrap_or(0),
        }
    }
}

pub fn finish_reason(raw: &str) -> FinishReason {
    match raw {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Unmapped(other.to_owned()),
    }
}

pub fn decode_chat(body: &[u8]) -> Result<ChatResponse, Error> {
    let r: OpenAiResponse = crate::json::read::from_json(body).map_err(|_| error_body(body, embedded_error))?;
    if r.error.is_some() || r.object.0 {
        return Err(error_body(body, embedded_error));
    }
    if r.choices.is_empty() {
        return Err(Error::UpstreamInvalidResponse);
    }
    Ok(ChatResponse {
        id: r.id.unwrap_or_default(),
        created: r.created.unwrap_or(0),
        model: r.model.unwrap_or_default(),
        choices: r
            .choices
            .into_iter()
            .map(|c| Choice {
                index: c.index,
                content: c.message.content,
                refusal: c.message.refusal,
                tool_calls: c.message.tool_calls.unwrap_or_default(),
                finish_reason: c.finish_reason.as_deref().map(finish_reason),
                logprobs: c.logprobs.filter(|l| !l.is_null()),
                reasoning: Reasoning::text(c.message.reasoning_content, c.message.reasoning),
            })
            .collect(),
        usage: r.usage.map(Usage::from),
        system_fingerprint: r.system_fingerprint,
    })
}

pub fn error_code(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let e = v.get("error").filter(|e| e.is_object()).unwrap_or(&v);
    e.get("code").and_then(Value::as_str).or_else(|| e.get("type").and_then(Value::as_str)).map(str::to_owned)
}

// ---------------------------------------------------------------------------------------------
// Upstream stream

#[derive(Deserialize)]
struct OpenAiChunk<'a> {
    #[serde(default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
    id: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    choices: Vec<OpenAiChunkChoice>,
    #[serde(default)]
    usage: Option<OpenAiUsage>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    object: IsError,
}

#[derive(Deserialize)]
struct OpenAiChunkChoice {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    delta: Option<OpenAiDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct OpenAiDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<Reasoning>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<OpenAiToolCallDelta>>,
}

#[derive(Deserialize)]
struct OpenAiToolCallDelta {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<OpenAiFunctionDelta>,
}

#[derive(Deserialize)]
struct OpenAiFunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Debug, Default)]
pub struct StreamState {
    pub finished: bool,
    /// The answer's id and finish reasons, as they come.
    pub facts: AnswerFacts,
}

impl StreamState {
    pub fn on_event(&mut self, ev: &SseEvent) -> Result<Option<StreamItem>, Error> {
        let data = ev.data.trim();
        if data == "[DONE]" {
            return Ok(Some(StreamItem::Done));
        }
        if data.is_empty() {
            return Ok(None);
        }
        let c: OpenAiChunk<'_> = serde_json::from_str(data).map_err(|_| error_body(data.as_bytes(), embedded_error))?;
        if c.error.is_some() || c.object.0 {
            return Err(error_body(data.as_bytes(), embedded_error));
        }
        if let Some(id) = &c.id {
            self.facts.saw_id(id);
        }
        let choices = c
            .choices
            .into_iter()
            .map(|ch| {
                let d = ch.delta.unwrap_or_default();
                let finish = ch.finish_reason.as_deref().map(finish_reason);
                if let Some(f) = &finish {
                    self.finished = true;
                    self.facts.finish_reasons.push(f.clone());
                }
                ChunkChoice {
                    index: ch.index,
                    content: d.content,
                    reasoning: Reasoning::text(d.reasoning_content, d.reasoning),
                    refusal: d.refusal,
                    tool_calls: d
                        .tool_calls
                        .unwrap_or_default()
                        .into_iter()
                        .map(|t| {
                            let (name, arguments) = match t.function {
                                Some(f) => (f.name, f.arguments.unwrap_or_default()),
                                None => (None, String::new()),
                            };
                            ToolCallDelta { index: t.index, id: t.id, name, arguments }
                        })
                        .collect(),
                    finish_reason: finish,
                }
            })
            .filter(|ch| !ch.is_empty())
            .collect::<Vec<_>>();
        let usage = c.usage.map(Usage::from);
        if choices.is_empty() && usage.is_none() {
            return Ok(None); // e.g. the role-only first chunk: ax sends its own
        }
        Ok(Some(StreamItem::Chunk(Chunk { choices, usage })))
    }
}

// ---------------------------------------------------------------------------------------------
// Forwarding: an OpenAI caller's answer as the upstream sent it (the same-protocol fast path)

/// The finish reasons a Chat Completions caller knows; any other is rewritten (through the
/// canonical model: mapped, or kept as `provider_finish_reason`).
fn standard_finish(reason: &str) -> bool {
    matches!(reason, "stop" | "length" | "tool_calls" | "content_filter")
}

/// What the gateway reads of an answer or a stream event before forwarding it: nothing of the
/// text. `C`: what it reads of each choice (`FinishGlance` of a whole answer, `ChoiceGlance` of
/// an event).
#[derive(Deserialize)]
#[serde(bound(deserialize = "C: Deserialize<'de>"))]
struct AnswerGlance<'a, C> {
    #[serde(default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
    id: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    created: Option<u64>,
    #[serde(default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
    model: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    choices: Vec<C>,
    #[serde(default)]
    usage: Option<OpenAiUsage>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    object: IsError,
}

/// A whole answer's choice: its finish reason.
#[derive(Deserialize)]
struct FinishGlance<'a> {
    #[serde(default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
    finish_reason: Option<std::borrow::Cow<'a, str>>,
}

/// A stream event's choice: its finish reason and whether its delta carries anything.
#[derive(Deserialize)]
struct ChoiceGlance<'a> {
    #[serde(default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
    finish_reason: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    delta: Option<DeltaGlance<'a>>,
}

#[derive(Deserialize)]
struct DeltaGlance<'a> {
    #[serde(default, borrow)]
    content: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    tool_calls: Option<&'a serde_json::value::RawValue>,
}

impl DeltaGlance<'_> {
    /// Text or tool calls in it (what `ChunkChoice::is_empty` counts as content).
    fn carries(&self) -> bool {
        let some =
            |v: Option<&serde_json::value::RawValue>, empty: &[&str]| v.is_some_and(|v| !empty.contains(&v.get()));
        some(self.content, &["\"\"", "null"]) || some(self.tool_calls, &["[]", "null"])
    }
}

/// A 2xx answer to forward as it came: `Ok(Some(usage))`; `Ok(None)` when it must be rewritten
/// first (something left out that callers get filled in, or a finish reason they do not know);
/// the upstream's error when it carries one (HTTP 200 is not success). Its id and finish reasons
/// go into `facts` when asked for (a traced request).
///
/// Read with sonic-rs (it checks UTF-8 too): its skipping of the message, the bulk of the body,
/// costs ~700 instructions less than serde_json's on a short answer. A stream's events stay with
/// serde_json, for which a one-line event is cheaper.
pub fn forwardable(body: &[u8], facts: Option<&mut AnswerFacts>) -> Result<Option<Option<Usage>>, Error> {
    let r: AnswerGlance<'_, FinishGlance<'_>> =
        sonic_rs::from_slice(body).map_err(|_| error_body(body, embedded_error))?;
    if r.error.is_some() || r.object.0 {
        return Err(error_body(body, embedded_error));
    }
    let filled =
        r.id.as_ref().is_some_and(|i| !i.is_empty()) && r.created.is_some() && r.model.is_some_and(|m| !m.is_empty());
    let known =
        !r.choices.is_empty() && r.choices.iter().all(|c| c.finish_reason.as_deref().is_none_or(standard_finish));
    if let Some(f) = facts {
        f.saw_id(r.id.as_deref().unwrap_or_default());
        f.finish_reasons.extend(r.choices.iter().filter_map(|c| c.finish_reason.as_deref()).map(finish_reason));
    }
    Ok((filled && known).then(|| r.usage.map(Usage::from)))
}

/// An OpenAI stream forwarded to an OpenAI caller: each event as it came, with its usage and
/// the deltas it carries read; one with a finish reason the caller would not know goes through
/// the canonical model instead.
#[derive(Debug, Default)]
pub struct ForwardState {
    inner: StreamState,
}

impl ForwardState {
    pub fn on_event(&mut self, ev: &SseEvent) -> Result<Option<StreamItem>, Error> {
        let data = ev.data.trim();
        if data == "[DONE]" {
            return Ok(Some(StreamItem::Done));
        }
        if data.is_empty() {
            return Ok(None);
        }
        let c: AnswerGlance<'_, ChoiceGlance<'_>> =
            serde_json::from_str(data).map_err(|_| error_body(data.as_bytes(), embedded_error))?;
        if c.error.is_some() || c.object.0 {
            return Err(error_body(data.as_bytes(), embedded_error));
        }
        if c.choices.iter().any(|ch| ch.finish_reason.as_deref().is_some_and(|f| !standard_finish(f))) {
            return self.inner.on_event(ev);
        }
        if let Some(id) = &c.id {
            self.inner.facts.saw_id(id);
        }
        for f in c.choices.iter().filter_map(|ch| ch.finish_reason.as_deref()) {
            self.inner.finished = true;
            self.inner.facts.finish_reasons.push(finish_reason(f));
        }
        let deltas = c.choices.iter().filter(|ch| ch.delta.as_ref().is_some_and(DeltaGlance::carries)).count();
        Ok(Some(StreamItem::Raw(RawEvent {
            bytes: crate::sse::forward_event(ev),
            usage_only: c.choices.is_empty(),
            usage: c.usage.map(Usage::from),
            deltas: u32::try_from(deltas).unwrap_or(u32::MAX),
            // `[DONE]` follows: the facts go there.
            finishes: false,
        })))
    }

    pub fn finished(&self) -> bool {
        self.inner.finished
    }

    pub fn facts(&mut self) -> AnswerFacts {
        std::mem::take(&mut self.inner.facts)
    }
}

// ---------------------------------------------------------------------------------------------
// Embeddings (upstream)

#[derive(Serialize)]
struct OpenAiEmbeddingsRequest<'a> {
    model: &'a str,
    input: &'a crate::canonical::EmbeddingInput,
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
}

pub fn encode_embeddings(ctx: Ctx<'_>, r: &EmbeddingsRequest) -> Result<Vec<u8>, Error> {
    // Floats are always requested upstream; base64 is produced on egress when the caller asks.
    let body = OpenAiEmbeddingsRequest {
        model: ctx.model,
        input: &r.input,
        dimensions: r.dimensions,
        user: r.user.as_deref(),
    };
    serde_json::to_vec(&body).map_err(|_| Error::Internal)
}

#[derive(Deserialize)]
struct OpenAiEmbeddingsResponse {
    #[serde(default)]
    data: Vec<OpenAiEmbedding>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    object: IsError,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<OpenAiUsage>,
}

#[derive(Deserialize)]
struct OpenAiEmbedding {
    #[serde(default)]
    index: usize,
    embedding: Vec<f32>,
}

pub fn decode_embeddings(body: &[u8]) -> Result<EmbeddingsResponse, Error> {
    let mut r: OpenAiEmbeddingsResponse =
        crate::json::read::from_json(body).map_err(|_| error_body(body, embedded_error))?;
    if r.error.is_some() || r.object.0 || r.data.is_empty() {
        return Err(error_body(body, embedded_error));
    }
    r.data.sort_by_key(|e| e.index);
    Ok(EmbeddingsResponse {
        model: r.model.unwrap_or_default(),
        data: r.data.into_iter().map(|e| e.embedding).collect(),
        prompt_tokens: r.usage.map_or(0, |u| u.prompt_tokens),
    })
}
