use ax_protocol::config::ProviderKind;
use ax_protocol::price::Prices;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::canonical::{ChunkChoice, StreamEncoder, Usage};
use crate::sse::SseEvent;
use crate::upstream::{self as providers, StreamDecoder};
use crate::Reported;

/// One call's tokens as a provider counts them: uncached prompt, cache reads, cache writes
/// (`hour` of them kept an hour), output (`thinking` of it reasoning).
#[derive(Debug, Clone, Copy)]
struct Counts {
    uncached: u64,
    read: u64,
    write: u64,
    hour: u64,
    output: u64,
    thinking: u64,
}

fn counts() -> impl Strategy<Value = Counts> {
    (0..2_000_000u64, 0..2_000_000u64, 0..200_000u64, 0..=100u64, 0..100_000u64, 0..=100u64).prop_map(
        |(uncached, read, write, hour_pct, output, think_pct)| Counts {
            uncached,
            read,
            write,
            hour: write * hour_pct / 100,
            output,
            thinking: output * think_pct / 100,
        },
    )
}

#[test]
fn stream_events_are_anthropics_with_the_texts_escaped() {
    let mut e = Events::new("req_1", "m", true);
    let choice = |f: fn(&mut ChunkChoice)| {
        let mut c = ChunkChoice::default();
        f(&mut c);
        vec![c]
    };
    let mut sse =
        String::from_utf8(e.chunk(&choice(|c| c.reasoning = Some("think \"hard\"\n".into()))).to_vec()).unwrap();
    sse += std::str::from_utf8(&e.chunk(&choice(|c| c.content = Some("caf\u{e9} \u{1} ok".into())))).unwrap();
    sse += std::str::from_utf8(&e.chunk(&choice(|c| {
        c.tool_calls = vec![crate::canonical::ToolCallDelta {
            index: 0,
            id: Some("t1".into()),
            name: Some("f".into()),
            arguments: "{\"a\":".into(),
        }]
    })))
    .unwrap();
    sse += std::str::from_utf8(&e.finish(None)).unwrap();
    let events: Vec<(String, Value)> = sse
        .split("\n\n")
        .filter(|b| !b.is_empty())
        .map(|b| {
            let (name, data) = b.split_once('\n').unwrap();
            (
                name.strip_prefix("event: ").unwrap().to_owned(),
                serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap(),
            )
        })
        .collect();
    let delta = |i: u32, d: Value| json!({ "type": "content_block_delta", "index": i, "delta": d });
    let stop = |i: u32| json!({ "type": "content_block_stop", "index": i });
    let expected = [
        (
            "content_block_start",
            json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "thinking", "thinking": "", "signature": "" } }),
        ),
        ("content_block_delta", delta(0, json!({ "type": "thinking_delta", "thinking": "think \"hard\"\n" }))),
        ("content_block_stop", stop(0)),
        (
            "content_block_start",
            json!({ "type": "content_block_start", "index": 1, "content_block": { "type": "text", "text": "" } }),
        ),
        ("content_block_delta", delta(1, json!({ "type": "text_delta", "text": "caf\u{e9} \u{1} ok" }))),
        ("content_block_stop", stop(1)),
        (
            "content_block_start",
            json!({ "type": "content_block_start", "index": 2, "content_block": { "type": "tool_use", "id": "t1", "name": "f", "input": {} } }),
        ),
        ("content_block_delta", delta(2, json!({ "type": "input_json_delta", "partial_json": "{\"a\":" }))),
        ("content_block_stop", stop(2)),
    ];
    // Those, then `message_delta` and `message_stop`.
    assert_eq!(events.len(), expected.len() + 2, "{sse}");
    for (got, (name, data)) in events.iter().zip(expected) {
        assert_eq!((got.0.as_str(), &got.1), (name, &data));
    }
    // Each delta as Anthropic writes it: type, index, delta, in that order.
    assert!(
        sse.contains(
            r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"café \u0001 ok"}}"#
        ),
        "{sse}"
    );
}

fn event(data: Value) -> SseEvent {
    SseEvent::new(None, data.to_string())
}

