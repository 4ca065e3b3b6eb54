//! The OpenAI Responses codec (`POST /v1/responses`, what the Codex CLI and the Agents SDK
//! speak), translated through the canonical model to every upstream: `instructions` and `input`
//! (a string, or message, `function_call`, `function_call_output` and `reasoning` items) become
//! messages; function tools, `tool_choice`, `text.format`, `reasoning.effort` and
//! `max_output_tokens` their canonical controls. Answers are a `response` with `reasoning`,
//! `message` and `function_call` output items; streams are the Responses events, each with its
//! `sequence_number`. With `store` (the default) the response is kept in the response store
//! (`crate::response_store`) with its turn's input, and `previous_response_id` puts the stored
//! conversation (every earlier turn's input and output items, as the caller's protocol) before
//! this turn's input, to be translated for whichever upstream serves it.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::canonical::{
    unix_now, ChatRequest, ChatResponse, ChunkChoice, Content, FinishReason, FunctionDef, JsonSchema, Message,
    ReasoningEffort, ResponseFormat, Role, Text, Tool, ToolCall, ToolChoice, ToolKind, Usage,
};
use crate::json::decode::Known;
use crate::{Error, Reported};

mod walk;
use crate::canonical::StreamEncoder;
use crate::responses::Link;

/// A Responses request. Fields only OpenAI's own API acts on are named (so strict mode does not
/// refuse them) and left out.
#[derive(Deserialize)]
pub struct ResponsesRequest {
    model: String,
    /// As its JSON text, a slice of the body: walked into messages (`walk`), and kept as written
    /// with the stored response.
    #[serde(skip)]
    input: Option<Bytes>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    max_output_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    text: Option<TextIn>,
    #[serde(default)]
    reasoning: Option<ReasoningIn>,
    #[serde(default)]
    store: Option<bool>,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    background: Option<bool>,
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    safety_identifier: Option<String>,
    #[serde(default)]
    prompt_cache_key: Option<String>,
    #[serde(default)]
    service_tier: Option<String>,
    #[serde(default, rename = "include")]
    _include: Option<Known>,
    #[serde(default, rename = "truncation")]
    _truncation: Option<Known>,
    #[serde(default, rename = "max_tool_calls")]
    _max_tool_calls: Option<Known>,
    /// Codex's session and turn ids, for OpenAI's own analytics.
    #[serde(default, rename = "client_metadata")]
    _client_metadata: Option<Known>,
    #[serde(default, rename = "stream_options")]
    _stream_options: Option<Known>,
}

#[derive(Deserialize)]
struct TextIn {
    #[serde(default)]
    format: Option<Value>,
    #[serde(default)]
    verbosity: Option<String>,
}

#[derive(Deserialize)]
struct ReasoningIn {
    #[serde(default)]
    effort: Option<String>,
    #[serde(default, rename = "summary")]
    _summary: Option<Known>,
    #[serde(default, rename = "generate_summary")]
    _generate_summary: Option<Known>,
}

impl ResponsesRequest {
    /// Whether the response is to be kept (OpenAI's default: yes).
    pub fn store(&self) -> bool {
        self.store.unwrap_or(true)
    }

    pub fn previous_response_id(&self) -> Option<&str> {
        self.previous_response_id.as_deref()
    }

    /// The request's `input` as the caller wrote it (a string or an array of items), for the
    /// store; empty without one. A slice of the body holds the whole body: kept when `input` is
    /// most of it (the store counts the slice, so at most twice what it counts is held), else
    /// copied.
    pub fn raw_input(&self, body_len: usize) -> Bytes {
        match &self.input {
            Some(input) if input.len() * 2 >= body_len => input.clone(),
            Some(input) => Bytes::copy_from_slice(input),
            None => Bytes::new(),
        }
    }
}

/// The alias a Responses body names, read without decoding it (`None` when it names none).
pub fn alias_of(body: &[u8]) -> Option<String> {
    let mut s = crate::json::skim::Skim::new(body);
    let mut model = None;
    let _ = s.object(|k, esc, s| {
        if crate::json::skim::key_text(k, esc).as_deref() == Some("model") && model.is_none() {
            model = s.decode::<String>().ok();
            // Stop here: the rest is not needed.
            return Err(crate::json::skim::SkimError { at: 0, what: String::new() });
        }
        s.value().map(drop)
    });
    model
}

