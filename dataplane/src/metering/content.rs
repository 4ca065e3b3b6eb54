//! Prompts and completions in a request's span, for the tenants that opt in
//! (`tenants[].trace_content`), as the OpenTelemetry GenAI conventions shape them:
//! `gen_ai.input.messages` (the request's messages, system ones included, each
//! `{role, parts: [...]}`) and `gen_ai.output.messages` (each choice as an assistant message with
//! its `finish_reason`). Parts are `text`, `reasoning`, `tool_call` (id, name, arguments),
//! `tool_call_response` (id, response) and `uri`/`blob` for images.
//!
//! Both are made from the canonical model: a forwarded request is decoded for it, a forwarded
//! answer read into it (a stream through a second decoder, [`Transcript`]), so the attributes
//! read the same whichever protocol the caller and the upstream spoke. Only for a sampled
//! request of an opted-in tenant: no one else pays for it. Each attribute is at most
//! [`MAX_BYTES`]: past it the oldest messages go first, then the longest texts are cut, and the
//! span says `ax.content_truncated`.

use serde_json::{json, Value};

use ax_wire::canonical::{ChatRequest, ChatResponse, Choice, Content, ContentPart, FinishReason, Message};

/// The most one content attribute holds, in bytes of JSON.
pub const MAX_BYTES: usize = 256 * 1024;

/// A request's content, for its span.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Recorded {
    /// `gen_ai.input.messages`, JSON.
    pub input: Option<String>,
    /// `gen_ai.output.messages`, JSON.
    pub output: Option<String>,
    /// Something was left out to stay under `MAX_BYTES`.
    pub truncated: bool,
}

impl Recorded {
    /// The request's messages.
    pub fn input(&mut self, req: &ChatRequest) {
        let messages = req.messages.iter().map(message).collect();
        self.input = Some(self.bounded(messages));
    }

    /// The answer's choices.
    pub fn output(&mut self, r: &ChatResponse) {
        let messages = r.choices.iter().map(choice).collect();
        self.output = Some(self.bounded(messages));
    }

    /// `messages` as JSON under `MAX_BYTES`: the oldest dropped first, then the last one's texts
    /// cut until it fits.
    fn bounded(&mut self, mut messages: Vec<Value>) -> String {
        let texts: Vec<String> = messages.iter().map(Value::to_string).collect();
        let mut total = 2 + texts.iter().map(|t| t.len() + 1).sum::<usize>();
        let mut first = 0;
        while total > MAX_BYTES && texts.len() - first > 1 {
            total -= texts[first].len() + 1;
            first += 1;
            self.truncated = true;
        }
        let mut texts = texts;
        let mut max = MAX_BYTES / 2;
        while total > MAX_BYTES && max > 0 {
            self.truncated = true;
            cut_strings(&mut messages[first], max);
            let cut = messages[first].to_string();
            total = 3 + cut.len();
            texts[first] = cut;
            max /= 2;
        }
        let mut out = String::with_capacity(total);
        out.push('[');
        for (i, t) in texts[first..].iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(t);
        }
        out.push(']');
        out
    }
}

/// Every string in `v` longer than `max` bytes cut to it (at a character boundary) with `…`.
fn cut_strings(v: &mut Value, max: usize) {
    match v {
        Value::String(s) if s.len() > max => {
            let mut end = max;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s.truncate(end);
            s.push('…');
        }
        Value::Array(a) => a.iter_mut().for_each(|x| cut_strings(x, max)),
        Value::Object(o) => o.values_mut().for_each(|x| cut_strings(x, max)),
        _ => {}
    }
}

fn text(t: &str) -> Value {
    json!({ "type": "text", "content": t })
}

/// A tool call's arguments: the JSON they are, or the string when they are not JSON.
fn tool_call(id: &str, name: &str, arguments: &str) -> Value {
    let args = serde_json::from_str::<Value>(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()));
    json!({ "type": "tool_call", "id": id, "name": name, "arguments": args })
}

fn content_parts(c: &Content, parts: &mut Vec<Value>) {
    match c {
        Content::Text(t) => parts.push(text(&t.as_str())),
        Content::Parts(ps) => {
            for p in ps {
                parts.push(match p {
                    ContentPart::Text { text: t } => text(&t.as_str()),
                    ContentPart::ImageUrl { image_url } => match image_url.as_data() {
                        Some((mime, data)) => {
                            json!({ "type": "blob", "modality": "image", "mime_type": mime, "content": data })
                        }
                        None => json!({ "type": "uri", "modality": "image", "uri": image_url.url }),
                    },
                });
            }
        }
    }
}

fn message(m: &Message) -> Value {
    let mut parts = Vec::new();
    match (&m.tool_call_id, &m.content) {
        // A tool's answer to a call.
        (Some(id), Some(c)) => parts.push(json!({ "type": "tool_call_response", "id": id, "response": c.text() })),
        (_, Some(c)) => content_parts(c, &mut parts),
        (_, None) => {}
    }
    if let Some(r) = &m.refusal {
        parts.push(text(r));
    }
    for t in m.tool_calls.iter().flatten() {
        parts.push(tool_call(&t.id, &t.function.name, &t.function.arguments));
    }
    let mut v = json!({ "role": m.role.as_str(), "parts": parts });
    if let Some(name) = &m.name {
        v["name"] = Value::String(name.clone());
    }
    v
}

