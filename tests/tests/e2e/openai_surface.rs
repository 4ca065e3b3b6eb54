//! The parts of OpenAI's surface callers hit first: `GET /v1/models/{id}`, and Chat Completions'
//! current parameters (`store`, `metadata`, `service_tier`, `prompt_cache_key`,
//! `safety_identifier`, `verbosity`, `modalities`, `prediction`, `web_search_options`, `audio`)
//! sent to OpenAI-compatible upstreams as given on the translated path too, and under the
//! parameter policy for upstreams without them, the error naming the parameter and the provider.

use ax_tests::{key_digest, post, wire, FakeUpstream, Gateway, Reply, KEY};
use serde_json::{json, Value};

/// `mixed` (an OpenAI candidate first, then an Anthropic one: the translated path), `claude`
/// (Anthropic only) and `team/gpt` (an alias with a slash); `secret` exists but the key's tenant
/// may not use it.
async fn gateway(oa: &FakeUpstream, an: &FakeUpstream, params: &str) -> Gateway {
    let model = "{ name: real-model, context_window: 100000, capabilities: [chat, tools, streaming, vision, json] }";
    Gateway::start(&format!(
        r#"server: {{ params: {params} }}
upstreams:
  - {{ name: oa, provider: openai, base_url: "{}/v1", api_key: sk-oa, models: [{model}] }}
  - {{ name: an, provider: anthropic, base_url: "{}", api_key: sk-an, models: [{model}] }}
routes:
  - {{ alias: mixed, strategy: priority, candidates: [{{ upstream: oa, model: real-model, priority: 0 }}, {{ upstream: an, model: real-model, priority: 1 }}] }}
  - {{ alias: claude, candidates: [{{ upstream: an, model: real-model }}] }}
  - {{ alias: team/gpt, candidates: [{{ upstream: oa, model: real-model }}] }}
  - {{ alias: secret, candidates: [{{ upstream: oa, model: real-model }}] }}
tenants:
  - {{ id: t, allowed_aliases: [mixed, claude, team/gpt], keys: [{{ id: k, sha256: "{}" }}] }}
"#,
        oa.url(),
        an.url(),
        key_digest(KEY)
    ))
    .await
}

async fn upstreams() -> (FakeUpstream, FakeUpstream) {
    let oa = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("ok"), &[], "stop", (3, 2, 0)))).await;
    let an =
        FakeUpstream::fixed(Reply::json(wire::anthropic_response(Some("ok"), &[], "end_turn", (3, 2, 0, 0)))).await;
    (oa, an)
}

async fn get(url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut r = reqwest::Client::new().get(url).bearer_auth(KEY);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.send().await.unwrap()
}

#[tokio::test]
async fn a_model_is_retrieved_by_its_id_when_the_key_may_use_it() {
    let (oa, an) = upstreams().await;
    let gw = gateway(&oa, &an, "strict").await;
    let resp = get(&format!("{}/v1/models/mixed", gw.url), &[]).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.json::<Value>().await.unwrap(),
        json!({ "id": "mixed", "object": "model", "created": 0, "owned_by": "ax" })
    );
    // An alias with a slash, written plainly or escaped.
    for path in ["team/gpt", "team%2Fgpt"] {
        let resp = get(&format!("{}/v1/models/{path}", gw.url), &[]).await;
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(resp.json::<Value>().await.unwrap()["id"], "team/gpt");
    }
    // Anthropic's shape for an Anthropic client.
    let resp = get(&format!("{}/v1/models/claude", gw.url), &[("anthropic-version", "2023-06-01")]).await;
    let m: Value = resp.json().await.unwrap();
    assert_eq!((m["type"].as_str(), m["id"].as_str()), (Some("model"), Some("claude")), "{m}");
    // An alias that does not exist, and one the tenant may not use, are the same 404.
    for id in ["nope", "secret"] {
        let resp = get(&format!("{}/v1/models/{id}", gw.url), &[]).await;
        assert_eq!(resp.status(), 404, "{id}");
        assert_eq!(resp.json::<Value>().await.unwrap()["error"]["code"], "model_not_found");
    }
    let resp = reqwest::Client::new().get(format!("{}/v1/models/mixed", gw.url)).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let resp =
        reqwest::Client::new().delete(format!("{}/v1/models/mixed", gw.url)).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(resp.status(), 405);
}

