//! Adapter unit tests: decoder state machines and error classification, event by event.

use serde_json::json;

use super::*;
use crate::canonical::{Chunk, Content, ContentPart, FinishReason, StreamItem};
use crate::Reported;

fn ev(data: serde_json::Value) -> SseEvent {
    SseEvent::new(None, data.to_string())
}

fn chunk(item: Option<StreamItem>) -> Chunk {
    match item {
        Some(StreamItem::Chunk(c)) => c,
        other => panic!("expected a chunk, got {other:?}"),
    }
}

#[test]
fn anthropic_block_indexes_map_to_tool_indexes() {
    let mut s = anthropic::upstream::StreamState::default();
    let start = s.on_event(&ev(json!({ "type": "message_start", "message": { "usage": {
        "input_tokens": 5, "cache_read_input_tokens": 7, "cache_creation_input_tokens": 3 } } })));
    assert_eq!(chunk(start.unwrap()).usage.unwrap().prompt_tokens, 15);
    // Block 0 thinking (its text is reasoning; its signature no other protocol carries), block 1
    // text, blocks 2 and 3 tool_use.
    let thought = s.on_event(&ev(
        json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "thinking_delta", "thinking": "hmm" } }),
    ));
    assert_eq!(chunk(thought.unwrap()).choices[0].reasoning.as_deref(), Some("hmm"));
    let events = [
        json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "thinking", "thinking": "" } }),
        json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "signature_delta", "signature": "x" } }),
        json!({ "type": "content_block_start", "index": 1, "content_block": { "type": "text", "text": "" } }),
        json!({ "type": "some_future_event", "index": 1 }),
    ];
    for e in events {
        assert_eq!(s.on_event(&ev(e)).unwrap(), None);
    }
    let t = chunk(
        s.on_event(&ev(
            json!({ "type": "content_block_delta", "index": 1, "delta": { "type": "text_delta", "text": "Hi" } }),
        ))
        .unwrap(),
    );
    assert_eq!(t.choices[0].content.as_deref(), Some("Hi"));
    for (block, id) in [(2, "toolu_a"), (3, "toolu_b")] {
        let c = chunk(
            s.on_event(&ev(json!({ "type": "content_block_start", "index": block,
            "content_block": { "type": "tool_use", "id": id, "name": "f", "input": {} } })))
                .unwrap(),
        );
        assert_eq!(c.choices[0].tool_calls[0].index, block - 2);
        assert_eq!(c.choices[0].tool_calls[0].id.as_deref(), Some(id));
    }
    let d = chunk(
        s.on_event(&ev(json!({ "type": "content_block_delta", "index": 3,
        "delta": { "type": "input_json_delta", "partial_json": "{\"a\":1}" } })))
            .unwrap(),
    );
    assert_eq!((d.choices[0].tool_calls[0].index, d.choices[0].tool_calls[0].arguments.as_str()), (1, "{\"a\":1}"));
    // A delta for a block that never started is a protocol violation.
    assert!(s
        .on_event(&ev(json!({ "type": "content_block_delta", "index": 9,
            "delta": { "type": "input_json_delta", "partial_json": "{}" } })))
        .is_err());
    let end = chunk(
        s.on_event(&ev(json!({ "type": "message_delta", "delta": { "stop_reason": "tool_use" }, "usage": { "output_tokens": 42 } })))
            .unwrap(),
    );
    assert_eq!(end.choices[0].finish_reason, Some(FinishReason::ToolCalls));
    let u = end.usage.unwrap();
    assert_eq!((u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.cache_write_tokens), (15, 42, 7, 3));
    assert_eq!(s.on_event(&ev(json!({ "type": "message_stop" }))).unwrap(), Some(StreamItem::Done));
    let err = s.on_event(&ev(json!({ "type": "error", "error": { "type": "overloaded_error", "message": "m" } })));
    assert_eq!(err.unwrap_err().code(), "upstream_unavailable");
}

