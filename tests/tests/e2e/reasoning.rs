//! Reasoning across protocols: an Anthropic `thinking` request reaches an OpenAI-compatible
//! upstream as `reasoning_effort` and a Gemini one as a thinking budget, only for models with the
//! `reasoning` capability; their reasoning text comes back as thinking blocks (whole answers and
//! `thinking_delta` events). An OpenAI caller's `reasoning_effort` reaches Anthropic as extended
//! thinking, and Anthropic's thinking comes back as `reasoning_content`.

use ax_tests::{key_digest, post, post_messages as messages, sse_events, FakeUpstream, Gateway, Reply, KEY};
use serde_json::{json, Value};

/// `think` (a model with the `reasoning` capability), `plain` (without) and `capped` (reasoning,
/// an output cap of 8,192) on one upstream.
async fn gateway(provider: &str, up: &FakeUpstream) -> Gateway {
    let base = if provider == "openai" { format!("{}/v1", up.url()) } else { up.url() };
    let caps = "capabilities: [chat, tools, streaming, json";
    Gateway::start(&format!(
        r#"upstreams:
  - {{ name: up, provider: {provider}, base_url: "{base}", api_key: sk-up, models: [{{ name: thinker, context_window: 100000, {caps}, reasoning] }}, {{ name: plain-model, context_window: 100000, {caps}] }}, {{ name: capped, context_window: 100000, max_output_tokens: 8192, {caps}, reasoning] }}] }}
