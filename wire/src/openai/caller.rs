//! The OpenAI codec: what a caller speaking OpenAI's Chat Completions and Embeddings APIs sends,
//! decoded into the canonical model, and the canonical answer encoded back: one JSON body, or
//! `chat.completion.chunk` events ending in `[DONE]`.

use base64::Engine;
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use crate::canonical::Skim;
use crate::canonical::StreamEncoder;
use crate::canonical::{
    estimate_tokens, ChatRequest, ChatResponse, ChunkChoice, EmbeddingsRequest, EmbeddingsResponse, EncodingFormat,
    FinishReason, RawChat, ToolCall, Usage, IMAGE_TOKENS, MESSAGE_TOKENS,
};
use crate::json::skim::{key_bytes, key_text, SkimError};
use crate::{Error, Reported};

/// The canonical request of a Chat Completions body (`walk`): its texts are slices of `body`.
pub fn decode_chat(body: &Bytes, mode: ax_protocol::config::ParamsMode) -> Result<ChatRequest, Error> {
    super::walk::decode_chat(body, mode)
}

/// One alias as OpenAI describes a model.
fn model_object(alias: &str) -> serde_json::Value {
    serde_json::json!({ "id": alias, "object": "model", "created": 0, "owned_by": "ax" })
}

/// `GET /v1/models`: the aliases the key may use.
pub fn encode_models(aliases: &[String]) -> Vec<u8> {
    let data: Vec<serde_json::Value> = aliases.iter().map(|a| model_object(a)).collect();
    serde_json::to_vec(&serde_json::json!({ "object": "list", "data": data })).unwrap_or_default()
}

/// `GET /v1/models/{id}`.
pub fn encode_model(alias: &str) -> Vec<u8> {
    serde_json::to_vec(&model_object(alias)).unwrap_or_default()
}

/// What `skim_chat` reads of a body.
#[derive(Default)]
struct Skimmed {
    model: Option<(String, std::ops::Range<usize>)>,
    /// Messages in `messages`.
    messages: Option<u64>,
    stream: bool,
    /// `stream_options`: the member (key to value), its value, and whether it asks for usage.
    stream_options: Option<(std::ops::Range<usize>, std::ops::Range<usize>, bool)>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    temperature: Option<f64>,
    n: Option<u32>,
    tools: bool,
    json: bool,
    images: u64,
    /// Bytes of text the prompt estimate counts: message contents, tool calls and tools.
    text: usize,
    /// Every member of the body: (key start, value end).
    members: Vec<(usize, usize)>,
    /// The body's closing brace.
    end: usize,
    /// The model came before the messages and its route does not forward: the walk stopped there.
    declined: bool,
}

fn field_error(path: &str) -> impl Fn(SkimError) -> SkimError + '_ {
    move |e| SkimError { at: e.at, what: format!("{path}: {}", e.what) }
}

