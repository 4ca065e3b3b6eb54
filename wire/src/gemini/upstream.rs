//! A Gemini upstream: generateContent, streamGenerateContent?alt=sse, batchEmbedContents.
//!
//! Gemini's function calls carry no stable id: ax synthesizes one per call and, when the
//! conversation comes back, finds each tool result's function name through the assistant message
//! that made the call. A `functionCall` part arrives whole, so in a stream it becomes one tool-call
//! delta with id, name and all arguments. A candidate that calls a function finishes with `STOP`;
//! ax reports `tool_calls` then.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::adapter::{classify, error_body, status_of_error_type, synth_call_id, tool_arguments, Ctx};
use crate::canonical::estimate_tokens;
use crate::canonical::TextOut;
use crate::canonical::{
    ChatRequest, ChatResponse, Choice, Chunk, ChunkChoice, Content, ContentPart, EmbeddingsRequest, EmbeddingsResponse,
    FinishReason, FunctionCall, ImageUrl, ReasoningEffort, ResponseFormat, Role, StreamItem, ToolCall, ToolCallDelta,
    ToolChoice, ToolKind, Usage,
};
use crate::sse::SseEvent;
use crate::Error;

use super::UsageMetadata;

/// Request parameters this adapter maps (see `ChatRequest::set_params`).
pub const SUPPORTED: &[&str] = &[
    "temperature",
    "top_p",
    "stop",
    "n",
    "tools",
    "tool_choice",
    // Honoured by ax: the calls are checked against the schema (`upstream::strict`).
    "tools.function.strict",
    "response_format",
    "response_format.json_schema",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
    "top_logprobs",
];

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GeminiRequest<'a> {
    contents: Vec<GContent<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<GSystem>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<[GTools<'a>; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<Value>,
    #[serde(skip_serializing_if = "GenerationConfig::is_empty")]
    generation_config: GenerationConfig<'a>,
}

#[derive(Serialize)]
struct GSystem {
    parts: [GTextPart; 1],
}

#[derive(Serialize)]
struct GTextPart {
    text: String,
}

#[derive(Serialize)]
struct GContent<'a> {
    role: &'static str,
    parts: Vec<GPart<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
enum GPart<'a> {
    Text(TextOut<'a>),
    InlineData {
        mime_type: &'a str,
        data: &'a str,
    },
    FileData {
        mime_type: &'a str,
        file_uri: &'a str,
    },
    FunctionCall {
        name: &'a str,
        args: Value,
    },
    FunctionResponse {
        name: &'a str,
        response: Value,
    },
    /// A call with its thought signature (`{"functionCall":…,"thoughtSignature":…}`).
    #[serde(untagged)]
    SignedCall(SignedCall<'a>),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SignedCall<'a> {
    function_call: GCall<'a>,
    thought_signature: &'static str,
}

#[derive(Serialize)]
struct GCall<'a> {
    name: &'a str,
    args: Value,
}

/// What a call in a conversation from another protocol carries as its thought signature: Gemini 3
/// refuses a tool loop whose calls have none, and a call another model made (or whose
/// signature another protocol could not keep) has none to give. Google documents this value for
/// conversations brought from elsewhere.
pub const SIGNATURE_PLACEHOLDER: &str = "skip_thought_signature_validator";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GTools<'a> {
    function_declarations: Vec<GFunction<'a>>,
}

#[derive(Serialize)]
struct GFunction<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<&'a Value>,
}

#[derive(Serialize, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_sequences: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    candidate_count: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_mime_type: Option<&'static str>,
    /// Plain JSON Schema (Gemini's `responseSchema` takes only an OpenAPI subset).
    #[serde(skip_serializing_if = "Option::is_none")]
    response_json_schema: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_logprobs: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_config: Option<ThinkingConfig>,
}

#[derive(Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct ThinkingConfig {
    thinking_budget: u32,
    /// The thoughts come back as `thought: true` parts: the caller's reasoning text.
    include_thoughts: bool,
}

impl GenerationConfig<'_> {
    /// Nothing set: compared with the default as a whole, so that a field added later can never
    /// be left out of the check (`thinkingConfig` was, and a request whose only setting was a
    /// reasoning effort reached Gemini without it).
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

fn parts_of<'a>(c: &'a Content, i: usize, out: &mut Vec<GPart<'a>>) -> Result<(), Error> {
    match c {
        Content::Text(t) => out.push(GPart::Text(t.out())),
        Content::Parts(parts) => {
            for p in parts {
                match p {
                    ContentPart::Text { text } => out.push(GPart::Text(text.out())),
                    ContentPart::ImageUrl { image_url } => out.push(image_part(image_url, i)?),
                }
            }
        }
    }
    Ok(())
}