/// The usage of a whole stream, as its decoder reports it last.
fn stream_usage(mut d: StreamDecoder, events: &[Value]) -> Usage {
    let mut last = None;
    for e in events {
        match d.on_event(&event(e.clone())).unwrap() {
            Some(crate::canonical::StreamItem::Chunk(c)) => last = c.usage.or(last),
            Some(crate::canonical::StreamItem::Raw(r)) => last = r.usage.or(last),
            _ => {}
        }
    }
    last.expect("the stream reported usage")
}

/// Every provider's way of writing `c` (those that cannot say a part get it zeroed), decoded
/// as ax decodes it: (what the provider could say, the usage ax read).
fn decoded(c: Counts) -> Vec<(&'static str, Counts, Usage)> {
    let mut out = Vec::new();
    let anthropic_usage = json!({ "input_tokens": c.uncached, "output_tokens": c.output,
        "cache_read_input_tokens": c.read, "cache_creation_input_tokens": c.write,
        "cache_creation": { "ephemeral_5m_input_tokens": c.write - c.hour, "ephemeral_1h_input_tokens": c.hour } });
    let message = json!({ "type": "message", "id": "m", "model": "x", "role": "assistant", "stop_reason": "end_turn",
        "content": [{ "type": "text", "text": "a" }], "usage": anthropic_usage });
    let whole = providers::decode_chat(ProviderKind::Anthropic, message.to_string().as_bytes()).unwrap();
    let no_think = Counts { thinking: 0, ..c };
    out.push(("anthropic", no_think, whole.usage.unwrap()));
    // A stream: the prompt's counts at message_start, the output at message_delta.
    let mut start_usage = anthropic_usage.clone();
    start_usage["output_tokens"] = json!(1);
    let events = [
        json!({ "type": "message_start", "message": { "id": "m", "type": "message", "role": "assistant",
            "content": [], "model": "x", "usage": start_usage } }),
        json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
        json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": "a" } }),
        json!({ "type": "content_block_stop", "index": 0 }),
        json!({ "type": "message_delta", "delta": { "stop_reason": "end_turn" }, "usage": { "output_tokens": c.output } }),
        json!({ "type": "message_stop" }),
    ];
    let translated = StreamDecoder::new(ProviderKind::Anthropic).unwrap();
    out.push(("anthropic stream", no_think, stream_usage(translated, &events)));
    let forwarded =
        StreamDecoder::forwarding(ProviderKind::Anthropic, crate::canonical::Protocol::AnthropicMessages).unwrap();
    out.push(("anthropic stream forwarded", no_think, stream_usage(forwarded, &events)));

    // OpenAI: the prompt includes cached tokens; OpenRouter-style cache writes in the details.
    let openai = |usage: Value| {
        json!({ "id": "c", "object": "chat.completion", "created": 1, "model": "x", "usage": usage,
            "choices": [{ "index": 0, "finish_reason": "stop", "message": { "role": "assistant", "content": "a" } }] })
    };
    let body = openai(json!({ "prompt_tokens": c.uncached + c.read + c.write, "completion_tokens": c.output,
        "prompt_tokens_details": { "cached_tokens": c.read, "cache_write_tokens": c.write },
        "completion_tokens_details": { "reasoning_tokens": c.thinking } }));
    let r = providers::decode_chat(ProviderKind::Openai, body.to_string().as_bytes()).unwrap();
    out.push(("openai", Counts { hour: 0, ..c }, r.usage.unwrap()));
    // DeepSeek: cache hits and misses at the top level.
    let body = openai(json!({ "prompt_tokens": c.uncached + c.read, "completion_tokens": c.output,
        "prompt_cache_hit_tokens": c.read, "prompt_cache_miss_tokens": c.uncached }));
    let r = providers::decode_chat(ProviderKind::Openai, body.to_string().as_bytes()).unwrap();
    out.push(("deepseek", Counts { write: 0, hour: 0, thinking: 0, ..c }, r.usage.unwrap()));
    // Gemini: thoughts counted apart from the candidates.
    let body = json!({ "candidates": [{ "index": 0, "finishReason": "STOP",
            "content": { "role": "model", "parts": [{ "text": "a" }] } }],
        "usageMetadata": { "promptTokenCount": c.uncached + c.read, "cachedContentTokenCount": c.read,
            "candidatesTokenCount": c.output - c.thinking, "thoughtsTokenCount": c.thinking } });
    let r = providers::decode_chat(ProviderKind::Gemini, body.to_string().as_bytes()).unwrap();
    out.push(("gemini", Counts { write: 0, hour: 0, ..c }, r.usage.unwrap()));
    out
}

