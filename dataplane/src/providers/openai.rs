//! OpenAI Chat Completions and every compatible API (DeepSeek, Qwen, vLLM, Ollama, Azure).
//!
//! Both directions live here because it is one wire format: decoding upstream answers into the
//! canonical model, and encoding canonical answers for ax's callers (`encode_response`,
//! `ChunkEncoder`, `encode_embeddings_response`).

use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{classify, error_body, status_of_error_type, Ctx, IsError};
use crate::canonical::{
    ChatRequest, ChatResponse, Choice, Chunk, ChunkChoice, EmbeddingsRequest, EmbeddingsResponse, EncodingFormat,
    FinishReason, Message, ResponseFormat, Stop, StreamItem, StreamOptions, Tool, ToolCall, ToolCallDelta, ToolChoice,
    Usage,
};
use crate::error::AxError;
use crate::upstream::sse::SseEvent;

// ---------------------------------------------------------------------------------------------
// Upstream request

#[derive(Serialize)]
struct OpenAiRequest<'a> {
    model: &'a str,
    messages: &'a [Message],
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
}

pub fn encode_chat(ctx: Ctx<'_>, r: &ChatRequest) -> Result<Vec<u8>, AxError> {
    let body = OpenAiRequest {
        model: &ctx.model.name,
        messages: &r.messages,
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
    };
    serde_json::to_vec(&body).map_err(|_| AxError::Internal)
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
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCall>>,
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
                .and_then(|d| d.cached_tokens)
                .or(u.prompt_cache_hit_tokens)
                .unwrap_or(0),
            cache_write_tokens: 0,
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

/// An `error` object (or vLLM's `"object":"error"`) inside a 2xx body or stream event.
fn embedded_error(v: &Value) -> Option<AxError> {
    let err = match v.get("error") {
        Some(e) if e.is_object() => e,
        Some(Value::String(_)) => v,
        _ if v.get("object").and_then(Value::as_str) == Some("error") => v,
        _ => return None,
    };
    let code = err.get("code");
    let status = match code {
        Some(Value::Number(n)) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        Some(Value::String(s)) => s.parse::<u16>().ok(),
        _ => None,
    };
    let code_str = code.and_then(Value::as_str).or_else(|| err.get("type").and_then(Value::as_str));
    let status = status.unwrap_or_else(|| code_str.map_or(500, status_of_error_type));
    Some(classify(status, code_str))
}

pub fn decode_chat(body: &[u8]) -> Result<ChatResponse, AxError> {
    let r: OpenAiResponse = super::from_json(body).map_err(|_| error_body(body, embedded_error))?;
    if r.error.is_some() || r.object.0 {
        return Err(error_body(body, embedded_error));
    }
    if r.choices.is_empty() {
        return Err(AxError::UpstreamInvalidResponse);
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
            })
            .collect(),
        usage: r.usage.map(Usage::from),
        system_fingerprint: r.system_fingerprint,
    })
}

/// Fills what the upstream left out of a decoded answer: an id made from the request's own, the
/// time of the answer as `created`, the upstream model's name.
pub fn fill_response(r: &mut ChatResponse, request_id: &str, model: &str) {
    if r.id.is_empty() {
        r.id = format!("chatcmpl-{request_id}");
    }
    if r.created == 0 {
        r.created = crate::canonical::unix_now();
    }
    if r.model.is_empty() {
        r.model = model.to_owned();
    }
}

pub fn error_code(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let e = v.get("error").filter(|e| e.is_object()).unwrap_or(&v);
    e.get("code").and_then(Value::as_str).or_else(|| e.get("type").and_then(Value::as_str)).map(str::to_owned)
}

// ---------------------------------------------------------------------------------------------
// Upstream stream

#[derive(Deserialize)]
struct OpenAiChunk {
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
}

