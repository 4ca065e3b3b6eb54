//! The canonical answer in Gemini's shapes: a `GenerateContentResponse`, stream events (`Events`;
//! `ArrayFraming` for a caller that asked for the stream as one JSON array), errors in Google's
//! shape, and the other endpoints' bodies (models, countTokens, embeddings).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::super::{finish_reason_out, UsageMetadata};
use crate::canonical::{
    ChatResponse, ChunkChoice, EmbeddingInput, EmbeddingsRequest, EmbeddingsResponse, FinishReason, StreamEncoder,
    ToolCall, Usage,
};
use crate::json::write::string;
use crate::sse::{SseDecoder, SseEvent};
use crate::{Error, Reported};

/// A call's arguments as the object Gemini's `functionCall.args` is: `{}` for none; arguments
/// that are not a JSON object (an upstream's broken output) are kept under `_raw` rather than lost.
fn args_of(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return Value::Object(Default::default());
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => serde_json::json!({ "_raw": arguments }),
    }
}

/// One `functionCall` part; the call's id goes with it, and comes back on the caller's
/// `functionResponse`.
fn call_part(out: &mut Vec<u8>, id: &str, name: &str, arguments: &str) {
    out.extend_from_slice(b"{\"functionCall\":{\"id\":");
    string(out, id);
    out.extend_from_slice(b",\"name\":");
    string(out, name);
    out.extend_from_slice(b",\"args\":");
    let _ = serde_json::to_writer(&mut *out, &args_of(arguments));
    out.extend_from_slice(b"}}");
}

fn text_part(out: &mut Vec<u8>, text: &str, thought: bool) {
    out.extend_from_slice(b"{\"text\":");
    string(out, text);
    if thought {
        out.extend_from_slice(b",\"thought\":true");
    }
    out.push(b'}');
}

/// One candidate: `{"content":{"role":"model","parts":[…]},"finishReason":…,"index":i}`; `parts`
/// writes the parts, separated by commas, and says whether it wrote any.
fn candidate(out: &mut Vec<u8>, index: u32, finish: Option<&FinishReason>, parts: impl FnOnce(&mut Vec<u8>) -> bool) {
    out.extend_from_slice(b"{\"content\":{\"role\":\"model\",\"parts\":[");
    if !parts(out) {
        // Gemini's last event of a stream holds an empty text part: clients read `parts[0]`.
        out.extend_from_slice(b"{\"text\":\"\"}");
    }
    out.extend_from_slice(b"]}");
    if let Some(f) = finish {
        out.extend_from_slice(b",\"finishReason\":");
        string(out, finish_reason_out(f));
    }
    out.extend_from_slice(b",\"index\":");
    crate::json::write::uint(out, u64::from(index));
    out.push(b'}');
}

/// The response's tail: usage, model and id, and the closing brace.
fn tail(out: &mut Vec<u8>, usage: Option<&Usage>, model: &str, response_id: &str) {
    if let Some(u) = usage {
        out.extend_from_slice(b",\"usageMetadata\":");
        let _ = serde_json::to_writer(&mut *out, &UsageMetadata::from(u));
    }
    out.extend_from_slice(b",\"modelVersion\":");
    string(out, model);
    out.extend_from_slice(b",\"responseId\":");
    string(out, response_id);
    out.push(b'}');
}

/// Parts separated by commas.
struct Parts<'a> {
    out: &'a mut Vec<u8>,
    any: bool,
}

impl Parts<'_> {
    fn next(&mut self) -> &mut Vec<u8> {
        if self.any {
            self.out.push(b',');
        }
        self.any = true;
        self.out
    }
}

fn calls_into(p: &mut Parts<'_>, calls: &[ToolCall]) {
    for c in calls {
        call_part(p.next(), &c.id, &c.function.name, &c.function.arguments);
    }
}

