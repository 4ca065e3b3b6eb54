//! The Anthropic Messages codec: what a caller speaking Anthropic's Messages API sends (Claude
//! Code, the `anthropic` SDKs), read for the same-protocol fast path (`skim_messages`: an
//! Anthropic upstream is sent the caller's bytes) or decoded into the canonical model for any
//! other upstream; the canonical answer encoded back as a `message`, or as Anthropic's stream
//! events (`Events`); errors in Anthropic's shape (`error_body`).
//!
//! Mapping (`docs/translation.md`): `system` (a string or text blocks) and `role:"system"` turns
//! become system messages; `tool_use` blocks become tool calls and `tool_result` blocks tool
//! messages (their text, `is_error` kept as a prefix); `tool_choice` `auto`/`any`/`tool`/`none`
//! map to OpenAI's, `disable_parallel_tool_use` to `parallel_tool_calls: false`; temperature
//! as given (the same quantity in every API; only the allowed range differs). Fields only Anthropic acts on
//! (`cache_control`, `thinking`, `context_management`, `output_config`, `container`,
//! `mcp_servers`, `service_tier`, beta fields) reach an Anthropic upstream as written and are
//! left out for the others; server tools (`web_search`, `code_execution`…) only Anthropic runs.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical::{
    estimate_tokens, ChatRequest, ChatResponse, ChunkChoice, ContentPart, FinishReason, FunctionDef, JsonSchema,
    RawChat, ReasoningEffort, ResponseFormat, Skim, Stop, Tool, ToolChoice, ToolKind, Usage, IMAGE_TOKENS,
    MESSAGE_TOKENS,
};
use crate::json::decode::Known;
use crate::{Error, Reported};

#[cfg(test)]
mod oracle;
pub mod walk;
use crate::canonical::StreamEncoder;
use crate::json::skim::{key_bytes, key_text, SkimError};

// ---------------------------------------------------------------------------------------------
// The fast path: an Anthropic upstream gets the caller's bytes

/// What `skim_messages` reads of a body.
#[derive(Default)]
struct Skimmed {
    model: Option<(String, std::ops::Range<usize>)>,
    messages: Option<u64>,
    stream: bool,
    max_tokens: Option<u32>,
    temperature: Option<f64>,
    tools: bool,
    images: u64,
    text: usize,
    declined: bool,
}

/// Text bytes and images of one content value: a string, or blocks (text, images, tool use and
/// results, thinking; an image counts as `IMAGE_TOKENS` whatever its size).
fn skim_content(s: &mut crate::json::skim::Skim<'_>, read: &mut Skimmed) -> Result<(), SkimError> {
    match s.next_byte() {
        Some(b'"') => {
            let (span, _) = s.string()?;
            read.text += span.len() - 2;
        }
        Some(b'[') => s.array(|s| {
            if s.next_byte() != Some(b'{') {
                s.value()?;
                return Ok(());
            }
            let (mut image, mut search) = (false, false);
            s.object(|k, esc, s| {
                match key_bytes(k, esc).as_deref() {
                    Some(b"text" | b"thinking" | b"input") => read.text += s.value()?.len(),
                    Some(b"content") => skim_content(s, read)?,
                    // A search result's `source` is where its text came from, not an image.
                    Some(b"type") => search = s.value_bytes()? == b"\"search_result\"",
                    Some(b"source") => {
                        image = true;
                        s.value()?;
                    }
                    _ => {
                        s.value()?;
                    }
                }
                Ok(())
            })?;
            read.images += u64::from(image && !search);
            Ok(())
        })?,
        _ => {
            s.value()?;
        }
    }
    Ok(())
}

fn skim_fields(body: &[u8], forwards: &dyn Fn(&str) -> bool) -> Result<Skimmed, SkimError> {
    let mut read = Skimmed::default();
    let mut s = crate::json::skim::Skim::new(body);
    if s.next_byte() != Some(b'{') {
        return Err(SkimError { at: s.pos(), what: "the body must be a JSON object".into() });
    }
    let walked = s.object(|k, esc, s| {
        let at = s.pos();
        let Some(key) = key_text(k, esc) else {
            return Err(SkimError { at, what: "a key is not valid JSON text".into() });
        };
        let field =
            |what: &'static str| move |e: SkimError| SkimError { at: e.at, what: format!("{what}: {}", e.what) };
        match &*key {
            "model" => {
                if read.model.is_some() {
                    return Err(SkimError { at, what: "duplicate field `model`".into() });
                }
                s.next_byte();
                let start = s.pos();
                let model: String = s.decode().map_err(field("model"))?;
                if read.messages.is_none() && !forwards(&model) {
                    read.declined = true;
                    return Err(SkimError { at: start, what: String::new() });
                }
                read.model = Some((model, start..s.pos()));
            }
            "messages" => {
                let mut n = 0;
                s.array(|s| {
                    n += 1;
                    if s.next_byte() != Some(b'{') {
                        s.value()?;
                        return Ok(());
                    }
                    s.object(|k, esc, s| {
                        if key_bytes(k, esc).as_deref() == Some(b"content") {
                            skim_content(s, &mut read)
                        } else {
                            s.value().map(|_| ())
                        }
                    })
                })
                .map_err(field("messages"))?;
                read.messages = Some(n);
            }
            "system" => skim_content(s, &mut read).map_err(field("system"))?,
            "stream" => read.stream = s.decode().map_err(field("stream"))?,
            "max_tokens" => read.max_tokens = Some(s.decode().map_err(field("max_tokens"))?),
            "temperature" => read.temperature = s.decode().map_err(field("temperature"))?,
            "tools" => {
                let span = s.value()?;
                read.text += span.len();
                let v = &body[span];
                read.tools =
                    v.first() == Some(&b'[') && v.iter().skip(1).any(|b| !b.is_ascii_whitespace() && *b != b']');
            }
            _ => {
                s.value()?;
            }
        }
        Ok(())
    });
    if read.declined {
        return Ok(read);
    }
    walked?;
    s.end()?;
    Ok(read)
}