fn choice(c: &Choice) -> Value {
    let mut parts = Vec::new();
    if let Some(r) = c.reasoning.as_deref().filter(|r| !r.is_empty()) {
        parts.push(json!({ "type": "reasoning", "content": r }));
    }
    if let Some(t) = c.content.as_deref().filter(|t| !t.is_empty()) {
        parts.push(text(t));
    }
    if let Some(r) = &c.refusal {
        parts.push(text(r));
    }
    for t in &c.tool_calls {
        parts.push(tool_call(&t.id, &t.function.name, &t.function.arguments));
    }
    let finish = c.finish_reason.as_ref().map_or("", FinishReason::name);
    json!({ "role": "assistant", "parts": parts, "finish_reason": finish })
}

/// A forwarded whole answer (the upstream's body in the caller's protocol) read into the
/// canonical answer, for its content.
pub fn forwarded_answer(
    kind: ax_protocol::config::ProviderKind,
    protocol: ax_wire::canonical::Protocol,
    body: &[u8],
) -> Option<ChatResponse> {
    match protocol {
        ax_wire::canonical::Protocol::OpenAiResponses => ax_wire::responses::upstream::responses_content(body),
        _ => ax_wire::upstream::decode_chat(kind, body).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ax_wire::canonical::{Chunk, ChunkChoice, ToolCallDelta, Transcript};

    #[test]
    fn messages_take_the_conventions_shape() {
        let req: ChatRequest = serde_json::from_value(json!({ "model": "m", "messages": [
            { "role": "system", "content": "Be brief." },
            { "role": "user", "content": [{ "type": "text", "text": "What is here?" },
                { "type": "image_url", "image_url": { "url": "https://x/cat.png" } }] },
            { "role": "assistant", "content": null, "tool_calls": [{ "id": "c1", "type": "function",
                "function": { "name": "look", "arguments": "{\"at\":\"cat\"}" } }] },
            { "role": "tool", "tool_call_id": "c1", "content": "a cat" }
        ] }))
        .unwrap();
        let mut r = Recorded::default();
        r.input(&req);
        let v: Value = serde_json::from_str(r.input.as_deref().unwrap()).unwrap();
        assert_eq!(
            v,
            json!([
                { "role": "system", "parts": [{ "type": "text", "content": "Be brief." }] },
                { "role": "user", "parts": [{ "type": "text", "content": "What is here?" },
                    { "type": "uri", "modality": "image", "uri": "https://x/cat.png" }] },
                { "role": "assistant", "parts": [{ "type": "tool_call", "id": "c1", "name": "look",
                    "arguments": { "at": "cat" } }] },
                { "role": "tool", "parts": [{ "type": "tool_call_response", "id": "c1", "response": "a cat" }] }
            ])
        );
        assert!(!r.truncated);
    }

    #[test]
    fn a_stream_is_put_back_together() {
        let mut t = Transcript::default();
        let piece = |content: Option<&str>, tool: Option<ToolCallDelta>, finish: Option<FinishReason>| Chunk {
            choices: vec![ChunkChoice {
                content: content.map(str::to_owned),
                tool_calls: tool.into_iter().collect(),
                finish_reason: finish,
                ..ChunkChoice::default()
            }],
            usage: None,
        };
        t.chunk(&piece(Some("Hel"), None, None));
        t.chunk(&piece(Some("lo"), None, None));
        let call = |id: Option<&str>, name: Option<&str>, args: &str| ToolCallDelta {
            index: 0,
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
            arguments: args.to_owned(),
        };
        t.chunk(&piece(None, Some(call(Some("c1"), Some("f"), "{\"a\":")), None));
        t.chunk(&piece(None, Some(call(None, None, "1}")), Some(FinishReason::ToolCalls)));
        let mut r = Recorded::default();
        r.output(t.answer());
        let v: Value = serde_json::from_str(r.output.as_deref().unwrap()).unwrap();
        assert_eq!(
            v,
            json!([{ "role": "assistant", "finish_reason": "tool_calls", "parts": [
                { "type": "text", "content": "Hello" },
                { "type": "tool_call", "id": "c1", "name": "f", "arguments": { "a": 1 } }
            ] }])
        );
    }

    #[test]
    fn content_past_the_limit_is_cut_and_says_so() {
        let big = "x".repeat(MAX_BYTES / 3);
        let messages: Vec<Value> =
            (0..5).map(|i| json!({ "role": "user", "parts": [text(&format!("{i}{big}"))] })).collect();
        let mut r = Recorded::default();
        let out = r.bounded(messages);
        assert!(r.truncated && out.len() <= MAX_BYTES);
        let v: Value = serde_json::from_str(&out).unwrap();
        // The latest kept.
        assert!(v.as_array().unwrap().last().unwrap()["parts"][0]["content"].as_str().unwrap().starts_with('4'));
        let mut r = Recorded::default();
        let out = r.bounded(vec![json!({ "role": "user", "parts": [text(&"é".repeat(MAX_BYTES))] })]);
        assert!(r.truncated && out.len() <= MAX_BYTES, "{}", out.len());
    }

    #[test]
    fn a_responses_answer_is_read_for_its_content() {
        let body = json!({ "type": "response.completed", "response": { "id": "resp_1", "status": "completed",
            "output": [
                { "type": "reasoning", "summary": [{ "type": "summary_text", "text": "think" }] },
                { "type": "message", "content": [{ "type": "output_text", "text": "Hi" }] }
            ] } });
        let r = ax_wire::responses::upstream::responses_content(body.to_string().as_bytes()).unwrap();
        assert_eq!(r.id, "resp_1");
        let c = &r.choices[0];
        assert_eq!((c.content.as_deref(), c.reasoning.as_deref()), (Some("Hi"), Some("think")));
        assert_eq!(c.finish_reason, Some(FinishReason::Stop));
    }
}