/// Reads what the gateway needs of a Responses body without decoding it, for a route whose
/// upstreams all offer the Responses API (OpenAI's own): the model and where it is, the stream
/// flag, the output cap, the capabilities it needs (tools, images, JSON output) and a prompt
/// estimate. The rest, fields ax does not know included, reaches the upstream as written; the
/// upstream keeps its own stored responses (`store`, `previous_response_id`).
pub fn skim_responses(body: Bytes, forwards: &dyn Fn(&str) -> bool) -> Result<crate::canonical::Skim, Error> {
    use crate::canonical::{estimate_tokens, Protocol, RawChat, Skim, IMAGE_TOKENS, MESSAGE_TOKENS};
    let mut model = None;
    let (mut stream, mut max_output, mut tools, mut json) = (false, None, false, false);
    let (mut text, mut images, mut items) = (0usize, 0u64, 1u64);
    let mut s = crate::json::skim::Skim::new(&body);
    let invalid = |e: crate::json::skim::SkimError| Error::InvalidJson(e.what);
    s.object(|k, esc, s| {
        let key = crate::json::skim::key_text(k, esc).unwrap_or_default();
        match &*key {
            "model" => {
                if model.is_some() {
                    return Err(crate::json::skim::SkimError { at: s.pos(), what: "duplicate field `model`".into() });
                }
                s.next_byte();
                let start = s.pos();
                let m: String = s.decode()?;
                model = Some((m, start..s.pos()));
            }
            "stream" => stream = s.decode::<Option<bool>>()?.unwrap_or(false),
            "max_output_tokens" => max_output = s.decode()?,
            "tools" => {
                let span = s.value()?;
                text += span.len();
                tools = body[span].iter().skip(1).any(|b| !b.is_ascii_whitespace() && *b != b']');
            }
            "text" => {
                let span = s.value()?;
                let v = &body[span];
                json = memchr::memmem::find(v, b"json_schema").is_some()
                    || memchr::memmem::find(v, b"json_object").is_some();
            }
            "input" | "instructions" => {
                let span = s.value()?;
                let v = &body[span];
                images += memchr::memmem::find_iter(v, b"\"input_image\"").count() as u64;
                items += memchr::memmem::find_iter(v, b"\"type\"").count() as u64;
                text += v.len();
            }
            _ => {
                s.value()?;
            }
        }
        Ok(())
    })
    .map_err(invalid)?;
    s.end().map_err(invalid)?;
    let Some((model, model_span)) = model else {
        return Err(Error::InvalidJson("missing field `model`".into()));
    };
    if !forwards(&model) {
        return Ok(Skim::Decode(body));
    }
    Ok(Skim::Forward(RawChat {
        protocol: Protocol::OpenAiResponses,
        model,
        model_span,
        edits: Vec::new(),
        stream,
        // The usage is in the final event, whatever the caller asked.
        include_usage: true,
        max_output,
        temperature: None,
        needs_tools: tools,
        needs_vision: images > 0,
        needs_json: json,
        // Image data is text too here: the estimate errs high, as it should.
        prompt_estimate: estimate_tokens(text) + MESSAGE_TOKENS * items + IMAGE_TOKENS * images,
        headers: Vec::new(),
        body,
    }))
}