/// Reads what the gateway needs of a Messages body without decoding it: the model and where it
/// is, `stream`, `max_tokens` (required, as Anthropic requires it), the capabilities it needs and
/// a prompt estimate. An Anthropic upstream gets the body as written with only the model
/// replaced: betas, `thinking`, `cache_control`, blocks ax does not know, all as they are.
pub fn skim_messages(body: Bytes, forwards: &dyn Fn(&str) -> bool) -> Result<Skim, Error> {
    let read = skim_fields(&body, forwards).map_err(|e| Error::InvalidJson(e.what))?;
    if read.declined {
        return Ok(Skim::Decode(body));
    }
    let Some((model, model_span)) = read.model else {
        return Err(Error::InvalidJson("missing field `model`".into()));
    };
    let Some(messages) = read.messages else {
        return Err(Error::InvalidJson("missing field `messages`".into()));
    };
    let Some(max_tokens) = read.max_tokens else {
        return Err(Error::InvalidJson("missing field `max_tokens`".into()));
    };
    if messages == 0 {
        return Err(Error::invalid_param("messages", "'messages' must not be empty"));
    }
    Ok(Skim::Forward(RawChat {
        protocol: crate::canonical::Protocol::AnthropicMessages,
        model,
        model_span,
        edits: Vec::new(),
        stream: read.stream,
        // Anthropic's stream events carry the usage themselves.
        include_usage: true,
        max_output: Some(max_tokens),
        temperature: read.temperature,
        needs_tools: read.tools,
        needs_vision: read.images > 0,
        needs_json: false,
        prompt_estimate: estimate_tokens(read.text) + MESSAGE_TOKENS * messages + IMAGE_TOKENS * read.images,
        headers: Vec::new(),
        body,
    }))
}

/// The caller's body with only `model` replaced, as slices (a `count_tokens` body for an
/// Anthropic upstream). Called on a body that decoded, so its model is there.
pub fn with_model(body: Bytes, model: &str) -> Vec<Bytes> {
    match skim_fields(&body, &|_| true) {
        Ok(Skimmed { model: Some((alias, model_span)), .. }) => RawChat {
            protocol: crate::canonical::Protocol::AnthropicMessages,
            model: alias,
            model_span,
            edits: Vec::new(),
            stream: false,
            include_usage: false,
            max_output: None,
            temperature: None,
            needs_tools: false,
            needs_vision: false,
            needs_json: false,
            prompt_estimate: 0,
            headers: Vec::new(),
            body,
        }
        .body_for(model),
        _ => vec![body],
    }
}

// ---------------------------------------------------------------------------------------------
// The canonical path: decoded for an upstream of another protocol

/// A Messages request. Fields only Anthropic acts on are named (so strict mode does not refuse
/// them) and left out of the canonical request.
#[derive(Deserialize)]
pub struct MessagesRequest {
    model: String,
    /// Required by `/v1/messages` (checked there); `count_tokens` goes without.
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    /// No OpenAI or canonical equivalent: left out when translating (logged).
    #[serde(default)]
    top_k: Option<u32>,
    #[serde(default)]
    stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    tools: Option<Vec<ToolIn>>,
    #[serde(default)]
    tool_choice: Option<ToolChoiceIn>,
    #[serde(default)]
    metadata: Option<MetadataIn>,
    #[serde(default)]
    thinking: Option<ThinkingIn>,
    #[serde(default)]
    output_config: Option<OutputConfigIn>,
    #[serde(default, rename = "context_management")]
    _context_management: Option<Known>,
    #[serde(default, rename = "container")]
    _container: Option<Known>,
    #[serde(default, rename = "mcp_servers")]
    _mcp_servers: Option<Known>,
    #[serde(default, rename = "service_tier")]
    _service_tier: Option<Known>,
    #[serde(default, rename = "cache_control")]
    _cache_control: Option<Known>,
    #[serde(default, rename = "betas")]
    _betas: Option<Known>,
    #[serde(default, rename = "diagnostics")]
    _diagnostics: Option<Known>,
    #[serde(default, rename = "inference_geo")]
    _inference_geo: Option<Known>,
    #[serde(default, rename = "speed")]
    _speed: Option<Known>,
    #[serde(default, rename = "user_profile_id")]
    _user_profile_id: Option<Known>,
    #[serde(default, rename = "workspace_id")]
    _workspace_id: Option<Known>,
}

/// `thinking`: `enabled` with a budget, `adaptive` (the model decides; its effort in
/// `output_config`), or `disabled`; `display: omitted` returns thinking blocks without their text.
#[derive(Deserialize)]
struct ThinkingIn {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    budget_tokens: Option<u32>,
    #[serde(default)]
    display: Option<String>,
}

#[derive(Deserialize)]
struct OutputConfigIn {
    #[serde(default)]
    effort: Option<String>,
    #[serde(default)]
    format: Option<OutputFormatIn>,
}