/// A whole answer as a `GenerateContentResponse`: thoughts (when the caller asked for them),
/// text, then each function call, per candidate.
pub fn encode_answer(r: &ChatResponse, request_id: &str, model: &str, shows_thoughts: bool) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(256 + r.choices.iter().map(|c| c.content.as_ref().map_or(0, String::len)).sum::<usize>());
    out.extend_from_slice(b"{\"candidates\":[");
    for (i, c) in r.choices.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        candidate(&mut out, c.index, Some(c.finish_reason.as_ref().unwrap_or(&FinishReason::Stop)), |out| {
            let mut p = Parts { out, any: false };
            if let Some(t) = c.reasoning.as_deref().filter(|t| shows_thoughts && !t.is_empty()) {
                text_part(p.next(), t, true);
            }
            if let Some(t) = c.content.as_deref().or(c.refusal.as_deref()).filter(|t| !t.is_empty()) {
                text_part(p.next(), t, false);
            }
            calls_into(&mut p, &c.tool_calls);
            p.any
        });
    }
    out.push(b']');
    let id = if r.id.is_empty() { request_id } else { &r.id };
    tail(&mut out, Some(&r.usage.unwrap_or_default()), model, id);
    out
}

/// A tool call being streamed: its pieces joined until the candidate finishes (Gemini sends a
/// `functionCall` whole).
struct Pending {
    choice: u32,
    index: u32,
    id: String,
    name: String,
    arguments: String,
}

/// The stream encoder of one `streamGenerateContent` request: one `GenerateContentResponse` event
/// per chunk of text or thoughts; function calls gathered and sent whole with the last event,
/// which carries the finish reasons and the usage (as Gemini's own last event does).
pub struct Events {
    model: String,
    response_id: String,
    shows_thoughts: bool,
    calls: Vec<Pending>,
    finish: Vec<(u32, FinishReason)>,
}

impl Events {
    pub fn new(request_id: &str, model: &str, shows_thoughts: bool) -> Self {
        Self {
            model: model.to_owned(),
            response_id: request_id.to_owned(),
            shows_thoughts,
            calls: Vec::new(),
            finish: Vec::new(),
        }
    }

    fn event(body: Vec<u8>) -> Bytes {
        crate::sse::data_event(&body)
    }
}

impl StreamEncoder for Events {
    fn start(&mut self, _n: u32) -> Bytes {
        Bytes::new()
    }

    fn chunk(&mut self, choices: &[ChunkChoice]) -> Bytes {
        let mut out = Vec::with_capacity(128);
        out.extend_from_slice(b"{\"candidates\":[");
        let mut any = false;
        for c in choices {
            for d in &c.tool_calls {
                match self.calls.iter_mut().find(|p| p.choice == c.index && p.index == d.index) {
                    Some(p) => {
                        p.arguments.push_str(&d.arguments);
                        if let Some(name) = d.name.as_ref().filter(|_| p.name.is_empty()) {
                            p.name.clone_from(name);
                        }
                    }
                    None => self.calls.push(Pending {
                        choice: c.index,
                        index: d.index,
                        id: d.id.clone().unwrap_or_else(crate::adapter::synth_call_id),
                        name: d.name.clone().unwrap_or_default(),
                        arguments: d.arguments.clone(),
                    }),
                }
            }
            if let Some(f) = &c.finish_reason {
                self.finish.push((c.index, f.clone()));
            }
            let thought = c.reasoning.as_deref().filter(|t| self.shows_thoughts && !t.is_empty());
            let text = c.content.as_deref().or(c.refusal.as_deref()).filter(|t| !t.is_empty());
            if thought.is_none() && text.is_none() {
                continue;
            }
            if any {
                out.push(b',');
            }
            any = true;
            candidate(&mut out, c.index, None, |out| {
                let mut p = Parts { out, any: false };
                if let Some(t) = thought {
                    text_part(p.next(), t, true);
                }
                if let Some(t) = text {
                    text_part(p.next(), t, false);
                }
                p.any
            });
        }
        if !any {
            return Bytes::new();
        }
        out.push(b']');
        tail(&mut out, None, &self.model, &self.response_id);
        Self::event(out)
    }