/// Decodes a Responses body (strict or lenient about fields ax does not know, as for chat): its
/// `input` kept as a slice of the body for the walk (`to_canonical`), every other member decoded
/// by serde.
pub fn decode(body: &Bytes, mode: ax_protocol::config::ParamsMode) -> Result<ResponsesRequest, Error> {
    use crate::json::skim::{key_text, Skim};
    use crate::json::walk::Fault;
    let mut input = None;
    // The other members, each copied as `,"key":value`: the first comma becomes the brace.
    let mut rest = Vec::with_capacity(256);
    let mut s = Skim::new(body);
    let walked: Result<(), Fault> = (|| {
        if s.next_byte() != Some(b'{') {
            s.value()?;
            return Err(Error::InvalidJson("the body must be a JSON object".into()).into());
        }
        s.object(|k, escaped, s| {
            let key = key_text(k, escaped).unwrap_or_default();
            if key == "input" {
                if input.is_some() {
                    return Err(Error::InvalidJson("duplicate field `input`".into()).into());
                }
                let span = s.value()?;
                // Kept with the stored response and read again with the next turn, where a field
                // the walk passes over is not read: refused here, as a parser refuses it.
                if crate::json::read::lone_surrogate(&body[span.clone()]) {
                    return Err(Error::InvalidJson("input: a \\u escape is a lone surrogate".into()).into());
                }
                input = Some((&body[span.clone()] != b"null").then(|| body.slice(span)));
                return Ok(());
            }
            s.copy_member(k, &mut rest)?;
            Ok::<(), Fault>(())
        })?;
        s.end()?;
        Ok(())
    })();
    walked.map_err(|f| f.into_error(body))?;
    match rest.first_mut() {
        Some(first) => *first = b'{',
        None => rest.push(b'{'),
    }
    rest.push(b'}');
    let mut r: ResponsesRequest = crate::json::decode::json(&rest, mode)?;
    r.input = input.flatten();
    Ok(r)
}

/// Where a value sits in the request (`input[3].content[0]`), written out only for an error.
type At<'a> = &'a dyn Fn() -> String;

fn not_a_string(field: &str, at: At<'_>) -> Error {
    let at = at();
    Error::invalid_param(format!("{at}.{field}"), format!("{at}: '{field}' must be a string"))
}

/// The value of `field`, moved out of `v` (the request is decoded once, and its text is not
/// copied again).
fn take(v: &mut Value, field: &str) -> Value {
    v.get_mut(field).map(Value::take).unwrap_or(Value::Null)
}

/// The string `field` of `v`, moved out.
fn take_str(v: &mut Value, field: &str, at: At<'_>) -> Result<String, Error> {
    take_opt_str(v, field).ok_or_else(|| not_a_string(field, at))
}