/// Structured output: `{"type": "json_schema", "schema": {…}}`.
#[derive(Deserialize)]
struct OutputFormatIn {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    schema: Option<Value>,
}

impl MessagesRequest {
    /// Whether the caller wants the thinking text (not `display: "omitted"`).
    pub fn shows_thinking(&self) -> bool {
        self.thinking.as_ref().and_then(|t| t.display.as_deref()) != Some("omitted")
    }

    /// The canonical reasoning control: the effort (`output_config.effort`, else the budget's)
    /// and the budget the caller named; nothing for `disabled` or no `thinking`.
    fn reasoning(&self) -> Result<(Option<ReasoningEffort>, Option<u32>), Error> {
        let effort = match self.output_config.as_ref().and_then(|o| o.effort.as_deref()) {
            None => None,
            Some("low") => Some(ReasoningEffort::Low),
            Some("medium") => Some(ReasoningEffort::Medium),
            // Anthropic's top levels: the highest every provider takes.
            Some("high" | "xhigh" | "max") => Some(ReasoningEffort::High),
            Some(other) => {
                return Err(Error::invalid_param(
                    "output_config.effort",
                    format!("unknown effort '{other}' (low, medium, high, xhigh or max)"),
                ))
            }
        };
        Ok(match self.thinking.as_ref().map(|t| (t.kind.as_str(), t.budget_tokens)) {
            None => (effort, None),
            Some(("disabled", _)) => (None, None),
            Some(("enabled", Some(budget))) => (effort.or(Some(ReasoningEffort::of_budget(budget))), Some(budget)),
            Some(("enabled", None)) => {
                return Err(Error::invalid_param(
                    "thinking.budget_tokens",
                    "thinking of type 'enabled' needs 'budget_tokens'",
                ))
            }
            Some(("adaptive", _)) => (effort, None),
            Some((other, _)) => {
                return Err(Error::invalid_param(
                    "thinking.type",
                    format!("unknown thinking type '{other}' (enabled, adaptive or disabled)"),
                ))
            }
        })
    }

    fn response_format(&self) -> Result<Option<ResponseFormat>, Error> {
        match self.output_config.as_ref().and_then(|o| o.format.as_ref()) {
            None => Ok(None),
            Some(f) if f.kind == "json_schema" => Ok(Some(ResponseFormat::JsonSchema {
                json_schema: JsonSchema {
                    name: "output".into(),
                    description: None,
                    schema: f.schema.clone(),
                    strict: Some(true),
                },
            })),
            Some(f) => Err(Error::invalid_param(
                "output_config.format.type",
                format!("unknown output format '{}' (json_schema)", f.kind),
            )),
        }
    }
}

#[derive(Deserialize)]
struct ToolIn {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    input_schema: Option<Value>,
    /// `custom` (or absent) for the caller's own tools; anything else is a server tool.
    #[serde(rename = "type", default)]
    kind: Option<String>,
    /// Left out of the model's view until a `tool_reference` block in a tool result names it.
    #[serde(default)]
    defer_loading: bool,
    #[serde(default)]
    strict: Option<bool>,
    #[serde(default, rename = "cache_control")]
    _cache_control: Option<Known>,
    #[serde(default, rename = "allowed_callers")]
    _allowed_callers: Option<Known>,
    #[serde(default, rename = "eager_input_streaming")]
    _eager_input_streaming: Option<Known>,
    #[serde(default, rename = "input_examples")]
    _input_examples: Option<Known>,
}

#[derive(Deserialize)]
struct ToolChoiceIn {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    disable_parallel_tool_use: Option<bool>,
}

#[derive(Deserialize)]
struct MetadataIn {
    #[serde(default)]
    user_id: Option<String>,
}

/// A Messages body in the canonical model, and whether the caller wants the thinking text: its
/// conversation walked (`walk`; its texts slices of `body`), every other member decoded by serde.
/// `max_tokens` is required unless `for_counting` (the `count_tokens` body has none).
pub fn decode_canonical(
    body: &Bytes,
    mode: ax_protocol::config::ParamsMode,
    for_counting: bool,
) -> Result<(ChatRequest, bool), Error> {
    let mut unknown = Vec::new();
    let (walked, rest) = walk::decode(body, &mut unknown)?;
    let r: MessagesRequest = crate::json::decode::json(&rest, mode)?;
    crate::json::decode::judge(&unknown, mode)?;
    let shows = r.shows_thinking();
    canonical(r, for_counting, walked).map(|req| (req, shows))
}

