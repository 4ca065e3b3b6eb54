//! The canonical answer as the Responses API gives it: a `response` (and a stored one's listing),
//! its stream events (`Events`), errors.

use super::*;
use crate::canonical::StreamEncoder;
use crate::canonical::{unix_now, ChatResponse, ChunkChoice, FinishReason, Usage};
use crate::responses::Link;
use crate::{Error, Reported};
use bytes::Bytes;
use serde_json::{json, Value};

/// What a response says of how it was asked for.
#[derive(Clone, Default)]
pub struct Echo {
    pub store: bool,
    pub previous_response_id: Option<String>,
}

/// The part of a response id item ids are made of.
fn item_stem(id: &str) -> &str {
    id.strip_prefix("resp_").unwrap_or(id)
}

/// `completed`, or `incomplete` with its reason.
fn status(f: Option<&FinishReason>) -> (&'static str, Value) {
    match f {
        Some(FinishReason::Length) => ("incomplete", json!({ "reason": "max_output_tokens" })),
        Some(FinishReason::ContentFilter) => ("incomplete", json!({ "reason": "content_filter" })),
        _ => ("completed", Value::Null),
    }
}

fn usage(u: &Usage) -> Value {
    json!({ "input_tokens": u.prompt_tokens, "input_tokens_details": { "cached_tokens": u.cached_tokens },
        "output_tokens": u.completion_tokens, "output_tokens_details": { "reasoning_tokens": u.reasoning_tokens },
        "total_tokens": u.total() })
}

/// A `response` object around `output`.
fn response(
    id: &str,
    model: &str,
    created_at: u64,
    status: &str,
    output: Vec<Value>,
    echo: &Echo,
    extra: Value,
) -> Value {
    let mut r = json!({ "id": id, "object": "response", "created_at": created_at, "status": status, "model": model,
        "output": output, "error": null, "incomplete_details": null, "instructions": null, "metadata": {},
        "parallel_tool_calls": true, "temperature": null, "top_p": null, "tool_choice": "auto", "tools": [],
        "store": echo.store, "previous_response_id": echo.previous_response_id,
        "text": { "format": { "type": "text" } }, "usage": null });
    if let (Value::Object(r), Value::Object(extra)) = (&mut r, extra) {
        r.extend(extra);
    }
    r
}

fn reasoning_item(id: &str, text: &str) -> Value {
    json!({ "type": "reasoning", "id": id, "summary": [{ "type": "summary_text", "text": text }] })
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({ "type": "message", "id": id, "role": "assistant", "status": status,
        "content": [{ "type": "output_text", "text": text, "annotations": [] }] })
}

fn call_item(call_id: &str, (name, namespace): (&str, Option<&str>), arguments: &str, status: &str) -> Value {
    let mut item = json!({ "type": "function_call", "id": format!("fc_{call_id}"), "call_id": call_id, "name": name,
        "arguments": arguments, "status": status });
    if let Some(ns) = namespace {
        item["namespace"] = Value::from(ns);
    }
    item
}

/// A whole canonical answer as the `response` `id`; calls of namespaced tools name their namespace.
pub fn encode_response(r: &ChatResponse, id: &str, model: &str, namespaces: &[String], echo: &Echo) -> Vec<u8> {
    let rid = item_stem(id);
    let choice = r.choices.first();
    let mut output = Vec::new();
    if let Some(c) = choice {
        if let Some(t) = c.reasoning.as_deref() {
            output.push(reasoning_item(&format!("rs_{rid}"), t));
        }
        let text = c.content.as_deref().filter(|t| !t.is_empty()).or(c.refusal.as_deref());
        if let Some(t) = text {
            output.push(message_item(&format!("msg_{rid}"), t, "completed"));
        }
        for t in &c.tool_calls {
            output.push(call_item(&t.id, split_name(&t.function.name, namespaces), &t.function.arguments, "completed"));
        }
    }
    let (status, incomplete) = status(choice.and_then(|c| c.finish_reason.as_ref()));
    let u = r.usage.unwrap_or_default();
    let model = if r.model.is_empty() { model } else { &r.model };
    let created = if r.created == 0 { unix_now() } else { r.created };
    let extra = json!({ "incomplete_details": incomplete, "usage": usage(&u) });
    let body = response(id, model, created, status, output, echo, extra);
    serde_json::to_vec(&body).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Stored responses

/// `GET /v1/responses/{id}/input_items`'s query: `limit` (1–100, 20), `order` (`desc`), `after`.
pub struct ListQuery {
    limit: usize,
    ascending: bool,
    after: Option<String>,
}

impl ListQuery {
    pub fn parse(query: &str) -> Result<Self, Error> {
        let mut q = Self { limit: 20, ascending: false, after: None };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_encoding::percent_decode_str(v).decode_utf8_lossy();
            match k {
                "limit" => {
                    q.limit = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=100).contains(n))
                        .ok_or_else(|| Error::invalid_param("limit", "'limit' must be between 1 and 100"))?;
                }
                "order" => {
                    q.ascending = match &*v {
                        "asc" => true,
                        "desc" => false,
                        _ => return Err(Error::invalid_param("order", "'order' must be 'asc' or 'desc'")),
                    }
                }
                "after" => q.after = Some(v.into_owned()),
                // `include` asks for fields of items ax does not keep apart (they are kept whole).
                _ => {}
            }
        }
        Ok(q)
    }
}