#[test]
fn gemini_function_calls_across_events_keep_counting() {
    let mut s = gemini::StreamState::default();
    let call = |name: &str| json!({ "candidates": [{ "content": { "role": "model", "parts": [{ "functionCall": { "name": name, "args": { "x": 1 } } }] }, "index": 0 }] });
    let a = chunk(s.on_event(&ev(call("f"))).unwrap());
    let b = chunk(s.on_event(&ev(call("g"))).unwrap());
    assert_eq!(a.choices[0].tool_calls[0].index, 0);
    assert_eq!(b.choices[0].tool_calls[0].index, 1);
    assert_ne!(a.choices[0].tool_calls[0].id, b.choices[0].tool_calls[0].id);
    assert_eq!(b.choices[0].tool_calls[0].arguments, r#"{"x":1}"#);
    // The finishing event carries no call itself, but the candidate called functions: tool_calls.
    let end = chunk(
        s.on_event(&ev(json!({ "candidates": [{ "content": { "parts": [] }, "finishReason": "STOP", "index": 0 }],
            "usageMetadata": { "promptTokenCount": 4, "candidatesTokenCount": 6, "thoughtsTokenCount": 2 } })))
            .unwrap(),
    );
    assert_eq!(end.choices[0].finish_reason, Some(FinishReason::ToolCalls));
    let u = end.usage.unwrap();
    assert_eq!((u.completion_tokens, u.reasoning_tokens), (8, 2));
    assert!(s.finished);
    // Thought parts are not answer text.
    let mut s = gemini::StreamState::default();
    let t = chunk(
        s.on_event(&ev(json!({ "candidates": [{ "content": { "parts": [{ "text": "plan", "thought": true }, { "text": "answer" }] } }] })))
            .unwrap(),
    );
    assert_eq!(t.choices[0].content.as_deref(), Some("answer"));
}

#[test]
fn openai_compatible_quirks() {
    // vLLM's error shape inside a 200.
    let e = openai::upstream::decode_chat(br#"{"object":"error","message":"bad","type":"BadRequestError","code":400}"#)
        .unwrap_err();
    assert_eq!(e.code(), "upstream_rejected_request");
    // An `error` string.
    assert!(openai::upstream::decode_chat(br#"{"error":"overloaded"}"#).is_err());
    // DeepSeek reports cache hits as prompt_cache_hit_tokens.
    let r = openai::upstream::decode_chat(
        br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],
            "usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_cache_hit_tokens":6}}"#,
    )
    .unwrap();
    assert_eq!(r.usage.unwrap().cached_tokens, 6);
    // A non-string `object` is not an error marker.
    let r =
        openai::upstream::decode_chat(br#"{"object":null,"choices":[{"index":0,"message":{"content":"x"}}]}"#).unwrap();
    assert_eq!(r.choices[0].content.as_deref(), Some("x"));
    // A 200 with no choices is not a reply.
    assert_eq!(
        openai::upstream::decode_chat(br#"{"id":"x","choices":[]}"#).unwrap_err().code(),
        "upstream_invalid_response"
    );
    // The role-only opening chunk produces nothing; [DONE] ends.
    let mut s = openai::upstream::StreamState::default();
    let opening =
        json!({ "choices": [{ "index": 0, "delta": { "role": "assistant", "content": "" }, "finish_reason": null }] });
    assert_eq!(s.on_event(&ev(opening)).unwrap(), None);
    assert_eq!(s.on_event(&SseEvent::new(None, "[DONE]".into())).unwrap(), Some(StreamItem::Done));
    assert!(!s.finished, "[DONE] without a finish reason is not a finish");
}

#[test]
fn classification_table() {
    let cases = [
        (400, None, "upstream_rejected_request", false),
        (401, None, "upstream_auth_failed", false),
        (403, None, "upstream_auth_failed", false),
        (404, None, "upstream_model_not_found", false),
        (408, None, "upstream_timeout", true),
        (422, None, "upstream_rejected_request", false),
        (429, None, "upstream_rate_limited", true),
        (500, None, "upstream_error", true),
        (502, None, "upstream_error", true),
        (503, None, "upstream_unavailable", true),
        (504, None, "upstream_timeout", true),
        (529, None, "upstream_unavailable", true),
        (400, Some("content_filter"), "content_filter", false),
    ];
    for (status, code, want, retry) in cases {
        let e = classify(status, code);
        assert_eq!((e.code(), e.is_retryable()), (want, retry), "status {status}");
    }
    let ctx = decode_error(ProviderKind::Anthropic, 400,
        br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#, None);
    assert_eq!(ctx.code(), "context_length_exceeded");
    let rl = decode_error(ProviderKind::Openai, 429, b"{}", Some(std::time::Duration::from_secs(7)));
    assert_eq!(rl, Error::UpstreamRateLimited(Some(std::time::Duration::from_secs(7))));
    assert_eq!(estimate_tokens(0), 0);
    assert_eq!(estimate_tokens(10), 4);
}

/// Every stream decoder, translating or forwarding, keeps the answer's id (the first seen) and its
/// finish reasons, in OpenAI's words where ax maps them; whole answers give them when asked.
#[test]
fn decoders_keep_the_answers_id_and_finish_reasons() {
    use crate::canonical::{AnswerFacts, Protocol};
    let openai = [
        json!({ "id": "chatcmpl-1", "choices": [{ "index": 0, "delta": { "content": "hi" } }] }),
        json!({ "id": "chatcmpl-1", "choices": [{ "index": 0, "delta": {}, "finish_reason": "length" }] }),
    ];
    let anthropic = [
        json!({ "type": "message_start", "message": { "id": "msg_1", "usage": { "input_tokens": 1 } } }),
        json!({ "type": "message_delta", "delta": { "stop_reason": "tool_use" }, "usage": { "output_tokens": 2 } }),
    ];
    let gemini = [json!({ "responseId": "g-1", "candidates": [{ "index": 0,
        "content": { "parts": [{ "text": "x" }] }, "finishReason": "STOP" }] })];
    let responses = [json!({ "type": "response.completed", "response": { "id": "resp_1", "status": "incomplete",
        "incomplete_details": { "reason": "max_output_tokens" }, "output": [] } })];
    let cases: [(StreamDecoder, &[serde_json::Value], &str, FinishReason); 6] = [
        (StreamDecoder::new(ProviderKind::Openai).unwrap(), &openai, "chatcmpl-1", FinishReason::Length),
        (
            StreamDecoder::forwarding(ProviderKind::Openai, Protocol::OpenAiChat).unwrap(),
            &openai,
            "chatcmpl-1",
            FinishReason::Length,
        ),
        (StreamDecoder::new(ProviderKind::Anthropic).unwrap(), &anthropic, "msg_1", FinishReason::ToolCalls),
        (
            StreamDecoder::forwarding(ProviderKind::Anthropic, Protocol::AnthropicMessages).unwrap(),
            &anthropic,
            "msg_1",
            FinishReason::ToolCalls,
        ),
        (StreamDecoder::new(ProviderKind::Gemini).unwrap(), &gemini, "g-1", FinishReason::Stop),
        (
            StreamDecoder::forwarding(ProviderKind::Openai, Protocol::OpenAiResponses).unwrap(),
            &responses,
            "resp_1",
            FinishReason::Length,
        ),
    ];
    for (mut d, events, id, finish) in cases {
        for e in events {
            d.on_event(&ev(e.clone())).unwrap();
        }
        assert_eq!(d.facts(), AnswerFacts { id: Some(id.to_owned()), finish_reasons: [finish].into() }, "{id}");
        assert_eq!(d.facts(), AnswerFacts::default(), "taken once");
    }
    // Whole answers, read only when asked.
    let body = json!({ "id": "chatcmpl-2", "created": 1, "model": "m",
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": "x" }, "finish_reason": "stop" }] });
    let mut facts = AnswerFacts::default();
    openai::upstream::forwardable(body.to_string().as_bytes(), Some(&mut facts)).unwrap();
    assert_eq!(facts, AnswerFacts { id: Some("chatcmpl-2".into()), finish_reasons: [FinishReason::Stop].into() });
    let body = json!({ "id": "msg_2", "type": "message", "stop_reason": "end_turn", "content": [],
        "usage": { "input_tokens": 1, "output_tokens": 1 } });
    let mut facts = AnswerFacts::default();
    anthropic::upstream::forwardable(body.to_string().as_bytes(), Some(&mut facts)).unwrap();
    assert_eq!(facts, AnswerFacts { id: Some("msg_2".into()), finish_reasons: [FinishReason::Stop].into() });
    let body = json!({ "id": "resp_2", "status": "completed",
        "output": [{ "type": "function_call", "name": "f", "arguments": "{}" }] });
    let mut facts = AnswerFacts::default();
    crate::responses::upstream::responses_forwardable(body.to_string().as_bytes(), Some(&mut facts)).unwrap();
    assert_eq!(facts, AnswerFacts { id: Some("resp_2".into()), finish_reasons: [FinishReason::ToolCalls].into() });
}

#[test]
fn optional_strings_borrow_from_the_body_unless_escaped() {
    use std::borrow::Cow;
    #[derive(serde::Deserialize)]
    struct T<'a> {
        #[serde(default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
        a: Option<Cow<'a, str>>,
    }
    let t: T<'_> = serde_json::from_str(r#"{"a":"chatcmpl-1"}"#).unwrap();
    assert!(matches!(t.a, Some(Cow::Borrowed("chatcmpl-1"))));
    let t: T<'_> = serde_json::from_str(r#"{"a":"x\"y\u00e9"}"#).unwrap();
    assert!(matches!(t.a.as_ref(), Some(Cow::Owned(s)) if s == "x\"yé"));
    for body in [r#"{"a":null}"#, "{}"] {
        assert!(serde_json::from_str::<T<'_>>(body).unwrap().a.is_none(), "{body}");
    }
    assert!(serde_json::from_str::<T<'_>>(r#"{"a":1}"#).is_err());
}

#[test]
fn an_openai_answer_is_glanced_at_before_it_is_forwarded() {
    let full = |extra: &str| {
        format!(
            r#"{{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m",{extra}"choices":[{{"index":0,"message":{{"role":"assistant","content":"hi \"there\""}},"finish_reason":"stop","logprobs":null}}],"usage":{{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}}}"#
        )
    };
    // (`None`: an error; `Some(None)`: decoded first; `Some(Some(usage))`: forwarded.)
    let usage = |r: Result<Option<Option<crate::canonical::Usage>>, Error>| {
        r.ok().map(|u| u.map(|u| u.map(|u| u.prompt_tokens)))
    };
    assert_eq!(usage(openai::upstream::forwardable(full("").as_bytes(), None)), Some(Some(Some(9))));
    // `error: null` and an `object` of another type are not errors; escaped keys are read.
    assert_eq!(
        usage(openai::upstream::forwardable(full(r#""error":null,"x":{"object":"error"},"#).as_bytes(), None)),
        Some(Some(Some(9)))
    );
    let escaped = r#"{"id":"a","created":1,"mod\u0065l":"m","choices":[{"finish_reason":"length"}],"usage":null}"#;
    assert_eq!(usage(openai::upstream::forwardable(escaped.as_bytes(), None)), Some(Some(None)));
    // Lacking what callers rely on, or a finish reason they do not know: decoded first.
    for body in [
        r#"{"id":"a","model":"m","choices":[{"finish_reason":"stop"}]}"#,
        r#"{"id":"","created":1,"model":"m","choices":[{"finish_reason":"stop"}]}"#,
        r#"{"id":"a","created":null,"model":"m","choices":[{"finish_reason":"stop"}]}"#,
        r#"{"id":"a","created":1,"model":"","choices":[{"finish_reason":"stop"}]}"#,
        r#"{"id":"a","created":1,"model":"m","choices":[{"finish_reason":"end_turn"}]}"#,
    ] {
        assert_eq!(usage(openai::upstream::forwardable(body.as_bytes(), None)), Some(None), "{body}");
    }
    // Errors carried in a 200, and what is not an answer at all.
    for body in [
        r#"{"error":{"message":"overloaded","type":"server_error"}}"#,
        r#"{"object":"error","message":"bad","type":"invalid_request_error"}"#,
        r#"{"id":"a","created":1,"model":"m","choices":[]"#,
        r#"{"id":"a","created":1,"model":"m","choices":[]} x"#,
        r#"{"id":7,"created":1,"model":"m","choices":[]}"#,
        r#"{"id":"a","created":1,"model":"m","choices":null}"#,
        "",
    ] {
        assert!(openai::upstream::forwardable(body.as_bytes(), None).is_err(), "{body}");
    }
    assert!(openai::upstream::forwardable(b"{\"id\":\"\xff\"}", None).is_err());
}

#[test]
fn a_forwarded_openai_event_counts_its_deltas_and_usage() {
    let raw = |data: serde_json::Value| match openai::upstream::ForwardState::default().on_event(&ev(data)) {
        Ok(Some(StreamItem::Raw(r))) => (r.deltas, r.usage_only, r.usage.map(|u| u.completion_tokens)),
        other => panic!("expected a raw event, got {other:?}"),
    };
    let choice =
        |delta: serde_json::Value| json!({"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]});
    assert_eq!(raw(choice(json!({"role": "assistant", "content": ""}))), (0, false, None));
    assert_eq!(raw(choice(json!({"content": "hi"}))), (1, false, None));
    assert_eq!(raw(choice(json!({"content": null, "tool_calls": []}))), (0, false, None));
    assert_eq!(raw(choice(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}))), (1, false, None));
    assert_eq!(raw(choice(serde_json::Value::Null)), (0, false, None));
    assert_eq!(
        raw(json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 3}})),
        (0, true, Some(3))
    );
    assert!(openai::upstream::ForwardState::default().on_event(&ev(json!({"error": {"message": "x"}}))).is_err());
}

#[test]
fn a_key_no_content_part_names_is_judged_by_the_parameter_mode() {
    let body = bytes::Bytes::from_static(
        br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_hint":1}]}]}"#,
    );
    let strict = crate::openai::caller::decode_chat(&body, ax_protocol::config::ParamsMode::Strict);
    assert!(
        matches!(&strict, Err(crate::Error::UnsupportedParameter { param, .. }) if param == "messages.0.content.0.cache_hint"),
        "{strict:?}"
    );
    let lenient = crate::openai::caller::decode_chat(&body, ax_protocol::config::ParamsMode::Lenient).unwrap();
    assert_eq!(lenient.messages[0].content, Some(Content::Parts(vec![ContentPart::Text { text: "hi".into() }])));
}

#[test]
fn a_callers_text_goes_upstream_as_written() {
    let body = r#"{"model":"m","messages":[
        {"role":"system","content":"rule \"one\"\n"},
        {"role":"developer","content":[{"type":"text","text":"rule\ttwo"}]},
        {"role":"user","content":"caf\u00e9 \ud83d\ude00\\n"},
        {"role":"user","content":[{"type":"text","text":"a part\u0021"}]},
        {"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
        {"role":"tool","tool_call_id":"c1","content":"{\"ok\":true}"}]}"#;
    let req = crate::openai::caller::decode_chat(
        &bytes::Bytes::copy_from_slice(body.as_bytes()),
        ax_protocol::config::ParamsMode::Strict,
    )
    .unwrap();
    let ctx = |kind| Ctx { kind, model: "up", max_tokens: 100, output_cap: None, reasoning: false };
    let anthropic = String::from_utf8(encode_chat(ctx(ProviderKind::Anthropic), &req).unwrap().to_vec()).unwrap();
    // The user's literal is copied, escapes and all; the system texts are joined in escaped form.
    assert!(anthropic.contains(r#""text":"caf\u00e9 \ud83d\ude00\\n""#), "{anthropic}");
    assert!(anthropic.contains(r#""text":"a part\u0021""#), "{anthropic}");
    let v: serde_json::Value = serde_json::from_str(&anthropic).unwrap();
    assert_eq!(v["system"], "rule \"one\"\n\n\nrule\ttwo");
    assert_eq!(
        v["messages"][0]["content"],
        json!([{ "type": "text", "text": "café 😀\\n" }, { "type": "text", "text": "a part!" }])
    );
    assert_eq!(v["messages"][1]["content"], json!([{ "type": "tool_use", "id": "c1", "name": "f", "input": {} }]));
    assert_eq!(
        v["messages"][2]["content"],
        json!([{ "type": "tool_result", "tool_use_id": "c1", "content": "{\"ok\":true}" }])
    );
    let gemini = encode_chat(ctx(ProviderKind::Gemini), &req).unwrap().to_vec();
    let v: serde_json::Value = serde_json::from_slice(&gemini).unwrap();
    assert_eq!(v["contents"][0]["parts"], json!([{ "text": "café 😀\\n" }, { "text": "a part!" }]));
    assert_eq!(v["systemInstruction"]["parts"][0]["text"], "rule \"one\"\n\n\nrule\ttwo");
    // To an OpenAI-compatible upstream (the canonical path, from another ingress): the same
    // messages canonical `Message` writes, the literal copied.
    let openai = String::from_utf8(encode_chat(ctx(ProviderKind::Openai), &req).unwrap().to_vec()).unwrap();
    assert!(openai.contains(r#""content":"caf\u00e9 \ud83d\ude00\\n""#), "{openai}");
    assert!(openai.contains(r#"{"type":"text","text":"a part\u0021"}"#), "{openai}");
    let v: serde_json::Value = serde_json::from_str(&openai).unwrap();
    assert_eq!(v["messages"], serde_json::to_value(&req.messages).unwrap());
}

#[test]
fn anthropic_fields_after_the_conversation_are_spliced_in() {
    let body = r#"{"model":"m","stream":true,"temperature":1.5,"stop":["END"],"user":"u1",
        "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
        "messages":[{"role":"system","content":"one\n"},{"role":"system","content":"two \"2\""},
            {"role":"user","content":[{"type":"text","text":"hi"},
            {"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},
            {"type":"image_url","image_url":{"url":"https://x/\"q\\\u0001.png"}}]}]}"#;
    let req = crate::openai::caller::decode_chat(
        &bytes::Bytes::copy_from_slice(body.as_bytes()),
        ax_protocol::config::ParamsMode::Strict,
    )
    .unwrap();
    let ctx = Ctx { kind: ProviderKind::Anthropic, model: "up", max_tokens: 100, output_cap: None, reasoning: false };
    let v: serde_json::Value = serde_json::from_slice(&encode_chat(ctx, &req).unwrap().to_vec()).unwrap();
    assert_eq!(
        v,
        json!({ "model": "up", "max_tokens": 100, "system": "one\n\n\ntwo \"2\"", "temperature": 1.0, "stop_sequences": ["END"], "stream": true,
            "tools": [{ "name": "f", "input_schema": { "type": "object" } }], "metadata": { "user_id": "u1" },
            "messages": [{ "role": "user", "content": [{ "type": "text", "text": "hi" },
                { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": "AAAA" } },
                { "type": "image", "source": { "type": "url", "url": "https://x/\"q\\\u{1}.png" } }] }] })
    );
}

#[test]
fn a_text_that_is_not_valid_json_is_refused_with_a_stable_code() {
    for text in [r#""\uZZZZ""#, r#""\ud800""#, r#""a\qb""#, "\"a\u{1}b\"", r#"[{"type":"text","text":"\ud800"}]"#] {
        let body = format!(r#"{{"model":"m","messages":[{{"role":"user","content":{text}}}]}}"#);
        let e = crate::openai::caller::decode_chat(
            &bytes::Bytes::from(body.clone()),
            ax_protocol::config::ParamsMode::Strict,
        )
        .expect_err(text);
        assert_eq!(e.code(), "invalid_json", "{text}: {e:?}");
        assert!(e.to_string().contains("messages[0].content"), "{text}: {e}");
    }
}

#[test]
fn long_texts_go_to_anthropic_as_slices_of_the_callers_body() {
    let long = "word \"quoted\" ".repeat(50); // 700 bytes: a piece of its own
    let body = bytes::Bytes::from(
        json!({"model": "m", "messages": [
            {"role": "system", "content": long},
            {"role": "user", "content": "short"},
            {"role": "user", "content": [{"type": "text", "text": long}]},
            {"role": "assistant", "content": long}]})
        .to_string(),
    );
    let req = crate::openai::caller::decode_chat(&body, ax_protocol::config::ParamsMode::Strict).unwrap();
    let ctx = Ctx { kind: ProviderKind::Anthropic, model: "up", max_tokens: 100, output_cap: None, reasoning: false };
    let payload = encode_chat(ctx, &req).unwrap();
    let crate::json::Payload::Pieces(pieces) = &payload else { panic!("one buffer: the texts were copied") };
    let in_body = |p: &bytes::Bytes| within(&body, p);
    // The three long texts are slices of the caller's body; the short one was copied.
    let literal = serde_json::to_string(&long).unwrap();
    let shared: Vec<&bytes::Bytes> = pieces.iter().filter(|p| in_body(p)).collect();
    assert_eq!(shared.len(), 3, "{pieces:?}");
    assert!(shared.iter().all(|p| p[..] == *literal.as_bytes()));
    let v: serde_json::Value = serde_json::from_slice(&payload.to_vec()).unwrap();
    assert_eq!(
        v,
        json!({ "model": "up", "max_tokens": 100, "system": long, "messages": [
            { "role": "user", "content": [{ "type": "text", "text": "short" }, { "type": "text", "text": long }] },
            { "role": "assistant", "content": [{ "type": "text", "text": long }] }] })
    );
    // Decoded from a copy of the body, its texts are slices of that copy: the same JSON.
    let copy = bytes::Bytes::copy_from_slice(&body);
    let copied =
        encode_chat(ctx, &crate::openai::caller::decode_chat(&copy, ax_protocol::config::ParamsMode::Strict).unwrap())
            .unwrap();
    let crate::json::Payload::Pieces(pieces) = &copied else { panic!("one buffer") };
    assert!(!pieces.iter().any(in_body));
    assert_eq!(copied.to_vec(), payload.to_vec());
}

#[test]
fn an_openai_body_is_the_callers_fields_around_the_conversation_and_long_texts_are_slices() {
    let long = "line \"q\" \\ é ".repeat(60); // over 512 bytes as a literal: a piece of its own
    let caller = json!({"model": "m", "stream": true, "temperature": 0.3, "top_p": 0.9, "max_tokens": 50,
        "stop": ["END"], "n": 1, "seed": 7, "user": "u", "presence_penalty": 0.5, "logit_bias": {"42": -1},
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": "required", "parallel_tool_calls": false,
        "response_format": {"type": "json_object"}, "metadata": {"k": "v"}, "x_vendor": {"deep": [1, 2]},
        "messages": [
            {"role": "system", "content": long},
            {"role": "user", "name": "ann", "content": [{"type": "text", "text": long},
                {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "https://x/q\"\\\u{1}.png"}}]},
            {"role": "assistant", "content": null, "refusal": "no",
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "short \"one\""}]});
    let body = bytes::Bytes::from(caller.to_string());
    let req = crate::openai::caller::decode_chat(&body, ax_protocol::config::ParamsMode::Lenient).unwrap();
    let ctx = Ctx { kind: ProviderKind::Openai, model: "up", max_tokens: 100, output_cap: None, reasoning: false };
    let payload = encode_chat(ctx, &req).unwrap();
    let crate::json::Payload::Pieces(pieces) = &payload else { panic!("one buffer: the long texts were copied") };
    let in_body = |p: &bytes::Bytes| within(&body, p);
    assert_eq!(pieces.iter().filter(|p| in_body(p)).count(), 2, "{pieces:?}");
    let text = String::from_utf8(payload.to_vec()).unwrap();
    assert!(text.starts_with(r#"{"model":"up","messages":[{"role":"system","content":""#), "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["messages"], serde_json::to_value(&req.messages).unwrap());
    let mut expected = caller.clone();
    expected["model"] = json!("up");
    expected["messages"] = v["messages"].clone();
    expected["stream_options"] = json!({"include_usage": true});
    assert_eq!(v, expected);
    // Decoded from a copy of the body, its texts are slices of that copy: the same bytes.
    let copy = bytes::Bytes::copy_from_slice(&body);
    let copied =
        encode_chat(ctx, &crate::openai::caller::decode_chat(&copy, ax_protocol::config::ParamsMode::Lenient).unwrap())
            .unwrap();
    assert!(matches!(copied, crate::json::Payload::Pieces(ref p) if !p.iter().any(in_body)));
    assert_eq!(copied.to_vec(), payload.to_vec());
    // Nothing but the conversation: no trailing comma, no fields left open.
    let bare = crate::canonical::ChatRequest {
        messages: vec![crate::canonical::Message::text(crate::canonical::Role::User, "hi".into())],
        ..Default::default()
    };
    assert_eq!(
        encode_chat(ctx, &bare).unwrap().to_vec(),
        br#"{"model":"up","messages":[{"role":"user","content":"hi"}]}"#.to_vec()
    );
}

/// Whether `piece` is a slice of `body` (shared, not copied).
fn within(body: &bytes::Bytes, piece: &bytes::Bytes) -> bool {
    let (start, at) = (body.as_ptr() as usize, piece.as_ptr() as usize);
    at >= start && at + piece.len() <= start + body.len()
}