/// Every parameter that changes what OpenAI answers, set to a value only OpenAI honours.
fn openai_only() -> Vec<(&'static str, Value)> {
    vec![
        ("service_tier", json!("flex")),
        ("verbosity", json!("low")),
        ("modalities", json!(["text", "audio"])),
        ("audio", json!({ "voice": "alloy", "format": "wav" })),
        ("web_search_options", json!({ "search_context_size": "low" })),
    ]
}

/// OpenAI's hints for its own bookkeeping, caching, abuse detection and latency: they never
/// change an answer, so an upstream without them serves the request without them.
fn hints() -> Vec<(&'static str, Value)> {
    vec![
        ("store", json!(true)),
        ("metadata", json!({ "team": "search", "ticket": "AX-1" })),
        ("prompt_cache_key", json!("repo-42")),
        ("prediction", json!({ "type": "content", "content": "fn main() {}" })),
    ]
}

fn ask(model: &str, extra: &[(&str, Value)]) -> Value {
    let mut body = json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] });
    for (k, v) in extra {
        body[*k] = v.clone();
    }
    body
}

#[tokio::test]
async fn current_chat_parameters_reach_openai_and_the_policy_names_who_cannot_take_them() {
    let (oa, an) = upstreams().await;
    let gw = gateway(&oa, &an, "strict").await;

    // The translated path (a mixed route): the OpenAI candidate gets each as given.
    let mut all = openai_only();
    all.extend(hints());
    all.push(("safety_identifier", json!("user-7f3a")));
    all.push(("reasoning_effort", json!("low")));
    let resp = post(&gw.url, "/v1/chat/completions", &ask("mixed", &all)).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let sent = oa.last().body;
    for (k, v) in &all {
        if *k != "reasoning_effort" {
            assert_eq!(&sent[*k], v, "{k}: {sent}");
        }
    }

    // To Anthropic, strict: each is refused naming itself and the provider.
    for (k, v) in openai_only() {
        let resp = post(&gw.url, "/v1/chat/completions", &ask("claude", &[(k, v)])).await;
        assert_eq!(resp.status(), 400, "{k}");
        let e: Value = resp.json().await.unwrap();
        assert_eq!(e["error"]["code"], "unsupported_parameter", "{k}: {e}");
        assert_eq!(e["error"]["param"], k);
        assert_eq!(e["error"]["message"], format!("parameter '{k}' is not supported by anthropic"));
    }
    // Values that ask for nothing special and the hints pass, left out; a safety identifier is
    // Anthropic's user id.
    let mut neutral = vec![("service_tier", json!("auto")), ("modalities", json!(["text"]))];
    neutral.extend(hints());
    neutral.push(("safety_identifier", json!("user-7f3a")));
    let resp = post(&gw.url, "/v1/chat/completions", &ask("claude", &neutral)).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let sent = an.last().body;
    assert_eq!(sent["metadata"], json!({ "user_id": "user-7f3a" }), "{sent}");
    for (k, _) in neutral.iter().filter(|(k, _)| *k != "metadata" && *k != "safety_identifier") {
        assert!(sent.get(*k).is_none(), "{k}: {sent}");
    }
    // A field OpenAI does not have either is ax's to refuse in strict mode, said so.
    let resp = post(&gw.url, "/v1/chat/completions", &ask("claude", &[("temprature", json!(1))])).await;
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["message"], "parameter 'temprature' is not supported by ax");
}

#[tokio::test]
async fn lenient_mode_drops_what_the_upstream_cannot_take() {
    let (oa, an) = upstreams().await;
    let gw = gateway(&oa, &an, "lenient").await;
    let resp = post(&gw.url, "/v1/chat/completions", &ask("claude", &openai_only())).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let sent = an.last().body;
    for (k, _) in openai_only() {
        assert!(sent.get(k).is_none(), "{k}: {sent}");
    }
}

