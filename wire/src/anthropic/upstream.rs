//! Anthropic Messages API.
//!
//! Request: system and developer messages are hoisted into `system`; tool results become
//! `tool_result` blocks in a user turn; consecutive same-role turns are merged (the API requires
//! alternation); `max_tokens` is always sent; temperature as given, clamped into Anthropic's 0..1.
//! Stream: content-block indexes count text and tool_use blocks together, while OpenAI's
//! `tool_calls[].index` counts tool calls only, so the decoder keeps that mapping.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use bytes::Bytes;

use super::{Metadata, Thinking, Usage as AnthropicUsage};
use crate::adapter::{classify, error_body, status_of_error_type, tool_arguments, Ctx};
use crate::canonical::TextOut;
use crate::canonical::{
    ChatRequest, ChatResponse, Choice, Content, ContentPart, FinishReason, FunctionCall, ReasoningEffort,
    ResponseFormat, Role, ToolCall, ToolChoice, ToolKind,
};
use crate::json::read::IsError;
use crate::json::write::{copied, write_json, write_str, write_text};
use crate::json::{Payload, PayloadWriter};
use crate::Error;

mod stream;
pub use stream::*;

/// Request parameters this adapter maps (see `ChatRequest::set_params`).
pub const SUPPORTED: &[&str] = &[
    "temperature",
    "top_p",
    "stop",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "user",
    // Strict tool use and JSON outputs (`output_config.format`): Anthropic's structured outputs.
    "tools.function.strict",
    "response_format.json_schema",
];

/// The request's fields after `messages`: written by serde after the ones `encode_chat` writes by
/// hand.
#[derive(Serialize)]
struct AnthropicRest<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_sequences: Option<&'a [String]>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<AnthropicTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<Metadata<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_config: Option<Value>,
}

/// `max_tokens`, and extended thinking for a request with a reasoning control to a model that
/// takes one (a budget of at least Anthropic's 1,024, below `max_tokens`, which counts it).
///
/// An effort (OpenAI's `reasoning_effort`, whose output cap is the answer's) keeps the answer its
/// room: `max_tokens` is the budget plus the caller's cap (else the default), within the model's
/// cap; where that cap binds, the answer keeps up to half of it and the budget the rest. A budget
/// the caller named (an Anthropic caller's `budget_tokens`) already counts inside its own
/// `max_tokens`, as Anthropic's does, and is sent so.
///
/// No thinking when the conversation already holds tool calls (Anthropic wants each earlier
/// turn's signed thinking block back, which a caller of another protocol never had), nor with a
/// forced tool choice, which Anthropic refuses with thinking.
fn thinking(ctx: &Ctx<'_>, r: &ChatRequest) -> (u32, Option<Thinking>) {
    const MIN: u32 = 1_024;
    let answer = r.max_output().unwrap_or(ctx.max_tokens);
    let forced = matches!(r.tool_choice, Some(ToolChoice::Required | ToolChoice::Function(_)));
    if !ctx.reasoning || forced || r.messages.iter().any(|m| m.tool_calls.as_ref().is_some_and(|c| !c.is_empty())) {
        return (answer, None);
    }
    let Some(wanted) = ReasoningEffort::budget_of(r) else { return (answer, None) };
    let (max_tokens, budget) = match r.thinking_budget {
        Some(own) => (answer, own.min(answer.saturating_sub(1))),
        None => {
            let cap = ctx.output_cap.unwrap_or(u32::MAX);
            match wanted.checked_add(answer).filter(|total| *total <= cap) {
                Some(total) => (total, wanted),
                None => (cap, wanted.min(cap - answer.min(cap / 2))),
            }
        }
    };
    if budget < MIN {
        return (answer, None);
    }
    (max_tokens, Some(Thinking { kind: Cow::Borrowed("enabled"), budget_tokens: Some(budget), display: None }))
}

struct AnthropicMessage<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

impl AnthropicMessage<'_> {
    fn write(&self, out: &mut PayloadWriter) -> Result<(), Error> {
        out.buf.extend_from_slice(b"{\"role\":\"");
        out.buf.extend_from_slice(self.role.as_bytes());
        out.buf.extend_from_slice(b"\",\"content\":[");
        for (i, block) in self.content.iter().enumerate() {
            if i > 0 {
                out.buf.push(b',');
            }
            block.write(out)?;
        }
        out.buf.extend_from_slice(b"]}");
        Ok(())
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: TextOut<'a>,
    },
    Image {
        source: ImageSource<'a>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: TextOut<'a>,
    },
    /// A result that holds images: its texts and images as blocks.
    #[serde(rename = "tool_result")]
    ToolResultBlocks {
        tool_use_id: &'a str,
        content: Vec<Block<'a>>,
    },
}

