//! The OpenAI codec: what a caller speaking OpenAI's Chat Completions and Embeddings APIs sends,
//! decoded into the canonical model, and the canonical answer encoded back: one JSON body, or
//! `chat.completion.chunk` events ending in `[DONE]`.

use base64::Engine;
use bytes::Bytes;
use http::{header, HeaderMap};
use serde::Serialize;
use serde_json::Value;

use crate::canonical::{
    ChatRequest, ChatResponse, ChunkChoice, EmbeddingsRequest, EmbeddingsResponse, EncodingFormat, FinishReason,
    ToolCall, Usage,
};
use crate::error::AxError;
use crate::pipeline::stream::StreamEncoder;

/// The caller's key: `Authorization: Bearer <key>`.
pub fn api_key(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    v.get(..7).filter(|scheme| scheme.eq_ignore_ascii_case("bearer ")).map(|_| v[7..].trim()).filter(|k| !k.is_empty())
}

pub fn decode_chat(bytes: &[u8], mode: ax_protocol::config::ParamsMode) -> Result<ChatRequest, AxError> {
    super::decode::json(bytes, mode)
}

pub fn decode_embeddings(bytes: &[u8], mode: ax_protocol::config::ParamsMode) -> Result<EmbeddingsRequest, AxError> {
    super::decode::json(bytes, mode)
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
    pub fn new(req: &ChatRequest, request_id: &str, model: &str) -> Self {
        Self {
            enc: ChunkEncoder::new(&format!("chatcmpl-{request_id}"), crate::canonical::unix_now(), model),
            include_usage: req.include_usage(),
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

    /// One OpenAI-shaped error event, then `[DONE]`.
    fn fail(&mut self, e: &AxError) -> Bytes {
        let mut tail = bytes::BytesMut::new();
        tail.extend_from_slice(&crate::sse::data_event(&e.to_body(&self.request_id)));
        tail.extend_from_slice(crate::sse::DONE_EVENT);
        tail.freeze()
    }
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
