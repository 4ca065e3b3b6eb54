//! The canonical answer in Anthropic's shape: a `message`, stream events (`Events`), errors, and
//! the other endpoints' bodies.

use crate::canonical::StreamEncoder;
use crate::canonical::{ChatResponse, ChunkChoice, FinishReason, Usage};
use crate::Reported;
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

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
    usage: crate::anthropic::Usage,
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
        usage: crate::anthropic::Usage::from(&r.usage.unwrap_or_default()),
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
            crate::json::write::uint(out, index as u64);
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
        crate::json::write::uint(out, index as u64);
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
        let usage = crate::anthropic::Usage::from(&usage.copied().unwrap_or_default());
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