fn image_part(image_url: &ImageUrl, i: usize) -> Result<GPart<'_>, Error> {
    Ok(match image_url.as_data() {
        Some((mime_type, data)) => GPart::InlineData { mime_type, data },
        None if image_url.url.starts_with("gs://") || image_url.url.starts_with("https://") => {
            GPart::FileData { mime_type: guess_mime(&image_url.url), file_uri: &image_url.url }
        }
        None => {
            return Err(Error::invalid_param(
                format!("messages[{i}].content"),
                "Gemini takes images as data: URLs, gs:// or https:// URIs",
            ))
        }
    })
}

fn guess_mime(url: &str) -> &'static str {
    let path = url.split(['?', '#']).next().unwrap_or(url).to_ascii_lowercase();
    if path.ends_with(".png") {
        "image/png"
    } else if path.ends_with(".webp") {
        "image/webp"
    } else if path.ends_with(".gif") {
        "image/gif"
    } else {
        "image/jpeg"
    }
}

pub fn encode_chat(ctx: Ctx<'_>, r: &ChatRequest) -> Result<Vec<u8>, Error> {
    let mut system = Vec::new();
    let mut contents: Vec<GContent<'_>> = Vec::with_capacity(r.messages.len());
    // tool_call_id → function name, from the assistant messages seen so far.
    let mut call_names: HashMap<&str, &str> = HashMap::new();
    // The images the current run of tool results returned: they join its turn after all of its
    // function responses.
    let mut images: Vec<GPart<'_>> = Vec::new();
    for (i, m) in r.messages.iter().enumerate() {
        if m.role != Role::Tool {
            if let Some(last) = contents.last_mut() {
                last.parts.append(&mut images);
            }
        }
        let (role, mut parts) = match m.role {
            Role::System | Role::Developer => {
                if let Some(c) = &m.content {
                    system.push(c.text().into_owned());
                }
                continue;
            }
            Role::User => {
                let mut p = Vec::new();
                if let Some(c) = &m.content {
                    parts_of(c, i, &mut p)?;
                }
                ("user", p)
            }
            Role::Assistant => {
                let mut p = Vec::new();
                if let Some(c) = &m.content {
                    if c.has_text() {
                        parts_of(c, i, &mut p)?;
                    }
                }
                for (j, tc) in m.tool_calls.iter().flatten().enumerate() {
                    call_names.insert(&tc.id, &tc.function.name);
                    let args = tool_arguments(&tc.function.arguments, i, j)?;
                    let call = GCall { name: &tc.function.name, args };
                    // The first call of a step carries the step's signature.
                    p.push(if j == 0 {
                        GPart::SignedCall(SignedCall { function_call: call, thought_signature: SIGNATURE_PLACEHOLDER })
                    } else {
                        GPart::FunctionCall { name: call.name, args: call.args }
                    });
                }
                ("model", p)
            }
            Role::Tool => {
                let id = m.tool_call_id.as_deref().unwrap_or_default();
                let name = call_names.get(id).copied().ok_or_else(|| {
                    Error::invalid_param(
                        format!("messages[{i}].tool_call_id"),
                        format!("messages[{i}].tool_call_id '{id}' matches no earlier assistant tool call"),
                    )
                })?;
                let text = m.content.as_ref().map(|c| c.text_marking_images().into_owned()).unwrap_or_default();
                // functionResponse.response must be an object: a JSON object result is passed
                // as is, anything else is wrapped.
                let response = match serde_json::from_str::<Value>(&text) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => serde_json::json!({ "content": text }),
                };
                for image_url in m.content.iter().flat_map(Content::images) {
                    images.push(image_part(image_url, i)?);
                }
                ("user", vec![GPart::FunctionResponse { name, response }])
            }
        };
        match contents.last_mut() {
            Some(last) if last.role == role => last.parts.append(&mut parts),
            _ => contents.push(GContent { role, parts }),
        }
    }
    if let Some(last) = contents.last_mut() {
        last.parts.append(&mut images);
    }
    if contents.is_empty() {
        return Err(Error::invalid_param("messages", "Gemini needs at least one user or assistant message"));
    }

    let tools = r.has_tools().then(|| {
        [GTools {
            function_declarations: r
                .tools
                .iter()
                .flatten()
                .map(|t| GFunction {
                    name: &t.function.name,
                    description: t.function.description.as_deref(),
                    parameters: t.function.parameters.as_ref(),
                })
                .collect(),
        }]
    });
    let tool_config = r.tool_choice.as_ref().map(|tc| {
        let cfg = match tc {
            ToolChoice::Auto => serde_json::json!({ "mode": "AUTO" }),
            ToolChoice::None => serde_json::json!({ "mode": "NONE" }),
            ToolChoice::Required => serde_json::json!({ "mode": "ANY" }),
            ToolChoice::Function(name) => {
                serde_json::json!({ "mode": "ANY", "allowedFunctionNames": [name] })
            }
        };
        serde_json::json!({ "functionCallingConfig": cfg })
    });
    let (mime, schema) = match &r.response_format {
        Some(ResponseFormat::JsonObject) => (Some("application/json"), None),
        Some(ResponseFormat::JsonSchema { json_schema }) => (Some("application/json"), json_schema.schema.as_ref()),
        Some(ResponseFormat::Text) | None => (None, None),
    };
    let body = GeminiRequest {
        contents,
        system_instruction: (!system.is_empty()).then(|| GSystem { parts: [GTextPart { text: system.join("\n\n") }] }),
        tools,
        tool_config,
        generation_config: GenerationConfig {
            temperature: r.temperature,
            top_p: r.top_p,
            top_k: r.top_k,
            max_output_tokens: r.max_output(),
            stop_sequences: r.stop.as_ref().map(|s| s.0.as_slice()),
            candidate_count: r.n.filter(|n| *n > 1),
            seed: r.seed,
            presence_penalty: r.presence_penalty,
            frequency_penalty: r.frequency_penalty,
            response_mime_type: mime,
            response_json_schema: schema,
            response_logprobs: r.logprobs.filter(|l| *l),
            logprobs: r.top_logprobs,
            thinking_config: ReasoningEffort::budget_of(r)
                .filter(|_| ctx.reasoning)
                .map(|b| ThinkingConfig { thinking_budget: b, include_thoughts: b > 0 }),
        },
    };
    crate::json::write::to_json(&body, r.text_len())
}

