//! The wire conformance corpus (`tests/corpus/`): upstream streams as each provider sends them,
//! the requests real clients send, the spec-legal shapes one stream can take on the wire, and the
//! caller's side of it: a spec-following SSE parser that is not ax's.
//!
//! A fixture stream is written plainly (LF, one `data:` line an event, compact JSON, a comment on
//! its first line saying what it is). `Shape::apply` frames the same events every other way the
//! SSE specification allows; whatever the shape, a caller must see the same thing.

use std::path::PathBuf;

use futures_util::StreamExt;
use serde_json::Value;

/// `tests/corpus`.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// Every fixture stream of `provider` (`openai`, `anthropic`, `gemini`, `responses`): (name, text),
/// in name order.
pub fn streams(provider: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(dir().join("streams").join(provider))
        .unwrap_or_else(|e| panic!("corpus streams of {provider}: {e}"))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sse"))
        .map(|p| {
            let name = p.file_stem().unwrap_or_default().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        })
        .collect();
    out.sort();
    out
}

/// One event as a fixture writes it: its name, if any, and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plain {
    pub event: Option<String>,
    pub data: String,
}

/// A fixture's events (its plain framing: `event:`/`data:` lines, `:` comments, blank lines).
pub fn plain_events(fixture: &str) -> Vec<Plain> {
    fixture
        .split("\n\n")
        .filter_map(|block| {
            let mut ev = Plain { event: None, data: String::new() };
            let mut has_data = false;
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    ev.event = Some(n.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    if has_data {
                        ev.data.push('\n');
                    }
                    ev.data.push_str(d);
                    has_data = true;
                }
            }
            has_data.then_some(ev)
        })
        .collect()
}

/// A way the SSE specification lets the same events be framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// As the fixture is written.
    Lf,
    /// Lines end in `\r\n`.
    Crlf,
    /// Lines end in a lone `\r`.
    Cr,
    /// Each event's JSON data over several `data:` lines (they join with `\n`), as pretty-printing
    /// servers and proxies send it.
    MultiLine,
    /// `:` comments (keep-alives) between events and between an event's fields.
    Comments,
    /// `id:`, `retry:` and unknown fields, and `data:` without the optional space.
    Fields,
    /// Blank lines between events, events with empty data, and an `event:` with no data (never
    /// dispatched).
    Empty,
    /// The stream closes right after its last `data:` line, with no blank line after it.
    NoFinalBlank,
}

impl Shape {
    pub const ALL: [Shape; 8] = [
        Shape::Lf,
        Shape::Crlf,
        Shape::Cr,
        Shape::MultiLine,
        Shape::Comments,
        Shape::Fields,
        Shape::Empty,
        Shape::NoFinalBlank,
    ];

    /// The fixture's events framed this way.
    pub fn apply(self, fixture: &str) -> String {
        let events = plain_events(fixture);
        let mut out = String::new();
        for (i, ev) in events.iter().enumerate() {
            match self {
                Shape::Comments => out.push_str(": keep-alive\n\n:\n"),
                Shape::Empty => out.push_str("\n\nevent: ping\n\ndata:\n\n"),
                _ => {}
            }
            if let Some(n) = &ev.event {
                out.push_str("event: ");
                out.push_str(n);
                out.push('\n');
            }
            if self == Shape::Comments {
                out.push_str(": between the fields\n");
            }
            if self == Shape::Fields {
                out.push_str(&format!("id: {i}\nx-vendor: ignored\n"));
                if i == 0 {
                    out.push_str("retry: 1500\n");
                }
            }
            let lines = if self == Shape::MultiLine { pretty(&ev.data) } else { ev.data.clone() };
            for line in lines.split('\n') {
                out.push_str(if self == Shape::Fields && i % 2 == 1 { "data:" } else { "data: " });
                out.push_str(line);
                out.push('\n');
            }
            out.push('\n');
        }
        match self {
            Shape::Crlf => out.replace('\n', "\r\n"),
            Shape::Cr => out.replace('\n', "\r"),
            Shape::NoFinalBlank => out.trim_end_matches('\n').to_owned(),
            _ => out,
        }
    }
}