impl StreamState {
    pub fn on_event(&mut self, ev: &SseEvent) -> Result<Option<StreamItem>, AxError> {
        let data = ev.data.trim();
        if data == "[DONE]" {
            return Ok(Some(StreamItem::Done));
        }
        if data.is_empty() {
            return Ok(None);
        }
        let c: OpenAiChunk = serde_json::from_str(data).map_err(|_| error_body(data.as_bytes(), embedded_error))?;
        if c.error.is_some() || c.object.0 {
            return Err(error_body(data.as_bytes(), embedded_error));
        }
        let choices = c
            .choices
            .into_iter()
            .map(|ch| {
                let d = ch.delta.unwrap_or_default();
                let finish = ch.finish_reason.as_deref().map(finish_reason);
                self.finished |= finish.is_some();
                ChunkChoice {
                    index: ch.index,
                    content: d.content,
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

pub fn encode_embeddings(ctx: Ctx<'_>, r: &EmbeddingsRequest) -> Result<Vec<u8>, AxError> {
    // Floats are always requested upstream; base64 is produced on egress when the caller asks.
    let body = OpenAiEmbeddingsRequest {
        model: &ctx.model.name,
        input: &r.input,
        dimensions: r.dimensions,
        user: r.user.as_deref(),
    };
    serde_json::to_vec(&body).map_err(|_| AxError::Internal)
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

pub fn decode_embeddings(body: &[u8]) -> Result<EmbeddingsResponse, AxError> {
    let mut r: OpenAiEmbeddingsResponse = super::from_json(body).map_err(|_| error_body(body, embedded_error))?;
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

// ---------------------------------------------------------------------------------------------
// Egress: canonical → OpenAI JSON for ax's callers

#[derive(Serialize)]
struct OutResponse<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<OutChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<&'a Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_fingerprint: Option<&'a str>,
}

#[derive(Serialize)]
struct OutChoice<'a> {
    index: u32,
    message: OutMessage<'a>,
    finish_reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider_finish_reason: Option<&'a str>,
    logprobs: Option<&'a Value>,
}

#[derive(Serialize)]
struct OutMessage<'a> {
    role: &'static str,
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<&'a str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tool_calls: &'a [ToolCall],
}

pub fn encode_response(r: &ChatResponse) -> Vec<u8> {
    let out = OutResponse {
        id: &r.id,
        object: "chat.completion",
        created: r.created,
        model: &r.model,
        choices: r
            .choices
            .iter()
            .map(|c| OutChoice {
                index: c.index,
                message: OutMessage {
                    role: "assistant",
                    content: c.content.as_deref(),
                    refusal: c.refusal.as_deref(),
                    tool_calls: &c.tool_calls,
                },
                finish_reason: c.finish_reason.as_ref().and_then(FinishReason::openai),
                provider_finish_reason: c.finish_reason.as_ref().and_then(FinishReason::raw),
                logprobs: c.logprobs.as_ref(),
            })
            .collect(),
        usage: r.usage.as_ref(),
        system_fingerprint: r.system_fingerprint.as_deref(),
    };
    // Sized for the whole answer up front: growing the buffer copies it each time.
    let text: usize = r
        .choices
        .iter()
        .map(|c| {
            c.content.as_ref().map_or(0, String::len)
                + c.tool_calls.iter().map(|t| t.function.arguments.len() + 64).sum::<usize>()
        })
        .sum();
    let mut buf = Vec::with_capacity(384 + text + text / 8);
    match serde_json::to_writer(&mut buf, &out) {
        Ok(()) => buf,
        Err(_) => Vec::new(),
    }
}

/// Writes `chat.completion.chunk` events for one stream; id, created and model are fixed.
pub struct ChunkEncoder {
    /// `data: {"id":…,"object":"chat.completion.chunk","created":…,"model":…,"choices":`: what
    /// every event of the stream starts with, written once.
    head: Vec<u8>,
}

#[derive(Serialize)]
struct ChunkHead<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
}

#[derive(Serialize)]
struct OutChunkChoice<'a> {
    index: u32,
    delta: OutDelta<'a>,
    finish_reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider_finish_reason: Option<&'a str>,
}

#[derive(Serialize, Default)]
struct OutDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<OutToolCallDelta<'a>>,
}

#[derive(Serialize)]
struct OutToolCallDelta<'a> {
    index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: OutFunctionDelta<'a>,
}

#[derive(Serialize)]
struct OutFunctionDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