impl Block<'_> {
    fn copied(&self) -> usize {
        match self {
            Self::Text { text } | Self::ToolResult { content: text, .. } => copied(text),
            Self::ToolResultBlocks { content, .. } => content.iter().map(Block::copied).sum(),
            Self::Image { source: ImageSource::Base64 { media_type, data } } => media_type.len() + data.len() + 64,
            Self::Image { source: ImageSource::Url { url } } => url.len() + 32,
            Self::ToolUse { .. } => 0,
        }
    }

    /// Text blocks by hand (most of a conversation), the rest through serde.
    fn write(&self, out: &mut PayloadWriter) -> Result<(), Error> {
        match self {
            Self::Text { text } => {
                out.buf.extend_from_slice(b"{\"type\":\"text\",\"text\":");
                write_text(out, text)?;
            }
            Self::ToolResult { tool_use_id, content } => {
                out.buf.extend_from_slice(b"{\"type\":\"tool_result\",\"tool_use_id\":");
                write_json(&mut out.buf, tool_use_id)?;
                out.buf.extend_from_slice(b",\"content\":");
                write_text(out, content)?;
            }
            Self::Image { source } => {
                // By hand: an image's base64 is often hundreds of KB (`write_str`).
                out.buf.extend_from_slice(b"{\"type\":\"image\",\"source\":");
                match source {
                    ImageSource::Base64 { media_type, data } => {
                        out.buf.extend_from_slice(b"{\"type\":\"base64\",\"media_type\":");
                        write_str(&mut out.buf, media_type)?;
                        out.buf.extend_from_slice(b",\"data\":");
                        write_str(&mut out.buf, data)?;
                    }
                    ImageSource::Url { url } => {
                        out.buf.extend_from_slice(b"{\"type\":\"url\",\"url\":");
                        write_str(&mut out.buf, url)?;
                    }
                }
                out.buf.push(b'}');
            }
            Self::ToolResultBlocks { tool_use_id, content } => {
                out.buf.extend_from_slice(b"{\"type\":\"tool_result\",\"tool_use_id\":");
                write_json(&mut out.buf, tool_use_id)?;
                out.buf.extend_from_slice(b",\"content\":[");
                for (i, block) in content.iter().enumerate() {
                    if i > 0 {
                        out.buf.push(b',');
                    }
                    block.write(out)?;
                }
                out.buf.push(b']');
            }
            other => return write_json(&mut out.buf, other),
        }
        out.buf.push(b'}');
        Ok(())
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ImageSource<'a> {
    Base64 { media_type: &'a str, data: &'a str },
    Url { url: &'a str },
}

#[derive(Serialize)]
struct AnthropicTool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: Cow<'a, Value>,
    /// Strict tool use: the input is constrained to the schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
}

/// The blocks `content_blocks` makes of a content at most: a message's blocks are allocated once
/// (growing from empty cost ~100 instructions a message).
fn block_count(c: &Content) -> usize {
    match c {
        Content::Text(_) => 1,
        Content::Parts(parts) => parts.len(),
    }
}

fn content_blocks<'a>(c: &'a Content, out: &mut Vec<Block<'a>>) {
    match c {
        Content::Text(t) => {
            if !t.is_empty() {
                out.push(Block::Text { text: t.out() });
            }
        }
        Content::Parts(parts) => {
            for p in parts {
                match p {
                    ContentPart::Text { text } if !text.is_empty() => out.push(Block::Text { text: text.out() }),
                    ContentPart::Text { .. } => {}
                    ContentPart::ImageUrl { image_url } => {
                        let source = match image_url.as_data() {
                            Some((media_type, data)) => ImageSource::Base64 { media_type, data },
                            None => ImageSource::Url { url: &image_url.url },
                        };
                        out.push(Block::Image { source });
                    }
                }
            }
        }
    }
}