/// JSON text broken into lines after each `{`, `[` and `,` outside strings (order and every byte of
/// its strings kept); anything else as it is.
fn pretty(json: &str) -> String {
    if serde_json::from_str::<Value>(json).is_err() {
        return json.to_owned();
    }
    let mut out = String::with_capacity(json.len() * 2);
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        out.push(c);
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' | ',' => out.push_str("\n  "),
            _ => {}
        }
    }
    out
}

/// One event as a spec-following client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The event type: its `event:` field, `message` without one.
    pub event: String,
    pub data: String,
}

/// The events a spec-following SSE client (`eventsource-stream`, which `async-openai` uses) reads
/// from `bytes`, given as the reads `pieces` (split anywhere). Events with empty data are kept:
/// they are events.
pub async fn client_events(pieces: Vec<bytes::Bytes>) -> Vec<Seen> {
    use eventsource_stream::Eventsource;
    let stream = futures_util::stream::iter(pieces.into_iter().map(Ok::<_, std::convert::Infallible>));
    let events: Vec<_> = stream.eventsource().collect().await;
    events
        .into_iter()
        .map(|e| e.unwrap_or_else(|e| panic!("the stream is not valid SSE: {e}")))
        .map(|e| Seen { event: if e.event.is_empty() { "message".to_owned() } else { e.event }, data: e.data })
        .collect()
}

/// The `ax` member ax writes into a stream's last JSON event, taken out of `data` (which is then
/// the upstream's data, byte for byte), and the member's value.
pub fn strip_ax(data: &str) -> (String, Option<Value>) {
    let Some(at) = data.rfind("\"ax\":{") else { return (data.to_owned(), None) };
    let mut values = serde_json::Deserializer::from_str(&data[at + 5..]).into_iter::<Value>();
    let Some(Ok(facts)) = values.next() else { return (data.to_owned(), None) };
    let end = at + 5 + values.byte_offset();
    let start = if data[..at].ends_with(',') { at - 1 } else { at };
    (format!("{}{}", &data[..start], &data[end..]), Some(facts))
}

/// Values that change from run to run (ids ax makes, times, the request id), replaced in a
/// compact JSON text so that two runs compare equal: every string or number under these keys.
pub const VOLATILE: [&str; 9] =
    ["id", "created", "created_at", "request_id", "item_id", "call_id", "tool_call_id", "tool_use_id", "responseId"];

