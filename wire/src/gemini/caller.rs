//! Gemini's own API as an ingress (`generateContent`, `streamGenerateContent`, `countTokens`,
//! `embedContent`, `batchEmbedContents`): what a caller sends, read for the forward path
//! (`skim_generate`) or decoded into the canonical model (`decode_generate`); the answer, its
//! stream events and errors in Gemini's shapes (`answer`).
//!
//! The model is in the path, not the body: the body goes to a Gemini upstream as the caller wrote
//! it (unknown fields, `thoughtSignature`s, `safetySettings` included), to the upstream model's
//! own URL.
//!
//! Decoding is one serde pass over types that borrow from the body (texts as slices of it, kept
//! as their JSON literals when they hold no escape). Function calls: Gemini's `functionCall` may
//! carry an `id` (ax hands one out on every call it translates); without one, a call gets the id
//! `call_<turn>_<part>` and a `functionResponse` answers the first open call of its name. A
//! `thoughtSignature` (a Gemini upstream's own, or the placeholder
//! `skip_thought_signature_validator` the Gemini CLI inserts) is accepted on every part and
//! means nothing to another protocol's upstream.
//!
//! Field names are read in both spellings Google's JSON parser takes: lowerCamelCase and the
//! proto's snake_case (the Python SDK sends some of each).
//!
//! `parameters` and `responseSchema` are Gemini's OpenAPI subset (`"type": "OBJECT"`,
//! `nullable`, counts as strings); they are rewritten as JSON Schema for other upstreams
//! (`json_schema`). `parametersJsonSchema` and `responseJsonSchema` are JSON Schema already.

mod answer;
mod schema;
mod skim;
mod walk;

use skim::member;
pub use skim::{count_body, skim_generate};

pub use answer::{
    embed_request, encode_answer, encode_batch_embeddings, encode_count, encode_embedding, encode_model, encode_models,
    error_body, status_text, ArrayFraming, Events,
};

use std::borrow::Cow;

use ax_protocol::config::ParamsMode;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use crate::canonical::{
    ChatRequest, Content, ContentPart, FunctionCall, FunctionDef, ImageUrl, JsonSchema, Message, ReasoningEffort,
    ResponseFormat, Role, Stop, Text, Tool, ToolCall, ToolChoice, ToolKind,
};
use crate::json::decode::Known;
use crate::Error;

/// A `GenerateContentRequest` (and `countTokens`' `generateContentRequest`): its contents and
/// system instruction as the walk read them, the rest as serde did.
struct GenerateRequest<'a> {
    system_instruction: Option<ContentIn<'a>>,
    rest: Rest,
}

/// A request's members besides `contents` and `systemInstruction`.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Rest {
    #[serde(default)]
    tools: Vec<ToolIn>,
    #[serde(default)]
    #[serde(alias = "tool_config")]
    tool_config: Option<ToolConfigIn>,
    #[serde(default)]
    #[serde(alias = "generation_config")]
    generation_config: Option<GenerationConfigIn>,
    /// Only a Gemini upstream has Gemini's safety filters: read, and meant for it alone.
    #[serde(default)]
    #[serde(alias = "safety_settings")]
    safety_settings: Option<Known>,
    /// A Gemini cache resource: only a Gemini upstream has it.
    #[serde(default)]
    #[serde(alias = "cached_content")]
    cached_content: Option<String>,
    #[serde(default)]
    labels: Option<Known>,
    /// `countTokens`' `generateContentRequest` names a model; the path's is the one used.
    #[serde(default)]
    model: Option<Known>,
}

/// A `Content`: its role, its parts.
struct ContentIn<'a> {
    role: Option<Cow<'a, str>>,
    /// One part, nearly always: kept in place.
    parts: Parts<'a>,
}

type Parts<'a> = smallvec::SmallVec<[PartIn<'a>; 1]>;