/// The request's other members and its walked conversation, in the canonical model.
fn canonical(r: MessagesRequest, for_counting: bool, walked: walk::Walked) -> Result<ChatRequest, Error> {
    let max_tokens = match (r.max_tokens, for_counting) {
        (Some(m), _) => Some(m),
        (None, true) => None,
        (None, false) => return Err(Error::InvalidJson("missing field `max_tokens`".into())),
    };
    if r.top_k.is_some() {
        tracing::info!("top_k left out: the serving upstream does not speak Anthropic's protocol");
    }
    // Anthropic's own range, as an Anthropic upstream would judge it (the canonical one is 0..2).
    if r.temperature.is_some_and(|t| !(0.0..=1.0).contains(&t)) {
        return Err(Error::invalid_param("temperature", "'temperature' must be between 0 and 1"));
    }
    let (reasoning_effort, thinking_budget) = r.reasoning()?;
    let response_format = r.response_format()?;
    let walk::Walked { system, turns: mut messages, loaded } = walked;
    if let Some(system) = system {
        messages.insert(0, system);
    }
    let mut tools = Vec::new();
    for (i, t) in r.tools.into_iter().flatten().enumerate() {
        // No other provider searches tools: a deferred one joins the list once a tool result
        // has loaded it, as Anthropic's API loads it into the model's view.
        if t.defer_loading && !loaded.contains(&t.name) {
            continue;
        }
        if t.kind.as_deref().is_some_and(|k| k != "custom") {
            return Err(Error::invalid_param(
                format!("tools[{i}]"),
                format!("tools[{i}] ('{}') is a server tool only an Anthropic upstream runs", t.name),
            ));
        }
        tools.push(Tool {
            kind: ToolKind::Function,
            function: FunctionDef {
                name: t.name,
                description: t.description,
                parameters: t.input_schema,
                strict: t.strict,
            },
        });
    }
    let (tool_choice, parallel) = match r.tool_choice {
        None => (None, None),
        Some(c) => {
            let choice = match c.kind.as_str() {
                "auto" => ToolChoice::Auto,
                "any" => ToolChoice::Required,
                "none" => ToolChoice::None,
                "tool" => ToolChoice::Function(c.name.ok_or_else(|| {
                    Error::invalid_param("tool_choice.name", "a tool_choice of type 'tool' names the tool")
                })?),
                other => {
                    return Err(Error::invalid_param("tool_choice.type", format!("unknown tool_choice type '{other}'")))
                }
            };
            (Some(choice), c.disable_parallel_tool_use.filter(|d| *d).map(|_| false))
        }
    };
    let req = ChatRequest {
        model: r.model,
        messages,
        // As given: every API's temperature divides the same logits; only the range differs.
        temperature: r.temperature,
        top_p: r.top_p,
        max_tokens,
        stop: r.stop_sequences.filter(|s| !s.is_empty()).map(Stop),
        stream: r.stream,
        tools: (!tools.is_empty()).then_some(tools),
        tool_choice,
        parallel_tool_calls: parallel,
        user: r.metadata.and_then(|m| m.user_id),
        reasoning_effort,
        thinking_budget,
        response_format,
        ..ChatRequest::default()
    };
    Ok(req)
}

/// An `is_error` tool result's parts: its first text starts `Error: ` (one is put first when it
/// starts with an image).
pub(super) fn error_first(parts: &mut Vec<ContentPart>) {
    match parts.first_mut() {
        Some(ContentPart::Text { text }) => *text = format!("Error: {}", text.as_str()).into(),
        _ => parts.insert(0, ContentPart::Text { text: "Error:".into() }),
    }
}

// ---------------------------------------------------------------------------------------------
// Answers

/// Anthropic's stop reason for a canonical finish: its own values as they are; one no
/// Anthropic client knows is `end_turn`, the provider's value kept beside it.
fn stop_reason(f: Option<&FinishReason>) -> (&str, Option<&str>) {
    match f {
        None | Some(FinishReason::Stop) => ("end_turn", None),
        Some(FinishReason::Length) => ("max_tokens", None),
        Some(FinishReason::ToolCalls) => ("tool_use", None),
        Some(FinishReason::ContentFilter) => ("refusal", None),
        Some(FinishReason::Unmapped(raw)) => match raw.as_str() {
            "pause_turn" | "model_context_window_exceeded" | "stop_sequence" | "end_turn" => (raw.as_str(), None),
            other => ("end_turn", Some(other)),
        },
    }
}

/// Usage as Anthropic reports it: `input_tokens` without either cache count, the cache writes
/// split by how long they are kept.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageOut {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cache_creation: CacheCreationOut,
}

#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheCreationOut {
    pub ephemeral_5m_input_tokens: u64,
    pub ephemeral_1h_input_tokens: u64,
}

impl From<&Usage> for UsageOut {
    fn from(u: &Usage) -> Self {
        let hour = u.cache_write_1h_tokens.min(u.cache_write_tokens);
        Self {
            input_tokens: u.prompt_tokens.saturating_sub(u.cached_tokens + u.cache_write_tokens),
            output_tokens: u.completion_tokens,
            cache_creation_input_tokens: u.cache_write_tokens,
            cache_read_input_tokens: u.cached_tokens,
            cache_creation: CacheCreationOut {
                ephemeral_5m_input_tokens: u.cache_write_tokens - hour,
                ephemeral_1h_input_tokens: hour,
            },
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockOut<'a> {
    Thinking { thinking: &'a str, signature: &'a str },
    Text { text: &'a str },
    ToolUse { id: &'a str, name: &'a str, input: Value },
}

#[derive(Serialize)]
struct MessageOut<'a> {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: Vec<BlockOut<'a>>,
    stop_reason: &'a str,
    stop_sequence: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider_stop_reason: Option<&'a str>,
    usage: UsageOut,
}

/// A tool call's arguments as the object Anthropic's `input` is (an empty object for none).
fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
}

/// A whole canonical answer as a Messages `message`.
/// `show_thinking`: the reasoning text in its thinking block (else the block comes empty, as
/// Anthropic answers `display: "omitted"`).
pub fn encode_message(r: &ChatResponse, request_id: &str, model: &str, show_thinking: bool) -> Vec<u8> {
    let choice = r.choices.first();
    let mut content = Vec::new();
    if let Some(c) = choice {
        if let Some(t) = c.reasoning.as_deref() {
            // No provider but Anthropic signs its thinking: the signature is empty.
            content.push(BlockOut::Thinking { thinking: if show_thinking { t } else { "" }, signature: "" });
        }
        if let Some(t) = c.content.as_deref().filter(|t| !t.is_empty()) {
            content.push(BlockOut::Text { text: t });
        }
        for t in &c.tool_calls {
            content.push(BlockOut::ToolUse {
                id: &t.id,
                name: &t.function.name,
                input: tool_input(&t.function.arguments),
            });
        }
    }
    let (stop, provider) = stop_reason(choice.and_then(|c| c.finish_reason.as_ref()));
    let out = MessageOut {
        id: message_id(request_id),
        kind: "message",
        role: "assistant",
        model: if r.model.is_empty() { model } else { &r.model },
        content,
        stop_reason: stop,
        stop_sequence: None,
        provider_stop_reason: provider,
        usage: UsageOut::from(&r.usage.unwrap_or_default()),
    };
    serde_json::to_vec(&out).unwrap_or_default()
}

fn message_id(request_id: &str) -> String {
    format!("msg_{}", request_id.strip_prefix("req_").unwrap_or(request_id))
}

/// An error in Anthropic's shape: its type for ax's status, ax's stable code in the message
/// (and in `x-ax-error-code`), and the request id.
pub fn error_body(e: &dyn Reported, request_id: &str) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        error: Inner<'a>,
        request_id: &'a str,
    }
    #[derive(Serialize)]
    struct Inner<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        param: Option<&'a str>,
    }
    let out = Out {
        kind: "error",
        error: Inner { kind: error_type(e), message: format!("{} ({})", e, e.code()), param: e.param() },
        request_id,
    };
    serde_json::to_vec(&out).unwrap_or_default()
}