impl ChunkEncoder {
    pub fn new(id: &str, created: u64, model: &str) -> Self {
        let mut head = b"data: ".to_vec();
        let fixed = ChunkHead { id, object: "chat.completion.chunk", created, model };
        if serde_json::to_writer(&mut head, &fixed).is_ok() {
            head.pop(); // the closing brace: the event goes on
        }
        head.extend_from_slice(b",\"choices\":");
        Self { head }
    }

    /// One event, in one buffer so it goes out in one write.
    fn event(&self, choices: Vec<OutChunkChoice<'_>>, usage: Option<&Usage>, text: usize) -> Bytes {
        use bytes::BufMut;
        let mut b = bytes::BytesMut::with_capacity(self.head.len() + 96 + text + text / 8 + 128 * choices.len());
        b.put_slice(&self.head);
        let mut w = b.writer();
        let ok = serde_json::to_writer(&mut w, &choices).is_ok()
            && usage.is_none_or(|u| {
                std::io::Write::write_all(&mut w, b",\"usage\":").is_ok() && serde_json::to_writer(&mut w, u).is_ok()
            });
        let mut b = w.into_inner();
        if !ok {
            return Bytes::new(); // writing JSON to memory does not fail
        }
        b.put_slice(b"}\n\n");
        b.freeze()
    }

    /// The opening event: role `assistant`, empty content, for each choice.
    pub fn role(&self, n: u32) -> Bytes {
        let choices = (0..n)
            .map(|index| OutChunkChoice {
                index,
                delta: OutDelta { role: Some("assistant"), content: Some(""), ..OutDelta::default() },
                finish_reason: None,
                provider_finish_reason: None,
            })
            .collect();
        self.event(choices, None, 0)
    }

    pub fn chunk(&self, choices: &[ChunkChoice]) -> Bytes {
        let text = choices
            .iter()
            .map(|c| {
                c.content.as_ref().map_or(0, String::len)
                    + c.tool_calls.iter().map(|t| t.arguments.len() + 64).sum::<usize>()
            })
            .sum();
        let choices = choices
            .iter()
            .map(|c| OutChunkChoice {
                index: c.index,
                delta: OutDelta {
                    role: None,
                    content: c.content.as_deref(),
                    refusal: c.refusal.as_deref(),
                    tool_calls: c
                        .tool_calls
                        .iter()
                        .map(|t| OutToolCallDelta {
                            index: t.index,
                            id: t.id.as_deref(),
                            kind: t.id.as_ref().map(|_| "function"),
                            function: OutFunctionDelta { name: t.name.as_deref(), arguments: &t.arguments },
                        })
                        .collect(),
                },
                finish_reason: c.finish_reason.as_ref().and_then(FinishReason::openai),
                provider_finish_reason: c.finish_reason.as_ref().and_then(FinishReason::raw),
            })
            .collect();
        self.event(choices, None, text)
    }

    /// The usage event sent before `[DONE]` when the caller set `stream_options.include_usage`.
    pub fn usage(&self, u: &Usage) -> Bytes {
        self.event(Vec::new(), Some(u), 0)
    }
}

#[derive(Serialize)]
struct OutEmbeddings<'a> {
    object: &'static str,
    data: Vec<OutEmbedding<'a>>,
    model: &'a str,
    usage: OutEmbeddingUsage,
}

#[derive(Serialize)]
struct OutEmbedding<'a> {
    object: &'static str,
    index: usize,
    embedding: OutVector<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutVector<'a> {
    Floats(&'a [f32]),
    Base64(String),
}

#[derive(Serialize)]
struct OutEmbeddingUsage {
    prompt_tokens: u64,
    total_tokens: u64,
}

pub fn encode_embeddings_response(r: &EmbeddingsResponse, format: Option<EncodingFormat>) -> Vec<u8> {
    let data = r
        .data
        .iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = match format {
                Some(EncodingFormat::Base64) => {
                    let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
                    OutVector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
                }
                _ => OutVector::Floats(v),
            };
            OutEmbedding { object: "embedding", index, embedding }
        })
        .collect();
    let out = OutEmbeddings {
        object: "list",
        data,
        model: &r.model,
        usage: OutEmbeddingUsage { prompt_tokens: r.prompt_tokens, total_tokens: r.prompt_tokens },
    };
    serde_json::to_vec(&out).unwrap_or_default()
}