/// System texts as one, separated by blank lines.
fn joined(texts: Vec<TextOut<'_>>) -> Option<TextOut<'_>> {
    if texts.len() <= 1 {
        return texts.into_iter().next();
    }
    let literals: Option<Vec<&Bytes>> = texts.iter().map(TextOut::literal).collect();
    if let Some(literals) = literals {
        // Literals join as literals: their insides, with an escaped blank line between.
        let mut out = Vec::with_capacity(literals.iter().map(|j| j.len() + 4).sum());
        out.push(b'"');
        for (i, json) in literals.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b"\\n\\n");
            }
            out.extend_from_slice(&json[1..json.len() - 1]);
        }
        out.push(b'"');
        return Some(TextOut::Json(Cow::Owned(Bytes::from(out))));
    }
    let decoded: Vec<Cow<'_, str>> = texts.iter().map(TextOut::decoded).collect();
    Some(TextOut::Plain(Cow::Owned(decoded.join("\n\n"))))
}

/// The request body: the caller's texts, where they are long literals, are not copied into it but
/// sent as the slices of the caller's body they are (a `Payload` in pieces).
pub fn encode_chat(ctx: Ctx<'_>, r: &ChatRequest) -> Result<Payload, Error> {
    let mut system: Vec<TextOut<'_>> = Vec::new();
    let mut messages: Vec<AnthropicMessage<'_>> = Vec::with_capacity(r.messages.len());
    for (i, m) in r.messages.iter().enumerate() {
        let (role, mut blocks) = match m.role {
            Role::System | Role::Developer => {
                if let Some(c) = &m.content {
                    system.push(c.text_out());
                }
                continue;
            }
            Role::User => {
                let mut b = Vec::with_capacity(m.content.as_ref().map_or(0, block_count));
                if let Some(c) = &m.content {
                    content_blocks(c, &mut b);
                }
                ("user", b)
            }
            Role::Tool => {
                let id = m.tool_call_id.as_deref().unwrap_or_default();
                let block = match &m.content {
                    Some(c) if c.has_images() => {
                        let mut content = Vec::with_capacity(block_count(c));
                        content_blocks(c, &mut content);
                        Block::ToolResultBlocks { tool_use_id: id, content }
                    }
                    c => Block::ToolResult {
                        tool_use_id: id,
                        content: c.as_ref().map_or(TextOut::Plain(Cow::Borrowed("")), Content::text_out),
                    },
                };
                ("user", vec![block])
            }
            Role::Assistant => {
                let calls = m.tool_calls.as_ref().map_or(0, Vec::len);
                let mut b = Vec::with_capacity(m.content.as_ref().map_or(0, block_count) + calls);
                if let Some(c) = &m.content {
                    content_blocks(c, &mut b);
                }
                for (j, tc) in m.tool_calls.iter().flatten().enumerate() {
                    let input = tool_arguments(&tc.function.arguments, i, j)?;
                    b.push(Block::ToolUse { id: &tc.id, name: &tc.function.name, input });
                }
                ("assistant", b)
            }
        };
        // Tool results must come first in their user turn; a user message after tool results
        // joins that same turn.
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.append(&mut blocks),
            _ => messages.push(AnthropicMessage { role, content: blocks }),
        }
    }
    if messages.is_empty() {
        return Err(Error::invalid_param("messages", "Anthropic needs at least one user or assistant message"));
    }

    let tools = r
        .tools
        .iter()
        .flatten()
        .map(|t| AnthropicTool {
            name: &t.function.name,
            description: t.function.description.as_deref(),
            input_schema: match &t.function.parameters {
                Some(p) => Cow::Borrowed(p),
                None => Cow::Owned(serde_json::json!({ "type": "object", "properties": {} })),
            },
            strict: t.function.strict.filter(|s| *s),
        })
        .collect();
    let disable_parallel = r.parallel_tool_calls == Some(false);
    let tool_choice = match (&r.tool_choice, disable_parallel) {
        (None, false) => None,
        (None | Some(ToolChoice::Auto), _) => Some(serde_json::json!({ "type": "auto" })),
        (Some(ToolChoice::None), _) => Some(serde_json::json!({ "type": "none" })),
        (Some(ToolChoice::Required), _) => Some(serde_json::json!({ "type": "any" })),
        (Some(ToolChoice::Function(name)), _) => Some(serde_json::json!({ "type": "tool", "name": name })),
    }
    .map(|mut v| {
        if disable_parallel && v["type"] != "none" {
            v["disable_parallel_tool_use"] = Value::Bool(true);
        }
        v
    });

    let (max_tokens, thinking) = thinking(&ctx, r);
    // Anthropic refuses a temperature or a narrowed top_p with thinking on.
    let sampling = thinking.is_none();
    // The head and the conversation by hand (serde's per-field cost was ~1k instructions a
    // message), then the other fields through serde, their `{` turned into a `,`.
    let system = joined(system);
    let copied =
        messages.iter().flat_map(|m| &m.content).map(Block::copied).sum::<usize>() + system.as_ref().map_or(0, copied);
    let mut out = PayloadWriter::new(crate::json::write::body_buffer(copied));
    out.buf.extend_from_slice(b"{\"model\":");
    write_json(&mut out.buf, ctx.model)?;
    out.buf.extend_from_slice(b",\"max_tokens\":");
    crate::json::write::uint(&mut out.buf, u64::from(max_tokens));
    if let Some(system) = system {
        out.buf.extend_from_slice(b",\"system\":");
        write_text(&mut out, &system)?;
    }
    out.buf.extend_from_slice(b",\"messages\":[");
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            out.buf.push(b',');
        }
        m.write(&mut out)?;
    }
    out.buf.push(b']');
    let rest = AnthropicRest {
        // Temperature is the same quantity in every API (it divides the logits); Anthropic's
        // range stops at 1, so a hotter request gets Anthropic's hottest.
        temperature: r.temperature.map(|t| t.min(1.0)).filter(|_| sampling),
        top_p: r.top_p.filter(|_| sampling),
        top_k: r.top_k.filter(|_| sampling),
        stop_sequences: r.stop.as_ref().map(|s| s.0.as_slice()),
        stream: r.stream,
        tools,
        tool_choice,
        // Both name the end user for abuse detection; `user` when a caller sends both.
        metadata: r
            .user
            .as_deref()
            .or(r.safety_identifier.as_deref())
            .map(|user_id| Metadata { user_id: Some(Cow::Borrowed(user_id)) }),
        thinking,
        output_config: match &r.response_format {
            Some(ResponseFormat::JsonSchema { json_schema }) => {
                Some(serde_json::json!({ "format": { "type": "json_schema", "schema": json_schema.schema } }))
            }
            _ => None,
        },
    };
    let at = out.buf.len();
    write_json(&mut out.buf, &rest)?;
    if out.buf.len() - at <= 2 {
        out.buf.truncate(at); // `{}`: nothing more
        out.buf.push(b'}');
    } else {
        out.buf[at] = b',';
    }
    Ok(out.finish())
}