    fn finish(&mut self, usage: Option<&Usage>) -> Bytes {
        let mut choices: Vec<u32> =
            self.finish.iter().map(|(c, _)| *c).chain(self.calls.iter().map(|p| p.choice)).collect();
        choices.sort_unstable();
        choices.dedup();
        if choices.is_empty() {
            choices.push(0);
        }
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b"{\"candidates\":[");
        for (i, choice) in choices.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let finish = self.finish.iter().find(|(c, _)| c == choice).map_or(FinishReason::Stop, |(_, f)| f.clone());
            candidate(&mut out, *choice, Some(&finish), |out| {
                let mut p = Parts { out, any: false };
                for c in self.calls.iter().filter(|p| p.choice == *choice) {
                    call_part(p.next(), &c.id, &c.name, &c.arguments);
                }
                p.any
            });
        }
        out.push(b']');
        tail(&mut out, Some(&usage.copied().unwrap_or_default()), &self.model, &self.response_id);
        Self::event(out)
    }

    fn fail(&mut self, e: &dyn Reported) -> Bytes {
        Self::event(error_body(e, &self.response_id))
    }

    /// Gemini ends a stream by closing it: nothing to add.
    fn end_forwarded(&mut self) -> Bytes {
        Bytes::new()
    }

    fn wants_usage_event(&self) -> bool {
        true
    }
}

/// A stream written as SSE (`data: <response>` events) reframed as the one JSON array Google
/// streams when the caller leaves out `alt=sse`: `[` the first response, `,\r\n` each next one, `]`
/// at the end.
#[derive(Default)]
pub struct ArrayFraming {
    sse: SseDecoder,
    started: bool,
}

impl ArrayFraming {
    fn frame(&mut self, out: &mut Vec<u8>, ev: &SseEvent) {
        out.extend_from_slice(if self.started { b",\r\n" } else { b"[" });
        self.started = true;
        out.extend_from_slice(ev.data.as_bytes());
    }

    /// The array's pieces for some bytes of the SSE stream (the events they complete).
    pub fn push(&mut self, bytes: &[u8]) -> Bytes {
        self.sse.push(bytes);
        let mut out = Vec::new();
        while let Ok(Some(ev)) = self.sse.next_event() {
            self.frame(&mut out, &ev);
        }
        Bytes::from(out)
    }

    /// The array's end.
    pub fn end(&mut self) -> Bytes {
        let mut out = Vec::new();
        if let Ok(Some(ev)) = self.sse.finish() {
            self.frame(&mut out, &ev);
        }
        out.extend_from_slice(if self.started { b"]" } else { b"[]" });
        Bytes::from(out)
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/// Google's word for an HTTP status (`google.rpc.Code`).
pub fn status_text(status: u16) -> &'static str {
    match status {
        400 | 413 | 422 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 | 405 => "NOT_FOUND",
        408 | 504 => "DEADLINE_EXCEEDED",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        502 | 503 | 529 => "UNAVAILABLE",
        _ => "INTERNAL",
    }
}

/// An error in Google's shape: `{"error":{"code","message","status","details"}}`, ax's stable code
/// in the message and as an `ErrorInfo`'s `reason`.
pub fn error_body(e: &dyn Reported, request_id: &str) -> Vec<u8> {
    let status = e.status();
    let mut details = vec![serde_json::json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": e.code(),
        "domain": "ax",
        "metadata": { "request_id": request_id },
    })];
    if let Some(param) = e.param() {
        details.push(serde_json::json!({
            "@type": "type.googleapis.com/google.rpc.BadRequest",
            "fieldViolations": [{ "field": param, "description": e.to_string() }],
        }));
    }
    let body = serde_json::json!({ "error": {
        "code": status,
        "message": format!("{e} ({})", e.code()),
        "status": status_text(status),
        "details": details,
    }});
    serde_json::to_vec(&body).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Other endpoints

/// One alias as Gemini describes a model (`name` is `models/<alias>`).
fn model_object(alias: &str, limits: Option<(u32, u32)>) -> Value {
    let (input, output) = limits.unwrap_or((0, 0));
    serde_json::json!({
        "name": format!("models/{alias}"),
        "baseModelId": alias,
        "version": "ax",
        "displayName": alias,
        "inputTokenLimit": input,
        "outputTokenLimit": output,
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens", "embedContent", "batchEmbedContents"],
    })
}