/// A message's `content`: its text bytes and images (a string, or parts).
fn skim_content(s: &mut crate::json::skim::Skim<'_>, read: &mut Skimmed) -> Result<(), SkimError> {
    match s.next_byte() {
        Some(b'"') => {
            let (span, _) = s.string()?;
            read.text += span.len() - 2;
        }
        Some(b'[') => s.array(|s| {
            if s.next_byte() != Some(b'{') {
                return s.value().map(drop);
            }
            s.object(|k, esc, s| match key_bytes(k, esc).as_deref() {
                Some(b"text") => {
                    let span = s.value()?;
                    read.text += span.len().saturating_sub(2);
                    Ok(())
                }
                // An image counts as `IMAGE_TOKENS` whatever the size of its URL or data.
                Some(b"image_url") => {
                    read.images += 1;
                    s.value().map(drop)
                }
                _ => s.value().map(drop),
            })
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
        let member_start = k.as_ptr() as usize - body.as_ptr() as usize - 1;
        let Some(key) = key_text(k, esc) else {
            return Err(SkimError { at: member_start, what: "a key is not valid JSON text".into() });
        };
        let seen = |dup: bool| {
            if dup {
                Err(SkimError { at: member_start, what: format!("duplicate field `{key}`") })
            } else {
                Ok(())
            }
        };
        match &*key {
            "model" => {
                seen(read.model.is_some())?;
                let start = {
                    s.next_byte();
                    s.pos()
                };
                let model: String = s.decode().map_err(field_error("model"))?;
                // Named before the conversation, the model decides early: a route that
                // translates decodes the body anyway, so the rest of this walk would be wasted.
                if read.messages.is_none() && !forwards(&model) {
                    read.declined = true;
                    return Err(SkimError { at: start, what: String::new() });
                }
                read.model = Some((model, start..s.pos()));
            }
            "messages" => {
                seen(read.messages.is_some())?;
                let mut n = 0;
                s.array(|s| {
                    n += 1;
                    if s.next_byte() != Some(b'{') {
                        return s.value().map(drop);
                    }
                    s.object(|k, esc, s| match key_bytes(k, esc).as_deref() {
                        Some(b"content") => skim_content(s, &mut read),
                        Some(b"tool_calls") => {
                            read.text += s.value()?.len();
                            Ok(())
                        }
                        _ => s.value().map(drop),
                    })
                })
                .map_err(field_error("messages"))?;
                read.messages = Some(n);
            }
            "stream" => read.stream = s.decode().map_err(field_error("stream"))?,
            "stream_options" => {
                seen(read.stream_options.is_some())?;
                let value = {
                    s.next_byte();
                    s.pos()
                };
                #[derive(serde::Deserialize)]
                struct Options {
                    #[serde(default)]
                    include_usage: bool,
                }
                let o: Option<Options> = s.decode().map_err(field_error("stream_options"))?;
                read.stream_options = Some((member_start..s.pos(), value..s.pos(), o.is_some_and(|o| o.include_usage)));
            }
            "max_tokens" => read.max_tokens = s.decode().map_err(field_error("max_tokens"))?,
            "temperature" => read.temperature = s.decode().map_err(field_error("temperature"))?,
            "max_completion_tokens" => {
                read.max_completion_tokens = s.decode().map_err(field_error("max_completion_tokens"))?
            }
            "n" => read.n = s.decode().map_err(field_error("n"))?,
            "tools" => {
                let span = s.value()?;
                read.text += span.len();
                let v = &body[span];
                read.tools =
                    v.first() == Some(&b'[') && v.iter().skip(1).any(|b| !b.is_ascii_whitespace() && *b != b']');
            }
            "response_format" => {
                #[derive(serde::Deserialize)]
                struct Format {
                    #[serde(rename = "type")]
                    kind: String,
                }
                let f: Option<Format> = s.decode().map_err(field_error("response_format"))?;
                read.json = f.is_some_and(|f| f.kind == "json_object" || f.kind == "json_schema");
            }
            _ => {
                s.value()?;
            }
        }
        read.members.push((member_start, s.pos()));
        Ok(())
    });
    if read.declined {
        return Ok(read);
    }
    walked?;
    read.end = s.pos() - 1;
    s.end()?;
    Ok(read)
}

/// Reads what the gateway needs of a Chat Completions body without decoding it (the
/// same-protocol fast path): the model and where it is, the stream flags, the output cap, the
/// capabilities it needs and a prompt estimate; and the edits every OpenAI-compatible upstream
/// needs besides the model (usage asked for on streams, as metering needs it; `stream_options`
/// left out without a stream, where OpenAI refuses it). Everything else, fields ax does not know
/// included, reaches the upstream as the caller wrote it; the upstream judges it. `forwards` says
/// whether a model's route forwards: when the model comes before the messages and it does not,
/// the walk stops there and the body is handed back to be decoded (`Skimmed::Decode`).
pub fn skim_chat(body: Bytes, forwards: &dyn Fn(&str) -> bool) -> Result<Skim, Error> {
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
    if messages == 0 {
        return Err(Error::invalid_param("messages", "'messages' must not be empty"));
    }
    if read.n == Some(0) {
        return Err(Error::invalid_param("n", "'n' must be at least 1"));
    }
    let mut edits = Vec::new();
    match &read.stream_options {
        Some((_, value, false)) if read.stream => {
            let mut opts: serde_json::Map<String, serde_json::Value> =
                serde_json::from_slice(&body[value.clone()]).unwrap_or_default();
            opts.insert("include_usage".into(), serde_json::Value::Bool(true));
            let text = serde_json::to_vec(&opts).map_err(|_| Error::Internal)?;
            edits.push((value.clone(), Bytes::from(text)));
        }
        None if read.stream => {
            edits.push((read.end..read.end, Bytes::from_static(br#","stream_options":{"include_usage":true}"#)));
        }
        Some((member, _, _)) if !read.stream => {
            // The member and one comma beside it.
            let i = read.members.iter().position(|m| m.0 == member.start).unwrap_or(0);
            let span = match (read.members.get(i + 1), i.checked_sub(1).and_then(|p| read.members.get(p))) {
                (Some(next), _) => member.start..next.0,
                (None, Some(prev)) => prev.1..member.end,
                (None, None) => member.clone(),
            };
            edits.push((span, Bytes::new()));
        }
        _ => {}
    }
    Ok(Skim::Forward(RawChat {
        protocol: crate::canonical::Protocol::OpenAiChat,
        model,
        model_span,
        edits,
        stream: read.stream,
        include_usage: read.stream_options.as_ref().is_some_and(|o| o.2),
        max_output: read.max_completion_tokens.or(read.max_tokens),
        temperature: read.temperature,
        needs_tools: read.tools,
        needs_vision: read.images > 0,
        needs_json: read.json,
        prompt_estimate: estimate_tokens(read.text) + MESSAGE_TOKENS * messages + IMAGE_TOKENS * read.images,
        headers: Vec::new(),
        body,
    }))
}

pub fn decode_embeddings(bytes: &[u8], mode: ax_protocol::config::ParamsMode) -> Result<EmbeddingsRequest, Error> {
    crate::json::decode::json(bytes, mode)
}

/// A whole chat answer as OpenAI's JSON; what the upstream left out (id, created, model) is filled
/// from the request id and the model that served.
pub fn encode_chat(mut r: ChatResponse, request_id: &str, model: &str) -> Vec<u8> {
    fill_response(&mut r, request_id, model);
    encode_response(&r)
}

/// An embeddings answer in the encoding the caller asked for.
pub fn encode_embeddings(r: &EmbeddingsResponse, req: &EmbeddingsRequest) -> Vec<u8> {
    encode_embeddings_response(r, req.encoding_format)
}

/// The stream encoder of one chat request: its chunk events, and the usage event before `[DONE]`
/// when the caller set `stream_options.include_usage`.
pub struct Events {
    enc: ChunkEncoder,
    include_usage: bool,
    request_id: String,
}

impl Events {
    pub fn new(include_usage: bool, request_id: &str, model: &str) -> Self {
        Self {
            enc: ChunkEncoder::new(&format!("chatcmpl-{request_id}"), crate::canonical::unix_now(), model),
            include_usage,
            request_id: request_id.to_owned(),
        }
    }
}

impl StreamEncoder for Events {
    fn start(&mut self, n: u32) -> Bytes {
        self.enc.role(n)
    }

    fn chunk(&mut self, choices: &[ChunkChoice]) -> Bytes {
        self.enc.chunk(choices)
    }

    fn finish(&mut self, usage: Option<&Usage>) -> Bytes {
        if !self.include_usage {
            return Bytes::from_static(crate::sse::DONE_EVENT);
        }
        let mut tail = bytes::BytesMut::new();
        tail.extend_from_slice(&self.enc.usage(&usage.copied().unwrap_or_default()));
        tail.extend_from_slice(crate::sse::DONE_EVENT);
        tail.freeze()
    }

    fn end_forwarded(&mut self) -> Bytes {
        Bytes::from_static(crate::sse::DONE_EVENT)
    }

    fn wants_usage_event(&self) -> bool {
        self.include_usage
    }

    /// One OpenAI-shaped error event, then `[DONE]`.
    fn fail(&mut self, e: &dyn Reported) -> Bytes {
        let mut tail = bytes::BytesMut::new();
        tail.extend_from_slice(&crate::sse::data_event(&error_body(e, &self.request_id)));
        tail.extend_from_slice(crate::sse::DONE_EVENT);
        tail.freeze()
    }
}

/// The OpenAI-shaped error body: `{"error":{message,type,code,param},"request_id"}`.
pub fn error_body(e: &dyn Reported, request_id: &str) -> Vec<u8> {
    #[derive(Serialize)]
    struct Body<'a> {
        error: Inner<'a>,
        request_id: &'a str,
    }
    #[derive(Serialize)]
    struct Inner<'a> {
        message: String,
        #[serde(rename = "type")]
        kind: &'static str,
        code: &'static str,
        param: Option<&'a str>,
    }
    let body = Body {
        error: Inner { message: e.to_string(), kind: e.error_type(), code: e.code(), param: e.param() },
        request_id,
    };
    serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec())
}

/// Fills what the upstream left out of a decoded answer: an id made from the request's own, the
/// time of the answer as `created`, the upstream model's name.
fn fill_response(r: &mut ChatResponse, request_id: &str, model: &str) {
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
    /// The reasoning text, as DeepSeek and most OpenAI-compatible servers name it.
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<&'a str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tool_calls: &'a [ToolCall],
}

fn encode_response(r: &ChatResponse) -> Vec<u8> {
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
                    reasoning_content: c.reasoning.as_deref(),
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
                + c.reasoning.as_ref().map_or(0, String::len)
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
    reasoning_content: Option<&'a str>,
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
                    + c.reasoning.as_ref().map_or(0, String::len)
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
                    reasoning_content: c.reasoning.as_deref(),
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

fn encode_embeddings_response(r: &EmbeddingsResponse, format: Option<EncodingFormat>) -> Vec<u8> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn forwarded(body: Bytes) -> Result<RawChat, Error> {
        match skim_chat(body, &|_| true)? {
            Skim::Forward(r) => Ok(r),
            Skim::Decode(_) => panic!("every route forwards here"),
        }
    }

    #[test]
    fn the_model_is_replaced_where_it_stands_and_nothing_else_moves() {
        let text = br#"{ "messages" : [{"role":"user","content":"m\"odel"}], "model" : "chat" , "x":{"model":"no"} }"#;
        let raw = forwarded(Bytes::from_static(text)).unwrap();
        let body = raw.body_for("gpt-\"q\"").concat();
        let want = String::from_utf8_lossy(text).replace(r#""model" : "chat""#, r#""model" : "gpt-\"q\"""#);
        assert_eq!(String::from_utf8_lossy(&body), want);
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&body).unwrap()["model"], "gpt-\"q\"");
    }

    /// A model named before the conversation whose route translates stops the walk there; named
    /// after it, the walk is done anyway and the skim is whole.
    #[test]
    fn a_route_that_translates_stops_the_walk_early() {
        let first = Bytes::from_static(br#"{"model":"an","messages":[{"role":"user","content":"x"}]}"#);
        assert!(matches!(skim_chat(first.clone(), &|m| m != "an").unwrap(), Skim::Decode(b) if b == first));
        let last = Bytes::from_static(br#"{"messages":[{"role":"user","content":"x"}],"model":"an"}"#);
        assert!(matches!(skim_chat(last, &|m| m != "an").unwrap(), Skim::Forward(r) if r.model == "an"));
    }

    /// A second `model`, written plainly or with escapes, would be the one an upstream's parser
    /// keeps: refused, so no caller picks the real model past its alias.
    #[test]
    fn a_second_model_is_refused() {
        for text in [
            r#"{"model":"chat","messages":[{"role":"user","content":"x"}],"model":"gpt-expensive"}"#,
            r#"{"model":"chat","messages":[{"role":"user","content":"x"}],"mod\u0065l":"gpt-expensive"}"#,
        ] {
            let e = forwarded(Bytes::from(text)).unwrap_err();
            assert_eq!(e.code(), "invalid_json", "{text}");
        }
        for (text, code) in [
            (r#"{"messages":[{"role":"user","content":"x"}]}"#, "invalid_json"),
            (r#"{"model":"chat","messages":[]}"#, "invalid_request"),
            (r#"{"model":7,"messages":[{"role":"user","content":"x"}]}"#, "invalid_json"),
            (r#"[1]"#, "invalid_json"),
            (r#"{"model":"chat","messages":[{"role":"user","content":"x"}]} trailing"#, "invalid_json"),
            (r#"{"model":"chat","max_tokens":-1,"messages":[{"role":"user","content":"x"}]}"#, "invalid_json"),
        ] {
            assert_eq!(forwarded(Bytes::from(text)).unwrap_err().code(), code, "{text}");
        }
    }

    /// Every event is one `data:` line of a whole chunk object, the shared head (written once per
    /// stream) escaped like the rest.
    #[test]
    fn chunk_events_are_whole_json_objects() {
        let enc = ChunkEncoder::new("chatcmpl-a\"b\\c", 7, "gpt-\u{e9}");
        let parse = |b: bytes::Bytes| {
            let text = std::str::from_utf8(&b).unwrap();
            let json = text.strip_prefix("data: ").and_then(|t| t.strip_suffix("\n\n")).unwrap();
            assert!(!json.contains('\n'));
            serde_json::from_str::<serde_json::Value>(json).unwrap()
        };
        let head =
            json!({ "id": "chatcmpl-a\"b\\c", "object": "chat.completion.chunk", "created": 7, "model": "gpt-\u{e9}" });
        let with = |rest: serde_json::Value| {
            let mut v = head.clone();
            v.as_object_mut().unwrap().extend(rest.as_object().unwrap().clone());
            v
        };
        assert_eq!(
            parse(enc.role(2)),
            with(json!({ "choices": [
                { "index": 0, "delta": { "role": "assistant", "content": "" }, "finish_reason": null },
                { "index": 1, "delta": { "role": "assistant", "content": "" }, "finish_reason": null }] }))
        );
        let c = crate::canonical::ChunkChoice {
            index: 0,
            content: Some("line\n\"q\"".into()),
            refusal: None,
            tool_calls: vec![],
            finish_reason: Some(FinishReason::Unmapped("abort".into())),
            reasoning: None,
        };
        assert_eq!(
            parse(enc.chunk(&[c])),
            with(json!({ "choices": [{ "index": 0, "delta": { "content": "line\n\"q\"" }, "finish_reason": null,
                "provider_finish_reason": "abort" }] }))
        );
        let u = crate::canonical::Usage { prompt_tokens: 3, completion_tokens: 4, ..Default::default() };
        let usage = parse(enc.usage(&u));
        assert_eq!((usage["choices"].clone(), usage["usage"]["total_tokens"].clone()), (json!([]), json!(7)));
        assert_eq!(usage["id"], head["id"]);
    }
}