/// A Responses stream, event by event: `sequence_number` counts from 0; reasoning, text and a
/// function call are each an output item with its own events; the final response holds all three
/// and the usage. A stream cut short ends with `response.failed`.
#[tokio::test]
async fn a_responses_stream_carries_every_item_in_order() {
    let ev = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({ "id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] })
        )
    };
    let mut s = ev(json!({ "role": "assistant", "reasoning_content": "Think." }), Value::Null);
    s += &ev(json!({ "content": "Checking " }), Value::Null);
    s += &ev(json!({ "content": "now." }), Value::Null);
    s += &ev(
        json!({ "tool_calls": [{ "index": 0, "id": "call_1", "type": "function",
        "function": { "name": "get_weather", "arguments": "{\"city\":" } }] }),
        Value::Null,
    );
    s += &ev(json!({ "tool_calls": [{ "index": 0, "function": { "arguments": "\"Paris\"}" } }] }), json!("tool_calls"));
    s += &format!(
        "data: {}\n\ndata: [DONE]\n\n",
        json!({ "id": "c", "object": "chat.completion.chunk", "created": 1,
        "model": "m", "choices": [], "usage": { "prompt_tokens": 7, "completion_tokens": 9 } })
    );
    let oa = FakeUpstream::fixed(Reply::sse(&s)).await;
    let an =
        FakeUpstream::fixed(Reply::json(wire::anthropic_response(Some("ok"), &[], "end_turn", (3, 2, 0, 0)))).await;
    let gw = gateway(&oa, &an, "strict").await;
    let body = json!({ "model": "team/gpt", "stream": true, "input": "Weather in Paris?",
        "tools": [{ "type": "function", "name": "get_weather", "parameters": { "type": "object" } }] });
    let text = post(&gw.url, "/v1/responses", &body).await.text().await.unwrap();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ],
        "{text}"
    );
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i, "{e}");
    }
    let done = &events[20]["response"];
    assert_eq!(done["status"], "completed");
    let types: Vec<&str> = done["output"].as_array().unwrap().iter().map(|o| o["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["reasoning", "message", "function_call"]);
    assert_eq!(done["output"][1]["content"][0]["text"], "Checking now.");
    assert_eq!(done["output"][2]["arguments"], "{\"city\":\"Paris\"}");
    assert_eq!(done["output"][2]["call_id"], "call_1");
    assert_eq!(done["usage"]["total_tokens"], 16);

    // Cut short after its first event: the stream ends failed, with ax's code.
    let cut = FakeUpstream::fixed(Reply::sse(&ev(json!({ "content": "Hel" }), Value::Null))).await;
    let gw = gateway(&cut, &an, "strict").await;
    let text = post(&gw.url, "/v1/responses", &json!({ "model": "team/gpt", "stream": true, "input": "hi" }))
        .await
        .text()
        .await
        .unwrap();
    let tail: Vec<Value> =
        text.rsplit("data: ").take(2).map(|d| serde_json::from_str(d.lines().next().unwrap()).unwrap()).collect();
    let (last, error) = (&tail[0], &tail[1]);
    assert_eq!(
        (error["type"].as_str(), error["code"].as_str()),
        (Some("error"), Some("upstream_stream_truncated")),
        "{text}"
    );
    assert!(error["message"].is_string() && error.get("param").is_some(), "{error}");
    assert_eq!(last["type"], "response.failed", "{text}");
    assert_eq!(last["sequence_number"], error["sequence_number"].as_u64().unwrap() + 1);
    assert_eq!(last["response"]["error"]["code"], "upstream_stream_truncated");
}

/// Namespaced tools (Codex's sub-agent tools) reach another protocol as `<namespace>__<name>`
/// functions and come back apart; built-in tools the model may use are left out.
#[tokio::test]
async fn namespaced_tools_go_flat_and_come_back_apart() {
    let oa = FakeUpstream::fixed(Reply::json(wire::openai_response(
        None,
        &[("call_9", "agents__spawn", r#"{"task":"x"}"#)],
        "tool_calls",
        (3, 2, 0),
    )))
    .await;
    let (_, an) = upstreams().await;
    let gw = gateway(&oa, &an, "strict").await;
    let body = json!({ "model": "team/gpt", "input": [
            { "role": "user", "content": "go" },
            { "type": "function_call", "call_id": "call_1", "name": "spawn", "namespace": "agents", "arguments": "{}" },
            { "type": "function_call_output", "call_id": "call_1", "output": "ok" } ],
        "tools": [
            { "type": "namespace", "name": "agents", "description": "Sub-agents", "tools": [
                { "type": "function", "name": "spawn", "parameters": { "type": "object" } } ] },
            { "type": "web_search", "external_web_access": false } ] });
    let resp = post(&gw.url, "/v1/responses", &body).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let sent = oa.last().body;
    let names: Vec<&str> =
        sent["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["agents__spawn"], "{sent}");
    assert_eq!(sent["messages"][1]["tool_calls"][0]["function"]["name"], "agents__spawn");
    let r: Value = resp.json().await.unwrap();
    let call = &r["output"][0];
    assert_eq!((call["name"].as_str(), call["namespace"].as_str()), (Some("spawn"), Some("agents")), "{r}");
    assert_eq!(call["call_id"], "call_9");

    // Forcing a built-in tool is refused: no other provider runs it.
    let mut forced = body.clone();
    forced["tool_choice"] = json!({ "type": "web_search" });
    let resp = post(&gw.url, "/v1/responses", &forced).await;
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.json::<Value>().await.unwrap()["error"]["param"], "tool_choice");
}

/// Fields ax does not know reach an OpenAI-compatible upstream that passes them through, as
/// written, on a route that translates (it has an Anthropic candidate too); strict mode plans
/// only such upstreams for them, and refuses them where none does; lenient mode drops them for
/// the others.
#[tokio::test]
async fn unknown_fields_pass_through_to_the_upstreams_that_take_them() {
    let down = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = down.clone();
    let oa = FakeUpstream::start(move |_| {
        if d.load(std::sync::atomic::Ordering::SeqCst) {
            Reply::status(503, json!({ "error": { "message": "busy" } }))
        } else {
            Reply::json(wire::openai_response(Some("ok"), &[], "stop", (3, 2, 0)))
        }
    })
    .await;
    let (_, an) = upstreams().await;
    let model = "{ name: real-model, context_window: 100000, capabilities: [chat, tools, streaming] }";
    let config = |params: &str| {
        format!(
            r#"server: {{ params: {params} }}
upstreams:
  - {{ name: vllm, provider: openai, base_url: "{}/v1", api_key: k, passthrough: [top_k, chat_template_kwargs], models: [{model}] }}
  - {{ name: an, provider: anthropic, base_url: "{}", api_key: k, models: [{model}] }}
routes:
  - {{ alias: mixed, strategy: priority, candidates: [{{ upstream: an, model: real-model, priority: 1 }}, {{ upstream: vllm, model: real-model, priority: 0 }}] }}
  - {{ alias: claude, candidates: [{{ upstream: an, model: real-model }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
            oa.url(),
            an.url(),
            key_digest(KEY)
        )
    };
    let gw = Gateway::start(&config("strict")).await;
    let extra = [("top_k", json!(40)), ("chat_template_kwargs", json!({ "enable_thinking": false }))];
    let resp = post(&gw.url, "/v1/chat/completions", &ask("mixed", &extra)).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let sent = oa.last().body;
    assert_eq!(
        (sent["top_k"].clone(), sent["chat_template_kwargs"].clone()),
        (json!(40), json!({ "enable_thinking": false }))
    );
    assert_eq!(sent["model"], "real-model");
    // Strict: with vLLM down, Anthropic is not planned for them: the upstream's error, not a
    // request Anthropic never asked for.
    down.store(true, std::sync::atomic::Ordering::SeqCst);
    let before = an.hits();
    let resp = post(&gw.url, "/v1/chat/completions", &ask("mixed", &extra)).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(an.hits(), before);
    // A field no upstream takes, or a route without a passthrough upstream: refused, named.
    for (alias, field) in [("mixed", "typo_field"), ("claude", "top_k")] {
        let resp = post(&gw.url, "/v1/chat/completions", &ask(alias, &[(field, json!(1))])).await;
        assert_eq!(resp.status(), 400);
        let e: Value = resp.json().await.unwrap();
        assert_eq!(
            (e["error"]["code"].as_str(), e["error"]["param"].as_str()),
            (Some("unsupported_parameter"), Some(field))
        );
    }
    // Lenient: Anthropic serves without them.
    let gw = Gateway::start(&config("lenient")).await;
    let resp = post(&gw.url, "/v1/chat/completions", &ask("mixed", &extra)).await;
    assert_eq!(resp.status(), 200);
    let sent = an.last().body;
    assert!(sent.get("top_k").is_none() && sent.get("chat_template_kwargs").is_none(), "{sent}");
}

/// An upstream that offers the Responses API (`responses_api: true`, the default for OpenAI's
/// own) is sent a Responses caller's bytes with only the model replaced, and its answer or events
/// come back as it sent them, metered from their usage; a route that also has another kind of
/// upstream translates.
#[tokio::test]
async fn a_responses_caller_is_forwarded_to_an_upstream_that_offers_the_api() {
    let done = json!({ "id": "resp_up1", "object": "response", "status": "completed", "model": "real-model",
        "output": [{ "type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
            "content": [{ "type": "output_text", "text": "Hi!", "annotations": [] }] }],
        "usage": { "input_tokens": 1000, "output_tokens": 500, "total_tokens": 1500,
            "input_tokens_details": { "cached_tokens": 0 }, "output_tokens_details": { "reasoning_tokens": 0 } },
        "vendor_field": { "kept": true } });
    let stream = format!(
        "event: response.created\ndata: {}\n\nevent: response.output_text.delta\ndata: {}\n\nevent: response.completed\ndata: {}\n\n",
        json!({ "type": "response.created", "sequence_number": 0, "response": { "id": "resp_up1", "status": "in_progress" } }),
        json!({ "type": "response.output_text.delta", "sequence_number": 1, "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "Hi!" }),
        json!({ "type": "response.completed", "sequence_number": 2, "response": done })
    );
    let (d, s) = (done.clone(), stream.clone());
    let oa = FakeUpstream::start(move |r| {
        if r.path.ends_with("/responses") {
            if r.body["stream"] == true {
                Reply::sse(&s)
            } else if r.body["input"] == "fail" {
                Reply::json(json!({ "id": "resp_x", "object": "response", "status": "failed",
                    "error": { "code": "server_error", "message": "boom" }, "output": [] }))
            } else {
                Reply::json(d.clone())
            }
        } else {
            Reply::json(wire::openai_response(Some("translated"), &[], "stop", (3, 2, 0)))
        }
    })
    .await;
    let (_, an) = upstreams().await;
    let model = "{ name: real-model, context_window: 100000, capabilities: [chat, tools, streaming], price_per_mtok: { input: 1, output: 2 } }";
    let gw = Gateway::start(&format!(
        r#"upstreams:
  - {{ name: oa, provider: openai, base_url: "{}/v1", api_key: k, responses_api: true, models: [{model}] }}
  - {{ name: an, provider: anthropic, base_url: "{}", api_key: k, models: [{model}] }}
routes:
  - {{ alias: gpt, candidates: [{{ upstream: oa, model: real-model }}] }}
  - {{ alias: mixed, strategy: priority, candidates: [{{ upstream: oa, model: real-model, priority: 0 }}, {{ upstream: an, model: real-model, priority: 1 }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
        oa.url(),
        an.url(),
        key_digest(KEY)
    ))
    .await;
    let body = json!({ "model": "gpt", "input": "hi", "tools": [{ "type": "web_search" }],
        "previous_response_id": "resp_upstream_own", "some_new_field": { "x": 1 } });
    let resp = post(&gw.url, "/v1/responses", &body).await;
    assert_eq!(resp.status(), 200);
    // 1000 input tokens at $1/M and 500 output at $2/M.
    assert_eq!(resp.headers()["x-ax-cost-usd"], "0.002000");
    assert_eq!(resp.json::<Value>().await.unwrap(), done);
    let sent = oa.last();
    assert_eq!(sent.path, "/v1/responses");
    let mut want = body.clone();
    want["model"] = json!("real-model");
    assert_eq!(sent.body, want);

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let resp = post(&gw.url, "/v1/responses", &streamed).await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    // As the upstream sent it, but for ax's facts in the last event (`response.completed`).
    let (text, facts) = ax_tests::without_ax(&resp.text().await.unwrap());
    assert_eq!(text, stream);
    let facts = facts.expect("ax facts");
    assert_eq!(
        (facts["cost_usd"].as_str(), facts["model"].as_str()),
        (Some("0.002000"), Some("real-model")),
        "{facts}"
    );

    let resp = post(&gw.url, "/v1/responses", &json!({ "model": "gpt", "input": "fail" })).await;
    assert_eq!(resp.status(), 502);

    // A route with an Anthropic candidate too is translated: the OpenAI upstream gets Chat Completions.
    let resp = post(&gw.url, "/v1/responses", &json!({ "model": "mixed", "input": "hi", "store": false })).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.unwrap()["output"][0]["content"][0]["text"], "translated");
    assert_eq!(oa.last().path, "/v1/chat/completions");
}