/// A `Part`: its text a slice of the body where it holds no escape; what is not text boxed (rare,
/// and a part is moved as it is collected).
struct PartIn<'a> {
    text: Option<Cow<'a, str>>,
    thought: Option<bool>,
    thought_signature: Option<Known>,
    inline_data: Option<Box<Blob>>,
    file_data: Option<Box<FileData>>,
    function_call: Option<Box<FunctionCallIn>>,
    function_response: Option<Box<FunctionResponseIn>>,
    executable_code: Option<Box<Value>>,
    code_execution_result: Option<Box<Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Blob {
    #[serde(alias = "mime_type")]
    mime_type: String,
    data: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FileData {
    #[serde(default)]
    #[serde(alias = "mime_type")]
    mime_type: Option<String>,
    #[serde(alias = "file_uri")]
    file_uri: String,
}

#[derive(Deserialize)]
struct FunctionCallIn {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default)]
    args: Option<Value>,
}

#[derive(Deserialize)]
struct FunctionResponseIn {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default)]
    response: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolIn {
    #[serde(default)]
    #[serde(alias = "function_declarations")]
    function_declarations: Vec<FunctionDeclaration>,
    // Google's built-in tools: a Gemini upstream's alone (the parameter policy decides elsewhere).
    #[serde(default)]
    #[serde(alias = "google_search")]
    google_search: Option<Known>,
    #[serde(default)]
    #[serde(alias = "google_search_retrieval")]
    google_search_retrieval: Option<Known>,
    #[serde(default)]
    #[serde(alias = "url_context")]
    url_context: Option<Known>,
    #[serde(default)]
    #[serde(alias = "code_execution")]
    code_execution: Option<Known>,
    #[serde(default)]
    #[serde(alias = "google_maps")]
    google_maps: Option<Known>,
    #[serde(default)]
    #[serde(alias = "file_search")]
    file_search: Option<Known>,
    #[serde(default)]
    #[serde(alias = "computer_use")]
    computer_use: Option<Known>,
}

