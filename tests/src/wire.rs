//! Builders for what each provider sends: non-stream JSON bodies and SSE wire text, shaped as in
//! `shared/protocols.md`. Line endings and keep-alive comments are chosen by the caller.

use serde_json::{json, Value};

/// A tool call as a test describes it: id, function name, arguments JSON text.
pub type Call<'a> = (&'a str, &'a str, &'a str);

/// How the SSE wire text is framed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Framing {
    pub crlf: bool,
    /// Insert a `: keep-alive` comment before every n-th event (0 = never).
    pub keepalive_every: usize,
}

fn frame(events: &[(Option<&str>, String)], f: Framing) -> String {
    let nl = if f.crlf { "\r\n" } else { "\n" };
    let mut out = String::new();
    for (i, (name, data)) in events.iter().enumerate() {
        if f.keepalive_every > 0 && i % f.keepalive_every == 0 {
            out.push_str(": keep-alive");
            out.push_str(nl);
            out.push_str(nl);
        }
        if let Some(n) = name {
            out.push_str("event: ");
            out.push_str(n);
            out.push_str(nl);
        }
        out.push_str("data: ");
        out.push_str(data);
        out.push_str(nl);
        out.push_str(nl);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// OpenAI

pub fn openai_response(text: Option<&str>, calls: &[Call<'_>], finish: &str, usage: (u64, u64, u64)) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(
            |(id, name, args)| json!({ "id": id, "type": "function", "function": { "name": name, "arguments": args } }),
        )
        .collect();
    let mut message = json!({ "role": "assistant", "content": text });
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::from(tool_calls);
    }
    json!({
        "id": "chatcmpl-upstream-1", "object": "chat.completion", "created": 1_730_000_000, "model": "gpt-real",
        "choices": [{ "index": 0, "message": message, "finish_reason": finish, "logprobs": null }],
        "usage": { "prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1,
                   "prompt_tokens_details": { "cached_tokens": usage.2 } }
    })
}

pub fn openai_stream(pieces: &[&str], calls: &[Call<'_>], finish: &str, usage: (u64, u64, u64), f: Framing) -> String {
    let chunk = |delta: Value, finish: Value| {
        json!({ "id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "gpt-real",
                "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] })
        .to_string()
    };
    let mut ev: Vec<(Option<&str>, String)> =
        vec![(None, chunk(json!({ "role": "assistant", "content": "" }), Value::Null))];
    for p in pieces {
        ev.push((None, chunk(json!({ "content": p }), Value::Null)));
    }
    for (i, (id, name, args)) in calls.iter().enumerate() {
        ev.push((
            None,
            chunk(
                json!({ "tool_calls": [{ "index": i, "id": id, "type": "function",
            "function": { "name": name, "arguments": "" } }] }),
                Value::Null,
            ),
        ));
        // Arguments in two halves, as OpenAI sends them in pieces.
        let mid = args.char_indices().nth(args.chars().count() / 2).map_or(args.len(), |(b, _)| b);
        for part in [&args[..mid], &args[mid..]] {
            ev.push((
                None,
                chunk(json!({ "tool_calls": [{ "index": i, "function": { "arguments": part } }] }), Value::Null),
            ));
        }
    }
    ev.push((None, chunk(json!({}), Value::from(finish))));
    ev.push((None, json!({ "id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "gpt-real",
        "choices": [], "usage": { "prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1,
        "prompt_tokens_details": { "cached_tokens": usage.2 } } }).to_string()));
    ev.push((None, "[DONE]".to_owned()));
    frame(&ev, f)
}

// ---------------------------------------------------------------------------------------------
// Anthropic

/// usage: (input, output, cache_creation, cache_read)
pub fn anthropic_response(text: Option<&str>, calls: &[Call<'_>], stop: &str, usage: (u64, u64, u64, u64)) -> Value {
    let mut content = Vec::new();
    if let Some(t) = text {
        content.push(json!({ "type": "text", "text": t }));
    }
    for (id, name, args) in calls {
        let input: Value = serde_json::from_str(args).expect("test args are JSON");
        content.push(json!({ "type": "tool_use", "id": id, "name": name, "input": input }));
    }
    json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-real", "content": content,
        "stop_reason": stop, "stop_sequence": null,
        "usage": { "input_tokens": usage.0, "output_tokens": usage.1,
                   "cache_creation_input_tokens": usage.2, "cache_read_input_tokens": usage.3 }
    })
}

pub fn anthropic_stream(
    pieces: &[&str],
    calls: &[Call<'_>],
    stop: &str,
    usage: (u64, u64, u64, u64),
    f: Framing,
) -> String {
    let mut ev: Vec<(Option<&str>, String)> = vec![(
        Some("message_start"),
        json!({ "type": "message_start", "message": { "id": "msg_01", "type": "message", "role": "assistant",
            "content": [], "model": "claude-real", "stop_reason": null,
            "usage": { "input_tokens": usage.0, "output_tokens": 1, "cache_creation_input_tokens": usage.2,
                       "cache_read_input_tokens": usage.3 } } })
        .to_string(),
    )];
    let mut block = 0;
    if !pieces.is_empty() {
        ev.push((
            Some("content_block_start"),
            json!({ "type": "content_block_start", "index": block,
            "content_block": { "type": "text", "text": "" } })
            .to_string(),
        ));
        ev.push((Some("ping"), json!({ "type": "ping" }).to_string()));
        for p in pieces {
            ev.push((
                Some("content_block_delta"),
                json!({ "type": "content_block_delta", "index": block,
                "delta": { "type": "text_delta", "text": p } })
                .to_string(),
            ));
        }
        ev.push((Some("content_block_stop"), json!({ "type": "content_block_stop", "index": block }).to_string()));
        block += 1;
    }
    for (id, name, args) in calls {
        ev.push((
            Some("content_block_start"),
            json!({ "type": "content_block_start", "index": block,
            "content_block": { "type": "tool_use", "id": id, "name": name, "input": {} } })
            .to_string(),
        ));
        let mid = args.char_indices().nth(args.chars().count() / 2).map_or(args.len(), |(b, _)| b);
        for part in ["", &args[..mid], &args[mid..]] {
            ev.push((
                Some("content_block_delta"),
                json!({ "type": "content_block_delta", "index": block,
                "delta": { "type": "input_json_delta", "partial_json": part } })
                .to_string(),
            ));
        }
        ev.push((Some("content_block_stop"), json!({ "type": "content_block_stop", "index": block }).to_string()));
        block += 1;
    }
    ev.push((
        Some("message_delta"),
        json!({ "type": "message_delta",
        "delta": { "stop_reason": stop, "stop_sequence": null }, "usage": { "output_tokens": usage.1 } })
        .to_string(),
    ));
    ev.push((Some("message_stop"), json!({ "type": "message_stop" }).to_string()));
    frame(&ev, f)
}

// ---------------------------------------------------------------------------------------------
// Gemini

/// usage: (prompt, candidates, cached)
pub fn gemini_response(text: Option<&str>, calls: &[(&str, &str)], finish: &str, usage: (u64, u64, u64)) -> Value {
    let mut parts = Vec::new();
    if let Some(t) = text {
        parts.push(json!({ "text": t }));
    }
    for (name, args) in calls {
        let a: Value = serde_json::from_str(args).expect("test args are JSON");
        parts.push(json!({ "functionCall": { "name": name, "args": a } }));
    }
    json!({
        "candidates": [{ "content": { "role": "model", "parts": parts }, "finishReason": finish, "index": 0 }],
        "usageMetadata": { "promptTokenCount": usage.0, "candidatesTokenCount": usage.1,
                           "totalTokenCount": usage.0 + usage.1, "cachedContentTokenCount": usage.2 },
        "modelVersion": "gemini-real", "responseId": "resp-1"
    })
}

pub fn gemini_stream(
    pieces: &[&str],
    calls: &[(&str, &str)],
    finish: &str,
    usage: (u64, u64, u64),
    f: Framing,
) -> String {
    let meta = |c: u64| {
        json!({ "promptTokenCount": usage.0, "candidatesTokenCount": c,
        "totalTokenCount": usage.0 + c, "cachedContentTokenCount": usage.2 })
    };
    let mut ev: Vec<(Option<&str>, String)> = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        ev.push((
            None,
            json!({ "candidates": [{ "content": { "role": "model", "parts": [{ "text": p }] }, "index": 0 }],
            "usageMetadata": meta(i as u64 + 1), "modelVersion": "gemini-real" })
            .to_string(),
        ));
    }
    let call_parts: Vec<Value> = calls
        .iter()
        .map(|(name, args)| json!({ "functionCall": { "name": name, "args": serde_json::from_str::<Value>(args).expect("json") } }))
        .collect();
    ev.push((None, json!({ "candidates": [{ "content": { "role": "model", "parts": call_parts }, "finishReason": finish, "index": 0 }],
        "usageMetadata": meta(usage.1), "modelVersion": "gemini-real" }).to_string()));
    frame(&ev, f)
}