/// `GET /v1beta/models`: the aliases the key may use, with their context and output limits.
pub fn encode_models(aliases: &[(String, Option<(u32, u32)>)]) -> Vec<u8> {
    let models: Vec<Value> = aliases.iter().map(|(a, l)| model_object(a, *l)).collect();
    serde_json::to_vec(&serde_json::json!({ "models": models })).unwrap_or_default()
}

/// `GET /v1beta/models/{model}`.
pub fn encode_model(alias: &str, limits: Option<(u32, u32)>) -> Vec<u8> {
    serde_json::to_vec(&model_object(alias, limits)).unwrap_or_default()
}

/// `countTokens`' answer.
pub fn encode_count(tokens: u64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "totalTokens": tokens })).unwrap_or_default()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EmbedContentIn {
    content: EmbedContent,
    #[serde(default)]
    #[serde(alias = "output_dimensionality")]
    output_dimensionality: Option<u32>,
    /// Hints for Gemini's embedding models (`RETRIEVAL_QUERY`, a document's title): read, and
    /// meant for Gemini alone.
    #[serde(default)]
    #[serde(alias = "task_type")]
    task_type: Option<crate::json::decode::Known>,
    #[serde(default)]
    title: Option<crate::json::decode::Known>,
    /// The model named in the body; the path's is the one used.
    #[serde(default)]
    model: Option<crate::json::decode::Known>,
}

#[derive(Deserialize)]
struct EmbedContent {
    #[serde(default)]
    parts: Vec<EmbedPart>,
    #[serde(default)]
    role: Option<crate::json::decode::Known>,
}

#[derive(Deserialize)]
struct EmbedPart {
    text: String,
}

#[derive(Deserialize)]
struct BatchIn {
    requests: Vec<EmbedContentIn>,
}

impl EmbedContentIn {
    fn text(self) -> String {
        let _ = (self.task_type, self.title, self.model, self.content.role);
        self.content.parts.into_iter().map(|p| p.text).collect::<Vec<_>>().join("\n")
    }
}

/// `embedContent` (`batch` false) or `batchEmbedContents` as the canonical embeddings request of
/// `model`; each request's own `model` is the path's.
pub fn embed_request(
    body: &[u8],
    model: &str,
    batch: bool,
    mode: ax_protocol::config::ParamsMode,
) -> Result<EmbeddingsRequest, Error> {
    let requests = if batch {
        crate::json::decode::json::<BatchIn>(body, mode)?.requests
    } else {
        vec![crate::json::decode::json::<EmbedContentIn>(body, mode)?]
    };
    if requests.is_empty() {
        return Err(Error::invalid_param("requests", "'requests' must not be empty"));
    }
    let dimensions = requests.iter().find_map(|r| r.output_dimensionality);
    let texts: Vec<String> = requests.into_iter().map(EmbedContentIn::text).collect();
    Ok(EmbeddingsRequest {
        model: model.to_owned(),
        input: EmbeddingInput::Many(texts),
        encoding_format: None,
        dimensions,
        user: None,
    })
}

#[derive(Serialize)]
struct Embedding<'a> {
    values: &'a [f32],
}

/// `embedContent`'s answer: the one embedding.
pub fn encode_embedding(r: &EmbeddingsResponse) -> Vec<u8> {
    let values = r.data.first().map_or(&[][..], Vec::as_slice);
    serde_json::to_vec(&serde_json::json!({ "embedding": Embedding { values } })).unwrap_or_default()
}

/// `batchEmbedContents`' answer.
pub fn encode_batch_embeddings(r: &EmbeddingsResponse) -> Vec<u8> {
    let embeddings: Vec<Embedding<'_>> = r.data.iter().map(|v| Embedding { values: v }).collect();
    serde_json::to_vec(&serde_json::json!({ "embeddings": embeddings })).unwrap_or_default()
}