// ---------------------------------------------------------------------------------------------
// Response

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GeminiResponse {
    #[serde(default)]
    candidates: Vec<GCandidate>,
    #[serde(default)]
    prompt_feedback: Option<GPromptFeedback>,
    #[serde(default)]
    usage_metadata: Option<UsageMetadata>,
    #[serde(default)]
    model_version: Option<String>,
    #[serde(default)]
    response_id: Option<String>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GPromptFeedback {
    #[serde(default)]
    block_reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GCandidate {
    #[serde(default)]
    content: Option<GRespContent>,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    index: Option<u32>,
}

#[derive(Deserialize)]
struct GRespContent {
    #[serde(default)]
    parts: Vec<GRespPart>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GRespPart {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thought: Option<bool>,
    #[serde(default)]
    function_call: Option<GFunctionCall>,
}

#[derive(Deserialize)]
struct GFunctionCall {
    name: String,
    #[serde(default)]
    args: Option<Value>,
}

pub fn finish_reason(raw: &str, called_function: bool) -> FinishReason {
    match raw {
        "STOP" if called_function => FinishReason::ToolCalls,
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            FinishReason::ContentFilter
        }
        other => FinishReason::Unmapped(other.to_owned()),
    }
}

fn embedded_error(v: &Value) -> Option<Error> {
    let e = v.get("error")?;
    let status = e.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok());
    let s = e.get("status").and_then(Value::as_str);
    Some(classify(status.unwrap_or_else(|| s.map_or(500, status_of_error_type)), s))
}

/// One candidate, flattened: text, thought text and function calls as (name, args JSON).
struct CandidateParts {
    index: u32,
    text: Option<String>,
    thought: Option<String>,
    calls: Vec<(String, String)>,
    finish: Option<String>,
}

fn candidate_parts(c: GCandidate) -> CandidateParts {
    let mut text: Option<String> = None;
    let mut thought: Option<String> = None;
    let mut calls = Vec::new();
    for p in c.content.map(|c| c.parts).unwrap_or_default() {
        if p.thought == Some(true) {
            if let Some(t) = p.text.filter(|t| !t.is_empty()) {
                thought.get_or_insert_with(String::new).push_str(&t);
            }
            continue;
        }
        if let Some(t) = p.text {
            text.get_or_insert_with(String::new).push_str(&t);
        }
        if let Some(fc) = p.function_call {
            let args = fc.args.unwrap_or_else(|| Value::Object(Default::default()));
            calls.push((fc.name, args.to_string()));
        }
    }
    CandidateParts { index: c.index.unwrap_or(0), text, thought, calls, finish: c.finish_reason }
}

pub fn decode_chat(body: &[u8]) -> Result<ChatResponse, Error> {
    let r: GeminiResponse = crate::json::read::from_json(body).map_err(|_| error_body(body, embedded_error))?;
    if r.error.is_some() {
        return Err(error_body(body, embedded_error));
    }
    if r.candidates.is_empty() {
        return Err(if r.prompt_feedback.and_then(|f| f.block_reason).is_some() {
            Error::ContentFilter
        } else {
            Error::UpstreamInvalidResponse
        });
    }
    let choices = r
        .candidates
        .into_iter()
        .map(|c| {
            let CandidateParts { index, text: content, thought, calls, finish } = candidate_parts(c);
            let called = !calls.is_empty();
            Choice {
                index,
                content,
                refusal: None,
                tool_calls: calls
                    .into_iter()
                    .map(|(name, arguments)| ToolCall {
                        id: synth_call_id(),
                        kind: ToolKind::Function,
                        function: FunctionCall { name, arguments },
                    })
                    .collect(),
                finish_reason: finish.as_deref().map(|f| finish_reason(f, called)),
                logprobs: None,
                reasoning: thought,
            }
        })
        .collect();
    Ok(ChatResponse {
        id: r.response_id.unwrap_or_default(),
        created: 0,
        model: r.model_version.unwrap_or_default(),
        choices,
        usage: r.usage_metadata.map(Usage::from),
        system_fingerprint: None,
    })
}

pub fn error_code(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.pointer("/error/status").and_then(Value::as_str).map(str::to_owned)
}

// ---------------------------------------------------------------------------------------------
// Stream

#[derive(Debug, Default)]
pub struct StreamState {
    pub finished: bool,
    /// Per choice: tool calls emitted so far (the next OpenAI tool-call index).
    tools_seen: Vec<u32>,
    /// The response's id and finish reasons, as they come.
    pub facts: crate::canonical::AnswerFacts,
}

impl StreamState {
    pub fn on_event(&mut self, ev: &SseEvent) -> Result<Option<StreamItem>, Error> {
        let r: GeminiResponse =
            serde_json::from_str(&ev.data).map_err(|_| error_body(ev.data.as_bytes(), embedded_error))?;
        if r.error.is_some() {
            return Err(error_body(ev.data.as_bytes(), embedded_error));
        }
        if r.candidates.is_empty() && r.prompt_feedback.as_ref().is_some_and(|f| f.block_reason.is_some()) {
            return Err(Error::ContentFilter);
        }
        if let Some(id) = &r.response_id {
            self.facts.saw_id(id);
        }
        let mut choices = Vec::with_capacity(r.candidates.len());
        for c in r.candidates {
            let CandidateParts { index, text: content, thought, calls, finish } = candidate_parts(c);
            let slot = index as usize;
            if self.tools_seen.len() <= slot {
                self.tools_seen.resize(slot + 1, 0);
            }
            let mut tool_calls = Vec::with_capacity(calls.len());
            for (name, arguments) in calls {
                tool_calls.push(ToolCallDelta {
                    index: self.tools_seen[slot],
                    id: Some(synth_call_id()),
                    name: Some(name),
                    arguments,
                });
                self.tools_seen[slot] += 1;
            }
            let finish_reason = finish.as_deref().map(|f| finish_reason(f, self.tools_seen[slot] > 0));
            self.finished |= finish_reason.is_some();
            self.facts.finish_reasons.extend(finish_reason.clone());
            let ch = ChunkChoice { index, content, refusal: None, tool_calls, finish_reason, reasoning: thought };
            if !ch.is_empty() {
                choices.push(ch);
            }
        }
        let usage = r.usage_metadata.map(Usage::from);
        if choices.is_empty() && usage.is_none() {
            return Ok(None);
        }
        Ok(Some(StreamItem::Chunk(Chunk { choices, usage })))
    }
}

// ---------------------------------------------------------------------------------------------
// Embeddings

pub fn encode_embeddings(ctx: Ctx<'_>, r: &EmbeddingsRequest) -> Result<Vec<u8>, Error> {
    let texts = r
        .input
        .texts()
        .ok_or(Error::UnsupportedParameter { param: "input (token arrays)".to_owned(), provider: "gemini" })?;
    let model = format!("models/{}", ctx.model);
    let requests: Vec<Value> = texts
        .iter()
        .map(|t| {
            let mut req = serde_json::json!({ "model": model, "content": { "parts": [{ "text": t }] } });
            if let Some(d) = r.dimensions {
                req["outputDimensionality"] = Value::from(d);
            }
            req
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({ "requests": requests })).map_err(|_| Error::Internal)
}

#[derive(Deserialize)]
struct GEmbeddings {
    embeddings: Vec<GEmbedding>,
}

#[derive(Deserialize)]
struct GEmbedding {
    values: Vec<f32>,
}

pub fn decode_embeddings(body: &[u8], req: &EmbeddingsRequest) -> Result<EmbeddingsResponse, Error> {
    let v: Value = serde_json::from_slice(body).map_err(|_| Error::UpstreamInvalidResponse)?;
    if let Some(e) = embedded_error(&v) {
        return Err(e);
    }
    let r: GEmbeddings = serde_json::from_value(v).map_err(|_| Error::UpstreamInvalidResponse)?;
    Ok(EmbeddingsResponse {
        model: req.model.clone(),
        data: r.embeddings.into_iter().map(|e| e.values).collect(),
        // batchEmbedContents reports no token count: estimated (documented).
        prompt_tokens: estimate_tokens(req.input.byte_len()),
    })
}

// ---------------------------------------------------------------------------------------------
// Forwarded to a Gemini caller (the same-protocol fast path)

/// What the gateway reads of a Gemini answer or stream event it forwards: usage, the response's
/// id, the candidates' finish reasons and whether they carry parts. The parts themselves are
/// skipped, never decoded.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Glance<'a> {
    #[serde(default, borrow)]
    candidates: Vec<CandidateGlance<'a>>,
    #[serde(default)]
    usage_metadata: Option<UsageMetadata>,
    #[serde(default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
    response_id: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CandidateGlance<'a> {
    #[serde(default)]
    content: Option<ContentGlance>,
    #[serde(default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
    finish_reason: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ContentGlance {
    #[serde(default)]
    parts: Vec<PartGlance>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartGlance {
    #[serde(default)]
    function_call: Option<serde::de::IgnoredAny>,
}

impl Glance<'_> {
    fn facts(&self, facts: &mut crate::canonical::AnswerFacts) {
        if let Some(id) = &self.response_id {
            facts.saw_id(id);
        }
        for c in &self.candidates {
            if let Some(f) = &c.finish_reason {
                let called = c.content.as_ref().is_some_and(|c| c.parts.iter().any(|p| p.function_call.is_some()));
                facts.finish_reasons.push(finish_reason(f, called));
            }
        }
    }
}

/// A 2xx answer to forward as it came, with its usage; the upstream's error when it carries one.
/// (A prompt blocked by safety is an answer a Gemini caller reads as such: forwarded too.)
pub fn forwardable(
    body: &[u8],
    facts: Option<&mut crate::canonical::AnswerFacts>,
) -> Result<Option<Option<Usage>>, Error> {
    let r: Glance<'_> = crate::json::read::from_json(body).map_err(|_| error_body(body, embedded_error))?;
    if r.error.is_some() {
        return Err(error_body(body, embedded_error));
    }
    if let Some(f) = facts {
        r.facts(f);
    }
    Ok(Some(r.usage_metadata.map(Usage::from)))
}

/// A Gemini stream forwarded to a Gemini caller: each event as it came, its usage, finish
/// reasons and parts read for metering; an event holding an error is the upstream's error.
/// Gemini ends a stream by closing it: it is complete once a finish reason was seen.
#[derive(Debug, Default)]
pub struct ForwardState {
    usage: Option<Usage>,
    finished: bool,
    facts: crate::canonical::AnswerFacts,
}

impl ForwardState {
    pub fn on_event(&mut self, ev: &SseEvent) -> Result<Option<StreamItem>, Error> {
        let g: Glance<'_> = crate::json::read::from_json(ev.data.as_bytes())
            .map_err(|_| error_body(ev.data.as_bytes(), embedded_error))?;
        if g.error.is_some() {
            return Err(error_body(ev.data.as_bytes(), embedded_error));
        }
        g.facts(&mut self.facts);
        let finishes = g.candidates.iter().any(|c| c.finish_reason.is_some());
        self.finished |= finishes;
        if let Some(u) = g.usage_metadata {
            self.usage = Some(Usage::from(u));
        }
        let deltas = g.candidates.iter().filter(|c| c.content.as_ref().is_some_and(|c| !c.parts.is_empty())).count();
        Ok(Some(StreamItem::Raw(crate::canonical::RawEvent {
            bytes: crate::sse::forward_event(ev),
            usage: self.usage,
            deltas: u32::try_from(deltas).unwrap_or(u32::MAX),
            usage_only: false,
            finishes,
        })))
    }

    pub fn finished(&self) -> bool {
        self.finished
    }

    pub fn facts(&mut self) -> crate::canonical::AnswerFacts {
        std::mem::take(&mut self.facts)
    }
}