impl ToolIn {
    /// The built-in tool it names, if any (`tools.googleSearch`).
    fn builtin(&self) -> Option<&'static str> {
        [
            (self.google_search.is_some(), "tools.googleSearch"),
            (self.google_search_retrieval.is_some(), "tools.googleSearchRetrieval"),
            (self.url_context.is_some(), "tools.urlContext"),
            (self.code_execution.is_some(), "tools.codeExecution"),
            (self.google_maps.is_some(), "tools.googleMaps"),
            (self.file_search.is_some(), "tools.fileSearch"),
            (self.computer_use.is_some(), "tools.computerUse"),
        ]
        .into_iter()
        .find_map(|(set, name)| set.then_some(name))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionDeclaration {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
    #[serde(default)]
    #[serde(alias = "parameters_json_schema")]
    parameters_json_schema: Option<Value>,
    /// What the function returns: nothing another upstream can take.
    #[serde(default)]
    response: Option<Known>,
    #[serde(default)]
    #[serde(alias = "response_json_schema")]
    response_json_schema: Option<Known>,
    #[serde(default)]
    behavior: Option<Known>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfigIn {
    #[serde(default)]
    #[serde(alias = "function_calling_config")]
    function_calling_config: Option<FunctionCallingConfig>,
    #[serde(default)]
    #[serde(alias = "retrieval_config")]
    retrieval_config: Option<Known>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionCallingConfig {
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    #[serde(alias = "allowed_function_names")]
    allowed_function_names: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct GenerationConfigIn {
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    #[serde(alias = "top_p")]
    top_p: Option<f64>,
    #[serde(default)]
    #[serde(alias = "top_k")]
    top_k: Option<f64>,
    #[serde(default)]
    #[serde(alias = "max_output_tokens")]
    max_output_tokens: Option<u32>,
    #[serde(default)]
    #[serde(alias = "stop_sequences")]
    stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    #[serde(alias = "candidate_count")]
    candidate_count: Option<u32>,
    #[serde(default)]
    seed: Option<i64>,
    #[serde(default)]
    #[serde(alias = "presence_penalty")]
    presence_penalty: Option<f64>,
    #[serde(default)]
    #[serde(alias = "frequency_penalty")]
    frequency_penalty: Option<f64>,
    #[serde(default)]
    #[serde(alias = "response_mime_type")]
    response_mime_type: Option<String>,
    #[serde(default)]
    #[serde(alias = "response_schema")]
    response_schema: Option<Value>,
    #[serde(default)]
    #[serde(alias = "response_json_schema")]
    response_json_schema: Option<Value>,
    #[serde(default)]
    #[serde(alias = "response_logprobs")]
    response_logprobs: Option<bool>,
    #[serde(default)]
    logprobs: Option<u32>,
    #[serde(default)]
    #[serde(alias = "response_modalities")]
    response_modalities: Option<Vec<String>>,
    #[serde(default)]
    #[serde(alias = "thinking_config")]
    thinking_config: Option<ThinkingConfigIn>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ThinkingConfigIn {
    #[serde(default)]
    #[serde(alias = "thinking_budget")]
    thinking_budget: Option<i64>,
    #[serde(default)]
    #[serde(alias = "thinking_level")]
    thinking_level: Option<String>,
    #[serde(default)]
    #[serde(alias = "include_thoughts")]
    include_thoughts: Option<bool>,
}

/// A decoded request: the canonical request, and whether the caller sees thoughts
/// (`thinkingConfig.includeThoughts`).
pub struct Decoded {
    pub request: ChatRequest,
    pub shows_thoughts: bool,
}

/// A parameter another protocol's upstream cannot honour: refused in strict mode, dropped with a
/// warning in lenient.
fn unsupported(param: &str, mode: ParamsMode) -> Result<(), Error> {
    match mode {
        ParamsMode::Strict => Err(Error::UnsupportedParameter { param: param.to_owned(), provider: "ax" }),
        ParamsMode::Lenient => {
            tracing::warn!(param, "dropped a Gemini parameter only a Gemini upstream takes");
            Ok(())
        }
    }
}

/// The caller's body: its bytes, and the same as text (UTF-8 checked once).
#[derive(Clone, Copy)]
struct Body<'a> {
    bytes: &'a Bytes,
    text: &'a str,
}

/// A text of the caller's as canonical text: a slice of the body kept as its JSON literal when
/// it borrows (no escapes), else the decoded string.
fn text_of(body: Body<'_>, t: Cow<'_, str>) -> Text {
    match t {
        Cow::Borrowed(s) if within(body.bytes, s.as_bytes()) => {
            // A borrowed string had no escapes: its literal is the text between the quotes.
            let start = s.as_ptr() as usize - body.bytes.as_ptr() as usize;
            body.text
                .get(start - 1..start + s.len() + 1)
                .and_then(|l| Text::from_literal(body.bytes, l, false).ok())
                .unwrap_or_else(|| Text::new(s))
        }
        Cow::Borrowed(s) => Text::new(s),
        Cow::Owned(s) => Text::from(s),
    }
}

/// Whether `inner` lies inside `outer` (strictly: its quotes around it).
fn within(outer: &[u8], inner: &[u8]) -> bool {
    let (start, at) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    at > start && at + inner.len() < start + outer.len()
}

/// The body of `model`'s `generateContent` / `streamGenerateContent` as the canonical request.
pub fn decode_generate(body: &Bytes, model: &str, stream: bool, mode: ParamsMode) -> Result<Decoded, Error> {
    let text = utf8(body)?;
    let mut w = walk::Walk { text, unknown: Vec::new() };
    let mut turns = Turns::new(Body { bytes: body, text }, mode);
    let r = read_request(&mut w, body, None, 0, &mut |c, i| turns.add(c, i))?;
    crate::json::decode::judge(&w.unknown, mode)?;
    canonical(turns, r, model, stream, mode)
}

fn utf8(body: &[u8]) -> Result<&str, Error> {
    simdutf8::basic::from_utf8(body).map_err(|_| Error::InvalidJson("the body is not UTF-8".into()))
}

/// The request at `at` of `w.text` (`root`: the member that holds it, for paths; none: the whole
/// body), walked and its rest read; the unknown fields found go to `w.unknown`.
fn read_request<'a>(
    w: &mut walk::Walk<'a>,
    body: &[u8],
    root: Option<&str>,
    at: usize,
    on: walk::OnContent<'_, 'a>,
) -> Result<GenerateRequest<'a>, Error> {
    let mut s = crate::json::skim::Skim::at(w.text.as_bytes(), at);
    let walked = w
        .request(&mut s, root, on)
        .and_then(|r| {
            if root.is_none() {
                s.end()?;
            }
            Ok(r)
        })
        .map_err(|f| f.into_error(body))?;
    let (rest, unknown) = crate::json::decode::collecting::<Rest>(&walked.rest).map_err(|e| match (root, e) {
        (Some(r), Error::InvalidJson(m)) => Error::InvalidJson(format!("{r}.{m}")),
        (_, e) => e,
    })?;
    w.unknown.extend(unknown.into_iter().map(|u| root.map_or(u.clone(), |r| format!("{r}.{u}"))));
    Ok(GenerateRequest { system_instruction: walked.system, rest })
}

/// `countTokens`: `{contents}` or `{generateContentRequest}`, decoded whatever the mode (counting
/// drops nothing a model would act on).
pub fn decode_count(body: &Bytes, model: &str) -> Result<ChatRequest, Error> {
    let text = utf8(body)?;
    let mode = ParamsMode::Lenient;
    let mut w = walk::Walk { text, unknown: Vec::new() };
    let mut turns = Turns::new(Body { bytes: body, text }, mode);
    // The request inside, walked where it is (its texts slices of the body), else the body.
    let inner = member(body, 0, &[b"generateContentRequest", b"generate_content_request"]);
    let (root, at) = match &inner {
        Some(span) => (Some("generateContentRequest"), span.start),
        None => (None, 0),
    };
    let r = read_request(&mut w, body, root, at, &mut |c, i| turns.add(c, i))?;
    Ok(canonical(turns, r, model, false, mode)?.request)
}

/// The conversation, built turn by turn as the walk reads it.
struct Turns<'a> {
    body: Body<'a>,
    messages: Vec<Message>,
    calls: Calls,
    mode: ParamsMode,
}

impl<'a> Turns<'a> {
    fn new(body: Body<'a>, mode: ParamsMode) -> Self {
        Self { body, messages: Vec::with_capacity(16), calls: Calls::default(), mode }
    }