routes:
  - {{ alias: think, candidates: [{{ upstream: up, model: thinker }}] }}
  - {{ alias: capped, candidates: [{{ upstream: up, model: capped }}] }}
  - {{ alias: plain, candidates: [{{ upstream: up, model: plain-model }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
        key_digest(KEY)
    ))
    .await
}

fn ask(model: &str, thinking: Value, stream: bool) -> Value {
    json!({ "model": model, "max_tokens": 20000, "stream": stream, "thinking": thinking,
        "messages": [{ "role": "user", "content": "Why is the sky blue?" }] })
}

/// An OpenAI-compatible reasoning server's answer (DeepSeek's and vLLM's `reasoning_content`).
fn openai_reasoning(r: &ax_tests::Recorded) -> Reply {
    if r.body["stream"] == true {
        let ev = |delta: Value, finish: Value| {
            format!(
                "data: {}\n\n",
                json!({ "id": "c", "object": "chat.completion.chunk", "created": 1, "model": "thinker",
                "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] })
            )
        };
        let mut s = ev(json!({ "role": "assistant", "reasoning_content": "Rayleigh " }), Value::Null);
        s += &ev(json!({ "reasoning_content": "scattering." }), Value::Null);
        s += &ev(json!({ "content": "Short " }), Value::Null);
        s += &ev(json!({ "content": "wavelengths." }), json!("stop"));
        s += &format!(
            "data: {}\n\n",
            json!({ "id": "c", "object": "chat.completion.chunk", "created": 1, "model": "thinker",
            "choices": [], "usage": { "prompt_tokens": 12, "completion_tokens": 30,
            "completion_tokens_details": { "reasoning_tokens": 20 } } })
        );
        s += "data: [DONE]\n\n";
        return Reply::sse(&s);
    }
    Reply::json(json!({ "id": "c", "object": "chat.completion", "created": 1, "model": "thinker",
        "choices": [{ "index": 0, "finish_reason": "stop",
            "message": { "role": "assistant", "content": "Short wavelengths.", "reasoning_content": "Rayleigh scattering." } }],
        "usage": { "prompt_tokens": 12, "completion_tokens": 30, "completion_tokens_details": { "reasoning_tokens": 20 } } }))
}

#[tokio::test]
async fn anthropic_thinking_reaches_an_openai_upstream_as_reasoning_effort_and_comes_back_as_thinking() {
    let up = FakeUpstream::start(openai_reasoning).await;
    let gw = gateway("openai", &up).await;

    // A budget maps onto an effort: 10,000 tokens is medium.
    let resp = messages(&gw.url, &ask("think", json!({ "type": "enabled", "budget_tokens": 10000 }), false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(up.last().body["reasoning_effort"], "medium");
    let m: Value = resp.json().await.unwrap();
    assert_eq!(
        m["content"][0],
        json!({ "type": "thinking", "thinking": "Rayleigh scattering.", "signature": "" }),
        "{m}"
    );
    assert_eq!(m["content"][1], json!({ "type": "text", "text": "Short wavelengths." }), "{m}");
    assert_eq!(m["content"].as_array().unwrap().len(), 2);

    // Adaptive thinking takes output_config's effort; `display: omitted` keeps the block, not its text.
    let mut body = ask("think", json!({ "type": "adaptive", "display": "omitted" }), false);
    body["output_config"] = json!({ "effort": "low" });
    let m: Value = messages(&gw.url, &body).await.json().await.unwrap();
    assert_eq!(up.last().body["reasoning_effort"], "low");
    assert_eq!(m["content"][0], json!({ "type": "thinking", "thinking": "", "signature": "" }), "{m}");

    // Disabled thinking, or a model without the capability: no reasoning control is sent.
    messages(&gw.url, &ask("think", json!({ "type": "disabled" }), false)).await;
    assert!(up.last().body.get("reasoning_effort").is_none(), "{}", up.last().body);
    let resp = messages(&gw.url, &ask("plain", json!({ "type": "enabled", "budget_tokens": 30000 }), false)).await;
    assert_eq!(resp.status(), 200);
    assert!(up.last().body.get("reasoning_effort").is_none(), "{}", up.last().body);

    // A bad thinking type is the caller's error, in Anthropic's shape.
    let resp = messages(&gw.url, &ask("think", json!({ "type": "sometimes" }), false)).await;
    assert_eq!(resp.status(), 400);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["type"], "invalid_request_error");
    assert!(e["error"]["message"].as_str().unwrap().contains("thinking type"), "{e}");
}

#[tokio::test]
async fn a_stream_carries_reasoning_as_a_thinking_block_before_the_text() {
    let up = FakeUpstream::start(openai_reasoning).await;
    let gw = gateway("openai", &up).await;
    let resp = messages(&gw.url, &ask("think", json!({ "type": "enabled", "budget_tokens": 30000 }), true)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(up.last().body["reasoning_effort"], "high");
    let text = resp.text().await.unwrap();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ],
        "{text}"
    );
    assert_eq!(events[2]["content_block"]["type"], "thinking");
    assert_eq!(events[2]["index"], 0);
    assert_eq!(events[3]["delta"], json!({ "type": "thinking_delta", "thinking": "Rayleigh " }));
    assert_eq!(events[4]["delta"]["thinking"], "scattering.");
    assert_eq!(events[6]["content_block"]["type"], "text");
    assert_eq!(events[6]["index"], 1);
    assert_eq!(events[7]["delta"], json!({ "type": "text_delta", "text": "Short " }));
    assert_eq!(events[10]["usage"]["output_tokens"], 30);
}

#[tokio::test]
async fn gemini_gets_a_thinking_budget_and_its_thoughts_come_back_as_thinking() {
    let up = FakeUpstream::fixed(Reply::json(json!({
        "candidates": [{ "index": 0, "finishReason": "STOP", "content": { "role": "model", "parts": [
            { "text": "Light scatters.", "thought": true },
            { "text": "Short wavelengths." } ] } }],
        "usageMetadata": { "promptTokenCount": 12, "candidatesTokenCount": 10, "thoughtsTokenCount": 20 } })))
    .await;
    let gw = gateway("gemini", &up).await;
    let resp = messages(&gw.url, &ask("think", json!({ "type": "enabled", "budget_tokens": 5000 }), false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        up.last().body["generationConfig"]["thinkingConfig"],
        json!({ "thinkingBudget": 5000, "includeThoughts": true })
    );
    let m: Value = resp.json().await.unwrap();
    assert_eq!(m["content"][0]["thinking"], "Light scatters.", "{m}");
    assert_eq!(m["content"][1]["text"], "Short wavelengths.", "{m}");
    // Thoughts are output tokens, billed as such.
    assert_eq!(m["usage"]["output_tokens"], 30);

    messages(&gw.url, &ask("plain", json!({ "type": "enabled", "budget_tokens": 5000 }), false)).await;
    assert!(up.last().body["generationConfig"].get("thinkingConfig").is_none(), "{}", up.last().body);
}

#[tokio::test]
async fn an_openai_callers_reasoning_effort_reaches_anthropic_as_extended_thinking() {
    let up = FakeUpstream::fixed(Reply::json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "thinker", "stop_reason": "end_turn",
        "content": [
            { "type": "thinking", "thinking": "Rayleigh scattering.", "signature": "sig" },
            { "type": "text", "text": "Short wavelengths." } ],
        "usage": { "input_tokens": 12, "output_tokens": 30 } })))
    .await;
    let gw = gateway("anthropic", &up).await;
    let ask = |model: &str| {
        json!({ "model": model, "reasoning_effort": "low", "temperature": 0.2, "max_tokens": 4000,
            "messages": [{ "role": "user", "content": "Why is the sky blue?" }] })
    };
    let resp = post(&gw.url, "/v1/chat/completions", &ask("think")).await;
    assert_eq!(resp.status(), 200);
    let sent = up.last().body;
    assert_eq!(sent["thinking"], json!({ "type": "enabled", "budget_tokens": 2048 }), "{sent}");
    // Anthropic refuses a temperature with thinking on.
    assert!(sent.get("temperature").is_none(), "{sent}");
    let r: Value = resp.json().await.unwrap();
    assert_eq!(r["choices"][0]["message"]["reasoning_content"], "Rayleigh scattering.", "{r}");
    assert_eq!(r["choices"][0]["message"]["content"], "Short wavelengths.");

    // Without the capability the request goes as it would without reasoning.
    let resp = post(&gw.url, "/v1/chat/completions", &ask("plain")).await;
    assert_eq!(resp.status(), 200);
    let sent = up.last().body;
    assert!(sent.get("thinking").is_none(), "{sent}");
    assert_eq!(sent["temperature"], 0.2);

    // A stream from a chat caller carries `reasoning_content` deltas.
    let stream = FakeUpstream::fixed(Reply::sse(concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"thinker\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Rayleigh.\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"sig\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Blue.\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":30}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    )))
    .await;
    let gw = gateway("anthropic", &stream).await;
    let mut body = ask("think");
    body["stream"] = json!(true);
    let events = sse_events(post(&gw.url, "/v1/chat/completions", &body).await).await;
    let reasoning: String = events
        .iter()
        .filter(|e| *e != "[DONE]")
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|v| v["choices"][0]["delta"]["reasoning_content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(reasoning, "Rayleigh.");
    assert_eq!(ax_tests::assemble(&events).text, "Blue.");
}

/// An OpenAI caller's `reasoning_effort` alone (no other setting) reaches Gemini as a thinking
/// budget: it was left out when it was the only generation setting.
#[tokio::test]
async fn an_openai_callers_effort_alone_reaches_gemini() {
    let up = FakeUpstream::fixed(Reply::json(json!({
        "candidates": [{ "index": 0, "finishReason": "STOP", "content": { "role": "model", "parts": [{ "text": "Blue." }] } }],
        "usageMetadata": { "promptTokenCount": 12, "candidatesTokenCount": 2 } })))
    .await;
    let gw = gateway("gemini", &up).await;
    for (effort, budget) in [("low", 2048), ("high", 24576), ("none", 0)] {
        let ask = json!({ "model": "think", "reasoning_effort": effort,
            "messages": [{ "role": "user", "content": "Why is the sky blue?" }] });
        assert_eq!(post(&gw.url, "/v1/chat/completions", &ask).await.status(), 200);
        let sent = up.last().body;
        assert_eq!(
            sent["generationConfig"]["thinkingConfig"],
            json!({ "thinkingBudget": budget, "includeThoughts": budget > 0 }),
            "{sent}"
        );
    }
}

/// Anthropic's `max_tokens` counts the thinking: an effort with no output cap of the caller's
/// keeps the answer its room (the budget plus the default cap, 4,096), a caller's cap is the
/// answer's, and a model's own cap binds, the answer keeping up to half of it. Before, `high`
/// with no cap sent `max_tokens: 4096, budget_tokens: 4095`: one token for the answer.
#[tokio::test]
async fn an_effort_leaves_the_answer_room_below_anthropics_max_tokens() {
    let up = FakeUpstream::fixed(Reply::json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "thinker", "stop_reason": "end_turn",
        "content": [{ "type": "text", "text": "Blue." }], "usage": { "input_tokens": 12, "output_tokens": 3 } })))
    .await;
    let gw = gateway("anthropic", &up).await;
    let cases = [
        ("think", "high", None, 24_576 + 4_096, 24_576),
        ("think", "low", Some(1_000), 2_048 + 1_000, 2_048),
        ("capped", "high", None, 8_192, 4_096),
        ("capped", "low", Some(1_000), 3_048, 2_048),
        ("capped", "high", Some(6_000), 8_192, 4_096),
    ];
    for (alias, effort, cap, max_tokens, budget) in cases {
        let mut ask = json!({ "model": alias, "reasoning_effort": effort,
            "messages": [{ "role": "user", "content": "Why is the sky blue?" }] });
        if let Some(c) = cap {
            ask["max_completion_tokens"] = json!(c);
        }
        assert_eq!(post(&gw.url, "/v1/chat/completions", &ask).await.status(), 200);
        let sent = up.last().body;
        assert_eq!(sent["max_tokens"], max_tokens, "{alias} {effort} {cap:?}: {sent}");
        assert_eq!(sent["thinking"], json!({ "type": "enabled", "budget_tokens": budget }), "{sent}");
    }
}