#[test]
fn text_documents_are_text_and_pdfs_need_anthropic() {
    let ask = |source: Value| {
        let body = json!({ "model": "m", "max_tokens": 10, "messages": [{ "role": "user", "content": [
            { "type": "document", "source": source, "title": "notes", "citations": { "enabled": true } },
            { "type": "text", "text": "Summarize." } ] }] });
        let body = Bytes::from(body.to_string());
        decode_canonical(&body, ax_protocol::config::ParamsMode::Strict, false).map(|(req, _)| req)
    };
    for source in [
        json!({ "type": "text", "media_type": "text/plain", "data": "Ax is a gateway." }),
        json!({ "type": "content", "content": "Ax is a gateway." }),
        json!({ "type": "content", "content": [{ "type": "text", "text": "Ax is a gateway." }] }),
    ] {
        let req = ask(source).unwrap();
        assert_eq!(req.messages[0].content.as_ref().unwrap().text(), "Ax is a gateway.Summarize.");
    }
    let e = ask(json!({ "type": "base64", "media_type": "application/pdf", "data": "JVBERi0=" })).unwrap_err();
    assert_eq!(e.code(), "invalid_request");
    assert_eq!(e.param(), Some("messages[0].content[0].source"));
}

proptest! {
    /// Whatever provider reports a call's usage, and however (whole, streamed, forwarded),
    /// the canonical usage holds the same counts; an Anthropic caller gets them in Anthropic's
    /// convention (input without either cache count, writes split 5m/1h), an OpenAI caller in
    /// OpenAI's (prompt with them), and the cost is each part at its own price, rounded once.
    #[test]
    fn every_providers_usage_is_reported_and_priced_exactly(
        c in counts(),
        prices in (0..20_000_000u64, 0..80_000_000u64, 0..2_000_000u64, 0..25_000_000u64, 0..40_000_000u64),
    ) {
        let (input, output, cached_input, cache_write, cache_write_1h) = prices;
        let p = Prices { input, output, cached_input, cache_write, cache_write_1h };
        for (shape, want, got) in decoded(c) {
            prop_assert_eq!(got.prompt_tokens, want.uncached + want.read + want.write, "{}", shape);
            prop_assert_eq!(got.cached_tokens, want.read, "{}", shape);
            prop_assert_eq!(got.cache_write_tokens, want.write, "{}", shape);
            prop_assert_eq!(got.cache_write_1h_tokens, want.hour, "{}", shape);
            prop_assert_eq!(got.completion_tokens, want.output, "{}", shape);
            prop_assert_eq!(got.reasoning_tokens, want.thinking, "{}", shape);

            let out = crate::anthropic::Usage::from(&got);
            prop_assert_eq!(out, crate::anthropic::Usage {
                input_tokens: Some(want.uncached),
                output_tokens: Some(want.output),
                cache_creation_input_tokens: Some(want.write),
                cache_read_input_tokens: Some(want.read),
                cache_creation: Some(crate::anthropic::CacheCreation {
                    ephemeral_5m_input_tokens: want.write - want.hour,
                    ephemeral_1h_input_tokens: want.hour,
                }),
            }, "{}", shape);
            prop_assert_eq!(out.canonical(), Usage { reasoning_tokens: 0, ..got }, "{}: read back as written", shape);
            let openai: Value = serde_json::to_value(got).unwrap();
            prop_assert_eq!(&openai["prompt_tokens"], &json!(want.uncached + want.read + want.write));
            prop_assert_eq!(&openai["prompt_tokens_details"]["cached_tokens"], &json!(want.read));

            let by_hand = u128::from(want.uncached) * u128::from(input)
                + u128::from(want.read) * u128::from(cached_input)
                + u128::from(want.write - want.hour) * u128::from(cache_write)
                + u128::from(want.hour) * u128::from(cache_write_1h)
                + u128::from(want.output) * u128::from(output);
            let by_hand = u64::try_from((by_hand + 500_000) / 1_000_000).unwrap();
            prop_assert_eq!(p.cost_micro_usd(got.tokens()), by_hand, "{}", shape);
        }
    }
}