    /// `contents[i]` as canonical messages.
    fn add(&mut self, mut c: ContentIn<'a>, i: usize) -> Result<(), Error> {
        let body = self.body;
        let role = match c.role.as_deref() {
            Some("model") => Role::Assistant,
            _ => Role::User,
        };
        if matches!(c.role.as_deref(), None | Some("user" | "model" | "function")) {
            if let Some(t) = lone_text(&mut c.parts) {
                self.messages.push(Message { content: Some(Content::Text(text_of(body, t))), ..Message::new(role) });
                return Ok(());
            }
        }
        match c.role.as_deref() {
            Some("model") => model_turn(body, c.parts, i, &mut self.calls, &mut self.messages, self.mode),
            None | Some("user") | Some("function") => user_turn(body, c.parts, i, &mut self.calls, &mut self.messages),
            Some(other) => Err(Error::invalid_param(
                format!("contents[{i}].role"),
                format!("contents[{i}].role '{other}' is not 'user' or 'model'"),
            )),
        }
    }
}

/// A turn of one text (nearly every turn of a conversation): its message, built without the lists
/// a turn of several parts needs.
fn lone_text<'a>(parts: &mut Parts<'a>) -> Option<Cow<'a, str>> {
    match parts.as_mut_slice() {
        [p] if p.thought != Some(true)
            && p.function_call.is_none()
            && p.function_response.is_none()
            && p.inline_data.is_none()
            && p.file_data.is_none()
            && p.executable_code.is_none()
            && p.code_execution_result.is_none() =>
        {
            p.text.take()
        }
        _ => None,
    }
}