/// Every item a stored response was made from, oldest first: the earlier turns' input and output
/// items, then its own input, as OpenAI lists them (`listed`). Items sent without an id are given
/// one by their place.
fn context_items(chain: &[Link]) -> Vec<Value> {
    let mut out = Vec::new();
    for (n, l) in chain.iter().enumerate() {
        let stem = item_stem(&l.id);
        for (k, mut item) in link_input(l).unwrap_or_default().into_iter().enumerate() {
            if item.get("type").is_none() {
                item["type"] = Value::from("message");
            }
            if item.get("id").is_none() {
                let prefix = match item["type"].as_str() {
                    Some("function_call_output") => "fco",
                    Some("function_call") => "fc",
                    Some("reasoning") => "rs",
                    _ => "msg",
                };
                item["id"] = Value::from(format!("{prefix}_{stem}_in{k}"));
            }
            out.push(listed(item));
        }
        if n + 1 < chain.len() {
            out.extend(link_output(l).unwrap_or_default());
        }
    }
    out
}

/// An input item as OpenAI lists it: a message's `content` is a list of typed parts (a caller may
/// have sent a string: the SDKs' types expect the list, and iterating a string yields its
/// characters), `output_text` for the assistant's and `input_text` for the others', and a
/// message has a `status`.
fn listed(mut item: Value) -> Value {
    if item["type"] != "message" {
        return item;
    }
    if let Some(text) = item.get_mut("content").filter(|c| c.is_string()).map(Value::take) {
        let part = if item["role"] == "assistant" {
            json!({ "type": "output_text", "text": text, "annotations": [] })
        } else {
            json!({ "type": "input_text", "text": text })
        };
        item["content"] = json!([part]);
    }
    if item.get("status").is_none() {
        item["status"] = Value::from("completed");
    }
    item
}