// ---------------------------------------------------------------------------------------------
// Response

#[derive(Deserialize)]
struct AnthropicResponse {
    #[serde(rename = "type", default)]
    kind: IsError,
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    content: Vec<RespBlock>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: AnthropicUsage,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum RespBlock {
    Text {
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

pub fn finish_reason(raw: &str) -> FinishReason {
    match raw {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Unmapped(other.to_owned()),
    }
}

fn embedded_error(v: &Value) -> Option<Error> {
    if v.get("type").and_then(Value::as_str) != Some("error") {
        return None;
    }
    let t = v.pointer("/error/type").and_then(Value::as_str).unwrap_or("api_error");
    Some(classify(status_of_error_type(t), Some(t)))
}

pub fn decode_chat(body: &[u8]) -> Result<ChatResponse, Error> {
    let r: AnthropicResponse = crate::json::read::from_json(body).map_err(|_| error_body(body, embedded_error))?;
    if r.kind.0 {
        return Err(error_body(body, embedded_error));
    }
    let mut text: Option<String> = None;
    let mut reasoning: Option<String> = None;
    let mut tool_calls = Vec::new();
    for b in r.content {
        match b {
            RespBlock::Text { text: t } => text.get_or_insert_with(String::new).push_str(&t),
            RespBlock::Thinking { thinking } => reasoning.get_or_insert_with(String::new).push_str(&thinking),
            RespBlock::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                id,
                kind: ToolKind::Function,
                function: FunctionCall { name, arguments: input.to_string() },
            }),
            RespBlock::Other => {}
        }
    }
    Ok(ChatResponse {
        id: r.id,
        created: 0,
        model: r.model,
        choices: vec![Choice {
            index: 0,
            content: text,
            refusal: None,
            tool_calls,
            finish_reason: r.stop_reason.as_deref().map(finish_reason),
            logprobs: None,
            reasoning: reasoning.filter(|t| !t.is_empty()),
        }],
        usage: Some(r.usage.canonical()),
        system_fingerprint: None,
    })
}

pub fn error_code(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.pointer("/error/type").and_then(Value::as_str).map(str::to_owned)
}