/// The canonical request from the turns and the request's other members.
fn canonical(
    turns: Turns<'_>,
    r: GenerateRequest<'_>,
    model: &str,
    stream: bool,
    mode: ParamsMode,
) -> Result<Decoded, Error> {
    let rest = r.rest;
    if rest.cached_content.is_some() {
        unsupported("cachedContent", mode)?;
    }
    // Read so that they are known; a Gemini upstream alone acts on them.
    let _ = (rest.safety_settings, rest.labels, rest.model);
    let Turns { body, mut messages, .. } = turns;
    if let Some(sys) = r.system_instruction {
        let text: Vec<Text> = sys.parts.into_iter().filter_map(|p| p.text).map(|t| text_of(body, t)).collect();
        if !text.is_empty() {
            messages.insert(0, Message { content: Some(join(text)), ..Message::new(Role::System) });
        }
    }
    let mut req = ChatRequest { model: model.to_owned(), messages, stream, ..ChatRequest::default() };
    tools(&mut req, rest.tools, rest.tool_config, mode)?;
    let shows_thoughts = generation(&mut req, rest.generation_config.unwrap_or_default(), mode)?;
    if stream {
        // Gemini's stream always carries usage.
        req.stream_options = Some(crate::canonical::StreamOptions { include_usage: true });
    }
    Ok(Decoded { request: req, shows_thoughts })
}

/// Texts joined into one content (a text alone kept as it came).
fn join(mut texts: Vec<Text>) -> Content {
    if texts.len() == 1 {
        return Content::Text(texts.remove(0));
    }
    Content::Parts(texts.into_iter().map(|text| ContentPart::Text { text }).collect())
}

/// The function calls made so far that no response has answered yet: (id, name).
#[derive(Default)]
struct Calls {
    open: Vec<(String, String)>,
}

impl Calls {
    /// The id a `functionResponse` answers: its own when a call has it, else the first open call
    /// of its name.
    fn answer(&mut self, id: Option<&str>, name: &str) -> Option<String> {
        let at = match id {
            Some(id) => self.open.iter().position(|(i, _)| i == id),
            None => None,
        }
        .or_else(|| self.open.iter().position(|(_, n)| n == name))?;
        Some(self.open.remove(at).0)
    }
}

fn model_turn(
    body: Body<'_>,
    parts: Parts<'_>,
    i: usize,
    calls: &mut Calls,
    out: &mut Vec<Message>,
    mode: ParamsMode,
) -> Result<(), Error> {
    let mut texts = Vec::new();
    let mut tool_calls = Vec::new();
    for (j, p) in parts.into_iter().enumerate() {
        let _ = p.thought_signature;
        if p.thought == Some(true) {
            // A model's earlier thoughts: not sent back to another protocol's upstream.
            continue;
        }
        if let Some(t) = p.text {
            texts.push(text_of(body, t));
        }
        if let Some(fc) = p.function_call {
            let id = fc.id.filter(|id| !id.is_empty()).unwrap_or_else(|| format!("call_{i}_{j}"));
            let args = fc.args.unwrap_or_else(|| Value::Object(Default::default()));
            calls.open.push((id.clone(), fc.name.clone()));
            tool_calls.push(ToolCall {
                id,
                kind: ToolKind::Function,
                function: FunctionCall { name: fc.name, arguments: args.to_string() },
            });
        }
        code_parts(p.executable_code, p.code_execution_result, &mut texts);
        if p.inline_data.is_some() || p.file_data.is_some() {
            unsupported(&format!("contents[{i}].parts[{j}] (a model turn's media)"), mode)?;
        }
    }
    if texts.is_empty() && tool_calls.is_empty() {
        return Ok(());
    }
    out.push(Message {
        content: (!texts.is_empty()).then(|| join(texts)),
        tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
        ..Message::new(Role::Assistant)
    });
    Ok(())
}

/// Code Gemini ran (`codeExecution`) as text another upstream reads.
fn code_parts(code: Option<Box<Value>>, result: Option<Box<Value>>, texts: &mut Vec<Text>) {
    if code.is_none() && result.is_none() {
        return;
    }
    for (label, v) in [("Code", code), ("Code result", result)] {
        if let Some(v) = v {
            let body = v
                .get("code")
                .or_else(|| v.get("output"))
                .and_then(Value::as_str)
                .map_or_else(|| v.to_string(), str::to_owned);
            texts.push(Text::from(format!("{label}:\n{body}")));
        }
    }
}

