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
    ChatRequest, Content, FunctionDef, JsonSchema, Message, ReasoningEffort, ResponseFormat, Role, Text, Tool,
    ToolCall, ToolChoice, ToolKind,
};
use crate::json::decode::Known;
use crate::Error;

mod answer;
mod walk;

use crate::responses::Link;
pub use answer::*;

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