/// The `list` of a stored response's input items.
pub fn encode_input_items(chain: &[Link], q: &ListQuery) -> Vec<u8> {
    let mut items = context_items(chain);
    if !q.ascending {
        items.reverse();
    }
    let start = match &q.after {
        Some(after) => items.iter().position(|i| i["id"].as_str() == Some(after)).map_or(items.len(), |p| p + 1),
        None => 0,
    };
    let rest = items.len().saturating_sub(start);
    let data: Vec<Value> = items.into_iter().skip(start).take(q.limit).collect();
    let list = json!({ "object": "list", "first_id": data.first().map(|i| i["id"].clone()),
        "last_id": data.last().map(|i| i["id"].clone()), "has_more": rest > data.len(), "data": data });
    serde_json::to_vec(&list).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Streams

/// The output item being streamed.
enum Open {
    Reasoning {
        text: String,
    },
    Message {
        text: String,
    },
    /// A function call: its index among the choice's tool calls, call id, name and arguments.
    Call {
        tool: u32,
        call_id: String,
        name: String,
        arguments: String,
    },
}

/// The stream encoder of one Responses request: `response.created` and `response.in_progress`,
/// then each output item between `response.output_item.added` and `.done` (reasoning summary
/// text, output text with its content part, function call arguments, each with their deltas
/// and `.done`), then `response.completed` (or `response.incomplete`) with the whole response
/// and its usage. An upstream failure after the first event is `response.failed`.
pub struct Events {
    id: String,
    /// `id` without its `resp_` prefix: what item ids are made of.
    rid: String,
    model: String,
    created_at: u64,
    seq: u64,
    /// The open item and its output index.
    open: Option<(usize, String, Open)>,
    /// The finished items, for the final response.
    output: Vec<Value>,
    finish: Option<FinishReason>,
    /// The request's tool namespaces (see `split_name`).
    namespaces: Vec<String>,
    echo: Echo,
    /// Keeps the completed response (its JSON), before the stream's last event goes out.
    save: Option<Save>,
    saving: Option<BoxFuture>,
}

type BoxFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
/// Given the completed response object, the work that stores it.
pub type Save = Box<dyn FnOnce(Bytes) -> BoxFuture + Send>;

/// The three text deltas of a stream, most of its events: the event, the index key it has
/// besides `output_index`, whether it carries an empty `logprobs`.
#[derive(Clone, Copy)]
enum Delta {
    Reasoning,
    Text,
    Arguments,
}

impl Delta {
    fn shape(self) -> (&'static str, Option<&'static str>, bool) {
        match self {
            Self::Reasoning => ("response.reasoning_summary_text.delta", Some("summary_index"), false),
            Self::Text => ("response.output_text.delta", Some("content_index"), true),
            Self::Arguments => ("response.function_call_arguments.delta", None, false),
        }
    }
}

/// A delta event by hand: through a `serde_json::Value` each cost a map built, written and freed
/// (~4,500 instructions an event).
fn delta_event(out: &mut Vec<u8>, seq: &mut u64, delta: Delta, item_id: &str, index: usize, text: &str) {
    let (kind, part, logprobs) = delta.shape();
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\ndata: {\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"item_id\":");
    let _ = serde_json::to_writer(&mut *out, item_id);
    out.extend_from_slice(b",\"output_index\":");
    crate::json::write::uint(out, index as u64);
    if let Some(part) = part {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(part.as_bytes());
        out.extend_from_slice(b"\":0");
    }
    out.extend_from_slice(b",\"delta\":");
    let _ = serde_json::to_writer(&mut *out, text);
    if logprobs {
        out.extend_from_slice(b",\"logprobs\":[]");
    }
    out.extend_from_slice(b",\"sequence_number\":");
    crate::json::write::uint(out, *seq);
    *seq += 1;
    out.extend_from_slice(b"}\n\n");
}

impl Events {
    pub fn new(id: &str, model: &str, namespaces: Vec<String>, echo: Echo, save: Option<Save>) -> Self {
        Self {
            rid: item_stem(id).to_owned(),
            id: id.to_owned(),
            echo,
            save,
            saving: None,
            model: model.to_owned(),
            created_at: unix_now(),
            seq: 0,
            open: None,
            output: Vec::new(),
            finish: None,
            namespaces,
        }
    }

    fn event(&mut self, out: &mut Vec<u8>, kind: &str, mut data: Value) {
        data["type"] = Value::from(kind);
        data["sequence_number"] = Value::from(self.seq);
        self.seq += 1;
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        let _ = serde_json::to_writer(&mut *out, &data);
        out.extend_from_slice(b"\n\n");
    }
    /// The id of the next output item: `<prefix>_<response>_<index>`.
    fn item_id(&self, prefix: &str) -> String {
        format!("{prefix}_{}_{}", self.rid, self.output.len())
    }

    fn skeleton(&self, status: &str) -> Value {
        response(&self.id, &self.model, self.created_at, status, self.output.clone(), &self.echo, json!({}))
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        let Some((index, item_id, open)) = self.open.take() else { return };
        let item = match open {
            Open::Reasoning { text } => {
                let part = json!({ "type": "summary_text", "text": text });
                self.event(
                    out,
                    "response.reasoning_summary_text.done",
                    json!({ "item_id": item_id, "output_index": index, "summary_index": 0, "text": text }),
                );
                self.event(
                    out,
                    "response.reasoning_summary_part.done",
                    json!({ "item_id": item_id, "output_index": index, "summary_index": 0, "part": part }),
                );
                reasoning_item(&item_id, &text)
            }
            Open::Message { text } => {
                self.event(out, "response.output_text.done",
                    json!({ "item_id": item_id, "output_index": index, "content_index": 0, "text": text, "logprobs": [] }));
                self.event(
                    out,
                    "response.content_part.done",
                    json!({ "item_id": item_id, "output_index": index,
                    "content_index": 0, "part": { "type": "output_text", "text": text, "annotations": [] } }),
                );
                message_item(&item_id, &text, "completed")
            }
            Open::Call { call_id, name, arguments, .. } => {
                self.event(
                    out,
                    "response.function_call_arguments.done",
                    json!({ "item_id": item_id, "output_index": index, "name": name, "arguments": arguments }),
                );
                call_item(&call_id, split_name(&name, &self.namespaces), &arguments, "completed")
            }
        };
        self.event(out, "response.output_item.done", json!({ "output_index": index, "item": item }));
        self.output.push(item);
    }

    /// Opens the next output item (closing the one open): `added` with the item as it starts.
    fn open(&mut self, out: &mut Vec<u8>, item_id: String, open: Open) -> usize {
        self.close(out);
        let index = self.output.len();
        let item = match &open {
            Open::Reasoning { .. } => json!({ "type": "reasoning", "id": item_id, "summary": [] }),
            Open::Message { .. } => {
                json!({ "type": "message", "id": item_id, "role": "assistant", "status": "in_progress", "content": [] })
            }
            Open::Call { call_id, name, .. } => {
                call_item(call_id, split_name(name, &self.namespaces), "", "in_progress")
            }
        };
        self.event(out, "response.output_item.added", json!({ "output_index": index, "item": item }));
        match &open {
            Open::Reasoning { .. } => self.event(out, "response.reasoning_summary_part.added", json!({ "item_id": item_id,
                "output_index": index, "summary_index": 0, "part": { "type": "summary_text", "text": "" } })),
            Open::Message { .. } => self.event(out, "response.content_part.added", json!({ "item_id": item_id,
                "output_index": index, "content_index": 0, "part": { "type": "output_text", "text": "", "annotations": [] } })),
            Open::Call { .. } => {}
        }
        self.open = Some((index, item_id, open));
        index
    }
}

impl StreamEncoder for Events {
    fn start(&mut self, _n: u32) -> Bytes {
        let mut out = Vec::with_capacity(1024);
        let r = self.skeleton("in_progress");
        self.event(&mut out, "response.created", json!({ "response": r }));
        self.event(&mut out, "response.in_progress", json!({ "response": r }));
        Bytes::from(out)
    }

    fn chunk(&mut self, choices: &[ChunkChoice]) -> Bytes {
        let mut out = Vec::with_capacity(256);
        // One choice: the Responses API has no `n`.
        for c in choices.iter().filter(|c| c.index == 0) {
            if let Some(delta) = c.reasoning.as_deref().filter(|t| !t.is_empty()) {
                if !matches!(self.open, Some((_, _, Open::Reasoning { .. }))) {
                    self.open(&mut out, self.item_id("rs"), Open::Reasoning { text: String::new() });
                }
                if let Some((index, item_id, Open::Reasoning { text })) = &mut self.open {
                    text.push_str(delta);
                    delta_event(&mut out, &mut self.seq, Delta::Reasoning, item_id, *index, delta);
                }
            }
            if let Some(delta) = c.content.as_deref().filter(|t| !t.is_empty()) {
                if !matches!(self.open, Some((_, _, Open::Message { .. }))) {
                    self.open(&mut out, self.item_id("msg"), Open::Message { text: String::new() });
                }
                if let Some((index, item_id, Open::Message { text })) = &mut self.open {
                    text.push_str(delta);
                    delta_event(&mut out, &mut self.seq, Delta::Text, item_id, *index, delta);
                }
            }
            for t in &c.tool_calls {
                let same = matches!(&self.open, Some((_, _, Open::Call { tool, .. })) if *tool == t.index);
                if !same {
                    let call_id = t.id.clone().unwrap_or_else(|| format!("call_{}_{}", self.rid, t.index));
                    let name = t.name.clone().unwrap_or_default();
                    let open = Open::Call { tool: t.index, call_id: call_id.clone(), name, arguments: String::new() };
                    self.open(&mut out, format!("fc_{call_id}"), open);
                }
                if let Some((index, item_id, Open::Call { arguments, .. })) = &mut self.open {
                    if !t.arguments.is_empty() {
                        arguments.push_str(&t.arguments);
                        delta_event(&mut out, &mut self.seq, Delta::Arguments, item_id, *index, &t.arguments);
                    }
                }
            }
            if c.finish_reason.is_some() {
                self.finish.clone_from(&c.finish_reason);
            }
        }
        Bytes::from(out)
    }

    fn finish(&mut self, u: Option<&Usage>) -> Bytes {
        let mut out = Vec::with_capacity(1024);
        self.close(&mut out);
        let (status, incomplete) = status(self.finish.as_ref());
        let mut r = self.skeleton(status);
        r["incomplete_details"] = incomplete;
        r["usage"] = usage(&u.copied().unwrap_or_default());
        let kind = if status == "completed" { "response.completed" } else { "response.incomplete" };
        if let Some(save) = self.save.take() {
            self.saving = Some(save(Bytes::from(serde_json::to_vec(&r).unwrap_or_default())));
        }
        self.event(&mut out, kind, json!({ "response": r }));
        Bytes::from(out)
    }

    fn before_end(&mut self) -> Option<BoxFuture> {
        self.saving.take()
    }

    /// An `error` event (what the SDKs raise on), then `response.failed` (what Codex reads, with
    /// the code it special-cases): both carry ax's stable code.
    fn fail(&mut self, e: &dyn Reported) -> Bytes {
        let mut out = Vec::with_capacity(768);
        let param = e.param();
        self.event(&mut out, "error", json!({ "code": e.code(), "message": e.to_string(), "param": param }));
        let mut r = self.skeleton("failed");
        r["error"] = json!({ "code": e.code(), "message": e.to_string() });
        self.event(&mut out, "response.failed", json!({ "response": r }));
        Bytes::from(out)
    }

    /// Never forwarded: every upstream is translated.
    fn end_forwarded(&mut self) -> Bytes {
        Bytes::new()
    }

    fn wants_usage_event(&self) -> bool {
        false
    }
}