fn user_turn(
    body: Body<'_>,
    parts: Parts<'_>,
    i: usize,
    calls: &mut Calls,
    out: &mut Vec<Message>,
) -> Result<(), Error> {
    let mut content: Vec<ContentPart> = Vec::new();
    for (j, p) in parts.into_iter().enumerate() {
        let at = || format!("contents[{i}].parts[{j}]");
        let _ = p.thought_signature;
        if let Some(t) = p.text {
            content.push(ContentPart::Text { text: text_of(body, t) });
        }
        if let Some(b) = p.inline_data {
            if !b.mime_type.starts_with("image/") {
                return Err(Error::invalid_param(
                    format!("{}.inlineData.mimeType", at()),
                    format!("'{}' reaches only a Gemini upstream; other upstreams take images", b.mime_type),
                ));
            }
            let url = format!("data:{};base64,{}", b.mime_type, b.data);
            content.push(ContentPart::ImageUrl { image_url: ImageUrl { url, detail: None } });
        }
        if let Some(f) = p.file_data {
            let mime = f.mime_type.as_deref().unwrap_or("image/*");
            if !mime.starts_with("image/") {
                return Err(Error::invalid_param(
                    format!("{}.fileData.mimeType", at()),
                    format!("'{mime}' reaches only a Gemini upstream; other upstreams take images"),
                ));
            }
            content.push(ContentPart::ImageUrl { image_url: ImageUrl { url: f.file_uri, detail: None } });
        }
        if let Some(fr) = p.function_response {
            let Some(id) = calls.answer(fr.id.as_deref(), &fr.name) else {
                return Err(Error::invalid_param(
                    format!("{}.functionResponse", at()),
                    format!("functionResponse '{}' answers no earlier functionCall", fr.name),
                ));
            };
            let result = fr.response.unwrap_or(Value::Null).to_string();
            let m = Message {
                content: Some(Content::Text(Text::from(result))),
                tool_call_id: Some(id),
                ..Message::new(Role::Tool)
            };
            // Tool results come right after their calls; the turn's other parts follow them.
            out.push(m);
        }
        let mut texts = Vec::new();
        code_parts(p.executable_code, p.code_execution_result, &mut texts);
        content.extend(texts.into_iter().map(|text| ContentPart::Text { text }));
        if p.function_call.is_some() {
            return Err(Error::invalid_param(
                format!("{}.functionCall", at()),
                "a functionCall belongs in a 'model' turn",
            ));
        }
    }
    if content.is_empty() {
        return Ok(());
    }
    let content = if content.iter().all(|p| matches!(p, ContentPart::Text { .. })) {
        join(
            content
                .into_iter()
                .filter_map(|p| if let ContentPart::Text { text } = p { Some(text) } else { None })
                .collect(),
        )
    } else {
        Content::Parts(content)
    };
    out.push(Message { content: Some(content), ..Message::new(Role::User) });
    Ok(())
}

fn tools(
    req: &mut ChatRequest,
    tools: Vec<ToolIn>,
    config: Option<ToolConfigIn>,
    mode: ParamsMode,
) -> Result<(), Error> {
    let mut out = Vec::new();
    for t in tools {
        if let Some(name) = t.builtin() {
            unsupported(name, mode)?;
        }
        for f in t.function_declarations {
            let _ = (f.response, f.response_json_schema, f.behavior);
            let parameters = match (f.parameters_json_schema, f.parameters) {
                (Some(s), _) => Some(s),
                (None, Some(p)) => Some(schema::json_schema(p)),
                (None, None) => None,
            };
            out.push(Tool {
                kind: ToolKind::Function,
                function: FunctionDef { name: f.name, description: f.description, parameters, strict: None },
            });
        }
    }
    let cfg = config.and_then(|c| {
        let _ = c.retrieval_config;
        c.function_calling_config
    });
    if let Some(cfg) = cfg {
        let allowed = cfg.allowed_function_names.unwrap_or_default();
        req.tool_choice = match cfg.mode.as_deref().unwrap_or("AUTO") {
            "AUTO" | "MODE_UNSPECIFIED" | "VALIDATED" => Some(ToolChoice::Auto),
            "NONE" => Some(ToolChoice::None),
            "ANY" if allowed.len() == 1 => Some(ToolChoice::Function(allowed[0].clone())),
            "ANY" => {
                if !allowed.is_empty() {
                    // The model may call only these: the others are not offered.
                    out.retain(|t| allowed.contains(&t.function.name));
                }
                Some(ToolChoice::Required)
            }
            other => {
                return Err(Error::invalid_param(
                    "toolConfig.functionCallingConfig.mode",
                    format!("unknown mode '{other}' (expected AUTO, ANY, NONE or VALIDATED)"),
                ))
            }
        };
    }
    if !out.is_empty() {
        req.tools = Some(out);
    } else if matches!(req.tool_choice, Some(ToolChoice::Auto | ToolChoice::None)) {
        req.tool_choice = None;
    }
    Ok(())
}