/// `json` (compact, as ax writes it) with the `VOLATILE` values replaced by `"…"`.
pub fn redact(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut rest = json;
    'scan: while let Some(q) = rest.find('"') {
        out.push_str(&rest[..q]);
        rest = &rest[q..];
        for key in VOLATILE {
            let Some(after) =
                rest.strip_prefix('"').and_then(|r| r.strip_prefix(key)).and_then(|r| r.strip_prefix("\":"))
            else {
                continue;
            };
            let mut values = serde_json::Deserializer::from_str(after).into_iter::<Value>();
            if let Some(Ok(Value::String(_) | Value::Number(_))) = values.next() {
                out.push_str(&rest[..key.len() + 3]);
                out.push_str("\"…\"");
                rest = &after[values.byte_offset()..];
                continue 'scan;
            }
        }
        // Not a volatile key: copy this string whole (escapes included).
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        match values.next() {
            Some(Ok(_)) => {
                out.push_str(&rest[..values.byte_offset()]);
                rest = &rest[values.byte_offset()..];
            }
            _ => {
                out.push_str(rest);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// What a caller puts back together from a stream, in any protocol: the text, the reasoning, the
/// tool calls (name, arguments), whether an error ended it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Content {
    pub text: String,
    pub reasoning: String,
    pub calls: Vec<(String, String)>,
    pub error: bool,
}

/// A stream's content, read as a client of `protocol` reads it (`openai`: Chat Completions,
/// `anthropic`: Messages, `gemini`, `responses`).
pub fn content(protocol: &str, events: &[(Option<String>, String)]) -> Content {
    let mut c = Content::default();
    for (_, data) in events {
        let Ok(v) = serde_json::from_str::<Value>(data) else { continue };
        match protocol {
            "openai" => {
                if v.get("error").is_some_and(|e| !e.is_null()) {
                    c.error = true;
                }
                for ch in v["choices"].as_array().into_iter().flatten() {
                    let d = &ch["delta"];
                    c.text.push_str(d["content"].as_str().unwrap_or_default());
                    c.reasoning.push_str(d["reasoning_content"].as_str().unwrap_or_default());
                    for tc in d["tool_calls"].as_array().into_iter().flatten() {
                        let i = tc["index"].as_u64().unwrap_or(0) as usize;
                        if c.calls.len() <= i {
                            c.calls.resize(i + 1, Default::default());
                        }
                        if let Some(n) = tc["function"]["name"].as_str() {
                            c.calls[i].0 = n.to_owned();
                        }
                        c.calls[i].1.push_str(tc["function"]["arguments"].as_str().unwrap_or_default());
                    }
                }
            }
            "anthropic" => match v["type"].as_str().unwrap_or_default() {
                "error" => c.error = true,
                "content_block_start" if v["content_block"]["type"] == "tool_use" => {
                    c.calls.push((v["content_block"]["name"].as_str().unwrap_or_default().to_owned(), String::new()));
                }
                "content_block_delta" => {
                    let d = &v["delta"];
                    match d["type"].as_str().unwrap_or_default() {
                        "text_delta" => c.text.push_str(d["text"].as_str().unwrap_or_default()),
                        "thinking_delta" => c.reasoning.push_str(d["thinking"].as_str().unwrap_or_default()),
                        "input_json_delta" => {
                            if let Some(last) = c.calls.last_mut() {
                                last.1.push_str(d["partial_json"].as_str().unwrap_or_default());
                            }
                        }
                        _ => {}
                    }
                }
                _ => {}
            },
            "gemini" => {
                if v.get("error").is_some() {
                    c.error = true;
                }
                for part in v["candidates"][0]["content"]["parts"].as_array().into_iter().flatten() {
                    if let Some(t) = part["text"].as_str() {
                        if part["thought"] == true {
                            c.reasoning.push_str(t);
                        } else {
                            c.text.push_str(t);
                        }
                    }
                    if let Some(f) = part.get("functionCall") {
                        c.calls.push((f["name"].as_str().unwrap_or_default().to_owned(), f["args"].to_string()));
                    }
                }
            }
            _ => match v["type"].as_str().unwrap_or_default() {
                "error" | "response.failed" => c.error = true,
                "response.output_text.delta" => c.text.push_str(v["delta"].as_str().unwrap_or_default()),
                "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                    c.reasoning.push_str(v["delta"].as_str().unwrap_or_default())
                }
                "response.output_item.added" if v["item"]["type"] == "function_call" => {
                    c.calls.push((v["item"]["name"].as_str().unwrap_or_default().to_owned(), String::new()));
                }
                "response.function_call_arguments.delta" => {
                    if let Some(last) = c.calls.last_mut() {
                        last.1.push_str(v["delta"].as_str().unwrap_or_default());
                    }
                }
                _ => {}
            },
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_replaces_only_the_volatile_values() {
        let got =
            redact(r#"{"id":"chatcmpl-1","model":"m","created":17,"x":"\"id\":\"keep\"","ax":{"request_id":"r"}}"#);
        assert_eq!(got, r#"{"id":"…","model":"m","created":"…","x":"\"id\":\"keep\"","ax":{"request_id":"…"}}"#);
    }

    #[test]
    fn strip_ax_gives_back_the_upstreams_data() {
        let (data, facts) = strip_ax("{\"a\":1,\n\"b\":{}\n,\"ax\":{\"n\":\"}\"}}");
        assert_eq!(data, "{\"a\":1,\n\"b\":{}\n}");
        assert_eq!(facts, Some(serde_json::json!({ "n": "}" })));
    }

    #[test]
    fn every_shape_holds_the_same_events() {
        let fixture = ": about\nevent: a\ndata: {\"k\":[1,\"x,{\\\"\"]}\n\ndata: [DONE]\n\n";
        for shape in Shape::ALL {
            let wire = shape.apply(fixture);
            let events =
                futures_util::FutureExt::now_or_never(client_events(vec![bytes::Bytes::from(wire + "\n\n")])).unwrap();
            let data: Vec<Value> = events
                .iter()
                .filter(|e| !e.data.is_empty())
                .map(|e| serde_json::from_str(&e.data).unwrap_or(Value::Null))
                .collect();
            assert_eq!(data, [serde_json::json!({ "k": [1, "x,{\""] }), Value::Null], "{shape:?}");
        }
    }
}
