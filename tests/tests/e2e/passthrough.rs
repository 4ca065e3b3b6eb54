//! The same-protocol fast path: an OpenAI caller and an OpenAI-compatible upstream. The request
//! reaches the upstream as the caller's bytes with only the model replaced (and usage asked for on
//! streams); the answer, or each stream event, reaches the caller as the upstream sent it; usage,
//! cost and errors are still read from it. A route with a candidate of another protocol keeps
//! the canonical path.

use ax_tests::{assemble, key_digest, post, sse_events, wire, FakeUpstream, Gateway, Reply, KEY};
use serde_json::{json, Value};

/// One OpenAI upstream (prices set, so cost is metered), behind `chat`; `mixed` adds an Anthropic
/// candidate after it.
async fn gateway(openai: &FakeUpstream, anthropic: Option<&FakeUpstream>) -> Gateway {
    let model = "models: [{ name: real-model, context_window: 100000, capabilities: [chat, tools, streaming, vision, json], price_per_mtok: { input: 1.0, output: 2.0 } }]";
    let mut upstreams =
        format!("  - {{ name: oa, provider: openai, base_url: \"{}/v1\", api_key: sk-up, {model} }}\n", openai.url());
    let mut mixed = String::new();
    if let Some(a) = anthropic {
        upstreams.push_str(&format!(
            "  - {{ name: an, provider: anthropic, base_url: \"{}\", api_key: sk-an, {model} }}\n",
            a.url()
        ));
        mixed = "  - { alias: mixed, strategy: priority, candidates: [{ upstream: oa, model: real-model, priority: 0 }, { upstream: an, model: real-model, priority: 1 }] }\n".to_owned();
    }
    Gateway::start(&format!(
        "server: {{ params: strict }}\nupstreams:\n{upstreams}routes:\n  - {{ alias: chat, candidates: [{{ upstream: oa, model: real-model }}] }}\n{mixed}tenants:\n  - {{ id: t, keys: [{{ id: k, sha256: \"{}\" }}] }}\n",
        key_digest(KEY)
    ))
    .await
}

/// A body as a client would write it, keys in the order given (not re-sorted), with fields ax does
/// not know at the top level and inside a message.
const CALLER_BODY: &str = r#"{"messages":[{"role":"user","content":"hi","x_vendor_note":{"keep":[1,2]}}],"model":"chat","top_k":40,"enable_thinking":false,"max_tokens":50}"#;

#[tokio::test]
async fn the_request_reaches_the_upstream_as_the_caller_wrote_it() {
    let up = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("ok"), &[], "stop", (3, 2, 0)))).await;
    let gw = gateway(&up, None).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", gw.url))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body(CALLER_BODY)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // Byte for byte, but the model; unknown fields (strict mode or not) are the upstream's to judge.
    let want = CALLER_BODY.replace(r#""model":"chat""#, r#""model":"real-model""#);
    assert_eq!(String::from_utf8_lossy(&up.last().raw), want);

    // A stream without `stream_options`: usage is asked for (metering needs it), nothing else moves.
    let stream_body = r#"{"model":"chat","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let up2 =
        FakeUpstream::fixed(Reply::sse(&wire::openai_stream(&["a"], &[], "stop", (1, 1, 0), Default::default()))).await;
    let gw2 = gateway(&up2, None).await;
    let send = |body: &'static str| {
        reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", gw2.url))
            .bearer_auth(KEY)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let _ = send(stream_body).await.unwrap().bytes().await;
    assert_eq!(
        String::from_utf8_lossy(&up2.last().raw),
        r#"{"model":"real-model","stream":true,"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}"#
    );
    // `stream_options` of the caller's own: kept, with usage asked for.
    let _ = send(r#"{"model":"chat","stream":true,"stream_options":{"continuous_usage_stats":true},"messages":[{"role":"user","content":"hi"}]}"#)
        .await
        .unwrap()
        .bytes()
        .await;
    assert_eq!(up2.last().body["stream_options"], json!({ "continuous_usage_stats": true, "include_usage": true }));
    // `stream_options` without a stream is an error to OpenAI: left out, as before the fast path.
    let _ =
        send(r#"{"model":"chat","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#)
            .await;
    assert_eq!(
        String::from_utf8_lossy(&up2.last().raw),
        r#"{"model":"real-model","messages":[{"role":"user","content":"hi"}]}"#
    );
}

#[tokio::test]
async fn the_answer_reaches_the_caller_as_the_upstream_sent_it_and_is_metered() {
    let mut answer = wire::openai_response(Some("ok"), &[], "stop", (1_000, 500, 200));
    answer["service_tier"] = json!("default");
    answer["x_vendor"] = json!({ "trace": "abc" });
    let text = serde_json::to_string(&answer).unwrap();
    let up = FakeUpstream::fixed(Reply::Raw {
        status: 200,
        content_type: "application/json",
        body: text.clone().into_bytes(),
    })
    .await;
    let gw = gateway(&up, None).await;
    let resp = post(
        &gw.url,
        "/v1/chat/completions",
        &json!({ "model": "chat", "messages": [{ "role": "user", "content": "hi" }] }),
    )
    .await;
    assert_eq!(resp.status(), 200);
    // 1,000 prompt tokens at $1/Mtok and 500 completion at $2/Mtok: $0.002.
    assert_eq!(resp.headers()["x-ax-cost-usd"], "0.002000");
    assert_eq!(resp.headers()["x-ax-upstream"], "oa");
    assert_eq!(resp.text().await.unwrap(), text, "forwarded byte for byte, fields ax does not know included");

    // Something callers get rewritten (a finish reason OpenAI's clients do not know) goes through
    // the canonical model instead.
    let odd = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("ok"), &[], "abort", (1, 1, 0)))).await;
    let gw = gateway(&odd, None).await;
    let v: Value = post(
        &gw.url,
        "/v1/chat/completions",
        &json!({ "model": "chat", "messages": [{ "role": "user", "content": "hi" }] }),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(
        (v["choices"][0]["finish_reason"].clone(), v["choices"][0]["provider_finish_reason"].clone()),
        (Value::Null, json!("abort"))
    );
}