/// `generationConfig` onto the canonical request; whether the caller sees thoughts.
fn generation(req: &mut ChatRequest, g: GenerationConfigIn, mode: ParamsMode) -> Result<bool, Error> {
    req.temperature = g.temperature;
    req.top_p = g.top_p;
    // Gemini's topK is a number; a fraction is its floor.
    req.top_k = g.top_k.filter(|k| *k >= 1.0).map(|k| k as u32);
    req.max_tokens = g.max_output_tokens;
    req.stop = g.stop_sequences.filter(|s| !s.is_empty()).map(Stop);
    req.n = g.candidate_count.filter(|n| *n != 1);
    req.seed = g.seed;
    req.presence_penalty = g.presence_penalty;
    req.frequency_penalty = g.frequency_penalty;
    req.logprobs = g.response_logprobs;
    req.top_logprobs = g.logprobs;
    if let Some(m) = g.response_modalities {
        if m.iter().any(|x| !x.eq_ignore_ascii_case("text")) {
            unsupported("generationConfig.responseModalities", mode)?;
        }
    }
    let schema = match (g.response_json_schema, g.response_schema) {
        (Some(s), _) => Some(s),
        (None, Some(s)) => Some(schema::json_schema(s)),
        (None, None) => None,
    };
    req.response_format = match g.response_mime_type.as_deref() {
        Some("application/json") => Some(match schema {
            Some(schema) => ResponseFormat::JsonSchema {
                json_schema: JsonSchema {
                    name: "response".into(),
                    description: None,
                    schema: Some(schema),
                    strict: None,
                },
            },
            None => ResponseFormat::JsonObject,
        }),
        None | Some("text/plain") if schema.is_none() => None,
        None | Some("text/plain") => {
            return Err(Error::invalid_param(
                "generationConfig.responseSchema",
                "a response schema needs responseMimeType 'application/json'",
            ))
        }
        Some(other) => {
            unsupported(&format!("generationConfig.responseMimeType ({other})"), mode)?;
            None
        }
    };
    let mut shows = false;
    if let Some(t) = g.thinking_config {
        shows = t.include_thoughts == Some(true);
        match (t.thinking_budget, t.thinking_level.as_deref()) {
            (Some(0), _) => req.reasoning_effort = Some(ReasoningEffort::None),
            (Some(b), _) if b > 0 => {
                let b = u32::try_from(b).unwrap_or(u32::MAX);
                req.thinking_budget = Some(b);
                req.reasoning_effort = Some(ReasoningEffort::of_budget(b));
            }
            // -1: the model decides.
            (Some(_), _) => req.reasoning_effort = Some(ReasoningEffort::Medium),
            (None, Some(level)) => {
                req.reasoning_effort = Some(match level.to_ascii_uppercase().as_str() {
                    "MINIMAL" => ReasoningEffort::Minimal,
                    "LOW" => ReasoningEffort::Low,
                    "MEDIUM" | "THINKING_LEVEL_UNSPECIFIED" => ReasoningEffort::Medium,
                    "HIGH" => ReasoningEffort::High,
                    other => {
                        return Err(Error::invalid_param(
                            "generationConfig.thinkingConfig.thinkingLevel",
                            format!("unknown thinkingLevel '{other}' (expected MINIMAL, LOW, MEDIUM or HIGH)"),
                        ))
                    }
                });
            }
            (None, None) => {}
        }
    }
    Ok(shows)
}

#[cfg(test)]
mod tests;