fn take_opt_str(v: &mut Value, field: &str) -> Option<String> {
    match take(v, field) {
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// The separator between a namespace and a tool's name in the function name other providers
/// see (`[a-zA-Z0-9_-]` only, as OpenAI's Chat Completions requires).
pub(super) const NS_SEP: &str = "__";

/// A flat function tool, its name prefixed with its namespace.
fn function_tool(mut t: Value, at: At<'_>, namespace: Option<&str>) -> Result<Tool, Error> {
    let name = take_str(&mut t, "name", at)?;
    Ok(Tool {
        kind: ToolKind::Function,
        function: FunctionDef {
            name: match namespace {
                Some(ns) => format!("{ns}{NS_SEP}{name}"),
                None => name,
            },
            description: take_opt_str(&mut t, "description"),
            parameters: Some(take(&mut t, "parameters")).filter(|p| !p.is_null()),
            strict: t["strict"].as_bool(),
        },
    })
}

/// A called function's name as the caller knows it: the name, and its namespace when the name
/// is one of `namespaces`' prefixed names.
fn split_name<'a>(name: &'a str, namespaces: &'a [String]) -> (&'a str, Option<&'a str>) {
    for ns in namespaces {
        if let Some(rest) = name.strip_prefix(ns.as_str()).and_then(|r| r.strip_prefix(NS_SEP)) {
            return (rest, Some(ns));
        }
    }
    (name, None)
}

/// The messages of a stored conversation, oldest first: each turn's input items, then its output
/// items, read by the same walk as a request's `input`.
fn stored(prior: &[Link], out: &mut Vec<Message>) -> Result<(), Error> {
    let broken = || Error::ResponseNotFound {
        message: "a stored response of this conversation cannot be read: send the whole conversation in 'input'".into(),
        param: Some("previous_response_id"),
    };
    let mut n = 0;
    let mut read = |json: &Bytes, out: &mut Vec<Message>| -> Result<(), Error> {
        let items = walk::stored_items(json, &|i| format!("previous_response_id (stored item {})", n + i))
            .map_err(|e| e.unwrap_or_else(broken))?;
        n += items.len();
        items.into_iter().for_each(|item| apply(out, item));
        Ok(())
    };
    for l in prior {
        if !l.input.is_empty() {
            read(&l.input, out)?;
        }
        if let Some(output) = output_of(&l.response).map_err(|()| broken())? {
            read(&output, out)?;
        }
    }
    Ok(())
}

/// The `output` array of a stored response object, a slice of it (`None` without one).
fn output_of(response: &Bytes) -> Result<Option<Bytes>, ()> {
    let mut s = crate::json::skim::Skim::new(response);
    let mut output = None;
    s.object(|k, escaped, s| {
        let span = s.value()?;
        if crate::json::skim::key_bytes(k, escaped).as_deref() == Some(b"output") && response[span.start] == b'[' {
            output = Some(response.slice(span));
        }
        Ok::<(), crate::json::skim::SkimError>(())
    })
    .map_err(drop)?;
    Ok(output)
}

/// A stored turn's input items; `None` when they cannot be read.
fn link_input(l: &Link) -> Option<Vec<Value>> {
    match input_items(&l.input).ok()? {
        Value::Array(a) => Some(a),
        _ => None,
    }
}

/// A stored turn's output items; `None` when its response cannot be read.
fn link_output(l: &Link) -> Option<Vec<Value>> {
    let mut r: Value = serde_json::from_slice(&l.response).ok()?;
    match take(&mut r, "output") {
        Value::Array(out) => Some(out),
        _ => Some(Vec::new()),
    }
}

/// A stored `input` as items: a string is one user message.
pub fn input_items(raw: &[u8]) -> Result<Value, serde_json::Error> {
    if raw.is_empty() {
        return Ok(Value::Array(Vec::new()));
    }
    Ok(match serde_json::from_slice(raw)? {
        Value::String(text) => json!([{ "type": "message", "role": "user",
            "content": [{ "type": "input_text", "text": text }] }]),
        v => v,
    })
}

/// The request in the canonical model, after the stored conversation `prior` (oldest first) it
/// continues; the namespaces of its grouped tools go to `namespaces`. Built-in tools only OpenAI
/// runs are left out (logged); forcing one is a 400.
pub fn to_canonical(r: ResponsesRequest, namespaces: &mut Vec<String>, prior: &[Link]) -> Result<ChatRequest, Error> {
    if r.background == Some(true) {
        return Err(Error::UnsupportedParameter { param: "background".into(), provider: "ax" });
    }
    let mut messages = Vec::new();
    if let Some(i) = r.instructions.filter(|i| !i.is_empty()) {
        messages.push(Message::text(Role::System, i));
    }
    stored(prior, &mut messages)?;
    if let Some(input) = &r.input {
        walk::items(input, &|i| format!("input[{i}]"))?.into_iter().for_each(|item| apply(&mut messages, item));
    }
    let mut tools = Vec::new();
    for (i, mut t) in r.tools.into_iter().flatten().enumerate() {
        let at = || format!("tools[{i}]");
        match take(&mut t, "type").as_str() {
            Some("function") => tools.push(function_tool(t, &at, None)?),
            // A group of tools (Codex's sub-agent tools): each a function named `<namespace>__<name>`,
            // its calls answered with the namespace apart again.
            Some("namespace") => {
                let ns = take_str(&mut t, "name", &at)?;
                let Value::Array(inner) = take(&mut t, "tools") else { continue };
                for (j, mut tool) in inner.into_iter().enumerate() {
                    match take(&mut tool, "type").as_str() {
                        Some("function") => {
                            tools.push(function_tool(tool, &|| format!("{}.tools[{j}]", at()), Some(&ns))?)
                        }
                        other => {
                            tracing::warn!(
                                tool = other.unwrap_or("?"),
                                namespace = ns,
                                "dropped a tool only OpenAI runs"
                            )
                        }
                    }
                }
                namespaces.push(ns);
            }
            // A tool the model may use, not one it must (a forced one is refused with
            // `tool_choice` below): without it the model answers without it, as Codex's
            // `web_search` is meant to be optional. Logged.
            other => tracing::warn!(tool = other.unwrap_or("?"), "dropped a built-in tool only OpenAI runs"),
        }
    }
    let tool_choice = match r.tool_choice {
        None => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => return Err(Error::invalid_param("tool_choice", format!("unknown tool_choice '{other}'"))),
        }),
        Some(mut v) if v["type"] == "function" => {
            Some(ToolChoice::Function(take_str(&mut v, "name", &|| "tool_choice".to_owned())?))
        }
        Some(v) => {
            return Err(Error::invalid_param(
                "tool_choice",
                format!("tool_choice of type '{}' needs an OpenAI upstream", v["type"].as_str().unwrap_or("?")),
            ))
        }
    };
    let (response_format, verbosity) = match r.text {
        None => (None, None),
        Some(t) => (t.format.as_ref().map(format).transpose()?.flatten(), t.verbosity),
    };
    let reasoning_effort = match r.reasoning.and_then(|x| x.effort) {
        None => None,
        Some(e) => Some(match e.as_str() {
            "none" => ReasoningEffort::None,
            "minimal" => ReasoningEffort::Minimal,
            "low" => ReasoningEffort::Low,
            "medium" => ReasoningEffort::Medium,
            "high" => ReasoningEffort::High,
            "xhigh" | "max" => ReasoningEffort::Xhigh,
            other => {
                return Err(Error::invalid_param("reasoning.effort", format!("unknown reasoning effort '{other}'")))
            }
        }),
    };
    Ok(ChatRequest {
        model: r.model,
        messages,
        temperature: r.temperature,
        top_p: r.top_p,
        max_completion_tokens: r.max_output_tokens,
        stream: r.stream,
        tools: (!tools.is_empty()).then_some(tools),
        tool_choice,
        parallel_tool_calls: r.parallel_tool_calls,
        response_format,
        user: r.user,
        reasoning_effort,
        metadata: r.metadata,
        service_tier: r.service_tier,
        prompt_cache_key: r.prompt_cache_key,
        safety_identifier: r.safety_identifier,
        verbosity,
        ..ChatRequest::default()
    })
}