#[tokio::test]
async fn stream_events_are_forwarded_as_they_came() {
    let wire_text = wire::openai_stream(&["Hel", "lo ", "wörld"], &[], "stop", (10, 3, 0), Default::default());
    let upstream_events: Vec<String> = wire_text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").unwrap().to_owned())
        .collect();
    let up = FakeUpstream::fixed(Reply::sse(&wire_text)).await;
    let gw = gateway(&up, None).await;
    let ask = |usage: bool| {
        let mut b = json!({ "model": "chat", "stream": true, "messages": [{ "role": "user", "content": "hi" }] });
        if usage {
            b["stream_options"] = json!({ "include_usage": true });
        }
        b
    };
    // The last event before `[DONE]` gains ax's facts; everything else is as the upstream sent it.
    let facts = |events: &mut Vec<String>| -> Value {
        let last = events.len() - 2;
        let (plain, facts) = ax_tests::without_ax(&events[last]);
        events[last] = plain;
        facts.unwrap_or_else(|| panic!("no ax facts in {events:?}"))
    };
    // Without usage asked for: every event as sent but the upstream's usage-only one.
    let mut events = sse_events(post(&gw.url, "/v1/chat/completions", &ask(false)).await).await;
    assert_eq!(assemble(&events).text, "Hello wörld");
    let ax = facts(&mut events);
    let mut want: Vec<String> = upstream_events.iter().filter(|e| !e.contains("\"usage\"")).cloned().collect();
    assert_eq!(events, want);
    assert_eq!((ax["upstream"].as_str(), ax["attempts"].as_u64()), (Some("oa"), Some(1)), "{ax}");
    assert_eq!(ax["cost_usd"], "0.000016", "10 prompt and 3 completion tokens at this test's prices");
    assert!(ax["request_id"].as_str().is_some_and(|r| r.starts_with("req_")), "{ax}");
    // With it: the usage event too, as the upstream sent it, with the facts.
    let mut events = sse_events(post(&gw.url, "/v1/chat/completions", &ask(true)).await).await;
    let a = assemble(&events);
    assert!(a.done && a.usage.is_some());
    facts(&mut events);
    want = upstream_events.clone();
    assert_eq!(events, want);
}