/// Anthropic's error type for an ax error.
pub fn error_type(e: &dyn Reported) -> &'static str {
    match status(e) {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 | 405 => "not_found_error",
        413 | 414 | 431 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// The status an Anthropic caller gets: ax's, but 529 where no upstream could take the request
/// (Anthropic's "overloaded"), which its clients retry.
pub fn status(e: &dyn Reported) -> u16 {
    match e.status() {
        503 => 529,
        s => s,
    }
}

// ---------------------------------------------------------------------------------------------
// Streams

/// The stream encoder of one Messages request: `message_start` and a `ping`, then reasoning as a thinking
/// block (`thinking_delta`), text as a text block (`text_delta`) and each tool call as a
/// tool_use block (`input_json_delta`), each opened with `content_block_start` and closed with
/// `content_block_stop` (indexes count every block), then `message_delta` (stop reason, usage)
/// and `message_stop`. A failure after the first event is one `event: error`.
pub struct Events {
    id: String,
    model: String,
    request_id: String,
    /// The block now open and its index.
    open: Option<(u32, Open)>,
    next_block: u32,
    finish: Option<FinishReason>,
    show_thinking: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
    /// A tool call, by its index among the choice's tool calls.
    Tool(u32),
}

impl Events {
    pub fn new(request_id: &str, model: &str, show_thinking: bool) -> Self {
        Self {
            id: message_id(request_id),
            model: model.to_owned(),
            request_id: request_id.to_owned(),
            open: None,
            next_block: 0,
            finish: None,
            show_thinking,
        }
    }

    fn event(out: &mut Vec<u8>, name: &str, data: &Value) {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        let _ = serde_json::to_writer(&mut *out, data);
        out.extend_from_slice(b"\n\n");
    }

    fn close_block(&mut self, out: &mut Vec<u8>) {
        if let Some((index, _)) = self.open.take() {
            out.extend_from_slice(b"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":");
            out.extend_from_slice(itoa::Buffer::new().format(index).as_bytes());
            out.extend_from_slice(b"}\n\n");
        }
    }

    /// The index of the open block of `kind`, else of a new one started with `block`.
    fn block(&mut self, out: &mut Vec<u8>, kind: Open, block: impl FnOnce() -> Value) -> u32 {
        if let Some((i, open)) = self.open {
            if open == kind {
                return i;
            }
        }
        self.close_block(out);
        let index = self.next_block;
        self.next_block += 1;
        self.open = Some((index, kind));
        Self::event(
            out,
            "content_block_start",
            &serde_json::json!({ "type": "content_block_start", "index": index, "content_block": block() }),
        );
        index
    }

    /// A `content_block_delta` of `kind` carrying `text` as its `field`. By hand, as it is most
    /// of a stream's events: through a `serde_json::Value` each cost two maps built, written and
    /// freed (~2,000 instructions an event).
    fn delta(out: &mut Vec<u8>, index: u32, kind: &str, field: &str, text: &str) {
        out.extend_from_slice(b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":");
        out.extend_from_slice(itoa::Buffer::new().format(index).as_bytes());
        out.extend_from_slice(b",\"delta\":{\"type\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\",\"");
        out.extend_from_slice(field.as_bytes());
        out.extend_from_slice(b"\":");
        let _ = serde_json::to_writer(&mut *out, text);
        out.extend_from_slice(b"}}\n\n");
    }
}

impl StreamEncoder for Events {
    fn start(&mut self, _n: u32) -> Bytes {
        let mut out = Vec::with_capacity(256);
        let start = serde_json::json!({ "type": "message_start", "message": {
            "id": self.id, "type": "message", "role": "assistant", "content": [], "model": self.model,
            "stop_reason": null, "stop_sequence": null,
            "usage": { "input_tokens": 0, "output_tokens": 0 } } });
        Self::event(&mut out, "message_start", &start);
        // Anthropic follows message_start with a ping; clients expect and ignore it.
        out.extend_from_slice(b"event: ping\ndata: {\"type\":\"ping\"}\n\n");
        Bytes::from(out)
    }

    fn chunk(&mut self, choices: &[ChunkChoice]) -> Bytes {
        let mut out = Vec::with_capacity(128);
        // One choice: Anthropic has no `n`.
        for c in choices.iter().filter(|c| c.index == 0) {
            if let Some(text) = c.reasoning.as_deref().filter(|t| !t.is_empty()) {
                let index = self.block(
                    &mut out,
                    Open::Thinking,
                    || serde_json::json!({ "type": "thinking", "thinking": "", "signature": "" }),
                );
                if self.show_thinking {
                    Self::delta(&mut out, index, "thinking_delta", "thinking", text);
                }
            }
            if let Some(text) = c.content.as_deref().filter(|t| !t.is_empty()) {
                let index = self.block(&mut out, Open::Text, || serde_json::json!({ "type": "text", "text": "" }));
                Self::delta(&mut out, index, "text_delta", "text", text);
            }
            for t in &c.tool_calls {
                let index = self.block(&mut out, Open::Tool(t.index), || {
                    serde_json::json!({ "type": "tool_use", "id": t.id.as_deref().unwrap_or_default(),
                        "name": t.name.as_deref().unwrap_or_default(), "input": {} })
                });
                if !t.arguments.is_empty() {
                    Self::delta(&mut out, index, "input_json_delta", "partial_json", &t.arguments);
                }
            }
            if c.finish_reason.is_some() {
                self.finish.clone_from(&c.finish_reason);
            }
        }
        Bytes::from(out)
    }

    fn finish(&mut self, usage: Option<&Usage>) -> Bytes {
        let mut out = Vec::with_capacity(256);
        self.close_block(&mut out);
        let (stop, provider) = stop_reason(self.finish.as_ref());
        let usage = UsageOut::from(&usage.copied().unwrap_or_default());
        let mut delta = serde_json::json!({ "type": "message_delta",
            "delta": { "stop_reason": stop, "stop_sequence": null }, "usage": usage });
        if let Some(p) = provider {
            delta["delta"]["provider_stop_reason"] = Value::from(p);
        }
        Self::event(&mut out, "message_delta", &delta);
        Self::event(&mut out, "message_stop", &serde_json::json!({ "type": "message_stop" }));
        Bytes::from(out)
    }

    fn fail(&mut self, e: &dyn Reported) -> Bytes {
        let mut out = b"event: error\ndata: ".to_vec();
        out.extend_from_slice(&error_body(e, &self.request_id));
        out.extend_from_slice(b"\n\n");
        Bytes::from(out)
    }

    /// The upstream's own `message_stop` was forwarded.
    fn end_forwarded(&mut self) -> Bytes {
        Bytes::new()
    }

    fn wants_usage_event(&self) -> bool {
        true
    }
}

// ---------------------------------------------------------------------------------------------
// Other endpoints

/// `GET /v1/models` as Anthropic lists models (`anthropic-version` sent): the aliases the key
/// may use.
pub fn encode_models(aliases: &[String]) -> Vec<u8> {
    let data: Vec<Value> = aliases.iter().map(|a| model_object(a)).collect();
    let body = serde_json::json!({
        "data": data, "has_more": false,
        "first_id": aliases.first(), "last_id": aliases.last(),
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// One alias as Anthropic describes a model.
fn model_object(alias: &str) -> Value {
    serde_json::json!({ "type": "model", "id": alias, "display_name": alias, "created_at": "1970-01-01T00:00:00Z" })
}

/// `GET /v1/models/{id}` for an Anthropic client.
pub fn encode_model(alias: &str) -> Vec<u8> {
    serde_json::to_vec(&model_object(alias)).unwrap_or_default()
}

/// `count_tokens`' answer.
pub fn encode_count(input_tokens: u64) -> Vec<u8> {
    let body: BTreeMap<&str, u64> = [("input_tokens", input_tokens)].into();
    serde_json::to_vec(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use ax_protocol::config::ProviderKind;
    use ax_protocol::price::Prices;
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::sse::SseEvent;
    use crate::upstream::{self as providers, StreamDecoder};

    /// One call's tokens as a provider counts them: uncached prompt, cache reads, cache writes
    /// (`hour` of them kept an hour), output (`thinking` of it reasoning).
    #[derive(Debug, Clone, Copy)]
    struct Counts {
        uncached: u64,
        read: u64,
        write: u64,
        hour: u64,
        output: u64,
        thinking: u64,
    }

    fn counts() -> impl Strategy<Value = Counts> {
        (0..2_000_000u64, 0..2_000_000u64, 0..200_000u64, 0..=100u64, 0..100_000u64, 0..=100u64).prop_map(
            |(uncached, read, write, hour_pct, output, think_pct)| Counts {
                uncached,
                read,
                write,
                hour: write * hour_pct / 100,
                output,
                thinking: output * think_pct / 100,
            },
        )
    }

    #[test]
    fn stream_events_are_anthropics_with_the_texts_escaped() {
        let mut e = Events::new("req_1", "m", true);
        let choice = |f: fn(&mut ChunkChoice)| {
            let mut c = ChunkChoice::default();
            f(&mut c);
            vec![c]
        };
        let mut sse =
            String::from_utf8(e.chunk(&choice(|c| c.reasoning = Some("think \"hard\"\n".into()))).to_vec()).unwrap();
        sse += std::str::from_utf8(&e.chunk(&choice(|c| c.content = Some("caf\u{e9} \u{1} ok".into())))).unwrap();
        sse += std::str::from_utf8(&e.chunk(&choice(|c| {
            c.tool_calls = vec![crate::canonical::ToolCallDelta {
                index: 0,
                id: Some("t1".into()),
                name: Some("f".into()),
                arguments: "{\"a\":".into(),
            }]
        })))
        .unwrap();
        sse += std::str::from_utf8(&e.finish(None)).unwrap();
        let events: Vec<(String, Value)> = sse
            .split("\n\n")
            .filter(|b| !b.is_empty())
            .map(|b| {
                let (name, data) = b.split_once('\n').unwrap();
                (
                    name.strip_prefix("event: ").unwrap().to_owned(),
                    serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap(),
                )
            })
            .collect();
        let delta = |i: u32, d: Value| json!({ "type": "content_block_delta", "index": i, "delta": d });
        let stop = |i: u32| json!({ "type": "content_block_stop", "index": i });
        let expected = [
            (
                "content_block_start",
                json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "thinking", "thinking": "", "signature": "" } }),
            ),
            ("content_block_delta", delta(0, json!({ "type": "thinking_delta", "thinking": "think \"hard\"\n" }))),
            ("content_block_stop", stop(0)),
            (
                "content_block_start",
                json!({ "type": "content_block_start", "index": 1, "content_block": { "type": "text", "text": "" } }),
            ),
            ("content_block_delta", delta(1, json!({ "type": "text_delta", "text": "caf\u{e9} \u{1} ok" }))),
            ("content_block_stop", stop(1)),
            (
                "content_block_start",
                json!({ "type": "content_block_start", "index": 2, "content_block": { "type": "tool_use", "id": "t1", "name": "f", "input": {} } }),
            ),
            ("content_block_delta", delta(2, json!({ "type": "input_json_delta", "partial_json": "{\"a\":" }))),
            ("content_block_stop", stop(2)),
        ];
        // Those, then `message_delta` and `message_stop`.
        assert_eq!(events.len(), expected.len() + 2, "{sse}");
        for (got, (name, data)) in events.iter().zip(expected) {
            assert_eq!((got.0.as_str(), &got.1), (name, &data));
        }
        // Each delta as Anthropic writes it: type, index, delta, in that order.
        assert!(sse.contains(r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"café \u0001 ok"}}"#), "{sse}");
    }

    fn event(data: Value) -> SseEvent {
        SseEvent { event: None, data: data.to_string() }
    }

    /// The usage of a whole stream, as its decoder reports it last.
    fn stream_usage(mut d: StreamDecoder, events: &[Value]) -> Usage {
        let mut last = None;
        for e in events {
            match d.on_event(&event(e.clone())).unwrap() {
                Some(crate::canonical::StreamItem::Chunk(c)) => last = c.usage.or(last),
                Some(crate::canonical::StreamItem::Raw(r)) => last = r.usage.or(last),
                _ => {}
            }
        }
        last.expect("the stream reported usage")
    }

    /// Every provider's way of writing `c` (those that cannot say a part get it zeroed), decoded
    /// as ax decodes it: (what the provider could say, the usage ax read).
    fn decoded(c: Counts) -> Vec<(&'static str, Counts, Usage)> {
        let mut out = Vec::new();
        let anthropic_usage = json!({ "input_tokens": c.uncached, "output_tokens": c.output,
            "cache_read_input_tokens": c.read, "cache_creation_input_tokens": c.write,
            "cache_creation": { "ephemeral_5m_input_tokens": c.write - c.hour, "ephemeral_1h_input_tokens": c.hour } });
        let message = json!({ "type": "message", "id": "m", "model": "x", "role": "assistant", "stop_reason": "end_turn",
            "content": [{ "type": "text", "text": "a" }], "usage": anthropic_usage });
        let whole = providers::decode_chat(ProviderKind::Anthropic, message.to_string().as_bytes()).unwrap();
        let no_think = Counts { thinking: 0, ..c };
        out.push(("anthropic", no_think, whole.usage.unwrap()));
        // A stream: the prompt's counts at message_start, the output at message_delta.
        let mut start_usage = anthropic_usage.clone();
        start_usage["output_tokens"] = json!(1);
        let events = [
            json!({ "type": "message_start", "message": { "id": "m", "type": "message", "role": "assistant",
                "content": [], "model": "x", "usage": start_usage } }),
            json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
            json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": "a" } }),
            json!({ "type": "content_block_stop", "index": 0 }),
            json!({ "type": "message_delta", "delta": { "stop_reason": "end_turn" }, "usage": { "output_tokens": c.output } }),
            json!({ "type": "message_stop" }),
        ];
        let translated = StreamDecoder::new(ProviderKind::Anthropic).unwrap();
        out.push(("anthropic stream", no_think, stream_usage(translated, &events)));
        let forwarded =
            StreamDecoder::forwarding(ProviderKind::Anthropic, crate::canonical::Protocol::AnthropicMessages).unwrap();
        out.push(("anthropic stream forwarded", no_think, stream_usage(forwarded, &events)));

        // OpenAI: the prompt includes cached tokens; OpenRouter-style cache writes in the details.
        let openai = |usage: Value| {
            json!({ "id": "c", "object": "chat.completion", "created": 1, "model": "x", "usage": usage,
                "choices": [{ "index": 0, "finish_reason": "stop", "message": { "role": "assistant", "content": "a" } }] })
        };
        let body = openai(json!({ "prompt_tokens": c.uncached + c.read + c.write, "completion_tokens": c.output,
            "prompt_tokens_details": { "cached_tokens": c.read, "cache_write_tokens": c.write },
            "completion_tokens_details": { "reasoning_tokens": c.thinking } }));
        let r = providers::decode_chat(ProviderKind::Openai, body.to_string().as_bytes()).unwrap();
        out.push(("openai", Counts { hour: 0, ..c }, r.usage.unwrap()));
        // DeepSeek: cache hits and misses at the top level.
        let body = openai(json!({ "prompt_tokens": c.uncached + c.read, "completion_tokens": c.output,
            "prompt_cache_hit_tokens": c.read, "prompt_cache_miss_tokens": c.uncached }));
        let r = providers::decode_chat(ProviderKind::Openai, body.to_string().as_bytes()).unwrap();
        out.push(("deepseek", Counts { write: 0, hour: 0, thinking: 0, ..c }, r.usage.unwrap()));
        // Gemini: thoughts counted apart from the candidates.
        let body = json!({ "candidates": [{ "index": 0, "finishReason": "STOP",
                "content": { "role": "model", "parts": [{ "text": "a" }] } }],
            "usageMetadata": { "promptTokenCount": c.uncached + c.read, "cachedContentTokenCount": c.read,
                "candidatesTokenCount": c.output - c.thinking, "thoughtsTokenCount": c.thinking } });
        let r = providers::decode_chat(ProviderKind::Gemini, body.to_string().as_bytes()).unwrap();
        out.push(("gemini", Counts { write: 0, hour: 0, ..c }, r.usage.unwrap()));
        out
    }

    #[test]
    fn text_documents_are_text_and_pdfs_need_anthropic() {
        let ask = |source: Value| {
            let body = json!({ "model": "m", "max_tokens": 10, "messages": [{ "role": "user", "content": [
                { "type": "document", "source": source, "title": "notes", "citations": { "enabled": true } },
                { "type": "text", "text": "Summarize." } ] }] });
            let body = Bytes::from(body.to_string());
            decode_canonical(&body, ax_protocol::config::ParamsMode::Strict, false).map(|(req, _)| req)
        };
        for source in [
            json!({ "type": "text", "media_type": "text/plain", "data": "Ax is a gateway." }),
            json!({ "type": "content", "content": "Ax is a gateway." }),
            json!({ "type": "content", "content": [{ "type": "text", "text": "Ax is a gateway." }] }),
        ] {
            let req = ask(source).unwrap();
            assert_eq!(req.messages[0].content.as_ref().unwrap().text(), "Ax is a gateway.Summarize.");
        }
        let e = ask(json!({ "type": "base64", "media_type": "application/pdf", "data": "JVBERi0=" })).unwrap_err();
        assert_eq!(e.code(), "invalid_request");
        assert_eq!(e.param(), Some("messages[0].content[0].source"));
    }

    proptest! {
        /// Whatever provider reports a call's usage, and however (whole, streamed, forwarded),
        /// the canonical usage holds the same counts; an Anthropic caller gets them in Anthropic's
        /// convention (input without either cache count, writes split 5m/1h), an OpenAI caller in
        /// OpenAI's (prompt with them), and the cost is each part at its own price, rounded once.
        #[test]
        fn every_providers_usage_is_reported_and_priced_exactly(
            c in counts(),
            prices in (0..20_000_000u64, 0..80_000_000u64, 0..2_000_000u64, 0..25_000_000u64, 0..40_000_000u64),
        ) {
            let (input, output, cached_input, cache_write, cache_write_1h) = prices;
            let p = Prices { input, output, cached_input, cache_write, cache_write_1h };
            for (shape, want, got) in decoded(c) {
                prop_assert_eq!(got.prompt_tokens, want.uncached + want.read + want.write, "{}", shape);
                prop_assert_eq!(got.cached_tokens, want.read, "{}", shape);
                prop_assert_eq!(got.cache_write_tokens, want.write, "{}", shape);
                prop_assert_eq!(got.cache_write_1h_tokens, want.hour, "{}", shape);
                prop_assert_eq!(got.completion_tokens, want.output, "{}", shape);
                prop_assert_eq!(got.reasoning_tokens, want.thinking, "{}", shape);

                let out = UsageOut::from(&got);
                prop_assert_eq!(out, UsageOut {
                    input_tokens: want.uncached,
                    output_tokens: want.output,
                    cache_creation_input_tokens: want.write,
                    cache_read_input_tokens: want.read,
                    cache_creation: CacheCreationOut {
                        ephemeral_5m_input_tokens: want.write - want.hour,
                        ephemeral_1h_input_tokens: want.hour,
                    },
                }, "{}", shape);
                let openai: Value = serde_json::to_value(got).unwrap();
                prop_assert_eq!(&openai["prompt_tokens"], &json!(want.uncached + want.read + want.write));
                prop_assert_eq!(&openai["prompt_tokens_details"]["cached_tokens"], &json!(want.read));

                let by_hand = u128::from(want.uncached) * u128::from(input)
                    + u128::from(want.read) * u128::from(cached_input)
                    + u128::from(want.write - want.hour) * u128::from(cache_write)
                    + u128::from(want.hour) * u128::from(cache_write_1h)
                    + u128::from(want.output) * u128::from(output);
                let by_hand = u64::try_from((by_hand + 500_000) / 1_000_000).unwrap();
                prop_assert_eq!(p.cost_micro_usd(got.tokens()), by_hand, "{}", shape);
            }
        }
    }
}