/// `text.format`: `text` (none), `json_object`, or a flat `json_schema`.
fn format(f: &Value) -> Result<Option<ResponseFormat>, Error> {
    match f["type"].as_str() {
        Some("text") | None => Ok(None),
        Some("json_object") => Ok(Some(ResponseFormat::JsonObject)),
        Some("json_schema") => Ok(Some(ResponseFormat::JsonSchema {
            json_schema: JsonSchema {
                name: f["name"].as_str().unwrap_or("output").to_owned(),
                description: f["description"].as_str().map(str::to_owned),
                schema: f.get("schema").cloned(),
                strict: f["strict"].as_bool(),
            },
        })),
        Some(other) => Err(Error::invalid_param("text.format.type", format!("unknown text format '{other}'"))),
    }
}

/// One input item, read.
pub(super) enum Item {
    Message(Role, Content),
    Call(ToolCall),
    Output { call_id: String, output: Content },
    Reasoning,
}

/// A function call's output given as parts: its text, or, when it holds images, the parts (the
/// images reach the model; see `Content::text_marking_images`).
pub(super) fn tool_output(parts: Content) -> Content {
    if parts.has_images() {
        parts
    } else {
        Content::Text(Text::from(parts.text().into_owned()))
    }
}

/// One input item as canonical messages: a message; a function call (joining the assistant turn
/// before it); a function call's output (a tool message); reasoning (left out: no other provider
/// takes it back).
pub(super) fn apply(out: &mut Vec<Message>, item: Item) {
    match item {
        Item::Message(role, content) => out.push(Message { content: Some(content), ..Message::new(role) }),
        Item::Call(call) => match out.last_mut() {
            Some(m) if m.role == Role::Assistant => m.tool_calls.get_or_insert_with(Vec::new).push(call),
            _ => out.push(Message { tool_calls: Some(vec![call]), ..Message::new(Role::Assistant) }),
        },
        Item::Output { call_id, output } => {
            out.push(Message { tool_call_id: Some(call_id), content: Some(output), ..Message::new(Role::Tool) })
        }
        Item::Reasoning => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Answers

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
    out.extend_from_slice(itoa::Buffer::new().format(index).as_bytes());
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
    out.extend_from_slice(itoa::Buffer::new().format(*seq).as_bytes());
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