#[tokio::test]
async fn a_route_with_another_protocol_keeps_the_canonical_path() {
    let oa = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("ok"), &[], "stop", (1, 1, 0)))).await;
    let an =
        FakeUpstream::fixed(Reply::json(wire::anthropic_response(Some("ok"), &[], "end_turn", (1, 1, 0, 0)))).await;
    let gw = gateway(&oa, Some(&an)).await;
    // Strict mode refuses what it does not know on a route that may translate…
    let r = post(
        &gw.url,
        "/v1/chat/completions",
        &json!({ "model": "mixed", "top_k": 5, "messages": [{ "role": "user", "content": "hi" }] }),
    )
    .await;
    assert_eq!(r.status(), 400);
    // …and encodes for the OpenAI candidate as before (the request re-encoded: keys in ax's order).
    let r = post(
        &gw.url,
        "/v1/chat/completions",
        &json!({ "messages": [{ "role": "user", "content": "hi" }], "model": "mixed" }),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert!(String::from_utf8_lossy(&oa.last().raw).starts_with(r#"{"model":"real-model","messages""#));
    assert_eq!(oa.hits(), 1);
}

/// An Anthropic caller and an Anthropic upstream: the body with fields and blocks ax does not know
/// (betas, thinking, cache_control, context_management, a new block type) reaches the upstream
/// byte for byte but the model; `anthropic-beta` is passed on; the answer comes back as sent.
#[tokio::test]
async fn an_anthropic_request_reaches_an_anthropic_upstream_as_written() {
    let mut answer = wire::anthropic_response(Some("ok"), &[], "end_turn", (7, 3, 2, 5));
    answer["container"] = json!({ "id": "c1" });
    let text = serde_json::to_string(&answer).unwrap();
    let up = FakeUpstream::fixed(Reply::Raw {
        status: 200,
        content_type: "application/json",
        body: text.clone().into_bytes(),
    })
    .await;
    let model = "models: [{ name: claude-real, context_window: 200000, capabilities: [chat, tools, streaming, vision], price_per_mtok: { input: 3.0, output: 15.0, cached_input: 0.3, cache_write: 3.75 } }]";
    let gw = Gateway::start(&format!(
        "upstreams:\n  - {{ name: an, provider: anthropic, base_url: \"{}\", api_key: sk-ant, {model} }}\nroutes:\n  - {{ alias: claude, candidates: [{{ upstream: an, model: claude-real }}] }}\ntenants:\n  - {{ id: t, keys: [{{ id: k, sha256: \"{}\" }}] }}\n",
        up.url(),
        key_digest(KEY)
    ))
    .await;
    let body = r#"{"model":"claude","max_tokens":1024,"thinking":{"type":"enabled","budget_tokens":512},"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]},"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"brand_new_block_2027","x":1}]},{"role":"assistant","content":[{"type":"thinking","thinking":"…","signature":"sig"}]},{"role":"user","content":"go on"}],"output_config":{"effort":"high"}}"#;
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/messages?beta=true", gw.url))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "interleaved-thinking-2025-05-14,context-management-2025-06-27")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // Usage in Anthropic's convention: 7 input + 2 written + 5 read, at $3 / $3.75 / $0.30 per
    // Mtok, and 3 output at $15: 21 + 7.5 + 1.5 + 45 = 75 µ$.
    assert_eq!(resp.headers()["x-ax-cost-usd"], "0.000075");
    assert_eq!(resp.text().await.unwrap(), text, "the answer as the upstream sent it");
    let seen = up.last();
    assert_eq!(String::from_utf8_lossy(&seen.raw), body.replace(r#""model":"claude""#, r#""model":"claude-real""#));
    assert_eq!(seen.header("anthropic-beta"), Some("interleaved-thinking-2025-05-14,context-management-2025-06-27"));
    assert_eq!(seen.header("x-api-key"), Some("sk-ant"), "the upstream's key, not the caller's");
}

/// `count_tokens` on a route served by Anthropic asks Anthropic (the caller's body, the real
/// model, the beta header); when that count fails, the caller still gets ax's estimate, marked.
#[tokio::test]
async fn count_tokens_asks_an_anthropic_upstream_and_falls_back_to_the_estimate() {
    let up = FakeUpstream::start(|r: &ax_tests::Recorded| {
        if r.body["messages"][0]["content"] == "fail" {
            Reply::status(500, json!({ "type": "error", "error": { "type": "api_error", "message": "boom" } }))
        } else {
            Reply::json(json!({ "input_tokens": 77 }))
        }
    })
    .await;
    let gw = Gateway::start(&format!(
        "upstreams:\n  - {{ name: an, provider: anthropic, base_url: \"{}\", api_key: sk-an, models: [{{ name: claude-real, context_window: 100000, capabilities: [chat] }}] }}\nroutes:\n  - {{ alias: c, candidates: [{{ upstream: an, model: claude-real }}] }}\ntenants:\n  - {{ id: t, keys: [{{ id: k, sha256: \"{}\" }}] }}\n",
        up.url(),
        key_digest(KEY)
    ))
    .await;
    let count = |content: &str| {
        reqwest::Client::new()
            .post(format!("{}/v1/messages/count_tokens", gw.url))
            .header("x-api-key", KEY)
            .header("anthropic-version", "2023-06-01")
            .header("anthropic-beta", "token-counting-2024-11-01")
            .body(format!(r#"{{"model":"c","x_new":1,"messages":[{{"role":"user","content":"{content}"}}]}}"#))
            .send()
    };
    let resp = count("hello").await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-ax-token-count"], "exact");
    assert_eq!(resp.json::<Value>().await.unwrap(), json!({ "input_tokens": 77 }));
    let r = up.last();
    assert_eq!(r.path, "/v1/messages/count_tokens");
    assert_eq!(
        String::from_utf8_lossy(&r.raw),
        r#"{"model":"claude-real","x_new":1,"messages":[{"role":"user","content":"hello"}]}"#
    );
    assert_eq!(r.header("x-api-key"), Some("sk-an"));
    assert_eq!(r.header("anthropic-beta"), Some("token-counting-2024-11-01"));

    let resp = count("fail").await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-ax-token-count"], "estimate");
    assert!(resp.json::<Value>().await.unwrap()["input_tokens"].as_u64().unwrap() > 0);
}

/// Every stream ends with ax's facts in its last event (before `[DONE]` where the protocol has
/// one), as a whole answer's headers give them: here translated to Anthropic after the OpenAI
/// candidate failed. Chat Completions: the usage chunk with `include_usage`, else the finish
/// chunk; Anthropic Messages: `message_stop`; Responses: `response.completed`. The cost is the one
/// a whole answer's `x-ax-cost-usd` says for the same tokens.
#[tokio::test]
async fn every_stream_ends_with_the_cost_and_ids_of_the_call() {
    let oa = FakeUpstream::fixed(Reply::status(503, json!({ "error": { "message": "busy", "type": "server_error" } })))
        .await;
    let an = FakeUpstream::start(|r| {
        if r.body["stream"] == true {
            Reply::sse(&wire::anthropic_stream(&["Hel", "lo"], &[], "end_turn", (12, 4, 0, 0), Default::default()))
        } else {
            Reply::json(wire::anthropic_response(Some("Hello"), &[], "end_turn", (12, 4, 0, 0)))
        }
    })
    .await;
    let gw = gateway(&oa, Some(&an)).await;
    let chat = |stream: bool, usage: bool| {
        let mut b = json!({ "model": "mixed", "messages": [{ "role": "user", "content": "hi" }] });
        if stream {
            b["stream"] = json!(true);
        }
        if usage {
            b["stream_options"] = json!({ "include_usage": true });
        }
        b
    };
    let whole = post(&gw.url, "/v1/chat/completions", &chat(false, false)).await;
    let cost = whole.headers()["x-ax-cost-usd"].to_str().unwrap().to_owned();
    assert_eq!(cost, "0.000020", "12 prompt and 4 completion tokens at $1 and $2 per million");
    let check = |facts: &Value, rid: &str| {
        assert_eq!(facts["cost_usd"], cost.as_str(), "{facts}");
        assert_eq!((facts["upstream"].as_str(), facts["model"].as_str()), (Some("an"), Some("real-model")), "{facts}");
        assert_eq!((facts["attempts"].as_u64(), facts["request_id"].as_str()), (Some(2), Some(rid)), "{facts}");
    };

    for usage in [false, true] {
        let resp = post(&gw.url, "/v1/chat/completions", &chat(true, usage)).await;
        let rid = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
        let events = sse_events(resp).await;
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
        let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
        check(&last["ax"], &rid);
        if usage {
            assert_eq!(
                (last["choices"].as_array().map(Vec::len), last["usage"]["total_tokens"].as_u64()),
                (Some(0), Some(16))
            );
        } else {
            assert_eq!(last["choices"][0]["finish_reason"], "stop", "{last}");
        }
        // No other event has them, and the text is whole.
        assert_eq!(events.iter().filter(|e| e.contains("\"ax\":")).count(), 1);
        assert_eq!(assemble(&events).text, "Hello");
    }

    // Anthropic Messages: in `message_stop`.
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/messages", gw.url))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .json(&json!({ "model": "mixed", "max_tokens": 50, "stream": true, "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .await
        .unwrap();
    let rid = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    let text = resp.text().await.unwrap();
    let last: Value = serde_json::from_str(text.trim_end().rsplit("data: ").next().unwrap()).unwrap();
    assert_eq!(last["type"], "message_stop", "{text}");
    check(&last["ax"], &rid);

    // Responses: in `response.completed`, and not in the response object itself.
    let resp = post(&gw.url, "/v1/responses", &json!({ "model": "mixed", "stream": true, "input": "hi" })).await;
    let rid = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    let text = resp.text().await.unwrap();
    let last: Value = serde_json::from_str(text.trim_end().rsplit("data: ").next().unwrap()).unwrap();
    assert_eq!(last["type"], "response.completed", "{text}");
    check(&last["ax"], &rid);
    assert!(last["response"].get("ax").is_none());
}
